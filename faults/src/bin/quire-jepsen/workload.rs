//! The clients whose operations make the history: writers through the
//! client library (pipelined adds), a writer through the HTTP gateway,
//! tailing readers, and recoverers (up to three at once) that fence ledgers under their
//! writers. Every operation is recorded with its invocation and completion
//! time and what the client was told.
//!
//! Payloads name their writer, handle, ledger and sequence number, so a
//! history file can be read by a person; the history keeps only a digest.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use quire_client::sim::rng::Rng;
use quire_client::{Client, ClientError, CreateLedger};
use quire_faults::{Event, History, Op, Outcome};

use crate::http;

/// FNV-1a, 64 bits: the digest recorded for an entry's bytes.
pub fn digest(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// What every client task shares.
pub struct Shared {
    pub history: History,
    pub t0: Instant,
    pub stop: AtomicBool,
    /// Ledgers written in this run: id -> whether a writer still adds to it.
    pub ledgers: Mutex<BTreeMap<u64, bool>>,
    next_handle: AtomicU64,
    /// Operations recorded, for progress lines.
    pub ops: AtomicU64,
}

impl Shared {
    pub fn new(history: History, t0: Instant) -> Shared {
        Shared {
            history,
            t0,
            stop: AtomicBool::new(false),
            ledgers: Mutex::new(BTreeMap::new()),
            next_handle: AtomicU64::new(1),
            ops: AtomicU64::new(0),
        }
    }

    pub fn now_us(&self) -> u64 {
        self.t0.elapsed().as_micros() as u64
    }

    /// An instant of this process on the run's clock.
    pub fn us_at(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.t0).as_micros() as u64
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    pub fn record(&self, process: u32, invoked_us: u64, outcome: Outcome, op: Op, error: Option<String>) {
        let e = Event { process, invoked_us, completed_us: self.now_us(), outcome, op, error };
        // A history that cannot be written makes the run worthless: stop loudly.
        self.history.record(e).expect("write the history");
        self.ops.fetch_add(1, Ordering::Relaxed);
    }

    fn writing(&self, ledger: u64, on: bool) {
        self.ledgers.lock().expect("ledgers lock").insert(ledger, on);
    }

    /// A ledger of the run, chosen by `rng`; only open ones with `open_only`.
    fn pick(&self, rng: &mut Rng, open_only: bool) -> Option<u64> {
        let l = self.ledgers.lock().expect("ledgers lock");
        let ids: Vec<u64> = l.iter().filter(|(_, &w)| w || !open_only).map(|(&id, _)| id).collect();
        (!ids.is_empty()).then(|| *rng.pick(&ids))
    }
}

/// Whether the system said no (the add did not happen as far as it knows),
/// rather than left the outcome open.
fn refused(e: &ClientError) -> bool {
    matches!(
        e,
        ClientError::LedgerFenced(_)
            | ClientError::LedgerClosed(_)
            | ClientError::BadRequest(_)
            | ClientError::EntryTooLarge(_)
            | ClientError::Backpressure(_)
            | ClientError::NoSuchLedger(_)
            | ClientError::LogFenced(_)
    )
}

fn payload(rng: &mut Rng, process: u32, handle: u64, ledger: u64, seq: u64) -> Bytes {
    let mut s = format!("p{process} h{handle} l{ledger} s{seq} ").into_bytes();
    let len = rng.range(16, 1025) as usize;
    while s.len() < len {
        s.push(b'a' + (rng.range(0, 26) as u8));
    }
    Bytes::from(s)
}

pub fn spec() -> CreateLedger {
    CreateLedger { ensemble: 3, write_quorum: 2, ack_quorum: 2, ..CreateLedger::default() }
}

/// A writer through the client library: creates a ledger, adds (up to 8 in
/// flight, one every `pace`) until it has written its quota or an add
/// fails, closes it when the quota is reached, and starts over on a new
/// ledger.
pub async fn writer(process: u32, client: Client, sh: Arc<Shared>, seed: u64, pace: Duration) {
    let mut rng = Rng::new(seed);
    while !sh.stopped() {
        let invoked = sh.now_us();
        let w = match client.create(spec()).await {
            Ok(w) => w,
            Err(e) => {
                let outcome = if refused(&e) { Outcome::Fail } else { Outcome::Unknown };
                sh.record(process, invoked, outcome, Op::Create { ledger: None }, Some(e.to_string()));
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let ledger = w.ledger_id();
        sh.record(process, invoked, Outcome::Ok, Op::Create { ledger: Some(ledger) }, None);
        let handle = sh.next_handle.fetch_add(1, Ordering::Relaxed);
        sh.writing(ledger, true);
        let quota = rng.range(20, 400);
        let mut inflight = std::collections::VecDeque::new();
        let mut seq = 0;
        let mut failed = false;
        while !failed && (seq < quota || !inflight.is_empty()) {
            let can_submit = seq < quota && !sh.stopped() && inflight.len() < 8;
            if can_submit {
                let p = payload(&mut rng, process, handle, ledger, seq);
                let d = digest(&p);
                let invoked = sh.now_us();
                match w.submit(p).await {
                    Ok(pending) => {
                        inflight.push_back((pending, invoked, d));
                        // A modest, steady rate: the history stays checkable,
                        // and autorecovery and the replica check keep up
                        // with what the faults destroy (at full speed they
                        // read back half a million entries every pass).
                        tokio::time::sleep(pace).await;
                    }
                    Err(e) => {
                        let outcome = if refused(&e) { Outcome::Fail } else { Outcome::Unknown };
                        let op = Op::Add { ledger, handle, entry: None, digest: d };
                        sh.record(process, invoked, outcome, op, Some(e.to_string()));
                        failed = true;
                    }
                }
                seq += 1;
                continue;
            }
            if sh.stopped() && seq < quota {
                // Stop submitting; collect what is in flight.
                seq = quota;
            }
            let Some((pending, invoked, d)) = inflight.pop_front() else { break };
            match pending.await {
                Ok(added) => {
                    let op = Op::Add { ledger, handle, entry: Some(added.entry_id), digest: d };
                    sh.record(process, invoked, Outcome::Ok, op, None);
                }
                Err(e) => {
                    let outcome = if refused(&e) { Outcome::Fail } else { Outcome::Unknown };
                    let op = Op::Add { ledger, handle, entry: None, digest: d };
                    sh.record(process, invoked, outcome, op, Some(e.to_string()));
                    failed = true;
                }
            }
        }
        // Whatever is still in flight after a failure has an open outcome.
        for (pending, invoked, d) in inflight {
            let (outcome, entry, error) = match pending.await {
                Ok(a) => (Outcome::Ok, Some(a.entry_id), None),
                Err(e) => (if refused(&e) { Outcome::Fail } else { Outcome::Unknown }, None, Some(e.to_string())),
            };
            sh.record(process, invoked, outcome, Op::Add { ledger, handle, entry, digest: d }, error);
        }
        if !failed && !sh.stopped() {
            // A clean close; a failed one is left to recovery (the finale's).
            let _ = w.close().await;
        }
        sh.writing(ledger, false);
    }
}

/// A writer through gateway 1's HTTP API: one append at a time.
pub async fn http_writer(process: u32, http_addr: String, sh: Arc<Shared>, seed: u64) {
    let mut rng = Rng::new(seed);
    let body = serde_json::json!({ "ensemble": 3, "write_quorum": 2, "ack_quorum": 2 }).to_string();
    while !sh.stopped() {
        let invoked = sh.now_us();
        let created = http::call(&http_addr, "POST", "/v1/ledgers", body.as_bytes()).await;
        let (outcome, ledger, error) = match created {
            Ok((201, reply)) => {
                match serde_json::from_str::<serde_json::Value>(&reply).ok().and_then(|v| v["ledger_id"].as_u64()) {
                    Some(id) => (Outcome::Ok, Some(id), None),
                    None => (Outcome::Unknown, None, Some(format!("201 without a ledger id: {reply}"))),
                }
            }
            Ok((code @ 400..=499, reply)) => (Outcome::Fail, None, Some(format!("{code}: {reply}"))),
            Ok((code, reply)) => (Outcome::Unknown, None, Some(format!("{code}: {reply}"))),
            Err(e) => (Outcome::Unknown, None, Some(e.to_string())),
        };
        sh.record(process, invoked, outcome, Op::Create { ledger }, error);
        let Some(ledger) = ledger else {
            tokio::time::sleep(Duration::from_millis(300)).await;
            continue;
        };
        let handle = sh.next_handle.fetch_add(1, Ordering::Relaxed);
        sh.writing(ledger, true);
        let quota = rng.range(10, 200);
        for seq in 0..quota {
            if sh.stopped() {
                break;
            }
            let p = payload(&mut rng, process, handle, ledger, seq);
            let d = digest(&p);
            let invoked = sh.now_us();
            let path = format!("/v1/ledgers/{ledger}/entries");
            let (outcome, entry, error) = match http::call(&http_addr, "POST", &path, &p).await {
                Ok((200, reply)) => {
                    match serde_json::from_str::<serde_json::Value>(&reply).ok().and_then(|v| v["entry_id"].as_u64()) {
                        Some(id) => (Outcome::Ok, Some(id), None),
                        None => (Outcome::Unknown, None, Some(format!("200 without an entry id: {reply}"))),
                    }
                }
                // The gateway's verdicts: fenced or closed (409), not its
                // writer any more (404 after a restart), refused input.
                Ok((code @ (400 | 404 | 409 | 413), reply)) => (Outcome::Fail, None, Some(format!("{code}: {reply}"))),
                Ok((code, reply)) => (Outcome::Unknown, None, Some(format!("{code}: {reply}"))),
                Err(e) => (Outcome::Unknown, None, Some(e.to_string())),
            };
            let ok = outcome == Outcome::Ok;
            sh.record(process, invoked, outcome, Op::Add { ledger, handle, entry, digest: d }, error);
            if !ok {
                break;
            }
        }
        sh.writing(ledger, false);
    }
}

/// A reader: opens a ledger of the run without recovery, asks for the LAC
/// and reads a few entries at or below it (sometimes just past it), again
/// and again.
pub async fn reader(process: u32, client: Client, sh: Arc<Shared>, seed: u64) {
    let mut rng = Rng::new(seed);
    while !sh.stopped() {
        let Some(ledger) = sh.pick(&mut rng, false) else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let r = match client.open(ledger).await {
            Ok(r) => r,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let lac = match r.read_lac().await {
            Ok(lac) => lac,
            Err(_) => continue,
        };
        if lac < 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        let lac = lac as u64;
        let from = rng.range(lac.saturating_sub(30), lac + 1);
        // Mostly at or below the LAC; one read in five also asks for the
        // entries just past it, which must be refused ("no such entry") or,
        // if the LAC moved on meanwhile, be entries that survive recovery.
        let past = if rng.chance(0.2) { 2 } else { 0 };
        let to = (from + rng.range(0, 10)).min(lac + past);
        for entry in from..=to {
            let invoked = sh.now_us();
            let (outcome, digest_read, error) = match r.read(entry).await {
                Ok(e) => (Outcome::Ok, Some(digest(&e.payload)), None),
                Err(ClientError::NoSuchEntry(..)) => (Outcome::Ok, None, None),
                Err(e) => (if refused(&e) { Outcome::Fail } else { Outcome::Unknown }, None, Some(e.to_string())),
            };
            let failed = outcome != Outcome::Ok;
            let lac = Some(r.known_lac());
            sh.record(process, invoked, outcome, Op::Read { ledger, entry, digest: digest_read, lac }, error);
            if failed {
                break;
            }
        }
    }
}

/// The recoverer: every few seconds, fences and recovers a ledger whose
/// writer is still adding (what a new owner of a log does to an old one),
/// often with two or three recoverers at once.
pub async fn recoverer(process: u32, clients: [Client; 2], http_addr: String, sh: Arc<Shared>, seed: u64) {
    let mut rng = Rng::new(seed);
    while !sh.stopped() {
        tokio::time::sleep(Duration::from_millis(rng.range(2_000, 6_000))).await;
        if sh.stopped() {
            break;
        }
        let Some(ledger) = sh.pick(&mut rng, true) else { continue };
        // Half the time two or three recoveries of the one ledger at once,
        // started up to 300 ms apart: this client, the gateway's
        // POST /v1/ledgers/{id}/recover, a second client with connections
        // of its own. Nothing serialises them (issue #19 item 1).
        let n = if rng.chance(0.5) { rng.range(2, 4) } else { 1 };
        let mut runs = Vec::new();
        for k in 0..n {
            let delay = Duration::from_millis(if k == 0 { 0 } else { rng.range(0, 300) });
            let (sh, http_addr) = (sh.clone(), http_addr.clone());
            let client = clients[(k as usize) % 2].clone();
            let by = process + k as u32;
            runs.push(tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let invoked = sh.now_us();
                let (outcome, last_entry, fenced_us, error) = if k == 1 {
                    recover_over_http(&http_addr, ledger, &sh).await
                } else {
                    match client.recover_observed(ledger).await {
                        Ok(r) => (Outcome::Ok, r.meta.last_entry_id, r.fenced_at.map(|t| sh.us_at(t)), None),
                        Err(e) => {
                            (if refused(&e) { Outcome::Fail } else { Outcome::Unknown }, -1, None, Some(e.to_string()))
                        }
                    }
                };
                sh.record(by, invoked, outcome, Op::Recover { ledger, last_entry, fenced_us }, error);
            }));
        }
        for r in runs {
            // A recovery task that panicked fails this task, and so the run.
            r.await.expect("a recovery task panicked");
        }
    }
}

/// The seal watcher: polls the metadata of every ledger a writer still adds
/// to and records when it is first seen closed, by whoever closed it: its
/// writer, a recoverer, or a replication worker, whose recoveries the
/// harness does not run and would otherwise never see. An add invoked
/// after that and acknowledged breaks guarantee 3 (`AckAfterClose`).
pub async fn seal_watcher(process: u32, client: Client, sh: Arc<Shared>) {
    let mut seen = std::collections::BTreeSet::new();
    while !sh.stopped() {
        let open: Vec<u64> = {
            let l = sh.ledgers.lock().expect("ledgers lock");
            l.iter().filter(|(id, &w)| w && !seen.contains(*id)).map(|(&id, _)| id).collect()
        };
        for id in open {
            let invoked = sh.now_us();
            if let Ok(m) = client.metadata(id).await {
                if m.state == quire_client::meta::LedgerState::Closed {
                    let op = Op::Closed { ledger: id, last_entry: m.last_entry_id };
                    sh.record(process, invoked, Outcome::Ok, op, None);
                    seen.insert(id);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `POST /v1/ledgers/{ledger}/recover` on the gateway: the outcome, the
/// recovered last entry, when the fence held, and the error. The gateway
/// says how long fencing took and the whole recovery on its own monotonic
/// clock; the fence held at least `total_us - fence_us` before the reply,
/// which arrived no later than now: a bound on the harness's clock that is
/// never earlier than the fence, so judging from it is sound.
async fn recover_over_http(http_addr: &str, ledger: u64, sh: &Shared) -> (Outcome, i64, Option<u64>, Option<String>) {
    match http::call(http_addr, "POST", &format!("/v1/ledgers/{ledger}/recover"), b"").await {
        Ok((200, body)) => {
            let back_us = sh.now_us();
            let v = serde_json::from_str::<serde_json::Value>(&body).unwrap_or_default();
            let fenced_us = v["recovery"]["fence_us"]
                .as_u64()
                .zip(v["recovery"]["total_us"].as_u64())
                .map(|(fence, total)| back_us.saturating_sub(total.saturating_sub(fence)));
            match v["last_entry_id"].as_i64() {
                Some(last) => (Outcome::Ok, last, fenced_us, None),
                None => (Outcome::Unknown, -1, None, Some(format!("200 without a last entry: {body}"))),
            }
        }
        Ok((status @ (400 | 404 | 409), body)) => (Outcome::Fail, -1, None, Some(format!("{status}: {body}"))),
        Ok((status, body)) => (Outcome::Unknown, -1, None, Some(format!("{status}: {body}"))),
        Err(e) => (Outcome::Unknown, -1, None, Some(e.to_string())),
    }
}
