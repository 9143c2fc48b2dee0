//! The group-commit policy: when the journal writer stops gathering records
//! and pays for an fdatasync.
//!
//! A plain type fed with what happened and the time; it does no I/O and reads
//! no clock, so every rule is a unit test. The writer thread asks it after
//! each record it takes off the queue.
//!
//! The rules, in order:
//! 1. Nothing gathered: nothing to do.
//! 2. The batch holds `max_batch_bytes` or `max_batch_records`: sync now. This
//!    bounds the latency one sync adds and the memory of a batch.
//! 3. The oldest gathered record has waited `max_wait`: sync now.
//! 4. The queue is empty and `flush_when_queue_empty`: sync now. This is the
//!    classic group commit: under load, records pile up while the previous
//!    sync runs and go out together; when idle, a lone record is synced at
//!    once instead of waiting for company that is not coming.
//! 5. Otherwise keep gathering, until the oldest record's deadline.

use std::time::{Duration, Instant};

/// Tunables of the group commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupCommitPolicy {
    /// Longest a record waits for company before it is synced.
    pub max_wait: Duration,
    /// Bytes in one batch, at most (a single larger record is its own batch).
    pub max_batch_bytes: usize,
    /// Records in one batch, at most.
    pub max_batch_records: usize,
    /// Sync as soon as the queue is empty rather than waiting out `max_wait`.
    pub flush_when_queue_empty: bool,
}

impl Default for GroupCommitPolicy {
    fn default() -> Self {
        GroupCommitPolicy {
            max_wait: Duration::from_millis(2),
            max_batch_bytes: 4 * 1024 * 1024,
            max_batch_records: 16 * 1024,
            flush_when_queue_empty: true,
        }
    }
}

/// What the writer should do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Nothing gathered: block until a record arrives.
    Idle,
    /// Write and sync the gathered batch now.
    Sync,
    /// Take more records from the queue, waiting for one at most until this instant.
    Gather {
        /// When the oldest gathered record's wait runs out.
        until: Instant,
    },
}

/// The state of the batch being gathered.
#[derive(Debug)]
pub struct GroupCommit {
    policy: GroupCommitPolicy,
    bytes: usize,
    records: usize,
    oldest: Option<Instant>,
}

impl GroupCommit {
    /// An empty batch under `policy`.
    pub fn new(policy: GroupCommitPolicy) -> Self {
        GroupCommit { policy, bytes: 0, records: 0, oldest: None }
    }

    /// A record of `bytes` joined the batch; it was enqueued at `enqueued_at`.
    pub fn gathered(&mut self, bytes: usize, enqueued_at: Instant) {
        self.bytes += bytes;
        self.records += 1;
        self.oldest = Some(self.oldest.map_or(enqueued_at, |o| o.min(enqueued_at)));
    }

    /// The batch was written and synced.
    pub fn synced(&mut self) {
        self.bytes = 0;
        self.records = 0;
        self.oldest = None;
    }

    /// Records gathered.
    pub fn records(&self) -> usize {
        self.records
    }

    /// Bytes gathered.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether one more record of `bytes` would overflow the batch (then the
    /// writer syncs first and starts the next batch with it).
    pub fn would_overflow(&self, bytes: usize) -> bool {
        self.records > 0
            && (self.bytes + bytes > self.policy.max_batch_bytes || self.records + 1 > self.policy.max_batch_records)
    }

    /// What to do, given whether the queue has more records right now.
    pub fn decide(&self, now: Instant, queue_empty: bool) -> Decision {
        let Some(oldest) = self.oldest else {
            return Decision::Idle;
        };
        if self.bytes >= self.policy.max_batch_bytes || self.records >= self.policy.max_batch_records {
            return Decision::Sync;
        }
        let until = oldest + self.policy.max_wait;
        if now >= until {
            return Decision::Sync;
        }
        if queue_empty && self.policy.flush_when_queue_empty {
            return Decision::Sync;
        }
        Decision::Gather { until }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> GroupCommitPolicy {
        GroupCommitPolicy {
            max_wait: Duration::from_millis(2),
            max_batch_bytes: 10_000,
            max_batch_records: 5,
            flush_when_queue_empty: true,
        }
    }

    #[test]
    fn nothing_gathered_is_idle() {
        let g = GroupCommit::new(policy());
        assert_eq!(g.decide(Instant::now(), true), Decision::Idle);
    }

    #[test]
    fn a_lone_record_is_synced_at_once_when_the_queue_is_empty() {
        let t = Instant::now();
        let mut g = GroupCommit::new(policy());
        g.gathered(100, t);
        assert_eq!(g.decide(t, true), Decision::Sync);
    }

    #[test]
    fn under_load_records_are_gathered_until_a_bound() {
        let t = Instant::now();
        let mut g = GroupCommit::new(policy());
        for i in 0..4 {
            g.gathered(100, t);
            assert_eq!(g.decide(t, false), Decision::Gather { until: t + Duration::from_millis(2) }, "record {i}");
        }
        g.gathered(100, t);
        assert_eq!(g.decide(t, false), Decision::Sync, "record bound");
        g.synced();
        assert_eq!(g.decide(t, false), Decision::Idle);
        g.gathered(10_000, t);
        assert_eq!(g.decide(t, false), Decision::Sync, "byte bound");
    }

    #[test]
    fn the_oldest_records_deadline_forces_a_sync() {
        let t = Instant::now();
        let mut g = GroupCommit::new(GroupCommitPolicy { flush_when_queue_empty: false, ..policy() });
        g.gathered(1, t);
        g.gathered(1, t + Duration::from_millis(1));
        assert_eq!(
            g.decide(t + Duration::from_millis(1), true),
            Decision::Gather { until: t + Duration::from_millis(2) }
        );
        assert_eq!(g.decide(t + Duration::from_millis(2), true), Decision::Sync);
    }

    #[test]
    fn overflow_is_predicted_before_taking_a_record() {
        let t = Instant::now();
        let mut g = GroupCommit::new(policy());
        assert!(!g.would_overflow(1_000_000), "an empty batch takes any record");
        g.gathered(9_000, t);
        assert!(g.would_overflow(1_001));
        assert!(!g.would_overflow(1_000));
    }
}
