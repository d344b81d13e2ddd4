//! What a session is doing and how it ended: the vocabulary the reactor,
//! the sessions and the stats share, so none of them imports another for it.

use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

/// Which side of a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// The sandboxed program that connected to us.
    Client = 0,
    /// The destination we connected to.
    Upstream = 1,
}

impl Side {
    /// The other side.
    pub fn other(self) -> Side {
        match self {
            Side::Client => Side::Upstream,
            Side::Upstream => Side::Client,
        }
    }

    /// The close reason when this side goes away.
    pub fn gone_reason(self) -> CloseReason {
        match self {
            Side::Client => CloseReason::ClientGone,
            Side::Upstream => CloseReason::UpstreamGone,
        }
    }
}

/// Why a session ended. Every closed session is counted under exactly one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CloseReason {
    /// Both directions finished cleanly (EOF each way, everything flushed).
    Done,
    /// The client went away (reset, broken pipe, read error, hang-up).
    ClientGone,
    /// The upstream went away (reset, broken pipe, read error, hang-up).
    UpstreamGone,
    /// Policy refused the target.
    Denied,
    /// The client sent something we could not parse or do not support.
    BadRequest,
    /// Proxy credentials were missing or wrong.
    AuthFailed,
    /// The handshake did not complete within the handshake timeout.
    HandshakeTimeout,
    /// Name resolution failed.
    ResolveFailed,
    /// Every resolved address refused or was unreachable.
    ConnectFailed,
    /// Resolve-and-connect did not finish within the connect timeout.
    ConnectTimeout,
    /// An established tunnel saw no traffic for its idle timeout.
    IdleTimeout,
    /// A half-closed tunnel (one side finished) saw no traffic for the
    /// half-close timeout.
    HalfCloseTimeout,
    /// A closing session could not flush within the close timeout.
    CloseTimeout,
    /// A policy reload no longer allows this tunnel.
    PolicyReload,
    /// The proxy was shut down.
    Shutdown,
    /// A limit was hit (sessions, pending handshakes).
    Limit,
    /// An inspected request got no response head within the response timeout.
    ResponseTimeout,
    /// TLS with the client failed: not a ClientHello, a handshake error, or
    /// the client refused our certificate.
    TlsFailed,
    /// Closed by a control command (`close-session`, `ProxyHandle::close_session`).
    ClosedByControl,
    /// Closed in its handshake to make room when the proxy ran out of file
    /// descriptors (the heaviest client's oldest handshakes go first).
    Shed,
}

impl CloseReason {
    /// Every reason, in a fixed order (the order of the tallies).
    pub const ALL: [CloseReason; 20] = [
        CloseReason::Done,
        CloseReason::ClientGone,
        CloseReason::UpstreamGone,
        CloseReason::Denied,
        CloseReason::BadRequest,
        CloseReason::AuthFailed,
        CloseReason::HandshakeTimeout,
        CloseReason::ResolveFailed,
        CloseReason::ConnectFailed,
        CloseReason::ConnectTimeout,
        CloseReason::IdleTimeout,
        CloseReason::HalfCloseTimeout,
        CloseReason::CloseTimeout,
        CloseReason::PolicyReload,
        CloseReason::Shutdown,
        CloseReason::Limit,
        CloseReason::ResponseTimeout,
        CloseReason::TlsFailed,
        CloseReason::ClosedByControl,
        CloseReason::Shed,
    ];

    /// The short name used in logs and stats, e.g. `client-gone`.
    pub fn as_str(self) -> &'static str {
        match self {
            CloseReason::Done => "done",
            CloseReason::ClientGone => "client-gone",
            CloseReason::UpstreamGone => "upstream-gone",
            CloseReason::Denied => "denied",
            CloseReason::BadRequest => "bad-request",
            CloseReason::AuthFailed => "auth-failed",
            CloseReason::HandshakeTimeout => "handshake-timeout",
            CloseReason::ResolveFailed => "resolve-failed",
            CloseReason::ConnectFailed => "connect-failed",
            CloseReason::ConnectTimeout => "connect-timeout",
            CloseReason::IdleTimeout => "idle-timeout",
            CloseReason::HalfCloseTimeout => "half-close-timeout",
            CloseReason::CloseTimeout => "close-timeout",
            CloseReason::PolicyReload => "policy-reload",
            CloseReason::Shutdown => "shutdown",
            CloseReason::Limit => "limit",
            CloseReason::ResponseTimeout => "response-timeout",
            CloseReason::TlsFailed => "tls-failed",
            CloseReason::ClosedByControl => "closed-by-control",
            CloseReason::Shed => "shed",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for CloseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The phase a session is in, for the open-sessions gauges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Reading the client's CONNECT or SOCKS5 request.
    Handshake,
    /// Waiting for the resolver pool.
    Resolving,
    /// A non-blocking connect to the upstream is in flight.
    Connecting,
    /// Relaying bytes both ways.
    Established,
    /// Flushing what is owed, then closing.
    Closing,
}

impl Phase {
    pub(crate) const COUNT: usize = 5;
    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// How the client spoke to the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Protocol {
    /// HTTP `CONNECT` (and any other HTTP request the proxy refused).
    Connect,
    /// SOCKS5.
    Socks5,
    /// The plain-HTTP forward proxy (`GET http://host/path`).
    Forward,
    /// A SOCKS5 UDP association (`UDP ASSOCIATE`): the session is its
    /// TCP control connection, its bytes are the datagrams' payloads.
    Socks5Udp,
}

impl Protocol {
    /// `connect`, `socks5`, `forward` or `socks5-udp`.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Connect => "connect",
            Protocol::Socks5 => "socks5",
            Protocol::Forward => "forward",
            Protocol::Socks5Udp => "socks5-udp",
        }
    }
}

/// One open session, as `list-sessions` and [`crate::ProxyHandle::sessions`] show it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionInfo {
    /// Its id (`conn=` in the logs), for `close-session`.
    pub id: u64,
    /// The client's address (`unix` for a Unix-socket peer).
    pub client: String,
    /// How the client spoke, once known.
    pub protocol: Option<Protocol>,
    /// The proxy user, when the client authenticated.
    pub user: Option<String>,
    /// Where it asked to go, once known.
    pub target: Option<String>,
    /// The upstream address dialled, once dialled.
    pub dialled: Option<IpAddr>,
    /// Its state, e.g. `Passthrough(relay)` or `Handshake(http)`.
    pub state: String,
    /// The rule that allowed it, once decided.
    pub rule: Option<String>,
    /// Payload bytes relayed client to upstream so far.
    pub bytes_up: u64,
    /// Payload bytes relayed upstream to client so far.
    pub bytes_down: u64,
    /// Time since it was accepted.
    pub age: Duration,
}
