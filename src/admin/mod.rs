//! The admin endpoint, sans IO: what an admin connection says and what it
//! is answered. The reactor owns the sockets (`reactor/admin.rs`); this
//! module only turns bytes into [`proto::Input`]s and counters into
//! answers.
//!
//! One admin socket serves two protocols, told apart by the first byte:
//!
//! - **HTTP/1.1**: `GET /metrics` (Prometheus text exposition format,
//!   [`metrics`]) and `GET /stats` (JSON, [`crate::stats::json`]); other paths get
//!   `404`, other methods `405`. One request per connection, answered with
//!   `Connection: close`.
//! - **Control**: a connection whose first byte is `{` sends JSON command
//!   lines ([`crate::control::wire`]), when `[admin] control = true`; else
//!   it gets one error line and is closed.

pub(crate) mod http;
pub(crate) mod metrics;
pub(crate) mod proto;
pub(crate) mod report;
