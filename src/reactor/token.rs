//! Which `mio::Token` means what.
//!
//! Sessions use the low token space: slab key `k` owns the four tokens
//! `4k + i`: `i = 0` its client's socket, `i = 2` a UDP association's
//! client-facing relay socket, and `i = 1` and `i = 3` its upstream socket,
//! which takes them in turn: each new upstream socket of a session (a
//! forward proxy's request for another host, Vetting's switch to the name a
//! first flight carried, the next address after a failed connect) registers
//! under the one the socket before it did not use (its generation; see
//! `session::Conn::register_upstream`). A readiness event the old socket
//! raised in the poll batch that dropped it still carries the old token,
//! and the session ignores it rather than take it for the new socket's (a
//! reset read as the new connect failing, a FIN as the new upstream
//! finishing). Two generations are enough: such an event is only ever in
//! the batch that dropped its socket, and a socket registered during a
//! batch raises nothing in it, so none is dropped in it for a third to be
//! dialled. Decoding is a shift and a mask.
//!
//! Reserved tokens count down from `usize::MAX`: the waker, the admin
//! listener, [`ADMIN_SLOTS`] admin connections (the control fd among them),
//! then the proxy listeners. Slab keys stay at most [`MAX_KEY`], so session
//! tokens stay in the lower half and never meet them.

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

/// The largest slab key a session may have: its tokens stay below
/// `usize::MAX / 2`, far from the reserved ones at the top (a slab that
/// large would not fit in memory).
pub(crate) const MAX_KEY: usize = usize::MAX >> 3;

/// Tokens per session key: see the module's description.
const SHIFT: u32 = 2;

/// A session's client socket.
pub(crate) const fn client(key: usize) -> Token {
    debug_assert!(key <= MAX_KEY);
    Token(key << SHIFT)
}

/// A session's upstream socket of generation `gen` (0 or 1).
pub(crate) const fn upstream(key: usize, gen: usize) -> Token {
    debug_assert!(key <= MAX_KEY && gen < 2);
    Token(key << SHIFT | gen << 1 | 1)
}

/// A session's UDP relay socket.
pub(crate) const fn relay(key: usize) -> Token {
    debug_assert!(key <= MAX_KEY);
    Token(key << SHIFT | 2)
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
        let key = t >> SHIFT;
        match t & 3 {
            0 => Owner::Session(key, Side::Client),
            2 => Owner::Relay(key),
            // Either generation: the session tells its current one.
            _ => Owner::Session(key, Side::Upstream),
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
        let mut seen = std::collections::HashSet::new();
        for k in [0, 1, 2, 3, 77, 100_000, MAX_KEY - 1, MAX_KEY] {
            assert_eq!(owner(client(k), 3), Owner::Session(k, Side::Client));
            for gen in [0, 1] {
                assert_eq!(
                    owner(upstream(k, gen), 3),
                    Owner::Session(k, Side::Upstream)
                );
            }
            assert_eq!(owner(relay(k), 3), Owner::Relay(k));
            // Four tokens of its own: none another key's, or another socket's.
            for t in [client(k), upstream(k, 0), upstream(k, 1), relay(k)] {
                assert!(seen.insert(t), "{t:?} twice");
            }
        }
    }

    #[test]
    fn a_new_upstream_socket_takes_the_other_token() {
        for k in [0, 5, MAX_KEY] {
            assert_ne!(upstream(k, 0), upstream(k, 1));
        }
        // Key 0's are what the session tests' harness registers under.
        assert_eq!(
            [client(0), upstream(0, 0), relay(0), upstream(0, 1)],
            [Token(0), Token(1), Token(2), Token(3)]
        );
    }

    #[test]
    fn session_tokens_never_reach_the_reserved_ones() {
        // The highest token of the highest key, under the lowest reserved
        // token with far more listeners than any configuration has.
        let top = upstream(MAX_KEY, 1);
        let listeners = 1 << 20;
        assert!(top < listener(listeners - 1), "{top:?}");
        assert_eq!(
            owner(top, listeners),
            Owner::Session(MAX_KEY, Side::Upstream)
        );
        assert_eq!(owner(relay(MAX_KEY), listeners), Owner::Relay(MAX_KEY));
    }
}
