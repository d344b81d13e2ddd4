//! Passthrough: raw relaying in both directions. It owns both sockets.
//!
//! Each direction is a [`Flow`] with at most one bounded carrier (a buffer,
//! or on Linux a pipe for `splice`). A side is read only while its flow's
//! carrier has room, written only while bytes are pending; reads and writes
//! alternate until WouldBlock, so one call moves as much as the sockets
//! allow. There is no cumulative limit of any kind. EOF from one side is
//! flushed and then becomes `shutdown(Write)` on the other; the tunnel is
//! done when both directions are.
//!
//! Once either peer has finished sending, the tunnel is half-closed and may
//! sit silent for at most the half-close timeout. A peer has finished when
//! its EOF is read, or as soon as the kernel reports its FIN (RDHUP), even
//! while bytes ahead of the FIN are still unread because the other side is
//! not taking them: a client that filled the tunnel toward an upstream that
//! never reads, then closed, must not hold the session for ever.

mod carrier;
#[cfg(target_os = "linux")]
pub(crate) mod pipe;

use std::time::{Duration, Instant};

pub(crate) use carrier::Carrier;
use carrier::Fill;

use super::channel::Channel;
use super::closing::Closing;
use super::conn::Conn;
use super::ctx::Ctx;
use super::endpoint::Endpoint;
use super::state::State;
use crate::buffer::ByteBuf;
use crate::io::Io;
use crate::lifecycle::{CloseReason, Side};

/// Read/write rounds per call before yielding to other sessions, so one fat
/// tunnel cannot starve the rest (the session is run again next iteration).
const ROUNDS_PER_CALL: usize = 32;

pub(crate) struct Passthrough {
    client: Channel,
    upstream: Channel,
    /// Client to upstream.
    up: Flow,
    /// Upstream to client.
    down: Flow,
    /// The idle timeout in nanoseconds, 0 for none: 8 bytes in every idle
    /// tunnel, not an `Option<Duration>`'s 16 (584 years at most; longer
    /// saturates).
    idle_ns: u64,
    /// The half-close deadline is set (the tunnel is half-closed for good).
    half_close_armed: bool,
    last_active: Instant,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FlowPhase {
    /// Relaying.
    Open,
    /// The source sent EOF; flush, then shut the destination's write side.
    Draining,
    /// EOF passed on: this direction is finished.
    Shut,
}

struct Flow {
    buf: Option<Carrier>,
    /// Has filled its carrier at least once.
    bulk: bool,
    phase: FlowPhase,
    /// Leading buffered bytes that are the proxy's own (its success reply),
    /// not payload: written like payload, never counted as relayed.
    own: u32,
}

/// A side died while relaying.
struct Gone(Side);

/// The bytes each way that go first, before anything read from the sockets.
pub(crate) struct Preload {
    /// To the client: the proxy's success reply (`own`), then payload.
    pub(crate) to_client: Option<ByteBuf>,
    /// Leading bytes of `to_client` that are the proxy's own reply.
    pub(crate) own: usize,
    /// To the upstream: what the client pipelined behind its request.
    pub(crate) to_upstream: Option<ByteBuf>,
    /// (client, upstream) already sent EOF (after an upgrade: no new edge
    /// will say so).
    pub(crate) eof: (bool, bool),
}

impl Preload {
    /// A fresh tunnel: the proxy's `reply` to the client, and the client's
    /// `early` bytes for the upstream.
    pub(crate) fn reply(reply: &[u8], early: &[u8], ctx: &mut Ctx) -> Preload {
        let mut preload = |bytes: &[u8]| {
            (!bytes.is_empty()).then(|| {
                let mut buf = ctx.pool.take_at_least(bytes.len());
                buf.extend(bytes);
                buf
            })
        };
        Preload {
            to_client: preload(reply),
            own: reply.len(),
            to_upstream: preload(early),
            eof: (false, false),
        }
    }
}

impl Passthrough {
    pub(crate) fn new(
        client: Channel,
        upstream: Channel,
        preload: Preload,
        idle: Option<Duration>,
        ctx: &Ctx,
    ) -> Passthrough {
        let flow = |buf: Option<ByteBuf>, own, eof| Flow {
            buf: buf.map(Carrier::Buf),
            bulk: false,
            phase: if eof {
                FlowPhase::Draining
            } else {
                FlowPhase::Open
            },
            own,
        };
        let mut p = Passthrough {
            client,
            upstream,
            up: flow(preload.to_upstream, 0, preload.eof.0),
            // `own` is a reply held in one buffer: it fits a u32.
            down: flow(preload.to_client, preload.own as u32, preload.eof.1),
            idle_ns: idle.map_or(0, |d| {
                u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1)
            }),
            half_close_armed: false,
            last_active: ctx.now,
        };
        // Entering this state sets the deadline from `idle_timeout`, which
        // already counts a side that finished before the tunnel opened.
        p.half_close_armed = p.half_closed();
        p
    }

    /// How long the tunnel may sit silent now: the idle timeout, and once
    /// one side has finished, `half_close` (the setting; whichever is
    /// shorter).
    pub(crate) fn idle_timeout(&self, half_close: Duration) -> Option<Duration> {
        if self.half_closed() {
            Some(self.idle().map_or(half_close, |i| i.min(half_close)))
        } else {
            self.idle()
        }
    }

    fn idle(&self) -> Option<Duration> {
        (self.idle_ns > 0).then(|| Duration::from_nanos(self.idle_ns))
    }

    /// A side has finished: its EOF was read, or its FIN was reported with
    /// bytes still queued ahead of it (the flow toward the other side is
    /// full, so they are not read yet; once they are, EOF follows).
    fn half_closed(&self) -> bool {
        self.up.phase != FlowPhase::Open
            || self.down.phase != FlowPhase::Open
            || self.client.peer_finished()
            || self.upstream.peer_finished()
    }

    pub(crate) fn endpoint(&mut self, side: Side) -> &mut Endpoint {
        match side {
            Side::Client => self.client.endpoint(),
            Side::Upstream => self.upstream.endpoint(),
        }
    }

    /// Which directions are still open.
    pub(crate) fn stage(&self) -> &'static str {
        match (
            self.up.phase == FlowPhase::Open,
            self.down.phase == FlowPhase::Open,
        ) {
            (true, true) => "open",
            (false, true) => "client-eof",
            (true, false) => "upstream-eof",
            (false, false) => "both-eof",
        }
    }

    pub(crate) fn drive(mut self, conn: &mut Conn, ctx: &mut Ctx) -> State {
        // An error event does not end a side at once: bytes it sent before
        // its reset are still queued, and the reads below deliver them before
        // reporting the error (the syscalls say it in the right order).
        let mut active = false;
        let mut rounds = 0;
        // Splice needs a socket carrying plaintext at both ends: after an
        // upgrade inside TLS, buffers carry until the kernel runs both sides'
        // TLS (kTLS).
        let splice = self.client.splices() && self.upstream.splices();
        loop {
            // TLS records owed below the plaintext (and a close_notify's FIN).
            let tls_moved = match (self.client.progress(), self.upstream.progress()) {
                (Err(_), _) => return self.lost(Side::Client, ctx),
                (_, Err(_)) => return self.lost(Side::Upstream, ctx),
                (Ok(a), Ok(b)) => a | b,
            };
            let up = self.up.pump(
                &mut self.client,
                &mut self.upstream,
                Side::Client,
                (self.down.phase == FlowPhase::Shut, splice),
                conn,
                ctx,
            );
            let down = self.down.pump(
                &mut self.upstream,
                &mut self.client,
                Side::Upstream,
                (self.up.phase == FlowPhase::Shut, splice),
                conn,
                ctx,
            );
            // A side whose TLS went to the kernel in these reads is counted once.
            for ch in [&mut self.client, &mut self.upstream] {
                if ch.endpoint().take_offloaded() {
                    ctx.stats.tls_offloaded();
                }
            }
            let moved = match (up, down) {
                (Ok(a), Ok(b)) => tls_moved | a | b,
                (Err(Gone(side)), _) | (_, Err(Gone(side))) => return self.lost(side, ctx),
            };
            if !moved {
                break;
            }
            active = true;
            rounds += 1;
            if rounds == ROUNDS_PER_CALL {
                ctx.again();
                break;
            }
        }
        if active {
            self.last_active = ctx.now;
        }
        let owed = self.client.owes_wire() || self.upstream.owes_wire();
        if self.up.phase == FlowPhase::Shut && self.down.phase == FlowPhase::Shut && !owed {
            return State::Done(CloseReason::Done);
        }
        if !self.half_close_armed && self.half_closed() {
            // One side finished: the other must finish too, or go quiet for
            // no longer than the half-close timeout. (A FIN reported by the
            // event that woke this call counts too: hence the flag, not a
            // comparison with the state at entry.)
            self.half_close_armed = true;
            let due = self.last_active + ctx.settings.timeouts.half_close;
            conn.deadline = Some(conn.deadline.map_or(due, |d| d.min(due)));
        }
        // A side that reported an error and with which nothing more can move
        // now (its carrier toward the other side is full, nothing is owed to
        // it) is gone: waiting would hold the session for ever.
        if !active {
            if self.client.failed() {
                return self.lost(Side::Client, ctx);
            }
            if self.upstream.failed() {
                return self.lost(Side::Upstream, ctx);
            }
        }
        State::Passthrough(self)
    }

    /// One side is dead: close it at once and flush what is owed to the
    /// other, including what the dead side sent before it died and is still
    /// queued (as much as the carrier holds).
    fn lost(self, dead: Side, ctx: &mut Ctx) -> State {
        let Passthrough {
            mut client,
            mut upstream,
            up,
            down,
            ..
        } = self;
        let (mut owed, stranded, dead_ep, survivor) = match dead {
            Side::Client => (up, down.buf, &mut client, upstream),
            Side::Upstream => (down, up.buf, &mut upstream, client),
        };
        if owed.phase == FlowPhase::Open {
            let carrier = owed
                .buf
                .get_or_insert_with(|| Carrier::Buf(ctx.pool.take()));
            while matches!(carrier.fill_from(dead_ep), Fill::Moved) {}
        }
        if let Some(Carrier::Buf(buf)) = stranded {
            ctx.pool.give(buf);
        }
        // The dead side aborted: the survivor gets what is owed, then a reset,
        // as it would have from the dead end directly (a FIN would make a
        // stream cut short, with bytes left unread, look complete). The dead
        // side's socket closes as this scope ends.
        // Toward the client, the proxy's reply may still lead what is owed.
        let own = owed.own as usize;
        State::Closing(Closing::abort(
            survivor,
            dead.other(),
            owed.buf,
            dead.gone_reason(),
            own,
            ctx,
        ))
    }

    pub(crate) fn on_timer(self, conn: &mut Conn, ctx: &mut Ctx) -> State {
        let Some(idle) = self.idle_timeout(ctx.settings.timeouts.half_close) else {
            return State::Passthrough(self);
        };
        let due = self.last_active + idle;
        if ctx.now >= due {
            return State::Done(if self.half_closed() {
                CloseReason::HalfCloseTimeout
            } else {
                CloseReason::IdleTimeout
            });
        }
        // Traffic moved since the deadline was set: sleep until the new one.
        conn.deadline = Some(due);
        State::Passthrough(self)
    }
}

impl Flow {
    /// Moves bytes from `src` to `dst`: at most one read and one write.
    /// Returns whether anything happened.
    /// `(last, splice)`: the other direction is finished already; pipes may
    /// carry this flow (both ends are plain sockets).
    fn pump(
        &mut self,
        src: &mut Channel,
        dst: &mut Channel,
        src_side: Side,
        (last, splice): (bool, bool),
        conn: &mut Conn,
        ctx: &mut Ctx,
    ) -> Result<bool, Gone> {
        let mut moved = false;
        let full = self.buf.as_ref().is_some_and(Carrier::is_full);
        src.want_read(self.phase == FlowPhase::Open && !full);
        if src.can_read() {
            let carrier = self
                .buf
                .get_or_insert_with(|| Carrier::Buf(ctx.pool.take()));
            match carrier.fill_from(src) {
                Fill::Moved => {
                    moved = true;
                    // A flow that fills its carrier is bulk: worth a pipe.
                    self.bulk |= carrier.is_full();
                }
                Fill::Full => self.bulk = true,
                Fill::Dry => {}
                Fill::Eof => {
                    self.phase = FlowPhase::Draining;
                    moved = true;
                }
                Fill::Gone => return Err(Gone(src_side)),
            }
        }
        let pending = self.buf.as_ref().is_some_and(|c| !c.is_empty());
        dst.want_write(pending);
        if let Some(carrier) = self.buf.as_mut().filter(|_| dst.can_write()) {
            match carrier.drain_to(dst) {
                Io::Progress(written) => {
                    let ours = written.min(self.own as usize);
                    // No more than `own`, so it fits.
                    self.own -= ours as u32;
                    conn.count(src_side, written - ours, ctx);
                    moved = true;
                }
                Io::WouldBlock => {}
                Io::Eof | Io::PeerGone(_) => return Err(Gone(src_side.other())),
            }
        }
        if self.buf.as_ref().is_none_or(Carrier::is_empty) {
            self.recycle(splice, ctx);
            if self.phase == FlowPhase::Draining {
                // When the other way is finished already, the session ends
                // now and closing the socket sends the FIN (its receive
                // queue is empty: its peer's EOF was read), so no `shutdown`.
                // TLS still owes its close_notify.
                if !last || !dst.is_plain() {
                    dst.shutdown_write();
                }
                self.phase = FlowPhase::Shut;
                moved = true;
            }
        }
        Ok(moved)
    }

    /// An empty flow gives its buffer back to the pool (an idle tunnel holds
    /// none), unless it is bulk and can move to a pipe instead; a pipe is
    /// kept for the flow's life, since making one costs syscalls.
    #[cfg_attr(not(target_os = "linux"), allow(unused_variables))]
    fn recycle(&mut self, splice: bool, ctx: &mut Ctx) {
        match self.buf.take() {
            Some(Carrier::Buf(buf)) => {
                ctx.pool.give(buf);
                #[cfg(target_os = "linux")]
                if self.bulk && splice && self.phase == FlowPhase::Open {
                    self.buf = ctx.pipes.take().map(|p| Carrier::Pipe(Box::new(p)));
                }
            }
            #[cfg(target_os = "linux")]
            Some(pipe @ Carrier::Pipe(_)) if self.phase == FlowPhase::Open => self.buf = Some(pipe),
            _ => {}
        }
    }
}
