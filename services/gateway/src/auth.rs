//! Bearer-token authentication at the edge (the internal side is mTLS).
//!
//! With tokens configured, every request needs one except the few that
//! probes and scrapers make, named exactly as sent ([`open_without_token`]).
//! Deny by default, on the raw path: the router decodes percent-escapes
//! and dot segments, so a guard that looked for a `/v1/` prefix in the raw
//! path let `DELETE /%761/ledgers/4` through (issue #20 item 1). Here an
//! unusual spelling of an open path needs a token too, and no spelling of
//! an API path can avoid one.

/// The paths open without a token, byte for byte as sent: health,
/// readiness, metrics and the API's own description.
const OPEN_PATHS: &[&str] = &["/healthz", "/readyz", "/metrics", "/openapi.json"];

/// Whether a request may go without a token: a read (GET or HEAD) of one of
/// [`OPEN_PATHS`], spelled exactly so.
pub fn open_without_token(method: &actix_web::http::Method, raw_path: &str) -> bool {
    use actix_web::http::Method;
    (method == Method::GET || method == Method::HEAD) && OPEN_PATHS.contains(&raw_path)
}

/// Who an HTTP request was authenticated as; the guard puts it in the
/// request's extensions. Ledgers created through the gateway record it
/// (`quire.principal`), and only it may append to, close or delete them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal(pub String);

impl Principal {
    /// Every caller, when no tokens are configured.
    pub fn anonymous() -> Principal {
        Principal("anonymous".into())
    }
}

/// A configured bearer token and the principal it authenticates.
pub struct Token {
    principal: String,
    secret: String,
}

/// The tokens in force, replaced whole on reload (SIGHUP): requests read a
/// snapshot, so one sees the old set or the new, never a mix.
pub struct TokenSet(std::sync::RwLock<std::sync::Arc<Vec<Token>>>);

impl TokenSet {
    pub fn new(tokens: Vec<Token>) -> TokenSet {
        TokenSet(std::sync::RwLock::new(std::sync::Arc::new(tokens)))
    }

    /// The tokens in force now.
    pub fn current(&self) -> std::sync::Arc<Vec<Token>> {
        self.0.read().expect("tokens lock").clone()
    }

    /// Re-reads `path`; a file that cannot be read, does not parse or holds
    /// no token keeps the tokens in force (a rotation half-written must not
    /// lock everyone out, nor open the API), and says why.
    pub fn reload(&self, path: &std::path::Path) {
        match load_tokens(path) {
            Ok(t) => {
                let principals: Vec<String> = t.iter().map(|t| t.principal.clone()).collect();
                *self.0.write().expect("tokens lock") = std::sync::Arc::new(t);
                tracing::info!(?principals, "reloaded the bearer tokens");
            }
            Err(e) => tracing::error!(error = %e, "kept the bearer tokens in force: the new file is not usable"),
        }
    }
}

/// Reads and parses a token file; one that holds no token is an error.
pub fn load_tokens(path: &std::path::Path) -> Result<Vec<Token>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("read {}: {e}", path.display()))?;
    let t = parse_tokens(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    if t.is_empty() {
        return Err(format!("{} holds no token", path.display()));
    }
    Ok(t)
}

/// Reads a token file: one token per line, `NAME TOKEN` (NAME is the
/// principal it authenticates: letters, digits, `.`, `_`, `-`, at most 64)
/// or a bare `TOKEN`, whose principal is `token-` and the first 12 hex
/// digits of its SHA-256 (stable, and useless to a reader of logs). Blank
/// lines and lines starting with `#` are skipped.
pub fn parse_tokens(text: &str) -> Result<Vec<Token>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (principal, secret) = match fields[..] {
            [secret] => {
                let d = ring::digest::digest(&ring::digest::SHA256, secret.as_bytes());
                let hex: String = d.as_ref()[..6].iter().map(|b| format!("{b:02x}")).collect();
                (format!("token-{hex}"), secret)
            }
            [name, secret] => {
                let ok = !name.is_empty()
                    && name.len() <= 64
                    && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
                if !ok {
                    return Err(format!("line {}: a principal is 1-64 of [A-Za-z0-9._-], not {name:?}", n + 1));
                }
                (name.to_string(), secret)
            }
            _ => return Err(format!("line {}: expected `TOKEN` or `NAME TOKEN`", n + 1)),
        };
        // A name must not pose as another principal: `anonymous` owns what
        // was created without tokens, `token-…` names unnamed tokens.
        if fields.len() == 2 && (principal == "anonymous" || principal.starts_with("token-")) {
            return Err(format!("line {}: the principal name {principal:?} is reserved", n + 1));
        }
        if out.iter().any(|t: &Token| t.secret == secret) {
            return Err(format!("line {}: a token listed twice", n + 1));
        }
        out.push(Token { principal, secret: secret.to_string() });
    }
    Ok(out)
}

/// The principal whose token `header` (the Authorization header's value)
/// carries. Every token is compared, in constant time for equal lengths,
/// so that timing does not reveal how much of a token matched.
pub fn principal_of<'a>(header: Option<&str>, tokens: &'a [Token]) -> Option<&'a str> {
    let given = header.and_then(|h| h.strip_prefix("Bearer ")).map(str::trim)?;
    tokens.iter().fold(None, |found, t| {
        let hit = constant_time_eq(given.as_bytes(), t.secret.as_bytes());
        if hit {
            Some(t.principal.as_str())
        } else {
            found
        }
    })
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_exact_reads_of_the_open_paths_go_without_a_token() {
        use actix_web::http::Method;
        assert!(open_without_token(&Method::GET, "/healthz"));
        assert!(open_without_token(&Method::HEAD, "/metrics"));
        assert!(open_without_token(&Method::GET, "/openapi.json"));
        for p in ["/%68ealthz", "/healthz/", "//healthz", "/./readyz", "/v1/ledgers", "/%761/ledgers", "/", ""] {
            assert!(!open_without_token(&Method::GET, p), "{p}");
        }
        assert!(!open_without_token(&Method::POST, "/healthz"));
        assert!(!open_without_token(&Method::DELETE, "/readyz"));
    }

    #[test]
    fn only_a_listed_bearer_token_passes_and_names_its_principal() {
        let tokens = parse_tokens("# ops\nalice s3cret\n\nrotated\n").unwrap();
        assert_eq!(principal_of(Some("Bearer s3cret"), &tokens), Some("alice"));
        let unnamed = principal_of(Some("Bearer rotated"), &tokens).unwrap();
        assert!(unnamed.starts_with("token-") && unnamed.len() == 18 && !unnamed.contains("rotated"), "{unnamed}");
        for bad in [Some("Bearer s3cre"), Some("Bearer s3cretX"), Some("Basic s3cret"), Some("s3cret"), None] {
            assert_eq!(principal_of(bad, &tokens), None, "{bad:?}");
        }
        assert!(parse_tokens("al ice s3cret").is_err());
        assert!(parse_tokens("al/ice s3cret").is_err());
        assert!(parse_tokens("anonymous s3cret").is_err(), "would own what was created without tokens");
        assert!(parse_tokens("token-0123456789ab s3cret").is_err(), "would pose as an unnamed token");
        assert!(parse_tokens("a s3cret\nb s3cret").is_err(), "one secret, two principals");
        // One name, two secrets: a rotation under way.
        let both = parse_tokens("a one\na two").unwrap();
        assert_eq!(
            (principal_of(Some("Bearer one"), &both), principal_of(Some("Bearer two"), &both)),
            (Some("a"), Some("a"))
        );
    }
}
