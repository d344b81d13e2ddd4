//! One side's byte stream above its transport: plaintext as it is, or TLS
//! (a sans-IO rustls layer) over it. Plaintext in, plaintext out either way,
//! so the same code relays a terminated-TLS connection and a plaintext one.

use super::port::Port;
use crate::io::Io;
use crate::tls::layer::{PeerClose, TlsLayer};

/// Plaintext, or TLS over the transport.
pub(crate) enum Link {
    Plain,
    Tls(Box<Secure>),
}

/// TLS over the transport.
pub(crate) struct Secure {
    pub(crate) layer: TlsLayer,
    /// close_notify is queued: the TCP FIN follows once it is flushed.
    fin_pending: bool,
}

impl Link {
    /// TLS over the transport, through `layer`.
    pub(crate) fn tls(layer: TlsLayer) -> Link {
        Link::Tls(Box::new(Secure {
            layer,
            fin_pending: false,
        }))
    }

    pub(crate) fn is_plain(&self) -> bool {
        matches!(self, Link::Plain)
    }

    /// Says whether plaintext is wanted from this side now.
    pub(crate) fn want_read(&self, port: &mut impl Port, on: bool) {
        match self {
            Link::Plain => port.want_read(on),
            // A handshake in progress reads whatever the caller wants.
            Link::Tls(s) => port.want_read(on || s.layer.is_handshaking()),
        }
    }

    /// Says whether plaintext waits to go to this side.
    pub(crate) fn want_write(&self, port: &mut impl Port, on: bool) {
        match self {
            Link::Plain => port.want_write(on),
            Link::Tls(s) => port.want_write(on || s.layer.wants_write()),
        }
    }

    /// A read may make progress.
    pub(crate) fn can_read(&self, port: &impl Port) -> bool {
        match self {
            Link::Plain => port.can_read(),
            // Staged TLS bytes count: the transport gives no new edge for them.
            Link::Tls(s) => s.layer.has_pending() || port.can_read(),
        }
    }

    /// Reads plaintext into `buf` (never empty).
    pub(crate) fn read(&mut self, port: &mut impl Port, buf: &mut [u8]) -> Io {
        match self {
            Link::Plain => port.read(buf),
            Link::Tls(s) => s.layer.read(port, buf),
        }
    }

    /// Writes plaintext from `buf` (never empty).
    pub(crate) fn write(&mut self, port: &mut impl Port, buf: &[u8]) -> Io {
        match self {
            Link::Plain => port.write(buf),
            Link::Tls(s) => s.layer.write(port, buf),
        }
    }

    /// TLS only: moves what the layer owes the transport (handshake
    /// records, alerts, encrypted data, close_notify) and, while
    /// handshaking, reads and answers the handshake; sends the FIN once a
    /// queued close_notify is out. Returns whether anything moved; `Err`
    /// when the side is gone (with why).
    pub(crate) fn progress(&mut self, port: &mut impl Port) -> Result<bool, std::io::Error> {
        let Link::Tls(s) = self else {
            return Ok(false);
        };
        let wanted = s.layer.wants_write() || s.layer.is_handshaking();
        if !wanted && !s.fin_pending {
            return Ok(false);
        }
        let moved = match s.layer.flush(port) {
            Io::Progress(_) => true,
            Io::WouldBlock | Io::Eof => false,
            Io::PeerGone(e) => return Err(e),
        };
        if s.fin_pending && !s.layer.wants_write() {
            s.fin_pending = false;
            port.shutdown_write();
            return Ok(true);
        }
        Ok(moved)
    }

    /// Ends our sending side: a FIN, or close_notify and then a FIN.
    pub(crate) fn shutdown_write(&mut self, port: &mut impl Port) {
        match self {
            Link::Plain => port.shutdown_write(),
            Link::Tls(s) => {
                s.fin_pending = true;
                let _ = s.layer.shutdown(port);
                if !s.layer.wants_write() {
                    s.fin_pending = false;
                    port.shutdown_write();
                }
            }
        }
    }

    /// The peer's TLS ended with a TCP EOF and no close_notify (plaintext
    /// never says): what it sent may be cut short.
    pub(crate) fn truncated(&self) -> bool {
        matches!(self, Link::Tls(s) if s.layer.peer_close() == Some(PeerClose::Truncated))
    }

    /// A TLS handshake has not finished yet.
    pub(crate) fn is_handshaking(&self) -> bool {
        match self {
            Link::Plain => false,
            Link::Tls(s) => s.layer.is_handshaking(),
        }
    }

    /// What is still owed to the transport below the plaintext (TLS
    /// records, a close_notify): a close must wait for it.
    pub(crate) fn owes_wire(&self) -> bool {
        match self {
            Link::Plain => false,
            Link::Tls(s) => s.layer.wants_write() || s.fin_pending,
        }
    }
}
