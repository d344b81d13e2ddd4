//! Which `mio::Token` means what.
//!
//! Sessions use the low token space: slab key `k` owns `2k` (client side) and
//! `2k + 1` (upstream side). Reserved tokens count down from `usize::MAX`:
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
    Token(key * 2 + side as usize)
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
        let side = if t % 2 == 0 {
            Side::Client
        } else {
            Side::Upstream
        };
        Owner::Session(t / 2, side)
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
        }
    }
}
