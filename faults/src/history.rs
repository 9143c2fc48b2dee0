//! What clients did and what they were told, one [`Event`] per completed
//! operation, written as JSON lines so that a run's history outlives the
//! run and can be checked again.
//!
//! Times are microseconds on one clock shared by every client of a run (the
//! harness's monotonic clock), passed in by the caller.

use std::io::{BufRead, Write};
use std::path::Path;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// What the client learned about its operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Acknowledged: the system says it happened.
    Ok,
    /// Refused: the system says it did not happen (a fenced or closed ledger,
    /// a bad request). For an add this still may have reached a bookie, so
    /// the checker holds nothing against it either way.
    Fail,
    /// No answer (a timeout, a lost connection): it may or may not have happened.
    Unknown,
}

/// One operation. Entry bytes are recorded as a digest (the writer's choice
/// of hash of the payload): what is compared is equality, not content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// A ledger's creation: its id once created (None when the creation
    /// failed or its outcome is unknown).
    Create { ledger: Option<u64> },
    /// An add through writer handle `handle`; `entry` is the id the writer
    /// gave it, known once acknowledged.
    Add { ledger: u64, handle: u64, entry: Option<u64>, digest: u64 },
    /// A reader's read of one entry: the digest of what came back, or None
    /// when the answer was "no such entry"; and the LAC the reader held
    /// once answered (it refreshes its LAC before it reads past it).
    Read {
        ledger: u64,
        entry: u64,
        digest: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lac: Option<i64>,
    },
    /// Fence, recover and close: the ledger's last entry afterwards (-1:
    /// empty), and the time by which this recovery's fence had taken hold
    /// (None: it fenced nothing, or the recoverer could not say; the
    /// completion then stands in, which is later and so weaker).
    Recover {
        ledger: u64,
        last_entry: i64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fenced_us: Option<u64>,
    },
    /// The ledger was seen closed in the metadata (by whoever closed it:
    /// its writer, a recoverer, a replication worker), at or before
    /// `completed_us`, at `last_entry`.
    Closed { ledger: u64, last_entry: i64 },
    /// After the faults healed: the whole recovered ledger, read back in
    /// order, as (entry, digest).
    Final { ledger: u64, last_entry: i64, entries: Vec<(u64, u64)> },
    /// After the faults healed: entries of the ledger with fewer than
    /// `write_quorum` good copies on their ensemble, as (entry, copies).
    Replicas { ledger: u64, write_quorum: u32, short: Vec<(u64, u32)> },
    /// A takeover of log `log` (opened for writing): the owner epoch it got
    /// once it landed.
    LogOpen { log: String, epoch: Option<u64> },
    /// An idempotent append to `log` by the writer of owner epoch `epoch`:
    /// the offset it was given once acknowledged. A retry of one record
    /// (the same producer and sequence) is another event with the same digest.
    LogAppend {
        log: String,
        epoch: u64,
        offset: Option<u64>,
        digest: u64,
        /// A conditional append's expected offset (issue #47): acknowledged,
        /// it is there.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expected: Option<u64>,
        /// The record's place in an atomic batch (issue #47): one event
        /// per record, all with the batch's outcome.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        batch: Option<BatchOf>,
    },
    /// A read of `log` from offset `from` (a cursor's position), of at
    /// most `limit` records (0: unknown): what came back, as (offset,
    /// digest) in the order read. Fewer than `limit` means it stopped at
    /// the log's end as it read it.
    LogRead {
        log: String,
        from: u64,
        #[serde(default)]
        limit: usize,
        records: Vec<(u64, u64)>,
        /// Each record's time (issue #47), in the order read.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        times: Vec<u64>,
    },
    /// A trim of `log` below `before`.
    LogTrim { log: String, before: u64 },
    /// After the faults healed and a last takeover fenced every writer:
    /// the whole log from its trim point, as (offset, digest).
    LogFinal {
        log: String,
        trim_before: u64,
        records: Vec<(u64, u64)>,
        /// Each record's time (issue #47), in the order read.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        times: Vec<u64>,
    },
}

/// A record's place in the atomic batch it was appended with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchOf {
    /// The batch (the digest of its first record).
    pub id: u64,
    /// The record's index in it, from 0.
    pub index: u32,
    /// The batch's records.
    pub len: u32,
}

impl Op {
    /// The ledger the operation is about (none for a failed creation).
    pub fn ledger(&self) -> Option<u64> {
        match self {
            Op::Create { ledger } => *ledger,
            Op::Add { ledger, .. }
            | Op::Read { ledger, .. }
            | Op::Recover { ledger, .. }
            | Op::Closed { ledger, .. }
            | Op::Final { ledger, .. }
            | Op::Replicas { ledger, .. } => Some(*ledger),
            // A log's records span ledgers: they are judged per log.
            Op::LogOpen { .. }
            | Op::LogAppend { .. }
            | Op::LogRead { .. }
            | Op::LogTrim { .. }
            | Op::LogFinal { .. } => None,
        }
    }
}

/// One completed operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// The client (writer, reader, recoverer) that ran it.
    pub process: u32,
    pub invoked_us: u64,
    pub completed_us: u64,
    pub outcome: Outcome,
    #[serde(flatten)]
    pub op: Op,
    /// The error the client saw, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("history file {path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("history file {path}, line {line}: {source}")]
    Parse { path: String, line: usize, source: serde_json::Error },
    #[error("event completes before it is invoked: {0:?}")]
    TimeTravel(Box<Event>),
}

/// An append-only history shared by a run's clients: kept in memory and,
/// when opened on a file, written through as JSON lines (a run killed
/// half-way still leaves what it recorded).
pub struct History {
    events: Mutex<Vec<Event>>,
    file: Option<Mutex<std::io::BufWriter<std::fs::File>>>,
}

impl History {
    /// A history in memory only.
    pub fn in_memory() -> History {
        History { events: Mutex::new(Vec::new()), file: None }
    }

    /// A history also written to `path` (truncated).
    pub fn create(path: &Path) -> Result<History, HistoryError> {
        let f = std::fs::File::create(path)
            .map_err(|e| HistoryError::Io { path: path.display().to_string(), source: e })?;
        Ok(History { events: Mutex::new(Vec::new()), file: Some(Mutex::new(std::io::BufWriter::new(f))) })
    }

    /// Records a completed operation.
    pub fn record(&self, e: Event) -> Result<(), HistoryError> {
        if e.completed_us < e.invoked_us {
            return Err(HistoryError::TimeTravel(Box::new(e)));
        }
        if let Some(f) = &self.file {
            let mut f = f.lock().expect("history file lock");
            let line = serde_json::to_string(&e).expect("events serialise");
            writeln!(f, "{line}")
                .and_then(|_| f.flush())
                .map_err(|err| HistoryError::Io { path: "history".into(), source: err })?;
        }
        self.events.lock().expect("history lock").push(e);
        Ok(())
    }

    /// Every event so far, in the order they were recorded.
    pub fn events(&self) -> Vec<Event> {
        self.events.lock().expect("history lock").clone()
    }

    /// Reads a history written by [`History::create`].
    pub fn load(path: &Path) -> Result<Vec<Event>, HistoryError> {
        let p = path.display().to_string();
        let f = std::fs::File::open(path).map_err(|e| HistoryError::Io { path: p.clone(), source: e })?;
        let mut out = Vec::new();
        for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
            let line = line.map_err(|e| HistoryError::Io { path: p.clone(), source: e })?;
            if line.trim().is_empty() {
                continue;
            }
            out.push(serde_json::from_str(&line).map_err(|e| HistoryError::Parse {
                path: p.clone(),
                line: i + 1,
                source: e,
            })?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add(entry: u64) -> Event {
        Event {
            process: 1,
            invoked_us: 10,
            completed_us: 20,
            outcome: Outcome::Ok,
            op: Op::Add { ledger: 7, handle: 1, entry: Some(entry), digest: 99 },
            error: None,
        }
    }

    #[test]
    fn a_history_file_reads_back_as_written() {
        let dir = std::env::temp_dir().join(format!("quire-history-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("h.jsonl");
        let h = History::create(&path).unwrap();
        h.record(add(0)).unwrap();
        let mut e = add(1);
        e.outcome = Outcome::Unknown;
        e.error = Some("timed out".into());
        h.record(e).unwrap();
        h.record(Event { op: Op::Final { ledger: 7, last_entry: 0, entries: vec![(0, 99)] }, ..add(0) }).unwrap();
        assert_eq!(History::load(&path).unwrap(), h.events());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_event_that_completes_before_it_starts_is_refused() {
        let h = History::in_memory();
        let mut e = add(0);
        e.completed_us = 5;
        assert!(matches!(h.record(e), Err(HistoryError::TimeTravel(_))));
        assert!(h.events().is_empty());
    }

    #[test]
    fn a_damaged_line_names_its_line() {
        let dir = std::env::temp_dir().join(format!("quire-history-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("h.jsonl");
        std::fs::write(&path, format!("{}\n{{\"op\":\"add\"\n", serde_json::to_string(&add(0)).unwrap())).unwrap();
        match History::load(&path) {
            Err(HistoryError::Parse { line, .. }) => assert_eq!(line, 2),
            other => panic!("{other:?}"),
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
