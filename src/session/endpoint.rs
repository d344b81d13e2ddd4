//! One side of a session: its socket and the readiness seen on it.
//!
//! An endpoint is the only thing that touches its socket. Its I/O methods
//! clear their own readiness bit when the kernel says WouldBlock (or EOF), so
//! no caller can forget to and lose an edge or spin. Dropping an endpoint
//! closes the socket, which also removes it from epoll/kqueue: no separate
//! deregistration syscall.

use std::io;
use std::net::SocketAddr;

use mio::{Interest, Registry, Token};

use super::readiness::{Readiness, Ready};
use crate::io::{Io, Stream};

/// A registered socket and what its readiness edges said.
#[derive(Debug)]
pub(crate) struct Endpoint {
    stream: Stream,
    ready: Readiness,
}

impl Endpoint {
    /// Registers `stream` for both directions, edge-triggered, once for its
    /// whole life: interest is applied in user space.
    pub(crate) fn register(
        mut stream: Stream,
        token: Token,
        registry: &Registry,
    ) -> io::Result<Endpoint> {
        stream.prepare();
        registry.register(&mut stream, token, Interest::READABLE | Interest::WRITABLE)?;
        Ok(Endpoint {
            stream,
            ready: Readiness::default(),
        })
    }

    /// Folds a readiness event in.
    pub(crate) fn absorb(&mut self, ev: &mio::event::Event) {
        self.ready.absorb(ev);
    }

    /// Says what the session wants from this socket now.
    pub(crate) fn want(&mut self, read: bool, write: bool) {
        self.ready.interest.set(Ready::READABLE, read);
        self.ready.interest.set(Ready::WRITABLE, write);
    }

    /// Says whether the session wants to read now.
    pub(crate) fn want_read(&mut self, on: bool) {
        self.ready.interest.set(Ready::READABLE, on);
    }

    /// Says whether the session wants to write now.
    pub(crate) fn want_write(&mut self, on: bool) {
        self.ready.interest.set(Ready::WRITABLE, on);
    }

    /// A read is wanted and may make progress.
    pub(crate) fn can_read(&self) -> bool {
        self.ready.ready().contains(Ready::READABLE)
    }

    /// A write is wanted and may make progress.
    pub(crate) fn can_write(&self) -> bool {
        self.ready.ready().contains(Ready::WRITABLE)
    }

    /// The kernel reported an error: the peer is gone, though bytes it sent
    /// before may still be queued for reading.
    pub(crate) fn failed(&self) -> bool {
        self.ready.event.contains(Ready::ERROR)
    }

    /// Reads into `buf`.
    pub(crate) fn read(&mut self, buf: &mut [u8]) -> Io {
        let io = self.stream.read_into(buf);
        if matches!(io, Io::WouldBlock | Io::Eof) {
            self.ready.event.remove(Ready::READABLE);
        }
        io
    }

    /// Writes from `buf` (never empty).
    pub(crate) fn write(&mut self, buf: &[u8]) -> Io {
        let io = self.stream.write_from(buf);
        if matches!(io, Io::WouldBlock) {
            self.ready.event.remove(Ready::WRITABLE);
        }
        io
    }

    /// Moves bytes from this socket into `pipe` (Linux splice).
    #[cfg(target_os = "linux")]
    pub(crate) fn splice_in(&mut self, pipe: &mut super::passthrough::pipe::Pipe) -> Io {
        use std::os::fd::AsFd;
        let had_bytes = !pipe.is_empty();
        let io = crate::io::retrying(crate::io::Dir::Read, || {
            pipe.splice_from(self.stream.as_fd())
        });
        match io {
            // With bytes in the pipe, EAGAIN may mean the pipe's slots are
            // used up rather than that the socket is dry: keep the socket's
            // readiness; draining the pipe retries it.
            Io::WouldBlock if had_bytes => pipe.mark_full(),
            Io::WouldBlock | Io::Eof => self.ready.event.remove(Ready::READABLE),
            _ => {}
        }
        io
    }

    /// Moves bytes from `pipe` out to this socket (Linux splice).
    #[cfg(target_os = "linux")]
    pub(crate) fn splice_out(&mut self, pipe: &mut super::passthrough::pipe::Pipe) -> Io {
        use std::os::fd::AsFd;
        let io = crate::io::retrying(crate::io::Dir::Write, || {
            pipe.splice_to(self.stream.as_fd())
        });
        if matches!(io, Io::WouldBlock) {
            self.ready.event.remove(Ready::WRITABLE);
        }
        io
    }

    /// Sends our FIN: the peer reads EOF, and may keep sending to us.
    pub(crate) fn shutdown_write(&self) {
        self.stream.shutdown_write();
    }

    /// Makes the coming close abortive (the peer sees a reset).
    pub(crate) fn abort_on_close(&self) {
        self.stream.abort_on_close();
    }

    /// Whether a connect in flight failed (SO_ERROR): the reason, if it did.
    pub(crate) fn connect_error(&self) -> Option<io::Error> {
        self.stream.take_error()
    }

    /// The local address of the socket (for the SOCKS5 reply).
    pub(crate) fn local_addr(&self) -> Option<SocketAddr> {
        match &self.stream {
            Stream::Tcp(s) => s.local_addr().ok(),
            Stream::Unix(_) => None,
        }
    }
}
