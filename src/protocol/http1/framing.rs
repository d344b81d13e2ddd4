//! Message body framing (RFC 9112 section 6): how long a body is, decided
//! from the head, and [`Body`], which finds its end as the bytes stream past.
//!
//! Requests are judged strictly, since a request whose length we read
//! differently from the origin is request smuggling: anything ambiguous is
//! an error (answered 400), never a guess.

use std::fmt;

use super::chunked::Chunked;
use super::response::ResponseHead;
use crate::protocol::http::RequestHead;

/// How a message body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// No body: the next message starts right after the head.
    Empty,
    /// Exactly this many bytes (`Content-Length`).
    Length(u64),
    /// The chunked transfer coding, up to and including the trailer section.
    Chunked,
    /// Everything until the server closes the connection (responses only).
    UntilClose,
}

/// Why a message's framing was refused. `Display` is a short human cause,
/// suitable for `X-Proxy-Error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FramingError {
    /// Both `Content-Length` and `Transfer-Encoding`.
    ContentLengthAndTransferEncoding,
    /// More than one `Content-Length` header, or a list as its value.
    SeveralContentLengths,
    /// A `Content-Length` that is not one or more digits fitting in a u64.
    InvalidContentLength,
    /// A request `Transfer-Encoding` whose final coding is not `chunked`, or
    /// that applies `chunked` more than once.
    UnsupportedTransferEncoding,
    /// `Transfer-Encoding` in an HTTP/1.0 request.
    TransferEncodingInHttp10,
    /// A chunk-size line without hex digits, or with a bad byte after them.
    InvalidChunkSize,
    /// A chunk size that does not fit in a u64.
    ChunkSizeOverflow,
    /// A chunk-size line over [`crate::protocol::http1::MAX_CHUNK_LINE`] bytes.
    ChunkLineTooLong,
    /// A line in a chunked body not ended by CRLF (e.g. a bare LF).
    BadLineEnding,
    /// Chunk data not followed by CRLF.
    MissingChunkCrlf,
    /// A control character in the trailer section.
    InvalidTrailer,
    /// A trailer section over [`crate::protocol::http1::MAX_TRAILER_SECTION`] bytes.
    TrailersTooLarge,
}

impl fmt::Display for FramingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FramingError::ContentLengthAndTransferEncoding => {
                "Content-Length and Transfer-Encoding together"
            }
            FramingError::SeveralContentLengths => "several Content-Length values",
            FramingError::InvalidContentLength => "invalid Content-Length",
            FramingError::UnsupportedTransferEncoding => {
                "Transfer-Encoding does not end in a single chunked"
            }
            FramingError::TransferEncodingInHttp10 => "Transfer-Encoding in an HTTP/1.0 request",
            FramingError::InvalidChunkSize => "invalid chunk size",
            FramingError::ChunkSizeOverflow => "chunk size too large",
            FramingError::ChunkLineTooLong => "chunk-size line too long",
            FramingError::BadLineEnding => "chunked body line not ended by CRLF",
            FramingError::MissingChunkCrlf => "chunk data not followed by CRLF",
            FramingError::InvalidTrailer => "invalid byte in trailer section",
            FramingError::TrailersTooLarge => "trailer section too large",
        })
    }
}

impl std::error::Error for FramingError {}

/// Request framing (RFC 9112 §6): Transfer-Encoding + Content-Length together → Err (smuggling);
/// more than one Content-Length header, or a comma list → Err; invalid CL (non-digits, sign, overflow) → Err;
/// TE whose final coding is not `chunked` → Err; TE in an HTTP/1.0 request → Err; TE chunked → Chunked;
/// CL → Length(n) (Length(0) is fine); neither → Empty.
///
/// Several `Transfer-Encoding` headers form one list; `chunked` anywhere but
/// once at the end is an error. A Content-Length is one or more ASCII digits
/// (surrounding SP/HTAB ignored): empty, signs, spaces inside, and values
/// over `u64::MAX` are refused, even lists of equal values (`5, 5`).
pub fn request_body_kind(head: &RequestHead) -> Result<BodyKind, FramingError> {
    let te = transfer_codings(&head.headers);
    let cl = content_length(&head.headers)?;
    match (te, cl) {
        (Some(_), Some(_)) => Err(FramingError::ContentLengthAndTransferEncoding),
        (Some(_), None) if head.version == 0 => Err(FramingError::TransferEncodingInHttp10),
        (Some(codings), None) => {
            let chunked = codings.iter().filter(|c| *c == "chunked").count();
            if chunked == 1 && codings.last().is_some_and(|c| c == "chunked") {
                Ok(BodyKind::Chunked)
            } else {
                Err(FramingError::UnsupportedTransferEncoding)
            }
        }
        (None, Some(n)) => Ok(BodyKind::Length(n)),
        (None, None) => Ok(BodyKind::Empty),
    }
}

/// Response framing (RFC 9112 §6.3): request method HEAD, status 1xx, 204, 304 → Empty (whatever headers say);
/// TE+CL → Err; TE with final chunked → Chunked; TE otherwise → UntilClose; several/invalid CL → Err;
/// CL → Length; neither → UntilClose.
///
/// A 2xx answer to CONNECT is not special-cased here: the caller switches to
/// a tunnel before asking.
pub fn response_body_kind(
    request_method: &str,
    head: &ResponseHead,
) -> Result<BodyKind, FramingError> {
    if request_method == "HEAD" || matches!(head.status, 100..=199 | 204 | 304) {
        return Ok(BodyKind::Empty);
    }
    let te = transfer_codings(&head.headers);
    let cl = content_length(&head.headers)?;
    match (te, cl) {
        (Some(_), Some(_)) => Err(FramingError::ContentLengthAndTransferEncoding),
        (Some(codings), None) if codings.last().is_some_and(|c| c == "chunked") => {
            Ok(BodyKind::Chunked)
        }
        (Some(_), None) => Ok(BodyKind::UntilClose),
        (None, Some(n)) => Ok(BodyKind::Length(n)),
        (None, None) => Ok(BodyKind::UntilClose),
    }
}

/// The transfer codings of all `Transfer-Encoding` headers in order,
/// lower-cased, empty list elements dropped; `None` without such a header.
fn transfer_codings(headers: &[(String, Vec<u8>)]) -> Option<Vec<String>> {
    let mut found = false;
    let mut codings = Vec::new();
    for (_, value) in headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("transfer-encoding"))
    {
        found = true;
        codings.extend(
            value
                .split(|&b| b == b',')
                .map(trim_ows)
                .filter(|c| !c.is_empty())
                .map(|c| String::from_utf8_lossy(c).to_ascii_lowercase()),
        );
    }
    found.then_some(codings)
}

/// The one `Content-Length`, if any. See [`request_body_kind`] for what is valid.
fn content_length(headers: &[(String, Vec<u8>)]) -> Result<Option<u64>, FramingError> {
    let mut values = headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .map(|(_, v)| trim_ows(v));
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() || value.contains(&b',') {
        return Err(FramingError::SeveralContentLengths);
    }
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return Err(FramingError::InvalidContentLength);
    }
    value
        .iter()
        .try_fold(0u64, |n, &d| {
            n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
        })
        .map(Some)
        .ok_or(FramingError::InvalidContentLength)
}

/// `value` without leading and trailing SP and HTAB.
pub(super) fn trim_ows(value: &[u8]) -> &[u8] {
    let ows = |b: &u8| *b == b' ' || *b == b'\t';
    let start = value.iter().position(|b| !ows(b)).unwrap_or(value.len());
    let end = value.iter().rposition(|b| !ows(b)).map_or(start, |i| i + 1);
    &value[start..end]
}

/// Tracks one message body as its bytes stream past.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Body {
    kind: BodyKind,
    state: BodyState,
}

/// What is left of a [`Body`].
#[derive(Debug, Clone, PartialEq, Eq)]
enum BodyState {
    /// `left` bytes of a `Length` body (`Empty` and `Length(0)` start at 0).
    Length { left: u64 },
    /// Until close: never done.
    UntilClose,
    /// A chunked body.
    Chunked(Chunked),
}

impl Body {
    /// A tracker at the start of a body of this kind.
    pub fn new(kind: BodyKind) -> Body {
        let state = match kind {
            BodyKind::Empty => BodyState::Length { left: 0 },
            BodyKind::Length(n) => BodyState::Length { left: n },
            BodyKind::Chunked => BodyState::Chunked(Chunked::new()),
            BodyKind::UntilClose => BodyState::UntilClose,
        };
        Body { kind, state }
    }

    /// How many bytes from the front of `buf` belong to this body (forward them verbatim). Stops at the
    /// body's end: a return < buf.len() means the body ended and the rest is the next message. For
    /// Chunked it parses chunk-size lines (hex, optional `;ext`), data, CRLFs, the last chunk `0` and the
    /// trailer section up to its final CRLF — all consumed (trailers pass through). Strict: CRLF required
    /// (bare LF → Err), chunk-size line max 1024 bytes, trailer section max 32 KiB, size overflow → Err.
    /// UntilClose consumes everything and is never done. Works with any split of the input (including
    /// 1 byte at a time) and keeps only O(1) state (no buffering of body data).
    ///
    /// Once done it returns `Ok(0)`. After an error the body is unusable:
    /// every later call returns the same error.
    pub fn advance(&mut self, buf: &[u8]) -> Result<usize, FramingError> {
        match &mut self.state {
            BodyState::Length { left } => {
                let take = usize::try_from(*left).map_or(buf.len(), |l| l.min(buf.len()));
                *left -= take as u64;
                Ok(take)
            }
            BodyState::UntilClose => Ok(buf.len()),
            BodyState::Chunked(chunked) => chunked.advance(buf),
        }
    }

    /// The whole body went past. `Empty` and `Length(0)` are done at once;
    /// `UntilClose` never is (the end is the peer's close).
    pub fn is_done(&self) -> bool {
        match &self.state {
            BodyState::Length { left } => *left == 0,
            BodyState::UntilClose => false,
            BodyState::Chunked(chunked) => chunked.is_done(),
        }
    }

    /// The kind this body was created with.
    pub fn kind(&self) -> BodyKind {
        self.kind
    }
}
