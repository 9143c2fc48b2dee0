//! The metadata state and its commands: a plain, deterministic state machine.
//!
//! Every replica applies the same commands in the same order (Raft's log) and
//! reaches the same state. Nothing here reads a clock or does I/O: time enters
//! as `now_ms` inside the commands, stamped by the leader that proposed them,
//! so lease expiry is replayed identically everywhere.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Ledger states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LedgerState {
    /// Written by its one writer.
    Open,
    /// Fenced by a recovering client; closes at the recovered tail.
    InRecovery,
    /// Sealed: last_entry_id and length are final.
    Closed,
}

/// One ensemble of a ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    /// First entry id stored by this ensemble.
    pub first_entry_id: u64,
    /// The bookies, in stripe order.
    pub bookie_ids: Vec<String>,
    /// Each bookie's instance id when it joined (empty, or one per bookie).
    pub instance_ids: Vec<String>,
}

/// A ledger's metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    /// Never reused.
    pub ledger_id: u64,
    /// Open, in recovery or closed.
    pub state: LedgerState,
    /// E.
    pub ensemble_size: u32,
    /// Qw.
    pub write_quorum: u32,
    /// Qa.
    pub ack_quorum: u32,
    /// Ensembles, by first entry id ascending.
    pub ensembles: Vec<Segment>,
    /// Last entry id once closed; -1 for empty.
    pub last_entry_id: i64,
    /// Total payload bytes once closed.
    pub length: u64,
    /// Always "crc32c" today.
    pub digest_type: String,
    /// Application metadata.
    pub custom: BTreeMap<String, Vec<u8>>,
    /// Leader's clock at creation.
    pub created_at_ms: u64,
    /// Bumped by every update: the CAS token.
    pub version: u64,
}

impl Ledger {
    /// Whether some segment that may hold entries names `bookie_id`: every
    /// segment but those that provably hold none (an earlier segment the
    /// next starts at or before, a closed ledger's segments past its last
    /// entry). An open ledger's last segment may always take more.
    pub fn names(&self, bookie_id: &str) -> bool {
        let firsts: Vec<u64> = self.ensembles.iter().map(|s| s.first_entry_id).collect();
        segments_name(self.state, self.last_entry_id, &firsts, |i| {
            self.ensembles[i].bookie_ids.iter().any(|b| b == bookie_id)
        })
    }
}

/// Whether a segment that may hold entries (see [`Ledger::names`]) has
/// `named(i)`, for segments starting at `firsts` (ascending).
fn segments_name(state: LedgerState, last_entry_id: i64, firsts: &[u64], named: impl Fn(usize) -> bool) -> bool {
    let n = firsts.len();
    (0..n).any(|i| {
        let end = if i + 1 < n {
            firsts[i + 1] as i64 - 1
        } else if state == LedgerState::Closed {
            last_entry_id
        } else {
            i64::MAX
        };
        let end = if state == LedgerState::Closed { end.min(last_entry_id) } else { end };
        end >= firsts[i] as i64 && named(i)
    })
}

/// The start of a ledger's encoding, up to its last entry id, decoded
/// without copying its strings and without the custom metadata: what the
/// scans over every ledger need (which bookies hold entries), at a fraction
/// of a whole decode. Its fields are `Ledger`'s first ones, in order.
#[derive(Debug, Deserialize)]
pub struct LedgerHead<'a> {
    /// As [`Ledger::ledger_id`].
    pub ledger_id: u64,
    /// As [`Ledger::state`].
    pub state: LedgerState,
    /// As [`Ledger::ensemble_size`].
    pub ensemble_size: u32,
    /// As [`Ledger::write_quorum`].
    pub write_quorum: u32,
    /// As [`Ledger::ack_quorum`].
    pub ack_quorum: u32,
    /// As [`Ledger::ensembles`].
    #[serde(borrow)]
    pub ensembles: Vec<SegmentHead<'a>>,
    /// As [`Ledger::last_entry_id`].
    pub last_entry_id: i64,
}

/// A [`Segment`], its strings borrowed.
#[derive(Debug, Deserialize)]
pub struct SegmentHead<'a> {
    /// As [`Segment::first_entry_id`].
    pub first_entry_id: u64,
    /// As [`Segment::bookie_ids`].
    #[serde(borrow)]
    pub bookie_ids: Vec<&'a str>,
    /// As [`Segment::instance_ids`].
    #[serde(borrow)]
    pub instance_ids: Vec<&'a str>,
}

impl LedgerHead<'_> {
    /// As [`Ledger::names`].
    pub fn names(&self, bookie_id: &str) -> bool {
        let firsts: Vec<u64> = self.ensembles.iter().map(|s| s.first_entry_id).collect();
        segments_name(self.state, self.last_entry_id, &firsts, |i| self.ensembles[i].bookie_ids.contains(&bookie_id))
    }
}

/// Bookie states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum BookieState {
    /// Takes adds.
    Available,
    /// Serves reads only.
    ReadOnly,
    /// Being drained (operator).
    Decommissioning,
    /// Drained and retired (no ledger names it; it may not register again).
    Decommissioned,
}

/// The operator's decommissioning of a bookie id: outlives its registration
/// (a bookie may be down while it is drained) and, once retired, refuses the
/// id's registration for good.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retirement {
    /// The bookie.
    pub bookie_id: String,
    /// `Decommissioning` or `Decommissioned`.
    pub state: BookieState,
    /// Leader clock when the operator asked.
    pub requested_at_ms: u64,
    /// Leader clock when it was retired (0 until then).
    pub retired_at_ms: u64,
    /// The registration as last seen (address, rack, instance), for listings
    /// once its lease is gone.
    pub last_seen: Option<Bookie>,
}

/// A registered bookie and its lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bookie {
    /// Its id.
    pub bookie_id: String,
    /// Where to reach it.
    pub address: String,
    /// For placement.
    pub rack: String,
    /// The instance that holds the lease.
    pub instance_id: String,
    /// Available, read-only or decommissioning.
    pub state: BookieState,
    /// Disk figures as last reported.
    pub total_disk_bytes: u64,
    /// Disk figures as last reported.
    pub free_disk_bytes: u64,
    /// The lease this registration holds.
    pub lease_id: u64,
    /// Lease length.
    pub lease_ms: u64,
    /// Expires at this leader-clock time unless renewed.
    pub expires_at_ms: u64,
}

/// A ledger below its write quorum, and the bookies whose copies it lacks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mark {
    /// The ledger.
    pub ledger_id: u64,
    /// Bookies whose copies are missing (sorted, distinct).
    pub missing: Vec<String>,
    /// Why, as the auditor said.
    pub reason: String,
    /// Leader clock when first marked.
    pub marked_at_ms: u64,
}

/// A named exclusive lock under a lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lock {
    /// The lock's name.
    pub name: String,
    /// Who holds it.
    pub owner: String,
    /// Changes at every grant: a renewal or release must name the grant it holds.
    pub lock_id: u64,
    /// Lease length.
    pub lease_ms: u64,
    /// Free for others after this leader-clock time.
    pub expires_at_ms: u64,
}

/// What a creation asks for. (Encoded as the fields of the struct variant
/// `CreateLedger` it replaced: postcard writes both alike, so Raft logs
/// written before decode unchanged.)
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewLedger {
    /// E.
    pub ensemble_size: u32,
    /// Qw.
    pub write_quorum: u32,
    /// Qa.
    pub ack_quorum: u32,
    /// The first ensemble (E bookies).
    pub bookie_ids: Vec<String>,
    /// Their instance ids (empty, or one per bookie).
    pub instance_ids: Vec<String>,
    /// Application metadata.
    pub custom: BTreeMap<String, Vec<u8>>,
    /// Leader clock.
    pub now_ms: u64,
}

/// A state change, as proposed to Raft.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// Allocate a ledger id and store version 1 of its metadata.
    CreateLedger(NewLedger),
    /// Compare-and-set a ledger's metadata.
    UpdateLedger {
        /// The new metadata (its `version` is ignored; the store sets it).
        ledger: Ledger,
        /// Applied only if the stored version is this.
        expected_version: u64,
    },
    /// Delete a ledger's metadata (its id is never reused).
    DeleteLedger {
        /// The ledger.
        ledger_id: u64,
    },
    /// Register (or re-register) a bookie with a fresh lease.
    RegisterBookie {
        /// The registration (lease fields are set by the store).
        bookie: Bookie,
        /// Lease length.
        lease_ms: u64,
        /// Leader clock.
        now_ms: u64,
    },
    /// Extend a lease.
    RenewLease {
        /// The bookie.
        bookie_id: String,
        /// The lease it holds.
        lease_id: u64,
        /// Leader clock.
        now_ms: u64,
    },
    /// Remove registrations whose lease ended (proposed by the leader's ticker).
    ExpireLeases {
        /// Leader clock.
        now_ms: u64,
    },
    /// Mark a ledger under-replicated (or add missing bookies to its mark).
    MarkUnderReplicated {
        /// The ledger.
        ledger_id: u64,
        /// Bookies whose copies are missing.
        missing: Vec<String>,
        /// Why.
        reason: String,
        /// Leader clock.
        now_ms: u64,
    },
    /// Remove bookies from a mark (all when empty); the mark goes when empty.
    ClearUnderReplicated {
        /// The ledger.
        ledger_id: u64,
        /// Bookies now repaired.
        bookies: Vec<String>,
    },
    /// Take a named lock if free, expired, or already ours.
    AcquireLock {
        /// Lock name.
        name: String,
        /// Who asks.
        owner: String,
        /// Lease length.
        lease_ms: u64,
        /// Leader clock.
        now_ms: u64,
    },
    /// Extend a held lock.
    RenewLock {
        /// Lock name.
        name: String,
        /// The grant held.
        lock_id: u64,
        /// Leader clock.
        now_ms: u64,
    },
    /// Give a lock up.
    ReleaseLock {
        /// Lock name.
        name: String,
        /// The grant held.
        lock_id: u64,
    },
    /// The operator's state for a bookie: `Decommissioning` (drain),
    /// `Decommissioned` (retire a drained bookie), `Available` (cancel a drain).
    SetBookieState {
        /// The bookie.
        bookie_id: String,
        /// The state asked for.
        state: BookieState,
        /// Leader clock.
        now_ms: u64,
    },
    /// Store the active auditor's last report (encoded `AuditReport`).
    PutAuditReport {
        /// The report, as the wire carries it.
        report: Vec<u8>,
    },
    /// Several commands proposed as one log entry (the leader batches
    /// concurrent writes: one Raft round and one fsync for all of them).
    /// Applied in order; each has its own outcome.
    Batch(Vec<Command>),
    /// CreateLedger at most once per `request_id`: a creator that retries
    /// after an unknown outcome (the leader died with the request) gets the
    /// ledger its first attempt created, not a second one (issue #19 item 7).
    CreateLedgerOnce {
        /// Chosen by the creator, unique per creation.
        request_id: String,
        /// The creation.
        ledger: NewLedger,
    },
    /// A new leader's first command in its term: every lease (bookie
    /// registrations, locks) lasts at least one more full lease from
    /// `now_ms`. Nobody could renew while there was no leader, so an
    /// election slower than a lease would otherwise expire them all at the
    /// new leader's first reaper tick (etcd's lessor promotes its leases so;
    /// ZooKeeper's new leader restarts every session's timeout).
    PromoteLeases {
        /// Leader clock.
        now_ms: u64,
    },
    /// RenewLock by a caller named by its certificate (`role/id`): only the
    /// identity the grant was made to may renew it. (New variants go last:
    /// postcard numbers variants, and Raft logs written before must decode.)
    RenewLockAs {
        name: String,
        lock_id: u64,
        now_ms: u64,
        /// The caller's certificate identity, `role/id`.
        caller: String,
    },
    /// ReleaseLock by a caller named by its certificate: only the identity
    /// the grant was made to, or the operator, may release it.
    ReleaseLockAs { name: String, lock_id: u64, caller: String },
    /// UpdateLedger by a caller named by its certificate ([`ledger_right`]).
    UpdateLedgerAs { ledger: Ledger, expected_version: u64, caller: Caller },
    /// DeleteLedger by a caller named by its certificate ([`ledger_right`]).
    DeleteLedgerAs { ledger_id: u64, caller: Caller },
    /// Add a certificate serial to the deny list (or take it off: `undo`).
    RevokeCertificate { serial: String, identity: String, reason: String, undo: bool, now_ms: u64 },
    /// Create a log (issue #23) over the open ledger its record names.
    CreateLog { log: Log, caller: Caller, now_ms: u64 },
    /// Compare-and-set a log's record with the ledger updates beside it,
    /// as one change or none (logs.rs).
    UpdateLog { log: Log, expected_version: u64, ledgers: Vec<(Ledger, u64)>, caller: Caller, now_ms: u64 },
    /// Delete a log and the ledgers it lists.
    DeleteLog { name: String, caller: Caller },
    /// Create a cursor (expected_version 0) or move one by CAS: an
    /// acknowledgement (forward only) or a seek (logs.rs).
    PutCursor { cursor: quire_log::Cursor, expected_version: u64, seek: bool, now_ms: u64, caller: Caller },
    /// Delete a cursor.
    DeleteCursor { log: String, name: String, caller: Caller },
    /// CreateLog for an HTTP principal, which the log's encoding skips
    /// ([`Log::principal`](quire_log::LogMeta::principal)), so it goes beside it.
    CreateLogFor { log: Log, principal: String, caller: Caller, now_ms: u64 },
    /// AcquireLock whoever holds it (an explicit takeover of a log's
    /// ownership lock): a new grant, so the holder's renewals fail.
    TakeLock { name: String, owner: String, lease_ms: u64, now_ms: u64 },
    /// Delete the ledgers made for log `log` that no writer can ever list
    /// (logs.rs `sweep_log_ledgers`); proposed by the leader after a
    /// takeover of the log.
    SweepLogLedgers { log: String },
    /// DeleteLog that also deletes the ledgers made for the log and never
    /// listed (logs.rs `delete_log`). A variant of its own so that a
    /// DeleteLog replays as it was first applied.
    DeleteLogAndSweep { name: String, caller: Caller },
    /// DeleteLogAndSweep of a fenced log: refused while the open segment's
    /// ledger is open (its writer would go on), and, unless
    /// `expected_version` is 0, when the log is at another version (an
    /// edit since the caller fenced it). A variant of its own, as above.
    DeleteLogFenced { name: String, expected_version: u64, caller: Caller },
    /// UpdateLog in which a takeover (a raised epoch) may seal the open
    /// segment short of its closed ledger by a batch the recovery cut (at
    /// most 65 534 entries: issue #47, atomic batches). A variant of its
    /// own, so that an UpdateLog replays as it was first applied.
    UpdateLogCutting { log: Log, expected_version: u64, ledgers: Vec<(Ledger, u64)>, caller: Caller, now_ms: u64 },
}

/// The names of logs' ownership locks start so; only these may be taken over.
pub use quire_log::config::OWNER_LOCK_PREFIX as LOG_LOCK_PREFIX;

/// A log (issue #23): its chain of ledgers, settings and producer table.
pub use quire_log::LogMeta as Log;

/// A revoked certificate (issue #20 item 6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revoked {
    /// Lowercase hex of the serial number's bytes.
    pub serial: String,
    /// Whose it was, as the operator said.
    pub identity: String,
    /// Why.
    pub reason: String,
    /// When (leader clock).
    pub revoked_at_ms: u64,
}

/// Longest serial (RFC 5280: at most 20 bytes), in hex digits.
pub const SERIAL_HEX_MAX: usize = 40;
/// Revocations held at most (certificates expire; prune with `undo`).
pub const REVOKED_MAX: usize = 65_536;
/// Bytes of a revocation's identity and reason, at most.
pub const REVOCATION_NOTE_MAX: usize = 256;
/// Bytes of the whole list (serials and notes), at most: ListRevoked
/// answers with all of it in one frame (5 MiB).
pub const REVOKED_BYTES_MAX: usize = 2 << 20;

/// A serial as the deny list keys it: hex digits, lowercase, without
/// leading zeros (DER integers may carry one), or None when it is not hex.
pub fn normalise_serial(serial: &str) -> Option<String> {
    let s = serial.trim().trim_start_matches("0x").replace(':', "").to_ascii_lowercase();
    if s.is_empty() || s.len() > SERIAL_HEX_MAX + 2 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let t = s.trim_start_matches('0');
    Some(if t.is_empty() { "0".to_string() } else { t.to_string() })
}

/// Who proposed a command, from the certificate the request came with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Caller {
    /// The role's name (`quire_proto::Role::as_str`).
    pub role: String,
    pub id: String,
}

impl Caller {
    /// `role/id`, as owners are written.
    pub fn identity(&self) -> String {
        format!("{}/{}", self.role, self.id)
    }
}

pub use quire_proto::reserved::{OWNER_KEY, PREFIX as RESERVED_PREFIX, PRINCIPAL_KEY};

/// Whether `new` is a step of recovery from `stored`, and nothing more: the
/// mark (Open to InRecovery, all else as stored), or the close from
/// InRecovery (the tail and length recovery found; the segments before the
/// last as stored, the last one's members replaced only where recovery's
/// write-back replaced them, new segments only after it; application
/// metadata as stored). The metadata service cannot check the tail a
/// recoverer found, as BookKeeper cannot: that part of the trust is the
/// recoverer's role (docs/security.md).
fn recovery_shaped(stored: &Ledger, new: &Ledger) -> bool {
    let same_meta = new.custom == stored.custom
        && (new.ensemble_size, new.write_quorum, new.ack_quorum)
            == (stored.ensemble_size, stored.write_quorum, stored.ack_quorum);
    match (stored.state, new.state) {
        (LedgerState::Open, LedgerState::InRecovery) => {
            Ledger { state: LedgerState::InRecovery, version: new.version, ..stored.clone() } == *new
        }
        (LedgerState::InRecovery, LedgerState::Closed) => {
            let Some((last, before)) = stored.ensembles.split_last() else { return false };
            same_meta
                && new.ensembles.len() >= stored.ensembles.len()
                && new.ensembles[..before.len()] == *before
                && new.ensembles[before.len()].first_entry_id == last.first_entry_id
        }
        _ => false,
    }
}

/// Whether `caller` may make the change `new` (None: a deletion) to the
/// stored ledger `stored` (issue #20 item 3). The owner, the replication
/// workers (repairs, and recovery of an open ledger left on a lost bookie)
/// and the operator may change anything. Any other writer may only
/// recover: mark the ledger in recovery, and close it from there (how a
/// new owner of a log takes it over from a dead or zombie one, as in
/// BookKeeper); never an ensemble change of an open ledger, its own close,
/// a repair of a closed one, or a deletion. A gateway acts for any gateway
/// (scaled replicas share the API; the gateway checks the HTTP principal).
/// A ledger created before owners were recorded has none: anyone may.
pub fn ledger_right(stored: &Ledger, new: Option<&Ledger>, caller: &Caller) -> Result<(), Refusal> {
    let Some(owner) = stored.custom.get(OWNER_KEY) else { return Ok(()) };
    let owner = String::from_utf8_lossy(owner);
    let owns = owner == caller.identity() || (caller.role == "gateway" && owner.starts_with("gateway/"));
    if owns || caller.role == "admin" || caller.role == "replication-worker" {
        return Ok(());
    }
    if let Some(new) = new {
        if recovery_shaped(stored, new) {
            return Ok(());
        }
    }
    let what = if new.is_some() { "change" } else { "delete" };
    Err(Refusal::PermissionDenied(format!(
        "ledger {} is {owner}'s: {} may recover it, not {what} it",
        stored.ledger_id,
        caller.identity()
    )))
}

/// The certificate identity (`role/id`) a lock's owner names: owners are
/// `role/id` or `role/id:label`, set by the metadata service from the
/// caller's certificate (the label tells one process of an identity from
/// another).
pub fn lock_owner_identity(owner: &str) -> &str {
    owner.split_once(':').map_or(owner, |(identity, _)| identity)
}

/// Why a command was refused: maps one to one to wire error codes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Refusal {
    /// Malformed or inconsistent request.
    BadRequest(String),
    /// No such ledger.
    NoSuchLedger(u64),
    /// The CAS found another version.
    VersionConflict {
        /// Stored version.
        actual: u64,
    },
    /// No such bookie registration.
    NoSuchBookie(String),
    /// The lease named is not the current one (expired or replaced).
    LeaseExpired(String),
    /// The bookie id is registered by another live instance.
    AlreadyExists(String),
    /// Another owner holds the lock under a live lease.
    LockHeld(String),
    /// The bookie id was decommissioned.
    Decommissioned(String),
    /// The caller's identity may not do this (another's lock grant).
    PermissionDenied(String),
    /// No log of that name.
    NoSuchLog(String),
    /// No such record (a cursor).
    NotFound(String),
    /// The ledger is a log's: it goes with the log's trim or deletion.
    LedgerInLog(String),
}

/// A command's result, returned to the proposer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// The ledger as stored.
    Ledger(Ledger),
    /// Deleted.
    Deleted,
    /// Registered with this lease.
    Registered {
        /// The lease id to renew with.
        lease_id: u64,
    },
    /// Renewed.
    Renewed,
    /// These registrations expired.
    Expired(Vec<String>),
    /// Refused; nothing changed.
    Refused(Refusal),
    /// A mark as it stands (absent: cleared).
    Mark(Option<Mark>),
    /// A lock granted or renewed.
    Lock(Lock),
    /// Released.
    Released,
    /// The outcomes of a batch, in order.
    Batch(Vec<Outcome>),
    /// A bookie's state as set (the registration or last-seen record, with
    /// the operator's state).
    BookieState(Bookie),
    /// A Raft-internal entry (blank, membership).
    Nothing,
    /// The deny list's version after a revocation.
    Revocations(u64),
    /// A log as stored, and the ledgers its update changed.
    Log(Box<Log>, Vec<Ledger>),
    /// A cursor as stored.
    Cursor(quire_log::Cursor),
}

/// Limits that keep one record bounded.
pub const ENSEMBLE_MAX: u32 = 64;
/// Custom metadata: keys at most, and bytes in all.
pub const CUSTOM_KEYS_MAX: usize = 64;
/// Total bytes of custom metadata.
pub const CUSTOM_BYTES_MAX: usize = 64 * 1024;

/// The replicated state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetaState {
    /// Ledgers by id (and by the log they were made for: `index.rs`).
    pub ledgers: crate::index::Ledgers,
    /// Registered bookies by id.
    pub bookies: BTreeMap<String, Bookie>,
    /// Which instance last registered each bookie id (cookie ownership).
    pub cookies: BTreeMap<String, String>,
    /// The next ledger id to allocate (ids are never reused).
    pub next_ledger_id: u64,
    /// The next lease id.
    pub next_lease_id: u64,
    /// Bumped by every change to the bookie set (for watches).
    pub bookies_version: u64,
    /// Under-replicated ledgers.
    pub marks: BTreeMap<u64, Mark>,
    /// Named locks.
    pub locks: BTreeMap<String, Lock>,
    /// The next lock grant id.
    pub next_lock_id: u64,
    /// Decommissionings, by bookie id.
    pub retirements: BTreeMap<String, Retirement>,
    /// The active auditor's last report (encoded `AuditReport`; empty: none).
    pub audit_report: Vec<u8>,
    /// Recent creations by request id: the ledger each created. The
    /// oldest half is dropped past [`CREATES_KEPT`] (a retry comes within
    /// seconds).
    pub creates: BTreeMap<String, u64>,
    /// Revoked certificates by serial. Not in MetaState's own encoding: a
    /// snapshot carries them after it (state_machine.rs), so snapshots of
    /// replicas from before the deny list still decode.
    #[serde(skip)]
    pub revoked: BTreeMap<String, Revoked>,
    /// Bumped by every change to `revoked` (for ListRevoked's long poll).
    #[serde(skip)]
    pub revoked_version: u64,
    /// Logs by name (issue #23); carried after the deny list in snapshots.
    #[serde(skip)]
    pub logs: crate::index::Logs,
    /// Logs' cursors by (log, cursor); carried with the logs.
    #[serde(skip)]
    pub cursors: BTreeMap<(String, String), quire_log::Cursor>,
}

/// Request ids of creations remembered, at most.
pub const CREATES_KEPT: usize = 65_536;

/// Longest request id of a creation.
pub const REQUEST_ID_MAX_BYTES: usize = 64;

/// What a command touched (for persisting it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Touched {
    /// A ledger record (absent now if deleted).
    Ledger(u64),
    /// A bookie record (absent now if removed).
    Bookie(String),
    /// A cookie record.
    Cookie(String),
    /// An under-replication mark.
    Mark(u64),
    /// A lock.
    Lock(String),
    /// A decommissioning.
    Retirement(String),
    /// The audit report.
    AuditReport,
    /// The counters.
    Counters,
    /// A creation's request id (absent now if forgotten).
    Create(String),
    /// A revocation (absent now if taken back).
    Revoked(String),
    /// A log (absent now if deleted).
    Log(String),
    /// A cursor (log, name; absent now if deleted).
    Cursor(String, String),
}

fn validate_custom(custom: &BTreeMap<String, Vec<u8>>) -> Result<(), Refusal> {
    let bytes: usize = custom.iter().map(|(k, v)| k.len() + v.len()).sum();
    if custom.len() > CUSTOM_KEYS_MAX || bytes > CUSTOM_BYTES_MAX {
        return Err(Refusal::BadRequest(format!(
            "custom metadata of {} keys and {bytes} bytes exceeds {CUSTOM_KEYS_MAX} keys or {CUSTOM_BYTES_MAX} bytes",
            custom.len()
        )));
    }
    Ok(())
}

fn validate_quorums(e: u32, qw: u32, qa: u32) -> Result<(), Refusal> {
    if !(1 <= qa && qa <= qw && qw <= e && e <= ENSEMBLE_MAX) {
        return Err(Refusal::BadRequest(format!(
            "quorums must satisfy 1 <= ack ({qa}) <= write ({qw}) <= ensemble ({e}) <= {ENSEMBLE_MAX}"
        )));
    }
    Ok(())
}

fn validate_ensemble(ids: &[String], instance_ids: &[String], e: u32) -> Result<(), Refusal> {
    if ids.len() != e as usize {
        return Err(Refusal::BadRequest(format!("an ensemble of {} bookies for ensemble size {e}", ids.len())));
    }
    if !instance_ids.is_empty() && instance_ids.len() != ids.len() {
        return Err(Refusal::BadRequest(format!(
            "{} instance ids for an ensemble of {} bookies (give none or one each)",
            instance_ids.len(),
            ids.len()
        )));
    }
    let mut sorted: Vec<&String> = ids.iter().collect();
    sorted.sort();
    sorted.dedup();
    if sorted.len() != ids.len() || ids.iter().any(|b| b.is_empty()) {
        return Err(Refusal::BadRequest("an ensemble must name distinct, non-empty bookie ids".into()));
    }
    Ok(())
}

impl MetaState {
    /// Applies one command. Refused commands change nothing.
    pub fn apply(&mut self, cmd: Command) -> (Outcome, Vec<Touched>) {
        match self.try_apply(cmd) {
            Ok(r) => r,
            Err(refusal) => (Outcome::Refused(refusal), Vec::new()),
        }
    }

    /// Grants lock `name` to `owner` for `lease_ms`: if it is free, its
    /// lease ran out, or `owner` holds it already; or, with `take_over`,
    /// whoever holds it. Every grant is a new lock id, so an earlier
    /// grant's renewals and releases fail.
    fn grant_lock(
        &mut self,
        name: String,
        owner: String,
        lease_ms: u64,
        now_ms: u64,
        take_over: bool,
    ) -> Result<(Outcome, Vec<Touched>), Refusal> {
        if name.is_empty() || owner.is_empty() {
            return Err(Refusal::BadRequest("a lock needs a name and an owner".into()));
        }
        if let Some(cur) = self.locks.get(&name) {
            if !take_over && cur.owner != owner && cur.expires_at_ms > now_ms {
                return Err(Refusal::LockHeld(format!(
                    "{name} is held by {} for {} ms more",
                    cur.owner,
                    cur.expires_at_ms - now_ms
                )));
            }
        }
        let lock_id = self.next_lock_id.max(1);
        self.next_lock_id = lock_id + 1;
        let lock =
            Lock { name: name.clone(), owner, lock_id, lease_ms, expires_at_ms: now_ms.saturating_add(lease_ms) };
        self.locks.insert(name.clone(), lock.clone());
        Ok((Outcome::Lock(lock), vec![Touched::Lock(name), Touched::Counters]))
    }

    /// Past [`CREATES_KEPT`] request ids, the older half is forgotten (by
    /// ledger id: creation order). Returns the ids forgotten.
    fn forget_old_creates(&mut self) -> Vec<String> {
        if self.creates.len() <= CREATES_KEPT {
            return Vec::new();
        }
        let mut by_age: Vec<(u64, String)> = self.creates.iter().map(|(r, l)| (*l, r.clone())).collect();
        by_age.sort_unstable();
        let old: Vec<String> = by_age.into_iter().take(CREATES_KEPT / 2).map(|(_, r)| r).collect();
        for r in &old {
            self.creates.remove(r);
        }
        old
    }

    pub(crate) fn try_apply(&mut self, cmd: Command) -> Result<(Outcome, Vec<Touched>), Refusal> {
        match cmd {
            Command::Batch(cmds) => {
                let mut outcomes = Vec::with_capacity(cmds.len());
                let mut touched = Vec::new();
                for c in cmds {
                    // A nested batch is flattened by nobody: refuse it rather than recurse.
                    if matches!(c, Command::Batch(_)) {
                        outcomes.push(Outcome::Refused(Refusal::BadRequest("nested batch".into())));
                        continue;
                    }
                    let (o, t) = self.apply(c);
                    outcomes.push(o);
                    touched.extend(t);
                }
                Ok((Outcome::Batch(outcomes), touched))
            }
            Command::CreateLedger(NewLedger {
                ensemble_size,
                write_quorum,
                ack_quorum,
                bookie_ids,
                instance_ids,
                custom,
                now_ms,
            }) => {
                validate_quorums(ensemble_size, write_quorum, ack_quorum)?;
                validate_ensemble(&bookie_ids, &instance_ids, ensemble_size)?;
                validate_custom(&custom)?;
                self.refuse_retired(&bookie_ids)?;
                // Ledger ids start at 1; 0 is never a ledger.
                let id = self.next_ledger_id.max(1);
                self.next_ledger_id = id + 1;
                let ledger = Ledger {
                    ledger_id: id,
                    state: LedgerState::Open,
                    ensemble_size,
                    write_quorum,
                    ack_quorum,
                    ensembles: vec![Segment { first_entry_id: 0, bookie_ids, instance_ids }],
                    last_entry_id: -1,
                    length: 0,
                    digest_type: "crc32c".into(),
                    custom,
                    created_at_ms: now_ms,
                    version: 1,
                };
                self.ledgers.insert(id, ledger.clone());
                Ok((Outcome::Ledger(ledger), vec![Touched::Ledger(id), Touched::Counters]))
            }
            Command::CreateLedgerOnce { request_id, ledger } => {
                if request_id.is_empty() || request_id.len() > REQUEST_ID_MAX_BYTES {
                    return Err(Refusal::BadRequest(format!(
                        "a creation's request id has 1 to {REQUEST_ID_MAX_BYTES} bytes, not {}",
                        request_id.len()
                    )));
                }
                if let Some(&id) = self.creates.get(&request_id) {
                    // Created by an earlier attempt; deleted since, it is gone.
                    let l = self.ledgers.get(&id).ok_or(Refusal::NoSuchLedger(id))?;
                    return Ok((Outcome::Ledger(l), Vec::new()));
                }
                let (outcome, mut touched) = self.try_apply(Command::CreateLedger(ledger))?;
                if let Outcome::Ledger(l) = &outcome {
                    self.creates.insert(request_id.clone(), l.ledger_id);
                    touched.push(Touched::Create(request_id));
                    touched.extend(self.forget_old_creates().into_iter().map(Touched::Create));
                }
                Ok((outcome, touched))
            }
            Command::UpdateLedger { mut ledger, expected_version } => {
                let id = ledger.ledger_id;
                let stored = self.ledgers.get(&id).ok_or(Refusal::NoSuchLedger(id))?;
                if stored.version != expected_version {
                    return Err(Refusal::VersionConflict { actual: stored.version });
                }
                Self::validate_update(&stored, &ledger)?;
                // Only members this update adds: a retired bookie may still sit
                // in a segment that never held an entry (it was retired because
                // no segment that may hold entries names it).
                for (i, seg) in ledger.ensembles.iter().enumerate() {
                    let old = stored.ensembles.get(i).map(|s| &s.bookie_ids);
                    let added: Vec<String> = seg
                        .bookie_ids
                        .iter()
                        .enumerate()
                        .filter(|(p, b)| old.and_then(|o| o.get(*p)) != Some(*b))
                        .map(|(_, b)| b.clone())
                        .collect();
                    self.refuse_retired(&added)?;
                }
                ledger.version = stored.version + 1;
                self.ledgers.insert(id, ledger.clone());
                Ok((Outcome::Ledger(ledger), vec![Touched::Ledger(id)]))
            }
            Command::DeleteLedger { ledger_id } => {
                self.ledgers.remove(&ledger_id).ok_or(Refusal::NoSuchLedger(ledger_id))?;
                // A deleted ledger needs no repair.
                self.marks.remove(&ledger_id);
                Ok((Outcome::Deleted, vec![Touched::Ledger(ledger_id), Touched::Mark(ledger_id)]))
            }
            Command::RegisterBookie { mut bookie, lease_ms, now_ms } => {
                if bookie.bookie_id.is_empty() || bookie.instance_id.is_empty() || bookie.address.is_empty() {
                    return Err(Refusal::BadRequest(
                        "a registration needs a bookie id, an instance id and an address".into(),
                    ));
                }
                if self.retirements.get(&bookie.bookie_id).is_some_and(|r| r.state == BookieState::Decommissioned) {
                    return Err(Refusal::Decommissioned(format!(
                        "bookie {} was decommissioned: give this machine a new bookie id and empty disks",
                        bookie.bookie_id
                    )));
                }
                if let Some(cur) = self.bookies.get(&bookie.bookie_id) {
                    if cur.instance_id != bookie.instance_id && cur.expires_at_ms > now_ms {
                        return Err(Refusal::AlreadyExists(format!(
                            "bookie {} is registered by live instance {} (lease ends in {} ms)",
                            cur.bookie_id,
                            cur.instance_id,
                            cur.expires_at_ms - now_ms
                        )));
                    }
                }
                let lease_id = self.next_lease_id.max(1);
                self.next_lease_id = lease_id + 1;
                bookie.lease_id = lease_id;
                bookie.lease_ms = lease_ms;
                bookie.expires_at_ms = now_ms.saturating_add(lease_ms);
                let id = bookie.bookie_id.clone();
                self.cookies.insert(id.clone(), bookie.instance_id.clone());
                self.bookies.insert(id.clone(), bookie);
                self.bookies_version += 1;
                Ok((
                    Outcome::Registered { lease_id },
                    vec![Touched::Bookie(id.clone()), Touched::Cookie(id), Touched::Counters],
                ))
            }
            Command::RenewLease { bookie_id, lease_id, now_ms } => {
                let b = self.bookies.get_mut(&bookie_id).ok_or_else(|| Refusal::NoSuchBookie(bookie_id.clone()))?;
                if b.lease_id != lease_id || b.expires_at_ms <= now_ms {
                    return Err(Refusal::LeaseExpired(format!(
                        "lease {lease_id} of bookie {bookie_id} is not current"
                    )));
                }
                b.expires_at_ms = now_ms.saturating_add(b.lease_ms);
                Ok((Outcome::Renewed, vec![Touched::Bookie(bookie_id)]))
            }
            Command::ExpireLeases { now_ms } => {
                let gone: Vec<String> =
                    self.bookies.values().filter(|b| b.expires_at_ms <= now_ms).map(|b| b.bookie_id.clone()).collect();
                let mut touched: Vec<Touched> = gone.iter().cloned().map(Touched::Bookie).collect();
                for id in &gone {
                    let b = self.bookies.remove(id);
                    // A drained bookie stays listed as it was last seen.
                    if let Some(r) = self.retirements.get_mut(id) {
                        r.last_seen = b;
                        touched.push(Touched::Retirement(id.clone()));
                    }
                }
                if !gone.is_empty() {
                    self.bookies_version += 1;
                    touched.push(Touched::Counters);
                }
                Ok((Outcome::Expired(gone), touched))
            }
            Command::PromoteLeases { now_ms } => {
                let mut touched = Vec::new();
                for b in self.bookies.values_mut() {
                    let until = now_ms.saturating_add(b.lease_ms);
                    if b.expires_at_ms < until {
                        b.expires_at_ms = until;
                        touched.push(Touched::Bookie(b.bookie_id.clone()));
                    }
                }
                for l in self.locks.values_mut() {
                    let until = now_ms.saturating_add(l.lease_ms);
                    if l.expires_at_ms < until {
                        l.expires_at_ms = until;
                        touched.push(Touched::Lock(l.name.clone()));
                    }
                }
                Ok((Outcome::Nothing, touched))
            }
            Command::MarkUnderReplicated { ledger_id, missing, reason, now_ms } => {
                if missing.is_empty() || missing.iter().any(|b| b.is_empty()) {
                    return Err(Refusal::BadRequest("a mark names at least one missing bookie".into()));
                }
                if !self.ledgers.contains_key(&ledger_id) {
                    return Err(Refusal::NoSuchLedger(ledger_id));
                }
                let mark = self.marks.entry(ledger_id).or_insert_with(|| Mark {
                    ledger_id,
                    missing: Vec::new(),
                    reason: reason.clone(),
                    marked_at_ms: now_ms,
                });
                mark.missing.extend(missing);
                mark.missing.sort();
                mark.missing.dedup();
                if mark.missing.len() > ENSEMBLE_MAX as usize * 4 {
                    return Err(Refusal::BadRequest("too many missing bookies in one mark".into()));
                }
                let m = mark.clone();
                Ok((Outcome::Mark(Some(m)), vec![Touched::Mark(ledger_id)]))
            }
            Command::ClearUnderReplicated { ledger_id, bookies } => {
                let Some(mark) = self.marks.get_mut(&ledger_id) else {
                    return Ok((Outcome::Mark(None), Vec::new()));
                };
                if bookies.is_empty() {
                    mark.missing.clear();
                } else {
                    mark.missing.retain(|b| !bookies.contains(b));
                }
                let left = (!mark.missing.is_empty()).then(|| mark.clone());
                if left.is_none() {
                    self.marks.remove(&ledger_id);
                }
                Ok((Outcome::Mark(left), vec![Touched::Mark(ledger_id)]))
            }
            Command::TakeLock { name, owner, lease_ms, now_ms } => {
                let Some(log) = name.strip_prefix(LOG_LOCK_PREFIX) else {
                    return Err(Refusal::BadRequest(format!("only a log's lock ({LOG_LOCK_PREFIX}...) is taken over")));
                };
                // Only who may change the log takes its writer's lock from
                // another (the owner is `role/id` or `role/id:label`).
                let stored = self.logs.get(log).ok_or_else(|| Refusal::NoSuchLog(log.to_string()))?;
                let identity = owner.split(':').next().unwrap_or_default();
                if !crate::logs::identity_may_change(stored, identity) {
                    return Err(Refusal::PermissionDenied(format!(
                        "{identity} may not take log {log} over: it is {}'s",
                        stored.creator
                    )));
                }
                self.grant_lock(name, owner, lease_ms, now_ms, true)
            }
            Command::AcquireLock { name, owner, lease_ms, now_ms } => {
                self.grant_lock(name, owner, lease_ms, now_ms, false)
            }
            Command::SweepLogLedgers { log } => self.sweep_log_ledgers(&log),
            Command::UpdateLedgerAs { ledger, expected_version, caller } => {
                let stored = self.ledgers.get(&ledger.ledger_id).ok_or(Refusal::NoSuchLedger(ledger.ledger_id))?;
                ledger_right(&stored, Some(&ledger), &caller)?;
                // (Here, not in validate_update: UpdateLedger entries in Raft
                // logs written before owners existed replay as they applied.)
                fn reserved(l: &Ledger) -> Vec<(&String, &Vec<u8>)> {
                    l.custom.iter().filter(|(k, _)| k.starts_with(RESERVED_PREFIX)).collect()
                }
                if reserved(&ledger) != reserved(&stored) {
                    return Err(Refusal::BadRequest(
                        "the quire.* metadata (the ledger's owner) is fixed at creation".into(),
                    ));
                }
                self.try_apply(Command::UpdateLedger { ledger, expected_version })
            }
            Command::RevokeCertificate { serial, identity, reason, undo, now_ms } => {
                let serial = normalise_serial(&serial).ok_or_else(|| {
                    Refusal::BadRequest(format!(
                        "serial {serial:?} is not a certificate serial (hex, at most 20 bytes)"
                    ))
                })?;
                if identity.len() > REVOCATION_NOTE_MAX || reason.len() > REVOCATION_NOTE_MAX {
                    return Err(Refusal::BadRequest(format!(
                        "a revocation's identity and reason are at most {REVOCATION_NOTE_MAX} bytes each"
                    )));
                }
                if undo {
                    if self.revoked.remove(&serial).is_none() {
                        return Ok((Outcome::Revocations(self.revoked_version), Vec::new()));
                    }
                } else {
                    if !self.revoked.contains_key(&serial) && self.revoked.len() >= REVOKED_MAX {
                        return Err(Refusal::BadRequest(format!(
                            "the deny list holds {REVOKED_MAX} serials already: take back those of expired certificates"
                        )));
                    }
                    let size = |r: &Revoked| r.serial.len() + r.identity.len() + r.reason.len() + 16;
                    let r = Revoked { serial: serial.clone(), identity, reason, revoked_at_ms: now_ms };
                    let others: usize = self.revoked.values().filter(|o| o.serial != serial).map(size).sum();
                    if others + size(&r) > REVOKED_BYTES_MAX {
                        return Err(Refusal::BadRequest(format!(
                            "the deny list would exceed {REVOKED_BYTES_MAX} bytes: take back those of expired certificates"
                        )));
                    }
                    self.revoked.insert(serial.clone(), r);
                }
                self.revoked_version += 1;
                Ok((Outcome::Revocations(self.revoked_version), vec![Touched::Revoked(serial), Touched::Counters]))
            }
            Command::CreateLog { mut log, caller, now_ms } => {
                log.principal = String::new();
                self.create_log(log, &caller, now_ms)
            }
            Command::CreateLogFor { mut log, principal, caller, now_ms } => {
                log.principal = principal;
                self.create_log(log, &caller, now_ms)
            }
            Command::UpdateLog { log, expected_version, ledgers, caller, now_ms } => {
                self.update_log(log, expected_version, ledgers, &caller, now_ms, false)
            }
            Command::UpdateLogCutting { log, expected_version, ledgers, caller, now_ms } => {
                self.update_log(log, expected_version, ledgers, &caller, now_ms, true)
            }
            Command::DeleteLog { name, caller } => self.delete_log(&name, &caller, false, None),
            Command::DeleteLogAndSweep { name, caller } => self.delete_log(&name, &caller, true, None),
            Command::DeleteLogFenced { name, expected_version, caller } => {
                self.delete_log(&name, &caller, true, Some(expected_version))
            }
            Command::PutCursor { cursor, expected_version, seek, now_ms, caller } => {
                self.put_cursor(cursor, expected_version, seek, now_ms, &caller)
            }
            Command::DeleteCursor { log, name, caller } => self.delete_cursor(&log, &name, &caller),
            Command::DeleteLedgerAs { ledger_id, caller } => {
                let stored = self.ledgers.get(&ledger_id).ok_or(Refusal::NoSuchLedger(ledger_id))?;
                ledger_right(&stored, None, &caller)?;
                // A log's ledger goes with a trim or the log's deletion:
                // deleting it alone would lose records the log still lists.
                if let Some(log) = self.log_listing(ledger_id, "") {
                    return Err(Refusal::LedgerInLog(format!(
                        "ledger {ledger_id} is in log {log}: trim the log or delete it instead"
                    )));
                }
                self.try_apply(Command::DeleteLedger { ledger_id })
            }
            Command::RenewLockAs { name, lock_id, now_ms, caller } => {
                self.lock_grant_is_callers(&name, lock_id, &caller, false)?;
                self.try_apply(Command::RenewLock { name, lock_id, now_ms })
            }
            Command::ReleaseLockAs { name, lock_id, caller } => {
                self.lock_grant_is_callers(&name, lock_id, &caller, true)?;
                self.try_apply(Command::ReleaseLock { name, lock_id })
            }
            Command::RenewLock { name, lock_id, now_ms } => {
                let lock = self.locks.get_mut(&name).filter(|l| l.lock_id == lock_id && l.expires_at_ms > now_ms);
                let Some(lock) = lock else {
                    return Err(Refusal::LeaseExpired(format!("lock {name} grant {lock_id} is not current")));
                };
                lock.expires_at_ms = now_ms.saturating_add(lock.lease_ms);
                let l = lock.clone();
                Ok((Outcome::Lock(l), vec![Touched::Lock(name)]))
            }
            Command::SetBookieState { bookie_id, state, now_ms } => self.set_bookie_state(bookie_id, state, now_ms),
            Command::PutAuditReport { report } => {
                if report.len() > 64 * 1024 {
                    return Err(Refusal::BadRequest("an audit report is at most 64 KiB".into()));
                }
                self.audit_report = report;
                Ok((Outcome::Nothing, vec![Touched::AuditReport]))
            }
            Command::ReleaseLock { name, lock_id } => {
                if self.locks.get(&name).is_some_and(|l| l.lock_id == lock_id) {
                    self.locks.remove(&name);
                    return Ok((Outcome::Released, vec![Touched::Lock(name)]));
                }
                // Releasing a grant one no longer holds is a no-op, not an error:
                // the lease may have ended and another owner taken over.
                Ok((Outcome::Released, Vec::new()))
            }
        }
    }

    /// A grant (`lock_id` of `name`, when it is the current one) is renewed
    /// or released only by the certificate identity it was granted to; the
    /// operator may also release it (a stuck holder). A grant that is no
    /// longer current is nobody's: the command is then a no-op or expired,
    /// as before.
    fn lock_grant_is_callers(&self, name: &str, lock_id: u64, caller: &str, release: bool) -> Result<(), Refusal> {
        match self.locks.get(name) {
            Some(l) if l.lock_id == lock_id && lock_owner_identity(&l.owner) != caller => {
                if release && caller.starts_with("admin/") {
                    return Ok(());
                }
                Err(Refusal::PermissionDenied(format!(
                    "lock {name} grant {lock_id} is {}'s, not {caller}'s",
                    lock_owner_identity(&l.owner)
                )))
            }
            _ => Ok(()),
        }
    }

    fn set_bookie_state(
        &mut self,
        bookie_id: String,
        state: BookieState,
        now_ms: u64,
    ) -> Result<(Outcome, Vec<Touched>), Refusal> {
        let current = self.retirements.get(&bookie_id).map(|r| r.state);
        let registered = self.bookies.get(&bookie_id).cloned();
        match state {
            BookieState::Decommissioning => {
                if current == Some(BookieState::Decommissioned) {
                    return Err(Refusal::Decommissioned(format!("bookie {bookie_id} is decommissioned already")));
                }
                // Known: registered now, or it registered once (a down bookie
                // can be drained; BookKeeper even requires it to be down).
                if registered.is_none() && !self.cookies.contains_key(&bookie_id) {
                    return Err(Refusal::NoSuchBookie(bookie_id));
                }
                if current.is_none() {
                    self.check_capacity_without(&bookie_id)?;
                }
                let r = self.retirements.entry(bookie_id.clone()).or_insert_with(|| Retirement {
                    bookie_id: bookie_id.clone(),
                    state: BookieState::Decommissioning,
                    requested_at_ms: now_ms,
                    retired_at_ms: 0,
                    last_seen: None,
                });
                if registered.is_some() {
                    r.last_seen = registered;
                }
            }
            BookieState::Decommissioned => {
                match current {
                    Some(BookieState::Decommissioned) => {}
                    Some(_) => {
                        // Retiring a bookie some ledger still names would lose
                        // that ledger's copies on it: refuse.
                        let holding: Vec<u64> =
                            self.ledgers.heads().filter(|l| l.names(&bookie_id)).map(|l| l.ledger_id).take(5).collect();
                        if !holding.is_empty() {
                            return Err(Refusal::BadRequest(format!(
                                "bookie {bookie_id} still holds copies of ledgers {holding:?}: it is retired only once drained"
                            )));
                        }
                        let r = self.retirements.get_mut(&bookie_id).expect("current is Some");
                        r.state = BookieState::Decommissioned;
                        r.retired_at_ms = now_ms;
                        if registered.is_some() {
                            r.last_seen = registered;
                        }
                    }
                    None => {
                        return Err(Refusal::BadRequest(format!(
                            "bookie {bookie_id} is not being decommissioned: decommission it first"
                        )))
                    }
                }
            }
            BookieState::Available => match current {
                Some(BookieState::Decommissioned) => {
                    return Err(Refusal::Decommissioned(format!(
                        "bookie {bookie_id} is decommissioned; it cannot come back under this id"
                    )))
                }
                Some(_) => {
                    self.retirements.remove(&bookie_id);
                }
                None if registered.is_some() || self.cookies.contains_key(&bookie_id) => {}
                None => return Err(Refusal::NoSuchBookie(bookie_id)),
            },
            BookieState::ReadOnly => {
                return Err(Refusal::BadRequest(
                    "the operator sets decommissioning, decommissioned or available; read-only is the bookie's own"
                        .into(),
                ))
            }
        }
        self.bookies_version += 1;
        let view = self.bookie_view(&bookie_id).ok_or_else(|| Refusal::NoSuchBookie(bookie_id.clone()))?;
        Ok((Outcome::BookieState(view), vec![Touched::Retirement(bookie_id), Touched::Counters]))
    }

    /// Draining `bookie_id` must leave enough writable bookies for every
    /// ledger that names it to move away (its writers replace it by ensemble
    /// change): otherwise their writers would fail with nowhere to go.
    fn check_capacity_without(&self, bookie_id: &str) -> Result<(), Refusal> {
        let writable = self
            .bookies
            .values()
            .filter(|b| b.bookie_id != bookie_id && b.state == BookieState::Available)
            .filter(|b| self.operator_state(&b.bookie_id).is_none())
            .count();
        let needed = self.ledgers.heads().filter(|l| l.names(bookie_id)).max_by_key(|l| l.ensemble_size);
        match needed {
            Some(l) if (l.ensemble_size as usize) > writable => Err(Refusal::BadRequest(format!(
                "decommissioning bookie {bookie_id} would leave {writable} writable bookies, and ledger {} needs {}: add a bookie first",
                l.ledger_id, l.ensemble_size
            ))),
            _ => Ok(()),
        }
    }

    /// A retired bookie is named by no ledger, for good: its copies are
    /// nobody's any more (invariant: retire only when no ledger names it,
    /// and never name it after).
    fn refuse_retired(&self, ids: &[String]) -> Result<(), Refusal> {
        match ids.iter().find(|id| self.operator_state(id) == Some(BookieState::Decommissioned)) {
            Some(id) => Err(Refusal::Decommissioned(format!("bookie {id} is decommissioned and holds no ledger"))),
            None => Ok(()),
        }
    }

    /// A bookie as listed: its registration (or, when it has none, its
    /// decommissioning's last-seen record), with the operator's state over
    /// its own.
    pub fn bookie_view(&self, bookie_id: &str) -> Option<Bookie> {
        let r = self.retirements.get(bookie_id);
        let mut b = match (self.bookies.get(bookie_id), r) {
            (Some(b), _) => b.clone(),
            (None, Some(r)) => r.last_seen.clone().unwrap_or_else(|| Bookie {
                bookie_id: bookie_id.to_string(),
                address: String::new(),
                rack: String::new(),
                instance_id: self.cookies.get(bookie_id).cloned().unwrap_or_default(),
                state: r.state,
                total_disk_bytes: 0,
                free_disk_bytes: 0,
                lease_id: 0,
                lease_ms: 0,
                expires_at_ms: 0,
            }),
            (None, None) => return None,
        };
        if let Some(r) = r {
            b.state = r.state;
        }
        Some(b)
    }

    /// The operator's state for a bookie, if set.
    pub fn operator_state(&self, bookie_id: &str) -> Option<BookieState> {
        self.retirements.get(bookie_id).map(|r| r.state)
    }

    /// Registered bookies as listed, and the decommissioning or retired ones
    /// without a registration.
    pub fn list_bookies(&self) -> (Vec<Bookie>, Vec<Bookie>) {
        let live = self.bookies.keys().filter_map(|id| self.bookie_view(id)).collect();
        let retired = self
            .retirements
            .keys()
            .filter(|id| !self.bookies.contains_key(*id))
            .filter_map(|id| self.bookie_view(id))
            .collect();
        (live, retired)
    }

    /// How many ledgers name `bookie_id` in an ensemble, and how many marks name it.
    pub fn bookie_load(&self, bookie_id: &str) -> (u64, u64) {
        let ledgers = self.ledgers.heads().filter(|l| l.names(bookie_id)).count() as u64;
        let marks = self.marks.values().filter(|m| m.missing.iter().any(|b| b == bookie_id)).count() as u64;
        (ledgers, marks)
    }

    /// The lock `name` if someone holds it under a live lease at `now_ms`.
    pub fn live_lock(&self, name: &str, now_ms: u64) -> Option<&Lock> {
        self.locks.get(name).filter(|l| l.expires_at_ms > now_ms)
    }

    /// Marks after `start_after` (exclusive), at most `limit`, and whether more follow.
    pub fn list_marks(&self, start_after: Option<u64>, limit: usize) -> (Vec<Mark>, Option<u64>) {
        let from = start_after.map_or(0, |s| s.saturating_add(1));
        let mut it = self.marks.range(from..).map(|(_, m)| m.clone());
        let marks: Vec<Mark> = it.by_ref().take(limit).collect();
        let next = if it.next().is_some() { marks.last().map(|m| m.ledger_id) } else { None };
        (marks, next)
    }

    /// What an update may change: state forward only, ensembles appended or
    /// their bookies replaced (re-replication), never the quorums; nothing
    /// once closed.
    fn validate_update(old: &Ledger, new: &Ledger) -> Result<(), Refusal> {
        let bad = |m: &str| Err(Refusal::BadRequest(m.to_string()));
        if old.state == LedgerState::Closed {
            // Replacing bookies in a closed ledger's ensembles (re-replication)
            // is the one change allowed: everything else must stay as it is.
            let same_shape = new.ensembles.len() == old.ensembles.len()
                && new.ensembles.iter().zip(&old.ensembles).all(|(n, o)| n.first_entry_id == o.first_entry_id);
            let rest_same = Ledger { ensembles: old.ensembles.clone(), version: old.version, ..new.clone() } == *old;
            if !same_shape || !rest_same {
                return bad("a closed ledger's metadata is final (only its ensembles' bookies may be replaced)");
            }
        }
        if (new.ensemble_size, new.write_quorum, new.ack_quorum)
            != (old.ensemble_size, old.write_quorum, old.ack_quorum)
        {
            return bad("quorum sizes are fixed at creation");
        }
        if new.created_at_ms != old.created_at_ms || new.digest_type != old.digest_type {
            return bad("creation time and digest type are fixed at creation");
        }
        if old.state == LedgerState::InRecovery && new.state == LedgerState::Open {
            return bad("a ledger in recovery cannot reopen");
        }
        if new.ensembles.len() < old.ensembles.len() || new.ensembles.is_empty() {
            return bad("ensembles cannot be removed");
        }
        for (i, seg) in new.ensembles.iter().enumerate() {
            validate_ensemble(&seg.bookie_ids, &seg.instance_ids, new.ensemble_size)?;
            if let Some(o) = old.ensembles.get(i) {
                if o.first_entry_id != seg.first_entry_id {
                    return bad("an existing ensemble's first entry id cannot change");
                }
            }
            if i > 0 && seg.first_entry_id < new.ensembles[i - 1].first_entry_id {
                return bad("ensembles must be ordered by first entry id");
            }
        }
        if new.ensembles[0].first_entry_id != 0 {
            return bad("the first ensemble starts at entry 0");
        }
        if new.state == LedgerState::Closed && new.last_entry_id < -1 {
            return bad("a closed ledger's last entry id is -1 or more");
        }
        validate_custom(&new.custom)
    }

    /// Ledger ids after `start_after` (exclusive), at most `limit`, and whether more follow.
    pub fn list_ledgers(&self, start_after: Option<u64>, limit: usize) -> (Vec<u64>, Option<u64>) {
        let from = start_after.map_or(0, |s| s.saturating_add(1));
        let mut it = self.ledgers.ids_from(from);
        let ids: Vec<u64> = it.by_ref().take(limit).collect();
        let next = if it.next().is_some() { ids.last().copied() } else { None };
        (ids, next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new_ledger(e: u32, qw: u32, qa: u32) -> NewLedger {
        NewLedger {
            ensemble_size: e,
            write_quorum: qw,
            ack_quorum: qa,
            bookie_ids: (1..=e).map(|i| format!("b{i}")).collect(),
            instance_ids: vec![],
            custom: BTreeMap::new(),
            now_ms: 1000,
        }
    }

    fn create(e: u32, qw: u32, qa: u32) -> Command {
        Command::CreateLedger(new_ledger(e, qw, qa))
    }

    /// Registers bookie `id` with a 1 s lease; its lease id.
    fn register(s: &mut MetaState, id: &str, now_ms: u64) -> u64 {
        let b = Bookie {
            bookie_id: id.into(),
            address: format!("{id}:3181"),
            rack: "r".into(),
            instance_id: format!("{id}-i1"),
            state: BookieState::Available,
            total_disk_bytes: 0,
            free_disk_bytes: 0,
            lease_id: 0,
            lease_ms: 0,
            expires_at_ms: 0,
        };
        match s.apply(Command::RegisterBookie { bookie: b, lease_ms: 1000, now_ms }).0 {
            Outcome::Registered { lease_id } => lease_id,
            o => panic!("{o:?}"),
        }
    }

    fn set(s: &mut MetaState, id: &str, state: BookieState) -> Outcome {
        s.apply(Command::SetBookieState { bookie_id: id.into(), state, now_ms: 5000 }).0
    }

    fn create_once(request_id: &str) -> Command {
        Command::CreateLedgerOnce { request_id: request_id.into(), ledger: new_ledger(3, 3, 2) }
    }

    /// `CreateLedger` became a newtype variant around `NewLedger`; a Raft
    /// log entry written as the old struct variant decodes as the same
    /// command.
    #[test]
    fn a_create_logged_before_new_ledger_existed_decodes_unchanged() {
        #[derive(Serialize)]
        enum Before {
            CreateLedger {
                ensemble_size: u32,
                write_quorum: u32,
                ack_quorum: u32,
                bookie_ids: Vec<String>,
                instance_ids: Vec<String>,
                custom: BTreeMap<String, Vec<u8>>,
                now_ms: u64,
            },
        }
        let n = new_ledger(3, 2, 2);
        let before = Before::CreateLedger {
            ensemble_size: n.ensemble_size,
            write_quorum: n.write_quorum,
            ack_quorum: n.ack_quorum,
            bookie_ids: n.bookie_ids.clone(),
            instance_ids: vec!["i1".into(), "i2".into(), "i3".into()],
            custom: BTreeMap::from([("k".into(), b"v".to_vec())]),
            now_ms: n.now_ms,
        };
        let bytes = postcard::to_stdvec(&before).unwrap();
        let after = NewLedger {
            instance_ids: vec!["i1".into(), "i2".into(), "i3".into()],
            custom: BTreeMap::from([("k".into(), b"v".to_vec())]),
            ..n
        };
        assert_eq!(postcard::from_bytes::<Command>(&bytes).unwrap(), Command::CreateLedger(after.clone()));
        assert_eq!(postcard::to_stdvec(&Command::CreateLedger(after)).unwrap(), bytes);
    }

    /// Issue #19 item 7: a creation retried after an unknown outcome (its
    /// leader died) gets the ledger its first attempt made, never a second.
    #[test]
    fn a_creation_retried_with_its_request_id_creates_one_ledger() {
        let mut s = MetaState::default();
        let (first, touched) = s.apply(create_once("r-1"));
        let first = ledger(first);
        assert!(touched.contains(&Touched::Create("r-1".into())));
        let (again, touched) = s.apply(create_once("r-1"));
        assert_eq!(ledger(again), first, "the retry answers the same ledger");
        assert!(touched.is_empty(), "and changes nothing");
        let other = ledger(s.apply(create_once("r-2")).0);
        assert_eq!(other.ledger_id, first.ledger_id + 1);
        assert_eq!(s.ledgers.len(), 2);
        // Deleted since: the retry is told so, and nothing is created.
        s.apply(Command::DeleteLedger { ledger_id: first.ledger_id });
        assert_eq!(s.apply(create_once("r-1")).0, Outcome::Refused(Refusal::NoSuchLedger(first.ledger_id)));
        assert_eq!(s.ledgers.len(), 1);
        for bad in ["", &"x".repeat(REQUEST_ID_MAX_BYTES + 1)] {
            assert!(matches!(s.apply(create_once(bad)).0, Outcome::Refused(Refusal::BadRequest(_))), "{bad:?}");
        }
    }

    #[test]
    fn request_ids_are_forgotten_oldest_first_past_the_bound() {
        let mut s = MetaState::default();
        let mut forgotten = Vec::new();
        for i in 0..=CREATES_KEPT {
            let (o, touched) = s.apply(create_once(&format!("r-{i}")));
            ledger(o);
            forgotten
                .extend(touched.into_iter().filter(|t| matches!(t, Touched::Create(r) if !s.creates.contains_key(r))));
        }
        assert_eq!(s.creates.len(), CREATES_KEPT + 1 - CREATES_KEPT / 2);
        assert_eq!(forgotten.len(), CREATES_KEPT / 2, "each forgotten id is persisted as removed");
        assert!(!s.creates.contains_key("r-0") && s.creates.contains_key(&format!("r-{CREATES_KEPT}")));
    }

    #[test]
    fn decommissioning_drains_then_retires_for_good() {
        let mut s = MetaState::default();
        for b in ["b1", "b2", "b3", "b4"] {
            register(&mut s, b, 1000);
        }
        let l = ledger(s.apply(create(3, 3, 2)).0);
        assert!(matches!(
            set(&mut s, "nobody", BookieState::Decommissioning),
            Outcome::Refused(Refusal::NoSuchBookie(_))
        ));
        assert!(matches!(set(&mut s, "b1", BookieState::ReadOnly), Outcome::Refused(Refusal::BadRequest(_))));
        assert!(matches!(set(&mut s, "b1", BookieState::Decommissioned), Outcome::Refused(Refusal::BadRequest(_))));
        let v = s.bookies_version;
        // With b1 draining, b2..b4 can hold the E=3 ledger; a second drain
        // would leave 2 writable bookies for it: refused.
        let Outcome::BookieState(b) = set(&mut s, "b1", BookieState::Decommissioning) else { panic!() };
        let Outcome::Refused(Refusal::BadRequest(why)) = set(&mut s, "b2", BookieState::Decommissioning) else {
            panic!()
        };
        assert!(why.contains("would leave 2 writable bookies"), "{why}");
        assert_eq!(b.state, BookieState::Decommissioning);
        assert!(s.bookies_version > v, "watchers must see the change");
        assert_eq!(s.bookie_load("b1"), (1, 0));
        // The lease ends (the bookie is down): still listed, as last seen.
        s.apply(Command::ExpireLeases { now_ms: 10_000 });
        let (live, retired) = s.list_bookies();
        assert!(live.is_empty());
        assert_eq!(retired.len(), 1);
        assert_eq!((retired[0].address.as_str(), retired[0].state), ("b1:3181", BookieState::Decommissioning));
        // Not retired while a ledger names it.
        let Outcome::Refused(Refusal::BadRequest(why)) = set(&mut s, "b1", BookieState::Decommissioned) else {
            panic!()
        };
        assert!(why.contains(&l.ledger_id.to_string()), "{why}");
        // Re-replicated: b4 replaces b1.
        let mut moved = l.clone();
        moved.ensembles[0].bookie_ids[0] = "b4".into();
        ledger(s.apply(Command::UpdateLedger { ledger: moved.clone(), expected_version: l.version }).0);
        assert!(matches!(set(&mut s, "b1", BookieState::Decommissioned), Outcome::BookieState(_)));
        // Idempotent; no way back; the id cannot register or be named again.
        assert!(matches!(set(&mut s, "b1", BookieState::Decommissioned), Outcome::BookieState(_)));
        assert!(matches!(set(&mut s, "b1", BookieState::Available), Outcome::Refused(Refusal::Decommissioned(_))));
        assert!(matches!(
            set(&mut s, "b1", BookieState::Decommissioning),
            Outcome::Refused(Refusal::Decommissioned(_))
        ));
        let b1 = Bookie { instance_id: "new".into(), ..retired[0].clone() };
        assert!(matches!(
            s.apply(Command::RegisterBookie { bookie: b1, lease_ms: 1000, now_ms: 20_000 }).0,
            Outcome::Refused(Refusal::Decommissioned(_))
        ));
        assert!(matches!(s.apply(create(3, 3, 2)).0, Outcome::Refused(Refusal::Decommissioned(_))));
        let mut back = moved.clone();
        back.ensembles[0].bookie_ids[0] = "b1".into();
        assert!(matches!(
            s.apply(Command::UpdateLedger { ledger: back, expected_version: l.version + 1 }).0,
            Outcome::Refused(Refusal::Decommissioned(_))
        ));
    }

    #[test]
    fn a_bookie_retired_from_an_empty_tail_segment_does_not_block_later_repairs() {
        let mut s = MetaState::default();
        for b in ["b1", "b2", "b3", "b4", "b5"] {
            register(&mut s, b, 1000);
        }
        let l = ledger(s.apply(create(3, 3, 2)).0);
        // An ensemble change at 10 put b4 in; the ledger closed at 9: that
        // segment never held an entry.
        let mut changed = l.clone();
        changed.ensembles.push(Segment {
            first_entry_id: 10,
            bookie_ids: vec!["b1".into(), "b4".into(), "b3".into()],
            instance_ids: vec![],
        });
        changed.state = LedgerState::Closed;
        changed.last_entry_id = 9;
        let closed = ledger(s.apply(Command::UpdateLedger { ledger: changed, expected_version: l.version }).0);
        set(&mut s, "b4", BookieState::Decommissioning);
        assert!(!closed.names("b4"));
        assert!(matches!(set(&mut s, "b4", BookieState::Decommissioned), Outcome::BookieState(_)));
        // b1 is lost later: its copies move to b5, with retired b4 still in the empty segment.
        let mut moved = closed.clone();
        moved.ensembles[0].bookie_ids[0] = "b5".into();
        let out = s.apply(Command::UpdateLedger { ledger: moved, expected_version: closed.version }).0;
        assert!(matches!(out, Outcome::Ledger(_)), "{out:?}");
    }

    #[test]
    fn a_drain_can_be_cancelled_and_the_registration_shows_the_operator_state() {
        let mut s = MetaState::default();
        register(&mut s, "b1", 1000);
        set(&mut s, "b1", BookieState::Decommissioning);
        assert_eq!(s.operator_state("b1"), Some(BookieState::Decommissioning));
        // Its own re-registration (as available) does not undo the operator's word.
        register(&mut s, "b1", 2000);
        assert_eq!(s.list_bookies().0[0].state, BookieState::Decommissioning);
        assert!(matches!(set(&mut s, "b1", BookieState::Available), Outcome::BookieState(_)));
        assert_eq!(s.operator_state("b1"), None);
        assert_eq!(s.list_bookies().0[0].state, BookieState::Available);
    }

    fn ledger(o: Outcome) -> Ledger {
        match o {
            Outcome::Ledger(l) => l,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn ids_are_allocated_and_never_reused() {
        let mut s = MetaState::default();
        let a = ledger(s.apply(create(3, 3, 2)).0);
        let b = ledger(s.apply(create(3, 2, 2)).0);
        assert_eq!((a.ledger_id, b.ledger_id), (1, 2));
        assert_eq!(s.apply(Command::DeleteLedger { ledger_id: 2 }).0, Outcome::Deleted);
        assert_eq!(ledger(s.apply(create(1, 1, 1)).0).ledger_id, 3);
    }

    #[test]
    fn bad_quorums_and_ensembles_are_refused() {
        let mut s = MetaState::default();
        for (e, qw, qa) in [(3, 2, 3), (2, 3, 1), (0, 0, 0), (3, 3, 0), (65, 1, 1)] {
            assert!(matches!(s.apply(create(e, qw, qa)).0, Outcome::Refused(Refusal::BadRequest(_))), "{e} {qw} {qa}");
        }
        let dup = Command::CreateLedger(NewLedger {
            ensemble_size: 2,
            write_quorum: 2,
            ack_quorum: 2,
            bookie_ids: vec!["b1".into(), "b1".into()],
            instance_ids: vec![],
            custom: BTreeMap::new(),
            now_ms: 0,
        });
        assert!(matches!(s.apply(dup).0, Outcome::Refused(Refusal::BadRequest(_))));
        let short = Command::CreateLedger(NewLedger {
            ensemble_size: 2,
            write_quorum: 2,
            ack_quorum: 2,
            bookie_ids: vec!["b1".into(), "b2".into()],
            instance_ids: vec!["i1".into()],
            custom: BTreeMap::new(),
            now_ms: 0,
        });
        assert!(matches!(s.apply(short).0, Outcome::Refused(Refusal::BadRequest(_))));
        assert!(s.ledgers.is_empty(), "refusals change nothing");
    }

    #[test]
    fn cas_needs_the_current_version_and_bumps_it() {
        let mut s = MetaState::default();
        let l = ledger(s.apply(create(3, 3, 2)).0);
        let mut next = l.clone();
        next.ensembles.push(Segment {
            first_entry_id: 10,
            bookie_ids: vec!["b1".into(), "b2".into(), "b4".into()],
            instance_ids: vec![],
        });
        let v2 = ledger(s.apply(Command::UpdateLedger { ledger: next.clone(), expected_version: 1 }).0);
        assert_eq!(v2.version, 2);
        // A second writer with the same expectation loses.
        assert_eq!(
            s.apply(Command::UpdateLedger { ledger: next, expected_version: 1 }).0,
            Outcome::Refused(Refusal::VersionConflict { actual: 2 })
        );
    }

    #[test]
    fn a_closed_ledger_is_final_but_its_bookies_can_be_replaced() {
        let mut s = MetaState::default();
        let l = ledger(s.apply(create(3, 3, 2)).0);
        let closed = Ledger { state: LedgerState::Closed, last_entry_id: 41, length: 4200, ..l };
        let v2 = ledger(s.apply(Command::UpdateLedger { ledger: closed, expected_version: 1 }).0);
        let reopen = Ledger { state: LedgerState::Open, ..v2.clone() };
        assert!(matches!(
            s.apply(Command::UpdateLedger { ledger: reopen, expected_version: 2 }).0,
            Outcome::Refused(Refusal::BadRequest(_))
        ));
        let mut moved = v2.clone();
        moved.ensembles[0].bookie_ids[1] = "b9".into();
        assert_eq!(ledger(s.apply(Command::UpdateLedger { ledger: moved, expected_version: 2 }).0).version, 3);
    }

    #[test]
    fn leases_expire_renew_and_guard_the_bookie_id() {
        let mut s = MetaState::default();
        let reg = |inst: &str, now| Command::RegisterBookie {
            bookie: Bookie {
                bookie_id: "b1".into(),
                address: "127.0.0.1:3181".into(),
                rack: "r".into(),
                instance_id: inst.into(),
                state: BookieState::Available,
                total_disk_bytes: 0,
                free_disk_bytes: 0,
                lease_id: 0,
                lease_ms: 0,
                expires_at_ms: 0,
            },
            lease_ms: 10_000,
            now_ms: now,
        };
        let Outcome::Registered { lease_id } = s.apply(reg("i1", 0)).0 else { panic!() };
        // Another instance cannot take the id while the lease lives.
        assert!(matches!(s.apply(reg("i2", 5_000)).0, Outcome::Refused(Refusal::AlreadyExists(_))));
        assert_eq!(
            s.apply(Command::RenewLease { bookie_id: "b1".into(), lease_id, now_ms: 9_000 }).0,
            Outcome::Renewed
        );
        assert_eq!(s.apply(Command::ExpireLeases { now_ms: 18_999 }).0, Outcome::Expired(vec![]));
        assert_eq!(s.apply(Command::ExpireLeases { now_ms: 19_000 }).0, Outcome::Expired(vec!["b1".into()]));
        assert!(matches!(
            s.apply(Command::RenewLease { bookie_id: "b1".into(), lease_id, now_ms: 19_001 }).0,
            Outcome::Refused(Refusal::NoSuchBookie(_))
        ));
        // After expiry a new instance registers, and the cookie records it.
        assert!(matches!(s.apply(reg("i2", 20_000)).0, Outcome::Registered { .. }));
        assert_eq!(s.cookies["b1"], "i2");
    }

    #[test]
    fn a_new_leader_gives_every_lease_one_more_term() {
        let mut s = MetaState::default();
        let lease_id = register(&mut s, "b1", 0);
        let acq = |owner: &str, now| Command::AcquireLock {
            name: "auditor".into(),
            owner: owner.into(),
            lease_ms: 1_000,
            now_ms: now,
        };
        let Outcome::Lock(lock) = s.apply(acq("a1", 0)).0 else { panic!() };
        // No leader from 500 to 5 000: both leases ran out meanwhile.
        assert_eq!(s.apply(Command::PromoteLeases { now_ms: 5_000 }).0, Outcome::Nothing);
        assert_eq!(s.apply(Command::ExpireLeases { now_ms: 5_999 }).0, Outcome::Expired(vec![]));
        assert!(matches!(s.apply(acq("a2", 5_999)).0, Outcome::Refused(Refusal::LockHeld(_))));
        assert_eq!(
            s.apply(Command::RenewLease { bookie_id: "b1".into(), lease_id, now_ms: 5_500 }).0,
            Outcome::Renewed
        );
        assert!(matches!(
            s.apply(Command::RenewLock { name: "auditor".into(), lock_id: lock.lock_id, now_ms: 5_500 }).0,
            Outcome::Lock(_)
        ));
        // A promotion never shortens a lease, and unrenewed leases still end.
        s.apply(Command::PromoteLeases { now_ms: 5_100 });
        assert_eq!(s.apply(Command::ExpireLeases { now_ms: 6_499 }).0, Outcome::Expired(vec![]));
        assert_eq!(s.apply(Command::ExpireLeases { now_ms: 6_500 }).0, Outcome::Expired(vec!["b1".into()]));
        assert!(matches!(s.apply(acq("a2", 6_500)).0, Outcome::Lock(_)));
    }

    #[test]
    fn marks_merge_clear_and_go_with_their_ledger() {
        let mut s = MetaState::default();
        let l = ledger(s.apply(create(3, 3, 2)).0);
        let mark = |missing: &[&str]| Command::MarkUnderReplicated {
            ledger_id: l.ledger_id,
            missing: missing.iter().map(|b| b.to_string()).collect(),
            reason: "bookie lost".into(),
            now_ms: 5,
        };
        s.apply(mark(&["b2"]));
        let Outcome::Mark(Some(m)) = s.apply(mark(&["b3", "b2"])).0 else { panic!() };
        assert_eq!(m.missing, vec!["b2", "b3"]);
        let Outcome::Mark(Some(m)) =
            s.apply(Command::ClearUnderReplicated { ledger_id: l.ledger_id, bookies: vec!["b2".into()] }).0
        else {
            panic!()
        };
        assert_eq!(m.missing, vec!["b3"]);
        s.apply(mark(&["b1"]));
        s.apply(Command::DeleteLedger { ledger_id: l.ledger_id });
        assert!(s.marks.is_empty(), "a deleted ledger's mark goes with it");
        assert!(matches!(s.apply(mark(&["b1"])).0, Outcome::Refused(Refusal::NoSuchLedger(_))));
    }

    #[test]
    fn a_lock_is_exclusive_until_its_lease_ends() {
        let mut s = MetaState::default();
        let acq = |owner: &str, now| Command::AcquireLock {
            name: "auditor".into(),
            owner: owner.into(),
            lease_ms: 1000,
            now_ms: now,
        };
        let Outcome::Lock(a) = s.apply(acq("a1", 0)).0 else { panic!() };
        assert!(matches!(s.apply(acq("a2", 500)).0, Outcome::Refused(Refusal::LockHeld(_))));
        // The holder re-acquires (a restart) and renews.
        let Outcome::Lock(a2) = s.apply(acq("a1", 600)).0 else { panic!() };
        assert_ne!(a2.lock_id, a.lock_id);
        assert!(matches!(
            s.apply(Command::RenewLock { name: "auditor".into(), lock_id: a.lock_id, now_ms: 700 }).0,
            Outcome::Refused(Refusal::LeaseExpired(_))
        ));
        assert!(matches!(
            s.apply(Command::RenewLock { name: "auditor".into(), lock_id: a2.lock_id, now_ms: 1500 }).0,
            Outcome::Lock(_)
        ));
        // Expired: another owner takes it, and the old grant's release is a no-op.
        let Outcome::Lock(b) = s.apply(acq("a2", 2501)).0 else { panic!() };
        assert_eq!(b.owner, "a2");
        s.apply(Command::ReleaseLock { name: "auditor".into(), lock_id: a2.lock_id });
        assert_eq!(s.live_lock("auditor", 2600).map(|l| l.owner.as_str()), Some("a2"));
        s.apply(Command::ReleaseLock { name: "auditor".into(), lock_id: b.lock_id });
        assert!(s.live_lock("auditor", 2600).is_none());
    }

    /// A log's ownership lock is taken from a live holder only by an
    /// explicit takeover; the holder's grant is void from then on. No other
    /// lock (the auditor's election, a repair claim) can be taken so.
    #[test]
    fn only_a_logs_lock_is_taken_over_and_the_holders_grant_is_void() {
        let mut s = MetaState::default();
        let acq = |name: &str, owner: &str| Command::AcquireLock {
            name: name.into(),
            owner: owner.into(),
            lease_ms: 10_000,
            now_ms: 100,
        };
        let take = |name: &str, owner: &str| Command::TakeLock {
            name: name.into(),
            owner: owner.into(),
            lease_ms: 10_000,
            now_ms: 200,
        };
        s.logs.insert("l".into(), crate::logs::test_log("l", "gateway/1"));
        let Outcome::Lock(a) = s.apply(acq("log/l", "gateway/1:a")).0 else { panic!() };
        assert!(matches!(s.apply(acq("log/l", "gateway/2:b")).0, Outcome::Refused(Refusal::LockHeld(_))));
        // Who may not change the log may not take its lock from its holder.
        for (who, name) in [("client/app", "log/l"), ("client/app:x", "log/l"), ("gateway/2:b", "log/none")] {
            let o = s.apply(take(name, who)).0;
            assert!(
                matches!(o, Outcome::Refused(Refusal::PermissionDenied(_) | Refusal::NoSuchLog(_))),
                "{who}: {o:?}"
            );
        }
        let Outcome::Lock(b) = s.apply(take("log/l", "gateway/2:b")).0 else { panic!() };
        assert_eq!((b.owner.as_str(), b.expires_at_ms), ("gateway/2:b", 10_200));
        assert!(matches!(
            s.apply(Command::RenewLock { name: "log/l".into(), lock_id: a.lock_id, now_ms: 300 }).0,
            Outcome::Refused(Refusal::LeaseExpired(_))
        ));
        s.apply(Command::ReleaseLock { name: "log/l".into(), lock_id: a.lock_id });
        assert_eq!(
            s.live_lock("log/l", 300).map(|l| l.owner.as_str()),
            Some("gateway/2:b"),
            "the old grant releases nothing"
        );
        s.apply(acq("auditor", "a1"));
        assert!(matches!(s.apply(take("auditor", "a2")).0, Outcome::Refused(Refusal::BadRequest(_))));
        assert_eq!(s.live_lock("auditor", 300).map(|l| l.owner.as_str()), Some("a1"));
    }

    #[test]
    fn a_ledger_is_changed_by_its_owner_the_repairers_and_the_operator_and_recovered_by_anyone() {
        let caller = |role: &str, id: &str| Caller { role: role.into(), id: id.into() };
        let mut stored = Ledger {
            ledger_id: 9,
            ..ledger({
                let mut s = MetaState::default();
                for b in ["b1", "b2", "b3"] {
                    register(&mut s, b, 0);
                }
                s.apply(create(3, 3, 2)).0
            })
        };
        // Created before owners were recorded: anyone may.
        assert!(ledger_right(&stored, None, &caller("client", "7")).is_ok());
        stored.custom.insert(OWNER_KEY.into(), b"gateway/1".to_vec());
        let mut closed = stored.clone();
        closed.state = LedgerState::Closed;
        let mut recovering = stored.clone();
        recovering.state = LedgerState::InRecovery;
        for (who, may_change) in [
            (caller("gateway", "2"), true), // any gateway: scaled replicas share the API
            (caller("admin", "1"), true),
            (caller("replication-worker", "3"), true),
            (caller("client", "1"), false),
        ] {
            assert_eq!(ledger_right(&stored, Some(&closed), &who).is_ok(), may_change, "{who:?} close");
            assert_eq!(ledger_right(&stored, None, &who).is_ok(), may_change, "{who:?} delete");
            assert!(ledger_right(&stored, Some(&recovering), &who).is_ok(), "{who:?} may recover");
            assert!(ledger_right(&recovering, Some(&closed), &who).is_ok(), "{who:?} may close a recovery");
        }
        // The review's bypass: a non-owner's "recovery" must be recovery and
        // nothing more: no replaced members of earlier segments, no metadata,
        // not even in the step that marks it.
        let client = caller("client", "1");
        let mut marked_and_moved = recovering.clone();
        marked_and_moved.ensembles[0].bookie_ids[0] = "b9".into();
        assert!(ledger_right(&stored, Some(&marked_and_moved), &client).is_err());
        let mut relabelled = recovering.clone();
        relabelled.custom.insert("app".into(), b"x".to_vec());
        assert!(ledger_right(&stored, Some(&relabelled), &client).is_err());
        let mut two_segments = recovering.clone();
        two_segments.ensembles.push(Segment { first_entry_id: 10, ..two_segments.ensembles[0].clone() });
        let mut closed_moving_the_first = two_segments.clone();
        closed_moving_the_first.state = LedgerState::Closed;
        closed_moving_the_first.ensembles[0].bookie_ids[0] = "b9".into();
        assert!(ledger_right(&two_segments, Some(&closed_moving_the_first), &client).is_err());
        // Recovery's own close: the last segment's members replaced, a new one after it.
        let mut recovery_close = two_segments.clone();
        recovery_close.state = LedgerState::Closed;
        recovery_close.ensembles[1].bookie_ids[2] = "b9".into();
        recovery_close.ensembles.push(Segment { first_entry_id: 12, ..two_segments.ensembles[1].clone() });
        assert!(ledger_right(&two_segments, Some(&recovery_close), &client).is_ok());
        assert!(ledger_right(&recovering, Some(&recovering), &client).is_err(), "no changes while in recovery");
    }

    #[test]
    fn only_the_identity_a_grant_was_made_to_renews_or_releases_it() {
        let mut s = MetaState::default();
        let acq = Command::AcquireLock {
            name: "replicate/7".into(),
            owner: "replication-worker/1:abc".into(),
            lease_ms: 1000,
            now_ms: 0,
        };
        let Outcome::Lock(g) = s.apply(acq).0 else { panic!() };
        let renew = |caller: &str| Command::RenewLockAs {
            name: "replicate/7".into(),
            lock_id: g.lock_id,
            now_ms: 100,
            caller: caller.into(),
        };
        let release = |caller: &str| Command::ReleaseLockAs {
            name: "replicate/7".into(),
            lock_id: g.lock_id,
            caller: caller.into(),
        };
        // Another identity that learned the grant's id can neither renew nor release it.
        for other in ["bookie/2", "replication-worker/2", "auditor/1"] {
            assert!(matches!(s.apply(renew(other)).0, Outcome::Refused(Refusal::PermissionDenied(_))), "{other}");
            assert!(matches!(s.apply(release(other)).0, Outcome::Refused(Refusal::PermissionDenied(_))), "{other}");
        }
        assert!(matches!(s.apply(renew("admin/1")).0, Outcome::Refused(Refusal::PermissionDenied(_))));
        assert_eq!(s.live_lock("replicate/7", 200).map(|l| l.lock_id), Some(g.lock_id));
        // Its own identity renews (another process of it too); the operator may release.
        assert!(matches!(s.apply(renew("replication-worker/1")).0, Outcome::Lock(_)));
        assert_eq!(s.apply(release("admin/1")).0, Outcome::Released);
        assert!(s.live_lock("replicate/7", 200).is_none());
        assert_eq!(lock_owner_identity("auditor/1:x:y"), "auditor/1");
        assert_eq!(lock_owner_identity("auditor/1"), "auditor/1");
    }

    #[test]
    fn a_batch_applies_in_order_with_one_outcome_each() {
        let mut s = MetaState::default();
        let (o, _) = s.apply(Command::Batch(vec![create(1, 1, 1), create(2, 3, 1), create(1, 1, 1)]));
        let Outcome::Batch(outs) = o else { panic!("{o:?}") };
        assert!(matches!(&outs[0], Outcome::Ledger(l) if l.ledger_id == 1));
        assert!(matches!(&outs[1], Outcome::Refused(Refusal::BadRequest(_))), "one refusal spoils nothing else");
        assert!(matches!(&outs[2], Outcome::Ledger(l) if l.ledger_id == 2));
    }

    #[test]
    fn listing_pages_through_ids() {
        let mut s = MetaState::default();
        for _ in 0..5 {
            s.apply(create(1, 1, 1));
        }
        assert_eq!(s.list_ledgers(None, 2), (vec![1, 2], Some(2)));
        assert_eq!(s.list_ledgers(Some(2), 2), (vec![3, 4], Some(4)));
        assert_eq!(s.list_ledgers(Some(4), 2), (vec![5], None));
    }

    fn revoke(serial: &str, undo: bool) -> Command {
        Command::RevokeCertificate {
            serial: serial.into(),
            identity: "client/1".into(),
            reason: "leaked".into(),
            undo,
            now_ms: 5,
        }
    }

    /// Issue #20 item 6: the deny list. Serials are kept in one form however
    /// they are written; each change bumps the version the services poll;
    /// taking back what is not there changes nothing; bad input is refused.
    #[test]
    fn revocations_are_versioned_normalised_and_bounded() {
        let mut s = MetaState::default();
        assert_eq!(s.apply(revoke("0x00:AB:cd", false)).0, Outcome::Revocations(1));
        assert_eq!(s.revoked.keys().collect::<Vec<_>>(), ["abcd"]);
        assert_eq!(s.revoked["abcd"].identity, "client/1");
        // The same serial again: recorded anew (its note may change), a new version.
        assert_eq!(s.apply(revoke("abcd", false)).0, Outcome::Revocations(2));
        assert_eq!(s.revoked.len(), 1);
        assert_eq!(s.apply(revoke("ABCD", true)).0, Outcome::Revocations(3));
        assert!(s.revoked.is_empty());
        let (outcome, touched) = s.apply(revoke("abcd", true));
        assert_eq!((outcome, touched.len()), (Outcome::Revocations(3), 0), "nothing to take back");
        for bad in ["", "xyz", "12 34", &"a".repeat(43)] {
            assert!(matches!(s.apply(revoke(bad, false)).0, Outcome::Refused(Refusal::BadRequest(_))), "{bad:?}");
        }
        let long = Command::RevokeCertificate {
            serial: "1".into(),
            identity: String::new(),
            reason: "x".repeat(REVOCATION_NOTE_MAX + 1),
            undo: false,
            now_ms: 0,
        };
        assert!(matches!(s.apply(long).0, Outcome::Refused(Refusal::BadRequest(_))));
        assert_eq!(s.revoked_version, 3, "refusals change nothing");
        assert_eq!(normalise_serial("000"), Some("0".into()));
    }
}
