//! The fault suite's slow disk: the delay file is read at every sync, so a
//! running bookie's disk is slowed and restored from outside. One test per
//! binary: the variable is read once per process.

use std::time::Duration;

use quire_storage::failpoint::{disk_delay, DISK_DELAY_ENV};

#[test]
fn the_delay_follows_the_file_while_the_process_runs() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("delay");
    std::env::set_var(DISK_DELAY_ENV, &file);
    // No file yet: no delay.
    assert_eq!(disk_delay(), Duration::ZERO);
    std::fs::write(&file, "150\n").unwrap();
    assert_eq!(disk_delay(), Duration::from_millis(150));
    std::fs::write(&file, "0").unwrap();
    assert_eq!(disk_delay(), Duration::ZERO);
    // Unreadable content is no delay, not an error on the write path.
    std::fs::write(&file, "slow").unwrap();
    assert_eq!(disk_delay(), Duration::ZERO);
    std::fs::write(&file, "7").unwrap();
    assert_eq!(disk_delay(), Duration::from_millis(7));
    std::fs::remove_file(&file).unwrap();
    assert_eq!(disk_delay(), Duration::ZERO);
}
