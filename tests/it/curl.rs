//! curl through the proxy, both protocols, allowed and denied, plus a
//! DNS-rebinding style refusal: a host rule for `localhost` must not let
//! the name reach a loopback address that no rule names.

use crate::support;

use portcullis::CloseReason;
use support::*;

const BODY: &str = "hello from the loopback origin\n";

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn curl_through_connect_allowed() {
    let origin = http_server(BODY);
    let proxy = start_proxy(allow_ports(&[origin.port()]));
    let p = proxy_addr(&proxy);
    let out = curl(&[
        "-sS",
        "-p",
        "-x",
        &format!("http://{p}"),
        &format!("http://{}/", origin.target()),
    ]);
    assert!(out.status.success(), "curl failed: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout), BODY);
    assert_eq!(origin.accepted(), 1);
    wait_no_open_sessions(&proxy);
    let s = proxy.stats();
    assert_eq!(s.accepted, 1);
    assert_eq!(s.allowed, 1);
    assert_eq!(s.denied, 0);
}

#[test]
fn curl_through_socks5h_allowed() {
    let origin = http_server(BODY);
    let proxy = start_proxy(allow_ports(&[origin.port()]));
    let p = proxy_addr(&proxy);
    let out = curl(&[
        "-sS",
        "--proxy",
        &format!("socks5h://{p}"),
        &format!("http://{}/", origin.target()),
    ]);
    assert!(out.status.success(), "curl failed: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout), BODY);
    assert_eq!(origin.accepted(), 1);
    wait_no_open_sessions(&proxy);
    assert_eq!(proxy.stats().allowed, 1);
}

#[test]
fn curl_through_connect_denied() {
    let allowed = http_server(BODY);
    let denied = must_not_accept();
    let proxy = start_proxy(allow_ports(&[allowed.port()]));
    let p = proxy_addr(&proxy);

    let out = curl(&[
        "-sS",
        "-v",
        "-p",
        "-x",
        &format!("http://{p}"),
        &format!("http://{}/", denied.target()),
    ]);
    assert!(
        !out.status.success(),
        "curl through a denied CONNECT succeeded"
    );
    let err = text(&out.stderr);
    assert!(err.contains("403"), "curl -v shows no 403: {err}");
    assert!(
        err.to_ascii_lowercase().contains("x-proxy-error"),
        "curl -v shows no X-Proxy-Error header: {err}"
    );
    assert!(!text(&out.stdout).contains(BODY));

    // The same with a raw CONNECT, to look at the answer precisely.
    let (mut s, head) = http_connect(p, &denied.target(), &[]).expect("raw CONNECT");
    assert_eq!(head.status, 403, "{}", head.raw);
    assert!(
        head.header("X-Proxy-Error").is_some_and(|v| !v.is_empty()),
        "403 without X-Proxy-Error: {}",
        head.raw
    );
    expect_closed(&mut s, "denied CONNECT");

    assert_eq!(denied.accepted(), 0, "the denied target was connected to");
    wait_no_open_sessions(&proxy);
    let st = proxy.stats();
    assert_eq!(st.denied, 2);
    assert_eq!(st.closed.get(CloseReason::Denied), 2);
}

#[test]
fn curl_through_socks5h_denied() {
    let allowed = http_server(BODY);
    let denied = must_not_accept();
    let proxy = start_proxy(allow_ports(&[allowed.port()]));
    let p = proxy_addr(&proxy);

    let out = curl(&[
        "-sS",
        "--proxy",
        &format!("socks5h://{p}"),
        &format!("http://{}/", denied.target()),
    ]);
    assert!(
        !out.status.success(),
        "curl through a denied SOCKS5 succeeded"
    );
    assert!(!text(&out.stdout).contains(BODY));

    // Raw client: the reply code must be 0x02 (not allowed by ruleset),
    // for the IPv4 address and for it spelled as an IPv4-mapped IPv6 address.
    assert_eq!(
        connect_via_socks5(p, "127.0.0.1", denied.port()).err(),
        Some(0x02)
    );
    assert_eq!(
        connect_via_socks5(p, "::ffff:127.0.0.1", denied.port()).err(),
        Some(0x02)
    );

    assert_eq!(denied.accepted(), 0, "the denied target was connected to");
    wait_no_open_sessions(&proxy);
    assert_eq!(proxy.stats().denied, 3);
}

/// `--allow localhost:PORT` is a host rule: the name is allowed, but it
/// resolves to loopback and no rule names a loopback address, so the proxy
/// must refuse rather than dial 127.0.0.1.
#[test]
fn host_rule_does_not_reach_loopback() {
    let origin = must_not_accept();
    let proxy = start_proxy(allow_rules(&[&format!("localhost:{}", origin.port())]));
    let p = proxy_addr(&proxy);
    let url = format!("http://localhost:{}/", origin.port());

    let out = curl(&["-sS", "--proxy", &format!("socks5h://{p}"), &url]);
    assert!(!out.status.success(), "socks5h to localhost succeeded");

    let out = curl(&["-sS", "-v", "-p", "-x", &format!("http://{p}"), &url]);
    assert!(!out.status.success(), "CONNECT to localhost succeeded");
    assert!(text(&out.stderr).contains("403"), "{}", text(&out.stderr));

    let (mut s, head) =
        http_connect(p, &format!("localhost:{}", origin.port()), &[]).expect("raw CONNECT");
    assert_eq!(head.status, 403, "{}", head.raw);
    assert!(head.header("X-Proxy-Error").is_some(), "{}", head.raw);
    expect_closed(&mut s, "refused CONNECT");

    assert_eq!(
        connect_via_socks5(p, "localhost", origin.port()).err(),
        Some(0x02)
    );

    assert_eq!(origin.accepted(), 0, "a loopback address was dialled");
    wait_no_open_sessions(&proxy);
    let st = proxy.stats();
    assert_eq!(st.allowed, 0);
    assert_eq!(st.denied, 4);
}
