//! The connect stage's core: which vetted address to dial next, what a
//! failed connect leads to, a parent proxy's handshake over the upstream,
//! and the refusal each way of failing earns.
//!
//! The shell (`session/opening.rs`, through the opening and establishing
//! machines) owns the sockets: it carries out each
//! [`Action::Dial`] (a non-blocking connect, registered with the reactor),
//! reports how it went ([`DialCore::handle`]), lends the upstream to
//! [`DialCore::pump`] while a parent proxy is asked for the tunnel, and asks
//! [`DialCore::handle_timeout`] when the session's timer fires at
//! [`DialCore::poll_timeout`]:
//!
//! ```text
//! while let Some(Action::Dial(addr, ip)) = core.poll_action() {
//!     connect(addr), or core.handle(Input::Failed(e))        // may give up
//! }
//! on readiness: core.handle(Input::Connected | Input::Failed(e)),
//!               then, while asking a parent, core.pump(upstream)
//! Outcome::Open(leftover) -> the next state; Outcome::Unreachable(u) -> a refusal
//! ```
//!
//! Direct, the addresses are tried in turn until one connects. Through a
//! parent proxy, each vetted address is dialled as the parent's address and
//! the parent is then asked for exactly that address; a parent that cannot
//! be reached is the parent's fault, so no other address is tried.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use super::clock::Deadline;
use super::port::Port;
use crate::io::Io;
use crate::protocol::parent::{ParentHandshake, ParentProxy, Progress};

/// What the core asks the shell to do.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Action {
    /// Connect to this address (the destination's, or the parent proxy's),
    /// for this vetted address (the one the access log names).
    Dial(SocketAddr, IpAddr),
}

/// What the shell tells the core about the connect in flight.
#[derive(Debug)]
pub(crate) enum Input {
    /// The connect completed (the socket became writable).
    Connected,
    /// The connect failed, when it was started or later (the socket's error).
    Failed(io::Error),
}

/// Where the connect stands after a call.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Still dialling or asking the parent: wait for the upstream's
    /// readiness, and take the next [`DialCore::poll_action`].
    Working,
    /// The upstream is open. `leftover`: bytes the destination sent behind a
    /// parent's answer, already read (empty when direct).
    Open { leftover: Vec<u8> },
    /// No upstream: how to refuse the client.
    Unreachable(Unreachable),
}

/// Why no upstream was opened, as the refusal needs it.
#[derive(Debug)]
pub(crate) enum Unreachable {
    /// The destination could not be reached: the last connect's error.
    Connect(io::Error),
    /// The parent proxy could not be reached, or refused, or broke its
    /// protocol: why, for the log and the client's `502`.
    Parent(String),
    /// The connect deadline passed, dialling the destination directly.
    Timeout,
}

/// The connect stage; see the module docs.
#[derive(Debug)]
pub(crate) struct DialCore {
    /// The addresses policy vetted, in order; exactly these are dialled.
    addrs: Vec<IpAddr>,
    /// The next of `addrs` to try.
    next: usize,
    /// The destination's port.
    port: u16,
    parent: Option<Arc<ParentProxy>>,
    /// Why the last connect failed.
    last_error: Option<io::Error>,
    stage: Stage,
    /// Every address, and the parent's answer, within this.
    deadline: Deadline,
}

/// How far the connect is.
#[derive(Debug)]
enum Stage {
    /// Nothing in flight: [`DialCore::poll_action`] dials the next address.
    Idle,
    /// A TCP connect in flight (to the destination, or to the parent),
    /// for the vetted address `ip`.
    Tcp { ip: IpAddr },
    /// Asking the parent proxy for a tunnel.
    Parent(ParentHandshake),
    /// Open or unreachable: said once, nothing more to do.
    Done,
}

impl DialCore {
    /// Connects to `port` on one of `addrs` (vetted), directly or through
    /// `parent`, by `deadline`.
    pub(crate) fn new(
        addrs: Vec<IpAddr>,
        port: u16,
        parent: Option<Arc<ParentProxy>>,
        deadline: Deadline,
    ) -> Self {
        DialCore {
            addrs,
            next: 0,
            port,
            parent,
            last_error: None,
            stage: Stage::Idle,
            deadline,
        }
    }

    /// The sub-stage, as the session's state names it: `tcp` or
    /// `parent-proxy`.
    pub(crate) fn stage(&self) -> &'static str {
        match self.stage {
            Stage::Parent(_) => "parent-proxy",
            _ => "tcp",
        }
    }

    /// There is at least one address to dial.
    pub(crate) fn has_addrs(&self) -> bool {
        !self.addrs.is_empty()
    }

    /// A TCP connect is in flight: the shell waits for it to complete or
    /// fail, then says which ([`DialCore::handle`]).
    pub(crate) fn connecting(&self) -> bool {
        matches!(self.stage, Stage::Tcp { .. })
    }

    /// The next connect to start, if one is due. `None` with no connect in
    /// flight and no outcome given means there was no address at all: see
    /// [`DialCore::give_up`].
    pub(crate) fn poll_action(&mut self) -> Option<Action> {
        if !matches!(self.stage, Stage::Idle) {
            return None;
        }
        let ip = *self.addrs.get(self.next)?;
        self.next += 1;
        self.stage = Stage::Tcp { ip };
        // Through a parent: it is asked for exactly the vetted address.
        let addr = match &self.parent {
            Some(p) => p.addr,
            None => SocketAddr::new(ip, self.port),
        };
        Some(Action::Dial(addr, ip))
    }

    /// How the connect in flight went.
    pub(crate) fn handle(&mut self, input: Input) -> Outcome {
        let Stage::Tcp { ip } = self.stage else {
            debug_assert!(false, "no connect in flight");
            return Outcome::Working;
        };
        match input {
            Input::Connected => match &self.parent {
                Some(parent) => {
                    let to = SocketAddr::new(ip, self.port);
                    self.stage = Stage::Parent(ParentHandshake::new(parent, to));
                    Outcome::Working
                }
                None => {
                    self.stage = Stage::Done;
                    Outcome::Open {
                        leftover: Vec::new(),
                    }
                }
            },
            Input::Failed(e) => {
                self.last_error = Some(e);
                self.stage = Stage::Idle;
                // Through a parent, the next address goes through the same
                // parent: it would fail the same way.
                if self.parent.is_none() && self.next < self.addrs.len() {
                    return Outcome::Working;
                }
                Outcome::Unreachable(self.give_up())
            }
        }
    }

    /// No connect succeeded (or none could start): the destination's
    /// fault, or the parent proxy's when there is one (it is the only
    /// address dialled).
    pub(crate) fn give_up(&mut self) -> Unreachable {
        self.stage = Stage::Done;
        let e = self
            .last_error
            .take()
            .unwrap_or_else(|| io::Error::other("no address to connect to"));
        match &self.parent {
            Some(parent) => Unreachable::Parent(format!("cannot connect to {parent}: {e}")),
            None => Unreachable::Connect(e),
        }
    }

    /// Moves the parent proxy's handshake over `upstream`: our request out,
    /// its answer in, until it is answered or nothing can move. Outside the
    /// parent stage, nothing to do.
    pub(crate) fn pump(&mut self, upstream: &mut impl Port) -> Outcome {
        let Stage::Parent(hs) = &mut self.stage else {
            return Outcome::Working;
        };
        let outcome = exchange(hs, upstream);
        if !matches!(outcome, Outcome::Working) {
            self.stage = Stage::Done;
        }
        outcome
    }

    /// The time is `now`: once the connect deadline has passed, the
    /// refusal for the stage it caught.
    pub(crate) fn handle_timeout(&mut self, now: Instant) -> Option<Unreachable> {
        if !self.deadline.passed(now) {
            return None;
        }
        let why = match (&self.parent, &self.stage) {
            // Waiting for its answer, or connecting to it: the parent's delay.
            (Some(parent), Stage::Parent(_)) => {
                Unreachable::Parent(format!("no answer from {parent} in time"))
            }
            (Some(parent), _) => Unreachable::Parent(format!("timed out connecting to {parent}")),
            (None, _) => Unreachable::Timeout,
        };
        self.stage = Stage::Done;
        Some(why)
    }

    /// A reloaded policy: of the addresses not tried yet (vetted under the
    /// old policy), only those `keep` accepts stay, in order. The one in
    /// flight, if any, was tried already.
    pub(crate) fn retain_untried(&mut self, mut keep: impl FnMut(IpAddr) -> bool) {
        let tried = self.next.min(self.addrs.len());
        let mut i = 0;
        // `retain` visits each element once, in order: no second list.
        self.addrs.retain(|&ip| {
            i += 1;
            i <= tried || keep(ip)
        });
    }
}

/// One pump of the parent's handshake; see [`DialCore::pump`].
fn exchange(hs: &mut ParentHandshake, upstream: &mut impl Port) -> Outcome {
    let failed = |why: String| Outcome::Unreachable(Unreachable::Parent(why));
    if upstream.failed() {
        return failed("the parent proxy closed the connection".into());
    }
    loop {
        let pending = !hs.to_send().is_empty();
        upstream.want_read(!pending);
        upstream.want_write(pending);
        if pending {
            if !upstream.can_write() {
                return Outcome::Working;
            }
            match upstream.write(hs.to_send()) {
                Io::Progress(n) => hs.sent(n),
                Io::WouldBlock => return Outcome::Working,
                Io::Eof => return failed("the parent proxy closed the connection".into()),
                Io::PeerGone(e) => return failed(format!("the parent proxy: {e}")),
            }
            continue;
        }
        if !upstream.can_read() {
            return Outcome::Working;
        }
        let mut buf = [0u8; 4096];
        let got = match upstream.read(&mut buf) {
            Io::Progress(n) => &buf[..n],
            Io::WouldBlock => return Outcome::Working,
            Io::Eof => &[][..],
            Io::PeerGone(e) => return failed(format!("the parent proxy: {e}")),
        };
        let eof = got.is_empty();
        match hs.received(got) {
            Progress::NeedMore if eof => {
                return failed("the parent proxy closed the connection before answering".into())
            }
            Progress::NeedMore => {}
            Progress::Open(leftover) => return Outcome::Open { leftover },
            Progress::Failed(why) => return failed(why),
        }
    }
}
