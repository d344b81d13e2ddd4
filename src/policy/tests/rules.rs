//! Rule matching by host pattern, port and CIDR; deny over allow.

use super::*;

#[test]
fn wildcards() {
    let p = pol(&[("allow", "*.example.com")]);
    assert!(allowed(&verdict(
        &p,
        "a.example.com",
        443,
        &["93.184.216.34"]
    )));
    assert!(allowed(&verdict(
        &p,
        "a.b.c.example.com",
        1,
        &["93.184.216.34"]
    )));
    assert!(allowed(&verdict(
        &p,
        "A.Example.COM.",
        1,
        &["93.184.216.34"]
    )));
    assert!(!allowed(&verdict(
        &p,
        "example.com",
        443,
        &["93.184.216.34"]
    )));
    assert!(!allowed(&verdict(
        &p,
        "badexample.com",
        443,
        &["93.184.216.34"]
    )));
    assert!(!allowed(&verdict(
        &p,
        "example.com.evil",
        443,
        &["93.184.216.34"]
    )));
    assert!(matches!(
        p.check_name(&t("example.com", 443)),
        NameVerdict::Deny(Denial::NoRule(_))
    ));
    assert_eq!(p.check_name(&t("x.example.com", 443)), NameVerdict::Resolve);

    let exact = pol(&[("allow", "example.com")]);
    assert!(allowed(&verdict(
        &exact,
        "EXAMPLE.com.",
        80,
        &["93.184.216.34"]
    )));
    assert!(!allowed(&verdict(
        &exact,
        "www.example.com",
        80,
        &["93.184.216.34"]
    )));

    let any = pol(&[("allow", "*")]);
    assert!(allowed(&verdict(
        &any,
        "anything.test",
        5,
        &["93.184.216.34"]
    )));
    // An allow wildcard never matches an address literal...
    assert!(matches!(
        literal(&any, "8.8.8.8", 53),
        Verdict::Deny(Denial::NoRule(_))
    ));
    assert!(!allowed(&literal(&any, "[2606:4700::1111]", 443)));
    assert_eq!(any.check_name(&t("8.8.8.8", 53)), NameVerdict::Resolve);
    // ... but a deny wildcard does (a deny matches generously).
    let p = pol(&[("allow", "0.0.0.0/0"), ("deny", "*:25")]);
    assert!(allowed(&literal(&p, "8.8.8.8", 53)));
    assert_eq!(
        literal(&p, "8.8.8.8", 25),
        Verdict::Deny(Denial::Rule("--deny *:25".into()))
    );
}

#[test]
fn idn_patterns_match_their_punycode() {
    let p = pol(&[("allow", "*.bücher.example:443")]);
    assert!(allowed(&verdict(
        &p,
        "www.xn--bcher-kva.example",
        443,
        &["93.184.216.34"]
    )));
    let p = pol(&[("allow", "xn--bcher-kva.example:443")]);
    assert!(allowed(&verdict(
        &p,
        "BÜCHER.example.",
        443,
        &["93.184.216.34"]
    )));
}

#[test]
fn ports() {
    let p = pol(&[("allow", "example.com:443")]);
    assert!(allowed(&verdict(
        &p,
        "example.com",
        443,
        &["93.184.216.34"]
    )));
    assert!(!allowed(&verdict(
        &p,
        "example.com",
        80,
        &["93.184.216.34"]
    )));

    let p = pol(&[("allow", "example.com:8000-8100")]);
    for (port, ok) in [
        (7999, false),
        (8000, true),
        (8050, true),
        (8100, true),
        (8101, false),
    ] {
        assert_eq!(
            allowed(&verdict(&p, "example.com", port, &["93.184.216.34"])),
            ok,
            "{port}"
        );
    }

    let mut r = cfg(Action::Allow);
    r.host = Some("example.com".into());
    r.port = Some(PortSpec::Number(22));
    r.ports = vec![
        PortSpec::Text("443".into()),
        PortSpec::Text("1000-1001".into()),
    ];
    let p = Policy::from_rules(&[r]).unwrap();
    for (port, ok) in [
        (22, true),
        (443, true),
        (1000, true),
        (1001, true),
        (80, false),
    ] {
        assert_eq!(
            allowed(&verdict(&p, "example.com", port, &["93.184.216.34"])),
            ok,
            "{port}"
        );
    }

    let p = pol(&[("allow", "example.com")]);
    for port in [1, 80, 65535] {
        assert!(allowed(&verdict(
            &p,
            "example.com",
            port,
            &["93.184.216.34"]
        )));
    }
}

#[test]
fn cidrs() {
    let p = pol(&[
        ("allow", "93.184.0.0/16:443"),
        ("allow", "[2606:2800::/32]:443"),
    ]);
    assert!(allowed(&literal(&p, "93.184.216.34", 443)));
    assert!(!allowed(&literal(&p, "93.185.0.1", 443)));
    assert!(!allowed(&literal(&p, "93.184.216.34", 80)));
    assert!(allowed(&literal(&p, "2606:2800:220:1::1", 443)));
    assert!(!allowed(&literal(&p, "2606:2801::1", 443)));
    // A name passes if any resolved address is inside a CIDR.
    assert_eq!(p.check_name(&t("example.com", 443)), NameVerdict::Resolve);
    assert!(matches!(
        p.check_name(&t("example.com", 80)),
        NameVerdict::Deny(Denial::NoRule(_))
    ));
    assert!(allowed(&verdict(
        &p,
        "example.com",
        443,
        &["93.184.216.34"]
    )));
    assert!(!allowed(&verdict(&p, "example.com", 443, &["1.1.1.1"])));
    // Host bits set are an error suggesting the block.
    let mut r = cfg(Action::Allow);
    r.cidr = Some("93.184.216.34/16".into());
    let e = Policy::from_rules(&[r.clone()]).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("cidr"));
    assert!(e.message.contains("use 93.184.0.0/16"), "{e}");
    // Mapped CIDRs become IPv4; bare address = /32.
    r.cidr = Some("93.184.0.0/16".into());
    r.cidrs = vec!["::ffff:1.1.1.0/120".into(), "8.8.8.8".into()];
    let p = Policy::from_rules(&[r]).unwrap();
    assert!(allowed(&literal(&p, "93.184.1.1", 1)));
    assert!(allowed(&literal(&p, "1.1.1.1", 1)));
    assert!(allowed(&literal(&p, "::ffff:1.1.1.1", 1)));
    assert!(allowed(&literal(&p, "8.8.8.8", 1)));
    assert!(!allowed(&literal(&p, "8.8.4.4", 1)));
    // Families never mix: ::/0 does not cover IPv4.
    let p = pol(&[("allow", "::/0")]);
    assert!(allowed(&literal(&p, "2606:4700::1111", 1)));
    assert!(!allowed(&literal(&p, "1.1.1.1", 1)));
}

#[test]
fn address_literal_hosts_are_cidrs() {
    let p = pol(&[("allow", "93.184.216.34:443")]);
    assert!(allowed(&literal(&p, "93.184.216.34", 443)));
    assert!(allowed(&literal(&p, "0x5db8d822", 443)));
    // It matches by address, so a name resolving to it passes too.
    assert!(allowed(&verdict(
        &p,
        "example.com",
        443,
        &["93.184.216.34"]
    )));
    assert!(!allowed(&literal(&p, "93.184.216.35", 443)));
}

#[test]
fn deny_beats_allow_and_default_deny() {
    let p = pol(&[
        ("allow", "*"),
        ("deny", "evil.example.com"),
        ("deny", "*.tracker.test:443"),
        ("deny", "93.184.216.0/24"),
    ]);
    let name = |s: &str| Denial::Rule(format!("--deny {s}").as_str().into());
    assert_eq!(
        p.check_name(&t("evil.example.com", 80)),
        NameVerdict::Deny(name("evil.example.com"))
    );
    assert_eq!(
        verdict(&p, "evil.example.com", 80, &["1.1.1.1"]),
        Verdict::Deny(name("evil.example.com"))
    );
    assert_eq!(
        p.check_name(&t("a.tracker.test", 443)),
        NameVerdict::Deny(name("*.tracker.test:443"))
    );
    assert_eq!(p.check_name(&t("a.tracker.test", 80)), NameVerdict::Resolve);
    assert_eq!(
        verdict(&p, "fine.test", 80, &["93.184.216.34"]),
        Verdict::Deny(name("93.184.216.0/24"))
    );
    assert!(allowed(&verdict(&p, "fine.test", 80, &["1.1.1.1"])));

    let empty = Policy::default();
    assert!(empty.is_empty());
    assert!(matches!(
        empty.check_name(&t("example.com", 443)),
        NameVerdict::Deny(Denial::NoRule(_))
    ));
    assert!(matches!(
        verdict(&empty, "example.com", 443, &["93.184.216.34"]),
        Verdict::Deny(Denial::NoRule(_))
    ));
    assert!(matches!(
        literal(&empty, "1.1.1.1", 443),
        Verdict::Deny(Denial::NoRule(_))
    ));
}

#[test]
fn idle_timeout_and_names() {
    let rules = [
        RuleConfig {
            host: Some("a.test".into()),
            idle_timeout: Some("30s".into()),
            ..cfg(Action::Allow)
        },
        RuleConfig {
            name: Some("b".into()),
            host: Some("b.test".into()),
            idle_timeout: Some("off".into()),
            ..cfg(Action::Allow)
        },
    ];
    let p = Policy::from_rules(&rules).unwrap();
    assert_eq!(p.len(), 2);
    assert_eq!(p.rule_names(), vec![Arc::from("rules[0]"), Arc::from("b")]);
    let Verdict::Allow(a) = verdict(&p, "a.test", 1, &["1.1.1.1"]) else {
        panic!()
    };
    assert_eq!(a.rule.as_ref(), "rules[0]");
    assert_eq!(a.idle_timeout, Some(Duration::from_secs(30)));
    let Verdict::Allow(b) = verdict(&p, "b.test", 1, &["1.1.1.1"]) else {
        panic!()
    };
    assert_eq!((b.rule.as_ref(), b.idle_timeout), ("b", None));
}

#[test]
fn extend_appends() {
    let mut p = pol(&[("allow", "*")]);
    let q = pol(&[("deny", "evil.test")]);
    p.extend(q.clone());
    assert_eq!(p.len(), 2);
    assert_eq!(p.rule_names()[1].as_ref(), "--deny evil.test");
    assert_eq!(q.len(), 1);
    assert!(!allowed(&verdict(&p, "evil.test", 443, &["1.1.1.1"])));
    // A clone taken before extending is unaffected (Arc copy-on-write).
    let before = pol(&[("allow", "*")]);
    let mut after = before.clone();
    after.extend(q);
    assert_eq!((before.len(), after.len()), (1, 2));
}

#[test]
fn builtin_default() {
    let p = Policy::builtin_default();
    assert_eq!(p.rule_names(), vec![Arc::from("default-public-web")]);
    assert!(allowed(&verdict(
        &p,
        "example.com",
        443,
        &["93.184.216.34"]
    )));
    assert!(allowed(&verdict(&p, "example.com", 80, &["93.184.216.34"])));
    assert!(!allowed(&verdict(
        &p,
        "example.com",
        22,
        &["93.184.216.34"]
    )));
    let NameVerdict::Deny(Denial::Port(miss)) = p.check_name(&t("example.com", 22)) else {
        panic!("a wrong port names the rule")
    };
    assert_eq!(
        (&*miss.rule, &*miss.ports, &*miss.flag),
        (
            "default-public-web",
            "80, 443",
            "--default --allow example.com:22"
        )
    );
    assert_eq!(
        unfixed(verdict(&p, "router.test", 443, &["192.168.1.1"])),
        Verdict::Deny(Denial::SpecialAddress(ip("192.168.1.1"), "private", None))
    );
    // The wildcard matches names only: address literals need a rule naming them.
    assert!(matches!(
        literal(&p, "192.168.1.1", 443),
        Verdict::Deny(Denial::NoRule(_))
    ));
    assert!(matches!(
        literal(&p, "1.2.3.4", 443),
        Verdict::Deny(Denial::NoRule(_))
    ));
    assert!(matches!(
        literal(&p, "[2606:4700::1111]", 443),
        Verdict::Deny(Denial::NoRule(_))
    ));
}
