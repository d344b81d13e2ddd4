//! portcullis: a sandbox egress proxy.
//!
//! Sandboxed programs (coding agents, CI jobs, containers) send every
//! outbound connection through portcullis, as an HTTP proxy (`CONNECT`, or
//! `GET http://...` forward proxying) or a SOCKS5 proxy. Each connection is
//! allowed or refused by a deny-by-default [`Policy`], then relayed.
//!
//! One thread runs a readiness-driven reactor (mio); every connection is a
//! session with an explicit state machine:
//!
//! ```text
//! accept ─> Handshake ─(policy allows)─> Resolving ─> Connecting ─┬─> Passthrough (raw; splice on Linux)
//!              │  SOCKS5 or HTTP, by the first byte                ├─> Inspect (HTTP/1.1) ─101─> Passthrough
//!              │                                                   └─(tls = terminate)─> Securing ─> Inspect
//!              └─(deny, bad input, limit, timeout)─> Closing: flush the answer, FIN, linger ─> closed
//! ```
//!
//! # Guarantees
//! - **No cap**: any amount of data, over any lifetime, byte-exact. Bounded
//!   buffers per direction give backpressure, never a limit.
//! - **No spin**: sockets are registered once, edge-triggered; a peer that
//!   is gone (EPIPE, ECONNRESET, an error event) is deregistered and closed
//!   at once, and every closing session is bounded by a timer. An idle proxy
//!   makes no syscalls: the poll timeout is the next timer deadline, or none.
//! - **No parsing after an upgrade**: an inspected session that sees
//!   `101 Switching Protocols` relays raw bytes both ways from then on.
//! - **Deny by default**: private, loopback, link-local, CGNAT, multicast and
//!   unspecified addresses are refused unless a rule names them, checked on
//!   the resolved addresses; the proxy dials exactly the addresses it vetted.
//!
//! # Embedding
//! ```
//! use portcullis::policy::{parse_cli_rule, Action};
//! use portcullis::{ListenAddr, ListenerProtocol, Policy, Proxy};
//! use std::io::{Read, Write};
//!
//! // An upstream to reach: a loopback echo server.
//! let upstream = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
//! let port = upstream.local_addr().unwrap().port();
//! std::thread::spawn(move || {
//!     let (mut s, _) = upstream.accept().unwrap();
//!     let mut buf = [0u8; 5];
//!     s.read_exact(&mut buf).unwrap();
//!     s.write_all(&buf).unwrap();
//! });
//!
//! // Loopback is refused unless a rule names the address.
//! let rule = parse_cli_rule(Action::Allow, &format!("127.0.0.1:{port}")).unwrap();
//! let proxy = Proxy::builder()
//!     .listen(ListenAddr::Tcp("127.0.0.1:0".parse().unwrap()), ListenerProtocol::Auto)
//!     .policy(Policy::from_rules(&[rule]).unwrap())
//!     .build()
//!     .unwrap()
//!     .spawn()
//!     .unwrap();
//!
//! let mut c = std::net::TcpStream::connect(proxy.tcp_addr().unwrap()).unwrap();
//! write!(c, "CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").unwrap();
//! let mut head = [0u8; 39]; // "HTTP/1.1 200 Connection established\r\n\r\n"
//! c.read_exact(&mut head).unwrap();
//! assert!(head.starts_with(b"HTTP/1.1 200"));
//! c.write_all(b"hello").unwrap();
//! let mut echo = [0u8; 5];
//! c.read_exact(&mut echo).unwrap();
//! assert_eq!(&echo, b"hello");
//! assert_eq!(proxy.stats().allowed, 1);
//! proxy.shutdown_now();
//! ```
#![warn(missing_docs)]

pub(crate) mod admin;
pub mod api;
pub mod auth;
pub(crate) mod buffer;
pub mod capi;
pub(crate) mod client;
pub mod config;
pub mod control;
pub(crate) mod core;
pub mod duration;
pub mod events;
pub(crate) mod fd_budget;
#[doc(hidden)]
pub mod fuzzing;
pub(crate) mod io;
pub mod lifecycle;
pub mod logging;
pub mod policy;
pub mod protocol;
pub(crate) mod reactor;
pub(crate) mod rule_stats;
pub(crate) mod session;
pub mod stats;
pub mod target;
pub mod tls;

pub use api::{Proxy, ProxyBuilder, ProxyHandle, SpawnedProxy, StdListener};
pub use config::{
    AdminConfig, Config, Credentials, Limits, ListenAddr, ListenerConfig, ListenerProtocol,
    LogFormat, Timeouts, UnixAccess, UnixGroup,
};
pub use control::{ControlError, SessionInfo};
pub use events::Event;
pub use policy::Policy;
pub use stats::{CloseReason, StatsSnapshot, UdpDrop, UdpStats, WorkerStats};

#[cfg(test)]
mod layers_tests;
