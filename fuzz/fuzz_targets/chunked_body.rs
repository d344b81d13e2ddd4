//! Chunked bodies: fed back to back (a new body after each one ends) in
//! fuzzer-chosen pieces, the tracker never consumes more than it is given,
//! stops short only at a body's end, and finds the same ends, total and
//! error as when the stream is fed whole or one byte at a time.
#![no_main]

use libfuzzer_sys::fuzz_target;
use portcullis::protocol::http1::{Body, BodyKind, FramingError};

/// Body ends and bytes consumed, or the first error.
type Outcome = Result<(Vec<usize>, usize), FramingError>;

/// Feeds `pieces` through chunked bodies, one after another.
fn run<'a>(pieces: impl IntoIterator<Item = &'a [u8]>) -> Outcome {
    let mut body = Body::new(BodyKind::Chunked);
    let mut ends = Vec::new();
    let mut pos = 0;
    for piece in pieces {
        let mut off = 0;
        while off < piece.len() {
            let n = body.advance(&piece[off..])?;
            assert!(n <= piece.len() - off, "consumed more than given");
            off += n;
            pos += n;
            if body.is_done() {
                ends.push(pos);
                assert_eq!(body.advance(&piece[off..]), Ok(0), "done takes nothing");
                body = Body::new(BodyKind::Chunked);
            } else {
                assert_eq!(off, piece.len(), "stopped short but not done");
            }
        }
    }
    Ok((ends, pos))
}

/// Pieces of `data` with lengths from `seed` (xorshift): mostly small,
/// sometimes up to 4 KiB, sometimes empty.
fn pieces(data: &[u8], seed: u64) -> Vec<&[u8]> {
    let mut state = seed | 1;
    let mut out = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let limit = if state & 0x100 == 0 { 16 } else { 4096 };
        let take = ((state >> 16) % (limit + 1)) as usize;
        let (piece, tail) = rest.split_at(take.min(rest.len()));
        out.push(piece);
        rest = tail;
    }
    out
}

fuzz_target!(|input: (u64, &[u8])| {
    let (seed, data) = input;
    let whole = run([data]);
    if let Ok((ends, total)) = &whole {
        assert!(*total <= data.len());
        assert!(ends.windows(2).all(|w| w[0] < w[1]));
    }
    assert_eq!(run(pieces(data, seed)), whole, "fuzzer-chosen pieces");
    assert_eq!(run(data.chunks(1)), whole, "one byte at a time");
    let cut = (seed % (data.len() as u64 + 1)) as usize;
    let (a, b) = data.split_at(cut);
    assert_eq!(run([a, b]), whole, "cut at {cut}");
});
