//! The memory of inspected names' addresses: expiry, bounds, pinning, and
//! how the policy feeds and shares it.

use std::time::{Duration, Instant};

use super::*;

fn names(m: &InspectedAddrs, a: &str, now: Option<Instant>) -> Vec<String> {
    let mut v: Vec<String> = m
        .names_at(ip(a), now)
        .iter()
        .map(|n| n.to_string())
        .collect();
    v.sort();
    v
}

#[test]
fn remembers_until_expiry_and_refreshes() {
    let t0 = Instant::now();
    let mut m = InspectedAddrs::default();
    assert!(m.is_empty());
    m.remember(
        "api.test",
        &[ip("45.45.45.45"), ip("2001:db8::1")],
        false,
        t0,
    );
    m.remember("www.test", &[ip("45.45.45.45")], false, t0);
    assert_eq!(m.len(), 3);
    assert_eq!(names(&m, "45.45.45.45", Some(t0)), ["api.test", "www.test"]);
    assert_eq!(names(&m, "2001:db8::1", Some(t0)), ["api.test"]);
    assert!(names(&m, "45.45.45.46", Some(t0)).is_empty());
    // A mapped address is the IPv4 address, either way round.
    assert_eq!(names(&m, "::ffff:45.45.45.45", Some(t0)).len(), 2);
    m.remember("v4.test", &[ip("::ffff:1.2.3.4")], false, t0);
    assert_eq!(names(&m, "1.2.3.4", Some(t0)), ["v4.test"]);

    // Refreshing extends; the same pair is one record.
    let later = t0 + SEEN_TTL / 2;
    m.remember("api.test", &[ip("45.45.45.45")], false, later);
    assert_eq!(m.len(), 4);
    let past_first = t0 + SEEN_TTL + Duration::from_secs(1);
    assert_eq!(names(&m, "45.45.45.45", Some(past_first)), ["api.test"]);
    assert!(names(&m, "2001:db8::1", Some(past_first)).is_empty());
    // Without a clock, records count until pruned.
    assert_eq!(names(&m, "2001:db8::1", None), ["api.test"]);
    m.expire(past_first);
    assert!(names(&m, "2001:db8::1", None).is_empty());
    assert_eq!(m.len(), 1);
}

#[test]
fn pinned_names_last_longer() {
    let t0 = Instant::now();
    let mut m = InspectedAddrs::default();
    m.remember("api.test", &[ip("45.45.45.45")], true, t0);
    m.remember("www.test", &[ip("45.45.45.46")], false, t0);
    let t1 = t0 + SEEN_TTL + Duration::from_secs(1);
    assert_eq!(names(&m, "45.45.45.45", Some(t1)), ["api.test"]);
    assert!(names(&m, "45.45.45.46", Some(t1)).is_empty());
    assert!(names(&m, "45.45.45.45", Some(t0 + PINNED_TTL)).is_empty());
    assert!(PINNED_TTL > SEEN_TTL && SEEN_TTL > REFRESH_EVERY);
}

#[test]
fn bounded_and_a_flood_cannot_evict_pinned_names() {
    let t0 = Instant::now();
    let mut m = InspectedAddrs::with_capacity(64);
    m.remember(
        "api.test",
        &[ip("45.45.45.45"), ip("45.45.45.44")],
        true,
        t0,
    );
    // A client resolving thousands of wildcard names, each newer than the last.
    for i in 0..5000u32 {
        let a = std::net::Ipv4Addr::from(0x0a00_0000 + i);
        let now = t0 + Duration::from_millis(u64::from(i));
        m.remember(&format!("n{i}.wild.test"), &[a.into()], false, now);
        assert!(m.len() <= m.capacity(), "{i}");
    }
    assert_eq!(m.capacity(), 64);
    assert_eq!(names(&m, "45.45.45.45", Some(t0)), ["api.test"]);
    assert_eq!(names(&m, "45.45.45.44", Some(t0)), ["api.test"]);
    // The newest client names are kept, the oldest went.
    assert_eq!(names(&m, "10.0.19.135", Some(t0)), ["n4999.wild.test"]);
    assert!(names(&m, "10.0.0.0", None).is_empty());
    // Only pinned records left: they go too, oldest first, rather than grow.
    let mut p = InspectedAddrs::with_capacity(4);
    for i in 0..10u8 {
        p.remember(
            &format!("p{i}.test"),
            &[ip(&format!("45.0.0.{i}"))],
            true,
            t0 + Duration::from_secs(u64::from(i)),
        );
        assert!(p.len() <= 4);
    }
    assert_eq!(names(&p, "45.0.0.9", None), ["p9.test"]);
    // One resolution is capped at 64 addresses.
    let mut q = InspectedAddrs::default();
    let many: Vec<IpAddr> = (0..200u32)
        .map(|i| std::net::Ipv4Addr::from(0x2d00_0000 + i).into())
        .collect();
    q.remember("big.test", &many, false, t0);
    assert_eq!(q.len(), 64);
}

#[test]
fn expired_records_make_room_first() {
    let t0 = Instant::now();
    let mut m = InspectedAddrs::with_capacity(2);
    m.remember("a.test", &[ip("1.1.1.1")], false, t0);
    m.remember("b.test", &[ip("1.1.1.2")], true, t0);
    let t1 = t0 + SEEN_TTL + Duration::from_secs(1);
    m.remember("c.test", &[ip("1.1.1.3")], false, t1);
    assert_eq!(m.len(), 2);
    assert_eq!(names(&m, "1.1.1.2", Some(t1)), ["b.test"]);
    assert_eq!(names(&m, "1.1.1.3", Some(t1)), ["c.test"]);
}

fn inspecting(host: &str) -> RuleConfig {
    RuleConfig {
        host: Some(host.into()),
        inspect: Some("http".into()),
        ..cfg(Action::Allow)
    }
}

#[test]
fn the_policy_remembers_only_names_of_inspecting_rules() {
    let t0 = Instant::now();
    let p = Policy::from_rules(&[
        inspecting("api.test"),
        inspecting("*.inspected.test"),
        RuleConfig {
            hosts: vec!["api.test".into(), "other.test".into()],
            inspect: Some("http".into()),
            ..cfg(Action::Allow)
        },
        parse_cli_rule(Action::Allow, "*").unwrap(),
        parse_cli_terminate("secure.test:443").unwrap(),
        parse_cli_rule(Action::Deny, "denied.test").unwrap(),
    ])
    .unwrap();
    assert_eq!(
        p.inspected_names(),
        ["api.test", "other.test", "secure.test"]
    );
    let a = [ip("45.45.45.45")];
    assert!(p.remember(&Host::Domain("api.test".into()), &a, t0));
    assert!(p.remember(&Host::Domain("x.inspected.test".into()), &a, t0));
    assert!(p.remember(&Host::Domain("secure.test".into()), &a, t0));
    assert!(!p.remember(&Host::Domain("plain.test".into()), &a, t0));
    assert!(!p.remember(&Host::Domain("denied.test".into()), &a, t0));
    assert!(!p.remember(&Host::Ip(a[0]), &a, t0));
    assert_eq!(p.memory().len(), 3);
    // Exact names are pinned, wildcard matches are not.
    let t1 = t0 + SEEN_TTL + Duration::from_secs(1);
    let mut left: Vec<String> = p
        .memory()
        .names_at(a[0], Some(t1))
        .iter()
        .map(|n| n.to_string())
        .collect();
    left.sort();
    assert_eq!(left, ["api.test", "secure.test"]);
    // Expired entries stop counting once the check is given the time.
    let lit = t("45.45.45.45", 80);
    let p2 = {
        let mut p2 = Policy::from_rules(&[
            inspecting("*.inspected.test"),
            parse_cli_rule(Action::Allow, "0.0.0.0/0").unwrap(),
        ])
        .unwrap();
        p2.set_memory(InspectedMemory::default());
        p2
    };
    p2.remember(&Host::Domain("x.inspected.test".into()), &a, t0);
    let inspected = |v: Verdict| matches!(v, Verdict::Allow(al) if al.is_inspected());
    assert!(inspected(p2.check_resolved_at(&lit, &a, t0)));
    assert!(!inspected(p2.check_resolved_at(&lit, &a, t1)));
    assert!(
        inspected(p2.check_resolved(&lit, &a)),
        "clockless: stricter until pruned"
    );
    p2.memory().expire(t1);
    assert!(!inspected(p2.check_resolved(&lit, &a)));
}

#[test]
fn clones_and_threads_share_one_memory() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Policy>();
    send_sync::<InspectedMemory>();
    let p = Policy::from_rules(&[
        inspecting("api.test"),
        parse_cli_rule(Action::Allow, "0.0.0.0/0").unwrap(),
    ])
    .unwrap();
    let q = p.clone();
    assert!(p.memory().same_as(q.memory()));
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for i in 0..4u8 {
            let q = q.clone();
            s.spawn(move || {
                q.remember(
                    &Host::Domain("api.test".into()),
                    &[ip(&format!("45.45.45.{i}"))],
                    t0,
                );
            });
        }
    });
    assert_eq!(p.memory().len(), 4);
    for i in 0..4 {
        let a = ip(&format!("45.45.45.{i}"));
        let v = p.check_resolved_at(
            &Target {
                host: Host::Ip(a),
                port: 80,
            },
            &[a],
            t0,
        );
        assert!(matches!(v, Verdict::Allow(al) if al.is_inspected()), "{a}");
    }
    // A reloaded policy starts with its own memory unless given the old one.
    let fresh = Policy::from_rules(&[inspecting("api.test")]).unwrap();
    assert!(!fresh.memory().same_as(p.memory()));
    assert!(format!("{:?}", p.memory()).contains("4 records"));
}
