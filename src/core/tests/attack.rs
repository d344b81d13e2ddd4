//! Attacks on the sans-IO core from outside: what a hostile client or
//! upstream can do with bytes and time alone.

use std::time::Duration;

use super::exchange_runs::api_request_rules;
use super::sim::{Options, Session, ORIGIN};
use crate::core::inspect::Stop;
use crate::protocol::http1::exchange::MAX_RECORDS;

fn get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: {ORIGIN}\r\n\r\n")
}

/// A client that keeps sending refused requests, a batch each second, is
/// busy, not idle: the yield that lets the shell take the batch's records
/// must not leave the idle clock where it was.
#[test]
fn a_steady_stream_of_refused_requests_is_not_idle() {
    let mut s = Session::new(Options {
        idle: Some(Duration::from_secs(5)),
        rules: Some(api_request_rules()),
        ..Options::tunnel()
    });
    let batch = get("/v1/admin/x").repeat(MAX_RECORDS / 2);
    for second in 0..10 {
        s.client_sends(&batch);
        s.drive();
        assert!(s.stop.is_none(), "closed {:?} after {second} s", s.reason());
        s.elapse(Duration::from_secs(1));
    }
    assert!(s.stop.is_none(), "closed {:?}", s.reason());
    assert_eq!(s.records.len(), 10 * MAX_RECORDS / 2);
}

/// A 101 with a client that sent its first frames behind the upgrade
/// request, and an upstream that sent its first frames behind the 101:
/// every byte reaches the raw relay, in order, none twice; one record.
#[test]
fn an_upgrade_hands_over_every_early_byte_both_ways() {
    let mut s = Session::new(Options::tunnel());
    let ws = format!(
        "GET /ws HTTP/1.1\r\nHost: {ORIGIN}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    s.client_sends(format!("{ws}client-frame-1"));
    s.drive();
    s.client_sends("client-frame-2");
    s.drive();
    let switching = "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n\
                     Upgrade: websocket\r\n\r\n";
    s.upstream_sends(format!("{switching}server-frame"));
    s.drive();
    assert!(matches!(s.stop, Some(Stop::Upgraded)), "{:?}", s.stop);
    let parts = s.parts.as_ref().unwrap();
    let up = [
        s.upstream.got.as_slice(),
        parts.uout.data(),
        parts.cin.data(),
    ]
    .concat();
    let down = [s.client.got.as_slice(), parts.cout.data(), parts.uin.data()].concat();
    assert_eq!(
        String::from_utf8_lossy(&up),
        format!("{ws}client-frame-1client-frame-2")
    );
    assert_eq!(
        String::from_utf8_lossy(&down),
        format!("{switching}server-frame")
    );
    assert_eq!(s.records.len(), 1);
}

/// The forward proxy's switch to another host: the request for it is
/// handed over whole, with what follows it, and the login goes along.
#[test]
fn a_forward_switch_hands_over_the_next_requests_and_the_login() {
    let mut s = Session::new(Options {
        mode: crate::protocol::http1::Mode::Forward {
            upstream: super::sim::origin(),
            tls: false,
        },
        ..Options::tunnel()
    });
    s.core()
        .set_login(Some(crate::protocol::http1::exchange::SameLogin::new(
            |_| true,
        )));
    let a = "GET http://origin.test/a HTTP/1.1\r\nHost: origin.test\r\n\r\n";
    let b = "GET http://other.test/b HTTP/1.1\r\nHost: other.test\r\n\r\n";
    let c = "GET http://other.test/c HTTP/1.1\r\nHost: other.test\r\n\r\n";
    s.client_sends(format!("{a}{b}{c}"));
    s.drive();
    assert!(s.stop.is_none());
    s.upstream_sends("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi");
    s.drive();
    let Some(Stop::Switch(target, false)) = &s.stop else {
        panic!("{:?}", s.stop);
    };
    assert_eq!(target.to_string(), "other.test:80");
    let parts = s.parts.as_ref().unwrap();
    assert_eq!(String::from_utf8_lossy(parts.cin.data()), format!("{b}{c}"));
    assert!(parts.login.is_some(), "the login goes along");
    assert_eq!(s.records.len(), 1);
}

/// A client that resets once its requests went up, before their answers:
/// each request is still recorded (an access line, unanswered), or a
/// client could send what it likes upstream and leave no trace of it but
/// the session's byte count.
#[test]
fn requests_sent_before_the_client_resets_are_recorded() {
    let mut s = Session::new(Options::tunnel());
    s.client_sends(get("/a") + &get("/b"));
    s.drive();
    assert_eq!(s.upstream_text(), get("/a") + &get("/b"));
    s.client_reset();
    s.drive();
    assert_eq!(s.reason(), Some(crate::lifecycle::CloseReason::ClientGone));
    let paths: Vec<_> = s.records.iter().map(|r| r.path.clone()).collect();
    assert_eq!(paths, [Some("/a".into()), Some("/b".into())]);
    assert!(s.records.iter().all(|r| r.status.is_none()));
}

/// The same when a clock ends the session: a half-closed client whose
/// large upload is still being sent to an upstream that reads nothing (no
/// response is awaited yet, so no 504 answers it).
#[test]
fn a_request_cut_by_the_half_close_timeout_is_recorded() {
    let mut s = Session::new(Options::tunnel());
    s.uport.room = 0; // the upstream reads nothing
    let body = "u".repeat(100_000);
    s.client_sends(format!(
        "POST /up HTTP/1.1\r\nHost: {ORIGIN}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    ));
    s.client_fin();
    s.drive();
    s.elapse(Duration::from_secs(60));
    assert_eq!(
        s.reason(),
        Some(crate::lifecycle::CloseReason::HalfCloseTimeout)
    );
    assert_eq!(s.records.len(), 1, "{:?}", s.records);
}

/// Pipelined requests whose bodiless responses (204) arrive in one burst,
/// after a long wait: the burst that fills the records is traffic, so the
/// idle clock starts from it, not from when the requests went up (the
/// session was closed as idle the moment the answers came).
#[test]
fn a_burst_of_pipelined_responses_restarts_the_idle_clock() {
    let mut s = Session::new(Options {
        idle: Some(Duration::from_secs(10)),
        ..Options::tunnel()
    });
    let n = MAX_RECORDS / 2;
    s.client_sends(get("/p").repeat(n));
    s.drive();
    s.elapse(Duration::from_secs(20));
    assert!(s.stop.is_none(), "{:?}", s.reason());
    s.upstream_sends("HTTP/1.1 204 No Content\r\n\r\n".repeat(n));
    s.drive();
    assert_eq!(s.records.len(), n);
    s.elapse(Duration::from_secs(9));
    assert!(
        s.stop.is_none(),
        "closed {:?} at {:?}",
        s.reason(),
        s.elapsed()
    );
    s.elapse(Duration::from_secs(1));
    assert_eq!(s.reason(), Some(crate::lifecycle::CloseReason::IdleTimeout));
}

/// A close-delimited response (no length: it ends with the connection)
/// cut by an upstream reset: the client must get a reset too, never the
/// clean end that says the body is whole.
#[test]
fn a_close_delimited_body_cut_by_an_upstream_reset_resets_the_client() {
    super::session::reset_mid_response_resets_the_client("Connection: close\r\n");
}

/// The same over TLS to the upstream: a TCP FIN without close_notify
/// (a forged FIN, a crashed server) is a truncation, and the client, whose
/// TLS the proxy terminates, must not get a close_notify that vouches for
/// the body; with the upstream's close_notify the end is clean.
#[test]
fn a_tls_close_delimited_body_ends_cleanly_only_with_close_notify() {
    let response = "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\npartial";
    let mut s = Session::new(Options::terminated());
    s.client_sends(get("/a"));
    s.upstream_sends(response);
    s.drive();
    s.upstream_fin();
    s.drive();
    assert!(s.client_text().ends_with("partial"), "{}", s.client_text());
    assert!(
        matches!(s.stop, Some(Stop::Closed { abort: true, .. })),
        "a truncated body closed cleanly: {:?}",
        s.stop
    );

    let mut s = Session::new(Options::terminated());
    s.client_sends(get("/a"));
    s.upstream_sends(response);
    s.drive();
    s.upstream_close_notify();
    s.upstream_fin();
    s.drive();
    assert_eq!(s.client_text(), response);
    assert!(
        matches!(s.stop, Some(Stop::Closed { abort: false, .. })),
        "{:?}",
        s.stop
    );
}

/// The head clock and the idle clock run out at the same instant (an idle
/// timeout equal to the handshake timeout, the head's start the last bytes
/// that moved; or a timer that fires late): the client is owed the 408
/// the head clock queued, not a bare close. Before both were acted on in
/// one call, the 408 went out and the session ended; the idle branch must
/// not drop it.
#[test]
fn a_408_is_not_dropped_by_the_idle_clock_running_out_with_it() {
    for late in [Duration::ZERO, Duration::from_millis(300)] {
        let mut s = Session::new(Options {
            idle: Some(Duration::from_secs(10) + late / 2),
            ..Options::tunnel()
        });
        s.client_sends(format!("GET /slow HTTP/1.1\r\nHost: {ORIGIN}\r\n"));
        s.drive();
        let due = s.deadline().expect("the head clock runs");
        // The timer fires `late` after the head clock's deadline.
        s.now = due + late;
        s.elapse(Duration::ZERO);
        let text = s.client_text();
        assert!(
            text.starts_with("HTTP/1.1 408") && text.contains("request-timeout"),
            "late {late:?}: {text:?}, {:?}",
            s.reason()
        );
        assert_eq!(s.records.len(), 1);
        assert_eq!(s.records[0].status, Some(408), "late {late:?}");
    }
}

/// A client that sent `Expect: 100-continue`, did not wait for the `100`
/// and is uploading its body, then pauses longer than the response
/// timeout (a slow producer behind it): the upstream is waiting for the
/// rest of the body, not failing to answer. The same upload without the
/// `Expect` has no response clock until it is wholly sent; with it, the
/// client got a 504 blaming the upstream, its upload cut.
#[test]
fn a_paused_upload_that_did_not_wait_for_100_continue_gets_no_504() {
    let mut s = Session::new(Options::tunnel());
    s.client_sends(format!(
        "PUT /up HTTP/1.1\r\nHost: {ORIGIN}\r\nExpect: 100-continue\r\nContent-Length: 20\r\n\r\n"
    ));
    s.drive();
    s.elapse(Duration::from_secs(1));
    s.client_sends("0123456789");
    s.drive();
    // The client's producer stalls.
    s.elapse(Duration::from_secs(45));
    assert!(s.stop.is_none(), "{:?}: {}", s.reason(), s.client_text());
    s.client_sends("0123456789");
    s.drive();
    s.upstream_sends("HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n");
    s.drive();
    assert_eq!(
        s.client_text(),
        format!("{CONTINUE}HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n")
    );
    assert_eq!(s.records[0].status, Some(201));
}

/// The proxy's own `100 Continue`.
const CONTINUE: &str = "HTTP/1.1 100 Continue\r\n\r\n";

/// An upload sent whole behind an `Expect` head, however spelt. An
/// upstream told to expect a body only on its say-so may answer from the
/// head alone, keep the connection, and read the body as its next
/// request, one the proxy never judged (the 0.CL desync: closing after
/// the answer would only cut that request's response). So the `Expect`
/// never goes up: the upstream sees a plain upload, whose body is its
/// body, and the client gets the proxy's own `100` (Envoy does the same).
/// Upstreams read `Expect` loosely (Node.js joins repeated headers and
/// finds `100-continue` anywhere, Go's `net/http` takes any token), so
/// every spelling is taken off.
#[test]
fn an_expect_uploads_body_never_goes_up_unbidden() {
    for expect in [
        "Expect: 100-continue",
        "Expect: 100-continue, x",
        "Expect: x, 100-continue",
        "Expect: y 100-continue",
        "Expect: 100-continue;x=1",
        "Expect: x\r\nExpect: 100-continue",
        "Expect: 100-Continue",
        "eXpEcT: 100-continue",
    ] {
        let mut s = Session::new(Options::tunnel());
        let smuggled = format!("DELETE /admin HTTP/1.1\r\nHost: {ORIGIN}\r\n\r\n");
        s.client_sends(format!(
            "PUT /up HTTP/1.1\r\nHost: {ORIGIN}\r\n{expect}\r\nContent-Length: {}\r\n\r\n{smuggled}",
            smuggled.len()
        ));
        s.drive();
        let up = s.upstream_text();
        assert!(
            !up.to_ascii_lowercase().contains("\r\nexpect:"),
            "{expect:?}: an Expect head went up: {up}"
        );
        assert!(
            up.ends_with(&smuggled),
            "{expect:?}: the body goes up: {up}"
        );
        assert_eq!(s.client_text(), CONTINUE, "{expect:?}");
        s.upstream_sends("HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n");
        s.drive();
        assert_eq!(
            s.client_text(),
            format!("{CONTINUE}HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n"),
            "{expect:?}"
        );
        assert_eq!(s.records.len(), 1, "the body is no request");
    }
}

/// An HTTP/1.0 client never waits for a `100` (RFC 9110 10.1.1): it gets
/// none, and its `Expect` does not go up either.
#[test]
fn an_http10_upload_gets_no_100_and_its_expect_does_not_go_up() {
    let mut s = Session::new(Options::tunnel());
    s.client_sends(format!(
        "PUT /up HTTP/1.0\r\nHost: {ORIGIN}\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi"
    ));
    s.drive();
    assert!(!s.upstream_text().to_ascii_lowercase().contains("expect"));
    s.upstream_sends("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n");
    s.drive();
    assert!(
        s.client_text().starts_with("HTTP/1.0 200"),
        "{}",
        s.client_text()
    );
}

/// Nor does an HTTP/1.0 client get the upstream's `100`, never asked for
/// (its `Expect` did not go up), nor any other interim answer: HTTP/1.0
/// has no `1xx` (RFC 9110 15.2), so such a client reads the `100` as its
/// final answer, and the real one as that answer's body. It gets the
/// final answer alone, on a connection kept alive.
#[test]
fn an_http10_client_gets_no_interim_answer_of_the_upstreams() {
    let mut s = Session::new(Options::tunnel());
    s.client_sends(format!(
        "PUT /up HTTP/1.0\r\nHost: {ORIGIN}\r\nConnection: keep-alive\r\n\
         Expect: 100-continue\r\nContent-Length: 2\r\n\r\nhi\
         GET /next HTTP/1.0\r\nHost: {ORIGIN}\r\nConnection: keep-alive\r\n\r\n"
    ));
    s.drive();
    let ok = "HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n";
    s.upstream_sends(format!(
        "HTTP/1.1 100 Continue\r\n\r\n{ok}\
         HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n{ok}"
    ));
    s.drive();
    assert_eq!(s.client_text(), format!("{ok}{ok}"));
    assert!(s.stop.is_none(), "{:?}", s.reason());
    let statuses: Vec<_> = s.records.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [Some(200), Some(200)]);
}

/// A final answer while the body still comes, after the proxy's `100`:
/// the upstream saw a plain upload, so this is an early answer like any
/// other: the rest of the body goes up as the body, and the next request
/// is judged and forwarded on the same connection.
#[test]
fn a_final_answer_mid_upload_is_an_early_answer_like_any_other() {
    let mut s = Session::new(Options::tunnel());
    s.client_sends(format!(
        "PUT /up HTTP/1.1\r\nHost: {ORIGIN}\r\nExpect: 100-continue\r\nContent-Length: 20\r\n\r\n"
    ));
    s.drive();
    assert_eq!(s.client_text(), CONTINUE);
    s.client_sends("0123456789");
    s.drive();
    s.upstream_sends("HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n");
    s.drive();
    s.client_sends(format!("0123456789{}", get("/next")));
    s.drive();
    assert!(s.stop.is_none(), "{:?}", s.reason());
    let up = s.upstream_text();
    assert!(
        up.contains(&format!("\r\n\r\n01234567890123456789{}", get("/next"))),
        "{up}"
    );
    s.upstream_sends("HTTP/1.1 204 No Content\r\n\r\n");
    s.drive();
    let paths: Vec<_> = s.records.iter().map(|r| r.path.clone()).collect();
    assert_eq!(paths, [Some("/up".into()), Some("/next".into())]);
}

/// An upstream that sends a `100` of its own (never asked for one): the
/// client has had the proxy's, and gets no second. Other interim answers
/// (`103 Early Hints`) pass, after the proxy's `100`.
#[test]
fn after_the_proxys_100_only_other_interim_answers_pass() {
    let mut s = Session::new(Options::tunnel());
    s.client_sends(format!(
        "PUT /up HTTP/1.1\r\nHost: {ORIGIN}\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n"
    ));
    s.drive();
    s.upstream_sends(
        "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n",
    );
    s.drive();
    s.client_sends("hi");
    s.drive();
    s.upstream_sends("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
    s.drive();
    assert_eq!(
        s.client_text(),
        format!(
            "{CONTINUE}HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n\
             HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
        )
    );
    assert_eq!(s.records[0].status, Some(200));
}

/// Behind a pipelined request still unanswered, the proxy's `100` waits
/// for that answer: answers go out in order, and a `100` ahead of it
/// would pass for the first request's.
#[test]
fn the_proxys_100_waits_for_the_answers_ahead() {
    let mut s = Session::new(Options::tunnel());
    s.client_sends(format!(
        "{}PUT /up HTTP/1.1\r\nHost: {ORIGIN}\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n",
        get("/first")
    ));
    s.drive();
    assert_eq!(s.client_text(), "", "nothing before the first answer");
    s.upstream_sends("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\na");
    s.drive();
    assert_eq!(
        s.client_text(),
        format!("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\na{CONTINUE}")
    );
}

/// An upstream that answers nothing but unasked `100`s, one every 20 s:
/// each is dropped (the client had the proxy's), so none is an answer,
/// and the response clock is not restarted by them: 504 at 30 s.
#[test]
fn dropped_100s_do_not_hold_off_the_response_clock() {
    let mut s = Session::new(Options::tunnel());
    s.client_sends(format!(
        "PUT /up HTTP/1.1\r\nHost: {ORIGIN}\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi"
    ));
    s.drive();
    s.elapse(Duration::from_secs(20));
    s.upstream_sends(CONTINUE);
    s.drive();
    assert_eq!(s.client_text(), CONTINUE, "no second 100");
    assert_eq!(
        s.deadline().map(|d| d - s.now),
        Some(Duration::from_secs(10))
    );
    s.elapse(Duration::from_secs(10));
    assert!(
        s.client_text()
            .starts_with(&format!("{CONTINUE}HTTP/1.1 504")),
        "{}",
        s.client_text()
    );
}
