//! The HTTP API's logs (issue #23; docs/logs.md): create, list, describe,
//! append (one or a batch, optionally idempotent), read across ledgers and
//! follow the tail (a long poll), trim, delete.
//!
//! Ownership among gateways: a log is written by one gateway at a time,
//! the holder of the metadata lock `log/<name>` under a lease it renews.
//! An append to a log another gateway holds is 409 NotOwner, naming the
//! holder; a gateway takes a log over (fencing the earlier writer by
//! recovery, quire-client's `open_log_writer`) only when the lock is free
//! or its lease lapsed, so two gateways never take turns.

use std::sync::Arc;
use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use base64::Engine;
use bytes::Bytes;
use quire_client::{ClientError, LogEntry, LogWriter};
use quire_log::{LogConfig, LogMeta, Retention, Rollover};
use quire_proto::v1;
use serde::Deserialize;

use crate::api::principal;
use crate::auth::Principal;
use crate::error::ApiError;
use crate::state::{GatewayState, HeldLog};

type State = web::Data<Arc<GatewayState>>;

/// The ownership lease of a log: the lock is renewed at a third of it.
pub const OWNER_LEASE: Duration = Duration::from_secs(10);

/// Most records one read answers.
const READ_LIMIT_MAX: usize = 10_000;

/// Longest a follow (long poll) waits for a record.
const FOLLOW_WAIT_MAX: Duration = Duration::from_secs(60);

/// A query number within its documented range, or 400 (the schema states
/// the range; a number outside it is refused, not clamped).
pub(crate) fn in_range(v: u64, min: u64, max: u64, what: &str) -> Result<u64, ApiError> {
    if v < min || v > max {
        return Err(ApiError::bad_request(format!("{what} is {min} to {max}, not {v}")));
    }
    Ok(v)
}

fn lock_name(log: &str) -> String {
    quire_log::config::owner_lock(log)
}

/// The log name in the path, checked (decoded: a percent-encoded `/` or
/// `..` is refused as any other bad name).
fn name_param(req: &HttpRequest) -> Result<String, ApiError> {
    let raw = req.match_info().get("name").unwrap_or("");
    quire_log::config::validate_name(raw).map_err(ApiError::bad_request)?;
    Ok(raw.to_string())
}

fn query<T: serde::de::DeserializeOwned>(req: &HttpRequest) -> Result<T, ApiError> {
    web::Query::<T>::from_query(req.query_string())
        .map(|q| q.into_inner())
        .map_err(|e| ApiError::bad_request(format!("bad query string: {e}")))
}

/// A JSON object body. (serde's derived structs also take a JSON array
/// of their fields in order; the API's bodies are objects, and an array
/// is 400, as the schema says: schemathesis found `"retention":[null,null]`
/// taken.)
fn json_body<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let v: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| ApiError::bad_request(format!("bad JSON: {e}")))?;
    from_object(v, "the body")
}

fn from_object<T: serde::de::DeserializeOwned>(v: serde_json::Value, what: &str) -> Result<T, ApiError> {
    if !v.is_object() {
        return Err(ApiError::bad_request(format!("{what} must be a JSON object")));
    }
    serde_json::from_value(v).map_err(|e| ApiError::bad_request(format!("bad JSON: {e}")))
}

/// A nested settings object (absent or null: the defaults).
fn settings<T: serde::de::DeserializeOwned + Default>(v: Option<serde_json::Value>, what: &str) -> Result<T, ApiError> {
    match v {
        None | Some(serde_json::Value::Null) => Ok(T::default()),
        Some(v) => from_object(v, what),
    }
}

/// A log as the API shows it.
pub fn log_json(m: &LogMeta) -> serde_json::Value {
    m.to_json()
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RolloverBody {
    max_entries: Option<u64>,
    max_bytes: Option<u64>,
    max_age_ms: Option<u64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RetentionBody {
    max_age_ms: Option<u64>,
    max_bytes: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    name: String,
    ensemble: Option<u32>,
    write_quorum: Option<u32>,
    ack_quorum: Option<u32>,
    rollover: Option<serde_json::Value>,
    retention: Option<serde_json::Value>,
}

/// Milliseconds since this process started: the clock of a held log's
/// last use (monotonic; only differences matter).
fn uptime_ms() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed().as_millis() as u64
}

/// Whether `who` may change log `name` through a gateway: the principal
/// it was created for, when it records one (403 otherwise). A log without
/// one is any principal's if a gateway made it (before principals were
/// recorded), and nobody's over HTTP if something else did (the CLI, a
/// library): refused here, before a takeover's recovery would fence its
/// maker's writer only for the metadata service to refuse the edit.
fn log_principal_may(meta: &LogMeta, who: &Principal) -> Result<(), ApiError> {
    let name = &meta.record.name;
    if meta.principal.is_empty() && !meta.creator.starts_with("gateway/") {
        return Err(ApiError::forbidden(format!(
            "log {name} was made by {}, not through a gateway: it is changed by its maker",
            meta.creator
        )));
    }
    held_principal_may(name, &meta.principal, who)
}

/// As [`log_principal_may`] for a log this gateway writes (so a gateway's).
fn held_principal_may(name: &str, recorded: &str, who: &Principal) -> Result<(), ApiError> {
    if recorded.is_empty() || recorded == who.0 {
        return Ok(());
    }
    Err(ApiError::forbidden(format!("log {name} is {recorded}'s; {} may read it, not change it", who.0)))
}

/// A log's claim in this gateway, held while it is taken over: a second
/// takeover of the same log waits for the first (and then finds its
/// writer), while other logs' takeovers go on. The entry goes with the
/// last claim.
struct Claim {
    state: Arc<GatewayState>,
    name: String,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.guard.take();
        let mut claiming = self.state.claiming.lock().expect("claiming lock");
        // Only the map's reference left: nobody holds or waits for it.
        if claiming.get(&self.name).is_some_and(|c| Arc::strong_count(c) == 1) {
            claiming.remove(&self.name);
        }
    }
}

impl GatewayState {
    /// The writer of `name` if this gateway holds it.
    fn held_log(&self, name: &str) -> Option<HeldLog> {
        self.logs.lock().expect("logs lock").get(name).cloned()
    }

    /// Forgets the writer of `name` if it is `w` (not a newer one); whether it was.
    fn forget(&self, name: &str, w: &LogWriter) -> bool {
        let mut logs = self.logs.lock().expect("logs lock");
        let ours = logs.get(name).is_some_and(|h| h.writer.same(w));
        if ours {
            logs.remove(name);
        }
        ours
    }

    /// Waits for, then holds, the claim of `name`.
    async fn claim(self: &Arc<Self>, name: &str) -> Claim {
        let lock = self.claiming.lock().expect("claiming lock").entry(name.to_string()).or_default().clone();
        let guard = lock.lock_owned().await;
        Claim { state: self.clone(), name: name.to_string(), guard: Some(guard) }
    }

    /// Takes the ownership lock of `name`, or says who holds it. With
    /// `take_over`, takes it from its holder (an explicit takeover).
    async fn take_lock(self: &Arc<Self>, name: &str, take_over: bool) -> Result<u64, ApiError> {
        let req = v1::AcquireLockRequest {
            name: lock_name(name),
            owner: self.owner.clone(),
            lease_ms: OWNER_LEASE.as_millis() as u32,
            take_over,
        };
        match self.client.meta().call(req).await {
            Ok(r) => Ok(r.lock.map_or(0, |l| l.lock_id)),
            Err(e) if e.code() == Some(v1::ErrorCode::LockHeld) => {
                let holder = self
                    .client
                    .meta()
                    .call(v1::GetLockRequest { name: lock_name(name) })
                    .await
                    .ok()
                    .and_then(|r| r.lock)
                    .map_or_else(|| "another gateway".to_string(), |l| l.owner);
                Err(ApiError::not_owner(name, &holder))
            }
            Err(e) => Err(ClientError::from_metadata(e, None).into()),
        }
    }

    /// Holds `writer` for `name` under lock grant `lock_id`, renewing the
    /// lease every third of it. A renewal that fails for a moment (a
    /// metadata election) is tried again until the lease would have run
    /// out; a lease another took, or one that ran out, lets the writer go
    /// (another gateway may then take the log over, fencing it). A writer
    /// that stopped (fenced by a newer owner, or broken) gives its lease
    /// up at once, so the log is not held by nobody's writer; so does one
    /// unused for [`GatewayState::log_idle`], so that a gateway does not
    /// hold every log it ever wrote.
    fn hold_log(self: &Arc<Self>, name: &str, writer: LogWriter, principal: String, lock_id: u64) {
        let used_ms = Arc::new(std::sync::atomic::AtomicU64::new(uptime_ms()));
        let held = HeldLog { writer: writer.clone(), principal, used_ms: used_ms.clone() };
        self.logs.lock().expect("logs lock").insert(name.to_string(), held);
        self.leases.lock().expect("leases lock").insert(name.to_string(), lock_id);
        let s = self.clone();
        let name = name.to_string();
        self.rt.spawn(async move {
            let mut tick = tokio::time::interval((OWNER_LEASE / 3).min(s.log_idle / 2));
            tick.tick().await;
            let mut renewed = tokio::time::Instant::now();
            let let_go = |why: &str| {
                tracing::warn!(log = %name, why, "letting a log's writer go");
                s.forget(&name, &writer);
            };
            let idle = || uptime_ms().saturating_sub(used_ms.load(std::sync::atomic::Ordering::Relaxed));
            let idle_limit_ms = s.log_idle.as_millis() as u64;
            loop {
                tick.tick().await;
                if !s.held_log(&name).is_some_and(|h| h.writer.same(&writer)) {
                    s.release_lock(&name, lock_id).await;
                    return;
                }
                if writer.broken().is_some() {
                    let_go("it stopped");
                    s.release_lock(&name, lock_id).await;
                    return;
                }
                if idle() >= idle_limit_ms {
                    // Under the claim: an append taking it now waits, then
                    // takes the log over (or finds it held elsewhere).
                    let _claim = s.claim(&name).await;
                    if idle() >= idle_limit_ms {
                        tracing::info!(log = %name, idle_ms = idle(), "letting an idle log's writer go");
                        s.forget(&name, &writer);
                        s.release_lock(&name, lock_id).await;
                        return;
                    }
                }
                let req = v1::RenewLockRequest { name: lock_name(&name), lock_id };
                match s.client.meta().call(req).await {
                    Ok(_) => renewed = tokio::time::Instant::now(),
                    Err(e) => {
                        let lost =
                            matches!(e.code(), Some(v1::ErrorCode::LeaseExpired | v1::ErrorCode::PermissionDenied));
                        if lost || renewed.elapsed() >= OWNER_LEASE {
                            let_go(&format!("its ownership lease is lost: {e}"));
                            return;
                        }
                        tracing::debug!(log = %name, error = %e, "renewing a log's lease failed; again");
                    }
                }
            }
        });
    }

    /// The writer of `name` for `who`: held here, or taken over now when
    /// its owner's lease lapsed (NotOwner when another gateway holds it,
    /// Forbidden when the log is another principal's).
    async fn writer_for(self: &Arc<Self>, name: &str, who: &Principal) -> Result<LogWriter, ApiError> {
        let use_held = |h: HeldLog| {
            held_principal_may(name, &h.principal, who)?;
            h.used_ms.store(uptime_ms(), std::sync::atomic::Ordering::Relaxed);
            Ok::<_, ApiError>(h.writer)
        };
        if let Some(h) = self.held_log(name) {
            return use_held(h);
        }
        let _claim = self.claim(name).await;
        if let Some(h) = self.held_log(name) {
            return use_held(h);
        }
        // NoSuchLog and Forbidden before taking a lock.
        let meta = self.client.log_meta(name).await?;
        log_principal_may(&meta, who)?;
        let lock_id = self.take_lock(name, false).await?;
        self.open_held(name, meta.principal, lock_id).await
    }

    /// Takes log `name` over under lock grant `lock_id` and holds its writer.
    async fn open_held(self: &Arc<Self>, name: &str, principal: String, lock_id: u64) -> Result<LogWriter, ApiError> {
        match self.client.open_log_writer(name, &self.owner).await {
            Ok(w) => {
                self.hold_log(name, w.clone(), principal, lock_id);
                Ok(w)
            }
            Err(e) => {
                self.release_lock(name, lock_id).await;
                Err(e.into())
            }
        }
    }

    /// An explicit takeover: this gateway becomes the log's writer now,
    /// taking its ownership lock from whoever holds it and fencing the
    /// earlier owner (its next append fails with LogFenced, and its lease
    /// renewal finds the lock gone). A writer this gateway holds and that
    /// still works is kept as it is.
    async fn take_over(self: &Arc<Self>, name: &str, who: &Principal) -> Result<LogMeta, ApiError> {
        let _claim = self.claim(name).await;
        let meta = self.client.log_meta(name).await?;
        log_principal_may(&meta, who)?;
        if let Some(h) = self.held_log(name) {
            // Still the owner (the stored epoch is the one this writer
            // took): nothing to take. A writer a newer owner fenced, whose
            // next append or renewal has not noticed it yet, is let go.
            let held = h.writer.metadata().await;
            if h.writer.broken().is_none() && held.record.epoch == meta.record.epoch {
                h.used_ms.store(uptime_ms(), std::sync::atomic::Ordering::Relaxed);
                return Ok(held);
            }
            self.forget(name, &h.writer);
        }
        let lock_id = self.take_lock(name, true).await?;
        tracing::info!(log = name, "taking a log over on request");
        let w = self.open_held(name, meta.principal, lock_id).await?;
        Ok(w.metadata().await)
    }

    async fn release_lock(&self, name: &str, lock_id: u64) {
        {
            let mut leases = self.leases.lock().expect("leases lock");
            if leases.get(name) == Some(&lock_id) {
                leases.remove(name);
            }
        }
        let _ = self.client.meta().call(v1::ReleaseLockRequest { name: lock_name(name), lock_id }).await;
    }

    /// At shutdown: lets every log's writer go and gives its lease up.
    pub async fn release_logs(&self) {
        self.logs.lock().expect("logs lock").clear();
        let leases: Vec<(String, u64)> = self.leases.lock().expect("leases lock").drain().collect();
        for (name, lock_id) in leases {
            let _ = self.client.meta().call(v1::ReleaseLockRequest { name: lock_name(&name), lock_id }).await;
            tracing::info!(log = %name, "gave up a log's ownership lease at shutdown");
        }
    }

    /// Forgets the writer of `name` once it stopped (fenced by a newer
    /// owner, or broken by a failure): the next append takes the log over
    /// again, recovering what the broken writer left, or answers NotOwner.
    /// Its lease is given up with it.
    async fn drop_if_broken(self: &Arc<Self>, name: &str, w: &LogWriter) {
        if w.broken().is_none() {
            return;
        }
        if self.forget(name, w) {
            tracing::warn!(log = name, "let a stopped log writer go");
        }
    }

    /// Log `name`'s record, if `who` may change it.
    async fn log_for(&self, name: &str, who: &Principal) -> Result<LogMeta, ApiError> {
        let meta = self.client.log_meta(name).await?;
        log_principal_may(&meta, who)?;
        Ok(meta)
    }
}

pub async fn log_create(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse, ApiError> {
    let who = principal(&req);
    let raw = crate::api::read_body(&state, payload, 64 * 1024).await?;
    let b: CreateBody = json_body(&raw)?;
    quire_log::config::validate_name(&b.name).map_err(ApiError::bad_request)?;
    let ensemble = b.ensemble.unwrap_or(3);
    let write_quorum = b.write_quorum.unwrap_or(ensemble.min(3));
    let ack_quorum = b.ack_quorum.unwrap_or(write_quorum.min(2));
    let d = Rollover::default();
    let r: RolloverBody = settings(b.rollover, "rollover")?;
    let t: RetentionBody = settings(b.retention, "retention")?;
    let config = LogConfig {
        ensemble_size: ensemble,
        write_quorum,
        ack_quorum,
        rollover: Rollover {
            max_entries: r.max_entries.unwrap_or(d.max_entries),
            max_bytes: r.max_bytes.unwrap_or(d.max_bytes),
            max_age_ms: r.max_age_ms.unwrap_or(d.max_age_ms),
        },
        retention: Retention { max_age_ms: t.max_age_ms.unwrap_or(0), max_bytes: t.max_bytes.unwrap_or(0) },
    };
    if !(1 <= ack_quorum && ack_quorum <= write_quorum && write_quorum <= ensemble && ensemble <= 64) {
        return Err(ApiError::bad_request(format!(
            "quorums must satisfy 1 <= ack ({ack_quorum}) <= write ({write_quorum}) <= ensemble ({ensemble}) <= 64"
        )));
    }
    let s = state.get_ref().clone();
    let meta = state
        .run(async move {
            let name = b.name;
            // Under the log's claim, LogExists before the lock: taking it
            // again (this gateway may own the log, or be creating it now)
            // would change its grant under the renewer.
            let _claim = s.claim(&name).await;
            match s.client.log_meta(&name).await {
                Ok(_) => return Err(ClientError::LogExists(name).into()),
                Err(ClientError::NoSuchLog(_)) => {}
                Err(e) => return Err(e.into()),
            }
            let lock_id = s.take_lock(&name, false).await?;
            match s.client.create_log_for(&name, config, &s.owner, &who.0).await {
                Ok(w) => {
                    let meta = w.metadata().await;
                    s.hold_log(&name, w, who.0, lock_id);
                    Ok(meta)
                }
                Err(e) => {
                    s.release_lock(&name, lock_id).await;
                    Err(e.into())
                }
            }
        })
        .await?;
    Ok(HttpResponse::Created().json(log_json(&meta)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    start_after: Option<String>,
    limit: Option<u64>,
}

pub async fn log_list(state: State, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    let q: ListQuery = query(&req)?;
    let limit = in_range(q.limit.unwrap_or(100), 1, 1000, "limit")? as u32;
    let s = state.get_ref().clone();
    if let Some(after) = &q.start_after {
        quire_log::config::validate_name(after).map_err(ApiError::bad_request)?;
    }
    let start_after = q.start_after.unwrap_or_default();
    let (names, next) = state.run_read(async move { Ok(s.client.list_logs(&start_after, limit).await?) }).await?;
    Ok(HttpResponse::Ok().json(serde_json::json!({ "logs": names, "next": next })))
}

pub async fn log_get(state: State, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    let name = name_param(&req)?;
    let s = state.get_ref().clone();
    let meta = state.run_read(async move { Ok(s.client.log_meta(&name).await?) }).await?;
    Ok(HttpResponse::Ok().json(log_json(&meta)))
}

pub async fn log_delete(state: State, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    let name = name_param(&req)?;
    let who = principal(&req);
    let s = state.get_ref().clone();
    state
        .run(async move {
            s.log_for(&name, &who).await?;
            s.client.delete_log(&name).await?;
            s.logs.lock().expect("logs lock").remove(&name);
            Ok(())
        })
        .await?;
    Ok(HttpResponse::NoContent().finish())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AppendQuery {
    producer_id: Option<String>,
    sequence: Option<u64>,
    /// Written only if the log's next offset is this (412 otherwise).
    expected_offset: Option<u64>,
}

fn producer_of(producer_id: Option<String>, sequence: Option<u64>) -> Result<Option<(String, u64)>, ApiError> {
    match (producer_id, sequence) {
        (None, None) => Ok(None),
        (Some(p), Some(s)) => {
            quire_log::envelope::validate_producer_id(&p).map_err(|e| ApiError::bad_request(e.to_string()))?;
            Ok(Some((p, s)))
        }
        _ => Err(ApiError::bad_request("producer_id and sequence go together")),
    }
}

/// A conditional append's refusal: 412, with the log's next offset (a
/// caller that lost the race reads from its expectation to there, and
/// decides again).
fn precondition_failed((message, next_offset): (String, u64)) -> HttpResponse {
    HttpResponse::PreconditionFailed().json(serde_json::json!({
        "error": "PreconditionFailed",
        "message": crate::redact::without_addresses(&message),
        "next_offset": next_offset,
    }))
}

/// The offsets of the records appended, or a conditional append's refusal.
async fn append_records(
    state: &State,
    who: Principal,
    name: String,
    records: Vec<Bytes>,
    producer: Option<(String, u64)>,
    expected_offset: Option<u64>,
) -> Result<Result<Vec<u64>, (String, u64)>, ApiError> {
    let s = state.get_ref().clone();
    state
        .run(async move {
            let w = s.writer_for(&name, &who).await?;
            let got =
                w.append_batch_at(records, producer.as_ref().map(|(p, q)| (p.as_str(), *q)), expected_offset).await;
            match got {
                // Refused before anything was placed: the writer goes on.
                Err(e @ ClientError::PreconditionFailed { next_offset, .. }) => Ok(Err((e.to_string(), next_offset))),
                Err(e) => {
                    s.drop_if_broken(&name, &w).await;
                    Err(e.into())
                }
                Ok(offsets) => Ok(Ok(offsets)),
            }
        })
        .await
}

pub async fn log_append(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse, ApiError> {
    let name = name_param(&req)?;
    let q: AppendQuery = query(&req)?;
    let producer = producer_of(q.producer_id, q.sequence)?;
    let data = crate::api::read_entry_body(&state, payload).await?;
    match append_records(&state, principal(&req), name, vec![data], producer, q.expected_offset).await? {
        Ok(offsets) => Ok(HttpResponse::Ok().json(serde_json::json!({ "offset": offsets[0] }))),
        Err(refused) => Ok(precondition_failed(refused)),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchBody {
    records: Vec<String>,
    producer_id: Option<String>,
    sequence: Option<u64>,
    /// Written (its first record at this offset) only if the log's next
    /// offset is this (412 otherwise).
    expected_offset: Option<u64>,
}

pub async fn log_append_batch(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse, ApiError> {
    let name = name_param(&req)?;
    let b: BatchBody = json_body(&crate::api::read_body(&state, payload, 16 * 1024 * 1024).await?)?;
    if b.records.is_empty() || b.records.len() > 10_000 {
        return Err(ApiError::bad_request(format!("a batch holds 1 to 10000 records, not {}", b.records.len())));
    }
    let producer = producer_of(b.producer_id, b.sequence)?;
    let mut data = Vec::with_capacity(b.records.len());
    for (i, e) in b.records.iter().enumerate() {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(e)
            .map_err(|err| ApiError::bad_request(format!("records[{i}] is not base64: {err}")))?;
        if bytes.len() > state.max_entry_bytes {
            return Err(ApiError::too_large(format!("a record is at most {} bytes", state.max_entry_bytes)));
        }
        data.push(Bytes::from(bytes));
    }
    let offsets = match append_records(&state, principal(&req), name, data, producer, b.expected_offset).await? {
        Ok(offsets) => offsets,
        Err(refused) => return Ok(precondition_failed(refused)),
    };
    Ok(HttpResponse::Ok().json(serde_json::json!({
        "first_offset": offsets[0],
        "last_offset": offsets[offsets.len() - 1],
        "offsets": offsets,
    })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadQuery {
    from: Option<u64>,
    /// Read from this cursor's position (not with from).
    cursor: Option<String>,
    /// Read from the first record at or after this time (milliseconds
    /// since the Unix epoch; not with from or cursor).
    from_time: Option<u64>,
    limit: Option<u64>,
    follow: Option<bool>,
    wait_ms: Option<u64>,
}

/// One record as reads answer it (and a log's event stream sends it).
pub(crate) fn record_json(r: &LogEntry) -> serde_json::Value {
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut v = serde_json::json!({ "offset": r.offset, "time_ms": r.time_ms, "data": b64.encode(&r.payload) });
    if let Some((p, s)) = &r.produced {
        v["producer_id"] = serde_json::json!(p);
        v["sequence"] = serde_json::json!(s);
    }
    v
}

fn records_json(records: &[LogEntry], next: u64) -> serde_json::Value {
    let rs: Vec<serde_json::Value> = records.iter().map(record_json).collect();
    serde_json::json!({ "records": rs, "next": next })
}

pub async fn log_read(
    state: State,
    req: HttpRequest,
    m: web::Data<crate::api::Metrics>,
) -> Result<HttpResponse, ApiError> {
    let name = name_param(&req)?;
    let q: ReadQuery = query(&req)?;
    let from = q.from.unwrap_or(0);
    let limit = in_range(q.limit.unwrap_or(1000), 1, READ_LIMIT_MAX as u64, "limit")? as usize;
    let wait_ms = in_range(q.wait_ms.unwrap_or(30_000), 0, FOLLOW_WAIT_MAX.as_millis() as u64, "wait_ms")?;
    let wait = if q.follow == Some(true) {
        Duration::from_millis(wait_ms).min(state.request_timeout / 2)
    } else {
        Duration::ZERO
    };
    if [q.cursor.is_some(), q.from.is_some(), q.from_time.is_some()].iter().filter(|given| **given).count() > 1 {
        return Err(ApiError::bad_request("records are read from one of an offset, a cursor or a time"));
    }
    if let Some(c) = &q.cursor {
        quire_log::config::validate_name(c).map_err(|e| ApiError::bad_request(format!("cursor: {e}")))?;
    }
    let format = crate::follow::Format::of(&req);
    if q.follow == Some(true) && format == crate::follow::Format::EventStream {
        let from = match (&q.cursor, q.from_time) {
            (Some(c), _) => {
                let (s, name, c) = (state.get_ref().clone(), name.clone(), c.clone());
                state.run_read(async move { Ok(s.client.cursor(&name, &c).await?.position) }).await?
            }
            (None, Some(t)) => {
                let (s, name) = (state.get_ref().clone(), name.clone());
                state.run_read(async move { Ok(s.client.log_offset_at_time(&name, t).await?) }).await?
            }
            (None, None) => from,
        };
        let at = crate::follow::start(&req, Some(from), format)?;
        return crate::log_follow::follow(state.get_ref(), m, name, at).await;
    }
    let s = state.get_ref().clone();
    let records = state
        .run_read(async move {
            let from = match (&q.cursor, q.from_time) {
                (Some(c), _) => s.client.cursor(&name, c).await?.position,
                (None, Some(t)) => s.client.log_offset_at_time(&name, t).await?,
                (None, None) => from,
            };
            let got = if wait.is_zero() {
                s.client.read_log(&name, from, limit).await
            } else {
                s.client.read_log_wait(&name, from, limit, wait).await
            }?;
            let next = got.last().map_or(from, |r| r.offset + 1);
            Ok((next, got))
        })
        .await?;
    Ok(HttpResponse::Ok().json(records_json(&records.1, records.0)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TrimBody {
    before: u64,
}

pub async fn log_trim(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse, ApiError> {
    let name = name_param(&req)?;
    let b: TrimBody = json_body(&crate::api::read_body(&state, payload, 4096).await?)?;
    let who = principal(&req);
    let s = state.get_ref().clone();
    let meta = state
        .run(async move {
            s.log_for(&name, &who).await?;
            Ok(s.client.trim_log(&name, b.before).await?)
        })
        .await?;
    Ok(HttpResponse::Ok().json(log_json(&meta)))
}

/// POST takeover: this gateway becomes the log's writer now, whoever holds
/// it (an explicit takeover: the earlier owner is fenced, its lease taken).
pub async fn log_take_over(state: State, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    let name = name_param(&req)?;
    let who = principal(&req);
    let s = state.get_ref().clone();
    let meta = state.run(async move { s.take_over(&name, &who).await }).await?;
    Ok(HttpResponse::Ok().json(log_json(&meta)))
}

impl ApiError {
    /// 409 NotOwner: another gateway writes this log (it holds its lease).
    pub fn not_owner(log: &str, owner: &str) -> ApiError {
        ApiError {
            status: StatusCode::CONFLICT,
            code: "NotOwner",
            message: format!("log {log} is written by {owner}: append there (or once its lease lapses, here)"),
        }
    }
}

fn cursor_param(req: &HttpRequest) -> Result<String, ApiError> {
    let raw = req.match_info().get("cursor").unwrap_or("");
    quire_log::config::validate_name(raw).map_err(|e| ApiError::bad_request(format!("cursor: {e}")))?;
    Ok(raw.to_string())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PutCursorBody {
    /// "start" or "end" (absent with no position: start). Not null: the
    /// document states it as an enum of the two names (what a generator
    /// makes a clean enum of), and an enum admits no null. (Kept as the
    /// JSON value, null included, so a null is told from an absence.)
    #[serde(default, deserialize_with = "present")]
    from: Option<serde_json::Value>,
    /// An offset.
    position: Option<u64>,
    holds_retention: Option<bool>,
}

/// A field that is present, whatever its value (null too).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<serde_json::Value>, D::Error> {
    <serde_json::Value as serde::Deserialize>::deserialize(d).map(Some)
}

/// PUT: create the cursor (at `from` or `position`), or seek it there.
pub async fn cursor_put(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse, ApiError> {
    let name = name_param(&req)?;
    let cursor = cursor_param(&req)?;
    let raw = crate::api::read_body(&state, payload, 4096).await?;
    let b: PutCursorBody = if raw.iter().all(u8::is_ascii_whitespace) {
        PutCursorBody { from: None, position: None, holds_retention: None }
    } else {
        json_body(&raw)?
    };
    let from = match &b.from {
        None => None,
        Some(serde_json::Value::String(f)) => Some(f.as_str()),
        Some(other) => return Err(ApiError::bad_request(format!("from is \"start\" or \"end\", not {other}"))),
    };
    let moves = from.is_some() || b.position.is_some();
    let start = match (from, b.position) {
        (Some(_), Some(_)) => return Err(ApiError::bad_request("a cursor starts at from or at position, not both")),
        (None, Some(p)) => quire_client::CursorStart::At(p),
        (None | Some("start"), None) => quire_client::CursorStart::Start,
        (Some("end"), None) => quire_client::CursorStart::End,
        (Some(other), None) => return Err(ApiError::bad_request(format!("from is start or end, not {other:?}"))),
    };
    let who = principal(&req);
    let s = state.get_ref().clone();
    let c = state
        .run(async move {
            let existing = s.client.cursor(&name, &cursor).await;
            // A cursor that holds retention holds the log's space: only
            // who may change the log makes one or moves one.
            let holds = match &existing {
                Ok(c) => c.holds_retention && moves,
                Err(_) => b.holds_retention == Some(true),
            };
            if holds {
                s.log_for(&name, &who).await?;
            }
            match existing {
                Ok(existing) if !moves => {
                    // "Make sure it exists": as it stands, not rewound.
                    if b.holds_retention.is_some_and(|h| h != existing.holds_retention) {
                        return Err(ApiError::bad_request("holds_retention is set when a cursor is created"));
                    }
                    Ok(existing)
                }
                Ok(existing) => {
                    let position = match start {
                        quire_client::CursorStart::At(p) => p,
                        quire_client::CursorStart::Start => s.client.log_meta(&name).await?.record.trim_before,
                        quire_client::CursorStart::End => s.client.log_end(&name).await?,
                    };
                    if b.holds_retention.is_some_and(|h| h != existing.holds_retention) {
                        return Err(ApiError::bad_request("holds_retention is set when a cursor is created"));
                    }
                    Ok(s.client.move_cursor(&name, &cursor, position, true).await?)
                }
                Err(ClientError::NoSuchCursor { .. }) => {
                    Ok(s.client.create_cursor(&name, &cursor, start, b.holds_retention.unwrap_or(false)).await?)
                }
                Err(e) => Err(e.into()),
            }
        })
        .await?;
    Ok(HttpResponse::Ok().json(c.to_json()))
}

pub async fn cursor_get(state: State, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    let name = name_param(&req)?;
    let cursor = cursor_param(&req)?;
    let s = state.get_ref().clone();
    let c = state.run_read(async move { Ok(s.client.cursor(&name, &cursor).await?) }).await?;
    Ok(HttpResponse::Ok().json(c.to_json()))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AckBody {
    /// Every record below this offset is acknowledged.
    ack: u64,
}

/// POST: acknowledge (advance; a position at or below the cursor's leaves it).
pub async fn cursor_ack(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse, ApiError> {
    let name = name_param(&req)?;
    let cursor = cursor_param(&req)?;
    let b: AckBody = json_body(&crate::api::read_body(&state, payload, 4096).await?)?;
    let who = principal(&req);
    let s = state.get_ref().clone();
    let c = state
        .run(async move {
            if s.client.cursor(&name, &cursor).await?.holds_retention {
                s.log_for(&name, &who).await?;
            }
            Ok(s.client.move_cursor(&name, &cursor, b.ack, false).await?)
        })
        .await?;
    Ok(HttpResponse::Ok().json(c.to_json()))
}

pub async fn cursor_delete(state: State, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    let name = name_param(&req)?;
    let cursor = cursor_param(&req)?;
    let who = principal(&req);
    let s = state.get_ref().clone();
    state
        .run(async move {
            if s.client.cursor(&name, &cursor).await?.holds_retention {
                s.log_for(&name, &who).await?;
            }
            Ok(s.client.delete_cursor(&name, &cursor).await?)
        })
        .await?;
    Ok(HttpResponse::NoContent().finish())
}
