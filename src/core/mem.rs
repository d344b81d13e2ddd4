//! An in-memory transport for one side of the core: what the peer sent
//! (then its FIN or reset), what the core wrote, and how much the
//! transport takes before it would block (a peer that reads slowly). The
//! simulator and the fuzz target lend it to the core in place of a socket.

use std::collections::VecDeque;
use std::io;

use crate::core::port::Port;
use crate::io::Io;
use crate::tls::wire::Wire;

#[derive(Debug, Default)]
pub(crate) struct MemPort {
    /// Bytes the peer sent, not yet read by the core.
    pub(crate) inbox: VecDeque<u8>,
    /// The peer's FIN follows the inbox.
    pub(crate) fin: bool,
    /// The peer reset: reads give what is left of the inbox, then the reset;
    /// writes fail.
    pub(crate) reset: bool,
    /// The kernel reported an error with nothing to say a read would
    /// make progress (an error event alone): failed, and a read gives the
    /// inbox, then the error.
    pub(crate) error_only: bool,
    /// Bytes the core wrote, not yet taken by the peer.
    pub(crate) outbox: Vec<u8>,
    /// Bytes the transport takes before writes would block.
    pub(crate) room: usize,
    /// The core sent its FIN.
    pub(crate) shut: bool,
    /// Bytes the core has read in all.
    pub(crate) read_total: usize,
    /// At most this many bytes per read or write (0: no limit).
    pub(crate) max_io: usize,
    /// The FIN raises readiness once, as a socket's EOF raises one edge:
    /// once a read gave it, the port is not readable again.
    pub(crate) eof_once: bool,
    /// A read gave the FIN.
    eof_read: bool,
    want: (bool, bool),
    /// The core handed this side's TLS to the "kernel": the inbox holds
    /// raw records it opens, and what the core writes is sealed.
    #[cfg(test)]
    pub(crate) kernel: Option<Box<crate::core::tests::kernel::KernelTls>>,
    /// The "kernel" refuses the keys (as a setsockopt failing with ENOMEM).
    #[cfg(test)]
    pub(crate) refuse_keys: bool,
}

impl MemPort {
    /// A transport that takes everything written to it.
    pub(crate) fn roomy() -> MemPort {
        MemPort {
            room: usize::MAX,
            ..MemPort::default()
        }
    }

    /// The peer sends `bytes`.
    pub(crate) fn deliver(&mut self, bytes: &[u8]) {
        self.inbox.extend(bytes);
    }

    /// What the core last asked for: (read, write) interest.
    pub(crate) fn wants(&self) -> (bool, bool) {
        self.want
    }

    /// The peer takes what was written to it.
    pub(crate) fn take(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.outbox)
    }

    fn cap(&self, n: usize) -> usize {
        if self.max_io == 0 {
            n
        } else {
            n.min(self.max_io)
        }
    }
}

impl Wire for MemPort {
    fn read(&mut self, buf: &mut [u8]) -> Io {
        if self.inbox.is_empty() {
            return match (self.reset || self.error_only, self.fin) {
                (true, _) => Io::PeerGone(io::ErrorKind::ConnectionReset.into()),
                (false, true) => {
                    self.eof_read = true;
                    Io::Eof
                }
                (false, false) => Io::WouldBlock,
            };
        }
        let n = self.cap(buf.len().min(self.inbox.len()));
        for (dst, src) in buf[..n].iter_mut().zip(self.inbox.drain(..n)) {
            *dst = src;
        }
        self.read_total += n;
        Io::Progress(n)
    }

    fn write(&mut self, buf: &[u8]) -> Io {
        if self.reset || self.error_only || self.shut {
            return Io::PeerGone(io::ErrorKind::BrokenPipe.into());
        }
        let n = self.cap(buf.len().min(self.room));
        if n == 0 {
            return Io::WouldBlock;
        }
        #[cfg(test)]
        if let Some(k) = self.kernel.as_mut() {
            let sealed = k.send(&buf[..n]);
            self.outbox.extend(sealed);
            self.room -= n;
            return Io::Progress(n);
        }
        self.outbox.extend_from_slice(&buf[..n]);
        self.room -= n;
        Io::Progress(n)
    }
}

impl Port for MemPort {
    fn want_read(&mut self, on: bool) {
        self.want.0 = on;
    }
    fn want_write(&mut self, on: bool) {
        self.want.1 = on;
    }
    fn can_read(&self) -> bool {
        let fin = self.fin && !(self.eof_once && self.eof_read);
        #[cfg(test)]
        if self.kernel.as_ref().is_some_and(|k| k.readable()) {
            return self.want.0;
        }
        self.want.0 && (!self.inbox.is_empty() || fin || self.reset)
    }
    fn can_write(&self) -> bool {
        self.want.1 && (self.room > 0 || self.reset)
    }
    fn failed(&self) -> bool {
        self.reset || self.error_only
    }
    fn peer_finished(&self) -> bool {
        self.fin
    }
    fn shutdown_write(&mut self) {
        self.shut = true;
    }
    #[cfg(test)]
    fn prepare_offload(&mut self) -> io::Result<()> {
        // As the kernel: the ULP only on an established stream, not once
        // the peer's FIN is in.
        match self.fin || self.reset {
            true => Err(io::ErrorKind::NotConnected.into()),
            false => Ok(()),
        }
    }
    #[cfg(test)]
    fn offload_tls(&mut self, offload: &crate::tls::ktls::Offload) -> io::Result<()> {
        assert!(self.kernel.is_none(), "a second hand-off");
        if self.refuse_keys {
            return Err(io::ErrorKind::OutOfMemory.into());
        }
        self.kernel = Some(Box::new(crate::core::tests::kernel::KernelTls::new(
            offload,
        )));
        Ok(())
    }
    #[cfg(test)]
    fn read_record(&mut self, buf: &mut [u8]) -> (Io, u8) {
        if self.kernel.is_none() {
            return (self.read(buf), crate::tls::ktls::APPLICATION_DATA);
        }
        let n = self.cap(buf.len());
        let k = self.kernel.as_mut().expect("checked");
        k.receive(self.inbox.drain(..));
        if let Some((got, kind)) = k.read(&mut buf[..n]) {
            self.read_total += got;
            return (Io::Progress(got), kind);
        }
        let io = match (self.reset || self.error_only, self.fin) {
            (true, _) => Io::PeerGone(io::ErrorKind::ConnectionReset.into()),
            (false, true) if k.partial() => Io::PeerGone(io::ErrorKind::InvalidData.into()),
            (false, true) => {
                self.eof_read = true;
                Io::Eof
            }
            (false, false) => Io::WouldBlock,
        };
        (io, crate::tls::ktls::APPLICATION_DATA)
    }
    #[cfg(test)]
    fn send_close_notify(&mut self) -> Io {
        let record = self.kernel.as_mut().expect("a kernel side").close_notify();
        self.outbox.extend(record);
        Io::Progress(2)
    }
}
