//! What a session may use and what it asks for: the narrow context the
//! reactor lends it for one call, and the effects each call returns.
//!
//! The session layer defines both, so it needs nothing from the reactor:
//! tokens arrive as plain `mio::Token`s, and everything that belongs to the
//! reactor (the run queue, the timer wheel, admission counts, the resolver)
//! is asked for through [`Effects`].

use std::time::Instant;

use mio::{Registry, Token};

use crate::auth::cache::LoginCache;
use crate::auth::{Users, Verify};
use crate::buffer::BufPool;
use crate::config::{Limits, Timeouts};
use crate::events::EventSink;
use crate::lifecycle::CloseReason;
use crate::policy::Policy;
use crate::stats::Stats;

/// Settings sessions read.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) timeouts: Timeouts,
    pub(crate) limits: Limits,
    /// The users, when clients must authenticate.
    pub(crate) auth: Option<std::sync::Arc<Users>>,
    /// The global parent proxy, if any.
    pub(crate) upstream_proxy: Option<std::sync::Arc<crate::protocol::parent::ParentProxy>>,
    /// The proxy's own addresses, never dialled.
    pub(crate) own: super::connect::OwnAddrs,
    /// Binds UDP relay sockets where the listeners live, when that is not
    /// this process's network namespace (`portcullis run`).
    pub(crate) relay_bind: Option<RelayBind>,
    /// The proxy-wide budget for UDP datagrams waiting on a name lookup.
    pub(crate) udp_waiting: std::sync::Arc<super::associate::WaitBudget>,
    /// The ciphers terminated TLS hands to the kernel (kTLS): the probe's
    /// answer when `tls.ktls` is on, else none.
    pub(crate) ktls: crate::tls::ktls::Support,
}

/// Binds a UDP socket at `(ip, port 0)` in the clients' network namespace
/// (see `ProxyBuilder::udp_relay_bind`).
#[derive(Clone)]
pub(crate) struct RelayBind(
    pub(crate)  std::sync::Arc<
        dyn Fn(std::net::IpAddr) -> std::io::Result<std::net::UdpSocket> + Send + Sync,
    >,
);

impl std::fmt::Debug for RelayBind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RelayBind(..)")
    }
}

/// The tokens this session's sockets register under.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tokens {
    pub(crate) client: Token,
    /// The upstream socket's two: each new one takes the token the one
    /// before it did not use ([`super::conn::Conn::register_upstream`]), so
    /// that an event the old socket raised in the poll batch that dropped
    /// it is never taken for the new one's.
    pub(crate) upstream: [Token; 2],
    /// A UDP association's client-facing relay socket.
    pub(crate) relay: Token,
}

/// Everything a session handler may use, lent for one call.
pub(crate) struct Ctx<'a> {
    pub(crate) registry: &'a Registry,
    pub(crate) tokens: Tokens,
    pub(crate) pool: &'a mut BufPool,
    /// Pipes for splicing bulk tunnels.
    #[cfg(target_os = "linux")]
    pub(crate) pipes: &'a super::passthrough::pipe::PipeBudget,
    pub(crate) settings: &'a Settings,
    /// TLS: the CA's minter and leaves, and both rustls configs.
    pub(crate) tls: &'a mut super::TlsEnv,
    pub(crate) policy: &'a Policy,
    /// Logins verified already (the reactor fills it from the verifier's answers).
    pub(crate) logins: &'a LoginCache,
    pub(crate) stats: &'a Stats,
    /// Every client's terminated-handshake budget (shared by the workers).
    pub(crate) handshake_rates: &'a std::sync::Mutex<super::handshake_rate::HandshakeRates>,
    /// Where session and request events go (`Conn::access_line`, `Conn::request`).
    pub(crate) events: &'a EventSink,
    /// The inspected names of the policy in force have been resolved, so
    /// the policy knows their addresses: a raw connection need not wait.
    pub(crate) pins_settled: bool,
    /// The time of this reactor iteration.
    pub(crate) now: Instant,
    /// What the handler asks of the reactor, gathered during the call and
    /// returned by the session's entry point when it ends: only the session
    /// layer can read it, so the caller must use the returned value.
    pub(crate) effects: Pending,
}

/// The [`Effects`] a call is gathering (the lender builds it with
/// `Default::default()`; its contents are private to the session layer).
#[derive(Debug, Default)]
pub(crate) struct Pending(Effects);

/// What a session asks of the reactor after a call: every entry point of
/// [`super::Session`] returns it.
#[derive(Debug, Default)]
#[must_use]
pub(crate) struct Effects {
    /// It stopped at its per-call budget with work left: run it again next
    /// iteration, before sleeping.
    pub(crate) again: bool,
    /// Resolve this name off the loop and hand the answer back.
    pub(crate) resolve: Option<String>,
    /// Verify this login on the verifier pool and hand the verdict back
    /// ([`super::Session::on_verified`]).
    pub(crate) verify: Option<Verify>,
    /// Call [`super::Session::on_pins`] once the policy's inspected names
    /// have been resolved.
    pub(crate) await_pins: bool,
    /// It left its handshake (admission's pending-handshake count drops).
    pub(crate) left_handshake: bool,
    /// It holds a third descriptor from now until it closes (a UDP
    /// association: control, relay and outbound sockets), which admission
    /// must count: it plans two per session.
    pub(crate) third_fd: bool,
    /// Its deadline after the call (`None`: no deadline).
    pub(crate) deadline: Option<Instant>,
    /// It ended for this reason: release its admission and reap it.
    pub(crate) closed: Option<CloseReason>,
}

impl Effects {
    /// Asks nothing at all.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        !self.again
            && self.resolve.is_none()
            && self.verify.is_none()
            && !self.await_pins
            && !self.left_handshake
            && !self.third_fd
            && self.deadline.is_none()
            && self.closed.is_none()
    }
}

impl Pending {
    /// Nothing gathered (every effect of the last call was returned).
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Ctx<'_> {
    /// Asks to be run again next iteration (budget spent, work left).
    pub(crate) fn again(&mut self) {
        self.effects.0.again = true;
    }

    /// Asks the reactor to verify a login off the loop.
    pub(crate) fn verify(&mut self, job: Verify) {
        self.effects.0.verify = Some(job);
    }

    /// Asks to be called back once the policy's inspected names are resolved.
    pub(crate) fn await_pins(&mut self) {
        self.effects.0.await_pins = true;
    }

    /// Asks the reactor to resolve `host`.
    pub(crate) fn resolve(&mut self, host: String) {
        self.effects.0.resolve = Some(host);
    }

    /// Says the session holds a third fd until it closes.
    pub(super) fn third_fd(&mut self) {
        self.effects.0.third_fd = true;
    }

    /// Says the session left its handshake.
    pub(super) fn left_handshake(&mut self) {
        self.effects.0.left_handshake = true;
    }

    /// Ends the call: what it gathered, with the session's deadline and
    /// close reason, handed back (and the context left with nothing).
    pub(super) fn finish(
        &mut self,
        deadline: Option<Instant>,
        closed: Option<CloseReason>,
    ) -> Effects {
        let mut effects = std::mem::take(&mut self.effects.0);
        effects.deadline = deadline;
        effects.closed = closed;
        effects
    }
}
