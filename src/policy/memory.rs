//! Which addresses the names of inspecting rules resolved to, for a while.
//!
//! Without it, a broad rule would reach an inspected name's address raw: as
//! an IP literal through a CIDR allow, through another name resolving to the
//! same address (`45-45-45-45.nip.io`), over SOCKS5 with an address type 1
//! or 4, or with a forward `GET http://45.45.45.45/`. The check treats a
//! connection to a remembered address as matching every inspecting rule the
//! remembered name matches (at the connection's port), so it is inspected.
//!
//! The memory records facts about DNS (address, name), not rules, so it stays
//! true across reloads; the policy in force interprets it. Entries expire
//! ([`SEEN_TTL`], or [`PINNED_TTL`] for the exact names of inspecting rules,
//! which the reactor re-resolves at start, on reload, and on accepts at most
//! every [`REFRESH_EVERY`]) and the number of
//! records is bounded: when full, expired records go first, then the
//! soonest-expiring records of names clients asked for; pinned records are
//! evicted only when nothing else is left, so a client cannot flush the
//! addresses of the rules' own names by resolving many wildcard names.
//!
//! [`InspectedAddrs`] is the pure structure (time passed in);
//! [`InspectedMemory`] shares one behind a mutex, `Send + Sync`.

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::target::host::canonical_ip;

/// How long an address a client's resolution produced is remembered.
pub const SEEN_TTL: Duration = Duration::from_secs(10 * 60);
/// How long an address of an inspecting rule's exact name is remembered
/// after its last resolution. Long: the reactor re-resolves these names
/// when traffic flows (at most every [`REFRESH_EVERY`]), never on a timer,
/// so a proxy idle for hours keeps them rather than reopening the literal
/// path for the first connection after the idle spell. An address the name
/// no longer uses only makes connections to it inspected: stricter.
pub const PINNED_TTL: Duration = Duration::from_secs(7 * 24 * 60 * 60);
/// How often, at most, the reactor re-resolves
/// [`super::Policy::inspected_names`] (on accepts: traffic, not a timer).
pub const REFRESH_EVERY: Duration = Duration::from_secs(60);
/// Default bound on records (one per address and name).
pub const DEFAULT_CAPACITY: usize = 4096;
/// At most this many addresses of one resolution are remembered.
const MAX_ADDRS_PER_NAME: usize = 64;

/// One remembered (address, name) pair.
#[derive(Debug, Clone)]
struct Record {
    name: Arc<str>,
    expires: Instant,
    /// An inspecting rule's exact name: evicted last.
    pinned: bool,
}

/// Addresses that names of inspecting rules resolved to, with expiry. Pure:
/// every method that needs the time takes it.
#[derive(Debug, Clone)]
pub struct InspectedAddrs {
    by_addr: HashMap<IpAddr, Vec<Record>>,
    records: usize,
    capacity: usize,
    /// Counts records ever added: whoever checked sessions against the
    /// memory at one generation knows whether it has learned since
    /// (several workers share one memory, and clients' lookups teach it
    /// too, so "my answer added nothing" does not mean "nothing new").
    generation: u64,
}

impl Default for InspectedAddrs {
    fn default() -> Self {
        InspectedAddrs::with_capacity(DEFAULT_CAPACITY)
    }
}

impl InspectedAddrs {
    /// An empty memory holding at most `capacity` records (at least 1).
    pub fn with_capacity(capacity: usize) -> InspectedAddrs {
        InspectedAddrs {
            by_addr: HashMap::new(),
            records: 0,
            capacity: capacity.max(1),
            generation: 0,
        }
    }

    /// Records that `name` (canonical) resolved to `addrs` at `now`. `pinned`:
    /// `name` is an inspecting rule's exact name. Refreshes known pairs.
    /// Returns how many (address, name) records are new.
    pub fn remember(&mut self, name: &str, addrs: &[IpAddr], pinned: bool, now: Instant) -> usize {
        let ttl = if pinned { PINNED_TTL } else { SEEN_TTL };
        let expires = now + ttl;
        let mut new = 0;
        for &addr in addrs.iter().take(MAX_ADDRS_PER_NAME) {
            let addr = canonical_ip(addr);
            if let Some(r) = self
                .by_addr
                .get_mut(&addr)
                .and_then(|list| list.iter_mut().find(|r| &*r.name == name))
            {
                r.expires = r.expires.max(expires);
                r.pinned |= pinned;
                continue;
            }
            if self.records >= self.capacity {
                self.make_room(now);
            }
            self.by_addr.entry(addr).or_default().push(Record {
                name: name.into(),
                expires,
                pinned,
            });
            self.records += 1;
            self.generation += 1;
            new += 1;
        }
        new
    }

    /// How many records were ever added: it moves whenever the memory
    /// learns an (address, name) pair it did not hold.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The names remembered for `addr`: those still valid at `now`, or every
    /// record not yet pruned when `now` is `None`.
    pub fn names_at(&self, addr: IpAddr, now: Option<Instant>) -> Vec<Arc<str>> {
        let Some(list) = self.by_addr.get(&canonical_ip(addr)) else {
            return Vec::new();
        };
        list.iter()
            .filter(|r| now.is_none_or(|t| r.expires > t))
            .map(|r| r.name.clone())
            .collect()
    }

    /// Drops every record expired at `now`.
    pub fn expire(&mut self, now: Instant) {
        let mut dropped = 0;
        self.by_addr.retain(|_, list| {
            let before = list.len();
            list.retain(|r| r.expires > now);
            dropped += before - list.len();
            !list.is_empty()
        });
        self.records -= dropped;
    }

    /// Number of (address, name) records held.
    pub fn len(&self) -> usize {
        self.records
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.records == 0
    }

    /// The bound on records.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Frees at least one slot: expired records first; then the
    /// soonest-expiring unpinned eighth; pinned ones only if none is left.
    fn make_room(&mut self, now: Instant) {
        self.expire(now);
        if self.records < self.capacity {
            return;
        }
        let batch = (self.capacity / 8).max(1);
        for pinned in [false, true] {
            let mut expiries: Vec<Instant> = self
                .by_addr
                .values()
                .flatten()
                .filter(|r| r.pinned == pinned)
                .map(|r| r.expires)
                .collect();
            if expiries.is_empty() {
                continue;
            }
            let k = batch.min(expiries.len()) - 1;
            let (_, &mut cutoff, _) = expiries.select_nth_unstable(k);
            let mut left = batch;
            let mut dropped = 0;
            self.by_addr.retain(|_, list| {
                let before = list.len();
                list.retain(|r| {
                    let evict = left > 0 && r.pinned == pinned && r.expires <= cutoff;
                    left -= usize::from(evict);
                    !evict
                });
                dropped += before - list.len();
                !list.is_empty()
            });
            self.records -= dropped;
            return;
        }
    }
}

/// An [`InspectedAddrs`] shared by every clone (and thread): clone it to
/// share. Locks briefly per call.
#[derive(Clone, Default)]
pub struct InspectedMemory(Arc<Mutex<InspectedAddrs>>);

impl InspectedMemory {
    /// A shared memory of `capacity` records.
    pub fn with_capacity(capacity: usize) -> InspectedMemory {
        InspectedMemory(Arc::new(Mutex::new(InspectedAddrs::with_capacity(
            capacity,
        ))))
    }

    fn lock(&self) -> MutexGuard<'_, InspectedAddrs> {
        // The structure stays consistent between statements: a panic
        // elsewhere while holding the lock cannot leave it torn.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// See [`InspectedAddrs::remember`].
    pub fn remember(&self, name: &str, addrs: &[IpAddr], pinned: bool, now: Instant) -> usize {
        self.lock().remember(name, addrs, pinned, now)
    }

    /// See [`InspectedAddrs::generation`].
    pub fn generation(&self) -> u64 {
        self.lock().generation()
    }

    /// See [`InspectedAddrs::names_at`].
    pub fn names_at(&self, addr: IpAddr, now: Option<Instant>) -> Vec<Arc<str>> {
        let m = self.lock();
        if m.is_empty() {
            return Vec::new();
        }
        m.names_at(addr, now)
    }

    /// See [`InspectedAddrs::expire`].
    pub fn expire(&self, now: Instant) {
        self.lock().expire(now);
    }

    /// Number of records held.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Whether `other` is the same shared memory.
    pub fn same_as(&self, other: &InspectedMemory) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl fmt::Debug for InspectedMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "InspectedMemory({} records)", self.len())
    }
}
