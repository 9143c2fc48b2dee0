//! One metadata replica: its sled database, the Raft node, and the leader's
//! lease reaper, and the pre-vote election driver.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use openraft::error::{InitializeError, RaftError};
use openraft::storage::RaftLogStorage;
use openraft::{BasicNode, Config, SnapshotPolicy};
use quire_rpc::RpcClient;

use crate::raft::compaction;
use crate::raft::election::{self, ElectionGate};
use crate::raft::network::Network;
use crate::raft::state_machine::Shared;
use crate::raft::MetaRaft;
use crate::service::now_ms;
use crate::state::Command;

/// Raft timing and compaction settings.
#[derive(Debug, Clone)]
pub struct RaftTiming {
    /// Leader heartbeat, also the AppendEntries RPC timeout.
    pub heartbeat_ms: u64,
    /// Election timeout range.
    pub election_min_ms: u64,
    /// Election timeout range.
    pub election_max_ms: u64,
    /// Take a snapshot (and compact the log) after at least this many
    /// entries; more in a large state (`raft/compaction.rs`).
    pub snapshot_every_entries: u64,
    /// Log entries kept behind the snapshot.
    pub logs_to_keep: u64,
}

impl Default for RaftTiming {
    fn default() -> Self {
        RaftTiming {
            heartbeat_ms: 200,
            election_min_ms: 1000,
            election_max_ms: 2000,
            snapshot_every_entries: 5000,
            logs_to_keep: 500,
        }
    }
}

/// A running replica.
pub struct Node {
    /// The Raft handle.
    pub raft: MetaRaft,
    /// The state, shared with the RPC handlers.
    pub shared: Arc<Shared>,
    /// Hears the leader and answers pre-votes (`raft/election.rs`).
    pub gate: Arc<ElectionGate>,
    reaper: tokio::task::JoinHandle<()>,
    elections: tokio::task::JoinHandle<()>,
    compaction: tokio::task::JoinHandle<()>,
}

impl Node {
    /// Opens the replica's storage under `dir` and starts Raft. The replica
    /// with the lowest id in `members` initialises the cluster the first time.
    pub async fn start(
        id: u64,
        members: BTreeMap<u64, String>,
        dir: &Path,
        rpc: RpcClient,
        timing: RaftTiming,
    ) -> anyhow::Result<Node> {
        anyhow::ensure!(members.contains_key(&id), "replica {id} is not among the members {members:?}");
        // Every level made durably: a data directory whose name a power cut
        // forgets takes the replica's whole Raft state with it, and the
        // lowest id then initialises a new cluster (the fault suite's first
        // power cut of every node did that to all three replicas).
        quire_durable::create_dir_all_durable(dir).with_context(|| format!("create {}", dir.display()))?;
        let (log, sm) = tokio::task::spawn_blocking({
            let path = dir.join("raft");
            move || crate::raft::open_storage(&path)
        })
        .await??;
        let shared = sm.shared();
        let config = Config {
            cluster_name: "quire-metadata".into(),
            heartbeat_interval: timing.heartbeat_ms,
            election_timeout_min: timing.election_min_ms,
            election_timeout_max: timing.election_max_ms,
            install_snapshot_timeout: 10_000,
            snapshot_max_chunk_size: 1024 * 1024,
            max_payload_entries: 256,
            // Asked for by `raft/compaction.rs`, at an interval that grows with the state.
            snapshot_policy: SnapshotPolicy::Never,
            max_in_snapshot_log_to_keep: timing.logs_to_keep,
            // Purged in batches, but never larger than a snapshot interval:
            // with a batch of 256 and a snapshot every 20 entries, the log
            // behind a snapshot stayed until 256 could go at once, and a
            // replica that lost its disk caught up from that log, never
            // from the snapshot (the snapshot test passed without one).
            purge_batch_size: timing.snapshot_every_entries.clamp(1, 256),
            ..Default::default()
        }
        .validate()
        .context("raft config")?;
        // No log and no vote: a first start, or a lost disk (`raft/amnesia.rs`);
        // marked durably, so that a restart before it votes again keeps it so.
        let started_empty = {
            let mut l = log.clone();
            let s = l.get_log_state().await.map_err(|e| anyhow::anyhow!("read the Raft log: {e}"))?;
            let vote = l.read_vote().await.map_err(|e| anyhow::anyhow!("read the vote: {e}"))?;
            let marked = l.amnesia_marked().map_err(|e| anyhow::anyhow!("read the amnesia mark: {e}"))?;
            if s.last_log_id.is_none() && vote.is_none() && !marked {
                l.set_amnesia_mark(true).await.map_err(|e| anyhow::anyhow!("mark the empty start: {e}"))?;
            }
            marked || (s.last_log_id.is_none() && vote.is_none())
        };
        let gate = ElectionGate::new(Duration::from_millis(timing.election_max_ms), log.clone(), started_empty);
        let raft = MetaRaft::new(id, Arc::new(config), Network::new(rpc.clone()), log, sm)
            .await
            .map_err(|e| anyhow::anyhow!("start raft: {e}"))?;
        let restarted = raft.is_initialized().await.map_err(|e| anyhow::anyhow!("{e}"))?;
        // Every replica stands for election only after a pre-vote a
        // majority granted (`raft/election.rs`): openraft's own timer
        // would stand a replica that cannot win, and raise the term the one
        // that can must then beat. (This also keeps a replica started
        // again after a crash from deposing a healthy leader.)
        raft.runtime_config().elect(false);
        let elections = tokio::spawn(election::drive(
            raft.clone(),
            gate.clone(),
            rpc,
            id,
            Duration::from_millis(timing.election_min_ms),
            Duration::from_millis(timing.heartbeat_ms),
        ));
        if Some(&id) == members.keys().next() && !restarted {
            let nodes: BTreeMap<u64, BasicNode> = members.iter().map(|(i, a)| (*i, BasicNode::new(a))).collect();
            match raft.initialize(nodes).await {
                Ok(()) => tracing::info!(members = ?members, "initialised the metadata cluster"),
                Err(RaftError::APIError(InitializeError::NotAllowed(_))) => {}
                Err(e) => return Err(anyhow::anyhow!("initialise the cluster: {e}")),
            }
        }
        let reaper = tokio::spawn(reap_leases(raft.clone(), shared.clone(), id));
        let compaction = tokio::spawn(compaction::drive(raft.clone(), shared.clone(), timing.snapshot_every_entries));
        Ok(Node { raft, shared, gate, reaper, elections, compaction })
    }

    /// Resolves when the Raft core has stopped for good (a storage error,
    /// a violated invariant: openraft's `Fatal`), with why. The replica
    /// then takes no part in the cluster, so the process must not go on
    /// looking healthy: `main` exits on it (issue #46 item 3: a wiped
    /// replica's core quit, and the process kept its ready file for ever).
    pub fn core_stopped(&self) -> impl std::future::Future<Output = String> + Send + 'static {
        let mut metrics = self.raft.metrics();
        async move {
            loop {
                if let Err(fatal) = &metrics.borrow_and_update().running_state {
                    return fatal.to_string();
                }
                if metrics.changed().await.is_err() {
                    return "the Raft core ended".to_string();
                }
            }
        }
    }

    /// Stops Raft.
    pub async fn shutdown(self) {
        self.reaper.abort();
        self.elections.abort();
        self.compaction.abort();
        if let Err(e) = self.raft.shutdown().await {
            tracing::warn!(error = %e, "raft shutdown");
        }
    }
}

/// On the leader: propose the expiry of leases that ran out. Leases are
/// removed within one tick of their end. A new leader first gives every
/// lease one more full term ([`Command::PromoteLeases`]), and expires
/// nothing in its term until that is committed: while there was no leader
/// nobody could renew.
async fn reap_leases(raft: MetaRaft, shared: Arc<Shared>, id: u64) {
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    let mut metrics = raft.metrics();
    // The term in which this replica, as leader, promoted the leases.
    let mut promoted: Option<u64> = None;
    loop {
        // A leadership change is acted on at once (renewals are arriving),
        // the expiry check once a tick.
        let ticked = tokio::select! {
            _ = tick.tick() => true,
            changed = metrics.changed() => {
                if changed.is_err() {
                    return; // Raft stopped.
                }
                false
            }
        };
        let (leader, term) = {
            let m = metrics.borrow_and_update();
            (m.current_leader, m.current_term)
        };
        if leader != Some(id) {
            promoted = None;
            continue;
        }
        if promoted != Some(term) {
            match raft.client_write(Command::PromoteLeases { now_ms: now_ms() }).await {
                Ok(_) => {
                    tracing::info!(term, "leader: every lease extended by one term");
                    promoted = Some(term);
                }
                Err(e) => tracing::debug!(error = %e, "lease promotion not proposed"),
            }
            continue;
        }
        if !ticked {
            continue;
        }
        let now = now_ms();
        let due = shared.state.read().expect("state lock").bookies.values().any(|b| b.expires_at_ms <= now);
        if due {
            if let Err(e) = raft.client_write(Command::ExpireLeases { now_ms: now }).await {
                tracing::debug!(error = %e, "lease expiry not proposed");
            }
        }
    }
}
