//! One side's byte stream as a relaying state sees it: a plain socket, or
//! TLS over a socket (plaintext in, plaintext out). Inspect, Passthrough
//! and Closing move bytes through channels, so the same code relays a
//! terminated-TLS connection and a plaintext one.

use std::io::IoSlice;

use super::endpoint::Endpoint;
use crate::io::Io;
use crate::tls::layer::TlsLayer;
use crate::tls::wire::Wire;

/// A socket, or TLS over one.
pub(crate) enum Channel {
    Plain(Endpoint),
    Tls(Box<Secure>),
}

/// TLS over a socket.
pub(crate) struct Secure {
    pub(crate) ep: Endpoint,
    pub(crate) layer: TlsLayer,
    /// close_notify is queued: the TCP FIN follows once it is flushed.
    fin_pending: bool,
}

impl Secure {
    pub(crate) fn new(ep: Endpoint, layer: TlsLayer) -> Secure {
        Secure {
            ep,
            layer,
            fin_pending: false,
        }
    }
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

impl Channel {
    /// The socket under the channel (readiness events go here).
    pub(crate) fn endpoint(&mut self) -> &mut Endpoint {
        match self {
            Channel::Plain(ep) => ep,
            Channel::Tls(s) => &mut s.ep,
        }
    }

    pub(crate) fn is_plain(&self) -> bool {
        matches!(self, Channel::Plain(_))
    }

    /// The plain socket, or the channel back when it carries TLS.
    pub(crate) fn into_plain(self) -> Result<Endpoint, Channel> {
        match self {
            Channel::Plain(ep) => Ok(ep),
            tls @ Channel::Tls(_) => Err(tls),
        }
    }

    /// The kernel reported an error on the socket.
    pub(crate) fn failed(&self) -> bool {
        match self {
            Channel::Plain(ep) => ep.failed(),
            Channel::Tls(s) => s.ep.failed(),
        }
    }

    /// The peer's FIN arrived on the socket (bytes before it may be unread).
    pub(crate) fn peer_finished(&self) -> bool {
        match self {
            Channel::Plain(ep) => ep.peer_finished(),
            Channel::Tls(s) => s.ep.peer_finished(),
        }
    }

    /// Says whether plaintext is wanted from this side now.
    pub(crate) fn want_read(&mut self, on: bool) {
        match self {
            Channel::Plain(ep) => ep.want_read(on),
            // A handshake in progress reads whatever the caller wants.
            Channel::Tls(s) => {
                let handshaking = s.layer.is_handshaking();
                s.ep.want_read(on || handshaking);
            }
        }
    }

    /// Says whether plaintext waits to go to this side.
    pub(crate) fn want_write(&mut self, on: bool) {
        match self {
            Channel::Plain(ep) => ep.want_write(on),
            Channel::Tls(s) => {
                let owed = s.layer.wants_write();
                s.ep.want_write(on || owed);
            }
        }
    }

    /// A read may make progress.
    pub(crate) fn can_read(&self) -> bool {
        match self {
            Channel::Plain(ep) => ep.can_read(),
            // Staged TLS bytes count: the socket gives no new edge for them.
            Channel::Tls(s) => s.layer.has_pending() || s.ep.can_read(),
        }
    }

    /// A write may make progress.
    pub(crate) fn can_write(&self) -> bool {
        match self {
            Channel::Plain(ep) => ep.can_write(),
            Channel::Tls(s) => s.ep.can_write(),
        }
    }

    /// Reads plaintext into `buf` (never empty).
    pub(crate) fn read(&mut self, buf: &mut [u8]) -> Io {
        match self {
            Channel::Plain(ep) => ep.read(buf),
            Channel::Tls(s) => s.layer.read(&mut s.ep, buf),
        }
    }

    /// Writes plaintext from `buf` (never empty).
    pub(crate) fn write(&mut self, buf: &[u8]) -> Io {
        match self {
            Channel::Plain(ep) => ep.write(buf),
            Channel::Tls(s) => s.layer.write(&mut s.ep, buf),
        }
    }

    /// TLS only: moves what the layer owes the wire (handshake records,
    /// alerts, encrypted data, close_notify) and, while handshaking, reads
    /// and answers the handshake; sends the TCP FIN once a queued
    /// close_notify is out. Returns whether anything moved; `Err` when the
    /// side is gone (with why).
    pub(crate) fn progress(&mut self) -> Result<bool, std::io::Error> {
        let Channel::Tls(s) = self else {
            return Ok(false);
        };
        let wanted = s.layer.wants_write() || s.layer.is_handshaking();
        if !wanted && !s.fin_pending {
            return Ok(false);
        }
        let moved = match s.layer.flush(&mut s.ep) {
            Io::Progress(_) => true,
            Io::WouldBlock | Io::Eof => false,
            Io::PeerGone(e) => return Err(e),
        };
        if s.fin_pending && !s.layer.wants_write() {
            s.fin_pending = false;
            s.ep.shutdown_write();
            return Ok(true);
        }
        Ok(moved)
    }

    /// Ends our sending side: a FIN, or close_notify and then a FIN.
    pub(crate) fn shutdown_write(&mut self) {
        match self {
            Channel::Plain(ep) => ep.shutdown_write(),
            Channel::Tls(s) => {
                s.fin_pending = true;
                let _ = s.layer.shutdown(&mut s.ep);
                if !s.layer.wants_write() {
                    s.fin_pending = false;
                    s.ep.shutdown_write();
                }
            }
        }
    }

    /// Makes the coming close abortive (the peer sees a reset).
    pub(crate) fn abort_on_close(&self) {
        match self {
            Channel::Plain(ep) => ep.abort_on_close(),
            Channel::Tls(s) => s.ep.abort_on_close(),
        }
    }

    /// A TLS handshake has not finished yet.
    pub(crate) fn is_handshaking(&self) -> bool {
        match self {
            Channel::Plain(_) => false,
            Channel::Tls(s) => s.layer.is_handshaking(),
        }
    }

    /// What is still owed to the wire below the plaintext (TLS records, a
    /// close_notify): a close must wait for it.
    pub(crate) fn owes_wire(&self) -> bool {
        match self {
            Channel::Plain(_) => false,
            Channel::Tls(s) => s.layer.wants_write() || s.fin_pending,
        }
    }
}
