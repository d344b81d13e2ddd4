//! srt's settings JSON as rules: the mapping, then the rules' verdicts.

use std::net::IpAddr;

use super::*;
use crate::policy::{Denial, NameVerdict, Policy, Target, Verdict};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn policy(json: &str, local: &[&str]) -> (Policy, Vec<String>) {
    let local: Vec<IpAddr> = local.iter().map(|a| ip(a)).collect();
    let srt = map(json, &local).unwrap();
    (Policy::from_rules(&srt.rules).unwrap(), srt.warnings)
}

fn verdict(p: &Policy, host: &str, port: u16, addr: &str) -> Verdict {
    p.check_resolved(&Target::new(host, port).unwrap(), &[ip(addr)])
}

fn allowed(p: &Policy, host: &str, port: u16, addr: &str) -> bool {
    matches!(verdict(p, host, port, addr), Verdict::Allow(_))
}

const SETTINGS: &str = r#"{
  "network": {
    "allowedDomains": ["pypi.test", "*.npm.test", "api.test:443", "localhost", "[2001:db8::7]:8443"],
    "deniedDomains": ["bad.npm.test", "api.test:22", "*:25"],
    "deniedDomainReasons": {"bad.npm.test": "typosquat; use good.npm.test"},
    "deniedResolvedAddresses": ["10.66.0.0/16", "192.168.7.7"],
    "allowUnixSockets": ["/var/run/docker.sock"],
    "httpProxyPort": 3128
  },
  "filesystem": {"denyRead": [], "allowWrite": [], "denyWrite": []}
}"#;

#[test]
fn names_pass_at_private_and_documentation_addresses_as_in_srt() {
    let (p, _) = policy(SETTINGS, &["192.0.2.44"]);
    for addr in [
        "151.101.0.223",
        "10.1.2.3",
        "172.16.0.9",
        "192.168.1.1",
        "100.64.0.1",
        "203.0.113.80",
        "fd12::1",
        "2001:db8::1",
    ] {
        assert!(allowed(&p, "pypi.test", 443, addr), "pypi.test at {addr}");
    }
    // A bare name is that name; *.x is its strict subdomains (as srt).
    assert!(!allowed(&p, "www.pypi.test", 443, "151.101.0.223"));
    assert!(allowed(&p, "a.npm.test", 443, "10.0.0.1"));
    assert!(!allowed(&p, "npm.test", 443, "10.0.0.1"));
    // Another name at the same private address gains nothing.
    assert!(!allowed(&p, "other.test", 443, "10.1.2.3"));
    assert!(!allowed(&p, "10.1.2.3", 443, "10.1.2.3"));
}

#[test]
fn srts_refused_set_stays_refused() {
    let (p, _) = policy(SETTINGS, &["192.0.2.44", "127.0.0.1"]);
    for addr in [
        "127.0.0.1",
        "169.254.169.254",
        "0.0.0.0",
        "224.0.0.1",
        "255.255.255.255",
        "::1",
        "fe80::1",
        "ff02::1",
        "100.100.100.200",
        "fd00:ec2::254",
        "192.0.2.44",
        "10.66.1.1",
        "192.168.7.7",
    ] {
        assert!(!allowed(&p, "pypi.test", 443, addr), "pypi.test at {addr}");
    }
    // localhost reaches loopback, and only loopback.
    assert!(allowed(&p, "localhost", 80, "127.0.0.1"));
    assert!(allowed(&p, "localhost", 80, "::1"));
    assert!(!allowed(&p, "localhost", 80, "10.0.0.1"));
    assert!(!allowed(&p, "pypi.test", 80, "127.0.0.1"));
}

#[test]
fn ports_denials_and_reasons() {
    let (p, _) = policy(SETTINGS, &[]);
    assert!(allowed(&p, "api.test", 443, "151.101.0.1"));
    assert!(!allowed(&p, "api.test", 80, "151.101.0.1"));
    assert!(matches!(
        p.check_name(&Target::new("pypi.test", 25).unwrap()),
        NameVerdict::Deny(Denial::Rule(r)) if &*r.name == "srt deniedDomains *:25"
    ));
    let NameVerdict::Deny(d) = p.check_name(&Target::new("bad.npm.test", 443).unwrap()) else {
        panic!()
    };
    assert_eq!(
        d.to_string(),
        "denied by rule srt deniedDomains bad.npm.test: typosquat; use good.npm.test"
    );
    assert!(matches!(
        p.check_name(&Target::new("api.test", 22).unwrap()),
        NameVerdict::Deny(Denial::Rule(_))
    ));
    // A bracketed IPv6 literal is allowed as written, on its port.
    assert!(allowed(&p, "2001:db8::7", 8443, "2001:db8::7"));
    assert!(!allowed(&p, "2001:db8::7", 443, "2001:db8::7"));
}

#[test]
fn what_cannot_be_honoured_is_named_once_each() {
    let (_, warnings) = policy(SETTINGS, &[]);
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(warnings[0].contains("network.allowUnixSockets is not honoured"));
    assert!(warnings[1].contains("network.httpProxyPort is not honoured"));
    let (_, warnings) = policy(
        r#"{"network": {"allowedDomains": [], "deniedDomains": [], "strictAllowlist": false,
            "deniedDomainReasons": {"nowhere.test": "x"}}}"#,
        &[],
    );
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(warnings
        .iter()
        .any(|w| w.contains("strictAllowlist = false")));
    assert!(warnings
        .iter()
        .any(|w| w.contains("deniedDomainReasons.nowhere.test names no deniedDomains entry")));
}

#[test]
fn bad_settings_are_refused_naming_the_entry() {
    for (json, want) in [
        ("{", "invalid JSON"),
        (r#"{"filesystem": {}}"#, "no \"network\" section"),
        (
            r#"{"network": {"allowedDomains": ["*"]}}"#,
            "allowedDomains[0]: \"*\": '*' is too broad",
        ),
        (r#"{"network": {"allowedDomains": ["*.com"]}}"#, "too broad"),
        (
            r#"{"network": {"allowedDomains": ["https://x.test/"]}}"#,
            "a domain, not a URL",
        ),
        (
            r#"{"network": {"allowedDomains": ["2001:db8::1"]}}"#,
            "in brackets",
        ),
        (
            r#"{"network": {"allowedDomains": ["x.test:0"]}}"#,
            "1-65535",
        ),
        (
            r#"{"network": {"allowedDomains": "x.test"}}"#,
            "expected a list",
        ),
        (
            r#"{"network": {"deniedResolvedAddresses": ["nope"]}}"#,
            "deniedResolvedAddresses[0]",
        ),
        (
            r#"{"network": {"deniedDomainReasons": {"a.test": ""}}}"#,
            "non-empty string",
        ),
    ] {
        let e = map(json, &[]).unwrap_err();
        assert!(e.contains(want), "{json}: {e}");
    }
    // `*` is a valid deny-all.
    let (p, _) = policy(
        r#"{"network": {"allowedDomains": ["a.test"], "deniedDomains": ["*"]}}"#,
        &[],
    );
    assert!(!allowed(&p, "a.test", 443, "1.1.1.1"));
}

/// An address literal in allowedDomains is that literal, as in srt (which
/// matches the requested host): a name outside allowedDomains that
/// resolves to it gains nothing.
#[test]
#[ignore = "hole: a literal in allowedDomains compiles to a match-either cidr, so every name resolving to it passes; the policy has no literal-only form"]
fn a_literal_entry_opens_the_literal_not_every_name_at_it() {
    let (p, _) = policy(
        r#"{"network": {"allowedDomains": ["pypi.test", "10.9.9.9:443", "[2001:db8::9]:443"]}}"#,
        &[],
    );
    assert!(allowed(&p, "10.9.9.9", 443, "10.9.9.9"));
    assert!(allowed(&p, "[2001:db8::9]", 443, "2001:db8::9"));
    assert!(!allowed(&p, "evil.test", 443, "10.9.9.9"));
    assert!(!allowed(&p, "evil.test", 443, "2001:db8::9"));
}

/// deniedResolvedAddresses holds for the IPv6 spellings that reach the
/// same IPv4 host: NAT64 (64:ff9b::/96) and 6to4 (2002::/16).
#[test]
fn denied_resolved_addresses_hold_through_nat64_and_6to4() {
    let (p, _) = policy(
        r#"{"network": {"allowedDomains": ["pypi.test"],
            "deniedResolvedAddresses": ["93.184.216.34", "198.51.100.0/24"]}}"#,
        &[],
    );
    assert!(allowed(&p, "pypi.test", 443, "93.184.216.35"));
    assert!(!allowed(&p, "pypi.test", 443, "93.184.216.34"));
    assert!(!allowed(&p, "pypi.test", 443, "::ffff:93.184.216.34"));
    assert!(!allowed(&p, "pypi.test", 443, "64:ff9b::93.184.216.34"));
    assert!(!allowed(&p, "pypi.test", 443, "2002:5db8:d822::1"));
}
