//! The admin endpoint: `/metrics` parses with the Prometheus text-format
//! parser (python's prometheus_client) and its counters match the traffic
//! sent; `/stats` is JSON; other paths and methods are refused; control
//! lines need `control = true`; and an idle proxy with the endpoint on does
//! not wake up.

use crate::support;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::process::Command;

use portcullis::policy::{Policy, RuleConfig};
use portcullis::{AdminConfig, ListenAddr, SpawnedProxy};
use serde_json::Value;
use support::*;

fn admin_on(policy: Policy, control: bool) -> SpawnedProxy {
    let mut admin = AdminConfig::new(ListenAddr::Tcp("127.0.0.1:0".parse().unwrap()));
    admin.control = control;
    spawn(proxy_builder(policy).admin(admin))
}

fn admin_addr(p: &SpawnedProxy) -> SocketAddr {
    match p.admin_addr() {
        Some(ListenAddr::Tcp(a)) => a,
        other => panic!("no TCP admin address: {other:?}"),
    }
}

/// Sends `request` and reads the whole answer (the endpoint closes after
/// it): status, head, body. Our side half-closes first, so the endpoint
/// has closed its socket by the time we read EOF.
fn admin_http(addr: SocketAddr, request: &str) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(PROMPTLY)).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    let mut all = String::new();
    s.read_to_string(&mut all).unwrap();
    let (head, body) = all.split_once("\r\n\r\n").expect("a whole answer");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head.to_string(), body.to_string())
}

fn get(addr: SocketAddr, path: &str) -> (u16, String, String) {
    admin_http(addr, &format!("GET {path} HTTP/1.1\r\nHost: admin\r\n\r\n"))
}

/// Every sample of a Prometheus text page, parsed by prometheus_client, as
/// `name{label=value,...}` (labels sorted) to its value.
fn prometheus(text: &str) -> BTreeMap<String, f64> {
    let script = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = {}
for family in text_string_to_metric_families(sys.stdin.read()):
    for s in family.samples:
        labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
        out[f"{s.name}{{{labels}}}"] = s.value
print(json.dumps(out))
"#;
    let out = python_filter(
        script,
        text,
        "python3 (CI installs it and prometheus_client)",
        &format!("prometheus_client rejected the page (pip install prometheus_client):\n{text}"),
    );
    serde_json::from_str(&out).unwrap()
}

#[track_caller]
fn sample(m: &BTreeMap<String, f64>, key: &str) -> f64 {
    *m.get(key)
        .unwrap_or_else(|| panic!("no sample {key} in {m:#?}"))
}

#[test]
fn metrics_parse_and_match_the_traffic() {
    let echo = echo_server();
    let rule = RuleConfig::allow("127.0.0.1")
        .name("echo")
        .port(echo.port())
        .build();
    let proxy = admin_on(Policy::from_rules(&[rule]).unwrap(), false);
    let p = proxy_addr(&proxy);
    for _ in 0..2 {
        let mut s = connect_via_http(p, &echo.target());
        assert_echo(&mut s, &[7u8; 1000]);
    }
    let mut s = connect_via_socks5(p, "127.0.0.1", echo.port()).unwrap();
    assert_echo(&mut s, &[9u8; 500]);
    drop(s);
    let mut s = TcpStream::connect(p).unwrap();
    s.write_all(b"CONNECT 127.0.0.1:1 HTTP/1.1\r\n\r\n")
        .unwrap();
    assert_eq!(read_response_head(&mut s).unwrap().status, 403);
    drop(s);
    wait_no_open_sessions(&proxy);
    wait_for("four closed sessions", PROMPTLY, || {
        proxy.stats().closed.total() == 4
    });

    let (status, head, body) = get(admin_addr(&proxy), "/metrics");
    assert_eq!(status, 200, "{head}");
    assert!(
        head.contains("Content-Type: text/plain; version=0.0.4"),
        "{head}"
    );
    let m = prometheus(&body);
    assert_eq!(sample(&m, "portcullis_connections_accepted_total{}"), 4.0);
    assert_eq!(sample(&m, "portcullis_sessions_allowed_total{}"), 3.0);
    assert_eq!(sample(&m, "portcullis_sessions_denied_total{}"), 1.0);
    assert_eq!(
        sample(
            &m,
            "portcullis_rule_sessions_total{decision=allow,rule=echo}"
        ),
        3.0
    );
    // 127.0.0.1:1 is echo's host on another port: the refusal names echo
    // (its log line says rule=echo), and so does the metric.
    assert_eq!(
        sample(
            &m,
            "portcullis_rule_sessions_total{decision=deny,rule=echo}"
        ),
        1.0
    );
    assert_eq!(sample(&m, "portcullis_bytes_total{direction=up}"), 2500.0);
    assert_eq!(sample(&m, "portcullis_bytes_total{direction=down}"), 2500.0);
    assert_eq!(
        sample(&m, "portcullis_sessions_closed_total{reason=denied}"),
        1.0
    );
    let closed: f64 = m
        .iter()
        .filter(|(k, _)| k.starts_with("portcullis_sessions_closed_total{"))
        .map(|(_, v)| v)
        .sum();
    assert_eq!(closed, 4.0);
    for phase in [
        "handshake",
        "resolving",
        "connecting",
        "established",
        "closing",
    ] {
        assert_eq!(
            sample(&m, &format!("portcullis_sessions_open{{phase={phase}}}")),
            0.0
        );
    }
    assert!(sample(&m, "portcullis_open_fds{}") > 3.0);
    assert!(sample(&m, "portcullis_reactor_wakeups_total{}") > 0.0);
    assert!(sample(&m, "portcullis_reactor_events_per_wakeup{}") >= 1.0);
    assert_eq!(sample(&m, "portcullis_resolver_queue_depth{}"), 0.0);
    assert_eq!(sample(&m, "portcullis_accept_pauses_total{}"), 0.0);
    assert_eq!(sample(&m, "portcullis_upgrades_total{}"), 0.0);
    assert_eq!(sample(&m, "portcullis_requests_total{decision=allow}"), 0.0);

    let (status, _, body) = get(admin_addr(&proxy), "/stats");
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["accepted"], 4);
    assert_eq!(v["denied"], 1);
    assert_eq!(v["bytes_up"], 2500);
    assert_eq!(v["closed"]["denied"], 1);
    assert_eq!(v["rules"]["echo"]["allowed"], 3);
    assert_eq!(v["open"]["total"], 0);
    // The admin connections are not proxy sessions.
    assert_eq!(proxy.stats().accepted, 4);
}

#[test]
fn other_paths_and_methods_are_refused() {
    let proxy = admin_on(Policy::default(), false);
    let a = admin_addr(&proxy);
    assert_eq!(get(a, "/").0, 404);
    assert_eq!(get(a, "/metrics/../stats").0, 404);
    let (status, head, _) = admin_http(a, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(status, 405);
    assert!(head.contains("Allow: GET"), "{head}");
    assert_eq!(admin_http(a, "NOT HTTP\r\n\r\n").0, 400);
    let huge = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(9000));
    assert_eq!(admin_http(a, &huge).0, 431);
    // Still serving.
    assert_eq!(get(a, "/metrics").0, 200);
}

/// One control line on a fresh admin connection; the answer line.
fn control_line(addr: SocketAddr, line: &str) -> Value {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(PROMPTLY)).unwrap();
    (&s).write_all(format!("{line}\n").as_bytes()).unwrap();
    let mut answer = String::new();
    BufReader::new(&s).read_line(&mut answer).unwrap();
    serde_json::from_str(&answer).unwrap_or_else(|e| panic!("{e}: {answer:?}"))
}

#[test]
fn control_on_the_admin_socket_needs_the_switch() {
    let proxy = admin_on(Policy::default(), false);
    let v = control_line(admin_addr(&proxy), r#"{"cmd":"stats"}"#);
    assert_eq!(v["ok"], false);
    assert!(
        v["error"].as_str().unwrap().contains("control = true"),
        "{v}"
    );

    let echo = echo_server();
    let proxy = admin_on(allow_ports(&[echo.port()]), true);
    let mut tunnel = connect_via_http(proxy_addr(&proxy), &echo.target());
    assert_echo(&mut tunnel, b"live");
    let v = control_line(admin_addr(&proxy), r#"{"cmd":"list-sessions"}"#);
    assert_eq!(v["ok"], true, "{v}");
    let sessions = v["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 1, "{v}");
    assert_eq!(sessions[0]["target"], echo.target());
    assert_eq!(sessions[0]["bytes_up"], 4);
    // HTTP still works beside control.
    assert_eq!(get(admin_addr(&proxy), "/stats").0, 200);
}

#[test]
fn idle_proxy_with_admin_on_does_not_wake_up() {
    let proxy = admin_on(Policy::default(), false);
    let a = admin_addr(&proxy);
    assert_eq!(get(a, "/metrics").0, 200);
    assert_eq!(get(a, "/stats").0, 200);
    // The endpoint has closed both connections (it closed first): once
    // asleep, the reactor has handled every event they caused; with no
    // timeout, no timer is left to wake it.
    let parked = wait_reactor_parked_for_good(proxy_addr(&proxy));
    let s1 = proxy.stats();
    parked.assert_still_asleep();
    let s2 = proxy.stats();
    assert_eq!(s1.wakeups, s2.wakeups, "idle proxy woke up: {s1} then {s2}");
    // And it still answers.
    assert_eq!(get(a, "/metrics").0, 200);
}

/// The address in the binary's `admin endpoint on ADDR: ...` line.
fn logged_admin_addr(proxy: &ChildProxy) -> SocketAddr {
    let mut addr = None;
    wait_for("the admin endpoint's line", PROMPTLY, || {
        addr = proxy.log().iter().find_map(|l| {
            let rest = &l[l.find("admin endpoint on ")? + "admin endpoint on ".len()..];
            rest.split(':')
                .take(2)
                .collect::<Vec<_>>()
                .join(":")
                .parse()
                .ok()
        });
        addr.is_some()
    });
    addr.unwrap()
}

#[track_caller]
fn assert_own_address_refused(proxy: SocketAddr, target: &str, what: &str) {
    let (_s, head) = http_connect(proxy, target, &[]).expect("an answer");
    assert_eq!(head.status, 403, "{what}: {}", head.raw);
    let cause = head.header("X-Proxy-Error").unwrap_or_default();
    assert!(
        cause.starts_with("denied; own-address="),
        "{what}: {}",
        head.raw
    );
}

#[test]
fn a_rule_allowing_loopback_does_not_reach_the_proxy_itself() {
    let origin = echo_server();
    // A free port (`127.0.0.1:0` would clash with the listener's own `:0`).
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let proxy = ChildProxy::start(&[
        "--allow",
        "127.0.0.0/8",
        "--allow",
        "localhost",
        "--admin",
        &free,
        "--admin-control",
    ]);
    let admin = logged_admin_addr(&proxy);
    let own = proxy.addr;
    // CONNECT to the admin endpoint and to the proxy's own listener, by
    // address, by another loopback address and by name (after DNS).
    assert_own_address_refused(own, &admin.to_string(), "the admin endpoint");
    assert_own_address_refused(own, &own.to_string(), "the own listener");
    assert_own_address_refused(own, &format!("127.0.0.2:{}", own.port()), "127.0.0.2");
    assert_own_address_refused(own, &format!("localhost:{}", admin.port()), "by name");
    // SOCKS5: not allowed.
    assert_eq!(
        connect_via_socks5(own, "127.0.0.1", admin.port()).err(),
        Some(0x02)
    );
    // The forward proxy: 403, nothing sent to the admin endpoint.
    let mut s = TcpStream::connect(own).unwrap();
    write!(
        s,
        "GET http://{admin}/stats HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let head = read_response_head(&mut s).unwrap();
    assert_eq!(head.status, 403, "{}", head.raw);
    assert!(
        head.header("X-Proxy-Error")
            .is_some_and(|c| c.starts_with("denied; own-address=")),
        "{}",
        head.raw
    );
    drop(s);
    // Another loopback port is still allowed.
    let mut s = connect_via_http(own, &origin.target());
    assert_echo(&mut s, b"other loopback ports are fine");
    wait_for("each refusal logged as a deny", PROMPTLY, || {
        proxy
            .log()
            .iter()
            .filter(|l| l.contains("event=session") && l.contains("decision=deny"))
            .count()
            >= 6
    });
}

#[test]
fn a_listener_on_every_address_is_ours_on_each_of_them() {
    // The host's own non-loopback address (a route lookup; nothing is sent).
    let Some(host_ip) = std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| s.connect("192.0.2.1:9").map(|_| s))
        .and_then(|s| s.local_addr())
        .ok()
        .map(|a| a.ip())
        .filter(|ip| !ip.is_loopback() && !ip.is_unspecified())
    else {
        eprintln!("no non-loopback address here: nothing to check");
        return;
    };
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_portcullis"));
    cmd.args(["--listen", "0.0.0.0:0", "--allow", &format!("{host_ip}/32")]);
    let proxy = ChildProxy::start_command(cmd);
    let port = proxy.addr.port();
    let local: SocketAddr = (std::net::Ipv4Addr::LOCALHOST, port).into();
    assert_own_address_refused(
        local,
        &SocketAddr::new(host_ip, port).to_string(),
        "the host's address",
    );
}

#[test]
fn control_errors_say_what_was_expected_and_name_the_command() {
    let proxy = admin_on(Policy::default(), true);
    let a = admin_addr(&proxy);
    // Not JSON: the answer says what a line must be.
    let v = control_line(a, "{stats please}");
    assert_eq!(v["ok"], false, "{v}");
    let e = v["error"].as_str().unwrap();
    assert!(
        e.contains("not JSON") && e.contains(r#"{"cmd":"stats"}"#),
        "{v}"
    );
    assert!(v.get("cmd").is_none(), "{v}");
    // A known command with bad arguments: the answer names it.
    for (line, cmd) in [
        (r#"{"cmd":"close-session","id":"x"}"#, "close-session"),
        (r#"{"cmd":"close-session"}"#, "close-session"),
        (
            r#"{"cmd":"add-rule","rule":{"name":"x","action":"maybe","host":"a"}}"#,
            "add-rule",
        ),
        (r#"{"cmd":"stats","extra":1}"#, "stats"),
    ] {
        let v = control_line(a, line);
        assert_eq!(v["ok"], false, "{line}: {v}");
        assert_eq!(v["cmd"], cmd, "{line}: {v}");
    }
    // A whole command but no newline before EOF: an error line, not run.
    let mut s = TcpStream::connect(a).unwrap();
    s.set_read_timeout(Some(PROMPTLY)).unwrap();
    s.write_all(br#"{"cmd":"add-rule","rule":{"name":"late","action":"allow","host":"a.test"}}"#)
        .unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert_eq!(answer.lines().count(), 1, "{answer:?}");
    let v: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(v["ok"], false, "{v}");
    assert_eq!(v["cmd"], "add-rule", "{v}");
    assert!(
        v["error"].as_str().unwrap().contains("incomplete line"),
        "{v}"
    );
    let v = control_line(
        a,
        r#"{"cmd":"add-rule","rule":{"name":"probe","action":"allow","host":"b.test"}}"#,
    );
    assert_eq!(
        v["rules"],
        serde_json::json!(["probe"]),
        "nothing changed: {v}"
    );
}
