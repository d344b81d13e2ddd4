//! The byte wire under a TLS layer, and the staging that feeds rustls.
//!
//! The session's endpoint implements [`Wire`] (a non-blocking socket whose
//! results are already classified into [`Io`]); tests implement it in memory.

use std::io::{self, IoSlice, Read, Write};

use crate::io::{Io, Stream};

/// A non-blocking byte stream with the outcomes of [`Io`].
///
/// An implementation may answer `WouldBlock` without a syscall when it knows
/// the socket is not ready (the endpoint's readiness flags), and should clear
/// its own readiness when the socket says `WouldBlock`: a `WouldBlock` from a
/// TLS layer does not always mean the socket said so.
pub(crate) trait Wire {
    /// Reads into `buf` (never empty).
    fn read(&mut self, buf: &mut [u8]) -> Io;
    /// Reads into the spare capacity of `buf` (never none) and extends it
    /// by what was read. A socket overrides it to skip zeroing the room
    /// first; by default the room is zeroed and [`Wire::read`] fills it.
    fn read_spare(&mut self, buf: &mut Vec<u8>) -> Io {
        let len = buf.len();
        buf.resize(buf.capacity(), 0);
        let io = self.read(&mut buf[len..]);
        let n = match io {
            Io::Progress(n) => n,
            _ => 0,
        };
        buf.truncate(len + n);
        io
    }
    /// Writes from `buf` (never empty).
    fn write(&mut self, buf: &[u8]) -> Io;
    /// Writes from several buffers at once (writev); by default the first
    /// non-empty one.
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> Io {
        match bufs.iter().find(|b| !b.is_empty()) {
            Some(b) => self.write(b),
            None => Io::Progress(0),
        }
    }
}

impl Wire for Stream {
    fn read(&mut self, buf: &mut [u8]) -> Io {
        self.read_into(buf)
    }
    fn read_spare(&mut self, buf: &mut Vec<u8>) -> Io {
        Stream::read_spare(self, buf)
    }
    fn write(&mut self, buf: &[u8]) -> Io {
        self.write_from(buf)
    }
}

/// `io::Write` over a [`Wire`], for `write_tls`: the `Io` outcome becomes
/// the `io::Result` rustls expects, and the original error passes through.
pub(crate) struct WireWriter<'a, W: Wire + ?Sized>(pub(crate) &'a mut W);

fn io_to_result(io: Io) -> io::Result<usize> {
    match io {
        Io::Progress(n) => Ok(n),
        Io::WouldBlock => Err(io::ErrorKind::WouldBlock.into()),
        Io::Eof => Err(io::ErrorKind::WriteZero.into()),
        Io::PeerGone(e) => Err(e),
    }
}

impl<W: Wire + ?Sized> Write for WireWriter<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        io_to_result(self.0.write(buf))
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        io_to_result(self.0.write_vectored(bufs))
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Default size of one read from the wire: as large as a plain tunnel's
/// buffer (`limits.buffer_size`), so a terminated download costs one
/// `recvfrom` per 64 KiB, not per 16 KiB (a quarter of the reads, measured
/// in BENCHMARKS.md). Memory stays bounded by the staging being dropped
/// when idle, and by rustls holding at most one record's worth.
pub(crate) const RX_CHUNK: usize = 64 * 1024;

/// Bytes read from the wire and not yet given to rustls.
///
/// rustls reads at most 4 KiB per `read_tls`; reading the socket through
/// this staging takes a whole chunk per syscall instead. It is allocated
/// when a read starts and dropped whenever it is empty and the wire has
/// nothing more, so an idle connection holds none.
#[derive(Debug)]
pub(crate) struct Rx {
    buf: Vec<u8>,
    start: usize,
    chunk: usize,
    /// Where the bytes given to rustls so far end, record-wise (a kernel
    /// hand-off needs a boundary).
    cursor: super::ktls::RecordCursor,
}

/// What filling the staging did.
pub(crate) enum Fill {
    /// Bytes are staged.
    Ready,
    /// The wire has nothing now.
    WouldBlock,
    /// The wire reached EOF.
    Eof,
    /// The wire failed.
    Gone(io::Error),
}

impl Rx {
    pub(crate) fn new(chunk: usize) -> Rx {
        Rx {
            buf: Vec::new(),
            start: 0,
            chunk: chunk.max(1),
            cursor: Default::default(),
        }
    }

    /// Starts with bytes already read off the wire by someone else (bytes
    /// pipelined behind a CONNECT).
    pub(crate) fn with_prefix(chunk: usize, prefix: &[u8]) -> Rx {
        let mut rx = Rx::new(chunk);
        rx.buf.extend_from_slice(prefix);
        rx
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.start == self.buf.len()
    }

    /// The bytes given to rustls so far end exactly between two records.
    pub(crate) fn at_record_boundary(&self) -> bool {
        self.cursor.at_boundary()
    }

    /// Staged bytes (for tests and accounting).
    pub(crate) fn len(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Capacity held, to check it stays bounded.
    pub(crate) fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// Makes sure bytes are staged, reading the wire once if none are.
    pub(crate) fn fill(&mut self, wire: &mut (impl Wire + ?Sized)) -> Fill {
        if !self.is_empty() {
            return Fill::Ready;
        }
        self.buf.clear();
        self.start = 0;
        // Room for a chunk, not zeroed: the wire reads straight into it.
        self.buf.reserve_exact(self.chunk);
        let io = wire.read_spare(&mut self.buf);
        match io {
            Io::Progress(_) => Fill::Ready,
            Io::WouldBlock => {
                self.buf = Vec::new();
                Fill::WouldBlock
            }
            Io::Eof => Fill::Eof,
            Io::PeerGone(e) => Fill::Gone(e),
        }
    }

    /// Hands staged bytes to `read_tls` (which takes what it has room for).
    pub(crate) fn feed(
        &mut self,
        read_tls: impl FnOnce(&mut dyn Read) -> io::Result<usize>,
    ) -> io::Result<usize> {
        let mut staged = &self.buf[self.start..];
        let n = read_tls(&mut staged)?;
        self.cursor.advance(&self.buf[self.start..self.start + n]);
        self.start += n;
        if self.is_empty() {
            self.buf.clear();
            self.start = 0;
        }
        Ok(n)
    }
}
