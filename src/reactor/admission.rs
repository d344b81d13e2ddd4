//! Admission: the session and pending-handshake limits, overall and per
//! client, checked at accept, and shedding near the open-file limit. A
//! client past a limit still gets an answer in its own protocol (503, or
//! SOCKS5 reply 0x01); those refusals are capped too, so a flood cannot turn
//! refusing into a resource of its own.
//!
//! Near the fd limit, load is shed in a stated order (docs/limits.md, "Guarantees
//! and limits"). Admission counts the descriptors the proxy holds: those
//! open at start, two per admitted session (a handshake holds one, but will
//! hold two), one per refusal being answered. Then:
//! 1. at [`FdBudget::pressure_at`], a new client holding at least the mean
//!    number of sessions per client (the heaviest first; a lone client is
//!    its own mean) is refused with `fd_reserve`; lighter clients still get
//!    in, so no client can lock the others out;
//! 2. at [`FdBudget::silent_at`], refused clients are closed unanswered (an
//!    answer would hold an fd the reserve is keeping);
//! 3. if accept still fails with EMFILE, the reactor closes the oldest
//!    pending handshakes of the heaviest client ([`Admission::heaviest`]).
//!
//! Loopback TCP clients are told apart by uid, which costs two netlink calls
//! per connection. While nothing else reads it (no access lines, no logins)
//! those calls are saved: loopback clients are counted together under
//! [`ClientKey::Loopback`], a pool kept to a quarter of each per-client
//! limit ([`POOL_SHARE`]), and the pool counts against every local client's
//! limits as if it were all theirs, so no uid can pass its limit through it.
//! A connection that would grow the pool past that (or come under fd
//! pressure) is asked for its uid ([`Admit::Identify`]). So one local client
//! can cost another at most a quarter of its limits, never all of them.

use std::collections::HashMap;

pub(crate) use crate::client::ClientKey;
use crate::config::Limits;
use crate::fd_budget::FdBudget;

/// Sessions past a limit that are being answered and closed, at most. Each
/// costs one fd until its answer is flushed (bounded by the close timer);
/// past this, new connections close unanswered rather than pile up.
const MAX_REFUSING: usize = 4096;

/// The unidentified loopback pool holds at most 1/`POOL_SHARE` of each
/// per-client limit.
pub(crate) const POOL_SHARE: usize = 4;

/// The pool grows only while admission knows at most this many clients
/// (each accept into it checks every local one).
const POOL_CLIENTS: usize = 256;

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
    /// Asked for [`ClientKey::Loopback`] with the pool full: find the
    /// client's uid, and ask again under it.
    Identify,
}

#[derive(Debug)]
pub(crate) struct Admission {
    clients: HashMap<ClientKey, Counts>,
    sessions: usize,
    handshakes: usize,
    refusing: usize,
    /// Sessions holding a third fd (UDP associations).
    third_fds: usize,
    fds: FdBudget,
    /// Fds open before any session (listeners, poll, stdio, ...).
    base_fds: usize,
    /// Moves on each time every worker must identify its pooled sessions.
    pool_epoch: u64,
}

impl Admission {
    /// Admission under `fds`, with `base_fds` already open.
    pub(crate) fn new(fds: FdBudget, base_fds: usize) -> Admission {
        Admission {
            clients: HashMap::new(),
            sessions: 0,
            handshakes: 0,
            refusing: 0,
            third_fds: 0,
            fds,
            base_fds,
            pool_epoch: 0,
        }
    }

    /// Counts `base_fds` as open before any session (set once every
    /// worker has opened what it needs).
    pub(crate) fn set_base_fds(&mut self, base_fds: usize) {
        self.base_fds = base_fds;
    }

    /// The fds the proxy holds, as counted (an upper bound for sessions).
    pub(crate) fn held_fds(&self) -> usize {
        self.base_fds + 2 * self.sessions + self.third_fds + self.refusing
    }

    /// An admitted session holds a third fd (until [`Admission::dropped_third_fd`]).
    pub(crate) fn took_third_fd(&mut self) {
        self.third_fds += 1;
    }

    /// A session holding a third fd ended.
    pub(crate) fn dropped_third_fd(&mut self) {
        self.third_fds = self.third_fds.saturating_sub(1);
    }

    /// The fds held are at the pressure threshold: the next admission
    /// could take the last ones below it.
    pub(crate) fn under_pressure(&self) -> bool {
        self.held_fds() + 2 > self.fds.pressure_at()
    }

    /// The open-file limit as read again (after an EMFILE, and at each
    /// accept under pressure: an operator may have raised or lowered it).
    /// The pipe budget was sized for the old limit; the thresholds count
    /// the pipes the new one would allow.
    pub(crate) fn set_fd_limit(&mut self, limit: Option<u64>) {
        self.fds = FdBudget::for_limit(limit);
    }

    pub(crate) fn admit(&mut self, key: ClientKey, limits: &Limits) -> Admit {
        if key == ClientKey::Loopback && !self.pool_has_room(limits) {
            return Admit::Identify;
        }
        let mut c = self.clients.get(&key).copied().unwrap_or_default();
        let own = c.sessions;
        if key.is_local() {
            // Any of the unidentified loopback sessions may be this client's.
            let pool = self.pool();
            c.sessions += pool.sessions;
            c.handshakes += pool.handshakes;
        }
        let held = self.held_fds();
        let over = if self.sessions >= limits.max_sessions {
            Some("max_sessions")
        } else if c.sessions >= limits.max_sessions_per_client {
            Some("max_sessions_per_client")
        } else if self.handshakes >= limits.max_pending_handshakes {
            Some("max_pending_handshakes")
        } else if c.handshakes >= limits.max_pending_handshakes_per_client {
            Some("max_pending_handshakes_per_client")
        } else if self.under_pressure() && self.at_or_above_the_mean(own) {
            // The clients at or above the mean give way; lighter ones
            // (a new one in particular) still get in. The mean is over
            // clients known by name: the pool's sessions are others' (and
            // under pressure the reactor hands them to their owners).
            Some("fd_reserve")
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
            Some(_) if self.refusing >= MAX_REFUSING || held + 1 > self.fds.silent_at() => {
                Admit::Drop
            }
            Some(limit) => {
                self.refusing += 1;
                Admit::Refuse(limit)
            }
        }
    }

    /// Whether a client holding `own` sessions holds at least the mean of
    /// the clients known by name: the pool's sessions are others', so they
    /// count for none (and with every session pooled, no one is above).
    fn at_or_above_the_mean(&self, own: usize) -> bool {
        let pool = self.pool().sessions;
        let known = self.sessions - pool;
        let clients = self.clients.len() - usize::from(pool > 0);
        (known > 0 || pool == 0) && own * clients >= known
    }

    /// Asks every worker to identify its pooled sessions (and count them
    /// under their owners, [`Admission::leave_pool`]) before the next
    /// admission: under fd pressure and before shedding, which weigh
    /// clients. Nothing to do with an empty pool.
    pub(crate) fn identify_pool(&mut self) {
        if self.pool().sessions > 0 {
            self.pool_epoch += 1;
        }
    }

    /// See [`Admission::identify_pool`].
    pub(crate) fn pool_epoch(&self) -> u64 {
        self.pool_epoch
    }

    /// A pooled session was identified as `key`'s: counted under it from
    /// now on (no limit applies: its admission already counted the pool
    /// against every local client).
    pub(crate) fn leave_pool(&mut self, key: ClientKey, handshaking: bool) {
        let Some(c) = self.clients.get_mut(&ClientKey::Loopback) else {
            debug_assert!(false, "a session left a pool that does not count it");
            return;
        };
        {
            c.sessions -= 1;
            if handshaking {
                c.handshakes -= 1;
            }
            if c.sessions == 0 {
                self.clients.remove(&ClientKey::Loopback);
            }
        }
        let c = self.clients.entry(key).or_default();
        c.sessions += 1;
        if handshaking {
            c.handshakes += 1;
        }
    }

    fn pool(&self) -> Counts {
        self.clients
            .get(&ClientKey::Loopback)
            .copied()
            .unwrap_or_default()
    }

    /// One more unidentified loopback session keeps the pool within its
    /// share of the per-client limits, and fds are plentiful (under
    /// pressure, shedding must know who is heaviest).
    fn pool_has_room(&self, limits: &Limits) -> bool {
        let pool = self.pool();
        !self.under_pressure()
            && pool.sessions < limits.max_sessions_per_client / POOL_SHARE
            && pool.handshakes < limits.max_pending_handshakes_per_client / POOL_SHARE
            // Nor a quarter of the sessions the fds hold before pressure: the
            // fd reserve cannot tell whose pooled sessions are, so a client
            // whose tunnels are all pooled would look light under pressure
            // and double up past the reserve, to EMFILE.
            && pool.sessions
                < self.fds.pressure_at().saturating_sub(self.base_fds) / 2 / POOL_SHARE
            // The new session may be any local client's: none may pass its
            // limit through it (one admitted under its uid while the pool was
            // short must not be topped up later). Checked over a short list
            // only: past it, clients are identified.
            && self.clients.len() <= POOL_CLIENTS
            && self.clients.iter().filter(|(k, _)| k.is_local()).all(|(_, c)| {
                c.sessions + pool.sessions < limits.max_sessions_per_client
                    && c.handshakes + pool.handshakes < limits.max_pending_handshakes_per_client
            })
    }

    /// The client with the most sessions among those with a handshake
    /// pending: whose handshakes go first when fds run out.
    ///
    /// The pool comes last: its sessions are others' (before shedding, the
    /// reactor hands them to their owners; another worker's may still be
    /// pooled for a moment).
    pub(crate) fn heaviest(&self) -> Option<ClientKey> {
        self.clients
            .iter()
            .filter(|(_, c)| c.handshakes > 0)
            .max_by_key(|(k, c)| (**k != ClientKey::Loopback, c.sessions))
            .map(|(k, _)| *k)
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
        let mut adm = Admission::new(FdBudget::for_limit(None), 0);
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
        let mut adm = Admission::new(FdBudget::for_limit(None), 0);
        let l = limits(1, 1, 1, 1);
        assert_eq!(adm.admit(a, &l), Admit::Yes);
        for _ in 0..MAX_REFUSING {
            assert!(matches!(adm.admit(a, &l), Admit::Refuse(_)));
        }
        assert_eq!(adm.admit(a, &l), Admit::Drop);
    }

    fn unlimited() -> Limits {
        limits(usize::MAX, usize::MAX, usize::MAX, usize::MAX)
    }

    #[test]
    fn under_fd_pressure_the_heaviest_clients_give_way_first() {
        let a = ClientKey::Uid(65534);
        let b = ClientKey::Uid(0);
        let c = ClientKey::Ip("10.0.0.3".parse().unwrap());
        // 256 fds: 16 pipes, reserve 16; pressure at 192, silence at 208.
        let fds = FdBudget::for_limit(Some(256));
        assert_eq!((fds.pressure_at(), fds.silent_at()), (192, 208));
        let mut adm = Admission::new(fds, 10);
        let l = unlimited();
        let mut a_n = 0;
        while adm.admit(a, &l) == Admit::Yes {
            a_n += 1;
        }
        // A lone client is its own mean: refused once its fds reach pressure.
        assert_eq!(a_n, (192 - 10) / 2);
        assert_eq!(adm.admit(a, &l), Admit::Refuse("fd_reserve"));
        // A lighter client still gets in, while A is refused.
        assert_eq!(adm.admit(b, &l), Admit::Yes);
        assert_eq!(adm.admit(a, &l), Admit::Refuse("fd_reserve"));
        assert_eq!(adm.admit(c, &l), Admit::Yes);
        // Refusals take fds too: past the reserve they go unanswered.
        let mut answered = 3; // the three refusals above
        while adm.admit(a, &l) == Admit::Refuse("fd_reserve") {
            answered += 1;
        }
        assert_eq!(adm.admit(a, &l), Admit::Drop);
        assert_eq!(adm.held_fds(), fds.silent_at());
        assert_eq!(answered, fds.silent_at() - (10 + 2 * (a_n + 2)));
        // Lighter clients are still served.
        assert_eq!(adm.admit(ClientKey::Uid(1000), &l), Admit::Yes);
        assert_eq!(adm.heaviest(), Some(a));
        // As A's sessions end, pressure lifts.
        for _ in 0..a_n {
            adm.left_handshake(a);
            adm.ended(a, true);
        }
        for _ in 0..answered {
            adm.ended(a, false);
        }
        assert!(!adm.under_pressure());
        assert_eq!(adm.admit(a, &l), Admit::Yes);
    }

    #[test]
    fn heaviest_is_among_clients_with_handshakes() {
        let (a, b) = (ClientKey::Uid(1), ClientKey::Uid(2));
        let mut adm = Admission::new(FdBudget::for_limit(None), 0);
        let l = unlimited();
        assert_eq!(adm.heaviest(), None);
        for _ in 0..3 {
            assert_eq!(adm.admit(a, &l), Admit::Yes);
            adm.left_handshake(a);
        }
        assert_eq!(adm.admit(b, &l), Admit::Yes);
        // A has more sessions, but none in its handshake.
        assert_eq!(adm.heaviest(), Some(b));
        assert_eq!(adm.admit(a, &l), Admit::Yes);
        assert_eq!(adm.heaviest(), Some(a));
    }

    #[test]
    fn a_lower_fd_limit_moves_the_thresholds() {
        let a = ClientKey::Uid(1);
        let mut adm = Admission::new(FdBudget::for_limit(Some(20_000)), 10);
        let l = unlimited();
        for _ in 0..20 {
            assert_eq!(adm.admit(a, &l), Admit::Yes);
        }
        adm.set_fd_limit(Some(64));
        assert!(adm.under_pressure());
        assert_eq!(adm.admit(a, &l), Admit::Drop);
        // A client with nothing open still gets in.
        assert_eq!(adm.admit(ClientKey::Uid(2), &l), Admit::Yes);
        adm.set_fd_limit(Some(20_000));
        assert_eq!(adm.admit(a, &l), Admit::Yes);
    }

    #[test]
    fn the_unidentified_pool_holds_a_quarter_of_each_per_client_limit() {
        let mut adm = Admission::new(FdBudget::for_limit(None), 0);
        // Sessions 40 per client (pool 10), handshakes 8 (pool 2).
        let l = limits(1000, 40, 1000, 8);
        assert_eq!(adm.admit(ClientKey::Loopback, &l), Admit::Yes);
        assert_eq!(adm.admit(ClientKey::Loopback, &l), Admit::Yes);
        assert_eq!(adm.admit(ClientKey::Loopback, &l), Admit::Identify);
        adm.left_handshake(ClientKey::Loopback);
        adm.left_handshake(ClientKey::Loopback);
        for _ in 0..8 {
            assert_eq!(adm.admit(ClientKey::Loopback, &l), Admit::Yes);
            adm.left_handshake(ClientKey::Loopback);
        }
        assert_eq!(adm.pool().sessions, 10);
        assert_eq!(adm.admit(ClientKey::Loopback, &l), Admit::Identify);
        // Identify never comes back for an identified client.
        assert_eq!(adm.admit(ClientKey::Uid(7), &l), Admit::Yes);
        adm.ended(ClientKey::Loopback, true);
        assert_eq!(adm.admit(ClientKey::Loopback, &l), Admit::Yes);
    }

    #[test]
    fn the_pool_counts_against_every_local_client_and_no_remote_one() {
        let mut adm = Admission::new(FdBudget::for_limit(None), 0);
        let l = limits(1000, 8, 1000, 1000);
        // The pool's two sessions could be anyone's local: each local
        // client gets 8 - 2 more.
        for _ in 0..2 {
            assert_eq!(adm.admit(ClientKey::Loopback, &l), Admit::Yes);
        }
        for local in [
            ClientKey::Uid(65534),
            ClientKey::Unix,
            ClientKey::Ip("127.0.0.9".parse().unwrap()),
        ] {
            let mut n = 0;
            while adm.admit(local, &l) == Admit::Yes {
                n += 1;
            }
            assert_eq!(n, 6, "{local:?}");
        }
        let remote = ClientKey::Ip("10.0.0.1".parse().unwrap());
        let mut n = 0;
        while adm.admit(remote, &l) == Admit::Yes {
            n += 1;
        }
        assert_eq!(n, 8);
    }

    #[test]
    fn under_fd_pressure_every_loopback_client_is_identified() {
        let mut adm = Admission::new(FdBudget::for_limit(Some(256)), 10);
        let l = unlimited();
        assert_eq!(adm.admit(ClientKey::Loopback, &l), Admit::Yes);
        while adm.admit(ClientKey::Uid(1), &l) == Admit::Yes {}
        assert!(adm.under_pressure());
        assert_eq!(adm.admit(ClientKey::Loopback, &l), Admit::Identify);
    }

    /// What the reactor does with one loopback connection of `uid`: pooled
    /// if the pool has room, else identified and admitted under its uid.
    fn connect(adm: &mut Admission, l: &Limits, uid: u32) -> Option<ClientKey> {
        let mut key = ClientKey::Loopback;
        let mut admit = adm.admit(key, l);
        if admit == Admit::Identify {
            key = ClientKey::Uid(uid);
            admit = adm.admit(key, l);
        }
        match admit {
            Admit::Yes => Some(key),
            Admit::Refuse(_) => {
                adm.ended(key, false);
                None
            }
            _ => None,
        }
    }

    /// Attack: a uid identified while the pool is short of sessions (full by
    /// its handshake share only) later refills the pool with its own
    /// sessions: it ends above its per-client limit.
    #[test]
    fn atk_a_uid_passes_its_limit_by_refilling_the_pool() {
        let a = 65534;
        let mut adm = Admission::new(FdBudget::for_limit(None), 0);
        // Pool: 10 sessions, 2 handshakes.
        let l = limits(1000, 40, 1000, 8);
        // Two pooled handshakes, left pending: the pool is "full".
        for _ in 0..2 {
            assert_eq!(connect(&mut adm, &l, a), Some(ClientKey::Loopback));
        }
        let mut mine = 2;
        // A's tunnels are now identified; the pool counts 2 against it.
        while let Some(k) = connect(&mut adm, &l, a) {
            assert_eq!(k, ClientKey::Uid(a));
            adm.left_handshake(k);
            mine += 1;
        }
        assert_eq!(mine, 40, "refused at its limit, for now");
        // A closes its two pooled handshakes, and opens pooled tunnels again.
        for _ in 0..2 {
            adm.left_handshake(ClientKey::Loopback);
            adm.ended(ClientKey::Loopback, true);
            mine -= 1;
        }
        while let Some(k) = connect(&mut adm, &l, a) {
            adm.left_handshake(k);
            mine += 1;
        }
        assert!(mine <= 40, "uid {a} holds {mine} sessions, its limit is 40");
    }

    /// Attack: the same with fd pressure instead of the handshake share: under
    /// pressure every loopback client is identified against an empty pool;
    /// once it lifts, the pool refills on top.
    #[test]
    fn atk_a_uid_identified_under_pressure_passes_its_limit_after() {
        let a = 65534;
        // 256 fds: pressure at 192 held; base 12.
        let mut adm = Admission::new(FdBudget::for_limit(Some(256)), 12);
        let l = limits(1000, 8, 1000, 1000);
        // Ten remote clients with 9 sessions each: 192 fds held.
        let remotes: Vec<ClientKey> = (1..=10)
            .map(|i| ClientKey::Ip(format!("10.0.0.{i}").parse().unwrap()))
            .collect();
        let big = limits(1000, 1000, 1000, 1000);
        for r in &remotes {
            for _ in 0..9 {
                assert_eq!(adm.admit(*r, &big), Admit::Yes);
                adm.left_handshake(*r);
            }
        }
        assert!(adm.under_pressure());
        let mut mine = 0;
        while let Some(k) = connect(&mut adm, &l, a) {
            assert_eq!(k, ClientKey::Uid(a));
            adm.left_handshake(k);
            mine += 1;
        }
        assert_eq!(mine, 8);
        // The remote clients leave; pressure lifts.
        for r in &remotes {
            for _ in 0..9 {
                adm.ended(*r, true);
            }
        }
        assert!(!adm.under_pressure());
        while let Some(k) = connect(&mut adm, &l, a) {
            adm.left_handshake(k);
            mine += 1;
        }
        assert!(mine <= 8, "uid {a} holds {mine} sessions, its limit is 8");
    }

    /// Attack on the shedding order: a heavy attacker that keeps its
    /// sessions pooled made the pool the heaviest, and shedding closed the
    /// oldest pooled handshake: a light victim's. Before shedding, the
    /// reactor now asks the pool's owners (`identify_pool`, then
    /// `leave_pool` for each), and `heaviest()` puts the pool last.
    #[test]
    fn atk_shedding_takes_a_light_victims_pooled_handshake() {
        use crate::reactor::shed::{victims, Candidate};
        let mut adm = Admission::new(FdBudget::for_limit(None), 0);
        let l = limits(1000, 40, 1000, 40);
        // (owner, candidate) for every session, oldest first.
        let mut cands: Vec<(u32, Candidate)> = Vec::new();
        let open =
            |adm: &mut Admission, owner: u32, done: bool, cands: &mut Vec<(u32, Candidate)>| {
                let k = connect(adm, &l, owner).unwrap();
                if done {
                    adm.left_handshake(k);
                }
                let (key, id) = (cands.len(), cands.len() as u64);
                cands.push((
                    owner,
                    Candidate {
                        key,
                        id,
                        client: k,
                        admitted: true,
                        handshaking: !done,
                    },
                ));
            };
        // The victim (uid 1000): one handshake, the oldest.
        open(&mut adm, 1000, false, &mut cands);
        // The attacker (nobody): 8 tunnels and a handshake, all pooled.
        for _ in 0..8 {
            open(&mut adm, 65534, true, &mut cands);
        }
        open(&mut adm, 65534, false, &mut cands);
        assert!(cands.iter().all(|(_, c)| c.client == ClientKey::Loopback));
        // What the reactor does before shedding.
        let epoch = adm.pool_epoch();
        adm.identify_pool();
        assert_ne!(adm.pool_epoch(), epoch, "every worker is asked");
        for (owner, c) in &mut cands {
            c.client = ClientKey::Uid(*owner);
            adm.leave_pool(c.client, c.handshaking);
        }
        assert_eq!(adm.pool().sessions, 0);
        let heaviest = adm.heaviest();
        assert_eq!(heaviest, Some(ClientKey::Uid(65534)));
        let shed = victims(cands.iter().map(|(_, c)| *c), heaviest, 1);
        let owner = cands[shed[0]].0;
        assert_eq!(
            owner, 65534,
            "shed uid {owner}'s handshake (1 session) before nobody's (9 sessions)"
        );
        // Counts add up as the sessions end under their owners.
        for (_, c) in &cands {
            if c.handshaking {
                adm.left_handshake(c.client);
            }
            adm.ended(c.client, true);
        }
        assert_eq!((adm.sessions, adm.handshakes, adm.clients.len()), (0, 0, 0));
    }

    /// Another worker's pooled sessions may linger a moment: the pool is
    /// shed last, after every client known by name.
    #[test]
    fn the_pool_is_the_heaviest_only_when_no_one_else_waits() {
        let mut adm = Admission::new(FdBudget::for_limit(None), 0);
        let l = limits(1000, 400, 1000, 400);
        for _ in 0..9 {
            assert_eq!(adm.admit(ClientKey::Loopback, &l), Admit::Yes);
        }
        assert_eq!(adm.heaviest(), Some(ClientKey::Loopback));
        assert_eq!(adm.admit(ClientKey::Uid(5), &l), Admit::Yes);
        assert_eq!(adm.heaviest(), Some(ClientKey::Uid(5)));
    }

    /// Attack on the fd reserve: under pressure a client at or above the
    /// mean is refused, the mean being sessions over `clients.len()`. The
    /// pool is one more entry there though its sessions are others', so it
    /// lowers the mean: nobody with 29 tunnels identified and 10 pooled (39)
    /// gets root, with 20 (below the true mean of 29.5), refused.
    #[test]
    fn atk_the_pool_lowers_the_mean_the_fd_reserve_refuses_at() {
        let (a, v) = (65534, 0);
        // 256 fds: pressure at 192 held; 73 + 2 * 59 = 191 held at the end.
        let mut adm = Admission::new(FdBudget::for_limit(Some(256)), 73);
        let l = limits(1000, 40, 1000, 1000);
        for _ in 0..10 {
            let k = connect(&mut adm, &l, a).unwrap();
            assert_eq!(k, ClientKey::Loopback);
            adm.left_handshake(k);
        }
        for _ in 0..29 {
            let k = connect(&mut adm, &l, a).unwrap();
            adm.left_handshake(k);
        }
        for _ in 0..20 {
            let k = connect(&mut adm, &l, v).unwrap();
            assert_eq!(k, ClientKey::Uid(v));
            adm.left_handshake(k);
        }
        assert!(adm.under_pressure());
        // nobody (39 sessions) is above the mean and gives way ...
        assert!(matches!(adm.admit(ClientKey::Uid(a), &l), Admit::Refuse(_)));
        adm.ended(ClientKey::Uid(a), false);
        // ... root (20) is below it and still gets in.
        assert_eq!(adm.admit(ClientKey::Uid(v), &l), Admit::Yes);
    }
}
