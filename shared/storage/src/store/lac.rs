//! A ledger's LastAddConfirmed as this store knows it, and the long polls
//! waiting for it to pass a value.
//!
//! Every ledger the store holds carries one. It was a tokio watch channel:
//! about 450 bytes each (its shared state holds nine `Notify`s), 45 MB for
//! 100 000 open ledgers that nobody polls (issue #46). Now an idle ledger
//! carries an atomic and an empty slot; the first long poll puts a
//! `Notify` in it.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

pub(super) struct Lac {
    value: AtomicI64,
    /// Set by the first long poll, kept after it. The lock orders a raise
    /// against a poll's start: either the raise finds the poll's `Notify`
    /// and wakes it, or the poll, registered after the raise's lock, reads
    /// the raised value.
    waiters: Mutex<Option<Arc<Notify>>>,
}

impl Lac {
    pub(super) fn new(lac: i64) -> Lac {
        Lac { value: AtomicI64::new(lac), waiters: Mutex::new(None) }
    }

    pub(super) fn get(&self) -> i64 {
        self.value.load(Ordering::SeqCst)
    }

    /// Raises the LAC to `lac` if that is higher; whether it was.
    pub(super) fn raise(&self, lac: i64) -> bool {
        let raised = self.value.fetch_max(lac, Ordering::SeqCst) < lac;
        if raised {
            if let Some(n) = self.waiters.lock().expect("lac waiters lock").as_ref() {
                n.notify_waiters();
            }
        }
        raised
    }

    /// The LAC once it exceeds `after` (now, if it does). Cancel-safe:
    /// dropping the future leaves nothing behind but the `Notify`.
    pub(super) async fn above(&self, after: i64) -> i64 {
        let notify = self.waiters.lock().expect("lac waiters lock").get_or_insert_with(Default::default).clone();
        loop {
            // Created before the read: a raise after the read wakes it
            // (tokio counts `notify_waiters` calls from `notified()` on).
            let notified = notify.notified();
            let now = self.get();
            if now > after {
                return now;
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_poll_sees_every_raise_whenever_it_lands() {
        // Raises racing polls that start at every moment: none is missed
        // (a missed wake would hang its poll until the test's timeout).
        for round in 0..2_000i64 {
            let lac = Arc::new(Lac::new(-1));
            let raiser = {
                let lac = lac.clone();
                tokio::spawn(async move {
                    for v in 0..3 {
                        lac.raise(v);
                        tokio::task::yield_now().await;
                    }
                })
            };
            let got = tokio::time::timeout(Duration::from_secs(10), lac.above(1)).await;
            assert_eq!(got.ok(), Some(2), "round {round}");
            raiser.await.unwrap();
        }
    }

    #[test]
    fn only_a_higher_value_raises() {
        let lac = Lac::new(5);
        assert!(!lac.raise(4));
        assert!(!lac.raise(5));
        assert!(lac.raise(6));
        assert_eq!(lac.get(), 6);
    }
}
