//! An upstream switch: a forward-proxy request for another host drops the
//! session's upstream and dials a new one. The old socket may have raised
//! an event that was harvested in the same poll batch as the client's
//! request and is dispatched after it: that event is the old socket's, and
//! must not be taken for the new connect's (a reset read as the new
//! connect failing, a FIN as the new upstream having finished).

use super::*;

use std::net::{TcpListener, TcpStream};

/// How the first upstream goes, in the poll batch that carries the
/// client's request for the second host.
#[derive(Debug, Clone, Copy)]
enum Goes {
    /// An abortive close: the proxy's socket sees an error (and a hang-up).
    Reset,
    /// A FIN (a server closing an idle keep-alive connection).
    Finished,
}

/// A loopback origin server.
fn origin() -> (TcpListener, u16) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    (l, port)
}

/// Reads one request head from `s` (blocking, bounded by a read timeout).
fn read_head(s: &mut TcpStream) -> String {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            other => panic!("origin read: {other:?} after {head:?}"),
        }
    }
    String::from_utf8(head).unwrap()
}

/// Reads one response from the client's end: its head, then the body its
/// `Content-Length` says (or what arrived of it before EOF).
fn client_response(h: &mut Harness) -> (String, Vec<u8>) {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let byte = h.client_reads(1);
        assert_eq!(byte.len(), 1, "EOF inside the head {head:?}");
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).unwrap();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .unwrap_or_else(|| panic!("no length in {head:?}"))
        .parse()
        .unwrap();
    let body = h.client_reads(len);
    (head, body)
}

/// Polls while the session is connecting (a bounded number of times).
fn poll_while_connecting(h: &mut Harness) {
    for _ in 0..50 {
        if !h.state().starts_with("Connecting") {
            return;
        }
        let _ = h.poll_events();
    }
    panic!("still {}", h.state());
}

/// A forward-proxy session's first request, to one origin, answered; then
/// its second, to another, sent while the first origin goes as `goes`
/// says, both before the proxy polls: the second origin's answer, in two
/// writes, must reach the client whole.
fn switch_while_the_old_upstream_goes(goes: Goes) {
    let (mut h, _) = Harness::new(allow("127.0.0.1"), ListenerProtocol::Http);
    let (first, p1) = origin();
    let (second, p2) = origin();

    let _ = h.client_sends(
        format!("GET http://127.0.0.1:{p1}/one HTTP/1.1\r\nHost: 127.0.0.1:{p1}\r\n\r\n")
            .as_bytes(),
    );
    poll_while_connecting(&mut h);
    assert!(h.state().starts_with("Inspect"), "{}", h.state());
    let (mut s1, _) = first.accept().unwrap();
    assert!(read_head(&mut s1).starts_with("GET /one "));
    s1.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\none")
        .unwrap();
    let _ = h.poll_events();
    let (head, body) = client_response(&mut h);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(body, b"one");

    // The client asks for the second origin; then the first one goes.
    h.peer
        .write_all(
            format!("GET http://127.0.0.1:{p2}/two HTTP/1.1\r\nHost: 127.0.0.1:{p2}\r\n\r\n")
                .as_bytes(),
        )
        .unwrap();
    match goes {
        Goes::Reset => socket2::SockRef::from(&s1)
            .set_linger(Some(Duration::ZERO))
            .unwrap(),
        Goes::Finished => {}
    }
    drop(s1);
    // The precondition: the old upstream's event is dispatched after the
    // client's request switched the session to the second origin.
    let batch = h.poll_client_then_upstream();
    let _ = h.dispatch(&batch);
    poll_while_connecting(&mut h);
    assert!(
        h.state().starts_with("Inspect"),
        "{goes:?}: the second origin's connect was taken as failed: {} ({:?})",
        h.state(),
        h.session().conn.log.error,
    );

    // The second origin answers in two writes: the first a short read.
    let (mut s2, _) = second.accept().unwrap();
    assert!(read_head(&mut s2).starts_with("GET /two "));
    s2.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello")
        .unwrap();
    let _ = h.poll_events();
    // The proxy may have closed on a wrong EOF already: what it does with
    // the rest is what the client shows.
    let _ = s2.write_all(b"world");
    let _ = h.poll_events();
    let (head, body) = client_response(&mut h);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(
        String::from_utf8_lossy(&body),
        "helloworld",
        "{goes:?}: the second response cut short"
    );
    assert!(h.state().starts_with("Inspect"), "{}", h.state());
    let log = &h.session().conn.log;
    assert_eq!(log.requests, 2);
    assert_eq!(log.error, None);
}

#[test]
fn a_reset_of_the_old_upstream_in_the_switch_batch_is_not_the_new_connects() {
    switch_while_the_old_upstream_goes(Goes::Reset);
}

#[test]
fn a_fin_of_the_old_upstream_in_the_switch_batch_is_not_the_new_upstreams() {
    switch_while_the_old_upstream_goes(Goes::Finished);
}
