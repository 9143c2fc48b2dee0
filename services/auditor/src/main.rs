//! `quire-auditor`: finds ledgers below their write quorum (BookKeeper's
//! Auditor). Several may run; one is active (a lock under a lease in the
//! metadata service), the others stand by. It marks ledgers that keep copies
//! on a lost bookie (after a grace period) or a decommissioning one, checks
//! replicas for holes and corrupt copies, retires drained bookies, and
//! publishes its report (GET /v1/cluster). The replication workers repair.

#[global_allocator]
static ALLOC: quire_runtime::Allocator = quire_runtime::Allocator;

mod audit;
mod auditor;
mod retention;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use quire_client::{Client, ClientOptions};
use quire_metaclient::{MetaClient, MetaClientOptions};
use quire_proto::Role;
use quire_rpc::server::{ControlOnly, ServerOptions};
use quire_runtime::{logging, new_instance_id, CommonArgs, RunningService};

/// The quire auditor.
#[derive(Debug, Parser)]
#[command(name = "quire-auditor", version)]
struct Args {
    #[command(flatten)]
    common: CommonArgs,

    /// UDP address the QUIC (control) server binds.
    #[arg(long, env = "QUIRE_LISTEN", default_value = "127.0.0.1:5181")]
    listen: SocketAddr,

    /// Metadata replicas (host:port, comma-separated). Required (checked
    /// after the config file is read, so that the file may give it).
    #[arg(long, env = "QUIRE_METADATA", value_delimiter = ',')]
    metadata: Vec<String>,

    /// Between audit passes, in milliseconds.
    #[arg(long, env = "QUIRE_AUDIT_INTERVAL_MS", default_value_t = 5_000)]
    audit_interval_ms: u64,

    /// A bookie whose registration has been gone this long is lost and its
    /// ledgers are re-replicated (BookKeeper's lostBookieRecoveryDelay), in ms.
    #[arg(long, env = "QUIRE_LOST_BOOKIE_GRACE_MS", default_value_t = 30_000)]
    lost_bookie_grace_ms: u64,

    /// Between replica checks (every entry read back on its bookies), in ms; 0: never.
    #[arg(long, env = "QUIRE_REPLICA_CHECK_INTERVAL_MS", default_value_t = 3_600_000)]
    replica_check_interval_ms: u64,

    /// Serve Prometheus metrics (GET /metrics) on this TCP address.
    #[arg(long, env = "QUIRE_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
}

fn main() -> anyhow::Result<()> {
    let mut args: Args = quire_runtime::config::parse()?;
    // Held for the life of the process: the id is this replica's while it runs.
    let _slot = args.common.claim_id()?;
    anyhow::ensure!(!args.metadata.is_empty(), "--metadata is required (flag, QUIRE_METADATA or the config file)");
    let telemetry = logging::init_from("quire-auditor", &args.common)?;
    let rt = args.common.runtime()?;
    let result = rt.block_on(async {
        let instance = new_instance_id();
        let creds = args.common.credentials(Role::Auditor)?;
        let rpc = quire_rpc::RpcClient::new(&creds, quire_rpc::ClientOptions::default())?;
        let meta = Arc::new(MetaClient::new(rpc.clone(), args.metadata.clone(), MetaClientOptions::default()));
        // Certificates revoked by the operator are refused from the moment this hears of them.
        let deny_meta = meta.clone();
        tokio::spawn(async move { deny_meta.follow_deny_list(quire_runtime::deny_list().clone()).await });
        let client = Client::new(rpc.clone(), meta, ClientOptions::default());
        let mut svc = RunningService::start(
            Role::Auditor,
            &args.common,
            args.listen,
            instance.clone(),
            Arc::new(ControlOnly),
            ServerOptions::default(),
        )?;
        svc.reload_client_too(rpc.clone());
        let interval = Duration::from_millis(args.audit_interval_ms.max(100));
        let cfg = auditor::AuditorConfig {
            owner: format!("{}:{instance}", creds.identity()),
            // Renewed every pass: a lease of three passes (at least 3 s).
            election_lease: (interval * 3).max(Duration::from_secs(3)),
            interval,
            lost_bookie_grace: Duration::from_millis(args.lost_bookie_grace_ms),
            replica_check_interval: Duration::from_millis(args.replica_check_interval_ms),
        };
        let stats = Arc::new(std::sync::Mutex::new(auditor::AuditorStats::default()));
        let metrics = match args.metrics_listen {
            Some(addr) => {
                let (l, bound) = quire_runtime::metrics::bind(addr).await?;
                tracing::info!(%bound, "metrics on /metrics");
                let s = stats.clone();
                let render: quire_runtime::metrics::Render = Arc::new(move || s.lock().expect("stats lock").render());
                Some(tokio::spawn(quire_runtime::metrics::serve(l, render)))
            }
            None => None,
        };
        tracing::info!(addr = %svc.server.local_addr(), owner = %cfg.owner, "quire-auditor ready");
        let work = tokio::spawn(auditor::run(client, cfg, stats));
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
