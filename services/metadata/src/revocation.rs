//! A replica's own deny list: its state holds the list, so it installs it as
//! it applies (no round trip, and no leader needed), where other services
//! follow it with `MetaClient::follow_deny_list`.

use std::sync::Arc;

use quire_rpc::DenyList;

use crate::raft::state_machine::Shared;

/// Keeps `list` equal to the replica's applied deny list until the state
/// machine goes away.
pub async fn follow_local(shared: Arc<Shared>, list: DenyList) {
    let mut applied = shared.applied.subscribe();
    loop {
        let changed = {
            let st = shared.state.read().expect("state lock");
            (st.revoked_version != list.version())
                .then(|| (st.revoked_version, st.revoked.keys().cloned().collect::<Vec<_>>()))
        };
        if let Some((version, serials)) = changed {
            tracing::info!(version, revoked = serials.len(), "certificate deny list installed");
            list.replace(version, serials);
        }
        if applied.changed().await.is_err() {
            return;
        }
    }
}
