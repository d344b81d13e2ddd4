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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::scripted::{Scripted, Step};

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn stream_matches_an_independent_implementation() {
        // Known answers from a separate (Python) splitmix64 + xorshift64*
        // implementation: the pattern cannot drift unnoticed.
        assert_eq!(
            DataGen::new(0).bytes(16),
            unhex("d08206550db4bc7bfdc90cd013e47fde")
        );
        assert_eq!(
            DataGen::new(1).bytes(16),
            unhex("9b1b61f35da5464bf43e760e41f1e1d7")
        );
        assert_eq!(
            hex(&expected_hash(42, 1000)),
            "efe1a2a5c2d8aed8b363dc51314364aeee70c666a60052b3d76f1feac45b1f07"
        );
        assert_eq!(
            hex(&expected_hash(7, 3)),
            "5d1f6ffc9cfd7cecb206df9b89f538e20b68c85b42fb38d909dbe2e78d5c9d12"
        );
    }

    #[test]
    fn stream_is_the_same_whatever_the_chunking() {
        let whole = DataGen::new(42).bytes(100_003);
        let mut g = DataGen::new(42);
        let mut sizes = DataGen::new(7);
        let mut pieces = Vec::new();
        while pieces.len() < whole.len() {
            let n = sizes.range(0, 37).min(whole.len() - pieces.len());
            pieces.extend(g.bytes(n));
        }
        assert_eq!(pieces, whole);
    }

    #[test]
    fn stream_is_not_degenerate() {
        // A constant or short-cycled stream would still be chunking-invariant
        // and agree with its own hash, and prove nothing about a relay.
        let b = DataGen::new(0).bytes(64 * 1024);
        let mut seen = [false; 256];
        for &x in &b {
            seen[x as usize] = true;
        }
        assert!(seen.iter().all(|&s| s), "every byte value appears");
        assert!(!b[1..].windows(64).any(|w| w == &b[..64]), "no short cycle");
        assert_ne!(DataGen::new(1).bytes(64), DataGen::new(2).bytes(64));
    }

    #[test]
    fn range_stays_inside_its_bounds_and_reaches_them() {
        let mut g = DataGen::new(3);
        let v: Vec<usize> = (0..1000).map(|_| g.range(5, 9)).collect();
        assert!(v.iter().all(|&x| (5..=9).contains(&x)));
        assert!(v.contains(&5) && v.contains(&9));
        assert_eq!(g.range(4, 4), 4);
    }

    #[test]
    fn hashes_agree_with_the_generator() {
        for len in [0u64, 1, 7, 8, 9, (1 << 20) + 5] {
            let bytes = DataGen::new(42).bytes(len as usize);
            assert_eq!(expected_hash(42, len), sha256(&bytes), "len {len}");
        }
        assert_ne!(expected_hash(42, 100), expected_hash(42, 101));
        assert_ne!(expected_hash(42, 100), expected_hash(43, 100));
        assert_eq!(
            hex(&sha256(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn verifier_accepts_the_stream_in_any_chunks() {
        let whole = DataGen::new(42).bytes(10_000);
        let mut v = Verifier::new(42);
        v.check(&whole[..1]);
        v.check(&[]);
        v.check(&whole[1..4099]);
        v.check(&whole[4099..]);
        assert_eq!(v.first_mismatch, None);
        v.assert_complete("self", 10_000);
    }

    #[test]
    fn verifier_reports_the_first_bad_offset_across_chunks() {
        let mut bad = DataGen::new(42).bytes(10_000);
        bad[5000] ^= 1;
        bad[7000] ^= 1;
        let mut v = Verifier::new(42);
        v.check(&bad[..4000]);
        assert_eq!(v.first_mismatch, None);
        v.check(&bad[4000..]);
        assert_eq!(v.first_mismatch, Some(5000));
        assert_eq!(v.offset, 10_000);

        // A wrong seed is caught at once.
        let mut v = Verifier::new(43);
        v.check(&DataGen::new(42).bytes(100));
        assert_eq!(v.first_mismatch, Some(0));
    }

    #[test]
    #[should_panic(expected = "corrupted stream")]
    fn verifier_refuses_a_corrupt_stream() {
        let mut bad = DataGen::new(1).bytes(100);
        bad[99] ^= 0x80;
        let mut v = Verifier::new(1);
        v.check(&bad);
        v.assert_complete("self", 100);
    }

    #[test]
    #[should_panic(expected = "wrong byte count")]
    fn verifier_refuses_a_short_stream() {
        let mut v = Verifier::new(1);
        v.check(&DataGen::new(1).bytes(99));
        v.assert_complete("self", 100);
    }

    #[test]
    fn write_stream_writes_the_stream_in_bounded_chunks() {
        let mut w = Scripted::new(vec![]);
        write_stream(&mut w, 9, 100_000, 10, 3000).unwrap();
        assert_eq!(w.written, DataGen::new(9).bytes(100_000));
        let (last, rest) = w.writes.split_last().unwrap();
        assert!(rest.iter().all(|&n| (10..=3000).contains(&n)), "{rest:?}");
        assert!(*last <= 3000);
        assert!(rest.iter().any(|&n| n != rest[0]), "sizes vary");

        let mut w = Scripted::new(vec![]);
        write_stream(&mut w, 9, 0, 1, 1).unwrap();
        assert!(w.writes.is_empty());
    }

    #[test]
    fn hash_to_eof_counts_and_hashes_across_interruptions() {
        let data = DataGen::new(5).bytes(300_000);
        let mut steps = vec![Step::Err(io::ErrorKind::Interrupted)];
        steps.extend(data.chunks(70_000).map(|c| Step::Data(c.to_vec())));
        let mut r = Scripted::new(steps);
        assert_eq!(
            hash_to_eof(&mut r).unwrap(),
            (300_000, expected_hash(5, 300_000))
        );

        let mut r = Scripted::new(vec![
            Step::Data(vec![1]),
            Step::Err(io::ErrorKind::ConnectionReset),
        ]);
        assert_eq!(
            hash_to_eof(&mut r).unwrap_err().kind(),
            io::ErrorKind::ConnectionReset
        );
    }

    #[test]
    fn read_stalling_verifies_every_byte_and_counts_full_bursts() {
        let data = DataGen::new(8).bytes(2500);
        let mut r = Scripted::pieces(&data, 300);
        let mut v = Verifier::new(8);
        assert_eq!(
            read_stalling(&mut r, &mut v, 1000, Duration::ZERO).unwrap(),
            2
        );
        v.assert_complete("stalling", 2500);
    }
}
