//! srt's settings (Anthropic sandbox-runtime, `--srt-settings FILE` or
//! `srt_settings = "FILE"`): its `network` section as rules, with srt's
//! meaning.
//!
//! - `allowedDomains`: `example.com` is that name only, `*.example.com` its
//!   strict subdomains only (as in srt); `:PORT` limits an entry to a port.
//!   A name may resolve to a private-use, CGNAT or documentation address
//!   (srt refuses none of these), never to loopback, link-local, multicast,
//!   unspecified or broadcast (portcullis's special ranges, which srt
//!   refuses too), a metadata endpoint, this host's own addresses or
//!   `deniedResolvedAddresses`. `localhost` (and `*.localhost`) may reach
//!   loopback, and only loopback, as in srt. An address literal listed is
//!   allowed as written.
//! - `deniedDomains` (a bare `*` too, with `:PORT`): deny rules, beating any
//!   allow; `deniedDomainReasons[entry]` becomes the rule's `reason`, which
//!   the refused client reads in its 403.
//! - Every other `network` key cannot be honoured here: each is named in one
//!   warning.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde_json::Value;

use crate::policy::{Action, MatchMode, PortSpec, RuleConfig};

/// The special ranges srt lets an allowed name resolve into: private use,
/// CGNAT, documentation, benchmarking and reserved blocks (srt refuses
/// only loopback, link-local, multicast, unspecified, broadcast, metadata
/// and this host's addresses by default).
pub const PASSABLE: &[&str] = &[
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "100.64.0.0/10",
    "192.0.0.0/24",
    "192.0.2.0/24",
    "198.51.100.0/24",
    "203.0.113.0/24",
    "198.18.0.0/15",
    "240.0.0.0/4",
    "fc00::/7",
    "fec0::/10",
    "2001:db8::/32",
    "100::/64",
];

/// Metadata endpoints inside [`PASSABLE`] ranges, refused as srt does.
pub const METADATA: &[&str] = &["100.100.100.200/32", "fd00:ec2::254/128"];

/// The `network` keys this mapping honours.
const HONOURED: &[&str] = &[
    "allowedDomains",
    "deniedDomains",
    "deniedDomainReasons",
    "deniedResolvedAddresses",
    "strictAllowlist",
];

/// srt's settings as rules, and what could not be honoured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SrtRules {
    /// Deny rules first, then allow rules; names start with `srt `.
    pub rules: Vec<RuleConfig>,
    /// One sentence per setting not honoured, for a warn line each.
    pub warnings: Vec<String>,
}

/// Maps srt settings JSON (`text`) to rules; `local` is this host's own
/// addresses (refused for allowed names, as srt refuses them). Errors name
/// the key and the entry.
pub fn map(text: &str, local: &[IpAddr]) -> Result<SrtRules, String> {
    let doc: Value = serde_json::from_str(text).map_err(|e| format!("invalid JSON: {e}"))?;
    let net = match doc.get("network") {
        Some(Value::Object(m)) => m,
        Some(_) => return Err("network: expected an object".into()),
        None => return Err("no \"network\" section: nothing to allow".into()),
    };
    let mut warnings = Vec::new();
    for (key, value) in net {
        if !HONOURED.contains(&key.as_str()) {
            warnings.push(format!(
                "srt network.{key} is not honoured by portcullis (ignored): \
                 its policy comes from allowedDomains, deniedDomains, deniedDomainReasons \
                 and deniedResolvedAddresses"
            ));
        } else if key == "strictAllowlist" && value == &Value::Bool(false) {
            warnings.push(
                "srt network.strictAllowlist = false: portcullis asks no one, so a host \
                 not in allowedDomains is refused (add it to allowedDomains)"
                    .into(),
            );
        }
    }
    let allowed = strings(net.get("allowedDomains"), "allowedDomains")?;
    let denied = strings(net.get("deniedDomains"), "deniedDomains")?;
    let resolved = strings(
        net.get("deniedResolvedAddresses"),
        "deniedResolvedAddresses",
    )?;
    let reasons: BTreeMap<String, String> = match net.get("deniedDomainReasons") {
        None | Some(Value::Null) => BTreeMap::new(),
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, v)| match v.as_str() {
                Some(s) if !s.trim().is_empty() => Ok((k.clone(), s.to_owned())),
                _ => Err(format!(
                    "deniedDomainReasons.{k}: expected a non-empty string"
                )),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err("deniedDomainReasons: expected an object".into()),
    };
    for key in reasons.keys() {
        if !denied.contains(key) {
            warnings.push(format!(
                "srt network.deniedDomainReasons.{key} names no deniedDomains entry \
                 (keys are exact entries): it is never shown"
            ));
        }
    }

    let mut rules = Vec::new();
    for (i, entry) in denied.iter().enumerate() {
        let key = format!("deniedDomains[{i}]");
        let (host, port) = entry_parts(entry, &key, true)?;
        let name = format!("srt deniedDomains {entry}");
        if rules
            .iter()
            .any(|r: &RuleConfig| r.name.as_deref() == Some(&*name))
        {
            continue;
        }
        rules.push(RuleConfig {
            name: Some(name),
            host: Some(host),
            port: port.map(PortSpec::Number),
            reason: reasons.get(entry).cloned(),
            ..RuleConfig::new(Action::Deny)
        });
    }

    // Allowed entries by port (None: any port), in order of first use.
    let mut groups: Vec<(Option<u16>, Vec<String>)> = Vec::new();
    for (i, entry) in allowed.iter().enumerate() {
        let (host, port) = entry_parts(entry, &format!("allowedDomains[{i}]"), false)?;
        match groups.iter_mut().find(|(p, _)| *p == port) {
            Some((_, hosts)) if !hosts.contains(&host) => hosts.push(host),
            Some(_) => {}
            None => groups.push((port, vec![host])),
        }
    }
    let mut refused: Vec<String> = METADATA.iter().map(|s| s.to_string()).collect();
    for a in local.iter().filter(|a| !a.is_loopback()) {
        let max = if a.is_ipv4() { 32 } else { 128 };
        let block = format!("{a}/{max}");
        if !refused.contains(&block) {
            refused.push(block);
        }
    }
    for (i, r) in resolved.iter().enumerate() {
        let block =
            normalise_block(r).map_err(|e| format!("deniedResolvedAddresses[{i}]: {r:?}: {e}"))?;
        refused.push(block);
    }
    let mut names_all: Vec<String> = Vec::new();
    let mut allows = Vec::new();
    for (port, hosts) in &groups {
        let suffix = port.map_or(String::new(), |p| format!(" :{p}"));
        let port = port.map(PortSpec::Number);
        let names: Vec<String> = hosts.iter().filter(|h| !is_literal(h)).cloned().collect();
        let (loopback, names): (Vec<String>, Vec<String>) =
            names.into_iter().partition(|h| is_loopback_name(h));
        allows.push(RuleConfig {
            name: Some(format!("srt allowedDomains{suffix}")),
            hosts: hosts.clone(),
            port: port.clone(),
            ..RuleConfig::new(Action::Allow)
        });
        if !names.is_empty() {
            allows.push(RuleConfig {
                name: Some(format!(
                    "srt allowedDomains{suffix} (private and documentation ranges)"
                )),
                hosts: names.clone(),
                cidrs: PASSABLE.iter().map(|s| s.to_string()).collect(),
                match_mode: Some(MatchMode::Both),
                port: port.clone(),
                ..RuleConfig::new(Action::Allow)
            });
        }
        if !loopback.is_empty() {
            allows.push(RuleConfig {
                name: Some(format!("srt allowedDomains{suffix} (localhost)")),
                hosts: loopback,
                cidrs: vec!["127.0.0.0/8".into(), "::1/128".into()],
                match_mode: Some(MatchMode::Both),
                port,
                ..RuleConfig::new(Action::Allow)
            });
        }
        for n in names {
            if !names_all.contains(&n) {
                names_all.push(n);
            }
        }
    }
    if !names_all.is_empty() {
        rules.push(RuleConfig {
            name: Some("srt refused addresses".into()),
            hosts: names_all,
            cidrs: refused,
            match_mode: Some(MatchMode::Both),
            reason: Some(
                "an allowed name resolved to a metadata endpoint, this host's own address \
                 or one of srt's deniedResolvedAddresses"
                    .into(),
            ),
            ..RuleConfig::new(Action::Deny)
        });
    }
    rules.extend(allows);
    Ok(SrtRules { rules, warnings })
}

/// A list of strings (absent: empty).
fn strings(v: Option<&Value>, key: &str) -> Result<Vec<String>, String> {
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                item.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| format!("{key}[{i}]: expected a string"))
            })
            .collect(),
        Some(_) => Err(format!("{key}: expected a list of strings")),
    }
}

/// `host[:port]` / `[v6][:port]`, checked as srt checks it: no scheme, path
/// or bare `*` (but in `deniedDomains`), no `*.tld`, IPv6 in brackets.
fn entry_parts(entry: &str, key: &str, deny: bool) -> Result<(String, Option<u16>), String> {
    let fail = |why: &str| Err(format!("{key}: {entry:?}: {why}"));
    let (host, port) = if let Some(rest) = entry.strip_prefix('[') {
        match rest.split_once(']') {
            Some((h, "")) => (h, None),
            Some((h, p)) => match p.strip_prefix(':') {
                Some(p) => (h, Some(p)),
                None => return fail("expected [IPv6] or [IPv6]:PORT"),
            },
            None => return fail("unterminated '['"),
        }
    } else if entry.matches(':').count() > 1 {
        return fail("an IPv6 address goes in brackets: [2001:db8::1] or [2001:db8::1]:443");
    } else {
        match entry.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (entry, None),
        }
    };
    if entry.contains("://") || host.contains('/') {
        return fail(
            "a domain, not a URL: give the host name, e.g. example.com or example.com:443",
        );
    }
    let port = match port {
        None => None,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => Some(n),
            _ => return fail("the port after ':' must be 1-65535"),
        },
    };
    if host == "*" && !deny {
        return fail("'*' is too broad for allowedDomains (srt refuses it too): list the domains");
    }
    if let Some(rest) = host.strip_prefix("*.") {
        if !rest.contains('.') {
            return fail(
                "too broad: a wildcard needs at least two labels after it (*.example.com)",
            );
        }
    }
    if host.is_empty() {
        return fail("no host");
    }
    Ok((host.to_owned(), port))
}

/// Whether `host` is an address literal (allowed as written, never re-judged).
fn is_literal(host: &str) -> bool {
    host.parse::<IpAddr>().is_ok()
}

/// `localhost` and names under it (RFC 6761), which srt lets reach loopback.
fn is_loopback_name(host: &str) -> bool {
    let h = host.trim_end_matches('.').to_ascii_lowercase();
    h == "localhost" || h.ends_with(".localhost")
}

/// An address or CIDR of `deniedResolvedAddresses`, as a block a rule takes
/// (`10.0.0.1` becomes `10.0.0.1/32`).
fn normalise_block(s: &str) -> Result<String, String> {
    let s = s.trim();
    if s.contains('/') {
        return Ok(s.to_owned());
    }
    let a: IpAddr = s
        .parse()
        .map_err(|_| "expected an address or CIDR (10.0.0.0/8, fd00::/8)".to_string())?;
    Ok(match a {
        IpAddr::V4(_) => format!("{a}/32"),
        IpAddr::V6(_) => format!("{a}/128"),
    })
}

/// This host's own addresses, every interface's (srt refuses them for
/// allowed names: a service bound to 0.0.0.0 answers on them).
pub fn local_addresses() -> Vec<IpAddr> {
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for ifa in addrs {
        let Some(sa) = ifa.address else { continue };
        let ip = if let Some(v4) = sa.as_sockaddr_in() {
            IpAddr::V4(v4.ip())
        } else if let Some(v6) = sa.as_sockaddr_in6() {
            IpAddr::V6(v6.ip())
        } else {
            continue;
        };
        if !out.contains(&ip) {
            out.push(ip);
        }
    }
    out
}

#[cfg(test)]
#[path = "tests/srt.rs"]
mod tests;
