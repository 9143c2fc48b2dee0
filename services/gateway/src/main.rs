//! `quire-gateway`: the HTTP API v1 (actix-web) over the client library.
//!
//! It serves the control service over QUIC with mTLS like every quire
//! service, holds writer handles for the ledgers it created, and answers
//! HTTP on `--http-listen`. Client calls run on the tokio runtime (quinn,
//! writer actors); actix-web's workers only parse, route and answer.

#[global_allocator]
static ALLOC: quire_runtime::Allocator = quire_runtime::Allocator;

mod api;
mod auth;
mod error;
mod follow;
mod https;
mod log_follow;
mod logs;
mod openapi;
mod redact;
mod state;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix_web::dev::Service;
use actix_web::{web, App, HttpServer};
use anyhow::Context;
use clap::Parser;
use quire_client::{Client, ClientOptions};
use quire_metaclient::{MetaClient, MetaClientOptions};
use quire_proto::Role;
use quire_rpc::server::{ControlOnly, ServerOptions};
use quire_runtime::{logging, new_instance_id, CommonArgs, RunningService};

use crate::state::GatewayState;

/// The quire HTTP gateway: ledgers over HTTP.
#[derive(Debug, Parser)]
#[command(name = "quire-gateway", version)]
struct Args {
    #[command(flatten)]
    common: CommonArgs,

    /// UDP address the QUIC (control) server binds.
    #[arg(long, env = "QUIRE_LISTEN", default_value = "127.0.0.1:6181")]
    listen: SocketAddr,

    /// Metadata replicas (host:port, comma-separated).
    #[arg(long, env = "QUIRE_METADATA", value_delimiter = ',', required = true)]
    metadata: Vec<String>,

    /// TCP address of the HTTP API.
    #[arg(long, env = "QUIRE_HTTP_LISTEN", default_value = "127.0.0.1:8080")]
    http_listen: SocketAddr,

    /// Write the HTTP API's bound address here once it listens.
    #[arg(long, env = "QUIRE_HTTP_READY_FILE")]
    http_ready_file: Option<PathBuf>,

    /// HTTP worker threads.
    #[arg(long, env = "QUIRE_HTTP_WORKERS", default_value_t = 2)]
    http_workers: usize,

    /// Largest entry accepted, in bytes (bookies should accept at least this).
    #[arg(long, env = "QUIRE_MAX_ENTRY_BYTES", default_value_t = 4 << 20)]
    max_entry_bytes: usize,

    /// Bearer tokens, one per line (`NAME TOKEN`, or a bare `TOKEN`): with
    /// it, every request needs `Authorization: Bearer <token>` except GET
    /// /healthz, /readyz, /metrics and /openapi.json, spelled exactly so;
    /// a ledger created with a token is its principal's to write and delete.
    /// SIGHUP re-reads it (a file that does not parse keeps the old tokens).
    #[arg(long, env = "QUIRE_AUTH_TOKEN_FILE")]
    auth_token_file: Option<PathBuf>,

    /// Most entries one range read returns (streamed; the caller pages on).
    #[arg(long, env = "QUIRE_MAX_RANGE_ENTRIES", default_value_t = 100_000)]
    max_range_entries: usize,

    /// Serve HTTPS with this certificate chain (PEM); needs --https-key.
    /// Without it the API is plain HTTP (behind a TLS-terminating proxy, or on
    /// loopback).
    #[arg(long, env = "QUIRE_HTTPS_CERT", requires = "https_key")]
    https_cert: Option<PathBuf>,

    /// The private key of --https-cert (PEM).
    #[arg(long, env = "QUIRE_HTTPS_KEY", requires = "https_cert")]
    https_key: Option<PathBuf>,

    /// Longest a request may take end to end (a LAC long poll is capped below
    /// it), in milliseconds; past it the caller gets 504 Timeout.
    #[arg(long, env = "QUIRE_REQUEST_TIMEOUT_MS", default_value_t = 75_000)]
    request_timeout_ms: u64,

    /// Longest a request body may take to arrive, in milliseconds; past it
    /// the caller gets 408 (a slow upload does not hold a worker for ever).
    #[arg(long, env = "QUIRE_BODY_TIMEOUT_MS", default_value_t = 30_000)]
    body_timeout_ms: u64,

    /// A response the client takes none of for this long is abandoned: a
    /// range read stops reading pages for it, and the kernel resets the
    /// connection (TCP_USER_TIMEOUT on every accepted socket), so a client
    /// that stops reading holds nothing for longer.
    #[arg(long, env = "QUIRE_SEND_TIMEOUT_MS", default_value_t = 30_000)]
    send_timeout_ms: u64,

    /// A follow stream (`entries?follow=true`) with nothing new sends a
    /// heartbeat this often, in milliseconds; it also sees its ledger's close
    /// within this long.
    #[arg(long, env = "QUIRE_FOLLOW_HEARTBEAT_MS", default_value_t = 5_000)]
    follow_heartbeat_ms: u64,

    /// Most follow streams at once (each holds a long poll on every bookie
    /// of its ledger's ensemble); past it, 503 Overloaded.
    #[arg(long, env = "QUIRE_MAX_FOLLOWS", default_value_t = 1_024)]
    max_follows: usize,

    /// A log this gateway writes and that saw no append for this long, in
    /// milliseconds, is let go with its ownership lease (its next append,
    /// here or at another gateway, takes it over). At least 1000.
    #[arg(long, env = "QUIRE_LOG_IDLE_MS", default_value_t = 300_000)]
    log_idle_ms: u64,
}

/// The HTTP listener: TCP_USER_TIMEOUT set on it is inherited by every
/// connection it accepts (Linux), so data a client leaves unacknowledged or
/// a window it keeps shut past the send deadline aborts the connection.
fn http_listener(addr: SocketAddr, send_timeout: Duration) -> anyhow::Result<std::net::TcpListener> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None).context("create the HTTP socket")?;
    socket.set_reuse_address(true)?;
    socket.set_tcp_user_timeout(Some(send_timeout)).context("set TCP_USER_TIMEOUT")?;
    socket.bind(&addr.into()).with_context(|| format!("bind the HTTP API on {addr}"))?;
    socket.listen(1024)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

fn write_ready(path: &std::path::Path, addr: SocketAddr) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, addr.to_string()).with_context(|| format!("write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("write {}", path.display()))
}

fn main() -> anyhow::Result<()> {
    let mut args: Args = quire_runtime::config::parse()?;
    // Held for the life of the process: the id is this replica's while it runs.
    let _slot = args.common.claim_id()?;
    let telemetry = logging::init_from("quire-gateway", &args.common)?;
    let tokens = Arc::new(auth::TokenSet::new(match &args.auth_token_file {
        Some(p) => auth::load_tokens(p).map_err(anyhow::Error::msg)?,
        None => Vec::new(),
    }));
    let https = match (&args.https_cert, &args.https_key) {
        (Some(c), Some(k)) => Some(https::HttpsCert::load(c, k)?),
        _ => None,
    };
    let tls = https.as_ref().map(|h| h.server_config()).transpose()?;
    let rt = args.common.runtime()?;
    let (svc, state) = rt.block_on(async {
        let creds = args.common.credentials(Role::Gateway)?;
        let rpc = quire_rpc::RpcClient::new(&creds, quire_rpc::ClientOptions::default())?;
        let meta = Arc::new(MetaClient::new(rpc.clone(), args.metadata.clone(), MetaClientOptions::default()));
        // Certificates revoked by the operator are refused from the moment this hears of them.
        let deny_meta = meta.clone();
        tokio::spawn(async move { deny_meta.follow_deny_list(quire_runtime::deny_list().clone()).await });
        let opts = ClientOptions { max_entry_bytes: args.max_entry_bytes, ..ClientOptions::default() };
        let state = Arc::new(GatewayState {
            client: Client::new(rpc.clone(), meta, opts),
            writers: Mutex::new(HashMap::new()),
            logs: Mutex::new(HashMap::new()),
            leases: Mutex::new(HashMap::new()),
            claiming: Mutex::new(HashMap::new()),
            log_idle: Duration::from_millis(args.log_idle_ms.max(1000)),
            // The boot's own instance id: two processes of one certificate
            // (a scaled service, a pod still stopping) never share a label,
            // so never share a lock grant.
            owner: format!("{}@{}", new_instance_id(), args.http_listen),
            rt: tokio::runtime::Handle::current(),
            max_entry_bytes: args.max_entry_bytes,
            max_range_entries: args.max_range_entries.max(1),
            request_timeout: Duration::from_millis(args.request_timeout_ms.max(1000)),
            body_timeout: Duration::from_millis(args.body_timeout_ms.max(100)),
            send_timeout: Duration::from_millis(args.send_timeout_ms.max(100)),
            follow_heartbeat: Duration::from_millis(args.follow_heartbeat_ms.clamp(100, 60_000)),
            max_follows: args.max_follows,
            follows: std::sync::atomic::AtomicUsize::new(0),
            client_tasks: std::sync::atomic::AtomicUsize::new(0),
        });
        let mut svc = RunningService::start(
            Role::Gateway,
            &args.common,
            args.listen,
            new_instance_id(),
            Arc::new(ControlOnly),
            ServerOptions::default(),
        )?;
        svc.reload_client_too(rpc.clone());
        anyhow::Ok((svc, state))
    })?;
    let rt_handle = rt.handle().clone();
    let metrics = web::Data::new(api::Metrics::default());
    let tokens_for_reload = tokens.clone();
    let result = actix_web::rt::System::new().block_on(async move {
        let for_stop = state.clone();
        let data = web::Data::new(state);
        let m = metrics.clone();
        let server = HttpServer::new(move || {
            let m2 = m.clone();
            let tokens = tokens.clone();
            App::new()
                .app_data(data.clone())
                .app_data(m.clone())
                // Bearer tokens, when configured, guard everything but the
                // probes' exact paths (deny by default: auth.rs says why).
                // A refusal is logged by the access log below, as a 401.
                .wrap_fn(move |req, srv| {
                    let current = tokens.current();
                    let principal = if current.is_empty() {
                        Some(auth::Principal::anonymous())
                    } else {
                        let header = req.headers().get("authorization").and_then(|h| h.to_str().ok());
                        auth::principal_of(header, &current).map(|p| auth::Principal(p.to_string()))
                    };
                    let refused = principal.is_none() && !auth::open_without_token(req.method(), req.path());
                    if let Some(p) = principal {
                        actix_web::HttpMessage::extensions_mut(&req).insert(p);
                    }
                    let fut = if refused { None } else { Some(srv.call(req)) };
                    async move {
                        match fut {
                            Some(f) => f.await,
                            None => Err(error::ApiError::unauthorised().into()),
                        }
                    }
                })
                // Access log (outermost): one line per request, refusals included.
                .wrap_fn(move |req, srv| {
                    let (method, path) = (req.method().clone(), req.path().to_string());
                    let started = Instant::now();
                    let m3 = m2.clone();
                    // With tracing on, each request is the root of a trace
                    // that follows it to the metadata service and the bookies.
                    let span = if quire_runtime::logging::tracing_active() {
                        tracing::info_span!("http.request", http.method = %method, http.target = %path)
                    } else {
                        tracing::Span::none()
                    };
                    let fut = span.in_scope(|| srv.call(req));
                    tracing::Instrument::instrument(async move {
                        let res = fut.await;
                        let status = match &res {
                            Ok(r) => r.status().as_u16(),
                            Err(e) => e.as_response_error().status_code().as_u16(),
                        };
                        if status >= 400 {
                            m3.errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        tracing::info!(target: "access", %method, path, status, micros = started.elapsed().as_micros() as u64, "http");
                        res
                    }, span)
                })
                .configure(api::routes)
                .default_service(web::to(api::unknown))
        })
        .workers(args.http_workers.max(1))
        .disable_signals()
        // A client's EOF is a client gone: the request's handler is dropped,
        // and with it the work run_read cancels (a 60 s long poll, a range
        // read). With half-closes allowed (actix's default) the handler of
        // a client that closed its connection ran on to its end: the test
        // of that passed only by catching the poll's few milliseconds before
        // bookies answered at once (issue #21 item 3 made them park). The
        // price: a client that shuts its sending side after a request gets
        // no answer (docs/operations.md).
        .h1_allow_half_closed(false)
        .client_request_timeout(Duration::from_secs(30));
        let scheme = if tls.is_some() { "https" } else { "http" };
        let listener = http_listener(args.http_listen, Duration::from_millis(args.send_timeout_ms.max(100)))?;
        let server = match tls {
            Some(cfg) => server.listen_rustls_0_23(listener, cfg),
            None => server.listen(listener),
        }
        .with_context(|| format!("serve the HTTP API on {}", args.http_listen))?;
        let addr = *server.addrs().first().context("no HTTP address bound")?;
        // SIGHUP re-reads the token file (rotation without a restart), and
        // is never the default "terminate": installed before the ready file.
        {
            let _guard = rt_handle.enter();
            let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
                .context("install SIGHUP handler")?;
            let (tokens, file) = (tokens_for_reload.clone(), args.auth_token_file.clone());
            let https = https.clone();
            rt_handle.spawn(async move {
                while hup.recv().await.is_some() {
                    match &file {
                        Some(p) => tokens.reload(p),
                        None => tracing::info!("SIGHUP: no --auth-token-file to reload"),
                    }
                    // The HTTPS certificate too (the QUIC credentials are
                    // RunningService's to reload).
                    if let Some(h) = &https {
                        match h.reload() {
                            Ok(()) => tracing::info!("SIGHUP: HTTPS certificate reloaded"),
                            Err(e) => tracing::error!(error = format!("{e:#}"), "SIGHUP: HTTPS certificate not reloaded; the old one stays in force"),
                        }
                    }
                }
            });
        }
        if let Some(p) = &args.http_ready_file {
            write_ready(p, addr)?;
        }
        tracing::info!(quic = %svc.server.local_addr(), http = %addr, scheme, "quire-gateway ready");
        let server = server.run();
        let handle = server.handle();
        let (released_tx, released_rx) = tokio::sync::oneshot::channel::<()>();
        rt_handle.spawn(async move {
            let _ = svc.run_until_signal().await;
            handle.stop(true).await;
            // Give up the logs' ownership leases (after the last request):
            // another gateway, or this one restarted, takes a log over at
            // once rather than after a lease.
            for_stop.release_logs().await;
            let _ = released_tx.send(());
        });
        let served = server.await.context("HTTP server");
        let _ = tokio::time::timeout(Duration::from_secs(5), released_rx).await;
        served
    });
    drop(rt);
    telemetry.shutdown();
    result
}
