//! Counters the reactor keeps and any thread may read.
//!
//! The reactors (one per worker) are the only writers; readers (a [`crate::ProxyHandle`], the
//! binary's SIGUSR1 handler, tests) take a [`StatsSnapshot`]. Counters are
//! relaxed atomics: each is exact on its own, a snapshot is not a transaction.

pub(crate) mod json;

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

pub use crate::lifecycle::{CloseReason, Phase};
pub use crate::rule_stats::RuleCounts;
use crate::rule_stats::RuleStats;

/// Live counters, shared between the reactor and its handles.
#[derive(Debug, Default)]
pub struct Stats {
    accepted: AtomicU64,
    allowed: AtomicU64,
    denied: AtomicU64,
    open: [AtomicU64; Phase::COUNT],
    closed: [AtomicU64; CloseReason::ALL.len()],
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
    wakeups: AtomicU64,
    events: AtomicU64,
    accept_pauses: AtomicU64,
    requests: AtomicU64,
    requests_allowed: AtomicU64,
    requests_denied: AtomicU64,
    upgrades: AtomicU64,
    tls_offloads: AtomicU64,
    /// Names waiting for a resolver thread.
    resolver_queue: AtomicU64,
    /// Logins refused: a wrong password, an unknown name, malformed credentials.
    auth_failures: AtomicU64,
    /// Passwords verified with argon2 on the verifier pool.
    auth_verifications: AtomicU64,
    /// Logins refused because the verifier's queue was full.
    auth_busy: AtomicU64,
    /// CONNECTs to terminating rules refused at the per-client handshake rate.
    handshake_rate_refused: AtomicU64,
    /// SOCKS5 UDP associations and their datagrams.
    udp: UdpCounters,
    /// Decisions by rule.
    pub(crate) rules: RuleStats,
    /// Each worker's own counters (empty when built with `default()`).
    workers: Box<[WorkerCounters]>,
}

/// One worker's counters, on a cache line of their own: each is written by
/// its worker only, so workers never contend for them.
#[derive(Debug, Default)]
#[repr(align(64))]
struct WorkerCounters {
    accepted: AtomicU64,
    wakeups: AtomicU64,
}

/// One worker's counters, as [`Stats::workers`] copies them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerStats {
    /// Connections this worker accepted on the proxy listeners.
    pub accepted: u64,
    /// Times this worker's reactor returned from `poll`.
    pub wakeups: u64,
}

impl Stats {
    /// Counters for a proxy of `workers` reactors.
    pub(crate) fn for_workers(workers: usize) -> Stats {
        Stats {
            workers: (0..workers).map(|_| WorkerCounters::default()).collect(),
            ..Stats::default()
        }
    }
    /// Worker `worker` accepted a connection.
    pub(crate) fn accepted(&self, worker: usize) {
        self.accepted.fetch_add(1, Relaxed);
        if let Some(w) = self.workers.get(worker) {
            w.accepted.fetch_add(1, Relaxed);
        }
    }
    pub(crate) fn allowed(&self) {
        self.allowed.fetch_add(1, Relaxed);
    }
    /// A CONNECT to a terminating rule was refused: its client's
    /// handshake budget was spent.
    pub(crate) fn handshake_rate_refused(&self) {
        self.handshake_rate_refused.fetch_add(1, Relaxed);
    }
    pub(crate) fn denied(&self) {
        self.denied.fetch_add(1, Relaxed);
    }
    /// A session entered `to` (from `from`, or newly accepted when `None`).
    pub(crate) fn phase(&self, from: Option<Phase>, to: Option<Phase>) {
        if let Some(p) = from {
            self.open[p.index()].fetch_sub(1, Relaxed);
        }
        if let Some(p) = to {
            self.open[p.index()].fetch_add(1, Relaxed);
        }
    }
    pub(crate) fn closed(&self, reason: CloseReason) {
        self.closed[reason.index()].fetch_add(1, Relaxed);
    }
    pub(crate) fn bytes_up(&self, n: usize) {
        self.bytes_up.fetch_add(n as u64, Relaxed);
    }
    pub(crate) fn bytes_down(&self, n: usize) {
        self.bytes_down.fetch_add(n as u64, Relaxed);
    }
    /// Worker `worker` returned from `poll` with `events` events.
    pub(crate) fn wakeup(&self, worker: usize, events: usize) {
        self.wakeups.fetch_add(1, Relaxed);
        self.events.fetch_add(events as u64, Relaxed);
        if let Some(w) = self.workers.get(worker) {
            w.wakeups.fetch_add(1, Relaxed);
        }
    }
    pub(crate) fn accept_paused(&self) {
        self.accept_pauses.fetch_add(1, Relaxed);
    }
    /// An inspected HTTP request was parsed; `allowed` says what its rules said.
    pub(crate) fn request(&self, allowed: bool) {
        self.requests.fetch_add(1, Relaxed);
        if allowed {
            self.requests_allowed.fetch_add(1, Relaxed);
        } else {
            self.requests_denied.fetch_add(1, Relaxed);
        }
    }
    /// An inspected session switched to raw passthrough after a 101.
    pub(crate) fn upgraded(&self) {
        self.upgrades.fetch_add(1, Relaxed);
    }
    /// One side of a terminated session handed its TLS to the kernel.
    pub(crate) fn tls_offloaded(&self) {
        self.tls_offloads.fetch_add(1, Relaxed);
    }

    /// A SOCKS5 UDP association was opened.
    pub(crate) fn udp_associated(&self) {
        self.udp.associations.fetch_add(1, Relaxed);
    }
    /// A datagram of `n` payload bytes was relayed client -> destination.
    pub(crate) fn udp_up(&self, n: usize) {
        self.udp.datagrams_up.fetch_add(1, Relaxed);
        self.udp.bytes_up.fetch_add(n as u64, Relaxed);
    }
    /// A datagram of `n` payload bytes was relayed destination -> client.
    pub(crate) fn udp_down(&self, n: usize) {
        self.udp.datagrams_down.fetch_add(1, Relaxed);
        self.udp.bytes_down.fetch_add(n as u64, Relaxed);
    }
    /// A datagram was dropped, never relayed.
    pub(crate) fn udp_dropped(&self, why: UdpDrop) {
        self.udp.dropped[why as usize].fetch_add(1, Relaxed);
    }

    /// A name was handed to the resolver pool.
    pub(crate) fn resolve_queued(&self) {
        self.resolver_queue.fetch_add(1, Relaxed);
    }
    /// A resolver thread took a name.
    pub(crate) fn resolve_started(&self) {
        self.resolver_queue.fetch_sub(1, Relaxed);
    }

    /// A login was refused (wrong password, unknown name, malformed).
    pub(crate) fn login_rejected(&self) {
        self.auth_failures.fetch_add(1, Relaxed);
    }
    /// A password went to the verifier pool.
    pub(crate) fn login_verifying(&self) {
        self.auth_verifications.fetch_add(1, Relaxed);
    }
    /// A login was refused unverified: the verifier's queue was full.
    pub(crate) fn login_busy(&self) {
        self.auth_busy.fetch_add(1, Relaxed);
    }

    /// Decisions counted by rule name, sorted by name. Connections no rule
    /// decided (and requests refused before the rules) are under `-`.
    pub fn rules(&self) -> Vec<(String, RuleCounts)> {
        self.rules.snapshot()
    }

    /// Each worker's own counters, in worker order (their sums are in
    /// [`snapshot`](Stats::snapshot)).
    pub fn workers(&self) -> Vec<WorkerStats> {
        self.workers
            .iter()
            .map(|w| WorkerStats {
                accepted: w.accepted.load(Relaxed),
                wakeups: w.wakeups.load(Relaxed),
            })
            .collect()
    }

    /// A copy of every counter.
    pub fn snapshot(&self) -> StatsSnapshot {
        let open = |p: Phase| self.open[p.index()].load(Relaxed);
        StatsSnapshot {
            accepted: self.accepted.load(Relaxed),
            allowed: self.allowed.load(Relaxed),
            denied: self.denied.load(Relaxed),
            open: OpenSessions {
                handshake: open(Phase::Handshake),
                resolving: open(Phase::Resolving),
                connecting: open(Phase::Connecting),
                established: open(Phase::Established),
                closing: open(Phase::Closing),
            },
            closed: ClosedByReason(std::array::from_fn(|i| self.closed[i].load(Relaxed))),
            bytes_up: self.bytes_up.load(Relaxed),
            bytes_down: self.bytes_down.load(Relaxed),
            wakeups: self.wakeups.load(Relaxed),
            events: self.events.load(Relaxed),
            accept_pauses: self.accept_pauses.load(Relaxed),
            requests: self.requests.load(Relaxed),
            requests_allowed: self.requests_allowed.load(Relaxed),
            requests_denied: self.requests_denied.load(Relaxed),
            upgrades: self.upgrades.load(Relaxed),
            tls_offloads: self.tls_offloads.load(Relaxed),
            resolver_queue: self.resolver_queue.load(Relaxed),
            auth_failures: self.auth_failures.load(Relaxed),
            auth_verifications: self.auth_verifications.load(Relaxed),
            auth_busy: self.auth_busy.load(Relaxed),
            handshake_rate_refused: self.handshake_rate_refused.load(Relaxed),
            udp: UdpStats {
                associations: self.udp.associations.load(Relaxed),
                datagrams_up: self.udp.datagrams_up.load(Relaxed),
                datagrams_down: self.udp.datagrams_down.load(Relaxed),
                bytes_up: self.udp.bytes_up.load(Relaxed),
                bytes_down: self.udp.bytes_down.load(Relaxed),
                dropped: std::array::from_fn(|i| self.udp.dropped[i].load(Relaxed)),
            },
        }
    }
}

/// Sessions open right now, by phase.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpenSessions {
    /// Reading the client's request.
    pub handshake: u64,
    /// Waiting for DNS.
    pub resolving: u64,
    /// Connecting upstream.
    pub connecting: u64,
    /// Relaying.
    pub established: u64,
    /// Flushing and closing.
    pub closing: u64,
}

impl OpenSessions {
    /// All open sessions.
    pub fn total(&self) -> u64 {
        self.handshake + self.resolving + self.connecting + self.established + self.closing
    }
}

/// Closed sessions, tallied by [`CloseReason`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClosedByReason([u64; CloseReason::ALL.len()]);

impl ClosedByReason {
    /// How many sessions closed for `reason`.
    pub fn get(&self, reason: CloseReason) -> u64 {
        self.0[reason.index()]
    }
    /// All closed sessions.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
    /// `(reason, count)` for every reason with a non-zero count.
    pub fn iter(&self) -> impl Iterator<Item = (CloseReason, u64)> + '_ {
        CloseReason::ALL
            .iter()
            .map(|&r| (r, self.get(r)))
            .filter(|&(_, n)| n > 0)
    }
}

/// A point-in-time copy of [`Stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StatsSnapshot {
    /// Connections accepted on any listener.
    pub accepted: u64,
    /// Sessions whose target policy allowed.
    pub allowed: u64,
    /// Sessions whose target policy refused.
    pub denied: u64,
    /// Sessions open now, by phase.
    pub open: OpenSessions,
    /// Sessions closed, by reason.
    pub closed: ClosedByReason,
    /// Payload bytes relayed client -> upstream.
    pub bytes_up: u64,
    /// Payload bytes relayed upstream -> client.
    pub bytes_down: u64,
    /// Times the reactor returned from `poll` (an idle proxy does not wake).
    pub wakeups: u64,
    /// Readiness events handled.
    pub events: u64,
    /// Times accepting was paused for lack of file descriptors.
    pub accept_pauses: u64,
    /// HTTP requests parsed in inspected sessions and by the forward proxy.
    pub requests: u64,
    /// Of those, allowed by their request rules and forwarded.
    pub requests_allowed: u64,
    /// Of those, refused by their request rules (or malformed).
    pub requests_denied: u64,
    /// Inspected sessions that switched to raw passthrough after a 101.
    pub upgrades: u64,
    /// Sides of terminated TLS sessions handed to the kernel (kTLS).
    pub tls_offloads: u64,
    /// Names waiting for a resolver thread now.
    pub resolver_queue: u64,
    /// Logins refused: wrong password, unknown user, malformed credentials.
    pub auth_failures: u64,
    /// Passwords verified with argon2 (remembered logins and plaintext
    /// users need none).
    pub auth_verifications: u64,
    /// Logins refused unverified because the verifier's queue was full.
    pub auth_busy: u64,
    /// CONNECTs to terminating rules refused because their client's
    /// handshake budget (`limits.handshakes_per_client_per_sec`) was spent.
    pub handshake_rate_refused: u64,
    /// SOCKS5 UDP associations and their datagrams.
    pub udp: UdpStats,
}

#[derive(Debug, Default)]
struct UdpCounters {
    associations: AtomicU64,
    datagrams_up: AtomicU64,
    datagrams_down: AtomicU64,
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
    dropped: [AtomicU64; UdpDrop::ALL.len()],
}

/// Why a SOCKS5 UDP datagram was dropped instead of relayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UdpDrop {
    /// The policy refused its destination (deny wins, no rule, a special
    /// address, a port, a user; or an allowing rule that inspects or routes
    /// through a parent proxy, neither of which UDP can honour).
    Denied,
    /// Its SOCKS UDP header was malformed.
    Malformed,
    /// FRAG was not 0: fragmentation is not supported.
    Fragment,
    /// It came to the relay from an address other than the client's.
    ForeignSource,
    /// A reply from an address the client never sent to.
    Uncontacted,
    /// Its destination name did not resolve.
    ResolveFailed,
    /// Too many datagrams were waiting for names to resolve.
    QueueFull,
    /// The kernel refused to send it (unreachable, refused, too large).
    SendFailed,
    /// The association already sent to as many destinations as it may.
    TooManyDestinations,
}

impl UdpDrop {
    /// Every reason, in the order of the tallies.
    pub const ALL: [UdpDrop; 9] = [
        UdpDrop::Denied,
        UdpDrop::Malformed,
        UdpDrop::Fragment,
        UdpDrop::ForeignSource,
        UdpDrop::Uncontacted,
        UdpDrop::ResolveFailed,
        UdpDrop::QueueFull,
        UdpDrop::SendFailed,
        UdpDrop::TooManyDestinations,
    ];

    /// The name in logs, stats and metrics labels, e.g. `denied`.
    pub fn as_str(self) -> &'static str {
        match self {
            UdpDrop::Denied => "denied",
            UdpDrop::Malformed => "malformed",
            UdpDrop::Fragment => "fragment",
            UdpDrop::ForeignSource => "foreign-source",
            UdpDrop::Uncontacted => "uncontacted",
            UdpDrop::ResolveFailed => "resolve-failed",
            UdpDrop::QueueFull => "queue-full",
            UdpDrop::SendFailed => "send-failed",
            UdpDrop::TooManyDestinations => "too-many-destinations",
        }
    }
}

/// SOCKS5 UDP counters, as [`StatsSnapshot::udp`] copies them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct UdpStats {
    /// Associations opened (UDP ASSOCIATE answered with a relay).
    pub associations: u64,
    /// Datagrams relayed client -> destination.
    pub datagrams_up: u64,
    /// Datagrams relayed destination -> client.
    pub datagrams_down: u64,
    /// Payload bytes relayed client -> destination (SOCKS headers not counted).
    pub bytes_up: u64,
    /// Payload bytes relayed destination -> client.
    pub bytes_down: u64,
    dropped: [u64; UdpDrop::ALL.len()],
}

impl UdpStats {
    /// Datagrams dropped for `why`.
    pub fn dropped(&self, why: UdpDrop) -> u64 {
        self.dropped[why as usize]
    }
    /// Datagrams dropped for any reason.
    pub fn dropped_total(&self) -> u64 {
        self.dropped.iter().sum()
    }
}

impl fmt::Display for StatsSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.open;
        write!(
            f,
            "accepted={} allowed={} denied={} open={} (handshake={} resolving={} connecting={} established={} closing={}) bytes_up={} bytes_down={} wakeups={} events={} accept_pauses={} requests={} requests_allowed={} requests_denied={} upgrades={} tls_offloads={} auth_failures={} auth_verifications={} auth_busy={} handshake_rate_refused={} udp_associations={} udp_datagrams_up={} udp_datagrams_down={} udp_dropped={} closed:",
            self.accepted, self.allowed, self.denied, o.total(), o.handshake, o.resolving,
            o.connecting, o.established, o.closing, self.bytes_up, self.bytes_down,
            self.wakeups, self.events, self.accept_pauses, self.requests,
            self.requests_allowed, self.requests_denied, self.upgrades, self.tls_offloads, self.auth_failures,
            self.auth_verifications, self.auth_busy, self.handshake_rate_refused,
            self.udp.associations, self.udp.datagrams_up, self.udp.datagrams_down,
            self.udp.dropped_total()
        )?;
        for (r, n) in self.closed.iter() {
            write!(f, " {r}={n}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_counters_add_up_to_the_totals() {
        let s = Stats::for_workers(2);
        s.accepted(0);
        s.accepted(1);
        s.accepted(1);
        s.wakeup(1, 3);
        let w = s.workers();
        assert_eq!(w.len(), 2);
        assert_eq!((w[0].accepted, w[1].accepted), (1, 2));
        assert_eq!((w[0].wakeups, w[1].wakeups), (0, 1));
        let snap = s.snapshot();
        assert_eq!(snap.accepted, 3);
        assert_eq!((snap.wakeups, snap.events), (1, 3));
        // Counters without workers still count the totals.
        let d = Stats::default();
        d.accepted(0);
        assert_eq!(d.snapshot().accepted, 1);
        assert!(d.workers().is_empty());
    }
}
