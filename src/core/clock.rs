//! A stage's one deadline, kept by the core that runs the stage (the
//! handshake, the resolve and connect, a terminated tunnel's start, a
//! raw tunnel's vetting, the close). The shell arms the session's timer
//! on [`Deadline::at`] (through each core's `poll_timeout`) and hands the
//! time back to the core's `handle_timeout`, which decides whether it has
//! passed and what that means; the simulator does the same in virtual
//! time.

use std::time::{Duration, Instant};

/// When a stage runs out of time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Deadline(Instant);

impl Deadline {
    /// `limit` from `now`.
    pub(crate) fn after(now: Instant, limit: Duration) -> Deadline {
        Deadline(now + limit)
    }

    /// The instant it passes.
    pub(crate) fn at(self) -> Instant {
        self.0
    }

    /// It has passed by `now` (a timer fires at the deadline, not after).
    pub(crate) fn passed(self, now: Instant) -> bool {
        now >= self.0
    }
}
