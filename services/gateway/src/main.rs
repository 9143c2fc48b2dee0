//! `quire-gateway`: The quire HTTP gateway (issue GATEWAY). Today it serves the control service over QUIC with mTLS.

use std::net::SocketAddr;
use std::sync::Arc;

use clap::Parser;
use quire_proto::Role;
use quire_rpc::server::{ControlOnly, ServerOptions};
use quire_runtime::{logging, new_instance_id, CommonArgs, RunningService};

/// The quire HTTP gateway (issue GATEWAY). Today it serves the control service over QUIC with mTLS.
#[derive(Debug, Parser)]
#[command(name = "quire-gateway", version)]
struct Args {
    #[command(flatten)]
    common: CommonArgs,

    /// UDP address the QUIC server binds.
    #[arg(long, env = "QUIRE_LISTEN", default_value = "127.0.0.1:6181")]
    listen: SocketAddr,
}

fn main() -> anyhow::Result<()> {
    let args: Args = quire_runtime::config::parse()?;
    let telemetry =
        logging::init("quire-gateway", &args.common.log, args.common.log_format, args.common.trace_context)?;
    let rt = args.common.runtime()?;
    let result = rt.block_on(async {
        let svc = RunningService::start(
            Role::Gateway,
            &args.common,
            args.listen,
            new_instance_id(),
            Arc::new(ControlOnly),
            ServerOptions::default(),
        )?;
        tracing::info!(addr = %svc.server.local_addr(), "quire-gateway ready");
        svc.run_until_signal().await
    });
    telemetry.shutdown();
    result
}
