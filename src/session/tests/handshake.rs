//! The handshake and what follows it: the deadlines each state arms,
//! resolving, waiting for the inspected names, refusals, SOCKS5
//! sub-stages, timers.

use super::*;

#[test]
fn accept_arms_the_handshake_deadline() {
    let (h, effects) = Harness::new(Policy::default(), ListenerProtocol::Auto);
    assert_eq!(
        effects.deadline,
        Some(h.now + h.settings.timeouts.handshake)
    );
    assert_eq!(effects.closed, None);
    assert_eq!(h.state(), "Handshake(sniff)");
}

#[test]
fn connect_to_a_name_asks_the_reactor_to_resolve() {
    let (mut h, _) = Harness::new(allow("example.test:443"), ListenerProtocol::Auto);
    let effects = h.client_sends(b"CONNECT example.test:443 HTTP/1.1\r\n\r\n");
    assert_eq!(effects.resolve.as_deref(), Some("example.test"));
    assert!(
        effects.left_handshake,
        "admission must hear the handshake ended"
    );
    assert_eq!(
        effects.deadline,
        Some(h.now + h.settings.timeouts.connect),
        "resolve and connect share the connect deadline"
    );
    assert_eq!(h.state(), "Resolving(dns)");
    // The answer arrives: the name does not resolve, so the client gets a 502.
    let mut s = h.session.take().unwrap();
    let effects = h.with_ctx(|ctx| s.on_resolved(Err(std::io::ErrorKind::NotFound.into()), ctx));
    h.session = Some(s);
    assert!(h.state().starts_with("Closing"), "{}", h.state());
    let answer = String::from_utf8(h.client_reads(12)).unwrap();
    assert_eq!(answer, "HTTP/1.1 502");
    assert_eq!(
        effects.deadline,
        Some(h.now + h.settings.timeouts.close),
        "Closing is bounded by the close timer"
    );
}

#[test]
fn a_denied_address_is_answered_403_and_counted() {
    let (mut h, _) = Harness::new(allow("127.0.0.1:443"), ListenerProtocol::Auto);
    let _ = h.client_sends(b"CONNECT 127.0.0.2:443 HTTP/1.1\r\n\r\n");
    let answer = String::from_utf8(h.client_reads(12)).unwrap();
    assert_eq!(answer, "HTTP/1.1 403");
    assert_eq!(h.stats.snapshot().denied, 1);
    // The client closes: Closing's linger sees EOF, and the session ends.
    h.peer.shutdown(std::net::Shutdown::Write).unwrap();
    let effects = h.poll_events();
    assert_eq!(effects.closed, Some(CloseReason::Denied));
    assert_eq!(effects.deadline, None);
    assert!(h.session().is_done());
    assert_eq!(h.stats.snapshot().closed.get(CloseReason::Denied), 1);
    // One session event, with the decision and why.
    let seen = h.seen.lock().unwrap();
    let [e] = &seen[..] else { panic!("{seen:?}") };
    assert_eq!(e.kind, EventKind::Session);
    assert_eq!(e.conn, 7);
    assert_eq!(e.protocol, Some(events::Protocol::Connect));
    assert_eq!((e.client.as_str(), e.client_uid), ("unix", Some(0)));
    assert_eq!(e.target.as_deref(), Some("127.0.0.2:443"));
    assert_eq!(e.decision, Some(events::Decision::Deny));
    assert_eq!(e.rule, None, "no rule denied it: deny by default");
    assert_eq!(
        e.reason.as_deref(),
        Some(
            "no rule allows this destination: use --allow 127.0.0.2:443 \
             (in a policy file: cidrs = [\"127.0.0.2/32\"], ports = [443])"
        )
    );
    assert_eq!(e.close, Some(CloseReason::Denied));
    assert_eq!((e.bytes_up, e.bytes_down), (Some(0), Some(0)));
    // Counted under no rule.
    let rules = h.stats.rules();
    assert_eq!(rules.len(), 1);
    assert_eq!((rules[0].0.as_str(), rules[0].1.denied), ("-", 1));
}

#[test]
fn socks5_byte_by_byte_walks_its_sub_stages() {
    let port = closed_port();
    let (mut h, _) = Harness::new(allow(&format!("127.0.0.1:{port}")), ListenerProtocol::Auto);
    let mut stages = vec![h.state()];
    let [hi, lo] = port.to_be_bytes();
    let mut request = vec![5, 1, 0, 5, 1, 0, 1, 127, 0, 0, 1, hi, lo];
    let last = request.pop().unwrap();
    for b in request {
        let _ = h.client_sends(&[b]);
        if stages.last() != Some(&h.state()) {
            stages.push(h.state());
        }
    }
    assert_eq!(
        stages,
        [
            "Handshake(sniff)",
            "Handshake(socks5-greeting)",
            "Handshake(socks5-request)"
        ]
    );
    assert_eq!(h.client_reads(2), [5, 0], "method selection: no auth");
    let effects = h.client_sends(&[last]);
    assert!(effects.left_handshake);
    assert_eq!(effects.resolve, None, "an address needs no resolver");
    assert_eq!(h.state(), "Connecting(tcp)");
    // The refused connect arrives as an error edge: SOCKS5 reply 0x05.
    let effects = h.poll_events();
    assert!(h.state().starts_with("Closing"), "{}", h.state());
    assert_eq!(h.client_reads(2), [5, 5], "connection refused");
    assert_eq!(effects.deadline, Some(h.now + h.settings.timeouts.close));
}

#[test]
fn a_raw_connection_waits_until_the_inspected_names_are_resolved() {
    let port = closed_port();
    let (mut h, _) = Harness::new(allow(&format!("127.0.0.1:{port}")), ListenerProtocol::Auto);
    h.pins_settled = false;
    let effects = h.client_sends(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").as_bytes());
    assert!(effects.await_pins, "the reactor must call back");
    assert_eq!(effects.resolve, None);
    assert_eq!(h.state(), "Resolving(pins)");
    assert_eq!(
        effects.deadline,
        Some(h.now + h.settings.timeouts.connect),
        "the wait is bounded by the connect deadline"
    );
    assert_eq!(h.stats.snapshot().allowed, 0, "not decided yet");
    let open = h.stats.snapshot().open;
    assert_eq!((open.resolving, open.connecting), (1, 0));
    // Resolved: decided again, and dialled.
    h.pins_settled = true;
    let mut s = h.session.take().unwrap();
    let effects = h.with_ctx(|ctx| s.on_pins(ctx));
    h.session = Some(s);
    assert!(!effects.await_pins);
    assert_eq!(h.state(), "Connecting(tcp)");
    assert_eq!(h.stats.snapshot().allowed, 1);
    // Resolving to connecting inside one state: the phase gauges move.
    let open = h.stats.snapshot().open;
    assert_eq!((open.resolving, open.connecting), (0, 1));
}

#[test]
fn an_inspected_connection_waits_for_the_inspected_names_too() {
    // Inspected under a broad rule: once an inspected name's addresses are
    // known, that name's rule joins in (its request rules, its deny list),
    // so this one waits for them as a raw one does.
    use crate::policy::RuleConfig;
    let port = closed_port();
    let broad = RuleConfig::builder(Action::Allow)
        .cidr("127.0.0.0/8")
        .port(port)
        .inspect()
        .build();
    let policy = Policy::from_rules(&[broad]).unwrap();
    let (mut h, _) = Harness::new(policy, ListenerProtocol::Auto);
    h.pins_settled = false;
    let effects = h.client_sends(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").as_bytes());
    assert!(effects.await_pins, "the reactor must call back");
    assert_eq!(h.state(), "Resolving(pins)");
    assert_eq!(h.stats.snapshot().allowed, 0, "not decided yet");
}

#[test]
fn the_wait_for_the_inspected_names_times_out_closed() {
    let port = closed_port();
    let (mut h, _) = Harness::new(allow(&format!("127.0.0.1:{port}")), ListenerProtocol::Auto);
    h.pins_settled = false;
    let _ = h.client_sends(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").as_bytes());
    h.now += h.settings.timeouts.connect;
    let mut s = h.session.take().unwrap();
    let _ = h.with_ctx(|ctx| s.on_timer(ctx));
    h.session = Some(s);
    assert_eq!(
        String::from_utf8(h.client_reads(12)).unwrap(),
        "HTTP/1.1 504"
    );
}

#[test]
fn handshake_timeout_ends_the_session() {
    let (mut h, _) = Harness::new(Policy::default(), ListenerProtocol::Auto);
    let _ = h.client_sends(b"CONN");
    h.now += h.settings.timeouts.handshake;
    let mut s = h.session.take().unwrap();
    let effects = h.with_ctx(|ctx| s.on_timer(ctx));
    assert_eq!(effects.closed, Some(CloseReason::HandshakeTimeout));
    assert!(s.is_done());
}

#[test]
fn an_early_timer_only_reports_the_deadline() {
    let (mut h, first) = Harness::new(Policy::default(), ListenerProtocol::Auto);
    let mut s = h.session.take().unwrap();
    let effects = h.with_ctx(|ctx| s.on_timer(ctx));
    assert_eq!(effects.closed, None, "not due yet: nothing happens");
    assert_eq!(effects.deadline, first.deadline);
}

/// The session's timer and its stage's core disagreeing (the timer armed
/// earlier than the core's deadline): the core says not yet, the state
/// stays, and the session keeps a timer on the core's deadline, never none.
#[test]
fn a_timer_before_the_cores_deadline_keeps_the_cores_deadline() {
    let (mut h, first) = Harness::new(Policy::default(), ListenerProtocol::Auto);
    let mut s = h.session.take().unwrap();
    s.conn.deadline = Some(h.now);
    let effects = h.with_ctx(|ctx| s.on_timer(ctx));
    assert_eq!(
        effects.closed, None,
        "the handshake's deadline has not come"
    );
    assert_eq!(effects.deadline, first.deadline, "re-armed on the core's");
    assert_eq!(s.state.to_string(), "Handshake(sniff)");
}

#[test]
fn an_oversized_head_gets_431() {
    let (mut h, _) = Harness::new(Policy::default(), ListenerProtocol::Http);
    h.settings.limits.max_head_bytes = 1024;
    let mut head = b"CONNECT a.test:443 HTTP/1.1\r\nX: ".to_vec();
    head.resize(2000, b'a');
    let _ = h.client_sends(&head);
    let answer = String::from_utf8(h.client_reads(12)).unwrap();
    assert_eq!(answer, "HTTP/1.1 431");
}

/// Resolving and Connecting are one state: whichever stage a session
/// leaves it from (refused, refused by a reload, aborted), the phase gauges
/// it moved come back to zero.
#[test]
fn the_phase_gauges_return_to_zero_from_either_stage() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let policy = || {
        Policy::from_rules(&[
            parse_cli_rule(Action::Allow, &format!("a.test:{port}")).unwrap(),
            parse_cli_rule(Action::Allow, &format!("127.0.0.1:{port}")).unwrap(),
        ])
        .unwrap()
    };
    let connect = format!("CONNECT a.test:{port} HTTP/1.1\r\n\r\n");
    let loopback = || Ok(vec!["127.0.0.1".parse().unwrap()]);
    let not_found = || Err(std::io::ErrorKind::NotFound.into());

    // Refused while resolving, then aborted while closing.
    let (mut h, _) = Harness::new(policy(), ListenerProtocol::Auto);
    let _ = h.client_sends(connect.as_bytes());
    assert_eq!(h.open_gauges(), [0, 1, 0, 0, 0]);
    let _ = h.call(|s, ctx| s.on_resolved(not_found(), ctx));
    assert_eq!(h.open_gauges(), [0, 0, 0, 0, 1]);
    let _ = h.call(|s, ctx| s.abort(CloseReason::Shutdown, ctx));
    assert_eq!(h.open_gauges(), [0; 5]);

    // Aborted while resolving.
    let (mut h, _) = Harness::new(policy(), ListenerProtocol::Auto);
    let _ = h.client_sends(connect.as_bytes());
    let _ = h.call(|s, ctx| s.abort(CloseReason::Shutdown, ctx));
    assert_eq!(h.open_gauges(), [0; 5]);

    // Refused by a reload while connecting: answered, then aborted while
    // closing.
    let (mut h, _) = Harness::new(policy(), ListenerProtocol::Auto);
    let _ = h.client_sends(connect.as_bytes());
    let _ = h.call(|s, ctx| s.on_resolved(loopback(), ctx));
    assert_eq!(h.state(), "Connecting(tcp)");
    assert_eq!(h.open_gauges(), [0, 0, 1, 0, 0]);
    h.policy = Policy::default();
    let _ = h.call(|s, ctx| s.on_reload(ctx));
    assert!(h.state().starts_with("Closing"), "{}", h.state());
    assert_eq!(h.open_gauges(), [0, 0, 0, 0, 1]);
    assert!(h.client_reads(12).starts_with(b"HTTP/1.1 403"));
    let effects = h.call(|s, ctx| s.abort(CloseReason::Shutdown, ctx));
    assert_eq!(effects.closed, Some(CloseReason::Shutdown));
    assert_eq!(h.open_gauges(), [0; 5]);

    // Timed out while connecting, then aborted while closing.
    let (mut h, _) = Harness::new(policy(), ListenerProtocol::Auto);
    let _ = h.client_sends(connect.as_bytes());
    let _ = h.call(|s, ctx| s.on_resolved(loopback(), ctx));
    h.now += h.settings.timeouts.connect;
    let _ = h.call(|s, ctx| s.on_timer(ctx));
    assert!(h.state().starts_with("Closing"), "{}", h.state());
    let _ = h.call(|s, ctx| s.abort(CloseReason::Shutdown, ctx));
    assert_eq!(h.open_gauges(), [0; 5]);
}

/// A forward-proxied request whose connect a reload refuses is answered
/// `403`, as one the policy refused at once is: it gets its `request`
/// event too (with the status the client saw), or the requests log would
/// miss a request the proxy answered.
#[test]
fn a_forward_request_refused_by_a_reload_gets_its_request_event() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let policy = Policy::from_rules(&[
        parse_cli_rule(Action::Allow, &format!("a.test:{port}")).unwrap(),
        parse_cli_rule(Action::Allow, &format!("127.0.0.1:{port}")).unwrap(),
    ])
    .unwrap();
    let (mut h, _) = Harness::new(policy, ListenerProtocol::Auto);
    let get = format!("GET http://a.test:{port}/x HTTP/1.1\r\nHost: a.test:{port}\r\n\r\n");
    let _ = h.client_sends(get.as_bytes());
    let _ = h.call(|s, ctx| s.on_resolved(Ok(vec!["127.0.0.1".parse().unwrap()]), ctx));
    assert_eq!(h.state(), "Connecting(tcp)");
    h.policy = Policy::default();
    let _ = h.call(|s, ctx| s.on_reload(ctx));
    assert!(h.client_reads(12).starts_with(b"HTTP/1.1 403"));
    // Counted once, as allowed (it was, when dialled).
    let snap = h.stats.snapshot();
    assert_eq!((snap.allowed, snap.denied), (1, 0));
    let seen = h.seen.lock().unwrap();
    let requests: Vec<_> = seen
        .iter()
        .filter(|e| e.kind == EventKind::Request)
        .collect();
    let [e] = &requests[..] else {
        panic!("{seen:?}")
    };
    assert_eq!(e.status, Some(403));
    assert_eq!(e.decision, Some(events::Decision::Deny));
    assert_eq!(e.method.as_deref(), Some("GET"));
}
