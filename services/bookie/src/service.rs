//! The bookie's RPC handlers: the storage engine behind `rpc::Service`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use quire_proto::v1::{self, request_frame::Body as Req, ErrorCode};
use quire_proto::Method;
use quire_rpc::{RequestContext, ServiceError, ServiceFuture};
use quire_storage::{StorageError, Store};
use tokio::sync::{mpsc, oneshot};

/// What a bookie says about itself.
#[derive(Debug, Clone)]
pub struct BookieIdentity {
    /// Its id (certificate id).
    pub bookie_id: String,
    /// The instance id in its cookie.
    pub instance_id: String,
    /// Its rack, for placement.
    pub rack: String,
}

/// The bookie service.
pub struct BookieService {
    store: Arc<Store>,
    me: BookieIdentity,
    /// Directory whose filesystem BookieInfo reports.
    data_dir: std::path::PathBuf,
    /// The metadata service, when configured: consulted before the first add
    /// of a ledger this bookie has never seen.
    meta: Option<Arc<quire_metaclient::MetaClient>>,
    /// Set while the operator decommissions this bookie (learnt from the
    /// lease answers): normal adds are refused so that writers move away by
    /// ensemble change; recovery adds and reads go on.
    draining: Arc<AtomicBool>,
    /// Ledgers whose absent entries may have been lost (unclean start).
    limbo: Arc<crate::integrity::Limbo>,
    /// The garbage collector, which takes RunGc requests (bounded queue).
    gc: mpsc::Sender<crate::gc::RunRequest>,
    /// Latency of acknowledged adds, from the request to the journal's sync.
    add_seconds: Arc<quire_metrics::Histogram>,
}

impl BookieService {
    /// The add latency histogram (for /metrics).
    pub fn add_seconds(&self) -> Arc<quire_metrics::Histogram> {
        self.add_seconds.clone()
    }

    /// Serves `store`; with `meta`, unknown ledgers are checked there first.
    pub fn new(
        store: Arc<Store>,
        me: BookieIdentity,
        data_dir: std::path::PathBuf,
        meta: Option<Arc<quire_metaclient::MetaClient>>,
        draining: Arc<AtomicBool>,
        limbo: Arc<crate::integrity::Limbo>,
        gc: mpsc::Sender<crate::gc::RunRequest>,
    ) -> Self {
        BookieService {
            store,
            me,
            data_dir,
            meta,
            draining,
            limbo,
            gc,
            add_seconds: Arc::new(quire_metrics::Histogram::latency()),
        }
    }

    /// Re-replication copies are for the roles that repair: workers, a bookie
    /// refilling itself, the operator. They bypass fencing, so no writer may
    /// send one.
    /// (The RPC server refuses such a frame already, `role::allowed_body`;
    /// checked again here, per add, where the copy is taken.)
    fn check_replication(role: quire_proto::Role) -> Result<(), ServiceError> {
        if quire_proto::role::may_replicate(role) {
            Ok(())
        } else {
            Err(ServiceError::new(ErrorCode::PermissionDenied, format!("a {role} may not send replication adds")))
        }
    }

    /// A normal add to a draining bookie is refused as to a read-only one:
    /// writers handle that by replacing this bookie in their ensemble.
    fn check_draining(&self, recovery: bool) -> Result<(), ServiceError> {
        if !recovery && self.draining.load(Ordering::Relaxed) {
            return Err(ServiceError::new(
                ErrorCode::BookieReadOnly,
                format!("bookie {} is being decommissioned: it takes no new entries", self.me.bookie_id),
            ));
        }
        Ok(())
    }
}

/// Longest a bookie waits on the metadata service to check a ledger it has
/// not seen (or one in limbo) before answering METADATA_UNAVAILABLE: well
/// within a writer's add timeout (5 s by default), so that an election
/// reaches the writer as an answer, asked again, and never as the silence
/// of a failed bookie (issue #19 item 7). A failover takes about 1.5 s
/// (docs/benchmarks.md), so most checks simply wait it out.
pub const METADATA_CHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Most adds one AddEntries request may carry.
pub const MAX_ADDS_PER_REQUEST: usize = 1024;

fn outcome(l: u64, e: u64, r: Result<(), ServiceError>) -> v1::AddOutcome {
    match r {
        Ok(()) => v1::AddOutcome { ledger_id: l, entry_id: e, code: ErrorCode::Ok as i32, message: String::new() },
        Err(err) => v1::AddOutcome { ledger_id: l, entry_id: e, code: err.code as i32, message: err.message },
    }
}

impl BookieService {
    /// Seed 003's first guard: the writer names the instance it expects.
    fn check_instance(&self, expected: &str) -> Result<(), ServiceError> {
        if !expected.is_empty() && expected != self.me.instance_id {
            return Err(ServiceError::new(
                ErrorCode::WrongInstance,
                format!(
                    "this is bookie {} instance {}, not instance {expected}",
                    self.me.bookie_id, self.me.instance_id
                ),
            ));
        }
        Ok(())
    }

    /// The checks of one add of a batch whose ledgers are known (and
    /// fenced, for recovery adds) that need no storage: its outcome if
    /// refused, else the entry and whether it may pass a fence.
    fn judge(&self, a: v1::AddEntryRequest, role: quire_proto::Role) -> Result<(v1::Entry, bool), v1::AddOutcome> {
        let Some(entry) = a.entry else {
            return Err(outcome(0, 0, Err(ServiceError::bad_request("add without an entry"))));
        };
        let checked = if a.replication {
            Self::check_replication(role).and_then(|()| self.check_instance(&a.expected_instance_id))
        } else {
            self.check_instance(&a.expected_instance_id).and_then(|()| self.check_draining(a.recovery))
        };
        match checked {
            Err(err) => Err(outcome(entry.ledger_id, entry.entry_id, Err(err))),
            Ok(()) => Ok((entry, a.recovery || a.replication)),
        }
    }

    /// The adds of a batch whose ledgers are known (and fenced, for
    /// recovery adds): judged, the rest queued to the journal now, in
    /// request order, as one journal request; `refused` holds the outcome
    /// of adds of ledgers already refused. Resolves to the outcomes in order.
    fn add_queued(
        &self,
        adds: Vec<v1::AddEntryRequest>,
        role: quire_proto::Role,
        refused: &std::collections::BTreeMap<u64, ServiceError>,
    ) -> impl std::future::Future<Output = Vec<v1::AddOutcome>> + Send + 'static {
        let mut outcomes: Vec<Option<v1::AddOutcome>> = Vec::with_capacity(adds.len());
        let mut queued = Vec::with_capacity(adds.len());
        let mut to_add = Vec::with_capacity(adds.len());
        for a in adds {
            let refusal =
                a.entry.as_ref().and_then(|e| refused.get(&e.ledger_id).map(|r| (e.ledger_id, e.entry_id, r)));
            if let Some((l, e, r)) = refusal {
                outcomes.push(Some(outcome(l, e, Err(r.clone()))));
                continue;
            }
            match self.judge(a, role) {
                Ok((entry, recovery)) => {
                    queued.push((outcomes.len(), entry.ledger_id, entry.entry_id));
                    outcomes.push(None);
                    to_add.push((entry, recovery));
                }
                Err(o) => outcomes.push(Some(o)),
            }
        }
        let span = match queued.first() {
            Some((_, l, e)) => journal_span(*l, *e),
            None => tracing::Span::none(),
        };
        let (started, hist) = (std::time::Instant::now(), self.add_seconds.clone());
        let added = self.store.add_many(to_add);
        tracing::Instrument::instrument(
            async move {
                let results = added.await;
                let took = started.elapsed();
                for ((slot, l, e), r) in queued.into_iter().zip(results) {
                    if r.is_ok() {
                        hist.observe_duration(took);
                    }
                    outcomes[slot] = Some(outcome(l, e, r.map_err(to_service_error)));
                }
                outcomes.into_iter().map(|o| o.expect("every add answered")).collect()
            },
            span,
        )
    }

    /// AddEntries: each add judged as a single AddEntry would be. The checks
    /// that need a round trip (an unknown ledger's state, a recovery add's
    /// fence) run once per ledger of the batch, before its adds are queued.
    fn add_entries(&self, adds: Vec<v1::AddEntryRequest>, role: quire_proto::Role) -> ServiceFuture {
        if adds.is_empty() || adds.len() > MAX_ADDS_PER_REQUEST {
            return ready(Err(ServiceError::bad_request(format!(
                "an AddEntries request carries 1 to {MAX_ADDS_PER_REQUEST} adds, not {}",
                adds.len()
            ))));
        }
        let mut unknown = std::collections::BTreeSet::new();
        let mut to_fence = std::collections::BTreeSet::new();
        let mut unknown_copies = std::collections::BTreeSet::new();
        for a in &adds {
            if let Some(entry) = a.entry.as_ref().filter(|_| a.replication) {
                if self.meta.is_some() && !self.store.knows_ledger(entry.ledger_id) {
                    unknown_copies.insert(entry.ledger_id);
                }
            }
            if let Some(entry) = a.entry.as_ref().filter(|_| !a.replication) {
                let l = entry.ledger_id;
                if a.recovery && !self.store.is_fenced(l) {
                    to_fence.insert(l);
                } else if !a.recovery && self.meta.is_some() && self.unvouched(l) {
                    unknown.insert(l);
                }
            }
        }
        if unknown.is_empty() && to_fence.is_empty() && unknown_copies.is_empty() {
            let queued = self.add_queued(adds, role, &std::collections::BTreeMap::new());
            return Box::pin(async move { Ok(v1::AddEntriesResponse { outcomes: queued.await }.into()) });
        }
        let this = self.clone_parts();
        Box::pin(async move {
            let mut refused = std::collections::BTreeMap::new();
            if let Some(meta) = &this.meta {
                for l in unknown {
                    match check_unknown_ledger(&this.store, meta, l).await {
                        Ok(()) => this.limbo.vouch(l),
                        Err(e) => {
                            refused.insert(l, e);
                        }
                    }
                }
            }
            for l in to_fence {
                if let Err(e) = this.store.fence(l).await {
                    refused.insert(l, to_service_error(e));
                }
            }
            if let Some(meta) = &this.meta {
                for l in unknown_copies {
                    if let Err(e) = fence_unless_open(&this.store, meta, l).await.map(|_| ()) {
                        refused.insert(l, e);
                    }
                }
            }
            let outcomes = this.add_queued(adds, role, &refused).await;
            Ok(v1::AddEntriesResponse { outcomes }.into())
        })
    }

    /// Whether a normal add for `ledger_id` must ask the metadata service
    /// first: a ledger never seen here, or one in limbo (its fence may have
    /// been lost with the index) not yet said open since this start.
    fn unvouched(&self, ledger_id: u64) -> bool {
        !self.store.knows_ledger(ledger_id) || self.limbo.needs_open_check(ledger_id)
    }

    fn clone_parts(&self) -> BookieService {
        BookieService {
            store: self.store.clone(),
            me: self.me.clone(),
            data_dir: self.data_dir.clone(),
            meta: self.meta.clone(),
            draining: self.draining.clone(),
            limbo: self.limbo.clone(),
            gc: self.gc.clone(),
            add_seconds: self.add_seconds.clone(),
        }
    }
}

/// Under a traced request, the span of an add's wait on the journal: from
/// queueing its record to the fdatasync of the group commit that holds it.
/// Untraced requests make none (an INFO span per add costs a bookie CPU).
fn journal_span(ledger: u64, entry: u64) -> tracing::Span {
    // The process-wide flag first: an untraced bookie asks nothing per add.
    if quire_runtime::logging::tracing_active() && quire_rpc::trace::current().is_some() {
        tracing::info_span!("journal.append", ledger, entry)
    } else {
        tracing::Span::none()
    }
}

/// A storage answer, except that absence in a ledger in limbo is not
/// evidence of absence (the data-integrity check has not refilled it yet).
fn in_limbo(limbo: &crate::integrity::Limbo, ledger_id: u64, e: StorageError) -> ServiceError {
    match e {
        StorageError::NoSuchEntry(..) | StorageError::NoSuchLedger(_) if limbo.contains(ledger_id) => {
            ServiceError::new(
                ErrorCode::LedgerInLimbo,
                format!("ledger {ledger_id} may have lost entries here (unclean start) and is being refilled"),
            )
        }
        e => to_service_error(e),
    }
}

/// Most entry ids one CheckEntries request may name (the RPC server
/// refuses more before decoding; checked again here).
pub const MAX_CHECK_ENTRIES: usize = quire_proto::peek::MAX_CHECK_ENTRIES;

/// Reads each entry from disk (or the write cache): which are absent, which
/// fail their CRC. Any other storage failure fails the whole check, so that
/// a bookie in trouble is never reported as merely missing entries.
fn check_entries(store: &Store, ledger_id: u64, ids: &[u64]) -> Result<(Vec<u64>, Vec<u64>), ServiceError> {
    let (mut missing, mut corrupt) = (Vec::new(), Vec::new());
    for &id in ids {
        match store.read(ledger_id, id) {
            Ok(e) if e.digest_ok() => {}
            Ok(_) | Err(StorageError::CorruptEntry(..)) => corrupt.push(id),
            Err(StorageError::NoSuchEntry(..) | StorageError::NoSuchLedger(_)) => missing.push(id),
            Err(e) => return Err(to_service_error(e)),
        }
    }
    Ok((missing, corrupt))
}

/// Seed 003's second guard. A bookie that has never seen a ledger (a fresh
/// process on a replaced disk, say) asks the metadata service before taking
/// a normal add for it: a closed or recovering ledger is fenced here too and
/// the add refused, so a writer that missed the recovery cannot get an
/// acknowledgement from bookies that missed the fence.
async fn check_unknown_ledger(
    store: &Store,
    meta: &quire_metaclient::MetaClient,
    ledger_id: u64,
) -> Result<(), ServiceError> {
    if !fence_unless_open(store, meta, ledger_id).await? {
        return Err(to_service_error(StorageError::Fenced(ledger_id)));
    }
    Ok(())
}

/// Asks the metadata service about a ledger this bookie does not know and
/// fences it here unless it is open; whether it is open. Replication adds
/// use it before their first copy, so that no writer fenced out elsewhere
/// finds a restored replica open. A deleted ledger is NO_SUCH_LEDGER.
async fn fence_unless_open(
    store: &Store,
    meta: &quire_metaclient::MetaClient,
    ledger_id: u64,
) -> Result<bool, ServiceError> {
    let req = v1::GetLedgerRequest { ledger_id, stale_ok: false };
    let resp = meta.call_within(req, METADATA_CHECK_TIMEOUT).await.map_err(|e| match e.code() {
        Some(ErrorCode::NoSuchLedger) => {
            ServiceError::new(ErrorCode::NoSuchLedger, format!("ledger {ledger_id} is unknown to the metadata service"))
        }
        _ => ServiceError::new(
            ErrorCode::MetadataUnavailable,
            format!("cannot check ledger {ledger_id} with the metadata service: {e}"),
        ),
    })?;
    let open = resp.ledger.map(|l| l.state).unwrap_or_default() == v1::LedgerState::Open as i32;
    if !open {
        store.fence(ledger_id).await.map_err(to_service_error)?;
    }
    Ok(open)
}

/// The protocol code for a storage outcome.
pub fn to_service_error(e: StorageError) -> ServiceError {
    let code = match &e {
        StorageError::NoSuchLedger(_) => ErrorCode::NoSuchLedger,
        StorageError::NoSuchEntry(..) => ErrorCode::NoSuchEntry,
        StorageError::CorruptEntry(..) => ErrorCode::CorruptEntry,
        StorageError::Fenced(_) => ErrorCode::LedgerFenced,
        StorageError::DigestMismatch(..) => ErrorCode::DigestMismatch,
        StorageError::TooLarge(..) => ErrorCode::EntryTooLarge,
        StorageError::ReadOnly(_) => ErrorCode::BookieReadOnly,
        StorageError::Overloaded(_) => ErrorCode::Overloaded,
        StorageError::JournalClosed | StorageError::IndexClosed => ErrorCode::ShuttingDown,
        _ => ErrorCode::Internal,
    };
    if code == ErrorCode::Internal || code == ErrorCode::CorruptEntry {
        tracing::error!(error = %e, "storage error");
    }
    ServiceError::new(code, e.to_string())
}

fn ready(r: Result<v1::response_frame::Body, ServiceError>) -> ServiceFuture {
    Box::pin(std::future::ready(r))
}

impl quire_rpc::Service for BookieService {
    fn serves(&self, m: Method) -> bool {
        matches!(
            m,
            Method::AddEntry
                | Method::AddEntries
                | Method::ReadEntry
                | Method::ReadLac
                | Method::WaitLac
                | Method::WriteLac
                | Method::FenceLedger
                | Method::BookieInfo
                | Method::CheckEntries
                | Method::RunGc
                | Method::ReadEntries
        )
    }

    fn call(&self, ctx: RequestContext, body: Req) -> ServiceFuture {
        match body {
            Req::AddEntry(a) => {
                if a.replication {
                    // A copy from another replica: accepted on a fenced ledger,
                    // fences nothing, except that a ledger this bookie does not
                    // know yet is fenced first unless it is open (its fence
                    // may have been lost with the data being restored).
                    let unknown = a.entry.as_ref().is_some_and(|e| !self.store.knows_ledger(e.ledger_id));
                    let this = self.clone_parts();
                    let role = ctx.peer.role;
                    return Box::pin(async move {
                        if let (true, Some(meta), Some(e)) = (unknown, &this.meta, a.entry.as_ref()) {
                            Self::check_replication(role)?;
                            fence_unless_open(&this.store, meta, e.ledger_id).await?;
                        }
                        let o = this.add_queued(vec![a], role, &Default::default()).await.pop().expect("one add");
                        match ErrorCode::try_from(o.code) {
                            Ok(ErrorCode::Ok) => {
                                Ok(v1::AddEntryResponse { ledger_id: o.ledger_id, entry_id: o.entry_id }.into())
                            }
                            Ok(code) => Err(ServiceError::new(code, o.message)),
                            Err(_) => Err(ServiceError::internal(o.message)),
                        }
                    });
                }
                let Some(entry) = a.entry else {
                    return ready(Err(ServiceError::bad_request("add without an entry")));
                };
                // Seed 003: a writer that believes it talks to another instance of
                // this bookie (its disks were replaced) must not get a success.
                if let Err(e) =
                    self.check_instance(&a.expected_instance_id).and_then(|()| self.check_draining(a.recovery))
                {
                    return ready(Err(e));
                }
                let (l, e) = (entry.ledger_id, entry.entry_id);
                // Every acknowledged add counts in the add latency, whichever
                // path it takes (a new ledger's first adds, and any that come
                // while its check is under way, went uncounted).
                let (started, hist) = (std::time::Instant::now(), self.add_seconds.clone());
                if let Some(meta) = self.meta.clone().filter(|_| !a.recovery && self.unvouched(l)) {
                    let store = self.store.clone();
                    let limbo = self.limbo.clone();
                    let span = journal_span(l, e);
                    return Box::pin(async move {
                        check_unknown_ledger(&store, &meta, l).await?;
                        limbo.vouch(l);
                        tracing::Instrument::instrument(store.add(entry, false), span)
                            .await
                            .map_err(to_service_error)?;
                        hist.observe_duration(started.elapsed());
                        Ok(v1::AddEntryResponse { ledger_id: l, entry_id: e }.into())
                    });
                }
                // A recovery add comes from recovery (ledger in recovery) or
                // re-replication (ledger closed): either way no normal add may
                // follow it here. Fencing first closes the gap where a bookie
                // chosen during recovery's write-back never saw the fence and
                // would take the old writer's next add (seed 003).
                if a.recovery && !self.store.is_fenced(l) {
                    let store = self.store.clone();
                    let span = journal_span(l, e);
                    return Box::pin(async move {
                        store.fence(l).await.map_err(to_service_error)?;
                        tracing::Instrument::instrument(store.add(entry, true), span)
                            .await
                            .map_err(to_service_error)?;
                        hist.observe_duration(started.elapsed());
                        Ok(v1::AddEntryResponse { ledger_id: l, entry_id: e }.into())
                    });
                }
                // Queued to the journal here, in lane order; awaited below.
                let span = journal_span(l, e);
                let added = self.store.add(entry, a.recovery);
                Box::pin(tracing::Instrument::instrument(
                    async move {
                        added.await.map_err(to_service_error)?;
                        hist.observe_duration(started.elapsed());
                        Ok(v1::AddEntryResponse { ledger_id: l, entry_id: e }.into())
                    },
                    span,
                ))
            }
            Req::AddEntries(b) => self.add_entries(b.adds, ctx.peer.role),
            Req::RunGc(r) => {
                let kind = if r.major { crate::gc::Kind::Major } else { crate::gc::Kind::Minor };
                let (tx, rx) = oneshot::channel();
                // One pass runs at a time; a request while the queue is full is refused, not queued without bound.
                if self.gc.try_send((kind, tx)).is_err() {
                    return ready(Err(ServiceError::new(
                        ErrorCode::Overloaded,
                        "garbage-collection passes are already queued; try again when they finish",
                    )));
                }
                Box::pin(async move {
                    let report = rx
                        .await
                        .map_err(|_| ServiceError::new(ErrorCode::ShuttingDown, "the bookie is shutting down"))?
                        .map_err(|e| ServiceError::internal(format!("gc pass failed: {e}")))?;
                    Ok(v1::RunGcResponse { report: Some(report) }.into())
                })
            }
            Req::CheckEntries(c) => {
                if c.entry_ids.len() > MAX_CHECK_ENTRIES {
                    return ready(Err(ServiceError::bad_request(format!(
                        "a CheckEntries request names at most {MAX_CHECK_ENTRIES} entries, not {}",
                        c.entry_ids.len()
                    ))));
                }
                let store = self.store.clone();
                Box::pin(async move {
                    let (missing, corrupt) =
                        tokio::task::spawn_blocking(move || check_entries(&store, c.ledger_id, &c.entry_ids))
                            .await
                            .map_err(|e| ServiceError::internal(format!("check task: {e}")))??;
                    Ok(v1::CheckEntriesResponse { missing, corrupt }.into())
                })
            }
            Req::ReadEntry(r) => {
                let store = self.store.clone();
                let limbo = self.limbo.clone();
                Box::pin(async move {
                    if r.fence {
                        // A recovery read fences first (BookKeeper #2614).
                        store.fence(r.ledger_id).await.map_err(to_service_error)?;
                    }
                    let entry = match store.read_cached(r.ledger_id, r.entry_id) {
                        Some(e) => e,
                        None => {
                            let s = store.clone();
                            tokio::task::spawn_blocking(move || s.read(r.ledger_id, r.entry_id))
                                .await
                                .map_err(|e| ServiceError::internal(format!("read task: {e}")))?
                                .map_err(|e| in_limbo(&limbo, r.ledger_id, e))?
                        }
                    };
                    Ok(v1::ReadEntryResponse { entry: Some(entry) }.into())
                })
            }
            Req::ReadEntries(r) => {
                let Some(stripe) = quire_storage::Stripe::new(r.stripe_modulus, r.stripe_residues) else {
                    return ready(Err(ServiceError::bad_request(format!(
                        "a stripe is a modulus of 1 to 64 with a residue below it (modulus {}, residues {:#x})",
                        r.stripe_modulus, r.stripe_residues
                    ))));
                };
                if r.first_entry_id > r.last_entry_id {
                    return ready(Err(ServiceError::bad_request(format!(
                        "range {}..={} is empty",
                        r.first_entry_id, r.last_entry_id
                    ))));
                }
                let q = quire_storage::RangeQuery {
                    ledger_id: r.ledger_id,
                    first: r.first_entry_id,
                    last: r.last_entry_id,
                    stripe,
                    max_entries: if r.max_entries == 0 { usize::MAX } else { r.max_entries as usize },
                    max_bytes: if r.max_bytes == 0 { usize::MAX } else { r.max_bytes.min(usize::MAX as u64) as usize },
                };
                let store = self.store.clone();
                let limbo = self.limbo.clone();
                Box::pin(async move {
                    let found = tokio::task::spawn_blocking(move || store.read_range(q))
                        .await
                        .map_err(|e| ServiceError::internal(format!("read task: {e}")))?
                        .map_err(|e| in_limbo(&limbo, r.ledger_id, e))?;
                    Ok(v1::ReadEntriesResponse {
                        entries: found.entries,
                        more: found.next.is_some(),
                        next_entry_id: found.next.unwrap_or(0),
                        corrupt: found.corrupt,
                        in_limbo: limbo.contains(r.ledger_id),
                    }
                    .into())
                })
            }
            Req::ReadLac(r) => ready(
                self.store
                    .lac(r.ledger_id)
                    .map(|lac| v1::ReadLacResponse { last_add_confirmed: lac }.into())
                    .map_err(|e| in_limbo(&self.limbo, r.ledger_id, e)),
            ),
            Req::WaitLac(w) => {
                // As ReadLac: absence in limbo is no answer (the store would
                // wait on a LAC it may have lost).
                if self.limbo.contains(w.ledger_id) && self.store.lac(w.ledger_id).is_err() {
                    return ready(Err(in_limbo(&self.limbo, w.ledger_id, StorageError::NoSuchLedger(w.ledger_id))));
                }
                let store = self.store.clone();
                // Never past the request's own deadline (the RPC layer drops it then).
                let left = ctx.deadline.saturating_duration_since(tokio::time::Instant::now());
                let timeout = Duration::from_millis(w.timeout_ms.into()).min(left);
                Box::pin(async move {
                    let (lac, timed_out) =
                        store.wait_lac(w.ledger_id, w.after, timeout).await.map_err(to_service_error)?;
                    Ok(v1::WaitLacResponse { last_add_confirmed: lac, timed_out }.into())
                })
            }
            Req::WriteLac(w) => {
                if self.store.is_fenced(w.ledger_id) {
                    return ready(Err(to_service_error(StorageError::Fenced(w.ledger_id))));
                }
                self.store.write_lac(w.ledger_id, w.last_add_confirmed);
                ready(Ok(v1::WriteLacResponse {}.into()))
            }
            Req::FenceLedger(f) => {
                let store = self.store.clone();
                Box::pin(async move {
                    let lac = store.fence(f.ledger_id).await.map_err(to_service_error)?;
                    Ok(v1::FenceLedgerResponse { last_add_confirmed: lac }.into())
                })
            }
            Req::BookieInfo(_) => {
                let usage = quire_storage::disk::usage(&self.data_dir).ok();
                ready(Ok(v1::BookieInfoResponse {
                    bookie_id: self.me.bookie_id.clone(),
                    instance_id: self.me.instance_id.clone(),
                    rack: self.me.rack.clone(),
                    total_disk_bytes: usage.map_or(0, |u| u.total_bytes),
                    free_disk_bytes: usage.map_or(0, |u| u.free_bytes),
                    read_only: self.store.read_only().is_some(),
                    integrity_check_pending: !self.limbo.is_empty(),
                    ledgers_in_limbo: self.limbo.len() as u64,
                }
                .into()))
            }
            other => ready(Err(ServiceError::new(
                ErrorCode::UnknownMethod,
                format!("{} is not a bookie method", Method::of_request(&other).name()),
            ))),
        }
    }
}
