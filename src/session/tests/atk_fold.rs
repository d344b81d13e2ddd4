//! Attacks on the opening machine's shell: the phase gauges, the deadline
//! and a reload while a tunnel is vetted or secured inside the one
//! `Opening` state.

use super::*;

use crate::policy::parse_cli_terminate;

/// The open-sessions gauges: handshake, resolving, connecting,
/// established, closing.
fn open(h: &Harness) -> [u64; 5] {
    let o = h.stats.snapshot().open;
    [
        o.handshake,
        o.resolving,
        o.connecting,
        o.established,
        o.closing,
    ]
}

/// Polls until the session's state starts with `prefix` (a bounded number
/// of times).
fn poll_until(h: &mut Harness, prefix: &str) {
    for _ in 0..50 {
        if h.state().starts_with(prefix) {
            return;
        }
        let _ = h.poll_events();
    }
    panic!("never {prefix}: {}", h.state());
}

/// A terminated tunnel waiting for its ClientHello has resolved and
/// connected: it is not waiting for the resolver. Before the opening
/// machine took securing in, Securing counted as connecting; as one of
/// Opening's names it fell through to resolving.
#[test]
fn a_securing_session_is_not_counted_as_resolving() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let policy =
        Policy::from_rules(&[parse_cli_terminate(&format!("127.0.0.1:{port}")).unwrap()]).unwrap();
    let (mut h, _) = Harness::new(policy, ListenerProtocol::Auto);
    let _ = h.client_sends(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").as_bytes());
    poll_until(&mut h, "Securing");
    assert_eq!(
        String::from_utf8(h.client_reads(12)).unwrap(),
        "HTTP/1.1 200"
    );
    assert_eq!(open(&h), [0, 0, 1, 0, 0], "{}", h.state());
    // No hello within the handshake timeout: closed, the gauges back to 0.
    h.now += h.settings.timeouts.handshake;
    let mut s = h.session.take().unwrap();
    let effects = h.with_ctx(|ctx| s.on_timer(ctx));
    h.session = Some(s);
    assert_eq!(effects.closed, Some(CloseReason::HandshakeTimeout));
    assert_eq!(open(&h), [0; 5]);
}
