//! A byte-rate limit shared by the copies of one replication worker: a token
//! bucket holding at most one second's worth, which a copy may overdraw and
//! then waits off. Re-replication must not starve the writes it protects.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Bytes per second, or unlimited.
pub struct Throttle {
    bytes_per_sec: u64,
    /// Tokens (bytes, may be negative: debt) as of an instant.
    bucket: Mutex<(f64, Instant)>,
}

impl Throttle {
    /// At most `bytes_per_sec` on average; 0 is unlimited.
    pub fn new(bytes_per_sec: u64) -> Throttle {
        Throttle { bytes_per_sec, bucket: Mutex::new((bytes_per_sec as f64, Instant::now())) }
    }

    /// The configured rate (0: unlimited).
    pub fn bytes_per_sec(&self) -> u64 {
        self.bytes_per_sec
    }

    /// Takes `bytes`, waiting until the average rate allows them.
    pub async fn take(&self, bytes: u64) {
        if self.bytes_per_sec == 0 {
            return;
        }
        let rate = self.bytes_per_sec as f64;
        let wait = {
            let mut b = self.bucket.lock().expect("throttle lock");
            let now = Instant::now();
            let refilled = (b.0 + now.duration_since(b.1).as_secs_f64() * rate).min(rate);
            let left = refilled - bytes as f64;
            *b = (left, now);
            if left < 0.0 {
                Duration::from_secs_f64(-left / rate)
            } else {
                Duration::ZERO
            }
        };
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_second_of_budget_then_waits_at_the_rate() {
        let t = Throttle::new(1000);
        let start = Instant::now();
        t.take(1000).await;
        assert_eq!(start.elapsed(), Duration::ZERO, "one second's worth is in the bucket");
        t.take(500).await;
        assert_eq!(start.elapsed(), Duration::from_millis(500));
        t.take(2000).await;
        assert_eq!(start.elapsed(), Duration::from_millis(2500));
        let free = Throttle::new(0);
        free.take(u64::MAX).await;
        assert_eq!(start.elapsed(), Duration::from_millis(2500));
    }
}
