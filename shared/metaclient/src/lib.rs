//! A client of the metadata service.
//!
//! It keeps the address of the replica that last answered as leader and sends
//! every request there. A follower's NOT_LEADER answer names the leader; an
//! unreachable replica or an election in progress (METADATA_UNAVAILABLE) moves
//! the client on to the next replica, after a short pause, until the deadline.
//!
//! Retrying is safe for reads and for refusals that guarantee nothing ran
//! (NOT_LEADER, no connection). A write whose outcome is unknown (the
//! connection broke or the deadline passed after it was sent) is returned to
//! the caller as it is: only the caller knows how to check whether it applied
//! (re-read the ledger and compare, as with any compare-and-set).

use std::sync::Mutex;
use std::time::Duration;

use quire_proto::method::{Call, ServiceKind};
use quire_proto::v1::{self, ErrorCode};
use quire_proto::{Method, Role};
use quire_rpc::{CallOptions, RpcClient, RpcError};
use tokio::time::Instant;

/// Client settings.
#[derive(Debug, Clone)]
pub struct MetaClientOptions {
    /// Longest one call may take, retries included.
    pub deadline: Duration,
    /// Longest one attempt on one replica may take.
    pub attempt_timeout: Duration,
    /// Pause before trying the next replica after an unavailable one.
    pub retry_pause: Duration,
    /// How long a replica that stopped answering (timed out, unreachable)
    /// is passed over, and a follower's hint naming it ignored: followers go
    /// on naming a killed leader until their election timers fire, and
    /// following that hint cost an attempt timeout each time. About one
    /// election: a new leader slow to answer its first call is passed over
    /// no longer than that.
    pub suspect_for: Duration,
}

impl Default for MetaClientOptions {
    fn default() -> Self {
        MetaClientOptions {
            deadline: Duration::from_secs(15),
            // About a failover (docs/benchmarks.md, "Metadata failover"): a
            // killed leader costs a call no more than the election does. A
            // metadata call takes milliseconds; a write that outlives this
            // is answered as of unknown outcome, which every caller settles.
            attempt_timeout: Duration::from_secs(1),
            retry_pause: Duration::from_millis(50),
            suspect_for: Duration::from_millis(1500),
        }
    }
}

/// The metadata service, as one endpoint.
pub struct MetaClient {
    rpc: RpcClient,
    replicas: Vec<String>,
    leader: Mutex<Option<String>>,
    next: Mutex<usize>,
    /// Replicas that stopped answering, and since when.
    suspects: Mutex<Vec<(String, Instant)>>,
    opts: MetaClientOptions,
}

/// Requests that change nothing: retried at another replica when the
/// connection is lost or the attempt times out.
fn reads(m: Method) -> bool {
    use Method::*;
    matches!(
        m,
        GetLedger
            | ListLedgers
            | WatchLedger
            | ListBookies
            | WatchBookies
            | ListRevoked
            | GetLog
            | ListLogs
            | WatchLog
            | GetCursor
            // A replica's status: the fault suite's nemesis asks it for the
            // leader right after a power cut, when the replica it was
            // connected to restarts (seed 98 at 60 s: reset by peer).
            | MetadataStatus
    )
}

impl MetaClient {
    /// A client of the replicas at `replicas` (host:port each).
    pub fn new(rpc: RpcClient, replicas: Vec<String>, opts: MetaClientOptions) -> MetaClient {
        assert!(!replicas.is_empty(), "a metadata client needs at least one replica address");
        MetaClient {
            rpc,
            replicas,
            leader: Mutex::new(None),
            next: Mutex::new(0),
            suspects: Mutex::new(Vec::new()),
            opts,
        }
    }

    /// The address last seen answering as leader.
    pub fn leader(&self) -> Option<String> {
        self.leader.lock().expect("leader lock").clone()
    }

    fn pick(&self) -> String {
        if let Some(l) = self.leader() {
            return l;
        }
        let mut n = self.next.lock().expect("next lock");
        // Round robin, passing over suspects unless every replica is one.
        let len = self.replicas.len();
        let start = *n;
        let i = (0..len).map(|k| (start + k) % len).find(|i| !self.suspect(&self.replicas[*i])).unwrap_or(start % len);
        *n = i + 1;
        self.replicas[i].clone()
    }

    /// Whether `addr` stopped answering within `suspect_for`.
    fn suspect(&self, addr: &str) -> bool {
        let now = Instant::now();
        let mut s = self.suspects.lock().expect("suspects lock");
        s.retain(|(_, since)| now.saturating_duration_since(*since) < self.opts.suspect_for);
        s.iter().any(|(a, _)| a == addr)
    }

    /// Stops preferring `addr`; the next pick starts after it, so a replica
    /// that failed is not the very next one tried.
    fn forget(&self, addr: &str) {
        let mut l = self.leader.lock().expect("leader lock");
        if l.as_deref() == Some(addr) {
            *l = None;
        }
        if let Some(i) = self.replicas.iter().position(|r| r == addr) {
            *self.next.lock().expect("next lock") = i + 1;
        }
    }

    /// As [`MetaClient::forget`], and `addr` is passed over for a while: it
    /// did not answer at all (killed, cut off), as opposed to answering
    /// that it is not the leader.
    fn suspect_now(&self, addr: &str) {
        self.forget(addr);
        let mut s = self.suspects.lock().expect("suspects lock");
        s.retain(|(a, _)| a != addr);
        s.push((addr.to_string(), Instant::now()));
    }

    /// `addr` answered: it is no suspect.
    fn answered(&self, addr: &str) {
        let mut s = self.suspects.lock().expect("suspects lock");
        if !s.is_empty() {
            s.retain(|(a, _)| a != addr);
        }
    }

    /// Watches the bookie registry until `done` holds for it, or `wait` passes
    /// (then `Ok(None)`). Returns the registry that satisfied it.
    pub async fn wait_for_registry(
        &self,
        wait: Duration,
        mut done: impl FnMut(&[v1::BookieRecord]) -> bool,
    ) -> Result<Option<Vec<v1::BookieRecord>>, RpcError> {
        let deadline = Instant::now() + wait;
        let mut version = 0;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let req = v1::WatchBookiesRequest {
                after_version: version,
                timeout_ms: left.as_millis().min(u32::MAX as u128) as u32,
            };
            let w = self.call_waiting(req, left).await?;
            if done(&w.bookies) {
                return Ok(Some(w.bookies));
            }
            if w.timed_out || Instant::now() >= deadline {
                return Ok(None);
            }
            version = w.version;
        }
    }

    /// Keeps `list` equal to the metadata service's deny list of certificate
    /// serials (issue #20 item 6), for as long as it runs: a long poll on
    /// the list's version, so a revocation reaches every service within a
    /// round trip of being committed. Errors are retried after a pause (the
    /// list in force stays meanwhile); spawn it beside the service.
    pub async fn follow_deny_list(&self, list: quire_rpc::DenyList) {
        const WAIT: Duration = Duration::from_secs(30);
        let mut failing = false;
        loop {
            let req = v1::ListRevokedRequest { after_version: list.version(), wait_ms: WAIT.as_millis() as u32 };
            match self.call_waiting(req, WAIT).await {
                Ok(r) => {
                    if failing {
                        tracing::info!("following the certificate deny list again");
                        failing = false;
                    }
                    // Versions only grow: an older list (a lagging replica's
                    // answer at its timeout) would let a revoked certificate
                    // back in.
                    if r.version > list.version() {
                        let n = r.revoked.len();
                        list.replace(r.version, r.revoked.into_iter().map(|c| c.serial));
                        tracing::info!(version = r.version, revoked = n, "certificate deny list installed");
                    }
                }
                Err(e) => {
                    if !failing {
                        tracing::warn!(error = %e, "cannot follow the certificate deny list; the last one stays in force");
                        failing = true;
                    }
                    tokio::time::sleep(self.opts.retry_pause.max(Duration::from_millis(500))).await;
                }
            }
        }
    }

    /// Sends `req` to the leader, following redirects and retrying what is safe.
    pub async fn call<C: Call + Clone>(&self, req: C) -> Result<C::Response, RpcError> {
        self.call_waiting(req, Duration::ZERO).await
    }

    /// As [`MetaClient::call`], giving up after `deadline` (retries
    /// included) rather than the client's own: for callers that must answer
    /// their own caller sooner (a bookie's check of a new ledger).
    pub async fn call_within<C: Call + Clone>(&self, req: C, deadline: Duration) -> Result<C::Response, RpcError> {
        self.call_until(req, Duration::ZERO, deadline).await
    }

    /// As [`MetaClient::call`], for a long poll that may legitimately take `wait`
    /// on the server before answering.
    pub async fn call_waiting<C: Call + Clone>(&self, req: C, wait: Duration) -> Result<C::Response, RpcError> {
        self.call_until(req, wait, self.opts.deadline).await
    }

    async fn call_until<C: Call + Clone>(
        &self,
        req: C,
        wait: Duration,
        deadline: Duration,
    ) -> Result<C::Response, RpcError> {
        debug_assert_eq!(C::METHOD.service(), ServiceKind::Metadata);
        let start = Instant::now();
        let deadline = start + deadline + wait;
        let idempotent = reads(C::METHOD);
        loop {
            let addr = self.pick();
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(RpcError::Timeout {
                    method: C::METHOD.name(),
                    peer: addr,
                    elapsed_ms: start.elapsed().as_millis() as u64,
                });
            }
            let attempt = (self.opts.attempt_timeout + wait).min(left);
            let peer = self.rpc.peer(&addr, Role::Metadata, None);
            match peer.call_full(req.clone(), CallOptions::timeout(attempt)).await {
                Ok(r) => {
                    self.answered(&addr);
                    *self.leader.lock().expect("leader lock") = Some(addr);
                    return Ok(r.body);
                }
                Err(RpcError::Remote { code: ErrorCode::NotLeader, leader_hint, .. }) => {
                    self.answered(&addr);
                    // A hint naming a replica that just stopped answering is
                    // the follower's memory of a dead leader: ask around
                    // until someone names the new one.
                    let hint = leader_hint.filter(|h| *h != addr && !self.suspect(h));
                    let known = hint.is_some();
                    *self.leader.lock().expect("leader lock") = hint;
                    if !known {
                        self.forget(&addr);
                        tokio::time::sleep(self.opts.retry_pause.min(left)).await;
                    }
                }
                Err(RpcError::Remote { code: ErrorCode::MetadataUnavailable, .. }) => {
                    self.answered(&addr);
                    self.forget(&addr);
                    tokio::time::sleep(self.opts.retry_pause.min(left)).await;
                }
                Err(e @ (RpcError::Unavailable { .. } | RpcError::WrongPeer { .. })) => {
                    tracing::debug!(replica = %addr, error = %e, "metadata replica unavailable");
                    self.suspect_now(&addr);
                    tokio::time::sleep(self.opts.retry_pause.min(left)).await;
                }
                Err(e @ (RpcError::ConnectionLost { .. } | RpcError::Timeout { .. })) if idempotent => {
                    tracing::debug!(replica = %addr, error = %e, "retrying a read elsewhere");
                    self.suspect_now(&addr);
                }
                Err(e @ (RpcError::ConnectionLost { .. } | RpcError::Timeout { .. })) => {
                    // A write may have happened: the caller decides whether to
                    // retry. But the next call must not go back to a leader
                    // that stopped answering (killed, cut off): a bookie's
                    // lease renewals did so until its lease ran out (fault
                    // suite, seed 3).
                    self.suspect_now(&addr);
                    return Err(e);
                }
                Err(e) => return Err(e),
            }
        }
    }
}
