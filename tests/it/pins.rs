//! The addresses of inspected names, before raw connections are decided
//! (audit of issue 9, holes H1 and H2): a policy whose inspecting rule
//! names `localhost` must inspect connections to 127.0.0.1 from its first
//! moment, however broad another allow is, and a reload that brings such a
//! rule closes raw tunnels to the name's addresses even when the name was
//! never resolved before.

use crate::support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

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

/// Pin rounds have a resolver lane of their own: with the one session
/// resolver thread held by lookups of names whose nameserver never answers,
/// a reload's pin round still completes and an allowed connection to an
/// inspected name goes through (before e7f86e4 it waited behind them).
#[test]
fn a_black_holed_resolver_does_not_hold_up_pin_rounds() {
    in_netns(&["45.45.45.45"], || {
        // The nameserver: takes every query, answers none.
        let _dns = std::net::UdpSocket::bind("127.0.0.1:53").expect("bind 127.0.0.1:53");
        let origin = http_server_on("45.45.45.45:0".parse().unwrap(), "pinned\n");
        let port = origin.port();
        let dir = TempDir::new("pins-blackhole");
        let hosts = dir.0.join("hosts");
        std::fs::write(&hosts, "127.0.0.1 localhost\n45.45.45.45 api.test\n").unwrap();
        let resolv = dir.0.join("resolv.conf");
        std::fs::write(
            &resolv,
            "nameserver 127.0.0.1\noptions timeout:30 attempts:5\n",
        )
        .unwrap();
        let cfg = dir.0.join("p.toml");
        std::fs::write(
            &cfg,
            format!(
                "[limits]\nresolver_threads = 1\n\n[timeouts]\nconnect = \"300s\"\n\n\
                 [[rules]]\nname = \"api\"\naction = \"allow\"\nhost = \"api.test\"\nport = {port}\ninspect = \"http\"\n\n\
                 [[rules]]\nname = \"slow\"\naction = \"allow\"\nhost = \"*.blackhole.test\"\nport = {port}\n\n\
                 [[rules]]\nname = \"net\"\naction = \"allow\"\ncidr = \"45.45.45.45/32\"\nport = {port}\n"
            ),
        )
        .unwrap();
        let mut cmd = std::process::Command::new("unshare");
        cmd.args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(r#"mount --bind "$0" /etc/hosts && mount --bind "$1" /etc/resolv.conf && shift && exec "$@""#)
            .arg(&hosts)
            .arg(&resolv)
            .arg(env!("CARGO_BIN_EXE_portcullis"))
            .args(["--listen", "127.0.0.1:0", "--config", cfg.to_str().unwrap()]);
        // `sh -c SCRIPT HOSTS RESOLV CMD...`: after the shift, "$@" is CMD.
        let proxy = ChildProxy::start_command(cmd);
        // Hold the one session resolver thread (and queue more behind it).
        let stuck: Vec<TcpStream> = (0..3)
            .map(|i| {
                let mut s = TcpStream::connect(proxy.addr).unwrap();
                let t = format!("n{i}.blackhole.test:{port}");
                write!(s, "CONNECT {t} HTTP/1.1\r\nHost: {t}\r\n\r\n").unwrap();
                s
            })
            .collect();
        wait_for("the black-holed lookups queued", PROMPTLY, || {
            proxy.stats().get("resolving").copied().unwrap_or(0) >= 3
        });
        // A reload starts a pin round, which every allowed connection waits for.
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(proxy.pid() as i32),
            nix::sys::signal::Signal::SIGHUP,
        )
        .unwrap();
        proxy.wait_for_line("the reload", |l| l.contains("policy reloaded ("));
        // Bounded far below the black hole's 150 s: the pin lane answers from /etc/hosts.
        // By address: the session needs no lookup of its own (the session
        // lane is the black hole's), only the pin round to know it is api.test's.
        let mut s = connect_via_http(proxy.addr, &format!("45.45.45.45:{port}"));
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        write!(
            s,
            "GET / HTTP/1.1\r\nHost: 45.45.45.45:{port}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer);
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with("pinned\n"), "{answer}");
        // Inspected under api's rule: the pin round knew the address.
        proxy.wait_for_line("the inspected request", |l| l.contains("event=request"));
        drop(stuck);
    });
}
