//! One side's byte stream as a relaying state sees it: its socket, and the
//! core's [`Link`] above it (plaintext, or TLS over the socket). Inspect,
//! Passthrough and Closing move bytes through channels, so the same code
//! relays a terminated-TLS connection and a plaintext one.

use std::io::IoSlice;

use super::endpoint::Endpoint;
use crate::core::link::Link;
use crate::core::port::Port;
use crate::io::Io;
use crate::tls::layer::TlsLayer;
use crate::tls::wire::Wire;

/// A socket, and plaintext or TLS over it.
pub(crate) struct Channel {
    ep: Endpoint,
    link: Link,
}

/// The endpoint as the wire under a TLS layer: it answers `WouldBlock`
/// without a syscall when the kernel has not said it is ready, and clears
/// its own readiness (a TLS layer's `WouldBlock` may be about the handshake,
/// not the socket).
impl Wire for Endpoint {
    fn read(&mut self, buf: &mut [u8]) -> Io {
        if !self.readable() {
            return Io::WouldBlock;
        }
        Endpoint::read(self, buf)
    }

    fn read_spare(&mut self, buf: &mut Vec<u8>) -> Io {
        if !self.readable() {
            return Io::WouldBlock;
        }
        Endpoint::read_spare(self, buf)
    }

    fn write(&mut self, buf: &[u8]) -> Io {
        if !self.writable() {
            return Io::WouldBlock;
        }
        Endpoint::write(self, buf)
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> Io {
        if !self.writable() {
            return Io::WouldBlock;
        }
        self.write_vectored(bufs)
    }
}

/// The endpoint as the core's transport for one side.
impl Port for Endpoint {
    fn want_read(&mut self, on: bool) {
        Endpoint::want_read(self, on)
    }
    fn want_write(&mut self, on: bool) {
        Endpoint::want_write(self, on)
    }
    fn can_read(&self) -> bool {
        Endpoint::can_read(self)
    }
    fn can_write(&self) -> bool {
        Endpoint::can_write(self)
    }
    fn failed(&self) -> bool {
        Endpoint::failed(self)
    }
    fn peer_finished(&self) -> bool {
        Endpoint::peer_finished(self)
    }
    fn shutdown_write(&mut self) {
        Endpoint::shutdown_write(self)
    }
}

impl Channel {
    /// Plaintext over `ep`.
    pub(crate) fn plain(ep: Endpoint) -> Channel {
        Channel {
            ep,
            link: Link::Plain,
        }
    }

    /// TLS over `ep`, through `layer`.
    pub(crate) fn tls(ep: Endpoint, layer: TlsLayer) -> Channel {
        Channel {
            ep,
            link: Link::tls(layer),
        }
    }

    /// A socket and the link above it, together again.
    pub(crate) fn from_parts(ep: Endpoint, link: Link) -> Channel {
        Channel { ep, link }
    }

    /// The socket and the link above it, apart (for the core).
    pub(crate) fn into_parts(self) -> (Endpoint, Link) {
        (self.ep, self.link)
    }

    /// The socket under the channel (readiness events go here).
    pub(crate) fn endpoint(&mut self) -> &mut Endpoint {
        &mut self.ep
    }

    /// The socket, when the channel is plaintext (splice moves its bytes).
    pub(crate) fn plain_endpoint(&mut self) -> Option<&mut Endpoint> {
        self.link.is_plain().then_some(&mut self.ep)
    }

    pub(crate) fn is_plain(&self) -> bool {
        self.link.is_plain()
    }

    /// The kernel reported an error on the socket.
    pub(crate) fn failed(&self) -> bool {
        self.ep.failed()
    }

    /// The peer's FIN arrived on the socket (bytes before it may be unread).
    pub(crate) fn peer_finished(&self) -> bool {
        self.ep.peer_finished()
    }

    /// Says whether plaintext is wanted from this side now.
    pub(crate) fn want_read(&mut self, on: bool) {
        self.link.want_read(&mut self.ep, on)
    }

    /// Says whether plaintext waits to go to this side.
    pub(crate) fn want_write(&mut self, on: bool) {
        self.link.want_write(&mut self.ep, on)
    }

    /// A read may make progress.
    pub(crate) fn can_read(&self) -> bool {
        self.link.can_read(&self.ep)
    }

    /// A write may make progress.
    pub(crate) fn can_write(&self) -> bool {
        self.ep.can_write()
    }

    /// Reads plaintext into `buf` (never empty).
    pub(crate) fn read(&mut self, buf: &mut [u8]) -> Io {
        self.link.read(&mut self.ep, buf)
    }

    /// Writes plaintext from `buf` (never empty).
    pub(crate) fn write(&mut self, buf: &[u8]) -> Io {
        self.link.write(&mut self.ep, buf)
    }

    /// See [`Link::progress`].
    pub(crate) fn progress(&mut self) -> Result<bool, std::io::Error> {
        self.link.progress(&mut self.ep)
    }

    /// Ends our sending side: a FIN, or close_notify and then a FIN.
    pub(crate) fn shutdown_write(&mut self) {
        self.link.shutdown_write(&mut self.ep)
    }

    /// Makes the coming close abortive (the peer sees a reset).
    pub(crate) fn abort_on_close(&self) {
        self.ep.abort_on_close()
    }

    /// See [`Link::owes_wire`].
    pub(crate) fn owes_wire(&self) -> bool {
        self.link.owes_wire()
    }
}
