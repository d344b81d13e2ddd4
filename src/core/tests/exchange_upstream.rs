//! The upstream side: upgrades accepted and declined, upstreams that close
//! early or break HTTP (502 while nothing of the response went out, a
//! close after), and the response timer's bookkeeping.

use super::exchange_sim::*;
use crate::protocol::http1::{End, Status};

const WS: &str = "GET /chat HTTP/1.1\r\nHost: origin.test\r\nUpgrade: websocket\r\n\
                  Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
                  Sec-WebSocket-Version: 13\r\n\r\n";
const SWITCH: &str = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\
                      Connection: Upgrade\r\n\r\n";

#[test]
fn after_101_both_inputs_are_raw() {
    // Raw bytes right behind the request, and right behind the 101, that
    // look like HTTP: none of it may be parsed.
    let client_raw = "\u{81}\u{85}GET / HTTP/1.1\r\nHost: evil\r\n\r\n";
    let server_raw = "\u{81}\u{05}helloHTTP/1.1 200 OK\r\n\r\n";
    let script = Script::new(
        WS.to_string() + client_raw,
        vec![Reply::on(
            "Version: 13\r\n\r\n",
            SWITCH.to_string() + server_raw,
        )],
    );
    let out = run_split(&tunnel(), &script);
    assert_eq!(out.end, Ending::Upgraded);
    assert_eq!(out.upstream_text(), WS.to_string() + client_raw);
    assert_eq!(out.client_text(), SWITCH.to_string() + server_raw);
    assert_eq!(out.record_statuses(), [Some(101)]);
}

/// Bytes behind an upgrade request wait for its answer: not forwarded, not
/// parsed, until the 101 (then raw) or another answer (then HTTP).
#[test]
fn bytes_behind_an_upgrade_request_wait_for_its_answer() {
    let mut sim = Sim::new(
        tunnel(),
        Script::new(WS.to_string() + &get("/third"), vec![]),
        Plan::default(),
        Limits::roomy(),
    );
    sim.run();
    assert_eq!(String::from_utf8_lossy(&sim.to_upstream), WS);
    assert_eq!(sim.ex().status(), Status::Open);
    sim.upstream_sends(ok("no upgrade for you"));
    sim.run();
    assert_eq!(
        String::from_utf8_lossy(&sim.to_upstream),
        WS.to_string() + &get("/third"),
        "declined: parsing resumed"
    );
}

/// An upstream's 101 turns the connection raw, so what follows the request
/// is never parsed again: the request must be a WebSocket handshake (RFC
/// 6455 4.1) for the proxy to let it through. Otherwise 400, the connection
/// closed, and nothing (neither the request nor what follows) forwarded.
#[test]
fn a_websocket_upgrade_must_look_like_one() {
    let key = "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n";
    let ws = "Upgrade: websocket\r\nConnection: Upgrade\r\n";
    let bad = [
        (format!("POST /chat HTTP/1.1\r\nHost: origin.test\r\n{ws}{key}Content-Length: 3\r\n\r\nabc"), "must be a GET"),
        (format!("GET /chat HTTP/1.1\r\nHost: origin.test\r\n{ws}{key}Content-Length: 3\r\n\r\nabc"), "request body"),
        (format!("GET /chat HTTP/1.1\r\nHost: origin.test\r\n{ws}{key}Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"), "request body"),
        (format!("GET /chat HTTP/1.0\r\nHost: origin.test\r\n{ws}{key}\r\n"), "HTTP/1.0"),
        (format!("GET /chat HTTP/1.1\r\nHost: origin.test\r\n{ws}\r\n"), "without Sec-WebSocket-Key"),
        (format!("GET /chat HTTP/1.1\r\nHost: origin.test\r\n{ws}Sec-WebSocket-Key: \r\n\r\n"), "without Sec-WebSocket-Key"),
        (format!("GET /chat HTTP/1.1\r\nHost: origin.test\r\n{ws}{key}{key}\r\n"), "several Sec-WebSocket-Key"),
        ("GET /chat HTTP/1.1\r\nHost: origin.test\r\nUpgrade: foo, websocket/13\r\nConnection: Upgrade\r\n\r\n".to_string(), "without Sec-WebSocket-Key"),
        // Any upgrade needs HTTP/1.1.
        ("GET /chat HTTP/1.0\r\nHost: origin.test\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n".to_string(), "HTTP/1.0"),
    ];
    for (request, why) in bad {
        // Behind it, a request the upstream's 101 would have carried raw.
        let client = request.clone() + &get("/admin/x");
        let script = Script::new(
            &client,
            vec![Reply::on("\r\n\r\n", SWITCH.to_string() + "raw")],
        );
        let out = run_split(&tunnel(), &script);
        let r = responses(&out.to_client, &["GET"]);
        assert_eq!(r.len(), 1, "{request:?}: {}", out.client_text());
        assert_eq!(r[0].status, 400, "{request:?}");
        assert_eq!(r[0].header("X-Proxy-Error").as_deref(), Some("bad-request"));
        assert!(r[0].text().contains(why), "{request:?}: {}", r[0].text());
        assert!(out.to_upstream.is_empty(), "{request:?} was forwarded");
        assert_eq!(out.end, Ending::Closed(End::Done), "{request:?}");
    }
    // The handshake itself, any case of the token, and a non-WebSocket
    // upgrade (no key needed) still reach the upstream.
    for request in [
        WS.to_string(),
        WS.replace("Upgrade: websocket", "Upgrade: WebSocket"),
        WS.replace("GET /chat", "GET /chat?x=1")
            .replace(key, &key.to_ascii_lowercase()),
    ] {
        let script = Script::new(
            &request,
            vec![Reply::on("\r\n\r\n", SWITCH.to_string() + "raw")],
        );
        let out = run_split(&tunnel(), &script);
        assert_eq!(out.end, Ending::Upgraded, "{request:?}");
        assert_eq!(out.upstream_text(), request);
    }
    let mut foo = tunnel();
    foo.upgrades = vec!["foo".into()];
    let request =
        "GET /x HTTP/1.1\r\nHost: origin.test\r\nUpgrade: foo\r\nConnection: Upgrade\r\n\r\n";
    let switch = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: foo\r\nConnection: Upgrade\r\n\r\n";
    let out = run_split(
        &foo,
        &Script::new(request, vec![Reply::on("\r\n\r\n", switch)]),
    );
    assert_eq!(out.end, Ending::Upgraded);
}

#[test]
fn a_declined_upgrade_keeps_http() {
    let client = WS.to_string() + &get("/third");
    let script = Script::new(
        &client,
        vec![
            Reply::on("Version: 13\r\n\r\n", ok("no upgrade for you")),
            Reply::on("GET /third", ok("third")),
        ],
    );
    let out = run_split(&tunnel(), &script);
    assert_eq!(out.upstream_text(), client);
    assert_eq!(out.client_text(), ok("no upgrade for you") + &ok("third"));
    assert_eq!(out.end, Ending::Stalled);
}

#[test]
fn upgrade_with_an_interim_response_first() {
    let script = Script::new(
        WS,
        vec![Reply::on(
            "\r\n\r\n",
            "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n".to_string() + SWITCH + "raw",
        )],
    );
    let out = run_split(&tunnel(), &script);
    assert_eq!(out.end, Ending::Upgraded);
    assert!(out.client_text().ends_with("\r\n\r\nraw"));
}

/// A 502 owed while nothing of the response went out.
#[track_caller]
fn expect_502(out: &Outcome, methods: &[&str], cause: &str) {
    let r = responses(&out.to_client, methods);
    let last = r.last().expect("an answer");
    assert_eq!(last.status, 502, "{}", out.client_text());
    assert_eq!(last.header("X-Proxy-Error").as_deref(), Some(cause));
    assert_eq!(last.header("Connection").as_deref(), Some("close"));
}

#[test]
fn bad_101s_are_502() {
    // A 101 nobody asked for.
    let script = Script::new(
        get("/a"),
        vec![Reply::on("GET /a", SWITCH.to_string() + "raw")],
    );
    let out = run_split(&tunnel(), &script);
    expect_502(&out, &["GET"], "bad-upstream-response");
    assert!(matches!(out.end, Ending::Closed(End::BadUpstream(_))));
    assert!(!out.client_text().contains("raw"));
    // A 101 to a protocol that is not allowed, or to none.
    for resp in [
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n",
        "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n\r\n",
    ] {
        let script = Script::new(WS, vec![Reply::on("\r\n\r\n", resp.to_string() + "PRI *")]);
        let out = run_split(&tunnel(), &script);
        expect_502(&out, &["GET"], "bad-upstream-response");
        assert_eq!(out.record_statuses(), [Some(502)]);
    }
}

#[test]
fn upstream_eof_before_answering_is_502() {
    // Nothing at all, after a good exchange.
    let client = get("/fine") + &get("/drop");
    let script = Script::new(
        &client,
        vec![
            Reply::on("GET /fine", ok("fine")),
            Reply::eof_on("GET /drop"),
        ],
    );
    let out = run_split(&tunnel(), &script);
    expect_502(&out, &["GET", "GET"], "upstream-closed");
    assert_eq!(out.end, Ending::Closed(End::UpstreamClosed));
    assert_eq!(out.record_statuses(), [Some(200), Some(502)]);
    // Half a head.
    let script = Script::new(
        get("/a"),
        vec![
            Reply::on("GET /a", "HTTP/1.1 200 OK\r\nContent-Le"),
            Reply::eof(),
        ],
    );
    let out = run_split(&tunnel(), &script);
    expect_502(&out, &["GET"], "upstream-closed");
    // After a 100 Continue, the final answer is still owed: 502.
    let script = Script::new(
        "PUT /x HTTP/1.1\r\nHost: origin.test\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi",
        vec![Reply::on("hi", "HTTP/1.1 100 Continue\r\n\r\n"), Reply::eof()],
    );
    let out = run_split(&tunnel(), &script);
    assert_eq!(out.statuses(&["PUT"]), [100, 502]);
}

/// A malformed response head the upstream ends by its EOF before its
/// empty line: a bad upstream (502 `bad-upstream-response`) however it
/// arrived, as when it came whole, not an upstream that merely closed.
#[test]
fn a_malformed_response_head_cut_short_by_the_upstreams_eof_is_bad_upstream() {
    let resp = "HTTP/1.1 200 OK\r\nX-Pad: aaaaaaaaaaaaaaaaaaaa\r\nBad Header: x\r\n";
    let script = Script::new(get("/a"), vec![Reply::on("GET /a", resp), Reply::eof()]);
    let out = run_split(&tunnel(), &script);
    expect_502(&out, &["GET"], "bad-upstream-response");
    assert!(
        matches!(out.end, Ending::Closed(End::BadUpstream(_))),
        "{:?}",
        out.end
    );
}

#[test]
fn a_response_cut_short_closes_without_an_answer() {
    let script = Script::new(
        get("/a"),
        vec![
            Reply::on(
                "GET /a",
                "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf",
            ),
            Reply::eof(),
        ],
    );
    let out = run_split(&tunnel(), &script);
    assert_eq!(
        out.client_text(),
        "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf"
    );
    assert_eq!(out.end, Ending::Closed(End::UpstreamClosed));
}

#[test]
fn upstream_eof_between_exchanges_ends_cleanly() {
    let script = Script::new(get("/a"), vec![Reply::on("GET /a", ok("a")), Reply::eof()]);
    let out = run_split(&tunnel(), &script);
    assert_eq!(out.client_text(), ok("a"));
    assert_eq!(out.end, Ending::Closed(End::Done));
}

#[test]
fn bad_upstream_heads_are_502() {
    for resp in [
        "SSH-2.0-OpenSSH_9.6\r\n\r\n".to_string(),
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
            .to_string(),
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!".to_string(),
        format!("HTTP/1.1 200 OK\r\nX: {}\r\n\r\n", "a".repeat(HEAD_MAX)),
    ] {
        let client = get("/fine") + &get("/bad");
        let script = Script::new(
            &client,
            vec![Reply::on("GET /fine", ok("fine")), Reply::on("GET /bad", &resp)],
        );
        let out = if resp.len() < 200 {
            run_split(&tunnel(), &script)
        } else {
            run(&tunnel(), &script)
        };
        expect_502(&out, &["GET", "GET"], "bad-upstream-response");
        assert!(
            matches!(out.end, Ending::Closed(End::BadUpstream(_))),
            "{:?}",
            out.end
        );
        assert_eq!(out.statuses(&["GET", "GET"]), [200, 502]);
    }
}

/// A bare LF ends a line for the proxy's parser, not for every client: a
/// client that keeps it inside a value would not see the `Content-Length`
/// behind it and frame the response (and the next) otherwise. Nothing of
/// such a response reaches the client: a 502 in its place.
#[test]
fn a_bare_lf_in_a_response_head_is_502() {
    for resp in [
        "HTTP/1.1 200 OK\nContent-Length: 5\n\nhello",
        "HTTP/1.1 200 OK\r\nX: a\nContent-Length: 5\r\n\r\nhello",
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\nhello",
        "HTTP/1.1 100 Continue\n\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
    ] {
        let client = get("/fine") + &get("/bad");
        let script = Script::new(
            &client,
            vec![
                Reply::on("GET /fine", ok("fine")),
                Reply::on("GET /bad", resp),
            ],
        );
        let out = run_split(&tunnel(), &script);
        expect_502(&out, &["GET", "GET"], "bad-upstream-response");
        assert_eq!(out.statuses(&["GET", "GET"]), [200, 502], "{resp:?}");
        assert!(
            !out.client_text().contains("hello"),
            "{resp:?}: {}",
            out.client_text()
        );
        assert!(
            out.client_text().contains("bare LF"),
            "{}",
            out.client_text()
        );
        assert!(
            matches!(out.end, Ending::Closed(End::BadUpstream(_))),
            "{:?}",
            out.end
        );
    }
    // A LF inside a body is the body's.
    let script = Script::new(get("/a"), vec![Reply::on("GET /a", ok("x\ny"))]);
    let out = run_split(&tunnel(), &script);
    assert_eq!(out.client_text(), ok("x\ny"));
}

#[test]
fn a_body_that_breaks_its_framing_closes_without_an_answer() {
    let head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n";
    let script = Script::new(
        get("/a"),
        vec![Reply::on("GET /a", head.to_string() + "zz\r\n")],
    );
    let out = run_split_ends(&tunnel(), &script);
    assert!(out.client_text().starts_with("HTTP/1.1 200 OK\r\n"));
    assert!(!out.client_text().contains("502"));
    assert!(matches!(out.end, Ending::Closed(End::BadUpstream(_))));
}

/// Upstream bytes that answer no request end the connection without an
/// answer: a 502 would pass for the reply to the client's next request.
#[test]
fn bytes_that_answer_nothing_close_without_an_answer() {
    let script = Script::new(
        get("/extra"),
        vec![Reply::on("GET /extra", ok("hello") + "X")],
    );
    let out = run_split(&tunnel(), &script);
    assert_eq!(out.client_text(), ok("hello"));
    assert!(matches!(out.end, Ending::Closed(End::BadUpstream(_))));
    // And before any request.
    let out = run(
        &tunnel(),
        &Script::new("", vec![Reply::now("HTTP/1.1 200 OK\r\n\r\n")]),
    );
    assert!(out.to_client.is_empty());
    assert!(matches!(out.end, Ending::Closed(End::BadUpstream(_))));
}

/// A client that breaks a forwarded request's body (or closes inside it)
/// gets a 400 at once: the upstream would wait for the rest for ever.
#[test]
fn a_request_broken_after_its_head_went_is_400() {
    for (body, eof) in [("5\r\nhello\r\nzz\r\n", false), ("5\r\nhel", true)] {
        let client = format!(
            "POST /p HTTP/1.1\r\nHost: origin.test\r\nTransfer-Encoding: chunked\r\n\r\n{body}"
        );
        let mut script = Script::new(&client, vec![]);
        script.client_eof = eof;
        let out = run_split_ends(&tunnel(), &script);
        let r = responses(&out.to_client, &["POST"]);
        assert_eq!(r[0].status, 400, "{body:?}");
        assert!(
            matches!(out.end, Ending::Closed(End::BadRequest(_))),
            "{:?}",
            out.end
        );
        assert_eq!(out.record_statuses(), [Some(400)]);
    }
    // Behind a response still due, the 400 waits its turn.
    let client =
        get("/slow") + "POST /p HTTP/1.1\r\nHost: origin.test\r\nContent-Length: 9\r\n\r\nshort";
    let script = Script::new(&client, vec![Reply::on("short", ok("slow"))]).then_eof();
    let out = run_split(&tunnel(), &script);
    assert_eq!(out.statuses(&["GET", "POST"]), [200, 400]);
}

#[test]
fn response_timer_bookkeeping() {
    let mut sim = Sim::new(
        tunnel(),
        Script::new(get("/a") + &get("/b"), vec![]),
        Plan::default(),
        Limits::roomy(),
    );
    sim.run();
    // Both requests are out; the first one's answer is awaited.
    let first = sim.ex().awaiting_response().expect("the clock runs");
    // Part of a head arrived: no answer yet, the same wait goes on.
    sim.upstream_sends("HTTP/1.1 200 OK\r\n");
    sim.run();
    assert_eq!(sim.ex().awaiting_response(), Some(first));
    // The head is whole: the upstream has answered.
    sim.upstream_sends("Content-Length: 1\r\n\r\n");
    sim.run();
    assert_eq!(sim.ex().awaiting_response(), None);
    assert!(
        !sim.ex().response_timeout(),
        "a stale timer changes nothing"
    );
    assert_eq!(sim.ex().status(), Status::Open);
    // The first answer is complete: the second is awaited, a new wait.
    sim.upstream_sends("a");
    sim.run();
    let second = sim.ex().awaiting_response().expect("the clock runs again");
    assert_ne!(first, second, "a new wait restarts the clock");
    assert!(sim.ex().response_timeout());
    sim.run();
    let out = sim.outcome();
    assert_eq!(out.end, Ending::Closed(End::ResponseTimeout));
    assert_eq!(out.statuses(&["GET", "GET"]), [200, 504]);
    let r = responses(&out.to_client, &["GET", "GET"]);
    assert_eq!(
        r[1].header("X-Proxy-Error").as_deref(),
        Some("response-timeout")
    );
    assert_eq!(out.record_statuses(), [Some(200), Some(504)]);
}

/// A response head the upstream starts and never finishes is no answer:
/// the response clock runs on from the request, and the client gets its
/// 504 (a trickled head cannot hold the session past it). A whole head
/// waiting for room toward a slow client is an answer: no clock.
#[test]
fn a_response_head_begun_and_not_finished_is_a_504() {
    let mut sim = one_get();
    sim.run();
    let first = sim.ex().awaiting_response().expect("the clock runs");
    for line in ["HTTP/1.1 200 OK\r\n", "X-A: 1\r\n", "X-B: 2\r\n"] {
        sim.upstream_sends(line);
        sim.run();
        assert_eq!(sim.ex().awaiting_response(), Some(first), "after {line:?}");
    }
    assert!(sim.ex().response_timeout());
    sim.run();
    let out = sim.outcome();
    assert_eq!(out.end, Ending::Closed(End::ResponseTimeout));
    assert_eq!(out.statuses(&["GET"]), [504]);

    let mut sim = one_get();
    sim.run();
    sim.resize_cout(0);
    sim.upstream_sends(ok("a"));
    sim.run();
    assert_eq!(
        sim.ex().awaiting_response(),
        None,
        "answered, the client slow"
    );
}

#[test]
fn no_response_clock_while_the_client_uploads_or_reads() {
    // Uploading: no clock.
    let mut sim = Sim::new(
        tunnel(),
        Script::new(
            "POST /p HTTP/1.1\r\nHost: origin.test\r\nContent-Length: 10\r\n\r\n01234",
            vec![],
        ),
        Plan::default(),
        Limits::roomy(),
    );
    sim.run();
    assert_eq!(sim.ex().awaiting_response(), None);
    sim.client_sends("56789");
    sim.run();
    assert!(
        sim.ex().awaiting_response().is_some(),
        "wholly sent: the clock runs"
    );

    // A response streaming to a client that does not read: no clock.
    let mut sim = Sim::new(
        tunnel(),
        Script::new(get("/big") + &get("/small"), vec![]),
        Plan::default(),
        Limits::roomy(),
    );
    sim.client_reads(0);
    sim.run();
    sim.upstream_sends(format!(
        "HTTP/1.1 200 OK\r\nContent-Length: 200000\r\n\r\n{}",
        "x".repeat(200_000)
    ));
    sim.run();
    assert_eq!(sim.ex().awaiting_response(), None, "the upstream answered");

    // 100-continue: the proxy's own 100 goes out and the upstream saw a
    // plain upload, so the clock waits for the body, as for any upload,
    // and runs once it is sent.
    let mut sim = Sim::new(
        tunnel(),
        Script::new(
            "PUT /x HTTP/1.1\r\nHost: origin.test\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n",
            vec![],
        ),
        Plan::default(),
        Limits::roomy(),
    );
    sim.run();
    assert_eq!(sim.outcome().client_text(), "HTTP/1.1 100 Continue\r\n\r\n");
    assert_eq!(
        sim.ex().awaiting_response(),
        None,
        "the client sends its body now"
    );
    sim.client_sends("hi");
    sim.run();
    assert!(sim.ex().awaiting_response().is_some());

    // A proxy answer due next: no clock.
    let mut config = tunnel();
    config.rules = Some(api_rules());
    let mut sim = Sim::new(
        config,
        Script::new(get("/v1/admin/x") + &get("/v1/ok"), vec![]),
        Plan::default(),
        Limits::roomy(),
    );
    sim.resize_cout(0);
    sim.run();
    assert_eq!(sim.ex().queued().exchanges, 2, "the 403 is stuck in front");
    assert_eq!(sim.ex().awaiting_response(), None);
    sim.resize_cout(64 * 1024);
    sim.run();
    assert!(sim.ex().awaiting_response().is_some(), "the 403 is out");
}

/// The head clock (slowloris inside an inspected connection): it runs from
/// the first byte of a request head until its last, byte by byte, and never
/// between requests; each head is a new wait.
#[test]
fn the_head_clock_runs_only_inside_a_head() {
    let heads = [get("/a"), get("/b")];
    let mut sim = Sim::new(
        tunnel(),
        Script::new("", vec![]),
        Plan::default(),
        Limits::roomy(),
    );
    sim.run();
    assert_eq!(sim.ex().awaiting_head(), None, "nothing sent yet");
    let mut ids = Vec::new();
    for head in &heads {
        let mut id = None;
        for (i, b) in head.bytes().enumerate() {
            sim.client_sends([b]);
            sim.run();
            if i + 1 < head.len() {
                let now = sim.ex().awaiting_head().expect("inside a head");
                assert_eq!(*id.get_or_insert(now), now, "one head, one wait");
            } else {
                assert_eq!(sim.ex().awaiting_head(), None, "the head is whole");
            }
        }
        ids.extend(id);
        assert!(!sim.head_timeout(), "a stale timer changes nothing");
        // Between requests (its response pending or not): no clock.
        sim.upstream_sends(ok("x"));
        sim.run();
        assert_eq!(sim.ex().awaiting_head(), None);
    }
    assert_ne!(ids[0], ids[1], "a new head restarts the clock");
    assert_eq!(sim.outcome().statuses(&["GET", "GET"]), [200, 200]);
}

/// A head still incomplete when the clock fires is answered 408, in order
/// behind the responses still due, and the connection closes.
#[test]
fn a_head_that_does_not_finish_in_time_is_408() {
    let partial = "GET /slow HTTP/1.1\r\nHost: origin.test\r\nX-A: b\r\n";
    for cut in 1..partial.len() {
        let mut sim = Sim::new(
            tunnel(),
            Script::new(get("/first") + &partial[..cut], vec![]),
            Plan::default(),
            Limits::roomy(),
        );
        sim.run();
        assert!(sim.ex().awaiting_head().is_some(), "cut {cut}");
        assert!(sim.head_timeout(), "cut {cut}");
        sim.run();
        assert!(
            sim.to_client.is_empty(),
            "the 408 waits for the response due"
        );
        sim.upstream_sends(ok("first"));
        sim.run();
        let out = sim.outcome();
        assert_eq!(out.end, Ending::Closed(End::Done), "cut {cut}");
        assert_eq!(out.statuses(&["GET", "GET"]), [200, 408], "cut {cut}");
        let r = responses(&out.to_client, &["GET", "GET"]);
        assert_eq!(
            r[1].header("X-Proxy-Error").as_deref(),
            Some("request-timeout")
        );
        assert_eq!(r[1].header("Connection").as_deref(), Some("close"));
        assert_eq!(out.record_statuses(), [Some(200), Some(408)]);
        assert_eq!(out.upstream_text(), get("/first"), "nothing of it went on");
    }
}

/// A tunnel whose client sends `client` in two reads, cut at `cut`.
fn cut_once(client: &str, replies: Vec<Reply>, cut: usize) -> Sim {
    Sim::new(
        tunnel(),
        Script::new(client, replies),
        Plan {
            client_cuts: vec![cut],
            upstream_cuts: vec![],
        },
        Limits::roomy(),
    )
}

/// A malformed start the head gate has not let through yet, then silence:
/// parsed on arrival it was a 400 at once; held back (too few bytes since
/// the last parse, no empty line), the head clock looks at it before its
/// 408 and refuses it for what it is.
#[test]
fn a_malformed_start_then_silence_is_400_not_408() {
    let head = "GET /x HTTP/1.1\r\nHost: origin.test\r\nBad Header: x\r\n";
    let mut sim = cut_once(head, vec![], 26);
    sim.run();
    if sim.ex().awaiting_head().is_some() {
        assert!(sim.head_timeout());
        sim.run();
    }
    assert_eq!(sim.outcome().statuses(&["GET"]), [400]);
}

/// While the machine holds the client back (answers owed), its waiting
/// bytes are not a slow head.
#[test]
fn no_head_clock_while_the_client_is_held_back() {
    let mut client = String::new();
    for i in 0..crate::protocol::http1::exchange::MAX_DUE {
        client += &get(&format!("/{i}"));
    }
    client += "GET /next HTTP/1.1\r\n";
    let mut sim = Sim::new(
        tunnel(),
        Script::new(&client, vec![]),
        Plan::default(),
        Limits::roomy(),
    );
    sim.run();
    assert_eq!(
        sim.ex().queued().exchanges,
        crate::protocol::http1::exchange::MAX_DUE
    );
    assert_eq!(sim.ex().awaiting_head(), None);
    assert!(!sim.head_timeout());
}

/// A malformed start the head gate has not let through yet when the
/// upstream closes cleanly: parsed on arrival it was a 400 at once; the
/// upstream's end looks at it before ending the conversation.
#[test]
fn a_malformed_start_held_back_is_400_when_the_upstream_closes() {
    let head = "GET /x HTTP/1.1\r\nHost: origin.test\r\nBad Header: x\r\n";
    for first in [None, Some("/first")] {
        let mut client = String::new();
        let mut replies = vec![];
        if let Some(path) = first {
            client += &get(path);
            replies.push(Reply::on(&get(path), ok("first")));
        }
        let cut = client.len() + 26;
        client += head;
        let mut sim = cut_once(&client, replies, cut);
        sim.run();
        assert!(sim.ex().awaiting_head().is_some(), "held back, waiting");
        sim.upstream_closes();
        sim.run();
        let out = sim.outcome();
        let methods: Vec<&str> = first.iter().map(|_| "GET").chain(["GET"]).collect();
        let want: Vec<u16> = first.iter().map(|_| 200).chain([400]).collect();
        assert_eq!(out.statuses(&methods), want, "after {first:?}");
        assert_eq!(out.end, Ending::Closed(End::Done), "after {first:?}");
    }
}

/// A start merely incomplete when the upstream closes cleanly: nothing
/// more can be forwarded, and the conversation ends without an answer.
#[test]
fn an_incomplete_start_ends_quietly_when_the_upstream_closes() {
    let head = "GET /x HTTP/1.1\r\nHost: origin.test\r\nGood: x\r\n";
    let mut sim = cut_once(head, vec![], 26);
    sim.run();
    sim.upstream_closes();
    sim.run();
    let out = sim.outcome();
    assert!(out.to_client.is_empty(), "{:?}", out.client_text());
    assert_eq!(out.end, Ending::Closed(End::Done));
}
