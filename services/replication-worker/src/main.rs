//! `quire-replication-worker`: A quire replication worker: re-replicates under-replicated ledgers (issue AUTORECOVERY). Today it serves the control service over QUIC with mTLS.

use std::net::SocketAddr;
use std::sync::Arc;

use clap::Parser;
use quire_proto::Role;
use quire_rpc::server::{ControlOnly, ServerOptions};
use quire_runtime::{logging, new_instance_id, CommonArgs, RunningService};

/// A quire replication worker: re-replicates under-replicated ledgers (issue AUTORECOVERY). Today it serves the control service over QUIC with mTLS.
#[derive(Debug, Parser)]
#[command(name = "quire-replication-worker", version)]
struct Args {
    #[command(flatten)]
    common: CommonArgs,

    /// UDP address the QUIC server binds.
    #[arg(long, env = "QUIRE_LISTEN", default_value = "127.0.0.1:5281")]
    listen: SocketAddr,
}

fn main() -> anyhow::Result<()> {
    let args: Args = quire_runtime::config::parse()?;
    let telemetry =
        logging::init("quire-replication-worker", &args.common.log, args.common.log_format, args.common.trace_context)?;
    let rt = args.common.runtime()?;
    let result = rt.block_on(async {
        let svc = RunningService::start(
            Role::ReplicationWorker,
            &args.common,
            args.listen,
            new_instance_id(),
            Arc::new(ControlOnly),
            ServerOptions::default(),
        )?;
        tracing::info!(addr = %svc.server.local_addr(), "quire-replication-worker ready");
        svc.run_until_signal().await
    });
    telemetry.shutdown();
    result
}
