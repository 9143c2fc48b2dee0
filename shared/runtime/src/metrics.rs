//! A Prometheus text endpoint for services without an HTTP server of their
//! own: `GET /metrics` on a TCP address, answered from a render function,
//! one short-lived connection at a time, with bounded reads and timeouts (a
//! scraper that stalls or sends garbage costs one connection, nothing more).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Renders the exposition text on each scrape.
pub type Render = Arc<dyn Fn() -> String + Send + Sync>;

/// Most request bytes read before answering (a request head, no body).
const MAX_REQUEST_BYTES: usize = 8 * 1024;
/// Scrapes served at once.
const MAX_CONNECTIONS: usize = 16;

/// Binds `addr`; the bound address (port 0 picks one).
pub async fn bind(addr: SocketAddr) -> std::io::Result<(TcpListener, SocketAddr)> {
    let l = TcpListener::bind(addr).await?;
    let a = l.local_addr()?;
    Ok((l, a))
}

/// Serves scrapes until the task is dropped.
pub async fn serve(listener: TcpListener, render: Render) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok((mut sock, _)) = listener.accept().await else { continue };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            continue; // at the bound: drop the connection
        };
        let render = render.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let _ = tokio::time::timeout(Duration::from_secs(5), answer(&mut sock, &render)).await;
        });
    }
}

async fn answer(sock: &mut tokio::net::TcpStream, render: &Render) -> std::io::Result<()> {
    let mut buf = vec![0u8; MAX_REQUEST_BYTES];
    let mut n = 0;
    while n < buf.len() && !buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
        let r = sock.read(&mut buf[n..]).await?;
        if r == 0 {
            break;
        }
        n += r;
    }
    let head = String::from_utf8_lossy(&buf[..n]);
    let mut parts = head.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (status, ctype, body) = if method == "GET" && (path == "/metrics" || path.starts_with("/metrics?")) {
        ("200 OK", "text/plain; version=0.0.4", render())
    } else {
        ("404 Not Found", "text/plain", "only GET /metrics here\n".to_string())
    };
    let resp = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    sock.write_all(resp.as_bytes()).await?;
    sock.shutdown().await
}

pub use quire_metrics::{labelled, metric, Histogram};

#[cfg(test)]
mod tests {
    use super::*;

    async fn get(addr: SocketAddr, req: &[u8]) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(req).await.unwrap();
        s.shutdown().await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn scrapes_are_answered_and_anything_else_is_not_found() {
        let (l, addr) = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let render: Render = Arc::new(|| {
            let mut s = String::new();
            metric(&mut s, "quire_test_total", "counter", "A test counter.", 7);
            s
        });
        let server = tokio::spawn(serve(l, render));
        let ok = get(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(ok.starts_with("HTTP/1.1 200 OK"), "{ok}");
        assert!(ok.contains("# TYPE quire_test_total counter\nquire_test_total 7\n"), "{ok}");
        let nf = get(addr, b"POST /other HTTP/1.1\r\n\r\n").await;
        assert!(nf.starts_with("HTTP/1.1 404"), "{nf}");
        // Garbage, then an early close: answered or dropped, never a crash.
        let _ = get(addr, &[0xff; 100]).await;
        let again = get(addr, b"GET /metrics HTTP/1.1\r\n\r\n").await;
        assert!(again.starts_with("HTTP/1.1 200 OK"));
        server.abort();
    }
}
