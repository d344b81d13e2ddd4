//! A registered UDP socket and the readiness seen on it, with the one
//! classifier for datagram results.
//!
//! UDP errors differ from TCP's: a refused or unreachable destination (an
//! ICMP error the kernel queued, or a send it could not route) is about one
//! datagram, not the socket, which goes on working. Those are
//! [`DgramIo::Dropped`]; only what leaves the socket unusable is
//! [`DgramIo::Failed`].

use std::io;
use std::net::SocketAddr;

use mio::net::UdpSocket;
use mio::{Interest, Registry, Token};

use super::readiness::{Readiness, Ready};

/// What one `recv_from` or `send_to` did.
#[derive(Debug)]
pub(crate) enum DgramIo {
    /// Moved one datagram of this many bytes (0 is a valid datagram).
    Done(usize, SocketAddr),
    /// Nothing to do until the next readiness edge.
    WouldBlock,
    /// This datagram (or, on receive, an earlier send's ICMP error) failed;
    /// the socket is fine.
    Dropped(io::Error),
    /// The socket itself failed.
    Failed(io::Error),
}

/// Sorts a datagram syscall's result; `None` means EINTR: retry.
pub(crate) fn classify(r: io::Result<(usize, SocketAddr)>) -> Option<DgramIo> {
    use nix::errno::Errno;
    let e = match r {
        Ok((n, from)) => return Some(DgramIo::Done(n, from)),
        Err(e) => e,
    };
    match e.kind() {
        io::ErrorKind::WouldBlock => return Some(DgramIo::WouldBlock),
        io::ErrorKind::Interrupted => return None,
        io::ErrorKind::ConnectionRefused
        | io::ErrorKind::ConnectionReset
        | io::ErrorKind::PermissionDenied
        | io::ErrorKind::AddrNotAvailable
        | io::ErrorKind::InvalidInput => return Some(DgramIo::Dropped(e)),
        _ => {}
    }
    match e.raw_os_error().map(Errno::from_raw) {
        // Per datagram: unreachable, too large, no route for this family,
        // the kernel short of buffers for this one.
        Some(
            Errno::EHOSTUNREACH
            | Errno::ENETUNREACH
            | Errno::EHOSTDOWN
            | Errno::ENETDOWN
            | Errno::EMSGSIZE
            | Errno::EAFNOSUPPORT
            | Errno::ENOBUFS
            | Errno::EPERM
            | Errno::EACCES
            | Errno::EDESTADDRREQ,
        ) => Some(DgramIo::Dropped(e)),
        _ => Some(DgramIo::Failed(e)),
    }
}

/// A registered UDP socket.
#[derive(Debug)]
pub(crate) struct Dgram {
    socket: UdpSocket,
    ready: Readiness,
}

impl Dgram {
    /// Registers `socket` for both directions, edge-triggered, once; it is
    /// assumed writable (a fresh UDP socket is).
    pub(crate) fn register(
        mut socket: UdpSocket,
        token: Token,
        registry: &Registry,
    ) -> io::Result<Dgram> {
        registry.register(&mut socket, token, Interest::READABLE | Interest::WRITABLE)?;
        let ready = Readiness {
            event: Ready::WRITABLE,
            ..Readiness::default()
        };
        Ok(Dgram { socket, ready })
    }

    /// The bound address.
    pub(crate) fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Folds a readiness event in.
    pub(crate) fn absorb(&mut self, ev: &mio::event::Event) {
        self.ready.absorb(ev);
    }

    /// Says what the owner wants from this socket now.
    pub(crate) fn want(&mut self, read: bool, write: bool) {
        self.ready.interest.set(Ready::READABLE, read);
        self.ready.interest.set(Ready::WRITABLE, write);
    }

    /// The kernel said a read may make progress.
    pub(crate) fn readable(&self) -> bool {
        self.ready.event.contains(Ready::READABLE) || self.ready.event.contains(Ready::ERROR)
    }

    /// The kernel said a write may make progress.
    pub(crate) fn writable(&self) -> bool {
        self.ready.event.contains(Ready::WRITABLE)
    }

    /// Receives one datagram into `buf` (a datagram longer than `buf` is
    /// cut, as the kernel does).
    pub(crate) fn recv_from(&mut self, buf: &mut [u8]) -> DgramIo {
        let io = loop {
            if let Some(io) = classify(self.socket.recv_from(buf)) {
                break io;
            }
        };
        match io {
            DgramIo::WouldBlock => self.ready.event.remove(Ready::READABLE),
            // A queued error was reported (and so cleared): the error bit
            // said no more than that.
            DgramIo::Dropped(_) => self.ready.event.remove(Ready::ERROR),
            _ => {}
        }
        io
    }

    /// Sends one datagram.
    pub(crate) fn send_to(&mut self, buf: &[u8], to: SocketAddr) -> DgramIo {
        let io = loop {
            if let Some(io) = classify(self.socket.send_to(buf, to).map(|n| (n, to))) {
                break io;
            }
        };
        if let DgramIo::WouldBlock = io {
            self.ready.event.remove(Ready::WRITABLE);
        }
        io
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_datagram_errors_keep_the_socket() {
        let addr: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
        assert!(matches!(classify(Err(refused)), Some(DgramIo::Dropped(_))));
        let big = io::Error::from_raw_os_error(nix::libc::EMSGSIZE);
        assert!(matches!(classify(Err(big)), Some(DgramIo::Dropped(_))));
        let intr = io::Error::from(io::ErrorKind::Interrupted);
        assert!(classify(Err(intr)).is_none());
        let again = io::Error::from(io::ErrorKind::WouldBlock);
        assert!(matches!(classify(Err(again)), Some(DgramIo::WouldBlock)));
        let bad = io::Error::from_raw_os_error(nix::libc::EBADF);
        assert!(matches!(classify(Err(bad)), Some(DgramIo::Failed(_))));
        assert!(matches!(classify(Ok((0, addr))), Some(DgramIo::Done(0, _))));
    }
}
