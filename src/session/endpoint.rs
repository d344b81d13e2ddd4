//! One side of a session: its socket and the readiness seen on it.
//!
//! An endpoint is the only thing that touches its socket. Its I/O methods
//! clear their own readiness bit when the kernel says WouldBlock (or EOF), so
//! no caller can forget to and lose an edge or spin. Dropping an endpoint
//! closes the socket, which also removes it from epoll/kqueue: no separate
//! deregistration syscall.

use std::io;

use mio::{Interest, Registry, Token};

use crate::io::readiness::{Readiness, Ready};
use crate::io::{Io, Stream};

/// A registered socket and what its readiness edges said.
#[derive(Debug)]
pub(crate) struct Endpoint {
    stream: Stream,
    ready: Readiness,
    /// A short read after the peer's FIN: EOF is next (no syscall needed).
    drained_to_eof: bool,
    nodelay: Nodelay,
    /// The socket's TLS went to the kernel and no one has counted it yet.
    offloaded: bool,
}

/// Where a socket is with TCP_NODELAY.
///
/// A dialled socket on Linux gets it just before its second write, not at
/// connect: Linux's Nagle (Minshall's variant) holds a partial segment back
/// only while an earlier small one is unacknowledged, so a socket's first
/// write is never delayed, and a tunnel that writes once each way (a health
/// check, one short exchange) saves the `setsockopt`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Nodelay {
    /// Set (or inherited), or not a TCP socket: nothing to do.
    Done,
    /// Not written to yet.
    Unwritten,
    /// Written to once: set it before the next write.
    Due,
}

/// Whether dialled sockets get TCP_NODELAY before their second write
/// rather than at connect (see [`Nodelay`]); elsewhere Nagle may hold the
/// tail of a first large write, so it is set at once.
const LAZY_NODELAY: bool = cfg!(any(target_os = "linux", target_os = "android"));

impl Endpoint {
    /// Our end's address, for a TCP socket (one `getsockname`).
    pub(crate) fn local_addr(&self) -> Option<std::net::SocketAddr> {
        match &self.stream {
            Stream::Tcp(s) => s.local_addr().ok(),
            Stream::Unix(_) => None,
        }
    }

    /// An accepted client socket: registered, and assumed readable and
    /// writable at once, since clients speak first and the request is
    /// usually queued by the time we accept (a wrong guess costs one
    /// EAGAIN; a right one saves a wakeup). TCP_NODELAY was inherited from
    /// the listener where the platform does that.
    pub(crate) fn accepted(
        stream: Stream,
        token: Token,
        registry: &Registry,
    ) -> io::Result<Endpoint> {
        let nodelay = !crate::io::NODELAY_INHERITED;
        let mut ep = Endpoint::register(stream, token, registry, nodelay)?;
        ep.ready.event = Ready::READABLE | Ready::WRITABLE;
        Ok(ep)
    }

    /// A socket we connected (or are connecting): readiness comes from the
    /// kernel's edges only.
    pub(crate) fn dialled(
        stream: Stream,
        token: Token,
        registry: &Registry,
    ) -> io::Result<Endpoint> {
        let tcp = matches!(stream, Stream::Tcp(_));
        let mut ep = Endpoint::register(stream, token, registry, !LAZY_NODELAY)?;
        if LAZY_NODELAY && tcp {
            ep.nodelay = Nodelay::Unwritten;
        }
        Ok(ep)
    }

    /// Registers `stream` for both directions, edge-triggered, once for its
    /// whole life: interest is applied in user space.
    fn register(
        mut stream: Stream,
        token: Token,
        registry: &Registry,
        nodelay: bool,
    ) -> io::Result<Endpoint> {
        stream.prepare(nodelay);
        registry.register(&mut stream, token, Interest::READABLE | Interest::WRITABLE)?;
        Ok(Endpoint {
            stream,
            ready: Readiness::default(),
            drained_to_eof: false,
            nodelay: Nodelay::Done,
            offloaded: false,
        })
    }

    /// TCP keepalive on this socket (see [`Stream::set_keepalive`]).
    pub(crate) fn set_keepalive(&self, idle: Option<std::time::Duration>) {
        self.stream.set_keepalive(idle);
    }

    /// Called before every write: sets TCP_NODELAY when it becomes due.
    fn before_write(&mut self) {
        match self.nodelay {
            Nodelay::Done => {}
            Nodelay::Unwritten => self.nodelay = Nodelay::Due,
            Nodelay::Due => {
                self.stream.set_nodelay();
                self.nodelay = Nodelay::Done;
            }
        }
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

    /// The kernel said a read may make progress (whatever the interest).
    pub(crate) fn readable(&self) -> bool {
        self.ready.event.contains(Ready::READABLE)
    }

    /// The kernel said a write may make progress (whatever the interest).
    pub(crate) fn writable(&self) -> bool {
        self.ready.event.contains(Ready::WRITABLE)
    }

    /// The kernel reported an error: the peer is gone, though bytes it sent
    /// before may still be queued for reading.
    pub(crate) fn failed(&self) -> bool {
        self.ready.event.contains(Ready::ERROR)
    }

    /// The peer has finished sending: its FIN arrived (EPOLLRDHUP), whether
    /// or not the bytes queued ahead of it have been read yet.
    pub(crate) fn peer_finished(&self) -> bool {
        self.ready.event.contains(Ready::READ_CLOSED)
    }

    /// Reads into `buf` (never empty).
    ///
    /// A short read empties the socket's receive queue (TCP and Unix stream
    /// reads return less than asked only then), so the readiness is used up
    /// without spending a syscall on the EAGAIN; anything arriving later
    /// raises a new edge. If the peer's FIN was reported too, the queue ends
    /// in EOF: the next read reports it without a syscall.
    pub(crate) fn read(&mut self, buf: &mut [u8]) -> Io {
        debug_assert!(!buf.is_empty());
        let want = buf.len();
        self.read_with(want, |s| s.read_into(buf))
    }

    /// Reads into the spare capacity of `buf` (see [`Stream::read_spare`]),
    /// with the readiness bookkeeping of [`Endpoint::read`].
    pub(crate) fn read_spare(&mut self, buf: &mut Vec<u8>) -> Io {
        let want = buf.capacity() - buf.len();
        debug_assert!(want > 0);
        self.read_with(want, |s| s.read_spare(buf))
    }

    /// One read of up to `want` bytes by `op`, and what it says about the
    /// socket's readiness.
    fn read_with(&mut self, want: usize, op: impl FnOnce(&mut Stream) -> Io) -> Io {
        if self.eof_known() {
            self.ready.event.remove(Ready::READABLE);
            return Io::Eof;
        }
        let io = op(&mut self.stream);
        match io {
            Io::WouldBlock | Io::Eof => self.ready.event.remove(Ready::READABLE),
            Io::Progress(n) if n < want && !self.ready.event.contains(Ready::READ_CLOSED) => {
                self.ready.event.remove(Ready::READABLE)
            }
            Io::Progress(n) if n < want => self.drained_to_eof = true,
            _ => {}
        }
        io
    }

    /// The receive queue held nothing but the FIN after the last read.
    fn eof_known(&self) -> bool {
        self.drained_to_eof && !self.failed()
    }

    /// Writes from `buf` (never empty). A short write means the send buffer
    /// is full: the writability is used up without an EAGAIN syscall.
    pub(crate) fn write(&mut self, buf: &[u8]) -> Io {
        self.before_write();
        let io = self.stream.write_from(buf);
        match io {
            Io::WouldBlock => self.ready.event.remove(Ready::WRITABLE),
            Io::Progress(n) if n < buf.len() => self.ready.event.remove(Ready::WRITABLE),
            _ => {}
        }
        io
    }

    /// Writes from several buffers with one `writev` (TLS records).
    pub(crate) fn write_vectored(&mut self, bufs: &[std::io::IoSlice<'_>]) -> Io {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if total == 0 {
            return Io::Progress(0);
        }
        self.before_write();
        let io = self.stream.write_vectored_from(bufs);
        match io {
            Io::WouldBlock => self.ready.event.remove(Ready::WRITABLE),
            Io::Progress(n) if n < total => self.ready.event.remove(Ready::WRITABLE),
            _ => {}
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
        let before = pipe.len();
        self.before_write();
        let io = crate::io::retrying(crate::io::Dir::Write, || {
            pipe.splice_to(self.stream.as_fd())
        });
        match io {
            // Everything in the pipe was offered: a short move means the
            // socket's send buffer is full.
            Io::WouldBlock => self.ready.event.remove(Ready::WRITABLE),
            Io::Progress(n) if n < before => self.ready.event.remove(Ready::WRITABLE),
            _ => {}
        }
        io
    }

    /// Attaches the kernel's TLS ULP, keys to follow (see `crate::io::ktls`).
    pub(crate) fn prepare_offload(&mut self) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        crate::io::ktls::attach(self.stream.as_raw_fd())
    }

    /// Hands the socket's TLS to the kernel, after
    /// [`Endpoint::prepare_offload`] (see `crate::io::ktls`).
    pub(crate) fn offload_tls(&mut self, offload: &crate::tls::ktls::Offload) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        crate::io::ktls::install_keys(self.stream.as_raw_fd(), offload)?;
        self.offloaded = true;
        Ok(())
    }

    /// Whether the socket's TLS went to the kernel since the last call
    /// (each hand-off is counted once).
    pub(crate) fn take_offloaded(&mut self) -> bool {
        std::mem::take(&mut self.offloaded)
    }

    /// One read from a kTLS socket, with its record type. Unlike
    /// [`Endpoint::read`], a short read says nothing about the queue (a
    /// control record comes alone), so only WouldBlock and EOF clear the
    /// readiness.
    pub(crate) fn read_record(&mut self, buf: &mut [u8]) -> (Io, u8) {
        use std::os::fd::AsRawFd;
        let fd = self.stream.as_raw_fd();
        let mut kind = crate::tls::ktls::APPLICATION_DATA;
        let io = crate::io::retrying(crate::io::Dir::Read, || {
            crate::io::ktls::recv_record(fd, buf).map(|(n, k)| {
                kind = k;
                n
            })
        });
        if matches!(io, Io::WouldBlock | Io::Eof) {
            self.ready.event.remove(Ready::READABLE);
        }
        (io, kind)
    }

    /// Sends a close_notify on a kTLS socket.
    pub(crate) fn send_close_notify(&mut self) -> Io {
        use std::os::fd::AsRawFd;
        let fd = self.stream.as_raw_fd();
        let io = crate::io::retrying(crate::io::Dir::Write, || {
            crate::io::ktls::send_close_notify(fd)
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodelay(ep: &Endpoint) -> bool {
        match &ep.stream {
            Stream::Tcp(s) => s.nodelay().unwrap(),
            Stream::Unix(_) => unreachable!(),
        }
    }

    #[test]
    fn a_dialled_socket_gets_nodelay_before_its_second_write() {
        let poll = mio::Poll::new().unwrap();
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        c.set_nonblocking(true).unwrap();
        let _peer = l.accept().unwrap();
        let stream = Stream::Tcp(mio::net::TcpStream::from_std(c));
        let mut ep = Endpoint::dialled(stream, Token(1), poll.registry()).unwrap();
        assert_eq!(nodelay(&ep), !LAZY_NODELAY, "at connect");
        assert!(matches!(ep.write(b"one"), Io::Progress(3)));
        assert_eq!(nodelay(&ep), !LAZY_NODELAY, "after the first write");
        assert!(matches!(ep.write(b"two"), Io::Progress(3)));
        assert!(nodelay(&ep), "set before the second write");
    }

    #[test]
    fn an_accepted_socket_inherits_nodelay_from_its_listener() {
        let poll = mio::Poll::new().unwrap();
        let l = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        if crate::io::NODELAY_INHERITED {
            l.set_tcp_nodelay(true).unwrap();
        }
        l.bind(
            &"127.0.0.1:0"
                .parse::<std::net::SocketAddr>()
                .unwrap()
                .into(),
        )
        .unwrap();
        l.listen(1).unwrap();
        let l: std::net::TcpListener = l.into();
        let _c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        s.set_nonblocking(true).unwrap();
        let ep = Endpoint::accepted(
            Stream::Tcp(mio::net::TcpStream::from_std(s)),
            Token(2),
            poll.registry(),
        )
        .unwrap();
        assert!(nodelay(&ep));
    }
}
