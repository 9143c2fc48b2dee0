//! A service's TLS credentials and the QUIC crypto configs built from them.
//!
//! Both ends use TLS 1.3 only (QUIC requires it), the ring provider only (one
//! provider in the binary: see ../shared/DEPENDENCIES.md's "two crypto
//! providers" trap), ALPN `quire/1`, and the cluster CA as the only trust root.
//! Servers require a client certificate from that CA; clients verify the
//! server's certificate names the role they meant to reach (`<role>.quire`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use quire_proto::{Role, ALPN_V1};
use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::deny::{DenyList, DenyingClientVerifier, DenyingServerVerifier};
use crate::identity::{IdentityError, PeerIdentity};
use crate::packets::Packets;
use crate::transport::transport_config;

/// Why credentials could not be loaded or a config built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read or holds no usable item.
    #[error("{path}: {detail}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        detail: String,
    },
    /// The service's own certificate names no quire identity.
    #[error("own certificate: {0}")]
    Identity(#[from] IdentityError),
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    /// The client verifier could not be built (e.g. no roots).
    #[error("client verifier: {0}")]
    Verifier(String),
    /// quinn refused the rustls config (e.g. no TLS 1.3 initial cipher suite).
    #[error("QUIC crypto: {0}")]
    Quic(String),
}

/// Paths of a service's CA certificate, certificate chain and private key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The cluster CA certificate (the only trust root).
    pub ca: PathBuf,
    /// This service's certificate (chain), PEM.
    pub cert: PathBuf,
    /// This service's private key, PEM.
    pub key: PathBuf,
}

impl TlsFiles {
    /// The files `quire certs init` writes into `dir` for `role`/`id`.
    pub fn in_dir(dir: &Path, role: Role, id: &str) -> TlsFiles {
        TlsFiles {
            ca: dir.join("ca.pem"),
            cert: dir.join(format!("{role}-{id}.pem")),
            key: dir.join(format!("{role}-{id}.key")),
        }
    }
}

/// A service's loaded credentials.
#[derive(Clone)]
pub struct Credentials {
    roots: Arc<RootCertStore>,
    chain: Vec<CertificateDer<'static>>,
    key: Arc<PrivateKeyDer<'static>>,
    identity: PeerIdentity,
    /// Serials refused at every handshake, as server and as client.
    deny: Option<DenyList>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials").field("identity", &self.identity).finish_non_exhaustive()
    }
}

/// ring's TLS 1.3 suites with AES-128-GCM first: ring lists AES-256-GCM
/// first, and both ends preferring it negotiated it. AES-128-GCM is what
/// QUIC stacks usually use, with 10 rounds to AES-256's 14 for the same
/// security margin a cluster's links need; every other suite stays, after it.
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    let mut p = rustls::crypto::ring::default_provider();
    p.cipher_suites.sort_by_key(|s| s.suite() != rustls::CipherSuite::TLS13_AES_128_GCM_SHA256);
    Arc::new(p)
}

fn pem_err(path: &Path, detail: impl ToString) -> TlsError {
    TlsError::Pem { path: path.to_path_buf(), detail: detail.to_string() }
}

fn roots_from_pem(path: &Path, pem: &[u8]) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        roots.add(cert.map_err(|e| pem_err(path, e))?).map_err(|e| pem_err(path, e))?;
    }
    if roots.is_empty() {
        return Err(pem_err(path, "no CA certificate in file"));
    }
    Ok(roots)
}

impl Credentials {
    /// Reads the three PEM files.
    pub fn load(files: &TlsFiles) -> Result<Credentials, TlsError> {
        let read = |p: &Path| std::fs::read(p).map_err(|e| pem_err(p, e));
        Self::from_pem_named(
            (&files.ca, &read(&files.ca)?),
            (&files.cert, &read(&files.cert)?),
            (&files.key, &read(&files.key)?),
        )
    }

    /// From PEM text held in memory (tests, generated clusters).
    pub fn from_pem(ca_pem: &str, cert_pem: &str, key_pem: &str) -> Result<Credentials, TlsError> {
        let mem = Path::new("<memory>");
        Self::from_pem_named((mem, ca_pem.as_bytes()), (mem, cert_pem.as_bytes()), (mem, key_pem.as_bytes()))
    }

    fn from_pem_named(ca: (&Path, &[u8]), cert: (&Path, &[u8]), key: (&Path, &[u8])) -> Result<Credentials, TlsError> {
        let roots = roots_from_pem(ca.0, ca.1)?;
        let chain =
            CertificateDer::pem_slice_iter(cert.1).collect::<Result<Vec<_>, _>>().map_err(|e| pem_err(cert.0, e))?;
        let leaf = chain.first().ok_or_else(|| pem_err(cert.0, "no certificate in file"))?;
        let identity = PeerIdentity::from_cert(leaf)?;
        let key = PrivateKeyDer::from_pem_slice(key.1).map_err(|e| pem_err(key.0, e))?;
        Ok(Credentials { roots: Arc::new(roots), chain, key: Arc::new(key), identity, deny: None })
    }

    /// The identity this service's own certificate names.
    pub fn identity(&self) -> &PeerIdentity {
        &self.identity
    }

    /// Refuses the certificates on `deny` at every handshake made with
    /// configs built from these credentials (the list may change later).
    pub fn with_deny_list(mut self, deny: DenyList) -> Credentials {
        self.deny = Some(deny);
        self
    }

    /// The deny list these credentials refuse, if any.
    pub fn deny_list(&self) -> Option<&DenyList> {
        self.deny.as_ref()
    }

    /// Checks this service's own certificate as its peers will: issued by
    /// the CA these credentials trust, valid now, for its role's server
    /// name. A reload checks it first, so that a rotated certificate that
    /// every peer would refuse (expired, of another CA) is not put in force.
    pub fn check_own_certificate(&self) -> Result<(), TlsError> {
        use rustls::client::danger::ServerCertVerifier;
        let leaf = self.chain.first().ok_or_else(|| TlsError::Verifier("no certificate".into()))?;
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(self.roots.clone(), provider())
            .build()
            .map_err(|e| TlsError::Verifier(e.to_string()))?;
        let name = rustls_pki_types::ServerName::try_from(self.identity.role.server_name())
            .map_err(|e| TlsError::Verifier(e.to_string()))?;
        verifier.verify_server_cert(leaf, &self.chain[1..], &name, &[], rustls_pki_types::UnixTime::now())?;
        Ok(())
    }

    /// The serial of this service's own certificate (deny-list form).
    pub fn serial(&self) -> Option<String> {
        self.chain.first().and_then(crate::deny::serial_hex)
    }

    /// The QUIC endpoint config of a server: its stateless-reset key and
    /// connection-id validation key are derived from its private key, so they
    /// are the same across restarts of the same service and unknown to anyone
    /// without that key. A process restarted at its old address then answers
    /// packets of its predecessor's connections with a reset the client
    /// recognises, and clients drop the dead connection in one round trip
    /// instead of waiting out the idle timeout (the fault suite saw 30 s of
    /// timed-out lease renewals after a metadata replica restarted). With
    /// quinn's random per-process keys the new process cannot even tell the
    /// old connection ids from noise, and stays silent.
    pub fn endpoint_config(&self) -> quinn::EndpointConfig {
        let derive = |label: &[u8]| {
            let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
            ctx.update(label);
            ctx.update(self.key.secret_der());
            ctx.finish()
        };
        let reset = derive(b"quire quic stateless reset v1\0");
        let cid = derive(b"quire quic connection id v1\0");
        let cid_key = u64::from_le_bytes(cid.as_ref()[..8].try_into().expect("a SHA-256 digest has 8 bytes"));
        let mut config =
            quinn::EndpointConfig::new(Arc::new(ring::hmac::Key::new(ring::hmac::HMAC_SHA256, reset.as_ref())));
        config.cid_generator(move || Box::new(quinn_proto::HashedConnectionIdGenerator::from_key(cid_key)));
        config
    }

    /// The QUIC server config: client certificates from the cluster CA required.
    pub fn server_config(&self, idle_timeout: Duration, packets: Packets) -> Result<quinn::ServerConfig, TlsError> {
        let cfg = self.tls_server_config()?;
        let quic = quinn::crypto::rustls::QuicServerConfig::try_from(cfg).map_err(|e| TlsError::Quic(e.to_string()))?;
        let mut sc = quinn::ServerConfig::with_crypto(Arc::new(quic));
        sc.transport_config(transport_config(idle_timeout, idle_timeout / 3, true, packets));
        Ok(sc)
    }

    /// The TLS server config QUIC runs on (TLS 1.3, the cluster CA's client
    /// certificates required, quire's cipher order). Public so that a
    /// benchmark can run the same TLS over TCP as a reference.
    pub fn tls_server_config(&self) -> Result<rustls::ServerConfig, TlsError> {
        let p = provider();
        let mut verifier = WebPkiClientVerifier::builder_with_provider(self.roots.clone(), p.clone())
            .build()
            .map_err(|e| TlsError::Verifier(e.to_string()))?;
        if let Some(deny) = &self.deny {
            verifier = Arc::new(DenyingClientVerifier { inner: verifier, deny: deny.clone() });
        }
        let mut cfg = rustls::ServerConfig::builder_with_provider(p)
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_client_cert_verifier(verifier)
            .with_single_cert(self.chain.clone(), self.key.clone_key())?;
        cfg.alpn_protocols = vec![ALPN_V1.to_vec()];
        Ok(cfg)
    }

    /// The QUIC client config presenting this service's certificate.
    pub fn client_config(&self, idle_timeout: Duration, packets: Packets) -> Result<quinn::ClientConfig, TlsError> {
        client_config(
            &self.roots,
            Some((self.chain.clone(), self.key.clone_key())),
            self.deny.as_ref(),
            idle_timeout,
            packets,
        )
    }

    /// The TLS client config QUIC runs on (see [`Self::tls_server_config`]).
    pub fn tls_client_config(&self) -> Result<rustls::ClientConfig, TlsError> {
        tls_client_config(&self.roots, Some((self.chain.clone(), self.key.clone_key())), self.deny.as_ref())
    }
}

/// A client config that verifies servers against `ca_pem` but presents no
/// certificate of its own. quire servers refuse such clients; this exists to
/// probe a server's certificate and to test that refusal.
pub fn anonymous_client_config(ca_pem: &str, idle_timeout: Duration) -> Result<quinn::ClientConfig, TlsError> {
    let roots = roots_from_pem(Path::new("<memory>"), ca_pem.as_bytes())?;
    client_config(&roots, None, None, idle_timeout, Packets::default())
}

fn client_config(
    roots: &RootCertStore,
    auth: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
    deny: Option<&DenyList>,
    idle_timeout: Duration,
    packets: Packets,
) -> Result<quinn::ClientConfig, TlsError> {
    let cfg = tls_client_config(roots, auth, deny)?;
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(cfg).map_err(|e| TlsError::Quic(e.to_string()))?;
    let mut cc = quinn::ClientConfig::new(Arc::new(quic));
    cc.transport_config(transport_config(idle_timeout, idle_timeout / 3, false, packets));
    Ok(cc)
}

fn tls_client_config(
    roots: &RootCertStore,
    auth: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
    deny: Option<&DenyList>,
) -> Result<rustls::ClientConfig, TlsError> {
    let versions =
        rustls::ClientConfig::builder_with_provider(provider()).with_protocol_versions(&[&rustls::version::TLS13])?;
    let builder = match deny {
        None => versions.with_root_certificates(roots.clone()),
        Some(deny) => {
            let inner =
                rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots.clone()), provider())
                    .build()
                    .map_err(|e| TlsError::Verifier(e.to_string()))?;
            let verifier = DenyingServerVerifier { inner, deny: deny.clone() };
            versions.dangerous().with_custom_certificate_verifier(Arc::new(verifier))
        }
    };
    let mut cfg = match auth {
        Some((chain, key)) => builder.with_client_auth_cert(chain, key)?,
        None => builder.with_no_client_auth(),
    };
    cfg.alpn_protocols = vec![ALPN_V1.to_vec()];
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    #[test]
    fn aes_128_gcm_is_offered_first_and_nothing_is_dropped() {
        let ours: Vec<_> = super::provider().cipher_suites.iter().map(|s| s.suite()).collect();
        assert_eq!(ours[0], rustls::CipherSuite::TLS13_AES_128_GCM_SHA256);
        let mut ring: Vec<_> =
            rustls::crypto::ring::default_provider().cipher_suites.iter().map(|s| s.suite()).collect();
        let mut sorted = ours.clone();
        ring.sort_by_key(|s| u16::from(*s));
        sorted.sort_by_key(|s| u16::from(*s));
        assert_eq!(sorted, ring, "the same suites, reordered");
    }
}
