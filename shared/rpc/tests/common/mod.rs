//! Shared fixtures: an in-memory cluster CA, credentials per role, servers on
//! loopback, and a test service standing in for a bookie.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use quire_pki::{CertAuthority, IssueOptions, Validity};
use quire_proto::v1::{request_frame::Body as Req, AddEntryResponse, ReadLacResponse, WaitLacResponse};
use quire_proto::{Method, Role};
use quire_rpc::server::ServerOptions;
use quire_rpc::{
    ClientOptions, Credentials, RequestContext, RpcClient, Server, ServerHandle, ServerIdentity, Service, ServiceFuture,
};

pub struct Pki {
    pub ca: CertAuthority,
}

impl Pki {
    pub fn new() -> Pki {
        Self::named("test")
    }

    pub fn named(cluster: &str) -> Pki {
        Pki { ca: CertAuthority::generate(cluster, Validity::days(30)).unwrap() }
    }

    pub fn creds(&self, role: Role, id: &str) -> Credentials {
        self.creds_with(role, id, Validity::days(30))
    }

    pub fn creds_with(&self, role: Role, id: &str, validity: Validity) -> Credentials {
        let opts = IssueOptions { validity, ..IssueOptions::default() };
        let c = self.ca.issue(role, id, &opts).unwrap();
        Credentials::from_pem(self.ca.cert_pem(), &c.cert_pem, &c.key_pem).unwrap()
    }

    /// A certificate issued by this CA but trusting `other`'s CA: for servers
    /// and clients that must fail the other side's verification.
    pub fn creds_trusting(&self, other: &Pki, role: Role, id: &str, validity: Validity) -> Credentials {
        let opts = IssueOptions { validity, ..IssueOptions::default() };
        let c = self.ca.issue(role, id, &opts).unwrap();
        Credentials::from_pem(other.ca.cert_pem(), &c.cert_pem, &c.key_pem).unwrap()
    }
}

pub fn client(creds: &Credentials) -> RpcClient {
    client_with(creds, quick_options())
}

pub fn quick_options() -> ClientOptions {
    ClientOptions {
        request_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(2),
        backoff_min: Duration::from_millis(10),
        backoff_max: Duration::from_millis(100),
        ..ClientOptions::default()
    }
}

pub fn client_with(creds: &Credentials, opts: ClientOptions) -> RpcClient {
    RpcClient::new(creds, opts).unwrap()
}

pub fn serve(creds: &Credentials, service: Arc<dyn Service>) -> ServerHandle {
    serve_at("127.0.0.1:0".parse().unwrap(), creds, service, "instance-a")
}

pub fn serve_at(addr: SocketAddr, creds: &Credentials, service: Arc<dyn Service>, instance: &str) -> ServerHandle {
    serve_with(addr, creds, service, instance, ServerOptions::default())
}

pub fn serve_with(
    addr: SocketAddr,
    creds: &Credentials,
    service: Arc<dyn Service>,
    instance: &str,
    opts: ServerOptions,
) -> ServerHandle {
    let info = ServerIdentity { instance_id: instance.to_string(), version: "test".to_string() };
    Server::bind(addr, creds, info, service, opts).unwrap()
}

/// A stand-in bookie service:
/// - AddEntry records the entry id in arrival order (in the handler's
///   synchronous part), then answers after `payload[0]` units of work;
/// - ReadLac answers after a permit from `gate` (tests hold requests in flight);
/// - WaitLac never answers (tests deadlines).
pub struct FakeBookie {
    pub arrivals: Mutex<Vec<u64>>,
    pub gate: Arc<tokio::sync::Semaphore>,
}

impl FakeBookie {
    pub fn new() -> Arc<FakeBookie> {
        Arc::new(FakeBookie { arrivals: Mutex::new(Vec::new()), gate: Arc::new(tokio::sync::Semaphore::new(0)) })
    }
}

impl Service for FakeBookie {
    fn serves(&self, m: Method) -> bool {
        matches!(m, Method::AddEntry | Method::ReadLac | Method::WaitLac | Method::Raft)
    }

    fn call(&self, _ctx: RequestContext, body: Req) -> ServiceFuture {
        match body {
            Req::AddEntry(a) => {
                let e = a.entry.unwrap_or_default();
                self.arrivals.lock().unwrap().push(e.entry_id);
                let work = e.payload.first().copied().unwrap_or(0) as u32;
                Box::pin(async move {
                    // Simulated service time (yields, no timer), so that
                    // requests with more work complete after later ones.
                    for _ in 0..work * 20 {
                        tokio::task::yield_now().await;
                    }
                    Ok(AddEntryResponse { ledger_id: e.ledger_id, entry_id: e.entry_id }.into())
                })
            }
            Req::ReadLac(_) => {
                let gate = self.gate.clone();
                Box::pin(async move {
                    let _p = gate.acquire().await.expect("gate open");
                    Ok(ReadLacResponse { last_add_confirmed: 41 }.into())
                })
            }
            Req::WaitLac(_) => Box::pin(async {
                std::future::pending::<()>().await;
                Ok(WaitLacResponse::default().into())
            }),
            _ => Box::pin(async { Err(quire_rpc::ServiceError::internal("not in the fake")) }),
        }
    }
}
