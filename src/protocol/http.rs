//! HTTP/1.x request heads for the proxy handshake (CONNECT), and the proxy's
//! own answers. Sans-IO.
//!
//! Parsing is done by `httparse`; this module adds the size limit, maps its
//! errors to [`HeadError`] (answered 400 or 431) and owns the result, so the
//! caller may drop or reuse its buffer.

/// What [`parse_request_head`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    /// The method, e.g. `CONNECT`.
    pub method: String,
    /// The request target as sent (authority form for CONNECT).
    pub target: String,
    /// Minor version: 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub version: u8,
    /// Headers in order, names as sent.
    pub headers: Vec<(String, Vec<u8>)>,
}

impl RequestHead {
    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        find_header(&self.headers, name)
    }
}

/// The first of `headers` named `name` (case-insensitive).
pub fn find_header<'a>(headers: &'a [(String, Vec<u8>)], name: &str) -> Option<&'a [u8]> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_slice())
}

/// Why a head could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeadError {
    /// Not HTTP/1.x, or broken syntax: answered 400. The string says what.
    Malformed(String),
    /// The head is over the limit (or has too many headers): answered 431.
    TooLarge,
}

/// Parses a request head from the front of `buf`.
///
/// `Ok(Some((head, n)))`: a whole head of `n` bytes (bytes after it are the
/// client's, to be forwarded). `Ok(None)`: incomplete and under `max` bytes.
/// `Err(TooLarge)` once `buf` holds `max` bytes with no end of head.
///
/// Only HTTP/1.0 and HTTP/1.1 are accepted; empty lines before the request
/// line are skipped (RFC 9112 section 2.2) and counted in `n`. A head is never
/// longer than `max` bytes: only the first `max` bytes of `buf` are looked at.
/// More than [`MAX_HEADERS`] header lines is [`HeadError::TooLarge`].
pub fn parse_request_head(
    buf: &[u8],
    max: usize,
) -> Result<Option<(RequestHead, usize)>, HeadError> {
    let window = &buf[..buf.len().min(max)];
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(window) {
        Ok(httparse::Status::Complete(n)) => Ok(Some((RequestHead::from_httparse(&req), n))),
        Ok(httparse::Status::Partial) if window.len() >= max => Err(HeadError::TooLarge),
        Ok(httparse::Status::Partial) => Ok(None),
        Err(httparse::Error::TooManyHeaders) => Err(HeadError::TooLarge),
        Err(e) => Err(HeadError::Malformed(malformed_cause(e).to_owned())),
    }
}

/// Says when a head still arriving is worth parsing again.
///
/// A head ends at its first empty line: until one arrives, a parse can only
/// say "more" (or find the start malformed), and parsing again on every
/// arrival costs time quadratic in a head sent a byte at a time (32 KiB a
/// byte at a time would be half a gigabyte of parsing on the loop). The gate
/// looks at each byte once for an empty line (`\n\n` or `\n\r\n`) after
/// the first byte of the start line (the empty lines before it are skipped,
/// and end nothing: a parse apiece would be quadratic again), and lets a
/// parse through when one may have arrived, when the bytes doubled since
/// the last parse (a malformed start is still refused, late by at most as
/// many bytes again), or at the limit. An empty line after the start line
/// ends the head (or shows it malformed), so a head trickled a byte at a
/// time is parsed about log2 of its size times, plus once.
///
/// The caller keeps one gate per head and calls [`HeadGate::restart`] when
/// the buffer no longer starts with the head it watched (a head taken, the
/// buffer replaced); [`HeadGate::parsed`] does so after a whole head or an
/// error.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct HeadGate {
    /// Bytes already searched for an empty line.
    searched: u32,
    /// Bytes there were at the last parse let through.
    parsed: u32,
    /// A byte other than CR or LF was searched: the start line has begun
    /// (the empty lines before it end nothing).
    begun: bool,
}

#[cfg(test)]
thread_local! {
    /// Tests: every gate on this thread lets every parse through, as if
    /// there were none (the reference gated runs are compared with).
    pub(crate) static UNGATED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl HeadGate {
    /// Whether `buf` (a head's first bytes, `max` at most looked at) should
    /// be parsed now. `end`: no more bytes will come (the peer's EOF), so
    /// a parse is due whatever it would wait for: a malformed start not
    /// looked at yet is refused as it would have been on arrival, not
    /// taken for a head merely cut short.
    pub fn due(&mut self, buf: &[u8], max: usize, end: bool) -> bool {
        #[cfg(test)]
        if UNGATED.with(std::cell::Cell::get) {
            return true;
        }
        let len = buf.len().min(max);
        if len < self.searched as usize {
            // Not the bytes it watched: start over.
            self.restart();
        }
        // The last two bytes searched may begin an empty line (and they
        // are not before the start line if it had begun: an empty line
        // before it is followed by CR or LF, not by the start line's first
        // byte).
        let from = (self.searched as usize).saturating_sub(2);
        let ended = (from..len).any(|i| {
            if !self.begun {
                self.begun = !matches!(buf[i], b'\r' | b'\n');
                return false;
            }
            buf[i] == b'\n'
                && (buf.get(i + 1) == Some(&b'\n')
                    || (buf.get(i + 1) == Some(&b'\r') && buf.get(i + 2) == Some(&b'\n')))
        });
        // `len` fits: heads are limited far below 4 GiB.
        self.searched = u32::try_from(len).unwrap_or(u32::MAX);
        let due = end || ended || len >= max || len >= 2 * self.parsed as usize;
        if due {
            self.parsed = self.searched;
        }
        due
    }

    /// What a parse let through found: a whole head or an error ends the
    /// head this gate watched.
    pub fn parsed<T, E>(&mut self, result: &Result<Option<T>, E>) {
        if !matches!(result, Ok(None)) {
            self.restart();
        }
    }

    /// The next bytes are a new head's.
    pub fn restart(&mut self) {
        *self = HeadGate::default();
    }
}

/// The most header lines [`parse_request_head`] accepts.
pub const MAX_HEADERS: usize = 100;

impl RequestHead {
    /// Owns what `httparse` found in a complete head.
    fn from_httparse(req: &httparse::Request<'_, '_>) -> Self {
        RequestHead {
            method: req.method.unwrap_or_default().to_owned(),
            target: req.path.unwrap_or_default().to_owned(),
            version: req.version.unwrap_or_default(),
            headers: req
                .headers
                .iter()
                .map(|h| (h.name.to_owned(), h.value.to_vec()))
                .collect(),
        }
    }
}

/// A short human cause for an `httparse` error, for `X-Proxy-Error`.
fn malformed_cause(e: httparse::Error) -> &'static str {
    match e {
        httparse::Error::HeaderName => "invalid header name",
        httparse::Error::HeaderValue => "invalid header value",
        httparse::Error::NewLine => "invalid line ending",
        httparse::Error::Token => "invalid request line",
        httparse::Error::Version => "invalid or unsupported HTTP version",
        // Responses only; listed so a new variant is a compile error.
        httparse::Error::Status | httparse::Error::TooManyHeaders => "invalid request",
    }
}

pub use crate::auth::basic::{basic_auth_credentials, basic_auth_matches};

/// The answer to a successful CONNECT.
pub const CONNECT_ESTABLISHED: &[u8] = b"HTTP/1.1 200 Connection established\r\n\r\n";

/// A complete error answer from the proxy itself: status line, `X-Proxy-Error: <cause>`,
/// `Content-Type: text/plain`, `Content-Length`, `Connection: close`, any `extra`
/// header lines (e.g. `Proxy-Authenticate`), and `reason` plus a newline as the body.
///
/// `cause`, `reason` and the extra values lose any control characters (CR, LF,
/// NUL, ...), and extra names anything that is not a token character, so text
/// that came from a client (a target name, say) cannot add header lines.
pub fn error_response(status: u16, cause: &str, reason: &str, extra: &[(&str, &str)]) -> Vec<u8> {
    answer(status, cause, reason, extra, true)
}

/// Like [`error_response`], but says `Connection: close` only when `close`:
/// an answer on a connection that stays open must not announce a close.
pub fn answer(
    status: u16,
    cause: &str,
    reason: &str,
    extra: &[(&str, &str)],
    close: bool,
) -> Vec<u8> {
    let mut body = sanitize(reason);
    body.push('\n');
    let mut head = format!(
        "HTTP/1.1 {status} {}\r\n\
         X-Proxy-Error: {}\r\n\
         Content-Type: text/plain; charset=utf-8\r\n\
         Content-Length: {}\r\n",
        reason_phrase(status),
        sanitize(cause),
        body.len(),
    );
    if close {
        head.push_str("Connection: close\r\n");
    }
    for (name, value) in extra {
        let name: String = name.chars().filter(|&c| is_token_char(c)).collect();
        head.push_str(&format!("{name}: {}\r\n", sanitize(value)));
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

/// The canonical reason phrase of `status` (RFC 9110), or `"Error"`.
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        407 => "Proxy Authentication Required",
        408 => "Request Timeout",
        413 => "Content Too Large",
        421 => "Misdirected Request",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Error",
    }
}

/// `text` without control characters (C0, DEL, C1), trimmed.
fn sanitize(text: &str) -> String {
    text.chars()
        .filter(|c| !c.is_control())
        .collect::<String>()
        .trim()
        .to_owned()
}

/// An RFC 9110 `tchar`.
fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)
}

#[cfg(test)]
#[path = "http_tests.rs"]
mod tests;
