//! The connect stage's shell: what it does with the core's answers once an
//! upstream is open, through a parent proxy on loopback.

use super::*;

use std::net::TcpListener;

use crate::policy::parse_cli_inspect;
use crate::protocol::parent::ParentProxy;

/// A parent proxy on loopback answering each `CONNECT` with `200`, then,
/// on the connection at index `i`, `behind[i]` at once (what the
/// destination sent behind its answer). It keeps the connections open
/// until the test ends.
fn parent(behind: &'static [&'static [u8]]) -> Arc<ParentProxy> {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for extra in behind {
            let Ok((mut s, _)) = listener.accept() else {
                return;
            };
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                match s.read(&mut byte) {
                    Ok(1) => head.push(byte[0]),
                    _ => return,
                }
            }
            let mut answer = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
            answer.extend_from_slice(extra);
            let _ = s.write_all(&answer);
            held.push(s);
        }
        // Until the test's process ends (or the listener is dropped).
        std::thread::sleep(Duration::from_secs(30));
    });
    Arc::new(ParentProxy::parse(&format!("http://{addr}")).unwrap())
}

/// Polls until the session leaves `stage` (a bounded number of times).
fn poll_while(h: &mut Harness, stage: &str) {
    for _ in 0..50 {
        if !h.state().starts_with(stage) {
            return;
        }
        let _ = h.poll_events();
    }
    panic!("still {}", h.state());
}

/// A raw tunnel to 127.0.0.1:8080 through a [`parent`] answering with
/// `behind`, vetted (good.test:8080 is inspected): its `200` read, the
/// session waiting for the client's first flight.
fn vetted_tunnel(behind: &'static [&'static [u8]]) -> Harness {
    let policy = Policy::from_rules(&[
        parse_cli_rule(Action::Allow, "127.0.0.1:8080").unwrap(),
        parse_cli_inspect("good.test:8080").unwrap(),
    ])
    .unwrap();
    let (mut h, _) = Harness::new(policy, ListenerProtocol::Auto);
    h.settings.upstream_proxy = Some(parent(behind));
    let _ = h.client_sends(b"CONNECT 127.0.0.1:8080 HTTP/1.1\r\n\r\n");
    poll_while(&mut h, "Connecting");
    assert!(h.state().starts_with("Vetting"), "{}", h.state());
    let established = b"HTTP/1.1 200 Connection established\r\n\r\n";
    assert_eq!(h.client_reads(established.len()), established);
    h
}

#[test]
fn a_switched_tunnel_refused_behind_the_parent_is_closed_not_answered_again() {
    // A raw tunnel to 127.0.0.1:8080, vetted (good.test:8080 is
    // inspected); its first flight names good.test, so the session
    // switches to it, through the parent, which answers with bytes behind
    // its `200`: refused, as for any inspected tunnel. The client heard
    // its `200` already: only a close is left, not a second answer inside
    // the tunnel, read as the response to its request.
    let mut h = vetted_tunnel(&[b"", b"220 banner\r\n"]);

    let effects = h.client_sends(b"GET / HTTP/1.1\r\nHost: good.test:8080\r\n\r\n");
    assert_eq!(effects.resolve.as_deref(), Some("good.test"));
    assert_eq!(h.state(), "Resolving(dns)");
    let mut s = h.session.take().unwrap();
    let answer = Ok(vec!["45.45.45.45".parse().unwrap()]);
    let _ = h.with_ctx(|ctx| s.on_resolved(answer, ctx));
    h.session = Some(s);
    poll_while(&mut h, "Connecting");

    let after: Vec<u8> = h.client_reads(64);
    assert_eq!(
        String::from_utf8_lossy(&after),
        "",
        "nothing after the 200 but the close ({})",
        h.state()
    );
    assert!(h.session().is_done(), "{}", h.state());
}

/// A vetted tunnel whose first flight went wrong before its end (a bad
/// header line), in two reads: the gate holds the second back (no empty
/// line, not twice the bytes), though a parse on arrival would refuse it.
/// At the handshake deadline the client gets that refusal, a `403` that
/// says why, not a bare close for a timeout.
#[test]
fn a_first_flight_held_back_is_refused_at_the_deadline_not_timed_out() {
    let mut h = vetted_tunnel(&[b""]);

    let _ = h.client_sends(b"GET / HTTP/1.1\r\nHost: other.test\r\n");
    let _ = h.client_sends(b"Bad Header: x\r\n");
    assert!(h.state().starts_with("Vetting"), "{}", h.state());
    h.now += h.settings.timeouts.handshake + h.settings.timeouts.connect;
    let mut s = h.session.take().unwrap();
    let effects = h.with_ctx(|ctx| s.on_timer(ctx));
    h.session = Some(s);
    assert_ne!(effects.closed, Some(CloseReason::HandshakeTimeout));
    let answer = String::from_utf8(h.client_reads(300)).unwrap();
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert!(answer.contains("X-Proxy-Error: fronting"), "{answer}");
    assert!(
        answer.contains("a request head that does not parse"),
        "{answer}"
    );
}

#[test]
fn the_proxys_own_address_is_ours_in_its_translated_ipv6_spellings() {
    // Audit mode lets a `this-host` address through: this check is the
    // one that stands. A NAT64 translator (64:ff9b::/96) delivers to the
    // IPv4 address it embeds; the policy names this host's addresses in
    // those spellings (and 6to4's) too.
    use crate::config::ListenAddr;
    use crate::session::connect::OwnAddrs;
    let listening = [
        ListenAddr::Tcp("45.45.45.45:3128".parse().unwrap()),
        ListenAddr::Tcp("127.0.0.1:3129".parse().unwrap()),
    ];
    let own = OwnAddrs::new(&listening);
    for (to, ours) in [
        ("45.45.45.45:3128", true),
        ("[::ffff:45.45.45.45]:3128", true),
        ("[64:ff9b::45.45.45.45]:3128", true),
        ("[2002:2d2d:2d2d::1]:3128", true),
        ("[64:ff9b::127.0.0.1]:3129", true),
        ("[64:ff9b::45.45.45.46]:3128", false),
        ("[64:ff9b::45.45.45.45]:3130", false),
        ("[2001:db8::45.45.45.45]:3128", false),
    ] {
        assert_eq!(own.contains(to.parse().unwrap()), ours, "{to}");
    }
}
