//! Compiled rules: host patterns, CIDRs, port ranges and the inspection a
//! rule asks for, built from [`RuleConfig`] (policy file) or a command-line spec.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use super::cidr::Cidr;
use super::request::RuleRequests;
use super::Route;
use super::{Action, Host, MatchMode, PolicyError, PortSpec, RuleConfig, RuleMode, TlsMode};
use crate::target::host::{canonical_host, parse_port};
use crate::target::parent::ParentProxy;

/// A canonical host pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HostPattern {
    /// `*`: every host name (and, in a deny rule only, every address literal).
    Any,
    /// One canonical name.
    Exact(String),
    /// `*.example.com`, stored as `.example.com`: strict subdomains only.
    Suffix(String),
}

impl HostPattern {
    /// Whether the pattern matches the name `d`.
    pub(crate) fn matches_name(&self, d: &str) -> bool {
        match self {
            HostPattern::Any => true,
            HostPattern::Exact(p) => p == d,
            HostPattern::Suffix(s) => d.len() > s.len() && d.ends_with(s.as_str()),
        }
    }
}

/// An inclusive port range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PortRange {
    pub(crate) lo: u16,
    pub(crate) hi: u16,
}

impl PortRange {
    fn contains(&self, port: u16) -> bool {
        (self.lo..=self.hi).contains(&port)
    }

    /// Parses `443` or `8000-8100`; port 0, out of range and `LO > HI` are errors.
    fn parse(spec: &PortSpec) -> Result<PortRange, String> {
        match spec {
            PortSpec::Number(0) => Err("port 0 is out of range (1-65535)".into()),
            PortSpec::Number(p) => Ok(PortRange { lo: *p, hi: *p }),
            PortSpec::Text(t) => {
                let t = t.trim();
                let (lo, hi) = match t.split_once('-') {
                    Some((lo, hi)) => (lo.trim(), hi.trim()),
                    None => (t, t),
                };
                let lo = port_number(lo, t)?;
                let hi = port_number(hi, t)?;
                if lo > hi {
                    return Err(format!("invalid port range {t:?}: {lo} > {hi}"));
                }
                Ok(PortRange { lo, hi })
            }
        }
    }
}

/// One end of a port spec: a plain message for numbers out of range.
fn port_number(s: &str, whole: &str) -> Result<u16, String> {
    if let Some(p) = parse_port(s) {
        return Ok(p);
    }
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "port {} is out of range (1-65535)",
            s.trim_start_matches('0')
                .parse::<u128>()
                .map_or(s.into(), |n| n.to_string())
        ));
    }
    Err(format!(
        "invalid port {whole:?} (expected a number 1-65535 or a range LO-HI)"
    ))
}

/// One compiled rule. A target matches when its port matches and (a host
/// pattern matches the name, or a CIDR contains the address) or, with
/// `match = "both"`, both.
#[derive(Debug, Clone)]
pub(crate) struct Rule {
    pub(crate) name: Arc<str>,
    pub(crate) action: Action,
    pub(crate) hosts: Vec<HostPattern>,
    pub(crate) cidrs: Vec<Cidr>,
    /// Empty means any port.
    pub(crate) ports: Vec<PortRange>,
    pub(crate) match_mode: MatchMode,
    /// `mode = "audit"` on this rule.
    pub(crate) audit: bool,
    pub(crate) idle_timeout: Option<Duration>,
    /// Set when the rule inspects HTTP (or terminates TLS).
    pub(crate) inspect: Option<Arc<RuleRequests>>,
    /// How the rule's connections leave (`None`: the global setting).
    pub(crate) route: Option<Route>,
    /// Only these users match (`None`: anyone).
    pub(crate) users: Option<Vec<Arc<str>>>,
    /// `reason = "..."`: told to the client when this rule refuses.
    pub(crate) reason: Option<Arc<str>>,
}

impl Rule {
    /// Whether the rule covers `port`.
    pub(crate) fn port_matches(&self, port: u16) -> bool {
        self.ports.is_empty() || self.ports.iter().any(|r| r.contains(port))
    }

    /// Whether a host pattern matches `host`. Names match by pattern; an
    /// address literal matches only `*` of a deny rule (address-literal
    /// patterns are compiled to CIDRs), so an allow wildcard never reaches one.
    pub(crate) fn host_matches(&self, host: &Host) -> bool {
        match host {
            Host::Domain(d) => self.hosts.iter().any(|h| h.matches_name(d)),
            Host::Ip(_) => self.action == Action::Deny && self.hosts.contains(&HostPattern::Any),
        }
    }

    /// The flag that writes a rule like this one: `--terminate`,
    /// `--inspect` or `--allow` (`--deny` for a deny rule).
    pub(crate) fn flag(&self) -> &'static str {
        match (&self.action, &self.inspect) {
            (Action::Deny, _) => "--deny",
            (_, Some(i)) if i.tls == TlsMode::Terminate => "--terminate",
            (_, Some(_)) => "--inspect",
            (_, None) => "--allow",
        }
    }

    /// The rule's ports as written: `443`, `80, 8000-8100`, or `any`.
    pub(crate) fn ports_text(&self) -> String {
        if self.ports.is_empty() {
            return "any".into();
        }
        let each = self.ports.iter().map(|r| match r.lo == r.hi {
            true => r.lo.to_string(),
            false => format!("{}-{}", r.lo, r.hi),
        });
        each.collect::<Vec<_>>().join(", ")
    }

    /// Whether a CIDR (or address-literal host) contains `addr`.
    /// A deny rule's IPv4 blocks also hold the IPv6 spellings that reach
    /// the same IPv4 host through a translator (NAT64, 6to4): a name
    /// resolving to `64:ff9b::a.b.c.d` must not dodge a deny of `a.b.c.d`.
    pub(crate) fn cidr_matches(&self, addr: IpAddr) -> bool {
        let embedded = match self.action {
            Action::Deny => super::addr::embedded_v4(addr),
            Action::Allow => None,
        };
        self.cidrs
            .iter()
            .any(|c| c.contains(addr) || embedded.is_some_and(|v4| c.contains(IpAddr::V4(v4))))
    }

    /// Whether `user` (`None`: anonymous) may match this rule at all.
    pub(crate) fn user_matches(&self, user: Option<&str>) -> bool {
        match (&self.users, user) {
            (None, _) => true,
            (Some(list), Some(u)) => list.iter().any(|n| &**n == u),
            (Some(_), None) => false,
        }
    }

    /// Whether the rule matches `host` connecting to `addr` (canonical) on
    /// `port`.
    pub(crate) fn matches(&self, host: &Host, addr: IpAddr, port: u16) -> bool {
        self.port_matches(port)
            && match self.match_mode {
                MatchMode::Either => self.host_matches(host) || self.cidr_matches(addr),
                MatchMode::Both => self.host_matches(host) && self.cidr_matches(addr),
            }
    }

    /// Whether a CIDR contains `addr` with a prefix at least `min` bits long:
    /// how a rule *names* a special address (`0.0.0.0/0` does not).
    pub(crate) fn names(&self, addr: IpAddr, min: u8) -> bool {
        self.cidrs
            .iter()
            .any(|c| c.prefix() >= min && c.contains(addr))
    }

    /// Policy-wide audit on or off: request rules carry the effective flag.
    pub(crate) fn set_policy_audit(&mut self, policy_audit: bool) {
        let own = self.audit;
        if let Some(r) = &mut self.inspect {
            if r.audit != (own || policy_audit) {
                Arc::make_mut(r).audit = own || policy_audit;
            }
        }
    }

    /// Compiles rule `index` of a policy (`policy_audit`: the whole policy
    /// is in audit mode). Errors name the rule and the key as written.
    pub(crate) fn compile(
        index: usize,
        cfg: &RuleConfig,
        policy_audit: bool,
    ) -> Result<Rule, PolicyError> {
        let name: Arc<str> = match &cfg.name {
            Some(n) => n.as_str().into(),
            None => format!("rules[{index}]").into(),
        };
        let fail = |key: String, msg: String| PolicyError::field(&name, key, msg);
        let both = cfg.match_mode == Some(MatchMode::Both);
        let mut hosts = Vec::new();
        let mut cidrs = Vec::new();
        let host_keys = cfg.host.iter().map(|h| ("host".to_string(), h)).chain(
            cfg.hosts
                .iter()
                .enumerate()
                .map(|(i, h)| (format!("hosts[{i}]"), h)),
        );
        for (key, h) in host_keys {
            match parse_host_pattern(h).map_err(|e| fail(key.clone(), e))? {
                Pattern::Host(p) => hosts.push(p),
                Pattern::Addr(_) if both => {
                    return Err(fail(
                        key,
                        format!(
                            "{h:?}: with match = \"both\", hosts are names; put addresses in cidrs"
                        ),
                    ))
                }
                Pattern::Addr(a) => cidrs.push(Cidr::host(a)),
            }
        }
        let cidr_keys = cfg.cidr.iter().map(|c| ("cidr".to_string(), c)).chain(
            cfg.cidrs
                .iter()
                .enumerate()
                .map(|(i, c)| (format!("cidrs[{i}]"), c)),
        );
        for (key, c) in cidr_keys {
            cidrs.push(Cidr::parse(c).map_err(|e| fail(key, format!("{c:?}: {e}")))?);
        }
        if hosts.is_empty() && cidrs.is_empty() {
            return Err(PolicyError {
                rule: None,
                rule_name: Some(name.to_string()),
                key: None,
                message: "a rule needs at least one host or cidr".into(),
            });
        }
        if both && (hosts.is_empty() || cidrs.is_empty()) {
            return Err(fail(
                "match".into(),
                "match = \"both\" needs hosts and cidrs: the name must resolve into a CIDR".into(),
            ));
        }
        let port_keys = cfg.port.iter().map(|p| ("port".to_string(), p)).chain(
            cfg.ports
                .iter()
                .enumerate()
                .map(|(i, p)| (format!("ports[{i}]"), p)),
        );
        let mut ports = Vec::new();
        for (key, p) in port_keys {
            ports.push(PortRange::parse(p).map_err(|e| fail(key, e))?);
        }
        let idle_timeout = match &cfg.idle_timeout {
            Some(t) => crate::duration::parse(t).map_err(|e| fail("idle_timeout".into(), e))?,
            None => None,
        };
        let audit = cfg.mode == Some(RuleMode::Audit);
        let inspect = compile_inspection(&name, cfg, audit || policy_audit)?;
        let route = match cfg.upstream_proxy.as_deref() {
            None => None,
            Some(_) if cfg.action == Action::Deny => {
                return Err(fail(
                    "upstream_proxy".into(),
                    "a deny rule has nothing to route".into(),
                ))
            }
            Some(s) if s.eq_ignore_ascii_case("direct") => Some(Route::Direct),
            Some(s) => Some(Route::Parent(Arc::new(
                ParentProxy::parse(s).map_err(|e| fail("upstream_proxy".into(), e))?,
            ))),
        };
        let users = match &cfg.users {
            None => None,
            Some(list) if list.is_empty() => return Err(fail(
                "users".into(),
                "names no user: list the users this rule is for, or remove users to match anyone"
                    .into(),
            )),
            Some(list) => {
                let mut out: Vec<Arc<str>> = Vec::with_capacity(list.len());
                for (i, u) in list.iter().enumerate() {
                    crate::auth::check_name(u)
                        .map_err(|e| fail(format!("users[{i}]"), format!("{u:?}: {e}")))?;
                    if !out.iter().any(|o| &**o == u) {
                        out.push(u.as_str().into());
                    }
                }
                Some(out)
            }
        };
        let reason = match cfg.reason.as_deref().map(str::trim) {
            Some("") => {
                return Err(fail(
                    "reason".into(),
                    "is empty: say why, or remove it".into(),
                ))
            }
            Some(r) => Some(r.into()),
            None => None,
        };
        Ok(Rule {
            users,
            reason,
            name,
            action: cfg.action,
            hosts,
            cidrs,
            ports,
            match_mode: cfg.match_mode.unwrap_or_default(),
            audit,
            idle_timeout,
            inspect: inspect.map(Arc::new),
            route,
        })
    }
}

/// `inspect`, `tls`, `upgrades` and `requests`: what an inspecting rule does.
fn compile_inspection(
    name: &Arc<str>,
    cfg: &RuleConfig,
    audit: bool,
) -> Result<Option<RuleRequests>, PolicyError> {
    let fail = |key: &str, msg: &str| PolicyError::field(name, key, msg);
    let tls = cfg.tls.unwrap_or_default();
    if cfg.action == Action::Deny {
        for (key, set) in [
            ("inspect", cfg.inspect.is_some()),
            ("tls", cfg.tls.is_some()),
            ("upgrades", cfg.upgrades.is_some()),
        ] {
            if set {
                return Err(fail(
                    key,
                    "only an allow rule can inspect (a deny rule lets nothing through)",
                ));
            }
        }
    }
    let inspects = match (cfg.inspect.as_deref(), tls) {
        (Some("http"), _) => true,
        (Some(other), _) => {
            return Err(fail(
                "inspect",
                &format!("{other:?}: the only inspection is \"http\""),
            ))
        }
        // Terminating TLS is for inspecting what is inside.
        (None, TlsMode::Terminate) => true,
        (None, TlsMode::Passthrough) => false,
    };
    if !inspects {
        if !cfg.requests.is_empty() {
            return Err(fail("requests", "request rules need inspect = \"http\""));
        }
        if cfg.upgrades.is_some() {
            return Err(fail("upgrades", "upgrades need inspect = \"http\""));
        }
        return Ok(None);
    }
    RuleRequests::compile(
        name.clone(),
        &cfg.requests,
        cfg.upgrades.as_deref(),
        tls,
        audit,
    )
    .map(Some)
}

/// A host pattern is either a name pattern or an address literal (a CIDR).
pub(crate) enum Pattern {
    Host(HostPattern),
    Addr(IpAddr),
}

/// Canonicalises a host pattern exactly as targets are canonicalised, so
/// `EXAMPLE.com.` and `bücher.example` match what clients send.
pub(crate) fn parse_host_pattern(p: &str) -> Result<Pattern, String> {
    let p = p.trim();
    if let Some(hint) = url_hint(p) {
        // The table form: `pypi.org:443` would be refused here too (a host
        // has no port), so name the host and the port key apart.
        return Err(match host_and_port(&hint) {
            Some((host, port)) => format!(
                "{p:?}: a rule takes a host, not a URL: give {:?}, and the port as port = {port} (or in ports)",
                host.trim_start_matches('[').trim_end_matches(']')
            ),
            None if hint.contains(' ') => {
                format!("{p:?}: a rule takes a host, not a URL: use {hint}")
            }
            None => format!("{p:?}: a rule takes a host, not a URL: give {hint:?}"),
        });
    }
    if let Some((host, port)) = host_and_port(p) {
        return Err(format!(
            "{p:?}: a host has no port: give {host:?}, and the port as port = {port} (or in ports)"
        ));
    }
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
    if let Some((host, _)) = p.split_once('/') {
        return Err(match canonical_host(host) {
            Ok(Host::Ip(_)) => format!("{p:?}: an address range goes in cidr, not host"),
            _ => format!("{p:?}: a rule takes a host, not a URL path: use {host:?}"),
        });
    }
    match canonical_host(p).map_err(|e| format!("{p:?}: {}", e.0))? {
        Host::Domain(d) => Ok(Pattern::Host(HostPattern::Exact(d))),
        Host::Ip(a) => Ok(Pattern::Addr(a)),
    }
}

/// `name:PORT` or `[v6]:PORT` (one colon outside brackets, digits after
/// it): the host and the port a rule's host pattern was given with.
fn host_and_port(p: &str) -> Option<(&str, &str)> {
    let (host, port) = match p.strip_prefix('[') {
        Some(rest) => rest.split_once("]:")?,
        None if p.matches(':').count() == 1 => p.split_once(':')?,
        None => return None,
    };
    let digits = !port.is_empty() && port.len() <= 5 && port.bytes().all(|b| b.is_ascii_digit());
    (digits && !host.is_empty()).then_some((host, port))
}

/// `::1:443`: an IPv6 address whose last group could be a port after
/// another IPv6 address. As `--allow ::1:443` it is ambiguous (Go's and
/// most tools' host:port parsers refuse it too): `[::1]:443` or
/// `[::1:443]` says which.
fn ambiguous_v6_port(spec: &str) -> Option<(&str, &str)> {
    let (addr, last) = spec.rsplit_once(':')?;
    let port_like = !last.is_empty() && last.len() <= 5 && last.bytes().all(|b| b.is_ascii_digit());
    (port_like
        && spec.parse::<std::net::Ipv6Addr>().is_ok()
        && addr.parse::<std::net::Ipv6Addr>().is_ok())
    .then_some((addr, last))
}

/// For `scheme://[user@]host[:port][/path]`: the `host:port` meant
/// (`https://github.com/x` → `github.com:443`), or `None` if not a URL.
pub(crate) fn url_hint(s: &str) -> Option<String> {
    let (scheme, rest) = s.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let authority = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let has_port = match authority.rfind(']') {
        Some(end) => authority[end..].contains(':'),
        None => authority.contains(':'),
    };
    if authority.is_empty() {
        return Some("a host name such as example.com".into());
    }
    if has_port {
        return Some(authority.to_string());
    }
    let port = match scheme.to_ascii_lowercase().as_str() {
        "http" | "ws" => Some(80),
        "https" | "wss" => Some(443),
        _ => None,
    };
    Some(match port {
        Some(p) => format!("{authority}:{p}"),
        None => authority.to_string(),
    })
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
        if let Some((addr, port)) = ambiguous_v6_port(spec) {
            return Err(format!(
                "{spec:?} is ambiguous: write [{addr}]:{port} for port {port} of {addr}, \
                 or [{spec}] for that address on every port"
            ));
        }
        return Ok((spec, None));
    }
    Ok(match spec.split_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (spec, None),
    })
}

/// The range after `@` in `HOST[:PORT]@CIDR`: a block that can name a
/// special address. `/0` and blocks broader than a special range inside
/// them are refused: they would name no special address (a rule names one
/// only with a block as narrow as its range), so the flag would not do what
/// it says.
fn scope_range(flag: &str, rule: &str, range: &str) -> Result<Cidr, String> {
    let example = format!("{flag} pypi.org:443@203.0.113.80/32");
    if rule.contains('@') {
        return Err(format!(
            "a host has no '@' (no user part): HOST:PORT@CIDR takes one '@', before the \
             address range the name may resolve into, as in {example}"
        ));
    }
    if range.trim().is_empty() {
        return Err(format!(
            "nothing after '@': give the address range {rule} may resolve into, as in {example}"
        ));
    }
    let block = Cidr::parse(range).map_err(|e| {
        format!("after '@' comes the address range the name may resolve into, as in {example}: {e}")
    })?;
    if block.prefix() == 0 {
        return Err(format!(
            "@{range} scopes nothing: a /0 names no special address, so {rule} would reach \
             public addresses only, as {flag} {rule} does; give the range it resolves into \
             (e.g. @203.0.113.80/32)"
        ));
    }
    if let Some((inner, name)) = super::addr::ranges_inside(block) {
        return Err(format!(
            "{block} is broader than the {name} range {inner} inside it, so it names no \
             address there: give {inner} or narrower (the address itself as /32 or /128)"
        ));
    }
    Ok(block)
}

/// A scoped allowance is for names: an address or a range needs no scope,
/// and `*` would hand the range to every name.
fn check_scoped_host(
    flag: &str,
    spec: &str,
    target: &str,
    is_cidr: bool,
    range: &Cidr,
) -> Result<(), String> {
    if is_cidr || canonical_host(target).is_ok_and(|h| matches!(h, Host::Ip(_))) {
        return Err(format!(
            "@{range} scopes a host name, and {target} is an address: use {flag} {spec}"
        ));
    }
    if target == "*" {
        return Err(format!(
            "@{range} scopes a host name, and '*' is every name: name the hosts \
             (e.g. {flag} '*.example.com:443@{range}'), or use {flag} {range} if every \
             name and the address itself may reach it"
        ));
    }
    Ok(())
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
    cli_rule("--inspect", Action::Allow, Some(TlsMode::Passthrough), spec)
}

/// See [`super::parse_cli_terminate`]: `--inspect`, terminating TLS.
pub(crate) fn parse_cli_terminate(spec: &str) -> Result<RuleConfig, PolicyError> {
    cli_rule("--terminate", Action::Allow, Some(TlsMode::Terminate), spec)
}

/// A command-line rule named `FLAG SPEC`; `inspect` with its TLS mode.
fn cli_rule(
    flag: &str,
    action: Action,
    inspect: Option<TlsMode>,
    spec: &str,
) -> Result<RuleConfig, PolicyError> {
    let name = format!("{flag} {spec}");
    let whole = |msg: String| PolicyError {
        rule: None,
        rule_name: Some(name.clone()),
        key: None,
        message: msg,
    };
    let spec = spec.trim();
    if let Some(hint) = url_hint(spec) {
        return Err(whole(format!("a rule takes a host, not a URL: use {hint}")));
    }
    let (spec, scope) = match spec.rsplit_once('@') {
        Some((rule, range)) => (rule, Some(scope_range(flag, rule, range).map_err(whole)?)),
        None => (spec, None),
    };
    let (target, port) = split_cli_spec(spec).map_err(whole)?;
    if target.is_empty() {
        return Err(whole("missing host or cidr".into()));
    }
    let is_cidr = target.contains('/');
    if let Some((addr, _)) = target.split_once('/') {
        if canonical_host(addr).is_ok_and(|h| matches!(h, Host::Domain(_))) {
            return Err(whole(format!(
                "a rule takes a host, not a URL path: use {addr}"
            )));
        }
    }
    if let Some(range) = &scope {
        check_scoped_host(flag, spec, target, is_cidr, range).map_err(whole)?;
    }
    let cfg = RuleConfig {
        name: Some(name.clone()),
        host: (!is_cidr).then(|| target.to_owned()),
        cidr: is_cidr.then(|| target.to_owned()),
        // The file form of a scoped allowance: this name, only inside this range.
        cidrs: scope.iter().map(ToString::to_string).collect(),
        match_mode: scope.map(|_| MatchMode::Both),
        port: port.map(|p| PortSpec::Text(p.to_owned())),
        inspect: inspect.map(|_| "http".to_owned()),
        tls: inspect.filter(|t| *t == TlsMode::Terminate),
        ..RuleConfig::new(action)
    };
    // Compile now so a bad flag fails at startup, naming the flag.
    Rule::compile(0, &cfg, false)?;
    Ok(cfg)
}
