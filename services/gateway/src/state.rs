//! What the gateway holds: the client library, and the writer handles of the
//! ledgers it created (an append elsewhere is NotWriter).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use quire_client::{Client, LedgerWriter};

use crate::error::ApiError;

/// A writer this gateway created, and the HTTP principal it was created for
/// (kept beside it: an append checks it without reading the metadata).
#[derive(Clone)]
pub struct Held {
    pub writer: LedgerWriter,
    pub principal: Bytes,
}

/// The writer of a log this gateway owns, and who may write through it.
#[derive(Clone)]
pub struct HeldLog {
    pub writer: quire_client::LogWriter,
    /// The log's HTTP principal (empty: none recorded).
    pub principal: String,
    /// When it was last used, in ms since the gateway's start (idle logs
    /// are let go).
    pub used_ms: Arc<std::sync::atomic::AtomicU64>,
}

/// Shared by every HTTP worker.
pub struct GatewayState {
    /// The client library.
    pub client: Client,
    /// Writers of the ledgers this gateway created, by ledger id.
    pub writers: Mutex<HashMap<u64, Held>>,
    /// Writers of the logs this gateway owns (holds the lease of), by name.
    pub logs: Mutex<HashMap<String, HeldLog>>,
    /// The lock grant of each log this gateway owns, by name.
    pub leases: Mutex<HashMap<String, u64>>,
    /// One takeover at a time per log (a takeover of one log never waits
    /// on another's): the claim of each log being taken over now.
    pub claiming: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// A log's writer unused this long is let go, with its lease.
    pub log_idle: std::time::Duration,
    /// This process's label in a log's owner and its lock (`pid@http address`).
    pub owner: String,
    /// The runtime the client lives on (quinn, writer actors): handlers run
    /// client calls there, not on the HTTP worker threads.
    pub rt: tokio::runtime::Handle,
    /// Largest entry accepted.
    pub max_entry_bytes: usize,
    /// Most entries one range read returns.
    pub max_range_entries: usize,
    /// Longest a request's client work may take: then 504 Timeout.
    pub request_timeout: std::time::Duration,
    /// Longest a request body may take to arrive: then 408.
    pub body_timeout: std::time::Duration,
    /// How long a streamed response may wait for its client to take more.
    pub send_timeout: std::time::Duration,
    /// A follow stream with nothing new sends a heartbeat this often (and
    /// sees a close within it).
    pub follow_heartbeat: std::time::Duration,
    /// Most follow streams at once.
    pub max_follows: usize,
    /// Follow streams now.
    pub follows: std::sync::atomic::AtomicUsize,
    /// Tasks on the client's runtime for HTTP requests (for /metrics).
    pub client_tasks: std::sync::atomic::AtomicUsize,
}

impl GatewayState {
    /// Runs `f` on the client's runtime, for at most the request timeout.
    /// It runs to its end even if the HTTP client goes away: a change
    /// begun (a create, a close) is finished, so that this gateway's own
    /// state (its writers) stays true. Reads use [`GatewayState::run_read`].
    pub async fn run<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl Future<Output = Result<T, ApiError>> + Send + 'static,
    ) -> Result<T, ApiError> {
        let task = self.spawn_counted(f);
        task.await.map_err(|e| ApiError::internal(format!("request task: {e}")))?
    }

    /// As [`GatewayState::run`], for work that changes nothing (a read, a
    /// long poll): it is cancelled when the HTTP client goes away (actix
    /// drops the handler), rather than holding a task and a reader until
    /// the request timeout (issue #20 item 4).
    pub async fn run_read<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl Future<Output = Result<T, ApiError>> + Send + 'static,
    ) -> Result<T, ApiError> {
        struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);
        impl<T> Drop for AbortOnDrop<T> {
            fn drop(&mut self) {
                self.0.abort();
            }
        }
        let mut task = AbortOnDrop(self.spawn_counted(f));
        (&mut task.0).await.map_err(|e| ApiError::internal(format!("request task: {e}")))?
    }

    /// Tasks running on the client's runtime for HTTP requests now.
    pub fn client_tasks(&self) -> usize {
        self.client_tasks.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn spawn_counted<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl Future<Output = Result<T, ApiError>> + Send + 'static,
    ) -> tokio::task::JoinHandle<Result<T, ApiError>> {
        struct Counted(Arc<GatewayState>);
        impl Drop for Counted {
            fn drop(&mut self) {
                self.0.client_tasks.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        let limit = self.request_timeout;
        self.client_tasks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let counted = Counted(self.clone());
        // The request's span (its trace) goes along to the client's runtime.
        let span = tracing::Span::current();
        self.rt.spawn(tracing::Instrument::instrument(
            async move {
                let _counted = counted;
                tokio::time::timeout(limit, f).await.unwrap_or_else(|_| Err(ApiError::timeout(limit)))
            },
            span,
        ))
    }

    /// `f` (already on an HTTP worker), for at most the request timeout.
    pub async fn timed<T>(&self, f: impl Future<Output = Result<T, ApiError>>) -> Result<T, ApiError> {
        let limit = self.request_timeout;
        tokio::time::timeout(limit, f).await.unwrap_or_else(|_| Err(ApiError::timeout(limit)))
    }

    /// The writer of `ledger_id`, if this gateway holds it.
    pub fn writer(&self, ledger_id: u64) -> Option<LedgerWriter> {
        self.writers.lock().expect("writers lock").get(&ledger_id).map(|h| h.writer.clone())
    }

    /// The writer of `ledger_id` and its principal, if this gateway holds it.
    pub fn held(&self, ledger_id: u64) -> Option<Held> {
        self.writers.lock().expect("writers lock").get(&ledger_id).cloned()
    }
}
