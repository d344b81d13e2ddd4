//! Audit mode: for a rule, or for the whole policy. Decisions are made as
//! usual; a denial becomes would-deny, carrying its reason, and lets through.

use super::*;

fn audit_rule(mut r: RuleConfig) -> RuleConfig {
    r.mode = Some(RuleMode::Audit);
    r
}

/// What `v` allows; panics if it denies.
fn allow_of(v: &Verdict) -> &Allowed {
    match v {
        Verdict::Allow(a) => a,
        Verdict::Deny(d) => panic!("denied: {d}"),
    }
}

/// The would-deny `v` carries; panics if it denies.
fn audited(v: &Verdict) -> Option<&Denial> {
    allow_of(v).audit.as_ref()
}

#[test]
fn an_audit_deny_rule_reports_instead_of_denying() {
    let deny = audit_rule(parse_cli_rule(Action::Deny, "tracker.test").unwrap());
    let p = Policy::from_rules(&[parse_cli_rule(Action::Allow, "*").unwrap(), deny]).unwrap();
    // Not refused on the name: decided after DNS, and let through.
    assert_eq!(p.check_name(&t("tracker.test", 443)), NameVerdict::Resolve);
    let v = verdict(&p, "tracker.test", 443, &["45.45.45.45"]);
    assert_eq!(
        audited(&v),
        Some(&Denial::Rule("--deny tracker.test".into()))
    );
    let a = allow_of(&v);
    assert_eq!(a.rule.as_ref(), "--allow *");
    assert_eq!(a.addrs, vec![ip("45.45.45.45")]);
    // Elsewhere nothing to report.
    assert_eq!(
        audited(&verdict(&p, "fine.test", 443, &["45.45.45.45"])),
        None
    );
}

#[test]
fn an_audit_rule_affects_only_the_decisions_it_makes() {
    let deny = audit_rule(parse_cli_rule(Action::Deny, "tracker.test").unwrap());
    // Nothing allows it: denied by default, whatever the audit deny says.
    let p = Policy::from_rules(std::slice::from_ref(&deny)).unwrap();
    assert!(matches!(
        verdict(&p, "tracker.test", 443, &["45.45.45.45"]),
        Verdict::Deny(Denial::NoRule(_))
    ));
    assert!(matches!(
        p.check_name(&t("tracker.test", 443)),
        NameVerdict::Deny(Denial::NoRule(_))
    ));
    // An enforcing deny still refuses.
    let hard = parse_cli_rule(Action::Deny, "*.test").unwrap();
    let p = Policy::from_rules(&[
        parse_cli_rule(Action::Allow, "*").unwrap(),
        deny.clone(),
        hard,
    ])
    .unwrap();
    assert_eq!(
        verdict(&p, "tracker.test", 443, &["45.45.45.45"]),
        Verdict::Deny(Denial::Rule("--deny *.test".into()))
    );
    // A special address still needs naming.
    let p = Policy::from_rules(&[parse_cli_rule(Action::Allow, "*").unwrap(), deny]).unwrap();
    assert!(matches!(
        unfixed(verdict(&p, "tracker.test", 443, &["127.0.0.1"])),
        Verdict::Deny(Denial::SpecialAddress(..))
    ));
}

#[test]
fn an_audit_inspecting_rule_reports_request_denials() {
    let api = audit_rule(RuleConfig {
        name: Some("api".into()),
        host: Some("api.test".into()),
        inspect: Some("http".into()),
        requests: vec![RequestRuleConfig {
            action: Action::Allow,
            method: Some("GET".into()),
            path: Some("/v1/**".into()),
        }],
        ..cfg(Action::Allow)
    });
    let p = Policy::from_rules(std::slice::from_ref(&api)).unwrap();
    let Verdict::Allow(a) = verdict(&p, "api.test", 80, &["45.45.45.45"]) else {
        panic!()
    };
    assert_eq!(a.audit, None);
    let r = a.inspect.unwrap();
    assert_eq!(
        r.check("GET", "/v1/x"),
        RequestVerdict::Allow("api requests[0]".into())
    );
    assert_eq!(
        r.check("POST", "/v1/x"),
        RequestVerdict::WouldDeny("api: no request rule matched".into())
    );
    assert_eq!(
        r.check_upgrade("h2c"),
        RequestVerdict::WouldDeny("api: upgrade \"h2c\" is not allowed".into())
    );
    // With an enforcing inspecting rule on the same target, its denials stand.
    let strict = RuleConfig {
        name: Some("strict".into()),
        host: Some("*.test".into()),
        inspect: Some("http".into()),
        requests: vec![
            RequestRuleConfig {
                action: Action::Deny,
                method: Some("DELETE".into()),
                path: None,
            },
            RequestRuleConfig {
                action: Action::Allow,
                method: None,
                path: None,
            },
        ],
        ..cfg(Action::Allow)
    };
    let p = Policy::from_rules(&[api, strict]).unwrap();
    let Verdict::Allow(a) = verdict(&p, "api.test", 80, &["45.45.45.45"]) else {
        panic!()
    };
    let r = a.inspect.unwrap();
    assert_eq!(
        r.check("DELETE", "/v1/x"),
        RequestVerdict::Deny("strict requests[0]".into())
    );
    assert_eq!(
        r.check("POST", "/v1/x"),
        RequestVerdict::WouldDeny("api: no request rule matched".into())
    );
}

#[test]
fn an_audit_policy_lets_every_denial_through_with_its_reason() {
    let mut p = Policy::from_rules(&[
        parse_cli_rule(Action::Allow, "*.test:443").unwrap(),
        parse_cli_rule(Action::Deny, "tracker.test").unwrap(),
        RuleConfig {
            name: Some("api".into()),
            host: Some("api.test".into()),
            inspect: Some("http".into()),
            requests: vec![RequestRuleConfig {
                action: Action::Deny,
                method: None,
                path: Some("/admin/**".into()),
            }],
            ..cfg(Action::Allow)
        },
    ])
    .unwrap();
    assert!(!p.is_audit());
    p.set_audit(true);
    assert!(p.is_audit());
    // A deny rule: would-deny, reported with the rule that would have allowed it.
    assert_eq!(p.check_name(&t("tracker.test", 443)), NameVerdict::Resolve);
    let v = verdict(&p, "tracker.test", 443, &["45.45.45.45"]);
    assert_eq!(
        audited(&v),
        Some(&Denial::Rule("--deny tracker.test".into()))
    );
    let a = allow_of(&v);
    assert_eq!(a.rule.as_ref(), "--allow *.test:443");
    // No rule at all: let through, rule "-".
    assert_eq!(
        p.check_name(&t("elsewhere.example", 22)),
        NameVerdict::Resolve
    );
    let v = verdict(&p, "elsewhere.example", 22, &["45.45.45.45"]);
    assert!(matches!(audited(&v), Some(Denial::NoRule(_))));
    let a = allow_of(&v);
    assert_eq!(
        (a.rule.as_ref(), a.idle_timeout, a.is_inspected()),
        ("-", None, false)
    );
    // A special address: let through too, with the range named.
    let v = verdict(&p, "www.test", 443, &["127.0.0.1"]);
    assert_eq!(
        audited(&v).map(|d| d.to_string()).as_deref(),
        Some(
            "127.0.0.1 is a loopback address and rule \"--allow *.test:443\" does not name it: \
             to allow it for this destination alone, use --allow www.test:443@127.0.0.1/32 \
             (in a policy file: hosts = [\"www.test\"], cidrs = [\"127.0.0.1/32\"], \
             match = \"both\", ports = [443])"
        )
    );
    // Request rules are audited as well.
    let Verdict::Allow(a) = verdict(&p, "api.test", 443, &["45.45.45.45"]) else {
        panic!()
    };
    assert_eq!(a.audit, None);
    assert_eq!(
        a.inspect.unwrap().check("GET", "/admin/x"),
        RequestVerdict::WouldDeny("api requests[0]".into())
    );
    // Off again: enforced.
    p.set_audit(false);
    let Verdict::Allow(a) = verdict(&p, "api.test", 443, &["45.45.45.45"]) else {
        panic!()
    };
    assert_eq!(
        a.inspect.unwrap().check("GET", "/admin/x"),
        RequestVerdict::Deny("api requests[0]".into())
    );
    assert!(matches!(
        verdict(&p, "tracker.test", 443, &["45.45.45.45"]),
        Verdict::Deny(_)
    ));
}

#[test]
fn audit_lets_through_only_what_enforcement_would_refuse() {
    let mut p = pol(&[("allow", "*.test")]);
    p.set_audit(true);
    // One address passes outright: only it is dialled, nothing to report.
    let v = verdict(&p, "x.test", 443, &["127.0.0.1", "45.45.45.45"]);
    assert_eq!(
        v,
        verdict(
            &pol(&[("allow", "*.test")]),
            "x.test",
            443,
            &["127.0.0.1", "45.45.45.45"]
        )
    );
    // None does: all are let through, with the first denial.
    let Verdict::Allow(a) = verdict(&p, "x.test", 443, &["127.0.0.1", "10.0.0.1"]) else {
        panic!()
    };
    assert_eq!(a.addrs, vec![ip("127.0.0.1"), ip("10.0.0.1")]);
    assert!(matches!(
        a.audit,
        Some(Denial::SpecialAddress(a, "loopback", Some(_))) if a == ip("127.0.0.1")
    ));
    // Every reason is kept, one per address here.
    let ranges: Vec<_> = a
        .audit_reasons
        .iter()
        .map(|d| match d {
            Denial::SpecialAddress(a, r, _) => (*a, *r),
            other => panic!("{other}"),
        })
        .collect();
    assert_eq!(
        ranges,
        [(ip("127.0.0.1"), "loopback"), (ip("10.0.0.1"), "private")]
    );
    // No addresses: nothing to let through.
    assert!(matches!(
        verdict(&p, "x.test", 443, &[]),
        Verdict::Deny(Denial::NoRule(_))
    ));
}

#[test]
fn toml_mode_keys() {
    let p = Policy::parse_toml(
        "mode = \"audit\"\n[[rules]]\naction = \"deny\"\nhost = \"x.test\"\nmode = \"audit\"\n",
    )
    .unwrap();
    assert!(p.is_audit());
    assert!(allowed(&verdict(&p, "x.test", 1, &["45.45.45.45"])));
    let p = Policy::parse_toml("mode = \"enforce\"\n").unwrap();
    assert!(!p.is_audit());
    let e = Policy::parse_toml("[[rules]]\naction = \"deny\"\nhost = \"x\"\nmode = \"dry-run\"\n")
        .unwrap_err();
    assert!(e.to_string().contains("dry-run"), "{e}");
    // Extending keeps audit on if either side had it.
    let mut a = pol(&[("allow", "a.test")]);
    let mut b = pol(&[("deny", "b.test")]);
    b.set_audit(true);
    a.extend(b);
    assert!(a.is_audit());
    assert!(allowed(&verdict(&a, "b.test", 1, &["45.45.45.45"])));
}
