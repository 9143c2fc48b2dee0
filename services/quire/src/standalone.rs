//! `quire standalone`: a whole cluster on one machine, as real processes on
//! loopback: 3 metadata replicas, 3 bookies (one rack each), the auditor, a
//! replication worker and the gateway, each with its own certificate (mTLS),
//! all data under one directory. Writes and reads a first ledger, prints the
//! HTTP API's URL, and runs until Ctrl-C (or stops at once with --oneshot).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bytes::Bytes;
use clap::Args;
use quire_client::{Client, ClientOptions, CreateLedger};
use quire_metaclient::{MetaClient, MetaClientOptions};
use quire_pki::{init_dir, IssueOptions, LocalCluster};
use quire_proto::Role;
use quire_rpc::{Credentials, RpcClient, TlsFiles};
use quire_runtime::ShutdownSignals;

#[derive(Debug, Args)]
pub struct StandaloneArgs {
    /// Where certificates, data and logs go.
    #[arg(long, default_value = "data")]
    data_dir: PathBuf,
    /// Address of the gateway's HTTP API.
    #[arg(long, default_value = "127.0.0.1:8080")]
    http: String,
    /// Added to every QUIC port (metadata 4181-4183, bookies 3181-3183,
    /// auditor 5181, worker 5281, gateway 6181), to run two side by side.
    #[arg(long, default_value_t = 0)]
    port_offset: u16,
    /// Start, check every service, write and read a first ledger, then stop.
    #[arg(long)]
    oneshot: bool,
}

struct Managed {
    name: String,
    child: Child,
}

/// The processes, stopped (SIGTERM, then SIGKILL) when dropped.
struct Cluster {
    procs: Vec<Managed>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for p in self.procs.iter().rev() {
            let _ = Command::new("kill").args(["-TERM", &p.child.id().to_string()]).status();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        for p in self.procs.iter_mut() {
            while Instant::now() < deadline {
                if let Ok(Some(_)) = p.child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            if !matches!(p.child.try_wait(), Ok(Some(_))) {
                eprintln!("{} did not stop in time; killing it", p.name);
                let _ = p.child.kill();
                let _ = p.child.wait();
            }
        }
    }
}

fn bin_dir() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("locate the quire binary")?;
    Ok(exe.parent().context("the quire binary's directory")?.to_path_buf())
}

/// Async worker threads per service: nine processes share this machine's
/// cores, and a runtime with a thread per core each would spend its time
/// in context switches (on 2 cores, one worker each cut the cluster's CPU
/// per add by about a tenth: docs/benchmarks.md). About a third of the
/// cores each, for the three bookies that do most of the work; an explicit
/// QUIRE_WORKER_THREADS in the environment wins.
fn worker_threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cores / 3).max(1)
}

fn spawn(cluster: &mut Cluster, bin: &Path, name: &str, args: &[String], run_dir: &Path) -> anyhow::Result<PathBuf> {
    let ready = run_dir.join(format!("{name}.ready"));
    let _ = std::fs::remove_file(&ready);
    let log = std::fs::File::create(run_dir.join(format!("{name}.log"))).context("create a log file")?;
    let mut cmd = Command::new(bin);
    if std::env::var_os("QUIRE_WORKER_THREADS").is_none() {
        cmd.env("QUIRE_WORKER_THREADS", worker_threads().to_string());
    }
    // The packet setting this command was given (flag or environment) is
    // every service's: both ends of a connection must take the packets.
    cmd.envs(quire_runtime::PacketArgs::env(quire_rpc::Packets::of_process()));
    let child = cmd
        .args(args)
        .arg("--ready-file")
        .arg(&ready)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("start {}", bin.display()))?;
    cluster.procs.push(Managed { name: name.to_string(), child });
    Ok(ready)
}

/// Waits for `name`'s ready file. A SIGTERM or SIGINT meanwhile ends the
/// start-up: the error drops the cluster, which stops what was started.
fn wait_ready(
    cluster: &mut Cluster,
    name: &str,
    ready: &Path,
    run_dir: &Path,
    rt: &tokio::runtime::Runtime,
    signals: &mut ShutdownSignals,
) -> anyhow::Result<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(addr) = std::fs::read_to_string(ready) {
            if !addr.is_empty() {
                return Ok(addr);
            }
        }
        if let Some(p) = cluster.procs.iter_mut().find(|p| p.name == name) {
            if let Ok(Some(status)) = p.child.try_wait() {
                bail!("{name} exited ({status}); see {}", run_dir.join(format!("{name}.log")).display());
            }
        }
        if Instant::now() >= deadline {
            bail!("{name} did not start in 30 s; see {}", run_dir.join(format!("{name}.log")).display());
        }
        let waited = rt.block_on(async { tokio::time::timeout(Duration::from_millis(50), signals.recv()).await });
        if let Ok(sig) = waited {
            bail!("{sig} while starting {name}: stopping what was started");
        }
    }
}

pub fn run(a: StandaloneArgs) -> anyhow::Result<()> {
    // Signals are caught from the start: one that came while children
    // were starting would otherwise end this process the default way and
    // leave them running, unsupervised (a test killing a cluster it had
    // just seen ready did that).
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let mut signals = {
        let _in_runtime = rt.enter();
        ShutdownSignals::install()?
    };
    let bin = bin_dir()?;
    let data = a.data_dir.clone();
    let certs = data.join("certs");
    let run_dir = data.join("run");
    std::fs::create_dir_all(&run_dir).with_context(|| format!("create {}", run_dir.display()))?;
    if !certs.join("ca.pem").exists() {
        init_dir(&certs, "quire-standalone", &LocalCluster { metadata: 3, bookies: 3 }, &IssueOptions::default())
            .context("create certificates")?;
    }
    let o = a.port_offset;
    let meta_addrs: Vec<String> = (1..=3).map(|i| format!("127.0.0.1:{}", 4180 + i + o)).collect();
    let peers = meta_addrs.iter().enumerate().map(|(i, a)| format!("{}={a}", i + 1)).collect::<Vec<_>>().join(",");
    let metadata = meta_addrs.join(",");
    let common = |id: &str, listen: String| -> Vec<String> {
        vec!["--certs-dir".into(), certs.display().to_string(), "--id".into(), id.into(), "--listen".into(), listen]
    };
    let mut cluster = Cluster { procs: Vec::new() };
    let mut started = Vec::new();
    for i in 1..=3 {
        let mut args = common(&i.to_string(), meta_addrs[i - 1].clone());
        args.extend([
            "--peers".into(),
            peers.clone(),
            "--data-dir".into(),
            data.join(format!("metadata-{i}")).display().to_string(),
        ]);
        let name = format!("metadata-{i}");
        started.push((name.clone(), spawn(&mut cluster, &bin.join("quire-metadata"), &name, &args, &run_dir)?));
    }
    for i in 1..=3u16 {
        let mut args = common(&i.to_string(), format!("127.0.0.1:{}", 3180 + i + o));
        args.extend([
            "--data-dir".into(),
            data.join(format!("bookie-{i}")).display().to_string(),
            "--metadata".into(),
            metadata.clone(),
            "--rack".into(),
            format!("rack-{i}"),
        ]);
        let name = format!("bookie-{i}");
        started.push((name.clone(), spawn(&mut cluster, &bin.join("quire-bookie"), &name, &args, &run_dir)?));
    }
    let others = [
        ("quire-auditor", "auditor-1", 5181u16, vec!["--metadata".to_string(), metadata.clone()]),
        ("quire-replication-worker", "replication-worker-1", 5281, vec!["--metadata".to_string(), metadata.clone()]),
        (
            "quire-gateway",
            "gateway-1",
            6181,
            vec!["--metadata".to_string(), metadata.clone(), "--http-listen".into(), a.http.clone()],
        ),
    ];
    for (b, name, port, extra) in others {
        let mut args = common("1", format!("127.0.0.1:{}", port + o));
        args.extend(extra);
        started.push((name.to_string(), spawn(&mut cluster, &bin.join(b), name, &args, &run_dir)?));
    }
    for (name, ready) in &started {
        let addr = wait_ready(&mut cluster, name, ready, &run_dir, &rt, &mut signals)?;
        println!("{name} at {addr}");
    }

    rt.block_on(async {
        let creds = Credentials::load(&TlsFiles::in_dir(&certs, Role::Admin, "1")).context("load credentials")?;
        let rpc = RpcClient::new(&creds, quire_rpc::ClientOptions::default())?;
        let meta = Arc::new(MetaClient::new(rpc.clone(), meta_addrs.clone(), MetaClientOptions::default()));
        // Every bookie registered.
        let bookies = meta
            .wait_for_registry(Duration::from_secs(20), |b| b.len() >= 3)
            .await
            .context("watch the bookie registry")?
            .context("fewer than 3 bookies registered within 20 s")?;
        for b in &bookies {
            println!("bookie {} registered at {} ({}), instance {}", b.bookie_id, b.address, b.rack, b.instance_id);
        }
        // A first ledger, written, closed and read back.
        let client = Client::new(rpc.clone(), meta, ClientOptions::default());
        let w = client.create(CreateLedger::default()).await.context("create the first ledger")?;
        for line in ["hello", "quire"] {
            w.add(Bytes::from_static(line.as_bytes())).await.context("append")?;
        }
        let closed = w.close().await.context("close the first ledger")?;
        let r = client.open(closed.ledger_id).await?;
        let entries = r.read_range(0, 1, 10).await?;
        let text: Vec<String> = entries.iter().map(|e| String::from_utf8_lossy(&e.payload).into_owned()).collect();
        println!(
            "first ledger {} (E=3 Qw=3 Qa=2 on bookies {:?}) written, closed at entry {} and read back: {:?}",
            closed.ledger_id,
            closed.last_segment().members.iter().map(|m| m.bookie_id.as_str()).collect::<Vec<_>>(),
            closed.last_entry_id,
            text
        );
        rpc.close(Duration::from_millis(100)).await;
        anyhow::Ok(())
    })?;
    println!();
    println!("HTTP API: http://{}/v1/ledgers", a.http);
    println!("  curl -X POST http://{}/v1/ledgers", a.http);
    println!("  curl --data-binary hello http://{}/v1/ledgers/<id>/entries", a.http);
    println!("quire standalone up (data and logs under {}).", data.display());
    if a.oneshot {
        return Ok(());
    }
    println!("Ctrl-C to stop.");
    rt.block_on(signals.recv());
    println!("stopping");
    drop(cluster);
    Ok(())
}
