//! The core's view of one side's transport: a non-blocking byte stream
//! with readiness hints. The shell's socket endpoint implements it; the
//! simulator and the fuzz target implement it in memory. The core never
//! learns which.

use crate::io::Io;
use crate::tls::ktls::{Offload, APPLICATION_DATA};
use crate::tls::wire::Wire;

/// One side's transport, as the core drives it.
///
/// Reads and writes are the [`Wire`]'s (an implementation answers
/// `WouldBlock` without work when it knows nothing can move); the rest says
/// what the core wants next and what the transport has seen.
pub(crate) trait Port: Wire {
    /// The core wants (or no longer wants) bytes from this side.
    fn want_read(&mut self, on: bool);
    /// The core has (or no longer has) bytes for this side.
    fn want_write(&mut self, on: bool);
    /// A read is wanted and may make progress.
    fn can_read(&self) -> bool;
    /// A write is wanted and may make progress.
    fn can_write(&self) -> bool;
    /// The transport failed (a reset, an error): bytes the peer sent before
    /// may still be read.
    fn failed(&self) -> bool;
    /// The peer has finished sending (its FIN arrived), whether or not the
    /// bytes ahead of it are read yet.
    fn peer_finished(&self) -> bool;
    /// Ends our sending side (the TCP FIN).
    fn shutdown_write(&mut self);
    /// Why a connect in flight failed, once [`Port::failed`] says it did
    /// (the socket's pending error); `None` when there is nothing to say.
    fn connect_error(&mut self) -> Option<std::io::Error> {
        None
    }
    /// Readies the transport for [`Port::offload_tls`] without changing
    /// what it carries (the kernel's TLS ULP, no keys yet). `Err`: no
    /// offload now (the kernel takes the ULP only on an established TCP
    /// socket: not once the peer's FIN came in), and TLS stays ours.
    fn prepare_offload(&mut self) -> std::io::Result<()> {
        Err(std::io::ErrorKind::Unsupported.into())
    }
    /// After [`Port::prepare_offload`]: hands this side's TLS records to
    /// the kernel with these keys (kTLS):
    /// from then on reads and writes carry plaintext. A transport that
    /// cannot says so, and the link above it fails.
    fn offload_tls(&mut self, _offload: &Offload) -> std::io::Result<()> {
        Err(std::io::ErrorKind::Unsupported.into())
    }
    /// After [`Port::offload_tls`]: one read, and the type of the record
    /// the bytes came from (a control record comes alone).
    fn read_record(&mut self, buf: &mut [u8]) -> (Io, u8) {
        (self.read(buf), APPLICATION_DATA)
    }
    /// After [`Port::offload_tls`]: sends a close_notify alert.
    fn send_close_notify(&mut self) -> Io {
        Io::PeerGone(std::io::ErrorKind::Unsupported.into())
    }
}

/// How far writing the proxy's own bytes to a side got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sent {
    /// All of them are out.
    All,
    /// Some are left: wait for writability (write interest is on).
    Wait,
    /// The peer is gone: never write to it again.
    Gone,
}

/// Writes `owed` (a reply of the proxy's own, not payload) to `port` as far
/// as readiness allows, draining what went out. Nothing is read meanwhile.
pub(crate) fn send_owed(port: &mut impl Port, owed: &mut Vec<u8>) -> Sent {
    while !owed.is_empty() {
        port.want_read(false);
        port.want_write(true);
        if !port.can_write() {
            return Sent::Wait;
        }
        match port.write(owed) {
            Io::Progress(n) => {
                owed.drain(..n);
            }
            Io::WouldBlock => return Sent::Wait,
            Io::Eof | Io::PeerGone(_) => return Sent::Gone,
        }
    }
    Sent::All
}
