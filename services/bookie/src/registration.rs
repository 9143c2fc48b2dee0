//! Keeping the bookie registered with the metadata service: register under a
//! lease, renew every third of it, register again when the lease is gone (a
//! partition outlived it, or the metadata service lost it).
//!
//! While another live instance holds this bookie id (a replaced disk, seed
//! 003), registration is refused until that lease ends; the metadata service
//! then records the new instance as the id's owner.

use std::path::PathBuf;
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

/// Runs until aborted.
pub async fn keep_registered(meta: Arc<MetaClient>, me: Registration, store: Arc<Store>) {
    let renew_every = Duration::from_millis(u64::from(me.lease_ms) / 3).max(Duration::from_millis(100));
    let mut lease: Option<u64> = None;
    let mut tick = tokio::time::interval(renew_every);
    loop {
        tick.tick().await;
        match lease {
            None => {
                let req = v1::RegisterBookieRequest { bookie: Some(record(&me, &store)), lease_ms: me.lease_ms };
                match meta.call(req).await {
                    Ok(r) => {
                        tracing::info!(lease_id = r.lease_id, address = %me.address, "registered with the metadata service");
                        lease = Some(r.lease_id);
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
                    Ok(_) => {}
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
