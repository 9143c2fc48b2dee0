//! What the client library's operations fail with.

use quire_proto::v1::ErrorCode;
use quire_rpc::RpcError;

use crate::meta::InvalidMetadata;
use crate::recovery::RecoveryError;

/// A failed ledger operation. Each variant says what the caller can do.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClientError {
    /// The metadata service has no such ledger.
    #[error("no such ledger {0}")]
    NoSuchLedger(u64),
    /// The entry does not exist (or is past the LAC: readers never see it).
    #[error("no entry {1} in ledger {0}")]
    NoSuchEntry(u64, u64),
    /// The ledger was fenced by recovery (or closed by another party): this
    /// writer is done, and its pending adds were not acknowledged.
    #[error("ledger {0} is fenced: another party recovered or closed it")]
    LedgerFenced(u64),
    /// The ledger is closed: it takes no more adds.
    #[error("ledger {0} is closed")]
    LedgerClosed(u64),
    /// Not enough writable bookies for the ensemble or a replacement.
    #[error("not enough bookies: {0}")]
    NotEnoughBookies(String),
    /// The metadata service could not be reached or had no quorum.
    #[error("metadata service unavailable: {0}")]
    MetadataUnavailable(String),
    /// The operation did not finish in time; its outcome may be unknown.
    #[error("timed out: {0}")]
    Timeout(String),
    /// The request is invalid (quorums, sizes, ranges).
    #[error("bad request: {0}")]
    BadRequest(String),
    /// The entry is larger than the bookies accept.
    #[error("entry of {0} bytes is too large")]
    EntryTooLarge(usize),
    /// Too many adds are pending on this writer.
    #[error("{0} adds pending; retry when some are acknowledged")]
    Backpressure(usize),
    /// Recovery could not finish; the ledger is left in recovery, untouched,
    /// and recovering again later (with more bookies up) may succeed.
    #[error("recovery of ledger {0} failed: {1}")]
    RecoveryFailed(u64, RecoveryError),
    /// Every copy of an entry that answered failed its checksum.
    #[error("entry {1} of ledger {0}: every copy that answered is corrupt")]
    Corrupt(u64, u64),
    /// The stored metadata is unusable.
    #[error(transparent)]
    InvalidMetadata(#[from] InvalidMetadata),
    /// This caller may not do that: the ledger is another identity's (it may
    /// still be recovered), or the role lacks the right.
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    /// The writer handle was closed or dropped.
    #[error("the writer of ledger {0} is closed")]
    WriterClosed(u64),
    /// No log of that name.
    #[error("no such log {0}")]
    NoSuchLog(String),
    /// The log has no cursor of that name.
    #[error("log {log} has no cursor {cursor}")]
    NoSuchCursor {
        /// The log.
        log: String,
        /// The cursor.
        cursor: String,
    },
    /// A log of that name exists already.
    #[error("log {0} exists")]
    LogExists(String),
    /// A newer owner took the log over: this writer is done, and its
    /// appends not yet answered were not acknowledged.
    #[error("log {0} is fenced: another writer took it over")]
    LogFenced(String),
    /// The offset asked for is below the log's trim point.
    #[error("offset {offset} of log {log} is trimmed (the log starts at {trim_before})")]
    Trimmed {
        /// The log.
        log: String,
        /// The offset asked for.
        offset: u64,
        /// The trim point: the first offset still held.
        trim_before: u64,
    },
    /// An idempotent append's sequence number is at or below the
    /// producer's last and older than the de-duplication window: whether it
    /// was written is not known, so it is not written again.
    #[error(
        "producer {producer_id}: sequence {sequence} is at or below its last ({last_sequence}) and too old to tell"
    )]
    SequenceTooOld {
        /// The producer.
        producer_id: String,
        /// The sequence number asked for.
        sequence: u64,
        /// The producer's highest sequence number.
        last_sequence: u64,
    },
    /// A conditional append (`expected_offset`) met a log whose next
    /// offset is another: nothing was written (issue #47).
    #[error("log {log}: the next offset is {next_offset}, not {expected_offset}; nothing was written")]
    PreconditionFailed {
        /// The log.
        log: String,
        /// The offset the append expected to be written at.
        expected_offset: u64,
        /// The offset the next record gets.
        next_offset: u64,
    },
    /// The ledger is one of a log's records' ledgers: it goes with a trim
    /// of the log or the log's deletion, never alone.
    #[error("{1}")]
    LedgerInLog(u64, String),
    /// Any other RPC failure.
    #[error(transparent)]
    Rpc(RpcError),
}

impl ClientError {
    /// Maps a metadata call's failure.
    pub fn from_metadata(e: RpcError, ledger_id: Option<u64>) -> ClientError {
        match (e.code(), ledger_id) {
            (Some(ErrorCode::NoSuchLedger | ErrorCode::NotFound), Some(l)) => ClientError::NoSuchLedger(l),
            // The metadata service's words alone: which replica said them
            // is no help to the caller.
            (Some(ErrorCode::BadRequest), _) => ClientError::BadRequest(e.answer()),
            (Some(ErrorCode::PermissionDenied), _) => ClientError::PermissionDenied(e.answer()),
            (Some(ErrorCode::LedgerInLog), Some(l)) => ClientError::LedgerInLog(l, e.answer()),
            (Some(ErrorCode::MetadataUnavailable | ErrorCode::NotLeader | ErrorCode::ShuttingDown), _) => {
                ClientError::MetadataUnavailable(e.to_string())
            }
            (None, _) if matches!(e, RpcError::Timeout { .. }) => ClientError::MetadataUnavailable(e.to_string()),
            (None, _) if matches!(e, RpcError::Unavailable { .. } | RpcError::ConnectionLost { .. }) => {
                ClientError::MetadataUnavailable(e.to_string())
            }
            _ => ClientError::Rpc(e),
        }
    }

    /// The HTTP API's name for the error (BRIEF.md).
    pub fn code_name(&self) -> &'static str {
        match self {
            ClientError::NoSuchLedger(_) => "NoSuchLedger",
            ClientError::NoSuchEntry(..) => "NoSuchEntry",
            ClientError::LedgerFenced(_) => "LedgerFenced",
            ClientError::LedgerClosed(_) | ClientError::WriterClosed(_) => "LedgerClosed",
            ClientError::NotEnoughBookies(_) => "NotEnoughBookies",
            ClientError::MetadataUnavailable(_) => "MetadataUnavailable",
            ClientError::Timeout(_) => "Timeout",
            ClientError::BadRequest(_) => "BadRequest",
            ClientError::EntryTooLarge(_) => "EntryTooLarge",
            ClientError::Backpressure(_) => "Overloaded",
            ClientError::RecoveryFailed(..) => "RecoveryFailed",
            ClientError::Corrupt(..) => "CorruptEntry",
            ClientError::InvalidMetadata(_) => "InvalidMetadata",
            ClientError::PermissionDenied(_) => "Forbidden",
            ClientError::NoSuchLog(_) => "NoSuchLog",
            ClientError::LogExists(_) => "LogExists",
            ClientError::NoSuchCursor { .. } => "NoSuchCursor",
            ClientError::LogFenced(_) => "LogFenced",
            ClientError::Trimmed { .. } => "Trimmed",
            ClientError::SequenceTooOld { .. } => "SequenceTooOld",
            ClientError::PreconditionFailed { .. } => "PreconditionFailed",
            ClientError::LedgerInLog(..) => "LedgerInLog",
            ClientError::Rpc(_) => "Internal",
        }
    }
}
