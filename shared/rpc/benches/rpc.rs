//! RPC benchmark over loopback: 1 KiB requests with a small reply (Ping without
//! echo: the shape of an add), server and clients in one process on this
//! machine's cores, real QUIC with mTLS.
//!
//! Phases:
//! - `qd1`: one connection, one request at a time (pure round-trip latency);
//! - `1conn`: one connection, WINDOW requests in flight (pipelining);
//! - `16conn`: 16 connections (16 client endpoints), WINDOW/16 in flight each;
//! - `bulk`: 3 connections (a catch-up reader's three bookies), 4 requests of
//!   BENCH_BULK_BYTES (1 MiB, a batch read's frame) in flight each: the
//!   transport's ceiling in MB/s for one receiving process, with no disk,
//!   no digest and no storage behind it.
//!
//! - `tls-tcp`: the reference for `bulk`: the same TLS (rustls, the same
//!   certificates, verification and cipher order) over 3 TCP connections on
//!   loopback, each writing BENCH_BULK_BYTES records as fast as the server
//!   reads them, one thread per end of each connection: what a transport
//!   with the kernel's TCP segmentation and no QUIC costs.
//!
//! Run: `make bench-rpc` (= `cargo bench -p quire-rpc --bench rpc`).
//! Environment: BENCH_SECS (per phase, default 5), BENCH_PAYLOAD (bytes, 1024),
//! BENCH_WINDOW (requests in flight in the pipelined phases, 256),
//! BENCH_UDP_PAYLOAD_BYTES and BENCH_UDP_OFFLOAD (on/off): the packet setting
//! (`quire_rpc::Packets`, default 6 550 with offload on), BENCH_PHASES
//! (default `qd1,1conn,16conn,bulk,tls-tcp`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use quire_pki::{CertAuthority, IssueOptions, Validity};
use quire_proto::v1::PingRequest;
use quire_proto::Role;
use quire_rpc::server::{ControlOnly, ServerOptions};
use quire_rpc::{ClientOptions, Credentials, PeerClient, RpcClient, Server, ServerIdentity};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn creds(ca: &CertAuthority, role: Role, id: &str) -> Credentials {
    let c = ca.issue(role, id, &IssueOptions::default()).unwrap();
    Credentials::from_pem(ca.cert_pem(), &c.cert_pem, &c.key_pem).unwrap()
}

struct Outcome {
    requests: u64,
    elapsed: Duration,
    hist: Histogram<u64>,
}

async fn drive(peers: Vec<PeerClient>, per_peer: usize, payload: Bytes, secs: u64) -> Outcome {
    // Warm up: connections up, caches hot.
    for p in &peers {
        for _ in 0..100 {
            p.call(PingRequest { payload: payload.clone(), echo: false }).await.unwrap();
        }
    }
    let start = Instant::now();
    let end = start + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for p in &peers {
        for _ in 0..per_peer {
            let p = p.clone();
            let payload = payload.clone();
            tasks.push(tokio::spawn(async move {
                let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
                let mut n = 0u64;
                while Instant::now() < end {
                    let t = Instant::now();
                    p.call(PingRequest { payload: payload.clone(), echo: false }).await.expect("ping");
                    h.record(t.elapsed().as_micros().max(1) as u64).unwrap();
                    n += 1;
                }
                (n, h)
            }));
        }
    }
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
    let mut requests = 0;
    for t in tasks {
        let (n, h) = t.await.unwrap();
        requests += n;
        hist.add(h).unwrap();
    }
    Outcome { requests, elapsed: start.elapsed(), hist }
}

fn report(name: &str, connections: usize, in_flight: usize, payload_bytes: usize, o: &Outcome) {
    let rps = o.requests as f64 / o.elapsed.as_secs_f64();
    println!(
        "RESULT phase={name} connections={connections} in_flight={in_flight} requests={} reqs_per_s={:.0} mb_per_s={:.0} p50_us={} p99_us={} p999_us={} max_us={}",
        o.requests,
        rps,
        rps * payload_bytes as f64 / 1e6,
        o.hist.value_at_quantile(0.50),
        o.hist.value_at_quantile(0.99),
        o.hist.value_at_quantile(0.999),
        o.hist.max(),
    );
}

/// The bulk phase's packets as its connections counted them (client side:
/// what it sent): packets a second, the path's MTU, and any loss or black
/// hole (a send the kernel refused counts as lost: a drop here means the
/// packet size and the transport disagree).
fn path_report(
    name: &str,
    peers: &[PeerClient],
    before: &[quinn::ConnectionStats],
    rcvbuf_errors_before: Option<u64>,
    elapsed: Duration,
    bound: u16,
) {
    let mut sent = 0u64;
    let mut datagrams = 0u64;
    let mut lost = 0u64;
    let mut black_holes = 0u64;
    let mut mtu = u16::MAX;
    for (p, b) in peers.iter().zip(before) {
        let a = p.connection_stats().expect("connected");
        sent += a.path.sent_packets - b.path.sent_packets;
        datagrams += a.udp_tx.datagrams - b.udp_tx.datagrams;
        lost += a.path.lost_packets - b.path.lost_packets;
        black_holes += a.path.black_holes_detected;
        mtu = mtu.min(a.path.current_mtu);
    }
    let s = elapsed.as_secs_f64();
    // Datagrams the kernel dropped for a full receive buffer, machine-wide
    // (the bench is alone on the machine): a loss there is the receiver
    // falling behind, not the packet size.
    let rcvbuf = match (rcvbuf_errors_before, rcvbuf_errors()) {
        (Some(b), Some(a)) => (a - b).to_string(),
        _ => "unknown".into(),
    };
    println!(
        "PATH phase={name} path_mtu={mtu} packets_per_s={:.0} datagrams_per_s={:.0} lost_packets={lost} black_holes={black_holes} rcvbuf_errors={rcvbuf}",
        sent as f64 / s,
        datagrams as f64 / s,
    );
    if black_holes > 0 || mtu < bound {
        println!(
            "PATH CHECK FAILED: loopback carries {bound} bytes, the connections reached {mtu} with {black_holes} black holes"
        );
    }
}

/// `RcvbufErrors` of /proc/net/snmp's Udp line.
fn rcvbuf_errors() -> Option<u64> {
    let snmp = std::fs::read_to_string("/proc/net/snmp").ok()?;
    let mut udp = snmp.lines().filter(|l| l.starts_with("Udp:"));
    let (names, values) = (udp.next()?, udp.next()?);
    let i = names.split_whitespace().position(|n| n == "RcvbufErrors")?;
    values.split_whitespace().nth(i)?.parse().ok()
}

/// The `tls-tcp` phase: megabytes a second the server's threads read over
/// `connections` TLS-over-TCP connections in `secs`.
fn tls_over_tcp(server: &Credentials, client: &Credentials, connections: usize, record: usize, secs: u64) -> f64 {
    use std::io::{Read, Write};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let server_config = Arc::new(server.tls_server_config().unwrap());
    let client_config = Arc::new(client.tls_client_config().unwrap());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let received = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let measuring = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for _ in 0..connections {
        let tcp = std::net::TcpStream::connect(addr).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        for t in [&tcp, &accepted] {
            t.set_nodelay(true).unwrap();
        }
        let (config, received, measuring) = (server_config.clone(), received.clone(), measuring.clone());
        threads.push(std::thread::spawn(move || {
            let conn = rustls::ServerConnection::new(config).unwrap();
            let mut tls = rustls::StreamOwned::new(conn, accepted);
            let mut buf = vec![0u8; 1 << 20];
            loop {
                match tls.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) if measuring.load(Ordering::Relaxed) => {
                        received.fetch_add(n as u64, Ordering::Relaxed);
                    }
                    Ok(_) => {}
                }
            }
        }));
        let (config, stop) = (client_config.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            let name = rustls_pki_types::ServerName::try_from(Role::Bookie.server_name()).unwrap();
            let conn = rustls::ClientConnection::new(config, name).unwrap();
            let mut tls = rustls::StreamOwned::new(conn, tcp);
            let data = vec![0x5au8; record];
            while !stop.load(Ordering::Relaxed) {
                tls.write_all(&data).unwrap();
            }
            tls.conn.send_close_notify();
            let _ = tls.flush();
        }));
    }
    // A second of warm-up (handshakes, windows open), then the measure.
    std::thread::sleep(Duration::from_secs(1));
    measuring.store(true, Ordering::Relaxed);
    let start = Instant::now();
    std::thread::sleep(Duration::from_secs(secs));
    let bytes = received.load(Ordering::Relaxed);
    let elapsed = start.elapsed();
    measuring.store(false, Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    bytes as f64 / elapsed.as_secs_f64() / 1e6
}

fn main() {
    let secs = env("BENCH_SECS", 5);
    let packets = quire_rpc::Packets::new(
        env("BENCH_UDP_PAYLOAD_BYTES", quire_rpc::Packets::DEFAULT.payload_bytes().into()) as u16,
        std::env::var("BENCH_UDP_OFFLOAD").map_or(true, |v| v != "off"),
    )
    .unwrap_or_else(|e| panic!("BENCH_UDP_PAYLOAD_BYTES / BENCH_UDP_OFFLOAD: {e}"));
    packets.install().unwrap();
    let phases = std::env::var("BENCH_PHASES").unwrap_or_else(|_| "qd1,1conn,16conn,bulk,tls-tcp".into());
    let phase = |name: &str| phases.split(',').any(|p| p == name);
    let size = env("BENCH_PAYLOAD", 1024) as usize;
    let window = env("BENCH_WINDOW", 256) as usize;
    let bulk = env("BENCH_BULK_BYTES", 1 << 20) as usize;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async move {
        let ca = CertAuthority::generate("bench", Validity::days(1)).unwrap();
        let server_creds = creds(&ca, Role::Bookie, "1");
        let client_creds = creds(&ca, Role::Client, "bench");
        let server = Server::bind(
            "127.0.0.1:0".parse().unwrap(),
            &server_creds,
            ServerIdentity { instance_id: "bench".into(), version: "bench".into() },
            Arc::new(ControlOnly),
            ServerOptions::default(),
        )
        .unwrap();
        let addr = server.local_addr().to_string();
        let payload = Bytes::from(vec![0xa5u8; size]);
        println!(
            "rpc bench: payload={size} B request, empty reply; {secs} s per phase; window={window}; {} cores; \
             udp_payload_bytes={} udp_offload={}",
            std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
            packets.payload_bytes(),
            if packets.offload() { "on" } else { "off" },
        );

        let client = RpcClient::new(&client_creds, ClientOptions::default()).unwrap();
        let peer = client.peer(&addr, Role::Bookie, None);
        if phase("qd1") {
            let o = drive(vec![peer.clone()], 1, payload.clone(), secs).await;
            report("qd1", 1, 1, size, &o);
        }
        if phase("1conn") {
            let o = drive(vec![peer], window, payload.clone(), secs).await;
            report("1conn", 1, window, size, &o);
        }

        let mut clients = Vec::new();
        let mut peers = Vec::new();
        for _ in 0..16 {
            let c = RpcClient::new(&client_creds, ClientOptions::default()).unwrap();
            peers.push(c.peer(&addr, Role::Bookie, None));
            clients.push(c);
        }
        if phase("16conn") {
            let o = drive(peers.clone(), (window / 16).max(1), payload, secs).await;
            report("16conn", 16, (window / 16).max(1) * 16, size, &o);
        }
        if phase("bulk") {
            // Connections up before the stats are taken.
            for p in &peers[..3] {
                p.call(PingRequest { payload: Bytes::new(), echo: false }).await.unwrap();
            }
            let before: Vec<_> = peers[..3].iter().map(|p| p.connection_stats().expect("connected")).collect();
            let rcvbuf_before = rcvbuf_errors();
            let o = drive(peers[..3].to_vec(), 4, Bytes::from(vec![0x5au8; bulk]), secs).await;
            report("bulk", 3, 12, bulk, &o);
            path_report("bulk", &peers[..3], &before, rcvbuf_before, o.elapsed, packets.payload_bytes());
        }
        if phase("tls-tcp") {
            let (s, c) = (server_creds.clone(), client_creds.clone());
            let mb_per_s = tokio::task::spawn_blocking(move || tls_over_tcp(&s, &c, 3, bulk, secs)).await.unwrap();
            println!("RESULT phase=tls-tcp connections=3 record_bytes={bulk} mb_per_s={mb_per_s:.0}");
        }

        for c in clients {
            c.close(Duration::from_millis(100)).await;
        }
        client.close(Duration::from_millis(100)).await;
        server.shutdown(Duration::from_secs(1)).await;
    });
}
