//! A sans-IO TLS layer: a `rustls::Connection` between a non-blocking
//! [`Wire`] and plaintext, with the semantics of a plain socket.
//!
//! - [`TlsLayer::read`] gives plaintext: `Progress(n)`, `WouldBlock` (nothing
//!   decrypted and the wire has nothing now, or the handshake needs a
//!   writable wire first), `Eof` (close_notify, or a TCP EOF after the
//!   handshake), `PeerGone(e)` (a TLS error, carrying a
//!   [`TlsFailure`](super::TlsFailure), or a wire error).
//! - [`TlsLayer::write`] takes plaintext: `Progress(n)` accepted (encrypted,
//!   and written to the wire as far as it takes it), `WouldBlock` (the
//!   outgoing TLS buffer is full and the wire will not take more, or the
//!   handshake has not finished and its allowance is spent), `PeerGone(e)`.
//! - [`TlsLayer::flush`] moves what rustls owes the wire (handshake, alerts,
//!   encrypted data) and, while handshaking, reads and answers the
//!   handshake, without taking or giving plaintext.
//! - [`TlsLayer::shutdown`] queues close_notify and flushes it.
//!
//! Memory is bounded whatever the peers do: rustls holds at most
//! `tls_out` bytes of outgoing TLS (plaintext beyond that is refused with
//! `WouldBlock`, never queued); the wire is read only when no decrypted
//! plaintext is waiting (so rustls holds at most one staging chunk's worth);
//! the staging is one fixed chunk, dropped when idle.
//!
//! # Driving it from readiness (what the session must do)
//! - **Readable**: call `read` while there is room for plaintext. With no
//!   room, nothing is read (backpressure), except that while
//!   [`is_handshaking`](TlsLayer::is_handshaking) call `flush`, which reads
//!   the handshake.
//! - **Writable**: if [`wants_write`](TlsLayer::wants_write), call `flush`;
//!   then `write` pending plaintext. A new client layer wants to write its
//!   ClientHello at once: flush when the TCP connect completes.
//! - **No edge needed**: when [`has_pending`](TlsLayer::has_pending), call
//!   `read` again without waiting for readiness (a handshake flight can
//!   carry application data behind it, decrypted before anyone asked; a
//!   short read clears the socket's readiness while the staging still
//!   holds bytes rustls has not taken).
//! - A `write` that returned `WouldBlock` while handshaking is retried after
//!   the `read`/`flush` that finishes the handshake, not on a writable edge.
//! - Never clear the endpoint's readiness from a layer result: the `Wire`
//!   clears it when the socket itself says `WouldBlock`.
//! - Closing: `shutdown`, then `flush` on writable until `!wants_write()`,
//!   then the TCP shutdown(Write).

use std::io::{self, Read, Write};
use std::sync::Arc;

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, Connection, ServerConnection};

use super::failure::TlsFailure;
use super::wire::{Fill, Rx, Wire, WireWriter, RX_CHUNK};
use crate::io::Io;
use crate::target::Host;

/// Default bound on outgoing TLS held by rustls (and on plaintext accepted
/// before the handshake finishes).
pub(crate) const TLS_OUT: usize = 64 * 1024;

/// Buffer bounds of one layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LayerLimits {
    /// Outgoing TLS bytes rustls may hold before `write` says `WouldBlock`.
    pub(crate) tls_out: usize,
    /// Bytes read from the wire per syscall.
    pub(crate) rx_chunk: usize,
}

impl Default for LayerLimits {
    fn default() -> Self {
        LayerLimits {
            tls_out: TLS_OUT,
            rx_chunk: RX_CHUNK,
        }
    }
}

/// How the peer closed its sending side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PeerClose {
    /// A close_notify alert: a clean end.
    CloseNotify,
    /// A TCP EOF without close_notify (many servers do this; HTTP framing
    /// tells a truncated message from a complete one).
    Truncated,
}

/// The layer's lifecycle, as one enum rather than flags.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    Open,
    /// We queued close_notify: no more plaintext from us.
    ShutDown,
    /// A TLS or wire failure: every call answers `PeerGone`.
    Failed(Failure),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Failure {
    Tls(TlsFailure),
    /// The wire failed; the original error went to the caller once.
    Wire(io::ErrorKind),
}

impl Failure {
    fn to_io(&self) -> io::Error {
        match self {
            Failure::Tls(t) => t.to_io(),
            Failure::Wire(k) => io::Error::from(*k),
        }
    }
}

/// One step of pulling TLS bytes in.
enum Pull {
    /// Bytes were handed to rustls and processed.
    Fed,
    /// The wire has nothing now.
    WouldBlock,
    /// The wire reached EOF.
    Eof,
    /// The layer has failed (the error to return).
    Failed(io::Error),
}

/// A TLS connection over a [`Wire`]; see the module docs for the contract.
pub(crate) struct TlsLayer {
    conn: Connection,
    rx: Rx,
    phase: Phase,
    peer_close: Option<PeerClose>,
    /// Decrypted bytes rustls holds that the caller has not read.
    plaintext: usize,
}

impl std::fmt::Debug for TlsLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsLayer")
            .field("side", &self.side())
            .field("handshaking", &self.conn.is_handshaking())
            .field("phase", &self.phase)
            .field("plaintext", &self.plaintext)
            .field("staged", &self.rx.len())
            .finish()
    }
}

impl TlsLayer {
    /// The upstream side: a client connection to `host` (SNI = the name; an
    /// IP target sends no SNI and is verified against the IP SAN).
    pub(crate) fn client(
        config: Arc<ClientConfig>,
        host: &Host,
        limits: LayerLimits,
    ) -> Result<TlsLayer, TlsFailure> {
        let conn = ClientConnection::new(config, server_name(host)?)
            .map_err(|e| TlsFailure::from_rustls(&e))?;
        Ok(TlsLayer::new(conn.into(), Rx::new(limits.rx_chunk), limits))
    }

    /// The client-facing side, from a connection `TlsAccept` completed;
    /// `rx` holds bytes already read past the ClientHello's first reads.
    pub(crate) fn server(conn: ServerConnection, rx: Rx, limits: LayerLimits) -> TlsLayer {
        TlsLayer::new(conn.into(), rx, limits)
    }

    fn new(mut conn: Connection, rx: Rx, limits: LayerLimits) -> TlsLayer {
        conn.set_buffer_limit(Some(limits.tls_out.max(1)));
        TlsLayer {
            conn,
            rx,
            phase: Phase::Open,
            peer_close: None,
            plaintext: 0,
        }
    }

    /// Reads plaintext into `buf` (not empty).
    ///
    /// After a wire failure, plaintext already decrypted is still delivered
    /// (what the peer sent before it died), then `PeerGone`.
    pub(crate) fn read(&mut self, wire: &mut (impl Wire + ?Sized), buf: &mut [u8]) -> Io {
        debug_assert!(!buf.is_empty());
        if let Phase::Failed(Failure::Tls(t)) = &self.phase {
            return Io::PeerGone(t.to_io());
        }
        loop {
            if self.plaintext > 0 || self.peer_close.is_some() {
                match self.conn.reader().read(buf) {
                    Ok(0) => return Io::Eof, // close_notify, all read
                    Ok(n) => {
                        self.plaintext = self.plaintext.saturating_sub(n);
                        // Answers rustls owes (a KeyUpdate, tickets): best effort.
                        if let Some(e) = self.push(wire) {
                            self.fail_wire(e);
                        }
                        return Io::Progress(n);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.plaintext = 0,
                    Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Io::Eof,
                    Err(e) => return Io::PeerGone(e),
                }
                if self.peer_close.is_some() {
                    return Io::Eof;
                }
            }
            if let Phase::Failed(f) = &self.phase {
                return Io::PeerGone(f.to_io());
            }
            match self.pull(wire) {
                Pull::Fed => {}
                Pull::WouldBlock => {
                    if let Some(e) = self.push(wire) {
                        return Io::PeerGone(self.fail_wire(e));
                    }
                    return Io::WouldBlock;
                }
                Pull::Eof => {} // peer_close is set: the next turn answers Eof
                Pull::Failed(e) => return Io::PeerGone(e),
            }
        }
    }

    /// Encrypts plaintext from `buf` (not empty).
    pub(crate) fn write(&mut self, wire: &mut (impl Wire + ?Sized), buf: &[u8]) -> Io {
        debug_assert!(!buf.is_empty());
        match &self.phase {
            Phase::Failed(f) => return Io::PeerGone(f.to_io()),
            Phase::ShutDown => {
                return Io::PeerGone(io::Error::new(
                    io::ErrorKind::BrokenPipe,
                    "write after TLS shutdown",
                ))
            }
            Phase::Open => {}
        }
        if let Some(e) = self.push(wire) {
            return Io::PeerGone(self.fail_wire(e));
        }
        let n = match self.conn.writer().write(buf) {
            Ok(n) => n,
            Err(e) => return Io::PeerGone(self.fail_tls_io(&e)),
        };
        if n == 0 {
            return Io::WouldBlock;
        }
        // The bytes are accepted: a wire failure now is reported on the next call.
        if let Some(e) = self.push(wire) {
            self.fail_wire(e);
        }
        Io::Progress(n)
    }

    /// Writes what rustls owes the wire and, while handshaking, reads and
    /// answers the handshake. `Progress(n)`: `n` TLS bytes went out;
    /// `WouldBlock`: nothing moved (see [`wants_write`](Self::wants_write)).
    pub(crate) fn flush(&mut self, wire: &mut (impl Wire + ?Sized)) -> Io {
        if let Phase::Failed(f) = &self.phase {
            return Io::PeerGone(f.to_io());
        }
        let mut written = 0;
        loop {
            match self.push_counted(wire) {
                Ok(n) => written += n,
                Err(e) => return Io::PeerGone(self.fail_wire(e)),
            }
            if !self.conn.is_handshaking() || self.peer_close.is_some() {
                break;
            }
            match self.pull(wire) {
                Pull::Fed => {}
                Pull::WouldBlock | Pull::Eof => break,
                Pull::Failed(e) => return Io::PeerGone(e),
            }
        }
        if written > 0 {
            Io::Progress(written)
        } else {
            Io::WouldBlock
        }
    }

    /// Queues close_notify (once) and flushes. Later writes are refused;
    /// reads go on (TLS 1.3 closes one direction at a time).
    pub(crate) fn shutdown(&mut self, wire: &mut (impl Wire + ?Sized)) -> Io {
        if self.phase == Phase::Open {
            self.conn.send_close_notify();
            self.phase = Phase::ShutDown;
        }
        self.flush(wire)
    }

    /// The handshake has not finished.
    pub(crate) fn is_handshaking(&self) -> bool {
        self.conn.is_handshaking()
    }

    /// TLS bytes are waiting for a writable wire.
    pub(crate) fn wants_write(&self) -> bool {
        self.conn.wants_write()
    }

    /// Decrypted plaintext is waiting: `read` will make progress without a
    /// readiness edge.
    pub(crate) fn has_plaintext(&self) -> bool {
        self.plaintext > 0
    }

    /// `read` may make progress without a readiness edge: plaintext is
    /// waiting, or bytes already read off the wire wait in the staging
    /// (after a short read the socket says nothing more until new bytes
    /// arrive, which a peer held back by our backpressure never sends).
    pub(crate) fn has_pending(&self) -> bool {
        self.plaintext > 0 || !self.rx.is_empty()
    }

    /// The layer may hand its records to the kernel now (kTLS): the
    /// handshake is done, the layer is open both ways, nothing waits to be
    /// read or written at the TLS layer, and the bytes rustls was given end
    /// on a record boundary (the kernel must see the next record whole).
    pub(crate) fn ready_to_offload(&self) -> bool {
        self.phase == Phase::Open
            && self.peer_close.is_none()
            && !self.conn.is_handshaking()
            && !self.conn.wants_write()
            && self.plaintext == 0
            && self.rx.is_empty()
            && self.rx.at_record_boundary()
    }

    /// The keys and sequence numbers for the kernel, ending this layer.
    /// Only when [`ready_to_offload`](Self::ready_to_offload).
    pub(crate) fn into_offload(self) -> Result<super::ktls::Offload, String> {
        debug_assert!(self.ready_to_offload());
        let version = self
            .conn
            .protocol_version()
            .ok_or("no TLS version negotiated")?;
        let secrets = self
            .conn
            .dangerous_extract_secrets()
            .map_err(|e| format!("extracting the TLS keys: {e}"))?;
        super::ktls::offload(version, secrets)
    }

    /// How the peer closed, once `read` has said `Eof`.
    pub(crate) fn peer_close(&self) -> Option<PeerClose> {
        self.peer_close
    }

    /// The failure that ended this layer, if TLS was the cause.
    pub(crate) fn failure(&self) -> Option<&TlsFailure> {
        match &self.phase {
            Phase::Failed(Failure::Tls(t)) => Some(t),
            _ => None,
        }
    }

    /// The negotiated ALPN protocol (`Some(b"http/1.1")` or none).
    pub(crate) fn alpn(&self) -> Option<&[u8]> {
        self.conn.alpn_protocol()
    }

    /// The negotiated TLS version, once known.
    pub(crate) fn protocol_version(&self) -> Option<rustls::ProtocolVersion> {
        self.conn.protocol_version()
    }

    /// The negotiated cipher suite, once known.
    pub(crate) fn cipher_suite(&self) -> Option<rustls::CipherSuite> {
        self.conn.negotiated_cipher_suite().map(|s| s.suite())
    }

    fn side(&self) -> &'static str {
        match self.conn {
            Connection::Client(_) => "client",
            Connection::Server(_) => "server",
        }
    }

    /// Bytes staged from the wire and not yet given to rustls, and the
    /// staging's capacity (tests check both stay bounded).
    pub(crate) fn staged(&self) -> (usize, usize) {
        (self.rx.len(), self.rx.capacity())
    }

    /// Feeds rustls from the staging (reading the wire once if it is
    /// empty) and processes what arrived. Only called with no plaintext
    /// waiting, so rustls never holds more than one chunk of it.
    fn pull(&mut self, wire: &mut (impl Wire + ?Sized)) -> Pull {
        match self.rx.fill(wire) {
            Fill::Ready => {}
            Fill::WouldBlock => return Pull::WouldBlock,
            Fill::Eof => {
                if self.conn.is_handshaking() {
                    return Pull::Failed(self.fail_tls(TlsFailure::handshake_eof()));
                }
                // Tell rustls (so its reader reports the truncation), and
                // remember which kind of close this was.
                let _ = self.conn.read_tls(&mut io::empty());
                self.peer_close = Some(PeerClose::Truncated);
                return Pull::Eof;
            }
            Fill::Gone(e) => {
                self.phase = Phase::Failed(Failure::Wire(e.kind()));
                return Pull::Failed(e);
            }
        }
        let conn = &mut self.conn;
        if let Err(e) = self.rx.feed(|r| conn.read_tls(r)) {
            return Pull::Failed(self.fail_tls_io(&e));
        }
        match self.conn.process_new_packets() {
            Ok(state) => {
                self.plaintext = state.plaintext_bytes_to_read();
                if state.peer_has_closed() {
                    self.peer_close = Some(PeerClose::CloseNotify);
                }
                Pull::Fed
            }
            Err(e) => {
                let f = TlsFailure::from_rustls(&e);
                // rustls queued an alert for the peer: best effort.
                let _ = self.push(wire);
                Pull::Failed(self.fail_tls(f))
            }
        }
    }

    /// Writes queued TLS until the wire would block or nothing is left.
    /// Returns the wire's error, if it failed.
    fn push(&mut self, wire: &mut (impl Wire + ?Sized)) -> Option<io::Error> {
        self.push_counted(wire).err()
    }

    fn push_counted(&mut self, wire: &mut (impl Wire + ?Sized)) -> io::Result<usize> {
        let mut written = 0;
        while self.conn.wants_write() {
            match self.conn.write_tls(&mut WireWriter(wire)) {
                Ok(0) => break,
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        Ok(written)
    }

    fn fail_tls(&mut self, f: TlsFailure) -> io::Error {
        let e = f.to_io();
        self.phase = Phase::Failed(Failure::Tls(f));
        e
    }

    fn fail_tls_io(&mut self, e: &io::Error) -> io::Error {
        self.fail_tls(TlsFailure::new(
            super::failure::FailureKind::Protocol,
            format!("TLS error: {e}"),
        ))
    }

    /// Records a wire failure (later calls report its kind) and hands the
    /// original error back.
    fn fail_wire(&mut self, e: io::Error) -> io::Error {
        if !matches!(self.phase, Phase::Failed(_)) {
            self.phase = Phase::Failed(Failure::Wire(e.kind()));
        }
        e
    }
}

/// The name rustls verifies (and sends as SNI, for a DNS name).
pub(crate) fn server_name(host: &Host) -> Result<ServerName<'static>, TlsFailure> {
    match host {
        Host::Ip(ip) => Ok(ServerName::IpAddress((*ip).into())),
        Host::Domain(d) => ServerName::try_from(d.clone()).map_err(|_| {
            TlsFailure::new(
                super::failure::FailureKind::Protocol,
                format!("{d:?} is not a valid TLS server name"),
            )
        }),
    }
}
