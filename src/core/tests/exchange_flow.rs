//! The exchange machine relaying well-behaved conversations: pipelining,
//! `100 Continue`, bodiless responses, chunked bodies with trailers,
//! half-close, early answers, close-delimited responses, and the forward
//! proxy's rewriting and switching. Most run split at every byte.

use super::exchange_sim::*;
use crate::protocol::http::{parse_request_head, MAX_HEADERS};
use crate::protocol::http1::{parse_response_head, Decision, End, ExchangeConfig, Mode, Status};
use crate::target::Target;

fn post(path: &str, extra: &str, body: &str) -> String {
    format!("POST {path} HTTP/1.1\r\nHost: origin.test\r\n{extra}\r\n{body}")
}

fn chunked_ok(chunks: &[&str], trailers: &str) -> String {
    let mut s = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_string();
    for c in chunks {
        s += &format!("{:x}\r\n{c}\r\n", c.len());
    }
    s + "0\r\n" + trailers + "\r\n"
}

#[test]
fn three_pipelined_requests_are_answered_in_order() {
    let client = get("/one")
        + &post("/two", "Content-Length: 3\r\n", "abc")
        + &post(
            "/three",
            "Transfer-Encoding: chunked\r\n",
            "2\r\nxy\r\n0\r\n\r\n",
        );
    let script = Script::new(
        &client,
        vec![
            Reply::on("GET /one", ok("one")),
            Reply::on("abc", ok("two")),
            Reply::on("xy\r\n0\r\n\r\n", chunked_ok(&["thr", "ee"], "")),
        ],
    );
    let out = run_split(&tunnel(), &script);
    assert_eq!(out.upstream_text(), client, "forwarded verbatim");
    let texts: Vec<String> = responses(&out.to_client, &["GET", "POST", "POST"])
        .iter()
        .map(|r| r.text())
        .collect();
    assert_eq!(texts, ["one", "two", "3\r\nthr\r\n2\r\nee\r\n0\r\n\r\n"]);
    assert_eq!(out.end, Ending::Stalled, "the connection stays open");
    assert_eq!(out.record_statuses(), [Some(200); 3]);
    let paths: Vec<_> = out
        .records
        .iter()
        .map(|r| r.path.clone().unwrap())
        .collect();
    assert_eq!(paths, ["/one", "/two", "/three"]);
    assert!(out
        .records
        .iter()
        .all(|r| r.decision == Decision::Allowed(None)
            && r.authority.as_deref() == Some("origin.test:80")));
}

/// `Content-Length: 0` is no body: the next request follows the head at
/// once, whether the request is forwarded or refused (found by fuzzing).
#[test]
fn content_length_zero_is_no_body() {
    let mut config = tunnel();
    config.rules = Some(api_rules());
    let client = post("/v1/x", "Content-Length: 0\r\n", "")
        + &post("/v1/x", "Content-Length: 0\r\nExpect: 100-continue\r\n", "")
        + &get("/v1/y");
    let script = Script::new(&client, vec![Reply::on("GET /v1/y", ok("y"))]).then_eof();
    let out = run_split(&config, &script);
    assert_eq!(out.statuses(&["POST", "POST", "GET"]), [403, 403, 200]);
    assert_eq!(out.end, Ending::Closed(End::Done));

    let client = "GET http://origin.test/a HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n\
                  GET http://origin.test/b HTTP/1.1\r\nHost: x\r\n\r\n";
    let script = Script::new(
        client,
        vec![Reply::on("GET /a", ok("a")), Reply::on("GET /b", ok("b"))],
    )
    .then_eof();
    let out = run_split(&forward(), &script);
    assert_eq!(out.statuses(&["GET", "GET"]), [200, 200]);
    assert_eq!(out.end, Ending::Closed(End::Done));
}

/// `Expect: 100-continue` is answered by the proxy: its `100` comes first,
/// the upstream sees a plain upload (no `Expect`, so a body it cannot
/// take for a request), and the final answer and the next request follow
/// as for any upload, at every split.
#[test]
fn expect_100_continue_is_answered_by_the_proxy() {
    let head = post("/up", "Expect: 100-continue\r\nContent-Length: 5\r\n", "");
    let script = Script::new(
        head.clone() + "hello" + &get("/next"),
        vec![
            Reply::on("hello", ok("got it")),
            Reply::on("GET /next", ok("next")),
        ],
    );
    let out = run_split(&tunnel(), &script);
    let r = responses(&out.to_client, &["POST", "GET"]);
    let got: Vec<_> = r.iter().map(|r| (r.status, r.text())).collect();
    assert_eq!(
        got,
        [
            (100, String::new()),
            (200, "got it".into()),
            (200, "next".into())
        ]
    );
    let plain = post("/up", "Content-Length: 5\r\n", "");
    assert_eq!(out.upstream_text(), plain + "hello" + &get("/next"));
    // The record has the final status, not the interim one.
    assert_eq!(out.record_statuses(), [Some(200), Some(200)]);
}

/// A final answer to an upload whose client waits for the `100`: the
/// client had the proxy's `100` first, so what it sends next is its body
/// (the upstream reads it as one: it saw no `Expect`), and then its next
/// request, judged.
#[test]
fn a_final_answer_after_the_proxys_100_leaves_the_body_a_body() {
    let head = post("/up", "Expect: 100-continue\r\nContent-Length: 5\r\n", "");
    let refusal = "HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n";
    let mut sim = Sim::new(
        tunnel(),
        Script::new(&head, vec![Reply::on("Content-Length: 5\r\n\r\n", refusal)]),
        Plan::default(),
        Limits::roomy(),
    );
    sim.run();
    sim.client_sends("hello");
    sim.client_sends(get("/next"));
    sim.upstream_sends(ok("next"));
    sim.run();
    let out = sim.outcome();
    assert_eq!(
        out.client_text(),
        "HTTP/1.1 100 Continue\r\n\r\n".to_owned() + refusal + &ok("next")
    );
    let plain = post("/up", "Content-Length: 5\r\n", "");
    assert_eq!(out.upstream_text(), plain + "hello" + &get("/next"));
}

#[test]
fn head_204_and_304_have_no_body() {
    let client = "HEAD /head HTTP/1.1\r\nHost: origin.test\r\n\r\n".to_string()
        + &get("/204")
        + &get("/304")
        + &get("/last");
    let script = Script::new(
        &client,
        vec![
            Reply::on(
                "HEAD /head",
                "HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n",
            ),
            Reply::on("GET /204", "HTTP/1.1 204 No Content\r\nX-A: b\r\n\r\n"),
            Reply::on(
                "GET /304",
                "HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\nContent-Length: 10\r\n\r\n",
            ),
            Reply::on("GET /last", ok("last")),
        ],
    );
    let out = run_split(&tunnel(), &script);
    let methods = ["HEAD", "GET", "GET", "GET"];
    assert_eq!(out.statuses(&methods), [200, 204, 304, 200]);
    assert_eq!(responses(&out.to_client, &methods)[3].text(), "last");
    assert_eq!(
        out.record_statuses(),
        [Some(200), Some(204), Some(304), Some(200)]
    );
    assert_eq!(out.end, Ending::Stalled);
}

#[test]
fn chunked_bodies_with_trailers_pass_both_ways() {
    let body = "5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Req-Trailer: n=11\r\n\r\n";
    let client = post("/c", "Transfer-Encoding: chunked\r\n", body) + &get("/after");
    let resp = chunked_ok(
        &["a", "bcdefghijklmnopq"],
        "X-Resp-Trailer: n=17\r\nX-B: 2\r\n",
    );
    let script = Script::new(
        &client,
        vec![
            Reply::on("n=11\r\n\r\n", &resp),
            Reply::on("GET /after", ok("after")),
        ],
    );
    let out = run_split(&tunnel(), &script);
    assert_eq!(out.upstream_text(), client);
    assert_eq!(out.client_text(), resp + &ok("after"));
}

#[test]
fn half_close_still_gets_every_answer_then_done() {
    let client = get("/a") + &get("/b");
    let script = Script::new(
        &client,
        vec![Reply::on("GET /a", ok("a")), Reply::on("GET /b", ok("b"))],
    )
    .then_eof();
    let out = run_split(&tunnel(), &script);
    assert_eq!(out.client_text(), ok("a") + &ok("b"));
    assert_eq!(out.end, Ending::Closed(End::Done));

    // A refused request queued behind a slow one is answered too.
    let mut config = tunnel();
    config.rules = Some(api_rules());
    let client = get("/v1/slow") + &get("/v1/admin/x");
    let script = Script::new(&client, vec![Reply::on("GET /v1/slow", ok("slow"))]).then_eof();
    let out = run_split(&config, &script);
    assert_eq!(out.statuses(&["GET", "GET"]), [200, 403]);
    assert_eq!(out.end, Ending::Closed(End::Done));
}

/// Step by step: the client half-closes while its answer is still due;
/// the answer still comes, then the connection is done. An upstream that
/// closes an idle keep-alive connection ends it cleanly.
#[test]
fn eofs_while_answers_are_due_or_idle() {
    let mut sim = one_get();
    sim.run();
    sim.client_closes();
    sim.run();
    assert_eq!(sim.ex().status(), Status::Open, "an answer is still due");
    sim.upstream_sends(ok("a"));
    sim.run();
    assert_eq!(sim.outcome().end, Ending::Closed(End::Done));
    assert_eq!(sim.outcome().client_text(), ok("a"));

    let mut sim = one_get();
    sim.upstream_sends(ok("a"));
    sim.run();
    assert_eq!(sim.ex().status(), Status::Open, "idle keep-alive");
    sim.upstream_closes();
    sim.run();
    assert_eq!(sim.outcome().end, Ending::Closed(End::Done));
}

#[test]
fn a_half_received_head_at_eof_is_dropped() {
    let script = Script::new(
        get("/a") + "GET /b HTTP/1.1\r\nHo",
        vec![Reply::on("GET /a", ok("a"))],
    )
    .then_eof();
    let out = run_split(&tunnel(), &script);
    assert_eq!(out.client_text(), ok("a"));
    assert_eq!(out.upstream_text(), get("/a"));
    assert_eq!(out.end, Ending::Closed(End::Done));
}

/// The upstream answers (413, and closes) while the body still streams:
/// the client gets the answer and the connection ends. How much of the
/// body went up first depends on timing, so only the client's side is
/// compared across splits.
#[test]
fn an_early_answer_ends_the_upload() {
    let head = post("/big", "Content-Length: 100000\r\n", "");
    let client = head.clone() + &"x".repeat(100_000);
    let answer = "HTTP/1.1 413 Content Too Large\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";
    let script = Script::new(
        &client,
        vec![
            Reply::on("Content-Length: 100000\r\n\r\n", answer),
            Reply::eof(),
        ],
    );
    let whole = run(&tunnel(), &script);
    assert_eq!(whole.client_text(), answer);
    assert_eq!(whole.end, Ending::Closed(End::Done));
    assert!(whole.upstream_text().starts_with(&head));
    assert!(
        whole.to_upstream.len() < client.len(),
        "the upload was cut off"
    );
    assert_eq!(whole.record_statuses(), [Some(413)]);
    for cut in (0..head.len() + 20).step_by(3) {
        let plan = Plan {
            client_cuts: vec![cut],
            ..Plan::default()
        };
        for limits in [Limits::roomy(), Limits::tight()] {
            let got = run_with(&tunnel(), &script, plan.clone(), limits);
            assert_eq!(got.client_text(), answer, "cut at {cut}");
            assert_eq!(got.end, Ending::Closed(End::Done), "cut at {cut}");
        }
    }

    // A small upload, split at every byte both ways: the client always gets
    // exactly the answer, and the conversation ends the same way.
    let head = post("/small", "Content-Length: 100\r\n", "");
    let client = head.clone() + &"y".repeat(100);
    let script = Script::new(
        &client,
        vec![
            Reply::on("Content-Length: 100\r\n\r\n", answer),
            Reply::eof(),
        ],
    );
    let out = run_split_client(&tunnel(), &script);
    assert_eq!(out.client_text(), answer);
    assert_eq!(out.end, Ending::Closed(End::Done));
    assert_eq!(out.record_statuses(), [Some(413)]);
    // Fed a byte at a time, the answer comes while the body streams.
    let every = (0..=client.len()).collect();
    let plan = Plan {
        client_cuts: every,
        ..Plan::default()
    };
    let early = run_with(&tunnel(), &script, plan, Limits::roomy());
    assert!(early.upstream_text().starts_with(&head));
    assert!(
        early.to_upstream.len() < client.len(),
        "the upload was cut off"
    );
}

/// An early answer that keeps the connection: the rest of the body still
/// goes up, and the next request after it.
#[test]
fn an_early_keep_alive_answer_lets_the_body_finish() {
    let client = post("/p", "Content-Length: 10\r\n", "0123456789") + &get("/next");
    let mut sim = Sim::new(
        tunnel(),
        Script::new(post("/p", "Content-Length: 10\r\n", "01234"), vec![]),
        Plan::default(),
        Limits::roomy(),
    );
    sim.run();
    sim.upstream_sends(ok("early"));
    sim.run();
    assert_eq!(sim.outcome().client_text(), ok("early"));
    sim.client_sends("56789");
    sim.client_sends(get("/next"));
    sim.upstream_sends(ok("next"));
    sim.run();
    let out = sim.outcome();
    assert_eq!(out.upstream_text(), client);
    assert_eq!(out.client_text(), ok("early") + &ok("next"));
    assert_eq!(out.end, Ending::Stalled);

    // The same conversation scripted, split at every byte both ways: the
    // answer comes once half the body is up (early whenever the cuts hold
    // the rest back), and every run relays the same bytes.
    let script = Script::new(
        &client,
        vec![
            Reply::on("01234", ok("early")),
            Reply::on("GET /next", ok("next")),
        ],
    );
    let out = run_split(&tunnel(), &script);
    assert_eq!(out.upstream_text(), client);
    assert_eq!(out.client_text(), ok("early") + &ok("next"));
    assert_eq!(out.end, Ending::Stalled);
    assert_eq!(out.record_statuses(), [Some(200), Some(200)]);
}

#[test]
fn a_close_delimited_response_ends_the_connection() {
    let body = "and then everything, 0\r\n\r\nHTTP/1.1 200 OK\r\n\r\n".repeat(20);
    let resp = format!("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n{body}");
    let client = get("/until-close") + &get("/fine");
    let script = Script::new(&client, vec![Reply::on("GET /fine", &resp), Reply::eof()]);
    let out = run_split(&tunnel(), &script);
    assert_eq!(
        out.client_text(),
        resp,
        "exactly the upstream's bytes, nothing after"
    );
    assert_eq!(out.end, Ending::Closed(End::Done));
    // The second request was never answered.
    assert_eq!(out.record_statuses(), [Some(200), None]);
}

#[test]
fn a_response_that_says_close_ends_the_connection_after_it() {
    let client = get("/a") + &get("/b");
    let resp = "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\na";
    let script = Script::new(&client, vec![Reply::on("GET /b", resp)]);
    let out = run_split(&tunnel(), &script);
    assert_eq!(out.client_text(), resp);
    assert_eq!(out.end, Ending::Closed(End::Done));
    assert_eq!(out.record_statuses(), [Some(200), None]);
}

#[test]
fn a_request_that_says_close_ends_the_connection_after_its_answer() {
    let client = "GET /bye HTTP/1.1\r\nHost: origin.test\r\nConnection: close\r\n\r\n".to_string()
        + &get("/ignored");
    let script = Script::new(&client, vec![Reply::on("GET /bye", ok("bye"))]);
    let out = run_split(&tunnel(), &script);
    assert_eq!(out.client_text(), ok("bye"));
    assert!(
        !out.upstream_text().contains("/ignored"),
        "nothing read after it"
    );
    assert_eq!(out.end, Ending::Closed(End::Done));
    assert_eq!(out.records.len(), 1);
}

/// HTTP/1.0 without keep-alive closes after each exchange.
#[test]
fn http10_closes_after_its_answer() {
    let client = "GET /old HTTP/1.0\r\n\r\n";
    let resp = "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok";
    let out = run_split(
        &tunnel(),
        &Script::new(client, vec![Reply::on("GET /old", resp)]),
    );
    assert_eq!(out.client_text(), resp);
    assert_eq!(out.end, Ending::Closed(End::Done));
}

#[test]
fn forward_mode_rewrites_heads_both_ways() {
    let client = "GET http://origin.test/a?q=1 HTTP/1.1\r\nHost: ignored.example\r\n\
                  Connection: keep-alive, X-Hop\r\nX-Hop: secret\r\nProxy-Authorization: Basic Zm9v\r\n\
                  Upgrade: h2c\r\nX-E2E: kept\r\n\r\n\
                  POST http://ORIGIN.test:80/b HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi";
    let script = Script::new(
        client,
        vec![
            Reply::on(
                "GET /a",
                "HTTP/1.1 200 OK\r\nKeep-Alive: timeout=5\r\nProxy-Authenticate: Basic\r\n\
                 Connection: X-R\r\nX-R: 1\r\nContent-Length: 1\r\n\r\na",
            ),
            Reply::on("hi", ok("b")),
        ],
    );
    let out = run_split(&forward(), &script);
    assert_eq!(
        out.upstream_text(),
        "GET /a?q=1 HTTP/1.1\r\nX-E2E: kept\r\nHost: origin.test\r\nVia: 1.1 portcullis\r\n\r\n\
         POST /b HTTP/1.1\r\nContent-Length: 2\r\nHost: origin.test\r\nConnection: close\r\n\
         Via: 1.1 portcullis\r\n\r\nhi"
    );
    assert_eq!(
        out.client_text(),
        "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nVia: 1.1 portcullis\r\n\r\na\
         HTTP/1.1 200 OK\r\nContent-Length: 1\r\nConnection: close\r\nVia: 1.1 portcullis\r\n\r\nb"
    );
    assert_eq!(out.end, Ending::Closed(End::Done));
    let auth: Vec<_> = out.records.iter().map(|r| r.authority.clone()).collect();
    assert_eq!(
        auth,
        [Some("origin.test:80".into()), Some("origin.test:80".into())]
    );
}

/// `n` header lines, `X-H0: 0` on.
fn header_lines(n: usize) -> String {
    (0..n).map(|i| format!("X-H{i}: {i}\r\n")).collect()
}

/// The forward proxy adds to the heads it sends on (`Via`, a `Connection`
/// it replaces the received ones with): what it sends on must still be a
/// head it would parse itself, within [`MAX_HEADERS`] lines (a chained
/// portcullis, or a client with the same limit, such as hyper's default,
/// would refuse the rest). A head without room for what the proxy adds
/// is answered instead: a response with a `502`, a request with a `431`.
#[test]
fn the_forward_proxy_sends_on_no_head_over_its_own_header_limit() {
    for n in MAX_HEADERS - 3..=MAX_HEADERS {
        // A response of `n` lines, to a request that closes: it goes on
        // with `Connection: close` and `Via`, two lines more.
        let client = "GET http://origin.test/a HTTP/1.1\r\nHost: origin.test\r\n\
                      Connection: close\r\n\r\n";
        let response = format!(
            "HTTP/1.1 200 OK\r\n{}Content-Length: 2\r\n\r\nok",
            header_lines(n - 1)
        );
        let out = run(
            &forward(),
            &Script::new(client, vec![Reply::on("GET /a", response)]),
        );
        let Ok(Some((head, _))) = parse_response_head(&out.to_client, usize::MAX) else {
            panic!("{n} lines: the client got a head we would not parse");
        };
        if n + 2 <= MAX_HEADERS {
            assert_eq!(head.status, 200, "{n} lines");
            assert_eq!(head.headers.len(), n + 2, "{n} lines");
            assert_eq!(out.end, Ending::Closed(End::Done), "{n} lines");
        } else {
            assert_eq!(head.status, 502, "{n} lines");
            assert_eq!(
                head.header("X-Proxy-Error"),
                Some(&b"bad-upstream-response"[..]),
                "{n} lines"
            );
            let lines = n + 2;
            let why = format!(
                "response head too large: {lines} header lines once the proxy's own are added, at most {MAX_HEADERS}"
            );
            assert_eq!(out.end, Ending::Closed(End::BadUpstream(why)));
        }

        // A request of `n` lines (`Host` among them, replaced): it goes on
        // with `Via`, one line more.
        let client = format!(
            "GET http://origin.test/b HTTP/1.1\r\nHost: origin.test\r\n{}\r\n",
            header_lines(n - 1)
        );
        let out = run(
            &forward(),
            &Script::new(&client, vec![Reply::on("GET /b", ok("b"))]),
        );
        if n < MAX_HEADERS {
            let Ok(Some((head, _))) = parse_request_head(&out.to_upstream, usize::MAX) else {
                panic!("{n} lines: the upstream got a head we would not parse");
            };
            assert_eq!(head.headers.len(), n + 1, "{n} lines");
            assert_eq!(out.statuses(&["GET"]), [200], "{n} lines");
        } else {
            assert!(
                out.to_upstream.is_empty(),
                "{n} lines: sent on as {} header lines",
                parse_request_head(&out.to_upstream, usize::MAX)
                    .map_or(0, |h| h.map_or(0, |(h, _)| h.headers.len()))
            );
            let r = responses(&out.to_client, &["GET"]);
            assert_eq!(r[0].status, 431, "{n} lines");
            assert_eq!(
                r[0].header("X-Proxy-Error").as_deref(),
                Some("head-too-large")
            );
        }
    }
}

#[test]
fn forward_mode_switches_once_everything_is_answered() {
    let other = "GET http://other.test:8080/b HTTP/1.1\r\nHost: other.test:8080\r\n\r\n";
    let client =
        "GET http://origin.test/a HTTP/1.1\r\nHost: origin.test\r\n\r\n".to_string() + other;
    let script = Script::new(&client, vec![Reply::on("GET /a", ok("a"))]);
    let out = run_split(&forward(), &script);
    assert_eq!(
        out.end,
        Ending::Switch(Target::new("other.test", 8080).unwrap())
    );
    assert_eq!(
        out.left,
        other.as_bytes(),
        "the new host's request is left in cin"
    );
    assert!(out.client_text().starts_with("HTTP/1.1 200 OK\r\n"));
    assert!(out.client_text().ends_with("\r\n\r\na"));
    assert_eq!(
        out.records.len(),
        1,
        "the switched request is the next machine's"
    );

    // Before the answer is in, the machine waits; asking again is the same.
    let mut sim = Sim::new(
        forward(),
        Script::new(&client, vec![]),
        Plan::default(),
        Limits::roomy(),
    );
    sim.run();
    assert_eq!(sim.outcome().end, Ending::Stalled);
    assert_eq!(sim.ex().status(), Status::Open);
    sim.upstream_sends(ok("a"));
    sim.run();
    assert!(matches!(sim.outcome().end, Ending::Switch(_)));
}

#[test]
fn forward_mode_needs_an_absolute_uri() {
    for (client, why) in [
        (get("/a"), "absolute URI"),
        (
            "GET ftp://origin.test/ HTTP/1.1\r\nHost: origin.test\r\n\r\n".to_string(),
            "only http and https",
        ),
    ] {
        let out = run_split(&forward(), &Script::new(&client, vec![]));
        let r = &responses(&out.to_client, &["GET"])[0];
        assert_eq!(r.status, 400, "{client}");
        assert!(r.text().contains(why), "{}", r.text());
        assert_eq!(r.header("Connection").as_deref(), Some("close"));
        assert!(out.to_upstream.is_empty());
        assert_eq!(out.end, Ending::Closed(End::Done));
    }
}

#[test]
fn forward_mode_upgrade_keeps_upgrade_headers() {
    let client = "GET http://origin.test/ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\n\
                  Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: k\r\n\r\n";
    let resp =
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n";
    let out = run_split(
        &forward(),
        &Script::new(
            client,
            vec![Reply::on("\r\n\r\n", resp.to_string() + "raw")],
        ),
    );
    assert_eq!(
        out.upstream_text(),
        "GET /ws HTTP/1.1\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: k\r\n\
         Host: origin.test\r\n\
         Connection: upgrade\r\nVia: 1.1 portcullis\r\n\r\n"
    );
    assert_eq!(
        out.client_text(),
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\
         Via: 1.1 portcullis\r\n\r\nraw"
    );
    assert_eq!(out.end, Ending::Upgraded);
}

/// A policy reload judges the next request by the new rules.
#[test]
fn new_rules_judge_the_next_request() {
    let mut sim = Sim::new(
        tunnel(),
        Script::new(
            get("/v1/admin/x"),
            vec![Reply::on("GET /v1/admin/x", ok("old"))],
        ),
        Plan::default(),
        Limits::roomy(),
    );
    sim.run();
    sim.ex().set_rules(Some(api_rules()));
    sim.client_sends(get("/v1/admin/y"));
    sim.run();
    let out = sim.outcome();
    assert_eq!(out.statuses(&["GET", "GET"]), [200, 403]);
    assert!(matches!(out.records[1].decision, Decision::Denied(_)));
}

/// IPv6 and IP targets: the forward proxy writes `Host` with brackets and
/// the port when it is not 80.
#[test]
fn forward_mode_host_header_for_ip_targets() {
    let upstream = Target::new("::1", 8080).unwrap();
    let config = ExchangeConfig {
        max_head_bytes: HEAD_MAX,
        ..ExchangeConfig::new(Mode::Forward {
            upstream,
            tls: false,
        })
    };
    let client = "GET http://[::1]:8080/ HTTP/1.1\r\nHost: x\r\n\r\n";
    let out = run(&config, &Script::new(client, vec![]));
    assert_eq!(
        out.upstream_text(),
        "GET / HTTP/1.1\r\nHost: [::1]:8080\r\nVia: 1.1 portcullis\r\n\r\n"
    );
}

#[test]
fn an_https_request_switches_to_a_tls_upstream() {
    use crate::protocol::http1::exchange::{ClientAction, Exchange};
    let mut ex = Exchange::new(forward());
    let req = b"GET https://origin.test/x HTTP/1.1\r\nHost: origin.test\r\n\r\n";
    match ex.on_client(req, 64 * 1024) {
        ClientAction::Switch { target, tls } => {
            assert!(tls, "https is spoken by the proxy");
            assert_eq!(target, Target::new("origin.test", 443).unwrap());
        }
        other => panic!("{other:?}"),
    }
}
