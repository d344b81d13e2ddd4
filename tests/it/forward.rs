//! The forward proxy: absolute-form requests on the HTTP listener, checked
//! per request, rewritten to origin-form with hop-by-hop headers dropped and
//! `Via` added both ways, keep-alive to the client with one upstream
//! connection per destination.

use crate::support;

use std::net::TcpStream;

use portcullis::policy::parse_cli_inspect;
use portcullis::{Policy, SpawnedProxy};
use support::*;

fn client(proxy: &SpawnedProxy) -> HttpConn {
    HttpConn::new(TcpStream::connect(proxy_addr(proxy)).expect("connect to proxy"))
}

fn get_abs(c: &mut HttpConn, url: &str, extra: &str) -> Response {
    c.send(format!(
        "GET {url} HTTP/1.1\r\nHost: ignored.example\r\n{extra}\r\n"
    ));
    c.response("GET")
}

#[test]
fn curl_through_the_forward_proxy() {
    let origin = Origin::echo_target();
    let proxy = start_proxy(allow_ports(&[origin.port()]));
    let url = format!("http://{}/some/path?q=1", origin.target());
    let p = format!("http://{}", proxy_addr(&proxy));
    let out = curl(&["-sS", "-i", "-x", &p, &url]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "curl failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.ends_with("\r\n\r\nGET /some/path?q=1"),
        "curl output: {stdout:?}"
    );
    assert!(
        stdout
            .to_ascii_lowercase()
            .contains("\r\nvia: 1.1 portcullis\r\n"),
        "{stdout:?}"
    );
    let reqs = origin.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(
        reqs[0].target, "/some/path?q=1",
        "origin-form at the origin"
    );
    assert_eq!(reqs[0].header("Via"), Some("1.1 portcullis"));
    assert_eq!(reqs[0].header("Host"), Some(origin.target().as_str()));
    wait_no_open_sessions(&proxy);
    let s = proxy.stats();
    assert_eq!(s.requests, 1, "{s:?}");
    assert_eq!(s.requests_allowed, 1, "{s:?}");
}

#[test]
fn keep_alive_reuses_one_upstream_per_destination() {
    let a = Origin::echo_target();
    let b = Origin::echo_target();
    let proxy = start_proxy(allow_ports(&[a.port(), b.port()]));
    let mut c = client(&proxy);
    let (ua, ub) = (
        format!("http://{}", a.target()),
        format!("http://{}", b.target()),
    );

    assert_eq!(get_abs(&mut c, &format!("{ua}/1"), "").text(), "GET /1");
    assert_eq!(get_abs(&mut c, &format!("{ua}/2"), "").text(), "GET /2");
    assert_eq!(
        a.accepted(),
        1,
        "two requests to one destination, one upstream"
    );

    assert_eq!(get_abs(&mut c, &format!("{ub}/3"), "").text(), "GET /3");
    assert_eq!(get_abs(&mut c, &format!("{ub}/4"), "").text(), "GET /4");
    assert_eq!(b.accepted(), 1, "another destination, its own upstream");
    assert_eq!(a.accepted(), 1);

    // Pipelined across destinations: answered in order, each by its own origin.
    c.send(format!(
        "GET {ua}/5 HTTP/1.1\r\nHost: x\r\n\r\nGET {ub}/6 HTTP/1.1\r\nHost: x\r\n\r\n"
    ));
    assert_eq!(c.response("GET").text(), "GET /5");
    assert_eq!(c.response("GET").text(), "GET /6");

    let targets = |o: &Origin| {
        o.requests()
            .into_iter()
            .map(|r| r.target)
            .collect::<Vec<_>>()
    };
    assert_eq!(targets(&a), ["/1", "/2", "/5"]);
    assert_eq!(targets(&b), ["/3", "/4", "/6"]);
    drop(c);
    wait_no_open_sessions(&proxy);
    assert_eq!(proxy.stats().requests_allowed, 6);
}

#[test]
fn hop_by_hop_headers_are_stripped_and_via_added() {
    let origin = Origin::start(|r| {
        let body = format!("{} {}", r.method, r.target);
        Reply::Bytes(
            format!(
                "HTTP/1.1 200 OK\r\nConnection: X-Resp-Hop\r\nX-Resp-Hop: 1\r\n\
                 Keep-Alive: timeout=5\r\nProxy-Authenticate: Basic realm=x\r\n\
                 Upgrade: h2c\r\nX-Resp-E2E: kept\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .into_bytes(),
        )
    });
    let proxy = start_proxy(allow_ports(&[origin.port()]));
    let mut c = client(&proxy);
    let url = format!("http://{}/h", origin.target());
    let r = get_abs(
        &mut c,
        &url,
        "Connection: keep-alive, X-Hop\r\nX-Hop: secret\r\nKeep-Alive: timeout=5\r\n\
         Proxy-Authorization: Basic Zm9vOmJhcg==\r\nProxy-Connection: keep-alive\r\n\
         TE: trailers\r\nTrailer: X-T\r\nUpgrade: h2c\r\nX-E2E: kept\r\n",
    );
    assert_eq!(r.status, 200, "{}", r.raw_head);
    assert_eq!(r.text(), "GET /h");

    let req = &origin.requests()[0];
    for h in [
        "Connection",
        "X-Hop",
        "Keep-Alive",
        "Proxy-Authorization",
        "Proxy-Connection",
        "TE",
        "Trailer",
        "Upgrade",
    ] {
        assert_eq!(
            req.header(h),
            None,
            "{h} reached the origin:\n{}",
            req.raw_head
        );
    }
    assert_eq!(req.header("X-E2E"), Some("kept"), "{}", req.raw_head);
    assert_eq!(
        req.headers_named("Via"),
        ["1.1 portcullis"],
        "{}",
        req.raw_head
    );
    assert_eq!(
        req.headers_named("Host"),
        [origin.target().as_str()],
        "Host comes from the URI: {}",
        req.raw_head
    );
    assert!(
        req.raw_head.starts_with("GET /h HTTP/1.1\r\n"),
        "{}",
        req.raw_head
    );

    for h in ["X-Resp-Hop", "Keep-Alive", "Proxy-Authenticate", "Upgrade"] {
        assert_eq!(r.header(h), None, "{h} reached the client:\n{}", r.raw_head);
    }
    assert_eq!(r.header("X-Resp-E2E"), Some("kept"), "{}", r.raw_head);
    assert_eq!(r.header("Via"), Some("1.1 portcullis"), "{}", r.raw_head);

    // Still keep-alive after all that.
    assert_eq!(get_abs(&mut c, &url, "").text(), "GET /h");
    assert_eq!(origin.accepted(), 1);
}

#[test]
fn denied_destination_gets_403_and_no_connection() {
    let origin = Origin::echo_target();
    let forbidden = must_not_accept();
    let proxy = start_proxy(allow_ports(&[origin.port()]));

    let mut c = client(&proxy);
    let r = get_abs(&mut c, &format!("http://{}/x", forbidden.target()), "");
    assert_eq!(r.status, 403, "{}", r.raw_head);
    assert!(
        r.header("X-Proxy-Error").is_some_and(|v| !v.is_empty()),
        "{}",
        r.raw_head
    );

    // After an allowed request on the same connection, too.
    let mut c = client(&proxy);
    let ok = get_abs(&mut c, &format!("http://{}/fine", origin.target()), "");
    assert_eq!(ok.text(), "GET /fine");
    let r = get_abs(&mut c, &format!("http://{}/x", forbidden.target()), "");
    assert_eq!(r.status, 403, "{}", r.raw_head);
    assert!(r.header("X-Proxy-Error").is_some(), "{}", r.raw_head);

    assert_eq!(
        forbidden.accepted(),
        0,
        "a denied destination was connected to"
    );
    assert_eq!(origin.requests().len(), 1);
}

#[test]
fn inspect_rule_applies_to_forward_requests() {
    let origin = Origin::echo_target();
    let policy = Policy::from_rules(&[parse_cli_inspect(&origin.target()).unwrap()]).unwrap();
    let proxy = start_proxy(policy);
    let mut c = client(&proxy);
    let r = get_abs(&mut c, &format!("http://{}/i", origin.target()), "");
    assert_eq!(r.text(), "GET /i");
    assert_eq!(r.header("Via"), Some("1.1 portcullis"));
}

#[test]
fn origin_form_request_is_405() {
    let origin = Origin::echo_target();
    let proxy = start_proxy(allow_ports(&[origin.port()]));
    let mut c = client(&proxy);
    c.send("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    let r = c.response("GET");
    assert_eq!(r.status, 405, "{}", r.raw_head);
    assert!(r.header("X-Proxy-Error").is_some(), "{}", r.raw_head);
    c.expect_eof("after 405");
    assert_eq!(origin.accepted(), 0);
}

/// `GET https://...`: the proxy speaks TLS to the origin itself; a
/// plaintext origin fails the handshake, a 502 saying so (never a silent
/// plaintext request).
#[test]
fn https_absolute_uri_to_a_plaintext_origin_is_502() {
    let origin = Origin::echo_target();
    let proxy = start_proxy(allow_ports(&[origin.port()]));
    let mut c = client(&proxy);
    c.send(format!(
        "GET https://{}/ HTTP/1.1\r\nHost: x\r\n\r\n",
        origin.target()
    ));
    let r = c.response("GET");
    assert_eq!(r.status, 502, "{}", r.raw_head);
    assert!(
        r.header("X-Proxy-Error")
            .is_some_and(|v| v.starts_with("upstream-tls")),
        "{}",
        r.raw_head
    );
}

#[test]
fn client_connection_close_is_honoured() {
    let origin = Origin::echo_target();
    let proxy = start_proxy(allow_ports(&[origin.port()]));
    let mut c = client(&proxy);
    let r = get_abs(
        &mut c,
        &format!("http://{}/bye", origin.target()),
        "Connection: close\r\n",
    );
    assert_eq!(r.text(), "GET /bye");
    c.expect_eof("after Connection: close");
    // The origin was told too (the proxy will close its side).
    assert_eq!(origin.requests()[0].header("Connection"), Some("close"));
    wait_no_open_sessions(&proxy);
}

/// A scoped allowance (`localhost:PORT@127.0.0.1/32`) opens the name alone:
/// the name (in another case, with a trailing dot) goes through, and on
/// the same keep-alive connection, its upstream open, the address in any
/// spelling is refused and never reaches the origin.
#[test]
fn a_scoped_allowance_on_a_keep_alive_connection_opens_the_name_only() {
    use portcullis::policy::{parse_cli_rule, Action};
    let origin = Origin::echo_target();
    let port = origin.port();
    let rule = parse_cli_rule(Action::Allow, &format!("localhost:{port}@127.0.0.1/32")).unwrap();
    let proxy = start_proxy(Policy::from_rules(&[rule]).unwrap());
    let mut want = Vec::new();
    for (i, host) in [
        "127.0.0.1",
        "[::ffff:127.0.0.1]",
        "2130706433",
        "0x7f.1",
        "127.1",
    ]
    .into_iter()
    .enumerate()
    {
        // A refusal closes the connection: a fresh one, an allowed request
        // first (its upstream is open), then the address.
        let mut c = client(&proxy);
        let ok = get_abs(&mut c, &format!("http://LocalHost.:{port}/{i}"), "");
        assert_eq!(ok.text(), format!("GET /{i}"), "{}", ok.raw_head);
        want.push(format!("/{i}"));
        let r = get_abs(&mut c, &format!("http://{host}:{port}/x"), "");
        assert_eq!(r.status, 403, "{host}: {}", r.raw_head);
    }
    let targets: Vec<String> = origin.requests().into_iter().map(|r| r.target).collect();
    assert_eq!(targets, want);
}
