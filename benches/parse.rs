//! Handshake parsing and policy benchmarks: the per-connection CPU work that
//! is not I/O. `cargo bench --bench parse`.

use std::hint::black_box;
use std::net::IpAddr;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use portcullis::policy::{parse_cli_rule, Action, Target};
use portcullis::protocol::{http, socks5};
use portcullis::Policy;

fn parse(c: &mut Criterion) {
    let mut g = c.benchmark_group("parse");
    g.sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));

    let ipv4 = [5, 1, 0, 1, 93, 184, 216, 34, 1, 187];
    g.bench_function("socks5_request_ipv4", |b| {
        b.iter(|| socks5::parse_request(black_box(&ipv4)))
    });
    let mut domain = vec![5, 1, 0, 3, 15];
    domain.extend_from_slice(b"api.github.com.");
    domain.extend_from_slice(&443u16.to_be_bytes());
    g.bench_function("socks5_request_domain", |b| {
        b.iter(|| socks5::parse_request(black_box(&domain)))
    });

    let head = b"CONNECT api.github.com:443 HTTP/1.1\r\n\
Host: api.github.com:443\r\n\
User-Agent: curl/8.5.0\r\n\
Proxy-Connection: Keep-Alive\r\n\r\n";
    g.bench_function("http_connect_head", |b| {
        b.iter(|| http::parse_request_head(black_box(head), 32 * 1024))
    });
    g.bench_function("http_connect_target", |b| {
        b.iter(|| Target::parse_authority(black_box("api.github.com:443")))
    });
    g.finish();
}

fn policy(c: &mut Criterion) {
    let mut g = c.benchmark_group("policy");
    g.sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));

    // A realistic allow-list: a few dozen host rules, a CIDR, a deny.
    let mut rules = Vec::new();
    for i in 0..30 {
        rules.push(
            parse_cli_rule(Action::Allow, &format!("host{i}.example.com:443")).expect("rule"),
        );
    }
    for spec in [
        "*.github.com:443",
        "github.com:443",
        "10.20.0.0/16:8000-8100",
    ] {
        rules.push(parse_cli_rule(Action::Allow, spec).expect("rule"));
    }
    rules.push(parse_cli_rule(Action::Deny, "169.254.169.254/32").expect("rule"));
    let policy = Policy::from_rules(&rules).expect("policy");

    let allowed = Target::new("api.github.com", 443).expect("target");
    let addrs: [IpAddr; 2] = [
        "140.82.112.6".parse().unwrap(),
        "140.82.112.5".parse().unwrap(),
    ];
    g.bench_function("check_resolved_allow_wildcard", |b| {
        b.iter(|| policy.check_resolved(black_box(&allowed), black_box(&addrs)))
    });
    let private = Target::new("10.20.1.2", 8080).expect("target");
    let private_addr: [IpAddr; 1] = ["10.20.1.2".parse().unwrap()];
    g.bench_function("check_resolved_cidr", |b| {
        b.iter(|| policy.check_resolved(black_box(&private), black_box(&private_addr)))
    });
    let denied = Target::new("evil.example.net", 443).expect("target");
    let denied_addr: [IpAddr; 1] = ["203.0.113.9".parse().unwrap()];
    g.bench_function("check_resolved_no_rule", |b| {
        b.iter(|| policy.check_resolved(black_box(&denied), black_box(&denied_addr)))
    });
    g.bench_function("check_name_then_resolved", |b| {
        b.iter(|| {
            let _ = policy.check_name(black_box(&allowed));
            policy.check_resolved(black_box(&allowed), black_box(&addrs))
        })
    });
    g.finish();
}

criterion_group!(benches, parse, policy);
criterion_main!(benches);
