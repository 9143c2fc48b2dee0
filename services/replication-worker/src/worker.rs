//! The worker loop: claim a marked ledger, repair it, release it.
//!
//! Claims are `replicate/<ledger>` locks in the metadata service under a
//! lease that a task renews while the repair runs; a worker that loses its
//! claim (a partition, a pause longer than the lease) stops copying at the
//! next batch. A worker killed mid-copy simply lets its lease run out: the
//! mark is still there and another worker claims it and starts over (its
//! copies are idempotent; what the dead one wrote is unreferenced until
//! recorded).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use quire_client::meta::LedgerState;
use quire_client::{Client, ClientError, Throttle};
use quire_proto::v1::{self, ErrorCode};

/// How the worker behaves.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Who claims (unique per process).
    pub owner: String,
    /// Claim lease; renewed every third of it.
    pub claim_lease: Duration,
    /// How long an open ledger whose last segment names a missing bookie is
    /// left to its writer before the worker recovers (fences and closes) it.
    pub open_ledger_grace: Duration,
    /// Pause between scans of the marks when there was nothing to do.
    pub idle_poll: Duration,
    /// Marked ledgers repaired at once. Each repair is a few metadata
    /// round trips (claim, CAS, clear, release) around its copies; one at a
    /// time, many small ledgers took a minute per thousand to repair, long
    /// enough for a second disk loss to take the last copies (fault suite,
    /// seed 139).
    pub parallel_ledgers: usize,
    /// Counters for /metrics.
    pub stats: Arc<WorkerStats>,
    /// When this worker first found a ledger's writer still on a missing
    /// bookie, by (ledger, bookie).
    pub writer_waits: Arc<Mutex<HashMap<(u64, String), tokio::time::Instant>>>,
}

/// What /metrics shows.
#[derive(Debug, Default)]
pub struct WorkerStats {
    /// Payload bytes copied.
    pub bytes_total: AtomicU64,
    /// Entries copied.
    pub entries_total: AtomicU64,
    /// Bookies cleared from marks (repaired).
    pub repaired_total: AtomicU64,
    /// Repairs that failed (the mark stays).
    pub failed_total: AtomicU64,
    /// Open ledgers recovered after the grace period.
    pub recovered_total: AtomicU64,
    /// Ledgers claimed.
    pub claims_total: AtomicU64,
}

impl WorkerStats {
    /// The Prometheus text exposition.
    pub fn render(&self, throttle_bytes_per_sec: u64) -> String {
        use quire_runtime::metrics::metric;
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut s = String::new();
        metric(
            &mut s,
            "quire_rereplication_bytes_total",
            "counter",
            "Payload bytes copied to restore lost copies.",
            g(&self.bytes_total),
        );
        metric(
            &mut s,
            "quire_rereplication_entries_total",
            "counter",
            "Entries copied to restore lost copies.",
            g(&self.entries_total),
        );
        metric(
            &mut s,
            "quire_rereplication_repaired_total",
            "counter",
            "Bookies' copies of a ledger restored (cleared from marks).",
            g(&self.repaired_total),
        );
        metric(
            &mut s,
            "quire_rereplication_failed_total",
            "counter",
            "Repairs that failed and will be retried.",
            g(&self.failed_total),
        );
        metric(
            &mut s,
            "quire_rereplication_recovered_total",
            "counter",
            "Open ledgers recovered after their writer's grace period.",
            g(&self.recovered_total),
        );
        metric(&mut s, "quire_rereplication_claims_total", "counter", "Marked ledgers claimed.", g(&self.claims_total));
        metric(
            &mut s,
            "quire_rereplication_throttle_bytes_per_second",
            "gauge",
            "Copy rate limit (0: none).",
            throttle_bytes_per_sec,
        );
        s
    }
}

/// Runs until the task is dropped.
pub async fn run(client: Client, cfg: WorkerConfig, throttle: Arc<Throttle>) {
    loop {
        let worked = match scan(&client, &cfg, &throttle).await {
            Ok(n) => n > 0,
            Err(e) => {
                tracing::warn!(error = %e, "scanning under-replicated ledgers failed");
                false
            }
        };
        if !worked {
            tokio::time::sleep(cfg.idle_poll).await;
        }
    }
}

/// One pass over the marks, `parallel_ledgers` at a time; how many ledgers
/// it worked on.
async fn scan(client: &Client, cfg: &WorkerConfig, throttle: &Arc<Throttle>) -> Result<usize, ClientError> {
    let marks = client.under_replicated().await?;
    let turns = Arc::new(tokio::sync::Semaphore::new(cfg.parallel_ledgers.max(1)));
    let mut tasks = tokio::task::JoinSet::new();
    for mark in marks {
        let turn = turns.clone().acquire_owned().await.expect("the semaphore is never closed");
        let (client, cfg, throttle) = (client.clone(), cfg.clone(), throttle.clone());
        tasks.spawn(async move {
            let _turn = turn;
            // One ledger that cannot be repaired now (its recovery fails, a
            // bookie it needs is down) must not hold up the others.
            match repair_one(&client, &cfg, &throttle, &mark).await {
                Ok(worked) => worked,
                Err(e) => {
                    tracing::warn!(ledger_id = mark.ledger_id, error = %e, "repair failed; moving on, retried next pass");
                    false
                }
            }
        });
    }
    let mut worked = 0;
    while let Some(r) = tasks.join_next().await {
        if matches!(r, Ok(true)) {
            worked += 1;
        }
    }
    Ok(worked)
}

/// Claims and repairs one marked ledger; false when another worker holds it.
async fn repair_one(
    client: &Client,
    cfg: &WorkerConfig,
    throttle: &Arc<Throttle>,
    mark: &v1::UnderReplicatedMark,
) -> Result<bool, ClientError> {
    let ledger_id = mark.ledger_id;
    let name = format!("replicate/{ledger_id}");
    let meta = client.meta().clone();
    let lease_ms = cfg.claim_lease.as_millis() as u32;
    let lock = match meta
        .call(v1::AcquireLockRequest { name: name.clone(), owner: cfg.owner.clone(), lease_ms, take_over: false })
        .await
    {
        Ok(r) => r.lock.ok_or_else(|| ClientError::MetadataUnavailable("lock answer without a lock".into()))?,
        Err(e) if e.code() == Some(ErrorCode::LockHeld) => return Ok(false),
        Err(e) => return Err(ClientError::from_metadata(e, None)),
    };
    // Renew the claim while we work; `held` goes false the moment it is lost.
    let held = Arc::new(AtomicBool::new(true));
    let renewer = {
        let (meta, name, held) = (meta.clone(), name.clone(), held.clone());
        let every = cfg.claim_lease / 3;
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let r = meta.call(v1::RenewLockRequest { name: name.clone(), lock_id: lock.lock_id }).await;
                if let Err(e) = r {
                    tracing::warn!(ledger_id, error = %e, "lost the claim on a ledger");
                    held.store(false, Ordering::SeqCst);
                    return;
                }
            }
        })
    };
    cfg.stats.claims_total.fetch_add(1, Ordering::Relaxed);
    let result = repair_claimed(client, cfg, throttle, mark, &held).await;
    renewer.abort();
    let _ = meta.call(v1::ReleaseLockRequest { name, lock_id: lock.lock_id }).await;
    result.map(|()| true)
}

async fn repair_claimed(
    client: &Client,
    cfg: &WorkerConfig,
    throttle: &Throttle,
    mark: &v1::UnderReplicatedMark,
    held: &AtomicBool,
) -> Result<(), ClientError> {
    let ledger_id = mark.ledger_id;
    let keep_going = || held.load(Ordering::SeqCst);
    let meta = match client.metadata(ledger_id).await {
        Ok(m) => m,
        Err(ClientError::NoSuchLedger(_)) => {
            clear(client, ledger_id, Vec::new()).await?;
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let mut repair = client.rereplicate(ledger_id, &mark.missing_bookie_ids, throttle, &keep_going).await?;
    // An open ledger whose writer has had its grace period and still sits on
    // a missing bookie: its writer is gone. Recover it (fence, close at the
    // true tail) so that its last segment becomes repairable.
    // The grace runs from when this worker first found the writer on that
    // bookie (its own monotonic clock; a bookie added to an old mark gets
    // its own grace, and another worker starts its clock afresh: later,
    // never sooner).
    let waited = {
        let now = tokio::time::Instant::now();
        let mut w = cfg.writer_waits.lock().expect("waits lock");
        w.retain(|(l, b), _| *l != ledger_id || repair.waiting_for_writer.contains(b));
        repair
            .waiting_for_writer
            .iter()
            .map(|b| now.saturating_duration_since(*w.entry((ledger_id, b.clone())).or_insert(now)))
            .max()
            .unwrap_or_default()
    };
    if !repair.waiting_for_writer.is_empty() && meta.state != LedgerState::Closed && waited >= cfg.open_ledger_grace {
        cfg.writer_waits.lock().expect("waits lock").retain(|(l, _), _| *l != ledger_id);
        tracing::warn!(
            ledger_id,
            waited_ms = waited.as_millis() as u64,
            "open ledger's writer did not move off a missing bookie: recovering it"
        );
        client.recover(ledger_id).await?;
        cfg.stats.recovered_total.fetch_add(1, Ordering::Relaxed);
        let again = client.rereplicate(ledger_id, &repair.waiting_for_writer, throttle, &keep_going).await?;
        repair.repaired.extend(again.repaired);
        repair.failed.extend(again.failed);
        repair.entries_copied += again.entries_copied;
        repair.bytes_copied += again.bytes_copied;
    }
    let st = &cfg.stats;
    st.bytes_total.fetch_add(repair.bytes_copied, Ordering::Relaxed);
    st.entries_total.fetch_add(repair.entries_copied, Ordering::Relaxed);
    st.repaired_total.fetch_add(repair.repaired.len() as u64, Ordering::Relaxed);
    st.failed_total.fetch_add(repair.failed.len() as u64, Ordering::Relaxed);
    for (bookie, why) in &repair.failed {
        tracing::warn!(ledger_id, bookie_id = %bookie, why = %why, "copies not restored yet; the mark stays");
    }
    if !repair.repaired.is_empty() {
        tracing::info!(
            ledger_id,
            repaired = ?repair.repaired,
            entries = repair.entries_copied,
            bytes = repair.bytes_copied,
            "ledger re-replicated"
        );
        clear(client, ledger_id, repair.repaired).await?;
    }
    Ok(())
}

async fn clear(client: &Client, ledger_id: u64, bookie_ids: Vec<String>) -> Result<(), ClientError> {
    client
        .meta()
        .call(v1::ClearUnderReplicatedRequest { ledger_id, bookie_ids })
        .await
        .map_err(|e| ClientError::from_metadata(e, Some(ledger_id)))?;
    Ok(())
}
