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
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::Notify;

/// What decoding builds per element beyond the frame's own bytes (a
/// message's struct, a `Bytes` handle, a `String`): an estimate on the
/// high side, so the budget bounds decoded memory too.
pub const DECODED_BYTES_PER_ELEMENT: usize = 128;

/// A count of bytes held against a cap. Taking and giving back are an
/// atomic add each when there is room (every request and response pass
/// here twice, so no lock: tokio's semaphore locks its waiter list on every
/// release, which cost the pipelined RPC bench a fifth of its rate); only a
/// taker that finds no room waits, woken by the next release.
#[derive(Debug)]
struct Pool {
    cap: usize,
    used: AtomicUsize,
    waiting: AtomicUsize,
    released: Notify,
}

impl Pool {
    fn new(cap: usize) -> Arc<Pool> {
        Arc::new(Pool { cap, used: AtomicUsize::new(0), waiting: AtomicUsize::new(0), released: Notify::new() })
    }

    /// Takes `n` if it fits, or if nothing is held (an item over the cap
    /// goes through alone).
    fn try_take(&self, n: usize) -> bool {
        let mut cur = self.used.load(Ordering::SeqCst);
        loop {
            if cur != 0 && cur.saturating_add(n) > self.cap {
                return false;
            }
            match self.used.compare_exchange_weak(cur, cur + n, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => return true,
                Err(now) => cur = now,
            }
        }
    }

    /// Waits until `n` fits and takes it; cancelled, it holds nothing.
    async fn take(self: &Arc<Self>, n: usize) -> Taken {
        loop {
            if self.try_take(n) {
                return Taken { pool: self.clone(), bytes: n };
            }
            // Registered before the second look: a release after it wakes
            // this taker; one before it left room the second look sees.
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            let _waiting = Waiting::new(&self.waiting);
            if self.try_take(n) {
                return Taken { pool: self.clone(), bytes: n };
            }
            released.await;
        }
    }

    fn give_back(&self, n: usize) {
        self.used.fetch_sub(n, Ordering::SeqCst);
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.released.notify_waiters();
        }
    }

    #[cfg(test)]
    fn available(&self) -> usize {
        self.cap.saturating_sub(self.used.load(Ordering::SeqCst))
    }
}

/// Counts a waiting taker while it waits (a cancelled wait included).
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Waiting(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Bytes taken from one pool; given back when dropped.
#[derive(Debug)]
struct Taken {
    pool: Arc<Pool>,
    bytes: usize,
}

impl Drop for Taken {
    fn drop(&mut self) {
        self.pool.give_back(self.bytes);
    }
}

/// Bytes held under both bounds; given back when dropped.
#[derive(Debug)]
pub struct Held {
    _conn: Taken,
    _peer: Taken,
}

/// One connection's budget, and its peer's.
#[derive(Debug, Clone)]
pub struct Budget {
    conn: Arc<Pool>,
    peer: Arc<Pool>,
}

impl Budget {
    /// Waits until `bytes` fit the connection's and the peer's budgets and
    /// takes them. A single item larger than a bound goes through when
    /// nothing else is held under it.
    pub async fn take(&self, bytes: usize) -> Held {
        // The connection's first: a peer's other connections are not held
        // up by one connection's backlog.
        // Cancelled while waiting for the peer's, the connection's bytes are
        // given back (`Taken` drops).
        let conn = self.conn.take(bytes).await;
        let peer = self.peer.take(bytes).await;
        Held { _conn: conn, _peer: peer }
    }

    /// Bytes of the connection's budget not held now.
    #[cfg(test)]
    pub fn connection_available(&self) -> usize {
        self.conn.available()
    }
}

/// Every peer's budget, shared by its connections; forgotten when its last
/// connection ends.
#[derive(Debug)]
pub struct Peers {
    per_connection: usize,
    per_peer: usize,
    budgets: Mutex<HashMap<String, Weak<Pool>>>,
}

impl Peers {
    /// Bounds of `per_connection` and `per_peer` bytes (each at least two
    /// largest frames: `max_frame_bytes`).
    pub fn new(per_connection: usize, per_peer: usize, max_frame_bytes: usize) -> Peers {
        let per_connection = per_connection.max(max_frame_bytes.saturating_mul(2));
        let per_peer = per_peer.max(per_connection);
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
                let s = Pool::new(self.per_peer);
                map.insert(peer.to_string(), Arc::downgrade(&s));
                s
            }
        };
        Budget { conn: Pool::new(self.per_connection), peer: shared }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_peer_is_bounded_over_all_its_connections() {
        let peers = Peers::new(1000, 1500, 100);
        let (a, b) = (peers.connection("client/1"), peers.connection("client/1"));
        let held_a = a.take(900).await;
        // The connection has room, the peer only 600 more.
        let held_b = b.take(600).await;
        let blocked = tokio::time::timeout(Duration::from_millis(50), b.take(1)).await;
        assert!(blocked.is_err(), "the peer's bytes are spent");
        // Another peer is not held up.
        let other = peers.connection("client/2");
        let soon = |f| tokio::time::timeout(Duration::from_secs(5), f);
        soon(other.take(1000)).await.expect("another peer is not held up");
        drop(held_a);
        soon(b.take(300)).await.expect("room once the peer's bytes are given back");
        drop(held_b);
        assert_eq!(a.connection_available(), 1000);
    }

    #[tokio::test]
    async fn an_item_over_a_bound_goes_through_alone() {
        let peers = Peers::new(10, 10, 100);
        let c = peers.connection("x/1");
        let held = c.take(1_000_000).await;
        assert_eq!(c.connection_available(), 0);
        // Nothing else gets in beside it.
        assert!(tokio::time::timeout(Duration::from_millis(50), c.take(1)).await.is_err());
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

    /// A take cancelled while it waits (the lane's reader gave up) holds
    /// nothing afterwards, of either budget.
    #[tokio::test]
    async fn a_cancelled_take_holds_nothing() {
        let peers = Peers::new(1000, 1000, 1);
        let (a, b) = (peers.connection("client/1"), peers.connection("client/1"));
        let held = a.take(1000).await;
        // b's own budget has room, the peer's none: b waits, and is cancelled.
        assert!(tokio::time::timeout(Duration::from_millis(50), b.take(500)).await.is_err());
        assert_eq!(b.connection_available(), 1000, "the cancelled take gave its connection bytes back");
        drop(held);
        tokio::time::timeout(Duration::from_secs(5), b.take(1000)).await.expect("room once the bytes are given back");
    }
}
