//! The compactor's byte-rate limit: a token bucket with time passed in, so
//! its arithmetic is tested without sleeping.

use std::time::{Duration, Instant};

/// Bytes per second, with at most one second's worth of burst.
#[derive(Debug)]
pub struct Throttle {
    rate_bytes_per_sec: u64,
    /// Tokens available (may go negative: a large read is let through and paid for after).
    tokens: f64,
    last: Option<Instant>,
}

impl Throttle {
    /// A limit of `rate_bytes_per_sec`; 0 means unlimited.
    pub fn new(rate_bytes_per_sec: u64) -> Self {
        Throttle { rate_bytes_per_sec, tokens: rate_bytes_per_sec as f64, last: None }
    }

    /// Takes `bytes` at `now`; returns how long to wait before going on.
    pub fn take(&mut self, bytes: u64, now: Instant) -> Duration {
        if self.rate_bytes_per_sec == 0 {
            return Duration::ZERO;
        }
        let rate = self.rate_bytes_per_sec as f64;
        if let Some(last) = self.last {
            let refill = now.saturating_duration_since(last).as_secs_f64() * rate;
            self.tokens = (self.tokens + refill).min(rate);
        }
        self.last = Some(now);
        self.tokens -= bytes as f64;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / rate)
        }
    }

    /// Takes `bytes` and sleeps the thread as long as the limit asks
    /// (compaction runs on its own blocking thread).
    pub fn pace(&mut self, bytes: u64) {
        let wait = self.take(bytes, Instant::now());
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unlimited_never_waits() {
        let mut t = Throttle::new(0);
        assert_eq!(t.take(u64::MAX, Instant::now()), Duration::ZERO);
    }

    #[test]
    fn a_burst_of_one_second_then_the_rate() {
        let now = Instant::now();
        let mut t = Throttle::new(1000);
        assert_eq!(t.take(1000, now), Duration::ZERO, "one second's worth passes at once");
        assert_eq!(t.take(500, now), Duration::from_millis(500), "then bytes are paid for in time");
        // Half a second later the debt is paid; 250 more bytes cost 250 ms.
        assert_eq!(t.take(250, now + Duration::from_millis(500)), Duration::from_millis(250));
    }

    #[test]
    fn idle_time_does_not_bank_more_than_a_second() {
        let now = Instant::now();
        let mut t = Throttle::new(1000);
        t.take(1000, now);
        let later = now + Duration::from_secs(60);
        assert_eq!(t.take(1000, later), Duration::ZERO);
        assert_eq!(t.take(1000, later), Duration::from_secs(1));
    }
}
