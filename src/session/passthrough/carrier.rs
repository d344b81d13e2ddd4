//! What holds a direction's bytes in flight: a user-space buffer, or on
//! Linux a kernel pipe moved with `splice(2)`, so bulk payload never enters
//! user space.
//!
//! A flow starts on a pooled buffer. Only a flow that fills its buffer (bulk
//! traffic) trades it for a pipe, and only while the pipe budget lasts: a
//! pipe costs two fds, and idle or chatty tunnels must cost none.

use crate::buffer::ByteBuf;
use crate::core::closing::Owed;
use crate::core::link::Link;
use crate::io::Io;
use crate::session::channel::Channel;
use crate::session::endpoint::Endpoint;

/// What one attempt to read into a carrier did.
pub(crate) enum Fill {
    Moved,
    Eof,
    /// The source has nothing now (its readiness is cleared).
    Dry,
    /// The carrier has no room (the source keeps its readiness).
    Full,
    Gone,
}

pub(crate) enum Carrier {
    Buf(ByteBuf),
    #[cfg(target_os = "linux")]
    /// Boxed: a pipe is two fds and counters, rare (bulk flows only), and
    /// unboxed it would make every carrier, idle ones too, 16 bytes larger.
    Pipe(Box<super::pipe::Pipe>),
}

impl Carrier {
    pub(crate) fn is_empty(&self) -> bool {
        match self {
            Carrier::Buf(b) => b.is_empty(),
            #[cfg(target_os = "linux")]
            Carrier::Pipe(p) => p.is_empty(),
        }
    }

    pub(crate) fn is_full(&self) -> bool {
        match self {
            Carrier::Buf(b) => b.is_full(),
            #[cfg(target_os = "linux")]
            Carrier::Pipe(p) => p.is_full(),
        }
    }

    /// One read from `src`. A pipe is only ever paired with plain sockets.
    pub(crate) fn fill_from(&mut self, src: &mut Channel) -> Fill {
        if self.is_full() {
            return Fill::Full;
        }
        let io = match (&mut *self, src) {
            (Carrier::Buf(b), src) => {
                let io = src.read(b.space());
                if let Io::Progress(n) = io {
                    b.commit(n);
                }
                io
            }
            #[cfg(target_os = "linux")]
            (Carrier::Pipe(p), src) => match src.splice_endpoint() {
                Some(ep) => match ep.splice_in(p) {
                    // A kTLS socket refuses to splice a control record
                    // (EINVAL; ENOTSUPP, 524, on older kernels): the link
                    // reads it (a close_notify is the EOF) and splicing
                    // goes on.
                    Io::PeerGone(e) if !src.is_plain() && is_control_stop(&e) => src.read_control(),
                    io => io,
                },
                None => no_splice_through_tls(),
            },
        };
        match io {
            Io::Progress(_) => Fill::Moved,
            Io::Eof => Fill::Eof,
            // The endpoint kept its readiness: the pipe, not the socket, was full.
            Io::WouldBlock if self.is_full() => Fill::Full,
            Io::WouldBlock => Fill::Dry,
            Io::PeerGone(e) => {
                log::debug!("read: {e}");
                Fill::Gone
            }
        }
    }

    /// One write to `dst`; `Progress(n)` says how many bytes left.
    pub(crate) fn drain_to(&mut self, dst: &mut Channel) -> Io {
        dst.with(|link, ep| Owed::drain_to(self, link, ep))
    }
}

/// A pipe drains only to a plain socket (splice); a buffer through the
/// link, as the core's own.
impl Owed<Endpoint> for Carrier {
    fn is_empty(&self) -> bool {
        Carrier::is_empty(self)
    }

    fn drain_to(&mut self, link: &mut Link, ep: &mut Endpoint) -> Io {
        match self {
            Carrier::Buf(b) => Owed::<Endpoint>::drain_to(b, link, ep),
            #[cfg(target_os = "linux")]
            Carrier::Pipe(p) if link.splices() => ep.splice_out(p),
            #[cfg(target_os = "linux")]
            Carrier::Pipe(_) => no_splice_through_tls(),
        }
    }
}

/// What splicing from a kTLS socket says when the next record is not data.
#[cfg(target_os = "linux")]
fn is_control_stop(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(nix::libc::EINVAL) | Some(524))
}

/// A pipe paired with a TLS channel: never built (pipes are taken only
/// when both sides are plain sockets). Were it to happen, the side is
/// reported gone, which closes the session, instead of a panic.
#[cfg(target_os = "linux")]
fn no_splice_through_tls() -> Io {
    debug_assert!(false, "a splice pipe on a TLS channel");
    Io::PeerGone(std::io::Error::other("no splice through TLS"))
}
