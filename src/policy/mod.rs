//! Who may connect where. Pure: no sockets, no clocks, no DNS.
//!
//! STUB: the policy helper replaces the bodies; the signatures are the contract
//! the session code is written against.

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

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
        let _ = (host, port);
        todo!()
    }
    /// Parses an authority `host:port` / `[v6]:port` (as in a CONNECT line).
    pub fn parse_authority(s: &str) -> Result<Target, TargetError> {
        let _ = s;
        todo!()
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

/// A compiled policy. Cheap to share (`Arc` inside).
#[derive(Debug, Clone, Default)]
pub struct Policy {}

/// Why a target was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denial {
    /// A deny rule matched (named).
    Rule(Arc<str>),
    /// No allow rule matched (deny by default).
    NoRule,
    /// A resolved or literal address is private/loopback/link-local/CGNAT/
    /// multicast/unspecified and no rule names it. The `&str` names the range.
    SpecialAddress(IpAddr, &'static str),
}

/// Policy said yes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allowed {
    /// The rule that allowed it.
    pub rule: Arc<str>,
    /// The rule's idle timeout for tunnels it allows, if it sets one.
    pub idle_timeout: Option<Duration>,
    /// The addresses that passed, in resolver order: dial exactly these.
    pub addrs: Vec<IpAddr>,
}

/// The answer before DNS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameVerdict {
    /// Refused on the name alone: do not resolve.
    Deny(Denial),
    /// Some allow rule could match: resolve, then call [`Policy::check_resolved`].
    Resolve,
}

/// The answer after DNS (or for an address literal).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Allowed, with the vetted addresses.
    Allow(Allowed),
    /// Refused.
    Deny(Denial),
}

impl Policy {
    /// The built-in default: public internet on ports 80 and 443.
    pub fn builtin_default() -> Policy {
        todo!()
    }
    /// Checks a domain target before resolving it.
    pub fn check_name(&self, target: &Target) -> NameVerdict {
        let _ = target;
        todo!()
    }
    /// Checks a target against its resolved addresses (or its literal address).
    pub fn check_resolved(&self, target: &Target, addrs: &[IpAddr]) -> Verdict {
        let _ = (target, addrs);
        todo!()
    }
}

impl fmt::Display for Denial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Denial::Rule(r) => write!(f, "denied by rule {r}"),
            Denial::NoRule => f.write_str("no rule allows this destination"),
            Denial::SpecialAddress(a, range) => {
                write!(f, "{a} is a {range} address and no rule names it")
            }
        }
    }
}
