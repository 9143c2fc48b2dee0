//! The cluster under test: every service as its own process in its own
//! network namespace ([`quire_faults::lab`]), with the hooks the nemesis
//! needs: stop and start any process, a per-bookie disk-delay file, a
//! per-process clock (libfaketime, wall clock only), the bookies' files,
//! and disks whose power can be cut: every metadata replica's data, and
//! each bookie's journal and ledger directories (two disks), live on
//! crashfs mounts ([`quire_crashfs`]), which forget at a cut what no fsync
//! made durable.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use quire_crashfs::{Crash, DataLoss, Mount, NameLoss};
use quire_faults::lab::Lab;
use quire_faults::{FileKind, Target, Topology};
use quire_pki::{init_dir, IssueOptions, LocalCluster};
use quire_proto::Role;
use quire_testkit::{bin_path, Process};

const METADATA_PORT: u16 = 7000;
const BOOKIE_PORT: u16 = 7100;
const AUDITOR_PORT: u16 = 7200;
const WORKER_PORT: u16 = 7300;
const GATEWAY_PORT: u16 = 7400;
const HTTP_PORT: u16 = 8080;

/// libfaketime's multithreaded build, as Debian's `faketime` package installs it.
const FAKETIME_LIB: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

/// Debian's eatmydata: fsync, fdatasync, sync_file_range and O_SYNC made
/// no-ops (the negative control: with it, a power cut must lose data).
pub const EATMYDATA_LIB: &str = "/usr/lib/x86_64-linux-gnu/libeatmydata.so";

/// One disk: a crashfs mount whose bytes live in `state`.
struct Disk {
    state: PathBuf,
    mnt: PathBuf,
    mount: Option<Mount>,
}

impl Disk {
    fn mount(state: PathBuf, mnt: PathBuf) -> anyhow::Result<Disk> {
        let mount = Mount::new(&state, &mnt).with_context(|| format!("mount crashfs at {}", mnt.display()))?;
        Ok(Disk { state, mnt, mount: Some(mount) })
    }
}

/// One process of the cluster.
pub struct Node {
    /// Its namespace's index in the lab.
    index: usize,
    proc: Option<Process>,
    generation: u32,
    clock_offset_ms: i64,
}

/// The running cluster.
pub struct Cluster {
    pub lab: Lab,
    pub dir: PathBuf,
    pub certs: PathBuf,
    pub topo: Topology,
    nodes: BTreeMap<Target, Node>,
    /// Whether processes run under libfaketime (clock jumps possible).
    pub clocks: bool,
    /// Every storage node's disks.
    disks: BTreeMap<Target, Vec<Disk>>,
    /// Metadata replicas and bookies run under eatmydata.
    eatmydata: bool,
}

impl Cluster {
    /// Creates the network, the certificates and the disks, and starts
    /// every process (`eatmydata`: the storage nodes' syncs made no-ops).
    pub fn launch(dir: &Path, topo: Topology, eatmydata: bool) -> anyhow::Result<Cluster> {
        let certs = dir.join("certs");
        let ca = init_dir(
            &certs,
            "jepsen",
            &LocalCluster { metadata: topo.metadata, bookies: topo.bookies },
            &IssueOptions::default(),
        )?;
        // init_dir issues one of each other service; the rest here.
        for (role, n) in
            [(Role::ReplicationWorker, topo.workers), (Role::Auditor, topo.auditors), (Role::Gateway, topo.gateways)]
        {
            for i in 2..=n {
                ca.issue(role, &i.to_string(), &IssueOptions::default())?.write(&certs, role, &i.to_string())?;
            }
        }
        let mut targets = Vec::new();
        targets.extend((1..=topo.metadata).map(Target::Metadata));
        targets.extend((1..=topo.bookies).map(Target::Bookie));
        targets.extend((1..=topo.auditors).map(Target::Auditor));
        targets.extend((1..=topo.workers).map(Target::Worker));
        targets.extend((1..=topo.gateways).map(Target::Gateway));
        let lab = Lab::create(targets.len()).context("create the network namespaces (needs root)")?;
        let nodes = targets
            .into_iter()
            .enumerate()
            .map(|(index, target)| (target, Node { index, proc: None, generation: 0, clock_offset_ms: 0 }))
            .collect();
        let clocks = Path::new(FAKETIME_LIB).exists();
        if eatmydata {
            anyhow::ensure!(Path::new(EATMYDATA_LIB).exists(), "{EATMYDATA_LIB} is missing (Debian's eatmydata)");
        }
        let mut c =
            Cluster { lab, dir: dir.to_path_buf(), certs, topo, nodes, clocks, disks: BTreeMap::new(), eatmydata };
        for t in c.nodes.keys().copied().collect::<Vec<_>>() {
            let disks = c.disk_paths(t).into_iter().map(|(s, m)| Disk::mount(s, m)).collect::<anyhow::Result<_>>()?;
            c.disks.insert(t, disks);
        }
        let all: Vec<Target> = c.nodes.keys().copied().collect();
        for t in all {
            c.set_clock_file(t, 0)?;
            c.start(t)?;
        }
        Ok(c)
    }

    fn node(&self, t: Target) -> anyhow::Result<&Node> {
        self.nodes.get(&t).with_context(|| format!("no {t:?} in this cluster"))
    }

    /// The address of `t`'s QUIC server.
    pub fn addr(&self, t: Target) -> anyhow::Result<String> {
        let ip = self.lab.ip(self.node(t)?.index);
        let port = match t {
            Target::Metadata(_) | Target::MetadataLeader => METADATA_PORT,
            Target::Bookie(_) => BOOKIE_PORT,
            Target::Auditor(_) => AUDITOR_PORT,
            Target::Worker(_) => WORKER_PORT,
            Target::Gateway(_) => GATEWAY_PORT,
        };
        Ok(format!("{ip}:{port}"))
    }

    /// A node's address in the lab.
    pub fn ip(&self, t: Target) -> anyhow::Result<std::net::Ipv4Addr> {
        Ok(self.lab.ip(self.node(t)?.index))
    }

    /// Gateway `g`'s HTTP address.
    pub fn http_addr(&self, g: u32) -> anyhow::Result<String> {
        Ok(format!("{}:{HTTP_PORT}", self.ip(Target::Gateway(g))?))
    }

    /// Every metadata replica's address.
    pub fn metadata_addrs(&self) -> Vec<String> {
        (1..=self.topo.metadata).map(|i| self.addr(Target::Metadata(i)).expect("replica exists")).collect()
    }

    /// Every target, in a stable order.
    pub fn targets(&self) -> Vec<Target> {
        self.nodes.keys().copied().collect()
    }

    /// The namespace index of `t` (for the lab's rules).
    pub fn index(&self, t: Target) -> anyhow::Result<usize> {
        Ok(self.node(t)?.index)
    }

    pub fn is_running(&self, t: Target) -> bool {
        self.nodes.get(&t).is_some_and(|n| n.proc.is_some())
    }

    /// A bookie's data directory.
    pub fn bookie_dir(&self, b: u32) -> PathBuf {
        self.dir.join(format!("bookie-{b}"))
    }

    /// A storage node's disks: (backing state, mount point) each. A bookie
    /// has two (journal, ledgers) inside its data directory, a metadata
    /// replica one, its data directory's parent; other processes none.
    fn disk_paths(&self, t: Target) -> Vec<(PathBuf, PathBuf)> {
        let state = |n: &str| self.dir.join("disks").join(n);
        match t {
            Target::Bookie(b) => vec![
                (state(&format!("bookie-{b}-journal")), self.bookie_dir(b).join("journal-disk")),
                (state(&format!("bookie-{b}-ledgers")), self.bookie_dir(b).join("ledger-disk")),
            ],
            Target::Metadata(i) => vec![(state(&format!("metadata-{i}")), self.dir.join(format!("metadata-{i}")))],
            _ => Vec::new(),
        }
    }

    /// The log file of `t`'s current (or last) process.
    pub fn log_path(&self, t: Target) -> anyhow::Result<PathBuf> {
        Ok(self.dir.join(format!("{}-{}.log", name(t), self.node(t)?.generation)))
    }

    /// The power of `targets` goes at one instant (every disk frozen before
    /// any process is killed), then their disks lose what no fsync made
    /// durable (each disk a way of losing it chosen by `seed`) and are
    /// mounted again. The processes stay down: [`Cluster::start`] them.
    pub fn power_cut(&mut self, targets: &[Target], seed: u64) -> anyhow::Result<String> {
        for t in targets {
            for d in self.disks.get(t).into_iter().flatten() {
                if let Some(m) = &d.mount {
                    m.freeze();
                }
            }
        }
        for t in targets {
            self.kill(*t)?;
        }
        let mut said = Vec::new();
        let mut k = 0u64;
        for t in targets {
            let mut modes = Vec::new();
            for d in self.disks.get_mut(t).into_iter().flatten() {
                let mix = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(k);
                k += 1;
                let data = [DataLoss::Drop, DataLoss::Torn, DataLoss::Prefix][(mix % 3) as usize];
                let names = [NameLoss::All, NameLoss::Prefix][((mix / 3) % 2) as usize];
                let mount = d.mount.take().context("a disk without its mount")?;
                let report = mount.crash(Crash { seed: mix, data, names })?;
                d.mount = Some(Mount::new(&d.state, &d.mnt).with_context(|| format!("mount {}", d.mnt.display()))?);
                modes.push(format!(
                    "{data:?}/{names:?}: {} writes and {} names undone",
                    report.writes_undone, report.names_undone
                ));
            }
            said.push(format!("{} ({})", name(*t), modes.join("; ")));
        }
        Ok(said.join(", "))
    }

    fn disk_delay_file(&self, b: u32) -> PathBuf {
        self.dir.join(format!("bookie-{b}.disk-delay"))
    }

    fn clock_file(&self, t: Target) -> PathBuf {
        self.dir.join(format!("{}.clock", name(t)))
    }

    fn args(&self, t: Target, ready: &Path) -> anyhow::Result<Vec<String>> {
        let s = |p: &Path| p.to_str().map(str::to_string).context("a non-UTF-8 path");
        let id = match t {
            Target::Metadata(i) | Target::Bookie(i) | Target::Auditor(i) | Target::Worker(i) | Target::Gateway(i) => i,
            Target::MetadataLeader => anyhow::bail!("MetadataLeader is resolved before it reaches the cluster"),
        };
        let mut a: Vec<String> = vec![
            "--certs-dir".into(),
            s(&self.certs)?,
            "--id".into(),
            id.to_string(),
            "--listen".into(),
            self.addr(t)?,
            "--ready-file".into(),
            s(ready)?,
        ];
        let metadata = self.metadata_addrs().join(",");
        match t {
            Target::Metadata(_) => {
                let peers: Vec<String> = (1..=self.topo.metadata)
                    .map(|i| format!("{i}={}", self.addr(Target::Metadata(i)).expect("replica")))
                    .collect();
                a.extend(["--data-dir".into(), s(&self.dir.join(format!("metadata-{id}")).join("data"))?]);
                a.extend(["--peers".into(), peers.join(",")]);
                a.extend(["--heartbeat-ms".into(), "100".into(), "--election-timeout-ms".into(), "600".into()]);
            }
            Target::Bookie(b) => {
                a.extend(["--data-dir".into(), s(&self.bookie_dir(b))?]);
                a.extend(["--journal-dir".into(), s(&self.bookie_dir(b).join("journal-disk").join("journal"))?]);
                a.extend(["--ledger-dir".into(), s(&self.bookie_dir(b).join("ledger-disk").join("ledgers"))?]);
                a.extend(["--metadata".into(), metadata, "--rack".into(), format!("rack-{b}")]);
                a.extend(["--lease-ms".into(), "3000".into(), "--limbo-idle-writer-ms".into(), "5000".into()]);
            }
            Target::Auditor(_) => {
                a.extend(["--metadata".into(), metadata]);
                a.extend(["--audit-interval-ms".into(), "1000".into(), "--lost-bookie-grace-ms".into(), "4000".into()]);
                a.extend(["--replica-check-interval-ms".into(), "5000".into()]);
            }
            Target::Worker(_) => {
                a.extend(["--metadata".into(), metadata]);
                a.extend(["--open-ledger-grace-ms".into(), "5000".into(), "--claim-lease-ms".into(), "6000".into()]);
                a.extend(["--poll-ms".into(), "300".into()]);
            }
            Target::Gateway(g) => {
                a.extend(["--metadata".into(), metadata]);
                a.extend(["--http-listen".into(), self.http_addr(g)?]);
                a.extend(["--request-timeout-ms".into(), "10000".into()]);
            }
            Target::MetadataLeader => unreachable!("rejected above"),
        }
        Ok(a)
    }

    fn env(&self, t: Target) -> Vec<(String, String)> {
        let mut env = vec![("RUST_LOG".to_string(), "info".to_string())];
        if let Target::Bookie(b) = t {
            env.push(("QUIRE_DISK_DELAY_FILE".into(), self.disk_delay_file(b).display().to_string()));
        }
        let mut preload = Vec::new();
        if self.eatmydata && matches!(t, Target::Bookie(_) | Target::Metadata(_)) {
            preload.push(EATMYDATA_LIB);
        }
        if self.clocks {
            // Wall clock only: a stepped clock (NTP, an operator) moves
            // CLOCK_REALTIME; CLOCK_MONOTONIC never jumps.
            preload.push(FAKETIME_LIB);
            env.push(("FAKETIME_TIMESTAMP_FILE".into(), self.clock_file(t).display().to_string()));
            env.push(("FAKETIME_CACHE_DURATION".into(), "1".into()));
            env.push(("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()));
        }
        if !preload.is_empty() {
            env.push(("LD_PRELOAD".into(), preload.join(" ")));
        }
        env
    }

    /// Starts `t` (again) on its data, and waits until it serves.
    pub fn start(&mut self, t: Target) -> anyhow::Result<()> {
        if self.is_running(t) {
            return Ok(());
        }
        let node = self.node(t)?;
        let generation = node.generation + 1;
        let index = node.index;
        let ready = self.dir.join(format!("{}-{generation}.ready", name(t)));
        let mut argv: Vec<String> = self.lab.exec_prefix(index);
        argv.push(bin_path(binary(t)).display().to_string());
        argv.extend(self.args(t, &ready)?);
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let log_name = format!("{}-{generation}", name(t));
        let env = self.env(t);
        let mut p = Process::spawn_with_env(&log_name, Path::new("ip"), &argv, &env, &self.dir)?;
        p.wait_ready(&ready, Duration::from_secs(60)).with_context(|| format!("start {}", name(t)))?;
        let node = self.nodes.get_mut(&t).expect("checked above");
        node.generation = generation;
        node.proc = Some(p);
        Ok(())
    }

    /// SIGKILL: a crash.
    pub fn kill(&mut self, t: Target) -> anyhow::Result<()> {
        let node = self.nodes.get_mut(&t).with_context(|| format!("no {t:?}"))?;
        if let Some(mut p) = node.proc.take() {
            p.kill()?;
        }
        Ok(())
    }

    /// Every bookie sync of `b` waits `ms` first (0: none).
    pub fn set_disk_delay(&self, b: u32, ms: u32) -> anyhow::Result<()> {
        write_atomically(&self.disk_delay_file(b), &ms.to_string())
    }

    /// Moves `t`'s wall clock by `by_ms` (cumulative), seen within a second.
    pub fn jump_clock(&mut self, t: Target, by_ms: i64) -> anyhow::Result<i64> {
        let node = self.nodes.get_mut(&t).with_context(|| format!("no {t:?}"))?;
        node.clock_offset_ms += by_ms;
        let offset = node.clock_offset_ms;
        self.set_clock_file(t, offset)?;
        Ok(offset)
    }

    fn set_clock_file(&self, t: Target, offset_ms: i64) -> anyhow::Result<()> {
        // libfaketime's relative form: "+N" / "-N" seconds (fractions allowed).
        let secs = offset_ms as f64 / 1000.0;
        write_atomically(&self.clock_file(t), &format!("{secs:+.3}"))
    }

    /// Replaces bookie `b`'s disks by new, empty ones (it must be stopped):
    /// seed 003's new, empty machine at the old address.
    pub fn wipe_bookie(&mut self, b: u32) -> anyhow::Result<()> {
        anyhow::ensure!(!self.is_running(Target::Bookie(b)), "bookie {b} still runs");
        let old = self.disks.remove(&Target::Bookie(b)).unwrap_or_default();
        for mut d in old {
            if let Some(m) = d.mount.take() {
                m.unmount().with_context(|| format!("unmount {}", d.mnt.display()))?;
            }
            std::fs::remove_dir_all(&d.state).with_context(|| format!("remove {}", d.state.display()))?;
        }
        let dir = self.bookie_dir(b);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("remove {}", dir.display()))?;
        }
        let disks = self
            .disk_paths(Target::Bookie(b))
            .into_iter()
            .map(|(s, m)| Disk::mount(s, m))
            .collect::<anyhow::Result<_>>()?;
        self.disks.insert(Target::Bookie(b), disks);
        Ok(())
    }

    /// Bookie `b`'s files of `kind` (journal segments or entry logs).
    pub fn bookie_files(&self, b: u32, kind: FileKind) -> Vec<PathBuf> {
        let prefix = match kind {
            FileKind::Journal => "journal-",
            FileKind::EntryLog => "entrylog-",
        };
        let mut out = Vec::new();
        let mut stack = vec![self.bookie_dir(b)];
        while let Some(d) = stack.pop() {
            let Ok(rd) = std::fs::read_dir(&d) else { continue };
            for e in rd.flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else if p
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(prefix) && n.ends_with(".log"))
                {
                    out.push(p);
                }
            }
        }
        out.sort();
        out
    }

    /// Stops everything (SIGKILL), for the end of a run.
    pub fn stop_all(&mut self) {
        for n in self.nodes.values_mut() {
            if let Some(mut p) = n.proc.take() {
                let _ = p.kill();
            }
        }
    }
}

fn write_atomically(path: &Path, content: &str) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, content).with_context(|| format!("write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("rename to {}", path.display()))?;
    Ok(())
}

/// A target's name in logs and file names.
pub fn name(t: Target) -> String {
    match t {
        Target::Bookie(i) => format!("bookie-{i}"),
        Target::Metadata(i) => format!("metadata-{i}"),
        Target::MetadataLeader => "metadata-leader".into(),
        Target::Worker(i) => format!("worker-{i}"),
        Target::Auditor(i) => format!("auditor-{i}"),
        Target::Gateway(i) => format!("gateway-{i}"),
    }
}

fn binary(t: Target) -> &'static str {
    match t {
        Target::Bookie(_) => "quire-bookie",
        Target::Metadata(_) | Target::MetadataLeader => "quire-metadata",
        Target::Worker(_) => "quire-replication-worker",
        Target::Auditor(_) => "quire-auditor",
        Target::Gateway(_) => "quire-gateway",
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Processes first: a disk is unmounted (its mount dropped) after.
        self.stop_all();
    }
}
