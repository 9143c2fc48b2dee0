//! Which faults happen when: a pure function of a seed, so a run that finds
//! a bug is re-run by its seed (`make jepsen SEED=…`).
//!
//! Faults come in episodes: one fault starts, lasts a while, and is undone
//! (a killed process restarts, a partition heals, a slow disk recovers, a
//! jumped clock jumps back) before a pause and the next episode. The
//! schedule stays inside the fault model the guarantees are promised under
//! (../shared/BRIEF.md): at most one bookie away at a time (killed, replaced
//! or damaged), a majority of metadata replicas always up, and a
//! data-destroying fault (an empty bookie at the old address, bit flips)
//! only after the last one has had time to be repaired. Which metadata
//! replica is the leader is only known at run time: `Target::MetadataLeader`
//! is resolved by the harness when the step runs. The generator is the
//! protocol simulator's (SplitMix64), so one seed means one thing in both.

use quire_client::sim::rng::Rng;
use serde::{Deserialize, Serialize};

/// A process of the cluster under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    Bookie(u32),
    Metadata(u32),
    /// Whichever metadata replica leads when the step runs.
    MetadataLeader,
    Worker(u32),
    Auditor(u32),
    Gateway(u32),
}

/// Which of a bookie's files bits are flipped in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileKind {
    EntryLog,
    Journal,
}

/// One thing the harness does to the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "fault", rename_all = "snake_case")]
pub enum Fault {
    /// SIGKILL.
    Kill {
        target: Target,
    },
    /// Start a killed process again, with its data.
    Restart {
        target: Target,
    },
    /// Cut traffic both ways between two groups.
    Partition {
        a: Vec<Target>,
        b: Vec<Target>,
    },
    /// Drop packets from one process to another, not back.
    DropOneWay {
        from: Target,
        to: Target,
    },
    /// Remove every network fault.
    Heal,
    /// Delay every journal and entry-log sync of a bookie.
    SlowDisk {
        bookie: u32,
        delay_ms: u32,
    },
    FastDisk {
        bookie: u32,
    },
    /// Seed 003: stop the bookie, wipe its disks, start an empty one at the
    /// same address.
    ReplaceBookie {
        bookie: u32,
    },
    /// Flip bits in a stopped bookie's files, then start it again.
    FlipBits {
        bookie: u32,
        file: FileKind,
        flips: u32,
    },
    /// Zero the length field of one journal record that has records after
    /// it, in a stopped bookie's journal, then start it again. A journal is
    /// preallocated with zeros, so a zero length looks like the written
    /// end: replay must see the records after it as damage (issue #19 item
    /// 2), never as a clean end that drops them silently.
    ZeroJournalLength {
        bookie: u32,
    },
    /// Move a process's clock (its lease and timeout arithmetic) by an offset.
    ClockJump {
        target: Target,
        offset_ms: i64,
    },
    /// Cut the power of one bookie or metadata replica: its disks lose what
    /// no fsync made durable (crashfs), the process dies with them. A
    /// `Restart` powers it on again.
    PowerLoss {
        target: Target,
    },
    /// Cut the power of every bookie and metadata replica at one instant,
    /// then power them all on again (once per run: outside the one-away
    /// fault model on purpose; nothing acknowledged may be lost).
    PowerLossAll,
}

impl Fault {
    /// The kind of fault, for counts: what a run applied of each, and
    /// whether every kind its schedule holds was applied at least once.
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::Kill { target: Target::Bookie(_) } => "kill bookie",
            Fault::Kill { target: Target::Metadata(_) | Target::MetadataLeader } => "kill metadata",
            Fault::Kill { .. } => "kill worker/auditor/gateway",
            Fault::Restart { .. } => "restart",
            Fault::Partition { .. } => "partition",
            Fault::DropOneWay { .. } => "drop one way",
            Fault::Heal => "heal",
            Fault::SlowDisk { .. } => "slow disk",
            Fault::FastDisk { .. } => "fast disk",
            Fault::ReplaceBookie { .. } => "replace bookie",
            Fault::FlipBits { file: FileKind::EntryLog, .. } => "flip entry-log bits",
            Fault::FlipBits { file: FileKind::Journal, .. } => "flip journal bits",
            Fault::ZeroJournalLength { .. } => "zero a journal length",
            Fault::ClockJump { .. } => "clock jump",
            Fault::PowerLoss { target: Target::Bookie(_) } => "power loss bookie",
            Fault::PowerLoss { .. } => "power loss metadata",
            Fault::PowerLossAll => "power loss all",
        }
    }

    /// Whether it destroys data a bookie acknowledged (the harness waits for
    /// the last such fault to be repaired before the next).
    pub fn destroys_data(&self) -> bool {
        matches!(self, Fault::ReplaceBookie { .. } | Fault::FlipBits { .. } | Fault::ZeroJournalLength { .. })
    }
}

/// A fault at a time, in milliseconds from the start of the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    pub at_ms: u64,
    #[serde(flatten)]
    pub fault: Fault,
}

/// The cluster's shape: how many of each process (ids from 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Topology {
    pub bookies: u32,
    pub metadata: u32,
    pub workers: u32,
    pub auditors: u32,
    pub gateways: u32,
}

/// How long episodes and pauses last, and how far apart data-destroying
/// faults must be (time for autorecovery to restore Qw copies).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    pub episode_ms: (u64, u64),
    pub pause_ms: (u64, u64),
    pub destructive_gap_ms: u64,
    /// Whether journal damage may also zero a record's length (a quarter of
    /// it), not only flip bits. On by default since its finding (open
    /// ledgers held in limbo for ever, docs/faults.md) was fixed; off, every
    /// seed's schedule is what it was before the fault existed (to replay
    /// the findings recorded then).
    pub zeroed_lengths: bool,
    /// Whether power cuts are scheduled (one node's, and once per run all
    /// storage nodes'). Off, every seed's schedule is what it was before
    /// they existed (to replay the findings recorded then).
    pub power_loss: bool,
}

impl Default for Timing {
    fn default() -> Timing {
        Timing {
            episode_ms: (1_000, 6_000),
            pause_ms: (500, 3_000),
            destructive_gap_ms: 20_000,
            zeroed_lengths: true,
            power_loss: true,
        }
    }
}

fn ids(n: u32) -> Vec<u32> {
    (1..=n).collect()
}

/// The schedule of a run of `duration_ms`: episodes until the end, and a
/// final heal (every process up, every network and disk fault removed).
pub fn schedule(seed: u64, duration_ms: u64, topo: Topology, timing: Timing) -> Vec<Step> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    let mut t = rng.range(timing.pause_ms.0, timing.pause_ms.1 + 1);
    let mut last_destructive: Option<u64> = None;
    let bookies = ids(topo.bookies);
    // Every storage node loses power at once, once: at the first episode
    // past a third of the run, so that the rest of the run (and the
    // finale) sees what came back.
    let mut all_down_at = (timing.power_loss && topo.metadata + topo.bookies > 0).then_some(duration_ms / 3);
    while t < duration_ms {
        if all_down_at.is_some_and(|at| t >= at) {
            all_down_at = None;
            out.push(Step { at_ms: t, fault: Fault::PowerLossAll });
            t += rng.range(timing.pause_ms.0, timing.pause_ms.1 + 1);
            continue;
        }
        let len = rng.range(timing.episode_ms.0, timing.episode_ms.1 + 1);
        let end = (t + len).min(duration_ms);
        let destructive_ok = last_destructive.is_none_or(|d| t >= d + timing.destructive_gap_ms);
        // The kinds this topology allows, each with a weight.
        let mut kinds: Vec<(u32, u64)> = vec![(0, 3), (2, 2), (3, 1), (4, 1), (7, 1)];
        if topo.metadata >= 3 {
            kinds.push((1, 2));
        }
        if destructive_ok && topo.bookies >= 2 {
            kinds.push((5, 1));
            kinds.push((6, 1));
        }
        if topo.workers + topo.gateways + topo.auditors > 0 {
            kinds.push((8, 1));
        }
        if timing.power_loss {
            kinds.push((9, 2));
        }
        let total: u64 = kinds.iter().map(|k| k.1).sum();
        let mut roll = rng.range(0, total);
        let kind = kinds
            .iter()
            .find(|k| {
                if roll < k.1 {
                    true
                } else {
                    roll -= k.1;
                    false
                }
            })
            .expect("weights cover the roll")
            .0;
        let (start, undo) = match kind {
            0 => {
                let target = Target::Bookie(*rng.pick(&bookies));
                (Fault::Kill { target }, Some(Fault::Restart { target }))
            }
            1 => {
                let target = if rng.chance(0.5) {
                    Target::MetadataLeader
                } else {
                    Target::Metadata(*rng.pick(&ids(topo.metadata)))
                };
                (Fault::Kill { target }, Some(Fault::Restart { target }))
            }
            2 => {
                // Cut one bookie, or one metadata replica, off from the rest.
                let alone = if rng.chance(0.5) || topo.metadata < 3 {
                    Target::Bookie(*rng.pick(&bookies))
                } else {
                    Target::Metadata(*rng.pick(&ids(topo.metadata)))
                };
                let mut rest: Vec<Target> = bookies.iter().map(|&b| Target::Bookie(b)).collect();
                rest.extend(ids(topo.metadata).into_iter().map(Target::Metadata));
                rest.extend(ids(topo.gateways).into_iter().map(Target::Gateway));
                rest.extend(ids(topo.workers).into_iter().map(Target::Worker));
                rest.extend(ids(topo.auditors).into_iter().map(Target::Auditor));
                rest.retain(|&x| x != alone);
                (Fault::Partition { a: vec![alone], b: rest }, Some(Fault::Heal))
            }
            3 => {
                let from = Target::Bookie(*rng.pick(&bookies));
                let to = if topo.gateways > 0 && rng.chance(0.5) {
                    Target::Gateway(*rng.pick(&ids(topo.gateways)))
                } else {
                    Target::MetadataLeader
                };
                (Fault::DropOneWay { from, to }, Some(Fault::Heal))
            }
            4 => {
                let bookie = *rng.pick(&bookies);
                (Fault::SlowDisk { bookie, delay_ms: rng.range(5, 201) as u32 }, Some(Fault::FastDisk { bookie }))
            }
            5 => {
                last_destructive = Some(t);
                (Fault::ReplaceBookie { bookie: *rng.pick(&bookies) }, None)
            }
            6 => {
                last_destructive = Some(t);
                if rng.chance(0.5) {
                    let file = FileKind::EntryLog;
                    (Fault::FlipBits { bookie: *rng.pick(&bookies), file, flips: rng.range(1, 9) as u32 }, None)
                } else if !timing.zeroed_lengths || rng.chance(0.5) {
                    let file = FileKind::Journal;
                    (Fault::FlipBits { bookie: *rng.pick(&bookies), file, flips: rng.range(1, 9) as u32 }, None)
                } else {
                    (Fault::ZeroJournalLength { bookie: *rng.pick(&bookies) }, None)
                }
            }
            7 => {
                // Wall-clock readers: the metadata leader stamps lease and
                // lock times into its log; workers and bookies hold leases.
                let mut clocks: Vec<Target> = vec![Target::MetadataLeader];
                clocks.extend(ids(topo.metadata).into_iter().map(Target::Metadata));
                clocks.extend(ids(topo.workers).into_iter().map(Target::Worker));
                clocks.push(Target::Bookie(*rng.pick(&bookies)));
                let target = *rng.pick(&clocks);
                let offset_ms = rng.range(1_000, 60_001) as i64 * if rng.chance(0.5) { 1 } else { -1 };
                (Fault::ClockJump { target, offset_ms }, Some(Fault::ClockJump { target, offset_ms: -offset_ms }))
            }
            9 => {
                let target = if topo.metadata >= 3 && rng.chance(0.5) {
                    if rng.chance(0.5) {
                        Target::MetadataLeader
                    } else {
                        Target::Metadata(*rng.pick(&ids(topo.metadata)))
                    }
                } else {
                    Target::Bookie(*rng.pick(&bookies))
                };
                (Fault::PowerLoss { target }, Some(Fault::Restart { target }))
            }
            _ => {
                let mut others: Vec<Target> = ids(topo.workers).into_iter().map(Target::Worker).collect();
                others.extend(ids(topo.gateways).into_iter().map(Target::Gateway));
                others.extend(ids(topo.auditors).into_iter().map(Target::Auditor));
                let target = *rng.pick(&others);
                (Fault::Kill { target }, Some(Fault::Restart { target }))
            }
        };
        let destroyed = start.destroys_data();
        out.push(Step { at_ms: t, fault: start });
        if let Some(undo) = undo {
            out.push(Step { at_ms: end, fault: undo });
        }
        t = end + rng.range(timing.pause_ms.0, timing.pause_ms.1 + 1);
        // Half the time a worker is killed while it is likely recovering
        // what the damage left: open ledgers on the damaged bookie are
        // recovered once the writer grace (5 s) has passed after the mark.
        if destroyed && topo.workers > 0 && rng.chance(0.5) {
            let at = t.max(end + rng.range(5_500, 8_001));
            if at < duration_ms {
                let target = Target::Worker(*rng.pick(&ids(topo.workers)));
                let back = (at + rng.range(1_000, 4_001)).min(duration_ms);
                out.push(Step { at_ms: at, fault: Fault::Kill { target } });
                out.push(Step { at_ms: back, fault: Fault::Restart { target } });
                t = back + rng.range(timing.pause_ms.0, timing.pause_ms.1 + 1);
            }
        }
    }
    out.push(Step { at_ms: duration_ms, fault: Fault::Heal });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOPO: Topology = Topology { bookies: 4, metadata: 3, workers: 1, auditors: 1, gateways: 1 };

    #[test]
    fn a_seed_gives_one_schedule_and_seeds_differ() {
        let a = schedule(42, 120_000, TOPO, Timing::default());
        assert_eq!(a, schedule(42, 120_000, TOPO, Timing::default()));
        assert_ne!(a, schedule(43, 120_000, TOPO, Timing::default()));
    }

    /// What is down or cut off at each moment, replayed from the steps.
    fn replay(steps: &[Step]) -> Vec<(u64, usize, usize)> {
        let mut down: Vec<Target> = Vec::new();
        let mut cut: Vec<Target> = Vec::new();
        let mut out = Vec::new();
        for s in steps {
            match &s.fault {
                Fault::Kill { target } | Fault::PowerLoss { target } => down.push(*target),
                Fault::Restart { target } => down.retain(|t| t != target),
                Fault::Partition { a, .. } => cut.extend(a.iter().copied()),
                Fault::Heal => cut.clear(),
                _ => {}
            }
            let away: Vec<&Target> = down.iter().chain(&cut).collect();
            let bookies = away.iter().filter(|t| matches!(t, Target::Bookie(_))).count();
            let metadata = away.iter().filter(|t| matches!(t, Target::Metadata(_) | Target::MetadataLeader)).count();
            out.push((s.at_ms, bookies, metadata));
        }
        out
    }

    #[test]
    fn every_schedule_stays_inside_the_fault_model() {
        for seed in 0..500 {
            let steps = schedule(seed, 300_000, TOPO, Timing::default());
            // In time order, within the run, ending healed.
            assert!(steps.windows(2).all(|w| w[0].at_ms <= w[1].at_ms), "seed {seed}: {steps:?}");
            assert!(steps.iter().all(|s| s.at_ms <= 300_000), "seed {seed}");
            assert_eq!(steps.last().unwrap().fault, Fault::Heal, "seed {seed}");
            // Every storage node's power cut once, when nothing else is away.
            let all: Vec<usize> = (0..steps.len()).filter(|i| steps[*i].fault == Fault::PowerLossAll).collect();
            assert_eq!(all.len(), 1, "seed {seed}: {all:?}");
            let before = replay(&steps[..all[0]]);
            assert!(before.last().is_none_or(|(_, b, m)| *b == 0 && *m == 0), "seed {seed}: {before:?}");
            // At most one bookie and one metadata replica away at once.
            for (at, bookies, metadata) in replay(&steps) {
                assert!(
                    bookies <= 1 && metadata <= 1,
                    "seed {seed} at {at} ms: {bookies} bookies, {metadata} metadata away"
                );
            }
            // Every kill restarted, every slow disk made fast, every clock jumped back.
            let count = |f: &dyn Fn(&Fault) -> bool| steps.iter().filter(|s| f(&s.fault)).count();
            assert_eq!(
                count(&|f| matches!(f, Fault::Kill { .. } | Fault::PowerLoss { .. })),
                count(&|f| matches!(f, Fault::Restart { .. })),
                "seed {seed}"
            );
            assert_eq!(
                count(&|f| matches!(f, Fault::SlowDisk { .. })),
                count(&|f| matches!(f, Fault::FastDisk { .. })),
                "seed {seed}"
            );
            let jumps: i64 = steps
                .iter()
                .filter_map(|s| match s.fault {
                    Fault::ClockJump { offset_ms, .. } => Some(offset_ms),
                    _ => None,
                })
                .sum();
            assert_eq!(jumps, 0, "seed {seed}");
            // Data-destroying faults far enough apart for repair.
            let destructive: Vec<u64> = steps.iter().filter(|s| s.fault.destroys_data()).map(|s| s.at_ms).collect();
            assert!(destructive.windows(2).all(|w| w[1] - w[0] >= 20_000), "seed {seed}: {destructive:?}");
        }
    }

    #[test]
    fn workers_are_killed_while_they_repair_after_damage() {
        let mut aimed = 0;
        for seed in 0..40 {
            let steps = schedule(seed, 300_000, TOPO, Timing::default());
            for (i, d) in steps.iter().enumerate().filter(|(_, s)| s.fault.destroys_data()) {
                let hit = steps[i + 1..].iter().take_while(|s| s.at_ms <= d.at_ms + 14_000).any(|s| {
                    matches!(s.fault, Fault::Kill { target: Target::Worker(_) }) && s.at_ms >= d.at_ms + 5_500
                });
                aimed += usize::from(hit);
            }
        }
        assert!(aimed >= 20, "{aimed} workers killed in the repair after damage");
    }

    #[test]
    fn long_runs_use_every_kind_of_fault() {
        let mut seen = std::collections::BTreeSet::new();
        for seed in 0..20 {
            let timing = Timing::default();
            for s in schedule(seed, 600_000, TOPO, timing) {
                let name = serde_json::to_value(&s.fault).unwrap()["fault"].as_str().unwrap().to_string();
                seen.insert(name);
            }
        }
        let all = [
            "kill",
            "restart",
            "partition",
            "drop_one_way",
            "heal",
            "slow_disk",
            "fast_disk",
            "replace_bookie",
            "flip_bits",
            "zero_journal_length",
            "clock_jump",
            "power_loss",
            "power_loss_all",
        ];
        for k in all {
            assert!(seen.contains(k), "{k} never scheduled: {seen:?}");
        }
    }

    const PINNED_98: [&str; 3] = ["1388 kill worker/auditor/gateway", "6366 restart", "7358 kill metadata"];

    /// Power cuts off: each seed's schedule is what it was before they existed.
    #[test]
    fn without_power_loss_a_seed_schedules_what_it_did_before() {
        let old = Timing { power_loss: false, ..Timing::default() };
        let steps = schedule(98, 90_000, TOPO, old);
        assert!(steps.iter().all(|s| !matches!(s.fault, Fault::PowerLoss { .. } | Fault::PowerLossAll)));
        // Seed 98's first steps as recorded before power cuts existed.
        let first: Vec<String> = steps.iter().take(3).map(|s| format!("{} {}", s.at_ms, s.fault.kind())).collect();
        assert_eq!(first, PINNED_98, "{steps:?}");
    }

    #[test]
    fn the_generator_is_the_simulators_fixed_splitmix64() {
        // Pinned values: a schedule recorded with a seed must replay the same
        // after any refactoring or dependency update.
        let mut r = Rng::new(0);
        assert_eq!(r.next_u64(), 0xba88_94fa_3be5_9747);
        assert_eq!(r.next_u64(), 0x0699_45de_a824_60da);
    }
}
