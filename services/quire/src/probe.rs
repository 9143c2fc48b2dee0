//! `quire ping` and `quire server-info`: probes of any quire server.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use clap::Args;
use quire_proto::v1::{PingRequest, ServerInfoRequest};
use quire_proto::Role;
use quire_rpc::{ClientOptions, Credentials, RpcClient, TlsFiles};

#[derive(Debug, Args)]
pub struct Target {
    /// The server's address, host:port.
    #[arg(long)]
    addr: String,
    /// The role the server's certificate must name.
    #[arg(long)]
    role: Role,
    /// Directory with ca.pem and the caller's certificate.
    #[arg(long, env = "QUIRE_CERTS_DIR")]
    certs_dir: PathBuf,
    /// The caller's certificate: <as-role>-<as-id>.pem in --certs-dir. A
    /// service's health check pings as its own role, so that its container
    /// needs no other role's key.
    #[arg(long, default_value = "admin")]
    as_role: Role,
    /// See --as-role. Without it, the lowest id of --as-role whose
    /// certificate and key are both in --certs-dir.
    #[arg(long)]
    as_id: Option<String>,
    /// Per-request timeout in milliseconds.
    #[arg(long, default_value_t = 5000)]
    timeout_ms: u64,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct PingArgs {
    #[command(flatten)]
    target: Target,
    /// Number of pings, one at a time.
    #[arg(long, default_value_t = 1)]
    count: u32,
    /// Payload size in bytes.
    #[arg(long, default_value_t = 0)]
    size: usize,
}

#[derive(Debug, Args)]
pub struct InfoArgs {
    #[command(flatten)]
    target: Target,
}

/// The ids of `role` with both a certificate and a key in `dir`, lowest
/// first (numerically where ids are numbers).
fn ids_in(dir: &Path, role: Role) -> anyhow::Result<Vec<String>> {
    let prefix = format!("{role}-");
    let entries = std::fs::read_dir(dir).with_context(|| format!("read {}", dir.display()))?;
    let mut ids: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|name| name.strip_prefix(&prefix)?.strip_suffix(".key").map(str::to_string))
        .filter(|id| quire_pki::validate_id(id).is_ok() && role_owns(role, id))
        .filter(|id| dir.join(format!("{prefix}{id}.pem")).exists())
        .collect();
    ids.sort_by_key(|id| (id.parse::<u64>().map_or(1, |_| 0), id.parse::<u64>().unwrap_or(0), id.clone()));
    anyhow::ensure!(!ids.is_empty(), "no {role} certificate and key in {}", dir.display());
    Ok(ids)
}

/// Whether an id with a dash belongs to `role` rather than to a longer role
/// name that starts with `role-` (no role's name has another as such a prefix
/// today; this keeps it so if one is added).
fn role_owns(role: Role, id: &str) -> bool {
    let name = format!("{role}-{id}");
    !Role::ALL.iter().any(|other| other.as_str().len() > role.as_str().len() && name.starts_with(&format!("{other}-")))
}

/// The ids to try as: `--as-id`, or every id of `--as-role` in the
/// directory, lowest first (a health check pings as its own role; when one
/// id's certificate is revoked, the next one's is tried).
fn candidate_ids(t: &Target) -> anyhow::Result<Vec<String>> {
    match &t.as_id {
        Some(id) => Ok(vec![id.clone()]),
        None => ids_in(&t.certs_dir, t.as_role),
    }
}

/// Whether an error is the server refusing our certificate as revoked.
fn revoked(e: &anyhow::Error) -> bool {
    format!("{e:#}").to_lowercase().contains("revoked")
}

fn client(t: &Target, id: &str) -> anyhow::Result<RpcClient> {
    let creds = Credentials::load(&TlsFiles::in_dir(&t.certs_dir, t.as_role, id)).context("load credentials")?;
    let opts = ClientOptions {
        request_timeout: Duration::from_millis(t.timeout_ms),
        connect_timeout: Duration::from_millis(t.timeout_ms),
        ..ClientOptions::default()
    };
    Ok(RpcClient::new(&creds, opts)?)
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread().enable_all().build()?)
}

pub fn ping(a: PingArgs) -> anyhow::Result<()> {
    let mut result = Ok(());
    for id in candidate_ids(&a.target)? {
        result = ping_as(&a, &id);
        if !matches!(&result, Err(e) if revoked(e)) {
            break;
        }
    }
    result
}

fn ping_as(a: &PingArgs, id: &str) -> anyhow::Result<()> {
    runtime()?.block_on(async {
        // quinn binds its socket on the runtime, so the client is made inside it.
        let rpc = client(&a.target, id)?;
        let peer = rpc.peer(&a.target.addr, a.target.role, None);
        let payload = Bytes::from(vec![0x5a; a.size]);
        let mut rtts_us = Vec::new();
        for _ in 0..a.count.max(1) {
            let t = Instant::now();
            let r = peer
                .call(PingRequest { payload: payload.clone(), echo: true })
                .await
                .with_context(|| format!("ping {}", a.target.addr))?;
            anyhow::ensure!(r.payload == payload, "server echoed a different payload");
            rtts_us.push(t.elapsed().as_micros() as u64);
        }
        rpc.close(Duration::from_millis(200)).await;
        if a.target.json {
            println!("{}", serde_json::json!({"addr": a.target.addr, "rtt_us": rtts_us}));
        } else {
            for r in &rtts_us {
                println!("pong from {}: {} us", a.target.addr, r);
            }
        }
        Ok(())
    })
}

pub fn info(a: InfoArgs) -> anyhow::Result<()> {
    runtime()?.block_on(async {
        // quinn binds its socket on the runtime, so the client is made inside it.
        let id = candidate_ids(&a.target)?.remove(0);
        let rpc = client(&a.target, &id)?;
        let peer = rpc.peer(&a.target.addr, a.target.role, None);
        let r = peer.call(ServerInfoRequest {}).await.with_context(|| format!("server-info {}", a.target.addr))?;
        rpc.close(Duration::from_millis(200)).await;
        let role = quire_proto::v1::Role::try_from(r.role)
            .ok()
            .and_then(Role::from_wire)
            .map(|r| r.as_str())
            .unwrap_or("unknown");
        let caller = quire_proto::v1::Role::try_from(r.caller_role)
            .ok()
            .and_then(Role::from_wire)
            .map(|r| r.as_str())
            .unwrap_or("unknown");
        if a.target.json {
            println!(
                "{}",
                serde_json::json!({
                    "role": role, "id": r.id, "instance_id": r.instance_id, "version": r.version,
                    "uptime_ms": r.uptime_ms, "caller": format!("{caller}/{}", r.caller_id),
                })
            );
        } else {
            println!("role:        {role}");
            println!("id:          {}", r.id);
            println!("instance id: {}", r.instance_id);
            println!("version:     {}", r.version);
            println!("uptime:      {} ms", r.uptime_ms);
            println!("you are:     {caller}/{}", r.caller_id);
        }
        Ok(())
    })
}
