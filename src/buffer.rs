//! Fixed-capacity relay buffers and the pool they come from.
//!
//! A tunnel takes a buffer for a direction only while bytes are in flight and
//! gives it back when the direction drains, so ten thousand idle tunnels hold
//! no buffers at all.

/// A fixed-capacity byte queue: bytes are appended at the tail and consumed
/// from the head.
///
/// The offsets are `u32` (a buffer is at most 4 GiB; relay buffers are
/// KiB): with the pipe boxed, a flow's carrier then fits in 24 bytes, and
/// every idle tunnel holds two carriers' worth of slab space.
#[derive(Debug)]
pub(crate) struct ByteBuf {
    data: Box<[u8]>,
    start: u32,
    end: u32,
}

impl ByteBuf {
    pub(crate) fn with_capacity(cap: usize) -> Self {
        assert!(u32::try_from(cap).is_ok(), "a ByteBuf holds at most 4 GiB");
        ByteBuf {
            data: vec![0; cap].into_boxed_slice(),
            start: 0,
            end: 0,
        }
    }
    fn start(&self) -> usize {
        self.start as usize
    }
    fn end(&self) -> usize {
        self.end as usize
    }
    /// Bytes waiting to be written.
    pub(crate) fn data(&self) -> &[u8] {
        &self.data[self.start()..self.end()]
    }
    pub(crate) fn len(&self) -> usize {
        (self.end - self.start) as usize
    }
    pub(crate) fn is_empty(&self) -> bool {
        self.start == self.end
    }
    pub(crate) fn capacity(&self) -> usize {
        self.data.len()
    }
    /// How many more bytes fit (after compaction).
    pub(crate) fn room(&self) -> usize {
        self.data.len() - self.len()
    }
    /// No room to read more.
    pub(crate) fn is_full(&self) -> bool {
        self.len() == self.data.len()
    }
    /// The free tail, compacting first if the head has room and the tail none.
    pub(crate) fn space(&mut self) -> &mut [u8] {
        if self.end() == self.data.len() {
            self.compact();
        }
        let end = self.end();
        &mut self.data[end..]
    }

    /// Moves the pending bytes to the front, so all of [`ByteBuf::room`] is tail.
    fn compact(&mut self) {
        if self.start > 0 {
            self.data.copy_within(self.start()..self.end(), 0);
            self.end -= self.start;
            self.start = 0;
        }
    }
    /// Marks `n` bytes of [`ByteBuf::space`] as filled.
    pub(crate) fn commit(&mut self, n: usize) {
        debug_assert!(self.end() + n <= self.data.len());
        // In range: `n` fits the buffer, whose length fits a u32.
        self.end += n as u32;
    }
    /// Drops `n` bytes from the head.
    pub(crate) fn consume(&mut self, n: usize) {
        debug_assert!(n <= self.len());
        self.start += n as u32;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }
    /// Appends as much of `bytes` as fits in [`ByteBuf::room`]; returns how much did.
    pub(crate) fn extend(&mut self, bytes: &[u8]) -> usize {
        if self.data.len() - self.end() < bytes.len() {
            self.compact();
        }
        let end = self.end();
        let space = &mut self.data[end..];
        let n = space.len().min(bytes.len());
        space[..n].copy_from_slice(&bytes[..n]);
        self.commit(n);
        n
    }
    fn clear(&mut self) {
        self.start = 0;
        self.end = 0;
    }
}

/// Buffers of one size, recycled. Keeps at most `max_idle` spare buffers.
#[derive(Debug)]
pub(crate) struct BufPool {
    size: usize,
    free: Vec<ByteBuf>,
    max_idle: usize,
}

impl BufPool {
    pub(crate) fn new(size: usize, max_idle: usize) -> Self {
        BufPool {
            size,
            free: Vec::new(),
            max_idle,
        }
    }
    pub(crate) fn take(&mut self) -> ByteBuf {
        self.free
            .pop()
            .unwrap_or_else(|| ByteBuf::with_capacity(self.size))
    }
    /// The size of the buffers it keeps.
    pub(crate) fn size(&self) -> usize {
        self.size
    }
    /// How many spare buffers it keeps now.
    #[cfg(test)]
    pub(crate) fn spare(&self) -> usize {
        self.free.len()
    }
    /// A buffer that holds at least `n` bytes (a pooled one when it fits).
    pub(crate) fn take_at_least(&mut self, n: usize) -> ByteBuf {
        if n <= self.size {
            self.take()
        } else {
            ByteBuf::with_capacity(n)
        }
    }
    pub(crate) fn give(&mut self, mut buf: ByteBuf) {
        if self.free.len() < self.max_idle && buf.data.len() == self.size {
            buf.clear();
            self.free.push(buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_consume_compact() {
        let mut b = ByteBuf::with_capacity(8);
        assert_eq!(b.extend(b"abcdefghij"), 8);
        assert!(b.is_full());
        b.consume(3);
        assert_eq!(b.data(), b"defgh");
        assert_eq!(b.space().len(), 3, "compacts when the tail is full");
        assert_eq!(b.data(), b"defgh");
        b.consume(5);
        assert!(b.is_empty());
        assert_eq!(b.space().len(), 8);
    }

    #[test]
    fn extend_uses_all_of_room() {
        let mut b = ByteBuf::with_capacity(8);
        b.extend(b"abcdef");
        b.consume(4);
        assert_eq!(b.room(), 6);
        assert_eq!(b.extend(b"123456"), 6, "the consumed head is room too");
        assert_eq!(b.data(), b"ef123456");
    }

    #[test]
    fn pool_recycles_up_to_its_cap() {
        let mut p = BufPool::new(16, 1);
        let a = p.take();
        let b = p.take();
        p.give(a);
        p.give(b);
        assert_eq!(p.free.len(), 1);
    }
}
