//! `HOST:PORT@CIDR`: a name allowed into one address range (special or
//! not), which gives the range to nothing else; refusals that name the fix.

use super::*;

fn cli(action: Action, spec: &str) -> RuleConfig {
    parse_cli_rule(action, spec).unwrap()
}

fn cli_err(spec: &str) -> String {
    parse_cli_rule(Action::Allow, spec).unwrap_err().to_string()
}

#[test]
fn the_name_gains_the_address_and_nothing_else_does() {
    let p = pol(&[("allow", "pypi.org:443@203.0.113.80/32")]);
    assert!(allowed(&verdict(&p, "pypi.org", 443, &["203.0.113.80"])));
    // Another name at the same address, and the address literal: refused.
    assert!(matches!(
        verdict(&p, "npm.example", 443, &["203.0.113.80"]),
        Verdict::Deny(Denial::NoRule(_))
    ));
    assert!(matches!(
        literal(&p, "203.0.113.80", 443),
        Verdict::Deny(Denial::NoRule(_))
    ));
    // The name elsewhere (public or special) is outside its scope.
    assert!(!allowed(&verdict(&p, "pypi.org", 443, &["151.101.0.223"])));
    let v = verdict(&p, "pypi.org", 443, &["203.0.113.81"]);
    let Verdict::Deny(Denial::SpecialAddress(_, "documentation", Some(fix))) = v else {
        panic!("{v:?}")
    };
    assert_eq!(&*fix.rule, "--allow pypi.org:443@203.0.113.80/32");
    assert_eq!(fix.flag, "--allow pypi.org:443@203.0.113.81/32");
    // Another port: the rule is named, and the fix keeps the scope.
    let NameVerdict::Deny(Denial::Port(m)) = p.check_name(&t("pypi.org", 8443)) else {
        panic!()
    };
    assert_eq!(m.flag, "--allow pypi.org:8443@203.0.113.80/32");
}

#[test]
fn the_flag_builds_the_file_forms_rule() {
    let flag = cli(Action::Allow, "pypi.org:443@203.0.113.0/24");
    assert_eq!(flag.match_mode, Some(MatchMode::Both));
    assert_eq!(flag.cidrs, ["203.0.113.0/24"]);
    assert_eq!(flag.host.as_deref(), Some("pypi.org"));
    let file = Policy::parse_toml(
        "[[rules]]\naction = \"allow\"\nhosts = [\"pypi.org\"]\n\
         cidrs = [\"203.0.113.0/24\"]\nmatch = \"both\"\nports = [443]\n",
    )
    .unwrap();
    let flag = Policy::from_rules(&[flag]).unwrap();
    for (host, port, addr) in [
        ("pypi.org", 443, "203.0.113.80"),
        ("pypi.org", 443, "203.0.114.1"),
        ("pypi.org", 80, "203.0.113.80"),
        ("other.org", 443, "203.0.113.80"),
        ("203.0.113.80", 443, "203.0.113.80"),
    ] {
        let a = allowed(&verdict(&flag, host, port, &[addr]));
        let b = allowed(&verdict(&file, host, port, &[addr]));
        assert_eq!(a, b, "{host}:{port} at {addr}");
    }
}

#[test]
fn ipv6_names_and_literals() {
    let p = pol(&[("allow", "v6.test:443@[2001:db8::]/32")]);
    assert!(allowed(&verdict(&p, "v6.test", 443, &["2001:db8::5"])));
    assert!(!allowed(&verdict(&p, "w6.test", 443, &["2001:db8::5"])));
    assert!(!allowed(&literal(&p, "2001:db8::5", 443)));
    let p = pol(&[("allow", "v6.test:443@2001:db8::1")]);
    assert!(allowed(&verdict(&p, "v6.test", 443, &["2001:db8::1"])));
    assert!(!allowed(&verdict(&p, "v6.test", 443, &["2001:db8::2"])));
    // An address needs no scope: the error says what to write instead.
    let e = cli_err("[2001:db8::1]:443@2001:db8::/32");
    assert!(
        e.contains("is an address: use --allow [2001:db8::1]:443"),
        "{e}"
    );
    let e = cli_err("10.0.0.0/8:22@10.0.0.0/8");
    assert!(e.contains("is an address"), "{e}");
}

#[test]
fn ranges_that_cannot_mean_what_they_say_are_refused() {
    // Host bits set: the block or the one address.
    let e = cli_err("pypi.org:443@203.0.113.80/24");
    assert!(e.contains("use 203.0.113.0/24"), "{e}");
    // /0 names no special address: it would be `--allow pypi.org:443`.
    for zero in ["0.0.0.0/0", "::/0", "[::]/0"] {
        let e = cli_err(&format!("pypi.org:443@{zero}"));
        assert!(e.contains("scopes nothing"), "{zero}: {e}");
    }
    // Broader than a special range inside it: names nothing there either.
    let e = cli_err("pypi.org:443@203.0.0.0/16");
    assert!(e.contains("documentation range 203.0.113.0/24"), "{e}");
    // A public block is a fine scope.
    let p = pol(&[("allow", "pypi.org:443@151.101.0.0/16")]);
    assert!(allowed(&verdict(&p, "pypi.org", 443, &["151.101.0.223"])));
    assert!(!allowed(&verdict(&p, "pypi.org", 443, &["1.1.1.1"])));
    for bad in [
        "pypi.org:443@",
        "pypi.org:443@pypi.org",
        "pypi.org@203.0.113.80/32:443",
    ] {
        let e = cli_err(bad);
        assert!(e.contains("pypi.org:443@203.0.113.80/32"), "{bad}: {e}");
    }
}

#[test]
fn at_signs_in_hosts_are_refused() {
    let e = cli_err("user@pypi.org:443@203.0.113.80/32");
    assert!(e.contains("a host has no '@'"), "{e}");
    let e = cli_err("user@pypi.org:443");
    assert!(e.contains("after '@' comes the address range"), "{e}");
}

#[test]
fn wildcards_scope_their_subdomains_and_star_is_refused() {
    let p = pol(&[("allow", "*.corp.test:443@10.0.0.0/8")]);
    assert!(allowed(&verdict(&p, "git.corp.test", 443, &["10.1.2.3"])));
    assert!(!allowed(&verdict(&p, "corp.test", 443, &["10.1.2.3"])));
    assert!(!allowed(&verdict(&p, "evil.test", 443, &["10.1.2.3"])));
    assert!(!allowed(&literal(&p, "10.1.2.3", 443)));
    let e = cli_err("*:443@10.0.0.0/8");
    assert!(e.contains("'*' is every name"), "{e}");
}

#[test]
fn a_scoped_deny_refuses_the_name_only_inside_the_range() {
    let p = pol(&[("allow", "*"), ("deny", "pypi.org:443@151.101.0.0/16")]);
    // Not on the name alone: the address decides.
    assert_eq!(p.check_name(&t("pypi.org", 443)), NameVerdict::Resolve);
    assert_eq!(
        verdict(&p, "pypi.org", 443, &["151.101.0.1"]),
        Verdict::Deny(Denial::Rule("--deny pypi.org:443@151.101.0.0/16".into()))
    );
    assert!(allowed(&verdict(&p, "pypi.org", 443, &["1.1.1.1"])));
    assert!(allowed(&verdict(&p, "other.org", 443, &["151.101.0.1"])));
}

#[test]
fn a_special_refusal_names_the_flag_of_the_matching_rule() {
    for (flag, action) in [
        (
            "--allow",
            parse_cli_rule(Action::Allow, "pypi.org:443").unwrap(),
        ),
        ("--inspect", parse_cli_inspect("pypi.org:443").unwrap()),
        ("--terminate", parse_cli_terminate("pypi.org:443").unwrap()),
    ] {
        let p = Policy::from_rules(&[action]).unwrap();
        let Verdict::Deny(d) = verdict(&p, "pypi.org", 443, &["203.0.113.80"]) else {
            panic!()
        };
        let want = format!("{flag} pypi.org:443@203.0.113.80/32");
        assert!(d.to_string().contains(&want), "{d}");
        assert!(d.to_string().contains("match = \"both\""), "{d}");
        assert_eq!(
            d.rule().map(|r| &**r),
            Some(&*format!("{flag} pypi.org:443"))
        );
    }
    // A literal the rule's CIDR is too wide to name: the one address.
    let p = pol(&[("allow", "0.0.0.0/0")]);
    let Verdict::Deny(d) = literal(&p, "10.0.0.1", 22) else {
        panic!()
    };
    assert!(d.to_string().contains("use --allow 10.0.0.1:22"), "{d}");
}

#[test]
fn audit_carries_every_reason() {
    let mut p = pol(&[("allow", "*"), ("deny", "x.test")]);
    p.set_audit(true);
    let Verdict::Allow(a) = verdict(&p, "x.test", 443, &["127.0.0.1", "1.1.1.1"]) else {
        panic!()
    };
    let texts: Vec<String> = a.audit_reasons.iter().map(ToString::to_string).collect();
    assert_eq!(texts.len(), 2, "{texts:?}");
    assert_eq!(texts[0], "denied by rule --deny x.test");
    assert!(
        texts[1].starts_with("127.0.0.1 is a loopback address"),
        "{texts:?}"
    );
    assert_eq!(a.audit.as_ref(), a.audit_reasons.first());
}

#[test]
fn a_rules_reason_reaches_the_denial() {
    let p = Policy::parse_toml(
        "[[rules]]\naction = \"deny\"\nhost = \"github.com\"\nport = 22\n\
         reason = \"SSH pushes are blocked; use an https remote\"\n\
         [[rules]]\naction = \"allow\"\nhost = \"*\"\n",
    )
    .unwrap();
    let NameVerdict::Deny(d) = p.check_name(&t("github.com", 22)) else {
        panic!()
    };
    assert_eq!(
        d.to_string(),
        "denied by rule rules[0]: SSH pushes are blocked; use an https remote"
    );
    let e = Policy::parse_toml("[[rules]]\naction = \"deny\"\nhost = \"a.test\"\nreason = \" \"\n")
        .unwrap_err();
    assert!(e.to_string().contains("reason: is empty"), "{e}");
}

/// No spelling of the scoped address reaches it without the name: decimal,
/// hex, octal and short IPv4 forms, IPv4-mapped, NAT64 and 6to4 literals;
/// nor does another name resolving to a translated form of it.
#[test]
fn no_spelling_of_the_scoped_address_gains_it() {
    let p = pol(&[
        ("allow", "pypi.org:443@203.0.113.80/32"),
        ("allow", "*:443"),
    ]);
    for lit in [
        "203.0.113.80",
        "3405803856",
        "0xcb007150",
        "0313.0.0161.0120",
        "203.0.29008",
        "203.0.113.80.",
        "[::ffff:203.0.113.80]",
        "[::ffff:cb00:7150]",
        "[64:ff9b::cb00:7150]",
        "[2002:cb00:7150::1]",
        "[::203.0.113.80]",
    ] {
        assert!(!allowed(&literal(&p, lit, 443)), "{lit}");
    }
    for addr in [
        "203.0.113.80",
        "::ffff:203.0.113.80",
        "64:ff9b::cb00:7150",
        "2002:cb00:7150::1",
    ] {
        assert!(
            !allowed(&verdict(&p, "npm.example", 443, &[addr])),
            "{addr}"
        );
        assert!(
            !allowed(&verdict(&p, "PyPI.org.evil", 443, &[addr])),
            "{addr}"
        );
    }
    // The name itself, in any case and with a trailing dot, is the name.
    assert!(allowed(&verdict(
        &p,
        "PYPI.ORG.",
        443,
        &["::ffff:203.0.113.80"]
    )));
}
