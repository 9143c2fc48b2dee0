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
//! 3. More records are already queued: take them. Draining what is there costs
//!    its records nothing (they would otherwise wait for the next sync), so no
//!    deadline cuts a batch short while the queue has records. (Cutting it
//!    short is a trap: under load, records that waited past the deadline in
//!    the queue would each be synced alone, and the backlog would never clear.)
//! 4. The queue is empty and `flush_when_queue_empty`: sync now. This is the
//!    classic group commit: under load, records pile up while the previous
//!    sync runs and go out together; when idle, a lone record is synced at
//!    once instead of waiting for company that is not coming. Except when
//!    busy: if the previous batch held at least `busy_batch_records`, records
//!    are arriving steadily, and the batch keeps gathering for up to one
//!    previous sync's duration (never past `max_wait`). Each sync costs CPU
//!    as well as time; on a busy bookie, syncing a handful of records at a
//!    time starves the threads that would bring the rest. At queue depth one
//!    batches hold one record, so the lone-record latency is untouched.
//! 5. The oldest gathered record has waited `max_wait`: sync now.
//! 6. Otherwise wait for more, until the oldest record's deadline.

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
    /// A previous batch at least this large means "busy" (see rule 4); 0 disables.
    pub busy_batch_records: usize,
}

impl Default for GroupCommitPolicy {
    fn default() -> Self {
        GroupCommitPolicy {
            max_wait: Duration::from_millis(2),
            max_batch_bytes: 4 * 1024 * 1024,
            max_batch_records: 16 * 1024,
            flush_when_queue_empty: true,
            busy_batch_records: 4,
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
    /// When the first record of this batch was gathered.
    started: Option<Instant>,
    last_batch_records: usize,
    last_sync: Duration,
}

impl GroupCommit {
    /// An empty batch under `policy`.
    pub fn new(policy: GroupCommitPolicy) -> Self {
        GroupCommit {
            policy,
            bytes: 0,
            records: 0,
            oldest: None,
            started: None,
            last_batch_records: 0,
            last_sync: Duration::ZERO,
        }
    }

    /// A record of `bytes` joined the batch at `now`; it was enqueued at `enqueued_at`.
    pub fn gathered(&mut self, bytes: usize, enqueued_at: Instant, now: Instant) {
        self.bytes += bytes;
        self.records += 1;
        self.oldest = Some(self.oldest.map_or(enqueued_at, |o| o.min(enqueued_at)));
        self.started.get_or_insert(now);
    }

    /// The batch was written and synced, which took `took`.
    pub fn synced(&mut self, took: Duration) {
        self.last_batch_records = self.records;
        self.last_sync = took;
        self.bytes = 0;
        self.records = 0;
        self.oldest = None;
        self.started = None;
    }

    /// Records gathered.
    pub fn records(&self) -> usize {
        self.records
    }

    /// Bytes gathered.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether `records` more records of `bytes` in all, which must share
    /// a batch, would overflow it (then the writer syncs first and starts
    /// the next batch with them).
    pub fn would_overflow(&self, bytes: usize, records: usize) -> bool {
        self.records > 0
            && (self.bytes + bytes > self.policy.max_batch_bytes
                || self.records + records > self.policy.max_batch_records)
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
        if !queue_empty {
            return Decision::Gather { until };
        }
        if now >= until {
            return Decision::Sync;
        }
        if self.policy.flush_when_queue_empty {
            let busy = self.policy.busy_batch_records > 0 && self.last_batch_records >= self.policy.busy_batch_records;
            let started = self.started.unwrap_or(oldest);
            let window_end = (started + self.last_sync).min(until);
            if busy && now < window_end {
                return Decision::Gather { until: window_end };
            }
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
            busy_batch_records: 3,
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
        g.gathered(100, t, t);
        assert_eq!(g.decide(t, true), Decision::Sync);
    }

    #[test]
    fn under_load_records_are_gathered_until_a_bound() {
        let t = Instant::now();
        let mut g = GroupCommit::new(policy());
        for i in 0..4 {
            g.gathered(100, t, t);
            assert_eq!(g.decide(t, false), Decision::Gather { until: t + Duration::from_millis(2) }, "record {i}");
        }
        g.gathered(100, t, t);
        assert_eq!(g.decide(t, false), Decision::Sync, "record bound");
        g.synced(Duration::from_micros(300));
        assert_eq!(g.decide(t, false), Decision::Idle);
        g.gathered(10_000, t, t);
        assert_eq!(g.decide(t, false), Decision::Sync, "byte bound");
    }

    #[test]
    fn the_oldest_records_deadline_forces_a_sync() {
        let t = Instant::now();
        let mut g = GroupCommit::new(GroupCommitPolicy { flush_when_queue_empty: false, ..policy() });
        g.gathered(1, t, t);
        g.gathered(1, t + Duration::from_millis(1), t + Duration::from_millis(1));
        assert_eq!(
            g.decide(t + Duration::from_millis(1), true),
            Decision::Gather { until: t + Duration::from_millis(2) }
        );
        assert_eq!(g.decide(t + Duration::from_millis(2), true), Decision::Sync);
    }

    #[test]
    fn queued_records_are_drained_even_past_the_deadline() {
        let t = Instant::now();
        let mut g = GroupCommit::new(policy());
        g.gathered(1, t, t);
        let late = t + Duration::from_millis(50);
        assert!(matches!(g.decide(late, false), Decision::Gather { .. }), "more are queued: take them");
        assert_eq!(g.decide(late, true), Decision::Sync);
    }

    #[test]
    fn a_busy_journal_gathers_for_about_one_sync_before_syncing() {
        let t = Instant::now();
        let mut g = GroupCommit::new(policy());
        // The previous batch was big: busy.
        for _ in 0..3 {
            g.gathered(10, t, t);
        }
        g.synced(Duration::from_micros(300));
        let t1 = t + Duration::from_millis(1);
        g.gathered(10, t1, t1);
        assert_eq!(g.decide(t1, true), Decision::Gather { until: t1 + Duration::from_micros(300) });
        assert_eq!(g.decide(t1 + Duration::from_micros(300), true), Decision::Sync);
        // Quiet again: the next lone record goes at once.
        g.synced(Duration::from_micros(300));
        let t2 = t1 + Duration::from_millis(5);
        g.gathered(10, t2, t2);
        assert_eq!(g.decide(t2, true), Decision::Sync);
    }

    #[test]
    fn overflow_is_predicted_before_taking_a_record() {
        let t = Instant::now();
        let mut g = GroupCommit::new(policy());
        assert!(!g.would_overflow(1_000_000, 1), "an empty batch takes any record");
        g.gathered(9_000, t, t);
        assert!(g.would_overflow(1_001, 1));
        assert!(!g.would_overflow(1_000, 1));
        // Records that must share a batch count together (at most 5 here).
        assert!(!g.would_overflow(100, 4));
        assert!(g.would_overflow(100, 5));
    }
}
