//! The data-integrity check (BookKeeper's DataIntegrityChecker): a bookie
//! that comes back without data it once held (its index or entry logs lost,
//! files restored from an older copy) may have lost entries it had
//! acknowledged. Until it has copied them back from its peers it must not
//! answer "no such entry" for them: recovery counts such answers as evidence
//! of absence and could close a ledger short of what its writer was told was
//! stored.
//!
//! So such a bookie starts with every ledger in *limbo*: an absent entry or
//! ledger is answered LEDGER_IN_LIMBO (not evidence), a present, intact one is
//! served as usual. The checker then lists the ledgers whose ensembles name
//! this bookie (this instance), narrows limbo to them, and for each copies
//! back what its fragments lack (read from the other replicas, CRC checked,
//! stored unchanged), releasing the ledger once done. An open ledger's last
//! segment is its writer's: that ledger stays in limbo until it is closed
//! (by its writer or by recovery), then is refilled and released.
//!
//! When: the cookie says this instance has run here before but the ledger
//! index is gone (`auto`); whenever the operator asks (`always`, after a
//! restore from backup, say); and again at every start until a check has
//! finished (a marker in the ledger directory records that one is pending).
//! An unclean shutdown alone is not a reason: every acknowledged entry was in
//! the journal, fdatasync'd, before its acknowledgement, and replay restores
//! it (BookKeeper runs its checker for the journal-less mode this bookie has
//! not got). Putting ledgers in limbo without cause costs liveness: recovery
//! cannot count a limbo answer, and stalls while too many bookies give one.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use quire_client::fragments::repairable;
use quire_client::meta::LedgerState;
use quire_client::read_plan;
use quire_client::{Client, ClientError};
use quire_proto::v1;
use quire_storage::{RangeQuery, RangeRead, StorageError, Store, Stripe};

/// When the check runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CheckMode {
    /// When data this instance held is missing, or a check is pending.
    Auto,
    /// At every start.
    Always,
    /// Never (absent entries are answered as absent at once).
    Never,
}

/// The file that records a pending check (the store writes it too, before
/// it checkpoints past journal damage).
pub fn pending_marker(ledger_dir: &Path) -> PathBuf {
    ledger_dir.join("INTEGRITY_CHECK_PENDING")
}

/// Whether this start needs the check (before the store opens: it creates
/// the index). `fresh`: the directories were formatted just now.
pub fn needs_check(ledger_dir: &Path, fresh: bool, mode: CheckMode) -> bool {
    match mode {
        CheckMode::Never => false,
        CheckMode::Always => !fresh,
        CheckMode::Auto => {
            let pending = pending_marker(ledger_dir).exists();
            let index_lost = !fresh && !ledger_dir.join("index").exists();
            if index_lost {
                tracing::warn!(dir = %ledger_dir.display(), "this instance's ledger index is gone: its data may be lost");
            }
            pending || index_lost
        }
    }
}

/// Records that a check is under way (it must run again after a restart
/// until it finishes).
pub fn mark_pending(ledger_dir: &Path) -> std::io::Result<()> {
    std::fs::write(pending_marker(ledger_dir), b"pending\n")?;
    std::fs::File::open(ledger_dir)?.sync_all()
}

fn clear_pending(ledger_dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(pending_marker(ledger_dir)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => std::fs::File::open(ledger_dir)?.sync_all(),
    }
}

/// Which ledgers' absent entries are not to be taken as absent.
#[derive(Debug, Default)]
pub struct Limbo {
    state: RwLock<LimboState>,
    /// Whether anything may be in limbo: the add path's check costs one
    /// atomic load, not a lock, on a bookie that started clean.
    active: std::sync::atomic::AtomicBool,
}

#[derive(Debug, Default)]
struct LimboState {
    /// Every ledger (until the checker knows which ones matter).
    all: bool,
    ledgers: BTreeSet<u64>,
    /// Ledgers in limbo the metadata service has said are open since this
    /// start: a fence this bookie lost with its data cannot matter for them
    /// (a recovery from now on fences this bookie too).
    vouched: BTreeSet<u64>,
}

impl Limbo {
    /// Nothing in limbo (a clean start).
    pub fn none() -> Limbo {
        Limbo::default()
    }

    /// Everything in limbo (an unclean start, before the checker lists).
    pub fn everything() -> Limbo {
        Limbo {
            state: RwLock::new(LimboState { all: true, ..LimboState::default() }),
            active: std::sync::atomic::AtomicBool::new(true),
        }
    }

    /// Whether `ledger_id` is in limbo.
    pub fn contains(&self, ledger_id: u64) -> bool {
        let s = self.state.read().expect("limbo lock");
        s.all || s.ledgers.contains(&ledger_id)
    }

    /// Whether a normal add for `ledger_id` must first ask the metadata
    /// service, as for a ledger this bookie never saw (issue #19 item 4): in
    /// limbo, a ledger known here may have lost its fence with the index
    /// (its fence record in a journal segment deleted before, its entries
    /// replayed from a later one), and nothing here says it is still open.
    /// Once the service said it is open, no more.
    pub fn needs_open_check(&self, ledger_id: u64) -> bool {
        if !self.active.load(std::sync::atomic::Ordering::Acquire) {
            return false;
        }
        let s = self.state.read().expect("limbo lock");
        (s.all || s.ledgers.contains(&ledger_id)) && !s.vouched.contains(&ledger_id)
    }

    /// The metadata service said `ledger_id` is open (after this start).
    pub fn vouch(&self, ledger_id: u64) {
        let mut s = self.state.write().expect("limbo lock");
        if s.all || s.ledgers.contains(&ledger_id) {
            s.vouched.insert(ledger_id);
        }
    }

    /// Limbo is exactly `ledgers` now.
    fn narrow(&self, ledgers: BTreeSet<u64>) {
        let mut s = self.state.write().expect("limbo lock");
        s.vouched.retain(|l| ledgers.contains(l));
        s.all = false;
        s.ledgers = ledgers;
        self.active.store(!s.ledgers.is_empty(), std::sync::atomic::Ordering::Release);
    }

    fn release(&self, ledger_id: u64) {
        let mut s = self.state.write().expect("limbo lock");
        s.ledgers.remove(&ledger_id);
        s.vouched.remove(&ledger_id);
        self.active.store(!s.ledgers.is_empty(), std::sync::atomic::Ordering::Release);
    }

    /// Ledgers still in limbo (none while `all`: the list is not known yet).
    pub fn ledgers(&self) -> Vec<u64> {
        self.state.read().expect("limbo lock").ledgers.iter().copied().collect()
    }

    /// How many ledgers are in limbo (0 while `all`: not listed yet).
    pub fn len(&self) -> usize {
        self.state.read().expect("limbo lock").ledgers.len()
    }

    /// Whether anything is in limbo.
    pub fn is_empty(&self) -> bool {
        let s = self.state.read().expect("limbo lock");
        !s.all && s.ledgers.is_empty()
    }
}

/// How the check treats open ledgers.
#[derive(Debug, Clone)]
pub struct CheckOptions {
    /// An open ledger in limbo whose LAC here has not moved for this long is
    /// marked under-replicated (naming this bookie), so that a replication
    /// worker recovers it once its own writer grace has passed.
    pub idle_open_ledger: Duration,
}

/// An open ledger in limbo, as last seen.
struct OpenInLimbo {
    lac: i64,
    since: tokio::time::Instant,
    marked: bool,
}

/// Runs the check until limbo is empty, then clears the pending marker.
///
/// An open ledger stays in limbo until it is closed: its last segment is
/// its writer's, and only a close says where it ends. A live writer closes
/// it in time. A dead writer's never would, and the ledger would sit in
/// limbo for ever, one lost copy short: every later recovery of it needs
/// the other members of each write set to answer, and a second fault
/// there makes it unrecoverable (the fault suite's seed 44). So an open
/// ledger whose LAC here has not moved for `idle_open_ledger` is marked
/// under-replicated naming this bookie; a replication worker waits out its
/// writer grace, recovers it (fence, close at the true tail) and restores
/// the copies here, and the refill below then releases it. BookKeeper's
/// data-integrity check recovers every open ledger in limbo at once; quire
/// spares the ones still being written.
pub async fn run(
    client: Client,
    store: Arc<Store>,
    limbo: Arc<Limbo>,
    bookie_id: String,
    instance_id: String,
    ledger_dir: PathBuf,
    opts: CheckOptions,
) {
    let pause = Duration::from_secs(1);
    // 1. Which ledgers name this instance.
    let named = loop {
        match named_ledgers(&client, &bookie_id, &instance_id).await {
            Ok(n) => break n,
            Err(e) => {
                tracing::warn!(error = %e, "integrity check: listing ledgers failed; retrying");
                tokio::time::sleep(pause).await;
            }
        }
    };
    tracing::warn!(ledgers = named.len(), "integrity check: ledgers in limbo until their entries are checked");
    limbo.narrow(named.into_iter().collect());
    // 2. Refill each; an open ledger waits until it is closed.
    let mut open: BTreeMap<u64, OpenInLimbo> = BTreeMap::new();
    while !limbo.is_empty() {
        for ledger_id in limbo.ledgers() {
            match refill(&client, &store, ledger_id, &bookie_id).await {
                Ok(true) => {
                    limbo.release(ledger_id);
                    open.remove(&ledger_id);
                    tracing::info!(ledger_id, "integrity check: ledger complete, out of limbo");
                }
                Ok(false) => {
                    let lac = store.lac(ledger_id).unwrap_or(-1);
                    let now = tokio::time::Instant::now();
                    let o = open.entry(ledger_id).or_insert(OpenInLimbo { lac, since: now, marked: false });
                    if o.lac != lac {
                        (o.lac, o.since) = (lac, now);
                    }
                    if !o.marked && now.duration_since(o.since) >= opts.idle_open_ledger {
                        match mark_for_recovery(&client, ledger_id, &bookie_id).await {
                            Ok(()) => {
                                o.marked = true;
                                tracing::warn!(
                                    ledger_id,
                                    lac,
                                    "integrity check: open ledger in limbo, its writer idle: marked for recovery"
                                );
                            }
                            Err(e) => {
                                tracing::warn!(ledger_id, error = %e, "integrity check: marking failed; retrying")
                            }
                        }
                    }
                }
                Err(e) => tracing::warn!(ledger_id, error = %e, "integrity check: refill failed; retrying"),
            }
        }
        if !limbo.is_empty() {
            tokio::time::sleep(pause).await;
        }
    }
    if let Err(e) = clear_pending(&ledger_dir) {
        tracing::warn!(error = %e, "clearing the integrity-check marker failed: the check runs again at the next start");
    }
    tracing::info!("integrity check done: no ledger in limbo");
}

/// Marks `ledger_id` under-replicated on this bookie (the only bookie a
/// bookie may name).
async fn mark_for_recovery(client: &Client, ledger_id: u64, bookie_id: &str) -> Result<(), ClientError> {
    client
        .meta()
        .call(v1::MarkUnderReplicatedRequest {
            ledger_id,
            missing_bookie_ids: vec![bookie_id.to_string()],
            reason: "integrity check: open ledger in limbo, writer idle".into(),
        })
        .await
        .map_err(|e| ClientError::from_metadata(e, Some(ledger_id)))?;
    Ok(())
}

async fn named_ledgers(client: &Client, bookie_id: &str, instance_id: &str) -> Result<Vec<u64>, ClientError> {
    let mut out = Vec::new();
    for id in client.list_all().await? {
        let meta = match client.metadata(id).await {
            Ok(m) => m,
            Err(ClientError::NoSuchLedger(_)) => continue,
            Err(e) => return Err(e),
        };
        // Segments that name another instance of this id hold nothing of
        // ours (seed 003): no limbo for them.
        let ours = meta.segments.iter().any(|s| {
            s.members
                .iter()
                .any(|m| m.bookie_id == bookie_id && (m.instance_id.is_empty() || m.instance_id == instance_id))
        });
        if ours {
            out.push(id);
        }
    }
    Ok(out)
}

/// Entries read from peers at once while refilling.
const REFILL_BATCH_ENTRIES: usize = 256;

/// Copies back what this bookie's repairable fragments of `ledger_id` lack;
/// true when the ledger is complete here (closed, or deleted).
async fn refill(client: &Client, store: &Arc<Store>, ledger_id: u64, bookie_id: &str) -> Result<bool, ClientError> {
    let meta = match client.metadata(ledger_id).await {
        Ok(m) => m,
        Err(ClientError::NoSuchLedger(_)) => return Ok(true),
        Err(e) => return Err(e),
    };
    let (fragments, in_writers_segment) = repairable(&meta, bookie_id);
    // A fence this bookie held may have been lost with its data: a ledger
    // that is not open is fenced again before anything is copied into it.
    if meta.state != LedgerState::Open {
        store.fence(ledger_id).await.map_err(|e| ClientError::Timeout(format!("fencing {ledger_id}: {e}")))?;
    }
    let mut copied = 0u64;
    for f in &fragments {
        let q = &meta.quorums;
        let seg = &meta.segments[f.segment];
        // What is here and intact, by range reads of the fragment's stripe.
        let stripe =
            Stripe::new(q.ensemble as u32, read_plan::held_by(q, f.position)).expect("a position holds some remainder");
        let mut held = BTreeSet::new();
        let mut at = Some(f.first_entry_id);
        while let Some(first) = at {
            let s = store.clone();
            let query = RangeQuery {
                ledger_id,
                first,
                last: f.last_entry_id,
                stripe,
                max_entries: usize::MAX,
                max_bytes: usize::MAX,
            };
            let found = match tokio::task::spawn_blocking(move || s.read_range(query))
                .await
                .map_err(|e| ClientError::Timeout(format!("read task: {e}")))?
            {
                Ok(r) => r,
                Err(StorageError::NoSuchLedger(_)) => RangeRead::default(),
                Err(e) => return Err(ClientError::Timeout(format!("local read of {ledger_id} from {first}: {e}"))),
            };
            held.extend(found.entries.iter().filter(|e| e.digest_ok()).map(|e| e.entry_id));
            at = found.next;
        }
        let lost: Vec<u64> = f.entries(q).filter(|id| !held.contains(id)).collect();
        // Copied from peers by batch reads, a bounded number at a time.
        for chunk in lost.chunks(REFILL_BATCH_ENTRIES) {
            let entries = client.read_copies(&meta, seg, f.position, chunk).await?;
            for entry in entries {
                let id = entry.entry_id;
                store
                    .add(entry, true)
                    .await
                    .map_err(|e| ClientError::Timeout(format!("storing {ledger_id}/{id}: {e}")))?;
                copied += 1;
            }
        }
    }
    if copied > 0 {
        tracing::info!(ledger_id, entries = copied, "integrity check: entries copied back from peers");
    }
    Ok(!in_writers_segment || meta.state == LedgerState::Closed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ledger_in_limbo_needs_the_open_check_until_vouched_or_released() {
        let l = Limbo::everything();
        assert!(l.needs_open_check(7), "before the list, every ledger");
        l.vouch(7);
        assert!(!l.needs_open_check(7));
        l.narrow(BTreeSet::from([7, 8]));
        assert!(!l.needs_open_check(7), "a vouch outlives narrowing to it");
        assert!(l.needs_open_check(8));
        assert!(!l.needs_open_check(9), "outside limbo: the store's own state decides");
        l.release(8);
        assert!(!l.needs_open_check(8));
        assert!(!Limbo::none().needs_open_check(7));
    }
}
