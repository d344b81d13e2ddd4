//! Closing: flush what is owed to the surviving side (a refusal, a SOCKS
//! reply, the tail of a tunnel), then either FIN and linger, or reset.
//! Always bounded by the close timer. Closing owns the survivor's socket;
//! the other side is already closed.

use super::channel::Channel;
use super::conn::Conn;
use super::ctx::Ctx;
use super::endpoint::Endpoint;
use super::passthrough::Carrier;
use super::refusal::{Dialect, Refusal};
use super::state::State;
use crate::io::Io;
use crate::lifecycle::{CloseReason, Side};

/// Reads per call while lingering, before yielding to other sessions.
const LINGER_READS_PER_CALL: usize = 16;

pub(crate) struct Closing {
    survivor: Channel,
    /// Which side the survivor is.
    side: Side,
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
    client: Endpoint,
    conn: &mut Conn,
    ctx: &mut Ctx,
) -> State {
    let why = refusal.describe();
    answer(
        &refusal.answer(dialect),
        refusal.close_reason(),
        why,
        client,
        conn,
        ctx,
    )
}

/// Sends `bytes` to the client and closes for `reason`; `why` goes in the
/// access line. Any upstream was already let go by the caller.
pub(crate) fn answer(
    bytes: &[u8],
    reason: CloseReason,
    why: String,
    client: Endpoint,
    conn: &mut Conn,
    ctx: &mut Ctx,
) -> State {
    conn.log.error = Some(why.into());
    if bytes.is_empty() {
        return State::Done(reason);
    }
    let mut buf = ctx.pool.take_at_least(bytes.len());
    buf.extend(bytes);
    let mut closing = Closing::to_client(Channel::plain(client), Some(Carrier::Buf(buf)), reason);
    closing.payload = false;
    State::Closing(closing)
}

impl Closing {
    /// The other side aborted (a reset, a dead process): flush what is owed
    /// to `survivor`, then reset it too, so a cut-off stream cannot pass for
    /// a complete one.
    pub(crate) fn abort(
        survivor: Channel,
        side: Side,
        owed: Option<Carrier>,
        reason: CloseReason,
    ) -> Closing {
        Closing {
            survivor,
            side,
            owed,
            stage: Stage::FlushThenAbort,
            reason,
            payload: true,
        }
    }

    /// Flush what is owed to the client, send FIN, then linger until its EOF
    /// (or the close timer), so our last bytes are read, not reset away.
    pub(crate) fn to_client(
        client: Channel,
        owed: Option<Carrier>,
        reason: CloseReason,
    ) -> Closing {
        Closing {
            survivor: client,
            side: Side::Client,
            owed,
            stage: Stage::Flush,
            reason,
            payload: true,
        }
    }

    pub(crate) fn stage(&self) -> &'static str {
        match self.stage {
            Stage::Flush => "flush",
            Stage::FlushThenAbort => "flush-then-reset",
            Stage::Linger => "linger",
        }
    }

    /// The survivor's socket, if it is `side`'s.
    pub(crate) fn endpoint(&mut self, side: Side) -> Option<&mut Endpoint> {
        (side == self.side).then(|| self.survivor.endpoint())
    }

    fn owes(&self) -> bool {
        self.owed.as_ref().is_some_and(|b| !b.is_empty())
    }

    pub(crate) fn drive(mut self, conn: &mut Conn, ctx: &mut Ctx) -> State {
        if self.survivor.failed() {
            return State::Done(self.reason);
        }
        if self.survivor.progress().is_err() {
            return State::Done(self.reason);
        }
        if let Stage::Flush | Stage::FlushThenAbort = self.stage {
            while self.owes() {
                self.survivor.want_read(false);
                self.survivor.want_write(true);
                if !self.survivor.can_write() {
                    return State::Closing(self);
                }
                let Some(owed) = self.owed.as_mut() else {
                    break;
                };
                match owed.drain_to(&mut self.survivor) {
                    Io::Progress(n) if self.payload => conn.count(self.side.other(), n, ctx),
                    Io::Progress(_) => {}
                    Io::WouldBlock => return State::Closing(self),
                    Io::Eof | Io::PeerGone(_) => return State::Done(self.reason),
                }
            }
            if let Some(Carrier::Buf(buf)) = self.owed.take() {
                ctx.pool.give(buf);
            }
            if self.stage == Stage::FlushThenAbort {
                self.survivor.abort_on_close();
                return State::Done(self.reason);
            }
            self.survivor.shutdown_write();
            self.stage = Stage::Linger;
            // Through the transition point: the sub-stage change is logged.
            return State::Closing(self);
        }
        // A close_notify still owed goes out before the FIN (progress above).
        let owes_wire = self.survivor.owes_wire();
        self.survivor.want_read(true);
        self.survivor.want_write(owes_wire);
        let mut scratch = [0u8; 4096];
        for _ in 0..LINGER_READS_PER_CALL {
            if !self.survivor.can_read() {
                return State::Closing(self);
            }
            match self.survivor.read(&mut scratch) {
                Io::Progress(_) | Io::WouldBlock => {}
                Io::Eof | Io::PeerGone(_) => return State::Done(self.reason),
            }
        }
        ctx.again();
        State::Closing(self)
    }

    /// The close timer fired: whatever is left is abandoned. Input already
    /// queued is read away first: closing over unread input sends a reset,
    /// which can destroy the answer the peer has not read yet.
    pub(crate) fn on_timeout(mut self) -> State {
        let mut scratch = [0u8; 4096];
        for _ in 0..LINGER_READS_PER_CALL {
            if !matches!(self.survivor.read(&mut scratch), Io::Progress(_)) {
                break;
            }
        }
        State::Done(if self.owes() {
            CloseReason::CloseTimeout
        } else {
            self.reason
        })
    }
}
