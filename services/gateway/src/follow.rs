//! `GET /v1/ledgers/{id}/entries?from=N&follow=true`: a ledger's entries as
//! the LAC passes them, until the ledger is closed (the stream then ends
//! cleanly after its last entry) or the client goes away.
//!
//! - Formats, by Accept: NDJSON (`application/x-ndjson`, the default), one
//!   JSON object a line: `{"entry_id":N,"data":"<base64>"}` per entry,
//!   `{"heartbeat":true,"lac":L}` after every `--follow-heartbeat-ms` with
//!   nothing new, and `{"closed":true,"last_entry_id":L}` last. Or server-sent
//!   events (`text/event-stream`): `id: N` / `event: entry` / `data: {..}`
//!   per entry, `: heartbeat lac=L` comments, and `event: closed` last; a
//!   reconnecting EventSource's `Last-Event-ID` resumes after that entry.
//! - Backpressure: the follower reads one page (64 entries) ahead of what
//!   the client has taken, through a channel of four pages; a client that
//!   takes nothing for `--send-timeout-ms` is cut off, as a range read is.
//! - The ledger must exist before the status goes out (404 otherwise). A
//!   read failure later cuts the response short, never ends it as if
//!   complete: a client that did not see the closing line knows.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use actix_web::{web, HttpRequest, HttpResponse};
use base64::Engine;
use bytes::Bytes;
use quire_client::{Tail, TailEvent};

use crate::api::{self, Metrics, StreamGuard};
use crate::error::ApiError;
use crate::state::GatewayState;

/// Entries per step of a follower.
const FOLLOW_PAGE_ENTRIES: usize = 64;

/// The stream's wire format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Newline-delimited JSON.
    Ndjson,
    /// Server-sent events.
    EventStream,
}

impl Format {
    /// From the request's Accept header: event-stream if it asks for it.
    pub fn of(req: &HttpRequest) -> Format {
        let accept = req.headers().get("accept").and_then(|v| v.to_str().ok()).unwrap_or("");
        if accept.split(',').any(|m| m.trim().starts_with("text/event-stream")) {
            Format::EventStream
        } else {
            Format::Ndjson
        }
    }

    fn content_type(self) -> &'static str {
        match self {
            Format::Ndjson => "application/x-ndjson",
            Format::EventStream => "text/event-stream",
        }
    }

    fn entry(self, e: &quire_proto::v1::Entry) -> String {
        let b64 = base64::engine::general_purpose::STANDARD;
        let json = serde_json::json!({ "entry_id": e.entry_id, "data": b64.encode(&e.payload) });
        match self {
            Format::Ndjson => format!("{json}\n"),
            Format::EventStream => format!("id: {}\nevent: entry\ndata: {json}\n\n", e.entry_id),
        }
    }

    fn heartbeat(self, lac: i64) -> String {
        match self {
            Format::Ndjson => format!("{}\n", serde_json::json!({ "heartbeat": true, "lac": lac })),
            Format::EventStream => format!(": heartbeat lac={lac}\n\n"),
        }
    }

    fn closed(self, last_entry_id: i64) -> String {
        let json = serde_json::json!({ "closed": true, "last_entry_id": last_entry_id });
        match self {
            Format::Ndjson => format!("{json}\n"),
            Format::EventStream => format!("event: closed\ndata: {json}\n\n"),
        }
    }
}

/// Where a follow starts: `from`, else after an EventSource's Last-Event-ID, else 0.
pub fn start(req: &HttpRequest, from: Option<u64>, format: Format) -> Result<u64, ApiError> {
    if let Some(f) = from {
        return Ok(f);
    }
    let last = req.headers().get("last-event-id").filter(|_| format == Format::EventStream);
    match last.map(|v| v.to_str().ok().and_then(|s| s.trim().parse::<u64>().ok())) {
        None => Ok(0),
        Some(Some(id)) => Ok(id.saturating_add(1)),
        Some(None) => Err(ApiError::bad_request("Last-Event-ID is not an entry id")),
    }
}

/// The streamed answer of a follow from `from` (up to `to`, if given).
pub async fn follow(
    state: &Arc<GatewayState>,
    m: web::Data<Metrics>,
    id: u64,
    from: u64,
    to: Option<u64>,
    format: Format,
) -> Result<HttpResponse, ApiError> {
    let s = state.clone();
    let reader = state.run(async move { api::open_reader(&s, id).await }).await?;
    let mut tail = Tail::new(reader, from, to, FOLLOW_PAGE_ENTRIES);
    let heartbeat = state.follow_heartbeat;
    let send_timeout = state.send_timeout;
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, ApiError>>(4);
    let abandoned = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let abandon = abandoned.clone();
    m.range_streams.fetch_add(1, Ordering::Relaxed);
    let guard = StreamGuard(m.clone());
    state.rt.spawn(async move {
        let _guard = guard;
        loop {
            let (chunk, done) = match tail.step(heartbeat).await {
                Ok(TailEvent::Entries(entries)) => {
                    m.reads.fetch_add(entries.len() as u64, Ordering::Relaxed);
                    (entries.iter().map(|e| format.entry(e)).collect::<String>(), false)
                }
                Ok(TailEvent::Idle { lac }) => (format.heartbeat(lac), false),
                Ok(TailEvent::End { last_entry_id }) => (format.closed(last_entry_id), true),
                Err(e) => {
                    tracing::warn!(ledger_id = id, entry_id = tail.next_entry_id(), error = %e, "follow cut short");
                    let _ = tx.send(Err(e.into())).await;
                    return;
                }
            };
            match tokio::time::timeout(send_timeout, tx.send(Ok(Bytes::from(chunk)))).await {
                Ok(Ok(())) if done => return,
                Ok(Ok(())) => {}
                Ok(Err(_)) => return, // the client went away
                Err(_) => {
                    abandon.store(true, Ordering::Relaxed);
                    m.stalled.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        ledger_id = id,
                        entry_id = tail.next_entry_id(),
                        "follow abandoned: the client took nothing for the send deadline"
                    );
                    return;
                }
            }
        }
    });
    Ok(HttpResponse::Ok()
        .content_type(format.content_type())
        .insert_header(("cache-control", "no-cache"))
        .streaming(api::stream_body(Vec::new(), rx, abandoned)))
}
