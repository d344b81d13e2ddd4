//! What TLS needs across sessions: for terminating it, the CA's minter, a
//! bounded cache of leaves and the client-facing config; for speaking it to
//! upstreams (terminated tunnels, `https://` forward requests), the
//! upstream-facing config. Each part is built once, when first needed (the
//! reactor builds the terminating part at start when a rule terminates, so a
//! CA that cannot load stops the start), and lent to sessions through `Ctx`.

use std::sync::{Arc, Mutex};

use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, ServerConfig};

use crate::config::TlsConfig;
use crate::policy::Host;
use crate::tls::{CertAuthority, ClientConfigs, LeafCache, LeafKeys, Minter, ServerConfigs};

/// Leaves kept minted at once (a bounded cache: a client naming endless
/// hosts costs CPU, never memory).
const LEAF_CACHE: usize = 1024;

pub(crate) struct TlsEnv {
    config: TlsConfig,
    terminator: Option<Terminator>,
    upstream: Arc<UpstreamTrust>,
}

/// The upstream-facing config, one for every worker: loaded when first
/// needed (at start when a rule terminates TLS), reloaded on SIGHUP by the
/// signal thread, so reading the platform's store never holds up a reactor
/// that already has one.
pub(crate) struct UpstreamTrust {
    config: TlsConfig,
    current: Mutex<Option<ClientConfigs>>,
}

impl UpstreamTrust {
    pub(crate) fn new(config: TlsConfig) -> UpstreamTrust {
        UpstreamTrust {
            config,
            current: Mutex::new(None),
        }
    }

    fn build(&self) -> Result<ClientConfigs, String> {
        let loaded = crate::tls::roots::load(self.config.upstream_roots, &self.config.upstream_ca)
            .map_err(|e| e.to_string())?;
        log::info!("{}", loaded.summary);
        if let Some(w) = &loaded.warning {
            log::warn!("{w}");
        }
        Ok(ClientConfigs::with_roots(loaded.store))
    }

    /// The config, loading the roots if nobody has yet.
    pub(crate) fn get(&self) -> Result<Arc<ClientConfig>, String> {
        // A poisoned lock held only an Option being replaced whole.
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = &*current {
            return Ok(c.config());
        }
        let built = self.build()?;
        let config = built.config();
        *current = Some(built);
        Ok(config)
    }

    /// Reads the roots again (the platform's store and `upstream_ca` may
    /// have changed), if they were ever loaded; on an error the roots in
    /// use stay. New upstream handshakes use the new roots.
    pub(crate) fn reload(&self) -> Result<(), String> {
        let loaded = self
            .current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some();
        if !loaded {
            return Ok(());
        }
        // Built without the lock: handshakes meanwhile use the old roots.
        let built = self.build()?;
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = Some(built);
        Ok(())
    }
}

/// What terminating TLS needs.
struct Terminator {
    minter: Minter,
    leaves: LeafCache,
    servers: ServerConfigs,
}

impl TlsEnv {
    /// `upstream`: shared by every worker (see [`UpstreamTrust`]).
    pub(crate) fn new(config: TlsConfig, upstream: Arc<UpstreamTrust>) -> TlsEnv {
        TlsEnv {
            config,
            terminator: None,
            upstream,
        }
    }

    /// Loads (or generates, first time) the CA, once, and the upstream trust
    /// anchors. `--check` runs the same checks
    /// (`CertAuthority::check_config`, `ClientConfigs::new`).
    pub(crate) fn prepare_termination(&mut self) -> Result<(), String> {
        if self.terminator.is_some() {
            return Ok(());
        }
        // Every terminated tunnel speaks TLS upstream: a bad `upstream_ca`
        // stops the start too, rather than fail each tunnel.
        self.client_config()?;
        let cfg = &self.config;
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
        self.terminator = Some(Terminator {
            minter,
            leaves: LeafCache::new(LEAF_CACHE),
            servers: ServerConfigs::new(),
        });
        Ok(())
    }

    /// The client-facing config for `name`, with a leaf from the cache or
    /// minted now (about a tenth of a millisecond: on the reactor thread).
    pub(crate) fn server_config(&mut self, name: &Host) -> Result<Arc<ServerConfig>, String> {
        self.prepare_termination()?;
        let t = self
            .terminator
            .as_mut()
            .ok_or("TLS termination is not available")?;
        let leaf: Arc<CertifiedKey> = t.leaves.get_or_mint(&t.minter, name).map_err(|e| e.0)?;
        Ok(t.servers.for_leaf(leaf))
    }

    /// The upstream-facing config (the platform's or webpki's roots plus
    /// `upstream_ca`).
    pub(crate) fn client_config(&mut self) -> Result<Arc<ClientConfig>, String> {
        self.upstream.get()
    }
}
