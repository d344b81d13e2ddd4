//! Upstream verification that names the unknown issuer.
//!
//! webpki says only "unknown issuer"; the person fixing it needs to know
//! *which* root to add (`--upstream-ca FILE`). [`NamingVerifier`] wraps
//! rustls's webpki verifier and, on that error, reads the issuer's subject
//! from the chain the upstream presented.
//!
//! The name travels beside the error, not in it: rustls turns a custom
//! certificate error into a `certificate_unknown` alert, and the upstream
//! should hear the precise `unknown_ca`. The verifier runs inside the
//! `process_new_packets` call that returns the error, on the same thread,
//! so it leaves the name in a thread-local that
//! [`TlsFailure::from_rustls`](super::TlsFailure::from_rustls) takes at once.

use std::cell::RefCell;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, Error, SignatureScheme};

use super::der::{parse_cert, parse_name_text};

thread_local! {
    /// The issuer the last failed verification on this thread could not find.
    static UNKNOWN_ISSUER: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// The issuer's name left by the verification that just failed with
/// "unknown issuer" on this thread, if any (taken: asked once).
pub fn take_unknown_issuer() -> Option<String> {
    UNKNOWN_ISSUER.with(|n| n.borrow_mut().take())
}

/// The webpki verifier, with unknown issuers named.
#[derive(Debug)]
pub struct NamingVerifier(pub Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for NamingVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        let verdict = self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now);
        let name = match &verdict {
            Err(Error::InvalidCertificate(CertificateError::UnknownIssuer)) => {
                top_issuer(end_entity, intermediates)
            }
            _ => None,
        };
        UNKNOWN_ISSUER.with(|n| *n.borrow_mut() = name);
        verdict
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// The issuer at the top of the presented chain: from the leaf, follow each
/// certificate to the presented one whose subject is its issuer; the last
/// one's issuer is the name no root matched. `None` if the leaf does not parse.
pub fn top_issuer(end_entity: &[u8], intermediates: &[CertificateDer<'_>]) -> Option<String> {
    let mut current = parse_cert(end_entity).ok()?;
    let others: Vec<_> = intermediates
        .iter()
        .filter_map(|c| parse_cert(c).ok())
        .collect();
    // Each step moves to another presented certificate: at most that many
    // (a loop of certificates naming each other ends there too).
    for _ in 0..others.len() {
        if current.issuer_raw == current.subject_raw {
            break;
        }
        match others.iter().find(|c| c.subject_raw == current.issuer_raw) {
            Some(next) => current = next.clone(),
            None => break,
        }
    }
    let name = parse_name_text(current.issuer_raw)?;
    Some(if name.is_empty() {
        "(an empty name)".into()
    } else {
        name
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{
        BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair,
    };

    fn ca(cn: &str, org: &str) -> (CertificateParams, KeyPair) {
        let mut p = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CountryName, "NL");
        dn.push(DnType::OrganizationName, org);
        dn.push(DnType::CommonName, cn);
        p.distinguished_name = dn;
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        (p, KeyPair::generate().unwrap())
    }

    #[test]
    fn names_the_top_of_the_chain() {
        let (root_p, root_k) = ca("Corp Root CA", "Example");
        let root = Issuer::new(root_p, root_k);
        let (mid_p, mid_k) = ca("Corp Issuing CA", "Example");
        let mid_cert = mid_p.signed_by(&mid_k, &root).unwrap();
        let mid = Issuer::new(mid_p, mid_k);
        let leaf_k = KeyPair::generate().unwrap();
        let leaf = CertificateParams::new(vec!["a.test".into()])
            .unwrap()
            .signed_by(&leaf_k, &mid)
            .unwrap();
        // Leaf, then the intermediate: the root is what is missing.
        assert_eq!(
            top_issuer(leaf.der(), &[mid_cert.der().clone()]).as_deref(),
            Some("CN=Corp Root CA, O=Example, C=NL")
        );
        // The leaf alone: its issuer is the intermediate.
        assert_eq!(
            top_issuer(leaf.der(), &[]).as_deref(),
            Some("CN=Corp Issuing CA, O=Example, C=NL")
        );
        // An unrelated extra certificate is not followed.
        let (other_p, other_k) = ca("Other", "Elsewhere");
        let other = other_p.self_signed(&other_k).unwrap();
        assert_eq!(
            top_issuer(leaf.der(), &[other.der().clone(), mid_cert.der().clone()]).as_deref(),
            Some("CN=Corp Root CA, O=Example, C=NL")
        );
        assert_eq!(top_issuer(b"junk", &[]), None);
    }

    #[test]
    fn hostile_names_are_escaped() {
        let mut p = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "Evil\r\nX-Injected: 1, CN=fake");
        p.distinguished_name = dn;
        let k = KeyPair::generate().unwrap();
        let c = p.self_signed(&k).unwrap();
        let name = top_issuer(c.der(), &[]).unwrap();
        assert!(!name.contains('\r') && !name.contains('\n'), "{name}");
        assert_eq!(name, "CN=Evil\\0D\\0AX-Injected: 1\\, CN=fake");
    }
}
