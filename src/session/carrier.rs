//! What holds a direction's bytes in flight: a user-space buffer, or on
//! Linux a kernel pipe moved with `splice(2)`, so bulk payload never enters
//! user space.
//!
//! A flow starts on a pooled buffer. Only a flow that fills its buffer (bulk
//! traffic) trades it for a pipe, and only while the pipe budget lasts: a
//! pipe costs two fds, and idle or chatty tunnels must cost none.

use crate::buffer::ByteBuf;
use crate::io::{Io, Stream};

/// What one attempt to read into a carrier did.
pub(crate) enum Fill {
    Moved,
    Eof,
    /// The source has nothing now (clear its readiness).
    Dry,
    /// The carrier has no room (keep the source's readiness).
    Full,
    Gone,
}

pub(crate) enum Carrier {
    Buf(ByteBuf),
    #[cfg(target_os = "linux")]
    Pipe(pipe::Pipe),
}

impl Carrier {
    pub(crate) fn is_empty(&self) -> bool {
        match self {
            Carrier::Buf(b) => b.is_empty(),
            #[cfg(target_os = "linux")]
            Carrier::Pipe(p) => p.is_empty(),
        }
    }

    pub(crate) fn is_full(&self) -> bool {
        match self {
            Carrier::Buf(b) => b.is_full(),
            #[cfg(target_os = "linux")]
            Carrier::Pipe(p) => p.is_full(),
        }
    }

    /// One read from `src`.
    pub(crate) fn fill(&mut self, src: &mut Stream) -> Fill {
        match self {
            Carrier::Buf(b) => {
                if b.is_full() {
                    return Fill::Full;
                }
                match src.read_into(b.space()) {
                    Io::Progress(n) => {
                        b.commit(n);
                        Fill::Moved
                    }
                    Io::WouldBlock => Fill::Dry,
                    Io::Eof => Fill::Eof,
                    Io::PeerGone(e) => {
                        log::debug!("read: {e}");
                        Fill::Gone
                    }
                }
            }
            #[cfg(target_os = "linux")]
            Carrier::Pipe(p) => p.fill(src),
        }
    }

    /// One write to `dst`; `Progress(n)` says how many bytes left.
    pub(crate) fn drain(&mut self, dst: &mut Stream) -> Io {
        match self {
            Carrier::Buf(b) => {
                let io = dst.write_from(b.data());
                if let Io::Progress(n) = io {
                    b.consume(n);
                }
                io
            }
            #[cfg(target_os = "linux")]
            Carrier::Pipe(p) => p.drain(dst),
        }
    }
}

#[cfg(target_os = "linux")]
pub(crate) mod pipe {
    //! Kernel pipes for `splice(2)`, and the budget that caps them.

    use std::io;
    use std::os::fd::{AsFd, OwnedFd};
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
    use std::sync::Arc;

    use nix::errno::Errno;
    use nix::fcntl::{fcntl, splice, FcntlArg, OFlag, SpliceFFlags};

    use super::Fill;
    use crate::io::{Io, Stream};

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
        pub(crate) fn new(max: usize, size: usize) -> PipeBudget {
            PipeBudget {
                live: Arc::new(AtomicUsize::new(0)),
                max,
                size,
                enabled: sigpipe_ignored(),
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

        pub(crate) fn is_full(&self) -> bool {
            self.full || self.len >= self.cap
        }

        fn flags() -> SpliceFFlags {
            SpliceFFlags::SPLICE_F_MOVE | SpliceFFlags::SPLICE_F_NONBLOCK
        }

        pub(crate) fn fill(&mut self, src: &mut Stream) -> Fill {
            if self.is_full() {
                return Fill::Full;
            }
            loop {
                match splice(
                    src.as_fd(),
                    None,
                    &self.w,
                    None,
                    self.cap - self.len,
                    Self::flags(),
                ) {
                    Ok(0) => return Fill::Eof,
                    Ok(n) => {
                        self.len += n;
                        return Fill::Moved;
                    }
                    Err(Errno::EINTR) => {}
                    // With bytes in the pipe, EAGAIN may mean its slots are
                    // used up rather than that the socket is dry: keep the
                    // socket's readiness; draining the pipe retries it.
                    Err(Errno::EAGAIN) if self.len > 0 => {
                        self.full = true;
                        return Fill::Full;
                    }
                    Err(Errno::EAGAIN) => return Fill::Dry,
                    Err(e) => {
                        log::debug!("splice read: {e}");
                        return Fill::Gone;
                    }
                }
            }
        }

        pub(crate) fn drain(&mut self, dst: &mut Stream) -> Io {
            loop {
                match splice(&self.r, None, dst.as_fd(), None, self.len, Self::flags()) {
                    Ok(0) => return Io::PeerGone(io::ErrorKind::WriteZero.into()),
                    Ok(n) => {
                        self.len -= n;
                        self.full = false;
                        return Io::Progress(n);
                    }
                    Err(Errno::EINTR) => {}
                    Err(Errno::EAGAIN) => return Io::WouldBlock,
                    Err(e) => return Io::PeerGone(e.into()),
                }
            }
        }
    }

    impl Drop for Pipe {
        fn drop(&mut self) {
            self.live.fetch_sub(1, Relaxed);
        }
    }
}
