//! The core's view of one side's transport: a non-blocking byte stream
//! with readiness hints. The shell's socket endpoint implements it; the
//! simulator and the fuzz target implement it in memory. The core never
//! learns which.

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
}
