//! The HTTP API v1 (BRIEF.md): routes, request parsing and JSON shapes.
//!
//! Every input is parsed here, by hand, so that every bad input gets the
//! API's own error body: bad JSON, bad base64, wrong types, non-numeric ids,
//! bodies over the limit.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::{web, HttpMessage, HttpRequest, HttpResponse};
use base64::Engine;
use bytes::Bytes;
use futures_util::StreamExt;
use quire_client::meta::LedgerMeta;
use quire_client::shell::reader::past_lac;
use quire_client::CreateLedger;
use quire_proto::reserved::PRINCIPAL_KEY;
use quire_proto::v1;
use serde::Deserialize;

use crate::error::ApiError;
use crate::logs::{
    cursor_ack, cursor_delete, cursor_get, cursor_put, log_append, log_append_batch, log_create, log_delete, log_get,
    log_list, log_read, log_take_over, log_trim,
};
use crate::state::{GatewayState, Held};

type State = web::Data<Arc<GatewayState>>;

/// Counters for /metrics.
pub struct Metrics {
    /// Entries appended through this gateway.
    pub appends: AtomicU64,
    /// Entries read through this gateway.
    pub reads: AtomicU64,
    /// Requests answered with an error status.
    pub errors: AtomicU64,
    /// Single appends: from the request's body in hand to the acknowledgement.
    pub append_seconds: quire_metrics::Histogram,
    /// Streamed responses abandoned because the client took nothing for the
    /// send deadline.
    pub stalled: AtomicU64,
    /// Range reads streaming now (a task reading pages for a client each).
    pub range_streams: AtomicU64,
}

/// Counts a range stream (or a follow) while it lives.
pub(crate) struct StreamGuard(web::Data<Metrics>);

impl StreamGuard {
    /// Counts one more stream until the guard is dropped.
    pub(crate) fn start(m: &web::Data<Metrics>) -> StreamGuard {
        m.range_streams.fetch_add(1, Ordering::Relaxed);
        StreamGuard(m.clone())
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.0.range_streams.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            appends: AtomicU64::new(0),
            reads: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            append_seconds: quire_metrics::Histogram::latency(),
            stalled: AtomicU64::new(0),
            range_streams: AtomicU64::new(0),
        }
    }
}

/// Where the OpenAPI document is served (not itself in [`ENDPOINTS`]).
pub const OPENAPI_PATH: &str = "/openapi.json";

/// One route: what registers it and what documents it come from the same
/// line, so the OpenAPI document cannot drift from the router.
macro_rules! endpoints {
    ($( $method:ident $path:literal => $handler:ident as $operation:literal, $summary:literal, $body:literal, $reply:literal, [$($code:literal),*] ;)*) => {
        /// The routes.
        pub fn routes(cfg: &mut web::ServiceConfig) {
            $( cfg.route($path, web::$method().to($handler)); )*
            cfg.route(OPENAPI_PATH, web::get().to(openapi));
        }

        /// Every route, as /openapi.json documents it.
        pub const ENDPOINTS: &[crate::openapi::Endpoint] = &[
            $( crate::openapi::Endpoint {
                method: stringify!($method),
                path: $path,
                operation_id: $operation,
                summary: $summary,
                request: $body,
                reply: $reply,
                codes: &[$($code),*],
            }, )*
        ];
    };
}

endpoints! {
    get "/healthz" => healthz as "getHealth", "Liveness", "", "Status", [200];
    get "/readyz" => readyz as "getReadiness", "Readiness: the metadata service answers", "", "Status", [200, 503];
    get "/metrics" => metrics as "getMetrics", "Prometheus metrics", "", "text", [200];
    post "/v1/ledgers" => create as "createLedger", "Create a ledger; this gateway holds its writer", "create", "Ledger", [201, 400, 408, 503];
    get "/v1/ledgers" => list as "listLedgers", "List ledger ids (start_after, limit)", "", "LedgerList", [200, 400, 503];
    get "/v1/ledgers/{id}" => get_ledger as "getLedger", "A ledger's metadata", "", "Ledger", [200, 400, 404];
    delete "/v1/ledgers/{id}" => delete as "deleteLedger", "Delete a ledger (space reclaimed by GC); a log's ledger goes with the log's trim or deletion (409 LedgerInLog)", "", "", [204, 400, 403, 404, 409];
    post "/v1/ledgers/{id}/entries" => append as "appendEntry", "Append one entry (raw body)", "raw", "Appended", [200, 400, 403, 404, 408, 409, 413, 503, 504];
    post "/v1/ledgers/{id}/entries:batch" => append_batch as "appendEntries", "Append several entries (base64)", "batch", "AppendedBatch", [200, 400, 403, 404, 408, 409, 413, 503, 504];
    get "/v1/ledgers/{id}/entries" => read_range as "readEntries", "Entries from..=to, at most up to the LAC (streamed); with follow=true, entries as the LAC passes them until the ledger closes (NDJSON, or server-sent events by Accept)", "", "EntriesOrFollow", [200, 400, 404, 503];
    get "/v1/ledgers/{id}/entries/{eid}" => read_one as "readEntry", "One entry, raw bytes", "", "bytes", [200, 400, 404];
    get "/v1/ledgers/{id}/lac" => lac as "getLac", "The LAC; with after and timeout_ms, a long poll", "", "Lac", [200, 400, 404];
    post "/v1/ledgers/{id}/close" => close as "closeLedger", "Close a ledger this gateway writes", "", "Ledger", [200, 400, 403, 404, 409];
    post "/v1/ledgers/{id}/recover" => recover as "recoverLedger", "Fence, recover to the true tail, close", "", "Recovered", [200, 400, 404, 503];
    get "/v1/bookies" => bookies as "listBookies", "The bookie registry", "", "BookieList", [200, 503];
    get "/v1/bookies/{bookie}" => get_bookie as "getBookie", "One bookie, and the ledgers that still name it", "", "BookieDetail", [200, 400, 404, 503];
    post "/v1/bookies/{bookie}/decommission" => decommission as "decommissionBookie", "Drain a bookie (re-replicated elsewhere), then retire it", "", "BookieDetail", [202, 400, 404, 409, 503];
    get "/v1/cluster" => cluster as "getCluster", "Metadata leader, bookies, under-replication, auditor", "", "Cluster", [200, 503];
    post "/v1/logs" => log_create as "createLog", "Create a log; this gateway owns it", "log_create", "Log", [201, 400, 408, 409, 413, 503];
    get "/v1/logs" => log_list as "listLogs", "List log names (start_after, limit)", "", "LogList", [200, 400, 503];
    get "/v1/logs/{name}" => log_get as "getLog", "A log: its ledgers with offset ranges, owner epoch, trim point", "", "Log", [200, 400, 404];
    delete "/v1/logs/{name}" => log_delete as "deleteLog", "Delete a log and its ledgers", "", "", [204, 400, 403, 404];
    post "/v1/logs/{name}/records" => log_append as "appendRecord", "Append one record (raw body); producer_id and sequence make it idempotent; expected_offset makes it conditional", "raw", "LogAppended", [200, 400, 403, 404, 408, 409, 412, 413, 503, 504];
    post "/v1/logs/{name}/records:batch" => log_append_batch as "appendRecords", "Append several records (base64) atomically: all are written, at consecutive offsets, or none (a reader never sees part of a batch); producer_id and sequence (the first's) make them idempotent; expected_offset makes them conditional", "log_batch", "LogAppendedBatch", [200, 400, 403, 404, 408, 409, 412, 413, 503, 504];
    get "/v1/logs/{name}/records" => log_read as "readRecords", "Records from an offset across ledgers, up to the committed end; with follow=true a long poll for the next ones, or server-sent events by Accept", "", "LogRecordsOrFollow", [200, 400, 404, 410, 503, 504];
    put "/v1/logs/{name}/cursors/{cursor}" => cursor_put as "putCursor", "Create a durable cursor (from start or end, or at a position), or seek it; one that holds retention is the log's principal's", "cursor_put", "Cursor", [200, 400, 403, 404, 408, 409, 413, 503];
    get "/v1/logs/{name}/cursors/{cursor}" => cursor_get as "getCursor", "A cursor's position", "", "Cursor", [200, 400, 404];
    post "/v1/logs/{name}/cursors/{cursor}" => cursor_ack as "ackCursor", "Acknowledge: every record below ack is done (forward only)", "cursor_ack", "Cursor", [200, 400, 403, 404, 408, 409, 413, 503];
    delete "/v1/logs/{name}/cursors/{cursor}" => cursor_delete as "deleteCursor", "Delete a cursor", "", "", [204, 400, 403, 404];
    post "/v1/logs/{name}/takeover" => log_take_over as "takeOverLog", "Take the log over: this gateway writes it from now on, fencing the earlier owner and taking its lease", "", "Log", [200, 400, 403, 404, 409, 503, 504];
    post "/v1/logs/{name}/trim" => log_trim as "trimLog", "Move the trim point; ledgers wholly below it are deleted", "log_trim", "Log", [200, 400, 403, 404, 408, 409, 413, 503];
}

async fn openapi() -> HttpResponse {
    HttpResponse::Ok().json(crate::openapi::document(ENDPOINTS))
}

/// The ledger as the API shows it.
pub fn ledger_json(m: &LedgerMeta) -> serde_json::Value {
    m.to_json()
}

fn id_param(req: &HttpRequest, name: &str) -> Result<u64, ApiError> {
    let raw = req.match_info().get(name).unwrap_or("");
    raw.parse().map_err(|_| ApiError::bad_request(format!("{name} must be an unsigned 64-bit integer, not {raw:?}")))
}

fn query<T: serde::de::DeserializeOwned>(req: &HttpRequest) -> Result<T, ApiError> {
    web::Query::<T>::from_query(req.query_string())
        .map(|q| q.into_inner())
        .map_err(|e| ApiError::bad_request(format!("bad query string: {e}")))
}

/// Reads a body of at most `limit` bytes within the body deadline; more is
/// 413, before it is all read, and later is 408.
async fn body(
    state: &State,
    mut payload: web::Payload,
    limit: usize,
    too_large: fn(usize) -> ApiError,
) -> Result<Bytes, ApiError> {
    let deadline = state.body_timeout;
    let read = async {
        let mut buf = web::BytesMut::new();
        while let Some(chunk) = payload.next().await {
            let chunk = chunk.map_err(|e| ApiError::bad_request(format!("reading the body: {e}")))?;
            if buf.len() + chunk.len() > limit {
                return Err(too_large(limit));
            }
            buf.extend_from_slice(&chunk);
        }
        Ok(buf.freeze())
    };
    tokio::time::timeout(deadline, read).await.unwrap_or_else(|_| Err(ApiError::body_timeout(deadline)))
}

/// A JSON body of at most `limit` bytes (413 past it, 408 late).
pub(crate) async fn read_body(state: &State, payload: web::Payload, limit: usize) -> Result<Bytes, ApiError> {
    body(state, payload, limit, body_too_large).await
}

/// An entry's (or a log record's) raw body, at most the entry limit.
pub(crate) async fn read_entry_body(state: &State, payload: web::Payload) -> Result<Bytes, ApiError> {
    body(state, payload, state.max_entry_bytes, entry_too_large).await
}

fn entry_too_large(limit: usize) -> ApiError {
    ApiError::too_large(format!("an entry is at most {limit} bytes"))
}

fn body_too_large(limit: usize) -> ApiError {
    ApiError {
        status: StatusCode::PAYLOAD_TOO_LARGE,
        code: "BadRequest",
        message: format!("the body is at most {limit} bytes"),
    }
}

fn json_body<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| ApiError::bad_request(format!("bad JSON: {e}")))
}

async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({ "status": "ok" }))
}

async fn readyz(state: State) -> Result<HttpResponse, ApiError> {
    let s = state.get_ref().clone();
    let n = state
        .run(async move { Ok(s.client.bookies().refresh().await.map_err(ApiError::from)?.len()) })
        .await
        .map_err(|e| ApiError { status: StatusCode::SERVICE_UNAVAILABLE, ..e })?;
    Ok(HttpResponse::Ok().json(serde_json::json!({ "status": "ready", "bookies": n })))
}

async fn metrics(state: State, m: web::Data<Metrics>) -> HttpResponse {
    let (writers, lag_total, lag_max) = {
        let ws = state.writers.lock().expect("writers lock");
        let lags: Vec<i64> = ws.values().map(|h| (h.writer.last_entry() - h.writer.lac()).max(0)).collect();
        (ws.len(), lags.iter().sum::<i64>(), lags.iter().copied().max().unwrap_or(0))
    };
    let mut text = format!(
        "# HELP quire_gateway_appends_total Entries appended through this gateway.\n\
         # TYPE quire_gateway_appends_total counter\nquire_gateway_appends_total {}\n\
         # HELP quire_gateway_reads_total Entries read through this gateway.\n\
         # TYPE quire_gateway_reads_total counter\nquire_gateway_reads_total {}\n\
         # HELP quire_gateway_errors_total Requests answered with an error.\n\
         # TYPE quire_gateway_errors_total counter\nquire_gateway_errors_total {}\n\
         # HELP quire_gateway_writers Writer handles held.\n\
         # TYPE quire_gateway_writers gauge\nquire_gateway_writers {writers}\n\
         # HELP quire_gateway_client_tasks Tasks doing HTTP requests' work on the client runtime now.\n\
         # TYPE quire_gateway_client_tasks gauge\nquire_gateway_client_tasks {}\n\
         # HELP quire_gateway_responses_stalled_total Streamed responses abandoned: the client took nothing for the send deadline.\n\
         # TYPE quire_gateway_responses_stalled_total counter\nquire_gateway_responses_stalled_total {}\n\
         # HELP quire_gateway_range_streams Range reads streaming to their clients now.\n\
         # TYPE quire_gateway_range_streams gauge\nquire_gateway_range_streams {}\n",
        m.appends.load(Ordering::Relaxed),
        m.reads.load(Ordering::Relaxed),
        m.errors.load(Ordering::Relaxed),
        state.client_tasks(),
        m.stalled.load(Ordering::Relaxed),
        m.range_streams.load(Ordering::Relaxed),
    );
    m.append_seconds.render(
        &mut text,
        "quire_gateway_append_seconds",
        "HTTP appends, from the body in hand to the acknowledgement.",
    );
    quire_metrics::metric(
        &mut text,
        "quire_gateway_lac_lag_entries",
        "gauge",
        "Entries written but not yet confirmed (past the LAC), over every writer held.",
        lag_total,
    );
    quire_metrics::metric(
        &mut text,
        "quire_gateway_lost_copies_total",
        "counter",
        "Copies of acknowledged entries this gateway's writers sent and no write-set member confirmed \
         (each ledger is marked under-replicated with those bookies).",
        state.client.lost_copies(),
    );
    quire_metrics::metric(
        &mut text,
        "quire_gateway_lac_lag_entries_max",
        "gauge",
        "The largest LAC lag of one writer held.",
        lag_max,
    );
    HttpResponse::Ok().content_type("text/plain; version=0.0.4").body(text)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    ensemble: Option<usize>,
    write_quorum: Option<usize>,
    ack_quorum: Option<usize>,
    metadata: Option<BTreeMap<String, String>>,
}

async fn create(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse, ApiError> {
    let raw = body(&state, payload, 64 * 1024, body_too_large).await?;
    let b: CreateBody = if raw.iter().all(u8::is_ascii_whitespace) {
        CreateBody { ensemble: None, write_quorum: None, ack_quorum: None, metadata: None }
    } else {
        json_body(&raw)?
    };
    let d = CreateLedger::default();
    let ensemble = b.ensemble.unwrap_or(d.ensemble);
    let write_quorum = b.write_quorum.unwrap_or(ensemble.min(d.write_quorum));
    let ack_quorum = b.ack_quorum.unwrap_or(write_quorum.min(d.ack_quorum));
    let mut custom: BTreeMap<String, Bytes> =
        b.metadata.unwrap_or_default().into_iter().map(|(k, v)| (k, Bytes::from(v))).collect();
    if let Some(k) = custom.keys().find(|k| k.starts_with(quire_proto::reserved::PREFIX)) {
        return Err(ApiError::bad_request(format!("metadata key {k:?} is reserved (quire.* is the service's)")));
    }
    let who = Bytes::from(principal(&req).0);
    custom.insert(PRINCIPAL_KEY.into(), who.clone());
    let spec = CreateLedger { ensemble, write_quorum, ack_quorum, custom, visible_acks: false };
    let s = state.get_ref().clone();
    let meta = state
        .run(async move {
            let writer = s.client.create(spec).await?;
            let meta = writer.metadata();
            s.writers.lock().expect("writers lock").insert(meta.ledger_id, Held { writer, principal: who });
            Ok(meta)
        })
        .await?;
    Ok(HttpResponse::Created().json(ledger_json(&meta)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    start_after: Option<u64>,
    limit: Option<u64>,
}

async fn list(state: State, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    let q: ListQuery = query(&req)?;
    // Out of range is 400, as the document says (it was clamped before).
    let limit = crate::logs::in_range(q.limit.unwrap_or(100), 1, 1000, "limit")? as u32;
    let s = state.get_ref().clone();
    let (ids, next) = state.run_read(async move { Ok(s.client.list(q.start_after, limit).await?) }).await?;
    Ok(HttpResponse::Ok().json(serde_json::json!({ "ledgers": ids, "next": next })))
}

async fn get_ledger(state: State, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    let id = id_param(&req, "id")?;
    let s = state.get_ref().clone();
    let meta = state.run_read(async move { Ok(s.client.metadata(id).await?) }).await?;
    Ok(HttpResponse::Ok().json(ledger_json(&meta)))
}

async fn delete(state: State, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    let id = id_param(&req, "id")?;
    let s = state.get_ref().clone();
    let who = principal(&req);
    state
        .run(async move {
            principal_may(id, s.client.metadata(id).await?.custom.get(PRINCIPAL_KEY), &who)?;
            s.client.delete(id).await?;
            s.writers.lock().expect("writers lock").remove(&id);
            Ok(())
        })
        .await?;
    Ok(HttpResponse::NoContent().finish())
}

/// Who the request was authenticated as (the token guard put it there).
pub(crate) fn principal(req: &HttpRequest) -> crate::auth::Principal {
    req.extensions().get::<crate::auth::Principal>().cloned().unwrap_or_else(crate::auth::Principal::anonymous)
}

/// A ledger created through a gateway is its principal's to append to,
/// close or delete (403 otherwise); anyone may read or recover it. A ledger
/// created otherwise has no principal: the metadata service's owner rule
/// decides for it.
fn principal_may(ledger_id: u64, recorded: Option<&Bytes>, who: &crate::auth::Principal) -> Result<(), ApiError> {
    match recorded {
        Some(p) if p.as_ref() != who.0.as_bytes() => Err(ApiError::forbidden(format!(
            "ledger {ledger_id} is {}'s; {} may read or recover it, not write or delete it",
            String::from_utf8_lossy(p),
            who.0
        ))),
        _ => Ok(()),
    }
}

/// The writer this gateway holds, or why there is none (or why it is not
/// this caller's).
async fn writer_of(
    state: &Arc<GatewayState>,
    id: u64,
    who: &crate::auth::Principal,
) -> Result<quire_client::LedgerWriter, ApiError> {
    if let Some(h) = state.held(id) {
        principal_may(id, Some(&h.principal), who)?;
        return Ok(h.writer);
    }
    // Not ours: say whether the ledger exists at all, and whether it is closed.
    let s = state.clone();
    let meta = state.run(async move { Ok(s.client.metadata(id).await?) }).await?;
    if meta.state == quire_client::meta::LedgerState::Closed {
        return Err(quire_client::ClientError::LedgerClosed(id).into());
    }
    Err(ApiError::not_writer(id))
}

async fn append(
    state: State,
    req: HttpRequest,
    payload: web::Payload,
    m: web::Data<Metrics>,
) -> Result<HttpResponse, ApiError> {
    let id = id_param(&req, "id")?;
    let data = body(&state, payload, state.max_entry_bytes, entry_too_large).await?;
    let w = writer_of(state.get_ref(), id, &principal(&req)).await?;
    // Straight to the writer actor (on the client's runtime) from this worker:
    // a channel send and a reply, no task hop.
    let started = std::time::Instant::now();
    let added = state.timed(async { Ok(w.add(data).await?) }).await?;
    m.append_seconds.observe_duration(started.elapsed());
    m.appends.fetch_add(1, Ordering::Relaxed);
    Ok(HttpResponse::Ok().json(serde_json::json!({ "entry_id": added.entry_id, "lac": added.lac })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchBody {
    entries: Vec<String>,
}

async fn append_batch(
    state: State,
    req: HttpRequest,
    payload: web::Payload,
    m: web::Data<Metrics>,
) -> Result<HttpResponse, ApiError> {
    let id = id_param(&req, "id")?;
    // Base64 is 4/3 of the bytes; allow the quotes and commas around them.
    let limit = 16 * 1024 * 1024;
    let b: BatchBody = json_body(&body(&state, payload, limit, body_too_large).await?)?;
    if b.entries.is_empty() || b.entries.len() > 10_000 {
        return Err(ApiError::bad_request(format!("a batch holds 1 to 10000 entries, not {}", b.entries.len())));
    }
    let mut data = Vec::with_capacity(b.entries.len());
    for (i, e) in b.entries.iter().enumerate() {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(e)
            .map_err(|err| ApiError::bad_request(format!("entries[{i}] is not base64: {err}")))?;
        if bytes.len() > state.max_entry_bytes {
            return Err(entry_too_large(state.max_entry_bytes));
        }
        data.push(Bytes::from(bytes));
    }
    let n = data.len() as u64;
    let w = writer_of(state.get_ref(), id, &principal(&req)).await?;
    let (first, last) = state.timed(async { Ok(w.add_batch(data).await?) }).await?;
    m.appends.fetch_add(n, Ordering::Relaxed);
    Ok(HttpResponse::Ok().json(serde_json::json!({ "first_entry_id": first, "last_entry_id": last })))
}

/// A reader of `id`. When this gateway holds the writer, its LAC counts too:
/// an entry acknowledged to an HTTP caller is readable at once, before the
/// bookies learn the LAC.
pub(crate) async fn open_reader(s: &Arc<GatewayState>, id: u64) -> Result<quire_client::LedgerReader, ApiError> {
    let r = s.client.open(id).await?;
    if let Some(w) = s.writer(id) {
        r.observe_lac(w.lac());
    }
    Ok(r)
}

async fn read_one(state: State, req: HttpRequest, m: web::Data<Metrics>) -> Result<HttpResponse, ApiError> {
    let id = id_param(&req, "id")?;
    let eid = id_param(&req, "eid")?;
    let s = state.get_ref().clone();
    let e = state
        .run_read(async move {
            let r = open_reader(&s, id).await?;
            Ok(r.read(eid).await?)
        })
        .await?;
    m.reads.fetch_add(1, Ordering::Relaxed);
    Ok(HttpResponse::Ok().content_type("application/octet-stream").body(e.payload))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RangeQuery {
    from: Option<u64>,
    to: Option<u64>,
    /// Stream entries as the LAC passes them until the ledger closes (follow.rs).
    follow: Option<bool>,
}

/// What handing a streamed response its next chunk came to.
pub(crate) enum Sent {
    /// The client's side took it.
    Taken,
    /// The client went away (the response was dropped).
    Gone,
    /// The client took nothing for the send deadline: the response is cut
    /// off (see [`stream_body`]) and counted stalled. What the stream's task
    /// holds (its reader, the next pages) goes now; the connection goes when
    /// the kernel's TCP_USER_TIMEOUT fires.
    Abandoned,
}

/// Hands `chunk` to a streamed response within `send_timeout`.
pub(crate) async fn send_chunk(
    tx: &tokio::sync::mpsc::Sender<Result<Bytes, ApiError>>,
    chunk: Bytes,
    send_timeout: Duration,
    abandoned: &std::sync::atomic::AtomicBool,
    m: &Metrics,
) -> Sent {
    match tokio::time::timeout(send_timeout, tx.send(Ok(chunk))).await {
        Ok(Ok(())) => Sent::Taken,
        Ok(Err(_)) => Sent::Gone,
        Err(_) => {
            abandoned.store(true, Ordering::Relaxed);
            m.stalled.fetch_add(1, Ordering::Relaxed);
            Sent::Abandoned
        }
    }
}

/// A streamed body: `head`, then what `rx` brings; an error (or a client
/// `abandoned` at the send deadline) cuts the response short, so that it is
/// never passed off as complete.
pub(crate) fn stream_body(
    head: Vec<Bytes>,
    rx: tokio::sync::mpsc::Receiver<Result<Bytes, ApiError>>,
    abandoned: Arc<std::sync::atomic::AtomicBool>,
) -> impl futures_util::Stream<Item = Result<Bytes, actix_web::Error>> {
    futures_util::stream::iter(head.into_iter().map(Ok::<_, actix_web::Error>)).chain(futures_util::stream::unfold(
        rx,
        move |mut rx| {
            let abandoned = abandoned.clone();
            async move {
                if abandoned.load(Ordering::Relaxed) {
                    let err = ApiError::internal("the response was abandoned: the client stopped reading");
                    return Some((Err(actix_web::Error::from(err)), rx));
                }
                rx.recv().await.map(|item| (item.map_err(actix_web::Error::from), rx))
            }
        },
    ))
}

/// Entries per page of a streamed range read.
const RANGE_PAGE_ENTRIES: usize = 64;

fn entries_json(entries: &[quire_proto::v1::Entry], first: bool) -> Bytes {
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut out = String::new();
    for (i, e) in entries.iter().enumerate() {
        if !(first && i == 0) {
            out.push(',');
        }
        out.push_str(&serde_json::json!({ "entry_id": e.entry_id, "data": b64.encode(&e.payload) }).to_string());
    }
    Bytes::from(out)
}

/// A range read, streamed: the first page is read before the answer starts
/// (so that a missing ledger or entry still gets its status), the rest page
/// by page through a small bounded channel, never buffered whole. A failure
/// after the status went out ends the response early (the JSON is then
/// incomplete, which the caller sees).
async fn read_range(state: State, req: HttpRequest, m: web::Data<Metrics>) -> Result<HttpResponse, ApiError> {
    let id = id_param(&req, "id")?;
    let q: RangeQuery = query(&req)?;
    let from = q.from.unwrap_or(0);
    let to = q.to.unwrap_or(u64::MAX);
    if from > to {
        return Err(ApiError::bad_request(format!("from ({from}) is after to ({to})")));
    }
    if q.follow == Some(true) {
        let format = crate::follow::Format::of(&req);
        let from = crate::follow::start(&req, q.from, format)?;
        return crate::follow::follow(state.get_ref(), m, id, from, q.to, format).await;
    }
    let max = state.max_range_entries as u64;
    let s = state.get_ref().clone();
    let (reader, first_page, last) = state
        .run(async move {
            let r = open_reader(&s, id).await?;
            let mut lac = r.known_lac();
            if past_lac(to, lac) {
                lac = r.read_lac().await?;
            }
            if past_lac(from, lac) {
                return Ok((Arc::new(r), Vec::new(), None));
            }
            let last = to.min(lac as u64);
            let last = last.min(from.saturating_add(max - 1));
            let page_end = last.min(from + RANGE_PAGE_ENTRIES as u64 - 1);
            let page = r.read_range(from, page_end, RANGE_PAGE_ENTRIES).await?;
            Ok((Arc::new(r), page, Some(last)))
        })
        .await?;
    m.reads.fetch_add(first_page.len() as u64, Ordering::Relaxed);
    let Some(last) = last else {
        return Ok(HttpResponse::Ok().content_type("application/json").body(r#"{"entries":[]}"#));
    };
    let next = from + first_page.len() as u64;
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, ApiError>>(4);
    let head = [Bytes::from_static(br#"{"entries":["#), entries_json(&first_page, true)];
    let metrics = m.clone();
    let send_timeout = state.send_timeout;
    // Set when the client took no page for the send deadline: the stream
    // then fails instead of ending, so the response is cut off (an
    // incomplete chunked body), never passed off as a complete, shorter one.
    let abandoned = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let abandon = abandoned.clone();
    let guard = StreamGuard::start(&m);
    state.rt.spawn(async move {
        let _guard = guard;
        let mut at = next;
        while at <= last {
            let end = last.min(at + RANGE_PAGE_ENTRIES as u64 - 1);
            let page = match reader.read_range(at, end, RANGE_PAGE_ENTRIES).await {
                Ok(p) if !p.is_empty() => p,
                Ok(_) => break,
                Err(e) => {
                    tracing::warn!(ledger_id = id, entry_id = at, error = %e, "range read cut short");
                    let _ = tx.send(Err(e.into())).await;
                    return;
                }
            };
            at += page.len() as u64;
            metrics.reads.fetch_add(page.len() as u64, Ordering::Relaxed);
            match send_chunk(&tx, entries_json(&page, false), send_timeout, &abandon, &metrics).await {
                Sent::Taken => {}
                Sent::Gone => return,
                Sent::Abandoned => {
                    tracing::warn!(
                        ledger_id = id,
                        entry_id = at,
                        timeout_ms = send_timeout.as_millis() as u64,
                        "range read abandoned: the client took nothing for the send deadline"
                    );
                    return;
                }
            }
        }
        let _ = tx.send(Ok(Bytes::from_static(b"]}"))).await;
    });
    Ok(HttpResponse::Ok().content_type("application/json").streaming(stream_body(head.to_vec(), rx, abandoned)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LacQuery {
    after: Option<i64>,
    timeout_ms: Option<u64>,
}

async fn lac(state: State, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    let id = id_param(&req, "id")?;
    let q: LacQuery = query(&req)?;
    if q.after.is_some_and(|a| a < -1) {
        return Err(ApiError::bad_request("after is -1 or more"));
    }
    let wait = Duration::from_millis(crate::logs::in_range(q.timeout_ms.unwrap_or(0), 0, 60_000, "timeout_ms")?);
    let s = state.get_ref().clone();
    let lac = state
        .run_read(async move {
            let r = open_reader(&s, id).await?;
            Ok(match q.after {
                Some(after) if !wait.is_zero() => r.wait_lac(after, wait).await?,
                _ => r.read_lac().await?.max(r.known_lac()),
            })
        })
        .await?;
    Ok(HttpResponse::Ok().json(serde_json::json!({ "lac": lac })))
}

async fn close(state: State, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    let id = id_param(&req, "id")?;
    let w = match state.held(id) {
        Some(h) => {
            principal_may(id, Some(&h.principal), &principal(&req))?;
            h.writer
        }
        None => {
            // Closing a ledger closed already is idempotent; otherwise only its writer closes it.
            let s = state.get_ref().clone();
            let meta = state.run(async move { Ok(s.client.metadata(id).await?) }).await?;
            if meta.state == quire_client::meta::LedgerState::Closed {
                return Ok(HttpResponse::Ok().json(ledger_json(&meta)));
            }
            return Err(ApiError::not_writer(id));
        }
    };
    let s = state.get_ref().clone();
    let meta = state
        .run(async move {
            let m = w.close().await?;
            s.writers.lock().expect("writers lock").remove(&id);
            Ok(m)
        })
        .await?;
    Ok(HttpResponse::Ok().json(ledger_json(&meta)))
}

async fn recover(state: State, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    let id = id_param(&req, "id")?;
    let s = state.get_ref().clone();
    let r = state
        .run(async move {
            let r = s.client.recover_observed(id).await?;
            // A writer this gateway held is fenced now.
            s.writers.lock().expect("writers lock").remove(&id);
            Ok(r)
        })
        .await?;
    Ok(HttpResponse::Ok().json(recovered_json(&r)))
}

/// The recovered ledger, and how long its recovery took to fence and in
/// all: an operator's view of where recovery spends its time, and what lets
/// a caller bound when the fence took hold (`total_us - fence_us` before the
/// reply) on its own clock.
fn recovered_json(r: &quire_client::Recovered) -> serde_json::Value {
    let us = |d: std::time::Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
    let mut v = ledger_json(&r.meta);
    v["recovery"] = serde_json::json!({
        "fenced": r.fenced_at.is_some(),
        "fence_us": r.fenced_at.map(|f| us(f - r.started_at)),
        "total_us": us(r.finished_at - r.started_at),
    });
    v
}

fn bookie_state(s: i32) -> &'static str {
    match v1::BookieState::try_from(s) {
        Ok(v1::BookieState::Available) => "available",
        Ok(v1::BookieState::ReadOnly) => "read_only",
        Ok(v1::BookieState::Decommissioning) => "decommissioning",
        Ok(v1::BookieState::Decommissioned) => "decommissioned",
        _ => "unknown",
    }
}

fn bookie_json(b: &v1::BookieRecord) -> serde_json::Value {
    serde_json::json!({
        "id": b.bookie_id,
        "address": b.address,
        "rack": b.rack,
        "state": bookie_state(b.state),
        "instance_id": b.instance_id,
        "total_disk_bytes": b.total_disk_bytes,
        "free_disk_bytes": b.free_disk_bytes,
    })
}

async fn bookies(state: State) -> Result<HttpResponse, ApiError> {
    let s = state.get_ref().clone();
    let list = state.run_read(async move { meta_call(&s, v1::ListBookiesRequest {}).await }).await?;
    // Registered bookies, then decommissioning or retired ones that are down.
    let all: Vec<serde_json::Value> = list.bookies.iter().chain(&list.retired).map(bookie_json).collect();
    Ok(HttpResponse::Ok().json(serde_json::json!({ "bookies": all })))
}

/// A metadata call, its errors in the API's terms.
async fn meta_call<R: quire_proto::method::Call + Clone>(
    s: &Arc<GatewayState>,
    req: R,
) -> Result<R::Response, ApiError> {
    s.client.meta().call(req).await.map_err(|e| match e.code() {
        Some(v1::ErrorCode::NoSuchBookie) => {
            ApiError { status: StatusCode::NOT_FOUND, code: "NoSuchBookie", message: e.to_string() }
        }
        Some(v1::ErrorCode::BookieDecommissioned) => {
            ApiError { status: StatusCode::CONFLICT, code: "BookieDecommissioned", message: e.to_string() }
        }
        _ => quire_client::ClientError::from_metadata(e, None).into(),
    })
}

fn bookie_param(req: &HttpRequest) -> Result<String, ApiError> {
    let id = req.match_info().get("bookie").unwrap_or("");
    if id.is_empty() || id.len() > 128 || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)) {
        return Err(ApiError::bad_request(format!("{id:?} is not a bookie id (letters, digits, '-', '_', '.')")));
    }
    Ok(id.to_string())
}

/// One bookie with its decommissioning progress.
fn bookie_detail_json(r: &v1::GetBookieResponse) -> serde_json::Value {
    let mut j = bookie_json(&r.bookie.clone().unwrap_or_default());
    j["registered"] = r.registered.into();
    j["ledgers"] = r.ledgers.into();
    j["under_replicated_ledgers"] = r.under_replicated_ledgers.into();
    j["decommission_requested_at_ms"] = r.decommission_requested_at_ms.into();
    j
}

async fn get_bookie(state: State, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    let id = bookie_param(&req)?;
    let s = state.get_ref().clone();
    let r = state.run_read(async move { meta_call(&s, v1::GetBookieRequest { bookie_id: id }).await }).await?;
    Ok(HttpResponse::Ok().json(bookie_detail_json(&r)))
}

/// 202: the drain is under way (the auditor re-replicates, then retires the
/// bookie); GET /v1/bookies/{bookie} shows how far it has got.
async fn decommission(state: State, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    let id = bookie_param(&req)?;
    let s = state.get_ref().clone();
    let r = state
        .run(async move {
            let set =
                v1::SetBookieStateRequest { bookie_id: id.clone(), state: v1::BookieState::Decommissioning as i32 };
            meta_call(&s, set).await?;
            meta_call(&s, v1::GetBookieRequest { bookie_id: id }).await
        })
        .await?;
    Ok(HttpResponse::Accepted().json(bookie_detail_json(&r)))
}

async fn cluster(state: State) -> Result<HttpResponse, ApiError> {
    let s = state.get_ref().clone();
    let (status, list, auditor) = state
        .run(async move {
            let meta = s.client.meta();
            let status = meta
                .call(v1::MetadataStatusRequest::default())
                .await
                .map_err(|e| ApiError::from(quire_client::ClientError::from_metadata(e, None)))?;
            let list = meta_call(&s, v1::ListBookiesRequest {}).await?;
            let auditor = meta
                .call(v1::GetLockRequest { name: "auditor".into() })
                .await
                .ok()
                .and_then(|l| l.lock)
                .map(|l| l.owner);
            Ok((status, list, auditor))
        })
        .await?;
    Ok(HttpResponse::Ok().json(serde_json::json!({
        "metadata": {
            "leader_id": status.leader_id,
            "leader_address": status.leader_address,
            "term": status.term,
            "voters": status.voters.iter().map(|r| serde_json::json!({ "id": r.id, "address": r.address })).collect::<Vec<_>>(),
        },
        "bookies": list.bookies.iter().chain(&list.retired).map(bookie_json).collect::<Vec<_>>(),
        "under_replicated_ledgers": status.under_replicated_ledgers,
        "lost_copies": state.client.lost_copies(),
        "auditor": auditor,
        "audit": status.audit.as_ref().map(|a| serde_json::json!({
            "auditor": a.auditor,
            "at_ms": a.at_ms,
            "ledgers_checked": a.ledgers_checked,
            "lost_bookies": a.lost_bookies,
            "draining_bookies": a.draining_bookies,
            "ledgers_marked": a.ledgers_marked,
            "replica_check_at_ms": a.replica_check_at_ms,
            "replica_check_started_at_ms": a.replica_check_started_at_ms,
            "replica_check_unreached": a.replica_check_unreached,
            "entries_checked": a.entries_checked,
            "entries_missing": a.entries_missing,
            "entries_corrupt": a.entries_corrupt,
            "retired_bookies": a.retired_bookies,
        })),
    })))
}

/// Anything no route took: 405 with the methods the path serves when the
/// path is the API's (RFC 9110 15.5.6), else the API's 404.
pub async fn unknown(req: HttpRequest) -> Result<HttpResponse, ApiError> {
    let allowed = allowed_methods(req.path());
    if allowed.is_empty() {
        return Err(ApiError::not_found(format!("no route for {} {}", req.method(), req.path())));
    }
    let allow = allowed.join(", ");
    Ok(HttpResponse::MethodNotAllowed().insert_header(("Allow", allow.clone())).json(serde_json::json!({
        "error": "MethodNotAllowed",
        "message": format!("{} does not serve {}; it serves {allow}", req.path(), req.method()),
    })))
}

/// The methods (upper case, sorted) the routes whose template `path`
/// matches serve: a `{param}` segment matches any non-empty segment.
pub fn allowed_methods(path: &str) -> Vec<String> {
    let matches = |template: &str| {
        let (mut t, mut p) = (template.split('/'), path.split('/'));
        loop {
            match (t.next(), p.next()) {
                (None, None) => return true,
                (Some(ts), Some(ps)) if ts.starts_with('{') && ts.ends_with('}') && !ps.is_empty() => {}
                (Some(ts), Some(ps)) if ts == ps => {}
                _ => return false,
            }
        }
    };
    let mut methods: Vec<String> = ENDPOINTS
        .iter()
        .map(|e| (e.method, e.path))
        .chain(std::iter::once(("get", OPENAPI_PATH)))
        .filter(|(_, template)| matches(template))
        .map(|(m, _)| m.to_ascii_uppercase())
        .collect();
    methods.sort();
    methods.dedup();
    methods
}
