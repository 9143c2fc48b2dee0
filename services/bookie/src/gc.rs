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
}

impl Schedule {
    /// A schedule starting at `now`.
    pub fn new(now: Instant) -> Self {
        Schedule { last_minor: now, last_major: now }
    }

    /// The kind of the pass run at `now`; a major pass counts as a minor one too.
    pub fn due(&mut self, now: Instant, c: &GcConfig) -> Kind {
        let on = |t: f64, i: Duration| t > 0.0 && !i.is_zero();
        if on(c.major_threshold, c.major_interval) && now.saturating_duration_since(self.last_major) >= c.major_interval {
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

/// Ledgers confirmed deleted, and how many candidates were not confirmed.
async fn find_deleted(store: &Arc<Store>, meta: &quire_metaclient::MetaClient) -> Result<(Vec<u64>, u64), String> {
    let local = {
        let store = store.clone();
        tokio::task::spawn_blocking(move || {
            store.ledger_ids().into_iter().map(|l| Ok((l, store.has_entries(l)?))).collect::<Result<Vec<_>, quire_storage::StorageError>>()
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("read the local ledgers: {e}"))?
    };
    if local.is_empty() {
        return Ok((Vec::new(), 0));
    }
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
            None => break,
        }
    }
    let maybe = candidates(&local, &listed, next_ledger_id).map_err(|e| e.to_string())?;
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
    Ok((confirmed, unconfirmed))
}

/// One pass: the deletion step (when a metadata service is configured),
/// then the store's pass over the entry logs.
pub async fn pass(
    store: &Arc<Store>,
    meta: Option<&quire_metaclient::MetaClient>,
    config: &GcConfig,
    kind: Kind,
) -> Result<v1::GcReport, String> {
    let started = Instant::now();
    let mut report = v1::GcReport { kind: kind.name().into(), ..Default::default() };
    match meta {
        None => report.deletion_skipped = "no metadata service configured (static mode)".into(),
        Some(meta) => match find_deleted(store, meta).await {
            Ok((deleted, unconfirmed)) => {
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
            }
            Err(why) => {
                tracing::warn!(reason = %why, "deleted-ledger check skipped; nothing deleted");
                report.deletion_skipped = why;
            }
        },
    }
    let threshold = kind.threshold(config);
    let rate = config.rate_bytes_per_sec;
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

/// A request for a pass now (RunGc): major or minor, and where to answer.
pub type RunRequest = (Kind, oneshot::Sender<Result<v1::GcReport, String>>);

/// The collector: passes every interval, and on request. One pass at a time.
pub async fn run(
    store: Arc<Store>,
    meta: Option<Arc<quire_metaclient::MetaClient>>,
    config: GcConfig,
    mut requests: mpsc::Receiver<RunRequest>,
) {
    let mut schedule = Schedule::new(Instant::now());
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + config.interval, config.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Usage for the metrics from the start, not only after the first pass.
    let s = store.clone();
    if let Ok(Err(e)) = tokio::task::spawn_blocking(move || s.scan_usage()).await {
        tracing::warn!(error = %e, "cannot scan entry-log usage");
    }
    loop {
        let (kind, reply) = tokio::select! {
            _ = tick.tick() => (schedule.due(Instant::now(), &config), None),
            req = requests.recv() => match req {
                Some((kind, reply)) => (kind, Some(reply)),
                None => return,
            },
        };
        let res = pass(&store, meta.as_deref(), &config, kind).await;
        match &res {
            Ok(r) => tracing::info!(
                kind = %r.kind,
                ledgers_deleted = r.ledgers_deleted,
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
        assert_eq!(
            candidates(&local, &HashSet::new(), 10),
            Err(Refusal::ForeignLedgers(vec![700], 10))
        );
        assert!(candidates(&local, &HashSet::new(), 0).is_err(), "an empty store allocated nothing");
    }
}
