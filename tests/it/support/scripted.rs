//! An in-memory stream for the support modules' own unit tests: reads
//! replay a script of data and errors, writes are recorded. It lets the
//! parsers be checked at every split point without a socket.

use std::collections::VecDeque;
use std::io::{self, Read, Write};

/// One step of what [`Scripted::read`] returns.
pub enum Step {
    /// Bytes, handed out over as many reads as the callers' buffers need.
    Data(Vec<u8>),
    /// One read that fails with this kind.
    Err(io::ErrorKind),
}

/// Replays `steps` on read (then EOF), records every write.
pub struct Scripted {
    steps: VecDeque<Step>,
    /// Everything written, in order.
    pub written: Vec<u8>,
    /// The length of each `write` call.
    pub writes: Vec<usize>,
    /// Bytes read so far.
    pub read: usize,
    /// How far the front step's data has been read.
    pos: usize,
}

impl Scripted {
    pub fn new(steps: Vec<Step>) -> Self {
        Scripted {
            steps: steps.into(),
            written: Vec::new(),
            writes: Vec::new(),
            read: 0,
            pos: 0,
        }
    }

    /// A stream that yields `data` in pieces of at most `piece` bytes.
    pub fn pieces(data: &[u8], piece: usize) -> Self {
        Scripted::new(data.chunks(piece).map(|c| Step::Data(c.to_vec())).collect())
    }

    /// A stream that yields `data` in one piece.
    pub fn data(data: &[u8]) -> Self {
        Scripted::new(vec![Step::Data(data.to_vec())])
    }

    /// The bytes not read yet, for checking a reader stopped where it should.
    pub fn unread(&self) -> Vec<u8> {
        let mut v = Vec::new();
        let mut skip = self.pos;
        for s in &self.steps {
            if let Step::Data(d) = s {
                v.extend_from_slice(&d[skip..]);
            }
            skip = 0;
        }
        v
    }
}

impl Read for Scripted {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.steps.front() {
            None => Ok(0),
            Some(Step::Err(kind)) => {
                let e = io::Error::from(*kind);
                self.steps.pop_front();
                Err(e)
            }
            Some(Step::Data(d)) => {
                let d = &d[self.pos..];
                let n = d.len().min(buf.len());
                buf[..n].copy_from_slice(&d[..n]);
                self.pos += n;
                self.read += n;
                if n == d.len() {
                    self.steps.pop_front();
                    self.pos = 0;
                }
                Ok(n)
            }
        }
    }
}

impl Write for Scripted {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.written.extend_from_slice(buf);
        self.writes.push(buf.len());
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
