//! `quire-metadata`: one replica of quire's metadata service.

#[global_allocator]
static ALLOC: quire_runtime::Allocator = quire_runtime::Allocator;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use quire_metadata::node::{Node, RaftTiming};
use quire_metadata::service::MetaService;
use quire_proto::Role;
use quire_rpc::server::ServerOptions;
use quire_rpc::{ClientOptions, RpcClient};
use quire_runtime::{logging, new_instance_id, CommonArgs, RunningService};

/// A quire metadata replica (Raft over QUIC, state in sled).
#[derive(Debug, Parser)]
#[command(name = "quire-metadata", version)]
struct Args {
    #[command(flatten)]
    common: CommonArgs,

    /// UDP address the QUIC server binds.
    #[arg(long, env = "QUIRE_LISTEN", default_value = "127.0.0.1:4181")]
    listen: SocketAddr,

    /// Data directory (the sled database of the log, vote and state).
    #[arg(long, env = "QUIRE_DATA_DIR", default_value = "data/metadata")]
    data_dir: PathBuf,

    /// Serve Prometheus metrics (GET /metrics) on this TCP address.
    #[arg(long, env = "QUIRE_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,

    /// Every replica as ID=HOST:PORT, this one included (repeat or comma-separate).
    /// The replica's own id is its certificate's id.
    #[arg(long, env = "QUIRE_PEERS", value_delimiter = ',', required = true)]
    peers: Vec<String>,

    /// Raft heartbeat, in milliseconds.
    #[arg(long, env = "QUIRE_HEARTBEAT_MS", default_value_t = 100)]
    heartbeat_ms: u64,

    /// Shortest election timeout, in milliseconds (the longest, twice this,
    /// is also the leader lease). A replica that heard no leader for the
    /// lease plus up to this at random asks for a pre-vote, then stands:
    /// 0.87 to 1.14 s from a leader's death to its successor under load at
    /// 400 (`make bench-failover`, docs/benchmarks.md).
    #[arg(long, env = "QUIRE_ELECTION_TIMEOUT_MS", default_value_t = 400)]
    election_timeout_ms: u64,

    /// Snapshot (and compact the log) after at least this many entries;
    /// after one entry per ten ledgers held if that is more (100 000 at a
    /// million ledgers), so a snapshot's cost stays proportional to the
    /// entries it covers.
    #[arg(long, env = "QUIRE_SNAPSHOT_EVERY", default_value_t = 5000)]
    snapshot_every: u64,

    /// Log entries kept behind a snapshot (a lagging replica catches up from
    /// them instead of a whole snapshot).
    #[arg(long, env = "QUIRE_LOGS_TO_KEEP", default_value_t = 500)]
    logs_to_keep: u64,
}

fn parse_peers(peers: &[String]) -> anyhow::Result<BTreeMap<u64, String>> {
    let mut out = BTreeMap::new();
    for p in peers {
        let (id, addr) = p.split_once('=').with_context(|| format!("peer {p:?} is not ID=HOST:PORT"))?;
        let id: u64 = id.trim().parse().with_context(|| format!("peer id in {p:?} is not a number"))?;
        anyhow::ensure!(out.insert(id, addr.trim().to_string()).is_none(), "peer {id} given twice");
    }
    Ok(out)
}

fn main() -> anyhow::Result<()> {
    let args: Args = quire_runtime::config::parse()?;
    let telemetry = logging::init_from("quire-metadata", &args.common)?;
    let rt = args.common.runtime()?;
    let result = rt.block_on(run(args));
    telemetry.shutdown();
    result
}

async fn run(args: Args) -> anyhow::Result<()> {
    let members = parse_peers(&args.peers)?;
    let creds = args.common.credentials(Role::Metadata)?;
    let id: u64 = creds.identity().id.parse().context("a metadata replica's certificate id must be a number")?;
    // Raft's timeouts are short: the peer connection must fail fast too.
    let rpc = RpcClient::new(
        &creds,
        ClientOptions {
            request_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_millis(500),
            backoff_max: Duration::from_millis(500),
            ..ClientOptions::default()
        },
    )?;
    let timing = RaftTiming {
        heartbeat_ms: args.heartbeat_ms,
        election_min_ms: args.election_timeout_ms,
        election_max_ms: args.election_timeout_ms * 2,
        snapshot_every_entries: args.snapshot_every,
        logs_to_keep: args.logs_to_keep,
    };
    let node = Node::start(id, members, &args.data_dir, rpc.clone(), timing).await?;
    let service = Arc::new(MetaService::new(node.raft.clone(), node.shared.clone(), node.gate.clone()));
    let mut svc = RunningService::start(
        Role::Metadata,
        &args.common,
        args.listen,
        new_instance_id(),
        service,
        ServerOptions::default(),
    )?;
    svc.reload_client_too(rpc.clone());
    let deny =
        tokio::spawn(quire_metadata::revocation::follow_local(node.shared.clone(), quire_runtime::deny_list().clone()));
    tracing::info!(addr = %svc.server.local_addr(), id, "quire-metadata ready");
    let metrics = match args.metrics_listen {
        Some(addr) => {
            let (l, bound) = quire_runtime::metrics::bind(addr).await.context("bind --metrics-listen")?;
            tracing::info!(%bound, "metrics on /metrics");
            let (raft, shared) = (node.raft.clone(), node.shared.clone());
            let render: quire_runtime::metrics::Render =
                Arc::new(move || quire_metadata::metrics::render(&raft, &shared));
            Some(tokio::spawn(quire_runtime::metrics::serve(l, render)))
        }
        None => None,
    };
    let core_stopped = node.core_stopped();
    let result = tokio::select! {
        r = svc.run_until_signal() => r,
        why = core_stopped => {
            // Exit, not linger: a supervisor restarts the replica (which
            // either recovers or fails again, visibly), and nothing routes
            // to a replica that answers but can never commit or apply.
            tracing::error!(%why, "the Raft core stopped: exiting");
            Err(anyhow::anyhow!("the Raft core stopped: {why}"))
        }
    };
    deny.abort();
    if let Some(m) = metrics {
        m.abort();
    }
    node.shutdown().await;
    rpc.close(Duration::from_millis(200)).await;
    result
}
