//! Kernel pipes for `splice(2)`, and the budget that caps them.

use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use nix::fcntl::{fcntl, splice, FcntlArg, OFlag, SpliceFFlags};

/// How many pipes may exist at once, and how many do.
#[derive(Debug, Clone)]
pub(crate) struct PipeBudget {
    live: Arc<AtomicUsize>,
    max: usize,
    size: usize,
    enabled: bool,
}

impl PipeBudget {
    /// `max` pipes of `size` bytes. Splicing into a dead socket raises
    /// SIGPIPE (no MSG_NOSIGNAL through splice), so pipes are used only
    /// when the process ignores SIGPIPE, as Rust programs do by default.
    /// `wanted`: the `limits.splice` setting.
    pub(crate) fn new(max: usize, size: usize, wanted: bool) -> PipeBudget {
        PipeBudget {
            live: Arc::new(AtomicUsize::new(0)),
            max,
            size,
            enabled: wanted && sigpipe_ignored(),
        }
    }

    /// A new pipe, if splicing is on and the budget allows.
    pub(crate) fn take(&self) -> Option<Pipe> {
        if !self.enabled || self.live.load(Relaxed) >= self.max {
            return None;
        }
        match Pipe::new(self.size, Arc::clone(&self.live)) {
            Ok(p) => Some(p),
            Err(e) => {
                // Out of fds, most likely: the buffer path carries on.
                log::debug!("no pipe for splice: {e}");
                None
            }
        }
    }
}

fn sigpipe_ignored() -> bool {
    // SAFETY: a query only (null new action) into a zeroed struct.
    unsafe {
        let mut old: nix::libc::sigaction = std::mem::zeroed();
        nix::libc::sigaction(nix::libc::SIGPIPE, std::ptr::null(), &mut old) == 0
            && old.sa_sigaction == nix::libc::SIG_IGN
    }
}

/// A non-blocking pipe and the bytes in it.
pub(crate) struct Pipe {
    r: OwnedFd,
    w: OwnedFd,
    len: usize,
    cap: usize,
    /// The kernel said the pipe is full (its slots, not our byte count).
    full: bool,
    /// The budget's count (only the reactor thread touches it).
    live: Arc<AtomicUsize>,
}

impl Pipe {
    fn new(size: usize, live: Arc<AtomicUsize>) -> io::Result<Pipe> {
        let (r, w) = nix::unistd::pipe2(OFlag::O_NONBLOCK | OFlag::O_CLOEXEC)?;
        let want = i32::try_from(size).unwrap_or(i32::MAX);
        // The kernel rounds up. If it refuses (past the user's pipe quota,
        // pipe-user-pages-soft, new pipes get a page or two), a small pipe
        // would cost more syscalls than a buffer: use the buffer instead.
        let cap = fcntl(&w, FcntlArg::F_SETPIPE_SZ(want)).map_err(io::Error::from)? as usize;
        if cap < size {
            return Err(io::Error::other(format!("pipe sized {cap}, not {size}")));
        }
        live.fetch_add(1, Relaxed);
        Ok(Pipe {
            r,
            w,
            len: 0,
            cap,
            full: false,
            live,
        })
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes in the pipe.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_full(&self) -> bool {
        self.full || self.len >= self.cap
    }

    fn flags() -> SpliceFFlags {
        SpliceFFlags::SPLICE_F_MOVE | SpliceFFlags::SPLICE_F_NONBLOCK
    }

    /// The kernel said the pipe is full although our count says otherwise
    /// (its slots, not its bytes, ran out).
    pub(crate) fn mark_full(&mut self) {
        self.full = true;
    }

    /// One `splice` from `src` into the pipe; the caller classifies the result.
    pub(crate) fn splice_from(&mut self, src: BorrowedFd<'_>) -> io::Result<usize> {
        let n = splice(src, None, &self.w, None, self.cap - self.len, Self::flags())?;
        self.len += n;
        Ok(n)
    }

    /// One `splice` from the pipe out to `dst`; the caller classifies the result.
    pub(crate) fn splice_to(&mut self, dst: BorrowedFd<'_>) -> io::Result<usize> {
        let n = splice(&self.r, None, dst, None, self.len, Self::flags())?;
        self.len -= n;
        if n > 0 {
            self.full = false;
        }
        Ok(n)
    }
}

impl Drop for Pipe {
    fn drop(&mut self) {
        self.live.fetch_sub(1, Relaxed);
    }
}
