//! Every way a session can be refused before its tunnel opens, and the answer
//! each one gets in the client's own protocol.

use std::io;
use std::net::SocketAddr;

use crate::lifecycle::CloseReason;
use crate::policy::Denial;
use crate::protocol::{http, socks5};

/// Which protocol the client spoke, so a refusal is answered in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    /// HTTP CONNECT.
    Http,
    /// SOCKS5 CONNECT.
    Socks5,
    /// A forward-proxied request (`GET http://host/...`): answered like HTTP,
    /// and the upstream, not the proxy, answers once connected.
    Forward,
    /// A forward-proxied `GET https://host/...`: like `Forward`, and the
    /// proxy speaks TLS to the upstream itself.
    ForwardTls,
}

/// Why a session is refused.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// Unparseable or unsupported request (the string says what).
    Malformed(String),
    /// Request head over the limit.
    HeadTooLarge,
    /// An HTTP method other than CONNECT.
    Method(String),
    /// Missing or wrong HTTP proxy credentials.
    AuthRequired,
    /// A SOCKS5 request the protocol module rejected.
    Socks(socks5::RequestError),
    /// A SOCKS5 command we do not serve (BIND).
    SocksCommand,
    /// A target host that is not a valid name or address.
    BadHost(String),
    /// Policy said no.
    Denied(Denial),
    /// The destination is the proxy's own (a listener, the admin endpoint).
    OwnAddress(SocketAddr),
    /// DNS failed.
    Resolve(io::Error),
    /// Every address failed; the last error.
    Connect(io::Error),
    /// Resolve + connect took too long.
    Timeout,
    /// The parent proxy refused or failed (why).
    Parent(String),
    /// The proxy is at a limit (named) and takes no new sessions.
    Limit(&'static str),
    /// The client's terminated-handshake budget is spent (its key, as
    /// admission names clients).
    HandshakeRate(String),
}

impl Refusal {
    pub(crate) fn close_reason(&self) -> CloseReason {
        match self {
            Refusal::Malformed(_)
            | Refusal::HeadTooLarge
            | Refusal::Method(_)
            | Refusal::Socks(_)
            | Refusal::SocksCommand
            | Refusal::BadHost(_) => CloseReason::BadRequest,
            Refusal::AuthRequired => CloseReason::AuthFailed,
            Refusal::Denied(_) | Refusal::OwnAddress(_) => CloseReason::Denied,
            Refusal::Resolve(_) => CloseReason::ResolveFailed,
            Refusal::Connect(_) | Refusal::Parent(_) => CloseReason::ConnectFailed,
            Refusal::Timeout => CloseReason::ConnectTimeout,
            Refusal::Limit(_) | Refusal::HandshakeRate(_) => CloseReason::Limit,
        }
    }

    /// A one-line reason for logs and response bodies.
    pub(crate) fn describe(&self) -> String {
        match self {
            Refusal::Malformed(why) => format!("malformed request: {why}"),
            Refusal::HeadTooLarge => "request head too large".into(),
            Refusal::Method(m) => {
                format!("method {m} not allowed: use CONNECT, or an absolute URI (http://host/path) for the forward proxy")
            }
            Refusal::AuthRequired => "proxy authentication required".into(),
            Refusal::Socks(e) => format!("bad SOCKS5 request: {e:?}"),
            Refusal::SocksCommand => "SOCKS5 BIND is not supported (CONNECT and UDP ASSOCIATE are)".into(),
            Refusal::BadHost(why) => format!("invalid target host: {why}"),
            Refusal::Denied(d) => format!("{d}"),
            Refusal::OwnAddress(a) => format!("{a} is the proxy's own address"),
            Refusal::Resolve(e) => format!("could not resolve the target: {e}"),
            Refusal::Connect(e) => format!("could not connect to the target: {e}"),
            Refusal::Timeout => "timed out connecting to the target".into(),
            Refusal::Parent(why) => format!("through the parent proxy: {why}"),
            Refusal::Limit(which) => format!("the proxy is at its {which} limit; try again later"),
            Refusal::HandshakeRate(client) => format!(
                "client {client} is starting TLS handshakes faster than limits.handshakes_per_client_per_sec allows \
                 (burst limits.handshake_burst_per_client); slow down, or raise those keys"
            ),
        }
    }

    /// The `X-Proxy-Error` value: the cause, and for a deny the rule.
    fn cause(&self) -> String {
        match self {
            Refusal::Malformed(_) | Refusal::Socks(_) | Refusal::BadHost(_) => "bad-request".into(),
            Refusal::SocksCommand => "unsupported-command".into(),
            Refusal::HeadTooLarge => "head-too-large".into(),
            Refusal::Method(_) => "method-not-allowed".into(),
            Refusal::AuthRequired => "auth-required".into(),
            Refusal::Denied(Denial::Rule(rule)) => match &rule.reason {
                Some(why) => format!("denied; rule={}; reason={why}", rule.name),
                None => format!("denied; rule={}", rule.name),
            },
            Refusal::Denied(Denial::NoRule(fix)) => {
                format!("denied; no-matching-rule; fix={}", fix.flag)
            }
            Refusal::Denied(Denial::SpecialAddress(addr, range, None)) => {
                format!("denied; {range}-address={addr}")
            }
            Refusal::Denied(Denial::SpecialAddress(addr, range, Some(fix))) => {
                format!(
                    "denied; {range}-address={addr}; rule={}; fix={}",
                    fix.rule, fix.flag
                )
            }
            Refusal::Denied(Denial::Port(m)) => format!(
                "denied; port-not-in-rule={}; ports={}; fix={}",
                m.rule, m.ports, m.flag
            ),
            Refusal::Denied(Denial::User { rule, .. }) => {
                format!("denied; user-not-in-rule={rule}")
            }
            Refusal::OwnAddress(a) => format!("denied; own-address={a}"),
            Refusal::Resolve(_) => "resolve-failed".into(),
            Refusal::Connect(_) => "connect-failed".into(),
            Refusal::Timeout => "connect-timeout".into(),
            Refusal::Parent(_) => "parent-proxy".into(),
            Refusal::Limit(which) => format!("limit; {which}"),
            Refusal::HandshakeRate(_) => {
                "limit; handshake-rate; fix=limits.handshakes_per_client_per_sec".into()
            }
        }
    }

    /// The bytes that tell the client, in its protocol. Empty: just close.
    pub(crate) fn answer(&self, dialect: Dialect) -> Vec<u8> {
        match dialect {
            Dialect::Http | Dialect::Forward | Dialect::ForwardTls => self.http_answer(),
            Dialect::Socks5 => self.socks_answer(),
        }
    }

    /// The HTTP status it is answered with.
    pub(crate) fn status(&self) -> u16 {
        match self {
            Refusal::Malformed(_)
            | Refusal::BadHost(_)
            | Refusal::Socks(_)
            | Refusal::SocksCommand => 400,
            Refusal::HeadTooLarge => 431,
            Refusal::Method(_) => 405,
            Refusal::AuthRequired => 407,
            Refusal::Denied(_) | Refusal::OwnAddress(_) => 403,
            Refusal::Resolve(_) | Refusal::Connect(_) | Refusal::Parent(_) => 502,
            Refusal::Timeout => 504,
            Refusal::Limit(_) => 503,
            Refusal::HandshakeRate(_) => 429,
        }
    }

    fn http_answer(&self) -> Vec<u8> {
        let extra: &[(&str, &str)] = match self {
            Refusal::Method(_) => &[("Allow", "CONNECT")],
            Refusal::AuthRequired => &[("Proxy-Authenticate", "Basic realm=\"portcullis\"")],
            Refusal::Limit(_) | Refusal::HandshakeRate(_) => &[("Retry-After", "1")],
            _ => &[],
        };
        http::error_response(self.status(), &self.cause(), &self.describe(), extra)
    }

    fn socks_answer(&self) -> Vec<u8> {
        use socks5::Reply;
        let reply = match self {
            // Nothing sensible to say to a peer that does not speak SOCKS5.
            Refusal::Malformed(_)
            | Refusal::HeadTooLarge
            | Refusal::Method(_)
            | Refusal::AuthRequired => return Vec::new(),
            Refusal::Socks(e) => e.reply(),
            Refusal::SocksCommand => Reply::CommandNotSupported,
            Refusal::BadHost(_) | Refusal::Denied(_) | Refusal::OwnAddress(_) => Reply::NotAllowed,
            Refusal::Resolve(_) => Reply::HostUnreachable,
            Refusal::Connect(e) => match e.kind() {
                io::ErrorKind::ConnectionRefused => Reply::ConnectionRefused,
                io::ErrorKind::NetworkUnreachable => Reply::NetworkUnreachable,
                io::ErrorKind::TimedOut => Reply::TtlExpired,
                _ => Reply::HostUnreachable,
            },
            Refusal::Timeout => Reply::TtlExpired,
            Refusal::Parent(_) | Refusal::HandshakeRate(_) => Reply::GeneralFailure,
            // After the greeting's method selection: the request is answered
            // before it is read, so the client is told at its first read.
            Refusal::Limit(_) => {
                let mut out = socks5::method_selection(socks5::METHOD_NO_AUTH).to_vec();
                socks5::encode_reply(Reply::GeneralFailure, None, &mut out);
                return out;
            }
        };
        let mut out = Vec::with_capacity(10);
        socks5::encode_reply(reply, None, &mut out);
        out
    }
}
