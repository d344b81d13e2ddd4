//! Rule compilation, matching by host/port/CIDR, CLI specs and TOML.

use super::*;

fn cfg(action: Action) -> RuleConfig {
    RuleConfig {
        name: None,
        action,
        host: None,
        hosts: Vec::new(),
        cidr: None,
        cidrs: Vec::new(),
        port: None,
        ports: Vec::new(),
        idle_timeout: None,
    }
}

fn compile_err(r: RuleConfig) -> String {
    let first = RuleConfig {
        host: Some("ok.test".into()),
        ..cfg(Action::Allow)
    };
    Policy::from_rules(&[first, r]).unwrap_err().0
}

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
    assert_eq!(
        p.check_name(&t("example.com", 443)),
        NameVerdict::Deny(Denial::NoRule)
    );
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
    assert!(allowed(&literal(&any, "8.8.8.8", 53)));
    assert!(allowed(&literal(&any, "[2606:4700::1111]", 443)));
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
    assert_eq!(
        p.check_name(&t("example.com", 80)),
        NameVerdict::Deny(Denial::NoRule)
    );
    assert!(allowed(&verdict(
        &p,
        "example.com",
        443,
        &["93.184.216.34"]
    )));
    assert!(!allowed(&verdict(&p, "example.com", 443, &["1.1.1.1"])));
    // Host bits are cleared; mapped CIDRs become IPv4; bare address = /32.
    let mut r = cfg(Action::Allow);
    r.cidr = Some("93.184.216.34/16".into());
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
    assert_eq!(
        empty.check_name(&t("example.com", 443)),
        NameVerdict::Deny(Denial::NoRule)
    );
    assert_eq!(
        verdict(&empty, "example.com", 443, &["93.184.216.34"]),
        Verdict::Deny(Denial::NoRule)
    );
    assert_eq!(
        literal(&empty, "1.1.1.1", 443),
        Verdict::Deny(Denial::NoRule)
    );
}

#[test]
fn cli_rules() {
    let ok = [
        ("127.0.0.1:8080", Some("127.0.0.1"), None, Some("8080")),
        ("localhost", Some("localhost"), None, None),
        ("*.github.com:443", Some("*.github.com"), None, Some("443")),
        ("10.0.0.0/8", None, Some("10.0.0.0/8"), None),
        ("10.0.0.0/8:22", None, Some("10.0.0.0/8"), Some("22")),
        (
            "example.com:8000-8100",
            Some("example.com"),
            None,
            Some("8000-8100"),
        ),
        ("*", Some("*"), None, None),
        ("[::1]:9000", Some("::1"), None, Some("9000")),
        ("::1", Some("::1"), None, None),
        ("[fd00::/8]:1-1024", None, Some("fd00::/8"), Some("1-1024")),
        ("fd00::/8", None, Some("fd00::/8"), None),
        ("[::1]", Some("::1"), None, None),
    ];
    for (spec, host, cidr, port) in ok {
        let r = parse_cli_rule(Action::Allow, spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
        assert_eq!(r.name.as_deref(), Some(format!("--allow {spec}").as_str()));
        assert_eq!(r.action, Action::Allow);
        assert_eq!(r.host.as_deref(), host, "{spec}");
        assert_eq!(r.cidr.as_deref(), cidr, "{spec}");
        assert_eq!(r.port, port.map(|p| PortSpec::Text(p.into())), "{spec}");
    }
    let d = parse_cli_rule(Action::Deny, "example.com").unwrap();
    assert_eq!(d.name.as_deref(), Some("--deny example.com"));
    assert_eq!(d.action, Action::Deny);

    for bad in [
        "",
        ":80",
        "example.com:",
        "example.com:0",
        "example.com:70000",
        "example.com:9-1",
        "example.com:http",
        "[::1",
        "[::1]x",
        "10.0.0.0/33",
        "10.0.0.0/8/8",
        "foo.*.com",
        "a b",
        "[fd00::/8]:0",
    ] {
        let e = parse_cli_rule(Action::Allow, bad).expect_err(bad);
        assert!(e.0.contains(&format!("--allow {bad}")), "{bad}: {e}");
    }
    // The examples behave as written.
    let p = pol(&[("allow", "127.0.0.1:8080"), ("allow", "[::1]:9000")]);
    assert!(allowed(&literal(&p, "127.0.0.1", 8080)));
    assert!(allowed(&literal(&p, "[::1]", 9000)));
    assert!(!allowed(&literal(&p, "127.0.0.1", 8081)));
}

#[test]
fn from_rules_errors_name_rule_and_field() {
    let cases: Vec<(RuleConfig, &str)> = vec![
        (cfg(Action::Allow), "host/cidr"),
        (
            RuleConfig {
                cidr: Some("10.0.0.0/99".into()),
                ..cfg(Action::Allow)
            },
            "cidr",
        ),
        (
            RuleConfig {
                cidrs: vec!["nope".into()],
                ..cfg(Action::Deny)
            },
            "cidr",
        ),
        (
            RuleConfig {
                host: Some("x.com".into()),
                port: Some(PortSpec::Text("9-1".into())),
                ..cfg(Action::Allow)
            },
            "port",
        ),
        (
            RuleConfig {
                host: Some("x.com".into()),
                ports: vec![PortSpec::Number(0)],
                ..cfg(Action::Allow)
            },
            "port",
        ),
        (
            RuleConfig {
                host: Some("foo.*.com".into()),
                ..cfg(Action::Allow)
            },
            "host",
        ),
        (
            RuleConfig {
                hosts: vec!["*foo.com".into()],
                ..cfg(Action::Allow)
            },
            "host",
        ),
        (
            RuleConfig {
                hosts: vec!["*.*.com".into()],
                ..cfg(Action::Allow)
            },
            "host",
        ),
        (
            RuleConfig {
                hosts: vec!["*.10.0.0.1".into()],
                ..cfg(Action::Allow)
            },
            "host",
        ),
        (
            RuleConfig {
                host: Some("a..b".into()),
                ..cfg(Action::Allow)
            },
            "host",
        ),
        (
            RuleConfig {
                host: Some("x.com".into()),
                idle_timeout: Some("soon".into()),
                ..cfg(Action::Allow)
            },
            "idle_timeout",
        ),
    ];
    for (mut r, field) in cases {
        let e = compile_err(r.clone());
        assert!(e.contains("rules[1]") && e.contains(field), "{e}");
        r.name = Some("mine".into());
        let e = compile_err(r);
        assert!(e.contains("\"mine\"") && e.contains(field), "{e}");
    }
    let e = Policy::from_rules(&[cfg(Action::Allow)]).unwrap_err();
    assert!(e.0.contains("rules[0]"), "{e}");
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
    assert_eq!(
        p.check_name(&t("example.com", 22)),
        NameVerdict::Deny(Denial::NoRule)
    );
    assert_eq!(
        literal(&p, "192.168.1.1", 443),
        Verdict::Deny(Denial::SpecialAddress(ip("192.168.1.1"), "private"))
    );
}

#[test]
fn toml() {
    let p = Policy::parse_toml(
        r#"
        listen = "ignored"
        [[rules]]
        name = "web"
        action = "allow"
        hosts = ["*.example.com", "example.com"]
        ports = [80, "443", "8000-8100"]
        idle_timeout = "5m"

        [[rules]]
        action = "deny"
        cidr = "93.184.216.0/24"
        port = 80

        [other]
        x = 1
        "#,
    )
    .unwrap();
    assert_eq!(
        p.rule_names(),
        vec![Arc::from("web"), Arc::from("rules[1]")]
    );
    let Verdict::Allow(a) = verdict(&p, "www.example.com", 8080, &["1.1.1.1"]) else {
        panic!()
    };
    assert_eq!(a.idle_timeout, Some(Duration::from_secs(300)));
    assert!(!allowed(&verdict(
        &p,
        "example.com",
        80,
        &["93.184.216.34"]
    )));
    assert!(Policy::parse_toml("").unwrap().is_empty());
    for bad in [
        "[[rules]]\naction = \"allow\"\nhost = \"x\"\nbogus = 1",
        "[[rules]]\naction = \"maybe\"\nhost = \"x\"",
        "[[rules]]\nhost = \"x\"",
        "[[rules]]\naction = \"allow\"\nhost = \"x\"\nport = 70000",
        "[[rules]]\naction = \"allow\"\nhost = \"x\"\nport = -1",
        "rules = 3",
        "[[rules]",
    ] {
        assert!(Policy::parse_toml(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn toml_never_panics_on_garbage() {
    // A small deterministic fuzz: mutate a valid document byte by byte.
    let seed = "[[rules]]\nname = \"r\"\naction = \"allow\"\nhosts = [\"*.ex.com\", \"[::1]\"]\n\
                cidrs = [\"10.0.0.0/8\"]\nports = [1, \"2-3\"]\nidle_timeout = \"5m\"\n";
    let alphabet = b"[]{}\"'=.,:/-*0123456789x\n \\\0\xffaz#";
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..3000 {
        let mut bytes = seed.as_bytes().to_vec();
        for _ in 0..(next() % 6 + 1) {
            let i = (next() as usize) % bytes.len();
            match next() % 3 {
                0 => bytes[i] = alphabet[(next() as usize) % alphabet.len()],
                1 => {
                    bytes.remove(i);
                }
                _ => bytes.insert(i, alphabet[(next() as usize) % alphabet.len()]),
            }
        }
        let text = String::from_utf8_lossy(&bytes);
        let _ = Policy::parse_toml(&text);
    }
    for garbage in [
        "\0",
        "[[",
        "rules = [[]]",
        "[[rules]]\n[[rules]]",
        "=",
        "\u{feff}",
    ] {
        let _ = Policy::parse_toml(garbage);
    }
}
