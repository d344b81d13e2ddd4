//! Rules as written, before compiling: one `[[rules]]` table of the policy
//! file ([`RuleConfig`]), its request rules and the small enums its keys take.
//! Serde reads them; `rule.rs` compiles them.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

/// Allow or deny.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Let matching connections through.
    Allow,
    /// Refuse matching connections; a deny beats any allow.
    Deny,
}

/// A port or port range as written in TOML: `443` or `"8000-8100"` or `"443"`.
///
/// A number outside 1-65535 is refused while reading the file, with a plain
/// message (`port 70000 is out of range (1-65535)`) and its position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortSpec {
    /// One port (1-65535 when read from a file).
    Number(u16),
    /// `"443"` or `"LO-HI"`, checked when the rule is compiled.
    Text(String),
}

impl<'de> Deserialize<'de> for PortSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<PortSpec, D::Error> {
        struct PortVisitor;
        impl Visitor<'_> for PortVisitor {
            type Value = PortSpec;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a port (1-65535) or a \"LO-HI\" range")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<PortSpec, E> {
                match u16::try_from(v) {
                    Ok(p) if p != 0 => Ok(PortSpec::Number(p)),
                    _ => Err(E::custom(format!("port {v} is out of range (1-65535)"))),
                }
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<PortSpec, E> {
                self.visit_i64(i64::try_from(v).unwrap_or(i64::MAX))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<PortSpec, E> {
                Ok(PortSpec::Text(v.to_owned()))
            }
        }
        d.deserialize_any(PortVisitor)
    }
}

/// How a rule that gives both hosts and CIDRs matches (`match = ...`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MatchMode {
    /// A host pattern matches the name, or a CIDR contains the address.
    #[default]
    Either,
    /// A host pattern matches the name *and* a CIDR contains the address it
    /// resolved to (a private mirror: this name, only inside this range).
    Both,
}

/// Whether a rule's (or the whole policy's) denials are enforced (`mode = ...`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuleMode {
    /// Denials refuse.
    #[default]
    Enforce,
    /// Denials are reported as "would-deny" and let through.
    Audit,
}

/// What an allow rule does with TLS (`tls = ...`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TlsMode {
    /// Leave TLS end to end (today's behaviour).
    #[default]
    Passthrough,
    /// Terminate TLS with the local CA and inspect the HTTP/1.1 inside
    /// (implies `inspect = "http"`).
    Terminate,
}

/// One `[[rules]]` table as written in the policy file (before compiling).
/// Build one in code with [`RuleConfig::allow`], [`RuleConfig::deny`] or
/// [`RuleConfig::builder`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
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
    /// With hosts and CIDRs: `either` (default) or `both`.
    #[serde(default, rename = "match")]
    pub match_mode: Option<MatchMode>,
    /// `enforce` (default) or `audit`: this rule's denials become would-deny.
    #[serde(default)]
    pub mode: Option<RuleMode>,
    /// Idle timeout for tunnels this rule allows (`"30s"`, `"5m"`, `"off"`).
    #[serde(default)]
    pub idle_timeout: Option<String>,
    /// `"http"`: parse the tunnel's bytes as HTTP/1.1 and apply `requests`.
    #[serde(default)]
    pub inspect: Option<String>,
    /// `passthrough` (default) or `terminate` (implies `inspect = "http"`).
    #[serde(default)]
    pub tls: Option<TlsMode>,
    /// `Upgrade` tokens an inspected connection may switch to raw bytes for;
    /// `None` means the default, `["websocket"]`.
    #[serde(default)]
    pub upgrades: Option<Vec<String>>,
    /// Request rules for an inspected destination (empty: every request allowed).
    #[serde(default)]
    pub requests: Vec<RequestRuleConfig>,
    /// Reach this rule's destinations through a parent proxy
    /// (`http://[user:pass@]host:port` or `socks5://...`), or `"direct"` to
    /// bypass the global `upstream_proxy`.
    #[serde(default)]
    pub upstream_proxy: Option<String>,
    /// Only these proxy users match the rule (`None`: anyone, authenticated
    /// or, with auth off, anonymous). A connection by another user does not
    /// match it and falls through to the other rules.
    #[serde(default)]
    pub users: Option<Vec<String>>,
    /// Why the rule refuses (or what it is for): the text reaches the
    /// client in the 403 body and `X-Proxy-Error`, and the log line, when
    /// this rule refuses a connection (srt's `deniedDomainReasons`).
    #[serde(default)]
    pub reason: Option<String>,
}

impl RuleConfig {
    /// An unnamed rule of `action` matching nothing yet: set its fields, or
    /// use [`RuleConfig::builder`].
    pub fn new(action: Action) -> RuleConfig {
        RuleConfig {
            name: None,
            action,
            host: None,
            hosts: Vec::new(),
            cidr: None,
            cidrs: Vec::new(),
            port: None,
            ports: Vec::new(),
            match_mode: None,
            mode: None,
            idle_timeout: None,
            inspect: None,
            tls: None,
            upgrades: None,
            requests: Vec::new(),
            upstream_proxy: None,
            users: None,
            reason: None,
        }
    }
}

/// One request rule inside an inspecting `[[rules]]` table:
/// `{ action = "allow", method = "GET", path = "/v1/**" }`. Build one with
/// [`RequestRuleConfig::allow`] or [`RequestRuleConfig::deny`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RequestRuleConfig {
    /// Allow or deny; a deny beats any allow.
    pub action: Action,
    /// Method, exact (`GET`), or `*` for any. Defaults to `*`.
    #[serde(default)]
    pub method: Option<String>,
    /// Path glob: `*` matches within one segment, `**` any number. Defaults to `/**`.
    #[serde(default)]
    pub path: Option<String>,
}

/// The `Upgrade` tokens an inspecting rule lets switch to raw bytes when it
/// lists none (`upgrades` absent).
pub const DEFAULT_UPGRADES: &[&str] = &["websocket"];
