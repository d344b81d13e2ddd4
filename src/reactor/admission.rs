//! Admission: the session and pending-handshake limits, overall and per
//! client, checked at accept. A client past a limit still gets an answer in
//! its own protocol (503, or SOCKS5 reply 0x01); those refusals are capped
//! too, so a flood cannot turn refusing into a resource of its own.

use std::collections::HashMap;

pub(crate) use crate::client::ClientKey;
use crate::config::Limits;

/// Sessions past a limit that are being answered and closed, at most. Each
/// costs one fd until its answer is flushed (bounded by the close timer);
/// past this, new connections close unanswered rather than pile up.
const MAX_REFUSING: usize = 4096;

#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    sessions: usize,
    handshakes: usize,
}

/// What accept should do with a new connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admit {
    /// Serve it; it is counted until it ends.
    Yes,
    /// Answer it with this limit's refusal, then close.
    Refuse(&'static str),
    /// Past every limit including refusals: close without a word.
    Drop,
}

#[derive(Debug, Default)]
pub(crate) struct Admission {
    clients: HashMap<ClientKey, Counts>,
    sessions: usize,
    handshakes: usize,
    refusing: usize,
}

impl Admission {
    pub(crate) fn admit(&mut self, key: ClientKey, limits: &Limits) -> Admit {
        let c = self.clients.get(&key).copied().unwrap_or_default();
        let over = if self.sessions >= limits.max_sessions {
            Some("max_sessions")
        } else if c.sessions >= limits.max_sessions_per_client {
            Some("max_sessions_per_client")
        } else if self.handshakes >= limits.max_pending_handshakes {
            Some("max_pending_handshakes")
        } else if c.handshakes >= limits.max_pending_handshakes_per_client {
            Some("max_pending_handshakes_per_client")
        } else {
            None
        };
        match over {
            None => {
                let c = self.clients.entry(key).or_default();
                c.sessions += 1;
                c.handshakes += 1;
                self.sessions += 1;
                self.handshakes += 1;
                Admit::Yes
            }
            Some(_) if self.refusing >= MAX_REFUSING => Admit::Drop,
            Some(limit) => {
                self.refusing += 1;
                Admit::Refuse(limit)
            }
        }
    }

    /// An admitted session finished its handshake (either way).
    pub(crate) fn left_handshake(&mut self, key: ClientKey) {
        self.handshakes -= 1;
        if let Some(c) = self.clients.get_mut(&key) {
            c.handshakes -= 1;
        }
    }

    /// A session ended; `admitted` says whether [`Admission::admit`] counted it.
    pub(crate) fn ended(&mut self, key: ClientKey, admitted: bool) {
        if !admitted {
            self.refusing -= 1;
            return;
        }
        self.sessions -= 1;
        if let Some(c) = self.clients.get_mut(&key) {
            c.sessions -= 1;
            if c.sessions == 0 {
                self.clients.remove(&key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(sessions: usize, per_client: usize, hs: usize, hs_per_client: usize) -> Limits {
        Limits {
            max_sessions: sessions,
            max_sessions_per_client: per_client,
            max_pending_handshakes: hs,
            max_pending_handshakes_per_client: hs_per_client,
            ..Limits::default()
        }
    }

    #[test]
    fn limits_in_order_and_released() {
        let a = ClientKey::Ip("127.0.0.1".parse().unwrap());
        let b = ClientKey::Ip("127.0.0.2".parse().unwrap());
        let mut adm = Admission::default();
        let l = limits(3, 2, 10, 1);
        assert_eq!(adm.admit(a, &l), Admit::Yes);
        assert_eq!(
            adm.admit(a, &l),
            Admit::Refuse("max_pending_handshakes_per_client")
        );
        adm.left_handshake(a);
        assert_eq!(adm.admit(a, &l), Admit::Yes);
        adm.left_handshake(a);
        assert_eq!(adm.admit(a, &l), Admit::Refuse("max_sessions_per_client"));
        assert_eq!(adm.admit(b, &l), Admit::Yes);
        assert_eq!(adm.admit(b, &l), Admit::Refuse("max_sessions"));
        adm.ended(a, true);
        adm.ended(a, false);
        adm.ended(a, false);
        adm.ended(b, false);
        assert_eq!(adm.refusing, 0);
        assert_eq!(adm.admit(a, &l), Admit::Yes);
    }

    #[test]
    fn refusals_are_capped() {
        let a = ClientKey::Uid(1000);
        let mut adm = Admission::default();
        let l = limits(1, 1, 1, 1);
        assert_eq!(adm.admit(a, &l), Admit::Yes);
        for _ in 0..MAX_REFUSING {
            assert!(matches!(adm.admit(a, &l), Admit::Refuse(_)));
        }
        assert_eq!(adm.admit(a, &l), Admit::Drop);
    }
}
