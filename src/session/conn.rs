//! What a session is apart from its state: its identity, its deadline, and
//! the access record written when it closes.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::Peer;
use crate::lifecycle::CloseReason;
use crate::policy::Target;

/// A session's identity, deadline and access record.
pub(crate) struct Conn {
    /// Unique for the life of the proxy (slab keys are reused; ids are not).
    pub(crate) id: u64,
    /// When the current state's timer fires; `None`: never (an established
    /// tunnel with idle timeouts off).
    pub(crate) deadline: Option<Instant>,
    pub(crate) log: AccessLog,
}

/// What the access line at close reports.
pub(crate) struct AccessLog {
    pub(crate) peer: Peer,
    pub(crate) started: Instant,
    pub(crate) target: Option<Target>,
    /// The upstream address the tunnel was dialled to.
    pub(crate) dialled: Option<IpAddr>,
    pub(crate) decision: Decision,
    /// Why the session was refused or failed, if it was.
    pub(crate) error: Option<String>,
    /// Inspected HTTP requests this session carried.
    pub(crate) requests: u32,
    /// An inspected session switched to raw passthrough after a 101.
    pub(crate) upgraded: bool,
    /// Payload bytes relayed client to upstream, and back.
    pub(crate) up: u64,
    pub(crate) down: u64,
}

/// What policy said about the session's target.
pub(crate) enum Decision {
    Undecided,
    Allowed(Arc<str>),
    Denied(String),
}

impl Conn {
    pub(crate) fn new(id: u64, peer: Peer, now: Instant) -> Conn {
        Conn {
            id,
            deadline: None,
            log: AccessLog {
                peer,
                started: now,
                target: None,
                dialled: None,
                decision: Decision::Undecided,
                error: None,
                requests: 0,
                upgraded: false,
                up: 0,
                down: 0,
            },
        }
    }

    /// Sets the deadline `after` from `now`, replacing any other.
    pub(crate) fn deadline_in(&mut self, now: Instant, after: Duration) {
        self.deadline = Some(now + after);
    }

    /// The one access line, written when the session closes.
    pub(crate) fn access_line(&self, reason: CloseReason, now: Instant) {
        let log = &self.log;
        let target = log
            .target
            .as_ref()
            .map_or_else(|| "-".to_string(), |t| t.to_string());
        let decision = match &log.decision {
            Decision::Undecided => "-".to_string(),
            Decision::Allowed(rule) => format!("allow rule={rule}"),
            Decision::Denied(why) => format!("deny ({why})"),
        };
        let error = log
            .error
            .as_ref()
            .map_or_else(String::new, |e| format!(" error={e:?}"));
        let http = if log.requests > 0 || log.upgraded {
            format!(" requests={} upgraded={}", log.requests, log.upgraded)
        } else {
            String::new()
        };
        log::info!(
            "access conn={} client={}{} target={target} decision={decision} up={} down={} duration={:.3}s close={reason}{http}{error}",
            self.id,
            log.peer,
            log.peer.ids(),
            log.up,
            log.down,
            now.saturating_duration_since(log.started).as_secs_f64(),
        );
    }
}
