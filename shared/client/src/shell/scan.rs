//! Batch reads: a range of a ledger read a chunk at a time, each chunk
//! planned over the ensemble's stripes ([`crate::read_plan`]) and asked of
//! its bookies in parallel with ReadEntries, a few chunks ahead of the
//! caller.
//!
//! Every id of a chunk is asked of one replica of its write set. Each answer
//! is checked here (ledger, id, digest) and merged into place; an ask whose
//! bookie fails is asked again of the next replica of what it was asked
//! (the failed bookie avoided from then on), and an id still missing or
//! corrupt after that is read on its own, replica after replica, as a
//! single read is ([`LedgerReader::read_unchecked`]). A scan never asks past
//! the LAC it was made with.

use std::collections::VecDeque;

use futures_util::future::{join_all, BoxFuture};
use futures_util::stream::{FuturesOrdered, StreamExt};
use quire_proto::v1::{self, Entry};
use quire_rpc::RpcError;

use crate::meta::{LedgerMeta, Segment};
use crate::read_plan::{self, Ask};
use crate::shell::client::Client;
use crate::shell::error::ClientError;
use crate::shell::reader::{unanswered, LedgerReader};
use crate::writer::Quorums;

/// What one ask should bring back, about: big enough that a request's
/// overhead is small beside it, small enough that a few chunks in flight
/// hold little memory.
const ASK_BYTES: u64 = 1 << 20;
/// Ids per position in a chunk, at least and at most (the bookie's own bound
/// is 8192 entries, 4 MiB).
const ASK_IDS_MIN: u64 = 16;
const ASK_IDS_MAX: u64 = 4096;
/// Chunks read ahead of the caller.
const WINDOW_CHUNKS: usize = 4;
/// The least a chunk's part asked of one bookie should bring. A smaller
/// chunk (a reader's page of 100 entries) goes in fewer parts: one request
/// where it would have been E, each with its fixed cost on both ends
/// (measured: pages of 100 1 KiB entries, three requests of 34 each, read
/// at a third of a scan's rate). Counted as the bookie counts an answer
/// (payload plus [`ENTRY_OVERHEAD_BYTES`] each), a full chunk (ASK_IDS_MAX
/// ids a position at least) always reaches it, so whole scans keep E parts
/// whatever the entries' size.
const PART_BYTES_MIN: u64 = 256 << 10;
const ENTRY_OVERHEAD_BYTES: u64 = quire_proto::ENTRY_OVERHEAD_BYTES as u64;
const _: () = assert!(ASK_IDS_MAX * ENTRY_OVERHEAD_BYTES >= PART_BYTES_MIN);
/// Single reads in flight for the ids batches did not bring.
const FALLBACK_IN_FLIGHT: usize = 16;

type Chunk<'a> = BoxFuture<'a, Result<Vec<Entry>, ClientError>>;

/// A range of a ledger being read: [`Scan::next_batch`] until `None`.
pub struct Scan<'a> {
    reader: &'a LedgerReader,
    /// Next id to plan a chunk for, and the last id to read (none: nothing to read).
    next: u64,
    last: Option<u64>,
    /// Payload bytes per entry, as far as known (the closed ledger's
    /// length, or what the reader's last scan learned, then the entries
    /// read).
    entry_bytes: Option<u64>,
    inflight: FuturesOrdered<Chunk<'a>>,
}

impl<'a> Scan<'a> {
    pub(super) fn new(reader: &'a LedgerReader, from: u64, last: Option<u64>) -> Scan<'a> {
        let meta = reader.metadata();
        let entry_bytes = match meta.closed_lac() {
            Some(l) if l >= 0 => Some(meta.length / (l as u64 + 1)),
            _ => reader.entry_bytes(),
        };
        Scan { reader, next: from, last, entry_bytes, inflight: FuturesOrdered::new() }
    }

    /// The next entries in order, or `None` at the end of the range.
    pub async fn next_batch(&mut self) -> Result<Option<Vec<Entry>>, ClientError> {
        self.fill();
        let Some(r) = self.inflight.next().await else {
            return Ok(None);
        };
        let batch = r?;
        if let Some(e) = batch.last() {
            // Each entry carries the ledger's length up to it.
            let b = e.ledger_length / (e.entry_id + 1);
            self.entry_bytes = Some(b);
            self.reader.learn_entry_bytes(b);
        }
        self.fill();
        Ok(Some(batch))
    }

    /// Starts chunks until the window is full. Until the size of entries is
    /// known (an open ledger) one small chunk goes alone.
    fn fill(&mut self) {
        let Some(last) = self.last else { return };
        let window = if self.entry_bytes.is_some() { WINDOW_CHUNKS } else { 1 };
        while self.inflight.len() < window && self.next <= last {
            let meta = self.reader.metadata();
            let seg_index = meta.segments.iter().rposition(|s| s.first_entry_id <= self.next).expect("starts at 0");
            let seg_last = meta.segments.get(seg_index + 1).map_or(u64::MAX, |s| s.first_entry_id - 1);
            let per_position = match self.entry_bytes {
                Some(b) => (ASK_BYTES / b.max(1)).clamp(ASK_IDS_MIN, ASK_IDS_MAX),
                None => ASK_IDS_MIN,
            };
            let ids = per_position * meta.quorums.ensemble as u64;
            let end = last.min(seg_last).min(self.next.saturating_add(ids - 1));
            // One turn of the reader's rotation per chunk: a scan's chunks,
            // and the pages of scans one after another, go to the
            // ensemble's positions in turn.
            let (first, rotate) = (self.next, self.reader.next_rotation());
            let parts = match self.entry_bytes {
                Some(b) => {
                    let bytes = (end - first + 1).saturating_mul(b.saturating_add(ENTRY_OVERHEAD_BYTES));
                    (bytes / PART_BYTES_MIN).max(1).min(meta.quorums.ensemble as u64) as usize
                }
                None => meta.quorums.ensemble,
            };
            let reader = self.reader;
            self.inflight.push_back(Box::pin(async move {
                let seg = meta.segments[seg_index].clone();
                read_chunk(reader, &meta, &seg, first, end, parts, rotate).await
            }));
            if end == last {
                self.last = None;
                break;
            }
            self.next = end + 1;
        }
    }
}

/// Reads every id of `first..=last` (all in `seg`, none past the LAC), in order.
async fn read_chunk(
    reader: &LedgerReader,
    meta: &LedgerMeta,
    seg: &Segment,
    first: u64,
    last: u64,
    parts: usize,
    rotate: usize,
) -> Result<Vec<Entry>, ClientError> {
    let ledger_id = meta.ledger_id;
    let asks = read_plan::plan(&meta.quorums, first, last, parts, rotate, 0);
    let (mut slots, last_err) = gather(&reader.client, meta, seg, first, last, asks, 0).await;
    // What no batch brought (absent or corrupt where asked, or every holder
    // failed): one read per id, each over its whole write set.
    let missing: VecDeque<u64> =
        slots.iter().enumerate().filter(|(_, s)| s.is_none()).map(|(i, _)| first + i as u64).collect();
    if !missing.is_empty() {
        tracing::debug!(ledger_id, first, last, missing = missing.len(), "batch read: reading the rest entry by entry");
        let mut ids = missing.into_iter();
        let mut inflight = FuturesOrdered::new();
        loop {
            while inflight.len() < FALLBACK_IN_FLIGHT {
                let Some(id) = ids.next() else { break };
                inflight.push_back(async move { (id, reader.read_unchecked(id).await) });
            }
            let Some((id, r)) = inflight.next().await else { break };
            match r {
                Ok(e) => slots[(id - first) as usize] = Some(e),
                // Every replica failed: the batches' own failure says why as well.
                Err(ClientError::NotEnoughBookies(_) | ClientError::Timeout(_)) if last_err.is_some() => {
                    return Err(unanswered(&format!("entry {id} of ledger {ledger_id}"), last_err));
                }
                Err(e) => return Err(e),
            }
        }
    }
    let entries: Vec<Entry> = slots.into_iter().map(|s| s.expect("every id read or the chunk failed")).collect();
    if let Some(e) = entries.iter().max_by_key(|e| e.last_add_confirmed) {
        reader.learn(e.last_add_confirmed);
    }
    Ok(entries)
}

/// Runs `asks` (ids of `first..=last`, all in `seg`) and merges what they
/// bring, each copy checked (ledger, an id asked for, digest): a slot per id
/// of the range, empty where nothing came. An ask whose bookie fails is asked
/// again of the next holders of what was left of it, the failed bookie
/// avoided from then on (with `avoid` at the start); the last failure is
/// returned with the slots.
pub(crate) async fn gather(
    client: &Client,
    meta: &LedgerMeta,
    seg: &Segment,
    first: u64,
    last: u64,
    mut asks: Vec<Ask>,
    mut avoid: u64,
) -> (Vec<Option<Entry>>, Option<RpcError>) {
    let q = meta.quorums;
    let ledger_id = meta.ledger_id;
    let mut slots: Vec<Option<Entry>> = vec![None; (last - first + 1) as usize];
    let mut last_err = None;
    // Each round avoids every bookie that failed before: at most E rounds.
    while !asks.is_empty() {
        let answers = join_all(asks.iter().map(|a| ask_speculating(client, &q, ledger_id, seg, *a, avoid))).await;
        let mut again = Vec::new();
        for (a, (entries, failure)) in asks.iter().zip(answers) {
            for e in entries {
                if e.ledger_id == ledger_id
                    && a.wants(e.entry_id)
                    && (first..=last).contains(&e.entry_id)
                    && e.digest_ok()
                {
                    let i = (e.entry_id - first) as usize;
                    slots[i] = Some(e);
                } else {
                    tracing::warn!(ledger_id, entry_id = e.entry_id, bookie_id = %seg.members[a.position].bookie_id, "batch read: a copy that is not the entry asked for, skipped");
                }
            }
            if let Some((from, err)) = failure {
                tracing::debug!(ledger_id, bookie_id = %seg.members[a.position].bookie_id, error = %err, "batch read failed; asking other replicas");
                avoid |= 1u64 << a.position;
                again.push((*a, from));
                last_err = Some(err);
            }
        }
        asks = again.iter().flat_map(|(a, from)| read_plan::retry(&q, a, *from, avoid)).collect();
    }
    (slots, last_err)
}

/// [`ask`], and when it has not answered after the client's
/// `batch_speculative_read_after`, the same ids of the other replicas too (as a
/// single read speculates): whichever side brings them all first wins. A
/// side that fails waits for the other; both failing is the first's failure.
async fn ask_speculating(
    client: &Client,
    q: &Quorums,
    ledger_id: u64,
    seg: &Segment,
    a: Ask,
    avoid: u64,
) -> (Vec<Entry>, Option<(u64, RpcError)>) {
    let after = client.options().batch_speculative_read_after;
    let mut first = std::pin::pin!(ask(client, ledger_id, seg, a));
    tokio::select! {
        r = &mut first => return r,
        _ = tokio::time::sleep(after) => {}
    }
    let alternates = read_plan::retry(q, &a, a.first, avoid | 1u64 << a.position);
    if alternates.is_empty() {
        return first.await;
    }
    tracing::debug!(ledger_id, bookie_id = %seg.members[a.position].bookie_id, "batch read slow; asking other replicas too");
    let mut others = std::pin::pin!(async {
        let answers = join_all(alternates.iter().map(|b| ask(client, ledger_id, seg, *b))).await;
        let mut entries = Vec::new();
        let mut failed = None;
        for (es, f) in answers {
            entries.extend(es);
            if let (None, Some(f)) = (&failed, f) {
                failed = Some(f);
            }
        }
        (entries, failed)
    });
    tokio::select! {
        r = &mut first => match r {
            (es, None) => (es, None),
            (mut es, Some(failed)) => {
                let (more, other) = others.await;
                es.extend(more);
                (es, other.map(|_| failed))
            }
        },
        (more, failed) = &mut others => match failed {
            None => (more, None),
            Some(_) => {
                let (mut es, f) = first.await;
                es.extend(more);
                (es, f)
            }
        },
    }
}

/// Asks one bookie for what `a` names, request after request while the
/// bookie stops at its bounds. The entries brought, and where and why it
/// failed if it did (a bookie that does not know the ledger is a failure
/// too: its share is then asked of another replica).
async fn ask(client: &Client, ledger_id: u64, seg: &Segment, a: Ask) -> (Vec<Entry>, Option<(u64, RpcError)>) {
    let bookies = client.bookies();
    let timeout = client.options().read_timeout;
    let bookie_id = &seg.members[a.position].bookie_id;
    let mut out = Vec::new();
    let mut at = a.first;
    loop {
        let req = v1::ReadEntriesRequest {
            ledger_id,
            first_entry_id: at,
            last_entry_id: a.last,
            stripe_modulus: a.modulus,
            stripe_residues: a.residues,
            max_entries: 0,
            max_bytes: 0,
        };
        match bookies.read_entries(bookie_id, req, timeout).await {
            Ok(r) => {
                let more = r.body.more;
                let next = r.body.next_entry_id;
                out.extend(r.body.entries);
                if !more {
                    return (out, None);
                }
                if next <= at || next > a.last {
                    let detail = format!("answered a range read from {at} to {} with next {next}", a.last);
                    return (out, Some((at, RpcError::Protocol { peer: bookie_id.clone(), detail })));
                }
                at = next;
            }
            Err(e) => return (out, Some((at, e))),
        }
    }
}
