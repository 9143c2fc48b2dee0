//! Idempotent appends (issue #23 item 7): what each producer last appended,
//! so that a retry of an append that was in fact written (after a timeout,
//! a gateway restart or a takeover) is answered with its original offset.
//!
//! The table is rebuilt, never trusted from memory alone: the log's record
//! in the metadata service carries a copy of it as of an offset
//! (`covers_before`, written at every rollover and takeover), and whoever
//! takes the log over reads the records from there to the recovered end and
//! observes each producer's header ([`crate::envelope`]). Observing is
//! idempotent, so a copy that covers more than it says does no harm.
//!
//! Bounded: [`WINDOW`] recent sequence numbers per producer (an append
//! retried further back than that gets [`Seen::TooOld`], not a second
//! copy), and [`PRODUCERS_MAX`] producers (the one that appended least
//! recently is forgotten first; a forgotten producer's retry would be
//! written again, which is why the bound is large against the number of
//! producers a log has).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Recent appends remembered per producer.
pub const WINDOW: usize = 16;
/// Producers remembered per log.
pub const PRODUCERS_MAX: usize = 1024;

/// One producer's recent appends.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerState {
    /// The highest sequence number appended.
    pub last_sequence: u64,
    /// (sequence, offset) of the most recent appends, sequence ascending,
    /// at most [`WINDOW`].
    pub recent: Vec<(u64, u64)>,
}

/// The de-duplication table of a log.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Producers {
    /// Every record below this offset has been observed.
    pub covers_before: u64,
    /// By producer id.
    pub by_id: BTreeMap<String, ProducerState>,
}

/// What an append with a producer id and sequence number is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// Not appended before: write it.
    New,
    /// Appended before at this offset: answer it, write nothing.
    Duplicate {
        /// The original offset.
        offset: u64,
    },
    /// At or below the producer's last sequence, older than the window:
    /// whether it was written is not known here, so it is refused.
    TooOld {
        /// The producer's highest sequence.
        last_sequence: u64,
    },
}

impl Producers {
    /// What an append of `sequence` by `producer_id` would be.
    pub fn judge(&self, producer_id: &str, sequence: u64) -> Seen {
        let Some(p) = self.by_id.get(producer_id) else { return Seen::New };
        if sequence > p.last_sequence {
            return Seen::New;
        }
        match p.recent.binary_search_by_key(&sequence, |(s, _)| *s) {
            Ok(i) => Seen::Duplicate { offset: p.recent[i].1 },
            // Inside the window but never appended (the producer skipped
            // it): as unknown as one older than the window.
            Err(_) => Seen::TooOld { last_sequence: p.last_sequence },
        }
    }

    /// Records that `producer_id` appended `sequence` at `offset`.
    /// Idempotent: observing the same record again changes nothing.
    pub fn observe(&mut self, producer_id: &str, sequence: u64, offset: u64) {
        let p = self.by_id.entry(producer_id.to_string()).or_default();
        match p.recent.binary_search_by_key(&sequence, |(s, _)| *s) {
            Ok(_) => {}
            Err(i) => {
                p.recent.insert(i, (sequence, offset));
                if p.recent.len() > WINDOW {
                    p.recent.remove(0);
                }
            }
        }
        p.last_sequence = p.last_sequence.max(sequence);
        if self.by_id.len() > PRODUCERS_MAX {
            self.forget_least_recent();
        }
    }

    /// Forgets what was observed at or past `offset`: appends given to a
    /// ledger that did not take them (its seal came before them). A
    /// producer's sequences rise with its offsets, so what is left of its
    /// window is its appends below `offset`; one with none left there keeps
    /// a last sequence just below what was forgotten (older retries are
    /// TooOld, as they were), and one never seen below is forgotten whole.
    pub fn forget_from(&mut self, offset: u64) {
        self.by_id.retain(|_, p| {
            let Some(cut) = p.recent.iter().position(|(_, o)| *o >= offset) else { return true };
            let first_forgotten = p.recent[cut].0;
            p.recent.truncate(cut);
            p.last_sequence = match p.recent.last() {
                Some((s, _)) => *s,
                None if cut == 0 && first_forgotten == p.last_sequence && p.recent.is_empty() => {
                    return false;
                }
                None => first_forgotten.saturating_sub(1),
            };
            true
        });
        self.covers_before = self.covers_before.min(offset);
    }

    /// Moves the covered point (records below `offset` all observed).
    pub fn cover(&mut self, offset: u64) {
        self.covers_before = self.covers_before.max(offset);
    }

    fn forget_least_recent(&mut self) {
        let oldest =
            self.by_id.iter().min_by_key(|(_, p)| p.recent.last().map_or(0, |(_, o)| *o)).map(|(id, _)| id.clone());
        if let Some(id) = oldest {
            self.by_id.remove(&id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_retry_gets_its_first_offset() {
        let mut t = Producers::default();
        assert_eq!(t.judge("p", 0), Seen::New);
        t.observe("p", 0, 10);
        t.observe("p", 1, 12);
        assert_eq!(t.judge("p", 1), Seen::Duplicate { offset: 12 });
        assert_eq!(t.judge("p", 0), Seen::Duplicate { offset: 10 });
        assert_eq!(t.judge("p", 2), Seen::New);
        assert_eq!(t.judge("q", 0), Seen::New, "producers are apart");
        t.observe("p", 1, 12);
        assert_eq!(t.by_id["p"].recent.len(), 2, "observing twice changes nothing");
    }

    #[test]
    fn the_window_and_the_producer_bound_hold() {
        let mut t = Producers::default();
        for s in 0..(WINDOW as u64 + 5) {
            t.observe("p", s, 100 + s);
        }
        assert_eq!(t.by_id["p"].recent.len(), WINDOW);
        assert_eq!(t.judge("p", 0), Seen::TooOld { last_sequence: WINDOW as u64 + 4 });
        assert_eq!(t.judge("p", 5), Seen::Duplicate { offset: 105 });
        for i in 0..PRODUCERS_MAX as u64 {
            t.observe(&format!("q{i}"), 0, 1000 + i);
        }
        assert_eq!(t.by_id.len(), PRODUCERS_MAX);
        assert!(!t.by_id.contains_key("p"), "the least recent producer is forgotten first");
    }

    #[test]
    fn appends_past_a_seal_are_forgotten() {
        let mut t = Producers::default();
        t.observe("p", 0, 10);
        t.observe("p", 1, 11);
        t.observe("q", 5, 12);
        t.cover(13);
        t.forget_from(11);
        assert_eq!(t.judge("p", 0), Seen::Duplicate { offset: 10 });
        assert_eq!(t.judge("p", 1), Seen::New, "its append was not taken");
        assert!(!t.by_id.contains_key("q"), "never seen below the seal");
        assert_eq!(t.covers_before, 11);
    }

    proptest! {
        /// Replaying any prefix of the records again (a takeover rebuilding
        /// from a copy that covers part of what it reads) gives the table
        /// that reading them once gives.
        #[test]
        fn rebuilding_is_idempotent(
            seqs in proptest::collection::vec((0u8..3, 0u64..40), 1..80),
            replay in 0usize..80,
        ) {
            let records: Vec<(String, u64, u64)> =
                seqs.iter().enumerate().map(|(o, (p, s))| (format!("p{p}"), *s, o as u64)).collect();
            let mut once = Producers::default();
            for (p, s, o) in &records {
                once.observe(p, *s, *o);
            }
            let mut twice = Producers::default();
            for (p, s, o) in &records[..replay.min(records.len())] {
                twice.observe(p, *s, *o);
            }
            for (p, s, o) in &records {
                twice.observe(p, *s, *o);
            }
            prop_assert_eq!(once, twice);
        }
    }
}
