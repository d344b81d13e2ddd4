//! Canonicalisation of targets.

use super::*;

fn canon(s: &str) -> Host {
    Target::new(s, 80)
        .unwrap_or_else(|e| panic!("{s:?}: {e:?}"))
        .host
}

fn dom(s: &str) -> Host {
    Host::Domain(s.into())
}

fn v4(s: &str) -> Host {
    Host::Ip(ip(s))
}

#[test]
fn case_and_trailing_dot() {
    assert_eq!(canon("Example.COM"), dom("example.com"));
    assert_eq!(canon("example.com."), dom("example.com"));
    assert_eq!(canon("EXAMPLE.com."), dom("example.com"));
    assert_eq!(canon("_srv.Example"), dom("_srv.example"));
    assert_eq!(canon("localhost"), dom("localhost"));
    assert!(Target::new("example.com..", 80).is_err());
    assert!(Target::new(".", 80).is_err());
}

#[test]
fn idna() {
    assert_eq!(canon("bücher.example"), dom("xn--bcher-kva.example"));
    assert_eq!(canon("BÜCHER.example."), dom("xn--bcher-kva.example"));
    assert_eq!(canon("xn--bcher-kva.example"), dom("xn--bcher-kva.example"));
    // Full-width digits and ideographic dots are an address, not a name.
    assert_eq!(canon("１２７.０.０.１"), v4("127.0.0.1"));
    assert_eq!(canon("example。com"), dom("example.com"));
    assert!(Target::new("xn--zz", 80).is_err());
}

#[test]
fn rejects_bad_names() {
    for bad in [
        "",
        "a..b",
        ".a",
        "exa mple.com",
        " example.com",
        "exa\tmple.com",
        "a\0b",
        "a\u{7f}b",
        "a%b.com",
        "a/b",
        "a*b.com",
        "*",
        "a@b",
        "[::1",
        "[example.com]",
    ] {
        assert!(Target::new(bad, 80).is_err(), "{bad:?} accepted");
    }
    let label = "a".repeat(64);
    assert!(Target::new(&format!("{label}.com"), 80).is_err());
    assert!(Target::new(&format!("{}.com", "a".repeat(63)), 80).is_ok());
    let long = vec!["abcdefghi"; 26].join("."); // 259 bytes
    assert!(Target::new(&long, 80).is_err());
    let ok = vec!["abcdefghi"; 25].join("."); // 249 bytes
    assert!(Target::new(&ok, 80).is_ok());
}

#[test]
fn inet_aton_spellings() {
    for s in [
        "127.0.0.1",
        "127.1",
        "127.0.1",
        "0x7f.1",
        "0X7F.0.0.1",
        "0177.0.0.1",
        "0177.1",
        "2130706433",
        "0x7f000001",
        "017700000001",
        "127.0.0.1.",
        "0x7f.0x0.0x0.0x1",
    ] {
        assert_eq!(canon(s), v4("127.0.0.1"), "{s}");
    }
    assert_eq!(canon("0"), v4("0.0.0.0"));
    assert_eq!(canon("0x"), v4("0.0.0.0"));
    assert_eq!(canon("4294967295"), v4("255.255.255.255"));
    assert_eq!(canon("10.0x10000"), v4("10.1.0.0"));
    assert_eq!(canon("192.168.0x1.1"), v4("192.168.1.1"));
    assert_eq!(canon("0000000000000000177.1"), v4("127.0.0.1"));
}

#[test]
fn invalid_numbers_are_rejected_not_names() {
    for bad in [
        "4294967296",
        "0x100000000",
        "256.0.0.1",
        "1.2.3.256",
        "1.2.65536",
        "1.16777216",
        "1.2.3.4.5",
        "08.0.0.1",
        "1.2.3.09",
        "0x7g.1",
        "example.123",
        "example.0x1g",
        "1..2",
        "99999999999999999999999",
    ] {
        // "0x1g" is not a number, so "example.0x1g" is a (valid) name.
        if bad == "example.0x1g" {
            assert_eq!(canon(bad), dom(bad));
            continue;
        }
        assert!(Target::new(bad, 80).is_err(), "{bad:?} accepted");
    }
    // A numeric label that is not last does not make an address.
    assert_eq!(canon("123.example"), dom("123.example"));
}

#[test]
fn ipv6() {
    assert_eq!(canon("::1"), Host::Ip(ip("::1")));
    assert_eq!(canon("[::1]"), Host::Ip(ip("::1")));
    assert_eq!(canon("[2001:DB8::1]"), Host::Ip(ip("2001:db8::1")));
    assert_eq!(canon("::ffff:127.0.0.1"), v4("127.0.0.1"));
    assert_eq!(canon("[::ffff:7f00:1]"), v4("127.0.0.1"));
    assert_eq!(canon("[0:0:0:0:0:ffff:10.0.0.1]"), v4("10.0.0.1"));
    // IPv4-compatible stays IPv6 (the special check covers it).
    assert_eq!(canon("::127.0.0.1"), Host::Ip(ip("::7f00:1")));
    for bad in [
        "fe80::1%eth0",
        "[fe80::1%25eth0]",
        "[::1",
        "::1]",
        "1:2",
        "[::g]",
        "[]",
    ] {
        assert!(Target::new(bad, 80).is_err(), "{bad:?} accepted");
    }
}

#[test]
fn ports_and_authority() {
    assert!(Target::new("example.com", 0).is_err());
    assert_eq!(
        Target::parse_authority("Example.com:443").unwrap(),
        t("example.com", 443)
    );
    assert_eq!(
        Target::parse_authority("[::1]:8080").unwrap(),
        t("::1", 8080)
    );
    assert_eq!(
        Target::parse_authority("[::ffff:127.0.0.1]:22").unwrap(),
        t("127.0.0.1", 22)
    );
    assert_eq!(
        Target::parse_authority("127.1:80").unwrap(),
        t("127.0.0.1", 80)
    );
    for bad in [
        "example.com",
        "example.com:",
        "example.com:0",
        "example.com:65536",
        "example.com:+80",
        "example.com:8o",
        "example.com: 80",
        "::1:80",
        "[::1]",
        "[::1]80",
        "[::1:80",
        ":80",
        "",
    ] {
        assert!(Target::parse_authority(bad).is_err(), "{bad:?} accepted");
    }
}

#[test]
fn display() {
    assert_eq!(t("Example.com", 443).to_string(), "example.com:443");
    assert_eq!(t("[::1]", 443).to_string(), "[::1]:443");
    assert_eq!(t("127.1", 80).to_string(), "127.0.0.1:80");
}

#[test]
fn never_panics_on_garbage() {
    let alphabet: Vec<char> = "[]:.%/-*0x9fFAZ \u{0}\u{7f}ü。１ß\u{200b}xn--"
        .chars()
        .collect();
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state as usize
    };
    for _ in 0..5000 {
        let len = next() % 24;
        let s: String = (0..len)
            .map(|_| alphabet[next() % alphabet.len()])
            .collect();
        let _ = Target::parse_authority(&s);
        let _ = Target::new(&s, 1);
        let _ = parse_cli_rule(Action::Allow, &s);
    }
}
