//! Who a client is: the peer of an accepted connection, and the key the
//! per-client limits count it under.

use std::net::IpAddr;

/// Whom a limit counts: a TCP client's address, or a Unix-socket peer's uid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ClientKey {
    Ip(IpAddr),
    Uid(u32),
    /// A Unix-socket peer whose uid the platform would not tell.
    Unix,
}

/// Who connected, for logs and per-client limits.
#[derive(Debug, Clone)]
pub(crate) enum Peer {
    Tcp(std::net::SocketAddr),
    /// A Unix-socket peer, by uid where the platform tells it.
    Unix(Option<u32>),
}

impl Peer {
    pub(crate) fn key(&self) -> ClientKey {
        match self {
            Peer::Tcp(a) => ClientKey::Ip(a.ip()),
            Peer::Unix(Some(uid)) => ClientKey::Uid(*uid),
            Peer::Unix(None) => ClientKey::Unix,
        }
    }
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Peer::Tcp(a) => write!(f, "{a}"),
            Peer::Unix(Some(uid)) => write!(f, "unix:uid={uid}"),
            Peer::Unix(None) => f.write_str("unix"),
        }
    }
}

/// The uid of a Unix-socket peer.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn peer_uid(s: &mio::net::UnixStream) -> Option<u32> {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    getsockopt(s, PeerCredentials).ok().map(|c| c.uid())
}

/// The uid of a Unix-socket peer.
#[cfg(any(
    target_os = "macos",
    target_os = "ios",
    target_os = "freebsd",
    target_os = "openbsd",
    target_os = "netbsd"
))]
pub(crate) fn peer_uid(s: &mio::net::UnixStream) -> Option<u32> {
    use std::os::fd::AsFd;
    nix::unistd::getpeereid(s.as_fd())
        .ok()
        .map(|(uid, _)| uid.as_raw())
}

/// Elsewhere the uid is unknown: such peers share one per-client count.
#[cfg(not(any(
    target_os = "linux",
    target_os = "android",
    target_os = "macos",
    target_os = "ios",
    target_os = "freebsd",
    target_os = "openbsd",
    target_os = "netbsd"
)))]
pub(crate) fn peer_uid(_: &mio::net::UnixStream) -> Option<u32> {
    None
}
