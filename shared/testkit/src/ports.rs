//! Ports for test services whose addresses must be known before they start
//! (a Raft membership names its peers up front).
//!
//! Binding port 0 and releasing it raced: the kernel hands the same
//! ephemeral range to every socket bound to port 0, QUIC client endpoints
//! included, so another test's client could take the port before the
//! service bound it ("Address already in use", a `make test` red). So
//! ports come from below the ephemeral range, where the kernel never
//! assigns one on its own, and each is reserved across the test processes
//! of this machine by an exclusive lock on a file named after it, held
//! until the process exits (a crashed test frees its ports with it).
//! A port is also probed (TCP and UDP on 127.0.0.1) before it is handed
//! out, in case something else on the machine uses it.

use std::fs::File;
use std::net::{TcpListener, UdpSocket};
use std::path::PathBuf;
use std::sync::Mutex;

/// The locks this process holds: one per port it was handed.
static HELD: Mutex<Vec<File>> = Mutex::new(Vec::new());

/// Lowest port handed out.
const FIRST: u16 = 10_000;

/// The first port of the kernel's ephemeral range (32768 when unknown).
fn ephemeral_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|p| p.parse().ok()))
        .unwrap_or(32_768)
}

fn lock_dir() -> PathBuf {
    let d = std::env::temp_dir().join("quire-testkit-ports");
    std::fs::create_dir_all(&d).expect("create the port-lock directory");
    d
}

/// Whether nothing on the machine listens on `port` (TCP or UDP, loopback).
fn probe(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok() && UdpSocket::bind(("127.0.0.1", port)).is_ok()
}

/// `n` distinct ports, reserved for this process's lifetime.
pub fn reserve(n: usize) -> Vec<u16> {
    let end = ephemeral_start();
    assert!(end > FIRST + 1_000, "the ephemeral port range starts at {end}: no room below it for test ports");
    let span = u32::from(end - FIRST);
    // Start somewhere different in each process so that they rarely try
    // the same files.
    let mut at = (std::process::id().wrapping_mul(2_654_435_761) ^ nanos()) % span;
    let dir = lock_dir();
    let mut out = Vec::with_capacity(n);
    let mut held = HELD.lock().expect("port locks");
    for _ in 0..span {
        if out.len() == n {
            break;
        }
        let port = FIRST + at as u16;
        at = (at + 1) % span;
        let Ok(f) = File::options().create(true).truncate(false).write(true).open(dir.join(format!("{port}.lock")))
        else {
            continue;
        };
        if f.try_lock().is_err() {
            continue; // another test process holds it
        }
        if !probe(port) {
            continue; // in use by something that is not a test (the lock drops with `f`)
        }
        held.push(f);
        out.push(port);
    }
    assert_eq!(out.len(), n, "no {n} free test ports in {FIRST}..{end}");
    out
}

fn nanos() -> u32 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_ports_are_distinct_below_the_ephemeral_range_and_locked() {
        let ports = reserve(8);
        let distinct: std::collections::BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), 8);
        assert!(ports.iter().all(|&p| p >= FIRST && p < ephemeral_start()), "{ports:?}");
        // Held: a second lock on the same file (as another process would take) fails.
        let f = File::options().write(true).open(lock_dir().join(format!("{}.lock", ports[0]))).unwrap();
        assert!(f.try_lock().is_err());
        // And a second reservation never hands them out again.
        let more = reserve(8);
        assert!(more.iter().all(|p| !distinct.contains(p)), "{ports:?} {more:?}");
    }
}
