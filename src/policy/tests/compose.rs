//! Rule composition: every pair of rule kinds against every kind of target,
//! with and without the memory of inspected names' addresses; and the exact
//! cases of issue 9 items 1 and 2.

use std::time::Instant;

use super::*;

/// How a verdict treats the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Treat {
    Denied,
    Raw,
    Inspect,
    Terminate,
}

fn treat(v: &Verdict) -> Treat {
    match v {
        Verdict::Deny(_) => Treat::Denied,
        Verdict::Allow(a) if a.terminates_tls() => Treat::Terminate,
        Verdict::Allow(a) if a.is_inspected() => Treat::Inspect,
        Verdict::Allow(_) => Treat::Raw,
    }
}

/// A world: an inspected-looking name, another name resolving to the same
/// address, the address in every spelling, and ranges around it.
struct World {
    name: &'static str,
    other: &'static str,
    suffix: &'static str,
    addr: &'static str,
    cidr: &'static str,
    spellings: &'static [&'static str],
    /// The address is in a special range: only CIDR and literal rules name it.
    special: bool,
}

const PUBLIC: World = World {
    name: "api.test",
    other: "45-45-45-45.nip.test",
    suffix: "*.test",
    addr: "45.45.45.45",
    cidr: "45.45.0.0/16",
    spellings: &[
        "45.45.45.45",
        "[::ffff:45.45.45.45]",
        "[::ffff:2d2d:2d2d]",
        "0x2d2d2d2d",
        "0x2d.0x2d.0x2d.0x2d",
        "055.055.055.055",
        "757935405",
        "45.45.11565",
    ],
    special: false,
};

const PRIVATE: World = World {
    name: "api.internal",
    other: "db.internal",
    suffix: "*.internal",
    addr: "10.1.2.3",
    cidr: "10.0.0.0/8",
    spellings: &[
        "10.1.2.3",
        "[::ffff:10.1.2.3]",
        "0x0a010203",
        "10.66051",
        "012.1.2.3",
    ],
    special: true,
};

const KINDS: &[&str] = &[
    "name",
    "wildcard",
    "suffix",
    "cidr",
    "literal",
    "inspect",
    "terminate",
    "deny-name",
    "deny-cidr",
    "deny-wildcard",
];

const PORT: u16 = 8080;

fn kind(w: &World, k: &str) -> RuleConfig {
    let allow = |spec: String| parse_cli_rule(Action::Allow, &spec).unwrap();
    let deny = |spec: String| parse_cli_rule(Action::Deny, &spec).unwrap();
    match k {
        "name" => allow(format!("{}:{PORT}", w.name)),
        "wildcard" => allow(format!("*:{PORT}")),
        "suffix" => allow(format!("{}:{PORT}", w.suffix)),
        "cidr" => allow(format!("{}:{PORT}", w.cidr)),
        "literal" => allow(format!("{}:{PORT}", w.addr)),
        "inspect" => RuleConfig {
            name: Some("api".into()),
            host: Some(w.name.into()),
            port: Some(PortSpec::Number(PORT)),
            inspect: Some("http".into()),
            requests: vec![
                RequestRuleConfig {
                    action: Action::Allow,
                    method: None,
                    path: None,
                },
                RequestRuleConfig {
                    action: Action::Deny,
                    method: None,
                    path: Some("/v1/admin/**".into()),
                },
            ],
            ..cfg(Action::Allow)
        },
        "terminate" => parse_cli_terminate(&format!("{}:{PORT}", w.name)).unwrap(),
        "deny-name" => deny(w.name.to_string()),
        "deny-cidr" => deny(w.cidr.to_string()),
        "deny-wildcard" => deny("*".into()),
        _ => unreachable!("{k}"),
    }
}

/// The semantics restated from docs/policy.md, independently of `check.rs`.
fn expected(w: &World, kinds: &[&str], host: &str, remembered: bool) -> Treat {
    let by_name = host == w.name;
    let name = matches!(t(host, PORT).host, Host::Domain(_));
    let matches = |k: &str| match k {
        "name" | "inspect" | "terminate" | "deny-name" => by_name,
        "wildcard" | "suffix" => name,
        "cidr" | "literal" | "deny-cidr" | "deny-wildcard" => true,
        _ => unreachable!(),
    };
    let qualifies = |k: &str| !w.special || matches!(k, "cidr" | "literal");
    if kinds.iter().any(|k| k.starts_with("deny") && matches(k)) {
        return Treat::Denied;
    }
    let allowed = kinds
        .iter()
        .any(|k| !k.starts_with("deny") && matches(k) && qualifies(k));
    if !allowed {
        return Treat::Denied;
    }
    // Inspecting rules match by name, or by the remembered name of the address.
    let inspecting = |k: &str| kinds.contains(&k) && (by_name || remembered);
    if inspecting("terminate") {
        Treat::Terminate
    } else if inspecting("inspect") {
        Treat::Inspect
    } else {
        Treat::Raw
    }
}

fn run_world(w: &World) {
    let mut combos: Vec<Vec<&str>> = KINDS.iter().map(|k| vec![*k]).collect();
    for (i, a) in KINDS.iter().enumerate() {
        for b in &KINDS[i + 1..] {
            combos.push(vec![a, b]);
        }
    }
    let mut targets: Vec<&str> = vec![w.name, w.other];
    targets.extend(w.spellings);
    let now = Instant::now();
    let a = ip(w.addr);
    let mut checked = 0;
    for kinds in &combos {
        let rules: Vec<RuleConfig> = kinds.iter().map(|k| kind(w, k)).collect();
        for remember in [false, true] {
            let p = Policy::from_rules(&rules).unwrap();
            let remembered = remember && p.remember(&Host::Domain(w.name.into()), &[a], now);
            if remember {
                let inspects = kinds.iter().any(|k| matches!(*k, "inspect" | "terminate"));
                assert_eq!(
                    remembered, inspects,
                    "{kinds:?}: remembered only for inspecting rules"
                );
            }
            for &host in &targets {
                let target = t(host, PORT);
                let got = p.check_resolved_at(&target, &[a], now);
                let want = expected(w, kinds, host, remembered);
                assert_eq!(
                    treat(&got),
                    want,
                    "rules {kinds:?}, target {host}, remembered {remembered}: {got:?}"
                );
                if let Verdict::Allow(al) = &got {
                    assert_eq!(al.addrs, vec![a], "{kinds:?} {host}");
                    assert_eq!(al.audit, None);
                }
                // The name check before DNS never refuses what is allowed after.
                if want != Treat::Denied {
                    assert_eq!(
                        p.check_name(&target),
                        NameVerdict::Resolve,
                        "{kinds:?} {host}"
                    );
                }
                checked += 1;
            }
        }
    }
    assert!(checked > 500, "{checked}");
}

#[test]
fn every_pair_of_rule_kinds_against_every_target_public() {
    run_world(&PUBLIC);
}

#[test]
fn every_pair_of_rule_kinds_against_every_target_special() {
    run_world(&PRIVATE);
}

/// A policy with the `api` rule of issue 9 and a broad allow.
fn issue9(broad: &str) -> Policy {
    Policy::from_rules(&[
        kind(&PUBLIC, "inspect"),
        parse_cli_rule(Action::Allow, broad).unwrap(),
    ])
    .unwrap()
}

fn admin_denied(v: &Verdict) -> bool {
    let Verdict::Allow(a) = v else {
        return true;
    };
    let Some(r) = &a.inspect else {
        return false;
    };
    matches!(r.check("GET", "/v1/admin/secret"), RequestVerdict::Deny(_))
}

#[test]
fn issue9_item1_a_broad_wildcard_cannot_reach_the_inspected_address() {
    let p = issue9("*:8080");
    let now = Instant::now();
    let a = ip("45.45.45.45");
    // CONNECT api.test:P is inspected, the admin path denied.
    let v = p.check_resolved_at(&t("api.test", PORT), &[a], now);
    assert_eq!(treat(&v), Treat::Inspect);
    assert!(admin_denied(&v));
    // CONNECT 45.45.45.45:P, [::ffff:45.45.45.45]:P, 0x2d2d2d2d:P, SOCKS5
    // ATYP 1 and 4, and a forward GET http://45.45.45.45:P/...: all address
    // literals, which the wildcard does not match.
    for spelling in PUBLIC.spellings {
        let target = t(spelling, PORT);
        assert_eq!(target.host, Host::Ip(a), "{spelling}");
        assert!(matches!(
            p.check_resolved_at(&target, &[a], now),
            Verdict::Deny(Denial::NoRule(_))
        ));
    }
    // Another name for the address: the wildcard matches it; once api.test's
    // address is remembered it is inspected under api's rules.
    let other = t("45-45-45-45.nip.test", PORT);
    assert_eq!(treat(&p.check_resolved_at(&other, &[a], now)), Treat::Raw);
    assert!(p.remember(&Host::Domain("api.test".into()), &[a], now));
    let v = p.check_resolved_at(&other, &[a], now);
    assert_eq!(treat(&v), Treat::Inspect);
    assert!(admin_denied(&v));
}

#[test]
fn issue9_item1_a_broad_cidr_reaches_the_inspected_address_only_inspected() {
    let p = issue9("0.0.0.0/0:8080");
    let now = Instant::now();
    let a = ip("45.45.45.45");
    // Before the name is known, a literal is a plain CIDR allow...
    assert_eq!(
        treat(&p.check_resolved_at(&t("45.45.45.45", PORT), &[a], now)),
        Treat::Raw
    );
    // ... which is why the reactor pre-resolves the inspecting rules' names.
    assert_eq!(p.inspected_names(), vec!["api.test".to_string()]);
    p.remember(&Host::Domain("api.test".into()), &[a], now);
    for spelling in PUBLIC.spellings {
        let v = p.check_resolved_at(&t(spelling, PORT), &[a], now);
        assert_eq!(treat(&v), Treat::Inspect, "{spelling}");
        assert!(admin_denied(&v), "{spelling}");
        let Verdict::Allow(al) = &v else {
            unreachable!()
        };
        assert_eq!(al.rule.as_ref(), "--allow 0.0.0.0/0:8080");
    }
    // Another port is not covered by the inspecting rule: raw.
    let p = issue9("0.0.0.0/0");
    p.remember(&Host::Domain("api.test".into()), &[a], now);
    assert_eq!(
        treat(&p.check_resolved_at(&t("45.45.45.45", 9090), &[a], now)),
        Treat::Raw
    );
    assert_eq!(
        treat(&p.check_resolved_at(&t("45.45.45.45", PORT), &[a], now)),
        Treat::Inspect
    );
}

#[test]
fn issue9_item2_a_cidr_allow_does_not_switch_off_a_name_rules_inspection() {
    // A plain allow for 127.0.0.0/8 port P, and an inspecting rule for
    // localhost port P that does not name the loopback address.
    let mut localhost = kind(&PUBLIC, "inspect");
    localhost.name = Some("localhost-api".into());
    localhost.host = Some("localhost".into());
    let mut loopback = parse_cli_rule(Action::Allow, "127.0.0.0/8:8080").unwrap();
    loopback.name = Some("loopback-web".into());
    let p = Policy::from_rules(&[loopback, localhost]).unwrap();
    let now = Instant::now();
    let v = p.check_resolved_at(&t("localhost", PORT), &[ip("127.0.0.1")], now);
    let Verdict::Allow(a) = &v else {
        panic!("{v:?}")
    };
    assert_eq!(a.rule.as_ref(), "loopback-web");
    let r = a.inspect.as_ref().expect("inspected");
    assert_eq!(r.rule_names(), vec![Arc::from("localhost-api")]);
    assert_eq!(
        r.check("GET", "/v1/admin/x"),
        RequestVerdict::Deny("localhost-api requests[1]".into())
    );
    assert!(matches!(r.check("GET", "/v1/x"), RequestVerdict::Allow(_)));
    // The inspecting rule alone does not name loopback: refused.
    let alone = Policy::from_rules(&[kind(&PUBLIC, "inspect")]).unwrap();
    assert!(matches!(
        alone.check_resolved_at(&t("api.test", PORT), &[ip("127.0.0.1")], now),
        Verdict::Deny(Denial::SpecialAddress(_, "loopback", Some(_)))
    ));
}

#[test]
fn issue9_item2_the_internal_api_shape() {
    // api.internal on 10.x, inspected, plus a plain allow for 10/8.
    let w = &PRIVATE;
    let p = Policy::from_rules(&[kind(w, "inspect"), kind(w, "cidr")]).unwrap();
    let now = Instant::now();
    let a = ip(w.addr);
    let v = p.check_resolved_at(&t(w.name, PORT), &[a], now);
    assert_eq!(treat(&v), Treat::Inspect);
    assert!(admin_denied(&v));
    p.remember(&Host::Domain(w.name.into()), &[a], now);
    for spelling in w.spellings {
        let v = p.check_resolved_at(&t(spelling, PORT), &[a], now);
        assert_eq!(treat(&v), Treat::Inspect, "{spelling}");
        assert!(admin_denied(&v));
    }
}

#[test]
fn request_rules_of_every_matching_inspecting_rule_apply() {
    let reqs = |name: &str, host: &str, list: &[(Action, &str)]| RuleConfig {
        name: Some(name.into()),
        host: Some(host.into()),
        inspect: Some("http".into()),
        requests: list
            .iter()
            .map(|&(action, path)| RequestRuleConfig {
                action,
                method: None,
                path: Some(path.into()),
            })
            .collect(),
        ..cfg(Action::Allow)
    };
    let p = Policy::from_rules(&[
        reqs("api", "api.test", &[(Action::Allow, "/v1/**")]),
        reqs(
            "all-test",
            "*.test",
            &[(Action::Allow, "/**"), (Action::Deny, "/v1/admin/**")],
        ),
    ])
    .unwrap();
    let v = verdict(&p, "api.test", 80, &["45.45.45.45"]);
    let Verdict::Allow(a) = &v else {
        panic!("{v:?}")
    };
    let r = a.inspect.as_ref().unwrap();
    assert_eq!(
        r.rule_names(),
        vec![Arc::from("api"), Arc::from("all-test")]
    );
    // Intersection: allowed by both, denied by either.
    assert_eq!(
        r.check("GET", "/v1/x"),
        RequestVerdict::Allow("api requests[0] + all-test requests[0]".into())
    );
    assert_eq!(
        r.check("GET", "/v2/x"),
        RequestVerdict::Deny("api: no request rule matched".into())
    );
    assert_eq!(
        r.check("GET", "/v1/admin/x"),
        RequestVerdict::Deny("all-test requests[1]".into())
    );
    // www.test matches only the wildcard rule.
    let r = inspect_of(&verdict(&p, "www.test", 80, &["45.45.45.45"]));
    assert_eq!(r.rule_names(), vec![Arc::from("all-test")]);
    assert!(matches!(r.check("GET", "/v2/x"), RequestVerdict::Allow(_)));
}

fn inspect_of(v: &Verdict) -> Arc<RequestRules> {
    match v {
        Verdict::Allow(a) => a.inspect.clone().expect("inspected"),
        Verdict::Deny(d) => panic!("denied: {d}"),
    }
}

#[test]
fn terminate_wins_over_plaintext_inspection_and_keeps_both_request_rules() {
    let mut plain = kind(&PUBLIC, "inspect");
    plain.port = None;
    let term = parse_cli_terminate("*.test:8080").unwrap();
    let p = Policy::from_rules(&[plain, term]).unwrap();
    let v = verdict(&p, "api.test", PORT, &["45.45.45.45"]);
    assert_eq!(treat(&v), Treat::Terminate);
    assert!(admin_denied(&v));
    assert_eq!(
        treat(&verdict(&p, "api.test", 80, &["45.45.45.45"])),
        Treat::Inspect
    );
    assert_eq!(
        treat(&verdict(&p, "www.test", PORT, &["45.45.45.46"])),
        Treat::Terminate
    );
}

#[test]
fn the_reported_rule_prefers_a_qualifying_inspecting_rule() {
    let p = Policy::from_rules(&[
        parse_cli_rule(Action::Allow, "*:80").unwrap(),
        kind(&PUBLIC, "inspect"),
        parse_cli_rule(Action::Allow, "api.test").unwrap(),
    ])
    .unwrap();
    let Verdict::Allow(a) = verdict(&p, "api.test", PORT, &["45.45.45.45"]) else {
        panic!()
    };
    assert_eq!(a.rule.as_ref(), "api");
}

#[test]
fn reload_recheck_closes_raw_tunnels_that_now_need_inspection() {
    let now = Instant::now();
    let a = ip("45.45.45.45");
    let target = t("api.test", PORT);
    let before = pol(&[("allow", "*:8080")]);
    assert!(matches!(
        before.recheck(&target, a, true, now),
        Recheck::Keep(_)
    ));
    let mut after = issue9("*:8080");
    after.set_memory(before.memory().clone());
    assert!(after.memory().same_as(before.memory()));
    match after.recheck(&target, a, true, now) {
        Recheck::NeedsInspection(al) => assert!(al.is_inspected()),
        other => panic!("{other:?}"),
    }
    // An inspected session keeps going under the new request rules.
    match after.recheck(&target, a, false, now) {
        Recheck::Keep(al) => assert!(admin_denied(&Verdict::Allow(al))),
        other => panic!("{other:?}"),
    }
    // A literal-address raw tunnel opened under a CIDR allow: after a reload
    // that remembers api.test's address, it needs inspection too.
    let cidr = issue9("0.0.0.0/0:8080");
    let lit = t("45.45.45.45", PORT);
    assert!(matches!(cidr.recheck(&lit, a, true, now), Recheck::Keep(_)));
    cidr.remember(&Host::Domain("api.test".into()), &[a], now);
    assert!(matches!(
        cidr.recheck(&lit, a, true, now),
        Recheck::NeedsInspection(_)
    ));
    // Denied now.
    let none = Policy::default();
    assert!(matches!(
        none.recheck(&target, a, true, now),
        Recheck::Deny(Denial::NoRule(_))
    ));
}

#[test]
fn match_both_takes_the_name_only_inside_the_cidr() {
    let mirror = RuleConfig {
        name: Some("mirror".into()),
        hosts: vec!["mirror.corp".into()],
        cidrs: vec!["10.20.0.0/16".into()],
        match_mode: Some(MatchMode::Both),
        ..cfg(Action::Allow)
    };
    let p = Policy::from_rules(&[mirror]).unwrap();
    assert!(allowed(&verdict(&p, "mirror.corp", 443, &["10.20.1.1"])));
    // Resolving elsewhere: not this rule (and 10.30/16 is special anyway).
    assert!(!allowed(&verdict(&p, "mirror.corp", 443, &["10.30.1.1"])));
    assert!(!allowed(&verdict(&p, "mirror.corp", 443, &["45.45.45.45"])));
    // Another name inside the CIDR, or the address itself: not the mirror.
    assert!(!allowed(&verdict(&p, "other.corp", 443, &["10.20.1.1"])));
    assert!(!allowed(&literal(&p, "10.20.1.1", 443)));
    // Only the addresses inside the CIDR are dialled.
    let Verdict::Allow(a) = verdict(&p, "mirror.corp", 443, &["45.45.45.45", "10.20.1.1"]) else {
        panic!()
    };
    assert_eq!(a.addrs, vec![ip("10.20.1.1")]);
    // Before DNS only the name can be judged.
    assert_eq!(p.check_name(&t("mirror.corp", 443)), NameVerdict::Resolve);
    assert!(matches!(
        p.check_name(&t("other.corp", 443)),
        NameVerdict::Deny(Denial::NoRule(_))
    ));
    // The default, either, takes the CIDR alone too.
    let either = RuleConfig {
        hosts: vec!["mirror.corp".into()],
        cidrs: vec!["10.20.0.0/16".into()],
        ..cfg(Action::Allow)
    };
    let p = Policy::from_rules(&[either]).unwrap();
    assert!(allowed(&literal(&p, "10.20.1.1", 443)));
    assert!(allowed(&verdict(&p, "other.corp", 443, &["10.20.1.1"])));
    assert!(allowed(&verdict(&p, "mirror.corp", 443, &["45.45.45.45"])));
}

#[test]
fn match_both_deny_needs_both_and_cannot_refuse_before_dns() {
    let deny = RuleConfig {
        hosts: vec!["*.corp".into()],
        cidrs: vec!["10.66.0.0/16".into()],
        match_mode: Some(MatchMode::Both),
        ..cfg(Action::Deny)
    };
    let p =
        Policy::from_rules(&[deny, parse_cli_rule(Action::Allow, "10.0.0.0/8").unwrap()]).unwrap();
    assert_eq!(p.check_name(&t("x.corp", 443)), NameVerdict::Resolve);
    assert!(!allowed(&verdict(&p, "x.corp", 443, &["10.66.0.1"])));
    assert!(allowed(&verdict(&p, "x.corp", 443, &["10.67.0.1"])));
    assert!(allowed(&literal(&p, "10.66.0.1", 443)));
}
