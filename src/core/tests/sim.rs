//! The session simulator: one [`InspectCore`] between an in-memory client
//! and upstream (plaintext, or real rustls peers on either side), with
//! virtual time. `drive()` moves bytes until nothing moves; `step()` jumps
//! to the core's next deadline and fires it. Deterministic: no socket, no
//! thread, no wall clock.

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use rustls::{ClientConnection, Connection, ServerConnection};

use crate::buffer::{BufPool, ByteBuf};
use crate::config::Timeouts;
use crate::core::clock::Deadline;
use crate::core::closing::{ClosingCore, Next};
use crate::core::inspect::{InspectCore, Parts, Setup, Stop};
use crate::core::link::Link;
use crate::core::mem::MemPort;
use crate::lifecycle::CloseReason;
use crate::policy::RequestRules;
use crate::protocol::http1::{ExchangeConfig, Mode, Record};
use crate::target::{Host, Target};
use crate::tls::layer::{LayerLimits, TlsLayer};
use crate::tls::tests::Fixture;
use crate::tls::wire::{Rx, RX_CHUNK};
use crate::tls::ServerConfigs;

/// The origin every simulated session goes to.
pub(super) const ORIGIN: &str = "origin.test";

/// A peer: what it sends goes through its TLS, if it speaks TLS.
pub(super) struct Peer {
    tls: Option<Connection>,
    /// Plaintext it received.
    pub(super) got: Vec<u8>,
    /// Plaintext still to send.
    pending: Vec<u8>,
    /// TLS only: the proxy's close_notify arrived.
    pub(super) close_notify: bool,
}

impl Peer {
    fn plain() -> Peer {
        Peer {
            tls: None,
            got: Vec::new(),
            pending: Vec::new(),
            close_notify: false,
        }
    }

    fn tls(conn: Connection) -> Peer {
        Peer {
            tls: Some(conn),
            ..Peer::plain()
        }
    }

    /// A peer that sends nothing more and reads nothing.
    fn mute() -> Peer {
        Peer::plain()
    }

    /// The peer's TLS handshake has finished (always, for plaintext).
    pub(super) fn handshaken(&self) -> bool {
        self.tls.as_ref().is_none_or(|c| !c.is_handshaking())
    }

    /// Moves bytes between the peer and its side's transport; whether
    /// anything moved.
    fn trade(&mut self, port: &mut MemPort) -> bool {
        let out = port.take();
        let mut moved = !out.is_empty();
        match &mut self.tls {
            None => {
                self.got.extend_from_slice(&out);
                if !self.pending.is_empty() {
                    port.deliver(&self.pending);
                    self.pending.clear();
                    moved = true;
                }
            }
            Some(conn) => {
                let mut input = &out[..];
                let mut buf = [0u8; 16 * 1024];
                loop {
                    if !input.is_empty() {
                        conn.read_tls(&mut input).expect("the peer reads TLS");
                        conn.process_new_packets()
                            .expect("the proxy speaks valid TLS");
                    }
                    // What it decrypted, before more TLS (rustls holds
                    // only so much plaintext).
                    loop {
                        match conn.reader().read(&mut buf) {
                            Ok(0) => {
                                self.close_notify = true;
                                break;
                            }
                            Ok(n) => {
                                self.got.extend_from_slice(&buf[..n]);
                                moved = true;
                            }
                            Err(_) => break,
                        }
                    }
                    if input.is_empty() {
                        break;
                    }
                }
                if !self.pending.is_empty() {
                    // As much as rustls buffers (64 KiB): the rest waits
                    // for its records to be taken.
                    let n = conn.writer().write(&self.pending).unwrap();
                    self.pending.drain(..n);
                }
                let mut wire = Vec::new();
                while conn.wants_write() {
                    conn.write_tls(&mut wire).unwrap();
                }
                if !wire.is_empty() {
                    port.deliver(&wire);
                    moved = true;
                }
            }
        }
        moved
    }
}

/// How a simulated session is set up.
pub(super) struct Options {
    pub(super) mode: Mode,
    pub(super) rules: Option<Arc<RequestRules>>,
    pub(super) timeouts: Timeouts,
    pub(super) idle: Option<Duration>,
    /// The proxy terminates the client's TLS.
    pub(super) client_tls: bool,
    /// The proxy speaks TLS to the upstream.
    pub(super) upstream_tls: bool,
    /// The upstream never answers a TLS handshake.
    pub(super) upstream_mute: bool,
    /// The proxy's own reply, first to the client (a CONNECT's 200).
    pub(super) reply: Vec<u8>,
    /// TLS goes to the (in-memory) kernel after the handshakes.
    pub(super) ktls: bool,
}

impl Options {
    /// A plaintext inspected tunnel to the origin, default timeouts but
    /// round numbers: handshake 10 s, response 30 s, half-close 60 s.
    pub(super) fn tunnel() -> Options {
        let timeouts = Timeouts {
            handshake: Duration::from_secs(10),
            connect: Duration::from_secs(10),
            response: Duration::from_secs(30),
            half_close: Duration::from_secs(60),
            ..Timeouts::default()
        };
        Options {
            mode: Mode::Tunnel {
                target: origin(),
                tls: false,
            },
            rules: None,
            timeouts,
            idle: None,
            client_tls: false,
            upstream_tls: false,
            upstream_mute: false,
            reply: Vec::new(),
            ktls: false,
        }
    }

    /// Terminated TLS on both sides.
    pub(super) fn terminated() -> Options {
        Options {
            mode: Mode::Tunnel {
                target: Target::new(ORIGIN, 443).unwrap(),
                tls: true,
            },
            client_tls: true,
            upstream_tls: true,
            ..Options::tunnel()
        }
    }
}

pub(super) fn origin() -> Target {
    Target::new(ORIGIN, 80).unwrap()
}

/// The simulator; see the module docs.
pub(super) struct Session {
    core: Option<InspectCore>,
    /// Virtual time, and when the session began.
    pub(super) now: Instant,
    start: Instant,
    pub(super) client: Peer,
    pub(super) upstream: Peer,
    pub(super) cport: MemPort,
    pub(super) uport: MemPort,
    upstream_mute: bool,
    /// How the core stopped, and what it left.
    pub(super) stop: Option<Stop>,
    pub(super) parts: Option<Parts>,
    pub(super) records: Vec<Record>,
    /// Payload relayed (client to upstream, upstream to client).
    pub(super) relayed: (usize, usize),
    /// Core calls that yielded at their round limit.
    pub(super) yields: usize,
    /// The close under way after a [`Stop::Closed`].
    pub(super) closing: Option<Closing>,
    /// How the close ended: the reason, and whether the client was reset.
    pub(super) closed: Option<(CloseReason, bool)>,
    close_timeout: Duration,
    _fixture: Option<Fixture>,
}

impl Session {
    pub(super) fn new(options: Options) -> Session {
        let now = Instant::now();
        let needs_tls = options.client_tls || options.upstream_tls;
        let fixture = needs_tls.then(Fixture::new);
        let host = Host::Domain(ORIGIN.into());
        let leaf = |f: &Fixture| ServerConfigs::new().for_leaf(f.minter.mint(&host).unwrap().key);
        let offload = match options.ktls {
            true => [
                crate::tls::ktls::TLS_CIPHER_AES_GCM_128,
                crate::tls::ktls::TLS_CIPHER_AES_GCM_256,
                crate::tls::ktls::TLS_CIPHER_CHACHA20_POLY1305,
            ]
            .into_iter()
            .fold(crate::tls::ktls::Support::NONE, |s, c| s.with(c)),
            false => crate::tls::ktls::Support::NONE,
        };
        let (client_link, client) = match &fixture {
            Some(f) if options.client_tls => {
                let server = ServerConnection::new(leaf(f)).unwrap();
                let layer = TlsLayer::server(server, Rx::new(RX_CHUNK), LayerLimits::default());
                let name = ServerName::try_from(ORIGIN).unwrap();
                let peer = ClientConnection::new(f.clients().config(), name).unwrap();
                (Link::tls_offloading(layer, offload), Peer::tls(peer.into()))
            }
            _ => (Link::Plain, Peer::plain()),
        };
        let (upstream_link, upstream) = match &fixture {
            Some(f) if options.upstream_tls => {
                let layer =
                    TlsLayer::client(f.clients().config(), &host, LayerLimits::default()).unwrap();
                let peer = ServerConnection::new(leaf(f)).unwrap();
                (Link::tls_offloading(layer, offload), Peer::tls(peer.into()))
            }
            _ => (Link::Plain, Peer::plain()),
        };
        let setup = Setup {
            id: 1,
            exchange: ExchangeConfig {
                rules: crate::core::verdicts::judge(options.rules),
                max_head_bytes: 8 * 1024,
                ..ExchangeConfig::new(options.mode)
            },
            timeouts: options.timeouts,
            idle: options.idle,
            buffer: 16 * 1024,
        };
        let mut pool = BufPool::new(16 * 1024, 4);
        let core = InspectCore::new(
            setup,
            client_link,
            upstream_link,
            &[],
            &options.reply,
            &mut pool,
            now,
        );
        Session {
            core: Some(core),
            now,
            start: now,
            client,
            upstream,
            cport: MemPort::roomy(),
            uport: MemPort::roomy(),
            upstream_mute: options.upstream_mute,
            stop: None,
            parts: None,
            records: Vec::new(),
            relayed: (0, 0),
            yields: 0,
            closing: None,
            closed: None,
            close_timeout: options.timeouts.close,
            _fixture: fixture,
        }
    }

    /// The core, while it runs.
    pub(super) fn core(&mut self) -> &mut InspectCore {
        self.core.as_mut().expect("the core has stopped")
    }

    /// Time since the session began.
    pub(super) fn elapsed(&self) -> Duration {
        self.now - self.start
    }

    pub(super) fn client_sends(&mut self, bytes: impl AsRef<[u8]>) {
        self.client.pending.extend_from_slice(bytes.as_ref());
    }

    pub(super) fn upstream_sends(&mut self, bytes: impl AsRef<[u8]>) {
        self.upstream.pending.extend_from_slice(bytes.as_ref());
    }

    /// The client sends its ClientHello, then nothing more, and reads nothing.
    pub(super) fn client_stalls_after_hello(&mut self) {
        self.client.trade(&mut self.cport);
        self.client = Peer::mute();
    }

    /// The client's FIN (after what it sent).
    pub(super) fn client_fin(&mut self) {
        self.drive();
        self.cport.fin = true;
    }

    /// The upstream's FIN (after what it sent).
    pub(super) fn upstream_fin(&mut self) {
        self.drive();
        self.uport.fin = true;
    }

    /// The upstream's TLS close_notify (after what it sent).
    pub(super) fn upstream_close_notify(&mut self) {
        if let Some(conn) = &mut self.upstream.tls {
            conn.send_close_notify();
        }
        self.drive();
    }

    /// The upstream updates its TLS keys (a TLS 1.3 KeyUpdate).
    pub(super) fn upstream_updates_keys(&mut self) {
        if let Some(conn) = &mut self.upstream.tls {
            conn.refresh_traffic_keys().unwrap();
        }
        self.drive();
    }

    /// The client resets.
    pub(super) fn client_reset(&mut self) {
        self.cport.reset = true;
    }

    /// The upstream's socket reports an error and nothing readable (an
    /// error event alone).
    pub(super) fn upstream_error_event(&mut self) {
        self.uport.error_only = true;
    }

    /// The upstream resets.
    pub(super) fn upstream_reset(&mut self) {
        self.uport.reset = true;
    }

    /// What the client received, as text.
    pub(super) fn client_text(&self) -> String {
        String::from_utf8_lossy(&self.client.got).into_owned()
    }

    /// What the upstream received, as text.
    pub(super) fn upstream_text(&self) -> String {
        String::from_utf8_lossy(&self.upstream.got).into_owned()
    }

    /// How the session ended, if it did: the close reason the shell would log.
    pub(super) fn reason(&self) -> Option<CloseReason> {
        if let Some((reason, _)) = self.closed {
            return Some(reason);
        }
        match self.stop.as_ref()? {
            Stop::Closed { reason, .. } | Stop::Done(reason) => Some(*reason),
            Stop::ClientGone(_) => Some(CloseReason::ClientGone),
            Stop::Upgraded | Stop::Switch(..) | Stop::WrongProtocol(..) => None,
        }
    }

    /// Moves bytes until nothing moves (or the core stops), at this instant.
    pub(super) fn drive(&mut self) {
        for _ in 0..10_000 {
            if self.stop.is_some() {
                return self.drive_closing();
            }
            let mut moved = self.client.trade(&mut self.cport);
            if self.upstream_mute {
                moved |= !self.uport.take().is_empty();
            } else {
                moved |= self.upstream.trade(&mut self.uport);
            }
            let before = self.cport.read_total + self.uport.read_total;
            let core = self.core.as_mut().unwrap();
            let result = core.pump(self.now, &mut self.cport, &mut self.uport);
            self.account();
            moved |= self.cport.read_total + self.uport.read_total > before;
            moved |= !self.cport.outbox.is_empty() || !self.uport.outbox.is_empty();
            if let Err(stop) = result {
                self.stopped(stop);
                return;
            }
            if !moved {
                return;
            }
        }
        panic!("the session never settles");
    }

    /// The core's next deadline (none: it waits for bytes alone).
    pub(super) fn deadline(&self) -> Option<Instant> {
        if let Some(c) = &self.closing {
            return Some(c.core.poll_timeout());
        }
        self.core.as_ref()?.poll_timeout(&self.cport)
    }

    /// Jumps to the core's next deadline and fires it, then drives. False
    /// when there is none (or the core stopped).
    pub(super) fn step(&mut self) -> bool {
        self.drive();
        let Some(due) = self.deadline() else {
            return false;
        };
        self.now = self.now.max(due);
        self.fire();
        true
    }

    /// Lets `d` of virtual time pass, firing every deadline on the way.
    pub(super) fn elapse(&mut self, d: Duration) {
        let until = self.now + d;
        self.drive();
        while let Some(due) = self.deadline().filter(|&due| due <= until) {
            self.now = self.now.max(due);
            self.fire();
        }
        if self.stop.is_none() || self.closing.is_some() {
            self.now = until;
        }
    }

    /// Fires the deadline due now. A deadline that is still due after it
    /// fired would wake the reactor in a loop: a spin, which fails the test.
    fn fire(&mut self) {
        if let Some(mut c) = self.closing.take() {
            let closed = c
                .core
                .handle_timeout(self.now, &mut c.link, &mut self.cport);
            let closed = closed.expect("the close timer fires at its deadline");
            self.closed = Some((closed.reason, closed.abort));
            return;
        }
        let core = self.core.as_mut().unwrap();
        match core.handle_timeout(self.now, &self.cport) {
            Ok(()) => self.drive(),
            Err(stop) => {
                self.account();
                self.stopped(stop);
            }
        }
        if let Some(due) = self.deadline() {
            assert!(
                due > self.now,
                "the deadline at {:?} fired and is still due: a timer spin",
                self.elapsed()
            );
        }
    }

    fn account(&mut self) {
        let core = self.core.as_mut().unwrap();
        self.records.extend(core.take_records());
        let (up, down) = core.take_relayed();
        self.relayed.0 += up;
        self.relayed.1 += down;
        if core.yielded() {
            self.yields += 1;
        }
    }

    /// The core stopped. A close goes on as the shell's does: the real
    /// [`ClosingCore`] flushes what is owed to the client, then FINs and
    /// lingers (or resets), under the close timer.
    fn stopped(&mut self, stop: Stop) {
        let mut parts = self.core.take().unwrap().into_parts();
        if let Stop::Closed { reason, abort, .. } = &stop {
            let owed = std::mem::replace(&mut parts.cout, ByteBuf::with_capacity(0));
            let owed = (!owed.is_empty()).then_some(owed);
            let deadline = Deadline::after(self.now, self.close_timeout);
            let core = if *abort {
                ClosingCore::abort(owed, *reason, parts.own, deadline)
            } else {
                ClosingCore::graceful(owed, *reason, parts.own, deadline)
            };
            let link = std::mem::replace(&mut parts.client, Link::Plain);
            self.closing = Some(Closing {
                core,
                link,
                stage_seen: "",
            });
        }
        if let Stop::WrongProtocol(bytes, _) = &stop {
            // The shell answers a plaintext client with these bytes as they are.
            self.client.got.extend_from_slice(bytes);
        }
        self.stop = Some(stop);
        self.parts = Some(parts);
        self.drive_closing();
    }

    /// Runs the close until it waits, as the shell would on each readiness.
    fn drive_closing(&mut self) {
        for _ in 0..10_000 {
            let Some(c) = self.closing.as_mut() else {
                return;
            };
            let before = self.cport.read_total;
            let next = c.core.pump(&mut c.link, &mut self.cport);
            self.relayed.1 += c.core.take_relayed();
            let mut moved = self.client.trade(&mut self.cport);
            moved |= self.cport.read_total > before;
            match next {
                Next::Close { reason, abort } => {
                    self.closing = None;
                    self.closed = Some((reason, abort));
                    return;
                }
                Next::Again => {}
                // A new sub-stage (flush, then linger) is driven again.
                Next::Wait if moved || c.core.stage() != c.stage_seen => {
                    c.stage_seen = c.core.stage();
                }
                Next::Wait => return,
            }
        }
        panic!("the close never settles");
    }
}

/// The close after the core stopped: the survivor (the client) and the
/// close timer.
pub(super) struct Closing {
    pub(super) core: ClosingCore<ByteBuf>,
    link: Link,
    stage_seen: &'static str,
}
