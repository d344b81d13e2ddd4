//! TLS for HTTPS inspection: a local CA, leaves minted per name, the two
//! rustls configurations, the ClientHello read before a certificate is
//! chosen, and a sans-IO layer that puts a `rustls::Connection` between a
//! non-blocking byte wire and plaintext.
//!
//! ```text
//!  client ──TLS──> [TlsAccept: ClientHello, SNI check] ──leaf──> [TlsLayer server] ──plaintext──┐
//!                                                                                                │ HTTP/1.1 exchange
//!  upstream <──TLS── [TlsLayer client: SNI = target, system roots + upstream_ca] <──plaintext───┘
//! ```
//!
//! - [`ca`]: the CA that signs the leaves, loaded from PEM files or generated
//!   once into a state directory and reused.
//! - [`leaf`]: a [`leaf::Minter`] that signs a short-lived leaf for exactly one
//!   name, and a bounded [`leaf::LeafCache`] in front of it.
//! - [`config`]: the client-facing `ServerConfig` (ALPN `http/1.1` only) and
//!   the upstream-facing `ClientConfig` (webpki roots plus extra anchors).
//! - [`failure`]: TLS errors as short human reasons for `X-Proxy-Error` and logs.
//! - [`accept`]: [`sniff`] of the first bytes, the SNI and ALPN checks of
//!   [`ClientHelloInfo::leaf_name`], and `TlsAccept` which reads the
//!   ClientHello and then completes with the chosen leaf.
//! - `layer`: `TlsLayer`, plaintext read/write with socket semantics over a
//!   `Wire`, with bounded memory whatever the peers do.
//! - [`instructions`]: what `portcullis ca` prints.
//!
//! Nothing here touches sockets or the reactor: the session implements
//! `Wire` for its endpoint and drives the layer from readiness.

// The session wires `TlsAccept`, `TlsLayer` and `Wire` in next; until then
// only the tests use them.
#[allow(dead_code)]
pub mod accept;
pub mod ca;
pub mod config;
mod der;
pub mod failure;
pub mod instructions;
pub mod issuer;
pub mod jks;
pub mod ktls;
#[allow(dead_code)]
pub(crate) mod layer;
pub mod leaf;
pub mod roots;
#[allow(dead_code)]
pub(crate) mod wire;

#[cfg(test)]
pub(crate) mod tests;

pub use accept::{alert_record, sniff, ClientHelloInfo, HelloRefusal, Sniff};
pub use ca::{CaError, CertAuthority};
pub use config::{ClientConfigs, ConfigError, ServerConfigs};
pub use failure::TlsFailure;
pub use leaf::{LeafCache, LeafError, LeafKeys, Minter};
pub use roots::{LoadedRoots, UpstreamRoots};

/// The only application protocol offered and accepted on either side.
pub const ALPN_HTTP11: &[u8] = b"http/1.1";

/// The crypto provider every config uses: ring (aws-lc-rs builds slowly here),
/// with the AES-128-GCM suites first. A terminated tunnel encrypts every byte
/// twice; AES-128 costs about a quarter less than AES-256 per byte and is the
/// order nginx and most CDNs prefer. Every suite stays available.
pub fn provider() -> std::sync::Arc<rustls::crypto::CryptoProvider> {
    use rustls::CipherSuite as S;
    let mut p = rustls::crypto::ring::default_provider();
    let aes128 = |s: &rustls::SupportedCipherSuite| {
        matches!(
            s.suite(),
            S::TLS13_AES_128_GCM_SHA256
                | S::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
                | S::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256
        )
    };
    // Stable: the relative order within each group stays ring's.
    p.cipher_suites.sort_by_key(|s| !aes128(s));
    std::sync::Arc::new(p)
}

/// A host as text: the name, or the address (IPv6 without brackets, as in
/// certificates and SNI checks).
pub fn host_text(host: &crate::target::Host) -> String {
    match host {
        crate::target::Host::Domain(d) => d.clone(),
        crate::target::Host::Ip(ip) => ip.to_string(),
    }
}
