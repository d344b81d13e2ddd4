//! The session state machine: one variant per state, each owning what that
//! state needs, sockets included. Handlers consume the state and return the
//! next one; [`super::Session::step`] enters it.
//!
//! ```text
//! Handshake ──┬──> Resolving (dns, pins) ──> Connecting ──┬──> Passthrough
//!             └─ an address literal ─────────────^        ├──> Inspect ──101──> Passthrough
//!                (unless it waits for pins)               │       └─ forward proxy, next host ─> Resolving
//!                                                         ├─(tls = terminate)─> Securing ──> Inspect
//!                                                         └─(raw, on a port an inspecting rule covers)─> Vetting ──> Passthrough
//!                                                                  (its first flight names an inspected host) └──> Resolving
//! (Handshake, Resolving, Connecting, Securing, Vetting and Inspect are
//! the names of one variant, `Machine`, run by one core, which also
//! answers each refusal and closes the client after an exchange, named
//! `Closing` then; a raw tunnel, from the start or after a 101, leaves it
//! for Passthrough.)
//! a raw tunnel's side gone (Passthrough) ──> Closing ──> Done
//! a tunnel finished, the client gone (any state) ───> Done
//! ```
//!
//! Sub-stages (`Handshake(authenticating)`, `Resolving(pins)`,
//! `Inspect(awaiting-response)`, ...) are part of a state's [`Label`], and a
//! change of label is logged by `step` like a change of state. Most states
//! return to `step` at each sub-stage change, so each is logged. Inspect's
//! and Passthrough's sub-stages are derived from their fields instead
//! (whether a response is due, which directions are open), and one call may
//! pass through several (a whole request and its response inside one pump:
//! `http`, `awaiting-response`, `http`; both EOFs read in one call): for
//! those two, what is logged is the net change over the call.

use std::fmt;
use std::time::Instant;

use mio::event::Event;

use super::associate::Associate;
use super::closing::Closing;
use super::conn::Conn;
use super::ctx::Ctx;
use super::machine::Machine;
use super::passthrough::Passthrough;
use crate::lifecycle::{CloseReason, Phase, Side};

pub(crate) enum State {
    /// The session machine: reading the client's CONNECT, SOCKS5 or
    /// forward-proxy request (named `Handshake`), waiting for DNS
    /// (`Resolving`), a non-blocking connect in flight (`Connecting`), then,
    /// for a raw tunnel to a port an inspecting rule covers, the reply out
    /// and the client's first flight in and checked for a name it fronts
    /// for (`Vetting`), or, for a terminated one, the reply out and the
    /// ClientHello in (`Securing`); relaying HTTP/1.1 message by message
    /// (`Inspect`: inspection, the forward proxy); a refusal's or an
    /// exchange's last bytes out, then the FIN and the linger (`Closing`).
    /// One core runs them.
    Machine(Machine),
    /// Raw relaying both ways (spliced on Linux).
    Passthrough(Passthrough),
    /// A SOCKS5 UDP association: relaying datagrams while its TCP
    /// control connection lasts. Boxed: its tables would size every slot.
    Associate(Box<Associate>),
    /// Flushing what is owed to the surviving side of a raw tunnel, then
    /// closing (the session machine closes its own).
    Closing(Closing),
    /// Torn down; the reactor reaps the slot at the end of this iteration.
    Done(CloseReason),
}

impl State {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            State::Machine(m) => m.name(),
            State::Passthrough(_) => "Passthrough",
            State::Associate(_) => "Associate",
            State::Closing(_) => "Closing",
            State::Done(_) => "Done",
        }
    }

    /// The sub-stage within the state, where it has one.
    pub(crate) fn stage(&self) -> Option<&'static str> {
        match self {
            State::Machine(m) => Some(m.stage()),
            State::Closing(c) => Some(c.stage()),
            State::Passthrough(p) => Some(p.stage()),
            State::Done(reason) => Some(reason.as_str()),
            State::Associate(a) => Some(a.stage()),
        }
    }

    /// Name and sub-stage, compared to see whether a step changed anything
    /// worth logging (no allocation on the hot path).
    pub(crate) fn label(&self) -> Label {
        Label(self.name(), self.stage())
    }

    pub(crate) fn phase(&self) -> Option<Phase> {
        match self {
            // A client past a limit is on its way out, not a pending handshake.
            State::Machine(m) => Some(m.phase()),
            State::Passthrough(_) | State::Associate(_) => Some(Phase::Established),
            State::Closing(_) => Some(Phase::Closing),
            State::Done(_) => None,
        }
    }

    /// The socket of `side`, if this state owns one.
    pub(crate) fn endpoint(&mut self, side: Side) -> Option<&mut super::endpoint::Endpoint> {
        match self {
            State::Machine(m) => m.endpoint(side),
            State::Passthrough(p) => Some(p.endpoint(side)),
            State::Closing(c) => c.endpoint(side),
            State::Associate(a) => (side == Side::Client).then(|| a.control()),
            State::Done(_) => None,
        }
    }

    /// The state's deadline where its core keeps it; `None` for the
    /// states whose clocks the shell sets as they go (a tunnel's idle
    /// clock, an inspected session's, an association's).
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        match self {
            State::Machine(m) => m.poll_timeout(),
            State::Closing(c) => Some(c.poll_timeout()),
            _ => None,
        }
    }

    /// Folds a readiness event into the socket of `side`, if this state owns
    /// one. Returns whether it did.
    pub(crate) fn absorb(&mut self, side: Side, ev: &Event) -> bool {
        if let (State::Associate(a), Side::Upstream) = (&mut *self, side) {
            return a.absorb_out(ev);
        }
        match self.endpoint(side) {
            Some(ep) => {
                ep.absorb(ev);
                true
            }
            None => false,
        }
    }

    /// Acts on the readiness the session's sockets have reported.
    pub(crate) fn drive(self, conn: &mut Conn, ctx: &mut Ctx) -> State {
        match self {
            State::Machine(m) => m.drive(conn, ctx),
            State::Passthrough(p) => p.drive(conn, ctx),
            State::Closing(c) => c.drive(conn, ctx),
            State::Associate(a) => a.drive(conn, ctx),
            done @ State::Done(_) => done,
        }
    }

    /// The state's deadline passed.
    pub(crate) fn on_timer(self, conn: &mut Conn, ctx: &mut Ctx) -> State {
        match self {
            State::Machine(m) => m.on_timeout(conn, ctx),
            State::Passthrough(p) => p.on_timer(conn, ctx),
            State::Closing(c) => c.on_timeout(ctx),
            State::Associate(a) => a.on_timer(conn, ctx),
            done @ State::Done(_) => done,
        }
    }
}

/// A state's name and sub-stage, displayed `Handshake(socks5-auth)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Label(&'static str, Option<&'static str>);

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)?;
        match self.1 {
            Some(stage) => write!(f, "({stage})"),
            None => Ok(()),
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.label().fmt(f)
    }
}
