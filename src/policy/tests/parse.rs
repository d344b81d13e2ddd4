//! Compiling rules: CLI specs, `from_rules` errors and TOML documents.

use super::*;

fn compile_err(r: RuleConfig) -> String {
    let first = RuleConfig {
        host: Some("ok.test".into()),
        ..cfg(Action::Allow)
    };
    Policy::from_rules(&[first, r]).unwrap_err().0
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
