//! Test support shared by the workspace's integration tests.
//!
//! - [`bin_path`]: the path of a workspace binary built beside the test.
//! - [`Process`]: a child process that is killed (SIGKILL) when dropped, so a
//!   failing test never leaves services running.
//! - [`wait_until`]: poll a condition until a deadline; the way tests wait for
//!   another process, never a bare sleep.
//! - [`otlp`]: an in-process OTLP trace receiver.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

pub mod otlp;
pub mod ports;

/// The path of workspace binary `name` in the same target profile directory as
/// the running test executable (`target/<profile>/deps/<test>` -> `target/<profile>/<name>`).
pub fn bin_path(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let mut dir = exe.parent().expect("test binary has a directory").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    let p = dir.join(name);
    assert!(p.exists(), "{} not built; run `cargo build --release --workspace --bins` (make test does)", p.display());
    p
}

/// A free TCP address on 127.0.0.1 (a metrics endpoint's), reserved for
/// this test process as [`free_udp_ports`] are.
pub fn free_tcp_addr() -> String {
    format!("127.0.0.1:{}", ports::reserve(1)[0])
}

/// One HTTP/1.0 request on its own connection (so the answer is never
/// chunked): (status, body). For tests talking to the gateway, a metrics
/// endpoint or Prometheus.
pub fn http(addr: &str, method: &str, path: &str, body: &[u8]) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).expect("read timeout");
    let head = format!(
        "{method} {path} HTTP/1.0\r\nHost: quire\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).expect("write head");
    s.write_all(body).expect("write body");
    let mut raw = String::new();
    s.read_to_string(&mut raw).expect("read answer");
    let status = raw.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = raw.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}

/// One keep-alive HTTP/1.1 connection, for benches that send many requests
/// (answers must carry Content-Length, as the gateway's do).
pub struct HttpConn {
    w: std::net::TcpStream,
    r: std::io::BufReader<std::net::TcpStream>,
}

impl HttpConn {
    /// Connects to `addr`; panics if it cannot.
    pub fn new(addr: &str) -> HttpConn {
        let s = std::net::TcpStream::connect(addr).expect("connect");
        s.set_nodelay(true).expect("nodelay");
        HttpConn { r: std::io::BufReader::new(s.try_clone().expect("clone")), w: s }
    }

    /// Sends a request and reads its answer: (status, body).
    pub fn call(&mut self, method: &str, path: &str, body: &[u8]) -> (u16, Vec<u8>) {
        use std::io::{BufRead, Read, Write};
        let head = format!("{method} {path} HTTP/1.1\r\nHost: quire\r\nContent-Length: {}\r\n\r\n", body.len());
        self.w.write_all(head.as_bytes()).expect("write head");
        self.w.write_all(body).expect("write body");
        let mut line = String::new();
        self.r.read_line(&mut line).expect("read status");
        let status: u16 = line.split_whitespace().nth(1).and_then(|c| c.parse().ok()).expect("a status line");
        let mut len = 0usize;
        loop {
            line.clear();
            self.r.read_line(&mut line).expect("read header");
            if line == "\r\n" {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                len = v.trim().parse().expect("a length");
            }
        }
        let mut body = vec![0; len];
        self.r.read_exact(&mut body).expect("read body");
        (status, body)
    }
}

/// `GET /metrics` from a Prometheus endpoint; panics unless it answers 200.
pub fn scrape(addr: &str) -> String {
    let (status, body) = http(addr, "GET", "/metrics", b"");
    assert_eq!(status, 200, "{body}");
    body
}

/// Free UDP ports on 127.0.0.1 for services whose addresses must be known
/// before they start (a Raft membership): below the kernel's ephemeral
/// range and reserved across test processes until this one exits
/// ([`ports`]; bound-and-released ports raced with other tests' clients).
pub fn free_udp_ports(n: usize) -> Vec<u16> {
    ports::reserve(n)
}

/// Polls `cond` every few milliseconds until it returns `Some` or `timeout` passes.
pub fn wait_until<T>(timeout: Duration, what: &str, mut cond: impl FnMut() -> Option<T>) -> anyhow::Result<T> {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(2);
    loop {
        if let Some(v) = cond() {
            return Ok(v);
        }
        if Instant::now() >= deadline {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::park_timeout(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// [`wait_until`] for async conditions: polls `cond` (backing off from 2 ms
/// to 50 ms between polls) until it yields, or fails after `timeout`.
pub async fn eventually<T, F: std::future::Future<Output = Option<T>>>(
    timeout: Duration,
    what: &str,
    mut cond: impl FnMut() -> F,
) -> anyhow::Result<T> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut pause = Duration::from_millis(2);
    loop {
        if let Some(v) = cond().await {
            return Ok(v);
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// A child process killed on drop.
pub struct Process {
    name: String,
    child: Child,
    log: PathBuf,
}

impl Process {
    /// Starts `bin` with `args`; stdout and stderr go to `<log_dir>/<name>.log`.
    pub fn spawn(name: &str, bin: &Path, args: &[&str], log_dir: &Path) -> anyhow::Result<Process> {
        Self::spawn_with_env(name, bin, args, &[], log_dir)
    }

    /// As [`Process::spawn`], with environment variables added (crash points,
    /// `QUIRE_FAILPOINTS`).
    pub fn spawn_with_env(
        name: &str,
        bin: &Path,
        args: &[&str],
        env: &[(String, String)],
        log_dir: &Path,
    ) -> anyhow::Result<Process> {
        let log = log_dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log).with_context(|| format!("create {}", log.display()))?;
        let err = out.try_clone()?;
        let child = Command::new(bin)
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("spawn {}", bin.display()))?;
        Ok(Process { name: name.to_string(), child, log })
    }

    /// Waits for the process to write its bound address to `ready_file`.
    pub fn wait_ready(&mut self, ready_file: &Path, timeout: Duration) -> anyhow::Result<String> {
        let name = self.name.clone();
        let log = self.log.clone();
        wait_until(timeout, &format!("{name} to become ready"), || {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(Err(anyhow::anyhow!(
                    "{name} exited with {status} before becoming ready; log:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                )));
            }
            std::fs::read_to_string(ready_file).ok().filter(|s| !s.is_empty()).map(Ok)
        })?
    }

    /// The OS process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its exit status if it has exited, without waiting.
    pub fn try_wait(&mut self) -> std::io::Result<Option<std::process::ExitStatus>> {
        self.child.try_wait()
    }

    /// The process's output so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends a signal by name (`STOP`, `CONT`, `TERM`, ...).
    pub fn signal(&self, sig: &str) -> anyhow::Result<()> {
        let ok = Command::new("kill").arg(format!("-{sig}")).arg(self.child.id().to_string()).status()?.success();
        anyhow::ensure!(ok, "kill -{sig} {} failed", self.child.id());
        Ok(())
    }

    /// Waits for the process to exit by itself, at most `timeout`, and reaps it.
    pub fn wait_exit(&mut self, timeout: Duration) -> anyhow::Result<std::process::ExitStatus> {
        let name = self.name.clone();
        wait_until(timeout, &format!("{name} to exit"), || self.child.try_wait().ok().flatten())
    }

    /// SIGKILL, and reaps the process: a crash, as far as the process can tell.
    pub fn kill(&mut self) -> anyhow::Result<std::process::ExitStatus> {
        self.child.kill().context("SIGKILL")?;
        self.child.wait().context("reap killed process")
    }

    /// Sends SIGTERM and waits for the exit status, at most `timeout`.
    pub fn terminate(&mut self, timeout: Duration) -> anyhow::Result<std::process::ExitStatus> {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().context("run kill")?;
        let name = self.name.clone();
        wait_until(timeout, &format!("{name} to exit"), || self.child.try_wait().ok().flatten())
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A metadata cluster of real `quire-metadata` processes on loopback, for
/// tests of the services that use it. Certificates must exist in `certs`
/// (`quire certs init`) for replicas 1..=n.
pub struct MetadataCluster {
    /// The replicas' addresses, by id (1-based).
    pub addrs: Vec<String>,
    /// The processes, by id - 1.
    pub procs: Vec<Process>,
    /// Each replica's metrics address, when started with metrics.
    pub metrics: Vec<String>,
    /// Each replica's arguments and ready file, to start it again.
    launches: Vec<(Vec<String>, PathBuf)>,
    env: Vec<(String, String)>,
    dir: PathBuf,
}

impl MetadataCluster {
    /// Starts `n` replicas with data under `dir` and waits until each serves.
    pub fn start(certs: &Path, dir: &Path, n: usize) -> anyhow::Result<MetadataCluster> {
        Self::start_with_env(certs, dir, n, &[])
    }

    /// As [`MetadataCluster::start`], with environment variables for every replica.
    pub fn start_with_env(
        certs: &Path,
        dir: &Path,
        n: usize,
        env: &[(String, String)],
    ) -> anyhow::Result<MetadataCluster> {
        Self::start_inner(certs, dir, n, env, false, Some(RaftTiming::FAST))
    }

    fn start_inner(
        certs: &Path,
        dir: &Path,
        n: usize,
        env: &[(String, String)],
        with_metrics: bool,
        timing: Option<RaftTiming>,
    ) -> anyhow::Result<MetadataCluster> {
        let ports = free_udp_ports(n);
        let mut metrics = Vec::new();
        let addrs: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let peers = addrs.iter().enumerate().map(|(i, a)| format!("{}={a}", i + 1)).collect::<Vec<_>>().join(",");
        let mut c = MetadataCluster {
            addrs: addrs.clone(),
            procs: Vec::new(),
            metrics: Vec::new(),
            launches: Vec::new(),
            env: env.to_vec(),
            dir: dir.to_path_buf(),
        };
        for (i, addr) in addrs.iter().enumerate() {
            let id = (i + 1).to_string();
            let ready = dir.join(format!("metadata-{id}.ready"));
            let data = dir.join(format!("metadata-{id}"));
            let mut args: Vec<String> = [
                "--certs-dir",
                certs.to_str().context("certs path")?,
                "--id",
                &id,
                "--listen",
                addr,
                "--ready-file",
                ready.to_str().context("ready path")?,
                "--data-dir",
                data.to_str().context("data path")?,
                "--peers",
                &peers,
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            if let Some(t) = timing {
                args.extend([
                    "--heartbeat-ms".into(),
                    t.heartbeat_ms.to_string(),
                    "--election-timeout-ms".into(),
                    t.election_timeout_ms.to_string(),
                ]);
            }
            if with_metrics {
                let metrics_addr = free_tcp_addr();
                args.extend(["--metrics-listen".into(), metrics_addr.clone()]);
                metrics.push(metrics_addr);
            }
            c.launches.push((args, ready));
            let p = c.launch(i)?;
            c.procs.push(p);
        }
        c.metrics = metrics;
        Ok(c)
    }

    fn launch(&self, i: usize) -> anyhow::Result<Process> {
        let (args, ready) = &self.launches[i];
        let _ = std::fs::remove_file(ready);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let name = format!("metadata-{}", i + 1);
        let mut p = Process::spawn_with_env(&name, &bin_path("quire-metadata"), &args, &self.env, &self.dir)?;
        p.wait_ready(ready, Duration::from_secs(30))?;
        Ok(p)
    }

    /// Kills replica `i` (0-based; SIGKILL, if it runs) and starts it again
    /// on its data and address.
    pub fn restart(&mut self, i: usize) -> anyhow::Result<()> {
        let _ = self.procs[i].kill();
        self.procs[i] = self.launch(i)?;
        Ok(())
    }
}

/// The metadata replicas' Raft timing (`--heartbeat-ms`,
/// `--election-timeout-ms`).
#[derive(Debug, Clone, Copy)]
pub struct RaftTiming {
    /// Heartbeat interval.
    pub heartbeat_ms: u64,
    /// Shortest election timeout (the longest is twice this).
    pub election_timeout_ms: u64,
}

impl RaftTiming {
    /// Short timeouts, so that tests of leader changes finish quickly.
    pub const FAST: RaftTiming = RaftTiming { heartbeat_ms: 100, election_timeout_ms: 500 };
}

/// One bookie process of a [`TestCluster`], at a fixed address so that it can
/// be restarted, or replaced by a fresh instance, where it was.
pub struct LocalBookie {
    /// Its id ("1", "2", ...).
    pub id: String,
    /// Its address.
    pub addr: String,
    /// Its rack.
    pub rack: String,
    /// Its data directory (a replacement gets a new one).
    pub data: PathBuf,
    /// The process, while it runs.
    pub proc: Option<Process>,
    /// Environment variables for its next start.
    pub env: Vec<(String, String)>,
    /// Flags for its next starts, after the cluster's own.
    pub args: Vec<String>,
    generation: u32,
}

/// Metadata replicas and bookies as real processes on loopback, sharing one
/// certificate directory: the cluster the client's tests run against.
pub struct TestCluster {
    /// Where certificates, data and logs live.
    pub dir: PathBuf,
    /// The certificate directory.
    pub certs: PathBuf,
    /// The metadata replicas.
    pub metadata: MetadataCluster,
    /// The bookies, by id - 1.
    pub bookies: Vec<LocalBookie>,
    extra: Vec<String>,
    /// Environment variables for every process the cluster starts.
    env: Vec<(String, String)>,
    /// Every process's metrics endpoint, (job, address), when started with
    /// [`TestCluster::start_with_metrics`]: metadata, bookies, and the
    /// auditors and workers started by [`TestCluster::start_service`].
    pub metrics: std::sync::Mutex<Vec<(String, String)>>,
    with_metrics: bool,
}

impl TestCluster {
    /// Starts 3 metadata replicas and one bookie per entry of `racks` (bookie
    /// `i` in rack `racks[i-1]`), each with `extra` flags, and waits until
    /// every bookie is registered. Certificates must exist in `certs`.
    pub fn start(dir: &Path, certs: &Path, racks: &[&str], extra: &[&str]) -> anyhow::Result<TestCluster> {
        Self::start_with_env(dir, certs, racks, extra, &[])
    }

    /// As [`TestCluster::start`], with environment variables for every
    /// process it starts (metadata replicas, bookies, other services).
    pub fn start_with_env(
        dir: &Path,
        certs: &Path,
        racks: &[&str],
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> anyhow::Result<TestCluster> {
        Self::start_inner(dir, certs, racks, extra, env, false, Some(RaftTiming::FAST))
    }

    /// As [`TestCluster::start`], the metadata replicas with `timing`
    /// (`None`: the binary's own defaults, as deployed).
    pub fn start_with_raft_timing(
        dir: &Path,
        certs: &Path,
        racks: &[&str],
        extra: &[&str],
        timing: Option<RaftTiming>,
    ) -> anyhow::Result<TestCluster> {
        Self::start_inner(dir, certs, racks, extra, &[], false, timing)
    }

    /// As [`TestCluster::start_with_env`], every process also serving
    /// Prometheus metrics on a free port (listed in `metrics`).
    pub fn start_with_metrics(
        dir: &Path,
        certs: &Path,
        racks: &[&str],
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> anyhow::Result<TestCluster> {
        Self::start_inner(dir, certs, racks, extra, env, true, Some(RaftTiming::FAST))
    }

    fn start_inner(
        dir: &Path,
        certs: &Path,
        racks: &[&str],
        extra: &[&str],
        env: &[(&str, &str)],
        with_metrics: bool,
        timing: Option<RaftTiming>,
    ) -> anyhow::Result<TestCluster> {
        let env: Vec<(String, String)> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let metadata = MetadataCluster::start_inner(certs, dir, 3, &env, with_metrics, timing)?;
        let metrics = metadata.metrics.iter().map(|a| ("metadata".to_string(), a.clone())).collect();
        let ports = free_udp_ports(racks.len());
        let mut c = TestCluster {
            dir: dir.to_path_buf(),
            certs: certs.to_path_buf(),
            metadata,
            bookies: Vec::new(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            env,
            metrics: std::sync::Mutex::new(metrics),
            with_metrics,
        };
        for (i, rack) in racks.iter().enumerate() {
            let id = (i + 1).to_string();
            c.bookies.push(LocalBookie {
                data: dir.join(format!("bookie-{id}")),
                id,
                addr: format!("127.0.0.1:{}", ports[i]),
                rack: rack.to_string(),
                proc: None,
                env: Vec::new(),
                args: Vec::new(),
                generation: 0,
            });
            c.start_bookie(i)?;
        }
        Ok(c)
    }

    /// The metadata replicas' addresses, comma-separated (the `--metadata` flag).
    pub fn metadata_flag(&self) -> String {
        self.metadata.addrs.join(",")
    }

    /// Starts bookie `i` (0-based) on its data directory and waits until it serves.
    pub fn start_bookie(&mut self, i: usize) -> anyhow::Result<()> {
        let metadata = self.metadata_flag();
        let b = &mut self.bookies[i];
        b.generation += 1;
        let ready = self.dir.join(format!("bookie-{}-{}.ready", b.id, b.generation));
        let mut args: Vec<String> = [
            "--certs-dir",
            self.certs.to_str().context("certs path")?,
            "--id",
            &b.id,
            "--listen",
            &b.addr,
            "--ready-file",
            ready.to_str().context("ready path")?,
            "--data-dir",
            b.data.to_str().context("data path")?,
            "--metadata",
            &metadata,
            "--rack",
            &b.rack,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(self.extra.iter().cloned());
        args.extend(b.args.iter().cloned());
        if self.with_metrics {
            let addr = free_tcp_addr();
            args.extend(["--metrics-listen".to_string(), addr.clone()]);
            self.metrics.lock().expect("metrics lock").push(("bookie".to_string(), addr));
        }
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let name = format!("bookie-{}-{}", b.id, b.generation);
        let env: Vec<(String, String)> = self.env.iter().chain(b.env.iter()).cloned().collect();
        let mut p = Process::spawn_with_env(&name, &bin_path("quire-bookie"), &argv, &env, &self.dir)?;
        p.wait_ready(&ready, Duration::from_secs(30))?;
        b.proc = Some(p);
        Ok(())
    }

    /// Kills bookie `i` (SIGKILL): a crash.
    pub fn kill_bookie(&mut self, i: usize) -> anyhow::Result<()> {
        if let Some(mut p) = self.bookies[i].proc.take() {
            p.kill()?;
        }
        Ok(())
    }

    /// Stops bookie `i` cleanly (SIGTERM: it flushes and exits).
    pub fn terminate_bookie(&mut self, i: usize) -> anyhow::Result<()> {
        if let Some(mut p) = self.bookies[i].proc.take() {
            p.terminate(Duration::from_secs(30))?;
        }
        Ok(())
    }

    /// Sends `sig` ("STOP", "CONT", ...) to bookie `i`: STOP freezes it with
    /// its connections open, the slow or hung disk a reader must route around.
    pub fn signal_bookie(&self, i: usize, sig: &str) -> anyhow::Result<()> {
        self.bookies[i].proc.as_ref().context("bookie not running")?.signal(sig)
    }

    /// Replaces bookie `i` by a fresh process with empty disks at the same
    /// address and id: a new instance (seed 003's decommission-and-replace).
    pub fn replace_bookie(&mut self, i: usize) -> anyhow::Result<()> {
        self.kill_bookie(i)?;
        let b = &mut self.bookies[i];
        b.data = self.dir.join(format!("bookie-{}-gen{}", b.id, b.generation + 1));
        self.start_bookie(i)
    }

    /// Starts another service of the cluster (`quire-auditor`,
    /// `quire-replication-worker`, `quire-gateway`...) as `id`, pointed at the
    /// metadata service, with `args` added; waits until it serves.
    pub fn start_service(&self, binary: &str, id: &str, args: &[&str]) -> anyhow::Result<Process> {
        let ready = self.dir.join(format!("{binary}-{id}-{}.ready", std::process::id()));
        let _ = std::fs::remove_file(&ready);
        let metadata = self.metadata_flag();
        let mut argv: Vec<&str> = vec![
            "--certs-dir",
            self.certs.to_str().context("certs path")?,
            "--id",
            id,
            "--listen",
            "127.0.0.1:0",
            "--ready-file",
            ready.to_str().context("ready path")?,
            "--metadata",
            &metadata,
        ];
        argv.extend_from_slice(args);
        let metrics_addr = free_tcp_addr();
        let job = binary.trim_start_matches("quire-");
        if self.with_metrics && matches!(binary, "quire-auditor" | "quire-replication-worker") {
            argv.extend(["--metrics-listen", &metrics_addr]);
            self.metrics.lock().expect("metrics lock").push((job.to_string(), metrics_addr.clone()));
        }
        let mut p = Process::spawn_with_env(&format!("{binary}-{id}"), &bin_path(binary), &argv, &self.env, &self.dir)?;
        p.wait_ready(&ready, Duration::from_secs(30))?;
        Ok(p)
    }

    /// Starts a gateway (HTTP on a free port) pointed at the metadata
    /// service, with `args` added; waits until its HTTP API serves and every
    /// bookie of the cluster is registered. Returns it and its HTTP address.
    pub fn start_gateway(&self, args: &[&str]) -> anyhow::Result<(Process, String)> {
        let http_ready = self.dir.join(format!("gateway-http-{}.ready", std::process::id()));
        let _ = std::fs::remove_file(&http_ready);
        let mut argv = vec!["--http-listen", "127.0.0.1:0", "--http-ready-file", http_ready.to_str().context("path")?];
        argv.extend_from_slice(args);
        let mut p = self.start_service("quire-gateway", "1", &argv)?;
        let http_addr = p.wait_ready(&http_ready, Duration::from_secs(30))?;
        let bookies = format!("\"bookies\":{}", self.bookies.len());
        wait_until(Duration::from_secs(20), "the gateway to see every bookie", || {
            let (status, body) = http(&http_addr, "GET", "/readyz", b"");
            (status == 200 && body.contains(&bookies)).then_some(())
        })?;
        Ok((p, http_addr))
    }

    /// Every process's log, for a failing test's message.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for b in &self.bookies {
            if let Some(p) = &b.proc {
                out.push_str(&format!("--- bookie {} ---\n{}\n", b.id, p.log()));
            }
        }
        out
    }
}
