//! Tests of the TLS module without sockets: layers run against each other
//! through an in-memory wire pair with small capacities.

mod accept;
mod ca;
mod ktls;
mod layer;
mod leaf;
mod pair;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use rustls::RootCertStore;

use super::accept::{HelloPoll, TlsAccept};
use super::layer::{LayerLimits, TlsLayer};
use super::{CertAuthority, ClientConfigs, LeafKeys, Minter, ServerConfigs};
use crate::target::Host;
use pair::End;

/// A directory removed on drop (no tempfile crate in the tree).
pub(crate) struct TempDir(PathBuf);

impl TempDir {
    pub(super) fn new() -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "portcullis-tls-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub(super) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A generated CA in its own directory, and a minter for it.
pub(crate) struct Fixture {
    pub(crate) _dir: TempDir,
    pub(crate) ca: Arc<CertAuthority>,
    pub(crate) minter: Minter,
}

impl Fixture {
    pub(crate) fn new() -> Fixture {
        let dir = TempDir::new();
        let ca = Arc::new(CertAuthority::load_or_generate(&dir.path().join("state")).unwrap());
        let minter = Minter::new(ca.clone(), LeafKeys::Shared).unwrap();
        Fixture {
            _dir: dir,
            ca,
            minter,
        }
    }

    /// Client configs trusting exactly this CA.
    pub(crate) fn clients(&self) -> ClientConfigs {
        ClientConfigs::with_roots(self.roots())
    }

    pub(crate) fn roots(&self) -> RootCertStore {
        let mut roots = RootCertStore::empty();
        roots.add(self.ca.cert_der().clone()).unwrap();
        roots
    }

    /// A client layer to `host` and a server layer serving a leaf for
    /// `leaf_name`, accepted through `TlsAccept` over the wires.
    pub(super) fn pair_for(
        &self,
        host: &Host,
        leaf_name: &Host,
        limits: LayerLimits,
        cw: &mut End,
        sw: &mut End,
    ) -> (TlsLayer, TlsLayer) {
        let client = TlsLayer::client(self.clients().config(), host, limits).unwrap();
        self.accept_with(client, leaf_name, limits, cw, sw)
    }

    /// Completes the server side of `client`'s handshake start.
    pub(super) fn accept_with(
        &self,
        mut client: TlsLayer,
        leaf_name: &Host,
        limits: LayerLimits,
        cw: &mut End,
        sw: &mut End,
    ) -> (TlsLayer, TlsLayer) {
        let mut accept = TlsAccept::new(&[], limits);
        let mut ready = false;
        for _ in 0..100_000 {
            client.flush(cw);
            match accept.poll(sw) {
                HelloPoll::Ready(_) => {
                    ready = true;
                    break;
                }
                HelloPoll::WouldBlock => {}
                other => panic!("accept failed: {other:?}"),
            }
        }
        assert!(ready, "no ClientHello");
        let leaf = self.minter.mint(leaf_name).unwrap().key;
        let server = accept
            .complete(ServerConfigs::new().for_leaf(leaf))
            .map_err(|(f, _)| f)
            .unwrap();
        (client, server)
    }
}

pub(crate) fn domain(s: &str) -> Host {
    Host::Domain(s.to_owned())
}
