//! Verdicts: deny beats allow, nothing matching is a denial, and special
//! addresses pass only when an allow rule names them.

use std::net::IpAddr;

use super::addr::special;
use super::host::canonical_ip;
use super::rule::Rule;
use super::{Action, Allowed, Denial, Host, NameVerdict, Target, Verdict};

/// Before DNS: refuse on the name alone when we can, else ask to resolve.
pub(crate) fn check_name(rules: &[Rule], target: &Target) -> NameVerdict {
    if matches!(target.host, Host::Ip(_)) {
        return NameVerdict::Resolve;
    }
    let port = target.port;
    let deny = rules
        .iter()
        .find(|r| r.action == Action::Deny && r.port_matches(port) && r.host_matches(&target.host));
    if let Some(r) = deny {
        return NameVerdict::Deny(Denial::Rule(r.name.clone()));
    }
    let maybe = rules.iter().any(|r| {
        r.action == Action::Allow
            && r.port_matches(port)
            && (r.host_matches(&target.host) || !r.cidrs.is_empty())
    });
    if maybe {
        NameVerdict::Resolve
    } else {
        NameVerdict::Deny(Denial::NoRule)
    }
}

/// Whether `rule` matches the target (by name) or `addr` (by CIDR) and port.
fn matches(rule: &Rule, target: &Target, addr: IpAddr) -> bool {
    rule.port_matches(target.port) && (rule.host_matches(&target.host) || rule.cidr_matches(addr))
}

/// Judges one canonical address: the allowing rule, or why not. When several
/// allow rules qualify, the first that inspects HTTP wins over plain allows,
/// so a broad allow cannot switch off a narrower rule's request rules.
fn check_addr<'a>(rules: &'a [Rule], target: &Target, addr: IpAddr) -> Result<&'a Rule, Denial> {
    if let Some(r) = rules
        .iter()
        .find(|r| r.action == Action::Deny && matches(r, target, addr))
    {
        return Err(Denial::Rule(r.name.clone()));
    }
    let allows = rules
        .iter()
        .filter(|r| r.action == Action::Allow && matches(r, target, addr));
    let mut any = false;
    let mut chosen: Option<&Rule> = None;
    let sp = special(addr);
    for r in allows {
        any = true;
        if let Some(sp) = &sp {
            if !r.names(addr, sp.range.prefix()) {
                continue;
            }
        }
        if r.inspect.is_some() {
            return Ok(r);
        }
        chosen.get_or_insert(r);
    }
    match (chosen, sp) {
        (Some(r), _) => Ok(r),
        (None, Some(sp)) if any => Err(Denial::SpecialAddress(addr, sp.name)),
        (None, _) => Err(Denial::NoRule),
    }
}

/// After DNS: vets every address; the proxy dials only the ones that pass.
pub(crate) fn check_resolved(rules: &[Rule], target: &Target, addrs: &[IpAddr]) -> Verdict {
    let mut allowed: Option<Allowed> = None;
    let mut first_denial: Option<Denial> = None;
    let mut rule_denial: Option<Denial> = None;
    for &addr in addrs {
        let addr = canonical_ip(addr);
        match check_addr(rules, target, addr) {
            Ok(rule) => match &mut allowed {
                // Never dial an address uninspected when the rule that
                // allows it inspects (the first address's rule does not).
                Some(a) if a.inspect.is_none() && rule.inspect.is_some() => {}
                Some(a) => a.addrs.push(addr),
                None => {
                    let mut vetted = Vec::with_capacity(addrs.len());
                    vetted.push(addr);
                    allowed = Some(Allowed {
                        rule: rule.name.clone(),
                        idle_timeout: rule.idle_timeout,
                        addrs: vetted,
                        inspect: rule.inspect.clone(),
                    })
                }
            },
            Err(d) => {
                if rule_denial.is_none() && matches!(d, Denial::Rule(_)) {
                    rule_denial = Some(d.clone());
                }
                first_denial.get_or_insert(d);
            }
        }
    }
    match allowed {
        Some(a) => Verdict::Allow(a),
        None => Verdict::Deny(rule_denial.or(first_denial).unwrap_or(Denial::NoRule)),
    }
}
