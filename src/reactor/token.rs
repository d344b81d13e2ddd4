//! Which `mio::Token` means what.
//!
//! Sessions use the low token space: slab key `k` owns `3k` (client side),
//! `3k + 1` (upstream side) and `3k + 2` (a UDP association's
//! client-facing relay socket). Reserved tokens count down from `usize::MAX`:
//! the waker, the admin listener, [`ADMIN_SLOTS`] admin connections (the
//! control fd among them), then the proxy listeners.

use mio::Token;

use crate::lifecycle::Side;

/// Wakes the reactor for control messages and resolver answers.
pub(crate) const WAKER: Token = Token(usize::MAX);
/// The admin endpoint's listener.
pub(crate) const ADMIN_LISTENER: Token = Token(usize::MAX - 1);
/// Tokens reserved for admin connections (and the control fd).
pub(crate) const ADMIN_SLOTS: usize = 16;

/// What a token names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owner {
    Waker,
    AdminListener,
    /// An admin connection, by its slot.
    Admin(usize),
    Listener(usize),
    Session(usize, Side),
    /// A session's UDP relay socket (client-facing), by slab key.
    Relay(usize),
}

/// Admin connection slot `k` (< [`ADMIN_SLOTS`]).
pub(crate) fn admin(k: usize) -> Token {
    debug_assert!(k < ADMIN_SLOTS);
    Token(usize::MAX - 2 - k)
}

pub(crate) fn listener(index: usize) -> Token {
    Token(usize::MAX - 2 - ADMIN_SLOTS - index)
}

pub(crate) fn session(key: usize, side: Side) -> Token {
    Token(key * 3 + side as usize)
}

/// A session's UDP relay socket.
pub(crate) fn relay(key: usize) -> Token {
    Token(key * 3 + 2)
}

pub(crate) fn owner(token: Token, listeners: usize) -> Owner {
    let Token(t) = token;
    let from_top = usize::MAX - t;
    if token == WAKER {
        Owner::Waker
    } else if token == ADMIN_LISTENER {
        Owner::AdminListener
    } else if from_top < 2 + ADMIN_SLOTS {
        Owner::Admin(from_top - 2)
    } else if from_top < 2 + ADMIN_SLOTS + listeners {
        Owner::Listener(from_top - 2 - ADMIN_SLOTS)
    } else {
        match t % 3 {
            0 => Owner::Session(t / 3, Side::Client),
            1 => Owner::Session(t / 3, Side::Upstream),
            _ => Owner::Relay(t / 3),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        assert_eq!(owner(WAKER, 3), Owner::Waker);
        assert_eq!(owner(ADMIN_LISTENER, 3), Owner::AdminListener);
        for k in 0..ADMIN_SLOTS {
            assert_eq!(owner(admin(k), 3), Owner::Admin(k));
        }
        for i in 0..3 {
            assert_eq!(owner(listener(i), 3), Owner::Listener(i));
        }
        for k in [0, 1, 77, 100_000] {
            for side in [Side::Client, Side::Upstream] {
                assert_eq!(owner(session(k, side), 3), Owner::Session(k, side));
            }
            assert_eq!(owner(relay(k), 3), Owner::Relay(k));
        }
    }
}
