//! Every service's metrics scraped by a real Prometheus (Debian's
//! `prometheus` package, which .ci/run installs): the metadata replicas, the
//! bookies, the auditor, a replication worker and the gateway, after traffic
//! through the gateway; then PromQL over what it scraped.

use std::net::TcpStream;
use std::path::PathBuf;
use std::time::Duration;

use quire_pki::{init_dir, IssueOptions, LocalCluster};
use quire_testkit::{free_tcp_addr, http, Process, TestCluster};
use serde_json::Value;

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The result vector of an instant PromQL query.
fn query(prom: &str, q: &str) -> Vec<Value> {
    let (status, body) = http(prom, "GET", &format!("/api/v1/query?query={}", urlencode(q)), b"");
    assert_eq!(status, 200, "{q}: {body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    v["data"]["result"].as_array().cloned().unwrap_or_default()
}

/// Prometheus on PATH. Missing, the test fails: a check that did not run
/// never passes (.ci/run installs Debian's prometheus package, which has
/// promtool too).
fn prometheus() -> PathBuf {
    std::env::var_os("PATH")
        .and_then(|p| std::env::split_paths(&p).map(|d| d.join("prometheus")).find(|p| p.is_file()))
        .expect("prometheus is not on PATH: install Debian's prometheus package (.ci/run does)")
}

#[test]
fn a_real_prometheus_scrapes_every_service() {
    let prometheus = prometheus();
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    init_dir(&certs, "test", &LocalCluster { metadata: 3, bookies: 3 }, &IssueOptions::default()).unwrap();
    let cluster =
        TestCluster::start_with_metrics(dir.path(), &certs, &["r1", "r2", "r3"], &["--lease-ms", "3000"], &[]).unwrap();
    let _auditor = cluster.start_service("quire-auditor", "1", &["--audit-interval-ms", "500"]).unwrap();
    let _worker = cluster.start_service("quire-replication-worker", "1", &[]).unwrap();
    let (_gateway, gw) = cluster.start_gateway(&[]).unwrap();
    // Traffic, so that the histograms have something in them.
    let (status, body) = http(&gw, "POST", "/v1/ledgers", b"{}");
    assert_eq!(status, 201, "{body}");
    let id: u64 = serde_json::from_str::<Value>(&body).unwrap()["ledger_id"].as_u64().unwrap();
    for i in 0..20 {
        let (status, body) = http(&gw, "POST", &format!("/v1/ledgers/{id}/entries"), format!("entry {i}").as_bytes());
        assert_eq!(status, 200, "{body}");
    }

    let mut targets: Vec<(String, String)> = cluster.metrics.lock().unwrap().clone();
    targets.push(("gateway".to_string(), gw.clone()));
    let mut config = String::from("global:\n  scrape_interval: 1s\nscrape_configs:\n");
    for job in ["metadata", "bookie", "auditor", "replication-worker", "gateway"] {
        let addrs: Vec<String> = targets.iter().filter(|(j, _)| j == job).map(|(_, a)| format!("\"{a}\"")).collect();
        assert!(!addrs.is_empty(), "no {job} target");
        config
            .push_str(&format!("  - job_name: {job}\n    static_configs:\n      - targets: [{}]\n", addrs.join(", ")));
    }
    let config_file = dir.path().join("prometheus.yml");
    std::fs::write(&config_file, &config).unwrap();
    let prom = free_tcp_addr();
    let listen = format!("--web.listen-address={prom}");
    let config_arg = format!("--config.file={}", config_file.display());
    let tsdb = format!("--storage.tsdb.path={}", dir.path().join("tsdb").display());
    let _prometheus = Process::spawn("prometheus", &prometheus, &[&config_arg, &tsdb, &listen], dir.path()).unwrap();

    // Every target up.
    let n = targets.len();
    quire_testkit::wait_until(Duration::from_secs(60), "Prometheus to scrape every target", || {
        let (status, body) = TcpStream::connect(&prom).ok().map(|_| http(&prom, "GET", "/api/v1/targets", b""))?;
        let v: Value = serde_json::from_str(&body).ok()?;
        let up = v["data"]["activeTargets"].as_array()?.iter().filter(|t| t["health"] == "up").count();
        (status == 200 && up == n).then_some(())
    })
    .unwrap_or_else(|e| panic!("{e}: {}", http(&prom, "GET", "/api/v1/targets", b"").1));

    // What the dashboards use, from every instance that should have it.
    let expect: &[(&str, usize)] = &[
        ("quire_bookie_add_seconds_count > 0", 3),
        ("quire_bookie_journal_sync_seconds_count > 0", 3),
        ("quire_bookie_journal_batch_records_count > 0", 3),
        ("quire_bookie_journal_queue_records", 3),
        ("quire_bookie_write_cache_bytes", 3),
        ("quire_bookie_reads_write_cache_total", 3),
        ("quire_metadata_raft_term > 0", 3),
        ("quire_metadata_raft_applied_index > 0", 3),
        ("sum(quire_metadata_raft_leader) == 1", 1),
        ("quire_metadata_under_replicated_ledgers", 3),
        ("quire_gateway_append_seconds_count >= 20", 1),
        ("quire_gateway_lac_lag_entries", 1),
        ("quire_auditor_passes_total > 0", 1),
        ("quire_rereplication_bytes_total", 1),
        // The traffic came before the first scrape, so over all time, not a rate.
        ("histogram_quantile(0.99, sum by (le) (quire_bookie_add_seconds_bucket)) > 0", 1),
    ];
    let missing = quire_testkit::wait_until(Duration::from_secs(30), "every series", || {
        let missing: Vec<String> = expect
            .iter()
            .filter_map(|(q, n)| {
                let got = query(&prom, q).len();
                (got != *n).then(|| format!("{q}: {got} series, want {n}"))
            })
            .collect();
        missing.is_empty().then_some(())
    });
    if let Err(e) = missing {
        let still: Vec<String> = expect.iter().map(|(q, n)| format!("{q}: {} of {n}", query(&prom, q).len())).collect();
        panic!("{e}\n{}", still.join("\n"));
    }

    // Every metric the shipped Grafana dashboard plots exists, and the
    // shipped Prometheus configuration is valid.
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dashboard = std::fs::read_to_string(root.join("observability/grafana/dashboards/quire.json")).unwrap();
    let mut names: Vec<&str> = dashboard
        .match_indices("quire_")
        .map(|(i, _)| {
            let rest = &dashboard[i..];
            let end = rest.find(|c: char| !(c.is_ascii_lowercase() || c == '_')).unwrap_or(rest.len());
            &rest[..end]
        })
        .collect();
    names.sort_unstable();
    names.dedup();
    assert!(names.len() >= 15, "{names:?}");
    for name in names {
        assert_eq!(
            query(&prom, &format!("count({name})")).len(),
            1,
            "the dashboard plots {name}, which no service exports"
        );
    }
    let promtool = prometheus.with_file_name("promtool");
    assert!(promtool.is_file(), "no promtool beside {}", prometheus.display());
    let out = std::process::Command::new(promtool)
        .args(["check", "config"])
        .arg(root.join("observability/prometheus.yml"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
}
