//! Shared helpers for the integration tests: proxies, upstreams, clients,
//! a deterministic data generator and polling helpers, one module per job.
//!
//! Everything runs over real loopback sockets. The test binary (main.rs) declares
//! it once; each scenario module says `use support::*;` and uses a subset: hence the
//! `dead_code` allowance (inherited by every module below) and the
//! `unused_imports` allowance on each re-export.
//!
//! Modules with logic in them (generator, parsers, encoders) carry their own
//! `#[cfg(test)] mod tests`. Integration tests build with `cfg(test)`, so
//! those unit tests run in every test binary that includes `support`; they
//! are few and take microseconds.
#![allow(dead_code)]

// Sorted, one `pub mod` and one `pub use` per module, so that parallel
// additions merge cleanly.
pub mod child;
pub mod http_client;
pub mod netns;
pub mod origin;
pub mod payload;
pub mod proxy;
pub mod reactor;
#[cfg(test)]
mod scripted;
pub mod socks;
pub mod stream;
pub mod tcp_table;
pub mod temp_dir;
pub mod tls;
pub mod upstream;
pub mod wait;
pub mod ws;

#[allow(unused_imports)]
pub use child::*;
#[allow(unused_imports)]
pub use http_client::*;
#[allow(unused_imports)]
pub use netns::*;
#[allow(unused_imports)]
pub use origin::*;
#[allow(unused_imports)]
pub use payload::*;
#[allow(unused_imports)]
pub use proxy::*;
#[allow(unused_imports)]
pub use reactor::*;
#[allow(unused_imports)]
pub use socks::*;
#[allow(unused_imports)]
pub use stream::*;
#[allow(unused_imports)]
pub use tcp_table::*;
#[allow(unused_imports)]
pub use temp_dir::*;
#[allow(unused_imports)]
pub use tls::*;
#[allow(unused_imports)]
pub use upstream::*;
#[allow(unused_imports)]
pub use wait::*;
#[allow(unused_imports)]
pub use ws::*;
