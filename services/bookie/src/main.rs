//! `quire-bookie`: the quire storage node. Journal (group-committed fsync),
//! entry logs and a sled index (crate quire-storage), served over QUIC with
//! mutual TLS.
//!
//! Runs in static mode: it serves its address to whoever is configured to
//! reach it. Registration with the metadata service (leases, the cookie's
//! ownership record) arrives with the metadata service.

#[global_allocator]
static ALLOC: quire_runtime::Allocator = quire_runtime::Allocator;

mod gc;
mod integrity;
mod metrics;
mod registration;
mod service;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use quire_proto::Role;
use quire_rpc::server::ServerOptions;
use quire_runtime::{logging, new_instance_id, CommonArgs, RunningService};
use quire_storage::disk::DiskGuard;
use quire_storage::journal::GroupCommitPolicy;
use quire_storage::{cookie, Store, StoreConfig};

use crate::service::{BookieIdentity, BookieService};

/// The quire storage node.
#[derive(Debug, Parser)]
#[command(name = "quire-bookie", version)]
struct Args {
    #[command(flatten)]
    common: CommonArgs,

    /// UDP address the QUIC server binds.
    #[arg(long, env = "QUIRE_LISTEN", default_value = "127.0.0.1:3181")]
    listen: SocketAddr,

    /// Data directory; the journal and ledger directories default to
    /// subdirectories of it. `{id}` in it (and in the two below) is replaced
    /// by the bookie id (replicas with --id-slot-dir sharing one volume).
    #[arg(long, env = "QUIRE_DATA_DIR", default_value = "data/bookie")]
    data_dir: PathBuf,

    /// Journal directory (put it on its own device for the lowest add latency).
    #[arg(long, env = "QUIRE_JOURNAL_DIR")]
    journal_dir: Option<PathBuf>,

    /// Ledger directory: entry logs and the index.
    #[arg(long, env = "QUIRE_LEDGER_DIR")]
    ledger_dir: Option<PathBuf>,

    /// Start as a new bookie instance on directories that hold another cookie
    /// or none (after a disk replacement). Existing data is not trusted.
    /// Deliberately a flag only, with no QUIRE_* variable: a variable left in
    /// a deployment would start a new instance at every restart.
    #[arg(long)]
    format: bool,

    /// Metadata replicas (host:port, comma-separated). With them the bookie
    /// registers its address, rack and instance id under a lease and keeps it
    /// renewed; without them it runs in static mode.
    #[arg(long, env = "QUIRE_METADATA", value_delimiter = ',')]
    metadata: Vec<String>,

    /// The address clients should use (defaults to --listen; required when
    /// that is a wildcard). `auto`: what this host's name resolves to, with
    /// the port served (containers).
    #[arg(long, env = "QUIRE_ADVERTISE_ADDR")]
    advertise_addr: Option<String>,

    /// Registration lease, in milliseconds; renewed every third of it.
    #[arg(long, env = "QUIRE_LEASE_MS", default_value_t = 10_000)]
    lease_ms: u32,

    /// Rack (or zone) for placement policies.
    #[arg(long, env = "QUIRE_RACK", default_value = "default-rack")]
    rack: String,

    /// Longest a journal record waits for others to share its fdatasync, in microseconds.
    #[arg(long, env = "QUIRE_JOURNAL_MAX_WAIT_US", default_value_t = 2000)]
    journal_max_wait_us: u64,

    /// Sync as soon as the journal queue is empty (lowest latency at low load)
    /// instead of waiting up to --journal-max-wait-us for company.
    #[arg(long, env = "QUIRE_JOURNAL_FLUSH_WHEN_QUEUE_EMPTY", default_value_t = true, action = clap::ArgAction::Set)]
    journal_flush_when_queue_empty: bool,

    /// Largest group-commit batch, in KiB.
    #[arg(long, env = "QUIRE_JOURNAL_MAX_BATCH_KIB", default_value_t = 4096)]
    journal_max_batch_kib: usize,

    /// Journal segment size, in MiB. Smaller segments are retired sooner
    /// (a checkpoint frees whole segments only), so spares come into use
    /// sooner and the journal holds less disk.
    #[arg(long, env = "QUIRE_JOURNAL_SEGMENT_MIB", default_value_t = 64)]
    journal_segment_mib: u64,

    /// Checkpointed journal segments kept for reuse: a new segment
    /// overwrites a spare's blocks (already written, so its fdatasyncs
    /// commit no file metadata) instead of zero-filling a new file, which
    /// writes every journal byte twice. 0 deletes every retired segment.
    #[arg(long, env = "QUIRE_JOURNAL_SPARE_SEGMENTS", default_value_t = 2)]
    journal_spare_segments: usize,

    /// Write cache (journaled, not yet in an entry log), in MiB. Adds wait when it is full.
    #[arg(long, env = "QUIRE_WRITE_CACHE_MIB", default_value_t = 64)]
    write_cache_mib: usize,

    /// Longest between flushes of the write cache, in milliseconds.
    #[arg(long, env = "QUIRE_FLUSH_INTERVAL_MS", default_value_t = 1000)]
    flush_interval_ms: u64,

    /// Flush the write cache as soon as this much is waiting, in KiB.
    #[arg(long, env = "QUIRE_FLUSH_KIB", default_value_t = 4096)]
    flush_kib: usize,

    /// Entry log file size, in MiB.
    #[arg(long, env = "QUIRE_ENTRY_LOG_MIB", default_value_t = 1024)]
    entry_log_mib: u64,

    /// Newest entry-log MiB kept in the page cache after a flush; older,
    /// synced pages are dropped from it so that flushes recycle pages
    /// instead of taking fresh ones (read-ahead serves older reads). At
    /// least --entry-log-mib: the kernel keeps what it likes.
    #[arg(long, env = "QUIRE_ENTRY_LOG_CACHED_MIB", default_value_t = 0)]
    entry_log_cached_mib: u64,

    /// Read-ahead cache, in MiB.
    #[arg(long, env = "QUIRE_READ_CACHE_MIB", default_value_t = 16)]
    read_cache_mib: usize,

    /// The index's cache (sled's), in MiB. sled holds somewhat more than
    /// this at its fullest (docs/operations.md, memory).
    #[arg(long, env = "QUIRE_INDEX_CACHE_MIB", default_value_t = quire_storage::index::INDEX_CACHE_BYTES >> 20)]
    index_cache_mib: u64,

    /// Largest entry payload accepted, in bytes.
    #[arg(long, env = "QUIRE_MAX_ENTRY_BYTES", default_value_t = quire_proto::MAX_ENTRY_BYTES)]
    max_entry_bytes: usize,

    /// Long polls parked at once.
    #[arg(long, env = "QUIRE_MAX_PARKED_WAITS", default_value_t = 10_000)]
    max_parked_waits: usize,

    /// Turn read-only when a data filesystem is this full (fraction).
    #[arg(long, env = "QUIRE_DISK_HIGH_WATER", default_value_t = 0.95)]
    disk_high_water: f64,

    /// Turn writable again when back under this (fraction).
    #[arg(long, env = "QUIRE_DISK_LOW_WATER", default_value_t = 0.90)]
    disk_low_water: f64,

    /// How often to check disk usage, in milliseconds.
    #[arg(long, env = "QUIRE_DISK_CHECK_INTERVAL_MS", default_value_t = 5000)]
    disk_check_interval_ms: u64,

    /// The data-integrity check: `auto` when data this instance held is
    /// missing (or a check has not finished), `always` at every start (after
    /// restoring data from a backup, say), `never`.
    #[arg(long, env = "QUIRE_INTEGRITY_CHECK", value_enum, default_value_t = integrity::CheckMode::Auto)]
    integrity_check: integrity::CheckMode,

    /// During the integrity check, an open ledger in limbo whose LAC here has
    /// not moved for this long is marked for recovery (its writer looks
    /// gone, and it would stay in limbo until closed), in milliseconds.
    #[arg(long, env = "QUIRE_LIMBO_IDLE_WRITER_MS", default_value_t = 10_000)]
    limbo_idle_writer_ms: u64,

    /// Between garbage-collection passes (deleted ledgers, dead entry logs), in milliseconds.
    #[arg(long, env = "QUIRE_GC_INTERVAL_MS", default_value_t = 900_000)]
    gc_interval_ms: u64,

    /// Minor compaction: entry logs under this live fraction are compacted (0 turns it off).
    #[arg(long, env = "QUIRE_MINOR_COMPACTION_THRESHOLD", default_value_t = 0.2)]
    minor_compaction_threshold: f64,

    /// Between minor compactions, in milliseconds.
    #[arg(long, env = "QUIRE_MINOR_COMPACTION_INTERVAL_MS", default_value_t = 3_600_000)]
    minor_compaction_interval_ms: u64,

    /// Major compaction: entry logs under this live fraction are compacted (0 turns it off).
    #[arg(long, env = "QUIRE_MAJOR_COMPACTION_THRESHOLD", default_value_t = 0.8)]
    major_compaction_threshold: f64,

    /// Between major compactions, in milliseconds.
    #[arg(long, env = "QUIRE_MAJOR_COMPACTION_INTERVAL_MS", default_value_t = 86_400_000)]
    major_compaction_interval_ms: u64,

    /// Compaction's disk budget (bytes read plus written per second; 0: unlimited).
    #[arg(long, env = "QUIRE_COMPACTION_RATE_BYTES_PER_SEC", default_value_t = 16 * 1024 * 1024)]
    compaction_rate_bytes_per_sec: u64,

    /// Between checks for closed ledgers no ensemble names this bookie in
    /// any more (their copies moved away), in milliseconds; 0 turns it off.
    #[arg(long, env = "QUIRE_GC_NOT_HERE_INTERVAL_MS", default_value_t = 86_400_000)]
    gc_not_here_interval_ms: u64,

    /// Serve Prometheus metrics (GET /metrics) on this TCP address.
    #[arg(long, env = "QUIRE_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
}

fn main() -> anyhow::Result<()> {
    let mut args: Args = quire_runtime::config::parse()?;
    // Held for the life of the process: the id is this replica's while it runs.
    let _slot = args.common.claim_id()?;
    for (name, t) in [
        ("--minor-compaction-threshold", args.minor_compaction_threshold),
        ("--major-compaction-threshold", args.major_compaction_threshold),
    ] {
        anyhow::ensure!((0.0..=1.0).contains(&t), "{name} must be a fraction between 0 and 1, not {t}");
    }
    anyhow::ensure!(args.gc_interval_ms > 0, "--gc-interval-ms must be positive");
    anyhow::ensure!(
        args.disk_low_water <= args.disk_high_water,
        "--disk-low-water ({}) must not exceed --disk-high-water ({})",
        args.disk_low_water,
        args.disk_high_water
    );
    let telemetry = logging::init_from("quire-bookie", &args.common)?;
    let rt = args.common.runtime()?;
    let result = rt.block_on(run(args));
    telemetry.shutdown();
    result
}

async fn run(args: Args) -> anyhow::Result<()> {
    // `{id}` in a directory is this bookie's id (replicas sharing a volume).
    let expand = |p: &std::path::Path| quire_runtime::slot::expand(p, &args.common.id);
    let data_dir = expand(&args.data_dir);
    let journal_dir = args.journal_dir.as_deref().map(expand).unwrap_or_else(|| data_dir.join("journal"));
    let ledger_dir = args.ledger_dir.as_deref().map(expand).unwrap_or_else(|| data_dir.join("ledgers"));
    let creds = args.common.credentials(Role::Bookie)?;
    let bookie_id = creds.identity().id.clone();
    // Brand-new directories (formatted just now) hold nothing to lose.
    let fresh = !ledger_dir.join(cookie::COOKIE_FILE).exists();
    let meta_configured = !args.metadata.is_empty();
    let cookie = cookie::check_or_create(&bookie_id, &journal_dir, &ledger_dir, args.format, new_instance_id)
        .context("check the data directories' cookie")?;
    tracing::info!(bookie_id, instance_id = %cookie.instance_id, journal = %journal_dir.display(), ledgers = %ledger_dir.display(), "opening storage");

    let mut check = meta_configured && integrity::needs_check(&ledger_dir, fresh, args.integrity_check);
    if check {
        integrity::mark_pending(&ledger_dir).context("record the pending integrity check")?;
    }
    let mut config = StoreConfig::new(&journal_dir, &ledger_dir);
    config.journal.policy = GroupCommitPolicy {
        max_wait: Duration::from_micros(args.journal_max_wait_us),
        max_batch_bytes: args.journal_max_batch_kib * 1024,
        flush_when_queue_empty: args.journal_flush_when_queue_empty,
        ..GroupCommitPolicy::default()
    };
    config.journal.segment_bytes = args.journal_segment_mib * 1024 * 1024;
    config.journal.spare_segments = args.journal_spare_segments;
    config.write_cache_bytes = (args.write_cache_mib * 1024 * 1024).max(2 * args.max_entry_bytes);
    config.flush_interval = Duration::from_millis(args.flush_interval_ms);
    config.flush_bytes = args.flush_kib * 1024;
    config.entry_log_bytes = args.entry_log_mib * 1024 * 1024;
    config.entry_log_cached_bytes = Some(args.entry_log_cached_mib * 1024 * 1024);
    config.read_cache_bytes = args.read_cache_mib * 1024 * 1024;
    config.index_cache_bytes = args.index_cache_mib * 1024 * 1024;
    config.after_flush = Some(quire_runtime::release_freed_memory);
    config.max_entry_bytes = args.max_entry_bytes;
    config.max_parked_waits = args.max_parked_waits;
    // Journal damage is recorded as a pending check before the store
    // checkpoints past it (issue #19 item 3): a start that dies right after
    // still runs the check next time.
    if meta_configured && args.integrity_check != integrity::CheckMode::Never {
        config.damage_marker = Some(integrity::pending_marker(&ledger_dir));
    }
    let store = Arc::new(tokio::task::spawn_blocking(move || Store::open(config)).await?.context("open storage")?);
    // Damaged journal records were skipped: acknowledged entries may be gone
    // from this bookie. Same cure as lost data (unless checks are off).
    if store.journal_damaged() && meta_configured && args.integrity_check != integrity::CheckMode::Never && !check {
        // (The store wrote the pending marker before it checkpointed past the damage.)
        tracing::warn!("the journal was damaged: running the data-integrity check");
        check = true;
    } else if store.journal_damaged() && !check {
        // Static mode has no peers to refill from, and checks turned off
        // refill nothing: say so rather than serve on in silence.
        tracing::error!(
            metadata = meta_configured,
            integrity_check = ?args.integrity_check,
            "the journal was damaged: acknowledged entries may be missing from this bookie, and no integrity \
             check runs (it needs --metadata and --integrity-check other than never)"
        );
    }

    let me = BookieIdentity {
        bookie_id: bookie_id.clone(),
        instance_id: cookie.instance_id.clone(),
        rack: args.rack.clone(),
    };
    // Every client this bookie makes; SIGHUP gives them rotated credentials.
    let mut clients = Vec::new();
    let meta = if args.metadata.is_empty() {
        None
    } else {
        let rpc = quire_rpc::RpcClient::new(&creds, quire_rpc::ClientOptions::default())?;
        clients.push(rpc.clone());
        let meta = Arc::new(quire_metaclient::MetaClient::new(rpc, args.metadata.clone(), Default::default()));
        // Certificates revoked by the operator are refused from the moment this hears of them.
        let deny_meta = meta.clone();
        tokio::spawn(async move { deny_meta.follow_deny_list(quire_runtime::deny_list().clone()).await });
        Some(meta)
    };
    let draining = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // With data missing, absent entries are not evidence until the
    // integrity check has refilled them from peers (integrity.rs).
    let limbo = Arc::new(if check { integrity::Limbo::everything() } else { integrity::Limbo::none() });
    let (gc_tx, gc_rx) = tokio::sync::mpsc::channel(2);
    let service = Arc::new(BookieService::new(
        store.clone(),
        me,
        ledger_dir.clone(),
        meta.clone(),
        draining.clone(),
        limbo.clone(),
        gc_tx,
    ));
    let add_seconds = service.add_seconds();
    let mut svc = RunningService::start(
        Role::Bookie,
        &args.common,
        args.listen,
        cookie.instance_id.clone(),
        service,
        ServerOptions { max_frame_bytes: quire_proto::codec::MAX_FRAME_BYTES_DEFAULT, ..ServerOptions::default() },
    )?;
    tracing::info!(addr = %svc.server.local_addr(), bookie_id, "quire-bookie ready");

    let advertise = match &args.advertise_addr {
        Some(a) if a == "auto" => advertise_auto(svc.server.local_addr().port()).await?,
        Some(a) => a.clone(),
        None if args.listen.ip().is_unspecified() => {
            anyhow::bail!("--advertise-addr is required when --listen is a wildcard address")
        }
        None => svc.server.local_addr().to_string(),
    };
    let checker = match (&meta, check) {
        (Some(meta), true) => {
            let rpc = quire_rpc::RpcClient::new(&creds, quire_rpc::ClientOptions::default())?;
            clients.push(rpc.clone());
            let client = quire_client::Client::new(rpc, meta.clone(), quire_client::ClientOptions::default());
            Some(tokio::spawn(integrity::run(
                client,
                store.clone(),
                limbo.clone(),
                bookie_id.clone(),
                cookie.instance_id.clone(),
                ledger_dir.clone(),
                integrity::CheckOptions { idle_open_ledger: Duration::from_millis(args.limbo_idle_writer_ms) },
            )))
        }
        _ => None,
    };
    for c in clients {
        svc.reload_client_too(c);
    }
    let meta_for_gc = meta.clone();
    let registration = if let Some(meta) = meta {
        let me = registration::Registration {
            bookie_id: bookie_id.clone(),
            address: advertise,
            rack: args.rack.clone(),
            instance_id: cookie.instance_id.clone(),
            lease_ms: args.lease_ms,
            data_dir: ledger_dir.clone(),
        };
        Some(tokio::spawn(registration::keep_registered(meta, me, store.clone(), draining)))
    } else {
        tracing::info!("no --metadata given: static mode, not registered anywhere");
        None
    };
    let gc_config = gc::GcConfig {
        interval: Duration::from_millis(args.gc_interval_ms),
        minor_threshold: args.minor_compaction_threshold,
        minor_interval: Duration::from_millis(args.minor_compaction_interval_ms),
        major_threshold: args.major_compaction_threshold,
        major_interval: Duration::from_millis(args.major_compaction_interval_ms),
        rate_bytes_per_sec: args.compaction_rate_bytes_per_sec,
        not_here_interval: Duration::from_millis(args.gc_not_here_interval_ms),
    };
    let collector = gc::Collector {
        store: store.clone(),
        meta: meta_for_gc,
        me: bookie_id.clone(),
        limbo: limbo.clone(),
        config: gc_config,
    };
    let collector = tokio::spawn(collector.run(gc_rx));
    let metrics = match args.metrics_listen {
        Some(addr) => {
            let (l, bound) = quire_runtime::metrics::bind(addr).await.context("bind --metrics-listen")?;
            tracing::info!(%bound, "metrics on /metrics");
            let (s, adds) = (store.clone(), add_seconds.clone());
            let limbo = limbo.clone();
            let render: quire_runtime::metrics::Render = Arc::new(move || metrics::render(&s, &adds, &limbo));
            Some(tokio::spawn(quire_runtime::metrics::serve(l, render)))
        }
        None => None,
    };
    let guard = tokio::spawn(disk_guard(
        store.clone(),
        vec![journal_dir, ledger_dir.clone()],
        DiskGuard::new(args.disk_high_water, args.disk_low_water),
        Duration::from_millis(args.disk_check_interval_ms),
    ));
    let result = svc.run_until_signal().await;
    guard.abort();
    collector.abort();
    if let Some(m) = metrics {
        m.abort();
    }
    if let Some(c) = checker {
        c.abort();
    }
    if let Some(r) = registration {
        r.abort();
    }
    let j = store.journal_stats();
    let syncs = j.syncs.load(std::sync::atomic::Ordering::Relaxed).max(1);
    let records = j.records.load(std::sync::atomic::Ordering::Relaxed);
    tracing::info!(
        syncs,
        records,
        records_per_sync = records as f64 / syncs as f64,
        sync_us_mean = j.sync_us_total.load(std::sync::atomic::Ordering::Relaxed) / syncs,
        sync_us_max = j.sync_us_max.load(std::sync::atomic::Ordering::Relaxed),
        flushes = store.stats().flushes.load(std::sync::atomic::Ordering::Relaxed),
        "journal totals"
    );
    tokio::task::spawn_blocking(move || store.close()).await?;
    tracing::info!("storage closed");
    result
}

/// This host's own address: what its name resolves to (in a container, the
/// address Docker wrote into /etc/hosts), with the port served.
async fn advertise_auto(port: u16) -> anyhow::Result<String> {
    let host = rustix::system::uname().nodename().to_string_lossy().into_owned();
    let addr = tokio::net::lookup_host((host.as_str(), port))
        .await
        .with_context(|| format!("resolve this host's name {host:?} for --advertise-addr auto"))?
        .find(|a| !a.ip().is_loopback())
        .with_context(|| format!("this host's name {host:?} resolves only to loopback addresses"))?;
    Ok(addr.to_string())
}

/// Turns the store read-only when a data filesystem fills, and back.
async fn disk_guard(store: Arc<Store>, dirs: Vec<PathBuf>, mut guard: DiskGuard, every: Duration) {
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        let used = dirs
            .iter()
            .filter_map(|d| quire_storage::disk::usage(d).ok())
            .map(|u| u.used_fraction())
            .fold(0.0f64, f64::max);
        let was = guard.read_only();
        let now = guard.observe(used);
        if now != was {
            if now {
                tracing::warn!(used, high_water = guard.high_water, "disk nearly full: bookie is read-only");
                store.set_read_only(Some(format!("disk {:.1}% full", used * 100.0)));
            } else {
                tracing::info!(
                    used,
                    low_water = guard.low_water,
                    "disk usage back under the low-water mark: bookie is writable"
                );
                store.set_read_only(None);
            }
        }
    }
}
