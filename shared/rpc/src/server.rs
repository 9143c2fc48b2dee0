//! The server side: accept connections and lanes, authorise, dispatch, answer.
//!
//! Per connection: the peer's identity is read once from its certificate.
//! Per lane: frames are read in order; for each request the server checks the
//! method is served and the caller's role may call it, takes an in-flight slot
//! (when the connection is at its bound the lane stops reading, and QUIC flow
//! control pushes back on the caller), then calls the handler. The handler's
//! synchronous part runs in arrival order; its future runs concurrently under
//! the request's deadline, and its response joins the lane's write queue.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prost::Message;
use quire_proto::codec::FrameError;
use quire_proto::method::ServiceKind;
use quire_proto::role::allowed;
use quire_proto::v1::{
    self, request_frame::Body as Req, response_frame::Body as Resp, ErrorCode, RequestFrame, ResponseFrame,
};
use quire_proto::{Method, MAX_FRAME_BYTES_DEFAULT};
use tokio::sync::{mpsc, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn, Instrument};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::budget::{Budget, Held, Peers, DECODED_BYTES_PER_ELEMENT};
use crate::deny::DenyList;
use crate::error::ServiceError;
use crate::identity::PeerIdentity;
use crate::lane::{
    write_frames, FrameReader, LaneError, Outgoing, WriteFailed, LANE_ERROR_FRAMING, LANE_ERROR_SHUTDOWN,
    LANE_ERROR_STALLED,
};
use crate::packets::Packets;
use crate::tls::{Credentials, TlsError};
use crate::trace;
use quire_proto::peek::Peeked;

/// A handler's pending answer.
pub type ServiceFuture = Pin<Box<dyn Future<Output = Result<Resp, ServiceError>> + Send>>;

/// A service a server hosts besides the control service (Ping, ServerInfo).
pub trait Service: Send + Sync + 'static {
    /// Whether this service handles `method`; others answer UNKNOWN_METHOD.
    fn serves(&self, method: Method) -> bool;

    /// Handles one authorised request. The synchronous part of this call runs
    /// in the order requests arrived on their lane (use it to enqueue work that
    /// must keep that order); the returned future runs concurrently, under the
    /// request's deadline.
    fn call(&self, ctx: RequestContext, body: Req) -> ServiceFuture;
}

/// A server hosting only the control service.
pub struct ControlOnly;

impl Service for ControlOnly {
    fn serves(&self, _: Method) -> bool {
        false
    }
    fn call(&self, _: RequestContext, _: Req) -> ServiceFuture {
        Box::pin(async { Err(ServiceError::new(ErrorCode::UnknownMethod, "control service only")) })
    }
}

/// What a handler knows about its request.
#[derive(Debug, Clone)]
pub struct RequestContext {
    /// The caller, from its certificate.
    pub peer: PeerIdentity,
    /// The caller's address.
    pub remote_addr: SocketAddr,
    /// The caller's request id.
    pub request_id: u64,
    /// The RPC.
    pub method: Method,
    /// When the caller stops waiting; the server drops the work then.
    pub deadline: Instant,
    /// The W3C trace id of the caller's span, lower-case hex, when it sent one.
    pub trace_id: Option<String>,
}

/// Facts a server states about itself in ServerInfo and every response.
#[derive(Debug, Clone)]
pub struct ServerIdentity {
    /// Changes whenever the server's state is not the one a caller talked to
    /// before (a bookie's data directories, a fresh process).
    pub instance_id: String,
    /// The software version.
    pub version: String,
}

/// Bounds and timeouts of a server.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Connections beyond this are refused at the handshake.
    pub max_connections: usize,
    /// Requests executing at once per connection; beyond it the lanes stop reading.
    pub max_in_flight_per_connection: usize,
    /// Bytes of requests (frames, and what decoding them builds) and of
    /// responses not yet handed to QUIC, per connection; beyond it the
    /// connection's lanes stop reading (budget.rs).
    pub max_in_flight_bytes_per_connection: usize,
    /// The same over all connections of one peer (certificate identity).
    pub max_in_flight_bytes_per_peer: usize,
    /// A response write the peer does not take within this (it stopped
    /// reading and the flow-control window is shut) resets the lane, which
    /// gives back everything the lane holds.
    pub send_timeout: Duration,
    /// The largest frame accepted.
    pub max_frame_bytes: usize,
    /// Responses queued per lane before handlers wait for the writer.
    pub lane_queue: usize,
    /// Long polls (WaitLac, watches) parked at once, server-wide. They hold no
    /// in-flight slot (a parked poll must not stall a connection's adds); past
    /// this bound they are answered OVERLOADED.
    pub max_long_polls: usize,
    /// Deadline of a request that states none; also the cap on stated deadlines.
    pub request_timeout_max: Duration,
    /// A connection with no traffic (keep-alives included) for this long is dropped.
    pub idle_timeout: Duration,
    /// A handshake not finished by then is dropped, and its connection slot
    /// freed: a slot is taken when the first packet arrives, before anyone
    /// is authenticated, so this bounds what unauthenticated peers can hold
    /// (issue #20 item 4).
    pub handshake_timeout: Duration,
    /// With more handshakes than this under way, a peer whose address is not
    /// yet validated is sent a QUIC Retry first: one that spoofs its source
    /// address never answers it and so never takes a slot.
    pub retry_above_handshakes: usize,
    /// How the endpoint cuts its traffic into datagrams (default: the
    /// process's setting, [`Packets::of_process`]).
    pub packets: Packets,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            max_connections: 1024,
            max_in_flight_per_connection: 4096,
            max_in_flight_bytes_per_connection: 64 << 20,
            max_in_flight_bytes_per_peer: 256 << 20,
            send_timeout: Duration::from_secs(30),
            max_frame_bytes: MAX_FRAME_BYTES_DEFAULT,
            lane_queue: 1024,
            max_long_polls: 4096,
            request_timeout_max: Duration::from_secs(300),
            idle_timeout: Duration::from_secs(30),
            handshake_timeout: Duration::from_secs(5),
            retry_above_handshakes: 64,
            packets: Packets::default(),
        }
    }
}

/// Counters of what a server accepted and refused.
#[derive(Debug, Default)]
pub struct ServerStats {
    /// Connections that completed the handshake with a valid identity.
    pub connections_accepted: AtomicU64,
    /// Handshakes that failed: no certificate, unknown CA, expired, bad ALPN...
    pub handshakes_refused: AtomicU64,
    /// Connections refused for the connection bound.
    pub connections_over_limit: AtomicU64,
    /// Handshakes begun (a connection slot taken).
    pub handshakes_started: AtomicU64,
    /// Handshakes dropped at `handshake_timeout`.
    pub handshakes_timed_out: AtomicU64,
    /// Retries sent to validate a peer's address under handshake pressure.
    pub retries_sent: AtomicU64,
    /// Requests dispatched to a handler.
    pub requests: AtomicU64,
    /// Requests refused because the caller's role may not call the method.
    pub permission_denied: AtomicU64,
    /// Frames that were oversized or did not decode.
    pub bad_frames: AtomicU64,
    /// Lanes reset because the peer took no response for `send_timeout`.
    pub lanes_stalled: AtomicU64,
    /// Live connections closed because their peer's certificate was revoked.
    pub connections_revoked: AtomicU64,
}

/// Why a server could not start.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// The TLS configuration could not be built.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The UDP socket could not be bound.
    #[error("bind {addr}: {source}")]
    Io {
        /// The address.
        addr: SocketAddr,
        /// The socket error.
        source: std::io::Error,
    },
}

struct Shared {
    me: PeerIdentity,
    info: ServerIdentity,
    service: Arc<dyn Service>,
    opts: ServerOptions,
    stats: ServerStats,
    started: std::time::Instant,
    shutting_down: AtomicBool,
    stop_accepting: CancellationToken,
    /// Cancelled when the shutdown grace runs out: handlers still running are
    /// answered SHUTTING_DOWN.
    abort: CancellationToken,
    /// Connections accepted and not yet ended (handshakes included).
    open_conns: AtomicUsize,
    /// Of them, handshakes not yet finished.
    handshaking: AtomicUsize,
    long_polls: Arc<Semaphore>,
    /// In-flight bytes per connection and per peer.
    peers: Peers,
    /// The certificates refused (from the credentials the server started
    /// with; kept across reloads).
    deny: Option<DenyList>,
    /// Request handler tasks: awaited at shutdown so in-flight requests finish.
    requests: TaskTracker,
    /// Lane tasks: awaited after requests so their responses get written.
    lanes: TaskTracker,
}

/// Why a server's credentials could not be replaced.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The new config could not be built.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The new certificate names another identity.
    #[error("the certificate names {loaded}, but this server is {serving}")]
    OtherIdentity {
        /// The running server's identity.
        serving: String,
        /// The loaded certificate's.
        loaded: String,
    },
    /// The server is stopping.
    #[error("the server is shutting down")]
    ShuttingDown,
}

fn server_config(creds: &Credentials, opts: &ServerOptions) -> Result<quinn::ServerConfig, TlsError> {
    let mut config = creds.server_config(opts.idle_timeout, opts.packets)?;
    // Handshakes waiting to be accepted or refused: bounded like the rest.
    config.max_incoming(opts.max_connections.saturating_mul(2).max(16));
    Ok(config)
}

/// Starts servers.
pub struct Server;

/// A running server.
pub struct ServerHandle {
    endpoint: quinn::Endpoint,
    local_addr: SocketAddr,
    shared: Arc<Shared>,
    accept: tokio::task::JoinHandle<()>,
}

impl Server {
    /// Binds `addr` and serves the control service plus `service`.
    pub fn bind(
        addr: SocketAddr,
        creds: &Credentials,
        info: ServerIdentity,
        service: Arc<dyn Service>,
        opts: ServerOptions,
    ) -> Result<ServerHandle, BindError> {
        let config = server_config(creds, &opts)?;
        let endpoint = crate::socket::endpoint(addr, opts.packets, creds.endpoint_config(), Some(config))
            .map_err(|source| BindError::Io { addr, source })?;
        let local_addr = endpoint.local_addr().map_err(|source| BindError::Io { addr, source })?;
        let opts_long_polls = opts.max_long_polls;
        let shared = Arc::new(Shared {
            me: creds.identity().clone(),
            info,
            service,
            opts: opts.clone(),
            stats: ServerStats::default(),
            started: std::time::Instant::now(),
            shutting_down: AtomicBool::new(false),
            stop_accepting: CancellationToken::new(),
            abort: CancellationToken::new(),
            open_conns: AtomicUsize::new(0),
            handshaking: AtomicUsize::new(0),
            long_polls: Arc::new(Semaphore::new(opts_long_polls)),
            deny: creds.deny_list().cloned(),
            peers: Peers::new(
                opts.max_in_flight_bytes_per_connection,
                opts.max_in_flight_bytes_per_peer,
                opts.max_frame_bytes,
            ),
            requests: TaskTracker::new(),
            lanes: TaskTracker::new(),
        });
        info!(%local_addr, identity = %shared.me, instance_id = %shared.info.instance_id, "serving QUIC with mTLS");
        let accept = tokio::spawn(accept_loop(endpoint.clone(), shared.clone()));
        Ok(ServerHandle { endpoint, local_addr, shared, accept })
    }
}

impl ServerHandle {
    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The server's counters.
    pub fn stats(&self) -> &ServerStats {
        &self.shared.stats
    }

    /// Serves handshakes from now on with `creds` (a rotated certificate and
    /// key, or a new CA bundle, on SIGHUP); connections already made keep
    /// theirs until they end. Refused, with the old credentials kept in
    /// force, when `creds` name another identity than the server's: a
    /// reload rotates keys, it does not turn a bookie into something else.
    pub fn reload(&self, creds: &Credentials) -> Result<(), ReloadError> {
        if *creds.identity() != self.shared.me {
            return Err(ReloadError::OtherIdentity {
                serving: self.shared.me.to_string(),
                loaded: creds.identity().to_string(),
            });
        }
        if self.shared.shutting_down.load(Ordering::SeqCst) {
            return Err(ReloadError::ShuttingDown);
        }
        creds.check_own_certificate()?;
        let creds = match (&self.shared.deny, creds.deny_list()) {
            (Some(deny), None) => creds.clone().with_deny_list(deny.clone()),
            _ => creds.clone(),
        };
        let config = server_config(&creds, &self.shared.opts)?;
        self.endpoint.set_server_config(Some(config));
        info!(identity = %self.shared.me, "reloaded TLS credentials: new handshakes use them");
        Ok(())
    }

    /// Stops accepting, lets in-flight requests finish and their responses be
    /// written (up to `grace`), then closes every connection.
    pub async fn shutdown(self, grace: Duration) {
        let s = &self.shared;
        s.shutting_down.store(true, Ordering::SeqCst);
        s.stop_accepting.cancel();
        let _ = self.accept.await;
        let deadline = Instant::now() + grace;
        s.requests.close();
        if tokio::time::timeout_at(deadline, s.requests.wait()).await.is_err() {
            warn!("shutdown grace ran out with requests still in flight; answering them SHUTTING_DOWN");
            s.abort.cancel();
            let _ = tokio::time::timeout(Duration::from_secs(1), s.requests.wait()).await;
        }
        // Responses written; give the lanes a moment to have them read.
        s.lanes.close();
        let _ =
            tokio::time::timeout_at(deadline.max(Instant::now() + Duration::from_millis(500)), s.lanes.wait()).await;
        self.endpoint.close(quinn::VarInt::from_u32(LANE_ERROR_SHUTDOWN), b"server shutting down");
        let _ = tokio::time::timeout(Duration::from_secs(1), self.endpoint.wait_idle()).await;
        info!(local_addr = %self.local_addr, "server stopped");
    }
}

async fn accept_loop(endpoint: quinn::Endpoint, shared: Arc<Shared>) {
    loop {
        let incoming = tokio::select! {
            _ = shared.stop_accepting.cancelled() => break,
            inc = endpoint.accept() => match inc {
                Some(i) => i,
                None => break,
            },
        };
        if shared.open_conns.load(Ordering::SeqCst) >= shared.opts.max_connections {
            shared.stats.connections_over_limit.fetch_add(1, Ordering::Relaxed);
            warn!(remote = %incoming.remote_address(), max = shared.opts.max_connections, "refusing connection: at the connection limit");
            incoming.refuse();
            continue;
        }
        if shared.handshaking.load(Ordering::SeqCst) >= shared.opts.retry_above_handshakes
            && !incoming.remote_address_validated()
        {
            // The peer's answer to the Retry comes back as a new Incoming,
            // its address then validated.
            shared.stats.retries_sent.fetch_add(1, Ordering::Relaxed);
            if let Err(e) = incoming.retry() {
                e.into_incoming().refuse();
            }
            continue;
        }
        shared.open_conns.fetch_add(1, Ordering::SeqCst);
        shared.handshaking.fetch_add(1, Ordering::SeqCst);
        shared.stats.handshakes_started.fetch_add(1, Ordering::Relaxed);
        let s = shared.clone();
        tokio::spawn(async move {
            serve_connection(s.clone(), incoming).await;
            s.open_conns.fetch_sub(1, Ordering::SeqCst);
        });
    }
    // No new connections; existing ones finish their lanes.
    endpoint.set_server_config(None);
}

async fn serve_connection(shared: Arc<Shared>, incoming: quinn::Incoming) {
    let remote = incoming.remote_address();
    let handshake = tokio::time::timeout(shared.opts.handshake_timeout, incoming).await;
    shared.handshaking.fetch_sub(1, Ordering::SeqCst);
    let conn = match handshake {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            shared.stats.handshakes_refused.fetch_add(1, Ordering::Relaxed);
            warn!(%remote, error = %e, "refused connection: TLS handshake failed");
            return;
        }
        Err(_) => {
            // Dropping the half-made connection closes it.
            shared.stats.handshakes_timed_out.fetch_add(1, Ordering::Relaxed);
            warn!(%remote, timeout_ms = shared.opts.handshake_timeout.as_millis() as u64, "dropped connection: handshake not finished in time");
            return;
        }
    };
    let peer = match PeerIdentity::of_connection(&conn) {
        Ok(p) => p,
        Err(e) => {
            shared.stats.handshakes_refused.fetch_add(1, Ordering::Relaxed);
            warn!(%remote, error = %e, "refused connection: certificate names no quire identity");
            conn.close(quinn::VarInt::from_u32(LANE_ERROR_FRAMING), b"certificate names no quire identity");
            return;
        }
    };
    shared.stats.connections_accepted.fetch_add(1, Ordering::Relaxed);
    debug!(%remote, %peer, "connection accepted");
    let inflight = Arc::new(Semaphore::new(shared.opts.max_in_flight_per_connection));
    let budget = shared.peers.connection(&peer.to_string());
    // A certificate revoked while its connection lives: the connection is
    // closed when the list changes (the handshake refuses it from then on),
    // and the loop below ends with it.
    if let (Some(deny), Some(serial)) = (shared.deny.clone(), crate::deny::serial_of_connection(&conn)) {
        let (s, c, who) = (shared.clone(), conn.clone(), format!("{peer} at {remote}"));
        tokio::spawn(async move {
            if crate::deny::close_when_revoked(c, serial, deny, who).await {
                s.stats.connections_revoked.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    loop {
        let (send, recv) = tokio::select! {
            _ = shared.stop_accepting.cancelled() => break,
            s = conn.accept_bi() => match s {
                Ok(s) => s,
                Err(e) => {
                    debug!(%remote, %peer, reason = %e, "connection ended");
                    break;
                }
            },
        };
        let lane = serve_lane(shared.clone(), peer.clone(), remote, inflight.clone(), budget.clone(), send, recv);
        shared.lanes.spawn(lane);
    }
}

fn error_frame(request_id: u64, instance_id: &str, err: ServiceError) -> ResponseFrame {
    ResponseFrame {
        request_id,
        code: err.code as i32,
        message: err.message,
        instance_id: instance_id.to_string(),
        leader_hint: err.leader_hint.unwrap_or_default(),
        body: None,
    }
}

/// A response on its way to the lane writer, with its share of the budget
/// (none for the small refusals the lane answers itself).
struct Reply {
    frame: ResponseFrame,
    _held: Option<Held>,
}

impl Outgoing for Reply {
    fn encode(&self, buf: &mut bytes::BytesMut) {
        quire_proto::codec::encode_frame(&self.frame, buf)
    }
}

impl From<ResponseFrame> for Reply {
    fn from(frame: ResponseFrame) -> Reply {
        Reply { frame, _held: None }
    }
}

#[allow(clippy::too_many_arguments)]
async fn serve_lane(
    shared: Arc<Shared>,
    peer: PeerIdentity,
    remote: SocketAddr,
    inflight: Arc<Semaphore>,
    budget: Budget,
    send: quinn::SendStream,
    recv: quinn::RecvStream,
) {
    let (tx, rx) = mpsc::channel::<Reply>(shared.opts.lane_queue);
    let writer = tokio::spawn(write_frames(send, rx, Some(shared.opts.send_timeout)));
    let mut reader = FrameReader::new(recv, shared.opts.max_frame_bytes);
    let instance = shared.info.instance_id.as_str();
    loop {
        let next = tokio::select! {
            _ = shared.stop_accepting.cancelled() => break,
            // The writer gave up (the peer stopped reading): nothing read
            // from here on could be answered.
            _ = tx.closed() => {
                reader.stop(LANE_ERROR_STALLED);
                break;
            }
            n = reader.next() => n,
        };
        let frame = match next {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(LaneError::Frame(e)) => {
                shared.stats.bad_frames.fetch_add(1, Ordering::Relaxed);
                warn!(%remote, %peer, error = %e, "closing lane: broken framing");
                let code = match e {
                    FrameError::TooLarge { .. } => ErrorCode::FrameTooLarge,
                    FrameError::Truncated { .. } => ErrorCode::BadRequest,
                };
                let _ = tx.send(error_frame(0, instance, ServiceError::new(code, e.to_string())).into()).await;
                reader.stop(LANE_ERROR_FRAMING);
                break;
            }
            Err(LaneError::Read(e)) => {
                debug!(%remote, %peer, reason = %e, "lane ended");
                break;
            }
        };
        // Scanned before it is decoded (`screen`): a caller that may not
        // call the method, or a body of too many elements, costs a scan of
        // the frame's field headers and no allocation.
        let peeked = match screen(&shared, &peer, &frame) {
            Ok(p) => p,
            Err((id, err)) => {
                if tx.send(error_frame(id, instance, err).into()).await.is_err() {
                    break;
                }
                continue;
            }
        };
        // The request's bytes, and what decoding it builds, are taken before
        // it is decoded: past the budget this lane stops reading.
        let cost = frame.len().saturating_add(peeked.elements.saturating_mul(DECODED_BYTES_PER_ELEMENT));
        let held = tokio::select! {
            h = budget.take(cost) => Some(h),
            _ = tx.closed() => None,
        };
        let Some(held) = held else {
            reader.stop(LANE_ERROR_STALLED);
            break;
        };
        let req = match RequestFrame::decode(frame) {
            Ok(r) => r,
            Err(e) => {
                shared.stats.bad_frames.fetch_add(1, Ordering::Relaxed);
                warn!(%remote, %peer, error = %e, "undecodable request frame");
                let err = ServiceError::bad_request(format!("undecodable request frame: {e}"));
                if tx.send(error_frame(0, instance, err).into()).await.is_err() {
                    break;
                }
                continue;
            }
        };
        let id = req.request_id;
        let refuse = |err: ServiceError| error_frame(id, instance, err);
        let Some(body) = req.body else {
            let err = ServiceError::new(ErrorCode::UnknownMethod, "request has no body this server understands");
            if tx.send(refuse(err).into()).await.is_err() {
                break;
            }
            continue;
        };
        let method = Method::of_request(&body);
        if let Some(err) = admit(&shared, &peer, method, &body) {
            if tx.send(refuse(err).into()).await.is_err() {
                break;
            }
            continue;
        }
        let permit = if is_long_poll(method) {
            match shared.long_polls.clone().try_acquire_owned() {
                Ok(p) => p,
                Err(_) => {
                    let err = ServiceError::new(ErrorCode::Overloaded, "too many long polls parked on this server");
                    if tx.send(refuse(err).into()).await.is_err() {
                        break;
                    }
                    continue;
                }
            }
        } else {
            match inflight.clone().acquire_owned().await {
                Ok(p) => p,
                Err(_) => break,
            }
        };
        shared.stats.requests.fetch_add(1, Ordering::Relaxed);
        let cap = shared.opts.request_timeout_max;
        let timeout = match req.timeout_ms {
            0 => cap,
            ms => Duration::from_millis(ms.into()).min(cap),
        };
        let remote_sc = trace::parse_traceparent(&req.traceparent, &req.tracestate);
        // A traced request (it carries a traceparent) gets an INFO span that
        // joins its trace; any other request only a DEBUG one: at the default
        // filter that costs nothing, where formatting an INFO span's fields
        // for every add was a measurable share of a bookie's CPU.
        let span = if remote_sc.is_some() {
            tracing::info_span!("rpc.server", method = method.name(), %peer, request_id = id)
        } else {
            tracing::debug_span!("rpc.server", method = method.name(), %peer, request_id = id)
        };
        if let Some(sc) = &remote_sc {
            let _ = span.set_parent(trace::remote_context(sc.clone()));
        }
        let ctx = RequestContext {
            peer: peer.clone(),
            remote_addr: remote,
            request_id: id,
            method,
            deadline: Instant::now() + timeout,
            trace_id: remote_sc.map(|sc| sc.trace_id().to_string()),
        };
        let deadline = ctx.deadline;
        let fut = {
            let _enter = span.enter();
            if method.service() == ServiceKind::Control {
                control(&shared, ctx, body)
            } else {
                shared.service.call(ctx, body)
            }
        };
        let tx = tx.clone();
        let shared2 = shared.clone();
        let budget = budget.clone();
        shared.requests.spawn(
            async move {
                let result = tokio::select! {
                    r = tokio::time::timeout_at(deadline, fut) => Some(r),
                    _ = shared2.abort.cancelled() => None,
                };
                let instance = shared2.info.instance_id.as_str();
                let Some(result) = result else {
                    let err =
                        ServiceError::new(ErrorCode::ShuttingDown, "server shut down before the request finished");
                    let _ = tx.send(error_frame(id, instance, err).into()).await;
                    drop((permit, held));
                    return;
                };
                let resp = match result {
                    Ok(Ok(body)) => ResponseFrame {
                        request_id: id,
                        code: ErrorCode::Ok as i32,
                        instance_id: instance.to_string(),
                        body: Some(body),
                        ..Default::default()
                    },
                    Ok(Err(err)) => error_frame(id, instance, err),
                    Err(_) => error_frame(
                        id,
                        instance,
                        ServiceError::new(ErrorCode::Timeout, format!("{} exceeded its deadline", method.name())),
                    ),
                };
                let max = shared2.opts.max_frame_bytes;
                let resp = if resp.encoded_len() > max {
                    let err = ServiceError::new(
                        ErrorCode::FrameTooLarge,
                        format!("response of {} bytes exceeds the frame limit of {max} bytes", resp.encoded_len()),
                    );
                    error_frame(id, instance, err)
                } else {
                    resp
                };
                // The request's bytes are given back before the response's are
                // taken (holding both could stall every handler of a full
                // budget); the response holds its own until it is written.
                drop(held);
                let held = Some(budget.take(resp.encoded_len()).await);
                // The lane may be gone (caller disconnected); nobody is left to answer.
                let _ = tx.send(Reply { frame: resp, _held: held }).await;
                drop(permit);
            }
            .instrument(span),
        );
    }
    drop(tx);
    match writer.await {
        Ok(Ok(())) => {}
        Ok(Err(e @ WriteFailed::Stalled { .. })) => {
            shared.stats.lanes_stalled.fetch_add(1, Ordering::Relaxed);
            warn!(%remote, %peer, error = %e, "reset a lane whose peer stopped reading its responses");
        }
        Ok(Err(e)) => debug!(%remote, %peer, reason = %e, "lane writer stopped"),
        Err(e) => warn!(%remote, %peer, error = %e, "lane writer panicked"),
    }
}

/// Methods that park until something happens: they take a long-poll slot, not
/// an in-flight slot.
fn is_long_poll(m: Method) -> bool {
    matches!(m, Method::WaitLac | Method::WatchLedger | Method::WatchBookies | Method::ListRevoked | Method::WatchLog)
}

/// Refuses, from its bytes alone (`quire_proto::peek`), a frame that cannot
/// be scanned, calls a method the caller's role may not call, or holds
/// more elements than its method allows: the request id to answer under,
/// and the error.
fn screen(shared: &Shared, peer: &PeerIdentity, frame: &[u8]) -> Result<Peeked, (u64, ServiceError)> {
    let p = quire_proto::peek::peek_request(frame).map_err(|e| {
        shared.stats.bad_frames.fetch_add(1, Ordering::Relaxed);
        warn!(%peer, error = %e, "unreadable request frame");
        (0, ServiceError::bad_request(format!("undecodable request frame: {e}")))
    })?;
    if let Some(m) = p.method.filter(|m| !allowed(peer.role, *m)) {
        shared.stats.permission_denied.fetch_add(1, Ordering::Relaxed);
        warn!(%peer, method = m.name(), "refused request before decoding it: role not permitted");
        let err =
            ServiceError::new(ErrorCode::PermissionDenied, format!("role {} may not call {}", peer.role, m.name()));
        return Err((p.request_id, err));
    }
    if let Some(why) = quire_proto::peek::over_bounds(&p) {
        shared.stats.bad_frames.fetch_add(1, Ordering::Relaxed);
        warn!(%peer, reason = why, "refused request before decoding it: too many elements");
        return Err((p.request_id, ServiceError::bad_request(why)));
    }
    Ok(p)
}

/// Refuses a request the server will not run, with the reason.
fn admit(shared: &Shared, peer: &PeerIdentity, method: Method, body: &Req) -> Option<ServiceError> {
    if shared.shutting_down.load(Ordering::Relaxed) {
        return Some(ServiceError::new(ErrorCode::ShuttingDown, "server is shutting down"));
    }
    if method.service() != ServiceKind::Control && !shared.service.serves(method) {
        return Some(ServiceError::new(
            ErrorCode::UnknownMethod,
            format!("{} is not served by this {} server", method.name(), shared.me.role),
        ));
    }
    // `screen` refused this from the frame's bytes already; checked again on
    // the decoded method, which is what runs (the scan follows the decoder,
    // and a disagreement must fail closed).
    if !allowed(peer.role, method) {
        shared.stats.permission_denied.fetch_add(1, Ordering::Relaxed);
        warn!(%peer, method = method.name(), "refused request: role not permitted");
        return Some(ServiceError::new(
            ErrorCode::PermissionDenied,
            format!("role {} may not call {}", peer.role, method.name()),
        ));
    }
    if let Err(reason) = quire_proto::role::allowed_body(peer.role, body) {
        shared.stats.permission_denied.fetch_add(1, Ordering::Relaxed);
        warn!(%peer, method = method.name(), reason, "refused request: role not permitted");
        return Some(ServiceError::new(ErrorCode::PermissionDenied, reason));
    }
    None
}

fn control(shared: &Arc<Shared>, ctx: RequestContext, body: Req) -> ServiceFuture {
    let resp: Result<Resp, ServiceError> = match body {
        Req::Ping(p) => Ok(v1::PingResponse {
            payload: if p.echo { p.payload } else { bytes::Bytes::new() },
            trace_id: ctx.trace_id.unwrap_or_default(),
        }
        .into()),
        Req::ServerInfo(_) => Ok(v1::ServerInfoResponse {
            role: shared.me.role.to_wire() as i32,
            id: shared.me.id.clone(),
            instance_id: shared.info.instance_id.clone(),
            version: shared.info.version.clone(),
            uptime_ms: shared.started.elapsed().as_millis() as u64,
            caller_role: ctx.peer.role.to_wire() as i32,
            caller_id: ctx.peer.id,
        }
        .into()),
        other => {
            Err(ServiceError::internal(format!("{} routed to the control service", Method::of_request(&other).name())))
        }
    };
    Box::pin(std::future::ready(resp))
}
