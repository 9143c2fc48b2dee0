//! Who is on the other end: the role and id in a certificate's SAN URI.

use quire_proto::Role;
use rustls_pki_types::CertificateDer;
use x509_parser::extensions::GeneralName;

/// A peer's identity, read from its (already verified) certificate.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PeerIdentity {
    /// What the peer may do.
    pub role: Role,
    /// Which instance of the role (a bookie id, a replica id, ...).
    pub id: String,
}

impl std::fmt::Display for PeerIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.role, self.id)
    }
}

/// Why a certificate names no usable identity.
#[derive(Debug, Clone, thiserror::Error)]
pub enum IdentityError {
    /// The bytes are not an X.509 certificate.
    #[error("certificate does not parse: {0}")]
    Unparseable(String),
    /// No SAN URI of the form quire://<role>/<id>.
    #[error("certificate has no quire://<role>/<id> SAN URI")]
    Missing,
    /// A quire:// URI with an unknown role or a malformed id.
    #[error("certificate names a bad identity {0:?}")]
    Malformed(String),
    /// The peer presented no certificate.
    #[error("peer presented no certificate")]
    NoCertificate,
}

impl PeerIdentity {
    /// Parses `quire://<role>/<id>`.
    pub fn parse_uri(uri: &str) -> Result<PeerIdentity, IdentityError> {
        let rest = uri.strip_prefix("quire://").ok_or_else(|| IdentityError::Malformed(uri.to_string()))?;
        let (role, id) = rest.split_once('/').ok_or_else(|| IdentityError::Malformed(uri.to_string()))?;
        let role: Role = role.parse().map_err(|_| IdentityError::Malformed(uri.to_string()))?;
        let id_ok = !id.is_empty()
            && id.len() <= 64
            && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-');
        if !id_ok {
            return Err(IdentityError::Malformed(uri.to_string()));
        }
        Ok(PeerIdentity { role, id: id.to_string() })
    }

    /// The identity in a DER certificate.
    pub fn from_cert(der: &CertificateDer<'_>) -> Result<PeerIdentity, IdentityError> {
        let (_, cert) =
            x509_parser::parse_x509_certificate(der.as_ref()).map_err(|e| IdentityError::Unparseable(e.to_string()))?;
        let san = cert
            .subject_alternative_name()
            .map_err(|e| IdentityError::Unparseable(e.to_string()))?
            .ok_or(IdentityError::Missing)?;
        for name in &san.value.general_names {
            if let GeneralName::URI(uri) = name {
                if uri.starts_with("quire://") {
                    return PeerIdentity::parse_uri(uri);
                }
            }
        }
        Err(IdentityError::Missing)
    }

    /// The identity of a QUIC connection's peer.
    pub fn of_connection(conn: &quinn::Connection) -> Result<PeerIdentity, IdentityError> {
        let any = conn.peer_identity().ok_or(IdentityError::NoCertificate)?;
        let certs = any.downcast::<Vec<CertificateDer<'static>>>().map_err(|_| IdentityError::NoCertificate)?;
        let leaf = certs.first().ok_or(IdentityError::NoCertificate)?;
        PeerIdentity::from_cert(leaf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_parse_strictly() {
        let p = PeerIdentity::parse_uri("quire://bookie/3").unwrap();
        assert_eq!(p.role, Role::Bookie);
        assert_eq!(p.id, "3");
        for bad in ["quire://bookie/", "quire://root/1", "http://bookie/1", "quire://bookie", "quire://bookie/a/b"] {
            assert!(PeerIdentity::parse_uri(bad).is_err(), "{bad}");
        }
    }
}
