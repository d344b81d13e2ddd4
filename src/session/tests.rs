//! Session tests without the reactor: a session driven directly through its
//! handlers, with a `Ctx` built here and the `Effects` it returns checked.
//! The client is one end of a Unix socket pair (no network), and readiness
//! comes from a private `mio::Poll`.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream as StdUnix;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mio::{Events, Poll, Token};

use super::{Ctx, Effects, Session, Settings, Tokens};
use crate::buffer::BufPool;
use crate::client::Peer;
use crate::config::{Limits, ListenerProtocol, Timeouts};
use crate::events::{self, Event, EventKind, EventSink};
use crate::io::Stream;
use crate::lifecycle::{CloseReason, Side};
use crate::policy::{parse_cli_rule, Action, Policy};
use crate::stats::Stats;

const CLIENT: Token = Token(0);
const UPSTREAM: Token = Token(1);

/// A session, its environment, and the test's end of the client socket.
struct Harness {
    poll: Poll,
    events: Events,
    pool: BufPool,
    #[cfg(target_os = "linux")]
    pipes: super::PipeBudget,
    settings: Settings,
    tls: super::TlsEnv,
    policy: Policy,
    stats: Stats,
    /// Where the session's events go: `seen`.
    sink: EventSink,
    seen: Arc<Mutex<Vec<Event>>>,
    now: Instant,
    session: Option<Session>,
    peer: StdUnix,
}

impl Harness {
    fn new(policy: Policy, protocol: ListenerProtocol) -> (Harness, Effects) {
        let (ours, theirs) = StdUnix::pair().unwrap();
        theirs.set_nonblocking(true).unwrap();
        ours.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut h = Harness {
            poll: Poll::new().unwrap(),
            events: Events::with_capacity(16),
            pool: BufPool::new(16 * 1024, 4),
            #[cfg(target_os = "linux")]
            pipes: super::PipeBudget::new(0, 0, false),
            settings: Settings {
                timeouts: Timeouts::default(),
                limits: Limits::default(),
                auth: None,
                upstream_proxy: None,
            },
            tls: super::TlsEnv::new(crate::config::TlsConfig::default()),
            policy,
            stats: Stats::default(),
            sink: EventSink::default(),
            seen: Arc::default(),
            now: Instant::now(),
            session: None,
            peer: ours,
        };
        let seen = Arc::clone(&h.seen);
        h.sink = EventSink::new(Some(Arc::new(move |e: &Event| {
            seen.lock().unwrap().push(e.clone())
        })));
        let stream = Stream::Unix(mio::net::UnixStream::from_std(theirs));
        let (session, effects) = h.with_ctx(|ctx| {
            Session::accept(7, stream, Peer::unix(Some(0), None), protocol, None, ctx).unwrap()
        });
        h.session = Some(session);
        (h, effects)
    }

    fn with_ctx<T>(&mut self, f: impl FnOnce(&mut Ctx) -> T) -> (T, Effects) {
        let registry = self.poll.registry().try_clone().unwrap();
        let mut ctx = Ctx {
            registry: &registry,
            tokens: Tokens {
                client: CLIENT,
                upstream: UPSTREAM,
            },
            pool: &mut self.pool,
            #[cfg(target_os = "linux")]
            pipes: &self.pipes,
            settings: &self.settings,
            tls: &mut self.tls,
            policy: &self.policy,
            stats: &self.stats,
            events: &self.sink,
            now: self.now,
            effects: Effects::default(),
        };
        let out = f(&mut ctx);
        (out, ctx.effects)
    }

    /// Sends `bytes` from the client, then hands every readiness event to
    /// the session; returns the effects of the last call.
    fn client_sends(&mut self, bytes: &[u8]) -> Effects {
        self.peer.write_all(bytes).unwrap();
        self.poll_events()
    }

    fn poll_events(&mut self) -> Effects {
        self.poll
            .poll(&mut self.events, Some(Duration::from_millis(100)))
            .unwrap();
        let events: Vec<_> = self.events.iter().cloned().collect();
        let mut session = self.session.take().unwrap();
        let mut last = Effects::default();
        for ev in &events {
            let side = if ev.token() == CLIENT {
                Side::Client
            } else {
                Side::Upstream
            };
            last = self.with_ctx(|ctx| session.on_event(side, ev, ctx)).1;
        }
        self.session = Some(session);
        last
    }

    fn session(&mut self) -> &mut Session {
        self.session.as_mut().unwrap()
    }

    fn state(&self) -> String {
        self.session.as_ref().unwrap().state.to_string()
    }

    /// Reads what the session wrote to the client, up to `n` bytes.
    fn client_reads(&mut self, n: usize) -> Vec<u8> {
        let mut buf = vec![0u8; n];
        let mut got = 0;
        while got < n {
            match self.peer.read(&mut buf[got..]) {
                Ok(0) => break,
                Ok(k) => got += k,
                Err(e) => panic!("client read: {e}"),
            }
        }
        buf.truncate(got);
        buf
    }
}

fn allow(spec: &str) -> Policy {
    Policy::from_rules(&[parse_cli_rule(Action::Allow, spec).unwrap()]).unwrap()
}

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
    assert_eq!(h.state(), "Resolving");
    // The answer arrives: the name does not resolve, so the client gets a 502.
    let mut s = h.session.take().unwrap();
    let (_, effects) =
        h.with_ctx(|ctx| s.on_resolved(Err(std::io::ErrorKind::NotFound.into()), ctx));
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
    assert_eq!(e.reason.as_deref(), Some("no rule allows this destination"));
    assert_eq!(e.close, Some(CloseReason::Denied));
    assert_eq!((e.bytes_up, e.bytes_down), (Some(0), Some(0)));
    // Counted under no rule.
    let rules = h.stats.rules();
    assert_eq!(rules.len(), 1);
    assert_eq!((rules[0].0.as_str(), rules[0].1.denied), ("-", 1));
}

/// A loopback port nothing listens on (connects to it are refused at once).
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
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
fn handshake_timeout_ends_the_session() {
    let (mut h, _) = Harness::new(Policy::default(), ListenerProtocol::Auto);
    let _ = h.client_sends(b"CONN");
    h.now += h.settings.timeouts.handshake;
    let mut s = h.session.take().unwrap();
    let (_, effects) = h.with_ctx(|ctx| s.on_timer(ctx));
    assert_eq!(effects.closed, Some(CloseReason::HandshakeTimeout));
    assert!(s.is_done());
}

#[test]
fn an_early_timer_only_reports_the_deadline() {
    let (mut h, first) = Harness::new(Policy::default(), ListenerProtocol::Auto);
    let mut s = h.session.take().unwrap();
    let (_, effects) = h.with_ctx(|ctx| s.on_timer(ctx));
    assert_eq!(effects.closed, None, "not due yet: nothing happens");
    assert_eq!(effects.deadline, first.deadline);
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
