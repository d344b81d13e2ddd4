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
    logins: crate::auth::cache::LoginCache,
    stats: Stats,
    /// Where the session's events go: `seen`.
    sink: EventSink,
    seen: Arc<Mutex<Vec<Event>>>,
    now: Instant,
    /// What the reactor would say of the policy's inspected names.
    pins_settled: bool,
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
            logins: crate::auth::cache::LoginCache::new(16),
            stats: Stats::default(),
            sink: EventSink::default(),
            seen: Arc::default(),
            now: Instant::now(),
            pins_settled: true,
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

    /// Runs `f` with a fresh context, as the reactor's `call` does; returns
    /// what `f` returns, having checked the context kept no effect back
    /// (every entry point returns them all).
    fn with_ctx<T>(&mut self, f: impl FnOnce(&mut Ctx) -> T) -> T {
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
            logins: &self.logins,
            stats: &self.stats,
            events: &self.sink,
            pins_settled: self.pins_settled,
            now: self.now,
            effects: Default::default(),
        };
        let out = f(&mut ctx);
        assert!(ctx.effects.is_empty(), "effects left behind in the context");
        out
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
            last = self.with_ctx(|ctx| session.on_event(side, ev, ctx));
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
    // Resolved: decided again, and dialled.
    h.pins_settled = true;
    let mut s = h.session.take().unwrap();
    let effects = h.with_ctx(|ctx| s.on_pins(ctx));
    h.session = Some(s);
    assert!(!effects.await_pins);
    assert_eq!(h.state(), "Connecting(tcp)");
    assert_eq!(h.stats.snapshot().allowed, 1);
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

/// Users alice and bob with (cheap) hashed passwords `pw-alice`, `pw-bob`.
fn with_users(h: &mut Harness) {
    use crate::auth::{hash_password_with, HashedUser, PhcHash, Users};
    let user = |name: &str| {
        let hash = hash_password_with(format!("pw-{name}").as_bytes(), 64, 1, 1).unwrap();
        HashedUser::new(name, PhcHash::parse(&hash).unwrap())
    };
    h.settings.auth = Users::new(None, &[user("alice"), user("bob")]).map(Arc::new);
}

fn basic(user: &str, pw: &str) -> String {
    let creds = format!("{user}:{pw}");
    // A tiny base64 encoder for the test.
    const ABC: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in creds.as_bytes().chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, &b)| acc | (b as u32) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(ABC[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
        out.push_str(&"=="[..3 - chunk.len()]);
    }
    out
}

fn alice_only(port: u16) -> Policy {
    let mut r = parse_cli_rule(Action::Allow, &format!("127.0.0.1:{port}")).unwrap();
    r.users = Some(vec!["alice".into()]);
    Policy::from_rules(&[r]).unwrap()
}

#[test]
fn http_login_waits_authenticating_then_goes_on_as_the_user() {
    let port = closed_port();
    let (mut h, _) = Harness::new(alice_only(port), ListenerProtocol::Http);
    with_users(&mut h);
    let head = format!(
        "CONNECT 127.0.0.1:{port} HTTP/1.1\r\nProxy-Authorization: Basic {}\r\n\r\n",
        basic("bob", "pw-bob")
    );
    let effects = h.client_sends(head.as_bytes());
    let job = effects.verify.expect("a verification for the pool");
    assert_eq!(job.user.as_deref(), Some("bob"));
    assert_eq!(h.state(), "Handshake(authenticating)");
    assert_eq!(
        effects.deadline,
        Some(h.now + h.settings.timeouts.handshake),
        "the handshake deadline still runs"
    );
    // The pool's verdict (run here, as a pool thread would).
    let verdict = match job.run() {
        Some(user) => crate::auth::Verdict::Accepted(user),
        None => crate::auth::Verdict::Rejected,
    };
    let mut s = h.session.take().unwrap();
    let _ = h.with_ctx(|ctx| s.on_verified(verdict, ctx));
    h.session = Some(s);
    // bob is not in the rule: 403, and the reason names him.
    let answer = String::from_utf8(h.client_reads(200)).unwrap();
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert!(
        answer.contains("denied; user-not-in-rule=--allow 127.0.0.1:"),
        "{answer}"
    );
    h.peer.shutdown(std::net::Shutdown::Write).unwrap();
    let _ = h.poll_events();
    let seen = h.seen.lock().unwrap();
    let [e] = &seen[..] else { panic!("{seen:?}") };
    assert_eq!(e.user.as_deref(), Some("bob"));
    assert!(e
        .reason
        .as_deref()
        .unwrap()
        .starts_with("user \"bob\" not in rule"));
}

#[test]
fn a_remembered_login_needs_no_verification() {
    let port = closed_port();
    let (mut h, _) = Harness::new(alice_only(port), ListenerProtocol::Http);
    with_users(&mut h);
    let digest = h.logins.digest(b"alice", b"pw-alice");
    h.logins.insert(digest, "alice".into());
    let head = format!(
        "CONNECT 127.0.0.1:{port} HTTP/1.1\r\nProxy-Authorization: Basic {}\r\n\r\n",
        basic("alice", "pw-alice")
    );
    let effects = h.client_sends(head.as_bytes());
    assert!(effects.verify.is_none());
    assert!(effects.left_handshake);
    assert_eq!(h.state(), "Connecting(tcp)", "alice's rule allowed it");
}

#[test]
fn http_wrong_password_is_407_and_a_full_queue_503() {
    for (verdict, status) in [
        (crate::auth::Verdict::Rejected, "HTTP/1.1 407"),
        (crate::auth::Verdict::Busy, "HTTP/1.1 503"),
    ] {
        let (mut h, _) = Harness::new(alice_only(9), ListenerProtocol::Http);
        with_users(&mut h);
        let head = format!(
            "CONNECT 127.0.0.1:9 HTTP/1.1\r\nProxy-Authorization: Basic {}\r\n\r\n",
            basic("alice", "wrong")
        );
        let effects = h.client_sends(head.as_bytes());
        assert!(effects.verify.is_some());
        let mut s = h.session.take().unwrap();
        let _ = h.with_ctx(|ctx| s.on_verified(verdict.clone(), ctx));
        h.session = Some(s);
        let answer = String::from_utf8(h.client_reads(12)).unwrap();
        assert_eq!(answer, status, "{verdict:?}");
    }
    // No credentials at all: 407 at once, nothing for the pool.
    let (mut h, _) = Harness::new(alice_only(9), ListenerProtocol::Http);
    with_users(&mut h);
    let effects = h.client_sends(b"CONNECT 127.0.0.1:9 HTTP/1.1\r\n\r\n");
    assert!(effects.verify.is_none());
    assert_eq!(
        String::from_utf8(h.client_reads(12)).unwrap(),
        "HTTP/1.1 407"
    );
}

#[test]
fn socks5_login_waits_then_answers_the_auth_status() {
    let (mut h, _) = Harness::new(alice_only(9), ListenerProtocol::Socks5);
    with_users(&mut h);
    let _ = h.client_sends(&[5, 1, 2]);
    assert_eq!(h.client_reads(2), [5, 2], "username/password selected");
    let mut auth = vec![1, 5];
    auth.extend_from_slice(b"alice");
    auth.push(5);
    auth.extend_from_slice(b"wrong");
    let effects = h.client_sends(&auth);
    assert!(effects.verify.is_some());
    assert_eq!(h.state(), "Handshake(authenticating)");
    let mut s = h.session.take().unwrap();
    let effects = h.with_ctx(|ctx| s.on_verified(crate::auth::Verdict::Rejected, ctx));
    h.session = Some(s);
    assert_eq!(h.client_reads(2), [1, 1], "auth failure");
    assert_eq!(h.stats.snapshot().auth_failures, 1);
    assert!(effects.closed.is_none() || effects.closed == Some(CloseReason::AuthFailed));
}

#[test]
fn the_handshake_deadline_ends_a_login_that_waits_too_long() {
    let (mut h, _) = Harness::new(alice_only(9), ListenerProtocol::Socks5);
    with_users(&mut h);
    let _ = h.client_sends(&[5, 1, 2, 1, 3, b'b', b'o', b'b', 1, b'x']);
    assert_eq!(h.state(), "Handshake(authenticating)");
    h.now += h.settings.timeouts.handshake;
    let mut s = h.session.take().unwrap();
    let effects = h.with_ctx(|ctx| s.on_timer(ctx));
    assert_eq!(effects.closed, Some(CloseReason::HandshakeTimeout));
    // A verdict after the end changes nothing.
    let effects = h.with_ctx(|ctx| s.on_verified(crate::auth::Verdict::Rejected, ctx));
    assert_eq!(effects.closed, Some(CloseReason::HandshakeTimeout));
}
