//! Deterministic test data: a seeded byte stream ([`DataGen`]), its hashes,
//! a byte-by-byte [`Verifier`], and readers/writers that move it over a
//! socket in uneven chunks.

use std::io::{self, Read, Write};
use std::thread;
use std::time::Duration;

use sha2::{Digest, Sha256};

/// A SHA-256 digest.
pub type Hash = [u8; 32];

/// A deterministic byte stream (xorshift64*). Filling in chunks of any sizes
/// yields the same stream as filling in one go.
#[derive(Clone)]
pub struct DataGen {
    state: u64,
    pending: [u8; 8],
    pending_len: usize,
}

impl DataGen {
    pub fn new(seed: u64) -> Self {
        // splitmix the seed so that small seeds give unrelated streams; never zero.
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        DataGen {
            state: z | 1,
            pending: [0; 8],
            pending_len: 0,
        }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A value in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next_u64() % (hi - lo + 1) as u64) as usize
    }

    /// Fills `buf` with the next bytes of the stream.
    pub fn fill(&mut self, buf: &mut [u8]) {
        let mut i = 0;
        while self.pending_len > 0 && i < buf.len() {
            buf[i] = self.pending[8 - self.pending_len];
            self.pending_len -= 1;
            i += 1;
        }
        let rest = &mut buf[i..];
        let mut chunks = rest.chunks_exact_mut(8);
        for c in &mut chunks {
            c.copy_from_slice(&self.next_u64().to_le_bytes());
        }
        let tail = chunks.into_remainder();
        if !tail.is_empty() {
            let v = self.next_u64().to_le_bytes();
            let n = tail.len();
            tail.copy_from_slice(&v[..n]);
            self.pending = v;
            self.pending_len = 8 - n;
        }
    }

    /// The next `n` bytes as a vector.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = vec![0; n];
        self.fill(&mut v);
        v
    }
}

/// The SHA-256 of the first `len` bytes of the stream for `seed`.
pub fn expected_hash(seed: u64, len: u64) -> Hash {
    let mut g = DataGen::new(seed);
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut left = len;
    while left > 0 {
        let n = left.min(buf.len() as u64) as usize;
        g.fill(&mut buf[..n]);
        h.update(&buf[..n]);
        left -= n as u64;
    }
    h.finalize().into()
}

pub fn sha256(data: &[u8]) -> Hash {
    Sha256::digest(data).into()
}

pub fn hex(h: &Hash) -> String {
    h.iter().map(|b| format!("{b:02x}")).collect()
}

/// Checks a received stream byte by byte against the generator.
pub struct Verifier {
    gen: DataGen,
    scratch: Vec<u8>,
    /// Bytes checked so far.
    pub offset: u64,
    /// Offset of the first byte that differed, if any.
    pub first_mismatch: Option<u64>,
}

impl Verifier {
    pub fn new(seed: u64) -> Self {
        Verifier {
            gen: DataGen::new(seed),
            scratch: Vec::new(),
            offset: 0,
            first_mismatch: None,
        }
    }

    pub fn check(&mut self, data: &[u8]) {
        self.scratch.resize(data.len(), 0);
        self.gen.fill(&mut self.scratch);
        if self.first_mismatch.is_none() && self.scratch[..] != *data {
            let i = data
                .iter()
                .zip(&self.scratch)
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            self.first_mismatch = Some(self.offset + i as u64);
        }
        self.offset += data.len() as u64;
    }

    /// Panics unless exactly `len` bytes were seen and all matched.
    #[track_caller]
    pub fn assert_complete(&self, what: &str, len: u64) {
        assert_eq!(
            self.first_mismatch, None,
            "{what}: corrupted stream, first bad byte at offset {:?}",
            self.first_mismatch
        );
        assert_eq!(self.offset, len, "{what}: wrong byte count");
    }
}

/// Writes `len` bytes of the stream for `seed` to `w` in chunks of random
/// sizes in `min_chunk..=max_chunk` (the sizes come from `seed ^ 0x5eed`).
pub fn write_stream(
    w: &mut impl Write,
    seed: u64,
    len: u64,
    min_chunk: usize,
    max_chunk: usize,
) -> io::Result<()> {
    let mut data = DataGen::new(seed);
    let mut sizes = DataGen::new(seed ^ 0x5eed);
    let mut buf = vec![0u8; max_chunk];
    let mut left = len;
    while left > 0 {
        let n = (sizes.range(min_chunk, max_chunk) as u64).min(left) as usize;
        data.fill(&mut buf[..n]);
        w.write_all(&buf[..n])?;
        left -= n as u64;
    }
    w.flush()
}

/// Reads `r` to EOF, returning (byte count, SHA-256).
pub fn hash_to_eof(r: &mut impl Read) -> io::Result<(u64, Hash)> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut n = 0u64;
    loop {
        match r.read(&mut buf) {
            Ok(0) => return Ok((n, h.finalize().into())),
            Ok(k) => {
                h.update(&buf[..k]);
                n += k as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// A reader schedule that stalls and bursts: read up to `burst` bytes, then
/// sleep `pause`, repeat. Every byte goes through `verifier`. Returns at EOF.
pub fn read_stalling(
    r: &mut impl Read,
    verifier: &mut Verifier,
    burst: usize,
    pause: Duration,
) -> io::Result<u64> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut cycles = 0u64;
    loop {
        let mut in_burst = 0;
        while in_burst < burst {
            let want = (burst - in_burst).min(buf.len());
            let k = match r.read(&mut buf[..want]) {
                Ok(0) => return Ok(cycles),
                Ok(k) => k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            verifier.check(&buf[..k]);
            in_burst += k;
        }
        cycles += 1;
        thread::sleep(pause);
    }
}
