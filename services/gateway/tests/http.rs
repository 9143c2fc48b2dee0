//! The HTTP API v1 against a real cluster: 3 metadata replicas, 3 bookies and
//! the gateway, as processes.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use base64::Engine;
use quire_pki::{init_dir, IssueOptions, LocalCluster};
use quire_testkit::{bin_path, Process, TestCluster};
use serde_json::{json, Value};

struct Gateway {
    _dir: tempfile::TempDir,
    cluster: TestCluster,
    _proc: Process,
    http: String,
}

fn start() -> Gateway {
    start_with(None, 3)
}

fn start_with_token(token: Option<&str>) -> Gateway {
    start_with(token, 3)
}

fn start_with(token: Option<&str>, bookies: usize) -> Gateway {
    start_full(token, bookies, false)
}

/// A cluster of `bookies` bookies and a gateway; with `token`, the gateway
/// requires it; with `https`, it serves HTTPS with its own certificate.
fn start_full(token: Option<&str>, bookies: usize, https: bool) -> Gateway {
    start_args(token, bookies, https, &[])
}

/// As [`start_full`], with extra gateway flags.
fn start_args(token: Option<&str>, bookies: usize, https: bool, extra: &[&str]) -> Gateway {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    init_dir(&certs, "test", &LocalCluster { metadata: 3, bookies: bookies as u32 }, &IssueOptions::default()).unwrap();
    let racks: Vec<String> = (0..bookies).map(|i| format!("r{}", i % 3 + 1)).collect();
    let racks: Vec<&str> = racks.iter().map(String::as_str).collect();
    let cluster = TestCluster::start(dir.path(), &certs, &racks, &["--lease-ms", "3000"]).unwrap();
    let ready = dir.path().join("gateway.ready");
    let http_ready = dir.path().join("gateway-http.ready");
    let metadata = cluster.metadata_flag();
    let token_file = dir.path().join("tokens");
    let mut args = vec![
        "--certs-dir",
        certs.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--ready-file",
        ready.to_str().unwrap(),
        "--metadata",
        &metadata,
        "--http-listen",
        "127.0.0.1:0",
        "--http-ready-file",
        http_ready.to_str().unwrap(),
        "--max-entry-bytes",
        "65536",
    ];
    if let Some(t) = token {
        std::fs::write(&token_file, format!("other-token\n{t}\n")).unwrap();
        args.extend(["--auth-token-file", token_file.to_str().unwrap()]);
    }
    args.extend(extra);
    let (cert, key) = (certs.join("gateway-1.pem"), certs.join("gateway-1.key"));
    if https {
        args.extend(["--https-cert", cert.to_str().unwrap(), "--https-key", key.to_str().unwrap()]);
    }
    let mut p = Process::spawn("gateway", &bin_path("quire-gateway"), &args, dir.path()).unwrap();
    p.wait_ready(&ready, Duration::from_secs(30)).unwrap();
    let http = p.wait_ready(&http_ready, Duration::from_secs(30)).unwrap();
    let g = Gateway { _dir: dir, cluster, _proc: p, http };
    if https {
        return g;
    }
    // Ready once the bookies are registered.
    quire_testkit::wait_until(Duration::from_secs(20), "gateway ready with every bookie", || {
        let (status, body) = g.call("GET", "/readyz", None, b"");
        (status == 200 && json(&body)["bookies"].as_u64() == Some(bookies as u64)).then_some(())
    })
    .unwrap();
    g
}

impl Gateway {
    fn call(&self, method: &str, path: &str, content_type: Option<&str>, body: &[u8]) -> (u16, Vec<u8>) {
        call(&self.http, method, path, content_type, body)
    }

    fn json(&self, method: &str, path: &str, body: &str) -> (u16, Value) {
        let (status, b) = self.call(method, path, Some("application/json"), body.as_bytes());
        (status, json(&b))
    }
}

/// One HTTP/1.1 request on its own connection: (status, body).
fn call(http: &str, method: &str, path: &str, content_type: Option<&str>, body: &[u8]) -> (u16, Vec<u8>) {
    let (status, _, body) = call_full(http, method, path, content_type, body);
    (status, body)
}

/// As [`call`], with the response head.
fn call_full(http: &str, method: &str, path: &str, content_type: Option<&str>, body: &[u8]) -> (u16, String, Vec<u8>) {
    call_with(http, method, path, content_type, &[], body)
}

/// As [`call_full`], with extra request headers.
fn call_with(
    http: &str,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String, Vec<u8>) {
    {
        let mut s = TcpStream::connect(http).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: quire\r\nConnection: close\r\nContent-Length: {}\r\n",
            body.len()
        );
        if let Some(ct) = content_type {
            head.push_str(&format!("Content-Type: {ct}\r\n"));
        }
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        s.write_all(head.as_bytes()).unwrap();
        s.write_all(body).unwrap();
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).unwrap();
        let split = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("a response head");
        let head = String::from_utf8_lossy(&raw[..split]).to_string();
        let status: u16 = head.split_whitespace().nth(1).unwrap().parse().unwrap();
        let mut body = raw[split + 4..].to_vec();
        if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
            body = dechunk(&body);
        }
        // Every test's every error, and every stream's error line: no
        // answer names an internal address (issue #49). Every process of
        // these clusters listens on 127.0.0.1.
        let text = String::from_utf8_lossy(&body);
        if status >= 400 || text.contains("\"error\"") {
            assert!(!text.contains("127.0.0.1:"), "{method} {path}: an answer names an internal address: {text}");
        }
        (status, head, body)
    }
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let eol = b.windows(2).position(|w| w == b"\r\n").unwrap();
        let n = usize::from_str_radix(std::str::from_utf8(&b[..eol]).unwrap().trim(), 16).unwrap();
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&b[eol + 2..eol + 2 + n]);
        b = &b[eol + 2 + n + 2..];
    }
}

fn json(b: &[u8]) -> Value {
    serde_json::from_slice(b).unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(b)))
}

fn error_of(v: &Value) -> &str {
    v["error"].as_str().unwrap_or_else(|| panic!("no error code in {v}"))
}

#[test]
fn a_ledger_is_created_written_tailed_read_closed_and_deleted_over_http() {
    let g = start();
    let (status, l) = g.json(
        "POST",
        "/v1/ledgers",
        r#"{"ensemble":3,"write_quorum":3,"ack_quorum":2,"metadata":{"app":"http-test"}}"#,
    );
    assert_eq!(status, 201, "{l}");
    assert_eq!(
        (l["state"].as_str(), l["ensemble"].as_u64(), l["last_entry_id"].as_i64()),
        (Some("open"), Some(3), Some(-1))
    );
    assert_eq!(l["metadata"]["app"], "http-test");
    assert_eq!(l["ensembles"][0]["first_entry_id"], 0);
    assert_eq!(l["ensembles"][0]["bookies"].as_array().unwrap().len(), 3);
    let id = l["ledger_id"].as_u64().unwrap();

    for i in 0..3u64 {
        let (status, b) = g.call(
            "POST",
            &format!("/v1/ledgers/{id}/entries"),
            Some("application/octet-stream"),
            format!("raw-{i}").as_bytes(),
        );
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&b));
        assert_eq!(json(&b)["entry_id"], i);
    }
    let b64 = base64::engine::general_purpose::STANDARD;
    let batch = serde_json::json!({ "entries": [b64.encode("b-3"), b64.encode("b-4"), b64.encode([0u8, 255, 7])] });
    let (status, r) = g.json("POST", &format!("/v1/ledgers/{id}/entries:batch"), &batch.to_string());
    assert_eq!((status, r["first_entry_id"].as_u64(), r["last_entry_id"].as_u64()), (200, Some(3), Some(5)), "{r}");

    let (status, lac) = g.json("GET", &format!("/v1/ledgers/{id}/lac?after=4&timeout_ms=10000"), "");
    assert_eq!((status, lac["lac"].as_i64()), (200, Some(5)), "{lac}");
    // Tail: a long poll answers when entry 6 lands.
    let tail = {
        let http = g.http.clone();
        std::thread::spawn(move || {
            call(&http, "GET", &format!("/v1/ledgers/{id}/lac?after=5&timeout_ms=30000"), None, b"")
        })
    };
    let (status, _) = g.call("POST", &format!("/v1/ledgers/{id}/entries"), None, b"raw-6");
    assert_eq!(status, 200);
    let (status, lac) = tail.join().unwrap();
    assert_eq!(status, 200);
    assert!(json(&lac)["lac"].as_i64().unwrap() >= 6, "{}", String::from_utf8_lossy(&lac));

    let (status, one) = g.call("GET", &format!("/v1/ledgers/{id}/entries/5"), None, b"");
    assert_eq!((status, one), (200, vec![0u8, 255, 7]));
    let (status, range) = g.json("GET", &format!("/v1/ledgers/{id}/entries?from=1&to=100"), "");
    assert_eq!(status, 200, "{range}");
    let got: Vec<(u64, Vec<u8>)> = range["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["entry_id"].as_u64().unwrap(), b64.decode(e["data"].as_str().unwrap()).unwrap()))
        .collect();
    assert_eq!(got.len(), 6, "cut at the LAC: {range}");
    assert_eq!(got[0], (1, b"raw-1".to_vec()));
    assert_eq!(got[3], (4, b"b-4".to_vec()));
    // Without to= (u64::MAX, past any LAC): the same.
    let (status, open_ended) = g.json("GET", &format!("/v1/ledgers/{id}/entries?from=1"), "");
    assert_eq!((status, &open_ended["entries"]), (200, &range["entries"]), "{open_ended}");

    let (status, closed) = g.json("POST", &format!("/v1/ledgers/{id}/close"), "");
    assert_eq!(
        (status, closed["state"].as_str(), closed["last_entry_id"].as_i64()),
        (200, Some("closed"), Some(6)),
        "{closed}"
    );
    assert_eq!(closed["length"], 3 * 5 + 3 * 3 + 5);
    let (status, again) = g.json("POST", &format!("/v1/ledgers/{id}/close"), "");
    assert_eq!((status, again["state"].as_str()), (200, Some("closed")), "closing twice is fine");
    let (status, e) = g.json("POST", &format!("/v1/ledgers/{id}/entries"), "x");
    assert_eq!((status, error_of(&e)), (409, "LedgerClosed"));

    let (status, list) = g.json("GET", "/v1/ledgers?limit=10", "");
    assert_eq!(status, 200);
    assert!(list["ledgers"].as_array().unwrap().iter().any(|x| x == id), "{list}");
    let (status, meta) = g.json("GET", &format!("/v1/ledgers/{id}"), "");
    assert_eq!((status, meta["state"].as_str()), (200, Some("closed")));

    let (status, _) = g.call("DELETE", &format!("/v1/ledgers/{id}"), None, b"");
    assert_eq!(status, 204);
    let (status, e) = g.json("GET", &format!("/v1/ledgers/{id}"), "");
    assert_eq!((status, error_of(&e)), (404, "NoSuchLedger"));
    let _ = &g.cluster;
}

#[test]
fn bad_input_gets_the_documented_error_and_stored_data_stays_intact() {
    let g = start();
    let (status, l) = g.json("POST", "/v1/ledgers", "");
    assert_eq!((status, l["ensemble"].as_u64()), (201, Some(3)), "an empty body takes the defaults: {l}");
    let id = l["ledger_id"].as_u64().unwrap();
    let (status, _) = g.call("POST", &format!("/v1/ledgers/{id}/entries"), None, b"keep-me");
    assert_eq!(status, 200);
    // Acknowledged, so readable at once (the gateway holds the writer).
    let (status, body) = g.call("GET", &format!("/v1/ledgers/{id}/entries/0"), None, b"");
    assert_eq!((status, body), (200, b"keep-me".to_vec()));

    let cases: Vec<(&str, String, &str, u16, &str)> = vec![
        ("POST", "/v1/ledgers".into(), "{not json", 400, "BadRequest"),
        ("POST", "/v1/ledgers".into(), r#"{"ensemble":"three"}"#, 400, "BadRequest"),
        ("POST", "/v1/ledgers".into(), r#"{"ensembel":3}"#, 400, "BadRequest"),
        ("POST", "/v1/ledgers".into(), r#"{"ensemble":2,"write_quorum":3}"#, 400, "BadRequest"),
        ("POST", "/v1/ledgers".into(), r#"{"ensemble":9}"#, 503, "NotEnoughBookies"),
        ("POST", format!("/v1/ledgers/{id}/entries:batch"), r#"{"entries":["not base64!"]}"#, 400, "BadRequest"),
        ("POST", format!("/v1/ledgers/{id}/entries:batch"), r#"{"entries":[]}"#, 400, "BadRequest"),
        ("POST", format!("/v1/ledgers/{id}/entries:batch"), r#"{"entries":"x"}"#, 400, "BadRequest"),
        ("GET", "/v1/ledgers/abc".into(), "", 400, "BadRequest"),
        ("GET", "/v1/ledgers/-1".into(), "", 400, "BadRequest"),
        ("GET", "/v1/ledgers/999999".into(), "", 404, "NoSuchLedger"),
        ("POST", "/v1/ledgers/999999/entries".into(), "x", 404, "NoSuchLedger"),
        ("GET", format!("/v1/ledgers/{id}/entries/7"), "", 404, "NoSuchEntry"),
        ("GET", format!("/v1/ledgers/{id}/entries?from=5&to=1"), "", 400, "BadRequest"),
        ("GET", format!("/v1/ledgers/{id}/entries?from=x"), "", 400, "BadRequest"),
        ("GET", format!("/v1/ledgers/{id}/lac?after=-5"), "", 400, "BadRequest"),
        ("GET", "/v1/nothing-here".into(), "", 404, "NotFound"),
    ];
    for (method, path, body, want_status, want_code) in cases {
        let (status, v) = g.json(method, &path, body);
        assert_eq!((status, error_of(&v)), (want_status, want_code), "{method} {path} {body}: {v}");
        assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
    }
    // An entry over the limit (65536 here) is refused before it is all read.
    let (status, v) = g.call("POST", &format!("/v1/ledgers/{id}/entries"), None, &vec![1u8; 65537]);
    assert_eq!((status, error_of(&json(&v))), (413, "EntryTooLarge"));
    let big = base64::engine::general_purpose::STANDARD.encode(vec![1u8; 65537]);
    let (status, v) =
        g.json("POST", &format!("/v1/ledgers/{id}/entries:batch"), &format!(r#"{{"entries":["{big}"]}}"#));
    assert_eq!((status, error_of(&v)), (413, "EntryTooLarge"));

    // A ledger this gateway did not create: NotWriter.
    let other = {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let c = library_client(&g);
            let w = c.create(quire_client::CreateLedger::default()).await.unwrap();
            w.add(bytes::Bytes::from_static(b"from-the-library")).await.unwrap();
            w.ledger_id()
        })
    };
    let (status, v) = g.json("POST", &format!("/v1/ledgers/{other}/entries"), "x");
    assert_eq!((status, error_of(&v)), (409, "NotWriter"));
    let (status, v) = g.json("POST", &format!("/v1/ledgers/{other}/close"), "");
    assert_eq!((status, error_of(&v)), (409, "NotWriter"));
    // ...which any gateway may recover: fenced, recovered to its tail, closed.
    let (status, v) = g.json("POST", &format!("/v1/ledgers/{other}/recover"), "");
    assert_eq!((status, v["state"].as_str(), v["last_entry_id"].as_i64()), (200, Some("closed"), Some(0)), "{v}");
    // This call fenced, and says how long that took within the whole.
    let (fence_us, total_us) = (v["recovery"]["fence_us"].as_u64(), v["recovery"]["total_us"].as_u64());
    assert_eq!(v["recovery"]["fenced"], true, "{v}");
    assert!(fence_us.zip(total_us).is_some_and(|(f, t)| f <= t), "{v}");
    // Again: closed already, nothing fenced.
    let (status, v) = g.json("POST", &format!("/v1/ledgers/{other}/recover"), "");
    assert_eq!((status, &v["recovery"]["fenced"], &v["recovery"]["fence_us"]), (200, &json!(false), &Value::Null));
    let (status, body) = g.call("GET", &format!("/v1/ledgers/{other}/entries/0"), None, b"");
    assert_eq!((status, body), (200, b"from-the-library".to_vec()));

    // After all of it, the data is intact.
    let (status, body) = g.call("GET", &format!("/v1/ledgers/{id}/entries/0"), None, b"");
    assert_eq!((status, body), (200, b"keep-me".to_vec()));
    let (status, v) = g.json("GET", "/healthz", "");
    assert_eq!((status, v["status"].as_str()), (200, Some("ok")));
    let (status, v) = g.json("GET", "/readyz", "");
    assert_eq!((status, v["bookies"].as_u64()), (200, Some(3)));
    let (status, metrics) = g.call("GET", "/metrics", None, b"");
    let metrics = String::from_utf8(metrics).unwrap();
    assert_eq!(status, 200);
    assert!(metrics.contains("quire_gateway_appends_total 1\n"), "{metrics}");
    assert!(metrics.contains("quire_gateway_errors_total "), "{metrics}");
    let (status, v) = g.json("GET", "/v1/cluster", "");
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["bookies"].as_array().unwrap().len(), 3);
    assert_eq!(v["metadata"]["voters"].as_array().unwrap().len(), 3);
    assert!(v["metadata"]["leader_address"].as_str().is_some_and(|a| a.starts_with("127.0.0.1:")), "{v}");
}

#[test]
fn a_long_range_is_streamed_not_buffered() {
    let g = start();
    let (_, l) = g.json("POST", "/v1/ledgers", "");
    let id = l["ledger_id"].as_u64().unwrap();
    let b64 = base64::engine::general_purpose::STANDARD;
    let data = |i: usize| format!("{i:04}-{}", "y".repeat(1019)).into_bytes();
    for chunk in 0..4 {
        let entries: Vec<String> = (chunk * 250..(chunk + 1) * 250).map(|i| b64.encode(data(i))).collect();
        let (status, r) = g.json(
            "POST",
            &format!("/v1/ledgers/{id}/entries:batch"),
            &serde_json::json!({ "entries": entries }).to_string(),
        );
        assert_eq!(status, 200, "{r}");
    }
    let (status, head, body) = call_full(&g.http, "GET", &format!("/v1/ledgers/{id}/entries?from=0"), None, b"");
    assert_eq!(status, 200);
    assert!(head.to_ascii_lowercase().contains("transfer-encoding: chunked"), "streamed: {head}");
    let v = json(&body);
    let entries = v["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1000);
    for (i, e) in entries.iter().enumerate() {
        assert_eq!(e["entry_id"].as_u64(), Some(i as u64));
        assert_eq!(b64.decode(e["data"].as_str().unwrap()).unwrap(), data(i));
    }
    // Past the LAC: an empty list, not an error.
    let (status, v) = g.json("GET", &format!("/v1/ledgers/{id}/entries?from=5000"), "");
    assert_eq!((status, v["entries"].as_array().map(Vec::len)), (200, Some(0)));
}

#[test]
fn a_ledger_written_over_http_reads_back_through_the_cli_and_the_other_way_round() {
    let g = start();
    let certs = g.cluster.certs.to_str().unwrap().to_string();
    let metadata = g.cluster.metadata_flag();
    let cli = |args: &[&str], stdin: &[u8]| -> String {
        let mut child = std::process::Command::new(bin_path("quire"))
            .args(["ledger", "--metadata", &metadata, "--certs-dir", &certs])
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .env("RUST_BACKTRACE", "0")
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(stdin).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "quire ledger {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    // HTTP -> CLI.
    let (_, l) = g.json("POST", "/v1/ledgers", "");
    let id = l["ledger_id"].as_u64().unwrap();
    for line in ["over", "http"] {
        assert_eq!(g.call("POST", &format!("/v1/ledgers/{id}/entries"), None, line.as_bytes()).0, 200);
    }
    assert_eq!(g.json("POST", &format!("/v1/ledgers/{id}/close"), "").0, 200);
    assert_eq!(cli(&["read", "--ledger", &id.to_string()], b""), "0\tover\n1\thttp\n");
    // CLI -> HTTP.
    let written: Value = serde_json::from_str(cli(&["write"], b"through\nthe cli\n").trim()).unwrap();
    let id = written["ledger_id"].as_u64().unwrap();
    assert_eq!(written["state"], "closed");
    let (status, range) = g.json("GET", &format!("/v1/ledgers/{id}/entries"), "");
    assert_eq!(status, 200);
    let b64 = base64::engine::general_purpose::STANDARD;
    let got: Vec<Vec<u8>> =
        range["entries"].as_array().unwrap().iter().map(|e| b64.decode(e["data"].as_str().unwrap()).unwrap()).collect();
    assert_eq!(got, vec![b"through".to_vec(), b"the cli".to_vec()]);
}

#[test]
fn with_tokens_configured_the_api_needs_a_bearer_token() {
    let g = start_with_token(Some("s3cret"));
    let (status, head, body) = call_with(&g.http, "POST", "/v1/ledgers", None, &[], b"");
    assert_eq!((status, error_of(&json(&body))), (401, "Unauthorized"));
    assert!(head.to_ascii_lowercase().contains("www-authenticate: bearer"), "{head}");
    let wrong = [("Authorization", "Bearer s3cre")];
    assert_eq!(call_with(&g.http, "GET", "/v1/ledgers", None, &wrong, b"").0, 401);
    let good = [("Authorization", "Bearer s3cret")];
    let (status, _, body) = call_with(&g.http, "POST", "/v1/ledgers", None, &good, b"");
    assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
    let rotated = [("Authorization", "Bearer other-token")];
    assert_eq!(call_with(&g.http, "GET", "/v1/ledgers", None, &rotated, b"").0, 200);
    // Health, readiness and metrics stay open for probes and scrapers.
    for path in ["/healthz", "/readyz", "/metrics"] {
        assert_eq!(g.call("GET", path, None, b"").0, 200, "{path}");
    }
}

/// Every way of spelling `path` that a router might decode to it: each
/// character percent-encoded on its own (upper- and lower-case hex), the
/// separators encoded, dot segments, doubled slashes, another case, and
/// seeded random mixes of all of it.
fn spellings(path: &str, seed: u64) -> Vec<String> {
    let enc = |c: char, upper: bool| {
        let mut b = [0u8; 4];
        c.encode_utf8(&mut b)
            .bytes()
            .map(|x| if upper { format!("%{x:02X}") } else { format!("%{x:02x}") })
            .collect::<String>()
    };
    let chars: Vec<char> = path.chars().collect();
    let mut out = Vec::new();
    for i in 1..chars.len() {
        for upper in [true, false] {
            let mut s: String = chars[..i].iter().collect();
            s.push_str(&enc(chars[i], upper));
            s.extend(&chars[i + 1..]);
            out.push(s);
        }
    }
    let rest = path.strip_prefix("/v1").expect("an API path");
    for prefix in ["//v1", "/./v1", "/v1/.", "/v1/../v1", "/x/../v1", "/V1", "/v1/", "/%2e/v1", "/v1/%2e", "/%2576%31"]
    {
        out.push(format!("{prefix}{rest}"));
    }
    out.push(path.replace('/', "//"));
    out.push(path.replace('/', "/./"));
    out.push(path.to_uppercase());
    let mut x = seed | 1;
    for _ in 0..20 {
        let mut s = String::new();
        for (i, &c) in chars.iter().enumerate() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            s.push_str(&if i > 0 && x.is_multiple_of(3) { enc(c, x.is_multiple_of(2)) } else { c.to_string() });
        }
        out.push(s);
    }
    out
}

/// Issue #20 item 1: with a token configured, no request reaches an API
/// handler without it, however its path is spelled (the guard once tested
/// the raw path for a `/v1/` prefix while the router matched the decoded
/// one: `DELETE /%761/ledgers/4` deleted ledger 4 with no token).
#[test]
fn no_spelling_of_an_api_path_and_no_method_gets_past_the_token() {
    let g = start_with_token(Some("s3cret"));
    let good = [("Authorization", "Bearer s3cret")];
    let (status, _, body) = call_with(&g.http, "POST", "/v1/ledgers", None, &good, b"");
    assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
    let id = json(&body)["ledger_id"].as_u64().unwrap();
    let entries = format!("/v1/ledgers/{id}/entries");
    let (status, _, body) = call_with(&g.http, "POST", &entries, Some("application/octet-stream"), &good, b"keep");
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));

    let (status, doc) = g.json("GET", "/openapi.json", "");
    assert_eq!(status, 200);
    let mut api_paths: Vec<String> = doc["paths"]
        .as_object()
        .unwrap()
        .keys()
        .filter(|p| p.starts_with("/v1/"))
        .map(|p| p.replace("{id}", &id.to_string()).replace("{eid}", "0").replace("{bookie}", "1"))
        .collect();
    api_paths.sort();
    api_paths.dedup();
    assert!(api_paths.len() >= 10, "{api_paths:?}");
    let methods = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"];
    let mut tried = 0;
    let mut through = Vec::new();
    for (n, path) in api_paths.iter().enumerate() {
        let mut all = spellings(path, 0x9e37_79b9_7f4a_7c15 ^ n as u64);
        all.push(path.clone());
        for spelled in &all {
            for m in methods {
                let (status, _, body) = call_with(&g.http, m, spelled, None, &[], b"");
                tried += 1;
                if (200..400).contains(&status) {
                    through.push(format!("{m} {spelled} -> {status} {}", String::from_utf8_lossy(&body)));
                }
            }
        }
    }
    assert!(tried > 5_000, "{tried}");
    assert!(
        through.is_empty(),
        "{} of {tried} requests without a token got through:\n{}",
        through.len(),
        through.join("\n")
    );
    // Nothing was changed: the ledger is there, open, with its entry.
    let (status, _, body) = call_with(&g.http, "GET", &format!("{entries}/0"), None, &good, b"");
    assert_eq!((status, body), (200, b"keep".to_vec()));
    let (status, _, body) = call_with(&g.http, "GET", &format!("/v1/ledgers/{id}"), None, &good, b"");
    assert_eq!((status, json(&body)["state"].as_str()), (200, Some("open")));
}

/// Issue #20 item 3: a ledger created over HTTP is its principal's (the
/// token it was created with) to append to, close and delete; another
/// principal may read it and recover it, nothing more, and may not claim a
/// ledger by naming a principal in its metadata.
#[test]
fn a_ledger_created_over_http_is_its_principals_to_write_and_delete() {
    let g = start_with_token(Some("s3cret"));
    let (a, b) = ([("Authorization", "Bearer s3cret")], [("Authorization", "Bearer other-token")]);
    let (status, _, body) = call_with(&g.http, "POST", "/v1/ledgers", None, &a, b"");
    assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
    let v = json(&body);
    let id = v["ledger_id"].as_u64().unwrap();
    assert_eq!(v["metadata"]["quire.owner"], "gateway/1", "{v}");
    let principal = v["metadata"]["quire.principal"].as_str().unwrap().to_string();
    assert!(principal.starts_with("token-") && !principal.contains("s3cret"), "{v}");
    let p = |tail: &str| format!("/v1/ledgers/{id}{tail}");
    let raw = Some("application/octet-stream");
    assert_eq!(call_with(&g.http, "POST", &p("/entries"), raw, &a, b"one").0, 200);
    for (method, path, ct, body) in [
        ("POST", p("/entries"), raw, &b"two"[..]),
        ("POST", p("/entries:batch"), Some("application/json"), &br#"{"entries":["dHdv"]}"#[..]),
        ("POST", p("/close"), None, &b""[..]),
        ("DELETE", p(""), None, &b""[..]),
    ] {
        let (status, _, body) = call_with(&g.http, method, &path, ct, &b, body);
        assert_eq!((status, error_of(&json(&body))), (403, "Forbidden"), "{method} {path}");
    }
    let (status, _, body) = call_with(&g.http, "GET", &p("/entries/0"), None, &b, b"");
    assert_eq!((status, body), (200, b"one".to_vec()), "anyone may read");
    let claim = format!(r#"{{"metadata":{{"quire.principal":"{principal}"}}}}"#);
    let (status, _, body) = call_with(&g.http, "POST", "/v1/ledgers", Some("application/json"), &b, claim.as_bytes());
    assert_eq!((status, error_of(&json(&body))), (400, "BadRequest"));
    // Recovery is anyone's (how a new owner takes a log over): it closes the ledger.
    let (status, _, body) = call_with(&g.http, "POST", &p("/recover"), None, &b, b"");
    assert_eq!((status, json(&body)["last_entry_id"].as_i64()), (200, Some(0)));
    assert_eq!(call_with(&g.http, "DELETE", &p(""), None, &b, b"").0, 403);
    assert_eq!(call_with(&g.http, "DELETE", &p(""), None, &a, b"").0, 204);
}

/// Issue #20 item 6: SIGHUP re-reads the token file. The new tokens work
/// and the old ones are refused from then on, with no restart; a file that
/// does not parse keeps the tokens in force (a half-written rotation must
/// neither lock everyone out nor open the API).
#[test]
fn sighup_rotates_the_bearer_tokens_and_a_broken_file_changes_nothing() {
    let g = start_with_token(Some("s3cret"));
    let file = g._dir.path().join("tokens");
    let list = |token: &str| {
        call_with(&g.http, "GET", "/v1/ledgers", None, &[("Authorization", &format!("Bearer {token}"))], b"").0
    };
    assert_eq!(list("s3cret"), 200);
    std::fs::write(&file, "ops fresh\n").unwrap();
    g._proc.signal("HUP").unwrap();
    quire_testkit::wait_until(Duration::from_secs(10), "the new token accepted", || {
        (list("fresh") == 200).then_some(())
    })
    .unwrap();
    assert_eq!(list("s3cret"), 401, "the old token is refused once the new file is in force");
    std::fs::write(&file, "a name with spaces\n").unwrap();
    g._proc.signal("HUP").unwrap();
    quire_testkit::wait_until(Duration::from_secs(10), "the broken file reported", || {
        g._proc.log().contains("kept the bearer tokens in force").then_some(())
    })
    .unwrap();
    assert_eq!((list("fresh"), list("s3cret")), (200, 401));
    assert_eq!(g.call("GET", "/healthz", None, b"").0, 200, "SIGHUP does not stop the gateway");
}

/// Issue #20 item 4: a body that stops arriving is answered 408 at the
/// body deadline instead of holding a worker; a read whose HTTP client
/// went away (here a LAC long poll of 60 s) stops its work at once rather
/// than at its own end (`quire_gateway_client_tasks` counts that work).
#[test]
fn a_stalled_upload_gets_408_and_a_vanished_reader_stops_its_work() {
    let g = start_args(None, 3, false, &["--body-timeout-ms", "500"]);
    let (status, v) = g.json("POST", "/v1/ledgers", "");
    assert_eq!(status, 201, "{v}");
    let id = v["ledger_id"].as_u64().unwrap();

    let mut s = TcpStream::connect(&g.http).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let head = format!(
        "POST /v1/ledgers/{id}/entries HTTP/1.1\r\nHost: quire\r\nContent-Type: application/octet-stream\r\nContent-Length: 100\r\n\r\n0123456789"
    );
    s.write_all(head.as_bytes()).unwrap();
    let mut reply = [0u8; 12];
    s.read_exact(&mut reply).unwrap();
    assert_eq!(&reply, b"HTTP/1.1 408", "{}", String::from_utf8_lossy(&reply));
    drop(s);

    let tasks = || {
        let (_, m) = g.call("GET", "/metrics", None, b"");
        let m = String::from_utf8(m).unwrap();
        m.lines().find_map(|l| l.strip_prefix("quire_gateway_client_tasks ")).map(|n| n.parse::<u64>().unwrap())
    };
    assert_eq!(tasks(), Some(0));
    let mut poll = TcpStream::connect(&g.http).unwrap();
    let req = format!("GET /v1/ledgers/{id}/lac?after=5&timeout_ms=60000 HTTP/1.1\r\nHost: quire\r\n\r\n");
    poll.write_all(req.as_bytes()).unwrap();
    quire_testkit::wait_until(Duration::from_secs(10), "the long poll parked", || (tasks() == Some(1)).then_some(()))
        .unwrap();
    drop(poll);
    quire_testkit::wait_until(Duration::from_secs(10), "the poll's work stopped with its client", || {
        (tasks() == Some(0)).then_some(())
    })
    .unwrap();
}

/// Issue #20 item 4: a range read streamed to a client that stops reading
/// used to hold its reader and pages for as long as the connection lived.
/// Past the send deadline the gateway abandons it (its task and pages go:
/// the gateway's timer or the kernel's TCP_USER_TIMEOUT reset, whichever
/// fires first) and the response is cut, never ended as if complete.
#[test]
fn a_range_read_to_a_client_that_stops_reading_is_abandoned_at_the_send_deadline() {
    let g = start_args(None, 3, false, &["--send-timeout-ms", "1000", "--max-range-entries", "1000"]);
    let (status, v) = g.json("POST", "/v1/ledgers", "");
    assert_eq!(status, 201, "{v}");
    let id = v["ledger_id"].as_u64().unwrap();
    // About 64 MB of JSON (base64) in 13 pages of 64 entries: far more than
    // the gateway's queue of 4 pages and the sockets' buffers hold.
    let entries = 800u64;
    let payload = vec![7u8; 60_000];
    for _ in 0..entries {
        let (status, b) =
            g.call("POST", &format!("/v1/ledgers/{id}/entries"), Some("application/octet-stream"), &payload);
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&b));
    }
    let metric = |name: &str| {
        let (_, m) = g.call("GET", "/metrics", None, b"");
        let m = String::from_utf8(m).unwrap();
        m.lines().find_map(|l| l.strip_prefix(&format!("{name} "))).map(|n| n.parse::<u64>().unwrap())
    };
    assert_eq!(metric("quire_gateway_range_streams"), Some(0));

    // A client with a small receive window that reads the status line and
    // then nothing.
    let addr: std::net::SocketAddr = g.http.parse().unwrap();
    let sock = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::STREAM, None).unwrap();
    sock.set_recv_buffer_size(64 * 1024).unwrap();
    sock.connect(&addr.into()).unwrap();
    let mut s: TcpStream = sock.into();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let req = format!("GET /v1/ledgers/{id}/entries?from=0&to={} HTTP/1.1\r\nHost: quire\r\n\r\n", entries - 1);
    s.write_all(req.as_bytes()).unwrap();
    let mut head = [0u8; 12];
    s.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    quire_testkit::wait_until(Duration::from_secs(30), "the range read's task to end", || {
        (metric("quire_gateway_range_streams") == Some(0)).then_some(())
    })
    .unwrap();
    // Whatever was in flight can still be read, but the response never
    // completes: the connection is cut (reset, or closed mid-body).
    let mut rest = Vec::new();
    let r = s.read_to_end(&mut rest);
    assert!(
        r.is_err() || !rest.ends_with(b"0\r\n\r\n"),
        "an abandoned response ended as if complete ({} bytes)",
        rest.len()
    );
    // The gateway serves on, and a reader that reads gets the whole range.
    let (status, body) = g.call("GET", &format!("/v1/ledgers/{id}/entries?from=0&to={}", entries - 1), None, b"");
    assert_eq!(status, 200);
    assert_eq!(json(&body)["entries"].as_array().unwrap().len(), entries as usize);
}

#[test]
fn the_openapi_document_lists_every_route_and_each_one_answers() {
    let g = start();
    let (status, doc) = g.json("GET", "/openapi.json", "");
    assert_eq!(status, 200);
    assert_eq!(doc["openapi"], "3.0.3");
    let paths = doc["paths"].as_object().unwrap();
    let mut ops = 0;
    for (path, item) in paths {
        for (method, op) in item.as_object().unwrap() {
            ops += 1;
            assert!(op["summary"].as_str().is_some_and(|s| !s.is_empty()), "{method} {path}");
            assert!(op["responses"].as_object().is_some_and(|r| !r.is_empty()), "{method} {path}");
            // Every documented route is routed (the catch-all answers NotFound).
            let concrete = path
                .replace("{id}", "999999")
                .replace("{eid}", "0")
                .replace("{bookie}", "nobody")
                .replace("{name}", "nolog")
                .replace("{cursor}", "c");
            let (_, body) = g.call(&method.to_uppercase(), &concrete, None, b"");
            let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            assert_ne!(v["error"], "NotFound", "{method} {path} is documented but not routed");
        }
    }
    assert_eq!(ops, 31, "every route of the API v1 table");
    // For generators (issue #49): every operation has its own operationId
    // and one tag the document lists; every example conforms to its schema.
    let tags: Vec<&str> = doc["tags"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    let mut ids = std::collections::BTreeSet::new();
    for (path, item) in paths {
        for (method, op) in item.as_object().unwrap() {
            let id = op["operationId"].as_str().unwrap_or_else(|| panic!("{method} {path} has no operationId"));
            assert!(ids.insert(id.to_string()), "{id} names two operations");
            let t = op["tags"].as_array().unwrap();
            assert!(t.len() == 1 && tags.contains(&t[0].as_str().unwrap()), "{method} {path}: tags {t:?}");
            if let Some(media) = op["requestBody"]["content"]["application/json"].as_object() {
                let example = media.get("example").unwrap_or_else(|| panic!("{method} {path}: no example body"));
                conforms(&doc, &media["schema"], example, &format!("{method} {path} example")).unwrap();
            }
        }
    }
    let mut examples = 0;
    for (name, schema) in doc["components"]["schemas"].as_object().unwrap() {
        if let Some(example) = schema.get("example") {
            conforms(&doc, schema, example, &format!("{name} example")).unwrap();
            examples += 1;
        }
    }
    assert!(examples >= 10, "the main answers have examples");
    // And an undocumented path is not routed.
    let (status, v) = g.json("GET", "/v1/undocumented", "");
    assert_eq!((status, error_of(&v)), (404, "NotFound"));
    // A path that exists, with a method it does not serve: 405 and the
    // methods it does serve (it was 404, as if the path did not exist).
    for (method, path, allow) in [
        ("TRACE", "/v1/ledgers", "GET, POST"),
        ("PUT", "/v1/ledgers/7", "DELETE, GET"),
        ("DELETE", "/v1/ledgers/7/entries:batch", "POST"),
        ("PATCH", "/v1/bookies/b-1", "GET"),
        ("POST", "/healthz", "GET"),
    ] {
        let (status, head, body) = call_full(&g.http, method, path, None, b"");
        assert_eq!((status, error_of(&json(&body))), (405, "MethodNotAllowed"), "{method} {path}");
        assert!(head.to_ascii_lowercase().contains(&format!("allow: {}", allow.to_ascii_lowercase())), "{head}");
    }
    // What the schema states is what the server takes: ids are unsigned
    // 64-bit (their largest value stated), a bookie id's spelling, a
    // batch's size, a quorum's range.
    let param = |path: &str, method: &str, name: &str| {
        doc["paths"][path][method]["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("{method} {path} has no parameter {name}"))["schema"]
            .clone()
    };
    assert_eq!(param("/v1/ledgers/{id}/entries/{eid}", "get", "eid")["maximum"], serde_json::json!(u64::MAX));
    assert_eq!(param("/v1/ledgers/{id}/lac", "get", "id")["maximum"], serde_json::json!(u64::MAX));
    let bookie = param("/v1/bookies/{bookie}", "get", "bookie");
    assert_eq!((bookie["pattern"].as_str(), bookie["maxLength"].as_u64()), (Some("^[A-Za-z0-9._-]+$"), Some(128)));
    let batch = &doc["paths"]["/v1/ledgers/{id}/entries:batch"]["post"]["requestBody"]["content"]["application/json"]
        ["schema"]["properties"]["entries"];
    assert_eq!((batch["minItems"].as_u64(), batch["maxItems"].as_u64()), (Some(1), Some(10_000)));
    let create = &doc["paths"]["/v1/ledgers"]["post"]["requestBody"]["content"]["application/json"]["schema"];
    for q in ["ensemble", "write_quorum", "ack_quorum"] {
        let schema = &create["properties"][q];
        assert_eq!((schema["minimum"].as_u64(), schema["maximum"].as_u64()), (Some(1), Some(64)), "{q}");
        assert_eq!(schema["nullable"], true, "{q}: null takes the default, as the server does");
    }
    let batch_body =
        &doc["paths"]["/v1/ledgers/{id}/entries:batch"]["post"]["requestBody"]["content"]["application/json"]["schema"];
    assert_eq!(batch_body["additionalProperties"], false, "the server refuses unknown fields");
    // An empty entry is an entry: an append may come without a body.
    assert_eq!(doc["paths"]["/v1/ledgers/{id}/entries"]["post"]["requestBody"]["required"], false);
    let codes = doc["paths"]["/v1/bookies/{bookie}"]["get"]["responses"].as_object().unwrap();
    assert!(codes.contains_key("400"), "a misspelt bookie id is 400, documented");

    // Real answers match the documented schemas, successes and errors
    // alike, and every documented operation is called at least once.
    let called = std::cell::RefCell::new(std::collections::BTreeSet::<(String, String)>::new());
    let check = |method: &str, template: &str, path: &str, body: &str| {
        called.borrow_mut().insert((method.to_lowercase(), template.to_string()));
        let (status, raw) = g.call(method, path, Some("application/json"), body.as_bytes());
        let op = &doc["paths"][template][method.to_lowercase()];
        assert!(op.is_object(), "{method} {template} is not documented");
        let resp = &op["responses"][status.to_string()];
        let text = String::from_utf8_lossy(&raw).into_owned();
        assert!(resp.is_object(), "{method} {template} answered {status}, which it does not document: {text}");
        let schema = &resp["content"]["application/json"]["schema"];
        if schema.is_null() {
            // Raw bytes, text, or no content (204): the status is the contract.
            return Value::Null;
        }
        let v: Value = serde_json::from_slice(&raw).unwrap_or_else(|e| panic!("{method} {path}: {e}: {text}"));
        if let Err(e) = conforms(&doc, schema, &v, "$") {
            panic!("{method} {path} ({status}): {e}\n{v}");
        }
        v
    };
    check("GET", "/healthz", "/healthz", "");
    check("GET", "/readyz", "/readyz", "");
    let l = check("POST", "/v1/ledgers", "/v1/ledgers", r#"{"metadata":{"k":"v"}}"#);
    let id = l["ledger_id"].as_u64().unwrap();
    let p = |tail: &str| format!("/v1/ledgers/{id}{tail}");
    check("POST", "/v1/ledgers/{id}/entries", &p("/entries"), "one");
    check("POST", "/v1/ledgers/{id}/entries:batch", &p("/entries:batch"), r#"{"entries":["dHdv"]}"#);
    check("POST", "/v1/ledgers/{id}/entries:batch", &p("/entries:batch"), r#"{"entries":"no"}"#);
    check("GET", "/v1/ledgers/{id}/entries", &p("/entries?from=0"), "");
    check("GET", "/v1/ledgers/{id}/lac", &p("/lac"), "");
    check("GET", "/v1/ledgers", "/v1/ledgers?limit=1", "");
    check("GET", "/v1/ledgers/{id}", &p(""), "");
    check("GET", "/v1/ledgers/{id}", "/v1/ledgers/424242", "");
    check("POST", "/v1/ledgers/{id}/close", &p("/close"), "");
    check("POST", "/v1/ledgers/{id}/recover", &p("/recover"), "");
    check("GET", "/v1/bookies", "/v1/bookies", "");
    check("GET", "/v1/bookies/{bookie}", "/v1/bookies/1", "");
    check("GET", "/v1/bookies/{bookie}", "/v1/bookies/nobody", "");
    check("GET", "/v1/cluster", "/v1/cluster", "");
    check("GET", "/metrics", "/metrics", "");
    check("GET", "/v1/ledgers/{id}/entries/{eid}", &p("/entries/0"), "");
    check("GET", "/v1/ledgers/{id}/entries/{eid}", &p("/entries/99"), "");
    check("POST", "/v1/bookies/{bookie}/decommission", "/v1/bookies/nobody/decommission", "");
    // Logs (issue #23).
    check("POST", "/v1/logs", "/v1/logs", r#"{"name":"doc","rollover":{"max_entries":2}}"#);
    check("POST", "/v1/logs", "/v1/logs", r#"{"name":"doc"}"#);
    check("POST", "/v1/logs", "/v1/logs", r#"{"name":"a/b"}"#);
    check("GET", "/v1/logs", "/v1/logs?limit=5", "");
    check("GET", "/v1/logs/{name}", "/v1/logs/doc", "");
    check("GET", "/v1/logs/{name}", "/v1/logs/nolog", "");
    check("POST", "/v1/logs/{name}/records", "/v1/logs/doc/records", "one");
    check("POST", "/v1/logs/{name}/records", "/v1/logs/doc/records?producer_id=p&sequence=0", "two");
    check("POST", "/v1/logs/{name}/records", "/v1/logs/nolog/records", "x");
    check(
        "POST",
        "/v1/logs/{name}/records:batch",
        "/v1/logs/doc/records:batch",
        r#"{"records":["dGhyZWU=","Zm91cg=="]}"#,
    );
    check("POST", "/v1/logs/{name}/records:batch", "/v1/logs/doc/records:batch", r#"{"records":[]}"#);
    check("GET", "/v1/logs/{name}/records", "/v1/logs/doc/records?from=0", "");
    check("PUT", "/v1/logs/{name}/cursors/{cursor}", "/v1/logs/doc/cursors/c1", r#"{"from":"start"}"#);
    check("PUT", "/v1/logs/{name}/cursors/{cursor}", "/v1/logs/doc/cursors/c1", r#"{"position":1}"#);
    check("PUT", "/v1/logs/{name}/cursors/{cursor}", "/v1/logs/nolog/cursors/c1", "");
    check("GET", "/v1/logs/{name}/cursors/{cursor}", "/v1/logs/doc/cursors/c1", "");
    check("GET", "/v1/logs/{name}/cursors/{cursor}", "/v1/logs/doc/cursors/none", "");
    check("POST", "/v1/logs/{name}/cursors/{cursor}", "/v1/logs/doc/cursors/c1", r#"{"ack":2}"#);
    check("GET", "/v1/logs/{name}/records", "/v1/logs/doc/records?cursor=c1", "");
    check("DELETE", "/v1/logs/{name}/cursors/{cursor}", "/v1/logs/doc/cursors/c1", "");
    check("DELETE", "/v1/logs/{name}/cursors/{cursor}", "/v1/logs/doc/cursors/c1", "");
    check("POST", "/v1/logs/{name}/takeover", "/v1/logs/doc/takeover", "");
    check("POST", "/v1/logs/{name}/takeover", "/v1/logs/nolog/takeover", "");
    check("POST", "/v1/logs/{name}/trim", "/v1/logs/doc/trim", r#"{"before":2}"#);
    check("GET", "/v1/logs/{name}/records", "/v1/logs/doc/records?from=0", "");
    check("POST", "/v1/logs/{name}/trim", "/v1/logs/doc/trim", r#"{"before":1}"#);
    // A ledger the log holds is deleted with it, not alone: 409, documented.
    let held = g.json("GET", "/v1/logs/doc", "").1["ledgers"][0]["ledger_id"].as_u64().unwrap();
    let v = check("DELETE", "/v1/ledgers/{id}", &format!("/v1/ledgers/{held}"), "");
    assert_eq!(v["error"], "LedgerInLog", "{v}");
    check("DELETE", "/v1/logs/{name}", "/v1/logs/doc", "");
    check("DELETE", "/v1/logs/{name}", "/v1/logs/doc", "");
    check("DELETE", "/v1/ledgers/{id}", &p(""), "");
    check("DELETE", "/v1/ledgers/{id}", &p(""), "");
    // Last: a drain that would leave a ledger without its ensemble is
    // refused, 400 with the reason (it answered an undocumented 400 before).
    let d = check("POST", "/v1/bookies/{bookie}/decommission", "/v1/bookies/1/decommission", "");
    assert_eq!(d["error"], "BadRequest", "{d}");
    assert!(d["message"].as_str().unwrap().contains("add a bookie first"), "{d}");
    let documented: std::collections::BTreeSet<(String, String)> = paths
        .iter()
        .flat_map(|(path, item)| item.as_object().unwrap().keys().map(move |m| (m.clone(), path.clone())))
        .collect();
    let missed: Vec<_> = documented.difference(&called.borrow()).cloned().collect();
    assert!(missed.is_empty(), "documented but never called here: {missed:?}");
}

/// Whether `v` conforms to the OpenAPI 3.0 `schema` (the subset the document
/// uses: $ref, type, nullable, required, properties, items, enum,
/// additionalProperties).
fn conforms(doc: &Value, schema: &Value, v: &Value, at: &str) -> Result<(), String> {
    if let Some(r) = schema["$ref"].as_str() {
        let name = r.trim_start_matches("#/components/schemas/");
        let target = &doc["components"]["schemas"][name];
        if !target.is_object() {
            return Err(format!("{at}: unresolved {r}"));
        }
        return conforms(doc, target, v, at);
    }
    if v.is_null() {
        return if schema["nullable"] == true { Ok(()) } else { Err(format!("{at}: null")) };
    }
    let ok = match schema["type"].as_str() {
        Some("object") => v.is_object(),
        Some("array") => v.is_array(),
        Some("string") => v.is_string(),
        Some("integer") => v.is_i64() || v.is_u64(),
        Some("boolean") => v.is_boolean(),
        _ => true,
    };
    if !ok {
        return Err(format!("{at}: {v} is not of type {}", schema["type"]));
    }
    if let Some(allowed) = schema["enum"].as_array() {
        if !allowed.contains(v) {
            return Err(format!("{at}: {v} is not one of {allowed:?}"));
        }
    }
    if schema["minimum"] == 0 && v.as_i64().is_some_and(|n| n < 0) {
        return Err(format!("{at}: {v} is negative"));
    }
    if let Some(required) = schema["required"].as_array() {
        for k in required {
            let k = k.as_str().unwrap();
            if v.get(k).is_none() {
                return Err(format!("{at}: missing {k}"));
            }
        }
    }
    if let (Some(props), Some(o)) = (schema["properties"].as_object(), v.as_object()) {
        for (k, sub) in props {
            if let Some(x) = o.get(k) {
                conforms(doc, sub, x, &format!("{at}.{k}"))?;
            }
        }
    }
    if let (Some(extra), Some(o)) = (schema.get("additionalProperties").filter(|e| e.is_object()), v.as_object()) {
        for (k, x) in o {
            conforms(doc, extra, x, &format!("{at}.{k}"))?;
        }
    }
    if let (Some(items), Some(a)) = (schema.get("items"), v.as_array()) {
        for (i, x) in a.iter().enumerate() {
            conforms(doc, items, x, &format!("{at}[{i}]"))?;
        }
    }
    Ok(())
}

#[test]
fn a_decommissioned_bookie_is_drained_by_ensemble_change_and_no_acknowledged_entry_is_lost() {
    let g = start_with(None, 4);
    let (status, l) = g.json("POST", "/v1/ledgers", r#"{"ensemble":3,"write_quorum":3,"ack_quorum":2}"#);
    assert_eq!(status, 201, "{l}");
    let id = l["ledger_id"].as_u64().unwrap();
    let first: Vec<String> =
        l["ensembles"][0]["bookies"].as_array().unwrap().iter().map(|b| b.as_str().unwrap().to_string()).collect();
    let mut written: Vec<Vec<u8>> = Vec::new();
    let append = |written: &mut Vec<Vec<u8>>| {
        let data = format!("entry-{}", written.len()).into_bytes();
        let (status, b) = g.call("POST", &format!("/v1/ledgers/{id}/entries"), None, &data);
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&b));
        assert_eq!(json(&b)["entry_id"].as_u64(), Some(written.len() as u64));
        written.push(data);
    };
    for _ in 0..20 {
        append(&mut written);
    }

    // Bad ids and unknown bookies get their errors.
    let (status, e) = g.json("POST", "/v1/bookies/no%20such/decommission", "");
    assert_eq!((status, error_of(&e)), (400, "BadRequest"), "{e}");
    let (status, e) = g.json("POST", "/v1/bookies/nobody/decommission", "");
    assert_eq!((status, error_of(&e)), (404, "NoSuchBookie"), "{e}");
    let (status, e) = g.json("GET", "/v1/bookies/nobody", "");
    assert_eq!((status, error_of(&e)), (404, "NoSuchBookie"), "{e}");

    // Drain a member of the ledger's ensemble: 202, and the registry says so.
    let victim = first[0].clone();
    let (status, b) = g.json("POST", &format!("/v1/bookies/{victim}/decommission"), "");
    assert_eq!((status, b["state"].as_str()), (202, Some("decommissioning")), "{b}");
    assert_eq!(b["ledgers"].as_u64(), Some(1), "{b}");
    let (status, again) = g.json("POST", &format!("/v1/bookies/{victim}/decommission"), "");
    assert_eq!((status, again["state"].as_str()), (202, Some("decommissioning")), "asking twice is fine");
    let (_, list) = g.json("GET", "/v1/bookies", "");
    let row = list["bookies"].as_array().unwrap().iter().find(|b| b["id"] == victim.as_str()).cloned().unwrap();
    assert_eq!(row["state"], "decommissioning", "{list}");
    // A second drain would leave two writable bookies for an E=3 ledger.
    let (status, e) = g.json("POST", &format!("/v1/bookies/{}/decommission", first[1]), "");
    assert_eq!((status, error_of(&e)), (400, "BadRequest"), "{e}");
    assert!(e["message"].as_str().unwrap().contains("would leave 2 writable bookies"), "{e}");

    // The writer keeps going: once the bookie learns it is draining (its next
    // lease renewal), it refuses adds and the writer replaces it.
    quire_testkit::wait_until(Duration::from_secs(30), "the writer moved off the draining bookie", || {
        append(&mut written);
        let (_, m) = g.json("GET", &format!("/v1/ledgers/{id}"), "");
        let ensembles = m["ensembles"].as_array().unwrap().clone();
        let last = ensembles.last().unwrap()["bookies"].as_array().unwrap().clone();
        (ensembles.len() >= 2 && !last.iter().any(|b| b == victim.as_str())).then_some(())
    })
    .unwrap();
    for _ in 0..10 {
        append(&mut written);
    }
    // New ledgers are not placed on it.
    for _ in 0..5 {
        let (status, l) = g.json("POST", "/v1/ledgers", r#"{"ensemble":3,"write_quorum":3,"ack_quorum":2}"#);
        assert_eq!(status, 201, "{l}");
        assert!(!l["ensembles"][0]["bookies"].as_array().unwrap().iter().any(|b| b == victim.as_str()), "{l}");
    }

    // Every acknowledged entry reads back, the draining bookie still serving its part.
    let (status, range) = g.json("GET", &format!("/v1/ledgers/{id}/entries?from=0"), "");
    assert_eq!(status, 200);
    let b64 = base64::engine::general_purpose::STANDARD;
    let got: Vec<Vec<u8>> =
        range["entries"].as_array().unwrap().iter().map(|e| b64.decode(e["data"].as_str().unwrap()).unwrap()).collect();
    assert_eq!(got, written);
    let (status, b) = g.json("GET", &format!("/v1/bookies/{victim}"), "");
    assert_eq!((status, b["state"].as_str(), b["ledgers"].as_u64()), (200, Some("decommissioning"), Some(1)), "{b}");
}

/// One HTTPS request, the server verified against the cluster's CA as `localhost`.
fn https_call(addr: &str, ca_pem: &std::path::Path, path: &str) -> Result<(u16, Vec<u8>), rustls::Error> {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pki_types::CertificateDer::pem_file_iter(ca_pem).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let cfg =
        rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    let conn = rustls::ClientConnection::new(std::sync::Arc::new(cfg), name)?;
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    if let Err(e) = tls.write_all(req.as_bytes()) {
        return Err(e
            .into_inner()
            .and_then(|i| i.downcast::<rustls::Error>().ok())
            .map_or(rustls::Error::General("write".into()), |b| *b));
    }
    let mut raw = Vec::new();
    match tls.read_to_end(&mut raw) {
        Ok(_) => {}
        // A server that closes without close_notify after Connection: close.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {}
        Err(e) => return Err(rustls::Error::General(e.to_string())),
    }
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("a response head");
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let status: u16 = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let mut body = raw[split + 4..].to_vec();
    if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        body = dechunk(&body);
    }
    Ok((status, body))
}

#[test]
fn with_a_certificate_the_api_is_served_over_https_only() {
    let g = start_full(None, 3, true);
    let ca = g._dir.path().join("certs").join("ca.pem");
    let (status, body) = quire_testkit::wait_until(Duration::from_secs(20), "HTTPS ready with 3 bookies", || {
        let (status, body) = https_call(&g.http, &ca, "/readyz").ok()?;
        (status == 200 && json(&body)["bookies"].as_u64() == Some(3)).then_some((status, body))
    })
    .unwrap();
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let (status, body) = https_call(&g.http, &ca, "/v1/bookies").unwrap();
    assert_eq!(status, 200);
    assert_eq!(json(&body)["bookies"].as_array().unwrap().len(), 3);
    // A client that trusts another CA refuses the server.
    let other = tempfile::tempdir().unwrap();
    init_dir(other.path(), "other", &LocalCluster { metadata: 1, bookies: 0 }, &IssueOptions::default()).unwrap();
    let err = https_call(&g.http, &other.path().join("ca.pem"), "/healthz").unwrap_err();
    assert!(matches!(err, rustls::Error::InvalidCertificate(_)) || err.to_string().contains("certificate"), "{err}");
    // Plain HTTP on the HTTPS port gets no API answer.
    let mut s = TcpStream::connect(&g.http).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    assert!(!String::from_utf8_lossy(&raw).contains("\"ok\""), "{}", String::from_utf8_lossy(&raw));

    // SIGHUP re-reads the HTTPS pair (issue #20 item 6): another CA's pair
    // is what the next handshake presents...
    let certs = g._dir.path().join("certs");
    let other_ca = other.path().join("ca.pem");
    std::fs::copy(other.path().join("gateway-1.pem"), certs.join("gateway-1.pem")).unwrap();
    std::fs::copy(other.path().join("gateway-1.key"), certs.join("gateway-1.key")).unwrap();
    g._proc.signal("HUP").unwrap();
    quire_testkit::wait_until(Duration::from_secs(20), "the reloaded certificate served", || {
        https_call(&g.http, &other_ca, "/healthz").ok().filter(|(s, _)| *s == 200)
    })
    .unwrap();
    assert!(https_call(&g.http, &ca, "/healthz").is_err(), "the old certificate is still served");
    // ...and a key that does not match its certificate changes nothing.
    std::fs::copy(certs.join("bookie-1.key"), certs.join("gateway-1.key")).unwrap();
    g._proc.signal("HUP").unwrap();
    quire_testkit::wait_until(Duration::from_secs(20), "the refusal logged", || {
        g._proc.log().contains("HTTPS certificate not reloaded").then_some(())
    })
    .unwrap();
    assert_eq!(https_call(&g.http, &other_ca, "/healthz").unwrap().0, 200);
}

/// Issue #21 item 3: an open ledger with no entries yet answers like any
/// other: its LAC is -1, entry 0 does not exist yet (404 NoSuchEntry), and a
/// range holds no entries. A tail reader that starts right after the create
/// meets exactly this (it used to get 502 "NoSuchLedger from <bookie>").
/// A log over HTTP (issue #23): offsets across rollovers, an idempotent
/// retry answered with its first offset, reads across ledgers, a follow
/// answered when the next record lands, a trim that answers 410 below it,
/// and bad names and bodies refused with the API's error body.
#[test]
fn a_log_is_appended_read_followed_trimmed_and_deleted_over_http() {
    let g = start();
    let (status, l) = g.json("POST", "/v1/logs", r#"{"name":"orders","rollover":{"max_entries":3}}"#);
    assert_eq!(status, 201, "{l}");
    assert_eq!((l["epoch"].as_u64(), l["ledgers"].as_array().unwrap().len()), (Some(1), 1));
    let (status, v) = g.json("POST", "/v1/logs", r#"{"name":"orders"}"#);
    assert_eq!((status, error_of(&v)), (409, "LogExists"));
    for i in 0..4u64 {
        let (status, b) = g.call("POST", "/v1/logs/orders/records", None, format!("r{i}").as_bytes());
        assert_eq!((status, json(&b)["offset"].as_u64()), (200, Some(i)), "{}", String::from_utf8_lossy(&b));
    }
    // Idempotent: the retry answers the first offset and writes nothing.
    let (_, b) = g.call("POST", "/v1/logs/orders/records?producer_id=app-1&sequence=7", None, b"r4");
    assert_eq!(json(&b)["offset"], 4);
    let (_, b) = g.call("POST", "/v1/logs/orders/records?producer_id=app-1&sequence=7", None, b"r4");
    assert_eq!(json(&b)["offset"], 4, "a retry");
    let b64 = base64::engine::general_purpose::STANDARD;
    let batch = json!({ "records": [b64.encode("r5"), b64.encode("r6")], "producer_id": "app-1", "sequence": 8 });
    let (status, v) = g.json("POST", "/v1/logs/orders/records:batch", &batch.to_string());
    assert_eq!((status, v["offsets"].clone()), (200, json!([5, 6])), "{v}");
    let (_, v) = g.json("GET", "/v1/logs/orders", "");
    let ends: Vec<Value> = v["ledgers"].as_array().unwrap().iter().map(|l| l["end_offset"].clone()).collect();
    assert_eq!(ends, [json!(3), Value::Null], "rolled after 3 records; a batch goes whole into one ledger: {v}");
    // Read across ledgers: follow waits for what the bookies' LAC has not shown yet.
    let mut got = Vec::new();
    while got.len() < 7 {
        let (status, v) =
            g.json("GET", &format!("/v1/logs/orders/records?from={}&follow=true&wait_ms=5000", got.len()), "");
        assert_eq!(status, 200, "{v}");
        let rs = v["records"].as_array().unwrap().clone();
        assert!(!rs.is_empty(), "nothing committed at {} within 5 s", got.len());
        got.extend(rs);
    }
    for (i, r) in got.iter().enumerate() {
        assert_eq!(r["offset"], i as u64);
        assert_eq!(b64.decode(r["data"].as_str().unwrap()).unwrap(), format!("r{i}").as_bytes());
    }
    assert_eq!((got[4]["producer_id"].as_str(), got[4]["sequence"].as_u64()), (Some("app-1"), Some(7)));
    // A follower at the tail is answered when the next record lands.
    let http = g.http.clone();
    let follower = std::thread::spawn(move || {
        call(&http, "GET", "/v1/logs/orders/records?from=7&follow=true&wait_ms=20000", None, b"")
    });
    let (status, _) = g.call("POST", "/v1/logs/orders/records", None, b"r7");
    assert_eq!(status, 200);
    let (status, b) = follower.join().unwrap();
    assert_eq!((status, json(&b)["records"][0]["offset"].as_u64()), (200, Some(7)));
    // A durable cursor: created at the start, read from, acknowledged; it
    // holds retention, so a trim past it is refused until it moves.
    let (status, v) = g.json("PUT", "/v1/logs/orders/cursors/billing", r#"{"from":"start","holds_retention":true}"#);
    assert_eq!((status, v["position"].as_u64()), (200, Some(0)), "{v}");
    let (status, v) = g.json("GET", "/v1/logs/orders/records?cursor=billing&limit=2", "");
    assert_eq!((status, v["records"][0]["offset"].as_u64(), v["next"].as_u64()), (200, Some(0), Some(2)), "{v}");
    let (status, v) = g.json("POST", "/v1/logs/orders/cursors/billing", r#"{"ack":2}"#);
    assert_eq!((status, v["position"].as_u64()), (200, Some(2)), "{v}");
    let (status, v) = g.json("POST", "/v1/logs/orders/trim", r#"{"before":3}"#);
    assert_eq!(status, 400, "the cursor at 2 holds retention: {v}");
    let (status, v) = g.json("POST", "/v1/logs/orders/cursors/billing", r#"{"ack":1}"#);
    assert_eq!((status, v["position"].as_u64()), (200, Some(2)), "an ack never moves back: {v}");
    let (status, v) = g.json("PUT", "/v1/logs/orders/cursors/billing", r#"{"position":3}"#);
    assert_eq!((status, v["position"].as_u64()), (200, Some(3)), "a seek: {v}");
    let (status, v) = g.json("GET", "/v1/logs/orders/cursors/billing", "");
    assert_eq!((status, v["holds_retention"].as_bool()), (200, Some(true)));
    // Trim: whole ledgers below go; reads below are 410 with the trim point.
    let (status, v) = g.json("POST", "/v1/logs/orders/trim", r#"{"before":3}"#);
    assert_eq!((status, v["trim_before"].as_u64()), (200, Some(3)), "{v}");
    let (status, v) = g.json("GET", "/v1/logs/orders/records?from=1", "");
    assert_eq!((status, error_of(&v)), (410, "Trimmed"));
    assert!(v["message"].as_str().unwrap().contains("starts at 3"), "{v}");
    let (status, v) = g.json("GET", "/v1/logs/orders/records?from=3&limit=1", "");
    assert_eq!((status, v["records"][0]["offset"].as_u64()), (200, Some(3)));
    // Bad input: the API's error body, nothing stored changes.
    for (method, path, body, code) in [
        ("GET", "/v1/logs/a%2Fb", "", 400),
        ("GET", "/v1/logs/..", "", 400),
        ("GET", "/v1/logs/missing", "", 404),
        ("POST", "/v1/logs/missing/records", "x", 404),
        ("POST", "/v1/logs/orders/records?producer_id=p", "x", 400),
        ("POST", "/v1/logs/orders/records:batch", r#"{"records":["%%%"]}"#, 400),
        ("POST", "/v1/logs/orders/trim", r#"{"before":"x"}"#, 400),
        ("POST", "/v1/logs/orders/trim", r#"{"before":99}"#, 400),
        ("POST", "/v1/logs/orders/cursors/billing", r#"{"ack":99}"#, 400),
        ("PUT", "/v1/logs/orders/cursors/billing", r#"{"position":99}"#, 400),
        ("PUT", "/v1/logs/orders/cursors/ahead", r#"{"position":99}"#, 400),
        // from is "start" or "end" (an enum: not null, issue #49).
        ("PUT", "/v1/logs/orders/cursors/ahead", r#"{"from":null}"#, 400),
        ("PUT", "/v1/logs/orders/cursors/ahead", r#"{"from":3}"#, 400),
        ("POST", "/v1/logs", r#"{"name":"q","ensemble":2,"write_quorum":3}"#, 400),
        // Record 1 would carry sequence 2^64 (it wrapped to 0, and was written).
        (
            "POST",
            "/v1/logs/orders/records:batch",
            r#"{"records":["eA==","eQ=="],"producer_id":"p","sequence":18446744073709551615}"#,
            400,
        ),
    ] {
        let (status, v) = g.json(method, path, body);
        assert_eq!(status, code, "{method} {path} {body}: {v}");
        assert!(v["error"].is_string() && v["message"].is_string(), "{v}");
    }
    let (status, v) = g.json("GET", "/v1/logs/orders/records?from=8&follow=true&wait_ms=500", "");
    assert_eq!((status, v["records"].clone()), (200, json!([])), "nothing refused was written: {v}");
    let (status, v) = g.json("GET", "/v1/logs", "");
    assert_eq!((status, v["logs"].clone()), (200, json!(["orders"])));
    let (status, _) = g.call("DELETE", "/v1/logs/orders/cursors/billing", None, b"");
    assert_eq!(status, 204);
    let (status, v) = g.json("GET", "/v1/logs/orders/cursors/billing", "");
    assert_eq!((status, error_of(&v)), (404, "NoSuchCursor"));
    let (status, _) = g.call("DELETE", "/v1/logs/orders", None, b"");
    assert_eq!(status, 204);
    let (status, v) = g.json("GET", "/v1/logs/orders", "");
    assert_eq!((status, error_of(&v)), (404, "NoSuchLog"));
}

/// Issue #47 items 3 and 4 over HTTP: a batch is written whole into one
/// ledger (the rollover waits for its end); every record read carries its
/// writer's time (one per batch, never decreasing, taken as it was
/// appended), and `from_time` starts at the first record at or after a time.
#[test]
fn records_carry_their_time_and_are_read_from_a_time_over_http() {
    let g = start();
    let (status, v) = g.json("POST", "/v1/logs", r#"{"name":"clock","rollover":{"max_entries":2}}"#);
    assert_eq!(status, 201, "{v}");
    let b64 = base64::engine::general_purpose::STANDARD;
    let now_ms = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    let before = now_ms();
    let batch = json!({ "records": [b64.encode("b0"), b64.encode("b1"), b64.encode("b2")] });
    let (status, v) = g.json("POST", "/v1/logs/clock/records:batch", &batch.to_string());
    assert_eq!((status, v["offsets"].clone()), (200, json!([0, 1, 2])), "{v}");
    let after = now_ms();
    let (_, v) = g.json("GET", "/v1/logs/clock", "");
    assert_eq!(v["ledgers"].as_array().unwrap().len(), 1, "3 records in a ledger of 2: not cut: {v}");
    for i in 3..6 {
        let (status, b) = g.call("POST", "/v1/logs/clock/records", None, format!("r{i}").as_bytes());
        assert_eq!((status, json(&b)["offset"].as_u64()), (200, Some(i)));
    }
    let (status, v) = g.json("GET", "/v1/logs/clock/records?from=0", "");
    assert_eq!(status, 200, "{v}");
    let rs = v["records"].as_array().unwrap().clone();
    assert_eq!(rs.len(), 6, "{v}");
    let times: Vec<u64> = rs.iter().map(|r| r["time_ms"].as_u64().unwrap()).collect();
    assert!((before..=after).contains(&times[0]), "taken as it was appended: {times:?} in {before}..={after}");
    assert!(times[..3].iter().all(|t| *t == times[0]), "one time per batch: {times:?}");
    assert!(times.windows(2).all(|p| p[0] <= p[1]), "never decreasing: {times:?}");
    let (_, log) = g.json("GET", "/v1/logs/clock", "");
    assert_eq!(log["ledgers"][0]["end_offset"].as_u64(), Some(3), "{log}");
    // From a time: the first record at or after it.
    for t in times.iter().flat_map(|t| [*t - 1, *t, *t + 1]) {
        let expected = times.iter().position(|x| *x >= t).unwrap_or(6) as u64;
        let (status, v) = g.json("GET", &format!("/v1/logs/clock/records?from_time={t}"), "");
        assert_eq!(status, 200, "{v}");
        let first = v["records"][0]["offset"].as_u64();
        assert_eq!((first.unwrap_or(v["next"].as_u64().unwrap())), expected, "from_time={t}: {v}");
    }
    let (status, v) = g.json("GET", "/v1/logs/clock/records?from_time=1&from=2", "");
    assert_eq!((status, error_of(&v)), (400, "BadRequest"), "{v}");
    let (status, v) = g.json("GET", "/v1/logs/clock/records?from_time=x", "");
    assert_eq!(status, 400, "{v}");
    let (status, v) = g.json("GET", "/v1/logs/missing/records?from_time=1", "");
    assert_eq!((status, error_of(&v)), (404, "NoSuchLog"), "{v}");
}

/// Issue #47 item 1, read your writes over HTTP: a GET sent after a POST
/// was answered returns the record, through the gateway that owns the log
/// and through another one, for single records and batches.
#[test]
fn an_answered_append_is_read_at_once_through_either_gateway() {
    let g = start();
    let (_second, other) = second_gateway(&g);
    let (status, v) = g.json("POST", "/v1/logs", r#"{"name":"ryw","rollover":{"max_entries":5}}"#);
    assert_eq!(status, 201, "{v}");
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut next = 0u64;
    for i in 0..30u64 {
        let offsets: Vec<u64> = if i % 3 == 2 {
            let batch = json!({ "records": [b64.encode(format!("r{next}")), b64.encode(format!("r{}", next + 1))] });
            let (status, v) = g.json("POST", "/v1/logs/ryw/records:batch", &batch.to_string());
            assert_eq!(status, 200, "{v}");
            v["offsets"].as_array().unwrap().iter().map(|o| o.as_u64().unwrap()).collect()
        } else {
            let (status, b) = g.call("POST", "/v1/logs/ryw/records", None, format!("r{next}").as_bytes());
            assert_eq!(status, 200);
            vec![json(&b)["offset"].as_u64().unwrap()]
        };
        assert_eq!(offsets[0], next);
        let path = format!("/v1/logs/ryw/records?from={next}");
        for (via, http) in [("the owner", &g.http), ("another gateway", &other)] {
            let (status, b) = call(http, "GET", &path, None, b"");
            let v = json(&b);
            assert_eq!(status, 200, "{v}");
            let got: Vec<u64> =
                v["records"].as_array().unwrap().iter().map(|r| r["offset"].as_u64().unwrap()).collect();
            assert_eq!(got, offsets, "read through {via} right after the append at {next}");
        }
        next += offsets.len() as u64;
    }
}

/// Issue #47 item 2 over HTTP: `expected_offset` on a single append and
/// in a batch's body; a mismatch is 412 with the log's next offset and
/// writes nothing; an idempotent retry of a written conditional append
/// answers its offset.
#[test]
fn a_conditional_append_over_http_is_412_with_the_next_offset() {
    let g = start();
    let (status, v) = g.json("POST", "/v1/logs", r#"{"name":"cas"}"#);
    assert_eq!(status, 201, "{v}");
    let (status, b) = g.call("POST", "/v1/logs/cas/records?expected_offset=0", None, b"a");
    assert_eq!((status, json(&b)["offset"].as_u64()), (200, Some(0)));
    let (status, b) = g.call("POST", "/v1/logs/cas/records?expected_offset=0", None, b"b");
    let v = json(&b);
    assert_eq!((status, error_of(&v), v["next_offset"].as_u64()), (412, "PreconditionFailed", Some(1)), "{v}");
    let b64 = base64::engine::general_purpose::STANDARD;
    let batch = json!({ "records": [b64.encode("b"), b64.encode("c")], "expected_offset": 2 });
    let (status, v) = g.json("POST", "/v1/logs/cas/records:batch", &batch.to_string());
    assert_eq!((status, v["next_offset"].as_u64()), (412, Some(1)), "{v}");
    let batch = json!({ "records": [b64.encode("b"), b64.encode("c")], "expected_offset": 1, "producer_id": "p", "sequence": 0 });
    for attempt in 0..2 {
        let (status, v) = g.json("POST", "/v1/logs/cas/records:batch", &batch.to_string());
        assert_eq!((status, v["offsets"].clone()), (200, json!([1, 2])), "attempt {attempt}: {v}");
    }
    let (status, v) = g.json("GET", "/v1/logs/cas/records?from=0", "");
    assert_eq!(status, 200);
    let data: Vec<Vec<u8>> =
        v["records"].as_array().unwrap().iter().map(|r| b64.decode(r["data"].as_str().unwrap()).unwrap()).collect();
    assert_eq!(data, vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()], "nothing refused was written: {v}");
}

/// Issue #47 item 5: a log followed as server-sent events (what a
/// browser's EventSource reads): one event a record as it commits, its id
/// the offset; heartbeats as comments while idle; a reconnection with
/// Last-Event-ID resumes after it. A missing log is a 404 and a bad
/// Last-Event-ID a 400, before any stream.
#[test]
fn a_log_is_followed_as_server_sent_events_and_resumed_by_last_event_id() {
    let g = start_args(None, 3, false, &["--follow-heartbeat-ms", "300"]);
    let (status, v) = g.json("POST", "/v1/logs", r#"{"name":"sse","rollover":{"max_entries":2}}"#);
    assert_eq!(status, 201, "{v}");
    let (status, _) = g.call("POST", "/v1/logs/sse/records", None, b"a");
    assert_eq!(status, 200);
    let sse = [("Accept", "text/event-stream")];
    let (status, head, mut e) = Streamed::open(&g.http, "/v1/logs/sse/records?from=0&follow=true", &sse);
    assert_eq!(status, 200, "{head}");
    assert!(head.to_ascii_lowercase().contains("content-type: text/event-stream"), "{head}");
    // The next event (its lines), past heartbeat comments.
    let next_event = |e: &mut Streamed| -> Vec<String> {
        let mut lines = Vec::new();
        loop {
            let l = e.line().expect("the stream goes on");
            if l.is_empty() {
                if lines.iter().any(|l: &String| !l.starts_with(':')) {
                    return lines.into_iter().filter(|l| !l.starts_with(':')).collect();
                }
                lines.clear();
            } else {
                lines.push(l);
            }
        }
    };
    let b64 = base64::engine::general_purpose::STANDARD;
    let event = |offset: u64, data: &str| {
        vec![
            format!("id: {offset}"),
            "event: record".to_string(),
            format!("data: {}", json!({ "offset": offset, "data": b64.encode(data) })),
        ]
    };
    // Every record carries its time (issue #47 item 4): checked, then left
    // out of the comparison.
    let without_time = |mut ev: Vec<String>| {
        if let Some(data) = ev.iter_mut().find(|l| l.starts_with("data: ")) {
            let mut v: Value = serde_json::from_str(&data["data: ".len()..]).unwrap();
            assert!(v["time_ms"].as_u64().is_some_and(|t| t > 0), "{v}");
            v.as_object_mut().unwrap().remove("time_ms");
            *data = format!("data: {v}");
        }
        ev
    };
    assert_eq!(without_time(next_event(&mut e)), event(0, "a"));
    // Records committed later arrive as they commit, across a rollover.
    for (i, data) in ["b", "c", "d"].iter().enumerate() {
        let (status, _) = g.call("POST", "/v1/logs/sse/records", None, data.as_bytes());
        assert_eq!(status, 200);
        assert_eq!(without_time(next_event(&mut e)), event(i as u64 + 1, data));
    }
    drop(e);
    // An EventSource reconnecting after event 1 resumes at 2, whatever from says.
    let (status, head, mut e) = Streamed::open(
        &g.http,
        "/v1/logs/sse/records?from=0&follow=true",
        &[("Accept", "text/event-stream"), ("Last-Event-ID", "1")],
    );
    assert_eq!(status, 200, "{head}");
    assert_eq!(without_time(next_event(&mut e)), event(2, "c"));
    assert_eq!(without_time(next_event(&mut e)), event(3, "d"));
    drop(e);
    let (status, _, body) = call_with(&g.http, "GET", "/v1/logs/missing/records?follow=true", None, &sse, b"");
    assert_eq!((status, error_of(&json(&body))), (404, "NoSuchLog"));
    let (status, _, body) = call_with(
        &g.http,
        "GET",
        "/v1/logs/sse/records?follow=true",
        None,
        &[("Accept", "text/event-stream"), ("Last-Event-ID", "x")],
        b"",
    );
    assert_eq!((status, error_of(&json(&body))), (400, "BadRequest"));
}

/// Two gateways, one log: appends go to its owner. The other gateway
/// answers 409 NotOwner naming it for as long as the owner holds its
/// lease (never taking turns); once the owner is gone and its lease lapsed,
/// the other takes the log over: every record the first acknowledged keeps
/// its offset, and the new owner's follow them.
#[test]
fn a_log_is_written_by_one_gateway_and_moves_only_when_its_lease_lapses() {
    let mut g = start();
    let (_second, other) = second_gateway(&g);

    let (status, v) = g.json("POST", "/v1/logs", r#"{"name":"shared"}"#);
    assert_eq!(status, 201, "{v}");
    for i in 0..3u64 {
        let (status, b) = g.call("POST", "/v1/logs/shared/records", None, format!("a{i}").as_bytes());
        assert_eq!((status, json(&b)["offset"].as_u64()), (200, Some(i)));
    }
    // The other gateway refuses, naming the owner, while the owner lives
    // (longer than a lease: the owner renews it).
    let deadline = std::time::Instant::now() + Duration::from_secs(12);
    while std::time::Instant::now() < deadline {
        let (status, b) = call(&other, "POST", "/v1/logs/shared/records", None, b"b");
        let v = json(&b);
        assert_eq!((status, error_of(&v)), (409, "NotOwner"), "{v}");
        assert!(v["message"].as_str().unwrap().contains("gateway/1:"), "names the owner: {v}");
        // Reads are anyone's.
        let (status, _) = call(&other, "GET", "/v1/logs/shared/records?from=0", None, b"");
        assert_eq!(status, 200);
    }
    // The owner stops; once its lease lapses the other takes the log over.
    g._proc.kill().unwrap();
    let offset = quire_testkit::wait_until(Duration::from_secs(30), "the second gateway to take the log over", || {
        let (status, b) = call(&other, "POST", "/v1/logs/shared/records", None, b"b0");
        (status == 200).then(|| json(&b)["offset"].as_u64().unwrap())
    })
    .unwrap();
    assert_eq!(offset, 3, "offsets run on after the takeover");
    let (_, v) = json_call(&other, "GET", "/v1/logs/shared");
    assert_eq!(v["epoch"], 2, "{v}");
    assert_eq!(log_records(&other, "shared", 4), ["a0", "a1", "a2", "b0"]);
}

/// The first `n` records of `log`, as text, followed until there are `n`
/// (a read answers up to the LAC, which trails the last append).
fn log_records(http: &str, log: &str, n: usize) -> Vec<String> {
    let mut got = Vec::new();
    while got.len() < n {
        let path = format!("/v1/logs/{log}/records?from={}&follow=true&wait_ms=5000", got.len());
        let (status, v) = json_call(http, "GET", &path);
        assert_eq!(status, 200, "{v}");
        got.extend(v["records"].as_array().unwrap().clone());
    }
    let b64 = base64::engine::general_purpose::STANDARD;
    got.iter().map(|r| String::from_utf8(b64.decode(r["data"].as_str().unwrap()).unwrap()).unwrap()).collect()
}

/// A gateway that stops cleanly gives its logs' leases up: another
/// gateway takes a log over at its first append, not a lease later.
#[test]
fn a_gateway_that_stops_gives_its_logs_up_at_once() {
    let mut g = start();
    let (_second, other) = second_gateway(&g);
    let (status, v) = g.json("POST", "/v1/logs", r#"{"name":"handover"}"#);
    assert_eq!(status, 201, "{v}");
    let (status, _) = g.call("POST", "/v1/logs/handover/records", None, b"a0");
    assert_eq!(status, 200);
    let (status, _) = call(&other, "POST", "/v1/logs/handover/records", None, b"b");
    assert_eq!(status, 409, "owned by the first");
    g._proc.terminate(Duration::from_secs(30)).unwrap();
    let (status, b) = call(&other, "POST", "/v1/logs/handover/records", None, b"b0");
    assert_eq!((status, json(&b)["offset"].as_u64()), (200, Some(1)), "{}", String::from_utf8_lossy(&b));
}

/// An explicit takeover moves a log between gateways at once: the one
/// asked takes the lock from the owner and fences it; the earlier owner's
/// next append is refused (LogFenced, then NotOwner naming the new one),
/// never acknowledged; offsets run on. Asked of the owner, it changes
/// nothing.
#[test]
fn an_explicit_takeover_moves_a_log_to_the_gateway_asked_and_fences_the_owner() {
    let g = start();
    let (_second, other) = second_gateway(&g);
    let (status, v) = g.json("POST", "/v1/logs", r#"{"name":"moved"}"#);
    assert_eq!(status, 201, "{v}");
    for i in 0..3u64 {
        let (status, b) = g.call("POST", "/v1/logs/moved/records", None, format!("a{i}").as_bytes());
        assert_eq!((status, json(&b)["offset"].as_u64()), (200, Some(i)));
    }
    let (status, v) = g.json("POST", "/v1/logs/moved/takeover", "");
    assert_eq!((status, v["epoch"].as_u64()), (200, Some(1)), "the owner asked: nothing moves: {v}");
    let (status, v) = json_call(&other, "POST", "/v1/logs/missing/takeover");
    assert_eq!((status, error_of(&v)), (404, "NoSuchLog"), "{v}");
    let (status, v) = json_call(&other, "POST", "/v1/logs/moved/takeover");
    assert_eq!((status, v["epoch"].as_u64()), (200, Some(2)), "{v}");
    assert!(v["owner"].as_str().unwrap().contains('@'), "{v}");
    let (status, b) = call(&other, "POST", "/v1/logs/moved/records", None, b"b0");
    assert_eq!((status, json(&b)["offset"].as_u64()), (200, Some(3)), "{}", String::from_utf8_lossy(&b));
    // The earlier owner acknowledges nothing more: its writer is fenced
    // (LogFenced), or already let go when its lease renewal found the
    // lock taken (NotOwner); then it names the new owner.
    let (status, v) = g.json("POST", "/v1/logs/moved/records", "x");
    assert!(status == 409 && ["LogFenced", "NotOwner"].contains(&error_of(&v)), "{v}");
    let (status, v) = g.json("POST", "/v1/logs/moved/records", "x");
    assert_eq!((status, error_of(&v)), (409, "NotOwner"), "{v}");
    assert!(v["message"].as_str().unwrap().contains("gateway/2:"), "{v}");
    assert_eq!(log_records(&g.http, "moved", 4), ["a0", "a1", "a2", "b0"]);
    // Taken back at once by the first, whose old writer has not noticed
    // yet that it was fenced: a takeover, not a no-op (epoch 3).
    let (status, v) = g.json("POST", "/v1/logs/moved/takeover", "");
    assert_eq!((status, v["epoch"].as_u64()), (200, Some(3)), "{v}");
    let (status, b) = g.call("POST", "/v1/logs/moved/records", None, b"a3");
    assert_eq!((status, json(&b)["offset"].as_u64()), (200, Some(4)), "{}", String::from_utf8_lossy(&b));
    let (status, v) = json_call(&other, "POST", "/v1/logs/moved/records");
    assert!(status == 409 && ["LogFenced", "NotOwner"].contains(&error_of(&v)), "{v}");
}

/// A log made by a library (not through a gateway) is its maker's: no
/// HTTP principal may append to it, take it over, trim it or delete it, and
/// trying fences nothing (its maker's writer goes on); anyone may read it.
#[test]
fn a_log_made_by_a_library_is_not_changed_over_http() {
    let g = start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let w = rt.block_on(async {
        let c = library_client(&g);
        let config = quire_log::LogConfig {
            ensemble_size: 3,
            write_quorum: 3,
            ack_quorum: 2,
            rollover: Default::default(),
            retention: Default::default(),
        };
        let w = c.create_log("app", config, "the-app").await.unwrap();
        w.append(bytes::Bytes::from_static(b"r0")).await.unwrap();
        w
    });
    for (method, path, body) in [
        ("POST", "/v1/logs/app/records", "x"),
        ("POST", "/v1/logs/app/takeover", ""),
        ("POST", "/v1/logs/app/trim", r#"{"before":1}"#),
        ("DELETE", "/v1/logs/app", ""),
    ] {
        let (status, v) = g.json(method, path, body);
        assert_eq!((status, error_of(&v)), (403, "Forbidden"), "{method} {path}: {v}");
    }
    let offset = rt.block_on(w.append(bytes::Bytes::from_static(b"r1"))).expect("the maker's writer was not fenced");
    assert_eq!(offset, 1);
    assert_eq!(log_records(&g.http, "app", 2), ["r0", "r1"]);
}

/// A gateway lets a log it no longer writes go (--log-idle-ms), with its
/// lease: another gateway then takes it over at its first append, without
/// waiting for the first to stop. While appends keep coming, the owner
/// keeps it.
#[test]
fn a_gateway_lets_an_idle_log_go() {
    let g = start_args(None, 3, false, &["--log-idle-ms", "1500"]);
    let (_second, other) = second_gateway(&g);
    let (status, v) = g.json("POST", "/v1/logs", r#"{"name":"quiet"}"#);
    assert_eq!(status, 201, "{v}");
    // Busy for longer than the idle limit: held all along.
    let busy_until = std::time::Instant::now() + Duration::from_secs(3);
    let mut n = 0;
    while std::time::Instant::now() < busy_until {
        let (status, _) = g.call("POST", "/v1/logs/quiet/records", None, b"a");
        assert_eq!(status, 200);
        n += 1;
        let (status, v) = json_call(&other, "POST", "/v1/logs/quiet/records");
        assert_eq!((status, error_of(&v)), (409, "NotOwner"), "{v}");
    }
    // Then idle: let go, well within a lease's renewals.
    let offset = quire_testkit::wait_until(Duration::from_secs(8), "the idle log to be let go", || {
        let (status, b) = call(&other, "POST", "/v1/logs/quiet/records", None, b"b");
        (status == 200).then(|| json(&b)["offset"].as_u64().unwrap())
    })
    .unwrap();
    assert_eq!(offset, n, "offsets run on");
    assert!(g._proc.log().contains("letting an idle log's writer go"), "the first let it go (not a lapse)");
}

/// A log created over HTTP is its principal's to append to, trim, take
/// over, hold the retention of and delete; another principal may read it
/// and keep a cursor of its own, nothing more.
#[test]
fn a_log_created_over_http_is_its_principals_to_change() {
    let g = start_with_token(Some("s3cret"));
    let (a, b) = ([("Authorization", "Bearer s3cret")], [("Authorization", "Bearer other-token")]);
    let j = Some("application/json");
    let (status, _, body) = call_with(&g.http, "POST", "/v1/logs", j, &a, br#"{"name":"mine"}"#);
    assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
    let principal = json(&body)["principal"].as_str().unwrap().to_string();
    assert!(principal.starts_with("token-") && !principal.contains("s3cret"), "{principal}");
    for i in 0..2 {
        let (status, _, body) =
            call_with(&g.http, "POST", "/v1/logs/mine/records", None, &a, format!("a{i}").as_bytes());
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    }
    for (method, path, body) in [
        ("POST", "/v1/logs/mine/records", &b"x"[..]),
        ("POST", "/v1/logs/mine/records:batch", &br#"{"records":["eA=="]}"#[..]),
        ("POST", "/v1/logs/mine/trim", &br#"{"before":1}"#[..]),
        ("POST", "/v1/logs/mine/takeover", &b""[..]),
        ("PUT", "/v1/logs/mine/cursors/hog", &br#"{"holds_retention":true}"#[..]),
        ("DELETE", "/v1/logs/mine", &b""[..]),
    ] {
        let (status, _, got) = call_with(&g.http, method, path, j, &b, body);
        assert_eq!((status, error_of(&json(&got))), (403, "Forbidden"), "{method} {path}");
    }
    // Reads, and a cursor that holds nothing, are anyone's.
    let path = "/v1/logs/mine/records?from=1&follow=true&wait_ms=5000";
    let (status, _, got) = call_with(&g.http, "GET", path, None, &b, b"");
    assert_eq!((status, json(&got)["next"].as_u64()), (200, Some(2)));
    let (status, _, got) = call_with(&g.http, "PUT", "/v1/logs/mine/cursors/reader", j, &b, b"");
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&got));
    let (status, _, got) = call_with(&g.http, "POST", "/v1/logs/mine/cursors/reader", j, &b, br#"{"ack":2}"#);
    assert_eq!((status, json(&got)["position"].as_u64()), (200, Some(2)));
    // The owner's holding cursor is the owner's to move.
    let (status, _, _) = call_with(&g.http, "PUT", "/v1/logs/mine/cursors/hold", j, &a, br#"{"holds_retention":true}"#);
    assert_eq!(status, 200);
    for (method, body) in [("POST", &br#"{"ack":1}"#[..]), ("PUT", &br#"{"position":2}"#[..]), ("DELETE", &b""[..])] {
        let (status, _, got) = call_with(&g.http, method, "/v1/logs/mine/cursors/hold", j, &b, body);
        assert_eq!((status, error_of(&json(&got))), (403, "Forbidden"), "{method}");
    }
    let (status, _, got) = call_with(&g.http, "GET", "/v1/logs/mine/cursors/hold", None, &b, b"");
    assert_eq!((status, json(&got)["position"].as_u64()), (200, Some(0)), "unmoved");
    let (status, _, _) = call_with(&g.http, "POST", "/v1/logs/mine/takeover", None, &a, b"");
    assert_eq!(status, 200);
    assert_eq!(call_with(&g.http, "DELETE", "/v1/logs/mine", None, &a, b"").0, 204);
}

/// A library client (certificate client/1) of `g`'s cluster, made on the
/// runtime it is called from.
fn library_client(g: &Gateway) -> quire_client::Client {
    let files = quire_rpc::TlsFiles::in_dir(&g.cluster.certs, quire_proto::Role::Client, "1");
    let rpc = quire_rpc::RpcClient::new(&quire_rpc::Credentials::load(&files).unwrap(), Default::default()).unwrap();
    let meta = std::sync::Arc::new(quire_metaclient::MetaClient::new(
        rpc.clone(),
        g.cluster.metadata.addrs.clone(),
        Default::default(),
    ));
    quire_client::Client::new(rpc, meta, Default::default())
}

/// Another gateway (certificate gateway/2) on `g`'s cluster: its process
/// and HTTP address.
fn second_gateway(g: &Gateway) -> (Process, String) {
    let certs = g.cluster.certs.clone();
    let ca = quire_pki::CertAuthority::load(&certs).unwrap();
    ca.issue(quire_proto::Role::Gateway, "2", &IssueOptions::default())
        .unwrap()
        .write(&certs, quire_proto::Role::Gateway, "2")
        .unwrap();
    let ready = g._dir.path().join("gateway-2-http.ready");
    let ready_arg = ready.to_str().unwrap().to_string();
    let mut p = g
        .cluster
        .start_service("quire-gateway", "2", &["--http-listen", "127.0.0.1:0", "--http-ready-file", &ready_arg])
        .unwrap();
    let http = p.wait_ready(&ready, Duration::from_secs(30)).unwrap();
    (p, http)
}

/// Issue #49: a ledger a log holds is not deleted alone, and that is 409
/// LedgerInLog (the request is well formed; the ledger's state forbids
/// it), not 400. With the metadata service gone, every route that needs it
/// fails with the API's error, and no error names a replica's or a
/// bookie's address (the gateway's log keeps them).
#[test]
fn a_logs_ledger_is_not_deleted_alone_and_no_error_names_an_internal_address() {
    // Past the metadata client's own deadline (15 s), so its error, which
    // names the replicas it tried, is what the routes answer.
    let mut g = start_args(None, 3, false, &["--request-timeout-ms", "30000"]);
    let (status, l) = g.json("POST", "/v1/logs", r#"{"name":"kept"}"#);
    assert_eq!(status, 201, "{l}");
    let ledger = l["ledgers"][0]["ledger_id"].as_u64().unwrap();
    let (status, v) = g.json("DELETE", &format!("/v1/ledgers/{ledger}"), "");
    assert_eq!((status, error_of(&v)), (409, "LedgerInLog"), "{v}");
    let message = v["message"].as_str().unwrap();
    assert!(message.contains(&format!("ledger {ledger} is in log kept")) && message.contains("trim the log"), "{v}");
    let (status, v) = g.json("GET", &format!("/v1/ledgers/{ledger}"), "");
    assert_eq!(status, 200, "the ledger is still there: {v}");
    let (status, _) = g.call("POST", "/v1/logs/kept/records", None, b"r0");
    assert_eq!(status, 200);

    let mut internal: Vec<String> = g.cluster.metadata.addrs.clone();
    internal.extend(g.cluster.bookies.iter().map(|b| b.addr.clone()));
    for p in &mut g.cluster.metadata.procs {
        p.kill().unwrap();
    }
    let delete = format!("/v1/ledgers/{ledger}");
    let requests = [
        ("GET", "/readyz", ""),
        ("POST", "/v1/ledgers", ""),
        ("GET", "/v1/ledgers", ""),
        ("GET", "/v1/ledgers/999999", ""),
        ("DELETE", delete.as_str(), ""),
        ("GET", "/v1/bookies", ""),
        ("GET", "/v1/cluster", ""),
        ("POST", "/v1/logs", r#"{"name":"new"}"#),
        ("GET", "/v1/logs/kept", ""),
        ("PUT", "/v1/logs/kept/cursors/c", "{}"),
    ];
    // At once: each waits out the metadata client's deadline.
    let answers: Vec<(u16, Value)> = std::thread::scope(|s| {
        let g = &g;
        let handles: Vec<_> = requests.iter().map(|(m, p, b)| s.spawn(move || g.json(m, p, b))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut answered = Vec::new();
    for ((method, path, _), (status, v)) in requests.iter().zip(&answers) {
        assert!(*status >= 500, "{method} {path} with no metadata replica up: {status} {v}");
        assert!(v["error"].is_string() && v["message"].is_string(), "{method} {path}: {v}");
        for a in &internal {
            assert!(!v.to_string().contains(a.as_str()), "{method} {path} names {a}: {v}");
        }
        answered.push(format!("{method} {path}: {status} {v}"));
    }
    // The test reached errors that carried an address (so the check above
    // could fail): the gateway logged them whole.
    let log = g._proc.log();
    assert!(
        log.contains("error answered without its internal addresses")
            && internal.iter().any(|a| log.contains(a.as_str())),
        "no error carried an address to remove; answers: {answered:#?}"
    );
}

fn json_call(http: &str, method: &str, path: &str) -> (u16, Value) {
    let (status, b) = call(http, method, path, None, b"");
    (status, json(&b))
}

#[test]
fn a_new_ledger_with_no_entries_answers_like_any_other() {
    let g = start();
    let (status, v) = g.json("POST", "/v1/ledgers", "");
    assert_eq!(status, 201, "{v}");
    let id = v["ledger_id"].as_u64().unwrap();
    let (status, v) = g.json("GET", &format!("/v1/ledgers/{id}/lac"), "");
    assert_eq!((status, v["lac"].as_i64()), (200, Some(-1)), "{v}");
    let (status, v) = g.json("GET", &format!("/v1/ledgers/{id}/entries/0"), "");
    assert_eq!((status, error_of(&v)), (404, "NoSuchEntry"), "{v}");
    let (status, v) = g.json("GET", &format!("/v1/ledgers/{id}/entries?from=0&to=5"), "");
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["entries"].as_array().map(Vec::len), Some(0), "{v}");
}

/// A chunked answer read as it comes: its body's lines, one at a time.
struct Streamed {
    r: std::io::BufReader<TcpStream>,
    pending: Vec<u8>,
    ended: bool,
}

impl Streamed {
    /// GET `path` with `headers`: (status, head, the body as it streams).
    fn open(http: &str, path: &str, headers: &[(&str, &str)]) -> (u16, String, Streamed) {
        use std::io::BufRead;
        let mut s = TcpStream::connect(http).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut req = format!("GET {path} HTTP/1.1\r\nHost: quire\r\n");
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        s.write_all(req.as_bytes()).unwrap();
        let mut r = std::io::BufReader::new(s);
        let mut head = String::new();
        loop {
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            if line == "\r\n" || line.is_empty() {
                break;
            }
            head.push_str(&line);
        }
        let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
        (status, head, Streamed { r, pending: Vec::new(), ended: false })
    }

    /// The next line of the body (without its newline); None once the
    /// answer has ended with its last chunk (a cut-off answer panics).
    fn line(&mut self) -> Option<String> {
        use std::io::BufRead;
        loop {
            if let Some(at) = self.pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.pending.drain(..=at).collect();
                return Some(String::from_utf8_lossy(&line[..line.len() - 1]).into_owned());
            }
            if self.ended {
                return None;
            }
            let mut size = String::new();
            self.r.read_line(&mut size).expect("a chunk size");
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or_else(|_| panic!("chunk size {size:?}"));
            let mut chunk = vec![0u8; n + 2];
            self.r.read_exact(&mut chunk).expect("a whole chunk");
            self.pending.extend_from_slice(&chunk[..n]);
            self.ended = n == 0;
        }
    }
}

/// Issue #21 item 5: `entries?follow=true` brings a ledger's entries as they
/// are acknowledged, keeps an idle connection alive with heartbeats, and
/// ends cleanly after the last entry once the ledger is closed; the same as
/// server-sent events, resumed from a Last-Event-ID.
#[test]
fn a_follow_stream_brings_entries_as_they_come_and_ends_at_the_close() {
    let g = start_args(None, 3, false, &["--follow-heartbeat-ms", "300", "--max-follows", "1"]);
    let (status, v) = g.json("POST", "/v1/ledgers", "");
    assert_eq!(status, 201, "{v}");
    let id = v["ledger_id"].as_u64().unwrap();
    let (status, head, mut s) = Streamed::open(&g.http, &format!("/v1/ledgers/{id}/entries?from=0&follow=true"), &[]);
    assert_eq!(status, 200, "{head}");
    assert!(head.to_ascii_lowercase().contains("content-type: application/x-ndjson"), "{head}");
    // Nothing written yet: a heartbeat, LAC -1 (the bookies hold the poll).
    let first: Value = serde_json::from_str(&s.line().unwrap()).unwrap();
    assert_eq!(first, json!({ "heartbeat": true, "lac": -1 }));
    // One follow at most here (--max-follows 1): a second is refused while it lives.
    let (status, v) = g.json("GET", &format!("/v1/ledgers/{id}/entries?follow=true"), "");
    assert_eq!((status, error_of(&v)), (503, "Overloaded"), "{v}");
    let b64 = base64::engine::general_purpose::STANDARD;
    let next_entry = |s: &mut Streamed| loop {
        let v: Value = serde_json::from_str(&s.line().expect("more lines")).unwrap();
        if v["heartbeat"] != true {
            return v;
        }
    };
    for (i, data) in ["a", "bb", "ccc"].iter().enumerate() {
        let (status, _) =
            g.call("POST", &format!("/v1/ledgers/{id}/entries"), Some("application/octet-stream"), data.as_bytes());
        assert_eq!(status, 200);
        // Each arrives before the next is written: the stream follows the LAC.
        assert_eq!(next_entry(&mut s), json!({ "entry_id": i, "data": b64.encode(data) }));
    }
    let (status, _) = g.call("POST", &format!("/v1/ledgers/{id}/close"), None, b"");
    assert_eq!(status, 200);
    assert_eq!(next_entry(&mut s), json!({ "closed": true, "last_entry_id": 2 }));
    assert_eq!(s.line(), None, "the stream ends cleanly after the close");

    // Server-sent events, after entry 0 (an EventSource reconnecting).
    let path = format!("/v1/ledgers/{id}/entries?follow=true");
    let (status, head, mut e) =
        Streamed::open(&g.http, &path, &[("Accept", "text/event-stream"), ("Last-Event-ID", "0")]);
    assert_eq!(status, 200, "{head}");
    assert!(head.to_ascii_lowercase().contains("content-type: text/event-stream"), "{head}");
    let mut lines = Vec::new();
    while let Some(l) = e.line() {
        lines.push(l);
    }
    let events = lines.join("\n");
    let want = format!(
        "id: 1\nevent: entry\ndata: {}\n\nid: 2\nevent: entry\ndata: {}\n\nevent: closed\ndata: {}\n",
        json!({ "entry_id": 1, "data": b64.encode("bb") }),
        json!({ "entry_id": 2, "data": b64.encode("ccc") }),
        json!({ "closed": true, "last_entry_id": 2 })
    );
    assert_eq!(events, want);

    // `to` ends a follow where asked, and says it was not the ledger's end.
    let (status, _, body) = call_full(&g.http, "GET", &format!("{path}&from=0&to=1"), None, b"");
    assert_eq!(status, 200);
    let lines: Vec<Value> =
        String::from_utf8(body).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert_eq!(lines[2], json!({ "end": true, "last_entry_id": 1 }));
    // No entry id past i64::MAX is any ledger's.
    let (status, v) = g.json("GET", &format!("{path}&from=9223372036854775808"), "");
    assert_eq!((status, error_of(&v)), (400, "BadRequest"), "{v}");

    // A missing ledger is a 404 before any stream; a bad Last-Event-ID a 400.
    let (status, v) = g.json("GET", "/v1/ledgers/999999/entries?follow=true", "");
    assert_eq!((status, error_of(&v)), (404, "NoSuchLedger"), "{v}");
    let (status, _, body) =
        call_with(&g.http, "GET", &path, None, &[("Accept", "text/event-stream"), ("Last-Event-ID", "x")], b"");
    assert_eq!((status, error_of(&json(&body))), (400, "BadRequest"));

    // A ledger deleted while it is followed: the stream says why in its last
    // line and ends cleanly (schemathesis's stateful phase met a cut-off
    // stream, the chunked body never ended, when a delete raced a follow).
    let (status, v) = g.json("POST", "/v1/ledgers", "");
    assert_eq!(status, 201, "{v}");
    let gone = v["ledger_id"].as_u64().unwrap();
    let (status, head, mut s) = Streamed::open(&g.http, &format!("/v1/ledgers/{gone}/entries?follow=true"), &[]);
    assert_eq!(status, 200, "{head}");
    assert_eq!(serde_json::from_str::<Value>(&s.line().unwrap()).unwrap()["heartbeat"], true);
    let (status, _) = g.call("DELETE", &format!("/v1/ledgers/{gone}"), None, b"");
    assert_eq!(status, 204);
    let last = loop {
        let v: Value = serde_json::from_str(&s.line().expect("a last line before the end")).unwrap();
        if v["heartbeat"] != true {
            break v;
        }
    };
    assert_eq!(error_of(&last), "NoSuchLedger", "{last}");
    assert_eq!(s.line(), None, "the stream ends cleanly after the error");
}
