//! Closing, as the core runs it: flush what is owed to the side that is
//! left (a refusal, a SOCKS reply, the tail of a tunnel), then either a FIN
//! and a linger until the peer's EOF, or a reset. The shell owns the
//! survivor's socket and arms the session's timer on the close deadline
//! this keeps (every close is bounded by it); this decides what to do
//! with them.

use std::time::Instant;

use super::clock::Deadline;
use super::link::Link;
use super::port::Port;
use crate::buffer::ByteBuf;
use crate::io::Io;
use crate::lifecycle::CloseReason;

/// Reads per call while lingering, before yielding to other sessions.
const LINGER_READS_PER_CALL: usize = 16;

/// Bytes owed to the survivor: a buffer here, a kernel pipe in the shell
/// (which alone can splice, so the carrier is generic over the port).
pub(crate) trait Owed<P: Port> {
    fn is_empty(&self) -> bool;
    /// One write of what is owed to `port`, through `link`; `Progress(n)`
    /// says how many bytes left.
    fn drain_to(&mut self, link: &mut Link, port: &mut P) -> Io;
}

impl<P: Port> Owed<P> for ByteBuf {
    fn is_empty(&self) -> bool {
        ByteBuf::is_empty(self)
    }

    fn drain_to(&mut self, link: &mut Link, port: &mut P) -> Io {
        let io = link.write(port, self.data());
        if let Io::Progress(n) = io {
            self.consume(n);
        }
        io
    }
}

/// What the survivor hears last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Writing what is owed, then a FIN and a linger.
    Flush,
    /// Writing what is owed, then a reset: the other end aborted, and a FIN
    /// would make a cut-off stream look complete.
    FlushThenAbort,
    /// FIN sent; reading and discarding until the peer's EOF, so that
    /// closing does not reset the connection before the peer has read our
    /// answer.
    Linger,
}

/// What a call left the shell to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Wait for the survivor's readiness (or the close timer).
    Wait,
    /// This call's share is spent with work left: run again next iteration.
    Again,
    /// Close the survivor's socket, abortively (a reset) when `abort`.
    Close { reason: CloseReason, abort: bool },
}

/// How the close timer closes the survivor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimedOut {
    pub(crate) reason: CloseReason,
    /// Abortively (a reset): bytes were still owed.
    pub(crate) abort: bool,
}

/// Flushing what is owed to the survivor, then closing it.
pub(crate) struct ClosingCore<O> {
    owed: Option<O>,
    stage: Stage,
    reason: CloseReason,
    /// Leading bytes of what is owed that are the proxy's own (its reply or
    /// answer), not relayed payload: the byte stats do not count them.
    own: usize,
    /// Payload written since the shell last asked.
    relayed: usize,
    /// Whatever is left then is abandoned.
    deadline: Deadline,
    /// The peer's EOF was read already: an EOF raises no new readiness,
    /// and once the FIN is out there is nothing left to linger for.
    eof_read: bool,
}

impl<O> ClosingCore<O> {
    /// Flush `owed`, send FIN, then linger until the peer's EOF, so our
    /// last bytes are read, not reset away. `own`: how many leading bytes
    /// of `owed` are the proxy's own, not relayed payload. All of it
    /// within `deadline`.
    pub(crate) fn graceful(
        owed: Option<O>,
        reason: CloseReason,
        own: usize,
        deadline: Deadline,
    ) -> Self {
        Self::new(owed, reason, own, Stage::Flush, deadline)
    }

    /// The other side aborted (a reset, a dead process): flush `owed`,
    /// then reset the survivor too, so a cut-off stream cannot pass for a
    /// complete one. All of it within `deadline`.
    pub(crate) fn abort(
        owed: Option<O>,
        reason: CloseReason,
        own: usize,
        deadline: Deadline,
    ) -> Self {
        Self::new(owed, reason, own, Stage::FlushThenAbort, deadline)
    }

    fn new(
        owed: Option<O>,
        reason: CloseReason,
        own: usize,
        stage: Stage,
        deadline: Deadline,
    ) -> Self {
        ClosingCore {
            owed,
            stage,
            reason,
            own,
            relayed: 0,
            deadline,
            eof_read: false,
        }
    }

    /// The peer's EOF was read before the close began.
    pub(crate) fn after_eof(&mut self) {
        self.eof_read = true;
    }

    /// When the close is abandoned.
    pub(crate) fn poll_timeout(&self) -> Instant {
        self.deadline.at()
    }

    pub(crate) fn stage(&self) -> &'static str {
        match self.stage {
            Stage::Flush => "flush",
            Stage::FlushThenAbort => "flush-then-reset",
            Stage::Linger => "linger",
        }
    }

    /// Payload written since the last call (for the byte stats).
    pub(crate) fn take_relayed(&mut self) -> usize {
        std::mem::take(&mut self.relayed)
    }

    /// The owed carrier, once all of it is written (for the shell's pool).
    pub(crate) fn take_spent<P: Port>(&mut self) -> Option<O>
    where
        O: Owed<P>,
    {
        if self.owes() {
            return None;
        }
        self.owed.take()
    }

    fn owes<P: Port>(&self) -> bool
    where
        O: Owed<P>,
    {
        self.owed.as_ref().is_some_and(|o| !o.is_empty())
    }

    /// Moves what the survivor's readiness allows.
    pub(crate) fn pump<P: Port>(&mut self, link: &mut Link, port: &mut P) -> Next
    where
        O: Owed<P>,
    {
        let close = Next::Close {
            reason: self.reason,
            abort: false,
        };
        if port.failed() || link.progress(port).is_err() {
            return close;
        }
        if self.stage != Stage::Linger {
            while self.owes::<P>() {
                link.want_read(port, false);
                link.want_write(port, true);
                if !port.can_write() {
                    return Next::Wait;
                }
                let Some(owed) = self.owed.as_mut() else {
                    break;
                };
                match owed.drain_to(link, port) {
                    Io::Progress(n) => {
                        let ours = n.min(self.own);
                        self.own -= ours;
                        self.relayed += n - ours;
                    }
                    Io::WouldBlock => return Next::Wait,
                    Io::Eof | Io::PeerGone(_) => return close,
                }
            }
            if self.stage == Stage::FlushThenAbort {
                return Next::Close {
                    reason: self.reason,
                    abort: true,
                };
            }
            link.shutdown_write(port);
            self.stage = Stage::Linger;
            // The sub-stage changed: the shell logs it and calls again.
            return Next::Wait;
        }
        // A close_notify still owed goes out before the FIN (progress above).
        let owes_wire = link.owes_wire();
        if self.eof_read && !owes_wire {
            return close;
        }
        link.want_read(port, true);
        link.want_write(port, owes_wire);
        let mut scratch = [0u8; 4096];
        for _ in 0..LINGER_READS_PER_CALL {
            if !link.can_read(port) {
                return Next::Wait;
            }
            match link.read(port, &mut scratch) {
                Io::Progress(_) | Io::WouldBlock => {}
                Io::Eof | Io::PeerGone(_) => return close,
            }
        }
        Next::Again
    }

    /// The time is `now`: `None` before the deadline. Past it, whatever is
    /// left is abandoned. Input already queued is read away first: closing
    /// over unread input sends a reset, which can destroy the answer the
    /// peer has not read yet. Returns how to close: for the close timeout,
    /// abortively, when bytes were still owed (a FIN would make the
    /// cut-off stream look complete).
    pub(crate) fn handle_timeout<P: Port>(
        &mut self,
        now: Instant,
        link: &mut Link,
        port: &mut P,
    ) -> Option<TimedOut>
    where
        O: Owed<P>,
    {
        if !self.deadline.passed(now) {
            return None;
        }
        let mut scratch = [0u8; 4096];
        for _ in 0..LINGER_READS_PER_CALL {
            if !matches!(link.read(port, &mut scratch), Io::Progress(_)) {
                break;
            }
        }
        if self.owes::<P>() || self.stage == Stage::FlushThenAbort {
            return Some(TimedOut {
                reason: CloseReason::CloseTimeout,
                abort: true,
            });
        }
        Some(TimedOut {
            reason: self.reason,
            abort: false,
        })
    }
}

/// A close a core runs itself, to the client: what is owed (the proxy's
/// answer, the tail of a response) through the client's link, plaintext
/// or TLS (a close_notify goes out before the FIN).
pub(crate) struct Closer {
    core: ClosingCore<ByteBuf>,
    link: Link,
}

impl Closer {
    /// Writes `answer` (the proxy's own bytes) to the client over `link`,
    /// then a FIN and the linger (none when `eof_read`: the client's EOF
    /// was read), within `deadline`. `None`: nothing to say, close at once.
    pub(crate) fn answer(
        answer: &[u8],
        link: Link,
        reason: CloseReason,
        eof_read: bool,
        deadline: Deadline,
    ) -> Option<Box<Closer>> {
        if answer.is_empty() {
            return None;
        }
        let mut owed = ByteBuf::with_capacity(answer.len());
        owed.extend(answer);
        let mut core = ClosingCore::graceful(Some(owed), reason, answer.len(), deadline);
        if eof_read {
            core.after_eof();
        }
        Some(Box::new(Closer { core, link }))
    }

    /// What is left of a conversation: `owed` to the client over `link`
    /// (its first `own` bytes the proxy's, the rest payload), then a FIN
    /// and the linger (none when `eof_read`: the client's EOF was read),
    /// or a reset when `abort` (a response cut short must not look whole).
    pub(crate) fn rest(
        owed: ByteBuf,
        own: usize,
        link: Link,
        reason: CloseReason,
        abort: bool,
        eof_read: bool,
        deadline: Deadline,
    ) -> Box<Closer> {
        let owed = (!owed.is_empty()).then_some(owed);
        let mut core = match abort {
            true => ClosingCore::abort(owed, reason, own, deadline),
            false => ClosingCore::graceful(owed, reason, own, deadline),
        };
        if eof_read {
            core.after_eof();
        }
        Box::new(Closer { core, link })
    }

    /// Moves what the client's readiness allows.
    pub(crate) fn pump<P: Port>(&mut self, port: &mut P) -> Next {
        self.core.pump(&mut self.link, port)
    }

    /// See [`ClosingCore::handle_timeout`].
    pub(crate) fn handle_timeout<P: Port>(
        &mut self,
        now: Instant,
        port: &mut P,
    ) -> Option<TimedOut> {
        self.core.handle_timeout(now, &mut self.link, port)
    }

    pub(crate) fn poll_timeout(&self) -> Instant {
        self.core.poll_timeout()
    }

    pub(crate) fn stage(&self) -> &'static str {
        self.core.stage()
    }

    /// Payload written since the last call.
    pub(crate) fn take_relayed(&mut self) -> usize {
        self.core.take_relayed()
    }
}
