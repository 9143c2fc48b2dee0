//! The metadata RPC handlers.
//!
//! Writes go through Raft on the leader; a follower answers NOT_LEADER with
//! the leader's address. Reads are linearizable (the leader confirms it still
//! leads before reading) unless the caller asks for a stale read, which any
//! replica answers from its own state. Watches long-poll on the applied index.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use openraft::error::{ClientWriteError, RaftError};
use quire_proto::v1::{self, request_frame::Body as Req, ErrorCode};
use quire_proto::{Method, Role};
use quire_rpc::{RequestContext, ServiceError, ServiceFuture};

use crate::convert::{
    bookie_from_wire, bookie_to_wire, ledger_from_wire, ledger_to_wire, lock_to_wire, mark_to_wire,
    operator_state_from_wire, state_to_wire,
};
use crate::raft::election::{ElectionGate, PreVoteRequest};
use crate::raft::network::kind;
use crate::raft::state_machine::Shared;
use crate::raft::MetaRaft;
use crate::state::Log;
use crate::state::{self, Command, MetaState, NewLedger, Outcome, Refusal};

/// Ids per ListLedgers page, at most.
pub const LIST_LIMIT_MAX: usize = 1000;
/// Lease lengths a bookie may ask for.
pub const LEASE_MS_MIN: u64 = 1000;
/// Lease lengths a bookie may ask for.
pub const LEASE_MS_MAX: u64 = 300_000;
/// Lock names, at most this long.
pub const LOCK_NAME_MAX: usize = 256;

/// The metadata service of one replica.
pub struct MetaService {
    raft: MetaRaft,
    shared: Arc<Shared>,
    proposer: Proposer,
    gate: Arc<ElectionGate>,
}

impl MetaService {
    /// Serves `raft` and its state; `gate` hears of the leader's messages
    /// and answers pre-votes.
    pub fn new(raft: MetaRaft, shared: Arc<Shared>, gate: Arc<ElectionGate>) -> Self {
        let proposer = Proposer::start(raft.clone());
        MetaService { raft, shared, proposer, gate }
    }
}

/// Commands proposed together, at most (one log entry).
const BATCH_MAX: usize = 256;
/// Encoded command bytes proposed together, at most: a log entry stays a
/// small part of what one AppendEntries carries
/// ([`crate::raft::network::APPEND_ENTRIES_BYTES_MAX`]). 256 commands of
/// 64 KiB custom metadata each made one entry of 16 MiB, which no frame
/// could carry to a follower (issue #46 item 2).
const BATCH_BYTES_MAX: usize = 256 * 1024;
/// The largest command proposed: its entry, alone in an AppendEntries,
/// stays within what one request carries, so that it is received and
/// synced within the request's timeout (the heartbeat interval) like any.
pub const COMMAND_BYTES_MAX: usize = crate::raft::network::APPEND_ENTRIES_BYTES_MAX;
/// Commands waiting to be proposed, at most; beyond it writers wait.
const PROPOSE_QUEUE: usize = 4096;

/// A command, its encoded size, where to answer, and the proposing
/// request's span (traced requests only).
struct Proposal {
    cmd: Command,
    bytes: usize,
    reply: tokio::sync::oneshot::Sender<Result<Outcome, ServiceError>>,
    span: Option<tracing::Span>,
}

/// Batches concurrent writes into one Raft entry: while one batch is being
/// replicated and fsynced, the next gathers. openraft appends (and syncs) one
/// client write at a time, so without this every write costs a whole Raft
/// round on its own.
#[derive(Clone)]
struct Proposer {
    tx: tokio::sync::mpsc::Sender<Proposal>,
}

/// Takes proposals off `rx` into one batch: `first`, then what is queued,
/// up to [`BATCH_MAX`] commands and [`BATCH_BYTES_MAX`] bytes (the first is
/// always taken). A proposal that would pass the byte bound is returned to
/// start the next batch.
fn gather(first: Proposal, rx: &mut tokio::sync::mpsc::Receiver<Proposal>) -> (Vec<Proposal>, Option<Proposal>) {
    let mut bytes = first.bytes;
    let mut batch = vec![first];
    while batch.len() < BATCH_MAX {
        match rx.try_recv() {
            Ok(p) if bytes + p.bytes > BATCH_BYTES_MAX => return (batch, Some(p)),
            Ok(p) => {
                bytes += p.bytes;
                batch.push(p);
            }
            Err(_) => break,
        }
    }
    (batch, None)
}

impl Proposer {
    fn start(raft: MetaRaft) -> Proposer {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Proposal>(PROPOSE_QUEUE);
        tokio::spawn(async move {
            let mut carried: Option<Proposal> = None;
            loop {
                let first = match carried.take() {
                    Some(p) => p,
                    None => match rx.recv().await {
                        Some(p) => p,
                        None => break,
                    },
                };
                let (batch, next) = gather(first, &mut rx);
                carried = next;
                // The batch's Raft round joins the trace of its first traced proposal.
                let span = match batch.iter().find_map(|p| p.span.as_ref()) {
                    Some(parent) => tracing::info_span!(parent: parent, "raft.propose", commands = batch.len()),
                    None => tracing::Span::none(),
                };
                let (cmds, waiters): (Vec<Command>, Vec<_>) = batch.into_iter().map(|p| (p.cmd, p.reply)).unzip();
                let cmd = if cmds.len() == 1 { cmds.into_iter().next().expect("one") } else { Command::Batch(cmds) };
                match tracing::Instrument::instrument(write_raw(&raft, cmd), span).await {
                    Ok(Outcome::Batch(outs)) if outs.len() == waiters.len() => {
                        for (w, o) in waiters.into_iter().zip(outs) {
                            let _ = w.send(outcome(o));
                        }
                    }
                    Ok(o) if waiters.len() == 1 => {
                        let w = waiters.into_iter().next().expect("one");
                        let _ = w.send(outcome(o));
                    }
                    Ok(o) => {
                        for w in waiters {
                            let _ = w.send(Err(ServiceError::internal(format!("batch answered with {o:?}"))));
                        }
                    }
                    Err(e) => {
                        for w in waiters {
                            let _ = w.send(Err(e.clone()));
                        }
                    }
                }
            }
        });
        Proposer { tx }
    }

    /// Proposes `cmd` without waiting for it (housekeeping whose outcome
    /// nobody waits on); dropped when the queue is full.
    fn propose_later(&self, cmd: Command) {
        let (reply, _) = tokio::sync::oneshot::channel();
        let Ok(bytes) = command_bytes(&cmd) else {
            tracing::warn!("a housekeeping command over the size bound was dropped");
            return;
        };
        if self.tx.try_send(Proposal { cmd, bytes, reply, span: None }).is_err() {
            tracing::debug!("the proposal queue is full: a housekeeping command was dropped");
        }
    }

    async fn propose(&self, cmd: Command) -> Result<Outcome, ServiceError> {
        let bytes = command_bytes(&cmd)?;
        let (reply, rx) = tokio::sync::oneshot::channel();
        let span = quire_runtime::logging::tracing_active()
            .then(quire_rpc::trace::current)
            .flatten()
            .map(|_| tracing::Span::current());
        self.tx
            .send(Proposal { cmd, bytes, reply, span })
            .await
            .map_err(|_| ServiceError::new(ErrorCode::ShuttingDown, "proposer stopped"))?;
        rx.await.map_err(|_| ServiceError::new(ErrorCode::ShuttingDown, "proposer stopped"))?
    }
}

/// A command's encoded size, or why it is refused: one over
/// [`COMMAND_BYTES_MAX`] could never be replicated.
fn command_bytes(cmd: &Command) -> Result<usize, ServiceError> {
    let bytes = postcard::serialize_with_flavor(cmd, postcard::ser_flavors::Size::default())
        .map_err(|e| ServiceError::internal(format!("encode: {e}")))?;
    if bytes > COMMAND_BYTES_MAX {
        return Err(ServiceError::new(
            ErrorCode::BadRequest,
            format!("a metadata change of {bytes} bytes exceeds the bound of {COMMAND_BYTES_MAX} bytes"),
        ));
    }
    Ok(bytes)
}

fn outcome(o: Outcome) -> Result<Outcome, ServiceError> {
    match o {
        Outcome::Refused(r) => Err(refusal(r)),
        o => Ok(o),
    }
}

/// The leader's wall clock, in milliseconds, stamped into commands.
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

fn refusal(r: Refusal) -> ServiceError {
    let (code, msg) = match r {
        Refusal::BadRequest(m) => (ErrorCode::BadRequest, m),
        Refusal::NoSuchLedger(id) => (ErrorCode::NoSuchLedger, format!("no ledger {id}")),
        Refusal::VersionConflict { actual } => (ErrorCode::VersionConflict, format!("stored version is {actual}")),
        Refusal::NoSuchBookie(id) => (ErrorCode::NoSuchBookie, format!("no bookie {id} is registered")),
        Refusal::LeaseExpired(m) => (ErrorCode::LeaseExpired, m),
        Refusal::AlreadyExists(m) => (ErrorCode::AlreadyExists, m),
        Refusal::LockHeld(m) => (ErrorCode::LockHeld, m),
        Refusal::Decommissioned(m) => (ErrorCode::BookieDecommissioned, m),
        Refusal::PermissionDenied(m) => (ErrorCode::PermissionDenied, m),
        Refusal::NoSuchLog(name) => (ErrorCode::NoSuchLog, format!("no log {name}")),
        Refusal::NotFound(m) => (ErrorCode::NotFound, m),
        Refusal::LedgerInLog(m) => (ErrorCode::LedgerInLog, m),
    };
    ServiceError::new(code, msg)
}

fn not_leader(leader: Option<&openraft::BasicNode>) -> ServiceError {
    let mut e = ServiceError::new(ErrorCode::NotLeader, "this replica is not the Raft leader");
    e.leader_hint = leader.map(|n| n.addr.clone());
    e
}

async fn write_raw(raft: &MetaRaft, cmd: Command) -> Result<Outcome, ServiceError> {
    match raft.client_write(cmd).await {
        Ok(resp) => Ok(resp.data),
        Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => Err(not_leader(f.leader_node.as_ref())),
        Err(e) => Err(ServiceError::new(ErrorCode::MetadataUnavailable, e.to_string())),
    }
}

/// Waits until this replica may answer a linearizable read.
async fn read_barrier(raft: &MetaRaft, stale_ok: bool) -> Result<(), ServiceError> {
    if stale_ok {
        return Ok(());
    }
    match raft.ensure_linearizable().await {
        Ok(_) => Ok(()),
        Err(e) => match e.forward_to_leader() {
            Some(f) => Err(not_leader(f.leader_node.as_ref())),
            None => Err(ServiceError::new(ErrorCode::MetadataUnavailable, e.to_string())),
        },
    }
}

fn log_outcome(o: Outcome) -> Result<(v1::LogMetadata, Vec<v1::LedgerMetadata>), ServiceError> {
    match o {
        Outcome::Log(l, ledgers) => Ok((l.to_wire(), ledgers.iter().map(ledger_to_wire).collect())),
        other => Err(ServiceError::internal(format!("unexpected outcome {other:?}"))),
    }
}

fn ledger_outcome(o: Outcome) -> Result<v1::LedgerMetadata, ServiceError> {
    match o {
        Outcome::Ledger(l) => Ok(ledger_to_wire(&l)),
        other => Err(ServiceError::internal(format!("unexpected outcome {other:?}"))),
    }
}

impl quire_rpc::Service for MetaService {
    fn serves(&self, m: Method) -> bool {
        m.service() == quire_proto::method::ServiceKind::Metadata
    }

    fn call(&self, ctx: RequestContext, body: Req) -> ServiceFuture {
        let raft = self.raft.clone();
        let shared = self.shared.clone();
        let proposer = self.proposer.clone();
        let gate = self.gate.clone();
        Box::pin(async move {
            match body {
                Req::Raft(r) => raft_rpc(&raft, &gate, &ctx.peer, r).await,
                Req::CreateLedger(c) => {
                    let mut custom: std::collections::BTreeMap<String, Vec<u8>> =
                        c.custom.into_iter().map(|(k, v)| (k, v.to_vec())).collect();
                    // The owner is the creator's certificate; the reserved
                    // keys are not the creator's to set (but a gateway names
                    // the HTTP principal it creates for).
                    if let Some(k) = custom.keys().find(|k| {
                        k.starts_with(state::RESERVED_PREFIX)
                            && !(k.as_str() == state::PRINCIPAL_KEY && ctx.peer.role == Role::Gateway)
                    }) {
                        return Err(ServiceError::bad_request(format!(
                            "custom metadata key {k:?} is reserved (quire.* is the metadata service's)"
                        )));
                    }
                    custom.insert(state::OWNER_KEY.into(), ctx.peer.to_string().into_bytes());
                    let ledger = NewLedger {
                        ensemble_size: c.ensemble_size,
                        write_quorum: c.write_quorum,
                        ack_quorum: c.ack_quorum,
                        bookie_ids: c.bookie_ids,
                        instance_ids: c.instance_ids,
                        custom,
                        now_ms: now_ms(),
                    };
                    let cmd = match c.request_id {
                        r if r.is_empty() => Command::CreateLedger(ledger),
                        request_id => Command::CreateLedgerOnce { request_id, ledger },
                    };
                    let l = ledger_outcome(proposer.propose(cmd).await?)?;
                    Ok(v1::CreateLedgerResponse { ledger: Some(l) }.into())
                }
                Req::GetLedger(g) => {
                    read_barrier(&raft, g.stale_ok).await?;
                    let st = shared.state.read().expect("state lock");
                    let l = st.ledgers.get(&g.ledger_id).ok_or_else(|| refusal(Refusal::NoSuchLedger(g.ledger_id)))?;
                    Ok(v1::GetLedgerResponse { ledger: Some(ledger_to_wire(&l)) }.into())
                }
                Req::UpdateLedger(u) => {
                    let wire = u.ledger.ok_or_else(|| ServiceError::bad_request("update without a ledger"))?;
                    let ledger = ledger_from_wire(&wire).map_err(ServiceError::bad_request)?;
                    let caller = caller_of(&ctx.peer);
                    let cmd = Command::UpdateLedgerAs { ledger, expected_version: u.expected_version, caller };
                    let l = ledger_outcome(proposer.propose(cmd).await?)?;
                    Ok(v1::UpdateLedgerResponse { ledger: Some(l) }.into())
                }
                Req::DeleteLedger(d) => {
                    let cmd = Command::DeleteLedgerAs { ledger_id: d.ledger_id, caller: caller_of(&ctx.peer) };
                    proposer.propose(cmd).await?;
                    Ok(v1::DeleteLedgerResponse {}.into())
                }
                Req::ListLedgers(l) => {
                    read_barrier(&raft, false).await?;
                    let limit = match l.limit as usize {
                        0 => 100,
                        n => n.min(LIST_LIMIT_MAX),
                    };
                    let state = shared.state.read().expect("state lock");
                    let (ids, next) = state.list_ledgers(l.start_after, limit);
                    let next_ledger_id = state.next_ledger_id.max(1);
                    drop(state);
                    Ok(v1::ListLedgersResponse { ledger_ids: ids, next, next_ledger_id }.into())
                }
                Req::WatchLedger(w) => {
                    let timeout = Duration::from_millis(w.timeout_ms.into())
                        .min(ctx.deadline.saturating_duration_since(tokio::time::Instant::now()));
                    let id = w.ledger_id;
                    let after = w.after_version;
                    let (st, timed_out) = watch(&shared, timeout, |s| match s.ledgers.get(&id) {
                        Some(l) if l.version > after => Some(Some(ledger_to_wire(&l))),
                        None => Some(None),
                        Some(_) => None,
                    })
                    .await;
                    match st {
                        Some(Some(l)) => {
                            Ok(v1::WatchLedgerResponse { ledger: Some(l), timed_out: false, deleted: false }.into())
                        }
                        Some(None) => {
                            Ok(v1::WatchLedgerResponse { ledger: None, timed_out: false, deleted: true }.into())
                        }
                        None => {
                            let cur =
                                shared.state.read().expect("state lock").ledgers.get(&id).as_ref().map(ledger_to_wire);
                            Ok(v1::WatchLedgerResponse { ledger: cur, timed_out, deleted: false }.into())
                        }
                    }
                }
                Req::RegisterBookie(r) => {
                    let rec = r.bookie.ok_or_else(|| ServiceError::bad_request("registration without a bookie"))?;
                    if ctx.peer.id != rec.bookie_id {
                        return Err(ServiceError::new(
                            ErrorCode::PermissionDenied,
                            format!("bookie {} may not register as {}", ctx.peer.id, rec.bookie_id),
                        ));
                    }
                    let bookie = bookie_from_wire(&rec).map_err(ServiceError::bad_request)?;
                    let lease_ms = u64::from(r.lease_ms).clamp(LEASE_MS_MIN, LEASE_MS_MAX);
                    let id = bookie.bookie_id.clone();
                    match proposer.propose(Command::RegisterBookie { bookie, lease_ms, now_ms: now_ms() }).await? {
                        Outcome::Registered { lease_id } => {
                            Ok(v1::RegisterBookieResponse { lease_id, operator_state: operator_state(&shared, &id) }
                                .into())
                        }
                        other => Err(ServiceError::internal(format!("unexpected outcome {other:?}"))),
                    }
                }
                Req::RenewLease(r) => {
                    if ctx.peer.id != r.bookie_id {
                        return Err(ServiceError::new(
                            ErrorCode::PermissionDenied,
                            "a bookie renews only its own lease",
                        ));
                    }
                    let id = r.bookie_id.clone();
                    proposer
                        .propose(Command::RenewLease { bookie_id: r.bookie_id, lease_id: r.lease_id, now_ms: now_ms() })
                        .await?;
                    Ok(v1::RenewLeaseResponse { operator_state: operator_state(&shared, &id) }.into())
                }
                Req::ListBookies(_) => {
                    read_barrier(&raft, false).await?;
                    let st = shared.state.read().expect("state lock");
                    let (live, retired) = st.list_bookies();
                    Ok(v1::ListBookiesResponse {
                        bookies: live.iter().map(bookie_to_wire).collect(),
                        version: st.bookies_version,
                        retired: retired.iter().map(bookie_to_wire).collect(),
                    }
                    .into())
                }
                Req::WatchBookies(w) => {
                    let timeout = Duration::from_millis(w.timeout_ms.into())
                        .min(ctx.deadline.saturating_duration_since(tokio::time::Instant::now()));
                    let after = w.after_version;
                    let (_, timed_out) = watch(&shared, timeout, |s| (s.bookies_version > after).then_some(())).await;
                    let st = shared.state.read().expect("state lock");
                    let (live, retired) = st.list_bookies();
                    Ok(v1::WatchBookiesResponse {
                        bookies: live.iter().map(bookie_to_wire).collect(),
                        version: st.bookies_version,
                        timed_out,
                        retired: retired.iter().map(bookie_to_wire).collect(),
                    }
                    .into())
                }
                Req::MarkUnderReplicated(m) => {
                    if ctx.peer.role == Role::Bookie && m.missing_bookie_ids != [ctx.peer.id.clone()] {
                        return Err(ServiceError::new(
                            ErrorCode::PermissionDenied,
                            format!("bookie {} may mark only its own copies missing", ctx.peer.id),
                        ));
                    }
                    let cmd = Command::MarkUnderReplicated {
                        ledger_id: m.ledger_id,
                        missing: m.missing_bookie_ids,
                        reason: m.reason,
                        now_ms: now_ms(),
                    };
                    match proposer.propose(cmd).await? {
                        Outcome::Mark(Some(mark)) => {
                            Ok(v1::MarkUnderReplicatedResponse { mark: Some(mark_to_wire(&mark)) }.into())
                        }
                        other => Err(ServiceError::internal(format!("unexpected outcome {other:?}"))),
                    }
                }
                Req::ClearUnderReplicated(c) => {
                    let cmd = Command::ClearUnderReplicated { ledger_id: c.ledger_id, bookies: c.bookie_ids };
                    match proposer.propose(cmd).await? {
                        Outcome::Mark(m) => {
                            Ok(v1::ClearUnderReplicatedResponse { mark: m.as_ref().map(mark_to_wire) }.into())
                        }
                        other => Err(ServiceError::internal(format!("unexpected outcome {other:?}"))),
                    }
                }
                Req::ListUnderReplicated(l) => {
                    read_barrier(&raft, false).await?;
                    let limit = match l.limit as usize {
                        0 => 100,
                        n => n.min(LIST_LIMIT_MAX),
                    };
                    let (marks, next) = shared.state.read().expect("state lock").list_marks(l.start_after, limit);
                    Ok(v1::ListUnderReplicatedResponse { marks: marks.iter().map(mark_to_wire).collect(), next }.into())
                }
                Req::AcquireLock(a) => {
                    if a.name.len() > LOCK_NAME_MAX || a.owner.len() > LOCK_NAME_MAX {
                        return Err(ServiceError::bad_request(format!(
                            "lock names and owner labels are at most {LOCK_NAME_MAX} bytes"
                        )));
                    }
                    if !quire_proto::role::may_lock(ctx.peer.role, &a.name) {
                        return Err(ServiceError::new(
                            ErrorCode::PermissionDenied,
                            format!("{} may not take the lock {:?}", ctx.peer, a.name),
                        ));
                    }
                    // The owner is the caller's certificate identity; the
                    // request's owner is only a label telling its processes
                    // apart (it cannot name anyone else).
                    let me = ctx.peer.to_string();
                    let owner = if a.owner.is_empty() || a.owner == me || a.owner.starts_with(&format!("{me}:")) {
                        if a.owner.is_empty() {
                            me
                        } else {
                            a.owner
                        }
                    } else {
                        format!("{me}:{}", a.owner)
                    };
                    // A log's writer lock is taken only by who may change
                    // the log (checked here for a free lock: the command
                    // replays as before; TakeLock checks it as it applies).
                    if let Some(log) = a.name.strip_prefix(crate::state::LOG_LOCK_PREFIX) {
                        let st = shared.state.read().expect("state lock");
                        if let Some(l) = st.logs.get(log) {
                            let who = ctx.peer.to_string();
                            if !crate::logs::identity_may_change(l, &who) {
                                return Err(ServiceError::new(
                                    ErrorCode::PermissionDenied,
                                    format!("{who} may not take the lock of log {log}: it is {}'s", l.creator),
                                ));
                            }
                        }
                    }
                    let lease_ms = u64::from(a.lease_ms).clamp(LEASE_MS_MIN, LEASE_MS_MAX);
                    let cmd = if a.take_over {
                        Command::TakeLock { name: a.name, owner, lease_ms, now_ms: now_ms() }
                    } else {
                        Command::AcquireLock { name: a.name, owner, lease_ms, now_ms: now_ms() }
                    };
                    match proposer.propose(cmd).await? {
                        Outcome::Lock(l) => Ok(v1::AcquireLockResponse { lock: Some(lock_to_wire(&l)) }.into()),
                        other => Err(ServiceError::internal(format!("unexpected outcome {other:?}"))),
                    }
                }
                Req::RenewLock(r) => {
                    let caller = ctx.peer.to_string();
                    let cmd = Command::RenewLockAs { name: r.name, lock_id: r.lock_id, now_ms: now_ms(), caller };
                    match proposer.propose(cmd).await? {
                        Outcome::Lock(l) => Ok(v1::RenewLockResponse { lock: Some(lock_to_wire(&l)) }.into()),
                        other => Err(ServiceError::internal(format!("unexpected outcome {other:?}"))),
                    }
                }
                Req::ReleaseLock(r) => {
                    let caller = ctx.peer.to_string();
                    proposer.propose(Command::ReleaseLockAs { name: r.name, lock_id: r.lock_id, caller }).await?;
                    Ok(v1::ReleaseLockResponse {}.into())
                }
                Req::GetLock(g) => {
                    read_barrier(&raft, false).await?;
                    let st = shared.state.read().expect("state lock");
                    Ok(v1::GetLockResponse { lock: st.live_lock(&g.name, now_ms()).map(lock_to_wire) }.into())
                }
                Req::SetBookieState(r) => {
                    let state = operator_state_from_wire(r.state).map_err(ServiceError::bad_request)?;
                    let cmd = Command::SetBookieState { bookie_id: r.bookie_id, state, now_ms: now_ms() };
                    match proposer.propose(cmd).await? {
                        Outcome::BookieState(b) => {
                            Ok(v1::SetBookieStateResponse { bookie: Some(bookie_to_wire(&b)) }.into())
                        }
                        other => Err(ServiceError::internal(format!("unexpected outcome {other:?}"))),
                    }
                }
                Req::GetBookie(g) => {
                    read_barrier(&raft, false).await?;
                    let st = shared.state.read().expect("state lock");
                    let b = st
                        .bookie_view(&g.bookie_id)
                        .ok_or_else(|| refusal(Refusal::NoSuchBookie(g.bookie_id.clone())))?;
                    let (ledgers, marks) = st.bookie_load(&g.bookie_id);
                    Ok(v1::GetBookieResponse {
                        bookie: Some(bookie_to_wire(&b)),
                        registered: st.bookies.contains_key(&g.bookie_id),
                        ledgers,
                        under_replicated_ledgers: marks,
                        decommission_requested_at_ms: st.retirements.get(&g.bookie_id).map_or(0, |r| r.requested_at_ms),
                    }
                    .into())
                }
                Req::PutAuditReport(p) => {
                    let report = p.report.ok_or_else(|| ServiceError::bad_request("no report"))?;
                    let report = prost::Message::encode_to_vec(&report);
                    proposer.propose(Command::PutAuditReport { report }).await?;
                    Ok(v1::PutAuditReportResponse {}.into())
                }
                Req::RevokeCertificate(r) => {
                    let cmd = Command::RevokeCertificate {
                        serial: r.serial,
                        identity: r.identity,
                        reason: r.reason,
                        undo: r.undo,
                        now_ms: now_ms(),
                    };
                    match proposer.propose(cmd).await? {
                        Outcome::Revocations(version) => {
                            tracing::warn!(peer = %ctx.peer, version, "certificate deny list changed");
                            Ok(v1::RevokeCertificateResponse { version }.into())
                        }
                        other => Err(ServiceError::internal(format!("unexpected outcome {other:?}"))),
                    }
                }
                // Any replica answers from its own state (a follower's list is
                // at most a heartbeat behind): every service polls this, and
                // it must keep working while a leader is being elected.
                Req::ListRevoked(l) => {
                    let timeout = Duration::from_millis(l.wait_ms.into())
                        .min(ctx.deadline.saturating_duration_since(tokio::time::Instant::now()));
                    let after = l.after_version;
                    // A replica behind the caller (it lags, or was partitioned
                    // away) waits too: it must not hand back an older list.
                    watch(&shared, timeout, |s| (s.revoked_version > after).then_some(())).await;
                    let st = shared.state.read().expect("state lock");
                    Ok(v1::ListRevokedResponse {
                        version: st.revoked_version,
                        revoked: st
                            .revoked
                            .values()
                            .map(|r| v1::RevokedCertificate {
                                serial: r.serial.clone(),
                                identity: r.identity.clone(),
                                reason: r.reason.clone(),
                                revoked_at_ms: r.revoked_at_ms,
                            })
                            .collect(),
                    }
                    .into())
                }
                Req::CreateLog(c) => {
                    let wire = c.log.ok_or_else(|| ServiceError::bad_request("create without a log"))?;
                    let log = Log::from_wire(&wire).map_err(ServiceError::bad_request)?;
                    let (caller, now_ms) = (caller_of(&ctx.peer), now_ms());
                    // The older command where it does: a replica not yet
                    // upgraded still applies it.
                    let cmd = if log.principal.is_empty() {
                        Command::CreateLog { log, caller, now_ms }
                    } else {
                        Command::CreateLogFor { principal: log.principal.clone(), log, caller, now_ms }
                    };
                    let (log, _) = log_outcome(proposer.propose(cmd).await?)?;
                    Ok(v1::CreateLogResponse { log: Some(log) }.into())
                }
                Req::GetLog(g) => {
                    read_barrier(&raft, g.stale_ok).await?;
                    let st = shared.state.read().expect("state lock");
                    let l = st.logs.get(&g.name).ok_or_else(|| refusal(Refusal::NoSuchLog(g.name.clone())))?;
                    let mut wire = l.to_wire();
                    wire.cursors = st.cursors_of(&g.name).map(quire_log::Cursor::to_wire).collect();
                    Ok(v1::GetLogResponse { log: Some(wire) }.into())
                }
                Req::UpdateLog(u) => {
                    let wire = u.log.ok_or_else(|| ServiceError::bad_request("update without a log"))?;
                    let log = Log::from_wire(&wire).map_err(ServiceError::bad_request)?;
                    let ledgers = u
                        .ledgers
                        .iter()
                        .map(|l| {
                            let wire = l.ledger.as_ref().ok_or("a ledger update without a ledger")?;
                            Ok((ledger_from_wire(wire)?, l.expected_version))
                        })
                        .collect::<Result<Vec<_>, String>>()
                        .map_err(ServiceError::bad_request)?;
                    // A takeover (a raised epoch) may leave ledgers no
                    // writer can list: swept after it, off its reply's path.
                    let takeover = shared
                        .state
                        .read()
                        .expect("state lock")
                        .logs
                        .get(&log.record.name)
                        .is_some_and(|l| l.record.epoch < log.record.epoch);
                    let name = log.record.name.clone();
                    let cmd = Command::UpdateLogCutting {
                        log,
                        expected_version: u.expected_version,
                        ledgers,
                        caller: caller_of(&ctx.peer),
                        now_ms: now_ms(),
                    };
                    let (log, ledgers) = log_outcome(proposer.propose(cmd).await?)?;
                    if takeover {
                        proposer.propose_later(Command::SweepLogLedgers { log: name });
                    }
                    Ok(v1::UpdateLogResponse { log: Some(log), ledgers }.into())
                }
                Req::DeleteLog(d) => {
                    let cmd = Command::DeleteLogFenced {
                        name: d.name,
                        expected_version: d.expected_version,
                        caller: caller_of(&ctx.peer),
                    };
                    proposer.propose(cmd).await?;
                    Ok(v1::DeleteLogResponse {}.into())
                }
                Req::ListLogs(l) => {
                    read_barrier(&raft, false).await?;
                    let limit = match l.limit as usize {
                        0 => 100,
                        n => n.min(LIST_LIMIT_MAX),
                    };
                    let (names, next) = shared.state.read().expect("state lock").list_logs(&l.start_after, limit);
                    Ok(v1::ListLogsResponse { names, next }.into())
                }
                Req::WatchLog(w) => {
                    let timeout = Duration::from_millis(w.timeout_ms.into())
                        .min(ctx.deadline.saturating_duration_since(tokio::time::Instant::now()));
                    let after = w.after_version;
                    let name = w.name;
                    let (st, timed_out) = watch(&shared, timeout, |s| match s.logs.get(&name) {
                        Some(l) if l.version > after => Some(Some(l.to_wire())),
                        None => Some(None),
                        Some(_) => None,
                    })
                    .await;
                    let (log, deleted) = match st {
                        Some(found) => {
                            let deleted = found.is_none();
                            (found, deleted)
                        }
                        None => (shared.state.read().expect("state lock").logs.get(&name).map(Log::to_wire), false),
                    };
                    Ok(v1::WatchLogResponse { log, timed_out, deleted }.into())
                }
                Req::PutCursor(p) => {
                    let wire =
                        p.cursor.ok_or_else(|| ServiceError::bad_request("a cursor request without a cursor"))?;
                    let cursor = quire_log::Cursor::from_wire(&wire);
                    let cmd = Command::PutCursor {
                        cursor,
                        expected_version: p.expected_version,
                        seek: p.seek,
                        now_ms: now_ms(),
                        caller: caller_of(&ctx.peer),
                    };
                    match proposer.propose(cmd).await? {
                        Outcome::Cursor(c) => Ok(v1::PutCursorResponse { cursor: Some(c.to_wire()) }.into()),
                        other => Err(ServiceError::internal(format!("unexpected outcome {other:?}"))),
                    }
                }
                Req::GetCursor(g) => {
                    read_barrier(&raft, g.stale_ok).await?;
                    let st = shared.state.read().expect("state lock");
                    if !st.logs.contains_key(&g.log) {
                        return Err(refusal(Refusal::NoSuchLog(g.log.clone())));
                    }
                    let c = st
                        .cursors
                        .get(&(g.log.clone(), g.name.clone()))
                        .ok_or_else(|| refusal(Refusal::NotFound(format!("no cursor {} on log {}", g.name, g.log))))?;
                    Ok(v1::GetCursorResponse { cursor: Some(c.to_wire()) }.into())
                }
                Req::DeleteCursor(d) => {
                    let cmd = Command::DeleteCursor { log: d.log, name: d.name, caller: caller_of(&ctx.peer) };
                    proposer.propose(cmd).await?;
                    Ok(v1::DeleteCursorResponse {}.into())
                }
                Req::ChangeMembership(c) => change_membership(&raft, c).await,
                Req::MetadataStatus(r) => {
                    let m = raft.metrics().borrow().clone();
                    let (voters, nodes) = voters_of(&m);
                    let st = shared.state.read().expect("state lock");
                    // `applied` moves under the state's write lock: read
                    // under its read lock, it is the index the state is at.
                    let state_applied_index = *shared.applied.borrow();
                    let state_crc32c = r
                        .with_state_digest
                        .then(|| crate::raft::state_machine::encode_snapshot(&st).map(|b| crc32c::crc32c(&b)))
                        .transpose()
                        .map_err(|e| ServiceError::new(ErrorCode::Internal, format!("encode the state: {e}")))?;
                    Ok(v1::MetadataStatusResponse {
                        replica_id: m.id,
                        raft_state: format!("{:?}", m.state).to_lowercase(),
                        term: m.current_term,
                        leader_id: m.current_leader,
                        leader_address: m.current_leader.and_then(|l| nodes.get(&l).cloned()).unwrap_or_default(),
                        last_applied_index: m.last_applied.map_or(0, |l| l.index),
                        voters,
                        under_replicated_ledgers: st.marks.len() as u64,
                        bookies: st.bookies.len() as u64,
                        audit: (!st.audit_report.is_empty())
                            .then(|| <v1::AuditReport as prost::Message>::decode(st.audit_report.as_slice()).ok())
                            .flatten(),
                        state_crc32c,
                        state_applied_index,
                    }
                    .into())
                }
                other => Err(ServiceError::new(
                    ErrorCode::UnknownMethod,
                    format!("{} is not a metadata method", Method::of_request(&other).name()),
                )),
            }
        })
    }
}

/// The caller, for the state machine's per-ledger rights.
fn caller_of(peer: &quire_rpc::PeerIdentity) -> state::Caller {
    state::Caller { role: peer.role.as_str().to_string(), id: peer.id.clone() }
}

/// The operator's state for a bookie, as its lease answers carry it.
fn operator_state(shared: &Shared, bookie_id: &str) -> i32 {
    let st = shared.state.read().expect("state lock");
    st.operator_state(bookie_id).map_or(v1::BookieState::Unspecified, state_to_wire) as i32
}

/// Waits until `check` finds something in the state, or `timeout`.
async fn watch<T>(shared: &Shared, timeout: Duration, check: impl Fn(&MetaState) -> Option<T>) -> (Option<T>, bool) {
    let mut rx = shared.applied.subscribe();
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        rx.borrow_and_update();
        if let Some(v) = check(&shared.state.read().expect("state lock")) {
            return (Some(v), false);
        }
        match tokio::time::timeout_at(deadline, rx.changed()).await {
            Ok(Ok(())) => continue,
            Ok(Err(_)) | Err(_) => return (None, true),
        }
    }
}

/// A Raft message speaks for the replica its vote (or candidacy) names: that
/// must be the sender's own certificate id, or one replica's certificate
/// could campaign, lead or install snapshots as another (issue #20 item 3).
fn sender_is(peer: &quire_rpc::PeerIdentity, claimed: Option<u64>, what: &str) -> Result<(), ServiceError> {
    if claimed.is_some_and(|id| peer.id.parse::<u64>() == Ok(id)) {
        return Ok(());
    }
    tracing::warn!(%peer, ?claimed, what, "refused a raft message that names another replica");
    Err(ServiceError::new(
        ErrorCode::PermissionDenied,
        format!("{what} names replica {claimed:?}, but the certificate is {peer}'s"),
    ))
}

async fn raft_rpc(
    raft: &MetaRaft,
    gate: &ElectionGate,
    peer: &quire_rpc::PeerIdentity,
    r: v1::RaftRequest,
) -> Result<v1::response_frame::Body, ServiceError> {
    let bad = |e: postcard::Error| ServiceError::bad_request(format!("undecodable raft message: {e}"));
    let payload = match r.kind {
        kind::APPEND_ENTRIES => {
            let req: openraft::raft::AppendEntriesRequest<crate::raft::TypeConfig> =
                postcard::from_bytes(&r.payload).map_err(bad)?;
            sender_is(peer, req.vote.leader_id().voted_for(), "append-entries")?;
            let leader = (req.vote.leader_id().term, req.vote.leader_id().voted_for().unwrap_or_default());
            let commit = req.leader_commit;
            let res = raft.append_entries(req).await;
            // Accepted from the leader of our term (a conflict too): it lives.
            if matches!(&res, Ok(a) if !matches!(a, openraft::raft::AppendEntriesResponse::HigherVote(_))) {
                gate.leader_heard();
                let matched = matches!(
                    &res,
                    Ok(openraft::raft::AppendEntriesResponse::Success
                        | openraft::raft::AppendEntriesResponse::PartialSuccess(_))
                );
                let applied = raft.metrics().borrow().last_applied;
                gate.amnesia_leader_heard(leader, matched, commit.as_ref(), applied.as_ref()).await;
            }
            postcard::to_stdvec(&res)
        }
        kind::VOTE => {
            let req: openraft::raft::VoteRequest<u64> = postcard::from_bytes(&r.payload).map_err(bad)?;
            let candidate = req.vote.leader_id().voted_for();
            sender_is(peer, candidate, "vote request")?;
            let res = if gate.may_vote(raft, candidate.unwrap_or_default(), req.last_log_id.as_ref()) {
                raft.vote(req).await
            } else {
                let vote = raft.metrics().borrow().vote;
                Ok(openraft::raft::VoteResponse::new(vote, gate.last_log_id().await, false))
            };
            if matches!(&res, Ok(v) if v.vote_granted) {
                gate.leader_heard();
            }
            postcard::to_stdvec(&res)
        }
        kind::INSTALL_SNAPSHOT => {
            let req: openraft::raft::InstallSnapshotRequest<crate::raft::TypeConfig> =
                postcard::from_bytes(&r.payload).map_err(bad)?;
            sender_is(peer, req.vote.leader_id().voted_for(), "install-snapshot")?;
            let res = raft.install_snapshot(req).await;
            if res.is_ok() {
                gate.leader_heard();
            }
            postcard::to_stdvec(&res)
        }
        kind::PRE_VOTE => {
            let req: PreVoteRequest = postcard::from_bytes(&r.payload).map_err(bad)?;
            sender_is(peer, Some(req.candidate), "pre-vote")?;
            postcard::to_stdvec(&gate.answer(raft, &req).await)
        }
        k => return Err(ServiceError::bad_request(format!("unknown raft message kind {k}"))),
    }
    .map_err(|e| ServiceError::internal(format!("encode raft response: {e}")))?;
    Ok(v1::RaftResponse { payload: payload.into() }.into())
}

/// Sets the voters: new replicas join as learners and catch up first, then
/// the joint-consensus change to exactly `voters` commits.
async fn change_membership(
    raft: &MetaRaft,
    c: v1::ChangeMembershipRequest,
) -> Result<v1::response_frame::Body, ServiceError> {
    if c.voters.is_empty() {
        return Err(ServiceError::bad_request("a membership needs at least one voter"));
    }
    let ids: std::collections::BTreeSet<u64> = c.voters.iter().map(|r| r.id).collect();
    if ids.len() != c.voters.len() || c.voters.iter().any(|r| r.address.is_empty()) {
        return Err(ServiceError::bad_request("voters need distinct ids and addresses"));
    }
    let fail = |e: RaftError<u64, ClientWriteError<u64, openraft::BasicNode>>| match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => not_leader(f.leader_node.as_ref()),
        RaftError::APIError(ClientWriteError::ChangeMembershipError(e)) => ServiceError::bad_request(e.to_string()),
        other => ServiceError::new(ErrorCode::MetadataUnavailable, other.to_string()),
    };
    let known: std::collections::BTreeSet<u64> =
        raft.metrics().borrow().membership_config.nodes().map(|(id, _)| *id).collect();
    for r in &c.voters {
        if !known.contains(&r.id) {
            // Blocks until the learner has caught up with the leader's log.
            raft.add_learner(r.id, openraft::BasicNode::new(&r.address), true).await.map_err(fail)?;
        }
    }
    raft.change_membership(ids, false).await.map_err(fail)?;
    let (voters, _) = voters_of(&raft.metrics().borrow());
    Ok(v1::ChangeMembershipResponse { voters }.into())
}

/// The voters of a replica's current membership, and every member's address.
fn voters_of(
    m: &openraft::RaftMetrics<u64, openraft::BasicNode>,
) -> (Vec<v1::Replica>, std::collections::BTreeMap<u64, String>) {
    let nodes: std::collections::BTreeMap<u64, String> =
        m.membership_config.nodes().map(|(id, n)| (*id, n.addr.clone())).collect();
    let voters = m
        .membership_config
        .membership()
        .voter_ids()
        .map(|id| v1::Replica { id, address: nodes.get(&id).cloned().unwrap_or_default() })
        .collect();
    (voters, nodes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proposal(bytes: usize) -> (Proposal, tokio::sync::oneshot::Receiver<Result<Outcome, ServiceError>>) {
        let (reply, rx) = tokio::sync::oneshot::channel();
        (Proposal { cmd: Command::ExpireLeases { now_ms: bytes as u64 }, bytes, reply, span: None }, rx)
    }

    /// A batch (one log entry) stops before its byte bound; what would pass
    /// it starts the next batch, and a single large command still goes.
    #[tokio::test]
    async fn a_batch_is_bounded_in_bytes_and_the_rest_starts_the_next() {
        let (tx, mut rx) = tokio::sync::mpsc::channel(16);
        let mut keep = Vec::new();
        for bytes in [100 * 1024, 100 * 1024, 100 * 1024, 10, BATCH_BYTES_MAX * 2] {
            let (p, r) = proposal(bytes);
            keep.push(r);
            tx.send(p).await.unwrap();
        }
        let first = rx.recv().await.unwrap();
        let (batch, next) = gather(first, &mut rx);
        assert_eq!(batch.iter().map(|p| p.bytes).collect::<Vec<_>>(), vec![100 * 1024, 100 * 1024]);
        let (batch, next) = gather(next.expect("carried"), &mut rx);
        assert_eq!(batch.iter().map(|p| p.bytes).collect::<Vec<_>>(), vec![100 * 1024, 10]);
        let (batch, next) = gather(next.expect("carried"), &mut rx);
        assert_eq!(batch.iter().map(|p| p.bytes).collect::<Vec<_>>(), vec![BATCH_BYTES_MAX * 2]);
        assert!(next.is_none());
    }

    #[test]
    fn a_command_over_the_bound_is_refused_with_a_clear_error() {
        let cmd = Command::PutAuditReport { report: vec![0; COMMAND_BYTES_MAX + 1] };
        let e = command_bytes(&cmd).unwrap_err();
        assert_eq!(e.code, ErrorCode::BadRequest);
        assert!(command_bytes(&Command::PutAuditReport { report: vec![0; 1024] }).is_ok());
    }
}
