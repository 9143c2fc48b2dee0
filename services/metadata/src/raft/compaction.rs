//! When a replica takes a snapshot (and openraft then purges the log
//! behind it).
//!
//! A snapshot writes the whole state: about 180 bytes a ledger, 183 MB at a
//! million. Taken every fixed number of entries (openraft's
//! `LogsSinceLast`, 5 000 here before issue #46), a replica of a million
//! ledgers under 1 000 creates + closes a second encoded and wrote 183 MB
//! every 2.5 s: three replicas on one machine spent most of two cores on
//! it, and create + close p99 was 0.6 s. So the interval grows with the
//! state: at least `every` entries, and at least one entry for every
//! [`LEDGERS_PER_ENTRY`] ledgers held, which keeps the bytes snapshots
//! write per entry applied bounded (about 1.8 KB) whatever the cluster's
//! size. ZooKeeper's default is one snapshot per 100 000 transactions; this
//! is that at a million ledgers.

use std::sync::Arc;

use super::state_machine::Shared;
use super::MetaRaft;

/// Ledgers held per entry of the interval between snapshots.
pub const LEDGERS_PER_ENTRY: u64 = 10;

/// Entries applied between two snapshots of a state holding `ledgers`.
pub fn entries_between(every: u64, ledgers: u64) -> u64 {
    every.max(ledgers / LEDGERS_PER_ENTRY).max(1)
}

/// Whether a snapshot is due: `applied` is the last applied index,
/// `snapshot` the index the last snapshot covers, `asked_at` the applied
/// index at which one was last asked for (not yet built while `snapshot`
/// is below it; asked again if it is overdue by a whole interval, as after
/// a build that failed).
pub fn due(applied: u64, snapshot: u64, asked_at: Option<u64>, between: u64) -> bool {
    if applied.saturating_sub(snapshot) < between {
        return false;
    }
    match asked_at {
        Some(a) if snapshot < a => applied >= a + between,
        _ => true,
    }
}

/// Asks openraft for a snapshot whenever one is due; ends when Raft stops.
pub async fn drive(raft: MetaRaft, shared: Arc<Shared>, every: u64) {
    let mut applied = shared.applied.subscribe();
    let metrics = raft.metrics();
    let mut asked_at = None;
    loop {
        let index = *applied.borrow_and_update();
        let snapshot = metrics.borrow().snapshot.map_or(0, |l| l.index);
        // The state's size (its read lock) only once the floor is passed:
        // not on every applied batch.
        let over_floor = index.saturating_sub(snapshot) >= every;
        let between = || entries_between(every, shared.state.read().expect("state lock").ledgers.len() as u64);
        if over_floor && due(index, snapshot, asked_at, between()) {
            if raft.trigger().snapshot().await.is_err() {
                return; // Raft stopped.
            }
            asked_at = Some(index);
        }
        if applied.changed().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interval_grows_with_the_state_and_is_never_below_the_floor() {
        assert_eq!(entries_between(5000, 0), 5000);
        assert_eq!(entries_between(5000, 30_000), 5000);
        assert_eq!(entries_between(5000, 1_000_000), 100_000);
        assert_eq!(entries_between(0, 0), 1);
    }

    #[test]
    fn a_snapshot_is_asked_for_once_per_interval_and_again_only_if_overdue() {
        assert!(!due(99, 0, None, 100));
        assert!(due(100, 0, None, 100));
        // Asked at 100, not built yet: not again until a whole interval later.
        assert!(!due(150, 0, Some(100), 100));
        assert!(due(200, 0, Some(100), 100));
        // Built at 100: the next at 200.
        assert!(!due(199, 100, Some(100), 100));
        assert!(due(200, 100, Some(100), 100));
    }
}
