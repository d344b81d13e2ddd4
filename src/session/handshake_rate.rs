//! The per-client handshake-rate budget: a token bucket per client (the
//! same [`ClientKey`] admission counts), charged once for each CONNECT a
//! terminating rule allows, before the proxy dials or answers `200`.
//!
//! Why: a terminated TLS handshake (and minting its leaf) runs on the
//! reactor and costs about half a millisecond of loop time; admission
//! bounds how many sessions a client holds open, not how fast it opens
//! them, so one client replaying ClientHellos at full rate could take most
//! of the loop from everyone else. A client whose bucket is empty is
//! refused at CONNECT (`429`, `X-Proxy-Error: limit; handshake-rate`),
//! before any TLS, so a flood costs a parse and a refusal per connection.
//!
//! Memory is bounded: a bucket that has refilled to its burst says nothing
//! a fresh one would not, so sweeps drop it; past [`MAX_CLIENTS`] buckets,
//! clients not yet known share one overflow bucket.

use std::collections::HashMap;
use std::time::Instant;

use crate::client::ClientKey;

/// Buckets kept at most; clients past it share [`HandshakeRates`]' overflow
/// bucket (about 40 bytes each: a few MiB at most).
pub(crate) const MAX_CLIENTS: usize = 65_536;

/// No sweep before this many buckets exist.
const MIN_SWEEP: usize = 1_024;

/// The budget in force (from `[limits]`, read at each charge so a reload
/// applies at once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Budget {
    /// Tokens added per second; 0 switches the budget off.
    pub(crate) per_sec: u32,
    /// The most tokens a bucket holds (and a new client starts with).
    pub(crate) burst: u32,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(budget: Budget, now: Instant) -> Bucket {
        Bucket {
            tokens: f64::from(budget.burst),
            at: now,
        }
    }

    /// The tokens it holds at `now` (never more than the burst).
    fn level(&self, budget: Budget, now: Instant) -> f64 {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        (self.tokens + elapsed * f64::from(budget.per_sec)).min(f64::from(budget.burst))
    }

    fn take(&mut self, budget: Budget, now: Instant) -> bool {
        self.tokens = self.level(budget, now);
        self.at = self.at.max(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The bucket a client is charged to: its own key, but an IPv6 address by
/// its /64. A host is routinely given a whole /64 (SLAAC, privacy
/// addresses, a prefix routed to it), so a client keyed by its full
/// address could open each connection from a new one: a fresh burst each
/// time, and soon every bucket taken so that the clients that come next
/// share the overflow bucket with it.
fn bucket_key(client: ClientKey) -> ClientKey {
    match client {
        ClientKey::Ip(std::net::IpAddr::V6(v6)) => {
            let prefix = u128::from(v6) & !((1u128 << 64) - 1);
            ClientKey::Ip(std::net::Ipv6Addr::from(prefix).into())
        }
        other => other,
    }
}

/// Every client's bucket.
#[derive(Debug)]
pub(crate) struct HandshakeRates {
    buckets: HashMap<ClientKey, Bucket>,
    /// Shared by clients first seen while [`MAX_CLIENTS`] buckets exist.
    overflow: Option<Bucket>,
    /// Sweep when this many buckets exist.
    sweep_at: usize,
}

impl Default for HandshakeRates {
    fn default() -> Self {
        HandshakeRates {
            buckets: HashMap::new(),
            overflow: None,
            sweep_at: MIN_SWEEP,
        }
    }
}

impl HandshakeRates {
    /// Charges `client` one handshake at `now`: `true` if its bucket held a
    /// token (always, with the budget off).
    pub(crate) fn take(&mut self, client: ClientKey, budget: Budget, now: Instant) -> bool {
        if budget.per_sec == 0 {
            return true;
        }
        let client = bucket_key(client);
        if self.buckets.len() >= self.sweep_at {
            self.sweep(budget, now);
        }
        if let Some(b) = self.buckets.get_mut(&client) {
            return b.take(budget, now);
        }
        if self.buckets.len() >= MAX_CLIENTS {
            return self
                .overflow
                .get_or_insert_with(|| Bucket::full(budget, now))
                .take(budget, now);
        }
        let mut b = Bucket::full(budget, now);
        let ok = b.take(budget, now);
        self.buckets.insert(client, b);
        ok
    }

    /// Drops every bucket that has refilled to its burst (amortized: the
    /// next sweep waits until the map has doubled).
    fn sweep(&mut self, budget: Budget, now: Instant) {
        let burst = f64::from(budget.burst);
        self.buckets.retain(|_, b| b.level(budget, now) < burst);
        if self.overflow.is_some_and(|b| b.level(budget, now) >= burst) {
            self.overflow = None;
        }
        self.sweep_at = (self.buckets.len() * 2).clamp(MIN_SWEEP, MAX_CLIENTS);
    }

    /// Buckets held now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.buckets.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const B: Budget = Budget {
        per_sec: 50,
        burst: 100,
    };

    fn uid(n: u32) -> ClientKey {
        ClientKey::Uid(n)
    }

    #[test]
    fn a_burst_then_the_rate() {
        let t0 = Instant::now();
        let mut r = HandshakeRates::default();
        for i in 0..100 {
            assert!(r.take(uid(1), B, t0), "token {i} of the burst");
        }
        assert!(!r.take(uid(1), B, t0), "the burst is spent");
        // 50/s: one token each 20 ms.
        assert!(!r.take(uid(1), B, t0 + Duration::from_millis(19)));
        assert!(r.take(uid(1), B, t0 + Duration::from_millis(20)));
        assert!(!r.take(uid(1), B, t0 + Duration::from_millis(21)));
        // Over one second: 50 more, not 100.
        let t1 = t0 + Duration::from_millis(1_020);
        let granted = (0..200).filter(|_| r.take(uid(1), B, t1)).count();
        assert_eq!(granted, 50);
    }

    #[test]
    fn clients_have_their_own_buckets() {
        let t0 = Instant::now();
        let mut r = HandshakeRates::default();
        while r.take(uid(1), B, t0) {}
        assert!(r.take(uid(2), B, t0), "another uid is untouched");
        let ip = ClientKey::Ip("192.0.2.7".parse().unwrap());
        assert!(r.take(ip, B, t0), "an address is another client");
        assert!(!r.take(uid(1), B, t0));
    }

    #[test]
    fn an_ipv6_client_cannot_evade_by_rotating_addresses_in_its_64() {
        let t0 = Instant::now();
        let mut r = HandshakeRates::default();
        let v6 = |s: &str| ClientKey::Ip(s.parse().unwrap());
        // One address per handshake, all in 2001:db8:1:2::/64.
        let granted = (0..1_000u32)
            .filter(|n| r.take(v6(&format!("2001:db8:1:2::{n:x}")), B, t0))
            .count();
        assert_eq!(granted, 100, "one burst for the whole /64");
        assert_eq!(r.len(), 1, "one bucket for the whole /64");
        assert!(r.take(v6("2001:db8:1:3::1"), B, t0), "another /64");
        // IPv4 stays per address.
        assert!(r.take(ClientKey::Ip("192.0.2.1".parse().unwrap()), B, t0));
        assert!(r.take(ClientKey::Ip("192.0.2.2".parse().unwrap()), B, t0));
    }

    #[test]
    fn off_grants_everything_and_keeps_nothing() {
        let t0 = Instant::now();
        let mut r = HandshakeRates::default();
        let off = Budget {
            per_sec: 0,
            burst: 1,
        };
        assert!((0..10_000).all(|_| r.take(uid(1), off, t0)));
        assert_eq!(r.len(), 0);
    }

    #[test]
    fn refilled_buckets_are_swept_so_memory_stays_bounded() {
        let t0 = Instant::now();
        let mut r = HandshakeRates::default();
        // Many one-shot clients (addresses), one second apart in batches.
        let mut n = 0u32;
        for round in 0..10u64 {
            let now = t0 + Duration::from_secs(10 * round);
            for _ in 0..1_000 {
                n += 1;
                let ip = std::net::Ipv4Addr::from(0x0a00_0000 + n);
                assert!(r.take(ClientKey::Ip(ip.into()), B, now));
            }
            // Buckets from earlier rounds refilled (10 s at 50/s) and went.
            assert!(r.len() <= 2 * MIN_SWEEP, "round {round}: {}", r.len());
        }
    }

    #[test]
    fn past_the_cap_new_clients_share_one_bucket() {
        let t0 = Instant::now();
        let mut r = HandshakeRates::default();
        // Every bucket in use (each spent one token, none refilled: same instant).
        for n in 0..MAX_CLIENTS as u32 {
            assert!(r.take(uid(n), B, t0));
        }
        assert_eq!(r.len(), MAX_CLIENTS);
        let strangers = (0..1_000u32).map(|n| uid(MAX_CLIENTS as u32 + n));
        let granted = strangers.filter(|&k| r.take(k, B, t0)).count();
        assert_eq!(granted, 100, "the overflow bucket's burst, shared");
        assert_eq!(r.len(), MAX_CLIENTS);
        // A known client still has its own.
        assert!(r.take(uid(0), B, t0));
    }
}
