//! Policy reload: tunnels the new policy no longer allows are closed, the
//! rest carry on, and new connections follow the new policy at once.

use crate::support;

use std::io::Write;
use std::time::Duration;

use portcullis::{CloseReason, Policy};
use support::*;

#[test]
fn reload_closes_only_tunnels_no_longer_allowed() {
    let up1 = echo_server();
    let up2 = echo_server();
    let proxy = start_proxy(allow_ports(&[up1.port(), up2.port()]));
    let p = proxy_addr(&proxy);

    let mut a = connect_via_http(p, &up1.target());
    let mut b = connect_via_socks5(p, "127.0.0.1", up2.port()).expect("SOCKS5 to upstream 2");
    assert_echo(&mut a, b"A before reload");
    assert_echo(&mut b, b"B before reload");
    let bg = {
        let c = connect_via_http(p, &up2.target());
        BackgroundTunnel::start(c, 0x7e10ad)
    };
    bg.check("setup");
    assert_eq!(proxy.stats().open.established, 3);

    proxy.reload(allow_ports(&[up2.port()]));

    // A is closed: the client sees EOF (or a reset), promptly.
    let rest = expect_closed(&mut a, "tunnel A after the reload");
    assert!(rest.is_empty(), "unexpected bytes on A: {rest:?}");
    wait_for("the policy-reload tally", PROMPTLY, || {
        proxy.stats().closed.get(CloseReason::PolicyReload) == 1
    });

    // B and the background tunnel keep relaying.
    assert_echo(&mut b, b"B after reload");
    bg.check("reload");

    // New connections use the new policy.
    let (mut s, head) = http_connect(p, &up1.target(), &[]).expect("CONNECT after reload");
    assert_eq!(head.status, 403, "{}", head.raw);
    assert!(head.header("X-Proxy-Error").is_some(), "{}", head.raw);
    expect_closed(&mut s, "refused CONNECT");
    assert_eq!(
        connect_via_socks5(p, "127.0.0.1", up1.port()).err(),
        Some(0x02)
    );
    let mut c = connect_via_http(p, &up2.target());
    assert_echo(&mut c, b"new tunnel to upstream 2");

    assert_eq!(up1.accepted(), 1, "upstream 1 was dialled after the reload");
    let st = proxy.stats();
    assert_eq!(st.closed.get(CloseReason::PolicyReload), 1, "{st}");
    assert_eq!(st.open.established, 3, "{st}");
    assert!(bg.finish() > 0);
}

#[test]
fn reload_to_the_same_policy_keeps_everything() {
    let up = echo_server();
    let proxy = start_proxy(allow_ports(&[up.port()]));
    let p = proxy_addr(&proxy);
    let mut a = connect_via_http(p, &up.target());
    assert_echo(&mut a, b"before");
    proxy.reload(allow_ports(&[up.port()]));
    // The reload is asynchronous and the API has no acknowledgement; a new
    // session afterwards makes it very likely to have been processed.
    let mut b = connect_via_http(p, &up.target());
    assert_echo(&mut b, b"new");
    assert_echo(&mut a, b"after");
    let st = proxy.stats();
    assert_eq!(st.closed.get(CloseReason::PolicyReload), 0, "{st}");
    assert_eq!(st.open.established, 2, "{st}");
}

/// An inspected session the new policy still allows stays open, and checks
/// its next request against the new request rules.
#[test]
fn reload_applies_new_request_rules_to_open_inspected_sessions() {
    let origin = Origin::start(|r| ok(&format!("{} {}", r.method, r.target)));
    let policy = |requests: &str| {
        Policy::parse_toml(&format!(
            "[[rules]]\nname = \"api\"\naction = \"allow\"\nhost = \"127.0.0.1\"\nports = [{}]\ninspect = \"http\"\nrequests = [{requests}]\n",
            origin.port()
        ))
        .expect("policy compiles")
    };
    let proxy = start_proxy(policy(r#"{ action = "allow", path = "/**" }"#));
    let mut c = HttpConn::new(connect_via_http(proxy_addr(&proxy), &origin.target()));
    let get = |path: &str| format!("GET {path} HTTP/1.1\r\nHost: {}\r\n\r\n", origin.target());

    c.send(get("/admin/a"));
    assert_eq!(c.response("GET").status, 200, "allowed before the reload");

    proxy.reload(policy(
        r#"{ action = "allow", path = "/**" }, { action = "deny", path = "/admin/**" }"#,
    ));
    // The reload is applied on the reactor thread: poll with fresh requests
    // on the same connection until the new rules answer (bounded).
    let denied = wait_until(Duration::from_secs(5), || {
        c.send(get("/admin/b"));
        c.response("GET").status == 403
    });
    assert!(
        denied,
        "the open inspected session never saw the new request rules"
    );
    c.send(get("/public"));
    assert_eq!(c.response("GET").status, 200, "the session stayed usable");
    assert_eq!(proxy.stats().closed.get(CloseReason::PolicyReload), 0);
}

/// A raw tunnel opened under a plain allow is closed when a reload allows
/// its target only under inspection: it cannot be inspected after the fact.
#[test]
fn reload_to_inspection_closes_raw_tunnels() {
    use portcullis::policy::parse_cli_inspect;
    let up = echo_server();
    let proxy = start_proxy(allow_ports(&[up.port()]));
    let p = proxy_addr(&proxy);
    let mut raw = connect_via_http(p, &up.target());
    assert_echo(&mut raw, b"raw before the reload");

    let inspected = Policy::from_rules(&[parse_cli_inspect(&up.target()).unwrap()]).unwrap();
    proxy.reload(inspected);
    let rest = expect_closed(&mut raw, "raw tunnel after a reload to inspection");
    assert!(rest.is_empty(), "{rest:?}");
    wait_for("the policy-reload tally", PROMPTLY, || {
        proxy.stats().closed.get(CloseReason::PolicyReload) == 1
    });
    // A new CONNECT to the same target is inspected now: raw bytes that are
    // not HTTP get a 400, not an echo.
    let mut s = connect_via_http(p, &up.target());
    s.write_all(b"not http\r\n\r\n").unwrap();
    let head = read_response_head(&mut s).expect("an answer from the inspector");
    assert_eq!(head.status, 400, "{}", head.raw);
}

/// An echo server on `addr`.
fn echo_on(addr: &str) -> Server {
    Server::start_on(addr.parse().unwrap(), |mut s| {
        let mut r = s.try_clone().unwrap();
        let _ = std::io::copy(&mut r, &mut s);
    })
}

/// Problem 3 by address, with the binary and SIGHUP: raw tunnels opened
/// under a plain CIDR allow to the address of `api.test` (by literal, by
/// SOCKS5 ATYP 1, through the alias `alias.test`) are closed with reason
/// policy-reload when the reloaded policy inspects `api.test` on their
/// port; a tunnel to another address of the range carries on. The name was
/// resolved before the reload (the first policy inspects it on another
/// port). At a public address in a network namespace (see
/// support/netns.rs): a name rule does not open loopback.
#[test]
fn reload_to_inspection_closes_raw_tunnels_to_the_inspected_names_address() {
    in_netns(&["45.45.45.45", "45.45.45.46"], || {
        let up = echo_on("45.45.45.45:0");
        let port = up.port();
        let _other = echo_on(&format!("45.45.45.46:{port}"));
        let dir = TempDir::new("reload-by-address");
        let hosts = dir.0.join("hosts");
        std::fs::write(
            &hosts,
            "127.0.0.1 localhost\n45.45.45.45 api.test alias.test\n",
        )
        .unwrap();
        let cfg = dir.0.join("portcullis.toml");
        let write = |api_ports: &str| {
            let text = format!(
                "[[rules]]\nname = \"api\"\naction = \"allow\"\nhost = \"api.test\"\n\
                 ports = {api_ports}\ninspect = \"http\"\n\n\
                 [[rules]]\nname = \"net\"\naction = \"allow\"\ncidr = \"45.45.45.0/24\"\n\
                 port = {port}\n"
            );
            std::fs::write(&cfg, text).unwrap();
        };
        // `api` inspects another port: its name is resolved and remembered,
        // tunnels on `port` are raw.
        let elsewhere = if port == 1 { 2 } else { port - 1 };
        write(&format!("[{elsewhere}]"));
        let proxy = ChildProxy::with_hosts(&hosts, &["--config", cfg.to_str().unwrap()]);
        let p = proxy.addr;
        // Resolved at start; a client's lookup under `api` makes sure,
        // whatever the timing (nothing listens there: a 502 is fine).
        let _ = http_connect(p, &format!("api.test:{elsewhere}"), &[]);
        let mut tunnels = vec![
            (
                "CONNECT 45.45.45.45",
                connect_via_http(p, &format!("45.45.45.45:{port}")),
            ),
            (
                "SOCKS5 ATYP 1",
                connect_via_socks5(p, "45.45.45.45", port).expect("SOCKS5"),
            ),
            (
                "CONNECT alias.test",
                connect_via_http(p, &format!("alias.test:{port}")),
            ),
        ];
        let mut other = connect_via_http(p, &format!("45.45.45.46:{port}"));
        for (what, s) in &mut tunnels {
            assert_echo(s, format!("{what}: raw before the reload").as_bytes());
        }
        assert_echo(&mut other, b"other before the reload");

        write(&format!("[{elsewhere}, {port}]"));
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(proxy.pid() as i32),
            nix::sys::signal::Signal::SIGHUP,
        )
        .unwrap();
        for (what, s) in &mut tunnels {
            let rest = expect_closed(s, &format!("{what} after a reload to inspection"));
            assert!(rest.is_empty(), "{what}: {rest:?}");
        }
        assert_echo(&mut other, b"other after the reload");
        wait_for("three policy-reload closes", PROMPTLY, || {
            proxy
                .log()
                .iter()
                .filter(|l| l.contains("event=session") && l.contains("close=policy-reload"))
                .count()
                == 3
        });
    });
}
