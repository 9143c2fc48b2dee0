//! Read buffers kept for reuse by region reads.
//!
//! A batch read answers with about a megabyte a response, read into one
//! buffer that its entries slice (no copy) until the response is encoded.
//! A fresh buffer each time is fresh memory each time: a profile of a
//! catch-up read put a third of each bookie's CPU in the kernel zeroing the
//! pages such buffers fault in (the allocator hands large freed blocks back
//! to the kernel). A buffer here goes back to its pool when the last slice
//! of it is dropped, and the next region read reuses it, pages and all.

use std::sync::{Arc, Mutex};

use bytes::Bytes;

/// Buffers kept at most.
const KEPT_MAX: usize = 8;
/// The least a kept buffer is made to hold (a batch read's usual answer).
const KEPT_BYTES_MIN: usize = 1 << 20;
/// Larger buffers are not kept (rare: compaction's slices, a damaged run).
const KEPT_BYTES_MAX: usize = 4 << 20;

/// A bounded free list of read buffers (at most [`KEPT_MAX`] of at most
/// [`KEPT_BYTES_MAX`] each: 32 MiB held at worst).
#[derive(Default)]
pub struct BufferPool {
    free: Mutex<Vec<Vec<u8>>>,
}

impl BufferPool {
    /// A buffer of `len` bytes (contents unspecified: the caller overwrites
    /// all of them) and the means to give it back.
    pub fn take(self: &Arc<Self>, len: usize) -> Lease {
        let reused = if len <= KEPT_BYTES_MAX { self.free.lock().expect("buffer pool lock").pop() } else { None };
        let mut buf = reused.unwrap_or_default();
        if buf.capacity() < len && len <= KEPT_BYTES_MAX {
            // Room for any read up to the next power of two (at least
            // [`KEPT_BYTES_MIN`]): reads of slightly different sizes reuse
            // it without growing it again.
            let room = len.next_power_of_two().clamp(KEPT_BYTES_MIN, KEPT_BYTES_MAX);
            buf.reserve_exact(room - buf.len());
        }
        if buf.len() < len {
            // Only the new tail is zeroed; a reused buffer's old bytes are
            // overwritten by the read.
            buf.resize(len, 0);
        }
        Lease { buf, len, pool: self.clone() }
    }

    /// Buffers waiting for reuse (for tests).
    pub fn kept(&self) -> usize {
        self.free.lock().expect("buffer pool lock").len()
    }

    fn give_back(&self, buf: Vec<u8>) {
        if buf.capacity() > KEPT_BYTES_MAX {
            return;
        }
        let mut free = self.free.lock().expect("buffer pool lock");
        if free.len() < KEPT_MAX {
            free.push(buf);
        }
    }
}

/// A buffer taken from a [`BufferPool`]; back to it when dropped.
pub struct Lease {
    buf: Vec<u8>,
    len: usize,
    pool: Arc<BufferPool>,
}

impl Lease {
    /// The buffer's `len` bytes, to read into.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.buf[..self.len]
    }

    /// The filled buffer as `Bytes`: slices of it share it, and it goes back
    /// to the pool when the last one is dropped.
    pub fn freeze(self) -> Bytes {
        Bytes::from_owner(self)
    }
}

impl AsRef<[u8]> for Lease {
    fn as_ref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.pool.give_back(std::mem::take(&mut self.buf));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_returns_when_its_last_slice_is_dropped_and_is_reused() {
        let pool = Arc::new(BufferPool::default());
        let mut lease = pool.take(1000);
        lease.as_mut_slice().fill(7);
        let bytes = lease.freeze();
        let slice = bytes.slice(10..20);
        drop(bytes);
        assert_eq!(pool.kept(), 0, "a slice still holds it");
        assert_eq!(&slice[..], &[7u8; 10]);
        drop(slice);
        assert_eq!(pool.kept(), 1);
        // A smaller read reuses it and sees exactly its own length.
        let mut again = pool.take(100);
        assert_eq!(pool.kept(), 0);
        again.as_mut_slice().fill(9);
        assert_eq!(again.freeze().len(), 100);
        assert_eq!(pool.kept(), 1);
    }

    #[test]
    fn the_pool_keeps_a_bounded_number_of_bounded_buffers() {
        let pool = Arc::new(BufferPool::default());
        let leases: Vec<Lease> = (0..KEPT_MAX + 3).map(|_| pool.take(64)).collect();
        drop(leases);
        assert_eq!(pool.kept(), KEPT_MAX);
        let pool = Arc::new(BufferPool::default());
        drop(pool.take(KEPT_BYTES_MAX + 1));
        assert_eq!(pool.kept(), 0, "an outsized buffer is not kept");
    }
}
