//! The addresses of inspected names, before raw connections are decided
//! (audit of issue 9, holes H1 and H2): a policy whose inspecting rule
//! names `localhost` must inspect connections to 127.0.0.1 from its first
//! moment, however broad another allow is, and a reload that brings such a
//! rule closes raw tunnels to the name's addresses even when the name was
//! never resolved before.

use crate::support;

use std::net::TcpStream;

use portcullis::policy::{Action, RequestRuleConfig, RuleConfig};
use portcullis::{CloseReason, Policy};
use support::*;

/// The origin answers every request with its request line.
fn origin() -> Server {
    request_line_server()
}

/// A plain allow for all of loopback on `port`.
fn loopback(port: u16) -> RuleConfig {
    RuleConfig::builder(Action::Allow)
        .name("loopback-web")
        .cidr("127.0.0.0/8")
        .port(port)
        .build()
}

/// `api`: the name `localhost` on `port`, inspected, `/v1/admin/**` denied.
fn api(port: u16) -> RuleConfig {
    RuleConfig::allow("localhost")
        .name("api")
        .port(port)
        .inspect()
        .request(RequestRuleConfig::allow("*", "/**"))
        .request(RequestRuleConfig::deny("*", "/v1/admin/**"))
        .build()
}

/// One request on an open tunnel; the status line of the answer.
fn get(s: &mut TcpStream, port: u16, path: &str) -> String {
    get_status_line(s, &format!("127.0.0.1:{port}"), path)
}

#[test]
fn the_first_connection_by_address_is_already_inspected() {
    let up = origin();
    let port = up.port();
    for round in 0..5 {
        let policy = Policy::from_rules(&[api(port), loopback(port)]).unwrap();
        let proxy = start_proxy(policy);
        // At once, before the proxy could have resolved `localhost` had it
        // not waited for it.
        let mut s = connect_via_http(proxy_addr(&proxy), &format!("127.0.0.1:{port}"));
        let status = get(&mut s, port, "/v1/admin/secret");
        assert!(status.contains("403"), "round {round}: {status}");
    }
}

#[test]
fn a_reload_that_brings_an_inspected_name_closes_raw_tunnels_to_its_address() {
    let up = origin();
    let port = up.port();
    let proxy = start_proxy(Policy::from_rules(&[loopback(port)]).unwrap());
    let p = proxy_addr(&proxy);
    // Raw tunnels to the address `localhost` will turn out to have.
    let mut by_literal = connect_via_http(p, &format!("127.0.0.1:{port}"));
    assert!(get(&mut by_literal, port, "/v1/admin/secret").contains("200"));
    let mut by_socks = connect_via_socks5(p, "127.0.0.1", port).expect("SOCKS5");
    assert!(get(&mut by_socks, port, "/v1/admin/secret").contains("200"));

    // The new policy inspects `localhost`, a name nobody resolved yet.
    proxy.reload(Policy::from_rules(&[api(port), loopback(port)]).unwrap());
    expect_closed(&mut by_literal, "the raw tunnel by literal");
    expect_closed(&mut by_socks, "the raw tunnel over SOCKS5");
    wait_for("two policy-reload closes", PROMPTLY, || {
        proxy.stats().closed.get(CloseReason::PolicyReload) == 2
    });
    // And a new connection by address is inspected.
    let mut s = connect_via_http(p, &format!("127.0.0.1:{port}"));
    assert!(get(&mut s, port, "/v1/admin/secret").contains("403"));
}
