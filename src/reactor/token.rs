//! Which `mio::Token` means what.
//!
//! Sessions use the low token space: slab key `k` owns `2k` (client side) and
//! `2k + 1` (upstream side). Reserved tokens count down from `usize::MAX`.

use mio::Token;

use crate::lifecycle::Side;

/// Wakes the reactor for control messages and resolver answers.
pub(crate) const WAKER: Token = Token(usize::MAX);

/// What a token names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owner {
    Waker,
    Listener(usize),
    Session(usize, Side),
}

pub(crate) fn listener(index: usize) -> Token {
    Token(usize::MAX - 1 - index)
}

pub(crate) fn session(key: usize, side: Side) -> Token {
    Token(key * 2 + side as usize)
}

pub(crate) fn owner(token: Token, listeners: usize) -> Owner {
    let Token(t) = token;
    if token == WAKER {
        Owner::Waker
    } else if t >= usize::MAX - listeners {
        Owner::Listener(usize::MAX - 1 - t)
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
