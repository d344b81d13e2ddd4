//! Who may connect where. Pure: no sockets, no clocks, no DNS.
//!
//! Targets and rule host patterns are canonicalised the same way (`host.rs`),
//! rules are compiled once (`rule.rs`), and verdicts come from a linear scan
//! (`check.rs`): deny beats allow, no match is a denial, and special addresses
//! (`addr.rs`) need an allow rule that names them.

mod addr;
mod check;
mod cidr;
mod host;
mod request;
mod rule;
#[cfg(test)]
mod tests;

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

pub use request::normalize_path;
use rule::Rule;

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

/// Allow or deny.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Let matching connections through.
    Allow,
    /// Refuse matching connections; a deny beats any allow.
    Deny,
}

/// A port or port range as written in TOML: `443` or `"8000-8100"` or `"443"`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(untagged)]
pub enum PortSpec {
    /// One port.
    Number(u16),
    /// `"443"` or `"LO-HI"`.
    Text(String),
}

/// One `[[rules]]` table as written in the policy file (before compiling).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    /// Name used in logs and in `X-Proxy-Error`; defaults to `rules[N]`.
    #[serde(default)]
    pub name: Option<String>,
    /// Allow or deny.
    pub action: Action,
    /// One host pattern: `example.com`, `*.example.com`, `*`, or an address literal.
    #[serde(default)]
    pub host: Option<String>,
    /// More host patterns.
    #[serde(default)]
    pub hosts: Vec<String>,
    /// One CIDR, e.g. `10.0.0.0/8` or `::1/128`.
    #[serde(default)]
    pub cidr: Option<String>,
    /// More CIDRs.
    #[serde(default)]
    pub cidrs: Vec<String>,
    /// One port or range; no port and no ports means any port.
    #[serde(default)]
    pub port: Option<PortSpec>,
    /// More ports or ranges.
    #[serde(default)]
    pub ports: Vec<PortSpec>,
    /// Idle timeout for tunnels this rule allows (`"30s"`, `"5m"`, `"off"`).
    #[serde(default)]
    pub idle_timeout: Option<String>,
    /// `"http"`: parse the tunnel's bytes as HTTP/1.1 and apply `requests`.
    #[serde(default)]
    pub inspect: Option<String>,
    /// Request rules for an inspected destination (empty: every request allowed).
    #[serde(default)]
    pub requests: Vec<RequestRuleConfig>,
}

/// One request rule inside an inspecting `[[rules]]` table:
/// `{ action = "allow", method = "GET", path = "/v1/**" }`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestRuleConfig {
    /// Allow or deny; a deny beats any allow.
    pub action: Action,
    /// Method, exact (`GET`), or `*` for any. Defaults to `*`.
    #[serde(default)]
    pub method: Option<String>,
    /// Path glob: `*` matches one segment, `**` any number. Defaults to `/**`.
    #[serde(default)]
    pub path: Option<String>,
}

/// Compiled request rules of one inspecting rule (see `request.rs`). The
/// default has no request rules and an empty name: it allows every request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RequestRules {
    /// The inspecting rule's name.
    name: Arc<str>,
    /// In file order; empty means every request is allowed.
    rules: Vec<request::RequestRule>,
    /// The verdict's name when requests are given and none matches.
    no_match: Arc<str>,
}

/// What request rules say about one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestVerdict {
    /// Allowed; names the request rule (or the rule, when it has no request rules).
    Allow(Arc<str>),
    /// Refused; names the request rule, or says that none matched.
    Deny(Arc<str>),
}

/// Parses `--inspect RULE` (same syntax as `--allow`): an allow rule that
/// inspects HTTP with every request allowed.
/// Named `--inspect SPEC`.
pub fn parse_cli_inspect(spec: &str) -> Result<RuleConfig, PolicyError> {
    rule::parse_cli_inspect(spec)
}

/// A policy file or rule that does not compile; says which rule and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError(pub String);

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PolicyError {}

/// Parses a command-line rule `HOST[:PORT|:LO-HI]` or `CIDR[:PORT|:LO-HI]`
/// (IPv6 in brackets when a port follows: `[::1]:443`, `[fd00::/8]:1-1024`).
/// The rule is named after the flag, e.g. `--allow 127.0.0.1:8080`.
pub fn parse_cli_rule(action: Action, spec: &str) -> Result<RuleConfig, PolicyError> {
    rule::parse_cli_rule(action, spec)
}

/// A compiled policy. Cheap to share (`Arc` inside). The default has no rules,
/// so it denies everything.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    rules: Arc<Vec<Rule>>,
}

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
    /// Set when the allowing rule inspects HTTP: its request rules.
    pub inspect: Option<Arc<RequestRules>>,
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
    /// Compiles rules in order (names default to `rules[N]`, N from 0).
    pub fn from_rules(rules: &[RuleConfig]) -> Result<Policy, PolicyError> {
        let rules = rules
            .iter()
            .enumerate()
            .map(|(i, r)| Rule::compile(i, r))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Policy {
            rules: Arc::new(rules),
        })
    }
    /// The built-in default: public internet on ports 80 and 443. Private and
    /// other special ranges stay refused by the special-address check.
    pub fn builtin_default() -> Policy {
        let rule = RuleConfig {
            name: Some("default-public-web".into()),
            action: Action::Allow,
            host: Some("*".into()),
            hosts: Vec::new(),
            cidr: None,
            cidrs: Vec::new(),
            port: None,
            ports: vec![PortSpec::Number(80), PortSpec::Number(443)],
            idle_timeout: None,
            inspect: None,
            requests: Vec::new(),
        };
        Policy::from_rules(&[rule]).expect("built-in rule compiles")
    }
    /// Parses a TOML policy document and compiles its `[[rules]]` array;
    /// other top-level keys are ignored so a policy can live in a larger file.
    /// Never panics, whatever the input.
    pub fn parse_toml(text: &str) -> Result<Policy, PolicyError> {
        #[derive(serde::Deserialize)]
        struct Doc {
            #[serde(default)]
            rules: Vec<RuleConfig>,
        }
        let doc: Doc =
            toml::from_str(text).map_err(|e| PolicyError(format!("invalid policy: {e}")))?;
        Policy::from_rules(&doc.rules)
    }
    /// Appends `other`'s rules after ours (the CLI adds `--allow`/`--deny`
    /// rules to a file's). Names are kept as given.
    pub fn extend(&mut self, other: Policy) {
        let other = Arc::try_unwrap(other.rules).unwrap_or_else(|a| (*a).clone());
        Arc::make_mut(&mut self.rules).extend(other);
    }
    /// Rule names in order, for logs and diagnostics.
    pub fn rule_names(&self) -> Vec<Arc<str>> {
        self.rules.iter().map(|r| r.name.clone()).collect()
    }
    /// Number of rules.
    pub fn len(&self) -> usize {
        self.rules.len()
    }
    /// Whether there are no rules (the policy then denies everything).
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
    /// Checks a domain target before resolving it; an address-literal target
    /// always gets [`NameVerdict::Resolve`] (pass the literal to
    /// [`Policy::check_resolved`]).
    pub fn check_name(&self, target: &Target) -> NameVerdict {
        check::check_name(&self.rules, target)
    }
    /// Checks a target against its resolved addresses (or its literal address).
    /// Judging the addresses, not just the name, defeats DNS rebinding.
    pub fn check_resolved(&self, target: &Target, addrs: &[IpAddr]) -> Verdict {
        check::check_resolved(&self.rules, target, addrs)
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
