//! Compiled rules: host patterns, CIDRs and port ranges, built from
//! [`RuleConfig`] (policy file) or a command-line spec.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use super::cidr::Cidr;
use super::host::{canonical_host, parse_port};
use super::{Action, Host, PolicyError, PortSpec, RequestRules, RuleConfig};

/// A canonical host pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HostPattern {
    /// `*`: every host, names and address literals alike.
    Any,
    /// One canonical name.
    Exact(String),
    /// `*.example.com`, stored as `.example.com`: strict subdomains only.
    Suffix(String),
}

impl HostPattern {
    /// Whether the pattern matches `host` by name (address literals only
    /// match `*`; literal patterns are compiled to CIDRs instead).
    pub(crate) fn matches(&self, host: &Host) -> bool {
        match (self, host) {
            (HostPattern::Any, _) => true,
            (HostPattern::Exact(p), Host::Domain(d)) => p == d,
            (HostPattern::Suffix(s), Host::Domain(d)) => d.len() > s.len() && d.ends_with(s),
            _ => false,
        }
    }
}

/// An inclusive port range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PortRange {
    lo: u16,
    hi: u16,
}

impl PortRange {
    fn contains(&self, port: u16) -> bool {
        (self.lo..=self.hi).contains(&port)
    }

    /// Parses `443` or `8000-8100`; port 0 and `LO > HI` are errors.
    fn parse(spec: &PortSpec) -> Result<PortRange, String> {
        match spec {
            PortSpec::Number(0) => Err("port 0 is not a valid port".into()),
            PortSpec::Number(p) => Ok(PortRange { lo: *p, hi: *p }),
            PortSpec::Text(t) => {
                let t = t.trim();
                let bad = || format!("invalid port {t:?} (expected 1-65535 or LO-HI)");
                let (lo, hi) = match t.split_once('-') {
                    Some((lo, hi)) => (lo.trim(), hi.trim()),
                    None => (t, t),
                };
                let lo = parse_port(lo).ok_or_else(bad)?;
                let hi = parse_port(hi).ok_or_else(bad)?;
                if lo > hi {
                    return Err(format!("invalid port range {t:?}: {lo} > {hi}"));
                }
                Ok(PortRange { lo, hi })
            }
        }
    }
}

/// One compiled rule. A target matches when (a host pattern matches or a CIDR
/// contains the address) and the port matches.
#[derive(Debug, Clone)]
pub(crate) struct Rule {
    pub(crate) name: Arc<str>,
    pub(crate) action: Action,
    pub(crate) hosts: Vec<HostPattern>,
    pub(crate) cidrs: Vec<Cidr>,
    /// Empty means any port.
    ports: Vec<PortRange>,
    pub(crate) idle_timeout: Option<Duration>,
    /// Set when the rule inspects HTTP: its request rules.
    pub(crate) inspect: Option<Arc<RequestRules>>,
}

impl Rule {
    /// Whether the rule covers `port`.
    pub(crate) fn port_matches(&self, port: u16) -> bool {
        self.ports.is_empty() || self.ports.iter().any(|r| r.contains(port))
    }

    /// Whether a host pattern matches `host` (names only; no addresses).
    pub(crate) fn host_matches(&self, host: &Host) -> bool {
        self.hosts.iter().any(|h| h.matches(host))
    }

    /// Whether a CIDR (or address-literal host) contains `addr`.
    pub(crate) fn cidr_matches(&self, addr: IpAddr) -> bool {
        self.cidrs.iter().any(|c| c.contains(addr))
    }

    /// Whether a CIDR contains `addr` with a prefix at least `min` bits long:
    /// how a rule *names* a special address (`0.0.0.0/0` does not).
    pub(crate) fn names(&self, addr: IpAddr, min: u8) -> bool {
        self.cidrs
            .iter()
            .any(|c| c.prefix() >= min && c.contains(addr))
    }

    /// Compiles rule `index` of a policy.
    pub(crate) fn compile(index: usize, cfg: &RuleConfig) -> Result<Rule, PolicyError> {
        let name: Arc<str> = match &cfg.name {
            Some(n) => n.as_str().into(),
            None => format!("rules[{index}]").into(),
        };
        let fail = |field: &str, msg: String| PolicyError(format!("rule {name:?}: {field}: {msg}"));
        let mut hosts = Vec::new();
        let mut cidrs = Vec::new();
        for h in cfg.host.iter().chain(&cfg.hosts) {
            match parse_host_pattern(h).map_err(|e| fail("host", e))? {
                Pattern::Host(p) => hosts.push(p),
                Pattern::Addr(a) => cidrs.push(Cidr::host(a)),
            }
        }
        for c in cfg.cidr.iter().chain(&cfg.cidrs) {
            cidrs.push(Cidr::parse(c).map_err(|e| fail("cidr", format!("{c:?}: {e}")))?);
        }
        if hosts.is_empty() && cidrs.is_empty() {
            return Err(fail(
                "host/cidr",
                "a rule needs at least one host or cidr".into(),
            ));
        }
        let ports = cfg
            .port
            .iter()
            .chain(&cfg.ports)
            .map(PortRange::parse)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| fail("port", e))?;
        let idle_timeout = match &cfg.idle_timeout {
            Some(t) => crate::duration::parse(t).map_err(|e| fail("idle_timeout", e))?,
            None => None,
        };
        let inspect = match cfg.inspect.as_deref() {
            None if cfg.requests.is_empty() => None,
            None => {
                return Err(fail(
                    "requests",
                    "request rules need inspect = \"http\"".into(),
                ))
            }
            Some("http") if cfg.action == Action::Deny => {
                return Err(fail(
                    "inspect",
                    "only an allow rule can inspect (a deny rule lets nothing through)".into(),
                ))
            }
            Some("http") => Some(Arc::new(RequestRules::new(name.clone(), &cfg.requests)?)),
            Some(other) => {
                return Err(fail(
                    "inspect",
                    format!("{other:?}: the only inspection is \"http\""),
                ))
            }
        };
        Ok(Rule {
            name,
            action: cfg.action,
            hosts,
            cidrs,
            ports,
            idle_timeout,
            inspect,
        })
    }
}

/// A host pattern is either a name pattern or an address literal (a CIDR).
enum Pattern {
    Host(HostPattern),
    Addr(IpAddr),
}

/// Canonicalises a host pattern exactly as targets are canonicalised, so
/// `EXAMPLE.com.` and `bücher.example` match what clients send.
fn parse_host_pattern(p: &str) -> Result<Pattern, String> {
    let p = p.trim();
    if p == "*" {
        return Ok(Pattern::Host(HostPattern::Any));
    }
    if let Some(rest) = p.strip_prefix("*.") {
        if rest.contains('*') {
            return Err(format!(
                "{p:?}: '*' is only allowed as the whole first label"
            ));
        }
        return match canonical_host(rest).map_err(|e| format!("{p:?}: {}", e.0))? {
            Host::Domain(d) => Ok(Pattern::Host(HostPattern::Suffix(format!(".{d}")))),
            Host::Ip(_) => Err(format!("{p:?}: a wildcard cannot precede an address")),
        };
    }
    if p.contains('*') {
        return Err(format!(
            "{p:?}: '*' is only allowed as the whole first label"
        ));
    }
    match canonical_host(p).map_err(|e| format!("{p:?}: {}", e.0))? {
        Host::Domain(d) => Ok(Pattern::Host(HostPattern::Exact(d))),
        Host::Ip(a) => Ok(Pattern::Addr(a)),
    }
}

/// Splits a command-line spec into (host or CIDR, optional port spec).
fn split_cli_spec(spec: &str) -> Result<(&str, Option<&str>), String> {
    if let Some(rest) = spec.strip_prefix('[') {
        let (inner, after) = rest
            .split_once(']')
            .ok_or_else(|| format!("unterminated '[' in {spec:?}"))?;
        return match after {
            "" => Ok((inner, None)),
            _ => match after.strip_prefix(':') {
                Some(port) => Ok((inner, Some(port))),
                None => Err(format!("unexpected {after:?} after ']' in {spec:?}")),
            },
        };
    }
    if spec.matches(':').count() >= 2 {
        return Ok((spec, None));
    }
    Ok(match spec.split_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (spec, None),
    })
}

/// See [`super::parse_cli_rule`].
pub(crate) fn parse_cli_rule(action: Action, spec: &str) -> Result<RuleConfig, PolicyError> {
    let flag = match action {
        Action::Allow => "--allow",
        Action::Deny => "--deny",
    };
    cli_rule(flag, action, None, spec)
}

/// See [`super::parse_cli_inspect`]: `--allow` syntax, inspecting HTTP, no
/// request rules (every request allowed).
pub(crate) fn parse_cli_inspect(spec: &str) -> Result<RuleConfig, PolicyError> {
    cli_rule("--inspect", Action::Allow, Some("http"), spec)
}

/// A command-line rule named `FLAG SPEC`.
fn cli_rule(
    flag: &str,
    action: Action,
    inspect: Option<&str>,
    spec: &str,
) -> Result<RuleConfig, PolicyError> {
    let name = format!("{flag} {spec}");
    let (target, port) =
        split_cli_spec(spec.trim()).map_err(|e| PolicyError(format!("rule {name:?}: {e}")))?;
    if target.is_empty() {
        return Err(PolicyError(format!("rule {name:?}: missing host or cidr")));
    }
    let is_cidr = target.contains('/');
    let cfg = RuleConfig {
        name: Some(name),
        action,
        host: (!is_cidr).then(|| target.to_owned()),
        hosts: Vec::new(),
        cidr: is_cidr.then(|| target.to_owned()),
        cidrs: Vec::new(),
        port: port.map(|p| PortSpec::Text(p.to_owned())),
        ports: Vec::new(),
        idle_timeout: None,
        inspect: inspect.map(str::to_owned),
        requests: Vec::new(),
    };
    // Compile now so a bad flag fails at startup, naming the flag.
    Rule::compile(0, &cfg)?;
    Ok(cfg)
}
