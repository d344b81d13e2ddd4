//! Rules that name users: only those users match them; anyone else falls
//! through to the other rules (or to deny by default, told why).

use std::time::Instant;

use super::*;

fn for_users(spec: &str, users: &[&str]) -> RuleConfig {
    let mut r = parse_cli_rule(Action::Allow, spec).unwrap();
    r.users = Some(users.iter().map(|u| u.to_string()).collect());
    r
}

fn as_user(p: &Policy, user: Option<&str>, host: &str, port: u16, addrs: &[&str]) -> Verdict {
    let addrs: Vec<IpAddr> = addrs.iter().map(|a| ip(a)).collect();
    p.check_resolved_as(&t(host, port), user, &addrs, Instant::now())
}

#[test]
fn only_named_users_match_the_rule() {
    let p = Policy::from_rules(&[for_users("api.test:443", &["alice", "carol"])]).unwrap();
    let addrs = ["45.45.45.45"];
    for user in ["alice", "carol"] {
        let v = as_user(&p, Some(user), "api.test", 443, &addrs);
        assert!(allowed(&v), "{user}: {v:?}");
        assert_eq!(
            p.check_name_as(&t("api.test", 443), Some(user)),
            NameVerdict::Resolve
        );
    }
    let bob = Denial::User {
        user: Some("bob".into()),
        rule: "--allow api.test:443".into(),
    };
    assert_eq!(
        as_user(&p, Some("bob"), "api.test", 443, &addrs),
        Verdict::Deny(bob.clone())
    );
    // Refused before DNS too: no allow rule is for bob.
    assert_eq!(
        p.check_name_as(&t("api.test", 443), Some("bob")),
        NameVerdict::Deny(bob.clone())
    );
    assert_eq!(
        bob.to_string(),
        "user \"bob\" not in rule \"--allow api.test:443\": add it to that rule's users"
    );
    // Anonymous: never matches a rule that names users.
    let anon = as_user(&p, None, "api.test", 443, &addrs);
    let Verdict::Deny(d @ Denial::User { user: None, .. }) = &anon else {
        panic!("{anon:?}")
    };
    assert!(d
        .to_string()
        .contains("names users and the client gave none"));
    // Elsewhere, no rule at all: the plain denial.
    assert!(matches!(
        as_user(&p, Some("bob"), "other.test", 443, &addrs),
        Verdict::Deny(Denial::NoRule(_))
    ));
}

#[test]
fn others_fall_through_to_later_rules() {
    let p = Policy::from_rules(&[
        for_users("api.test:443", &["alice"]),
        parse_cli_rule(Action::Allow, "*.test:443").unwrap(),
    ])
    .unwrap();
    let Verdict::Allow(a) = as_user(&p, Some("alice"), "api.test", 443, &["45.45.45.45"]) else {
        panic!()
    };
    assert_eq!(&*a.rule, "--allow api.test:443");
    let Verdict::Allow(b) = as_user(&p, Some("bob"), "api.test", 443, &["45.45.45.45"]) else {
        panic!()
    };
    assert_eq!(&*b.rule, "--allow *.test:443");
}

#[test]
fn a_rule_without_users_matches_anyone() {
    let p = Policy::from_rules(&[parse_cli_rule(Action::Allow, "api.test:443").unwrap()]).unwrap();
    for user in [None, Some("alice"), Some("bob")] {
        assert!(allowed(&as_user(
            &p,
            user,
            "api.test",
            443,
            &["45.45.45.45"]
        )));
    }
    assert!(p.rule_users().is_empty());
}

#[test]
fn deny_rules_with_users_deny_only_them() {
    let mut deny = parse_cli_rule(Action::Deny, "api.test").unwrap();
    deny.users = Some(vec!["bob".into()]);
    let p =
        Policy::from_rules(&[parse_cli_rule(Action::Allow, "*.test:443").unwrap(), deny]).unwrap();
    assert!(allowed(&as_user(
        &p,
        Some("alice"),
        "api.test",
        443,
        &["45.45.45.45"]
    )));
    assert_eq!(
        as_user(&p, Some("bob"), "api.test", 443, &["45.45.45.45"]),
        Verdict::Deny(Denial::Rule("--deny api.test".into()))
    );
    assert_eq!(
        p.check_name_as(&t("api.test", 443), Some("bob")),
        NameVerdict::Deny(Denial::Rule("--deny api.test".into()))
    );
}

#[test]
fn inspection_follows_the_rules_that_match_the_user() {
    let mut inspect = parse_cli_inspect("api.test:80").unwrap();
    inspect.users = Some(vec!["alice".into()]);
    let p = Policy::from_rules(&[inspect, parse_cli_rule(Action::Allow, "*.test:80").unwrap()])
        .unwrap();
    let Verdict::Allow(a) = as_user(&p, Some("alice"), "api.test", 80, &["45.45.45.45"]) else {
        panic!()
    };
    assert!(a.is_inspected());
    let Verdict::Allow(b) = as_user(&p, Some("bob"), "api.test", 80, &["45.45.45.45"]) else {
        panic!()
    };
    assert!(!b.is_inspected(), "alice's rule is not bob's");
}

#[test]
fn audit_mode_lets_a_user_through_with_the_reason() {
    let mut p = Policy::from_rules(&[for_users("api.test:443", &["alice"])]).unwrap();
    p.set_audit(true);
    let Verdict::Allow(a) = as_user(&p, Some("bob"), "api.test", 443, &["45.45.45.45"]) else {
        panic!()
    };
    assert_eq!(
        a.audit,
        Some(Denial::User {
            user: Some("bob".into()),
            rule: "--allow api.test:443".into()
        })
    );
}

#[test]
fn recheck_uses_the_sessions_user() {
    let p = Policy::from_rules(&[for_users("api.test:443", &["alice"])]).unwrap();
    let now = Instant::now();
    let target = t("api.test", 443);
    assert!(matches!(
        p.recheck_as(&target, Some("alice"), ip("45.45.45.45"), true, now),
        Recheck::Keep(_)
    ));
    assert!(matches!(
        p.recheck_as(&target, Some("bob"), ip("45.45.45.45"), true, now),
        Recheck::Deny(Denial::User { .. })
    ));
}

#[test]
fn users_are_checked_described_and_built() {
    let e = Policy::from_rules(&[for_users("a.test", &[])]).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("users"));
    let e = Policy::from_rules(&[for_users("a.test", &["ok", "a:b"])]).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("users[1]"));
    let r = RuleConfig::allow("a.test")
        .name("x")
        .user("alice")
        .user("bob")
        .build();
    let p = Policy::from_rules(&[r]).unwrap();
    assert!(
        p.describe()[0].contains(", users [alice, bob]"),
        "{}",
        p.describe()[0]
    );
    let users = p.rule_users();
    assert_eq!(users.len(), 1);
    assert_eq!((users[0].0, &*users[0].1), (0, "x"));
    // Parsed from a file, too.
    let p = Policy::parse_toml(
        "[[rules]]\naction = \"allow\"\nhost = \"a.test\"\nusers = [\"alice\"]\n",
    )
    .unwrap();
    assert_eq!(
        p.rule_users()[0].2,
        vec![std::sync::Arc::<str>::from("alice")]
    );
}
