//! quire's certificate authority: one CA per cluster, one certificate per
//! service instance naming its role and id.
//!
//! A leaf certificate carries:
//! - the SAN URI `quire://<role>/<id>`: the identity servers authorise by;
//! - the DNS SAN `<role>.quire`: the TLS server name its callers verify, which
//!   ties a server's certificate to the role the caller meant to reach wherever
//!   the server listens;
//! - extra DNS names and IPs on request (an HTTPS gateway's public names);
//! - both server and client authentication usages: every quire service is both.
//!
//! This crate does not verify certificates (that is rustls's work in `quire-rpc`)
//! and keeps no revocation list: a compromised key means a new CA.

use std::fs;
use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use quire_proto::Role;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use time::{Duration, OffsetDateTime};

/// Why a certificate could not be made, read or written.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// rcgen refused the parameters or could not parse a PEM.
    #[error("certificate generation: {0}")]
    Rcgen(#[from] rcgen::Error),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// The id is empty, too long or has characters outside `[A-Za-z0-9._-]`.
    #[error("invalid id {0:?}: use 1-64 characters of [A-Za-z0-9._-]")]
    InvalidId(String),
    /// A file that `init` would create exists; refusing to overwrite a CA.
    #[error("{0} exists; refusing to overwrite (remove it or pick another directory)")]
    Exists(PathBuf),
    /// A role's directory already trusts another CA.
    #[error("{0} is another CA's certificate; refusing to mix clusters (remove it or pick another directory)")]
    OtherCa(PathBuf),
}

/// The validity window of a certificate.
#[derive(Debug, Clone, Copy)]
pub struct Validity {
    /// Not valid before this instant.
    pub not_before: OffsetDateTime,
    /// Not valid after this instant.
    pub not_after: OffsetDateTime,
}

impl Validity {
    /// From an hour ago (clock skew between hosts) for `days` days.
    pub fn days(days: i64) -> Self {
        let now = OffsetDateTime::now_utc();
        Validity { not_before: now - Duration::hours(1), not_after: now + Duration::days(days) }
    }

    /// A window that ended yesterday: for testing that expired certificates are refused.
    pub fn expired() -> Self {
        let now = OffsetDateTime::now_utc();
        Validity { not_before: now - Duration::days(30), not_after: now - Duration::days(1) }
    }
}

/// What to put in a leaf certificate besides its role and id.
#[derive(Debug, Clone)]
pub struct IssueOptions {
    /// The validity window.
    pub validity: Validity,
    /// Extra DNS SANs (e.g. a gateway's public host name for HTTPS).
    pub dns_names: Vec<String>,
    /// Extra IP SANs.
    pub ips: Vec<IpAddr>,
}

impl Default for IssueOptions {
    fn default() -> Self {
        IssueOptions {
            validity: Validity::days(365),
            dns_names: vec!["localhost".into()],
            ips: vec![IpAddr::from([127, 0, 0, 1])],
        }
    }
}

/// A certificate and its private key, PEM-encoded.
#[derive(Debug, Clone)]
pub struct IssuedCert {
    /// The certificate.
    pub cert_pem: String,
    /// The PKCS#8 private key.
    pub key_pem: String,
}

/// Where a role's certificate and key live in a certificate directory.
pub fn cert_paths(dir: &Path, role: Role, id: &str) -> (PathBuf, PathBuf) {
    (dir.join(format!("{role}-{id}.pem")), dir.join(format!("{role}-{id}.key")))
}

/// Where the CA's certificate and key live in a certificate directory.
pub fn ca_paths(dir: &Path) -> (PathBuf, PathBuf) {
    (dir.join("ca.pem"), dir.join("ca.key"))
}

/// Checks an id for use in a SAN URI and a file name.
pub fn validate_id(id: &str) -> Result<(), PkiError> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
        && id != "."
        && id != "..";
    if ok {
        Ok(())
    } else {
        Err(PkiError::InvalidId(id.to_string()))
    }
}

/// A cluster certificate authority.
pub struct CertAuthority {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
    key_pem: String,
}

impl CertAuthority {
    /// Creates a new CA named after the cluster.
    pub fn generate(cluster: &str, validity: Validity) -> Result<Self, PkiError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, format!("quire cluster CA ({cluster})"));
        dn.push(DnType::OrganizationName, "quire");
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        params.not_before = validity.not_before;
        params.not_after = validity.not_after;
        let cert = params.self_signed(&key)?;
        let key_pem = key.serialize_pem();
        Ok(CertAuthority { cert_pem: cert.pem(), key_pem, issuer: Issuer::new(params, key) })
    }

    /// A CA from its PEM certificate and key.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self, PkiError> {
        let key = KeyPair::from_pem(key_pem)?;
        let issuer = Issuer::from_ca_cert_pem(cert_pem, key)?;
        Ok(CertAuthority { issuer, cert_pem: cert_pem.to_string(), key_pem: key_pem.to_string() })
    }

    /// Loads `ca.pem` and `ca.key` from a certificate directory.
    pub fn load(dir: &Path) -> Result<Self, PkiError> {
        let (cert, key) = ca_paths(dir);
        Self::from_pem(&read(&cert)?, &read(&key)?)
    }

    /// The CA certificate, PEM.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// Writes `ca.pem` and `ca.key` into `dir`, refusing to overwrite an existing CA.
    pub fn write(&self, dir: &Path) -> Result<(), PkiError> {
        let (cert, key) = ca_paths(dir);
        for p in [&cert, &key] {
            if p.exists() {
                return Err(PkiError::Exists(p.clone()));
            }
        }
        write_file(&cert, self.cert_pem.as_bytes(), false)?;
        write_file(&key, self.key_pem.as_bytes(), true)
    }

    /// Writes only `ca.pem` into `dir` (a service's trust root, beside its own
    /// pair; the key stays where certificates are issued). Replaces a copy
    /// of this CA's certificate, refuses another CA's.
    pub fn write_cert(&self, dir: &Path) -> Result<(), PkiError> {
        let (cert, _) = ca_paths(dir);
        if cert.exists() && read(&cert)? != self.cert_pem {
            return Err(PkiError::OtherCa(cert));
        }
        write_file(&cert, self.cert_pem.as_bytes(), false)
    }

    /// Issues a certificate for `role`/`id`.
    pub fn issue(&self, role: Role, id: &str, opts: &IssueOptions) -> Result<IssuedCert, PkiError> {
        validate_id(id)?;
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, format!("{role}/{id}"));
        dn.push(DnType::OrganizationName, "quire");
        params.distinguished_name = dn;
        let mut sans = vec![
            SanType::URI(format!("quire://{role}/{id}").try_into()?),
            SanType::DnsName(role.server_name().try_into()?),
        ];
        for d in &opts.dns_names {
            sans.push(SanType::DnsName(d.clone().try_into()?));
        }
        for ip in &opts.ips {
            sans.push(SanType::IpAddress(*ip));
        }
        params.subject_alt_names = sans;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        params.use_authority_key_identifier_extension = true;
        params.not_before = opts.validity.not_before;
        params.not_after = opts.validity.not_after;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(IssuedCert { cert_pem: cert.pem(), key_pem: key.serialize_pem() })
    }
}

impl IssuedCert {
    /// Writes the pair into `dir` under the names [`cert_paths`] gives.
    pub fn write(&self, dir: &Path, role: Role, id: &str) -> Result<(PathBuf, PathBuf), PkiError> {
        let (cert, key) = cert_paths(dir, role, id);
        write_file(&cert, self.cert_pem.as_bytes(), false)?;
        write_file(&key, self.key_pem.as_bytes(), true)?;
        Ok((cert, key))
    }
}

/// The certificates `quire certs init` creates for a local cluster.
#[derive(Debug, Clone)]
pub struct LocalCluster {
    /// Metadata replicas (ids 1..=n).
    pub metadata: u32,
    /// Bookies (ids 1..=n).
    pub bookies: u32,
}

impl Default for LocalCluster {
    fn default() -> Self {
        LocalCluster { metadata: 3, bookies: 3 }
    }
}

impl LocalCluster {
    /// Every (role, id) of the local cluster: the replicas and bookies, one of
    /// each other service, a generic client and the operator.
    pub fn members(&self) -> Vec<(Role, String)> {
        let mut v = Vec::new();
        for i in 1..=self.metadata {
            v.push((Role::Metadata, i.to_string()));
        }
        for i in 1..=self.bookies {
            v.push((Role::Bookie, i.to_string()));
        }
        for r in [Role::Auditor, Role::ReplicationWorker, Role::Gateway, Role::Client, Role::Admin] {
            v.push((r, "1".to_string()));
        }
        v
    }
}

/// Creates a CA and every local cluster member's certificate in `dir`.
pub fn init_dir(
    dir: &Path,
    cluster: &str,
    layout: &LocalCluster,
    opts: &IssueOptions,
) -> Result<CertAuthority, PkiError> {
    fs::create_dir_all(dir).map_err(|source| PkiError::Io { path: dir.to_path_buf(), source })?;
    let ca = CertAuthority::generate(cluster, Validity::days(3650))?;
    ca.write(dir)?;
    for (role, id) in layout.members() {
        ca.issue(role, &id, opts)?.write(dir, role, &id)?;
    }
    Ok(ca)
}

fn read(path: &Path) -> Result<String, PkiError> {
    fs::read_to_string(path).map_err(|source| PkiError::Io { path: path.to_path_buf(), source })
}

fn write_file(path: &Path, bytes: &[u8], private: bool) -> Result<(), PkiError> {
    let io = |source| PkiError::Io { path: path.to_path_buf(), source };
    let mut opts = fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(if private { 0o600 } else { 0o644 });
    }
    let mut f = opts.open(path).map_err(io)?;
    f.write_all(bytes).map_err(io)?;
    f.sync_all().map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_writes_every_member_and_reloads() {
        let dir = tempfile::tempdir().unwrap();
        init_dir(dir.path(), "test", &LocalCluster::default(), &IssueOptions::default()).unwrap();
        for (role, id) in LocalCluster::default().members() {
            let (c, k) = cert_paths(dir.path(), role, &id);
            assert!(fs::read_to_string(c).unwrap().contains("BEGIN CERTIFICATE"));
            assert!(fs::read_to_string(k).unwrap().contains("PRIVATE KEY"));
        }
        // A reloaded CA issues more certificates.
        let ca = CertAuthority::load(dir.path()).unwrap();
        ca.issue(Role::Bookie, "4", &IssueOptions::default()).unwrap();
        // init refuses to clobber an existing CA.
        assert!(matches!(
            init_dir(dir.path(), "test", &LocalCluster::default(), &IssueOptions::default()),
            Err(PkiError::Exists(_))
        ));
    }

    #[test]
    fn ids_are_checked() {
        for bad in ["", "a/b", "..", "x y", &"a".repeat(65)] {
            assert!(validate_id(bad).is_err(), "{bad:?}");
        }
        validate_id("bookie-1.rack_a").unwrap();
    }
}
