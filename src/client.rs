//! Who a client is: the peer of an accepted connection, and the key the
//! per-client limits count it under.
//!
//! A loopback address names no one (any local process may bind 127.0.0.2,
//! .3, ... as its source), so a loopback TCP client is the uid that owns its
//! socket, asked of the kernel by the connection's tuple ([`sockdiag`]); a
//! Unix-socket peer is its uid from `SO_PEERCRED`; any other TCP client is
//! its IP address. The same uid over TCP and over a Unix socket is one
//! client.

pub(crate) mod sockdiag;

use std::net::{IpAddr, SocketAddr};

pub(crate) use sockdiag::SockDiag;

/// Whom a limit counts: a local uid, a remote client's address, or a
/// Unix-socket peer whose uid the platform would not tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ClientKey {
    Ip(IpAddr),
    Uid(u32),
    /// A Unix-socket peer whose uid the platform would not tell.
    Unix,
    /// Loopback TCP clients not asked for their uid: while nothing reads it
    /// (no access line, no login, the pool far from any per-client limit),
    /// the lookup is saved and they are counted together, against every
    /// local client's limits (see `reactor::admission`).
    Loopback,
}

impl ClientKey {
    /// A loopback TCP client the kernel named no uid for: all of them are
    /// one client, whichever loopback address they bound (addresses would
    /// let one be as many clients as it likes).
    pub(crate) const UNNAMED_LOOPBACK: ClientKey =
        ClientKey::Ip(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST));

    /// Whether this client may own sessions counted under
    /// [`ClientKey::Loopback`]: any local one (a uid, a Unix peer, a
    /// loopback address the kernel could not put a uid to).
    pub(crate) fn is_local(self) -> bool {
        match self {
            ClientKey::Uid(_) | ClientKey::Unix => true,
            ClientKey::Ip(ip) => is_loopback(ip),
            ClientKey::Loopback => false,
        }
    }
}

/// Where a client connected from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PeerAddr {
    Tcp(SocketAddr),
    /// A Unix-socket peer, with its pid (from `SO_PEERCRED`; TCP clients
    /// have none: finding it costs a scan of /proc). Kept here, not beside
    /// the uid, so that a peer is 8 bytes smaller in every session.
    Unix {
        pid: Option<u32>,
    },
}

/// Who connected, for logs and per-client limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Peer {
    pub(crate) addr: PeerAddr,
    /// The uid owning the client's socket: a Unix-socket peer's, or a
    /// loopback TCP client's when the kernel told it.
    pub(crate) uid: Option<u32>,
}

impl Peer {
    /// A TCP client, with the uid owning its socket if known.
    pub(crate) fn tcp(addr: SocketAddr, uid: Option<u32>) -> Peer {
        Peer {
            addr: PeerAddr::Tcp(addr),
            uid,
        }
    }

    /// A Unix-socket client.
    pub(crate) fn unix(uid: Option<u32>, pid: Option<u32>) -> Peer {
        Peer {
            addr: PeerAddr::Unix { pid },
            uid,
        }
    }

    /// A Unix-socket peer's pid, when the kernel told it.
    pub(crate) fn pid(&self) -> Option<u32> {
        match self.addr {
            PeerAddr::Unix { pid } => pid,
            PeerAddr::Tcp(_) => None,
        }
    }

    /// The key per-client limits count this peer under. A loopback client
    /// whose uid the kernel would not tell counts as 127.0.0.1, whichever
    /// loopback address it chose: addresses would let it be as many clients
    /// as it likes.
    pub(crate) fn key(&self) -> ClientKey {
        match (self.addr, self.uid) {
            (_, Some(uid)) => ClientKey::Uid(uid),
            (PeerAddr::Tcp(a), None) if is_loopback(a.ip()) => ClientKey::UNNAMED_LOOPBACK,
            (PeerAddr::Tcp(a), None) => ClientKey::Ip(a.ip().to_canonical()),
            (PeerAddr::Unix { .. }, None) => ClientKey::Unix,
        }
    }

    /// ` client_uid=N client_pid=M`, as far as known: for access lines.
    pub(crate) fn ids(&self) -> String {
        let mut s = String::new();
        if let Some(uid) = self.uid {
            s.push_str(&format!(" client_uid={uid}"));
        }
        if let Some(pid) = self.pid() {
            s.push_str(&format!(" client_pid={pid}"));
        }
        s
    }
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.addr {
            PeerAddr::Tcp(a) => write!(f, "{a}"),
            PeerAddr::Unix { .. } => f.write_str("unix"),
        }
    }
}

/// True for a loopback address (127.0.0.0/8, ::1, ::ffff:127.x.y.z): a
/// client any local process could be.
pub(crate) fn is_loopback(ip: IpAddr) -> bool {
    ip.to_canonical().is_loopback()
}

/// Finds who owns loopback TCP clients' sockets, for the reactor's life.
#[derive(Debug)]
pub(crate) struct Identify {
    diag: Option<SockDiag>,
    /// A failed lookup was logged already (once is enough).
    warned: bool,
}

impl Identify {
    /// Opens the socket diagnostics socket if `needed` (some listener has
    /// loopback TCP clients to identify); without it (another OS, a seccomp
    /// filter) loopback clients are all one client (127.0.0.1), and a
    /// warning says so.
    pub(crate) fn new(needed: bool) -> Identify {
        if !needed {
            return Identify {
                diag: None,
                warned: true,
            };
        }
        let diag = match SockDiag::open() {
            Ok(d) => Some(d),
            Err(e) => {
                #[cfg(any(target_os = "linux", target_os = "android"))]
                log::warn!(
                    "socket diagnostics unavailable ({e}): loopback clients are not told apart (all count as 127.0.0.1)"
                );
                #[cfg(not(any(target_os = "linux", target_os = "android")))]
                let _ = e;
                None
            }
        };
        Identify {
            diag,
            warned: false,
        }
    }

    /// Whether loopback clients can be asked for (the diagnostics socket is
    /// open).
    pub(crate) fn available(&self) -> bool {
        self.diag.is_some()
    }

    /// The uid owning the client socket at `client` connected to our
    /// `server` address, for a loopback client; `None` for any other client
    /// or when the kernel cannot tell (the client is already gone, or lives
    /// in another network namespace).
    pub(crate) fn loopback_uid(
        &mut self,
        client: SocketAddr,
        server: impl FnOnce() -> Option<SocketAddr>,
    ) -> Option<u32> {
        if !is_loopback(client.ip()) {
            return None;
        }
        let diag = self.diag.as_mut()?;
        match diag.owner(client, server()?) {
            Ok(owner) => owner.map(|o| o.uid),
            Err(e) => {
                if !self.warned {
                    self.warned = true;
                    log::warn!("{client}: socket owner lookup failed ({e}); such clients count as one, 127.0.0.1");
                }
                None
            }
        }
    }
}

/// The uid owning the UDP socket a datagram `from` a loopback sender to our
/// socket at `to` came from (`None`: closed since). Asked for each datagram
/// of a port-0 association until its port is fixed (the association keeps
/// the last foreign sender's answer for a while), on a socket kept per
/// thread: no descriptor opened per datagram, none to fail at the fd limit.
pub(crate) fn udp_sender_uid(from: SocketAddr, to: SocketAddr) -> std::io::Result<Option<u32>> {
    with_diag(|diag| diag.udp_owner(from, to)).map(|o| o.map(|o| o.uid))
}

/// The uid owning the loopback TCP client socket at `client` connected to
/// our `server` address (`None`: unknown), asked once, for an association
/// whose accept did not ask it (access lines off).
pub(crate) fn tcp_owner_uid(client: SocketAddr, server: SocketAddr) -> Option<u32> {
    match with_diag(|diag| diag.owner(client, server)) {
        Ok(owner) => owner.map(|o| o.uid),
        Err(e) => {
            log::debug!("{client}: socket owner lookup failed ({e})");
            None
        }
    }
}

/// Runs `ask` on this thread's socket diagnostics socket, opened at first
/// use; one that failed is closed (the next call opens another).
fn with_diag<T>(ask: impl FnOnce(&mut SockDiag) -> std::io::Result<T>) -> std::io::Result<T> {
    thread_local! {
        static DIAG: std::cell::RefCell<Option<SockDiag>> = const { std::cell::RefCell::new(None) };
    }
    DIAG.with(|cell| {
        let mut slot = cell.borrow_mut();
        let diag = match &mut *slot {
            Some(d) => d,
            empty => empty.insert(SockDiag::open()?),
        };
        let answer = ask(diag);
        if answer.is_err() {
            *slot = None;
        }
        answer
    })
}

/// Whether a socket lives in this process's network namespace: only then
/// does our socket-diagnostics socket see its clients (a listener made in
/// another namespace, as `portcullis run` does, would have its tuples looked
/// up among the host's sockets, and could match a stranger's).
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn in_our_netns(socket: std::os::fd::BorrowedFd<'_>) -> bool {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::fs::MetadataExt;
    // SAFETY: SIOCGSKNS takes no argument and returns a new fd (or -1).
    let ns = unsafe { nix::libc::ioctl(socket.as_raw_fd(), nix::libc::SIOCGSKNS as _) };
    if ns < 0 {
        return false;
    }
    // SAFETY: the ioctl returned a new descriptor that nothing else owns.
    let ns = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(ns) });
    match (ns.metadata(), std::fs::metadata("/proc/self/ns/net")) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// Elsewhere there is no lookup to protect.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(crate) fn in_our_netns(_: std::os::fd::BorrowedFd<'_>) -> bool {
    true
}

/// The uid and pid of a Unix-socket peer.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn peer_cred(s: &mio::net::UnixStream) -> (Option<u32>, Option<u32>) {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    match getsockopt(s, PeerCredentials) {
        Ok(c) => (
            Some(c.uid()),
            u32::try_from(c.pid()).ok().filter(|&p| p > 0),
        ),
        Err(_) => (None, None),
    }
}

/// The uid of a Unix-socket peer (the pid is not told here).
#[cfg(any(
    target_os = "macos",
    target_os = "ios",
    target_os = "freebsd",
    target_os = "openbsd",
    target_os = "netbsd"
))]
pub(crate) fn peer_cred(s: &mio::net::UnixStream) -> (Option<u32>, Option<u32>) {
    use std::os::fd::AsFd;
    let uid = nix::unistd::getpeereid(s.as_fd())
        .ok()
        .map(|(uid, _)| uid.as_raw());
    (uid, None)
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
pub(crate) fn peer_cred(_: &mio::net::UnixStream) -> (Option<u32>, Option<u32>) {
    (None, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        let a: SocketAddr = "127.0.0.2:5000".parse().unwrap();
        assert_eq!(Peer::tcp(a, Some(7)).key(), ClientKey::Uid(7));
        // The same uid over a Unix socket is the same client.
        assert_eq!(Peer::unix(Some(7), Some(42)).key(), ClientKey::Uid(7));
        // Without a uid, every loopback address is one client.
        let one = ClientKey::Ip("127.0.0.1".parse().unwrap());
        for other in ["127.0.0.2:5000", "[::1]:1", "[::ffff:127.9.9.9]:1"] {
            assert_eq!(
                Peer::tcp(other.parse().unwrap(), None).key(),
                one,
                "{other}"
            );
        }
        let remote: SocketAddr = "10.0.0.2:5000".parse().unwrap();
        assert_eq!(Peer::tcp(remote, None).key(), ClientKey::Ip(remote.ip()));
        // An IPv4 client on a dual-stack listener is keyed as IPv4.
        let mapped: SocketAddr = "[::ffff:10.0.0.1]:1".parse().unwrap();
        assert_eq!(
            Peer::tcp(mapped, None).key(),
            ClientKey::Ip("10.0.0.1".parse().unwrap())
        );
        assert_eq!(Peer::unix(None, None).key(), ClientKey::Unix);
    }

    #[test]
    fn loopback_in_every_spelling() {
        for ip in ["127.0.0.1", "127.9.8.7", "::1", "::ffff:127.0.0.2"] {
            assert!(is_loopback(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["10.0.0.1", "::2", "::ffff:10.0.0.1", "0.0.0.0"] {
            assert!(!is_loopback(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn a_listener_of_ours_is_in_our_netns() {
        use std::os::fd::AsFd;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        assert!(in_our_netns(l.as_fd()));
    }

    #[test]
    fn display_and_ids() {
        let p = Peer::tcp("127.0.0.3:4".parse().unwrap(), Some(65534));
        assert_eq!(format!("{p}{}", p.ids()), "127.0.0.3:4 client_uid=65534");
        let u = Peer::unix(Some(0), Some(99));
        assert_eq!(format!("{u}{}", u.ids()), "unix client_uid=0 client_pid=99");
        assert_eq!(Peer::unix(None, None).ids(), "");
    }
}
