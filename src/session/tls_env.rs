//! What terminating TLS needs across sessions: the CA's minter, a bounded
//! cache of leaves, and the two rustls configurations. Built once (when a
//! rule terminates TLS) and lent to sessions through `Ctx`.

use std::sync::Arc;

use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, ServerConfig};

use crate::config::TlsConfig;
use crate::policy::Host;
use crate::tls::{CertAuthority, ClientConfigs, LeafCache, LeafKeys, Minter, ServerConfigs};

/// Leaves kept minted at once (a bounded cache: a client naming endless
/// hosts costs CPU, never memory).
const LEAF_CACHE: usize = 1024;

pub(crate) struct TlsEnv {
    minter: Minter,
    leaves: LeafCache,
    servers: ServerConfigs,
    clients: ClientConfigs,
}

impl TlsEnv {
    /// Loads (or generates, first time) the CA and builds both configs.
    pub(crate) fn load(cfg: &TlsConfig) -> Result<TlsEnv, String> {
        let state_dir = cfg.state_dir.clone().ok_or_else(|| {
            "no state directory for the generated CA: set [tls] state_dir, or ca_cert and ca_key"
                .to_string()
        })?;
        let ca =
            CertAuthority::from_config(cfg.ca_cert.as_deref(), cfg.ca_key.as_deref(), &state_dir)
                .map_err(|e| e.to_string())?;
        log::info!(
            "TLS termination: leaves signed by the CA in {} (see `portcullis ca`)",
            ca.cert_path().display()
        );
        // One key for every leaf halves the cost of a mint; it never leaves
        // the process, like the CA's.
        let minter = Minter::new(Arc::new(ca), LeafKeys::Shared).map_err(|e| e.0)?;
        let clients = ClientConfigs::new(&cfg.upstream_ca).map_err(|e| e.to_string())?;
        Ok(TlsEnv {
            minter,
            leaves: LeafCache::new(LEAF_CACHE),
            servers: ServerConfigs::new(),
            clients,
        })
    }

    /// The client-facing config for `name`, with a leaf from the cache or
    /// minted now (about a tenth of a millisecond: on the reactor thread).
    pub(crate) fn server_config(&mut self, name: &Host) -> Result<Arc<ServerConfig>, String> {
        let leaf: Arc<CertifiedKey> = self
            .leaves
            .get_or_mint(&self.minter, name)
            .map_err(|e| e.0)?;
        Ok(self.servers.for_leaf(leaf))
    }

    /// The upstream-facing config.
    pub(crate) fn client_config(&self) -> Arc<ClientConfig> {
        self.clients.config()
    }
}
