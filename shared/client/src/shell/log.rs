//! Logs over chains of ledgers (issue #23): the writer (appends with
//! offsets, rollover, takeover, idempotent appends) and the metadata calls
//! beside it. The record's rules are quire-log's; the metadata service
//! checks every edit against them and against the ledgers.
//!
//! A writer owns its log at one epoch. It appends to the open segment's
//! ledger, and rolls to a ledger it created beforehand when the segment is
//! due ([`quire_log::Rollover`]): the old ledger's close and the record's
//! new segment are one metadata command ([`LedgerWriter::close_with`]), so
//! a rollover costs one metadata round trip, and appends to the next ledger
//! start only once the log lists it. A takeover
//! ([`Client::open_log_writer`]) recovers the open segment's ledger (which
//! fences the previous owner's writer), rebuilds the producer table from
//! the records, and raises the epoch with a new segment, by CAS.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use quire_log::envelope::{self, Produced};
use quire_log::envelope::{BatchPlace, Header};
use quire_log::{LogConfig, LogMeta, LogRecord, Producers, Seen};
use quire_proto::v1::{self, ErrorCode};
use quire_rpc::RpcError;
use tokio::sync::watch;

use crate::meta::{LedgerMeta, LedgerState};
use crate::shell::client::{Client, CreateLedger};
use crate::shell::error::ClientError;
use crate::shell::ledger_writer::{Closer, LedgerWriter};
use crate::shell::reader::LedgerReader;

/// The custom metadata key naming the log a ledger was made for (an
/// unlisted ledger so named is a rollover's leftover: see docs/logs.md).
pub const LOG_KEY: &str = quire_log::config::LEDGER_KEY;

/// One record read from a log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    /// Its offset.
    pub offset: u64,
    /// The application's bytes.
    pub payload: Bytes,
    /// The idempotent append's producer id and sequence, when it had one.
    pub produced: Option<(String, u64)>,
    /// When its writer took it, in milliseconds since the Unix epoch (the
    /// writer's clock, never less than an earlier record's; 0 for records
    /// written before records had a time).
    pub time_ms: u64,
}

fn log_error(e: RpcError, name: &str) -> ClientError {
    match e.code() {
        Some(ErrorCode::NoSuchLog) => ClientError::NoSuchLog(name.to_string()),
        Some(ErrorCode::AlreadyExists) => ClientError::LogExists(name.to_string()),
        _ => ClientError::from_metadata(e, None),
    }
}

fn is_conflict(e: &RpcError) -> bool {
    e.code() == Some(ErrorCode::VersionConflict)
}

/// The metadata service said no: nothing was written.
fn refused(e: &RpcError) -> bool {
    matches!(
        e.code(),
        Some(
            ErrorCode::VersionConflict
                | ErrorCode::BadRequest
                | ErrorCode::AlreadyExists
                | ErrorCode::PermissionDenied
                | ErrorCode::NoSuchLog
                | ErrorCode::NoSuchLedger
        )
    )
}

fn chain_error(e: quire_log::ChainError) -> ClientError {
    match e {
        quire_log::ChainError::Fenced { log, .. } => ClientError::LogFenced(log),
        other => ClientError::BadRequest(other.to_string()),
    }
}

fn from_wire(m: Option<v1::LogMetadata>, name: &str) -> Result<LogMeta, ClientError> {
    let m = m.ok_or_else(|| ClientError::MetadataUnavailable(format!("metadata answer without log {name}")))?;
    LogMeta::from_wire(&m).map_err(|why| ClientError::BadRequest(format!("log {name}: {why}")))
}

impl Client {
    /// A log's metadata, as the metadata leader has it.
    pub async fn log_meta(&self, name: &str) -> Result<LogMeta, ClientError> {
        let r = self
            .meta()
            .call(v1::GetLogRequest { name: name.to_string(), stale_ok: false })
            .await
            .map_err(|e| log_error(e, name))?;
        from_wire(r.log, name)
    }

    /// Log names after `start_after`, at most `limit`, and where the next page starts.
    pub async fn list_logs(&self, start_after: &str, limit: u32) -> Result<(Vec<String>, Option<String>), ClientError> {
        let r = self
            .meta()
            .call(v1::ListLogsRequest { start_after: start_after.to_string(), limit })
            .await
            .map_err(|e| ClientError::from_metadata(e, None))?;
        Ok((r.names, r.next))
    }

    /// Deletes a log and every ledger it lists (bookies reclaim them by GC),
    /// with the ledgers made for it and never listed. Its open ledger is
    /// recovered first, which fences the writer that holds it, and the
    /// delete is a CAS on the version so fenced: an edit in between (a
    /// rollover listing a ledger this did not fence, a takeover) is a
    /// conflict, and this fences again what is there now. The metadata
    /// service also refuses a delete while the open ledger is open.
    pub async fn delete_log(&self, name: &str) -> Result<(), ClientError> {
        loop {
            let meta = self.log_meta(name).await?;
            if let Some(open) = meta.record.open_segment() {
                match self.recover(open.ledger_id).await {
                    Ok(_) | Err(ClientError::NoSuchLedger(_)) => {}
                    Err(e) => return Err(e),
                }
            }
            let req = v1::DeleteLogRequest { name: name.to_string(), expected_version: meta.version };
            match self.meta().call(req).await {
                Ok(_) => return Ok(()),
                Err(e) if is_conflict(&e) => {
                    tracing::debug!(log = name, "the log changed under its delete; fencing it again");
                }
                Err(e) => return Err(log_error(e, name)),
            }
        }
    }

    async fn create_log_ledger(&self, name: &str, c: &LogConfig) -> Result<LedgerWriter, ClientError> {
        let spec = CreateLedger {
            ensemble: c.ensemble_size as usize,
            write_quorum: c.write_quorum as usize,
            ack_quorum: c.ack_quorum as usize,
            custom: [(LOG_KEY.to_string(), Bytes::from(name.to_string()))].into(),
            // An acknowledged append is readable at once, from anywhere.
            visible_acks: true,
        };
        self.create(spec).await
    }

    /// Creates a log and returns its writer, owned by `owner` (a name for
    /// this process, shown to others) at epoch 1.
    pub async fn create_log(&self, name: &str, config: LogConfig, owner: &str) -> Result<LogWriter, ClientError> {
        self.create_log_for(name, config, owner, "").await
    }

    /// As [`Client::create_log`], for an HTTP `principal` (a gateway's
    /// caller; only a gateway's certificate may name one): the log is that
    /// principal's to change through a gateway ([`LogMeta::principal`]).
    pub async fn create_log_for(
        &self,
        name: &str,
        config: LogConfig,
        owner: &str,
        principal: &str,
    ) -> Result<LogWriter, ClientError> {
        quire_log::config::validate_name(name).map_err(ClientError::BadRequest)?;
        // A delete of a log of this name that lands between making the first
        // ledger and creating the log deletes that ledger with the old log's
        // (it carries the name): the creation is refused with NoSuchLedger,
        // and made again over a new ledger. Once is all such a race can
        // take; a second refusal is answered.
        let mut attempts = 0;
        loop {
            attempts += 1;
            let first = self.create_log_ledger(name, &config).await?;
            let log = LogMeta {
                record: LogRecord::new(name, owner, first.ledger_id()),
                config,
                producers: Producers::default(),
                creator: String::new(),
                created_at_ms: 0,
                version: 0,
                principal: principal.to_string(),
            };
            match self.meta().call(v1::CreateLogRequest { log: Some(log.to_wire()) }).await {
                Ok(r) => {
                    let stored = from_wire(r.log, name)?;
                    tracing::info!(log = name, ledger_id = first.ledger_id(), "created log");
                    return Ok(LogWriter::start(self.clone(), stored, first, Producers::default(), 0));
                }
                Err(e) if e.code() == Some(ErrorCode::NoSuchLedger) && attempts < 2 => {
                    tracing::info!(
                        log = name,
                        ledger_id = first.ledger_id(),
                        "the first ledger went with a deleted log; again"
                    );
                }
                Err(e) => {
                    // Refused: the ledger made for it is nobody's (best effort).
                    // Of unknown outcome, it may be the log's: left alone.
                    if refused(&e) {
                        let _ = self.delete(first.ledger_id()).await;
                    }
                    return Err(log_error(e, name));
                }
            }
        }
    }

    /// Takes a log over for writing as `owner`: recovers (and so fences)
    /// the ledger of its open segment, rebuilds the producer table from the
    /// records, and raises the owner epoch with a new ledger, by CAS. From
    /// then on every append of an earlier owner fails with LogFenced.
    pub async fn open_log_writer(&self, name: &str, owner: &str) -> Result<LogWriter, ClientError> {
        loop {
            let meta = self.log_meta(name).await?;
            // The open segment ends at its recovered ledger's last whole
            // batch: a batch the recovery cut (its writer crashed or was
            // fenced within it, so never answered it) is not in the log.
            let (sealed_last, kept_time_ms) = match meta.record.open_segment() {
                Some(s) => {
                    let reader = self.open_recovered(s.ledger_id).await?;
                    let recovered_last = reader.metadata().last_entry_id;
                    let (whole, last_time_ms) = self.whole_batches(&reader, recovered_last).await?;
                    if whole as i64 <= recovered_last {
                        tracing::info!(
                            log = name,
                            ledger_id = s.ledger_id,
                            kept = whole,
                            recovered = recovered_last + 1,
                            "a batch the recovery cut is left out of the log"
                        );
                    }
                    (whole as i64 - 1, (whole > 0).then_some(last_time_ms))
                }
                None => (-1, None),
            };
            let next = self.create_log_ledger(name, &meta.config).await?;
            let taken = match meta.record.take_over(owner, sealed_last, next.ledger_id()) {
                Ok(t) => t,
                Err(e) => {
                    let _ = self.delete(next.ledger_id()).await;
                    return Err(chain_error(e));
                }
            };
            // The new writer's times start from the log's last record's:
            // record time never goes back, across owners whose clocks
            // disagree.
            let floor_ms = match kept_time_ms {
                Some(t) => t,
                None => match self.time_before(&taken, taken.fixed_end()).await {
                    Ok(t) => t,
                    Err(e) => {
                        let _ = self.delete(next.ledger_id()).await;
                        return Err(e);
                    }
                },
            };
            let mut producers = meta.producers.clone();
            if let Err(e) = self.observe_producers(&taken, &mut producers).await {
                let _ = self.delete(next.ledger_id()).await;
                return Err(e);
            }
            let intended = LogMeta { record: taken, producers: producers.clone(), ..meta.clone() };
            let req =
                v1::UpdateLogRequest { log: Some(intended.to_wire()), expected_version: meta.version, ledgers: vec![] };
            match self.meta().call(req).await {
                Ok(r) => {
                    let stored = from_wire(r.log, name)?;
                    tracing::info!(
                        log = name,
                        epoch = stored.record.epoch,
                        owner,
                        ledger_id = next.ledger_id(),
                        "took the log over"
                    );
                    return Ok(LogWriter::start(self.clone(), stored, next, producers, floor_ms));
                }
                Err(e) => {
                    // Refused or of unknown outcome: what is stored says
                    // whether this takeover is the one that landed (its
                    // reply lost, or a retry of it refused as stale).
                    let stored = match self.log_meta(name).await {
                        Ok(m) => m,
                        Err(_) if !refused(&e) => return Err(log_error(e, name)),
                        Err(again) => return Err(again),
                    };
                    let ours = stored.record.epoch == meta.record.epoch + 1
                        && stored.record.owner == owner
                        && stored.record.open_segment().map(|s| s.ledger_id) == Some(next.ledger_id());
                    if ours {
                        return Ok(LogWriter::start(self.clone(), stored, next, producers, floor_ms));
                    }
                    if !stored.record.segments.iter().any(|s| s.ledger_id == next.ledger_id()) {
                        let _ = self.delete(next.ledger_id()).await;
                    }
                    if is_conflict(&e) {
                        // Another edit (a rollover, a trim, another takeover) came first: again.
                        tracing::debug!(log = name, "takeover raced another edit; again");
                        continue;
                    }
                    return Err(log_error(e, name));
                }
            }
        }
    }

    /// Observes every record from the table's covered point to `record`'s
    /// fixed end (what a takeover must know that the stored table may not).
    async fn observe_producers(&self, record: &LogRecord, producers: &mut Producers) -> Result<(), ClientError> {
        let end = record.fixed_end();
        let mut from = producers.covers_before.max(record.trim_before);
        while from < end {
            let got = self.read_log_range(record, from, end, 4096).await?;
            let Some(last) = got.last() else { break };
            from = last.offset + 1;
            for e in &got {
                if let Some((p, s)) = &e.produced {
                    producers.observe(p, *s, e.offset);
                }
            }
        }
        producers.cover(end);
        Ok(())
    }

    /// Records `from..end` of `record` (at most `max`), from the fixed
    /// segments and, for the open one, up to its LAC.
    pub(crate) async fn read_log_range(
        &self,
        record: &LogRecord,
        from: u64,
        end: u64,
        max: usize,
    ) -> Result<Vec<LogEntry>, ClientError> {
        Ok(self.read_log_range_held(record, from, end, max).await?.0)
    }

    /// [`Client::read_log_range`], and, when it stopped at a batch of the
    /// open segment not yet whole, that batch's ledger and last entry (a
    /// follower waits for the LAC to reach it).
    ///
    /// A batch is atomic (docs/logs.md): in the open segment, a record is
    /// answered only once the LAC covers its batch's last entry; a fixed
    /// segment ends at a whole batch (its sealer cut off what its recovery
    /// cut), so every record within it is whole.
    async fn read_log_range_held(
        &self,
        record: &LogRecord,
        from: u64,
        end: u64,
        max: usize,
    ) -> Result<(Vec<LogEntry>, Option<(u64, u64)>), ClientError> {
        let mut out = Vec::new();
        let mut offset = from;
        while out.len() < max && offset < end {
            let (ledger_id, entry_id) = match record.locate(offset) {
                quire_log::Located::At { ledger_id, entry_id } => (ledger_id, entry_id),
                quire_log::Located::Trimmed { trim_before } => {
                    return Err(ClientError::Trimmed { log: record.name.clone(), offset, trim_before })
                }
                quire_log::Located::Beyond => break,
            };
            let seg = record.segments.iter().find(|s| s.ledger_id == ledger_id).expect("located in it");
            let seg_end = seg.end_offset.unwrap_or(u64::MAX).min(end);
            let want = ((seg_end - offset) as usize).min(max - out.len());
            if want == 0 {
                break;
            }
            // A ledger gone under a read was trimmed meanwhile: say so.
            let trimmed = |e: ClientError| async move {
                match e {
                    ClientError::NoSuchLedger(_) => match self.log_meta(&record.name).await {
                        Ok(now) if offset < now.record.trim_before => ClientError::Trimmed {
                            log: record.name.clone(),
                            offset,
                            trim_before: now.record.trim_before,
                        },
                        _ => e,
                    },
                    e => e,
                }
            };
            let reader = match self.open(ledger_id).await {
                Ok(r) => r,
                Err(e) => return Err(trimmed(e).await),
            };
            // The open segment's end is the LAC its writer's answered
            // appends made visible (read your writes: docs/logs.md).
            let open = seg.end_offset.is_none();
            let read = if open {
                reader.read_range_fresh(entry_id, entry_id + want as u64 - 1, want).await
            } else {
                reader.read_range(entry_id, entry_id + want as u64 - 1, want).await
            };
            let entries = match read {
                Ok(es) => es,
                Err(e) => return Err(trimmed(e).await),
            };
            // Every entry the read answered is at or below this.
            let lac = reader.known_lac();
            let got = entries.len();
            for e in entries {
                let corrupt = || ClientError::Corrupt(ledger_id, e.entry_id);
                let r = envelope::decode(&e.payload).map_err(|_| corrupt())?;
                let batch_last = r.header.batch.last_entry(e.entry_id).ok_or_else(corrupt)?;
                match seg.end_offset {
                    // Part of a batch not yet whole (or cut: never whole):
                    // its records come once the LAC covers it, or never.
                    None if lac < 0 || batch_last > lac as u64 => return Ok((out, Some((ledger_id, batch_last)))),
                    // A fixed segment ends at a whole batch (its sealer
                    // wrote it so), unless a takeover by a build before
                    // atomic batches sealed it: the log holds what its
                    // record says.
                    Some(end) if batch_last >= end - seg.first_offset => {
                        tracing::warn!(
                            log = %record.name,
                            ledger_id,
                            entry_id = e.entry_id,
                            "a fixed segment ends within a batch (sealed by an earlier build?)"
                        );
                    }
                    _ => {}
                }
                out.push(LogEntry {
                    offset: seg.first_offset + e.entry_id,
                    payload: e.payload.slice(e.payload.len() - r.payload.len()..),
                    produced: r.header.produced.map(|p| (p.producer_id.to_string(), p.sequence)),
                    time_ms: r.header.time_ms,
                });
            }
            if got < want {
                // The open segment's LAC: nothing more is committed yet.
                break;
            }
            offset += got as u64;
        }
        Ok((out, None))
    }

    /// How many of a ledger's entries, from entry 0, are whole batches when
    /// its entries up to `last` are in (its LAC, or the end its recovery
    /// found), and the time of the last of them (0: none). `last + 1`,
    /// unless entry `last` belongs to a batch that goes on past it (cut by
    /// a crash or a takeover, or still being written): then where that
    /// batch starts.
    pub(crate) async fn whole_batches(&self, reader: &LedgerReader, last: i64) -> Result<(u64, u64), ClientError> {
        if last < 0 {
            return Ok((0, 0));
        }
        let ledger_id = reader.ledger_id();
        let decode_at = |entry_id: u64| async move {
            let e = reader.read_unchecked(entry_id).await?;
            let r = envelope::decode(&e.payload).map_err(|_| ClientError::Corrupt(ledger_id, entry_id))?;
            Ok::<_, ClientError>((r.header.batch, r.header.time_ms))
        };
        let last = last as u64;
        let (place, time_ms) = decode_at(last).await?;
        let corrupt = || ClientError::Corrupt(ledger_id, last);
        if place.last_entry(last).ok_or_else(corrupt)? <= last {
            return Ok((last + 1, time_ms));
        }
        let first = place.first_entry(last).ok_or_else(corrupt)?;
        if first == 0 {
            return Ok((0, 0));
        }
        let (_, before_ms) = decode_at(first - 1).await?;
        Ok((first, before_ms))
    }

    /// The offset of log `name`'s first record at or after `time_ms` (its
    /// writer's time; never decreasing along the log), or the log's
    /// committed end when every record is before it: a binary search of
    /// the offsets from the trim point to that end, one record read a step
    /// (about log2 of the records: 32 for four billion).
    pub async fn log_offset_at_time(&self, name: &str, time_ms: u64) -> Result<u64, ClientError> {
        let meta = self.log_meta(name).await?;
        let record = &meta.record;
        let end = match record.open_segment() {
            Some(s) => {
                let reader = self.open(s.ledger_id).await?;
                s.first_offset + self.whole_batches(&reader, reader.read_lac_fresh().await?).await?.0
            }
            None => record.fixed_end(),
        };
        let mut readers: std::collections::HashMap<u64, LedgerReader> = std::collections::HashMap::new();
        // Every record below lo is before the time; hi is the end, or a
        // record at or after it.
        let (mut lo, mut hi) = (record.trim_before, end.max(record.trim_before));
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let quire_log::Located::At { ledger_id, entry_id } = record.locate(mid) else {
                return Err(ClientError::Trimmed {
                    log: name.to_string(),
                    offset: mid,
                    trim_before: record.trim_before,
                });
            };
            let reader = match readers.entry(ledger_id) {
                std::collections::hash_map::Entry::Occupied(r) => r.into_mut(),
                std::collections::hash_map::Entry::Vacant(v) => v.insert(self.open(ledger_id).await?),
            };
            let e = reader.read_unchecked(entry_id).await?;
            let r = envelope::decode(&e.payload).map_err(|_| ClientError::Corrupt(ledger_id, entry_id))?;
            if r.header.time_ms < time_ms {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(lo)
    }

    /// The time of the record before offset `end` of `record` (0: none
    /// left, below the trim point).
    async fn time_before(&self, record: &LogRecord, end: u64) -> Result<u64, ClientError> {
        if end <= record.trim_before {
            return Ok(0);
        }
        let got = self.read_log_range(record, end - 1, end, 1).await?;
        Ok(got.first().map_or(0, |e| e.time_ms))
    }

    /// The time of the last record of a fixed segment of `record` (None:
    /// it holds none, or is not fixed), read from its ledger: retention
    /// by record time asks it of the oldest segments.
    pub async fn segment_last_time_ms(&self, record: &LogRecord, ledger_id: u64) -> Result<Option<u64>, ClientError> {
        let Some(seg) = record.segments.iter().find(|s| s.ledger_id == ledger_id) else { return Ok(None) };
        let Some(end) = seg.end_offset.filter(|end| *end > seg.first_offset) else { return Ok(None) };
        let reader = self.open(ledger_id).await?;
        let last = end - seg.first_offset - 1;
        let e = reader.read_unchecked(last).await?;
        let r = envelope::decode(&e.payload).map_err(|_| ClientError::Corrupt(ledger_id, last))?;
        Ok(Some(r.header.time_ms))
    }

    /// Reads up to `max` records of log `name` from `from` on, across
    /// ledgers, up to its committed end (empty at the end). Below the trim
    /// point: [`ClientError::Trimmed`].
    pub async fn read_log(&self, name: &str, from: u64, max: usize) -> Result<Vec<LogEntry>, ClientError> {
        self.read_log_wait(name, from, max, std::time::Duration::ZERO).await
    }

    /// As [`Client::read_log`], waiting up to `wait` when nothing is
    /// committed at `from` yet: on the open ledger's LAC (a long poll on its
    /// bookies) and on the log's record (a rollover or a takeover moves the
    /// tail to the next ledger), whichever moves first. Following a log's
    /// tail is this, again and again, from one past the last record read.
    pub async fn read_log_wait(
        &self,
        name: &str,
        from: u64,
        max: usize,
        wait: std::time::Duration,
    ) -> Result<Vec<LogEntry>, ClientError> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let meta = self.log_meta(name).await?;
            // (Below the trim point, read_log_range answers Trimmed.)
            let (got, held) = self.read_log_range_held(&meta.record, from, u64::MAX, max.max(1)).await?;
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if !got.is_empty() || left.is_zero() {
                return Ok(got);
            }
            let changed = async {
                let req = v1::WatchLogRequest {
                    name: name.to_string(),
                    after_version: meta.version,
                    timeout_ms: left.as_millis().min(u32::MAX as u128) as u32,
                };
                self.meta().call_waiting(req, left).await.map_err(|e| log_error(e, name))
            };
            // Held back at a batch not yet whole: wait for the LAC to reach
            // its last entry (not merely `from`, which it already passed).
            let waiting_on = match (held, meta.record.locate(from)) {
                (Some((ledger_id, batch_last)), _) => Some((ledger_id, batch_last as i64 - 1)),
                (None, quire_log::Located::At { ledger_id, entry_id })
                    if meta.record.open_segment().is_some_and(|s| s.ledger_id == ledger_id) =>
                {
                    Some((ledger_id, entry_id as i64 - 1))
                }
                _ => None,
            };
            tokio::pin!(changed);
            match waiting_on {
                Some((ledger_id, after)) => {
                    let reader = self.open(ledger_id).await?;
                    tokio::select! {
                        r = reader.wait_lac(after, left) => {
                            // A ledger closed short of it (recovered by a
                            // takeover whose record has not landed, or has
                            // cut the batch) takes nothing more: the log's
                            // record moves next. Wait on it, not in a loop.
                            if r? <= after && reader.metadata().state == LedgerState::Closed {
                                (&mut changed).await?;
                            }
                        }
                        r = &mut changed => { r?; }
                    }
                }
                _ => {
                    changed.await?;
                }
            }
        }
    }

    /// Moves the trim point of log `name` to `before` (never back, never
    /// past the fixed end); the ledgers wholly below it are deleted with
    /// the edit. Retried over concurrent edits (a rollover).
    pub async fn trim_log(&self, name: &str, before: u64) -> Result<LogMeta, ClientError> {
        loop {
            let meta = self.log_meta(name).await?;
            if before <= meta.record.trim_before {
                return Ok(meta);
            }
            let (record, _) = meta.record.trim(before).map_err(chain_error)?;
            let intended = LogMeta { record, ..meta.clone() };
            let req =
                v1::UpdateLogRequest { log: Some(intended.to_wire()), expected_version: meta.version, ledgers: vec![] };
            match self.meta().call(req).await {
                Ok(r) => return from_wire(r.log, name),
                Err(e) if is_conflict(&e) => continue,
                Err(e) => return Err(log_error(e, name)),
            }
        }
    }
}

/// How far the writer's appends are acknowledged, and whether it broke.
#[derive(Debug, Clone, Default)]
struct Progress {
    /// Every offset below this is acknowledged.
    committed: u64,
    /// Why the writer stopped taking appends.
    broken: Option<ClientError>,
}

/// Bytes of entries a log writer's buffer takes.
const ARENA_BYTES: usize = 64 * 1024;
/// Entries larger than this get an allocation of their own: a big record
/// would otherwise leave most of a buffer unused, or make one big.
const ARENA_ENTRY_MAX_BYTES: usize = ARENA_BYTES / 4;

/// A record's entry (its envelope: header, then payload): a slice of
/// `arena` (many entries share one buffer, freed once the last of them
/// is), or for a large entry an allocation of its own. A full arena is
/// replaced by a fresh buffer, never grown or reused in place, so a writer
/// holds at most one buffer of ARENA_BYTES however large its records were.
fn pack(arena: &mut BytesMut, header: Header<'_>, payload: &[u8]) -> Result<Bytes, envelope::EnvelopeError> {
    let (bytes, n) = envelope::header_bytes(header)?;
    let header_bytes = &bytes[..n];
    let len = n + payload.len();
    if len > ARENA_ENTRY_MAX_BYTES {
        return envelope::encode(header, payload).map(Bytes::from);
    }
    if arena.capacity() < len {
        *arena = BytesMut::with_capacity(ARENA_BYTES);
    }
    arena.extend_from_slice(header_bytes);
    arena.extend_from_slice(payload);
    Ok(arena.split().freeze())
}

struct State {
    /// The record as last stored.
    meta: LogMeta,
    /// The open segment's ledger.
    current: LedgerWriter,
    /// Its first offset.
    first_offset: u64,
    /// Appends given to it, and their payload bytes.
    entries: u64,
    bytes: u64,
    /// When its first append came.
    started: Option<Instant>,
    /// The next ledger, created ahead of its rollover.
    next: Option<tokio::task::JoinHandle<Result<LedgerWriter, ClientError>>>,
    /// Where records' entries are written, many to a buffer: an entry is a
    /// slice of it, so an append allocates nothing of its own (a buffer is
    /// freed once the last entry in it is).
    arena: BytesMut,
    /// The de-duplication table, with every append given so far.
    producers: Producers,
    /// The time given to the last record (or the log's floor before any):
    /// the next is never before it.
    time_ms: u64,
}

impl State {
    /// The time of the next batch (or record): the clock, or the last
    /// time given when the clock is behind it (a clock stepped back, or a
    /// takeover from a writer whose clock ran ahead): never decreasing.
    fn take_time(&mut self) -> u64 {
        let now_ms =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        self.time_ms = self.time_ms.max(now_ms);
        self.time_ms
    }
}

struct WriterInner {
    client: Client,
    name: String,
    state: tokio::sync::Mutex<State>,
    progress: watch::Sender<Progress>,
}

/// The writer of a log. Cheap to clone; appends are pipelined (their order
/// is fixed when [`LogWriter::append`] takes them).
///
/// LogFenced means a newer owner took the log over: no append made after
/// that lands in the log. An append in flight when the takeover began may
/// still be kept by its recovery (as with any write of unknown outcome):
/// retry it idempotently (a producer id and sequence) to learn its offset
/// rather than write it twice.
#[derive(Clone)]
pub struct LogWriter {
    inner: Arc<WriterInner>,
}

/// A record placed in a log and not yet acknowledged
/// ([`LogWriter::submit`]): resolves to its offset once acknowledged, or
/// to the error that stopped the writer (LogFenced after a takeover).
/// Dropped, the record may still be written (its outcome is unknown).
pub struct PendingAppend {
    pending: crate::PendingAdd,
    offset: u64,
    writer: LogWriter,
}

impl std::fmt::Debug for PendingAppend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingAppend").field("log", &self.writer.inner.name).field("offset", &self.offset).finish()
    }
}

impl PendingAppend {
    /// The offset the record has if it is acknowledged.
    pub fn offset(&self) -> u64 {
        self.offset
    }
}

impl std::future::Future for PendingAppend {
    type Output = Result<u64, ClientError>;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
        let got = std::task::ready!(std::pin::Pin::new(&mut self.pending).poll(cx));
        let offset = self.offset;
        std::task::Poll::Ready(match got {
            Ok(_) => {
                // Waking nobody costs a lock and a notification per
                // append: only a watcher (an idempotent retry waiting on
                // an append in flight) is woken. One that subscribes after
                // this check reads the value this sets when it first looks.
                let progress = &self.writer.inner.progress;
                progress.send_if_modified(|g| {
                    let before = g.committed;
                    g.committed = g.committed.max(offset + 1);
                    g.committed > before && progress.receiver_count() > 0
                });
                Ok(offset)
            }
            Err(e) => Err(self.writer.broke(e)),
        })
    }
}

enum Placed {
    Pending(crate::PendingAdd, u64),
    Duplicate(u64),
}

impl LogWriter {
    /// A writer of `meta`'s open segment (its ledger `current`), whose
    /// records' times start from `time_floor_ms` (the log's last record's).
    fn start(
        client: Client,
        meta: LogMeta,
        current: LedgerWriter,
        producers: Producers,
        time_floor_ms: u64,
    ) -> LogWriter {
        let first_offset = meta.record.open_segment().map_or(0, |s| s.first_offset);
        assert_eq!(
            meta.record.open_segment().map(|s| s.ledger_id),
            Some(current.ledger_id()),
            "a log writer writes the open segment's ledger"
        );
        let name = meta.record.name.clone();
        let next = Some(spawn_next(&client, &name, &meta.config));
        let state = State {
            meta,
            current,
            first_offset,
            entries: 0,
            bytes: 0,
            started: None,
            next,
            arena: BytesMut::new(),
            producers,
            time_ms: time_floor_ms,
        };
        let progress = watch::Sender::new(Progress { committed: first_offset, broken: None });
        LogWriter { inner: Arc::new(WriterInner { client, name, state: tokio::sync::Mutex::new(state), progress }) }
    }

    /// Whether `other` is a handle on this same writer.
    pub fn same(&self, other: &LogWriter) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The log's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The log's metadata as this writer last stored it.
    pub async fn metadata(&self) -> LogMeta {
        self.inner.state.lock().await.meta.clone()
    }

    /// Every offset below this is acknowledged.
    pub fn committed(&self) -> u64 {
        self.inner.progress.borrow().committed
    }

    /// Why this writer stopped taking appends, if it did (a newer owner:
    /// LogFenced; a failure of its ledger or of the metadata service).
    pub fn broken(&self) -> Option<ClientError> {
        self.inner.progress.borrow().broken.clone()
    }

    /// Appends one record; its offset once acknowledged.
    pub async fn append(&self, payload: Bytes) -> Result<u64, ClientError> {
        Ok(self.append_batch(vec![payload], None).await?[0])
    }

    /// Appends one record idempotently: a retry of `sequence` by
    /// `producer_id` that was written answers its first offset.
    pub async fn append_idempotent(
        &self,
        payload: Bytes,
        producer_id: &str,
        sequence: u64,
    ) -> Result<u64, ClientError> {
        Ok(self.append_batch(vec![payload], Some((producer_id, sequence))).await?[0])
    }

    /// Appends records in order (one after another in the log, unless some
    /// are retries already written); the offset of each. With a producer,
    /// record `i` carries sequence `sequence + i`. On an error, records of
    /// the batch before the failing one may have been written: a retry with
    /// the same producer and sequence answers their offsets.
    pub async fn append_batch(
        &self,
        payloads: Vec<Bytes>,
        producer: Option<(&str, u64)>,
    ) -> Result<Vec<u64>, ClientError> {
        self.append_batch_at(payloads, producer, None).await
    }

    /// Appends one record only if the log's next offset is
    /// `expected_offset` when the writer takes it (optimistic concurrency:
    /// "append only if the log ends here"); otherwise
    /// [`ClientError::PreconditionFailed`] with the next offset, and
    /// nothing is written.
    pub async fn append_at(&self, payload: Bytes, expected_offset: u64) -> Result<u64, ClientError> {
        Ok(self.append_batch_at(vec![payload], None, Some(expected_offset)).await?[0])
    }

    /// As [`LogWriter::append_batch`]; with `expected_offset`, the batch is
    /// written (its first record at that offset) only if the log's next
    /// offset is that when the writer takes it, else
    /// [`ClientError::PreconditionFailed`] and nothing is written. With a
    /// producer, a retry of a conditional append that was written answers
    /// its offsets (the producer is judged first), not a refusal.
    pub async fn append_batch_at(
        &self,
        payloads: Vec<Bytes>,
        producer: Option<(&str, u64)>,
        expected_offset: Option<u64>,
    ) -> Result<Vec<u64>, ClientError> {
        if payloads.is_empty() {
            return Err(ClientError::BadRequest("an empty batch".into()));
        }
        if let Some((p, first)) = producer {
            envelope::validate_producer_id(p).map_err(|e| ClientError::BadRequest(e.to_string()))?;
            // Record i carries first + i: refused whole, before anything is
            // placed, where the last would pass u64::MAX (never wrapped
            // round to sequence 0).
            if first.checked_add(payloads.len() as u64 - 1).is_none() {
                return Err(ClientError::BadRequest(format!(
                    "a batch of {} records from sequence {first} passes the largest sequence {}",
                    payloads.len(),
                    u64::MAX
                )));
            }
        }
        if payloads.len() > envelope::BATCH_RECORDS_MAX {
            return Err(ClientError::BadRequest(format!(
                "a batch holds at most {} records, not {}",
                envelope::BATCH_RECORDS_MAX,
                payloads.len()
            )));
        }
        let produced = producer.map(|(p, s)| Produced { producer_id: p, sequence: s });
        for p in &payloads {
            self.fits(p, produced)?;
        }
        let placed: Vec<Placed> = {
            let mut st = self.inner.state.lock().await;
            if let Some(e) = self.broken() {
                return Err(e);
            }
            if let Some(expected_offset) = expected_offset {
                // A retry of a conditional append that was written is
                // answered as a retry; anything else meets the condition.
                let retry = producer.is_some_and(|(p, s)| matches!(st.producers.judge(p, s), Seen::Duplicate { .. }));
                let next_offset = st.first_offset + st.entries;
                if !retry && next_offset != expected_offset {
                    return Err(ClientError::PreconditionFailed {
                        log: self.inner.name.clone(),
                        expected_offset,
                        next_offset,
                    });
                }
            }
            // Judged whole before any is placed: the records not yet
            // written are one batch, placed whole or not at all. Each
            // record's judgement: the offset of a duplicate, None if new.
            let mut judged = Vec::with_capacity(payloads.len());
            let mut fresh = Vec::with_capacity(payloads.len());
            for (i, payload) in payloads.into_iter().enumerate() {
                let produced = producer.map(|(p, s)| Produced { producer_id: p, sequence: s + i as u64 });
                if let Some(p) = produced {
                    match st.producers.judge(p.producer_id, p.sequence) {
                        Seen::New => {}
                        Seen::Duplicate { offset } => {
                            judged.push(Some(offset));
                            continue;
                        }
                        Seen::TooOld { last_sequence } => {
                            return Err(ClientError::SequenceTooOld {
                                producer_id: p.producer_id.to_string(),
                                sequence: p.sequence,
                                last_sequence,
                            })
                        }
                    }
                }
                judged.push(None);
                fresh.push((payload, produced));
            }
            let mut pendings = Vec::with_capacity(fresh.len());
            if !fresh.is_empty() {
                self.roll_if_due(&mut st).await?;
                let time_ms = st.take_time();
                let len = fresh.len() as u16;
                for (index, (payload, produced)) in fresh.into_iter().enumerate() {
                    let header = Header { produced, time_ms, batch: BatchPlace { index: index as u16, len } };
                    pendings.push(self.place(&mut st, &payload, header).await?);
                }
            }
            let mut pendings = pendings.into_iter();
            judged
                .into_iter()
                .map(|j| match j {
                    Some(offset) => Placed::Duplicate(offset),
                    None => {
                        let (pending, offset) = pendings.next().expect("one placed per new record");
                        Placed::Pending(pending, offset)
                    }
                })
                .collect()
        };
        // Acknowledgements are taken by a task of their own, so that the
        // writer's progress (which a retry of an append in flight waits
        // on) moves even when this caller stops waiting.
        let (tx, rx) = tokio::sync::oneshot::channel();
        let me = self.clone();
        tokio::spawn(async move {
            let mut offsets = Vec::with_capacity(placed.len());
            // The batch's end, made known once all of it is acknowledged:
            // a retry of one of its records (a duplicate, waiting on
            // `committed`) is answered only then, never while the batch
            // could still be cut.
            let mut batch_end = None;
            for p in placed {
                match p {
                    Placed::Pending(pending, offset) => match pending.await {
                        Ok(_) => {
                            batch_end = Some(offset + 1);
                            offsets.push(offset);
                        }
                        Err(e) => {
                            let _ = tx.send(Err(me.broke(e)));
                            return;
                        }
                    },
                    Placed::Duplicate(offset) => match me.committed_past(offset).await {
                        Ok(()) => offsets.push(offset),
                        Err(e) => {
                            let _ = tx.send(Err(e));
                            return;
                        }
                    },
                }
            }
            if let Some(end) = batch_end {
                me.inner.progress.send_modify(|g| g.committed = g.committed.max(end));
            }
            let _ = tx.send(Ok(offsets));
        });
        rx.await.unwrap_or_else(|_| Err(ClientError::LogFenced(self.inner.name.clone())))
    }

    /// Places one record in the log (rolling over first when due) and
    /// returns it in flight: await the [`PendingAppend`] for its offset
    /// once acknowledged. Records are placed in the order submitted, and
    /// acknowledged in that order; a caller keeps a window of them in
    /// flight from one task (as with [`LedgerWriter::submit`]) rather than
    /// a task per append. No producer: for idempotent appends use
    /// [`LogWriter::append_idempotent`].
    pub async fn submit(&self, payload: Bytes) -> Result<PendingAppend, ClientError> {
        self.fits(&payload, None)?;
        // Uncontended (one task submitting), the lock is taken without an
        // await: an await spends the task's cooperative budget, and a
        // submitter that yields sooner leaves fewer adds queued for the
        // ledger writer's next request to the bookies (measured: 30 copies
        // per request against a ledger's 43 at 4 x 100).
        let mut st = match self.inner.state.try_lock() {
            Ok(st) => st,
            Err(_) => self.inner.state.lock().await,
        };
        if let Some(e) = self.broken() {
            return Err(e);
        }
        self.roll_if_due(&mut st).await?;
        let time_ms = st.take_time();
        let (pending, offset) = self.place(&mut st, &payload, Header::alone(None, time_ms)).await?;
        Ok(PendingAppend { pending, offset, writer: self.clone() })
    }

    /// Whether `payload` with its header fits in an entry. The header
    /// counts against the entry limit; refused here, the writer goes on
    /// (the ledger writer's refusal would stop it).
    fn fits(&self, payload: &[u8], produced: Option<Produced<'_>>) -> Result<(), ClientError> {
        let len = payload.len() + envelope::header_len(produced);
        if len > self.inner.client.options().max_entry_bytes {
            return Err(ClientError::EntryTooLarge(len));
        }
        Ok(())
    }

    /// Rolls the log over when its segment is due: only between batches,
    /// so that a batch lies in one ledger.
    async fn roll_if_due(&self, st: &mut State) -> Result<(), ClientError> {
        let age_ms = st.started.map_or(0, |t| t.elapsed().as_millis() as u64);
        if st.meta.config.rollover.due(st.entries, st.bytes, age_ms) {
            // Boxed: the rollover's state (the next ledger, the close, the
            // log's record) would otherwise sit in every append's future,
            // moved with it on every submit.
            Box::pin(self.roll(st)).await?;
        }
        Ok(())
    }

    /// Gives one record its offset and its ledger's add: writes the
    /// envelope, counts it toward the rollover and (with a producer) the
    /// de-duplication table.
    async fn place(
        &self,
        st: &mut State,
        payload: &Bytes,
        header: Header<'_>,
    ) -> Result<(crate::PendingAdd, u64), ClientError> {
        let entry = pack(&mut st.arena, header, payload).expect("producer id and batch checked");
        let offset = st.first_offset + st.entries;
        let pending = match st.current.submit(entry).await {
            Ok(p) => p,
            Err(e) => return Err(self.broke(e)),
        };
        st.entries += 1;
        st.bytes += payload.len() as u64;
        st.started.get_or_insert_with(Instant::now);
        if let Some(p) = header.produced {
            st.producers.observe(p.producer_id, p.sequence, offset);
        }
        Ok((pending, offset))
    }

    /// Waits until `offset` is acknowledged (a retry of an append still in
    /// flight answers only once the first one is), or the writer broke.
    async fn committed_past(&self, offset: u64) -> Result<(), ClientError> {
        let mut rx = self.inner.progress.subscribe();
        let opts = self.inner.client.options();
        // An append in flight is answered within its timeouts and an
        // ensemble change's deadline; past both, say so rather than wait on.
        let bound = opts.add_timeout * 2 + opts.ensemble_change_deadline;
        let got = tokio::time::timeout(bound, rx.wait_for(|g| g.committed > offset || g.broken.is_some())).await;
        match got {
            Ok(Ok(g)) if g.committed > offset => Ok(()),
            Ok(Ok(g)) => Err(g.broken.clone().expect("broken")),
            Ok(Err(_)) => Err(ClientError::LogFenced(self.inner.name.clone())),
            Err(_) => {
                Err(ClientError::Timeout(format!("offset {offset} of log {} is not acknowledged", self.inner.name)))
            }
        }
    }

    /// The writer stops on its first failure: the error every later append
    /// gets (LogFenced when the ledger was fenced: a newer owner).
    fn broke(&self, e: ClientError) -> ClientError {
        let e = match e {
            ClientError::LedgerFenced(_) | ClientError::LedgerClosed(_) | ClientError::LogFenced(_) => {
                ClientError::LogFenced(self.inner.name.clone())
            }
            other => other,
        };
        self.inner.progress.send_modify(|g| {
            g.broken.get_or_insert_with(|| e.clone());
        });
        tracing::warn!(log = %self.inner.name, error = %e, "log writer stopped");
        e
    }

    /// Rolls the log over to its next ledger (made ahead; made now if that
    /// failed), sealing the current one in the same metadata command.
    async fn roll(&self, st: &mut State) -> Result<(), ClientError> {
        let next = match st.next.take() {
            Some(h) => {
                h.await.unwrap_or_else(|e| Err(ClientError::BadRequest(format!("ledger creation panicked: {e}"))))
            }
            None => self.inner.client.create_log_ledger(&self.inner.name, &st.meta.config).await,
        };
        let next = match next {
            Ok(n) => n,
            Err(e) => {
                // Try again at the next append; this one goes to the current ledger.
                tracing::warn!(log = %self.inner.name, error = %e, "could not create the next ledger");
                return Ok(());
            }
        };
        let stored: Arc<Mutex<Option<LogMeta>>> = Arc::new(Mutex::new(None));
        let closer = roll_closer(
            self.inner.client.clone(),
            st.meta.clone(),
            next.ledger_id(),
            st.producers.clone(),
            st.entries,
            stored.clone(),
        );
        // (On failure the next ledger is not deleted: of unknown outcome,
        // the log may list it.)
        let closed = st.current.close_with(closer).await.map_err(|e| self.broke(e))?;
        let meta = stored.lock().expect("stored lock").take().expect("the closer stored the log");
        let open = meta.record.open_segment().cloned().expect("a rolled log has an open segment");
        if open.ledger_id != next.ledger_id() {
            return Err(self.broke(ClientError::LogFenced(self.inner.name.clone())));
        }
        let sealed = (closed.last_entry_id + 1) as u64;
        st.meta = meta;
        if sealed != st.entries {
            // Appends given to the old ledger that it did not take (it
            // failed under them): they are not in the log, and what this
            // writer counted past them would be misplaced. Stop here.
            let e = ClientError::LedgerClosed(closed.ledger_id);
            tracing::warn!(log = %self.inner.name, sealed, given = st.entries, "the rolled ledger took fewer appends than given");
            return Err(self.broke(e));
        }
        tracing::info!(log = %self.inner.name, closed = closed.ledger_id, next = next.ledger_id(), entries = st.entries, "rolled the log over");
        st.first_offset = open.first_offset;
        st.producers = st.meta.producers.clone();
        self.inner.progress.send_modify(|g| g.committed = g.committed.max(open.first_offset));
        st.current = next;
        st.entries = 0;
        st.bytes = 0;
        st.started = None;
        st.next = Some(spawn_next(&self.inner.client, &self.inner.name, &st.meta.config));
        Ok(())
    }
}

fn spawn_next(
    client: &Client,
    name: &str,
    config: &LogConfig,
) -> tokio::task::JoinHandle<Result<LedgerWriter, ClientError>> {
    let (client, name, config) = (client.clone(), name.to_string(), *config);
    tokio::spawn(async move { client.create_log_ledger(&name, &config).await })
}

/// The close of a rolled ledger, written with the log's next record in one
/// UpdateLog (the producer table as of the seal stored with it). A refusal
/// or an unknown outcome is settled by what is stored: the next ledger
/// listed at this epoch is this rollover having landed; a newer epoch or a
/// ledger no longer open (recovered by a newer owner) is LogFenced; another
/// edit of the same epoch (a trim) is built on and tried again.
fn roll_closer(
    client: Client,
    mut log: LogMeta,
    next_ledger: u64,
    mut producers: Producers,
    given_entries: u64,
    stored: Arc<Mutex<Option<LogMeta>>>,
) -> Closer {
    Box::new(move |mut current: LedgerMeta, intended: LedgerMeta| {
        Box::pin(async move {
            let name = log.record.name.clone();
            let epoch = log.record.epoch;
            // What the writer gave it: whole batches (it rolls between them).
            if i128::from(intended.last_entry_id) + 1 != i128::from(given_entries) {
                // The ledger failed under appends given to it: it may end
                // within a batch. Neither sealed nor closed here: a
                // takeover's recovery ends the log at its last whole batch.
                tracing::warn!(
                    log = %name,
                    ledger_id = current.ledger_id,
                    took = intended.last_entry_id + 1,
                    given = given_entries,
                    "the rolled ledger took fewer appends than given"
                );
                return Err(ClientError::LedgerClosed(current.ledger_id));
            }
            let first = log.record.open_segment().map_or(0, |s| s.first_offset);
            let sealed_end = first + (intended.last_entry_id + 1) as u64;
            // Only what the ledger took: appends past its end are not in the log.
            producers.forget_from(sealed_end);
            producers.cover(sealed_end);
            loop {
                let record = log.record.roll(epoch, intended.last_entry_id, next_ledger).map_err(chain_error)?;
                let mut closed = intended.clone();
                closed.version = current.version;
                closed.segments = current.segments.clone();
                let next = LogMeta { record, producers: producers.clone(), ..log.clone() };
                let req = v1::UpdateLogRequest {
                    log: Some(next.to_wire()),
                    expected_version: log.version,
                    ledgers: vec![v1::UpdateLedgerRequest {
                        ledger: Some(closed.to_proto()),
                        expected_version: current.version,
                    }],
                };
                let e = match client.meta().call(req).await {
                    Ok(r) => {
                        let meta = from_wire(r.log, &name)?;
                        let ledger = r.ledgers.into_iter().next().ok_or_else(|| {
                            ClientError::MetadataUnavailable("a rollover answered without its ledger".into())
                        })?;
                        *stored.lock().expect("stored lock") = Some(meta);
                        return Ok(LedgerMeta::from_proto(ledger)?);
                    }
                    Err(e) => e,
                };
                if !refused(&e) || is_conflict(&e) {
                    let fresh = client.log_meta(&name).await?;
                    let ledger = client.metadata(current.ledger_id).await?;
                    let landed = fresh.record.epoch == epoch
                        && fresh.record.open_segment().map(|s| s.ledger_id) == Some(next_ledger);
                    if landed {
                        *stored.lock().expect("stored lock") = Some(fresh);
                        return Ok(ledger);
                    }
                    if fresh.record.epoch != epoch || ledger.state != LedgerState::Open {
                        return Err(ClientError::LogFenced(name));
                    }
                    log = fresh;
                    current = ledger;
                    continue;
                }
                return Err(log_error(e, &name));
            }
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Entries packed into shared buffers keep their bytes whatever comes
    /// after them: across buffer boundaries, beside large entries, with
    /// earlier entries dropped (so a buffer could be reused); and the
    /// writer's buffer never grows past ARENA_BYTES.
    #[test]
    fn packed_entries_keep_their_bytes_and_the_buffer_stays_bounded() {
        let mut arena = BytesMut::new();
        let mut kept = Vec::new();
        let sizes = [0usize, 1, 1000, 4000, ARENA_ENTRY_MAX_BYTES - 2, ARENA_ENTRY_MAX_BYTES, 100_000, 3, 70_000, 1024];
        // (ARENA_ENTRY_MAX_BYTES - 2: in the buffer with no producer's header,
        // on its own with one.)
        let ids: Vec<String> = (0..7).map(|k| "p".repeat(1 + k * 10)).collect();
        // Every other record idempotent, with producer ids of 1 to 61 bytes.
        let produced =
            |i: usize| (i % 2 == 1).then(|| Produced { producer_id: ids[i % ids.len()].as_str(), sequence: i as u64 });
        for i in 0..2000usize {
            let len = sizes[i % sizes.len()];
            let payload: Vec<u8> = (0..len).map(|j| (i.wrapping_mul(31) + j) as u8).collect();
            let entry = pack(&mut arena, Header::alone(produced(i), i as u64), &payload).unwrap();
            let header = envelope::header_len(produced(i));
            assert_eq!(&entry[..header], &envelope::encode(Header::alone(produced(i), i as u64), b"").unwrap()[..]);
            assert_eq!(&entry[header..], &payload[..]);
            assert!(arena.capacity() <= ARENA_BYTES, "the writer's buffer stays bounded");
            // Keep every third entry, drop the rest at once.
            if i % 3 == 0 {
                kept.push((entry, i, payload));
            }
        }
        for (entry, i, payload) in &kept {
            let header = envelope::header_len(produced(*i));
            assert_eq!(&entry[..header], &envelope::encode(Header::alone(produced(*i), *i as u64), b"").unwrap()[..]);
            assert_eq!(&entry[header..], &payload[..], "an entry kept its bytes");
        }
    }
}
