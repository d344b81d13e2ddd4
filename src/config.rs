//! Configuration: listeners, policy, timeouts, limits, credentials.
//!
//! `Config::default()` is the built-in default the binary runs with when given
//! no arguments. The TOML file format is documented in README.md.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::policy::Policy;

/// Where a listener listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenAddr {
    /// A TCP address; port 0 picks an ephemeral port.
    Tcp(SocketAddr),
    /// A Unix-domain stream socket path (an existing socket file is replaced).
    Unix(PathBuf),
}

impl fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListenAddr::Tcp(a) => write!(f, "{a}"),
            ListenAddr::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// What a listener speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ListenerProtocol {
    /// HTTP or SOCKS5, told apart by the first byte (0x05 is SOCKS5).
    #[default]
    Auto,
    /// HTTP only.
    Http,
    /// SOCKS5 only.
    Socks5,
}

/// One listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerConfig {
    /// Where.
    pub addr: ListenAddr,
    /// What it speaks.
    pub protocol: ListenerProtocol,
}

/// Timeouts. Every session has a deadline in every phase, except an
/// established tunnel when `idle` is `None` and its rule sets none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// From accept until the request is read and answered by policy.
    pub handshake: Duration,
    /// Resolve plus connect, over all addresses.
    pub connect: Duration,
    /// Established tunnels with no traffic either way; `None` means never.
    pub idle: Option<Duration>,
    /// Flushing what is owed before closing.
    pub close: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            handshake: Duration::from_secs(10),
            connect: Duration::from_secs(10),
            idle: None,
            close: Duration::from_secs(5),
        }
    }
}

/// Sizes and limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest request head (HTTP) accepted; larger gets 431.
    pub max_head_bytes: usize,
    /// Relay buffer per direction, in bytes.
    pub buffer_size: usize,
    /// Resolver threads.
    pub resolver_threads: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_head_bytes: 32 * 1024,
            buffer_size: 64 * 1024,
            resolver_threads: 2,
        }
    }
}

/// Proxy credentials: HTTP `Proxy-Authorization: Basic` and SOCKS5 user/pass.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// User name.
    pub username: String,
    /// Password.
    pub password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// Everything a proxy needs to run.
#[derive(Debug, Clone)]
pub struct Config {
    /// Listeners; at least one.
    pub listeners: Vec<ListenerConfig>,
    /// Who may connect where.
    pub policy: Policy,
    /// Timeouts.
    pub timeouts: Timeouts,
    /// Limits.
    pub limits: Limits,
    /// Required credentials, if any.
    pub auth: Option<Credentials>,
}

/// The built-in default listener address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:3128";

impl Default for Config {
    fn default() -> Self {
        Config {
            listeners: vec![ListenerConfig {
                addr: ListenAddr::Tcp(DEFAULT_LISTEN.parse().expect("valid default")),
                protocol: ListenerProtocol::Auto,
            }],
            policy: Policy::builtin_default(),
            timeouts: Timeouts::default(),
            limits: Limits::default(),
            auth: None,
        }
    }
}
