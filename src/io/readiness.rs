//! Readiness in user space: what the kernel said about a socket (`event`)
//! and what its owner wants from it (`interest`). The one readiness type:
//! sessions' sockets (`session::endpoint::Endpoint`) and admin connections
//! (`reactor::admin`) both keep theirs in a [`Readiness`].
//!
//! Sockets are registered once, for both directions, edge-triggered, so the
//! kernel reports each edge once. The `event` bits remember an edge until a
//! syscall returns WouldBlock (only the socket's owner clears them, in the
//! method that made the syscall); `interest` follows the owner's buffers.
//! Acting on `event & interest` means no `epoll_ctl` per buffer-full/resume
//! cycle and no lost edge.

use std::fmt;
use std::ops::{BitAnd, BitOr};

/// A set of readiness bits.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Ready(u8);

impl Ready {
    pub(crate) const EMPTY: Ready = Ready(0);
    /// A read may make progress (or report EOF).
    pub(crate) const READABLE: Ready = Ready(1);
    /// A write may make progress (or report the peer gone).
    pub(crate) const WRITABLE: Ready = Ready(2);
    /// The kernel reported an error on the socket: the peer is gone.
    pub(crate) const ERROR: Ready = Ready(4);
    /// The peer finished sending (FIN): once the queue is read, EOF follows.
    pub(crate) const READ_CLOSED: Ready = Ready(8);

    pub(crate) fn contains(self, other: Ready) -> bool {
        self.0 & other.0 == other.0
    }

    pub(crate) fn insert(&mut self, other: Ready) {
        self.0 |= other.0;
    }

    pub(crate) fn remove(&mut self, other: Ready) {
        self.0 &= !other.0;
    }

    /// Sets or clears `bits`.
    pub(crate) fn set(&mut self, bits: Ready, on: bool) {
        if on {
            self.insert(bits);
        } else {
            self.remove(bits);
        }
    }
}

impl BitOr for Ready {
    type Output = Ready;
    fn bitor(self, rhs: Ready) -> Ready {
        Ready(self.0 | rhs.0)
    }
}

impl BitAnd for Ready {
    type Output = Ready;
    fn bitand(self, rhs: Ready) -> Ready {
        Ready(self.0 & rhs.0)
    }
}

impl fmt::Debug for Ready {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = [
            (Ready::READABLE, "R"),
            (Ready::WRITABLE, "W"),
            (Ready::ERROR, "E"),
            (Ready::READ_CLOSED, "C"),
        ];
        if *self == Ready::EMPTY {
            return f.write_str("-");
        }
        for (bit, name) in names {
            if self.contains(bit) {
                f.write_str(name)?;
            }
        }
        Ok(())
    }
}

/// What the kernel reported and what the session wants, for one socket.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Readiness {
    /// Edges seen and not yet used up (cleared by WouldBlock).
    pub(crate) event: Ready,
    /// What the session wants now.
    pub(crate) interest: Ready,
}

impl Readiness {
    /// The bits worth acting on: wanted and reported. An error is always
    /// worth acting on.
    pub(crate) fn ready(&self) -> Ready {
        (self.event & self.interest) | (self.event & Ready::ERROR)
    }

    /// Folds a mio event in. Hang-ups count as readable and writable, so the
    /// next syscall on either side reports EOF or EPIPE.
    pub(crate) fn absorb(&mut self, ev: &mio::event::Event) {
        if ev.is_readable() || ev.is_read_closed() {
            self.event.insert(Ready::READABLE);
        }
        if ev.is_read_closed() {
            self.event.insert(Ready::READ_CLOSED);
        }
        if ev.is_writable() || ev.is_write_closed() {
            self.event.insert(Ready::WRITABLE);
        }
        if ev.is_error() {
            self.event.insert(Ready::ERROR);
        }
    }
}

impl fmt::Debug for Readiness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "event={:?} interest={:?}", self.event, self.interest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_is_event_and_interest_plus_errors() {
        let mut r = Readiness::default();
        r.event.insert(Ready::READABLE | Ready::WRITABLE);
        assert_eq!(r.ready(), Ready::EMPTY, "nothing wanted");
        r.interest.insert(Ready::READABLE);
        assert_eq!(r.ready(), Ready::READABLE);
        r.event.insert(Ready::ERROR);
        assert!(r.ready().contains(Ready::ERROR), "errors are never masked");
        r.interest.set(Ready::READABLE, false);
        assert_eq!(r.ready(), Ready::ERROR);
        assert_eq!(format!("{r:?}"), "event=RWE interest=-");
    }
}
