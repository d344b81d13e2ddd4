//! HTTP/1.1 message inspection, sans-IO: what the proxy needs to follow an
//! HTTP/1.1 conversation it relays (an `inspect = "http"` tunnel, or the
//! forward proxy) without buffering or re-encoding bodies.
//!
//! - [`parse_response_head`]: response heads (request heads are
//!   [`crate::protocol::http::parse_request_head`]).
//! - [`request_body_kind`], [`response_body_kind`]: where a body ends, per
//!   RFC 9112 section 6, refusing ambiguous request framing (smuggling).
//! - [`Body`]: follows one body as its bytes stream past, chunked included,
//!   in O(1) state, so the caller forwards exactly the body's bytes
//!   verbatim and knows where the next message starts.
//! - [`connection_tokens`], [`is_upgrade_request`], [`wants_close`]:
//!   connection semantics.
//! - [`write_request_head`], [`write_response_head`] with [`HeadEdit`]:
//!   heads written back out, hop-by-hop fields handled, `Via` added.
//! - [`parse_absolute_target`]: `http://host[:port]/path` request targets.
//! - [`Exchange`]: the whole HTTP/1.1 exchange of one connection as a
//!   sans-IO machine (bytes in, actions out), which the session pumps.

mod chunked;
pub mod exchange;
mod framing;
mod headers;
mod response;
mod target;

pub use chunked::{MAX_CHUNK_LINE, MAX_TRAILER_SECTION};
pub use exchange::{
    ClientAction, Decision, End, Exchange, ExchangeConfig, Mode, Record, SameLogin, Status,
    UpstreamAction,
};
pub use framing::{request_body_kind, response_body_kind, Body, BodyKind, FramingError};
pub use headers::{
    connection_tokens, is_upgrade_request, wants_close, write_request_head, write_response_head,
    HeadEdit,
};
pub use response::{parse_response_head, ResponseHead};
pub use target::{parse_absolute_target, AbsoluteTarget};

pub use crate::protocol::http::{HeadError, RequestHead};

#[cfg(test)]
mod tests;
