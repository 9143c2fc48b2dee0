//! What an HTTP caller may read of an error: no internal address (issue
//! #49). A metadata replica's or a bookie's address in an error body tells
//! an outside caller the cluster's layout and nothing it can act on; the
//! gateway's log keeps the whole error for the operator.
//!
//! Errors come up from the client library with the peer that answered
//! (`BadRequest from 10.0.0.7:4181: ...`, `cannot connect to
//! quire-metadata-0.quire-metadata:4181: ...`). The library passes a
//! metadata answer's words on without the peer where it can
//! (`RpcError::answer`); this is the backstop at the boundary, over every
//! message the gateway writes, so an error path added later cannot leak one.

use std::borrow::Cow;

/// Said in place of an address.
pub const HIDDEN: &str = "(an internal address)";

/// `message` with every network address in it replaced by [`HIDDEN`]:
/// `host:port` (a name or an IPv4 address) and `[v6]` with or without a
/// port, as the services print a socket address. A dotted name without a
/// port is left: a log may be called `10.0.0.1`, and its name in an error
/// is the caller's own. A producer id shaped like `name:123` (producer ids
/// are any bytes) is hidden as an address: nothing tells the two apart.
pub fn without_addresses(message: &str) -> Cow<'_, str> {
    let spans = address_spans(message);
    if spans.is_empty() {
        return Cow::Borrowed(message);
    }
    let mut out = String::with_capacity(message.len());
    let mut at = 0;
    for (start, end) in spans {
        out.push_str(&message[at..start]);
        out.push_str(HIDDEN);
        at = end;
    }
    out.push_str(&message[at..]);
    Cow::Owned(out)
}

fn is_host_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'_'
}

/// The byte ranges of the addresses in `s`, in order, not overlapping.
fn address_spans(s: &str) -> Vec<(usize, usize)> {
    let b = s.as_bytes();
    let mut spans: Vec<(usize, usize)> = Vec::new();
    let mut i = 0;
    while i < b.len() {
        // A word: a run of host bytes, or a bracketed IPv6 address.
        let start = i;
        let end = if b[i] == b'[' {
            match b[i + 1..].iter().position(|&c| c == b']') {
                // An IPv6 address, with a zone (`fe80::1%eth0`) perhaps.
                Some(n)
                    if n > 0
                        && b[i + 1..i + 1 + n].contains(&b':')
                        && b[i + 1..i + 1 + n].iter().all(|&c| is_host_byte(c) || c == b':' || c == b'%') =>
                {
                    i + 2 + n
                }
                _ => {
                    i += 1;
                    continue;
                }
            }
        } else if is_host_byte(b[i]) {
            let mut j = i;
            while j < b.len() && is_host_byte(b[j]) {
                j += 1;
            }
            j
        } else {
            i += 1;
            continue;
        };
        let word = &s[start..end];
        // A port: ':' and 1 to 5 digits, ending the token.
        let port_end = port_after(b, end);
        let host_like = word.starts_with('[') || word.bytes().any(|c| c.is_ascii_alphabetic()) || is_ipv4(word);
        if let Some(port_end) = port_end.filter(|_| host_like) {
            spans.push((start, port_end));
            i = port_end;
        } else if word.starts_with('[') && word.contains(':') {
            spans.push((start, end));
            i = end;
        } else {
            i = end.max(start + 1);
        }
    }
    spans
}

/// Where a `:port` that starts at `at` ends, if one does: 1 to 5 digits,
/// then the end or a byte that cannot continue a word (`12:30:00` and
/// `x:1a` are not ports).
fn port_after(b: &[u8], at: usize) -> Option<usize> {
    if b.get(at) != Some(&b':') {
        return None;
    }
    let digits = b[at + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
    let end = at + 1 + digits;
    let ends_token = match b.get(end) {
        None => true,
        Some(c) => !(c.is_ascii_alphanumeric() || *c == b'_' || *c == b'-'),
    };
    // A full stop or a colon ends a port ("...:4181." or "from 10.0.0.7:4181:
    // ...") unless a digit follows: "1.2" and "12:30:00" go on.
    let ends_token =
        ends_token && !(matches!(b.get(end), Some(b'.' | b':')) && b.get(end + 1).is_some_and(u8::is_ascii_digit));
    ((1..=5).contains(&digits) && ends_token).then_some(end)
}

/// Four dot-separated numbers of at most three digits.
fn is_ipv4(word: &str) -> bool {
    let parts: Vec<&str> = word.split('.').collect();
    parts.len() == 4 && parts.iter().all(|p| (1..=3).contains(&p.len()) && p.bytes().all(|c| c.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_go_and_the_rest_of_the_message_stays() {
        for (input, want) in [
            (
                "bad request: BadRequest from 127.0.0.1:20701: ledger 60 is in log 00: trim the log or delete it instead",
                "bad request: BadRequest from (an internal address): ledger 60 is in log 00: trim the log or delete it instead",
            ),
            (
                "metadata service unavailable: cannot connect to quire-metadata-0.quire-metadata.quire.svc:4181: timed out",
                "metadata service unavailable: cannot connect to (an internal address): timed out",
            ),
            ("connection to [::1]:3181 lost: reset", "connection to (an internal address) lost: reset"),
            ("connection to [fe80::1%eth0]:3181 lost", "connection to (an internal address) lost"),
            ("bookies 10.0.0.7:3181, [::1] did not answer", "bookies (an internal address), (an internal address) did not answer"),
            ("timed out calling Read on localhost:3181.", "timed out calling Read on (an internal address)."),
            ("peer 10.1.2.3:9 is quire://bookie/b1", "peer (an internal address) is quire://bookie/b1"),
        ] {
            assert_eq!(without_addresses(input), want, "{input}");
        }
    }

    /// What is not an address is left as it was, unallocated.
    #[test]
    fn messages_without_an_address_are_untouched() {
        for m in [
            "ledger 60 is in log 00: trim the log or delete it instead",
            "producer p-1: sequence 5 is at or below its last (7) and too old to tell",
            "bad JSON: expected value at line 1 column 2",
            "entry 12:30:00 and x:1a and v1.2.3 and 1.5",
            "an entry is at most 65536 bytes",
            "offset 3 of log a.b-c_d is trimmed (the log starts at 5)",
            "quire://gateway/1 may read or recover it",
            "no such log 10.0.0.1",
        ] {
            assert!(matches!(without_addresses(m), Cow::Borrowed(_)), "{m}: {}", without_addresses(m));
        }
    }
}
