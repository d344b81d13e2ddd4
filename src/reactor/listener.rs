//! Listening sockets: TCP and Unix-domain, each with the protocols it serves.

use std::io;
use std::path::PathBuf;

use mio::net::{TcpListener, UnixListener};
use mio::{Interest, Registry, Token};

use crate::client::{peer_uid, Peer};
use crate::config::{ListenAddr, ListenerConfig, ListenerProtocol};
use crate::io::Stream;

/// A bound listener.
pub(crate) struct Listener {
    socket: Socket,
    pub(crate) protocol: ListenerProtocol,
    pub(crate) local: ListenAddr,
}

enum Socket {
    Tcp(TcpListener),
    /// With the socket file to remove on drop: `None` when the caller bound it.
    Unix(UnixListener, Option<PathBuf>),
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
                remove_stale_socket(path)?;
                let s = socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None)?;
                s.bind(&socket2::SockAddr::unix(path)?)?;
                let l = UnixListener::from_std(listen(s)?.into());
                (
                    Socket::Unix(l, Some(path.clone())),
                    ListenAddr::Unix(path.clone()),
                )
            }
        };
        Ok(Listener {
            socket,
            protocol: config.protocol,
            local,
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
        let (socket, local) = match listener {
            StdListener::Tcp(l) => {
                check(socket2::SockRef::from(&l))?;
                set_nodelay_inherited(&socket2::SockRef::from(&l))?;
                let local = ListenAddr::Tcp(l.local_addr()?);
                (Socket::Tcp(TcpListener::from_std(l)), local)
            }
            StdListener::Unix(l) => {
                check(socket2::SockRef::from(&l))?;
                let path = l.local_addr()?.as_pathname().map(PathBuf::from);
                let local = ListenAddr::Unix(path.unwrap_or_default());
                (Socket::Unix(UnixListener::from_std(l), None), local)
            }
        };
        Ok(Listener {
            socket,
            protocol,
            local,
        })
    }

    pub(crate) fn register(&mut self, registry: &Registry, token: Token) -> io::Result<()> {
        match &mut self.socket {
            Socket::Tcp(l) => registry.register(l, token, Interest::READABLE),
            Socket::Unix(l, _) => registry.register(l, token, Interest::READABLE),
        }
    }

    pub(crate) fn deregister(&mut self, registry: &Registry) {
        let _ = match &mut self.socket {
            Socket::Tcp(l) => registry.deregister(l),
            Socket::Unix(l, _) => registry.deregister(l),
        };
    }

    /// One accept. WouldBlock, EINTR and errors are the caller's to sort.
    pub(crate) fn accept(&self) -> io::Result<(Stream, Peer)> {
        match &self.socket {
            Socket::Tcp(l) => l.accept().map(|(s, a)| (Stream::Tcp(s), Peer::Tcp(a))),
            Socket::Unix(l, _) => l.accept().map(|(s, _)| {
                let uid = peer_uid(&s);
                (Stream::Unix(s), Peer::Unix(uid))
            }),
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Socket::Unix(_, Some(path)) = &self.socket {
            let _ = std::fs::remove_file(path);
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

/// Replaces a socket file left by an earlier run, but never a regular file.
fn remove_stale_socket(path: &std::path::Path) -> io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => std::fs::remove_file(path),
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} exists and is not a socket", path.display()),
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}
