//! Options every service takes, and the start and stop of its QUIC server.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use quire_proto::Role;
use quire_rpc::server::ServerOptions;
use quire_rpc::{Credentials, DenyList, RpcClient, Server, ServerHandle, ServerIdentity, Service, TlsFiles};
use tracing::info;

use crate::logging::LogFormat;

/// Options shared by every service.
#[derive(Debug, Clone, clap::Args)]
pub struct CommonArgs {
    /// TOML file supplying defaults for any option (keys are option names, e.g. `listen = "0.0.0.0:3181"`).
    #[arg(long, env = "QUIRE_CONFIG")]
    pub config: Option<PathBuf>,

    /// Directory written by `quire certs init`: ca.pem and <role>-<id>.pem/.key.
    #[arg(long, env = "QUIRE_CERTS_DIR")]
    pub certs_dir: Option<PathBuf>,

    /// This instance's id; with --certs-dir it picks the certificate <role>-<id>.pem.
    #[arg(long, env = "QUIRE_ID", default_value = "1")]
    pub id: String,

    /// Take the id instead: the lowest number no other replica sharing this
    /// directory holds (a lock file per id, held while the process lives).
    /// For replicas of one service started with the same options
    /// (`docker compose --scale`). Overrides --id.
    #[arg(long, env = "QUIRE_ID_SLOT_DIR")]
    pub id_slot_dir: Option<PathBuf>,

    /// The cluster CA certificate (overrides --certs-dir).
    #[arg(long, env = "QUIRE_CA")]
    pub ca: Option<PathBuf>,

    /// This service's certificate (overrides --certs-dir).
    #[arg(long, env = "QUIRE_CERT")]
    pub cert: Option<PathBuf>,

    /// This service's private key (overrides --certs-dir).
    #[arg(long, env = "QUIRE_KEY")]
    pub key: Option<PathBuf>,

    /// Log filter in RUST_LOG syntax, e.g. `info,quire_rpc=debug`.
    #[arg(long, env = "QUIRE_LOG", default_value = "info,openraft=warn,sled=warn")]
    pub log: String,

    /// Log line format.
    #[arg(long, env = "QUIRE_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,

    /// Give spans OpenTelemetry trace ids and propagate W3C trace context to
    /// peers on every request (a few microseconds per request).
    #[arg(long, env = "QUIRE_TRACE_CONTEXT")]
    pub trace_context: bool,

    /// Export spans by OTLP/gRPC to this collector (e.g. `http://jaeger:4317`);
    /// implies --trace-context. Off when absent or empty.
    #[arg(long, env = "QUIRE_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,

    /// Once serving, write the bound address to this file (for supervisors and tests).
    #[arg(long, env = "QUIRE_READY_FILE")]
    pub ready_file: Option<PathBuf>,

    /// How long a graceful shutdown waits for requests in flight, in milliseconds.
    #[arg(long, env = "QUIRE_SHUTDOWN_GRACE_MS", default_value_t = 5000)]
    pub shutdown_grace_ms: u64,

    /// Async worker threads (default: one per core). Lower it when several
    /// services share a machine's cores, to cut context switches.
    #[arg(long, env = "QUIRE_WORKER_THREADS")]
    pub worker_threads: Option<usize>,

    #[command(flatten)]
    pub packets: crate::packets::PacketArgs,
}

impl CommonArgs {
    /// With `--id-slot-dir`, claims an id and makes it this instance's id;
    /// keep the returned slot for the life of the process.
    pub fn claim_id(&mut self) -> anyhow::Result<Option<crate::slot::Slot>> {
        let Some(dir) = &self.id_slot_dir else { return Ok(None) };
        let slot = crate::slot::claim(dir)?;
        self.id = slot.id.to_string();
        Ok(Some(slot))
    }

    /// The service's async runtime, sized by `--worker-threads`, with the
    /// packet setting checked and in force (every service calls this before
    /// it makes an endpoint).
    pub fn runtime(&self) -> anyhow::Result<tokio::runtime::Runtime> {
        self.packets.install()?;
        let mut b = tokio::runtime::Builder::new_multi_thread();
        if let Some(n) = self.worker_threads {
            b.worker_threads(n.max(1));
        }
        b.enable_all().build().context("start the async runtime")
    }

    /// The TLS files for `role`, from explicit paths or the certificate directory.
    pub fn tls_files(&self, role: Role) -> anyhow::Result<TlsFiles> {
        let from_dir = self.certs_dir.as_ref().map(|d| TlsFiles::in_dir(d, role, &self.id));
        let pick = |explicit: &Option<PathBuf>, dir: Option<PathBuf>, what: &str| -> anyhow::Result<PathBuf> {
            match (explicit, dir) {
                (Some(p), _) => Ok(p.clone()),
                (None, Some(p)) => Ok(p),
                (None, None) => bail!("no {what}: give --certs-dir or --{what}"),
            }
        };
        Ok(TlsFiles {
            ca: pick(&self.ca, from_dir.as_ref().map(|f| f.ca.clone()), "ca")?,
            cert: pick(&self.cert, from_dir.as_ref().map(|f| f.cert.clone()), "cert")?,
            key: pick(&self.key, from_dir.as_ref().map(|f| f.key.clone()), "key")?,
        })
    }

    /// Loads the credentials and checks the certificate is for `role`. They
    /// refuse the process's [`deny_list`] at every handshake.
    pub fn credentials(&self, role: Role) -> anyhow::Result<Credentials> {
        let files = self.tls_files(role)?;
        let creds = Credentials::load(&files).context("load TLS credentials")?.with_deny_list(deny_list().clone());
        if creds.identity().role != role {
            bail!("certificate {} names {}, but this is a {role} service", files.cert.display(), creds.identity());
        }
        Ok(creds)
    }
}

/// The certificates this process refuses: the metadata service's deny list
/// as last heard (`MetaClient::follow_deny_list` keeps it so). One per
/// process, shared by every server and client its credentials build.
pub fn deny_list() -> &'static DenyList {
    static LIST: std::sync::OnceLock<DenyList> = std::sync::OnceLock::new();
    LIST.get_or_init(DenyList::new)
}

/// A random 128-bit id, hex. Instance ids need uniqueness, not secrecy.
pub fn new_instance_id() -> String {
    let a = RandomState::new().build_hasher().finish();
    let mut h = RandomState::new().build_hasher();
    h.write_u64(a);
    format!("{a:016x}{:016x}", h.finish())
}

/// A service's running QUIC server.
pub struct RunningService {
    /// The server.
    pub server: ServerHandle,
    grace: Duration,
    signals: ShutdownSignals,
    /// What SIGHUP reloads: the credentials of `role` from `common`'s files,
    /// into the server and `clients`.
    role: Role,
    common: CommonArgs,
    clients: Vec<RpcClient>,
    hangup: tokio::signal::unix::Signal,
}

impl RunningService {
    /// Loads credentials for `role`, binds `listen`, serves `service` and
    /// writes the ready file.
    pub fn start(
        role: Role,
        common: &CommonArgs,
        listen: SocketAddr,
        instance_id: String,
        service: Arc<dyn Service>,
        opts: ServerOptions,
    ) -> anyhow::Result<RunningService> {
        let creds = common.credentials(role)?;
        // Before the ready file appears: a supervisor may signal as soon as it does.
        let signals = ShutdownSignals::install()?;
        let hangup =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).context("install SIGHUP handler")?;
        let info = ServerIdentity { instance_id, version: env!("CARGO_PKG_VERSION").to_string() };
        let server = Server::bind(listen, &creds, info, service, opts).context("start QUIC server")?;
        if let Some(path) = &common.ready_file {
            // Written whole, then renamed: a reader never sees a partial address.
            let tmp = path.with_extension("tmp");
            std::fs::write(&tmp, server.local_addr().to_string())
                .with_context(|| format!("write {}", tmp.display()))?;
            std::fs::rename(&tmp, path).with_context(|| format!("write {}", path.display()))?;
        }
        Ok(RunningService {
            server,
            grace: Duration::from_millis(common.shutdown_grace_ms),
            signals,
            role,
            common: common.clone(),
            clients: Vec::new(),
            hangup,
        })
    }

    /// Has SIGHUP give `client` the reloaded credentials too (the service's
    /// connections to its peers).
    pub fn reload_client_too(&mut self, client: RpcClient) {
        self.clients.push(client);
    }

    /// Re-reads the certificate, key and CA files and puts them in force for
    /// new handshakes, server and clients alike. Files that do not load, or
    /// name another identity, change nothing: the old credentials stay in
    /// force and the error says why.
    pub fn reload_credentials(&self) -> anyhow::Result<()> {
        let creds = self.common.credentials(self.role)?;
        self.server.reload(&creds).context("reload the server's credentials")?;
        for c in &self.clients {
            c.set_credentials(&creds).context("reload a client's credentials")?;
        }
        Ok(())
    }

    /// Waits for SIGTERM or SIGINT, then shuts the server down gracefully.
    /// SIGHUP meanwhile reloads the TLS credentials (rotation without a
    /// restart).
    pub async fn run_until_signal(mut self) -> anyhow::Result<()> {
        let sig = loop {
            tokio::select! {
                sig = self.signals.recv() => break sig,
                _ = self.hangup.recv() => match self.reload_credentials() {
                    Ok(()) => info!("SIGHUP: TLS credentials reloaded"),
                    Err(e) => tracing::error!(error = format!("{e:#}"), "SIGHUP: TLS credentials not reloaded; the old ones stay in force"),
                },
            }
        };
        info!(signal = sig, "shutting down");
        self.server.shutdown(self.grace).await;
        Ok(())
    }
}

/// SIGTERM and SIGINT listeners, installed up front so that no signal sent
/// after start-up takes the default (immediate exit) path.
pub struct ShutdownSignals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl ShutdownSignals {
    /// Installs the handlers (needs a tokio runtime).
    pub fn install() -> anyhow::Result<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(ShutdownSignals {
            term: signal(SignalKind::terminate()).context("install SIGTERM handler")?,
            int: signal(SignalKind::interrupt()).context("install SIGINT handler")?,
        })
    }

    /// Resolves on the next SIGTERM or SIGINT with its name.
    pub async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}

/// Resolves on SIGTERM or SIGINT with the signal's name.
pub async fn wait_for_shutdown_signal() -> anyhow::Result<&'static str> {
    Ok(ShutdownSignals::install()?.recv().await)
}
