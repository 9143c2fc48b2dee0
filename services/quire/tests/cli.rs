//! The operator CLI as an operator types it (issue #21 items 3 and 7), against
//! a real cluster: connection flags before or after the subcommand, lists as
//! tables or `--json`, errors on one line, an empty ledger read like any
//! other, output into a closed pipe.

use std::io::Read;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use quire_pki::{init_dir, IssueOptions, LocalCluster};
use quire_testkit::{bin_path, TestCluster};

/// `quire args...` with RUST_BACKTRACE=1 (errors must stay one line even so)
/// and no QUIRE_* connection variables from the environment.
fn quire(args: &[&str]) -> Output {
    Command::new(bin_path("quire"))
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .env_remove("QUIRE_METADATA")
        .env_remove("QUIRE_CERTS_DIR")
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Succeeded: its stdout.
fn ok(args: &[&str]) -> String {
    let out = quire(args);
    assert!(out.status.success(), "quire {args:?}: {}{}", text(&out.stdout), text(&out.stderr));
    text(&out.stdout)
}

/// Failed with one line on stderr: that line.
fn one_line_error(args: &[&str]) -> String {
    let out = quire(args);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "quire {args:?} fails with exit code 1: {err}");
    assert_eq!(err.lines().count(), 1, "quire {args:?}: one line, no backtrace:\n{err}");
    assert!(err.starts_with("quire: error: "), "{err}");
    err
}

#[test]
fn flags_go_before_or_after_the_subcommand_lists_are_tables_and_errors_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    init_dir(&certs, "test", &LocalCluster { metadata: 3, bookies: 3 }, &IssueOptions::default()).unwrap();
    let cluster = TestCluster::start(dir.path(), &certs, &["r1", "r2", "r3"], &["--lease-ms", "30000"]).unwrap();
    let m = cluster.metadata_flag();
    let c = certs.to_str().unwrap();
    quire_testkit::wait_until(Duration::from_secs(20), "3 bookies registered", || {
        let out = quire(&["bookies", "--json", "--metadata", &m, "--certs-dir", c]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        (v.as_array()?.len() == 3).then_some(())
    })
    .unwrap();

    // README writes `quire bookie $M decommission 3`; both orders parse, for every group.
    for argv in [
        vec!["bookie", "--metadata", &m, "--certs-dir", c, "show", "1"],
        vec!["bookie", "show", "1", "--metadata", &m, "--certs-dir", c],
        vec!["bookie", "--metadata", &m, "show", "--certs-dir", c, "1"],
    ] {
        assert!(ok(&argv).starts_with("bookie      1\n"), "{argv:?}");
    }
    let status = ok(&["metadata", "status", "--json", "--metadata", &m, "--certs-dir", c]);
    let rows: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert_eq!(rows.as_array().map(Vec::len), Some(3), "{rows}");
    assert!(ok(&["metadata", "--metadata", &m, "--certs-dir", c, "status"]).starts_with("REPLICA "));

    // An empty open ledger reads like any other (item 3): LAC -1, no entries.
    let written = ok(&["ledger", "write", "--entries", "0", "--no-close", "--metadata", &m, "--certs-dir", c]);
    let id = serde_json::from_str::<serde_json::Value>(&written).unwrap()["ledger_id"].as_u64().unwrap().to_string();
    let read = quire(&["ledger", "--metadata", &m, "--certs-dir", c, "read", "--ledger", &id]);
    assert!(read.status.success(), "{}", text(&read.stderr));
    assert_eq!(text(&read.stdout), "", "no entries");
    assert!(text(&read.stderr).contains(&format!("ledger {id}: LAC -1")), "{}", text(&read.stderr));

    // `ledger tail` follows a ledger to its close (item 5): three entries,
    // then the recovery's close ends it where the ledger ended.
    let written = ok(&["ledger", "write", "--entries", "3", "--no-close", "--metadata", &m, "--certs-dir", c]);
    let open = serde_json::from_str::<serde_json::Value>(&written).unwrap()["ledger_id"].as_u64().unwrap().to_string();
    let tail = Command::new(bin_path("quire"))
        .args(["ledger", "tail", "--ledger", &open, "--from", "1", "--metadata", &m, "--certs-dir", c])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    ok(&["ledger", "recover", "--ledger", &open, "--metadata", &m, "--certs-dir", c]);
    let out = tail.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "1\tentry-1\n2\tentry-2\n");
    assert!(text(&out.stderr).contains(&format!("ledger {open}: closed at entry 2")), "{}", text(&out.stderr));

    // Lists print a table by default, JSON on request.
    let table = ok(&["ledger", "list", "--metadata", &m, "--certs-dir", c]);
    assert!(table.starts_with("LEDGER "), "{table}");
    let row =
        table.lines().find(|l| l.split_whitespace().next() == Some(id.as_str())).unwrap_or_else(|| panic!("{table}"));
    assert!(row.contains(" open ") && row.contains("3/3/2"), "{row}");
    let json = ok(&["ledger", "--metadata", &m, "--certs-dir", c, "list", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(
        v["ledgers"].as_array().unwrap().iter().any(|l| l.as_u64().map(|n| n.to_string()) == Some(id.clone())),
        "{v}"
    );
    assert!(ok(&["bookies", "--metadata", &m, "--certs-dir", c]).starts_with("ID "));
    assert!(ok(&["under-replicated", "--metadata", &m, "--certs-dir", c]).starts_with("LEDGER "));

    // Errors: one line, what failed and why, whatever RUST_BACKTRACE says.
    let err = one_line_error(&["ledger", "info", "--ledger", "999999", "--metadata", &m, "--certs-dir", c]);
    assert!(err.contains("no such ledger 999999"), "{err}");
    let err = one_line_error(&["ledger", "list", "--certs-dir", c]);
    assert!(err.contains("--metadata is required"), "{err}");
    let err = one_line_error(&["bookie", "show", "1", "--metadata", &m]);
    assert!(err.contains("--certs-dir is required"), "{err}");

    // Output into a pipe whose reader has gone ends the process quietly
    // (it panicked on EPIPE): 5000 pings print far more than a pipe holds.
    let mut child = Command::new(bin_path("quire"))
        .args(["ping", "--addr", &cluster.bookies[0].addr, "--role", "bookie", "--certs-dir", c, "--count", "5000"])
        .env("RUST_BACKTRACE", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    assert!(!stderr.contains("panicked"), "{stderr}");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGPIPE), "ended by SIGPIPE: {status:?} {stderr}");
}
