//! Special addresses: refused by default, unlocked only by a rule naming them.

use super::*;

/// (address, range name, a CIDR that names it, a CIDR too wide to name it)
const CASES: &[(&str, &str, &str, &str)] = &[
    ("10.1.2.3", "private", "10.1.0.0/16", "0.0.0.0/4"),
    ("172.16.5.5", "private", "172.16.0.0/12", "172.0.0.0/8"),
    (
        "172.31.255.255",
        "private",
        "172.31.255.255/32",
        "172.0.0.0/8",
    ),
    ("192.168.1.1", "private", "192.168.0.0/16", "192.0.0.0/8"),
    ("127.0.0.1", "loopback", "127.0.0.0/8", "0.0.0.0/0"),
    ("127.255.0.9", "loopback", "127.255.0.9/32", "64.0.0.0/2"),
    (
        "169.254.169.254",
        "link-local",
        "169.254.169.254/32",
        "169.0.0.0/8",
    ),
    ("100.64.0.1", "cgnat", "100.64.0.0/10", "100.0.0.0/8"),
    ("100.127.255.254", "cgnat", "100.96.0.0/11", "100.0.0.0/9"),
    ("224.0.0.251", "multicast", "224.0.0.0/4", "192.0.0.0/2"),
    ("239.255.255.250", "multicast", "239.0.0.0/8", "0.0.0.0/0"),
    ("0.0.0.0", "unspecified", "0.0.0.0/8", "0.0.0.0/0"),
    ("0.1.2.3", "unspecified", "0.1.2.3/32", "0.0.0.0/7"),
    (
        "255.255.255.255",
        "broadcast",
        "255.255.255.255/32",
        "255.255.255.0/24",
    ),
    ("240.0.0.1", "reserved", "240.0.0.0/4", "0.0.0.0/0"),
    ("192.0.2.1", "documentation", "192.0.2.0/24", "192.0.0.0/16"),
    (
        "198.51.100.7",
        "documentation",
        "198.51.100.0/24",
        "198.0.0.0/8",
    ),
    (
        "203.0.113.9",
        "documentation",
        "203.0.113.0/24",
        "203.0.0.0/16",
    ),
    ("198.18.0.1", "benchmark", "198.18.0.0/15", "198.0.0.0/8"),
    ("192.0.0.9", "reserved", "192.0.0.0/24", "192.0.0.0/16"),
    ("::1", "loopback", "::1/128", "::/0"),
    ("::", "unspecified", "::/128", "::/0"),
    ("fd00::1", "private", "fd00::/8", "fc00::/6"),
    ("fc00::1", "private", "fc00::/7", "::/0"),
    ("fe80::1", "link-local", "fe80::/10", "fe00::/8"),
    ("fec0::1", "private", "fec0::/10", "fe00::/8"),
    ("ff02::1", "multicast", "ff00::/8", "f000::/4"),
    ("2001:db8::1", "documentation", "2001:db8::/32", "2001::/16"),
    ("100::1", "discard", "100::/64", "::/0"),
    // IPv4-compatible forms take the IPv4 range's name.
    ("::127.0.0.1", "loopback", "::127.0.0.0/104", "::/96"),
    ("::10.0.0.1", "private", "::10.0.0.0/104", "::/64"),
    (
        "::169.254.169.254",
        "link-local",
        "::169.254.169.254/128",
        "::/96",
    ),
    ("::8.8.8.8", "reserved", "::/96", "::/64"),
    // NAT64 and 6to4 embeddings of special IPv4 addresses.
    (
        "64:ff9b::7f00:1",
        "loopback",
        "64:ff9b::7f00:0/104",
        "64:ff9b::/96",
    ),
    (
        "64:ff9b::a9fe:a9fe",
        "link-local",
        "64:ff9b::a9fe:0/112",
        "64:ff9b::/96",
    ),
    ("2002:7f00:1::1", "loopback", "2002:7f00::/24", "2002::/16"),
    ("2002:c0a8:101::", "private", "2002:c0a8::/32", "2002::/16"),
];

#[test]
fn refused_by_default_and_by_wide_rules() {
    let wide = pol(&[("allow", "*"), ("allow", "0.0.0.0/0"), ("allow", "::/0")]);
    for &(addr, range, _, too_wide) in CASES {
        let want = Verdict::Deny(Denial::SpecialAddress(ip(addr), range, None));
        assert_eq!(unfixed(literal(&wide, addr, 443)), want, "{addr} with *");
        assert_eq!(
            unfixed(verdict(&wide, "public.test", 443, &[addr])),
            want,
            "{addr} by name"
        );
        let p = pol(&[("allow", too_wide)]);
        assert_eq!(
            unfixed(literal(&p, addr, 443)),
            want,
            "{addr} with {too_wide}"
        );
        assert_eq!(
            unfixed(verdict(
                &Policy::builtin_default(),
                "public.test",
                443,
                &[addr]
            )),
            want,
            "{addr} with builtin"
        );
    }
}

#[test]
fn unlocked_by_a_rule_naming_it() {
    for &(addr, _, names, _) in CASES {
        let p = pol(&[("allow", names)]);
        let v = literal(&p, addr, 443);
        assert!(allowed(&v), "{addr} with {names}: {v:?}");
        // ... and by the address itself as a host pattern, brackets or not
        // (brackets where a port could be read into it: `64:ff9b::7f00:1`).
        let bare = parse_cli_rule(Action::Allow, addr);
        let spec = match bare {
            Ok(_) => addr.to_owned(),
            Err(e) if e.message.contains("ambiguous") => format!("[{addr}]"),
            Err(e) => panic!("{addr}: {e}"),
        };
        let p = pol(&[("allow", &spec)]);
        assert!(allowed(&literal(&p, addr, 443)), "{spec} as host");
    }
    let p = pol(&[("allow", "[::1]:9000")]);
    assert!(allowed(&literal(&p, "::1", 9000)));
    // A naming rule still needs its port to match.
    let p = pol(&[("allow", "127.0.0.1:8080")]);
    assert!(matches!(
        literal(&p, "127.0.0.1", 8081),
        Verdict::Deny(Denial::Port(m)) if m.flag == "--allow 127.0.0.1:8081"
    ));
}

#[test]
fn mapped_forms_are_judged_as_ipv4() {
    let p = pol(&[("allow", "*"), ("allow", "0.0.0.0/0"), ("allow", "::/0")]);
    let loopback = Verdict::Deny(Denial::SpecialAddress(ip("127.0.0.1"), "loopback", None));
    assert_eq!(unfixed(literal(&p, "::ffff:127.0.0.1", 80)), loopback);
    assert_eq!(
        unfixed(verdict(&p, "x.test", 80, &["::ffff:127.0.0.1"])),
        loopback
    );
    assert_eq!(
        unfixed(verdict(&p, "x.test", 80, &["::ffff:169.254.169.254"])),
        Verdict::Deny(Denial::SpecialAddress(
            ip("169.254.169.254"),
            "link-local",
            None
        ))
    );
    // A v4 rule names the mapped form; allowed addresses come back as IPv4.
    let p = pol(&[("allow", "127.0.0.1")]);
    let Verdict::Allow(a) = verdict(&p, "x.test", 80, &["::ffff:127.0.0.1"]) else {
        panic!()
    };
    assert_eq!(a.addrs, vec![ip("127.0.0.1")]);
    // So does a mapped v6 rule, which compiles to IPv4.
    let p = pol(&[("allow", "::ffff:127.0.0.0/104")]);
    assert!(allowed(&literal(&p, "127.0.0.1", 80)));
}

#[test]
fn every_spelling_of_loopback_is_loopback() {
    let p = pol(&[("allow", "0.0.0.0/0")]);
    for s in [
        "127.1",
        "0x7f.1",
        "0177.0.0.1",
        "2130706433",
        "0x7f000001",
        "127.0.1",
        "[::ffff:7f00:1]",
    ] {
        assert_eq!(
            unfixed(literal(&p, s, 80)),
            Verdict::Deny(Denial::SpecialAddress(ip("127.0.0.1"), "loopback", None)),
            "{s}"
        );
    }
}

#[test]
fn public_addresses_are_not_special() {
    let p = pol(&[("allow", "0.0.0.0/0"), ("allow", "::/0")]);
    for a in [
        "1.1.1.1",
        "8.8.8.8",
        "93.184.216.34",
        "100.63.255.255",
        "100.128.0.0",
        "172.15.255.255",
        "172.32.0.0",
        "192.169.0.0",
        "223.255.255.255",
        "11.0.0.1",
        "2606:4700::1111",
        "64:ff9b::808:808",
        "2002:808:808::1",
    ] {
        assert!(allowed(&literal(&p, a, 443)), "{a}");
    }
}

/// A deny of an IPv4 address or block also refuses the IPv6 spellings a
/// translator turns into it (NAT64, 6to4); an allow gains nothing from them.
#[test]
fn a_deny_holds_through_nat64_and_6to4() {
    let p = pol(&[("allow", "*"), ("deny", "93.184.216.0/24")]);
    for addr in ["93.184.216.34", "64:ff9b::5db8:d822", "2002:5db8:d822::1"] {
        assert!(!allowed(&verdict(&p, "a.test", 443, &[addr])), "{addr}");
    }
    assert!(allowed(&verdict(
        &p,
        "a.test",
        443,
        &["64:ff9b::5db9:d822"]
    )));
    let p = pol(&[("allow", "93.184.216.0/24")]);
    assert!(!allowed(&verdict(
        &p,
        "a.test",
        443,
        &["64:ff9b::5db8:d822"]
    )));
}
