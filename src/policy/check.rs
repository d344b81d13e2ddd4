//! Verdicts. For each address a connection may be dialled to:
//!
//! 1. **Deny beats allow**: an enforcing deny rule that matches refuses it.
//! 2. **Qualifying**: it is allowed only if an allow rule matches it and, for
//!    a special address, names it (a CIDR at least as specific as the range).
//! 3. **Strictest treatment**: it is inspected if *any* matching allow rule
//!    inspects, qualifying or not, including the inspecting rules a
//!    remembered name of the address matches (`memory.rs`); the request rules
//!    of all of them apply. A broad allow can therefore never switch
//!    inspection off.
//!
//! Audit mode turns denials into would-deny: an audit deny rule reports
//! instead of refusing, and an audit policy lets every denial through with
//! its reason.

use std::net::IpAddr;
use std::sync::Arc;

use super::addr::special;
use super::request::RequestRules;
use super::rule::{HostPattern, Rule};
use super::spec::TlsMode;
use super::{
    Action, AllowFix, Allowed, Denial, Fix, Fronting, Host, MatchMode, NameVerdict, PortMiss,
    RuleRef, Target, Verdict,
};
use crate::target::host::canonical_ip;

/// Remembered names of an address (see `memory.rs`).
pub(crate) type Seen<'a> = dyn Fn(IpAddr) -> Vec<Arc<str>> + 'a;

/// Before DNS: refuse on the name alone when we can, else ask to resolve.
pub(crate) fn check_name(
    rules: &[Rule],
    audit: bool,
    target: &Target,
    user: Option<&str>,
) -> NameVerdict {
    if matches!(target.host, Host::Ip(_)) {
        return NameVerdict::Resolve;
    }
    let port = target.port;
    // Only a deny that needs no address can refuse before DNS.
    let deny = rules.iter().find(|r| {
        r.action == Action::Deny
            && !r.audit
            && r.match_mode == MatchMode::Either
            && r.user_matches(user)
            && r.port_matches(port)
            && r.host_matches(&target.host)
    });
    if let (Some(r), false) = (deny, audit) {
        return NameVerdict::Deny(rule_denial(r));
    }
    let could_match = |r: &&Rule| {
        r.action == Action::Allow
            && r.port_matches(port)
            && (r.host_matches(&target.host)
                || (r.match_mode == MatchMode::Either && !r.cidrs.is_empty()))
    };
    let maybe = rules
        .iter()
        .filter(could_match)
        .any(|r| r.user_matches(user));
    if maybe || audit {
        return NameVerdict::Resolve;
    }
    // A rule for other users names this host: say so rather than "no rule".
    let theirs = rules
        .iter()
        .filter(could_match)
        .find(|r| r.host_matches(&target.host));
    NameVerdict::Deny(match theirs {
        Some(r) => user_denial(user, r),
        None => port_miss(rules, target, user, None).unwrap_or_else(|| no_rule(target)),
    })
}

/// Deny rule `r` refused: its name and reason.
fn rule_denial(r: &Rule) -> Denial {
    Denial::Rule(RuleRef {
        name: r.name.clone(),
        reason: r.reason.clone(),
    })
}

/// A host as a flag writes it: `[v6]` in brackets.
fn host_text(host: &Host) -> String {
    match host {
        Host::Domain(d) => d.clone(),
        Host::Ip(IpAddr::V6(a)) => format!("[{a}]"),
        Host::Ip(a) => a.to_string(),
    }
}

/// `flag` with `value` as a command line takes it: `--allow pypi.org:443`,
/// or `--allow=-pypi.org:443` for a value that begins with `-` (which the
/// parser would take for a flag of its own).
pub(crate) fn flag_arg(flag: &str, value: &str) -> String {
    match value.starts_with('-') {
        true => format!("{flag}={value}"),
        false => format!("{flag} {value}"),
    }
}

/// Whether allow rule `r` is for this host (by name, or for a literal by
/// CIDR), whatever the port and the scope.
fn for_host(r: &Rule, host: &Host, addr: Option<IpAddr>) -> bool {
    match (host, addr) {
        (Host::Domain(_), _) => r.host_matches(host),
        (Host::Ip(_), Some(a)) => r.cidr_matches(a),
        (Host::Ip(a), None) => r.cidr_matches(canonical_ip(*a)),
    }
}

/// An allow rule matches the host and not the port: say which, and its ports.
fn port_miss(
    rules: &[Rule],
    target: &Target,
    user: Option<&str>,
    addr: Option<IpAddr>,
) -> Option<Denial> {
    let r = rules.iter().find(|r| {
        r.action == Action::Allow
            && r.user_matches(user)
            && !r.port_matches(target.port)
            && for_host(r, &target.host, addr)
    })?;
    let host = host_text(&target.host);
    // A scoped rule's fix keeps its scope.
    let scope = match (r.match_mode, r.cidrs.as_slice()) {
        (MatchMode::Both, [one]) => format!("@{one}"),
        _ => String::new(),
    };
    Some(Denial::Port(Arc::new(PortMiss {
        rule: r.name.clone(),
        ports: r.ports_text(),
        flag: flag_arg(r.flag(), &format!("{host}:{}{scope}", target.port)),
        target: host,
        port: target.port,
        builtin: false,
    })))
}

/// No rule matched `target`: the allow rule that would.
pub(crate) fn no_rule(target: &Target) -> Denial {
    let port = target.port;
    let file = match &target.host {
        Host::Domain(d) => format!("hosts = [{d:?}], ports = [{port}]"),
        Host::Ip(a) => {
            let a = canonical_ip(*a);
            let max = if a.is_ipv4() { 32 } else { 128 };
            format!("cidrs = [\"{a}/{max}\"], ports = [{port}]")
        }
    };
    Denial::NoRule(Arc::new(AllowFix {
        flag: flag_arg("--allow", &format!("{}:{port}", host_text(&target.host))),
        file,
    }))
}

/// How to let `addr` through for this name alone (or, for a literal, this
/// address): the flag and the file keys, after allow rule `r`'s kind.
fn fix(r: &Rule, target: &Target, addr: IpAddr) -> Arc<Fix> {
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let port = target.port;
    // The file form keeps the rule's inspection, as the flag form does.
    let kind = match &r.inspect {
        None => "",
        Some(i) if i.tls == TlsMode::Terminate => ", inspect = \"http\", tls = \"terminate\"",
        Some(_) => ", inspect = \"http\"",
    };
    let (flag, mut file) = match &target.host {
        Host::Domain(d) => (
            flag_arg(r.flag(), &format!("{d}:{port}@{addr}/{max}")),
            format!(
                "hosts = [{d:?}], cidrs = [\"{addr}/{max}\"], match = \"both\", ports = [{port}]"
            ),
        ),
        Host::Ip(_) => (
            format!("{} {}:{port}", r.flag(), host_text(&Host::Ip(addr))),
            format!("cidrs = [\"{addr}/{max}\"], ports = [{port}]"),
        ),
    };
    file.push_str(kind);
    Arc::new(Fix {
        rule: r.name.clone(),
        reason: r.reason.clone(),
        flag,
        file,
    })
}

/// `user` is not among the users of rule `r`.
fn user_denial(user: Option<&str>, r: &Rule) -> Denial {
    Denial::User {
        user: user.map(Arc::from),
        rule: r.name.clone(),
    }
}

/// What one address comes to.
enum Outcome<'a> {
    /// Allowed by `rule`; `audit`: the audit-mode deny rules that matched.
    Allowed { rule: &'a Rule, audit: Vec<Denial> },
    /// Denied, but the policy is in audit mode: let through. Every reason
    /// it would have been refused for, the decisive one first.
    WouldDeny {
        rule: Option<&'a Rule>,
        denials: Vec<Denial>,
    },
    /// Refused.
    Denied(Denial),
}

/// Judges one canonical address; also collects every inspecting allow rule
/// that matches it (really, or through a remembered name) into `inspecting`.
fn check_addr<'a>(
    rules: &'a [Rule],
    audit: bool,
    target: &Target,
    user: Option<&str>,
    addr: IpAddr,
    seen: &Seen<'_>,
    inspecting: &mut Vec<usize>,
) -> Outcome<'a> {
    let port = target.port;
    let matching = |r: &&Rule| r.user_matches(user) && r.matches(&target.host, addr, port);
    let deny = |audit_rule: bool| {
        rules
            .iter()
            .filter(|r| r.action == Action::Deny && r.audit == audit_rule)
            .filter(matching)
            .map(rule_denial)
            .collect::<Vec<_>>()
    };
    let sp = special(addr);
    // The first allow rule for this user that matches: a special address it
    // does not name is refused with the fix that names it.
    let mut first_allow: Option<&Rule> = None;
    let mut chosen: Option<&Rule> = None;
    // The first allow rule that matches but is for other users.
    let mut theirs: Option<&Rule> = None;
    for (i, r) in rules.iter().enumerate() {
        if r.action != Action::Allow || !r.matches(&target.host, addr, port) {
            continue;
        }
        if !r.user_matches(user) {
            theirs.get_or_insert(r);
            continue;
        }
        first_allow.get_or_insert(r);
        if r.inspect.is_some() && !inspecting.contains(&i) {
            inspecting.push(i);
        }
        let qualifies = sp
            .as_ref()
            .is_none_or(|sp| r.names(addr, sp.range.prefix()));
        if qualifies {
            match chosen {
                Some(c) if c.inspect.is_some() || r.inspect.is_none() => {}
                _ => chosen = Some(r),
            }
        }
    }
    for name in seen(addr) {
        let as_name = Host::Domain(name.to_string());
        for (i, r) in rules.iter().enumerate() {
            if r.action == Action::Allow
                && r.inspect.is_some()
                && r.user_matches(user)
                && r.matches(&as_name, addr, port)
                && !inspecting.contains(&i)
            {
                inspecting.push(i);
            }
        }
    }
    let enforced = deny(false);
    let audited = deny(true);
    let mut denials = match (enforced.is_empty(), chosen) {
        (true, Some(rule)) => {
            return Outcome::Allowed {
                rule,
                audit: audited,
            }
        }
        (_, Some(_)) => enforced,
        (_, None) => {
            let mut all = enforced;
            all.push(near_miss(
                rules,
                target,
                user,
                addr,
                sp.map(|s| s.name),
                first_allow,
                theirs,
            ));
            all
        }
    };
    if audit {
        denials.extend(audited);
        Outcome::WouldDeny {
            rule: chosen,
            denials,
        }
    } else {
        Outcome::Denied(denials.swap_remove(0))
    }
}

/// Why no allow rule let `addr` through, as precisely as the rules allow:
/// a special address a matching rule does not name (with the fix), a rule
/// for other users, a rule for the host on other ports, or no rule at all.
fn near_miss(
    rules: &[Rule],
    target: &Target,
    user: Option<&str>,
    addr: IpAddr,
    range: Option<&'static str>,
    first_allow: Option<&Rule>,
    theirs: Option<&Rule>,
) -> Denial {
    // A scoped rule for the name and port, scoped elsewhere, also says how.
    let scoped_elsewhere = || {
        rules.iter().find(|r| {
            r.action == Action::Allow
                && r.match_mode == MatchMode::Both
                && r.user_matches(user)
                && r.port_matches(target.port)
                && r.host_matches(&target.host)
        })
    };
    match (range, first_allow, theirs) {
        (Some(range), Some(r), _) => {
            Denial::SpecialAddress(addr, range, Some(fix(r, target, addr)))
        }
        (_, None, Some(r)) => user_denial(user, r),
        (Some(range), None, None) if scoped_elsewhere().is_some() => {
            let fix = scoped_elsewhere().map(|r| fix(r, target, addr));
            Denial::SpecialAddress(addr, range, fix)
        }
        _ => port_miss(rules, target, user, Some(addr)).unwrap_or_else(|| no_rule(target)),
    }
}

/// An address audit mode lets through: its allowing rule (if any), every
/// reason it would have been refused for, and the inspecting rules that apply.
type Audited<'a> = (IpAddr, Option<&'a Rule>, Vec<Denial>, Vec<usize>);

/// After DNS: vets every address; the proxy dials only the ones that pass,
/// under the strictest treatment any of them needs.
pub(crate) fn check_resolved(
    rules: &[Rule],
    audit: bool,
    target: &Target,
    user: Option<&str>,
    addrs: &[IpAddr],
    seen: &Seen<'_>,
) -> Verdict {
    // Addresses allowed outright, and addresses audit mode lets through.
    let mut clean: Vec<(IpAddr, &Rule, Vec<usize>)> = Vec::new();
    let mut audited: Vec<Audited<'_>> = Vec::new();
    let mut first_denial: Option<Denial> = None;
    let mut rule_denial: Option<Denial> = None;
    for &addr in addrs {
        let addr = canonical_ip(addr);
        let mut inspecting = Vec::new();
        match check_addr(rules, audit, target, user, addr, seen, &mut inspecting) {
            Outcome::Allowed { rule, audit } if audit.is_empty() => {
                clean.push((addr, rule, inspecting))
            }
            Outcome::Allowed { rule, audit } => audited.push((addr, Some(rule), audit, inspecting)),
            Outcome::WouldDeny { rule, denials } => audited.push((addr, rule, denials, inspecting)),
            Outcome::Denied(d) => {
                if rule_denial.is_none() && matches!(d, Denial::Rule(_)) {
                    rule_denial = Some(d.clone());
                }
                first_denial.get_or_insert(d);
            }
        }
    }
    // Audit only lets through what enforcement would refuse: when some
    // addresses pass outright, dial those alone, as enforcement would.
    let (rule, reasons, dialled): (Option<&Rule>, Vec<Denial>, Vec<_>) =
        if let Some(&(_, rule, _)) = clean.first() {
            let d = clean.into_iter().map(|(a, _, i)| (a, i)).collect();
            (Some(rule), Vec::new(), d)
        } else if let Some(&(_, rule, _, _)) = audited.first() {
            let mut reasons: Vec<Denial> = Vec::new();
            let mut d = Vec::with_capacity(audited.len());
            for (a, _, denials, i) in audited {
                for denial in denials {
                    if !reasons.contains(&denial) {
                        reasons.push(denial);
                    }
                }
                d.push((a, i));
            }
            (rule, reasons, d)
        } else {
            return Verdict::Deny(
                rule_denial
                    .or(first_denial)
                    .unwrap_or_else(|| no_rule(target)),
            );
        };
    let mut inspecting: Vec<usize> = Vec::new();
    let mut vetted = Vec::with_capacity(dialled.len());
    for (addr, rules_here) in dialled {
        vetted.push(addr);
        for i in rules_here {
            if !inspecting.contains(&i) {
                inspecting.push(i);
            }
        }
    }
    inspecting.sort_unstable();
    let parts: Vec<_> = inspecting
        .iter()
        .filter_map(|&i| rules[i].inspect.clone())
        .collect();
    Verdict::Allow(Allowed {
        rule: rule.map_or_else(|| "-".into(), |r| r.name.clone()),
        idle_timeout: rule.and_then(|r| r.idle_timeout),
        route: rule.and_then(|r| r.route.clone()),
        addrs: vetted,
        inspect: (!parts.is_empty()).then(|| Arc::new(RequestRules::all_of(parts))),
        audit: reasons.first().cloned(),
        audit_reasons: reasons,
    })
}

/// Whether an inspecting allow rule names `name` (any port), and whether one
/// names it exactly (so its addresses are pinned in the memory).
pub(crate) fn inspected_name(rules: &[Rule], name: &str) -> (bool, bool) {
    let host = Host::Domain(name.to_owned());
    let mut inspected = false;
    let mut exact = false;
    for r in rules {
        if r.action == Action::Allow && r.inspect.is_some() && r.host_matches(&host) {
            inspected = true;
            exact |= r
                .hosts
                .iter()
                .any(|h| matches!(h, HostPattern::Exact(e) if e == name));
        }
    }
    (inspected, exact)
}

/// The exact names of inspecting allow rules, in rule order, deduplicated.
pub(crate) fn inspected_names(rules: &[Rule]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for r in rules {
        if r.action != Action::Allow || r.inspect.is_none() {
            continue;
        }
        for h in &r.hosts {
            if let HostPattern::Exact(e) = h {
                if !names.contains(e) {
                    names.push(e.clone());
                }
            }
        }
    }
    names
}

/// Whether some allow rule inspects (or terminates) connections on `port`.
pub(crate) fn vets_port(rules: &[Rule], port: u16) -> bool {
    rules
        .iter()
        .any(|r| r.action == Action::Allow && r.inspect.is_some() && r.port_matches(port))
}

/// What `named` (a name a raw tunnel to `target` carries in its first
/// flight) would get that is stricter than that raw tunnel: a refusal by a
/// rule, or inspection. `None`: nothing stricter (the same host, a name no
/// rule covers, or one allowed raw).
pub(crate) fn fronting(
    rules: &[Rule],
    audit: bool,
    target: &Target,
    user: Option<&str>,
    named: &Target,
    resolved: impl FnOnce(IpAddr) -> Verdict,
) -> Option<Fronting> {
    if named.host == target.host {
        return None;
    }
    let port = named.port;
    if let Host::Ip(ip) = named.host {
        return match resolved(ip) {
            Verdict::Deny(d @ (Denial::Rule(_) | Denial::User { .. })) => Some(Fronting::Denied(d)),
            Verdict::Allow(a) if a.is_inspected() => Some(Fronting::Inspected {
                terminates: a.terminates_tls(),
                rule: a.rule,
            }),
            _ => None,
        };
    }
    if let NameVerdict::Deny(d @ (Denial::Rule(_) | Denial::User { .. })) =
        check_name(rules, audit, named, user)
    {
        return Some(Fronting::Denied(d));
    }
    let mut found: Option<Fronting> = None;
    for r in rules {
        if r.action != Action::Allow
            || !r.user_matches(user)
            || !r.port_matches(port)
            || !r.host_matches(&named.host)
        {
            continue;
        }
        let Some(inspect) = &r.inspect else { continue };
        let terminates = inspect.tls == super::TlsMode::Terminate;
        match &found {
            Some(Fronting::Inspected {
                terminates: true, ..
            }) => {}
            Some(Fronting::Inspected { .. }) if !terminates => {}
            _ => {
                found = Some(Fronting::Inspected {
                    rule: r.name.clone(),
                    terminates,
                })
            }
        }
    }
    found
}
