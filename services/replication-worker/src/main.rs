//! `quire-replication-worker`: restores the copies the auditor found missing
//! (BookKeeper's ReplicationWorker). Any number may run; each claims one
//! marked ledger at a time under a lease in the metadata service, copies the
//! missing fragments from intact replicas to bookies chosen by the placement
//! policy (or back into a bookie's holes), records the new ensembles by
//! compare-and-set, and clears the mark. Copying is throttled in bytes/s.

#[global_allocator]
static ALLOC: quire_runtime::Allocator = quire_runtime::Allocator;

mod worker;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use quire_client::{Client, ClientOptions, Throttle};
use quire_metaclient::{MetaClient, MetaClientOptions};
use quire_proto::Role;
use quire_rpc::server::{ControlOnly, ServerOptions};
use quire_runtime::{logging, new_instance_id, CommonArgs, RunningService};

/// The quire replication worker.
#[derive(Debug, Parser)]
#[command(name = "quire-replication-worker", version)]
struct Args {
    #[command(flatten)]
    common: CommonArgs,

    /// UDP address the QUIC (control) server binds.
    #[arg(long, env = "QUIRE_LISTEN", default_value = "127.0.0.1:5281")]
    listen: SocketAddr,

    /// Metadata replicas (host:port, comma-separated). Required (checked
    /// after the config file is read, so that the file may give it).
    #[arg(long, env = "QUIRE_METADATA", value_delimiter = ',')]
    metadata: Vec<String>,

    /// Copy at most this many bytes per second (0: unlimited).
    #[arg(long, env = "QUIRE_THROTTLE_BYTES_PER_SEC", default_value_t = 0)]
    throttle_bytes_per_sec: u64,

    /// How long an open ledger's writer may stay on a missing bookie before
    /// the worker recovers (fences and closes) the ledger, in milliseconds.
    #[arg(long, env = "QUIRE_OPEN_LEDGER_GRACE_MS", default_value_t = 30_000)]
    open_ledger_grace_ms: u64,

    /// Lease on a claimed ledger, in milliseconds (renewed every third).
    #[arg(long, env = "QUIRE_CLAIM_LEASE_MS", default_value_t = 30_000)]
    claim_lease_ms: u64,

    /// Pause between scans when nothing is marked, in milliseconds.
    #[arg(long, env = "QUIRE_POLL_MS", default_value_t = 1_000)]
    poll_ms: u64,

    /// Marked ledgers repaired at once (each under its own claim).
    #[arg(long, env = "QUIRE_PARALLEL_LEDGERS", default_value_t = 8)]
    parallel_ledgers: usize,

    /// Serve Prometheus metrics (GET /metrics) on this TCP address.
    #[arg(long, env = "QUIRE_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
}

fn main() -> anyhow::Result<()> {
    let mut args: Args = quire_runtime::config::parse()?;
    // Held for the life of the process: the id is this replica's while it runs.
    let _slot = args.common.claim_id()?;
    anyhow::ensure!(!args.metadata.is_empty(), "--metadata is required (flag, QUIRE_METADATA or the config file)");
    let telemetry = logging::init_from("quire-replication-worker", &args.common)?;
    let rt = args.common.runtime()?;
    let result = rt.block_on(async {
        let instance = new_instance_id();
        let creds = args.common.credentials(Role::ReplicationWorker)?;
        let rpc = quire_rpc::RpcClient::new(&creds, quire_rpc::ClientOptions::default())?;
        let meta = Arc::new(MetaClient::new(rpc.clone(), args.metadata.clone(), MetaClientOptions::default()));
        // Certificates revoked by the operator are refused from the moment this hears of them.
        let deny_meta = meta.clone();
        tokio::spawn(async move { deny_meta.follow_deny_list(quire_runtime::deny_list().clone()).await });
        let client = Client::new(rpc.clone(), meta, ClientOptions::default());
        let mut svc = RunningService::start(
            Role::ReplicationWorker,
            &args.common,
            args.listen,
            instance.clone(),
            Arc::new(ControlOnly),
            ServerOptions::default(),
        )?;
        svc.reload_client_too(rpc.clone());
        let cfg = worker::WorkerConfig {
            owner: format!("{}:{instance}", creds.identity()),
            claim_lease: Duration::from_millis(args.claim_lease_ms.max(1_000)),
            open_ledger_grace: Duration::from_millis(args.open_ledger_grace_ms),
            idle_poll: Duration::from_millis(args.poll_ms.max(50)),
            parallel_ledgers: args.parallel_ledgers.clamp(1, 256),
            stats: Arc::new(worker::WorkerStats::default()),
            writer_waits: Arc::default(),
        };
        let metrics = match args.metrics_listen {
            Some(addr) => {
                let (l, bound) = quire_runtime::metrics::bind(addr).await?;
                tracing::info!(%bound, "metrics on /metrics");
                let (s, rate) = (cfg.stats.clone(), args.throttle_bytes_per_sec);
                let render: quire_runtime::metrics::Render = Arc::new(move || s.render(rate));
                Some(tokio::spawn(quire_runtime::metrics::serve(l, render)))
            }
            None => None,
        };
        tracing::info!(
            addr = %svc.server.local_addr(),
            owner = %cfg.owner,
            throttle_bytes_per_sec = args.throttle_bytes_per_sec,
            "quire-replication-worker ready"
        );
        let work = tokio::spawn(worker::run(client, cfg, Arc::new(Throttle::new(args.throttle_bytes_per_sec))));
        let r = svc.run_until_signal().await;
        work.abort();
        if let Some(m) = metrics {
            m.abort();
        }
        r
    });
    telemetry.shutdown();
    result
}
