//! Garbage collection on a bookie: which local ledgers the metadata service
//! has deleted (and only those), dropping them from the store, and the
//! store's entry-log passes (dead-log removal, minor and major compaction)
//! on a schedule or when the operator asks (RunGc).
//!
//! Nothing is removed on a guess (BookKeeper #870, #4607): a ledger missing
//! from the metadata listing is deleted only once a linearizable GetLedger
//! answers NO_SUCH_LEDGER for it; any other answer, or no answer, keeps it.
//! And a bookie holding entries of ledgers the metadata service never
//! allocated (ids at or past its next id) is talking to a store that did not
//! create its data, so it deletes nothing at all.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use quire_proto::v1::{self, ErrorCode};
use quire_storage::gc::Throttle;
use quire_storage::Store;
use tokio::sync::{mpsc, oneshot};

/// Settings of the collector.
#[derive(Debug, Clone)]
pub struct GcConfig {
    /// Between passes (deleted ledgers and dead logs every pass).
    pub interval: Duration,
    /// Minor compaction: logs under this live fraction (0 turns it off).
    pub minor_threshold: f64,
    /// Between minor compactions.
    pub minor_interval: Duration,
    /// Major compaction: logs under this live fraction (0 turns it off).
    pub major_threshold: f64,
    /// Between major compactions.
    pub major_interval: Duration,
    /// Compaction's read plus write rate, bytes per second (0: unlimited).
    pub rate_bytes_per_sec: u64,
    /// Between checks for closed ledgers no ensemble names this bookie in
    /// (one metadata read per local ledger; 0 turns it off).
    pub not_here_interval: Duration,
}

/// What a pass compacts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Deleted ledgers and dead logs only.
    Gc,
    /// Also logs under the minor threshold.
    Minor,
    /// Also logs under the major threshold.
    Major,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Gc => "gc",
            Kind::Minor => "minor",
            Kind::Major => "major",
        }
    }

    fn threshold(self, c: &GcConfig) -> f64 {
        match self {
            Kind::Gc => 0.0,
            Kind::Minor => c.minor_threshold,
            Kind::Major => c.major_threshold,
        }
    }
}

/// When compactions are due (time passed in). The first of each comes one
/// interval after start, as in BookKeeper.
#[derive(Debug)]
pub struct Schedule {
    last_minor: Instant,
    last_major: Instant,
    last_not_here: Instant,
}

impl Schedule {
    /// A schedule starting at `now`.
    pub fn new(now: Instant) -> Self {
        Schedule { last_minor: now, last_major: now, last_not_here: now }
    }

    /// Whether the check for ledgers whose copies moved away is due at `now`.
    pub fn not_here_due(&mut self, now: Instant, c: &GcConfig) -> bool {
        let due =
            !c.not_here_interval.is_zero() && now.saturating_duration_since(self.last_not_here) >= c.not_here_interval;
        if due {
            self.last_not_here = now;
        }
        due
    }

    /// The kind of the pass run at `now`; a major pass counts as a minor one too.
    pub fn due(&mut self, now: Instant, c: &GcConfig) -> Kind {
        let on = |t: f64, i: Duration| t > 0.0 && !i.is_zero();
        if on(c.major_threshold, c.major_interval) && now.saturating_duration_since(self.last_major) >= c.major_interval
        {
            self.last_major = now;
            self.last_minor = now;
            Kind::Major
        } else if on(c.minor_threshold, c.minor_interval)
            && now.saturating_duration_since(self.last_minor) >= c.minor_interval
        {
            self.last_minor = now;
            Kind::Minor
        } else {
            Kind::Gc
        }
    }
}

/// Why the deletion step deleted nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Entries of ledgers the metadata service never allocated are here.
    #[error(
        "this bookie holds entries of ledgers {0:?} at or past the metadata service's next ledger id {1}: \
         it is not the metadata store that created this data, so nothing is deleted"
    )]
    ForeignLedgers(Vec<u64>, u64),
}

/// The ledgers worth confirming as deleted: known here, absent from the
/// listing, and allocated by this metadata service. `local` is (ledger,
/// holds entries here).
pub fn candidates(local: &[(u64, bool)], listed: &HashSet<u64>, next_ledger_id: u64) -> Result<Vec<u64>, Refusal> {
    let foreign: Vec<u64> = local.iter().filter(|(l, has)| *has && *l >= next_ledger_id).map(|(l, _)| *l).collect();
    if !foreign.is_empty() {
        return Err(Refusal::ForeignLedgers(foreign.into_iter().take(10).collect(), next_ledger_id));
    }
    // An entry-less ledger past the next id is only a fence or a LAC someone
    // sent for an id never allocated: harmless, kept.
    Ok(local.iter().map(|(l, _)| *l).filter(|l| *l < next_ledger_id && !listed.contains(l)).collect())
}

/// The local ledgers: (ledger, holds entries here).
async fn local_ledgers(store: &Arc<Store>) -> Result<Vec<(u64, bool)>, String> {
    let store = store.clone();
    tokio::task::spawn_blocking(move || {
        store
            .ledger_ids()
            .into_iter()
            .map(|l| Ok((l, store.has_entries(l)?)))
            .collect::<Result<Vec<_>, quire_storage::StorageError>>()
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| format!("read the local ledgers: {e}"))
}

/// Every ledger id the metadata service lists, and its next unallocated id.
async fn listed(meta: &quire_metaclient::MetaClient) -> Result<(HashSet<u64>, u64), String> {
    let mut listed = HashSet::new();
    let mut next_ledger_id = 0;
    let mut start_after = None;
    loop {
        let page = meta
            .call(v1::ListLedgersRequest { start_after, limit: 1000 })
            .await
            .map_err(|e| format!("list the ledgers: {e}"))?;
        listed.extend(page.ledger_ids);
        next_ledger_id = next_ledger_id.max(page.next_ledger_id);
        match page.next {
            Some(n) => start_after = Some(n),
            None => return Ok((listed, next_ledger_id)),
        }
    }
}

/// Whether a ledger's metadata still needs this bookie's copies: not closed
/// (a writer, recovery or an ensemble change may still use them), or some
/// segment names this bookie id (whatever instance it names: kept either way).
fn needs_copies_here(m: &v1::LedgerMetadata, me: &str) -> bool {
    m.state != v1::LedgerState::Closed as i32 || m.ensembles.iter().any(|g| g.bookie_ids.iter().any(|b| b == me))
}

/// Garbage collection on one bookie.
pub struct Collector {
    /// The store.
    pub store: Arc<Store>,
    /// The metadata service (none in static mode: nothing is ever deleted).
    pub meta: Option<Arc<quire_metaclient::MetaClient>>,
    /// This bookie's id.
    pub me: String,
    /// Ledgers the integrity check has not released: never dropped meanwhile.
    pub limbo: Arc<crate::integrity::Limbo>,
    /// Settings.
    pub config: GcConfig,
}

impl Collector {
    /// Ledgers confirmed deleted, how many candidates were not confirmed, and
    /// the listing (for the not-here check).
    async fn find_deleted(
        &self,
        meta: &quire_metaclient::MetaClient,
        local: &[(u64, bool)],
    ) -> Result<(Vec<u64>, u64, HashSet<u64>), String> {
        let (listed, next_ledger_id) = listed(meta).await?;
        let maybe = candidates(local, &listed, next_ledger_id).map_err(|e| e.to_string())?;
        let mut confirmed = Vec::new();
        let mut unconfirmed = 0;
        for ledger_id in maybe {
            match meta.call(v1::GetLedgerRequest { ledger_id, stale_ok: false }).await {
                Err(e) if e.code() == Some(ErrorCode::NoSuchLedger) => confirmed.push(ledger_id),
                // Created after the listing began: alive.
                Ok(_) => {}
                Err(e) => {
                    unconfirmed += 1;
                    tracing::warn!(ledger_id, error = %e, "cannot confirm a ledger's deletion; it is kept");
                }
            }
        }
        Ok((confirmed, unconfirmed, listed))
    }

    /// Drops the entries of closed ledgers no ensemble names this bookie in
    /// (BookKeeper's over-replicated ledger GC), keeping each one's fence.
    /// Each is re-read under its `replicate/<id>` lock, renewed just before
    /// the drop, so no worker is copying it here meanwhile (a worker moving a
    /// fragment here holds that lock until its CAS names this bookie, and
    /// checks it still does just before).
    async fn drop_not_here(&self, meta: &quire_metaclient::MetaClient, ledgers: Vec<u64>) -> u64 {
        let mut dropped = 0;
        for ledger_id in ledgers {
            if self.limbo.contains(ledger_id) {
                continue;
            }
            // A cheap look first (any replica may answer), the decision under the lock.
            match meta.call(v1::GetLedgerRequest { ledger_id, stale_ok: true }).await {
                Ok(r) if r.ledger.as_ref().is_some_and(|m| !needs_copies_here(m, &self.me)) => {}
                _ => continue,
            }
            let name = format!("replicate/{ledger_id}");
            let owner = format!("bookie/{}:gc", self.me);
            let lock = match meta
                .call(v1::AcquireLockRequest { name: name.clone(), owner, lease_ms: 30_000, take_over: false })
                .await
            {
                Ok(r) => match r.lock {
                    Some(l) => l,
                    None => continue,
                },
                // Held: a worker is repairing this ledger; ask again next time.
                Err(_) => continue,
            };
            let confirmed = matches!(
                meta.call(v1::GetLedgerRequest { ledger_id, stale_ok: false }).await,
                Ok(r) if r.ledger.as_ref().is_some_and(|m| !needs_copies_here(m, &self.me))
            );
            // The lease must still be ours as the copies go (the read above
            // may have waited out a leader election): renewing proves it and
            // gives a fresh lease for the drop itself.
            let still_held = confirmed
                && meta.call(v1::RenewLockRequest { name: name.clone(), lock_id: lock.lock_id }).await.is_ok();
            if still_held {
                let store = self.store.clone();
                match tokio::task::spawn_blocking(move || store.drop_entries(&[ledger_id])).await {
                    Ok(Ok(_)) => {
                        dropped += 1;
                        tracing::info!(ledger_id, "dropped a closed ledger whose copies moved off this bookie");
                    }
                    Ok(Err(e)) => tracing::warn!(ledger_id, error = %e, "cannot drop a ledger"),
                    Err(e) => tracing::warn!(ledger_id, error = %e, "drop task failed"),
                }
            }
            let _ = meta.call(v1::ReleaseLockRequest { name, lock_id: lock.lock_id }).await;
        }
        dropped
    }

    /// One pass: deleted ledgers (and, with `not_here`, ledgers whose copies
    /// moved away), then the store's pass over the entry logs.
    pub async fn pass(&self, kind: Kind, not_here: bool) -> Result<v1::GcReport, String> {
        let started = Instant::now();
        let store = &self.store;
        let mut report = v1::GcReport { kind: kind.name().into(), ..Default::default() };
        match self.meta.as_deref() {
            None => report.deletion_skipped = "no metadata service configured (static mode)".into(),
            Some(meta) => {
                let found = match local_ledgers(store).await {
                    Ok(local) if local.is_empty() => Ok((Vec::new(), 0, HashSet::new(), local)),
                    Ok(local) => self.find_deleted(meta, &local).await.map(|(d, u, l)| (d, u, l, local)),
                    Err(e) => Err(e),
                };
                match found {
                    Ok((deleted, unconfirmed, listed, local)) => {
                        report.ledgers_unconfirmed = unconfirmed;
                        if !deleted.is_empty() {
                            let store = store.clone();
                            let ids = deleted.clone();
                            report.ledgers_deleted = tokio::task::spawn_blocking(move || store.delete_ledgers(&ids))
                                .await
                                .map_err(|e| e.to_string())?
                                .map_err(|e| format!("delete ledgers: {e}"))?;
                            tracing::info!(ledgers = ?deleted, "dropped ledgers the metadata service deleted");
                        }
                        if not_here {
                            // Only ledgers with entries here: a fenced record alone costs nothing.
                            let alive: Vec<u64> =
                                local.iter().filter(|(l, has)| *has && listed.contains(l)).map(|(l, _)| *l).collect();
                            report.ledgers_not_here = self.drop_not_here(meta, alive).await;
                        }
                    }
                    Err(why) => {
                        tracing::warn!(reason = %why, "deleted-ledger check skipped; nothing deleted");
                        report.deletion_skipped = why;
                    }
                }
            }
        }
        let threshold = kind.threshold(&self.config);
        let rate = self.config.rate_bytes_per_sec;
        let store2 = store.clone();
        let out = tokio::task::spawn_blocking(move || store2.collect_garbage(threshold, &mut Throttle::new(rate)))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("entry-log pass: {e}"))?;
        report.entry_logs_removed = out.logs_removed;
        report.entry_logs_compacted = out.logs_compacted;
        report.entries_moved = out.entries_moved;
        report.bytes_reclaimed = out.bytes_reclaimed;
        report.compaction_failures = out.failures;
        report.duration_ms = started.elapsed().as_millis() as u64;
        Ok(report)
    }

    /// Passes every interval, and on request (RunGc: every step). One at a time.
    pub async fn run(self, mut requests: mpsc::Receiver<RunRequest>) {
        let mut schedule = Schedule::new(Instant::now());
        let every = self.config.interval;
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Usage for the metrics from the start, not only after the first pass.
        let s = self.store.clone();
        if let Ok(Err(e)) = tokio::task::spawn_blocking(move || s.scan_usage()).await {
            tracing::warn!(error = %e, "cannot scan entry-log usage");
        }
        loop {
            let (kind, not_here, reply) = tokio::select! {
                _ = tick.tick() => {
                    let now = Instant::now();
                    (schedule.due(now, &self.config), schedule.not_here_due(now, &self.config), None)
                }
                req = requests.recv() => match req {
                    Some((kind, reply)) => (kind, true, Some(reply)),
                    None => return,
                },
            };
            let res = self.pass(kind, not_here).await;
            match &res {
                Ok(r) => tracing::info!(
                    kind = %r.kind,
                    ledgers_deleted = r.ledgers_deleted,
                    ledgers_not_here = r.ledgers_not_here,
                    logs_removed = r.entry_logs_removed,
                    logs_compacted = r.entry_logs_compacted,
                    bytes_reclaimed = r.bytes_reclaimed,
                    duration_ms = r.duration_ms,
                    "gc pass"
                ),
                Err(e) => tracing::warn!(error = %e, "gc pass failed"),
            }
            if let Some(reply) = reply {
                let _ = reply.send(res);
            }
        }
    }
}

/// A request for a pass now (RunGc): major or minor, and where to answer.
pub type RunRequest = (Kind, oneshot::Sender<Result<v1::GcReport, String>>);

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> GcConfig {
        GcConfig {
            interval: Duration::from_secs(60),
            minor_threshold: 0.2,
            minor_interval: Duration::from_secs(3600),
            major_threshold: 0.8,
            major_interval: Duration::from_secs(86_400),
            rate_bytes_per_sec: 0,
            not_here_interval: Duration::from_secs(86_400),
        }
    }

    #[test]
    fn compactions_come_due_by_their_intervals_major_first() {
        let c = config();
        let t0 = Instant::now();
        let mut s = Schedule::new(t0);
        assert_eq!(s.due(t0 + Duration::from_secs(60), &c), Kind::Gc);
        assert_eq!(s.due(t0 + Duration::from_secs(3600), &c), Kind::Minor);
        assert_eq!(s.due(t0 + Duration::from_secs(3660), &c), Kind::Gc);
        assert_eq!(s.due(t0 + Duration::from_secs(86_400), &c), Kind::Major);
        assert_eq!(s.due(t0 + Duration::from_secs(86_460), &c), Kind::Gc, "a major pass was a minor one too");
    }

    #[test]
    fn a_zero_threshold_or_interval_turns_a_compaction_off() {
        let c = GcConfig { major_threshold: 0.0, minor_interval: Duration::ZERO, ..config() };
        let t0 = Instant::now();
        let mut s = Schedule::new(t0);
        assert_eq!(s.due(t0 + Duration::from_secs(1_000_000), &c), Kind::Gc);
    }

    #[test]
    fn the_not_here_check_comes_due_by_its_interval_and_can_be_off() {
        let t0 = Instant::now();
        let mut s = Schedule::new(t0);
        assert!(!s.not_here_due(t0 + Duration::from_secs(3600), &config()));
        assert!(s.not_here_due(t0 + Duration::from_secs(86_400), &config()));
        assert!(!s.not_here_due(t0 + Duration::from_secs(86_500), &config()));
        let off = GcConfig { not_here_interval: Duration::ZERO, ..config() };
        assert!(!s.not_here_due(t0 + Duration::from_secs(1_000_000), &off));
    }

    #[test]
    fn copies_are_needed_while_open_or_named() {
        let seg = |ids: &[&str]| v1::EnsembleSegment {
            first_entry_id: 0,
            bookie_ids: ids.iter().map(|s| s.to_string()).collect(),
            instance_ids: vec![],
        };
        let closed = |segs: Vec<v1::EnsembleSegment>| v1::LedgerMetadata {
            state: v1::LedgerState::Closed as i32,
            ensembles: segs,
            ..Default::default()
        };
        assert!(needs_copies_here(&closed(vec![seg(&["1", "2"]), seg(&["3", "4"])]), "2"), "an earlier segment counts");
        assert!(!needs_copies_here(&closed(vec![seg(&["1", "3"])]), "2"));
        let open = v1::LedgerMetadata { state: v1::LedgerState::Open as i32, ..closed(vec![seg(&["1", "3"])]) };
        assert!(needs_copies_here(&open, "2"), "an open ledger may still change its ensemble onto this bookie");
    }

    #[test]
    fn only_unlisted_allocated_ledgers_are_candidates() {
        let listed: HashSet<u64> = [1, 3].into();
        let local = [(1, true), (2, true), (3, true), (4, false), (9, false)];
        assert_eq!(candidates(&local, &listed, 5), Ok(vec![2, 4]), "9 never allocated: a stray fence, kept");
    }

    #[test]
    fn entries_of_a_ledger_never_allocated_stop_every_deletion() {
        // A rebuilt or wrong metadata store lists nothing and has allocated
        // little: it must not cause a mass deletion.
        let local = [(1, true), (2, true), (700, true)];
        assert_eq!(candidates(&local, &HashSet::new(), 10), Err(Refusal::ForeignLedgers(vec![700], 10)));
        assert!(candidates(&local, &HashSet::new(), 0).is_err(), "an empty store allocated nothing");
    }
}
