//! HTTP/1.x response heads, parsed by `httparse` like request heads in
//! [`crate::protocol::http`], with the same size limit and error mapping.

use crate::protocol::http::{HeadError, MAX_HEADERS};

/// What [`parse_response_head`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    /// Minor version: 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub version: u8,
    /// The three-digit status code.
    pub status: u16,
    /// The reason phrase as sent (empty if absent, or if it held obs-text).
    pub reason: String,
    /// Headers in order, names as sent.
    pub headers: Vec<(String, Vec<u8>)>,
}

impl ResponseHead {
    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        crate::protocol::http::find_header(&self.headers, name)
    }
}

/// Same contract as http::parse_request_head (Ok(None) = incomplete and under max; TooLarge at max; Malformed otherwise). httparse::Response, 100 headers.
///
/// `Ok(Some((head, n)))`: a whole head of `n` bytes; whatever follows (a
/// body, or after `101 Switching Protocols` the new protocol) is not looked
/// at. Only the first `max` bytes of `buf` are examined; more than
/// [`MAX_HEADERS`] header lines is [`HeadError::TooLarge`].
pub fn parse_response_head(
    buf: &[u8],
    max: usize,
) -> Result<Option<(ResponseHead, usize)>, HeadError> {
    let window = &buf[..buf.len().min(max)];
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut res = httparse::Response::new(&mut headers);
    match res.parse(window) {
        Ok(httparse::Status::Complete(n)) => {
            let head = ResponseHead {
                version: res.version.unwrap_or_default(),
                status: res.code.unwrap_or_default(),
                reason: res.reason.unwrap_or_default().to_owned(),
                headers: res
                    .headers
                    .iter()
                    .map(|h| (h.name.to_owned(), h.value.to_vec()))
                    .collect(),
            };
            Ok(Some((head, n)))
        }
        Ok(httparse::Status::Partial) if window.len() >= max => Err(HeadError::TooLarge),
        Ok(httparse::Status::Partial) => Ok(None),
        Err(httparse::Error::TooManyHeaders) => Err(HeadError::TooLarge),
        Err(e) => Err(HeadError::Malformed(malformed_cause(e).to_owned())),
    }
}

/// A short human cause for an `httparse` error.
fn malformed_cause(e: httparse::Error) -> &'static str {
    match e {
        httparse::Error::HeaderName => "invalid header name in response",
        httparse::Error::HeaderValue => "invalid header value in response",
        httparse::Error::NewLine => "invalid line ending in response",
        httparse::Error::Status => "invalid status line",
        httparse::Error::Version => "invalid or unsupported HTTP version in response",
        // Requests only; listed so a new variant is a compile error.
        httparse::Error::Token | httparse::Error::TooManyHeaders => "invalid response",
    }
}
