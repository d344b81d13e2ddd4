//! Closing in the simulator: what is owed reaches the survivor, then a FIN
//! and a linger until its EOF, or a reset; the close timer bounds it all.
//! Directly on the [`ClosingCore`] over an in-memory port, and whole
//! sessions whose exchange ended in a close (the path the shell takes).

use super::sim::{Options, Session, ORIGIN};
use crate::buffer::ByteBuf;
use crate::core::closing::{ClosingCore, Next, TimedOut};
use crate::core::link::Link;
use crate::core::mem::MemPort;
use crate::core::port::Port;
use crate::lifecycle::CloseReason;
use crate::tls::wire::Wire;

fn owed(bytes: &[u8]) -> Option<ByteBuf> {
    let mut buf = ByteBuf::with_capacity(bytes.len());
    buf.extend(bytes);
    Some(buf)
}

/// A close owing `bytes` of payload: then a reset when `abort`, else a
/// FIN and a linger.
fn flushing(abort: bool, bytes: &[u8]) -> ClosingCore<ByteBuf> {
    if abort {
        ClosingCore::abort(owed(bytes), REASON, 0, super::deadline(5))
    } else {
        ClosingCore::graceful(owed(bytes), REASON, 0, super::deadline(5))
    }
}

/// Pumps until the core asks for something other than another call.
fn pump(core: &mut ClosingCore<ByteBuf>, port: &mut MemPort) -> Next {
    for _ in 0..100 {
        match core.pump(&mut Link::Plain, port) {
            Next::Again => continue,
            next => return next,
        }
    }
    panic!("the close never settles");
}

/// A transport that takes `room` bytes before it would block.
fn taking(room: usize) -> MemPort {
    let mut port = MemPort::default();
    port.room = room;
    port
}

const REASON: CloseReason = CloseReason::Denied;

#[test]
fn what_is_owed_goes_out_then_a_fin_then_it_lingers_until_the_peers_eof() {
    let mut core = ClosingCore::graceful(
        owed(b"HTTP/1.1 403 Forbidden\r\n\r\n"),
        REASON,
        26,
        super::deadline(5),
    );
    let mut port = MemPort::roomy();
    assert_eq!(core.stage(), "flush");
    assert_eq!(pump(&mut core, &mut port), Next::Wait);
    assert_eq!(port.take(), b"HTTP/1.1 403 Forbidden\r\n\r\n");
    assert!(port.shut, "the FIN follows the answer");
    assert_eq!(core.stage(), "linger");
    // Lingering: the socket stays open while the peer has not finished.
    assert_eq!(pump(&mut core, &mut port), Next::Wait);
    port.deliver(b"late bytes, read and dropped");
    assert_eq!(pump(&mut core, &mut port), Next::Wait);
    assert!(port.inbox.is_empty());
    port.fin = true;
    assert_eq!(
        pump(&mut core, &mut port),
        Next::Close {
            reason: REASON,
            abort: false
        }
    );
    assert_eq!(
        core.take_relayed(),
        0,
        "the proxy's own answer is not payload"
    );
}

#[test]
fn a_slow_reader_gets_what_is_owed_as_it_takes_it() {
    let body: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
    let mut core = ClosingCore::graceful(owed(&body), REASON, 0, super::deadline(5));
    let mut port = taking(1000);
    let mut got = Vec::new();
    for _ in 0..9 {
        assert_eq!(pump(&mut core, &mut port), Next::Wait);
        assert!(!port.shut, "no FIN before everything owed is out");
        assert_eq!(core.stage(), "flush");
        got.extend(port.take());
        port.room = 1000;
    }
    assert_eq!(pump(&mut core, &mut port), Next::Wait);
    got.extend(port.take());
    assert_eq!(got, body);
    assert!(port.shut);
    assert_eq!(
        core.take_relayed(),
        body.len(),
        "the tail of a tunnel is payload"
    );
    assert!(
        core.take_spent::<MemPort>().is_some(),
        "the buffer goes back"
    );
}

#[test]
fn the_proxys_own_reply_ahead_of_payload_is_not_counted_however_it_is_written() {
    // A tunnel that stopped before its success reply went out: the reply,
    // then the upstream's answer. Written 7 bytes at a time, the reply's
    // bytes are never payload, in any write that straddles the two.
    let reply = b"HTTP/1.1 200 Connection Established\r\n\r\n";
    let answer = b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n";
    let owed_bytes = [&reply[..], &answer[..]].concat();
    for abort in [false, true] {
        let mut core = if abort {
            ClosingCore::abort(owed(&owed_bytes), REASON, reply.len(), super::deadline(5))
        } else {
            ClosingCore::graceful(owed(&owed_bytes), REASON, reply.len(), super::deadline(5))
        };
        let mut port = taking(7);
        let mut got = Vec::new();
        let mut relayed = 0;
        while got.len() < owed_bytes.len() {
            let _ = pump(&mut core, &mut port);
            got.extend(port.take());
            relayed += core.take_relayed();
            port.room = 7;
        }
        assert_eq!(got, owed_bytes);
        assert_eq!(relayed, answer.len(), "abort: {abort}");
    }
}

#[test]
fn the_close_timer_with_bytes_still_owed_is_a_close_timeout() {
    let mut core = ClosingCore::graceful(owed(&[7; 5000]), REASON, 0, super::deadline(5));
    let mut port = taking(100);
    assert_eq!(pump(&mut core, &mut port), Next::Wait);
    assert!(core.take_spent::<MemPort>().is_none(), "still owed");
    assert_eq!(
        timed_out(&mut core, &mut port),
        TimedOut {
            reason: CloseReason::CloseTimeout,
            abort: true
        }
    );
}

/// Bytes abandoned at the close timer cut the stream short: the survivor
/// is reset, never sent a FIN that would make what it got look complete,
/// whether the close was graceful or already meant to reset.
#[test]
fn the_close_timer_abandoning_owed_bytes_resets_the_survivor() {
    for abort in [false, true] {
        let mut core = flushing(abort, &[7; 5000]);
        let mut port = taking(100);
        assert_eq!(pump(&mut core, &mut port), Next::Wait);
        assert!(!port.shut);
        assert_eq!(
            timed_out(&mut core, &mut port),
            TimedOut {
                reason: CloseReason::CloseTimeout,
                abort: true
            },
            "abort: {abort}"
        );
    }
}

/// A whole session: a close-delimited response whose upstream finished,
/// to a client that stops reading. At the close timer the client is
/// reset: its cut-off body cannot pass for the whole of it.
#[test]
fn a_close_delimited_body_cut_by_the_close_timer_is_reset_not_finished() {
    let mut s = Session::new(Options::tunnel());
    s.client_sends(format!("GET /a HTTP/1.1\r\nHost: {ORIGIN}\r\n\r\n"));
    s.drive();
    s.cport.room = 0;
    s.upstream_sends(format!("HTTP/1.0 200 OK\r\n\r\n{}", "b".repeat(2_000)));
    s.upstream_fin();
    s.drive();
    assert!(s.closing.is_some(), "flushing the tail to the client");
    assert!(s.step(), "the close timer is armed");
    assert_eq!(s.closed, Some((CloseReason::CloseTimeout, true)));
    assert!(!s.cport.shut, "no FIN after a cut body");
}

/// A peer whose EOF was read before the close (a client that half-closed
/// behind its last request) gets what is owed and the FIN, then the close:
/// its EOF raises no new readiness, so a linger would only wait out the
/// close timer.
#[test]
fn after_the_peers_eof_there_is_no_linger() {
    let mut core = ClosingCore::graceful(owed(b"bye"), REASON, 3, super::deadline(5));
    core.after_eof();
    let mut port = MemPort::roomy();
    port.eof_once = true;
    port.fin = true;
    port.want_read(true);
    let mut buf = [0u8; 8];
    assert!(matches!(port.read(&mut buf), crate::io::Io::Eof));
    assert_eq!(
        pump(&mut core, &mut port),
        Next::Wait,
        "the FIN, then a call"
    );
    assert_eq!((port.take(), port.shut), (b"bye".to_vec(), true));
    assert_eq!(
        pump(&mut core, &mut port),
        Next::Close {
            reason: REASON,
            abort: false
        }
    );

    // Without it, the same peer is lingered on until the timer.
    let mut core = ClosingCore::graceful(owed(b"bye"), REASON, 3, super::deadline(5));
    let mut port = MemPort::roomy();
    port.eof_once = true;
    port.fin = true;
    port.want_read(true);
    assert!(matches!(port.read(&mut buf), crate::io::Io::Eof));
    assert_eq!(pump(&mut core, &mut port), Next::Wait);
    assert_eq!(pump(&mut core, &mut port), Next::Wait);
    assert_eq!(core.stage(), "linger");
}

#[test]
fn the_close_timer_while_lingering_keeps_the_reason_and_reads_queued_input_away() {
    let mut core = ClosingCore::graceful(owed(b"bye"), REASON, 3, super::deadline(5));
    let mut port = MemPort::roomy();
    assert_eq!(pump(&mut core, &mut port), Next::Wait);
    assert_eq!(core.stage(), "linger");
    // Input that arrives with no readiness event yet: closing over it
    // would send a reset that can destroy the unread answer.
    port.deliver(&[1; 3000]);
    assert_eq!(
        timed_out(&mut core, &mut port),
        TimedOut {
            reason: REASON,
            abort: false
        }
    );
    assert!(port.inbox.is_empty(), "queued input is read away first");
}

#[test]
fn lingering_reads_a_bounded_amount_per_call() {
    let mut core: ClosingCore<ByteBuf> = ClosingCore::graceful(None, REASON, 0, super::deadline(5));
    let mut port = MemPort::roomy();
    assert_eq!(core.pump(&mut Link::Plain, &mut port), Next::Wait);
    port.deliver(&vec![0; 1 << 20]);
    assert_eq!(core.pump(&mut Link::Plain, &mut port), Next::Again);
    let first = port.read_total;
    assert!(first > 0 && first <= 16 * 4096, "{first}");
    assert_eq!(pump(&mut core, &mut port), Next::Wait);
    assert_eq!(port.read_total, 1 << 20);
}

#[test]
fn an_abort_flushes_then_resets_without_a_fin() {
    let mut core = ClosingCore::abort(
        owed(b"the tail"),
        CloseReason::UpstreamGone,
        0,
        super::deadline(5),
    );
    let mut port = MemPort::roomy();
    assert_eq!(core.stage(), "flush-then-reset");
    assert_eq!(
        pump(&mut core, &mut port),
        Next::Close {
            reason: CloseReason::UpstreamGone,
            abort: true
        }
    );
    assert_eq!(port.take(), b"the tail");
    assert!(!port.shut, "a FIN would make the cut stream look complete");
    assert_eq!(core.take_relayed(), 8);
}

#[test]
fn a_survivor_that_resets_while_owed_ends_the_close_at_once() {
    for abort in [false, true] {
        let mut core = flushing(abort, &[1; 4000]);
        let mut port = taking(1000);
        assert_eq!(pump(&mut core, &mut port), Next::Wait);
        port.reset = true;
        assert_eq!(
            pump(&mut core, &mut port),
            Next::Close {
                reason: REASON,
                abort: false
            },
            "abort: {abort}: a dead socket is closed, never written again"
        );
    }
}

#[test]
fn nothing_owed_goes_straight_to_the_fin() {
    let mut core: ClosingCore<ByteBuf> = ClosingCore::graceful(None, REASON, 0, super::deadline(5));
    let mut port = MemPort::roomy();
    assert_eq!(pump(&mut core, &mut port), Next::Wait);
    assert!(port.shut);
    let mut core: ClosingCore<ByteBuf> =
        ClosingCore::abort(owed(b""), REASON, 0, super::deadline(5));
    assert_eq!(
        pump(&mut core, &mut MemPort::roomy()),
        Next::Close {
            reason: REASON,
            abort: true
        }
    );
}

/// Whole sessions: the exchange refuses, and the close the shell runs
/// after it delivers the answer, FINs and waits for the client.
#[test]
fn a_refused_request_is_answered_then_the_session_lingers_for_the_clients_eof() {
    let mut s = Session::new(Options::tunnel());
    s.client_sends(format!("GET /a HTTP/1.1\r\nHost: {ORIGIN}\r\n\r\n"));
    s.upstream_fin();
    s.drive();
    assert!(
        s.client_text().starts_with("HTTP/1.1 502"),
        "{}",
        s.client_text()
    );
    assert!(s.cport.shut, "the answer is followed by a FIN");
    assert!(s.closing.is_some(), "lingering for the client's EOF");
    assert!(s.closed.is_none());
    s.client_fin();
    s.drive();
    assert_eq!(s.closed, Some((CloseReason::UpstreamGone, false)));
    assert_eq!(s.deadline(), None, "nothing left to wake for");
}

#[test]
fn a_client_that_never_finishes_is_let_go_at_the_close_timer() {
    let mut s = Session::new(Options::tunnel());
    s.client_sends(format!("GET /a HTTP/1.1\r\nHost: {ORIGIN}\r\n\r\n"));
    s.upstream_fin();
    s.drive();
    let stopped = s.elapsed();
    assert!(s.step(), "the close timer is armed");
    assert_eq!(s.elapsed() - stopped, Options::tunnel().timeouts.close);
    assert_eq!(s.closed, Some((CloseReason::UpstreamGone, false)));
    assert!(!s.step(), "and nothing after it");
}

#[test]
fn a_terminated_client_gets_its_answer_then_close_notify_then_the_fin() {
    let mut s = Session::new(Options::terminated());
    s.drive();
    assert!(s.client.handshaken());
    s.client_sends(format!("GET /a HTTP/1.1\r\nHost: {ORIGIN}\r\n\r\n"));
    s.drive();
    s.upstream_fin();
    s.drive();
    assert!(
        s.client_text().starts_with("HTTP/1.1 502"),
        "{}",
        s.client_text()
    );
    assert!(s.client.close_notify, "close_notify before the FIN");
    assert!(s.cport.shut);
    s.client_fin();
    s.drive();
    assert_eq!(s.closed, Some((CloseReason::UpstreamGone, false)));
}

/// The close timer fired at the deadline (after checking it does nothing
/// a moment before).
fn timed_out(core: &mut ClosingCore<ByteBuf>, port: &mut MemPort) -> TimedOut {
    assert_eq!(core.poll_timeout(), super::at(5, 0));
    assert!(
        core.handle_timeout(super::at(4, 999), &mut Link::Plain, port)
            .is_none(),
        "not yet"
    );
    core.handle_timeout(super::at(5, 0), &mut Link::Plain, port)
        .expect("timed out")
}
