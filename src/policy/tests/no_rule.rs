//! A destination no rule matches: the refusal names the allow rule that
//! would let it through, as a flag and as a policy file's keys, and each
//! of those, added, does.

use super::*;

/// The fix a refusal of `target` (checked by name, then at `addrs`, as
/// the session does) names; both checks must name the same one.
fn fix_for(p: &Policy, host: &str, port: u16, addrs: &[&str]) -> Arc<AllowFix> {
    let target = t(host, port);
    let by_address = match verdict(p, host, port, addrs) {
        Verdict::Deny(Denial::NoRule(fix)) => fix,
        other => panic!("{host}:{port} at {addrs:?}: {other:?}"),
    };
    if let Host::Domain(_) = target.host {
        match p.check_name(&target) {
            NameVerdict::Deny(Denial::NoRule(fix)) => assert_eq!(fix, by_address),
            other => panic!("{host}:{port} by name: {other:?}"),
        }
    }
    by_address
}

/// `p` with one more rule, written as `fix` says, in either form.
fn with_fix(specs: &[(&str, &str)], fix: &AllowFix, file_form: bool) -> Policy {
    if file_form {
        // The keys are a rule's, comma-separated as an inline table's.
        let mut text = format!("rules_fix = {{ {} }}\n", fix.file);
        for (action, spec) in specs {
            text.push_str(&format!("[[rules]]\naction = {action:?}\n"));
            match spec.split_once(':') {
                Some((host, port)) => text.push_str(&format!("host = {host:?}\nport = {port}\n")),
                None => text.push_str(&format!("host = {spec:?}\n")),
            }
        }
        let table: toml::Table = text.parse().unwrap();
        let mut rules: Vec<toml::Value> = table
            .get("rules")
            .and_then(|r| r.as_array().cloned())
            .unwrap_or_default();
        let mut added = table["rules_fix"].as_table().unwrap().clone();
        added.insert("action".into(), "allow".into());
        rules.push(toml::Value::Table(added));
        let mut doc = toml::Table::new();
        doc.insert("rules".into(), toml::Value::Array(rules));
        return Policy::parse_toml(&doc.to_string()).unwrap();
    }
    let spec = (fix
        .flag
        .strip_prefix("--allow ")
        .or(fix.flag.strip_prefix("--allow=")))
    .expect(&fix.flag);
    let mut all = specs.to_vec();
    all.push(("allow", spec));
    pol(&all)
}

#[test]
fn the_fix_names_the_destination_and_lets_it_through() {
    let specs = [("allow", "pypi.org:443"), ("deny", "evil.test")];
    let p = pol(&specs);
    // (host, port, its addresses, the flag, the file keys)
    let cases: &[(&str, u16, &[&str], &str, &str)] = &[
        (
            "files.example",
            443,
            &["93.184.216.34"],
            "--allow files.example:443",
            r#"hosts = ["files.example"], ports = [443]"#,
        ),
        // A name on a special address: allowing the name is the first
        // step; the refusal after DNS names the second.
        (
            "Mirror.Corp.",
            8080,
            &["10.1.2.3"],
            "--allow mirror.corp:8080",
            r#"hosts = ["mirror.corp"], ports = [8080]"#,
        ),
        (
            "198.51.100.7",
            22,
            &["198.51.100.7"],
            "--allow 198.51.100.7:22",
            r#"cidrs = ["198.51.100.7/32"], ports = [22]"#,
        ),
        (
            "127.0.0.2",
            9000,
            &["127.0.0.2"],
            "--allow 127.0.0.2:9000",
            r#"cidrs = ["127.0.0.2/32"], ports = [9000]"#,
        ),
        (
            "2001:db8::5",
            443,
            &["2001:db8::5"],
            "--allow [2001:db8::5]:443",
            r#"cidrs = ["2001:db8::5/128"], ports = [443]"#,
        ),
        // A value beginning with `-` is joined to its flag by `=`, or the
        // command line would take it for a flag.
        (
            "-dash.example",
            443,
            &["93.184.216.34"],
            "--allow=-dash.example:443",
            r#"hosts = ["-dash.example"], ports = [443]"#,
        ),
        // A mapped spelling is the IPv4 address it carries.
        (
            "::ffff:10.0.0.9",
            80,
            &["::ffff:10.0.0.9"],
            "--allow 10.0.0.9:80",
            r#"cidrs = ["10.0.0.9/32"], ports = [80]"#,
        ),
    ];
    for &(host, port, addrs, flag, file) in cases {
        let fix = fix_for(&p, host, port, addrs);
        assert_eq!((&*fix.flag, &*fix.file), (flag, file), "{host}:{port}");
        for file_form in [false, true] {
            let fixed = with_fix(&specs, &fix, file_form);
            let v = verdict(&fixed, host, port, addrs);
            match (host, v) {
                (_, Verdict::Allow(_)) => {}
                // The name is allowed now; its private address is the next
                // refusal, and it names its own fix.
                ("Mirror.Corp.", Verdict::Deny(Denial::SpecialAddress(_, "private", Some(f)))) => {
                    assert_eq!(f.flag, "--allow mirror.corp:8080@10.1.2.3/32")
                }
                (_, other) => panic!("{host}:{port} with {fix:?} (file: {file_form}): {other:?}"),
            }
        }
    }
}

#[test]
fn the_refusal_says_the_fix() {
    let p = pol(&[("allow", "pypi.org:443")]);
    let Verdict::Deny(d) = verdict(&p, "files.example", 443, &["93.184.216.34"]) else {
        panic!()
    };
    assert_eq!(
        d.to_string(),
        "no rule allows this destination: use --allow files.example:443 \
         (in a policy file: hosts = [\"files.example\"], ports = [443])"
    );
    assert_eq!(d.rule(), None, "no rule refused it");
    // A deny-by-default with nothing resolved names the same fix.
    assert!(matches!(
        verdict(&p, "files.example", 443, &[]),
        Verdict::Deny(Denial::NoRule(f)) if f.flag == "--allow files.example:443"
    ));
}

/// The built-in default alone: a rule flag (or a policy file) replaces it,
/// so each fix keeps it, and the fix, followed, lets the destination
/// through while the built-in rule still lets the rest through.
#[test]
fn a_fix_under_the_builtin_default_keeps_it() {
    let p = Policy::builtin_default();
    let fix = fix_for(&p, "10.1.2.3", 22, &["10.1.2.3"]);
    assert_eq!(fix.flag, "--default --allow 10.1.2.3:22");
    assert_eq!(
        fix.file,
        r#"cidrs = ["10.1.2.3/32"], ports = [22]; and default = true"#
    );
    let NameVerdict::Deny(Denial::Port(miss)) = p.check_name(&t("pypi.org", 8080)) else {
        panic!("a wrong port names the rule")
    };
    assert_eq!(miss.flag, "--default --allow pypi.org:8080");
    assert_eq!(
        Denial::Port(miss).to_string(),
        "port 8080 is not among the ports of the built-in rule \"default-public-web\" (80, 443), \
         which matches pypi.org: use --default --allow pypi.org:8080 (a rule flag alone \
         replaces the built-in rule; --default keeps it)"
    );
    let Verdict::Deny(Denial::SpecialAddress(_, _, Some(special))) =
        verdict(&p, "mirror.test", 443, &["10.1.2.3"])
    else {
        panic!("a special address names its fix")
    };
    assert_eq!(
        special.flag,
        "--default --allow mirror.test:443@10.1.2.3/32"
    );
    // Followed (as the command line composes it: the flags' rules, then
    // the built-in one), both the new destination and the rest pass.
    let mut followed = pol(&[("allow", "pypi.org:8080")]);
    followed.extend(Policy::builtin_default());
    assert!(allowed(&verdict(
        &followed,
        "pypi.org",
        8080,
        &["151.101.0.223"]
    )));
    assert!(allowed(&verdict(
        &followed,
        "example.com",
        443,
        &["93.184.216.34"]
    )));
    // A policy of its own (flags, a file) is told the plain fix.
    let own = pol(&[("allow", "example.com:443")]);
    assert_eq!(
        fix_for(&own, "10.1.2.3", 22, &["10.1.2.3"]).flag,
        "--allow 10.1.2.3:22"
    );
    let mut with_default = own.clone();
    with_default.extend(Policy::builtin_default());
    assert_eq!(
        fix_for(&with_default, "10.1.2.3", 22, &["10.1.2.3"]).flag,
        "--allow 10.1.2.3:22",
        "--default given already"
    );
}
