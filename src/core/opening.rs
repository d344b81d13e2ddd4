//! From an accepted client to an open upstream, as one machine: the
//! client's handshake ([`HandshakeCore`]), then its target established
//! ([`EstablishCore`]: the policy on the name, DNS, the verdict on the
//! addresses, each connect, a parent proxy), then, for a terminated
//! tunnel, the client's ClientHello read ([`SecuringCore`]) and both TLS
//! layers set up, or, for a raw tunnel to a port some rule inspects, its
//! first flight vetted ([`VettingCore`]) for a name it would front for.
//! The handshake's exit to a target, and a vetted tunnel's switch to the
//! stricter name its first flight carried (once), are transitions inside
//! the machine; the user the handshake authenticated is the one the policy
//! is asked about, each time. A refusal at any stage is one too: the
//! machine says why ([`Action::Refusing`], for the records), then writes
//! the client its answer, sends a FIN and lingers until the client's EOF
//! ([`Closer`]), all within the close timeout.
//!
//! The shell (`session/opening.rs`) owns the client's socket and the
//! upstream connect in flight, lends them as [`Port`]s, carries out the
//! machine's [`Action`]s, reports what they led to, and builds the state
//! each end names:
//!
//! ```text
//! accept: OpeningCore::handshake(..)   a forward proxy's next host: OpeningCore::establish(..)
//! on readiness:       pump(now, client, upstream, env)   (a connect's end is read here)
//! on a report:        handle(now, Verdict | Resolved | PinsSettled | Certified
//!                                 | Connected | ConnectFailed, env)
//! at poll_timeout():  handle_timeout(now, client, env)
//! after every call, first: poll_action() until None
//!     -> Identified | Target | Verify | Establish(Resolve | AwaitPins | Admitted | Dial)
//!        | Certify (report Certified) | Switched (drop the upstream) | Note
//!        | Refusing (record it, drop the upstream; the answer is the machine's)
//! each call:          -> Working | Again | Closed(reason) | Reset(reason)
//!                        | Associate(port) | Open(..) | Secured(..)
//! ```

use std::collections::VecDeque;
use std::io;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::{ClientConfig, ServerConfig};

use super::clock::Deadline;
use super::closing::{self, Closer};
use super::establish::{self, EstablishCore};
use super::handshake::{self, Exit, HandshakeCore, Leave};
use super::link::Link;
use super::port::Port;
use super::refusal::{Dialect, Refusal};
use super::route::{After, Treatment};
use super::securing::{self, SecuringCore};
use super::vetting::{self, TimedOut, Verdict as Vetted, VettingCore};
use crate::auth::basic::SameLogin;
use crate::auth::{Verdict, Verify};
use crate::config::ListenerProtocol;
use crate::lifecycle::{CloseReason, Phase};
use crate::policy::Fronting;
use crate::protocol::first_flight::{self, FirstFlight};
use crate::target::{Host, Target};
use crate::tls::layer::{LayerLimits, TlsLayer};

/// What the machine is lent: the policy and the proxy's facts (as the
/// establishing stage asks them), and the settings the handshake reads.
pub(crate) trait Env: establish::Env {
    /// The settings the handshake reads.
    fn handshake(&self) -> handshake::Env<'_>;
    /// How long the resolve and the connects may take, together.
    fn connect_timeout(&self) -> Duration;
    /// How long a vetted tunnel's client has for its first flight.
    fn handshake_timeout(&self) -> Duration;
    /// How long a refused client has to read its answer and close.
    fn close_timeout(&self) -> Duration;
    /// The policy's answer for a name a vetted tunnel's first flight
    /// carries (none: nothing stricter than the tunnel's own rule).
    fn fronting(&self, target: &Target, user: Option<&str>, named: &Target) -> Option<Fronting>;
}

/// What the shell tells the machine.
#[derive(Debug)]
pub(crate) enum Input {
    /// The verifier pool's verdict on the login of [`Action::Verify`].
    Verdict(Verdict),
    /// The resolver's answer for the target's name.
    Resolved(io::Result<Vec<IpAddr>>),
    /// The policy's inspected names are resolved.
    PinsSettled,
    /// The connect in flight completed (the socket became writable).
    Connected,
    /// The connect in flight failed, when it was started or later.
    ConnectFailed(io::Error),
    /// The configs [`Action::Certify`] asked for: the leaf for the name
    /// and the upstream's trust; or why there are none (said to the log).
    Certified(Result<(Arc<ServerConfig>, Arc<ClientConfig>), String>),
    /// The trust [`Action::Trust`] asked for (the session machine's), or
    /// why there is none.
    Trusted(Result<Arc<ClientConfig>, String>),
}

/// What the machine asks the shell to do, in order.
#[derive(Debug)]
pub(crate) enum Action {
    /// The handshake is over: how the client spoke and as whom;
    /// `rejected`: a login was refused on the way (count it).
    Identified {
        spoke: Dialect,
        user: Option<Arc<str>>,
        rejected: bool,
    },
    /// The request names this target (the access record's).
    Target(Target),
    /// Verify this login on the verifier pool; report with [`Input::Verdict`].
    Verify(Box<Verify>),
    /// The establishing stage's: resolve (report with [`Input::Resolved`]),
    /// await the pins ([`Input::PinsSettled`]), record the admission, dial
    /// (the socket's readiness, or [`Input::ConnectFailed`], says how it
    /// went).
    Establish(establish::Action),
    /// A vetted tunnel's first flight named a host the policy treats more
    /// strictly (`why` says how): close the upstream now; the machine
    /// establishes that host instead, the client answered already.
    Switched { why: String },
    /// A terminated tunnel's ClientHello named `name`, the target: mint
    /// (or take from the cache) the leaf for it, and the config to verify
    /// the upstream with; report with [`Input::Certified`].
    Certify(Host),
    /// Worth a line at info level: what to fix (a vetted tunnel's client
    /// that timed out with a first flight that could still be a request; a
    /// terminated one's refused hello).
    Note(String),
    /// The client is refused (or answered and let go): record why, and
    /// close the upstream now. The machine writes the answer itself, then
    /// closes ([`Next::Closed`]).
    Refusing(Refusing),
    /// (The session machine's, after the opening.) The config to verify a
    /// forward-proxy `https` upstream with; report with [`Input::Trusted`].
    Trust,
    /// (The session machine's.) Close the upstream now: the exchange is
    /// over, or the forward proxy goes on to another host.
    CloseUpstream,
    /// (The session machine's.) Record `why` as the session's error; if
    /// `first`, only when none is recorded yet (a TLS failure behind a
    /// client gone).
    Failed { why: String, first: bool },
    /// (The session machine's.) The exchange ended: its last requests, for
    /// counting and logging as [`crate::core::session::SessionCore::take_records`]'s.
    Request(Box<crate::protocol::http1::exchange::Record>),
    /// (The session machine's.) The exchange ended: the payload its last
    /// call wrote, as [`crate::core::session::SessionCore::take_relayed`]'s.
    Relayed { up: usize, down: usize },
}

/// Why the client is answered and let go, for the records.
#[derive(Debug)]
pub(crate) enum Refusing {
    /// Before any target: the handshake refused the request or answered
    /// it (a SOCKS5 method or login failure), or a terminated tunnel's
    /// hello was refused (its alert). `why` goes in the access record.
    Answered { why: String },
    /// Refused once a target was known (count, log and record it as its
    /// kind says). A client answered already (a switched tunnel) hears
    /// nothing more: only the close.
    Target(Box<Refused>),
    /// A vetted tunnel's first flight names what the policy refuses; the
    /// refusing rule, if a rule refused.
    Fronting { why: String, rule: Option<Arc<str>> },
    /// A reload refused the target being dialled, its client not answered
    /// yet: counted already (as allowed, when it was), so only logged, and
    /// a forward request gets its `request` event for the answer.
    Revoked(Box<Refused>),
}

impl Refusing {
    /// The client's EOF was read before this refusal (the forward proxy's
    /// next host, asked by a client that then half-closed): its close has
    /// nothing to linger for.
    pub(crate) fn client_eof(&self) -> bool {
        match self {
            Refusing::Target(r) | Refusing::Revoked(r) => r.request.client_eof,
            Refusing::Answered { .. } | Refusing::Fronting { .. } => false,
        }
    }
}

/// What a request for a target carries besides it.
#[derive(Debug)]
pub(crate) struct Request {
    /// How the client is answered.
    pub(crate) dialect: Dialect,
    /// Bytes the client sent behind its request (a pipelined ClientHello;
    /// a forward request's whole head): they go upstream, never dropped.
    pub(crate) early: Vec<u8>,
    /// The login later forward-proxy requests on the connection are held to.
    pub(crate) login: Option<SameLogin>,
    /// The client was answered already (a tunnel switched to the name its
    /// first flight carried): no reply is sent, and a refusal is a close.
    pub(crate) replied: bool,
    /// The client's EOF was read already (the forward proxy's next host,
    /// asked for by a client that then half-closed): an EOF raises no new
    /// readiness, so the exchange with the next upstream must be told.
    pub(crate) client_eof: bool,
}

/// Refused once a target was known.
#[derive(Debug)]
pub(crate) struct Refused {
    pub(crate) refusal: Refusal,
    pub(crate) target: Target,
    pub(crate) request: Request,
}

/// The upstream is open: the session goes on as `after` says.
#[derive(Debug)]
pub(crate) struct Opened {
    /// The state it goes on in; what the destination sent already, behind
    /// a parent's answer, is in its bytes for the client.
    pub(crate) after: After,
    pub(crate) target: Target,
    /// What the allowing rule said.
    pub(crate) treatment: Treatment,
    pub(crate) request: Request,
}

/// A terminated tunnel, both TLS layers set up: the client's (its
/// ClientHello in) and the upstream's (not yet started).
pub(crate) struct Secured {
    pub(crate) client: TlsLayer,
    pub(crate) upstream: TlsLayer,
    pub(crate) target: Target,
    pub(crate) treatment: Treatment,
}

impl std::fmt::Debug for Secured {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secured({})", self.target)
    }
}

/// Where the machine stands after a call.
#[derive(Debug)]
pub(crate) enum Next {
    /// Carry out [`OpeningCore::poll_action`], then wait for readiness, a
    /// report or the deadline. (Also after a new sub-stage, which the
    /// shell logs, then pumps again.)
    Working,
    /// This call's share is spent with work left (a lingering client
    /// still sending): run again next iteration.
    Again,
    /// Over: the client left, a stage ran out of time, or a refused
    /// client's answer is out and it closed (or was let go).
    Closed(CloseReason),
    /// Over, abortively: a refused client's answer was still owed at the
    /// close deadline (a FIN would make it look whole): reset the client.
    Reset(CloseReason),
    /// The handshake asked for a SOCKS5 UDP association, from this source
    /// port (0: as its first datagram says).
    Associate { port: u16 },
    /// The upstream is open.
    Open(Box<Opened>),
    /// A terminated tunnel is ready for the exchange.
    Secured(Box<Secured>),
}

/// How far the machine is. Every stage is boxed: a session's slot is
/// sized by its largest state, and the opening one should be no larger
/// than an idle tunnel's (which most slots hold).
enum Stage {
    /// Reading the client's request, checking its login.
    Handshake(Box<HandshakeCore>),
    /// From the target to an open upstream.
    Establishing(Box<Establishing>),
    /// A terminated tunnel's reply out and ClientHello in.
    Securing(Box<Securing>),
    /// A raw tunnel's first flight read and judged.
    Vetting(Box<Vetting>),
    /// Refused: the answer out, then a FIN and a linger.
    Closing(Box<Closer>),
    /// Ended: said once.
    Done,
}

struct Establishing {
    core: EstablishCore,
    request: Request,
    user: Option<Arc<str>>,
}

/// A terminated tunnel: the request's early bytes began the client's
/// first flight, which is the core's.
struct Securing {
    core: SecuringCore,
    treatment: Treatment,
    /// The ClientHello named the target: the configs are awaited.
    certifying: bool,
}

/// A vetted tunnel: its first flight is the core's (the request's early
/// bytes began it).
struct Vetting {
    core: VettingCore,
    /// What the destination sent behind a parent proxy's answer.
    from_upstream: Vec<u8>,
    request: Request,
    treatment: Treatment,
    user: Option<Arc<str>>,
}

impl Vetting {
    /// The policy's verdict on a whole first flight, for this client.
    fn judge(&self, flight: FirstFlight, env: &impl Env) -> Vetted {
        let target = self.core.target();
        let user = self.user.as_deref();
        let upstream_spoke = !self.from_upstream.is_empty();
        self.core.judge(flight, upstream_spoke, |named| {
            env.fronting(target, user, named)
        })
    }
}

/// The machine; see the module docs.
pub(crate) struct OpeningCore {
    stage: Stage,
    /// The machine's own actions (the establishing core keeps its own).
    owed: VecDeque<Action>,
}

impl OpeningCore {
    /// An accepted client's handshake on a listener speaking `protocol`;
    /// `refusing` names the limit the proxy is past, when the client is
    /// only to be told so. The handshake must be over by `deadline`.
    pub(crate) fn handshake(
        protocol: ListenerProtocol,
        refusing: Option<&'static str>,
        deadline: Deadline,
    ) -> OpeningCore {
        OpeningCore {
            stage: Stage::Handshake(Box::new(HandshakeCore::new(protocol, refusing, deadline))),
            owed: VecDeque::new(),
        }
    }

    /// Straight to establishing `target` for `user` at `now` (a forward
    /// proxy's next host on a connection).
    pub(crate) fn establish(
        now: Instant,
        target: Target,
        user: Option<Arc<str>>,
        request: Request,
        env: &impl Env,
    ) -> (OpeningCore, Next) {
        let mut core = OpeningCore {
            stage: Stage::Done,
            owed: VecDeque::new(),
        };
        let next = core.begin(now, target, user, request, env);
        (core, next)
    }

    /// Establishes `target`, within the connect timeout from `now`.
    fn begin(
        &mut self,
        now: Instant,
        target: Target,
        user: Option<Arc<str>>,
        request: Request,
        env: &impl Env,
    ) -> Next {
        self.owe(Action::Target(target.clone()));
        let deadline = Deadline::after(now, env.connect_timeout());
        let core = EstablishCore::new(
            target,
            user.clone(),
            request.dialect,
            request.replied,
            deadline,
        );
        let mut establishing = Box::new(Establishing {
            core,
            request,
            user,
        });
        let next = establishing.core.begin(env);
        self.stage = Stage::Establishing(establishing);
        self.follow(now, next, env)
    }

    /// The next thing the shell must do, if any.
    pub(crate) fn poll_action(&mut self) -> Option<Action> {
        if let Some(action) = self.owed.pop_front() {
            return Some(action);
        }
        match &mut self.stage {
            Stage::Establishing(e) => e.core.poll_action().map(Action::Establish),
            Stage::Handshake(_)
            | Stage::Securing(_)
            | Stage::Vetting(_)
            | Stage::Closing(_)
            | Stage::Done => None,
        }
    }

    /// Moves what readiness allows: the client's handshake; then the
    /// connect in flight (done when the upstream is writable, failed when
    /// it reports an error) and a parent proxy's answer; then a terminated
    /// tunnel's hello or a vetted tunnel's first flight. While
    /// establishing, nothing is read from the client (what it pipelined
    /// waits in the kernel); only its failure ends the wait.
    /// ([`Input::Connected`] and [`Input::ConnectFailed`] report the same
    /// from outside: a connect(2) that failed at once, or a simulator.)
    pub(crate) fn pump<C: Port, U: Port>(
        &mut self,
        now: Instant,
        client: &mut C,
        upstream: Option<&mut U>,
        env: &impl Env,
    ) -> Next {
        match &mut self.stage {
            Stage::Handshake(h) => {
                let next = h.pump(client, env.handshake());
                self.after_handshake(now, next, env)
            }
            Stage::Establishing(e) => {
                client.want_read(false);
                client.want_write(false);
                if client.failed() {
                    return self.end(Next::Closed(CloseReason::ClientGone));
                }
                let Some(upstream) = upstream else {
                    // Resolving: the resolver's answer is awaited.
                    return Next::Working;
                };
                if !e.core.connecting() {
                    let next = e.core.pump(upstream, env);
                    return self.follow(now, next, env);
                }
                // The connect in flight: a readiness report on this
                // upstream, the one the last dial made (a stage that
                // dialled within this call has not been carried out yet,
                // so it never gets here). A finished connect is writable,
                // a failed one an error (with hang-up): no syscall tells
                // them apart, and the error is read only to say why.
                let input = if upstream.failed() {
                    let why = upstream
                        .connect_error()
                        .unwrap_or_else(|| io::ErrorKind::ConnectionRefused.into());
                    establish::Input::ConnectFailed(why)
                } else if upstream.can_write() {
                    establish::Input::Connected
                } else {
                    return Next::Working;
                };
                let next = e.core.handle(input, env);
                self.follow(now, next, env)
            }
            Stage::Securing(s) => {
                if let Some(upstream) = upstream {
                    // Nothing is read from it until both handshakes run.
                    upstream.want_read(false);
                    upstream.want_write(false);
                }
                if s.certifying {
                    return Next::Working;
                }
                match s.core.pump(client) {
                    securing::Next::Wait => Next::Working,
                    securing::Next::ClientGone => self.end(Next::Closed(CloseReason::ClientGone)),
                    securing::Next::Refused {
                        answer,
                        reason,
                        why,
                        notable,
                    } => {
                        let note = notable.then(|| format!("{}: {why}", s.core.target()));
                        if let Some(note) = note {
                            self.owe(Action::Note(note));
                        }
                        self.refuse(now, Refusing::Answered { why }, answer, reason, env)
                    }
                    securing::Next::Hello { name } => {
                        s.certifying = true;
                        self.owe(Action::Certify(name));
                        Next::Working
                    }
                }
            }
            Stage::Vetting(v) => {
                let Some(upstream) = upstream else {
                    // Only an open upstream is vetted.
                    return Next::Working;
                };
                match v.core.pump(client, upstream) {
                    vetting::Next::Wait => Next::Working,
                    vetting::Next::ClientGone => self.end(Next::Closed(CloseReason::ClientGone)),
                    vetting::Next::Relay => self.vetted(now, Vetted::Relay, env),
                    vetting::Next::Flight(flight) => {
                        let verdict = v.judge(flight, env);
                        self.vetted(now, verdict, env)
                    }
                }
            }
            Stage::Closing(c) => match c.pump(client) {
                closing::Next::Wait => Next::Working,
                closing::Next::Again => Next::Again,
                closing::Next::Close { reason, abort } => self.closed(reason, abort),
            },
            Stage::Done => Next::Working,
        }
    }

    /// A report from the shell; one the stage does not wait for (a verdict
    /// after the handshake, a resolve for a session that moved on) changes
    /// nothing.
    pub(crate) fn handle(&mut self, now: Instant, input: Input, env: &impl Env) -> Next {
        match (&mut self.stage, input) {
            (Stage::Handshake(h), Input::Verdict(verdict)) => {
                let next = h.handle_verdict(verdict);
                self.after_handshake(now, next, env)
            }
            (Stage::Establishing(e), input) => {
                let input = match input {
                    Input::Resolved(result) => establish::Input::Resolved(result),
                    Input::PinsSettled => establish::Input::PinsSettled,
                    Input::Connected => establish::Input::Connected,
                    Input::ConnectFailed(e) => establish::Input::ConnectFailed(e),
                    Input::Verdict(_) | Input::Certified(_) | Input::Trusted(_) => {
                        return Next::Working
                    }
                };
                let next = e.core.handle(input, env);
                self.follow(now, next, env)
            }
            (Stage::Securing(s), Input::Certified(configs)) if s.certifying => {
                let Stage::Securing(s) = std::mem::replace(&mut self.stage, Stage::Done) else {
                    return Next::Working;
                };
                self.secured(now, *s, configs, env)
            }
            _ => Next::Working,
        }
    }

    /// When the machine runs out of time: the handshake's deadline, then
    /// the resolve's and the connects' one, then the first flight's.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        match &self.stage {
            Stage::Handshake(h) => Some(h.poll_timeout()),
            Stage::Establishing(e) => Some(e.core.poll_timeout()),
            Stage::Securing(s) => Some(s.core.poll_timeout()),
            Stage::Vetting(v) => Some(v.core.poll_timeout()),
            Stage::Closing(c) => Some(c.poll_timeout()),
            Stage::Done => None,
        }
    }

    /// The time is `now`: [`Next::Working`] until the deadline has passed.
    /// (A refused client's input still queued is read away before the
    /// close, so that the close does not reset away its answer.)
    pub(crate) fn handle_timeout(
        &mut self,
        now: Instant,
        client: &mut impl Port,
        env: &impl Env,
    ) -> Next {
        match &mut self.stage {
            Stage::Handshake(h) => match h.handle_timeout(now, env.handshake()) {
                Some(next) => self.after_handshake(now, next, env),
                None => Next::Working,
            },
            Stage::Establishing(e) => match e.core.handle_timeout(now) {
                Some(refusal) => self.follow(now, establish::Next::Refused(refusal), env),
                None => Next::Working,
            },
            Stage::Securing(s) => match s.core.handle_timeout(now) {
                Some(reason) => self.end(Next::Closed(reason)),
                None => Next::Working,
            },
            Stage::Vetting(v) => match v.core.handle_timeout(now) {
                None => Next::Working,
                // What the gate held back is judged as it stands.
                Some(TimedOut::Judge(flight)) => {
                    let verdict = v.judge(flight, env);
                    self.vetted(now, verdict, env)
                }
                Some(TimedOut::Close { note }) => {
                    if let Some(note) = note {
                        self.owe(Action::Note(note));
                    }
                    self.end(Next::Closed(CloseReason::HandshakeTimeout))
                }
            },
            Stage::Closing(c) => match c.handle_timeout(now, client) {
                Some(closing::TimedOut { reason, abort }) => self.closed(reason, abort),
                None => Next::Working,
            },
            Stage::Done => Next::Working,
        }
    }

    /// The session state's name for the stage.
    pub(crate) fn name(&self) -> &'static str {
        match &self.stage {
            Stage::Handshake(_) => "Handshake",
            Stage::Establishing(e) => e.core.name(),
            Stage::Securing(_) => "Securing",
            Stage::Vetting(_) => "Vetting",
            Stage::Closing(_) => "Closing",
            Stage::Done => "Done",
        }
    }

    /// The sub-stage: the handshake's (`sniff`, `http`, `socks5-auth`, ...),
    /// `dns` or `pins` while resolving, `tcp` or `parent-proxy` while
    /// connecting, `reply`, `sniff` or `client-hello` while securing, `reply`
    /// or `first-flight` while vetting.
    pub(crate) fn stage(&self) -> &'static str {
        match &self.stage {
            Stage::Handshake(h) => h.stage(),
            Stage::Establishing(e) => e.core.stage(),
            Stage::Securing(s) => s.core.stage(),
            Stage::Vetting(v) => v.core.stage(),
            Stage::Closing(c) => c.stage(),
            Stage::Done => "done",
        }
    }

    /// Still in the handshake.
    pub(crate) fn handshaking(&self) -> bool {
        matches!(self.stage, Stage::Handshake(_))
    }

    /// The phase the session's gauges count it in: a terminated tunnel's
    /// hello is part of connecting, a vetted tunnel is established (its
    /// reply sent), and a client past a limit is on its way out.
    pub(crate) fn phase(&self) -> Phase {
        match &self.stage {
            Stage::Handshake(h) if h.is_refusing() => Phase::Closing,
            Stage::Handshake(_) => Phase::Handshake,
            Stage::Establishing(e) if e.core.dialling() => Phase::Connecting,
            Stage::Establishing(_) => Phase::Resolving,
            Stage::Securing(_) => Phase::Connecting,
            Stage::Vetting(_) => Phase::Established,
            Stage::Closing(_) | Stage::Done => Phase::Closing,
        }
    }

    /// An address is being dialled (or its parent asked): the policy
    /// allowed the target, and a reload must look again.
    pub(crate) fn dialling(&self) -> bool {
        matches!(&self.stage, Stage::Establishing(e) if e.core.dialling())
    }

    /// A raw tunnel, open, its first flight being read: the policy allowed
    /// it raw, and a reload must look again.
    pub(crate) fn vetting(&self) -> bool {
        matches!(self.stage, Stage::Vetting(_))
    }

    /// A terminated tunnel, open, its ClientHello being read: the policy
    /// allowed it, and a reload must look again.
    pub(crate) fn securing(&self) -> bool {
        matches!(self.stage, Stage::Securing(_))
    }

    /// Refused: the client's answer going out, or the linger after it.
    pub(crate) fn closing(&self) -> bool {
        matches!(self.stage, Stage::Closing(_))
    }

    /// A TCP connect is in flight: the shell waits for it to complete or
    /// fail, and says which.
    pub(crate) fn connecting(&self) -> bool {
        matches!(&self.stage, Stage::Establishing(e) if e.core.connecting())
    }

    /// A reloaded policy still allows the target: see
    /// [`EstablishCore::reload`]. Returns false when the session must close.
    /// (A vetted tunnel is allowed raw still, or the reload closed it.)
    pub(crate) fn reload(
        &mut self,
        allowed: &crate::policy::Allowed,
        same_treatment: impl FnMut(IpAddr) -> bool,
    ) -> bool {
        match &mut self.stage {
            Stage::Establishing(e) => e.core.reload(allowed, same_treatment),
            // Nothing can be stricter than the termination planned; its
            // request rules apply from the first request.
            Stage::Securing(s) => {
                s.treatment.inspect = allowed.inspect.clone();
                true
            }
            _ => true,
        }
    }

    /// A reload refused the target being dialled: a client not answered
    /// yet hears why (a `403`, or SOCKS5 reply `0x02`) before the close,
    /// rather than a close alone. `None` when there is nothing to tell it
    /// (answered already, or not dialling): the shell closes it.
    pub(crate) fn revoke(
        &mut self,
        now: Instant,
        denial: crate::policy::Denial,
        env: &impl Env,
    ) -> Option<Next> {
        match &self.stage {
            Stage::Establishing(e) if e.core.dialling() && !e.request.replied => {}
            _ => return None,
        }
        let Stage::Establishing(e) = std::mem::replace(&mut self.stage, Stage::Done) else {
            return None;
        };
        let Establishing { core, request, .. } = *e;
        let refusal = Refusal::Denied(denial);
        let answer = refusal.answer(request.dialect);
        let (target, _) = core.into_parts();
        let refusing = Refusing::Revoked(Box::new(Refused {
            refusal,
            target,
            request,
        }));
        Some(self.refuse(now, refusing, answer, CloseReason::PolicyReload, env))
    }

    /// The handshake core's answer, as the machine's: an exit to a target
    /// goes on to establish it, under the connect deadline from `now`.
    fn after_handshake(&mut self, now: Instant, next: handshake::Next, env: &impl Env) -> Next {
        match next {
            handshake::Next::Stay => Next::Working,
            handshake::Next::Verify(job) => {
                self.owe(Action::Verify(Box::new(job)));
                Next::Working
            }
            handshake::Next::Gone => self.end(Next::Closed(CloseReason::ClientGone)),
            handshake::Next::TimedOut => self.end(Next::Closed(CloseReason::HandshakeTimeout)),
            handshake::Next::Leave(exit) => self.leave(now, exit, env),
        }
    }

    fn leave(&mut self, now: Instant, exit: Exit, env: &impl Env) -> Next {
        let Exit {
            leave,
            spoke,
            user,
            rejected,
        } = exit;
        self.owe(Action::Identified {
            spoke,
            user: user.clone(),
            rejected,
        });
        match leave {
            Leave::To {
                target,
                dialect,
                early,
                login,
            } => {
                let request = Request {
                    dialect,
                    early,
                    login,
                    replied: false,
                    client_eof: false,
                };
                self.begin(now, target, user, request, env)
            }
            Leave::Associate { port } => self.end(Next::Associate { port }),
            Leave::Refuse(refusal, dialect) => {
                let why = refusal.describe();
                let (answer, reason) = (refusal.answer(dialect), refusal.close_reason());
                self.refuse(now, Refusing::Answered { why }, answer, reason, env)
            }
            Leave::Answer { bytes, reason, why } => {
                self.refuse(now, Refusing::Answered { why }, bytes, reason, env)
            }
        }
    }

    /// The establishing core's answer, as the machine's: a raw tunnel to
    /// a vetted port goes on to vet its first flight, within the handshake
    /// timeout from `now`.
    fn follow(&mut self, now: Instant, next: establish::Next, env: &impl Env) -> Next {
        let (refusal, after, leftover) = match next {
            establish::Next::Working => return Next::Working,
            establish::Next::Refused(refusal) => (Some(refusal), None, Vec::new()),
            establish::Next::Open { after, leftover } => (None, Some(after), leftover),
        };
        let Stage::Establishing(e) = std::mem::replace(&mut self.stage, Stage::Done) else {
            // Only the establishing core answers so.
            return Next::Working;
        };
        let Establishing {
            core,
            request,
            user,
        } = *e;
        let (target, treatment) = core.into_parts();
        let (Some(after), Some(treatment)) = (after, treatment) else {
            // Refused (or, impossibly, open without a dial's treatment).
            let refusal = refusal
                .unwrap_or_else(|| Refusal::Connect(io::Error::other("opened without a dial")));
            // A client answered already (a switched tunnel) is only closed:
            // a second answer inside its tunnel would be taken for the
            // destination's.
            let answer = match request.replied {
                true => Vec::new(),
                false => refusal.answer(request.dialect),
            };
            let reason = refusal.close_reason();
            let refused = Refusing::Target(Box::new(Refused {
                refusal,
                target,
                request,
            }));
            return self.refuse(now, refused, answer, reason, env);
        };
        match after {
            After::Securing { reply } => {
                let deadline = Deadline::after(now, env.handshake_timeout());
                let core = SecuringCore::new(reply, request.early, target, deadline);
                self.stage = Stage::Securing(Box::new(Securing {
                    core,
                    treatment,
                    certifying: false,
                }));
                Next::Working
            }
            After::Vetting { reply } => {
                let Request {
                    dialect,
                    early,
                    login,
                    replied,
                    client_eof,
                } = request;
                let deadline = Deadline::after(now, env.handshake_timeout());
                self.stage = Stage::Vetting(Box::new(Vetting {
                    core: VettingCore::new(reply, early, target, deadline),
                    from_upstream: leftover,
                    request: Request {
                        dialect,
                        early: Vec::new(),
                        login,
                        replied,
                        client_eof,
                    },
                    treatment,
                    user,
                }));
                Next::Working
            }
            after => Next::Open(Box::new(Opened {
                after,
                target,
                treatment,
                request,
            })),
        }
    }

    /// A terminated tunnel's configs are in: both TLS layers, or the
    /// answer (an alert, or nothing) and the close.
    fn secured(
        &mut self,
        now: Instant,
        securing: Securing,
        configs: Result<(Arc<ServerConfig>, Arc<ClientConfig>), String>,
        env: &impl Env,
    ) -> Next {
        let Securing {
            core, treatment, ..
        } = securing;
        let (server, client) = match configs {
            Ok(configs) => configs,
            Err(why) => return self.tls_failed(now, why, Vec::new(), env),
        };
        let target = core.target().clone();
        let client_layer = match core.complete(server) {
            Ok(layer) => layer,
            Err((alert, why)) => return self.tls_failed(now, why, alert, env),
        };
        match TlsLayer::client(client, &target.host, LayerLimits::default()) {
            Ok(upstream) => Next::Secured(Box::new(Secured {
                client: client_layer,
                upstream,
                target,
                treatment,
            })),
            Err(f) => {
                let why = format!("TLS to the upstream: {}", f.reason());
                self.tls_failed(now, why, Vec::new(), env)
            }
        }
    }

    /// A terminated tunnel failed before its TLS started: `alert` (if
    /// any), then the close.
    fn tls_failed(&mut self, now: Instant, why: String, alert: Vec<u8>, env: &impl Env) -> Next {
        let reason = CloseReason::TlsFailed;
        self.refuse(now, Refusing::Answered { why }, alert, reason, env)
    }

    /// A vetted tunnel's verdict, as the machine's: relay or hold it (the
    /// first flight first), refuse it, or switch to the name it carried.
    fn vetted(&mut self, now: Instant, verdict: Vetted, env: &impl Env) -> Next {
        let Stage::Vetting(v) = std::mem::replace(&mut self.stage, Stage::Done) else {
            return Next::Working;
        };
        let Vetting {
            core,
            from_upstream,
            mut request,
            treatment,
            user,
        } = *v;
        let (first, target) = core.into_parts();
        request.early = first;
        match verdict {
            Vetted::Relay => Next::Open(Box::new(Opened {
                after: After::Passthrough {
                    to_client: from_upstream,
                    own: 0,
                },
                target,
                treatment,
                request,
            })),
            Vetted::HoldToHost(host) => Next::Open(Box::new(Opened {
                after: After::HoldToHost { host },
                target,
                treatment,
                request,
            })),
            Vetted::Refuse { answer, why, rule } => {
                let refusing = Refusing::Fronting { why, rule };
                self.refuse(now, refusing, answer, CloseReason::Denied, env)
            }
            // A tunnel is switched once. Vetted again at the name it was
            // switched to (established raw there: a scoped inspecting rule
            // names it, but not its addresses), the same first flight can
            // name the host it came from (a request naming two hosts), and
            // switch back, and so on: a resolve and a dial each time, each
            // with fresh deadlines, without end, and never reading the
            // client again to see it gone. (Only a switch answers the
            // client before establishing.)
            Vetted::Switch { why, .. } if request.replied => {
                let tls = request
                    .early
                    .first()
                    .is_some_and(|b| first_flight::starts_tls(*b));
                let why = format!(
                    "{why}; refused: the tunnel was switched to {target} already, \
                     and is switched once: open a tunnel to each host the client needs"
                );
                let answer = vetting::refusal_answer(&why, tls);
                let refusing = Refusing::Fronting { why, rule: None };
                self.refuse(now, refusing, answer, CloseReason::Denied, env)
            }
            Vetted::Switch { to, why } => {
                self.owe(Action::Switched { why });
                let request = Request {
                    dialect: request.dialect,
                    early: request.early,
                    login: None,
                    replied: true,
                    client_eof: request.client_eof,
                };
                self.begin(now, to, user, request, env)
            }
        }
    }

    /// The client is refused for `reason`: `refusing` for the records,
    /// then `answer` written (nothing: closed at once), a FIN, and a linger
    /// until its EOF (none when it was read already), within the close
    /// timeout from `now`.
    fn refuse(
        &mut self,
        now: Instant,
        refusing: Refusing,
        answer: Vec<u8>,
        reason: CloseReason,
        env: &impl Env,
    ) -> Next {
        let eof_read = refusing.client_eof();
        self.owe(Action::Refusing(refusing));
        let deadline = Deadline::after(now, env.close_timeout());
        // The client's plaintext: a terminated tunnel is refused before its
        // TLS starts (an alert is written as it stands).
        let Some(closer) = Closer::answer(&answer, Link::Plain, reason, eof_read, deadline) else {
            return self.end(Next::Closed(reason));
        };
        self.stage = Stage::Closing(closer);
        // A new stage: the shell logs it and pumps, which writes the answer.
        Next::Working
    }

    /// The refused client's close: a reset when `abort`.
    fn closed(&mut self, reason: CloseReason, abort: bool) -> Next {
        self.end(match abort {
            true => Next::Reset(reason),
            false => Next::Closed(reason),
        })
    }

    /// Ends the machine with `next`.
    fn end(&mut self, next: Next) -> Next {
        self.stage = Stage::Done;
        next
    }

    fn owe(&mut self, action: Action) {
        self.owed.push_back(action);
    }
}
