//! Keeping the bookie registered with the metadata service: register under a
//! lease, renew every third of it, register again when the lease is gone (a
//! partition outlived it, or the metadata service lost it).
//!
//! While another live instance holds this bookie id (a replaced disk, seed
//! 003), registration is refused until that lease ends; the metadata service
//! then records the new instance as the id's owner.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use quire_metaclient::MetaClient;
use quire_proto::v1::{self, ErrorCode};
use quire_storage::Store;

/// What the bookie registers.
pub struct Registration {
    /// Its id.
    pub bookie_id: String,
    /// Where clients reach it.
    pub address: String,
    /// Its rack.
    pub rack: String,
    /// Its instance id (from the cookie).
    pub instance_id: String,
    /// Lease length.
    pub lease_ms: u32,
    /// For disk figures.
    pub data_dir: PathBuf,
}

fn record(me: &Registration, store: &Store) -> v1::BookieRecord {
    let usage = quire_storage::disk::usage(&me.data_dir).ok();
    let state = if store.read_only().is_some() { v1::BookieState::ReadOnly } else { v1::BookieState::Available };
    v1::BookieRecord {
        bookie_id: me.bookie_id.clone(),
        address: me.address.clone(),
        rack: me.rack.clone(),
        instance_id: me.instance_id.clone(),
        state: state as i32,
        total_disk_bytes: usage.map_or(0, |u| u.total_bytes),
        free_disk_bytes: usage.map_or(0, |u| u.free_bytes),
    }
}

/// Follows the operator's state as the lease answers carry it.
fn follow_operator(draining: &AtomicBool, operator_state: i32) {
    let now = matches!(
        v1::BookieState::try_from(operator_state),
        Ok(v1::BookieState::Decommissioning | v1::BookieState::Decommissioned)
    );
    if draining.swap(now, Ordering::Relaxed) != now {
        if now {
            tracing::warn!("the operator is decommissioning this bookie: refusing new entries, serving reads");
        } else {
            tracing::info!("decommissioning cancelled: taking new entries again");
        }
    }
}

/// Runs until aborted.
pub async fn keep_registered(meta: Arc<MetaClient>, me: Registration, store: Arc<Store>, draining: Arc<AtomicBool>) {
    let renew_every = Duration::from_millis(u64::from(me.lease_ms) / 3).max(Duration::from_millis(100));
    let mut lease: Option<u64> = None;
    // The state the registry holds for us: a renewal carries none, so a
    // change (read-only after a journal or flush failure or a full disk, and
    // back) is registered again at the next tick (issue #45 finding 7: the
    // registry showed a read-only bookie available for as long as it lived).
    let mut registered: Option<i32> = None;
    let mut tick = tokio::time::interval(renew_every);
    loop {
        tick.tick().await;
        let now = record(&me, &store);
        if lease.is_some() && registered != Some(now.state) {
            // The old lease stays until the new registration is taken: a
            // failed call renews it below and tries again at the next tick.
            let state = now.state;
            tracing::warn!(state = ?v1::BookieState::try_from(state), "bookie state changed: registering it");
            let req = v1::RegisterBookieRequest { bookie: Some(now.clone()), lease_ms: me.lease_ms };
            match meta.call(req).await {
                Ok(r) => {
                    lease = Some(r.lease_id);
                    registered = Some(state);
                    follow_operator(&draining, r.operator_state);
                    continue;
                }
                Err(e) => tracing::warn!(error = %e, "registering the new state failed; renewing the lease meanwhile"),
            }
        }
        match lease {
            None => {
                let state = now.state;
                let req = v1::RegisterBookieRequest { bookie: Some(now), lease_ms: me.lease_ms };
                match meta.call(req).await {
                    Ok(r) => {
                        tracing::info!(lease_id = r.lease_id, address = %me.address, "registered with the metadata service");
                        lease = Some(r.lease_id);
                        registered = Some(state);
                        follow_operator(&draining, r.operator_state);
                    }
                    Err(e) if e.code() == Some(ErrorCode::BookieDecommissioned) => {
                        // Retired: no ledger names this id, and it may not
                        // come back. Keep serving reads of what it holds (no
                        // one needs them) but take nothing new.
                        draining.store(true, Ordering::Relaxed);
                        tracing::error!(error = %e, "this bookie id is decommissioned; it will not register again");
                    }
                    Err(e) if e.code() == Some(ErrorCode::AlreadyExists) => {
                        tracing::warn!(error = %e, "another live instance holds this bookie id; retrying when its lease ends");
                    }
                    Err(e) => tracing::warn!(error = %e, "registration failed; retrying"),
                }
            }
            Some(id) => {
                let req = v1::RenewLeaseRequest { bookie_id: me.bookie_id.clone(), lease_id: id };
                match meta.call(req).await {
                    Ok(r) => follow_operator(&draining, r.operator_state),
                    Err(e) if matches!(e.code(), Some(ErrorCode::LeaseExpired | ErrorCode::NoSuchBookie)) => {
                        tracing::warn!(error = %e, "lease lost; registering again");
                        lease = None;
                        tick.reset_immediately();
                    }
                    Err(e) => tracing::warn!(error = %e, "lease renewal failed; retrying"),
                }
            }
        }
    }
}
