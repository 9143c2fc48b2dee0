//! A minimal HTTP/1.0 client for the gateway writer: one request per
//! connection, bounded by timeouts, every failure an error value (a killed
//! or partitioned gateway is the normal case here, not a panic).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(15);
/// Replies are small JSON documents; more is a broken reply.
const MAX_REPLY_BYTES: u64 = 1 << 20;

fn blocking(addr: &str, method: &str, path: &str, body: &[u8]) -> std::io::Result<(u16, String)> {
    let sa: SocketAddr = addr.parse().map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let mut s = TcpStream::connect_timeout(&sa, Duration::from_secs(3))?;
    s.set_read_timeout(Some(TIMEOUT))?;
    s.set_write_timeout(Some(TIMEOUT))?;
    // Entries are raw bytes; every other body is JSON.
    let kind = if path.ends_with("/entries") { "application/octet-stream" } else { "application/json" };
    let head = format!(
        "{method} {path} HTTP/1.0\r\nHost: quire\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())?;
    s.write_all(body)?;
    let mut raw = Vec::new();
    s.take(MAX_REPLY_BYTES).read_to_end(&mut raw)?;
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let status = raw
        .get(9..12)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("not an HTTP reply: {raw:.80}")))?;
    let body = raw.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Ok((status, body))
}

/// One request: (status, body), or the I/O error that ended it.
pub async fn call(addr: &str, method: &str, path: &str, body: &[u8]) -> std::io::Result<(u16, String)> {
    let (addr, method, path, body) = (addr.to_string(), method.to_string(), path.to_string(), body.to_vec());
    tokio::task::spawn_blocking(move || blocking(&addr, &method, &path, &body))
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())))
}
