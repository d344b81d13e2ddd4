//! The two rustls configurations: the client-facing `ServerConfig` (our
//! leaves, ALPN `http/1.1` only so HTTP/2 clients fall back) and the
//! upstream-facing `ClientConfig` (the platform's or webpki's roots plus
//! `upstream_ca` anchors, see `roots`).
//! Both speak TLS 1.2 and 1.3 with the ring provider.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::ClientConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::server::{ClientHello, ResolvesServerCert, ServerConfig};
use rustls::sign::CertifiedKey;
use rustls::RootCertStore;

use super::{provider, ALPN_HTTP11};

const VERSIONS: &[&rustls::SupportedProtocolVersion] =
    &[&rustls::version::TLS13, &rustls::version::TLS12];

/// A configuration that could not be built; names the file at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file concerned, if any.
    pub path: Option<PathBuf>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.path {
            Some(p) => write!(f, "{}: {}", p.display(), self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Serves one fixed leaf: each connection gets a config carrying the leaf
/// chosen after its ClientHello was read.
#[derive(Debug)]
struct FixedLeaf(Option<Arc<CertifiedKey>>);

impl ResolvesServerCert for FixedLeaf {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.0.clone()
    }
}

/// Client-facing configs: one template, cloned per connection with its leaf.
#[derive(Debug, Clone)]
pub struct ServerConfigs {
    template: ServerConfig,
}

impl Default for ServerConfigs {
    fn default() -> Self {
        ServerConfigs::new()
    }
}

impl ServerConfigs {
    /// TLS 1.2 and 1.3, no client certificates, ALPN exactly `http/1.1`.
    pub fn new() -> ServerConfigs {
        let mut template = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(VERSIONS)
            .expect("ring supports TLS 1.2 and 1.3")
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(FixedLeaf(None)));
        template.alpn_protocols = vec![ALPN_HTTP11.to_vec()];
        // Our suite order (AES-128 first, see `provider`), not the client's:
        // clients list AES-256 first, which costs more on this hop.
        template.ignore_client_order = true;
        // Lets a finished session hand its keys to the kernel (kTLS, when
        // configured); nothing else reads them.
        template.enable_secret_extraction = true;
        ServerConfigs { template }
    }

    /// The config for one connection, serving `leaf`. Cheap: a clone of a
    /// few `Arc`s and small vectors; the session cache is shared.
    pub fn for_leaf(&self, leaf: Arc<CertifiedKey>) -> Arc<ServerConfig> {
        let mut c = self.template.clone();
        c.cert_resolver = Arc::new(FixedLeaf(Some(leaf)));
        Arc::new(c)
    }
}

/// The upstream-facing config: verifies servers against the roots
/// [`roots::load`](super::roots::load) gave (the platform's or webpki's, plus
/// `upstream_ca`), names an unknown issuer, offers ALPN `http/1.1`.
#[derive(Debug, Clone)]
pub struct ClientConfigs {
    config: Arc<ClientConfig>,
}

impl ClientConfigs {
    /// webpki's roots plus every certificate in each `upstream_ca` file.
    pub fn new(upstream_ca: &[PathBuf]) -> Result<ClientConfigs, ConfigError> {
        let loaded = super::roots::load(super::UpstreamRoots::Webpki, upstream_ca)?;
        Ok(ClientConfigs::with_roots(loaded.store))
    }

    /// Exactly these roots (tests, or a deployment that trusts only its own).
    pub fn with_roots(roots: RootCertStore) -> ClientConfigs {
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            provider(),
        )
        .build()
        .expect("a root store with anchors and ring's algorithms");
        let mut config = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(VERSIONS)
            .expect("ring supports TLS 1.2 and 1.3")
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(super::issuer::NamingVerifier(verifier)))
            .with_no_client_auth();
        config.alpn_protocols = vec![ALPN_HTTP11.to_vec()];
        // As for the server side: for a kernel hand-off, when configured.
        config.enable_secret_extraction = true;
        ClientConfigs {
            config: Arc::new(config),
        }
    }

    /// The shared config, for `TlsLayer::client`.
    pub fn config(&self) -> Arc<ClientConfig> {
        self.config.clone()
    }
}

/// Adds every certificate of a PEM file as a trust anchor.
pub fn add_anchors(roots: &mut RootCertStore, path: &Path) -> Result<(), ConfigError> {
    let err = |m: String| ConfigError {
        path: Some(path.to_owned()),
        message: m,
    };
    let bytes = std::fs::read(path).map_err(|e| err(format!("cannot read: {e}")))?;
    let mut added = 0;
    for cert in CertificateDer::pem_slice_iter(&bytes) {
        let cert = cert.map_err(|e| err(format!("bad PEM: {e}")))?;
        roots
            .add(cert)
            .map_err(|e| err(format!("not a usable trust anchor: {e}")))?;
        added += 1;
    }
    if added == 0 {
        return Err(err("no CERTIFICATE in this PEM file".into()));
    }
    Ok(())
}
