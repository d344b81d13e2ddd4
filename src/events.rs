//! Events: what the proxy reports about each session when it closes and
//! about each inspected HTTP request. One [`Event`] feeds both the log (one
//! line, text or JSON: see [`crate::logging`]) and the embedder's callback
//! ([`crate::ProxyBuilder::on_event`]), so the two always carry the same
//! fields.
//!
//! In the log an event is a `log` record at `info` under the target
//! [`LOG_TARGET`], its fields attached as key-values (`log::kv`), so
//! `RUST_LOG` filters events like any other line
//! (`RUST_LOG=info,portcullis::event=off` silences them).

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use log::kv::{self, Key, Source, Value, VisitSource};

use crate::lifecycle::CloseReason;

/// The `log` target events are logged under.
pub const LOG_TARGET: &str = "portcullis::event";

/// What an event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EventKind {
    /// A session closed (`event=session`): one per client connection.
    Session,
    /// An inspected HTTP request was judged (`event=request`): allowed,
    /// denied, or refused by the proxy before the rules.
    Request,
}

impl EventKind {
    /// `session` or `request`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Session => "session",
            EventKind::Request => "request",
        }
    }
}

pub use crate::lifecycle::Protocol;

/// What policy decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Decision {
    /// Allowed.
    Allow,
    /// Refused.
    Deny,
    /// Audit mode: it would have been refused, and was let through.
    WouldDeny,
    /// Allowed, but it failed upstream (an untrusted certificate, a TLS
    /// error): the client got a 502.
    Error,
}

impl Decision {
    /// `allow`, `deny`, `would-deny` or `error`.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Deny => "deny",
            Decision::WouldDeny => "would-deny",
            Decision::Error => "error",
        }
    }
}

/// One session or request event. Fields that do not apply are `None`
/// (and absent from the log line).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Event {
    /// Session or request.
    pub kind: EventKind,
    /// When it happened.
    pub time: SystemTime,
    /// The session's id (`conn=`), unique for the life of the proxy.
    pub conn: u64,
    /// How the client spoke, once known.
    pub protocol: Option<Protocol>,
    /// The client's address (`127.0.0.1:40312`), or `unix` for a Unix-socket peer.
    pub client: String,
    /// The uid owning the client's socket, when the kernel tells it.
    pub client_uid: Option<u32>,
    /// The client's pid, when the kernel tells it (Unix-socket peers).
    pub client_pid: Option<u32>,
    /// The proxy user the client authenticated as.
    pub user: Option<String>,
    /// Where the client asked to go (`host:port`); for a request, where the
    /// request went.
    pub target: Option<String>,
    /// The upstream address the proxy dialled.
    pub dialled: Option<IpAddr>,
    /// The rule behind the decision: the allowing rule, the denying rule, or
    /// for a request the request rule (`api requests[0]`).
    pub rule: Option<Arc<str>>,
    /// What policy decided, once it did.
    pub decision: Option<Decision>,
    /// Why it was refused or failed (the deny reason, the error), or for a
    /// would-deny why it would have been refused.
    pub reason: Option<String>,
    /// A request's method.
    pub method: Option<String>,
    /// A request's path, normalised (query dropped).
    pub path: Option<String>,
    /// A request's final status, when it got one.
    pub status: Option<u16>,
    /// A session's inspected HTTP requests.
    pub requests: Option<u32>,
    /// A session switched to raw bytes after `101 Switching Protocols`.
    pub upgraded: Option<bool>,
    /// A session's payload bytes, client to upstream.
    pub bytes_up: Option<u64>,
    /// A session's payload bytes, upstream to client.
    pub bytes_down: Option<u64>,
    /// A UDP association's datagrams relayed, client to destinations.
    pub datagrams_up: Option<u64>,
    /// A UDP association's datagrams relayed, destinations to client.
    pub datagrams_down: Option<u64>,
    /// A UDP association's datagrams dropped (refused by policy, malformed,
    /// from a source it may not hear from, ...); never relayed.
    pub datagrams_dropped: Option<u64>,
    /// A session's lifetime.
    pub duration: Option<Duration>,
    /// Why a session closed.
    pub close: Option<CloseReason>,
}

impl Event {
    /// An event of `kind` about session `conn` from `client`, now; every
    /// other field empty.
    pub fn new(kind: EventKind, conn: u64, client: impl Into<String>) -> Event {
        Event {
            kind,
            time: SystemTime::now(),
            conn,
            protocol: None,
            client: client.into(),
            client_uid: None,
            client_pid: None,
            user: None,
            target: None,
            dialled: None,
            rule: None,
            decision: None,
            reason: None,
            method: None,
            path: None,
            status: None,
            requests: None,
            upgraded: None,
            bytes_up: None,
            bytes_down: None,
            datagrams_up: None,
            datagrams_down: None,
            datagrams_dropped: None,
            duration: None,
            close: None,
        }
    }

    /// Calls `f` with each field that applies, in the order the log writes
    /// them (`event` first), named as in the log.
    pub fn for_each_field<'a, E>(
        &'a self,
        mut f: impl FnMut(&'static str, Field<'a>) -> Result<(), E>,
    ) -> Result<(), E> {
        use Field::{Bool, Ip, Num, Str};
        f("event", Str(self.kind.as_str()))?;
        f("conn", Num(self.conn))?;
        let opt_str = |v: &'a Option<String>| v.as_deref().map(Str);
        let fields: [(&'static str, Option<Field<'a>>); 22] = [
            ("protocol", self.protocol.map(|p| Str(p.as_str()))),
            ("client", Some(Str(&self.client))),
            ("client_uid", self.client_uid.map(|n| Num(n.into()))),
            ("client_pid", self.client_pid.map(|n| Num(n.into()))),
            ("user", opt_str(&self.user)),
            ("target", opt_str(&self.target)),
            ("dialled", self.dialled.as_ref().map(Ip)),
            ("rule", self.rule.as_deref().map(Str)),
            ("decision", self.decision.map(|d| Str(d.as_str()))),
            ("reason", opt_str(&self.reason)),
            ("method", opt_str(&self.method)),
            ("path", opt_str(&self.path)),
            ("status", self.status.map(|n| Num(n.into()))),
            ("requests", self.requests.map(|n| Num(n.into()))),
            ("upgraded", self.upgraded.map(Bool)),
            ("bytes_up", self.bytes_up.map(Num)),
            ("bytes_down", self.bytes_down.map(Num)),
            ("datagrams_up", self.datagrams_up.map(Num)),
            ("datagrams_down", self.datagrams_down.map(Num)),
            ("datagrams_dropped", self.datagrams_dropped.map(Num)),
            (
                "duration_ms",
                self.duration
                    .map(|d| Num(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))),
            ),
            ("close", self.close.map(|c| Str(c.as_str()))),
        ];
        for (key, value) in fields {
            if let Some(v) = value {
                f(key, v)?;
            }
        }
        Ok(())
    }
}

/// One field's value, typed as the JSON log writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Field<'a> {
    /// A string.
    Str(&'a str),
    /// A number.
    Num(u64),
    /// `true` or `false`.
    Bool(bool),
    /// An address, written as a string.
    Ip(&'a IpAddr),
}

impl fmt::Display for Field<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Field::Str(s) => f.write_str(s),
            Field::Num(n) => write!(f, "{n}"),
            Field::Bool(b) => write!(f, "{b}"),
            Field::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

impl Source for Event {
    fn visit<'kvs>(&'kvs self, visitor: &mut dyn VisitSource<'kvs>) -> Result<(), kv::Error> {
        self.for_each_field(|key, field| {
            let value = match field {
                Field::Str(s) => Value::from(s),
                Field::Num(n) => Value::from(n),
                Field::Bool(b) => Value::from(b),
                Field::Ip(ip) => Value::from_display(ip),
            };
            visitor.visit_pair(Key::from_str(key), value)
        })
    }
}

impl fmt::Display for Event {
    /// A one-line summary (the log record's message; the fields carry the rest).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} conn={}", self.kind.as_str(), self.conn)
    }
}

/// The embedder's event callback.
pub type Callback = Arc<dyn Fn(&Event) + Send + Sync>;

/// Where events go: the embedder's callback, if any, and the log.
#[derive(Clone, Default)]
pub(crate) struct EventSink {
    callback: Option<Callback>,
}

impl fmt::Debug for EventSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventSink")
            .field("callback", &self.callback.is_some())
            .finish()
    }
}

impl EventSink {
    pub(crate) fn new(callback: Option<Callback>) -> EventSink {
        EventSink { callback }
    }

    /// Whether anyone would see an event: a callback, or a logger taking
    /// `info` for [`LOG_TARGET`]. Callers skip building events otherwise.
    pub(crate) fn wants(&self) -> bool {
        self.callback.is_some() || log::log_enabled!(target: LOG_TARGET, log::Level::Info)
    }

    /// Hands `event` to the callback and logs it.
    pub(crate) fn emit(&self, event: &Event) {
        if let Some(cb) = &self.callback {
            cb(event);
        }
        let level = log::Level::Info;
        if level <= log::max_level() {
            let logger = log::logger();
            let meta = log::Metadata::builder()
                .level(level)
                .target(LOG_TARGET)
                .build();
            if logger.enabled(&meta) {
                logger.log(
                    &log::Record::builder()
                        .metadata(meta)
                        .args(format_args!("{event}"))
                        .module_path_static(Some(module_path!()))
                        .key_values(event)
                        .build(),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_in_log_order_and_only_those_that_apply() {
        let mut e = Event::new(EventKind::Session, 7, "127.0.0.1:5000");
        e.protocol = Some(Protocol::Socks5);
        e.dialled = Some("192.0.2.1".parse().unwrap());
        e.decision = Some(Decision::WouldDeny);
        e.upgraded = Some(false);
        e.duration = Some(Duration::from_micros(1500));
        e.close = Some(CloseReason::Done);
        let mut seen = Vec::new();
        e.for_each_field(|k, v| {
            seen.push(format!("{k}={v}"));
            Ok::<_, ()>(())
        })
        .unwrap();
        assert_eq!(
            seen,
            [
                "event=session",
                "conn=7",
                "protocol=socks5",
                "client=127.0.0.1:5000",
                "dialled=192.0.2.1",
                "decision=would-deny",
                "upgraded=false",
                "duration_ms=1",
                "close=done"
            ]
        );
        assert_eq!(e.to_string(), "session conn=7");
    }

    #[test]
    fn kv_source_carries_every_field() {
        let mut e = Event::new(EventKind::Request, 1, "unix");
        e.method = Some("GET".into());
        e.status = Some(403);
        assert_eq!(Source::count(&e), 5);
        let status = Source::get(&e, Key::from_str("status")).unwrap();
        assert_eq!(status.to_u64(), Some(403));
    }
}
