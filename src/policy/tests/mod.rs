//! Unit tests for the policy engine, one file per concern.

mod audit;
mod check;
mod compose;
mod fronting;
mod host;
mod memory;
mod no_rule;
mod parse;
mod path;
mod request;
mod rules;
mod scoped;
mod special;
mod users;

use std::net::IpAddr;

use super::*;

/// Parses an address literal in tests.
pub(super) fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// A target from `host` and `port`, which must be valid.
pub(super) fn t(host: &str, port: u16) -> Target {
    Target::new(host, port).unwrap()
}

/// Compiles CLI-style specs, e.g. `pol(&[("allow", "*.example.com:443")])`.
pub(super) fn pol(specs: &[(&str, &str)]) -> Policy {
    let rules: Vec<RuleConfig> = specs
        .iter()
        .map(|&(a, s)| {
            let action = if a == "allow" {
                Action::Allow
            } else {
                Action::Deny
            };
            parse_cli_rule(action, s).unwrap()
        })
        .collect();
    Policy::from_rules(&rules).unwrap()
}

/// Checks a target against addresses and returns the verdict.
pub(super) fn verdict(p: &Policy, host: &str, port: u16, addrs: &[&str]) -> Verdict {
    let addrs: Vec<IpAddr> = addrs.iter().map(|a| ip(a)).collect();
    p.check_resolved(&t(host, port), &addrs)
}

/// Checks an address-literal target against itself.
pub(super) fn literal(p: &Policy, host: &str, port: u16) -> Verdict {
    let target = t(host, port);
    let Host::Ip(a) = target.host else {
        panic!("{host} is not a literal")
    };
    p.check_resolved(&target, &[a])
}

/// Whether the verdict allows.
pub(super) fn allowed(v: &Verdict) -> bool {
    matches!(v, Verdict::Allow(_))
}

/// An empty rule of `action`, to fill with struct-update syntax.
pub(super) fn cfg(action: Action) -> RuleConfig {
    RuleConfig::new(action)
}

/// The verdict with a special-address refusal's fix dropped, to compare
/// the address and range alone.
pub(super) fn unfixed(v: Verdict) -> Verdict {
    match v {
        Verdict::Deny(Denial::SpecialAddress(a, r, _)) => {
            Verdict::Deny(Denial::SpecialAddress(a, r, None))
        }
        v => v,
    }
}
