//! The session state machine: one variant per phase, each owning what that
//! phase needs. Handlers consume the state and return the next one.
//!
//! ```text
//! Handshake ──> Resolving ──> Connecting ──> Established ──> Done
//!                   ^              │                ^
//!                   │              └──> Inspect ────┘ (101: raw from here)
//!                   └── forward proxy, next host ──┘
//!     │             │              │               │
//!     └─────────────┴──────────────┴───────────────┴──> Closing ──> Done
//! ```

use super::closing::Closing;
use super::connect::{Connecting, Resolving};
use super::handshake::Handshake;
use super::inspect::Inspect;
use super::tunnel::Tunnel;
use super::Conn;
use crate::reactor::Core;
use crate::stats::{CloseReason, Phase};

pub(crate) enum State {
    /// Reading the client's CONNECT or SOCKS5 request.
    Handshake(Handshake),
    /// Waiting for DNS.
    Resolving(Resolving),
    /// A non-blocking connect is in flight.
    Connecting(Connecting),
    /// Relaying both ways.
    Established(Tunnel),
    /// Relaying HTTP/1.1 message by message (inspection, forward proxy).
    /// Boxed: its four buffers would otherwise size every slab slot.
    Inspect(Box<Inspect>),
    /// Flushing what is owed to the surviving side, then closing.
    Closing(Closing),
    /// Torn down; the reactor reaps the slot at the end of this iteration.
    Done(CloseReason),
}

impl State {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            State::Handshake(_) => "Handshake",
            State::Resolving(_) => "Resolving",
            State::Connecting(_) => "Connecting",
            State::Established(_) => "Established",
            State::Inspect(_) => "Inspect",
            State::Closing(_) => "Closing",
            State::Done(_) => "Done",
        }
    }

    pub(crate) fn phase(&self) -> Option<Phase> {
        match self {
            // A client past a limit is on its way out, not a pending handshake.
            State::Handshake(h) if h.is_refusing() => Some(Phase::Closing),
            State::Handshake(_) => Some(Phase::Handshake),
            State::Resolving(_) => Some(Phase::Resolving),
            State::Connecting(_) => Some(Phase::Connecting),
            State::Established(_) | State::Inspect(_) => Some(Phase::Established),
            State::Closing(_) => Some(Phase::Closing),
            State::Done(_) => None,
        }
    }

    /// Acts on the readiness the session's sockets have reported.
    pub(crate) fn drive(self, conn: &mut Conn, core: &mut Core) -> State {
        match self {
            State::Handshake(h) => h.drive(conn, core),
            State::Resolving(r) => r.drive(conn, core),
            State::Connecting(c) => c.drive(conn, core),
            State::Established(t) => t.drive(conn, core),
            State::Inspect(i) => i.drive(conn, core),
            State::Closing(c) => c.drive(conn, core),
            done @ State::Done(_) => done,
        }
    }

    /// The state's deadline passed.
    pub(crate) fn on_timer(self, conn: &mut Conn, core: &mut Core) -> State {
        match self {
            State::Handshake(_) => State::Done(CloseReason::HandshakeTimeout),
            State::Resolving(r) => r.on_timeout(conn, core),
            State::Connecting(c) => c.on_timeout(conn, core),
            State::Established(t) => t.on_timer(conn, core),
            State::Inspect(i) => i.on_timer(conn, core),
            State::Closing(c) => c.on_timeout(conn),
            done @ State::Done(_) => done,
        }
    }
}
