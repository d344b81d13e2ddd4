//! Closing: flush what is owed to the surviving side (a refusal, a SOCKS
//! reply, the tail of a tunnel), send FIN, optionally linger, then end.
//! Always bounded by the close timer.

use super::carrier::Carrier;
use super::endpoint::Side;
use super::refusal::{Dialect, Refusal};
use super::state::State;
use super::Conn;
use crate::io::Io;
use crate::reactor::Core;
use crate::stats::CloseReason;

/// Reads per call while lingering, before yielding to other sessions.
const LINGER_READS_PER_CALL: usize = 16;

pub(crate) struct Closing {
    survivor: Side,
    owed: Option<Carrier>,
    stage: Stage,
    reason: CloseReason,
    /// What is owed is relayed payload (counted in the byte stats), not the
    /// proxy's own answer.
    payload: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Writing what is owed, then a FIN and a linger.
    Flush,
    /// Writing what is owed, then a reset: the other end aborted, and a FIN
    /// would make a cut-off stream look complete.
    FlushThenAbort,
    /// FIN sent; reading and discarding until the peer's EOF, so that closing
    /// does not reset the connection before the peer has read our answer.
    Linger,
}

/// Refuses the session: the client gets `refusal`'s answer in its dialect.
pub(crate) fn refuse(
    refusal: Refusal,
    dialect: Dialect,
    conn: &mut Conn,
    core: &mut Core,
) -> State {
    let why = refusal.describe();
    answer(
        &refusal.answer(dialect),
        refusal.close_reason(),
        why,
        conn,
        core,
    )
}

/// Sends `bytes` to the client and closes for `reason`; `why` goes in the access line.
pub(crate) fn answer(
    bytes: &[u8],
    reason: CloseReason,
    why: String,
    conn: &mut Conn,
    core: &mut Core,
) -> State {
    conn.log.error = Some(why);
    conn.drop_side(Side::Upstream, core);
    if bytes.is_empty() {
        return State::Done(reason);
    }
    let mut buf = core.pool.take_at_least(bytes.len());
    buf.extend(bytes);
    let mut closing = Closing::to_client(Some(Carrier::Buf(buf)), reason);
    closing.payload = false;
    State::Closing(closing)
}

impl Closing {
    /// The other side aborted (a reset, a dead process): flush what is owed
    /// to `survivor`, then reset it too, so a cut-off stream cannot pass for
    /// a complete one.
    pub(crate) fn abort(survivor: Side, owed: Option<Carrier>, reason: CloseReason) -> Closing {
        Closing {
            survivor,
            owed,
            stage: Stage::FlushThenAbort,
            reason,
            payload: true,
        }
    }

    /// Flush what is owed to the client, send FIN, then linger until its EOF
    /// (or the close timer), so our last bytes are read, not reset away.
    pub(crate) fn to_client(owed: Option<Carrier>, reason: CloseReason) -> Closing {
        Closing {
            survivor: Side::Client,
            owed,
            stage: Stage::Flush,
            reason,
            payload: true,
        }
    }

    pub(crate) fn drive(mut self, conn: &mut Conn, core: &mut Core) -> State {
        let Conn {
            key,
            client,
            upstream,
            log,
            ..
        } = conn;
        let key = *key;
        let survivor = match self.survivor {
            Side::Client => Some(client),
            Side::Upstream => upstream.as_mut(),
        };
        let Some(ep) = survivor else {
            return State::Done(self.reason);
        };
        if ep.failed {
            return State::Done(self.reason);
        }
        if let Stage::Flush | Stage::FlushThenAbort = self.stage {
            while let Some(buf) = self.owed.as_mut().filter(|b| !b.is_empty()) {
                if !ep.writable {
                    return State::Closing(self);
                }
                match buf.drain(&mut ep.stream) {
                    Io::Progress(n) if self.payload => match self.survivor {
                        Side::Client => {
                            log.down += n as u64;
                            core.stats().bytes_down(n);
                        }
                        Side::Upstream => {
                            log.up += n as u64;
                            core.stats().bytes_up(n);
                        }
                    },
                    Io::Progress(_) => {}
                    Io::WouldBlock => {
                        ep.writable = false;
                        return State::Closing(self);
                    }
                    Io::Eof | Io::PeerGone(_) => return State::Done(self.reason),
                }
            }
            if let Some(Carrier::Buf(buf)) = self.owed.take() {
                core.pool.give(buf);
            }
            if self.stage == Stage::FlushThenAbort {
                ep.stream.abort_on_close();
                return State::Done(self.reason);
            }
            ep.stream.shutdown_write();
            self.stage = Stage::Linger;
        }
        let mut scratch = [0u8; 4096];
        for _ in 0..LINGER_READS_PER_CALL {
            if !ep.readable {
                return State::Closing(self);
            }
            match ep.stream.read_into(&mut scratch) {
                Io::Progress(_) => {}
                Io::WouldBlock => ep.readable = false,
                Io::Eof | Io::PeerGone(_) => return State::Done(self.reason),
            }
        }
        core.requeue.push(key);
        State::Closing(self)
    }

    /// The close timer fired: whatever is left is abandoned. Input already
    /// queued is read away first: closing over unread input sends a reset,
    /// which can destroy the answer the peer has not read yet.
    pub(crate) fn on_timeout(self, conn: &mut Conn) -> State {
        if let Some(ep) = conn.side(self.survivor) {
            let mut scratch = [0u8; 4096];
            for _ in 0..LINGER_READS_PER_CALL {
                if !matches!(ep.stream.read_into(&mut scratch), Io::Progress(_)) {
                    break;
                }
            }
        }
        let unflushed = self.owed.as_ref().is_some_and(|b| !b.is_empty());
        State::Done(if unflushed {
            CloseReason::CloseTimeout
        } else {
            self.reason
        })
    }
}
