//! From a target to an open upstream, as one machine (the second stage of
//! [`super::opening::OpeningCore`], which lends it the user the handshake
//! authenticated): the policy on the
//! name before any DNS, the wait for the resolver (and for the policy's
//! inspected names), the verdict on the addresses, each connect in turn,
//! and a parent proxy's handshake, all within one connect deadline.
//!
//! It composes the routing decisions ([`route`]) and the connect stage
//! ([`DialCore`]); the policy and the proxy's own facts reach it through
//! an [`Env`]. The shell carries out its [`Action`]s (start the resolver,
//! wait for the pins, record the admission, connect) and reports back
//! through [`EstablishCore::handle`]:
//!
//! ```text
//! begin(env)                        -> Working | Refused
//! after every call, first: poll_action() until None
//!     -> Resolve(name) | AwaitPins | Admitted{..} | Dial(addr, ip)
//! handle(Resolved | PinsSettled | Connected | ConnectFailed, env)
//! pump(upstream, env)               (while a parent proxy is asked)
//! poll_timeout() / handle_timeout(now)
//!                                   -> Working | Refused(refusal) | Open{after, leftover}
//! ```

use std::collections::VecDeque;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use super::clock::Deadline;
use super::dial::{self, DialCore, Outcome};
use super::port::Port;
use super::refusal::{Dialect, Refusal};
use super::route::{self, Admission, Admitted, After, ResolvingCore, Start, Treatment};
use crate::policy::{Allowed, Denial, NameVerdict, Verdict};
use crate::protocol::parent::ParentProxy;
use crate::target::{Host, Target};

/// What the machine asks of the policy and the proxy, for its target.
pub(crate) trait Env {
    /// The policy on the target's name for `user`, before any DNS.
    fn check_name(&self, target: &Target, user: Option<&str>) -> NameVerdict;
    /// The policy on the addresses the target resolved to (or is), for `user`.
    fn check_resolved(&self, target: &Target, user: Option<&str>, addrs: &[IpAddr]) -> Verdict;
    /// The resolver answered `addrs` for `host`: the policy remembers the
    /// addresses of a name an inspecting rule covers, so reaching them by
    /// another spelling is inspected too.
    fn remember(&self, host: &Host, addrs: &[IpAddr]);
    /// The policy knows its inspected names' addresses.
    fn pins_settled(&self) -> bool;
    /// Dialling `addr` could reach the proxy itself.
    fn is_own(&self, addr: SocketAddr) -> bool;
    /// Charges the client's terminated-handshake budget; when it is spent,
    /// the client as a refusal names it.
    fn take_handshake(&self) -> Result<(), String>;
    /// The parent proxy for a rule that names no route.
    fn default_parent(&self) -> Option<&Arc<ParentProxy>>;
    /// Some rule inspects this port: a raw tunnel to it is vetted first.
    fn vets_port(&self, port: u16) -> bool;
}

/// What the shell tells the machine.
#[derive(Debug)]
pub(crate) enum Input {
    /// The resolver's answer for the target's name.
    Resolved(io::Result<Vec<IpAddr>>),
    /// The policy's inspected names are resolved.
    PinsSettled,
    /// The connect in flight completed (the socket became writable).
    Connected,
    /// The connect in flight failed, when it was started or later.
    ConnectFailed(io::Error),
}

/// What the machine asks the shell to do, in order.
#[derive(Debug)]
pub(crate) enum Action {
    /// Resolve this name, and report with [`Input::Resolved`].
    Resolve(String),
    /// Report [`Input::PinsSettled`] once the policy's inspected names are
    /// resolved.
    AwaitPins,
    /// The policy allowed the target (count it, record the rule);
    /// `audit_reasons`: what enforcement would have refused it for.
    Admitted {
        rule: Arc<str>,
        audit_reasons: Vec<Denial>,
    },
    /// Connect to this address (the destination's, or the parent's), for
    /// this vetted address (the one the access log names), and report how
    /// it went; a failed socket closes before the next dial.
    Dial(SocketAddr, IpAddr),
}

/// Where the machine stands after a call.
#[derive(Debug)]
pub(crate) enum Next {
    /// Carry out [`EstablishCore::poll_action`], then wait for an input,
    /// the upstream's readiness or the deadline.
    Working,
    /// Refused before an upstream opened: the client is answered with it.
    Refused(Refusal),
    /// The upstream is open, and the session goes on as `after` says.
    /// `leftover`: bytes the destination sent behind a parent's answer,
    /// already read (empty when direct).
    Open { after: After, leftover: Vec<u8> },
}

/// How far the machine is.
#[derive(Debug)]
enum Stage {
    /// Not begun.
    Idle,
    /// Waiting for the resolver, or for the inspected names.
    Resolving(ResolvingCore),
    /// Connecting (or asking a parent), under what the allowing rule said.
    Dialling(Box<(DialCore, Treatment)>),
    /// Open, under what the allowing rule said: said once.
    Open(Treatment),
    /// Refused: said once.
    Done,
}

/// The machine; see the module docs.
#[derive(Debug)]
pub(crate) struct EstablishCore {
    target: Target,
    /// The user the client authenticated as: the policy is asked for them.
    user: Option<Arc<str>>,
    dialect: Dialect,
    /// The client was answered already (a tunnel switched to the name its
    /// first flight carried): no reply is owed.
    replied: bool,
    /// The resolve and every connect within this.
    deadline: Deadline,
    stage: Stage,
    actions: VecDeque<Action>,
}

impl EstablishCore {
    /// Establishes `target` for `user`'s client, which spoke `dialect` (and
    /// was `replied` to already, for a switched tunnel), by `deadline`.
    pub(crate) fn new(
        target: Target,
        user: Option<Arc<str>>,
        dialect: Dialect,
        replied: bool,
        deadline: Deadline,
    ) -> EstablishCore {
        EstablishCore {
            target,
            user,
            dialect,
            replied,
            deadline,
            stage: Stage::Idle,
            actions: VecDeque::new(),
        }
    }

    /// Refused by name, resolving, or (for an address literal) decided at
    /// once.
    pub(crate) fn begin(&mut self, env: &impl Env) -> Next {
        debug_assert!(matches!(self.stage, Stage::Idle), "begun twice");
        match route::start(&self.target.host, || {
            env.check_name(&self.target, self.user.as_deref())
        }) {
            Start::Decide(ip) => self.decide(vec![ip], env),
            Start::Deny(denial) => self.refuse(Refusal::Denied(denial)),
            Start::Resolve(name) => {
                self.actions.push_back(Action::Resolve(name));
                self.stage = Stage::Resolving(ResolvingCore::dns(self.deadline));
                Next::Working
            }
        }
    }

    /// The next thing the shell must do, if any.
    pub(crate) fn poll_action(&mut self) -> Option<Action> {
        if let Some(action) = self.actions.pop_front() {
            return Some(action);
        }
        let Stage::Dialling(d) = &mut self.stage else {
            return None;
        };
        d.0.poll_action()
            .map(|dial::Action::Dial(addr, ip)| Action::Dial(addr, ip))
    }

    pub(crate) fn handle(&mut self, input: Input, env: &impl Env) -> Next {
        match (&mut self.stage, input) {
            (Stage::Resolving(r), input @ (Input::Resolved(_) | Input::PinsSettled)) => {
                let from_dns = matches!(input, Input::Resolved(Ok(_)));
                let input = match input {
                    Input::Resolved(result) => route::Input::Resolved(result),
                    _ => route::Input::PinsSettled,
                };
                match r.handle(input) {
                    route::Next::Stay => Next::Working,
                    route::Next::Decide(addrs) => {
                        if from_dns {
                            env.remember(&self.target.host, &addrs);
                        }
                        self.decide(addrs, env)
                    }
                    route::Next::Refuse(refusal) => self.refuse(refusal),
                }
            }
            // (Only for the connect in flight: while a parent is asked, a
            // connect outcome is stray.)
            (Stage::Dialling(d), Input::Connected) if d.0.connecting() => {
                let outcome = d.0.handle(dial::Input::Connected);
                self.follow(outcome, env)
            }
            (Stage::Dialling(d), Input::ConnectFailed(e)) if d.0.connecting() => {
                let outcome = d.0.handle(dial::Input::Failed(e));
                self.follow(outcome, env)
            }
            // A late or stray report (a resolve for a session that moved
            // on, pins settled while dialling): nothing changes.
            _ => Next::Working,
        }
    }

    /// Moves a parent proxy's handshake over `upstream`.
    pub(crate) fn pump(&mut self, upstream: &mut impl Port, env: &impl Env) -> Next {
        let Stage::Dialling(d) = &mut self.stage else {
            return Next::Working;
        };
        let outcome = d.0.pump(upstream);
        self.follow(outcome, env)
    }

    /// When the machine runs out of time.
    pub(crate) fn poll_timeout(&self) -> Instant {
        self.deadline.at()
    }

    /// The time is `now`: once the deadline has passed, the refusal for
    /// the stage it caught.
    pub(crate) fn handle_timeout(&mut self, now: Instant) -> Option<Refusal> {
        let refusal = match &mut self.stage {
            Stage::Resolving(r) => r.handle_timeout(now)?,
            Stage::Dialling(d) => Refusal::from(d.0.handle_timeout(now)?),
            Stage::Idle | Stage::Open(_) | Stage::Done => return None,
        };
        self.stage = Stage::Done;
        Some(refusal)
    }

    /// The session state's name for the stage: resolving or connecting.
    pub(crate) fn name(&self) -> &'static str {
        match self.stage {
            Stage::Dialling(_) | Stage::Open(_) => "Connecting",
            _ => "Resolving",
        }
    }

    /// The sub-stage: `dns` or `pins`; `tcp` or `parent-proxy`.
    pub(crate) fn stage(&self) -> &'static str {
        match &self.stage {
            Stage::Resolving(r) => r.stage(),
            Stage::Dialling(d) => d.0.stage(),
            Stage::Idle => "dns",
            Stage::Open(_) => "open",
            Stage::Done => "done",
        }
    }

    /// An address is being dialled (or its parent asked): the policy
    /// allowed it, and a reload must look again.
    pub(crate) fn dialling(&self) -> bool {
        matches!(self.stage, Stage::Dialling(_))
    }

    /// A TCP connect is in flight: the shell waits for it to complete or
    /// fail, and says which.
    pub(crate) fn connecting(&self) -> bool {
        matches!(&self.stage, Stage::Dialling(d) if d.0.connecting())
    }

    /// The target, and what the allowing rule said (once [`Next::Open`]).
    pub(crate) fn into_parts(self) -> (Target, Option<Treatment>) {
        let treatment = match self.stage {
            Stage::Open(t) => Some(t),
            _ => None,
        };
        (self.target, treatment)
    }

    /// A reloaded policy still allows the target: the allowing rule's
    /// request rules and idle timeout are taken ([`Treatment::reload`]).
    /// Returns false when the new policy inspects (or terminates) a tunnel
    /// this one would relay raw (or without terminating): the session must
    /// close instead. Of the addresses still to try (vetted under the old
    /// policy) only those `same_treatment` accepts stay.
    pub(crate) fn reload(
        &mut self,
        allowed: &Allowed,
        same_treatment: impl FnMut(IpAddr) -> bool,
    ) -> bool {
        let Stage::Dialling(d) = &mut self.stage else {
            return true;
        };
        if !d.1.reload(allowed, self.dialect) {
            return false;
        }
        d.0.retain_untried(same_treatment);
        true
    }

    /// The policy's verdict on `addrs`, and what it admits.
    fn decide(&mut self, addrs: Vec<IpAddr>, env: &impl Env) -> Next {
        let verdict = env.check_resolved(&self.target, self.user.as_deref(), &addrs);
        let port = self.target.port;
        let own = |ip: &IpAddr| env.is_own(SocketAddr::new(*ip, port));
        if let (Verdict::Deny(d), Some(first)) = (&verdict, addrs.first()) {
            // Only the proxy itself: refused as such. A refusal by the
            // policy would name a fix (a rule for it, its port, its
            // range, its user) that, followed, only ends here. A deny
            // rule keeps its own refusal.
            if !matches!(d, Denial::Rule(_)) && addrs.iter().all(own) {
                return self.refuse(Refusal::OwnAddress(SocketAddr::new(*first, port)));
            }
        }
        let mut spent = None;
        let admission = route::admit(
            verdict,
            env.pins_settled(),
            self.dialect,
            self.target.port,
            |addr| env.is_own(addr),
            || match env.take_handshake() {
                Ok(()) => true,
                Err(who) => {
                    spent = Some(who);
                    false
                }
            },
            env.default_parent(),
            self.deadline,
        );
        match admission {
            Admission::Deny(denial) => self.refuse(Refusal::Denied(denial)),
            Admission::AwaitPins => {
                self.actions.push_back(Action::AwaitPins);
                self.stage = Stage::Resolving(ResolvingCore::pins(addrs, self.deadline));
                Next::Working
            }
            Admission::OwnAddress(addr) => self.refuse(Refusal::OwnAddress(addr)),
            Admission::HandshakeRate => {
                self.refuse(Refusal::HandshakeRate(spent.unwrap_or_default()))
            }
            Admission::Dial(admitted) => {
                let Admitted {
                    core,
                    treatment,
                    rule,
                    audit_reasons,
                } = *admitted;
                self.actions.push_back(Action::Admitted {
                    rule,
                    audit_reasons,
                });
                let mut dialling = Box::new((core, treatment));
                if !dialling.0.has_addrs() {
                    // Allowed, with not one address to dial (an empty answer).
                    let why = dialling.0.give_up();
                    return self.refuse(Refusal::from(why));
                }
                self.stage = Stage::Dialling(dialling);
                Next::Working
            }
        }
    }

    /// The connect stage's outcome, as the machine's. (Working means an
    /// address is left to dial, or a connect or a parent's answer is in
    /// flight.)
    fn follow(&mut self, outcome: Outcome, env: &impl Env) -> Next {
        match outcome {
            Outcome::Working => Next::Working,
            Outcome::Open { leftover } => self.open(leftover, env),
            Outcome::Unreachable(why) => self.refuse(Refusal::from(why)),
        }
    }

    /// The upstream is open: which state the session goes on in (or the
    /// refusal after all), as [`route::after_connect`] says.
    fn open(&mut self, leftover: Vec<u8>, env: &impl Env) -> Next {
        let Stage::Dialling(d) = std::mem::replace(&mut self.stage, Stage::Done) else {
            // Only a dial opens.
            return self.refuse(Refusal::Connect(io::Error::other("opened without a dial")));
        };
        let (_, treatment) = *d;
        let port = self.target.port;
        let vets_port = || env.vets_port(port);
        match route::after_connect(self.dialect, self.replied, &leftover, &treatment, vets_port) {
            Ok(after) => {
                self.stage = Stage::Open(treatment);
                Next::Open { after, leftover }
            }
            Err(refusal) => self.refuse(refusal),
        }
    }

    /// Ends the machine refused. Actions queued before (an admission to
    /// record) are still carried out.
    fn refuse(&mut self, refusal: Refusal) -> Next {
        self.stage = Stage::Done;
        Next::Refused(refusal)
    }
}
