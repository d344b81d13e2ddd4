//! Attacks on the opening machine's shell: the phase gauges, the deadline
//! and a reload while a tunnel is vetted or secured inside the one
//! `Opening` state.

use super::*;

use crate::policy::parse_cli_terminate;

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
    h.poll_until("Securing");
    assert_eq!(
        String::from_utf8(h.client_reads(12)).unwrap(),
        "HTTP/1.1 200"
    );
    assert_eq!(h.open_gauges(), [0, 0, 1, 0, 0], "{}", h.state());
    // No hello within the handshake timeout: closed, the gauges back to 0.
    h.now += h.settings.timeouts.handshake;
    let mut s = h.session.take().unwrap();
    let effects = h.with_ctx(|ctx| s.on_timer(ctx));
    h.session = Some(s);
    assert_eq!(effects.closed, Some(CloseReason::HandshakeTimeout));
    assert_eq!(h.open_gauges(), [0; 5]);
}

/// A raw tunnel being vetted was admitted raw: a reload that now inspects
/// it (or refuses it) closes it, as it would a Passthrough; one that
/// still allows it raw leaves it vetting. The gauges follow.
#[test]
fn a_reload_closes_a_vetted_tunnel_it_now_inspects_or_refuses() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let raw = || {
        Policy::from_rules(&[
            parse_cli_rule(Action::Allow, &format!("127.0.0.1:{port}")).unwrap(),
            crate::policy::parse_cli_inspect(&format!("other.test:{port}")).unwrap(),
        ])
        .unwrap()
    };
    let vetting = || {
        let (mut h, _) = Harness::new(raw(), ListenerProtocol::Auto);
        let _ = h.client_sends(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").as_bytes());
        h.poll_until("Vetting");
        assert_eq!(h.open_gauges(), [0, 0, 0, 1, 0]);
        h
    };
    // Still raw: kept.
    let mut h = vetting();
    h.policy = raw();
    let effects = h.call(|s, ctx| s.on_reload(ctx));
    assert_eq!(effects.closed, None);
    assert!(h.state().starts_with("Vetting"), "{}", h.state());
    // Now inspected: closed.
    for now in [
        crate::policy::parse_cli_inspect(&format!("127.0.0.1:{port}")).unwrap(),
        parse_cli_terminate(&format!("127.0.0.1:{port}")).unwrap(),
        parse_cli_rule(Action::Deny, "127.0.0.1").unwrap(),
    ] {
        let mut h = vetting();
        h.policy = Policy::from_rules(&[now]).unwrap();
        let effects = h.call(|s, ctx| s.on_reload(ctx));
        assert_eq!(effects.closed, Some(CloseReason::PolicyReload));
        assert_eq!(h.open_gauges(), [0; 5]);
    }
}

/// A terminated tunnel awaiting its ClientHello: a reload that refuses
/// its target closes it; one that still terminates it keeps it.
#[test]
fn a_reload_closes_a_securing_tunnel_it_now_refuses() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let terminate = || {
        Policy::from_rules(&[parse_cli_terminate(&format!("127.0.0.1:{port}")).unwrap()]).unwrap()
    };
    let securing = || {
        let (mut h, _) = Harness::new(terminate(), ListenerProtocol::Auto);
        let _ = h.client_sends(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").as_bytes());
        h.poll_until("Securing");
        h
    };
    let mut h = securing();
    h.policy = terminate();
    let effects = h.call(|s, ctx| s.on_reload(ctx));
    assert_eq!(effects.closed, None);
    assert!(h.state().starts_with("Securing"), "{}", h.state());

    let mut h = securing();
    h.policy = Policy::from_rules(&[parse_cli_rule(Action::Deny, "127.0.0.1").unwrap()]).unwrap();
    let effects = h.call(|s, ctx| s.on_reload(ctx));
    assert_eq!(effects.closed, Some(CloseReason::PolicyReload));
    assert_eq!(h.open_gauges(), [0; 5]);
}

/// A vetted tunnel's first flight names an inspected address (its `Host`),
/// so the session drops its first upstream and dials that one; the first
/// upstream is reset in the same poll batch as the client's first flight,
/// its event dispatched after the switch. The new connect must not be
/// taken as failed: the old socket's event carries the other token.
#[test]
fn a_reset_of_the_vetted_upstream_in_the_switch_batch_is_not_the_new_connects() {
    use std::net::TcpListener;
    let first = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = first.local_addr().unwrap().port();
    let Ok(second) = TcpListener::bind(("127.0.0.2", port)) else {
        eprintln!("127.0.0.2:{port} is taken: skipped");
        return;
    };
    let policy = Policy::from_rules(&[
        parse_cli_rule(Action::Allow, &format!("127.0.0.1:{port}")).unwrap(),
        crate::policy::parse_cli_inspect(&format!("127.0.0.2:{port}")).unwrap(),
    ])
    .unwrap();
    let (mut h, _) = Harness::new(policy, ListenerProtocol::Auto);
    let _ = h.client_sends(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").as_bytes());
    h.poll_until("Vetting");
    assert_eq!(
        String::from_utf8(h.client_reads(12)).unwrap(),
        "HTTP/1.1 200"
    );
    let _ = h.client_reads(27);
    let (s1, _) = first.accept().unwrap();

    // The first flight, naming the inspected address; then the first
    // upstream's reset, both before the proxy polls.
    h.peer
        .write_all(format!("GET /x HTTP/1.1\r\nHost: 127.0.0.2:{port}\r\n\r\n").as_bytes())
        .unwrap();
    socket2::SockRef::from(&s1)
        .set_linger(Some(Duration::ZERO))
        .unwrap();
    drop(s1);
    let batch = h.poll_client_then_upstream();
    let _ = h.dispatch(&batch);
    h.poll_until("Inspect");
    let (mut s2, _) = second.accept().unwrap();
    s2.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s2.read(&mut byte).unwrap(), 1, "{head:?}");
        head.push(byte[0]);
    }
    assert!(head.starts_with(b"GET /x HTTP/1.1"), "{head:?}");
    assert_eq!(
        h.session()
            .conn
            .log
            .target
            .as_ref()
            .map(ToString::to_string),
        Some(format!("127.0.0.2:{port}"))
    );
    assert_eq!(h.session().conn.log.error, None);
}

/// A first flight naming a host a rule refuses is a denial like any other:
/// counted against the refusing rule, not only in the total.
#[test]
fn a_fronting_refusal_counts_against_the_refusing_rule() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let policy = Policy::from_rules(&[
        parse_cli_rule(Action::Allow, &format!("127.0.0.1:{port}")).unwrap(),
        crate::policy::parse_cli_inspect(&format!("other.test:{port}")).unwrap(),
        parse_cli_rule(Action::Deny, "evil.test").unwrap(),
    ])
    .unwrap();
    let (mut h, _) = Harness::new(policy, ListenerProtocol::Auto);
    let _ = h.client_sends(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").as_bytes());
    h.poll_until("Vetting(first-flight)");
    let _ = h.client_sends(b"GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n");
    for _ in 0..50 {
        if !h.state().starts_with("Vetting") {
            break;
        }
        let _ = h.poll_events();
    }
    let rules = h.stats.rules.snapshot();
    let denied = |name: &str| {
        rules
            .iter()
            .find(|(n, _)| n == name)
            .map_or(0, |(_, c)| c.denied)
    };
    assert_eq!(denied("--deny evil.test"), 1, "{rules:?}");
    assert_eq!(h.stats.snapshot().denied, 1);
}
