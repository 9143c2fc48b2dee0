//! Issue #20 item 6: a certificate the operator revokes is refused by every
//! service at the handshake within seconds, without a restart; taken back,
//! it is served again. The list lives in the metadata service.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use quire_pki::{init_dir, IssueOptions, LocalCluster};
use quire_testkit::{bin_path, wait_until, TestCluster};

fn quire(args: &[&str]) -> Output {
    Command::new(bin_path("quire")).args(args).env("RUST_BACKTRACE", "0").output().expect("run quire")
}

fn ok(out: Output) -> String {
    assert!(out.status.success(), "quire failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// A ping of `addr` (a `role` server) as `as_role`/1; the error when refused.
fn ping(certs: &Path, addr: &str, role: &str, as_role: &str) -> Result<(), String> {
    let out = quire(&[
        "ping",
        "--addr",
        addr,
        "--role",
        role,
        "--certs-dir",
        certs.to_str().unwrap(),
        "--as-role",
        as_role,
        "--as-id",
        "1",
        "--timeout-ms",
        "2000",
    ]);
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[test]
fn a_revoked_certificate_is_refused_by_every_service_and_served_again_when_taken_back() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    init_dir(&certs, "test", &LocalCluster { metadata: 3, bookies: 1 }, &IssueOptions::default()).unwrap();
    let cluster = TestCluster::start(dir.path(), &certs, &["r1"], &["--lease-ms", "3000"]).unwrap();
    let (meta, bookie) = (cluster.metadata_flag(), cluster.bookies[0].addr.clone());
    let replicas: Vec<String> = meta.split(',').map(str::to_string).collect();
    let certs_s = certs.to_str().unwrap();
    ping(&certs, &bookie, "bookie", "client").unwrap();

    let shown = ok(quire(&["certs", "show", certs.join("client-1.pem").to_str().unwrap()]));
    assert!(shown.contains("identity:   client/1"), "{shown}");
    let serial = shown.lines().find_map(|l| l.strip_prefix("serial:")).unwrap().trim().to_string();
    // A serial that is not one is refused, saying why.
    let bad = quire(&["certs", "revoke", "--metadata", &meta, "--certs-dir", certs_s, "--serial", "xyz"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not a certificate serial"));
    ok(quire(&[
        "certs",
        "revoke",
        "--metadata",
        &meta,
        "--certs-dir",
        certs_s,
        "--serial",
        &serial,
        "--identity",
        "client/1",
        "--reason",
        "test: leaked",
    ]));

    // Every service refuses client/1 from now on: the bookie (it follows the
    // list) and each metadata replica (its own state holds it).
    wait_until(Duration::from_secs(20), "every service to refuse the revoked certificate", || {
        let refused: Vec<String> = std::iter::once(("bookie", bookie.as_str()))
            .chain(replicas.iter().map(|r| ("metadata", r.as_str())))
            .filter_map(|(role, addr)| ping(&certs, addr, role, "client").err())
            .collect();
        (refused.len() == 1 + replicas.len()).then_some(refused)
    })
    .map(|refused| {
        for e in refused {
            assert!(e.to_lowercase().contains("revoked"), "refused, but not for revocation: {e}");
        }
    })
    .unwrap();
    // Other certificates are served as before.
    ping(&certs, &bookie, "bookie", "admin").unwrap();
    ping(&certs, &bookie, "bookie", "gateway").unwrap();
    // A health check (no --as-id) goes on to its role's next certificate
    // when the first is revoked.
    ok(quire(&["certs", "issue", "--dir", certs_s, "--role", "client", "--id", "2"]));
    ok(quire(&[
        "ping",
        "--addr",
        &bookie,
        "--role",
        "bookie",
        "--certs-dir",
        certs_s,
        "--as-role",
        "client",
        "--timeout-ms",
        "2000",
    ]));
    let listed = ok(quire(&["certs", "revoked", "--metadata", &meta, "--certs-dir", certs_s, "--json"]));
    let v: serde_json::Value = serde_json::from_str(listed.trim()).unwrap();
    assert_eq!(v["revoked"][0]["serial"], serial.as_str(), "{listed}");

    // Taken back (a mistaken serial): served again.
    ok(quire(&["certs", "revoke", "--metadata", &meta, "--certs-dir", certs_s, "--serial", &serial, "--undo"]));
    wait_until(Duration::from_secs(20), "the certificate to be served again", || {
        (ping(&certs, &bookie, "bookie", "client").is_ok() && ping(&certs, &replicas[0], "metadata", "client").is_ok())
            .then_some(())
    })
    .unwrap();
}
