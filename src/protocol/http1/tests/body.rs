//! Body: Empty, Length, UntilClose and Chunked, valid and invalid.

use crate::protocol::http1::{Body, BodyKind, FramingError, MAX_CHUNK_LINE, MAX_TRAILER_SECTION};

/// Feeds `input` whole to a fresh chunked body: (consumed, done).
fn chunked(input: &[u8]) -> Result<(usize, bool), FramingError> {
    let mut body = Body::new(BodyKind::Chunked);
    let n = body.advance(input)?;
    Ok((n, body.is_done()))
}

/// A complete chunked body followed by a pipelined request: consumed up to
/// exactly the end of the body.
fn complete(body: &[u8]) {
    let mut input = body.to_vec();
    input.extend_from_slice(b"GET /next HTTP/1.1\r\n\r\n");
    assert_eq!(
        chunked(&input),
        Ok((body.len(), true)),
        "{}",
        String::from_utf8_lossy(body)
    );
    // Any strict prefix is incomplete and all consumed.
    for cut in 0..body.len() {
        assert_eq!(chunked(&body[..cut]), Ok((cut, false)), "prefix {cut}");
    }
}

fn refused(input: &[u8], expected: FramingError) {
    assert_eq!(
        chunked(input),
        Err(expected),
        "{}",
        String::from_utf8_lossy(input)
    );
}

#[test]
fn empty_is_done_at_once() {
    let mut body = Body::new(BodyKind::Empty);
    assert!(body.is_done());
    assert_eq!(body.kind(), BodyKind::Empty);
    assert_eq!(body.advance(b"GET / HTTP/1.1\r\n"), Ok(0));
    assert_eq!(body.advance(b""), Ok(0));
}

#[test]
fn length_bodies() {
    let mut body = Body::new(BodyKind::Length(0));
    assert!(body.is_done());
    assert_eq!(body.advance(b"next"), Ok(0));

    let mut body = Body::new(BodyKind::Length(1));
    assert!(!body.is_done());
    assert_eq!(body.advance(b""), Ok(0));
    assert_eq!(body.advance(b"xy"), Ok(1));
    assert!(body.is_done());
    assert_eq!(body.advance(b"y"), Ok(0));

    let mut body = Body::new(BodyKind::Length(10));
    assert_eq!(body.advance(b"0123"), Ok(4));
    assert!(!body.is_done());
    assert_eq!(body.advance(b"456"), Ok(3));
    assert_eq!(body.advance(b"789GET"), Ok(3));
    assert!(body.is_done());
    assert_eq!(body.kind(), BodyKind::Length(10));

    let mut body = Body::new(BodyKind::Length(u64::MAX));
    assert_eq!(body.advance(&[0; 4096]), Ok(4096));
    assert!(!body.is_done());
}

#[test]
fn until_close_takes_everything_and_never_ends() {
    let mut body = Body::new(BodyKind::UntilClose);
    assert!(!body.is_done());
    assert_eq!(body.advance(b"HTTP/1.1 200 OK\r\n\r\n0\r\n\r\n"), Ok(24));
    assert_eq!(body.advance(b""), Ok(0));
    assert!(!body.is_done());
    assert_eq!(body.kind(), BodyKind::UntilClose);
}

#[test]
fn chunked_empty_body() {
    complete(b"0\r\n\r\n");
    complete(b"000\r\n\r\n");
}

#[test]
fn chunked_one_byte_and_boundaries() {
    complete(b"1\r\na\r\n0\r\n\r\n");
    // Chunk data that looks like framing is data.
    complete(b"5\r\n0\r\n\r\n\r\n0\r\n\r\n");
    complete(b"2\r\n\r\n\r\n0\r\n\r\n");
    complete(b"A\r\n0123456789\r\na\r\n0123456789\r\n0\r\n\r\n");
    complete(b"10\r\n0123456789abcdef\r\n0\r\n\r\n");
}

#[test]
fn chunked_with_extensions() {
    complete(b"5;name=value\r\nhello\r\n0;last\r\n\r\n");
    complete(b"5 ; a=\"q;uoted\" ;b\r\nhello\r\n0\r\n\r\n");
    complete(b"5\t;x\r\nhello\r\n0\r\n\r\n");
}

#[test]
fn chunked_with_trailers() {
    complete(b"0\r\nChecksum: abc\r\n\r\n");
    complete(b"3\r\nabc\r\n0\r\nA: 1\r\nB:\t2 \r\n\r\n");
}

#[test]
fn chunked_many_chunks() {
    let mut body = Vec::new();
    for size in 1..200usize {
        body.extend_from_slice(format!("{size:x}\r\n").as_bytes());
        body.extend((0..size).map(|i| b"\r\n0;"[i % 4]));
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(b"0\r\nT: v\r\n\r\n");
    complete(&body);
}

#[test]
fn chunked_largest_size_is_data() {
    let mut body = Body::new(BodyKind::Chunked);
    assert_eq!(body.advance(b"ffffffffffffffff\r\nabc"), Ok(21));
    assert!(!body.is_done());
}

#[test]
fn chunked_bare_lf_refused() {
    refused(b"5\nhello\r\n0\r\n\r\n", FramingError::BadLineEnding);
    refused(b"5;ext\nhello\r\n0\r\n\r\n", FramingError::BadLineEnding);
    refused(b"5\rhello", FramingError::BadLineEnding);
    refused(b"5\r\nhello\n0\r\n\r\n", FramingError::MissingChunkCrlf);
    refused(b"5\r\nhello\r0\r\n\r\n", FramingError::MissingChunkCrlf);
    refused(b"5\r\nhelloX\r\n", FramingError::MissingChunkCrlf);
    refused(b"0\r\n\n", FramingError::BadLineEnding);
    refused(b"0\r\nA: 1\n\r\n", FramingError::BadLineEnding);
    refused(b"0\r\nA: 1\r\n\rX", FramingError::BadLineEnding);
}

#[test]
fn chunked_invalid_size_refused() {
    for input in [
        &b"\r\n"[..],
        b"g\r\n",
        b";x\r\n",
        b"-5\r\n",
        b"+5\r\n",
        b"0x5\r\n",
        b" 5\r\n",
        b"5 \r\n",
        b"5 x\r\n",
        b"5\x00\r\n",
    ] {
        refused(input, FramingError::InvalidChunkSize);
    }
    refused(b"5;a\x01b\r\n", FramingError::InvalidChunkSize);
}

#[test]
fn chunked_size_overflow_refused() {
    refused(b"10000000000000000\r\n", FramingError::ChunkSizeOverflow);
    refused(b"fffffffffffffffff\r\n", FramingError::ChunkSizeOverflow);
    // Leading zeros are not an overflow (but count towards the line limit).
    complete(b"00000000000000000000000000000001\r\nx\r\n0\r\n\r\n");
}

#[test]
fn chunk_line_limit() {
    let mut at_limit = b"1;".to_vec();
    at_limit.resize(MAX_CHUNK_LINE, b'a');
    at_limit.extend_from_slice(b"\r\nx\r\n0\r\n\r\n");
    complete(&at_limit);

    let mut over = b"1;".to_vec();
    over.resize(MAX_CHUNK_LINE + 1, b'a');
    refused(&over, FramingError::ChunkLineTooLong);
    refused(&vec![b'0'; 5000], FramingError::ChunkLineTooLong);
}

#[test]
fn trailer_section_limit() {
    // The section counts every byte after the last-chunk line, final CRLF included.
    let mut at_limit = b"0\r\nX: ".to_vec();
    at_limit.resize(3 + MAX_TRAILER_SECTION - 4, b'a');
    at_limit.extend_from_slice(b"\r\n\r\n");
    assert_eq!(at_limit.len(), 3 + MAX_TRAILER_SECTION);
    complete(&at_limit);

    let mut over = b"0\r\nX: ".to_vec();
    over.resize(3 + MAX_TRAILER_SECTION - 3, b'a');
    over.extend_from_slice(b"\r\n\r\n");
    refused(&over, FramingError::TrailersTooLarge);
}

#[test]
fn control_characters_in_trailers_refused() {
    refused(b"0\r\nA: \x00\r\n\r\n", FramingError::InvalidTrailer);
    refused(b"0\r\nA: \x7f\r\n\r\n", FramingError::InvalidTrailer);
}

#[test]
fn errors_are_sticky() {
    let mut body = Body::new(BodyKind::Chunked);
    assert_eq!(body.advance(b"5\n"), Err(FramingError::BadLineEnding));
    assert_eq!(body.advance(b"hello"), Err(FramingError::BadLineEnding));
    assert!(!body.is_done());
}

#[test]
fn done_chunked_body_takes_nothing_more() {
    let mut body = Body::new(BodyKind::Chunked);
    assert_eq!(body.advance(b"0\r\n\r"), Ok(4));
    assert!(!body.is_done());
    assert_eq!(body.advance(b"\nHTTP"), Ok(1));
    assert!(body.is_done());
    assert_eq!(body.advance(b"HTTP"), Ok(0));
    assert_eq!(body.kind(), BodyKind::Chunked);
}
