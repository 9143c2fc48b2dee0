//! Which entry logs a garbage-collection pass removes or compacts: plain
//! arithmetic over the index's runs and the files' sizes, no I/O.

use std::collections::HashMap;

/// How much of one entry log is still referenced by the index.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogUsage {
    /// The entry log.
    pub log_id: u32,
    /// Record bytes in the file (its size less the header).
    pub total_bytes: u64,
    /// Record bytes some index run points at.
    pub live_bytes: u64,
}

impl LogUsage {
    /// Live bytes over total bytes; an empty file is wholly dead.
    pub fn live_fraction(&self) -> f64 {
        if self.total_bytes == 0 {
            0.0
        } else {
            (self.live_bytes as f64 / self.total_bytes as f64).min(1.0)
        }
    }
}

/// Usage of every log: `sizes` are (log, file bytes), `live` the bytes of
/// runs per log. Runs that overlap (an entry re-added by recovery) count
/// twice, which can only make a log look fuller than it is: such a log is
/// compacted later than it could be, never early.
pub fn usage(sizes: &[(u32, u64)], live: &HashMap<u32, u64>, header_bytes: u64) -> Vec<LogUsage> {
    sizes
        .iter()
        .map(|(id, size)| LogUsage {
            log_id: *id,
            total_bytes: size.saturating_sub(header_bytes),
            live_bytes: live.get(id).copied().unwrap_or(0),
        })
        .collect()
}

/// What a pass does.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Plan {
    /// Logs nothing references: removed as they are.
    pub remove: Vec<u32>,
    /// Logs whose live fraction is under the threshold: live entries moved, then removed.
    pub compact: Vec<u32>,
}

/// Chooses among the sealed logs (ids below `sealed_below`: every flush
/// into them has committed its index, so their runs are all counted). A
/// threshold of 0 compacts nothing. The emptiest logs come first: they free
/// the most space per byte moved.
pub fn choose(usage: &[LogUsage], sealed_below: u32, threshold: f64) -> Plan {
    let mut plan = Plan::default();
    let mut compact: Vec<&LogUsage> = Vec::new();
    for u in usage.iter().filter(|u| u.log_id < sealed_below) {
        if u.live_bytes == 0 {
            plan.remove.push(u.log_id);
        } else if u.live_fraction() < threshold {
            compact.push(u);
        }
    }
    compact.sort_by(|a, b| a.live_fraction().total_cmp(&b.live_fraction()).then(a.log_id.cmp(&b.log_id)));
    plan.compact = compact.into_iter().map(|u| u.log_id).collect();
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(log_id: u32, total_bytes: u64, live_bytes: u64) -> LogUsage {
        LogUsage { log_id, total_bytes, live_bytes }
    }

    #[test]
    fn usage_subtracts_the_header_and_defaults_to_dead() {
        let live = HashMap::from([(1, 50)]);
        assert_eq!(usage(&[(1, 116), (2, 16)], &live, 16), vec![u(1, 100, 50), u(2, 0, 0)]);
    }

    #[test]
    fn dead_logs_go_low_ones_are_compacted_emptiest_first_and_unsealed_ones_are_left() {
        let all = [u(1, 100, 0), u(2, 100, 50), u(3, 100, 10), u(4, 100, 90), u(5, 100, 0), u(6, 100, 0)];
        let plan = choose(&all, 6, 0.8);
        assert_eq!(plan.remove, vec![1, 5], "6 is not sealed: a flush may be writing it");
        assert_eq!(plan.compact, vec![3, 2], "90% live is above the threshold");
    }

    #[test]
    fn threshold_zero_only_removes_dead_logs() {
        let plan = choose(&[u(1, 100, 0), u(2, 100, 1)], 10, 0.0);
        assert_eq!(plan, Plan { remove: vec![1], compact: vec![] });
    }

    #[test]
    fn overcounted_live_bytes_never_look_over_full() {
        assert_eq!(u(1, 100, 150).live_fraction(), 1.0);
        assert_eq!(u(1, 0, 0).live_fraction(), 0.0);
    }
}
