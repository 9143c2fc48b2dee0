//! `GET /v1/ledgers/{id}/entries?from=N&follow=true`: a ledger's entries as
//! the LAC passes them, until the ledger is closed (the stream then ends
//! cleanly after its last entry) or the client goes away.
//!
//! - Formats, by Accept: NDJSON (`application/x-ndjson`, the default), one
//!   JSON object a line: `{"entry_id":N,"data":"<base64>"}` per entry,
//!   `{"heartbeat":true,"lac":L}` after every `--follow-heartbeat-ms` with
//!   nothing new, and `{"closed":true,"last_entry_id":L}` last (or
//!   `{"end":true,"last_entry_id":TO}` once `to=` was reached on a ledger
//!   still open). Or server-sent events (`text/event-stream`): `id: N` /
//!   `event: entry` / `data: {..}` per entry, `: heartbeat lac=L` comments,
//!   and `event: closed` (or `end`) last; a reconnecting EventSource's
//!   `Last-Event-ID` resumes after that entry.
//! - At most `--max-follows` at once per gateway (then 503 Overloaded): each
//!   holds a parked long poll on every bookie of its ledger's ensemble.
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

use crate::api::{self, Metrics, Sent, StreamGuard};
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

    /// The last line of a follow that failed (the ledger deleted, no
    /// replica answering): the API's error body, as a line or an event.
    fn error(self, e: &ApiError) -> String {
        let json = e.body();
        match self {
            Format::Ndjson => format!("{json}\n"),
            Format::EventStream => format!("event: error\ndata: {json}\n\n"),
        }
    }

    /// The last line: the ledger closed (`closed`), or the requested end reached.
    fn end(self, last_entry_id: i64, closed: bool) -> String {
        let (json, event) = match closed {
            true => (serde_json::json!({ "closed": true, "last_entry_id": last_entry_id }), "closed"),
            false => (serde_json::json!({ "end": true, "last_entry_id": last_entry_id }), "end"),
        };
        match self {
            Format::Ndjson => format!("{json}\n"),
            Format::EventStream => format!("event: {event}\ndata: {json}\n\n"),
        }
    }
}

/// Where a follow starts: after an EventSource's Last-Event-ID (it
/// reconnects to the same URL, `from` included, and says what it has), else
/// `from`, else 0. Entry ids past i64::MAX are no ledger's.
pub fn start(req: &HttpRequest, from: Option<u64>, format: Format) -> Result<u64, ApiError> {
    let last = req.headers().get("last-event-id").filter(|_| format == Format::EventStream);
    let at = match last.map(|v| v.to_str().ok().and_then(|s| s.trim().parse::<u64>().ok())) {
        None => from.unwrap_or(0),
        Some(Some(id)) => id.saturating_add(1).max(from.unwrap_or(0)),
        Some(None) => return Err(ApiError::bad_request("Last-Event-ID is not an entry id")),
    };
    if at > i64::MAX as u64 {
        return Err(ApiError::bad_request(format!("entry {at} is past any ledger's end")));
    }
    Ok(at)
}

/// One follow stream while it lives, counted against `--max-follows`
/// (a ledger's, or a log's event stream).
pub(crate) struct Follows(Arc<GatewayState>);

impl Follows {
    pub(crate) fn take(state: &Arc<GatewayState>) -> Result<Follows, ApiError> {
        let now = state.follows.fetch_add(1, Ordering::SeqCst);
        let held = Follows(state.clone());
        if now >= state.max_follows {
            return Err(ApiError::overloaded(format!("{now} follow streams already open (--max-follows)")));
        }
        Ok(held)
    }
}

impl Drop for Follows {
    fn drop(&mut self) {
        self.0.follows.fetch_sub(1, Ordering::SeqCst);
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
    // Counted from here: a follow over the cap goes no further.
    let held = Follows::take(state)?;
    let s = state.clone();
    let reader = state.run(async move { api::open_reader(&s, id).await }).await?;
    let mut tail = Tail::new(reader, from, to, FOLLOW_PAGE_ENTRIES);
    let heartbeat = state.follow_heartbeat;
    let send_timeout = state.send_timeout;
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, ApiError>>(4);
    let abandoned = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let abandon = abandoned.clone();
    let guard = StreamGuard::start(&m);
    state.rt.spawn(async move {
        let _guard = guard;
        let mut held = Some(held);
        loop {
            let (chunk, done) = match tail.step(heartbeat).await {
                Ok(TailEvent::Entries(entries)) => {
                    m.reads.fetch_add(entries.len() as u64, Ordering::Relaxed);
                    (entries.iter().map(|e| format.entry(e)).collect::<String>(), false)
                }
                Ok(TailEvent::Idle { lac }) => (format.heartbeat(lac), false),
                Ok(TailEvent::End { last_entry_id, closed }) => {
                    // Uncounted before the last line goes: a client that saw
                    // the end may open its next follow at once.
                    held.take();
                    (format.end(last_entry_id, closed), true)
                }
                Err(e) => {
                    // Said in the stream's last line, which then ends
                    // cleanly: a client tells "the follow failed, and why"
                    // from "the connection broke" (a cut-off chunked body).
                    tracing::warn!(ledger_id = id, entry_id = tail.next_entry_id(), error = %e, "follow cut short");
                    held.take();
                    (format.error(&ApiError::from(e)), true)
                }
            };
            match api::send_chunk(&tx, Bytes::from(chunk), send_timeout, &abandon, &m).await {
                Sent::Taken if done => return,
                Sent::Taken => {}
                Sent::Gone => return,
                Sent::Abandoned => {
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
