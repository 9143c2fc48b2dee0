//! The client side: one QUIC connection per peer, many requests in flight on it.
//!
//! A [`PeerClient`] owns the connection to one server address and role. Each
//! call gets a request id, an in-flight slot (bounded: callers wait, which is
//! the backpressure), a lane (by ordering key, else round-robin) and a deadline.
//! A broken connection fails the requests in flight on it with
//! `ConnectionLost`; the next call reconnects, no sooner than the backoff
//! allows (exponential with jitter, reset by a successful handshake).

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use prost::Message;
use quire_proto::method::Call;
use quire_proto::v1::{ErrorCode, RequestFrame, ResponseFrame};
use quire_proto::{Role, MAX_FRAME_BYTES_DEFAULT};
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::deny::DenyList;
use crate::error::RpcError;
use crate::identity::PeerIdentity;
use crate::lane::{write_frames, FrameReader, LANE_ERROR_FRAMING, LANE_ERROR_SHUTDOWN};
use crate::packets::Packets;
use crate::tls::{Credentials, TlsError};
use crate::trace;

/// Bounds and timeouts of a client.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Lanes (bidirectional streams) per connection, 1 to `MAX_LANES_PER_CONNECTION`.
    pub lanes: usize,
    /// Requests in flight per connection; further calls wait for a slot.
    pub max_in_flight: usize,
    /// Deadline of a call that states none.
    pub request_timeout: Duration,
    /// Longest a handshake may take.
    pub connect_timeout: Duration,
    /// First reconnect delay after a failed connect.
    pub backoff_min: Duration,
    /// Cap of the reconnect delay.
    pub backoff_max: Duration,
    /// The largest response frame accepted.
    pub max_frame_bytes: usize,
    /// Requests queued per lane for its writer.
    pub lane_queue: usize,
    /// A connection with no traffic (keep-alives included) for this long is dropped.
    pub idle_timeout: Duration,
    /// How the endpoint cuts its traffic into datagrams (default: the
    /// process's setting, [`Packets::of_process`]).
    pub packets: Packets,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            lanes: 4,
            max_in_flight: 8192,
            request_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(5),
            backoff_min: Duration::from_millis(50),
            backoff_max: Duration::from_secs(5),
            max_frame_bytes: MAX_FRAME_BYTES_DEFAULT,
            lane_queue: 4096,
            idle_timeout: Duration::from_secs(30),
            packets: Packets::default(),
        }
    }
}

/// Per-call options.
#[derive(Debug, Clone, Copy, Default)]
pub struct CallOptions {
    /// Overrides the client's default deadline.
    pub timeout: Option<Duration>,
    /// Calls with the same key travel one lane, so the server sees them in the
    /// order they were made (a ledger id for adds).
    pub order_key: Option<u64>,
}

impl CallOptions {
    /// Options with a deadline.
    pub fn timeout(d: Duration) -> Self {
        CallOptions { timeout: Some(d), order_key: None }
    }

    /// Options keeping calls with `key` in order.
    pub fn ordered(key: u64) -> Self {
        CallOptions { timeout: None, order_key: Some(key) }
    }
}

/// A successful response and who sent it.
#[derive(Debug, Clone)]
pub struct Reply<T> {
    /// The response message.
    pub body: T,
    /// The answering server's instance id: a change means a different process
    /// or disk behind the same address (seed 003).
    pub instance_id: String,
}

/// A client's QUIC config and the deny list its verifier consults, shared
/// with its peers (both replaced when credentials are reloaded).
type SharedConfig = Arc<Mutex<(quinn::ClientConfig, Option<DenyList>)>>;

/// Address, role and (optional) id: one connection each.
type PeerKey = (String, Role, Option<String>);

/// A client endpoint: one UDP socket and one TLS identity, shared by all peers.
#[derive(Clone)]
pub struct RpcClient {
    endpoint: quinn::Endpoint,
    /// Read at every connect: replaced when credentials are reloaded.
    config: SharedConfig,
    opts: Arc<ClientOptions>,
    peers: Arc<Mutex<HashMap<PeerKey, PeerClient>>>,
}

impl RpcClient {
    /// A client presenting `creds`.
    pub fn new(creds: &Credentials, opts: ClientOptions) -> Result<RpcClient, ClientBuildError> {
        let config = creds.client_config(opts.idle_timeout, opts.packets)?;
        let client = Self::with_config(config, opts)?;
        client.config.lock().expect("config lock").1 = creds.deny_list().cloned();
        Ok(client)
    }

    /// A client with an explicit QUIC config (e.g. `tls::anonymous_client_config`).
    /// The config's transport must have been built for `opts.packets` (as
    /// the `tls` functions do from the same setting): a config discovering
    /// packets larger than the endpoint's offload allows would have its
    /// batches dropped by the kernel.
    pub fn with_config(config: quinn::ClientConfig, opts: ClientOptions) -> Result<RpcClient, ClientBuildError> {
        // Dual-stack where the host has IPv6, plain IPv4 where it does not (some containers).
        let endpoint = client_endpoint(SocketAddr::from(([0u16; 8], 0)), opts.packets)
            .or_else(|_| client_endpoint(SocketAddr::from(([0u8; 4], 0)), opts.packets))
            .map_err(ClientBuildError::Bind)?;
        let config = Arc::new(Mutex::new((config, None)));
        Ok(RpcClient { endpoint, config, opts: Arc::new(opts), peers: Arc::new(Mutex::new(HashMap::new())) })
    }

    /// Presents `creds` on every connection made from now on (a rotated
    /// certificate and key, on SIGHUP); connections already made keep the
    /// certificate they were made with until they end.
    pub fn set_credentials(&self, creds: &Credentials) -> Result<(), ClientBuildError> {
        creds.check_own_certificate()?;
        let config = creds.client_config(self.opts.idle_timeout, self.opts.packets)?;
        *self.config.lock().expect("config lock") = (config, creds.deny_list().cloned());
        Ok(())
    }

    /// The client for the server at `addr` (`host:port`) that must hold a
    /// certificate for `role` (and `id`, when given). One connection per
    /// (address, role, id): repeated calls return the same client.
    pub fn peer(&self, addr: &str, role: Role, id: Option<&str>) -> PeerClient {
        let key = (addr.to_string(), role, id.map(str::to_string));
        let mut peers = self.peers.lock().expect("peers lock");
        peers
            .entry(key)
            .or_insert_with(|| PeerClient {
                inner: Arc::new(PeerInner {
                    addr: addr.to_string(),
                    role,
                    id: id.map(str::to_string),
                    endpoint: self.endpoint.clone(),
                    config: self.config.clone(),
                    opts: self.opts.clone(),
                    current: Mutex::new(None),
                    connect: tokio::sync::Mutex::new(Backoff::default()),
                    closed: AtomicBool::new(false),
                }),
            })
            .clone()
    }

    /// Closes every connection (requests in flight fail) and waits for the
    /// socket to drain, at most `grace`.
    pub async fn close(&self, grace: Duration) {
        let peers: Vec<_> = self.peers.lock().expect("peers lock").drain().map(|(_, p)| p).collect();
        for p in peers {
            p.close();
        }
        self.endpoint.close(quinn::VarInt::from_u32(LANE_ERROR_SHUTDOWN), b"client closed");
        let _ = tokio::time::timeout(grace, self.endpoint.wait_idle()).await;
    }
}

/// Why a client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientBuildError {
    /// The TLS configuration could not be built.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// No UDP socket could be bound.
    #[error("bind client socket: {0}")]
    Bind(std::io::Error),
}

/// The connection to one server.
#[derive(Clone)]
pub struct PeerClient {
    inner: Arc<PeerInner>,
}

struct PeerInner {
    addr: String,
    role: Role,
    id: Option<String>,
    endpoint: quinn::Endpoint,
    config: SharedConfig,
    opts: Arc<ClientOptions>,
    current: Mutex<Option<Arc<Conn>>>,
    /// Held while connecting: one handshake at a time per peer.
    connect: tokio::sync::Mutex<Backoff>,
    closed: AtomicBool,
}

#[derive(Default)]
struct Backoff {
    failures: u32,
    next_attempt: Option<Instant>,
    last_error: String,
}

impl Backoff {
    fn failed(&mut self, opts: &ClientOptions, error: String) {
        self.failures = self.failures.saturating_add(1);
        let exp = opts.backoff_min.saturating_mul(1u32 << self.failures.min(16).saturating_sub(1));
        let base = exp.min(opts.backoff_max);
        // Up to +50% jitter so that many clients of a restarted server do not reconnect in lockstep.
        let jitter_permille = std::collections::hash_map::RandomState::new().build_hasher().finish() % 500;
        let delay = base + base.mul_f64(jitter_permille as f64 / 1000.0);
        self.next_attempt = Some(Instant::now() + delay);
        self.last_error = error;
    }
}

struct Conn {
    connection: quinn::Connection,
    /// The first reason any lane saw the connection fail. Lanes close the
    /// connection locally after a failure, so later lanes would otherwise only
    /// see "closed" and hide the cause (a TLS alert, say).
    failure: Arc<OnceLock<String>>,
    lanes: Vec<Lane>,
    next_lane: AtomicUsize,
    next_id: AtomicU64,
    inflight: Arc<Semaphore>,
}

type Waiter = oneshot::Sender<Result<ResponseFrame, RpcError>>;

struct Lane {
    tx: mpsc::Sender<RequestFrame>,
    state: Arc<LaneState>,
}

/// Removes a call's waiter from its lane when the call ends.
struct WaiterGuard<'a> {
    state: &'a LaneState,
    id: u64,
}

impl Drop for WaiterGuard<'_> {
    fn drop(&mut self) {
        self.state.pending.lock().expect("pending lock").remove(&self.id);
    }
}

struct LaneState {
    pending: Mutex<HashMap<u64, Waiter>>,
    /// Set (before pending is drained) when the lane's reader stops.
    dead: AtomicBool,
}

impl PeerClient {
    /// The address this client connects to.
    pub fn addr(&self) -> &str {
        &self.inner.addr
    }

    /// The QUIC statistics of the current connection (packets, losses,
    /// the path's MTU), if connected.
    pub fn connection_stats(&self) -> Option<quinn::ConnectionStats> {
        self.inner.current.lock().expect("current lock").as_ref().map(|c| c.connection.stats())
    }

    /// Calls the peer with the default options.
    pub async fn call<C: Call>(&self, req: C) -> Result<C::Response, RpcError> {
        Ok(self.call_full(req, CallOptions::default()).await?.body)
    }

    /// Calls the peer; the reply includes the server's instance id.
    pub async fn call_full<C: Call>(&self, req: C, opts: CallOptions) -> Result<Reply<C::Response>, RpcError> {
        let started = Instant::now();
        let timeout = opts.timeout.unwrap_or(self.inner.opts.request_timeout);
        // A deadline beyond any real wait (Duration::MAX) saturates instead of overflowing.
        let deadline = started.checked_add(timeout).unwrap_or(started + Duration::from_secs(365 * 24 * 3600));
        let method = C::METHOD.name();
        let timed_out = || RpcError::Timeout {
            method,
            peer: self.inner.addr.clone(),
            elapsed_ms: started.elapsed().as_millis() as u64,
        };
        let conn = self.inner.connection(deadline, method, started).await?;
        let _permit = tokio::time::timeout_at(deadline, conn.inflight.clone().acquire_owned())
            .await
            .map_err(|_| timed_out())?
            .map_err(|_| RpcError::Closed)?;
        let id = conn.next_id.fetch_add(1, Ordering::Relaxed);
        let (traceparent, tracestate) = trace::current().unwrap_or_default();
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(timed_out());
        }
        let frame = RequestFrame {
            request_id: id,
            traceparent,
            tracestate,
            // Rounded up and at least 1: 0 means "no deadline" on the wire.
            timeout_ms: remaining.as_micros().div_ceil(1000).clamp(1, u32::MAX as u128) as u32,
            body: Some(req.into_body()),
        };
        let bytes = frame.encoded_len();
        if bytes > self.inner.opts.max_frame_bytes {
            return Err(RpcError::RequestTooLarge { method, bytes, max_bytes: self.inner.opts.max_frame_bytes });
        }
        let lane = match opts.order_key {
            Some(k) => &conn.lanes[(k % conn.lanes.len() as u64) as usize],
            None => &conn.lanes[conn.next_lane.fetch_add(1, Ordering::Relaxed) % conn.lanes.len()],
        };
        let (wtx, wrx) = oneshot::channel();
        lane.state.pending.lock().expect("pending lock").insert(id, wtx);
        // Removes the waiter however this call ends: error, timeout, or the
        // caller dropping the future (select!, an outer timeout).
        let _waiter = WaiterGuard { state: &lane.state, id };
        let lost =
            |reason: &str| RpcError::ConnectionLost { peer: self.inner.addr.clone(), reason: reason.to_string() };
        // Either the reader's drain saw our waiter, or we see `dead` here.
        if lane.state.dead.load(Ordering::SeqCst) {
            return Err(lost(&conn.failure_reason()));
        }
        match tokio::time::timeout_at(deadline, lane.tx.send(frame)).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return Err(lost(&conn.failure_reason())),
            Err(_) => return Err(timed_out()),
        }
        let resp = match tokio::time::timeout_at(deadline, wrx).await {
            Ok(Ok(r)) => r?,
            Ok(Err(_)) => return Err(lost("lane closed")),
            Err(_) => return Err(timed_out()),
        };
        let code = ErrorCode::try_from(resp.code).unwrap_or(ErrorCode::Internal);
        if code == ErrorCode::Timeout {
            // The server's copy of our deadline fired first: the same outcome.
            return Err(timed_out());
        }
        if code == ErrorCode::PermissionDenied {
            // A deployment error (wrong certificate for this job), not a transient one.
            warn!(peer = %self.inner.addr, method, message = %resp.message, "request refused: permission denied");
        }
        if code != ErrorCode::Ok {
            return Err(RpcError::Remote {
                peer: self.inner.addr.clone(),
                code,
                message: if ErrorCode::try_from(resp.code).is_ok() {
                    resp.message
                } else {
                    format!("unknown error code {}: {}", resp.code, resp.message)
                },
                leader_hint: (!resp.leader_hint.is_empty()).then_some(resp.leader_hint),
                instance_id: resp.instance_id,
            });
        }
        let protocol = |detail: String| RpcError::Protocol { peer: self.inner.addr.clone(), detail };
        let body = resp.body.ok_or_else(|| protocol(format!("{method} answered OK without a body")))?;
        let body =
            C::from_body(body).map_err(|other| protocol(format!("{method} answered with a {} body", other.name())))?;
        Ok(Reply { body, instance_id: resp.instance_id })
    }

    /// Calls waiting for a response on the current connection (for tests and metrics).
    pub fn pending_calls(&self) -> usize {
        match self.inner.current.lock().expect("current lock").as_ref() {
            Some(c) => c.lanes.iter().map(|l| l.state.pending.lock().expect("pending lock").len()).sum(),
            None => 0,
        }
    }

    /// Closes the connection; calls in flight fail with `ConnectionLost`, later calls with `Closed`.
    pub fn close(&self) {
        self.inner.closed.store(true, Ordering::SeqCst);
        if let Some(c) = self.inner.current.lock().expect("current lock").take() {
            c.connection.close(quinn::VarInt::from_u32(LANE_ERROR_SHUTDOWN), b"client closed");
        }
    }
}

impl PeerInner {
    async fn connection(
        &self,
        deadline: Instant,
        method: &'static str,
        started: Instant,
    ) -> Result<Arc<Conn>, RpcError> {
        if let Some(c) = self.live() {
            return Ok(c);
        }
        let timed_out =
            || RpcError::Timeout { method, peer: self.addr.clone(), elapsed_ms: started.elapsed().as_millis() as u64 };
        let mut backoff = tokio::time::timeout_at(deadline, self.connect.lock()).await.map_err(|_| timed_out())?;
        if let Some(c) = self.live() {
            return Ok(c);
        }
        if self.closed.load(Ordering::SeqCst) {
            return Err(RpcError::Closed);
        }
        if let Some(at) = backoff.next_attempt {
            if at > deadline {
                return Err(RpcError::Unavailable {
                    peer: self.addr.clone(),
                    reason: format!(
                        "in reconnect backoff after {} failed attempts; last: {}",
                        backoff.failures, backoff.last_error
                    ),
                });
            }
            tokio::time::sleep_until(at).await;
        }
        let connect_deadline = deadline.min(Instant::now() + self.opts.connect_timeout);
        match tokio::time::timeout_at(connect_deadline, self.establish()).await {
            Ok(Ok(conn)) => {
                backoff.failures = 0;
                backoff.next_attempt = None;
                let mut cur = self.current.lock().expect("current lock");
                if self.closed.load(Ordering::SeqCst) {
                    // close() ran while we were connecting.
                    conn.connection.close(quinn::VarInt::from_u32(LANE_ERROR_SHUTDOWN), b"client closed");
                    return Err(RpcError::Closed);
                }
                *cur = Some(conn.clone());
                Ok(conn)
            }
            Ok(Err(e)) => {
                warn!(peer = %self.addr, error = %e, "connect failed");
                backoff.failed(&self.opts, e.to_string());
                Err(e)
            }
            Err(_) if connect_deadline < deadline => {
                // The peer took longer than connect_timeout: a real failure.
                backoff.failed(&self.opts, "handshake timed out".into());
                Err(RpcError::Unavailable { peer: self.addr.clone(), reason: "handshake timed out".into() })
            }
            // The caller's own deadline cut the handshake short: not the peer's
            // fault, so it does not push other callers into backoff.
            Err(_) => Err(timed_out()),
        }
    }

    fn live(&self) -> Option<Arc<Conn>> {
        let cur = self.current.lock().expect("current lock");
        cur.as_ref().filter(|c| c.connection.close_reason().is_none()).cloned()
    }

    async fn establish(&self) -> Result<Arc<Conn>, RpcError> {
        let unavailable = |reason: String| RpcError::Unavailable { peer: self.addr.clone(), reason };
        let addrs: Vec<SocketAddr> =
            tokio::net::lookup_host(&self.addr).await.map_err(|e| unavailable(format!("resolve: {e}")))?.collect();
        if addrs.is_empty() {
            return Err(unavailable("resolves to no address".into()));
        }
        // Every resolved address in turn (localhost may give ::1 before 127.0.0.1).
        let mut last_err = String::new();
        let mut connection = None;
        for addr in addrs {
            // Outside the caller's span: quinn's connection driver keeps the
            // span current at connect for the connection's lifetime, and a
            // span held open holds its parents open, so a connection made
            // inside a request would keep that request's trace from ever
            // being exported. (Entering a disabled span would not do: it
            // leaves the caller's span current.)
            let attempt = tracing::dispatcher::with_default(&tracing::Dispatch::none(), || {
                let config = self.config.lock().expect("config lock").0.clone();
                self.endpoint.connect_with(config, addr, &self.role.server_name())
            });
            let attempt = match attempt {
                Ok(connecting) => connecting.await.map_err(|e| describe(&e)),
                Err(e) => Err(e.to_string()),
            };
            match attempt {
                Ok(c) => {
                    connection = Some(c);
                    break;
                }
                Err(e) => last_err = e,
            }
        }
        let connection = connection.ok_or_else(|| unavailable(last_err))?;
        let peer = PeerIdentity::of_connection(&connection).map_err(|e| unavailable(e.to_string()))?;
        let wrong = peer.role != self.role || self.id.as_ref().is_some_and(|id| *id != peer.id);
        if wrong {
            connection.close(quinn::VarInt::from_u32(LANE_ERROR_SHUTDOWN), b"unexpected peer identity");
            return Err(RpcError::WrongPeer {
                peer: self.addr.clone(),
                expected: format!("{}/{}", self.role, self.id.as_deref().unwrap_or("*")),
                actual: peer.to_string(),
            });
        }
        // A server whose certificate is revoked later loses this connection
        // then (the handshake refuses it from then on): a client must not
        // go on writing to, or taking votes from, a revoked peer.
        let deny = self.config.lock().expect("config lock").1.clone();
        if let (Some(deny), Some(serial)) = (deny, crate::deny::serial_of_connection(&connection)) {
            tokio::spawn(crate::deny::close_when_revoked(connection.clone(), serial, deny, self.addr.clone()));
        }
        // Open every lane before any reader runs: a reader that sees the
        // connection fail closes it, which would mask the cause here.
        let lanes = self.opts.lanes.clamp(1, crate::MAX_LANES_PER_CONNECTION as usize);
        let mut streams = Vec::with_capacity(lanes);
        for _ in 0..lanes {
            let s = connection.open_bi().await.map_err(|e| unavailable(format!("open lane: {}", describe(&e))))?;
            streams.push(s);
        }
        let failure = Arc::new(OnceLock::new());
        let mut lanes = Vec::with_capacity(streams.len());
        for (send, recv) in streams {
            let (tx, rx) = mpsc::channel(self.opts.lane_queue);
            let state = Arc::new(LaneState { pending: Mutex::new(HashMap::new()), dead: AtomicBool::new(false) });
            tokio::spawn(write_frames(send, rx, None));
            tokio::spawn(read_lane(
                self.addr.clone(),
                FrameReader::new(recv, self.opts.max_frame_bytes),
                state.clone(),
                connection.clone(),
                failure.clone(),
            ));
            lanes.push(Lane { tx, state });
        }
        debug!(peer = %self.addr, identity = %peer, "connected");
        Ok(Arc::new(Conn {
            connection,
            failure,
            lanes,
            next_lane: AtomicUsize::new(0),
            next_id: AtomicU64::new(1),
            inflight: Arc::new(Semaphore::new(self.opts.max_in_flight)),
        }))
    }
}

async fn read_lane(
    peer: String,
    mut reader: FrameReader,
    state: Arc<LaneState>,
    connection: quinn::Connection,
    failure: Arc<OnceLock<String>>,
) {
    let reason = loop {
        match reader.next().await {
            Ok(Some(frame)) => match ResponseFrame::decode(frame) {
                Ok(resp) => {
                    let waiter = state.pending.lock().expect("pending lock").remove(&resp.request_id);
                    match waiter {
                        Some(w) => {
                            let _ = w.send(Ok(resp));
                        }
                        // Id 0 is the server speaking about the lane itself (bad frame).
                        None if resp.request_id == 0 => {
                            warn!(%peer, code = resp.code, message = %resp.message, "server reported a lane error");
                        }
                        // The caller timed out and left.
                        None => {}
                    }
                }
                Err(e) => break format!("undecodable response frame: {e}"),
            },
            Ok(None) => break "server finished the lane".to_string(),
            Err(e) => break e.to_string(),
        }
    };
    state.dead.store(true, Ordering::SeqCst);
    let reason = failure
        .get_or_init(|| match connection.close_reason() {
            Some(r) if !matches!(r, quinn::ConnectionError::LocallyClosed) => describe(&r),
            _ => reason,
        })
        .clone();
    let waiters: Vec<Waiter> = state.pending.lock().expect("pending lock").drain().map(|(_, w)| w).collect();
    if !waiters.is_empty() || !is_local_close(&connection) {
        warn!(%peer, %reason, in_flight = waiters.len(), "connection lost");
    }
    for w in waiters {
        let _ = w.send(Err(RpcError::ConnectionLost { peer: peer.clone(), reason: reason.clone() }));
    }
    // One broken lane poisons the connection: reconnecting resets all lanes.
    connection.close(quinn::VarInt::from_u32(LANE_ERROR_FRAMING), b"lane failed");
}

fn is_local_close(c: &quinn::Connection) -> bool {
    matches!(c.close_reason(), Some(quinn::ConnectionError::LocallyClosed))
}

impl Conn {
    fn failure_reason(&self) -> String {
        match self.failure.get() {
            Some(r) => r.clone(),
            None => self.connection.close_reason().map(|r| describe(&r)).unwrap_or_else(|| "lane closed".into()),
        }
    }
}

/// A connection error in words, naming the TLS alert when the handshake failed
/// (QUIC reports alerts as bare numbers: "error 116").
pub fn describe(e: &quinn::ConnectionError) -> String {
    let text = e.to_string();
    let code = match e {
        quinn::ConnectionError::TransportError(t) => Some(u64::from(t.code)),
        quinn::ConnectionError::ConnectionClosed(c) => Some(u64::from(c.error_code)),
        _ => None,
    };
    match code {
        Some(c) if (0x100..0x200).contains(&c) => {
            let alert = match c & 0xff {
                40 => "handshake_failure",
                42 => "bad_certificate",
                43 => "unsupported_certificate",
                44 => "certificate_revoked",
                45 => "certificate_expired",
                46 => "certificate_unknown",
                48 => "unknown_ca (certificate from another CA)",
                51 => "decrypt_error (signature does not verify: another CA of the same name?)",
                49 => "access_denied",
                116 => "certificate_required (no client certificate presented)",
                120 => "no_application_protocol (ALPN mismatch)",
                _ => "other TLS alert",
            };
            format!("{text} [TLS alert: {alert}]")
        }
        _ => text,
    }
}

/// A client-only endpoint on `addr` (what `quinn::Endpoint::client` makes,
/// on a socket with burst-sized buffers: [`crate::socket`]).
fn client_endpoint(addr: SocketAddr, packets: Packets) -> std::io::Result<quinn::Endpoint> {
    crate::socket::endpoint(addr, packets, quinn::EndpointConfig::default(), None)
}
