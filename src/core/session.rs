//! The session machine: one client connection from its first byte to its
//! close, or to the hand-off of a raw tunnel to the shell's relay.
//!
//! It composes the stages' machines and makes every step between them a
//! transition inside it: the opening ([`OpeningCore`]: the handshake, the
//! target established, a terminated tunnel's ClientHello, a vetted
//! tunnel's first flight, a refusal's answer and close), then, for an
//! inspected tunnel, a terminated one or the forward proxy, the exchange
//! ([`InspectCore`]), whose forward-proxy request for another host goes
//! back to establishing it, and whose end is the client's close
//! ([`Closer`]: the rest of a response or an answer, then a FIN and the
//! linger, or a reset). What leaves the machine is a raw tunnel: open and
//! relayed raw from the start ([`Next::Relay`]), or after a `101`
//! ([`Next::Upgraded`], every byte already read with it); the shell's
//! zero-copy relay carries those.
//!
//! ```text
//! accept: SessionCore::accept(..)
//! on readiness:       pump(now, client, upstream, env)
//! on a report:        handle(now, Input, env)
//! at poll_timeout(client): handle_timeout(now, client, upstream, env)
//! after every call, first: poll_action() until None (the opening's
//!     actions, and Trust, CloseUpstream, Failed); take_records(),
//!     take_relayed()
//! each call: -> Working | Again | Closed | Reset | Associate | Relay | Upgraded
//! ```

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::ClientConfig;

use super::clock::Deadline;
use super::closing::{self, Closer};
use super::inspect::{InspectCore, Parts, Setup, Stop};
use super::link::Link;
use super::opening::{self, Action, Input, Opened, OpeningCore, Refused, Refusing, Request};
use super::port::Port;
use super::refusal::{Dialect, Refusal};
use super::route::After;
use super::verdicts;
use crate::buffer::BufPool;
use crate::config::{ListenerProtocol, Timeouts};
use crate::lifecycle::{CloseReason, Phase};
use crate::policy::secret::Secrets;
use crate::policy::RequestRules;
use crate::protocol::http1::exchange::{ExchangeConfig, Mode, Record};
use crate::tls::layer::{LayerLimits, TlsLayer};

/// What the machine is lent: the opening's world, and what an inspected
/// session is set up with.
pub(crate) trait Env: opening::Env {
    /// The session's id, for log lines.
    fn id(&self) -> u64;
    /// The proxy's timeouts (an inspected session's clocks).
    fn timeouts(&self) -> Timeouts;
    /// The policy's secrets, for the exchange to inject.
    fn secrets(&self) -> Option<Arc<Secrets>>;
    /// Each of an inspected session's queues: at least a head and the room
    /// a rewrite adds to one.
    fn inspect_buffer(&self) -> usize;
    /// The ciphers terminated TLS may hand to the kernel after its
    /// handshakes (kTLS); none by default.
    fn ktls(&self) -> crate::tls::ktls::Support {
        crate::tls::ktls::Support::NONE
    }
}

/// Where the machine stands after a call.
#[derive(Debug)]
pub(crate) enum Next {
    /// Carry out [`SessionCore::poll_action`], then wait for readiness, a
    /// report or the deadline (after a new stage or sub-stage, which the
    /// shell logs, pump again).
    Working,
    /// This call's share is spent with work left: run again next iteration.
    Again,
    /// Over.
    Closed(CloseReason),
    /// Over, abortively: reset the client (what it was owed was cut off).
    Reset(CloseReason),
    /// A SOCKS5 UDP association, from this source port.
    Associate { port: u16 },
    /// A raw tunnel is open: the shell relays it, `opened`'s bytes first.
    Relay(Box<Opened>),
    /// A `101` went out: the shell relays raw from here, every byte the
    /// machine holds first (the links: a terminated tunnel stays TLS).
    Upgraded(Box<Parts>),
}

enum Stage {
    Opening(Box<OpeningCore>),
    /// A forward-proxy `https` request's upstream: the trust to verify it
    /// with is asked of the shell ([`Action::Trust`]).
    Trusting(Box<Opened>),
    Inspect(Box<Inspecting>),
    Closing(Box<Closer>),
    Done,
}

struct Inspecting {
    core: InspectCore,
    /// The user the opening authenticated (a forward proxy's next host is
    /// established for the same one).
    user: Option<Arc<str>>,
}

/// The machine; see the module docs.
pub(crate) struct SessionCore {
    stage: Stage,
    /// The machine's own actions, and the opening's it outlived.
    owed: VecDeque<Action>,
    /// Who the client is, once the opening said (an inspected stage keeps it).
    user: Option<Arc<str>>,
    /// The shell's buffer pool, lent for one call ([`SessionCore::unpark`]
    /// to [`SessionCore::park`]): an exchange that starts in it takes its
    /// queues from the pool an idle one gave them back to.
    lent: Option<BufPool>,
}

impl SessionCore {
    /// An accepted client; see [`OpeningCore::handshake`].
    pub(crate) fn accept(
        protocol: ListenerProtocol,
        refusing: Option<&'static str>,
        deadline: Deadline,
    ) -> SessionCore {
        SessionCore {
            stage: Stage::Opening(Box::new(OpeningCore::handshake(
                protocol, refusing, deadline,
            ))),
            owed: VecDeque::new(),
            user: None,
            lent: None,
        }
    }

    /// The next thing the shell must do, if any.
    pub(crate) fn poll_action(&mut self) -> Option<Action> {
        if let Some(action) = self.owed.pop_front() {
            return Some(action);
        }
        let action = match &mut self.stage {
            Stage::Opening(o) => o.poll_action(),
            _ => None,
        };
        if let Some(Action::Identified { user, .. }) = &action {
            self.user = user.clone();
        }
        action
    }

    /// Moves what readiness allows.
    pub(crate) fn pump<C: Port, U: Port>(
        &mut self,
        now: Instant,
        client: &mut C,
        upstream: Option<&mut U>,
        env: &impl Env,
    ) -> Next {
        match &mut self.stage {
            Stage::Opening(o) => {
                let next = o.pump(now, client, upstream, env);
                self.opening(now, next, env)
            }
            Stage::Inspect(i) => {
                let Some(upstream) = upstream else {
                    debug_assert!(false, "an inspected session without its upstream");
                    return self.end(Next::Closed(CloseReason::ConnectFailed));
                };
                let result = i.core.pump(now, client, upstream);
                self.inspected(now, result, env)
            }
            Stage::Closing(c) => {
                let next = c.pump(client);
                self.close_step(next)
            }
            Stage::Trusting(_) | Stage::Done => Next::Working,
        }
    }

    /// A report from the shell; one the stage does not wait for changes
    /// nothing.
    pub(crate) fn handle(&mut self, now: Instant, input: Input, env: &impl Env) -> Next {
        match (&mut self.stage, input) {
            (Stage::Trusting(_), Input::Trusted(trust)) => {
                let Stage::Trusting(opened) = std::mem::replace(&mut self.stage, Stage::Done)
                else {
                    return Next::Working;
                };
                self.forward_tls(now, *opened, trust, env)
            }
            (Stage::Opening(o), input) => {
                let next = o.handle(now, input, env);
                self.opening(now, next, env)
            }
            _ => Next::Working,
        }
    }

    /// When the machine next needs [`SessionCore::handle_timeout`].
    pub(crate) fn poll_timeout(&self, client: &impl Port) -> Option<Instant> {
        match &self.stage {
            Stage::Opening(o) => o.poll_timeout(),
            Stage::Inspect(i) => i.core.poll_timeout(client),
            Stage::Closing(c) => Some(c.poll_timeout()),
            Stage::Trusting(_) | Stage::Done => None,
        }
    }

    /// The time is `now`: acts on what ran out (an inspected session then
    /// moves what it can, since a clock may have queued an answer).
    pub(crate) fn handle_timeout<C: Port, U: Port>(
        &mut self,
        now: Instant,
        client: &mut C,
        upstream: Option<&mut U>,
        env: &impl Env,
    ) -> Next {
        match &mut self.stage {
            Stage::Opening(o) => {
                let next = o.handle_timeout(now, client, env);
                self.opening(now, next, env)
            }
            Stage::Inspect(i) => {
                let result = match (i.core.handle_timeout(now, client), upstream) {
                    (Ok(()), Some(upstream)) => i.core.pump(now, client, upstream),
                    (result, _) => result,
                };
                self.inspected(now, result, env)
            }
            Stage::Closing(c) => match c.handle_timeout(now, client) {
                Some(closing::TimedOut { reason, abort }) => self.closed(reason, abort),
                None => Next::Working,
            },
            Stage::Trusting(_) | Stage::Done => Next::Working,
        }
    }

    /// The session state's name for the stage.
    pub(crate) fn name(&self) -> &'static str {
        match &self.stage {
            Stage::Opening(o) => o.name(),
            Stage::Trusting(_) => "Connecting",
            Stage::Inspect(_) => "Inspect",
            Stage::Closing(_) => "Closing",
            Stage::Done => "Done",
        }
    }

    /// The sub-stage: the opening's, the exchange's (`http`,
    /// `awaiting-response`, `tls-handshake`, `https`), the close's.
    pub(crate) fn stage(&self) -> &'static str {
        match &self.stage {
            Stage::Opening(o) => o.stage(),
            Stage::Trusting(_) => "upstream-tls",
            Stage::Inspect(i) => i.core.stage(),
            Stage::Closing(c) => c.stage(),
            Stage::Done => "done",
        }
    }

    /// The phase the session's gauges count it in.
    pub(crate) fn phase(&self) -> Phase {
        match &self.stage {
            Stage::Opening(o) => o.phase(),
            Stage::Trusting(_) => Phase::Connecting,
            Stage::Inspect(_) => Phase::Established,
            Stage::Closing(_) | Stage::Done => Phase::Closing,
        }
    }

    fn opening_core(&self) -> Option<&OpeningCore> {
        match &self.stage {
            Stage::Opening(o) => Some(o),
            _ => None,
        }
    }

    /// Still in the client's handshake.
    pub(crate) fn handshaking(&self) -> bool {
        self.opening_core().is_some_and(|o| o.handshaking())
    }

    /// A TCP connect is in flight.
    pub(crate) fn connecting(&self) -> bool {
        self.opening_core().is_some_and(|o| o.connecting())
    }

    /// The policy allowed the target and an address is being dialled.
    pub(crate) fn dialling(&self) -> bool {
        self.opening_core().is_some_and(|o| o.dialling())
    }

    /// A raw tunnel, open, its first flight being read.
    pub(crate) fn vetting(&self) -> bool {
        self.opening_core().is_some_and(|o| o.vetting())
    }

    /// A terminated tunnel, open, its ClientHello being read.
    pub(crate) fn securing(&self) -> bool {
        self.opening_core().is_some_and(|o| o.securing())
    }

    /// Relaying HTTP message by message.
    pub(crate) fn inspecting(&self) -> bool {
        matches!(self.stage, Stage::Inspect(_))
    }

    /// Answering and closing the client.
    pub(crate) fn closing(&self) -> bool {
        matches!(self.stage, Stage::Closing(_)) || self.opening_core().is_some_and(|o| o.closing())
    }

    /// A reloaded policy still allows the target: an opening sees whether
    /// its treatment holds ([`OpeningCore::reload`]); an inspected session
    /// takes the new request rules and secrets. Returns false when the
    /// session must close.
    pub(crate) fn reload(
        &mut self,
        allowed: &crate::policy::Allowed,
        secrets: Option<Arc<Secrets>>,
        same_treatment: impl FnMut(std::net::IpAddr) -> bool,
    ) -> bool {
        match &mut self.stage {
            Stage::Opening(o) => o.reload(allowed, same_treatment),
            Stage::Inspect(i) => {
                i.core.set_rules(allowed.inspect.clone());
                i.core.set_secrets(secrets);
                true
            }
            _ => true,
        }
    }

    /// A reload refused the target being dialled: see
    /// [`OpeningCore::revoke`]. `None`: the shell closes the session.
    pub(crate) fn revoke(
        &mut self,
        now: Instant,
        denial: crate::policy::Denial,
        env: &impl Env,
    ) -> Option<Next> {
        let Stage::Opening(o) = &mut self.stage else {
            return None;
        };
        let next = o.revoke(now, denial, env)?;
        Some(self.opening(now, next, env))
    }

    /// Finished requests, for counting and logging.
    pub(crate) fn take_records(&mut self) -> impl Iterator<Item = Record> + '_ {
        let inspect = match &mut self.stage {
            Stage::Inspect(i) => Some(&mut i.core),
            _ => None,
        };
        inspect.into_iter().flat_map(|core| core.take_records())
    }

    /// Payload bytes written since the last call: (client to upstream,
    /// upstream to client).
    pub(crate) fn take_relayed(&mut self) -> (usize, usize) {
        match &mut self.stage {
            Stage::Inspect(i) => i.core.take_relayed(),
            Stage::Closing(c) => (0, c.take_relayed()),
            _ => (0, 0),
        }
    }

    /// The last call stopped at its round limit with more to move.
    pub(crate) fn yielded(&self) -> bool {
        matches!(&self.stage, Stage::Inspect(i) if i.core.yielded())
    }

    /// After a call: gives the lent pool back to the shell, and an
    /// inspected session's empty buffers with it.
    pub(crate) fn park(&mut self, pool: &mut BufPool) {
        if let Some(lent) = self.lent.take() {
            *pool = lent;
        }
        if let Stage::Inspect(i) = &mut self.stage {
            i.core.park(pool);
        }
    }

    /// Bytes of queue an inspected session holds now.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        match &self.stage {
            Stage::Inspect(i) => i.core.held(),
            _ => 0,
        }
    }

    /// Before a call: takes buffers again for what [`SessionCore::park`]
    /// gave back, and borrows the shell's `pool` until the next park
    /// (`pool` is left empty meanwhile).
    pub(crate) fn unpark(&mut self, pool: &mut BufPool) {
        if let Stage::Inspect(i) = &mut self.stage {
            i.core.unpark(pool);
        }
        debug_assert!(self.lent.is_none(), "a lent pool not parked");
        let empty = BufPool::new(pool.size(), 0);
        self.lent = Some(std::mem::replace(pool, empty));
    }

    /// The opening's answer, as the machine's: an open upstream goes on to
    /// the exchange, or leaves as a raw tunnel.
    fn opening(&mut self, now: Instant, next: opening::Next, env: &impl Env) -> Next {
        if !matches!(next, opening::Next::Working | opening::Next::Again) {
            // The opening ends: what it still had to say is the machine's.
            self.outlive_opening();
        }
        let opened = match next {
            opening::Next::Working => return Next::Working,
            opening::Next::Again => return Next::Again,
            opening::Next::Closed(reason) => return self.end(Next::Closed(reason)),
            opening::Next::Reset(reason) => return self.end(Next::Reset(reason)),
            opening::Next::Associate { port } => return self.end(Next::Associate { port }),
            opening::Next::Secured(secured) => {
                let secured = *secured;
                let idle = secured.treatment.idle.or(env.timeouts().idle);
                let mode = Mode::Tunnel {
                    target: secured.target,
                    tls: true,
                };
                let start = Start {
                    client: Link::tls_offloading(secured.client, env.ktls()),
                    upstream: Link::tls_offloading(secured.upstream, env.ktls()),
                    to_client: &[],
                    early: &[],
                    rules: secured.treatment.inspect,
                    idle,
                };
                return self.inspect(now, mode, start, env);
            }
            opening::Next::Open(opened) => opened,
        };
        let idle = opened.treatment.idle.or(env.timeouts().idle);
        let Opened {
            after,
            target,
            treatment,
            request,
        } = *opened;
        let plain = |to_client, early, rules| Start {
            client: Link::Plain,
            upstream: Link::Plain,
            to_client,
            early,
            rules,
            idle,
        };
        match after {
            After::Inspect { reply } => {
                let mode = Mode::Tunnel { target, tls: false };
                let start = plain(&reply, &request.early, treatment.inspect);
                self.inspect(now, mode, start, env)
            }
            After::HoldToHost { host } => {
                let mode = Mode::Tunnel { target, tls: false };
                let next = self.inspect(now, mode, plain(&[], &request.early, None), env);
                if let Stage::Inspect(i) = &mut self.stage {
                    i.core.set_vetted_host(host);
                }
                next
            }
            After::Forward => {
                let mode = Mode::Forward {
                    upstream: target,
                    tls: false,
                };
                let next = self.inspect(
                    now,
                    mode,
                    plain(&[], &request.early, treatment.inspect),
                    env,
                );
                self.carry(request);
                next
            }
            After::ForwardTls => {
                // The proxy speaks TLS to the upstream (and verifies it)
                // on the client's behalf: the trust comes from the shell.
                self.owed.push_back(Action::Trust);
                self.stage = Stage::Trusting(Box::new(Opened {
                    after: After::ForwardTls,
                    target,
                    treatment,
                    request,
                }));
                Next::Working
            }
            after @ After::Passthrough { .. } => self.end(Next::Relay(Box::new(Opened {
                after,
                target,
                treatment,
                request,
            }))),
            After::Vetting { .. } | After::Securing { .. } => {
                // The opening vets a tunnel and reads a terminated one's
                // hello itself; it never hands one on.
                debug_assert!(false, "a tunnel to vet or secure left the opening");
                self.end(Next::Closed(CloseReason::Denied))
            }
        }
    }

    /// The opening is over: what it still had to say is the machine's.
    fn outlive_opening(&mut self) {
        if let Stage::Opening(o) = &mut self.stage {
            while let Some(action) = o.poll_action() {
                if let Action::Identified { user, .. } = &action {
                    self.user = user.clone();
                }
                self.owed.push_back(action);
            }
        }
    }

    /// A forward-proxy `https` request's trust is in: the exchange over TLS
    /// to the upstream, or the request refused (`502`) when there is none.
    fn forward_tls(
        &mut self,
        now: Instant,
        opened: Opened,
        trust: Result<Arc<ClientConfig>, String>,
        env: &impl Env,
    ) -> Next {
        let Opened {
            target,
            treatment,
            request,
            ..
        } = opened;
        let layer = trust.and_then(|config| {
            TlsLayer::client(config, &target.host, LayerLimits::default())
                .map_err(|f| format!("TLS to the upstream: {}", f.reason()))
        });
        let layer = match layer {
            Ok(layer) => layer,
            Err(why) => {
                let refusal = Refusal::Connect(std::io::Error::other(why));
                let answer = refusal.answer(request.dialect);
                let reason = refusal.close_reason();
                let refused = Refused {
                    refusal,
                    target,
                    request,
                };
                return self.refuse(
                    now,
                    Refusing::Target(Box::new(refused)),
                    &answer,
                    reason,
                    env,
                );
            }
        };
        let idle = treatment.idle.or(env.timeouts().idle);
        let mode = Mode::Forward {
            upstream: target,
            tls: true,
        };
        let start = Start {
            client: Link::Plain,
            upstream: Link::tls_offloading(layer, env.ktls()),
            to_client: &[],
            early: &request.early,
            rules: treatment.inspect,
            idle,
        };
        let next = self.inspect(now, mode, start, env);
        self.carry(request);
        next
    }

    /// What the exchange with the forward proxy's next upstream keeps of
    /// the connection: the login later requests are held to, and the
    /// client's EOF when it was read already.
    fn carry(&mut self, request: Request) {
        if let Stage::Inspect(i) = &mut self.stage {
            i.core.set_login(request.login);
            if request.client_eof {
                i.core.set_client_eof();
            }
        }
    }

    /// Starts the exchange in `mode` at `now`.
    fn inspect(&mut self, now: Instant, mode: Mode, start: Start<'_>, env: &impl Env) -> Next {
        let setup = Setup {
            id: env.id(),
            exchange: ExchangeConfig {
                rules: verdicts::judge(start.rules),
                secrets: verdicts::secrets(env.secrets()),
                max_head_bytes: env.handshake().max_head_bytes,
                ..ExchangeConfig::new(mode)
            },
            timeouts: env.timeouts(),
            idle: start.idle,
            buffer: env.inspect_buffer(),
        };
        // The queues come from the shell's pool when it lent it (a
        // simulated session has its own).
        let mut own = BufPool::new(setup.buffer, 0);
        let pool = self.lent.as_mut().unwrap_or(&mut own);
        let core = InspectCore::new(
            setup,
            start.client,
            start.upstream,
            start.early,
            start.to_client,
            pool,
            now,
        );
        self.stage = Stage::Inspect(Box::new(Inspecting {
            core,
            user: self.user.clone(),
        }));
        // A new stage: the shell logs it and pumps, which moves the bytes
        // it starts with.
        Next::Working
    }

    /// The exchange's answer, as the machine's.
    fn inspected(&mut self, now: Instant, result: Result<(), Stop>, env: &impl Env) -> Next {
        let stop = match result {
            Ok(()) if self.yielded() => return Next::Again,
            Ok(()) => return Next::Working,
            Err(stop) => stop,
        };
        let Stage::Inspect(i) = std::mem::replace(&mut self.stage, Stage::Done) else {
            return Next::Working;
        };
        let Inspecting { mut core, user } = *i;
        // What the last call did is accounted for before the exchange goes.
        let (up, down) = core.take_relayed();
        if up + down > 0 {
            self.owed.push_back(Action::Relayed { up, down });
        }
        for record in core.take_records() {
            self.owed.push_back(Action::Request(Box::new(record)));
        }
        let parts = core.into_parts();
        match stop {
            Stop::ClientGone(why) => {
                if let Some(why) = why {
                    self.owed.push_back(Action::Failed { why, first: true });
                }
                self.end(Next::Closed(CloseReason::ClientGone))
            }
            Stop::Done(reason) => self.end(Next::Closed(reason)),
            Stop::Upgraded => self.end(Next::Upgraded(Box::new(parts))),
            Stop::Closed {
                end,
                reason,
                error,
                abort,
            } => {
                log::debug!("conn={} the exchange ended: {end:?}", env.id());
                if let Some(why) = error {
                    self.owed.push_back(Action::Failed { why, first: false });
                }
                // The client goes on alone; the upstream closes now.
                self.owed.push_back(Action::CloseUpstream);
                let deadline = Deadline::after(now, env.close_timeout());
                let Parts {
                    client,
                    cout,
                    own,
                    eof: (client_eof, _),
                    ..
                } = parts;
                self.stage = Stage::Closing(Closer::rest(
                    cout, own, client, reason, abort, client_eof, deadline,
                ));
                Next::Working
            }
            Stop::WrongProtocol(answer, why) => {
                self.owed.push_back(Action::Note(why.into()));
                let why = Refusing::Answered { why: why.into() };
                self.refuse(now, why, &answer, CloseReason::BadRequest, env)
            }
            Stop::Switch(target, tls) => {
                // The forward proxy's next host: the old upstream closes,
                // and the request at the front of the client's input goes
                // to the new one, held to the same login.
                self.owed.push_back(Action::CloseUpstream);
                let dialect = match tls {
                    true => Dialect::ForwardTls,
                    false => Dialect::Forward,
                };
                let request = Request {
                    dialect,
                    early: parts.cin.data().to_vec(),
                    login: parts.login,
                    replied: false,
                    client_eof: parts.eof.0,
                };
                let (core, next) = OpeningCore::establish(now, target, user, request, env);
                self.stage = Stage::Opening(Box::new(core));
                self.opening(now, next, env)
            }
        }
    }

    /// The client is refused after the opening: `refusing` for the
    /// records (the upstream closes), then `answer`, a FIN and the linger.
    fn refuse(
        &mut self,
        now: Instant,
        refusing: Refusing,
        answer: &[u8],
        reason: CloseReason,
        env: &impl Env,
    ) -> Next {
        let eof_read = refusing.client_eof();
        self.owed.push_back(Action::Refusing(refusing));
        let deadline = Deadline::after(now, env.close_timeout());
        match Closer::answer(answer, Link::Plain, reason, eof_read, deadline) {
            Some(closer) => {
                self.stage = Stage::Closing(closer);
                Next::Working
            }
            None => self.end(Next::Closed(reason)),
        }
    }

    fn close_step(&mut self, next: closing::Next) -> Next {
        match next {
            closing::Next::Wait => Next::Working,
            closing::Next::Again => Next::Again,
            closing::Next::Close { reason, abort } => self.closed(reason, abort),
        }
    }

    fn closed(&mut self, reason: CloseReason, abort: bool) -> Next {
        self.end(match abort {
            true => Next::Reset(reason),
            false => Next::Closed(reason),
        })
    }

    fn end(&mut self, next: Next) -> Next {
        self.stage = Stage::Done;
        next
    }
}

/// What an exchange starts with.
struct Start<'a> {
    client: Link,
    upstream: Link,
    /// The proxy's success reply, owed to the client.
    to_client: &'a [u8],
    /// What the client sent already.
    early: &'a [u8],
    rules: Option<Arc<RequestRules>>,
    idle: Option<Duration>,
}
