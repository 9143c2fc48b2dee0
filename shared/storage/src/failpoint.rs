//! Crash points for tests: a process started with `QUIRE_FAILPOINTS` naming
//! a point (comma-separated) kills itself with SIGKILL when it gets there, so
//! a test can stop a bookie at an exact step of a multi-step change (the
//! compactor's copy, index switch and unlink) and check what a restart finds.
//!
//! Only used on paths that are not per-entry hot paths; the variable is read
//! once.

use std::sync::OnceLock;

/// The environment variable naming the armed points.
pub const ENV: &str = "QUIRE_FAILPOINTS";

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
