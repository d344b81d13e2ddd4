//! The hand-off to kernel TLS in the simulator: the core gives each side's
//! keys to an in-memory kernel (`kernel.rs`) that seals and opens records
//! with them, so a hand-off before a record boundary, with bytes still
//! buffered, or with wrong keys or sequence numbers, shows as a record that
//! does not open or a byte that differs. Reads and writes split at many
//! sizes.

use super::sim::{Options, Session, ORIGIN};
use crate::lifecycle::CloseReason;

fn get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: {ORIGIN}\r\n\r\n")
}

fn ok(body: &str) -> String {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

fn kernel() -> Options {
    Options {
        ktls: true,
        ..Options::terminated()
    }
}

/// Two exchanges, the first request sent with the client's Finished
/// (rustls holds it until the handshake ends), each read and write cut at
/// `split` bytes (0: uncut): both sides go to the kernel, every record
/// opens, every byte arrives.
#[test]
fn both_sides_go_to_the_kernel_and_every_byte_arrives_at_any_split() {
    let body: String = (0..200_000)
        .map(|i| (b'a' + (i % 26) as u8) as char)
        .collect();
    for split in [0, 1, 2, 5, 13, 100, 4096, 20_000] {
        let mut s = Session::new(kernel());
        s.cport.max_io = split;
        s.uport.max_io = split;
        s.client_sends(get("/a"));
        s.drive();
        assert_eq!(s.upstream_text(), get("/a"), "split {split}");
        s.upstream_sends(ok(&body));
        s.drive();
        assert_eq!(s.client_text(), ok(&body), "split {split}");
        s.client_sends(get("/b"));
        s.drive();
        s.upstream_sends(ok("second"));
        s.drive();
        assert_eq!(s.upstream_text(), get("/a") + &get("/b"), "split {split}");
        assert_eq!(s.client_text(), ok(&body) + &ok("second"), "split {split}");
        assert!(
            s.cport.kernel.is_some(),
            "split {split}: the client side stayed in rustls"
        );
        assert!(
            s.uport.kernel.is_some(),
            "split {split}: the upstream side stayed in rustls"
        );
        assert!(s.stop.is_none(), "split {split}: {:?}", s.reason());
    }
}

/// A large upload sent right behind the handshake: the hand-off waits for
/// a quiet moment and a record boundary, and nothing is lost across it.
#[test]
fn an_upload_behind_the_handshake_crosses_the_hand_off_whole() {
    let body = "u".repeat(300_000);
    for split in [0, 7, 1000] {
        let mut s = Session::new(kernel());
        s.cport.max_io = split;
        s.uport.max_io = split;
        let req = format!(
            "POST /up HTTP/1.1\r\nHost: {ORIGIN}\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        s.client_sends(&req);
        s.drive();
        assert_eq!(s.upstream_text(), req, "split {split}");
        s.upstream_sends(ok("done"));
        s.drive();
        assert_eq!(s.client_text(), ok("done"), "split {split}");
        assert!(
            s.cport.kernel.is_some() && s.uport.kernel.is_some(),
            "split {split}"
        );
    }
}

/// Without the setting nothing goes to the kernel.
#[test]
fn without_the_setting_tls_stays_in_rustls() {
    let mut s = Session::new(Options::terminated());
    s.client_sends(get("/a"));
    s.drive();
    s.upstream_sends(ok("x"));
    s.drive();
    assert_eq!(s.client_text(), ok("x"));
    assert!(s.cport.kernel.is_none() && s.uport.kernel.is_none());
}

/// The upstream's close_notify, read by the kernel as an alert record, is
/// its clean end: the client gets the response and the proxy's own
/// close_notify, sealed by the kernel.
#[test]
fn a_close_notify_through_the_kernel_is_a_clean_end() {
    let mut s = Session::new(kernel());
    s.client_sends(format!(
        "GET /a HTTP/1.1\r\nHost: {ORIGIN}\r\nConnection: close\r\n\r\n"
    ));
    s.drive();
    s.upstream_sends("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end");
    s.drive();
    s.upstream_close_notify();
    s.upstream_fin();
    for _ in 0..10 {
        if s.closed.is_some() {
            break;
        }
        s.step();
    }
    assert!(
        s.client_text().ends_with("until the end"),
        "{}",
        s.client_text()
    );
    assert!(s.client.close_notify, "the client got no close_notify");
    assert!(s.uport.kernel.is_some());
    assert_ne!(
        s.reason(),
        Some(CloseReason::UpstreamGone),
        "{:?}",
        s.reason()
    );
}

/// A KeyUpdate the kernel cannot follow ends the session, and nothing the
/// peer sent under the new keys reaches the client.
#[test]
fn a_key_update_ends_the_session() {
    let mut s = Session::new(kernel());
    s.client_sends(get("/a"));
    s.drive();
    s.upstream_sends(ok("first"));
    s.drive();
    assert_eq!(s.client_text(), ok("first"));
    s.upstream_updates_keys();
    s.client_sends(get("/b"));
    s.drive();
    s.upstream_sends(ok("second"));
    s.drive();
    for _ in 0..10 {
        if s.closed.is_some() {
            break;
        }
        s.step();
    }
    assert_eq!(
        s.client_text(),
        ok("first"),
        "bytes under new keys reached the client"
    );
    assert!(s.reason().is_some(), "the session went on");
}

/// Keys the kernel refuses (after the layer gave them up): the session
/// closes at once (the log line has the reason), nothing is read or
/// written raw, and the client gets a 502.
#[test]
fn a_refused_hand_off_closes_the_session() {
    let mut s = Session::new(kernel());
    s.uport.refuse_keys = true;
    s.client_sends(get("/a"));
    s.drive();
    for _ in 0..10 {
        if s.closed.is_some() {
            break;
        }
        s.step();
    }
    assert!(s.reason().is_some(), "the session went on");
    assert!(s.uport.kernel.is_none());
    assert!(!s.upstream_text().contains("GET"), "a request went out raw");
    assert!(
        s.client_text().starts_with("HTTP/1.1 502"),
        "{}",
        s.client_text()
    );
}
