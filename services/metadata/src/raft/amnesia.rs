//! A replica that starts with no Raft state votes only once it holds what
//! it may have helped commit.
//!
//! Why: a replica whose disk was lost (or wiped and replaced) starts again
//! under its id with an empty log and no vote. Raft counts on every voter
//! remembering both. Without them, in three replicas: the leader commits
//! entry `a` with this replica's acknowledgement while the third lags; the
//! disk goes, the leader dies; the lagging replica stands, the empty one
//! votes for it (any log is as up to date as none), and the new leader
//! lacks `a`, a committed write lost (openraft's FAQ, "What will happen when
//! data gets lost?"). The same replica could also vote twice in one term.
//!
//! What: such a replica grants no vote and no pre-vote to a candidate whose
//! log goes beyond the cluster's first entry (a cluster's first election,
//! where every replica starts empty, is unaffected) until it has heard a
//! leader report a commit index in the leader's own term, and has applied
//! that far. A leader that has committed in its own term holds every entry
//! committed before (Raft's leader completeness) below that index, and the
//! entries of its term that this replica acknowledged before the loss
//! too; so the replica then holds every entry a majority could have
//! committed with its help, and the leader's term is its vote: it is as
//! good as a replica that never lost anything (but for one case, named in
//! docs/operations.md: a vote it gave, before the loss, in a newer term
//! that no one else learned of). A commit index from an earlier term is not
//! enough: a leader just elected may not yet know the last one.
//!
//! The cost is availability, never safety: while it catches up, the
//! cluster elects only with the other replicas.

use std::sync::Mutex;

use openraft::LogId;

/// What this replica remembers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Recall {
    /// Started with its log or its vote: Raft's own rules suffice.
    Intact,
    /// Started with neither, and has not yet heard a leader.
    Forgotten,
    /// Started with neither; a leader reported this commit index, which it
    /// must apply before it votes.
    CatchingUp { commit_index: u64 },
}

/// The gate over this replica's votes (see the module's text).
#[derive(Debug)]
pub struct Amnesia {
    recall: Mutex<Recall>,
}

impl Amnesia {
    /// `started_empty`: the replica opened no log and no vote.
    pub fn new(started_empty: bool) -> Amnesia {
        Amnesia { recall: Mutex::new(if started_empty { Recall::Forgotten } else { Recall::Intact }) }
    }

    /// The leader `(term, node)` was heard (an AppendEntries accepted, a
    /// conflict too), reporting `leader_commit`; `matched`: this replica's
    /// log matched (a success, not a conflict); it has applied up to
    /// `applied`. Returns whether this replica now votes again.
    ///
    /// The mark is taken from a matched AppendEntries only: the leader sent
    /// it after it learned this replica's log was gone (the conflict that
    /// came first), so its commit index covers anything committed with an
    /// acknowledgement this replica gave before the loss. And only from a
    /// commit index in the leader's own leadership, same term and node (two
    /// leaders may share a term in openraft's default mode).
    pub fn leader_heard(
        &self,
        leader: (u64, u64),
        matched: bool,
        leader_commit: Option<&LogId<u64>>,
        applied: Option<&LogId<u64>>,
    ) -> bool {
        let mut recall = self.recall.lock().expect("recall lock");
        match leader_commit {
            Some(c) if matched && *recall == Recall::Forgotten && (c.leader_id.term, c.leader_id.node_id) == leader => {
                tracing::info!(
                    commit_index = c.index,
                    "started with no Raft state: votes once this commit index is applied"
                );
                *recall = Recall::CatchingUp { commit_index: c.index };
            }
            _ => {}
        }
        let was = *recall;
        Self::caught_up(&mut recall, applied);
        was != Recall::Intact && *recall == Recall::Intact
    }

    fn caught_up(recall: &mut Recall, applied: Option<&LogId<u64>>) {
        if let Recall::CatchingUp { commit_index } = *recall {
            if applied.is_some_and(|a| a.index >= commit_index) {
                tracing::info!(commit_index, "caught up to the commit index a leader reported: votes again");
                *recall = Recall::Intact;
            }
        }
    }

    /// Whether this replica, having applied up to `applied`, may vote for
    /// (or pre-vote for) a candidate whose log ends at `candidate_last`.
    pub fn may_vote(&self, applied: Option<&LogId<u64>>, candidate_last: Option<&LogId<u64>>) -> bool {
        let mut recall = self.recall.lock().expect("recall lock");
        Self::caught_up(&mut recall, applied);
        // Else only in the cluster's first election: the initialising
        // replica's log holds the first membership at index 0, and no more.
        *recall == Recall::Intact || candidate_last.is_none_or(|l| l.index == 0)
    }

    /// Whether this replica still withholds votes.
    pub fn withholding(&self) -> bool {
        *self.recall.lock().expect("recall lock") != Recall::Intact
    }

    /// Whether this replica, its log ending at `mine`, may stand for
    /// election: not while it withholds its vote, unless its log holds only
    /// the cluster's first entry (a first election). Else it could win
    /// with a lagging replica's vote, lacking what it helped commit.
    pub fn may_stand(&self, mine: Option<&LogId<u64>>) -> bool {
        !self.withholding() || mine.is_none_or(|l| l.index == 0)
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
    fn a_replica_that_kept_its_state_votes_by_raft_rules_alone() {
        let a = Amnesia::new(false);
        assert!(a.may_vote(None, Some(&log_id(5, 900))));
        assert!(!a.withholding());
    }

    #[test]
    fn an_empty_replica_votes_in_a_first_election_only_until_it_has_caught_up() {
        let a = Amnesia::new(true);
        // A cluster's first election: the candidate holds only the first membership.
        assert!(a.may_vote(None, None));
        assert!(a.may_vote(None, Some(&log_id(0, 0))));
        // A cluster that has run: no, whatever this replica has applied.
        assert!(!a.may_vote(None, Some(&log_id(3, 1))));
        assert!(!a.may_vote(Some(&log_id(3, 500)), Some(&log_id(3, 900))));
        // A leader of term 4 whose commit index is still from term 3 may not
        // know the last one: not enough.
        a.leader_heard((4, 1), true, Some(&log_id(3, 650)), Some(&log_id(3, 650)));
        a.leader_heard((4, 1), true, None, Some(&log_id(3, 650)));
        // A conflict answered (its log not yet matched): no mark either.
        a.leader_heard((4, 1), false, Some(&log_id(4, 700)), Some(&log_id(3, 650)));
        // Nor from another leader of the same term.
        a.leader_heard((4, 2), true, Some(&log_id(4, 700)), Some(&log_id(3, 650)));
        assert!(!a.may_stand(Some(&log_id(3, 650))) && a.may_stand(Some(&log_id(0, 0))));
        assert!(!a.may_vote(Some(&log_id(3, 650)), Some(&log_id(4, 900))));
        // It commits its blank entry at 700: not before that is applied.
        a.leader_heard((4, 1), true, Some(&log_id(4, 700)), Some(&log_id(3, 650)));
        assert!(!a.may_vote(Some(&log_id(3, 699)), Some(&log_id(4, 900))));
        assert!(a.withholding());
        // A later report does not move the mark it must reach.
        a.leader_heard((5, 1), true, Some(&log_id(5, 10_000)), Some(&log_id(3, 699)));
        assert!(a.withholding());
        // Applied that far: the next heartbeat (or vote) frees it.
        assert!(a.leader_heard((5, 1), true, Some(&log_id(5, 10_000)), Some(&log_id(4, 700))));
        assert!(!a.withholding() && a.may_stand(Some(&log_id(4, 700))));
        assert!(a.may_vote(Some(&log_id(4, 700)), Some(&log_id(5, 900))));
        // And from then on, Raft's rules alone.
        assert!(a.may_vote(None, Some(&log_id(9, 1))));
    }

    #[test]
    fn a_first_leaders_first_commit_frees_the_vote() {
        let a = Amnesia::new(true);
        // Elected with the first membership at index 0; its blank entry at 1.
        assert!(a.may_vote(None, Some(&log_id(0, 0))));
        a.leader_heard((1, 1), true, Some(&log_id(1, 1)), Some(&log_id(0, 0)));
        assert!(!a.may_vote(Some(&log_id(0, 0)), Some(&log_id(1, 3))));
        assert!(a.may_vote(Some(&log_id(1, 1)), Some(&log_id(1, 3))));
    }
}
