//! Elections with a pre-vote (Ongaro's thesis, §9.6), in front of openraft
//! 0.9, which has none.
//!
//! Why: openraft's own timer makes a follower stand for election after
//! 0.4-0.8 s without a heartbeat, while the voters' leader lease (the
//! longest election timeout, 0.8 s) refuses every vote before it runs out.
//! After a leader dies, the first candidates therefore lose, each loss
//! raising the term; a replica restarted a moment before, still catching
//! up, stands too and can never win (its log is shorter) but its higher
//! term makes the replica that could win lose its round. Under load that
//! took 1.3-4.2 s (`make bench-failover`, docs/benchmarks.md).
//!
//! What: openraft's timer is switched off on every replica; [`drive`]
//! decides when to stand. A replica that has heard no leader for the lease
//! plus a random part of the shortest timeout first asks its peers
//! whether they would vote for it ([`PreVoteRequest`]). A peer says yes only
//! if it, too, has heard no leader for a whole lease and the candidate's
//! log is at least as up to date as its own ([`grants`]). Only with a
//! majority of yeses does the replica start a real election
//! (`Trigger::elect`), which then meets expired leases and wins at its
//! first term. A lagging or partitioned replica asks and is refused,
//! without raising anyone's term.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use openraft::storage::RaftLogStorage;
use openraft::{LogId, ServerState};
use quire_proto::v1::RaftRequest;
use quire_proto::Role;
use quire_rpc::{CallOptions, RpcClient};
use serde::{Deserialize, Serialize};

use super::amnesia::Amnesia;
use super::log_store::LogStore;
use super::network::kind;
use super::MetaRaft;

/// "Would you vote for me?", asked before an election.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PreVoteRequest {
    /// The asking replica.
    pub candidate: u64,
    /// Its last log entry.
    pub last_log_id: Option<LogId<u64>>,
}

/// The answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PreVoteResponse {
    /// Whether this replica would vote for the candidate now.
    pub granted: bool,
}

/// Whether a replica would vote: it has not heard a leader (nor led) for a
/// whole `lease`, and the candidate's log is at least as up to date as its
/// own (Raft's rule: higher last term, or the same term and no shorter).
pub fn grants(
    silent_for: Duration,
    lease: Duration,
    leading: bool,
    mine: Option<&LogId<u64>>,
    theirs: Option<&LogId<u64>>,
) -> bool {
    !leading && silent_for >= lease && theirs >= mine
}

/// When this replica last heard a leader, and what it needs to answer a
/// pre-vote.
pub struct ElectionGate {
    last_contact: Mutex<Instant>,
    lease: Duration,
    log: LogStore,
    /// Votes withheld after a start with no Raft state (`amnesia.rs`).
    pub amnesia: Amnesia,
}

impl ElectionGate {
    /// A gate over `log` (a handle on the replica's Raft log), refusing
    /// pre-votes for `lease` after each contact with a leader; `started_empty`
    /// if the replica opened no log and no vote.
    pub fn new(lease: Duration, log: LogStore, started_empty: bool) -> Arc<ElectionGate> {
        Arc::new(ElectionGate {
            last_contact: Mutex::new(Instant::now()),
            lease,
            log,
            amnesia: Amnesia::new(started_empty),
        })
    }

    /// Whether this replica may vote (or pre-vote) for a candidate whose
    /// log ends at `candidate_last`, as far as `amnesia` goes; a refusal is
    /// logged.
    pub fn may_vote(&self, raft: &MetaRaft, candidate: u64, candidate_last: Option<&LogId<u64>>) -> bool {
        let applied = raft.metrics().borrow().last_applied;
        let may = self.amnesia.may_vote(applied.as_ref(), candidate_last);
        if !may {
            tracing::info!(
                candidate,
                ?candidate_last,
                ?applied,
                "refused a vote: this replica started with no Raft state (a lost or new disk) \
                 and has not yet applied what a leader reported committed"
            );
        }
        may
    }

    /// A leader was heard (see [`Amnesia::leader_heard`]); once this
    /// replica votes again, its durable mark goes.
    pub async fn amnesia_leader_heard(
        &self,
        leader: (u64, u64),
        matched: bool,
        leader_commit: Option<&LogId<u64>>,
        applied: Option<&LogId<u64>>,
    ) {
        if self.amnesia.leader_heard(leader, matched, leader_commit, applied) {
            if let Err(e) = self.log.set_amnesia_mark(false).await {
                tracing::warn!(error = %e, "clear the amnesia mark (it stays until the next heartbeat after a restart)");
            }
        }
    }

    /// A leader was heard from (an AppendEntries or snapshot accepted), or
    /// a vote granted: not the moment to stand.
    pub fn leader_heard(&self) {
        *self.last_contact.lock().expect("contact lock") = Instant::now();
    }

    fn last_contact(&self) -> Instant {
        *self.last_contact.lock().expect("contact lock")
    }

    /// The last entry of this replica's log.
    pub async fn last_log_id(&self) -> Option<LogId<u64>> {
        let mut log = self.log.clone();
        match log.get_log_state().await {
            Ok(s) => s.last_log_id,
            Err(e) => {
                tracing::warn!(error = %e, "read the last log id for a pre-vote");
                None
            }
        }
    }

    /// Answers a peer's pre-vote.
    pub async fn answer(&self, raft: &MetaRaft, req: &PreVoteRequest) -> PreVoteResponse {
        let leading = raft.metrics().borrow().state == ServerState::Leader;
        let mine = self.last_log_id().await;
        let silent_for = self.last_contact().elapsed();
        let granted = grants(silent_for, self.lease, leading, mine.as_ref(), req.last_log_id.as_ref())
            && self.may_vote(raft, req.candidate, req.last_log_id.as_ref());
        tracing::debug!(candidate = req.candidate, granted, leading, ?silent_for, ?mine, theirs = ?req.last_log_id, "pre-vote asked");
        PreVoteResponse { granted }
    }
}

/// A random duration in `[0, max)`.
fn jitter(max: Duration) -> Duration {
    let r = RandomState::new().hash_one(Instant::now());
    Duration::from_nanos(r % max.as_nanos().max(1) as u64)
}

/// Stands for election when a pre-vote says it can win, until Raft stops.
/// `election_min` is the shortest election timeout, the gate's lease the
/// longest; `heartbeat` the leader's. Each attempt waits the lease after the last contact plus up to
/// `election_min` at random; after a refused one, `election_min` plus up to
/// as much again.
pub async fn drive(
    raft: MetaRaft,
    gate: Arc<ElectionGate>,
    rpc: RpcClient,
    id: u64,
    election_min: Duration,
    heartbeat: Duration,
) {
    let tick = (heartbeat / 2).max(Duration::from_millis(10));
    // A live peer answers within a round trip; a dead one is not waited for.
    let ask_timeout = heartbeat * 2;
    let mut metrics = raft.metrics();
    let mut seen_contact = gate.last_contact();
    let mut next_at = seen_contact + gate.lease + jitter(election_min);
    let mut interval = tokio::time::interval(tick);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        if metrics.has_changed().is_err() {
            return; // Raft stopped.
        }
        let (state, voters) = {
            let m = metrics.borrow_and_update();
            let membership = m.membership_config.membership();
            let voters: Vec<(u64, String)> =
                membership.voter_ids().filter_map(|v| membership.get_node(&v).map(|n| (v, n.addr.clone()))).collect();
            (m.state, voters)
        };
        if state == ServerState::Leader {
            gate.leader_heard();
        }
        let contact = gate.last_contact();
        if contact != seen_contact {
            seen_contact = contact;
            next_at = contact + gate.lease + jitter(election_min);
        }
        if state == ServerState::Leader || !voters.iter().any(|(v, _)| *v == id) || Instant::now() < next_at {
            continue;
        }
        let last_log_id = gate.last_log_id().await;
        if !gate.amnesia.may_stand(last_log_id.as_ref()) {
            next_at = Instant::now() + election_min + jitter(election_min);
            continue;
        }
        let req = PreVoteRequest { candidate: id, last_log_id };
        let payload = match postcard::to_stdvec(&req) {
            Ok(p) => bytes::Bytes::from(p),
            Err(e) => {
                tracing::error!(error = %e, "encode a pre-vote");
                return;
            }
        };
        // Decided by the first majority of answers: waiting for a dead
        // peer's timeout would let a grant go stale (a peer that granted
        // may have elected itself meanwhile).
        let mut asks = tokio::task::JoinSet::new();
        for (v, addr) in voters.iter().filter(|(v, _)| *v != id) {
            let peer = rpc.peer(addr, Role::Metadata, Some(&v.to_string()));
            let payload = payload.clone();
            asks.spawn(async move {
                let reply = peer
                    .call_full(RaftRequest { kind: kind::PRE_VOTE, payload }, CallOptions::timeout(ask_timeout))
                    .await
                    .ok()?;
                postcard::from_bytes::<PreVoteResponse>(&reply.body.payload).ok().map(|r| r.granted)
            });
        }
        let mut yes = 1;
        while yes * 2 <= voters.len() {
            match asks.join_next().await {
                Some(Ok(Some(true))) => yes += 1,
                Some(_) => {}
                None => break,
            }
        }
        drop(asks);
        // A leader heard while asking (one of the peers won): stand down.
        let won = yes * 2 > voters.len() && gate.last_contact() == seen_contact;
        tracing::info!(yes, voters = voters.len(), won, "pre-vote after no leader was heard");
        if won {
            if let Err(e) = raft.trigger().elect().await {
                tracing::warn!(error = %e, "start an election");
                return;
            }
        }
        next_at = Instant::now() + election_min + jitter(election_min);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::CommittedLeaderId;

    fn log_id(term: u64, index: u64) -> LogId<u64> {
        LogId::new(CommittedLeaderId::new(term, 1), index)
    }

    #[test]
    fn a_pre_vote_is_granted_only_after_a_whole_lease_without_a_leader_and_to_a_log_as_up_to_date() {
        let lease = Duration::from_millis(800);
        let (quiet, heard) = (Duration::from_millis(900), Duration::from_millis(500));
        let mine = log_id(3, 10);
        // Up to date, and no leader for a lease: yes.
        assert!(grants(quiet, lease, false, Some(&mine), Some(&log_id(3, 10))));
        assert!(grants(quiet, lease, false, Some(&mine), Some(&log_id(4, 2))));
        // A shorter log (a replica still catching up), or an older last term: no.
        assert!(!grants(quiet, lease, false, Some(&mine), Some(&log_id(3, 9))));
        assert!(!grants(quiet, lease, false, Some(&mine), Some(&log_id(2, 50))));
        assert!(!grants(quiet, lease, false, Some(&mine), None));
        // A leader heard within the lease, or this replica leading: no.
        assert!(!grants(heard, lease, false, Some(&mine), Some(&log_id(4, 20))));
        assert!(!grants(quiet, lease, true, Some(&mine), Some(&log_id(4, 20))));
        // An empty log grants an empty one.
        assert!(grants(quiet, lease, false, None, None));
    }
}
