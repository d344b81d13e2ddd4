//! What a name inside a raw tunnel's first flight gets (`Policy::fronting`)
//! and which ports are vetted at all (`Policy::vets_port`).

use std::time::Instant;

use super::*;

fn policy() -> Policy {
    let mut rules = vec![
        parse_cli_terminate("good.test:443").unwrap(),
        parse_cli_inspect("plain.test:80").unwrap(),
        parse_cli_rule(Action::Deny, "evil.test:443").unwrap(),
        parse_cli_rule(Action::Allow, "other.test:443").unwrap(),
        parse_cli_rule(Action::Allow, "45.45.45.0/24:443").unwrap(),
    ];
    let mut only_alice = parse_cli_rule(Action::Allow, "alice.test:443").unwrap();
    only_alice.users = Some(vec!["alice".into()]);
    rules.push(only_alice);
    Policy::from_rules(&rules).unwrap()
}

fn named(p: &Policy, user: Option<&str>, name: &str, port: u16) -> Option<Fronting> {
    p.fronting(&t("other.test", port), user, &t(name, port), Instant::now())
}

#[test]
fn stricter_names_are_found() {
    let p = policy();
    let inspected = |rule: &str, terminates| {
        Some(Fronting::Inspected {
            rule: rule.into(),
            terminates,
        })
    };
    assert_eq!(
        named(&p, None, "good.test", 443),
        inspected("--terminate good.test:443", true)
    );
    // Any spelling of the name.
    assert_eq!(
        named(&p, None, "GOOD.test.", 443),
        inspected("--terminate good.test:443", true)
    );
    assert_eq!(
        named(&p, None, "plain.test", 80),
        inspected("--inspect plain.test:80", false)
    );
    assert!(matches!(
        named(&p, None, "evil.test", 443),
        Some(Fronting::Denied(Denial::Rule(_)))
    ));
    // Named by a rule for other users only: refused for this one (with
    // no CIDR rule that could still allow the name's addresses).
    let mut users = policy();
    users.remove_rule("--allow 45.45.45.0/24:443");
    assert!(matches!(
        named(&users, Some("bob"), "alice.test", 443),
        Some(Fronting::Denied(Denial::User { .. }))
    ));
    assert_eq!(named(&p, Some("alice"), "alice.test", 443), None);
}

#[test]
fn the_same_host_raw_names_and_unknown_names_are_not_stricter() {
    let p = policy();
    assert_eq!(named(&p, None, "other.test", 443), None);
    assert_eq!(named(&p, None, "OTHER.TEST", 443), None);
    // No rule names it: deny by default is not a rule's treatment of it.
    assert_eq!(named(&p, None, "nobody.test", 443), None);
    // The inspecting rule covers another port only.
    assert_eq!(named(&p, None, "good.test", 8443), None);
    // An address literal allowed raw by a CIDR.
    assert_eq!(named(&p, None, "45.45.45.9", 443), None);
}

#[test]
fn only_ports_an_inspecting_rule_covers_are_vetted() {
    let p = policy();
    assert!(p.vets_port(443));
    assert!(p.vets_port(80));
    assert!(!p.vets_port(8443));
    assert!(!pol(&[("allow", "*:443"), ("deny", "evil.test:443")]).vets_port(443));
}
