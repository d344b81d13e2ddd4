//! Rules written back in full, and warnings about legal but probably
//! unintended settings: what `--check` prints.

use std::fmt::Write;
use std::time::Duration;

use super::rule::{HostPattern, Rule};
use super::{Action, MatchMode, TlsMode};

/// `250ms`, `10s`, `5m`, `2h`, `1d`: the largest unit that divides exactly.
pub(crate) fn human(d: Duration) -> String {
    let ms = d.as_millis();
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1000),
    ] {
        if ms >= size && ms % size == 0 {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

fn list(items: impl IntoIterator<Item = String>) -> String {
    let v: Vec<String> = items.into_iter().collect();
    format!("[{}]", v.join(", "))
}

/// One rule, every setting spelled out; request rules on indented lines.
pub(crate) fn rule(r: &Rule) -> String {
    let action = match r.action {
        Action::Allow => "allow",
        Action::Deny => "deny",
    };
    let hosts = list(r.hosts.iter().map(|h| match h {
        HostPattern::Any => "*".to_string(),
        HostPattern::Exact(e) => e.clone(),
        HostPattern::Suffix(s) => format!("*{s}"),
    }));
    let cidrs = list(r.cidrs.iter().map(|c| c.to_string()));
    let ports = if r.ports.is_empty() {
        "any".to_string()
    } else {
        list(r.ports.iter().map(|p| match p.lo == p.hi {
            true => p.lo.to_string(),
            false => format!("{}-{}", p.lo, p.hi),
        }))
    };
    let matching = match r.match_mode {
        MatchMode::Either => "either",
        MatchMode::Both => "both",
    };
    let mode = if r.audit { "audit" } else { "enforce" };
    let mut s = format!(
        "rule {:?}: {action}, hosts {hosts}, cidrs {cidrs}, ports {ports}, match {matching}, mode {mode}",
        r.name
    );
    if let Some(users) = &r.users {
        let _ = write!(s, ", users {}", list(users.iter().map(|u| u.to_string())));
    }
    if let Some(why) = &r.reason {
        let _ = write!(s, ", reason {why:?}");
    }
    if r.action == Action::Allow {
        match &r.inspect {
            None => s.push_str(", inspect none (raw tunnel), tls passthrough"),
            Some(i) => {
                let tls = match i.tls {
                    TlsMode::Passthrough => "passthrough",
                    TlsMode::Terminate => "terminate",
                };
                let _ = write!(
                    s,
                    ", inspect http, tls {tls}, upgrades {}",
                    list(i.upgrades.iter().cloned())
                );
                if i.audit && !r.audit {
                    s.push_str(" (requests audited: policy in audit mode)");
                }
            }
        }
        let _ = match r.idle_timeout {
            Some(d) => write!(s, ", idle_timeout {}", human(d)),
            None => write!(s, ", idle_timeout default"),
        };
        // The parent proxy's URL as written, password left out.
        let _ = match &r.route {
            None => Ok(()),
            Some(super::Route::Direct) => write!(s, ", upstream_proxy direct"),
            Some(super::Route::Parent(p)) => write!(s, ", upstream_proxy {p}"),
        };
    }
    if let Some(i) = &r.inspect {
        let reqs = i.describe();
        if reqs.is_empty() {
            s.push_str("\n  requests: none (every request allowed)");
        }
        for (n, (action, method, path)) in reqs.iter().enumerate() {
            let action = match action {
                Action::Allow => "allow",
                Action::Deny => "deny",
            };
            let _ = write!(s, "\n  requests[{n}]: {action} {method} {path}");
        }
    }
    s
}

/// Warnings, one sentence each.
pub(crate) fn warnings(rules: &[Rule], audit: bool) -> Vec<String> {
    let mut w = Vec::new();
    if audit {
        w.push(
            "the policy is in audit mode: nothing is denied; denials are logged as decision=would-deny"
                .to_string(),
        );
    }
    for r in rules {
        if let Some(i) = &r.inspect {
            if i.tls == TlsMode::Passthrough && r.port_matches(443) {
                w.push(format!(
                    "rule {:?} inspects plaintext HTTP on port 443, where clients speak TLS: \
                     they will be refused; use tls = \"terminate\" (--terminate) or leave 443 out of its ports",
                    r.name
                ));
            }
        }
        if r.audit && r.action == Action::Allow && r.inspect.is_none() {
            w.push(format!(
                "rule {:?}: mode = \"audit\" has no effect on an allow rule that does not inspect (it denies nothing)",
                r.name
            ));
        }
    }
    w
}
