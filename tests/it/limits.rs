//! Session and handshake limits: past a limit the new client gets a clear
//! refusal (HTTP 503 `X-Proxy-Error: limit; <which>`, SOCKS5 `[5,0]` then a
//! reply with code 0x01), the session closes with reason `limit`, and the
//! sessions already open are untouched. Per-client limits count a loopback
//! client by the uid owning its socket, whatever source address it binds:
//! 127.0.0.2 from the same uid is the same client, and a socket of another
//! uid (made under its fsuid) is another client.

use crate::load;
use crate::support;

use std::net::{SocketAddr, TcpStream};

use load::*;
use portcullis::{CloseReason, Limits, SpawnedProxy};
use support::*;

fn proxy_with(echo: &Server, limits: Limits) -> SpawnedProxy {
    spawn(proxy_builder(allow_ports(&[echo.port()])).limits(limits))
}

/// A client from source address `src`, as `nobody` when `src` ends in `@nobody`.
fn from(src: &str, p: SocketAddr) -> TcpStream {
    let s = match src.strip_suffix("@nobody") {
        Some(addr) => connect_as(NOBODY, ip(addr), p),
        None => connect_from(ip(src), p),
    }
    .expect("connect to the proxy");
    s.set_read_timeout(Some(PROMPTLY)).unwrap();
    s
}

/// A CONNECT tunnel to the echo server from source `src`.
#[track_caller]
fn tunnel_from(src: &str, p: SocketAddr, echo: &Server) -> TcpStream {
    let mut s = from(src, p);
    let head = http_connect_raw(&mut s, &echo.target()).expect("CONNECT");
    assert_eq!(head.status, 200, "CONNECT from {src}: {}", head.raw);
    assert_echo(&mut s, b"first");
    s
}

/// An HTTP client from `src` refused with 503 and `X-Proxy-Error: limit; <which>`, then closed.
#[track_caller]
fn expect_http_limit(src: &str, p: SocketAddr, echo: &Server, which: &str) {
    let mut s = from(src, p);
    let head = http_connect_raw(&mut s, &echo.target())
        .unwrap_or_else(|e| panic!("no answer past the {which} limit: {e}"));
    assert_eq!(head.status, 503, "past the {which} limit: {}", head.raw);
    assert_eq!(
        head.header("X-Proxy-Error"),
        Some(format!("limit; {which}").as_str()),
        "{}",
        head.raw
    );
    expect_closed(&mut s, "after a 503 limit answer");
}

/// A SOCKS5 client from `src` gets `[5,0]` right after its greeting and then a
/// 10-byte reply with code 0x01, then the close.
#[track_caller]
fn expect_socks_limit(src: &str, p: SocketAddr) {
    let mut s = from(src, p);
    let got = socks_greeting_answer(&mut s, 12).expect("SOCKS5 answer");
    assert_eq!(got.len(), 12, "SOCKS5 answer past a limit: {got:?}");
    assert_eq!(&got[..2], &[5, 0], "method selection: {got:?}");
    assert_eq!(got[2], 5, "reply version: {got:?}");
    assert_eq!(got[3], 0x01, "reply code (general failure): {got:?}");
    assert_eq!(got[5], 0x01, "reply ATYP IPv4 (10-byte reply): {got:?}");
    expect_closed(&mut s, "after a SOCKS5 limit reply");
}

#[track_caller]
fn echo_all(tunnels: &mut [TcpStream], what: &str) {
    for (i, t) in tunnels.iter_mut().enumerate() {
        assert_echo(t, format!("{what} {i}").as_bytes());
    }
}

#[test]
fn max_sessions_refuses_the_next_client_and_spares_the_rest() {
    let echo = echo_server();
    let proxy = proxy_with(
        &echo,
        limits(|t| {
            t.max_sessions = 3;
        }),
    );
    let p = proxy_addr(&proxy);
    let mut open: Vec<_> = (0..3).map(|_| tunnel_from("127.0.0.1", p, &echo)).collect();
    wait_for("three established", PROMPTLY, || {
        proxy.stats().open.established == 3
    });

    expect_http_limit("127.0.0.1", p, &echo, "max_sessions");
    // max_sessions is global: another client is refused too.
    expect_http_limit("127.0.0.2@nobody", p, &echo, "max_sessions");
    expect_socks_limit("127.0.0.1", p);
    echo_all(&mut open, "after the refusals");

    wait_for("three limit closes", PROMPTLY, || {
        proxy.stats().closed.get(CloseReason::Limit) == 3
    });
    let st = proxy.stats();
    assert_eq!(st.open.established, 3, "{st}");
    assert_eq!(st.open.total(), 3, "{st}");

    // A slot frees when a tunnel ends: the next client is served, by SOCKS5
    // this time, and the one after it is refused again.
    drop(open.pop());
    wait_for("two open", PROMPTLY, || proxy.stats().open.total() == 2);
    let mut s = connect_via_socks5(p, "127.0.0.1", echo.port())
        .unwrap_or_else(|code| panic!("SOCKS5 under the limit refused with {code:#04x}"));
    s.set_read_timeout(Some(PROMPTLY)).unwrap();
    assert_echo(&mut s, b"served once a slot freed");
    open.push(s);
    expect_http_limit("127.0.0.1", p, &echo, "max_sessions");
    echo_all(&mut open, "at the end");
}

#[test]
fn max_sessions_socks5_refusal_is_method_then_general_failure() {
    let echo = echo_server();
    let proxy = proxy_with(
        &echo,
        limits(|t| {
            t.max_sessions = 1;
        }),
    );
    let p = proxy_addr(&proxy);
    let mut s = connect_via_socks5(p, "127.0.0.1", echo.port()).expect("first SOCKS5 tunnel");
    s.set_read_timeout(Some(PROMPTLY)).unwrap();
    assert_echo(&mut s, b"one");
    for _ in 0..3 {
        expect_socks_limit("127.0.0.1", p);
        expect_http_limit("127.0.0.1", p, &echo, "max_sessions");
    }
    assert_echo(&mut s, b"still one");
    wait_for("six limit closes", PROMPTLY, || {
        proxy.stats().closed.get(CloseReason::Limit) == 6
    });
    assert_eq!(proxy.stats().open.established, 1);
}

#[test]
fn max_sessions_per_client_counts_per_uid_not_per_loopback_address() {
    let echo = echo_server();
    let proxy = proxy_with(
        &echo,
        limits(|t| {
            t.max_sessions_per_client = 2;
        }),
    );
    let p = proxy_addr(&proxy);
    let mut open = vec![
        tunnel_from("127.0.0.1", p, &echo),
        tunnel_from("127.0.0.1", p, &echo),
    ];
    expect_http_limit("127.0.0.1", p, &echo, "max_sessions_per_client");
    expect_socks_limit("127.0.0.1", p);
    // Another loopback address of the same uid is the same client.
    expect_http_limit("127.0.0.2", p, &echo, "max_sessions_per_client");

    // Another uid is another client, from any address: it gets its own two.
    open.push(tunnel_from("127.0.0.2@nobody", p, &echo));
    open.push(tunnel_from("127.0.0.1@nobody", p, &echo));
    expect_http_limit("127.0.0.3@nobody", p, &echo, "max_sessions_per_client");
    echo_all(&mut open, "after the per-client refusals");

    let st = proxy.stats();
    assert_eq!(st.open.established, 4, "{st}");
    wait_for("four limit closes", PROMPTLY, || {
        proxy.stats().closed.get(CloseReason::Limit) == 4
    });
}

#[test]
fn max_pending_handshakes_refuses_past_the_limit_and_keeps_the_pending_ones() {
    let echo = echo_server();
    let proxy = proxy_with(
        &echo,
        limits(|t| {
            t.max_pending_handshakes = 2;
        }),
    );
    let p = proxy_addr(&proxy);
    // Two clients that connect and say nothing yet: two pending handshakes.
    let mut quiet: Vec<_> = (0..2).map(|_| from("127.0.0.1", p)).collect();
    wait_for("two pending handshakes", PROMPTLY, || {
        proxy.stats().open.handshake == 2
    });
    expect_http_limit("127.0.0.1", p, &echo, "max_pending_handshakes");
    expect_http_limit("127.0.0.2@nobody", p, &echo, "max_pending_handshakes");
    expect_socks_limit("127.0.0.2@nobody", p);
    assert!(proxy.stats().open.handshake <= 2, "{}", proxy.stats());

    // The pending ones were untouched: they complete their handshake now.
    for (i, s) in quiet.iter_mut().enumerate() {
        let head = http_connect_raw(s, &echo.target()).expect("late CONNECT");
        assert_eq!(head.status, 200, "pending client {i}: {}", head.raw);
        assert_echo(s, b"late but fine");
    }
    // No handshake pending any more: a new client is served.
    let mut t = tunnel_from("127.0.0.1", p, &echo);
    assert_echo(&mut t, b"after");
    assert_eq!(proxy.stats().closed.get(CloseReason::Limit), 3);
}

#[test]
fn max_pending_handshakes_per_client_spares_other_clients() {
    let echo = echo_server();
    let proxy = proxy_with(
        &echo,
        limits(|t| {
            t.max_pending_handshakes_per_client = 2;
        }),
    );
    let p = proxy_addr(&proxy);
    let mut established = tunnel_from("127.0.0.1", p, &echo);
    let _quiet: Vec<_> = (0..2).map(|_| from("127.0.0.1", p)).collect();
    wait_for("two pending handshakes", PROMPTLY, || {
        proxy.stats().open.handshake == 2
    });
    expect_http_limit("127.0.0.1", p, &echo, "max_pending_handshakes_per_client");
    expect_socks_limit("127.0.0.1", p);
    // Another loopback address is not another client; another uid is.
    expect_http_limit("127.0.0.2", p, &echo, "max_pending_handshakes_per_client");
    let mut other = tunnel_from("127.0.0.2@nobody", p, &echo);
    assert_echo(&mut other, b"served");
    // An established tunnel of the limited client is not a pending handshake.
    assert_echo(&mut established, b"untouched");
    wait_for("the three refusals closed", PROMPTLY, || {
        proxy.stats().closed.get(CloseReason::Limit) >= 3
    });
    let st = proxy.stats();
    assert_eq!(st.closed.get(CloseReason::Limit), 3, "{st}");
    assert_eq!(st.open.established, 2, "{st}");
}
