//! `quire standalone` supervises its services: a SIGTERM that comes while
//! they are still starting must stop every one of them, not end the
//! supervisor alone and leave them running (what a script that kills a
//! cluster it has just seen come up would otherwise do).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use quire_testkit::{bin_path, wait_until};

/// Processes whose command line names `dir` (the cluster's data directory).
fn processes_under(dir: &Path) -> Vec<u32> {
    let needle = dir.to_string_lossy().into_owned();
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            if String::from_utf8_lossy(&cmd).contains(&needle) {
                found.push(pid);
            }
        }
    }
    found
}

/// Kills whatever still runs under the directory when the test ends,
/// passed or failed, so that a failure leaves no cluster behind.
struct Reaper(std::path::PathBuf);

impl Drop for Reaper {
    fn drop(&mut self) {
        for p in processes_under(&self.0) {
            let _ = Command::new("kill").args(["-KILL", &p.to_string()]).status();
        }
    }
}

#[test]
fn a_sigterm_during_start_up_stops_every_service() {
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().join("cluster");
    let _reaper = Reaper(dir.clone());
    // Ports of their own (standalone's bases plus 700), apart from the
    // other standalone users of the suite (0 and 300).
    let mut sup = Command::new(bin_path("quire"))
        .args(["standalone", "--data-dir"])
        .arg(&dir)
        .args(["--http", &quire_testkit::free_tcp_addr(), "--port-offset", "700"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The first metadata replica is up, the rest of the cluster is not yet.
    let first = dir.join("run/metadata-1.ready");
    wait_until(Duration::from_secs(30), "the first service ready", || {
        std::fs::read_to_string(&first).ok().filter(|s| !s.is_empty())
    })
    .unwrap();
    assert!(!processes_under(&dir).is_empty(), "the services run under {}", dir.display());
    let killed = Command::new("kill").args(["-TERM", &sup.id().to_string()]).status().unwrap();
    assert!(killed.success());
    let status = wait_until(Duration::from_secs(30), "the supervisor to exit", || sup.try_wait().unwrap()).unwrap();
    // Stopped on purpose (an error exit naming the signal), not by the
    // signal's default action.
    assert!(status.code().is_some(), "the supervisor died of the signal: {status:?}");
    let stopped =
        wait_until(Duration::from_secs(15), "every service to stop", || processes_under(&dir).is_empty().then_some(()));
    assert!(stopped.is_ok(), "services left running after the supervisor stopped: {:?}", processes_under(&dir));
}
