//! Whole inspected sessions in the simulator: every clock the core keeps,
//! in virtual time; TLS terminated on both sides with real rustls peers in
//! memory; how each side's end, reset or silence ends the session; policy
//! reloads; the work bound per call. Each was a wall-clock or socket test,
//! or not tested at all.

use std::time::Duration;

use super::exchange_runs::api_request_rules;
use super::sim::{Options, Session, ORIGIN};
use crate::core::inspect::Stop;
use crate::lifecycle::CloseReason;
use crate::protocol::http1::Decision;

const OK: &str = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi";

fn get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: {ORIGIN}\r\n\r\n")
}

/// A WebSocket upgrade request.
fn ws_request() -> String {
    format!(
        "GET /ws HTTP/1.1\r\nHost: {ORIGIN}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
}

fn session() -> Session {
    Session::new(Options::tunnel())
}

/// A request forwarded, its response relayed: the baseline every test
/// below departs from.
#[test]
fn a_request_and_its_response_pass() {
    let mut s = session();
    s.client_sends(get("/a"));
    s.drive();
    assert_eq!(s.upstream_text(), get("/a"));
    s.upstream_sends(OK);
    s.drive();
    assert_eq!(s.client_text(), OK);
    assert_eq!(s.records.len(), 1);
    assert_eq!(s.records[0].status, Some(200));
    assert_eq!(s.relayed, (get("/a").len(), OK.len()));
    assert!(s.stop.is_none());
}

/// An upstream that does not answer gets the request a 504 once the
/// response timeout has passed, not a moment before.
#[test]
fn a_silent_upstream_is_answered_504_at_the_response_timeout() {
    let mut s = session();
    s.client_sends(get("/slow"));
    s.drive();
    let due = s.deadline().expect("the response clock runs");
    assert_eq!(due - s.now, Duration::from_secs(30));
    s.elapse(Duration::from_secs(29));
    assert!(s.stop.is_none() && s.client.got.is_empty());
    assert!(s.step());
    assert!(
        s.client_text().starts_with("HTTP/1.1 504"),
        "{}",
        s.client_text()
    );
    assert_eq!(s.reason(), Some(CloseReason::ResponseTimeout));
    assert_eq!(s.elapsed(), Duration::from_secs(30));
    assert_eq!(s.records[0].status, Some(504));
}

/// A request head that never finishes is answered 408 at the handshake
/// timeout (slowloris inside an inspected session).
#[test]
fn a_head_that_never_finishes_gets_408_at_the_handshake_timeout() {
    let mut s = session();
    s.client_sends(format!(
        "GET /slow HTTP/1.1\r\nHost: {ORIGIN}\r\nX-A: b\r\n"
    ));
    s.drive();
    assert_eq!(s.deadline().unwrap() - s.now, Duration::from_secs(10));
    // Dribbling more of the head does not restart the clock.
    for _ in 0..9 {
        s.elapse(Duration::from_secs(1));
        s.client_sends("X-A: b\r\n");
    }
    s.drive();
    assert!(s.stop.is_none());
    s.elapse(Duration::from_secs(1));
    assert!(
        s.client_text().starts_with("HTTP/1.1 408"),
        "{}",
        s.client_text()
    );
    assert_eq!(s.reason(), Some(CloseReason::HandshakeTimeout));
    assert!(s.upstream.got.is_empty(), "nothing of the head went up");
}

/// An idle keep-alive connection is not a slow head: with no idle timeout
/// it has no deadline at all (no wakeups), and is served after any pause.
#[test]
fn an_idle_keep_alive_session_has_no_deadline_and_is_served_later() {
    let mut s = session();
    s.client_sends(get("/first"));
    s.drive();
    s.upstream_sends(OK);
    s.drive();
    assert_eq!(s.deadline(), None, "nothing to wait for");
    s.elapse(Duration::from_secs(3600));
    s.client_sends(get("/second"));
    s.drive();
    s.upstream_sends(OK);
    s.drive();
    assert_eq!(s.client_text(), OK.repeat(2));
    assert!(s.stop.is_none());
}

/// Inside terminated TLS too: an idle pause is fine, a dribbled head is
/// cut at the handshake timeout.
#[test]
fn inside_tls_an_idle_pause_is_fine_and_a_slow_head_gets_408() {
    let mut s = Session::new(Options::terminated());
    s.client_sends(get("/first"));
    s.drive();
    assert_eq!(s.upstream_text(), get("/first"));
    s.upstream_sends(OK);
    s.drive();
    assert_eq!(s.client_text(), OK);
    assert_eq!(s.deadline(), None);
    s.elapse(Duration::from_secs(25));
    s.client_sends(format!("GET /slow HTTP/1.1\r\nHost: {ORIGIN}\r\n"));
    s.drive();
    s.elapse(Duration::from_secs(10));
    assert!(
        s.client_text()[OK.len()..].starts_with("HTTP/1.1 408"),
        "{}",
        s.client_text()
    );
    assert_eq!(s.reason(), Some(CloseReason::HandshakeTimeout));
}

/// The idle timeout closes a quiet session, and only a quiet one: every
/// byte moves it on.
#[test]
fn the_idle_timeout_counts_from_the_last_byte() {
    let mut s = Session::new(Options {
        idle: Some(Duration::from_secs(5)),
        ..Options::tunnel()
    });
    s.client_sends(get("/a"));
    s.drive();
    s.upstream_sends(OK);
    s.drive();
    s.elapse(Duration::from_secs(4));
    s.client_sends(get("/b"));
    s.drive();
    s.upstream_sends(OK);
    s.drive();
    s.elapse(Duration::from_secs(4));
    assert!(s.stop.is_none(), "8 s in, but never 5 s quiet");
    s.elapse(Duration::from_secs(1));
    assert_eq!(s.reason(), Some(CloseReason::IdleTimeout));
    assert_eq!(s.elapsed(), Duration::from_secs(9));
}

/// The idle timeout does not cut a request whose response is awaited:
/// the response clock rules then.
#[test]
fn a_response_awaited_is_not_idle() {
    let mut s = Session::new(Options {
        idle: Some(Duration::from_secs(5)),
        ..Options::tunnel()
    });
    s.client_sends(get("/slow"));
    s.elapse(Duration::from_secs(20));
    assert!(s.stop.is_none());
    s.upstream_sends(OK);
    s.drive();
    assert_eq!(s.client_text(), OK);
}

/// A response that has arrived but waits for a slow client is not late:
/// the response timeout stops once the upstream answers.
#[test]
fn a_slow_reader_of_pipelined_responses_gets_no_504() {
    let mut s = session();
    s.cport.room = 0; // the client reads nothing for now
    s.client_sends(get("/big") + &get("/fine"));
    s.drive();
    let big = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: 60000\r\n\r\n{}",
        "x".repeat(60_000)
    );
    s.upstream_sends(&big);
    s.upstream_sends(OK);
    s.drive();
    s.elapse(Duration::from_secs(120));
    assert!(s.stop.is_none(), "{:?}", s.reason());
    s.cport.room = usize::MAX;
    s.drive();
    assert_eq!(s.client_text(), big + OK);
    assert_eq!(s.records.len(), 2);
}

/// A client that half-closes with a response still due: when nothing
/// moves for the half-close timeout the request is answered 504 and the
/// session ends (a peer that never finishes holds nothing for ever).
#[test]
fn a_half_closed_silent_session_ends_at_the_half_close_timeout() {
    let mut s = Session::new(Options {
        timeouts: crate::config::Timeouts {
            half_close: Duration::from_secs(5),
            ..Options::tunnel().timeouts
        },
        ..Options::tunnel()
    });
    s.client_sends(get("/a"));
    s.client_fin();
    s.drive();
    assert_eq!(s.deadline().unwrap() - s.now, Duration::from_secs(5));
    s.elapse(Duration::from_secs(5));
    assert!(
        s.client_text().starts_with("HTTP/1.1 504"),
        "{}",
        s.client_text()
    );
    assert_eq!(s.reason(), Some(CloseReason::HalfCloseTimeout));
}

/// A half-closed client still gets its response, and then the session ends.
#[test]
fn a_half_closed_client_still_gets_its_response() {
    let mut s = session();
    s.client_sends(get("/a"));
    s.client_fin();
    s.upstream_sends(OK);
    s.drive();
    assert_eq!(s.client_text(), OK);
    assert_eq!(s.reason(), Some(CloseReason::Done));
}

/// A terminated client that stops after its ClientHello is closed at the
/// handshake timeout.
#[test]
fn a_client_that_stalls_its_tls_handshake_is_closed_at_the_handshake_timeout() {
    let mut s = Session::new(Options::terminated());
    s.client_stalls_after_hello();
    s.drive();
    assert_eq!(s.core().stage(), "tls-handshake");
    assert_eq!(s.deadline().unwrap() - s.now, Duration::from_secs(10));
    s.elapse(Duration::from_secs(9));
    assert!(s.stop.is_none());
    s.elapse(Duration::from_secs(1));
    assert_eq!(s.reason(), Some(CloseReason::HandshakeTimeout));
}

/// An upstream that accepts and never answers the TLS handshake: the
/// request waiting on it is answered 502 at the connect timeout.
#[test]
fn an_upstream_that_never_finishes_tls_gets_the_request_a_502() {
    let mut s = Session::new(Options {
        upstream_mute: true,
        ..Options::terminated()
    });
    s.client_sends(get("/a"));
    s.drive();
    assert!(s.client.handshaken());
    s.elapse(Duration::from_secs(10));
    assert!(
        s.client_text().starts_with("HTTP/1.1 502"),
        "{}",
        s.client_text()
    );
    assert!(s.client_text().contains("TLS handshake with the upstream"));
}

/// Terminated TLS both ways, in memory: requests and responses pass
/// decrypted through the exchange and are encrypted again.
#[test]
fn terminated_tls_carries_a_keep_alive_conversation() {
    let mut s = Session::new(Options::terminated());
    for i in 0..3 {
        s.client_sends(get(&format!("/r{i}")));
        s.drive();
        s.upstream_sends(OK);
        s.drive();
    }
    assert_eq!(s.client_text(), OK.repeat(3));
    assert_eq!(
        s.upstream_text(),
        (0..3).map(|i| get(&format!("/r{i}"))).collect::<String>()
    );
    assert_eq!(s.records.len(), 3);
    assert_eq!(s.core().stage(), "https");
}

/// A 101 inside terminated TLS hands both links over, every buffered byte
/// with them: the shell relays raw from there.
#[test]
fn an_upgrade_inside_tls_hands_over_the_links_and_the_bytes() {
    let mut s = Session::new(Options::terminated());
    s.client_sends(ws_request());
    s.drive();
    s.upstream_sends(
        "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\nframe-from-upstream",
    );
    s.drive();
    assert!(matches!(s.stop, Some(Stop::Upgraded)), "{:?}", s.stop);
    let parts = s.parts.as_ref().unwrap();
    assert!(!parts.client.is_plain() && !parts.upstream.is_plain());
    let to_client = [parts.cout.data(), parts.uin.data()].concat();
    let text =
        String::from_utf8_lossy(&[s.client.got.as_slice(), &to_client].concat()).into_owned();
    assert!(text.starts_with("HTTP/1.1 101"), "{text}");
    assert!(text.ends_with("frame-from-upstream"), "{text}");
}

/// A declined upgrade (no 101) keeps the session in HTTP.
#[test]
fn a_declined_upgrade_keeps_http() {
    let mut s = session();
    s.client_sends(ws_request());
    s.upstream_sends(OK);
    s.drive();
    s.client_sends(get("/after"));
    s.upstream_sends(OK);
    s.drive();
    assert_eq!(s.client_text(), OK.repeat(2));
    assert!(s.stop.is_none());
}

/// A policy reload reaches the next request: what was allowed is refused
/// after new rules arrive, without touching the session otherwise.
#[test]
fn a_reload_rechecks_the_next_request() {
    let mut s = session();
    s.client_sends(get("/v1/admin/x"));
    s.upstream_sends(OK);
    s.drive();
    assert_eq!(s.client_text(), OK);
    s.core().set_rules(Some(api_request_rules()));
    s.client_sends(get("/v1/admin/x"));
    s.drive();
    assert!(
        s.client_text()[OK.len()..].starts_with("HTTP/1.1 403"),
        "{}",
        s.client_text()
    );
    assert_eq!(
        s.upstream_text(),
        get("/v1/admin/x"),
        "the refused request never went up"
    );
    assert!(
        matches!(s.records[1].decision, Decision::Denied(_)),
        "{:?}",
        s.records[1]
    );
    assert!(s.stop.is_none());
}

/// An upstream that closes before answering: the client gets a 502 and a
/// FIN (the answer is whole).
#[test]
fn an_upstream_that_closes_before_answering_gets_a_502() {
    let mut s = session();
    s.client_sends(get("/a"));
    s.upstream_fin();
    s.drive();
    assert!(
        s.client_text().starts_with("HTTP/1.1 502"),
        "{}",
        s.client_text()
    );
    assert!(
        matches!(s.stop, Some(Stop::Closed { abort: false, .. })),
        "{:?}",
        s.stop
    );
    assert_eq!(s.reason(), Some(CloseReason::UpstreamGone));
}

/// An upstream that resets mid-response: the client gets what was sent,
/// then a reset, never a clean FIN that would make the cut look complete.
#[test]
fn an_upstream_reset_mid_response_resets_the_client() {
    reset_mid_response_resets_the_client("Content-Length: 100\r\n");
}

/// A response whose head carries `framing` reaches the client in part,
/// then the upstream resets: the client is reset after what it got.
pub(super) fn reset_mid_response_resets_the_client(framing: &str) {
    let mut s = session();
    s.client_sends(get("/a"));
    s.upstream_sends(format!("HTTP/1.1 200 OK\r\n{framing}\r\npartial"));
    s.drive();
    s.upstream_reset();
    s.drive();
    assert!(s.client_text().ends_with("partial"));
    assert!(
        matches!(s.stop, Some(Stop::Closed { abort: true, .. })),
        "{:?}",
        s.stop
    );
    // The close after it: what was owed, then a reset, never a FIN.
    assert_eq!(s.closed, Some((CloseReason::UpstreamGone, true)));
    assert!(!s.cport.shut, "no FIN for a cut response");
}

/// A client that resets is gone at once.
#[test]
fn a_client_reset_ends_the_session() {
    let mut s = session();
    s.client_sends(get("/a"));
    s.drive();
    s.client_reset();
    s.drive();
    assert_eq!(s.reason(), Some(CloseReason::ClientGone));
}

/// A TLS ClientHello on a plaintext inspected tunnel: a handshake_failure
/// alert, and the session ends saying the rule should terminate.
#[test]
fn tls_on_a_plaintext_rule_is_refused_with_an_alert() {
    let mut s = session();
    s.client_sends([0x16, 0x03, 0x01, 0x00, 0x05, 1, 0, 0, 1, 0]);
    s.drive();
    let Some(Stop::WrongProtocol(alert, why)) = &s.stop else {
        panic!("{:?}", s.stop);
    };
    assert_eq!(alert[0], 0x15, "an alert record");
    assert!(why.contains("terminate") || why.contains("TLS"), "{why}");
    assert!(s.upstream.got.is_empty());
}

/// The proxy's own reply (a CONNECT's 200) goes first and is not counted
/// as relayed payload.
#[test]
fn the_proxys_own_reply_goes_first_and_is_not_payload() {
    let reply = b"HTTP/1.1 200 Connection established\r\n\r\n".to_vec();
    let mut s = Session::new(Options {
        reply: reply.clone(),
        ..Options::tunnel()
    });
    s.client_sends(get("/a"));
    s.upstream_sends(OK);
    s.drive();
    assert_eq!(s.client.got, [reply.as_slice(), OK.as_bytes()].concat());
    assert_eq!(s.relayed.1, OK.len());
}

/// The session ends before the client took a byte: the close that flushes
/// the reply and the upstream's answer counts only the answer as payload.
#[test]
fn the_proxys_own_reply_is_not_payload_when_the_close_writes_it() {
    let reply = b"HTTP/1.1 200 Connection established\r\n\r\n".to_vec();
    let mut s = Session::new(Options {
        reply: reply.clone(),
        ..Options::tunnel()
    });
    s.cport.room = 0;
    s.client_sends(get("/a"));
    let answer = "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok";
    s.upstream_sends(answer);
    s.upstream_fin();
    s.drive();
    assert!(
        s.closing.is_some(),
        "the close owes the client: {:?}",
        s.stop
    );
    assert!(s.client.got.is_empty());
    s.cport.room = 9;
    s.drive();
    while s.closed.is_none() && s.client.got.len() < reply.len() + answer.len() {
        s.cport.room = 9;
        s.client_fin();
        s.drive();
    }
    assert_eq!(s.client.got, [reply.as_slice(), answer.as_bytes()].concat());
    assert_eq!(s.relayed.1, answer.len());
}

/// One call does bounded work: a large body moves over several calls,
/// each yielding, and arrives whole.
#[test]
fn a_large_body_moves_in_bounded_calls() {
    let mut s = session();
    s.cport.max_io = 512;
    s.uport.max_io = 512;
    let body = "b".repeat(4 * 1024 * 1024);
    s.client_sends(get("/big"));
    s.upstream_sends(format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    ));
    s.drive();
    assert!(s.yields > 0, "a call never hit its round limit");
    assert!(s.client_text().ends_with(&body));
}

/// The response clock restarts for each request: a second slow response
/// gets its own full timeout.
#[test]
fn each_request_gets_its_own_response_clock() {
    let mut s = session();
    s.client_sends(get("/a"));
    s.drive();
    s.elapse(Duration::from_secs(20));
    s.upstream_sends(OK);
    s.drive();
    s.client_sends(get("/b"));
    s.drive();
    assert_eq!(s.deadline().unwrap() - s.now, Duration::from_secs(30));
    s.elapse(Duration::from_secs(29));
    assert!(s.stop.is_none());
    s.elapse(Duration::from_secs(1));
    assert_eq!(s.reason(), Some(CloseReason::ResponseTimeout));
}

/// A response head that went wrong before its end, then silence: the
/// head gate held its bad line back (no empty line yet, not twice the
/// bytes), so only a clock ends the wait. When the response or the
/// half-close clock does, the client hears the 502 a parse on arrival
/// gave it, not a bare close; a head merely incomplete is no answer, a
/// 504. (The idle clock does not run while a response is awaited.)
#[test]
fn a_malformed_response_head_held_back_is_a_502_when_a_clock_ends_the_wait() {
    let start = "HTTP/1.1 200 OK\r\nX-Pad: aaaaaaaaaaaaaaaaaaaa\r\n";
    for (bad, half_close) in [(true, false), (true, true), (false, false)] {
        // Idle timeouts off when the client finishes: the half-close clock
        // (60 s) ends the wait.
        let mut s = Session::new(Options {
            idle: (!half_close).then_some(Duration::from_secs(5)),
            ..Options::tunnel()
        });
        s.client_sends(get("/a"));
        if half_close {
            s.client_fin();
        }
        s.drive();
        s.upstream_sends(start);
        s.drive();
        s.upstream_sends(if bad {
            "Bad Header: x\r\n"
        } else {
            "X-Ok: y\r\n"
        });
        s.drive();
        assert!(s.stop.is_none(), "held back, waiting");
        s.elapse(Duration::from_secs(120));
        let text = s.client_text();
        if bad {
            assert!(
                text.starts_with("HTTP/1.1 502") && text.contains("bad-upstream-response"),
                "half-close {half_close}: {text}"
            );
            assert_eq!(s.reason(), Some(CloseReason::UpstreamGone), "{text}");
        } else {
            assert!(
                text.starts_with("HTTP/1.1 504") && text.contains("response-timeout"),
                "nothing of a head cut short is relayed: {text}"
            );
            assert_eq!(s.reason(), Some(CloseReason::ResponseTimeout));
        }
    }
}

/// Two clocks that run out at the same instant (a late timer, or two
/// deadlines that coincide) are both acted on when the timer fires: the
/// head clock's 408 for a request cut short does not leave the response
/// clock of the request ahead of it due (the timer would fire again at
/// once; `elapse` fails on that as a spin). The request ahead gets its
/// 504, and the conversation ends there.
#[test]
fn a_head_clock_and_a_response_clock_that_run_out_together_are_both_acted_on() {
    let mut s = session();
    s.client_sends(get("/a"));
    s.drive();
    // The response clock of /a: 30 s. The head clock of /b, begun at 20 s:
    // 10 s. Both at 30 s.
    s.elapse(Duration::from_secs(20));
    s.client_sends("GET /b HTTP/1.1\r\nHost: origin.test\r\n");
    s.drive();
    assert_eq!(s.deadline().unwrap() - s.now, Duration::from_secs(10));
    s.elapse(Duration::from_secs(10));
    assert_eq!(s.reason(), Some(CloseReason::ResponseTimeout));
    let text = s.client_text();
    assert!(text.starts_with("HTTP/1.1 504"), "{text}");
    assert!(!text.contains("408"), "nothing after the 504: {text}");
}

/// A request whose body broke after its head went up (the client is owed
/// an answer, and only the upstream can still give one), while the
/// upstream's response head has begun and stalls: the response clock runs
/// on it, as on any head not whole. With idle timeouts off (the default)
/// nothing else would ever end the session.
#[test]
fn a_broken_request_whose_response_head_stalls_times_out() {
    let mut s = session();
    s.client_sends(format!(
        "POST /up HTTP/1.1\r\nHost: {ORIGIN}\r\nTransfer-Encoding: chunked\r\n\r\n"
    ));
    s.drive();
    s.upstream_sends("HTTP/1.1 200 OK\r\nX-A: b\r\n");
    s.drive();
    s.client_sends("zz\r\n");
    s.drive();
    let due = s.deadline().expect("a clock runs");
    assert_eq!(due - s.now, Duration::from_secs(30));
    s.elapse(Duration::from_secs(30));
    assert!(
        s.client_text().starts_with("HTTP/1.1 504"),
        "nothing of the head is relayed: {}",
        s.client_text()
    );
    assert_eq!(s.reason(), Some(CloseReason::ResponseTimeout));
    assert_eq!(s.records[0].status, Some(504));
}

/// A client that sends `Expect: 100-continue` and then its body slowly:
/// the response clock once ran from the head, so an upload longer than
/// the response timeout got a 504 mid-way while its bytes still flowed.
/// The proxy answers the `100` itself and the upstream sees a plain
/// upload: the clock runs from the upload's end, as for any body.
#[test]
fn an_upload_that_did_not_wait_for_100_continue_is_not_cut_by_the_response_clock() {
    let mut s = session();
    s.client_sends(format!(
        "PUT /up HTTP/1.1\r\nHost: {ORIGIN}\r\nExpect: 100-continue\r\nContent-Length: 80\r\n\r\n"
    ));
    s.drive();
    for _ in 0..8 {
        s.elapse(Duration::from_secs(10));
        s.client_sends("0123456789");
        s.drive();
    }
    assert!(s.stop.is_none(), "{}", s.client_text());
    assert_eq!(
        s.upstream.got.len(),
        s.upstream_text().find("\r\n\r\n").unwrap() + 4 + 80
    );
    // Wholly sent: the clock runs from here.
    assert_eq!(s.deadline().unwrap() - s.now, Duration::from_secs(30));
    s.elapse(Duration::from_secs(30));
    assert!(
        s.client_text()
            .starts_with("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 504"),
        "{}",
        s.client_text()
    );
}

/// An upstream whose socket reports an error with nothing readable (an
/// error event alone), while a request start the head gate held back
/// waits: nothing more can be forwarded, so the start is looked at then
/// and there, and, malformed, gets its 400 at once, not at the head
/// clock's end.
#[test]
fn an_upstream_error_event_alone_answers_a_held_back_malformed_start_at_once() {
    let mut s = session();
    // Parsed (a first parse always is): a head not whole yet.
    s.client_sends("GET /x HTTP/1.1\r\nHost: origin.test\r\nX: ");
    s.drive();
    // Held back: fewer bytes than twice those parsed, no empty line.
    s.client_sends("aaaa\r\nBad Header: x\r\n");
    s.drive();
    assert!(s.stop.is_none(), "held back, waiting");
    s.upstream_error_event();
    s.drive();
    let text = s.client_text();
    assert!(
        text.starts_with("HTTP/1.1 400") && text.contains("bad-request"),
        "{text}"
    );
    assert!(s.stop.is_some());
}
