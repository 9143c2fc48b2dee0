//! quire-jepsen: runs quire's guarantees against a real cluster under a
//! seeded fault schedule and checks the history (issue FAULTS).
//!
//! 1. The cluster: 3 metadata replicas, 5 bookies, an auditor, 2
//!    replication workers and a gateway, each its own process in its own
//!    network namespace (needs root).
//! 2. Clients (library writers, an HTTP writer, readers, a recoverer; two
//!    log writers racing for one log, a cursor reader and a trimmer) run
//!    for the duration while the nemesis applies the schedule of `--seed`.
//! 3. The finale: every fault undone, every ledger recovered and read back,
//!    copies counted until autorecovery restored Qw of each entry.
//! 4. The checker judges the history (`history.jsonl` in the run's folder);
//!    exit status 1 when a guarantee broke.
//!
//! `make jepsen SEED=7 DURATION=300`; a failing run is re-run by its seed.

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod cluster;
mod finale;
mod http;
mod logs;
mod nemesis;
mod workload;

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use quire_client::{Client, ClientOptions};
use quire_faults::{check, schedule, shortfalls, unapplied_kinds, Floors, History, Timing, Topology};
use quire_metaclient::{MetaClient, MetaClientOptions};
use quire_proto::Role;
use quire_rpc::{Credentials, RpcClient, TlsFiles};

#[derive(Debug, Parser)]
#[command(name = "quire-jepsen", about = "quire under a seeded fault schedule, checked")]
struct Args {
    /// The schedule's seed (and the clients').
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// How long faults are injected, in seconds.
    #[arg(long, default_value_t = 120)]
    duration_secs: u64,
    /// Where the run's data, logs and history go (default: a new folder in /tmp).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Keep the run's folder even when every check passed.
    #[arg(long)]
    keep: bool,
    /// Writers through the client library.
    #[arg(long, default_value_t = 3)]
    writers: u32,
    /// Readers.
    #[arg(long, default_value_t = 2)]
    readers: u32,
    /// Each library writer's pause between adds, in milliseconds.
    #[arg(long, default_value_t = 5)]
    add_interval_ms: u64,
    /// How long the finale waits for recovery and for Qw copies, in seconds.
    #[arg(long, default_value_t = 180)]
    finale_secs: u64,
    /// Journal damage only flips bits, never zeroes a record's length: each
    /// seed's schedule as it was before that fault existed (to replay the
    /// findings docs/faults.md recorded then).
    #[arg(long)]
    no_zeroed_lengths: bool,
    /// No power cuts: each seed's schedule as it was before they existed.
    #[arg(long)]
    no_power_loss: bool,
    /// The negative control: metadata replicas and bookies run under
    /// eatmydata (every fsync a no-op), so a power cut loses acknowledged
    /// data, and the run must fail (docs/faults.md).
    #[arg(long)]
    eatmydata: bool,
    /// Print the schedule and exit.
    #[arg(long)]
    dry_run: bool,
}

/// How long client tasks have to finish what they have in flight once told
/// to stop (an add times out after 5 s, a recovery's reads after 3 s each).
const CLIENT_STOP: Duration = Duration::from_secs(60);

const TOPOLOGY: Topology = Topology { bookies: 5, metadata: 3, workers: 2, auditors: 1, gateways: 1 };

fn client(certs: &std::path::Path, metadata: Vec<String>) -> anyhow::Result<Client> {
    let creds = Credentials::load(&TlsFiles::in_dir(certs, Role::Client, "1"))?;
    let rpc = RpcClient::new(&creds, quire_rpc::ClientOptions::default())?;
    let meta = Arc::new(MetaClient::new(rpc.clone(), metadata, MetaClientOptions::default()));
    let opts = ClientOptions {
        add_timeout: Duration::from_secs(5),
        ensemble_change_deadline: Duration::from_secs(15),
        read_timeout: Duration::from_secs(3),
        ..ClientOptions::default()
    };
    Ok(Client::new(rpc, meta, opts))
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let duration_ms = args.duration_secs * 1000;
    let timing =
        Timing { zeroed_lengths: !args.no_zeroed_lengths, power_loss: !args.no_power_loss, ..Timing::default() };
    let steps = schedule(args.seed, duration_ms, TOPOLOGY, timing);
    if args.dry_run {
        for s in &steps {
            println!("{}", serde_json::to_string(s)?);
        }
        return Ok(());
    }
    let dir = match &args.dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("quire-jepsen-{}-{}", args.seed, std::process::id())),
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    std::fs::write(
        dir.join("schedule.jsonl"),
        steps.iter().map(|s| serde_json::to_string(s).expect("json") + "\n").collect::<String>(),
    )?;
    eprintln!(
        "quire-jepsen: seed {} for {} s, {} steps, in {}",
        args.seed,
        args.duration_secs,
        steps.len(),
        dir.display()
    );

    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let cluster = cluster::Cluster::launch(&dir, TOPOLOGY, args.eatmydata)?;
    if !cluster.clocks && steps.iter().any(|s| matches!(s.fault, quire_faults::Fault::ClockJump { .. })) {
        // A fault not applied is a fault not tested: never a pass.
        anyhow::bail!("the schedule jumps clocks and libfaketime is not installed (Debian's faketime)");
    }
    // Interrupted (Ctrl-C, SIGTERM, a CI timeout): take the cluster down
    // with us; destructors do not run on a signal.
    let prefix = cluster.lab.prefix().to_string();
    rt.spawn(async move {
        let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) else { return };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        eprintln!("quire-jepsen: interrupted; removing the cluster");
        quire_faults::lab::Lab::teardown(&prefix);
        std::process::exit(130);
    });
    let certs = cluster.certs.clone();
    let metadata = cluster.metadata_addrs();
    let http_addr = cluster.http_addr(1)?;
    let _guard = rt.enter();
    let c = client(&certs, metadata.clone())?;
    rt.block_on(async {
        let bookies =
            c.meta().wait_for_registry(Duration::from_secs(30), |b| b.len() >= TOPOLOGY.bookies as usize).await;
        anyhow::ensure!(matches!(bookies, Ok(Some(_))), "the bookies did not all register");
        Ok(())
    })?;

    let history = History::create(&dir.join("history.jsonl"))?;
    let t0 = Instant::now();
    let sh = Arc::new(workload::Shared::new(history, t0));
    let mut tasks = Vec::new();
    for w in 0..args.writers {
        let seed = args.seed.wrapping_add(100 + u64::from(w));
        let pace = Duration::from_millis(args.add_interval_ms);
        tasks.push(rt.spawn(workload::writer(1 + w, c.clone(), sh.clone(), seed, pace)));
    }
    tasks.push(rt.spawn(workload::http_writer(50, http_addr.clone(), sh.clone(), args.seed.wrapping_add(150))));
    for r in 0..args.readers {
        tasks.push(rt.spawn(workload::reader(
            100 + r,
            c.clone(),
            sh.clone(),
            args.seed.wrapping_add(200 + u64::from(r)),
        )));
    }
    let second = client(&certs, metadata.clone())?;
    let recoverers = [c.clone(), second];
    tasks.push(rt.spawn(workload::recoverer(200, recoverers, http_addr, sh.clone(), args.seed.wrapping_add(300))));
    tasks.push(rt.spawn(workload::seal_watcher(300, c.clone(), sh.clone())));
    // The log workload: two writers racing for one log, a cursor reader,
    // a trimmer.
    rt.block_on(logs::setup(399, &c, &sh, Duration::from_secs(60)))?;
    for w in 0..2u32 {
        let pace = Duration::from_millis(args.add_interval_ms);
        let seed = args.seed.wrapping_add(400 + u64::from(w));
        tasks.push(rt.spawn(logs::writer(400 + w, c.clone(), sh.clone(), seed, pace)));
    }
    tasks.push(rt.spawn(logs::reader(410, c.clone(), sh.clone())));
    tasks.push(rt.spawn(logs::trimmer(420, c.clone(), sh.clone(), args.seed.wrapping_add(420))));

    // The nemesis on its own thread, with its own metadata client.
    let nem_rpc = RpcClient::new(
        &Credentials::load(&TlsFiles::in_dir(&certs, Role::Admin, "1"))?,
        quire_rpc::ClientOptions::default(),
    )?;
    let nem_meta = Arc::new(MetaClient::new(nem_rpc.clone(), metadata, MetaClientOptions::default()));
    let mut nem = nemesis::Nemesis::new(cluster, nem_meta, nem_rpc, rt.handle().clone(), args.seed)?;
    let progress = {
        let sh = sh.clone();
        rt.spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(10)).await;
                eprintln!(
                    "[{:>7.1}s] {} operations recorded",
                    sh.t0.elapsed().as_secs_f64(),
                    sh.ops.load(Ordering::Relaxed)
                );
            }
        })
    };
    let steps_for_nemesis = steps.clone();
    let nem = std::thread::spawn(move || {
        nem.run(&steps_for_nemesis, t0);
        nem
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the nemesis thread panicked"))?;

    // The finale: clients stop, everything runs, nothing is faulty. A
    // client that panicked or never stopped is a failure of the run: its
    // operations are missing from the history.
    sh.stop.store(true, Ordering::Relaxed);
    let mut failures: Vec<String> = Vec::new();
    rt.block_on(async {
        for (i, t) in tasks.into_iter().enumerate() {
            match tokio::time::timeout(CLIENT_STOP, t).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => failures.push(format!("client task {i} failed: {e}")),
                Err(_) => {
                    failures.push(format!("client task {i} still running {} s after the stop", CLIENT_STOP.as_secs()))
                }
            }
        }
    });
    let mut nem = nem;
    nem.cluster.lab.heal()?;
    for t in nem.cluster.targets() {
        if let quire_faults::Target::Bookie(b) = t {
            nem.cluster.set_disk_delay(b, 0)?;
        }
        if !nem.cluster.is_running(t) {
            // One that cannot start is a failure of the run, checked as far
            // as it goes (the negative control's storage nodes may not).
            if let Err(e) = nem.cluster.start(t) {
                failures.push(format!("{} did not start for the finale: {e:#}", cluster::name(t)));
            }
        }
    }
    eprintln!("[{:>7.1}s] finale: recovering and reading every ledger", t0.elapsed().as_secs_f64());
    let finale = Duration::from_secs(args.finale_secs);
    let (ledgers, unrecovered) = rt.block_on(finale::read_back(&c, &sh, finale));
    eprintln!(
        "[{:>7.1}s] finale: {} ledgers read back, {} not; counting copies",
        t0.elapsed().as_secs_f64(),
        ledgers.len(),
        unrecovered.len()
    );
    let copies = rt.block_on(finale::replicas(&c, &sh, &ledgers, finale));
    let log_final = rt.block_on(logs::read_back(430, &c, &sh, finale));
    eprintln!("[{:>7.1}s] finale: log {}: {:?} records read back", t0.elapsed().as_secs_f64(), logs::LOG, log_final);
    let short = copies.short;
    // Power cuts or not, the metadata replicas hold one state.
    let converged = nem.metadata_converged(Duration::from_secs(60));
    eprintln!("[{:>7.1}s] finale: {}", t0.elapsed().as_secs_f64(), converged.as_ref().unwrap_or_else(|e| e));
    progress.abort();

    let events = sh.history.events();
    let report = check(&events);
    // Nothing passes by being skipped: every ledger is read back and its
    // copies counted, every fault of the schedule applied, and the run did
    // at least its floors of each operation.
    for (id, e) in &unrecovered {
        failures.push(format!("ledger {id} never recovered and read back: {e}"));
    }
    if let Err(e) = &log_final {
        failures.push(format!("log {} never read back: {e}", logs::LOG));
    }
    if let Err(e) = converged {
        failures.push(e);
    }
    for (id, e) in &copies.uncounted {
        failures.push(format!("ledger {id}'s copies were never counted: {e}"));
    }
    failures.extend(nem.failures.iter().map(|f| format!("nemesis: {f}")));
    for kind in unapplied_kinds(&steps, &nem.applied) {
        failures.push(format!("the schedule's \"{kind}\" faults were never applied"));
    }
    failures.extend(shortfalls(&report, &Floors::for_run(args.duration_secs)));
    let mut summary = String::new();
    summary.push_str(&format!(
        "seed {}: {} events; {} ledgers created ({} creations failed), {} acknowledged adds, {} unknown, {} reads ({} absent), {} recoveries ({} with their fence moment), {} closes seen, {} ledgers read back ({} never), {} short of Qw copies\n",
        args.seed,
        events.len(),
        report.creates,
        report.failed_creates,
        report.acked_adds,
        report.unknown_adds,
        report.reads,
        report.absent_reads,
        report.recoveries,
        report.fence_times,
        report.closes_seen,
        report.ledgers_final,
        unrecovered.len(),
        short
    ));
    summary.push_str(&format!(
        "  log {}: {} takeovers, {} acknowledged appends ({} unknown; conditional: {} acknowledged, {} refused; {} atomic batches acknowledged), {} records read at the cursor, {} trims, {} records read back\n",
        logs::LOG,
        report.logs.takeovers,
        report.logs.acked_appends,
        report.logs.unknown_appends,
        report.logs.conditional_acked,
        report.logs.conditional_refused,
        report.logs.batches_acked,
        report.logs.records_read,
        report.logs.trims,
        report.logs.records_final
    ));
    let applied: Vec<String> = nem.applied.iter().map(|(k, n)| format!("{k} {n}")).collect();
    summary.push_str(&format!("  faults applied: {}\n", applied.join(", ")));
    for f in &nem.findings {
        summary.push_str(&format!("  nemesis: {f}\n"));
    }
    for f in &failures {
        summary.push_str(&format!("  RUN FAILED: {f}\n"));
    }
    for v in &report.violations {
        summary.push_str(&format!("  VIOLATION {v:?}\n"));
    }
    std::fs::write(dir.join("report.txt"), &summary)?;
    print!("{summary}");
    nem.cluster.stop_all();
    drop(nem);
    if report.ok() && failures.is_empty() {
        println!("quire-jepsen: every guarantee held (seed {})", args.seed);
        if !args.keep && args.dir.is_none() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        Ok(())
    } else {
        println!(
            "quire-jepsen: {} violations, {} failures of the run; the run is kept in {}",
            report.violations.len(),
            failures.len(),
            dir.display()
        );
        std::process::exit(1);
    }
}
