//! README's first command: deploy/local/run.sh starts every service as its own
//! process with its own certificate, the metadata replicas elect a leader, the
//! bookies register, and every service answers over QUIC + mTLS.

use std::process::Command;

use quire_testkit::bin_path;

#[test]
fn the_local_cluster_comes_up_and_every_service_answers() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // The script runs the binaries beside this test (the same build).
    let bin_dir = bin_path("quire").parent().unwrap().to_path_buf();
    assert!(bin_dir.ends_with("release") || bin_dir.ends_with("debug"), "{}", bin_dir.display());
    let data = tempfile::tempdir().unwrap();
    let out = Command::new("bash")
        .arg(root.join("deploy/local/run.sh"))
        .arg(data.path())
        .env("ONESHOT", "1")
        .env("QUIRE_HTTP", quire_testkit::free_tcp_addr())
        .env("QUIRE_BIN", &bin_dir)
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "run.sh failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    for service in ["metadata-1", "metadata-3", "bookie-2", "auditor-1", "replication-worker-1", "gateway-1"] {
        assert!(stdout.contains(&format!("{service} at 127.0.0.1:")), "{service} missing:\n{stdout}");
    }
    for rack in ["rack-1", "rack-2", "rack-3"] {
        assert!(stdout.contains(rack), "bookie of {rack} not registered:\n{stdout}");
    }
    assert!(stdout.contains("closed at entry 1 and read back: [\"hello\", \"quire\"]"), "first ledger:\n{stdout}");
    assert!(stdout.contains("HTTP API: http://127.0.0.1:"), "{stdout}");
    assert!(stdout.contains("quire standalone up"), "{stdout}");
}
