//! What a run must have done for its verdict to mean anything. A history
//! with no violation proves little if the clients hardly ran, the faults
//! were never applied, or the finale skipped what it could not read: each
//! of those is a failure of the run, never a pass.
//!
//! The floors are per minute of the run, set at a fraction of what a
//! healthy run does on this project's 2-core machine (docs/faults.md lists
//! the measured counts), so that a slow machine passes and a workload that
//! stopped working does not.

use std::collections::{BTreeMap, BTreeSet};

use crate::check::Report;
use crate::schedule::Step;

/// The least of each operation a run must have seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Floors {
    pub creates: usize,
    pub acked_adds: usize,
    pub reads: usize,
    pub recoveries: usize,
    /// Recoveries whose fence moment is known: guarantee 3 is judged from
    /// the fence only for these.
    pub fence_times: usize,
    pub ledgers_final: usize,
    /// Log takeovers (each fences the previous owner).
    pub log_takeovers: usize,
    pub log_appends: usize,
    /// Log records read by cursor readers.
    pub log_records_read: usize,
    /// Conditional appends acknowledged, and refused (412): both, or the
    /// two writers' conditional lanes did not race (issue #47).
    pub log_conditional_acked: usize,
    pub log_conditional_refused: usize,
    /// Atomic batches acknowledged (issue #47).
    pub log_batches_acked: usize,
    /// Logs read back whole at the finale (every log of the run).
    pub logs_final: usize,
}

impl Floors {
    /// The floors of a run whose faults last `duration_secs`.
    pub fn for_run(duration_secs: u64) -> Floors {
        let minutes = duration_secs.div_ceil(60).max(1) as usize;
        Floors {
            creates: 10 * minutes,
            acked_adds: 2_000 * minutes,
            reads: 500 * minutes,
            recoveries: 3 * minutes,
            fence_times: 2 * minutes,
            ledgers_final: 10 * minutes,
            log_takeovers: 4 * minutes,
            log_appends: 500 * minutes,
            log_records_read: 200 * minutes,
            log_conditional_acked: 30 * minutes,
            log_conditional_refused: 30 * minutes,
            log_batches_acked: 30 * minutes,
            logs_final: 1,
        }
    }
}

/// Each count of `report` below its floor, as a sentence.
pub fn shortfalls(report: &Report, floors: &Floors) -> Vec<String> {
    [
        ("ledgers created", report.creates, floors.creates),
        ("acknowledged adds", report.acked_adds, floors.acked_adds),
        ("reads answered", report.reads, floors.reads),
        ("recoveries completed", report.recoveries, floors.recoveries),
        ("recoveries that said when their fence held", report.fence_times, floors.fence_times),
        ("ledgers read back at the finale", report.ledgers_final, floors.ledgers_final),
        ("log takeovers", report.logs.takeovers, floors.log_takeovers),
        ("acknowledged log appends", report.logs.acked_appends, floors.log_appends),
        ("log records read at cursors", report.logs.records_read, floors.log_records_read),
        ("conditional log appends acknowledged", report.logs.conditional_acked, floors.log_conditional_acked),
        ("conditional log appends refused", report.logs.conditional_refused, floors.log_conditional_refused),
        ("atomic log batches acknowledged", report.logs.batches_acked, floors.log_batches_acked),
        ("logs read back at the finale", report.logs.logs_final, floors.logs_final),
    ]
    .into_iter()
    .filter(|(_, got, floor)| got < floor)
    .map(|(what, got, floor)| format!("too little checked: {got} {what}, the floor is {floor}"))
    .collect()
}

/// The kinds of fault `steps` holds that `applied` (kind -> times applied)
/// never applied.
pub fn unapplied_kinds(steps: &[Step], applied: &BTreeMap<&'static str, u32>) -> Vec<&'static str> {
    let scheduled: BTreeSet<&'static str> = steps.iter().map(|s| s.fault.kind()).collect();
    scheduled.into_iter().filter(|k| applied.get(k).copied().unwrap_or(0) == 0).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::{Fault, Target};

    fn busy() -> Report {
        Report {
            creates: 100,
            acked_adds: 50_000,
            reads: 9_000,
            recoveries: 30,
            fence_times: 20,
            ledgers_final: 100,
            logs: crate::logs::LogCounts {
                takeovers: 20,
                acked_appends: 5_000,
                records_read: 3_000,
                conditional_acked: 300,
                conditional_refused: 2_000,
                batches_acked: 300,
                logs_final: 1,
                ..Default::default()
            },
            ..Report::default()
        }
    }

    #[test]
    fn a_busy_run_meets_its_floors() {
        assert!(shortfalls(&busy(), &Floors::for_run(120)).is_empty());
    }

    #[test]
    fn a_run_that_did_too_little_of_anything_falls_short() {
        let floors = Floors::for_run(90);
        let mut r = busy();
        r.recoveries = 0;
        r.reads = 3;
        let s = shortfalls(&r, &floors);
        assert_eq!(s.len(), 2, "{s:?}");
        assert!(s[0].contains("3 reads answered"), "{s:?}");
        assert!(s[1].contains("0 recoveries completed"), "{s:?}");
        assert_eq!(
            shortfalls(&Report::default(), &floors).len(),
            13,
            "every floor, the conditional appends' and batches' too"
        );
    }

    #[test]
    fn floors_grow_with_the_run() {
        assert!(Floors::for_run(300).acked_adds > Floors::for_run(90).acked_adds);
        assert_eq!(Floors::for_run(0), Floors::for_run(60));
    }

    #[test]
    fn a_scheduled_kind_never_applied_is_named() {
        let steps = vec![
            Step { at_ms: 1, fault: Fault::Kill { target: Target::Bookie(1) } },
            Step { at_ms: 2, fault: Fault::Restart { target: Target::Bookie(1) } },
            Step { at_ms: 3, fault: Fault::ClockJump { target: Target::Worker(1), offset_ms: 5 } },
        ];
        let mut applied = BTreeMap::from([("kill bookie", 1), ("restart", 1)]);
        assert_eq!(unapplied_kinds(&steps, &applied), vec!["clock jump"]);
        applied.insert("clock jump", 1);
        assert!(unapplied_kinds(&steps, &applied).is_empty());
    }
}
