//! Split invariance: feeding `Body::advance` a stream in pieces, cut at any
//! byte boundary, one byte at a time or at pseudo-random places, gives the
//! same body ends and the same total as feeding it whole.

use crate::protocol::http1::{Body, BodyKind, FramingError};

/// A stream of pipelined bodies: each body's kind and bytes, then bytes of
/// whatever comes after the last body.
struct Stream {
    bodies: Vec<(BodyKind, Vec<u8>)>,
    rest: &'static [u8],
}

impl Stream {
    fn bytes(&self) -> Vec<u8> {
        let mut out: Vec<u8> = self.bodies.iter().flat_map(|(_, b)| b.clone()).collect();
        out.extend_from_slice(self.rest);
        out
    }

    fn kinds(&self) -> Vec<BodyKind> {
        self.bodies.iter().map(|(k, _)| *k).collect()
    }

    /// Where each body ends, from the construction.
    fn expected_ends(&self) -> Vec<usize> {
        self.bodies
            .iter()
            .scan(0, |pos, (_, b)| {
                *pos += b.len();
                Some(*pos)
            })
            .collect()
    }
}

/// Feeds `pieces` (in order) through one `Body` per kind, starting the next
/// when one is done. Returns each body's end offset and the bytes consumed.
fn run<'a>(
    kinds: &[BodyKind],
    pieces: impl IntoIterator<Item = &'a [u8]>,
) -> Result<(Vec<usize>, usize), FramingError> {
    let mut kinds = kinds.iter();
    let mut body = kinds.next().map(|&k| Body::new(k));
    let mut ends = Vec::new();
    let mut pos = 0;
    let mut settle = |body: &mut Option<Body>, pos: usize, ends: &mut Vec<usize>| {
        while body.as_ref().is_some_and(Body::is_done) {
            ends.push(pos);
            *body = kinds.next().map(|&k| Body::new(k));
        }
    };
    for piece in pieces {
        let mut off = 0;
        loop {
            settle(&mut body, pos, &mut ends);
            let Some(current) = body.as_mut() else { break };
            if off == piece.len() {
                break;
            }
            let n = current.advance(&piece[off..])?;
            assert!(n <= piece.len() - off, "consumed more than given");
            if n < piece.len() - off {
                assert!(current.is_done(), "stopped short but not done");
            }
            off += n;
            pos += n;
        }
    }
    settle(&mut body, pos, &mut ends);
    Ok((ends, pos))
}

fn chunked(text: &str) -> (BodyKind, Vec<u8>) {
    (BodyKind::Chunked, text.as_bytes().to_vec())
}

fn length(text: &str) -> (BodyKind, Vec<u8>) {
    (
        BodyKind::Length(text.len() as u64),
        text.as_bytes().to_vec(),
    )
}

fn streams() -> Vec<Stream> {
    vec![
        Stream {
            bodies: vec![
                chunked("5;ext=1\r\nhello\r\n0\r\nTrailer-A: x\r\n\r\n"),
                length("0123456789"),
                (BodyKind::Empty, Vec::new()),
                chunked("1\r\n\n\r\nA\r\n\r\n\r\n\r\n\r\n\r\n\r\n0\r\n\r\n"),
                length(""),
                chunked("3\r\nabc\r\n2 ;q\r\nde\r\n0;end\r\nT1: a\r\nT2: b\r\n\r\n"),
                length("0\r\n\r\n"),
            ],
            rest: b"GET /next HTTP/1.1\r\n\r\n",
        },
        Stream {
            bodies: vec![
                chunked("0\r\n\r\n"),
                chunked("0\r\n\r\n"),
                length("x"),
                chunked("f\r\n0123456789abcde\r\n10\r\n0123456789abcdef\r\n0\r\n\r\n"),
            ],
            rest: b"",
        },
        Stream {
            bodies: vec![chunked("2\r\nab\r\n0\r\n\r\n")],
            rest: b"0\r\n\r\n",
        },
        Stream {
            bodies: vec![
                length("body"),
                (
                    BodyKind::UntilClose,
                    b"and then everything, 0\r\n\r\n".to_vec(),
                ),
            ],
            rest: b"",
        },
    ]
}

/// Streams that fail somewhere: split feeding fails the same way.
fn broken() -> Vec<(Vec<BodyKind>, &'static [u8])> {
    let c = BodyKind::Chunked;
    vec![
        (vec![c], b"5\nhello\r\n0\r\n\r\n"),
        (vec![c, c], b"0\r\n\r\n3\r\nabc\n0\r\n\r\n"),
        (vec![BodyKind::Length(2), c], b"ab0\r\nX: 1\n\r\n"),
        (vec![c], b"1000000000000000000\r\n"),
        (vec![c], b"1;a\x00\r\n"),
    ]
}

/// Pseudo-random cut points (xorshift, fixed seed).
fn random_pieces(data: &[u8], seed: u64) -> Vec<&[u8]> {
    let mut state = seed | 1;
    let mut pieces = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let take = (state % 9) as usize % (rest.len() + 1);
        let (piece, tail) = rest.split_at(take);
        pieces.push(piece);
        rest = tail;
    }
    pieces
}

#[test]
fn whole_stream_ends_where_constructed() {
    for stream in streams() {
        let data = stream.bytes();
        let expected_total = stream.expected_ends().last().copied().unwrap_or(0);
        let whole = run(&stream.kinds(), [&data[..]]).expect("valid stream");
        let total = if stream.kinds().last() == Some(&BodyKind::UntilClose) {
            data.len()
        } else {
            expected_total
        };
        // UntilClose never ends, so its end is not recorded.
        let mut ends = stream.expected_ends();
        if stream.kinds().last() == Some(&BodyKind::UntilClose) {
            ends.pop();
        }
        assert_eq!(whole, (ends, total));
    }
}

#[test]
fn every_split_matches_whole() {
    for stream in streams() {
        let data = stream.bytes();
        let kinds = stream.kinds();
        let whole = run(&kinds, [&data[..]]).expect("valid stream");
        for cut in 0..=data.len() {
            let (a, b) = data.split_at(cut);
            assert_eq!(run(&kinds, [a, b]), Ok(whole.clone()), "cut at {cut}");
        }
        assert_eq!(
            run(&kinds, data.chunks(1)),
            Ok(whole.clone()),
            "one byte at a time"
        );
        for seed in 1..50 {
            assert_eq!(
                run(&kinds, random_pieces(&data, seed)),
                Ok(whole.clone()),
                "seed {seed}"
            );
        }
    }
}

#[test]
fn every_pair_of_cuts_matches_whole() {
    for stream in streams().iter().take(2) {
        let data = stream.bytes();
        let kinds = stream.kinds();
        let whole = run(&kinds, [&data[..]]).expect("valid stream");
        for i in 0..=data.len() {
            for j in i..=data.len() {
                let pieces = [&data[..i], &data[i..j], &data[j..]];
                assert_eq!(run(&kinds, pieces), Ok(whole.clone()), "cuts {i} {j}");
            }
        }
    }
}

#[test]
fn broken_streams_fail_the_same_in_pieces() {
    for (kinds, data) in broken() {
        let whole = run(&kinds, [data]);
        assert!(whole.is_err(), "{}", String::from_utf8_lossy(data));
        for cut in 0..=data.len() {
            let (a, b) = data.split_at(cut);
            assert_eq!(run(&kinds, [a, b]), whole, "cut at {cut}");
        }
        assert_eq!(run(&kinds, data.chunks(1)), whole, "one byte at a time");
    }
}
