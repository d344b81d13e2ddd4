//! Making room when accept runs out of file descriptors: which sessions
//! to close, in the stated order (docs/limits.md, "Guarantees and limits").
//!
//! First the sessions being refused (they only wait to deliver a 503 or a
//! SOCKS5 failure), then the pending handshakes of the heaviest client (the
//! one with the most sessions among those with a handshake pending), oldest
//! first within each. Established tunnels are never shed.

use crate::client::ClientKey;

/// A live session as shedding sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Candidate {
    /// Its slab key.
    pub(crate) key: usize,
    /// Its id: ids grow with every accept, so a smaller id is older.
    pub(crate) id: u64,
    pub(crate) client: ClientKey,
    /// Counted by admission (false: being refused).
    pub(crate) admitted: bool,
    /// Still in its handshake.
    pub(crate) handshaking: bool,
}

/// Up to `n` slab keys to close, in shedding order.
pub(crate) fn victims(
    sessions: impl Iterator<Item = Candidate>,
    heaviest: Option<ClientKey>,
    n: usize,
) -> Vec<usize> {
    let mut refusing = Vec::new();
    let mut heavy = Vec::new();
    for c in sessions {
        if !c.admitted {
            refusing.push(c);
        } else if c.handshaking && Some(c.client) == heaviest {
            heavy.push(c);
        }
    }
    refusing.sort_by_key(|c| c.id);
    heavy.sort_by_key(|c| c.id);
    refusing
        .into_iter()
        .chain(heavy)
        .take(n)
        .map(|c| c.key)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(key: usize, id: u64, uid: u32, admitted: bool, handshaking: bool) -> Candidate {
        Candidate {
            key,
            id,
            client: ClientKey::Uid(uid),
            admitted,
            handshaking,
        }
    }

    #[test]
    fn refusals_then_the_heaviest_clients_oldest_handshakes() {
        let heavy = ClientKey::Uid(1);
        let all = [
            cand(0, 50, 1, true, true),
            cand(1, 10, 1, true, false), // established: never shed
            cand(2, 40, 1, true, true),
            cand(3, 5, 2, true, true),   // another client's handshake
            cand(4, 60, 2, false, true), // being refused
            cand(5, 45, 1, true, true),
        ];
        assert_eq!(victims(all.into_iter(), Some(heavy), 2), vec![4, 2]);
        assert_eq!(victims(all.into_iter(), Some(heavy), 9), vec![4, 2, 5, 0]);
        assert_eq!(victims(all.into_iter(), None, 9), vec![4]);
        assert!(victims(all[..2].iter().copied(), Some(heavy), 0).is_empty());
    }
}
