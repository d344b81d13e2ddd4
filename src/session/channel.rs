//! One side's byte stream as a relaying state sees it: its socket, and the
//! core's [`Link`] above it (plaintext, or TLS over the socket). Inspect,
//! Passthrough and Closing move bytes through channels, so the same code
//! relays a terminated-TLS connection and a plaintext one.

use std::io::IoSlice;

use super::endpoint::Endpoint;
use crate::core::link::Link;
use crate::core::port::Port;
use crate::io::Io;
use crate::tls::wire::Wire;

/// A socket, and plaintext or TLS over it. A plain socket is held as it
/// is: an idle raw tunnel pays nothing for the TLS it does not use.
pub(crate) enum Channel {
    Plain(Endpoint),
    /// The socket and its link ([`Link::Tls`], or [`Link::Kernel`]).
    Tls(Box<(Endpoint, Link)>),
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
    fn connect_error(&mut self) -> Option<std::io::Error> {
        Endpoint::connect_error(self)
    }
    fn prepare_offload(&mut self) -> std::io::Result<()> {
        Endpoint::prepare_offload(self)
    }
    fn offload_tls(&mut self, offload: &crate::tls::ktls::Offload) -> std::io::Result<()> {
        Endpoint::offload_tls(self, offload)
    }
    fn read_record(&mut self, buf: &mut [u8]) -> (Io, u8) {
        if !self.readable() {
            return (Io::WouldBlock, crate::tls::ktls::APPLICATION_DATA);
        }
        Endpoint::read_record(self, buf)
    }
    fn send_close_notify(&mut self) -> Io {
        if !self.writable() {
            return Io::WouldBlock;
        }
        Endpoint::send_close_notify(self)
    }
}

impl Channel {
    /// Plaintext over `ep`.
    pub(crate) fn plain(ep: Endpoint) -> Channel {
        Channel::Plain(ep)
    }

    /// A socket and the link above it, together again.
    pub(crate) fn from_parts(ep: Endpoint, link: Link) -> Channel {
        match link {
            Link::Plain => Channel::Plain(ep),
            tls => Channel::Tls(Box::new((ep, tls))),
        }
    }

    /// The link and the socket under it, for one call.
    pub(crate) fn with<R>(&mut self, f: impl FnOnce(&mut Link, &mut Endpoint) -> R) -> R {
        match self {
            Channel::Plain(ep) => f(&mut Link::Plain, ep),
            Channel::Tls(b) => {
                let (ep, link) = &mut **b;
                f(link, ep)
            }
        }
    }

    fn ep(&self) -> &Endpoint {
        match self {
            Channel::Plain(ep) => ep,
            Channel::Tls(b) => &b.0,
        }
    }

    fn link(&self) -> &Link {
        match self {
            Channel::Plain(_) => &Link::Plain,
            Channel::Tls(b) => &b.1,
        }
    }

    /// The socket under the channel (readiness events go here).
    pub(crate) fn endpoint(&mut self) -> &mut Endpoint {
        match self {
            Channel::Plain(ep) => ep,
            Channel::Tls(b) => &mut b.0,
        }
    }

    /// The socket, when it carries the channel's plaintext itself (plain,
    /// or TLS in the kernel): splice moves its bytes.
    pub(crate) fn splice_endpoint(&mut self) -> Option<&mut Endpoint> {
        match self {
            Channel::Plain(ep) => Some(ep),
            Channel::Tls(b) if b.1.splices() => Some(&mut b.0),
            Channel::Tls(_) => None,
        }
    }

    pub(crate) fn is_plain(&self) -> bool {
        matches!(self, Channel::Plain(_))
    }

    /// Bytes may be spliced to and from this channel's socket.
    pub(crate) fn splices(&self) -> bool {
        self.link().splices()
    }

    /// Splicing from a kTLS socket stopped at a control record (splice
    /// takes data records only): reads that record through the link, which
    /// handles it. `Progress` never carries data here; any error is the
    /// side's.
    #[cfg(target_os = "linux")]
    pub(crate) fn read_control(&mut self) -> Io {
        self.with(|link, ep| link.read_control(ep))
    }

    /// The kernel reported an error on the socket.
    pub(crate) fn failed(&self) -> bool {
        self.ep().failed()
    }

    /// The peer's FIN arrived on the socket (bytes before it may be unread).
    pub(crate) fn peer_finished(&self) -> bool {
        self.ep().peer_finished()
    }

    /// Says whether plaintext is wanted from this side now.
    pub(crate) fn want_read(&mut self, on: bool) {
        self.with(|link, ep| link.want_read(ep, on))
    }

    /// Says whether plaintext waits to go to this side.
    pub(crate) fn want_write(&mut self, on: bool) {
        self.with(|link, ep| link.want_write(ep, on))
    }

    /// A read may make progress.
    pub(crate) fn can_read(&self) -> bool {
        self.link().can_read(self.ep())
    }

    /// A write may make progress.
    pub(crate) fn can_write(&self) -> bool {
        self.ep().can_write()
    }

    /// Reads plaintext into `buf` (never empty).
    pub(crate) fn read(&mut self, buf: &mut [u8]) -> Io {
        self.with(|link, ep| link.read(ep, buf))
    }

    /// See [`Link::progress`].
    pub(crate) fn progress(&mut self) -> Result<bool, std::io::Error> {
        self.with(|link, ep| link.progress(ep))
    }

    /// Ends our sending side: a FIN, or close_notify and then a FIN.
    pub(crate) fn shutdown_write(&mut self) {
        self.with(|link, ep| link.shutdown_write(ep))
    }

    /// Makes the coming close abortive (the peer sees a reset).
    pub(crate) fn abort_on_close(&self) {
        self.ep().abort_on_close()
    }

    /// See [`Link::owes_wire`].
    pub(crate) fn owes_wire(&self) -> bool {
        self.link().owes_wire()
    }
}
