//! The quire-crashfs binary: a mount in a process of its own, cut over its
//! control socket, as the fault suite drives it. Needs /dev/fuse and root.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_quire-crashfs");

struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn mount(state: &Path, mnt: &Path, control: &Path) -> Daemon {
    let mut child = Command::new(BIN)
        .args(["mount", "--state"])
        .arg(state)
        .arg("--mount")
        .arg(mnt)
        .arg("--control")
        .arg(control)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // It says "ready" once mounted and listening (a read that waits for it).
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert!(line.starts_with("ready"), "quire-crashfs did not start serving: {line:?}");
    Daemon(child)
}

fn ctl(control: &Path, words: &[&str]) -> (bool, String) {
    let out = Command::new(BIN).arg("ctl").arg("--control").arg(control).args(words).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn a_mount_process_is_cut_over_its_socket_and_mounted_again() {
    let t = tempfile::tempdir().unwrap();
    let (state, mnt, control) = (t.path().join("state"), t.path().join("mnt"), t.path().join("ctl.sock"));
    let mut d = mount(&state, &mnt, &control);
    std::fs::write(mnt.join("synced"), b"kept").unwrap();
    std::fs::File::open(mnt.join("synced")).unwrap().sync_all().unwrap();
    std::fs::File::open(&mnt).unwrap().sync_all().unwrap();
    std::fs::write(mnt.join("unsynced"), b"gone").unwrap();
    let (ok, stats) = ctl(&control, &["stats"]);
    assert!(ok && stats.contains("syncs=1") && stats.contains("pending_names=1"), "{stats}");
    let (ok, err) = ctl(&control, &["crash", "1", "sideways", "all"]);
    assert!(!ok && err.starts_with("error"), "a bad command is refused: {err}");
    assert!(ctl(&control, &["freeze"]).0);
    assert!(std::fs::read(mnt.join("synced")).is_err(), "a frozen mount answers nothing");
    let (ok, report) = ctl(&control, &["crash", "1", "drop", "all"]);
    assert!(ok && report.contains("names_undone=1"), "{report}");
    assert!(d.0.wait().unwrap().success(), "the mount process ends after a crash");
    let _d = mount(&state, &mnt, &control);
    assert_eq!(std::fs::read(mnt.join("synced")).unwrap(), b"kept");
    assert!(!mnt.join("unsynced").exists(), "an unsynced file survived the cut");
    assert!(ctl(&control, &["unmount"]).0);
}
