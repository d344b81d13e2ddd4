//! Name checks and resolved-address checks (DNS rebinding).

use super::*;

#[test]
fn rebinding_is_refused() {
    let p = pol(&[("allow", "*.example.com")]);
    assert_eq!(
        p.check_name(&t("www.example.com", 443)),
        NameVerdict::Resolve
    );
    assert_eq!(
        unfixed(verdict(&p, "www.example.com", 443, &["127.0.0.1"])),
        Verdict::Deny(Denial::SpecialAddress(ip("127.0.0.1"), "loopback", None))
    );
    assert_eq!(
        verdict(&p, "www.example.com", 443, &["93.184.216.34", "127.0.0.1"]),
        Verdict::Allow(Allowed {
            rule: "--allow *.example.com".into(),
            idle_timeout: None,
            addrs: vec![ip("93.184.216.34")],
            inspect: None,
            audit: None,
            audit_reasons: Vec::new(),
            route: None,
        })
    );
    // Order kept, specials dropped, mapped reduced.
    let Verdict::Allow(a) = verdict(
        &p,
        "www.example.com",
        443,
        &["10.0.0.1", "2606:2800::1", "::1", "::ffff:93.184.216.34"],
    ) else {
        panic!()
    };
    assert_eq!(a.addrs, vec![ip("2606:2800::1"), ip("93.184.216.34")]);
}

#[test]
fn empty_addresses_deny() {
    let p = pol(&[("allow", "*")]);
    assert!(matches!(
        verdict(&p, "example.com", 443, &[]),
        Verdict::Deny(Denial::NoRule(_))
    ));
}

#[test]
fn first_denial_prefers_rules() {
    let p = pol(&[("allow", "*"), ("deny", "93.184.216.0/24")]);
    assert_eq!(
        verdict(&p, "x.test", 443, &["127.0.0.1", "93.184.216.34"]),
        Verdict::Deny(Denial::Rule("--deny 93.184.216.0/24".into()))
    );
    assert_eq!(
        unfixed(verdict(&p, "x.test", 443, &["127.0.0.1", "10.0.0.1"])),
        Verdict::Deny(Denial::SpecialAddress(ip("127.0.0.1"), "loopback", None))
    );
    let p = pol(&[("allow", "a.test")]);
    assert!(matches!(
        verdict(&p, "b.test", 443, &["1.1.1.1"]),
        Verdict::Deny(Denial::NoRule(_))
    ));
}

#[test]
fn rule_reported_is_the_one_that_vetted_the_first_address() {
    let p = pol(&[("allow", "*.example.com:443"), ("allow", "10.0.0.0/8")]);
    let Verdict::Allow(a) = verdict(&p, "db.example.com", 443, &["10.1.1.1", "1.1.1.1"]) else {
        panic!()
    };
    assert_eq!(a.rule.as_ref(), "--allow 10.0.0.0/8");
    assert_eq!(a.addrs, vec![ip("10.1.1.1"), ip("1.1.1.1")]);
}

#[test]
fn special_needs_a_naming_allow_among_matching_rules() {
    // The naming rule's port does not match: the address stays refused.
    let p = pol(&[("allow", "*"), ("allow", "10.0.0.0/8:22")]);
    assert_eq!(
        unfixed(verdict(&p, "lan.test", 443, &["10.0.0.1"])),
        Verdict::Deny(Denial::SpecialAddress(ip("10.0.0.1"), "private", None))
    );
    // As a literal, `*` does not even match: only the rule for port 22 does.
    let Verdict::Deny(Denial::Port(miss)) = literal(&p, "10.0.0.1", 443) else {
        panic!("the CIDR rule for another port is named")
    };
    assert_eq!(
        (&*miss.rule, &*miss.flag),
        ("--allow 10.0.0.0/8:22", "--allow 10.0.0.1:443")
    );
    assert!(matches!(
        literal(&p, "192.168.0.1", 443),
        Verdict::Deny(Denial::NoRule(_))
    ));
    assert!(allowed(&literal(&p, "10.0.0.1", 22)));
    // A deny naming it still wins.
    let p = pol(&[("allow", "10.0.0.0/8"), ("deny", "10.0.0.1")]);
    assert_eq!(
        literal(&p, "10.0.0.1", 22),
        Verdict::Deny(Denial::Rule("--deny 10.0.0.1".into()))
    );
    assert!(allowed(&literal(&p, "10.0.0.2", 22)));
    // A host-name rule alone does not name an address.
    let p = pol(&[("allow", "localhost")]);
    assert_eq!(
        unfixed(verdict(&p, "localhost", 80, &["127.0.0.1"])),
        Verdict::Deny(Denial::SpecialAddress(ip("127.0.0.1"), "loopback", None))
    );
    let p = pol(&[("allow", "localhost"), ("allow", "127.0.0.1")]);
    assert!(allowed(&verdict(&p, "localhost", 80, &["127.0.0.1"])));
}

#[test]
fn check_name_cases() {
    let p = pol(&[
        ("deny", "*.ads.test"),
        ("allow", "*.test:443"),
        ("allow", "10.0.0.0/8:22"),
    ]);
    assert_eq!(
        p.check_name(&t("x.ads.test", 443)),
        NameVerdict::Deny(Denial::Rule("--deny *.ads.test".into()))
    );
    assert_eq!(p.check_name(&t("x.test", 443)), NameVerdict::Resolve);
    // A rule for the host on other ports: named, with its ports and the fix.
    let NameVerdict::Deny(Denial::Port(miss)) = p.check_name(&t("x.test", 80)) else {
        panic!("a wrong port names the rule")
    };
    assert_eq!(
        (&*miss.rule, &*miss.ports, &*miss.flag),
        ("--allow *.test:443", "443", "--allow x.test:80")
    );
    assert!(matches!(
        p.check_name(&t("x.other", 80)),
        NameVerdict::Deny(Denial::NoRule(_))
    ));
    // Only a CIDR rule could match: resolve and judge the addresses.
    assert_eq!(p.check_name(&t("git.corp", 22)), NameVerdict::Resolve);
    // Address literals are judged after, with the literal.
    assert_eq!(p.check_name(&t("1.2.3.4", 80)), NameVerdict::Resolve);
    // A CIDR deny cannot refuse a name before DNS.
    let p = pol(&[("allow", "*"), ("deny", "1.0.0.0/8")]);
    assert_eq!(p.check_name(&t("x.test", 80)), NameVerdict::Resolve);
    assert_eq!(
        verdict(&p, "x.test", 80, &["1.1.1.1"]),
        Verdict::Deny(Denial::Rule("--deny 1.0.0.0/8".into()))
    );
}
