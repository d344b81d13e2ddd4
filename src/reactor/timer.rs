//! A hashed timer wheel: O(1) insert and cancel, expiry in tick order.
//!
//! STUB: the timer helper replaces the bodies; the signatures are the contract.

use std::marker::PhantomData;
use std::time::{Duration, Instant};

/// Names one armed timer, for [`TimerWheel::cancel`]. Stale ids are harmless.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimerId {
    key: usize,
    generation: u32,
}

/// Deadlines with values attached.
#[derive(Debug)]
pub struct TimerWheel<T> {
    _p: PhantomData<T>,
}

impl<T> TimerWheel<T> {
    /// A wheel of `slots` buckets of `tick` each, starting at `now`.
    pub fn new(tick: Duration, slots: usize, now: Instant) -> Self {
        let _ = (tick, slots, now);
        todo!()
    }
    /// Arms a timer; it fires at the first `expire` call at or after `deadline`
    /// (never before it).
    pub fn insert(&mut self, deadline: Instant, value: T) -> TimerId {
        let _ = (deadline, value);
        todo!()
    }
    /// Disarms a timer, returning its value if it was still armed.
    pub fn cancel(&mut self, id: TimerId) -> Option<T> {
        let _ = id;
        todo!()
    }
    /// How long `poll` may sleep: `None` when no timer is armed.
    pub fn next_timeout(&self, now: Instant) -> Option<Duration> {
        let _ = now;
        todo!()
    }
    /// Moves every timer due at `now` into `out`.
    pub fn expire(&mut self, now: Instant, out: &mut Vec<T>) {
        let _ = (now, out);
        todo!()
    }
    /// Armed timers.
    pub fn len(&self) -> usize {
        todo!()
    }
    /// No timer armed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
