//! Mutual TLS: every refusal case is refused, with the reason visible at both
//! ends, and the correct case is served.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::*;
use quire_pki::Validity;
use quire_proto::v1::{self, ErrorCode, PingRequest, ServerInfoRequest};
use quire_proto::Role;
use quire_rpc::server::ControlOnly;
use quire_rpc::{tls, RpcClient, RpcError};
use quire_testkit::{eventually, wait_until};

async fn ping(c: &RpcClient, addr: &str, role: Role) -> Result<v1::PingResponse, RpcError> {
    c.peer(addr, role, None).call(PingRequest { payload: bytes::Bytes::from_static(b"hi"), echo: true }).await
}

fn refused_count(s: &quire_rpc::ServerHandle) -> u64 {
    s.stats().handshakes_refused.load(Ordering::Relaxed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_certificate_is_served_and_its_identity_seen() {
    let pki = Pki::new();
    let server = serve(&pki.creds(Role::Bookie, "1"), std::sync::Arc::new(ControlOnly));
    let addr = server.local_addr().to_string();
    let c = client(&pki.creds(Role::Admin, "ops"));
    let p = c.peer(&addr, Role::Bookie, Some("1"));
    let info = p.call(ServerInfoRequest {}).await.unwrap();
    assert_eq!(info.role, v1::Role::Bookie as i32);
    assert_eq!(info.id, "1");
    assert_eq!(info.instance_id, "instance-a");
    assert_eq!(info.caller_role, v1::Role::Admin as i32);
    assert_eq!(info.caller_id, "ops");
    assert_eq!(ping(&c, &addr, Role::Bookie).await.unwrap().payload, &b"hi"[..]);
    assert_eq!(refused_count(&server), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_certificate_is_refused() {
    let pki = Pki::new();
    let server = serve(&pki.creds(Role::Bookie, "1"), std::sync::Arc::new(ControlOnly));
    let addr = server.local_addr().to_string();
    let cfg = tls::anonymous_client_config(pki.ca.cert_pem(), Duration::from_secs(5)).unwrap();
    let c = RpcClient::with_config(cfg, quick_options()).unwrap();
    // TLS 1.3: the client finishes its side first; the refusal arrives when it uses a stream.
    let err = ping(&c, &addr, Role::Bookie).await.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, RpcError::ConnectionLost { .. } | RpcError::Unavailable { .. }), "{err:?}");
    assert!(text.contains("certificate_required") || text.contains("no certificates"), "{text}");
    wait_until(Duration::from_secs(5), "server to count the refusal", || (refused_count(&server) == 1).then_some(()))
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_from_another_ca_is_refused() {
    let pki = Pki::new();
    let rogue = Pki::named("rogue");
    let server = serve(&pki.creds(Role::Bookie, "1"), std::sync::Arc::new(ControlOnly));
    let addr = server.local_addr().to_string();
    // Trusts the real CA (so it accepts the server) but holds a rogue certificate.
    let c = client(&rogue.creds_trusting(&pki, Role::Admin, "1", Validity::days(1)));
    let err = ping(&c, &addr, Role::Bookie).await.unwrap_err();
    assert!(err.to_string().contains("UnknownIssuer"), "{err}");
    wait_until(Duration::from_secs(5), "server to count the refusal", || (refused_count(&server) == 1).then_some(()))
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_certificate_from_another_ca_is_refused() {
    let pki = Pki::new();
    let rogue = Pki::named("rogue");
    let server =
        serve(&rogue.creds_trusting(&pki, Role::Bookie, "1", Validity::days(1)), std::sync::Arc::new(ControlOnly));
    let addr = server.local_addr().to_string();
    let c = client(&pki.creds(Role::Admin, "1"));
    let err = ping(&c, &addr, Role::Bookie).await.unwrap_err();
    assert!(matches!(err, RpcError::Unavailable { .. }), "{err:?}");
    assert!(err.to_string().contains("UnknownIssuer"), "{err}");
    wait_until(Duration::from_secs(5), "server to log the refused handshake", || {
        (refused_count(&server) == 1).then_some(())
    })
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_client_certificate_is_refused() {
    let pki = Pki::new();
    let server = serve(&pki.creds(Role::Bookie, "1"), std::sync::Arc::new(ControlOnly));
    let addr = server.local_addr().to_string();
    let c = client(&pki.creds_with(Role::Admin, "1", Validity::expired()));
    let err = ping(&c, &addr, Role::Bookie).await.unwrap_err();
    assert!(err.to_string().contains("certificate_expired") || err.to_string().contains("Expired"), "{err}");
    wait_until(Duration::from_secs(5), "server to count the refusal", || (refused_count(&server) == 1).then_some(()))
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_server_certificate_is_refused() {
    let pki = Pki::new();
    let server = serve(&pki.creds_with(Role::Bookie, "1", Validity::expired()), std::sync::Arc::new(ControlOnly));
    let addr = server.local_addr().to_string();
    let c = client(&pki.creds(Role::Admin, "1"));
    let err = ping(&c, &addr, Role::Bookie).await.unwrap_err();
    assert!(matches!(err, RpcError::Unavailable { .. }), "{err:?}");
    assert!(err.to_string().contains("certificate expired"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_may_only_call_its_methods() {
    let pki = Pki::new();
    let bookie = FakeBookie::new();
    let server = serve(&pki.creds(Role::Bookie, "1"), bookie.clone());
    let addr = server.local_addr().to_string();
    let add = || v1::AddEntryRequest {
        entry: Some(v1::Entry::sealed(1, 0, -1, bytes::Bytes::from_static(b"\0x"))),
        ..Default::default()
    };

    // Another bookie may not add entries.
    let as_bookie = client(&pki.creds(Role::Bookie, "2"));
    let err = as_bookie.peer(&addr, Role::Bookie, None).call(add()).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::PermissionDenied), "{err}");
    assert!(err.to_string().contains("role bookie may not call add_entry"), "{err}");

    // Only metadata replicas may speak Raft.
    let as_gateway = client(&pki.creds(Role::Gateway, "1"));
    let raft = v1::RaftRequest { kind: 1, payload: bytes::Bytes::new() };
    let err = as_gateway.peer(&addr, Role::Bookie, None).call(raft).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::PermissionDenied), "{err}");

    // The gateway may add.
    let ok = as_gateway.peer(&addr, Role::Bookie, None).call(add()).await.unwrap();
    assert_eq!(ok.entry_id, 0);
    assert_eq!(server.stats().permission_denied.load(Ordering::Relaxed), 2);
    assert_eq!(*bookie.arrivals.lock().unwrap(), vec![0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_of_another_role_or_id_is_refused_by_the_client() {
    let pki = Pki::new();
    let server = serve(&pki.creds(Role::Metadata, "1"), std::sync::Arc::new(ControlOnly));
    let addr = server.local_addr().to_string();
    let c = client(&pki.creds(Role::Admin, "1"));
    // Dialled as a bookie: the certificate is not valid for bookie.quire.
    let err = ping(&c, &addr, Role::Bookie).await.unwrap_err();
    assert!(err.to_string().contains("not valid for name \"bookie.quire\""), "{err}");
    // Right role, wrong id.
    let err = c.peer(&addr, Role::Metadata, Some("2")).call(PingRequest::default()).await.unwrap_err();
    assert!(matches!(err, RpcError::WrongPeer { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_same_named_ca_with_another_key_is_refused() {
    let pki = Pki::new();
    let impostor = Pki::new(); // same subject name, different key
    let server = serve(&pki.creds(Role::Bookie, "1"), std::sync::Arc::new(ControlOnly));
    let addr = server.local_addr().to_string();
    let c = client(&impostor.creds_trusting(&pki, Role::Admin, "1", Validity::days(1)));
    let err = ping(&c, &addr, Role::Bookie).await.unwrap_err();
    assert!(err.to_string().contains("BadSignature"), "{err}");
    wait_until(Duration::from_secs(5), "server to count the refusal", || (refused_count(&server) == 1).then_some(()))
        .unwrap();
}

/// Rotation without a restart (issue #20 item 6): a server whose certificate
/// expired is given a new one and serves again; a client given new
/// credentials presents them on its next connection; credentials of another
/// identity are refused and the old ones stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_are_replaced_while_serving() {
    let pki = Pki::new();
    let server = serve(&pki.creds_with(Role::Bookie, "1", Validity::expired()), std::sync::Arc::new(ControlOnly));
    let addr = server.local_addr().to_string();
    let expired_client = pki.creds_with(Role::Admin, "1", Validity::expired());
    let c = client(&pki.creds(Role::Admin, "1"));
    assert!(ping(&c, &addr, Role::Bookie).await.is_err(), "an expired server certificate is refused");
    server.reload(&pki.creds(Role::Bookie, "1")).unwrap();
    let c = client(&pki.creds(Role::Admin, "1"));
    ping(&c, &addr, Role::Bookie).await.unwrap();

    // Another identity's credentials: refused, and the server still serves.
    let err = server.reload(&pki.creds(Role::Bookie, "2")).unwrap_err();
    assert!(err.to_string().contains("names bookie/2"), "{err}");
    let c2 = client(&pki.creds(Role::Admin, "1"));
    ping(&c2, &addr, Role::Bookie).await.unwrap();

    // A client's rotated credentials are used by its next connection.
    let rotating = client(&expired_client);
    assert!(ping(&rotating, &addr, Role::Bookie).await.is_err(), "the server refuses an expired client");
    rotating.set_credentials(&pki.creds(Role::Admin, "1")).unwrap();
    // The failed connection is retried after the client's backoff.
    eventually(Duration::from_secs(10), "a connection with the new credentials", || async {
        ping(&rotating, &addr, Role::Bookie).await.ok()
    })
    .await
    .unwrap();
}

/// Issue #20 item 6: a certificate on the deny list is refused at the
/// handshake (a server refuses such a client, a client such a server), a
/// live connection of it is closed when the list changes, and taking it off
/// the list lets it in again. Other certificates are untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_certificate_is_refused_and_its_live_connections_closed() {
    let pki = Pki::new();
    let deny = quire_rpc::DenyList::new();
    let bookie = pki.creds(Role::Bookie, "1");
    let server = serve(&bookie.clone().with_deny_list(deny.clone()), std::sync::Arc::new(ControlOnly));
    let addr = server.local_addr().to_string();
    let leaked = pki.creds(Role::Client, "1");
    let c = client(&leaked);
    ping(&c, &addr, Role::Bookie).await.unwrap();

    deny.replace(1, [leaked.serial().unwrap()]);
    let secs = Duration::from_secs(10);
    eventually(secs, "the live connection closed", || async {
        (server.stats().connections_revoked.load(Ordering::Relaxed) == 1).then_some(())
    })
    .await
    .unwrap();
    let err = eventually(secs, "a refusal", || async { ping(&c, &addr, Role::Bookie).await.err() }).await.unwrap();
    assert!(err.to_string().to_lowercase().contains("revoked"), "{err}");
    ping(&client(&pki.creds(Role::Client, "2")), &addr, Role::Bookie).await.unwrap();

    // A client that holds the list closes its live connection to a server
    // whose certificate joins it, and refuses the server's next handshake.
    let wary_list = quire_rpc::DenyList::new();
    let wary = client(&pki.creds(Role::Admin, "1").with_deny_list(wary_list.clone()));
    ping(&wary, &addr, Role::Bookie).await.unwrap();
    wary_list.replace(1, [bookie.serial().unwrap()]);
    let err = eventually(secs, "the client to drop the revoked server", || async {
        ping(&wary, &addr, Role::Bookie).await.err().filter(|e| e.to_string().to_lowercase().contains("revoked"))
    })
    .await
    .unwrap();
    assert!(matches!(err, quire_rpc::RpcError::Unavailable { .. }), "{err:?}");

    // Taken off the list: served again (after the client's reconnect backoff).
    deny.replace(2, Vec::<String>::new());
    eventually(secs, "the certificate served again", || async { ping(&c, &addr, Role::Bookie).await.ok() })
        .await
        .unwrap();
}
