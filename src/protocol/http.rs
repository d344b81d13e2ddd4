//! HTTP/1.x request heads for the proxy handshake (CONNECT), and the proxy's
//! own answers. Sans-IO.
//!
//! STUB: the protocol helper replaces the bodies; the signatures are the contract.

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
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
    }
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
pub fn parse_request_head(
    buf: &[u8],
    max: usize,
) -> Result<Option<(RequestHead, usize)>, HeadError> {
    let _ = (buf, max);
    todo!()
}

/// Checks a `Proxy-Authorization` value (`Basic base64(user:pass)`).
pub fn basic_auth_matches(value: &[u8], username: &str, password: &str) -> bool {
    let _ = (value, username, password);
    todo!()
}

/// The answer to a successful CONNECT.
pub const CONNECT_ESTABLISHED: &[u8] = b"HTTP/1.1 200 Connection established\r\n\r\n";

/// A complete error answer from the proxy itself: status line, `X-Proxy-Error: <cause>`,
/// `Content-Type: text/plain`, `Content-Length`, `Connection: close`, any `extra`
/// header lines (e.g. `Proxy-Authenticate`), and `reason` plus a newline as the body.
pub fn error_response(status: u16, cause: &str, reason: &str, extra: &[(&str, &str)]) -> Vec<u8> {
    let _ = (status, cause, reason, extra);
    todo!()
}
