//! What the open-file limit can hold.
//!
//! Every tunnel holds two descriptors, so the limit on open files, not
//! memory, is what runs out first. From the soft `RLIMIT_NOFILE` (the binary
//! raises it to the hard limit at start) come the default session limits
//! ([`crate::Limits::default`]), the splice pipe budget, and the thresholds
//! at which the reactor starts shedding load. The split of a limit `N`:
//!
//! ```text
//! N = FIXED (stdio, poll, waker, netlink, listeners)
//!   + reserve R = max(16, N/64)   (answers to refused clients, DNS lookups, files)
//!   + 2 x pipes,  pipes = min(512, N/16)
//!   + 2 x max_sessions
//! ```

/// Descriptors set aside for the process itself: stdio, the poll and waker
/// fds, the netlink socket, listeners, log files.
pub(crate) const FIXED: usize = 32;
/// Splice pipes at most, whatever the limit.
pub(crate) const MAX_PIPES: usize = 512;
/// What an unlimited (or unreadable) limit counts as: Linux's default
/// `fs.nr_open`, the most a process could open anyway.
pub(crate) const UNLIMITED: usize = 1 << 20;

/// The soft open-file limit now; `None` when unlimited or unreadable.
pub(crate) fn nofile_limit() -> Option<u64> {
    use nix::sys::resource::{getrlimit, Resource, RLIM_INFINITY};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, _)) if soft != RLIM_INFINITY => Some(soft),
        _ => None,
    }
}

/// Descriptors this process has open now (Linux: `/proc/self/fd`), or
/// [`FIXED`] where that cannot be counted.
pub(crate) fn open_fds() -> usize {
    match std::fs::read_dir("/proc/self/fd") {
        // The directory's own fd is listed too.
        Ok(dir) => dir.count().saturating_sub(1),
        Err(_) => FIXED,
    }
}

/// How an open-file limit is split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FdBudget {
    /// The soft limit (`UNLIMITED` if none).
    pub(crate) limit: usize,
    /// Splice pipes (two fds each) at most.
    pub(crate) pipes: usize,
    /// Fds never planned for sessions.
    pub(crate) reserve: usize,
}

impl FdBudget {
    /// The split of `limit` (`None`: unlimited).
    pub(crate) fn for_limit(limit: Option<u64>) -> FdBudget {
        let n = limit.map_or(UNLIMITED, |n| n.min(UNLIMITED as u64) as usize);
        FdBudget {
            limit: n,
            pipes: (n / 16).min(MAX_PIPES),
            reserve: (n / 64).max(16),
        }
    }

    /// The split of this process's limit now.
    pub(crate) fn current() -> FdBudget {
        FdBudget::for_limit(nofile_limit())
    }

    /// Sessions the limit holds at two fds each, after the fixed fds, the
    /// reserve and the pipes: the default `max_sessions` (at least 1).
    pub(crate) fn sessions(&self) -> usize {
        let spoken_for = FIXED + self.reserve + 2 * self.pipes;
        (self.limit.saturating_sub(spoken_for) / 2).max(1)
    }

    /// Fds held at which the reactor is under fd pressure: new clients at
    /// or above the mean number of sessions per client are refused. Two
    /// reserves below the limit (pipes aside), so with the default limits
    /// the last sessions go only to lighter clients.
    pub(crate) fn pressure_at(&self) -> usize {
        self.limit.saturating_sub(2 * self.pipes + 2 * self.reserve)
    }

    /// Fds held past which a refused client is closed at once, unanswered:
    /// an answer would hold an fd the reserve is keeping.
    pub(crate) fn silent_at(&self) -> usize {
        self.limit.saturating_sub(2 * self.pipes + self.reserve)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits() {
        // The hard limit on the development machine.
        let b = FdBudget::for_limit(Some(20_000));
        assert_eq!((b.pipes, b.reserve), (512, 312));
        assert_eq!(b.sessions(), (20_000 - 32 - 312 - 1024) / 2);
        // The common default soft limit: fewer pipes, same shape.
        let b = FdBudget::for_limit(Some(1024));
        assert_eq!((b.pipes, b.reserve), (64, 16));
        assert_eq!(b.sessions(), (1024 - 32 - 16 - 128) / 2);
        // Tiny limits still allow one session.
        assert_eq!(FdBudget::for_limit(Some(16)).sessions(), 1);
        assert_eq!(FdBudget::for_limit(Some(0)).sessions(), 1);
        // Unlimited counts as nr_open.
        assert_eq!(FdBudget::for_limit(None).limit, UNLIMITED);
        assert_eq!(FdBudget::for_limit(Some(u64::MAX)).limit, UNLIMITED);
    }

    #[test]
    fn thresholds_are_ordered_and_inside_the_limit() {
        for n in [0, 16, 64, 256, 1024, 2048, 20_000, 1 << 20] {
            let b = FdBudget::for_limit(Some(n));
            assert!(b.pressure_at() <= b.silent_at(), "{n}");
            assert!(b.silent_at() <= b.limit, "{n}");
            assert!(2 * b.pipes <= b.limit / 8, "{n}");
        }
    }

    #[test]
    fn default_sessions_reach_into_the_pressure_zone() {
        // With a handful of fds open at start, a proxy full of default
        // sessions is under pressure: the last ones go to lighter clients.
        for n in [2048u64, 20_000, 1 << 20] {
            let b = FdBudget::for_limit(Some(n));
            let held_when_full = 10 + 2 * b.sessions();
            assert!(held_when_full >= b.pressure_at(), "{n}");
            assert!(held_when_full < b.silent_at(), "{n}");
        }
    }
}
