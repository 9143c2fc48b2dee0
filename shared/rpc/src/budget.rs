//! In-flight bytes a server holds for its peers, bounded per connection and
//! per peer (a certificate identity, over all its connections).
//!
//! A request takes its frame's bytes (and an estimate of what decoding
//! builds) before it is decoded, and holds them until its handler is done;
//! its response then takes its own bytes until the lane writer has handed
//! them to QUIC. A peer that sends faster than it is served, or never reads
//! its replies, therefore stops being read (QUIC flow control pushes back)
//! once its bytes are spent, instead of growing the server's memory: the
//! count bound (`max_in_flight_per_connection`) alone allowed 4096 × a 5 MiB
//! frame per connection (issue #20 item 4).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// What decoding builds per element beyond the frame's own bytes (a
/// message's struct, a `Bytes` handle, a `String`): an estimate on the
/// high side, so the budget bounds decoded memory too.
pub const DECODED_BYTES_PER_ELEMENT: usize = 128;

/// Bytes held under both bounds; given back when dropped.
#[derive(Debug)]
pub struct Held {
    _conn: OwnedSemaphorePermit,
    _peer: OwnedSemaphorePermit,
}

/// One connection's budget, and its peer's.
#[derive(Debug, Clone)]
pub struct Budget {
    conn: Arc<Semaphore>,
    conn_bytes: usize,
    peer: Arc<Semaphore>,
    peer_bytes: usize,
}

impl Budget {
    /// Waits until `bytes` fit the connection's and the peer's budgets and
    /// takes them. A single item larger than a bound takes the whole bound
    /// (it still goes through, alone). None once the server closed them.
    pub async fn take(&self, bytes: usize) -> Option<Held> {
        let permits = |cap: usize| u32::try_from(bytes.min(cap)).unwrap_or(u32::MAX);
        // The connection's first: a peer's other connections are not held
        // up by one connection's backlog.
        let conn = self.conn.clone().acquire_many_owned(permits(self.conn_bytes)).await.ok()?;
        let peer = self.peer.clone().acquire_many_owned(permits(self.peer_bytes)).await.ok()?;
        Some(Held { _conn: conn, _peer: peer })
    }

    /// Bytes of the connection's budget not held now.
    #[cfg(test)]
    pub fn connection_available(&self) -> usize {
        self.conn.available_permits()
    }
}

/// Every peer's budget, shared by its connections; forgotten when its last
/// connection ends.
#[derive(Debug)]
pub struct Peers {
    per_connection: usize,
    per_peer: usize,
    budgets: Mutex<HashMap<String, Weak<Semaphore>>>,
}

impl Peers {
    /// Bounds of `per_connection` and `per_peer` bytes (each at least one
    /// largest frame: `max_frame_bytes`).
    pub fn new(per_connection: usize, per_peer: usize, max_frame_bytes: usize) -> Peers {
        let per_connection = clamp(per_connection, max_frame_bytes);
        let per_peer = clamp(per_peer, max_frame_bytes).max(per_connection);
        Peers { per_connection, per_peer, budgets: Mutex::new(HashMap::new()) }
    }

    /// A new connection's budget, sharing its peer's.
    pub fn connection(&self, peer: &str) -> Budget {
        let mut map = self.budgets.lock().unwrap_or_else(|e| e.into_inner());
        let shared = match map.get(peer).and_then(Weak::upgrade) {
            Some(s) => s,
            None => {
                // Peers that left must not accumulate: drop the dead entries
                // while the lock is held anyway.
                map.retain(|_, w| w.strong_count() > 0);
                let s = Arc::new(Semaphore::new(self.per_peer));
                map.insert(peer.to_string(), Arc::downgrade(&s));
                s
            }
        };
        Budget {
            conn: Arc::new(Semaphore::new(self.per_connection)),
            conn_bytes: self.per_connection,
            peer: shared,
            peer_bytes: self.per_peer,
        }
    }
}

fn clamp(bytes: usize, max_frame_bytes: usize) -> usize {
    // Semaphore permits are acquired in u32 amounts and capped below usize::MAX >> 3.
    bytes.max(max_frame_bytes.saturating_mul(2)).min(u32::MAX as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_peer_is_bounded_over_all_its_connections() {
        let peers = Peers::new(1000, 1500, 100);
        let (a, b) = (peers.connection("client/1"), peers.connection("client/1"));
        let held_a = a.take(900).await.unwrap();
        // The connection has room, the peer only 600 more.
        let held_b = b.take(600).await.unwrap();
        let blocked = tokio::time::timeout(Duration::from_millis(50), b.take(1)).await;
        assert!(blocked.is_err(), "the peer's bytes are spent");
        // Another peer is not held up.
        let other = peers.connection("client/2");
        assert!(other.take(1000).await.is_some());
        drop(held_a);
        assert!(b.take(300).await.is_some());
        drop(held_b);
        assert_eq!(a.connection_available(), 1000);
    }

    #[tokio::test]
    async fn an_item_over_a_bound_goes_through_alone() {
        let peers = Peers::new(10, 10, 100);
        let c = peers.connection("x/1");
        let held = c.take(1_000_000).await.unwrap();
        assert_eq!(c.connection_available(), 0);
        drop(held);
        assert_eq!(c.connection_available(), 200, "at least two largest frames");
    }

    #[tokio::test]
    async fn a_peer_that_left_is_forgotten() {
        let peers = Peers::new(1000, 1000, 1);
        drop(peers.connection("bookie/1"));
        let _c = peers.connection("bookie/2");
        assert_eq!(peers.budgets.lock().unwrap().len(), 1);
    }
}
