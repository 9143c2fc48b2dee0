//! Bearer-token authentication at the edge (the internal side is mTLS).

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
