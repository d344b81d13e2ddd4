//! A hashed timer wheel: O(1) insert and cancel, expiry in tick order.
//!
//! # Design
//!
//! * Entries live in a [`Slab`]; each bucket is an intrusive doubly-linked
//!   list threaded through the slab (`prev`/`next` keys), so insert and cancel
//!   are O(1) with no allocation once the slab has grown.
//! * A deadline `d` goes to tick `k = max(floor((d - start) / tick), cur)`,
//!   bucket `k % slots`. Deadlines beyond one rotation simply share the bucket
//!   with nearer ones: every entry keeps its exact `Instant`, and a bucket scan
//!   fires exactly the entries with `deadline <= now` and leaves the rest. So
//!   no rounds counter is needed, and firing is exact, not tick-rounded: a
//!   timer fires at the first `expire(now)` with `now >= deadline`, never
//!   earlier and never later than that call.
//! * Each bucket keeps a lower bound of its entries' deadlines (`min`, exact
//!   after each scan, lowered by insert, left alone by cancel unless the bucket
//!   empties), and the wheel caches a lower bound of every armed deadline
//!   (`earliest`). That makes [`TimerWheel::next_timeout`] O(1) and the true
//!   earliest deadline (not once per rotation), and lets
//!   [`TimerWheel::expire`] return in O(1) when nothing can be due, which is
//!   most polls. The cache is recomputed after a scan that may have fired
//!   something, walking buckets in tick order from the current one and
//!   stopping at the first that holds a deadline of its own tick: at most
//!   O(slots), usually a few buckets.
//! * A cancelled timer can leave a stale (too low) bound, which costs at most
//!   one spurious wakeup per stale bound: the scan at that wakeup makes the
//!   bound exact again, so there is no zero-timeout loop.

use slab::Slab;
use std::num::{NonZeroU32, NonZeroU64};
use std::time::{Duration, Instant};

/// A link in a bucket list: an entry's slab key plus one, `None` ending the
/// list. Four bytes, and zero when empty, so a fresh wheel's buckets are
/// zeroed memory the kernel maps only when a bucket is first used.
type Link = Option<NonZeroU32>;

fn link(key: usize) -> Link {
    let link = u32::try_from(key + 1).expect("fewer than 2^32 - 1 timers");
    NonZeroU32::new(link)
}

fn key_of(link: NonZeroU32) -> usize {
    link.get() as usize - 1
}

/// Names one armed timer, for [`TimerWheel::cancel`]. Stale ids are harmless.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimerId {
    /// The entry's slab key; a wheel holds fewer than 2^32 timers (each is
    /// a session's, or one of a few of the reactor's own).
    key: u32,
    generation: u32,
}

/// One armed timer, linked into its bucket's list.
#[derive(Debug)]
struct Entry<T> {
    value: T,
    deadline: Instant,
    /// Distinguishes this arming from earlier users of the same slab slot.
    generation: u32,
    bucket: u32,
    prev: Link,
    next: Link,
}

/// Deadlines with values attached.
///
/// Driven by the caller's clock: nothing here calls `Instant::now()`.
#[derive(Debug)]
pub struct TimerWheel<T> {
    start: Instant,
    tick_ns: u128,
    /// Each bucket's list of entries.
    heads: Vec<Link>,
    /// Each bucket's bound: `None` when empty; otherwise nanoseconds after
    /// `start`, plus one, of an instant <= every deadline in the list.
    /// (12 bytes a bucket with `heads`, where an `Option<Instant>` beside a
    /// head took 24.)
    mins: Vec<Option<NonZeroU64>>,
    entries: Slab<Entry<T>>,
    /// Tick of the last `expire` (ticks before it are fully drained; this
    /// one may still hold entries due later within the tick).
    cur: u64,
    /// `None` iff empty; otherwise <= every armed deadline.
    earliest: Option<Instant>,
    next_generation: u32,
}

impl<T> TimerWheel<T> {
    /// A wheel of `slots` buckets of `tick` each, starting at `now`.
    ///
    /// The tick is only a resolution for bucketing and for rounding
    /// [`next_timeout`](Self::next_timeout); firing compares exact deadlines.
    /// A zero `tick` is treated as 1 ns and zero `slots` as 1.
    pub fn new(tick: Duration, slots: usize, now: Instant) -> Self {
        // Entries name their bucket in a u32.
        let slots = slots.clamp(1, u32::MAX as usize);
        TimerWheel {
            start: now,
            tick_ns: tick.as_nanos().max(1),
            heads: vec![None; slots],
            mins: vec![None; slots],
            entries: Slab::new(),
            cur: 0,
            earliest: None,
            next_generation: 0,
        }
    }

    /// Arms a timer; it fires at the first `expire` call at or after `deadline`
    /// (never before it).
    pub fn insert(&mut self, deadline: Instant, value: T) -> TimerId {
        // Past deadlines (and those earlier in the not-yet-expired range) are
        // clamped to the current tick, whose bucket the next expire scans.
        let tick = self.tick_of(deadline).max(self.cur);
        let bucket = self.bucket_of(tick);
        let generation = self.next_generation;
        self.next_generation = self.next_generation.wrapping_add(1);
        let head = self.heads[bucket];
        let key = self.entries.insert(Entry {
            value,
            deadline,
            generation,
            bucket: bucket as u32,
            prev: None,
            next: head,
        });
        if let Some(head) = head {
            self.entries[key_of(head)].prev = link(key);
        }
        self.heads[bucket] = link(key);
        let min = self.min(bucket).map_or(deadline, |m| m.min(deadline));
        self.set_min(bucket, Some(min));
        self.earliest = Some(self.earliest.map_or(deadline, |e| e.min(deadline)));
        TimerId {
            key: key as u32,
            generation,
        }
    }

    /// Disarms a timer, returning its value if it was still armed.
    ///
    /// A stale id (fired or cancelled, slot possibly reused) returns `None`
    /// and touches nothing.
    pub fn cancel(&mut self, id: TimerId) -> Option<T> {
        match self.entries.get(id.key as usize) {
            Some(e) if e.generation == id.generation => {}
            _ => return None,
        }
        let value = self.unlink_remove(id.key as usize);
        // Bounds stay valid lower bounds; only reset them when they would
        // otherwise refer to nothing at all (keeps an idle wheel wake-free).
        if self.entries.is_empty() {
            self.earliest = None;
        }
        Some(value)
    }

    /// The deadline `id` is armed for; `None` once it fired or was
    /// cancelled (then its slot may belong to another timer already).
    pub fn deadline(&self, id: TimerId) -> Option<Instant> {
        self.entries
            .get(id.key as usize)
            .filter(|e| e.generation == id.generation)
            .map(|e| e.deadline)
    }

    /// How long `poll` may sleep: `None` when no timer is armed.
    ///
    /// Otherwise the time until the earliest armed deadline, rounded up to
    /// the next tick boundary (coalescing wakeups), or zero if it has
    /// passed. O(1). After `expire(now)` the result for the same `now` is
    /// never zero, and sleeping that long always lets the next `expire` fire
    /// a timer or (after cancels left a stale bound) tighten the bound, so no
    /// busy loop. Sub-millisecond results are fine with mio, which rounds
    /// poll timeouts up.
    pub fn next_timeout(&self, now: Instant) -> Option<Duration> {
        if self.entries.is_empty() {
            return None;
        }
        // `earliest` is always Some when non-empty; fall back to one tick.
        let Some(earliest) = self.earliest else {
            return Some(self.tick_duration());
        };
        if earliest <= now {
            return Some(Duration::ZERO);
        }
        let since = earliest.saturating_duration_since(self.start).as_nanos();
        let boundary_ns = since.div_ceil(self.tick_ns) * self.tick_ns;
        let boundary = duration_from_nanos(boundary_ns)
            .and_then(|d| self.start.checked_add(d))
            .unwrap_or(earliest);
        Some(boundary.max(earliest).saturating_duration_since(now))
    }

    /// Moves every timer due at `now` into `out`.
    ///
    /// Visits the bucket of every tick since the previous call (at most one
    /// full rotation, which covers every bucket), in tick order; within a
    /// bucket the order is unspecified. O(1) when nothing can be due.
    pub fn expire(&mut self, now: Instant, out: &mut Vec<T>) {
        let n = self.tick_of(now).max(self.cur);
        let due = matches!(self.earliest, Some(e) if e <= now);
        if !due {
            // Every armed deadline is > now: nothing in the skipped buckets.
            self.cur = n;
            return;
        }
        let slots = self.heads.len() as u64;
        let count = (n - self.cur).saturating_add(1).min(slots);
        for t in self.cur..self.cur.saturating_add(count) {
            let bucket = self.bucket_of(t);
            let mut min: Option<Instant> = None;
            let mut at = self.heads[bucket];
            while let Some(link) = at {
                let key = key_of(link);
                let e = &self.entries[key];
                let (next, deadline) = (e.next, e.deadline);
                if deadline <= now {
                    out.push(self.unlink_remove(key));
                } else {
                    min = Some(min.map_or(deadline, |m| m.min(deadline)));
                }
                at = next;
            }
            self.set_min(bucket, min);
        }
        self.cur = n;
        self.earliest = self.recompute_earliest();
    }

    /// Armed timers.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// No timer armed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A lower bound of all armed deadlines, from the bucket bounds.
    ///
    /// Walks ticks from `cur`; the first bucket whose bound falls in or
    /// before that tick holds the minimum, since every later bucket only
    /// holds deadlines of later ticks (or of later rotations). If none does
    /// (all timers beyond one rotation), the smallest bound wins.
    fn recompute_earliest(&self) -> Option<Instant> {
        if self.entries.is_empty() {
            return None;
        }
        let mut best: Option<Instant> = None;
        for t in self.cur..self.cur.saturating_add(self.heads.len() as u64) {
            if let Some(m) = self.min(self.bucket_of(t)) {
                if self.tick_of(m) <= t {
                    return Some(m);
                }
                best = Some(best.map_or(m, |b| b.min(m)));
            }
        }
        best
    }

    /// Unlinks `key` from its bucket list and frees its slot.
    fn unlink_remove(&mut self, key: usize) -> T {
        let e = self.entries.remove(key);
        let bucket = e.bucket as usize;
        match e.prev {
            None => self.heads[bucket] = e.next,
            Some(prev) => self.entries[key_of(prev)].next = e.next,
        }
        if let Some(next) = e.next {
            self.entries[key_of(next)].prev = e.prev;
        }
        if self.heads[bucket].is_none() {
            self.set_min(bucket, None);
        }
        e.value
    }

    /// `bucket`'s bound as an instant.
    fn min(&self, bucket: usize) -> Option<Instant> {
        let ns = self.mins[bucket]?.get() - 1;
        Some(self.start + Duration::from_nanos(ns))
    }

    /// Sets `bucket`'s bound, rounded down to the nanosecond, so it stays a
    /// lower bound; a deadline 584 years out is bounded by that horizon,
    /// still below it. A deadline before `start` is bounded by `start`: not
    /// a lower bound, but the caller's clock never reads before the wheel's
    /// start (the reactor arms `now + timeout`), and such a timer is due at
    /// any `expire` from `start` on.
    fn set_min(&mut self, bucket: usize, min: Option<Instant>) {
        self.mins[bucket] = min.map(|m| {
            let ns = m.saturating_duration_since(self.start).as_nanos();
            let ns = u64::try_from(ns).unwrap_or(u64::MAX).min(u64::MAX - 1);
            NonZeroU64::MIN.saturating_add(ns)
        });
    }

    /// Tick containing `t` (floor); instants before `start` are tick 0.
    fn tick_of(&self, t: Instant) -> u64 {
        let ns = t.saturating_duration_since(self.start).as_nanos();
        u64::try_from(ns / self.tick_ns).unwrap_or(u64::MAX)
    }

    fn bucket_of(&self, tick: u64) -> usize {
        (tick % self.heads.len() as u64) as usize
    }

    fn tick_duration(&self) -> Duration {
        duration_from_nanos(self.tick_ns).unwrap_or(Duration::MAX)
    }
}

fn duration_from_nanos(ns: u128) -> Option<Duration> {
    let secs = u64::try_from(ns / 1_000_000_000).ok()?;
    Some(Duration::new(secs, (ns % 1_000_000_000) as u32))
}

#[cfg(test)]
#[path = "timer_tests.rs"]
mod tests;
