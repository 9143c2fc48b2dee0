//! The bookie directory (the registry, cached) and the bookie calls the
//! protocol makes, with their answers mapped onto the state machines' inputs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use quire_metaclient::MetaClient;
use quire_proto::v1::{self, Entry, ErrorCode};
use quire_proto::Role;
use quire_rpc::{CallOptions, PeerClient, Reply, RpcClient, RpcError};
use tokio::time::Instant;

use crate::placement::Candidate;
use crate::recovery::{BookieRead, FenceAnswer};
use crate::shell::error::ClientError;
use crate::writer::{Answer, Member};

/// The registry as last listed, and the RPC client that reaches bookies.
pub struct Bookies {
    rpc: RpcClient,
    meta: Arc<MetaClient>,
    records: RwLock<HashMap<String, v1::BookieRecord>>,
    /// When the registry was last listed (refreshes for unknown ids are rate-limited).
    listed_at: Mutex<Option<Instant>>,
    min_refresh: Duration,
}

/// A bookie that cannot be called.
fn unregistered(bookie_id: &str) -> RpcError {
    RpcError::Unavailable { peer: bookie_id.to_string(), reason: "not in the bookie registry".into() }
}

impl Bookies {
    /// A directory over the metadata service's registry.
    pub fn new(rpc: RpcClient, meta: Arc<MetaClient>) -> Bookies {
        Bookies {
            rpc,
            meta,
            records: RwLock::new(HashMap::new()),
            listed_at: Mutex::new(None),
            min_refresh: Duration::from_millis(250),
        }
    }

    /// The metadata client.
    pub fn meta(&self) -> &Arc<MetaClient> {
        &self.meta
    }

    /// Lists the registry again.
    pub async fn refresh(&self) -> Result<Vec<v1::BookieRecord>, ClientError> {
        Ok(self.list().await?.bookies)
    }

    /// Lists the registry again, retired bookies included; later calls go
    /// to the addresses it names.
    pub async fn list(&self) -> Result<v1::ListBookiesResponse, ClientError> {
        let list = self.meta.call(v1::ListBookiesRequest {}).await.map_err(|e| ClientError::from_metadata(e, None))?;
        *self.records.write().expect("records lock") =
            list.bookies.iter().map(|b| (b.bookie_id.clone(), b.clone())).collect();
        *self.listed_at.lock().expect("listed lock") = Some(Instant::now());
        Ok(list)
    }

    /// Placement candidates from a fresh listing.
    pub async fn candidates(&self) -> Result<Vec<Candidate>, ClientError> {
        Ok(self
            .refresh()
            .await?
            .into_iter()
            .map(|b| Candidate {
                writable: b.state == v1::BookieState::Available as i32,
                bookie_id: b.bookie_id,
                instance_id: b.instance_id,
                rack: b.rack,
                free_bytes: b.free_disk_bytes,
            })
            .collect())
    }

    /// The registered instance id of `bookie_id`, if registered.
    pub fn instance_of(&self, bookie_id: &str) -> Option<String> {
        self.records.read().expect("records lock").get(bookie_id).map(|b| b.instance_id.clone())
    }

    /// `call` (a read: it changes nothing), once more on a new connection if
    /// the first attempt lost its connection. The first call over a
    /// connection to a process that has since restarted at its address
    /// meets that process's reset; only the next reaches it. The RPC layer
    /// never retries (it cannot know what is idempotent); reads are.
    async fn read_once_more_if_lost<T, F, Fut>(call: F) -> Result<T, RpcError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, RpcError>>,
    {
        match call().await {
            Err(RpcError::ConnectionLost { .. }) => call().await,
            r => r,
        }
    }

    async fn peer(&self, bookie_id: &str) -> Result<PeerClient, RpcError> {
        let known = self.records.read().expect("records lock").get(bookie_id).map(|b| b.address.clone());
        let addr = match known {
            Some(a) => a,
            None => {
                let stale = self.listed_at.lock().expect("listed lock").is_none_or(|t| t.elapsed() >= self.min_refresh);
                if stale {
                    let _ = self.refresh().await;
                }
                self.records
                    .read()
                    .expect("records lock")
                    .get(bookie_id)
                    .map(|b| b.address.clone())
                    .ok_or_else(|| unregistered(bookie_id))?
            }
        };
        Ok(self.rpc.peer(&addr, Role::Bookie, Some(bookie_id)))
    }

    /// Sends an add; the answer as the writer judges it. A ledger's adds share
    /// one lane, so each bookie receives them in order.
    pub async fn add(
        &self,
        member: &Member,
        entry: Entry,
        metadata_version: u64,
        recovery: bool,
        timeout: Duration,
    ) -> Answer {
        let ledger_id = entry.ledger_id;
        let req = v1::AddEntryRequest {
            entry: Some(entry),
            metadata_version,
            expected_instance_id: member.instance_id.clone(),
            recovery,
            replication: false,
        };
        let res = match self.peer(&member.bookie_id).await {
            Ok(p) => p.call_full(req, CallOptions { timeout: Some(timeout), order_key: Some(ledger_id) }).await,
            Err(e) => Err(e),
        };
        match res {
            Ok(r) => Answer::Stored { instance_id: r.instance_id },
            Err(e) => match e.code() {
                Some(ErrorCode::LedgerFenced | ErrorCode::LedgerClosed) => Answer::Fenced,
                Some(ErrorCode::MetadataUnavailable) => Answer::Unavailable,
                _ => {
                    tracing::debug!(ledger_id, bookie_id = %member.bookie_id, error = %e, "add failed");
                    Answer::Failed
                }
            },
        }
    }

    /// Sends several adds to one member in one request (AddEntries, in entry
    /// order); one answer per entry, as [`Bookies::add`] would give.
    pub async fn add_batch(
        &self,
        member: &Member,
        entries: Vec<Entry>,
        metadata_version: u64,
        recovery: bool,
        timeout: Duration,
    ) -> Vec<Answer> {
        let n = entries.len();
        let ledger_id = entries.first().map_or(0, |e| e.ledger_id);
        let adds = entries
            .into_iter()
            .map(|entry| v1::AddEntryRequest {
                entry: Some(entry),
                metadata_version,
                expected_instance_id: member.instance_id.clone(),
                recovery,
                replication: false,
            })
            .collect();
        let res = match self.peer(&member.bookie_id).await {
            Ok(p) => {
                let opts = CallOptions { timeout: Some(timeout), order_key: Some(ledger_id) };
                p.call_full(v1::AddEntriesRequest { adds }, opts).await
            }
            Err(e) => Err(e),
        };
        match res {
            Ok(r) if r.body.outcomes.len() == n => r
                .body
                .outcomes
                .into_iter()
                .map(|o| match ErrorCode::try_from(o.code) {
                    Ok(ErrorCode::Ok) => Answer::Stored { instance_id: r.instance_id.clone() },
                    Ok(ErrorCode::LedgerFenced | ErrorCode::LedgerClosed) => Answer::Fenced,
                    Ok(ErrorCode::MetadataUnavailable) => Answer::Unavailable,
                    _ => Answer::Failed,
                })
                .collect(),
            Ok(r) => {
                tracing::warn!(bookie_id = %member.bookie_id, sent = n, answered = r.body.outcomes.len(), "AddEntries answer does not match the request");
                vec![Answer::Failed; n]
            }
            Err(e) => {
                let a = match e.code() {
                    Some(ErrorCode::LedgerFenced | ErrorCode::LedgerClosed) => Answer::Fenced,
                    Some(ErrorCode::MetadataUnavailable) => Answer::Unavailable,
                    _ => Answer::Failed,
                };
                tracing::debug!(ledger_id, bookie_id = %member.bookie_id, error = %e, "batched add failed");
                vec![a; n]
            }
        }
    }

    /// Stores copies of `entries` (read from other replicas, bytes unchanged)
    /// on `member` as replication adds: in one request, in entry order. Ok
    /// only when every one is stored by the instance `member` names.
    pub async fn replicate(&self, member: &Member, entries: Vec<Entry>, timeout: Duration) -> Result<(), String> {
        let n = entries.len();
        let ledger_id = entries.first().map_or(0, |e| e.ledger_id);
        let adds = entries
            .into_iter()
            .map(|entry| v1::AddEntryRequest {
                entry: Some(entry),
                metadata_version: 0,
                expected_instance_id: member.instance_id.clone(),
                recovery: false,
                replication: true,
            })
            .collect();
        let p = self.peer(&member.bookie_id).await.map_err(|e| e.to_string())?;
        let opts = CallOptions { timeout: Some(timeout), order_key: Some(ledger_id) };
        let r = p.call_full(v1::AddEntriesRequest { adds }, opts).await.map_err(|e| e.to_string())?;
        if r.body.outcomes.len() != n {
            return Err(format!("{} outcomes for {n} adds", r.body.outcomes.len()));
        }
        match r.body.outcomes.iter().find(|o| o.code != ErrorCode::Ok as i32) {
            Some(o) => Err(format!("entry {}: code {} {}", o.entry_id, o.code, o.message)),
            None => Ok(()),
        }
    }

    /// The instance the process at `bookie_id`'s registered address is
    /// (its cookie's): a replacement at the address serves before its
    /// predecessor's registration has gone.
    pub async fn info(&self, bookie_id: &str, timeout: Duration) -> Result<String, RpcError> {
        Self::read_once_more_if_lost(|| async {
            let p = self.peer(bookie_id).await?;
            Ok(p.call_full(v1::BookieInfoRequest {}, CallOptions::timeout(timeout)).await?.instance_id)
        })
        .await
    }

    /// Which of `entry_ids` the bookie cannot serve: (missing, corrupt).
    pub async fn check_entries(
        &self,
        bookie_id: &str,
        ledger_id: u64,
        entry_ids: Vec<u64>,
        timeout: Duration,
    ) -> Result<(Vec<u64>, Vec<u64>, String), RpcError> {
        Self::read_once_more_if_lost(|| async {
            let p = self.peer(bookie_id).await?;
            let req = v1::CheckEntriesRequest { ledger_id, entry_ids: entry_ids.clone() };
            let r = p.call_full(req, CallOptions::timeout(timeout)).await?;
            Ok((r.body.missing, r.body.corrupt, r.instance_id))
        })
        .await
    }

    /// A read (with `fence`, a recovery read), as recovery judges it.
    pub async fn recovery_read(&self, member: &Member, ledger_id: u64, entry_id: u64, timeout: Duration) -> BookieRead {
        match self.read(&member.bookie_id, ledger_id, entry_id, true, timeout).await {
            Ok(r) => match r.body.entry {
                Some(e) if e.digest_ok() => BookieRead::Entry(e),
                _ => BookieRead::Corrupt,
            },
            Err(RpcError::Remote { code: ErrorCode::NoSuchEntry | ErrorCode::NoSuchLedger, instance_id, .. }) => {
                BookieRead::NoSuchEntry { instance_id }
            }
            Err(RpcError::Remote { code: ErrorCode::CorruptEntry, .. }) => BookieRead::Corrupt,
            Err(e) => {
                tracing::debug!(ledger_id, entry_id, bookie_id = %member.bookie_id, error = %e, "recovery read failed");
                BookieRead::Failed
            }
        }
    }

    /// Reads one entry.
    pub async fn read(
        &self,
        bookie_id: &str,
        ledger_id: u64,
        entry_id: u64,
        fence: bool,
        timeout: Duration,
    ) -> Result<Reply<v1::ReadEntryResponse>, RpcError> {
        // A fencing read may go twice too: a fence is idempotent.
        Self::read_once_more_if_lost(|| async {
            let req = v1::ReadEntryRequest { ledger_id, entry_id, fence, metadata_version: 0 };
            self.peer(bookie_id).await?.call_full(req, CallOptions::timeout(timeout)).await
        })
        .await
    }

    /// Reads a range of a ledger's entries in one request (ReadEntries):
    /// what the bookie holds of it, up to the bookie's bounds.
    pub async fn read_entries(
        &self,
        bookie_id: &str,
        req: v1::ReadEntriesRequest,
        timeout: Duration,
    ) -> Result<Reply<v1::ReadEntriesResponse>, RpcError> {
        Self::read_once_more_if_lost(|| async {
            self.peer(bookie_id).await?.call_full(req, CallOptions::timeout(timeout)).await
        })
        .await
    }

    /// Fences the ledger on `member`.
    pub async fn fence(
        &self,
        member: &Member,
        ledger_id: u64,
        metadata_version: u64,
        timeout: Duration,
    ) -> FenceAnswer {
        let req = v1::FenceLedgerRequest { ledger_id, metadata_version };
        let res = match self.peer(&member.bookie_id).await {
            Ok(p) => p.call_full(req, CallOptions::timeout(timeout)).await,
            Err(e) => Err(e),
        };
        match res {
            Ok(r) => FenceAnswer::Fenced { lac: r.body.last_add_confirmed },
            Err(e) => {
                tracing::debug!(ledger_id, bookie_id = %member.bookie_id, error = %e, "fence failed");
                FenceAnswer::Failed
            }
        }
    }

    /// The bookie's LAC for the ledger, and the instance that answered.
    pub async fn read_lac(
        &self,
        bookie_id: &str,
        ledger_id: u64,
        timeout: Duration,
    ) -> Result<(i64, String), RpcError> {
        let answer = Self::read_once_more_if_lost(|| async {
            self.peer(bookie_id).await?.call_full(v1::ReadLacRequest { ledger_id }, CallOptions::timeout(timeout)).await
        });
        match answer.await {
            Ok(r) => Ok((r.body.last_add_confirmed, r.instance_id)),
            // A bookie that has not seen the ledger holds none of its entries:
            // for the LAC that is -1, not an error (a new ledger, issue #21
            // item 3). The caller still checks the instance that answered.
            Err(RpcError::Remote { code: ErrorCode::NoSuchLedger, instance_id, .. }) => Ok((-1, instance_id)),
            Err(e) => Err(e),
        }
    }

    /// Long-polls the bookie until its LAC passes `after` or `wait` ends: the
    /// LAC, and the instance that answered.
    pub async fn wait_lac(
        &self,
        bookie_id: &str,
        ledger_id: u64,
        after: i64,
        wait: Duration,
    ) -> Result<(i64, String), RpcError> {
        let p = self.peer(bookie_id).await?;
        let req = v1::WaitLacRequest { ledger_id, after, timeout_ms: wait.as_millis().min(u32::MAX as u128) as u32 };
        // The server answers at `wait` at the latest; allow for the trip.
        let opts = CallOptions::timeout(wait + Duration::from_secs(2));
        let r = p.call_full(req, opts).await?;
        Ok((r.body.last_add_confirmed, r.instance_id))
    }

    /// Publishes an explicit LAC. Fenced is reported; other failures are not
    /// the writer's concern (the next entry carries the LAC anyway).
    pub async fn write_lac(&self, member: &Member, ledger_id: u64, lac: i64, metadata_version: u64) -> Answer {
        let req = v1::WriteLacRequest { ledger_id, last_add_confirmed: lac, metadata_version };
        let res = match self.peer(&member.bookie_id).await {
            Ok(p) => {
                p.call_full(req, CallOptions { timeout: Some(Duration::from_secs(2)), order_key: Some(ledger_id) })
                    .await
            }
            Err(e) => Err(e),
        };
        match res {
            Ok(r) => Answer::Stored { instance_id: r.instance_id },
            Err(e) if matches!(e.code(), Some(ErrorCode::LedgerFenced | ErrorCode::LedgerClosed)) => Answer::Fenced,
            Err(_) => Answer::Failed,
        }
    }
}
