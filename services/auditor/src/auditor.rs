//! The auditor loop: win the election, then audit every interval.
//!
//! Only one auditor is active: it holds the `auditor` lock in the metadata
//! service under a lease it renews each pass; the others try to take it each
//! interval and take over within a lease of the active one's death. A pass:
//! list the registry, the marks and every ledger; mark the ledgers that keep
//! copies on a lost, draining or replaced bookie (replaced: the process at
//! its address answers as another instance than the one a segment names,
//! registered or not yet); every replica-check interval, ask each live bookie
//! whether it can serve the entries its fragments should hold, and mark the
//! ledgers with holes or corrupt copies (seed 004), going on at the next
//! passes with any bookie that did not answer; retire drained bookies;
//! publish the report.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use quire_client::fragments::repairable;
use quire_client::meta::LedgerMeta;
use quire_client::{Client, ClientError};
use quire_metaclient::MetaClient;
use quire_proto::v1::{self, ErrorCode};
use tokio::time::Instant;

use crate::audit::{
    current_instances, named_by, needs_repair, replaced_members, CheckScope, LostBookies, Now, ReplicaCheck,
};

/// How the auditor behaves.
#[derive(Debug, Clone)]
pub struct AuditorConfig {
    /// Who holds the election lock (unique per process).
    pub owner: String,
    /// The election lease (renewed every third of it, apart from the passes).
    pub election_lease: Duration,
    /// Between passes.
    pub interval: Duration,
    /// A bookie whose registration is gone this long is lost.
    pub lost_bookie_grace: Duration,
    /// Between replica checks (0: never).
    pub replica_check_interval: Duration,
}

const CHECK_BATCH_ENTRIES: usize = 4096;
/// Ledger metadata reads in flight while listing.
const LIST_IN_FLIGHT: usize = 32;
/// How long a bookie has to say which instance it is, each pass. An
/// answer is one in-memory look-up; a bookie slower than this is judged by
/// the registry for that pass.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// Bookies asked at once.
const PROBES_IN_FLIGHT: usize = 32;

/// What /metrics shows: the last report and running totals.
#[derive(Debug, Default)]
pub struct AuditorStats {
    /// This auditor holds the election lock.
    pub active: bool,
    /// The last pass's report.
    pub last: v1::AuditReport,
    /// Marks under way at the last pass.
    pub under_replicated_ledgers: u64,
    /// Totals since start.
    pub passes_total: u64,
    pub ledgers_marked_total: u64,
    pub entries_checked_total: u64,
    pub entries_missing_total: u64,
    pub entries_corrupt_total: u64,
    pub bookies_retired_total: u64,
    /// Log trims retention made.
    pub logs_trimmed_total: u64,
}

impl AuditorStats {
    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        use quire_runtime::metrics::metric;
        let mut s = String::new();
        metric(
            &mut s,
            "quire_auditor_active",
            "gauge",
            "1 when this auditor holds the election lock.",
            u8::from(self.active),
        );
        metric(&mut s, "quire_auditor_passes_total", "counter", "Audit passes run.", self.passes_total);
        metric(
            &mut s,
            "quire_auditor_logs_trimmed_total",
            "counter",
            "Log trims retention made (whole ledgers past a log's age or size limit).",
            self.logs_trimmed_total,
        );
        metric(
            &mut s,
            "quire_auditor_ledgers_checked",
            "gauge",
            "Ledgers the last pass looked at.",
            self.last.ledgers_checked,
        );
        metric(
            &mut s,
            "quire_auditor_lost_bookies",
            "gauge",
            "Bookies lost (gone past the grace period) at the last pass.",
            self.last.lost_bookies.len(),
        );
        metric(
            &mut s,
            "quire_auditor_draining_bookies",
            "gauge",
            "Bookies being decommissioned at the last pass.",
            self.last.draining_bookies.len(),
        );
        metric(
            &mut s,
            "quire_under_replicated_ledgers",
            "gauge",
            "Ledgers marked under-replicated at the last pass.",
            self.under_replicated_ledgers,
        );
        metric(
            &mut s,
            "quire_auditor_ledgers_marked_total",
            "counter",
            "Marks made (new ledgers or new bookies).",
            self.ledgers_marked_total,
        );
        metric(
            &mut s,
            "quire_auditor_entries_checked_total",
            "counter",
            "Entries read back by replica checks.",
            self.entries_checked_total,
        );
        metric(
            &mut s,
            "quire_auditor_entries_missing_total",
            "counter",
            "Entries replica checks found missing.",
            self.entries_missing_total,
        );
        metric(
            &mut s,
            "quire_auditor_entries_corrupt_total",
            "counter",
            "Entries replica checks found corrupt.",
            self.entries_corrupt_total,
        );
        metric(
            &mut s,
            "quire_auditor_replica_check_unreached_bookies",
            "gauge",
            "Bookies the replica check under way could not reach yet (it is not complete until they answer).",
            self.last.replica_check_unreached.len(),
        );
        metric(
            &mut s,
            "quire_auditor_replica_check_at_ms",
            "gauge",
            "Wall clock when the last complete replica check ended (ms since the epoch; 0: none yet).",
            self.last.replica_check_at_ms,
        );
        metric(
            &mut s,
            "quire_auditor_bookies_retired_total",
            "counter",
            "Drained bookies retired.",
            self.bookies_retired_total,
        );
        metric(
            &mut s,
            "quire_auditor_last_pass_ms",
            "gauge",
            "Wall clock of the last pass (ms since the epoch).",
            self.last.at_ms,
        );
        s
    }
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Now on the monotonic clock (since `start`) and the wall clock.
fn now(start: Instant) -> Now {
    Now { mono_ms: start.elapsed().as_millis() as u64, wall_ms: now_ms() }
}

/// The auditor lock while this process holds it: a task renews it every
/// third of the lease, apart from the passes, so that a pass longer than the
/// lease (thousands of ledgers to list and check) keeps it. Before, the lock
/// was renewed between passes and during the replica check only; listing
/// 1 500 ledgers outlived the 3 s lease, every pass then failed at its first
/// renewal, and no replica check ever finished (fault suite, seed 139).
struct Held {
    lock_id: u64,
    alive: Arc<AtomicBool>,
    renewer: tokio::task::JoinHandle<()>,
}

impl Held {
    fn start(meta: Arc<MetaClient>, lock_id: u64, lease: Duration) -> Held {
        let alive = Arc::new(AtomicBool::new(true));
        let flag = alive.clone();
        let renewer = tokio::spawn(async move {
            let mut renewed = Instant::now();
            loop {
                tokio::time::sleep(lease / 3).await;
                match meta.call(v1::RenewLockRequest { name: "auditor".into(), lock_id }).await {
                    Ok(_) => renewed = Instant::now(),
                    // Another grant is current: it is over.
                    Err(e) if e.code().is_some() => {
                        tracing::warn!(error = %e, "lost the auditor lock; standing by");
                        break;
                    }
                    // No answer: the lease may still stand; give up when it cannot.
                    Err(e) if renewed.elapsed() >= lease => {
                        tracing::warn!(error = %e, "could not renew the auditor lock within its lease; standing by");
                        break;
                    }
                    Err(e) => tracing::debug!(error = %e, "renewing the auditor lock failed; retrying"),
                }
            }
            flag.store(false, Ordering::SeqCst);
        });
        Held { lock_id, alive, renewer }
    }

    fn alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.renewer.abort();
    }
}

/// Runs until the task is dropped.
pub async fn run(client: Client, cfg: AuditorConfig, stats: Arc<Mutex<AuditorStats>>) {
    let mut lost = LostBookies::new(cfg.lost_bookie_grace.as_millis() as u64);
    let mut held: Option<Held> = None;
    let started = Instant::now();
    let mut check = ReplicaCheck::new(cfg.replica_check_interval.as_millis() as u64);
    let lease_ms = cfg.election_lease.as_millis() as u32;
    loop {
        let meta = client.meta();
        if held.as_ref().is_some_and(|h| !h.alive()) {
            held = None;
        }
        if held.is_none() {
            match meta
                .call(v1::AcquireLockRequest {
                    name: "auditor".into(),
                    owner: cfg.owner.clone(),
                    lease_ms,
                    take_over: false,
                })
                .await
            {
                Ok(r) => {
                    if let Some(l) = r.lock {
                        tracing::info!(owner = %cfg.owner, "this auditor is now the active one");
                        held = Some(Held::start(meta.clone(), l.lock_id, cfg.election_lease));
                    }
                }
                Err(e) if e.code() == Some(ErrorCode::LockHeld) => {}
                Err(e) => tracing::warn!(error = %e, "auditor election failed"),
            }
            // A standby's clocks are stale by the time it takes over: restart them.
            lost = LostBookies::new(cfg.lost_bookie_grace.as_millis() as u64);
        }
        stats.lock().expect("stats lock").active = held.is_some();
        if let Some(h) = &held {
            let scope = check.plan(now(started));
            let mut logs_trimmed = 0;
            let result = pass(&client, &cfg, &mut lost, scope.as_ref(), &h.alive, &mut logs_trimmed).await;
            stats.lock().expect("stats lock").logs_trimmed_total += logs_trimmed;
            match result {
                Ok((mut report, under_replicated, unreached)) => {
                    if scope.is_some() {
                        if !unreached.is_empty() {
                            tracing::warn!(
                                ?unreached,
                                "the replica check could not reach these bookies; asking them again at the next pass"
                            );
                        }
                        check.finish(unreached, now(started));
                    }
                    (report.replica_check_started_at_ms, report.replica_check_at_ms) = check.last();
                    report.replica_check_unreached = check.unreached();
                    {
                        let mut st = stats.lock().expect("stats lock");
                        st.passes_total += 1;
                        st.ledgers_marked_total += report.ledgers_marked;
                        st.entries_checked_total += report.entries_checked;
                        st.entries_missing_total += report.entries_missing;
                        st.entries_corrupt_total += report.entries_corrupt;
                        st.bookies_retired_total += report.retired_bookies.len() as u64;
                        st.under_replicated_ledgers = under_replicated;
                        st.last = report.clone();
                    }
                    if let Err(e) = meta.call(v1::PutAuditReportRequest { report: Some(report) }).await {
                        tracing::warn!(error = %e, "publishing the audit report failed");
                    }
                }
                Err(e) => tracing::warn!(error = %e, lock_id = h.lock_id, "audit pass failed"),
            }
        }
        tokio::time::sleep(cfg.interval).await;
    }
}

/// Every ledger's metadata, fetched `LIST_IN_FLIGHT` at a time (one at a
/// time, thousands of ledgers took seconds per pass).
async fn all_ledgers(client: &Client) -> Result<Vec<LedgerMeta>, ClientError> {
    let ids = client.list_all().await?;
    let mut out = Vec::with_capacity(ids.len());
    for chunk in ids.chunks(LIST_IN_FLIGHT) {
        let mut tasks = tokio::task::JoinSet::new();
        for &id in chunk {
            let client = client.clone();
            tasks.spawn(async move { client.metadata(id).await });
        }
        while let Some(r) = tasks.join_next().await {
            match r.map_err(|e| ClientError::MetadataUnavailable(format!("metadata task: {e}")))? {
                Ok(m) => out.push(m),
                Err(ClientError::NoSuchLedger(_)) => {} // deleted meanwhile
                Err(e) => return Err(e),
            }
        }
    }
    out.sort_by_key(|m| m.ledger_id);
    Ok(out)
}

async fn marks(client: &Client) -> Result<BTreeMap<u64, BTreeSet<String>>, ClientError> {
    Ok(client
        .under_replicated()
        .await?
        .into_iter()
        .map(|m| (m.ledger_id, m.missing_bookie_ids.into_iter().collect()))
        .collect())
}

async fn mark(client: &Client, ledger_id: u64, missing: Vec<String>, reason: String) -> Result<(), ClientError> {
    tracing::info!(ledger_id, ?missing, %reason, "marking a ledger under-replicated");
    match client.meta().call(v1::MarkUnderReplicatedRequest { ledger_id, missing_bookie_ids: missing, reason }).await {
        Ok(_) => Ok(()),
        Err(e) if e.code() == Some(ErrorCode::NoSuchLedger) => Ok(()), // deleted meanwhile
        Err(e) => Err(ClientError::from_metadata(e, Some(ledger_id))),
    }
}

/// Which instance each registered bookie's process answers as now (those
/// that answered within [`PROBE_TIMEOUT`]).
async fn live_instances(client: &Client, registry: &[v1::BookieRecord]) -> BTreeMap<String, String> {
    let mut live = BTreeMap::new();
    for chunk in registry.chunks(PROBES_IN_FLIGHT) {
        let mut tasks = tokio::task::JoinSet::new();
        for b in chunk {
            let client = client.clone();
            let id = b.bookie_id.clone();
            // (A lost connection is asked once more by `info` itself: the
            // first call after a replacement meets the old connection's reset.)
            tasks.spawn(async move {
                let r = client.bookies().info(&id, PROBE_TIMEOUT).await;
                (id, r)
            });
        }
        while let Some(r) = tasks.join_next().await {
            match r {
                Ok((id, Ok(instance))) => {
                    live.insert(id, instance);
                }
                Ok((id, Err(e))) => {
                    tracing::debug!(bookie_id = %id, error = %e, "bookie did not say which instance it is")
                }
                Err(e) => tracing::warn!(error = %e, "a bookie probe task failed"),
            }
        }
    }
    live
}

/// One audit pass: its report, the ledgers marked under-replicated, and the
/// bookies the replica check (if `replica_check` says it runs) could not reach.
async fn pass(
    client: &Client,
    cfg: &AuditorConfig,
    lost: &mut LostBookies,
    replica_check: Option<&CheckScope>,
    held: &AtomicBool,
    logs_trimmed: &mut u64,
) -> Result<(v1::AuditReport, u64, BTreeSet<String>), ClientError> {
    let lost_lock = || ClientError::MetadataUnavailable("the auditor lock was lost during the pass".into());
    // Through the directory, so that the probes and checks below go to the
    // addresses listed now.
    let registry = client.bookies().list().await?;
    let registered: BTreeSet<String> = registry.bookies.iter().map(|b| b.bookie_id.clone()).collect();
    let draining: BTreeSet<String> = registry
        .bookies
        .iter()
        .chain(&registry.retired)
        .filter(|b| b.state == v1::BookieState::Decommissioning as i32)
        .map(|b| b.bookie_id.clone())
        .collect();
    let ledgers = all_ledgers(client).await?;
    let named: BTreeSet<String> = ledgers.iter().flat_map(named_by).collect();
    let lost_now = lost.observe(&registered, &named, now_ms());
    let existing = marks(client).await?;
    let mut report = v1::AuditReport {
        auditor: cfg.owner.clone(),
        ledgers_checked: ledgers.len() as u64,
        lost_bookies: lost_now.iter().cloned().collect(),
        draining_bookies: draining.iter().cloned().collect(),
        ..Default::default()
    };

    let gone: BTreeSet<String> = lost_now.union(&draining).cloned().collect();
    let registered_as: BTreeMap<String, String> =
        registry.bookies.iter().map(|b| (b.bookie_id.clone(), b.instance_id.clone())).collect();
    let instances = current_instances(&registered_as, &live_instances(client, &registry.bookies).await);
    if !held.load(Ordering::SeqCst) {
        return Err(lost_lock());
    }
    for meta in &ledgers {
        let marked = existing.get(&meta.ledger_id);
        let replaced = replaced_members(meta, &instances);
        let gone_here: BTreeSet<String> = gone.union(&replaced).cloned().collect();
        let need: Vec<String> =
            needs_repair(meta, &gone_here).into_iter().filter(|b| !marked.is_some_and(|m| m.contains(b))).collect();
        if need.is_empty() {
            continue;
        }
        let why = if need.iter().all(|b| draining.contains(b)) {
            "bookie decommissioning"
        } else if need.iter().all(|b| replaced.contains(b)) {
            "bookie replaced: a new instance holds nothing of the old one's"
        } else {
            "bookie lost"
        };
        mark(client, meta.ledger_id, need, why.into()).await?;
        report.ledgers_marked += 1;
    }

    // A bookie that cannot answer is skipped for the rest of this pass
    // (whether it is lost is for its lease to say, not for this check to
    // wait out, one timeout per ledger); the check is not complete until it
    // has answered at a later pass.
    let mut unreachable = BTreeSet::new();
    if let Some(scope) = replica_check {
        for meta in &ledgers {
            // A check must not go on after the lock is gone (another
            // auditor may be active by now).
            if !held.load(Ordering::SeqCst) {
                return Err(lost_lock());
            }
            let marked = existing.get(&meta.ledger_id);
            for b in named_by(meta) {
                if !registered.contains(&b)
                    || gone.contains(&b)
                    || unreachable.contains(&b)
                    || marked.is_some_and(|m| m.contains(&b))
                    || matches!(scope, CheckScope::Only(only) if !only.contains(&b))
                {
                    continue;
                }
                let Some((missing, corrupt, checked)) = check_bookie(client, meta, &b).await else {
                    unreachable.insert(b);
                    continue;
                };
                report.entries_checked += checked;
                report.entries_missing += missing;
                report.entries_corrupt += corrupt;
                if missing + corrupt > 0 {
                    let why = format!("replica check: {missing} entries missing, {corrupt} corrupt");
                    mark(client, meta.ledger_id, vec![b.clone()], why).await?;
                    report.ledgers_marked += 1;
                }
            }
        }
    }

    for b in &draining {
        let r = client.meta().call(v1::GetBookieRequest { bookie_id: b.clone() }).await;
        if let Ok(r) = r {
            if r.ledgers == 0 {
                let set =
                    v1::SetBookieStateRequest { bookie_id: b.clone(), state: v1::BookieState::Decommissioned as i32 };
                match client.meta().call(set).await {
                    Ok(_) => {
                        tracing::info!(bookie_id = %b, "bookie drained: retired (decommissioned)");
                        report.retired_bookies.push(b.clone());
                    }
                    Err(e) => tracing::warn!(bookie_id = %b, error = %e, "retiring a drained bookie failed"),
                }
            }
        }
    }
    if !held.load(Ordering::SeqCst) {
        return Err(lost_lock());
    }
    match crate::retention::trim_logs(client, &ledgers, now_ms()).await {
        Ok(n) => *logs_trimmed += n,
        Err(e) => tracing::warn!(error = %e, "log retention failed this pass"),
    }
    report.at_ms = now_ms();
    let under_replicated = marks(client).await.map_or(existing.len(), |m| m.len()) as u64;
    if !report.lost_bookies.is_empty() || report.ledgers_marked > 0 {
        tracing::info!(
            lost = ?report.lost_bookies,
            draining = ?report.draining_bookies,
            marked = report.ledgers_marked,
            entries_checked = report.entries_checked,
            "audit pass"
        );
    }
    Ok((report, under_replicated, unreachable))
}

/// Asks `bookie` about every entry its repairable fragments of `meta` should
/// hold: (missing, corrupt, checked); `None` when it cannot answer (not
/// judged here: its lease decides whether it is lost). A lost connection is
/// asked once more on a new one, by `check_entries` itself.
async fn check_bookie(client: &Client, meta: &LedgerMeta, bookie: &str) -> Option<(u64, u64, u64)> {
    let (fragments, _) = repairable(meta, bookie);
    let (mut missing, mut corrupt, mut checked) = (0, 0, 0);
    for f in fragments {
        let ids: Vec<u64> = f.entries(&meta.quorums).collect();
        for chunk in ids.chunks(CHECK_BATCH_ENTRIES) {
            let timeout = client.options().read_timeout;
            match client.bookies().check_entries(bookie, meta.ledger_id, chunk.to_vec(), timeout).await {
                Ok((m, c, instance)) => {
                    if !f.member.instance_id.is_empty() && instance != f.member.instance_id {
                        // Another instance: it holds nothing of this fragment.
                        missing += chunk.len() as u64;
                    } else {
                        missing += m.len() as u64;
                        corrupt += c.len() as u64;
                    }
                    checked += chunk.len() as u64;
                }
                Err(e) => {
                    tracing::info!(ledger_id = meta.ledger_id, bookie, error = %e, "replica check could not ask the bookie");
                    return None;
                }
            }
        }
    }
    Some((missing, corrupt, checked))
}
