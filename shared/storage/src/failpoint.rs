//! Crash points for tests: a process started with `QUIRE_FAILPOINTS` naming
//! a point (comma-separated) kills itself with SIGKILL when it gets there, so
//! a test can stop a bookie at an exact step of a multi-step change (the
//! compactor's copy, index switch and unlink) and check what a restart finds.
//!
//! Only used on paths that are not per-entry hot paths (the journal's is
//! once per group-commit batch); the variable is read once.
//!
//! A slow disk for the fault suite: a process started with
//! `QUIRE_DISK_DELAY_FILE` naming a file waits, before each journal and
//! entry-log sync, the number of milliseconds that file holds (absent,
//! empty or 0: no wait). The file is read at every sync, so the delay is
//! switched on and off while the bookie runs; without the variable a sync
//! pays one initialised `OnceLock` read.

use std::sync::OnceLock;

/// The environment variable naming the armed points.
pub const ENV: &str = "QUIRE_FAILPOINTS";

/// The environment variable naming the disk-delay file.
pub const DISK_DELAY_ENV: &str = "QUIRE_DISK_DELAY_FILE";

fn disk_delay_file() -> Option<&'static std::path::Path> {
    static FILE: OnceLock<Option<std::path::PathBuf>> = OnceLock::new();
    FILE.get_or_init(|| std::env::var_os(DISK_DELAY_ENV).map(std::path::PathBuf::from)).as_deref()
}

/// The injected delay before a sync: the disk-delay file's milliseconds, or
/// zero (no file configured, unreadable or unparsable: a delay that cannot
/// be read is no delay, never an error on the write path).
pub fn disk_delay() -> std::time::Duration {
    let Some(path) = disk_delay_file() else {
        return std::time::Duration::ZERO;
    };
    let ms = std::fs::read_to_string(path).ok().and_then(|s| s.trim().parse::<u64>().ok()).unwrap_or(0);
    std::time::Duration::from_millis(ms)
}

/// Blocks the calling (sync) thread for [`disk_delay`], if any.
pub fn slow_disk() {
    let d = disk_delay();
    if !d.is_zero() {
        std::thread::sleep(d);
    }
}

fn armed() -> &'static [String] {
    static ARMED: OnceLock<Vec<String>> = OnceLock::new();
    ARMED.get_or_init(|| {
        std::env::var(ENV)
            .map(|v| v.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect())
            .unwrap_or_default()
    })
}

/// Whether `name` is armed in this process.
pub fn is_armed(name: &str) -> bool {
    armed().iter().any(|a| a == name)
}

/// Dies at once (SIGKILL: no destructors, no flush, no graceful anything)
/// when `name` is armed.
pub fn hit(name: &str) {
    if is_armed(name) {
        tracing::error!(failpoint = name, "failpoint armed: killing this process");
        let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
        // kill(2) on oneself delivers before it returns; abort if it did not.
        std::process::abort();
    }
}
