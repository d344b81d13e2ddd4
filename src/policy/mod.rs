//! Who may connect where. Pure: no sockets, no DNS, and no clock but an
//! `Instant` the caller passes in.
//!
//! Targets and rule host patterns are canonicalised the same way
//! ([`crate::target`]),
//! rules are compiled once (`rule.rs`), and verdicts come from a scan of every
//! rule (`check.rs`): deny beats allow, no match is a denial, special
//! addresses (`addr.rs`) need an allow rule that names them, and when several
//! allow rules match a connection the strictest treatment applies (every
//! matching inspecting rule's request rules, `request.rs`). The addresses the
//! names of inspecting rules resolved to are remembered (`memory.rs`), so
//! they cannot be reached uninspected through a broader rule.

mod addr;
mod builder;
mod check;
mod cidr;
mod describe;
mod memory;
mod request;
mod rule;
pub mod secret;
mod spec;
#[cfg(test)]
mod tests;
pub mod this_host;

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use crate::target::{normalize_path, Host, Target, TargetError};
pub(crate) use addr::embedded_v4;
pub use builder::RuleBuilder;
pub(crate) use describe::human as describe_duration;
pub use memory::{InspectedAddrs, InspectedMemory, PINNED_TTL, REFRESH_EVERY, SEEN_TTL};
pub use request::RequestRules;
use rule::Rule;
pub use spec::{
    Action, MatchMode, PortSpec, RequestRuleConfig, RuleConfig, RuleMode, TlsMode, DEFAULT_UPGRADES,
};

/// The name of the special range `addr` falls in (`"loopback"`,
/// `"private"`, `"documentation"`, ...), or `None` for a public address. A
/// special address is refused unless a rule names it by CIDR (with
/// `match = "both"`, for the listed names only). IPv4-mapped IPv6 is
/// classified as its IPv4 address.
pub fn special_range(addr: IpAddr) -> Option<&'static str> {
    addr::special(crate::target::host::canonical_ip(addr)).map(|s| s.name)
}

/// What request rules say about one request (or one `Upgrade` token).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestVerdict {
    /// Allowed; names the request rule(s) (or the rule, when it has no request rules).
    Allow(Arc<str>),
    /// Refused; names the request rule, or says that none matched.
    Deny(Arc<str>),
    /// Audit mode: a rule in audit mode (or an audit policy) would refuse it,
    /// named as for `Deny`; let it through and log `decision=would-deny`.
    WouldDeny(Arc<str>),
}

/// A policy file or rule that does not compile; says which rule, which key
/// and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError {
    /// Index of the offending rule in the list compiled, if about one rule.
    pub rule: Option<usize>,
    /// That rule's name (`rules[N]` when unnamed), for messages.
    pub rule_name: Option<String>,
    /// The key inside the rule as a file spells it: `cidr`, `cidrs[1]`,
    /// `ports[0]`, `requests[2].path`.
    pub key: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl PolicyError {
    /// An error not tied to a rule.
    pub fn new(message: impl Into<String>) -> PolicyError {
        PolicyError {
            rule: None,
            rule_name: None,
            key: None,
            message: message.into(),
        }
    }

    /// An error about `key` of the rule named `rule`.
    pub(crate) fn field(rule: &str, key: impl Into<String>, message: impl Into<String>) -> Self {
        PolicyError {
            rule: None,
            rule_name: Some(rule.to_owned()),
            key: Some(key.into()),
            message: message.into(),
        }
    }

    /// Records the rule's index.
    pub(crate) fn at(mut self, index: usize) -> PolicyError {
        self.rule = Some(index);
        self
    }
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(n) = &self.rule_name {
            write!(f, "rule {n:?}: ")?;
        }
        if let Some(k) = &self.key {
            write!(f, "{k}: ")?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for PolicyError {}

/// Parses a command-line rule `HOST[:PORT|:LO-HI]` or `CIDR[:PORT|:LO-HI]`
/// (IPv6 in brackets when a port follows: `[::1]:443`, `[fd00::/8]:1-1024`).
/// The rule is named after the flag, e.g. `--allow 127.0.0.1:8080`. A URL is
/// refused with the rule it probably meant (`use github.com:443`).
pub fn parse_cli_rule(action: Action, spec: &str) -> Result<RuleConfig, PolicyError> {
    rule::parse_cli_rule(action, spec)
}

/// Parses `--inspect RULE` (same syntax as `--allow`): an allow rule that
/// inspects HTTP with every request allowed. Named `--inspect SPEC`.
pub fn parse_cli_inspect(spec: &str) -> Result<RuleConfig, PolicyError> {
    rule::parse_cli_inspect(spec)
}

/// Parses `--terminate RULE`: like `--inspect`, and terminates TLS
/// (`tls = "terminate"`). Named `--terminate SPEC`.
pub fn parse_cli_terminate(spec: &str) -> Result<RuleConfig, PolicyError> {
    rule::parse_cli_terminate(spec)
}

/// The built-in default rule, `default-public-web`: every host name on ports
/// 80 and 443. Special ranges stay refused (no rule names them) and address
/// literals are not matched (a wildcard never matches them).
pub fn builtin_default_rule() -> RuleConfig {
    RuleConfig {
        name: Some("default-public-web".into()),
        host: Some("*".into()),
        ports: vec![PortSpec::Number(80), PortSpec::Number(443)],
        ..RuleConfig::new(Action::Allow)
    }
}

/// A compiled policy. Cheap to clone and to share across threads (`Arc`s
/// inside); clones share one [`InspectedMemory`]. The default has no rules,
/// so it denies everything.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    rules: Arc<Vec<Rule>>,
    /// Policy-wide audit mode: every denial becomes would-deny.
    audit: bool,
    memory: InspectedMemory,
    /// `[[secrets]]`: placeholders inspected exchanges replace (or refuse).
    secrets: Option<Arc<secret::Secrets>>,
    /// This is the built-in default alone ([`Policy::builtin_default`]):
    /// a rule flag (or file) replaces it, so each fix a refusal names
    /// keeps it (`--default`, `default = true`).
    builtin_alone: bool,
}

/// Why a target was refused (or, in audit mode, would have been).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denial {
    /// A deny rule matched (named, with its `reason` if it gives one).
    Rule(RuleRef),
    /// No allow rule matched (deny by default); the [`AllowFix`] says how
    /// to allow this destination (its host and port).
    NoRule(Arc<AllowFix>),
    /// A resolved or literal address is private/loopback/link-local/CGNAT/
    /// multicast/unspecified and no rule names it. The `&str` names the
    /// range; the [`Fix`], when an allow rule matched the name (or the
    /// literal), says how to allow it for that name alone.
    SpecialAddress(IpAddr, &'static str, Option<Arc<Fix>>),
    /// An allow rule matches the host but not the port asked for.
    Port(Arc<PortMiss>),
    /// An allow rule matched the destination, but names other users:
    /// `user` (`None`: the client did not authenticate) is not among them.
    User {
        /// The client's user.
        user: Option<Arc<str>>,
        /// The first allow rule that would have matched.
        rule: Arc<str>,
    },
}

/// A rule as a denial names it: its name and its `reason`, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleRef {
    /// The rule's name.
    pub name: Arc<str>,
    /// Its `reason = "..."` (srt's `deniedDomainReasons`), told to the client.
    pub reason: Option<Arc<str>>,
}

impl From<&str> for RuleRef {
    fn from(name: &str) -> RuleRef {
        RuleRef {
            name: name.into(),
            reason: None,
        }
    }
}

impl fmt::Display for RuleRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

/// How to let a refused special address through for one name alone (or,
/// for an address literal, that one address).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fix {
    /// The allow rule that matched the name (or literal).
    pub rule: Arc<str>,
    /// Its `reason`, if it gives one.
    pub reason: Option<Arc<str>>,
    /// The flag that allows it: `--allow pypi.org:443@203.0.113.80/32`.
    pub flag: String,
    /// The same as a rule's keys: `hosts = ["pypi.org"], cidrs = [...], match = "both"`.
    pub file: String,
}

/// How to allow a destination no rule matched: a new allow rule for its
/// host and port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowFix {
    /// The flag: `--allow pypi.org:443`.
    pub flag: String,
    /// The same as a rule's keys: `hosts = ["pypi.org"], ports = [443]`.
    pub file: String,
}

/// An allow rule that matches the host, not the port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortMiss {
    /// The rule that matched the host.
    pub rule: Arc<str>,
    /// Its ports, as `443` or `80, 8000-8100`.
    pub ports: String,
    /// The destination asked for.
    pub target: String,
    /// The port asked for.
    pub port: u16,
    /// The flag that allows it: `--allow pypi.org:8443`.
    pub flag: String,
    /// The rule is the built-in one, running alone: its ports cannot be
    /// changed, and `flag` keeps it (`--default --allow ...`).
    pub builtin: bool,
}

/// How an allowed connection leaves: straight to its destination, or
/// through a parent proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Dial the destination (even when a global `upstream_proxy` is set).
    Direct,
    /// Ask this parent proxy for a tunnel to the vetted address.
    Parent(Arc<crate::target::parent::ParentProxy>),
}

/// Policy said yes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allowed {
    /// The rule that allowed it: the first qualifying allow rule that inspects,
    /// else the first qualifying one; `-` when audit mode let it through
    /// with no allowing rule.
    pub rule: Arc<str>,
    /// That rule's idle timeout for tunnels it allows, if it sets one.
    pub idle_timeout: Option<Duration>,
    /// The addresses that passed, in resolver order: dial exactly these.
    pub addrs: Vec<IpAddr>,
    /// Set when any matching allow rule inspects (or terminates TLS): the
    /// request rules of every such rule, all of which must allow a request.
    pub inspect: Option<Arc<RequestRules>>,
    /// Audit mode: the denial that would have refused this connection. The
    /// session lets it through and logs `decision=would-deny` with it.
    pub audit: Option<Denial>,
    /// Audit mode: every reason it would have been refused for (each
    /// address's, each audit deny rule's), deduplicated; the first is
    /// [`Allowed::audit`]. Empty when `audit` is `None`.
    pub audit_reasons: Vec<Denial>,
    /// The allowing rule's `upstream_proxy` (`None`: the global one, if any).
    pub route: Option<Route>,
}

impl Allowed {
    /// Whether the connection must be inspected (some matching allow rule
    /// inspects). A raw tunnel re-checked after a reload must close (reason
    /// `policy-reload`) when this is true: see [`Policy::recheck`].
    pub fn is_inspected(&self) -> bool {
        self.inspect.is_some()
    }

    /// Whether TLS must be terminated (some matching rule has `tls = "terminate"`).
    pub fn terminates_tls(&self) -> bool {
        self.inspect.as_ref().is_some_and(|r| r.terminates_tls())
    }
}

/// The answer before DNS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameVerdict {
    /// Refused on the name alone: do not resolve.
    Deny(Denial),
    /// Some allow rule could match: resolve, then call [`Policy::check_resolved_at`].
    Resolve,
}

/// The answer after DNS (or for an address literal).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Allowed (or, with [`Allowed::audit`] set, let through by audit mode),
    /// with the vetted addresses.
    Allow(Allowed),
    /// Refused.
    Deny(Denial),
}

/// A stricter treatment the name inside a raw tunnel's first flight has
/// (see [`Policy::fronting`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fronting {
    /// A rule refuses that name (or names it for other users only).
    Denied(Denial),
    /// An allow rule (named) inspects that name; `terminates`: some such
    /// rule terminates its TLS.
    Inspected {
        /// The inspecting rule (a terminating one, when there is one).
        rule: Arc<str>,
        /// Whether it terminates TLS.
        terminates: bool,
    },
}

/// What a new policy says about an open session (after a reload).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recheck {
    /// Still allowed as it runs: carry on. An inspected session takes the new
    /// request rules ([`Allowed::inspect`]; `None`: every request allowed).
    Keep(Allowed),
    /// Allowed now only under inspection, and the session is a raw tunnel:
    /// close it with reason `policy-reload`.
    NeedsInspection(Allowed),
    /// Refused now: close it with reason `policy-reload`.
    Deny(Denial),
}

impl Policy {
    /// Compiles rules in order (names default to `rules[N]`, N from 0).
    pub fn from_rules(rules: &[RuleConfig]) -> Result<Policy, PolicyError> {
        let rules = rules
            .iter()
            .enumerate()
            .map(|(i, r)| Rule::compile(i, r, false).map_err(|e| e.at(i)))
            .collect::<Result<Vec<_>, _>>()?;
        // Logs, metrics and remove-rule know a rule by its name.
        let mut names = std::collections::HashSet::with_capacity(rules.len());
        for (i, r) in rules.iter().enumerate() {
            if !names.insert(&*r.name) {
                let message = format!(
                    "{:?} names an earlier rule too: rule names must be unique",
                    r.name
                );
                return Err(PolicyError::field(&r.name, "name", message).at(i));
            }
        }
        Ok(Policy {
            rules: Arc::new(rules),
            ..Policy::default()
        })
    }

    /// The built-in default: [`builtin_default_rule`] alone.
    pub fn builtin_default() -> Policy {
        let mut p = Policy::from_rules(&[builtin_default_rule()]).expect("built-in rule compiles");
        p.builtin_alone = true;
        p
    }

    /// Parses a TOML policy document: its `[[rules]]`, and the top-level
    /// `mode` (`"audit"`) and `default` (`true`: add the built-in default
    /// rule). Other top-level keys are ignored so a policy can live in a
    /// larger file. Never panics, whatever the input.
    pub fn parse_toml(text: &str) -> Result<Policy, PolicyError> {
        #[derive(serde::Deserialize)]
        struct Doc {
            #[serde(default)]
            rules: Vec<RuleConfig>,
            #[serde(default)]
            mode: Option<RuleMode>,
            #[serde(default)]
            default: bool,
        }
        let mut doc: Doc =
            toml::from_str(text).map_err(|e| PolicyError::new(format!("invalid policy: {e}")))?;
        if doc.default {
            doc.rules.push(builtin_default_rule());
        }
        let mut p = Policy::from_rules(&doc.rules)?;
        p.set_audit(doc.mode == Some(RuleMode::Audit));
        Ok(p)
    }

    /// Appends `other`'s rules after ours (names kept as given). Audit mode
    /// is on if either was; our memory is kept.
    pub fn extend(&mut self, other: Policy) {
        let audit = self.audit || other.audit;
        self.builtin_alone &= other.rules.is_empty();
        let other = Arc::try_unwrap(other.rules).unwrap_or_else(|a| (*a).clone());
        let rules = Arc::make_mut(&mut self.rules);
        rules.extend(other);
        for r in rules.iter_mut() {
            r.set_policy_audit(audit);
        }
        self.audit = audit;
    }

    /// Removes every rule named `name`; returns whether there was one.
    /// The memory of inspected names' addresses is kept.
    pub fn remove_rule(&mut self, name: &str) -> bool {
        if !self.rules.iter().any(|r| &*r.name == name) {
            return false;
        }
        Arc::make_mut(&mut self.rules).retain(|r| &*r.name != name);
        true
    }

    /// The secrets inspected exchanges inject (`None`: none).
    pub fn secrets(&self) -> Option<&Arc<secret::Secrets>> {
        self.secrets.as_ref()
    }

    /// Sets the secrets (an empty set is none).
    pub fn set_secrets(&mut self, secrets: secret::Secrets) {
        self.secrets = (!secrets.is_empty()).then(|| Arc::new(secrets));
    }

    /// Keeps `from`'s secrets when this policy brings none (a policy
    /// replaced over control is rules only: the file's secrets stay).
    pub fn keep_secrets_of(&mut self, from: &Policy) {
        if self.secrets.is_none() {
            self.secrets.clone_from(&from.secrets);
        }
    }

    /// Turns policy-wide audit mode on or off: when on, every denial of a
    /// connection or a request becomes would-deny and is let through.
    pub fn set_audit(&mut self, on: bool) {
        if self.audit == on {
            return;
        }
        self.audit = on;
        // Request rules carry their audit flag: recompile them.
        for r in Arc::make_mut(&mut self.rules).iter_mut() {
            r.set_policy_audit(on);
        }
    }

    /// Whether policy-wide audit mode is on.
    pub fn is_audit(&self) -> bool {
        self.audit
    }

    /// Whether any allow rule terminates TLS (the proxy then needs its CA).
    pub fn terminates_any(&self) -> bool {
        self.rules.iter().any(|r| {
            r.action == Action::Allow
                && r.inspect
                    .as_ref()
                    .is_some_and(|i| i.tls == TlsMode::Terminate)
        })
    }

    /// The rules that name users: `(index, rule name, users)`, in order.
    /// A configuration checks them against the users it defines.
    pub fn rule_users(&self) -> Vec<(usize, Arc<str>, Vec<Arc<str>>)> {
        self.rules
            .iter()
            .enumerate()
            .filter_map(|(i, r)| Some((i, r.name.clone(), r.users.clone()?)))
            .collect()
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

    /// Checks a domain target before resolving it, for an anonymous client
    /// (see [`Policy::check_name_as`]).
    pub fn check_name(&self, target: &Target) -> NameVerdict {
        self.check_name_as(target, None)
    }

    /// Checks a domain target before resolving it, for `user` (`None`:
    /// anonymous; a rule with `users` matches only those users); an
    /// address-literal target always gets [`NameVerdict::Resolve`] (pass
    /// the literal to [`Policy::check_resolved_as`]).
    pub fn check_name_as(&self, target: &Target, user: Option<&str>) -> NameVerdict {
        match check::check_name(&self.rules, self.audit, target, user) {
            NameVerdict::Deny(d) => NameVerdict::Deny(self.keeping_builtin(d)),
            v => v,
        }
    }

    /// `d`, its fix keeping the built-in rule when this policy is that rule
    /// alone: a rule flag on its own replaces it, so following the fix
    /// as it stands would refuse everything else.
    fn keeping_builtin(&self, d: Denial) -> Denial {
        if !self.builtin_alone {
            return d;
        }
        const FLAG: &str = "--default ";
        const FILE: &str = "; and default = true";
        match d {
            Denial::NoRule(f) => Denial::NoRule(Arc::new(AllowFix {
                flag: format!("{FLAG}{}", f.flag),
                file: format!("{}{FILE}", f.file),
            })),
            Denial::Port(m) => Denial::Port(Arc::new(PortMiss {
                flag: format!("{FLAG}{}", m.flag),
                builtin: true,
                ..(*m).clone()
            })),
            Denial::SpecialAddress(a, range, Some(f)) => Denial::SpecialAddress(
                a,
                range,
                Some(Arc::new(Fix {
                    flag: format!("{FLAG}{}", f.flag),
                    file: format!("{}{FILE}", f.file),
                    ..(*f).clone()
                })),
            ),
            d => d,
        }
    }

    /// [`Policy::check_resolved_as`] for an anonymous client.
    pub fn check_resolved_at(&self, target: &Target, addrs: &[IpAddr], now: Instant) -> Verdict {
        self.check_resolved_as(target, None, addrs, now)
    }

    /// Checks a target for `user` (`None`: anonymous) against its resolved
    /// addresses (or its literal address) at `now`: remembered addresses of
    /// inspected names count until they expire. Judging the addresses, not
    /// just the name, defeats DNS rebinding. Rules naming other users do
    /// not match; when one would have, the denial is [`Denial::User`].
    pub fn check_resolved_as(
        &self,
        target: &Target,
        user: Option<&str>,
        addrs: &[IpAddr],
        now: Instant,
    ) -> Verdict {
        let seen = |a| self.memory.names_at(a, Some(now));
        let v = check::check_resolved(&self.rules, self.audit, target, user, addrs, &seen);
        self.fixed(v)
    }

    fn fixed(&self, v: Verdict) -> Verdict {
        match v {
            Verdict::Deny(d) => Verdict::Deny(self.keeping_builtin(d)),
            v => v,
        }
    }

    /// [`Policy::check_resolved_at`] without a clock: every remembered
    /// address not yet pruned counts (stricter, never looser).
    pub fn check_resolved(&self, target: &Target, addrs: &[IpAddr]) -> Verdict {
        let seen = |a| self.memory.names_at(a, None);
        let v = check::check_resolved(&self.rules, self.audit, target, None, addrs, &seen);
        self.fixed(v)
    }

    /// Re-checks an anonymous client's open session (see [`Policy::recheck_as`]).
    pub fn recheck(&self, target: &Target, ip: IpAddr, raw: bool, now: Instant) -> Recheck {
        self.recheck_as(target, None, ip, raw, now)
    }

    /// Re-checks `user`'s open session to `ip` after a reload. `raw` says
    /// whether it is a raw tunnel (not inspected). See [`Recheck`].
    pub fn recheck_as(
        &self,
        target: &Target,
        user: Option<&str>,
        ip: IpAddr,
        raw: bool,
        now: Instant,
    ) -> Recheck {
        match self.check_resolved_as(target, user, &[ip], now) {
            Verdict::Deny(d) => Recheck::Deny(d),
            Verdict::Allow(a) if raw && a.is_inspected() => Recheck::NeedsInspection(a),
            Verdict::Allow(a) => Recheck::Keep(a),
        }
    }

    /// Whether raw tunnels to `port` have their first flight vetted: some
    /// allow rule inspects (or terminates TLS on) that port, so a name in a
    /// ClientHello or a `Host` header could front for it.
    pub fn vets_port(&self, port: u16) -> bool {
        check::vets_port(&self.rules, port)
    }

    /// What `named` (the SNI or `Host` a raw tunnel to `target` carries)
    /// would get from this policy for `user` that is stricter than that raw
    /// tunnel: refused by a rule, or inspected. `None`: nothing stricter
    /// (the same host, a name no rule covers, a name allowed raw). An
    /// address literal is checked with its address (remembered names too).
    pub fn fronting(
        &self,
        target: &Target,
        user: Option<&str>,
        named: &Target,
        now: Instant,
    ) -> Option<Fronting> {
        check::fronting(&self.rules, self.audit, target, user, named, |ip| {
            self.check_resolved_as(named, user, &[ip], now)
        })
    }

    /// Remembers that `host` resolved to `addrs`, when an inspecting allow
    /// rule names `host` (on any port); returns whether it did. Call it after
    /// every resolution (the session after a name was allowed, the reactor
    /// for [`Policy::inspected_names`]): a later connection to one of these
    /// addresses, by any name or as a literal, is then inspected under that
    /// rule whenever the rule covers its port.
    pub fn remember(&self, host: &Host, addrs: &[IpAddr], now: Instant) -> bool {
        let Host::Domain(name) = host else {
            return false;
        };
        let (inspected, exact) = check::inspected_name(&self.rules, name);
        if inspected {
            self.memory.remember(name, addrs, exact, now);
        }
        inspected
    }

    /// Remembers what resolving one of [`Policy::inspected_names`] gave.
    /// Returns whether any address was new to the memory: open tunnels to
    /// it may now need inspection.
    pub fn pin(&self, name: &str, addrs: &[IpAddr], now: Instant) -> bool {
        let (inspected, exact) = check::inspected_name(&self.rules, name);
        inspected && self.memory.remember(name, addrs, exact, now) > 0
    }

    /// The exact host names of inspecting allow rules (wildcards cannot be
    /// listed), deduplicated. The reactor resolves each at start, after each
    /// reload and every [`REFRESH_EVERY`], and passes the answers to
    /// [`Policy::remember`], so their addresses are known before any client
    /// resolves the name itself.
    pub fn inspected_names(&self) -> Vec<String> {
        check::inspected_names(&self.rules)
    }

    /// The shared memory of inspected names' addresses.
    pub fn memory(&self) -> &InspectedMemory {
        &self.memory
    }

    /// Shares `memory` (a reloaded policy takes the running one's:
    /// `new.set_memory(old.memory().clone())`).
    pub fn set_memory(&mut self, memory: InspectedMemory) {
        self.memory = memory;
    }

    /// Each rule in full, one entry per rule (its request rules on
    /// following, indented lines): what `--check` prints.
    pub fn describe(&self) -> Vec<String> {
        self.rules.iter().map(describe::rule).collect()
    }

    /// Legal but probably unintended settings, one sentence each: a plaintext
    /// inspect rule covering port 443, audit mode, `mode = "audit"` on a rule
    /// that can deny nothing, a secret whose hosts no rule inspects.
    pub fn warnings(&self) -> Vec<String> {
        let mut w = describe::warnings(&self.rules, self.audit);
        for s in self.secrets.iter().flat_map(|s| s.iter()) {
            let raw = s.uninspected_hosts(&self.rules);
            if !raw.is_empty() {
                w.push(format!(
                    "secret {:?}: no rule inspects or terminates TLS for {}: a placeholder sent \
                     there travels in a raw tunnel (or plaintext HTTP, which a secret without \
                     plaintext = true is never sent over) and is never replaced; add a rule with \
                     tls = \"terminate\" for those hosts",
                    s.name(),
                    raw.join(", ")
                ));
            }
        }
        w
    }
}

impl fmt::Display for Denial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Denial::Rule(r) => {
                write!(f, "denied by rule {}", r.name)?;
                match &r.reason {
                    Some(why) => write!(f, ": {why}"),
                    None => Ok(()),
                }
            }
            Denial::NoRule(fix) => write!(
                f,
                "no rule allows this destination: use {} (in a policy file: {})",
                fix.flag, fix.file
            ),
            Denial::SpecialAddress(a, range, None) => {
                write!(f, "{a} is a {range} address and no rule names it")
            }
            Denial::SpecialAddress(a, range, Some(fix)) => {
                write!(
                    f,
                    "{a} is a {range} address and rule {:?} does not name it: \
                     to allow it for this destination alone, use {} (in a policy file: {})",
                    fix.rule, fix.flag, fix.file
                )?;
                match &fix.reason {
                    Some(why) => write!(f, "; rule {:?}: {why}", fix.rule),
                    None => Ok(()),
                }
            }
            Denial::Port(m) if m.builtin => write!(
                f,
                "port {} is not among the ports of the built-in rule {:?} ({}), which matches \
                 {}: use {} (a rule flag alone replaces the built-in rule; --default keeps it)",
                m.port, m.rule, m.ports, m.target, m.flag
            ),
            Denial::Port(m) => write!(
                f,
                "port {} is not among the ports of rule {:?} ({}), which matches {}: \
                 use {}, or add {} to that rule's ports",
                m.port, m.rule, m.ports, m.target, m.flag, m.port
            ),
            Denial::User {
                user: Some(user),
                rule,
            } => write!(
                f,
                "user {user:?} not in rule {rule:?}: add it to that rule's users"
            ),
            Denial::User { user: None, rule } => write!(
                f,
                "rule {rule:?} names users and the client gave none: log in as one \
                 (Proxy-Authorization, or SOCKS5's username and password)"
            ),
        }
    }
}

impl Denial {
    /// The rule a denial names: the deny rule, or the allow rule that
    /// matched the name but not this connection. Logs carry it as `rule=`.
    pub fn rule(&self) -> Option<&Arc<str>> {
        match self {
            Denial::Rule(r) => Some(&r.name),
            Denial::SpecialAddress(_, _, Some(fix)) => Some(&fix.rule),
            Denial::Port(m) => Some(&m.rule),
            Denial::NoRule(_) | Denial::SpecialAddress(_, _, None) | Denial::User { .. } => None,
        }
    }
}
