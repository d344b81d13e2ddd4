//! The one place that looks at socket results.
//!
//! Every read and write in the relay goes through [`Stream::read_into`] and
//! [`Stream::write_from`], which retry EINTR and sort every other result into
//! an [`Io`] outcome. Callers then have exactly four cases to handle, and a
//! dead peer is always [`Io::PeerGone`], whatever errno said it.

pub(crate) mod dgram;
pub(crate) mod ktls;
pub(crate) mod readiness;
mod std_listener;

use std::io::{self, Read};
use std::net::Shutdown;
use std::os::fd::{AsRawFd, RawFd};

use mio::event::Source;
use mio::net::{TcpStream, UnixStream};
use mio::{Interest, Registry, Token};

pub use std_listener::StdListener;

/// What one read or write did.
#[derive(Debug)]
pub(crate) enum Io {
    /// Moved this many bytes (never 0).
    Progress(usize),
    /// A read returned 0: the peer finished sending (half-close).
    Eof,
    /// Nothing to do until the next readiness edge.
    WouldBlock,
    /// The peer is gone (EPIPE, ECONNRESET, ENOTCONN, any read error, ...).
    PeerGone(io::Error),
}

/// Which way a syscall moved bytes: a read of 0 is EOF, a write of 0 is not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dir {
    Read,
    Write,
}

/// The one classifier: sorts a read, write or splice result into an [`Io`]
/// outcome. `None` means EINTR: retry the call.
pub(crate) fn classify(r: io::Result<usize>, dir: Dir) -> Option<Io> {
    match r {
        Ok(0) if dir == Dir::Read => Some(Io::Eof),
        // A write of a non-empty buffer that moves nothing: treat as gone
        // rather than retry forever.
        Ok(0) => Some(Io::PeerGone(io::ErrorKind::WriteZero.into())),
        Ok(n) => Some(Io::Progress(n)),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Some(Io::WouldBlock),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => None,
        Err(e) => Some(Io::PeerGone(e)),
    }
}

/// Runs `op` until it is not interrupted, and classifies its result.
pub(crate) fn retrying(dir: Dir, mut op: impl FnMut() -> io::Result<usize>) -> Io {
    loop {
        if let Some(io) = classify(op(), dir) {
            return io;
        }
    }
}

/// What a failed `accept` means: the one classifier both accept loops
/// (the proxy's listeners and the admin listener) use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AcceptError {
    /// EINTR: accept again now.
    Retry,
    /// EAGAIN: the queue is empty.
    Drained,
    /// The connection died in the backlog (ECONNABORTED, ECONNRESET, or a
    /// network error pending on it: EPROTO, ENETUNREACH, ...): nothing to
    /// serve; the next one may be fine.
    Skip,
    /// EMFILE, ENFILE: the process (or the system) is out of file descriptors.
    OutOfFds,
    /// Anything else (ENOBUFS, ENOMEM, ...): retrying now would fail the same way.
    Fatal,
}

/// Sorts a failed `accept` into an [`AcceptError`].
pub(crate) fn classify_accept(e: &io::Error) -> AcceptError {
    use nix::errno::Errno;
    match e.kind() {
        io::ErrorKind::WouldBlock => return AcceptError::Drained,
        io::ErrorKind::Interrupted => return AcceptError::Retry,
        io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset => {
            return AcceptError::Skip
        }
        _ => {}
    }
    match e.raw_os_error().map(Errno::from_raw) {
        Some(Errno::EMFILE | Errno::ENFILE) => AcceptError::OutOfFds,
        // accept(2), Linux: network errors already pending on the new
        // connection are the connection's, not the listener's ("treat them
        // like EAGAIN by retrying"); each took its connection off the queue.
        // Not EPERM (a security module refuses before any is dequeued, so
        // it repeats) nor EOPNOTSUPP (the listener's own type): retried at
        // once, those would spin.
        Some(
            Errno::EPROTO
            | Errno::ENOPROTOOPT
            | Errno::EHOSTDOWN
            | Errno::EHOSTUNREACH
            | Errno::ENETDOWN
            | Errno::ENETUNREACH,
        ) => AcceptError::Skip,
        #[cfg(any(target_os = "linux", target_os = "android"))]
        Some(Errno::ENONET) => AcceptError::Skip,
        _ => AcceptError::Fatal,
    }
}

/// Whether accepted TCP sockets inherit TCP_NODELAY from their listener
/// (Linux and the BSDs copy it into the new socket), so setting it once on
/// the listener saves a `setsockopt` per connection.
pub(crate) const NODELAY_INHERITED: bool = cfg!(any(
    target_os = "linux",
    target_os = "android",
    target_vendor = "apple",
    target_os = "freebsd",
    target_os = "openbsd",
    target_os = "netbsd"
));

/// A connected stream socket: TCP, or Unix-domain for sandboxes handed a socket path.
#[derive(Debug)]
pub(crate) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    /// Reads into `buf`, retrying EINTR.
    pub(crate) fn read_into(&mut self, buf: &mut [u8]) -> Io {
        retrying(Dir::Read, || match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        })
    }

    /// Reads into the spare capacity of `buf` (not empty), retrying EINTR,
    /// and extends it by what was read: no zeroing of memory the kernel is
    /// about to overwrite (a terminated TLS download stages 64 KiB a read).
    pub(crate) fn read_spare(&mut self, buf: &mut Vec<u8>) -> Io {
        let len = buf.len();
        let room = buf.capacity() - len;
        debug_assert!(room > 0);
        let fd = self.as_raw_fd();
        let io = retrying(Dir::Read, || {
            // SAFETY: the pointer and length describe `buf`'s spare
            // capacity, writable and unaliased for the call; the kernel
            // initialises the first `n` bytes it returns.
            let n = unsafe { nix::libc::recv(fd, buf.as_mut_ptr().add(len).cast(), room, 0) };
            if n < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(n as usize)
            }
        });
        if let Io::Progress(n) = io {
            // SAFETY: recv initialised these `n <= room` bytes.
            unsafe { buf.set_len(len + n) };
        }
        io
    }

    /// Writes from `buf`, retrying EINTR. Never raises SIGPIPE: MSG_NOSIGNAL
    /// on Linux, SO_NOSIGPIPE (set by [`Stream::prepare`]) elsewhere.
    pub(crate) fn write_from(&mut self, buf: &[u8]) -> Io {
        debug_assert!(!buf.is_empty());
        let fd = self.as_raw_fd();
        retrying(Dir::Write, || send_nosignal(fd, buf))
    }

    /// Writes from several buffers at once (`sendmsg`), retrying EINTR;
    /// never raises SIGPIPE.
    pub(crate) fn write_vectored_from(&mut self, bufs: &[std::io::IoSlice<'_>]) -> Io {
        let fd = self.as_raw_fd();
        retrying(Dir::Write, || sendmsg_nosignal(fd, bufs))
    }

    /// Sends our FIN: the peer reads EOF, and may keep sending to us.
    pub(crate) fn shutdown_write(&self) {
        // ENOTCONN here means the peer already went; the next read says so.
        let _ = match self {
            Stream::Tcp(s) => s.shutdown(Shutdown::Write),
            Stream::Unix(s) => s.shutdown(Shutdown::Write),
        };
    }

    /// Makes the coming close abortive: the peer sees a reset, not a FIN, as
    /// it would have from the end that aborted.
    pub(crate) fn abort_on_close(&self) {
        let _ = socket2::SockRef::from(self).set_linger(Some(std::time::Duration::ZERO));
    }

    /// Per-socket options every relayed socket gets. `nodelay`: set
    /// TCP_NODELAY here (accepted sockets may have inherited it already).
    pub(crate) fn prepare(&self, nodelay: bool) {
        if nodelay {
            self.set_nodelay();
        }
        #[cfg(target_vendor = "apple")]
        {
            let _ = socket2::SockRef::from(self).set_nosigpipe(true);
        }
    }

    /// TCP keepalive (TCP only): probes after `idle` without traffic, every
    /// 10 s, 6 of them; `None` leaves it off. Best effort: a socket that
    /// refuses it still relays (logged at debug).
    pub(crate) fn set_keepalive(&self, idle: Option<std::time::Duration>) {
        let (Some(idle), Stream::Tcp(s)) = (idle, self) else {
            return;
        };
        let ka = socket2::TcpKeepalive::new()
            .with_time(idle)
            .with_interval(std::time::Duration::from_secs(10))
            .with_retries(6);
        if let Err(e) = socket2::SockRef::from(s).set_tcp_keepalive(&ka) {
            log::debug!("cannot set TCP keepalive: {e}");
        }
    }

    /// Sets TCP_NODELAY (TCP only). We forward whatever arrives as soon as
    /// it arrives; Nagle would only add latency to interactive tunnels (ssh,
    /// kubectl exec).
    pub(crate) fn set_nodelay(&self) {
        if let Stream::Tcp(s) = self {
            let _ = s.set_nodelay(true);
        }
    }

    /// The pending socket error (SO_ERROR), if any.
    pub(crate) fn take_error(&self) -> Option<io::Error> {
        let r = match self {
            Stream::Tcp(s) => s.take_error(),
            Stream::Unix(s) => s.take_error(),
        };
        match r {
            Ok(e) => e,
            Err(e) => Some(e),
        }
    }
}

#[cfg(target_os = "linux")]
fn send_nosignal(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: `buf` is a valid slice for the duration of the call and `fd` is
    // a socket we own.
    let n = unsafe { nix::libc::send(fd, buf.as_ptr().cast(), buf.len(), nix::libc::MSG_NOSIGNAL) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

fn sendmsg_nosignal(fd: RawFd, bufs: &[std::io::IoSlice<'_>]) -> io::Result<usize> {
    #[cfg(target_os = "linux")]
    let flags = nix::sys::socket::MsgFlags::MSG_NOSIGNAL;
    #[cfg(not(target_os = "linux"))]
    let flags = nix::sys::socket::MsgFlags::empty();
    nix::sys::socket::sendmsg::<()>(fd, bufs, &[], flags, None).map_err(io::Error::from)
}

#[cfg(not(target_os = "linux"))]
fn send_nosignal(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: as above; SO_NOSIGPIPE is set on every relayed socket.
    let n = unsafe { nix::libc::write(fd, buf.as_ptr().cast(), buf.len()) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
        }
    }
}

impl std::os::fd::AsFd for Stream {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        // SAFETY: the fd is open for as long as `self` is borrowed.
        unsafe { std::os::fd::BorrowedFd::borrow_raw(self.as_raw_fd()) }
    }
}

impl Source for Stream {
    fn register(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.register(r, t, i),
            Stream::Unix(s) => s.register(r, t, i),
        }
    }
    fn reregister(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.reregister(r, t, i),
            Stream::Unix(s) => s.reregister(r, t, i),
        }
    }
    fn deregister(&mut self, r: &Registry) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.deregister(r),
            Stream::Unix(s) => s.deregister(r),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification() {
        assert!(matches!(classify(Ok(0), Dir::Read), Some(Io::Eof)));
        assert!(matches!(classify(Ok(0), Dir::Write), Some(Io::PeerGone(_))));
        assert!(matches!(classify(Ok(7), Dir::Write), Some(Io::Progress(7))));
        assert!(classify(Err(io::ErrorKind::Interrupted.into()), Dir::Read).is_none());
        assert!(matches!(
            classify(Err(io::ErrorKind::WouldBlock.into()), Dir::Read),
            Some(Io::WouldBlock)
        ));
        for kind in [
            io::ErrorKind::BrokenPipe,
            io::ErrorKind::ConnectionReset,
            io::ErrorKind::NotConnected,
        ] {
            assert!(matches!(
                classify(Err(kind.into()), Dir::Write),
                Some(Io::PeerGone(_))
            ));
        }
    }

    #[test]
    fn read_spare_appends_what_arrived_and_nothing_more() {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        b.set_nonblocking(true).unwrap();
        let mut st = Stream::Unix(UnixStream::from_std(b));
        let mut buf = Vec::with_capacity(16);
        buf.extend_from_slice(b"ab");
        assert!(matches!(st.read_spare(&mut buf), Io::WouldBlock));
        assert_eq!(buf, b"ab", "nothing read, nothing added");
        std::io::Write::write_all(&mut &a, b"cdefghijklmnopqrstuvwxyz").unwrap();
        assert!(
            matches!(st.read_spare(&mut buf), Io::Progress(14)),
            "the room only"
        );
        assert_eq!(buf, b"abcdefghijklmnop");
        drop(a);
        let mut rest = Vec::with_capacity(64);
        assert!(matches!(st.read_spare(&mut rest), Io::Progress(10)));
        assert_eq!(rest, b"qrstuvwxyz");
        assert!(matches!(st.read_spare(&mut rest), Io::Eof));
    }

    #[test]
    fn accept_errors() {
        use nix::libc;
        let os = io::Error::from_raw_os_error;
        for (e, want) in [
            (os(libc::EAGAIN), AcceptError::Drained),
            (io::ErrorKind::WouldBlock.into(), AcceptError::Drained),
            (os(libc::EINTR), AcceptError::Retry),
            (os(libc::ECONNABORTED), AcceptError::Skip),
            (os(libc::ECONNRESET), AcceptError::Skip),
            (os(libc::EPROTO), AcceptError::Skip),
            (os(libc::ENETUNREACH), AcceptError::Skip),
            (os(libc::EHOSTUNREACH), AcceptError::Skip),
            (os(libc::EPERM), AcceptError::Fatal),
            (os(libc::EOPNOTSUPP), AcceptError::Fatal),
            (os(libc::EMFILE), AcceptError::OutOfFds),
            (os(libc::ENFILE), AcceptError::OutOfFds),
            (os(libc::ENOBUFS), AcceptError::Fatal),
            (os(libc::ENOMEM), AcceptError::Fatal),
            (io::Error::other("no errno"), AcceptError::Fatal),
        ] {
            assert_eq!(classify_accept(&e), want, "{e}");
        }
    }

    #[test]
    fn write_to_a_closed_peer_is_peer_gone_not_sigpipe() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        drop(s);
        c.set_nonblocking(true).unwrap();
        let mut st = Stream::Tcp(TcpStream::from_std(c));
        let mut gone = false;
        for _ in 0..1000 {
            match st.write_from(&[0u8; 4096]) {
                Io::PeerGone(_) => {
                    gone = true;
                    break;
                }
                _ => std::thread::sleep(std::time::Duration::from_millis(1)),
            }
        }
        assert!(gone, "writes to a closed peer must end in PeerGone");
    }
}
