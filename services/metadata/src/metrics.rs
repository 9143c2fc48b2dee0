//! The metadata replica's Prometheus metrics: its Raft state (term, role,
//! leader, log and applied indexes) and the size of what it holds.

use quire_metrics::metric;

use crate::raft::state_machine::Shared;
use crate::raft::MetaRaft;

/// The exposition text.
pub fn render(raft: &MetaRaft, shared: &Shared) -> String {
    let m = raft.metrics().borrow().clone();
    let mut s = String::new();
    metric(&mut s, "quire_metadata_raft_term", "gauge", "The Raft term this replica is in.", m.current_term);
    metric(
        &mut s,
        "quire_metadata_raft_leader",
        "gauge",
        "1 while this replica is the Raft leader.",
        u8::from(m.current_leader == Some(m.id)),
    );
    metric(
        &mut s,
        "quire_metadata_raft_last_log_index",
        "gauge",
        "Index of the last entry in this replica's Raft log.",
        m.last_log_index.unwrap_or(0),
    );
    metric(
        &mut s,
        "quire_metadata_raft_applied_index",
        "gauge",
        "Index of the last committed entry this replica applied (the commit index as it knows it).",
        m.last_applied.map_or(0, |l| l.index),
    );
    metric(
        &mut s,
        "quire_metadata_raft_voters",
        "gauge",
        "Voters in the current membership.",
        m.membership_config.membership().voter_ids().count(),
    );
    metric(
        &mut s,
        "quire_metadata_snapshots_installed_total",
        "counter",
        "Snapshots this replica received from a leader and installed since it started.",
        shared.snapshots_installed.load(std::sync::atomic::Ordering::Relaxed),
    );
    let st = shared.state.read().expect("state lock");
    metric(&mut s, "quire_metadata_ledgers", "gauge", "Ledgers in the metadata store.", st.ledgers.len());
    metric(&mut s, "quire_metadata_bookies", "gauge", "Bookies registered.", st.bookies.len());
    metric(
        &mut s,
        "quire_metadata_under_replicated_ledgers",
        "gauge",
        "Ledgers marked under-replicated.",
        st.marks.len(),
    );
    s
}
