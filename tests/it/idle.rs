//! Idleness: an idle proxy does not wake up; an idle tunnel lives forever
//! without an idle timeout, and is closed when one is set (globally or by rule).

use crate::support;

use std::thread;
use std::time::Duration;

use portcullis::policy::{parse_cli_rule, Action};
use portcullis::{CloseReason, Policy, Timeouts};
use support::*;

fn with_idle(idle: Duration) -> Timeouts {
    timeouts(|t| {
        t.idle = Some(idle);
    })
}

#[test]
fn idle_proxy_does_not_wake_up() {
    let echo = echo_server();
    let proxy = start_proxy(allow_ports(&[echo.port()]));
    // One session first, so the reactor is surely running and has had work.
    let mut s = connect_via_http(proxy_addr(&proxy), &echo.target());
    assert_echo(&mut s, b"warm up");
    drop(s);
    wait_no_open_sessions(&proxy);

    let s1 = proxy.stats();
    // Asleep with no timer armed: nothing but a new event wakes it.
    let parked = wait_reactor_parked_for_good(proxy_addr(&proxy));
    let s2 = proxy.stats();
    parked.assert_still_asleep();
    assert_eq!(s1.wakeups, s2.wakeups, "idle proxy woke up: {s1} then {s2}");
    assert_eq!(s1.events, s2.events);
}

#[test]
fn idle_tunnel_without_timeout_stays_open() {
    let echo = echo_server();
    let proxy = start_proxy(allow_ports(&[echo.port()]));
    let mut s = connect_via_http(proxy_addr(&proxy), &echo.target());
    assert_echo(&mut s, b"before the pause");

    let s1 = proxy.stats();
    // Nothing to do while the tunnel is quiet: no timers, no wakeups.
    let parked = wait_reactor_parked_for_good(proxy_addr(&proxy));
    let s2 = proxy.stats();
    parked.assert_still_asleep();
    assert_eq!(s2.open.established, 1, "{s2}");
    assert_eq!(s2.closed.total(), 0, "{s2}");
    assert_eq!(s1.wakeups, s2.wakeups, "{s1} then {s2}");

    assert_echo(&mut s, b"after the pause");
}

#[test]
fn idle_tunnel_is_closed_by_the_idle_timeout() {
    let echo = echo_server();
    let proxy = spawn(
        proxy_builder(allow_ports(&[echo.port()])).timeouts(with_idle(Duration::from_millis(500))),
    );
    let mut s = connect_via_http(proxy_addr(&proxy), &echo.target());
    assert_echo(&mut s, b"then silence");
    let rest = expect_closed(&mut s, "an idle tunnel with idle=500ms");
    assert!(rest.is_empty(), "{rest:?}");
    wait_for("the idle-timeout tally", PROMPTLY, || {
        proxy.stats().closed.get(CloseReason::IdleTimeout) == 1
    });
    wait_no_open_sessions(&proxy);
    assert_eq!(proxy.stats().closed.total(), 1);
}

#[test]
fn busy_tunnel_is_not_closed_by_the_idle_timeout() {
    let echo = echo_server();
    let proxy = spawn(
        proxy_builder(allow_ports(&[echo.port()])).timeouts(with_idle(Duration::from_secs(1))),
    );
    let mut s = connect_via_http(proxy_addr(&proxy), &echo.target());
    // Traffic every 100 ms for 3 s: ten times more often than the timeout.
    for i in 0..30 {
        assert_echo(&mut s, format!("ping {i}").as_bytes());
        thread::sleep(Duration::from_millis(100));
    }
    let st = proxy.stats();
    assert_eq!(st.closed.get(CloseReason::IdleTimeout), 0, "{st}");
    assert_eq!(st.open.established, 1, "{st}");
}

#[test]
fn rule_idle_timeout_applies_to_its_tunnels() {
    let echo = echo_server();
    let mut rule = parse_cli_rule(Action::Allow, &echo.target()).unwrap();
    rule.idle_timeout = Some("500ms".into());
    let proxy = start_proxy(Policy::from_rules(&[rule]).unwrap());
    let mut s = connect_via_http(proxy_addr(&proxy), &echo.target());
    assert_echo(&mut s, b"then silence");
    expect_closed(&mut s, "an idle tunnel whose rule sets idle_timeout=500ms");
    wait_for("the idle-timeout tally", PROMPTLY, || {
        proxy.stats().closed.get(CloseReason::IdleTimeout) == 1
    });
}
