//! What the gateway holds: the client library, and the writer handles of the
//! ledgers it created (an append elsewhere is NotWriter).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use quire_client::{Client, LedgerWriter};

use crate::error::ApiError;

/// Shared by every HTTP worker.
pub struct GatewayState {
    /// The client library.
    pub client: Client,
    /// Writers of the ledgers this gateway created, by ledger id.
    pub writers: Mutex<HashMap<u64, LedgerWriter>>,
    /// The runtime the client lives on (quinn, writer actors): handlers run
    /// client calls there, not on the HTTP worker threads.
    pub rt: tokio::runtime::Handle,
    /// Largest entry accepted.
    pub max_entry_bytes: usize,
    /// Most entries one range read returns.
    pub max_range_entries: usize,
    /// Longest a request's client work may take: then 504 Timeout.
    pub request_timeout: std::time::Duration,
}

impl GatewayState {
    /// Runs `f` on the client's runtime, for at most the request timeout.
    pub async fn run<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl Future<Output = Result<T, ApiError>> + Send + 'static,
    ) -> Result<T, ApiError> {
        let limit = self.request_timeout;
        // The request's span (its trace) goes along to the client's runtime.
        let span = tracing::Span::current();
        let task = self.rt.spawn(tracing::Instrument::instrument(
            async move { tokio::time::timeout(limit, f).await.unwrap_or_else(|_| Err(ApiError::timeout(limit))) },
            span,
        ));
        task.await.map_err(|e| ApiError::internal(format!("request task: {e}")))?
    }

    /// `f` (already on an HTTP worker), for at most the request timeout.
    pub async fn timed<T>(&self, f: impl Future<Output = Result<T, ApiError>>) -> Result<T, ApiError> {
        let limit = self.request_timeout;
        tokio::time::timeout(limit, f).await.unwrap_or_else(|_| Err(ApiError::timeout(limit)))
    }

    /// The writer of `ledger_id`, if this gateway holds it.
    pub fn writer(&self, ledger_id: u64) -> Option<LedgerWriter> {
        self.writers.lock().expect("writers lock").get(&ledger_id).cloned()
    }
}
