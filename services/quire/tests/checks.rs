//! The operator's checks against a real cluster: selftest, bookie-sanity
//! (which must name a dead bookie), under-replicated.

use std::process::Command;
use std::time::Duration;

use quire_pki::{init_dir, IssueOptions, LocalCluster};
use quire_testkit::{bin_path, TestCluster};

fn quire(cluster: &TestCluster, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(bin_path("quire"))
        .args(args)
        .args(["--metadata", &cluster.metadata_flag(), "--certs-dir", cluster.certs.to_str().unwrap()])
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

#[test]
fn selftest_and_bookie_sanity_pass_on_a_healthy_cluster_and_name_a_dead_bookie() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    init_dir(&certs, "test", &LocalCluster { metadata: 3, bookies: 4 }, &IssueOptions::default()).unwrap();
    let mut cluster =
        TestCluster::start(dir.path(), &certs, &["r1", "r2", "r3", "r1"], &["--lease-ms", "30000"]).unwrap();
    quire_testkit::wait_until(Duration::from_secs(20), "4 bookies registered", || {
        let (ok, out, _) = quire(&cluster, &["bookies", "--json"]);
        (ok && serde_json::from_str::<serde_json::Value>(&out).unwrap().as_array().unwrap().len() == 4).then_some(())
    })
    .unwrap();

    let (ok, out, err) = quire(&cluster, &["selftest", "--entries", "50"]);
    assert!(ok, "{out}{err}");
    assert!(out.starts_with("selftest ok: ledger "), "{out}");
    let (ok, out, err) = quire(&cluster, &["bookie-sanity", "--json"]);
    assert!(ok, "{out}{err}");
    let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(rows.as_array().unwrap().len(), 4);
    assert!(rows.as_array().unwrap().iter().all(|r| r["ok"] == true), "{rows}");
    let (ok, out, _) = quire(&cluster, &["under-replicated", "--json"]);
    assert!(ok);
    assert_eq!(out.trim(), "[]");

    // A dead bookie (still registered: a long lease) fails its check, by name.
    cluster.kill_bookie(1).unwrap();
    let (ok, out, err) = quire(&cluster, &["bookie-sanity"]);
    assert!(!ok, "{out}");
    let line = out.lines().find(|l| l.starts_with("2 ")).unwrap_or_else(|| panic!("{out}"));
    assert!(line.contains(" NO "), "{out}");
    assert!(err.contains("1 of 4 bookies failed"), "{err}");
    // The cluster as a whole still works.
    let (ok, out, err) = quire(&cluster, &["selftest", "--entries", "20"]);
    assert!(ok, "{out}{err}");

    // Decommissioning from the CLI: shown, listed, cancelled.
    let (ok, out, err) = quire(&cluster, &["bookie", "decommission", "4", "--json"]);
    assert!(ok, "{out}{err}");
    let b: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (b["id"].as_str(), b["state"].as_str(), b["registered"].as_bool()),
        (Some("4"), Some("decommissioning"), Some(true))
    );
    let (ok, out, _) = quire(&cluster, &["bookies"]);
    assert!(ok && out.lines().any(|l| l.starts_with("4 ") && l.contains("decommissioning")), "{out}");
    let (ok, out, err) = quire(&cluster, &["bookie", "show", "4"]);
    assert!(ok && out.contains("state       decommissioning"), "{out}{err}");
    let (ok, out, err) = quire(&cluster, &["bookie", "recommission", "4", "--json"]);
    assert!(ok, "{out}{err}");
    assert_eq!(serde_json::from_str::<serde_json::Value>(&out).unwrap()["state"], "available");
    let (ok, _, err) = quire(&cluster, &["bookie", "show", "nobody"]);
    assert!(!ok && err.contains("no bookie nobody"), "{err}");
}
