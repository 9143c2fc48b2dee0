//! Readers: entries up to the LAC, the LAC itself, and tailing by long poll.
//!
//! A read goes to one replica of the entry's write set (the sticky one when
//! it is in the set); after `speculative_read_after` without an answer the
//! next replica is asked too, and the first intact copy wins. An error moves
//! on at once (a replica whose connection was lost has been asked once more
//! on a new one by the bookie directory: a connection to a process that has
//! since restarted fails at its first use, its reset). Every copy's CRC32C and identity are checked
//! here: a damaged copy is skipped like a missing one. A read that no
//! replica could answer fails with an error the caller can act on
//! ([`unanswered`]): NotEnoughBookies, or Timeout, never a bare RPC error.

use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use quire_proto::v1::{Entry, ErrorCode};
use quire_rpc::RpcError;
use tokio::time::Instant;

use crate::meta::{LedgerMeta, LedgerState};
use crate::shell::client::Client;
use crate::shell::error::ClientError;
use crate::shell::scan::Scan;

/// Replicas to try for an entry, in order: its write set, starting at the
/// sticky position when that is in the set.
pub fn read_order(write_set: &[usize], sticky: Option<usize>) -> Vec<usize> {
    let start = sticky.and_then(|s| write_set.iter().position(|p| *p == s)).unwrap_or(0);
    (0..write_set.len()).map(|i| write_set[(start + i) % write_set.len()]).collect()
}

/// What a read fails with when no replica answered it (`last`: the last
/// replica's failure): a timeout is a timeout, a refusal of the caller's
/// rights is that, and anything else (connections refused or lost, a bookie
/// in limbo, shutting down, overloaded) means too few bookies could serve it
/// now: NotEnoughBookies, which the caller may retry. Before, the bare RPC
/// error reached HTTP callers as 502 Internal after every bookie restarted.
pub fn unanswered(what: &str, last: Option<RpcError>) -> ClientError {
    match last {
        None => ClientError::Timeout(format!("{what}: no replica answered in time")),
        Some(e @ RpcError::Timeout { .. }) => ClientError::Timeout(format!("{what}: {e}")),
        Some(e) if e.code() == Some(ErrorCode::PermissionDenied) => ClientError::PermissionDenied(e.to_string()),
        Some(e) => ClientError::NotEnoughBookies(format!("{what}: no replica could serve it: {e}")),
    }
}

/// Whether entry `id` is past `lac` (-1: no entry is acknowledged). Compared
/// as unsigned: an id past i64::MAX is past any LAC (as an i64 it wrapped
/// negative, below every LAC: `to=` defaulting to u64::MAX did).
pub fn past_lac(id: u64, lac: i64) -> bool {
    lac < 0 || id > lac as u64
}

/// A reader of one ledger.
pub struct LedgerReader {
    pub(super) client: Client,
    ledger_id: u64,
    meta: Mutex<LedgerMeta>,
    lac: AtomicI64,
    /// The bookie that answered last: reads stick to it while it can serve them.
    sticky: Mutex<Option<String>>,
    /// Which part of the next chunk a scan reads goes to which position
    /// ([`LedgerReader::next_rotation`]): a turn per chunk, over every scan
    /// of this reader.
    rotation: AtomicUsize,
    /// Payload bytes per entry as last learned by a scan, plus one (zero:
    /// not yet): a scan of an open ledger starts from it rather than from
    /// small chunks in E parts, which a reader polling pages paid on every
    /// page.
    entry_bytes_plus_one: AtomicU64,
}

enum Outcome {
    Entry(Entry),
    Missing,
    Corrupt,
    Failed(RpcError),
}

impl LedgerReader {
    pub(crate) fn new(client: Client, meta: LedgerMeta) -> LedgerReader {
        let lac = meta.closed_lac().unwrap_or(-1);
        LedgerReader {
            client,
            ledger_id: meta.ledger_id,
            meta: Mutex::new(meta),
            lac: AtomicI64::new(lac),
            sticky: Mutex::new(None),
            rotation: AtomicUsize::new(0),
            entry_bytes_plus_one: AtomicU64::new(0),
        }
    }

    /// The ledger id.
    pub fn ledger_id(&self) -> u64 {
        self.ledger_id
    }

    /// The metadata this reader holds.
    pub fn metadata(&self) -> LedgerMeta {
        self.meta.lock().expect("meta lock").clone()
    }

    /// The highest LAC this reader has learned (it only grows).
    pub fn known_lac(&self) -> i64 {
        self.lac.load(Ordering::Acquire)
    }

    pub(super) fn learn(&self, lac: i64) -> i64 {
        self.lac.fetch_max(lac, Ordering::AcqRel).max(lac)
    }

    /// Tells the reader that every entry up to `lac` is acknowledged: the
    /// caller holds the ledger's writer (whose LAC the bookies learn only
    /// with its next entry, or when it idles). Returns the reader's LAC.
    pub fn observe_lac(&self, lac: i64) -> i64 {
        self.learn(lac)
    }

    /// Re-reads the metadata (a closed ledger's LAC is final).
    pub async fn refresh(&self) -> Result<LedgerMeta, ClientError> {
        let m = self.client.metadata(self.ledger_id).await?;
        if let Some(l) = m.closed_lac() {
            self.learn(l);
        }
        *self.meta.lock().expect("meta lock") = m.clone();
        Ok(m)
    }

    /// Asks every member of the last ensemble of `meta` for its LAC: the
    /// highest answered, how many answered, and the last failure. A
    /// replaced instance knows nothing of the ledger's tail (BookKeeper
    /// #2612): its LAC is no answer at all.
    async fn ask_lac(&self, meta: &LedgerMeta) -> (Option<i64>, usize, Option<RpcError>) {
        let timeout = self.client.options().read_timeout;
        let mut calls: FuturesUnordered<_> = meta
            .last_segment()
            .members
            .iter()
            .map(|m| {
                let bookies = self.client.bookies().clone();
                let (id, expected) = (m.bookie_id.clone(), m.instance_id.clone());
                async move { (expected, bookies.read_lac(&id, meta.ledger_id, timeout).await) }
            })
            .collect();
        let (mut best, mut heard, mut last_err) = (None::<i64>, 0, None);
        while let Some((expected, r)) = calls.next().await {
            match r {
                Ok((_, instance)) if !expected.is_empty() && instance != expected => {}
                Ok((l, _)) => {
                    heard += 1;
                    best = Some(best.map_or(l, |b| b.max(l)));
                }
                Err(e) => last_err = Some(e),
            }
        }
        (best, heard, last_err)
    }

    /// The LAC: for a closed ledger its last entry; for an open one the
    /// highest LAC any bookie of the last ensemble reports (each was
    /// acknowledged before the writer sent it).
    pub async fn read_lac(&self) -> Result<i64, ClientError> {
        let meta = self.metadata();
        if let Some(l) = meta.closed_lac() {
            return Ok(self.learn(l));
        }
        match self.ask_lac(&meta).await {
            (Some(l), _, _) => Ok(self.learn(l)),
            (None, _, last_err) => {
                // No bookie answered: the ledger may have been closed meanwhile.
                let m = self.refresh().await?;
                match m.closed_lac() {
                    Some(l) => Ok(self.learn(l)),
                    None => Err(unanswered(&format!("the LAC of ledger {}", meta.ledger_id), last_err)),
                }
            }
        }
    }

    /// The LAC as a writer with visible acknowledgements
    /// ([`crate::CreateLedger::visible_acks`]) promised it: at least every
    /// entry it has answered. Such a writer answers an add once its LAC is
    /// stored on Qa members, so this hears at least E - Qa + 1 members of
    /// the last ensemble (any such set meets every Qa of them), or fails
    /// (Unavailable) rather than answer a LAC that may be stale. Entries
    /// below the last ensemble's first were acknowledged before it was
    /// made (a new ensemble starts at the first unacknowledged entry), so
    /// the LAC is at least the one before it. (With the metadata the reader
    /// has: one opened after the add was answered has it as the add left
    /// it, or newer.)
    pub async fn read_lac_fresh(&self) -> Result<i64, ClientError> {
        let meta = self.metadata();
        if let Some(l) = meta.closed_lac() {
            return Ok(self.learn(l));
        }
        let needed = meta.quorums.ensemble - meta.quorums.ack + 1;
        let (best, heard, last_err) = self.ask_lac(&meta).await;
        if heard < needed {
            // A close meanwhile answers by itself.
            let m = self.refresh().await?;
            if let Some(l) = m.closed_lac() {
                return Ok(self.learn(l));
            }
            return Err(unanswered(
                &format!("the LAC of ledger {} from {needed} of its bookies (heard {heard})", meta.ledger_id),
                last_err,
            ));
        }
        let below_last_ensemble = meta.last_segment().first_entry_id as i64 - 1;
        Ok(self.learn(best.unwrap_or(-1).max(below_last_ensemble)))
    }

    /// As [`LedgerReader::read_range`], with the LAC read by
    /// [`LedgerReader::read_lac_fresh`] when `to` is past the one known.
    pub async fn read_range_fresh(&self, from: u64, to: u64, max_entries: usize) -> Result<Vec<Entry>, ClientError> {
        if from > to {
            return Err(ClientError::BadRequest(format!("range {from}..={to} is empty")));
        }
        let to = to.min(from.saturating_add(max_entries.max(1) as u64 - 1));
        let mut lac = self.known_lac();
        if past_lac(to, lac) {
            lac = self.read_lac_fresh().await?;
        }
        let last = if past_lac(from, lac) { None } else { Some(to.min(lac as u64)) };
        let mut scan = Scan::new(self, from, last);
        let mut out = Vec::new();
        while let Some(batch) = scan.next_batch().await? {
            out.extend(batch);
        }
        Ok(out)
    }

    /// Waits until the LAC passes `after` or `wait` ends; returns the LAC then.
    pub async fn wait_lac(&self, after: i64, wait: Duration) -> Result<i64, ClientError> {
        let known = self.known_lac();
        if known > after {
            return Ok(known);
        }
        let meta = self.metadata();
        if meta.state == LedgerState::Closed {
            return Ok(self.learn(meta.last_entry_id));
        }
        let mut calls: FuturesUnordered<_> = meta
            .last_segment()
            .members
            .iter()
            .map(|m| {
                let bookies = self.client.bookies().clone();
                let (id, expected) = (m.bookie_id.clone(), m.instance_id.clone());
                async move { (expected, bookies.wait_lac(&id, meta.ledger_id, after, wait).await) }
            })
            .collect();
        let mut best = None::<i64>;
        while let Some((expected, r)) = calls.next().await {
            // As in read_lac: a replaced instance's LAC is no answer.
            if let Ok((l, instance)) = r {
                if !expected.is_empty() && instance != expected {
                    continue;
                }
                let l = self.learn(l);
                best = Some(l);
                if l > after {
                    return Ok(l);
                }
            }
        }
        // Nothing new from the bookies: a close (or an ensemble change) shows in the metadata.
        let m = self.refresh().await?;
        Ok(m.closed_lac().map_or(best.unwrap_or(self.known_lac()), |l| self.learn(l)))
    }

    /// Payload bytes per entry as a scan of this reader last learned them.
    pub(super) fn entry_bytes(&self) -> Option<u64> {
        self.entry_bytes_plus_one.load(Ordering::Relaxed).checked_sub(1)
    }

    /// Records what a scan learned of the entries' size.
    pub(super) fn learn_entry_bytes(&self, bytes: u64) {
        self.entry_bytes_plus_one.store(bytes.saturating_add(1), Ordering::Relaxed);
    }

    /// The rotation of a scan's next chunk: each chunk of every scan of
    /// this reader gets the next.
    pub(super) fn next_rotation(&self) -> usize {
        self.rotation.fetch_add(1, Ordering::Relaxed)
    }

    /// Reads one entry at or below the LAC.
    pub async fn read(&self, entry_id: u64) -> Result<Entry, ClientError> {
        if past_lac(entry_id, self.known_lac()) && past_lac(entry_id, self.read_lac().await?) {
            return Err(ClientError::NoSuchEntry(self.ledger_id, entry_id));
        }
        self.read_unchecked(entry_id).await
    }

    /// Reads `from..=to`, cut at the LAC; at most `max_entries`. Batch reads
    /// (ReadEntries) over the ensemble's stripes, see [`Scan`].
    pub async fn read_range(&self, from: u64, to: u64, max_entries: usize) -> Result<Vec<Entry>, ClientError> {
        if from > to {
            return Err(ClientError::BadRequest(format!("range {from}..={to} is empty")));
        }
        let to = to.min(from.saturating_add(max_entries.max(1) as u64 - 1));
        let mut scan = self.scan(from, to).await?;
        let mut out = Vec::new();
        while let Some(batch) = scan.next_batch().await? {
            out.extend(batch);
        }
        Ok(out)
    }

    /// A scan of `from..=to` cut at the LAC (as it is now): batches of
    /// entries in order, a bounded number of batches read ahead.
    pub async fn scan(&self, from: u64, to: u64) -> Result<Scan<'_>, ClientError> {
        let mut lac = self.known_lac();
        if past_lac(to, lac) {
            lac = self.read_lac().await?;
        }
        let last = if past_lac(from, lac) { None } else { Some(to.min(lac as u64)) };
        Ok(Scan::new(self, from, last))
    }

    /// Reads one entry, asking its replicas one after another (no LAC check).
    pub(super) async fn read_unchecked(&self, entry_id: u64) -> Result<Entry, ClientError> {
        let meta = self.metadata();
        let seg = meta.segment_of(entry_id).clone();
        let sticky_id = self.sticky.lock().expect("sticky lock").clone();
        let sticky = sticky_id.and_then(|id| seg.members.iter().position(|m| m.bookie_id == id));
        let order = read_order(&meta.quorums.write_set(entry_id), sticky);
        let opts = self.client.options();
        let deadline = Instant::now() + opts.read_timeout;
        let ledger_id = self.ledger_id;
        let mut inflight = FuturesUnordered::new();
        let mut next = 0;
        let (mut missing, mut corrupt, mut last_err) = (0, 0, None);
        let launch = |pos: usize| {
            let bookies = self.client.bookies().clone();
            let id = seg.members[pos].bookie_id.clone();
            let timeout = deadline.saturating_duration_since(Instant::now());
            async move {
                let out = match bookies.read(&id, ledger_id, entry_id, false, timeout).await {
                    Ok(r) => match r.body.entry {
                        Some(e) if e.digest_ok() && e.ledger_id == ledger_id && e.entry_id == entry_id => {
                            Outcome::Entry(e)
                        }
                        _ => Outcome::Corrupt,
                    },
                    Err(e) => match e.code() {
                        Some(ErrorCode::NoSuchEntry | ErrorCode::NoSuchLedger) => Outcome::Missing,
                        Some(ErrorCode::CorruptEntry) => Outcome::Corrupt,
                        _ => Outcome::Failed(e),
                    },
                };
                (id, out)
            }
        };
        inflight.push(launch(order[0]));
        next += 1;
        loop {
            let speculate = tokio::time::sleep(opts.speculative_read_after);
            tokio::select! {
                r = inflight.next() => {
                    let Some((id, out)) = r else { break };
                    match out {
                        Outcome::Entry(e) => {
                            *self.sticky.lock().expect("sticky lock") = Some(id);
                            self.learn(e.last_add_confirmed);
                            return Ok(e);
                        }
                        Outcome::Missing => missing += 1,
                        Outcome::Corrupt => {
                            tracing::warn!(ledger_id, entry_id, bookie_id = %id, "corrupt copy skipped");
                            corrupt += 1;
                        }
                        Outcome::Failed(e) => last_err = Some(e),
                    }
                    if next < order.len() {
                        inflight.push(launch(order[next]));
                        next += 1;
                    }
                }
                _ = speculate, if next < order.len() => {
                    inflight.push(launch(order[next]));
                    next += 1;
                }
            }
        }
        Err(if corrupt > 0 && missing + corrupt == order.len() {
            ClientError::Corrupt(ledger_id, entry_id)
        } else if missing == order.len() {
            ClientError::NoSuchEntry(ledger_id, entry_id)
        } else {
            unanswered(&format!("entry {entry_id} of ledger {ledger_id}"), last_err)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_start_at_the_sticky_replica_when_it_holds_the_entry() {
        assert_eq!(read_order(&[2, 0, 1], None), vec![2, 0, 1]);
        assert_eq!(read_order(&[2, 0, 1], Some(1)), vec![1, 2, 0]);
        assert_eq!(read_order(&[3, 4], Some(1)), vec![3, 4], "not in the write set: plain order");
    }
}
