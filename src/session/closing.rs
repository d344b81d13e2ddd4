//! Closing, the shell: it owns the survivor's socket (the other side is
//! already closed) and lends it to [`ClosingCore`], which flushes what is
//! owed, then FINs and lingers, or resets. Always bounded by the close
//! deadline the core keeps from its start (`timeouts.close`).

use std::time::Instant;

use super::channel::Channel;
use super::conn::Conn;
use super::ctx::Ctx;
use super::endpoint::Endpoint;
use super::passthrough::Carrier;
use super::state::State;
use crate::core::clock::Deadline;
use crate::core::closing::{ClosingCore, Next};
use crate::lifecycle::{CloseReason, Side};

pub(crate) struct Closing {
    survivor: Channel,
    /// Which side the survivor is.
    side: Side,
    core: ClosingCore<Carrier>,
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
    State::Closing(Closing {
        survivor: Channel::plain(client),
        side: Side::Client,
        core: ClosingCore::graceful(Some(Carrier::Buf(buf)), reason, bytes.len(), deadline(ctx)),
    })
}

/// A close starting now ends by this.
fn deadline(ctx: &Ctx) -> Deadline {
    Deadline::after(ctx.now, ctx.settings.timeouts.close)
}

impl Closing {
    /// The other side aborted (a reset, a dead process): flush what is owed
    /// to `survivor`, then reset it too, so a cut-off stream cannot pass for
    /// a complete one. `own`: leading bytes of `owed` that are the proxy's
    /// own, not relayed payload.
    pub(crate) fn abort(
        survivor: Channel,
        side: Side,
        owed: Option<Carrier>,
        reason: CloseReason,
        own: usize,
        ctx: &Ctx,
    ) -> Closing {
        Closing {
            survivor,
            side,
            core: ClosingCore::abort(owed, reason, own, deadline(ctx)),
        }
    }

    /// When the close is abandoned.
    pub(crate) fn poll_timeout(&self) -> Instant {
        self.core.poll_timeout()
    }

    pub(crate) fn stage(&self) -> &'static str {
        self.core.stage()
    }

    /// The survivor's socket, if it is `side`'s.
    pub(crate) fn endpoint(&mut self, side: Side) -> Option<&mut Endpoint> {
        (side == self.side).then(|| self.survivor.endpoint())
    }

    pub(crate) fn drive(mut self, conn: &mut Conn, ctx: &mut Ctx) -> State {
        let core = &mut self.core;
        let next = self.survivor.with(|link, ep| core.pump(link, ep));
        conn.count(self.side.other(), self.core.take_relayed(), ctx);
        if let Some(Carrier::Buf(buf)) = self.core.take_spent::<Endpoint>() {
            ctx.pool.give(buf);
        }
        match next {
            Next::Wait => State::Closing(self),
            Next::Again => {
                ctx.again();
                State::Closing(self)
            }
            Next::Close { reason, abort } => {
                if abort {
                    self.survivor.abort_on_close();
                }
                State::Done(reason)
            }
        }
    }

    /// The session's timer fired: past the deadline, whatever is left is
    /// abandoned (the survivor reset when bytes were still owed to it).
    pub(crate) fn on_timeout(mut self, ctx: &Ctx) -> State {
        let core = &mut self.core;
        let now = ctx.now;
        let closed = self
            .survivor
            .with(|link, ep| core.handle_timeout(now, link, ep));
        let Some(closed) = closed else {
            return State::Closing(self);
        };
        if closed.abort {
            self.survivor.abort_on_close();
        }
        State::Done(closed.reason)
    }
}
