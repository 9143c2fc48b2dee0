//! Certificates refused before they expire (issue #20 item 6): the metadata
//! service's deny list of serial numbers, as this process last heard it.
//!
//! Verifiers built from [`Credentials`](crate::Credentials) that carry a
//! list consult it at every handshake, as a server (a revoked client
//! certificate) and as a client (a revoked server certificate); a server
//! also closes live connections whose peer's certificate is revoked when
//! the list changes. The list is filled by whoever follows the metadata
//! service (`quire_runtime::revocation`); empty, it refuses nothing.

use std::collections::HashSet;
use std::sync::{Arc, RwLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, SignatureScheme};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use tokio::sync::watch;

/// The serial number of a DER certificate, as the deny list keys it:
/// lowercase hex of its bytes without leading zeros ("0" for zero).
pub fn serial_hex(der: &CertificateDer<'_>) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref()).ok()?;
    let hex: String = cert.tbs_certificate.raw_serial().iter().map(|b| format!("{b:02x}")).collect();
    let t = hex.trim_start_matches('0');
    Some(if t.is_empty() { "0".to_string() } else { t.to_string() })
}

/// The serial of a QUIC connection's peer certificate.
pub(crate) fn serial_of_connection(conn: &quinn::Connection) -> Option<String> {
    let any = conn.peer_identity()?;
    let certs = any.downcast::<Vec<CertificateDer<'static>>>().ok()?;
    certs.first().and_then(serial_hex)
}

/// Closes `conn` as soon as its peer's certificate (`serial`) is on `deny`,
/// now or after a change of the list; ends with the connection. `what`
/// names the peer in the log.
pub(crate) async fn close_when_revoked(conn: quinn::Connection, serial: String, deny: DenyList, what: String) -> bool {
    let mut changes = deny.subscribe();
    loop {
        if deny.denies(&serial) {
            tracing::warn!(peer = %what, serial, "closing a connection: its peer's certificate was revoked");
            conn.close(quinn::VarInt::from_u32(crate::lane::LANE_ERROR_REVOKED), b"certificate revoked");
            return true;
        }
        tokio::select! {
            r = changes.changed() => if r.is_err() { return false },
            _ = conn.closed() => return false,
        }
    }
}

/// A shared, replaceable set of revoked serials.
#[derive(Debug, Clone)]
pub struct DenyList {
    serials: Arc<RwLock<Arc<HashSet<String>>>>,
    /// The metadata service's version of the list last installed.
    version: watch::Sender<u64>,
}

impl Default for DenyList {
    fn default() -> Self {
        DenyList { serials: Arc::new(RwLock::new(Arc::new(HashSet::new()))), version: watch::Sender::new(0) }
    }
}

impl DenyList {
    /// An empty list.
    pub fn new() -> DenyList {
        DenyList::default()
    }

    /// Installs the list at `version` (serials as [`serial_hex`] writes them).
    pub fn replace(&self, version: u64, serials: impl IntoIterator<Item = String>) {
        let set: HashSet<String> = serials.into_iter().collect();
        *self.serials.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(set);
        self.version.send_replace(version);
    }

    /// The version last installed (0: none yet).
    pub fn version(&self) -> u64 {
        *self.version.borrow()
    }

    /// Serials on the list now.
    pub fn len(&self) -> usize {
        self.serials.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `serial` (as [`serial_hex`] writes it) is revoked.
    pub fn denies(&self, serial: &str) -> bool {
        self.serials.read().unwrap_or_else(|e| e.into_inner()).contains(serial)
    }

    /// Whether a certificate is revoked (one that does not parse is left to
    /// the verifier it wraps, which refuses it).
    pub fn denies_cert(&self, der: &CertificateDer<'_>) -> bool {
        serial_hex(der).is_some_and(|s| self.denies(&s))
    }

    /// Wakes on every change of the list.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.version.subscribe()
    }
}

/// A client-certificate verifier that refuses revoked certificates first.
#[derive(Debug)]
pub(crate) struct DenyingClientVerifier {
    pub inner: Arc<dyn ClientCertVerifier>,
    pub deny: DenyList,
}

impl ClientCertVerifier for DenyingClientVerifier {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        if self.deny.denies_cert(end_entity) {
            return Err(rustls::Error::InvalidCertificate(CertificateError::Revoked));
        }
        self.inner.verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// A server-certificate verifier that refuses revoked certificates first.
#[derive(Debug)]
pub(crate) struct DenyingServerVerifier {
    pub inner: Arc<dyn ServerCertVerifier>,
    pub deny: DenyList,
}

impl ServerCertVerifier for DenyingServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if self.deny.denies_cert(end_entity) {
            return Err(rustls::Error::InvalidCertificate(CertificateError::Revoked));
        }
        self.inner.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
