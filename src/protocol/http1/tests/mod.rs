//! Unit tests for [`crate::protocol::http1`].

mod body;
mod framing;
mod headers;
mod response;
mod split;
mod target;

use crate::protocol::http::{parse_request_head, RequestHead};

/// Parses a complete request head (test input is always valid).
fn request(text: &str) -> RequestHead {
    let (head, n) = parse_request_head(text.as_bytes(), 64 * 1024)
        .expect("parses")
        .expect("complete");
    assert_eq!(n, text.len(), "the whole text is the head");
    head
}
