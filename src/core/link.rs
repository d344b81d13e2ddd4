//! One side's byte stream above its transport: plaintext as it is, or TLS
//! (a sans-IO rustls layer) over it, or TLS the kernel runs (kTLS) after
//! the rustls layer handed it its keys. Plaintext in, plaintext out every
//! way, so the same code relays a terminated-TLS connection and a
//! plaintext one.
//!
//! The hand-off is the one transition here ([`Link::settle`]): a TLS link
//! allowed to offload moves to [`Link::Kernel`] at the first quiet moment
//! after its handshake (see `TlsLayer::ready_to_offload`), before any other
//! read or write, so no byte is ever read raw from a socket the kernel
//! decrypts or the other way round.

use super::port::Port;
use crate::io::Io;
use crate::tls::ktls::{self, Control, Record, Support};
use crate::tls::layer::{PeerClose, TlsLayer};

/// Plaintext, TLS over the transport, or TLS in the kernel.
pub(crate) enum Link {
    Plain,
    Tls(Box<Secure>),
    Kernel(Box<Kernel>),
}

/// TLS over the transport.
pub(crate) struct Secure {
    pub(crate) layer: TlsLayer,
    /// close_notify is queued: the TCP FIN follows once it is flushed.
    fin_pending: bool,
    /// The ciphers the kernel may take over (none: never).
    offload: Support,
}

/// TLS the kernel runs: the transport reads and writes plaintext; what is
/// left for us is its control records and the close.
pub(crate) struct Kernel {
    control: Control,
    peer_close: Option<PeerClose>,
    /// close_notify is still to be sent, then the FIN.
    fin_pending: bool,
    /// Why this side cannot go on (the hand-off failed, or a control
    /// record the kernel cannot follow).
    failed: Option<String>,
}

impl Link {
    /// TLS over the transport, through `layer`, kept in user space.
    #[cfg(test)]
    pub(crate) fn tls(layer: TlsLayer) -> Link {
        Link::tls_offloading(layer, Support::NONE)
    }

    /// TLS through `layer`, handed to the kernel after the handshake when
    /// `offload` takes the negotiated cipher.
    pub(crate) fn tls_offloading(layer: TlsLayer, offload: Support) -> Link {
        Link::Tls(Box::new(Secure {
            layer,
            fin_pending: false,
            offload,
        }))
    }

    pub(crate) fn is_plain(&self) -> bool {
        matches!(self, Link::Plain)
    }

    /// The transport carries this side's plaintext itself (plain, or kTLS),
    /// so bytes may be spliced to and from it.
    pub(crate) fn splices(&self) -> bool {
        match self {
            Link::Plain => true,
            Link::Tls(_) => false,
            // A failed hand-off's socket carries nothing we may move raw.
            Link::Kernel(k) => k.failed.is_none(),
        }
    }

    /// Hands a quiet, finished TLS layer to the kernel when it may: the one
    /// place a link changes kind. A failed hand-off leaves a kernel link
    /// that reports the failure on every call (the rustls layer is spent).
    pub(crate) fn settle(&mut self, port: &mut impl Port) {
        let Link::Tls(s) = self else {
            return;
        };
        if !s.offload.any() || s.fin_pending || !s.layer.ready_to_offload() {
            return;
        }
        match s.layer.cipher_suite() {
            Some(suite) if s.offload.allows(suite) => {}
            _ => return,
        }
        // The ULP first, while the rustls layer is still whole: a socket the
        // kernel refuses it (the peer's FIN is in: ENOTCONN) keeps its TLS
        // in user space rather than losing the session.
        if let Err(e) = port.prepare_offload() {
            log::debug!("kTLS: this side's TLS stays in user space ({e})");
            s.offload = Support::NONE;
            return;
        }
        let Link::Tls(s) = std::mem::replace(self, Link::Plain) else {
            unreachable!("checked above");
        };
        let failed = s
            .layer
            .into_offload()
            .and_then(|o| {
                port.offload_tls(&o)
                    .map_err(|e| format!("handing TLS to the kernel: {e}"))
            })
            .err();
        if let Some(why) = &failed {
            log::warn!("kTLS: {why}; the session closes ({})", ktls::FIX);
        }
        *self = Link::Kernel(Box::new(Kernel {
            control: Control::default(),
            peer_close: None,
            fin_pending: false,
            failed,
        }));
    }

    /// Says whether plaintext is wanted from this side now.
    pub(crate) fn want_read(&self, port: &mut impl Port, on: bool) {
        match self {
            Link::Plain => port.want_read(on),
            // A handshake in progress reads whatever the caller wants.
            Link::Tls(s) => port.want_read(on || s.layer.is_handshaking()),
            Link::Kernel(_) => port.want_read(on),
        }
    }

    /// Says whether plaintext waits to go to this side.
    pub(crate) fn want_write(&self, port: &mut impl Port, on: bool) {
        match self {
            Link::Plain => port.want_write(on),
            Link::Tls(s) => port.want_write(on || s.layer.wants_write()),
            Link::Kernel(k) => port.want_write(on || k.fin_pending),
        }
    }

    /// A read may make progress.
    pub(crate) fn can_read(&self, port: &impl Port) -> bool {
        match self {
            Link::Plain => port.can_read(),
            // Staged TLS bytes count: the transport gives no new edge for them.
            Link::Tls(s) => s.layer.has_pending() || port.can_read(),
            Link::Kernel(_) => port.can_read(),
        }
    }

    /// Reads plaintext into `buf` (never empty).
    pub(crate) fn read(&mut self, port: &mut impl Port, buf: &mut [u8]) -> Io {
        self.settle(port);
        match self {
            Link::Plain => port.read(buf),
            Link::Tls(s) => s.layer.read(port, buf),
            Link::Kernel(k) => k.read(port, buf),
        }
    }

    /// Writes plaintext from `buf` (never empty).
    pub(crate) fn write(&mut self, port: &mut impl Port, buf: &[u8]) -> Io {
        self.settle(port);
        match self {
            Link::Plain => port.write(buf),
            Link::Tls(s) => s.layer.write(port, buf),
            Link::Kernel(k) => match &k.failed {
                Some(why) => Io::PeerGone(std::io::Error::other(why.clone())),
                None if k.fin_pending => Io::PeerGone(std::io::ErrorKind::BrokenPipe.into()),
                None => port.write(buf),
            },
        }
    }

    /// TLS only: moves what the layer owes the transport (handshake
    /// records, alerts, encrypted data, close_notify) and, while
    /// handshaking, reads and answers the handshake; sends the FIN once a
    /// queued close_notify is out. Returns whether anything moved; `Err`
    /// when the side is gone (with why).
    pub(crate) fn progress(&mut self, port: &mut impl Port) -> Result<bool, std::io::Error> {
        let moved = self.progress_tls(port);
        self.settle(port);
        moved
    }

    fn progress_tls(&mut self, port: &mut impl Port) -> Result<bool, std::io::Error> {
        let s = match self {
            Link::Plain => return Ok(false),
            Link::Kernel(k) => return k.progress(port),
            Link::Tls(s) => s,
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
            Link::Kernel(k) => {
                if k.failed.is_none() {
                    k.fin_pending = true;
                    let _ = k.progress(port);
                } else {
                    port.shutdown_write();
                }
            }
        }
    }

    /// The peer's TLS ended with a TCP EOF and no close_notify (plaintext
    /// never says): what it sent may be cut short.
    pub(crate) fn truncated(&self) -> bool {
        match self {
            Link::Plain => false,
            Link::Tls(s) => s.layer.peer_close() == Some(PeerClose::Truncated),
            Link::Kernel(k) => k.peer_close == Some(PeerClose::Truncated),
        }
    }

    /// A TLS handshake has not finished yet.
    pub(crate) fn is_handshaking(&self) -> bool {
        match self {
            Link::Plain | Link::Kernel(_) => false,
            Link::Tls(s) => s.layer.is_handshaking(),
        }
    }

    /// What is still owed to the transport below the plaintext (TLS
    /// records, a close_notify): a close must wait for it.
    pub(crate) fn owes_wire(&self) -> bool {
        match self {
            Link::Plain => false,
            Link::Tls(s) => s.layer.wants_write() || s.fin_pending,
            Link::Kernel(k) => k.fin_pending,
        }
    }
}

impl Link {
    /// A kTLS side whose next record is not data (a splice stopped at it):
    /// reads just that record and handles it. `Progress(0)` when it was
    /// handled and splicing may go on (the socket keeps its readiness);
    /// `Eof` for a close_notify; data where a control record was due fails
    /// the side, as nothing may carry it.
    /// (Only splice stops at one: Linux.)
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn read_control(&mut self, port: &mut impl Port) -> Io {
        let Link::Kernel(k) = self else {
            return Io::PeerGone(std::io::Error::other("not a kernel TLS side"));
        };
        // A record's plaintext is at most 16 KiB (2^14).
        let mut record = [0u8; 16 * 1024 + 256];
        k.read_one(port, &mut record, false)
    }
}

impl Kernel {
    /// Reads plaintext: data records' bytes; control records are handled
    /// here and reading goes on.
    fn read(&mut self, port: &mut impl Port, buf: &mut [u8]) -> Io {
        loop {
            match self.read_one(port, buf, true) {
                Io::Progress(0) => {}
                io => return io,
            }
        }
    }

    /// One record's read: `Progress(0)` when it was a control record
    /// handled here (read on), data bytes only where `data_ok`.
    fn read_one(&mut self, port: &mut impl Port, buf: &mut [u8], data_ok: bool) -> Io {
        if let Some(why) = &self.failed {
            return Io::PeerGone(std::io::Error::other(why.clone()));
        }
        if self.peer_close.is_some() {
            return Io::Eof;
        }
        let (io, kind) = port.read_record(buf);
        let n = match io {
            Io::Progress(n) => n,
            Io::Eof => {
                self.peer_close = Some(PeerClose::Truncated);
                return Io::Eof;
            }
            other => return other,
        };
        match self.control.on_record(kind, &buf[..n]) {
            Record::Data if data_ok => Io::Progress(n),
            Record::Data => self.fail("data where a control record was due".into()),
            Record::Skip => Io::Progress(0),
            Record::CloseNotify => {
                self.peer_close = Some(PeerClose::CloseNotify);
                Io::Eof
            }
            Record::Fail(why) => self.fail(why),
        }
    }

    fn fail(&mut self, why: String) -> Io {
        log::info!("kTLS: {why}");
        let e = std::io::Error::other(why.clone());
        self.failed = Some(why);
        Io::PeerGone(e)
    }

    /// Sends a pending close_notify, then the FIN.
    fn progress(&mut self, port: &mut impl Port) -> Result<bool, std::io::Error> {
        if let Some(why) = &self.failed {
            return Err(std::io::Error::other(why.clone()));
        }
        if !self.fin_pending {
            return Ok(false);
        }
        match port.send_close_notify() {
            Io::Progress(_) => {
                self.fin_pending = false;
                port.shutdown_write();
                Ok(true)
            }
            Io::WouldBlock => Ok(false),
            Io::Eof => Ok(false),
            Io::PeerGone(e) => {
                self.fin_pending = false;
                Err(e)
            }
        }
    }
}
