//! Prometheus text exposition (format 0.0.4) for quire's services, with no
//! I/O: the serving lives in quire-runtime (a TCP endpoint) and the gateway
//! (its HTTP API).
//!
//! - [`Histogram`]: fixed buckets, lock-free (one atomic per bucket), cheap
//!   enough for a hot path (an add, a journal sync).
//! - [`metric`], [`labelled`]: HELP/TYPE/value lines.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bucket bounds for latencies, in seconds: 50 µs to 10 s.
pub const LATENCY_SECONDS: &[f64] =
    &[0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0];

/// Bucket bounds for counts per batch: 1 to 4096.
pub const BATCH_SIZES: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 4096.0];

/// A histogram with fixed upper bounds (plus +Inf).
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    /// Per bucket (not cumulative); the last is +Inf.
    counts: Vec<AtomicU64>,
    /// Sum of observations, as f64 bits (updated by compare-and-swap).
    sum_bits: AtomicU64,
}

impl Histogram {
    /// A histogram over `bounds` (ascending).
    pub fn new(bounds: &'static [f64]) -> Histogram {
        debug_assert!(bounds.windows(2).all(|w| w[0] < w[1]), "bounds must ascend");
        Histogram {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_bits: AtomicU64::new(0),
        }
    }

    /// A latency histogram (seconds).
    pub fn latency() -> Histogram {
        Histogram::new(LATENCY_SECONDS)
    }

    /// Records one observation.
    pub fn observe(&self, v: f64) {
        let i = self.bounds.iter().position(|b| v <= *b).unwrap_or(self.bounds.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        let mut cur = self.sum_bits.load(Ordering::Relaxed);
        loop {
            let next = (f64::from_bits(cur) + v).to_bits();
            match self.sum_bits.compare_exchange_weak(cur, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Records a duration, in seconds.
    pub fn observe_duration(&self, d: std::time::Duration) {
        self.observe(d.as_secs_f64());
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// Appends the histogram's exposition (HELP, TYPE, buckets, sum, count).
    pub fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cumulative = 0;
        for (i, c) in self.counts.iter().enumerate() {
            cumulative += c.load(Ordering::Relaxed);
            match self.bounds.get(i) {
                Some(b) => {
                    let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {cumulative}");
                }
                None => {
                    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {cumulative}");
                }
            }
        }
        let _ = writeln!(out, "{name}_sum {}", f64::from_bits(self.sum_bits.load(Ordering::Relaxed)));
        let _ = writeln!(out, "{name}_count {cumulative}");
    }
}

/// One metric in the text format: HELP, TYPE and a value line.
pub fn metric(out: &mut String, name: &str, kind: &str, help: &str, value: impl std::fmt::Display) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}");
}

/// A metric with one value per label set: HELP and TYPE once, then a line per
/// (labels, value); `labels` is the inside of the braces, e.g. `log="0001"`.
pub fn labelled<V: std::fmt::Display>(
    out: &mut String,
    name: &str,
    kind: &str,
    help: &str,
    values: impl IntoIterator<Item = (String, V)>,
) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    for (labels, v) in values {
        let _ = writeln!(out, "{name}{{{labels}}} {v}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_the_sum_adds_up() {
        let h = Histogram::new(&[1.0, 2.0]);
        for v in [0.5, 1.0, 1.5, 3.0] {
            h.observe(v);
        }
        let mut s = String::new();
        h.render(&mut s, "x_seconds", "X.");
        assert!(s.contains("x_seconds_bucket{le=\"1\"} 2\n"), "{s}");
        assert!(s.contains("x_seconds_bucket{le=\"2\"} 3\n"), "{s}");
        assert!(s.contains("x_seconds_bucket{le=\"+Inf\"} 4\n"), "{s}");
        assert!(s.contains("x_seconds_sum 6\n"), "{s}");
        assert!(s.contains("x_seconds_count 4\n"), "{s}");
        assert_eq!(h.count(), 4);
    }

    #[test]
    fn concurrent_observations_are_all_counted() {
        let h = std::sync::Arc::new(Histogram::latency());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let h = h.clone();
                std::thread::spawn(move || (0..10_000).for_each(|i| h.observe(i as f64 * 1e-6)))
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(h.count(), 40_000);
    }

    #[test]
    fn labelled_lines_share_one_header() {
        let mut s = String::new();
        labelled(&mut s, "y", "gauge", "Y.", [("a=\"1\"".to_string(), 1), ("a=\"2\"".to_string(), 2)]);
        assert_eq!(s, "# HELP y Y.\n# TYPE y gauge\ny{a=\"1\"} 1\ny{a=\"2\"} 2\n");
    }
}
