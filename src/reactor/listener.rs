//! Listening sockets: TCP and Unix-domain, each with the protocols it serves.

use std::io;
use std::os::fd::AsFd;
use std::path::PathBuf;

use mio::net::{TcpListener, UnixListener};
use mio::{Interest, Registry, Token};

use crate::client::{in_our_netns, peer_cred, Identify, Peer};
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
    pub(crate) fn bind(config: &ListenerConfig) -> io::Result<Listener> {
        let (socket, local) = match &config.addr {
            ListenAddr::Tcp(addr) => {
                let s = socket2::Socket::new(
                    socket2::Domain::for_address(*addr),
                    socket2::Type::STREAM,
                    None,
                )?;
                s.set_reuse_address(true)?;
                set_nodelay_inherited(&s)?;
                s.bind(&(*addr).into())?;
                let l = TcpListener::from_std(listen(s)?.into());
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
        })
    }

    /// Adopts a socket the caller bound and put in the listening state.
    pub(crate) fn from_std(
        listener: crate::api::StdListener,
        protocol: ListenerProtocol,
    ) -> io::Result<Listener> {
        use crate::api::StdListener;
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
        })
    }

    /// Whether loopback clients of this listener are looked up by uid.
    pub(crate) fn identifies(&self) -> bool {
        self.identify && matches!(self.socket, Socket::Tcp(_))
    }

    pub(crate) fn register(&mut self, registry: &Registry, token: Token) -> io::Result<()> {
        match &mut self.socket {
            Socket::Tcp(l) => registry.register(l, token, Interest::READABLE),
            Socket::Unix { listener: l, .. } => registry.register(l, token, Interest::READABLE),
        }
    }

    pub(crate) fn deregister(&mut self, registry: &Registry) {
        let _ = match &mut self.socket {
            Socket::Tcp(l) => registry.deregister(l),
            Socket::Unix { listener: l, .. } => registry.deregister(l),
        };
    }

    /// One accept, and who connected. WouldBlock, EINTR and errors are the
    /// caller's to sort.
    pub(crate) fn accept(&self, identify: &mut Identify) -> io::Result<(Stream, Peer)> {
        match &self.socket {
            Socket::Tcp(l) => l.accept().map(|(s, a)| {
                // Our end of the tuple: the listener's address, unless it
                // listens on every address (then the kernel says which).
                let uid = self
                    .identify
                    .then(|| {
                        identify.loopback_uid(a, || match self.local {
                            ListenAddr::Tcp(ours) if !ours.ip().is_unspecified() => Some(ours),
                            _ => s.local_addr().ok(),
                        })
                    })
                    .flatten();
                (Stream::Tcp(s), Peer::tcp(a, uid))
            }),
            Socket::Unix { listener: l, .. } => l.accept().map(|(s, _)| {
                let (uid, pid) = peer_cred(&s);
                (Stream::Unix(s), Peer::unix(uid, pid))
            }),
        }
    }
}

/// Accept-queue depth. std and mio use 128, which a burst of sandboxed
/// clients overflows (the kernel then drops or resets connections we would
/// have answered); the kernel caps it at `net.core.somaxconn`.
const BACKLOG: i32 = 1024;

/// Listens, non-blocking, close-on-exec.
/// Sets TCP_NODELAY on a listener, for its accepted sockets to inherit.
fn set_nodelay_inherited(s: &socket2::Socket) -> io::Result<()> {
    if crate::io::NODELAY_INHERITED {
        s.set_tcp_nodelay(true)?;
    }
    Ok(())
}

fn listen(s: socket2::Socket) -> io::Result<socket2::Socket> {
    s.listen(BACKLOG)?;
    s.set_nonblocking(true)?;
    s.set_cloexec(true)?;
    Ok(s)
}
