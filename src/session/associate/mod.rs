//! Associate: a SOCKS5 UDP association (RFC 1928 section 7).
//!
//! The session keeps its TCP control connection (the association lives as
//! long as it does, or until it idles out) and owns two UDP sockets: the
//! relay, bound to the address the client reached us on, and the outbound
//! socket the datagrams leave from. Every datagram is judged on its own:
//!
//! ```text
//! client ──relay──> from the client's address only ──> header (FRAG 0) ──> policy on
//!   the destination (name: check, resolve off the loop, check the addresses)
//!   ──allowed──> out ──> destination          refused: dropped and counted
//! destination ──out──> only from an address the client sent to ──> header ──relay──> client
//! ```
//!
//! Verdicts are remembered per destination for 30 s ([`verdicts`]; and
//! forgotten on a policy reload), so a steady flow costs one policy check,
//! not one per datagram. One datagram waits per direction when a socket's
//! send buffer is full (its source is not read meanwhile); datagrams to
//! names being resolved wait in a bounded queue.

use std::collections::{HashSet, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

mod budget;
mod open;
mod verdicts;

pub(crate) use budget::{WaitBudget, WAITING_BYTES_TOTAL};

pub(crate) use open::start;

use super::conn::Conn;
use super::connect::OwnAddrs;
use super::ctx::Ctx;
use super::endpoint::Endpoint;
use super::state::State;
use crate::io::dgram::{Dgram, DgramIo};
use crate::io::Io;
use crate::lifecycle::CloseReason;
use crate::policy::{Host, Target};
use crate::protocol::socks5::Address;
use crate::protocol::socks5_udp::{self, UdpError};
use crate::stats::UdpDrop;
use verdicts::{Cached, Verdicts, RESOLVE_FAILED_TTL};

/// Distinct destinations one association may send to.
const MAX_DESTINATIONS: usize = 1024;
/// Datagrams waiting for names to resolve, and their bytes.
const MAX_WAITING: usize = 64;
const MAX_WAITING_BYTES: usize = 256 * 1024;
/// Datagrams moved per call before yielding to other sessions.
const BUDGET: usize = 64;
/// The largest datagram: a UDP payload over IPv4 and the SOCKS header.
const DGRAM_MAX: usize = 65_535;
/// Refused destinations logged at info per association; the rest at debug.
const LOUD_REFUSALS: u32 = 16;
/// How long a sender found to be another uid's is not asked about again.
const FOREIGN_MEMO: Duration = Duration::from_secs(1);
/// The idle timeout of an association when `timeouts.idle` is off.
pub(crate) const DEFAULT_IDLE: Duration = Duration::from_secs(300);

pub(crate) struct Associate {
    control: Endpoint,
    relay: Dgram,
    /// Created with the first allowed datagram (dual-stack where it can be).
    out: Option<Dgram>,
    /// The outbound socket is IPv6 (dual-stack): IPv4 destinations are
    /// sent to as v4-mapped addresses.
    out_v6: bool,
    /// The client's address: the control connection's peer IP, and its
    /// port as given or as its first datagram came from.
    client_ip: IpAddr,
    client_port: Option<u16>,
    /// The uid whose socket may fix a port-0 association's port: the
    /// control connection's owner, where the kernel told it.
    owner: Option<u32>,
    /// The last sender found to be another uid's, and when: its datagrams
    /// are dropped without asking again for [`FOREIGN_MEMO`] (a flood from
    /// one socket costs one lookup a second, not one a datagram).
    foreign: Option<(SocketAddr, u32, Instant)>,
    relay_addr: SocketAddr,
    /// The SOCKS reply, flushed on the control connection first.
    owed: Vec<u8>,
    /// A payload the outbound socket could not take yet, and where to.
    up_pending: Option<(SocketAddr, Vec<u8>)>,
    /// A header and payload the relay could not take yet, and the
    /// payload's length.
    down_pending: Option<(Vec<u8>, usize)>,
    /// Where the client sent: the only sources replies are relayed from.
    contacted: HashSet<SocketAddr>,
    verdicts: Verdicts,
    /// The name the resolver is asked about (one at a time).
    resolving: Option<String>,
    /// Datagrams to names without a verdict yet.
    waiting: VecDeque<(Target, Vec<u8>)>,
    /// The waiting datagrams' bytes, drawn on the proxy-wide budget.
    waiting_bytes: budget::Held,
    idle: Duration,
    last_active: Instant,
    dgrams_up: u64,
    dgrams_down: u64,
    dropped: u64,
    up_bytes: u64,
    down_bytes: u64,
    /// The registry of the proxy's UDP ports, and this association's in it
    /// (taken out when it drops).
    own: OwnAddrs,
    ports: Vec<u16>,
    /// Refused destinations logged at info so far.
    refusals_logged: u32,
    /// Failing to open the outbound socket was warned about (once: each
    /// datagram tries again, and would log again).
    out_failure_warned: bool,
}

impl Drop for Associate {
    fn drop(&mut self) {
        for port in &self.ports {
            self.own.udp_closed(*port);
        }
    }
}

/// What one pass over the sockets did.
#[derive(PartialEq, Eq)]
enum Pass {
    Progress,
    Idle,
}

impl Associate {
    pub(crate) fn control(&mut self) -> &mut Endpoint {
        &mut self.control
    }

    pub(crate) fn absorb_relay(&mut self, ev: &mio::event::Event) {
        self.relay.absorb(ev);
    }

    pub(crate) fn absorb_out(&mut self, ev: &mio::event::Event) -> bool {
        match &mut self.out {
            Some(out) => {
                out.absorb(ev);
                true
            }
            None => false,
        }
    }

    pub(crate) fn stage(&self) -> &'static str {
        if self.resolving.is_some() {
            "resolving"
        } else {
            "relaying"
        }
    }

    /// A policy reload: every verdict is taken again, and replies are
    /// accepted only from destinations contacted under the new policy.
    pub(crate) fn on_reload(&mut self) {
        self.verdicts.clear();
        self.contacted.clear();
    }

    pub(crate) fn drive(self: Box<Self>, conn: &mut Conn, ctx: &mut Ctx) -> State {
        let state = self.pump(conn, ctx);
        if let State::Associate(a) = &state {
            a.sync(conn);
        }
        state
    }

    fn pump(mut self: Box<Self>, conn: &mut Conn, ctx: &mut Ctx) -> State {
        if let Some(end) = self.control_io(ctx) {
            self.sync(conn);
            return State::Done(end);
        }
        // A relay buffer from the pool for this call only: a quiet
        // association holds none.
        let mut pooled = ctx.pool.take_at_least(DGRAM_MAX);
        let end = self.relay_loop(pooled.space(), conn, ctx);
        ctx.pool.give(pooled);
        if let Some(reason) = end {
            self.sync(conn);
            return State::Done(reason);
        }
        self.interest();
        State::Associate(self)
    }

    /// Moves datagrams until nothing moves or the budget is spent; `buf`
    /// holds one datagram at a time. `Some`: the association ended.
    fn relay_loop(
        &mut self,
        buf: &mut [u8],
        conn: &mut Conn,
        ctx: &mut Ctx,
    ) -> Option<CloseReason> {
        let mut moved = 0;
        loop {
            if moved >= BUDGET {
                ctx.again();
                return None;
            }
            let mut pass = self.flush(conn, ctx);
            if self.drain_waiting(conn, ctx) == Pass::Progress {
                pass = Pass::Progress;
            }
            match self.read_client(buf, conn, ctx) {
                Ok(Pass::Progress) => pass = Pass::Progress,
                Ok(Pass::Idle) => {}
                Err(reason) => return Some(reason),
            }
            match self.read_destinations(buf, conn, ctx) {
                Ok(Pass::Progress) => pass = Pass::Progress,
                Ok(Pass::Idle) => {}
                Err(reason) => return Some(reason),
            }
            if pass == Pass::Idle {
                return None;
            }
            moved += 1;
        }
    }

    /// The resolver answered for the name in flight.
    pub(crate) fn on_resolved(
        mut self: Box<Self>,
        result: std::io::Result<Vec<IpAddr>>,
        conn: &mut Conn,
        ctx: &mut Ctx,
    ) -> State {
        let Some(name) = self.resolving.take() else {
            return State::Associate(self);
        };
        let targets: HashSet<Target> = self
            .waiting
            .iter()
            .filter(|(t, _)| matches!(&t.host, Host::Domain(d) if *d == name))
            .map(|(t, _)| t.clone())
            .collect();
        for target in targets {
            let cached = match &result {
                Ok(addrs) if !addrs.is_empty() => {
                    let loud = self.loud();
                    verdicts::judge(&target, addrs, self.relay_addr, loud, conn, ctx)
                }
                _ => {
                    let why = "the name did not resolve";
                    verdicts::refused_line(self.loud(), conn, &target, &why);
                    Cached {
                        send: Err(UdpDrop::ResolveFailed),
                        until: ctx.now + RESOLVE_FAILED_TTL,
                    }
                }
            };
            self.counted(&cached, conn);
            self.verdicts.remember(target, cached, ctx.now);
        }
        // The queue moves on in `drive`, which the session runs next.
        self.drive(conn, ctx)
    }

    /// No datagram for the idle timeout: the association ends; else the
    /// deadline moves to the last datagram's.
    pub(crate) fn on_timer(self: Box<Self>, conn: &mut Conn, ctx: &mut Ctx) -> State {
        let due = self.last_active + self.idle;
        if due > ctx.now {
            conn.deadline = Some(due);
            return State::Associate(self);
        }
        log::info!(
            "conn={} udp association idle for {:?}: closed",
            conn.id,
            self.idle
        );
        self.sync(conn);
        State::Done(CloseReason::IdleTimeout)
    }

    /// Copies the association's counts to the access record (after every
    /// call, so however the session ends, its line has them).
    fn sync(&self, conn: &mut Conn) {
        let counts = [self.dgrams_up, self.dgrams_down, self.dropped];
        match &mut conn.log.datagrams {
            Some(kept) => **kept = counts,
            none => *none = Some(Box::new(counts)),
        }
        conn.log.up = self.up_bytes;
        conn.log.down = self.down_bytes;
    }

    /// The control connection: the reply out, anything read discarded (a
    /// client has nothing to say on it), its end ends the association.
    fn control_io(&mut self, ctx: &mut Ctx) -> Option<CloseReason> {
        if self.control.failed() && self.owed.is_empty() {
            return Some(CloseReason::ClientGone);
        }
        while !self.owed.is_empty() && self.control.can_write() {
            match self.control.write(&self.owed) {
                Io::Progress(n) => {
                    self.owed.drain(..n);
                }
                Io::WouldBlock => break,
                Io::Eof | Io::PeerGone(_) => return Some(CloseReason::ClientGone),
            }
        }
        self.control.want(true, !self.owed.is_empty());
        let mut scratch = [0u8; 512];
        for _ in 0..16 {
            if !self.control.can_read() {
                return None;
            }
            match self.control.read(&mut scratch) {
                Io::Progress(_) => {}
                Io::WouldBlock => return None,
                Io::Eof => return Some(CloseReason::Done),
                Io::PeerGone(_) => return Some(CloseReason::ClientGone),
            }
        }
        // Still readable (a client writing on and on): more next round,
        // since the edge will not be reported again.
        ctx.again();
        None
    }

    /// Interest follows need: a source is read only while its sink can
    /// take what it sends; a socket is watched for writing only while a
    /// datagram waits for it.
    fn interest(&mut self) {
        let up_free = self.up_pending.is_none();
        let down_free = self.down_pending.is_none();
        self.relay.want(up_free, !down_free);
        if let Some(out) = &mut self.out {
            out.want(down_free, !up_free);
        }
    }

    /// Sends what waits for a socket that was full.
    fn flush(&mut self, conn: &mut Conn, ctx: &mut Ctx) -> Pass {
        let mut pass = Pass::Idle;
        if let (Some((to, payload)), Some(out)) = (&self.up_pending, &mut self.out) {
            if out.writable() {
                let (to, n) = (*to, payload.len());
                match out.send_to(payload, to) {
                    DgramIo::WouldBlock => {}
                    DgramIo::Done(..) => {
                        self.up_pending = None;
                        self.sent_up(to, n, ctx);
                        pass = Pass::Progress;
                    }
                    DgramIo::Dropped(e) | DgramIo::Failed(e) => {
                        self.up_pending = None;
                        self.drop_one(UdpDrop::SendFailed, ctx);
                        log::debug!("conn={} udp to {to}: {e}", conn.id);
                        pass = Pass::Progress;
                    }
                }
            }
        }
        if let (Some((dgram, len)), Some(port)) = (&self.down_pending, self.client_port) {
            if self.relay.writable() {
                let (to, len) = (SocketAddr::new(self.client_ip, port), *len);
                match self.relay.send_to(dgram, to) {
                    DgramIo::WouldBlock => {}
                    DgramIo::Done(..) => {
                        self.down_pending = None;
                        self.sent_down(len, ctx);
                        pass = Pass::Progress;
                    }
                    DgramIo::Dropped(_) | DgramIo::Failed(_) => {
                        self.down_pending = None;
                        self.drop_one(UdpDrop::SendFailed, ctx);
                        pass = Pass::Progress;
                    }
                }
            }
        }
        let _ = conn;
        pass
    }

    /// Sends the waiting datagrams whose destinations now have a verdict,
    /// in order; asks the resolver about the first that has none.
    fn drain_waiting(&mut self, conn: &mut Conn, ctx: &mut Ctx) -> Pass {
        let mut pass = Pass::Idle;
        while self.up_pending.is_none() {
            let Some((target, _)) = self.waiting.front() else {
                break;
            };
            let Some(cached) = self.verdicts.get(target, ctx.now) else {
                if self.resolving.is_some() {
                    break;
                }
                let target = target.clone();
                match verdicts::judge_now(&target, self.relay_addr, self.loud(), conn, ctx) {
                    Some(cached) => {
                        self.counted(&cached, conn);
                        self.verdicts.remember(target, cached, ctx.now)
                    }
                    None => {
                        self.resolve(&target, ctx);
                        break;
                    }
                }
                continue;
            };
            let (_, payload) = self.waiting.pop_front().expect("front seen");
            self.waiting_bytes.give(payload.len());
            self.deliver(cached, &payload, conn, ctx);
            pass = Pass::Progress;
        }
        pass
    }

    /// Reads one datagram from the relay and acts on it.
    fn read_client(
        &mut self,
        buf: &mut [u8],
        conn: &mut Conn,
        ctx: &mut Ctx,
    ) -> Result<Pass, CloseReason> {
        if self.up_pending.is_some() || !self.relay.readable() {
            return Ok(Pass::Idle);
        }
        let io = self.relay.recv_from(buf);
        let result = match io {
            DgramIo::WouldBlock => Ok(Pass::Idle),
            DgramIo::Dropped(_) => Ok(Pass::Progress),
            DgramIo::Failed(e) => {
                log::warn!("conn={} udp relay {}: {e}", conn.id, self.relay_addr);
                conn.log.error = Some(format!("UDP relay socket: {e}").into());
                Err(CloseReason::ClientGone)
            }
            DgramIo::Done(n, from) => {
                self.on_client_datagram(&buf[..n], from, conn, ctx);
                Ok(Pass::Progress)
            }
        };
        result
    }

    fn on_client_datagram(
        &mut self,
        dgram: &[u8],
        from: SocketAddr,
        conn: &mut Conn,
        ctx: &mut Ctx,
    ) {
        let from_ip = from.ip().to_canonical();
        let port_ok = match self.client_port {
            Some(p) => p == from.port(),
            None => true,
        };
        if from_ip != self.client_ip || !port_ok {
            return self.drop_one(UdpDrop::ForeignSource, ctx);
        }
        let header = match socks5_udp::parse_udp_header(dgram) {
            Ok(h) => h,
            Err(e) => {
                log::debug!("conn={} udp from {from}: {}", conn.id, UdpError::as_str(e));
                return self.drop_one(UdpDrop::Malformed, ctx);
            }
        };
        // The client's port is fixed by its first well-formed datagram, from
        // a socket of the control connection's owner.
        if self.client_port.is_none() {
            if let Err(why) = self.sent_by_the_client(from, ctx.now) {
                if self.loud() {
                    self.refusals_logged += 1;
                    log::info!(
                        "conn={} udp datagram from {from} dropped: {why}; the association's port is fixed by the client's own first datagram (clients should name their port in UDP ASSOCIATE)",
                        conn.id
                    );
                }
                return self.drop_one(UdpDrop::ForeignSource, ctx);
            }
            self.client_port = Some(from.port());
        }
        if header.frag != 0 {
            return self.drop_one(UdpDrop::Fragment, ctx);
        }
        let target = match &header.address {
            Address::Ip(ip) => Target::new(&ip.to_string(), header.port),
            Address::Domain(name) => Target::new(name, header.port),
        };
        let Ok(target) = target else {
            return self.drop_one(UdpDrop::Malformed, ctx);
        };
        let payload = &dgram[header.payload..];
        self.last_active = ctx.now;
        if let Some(cached) = self.verdicts.get(&target, ctx.now) {
            return self.deliver(cached, payload, conn, ctx);
        }
        if let Some(cached) = verdicts::judge_now(&target, self.relay_addr, self.loud(), conn, ctx)
        {
            self.counted(&cached, conn);
            self.verdicts.remember(target, cached, ctx.now);
            return self.deliver(cached, payload, conn, ctx);
        }
        // A name to resolve: asked now if the resolver is free, else after
        // the names ahead of it; the datagram waits its turn.
        if self.resolving.is_none() {
            self.resolve(&target, ctx);
        }
        if self.waiting.len() >= MAX_WAITING
            || self.waiting_bytes.bytes() + payload.len() > MAX_WAITING_BYTES
            || !self.waiting_bytes.take(payload.len())
        {
            return self.drop_one(UdpDrop::QueueFull, ctx);
        }
        self.waiting.push_back((target, payload.to_vec()));
    }

    /// Asks the resolver about `target`'s name (the verdict comes with
    /// [`Associate::on_resolved`]).
    fn resolve(&mut self, target: &Target, ctx: &mut Ctx) {
        if let Host::Domain(name) = &target.host {
            self.resolving = Some(name.clone());
            ctx.resolve(name.clone());
        }
    }

    /// Sends `payload` as `cached` says, or drops it.
    fn deliver(&mut self, cached: Cached, payload: &[u8], conn: &mut Conn, ctx: &mut Ctx) {
        let to = match cached.send {
            Ok(to) => to,
            Err(why) => return self.drop_one(why, ctx),
        };
        if !self.contacted.contains(&to) && self.contacted.len() >= MAX_DESTINATIONS {
            return self.drop_one(UdpDrop::TooManyDestinations, ctx);
        }
        if self.out.is_none() {
            let registry = ctx.registry;
            match open::bind_out().and_then(|s| {
                conn.register_upstream(&ctx.tokens, |token| Dgram::register(s, token, registry))
            }) {
                Ok(out) => {
                    self.out_v6 = out.local_addr().is_ok_and(|a| a.is_ipv6());
                    if let Ok(a) = out.local_addr() {
                        self.own.udp_bound(a.port());
                        self.ports.push(a.port());
                    }
                    self.out = Some(out);
                }
                Err(e) => {
                    let level = if std::mem::replace(&mut self.out_failure_warned, true) {
                        log::Level::Debug
                    } else {
                        log::Level::Warn
                    };
                    log::log!(level, "conn={} udp: cannot open an outbound socket: {e}; its datagrams are dropped (send-failed) until one opens", conn.id);
                    return self.drop_one(UdpDrop::SendFailed, ctx);
                }
            }
        }
        let out = self.out.as_mut().expect("just opened");
        // Replies may come from here from now on, whatever this send does.
        self.contacted.insert(to);
        let dest = out_addr(self.out_v6, to);
        match out.send_to(payload, dest) {
            DgramIo::Done(..) => self.sent_up(to, payload.len(), ctx),
            DgramIo::WouldBlock => self.up_pending = Some((dest, payload.to_vec())),
            DgramIo::Dropped(e) | DgramIo::Failed(e) => {
                log::debug!("conn={} udp to {to}: {e}", conn.id);
                self.drop_one(UdpDrop::SendFailed, ctx);
            }
        }
    }

    /// Reads one datagram from the outbound socket and relays it to the client.
    fn read_destinations(
        &mut self,
        buf: &mut [u8],
        conn: &mut Conn,
        ctx: &mut Ctx,
    ) -> Result<Pass, CloseReason> {
        if self.down_pending.is_some() {
            return Ok(Pass::Idle);
        }
        let Some(out) = &mut self.out else {
            return Ok(Pass::Idle);
        };
        if !out.readable() {
            return Ok(Pass::Idle);
        }
        // Room for the largest header in front: the payload is received
        // after it, so the reply goes out in one send without a copy.
        const HEAD: usize = 22;
        let io = out.recv_from(&mut buf[HEAD..]);
        let result = match io {
            DgramIo::WouldBlock => Ok(Pass::Idle),
            // An earlier send's ICMP error (refused, unreachable): that
            // datagram is gone; nothing to tell the client over UDP.
            DgramIo::Dropped(e) => {
                log::debug!("conn={} udp outbound: {e}", conn.id);
                Ok(Pass::Progress)
            }
            DgramIo::Failed(e) => {
                log::warn!("conn={} udp outbound socket: {e}", conn.id);
                conn.log.error = Some(format!("UDP outbound socket: {e}").into());
                Err(CloseReason::UpstreamGone)
            }
            DgramIo::Done(n, from) => {
                let from = SocketAddr::new(from.ip().to_canonical(), from.port());
                match self.client_port {
                    Some(port) if self.contacted.contains(&from) => {
                        let mut head = Vec::with_capacity(HEAD);
                        socks5_udp::encode_udp_header(from, &mut head);
                        let start = HEAD - head.len();
                        buf[start..HEAD].copy_from_slice(&head);
                        let dgram = &buf[start..HEAD + n];
                        let to = SocketAddr::new(self.client_ip, port);
                        self.last_active = ctx.now;
                        match self.relay.send_to(dgram, to) {
                            DgramIo::Done(..) => self.sent_down(n, ctx),
                            DgramIo::WouldBlock => self.down_pending = Some((dgram.to_vec(), n)),
                            DgramIo::Dropped(_) | DgramIo::Failed(_) => {
                                self.drop_one(UdpDrop::SendFailed, ctx)
                            }
                        }
                    }
                    _ => {
                        log::debug!(
                            "conn={} udp reply from uncontacted {from}: dropped",
                            conn.id
                        );
                        self.drop_one(UdpDrop::Uncontacted, ctx);
                    }
                }
                Ok(Pass::Progress)
            }
        };
        result
    }

    /// Whether the next refused destination is logged at info.
    fn loud(&self) -> bool {
        self.refusals_logged < LOUD_REFUSALS
    }

    /// Counts a fresh verdict's refusal against [`LOUD_REFUSALS`], saying
    /// so once the rest go to debug.
    fn counted(&mut self, cached: &Cached, conn: &Conn) {
        if cached.send.is_err() && self.loud() {
            self.refusals_logged += 1;
            if !self.loud() {
                log::info!(
                    "conn={} udp: further refused destinations of this association are counted, not logged (RUST_LOG=portcullis=debug shows them)",
                    conn.id
                );
            }
        }
    }

    fn sent_up(&mut self, _to: SocketAddr, n: usize, ctx: &Ctx) {
        self.dgrams_up += 1;
        ctx.stats.udp_up(n);
        self.last_active = ctx.now;
        self.bytes(n, 0);
    }

    fn sent_down(&mut self, n: usize, ctx: &Ctx) {
        self.dgrams_down += 1;
        ctx.stats.udp_down(n);
        self.bytes(0, n);
    }

    fn bytes(&mut self, up: usize, down: usize) {
        self.up_bytes += up as u64;
        self.down_bytes += down as u64;
    }

    /// Whether the socket a datagram came `from` belongs to the uid that
    /// owns the control connection, where the kernel told that uid (a
    /// loopback client in our network namespace): else any local process
    /// that learnt the relay's port first could take a port-0 association
    /// over. One socket-diagnostics lookup per datagram until the port is
    /// fixed, but one a second for a sender already found foreign.
    fn sent_by_the_client(&mut self, from: SocketAddr, now: Instant) -> Result<(), String> {
        let Some(uid) = self.owner else {
            return Ok(());
        };
        let foreign = |owner| {
            format!("its socket belongs to uid {owner}, the control connection's to uid {uid}")
        };
        if let Some((addr, owner, at)) = self.foreign {
            if addr == from && now.saturating_duration_since(at) < FOREIGN_MEMO {
                return Err(foreign(owner));
            }
        }
        match crate::client::udp_sender_uid(from, self.relay_addr) {
            Ok(Some(owner)) if owner == uid => Ok(()),
            Ok(Some(owner)) => {
                self.foreign = Some((from, owner, now));
                Err(foreign(owner))
            }
            Ok(None) => Err("its socket is closed".into()),
            Err(e) => Err(format!("its socket's owner is unknown ({e})")),
        }
    }

    fn drop_one(&mut self, why: UdpDrop, ctx: &Ctx) {
        self.dropped += 1;
        ctx.stats.udp_dropped(why);
    }
}

/// `to` as the outbound socket takes it: IPv4 destinations v4-mapped on a
/// dual-stack IPv6 socket.
fn out_addr(v6: bool, to: SocketAddr) -> SocketAddr {
    match (v6, to) {
        (true, SocketAddr::V4(v4)) => {
            SocketAddr::new(IpAddr::V6(v4.ip().to_ipv6_mapped()), v4.port())
        }
        _ => to,
    }
}
