//! Compiling rules: CLI specs, `from_rules` errors and TOML documents.

use super::*;

fn compile_err(r: RuleConfig) -> String {
    let first = RuleConfig {
        host: Some("ok.test".into()),
        ..cfg(Action::Allow)
    };
    Policy::from_rules(&[first, r]).unwrap_err().to_string()
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
        assert!(
            e.to_string().contains(&format!("--allow {bad}")),
            "{bad}: {e}"
        );
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
        (cfg(Action::Allow), "host or cidr"),
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
    assert!(e.to_string().contains("rules[0]"), "{e}");
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

#[test]
fn plain_messages_for_common_mistakes() {
    let msg = |spec: &str| parse_cli_rule(Action::Allow, spec).unwrap_err().to_string();
    for (spec, want) in [
        (
            "https://github.com",
            "a rule takes a host, not a URL: use github.com:443",
        ),
        (
            "http://example.com/x/y",
            "a rule takes a host, not a URL: use example.com:80",
        ),
        (
            "https://example.com:8443/",
            "a rule takes a host, not a URL: use example.com:8443",
        ),
        (
            "wss://user@ws.example.com",
            "a rule takes a host, not a URL: use ws.example.com:443",
        ),
        (
            "ftp://files.example.com",
            "a rule takes a host, not a URL: use files.example.com",
        ),
        (
            "github.com/owner/repo",
            "a rule takes a host, not a URL path: use github.com",
        ),
        ("example.com:70000", "port 70000 is out of range (1-65535)"),
        ("example.com:0", "port 0 is out of range (1-65535)"),
        (
            "example.com:1-99999",
            "port 99999 is out of range (1-65535)",
        ),
        ("example.com:http", "invalid port \"http\""),
        ("10.0.0.1/8", "10.0.0.1/8 has host bits set: use 10.0.0.0/8"),
        (
            "[fd00::1/8]:443",
            "fd00::1/8 has host bits set: use fd00::/8",
        ),
        ("10.0.0.0/33", "prefix length /33 too long"),
    ] {
        let e = msg(spec);
        assert!(e.contains(want), "{spec}: {e}");
        assert!(e.contains(&format!("--allow {spec}")), "{spec}: {e}");
    }
    // The same mistakes in a rule table name the key.
    let rule = |r: RuleConfig| Policy::from_rules(&[r]).unwrap_err();
    let e = rule(RuleConfig {
        host: Some("https://github.com/x".into()),
        ..cfg(Action::Allow)
    });
    assert_eq!((e.rule, e.key.as_deref()), (Some(0), Some("host")));
    // The table form: the port in its own key (`github.com:443` is refused there).
    assert!(
        e.message
            .contains("not a URL: give \"github.com\", and the port as port = 443 (or in ports)"),
        "{e}"
    );
    let e = rule(RuleConfig {
        hosts: vec!["https://pypi.org:8443/simple".into()],
        ..cfg(Action::Allow)
    });
    assert!(
        e.message
            .contains("give \"pypi.org\", and the port as port = 8443 (or in ports)"),
        "{e}"
    );
    let e = rule(RuleConfig {
        host: Some("ftp://files.example.com".into()),
        ..cfg(Action::Allow)
    });
    assert!(
        e.message.ends_with("not a URL: give \"files.example.com\""),
        "{e}"
    );
    let e = rule(RuleConfig {
        hosts: vec!["ok.test".into(), "ok.test/path".into()],
        ..cfg(Action::Allow)
    });
    assert_eq!(e.key.as_deref(), Some("hosts[1]"));
    let e = rule(RuleConfig {
        cidrs: vec!["10.0.0.0/8".into(), "10.0.0.1/8".into()],
        ..cfg(Action::Allow)
    });
    assert_eq!(e.key.as_deref(), Some("cidrs[1]"));
    assert!(e.message.contains("use 10.0.0.0/8"), "{e}");
    let e = rule(RuleConfig {
        host: Some("x.test".into()),
        ports: vec![PortSpec::Number(443), PortSpec::Text("70000".into())],
        ..cfg(Action::Allow)
    });
    assert_eq!(e.key.as_deref(), Some("ports[1]"));
    assert_eq!(e.message, "port 70000 is out of range (1-65535)");
    // In TOML, an out-of-range number fails while reading, plainly.
    for (doc, want) in [
        ("port = 70000", "port 70000 is out of range (1-65535)"),
        ("ports = [443, -1]", "port -1 is out of range (1-65535)"),
        ("port = 0", "port 0 is out of range (1-65535)"),
        ("port = 1.5", "a port (1-65535) or a \"LO-HI\" range"),
    ] {
        let text = format!("[[rules]]\naction = \"allow\"\nhost = \"x\"\n{doc}\n");
        let e = Policy::parse_toml(&text).unwrap_err().to_string();
        assert!(e.contains(want), "{doc}: {e}");
        assert!(!e.contains("untagged"), "{doc}: {e}");
    }
}

#[test]
fn an_ipv6_address_that_could_end_in_a_port_needs_brackets() {
    let e = parse_cli_rule(Action::Allow, "::1:443")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("\"::1:443\" is ambiguous: write [::1]:443 for port 443 of ::1, or [::1:443] for that address on every port"),
        "{e}"
    );
    assert!(parse_cli_rule(Action::Deny, "2001:db8::1:8080").is_err());
    // Unambiguous: brackets, or no address before the last group.
    for spec in [
        "[::1]:443",
        "[::1:443]",
        "::1",
        "2001:db8::1",
        "fe80::1",
        "2001:db8::abcd",
        "[fd00::/8]:1-1024",
    ] {
        parse_cli_rule(Action::Allow, spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
    }
}

#[test]
fn a_host_with_a_port_says_where_the_port_goes() {
    for (host, want) in [
        ("github.com:443", "\"github.com:443\": a host has no port: give \"github.com\", and the port as port = 443 (or in ports)"),
        ("*.github.com:443", "give \"*.github.com\", and the port as port = 443"),
        ("[::1]:8080", "give \"::1\", and the port as port = 8080"),
    ] {
        let e = Policy::from_rules(&[RuleConfig {
            hosts: vec![host.into()],
            ..cfg(Action::Allow)
        }])
        .unwrap_err();
        assert_eq!(e.key.as_deref(), Some("hosts[0]"), "{host}");
        assert!(e.message.contains(want), "{host}: {e}");
        assert!(!e.message.contains("IPv6"), "{host}: {e}");
    }
    // An IPv6 address is still a host.
    Policy::from_rules(&[RuleConfig {
        host: Some("::1".into()),
        ..cfg(Action::Allow)
    }])
    .unwrap();
}

#[test]
fn rule_names_are_unique() {
    let named = |n: &str, h: &str| RuleConfig {
        name: Some(n.into()),
        host: Some(h.into()),
        ..cfg(Action::Allow)
    };
    let e = Policy::from_rules(&[
        named("a", "a.test"),
        named("b", "b.test"),
        named("a", "c.test"),
    ])
    .unwrap_err();
    assert_eq!((e.rule, e.key.as_deref()), (Some(2), Some("name")));
    assert!(e.message.contains("\"a\" names an earlier rule too"), "{e}");
    // Unnamed rules are `rules[N]`: distinct.
    let unnamed = RuleConfig {
        host: Some("x.test".into()),
        ..cfg(Action::Allow)
    };
    Policy::from_rules(&[unnamed.clone(), unnamed]).unwrap();
}

#[test]
fn match_mode_and_tls_keys_are_checked() {
    let err = |r: RuleConfig| Policy::from_rules(&[r]).unwrap_err();
    let both = |r: RuleConfig| RuleConfig {
        match_mode: Some(MatchMode::Both),
        ..r
    };
    let e = err(both(RuleConfig {
        host: Some("mirror.corp".into()),
        ..cfg(Action::Allow)
    }));
    assert_eq!(e.key.as_deref(), Some("match"));
    let e = err(both(RuleConfig {
        hosts: vec!["mirror.corp".into(), "10.1.1.1".into()],
        cidr: Some("10.0.0.0/8".into()),
        ..cfg(Action::Allow)
    }));
    assert_eq!(e.key.as_deref(), Some("hosts[1]"));
    // tls = "terminate" implies inspect = "http"; only on allow rules.
    let term = RuleConfig {
        host: Some("api.test".into()),
        tls: Some(TlsMode::Terminate),
        ..cfg(Action::Allow)
    };
    let p = Policy::from_rules(std::slice::from_ref(&term)).unwrap();
    let Verdict::Allow(a) = verdict(&p, "api.test", 443, &["45.45.45.45"]) else {
        panic!()
    };
    assert!(a.is_inspected() && a.terminates_tls());
    let p = Policy::from_rules(&[RuleConfig {
        inspect: Some("http".into()),
        ..term.clone()
    }])
    .unwrap();
    assert!(p.warnings().is_empty(), "{:?}", p.warnings());
    for (r, key) in [
        (
            RuleConfig {
                action: Action::Deny,
                ..term.clone()
            },
            "tls",
        ),
        (
            RuleConfig {
                inspect: Some("tcp".into()),
                ..term.clone()
            },
            "inspect",
        ),
        (
            RuleConfig {
                tls: Some(TlsMode::Passthrough),
                requests: vec![RequestRuleConfig {
                    action: Action::Allow,
                    method: None,
                    path: None,
                }],
                ..term.clone()
            },
            "requests",
        ),
    ] {
        assert_eq!(err(r).key.as_deref(), Some(key));
    }
    // Passthrough with inspect is plaintext inspection.
    let plain = RuleConfig {
        tls: Some(TlsMode::Passthrough),
        inspect: Some("http".into()),
        ..term
    };
    let p = Policy::from_rules(&[plain]).unwrap();
    let Verdict::Allow(a) = verdict(&p, "api.test", 80, &["45.45.45.45"]) else {
        panic!()
    };
    assert!(a.is_inspected() && !a.terminates_tls());
    // TOML spellings.
    let p = Policy::parse_toml(
        "[[rules]]\naction = \"allow\"\nhost = \"a.test\"\ncidr = \"45.0.0.0/8\"\nmatch = \"both\"\n\
         [[rules]]\naction = \"allow\"\nhost = \"b.test\"\ntls = \"terminate\"\nupgrades = [\"websocket\"]\n",
    )
    .unwrap();
    assert_eq!(p.inspected_names(), ["b.test"]);
    for bad in [
        "match = \"all\"",
        "tls = \"intercept\"",
        "upgrades = \"websocket\"",
    ] {
        let text = format!("[[rules]]\naction = \"allow\"\nhost = \"x\"\n{bad}\n");
        assert!(Policy::parse_toml(&text).is_err(), "{bad}");
    }
}

#[test]
fn cli_terminate_and_builtin_default_rule() {
    let r = parse_cli_terminate("api.test:443").unwrap();
    assert_eq!(r.name.as_deref(), Some("--terminate api.test:443"));
    assert_eq!(
        (r.inspect.as_deref(), r.tls),
        (Some("http"), Some(TlsMode::Terminate))
    );
    let e = parse_cli_terminate("https://api.test")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("--terminate") && e.contains("use api.test:443"),
        "{e}"
    );
    let i = parse_cli_inspect("api.test:80").unwrap();
    assert_eq!((i.inspect.as_deref(), i.tls), (Some("http"), None));
    let d = builtin_default_rule();
    assert_eq!(d.name.as_deref(), Some("default-public-web"));
    // `default = true` in a policy document adds it.
    let p =
        Policy::parse_toml("default = true\n[[rules]]\naction = \"deny\"\nhost = \"evil.test\"\n")
            .unwrap();
    assert_eq!(
        p.rule_names(),
        vec![Arc::from("rules[0]"), Arc::from("default-public-web")]
    );
    assert!(allowed(&verdict(&p, "example.com", 443, &["45.45.45.45"])));
    assert!(!allowed(&verdict(&p, "evil.test", 443, &["45.45.45.45"])));
}

#[test]
fn describe_and_warnings() {
    let p = Policy::parse_toml(
        r#"
[[rules]]
name = "api"
action = "allow"
hosts = ["API.example.com", "*.api.example.com"]
cidrs = ["10.20.0.0/16"]
ports = [80, "8000-8100"]
match = "both"
inspect = "http"
idle_timeout = "5m"
requests = [{ action = "deny", method = "DELETE", path = "/v1/%40internal/**" }]

[[rules]]
name = "plain-inspect-everywhere"
action = "allow"
host = "web.test"
inspect = "http"

[[rules]]
name = "quiet"
action = "allow"
host = "q.test"
mode = "audit"

[[rules]]
action = "deny"
cidr = "10.0.0.0/8"
"#,
    )
    .unwrap();
    let d = p.describe();
    assert_eq!(d.len(), 4);
    assert_eq!(
        d[0],
        "rule \"api\": allow, hosts [api.example.com, *.api.example.com], cidrs [10.20.0.0/16], \
         ports [80, 8000-8100], match both, mode enforce, inspect http, tls passthrough, \
         upgrades [websocket], idle_timeout 5m\n  requests[0]: deny DELETE /v1/@internal/**"
    );
    assert!(
        d[1].ends_with("idle_timeout default\n  requests: none (every request allowed)"),
        "{}",
        d[1]
    );
    assert!(
        d[2].contains("mode audit, inspect none (raw tunnel)"),
        "{}",
        d[2]
    );
    assert_eq!(
        d[3],
        "rule \"rules[3]\": deny, hosts [], cidrs [10.0.0.0/8], ports any, match either, mode enforce"
    );
    let w = p.warnings();
    assert_eq!(w.len(), 2, "{w:?}");
    assert!(
        w[0].contains("plain-inspect-everywhere") && w[0].contains("port 443"),
        "{w:?}"
    );
    assert!(
        w[1].contains("quiet") && w[1].contains("no effect"),
        "{w:?}"
    );
    let mut p = Policy::from_rules(&[parse_cli_inspect("api.test:443").unwrap()]).unwrap();
    assert_eq!(p.warnings().len(), 1);
    p.set_audit(true);
    assert!(p.warnings()[0].contains("audit mode"));
    assert!(
        Policy::from_rules(&[parse_cli_inspect("api.test:80").unwrap()])
            .unwrap()
            .warnings()
            .is_empty()
    );
}

#[test]
fn a_range_or_a_path_in_host() {
    let e = Policy::from_rules(&[RuleConfig {
        host: Some("10.0.0.0/8".into()),
        ..cfg(Action::Allow)
    }])
    .unwrap_err();
    assert!(e.message.contains("an address range goes in cidr"), "{e}");
    let e = Policy::from_rules(&[RuleConfig {
        host: Some("github.com/rust-lang".into()),
        ..cfg(Action::Allow)
    }])
    .unwrap_err();
    assert!(
        e.message.contains("not a URL path: use \"github.com\""),
        "{e}"
    );
}
