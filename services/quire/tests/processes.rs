//! Real processes: the `quire` CLI creates certificates, service binaries serve
//! over QUIC with mTLS, and requests cross process boundaries. Every rejection
//! is seen from both ends: the caller's error and the server's log.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use quire_testkit::{bin_path, wait_until, Process};

const READY: Duration = Duration::from_secs(20);

fn quire(args: &[&str]) -> Output {
    Command::new(bin_path("quire")).args(args).env("RUST_BACKTRACE", "0").output().expect("run quire")
}

fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "quire failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn start(bin: &str, name: &str, dir: &Path, extra: &[&str]) -> (Process, String) {
    start_at(bin, name, dir, "127.0.0.1:0", extra)
}

fn start_at(bin: &str, name: &str, dir: &Path, listen: &str, extra: &[&str]) -> (Process, String) {
    let ready = dir.join(format!("{name}.ready"));
    let ready_s = ready.to_str().unwrap().to_string();
    let mut args = vec!["--listen", listen, "--ready-file", &ready_s];
    args.extend_from_slice(extra);
    let mut p = Process::spawn(name, &bin_path(bin), &args, dir).unwrap();
    let addr = p.wait_ready(&ready, READY).unwrap();
    (p, addr)
}

#[test]
fn requests_cross_real_processes_over_mtls() {
    let tmp = tempfile::tempdir().unwrap();
    let certs = tmp.path().join("certs");
    let certs_s = certs.to_str().unwrap();
    let out = ok(quire(&["certs", "init", "--dir", certs_s]));
    assert!(out.contains("bookie-3.pem"), "{out}");

    let bookie_data = tmp.path().join("bookie-1");
    let (mut bookie, bookie_addr) = start(
        "quire-bookie",
        "bookie-1",
        tmp.path(),
        &["--certs-dir", certs_s, "--id", "1", "--data-dir", bookie_data.to_str().unwrap()],
    );
    // A one-replica metadata cluster: its address must be known before it starts.
    let meta_port = quire_testkit::free_udp_ports(1)[0];
    let meta_listen = format!("127.0.0.1:{meta_port}");
    let meta_peers = format!("2={meta_listen}");
    let meta_data = tmp.path().join("metadata-2");
    let (_meta, meta_addr) = start_at(
        "quire-metadata",
        "metadata-2",
        tmp.path(),
        &meta_listen,
        &["--certs-dir", certs_s, "--id", "2", "--peers", &meta_peers, "--data-dir", meta_data.to_str().unwrap()],
    );

    // The CLI (role admin) pings the bookie: three round trips across processes.
    let out = ok(quire(&[
        "ping",
        "--addr",
        &bookie_addr,
        "--role",
        "bookie",
        "--certs-dir",
        certs_s,
        "--count",
        "3",
        "--size",
        "1024",
        "--json",
    ]));
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["rtt_us"].as_array().unwrap().len(), 3, "{out}");

    // The metadata replica knows who it is and who called.
    let out = ok(quire(&["server-info", "--addr", &meta_addr, "--role", "metadata", "--certs-dir", certs_s, "--json"]));
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["role"], "metadata");
    assert_eq!(v["id"], "2");
    assert_eq!(v["caller"], "admin/1");

    // Dialling the bookie as a metadata replica: refused by the caller.
    let out = quire(&["server-info", "--addr", &bookie_addr, "--role", "metadata", "--certs-dir", certs_s]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not valid for name \"metadata.quire\""), "{err}");

    // A CLI holding a certificate of another cluster's CA: refused by the bookie.
    let rogue = tmp.path().join("rogue");
    ok(quire(&["certs", "init", "--dir", rogue.to_str().unwrap(), "--cluster", "rogue"]));
    std::fs::copy(certs.join("ca.pem"), rogue.join("ca.pem")).unwrap(); // trusts the real CA
    let out = quire(&["ping", "--addr", &bookie_addr, "--role", "bookie", "--certs-dir", rogue.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("UnknownIssuer"), "caller's error: {err}");
    wait_until(Duration::from_secs(10), "the bookie to log the refusal", || {
        bookie.log().contains("refused connection: TLS handshake failed").then_some(())
    })
    .unwrap();

    // SIGTERM: a graceful exit.
    let status = bookie.terminate(Duration::from_secs(10)).unwrap();
    assert!(status.success(), "{status}\n{}", bookie.log());
    assert!(bookie.log().contains("server stopped"));
}

#[test]
fn a_service_refuses_a_certificate_of_another_role() {
    let tmp = tempfile::tempdir().unwrap();
    let certs = tmp.path().join("certs");
    ok(quire(&["certs", "init", "--dir", certs.to_str().unwrap(), "--bookies", "1", "--metadata", "1"]));
    let out = Command::new(bin_path("quire-bookie"))
        .args(["--certs-dir", certs.to_str().unwrap(), "--cert"])
        .arg(certs.join("metadata-1.pem"))
        .arg("--key")
        .arg(certs.join("metadata-1.key"))
        .args(["--listen", "127.0.0.1:0"])
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("names metadata/1, but this is a bookie service"), "{err}");
}

#[test]
fn issued_certificates_and_toml_configuration_work_end_to_end() {
    let tmp = tempfile::tempdir().unwrap();
    let certs = tmp.path().join("certs");
    let certs_s = certs.to_str().unwrap();
    ok(quire(&["certs", "init", "--dir", certs_s, "--bookies", "1", "--metadata", "1"]));
    let out = ok(quire(&["certs", "issue", "--dir", certs_s, "--role", "auditor", "--id", "a7"]));
    assert!(out.contains("quire://auditor/a7"), "{out}");
    assert!(!quire(&["certs", "issue", "--dir", certs_s, "--role", "auditor", "--id", "../x"]).status.success());

    // Options from a TOML file; the flag given on the command line still wins.
    let cfg = tmp.path().join("auditor.toml");
    std::fs::write(
        &cfg,
        format!(
            "certs_dir = \"{certs_s}\"\nid = \"a7\"\nlisten = \"127.0.0.1:1\"\nlog = \"debug\"\nmetadata = \"127.0.0.1:9\"\n"
        ),
    )
    .unwrap();
    let (_auditor, addr) = start("quire-auditor", "auditor", tmp.path(), &["--config", cfg.to_str().unwrap()]);
    let out = ok(quire(&["server-info", "--addr", &addr, "--role", "auditor", "--certs-dir", certs_s, "--json"]));
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["id"], "a7");

    // An unknown key in the file is an error, not a silent default.
    std::fs::write(&cfg, "certs_dri = \"x\"\n").unwrap();
    let out = Command::new(bin_path("quire-auditor"))
        .args(["--config", cfg.to_str().unwrap()])
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown option \"certs_dri\""));
}
