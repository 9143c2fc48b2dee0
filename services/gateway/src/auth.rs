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

/// Whether `header` (the Authorization header's value) carries one of `tokens`.
/// Compared in constant time for equal lengths, so that timing does not
/// reveal how much of a token matched.
pub fn authorised(header: Option<&str>, tokens: &[String]) -> bool {
    let Some(given) = header.and_then(|h| h.strip_prefix("Bearer ")).map(str::trim) else {
        return false;
    };
    tokens.iter().fold(false, |ok, t| ok | constant_time_eq(given.as_bytes(), t.as_bytes()))
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
    fn only_a_listed_bearer_token_passes() {
        let tokens = vec!["s3cret".to_string(), "rotated".to_string()];
        assert!(authorised(Some("Bearer s3cret"), &tokens));
        assert!(authorised(Some("Bearer rotated"), &tokens));
        assert!(!authorised(Some("Bearer s3cre"), &tokens));
        assert!(!authorised(Some("Bearer s3cretX"), &tokens));
        assert!(!authorised(Some("Basic s3cret"), &tokens));
        assert!(!authorised(Some("s3cret"), &tokens));
        assert!(!authorised(None, &tokens));
    }
}
