//! `workers = 2`: two reactors serve one proxy. Connections are spread over
//! both (SO_REUSEPORT hashes by the 4-tuple, so many source ports reach
//! both; a Unix or adopted listener is shared); per-client limits hold
//! across workers; reloads, policy changes, session lists, closes and
//! shutdown reach both; the totals are the sums of the workers' counts;
//! and an idle proxy with two workers does not wake up.

use crate::support;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;

use portcullis::policy::{parse_cli_rule, Action};
use portcullis::{AdminConfig, CloseReason, ListenAddr, ListenerProtocol, Policy, SpawnedProxy};
use support::*;

/// Connections made until both workers have accepted some, at most.
const TRIES: usize = 400;

fn two_workers(policy: Policy) -> SpawnedProxy {
    spawn(proxy_builder(policy).workers(2))
}

/// Per-worker accepted counts.
fn accepted(p: &SpawnedProxy) -> Vec<u64> {
    p.worker_stats().iter().map(|w| w.accepted).collect()
}

/// CONNECTs to `echo` until both workers have refused one (403); `label`
/// starts the failure message.
#[track_caller]
fn refused_on_both(proxy: &SpawnedProxy, echo: &Server, label: &str) {
    let before = accepted(proxy);
    let mut refused = 0;
    while accepted(proxy)[0] == before[0] || accepted(proxy)[1] == before[1] {
        let mut s = TcpStream::connect(proxy_addr(proxy)).unwrap();
        s.set_read_timeout(Some(PROMPTLY)).unwrap();
        let head = http_connect_on(&mut s, &echo.target(), &[]).expect("an answer");
        assert_eq!(head.status, 403, "{label}{}", head.raw);
        refused += 1;
        assert!(refused < TRIES, "did not reach both workers");
    }
}

/// Opens CONNECT tunnels to `echo` (each from a new source port) until
/// both workers have accepted at least `each` connections since `before`;
/// returns them open.
#[track_caller]
fn tunnels_on_both(p: &SpawnedProxy, echo: &Server, each: u64) -> Vec<TcpStream> {
    let before = accepted(p);
    let mut open = Vec::new();
    for _ in 0..TRIES {
        let now = accepted(p);
        if now[0] - before[0] >= each && now[1] - before[1] >= each {
            return open;
        }
        let mut s = connect_via_http(proxy_addr(p), &echo.target());
        assert_echo(&mut s, b"hello");
        open.push(s);
    }
    panic!(
        "{TRIES} connections did not reach both workers: {:?}",
        accepted(p)
    );
}

#[test]
fn connections_are_spread_over_both_workers_and_metrics_add_up() {
    let echo = echo_server();
    let admin = AdminConfig::new(ListenAddr::Tcp("127.0.0.1:0".parse().unwrap()));
    let proxy = spawn(
        proxy_builder(allow_ports(&[echo.port()]))
            .workers(2)
            .admin(admin),
    );
    assert_eq!(proxy.worker_stats().len(), 2);
    // Sequential, short tunnels: each from a fresh source port.
    for i in 0..64 {
        let mut s = connect_via_http(proxy_addr(&proxy), &echo.target());
        assert_echo(&mut s, format!("tunnel {i}").as_bytes());
    }
    wait_no_open_sessions(&proxy);
    let per = accepted(&proxy);
    eprintln!("accepted per worker: {per:?}");
    assert!(
        per[0] > 0 && per[1] > 0,
        "one worker took everything: {per:?}"
    );
    let st = proxy.stats();
    assert_eq!(st.accepted, 64);
    assert_eq!(per.iter().sum::<u64>(), st.accepted);
    assert_eq!(st.allowed, 64);
    assert_eq!(st.closed.total(), 64);

    // /metrics: the totals are the sums of the per-worker samples.
    let Some(ListenAddr::Tcp(a)) = proxy.admin_addr() else {
        panic!("no admin address")
    };
    let text = admin_get(a, "/metrics");
    let value = |key: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {key} in\n{text}"))
    };
    assert_eq!(value("portcullis_workers"), 2);
    let w0 = value("portcullis_worker_accepted_total{worker=\"0\"}");
    let w1 = value("portcullis_worker_accepted_total{worker=\"1\"}");
    assert_eq!((w0, w1), (per[0], per[1]));
    assert_eq!(value("portcullis_connections_accepted_total"), w0 + w1);
    let wakeups = value("portcullis_reactor_wakeups_total");
    let ww0 = value("portcullis_worker_wakeups_total{worker=\"0\"}");
    let ww1 = value("portcullis_worker_wakeups_total{worker=\"1\"}");
    // The admin request itself wakes worker 0 between the samples: read in order.
    assert!(ww0 > 0 && ww1 > 0 && ww0 + ww1 <= wakeups, "{text}");
    let stats: serde_json::Value = serde_json::from_str(&admin_get(a, "/stats")).unwrap();
    let ws = stats["workers"].as_array().expect("workers in /stats");
    assert_eq!(ws.len(), 2);
    assert_eq!(
        ws[0]["accepted"].as_u64().unwrap() + ws[1]["accepted"].as_u64().unwrap(),
        stats["accepted"].as_u64().unwrap()
    );
}

/// GET `path` from the admin endpoint; the body.
fn admin_get(addr: SocketAddr, path: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(PROMPTLY)).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: admin\r\n\r\n").unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    let mut all = String::new();
    s.read_to_string(&mut all).unwrap();
    let (head, body) = all.split_once("\r\n\r\n").expect("a whole answer");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_string()
}

#[test]
fn per_client_limit_holds_across_workers() {
    let echo = echo_server();
    let limit = 24;
    let proxy = spawn(
        proxy_builder(allow_ports(&[echo.port()]))
            .limits(limits(|l| l.max_sessions_per_client = limit))
            .workers(2),
    );
    // One client (this uid) holds `limit` tunnels, over both workers.
    let mut held = Vec::new();
    for _ in 0..limit {
        let mut s = connect_via_http(proxy_addr(&proxy), &echo.target());
        assert_echo(&mut s, b"held");
        held.push(s);
    }
    let per = accepted(&proxy);
    assert!(per[0] > 0 && per[1] > 0, "all on one worker: {per:?}");
    // Each worker holds fewer than the limit, yet every further tunnel
    // from the same client is refused, whichever worker accepts it.
    for _ in 0..16 {
        let mut s = TcpStream::connect(proxy_addr(&proxy)).unwrap();
        s.set_read_timeout(Some(PROMPTLY)).unwrap();
        let head = http_connect_on(&mut s, &echo.target(), &[]).expect("an answer");
        assert_eq!(head.status, 503, "{}", head.raw);
        assert_eq!(
            head.header("X-Proxy-Error"),
            Some("limit; max_sessions_per_client")
        );
    }
    // The held tunnels are untouched; once they close, room is back.
    for s in &mut held {
        assert_echo(s, b"still here");
    }
    drop(held);
    wait_no_open_sessions(&proxy);
    let mut s = connect_via_http(proxy_addr(&proxy), &echo.target());
    assert_echo(&mut s, b"room again");
    assert_eq!(proxy.stats().closed.get(CloseReason::Limit), 16);
}

#[test]
fn reload_and_policy_changes_reach_both_workers() {
    let echo = echo_server();
    let proxy = two_workers(allow_ports(&[echo.port()]));
    let mut tunnels = tunnels_on_both(&proxy, &echo, 2);
    let n = tunnels.len() as u64;
    // A reload that allows nothing closes every tunnel, on both workers.
    proxy.reload(Policy::default());
    for s in &mut tunnels {
        expect_closed(s, "a tunnel the reload no longer allows");
    }
    wait_for("every tunnel closed by the reload", PROMPTLY, || {
        proxy.stats().closed.get(CloseReason::PolicyReload) == n
    });
    // The new policy is in force for new connections on both workers.
    refused_on_both(&proxy, &echo, "");
    // replace_policy returns once every worker has it: allowed at once on both.
    proxy
        .replace_policy(allow_ports(&[echo.port()]))
        .expect("replace");
    let tunnels = tunnels_on_both(&proxy, &echo, 1);
    drop(tunnels);
    // add_rule and remove_rule too: from a policy allowing nothing, an
    // added rule allows on both workers, and removing it denies on both.
    proxy.replace_policy(Policy::default()).expect("replace");
    let rule = parse_cli_rule(Action::Allow, &format!("127.0.0.1:{}", echo.port())).unwrap();
    proxy.add_rule(named(rule, "echo")).expect("add");
    drop(tunnels_on_both(&proxy, &echo, 1));
    proxy.remove_rule("echo").expect("remove");
    refused_on_both(&proxy, &echo, "after remove_rule: ");
}

fn named(mut rule: portcullis::policy::RuleConfig, name: &str) -> portcullis::policy::RuleConfig {
    rule.name = Some(name.into());
    rule
}

#[test]
fn sessions_are_listed_and_closed_on_either_worker() {
    let echo = echo_server();
    let proxy = two_workers(allow_ports(&[echo.port()]));
    let mut tunnels = tunnels_on_both(&proxy, &echo, 2);
    let list = proxy.sessions().expect("sessions");
    assert_eq!(list.len(), tunnels.len(), "{list:?}");
    let mut ids: Vec<u64> = list.iter().map(|s| s.id).collect();
    ids.dedup();
    assert_eq!(ids.len(), tunnels.len(), "ids are unique: {list:?}");
    // Close every one of them through the handle, whichever worker has it.
    for s in &list {
        proxy.close_session(s.id).expect("close");
    }
    for s in &mut tunnels {
        expect_closed(s, "a session closed by control");
    }
    assert!(proxy.close_session(ids[0]).is_err(), "already closed");
    wait_for("the closed-by-control tally", PROMPTLY, || {
        proxy.stats().closed.get(CloseReason::ClosedByControl) == tunnels.len() as u64
    });
    assert!(proxy.sessions().unwrap().is_empty());
}

#[test]
fn shutdown_ends_every_worker() {
    let echo = echo_server();
    let proxy = two_workers(allow_ports(&[echo.port()]));
    let addr = proxy_addr(&proxy);
    let mut tunnels = tunnels_on_both(&proxy, &echo, 1);
    // Graceful: listeners close on both workers, open tunnels carry on.
    proxy.shutdown();
    wait_for("every listener closed", PROMPTLY, || {
        TcpStream::connect(addr).is_err()
    });
    for s in &mut tunnels {
        assert_echo(s, b"draining");
    }
    // Then at once: every tunnel on either worker is closed and both exit.
    proxy.shutdown_now();
    for s in &mut tunnels {
        expect_closed(s, "a tunnel at shutdown");
    }
    proxy.join().expect("clean exit of both workers");
}

#[test]
fn idle_proxy_with_two_workers_does_not_wake_up() {
    let echo = echo_server();
    let proxy = two_workers(allow_ports(&[echo.port()]));
    drop(tunnels_on_both(&proxy, &echo, 1));
    wait_no_open_sessions(&proxy);
    let s1 = proxy.stats();
    let w1 = proxy.worker_stats();
    // Both reactors (one listener each, SO_REUSEPORT) asleep for good.
    let parked = wait_reactors_parked("self", proxy_addr(&proxy), 2, Sleep::Forever);
    let s2 = proxy.stats();
    let w2 = proxy.worker_stats();
    parked.assert_still_asleep();
    assert_eq!(s1.wakeups, s2.wakeups, "idle proxy woke up: {s1} then {s2}");
    assert_eq!(w1, w2);
}

#[test]
fn a_unix_listener_is_shared_by_both_workers() {
    let echo = echo_server();
    let dir = TempDir::new("workers-unix");
    let path = dir.path().join("proxy.sock");
    let proxy = spawn(
        proxy_builder(allow_ports(&[echo.port()]))
            .listen(ListenAddr::Unix(path.clone()), ListenerProtocol::Auto)
            .workers(2),
    );
    // Both workers wait on the one socket; whoever accepts first serves.
    let mut served = 0u64;
    while accepted(&proxy).contains(&0) {
        let mut s = UnixStream::connect(&path).expect("connect");
        s.set_read_timeout(Some(PROMPTLY)).unwrap();
        let head = http_connect_on(&mut s, &echo.target(), &[]).expect("CONNECT");
        assert_eq!(head.status, 200, "{}", head.raw);
        assert_echo(&mut s, b"over unix");
        served += 1;
        assert!(
            served < TRIES as u64,
            "one worker took everything: {:?}",
            accepted(&proxy)
        );
    }
    wait_no_open_sessions(&proxy);
    assert_eq!(proxy.stats().accepted, served);
    assert_eq!(proxy.stats().closed.total(), served);
    drop(proxy);
    assert!(!path.exists(), "the socket file is removed once");
}

#[test]
fn an_adopted_listener_is_shared_by_both_workers() {
    let echo = echo_server();
    let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy = spawn(
        portcullis::Proxy::builder()
            .listener(std_listener, ListenerProtocol::Auto)
            .policy(allow_ports(&[echo.port()]))
            .timeouts(test_timeouts())
            .workers(2),
    );
    drop(tunnels_on_both(&proxy, &echo, 1));
    wait_no_open_sessions(&proxy);
}
