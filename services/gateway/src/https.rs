//! The HTTPS certificate of the API, replaceable while serving (SIGHUP).

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use anyhow::Context;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// The certificate handshakes are answered with; `reload` replaces it.
#[derive(Debug)]
pub struct HttpsCert {
    cert: PathBuf,
    key: PathBuf,
    current: RwLock<Arc<CertifiedKey>>,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn load(cert: &Path, key: &Path) -> anyhow::Result<Arc<CertifiedKey>> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("read {}", cert.display()))?
        .collect::<Result<_, _>>()
        .with_context(|| format!("parse {}", cert.display()))?;
    anyhow::ensure!(!chain.is_empty(), "{} holds no certificate", cert.display());
    let der = PrivateKeyDer::from_pem_file(key).with_context(|| format!("read the key {}", key.display()))?;
    let signing = provider().key_provider.load_private_key(der).context("load the HTTPS key")?;
    let certified = CertifiedKey::new(chain, signing);
    certified.keys_match().context("the HTTPS certificate and key do not match")?;
    Ok(Arc::new(certified))
}

impl HttpsCert {
    /// Loads the pair; an error names the file and what is wrong.
    pub fn load(cert: &Path, key: &Path) -> anyhow::Result<Arc<HttpsCert>> {
        let current = RwLock::new(load(cert, key)?);
        Ok(Arc::new(HttpsCert { cert: cert.to_path_buf(), key: key.to_path_buf(), current }))
    }

    /// Re-reads the files; on any error the certificate in force stays.
    pub fn reload(&self) -> anyhow::Result<()> {
        let next = load(&self.cert, &self.key)?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = next;
        Ok(())
    }

    /// The HTTPS server configuration: ring as the provider (the one quinn
    /// uses; see DEPENDENCIES.md), no client certificates (bearer tokens
    /// authenticate callers at the edge; mTLS is for the inside), and the
    /// certificate read from `self` at every handshake.
    pub fn server_config(self: &Arc<Self>) -> anyhow::Result<rustls::ServerConfig> {
        Ok(rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .context("TLS versions")?
            .with_no_client_auth()
            .with_cert_resolver(self.clone()))
    }
}

impl ResolvesServerCert for HttpsCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.read().unwrap_or_else(|e| e.into_inner()).clone())
    }
}
