//! Where a connection or request goes, in the one canonical form every
//! layer shares: [`Host`] and [`Target`] (`host.rs`: every spelling of a
//! name or address becomes one value), and request paths as an origin
//! reads them (`path.rs`), and the parent proxy a rule may route through
//! (`parent.rs`). A leaf: it imports nothing of the crate, so the
//! policy, the protocols and the TLS layer can all speak it without
//! importing each other.

use std::fmt;
use std::net::IpAddr;

pub(crate) mod host;
pub mod parent;
pub(crate) mod path;

pub use path::normalize_path;

/// A host as the policy sees it: canonical, so no spelling slips past a rule.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Host {
    /// Lower-case ASCII (punycode for IDNs), no trailing dot.
    Domain(String),
    /// An address literal in any spelling (`127.1`, `0x7f.1`, `[::1]`,
    /// `::ffff:127.0.0.1` becomes `127.0.0.1`).
    Ip(IpAddr),
}

/// A destination: canonical host and port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Target {
    /// Canonical host.
    pub host: Host,
    /// TCP port.
    pub port: u16,
}

/// Why a host or authority string was refused before policy ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetError(pub String);

impl Target {
    /// Canonicalises `host` (a name or address literal, IPv6 optionally in brackets).
    pub fn new(host: &str, port: u16) -> Result<Target, TargetError> {
        host::target(host, port)
    }
    /// Parses an authority `host:port` / `[v6]:port` (as in a CONNECT line).
    pub fn parse_authority(s: &str) -> Result<Target, TargetError> {
        host::parse_authority(s)
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            Host::Domain(d) => write!(f, "{d}:{}", self.port),
            Host::Ip(IpAddr::V6(a)) => write!(f, "[{a}]:{}", self.port),
            Host::Ip(a) => write!(f, "{a}:{}", self.port),
        }
    }
}
