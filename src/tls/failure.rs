//! TLS failures as short human reasons: what goes into `X-Proxy-Error` and
//! the access log ("certificate has expired", "unknown issuer", "name
//! mismatch: cert is for other.example").
//!
//! A failed layer returns `Io::PeerGone(e)` like a dead socket; when the
//! cause was TLS (not the wire), `e` carries a [`TlsFailure`], which
//! [`TlsFailure::of`] gets back.

use std::fmt;
use std::io;

use rustls::{AlertDescription, CertificateError, Error};

/// What kind of thing went wrong, for the session to pick an answer
/// (a `502` for an upstream certificate, a log line for a client alert).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// We rejected the peer's certificate (upstream verification).
    Certificate,
    /// The peer sent a fatal alert (for a client: often "unknown CA", our
    /// CA is not trusted there).
    PeerAlert,
    /// The peer closed the connection before the handshake finished.
    HandshakeEof,
    /// No common ALPN protocol, version, cipher suite or group.
    Incompatible,
    /// Anything else the peer got wrong (bad records, bad messages).
    Protocol,
}

/// A TLS failure with its short reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFailure {
    kind: FailureKind,
    reason: String,
}

impl TlsFailure {
    /// A failure of `kind` with `reason`.
    pub fn new(kind: FailureKind, reason: impl Into<String>) -> TlsFailure {
        TlsFailure {
            kind,
            reason: reason.into(),
        }
    }

    /// Classifies a rustls error.
    pub fn from_rustls(e: &Error) -> TlsFailure {
        match e {
            Error::InvalidCertificate(c) => {
                TlsFailure::new(FailureKind::Certificate, certificate_reason(c))
            }
            Error::NoCertificatesPresented => {
                TlsFailure::new(FailureKind::Certificate, "no certificate presented")
            }
            Error::AlertReceived(a) => TlsFailure::new(FailureKind::PeerAlert, alert_reason(*a)),
            Error::NoApplicationProtocol => TlsFailure::new(
                FailureKind::Incompatible,
                "no common ALPN protocol (only http/1.1 is spoken)",
            ),
            Error::PeerIncompatible(p) => TlsFailure::new(
                FailureKind::Incompatible,
                format!("incompatible peer: {p:?}"),
            ),
            other => TlsFailure::new(FailureKind::Protocol, format!("TLS error: {other}")),
        }
    }

    /// The connection closed before the handshake finished.
    pub fn handshake_eof() -> TlsFailure {
        TlsFailure::new(
            FailureKind::HandshakeEof,
            "connection closed during the TLS handshake",
        )
    }

    /// The short human reason.
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// What kind of failure.
    pub fn kind(&self) -> FailureKind {
        self.kind
    }

    /// The TLS failure inside an error a layer returned, if the cause was TLS.
    pub fn of(e: &io::Error) -> Option<&TlsFailure> {
        e.get_ref()
            .and_then(|inner| inner.downcast_ref::<TlsFailure>())
    }

    /// As the `io::Error` of an `Io::PeerGone`.
    pub fn to_io(&self) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, self.clone())
    }
}

impl fmt::Display for TlsFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for TlsFailure {}

/// How to trust an upstream whose issuer no root vouches for.
pub const TRUST_FIX: &str =
    "if you trust it, add its root CA with --upstream-ca FILE or [tls] upstream_ca";

/// The reason for a rejected peer certificate.
pub fn certificate_reason(e: &CertificateError) -> String {
    use CertificateError as C;
    match e {
        C::Expired | C::ExpiredContext { .. } => "certificate has expired".into(),
        C::NotValidYet | C::NotValidYetContext { .. } => "certificate is not yet valid".into(),
        C::UnknownIssuer => match super::issuer::take_unknown_issuer() {
            Some(name) => format!("unknown issuer: {name}; {TRUST_FIX}"),
            None => format!("unknown issuer; {TRUST_FIX}"),
        },
        C::NotValidForName => "name mismatch".into(),
        C::NotValidForNameContext { presented, .. } if presented.is_empty() => {
            "name mismatch: cert names no host".into()
        }
        C::NotValidForNameContext { presented, .. } => {
            let names: Vec<&str> = presented.iter().map(|n| bare_name(n)).collect();
            format!("name mismatch: cert is for {}", names.join(", "))
        }
        C::BadSignature => "bad certificate signature".into(),
        C::InvalidPurpose | C::InvalidPurposeContext { .. } => {
            "certificate is not for server authentication".into()
        }
        C::Revoked => "certificate revoked".into(),
        C::BadEncoding => "malformed certificate".into(),
        C::UnhandledCriticalExtension => "certificate has an unknown critical extension".into(),
        C::UnsupportedSignatureAlgorithmContext { .. }
        | C::UnsupportedSignatureAlgorithmForPublicKeyContext { .. } => {
            "certificate uses an unsupported signature algorithm".into()
        }
        other => format!("certificate rejected: {other:?}"),
    }
}

/// `DnsName("a.example")` or `IpAddress(192.0.2.1)` (how webpki lists the
/// names it saw) as `a.example` or `192.0.2.1`.
fn bare_name(presented: &str) -> &str {
    let inner = presented
        .split_once('(')
        .and_then(|(_, rest)| rest.strip_suffix(')'))
        .unwrap_or(presented);
    inner.trim_matches('"')
}

/// The reason for a fatal alert the peer sent.
fn alert_reason(a: AlertDescription) -> String {
    match a {
        AlertDescription::UnknownCA => {
            "peer rejected our certificate: unknown CA (is the portcullis CA trusted? see `portcullis ca`)"
                .into()
        }
        AlertDescription::BadCertificate
        | AlertDescription::CertificateUnknown
        | AlertDescription::UnsupportedCertificate => {
            format!("peer rejected our certificate ({a:?})")
        }
        AlertDescription::CertificateExpired => "peer says our certificate has expired".into(),
        AlertDescription::NoApplicationProtocol => "peer does not speak http/1.1 (ALPN)".into(),
        AlertDescription::ProtocolVersion | AlertDescription::HandshakeFailure => {
            format!("peer refused the handshake ({a:?})")
        }
        other => format!("peer sent alert {other:?}"),
    }
}
