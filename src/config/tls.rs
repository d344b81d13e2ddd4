//! The `[tls]` table: the CA that signs minted leaves, upstream trust
//! anchors, and where a generated CA lives.

use std::path::{Path, PathBuf};

use crate::tls::UpstreamRoots;

/// TLS settings for rules with `tls = "terminate"` (the `[tls]` table). Paths
/// in a file are relative to the file's directory.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TlsConfig {
    /// PEM certificate of the CA that signs minted leaves (with `ca_key`).
    pub ca_cert: Option<PathBuf>,
    /// PEM private key of that CA (with `ca_cert`).
    pub ca_key: Option<PathBuf>,
    /// Extra PEM trust anchors for verifying upstreams, on top of the roots.
    pub upstream_ca: Vec<PathBuf>,
    /// The roots upstream certificates are verified against, before
    /// `upstream_ca`: the platform's store (default) or webpki's.
    pub upstream_roots: UpstreamRoots,
    /// Where a generated CA lives when `ca_cert`/`ca_key` are absent: the
    /// configured directory, else `$XDG_STATE_HOME/portcullis`, else
    /// `~/.local/state/portcullis`; `None` only when neither variable is set.
    pub state_dir: Option<PathBuf>,
    /// Hand terminated TLS to the kernel after its handshakes (kTLS) where
    /// the kernel offers it; off by default. A kernel without the TLS ULP
    /// leaves it in user space, with one warning at start.
    pub ktls: bool,
}

impl Default for TlsConfig {
    fn default() -> Self {
        TlsConfig {
            ca_cert: None,
            ca_key: None,
            upstream_ca: Vec::new(),
            upstream_roots: UpstreamRoots::default(),
            state_dir: default_state_dir(),
            ktls: false,
        }
    }
}

/// `$XDG_STATE_HOME/portcullis` (an absolute path only, per the XDG spec),
/// else `$HOME/.local/state/portcullis`.
pub fn default_state_dir() -> Option<PathBuf> {
    let absolute = |v: std::ffi::OsString| {
        let p = PathBuf::from(v);
        p.is_absolute().then_some(p)
    };
    if let Some(p) = std::env::var_os("XDG_STATE_HOME").and_then(absolute) {
        return Some(p.join("portcullis"));
    }
    std::env::var_os("HOME")
        .and_then(absolute)
        .map(|h| h.join(".local/state/portcullis"))
}

impl TlsConfig {
    /// Makes relative paths relative to `dir` (the configuration file's).
    pub fn rebase(&mut self, dir: &Path) {
        let fix = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = dir.join(&*p);
            }
        };
        self.ca_cert.iter_mut().for_each(fix);
        self.ca_key.iter_mut().for_each(fix);
        self.upstream_ca.iter_mut().for_each(fix);
        self.state_dir.iter_mut().for_each(fix);
    }
}
