//! Durable named cursors of a log (issue #23 item 6), kept in the metadata
//! service: where a reader stands, acknowledged forward by CAS, sought
//! anywhere the log holds, optionally holding the log's retention.
//!
//! Each acknowledgement written is one metadata command (a Raft round and
//! its fsync, shared with whatever else the leader batches with it). A
//! [`LogCursor`] bounds that: acknowledgements are kept in memory and
//! written at most once per `min_interval` (and by [`LogCursor::flush`]);
//! a reader that stops between writes reads again from the last written
//! position, so delivery is at least once.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use quire_log::Cursor;
use quire_proto::v1::{self, ErrorCode};

use crate::meta::LedgerState;
use crate::shell::client::Client;
use crate::shell::error::ClientError;
use crate::shell::log::LogEntry;

/// Longest a cursor position past the committed end waits for the end to
/// reach it (the LAC trails the writer's acknowledgements by about the
/// explicit-LAC interval, 100 ms by default) before it is refused.
pub const END_WAIT: Duration = Duration::from_secs(2);

/// Where a new cursor starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CursorStart {
    /// The log's first record held (its trim point).
    Start,
    /// One past the last record committed now: only what comes next.
    End,
    /// This offset.
    At(u64),
}

fn cursor_error(e: quire_rpc::RpcError, log: &str, name: &str) -> ClientError {
    match e.code() {
        Some(ErrorCode::NoSuchLog) => ClientError::NoSuchLog(log.to_string()),
        Some(ErrorCode::NotFound) => ClientError::NoSuchCursor { log: log.to_string(), cursor: name.to_string() },
        _ => ClientError::from_metadata(e, None),
    }
}

impl Client {
    /// The log's cursors, as the metadata leader has them.
    pub async fn cursors(&self, log: &str) -> Result<Vec<Cursor>, ClientError> {
        let r = self
            .meta()
            .call(v1::GetLogRequest { name: log.to_string(), stale_ok: false })
            .await
            .map_err(|e| cursor_error(e, log, ""))?;
        Ok(r.log.map(|l| l.cursors.iter().map(Cursor::from_wire).collect()).unwrap_or_default())
    }

    /// One cursor, as the metadata leader has it (without the log's record).
    pub async fn cursor(&self, log: &str, name: &str) -> Result<Cursor, ClientError> {
        let req = v1::GetCursorRequest { log: log.to_string(), name: name.to_string(), stale_ok: false };
        let r = self.meta().call(req).await.map_err(|e| cursor_error(e, log, name))?;
        r.cursor
            .map(|c| Cursor::from_wire(&c))
            .ok_or_else(|| ClientError::NoSuchCursor { log: log.to_string(), cursor: name.to_string() })
    }

    /// One past the last record of `log` committed now: the fixed end, or
    /// the open segment's first offset past its LAC.
    pub async fn log_end(&self, log: &str) -> Result<u64, ClientError> {
        self.log_end_reaching(log, 0, Duration::ZERO).await
    }

    /// [`Client::log_end`], waiting up to `wait` for it to reach `want`
    /// (the open ledger's LAC passing it, or a rollover); the end then.
    async fn log_end_reaching(&self, log: &str, want: u64, wait: Duration) -> Result<u64, ClientError> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let meta = self.log_meta(log).await?;
            let Some(s) = meta.record.open_segment() else { return Ok(meta.record.fixed_end()) };
            let reader = self.open(s.ledger_id).await?;
            // The end is after the last whole batch under the LAC (a batch
            // is answered, and read, whole: docs/logs.md).
            let lac = reader.read_lac_fresh().await?;
            let end = s.first_offset + self.whole_batches(&reader, lac).await?.0;
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if end >= want || left.is_zero() {
                return Ok(end);
            }
            // A closed ledger takes nothing more (its end within a batch
            // a takeover cuts): the end stays where it is until the log's
            // record moves.
            if reader.wait_lac(lac, left).await? <= lac && reader.metadata().state == LedgerState::Closed {
                return Ok(end);
            }
        }
    }

    async fn put_cursor(&self, c: &Cursor, expected_version: u64, seek: bool) -> Result<Cursor, quire_rpc::RpcError> {
        let req = v1::PutCursorRequest { cursor: Some(c.to_wire()), expected_version, seek };
        let r = self.meta().call(req).await?;
        r.cursor.map(|c| Cursor::from_wire(&c)).ok_or_else(|| quire_rpc::RpcError::Protocol {
            peer: "metadata".into(),
            detail: "a cursor answer without its cursor".into(),
        })
    }

    /// Creates cursor `name` of `log` at `start`; with `holds_retention`
    /// the log is not trimmed past it.
    pub async fn create_cursor(
        &self,
        log: &str,
        name: &str,
        start: CursorStart,
        holds_retention: bool,
    ) -> Result<Cursor, ClientError> {
        let position = match start {
            CursorStart::Start => self.log_meta(log).await?.record.trim_before,
            CursorStart::End => self.log_end(log).await?,
            CursorStart::At(o) => self.within_end(log, name, o).await?,
        };
        let c = Cursor {
            log: log.to_string(),
            name: name.to_string(),
            position,
            holds_retention,
            version: 0,
            updated_at_ms: 0,
        };
        match self.put_cursor(&c, 0, true).await {
            Ok(c) => Ok(c),
            Err(e) if e.code() == Some(ErrorCode::VersionConflict) => {
                Err(ClientError::BadRequest(format!("cursor {name} of log {log} exists")))
            }
            Err(e) => Err(cursor_error(e, log, name)),
        }
    }

    /// Moves cursor `name` to `position`: `seek` anywhere the log holds,
    /// otherwise an acknowledgement (never back: a position at or below
    /// the stored one answers the stored cursor). Retried over concurrent
    /// moves, by CAS.
    /// A position past the log's committed end is refused: a cursor there
    /// would skip records not yet written, and hold retention for nothing.
    pub async fn move_cursor(&self, log: &str, name: &str, position: u64, seek: bool) -> Result<Cursor, ClientError> {
        let mut checked = false;
        loop {
            let stored = self.cursor(log, name).await?;
            if !seek && position <= stored.position {
                return Ok(stored);
            }
            if !checked {
                self.within_end(log, name, position).await?;
                checked = true;
            }
            let next = Cursor { position, ..stored.clone() };
            match self.put_cursor(&next, stored.version, seek).await {
                Ok(c) => return Ok(c),
                Err(e) if e.code() == Some(ErrorCode::VersionConflict) => continue,
                Err(e) => return Err(cursor_error(e, log, name)),
            }
        }
    }

    /// `position` if it is at or below the log's committed end (one past
    /// its last committed record), else why not. The end only grows, so a
    /// position found within it stays within it. The LAC that readers see
    /// trails what the writer was acknowledged by up to its explicit-LAC
    /// interval, so a position past it waits up to [`END_WAIT`] for the LAC
    /// (or a rollover) to reach it before it is refused: an offset just
    /// acknowledged to a writer is a position a cursor may take.
    async fn within_end(&self, log: &str, name: &str, position: u64) -> Result<u64, ClientError> {
        let end = self.log_end_reaching(log, position, END_WAIT).await?;
        if position > end {
            return Err(ClientError::BadRequest(format!(
                "cursor {name} of log {log}: {position} is past the log's end ({end})"
            )));
        }
        Ok(position)
    }

    /// Deletes a cursor.
    pub async fn delete_cursor(&self, log: &str, name: &str) -> Result<(), ClientError> {
        self.meta()
            .call(v1::DeleteCursorRequest { log: log.to_string(), name: name.to_string() })
            .await
            .map_err(|e| cursor_error(e, log, name))?;
        Ok(())
    }
}

/// A reader of a log at a durable cursor, its acknowledgements batched.
pub struct LogCursor {
    client: Client,
    log: String,
    name: String,
    min_interval: Duration,
    state: Mutex<Acks>,
    /// One write at a time: a second concurrent flush would meet the
    /// first's own write as a conflict and take it for someone else's.
    flushing: tokio::sync::Mutex<()>,
}

struct Acks {
    /// Where the next read starts (past what was read, acknowledged or not).
    read_at: u64,
    /// Acknowledged in memory.
    acked: u64,
    /// Written to the metadata service.
    written: u64,
    last_write: Option<Instant>,
    /// The cursor as this reader last read or wrote it: a write is a CAS
    /// on its version, so a seek or another reader's move in between is
    /// never overwritten.
    stored: Cursor,
}

impl LogCursor {
    /// Opens cursor `name` of `log` (it must exist), writing
    /// acknowledgements at most once per `min_interval`.
    pub async fn open(
        client: &Client,
        log: &str,
        name: &str,
        min_interval: Duration,
    ) -> Result<LogCursor, ClientError> {
        let c = client.cursor(log, name).await?;
        Ok(LogCursor {
            client: client.clone(),
            log: log.to_string(),
            name: name.to_string(),
            min_interval,
            state: Mutex::new(Acks {
                read_at: c.position,
                acked: c.position,
                written: c.position,
                last_write: None,
                stored: c,
            }),
            flushing: tokio::sync::Mutex::new(()),
        })
    }

    /// The next records past what this cursor read, waiting up to `wait`
    /// for one.
    pub async fn next(&self, max: usize, wait: Duration) -> Result<Vec<LogEntry>, ClientError> {
        let from = self.state.lock().expect("acks lock").read_at;
        let got = self.client.read_log_wait(&self.log, from, max, wait).await?;
        if let Some(last) = got.last() {
            let mut st = self.state.lock().expect("acks lock");
            st.read_at = st.read_at.max(last.offset + 1);
        }
        Ok(got)
    }

    /// Acknowledges every record below `position` (never past what this
    /// reader read); written now if the last write is `min_interval` old,
    /// else at a later ack or [`LogCursor::flush`].
    pub async fn ack(&self, position: u64) -> Result<(), ClientError> {
        let due = {
            let mut st = self.state.lock().expect("acks lock");
            if position > st.read_at {
                return Err(ClientError::BadRequest(format!(
                    "cursor {} of log {}: an ack at {position} is past what was read ({})",
                    self.name, self.log, st.read_at
                )));
            }
            st.acked = st.acked.max(position);
            st.acked > st.written && st.last_write.is_none_or(|t| t.elapsed() >= self.min_interval)
        };
        if due {
            self.flush().await?;
        }
        Ok(())
    }

    /// Writes the acknowledged position now (if it moved), by CAS on the
    /// version this reader last saw. When someone else moved the cursor
    /// since (a seek back to read again, another reader), their move
    /// stands: this reader adopts it, reads on from there, and the cursor
    /// it returns says where that is.
    pub async fn flush(&self) -> Result<Cursor, ClientError> {
        let _one = self.flushing.lock().await;
        let (acked, stored) = {
            let st = self.state.lock().expect("acks lock");
            (st.acked, st.stored.clone())
        };
        if acked <= stored.position {
            return Ok(stored);
        }
        let next = Cursor { position: acked, ..stored.clone() };
        let c = match self.client.put_cursor(&next, stored.version, false).await {
            Ok(c) => c,
            Err(e) if e.code() == Some(ErrorCode::VersionConflict) => {
                let now = self.client.cursor(&self.log, &self.name).await?;
                tracing::info!(
                    log = %self.log,
                    cursor = %self.name,
                    position = now.position,
                    "the cursor was moved by someone else; reading on from there"
                );
                let mut st = self.state.lock().expect("acks lock");
                st.read_at = now.position;
                st.acked = now.position;
                st.written = now.position;
                st.stored = now.clone();
                return Ok(now);
            }
            Err(e) => return Err(cursor_error(e, &self.log, &self.name)),
        };
        let mut st = self.state.lock().expect("acks lock");
        st.written = st.written.max(c.position);
        st.last_write = Some(Instant::now());
        st.stored = c.clone();
        Ok(c)
    }

    /// Where the next read starts.
    pub fn read_at(&self) -> u64 {
        self.state.lock().expect("acks lock").read_at
    }

    /// The position acknowledged (in memory).
    pub fn acked(&self) -> u64 {
        self.state.lock().expect("acks lock").acked
    }
}
