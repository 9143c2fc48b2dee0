//! `quire certs`: the cluster CA and role certificates.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Subcommand};
use quire_pki::{CertAuthority, IssueOptions, Validity};
use quire_proto::Role;

#[derive(Debug, Subcommand)]
pub enum CertsCmd {
    /// Create a CA and a certificate for every member of a local cluster in DIR.
    Init(InitArgs),
    /// Issue one more certificate from the CA in DIR.
    Issue(IssueArgs),
    /// Print a certificate's identity, serial number and validity.
    Show(ShowArgs),
    /// Revoke a certificate by its serial: every service refuses it at the
    /// handshake, and closes its connections, once it hears (seconds).
    Revoke(RevokeArgs),
    /// List the revoked certificates.
    Revoked(RevokedArgs),
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The certificate (PEM).
    cert: PathBuf,
}

#[derive(Debug, Args)]
pub struct RevokeArgs {
    #[command(flatten)]
    target: crate::bookies::MetaTarget,
    /// The serial number, hex (as `quire certs show` prints it; colons allowed).
    #[arg(long)]
    serial: String,
    /// Whose certificate it is (`role/id`), for the record.
    #[arg(long, default_value = "")]
    identity: String,
    /// Why, for the record.
    #[arg(long, default_value = "")]
    reason: String,
    /// Take the revocation back.
    #[arg(long)]
    undo: bool,
}

#[derive(Debug, Args)]
pub struct RevokedArgs {
    #[command(flatten)]
    target: crate::bookies::MetaTarget,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct SanArgs {
    /// Extra DNS names to put in the certificate(s) (repeatable).
    #[arg(long = "dns")]
    dns: Vec<String>,
    /// Extra IP addresses to put in the certificate(s) (repeatable).
    #[arg(long = "ip")]
    ip: Vec<IpAddr>,
    /// Validity in days.
    #[arg(long, default_value_t = 365)]
    days: i64,
}

impl SanArgs {
    fn options(&self) -> IssueOptions {
        let mut o = IssueOptions { validity: Validity::days(self.days), ..IssueOptions::default() };
        o.dns_names.extend(self.dns.iter().cloned());
        o.ips.extend(self.ip.iter().copied());
        o
    }
}

#[derive(Debug, Args)]
pub struct InitArgs {
    /// Directory to create the CA and certificates in.
    #[arg(long)]
    dir: PathBuf,
    /// Cluster name, recorded in the CA's subject.
    #[arg(long, default_value = "local")]
    cluster: String,
    /// Number of metadata replicas (ids 1..=N).
    #[arg(long, default_value_t = 3)]
    metadata: u32,
    /// Number of bookies (ids 1..=N).
    #[arg(long, default_value_t = 3)]
    bookies: u32,
    /// Number of auditors (ids 1..=N).
    #[arg(long, default_value_t = 1)]
    auditors: u32,
    /// Number of replication workers (ids 1..=N).
    #[arg(long, default_value_t = 1)]
    workers: u32,
    /// Number of gateways (ids 1..=N).
    #[arg(long, default_value_t = 1)]
    gateways: u32,
    /// Do nothing when the directory already holds a CA (an init step that
    /// runs on every `docker compose up`).
    #[arg(long)]
    if_missing: bool,
    /// The first id of each numbered role (0 for Kubernetes StatefulSets,
    /// whose pod index is the id). The client and admin certificates are
    /// always id 1.
    #[arg(long, default_value_t = 1)]
    first_id: u32,
    /// Keep only the CA in --dir and write each role's certificates and keys,
    /// with a copy of ca.pem, into PER_ROLE/<role>/: one directory (a volume, a
    /// secret) per role, so a service is given its own role's keys and never
    /// the CA key or another role's (docs/security.md, "Key layout").
    #[arg(long)]
    per_role: Option<PathBuf>,
    #[command(flatten)]
    san: SanArgs,
}

#[derive(Debug, Args)]
pub struct IssueArgs {
    /// Directory holding ca.pem and ca.key; the new pair is written there.
    #[arg(long)]
    dir: PathBuf,
    /// The role: bookie, metadata, auditor, replication-worker, gateway, client or admin.
    #[arg(long)]
    role: Role,
    /// The instance id ([A-Za-z0-9._-], at most 64).
    #[arg(long)]
    id: String,
    /// Write the pair (and a copy of ca.pem) into this directory instead of
    /// --dir: a role's own directory of a per-role layout.
    #[arg(long)]
    out: Option<PathBuf>,
    #[command(flatten)]
    san: SanArgs,
}

/// Where `role`'s certificates go: `--dir` itself, or `PER_ROLE/<role>/`
/// (created, with a copy of the CA certificate, on first use).
fn role_dir(ca: &CertAuthority, dir: &Path, per_role: Option<&Path>, role: Role) -> anyhow::Result<PathBuf> {
    let Some(root) = per_role else { return Ok(dir.to_path_buf()) };
    let out = root.join(role.to_string());
    ensure_out_dir(ca, &out)?;
    Ok(out)
}

/// Creates `out` and puts the CA certificate in it (the only trust root a
/// service needs; the CA key never goes there).
fn ensure_out_dir(ca: &CertAuthority, out: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("create {}", out.display()))?;
    ca.write_cert(out).with_context(|| format!("write the CA certificate into {}", out.display()))
}

pub fn run(cmd: CertsCmd) -> anyhow::Result<()> {
    match cmd {
        CertsCmd::Init(a) => {
            if a.if_missing && a.dir.join("ca.pem").exists() {
                println!("{} already holds a CA: nothing to do", a.dir.display());
                return Ok(());
            }
            std::fs::create_dir_all(&a.dir).with_context(|| format!("create {}", a.dir.display()))?;
            let ca = CertAuthority::generate(&a.cluster, Validity::days(3650)).context("generate the CA")?;
            ca.write(&a.dir).with_context(|| format!("initialise certificates in {}", a.dir.display()))?;
            // The operator and a generic client (id 1), then every numbered identity.
            let mut members: Vec<(Role, String)> = vec![(Role::Client, "1".into()), (Role::Admin, "1".into())];
            for (role, n) in [
                (Role::Metadata, a.metadata),
                (Role::Bookie, a.bookies),
                (Role::Auditor, a.auditors),
                (Role::ReplicationWorker, a.workers),
                (Role::Gateway, a.gateways),
            ] {
                members.extend((a.first_id..a.first_id + n).map(|id| (role, id.to_string())));
            }
            let mut written = Vec::with_capacity(members.len());
            for (role, id) in &members {
                let out = role_dir(&ca, &a.dir, a.per_role.as_deref(), *role)?;
                let (cert, _) = ca.issue(*role, id, &a.san.options())?.write(&out, *role, id)?;
                written.push(cert);
            }
            println!("created CA in {} and {} certificates", a.dir.display(), written.len());
            for cert in written {
                println!("  {}", cert.display());
            }
            Ok(())
        }
        CertsCmd::Show(a) => show(&a.cert),
        CertsCmd::Revoke(a) => revoke(a),
        CertsCmd::Revoked(a) => revoked(a),
        CertsCmd::Issue(a) => {
            let ca = CertAuthority::load(&a.dir).with_context(|| format!("load CA from {}", a.dir.display()))?;
            let out = match &a.out {
                Some(out) => {
                    ensure_out_dir(&ca, out)?;
                    out.clone()
                }
                None => a.dir.clone(),
            };
            let issued = ca.issue(a.role, &a.id, &a.san.options()).context("issue certificate")?;
            let (cert, key) = issued.write(&out, a.role, &a.id).context("write certificate")?;
            println!("issued quire://{}/{}: {} {}", a.role, a.id, cert.display(), key.display());
            Ok(())
        }
    }
}

fn show(path: &Path) -> anyhow::Result<()> {
    use rustls_pki_types::pem::PemObject;
    let der = rustls_pki_types::CertificateDer::pem_file_iter(path)
        .with_context(|| format!("read {}", path.display()))?
        .next()
        .with_context(|| format!("{} holds no certificate", path.display()))?
        .with_context(|| format!("parse {}", path.display()))?;
    let identity = quire_rpc::PeerIdentity::from_cert(&der).map_or_else(|e| format!("({e})"), |p| p.to_string());
    let serial = quire_rpc::deny::serial_hex(&der).context("the certificate does not parse")?;
    let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref()).context("the certificate does not parse")?;
    let validity = cert.validity();
    println!("identity:   {identity}");
    println!("serial:     {serial}");
    println!("not before: {}", validity.not_before);
    println!("not after:  {}", validity.not_after);
    Ok(())
}

fn revoke(a: RevokeArgs) -> anyhow::Result<()> {
    let req = quire_proto::v1::RevokeCertificateRequest {
        serial: a.serial.clone(),
        identity: a.identity,
        reason: a.reason,
        undo: a.undo,
    };
    let r = a.target.call(req)?;
    let what = if a.undo { "no longer revoked" } else { "revoked" };
    println!("{} {what} (deny list version {})", a.serial, r.version);
    Ok(())
}

fn revoked(a: RevokedArgs) -> anyhow::Result<()> {
    let r = a.target.call(quire_proto::v1::ListRevokedRequest { after_version: 0, wait_ms: 0 })?;
    if a.json {
        let rows: Vec<_> = r
            .revoked
            .iter()
            .map(|c| {
                serde_json::json!({"serial": c.serial, "identity": c.identity, "reason": c.reason,
                        "revoked_at_ms": c.revoked_at_ms})
            })
            .collect();
        println!("{}", serde_json::json!({"version": r.version, "revoked": rows}));
    } else {
        println!("{:<42} {:<24} REASON", "SERIAL", "IDENTITY");
        for c in &r.revoked {
            println!("{:<42} {:<24} {}", c.serial, c.identity, c.reason);
        }
    }
    Ok(())
}
