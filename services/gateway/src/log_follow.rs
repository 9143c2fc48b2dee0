//! `GET /v1/logs/{name}/records?follow=true` with `Accept: text/event-stream`
//! (issue #47 item 5): a log's records as server-sent events, as they are
//! committed, so that a browser's EventSource can follow a log.
//!
//! - One event a record: `id: <offset>` / `event: record` / `data:` the
//!   record as a read answers it (`{"offset","data"}`, with
//!   `"producer_id"` and `"sequence"` for an idempotent append). A
//!   reconnecting EventSource sends the last id it saw (`Last-Event-ID`)
//!   and the stream resumes after it, whatever `from` says below it.
//! - `: heartbeat next=N` comments after every `--follow-heartbeat-ms`
//!   with nothing new, so that proxies keep an idle stream.
//! - A log does not end: the stream runs until the client goes away, or
//!   ends with `event: error` and the API's error body (the log deleted,
//!   the reader fallen below the trim point: 410 Trimmed), never cut off
//!   without a word.
//! - The log must exist and `from` must be held before the status goes
//!   out (404, 410 otherwise). Counted against `--max-follows`, with the
//!   ledgers' follows. Backpressure as theirs: one page ahead of what the
//!   client took, and a client that takes nothing for `--send-timeout-ms`
//!   is cut off.
//!
//! Without `Accept: text/event-stream`, `follow=true` stays a long poll
//! answered as one JSON document (logs.rs).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use actix_web::{web, HttpResponse};
use bytes::Bytes;
use quire_client::LogEntry;

use crate::api::{self, Metrics, Sent, StreamGuard};
use crate::error::ApiError;
use crate::follow::Follows;
use crate::state::GatewayState;

/// Records per step of a follower.
const FOLLOW_PAGE_RECORDS: usize = 64;

fn record_event(r: &LogEntry) -> String {
    format!("id: {}\nevent: record\ndata: {}\n\n", r.offset, crate::logs::record_json(r))
}

fn error_event(e: &ApiError) -> String {
    format!("event: error\ndata: {}\n\n", e.body())
}

/// The event stream of log `name` from offset `from`.
pub async fn follow(
    state: &Arc<GatewayState>,
    m: web::Data<Metrics>,
    name: String,
    from: u64,
) -> Result<HttpResponse, ApiError> {
    let held = Follows::take(state)?;
    // The first page before the status: a missing log is a 404, a trimmed
    // offset a 410, as a read answers them.
    let s = state.clone();
    let first_name = name.clone();
    let first =
        state.run_read(async move { Ok(s.client.read_log(&first_name, from, FOLLOW_PAGE_RECORDS).await?) }).await?;
    let heartbeat = state.follow_heartbeat;
    let send_timeout = state.send_timeout;
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, ApiError>>(4);
    let abandoned = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let abandon = abandoned.clone();
    let guard = StreamGuard::start(&m);
    let s = state.clone();
    state.rt.spawn(async move {
        let _guard = guard;
        let _held = held;
        let mut next = first.last().map_or(from, |r| r.offset + 1);
        let mut page = Some(Ok(first));
        loop {
            let got = match page.take() {
                Some(p) => p,
                None => s.client.read_log_wait(&name, next, FOLLOW_PAGE_RECORDS, heartbeat).await,
            };
            let (chunk, done) = match got {
                Ok(records) if records.is_empty() => (format!(": heartbeat next={next}\n\n"), false),
                Ok(records) => {
                    m.reads.fetch_add(records.len() as u64, Ordering::Relaxed);
                    next = records.last().map_or(next, |r| r.offset + 1);
                    (records.iter().map(record_event).collect::<String>(), false)
                }
                Err(e) => {
                    tracing::warn!(log = %name, offset = next, error = %e, "log follow cut short");
                    (error_event(&ApiError::from(e)), true)
                }
            };
            match api::send_chunk(&tx, Bytes::from(chunk), send_timeout, &abandon, &m).await {
                Sent::Taken if done => return,
                Sent::Taken => {}
                Sent::Gone => return,
                Sent::Abandoned => {
                    tracing::warn!(
                        log = %name,
                        offset = next,
                        "log follow abandoned: the client took nothing for the send deadline"
                    );
                    return;
                }
            }
        }
    });
    Ok(HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header(("cache-control", "no-cache"))
        .streaming(api::stream_body(Vec::new(), rx, abandoned)))
}
