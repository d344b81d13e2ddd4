//! Established: raw passthrough in both directions.
//!
//! Each direction is a [`Flow`] with at most one bounded buffer. A side is
//! read only while its flow's buffer has room, written only while bytes are
//! pending; reads and writes alternate until WouldBlock, so one call moves as
//! much as the sockets allow. There is no cumulative limit of any kind. EOF
//! from one side is flushed and then becomes `shutdown(Write)` on the other;
//! the tunnel is done when both directions are.

use std::time::{Duration, Instant};

use super::carrier::{Carrier, Fill};
use super::closing::Closing;
use super::endpoint::{Endpoint, Side};
use super::state::State;
use super::Conn;
use crate::buffer::ByteBuf;
use crate::io::Io;
use crate::reactor::Core;
use crate::stats::CloseReason;

/// Read/write rounds per call before yielding to other sessions, so one fat
/// tunnel cannot starve the rest (the session is driven again next iteration).
const ROUNDS_PER_CALL: usize = 32;

pub(crate) struct Tunnel {
    /// Client to upstream.
    up: Flow,
    /// Upstream to client.
    down: Flow,
    idle: Option<Duration>,
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
    /// Has filled its buffer at least once.
    bulk: bool,
    phase: FlowPhase,
    /// Leading buffered bytes that are the proxy's own (its success reply),
    /// not payload: written like payload, never counted as relayed.
    own: usize,
}

/// A side died while relaying.
struct Gone(Side);

impl Tunnel {
    /// `to_client` (the proxy's success reply) and `to_upstream` (bytes the
    /// client pipelined behind its request) are the first bytes each way.
    pub(crate) fn new(
        to_client: &[u8],
        to_upstream: &[u8],
        idle: Option<Duration>,
        core: &mut Core,
    ) -> Tunnel {
        let mut preload = |bytes: &[u8]| {
            (!bytes.is_empty()).then(|| {
                let mut buf = core.pool.take_at_least(bytes.len());
                buf.extend(bytes);
                Carrier::Buf(buf)
            })
        };
        Tunnel {
            up: Flow {
                buf: preload(to_upstream),
                phase: FlowPhase::Open,
                own: 0,
                bulk: false,
            },
            down: Flow {
                buf: preload(to_client),
                phase: FlowPhase::Open,
                own: to_client.len(),
                bulk: false,
            },
            idle,
            last_active: core.now,
        }
    }

    /// Raw passthrough after an upgrade: whatever was buffered either way is
    /// sent first, then bytes flow untouched. `eof`: whether (client,
    /// upstream) already sent EOF.
    pub(crate) fn resume(
        to_upstream: Option<ByteBuf>,
        to_client: Option<ByteBuf>,
        eof: (bool, bool),
        idle: Option<Duration>,
        core: &Core,
    ) -> Tunnel {
        let flow = |buf: Option<ByteBuf>, eof| Flow {
            buf: buf.map(Carrier::Buf),
            bulk: false,
            phase: if eof {
                FlowPhase::Draining
            } else {
                FlowPhase::Open
            },
            own: 0,
        };
        Tunnel {
            up: flow(to_upstream, eof.0),
            down: flow(to_client, eof.1),
            idle,
            last_active: core.now,
        }
    }

    pub(crate) fn idle_timeout(&self) -> Option<Duration> {
        self.idle
    }

    pub(crate) fn drive(mut self, conn: &mut Conn, core: &mut Core) -> State {
        let Conn {
            client,
            upstream,
            log,
            key,
            ..
        } = conn;
        let Some(upstream) = upstream.as_mut() else {
            return self.lost(Side::Upstream, conn, core);
        };
        // An error event does not end a side at once: bytes it sent before
        // its reset are still queued, and the reads below deliver them before
        // reporting the error (the syscalls say it in the right order).
        let mut active = false;
        let mut rounds = 0;
        loop {
            let moved = match (
                self.up
                    .pump(client, upstream, Side::Client, core, &mut log.up),
                self.down
                    .pump(upstream, client, Side::Upstream, core, &mut log.down),
            ) {
                (Ok(a), Ok(b)) => a | b,
                (Err(Gone(side)), _) | (_, Err(Gone(side))) => return self.lost(side, conn, core),
            };
            if !moved {
                break;
            }
            active = true;
            rounds += 1;
            if rounds == ROUNDS_PER_CALL {
                core.requeue.push(*key);
                break;
            }
        }
        if active {
            self.last_active = core.now;
        }
        if self.up.phase == FlowPhase::Shut && self.down.phase == FlowPhase::Shut {
            return State::Done(CloseReason::Done);
        }
        // A side that reported an error and with which nothing more can move
        // now (its buffer toward the other side is full, nothing is owed to
        // it) is gone: waiting would hold the session for ever.
        if !active {
            if client.failed {
                return self.lost(Side::Client, conn, core);
            }
            if upstream.failed {
                return self.lost(Side::Upstream, conn, core);
            }
        }
        State::Established(self)
    }

    /// One side is dead: drop it at once and flush what is owed to the other,
    /// including what the dead side sent before it died and is still queued
    /// (as much as the buffer holds).
    fn lost(self, dead: Side, conn: &mut Conn, core: &mut Core) -> State {
        let (mut owed, stranded) = match dead {
            Side::Client => (self.up, self.down.buf),
            Side::Upstream => (self.down, self.up.buf),
        };
        if let Some(ep) = conn.side(dead) {
            if owed.phase == FlowPhase::Open {
                let carrier = owed
                    .buf
                    .get_or_insert_with(|| Carrier::Buf(core.pool.take()));
                while matches!(carrier.fill(&mut ep.stream), Fill::Moved) {}
            }
        }
        let owed = owed.buf;
        if let Some(Carrier::Buf(buf)) = stranded {
            core.pool.give(buf);
        }
        conn.drop_side(dead, core);
        // The dead side aborted: the survivor gets what is owed, then a reset,
        // as it would have from the dead end directly (a FIN would make a
        // stream cut short, with bytes left unread, look complete).
        State::Closing(Closing::abort(dead.other(), owed, dead.gone_reason()))
    }

    pub(crate) fn on_timer(self, conn: &mut Conn, core: &mut Core) -> State {
        let Some(idle) = self.idle else {
            return State::Established(self);
        };
        let due = self.last_active + idle;
        if core.now >= due {
            return State::Done(CloseReason::IdleTimeout);
        }
        // Traffic moved since the timer was set: sleep until the new deadline.
        conn.arm(core, due - core.now);
        State::Established(self)
    }
}

impl Flow {
    /// Moves bytes from `src` to `dst`: at most one read and one write.
    /// Returns whether anything happened.
    fn pump(
        &mut self,
        src: &mut Endpoint,
        dst: &mut Endpoint,
        src_side: Side,
        core: &mut Core,
        counter: &mut u64,
    ) -> Result<bool, Gone> {
        let mut moved = false;
        if self.phase == FlowPhase::Open && src.readable {
            let carrier = self
                .buf
                .get_or_insert_with(|| Carrier::Buf(core.pool.take()));
            match carrier.fill(&mut src.stream) {
                Fill::Moved => {
                    moved = true;
                    // A flow that fills its buffer is bulk: worth a pipe.
                    self.bulk |= carrier.is_full();
                }
                Fill::Full => self.bulk = true,
                Fill::Dry => src.readable = false,
                Fill::Eof => {
                    src.readable = false;
                    self.phase = FlowPhase::Draining;
                    moved = true;
                }
                Fill::Gone => return Err(Gone(src_side)),
            }
        }
        if let Some(carrier) = self.buf.as_mut().filter(|c| !c.is_empty()) {
            if dst.writable {
                match carrier.drain(&mut dst.stream) {
                    Io::Progress(written) => {
                        let ours = written.min(self.own);
                        self.own -= ours;
                        let n = written - ours;
                        *counter += n as u64;
                        match src_side {
                            Side::Client => core.stats().bytes_up(n),
                            Side::Upstream => core.stats().bytes_down(n),
                        }
                        moved = true;
                    }
                    Io::WouldBlock => dst.writable = false,
                    Io::Eof | Io::PeerGone(_) => return Err(Gone(src_side.other())),
                }
            }
        }
        if self.buf.as_ref().is_none_or(Carrier::is_empty) {
            self.recycle(core);
            if self.phase == FlowPhase::Draining {
                dst.stream.shutdown_write();
                self.phase = FlowPhase::Shut;
                moved = true;
            }
        }
        Ok(moved)
    }

    /// An empty flow gives its buffer back to the pool (an idle tunnel holds
    /// none), unless it is bulk and can move to a pipe instead; a pipe is
    /// kept for the flow's life, since making one costs syscalls.
    fn recycle(&mut self, core: &mut Core) {
        match self.buf.take() {
            Some(Carrier::Buf(buf)) => {
                core.pool.give(buf);
                #[cfg(target_os = "linux")]
                if self.bulk && self.phase == FlowPhase::Open {
                    self.buf = core.pipes.take().map(Carrier::Pipe);
                }
            }
            #[cfg(target_os = "linux")]
            Some(pipe @ Carrier::Pipe(_)) if self.phase == FlowPhase::Open => self.buf = Some(pipe),
            _ => {}
        }
    }
}
