//! An in-memory wire pair: two bounded byte queues, one per direction, with
//! a per-call limit so a flight can be fed one byte at a time.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::rc::Rc;

use crate::io::Io;
use crate::tls::wire::Wire;

#[derive(Debug)]
struct Pipe {
    bytes: VecDeque<u8>,
    cap: usize,
    /// The writing end closed (FIN): the reader sees EOF once drained.
    closed: bool,
    /// The reading end is gone: writes fail.
    reset: bool,
}

/// One end of a wire pair.
#[derive(Debug)]
pub(crate) struct End {
    inbound: Rc<RefCell<Pipe>>,
    outbound: Rc<RefCell<Pipe>>,
    /// At most this many bytes per read or write call.
    pub(crate) max_io: usize,
    /// Count of wire reads and writes (to show nothing spins).
    pub(crate) calls: usize,
}

/// Two connected ends, each direction holding at most `cap` bytes.
pub(crate) fn pair(cap: usize) -> (End, End) {
    let a = Rc::new(RefCell::new(Pipe {
        bytes: VecDeque::new(),
        cap,
        closed: false,
        reset: false,
    }));
    let b = Rc::new(RefCell::new(Pipe {
        bytes: VecDeque::new(),
        cap,
        closed: false,
        reset: false,
    }));
    (
        End {
            inbound: a.clone(),
            outbound: b.clone(),
            max_io: usize::MAX,
            calls: 0,
        },
        End {
            inbound: b,
            outbound: a,
            max_io: usize::MAX,
            calls: 0,
        },
    )
}

impl End {
    /// Sends FIN: the other end reads EOF after what is queued.
    pub(crate) fn close(&mut self) {
        self.outbound.borrow_mut().closed = true;
    }

    /// Bytes queued toward this end, not yet read.
    pub(crate) fn inbound_len(&self) -> usize {
        self.inbound.borrow().bytes.len()
    }

    /// Takes every byte queued toward this end (to inspect a flight).
    pub(crate) fn take_inbound(&mut self) -> Vec<u8> {
        self.inbound.borrow_mut().bytes.drain(..).collect()
    }

    /// Puts bytes toward the other end, ignoring the capacity.
    pub(crate) fn inject(&mut self, bytes: &[u8]) {
        self.outbound.borrow_mut().bytes.extend(bytes);
    }

    /// Makes this end's peer vanish: writes fail with a reset.
    pub(crate) fn reset_outbound(&mut self) {
        self.outbound.borrow_mut().reset = true;
    }
}

impl Wire for End {
    fn read(&mut self, buf: &mut [u8]) -> Io {
        self.calls += 1;
        let mut p = self.inbound.borrow_mut();
        if p.bytes.is_empty() {
            return if p.closed { Io::Eof } else { Io::WouldBlock };
        }
        let n = buf.len().min(p.bytes.len()).min(self.max_io);
        for (dst, src) in buf.iter_mut().zip(p.bytes.drain(..n)) {
            *dst = src;
        }
        Io::Progress(n)
    }

    fn write(&mut self, buf: &[u8]) -> Io {
        self.calls += 1;
        let mut p = self.outbound.borrow_mut();
        if p.reset {
            return Io::PeerGone(io::ErrorKind::ConnectionReset.into());
        }
        let room = p.cap - p.bytes.len();
        if room == 0 {
            return Io::WouldBlock;
        }
        let n = buf.len().min(room).min(self.max_io);
        p.bytes.extend(&buf[..n]);
        Io::Progress(n)
    }
}
