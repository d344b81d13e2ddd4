//! Listening sockets: TCP and Unix-domain, each with the protocols it serves.
//!
//! With several workers each has its own copy of every listener
//! ([`Listener::replicate`]): on Linux a TCP listener the proxy binds is
//! bound once per worker with `SO_REUSEPORT`, so the kernel spreads new
//! connections over the workers' sockets; any other listener (Unix, adopted,
//! other systems) is shared as a `dup` of one socket, registered with every
//! worker's poll, and whoever accepts first takes the connection (the
//! others get `WouldBlock`).

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;

use mio::net::{TcpListener, UnixListener};
use mio::{Interest, Registry, Token};

use crate::client::{in_our_netns, is_loopback, peer_cred, Peer, PeerAddr};
use crate::config::{ListenAddr, ListenerConfig, ListenerProtocol};
use crate::io::Stream;

use super::socket_file::{self, SocketFile};

/// A bound listener.
pub(crate) struct Listener {
    socket: Socket,
    pub(crate) protocol: ListenerProtocol,
    pub(crate) local: ListenAddr,
    /// Its clients' sockets are visible to our socket diagnostics (it lives
    /// in our network namespace): loopback clients are identified by uid.
    identify: bool,
    /// Bound with `SO_REUSEPORT`: copies are bound afresh on its address.
    reuse_port: bool,
    /// Registered level-triggered: a wake-up accepts a batch and leaves the
    /// rest for the next poll, so no accept is spent on EAGAIN.
    level: bool,
    pub(crate) batch: AcceptBatch,
}

enum Socket {
    Tcp(TcpListener),
    /// With the socket file, removed on drop if still ours: `None` when
    /// the caller bound it (the file is the caller's).
    Unix {
        /// Kept for its drop, which must come first: while the listener
        /// lives its file's inode cannot be reused, so "same inode" means
        /// "ours".
        _file: Option<SocketFile>,
        listener: UnixListener,
    },
}

impl Listener {
    /// Binds `config`'s address. `shared`: other workers will bind copies
    /// (TCP on Linux: with `SO_REUSEPORT`; see [`Listener::replicate`]).
    pub(crate) fn bind(config: &ListenerConfig, shared: bool) -> io::Result<Listener> {
        let reuse_port = shared && REUSE_PORT && matches!(config.addr, ListenAddr::Tcp(_));
        let (socket, local) = match &config.addr {
            ListenAddr::Tcp(addr) => {
                let l = bind_tcp(*addr, reuse_port)?;
                let local = l.local_addr()?;
                (Socket::Tcp(l), ListenAddr::Tcp(local))
            }
            ListenAddr::Unix(path) => {
                let (s, file) = socket_file::bind(path, &config.unix)?;
                let l = UnixListener::from_std(listen(s)?.into());
                (
                    Socket::Unix {
                        listener: l,
                        _file: Some(file),
                    },
                    ListenAddr::Unix(path.clone()),
                )
            }
        };
        Ok(Listener {
            socket,
            protocol: config.protocol,
            local,
            identify: true,
            reuse_port,
            level: false,
            batch: AcceptBatch::default(),
        })
    }

    /// Another worker's copy: a socket of its own bound to the same address
    /// (its port resolved) with `SO_REUSEPORT`, when this one was bound so;
    /// otherwise a `dup` of this one, and the workers' polls share it.
    pub(crate) fn replicate(&self) -> io::Result<Listener> {
        let socket = match (&self.socket, &self.local) {
            (Socket::Tcp(_), ListenAddr::Tcp(addr)) if self.reuse_port => {
                Socket::Tcp(bind_tcp(*addr, true)?)
            }
            (Socket::Tcp(l), _) => {
                Socket::Tcp(TcpListener::from_std(OwnedFd::from(dup(l)?).into()))
            }
            (Socket::Unix { listener, .. }, _) => Socket::Unix {
                // The socket file stays the first copy's to remove.
                _file: None,
                listener: UnixListener::from_std(OwnedFd::from(dup(listener)?).into()),
            },
        };
        Ok(Listener {
            socket,
            protocol: self.protocol,
            local: self.local.clone(),
            identify: self.identify,
            reuse_port: self.reuse_port,
            level: false,
            batch: AcceptBatch::default(),
        })
    }

    /// Adopts a socket the caller bound and put in the listening state.
    pub(crate) fn from_std(
        listener: crate::io::StdListener,
        protocol: ListenerProtocol,
    ) -> io::Result<Listener> {
        use crate::io::StdListener;
        let check = |s: socket2::SockRef<'_>| -> io::Result<()> {
            #[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
            if !s.is_listener()? {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "the adopted socket is not listening (call listen first)",
                ));
            }
            s.set_nonblocking(true)?;
            s.set_cloexec(true)
        };
        let mut identify = false;
        let (socket, local) = match listener {
            StdListener::Tcp(l) => {
                check(socket2::SockRef::from(&l))?;
                set_nodelay_inherited(&socket2::SockRef::from(&l))?;
                identify = in_our_netns(l.as_fd());
                let local = ListenAddr::Tcp(l.local_addr()?);
                (Socket::Tcp(TcpListener::from_std(l)), local)
            }
            StdListener::Unix(l) => {
                check(socket2::SockRef::from(&l))?;
                let path = l.local_addr()?.as_pathname().map(PathBuf::from);
                let local = ListenAddr::Unix(path.unwrap_or_default());
                (
                    Socket::Unix {
                        listener: UnixListener::from_std(l),
                        _file: None,
                    },
                    local,
                )
            }
        };
        Ok(Listener {
            socket,
            protocol,
            local,
            identify,
            // The caller's socket: copies are dups of it.
            reuse_port: false,
            level: false,
            batch: AcceptBatch::default(),
        })
    }

    /// Bound with `SO_REUSEPORT`: each worker's copy is its own socket.
    pub(crate) fn reuses_port(&self) -> bool {
        self.reuse_port
    }

    /// Whether loopback clients of this listener are looked up by uid.
    pub(crate) fn identifies(&self) -> bool {
        self.identify && matches!(self.socket, Socket::Tcp(_))
    }

    /// Registers for accepts. `exclusive`: no other poll watches this
    /// socket (one worker, or a worker's own `SO_REUSEPORT` copy). Such a
    /// socket is level-triggered on Linux; a shared one (a `dup` several
    /// workers poll) and every listener elsewhere stays edge-triggered and
    /// is drained to EAGAIN.
    pub(crate) fn register(
        &mut self,
        registry: &Registry,
        token: Token,
        exclusive: bool,
    ) -> io::Result<()> {
        self.level = exclusive && LEVEL_TRIGGERED;
        if self.level {
            return add_level_triggered(registry, self.socket.as_fd(), token);
        }
        match &mut self.socket {
            Socket::Tcp(l) => registry.register(l, token, Interest::READABLE),
            Socket::Unix { listener: l, .. } => registry.register(l, token, Interest::READABLE),
        }
    }

    pub(crate) fn deregister(&mut self, registry: &Registry) {
        if self.level {
            // mio did not register it, so mio will not deregister it.
            if let Err(e) = epoll_del(registry, self.socket.as_fd()) {
                log::debug!("listener {}: deregistering: {e}", self.local);
            }
            return;
        }
        let _ = match &mut self.socket {
            Socket::Tcp(l) => registry.deregister(l),
            Socket::Unix { listener: l, .. } => registry.deregister(l),
        };
    }

    /// Accepting pauses (out of fds): a level-triggered listener with a
    /// queue would wake every poll, so it leaves the poll until
    /// [`Listener::resume`]. An edge-triggered one raises no edge for a
    /// queue it was told about already, so it stays.
    pub(crate) fn pause(&mut self, registry: &Registry) {
        if self.level {
            self.deregister(registry);
        }
    }

    /// Accepting resumes after [`Listener::pause`].
    pub(crate) fn resume(&mut self, registry: &Registry, token: Token) -> io::Result<()> {
        if self.level {
            add_level_triggered(registry, self.socket.as_fd(), token)?;
        }
        Ok(())
    }

    /// How many connections this wake-up may accept: no limit for an
    /// edge-triggered listener (it must be drained), else the batch.
    pub(crate) fn accept_budget(&mut self, iteration: u64) -> u32 {
        if self.level {
            self.batch.start(iteration)
        } else {
            u32::MAX
        }
    }

    /// One accept, and who connected (a loopback TCP client's uid not yet
    /// asked: see [`Listener::identify`]). WouldBlock, EINTR and errors are
    /// the caller's to sort.
    pub(crate) fn accept(&self) -> io::Result<(Stream, Peer)> {
        match &self.socket {
            Socket::Tcp(l) => l
                .accept()
                .map(|(s, a)| (Stream::Tcp(s), Peer::tcp(a, None))),
            Socket::Unix { listener: l, .. } => l.accept().map(|(s, _)| {
                let (uid, pid) = peer_cred(&s);
                (Stream::Unix(s), Peer::unix(uid, pid))
            }),
        }
    }

    /// Whether `peer`, accepted here, is a loopback TCP client whose uid
    /// [`Listener::identify`] may ask.
    pub(crate) fn identifiable(&self, peer: &Peer) -> bool {
        self.identify && matches!(peer.addr, PeerAddr::Tcp(a) if is_loopback(a.ip()))
    }

    /// The tuple the kernel knows a loopback client's socket by: its
    /// address and ours (the listener's, unless it listens on every address:
    /// then the kernel says which, one `getsockname`).
    pub(crate) fn tuple(&self, stream: &Stream, peer: &Peer) -> Option<(SocketAddr, SocketAddr)> {
        let (PeerAddr::Tcp(client), Stream::Tcp(s)) = (peer.addr, stream) else {
            return None;
        };
        let server = match self.local {
            ListenAddr::Tcp(ours) if !ours.ip().is_unspecified() => ours,
            _ => s.local_addr().ok()?,
        };
        Some((client, server))
    }
}

impl Listener {
    /// Whether a connection waits in the accept queue. Out of fds, accept
    /// fails with EMFILE before it looks at the queue, so that error alone
    /// does not say a client waits: shedding sessions for nobody would be
    /// wrong. One poll(2), only on that path.
    pub(crate) fn has_pending(&self) -> bool {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let mut fds = [PollFd::new(self.socket.as_fd(), PollFlags::POLLIN)];
        loop {
            match poll(&mut fds, PollTimeout::ZERO) {
                Ok(n) => return n > 0,
                Err(nix::errno::Errno::EINTR) => continue,
                // Cannot tell: assume one waits (the old behaviour).
                Err(_) => return true,
            }
        }
    }
}

impl Socket {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        match self {
            Socket::Tcp(l) => l.as_fd(),
            Socket::Unix { listener, .. } => listener.as_fd(),
        }
    }
}

/// Whether listeners only one poll watches are level-triggered: on Linux,
/// added to mio's epoll instance directly (mio registers everything
/// edge-triggered); the events come back through mio with our token.
const LEVEL_TRIGGERED: bool = cfg!(any(target_os = "linux", target_os = "android"));

#[cfg(any(target_os = "linux", target_os = "android"))]
fn add_level_triggered(
    registry: &Registry,
    fd: std::os::fd::BorrowedFd<'_>,
    token: Token,
) -> io::Result<()> {
    use nix::libc;
    use std::os::fd::AsRawFd;
    let mut ev = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: token.0 as u64,
    };
    // SAFETY: both fds are open for the call; `ev` outlives it.
    let r = unsafe {
        libc::epoll_ctl(
            registry.as_raw_fd(),
            libc::EPOLL_CTL_ADD,
            fd.as_raw_fd(),
            &mut ev,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn epoll_del(registry: &Registry, fd: std::os::fd::BorrowedFd<'_>) -> io::Result<()> {
    use nix::libc;
    use std::os::fd::AsRawFd;
    // SAFETY: both fds are open for the call; DEL ignores the event.
    let r = unsafe {
        libc::epoll_ctl(
            registry.as_raw_fd(),
            libc::EPOLL_CTL_DEL,
            fd.as_raw_fd(),
            std::ptr::null_mut(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn epoll_del(_registry: &Registry, _fd: std::os::fd::BorrowedFd<'_>) -> io::Result<()> {
    // Never called: LEVEL_TRIGGERED is false here.
    Err(io::ErrorKind::Unsupported.into())
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn add_level_triggered(
    _registry: &Registry,
    _fd: std::os::fd::BorrowedFd<'_>,
    _token: Token,
) -> io::Result<()> {
    // Never called: LEVEL_TRIGGERED is false here.
    Err(io::ErrorKind::Unsupported.into())
}

/// How many connections one wake-up accepts from a level-triggered
/// listener: one, so a proxy taking one connection at a time never spends
/// an accept on EAGAIN (the next poll reports whatever is left). When the
/// queue is still non-empty at the very next poll (a burst), the batch
/// doubles, up to [`AcceptBatch::MAX`]; a round that empties the queue
/// brings it back to what it found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AcceptBatch {
    size: u32,
    /// The reactor iteration whose round stopped at the batch, not at EAGAIN.
    full_at: Option<u64>,
}

impl Default for AcceptBatch {
    fn default() -> AcceptBatch {
        AcceptBatch {
            size: 1,
            full_at: None,
        }
    }
}

impl AcceptBatch {
    /// The most connections one wake-up accepts from one listener.
    pub(crate) const MAX: u32 = 64;

    /// A round starts in reactor iteration `iteration`: its budget.
    pub(crate) fn start(&mut self, iteration: u64) -> u32 {
        if self.full_at == Some(iteration.wrapping_sub(1)) {
            self.size = (self.size * 2).min(Self::MAX);
        }
        self.full_at = None;
        self.size
    }

    /// The round accepted `accepted` connections and then found the queue
    /// empty (`emptied`), or stopped at the budget.
    pub(crate) fn end(&mut self, iteration: u64, accepted: u32, emptied: bool) {
        if emptied {
            self.size = accepted.clamp(1, Self::MAX);
        } else {
            self.full_at = Some(iteration);
        }
    }
}

/// Whether workers' TCP listeners are bound with `SO_REUSEPORT` (Linux
/// spreads connections over such a group; elsewhere the option does not
/// balance, so workers share one socket instead).
const REUSE_PORT: bool = cfg!(target_os = "linux");

/// A listening TCP socket on `addr`, optionally in a `SO_REUSEPORT` group
/// (every member is this process's: the kernel lets only the same user
/// join, and the port is already ours).
fn bind_tcp(addr: std::net::SocketAddr, reuse_port: bool) -> io::Result<TcpListener> {
    let s = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        None,
    )?;
    s.set_reuse_address(true)?;
    #[cfg(target_os = "linux")]
    if reuse_port {
        s.set_reuse_port(true)?;
    }
    #[cfg(not(target_os = "linux"))]
    let _ = reuse_port;
    set_nodelay_inherited(&s)?;
    s.bind(&addr.into())?;
    Ok(TcpListener::from_std(listen(s)?.into()))
}

/// A second descriptor on `socket`'s listening socket, close-on-exec; it
/// shares the non-blocking flag (one open file).
fn dup(socket: &impl AsFd) -> io::Result<socket2::Socket> {
    socket2::SockRef::from(socket).try_clone()
}

/// Accept-queue depth. std and mio use 128, which a burst of sandboxed
/// clients overflows (the kernel then drops or resets connections we would
/// have answered); the kernel caps it at `net.core.somaxconn`.
const BACKLOG: i32 = 1024;

/// Sets TCP_NODELAY on a listener, for its accepted sockets to inherit.
fn set_nodelay_inherited(s: &socket2::Socket) -> io::Result<()> {
    if crate::io::NODELAY_INHERITED {
        s.set_tcp_nodelay(true)?;
    }
    Ok(())
}

/// Listens, non-blocking, close-on-exec.
fn listen(s: socket2::Socket) -> io::Result<socket2::Socket> {
    s.listen(BACKLOG)?;
    s.set_nonblocking(true)?;
    s.set_cloexec(true)?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_connection_at_a_time_keeps_a_batch_of_one() {
        let mut b = AcceptBatch::default();
        // Each connection comes several polls after the last one.
        for iteration in (10..100).step_by(5) {
            assert_eq!(b.start(iteration), 1);
            b.end(iteration, 1, false);
        }
    }

    #[test]
    fn a_queue_that_outlasts_a_poll_doubles_the_batch_up_to_the_max() {
        let mut b = AcceptBatch::default();
        let mut sizes = Vec::new();
        for iteration in 1..=9 {
            let n = b.start(iteration);
            sizes.push(n);
            b.end(iteration, n, false);
        }
        assert_eq!(sizes, [1, 2, 4, 8, 16, 32, 64, 64, 64]);
        // The burst is over: the round that empties the queue sets the
        // batch to what it found.
        assert_eq!(b.start(10), AcceptBatch::MAX);
        b.end(10, 3, true);
        assert_eq!(b.start(11), 3);
        b.end(11, 0, true);
        assert_eq!(b.start(12), 1, "never below one");
    }

    #[test]
    fn a_full_round_long_ago_is_no_burst() {
        let mut b = AcceptBatch::default();
        assert_eq!(b.start(1), 1);
        b.end(1, 1, false);
        assert_eq!(b.start(3), 1, "a poll came between");
    }
}
