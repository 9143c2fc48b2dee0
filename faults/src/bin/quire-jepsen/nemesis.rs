//! Applies the schedule's faults to the cluster at their times, on its own
//! thread (starting a process blocks until it serves). Every step applied is
//! logged to `nemesis.jsonl` with what it resolved to and how it went.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use quire_client::sim::rng::Rng;
use quire_faults::{Fault, FileKind, Step, Target};
use quire_metaclient::MetaClient;
use quire_proto::{v1, Role};
use quire_rpc::RpcClient;

use crate::cluster::{name, Cluster};

/// Longest the nemesis waits for the last damage to be repaired before it
/// does more.
const REPAIR_BOUND: Duration = Duration::from_secs(180);

fn wall_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

pub struct Nemesis {
    pub cluster: Cluster,
    meta: Arc<MetaClient>,
    /// Asks the bookies themselves (their integrity checks).
    rpc: RpcClient,
    rt: tokio::runtime::Handle,
    rng: Rng,
    /// The replica `MetadataLeader` meant when an episode started, so that
    /// its undo (restart, clock back) reaches the same one.
    episode_leader: Option<u32>,
    log: std::fs::File,
    /// Wall-clock ms when the last data-destroying fault was applied.
    last_destructive_ms: Option<u64>,
    /// What happened that the schedule did not say (a bookie that refused
    /// its damaged disk was replaced by an empty one): reported, not failed.
    pub findings: Vec<String>,
    /// Steps that could not be applied (an error, a destructive fault
    /// skipped because the last damage was never repaired, a clock jump
    /// without libfaketime): each fails the run.
    pub failures: Vec<String>,
    /// Steps applied, by kind of fault.
    pub applied: BTreeMap<&'static str, u32>,
    /// Processes whose power is off (restarted by a `Restart`).
    powered_off: BTreeSet<Target>,
    /// Bookies whose disks had damage injected (bit flips, a zeroed
    /// length): they may report damage; the others never may.
    damaged: BTreeSet<u32>,
    /// Power cuts applied, for each its own way of losing data.
    power_cuts: u64,
}

/// What a bookie's log says when it found its data damaged or missing.
const DAMAGE_REPORTS: [&str; 3] =
    ["the journal was damaged", "ledger index is gone", "integrity check: ledgers in limbo"];

/// How far back from a segment's end a zeroed length goes, in records.
const ZEROED_AMONG_LAST: usize = 32;
impl Nemesis {
    pub fn new(
        cluster: Cluster,
        meta: Arc<MetaClient>,
        rpc: RpcClient,
        rt: tokio::runtime::Handle,
        seed: u64,
    ) -> anyhow::Result<Nemesis> {
        let path = cluster.dir.join("nemesis.jsonl");
        let log = std::fs::File::create(&path).with_context(|| format!("create {}", path.display()))?;
        Ok(Nemesis {
            cluster,
            meta,
            rpc,
            rt,
            rng: Rng::new(seed ^ 0x6e656d65),
            episode_leader: None,
            log,
            last_destructive_ms: None,
            findings: Vec::new(),
            failures: Vec::new(),
            applied: BTreeMap::new(),
            powered_off: BTreeSet::new(),
            damaged: BTreeSet::new(),
            power_cuts: 0,
        })
    }

    /// After `t` restarted from a power cut: a bookie whose disks had no
    /// damage injected must not report any (a power cut loses only what was
    /// never acknowledged; issue #45 finding 6 took a torn batch for damage).
    fn check_no_damage_reported(&mut self, t: Target) {
        let Target::Bookie(b) = t else { return };
        if self.damaged.contains(&b) {
            return;
        }
        // A log that cannot be read is no evidence of a clean start.
        let log =
            match self.cluster.log_path(t).and_then(|p| {
                std::fs::read_to_string(&p).with_context(|| format!("read {}", p.display())).map(|l| (p, l))
            }) {
                Ok(pl) => pl,
                Err(e) => {
                    self.failures.push(format!("bookie-{b} after a power cut: its log could not be checked: {e:#}"));
                    return;
                }
            };
        let (path, log) = log;
        if let Some(said) = DAMAGE_REPORTS.iter().find(|m| log.contains(**m)) {
            self.failures.push(format!(
                "bookie-{b} reported damage after a power cut, and none was injected: \"{said}\" in {}",
                path.display()
            ));
        }
    }

    /// Cuts the power of `targets` at one instant; they stay down.
    fn power_cut(&mut self, targets: &[Target]) -> anyhow::Result<String> {
        self.power_cuts += 1;
        let seed = self.rng.next_u64() ^ self.power_cuts;
        let said = self.cluster.power_cut(targets, seed)?;
        self.powered_off.extend(targets.iter().copied());
        Ok(said)
    }

    /// Starts `t` after a power cut and checks what it says of its data.
    fn power_on(&mut self, t: Target) -> anyhow::Result<()> {
        self.cluster.start(t).with_context(|| format!("{} did not start after a power cut", name(t)))?;
        self.powered_off.remove(&t);
        self.check_no_damage_reported(t);
        Ok(())
    }

    /// Whether every metadata replica, asked directly, holds the same state:
    /// replicas at the same applied index must have the same state digest.
    /// Polled until they are at one index (commands keep coming: leases,
    /// audit reports) or `bound` passes.
    pub fn metadata_converged(&self, bound: Duration) -> Result<String, String> {
        let until = Instant::now() + bound;
        let replicas: Vec<u32> = (1..=self.cluster.topo.metadata).collect();
        let mut last = String::new();
        while Instant::now() < until {
            let mut seen = Vec::new();
            for i in &replicas {
                let Ok(addr) = self.cluster.addr(Target::Metadata(*i)) else { return Err(format!("no replica {i}")) };
                let peer = self.rpc.peer(&addr, Role::Metadata, Some(&i.to_string()));
                let req = v1::MetadataStatusRequest { with_state_digest: true };
                let st = self.rt.block_on(async { tokio::time::timeout(Duration::from_secs(5), peer.call(req)).await });
                match st {
                    Ok(Ok(st)) => seen.push((*i, st.state_applied_index, st.state_crc32c)),
                    Ok(Err(e)) => last = format!("replica {i}: {e}"),
                    Err(_) => last = format!("replica {i}: no answer in 5 s"),
                }
            }
            if seen.len() == replicas.len() && seen.iter().all(|s| s.1 == seen[0].1) {
                return if seen.iter().all(|s| s.2.is_some() && s.2 == seen[0].2) {
                    Ok(format!("every metadata replica at index {} holds the same state", seen[0].1))
                } else {
                    Err(format!("metadata replicas at the same applied index hold different states: {seen:?}"))
                };
            }
            if !seen.is_empty() {
                last = format!("{seen:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(format!("the metadata replicas never stood at one applied index in {} s: {last}", bound.as_secs()))
    }

    /// Runs `steps` against the clock that started at `t0`.
    pub fn run(&mut self, steps: &[Step], t0: Instant) {
        for step in steps {
            let due = t0 + Duration::from_millis(step.at_ms);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            let at = t0.elapsed().as_millis() as u64;
            let result = self.apply(&step.fault);
            let line = serde_json::json!({
                "at_ms": at,
                "step": step,
                "result": match &result { Ok(what) => what.clone(), Err(e) => format!("error: {e:#}") },
            });
            let _ = writeln!(self.log, "{line}");
            eprintln!("[{:>7.1}s] nemesis: {}", at as f64 / 1000.0, line["result"].as_str().unwrap_or(""));
            match result {
                Ok(_) => *self.applied.entry(step.fault.kind()).or_default() += 1,
                Err(e) => self.failures.push(format!("at {at} ms, {:?}: {e:#}", step.fault)),
            }
        }
    }

    /// Waits until the damage of the last data-destroying fault is repaired
    /// as far as autorecovery can tell: a complete replica check (one that
    /// reached every bookie) began after the damage, no ledger is marked
    /// under-replicated, and every bookie answers that its integrity check
    /// is done (a bookie with ledgers in limbo still lacks copies it had).
    /// With Qw=2, a second disk lost before the first is re-replicated
    /// loses data in any system of this family: the fault model is one
    /// bookie away at a time, and a bookie whose copies are not restored
    /// yet is still away. Seed 98 once went on after two checks had
    /// *ended* since the damage: the first had skipped the replaced bookie
    /// (its old connection's reset) and still counted as done. False when
    /// `bound` passed first.
    fn wait_repaired(&self, bound: Duration) -> bool {
        let Some(since) = self.last_destructive_ms else { return true };
        let until = Instant::now() + bound;
        while Instant::now() < until {
            let status = self.rt.block_on(self.meta.call(v1::MetadataStatusRequest::default()));
            if let Ok(st) = status {
                let checked_since = st.audit.as_ref().is_some_and(|a| a.replica_check_started_at_ms > since);
                if checked_since && st.under_replicated_ledgers == 0 && self.no_bookie_in_limbo() {
                    return true;
                }
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        false
    }

    /// Whether every bookie answers that no ledger of it is in limbo (one
    /// that does not answer may be mid-check: not yet).
    fn no_bookie_in_limbo(&self) -> bool {
        self.cluster.targets().into_iter().filter(|t| matches!(t, Target::Bookie(_))).all(|t| {
            let (Ok(addr), Target::Bookie(b)) = (self.cluster.addr(t), t) else { return false };
            let peer = self.rpc.peer(&addr, Role::Bookie, Some(&b.to_string()));
            let info = self.rt.block_on(async {
                tokio::time::timeout(Duration::from_secs(2), peer.call(v1::BookieInfoRequest {})).await
            });
            matches!(info, Ok(Ok(i)) if !i.integrity_check_pending)
        })
    }

    /// Which replica leads now (asked of the metadata service).
    fn leader(&self) -> anyhow::Result<u32> {
        let status = self
            .rt
            .block_on(self.meta.call_waiting(v1::MetadataStatusRequest::default(), Duration::from_secs(10)))
            .context("ask the metadata service for its leader")?;
        let id = status.leader_id.context("no metadata leader")?;
        Ok(id as u32)
    }

    /// `MetadataLeader` as a replica: the episode's if one is pending, else now's.
    fn resolve(&mut self, t: Target, keep: bool) -> anyhow::Result<Target> {
        if t != Target::MetadataLeader {
            return Ok(t);
        }
        let id = match self.episode_leader {
            Some(id) => id,
            None => self.leader()?,
        };
        self.episode_leader = keep.then_some(id);
        Ok(Target::Metadata(id))
    }

    fn apply(&mut self, f: &Fault) -> anyhow::Result<String> {
        if f.destroys_data() {
            let waited = Instant::now();
            if !self.wait_repaired(REPAIR_BOUND) {
                anyhow::bail!(
                    "skipped: the last data-destroying fault was still not repaired after {} s",
                    REPAIR_BOUND.as_secs()
                );
            }
            if waited.elapsed() > Duration::from_secs(1) {
                eprintln!(
                    "nemesis: waited {:.1} s for autorecovery to repair the last damage",
                    waited.elapsed().as_secs_f64()
                );
            }
            self.last_destructive_ms = Some(wall_ms());
        }
        Ok(match f {
            Fault::Kill { target } => {
                let t = self.resolve(*target, true)?;
                self.cluster.kill(t)?;
                format!("killed {}", name(t))
            }
            Fault::Restart { target } => {
                let t = self.resolve(*target, false)?;
                if self.powered_off.contains(&t) {
                    self.power_on(t)?;
                    format!("powered {} on", name(t))
                } else {
                    self.cluster.start(t)?;
                    format!("restarted {}", name(t))
                }
            }
            Fault::PowerLoss { target } => {
                let t = self.resolve(*target, true)?;
                format!("power cut: {}", self.power_cut(&[t])?)
            }
            Fault::PowerLossAll => {
                // Metadata replicas first (powered on first: bookies
                // register with them), then bookies.
                let targets = self.cluster.targets();
                let storage: Vec<Target> = targets
                    .iter()
                    .filter(|t| matches!(t, Target::Metadata(_)))
                    .chain(targets.iter().filter(|t| matches!(t, Target::Bookie(_))))
                    .copied()
                    .collect();
                let said = self.power_cut(&storage)?;
                let mut failed = Vec::new();
                for t in storage {
                    if let Err(e) = self.power_on(t) {
                        failed.push(format!("{e:#}"));
                    }
                }
                anyhow::ensure!(failed.is_empty(), "after cutting every storage node's power: {}", failed.join("; "));
                format!("power cut of every storage node, all powered on again: {said}")
            }
            Fault::Partition { a, b } => {
                let harness = self.cluster.lab.harness_ip();
                let mut names = Vec::new();
                for x in a {
                    let x = self.resolve(*x, false)?;
                    let i = self.cluster.index(x)?;
                    for y in b {
                        let y = self.resolve(*y, false)?;
                        let ip = self.cluster.ip(y)?;
                        self.cluster.lab.drop_from(i, ip)?;
                        self.cluster.lab.drop_to(i, ip)?;
                    }
                    // Isolated from the clients as well: a partition cuts the
                    // node off, not only its peers.
                    self.cluster.lab.drop_from(i, harness)?;
                    self.cluster.lab.drop_to(i, harness)?;
                    names.push(name(x));
                }
                format!("partitioned {} from the rest", names.join(","))
            }
            Fault::DropOneWay { from, to } => {
                let from = self.resolve(*from, false)?;
                let to = self.resolve(*to, false)?;
                let ip = self.cluster.ip(to)?;
                self.cluster.lab.drop_to(self.cluster.index(from)?, ip)?;
                format!("dropping {} -> {}", name(from), name(to))
            }
            Fault::Heal => {
                self.cluster.lab.heal()?;
                "healed the network".into()
            }
            Fault::SlowDisk { bookie, delay_ms } => {
                self.cluster.set_disk_delay(*bookie, *delay_ms)?;
                format!("bookie-{bookie} syncs wait {delay_ms} ms")
            }
            Fault::FastDisk { bookie } => {
                self.cluster.set_disk_delay(*bookie, 0)?;
                format!("bookie-{bookie} disk fast again")
            }
            Fault::ReplaceBookie { bookie } => {
                let t = Target::Bookie(*bookie);
                self.damaged.remove(bookie);
                self.cluster.kill(t)?;
                self.cluster.wipe_bookie(*bookie)?;
                self.cluster.start(t)?;
                format!("replaced bookie-{bookie} by an empty one at its address")
            }
            Fault::FlipBits { bookie, file, flips } => {
                self.damaged.insert(*bookie);
                self.flip_bits(*bookie, *file, *flips)?
            }
            Fault::ZeroJournalLength { bookie } => {
                self.damaged.insert(*bookie);
                self.zero_journal_length(*bookie)?
            }
            Fault::ClockJump { target, offset_ms } => {
                if !self.cluster.clocks {
                    anyhow::bail!("not applied: libfaketime is not installed (Debian's faketime)");
                }
                // The jump out keeps the resolved leader; the jump back uses it.
                let keep = self.episode_leader.is_none();
                let t = self.resolve(*target, keep)?;
                let now = self.cluster.jump_clock(t, *offset_ms)?;
                format!("{}'s wall clock moved {offset_ms:+} ms (now {now:+} ms)", name(t))
            }
        })
    }

    /// SIGKILL the bookie, zero the length field of a journal record that
    /// has another record after it, start it again; as
    /// [`Nemesis::flip_bits`] if it refuses to. The record is one of the
    /// newest segment's last [`ZEROED_AMONG_LAST`] (the seed picks): replay
    /// starts at the bookie's checkpoint (taken every second), so a record
    /// further back is usually behind it and its damage is never read.
    fn zero_journal_length(&mut self, bookie: u32) -> anyhow::Result<String> {
        let t = Target::Bookie(bookie);
        self.cluster.kill(t)?;
        // The records of each segment that have another after it, as the
        // storage crate finds them (a version 4 record's bytes are split by
        // the stamp that starts every sector: its length field's four bytes
        // are aimed at one by one).
        use quire_storage::journal::{inspect, segment};
        let mut candidates: Vec<(std::path::PathBuf, Vec<inspect::RecordSpan>)> = Vec::new();
        for path in self.cluster.bookie_files(bookie, FileKind::Journal) {
            let Some(id) = path.file_name().and_then(|n| n.to_str()).and_then(segment::parse_segment_name) else {
                continue;
            };
            let bytes = std::fs::read(&path).with_context(|| format!("read {}", path.display()))?;
            let mut spans = inspect::record_spans(&bytes, id);
            spans.pop();
            if !spans.is_empty() {
                candidates.push((path, spans));
            }
        }
        candidates.sort_by(|a, b| a.0.cmp(&b.0));
        let what = match candidates.pop() {
            None => format!("bookie-{bookie}: no journal record with another after it"),
            Some((path, spans)) => {
                let span = *self.rng.pick(&spans[spans.len().saturating_sub(ZEROED_AMONG_LAST)..]);
                let at: Vec<(u64, u8)> = (0..4).map(|i| (span.file_offset(i), 0)).collect();
                damage_in_place(&path, &at)?;
                format!(
                    "zeroed the length of the record at {} of {} ({} records in the segment have another after it)",
                    span.file_offset(0),
                    path.display(),
                    spans.len()
                )
            }
        };
        self.start_or_replace(bookie, what)
    }

    /// Starts a bookie stopped for damage (`what`). One that refuses its
    /// damaged disk is replaced by an empty one (what an operator does with
    /// a disk that lost data), and that is reported as a finding.
    fn start_or_replace(&mut self, bookie: u32, what: String) -> anyhow::Result<String> {
        let t = Target::Bookie(bookie);
        if let Err(e) = self.cluster.start(t) {
            let finding = format!("bookie-{bookie} did not start after {what}: {e:#}; replaced by an empty bookie");
            self.findings.push(finding.clone());
            self.cluster.kill(t)?;
            self.cluster.wipe_bookie(bookie)?;
            self.cluster.start(t)?;
            return Ok(finding);
        }
        Ok(what)
    }

    /// SIGKILL the bookie, flip bits at non-zero bytes of one of its files of
    /// `kind` (chosen by the seed), start it again. A bookie that refuses to
    /// start on the damaged disk is replaced by an empty one (what an
    /// operator does with a disk that lost data), and that is reported.
    fn flip_bits(&mut self, bookie: u32, kind: FileKind, flips: u32) -> anyhow::Result<String> {
        let t = Target::Bookie(bookie);
        self.cluster.kill(t)?;
        let files = self.cluster.bookie_files(bookie, kind);
        let mut what = format!("bookie-{bookie}: no {kind:?} file to damage");
        if !files.is_empty() {
            let path = self.rng.pick(&files).clone();
            let mut bytes = std::fs::read(&path).with_context(|| format!("read {}", path.display()))?;
            let written: Vec<usize> = (0..bytes.len()).filter(|&i| bytes[i] != 0).collect();
            let mut at = Vec::new();
            if !written.is_empty() {
                let mut changed = Vec::new();
                for _ in 0..flips {
                    let i = *self.rng.pick(&written);
                    let bit = self.rng.range(0, 8) as u8;
                    bytes[i] ^= 1 << bit;
                    at.push(i);
                    changed.push((i as u64, bytes[i]));
                }
                damage_in_place(&path, &changed)?;
            }
            what = format!("flipped {} bits of {} at {at:?}", at.len(), path.display());
        }
        self.start_or_replace(bookie, what)
    }
}

/// Writes each (offset, byte) of `at` into `path` in place and syncs it:
/// damage to a disk stays, through later power cuts too. (Rewriting the
/// whole file, as the nemesis once did, truncated it first: a power cut
/// before the next sync could then tear the file short, losing synced
/// data the cluster never put at risk.)
fn damage_in_place(path: &std::path::Path, at: &[(u64, u8)]) -> anyhow::Result<()> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(path).with_context(|| format!("open {}", path.display()))?;
    for (off, b) in at {
        f.write_all_at(&[*b], *off).with_context(|| format!("write {}", path.display()))?;
    }
    f.sync_all().with_context(|| format!("sync {}", path.display()))
}

#[cfg(test)]
mod tests {
    /// The damage check reads the bookie's log: each phrase it looks for
    /// must still be one the bookie writes, or the check sees nothing.
    #[test]
    fn the_damage_reports_are_phrases_the_bookie_logs() {
        let bookie = [
            include_str!("../../../../services/bookie/src/main.rs"),
            include_str!("../../../../services/bookie/src/integrity.rs"),
        ]
        .concat();
        for phrase in super::DAMAGE_REPORTS {
            assert!(bookie.contains(phrase), "the bookie no longer logs {phrase:?}");
        }
    }
}
