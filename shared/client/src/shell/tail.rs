//! Following a ledger: its entries from some id on, as the LAC passes them,
//! until the ledger is closed (the gateway's `follow=true` stream and
//! `quire ledger tail`). Each step waits at most a given time on the LAC
//! (a long poll on the bookies, the reader's `wait_lac`) and reads at most a
//! page: a follower reads ahead of its consumer by one page, never more.
//! A close is seen when a wait ends without new entries (the reader then
//! re-reads the metadata), so within one wait.

use std::time::Duration;

use quire_proto::v1::Entry;

use crate::meta::LedgerState;
use crate::shell::error::ClientError;
use crate::shell::reader::LedgerReader;

/// What one step of a [`Tail`] found.
#[derive(Debug, Clone, PartialEq)]
pub enum TailEvent {
    /// The next entries, in order (at most a page).
    Entries(Vec<Entry>),
    /// Nothing new within the wait; the LAC now.
    Idle {
        /// The reader's LAC.
        lac: i64,
    },
    /// Nothing more will come: the ledger is closed and every entry up to
    /// `last_entry_id` was handed out, or the requested end was reached.
    End {
        /// The last entry of the ledger (or of the requested range).
        last_entry_id: i64,
        /// Whether the ledger is closed (else the requested end was reached).
        closed: bool,
    },
}

/// A follower of one ledger from `next` on.
pub struct Tail {
    reader: LedgerReader,
    next: u64,
    /// The last entry wanted, if not the ledger's end.
    to: Option<u64>,
    page_entries: usize,
}

impl Tail {
    /// Follows `reader`'s ledger from entry `from`, up to `to` if given,
    /// `page_entries` (at least 1) at a time.
    pub fn new(reader: LedgerReader, from: u64, to: Option<u64>, page_entries: usize) -> Tail {
        Tail { reader, next: from, to, page_entries: page_entries.max(1) }
    }

    /// The next entry id it will hand out.
    pub fn next_entry_id(&self) -> u64 {
        self.next
    }

    /// The reader it follows with.
    pub fn reader(&self) -> &LedgerReader {
        &self.reader
    }

    fn ended(&self) -> Option<TailEvent> {
        let m = self.reader.metadata();
        if m.state == LedgerState::Closed && self.next as i64 > m.last_entry_id {
            return Some(TailEvent::End { last_entry_id: m.last_entry_id, closed: true });
        }
        match self.to {
            Some(to) if self.next > to => Some(TailEvent::End { last_entry_id: to as i64, closed: false }),
            _ => None,
        }
    }

    /// One step: the next page once the LAC passes it, or `Idle` after
    /// `wait` without, or `End`.
    pub async fn step(&mut self, wait: Duration) -> Result<TailEvent, ClientError> {
        if let Some(end) = self.ended() {
            return Ok(end);
        }
        let Ok(want) = i64::try_from(self.next) else {
            return Err(ClientError::BadRequest(format!("entry {} is past any ledger's end", self.next)));
        };
        let mut lac = self.reader.known_lac();
        if lac < want {
            let deadline = tokio::time::Instant::now() + wait;
            lac = self.reader.wait_lac(want - 1, wait).await?;
            if lac < want {
                if let Some(end) = self.ended() {
                    return Ok(end);
                }
                // Bookies that refuse at once (overloaded, in limbo, gone)
                // end a wait early: the rest of it is waited out here, so a
                // follower asks once a wait, never in a tight loop.
                tokio::time::sleep_until(deadline).await;
                return Ok(TailEvent::Idle { lac });
            }
        }
        let mut last = (lac as u64).min(self.next.saturating_add(self.page_entries as u64 - 1));
        if let Some(to) = self.to {
            last = last.min(to);
        }
        let entries = match self.reader.read_range(self.next, last, self.page_entries).await {
            Ok(e) => e,
            // The entries may have moved by ensemble change or
            // re-replication since this reader last read the metadata
            // (a busy ledger's follower never waits long enough to): once
            // more with the metadata as it is now.
            Err(_) => {
                self.reader.refresh().await?;
                self.reader.read_range(self.next, last, self.page_entries).await?
            }
        };
        // read_range reads what it was asked for, in order, up to the LAC
        // it was just shown: anything else would hand out a gap.
        assert!(
            entries.first().is_some_and(|e| e.entry_id == self.next),
            "a read of {}..={last} below the LAC {lac} answered {:?}",
            self.next,
            entries.first().map(|e| e.entry_id)
        );
        self.next += entries.len() as u64;
        Ok(TailEvent::Entries(entries))
    }
}
