//! Session tests without the reactor: a session driven directly through its
//! handlers, with a `Ctx` built here and the `Effects` it returns checked.
//! The client is one end of a Unix socket pair (no network), and readiness
//! comes from a private `mio::Poll`.
//!
//! The harness and the helpers are here; the tests, one file per concern:
//! `handshake.rs` (deadlines, resolving, waiting for the inspected names,
//! refusals, sub-stages, timers), `connect.rs` (the connect stage's
//! shell through a parent proxy on loopback), `auth.rs` (logins
//! verified off the loop) and `switch.rs` (an upstream switch, and the old
//! upstream's events in the same poll batch).

mod atk_fold;
mod auth;
mod connect;
mod handshake;
mod switch;

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
use crate::reactor::token::{self, Owner};
use crate::stats::Stats;

/// The tokens the reactor would lend slab key 0 (its encoding's own).
const CLIENT: Token = token::client(0);
const UPSTREAM: [Token; 2] = [token::upstream(0, 0), token::upstream(0, 1)];
const RELAY: Token = token::relay(0);

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
    handshake_rates: std::sync::Mutex<crate::session::handshake_rate::HandshakeRates>,
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
                own: Default::default(),
                relay_bind: None,
                udp_waiting: crate::session::associate::WaitBudget::new(1 << 20),
                ktls: crate::tls::ktls::Support::NONE,
            },
            tls: super::TlsEnv::new(
                crate::config::TlsConfig::default(),
                std::sync::Arc::new(super::UpstreamTrust::new(
                    crate::config::TlsConfig::default(),
                )),
            ),
            policy,
            logins: crate::auth::cache::LoginCache::new(16),
            stats: Stats::default(),
            handshake_rates: Default::default(),
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
                relay: RELAY,
            },
            pool: &mut self.pool,
            #[cfg(target_os = "linux")]
            pipes: &self.pipes,
            settings: &self.settings,
            tls: &mut self.tls,
            policy: &self.policy,
            logins: &self.logins,
            stats: &self.stats,
            handshake_rates: &self.handshake_rates,
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
        let batch = self.poll_batch();
        self.dispatch(&batch)
    }

    /// One poll: the readiness events it harvested, in the kernel's order.
    fn poll_batch(&mut self) -> Vec<mio::event::Event> {
        self.poll
            .poll(&mut self.events, Some(Duration::from_millis(100)))
            .unwrap();
        self.events.iter().cloned().collect()
    }

    /// Hands `batch` to the session event by event, as the reactor's
    /// dispatch does (every event of a batch, even one whose socket an
    /// earlier event's handling dropped); returns the effects of the last
    /// call.
    fn dispatch(&mut self, batch: &[mio::event::Event]) -> Effects {
        let mut session = self.session.take().unwrap();
        let mut last = Effects::default();
        for ev in batch {
            last = self.with_ctx(|ctx| match token::owner(ev.token(), 0) {
                Owner::Session(0, side) => session.on_event(side, ev, ctx),
                Owner::Relay(0) => session.on_relay_event(ev, ctx),
                other => panic!("{other:?}: not the session's"),
            });
        }
        self.session = Some(session);
        last
    }

    fn session(&mut self) -> &mut Session {
        self.session.as_mut().unwrap()
    }

    /// Calls `f` on the session with a fresh context.
    fn call(&mut self, f: impl FnOnce(&mut Session, &mut Ctx) -> Effects) -> Effects {
        let mut s = self.session.take().unwrap();
        let effects = self.with_ctx(|ctx| f(&mut s, ctx));
        self.session = Some(s);
        effects
    }

    /// The open-sessions gauges: handshake, resolving, connecting,
    /// established, closing.
    fn open_gauges(&self) -> [u64; 5] {
        let o = self.stats.snapshot().open;
        [
            o.handshake,
            o.resolving,
            o.connecting,
            o.established,
            o.closing,
        ]
    }

    /// Polls until the session's state starts with `prefix` (a bounded
    /// number of times).
    fn poll_until(&mut self, prefix: &str) {
        for _ in 0..50 {
            if self.state().starts_with(prefix) {
                return;
            }
            let _ = self.poll_events();
        }
        panic!("never {prefix}: {}", self.state());
    }

    /// Polls one batch, which must hold the client's event, then the
    /// upstream's (the old upstream's, in the switch tests), in that order.
    fn poll_client_then_upstream(&mut self) -> Vec<mio::event::Event> {
        let batch = self.poll_batch();
        let owners: Vec<Owner> = batch.iter().map(|e| token::owner(e.token(), 0)).collect();
        assert_eq!(
            owners,
            [
                Owner::Session(0, Side::Client),
                Owner::Session(0, Side::Upstream)
            ],
            "{batch:?}"
        );
        batch
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

/// A policy allowing `spec` (a CLI rule).
fn allow(spec: &str) -> Policy {
    Policy::from_rules(&[parse_cli_rule(Action::Allow, spec).unwrap()]).unwrap()
}

/// A loopback port nothing listens on (connects to it are refused at once).
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}
