//! One side of a session: its socket, its token, and the readiness seen on it.
//!
//! Sockets are registered once, for both directions, edge-triggered. What we
//! *want* from a side (interest) is decided in user space from buffer state;
//! what the kernel *said* (readiness) is remembered here until a syscall
//! returns WouldBlock. Acting only on `readiness & interest` means no
//! `epoll_ctl` per buffer-full/resume cycle, and an edge is never lost.

use mio::event::Event;
use mio::{Interest, Registry, Token};

use crate::io::Stream;

/// Which side of a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Side {
    /// The sandboxed program that connected to us.
    Client = 0,
    /// The destination we connected to.
    Upstream = 1,
}

impl Side {
    pub(crate) fn other(self) -> Side {
        match self {
            Side::Client => Side::Upstream,
            Side::Upstream => Side::Client,
        }
    }

    pub(crate) fn gone_reason(self) -> crate::stats::CloseReason {
        match self {
            Side::Client => crate::stats::CloseReason::ClientGone,
            Side::Upstream => crate::stats::CloseReason::UpstreamGone,
        }
    }
}

/// A registered socket and what its last readiness edges said.
#[derive(Debug)]
pub(crate) struct Endpoint {
    pub(crate) stream: Stream,
    /// A read may make progress (cleared by WouldBlock).
    pub(crate) readable: bool,
    /// A write may make progress (cleared by WouldBlock).
    pub(crate) writable: bool,
    /// The kernel reported an error on the socket: the peer is gone.
    pub(crate) failed: bool,
}

impl Endpoint {
    /// Registers `stream` for both directions, edge-triggered.
    pub(crate) fn register(
        mut stream: Stream,
        token: Token,
        registry: &Registry,
    ) -> std::io::Result<Endpoint> {
        stream.prepare();
        registry.register(&mut stream, token, Interest::READABLE | Interest::WRITABLE)?;
        Ok(Endpoint {
            stream,
            readable: false,
            writable: false,
            failed: false,
        })
    }

    /// Folds an event into the remembered readiness. Hang-ups count as
    /// readable/writable so the next syscall reports EOF or EPIPE.
    pub(crate) fn absorb(&mut self, ev: &Event) {
        if ev.is_readable() || ev.is_read_closed() {
            self.readable = true;
        }
        if ev.is_writable() || ev.is_write_closed() {
            self.writable = true;
        }
        if ev.is_error() {
            self.failed = true;
        }
    }

    /// Deregisters before the socket is dropped, so no event for this fd can
    /// reach a later owner of the token.
    pub(crate) fn close(mut self, registry: &Registry) {
        let _ = registry.deregister(&mut self.stream);
    }
}
