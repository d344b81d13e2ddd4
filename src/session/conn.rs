//! What a session is apart from its state: its identity, its deadline, and
//! the access record that becomes its `session` event when it closes (and
//! lends its fields to each `request` event).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use mio::Token;

use super::ctx::{Ctx, Tokens};
use super::refusal::Dialect;
use crate::client::Peer;
use crate::events::{self, Event, EventKind, Protocol};
use crate::lifecycle::CloseReason;
use crate::lifecycle::SessionInfo;
use crate::policy::{Denial, Target};
use crate::protocol::http1::exchange::{self, Record};
use crate::rule_stats::Outcome;

/// A session's identity, deadline and access record.
pub(crate) struct Conn {
    /// Unique for the life of the proxy (slab keys are reused; ids are not).
    pub(crate) id: u64,
    /// When the current state's timer fires; `None`: never (an established
    /// tunnel with idle timeouts off).
    pub(crate) deadline: Option<Instant>,
    pub(crate) log: AccessLog,
}

/// What the session event at close reports.
pub(crate) struct AccessLog {
    pub(crate) peer: Peer,
    pub(crate) started: Instant,
    /// How the client spoke, once the handshake knows.
    pub(crate) protocol: Option<Protocol>,
    /// The proxy user the client authenticated as.
    pub(crate) user: Option<std::sync::Arc<str>>,
    pub(crate) target: Option<Target>,
    /// The upstream address the tunnel was dialled to.
    pub(crate) dialled: Option<IpAddr>,
    pub(crate) decision: Decision,
    /// Why the session was refused or failed, if it was.
    pub(crate) error: Option<Box<str>>,
    /// Inspected HTTP requests this session carried.
    pub(crate) requests: u32,
    /// An inspected session switched to raw passthrough after a 101.
    pub(crate) upgraded: bool,
    /// Not reported: which of the two upstream tokens ([`Tokens::upstream`])
    /// the session's last upstream socket registered under (see
    /// [`Conn::register_upstream`]). Kept here, in the record's padding
    /// (next to `requests` and `upgraded`), so that a bit does not grow
    /// every session by a word.
    upstream_gen: u8,
    /// Payload bytes relayed client to upstream, and back.
    pub(crate) up: u64,
    pub(crate) down: u64,
    /// A UDP association's datagrams: relayed up, down, and dropped.
    /// Boxed: few sessions are associations, and every session holds one.
    pub(crate) datagrams: Option<Box<[u64; 3]>>,
}

/// What policy said about the session's target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    Undecided,
    /// Allowed by this rule.
    Allowed(Arc<str>),
    /// Refused: by a deny rule (named), or with no rule (deny by default, a
    /// special address). Boxed, as is `WouldDeny`: every session holds a
    /// decision, few hold these.
    Denied(Box<Reasoned<Option<Arc<str>>>>),
    /// Audit mode let it through: the rule allowed it (`-` when none did),
    /// though it would have been refused.
    WouldDeny(Box<Reasoned<Arc<str>>>),
}

/// A refusal's rule and why it refused (or would have).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reasoned<R> {
    pub(crate) rule: R,
    pub(crate) reason: String,
}

impl<R> Reasoned<R> {
    pub(crate) fn new(rule: R, reason: String) -> Box<Reasoned<R>> {
        Box::new(Reasoned { rule, reason })
    }
}

impl Decision {
    /// Refused for `denial`.
    pub(crate) fn denied(denial: &Denial) -> Decision {
        Decision::Denied(Reasoned::new(denial_rule(denial), denial.to_string()))
    }

    /// Let through by audit mode under `rule`, though `denials` would have
    /// refused it: every one of them, in one reason joined by ` | `.
    pub(crate) fn would_deny(rule: Arc<str>, denials: &[Denial]) -> Decision {
        let reason: Vec<String> = denials.iter().map(Denial::to_string).collect();
        Decision::WouldDeny(Reasoned::new(rule, reason.join(" | ")))
    }

    fn rule(&self) -> Option<&Arc<str>> {
        match self {
            Decision::Undecided => None,
            Decision::Allowed(rule) => Some(rule),
            Decision::WouldDeny(w) => Some(&w.rule),
            Decision::Denied(d) => d.rule.as_ref(),
        }
    }

    fn label(&self) -> Option<events::Decision> {
        match self {
            Decision::Undecided => None,
            Decision::Allowed(_) => Some(events::Decision::Allow),
            Decision::Denied(_) => Some(events::Decision::Deny),
            Decision::WouldDeny(_) => Some(events::Decision::WouldDeny),
        }
    }

    fn reason(&self) -> Option<&str> {
        match self {
            Decision::Denied(d) => Some(&d.reason),
            Decision::WouldDeny(w) => Some(&w.reason),
            Decision::Undecided | Decision::Allowed(_) => None,
        }
    }
}

/// The rule a denial names, if any: the deny rule, or the allow rule that
/// matched the name but not this address or port.
fn denial_rule(denial: &Denial) -> Option<Arc<str>> {
    denial.rule().cloned()
}

impl From<Dialect> for Protocol {
    fn from(d: Dialect) -> Protocol {
        match d {
            Dialect::Http => Protocol::Connect,
            Dialect::Socks5 => Protocol::Socks5,
            Dialect::Forward | Dialect::ForwardTls => Protocol::Forward,
        }
    }
}

impl Conn {
    /// Registers a new upstream socket, by `register`, under the upstream
    /// token the socket before it did not use. Returns what `register`
    /// does; the token changes only when it succeeds (a socket that never
    /// registered left no event behind).
    pub(crate) fn register_upstream<T>(
        &mut self,
        tokens: &Tokens,
        register: impl FnOnce(Token) -> std::io::Result<T>,
    ) -> std::io::Result<T> {
        let gen = self.log.upstream_gen ^ 1;
        let registered = register(tokens.upstream[usize::from(gen)])?;
        self.log.upstream_gen = gen;
        Ok(registered)
    }

    /// Whether `token` is the upstream socket's the session registered
    /// last: an event carrying the other upstream token is a dropped
    /// socket's, raised in the poll batch that dropped it.
    pub(crate) fn is_current_upstream(&self, token: Token, tokens: &Tokens) -> bool {
        token == tokens.upstream[usize::from(self.log.upstream_gen)]
    }

    pub(crate) fn new(id: u64, peer: Peer, now: Instant) -> Conn {
        Conn {
            id,
            deadline: None,
            log: AccessLog {
                peer,
                started: now,
                protocol: None,
                user: None,
                target: None,
                dialled: None,
                decision: Decision::Undecided,
                error: None,
                requests: 0,
                upgraded: false,
                upstream_gen: 0,
                up: 0,
                down: 0,
                datagrams: None,
            },
        }
    }

    /// Records policy's decision on the target, and counts it under its rule.
    /// (The overall allowed/denied counters are the caller's.)
    pub(crate) fn decide(&mut self, decision: Decision, ctx: &Ctx) {
        let outcome = match &decision {
            Decision::Undecided => None,
            Decision::Allowed(_) => Some(Outcome::Allowed),
            Decision::Denied(_) => Some(Outcome::Denied),
            Decision::WouldDeny(_) => Some(Outcome::WouldDeny),
        };
        if let Some(outcome) = outcome {
            ctx.stats.rules.connection(decision.rule(), outcome);
        }
        self.log.decision = decision;
    }

    /// The session's fields every event carries.
    fn event(&self, kind: EventKind) -> Event {
        let log = &self.log;
        let (client, uid, pid) = peer_fields(&log.peer);
        let mut e = Event::new(kind, self.id, client);
        e.client_uid = uid;
        e.client_pid = pid;
        e.protocol = log.protocol;
        e.user = log.user.as_deref().map(str::to_owned);
        e.target = log.target.as_ref().map(Target::to_string);
        e.dialled = log.dialled;
        e
    }

    /// The session event, emitted when the session closes (once).
    pub(crate) fn access_line(&self, reason: CloseReason, ctx: &Ctx) {
        if !ctx.events.wants() {
            return;
        }
        let log = &self.log;
        let mut e = self.event(EventKind::Session);
        e.rule = log.decision.rule().cloned();
        // A client refused for its credentials was denied, by no rule.
        e.decision = log.decision.label().or(match reason {
            CloseReason::AuthFailed => Some(events::Decision::Deny),
            _ => None,
        });
        e.reason = log
            .decision
            .reason()
            .map(str::to_owned)
            .or_else(|| log.error.as_deref().map(str::to_owned));
        if log.requests > 0 || log.upgraded {
            e.requests = Some(log.requests);
            e.upgraded = Some(log.upgraded);
        }
        e.bytes_up = Some(log.up);
        e.bytes_down = Some(log.down);
        if let Some(&[up, down, dropped]) = log.datagrams.as_deref() {
            e.datagrams_up = Some(up);
            e.datagrams_down = Some(down);
            e.datagrams_dropped = Some(dropped);
        }
        e.duration = Some(ctx.now.saturating_duration_since(log.started));
        e.close = Some(reason);
        ctx.events.emit(&e);
    }

    /// A forward-proxy request (its head in `head`) refused before any
    /// upstream answered (by the policy, or it could not be reached): its
    /// `request` event, with the session's decision and the answer's
    /// `status`. The session's own counters have it already.
    pub(crate) fn forward_refused(&self, head: &[u8], status: u16, reason: String, ctx: &Ctx) {
        if !ctx.events.wants() {
            return;
        }
        let mut e = self.event(EventKind::Request);
        (e.method, e.path) = exchange::forward_fields(head);
        e.rule = self.log.decision.rule().cloned();
        // Undecided (the name did not resolve): refused by the proxy, as an
        // exchange's refusals are.
        e.decision = Some(self.log.decision.label().unwrap_or(events::Decision::Deny));
        e.reason = Some(reason);
        e.status = Some(status);
        ctx.events.emit(&e);
    }

    /// One inspected request was judged: counts it under its request rule
    /// and emits its `request` event. The inspecting state calls this for
    /// every [`Record`] its exchange hands over.
    pub(crate) fn request(&self, record: &Record, ctx: &Ctx) {
        use exchange::Decision as R;
        let (outcome, rule, reason, status) = match &record.decision {
            R::Allowed(rule) => (Outcome::Allowed, rule.as_ref(), None, None),
            R::Denied(rule) => (Outcome::Denied, Some(rule), None, Some(403)),
            R::WouldDeny(rule) => (Outcome::WouldDeny, Some(rule), None, None),
            R::Refused { status, reason, .. } => {
                (Outcome::Denied, None, Some(reason.as_str()), Some(*status))
            }
            // The policy allowed it; the upstream failed: counted as allowed
            // by its rule, logged as an error.
            R::Failed { rule, reason, .. } => (
                Outcome::Allowed,
                rule.as_ref(),
                Some(reason.as_str()),
                Some(502),
            ),
        };
        let failed = matches!(record.decision, R::Failed { .. });
        ctx.stats.rules.request(rule, outcome);
        if !ctx.events.wants() {
            return;
        }
        let mut e = self.event(EventKind::Request);
        if record.authority.is_some() {
            e.target.clone_from(&record.authority);
        }
        // Under an inspecting rule without request rules (and on the forward
        // proxy), the rule that allowed the session.
        e.rule = match &record.decision {
            R::Allowed(None) | R::Failed { rule: None, .. } => self.log.decision.rule().cloned(),
            _ => rule.cloned(),
        };
        e.decision = Some(match outcome {
            _ if failed => events::Decision::Error,
            Outcome::Allowed => events::Decision::Allow,
            Outcome::Denied => events::Decision::Deny,
            Outcome::WouldDeny => events::Decision::WouldDeny,
        });
        let what = || {
            format!(
                "{} {}",
                record.method.as_deref().unwrap_or("-"),
                record.path.as_deref().unwrap_or("-")
            )
        };
        e.reason = match (&record.decision, reason) {
            (_, Some(reason)) => Some(reason.to_owned()),
            (R::Denied(rule), None) => Some(format!("{} is denied by {rule}", what())),
            (R::WouldDeny(rule), None) => Some(format!("{} would be denied by {rule}", what())),
            _ => None,
        };
        e.method.clone_from(&record.method);
        e.path.clone_from(&record.path);
        e.status = record.status.or(status);
        ctx.events.emit(&e);
    }

    /// What `list-sessions` shows of this session, in state `state`.
    pub(crate) fn info(&self, state: String, now: Instant) -> SessionInfo {
        let log = &self.log;
        SessionInfo {
            id: self.id,
            client: log.peer.to_string(),
            protocol: log.protocol,
            user: log.user.as_deref().map(str::to_owned),
            target: log.target.as_ref().map(Target::to_string),
            dialled: log.dialled,
            state,
            rule: log.decision.rule().map(|r| r.to_string()),
            bytes_up: log.up,
            bytes_down: log.down,
            age: now.saturating_duration_since(log.started),
        }
    }
}

/// The client as events show it: its address, and its uid and pid where known.
fn peer_fields(peer: &Peer) -> (String, Option<u32>, Option<u32>) {
    let client = match peer.addr {
        crate::client::PeerAddr::Tcp(addr) => addr.to_string(),
        crate::client::PeerAddr::Unix { .. } => "unix".to_string(),
    };
    (client, peer.uid, peer.pid())
}
