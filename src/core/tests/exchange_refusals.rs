//! Requests the proxy answers itself: denied by a request rule (in order,
//! body skipped, connection kept), malformed or too large (connection
//! closed), aimed at another host than the tunnel's (421), or asking to
//! upgrade to a protocol that is not allowed.

use super::exchange_sim::*;
use crate::protocol::http1::{Decision, End, ExchangeConfig, Mode};
use crate::target::Target;

const DENY_RULE: &str = "denied; rule=api requests[1]";
const NO_MATCH: &str = "denied; rule=api: no request rule matched";

fn api() -> ExchangeConfig {
    let mut c = tunnel();
    c.rules = Some(api_rules());
    c
}

fn req(method: &str, path: &str, extra: &str) -> String {
    format!("{method} {path} HTTP/1.1\r\nHost: origin.test\r\n{extra}\r\n")
}

#[test]
fn refused_bodies_are_skipped_and_the_connection_carries_on() {
    let client = req("POST", "/v1/x", "Content-Length: 11\r\n")
        + "hello world"
        + &req("POST", "/v1/admin/x", "Transfer-Encoding: chunked\r\n")
        + "5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n"
        + &get("/v1/after");
    let script = Script::new(&client, vec![Reply::on("GET /v1/after", ok("after"))]);
    let out = run_split(&api(), &script);
    assert_eq!(
        out.upstream_text(),
        get("/v1/after"),
        "only the allowed one"
    );
    let r = responses(&out.to_client, &["POST", "POST", "GET"]);
    assert_eq!(r.len(), 3);
    assert_eq!(
        (r[0].status, r[0].header("X-Proxy-Error").unwrap()),
        (403, NO_MATCH.into())
    );
    assert_eq!(
        (r[1].status, r[1].header("X-Proxy-Error").unwrap()),
        (403, DENY_RULE.into())
    );
    assert!(
        r[1].text().contains("POST /v1/admin/x is denied"),
        "{}",
        r[1].text()
    );
    assert_eq!((r[2].status, r[2].text()), (200, "after".into()));
    // A 403 on a connection that stays open does not announce a close.
    assert_eq!(r[0].header("Connection"), None);
    assert_eq!(out.end, Ending::Stalled);
    let decisions: Vec<_> = out.records.iter().map(|r| r.decision.clone()).collect();
    assert_eq!(
        decisions,
        [
            Decision::Denied("api: no request rule matched".into()),
            Decision::Denied("api requests[1]".into()),
            Decision::Allowed(Some("api requests[0]".into())),
        ]
    );
    assert_eq!(out.record_statuses(), [Some(403), Some(403), Some(200)]);
}

/// Refusals answer in order: behind a response still due, never ahead.
#[test]
fn a_refusal_waits_for_the_responses_before_it() {
    let client = get("/v1/slow")
        + &req("DELETE", "/v1/admin/x", "Content-Length: 3\r\n")
        + "abc"
        + &get("/v1/fast");
    let mut sim = Sim::new(
        api(),
        Script::new(&client, vec![]),
        Plan::default(),
        Limits::roomy(),
    );
    sim.run();
    assert!(
        sim.to_client.is_empty(),
        "the 403 must not overtake the slow answer"
    );
    assert_eq!(
        String::from_utf8_lossy(&sim.to_upstream),
        get("/v1/slow") + &get("/v1/fast")
    );
    sim.upstream_sends(ok("slow") + &ok("fast"));
    sim.run();
    let out = sim.outcome();
    assert_eq!(out.statuses(&["GET", "DELETE", "GET"]), [200, 403, 200]);
    let script = Script::new(
        &client,
        vec![Reply::on("GET /v1/fast", ok("slow") + &ok("fast"))],
    );
    assert_eq!(run_split(&api(), &script).client_text(), out.client_text());
}

#[test]
fn no_spelling_of_a_path_slips_past_a_deny() {
    for path in [
        "/v1/../v1/admin/x",
        "/v1/%61dmin/x",
        "//v1//admin//x?q=1",
        "/v1/./admin/x",
    ] {
        let out = run(&api(), &Script::new(get(path), vec![]));
        assert_eq!(out.statuses(&["GET"]), [403], "{path}");
        assert!(out.to_upstream.is_empty(), "{path}");
        // A leading `//` stays in the canonical path (it is also read as
        // `//host/path`).
        let want = if path.starts_with("//") {
            "//v1/admin/x"
        } else {
            "/v1/admin/x"
        };
        assert_eq!(out.records[0].path.as_deref(), Some(want), "{path}");
    }
}

#[test]
fn a_denied_request_that_says_close_closes() {
    let client = req("GET", "/v1/admin/x", "Connection: close\r\n") + &get("/v1/never");
    let out = run_split(&api(), &Script::new(&client, vec![]));
    let r = &responses(&out.to_client, &["GET"])[0];
    assert_eq!(r.status, 403);
    assert_eq!(r.header("Connection").as_deref(), Some("close"));
    assert_eq!(out.end, Ending::Closed(End::Done));
    assert!(out.to_upstream.is_empty());
}

/// A client waiting for `100 Continue` may never send the body of a refused
/// request: the 403 closes, rather than read the next request as body.
#[test]
fn a_refused_request_awaiting_100_continue_closes() {
    let client = req(
        "PUT",
        "/v1/admin/x",
        "Expect: 100-continue\r\nContent-Length: 5\r\n",
    ) + &get("/v1/next");
    let out = run_split(&api(), &Script::new(&client, vec![]));
    let r = &responses(&out.to_client, &["PUT"])[0];
    assert_eq!(r.status, 403);
    assert_eq!(r.header("Connection").as_deref(), Some("close"));
    assert_eq!(out.end, Ending::Closed(End::Done));
    assert!(out.to_upstream.is_empty());
}

/// Requests the stream cannot be followed past: answered, then closed,
/// nothing forwarded, nothing more read.
#[test]
fn malformed_requests_close_the_connection() {
    let big = format!(
        "GET /big HTTP/1.1\r\nHost: origin.test\r\nX-Big: {}\r\n\r\n",
        "a".repeat(HEAD_MAX)
    );
    let cases = [
        (big.as_str(), 431, "head-too-large"),
        ("GET /a b c\r\n\r\n", 400, "bad-request"),
        ("GET / HTTP/2.0\r\n\r\n", 400, "bad-request"),
        (
            "CONNECT 127.0.0.1:22 HTTP/1.1\r\nHost: 127.0.0.1:22\r\n\r\n",
            405,
            "method-not-allowed",
        ),
        (
            "POST /x HTTP/1.1\r\nHost: o\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            400,
            "bad-request",
        ),
        (
            "POST /x HTTP/1.1\r\nHost: o\r\nContent-Length: 5\r\nContent-Length: 30\r\n\r\nhello",
            400,
            "bad-request",
        ),
        ("GET /v1/a%2Fb HTTP/1.1\r\nHost: origin.test\r\n\r\n", 400, "bad-request"),
        ("GET * HTTP/1.1\r\nHost: origin.test\r\n\r\n", 400, "bad-request"),
        ("GET /x HTTP/1.1\r\n\r\n", 400, "bad-request"),
        (
            "GET /x HTTP/1.1\r\nHost: origin.test\r\nHost: origin.test\r\n\r\n",
            400,
            "bad-request",
        ),
        ("GET /x HTTP/1.1\r\nHost: a b\r\n\r\n", 400, "bad-request"),
    ];
    for (head, status, cause) in cases {
        let client = head.to_string() + &get("/v1/after");
        let script = Script::new(&client, vec![]);
        let out = if head.len() < 200 {
            run_split(&api(), &script)
        } else {
            run(&api(), &script)
        };
        let r = &responses(&out.to_client, &["GET"]);
        assert_eq!(r.len(), 1, "{head:?}: {}", out.client_text());
        assert_eq!(r[0].status, status, "{head:?}: {}", r[0].head);
        assert_eq!(
            r[0].header("X-Proxy-Error").as_deref(),
            Some(cause),
            "{head:?}"
        );
        assert_eq!(r[0].header("Connection").as_deref(), Some("close"));
        assert!(out.to_upstream.is_empty(), "{head:?} reached the upstream");
        assert_eq!(out.end, Ending::Closed(End::Done), "{head:?}");
        assert_eq!(out.records.len(), 1);
        assert!(
            matches!(&out.records[0].decision, Decision::Refused { status: s, .. } if *s == status),
            "{:?}",
            out.records[0]
        );
        assert_eq!(out.records[0].status, Some(status));
    }
}

/// A malformed head the client ends by its EOF (a half-close) before its
/// empty line: refused 400 and recorded however it arrived, as when it
/// came whole, not dropped unparsed because too few bytes followed the
/// last look at it.
#[test]
fn a_malformed_head_cut_short_by_the_clients_eof_is_400_however_split() {
    for head in [
        "GET /x HTTP/1.1\r\nHost: origin.test\r\nBad Header: x\r\n",
        "GET /x HTTP/1.1\r\nHost: origin.test\r\nX-Pad: aa\u{1}aaaaaaaa",
    ] {
        let out = run_split(&api(), &Script::new(head, vec![]).then_eof());
        assert_eq!(out.statuses(&["GET"]), [400], "{head:?}");
        assert_eq!(out.record_statuses(), [Some(400)], "{head:?}");
        assert_eq!(out.end, Ending::Closed(End::Done), "{head:?}");
    }
}

/// A bare LF is a line end to the proxy's parser, not to every origin: an
/// origin that keeps it inside a value would not see the `Content-Length`
/// behind it and read the body as a request the proxy never judged. Such a
/// head is refused, in a tunnel and through the forward proxy.
#[test]
fn a_bare_lf_in_a_request_head_is_400() {
    let heads = [
        "GET /v1/x HTTP/1.1\r\nHost: origin.test\nX: y\r\n\r\n",
        "GET /v1/x HTTP/1.1\nHost: origin.test\n\n",
        "GET /v1/x HTTP/1.1\r\nHost: origin.test\r\n\n",
        "\nGET /v1/x HTTP/1.1\r\nHost: origin.test\r\n\r\n",
        "POST /v1/x HTTP/1.1\r\nHost: origin.test\r\nX: a\nContent-Length: 30\r\n\r\n\
         GET /v1/admin/x HTTP/1.1\r\n\r\n",
    ];
    let mut proxy = forward();
    proxy.rules = Some(api_rules());
    for (fwd, config) in [(false, api()), (true, proxy)] {
        for head in heads {
            let head = if fwd {
                head.replacen(" /v1/x ", " http://origin.test/v1/x ", 1)
            } else {
                head.to_string()
            };
            let client = head.clone() + &get("/v1/after");
            let out = run_split(&config, &Script::new(&client, vec![]));
            let r = responses(&out.to_client, &["GET"]);
            assert_eq!(r.len(), 1, "{head:?}: {}", out.client_text());
            assert_eq!(r[0].status, 400, "{head:?}");
            assert_eq!(r[0].header("X-Proxy-Error").as_deref(), Some("bad-request"));
            assert!(r[0].text().contains("bare LF"), "{}", r[0].text());
            assert!(out.to_upstream.is_empty(), "{head:?} reached the upstream");
            assert_eq!(out.end, Ending::Closed(End::Done), "{head:?}");
        }
    }
    // CRLF throughout is fine, and a LF inside a body is the body's.
    let client = "POST /v1/x HTTP/1.1\r\nHost: origin.test\r\nContent-Length: 3\r\n\r\na\nb";
    let out = run_split(
        &tunnel(),
        &Script::new(client, vec![Reply::on("a\nb", ok("x"))]),
    );
    assert_eq!(out.statuses(&["POST"]), [200]);
    assert_eq!(out.upstream_text(), client);
}

/// HTTP/1.0 needs no Host.
#[test]
fn http10_without_host_is_fine() {
    let client = "GET /v1/old HTTP/1.0\r\nConnection: keep-alive\r\n\r\n";
    let out = run(
        &api(),
        &Script::new(client, vec![Reply::on("/v1/old", ok("old"))]),
    );
    assert_eq!(out.statuses(&["GET"]), [200]);
    assert_eq!(out.records[0].authority.as_deref(), Some("origin.test:80"));
}

#[test]
fn a_host_naming_another_target_is_421() {
    let other = [
        "Host: evil.test\r\n",
        "Host: origin.test:8080\r\n",
        "Host: origin.test.evil\r\n",
        "Host: 127.0.0.1\r\n",
    ];
    for host in other {
        let client =
            format!("GET /v1/x HTTP/1.1\r\n{host}Content-Length: 3\r\n\r\nabc") + &get("/v1/next");
        let script = Script::new(&client, vec![Reply::on("GET /v1/next", ok("next"))]);
        let out = run_split(&api(), &script);
        let r = responses(&out.to_client, &["GET", "GET"]);
        assert_eq!(r[0].status, 421, "{host}");
        assert!(
            out.to_client
                .starts_with(b"HTTP/1.1 421 Misdirected Request\r\n"),
            "{host}"
        );
        assert_eq!(
            r[0].header("X-Proxy-Error").as_deref(),
            Some("host-mismatch")
        );
        assert!(
            r[0].text().contains("origin.test:80"),
            "the reason names both: {}",
            r[0].text()
        );
        // The connection carries on past the refused request and its body.
        assert_eq!((r[1].status, r[1].text()), (200, "next".into()), "{host}");
        assert_eq!(out.upstream_text(), get("/v1/next"));
    }
    // Every spelling of the target itself is fine.
    for host in [
        "ORIGIN.TEST",
        "origin.test.",
        "origin.test:80",
        " origin.test ",
    ] {
        let client = format!("GET /v1/x HTTP/1.1\r\nHost: {host}\r\n\r\n");
        let out = run(
            &api(),
            &Script::new(&client, vec![Reply::on("/v1/x", ok("x"))]),
        );
        assert_eq!(out.statuses(&["GET"]), [200], "{host}");
    }
}

/// IDNA maps these onto `origin.test`, but an origin routes on the raw
/// bytes (to its default site): a Host must be ASCII.
#[test]
fn a_non_ascii_host_is_400_not_the_target() {
    for host in ["ｏｒｉｇｉｎ.test", "ori\u{AD}gin.test", "origin.tést"] {
        let client = format!("GET /v1/x HTTP/1.1\r\nHost: {host}\r\n\r\n");
        let out = run(
            &api(),
            &Script::new(&client, vec![Reply::on("/v1/x", ok("x"))]),
        );
        assert_eq!(out.statuses(&["GET"]), [400], "{host}");
        assert!(out.to_upstream.is_empty(), "{host}");
    }
}

#[test]
fn an_absolute_uri_naming_another_target_is_421() {
    for (target, status) in [
        ("http://evil.test/v1/x", 421),
        ("http://origin.test:8080/v1/x", 421),
        ("http://origin.test/v1/x", 200),
        ("http://origin.test:80/v1/x", 200),
    ] {
        let client = format!("GET {target} HTTP/1.1\r\nHost: origin.test\r\n\r\n");
        let out = run(
            &api(),
            &Script::new(&client, vec![Reply::on("GET ", ok("x"))]),
        );
        assert_eq!(out.statuses(&["GET"]), [status], "{target}");
    }
}

/// A tunnel to an address: `Host` must name that address, in any spelling.
#[test]
fn host_checks_on_an_ip_target() {
    let config = ExchangeConfig {
        max_head_bytes: HEAD_MAX,
        ..ExchangeConfig::new(Mode::Tunnel {
            target: Target::new("127.0.0.1", 8080).unwrap(),
            tls: false,
        })
    };
    for (host, status) in [
        ("127.0.0.1:8080", 200),
        ("127.1:8080", 200),
        // No port: port 80, not the tunnel's.
        ("127.0.0.1", 421),
        ("[::ffff:127.0.0.1]:8080", 200),
        ("localhost:8080", 421),
        ("127.0.0.2:8080", 421),
        ("127.0.0.1:80", 421),
    ] {
        let client = format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n");
        let out = run(
            &config,
            &Script::new(&client, vec![Reply::on("GET /", ok("x"))]),
        );
        assert_eq!(out.statuses(&["GET"]), [status], "{host}");
    }
}

/// A tunnel to `host:port`, TLS terminated or not, every request allowed.
fn tunnel_to(host: &str, port: u16, tls: bool) -> ExchangeConfig {
    ExchangeConfig {
        max_head_bytes: HEAD_MAX,
        ..ExchangeConfig::new(Mode::Tunnel {
            target: Target::new(host, port).unwrap(),
            tls,
        })
    }
}

/// A `Host` or absolute URI without a port names the scheme's default port
/// (443 inside TLS or for `https://`, else 80), not "any port": an origin
/// routes `Host: origin.test` to its default port, and a URI's authority
/// over `Host` (RFC 9112 3.2.2). So inside a tunnel to another port, a
/// port-less name is another target: 421.
#[test]
fn a_name_without_a_port_means_the_default_port() {
    // (tunnel port, TLS terminated, Host, request target, status)
    let cases = [
        (9441, true, "origin.test", "/x", 421),
        (9441, true, "origin.test:443", "/x", 421),
        (9441, true, "origin.test:9441", "/x", 200),
        (9441, true, "origin.test:9441", "https://origin.test/x", 421),
        (9441, true, "origin.test:9441", "http://origin.test/x", 421),
        (
            9441,
            true,
            "origin.test:9441",
            "https://origin.test:9441/x",
            200,
        ),
        (9441, false, "origin.test", "/x", 421),
        (9441, false, "origin.test:9441", "http://origin.test/x", 421),
        (
            9441,
            false,
            "origin.test:9441",
            "http://origin.test:9441/x",
            200,
        ),
        // The default port itself: a port-less name is the target.
        (443, true, "origin.test", "/x", 200),
        (443, true, "ORIGIN.TEST.", "https://origin.test/x", 200),
        (443, true, "origin.test", "http://origin.test/x", 421),
        (443, true, "origin.test:80", "/x", 421),
        (80, false, "origin.test", "/x", 200),
        (80, false, "origin.test", "http://origin.test/x", 200),
        (80, false, "origin.test", "https://origin.test/x", 421),
        (80, false, "origin.test:443", "/x", 421),
    ];
    for (port, tls, host, target, status) in cases {
        let config = tunnel_to("origin.test", port, tls);
        let client = format!(
            "GET {target} HTTP/1.1\r\nHost: {host}\r\n\r\n\
             GET /next HTTP/1.1\r\nHost: origin.test:{port}\r\n\r\n"
        );
        let mut replies = vec![Reply::on("GET /next", ok("next"))];
        if status == 200 {
            replies.insert(0, Reply::on(&format!("GET {target} "), ok("x")));
        }
        let out = run_split(&config, &Script::new(&client, replies));
        let r = responses(&out.to_client, &["GET", "GET"]);
        let what = format!("tunnel to :{port} tls={tls}, Host {host}, {target}");
        assert_eq!(r[0].status, status, "{what}: {}", out.client_text());
        if status == 421 {
            assert_eq!(
                r[0].header("X-Proxy-Error").as_deref(),
                Some("host-mismatch"),
                "{what}"
            );
            assert!(
                r[0].text().contains(&format!("origin.test:{port}")),
                "the reason names the tunnel's target: {}",
                r[0].text()
            );
            // Refused, not forwarded; the connection carries on.
            assert!(!out.upstream_text().contains(target), "{what}");
        }
        assert_eq!((r[1].status, r[1].text()), (200, "next".into()), "{what}");
    }
    // The answer says which port a port-less name meant.
    let config = tunnel_to("origin.test", 9441, true);
    let out = run(&config, &Script::new(get("/x"), vec![]));
    let r = responses(&out.to_client, &["GET"]);
    assert!(
        r[0].text().contains("origin.test (port 443 by default)"),
        "{}",
        r[0].text()
    );
}

fn upgrade(token: &str) -> String {
    format!(
        "GET /ws HTTP/1.1\r\nHost: origin.test\r\nConnection: Upgrade\r\nUpgrade: {token}\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    )
}

#[test]
fn upgrades_other_than_websocket_are_refused() {
    for (token, bad) in [
        ("h2c", "h2c"),
        ("foo", "foo"),
        ("h2c, websocket", "h2c"),
        ("websocket, H2C", "h2c"),
        ("TLS/1.0", "tls/1.0"),
    ] {
        let client = upgrade(token) + &get("/next");
        let script = Script::new(&client, vec![Reply::on("GET /next", ok("next"))]);
        let out = run_split(&tunnel(), &script);
        let r = responses(&out.to_client, &["GET", "GET"]);
        assert_eq!(r[0].status, 403, "{token}");
        assert_eq!(
            r[0].header("X-Proxy-Error"),
            Some(format!("upgrade-not-allowed; token={bad}")),
            "{token}"
        );
        assert_eq!(r[1].text(), "next", "parsing carries on after {token}");
        assert_eq!(
            out.upstream_text(),
            get("/next"),
            "{token} was never forwarded"
        );
        assert!(matches!(
            &out.records[0].decision,
            Decision::Refused { status: 403, cause, .. } if cause == "upgrade-not-allowed"
        ));
    }
    // The h2c request form browsers and curl send, with its settings header.
    let h2c = "GET / HTTP/1.1\r\nHost: origin.test\r\nConnection: Upgrade, HTTP2-Settings\r\n\
               Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n";
    let out = run(&tunnel(), &Script::new(h2c, vec![]));
    assert_eq!(out.statuses(&["GET"]), [403]);
    assert!(out.to_upstream.is_empty());
}

#[test]
fn allowed_upgrade_tokens_match_without_case() {
    for token in ["websocket", "WebSocket", "websocket/13"] {
        let out = run(
            &tunnel(),
            &Script::new(upgrade(token), vec![Reply::on("/ws", ok("declined"))]),
        );
        assert_eq!(out.statuses(&["GET"]), [200], "{token}");
        assert_eq!(out.upstream_text(), upgrade(token));
    }
    // The configured list is what counts.
    let mut config = tunnel();
    config.upgrades = vec!["Foo".into()];
    let out = run(
        &config,
        &Script::new(upgrade("foo"), vec![Reply::on("/ws", ok("x"))]),
    );
    assert_eq!(out.statuses(&["GET"]), [200]);
    let out = run(&config, &Script::new(upgrade("websocket"), vec![]));
    assert_eq!(out.statuses(&["GET"]), [403]);
}

/// A denial is judged before the upgrade token: the record names the rule.
#[test]
fn a_denied_upgrade_names_the_rule() {
    let client = "GET /v1/admin/ws HTTP/1.1\r\nHost: origin.test\r\nConnection: upgrade\r\n\
                  Upgrade: h2c\r\n\r\n";
    let out = run(&api(), &Script::new(client, vec![]));
    let r = &responses(&out.to_client, &["GET"])[0];
    assert_eq!(r.header("X-Proxy-Error").as_deref(), Some(DENY_RULE));
}

/// Text echoed from a request is clipped: answers stay small.
#[test]
fn long_paths_are_clipped_in_answers_and_records() {
    let path = format!("/v1/admin/{}", "a".repeat(1500));
    let out = run(&api(), &Script::new(get(&path), vec![]));
    let r = &responses(&out.to_client, &["GET"])[0];
    assert_eq!(r.status, 403);
    assert!(r.text().len() < 700, "{}", r.text().len());
    assert!(out.records[0].path.as_ref().unwrap().len() <= 512);
}

/// An upstream that failed (its TLS handshake) before the request came:
/// the request gets the 502 saying why, recorded as an error (not a
/// refusal) with its method and path.
#[test]
fn a_request_after_the_upstream_failed_is_an_error_with_its_path() {
    use crate::protocol::http1::{Exchange, UpstreamAction};
    let mut ex = Exchange::new(tunnel_to("origin.test", 443, true));
    ex.upstream_failed("upstream-tls", "unknown issuer: CN=Corp Root CA");
    let _ = ex.on_client(
        b"GET /v1/x?q=1 HTTP/1.1\r\nHost: origin.test\r\n\r\n",
        1 << 16,
    );
    let answer = match ex.on_upstream(b"", 1 << 16) {
        UpstreamAction::Answer(a) => String::from_utf8(a).unwrap(),
        other => panic!("{other:?}"),
    };
    assert!(answer.starts_with("HTTP/1.1 502 "), "{answer}");
    assert!(
        answer.contains("X-Proxy-Error: upstream-tls; unknown issuer: CN=Corp Root CA\r\n"),
        "{answer}"
    );
    let records: Vec<_> = ex.take_records().collect();
    assert_eq!(records.len(), 1);
    let r = &records[0];
    assert_eq!(
        r.decision,
        Decision::Failed {
            rule: None,
            cause: "upstream-tls".into(),
            reason: "unknown issuer: CN=Corp Root CA".into(),
        }
    );
    assert_eq!(
        (r.method.as_deref(), r.path.as_deref(), r.status),
        (Some("GET"), Some("/v1/x"), Some(502))
    );
    assert_eq!(r.authority.as_deref(), Some("origin.test:443"));
}

/// The upstream fails (its TLS) after the request went to it: the 502
/// answers that request, which is recorded as an error under its rule.
#[test]
fn a_request_the_upstream_failed_is_an_error() {
    use crate::protocol::http1::{Exchange, Status};
    let mut c = tunnel_to("origin.test", 443, true);
    c.rules = Some(api_rules());
    let mut ex = Exchange::new(c);
    let _ = ex.on_client(b"GET /v1/y HTTP/1.1\r\nHost: origin.test\r\n\r\n", 1 << 16);
    ex.upstream_failed("upstream-tls", "certificate has expired");
    let _ = ex.on_upstream(b"", 1 << 16);
    match ex.status() {
        Status::Closed {
            answer: Some(a), ..
        } => {
            let a = String::from_utf8(a).unwrap();
            assert!(a.starts_with("HTTP/1.1 502 "), "{a}");
        }
        other => panic!("{other:?}"),
    }
    let records: Vec<_> = ex.take_records().collect();
    assert_eq!(records.len(), 1);
    assert_eq!(
        records[0].decision,
        Decision::Failed {
            rule: Some("api requests[0]".into()),
            cause: "upstream-tls".into(),
            reason: "certificate has expired".into(),
        }
    );
    assert_eq!(records[0].path.as_deref(), Some("/v1/y"));
    assert_eq!(records[0].status, Some(502));
}
