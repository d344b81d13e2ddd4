//! An in-memory pump for [`Exchange`], shaped like the session's: four
//! bounded queues, a client and an upstream that deliver their bytes in
//! pieces (cut where a [`Plan`] says, never more than a queue's room), an
//! upstream that answers only once it has received what a [`Reply`] waits
//! for, and readers that take a limited number of bytes per round. Every
//! action is checked against the contract (sizes, progress, bounds).

pub(super) use super::exchange_runs::*;
use crate::protocol::http1::exchange::{
    Queued, MAX_ANSWER_BYTES, MAX_ANSWER_LEN, MAX_DUE, MAX_RECORDS,
};
use crate::protocol::http1::{
    ClientAction, End, Exchange, ExchangeConfig, Record, Status, UpstreamAction,
};
use crate::target::Target;

/// A bounded byte queue (what a session's `ByteBuf` is).
#[derive(Debug)]
pub(super) struct Queue {
    data: Vec<u8>,
    start: usize,
    cap: usize,
}

impl Queue {
    fn new(cap: usize) -> Queue {
        Queue {
            data: Vec::new(),
            start: 0,
            cap,
        }
    }
    fn data(&self) -> &[u8] {
        &self.data[self.start..]
    }
    fn len(&self) -> usize {
        self.data.len() - self.start
    }
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn room(&self) -> usize {
        self.cap.saturating_sub(self.len())
    }
    /// Appends; a whole answer may exceed the capacity only when `grow`.
    fn push(&mut self, bytes: &[u8], grow: bool) {
        assert!(grow || bytes.len() <= self.room(), "overfilled a queue");
        self.data.extend_from_slice(bytes);
    }
    fn consume(&mut self, n: usize) {
        assert!(n <= self.len(), "consumed more than queued");
        self.start += n;
        if self.start > 4096 && self.start * 2 > self.data.len() {
            self.data.drain(..self.start);
            self.start = 0;
        }
    }
    /// Moves up to `n` bytes to `out`; returns how many.
    fn take_into(&mut self, n: usize, out: &mut Vec<u8>) -> usize {
        let n = n.min(self.len());
        out.extend_from_slice(&self.data()[..n]);
        self.consume(n);
        n
    }
}

/// When the upstream sends a reply.
#[derive(Debug, Clone)]
pub(super) enum Gate {
    /// Once it has received this many bytes.
    Bytes(usize),
    /// Once what it received contains this text.
    Seen(String),
}

/// A checked `Forward(n)` from `from` (its bytes as the machine saw them)
/// to `to`, which had `room`.
#[track_caller]
fn checked_forward(from: &mut Queue, to: &mut Queue, n: usize, room: usize) {
    let len = from.data().len();
    assert!(
        n > 0 && n <= len && n <= room,
        "Forward({n}) of {len}, room {room}"
    );
    let bytes = from.data()[..n].to_vec();
    to.push(&bytes, false);
    from.consume(n);
}

/// A checked `Send`: `consumed` bytes of `from` taken, `bytes` pushed to
/// `to`, which had `room`.
#[track_caller]
fn checked_send(from: &mut Queue, to: &mut Queue, consumed: usize, bytes: &[u8], room: usize) {
    let len = from.data().len();
    assert!(
        consumed > 0 && consumed <= len,
        "Send consumed {consumed} of {len}"
    );
    assert!(
        bytes.len() <= room,
        "Send {} bytes, room {room}",
        bytes.len()
    );
    from.consume(consumed);
    to.push(bytes, false);
}

/// Bytes the upstream sends (or its EOF), once its gate opens. Replies go
/// in order: a later one waits for the earlier ones.
#[derive(Debug, Clone)]
pub(super) struct Reply {
    gate: Gate,
    pub(super) bytes: Vec<u8>,
    eof: bool,
}

impl Reply {
    /// Sent at once.
    pub(super) fn now(bytes: impl AsRef<[u8]>) -> Reply {
        Reply::at(0, bytes)
    }
    /// Sent once `n` bytes were received.
    pub(super) fn at(n: usize, bytes: impl AsRef<[u8]>) -> Reply {
        Reply {
            gate: Gate::Bytes(n),
            bytes: bytes.as_ref().to_vec(),
            eof: false,
        }
    }
    /// Sent once `text` was received.
    pub(super) fn on(text: &str, bytes: impl AsRef<[u8]>) -> Reply {
        Reply {
            gate: Gate::Seen(text.into()),
            bytes: bytes.as_ref().to_vec(),
            eof: false,
        }
    }
    /// The upstream's EOF, once `text` was received (and earlier replies sent).
    pub(super) fn eof_on(text: &str) -> Reply {
        Reply {
            eof: true,
            ..Reply::on(text, b"")
        }
    }
    /// The upstream's EOF once earlier replies are sent.
    pub(super) fn eof() -> Reply {
        Reply {
            eof: true,
            ..Reply::now(b"")
        }
    }
}

/// What the two peers do.
#[derive(Debug, Clone, Default)]
pub(super) struct Script {
    /// Everything the client sends.
    pub(super) client: Vec<u8>,
    /// The client half-closes after sending it.
    pub(super) client_eof: bool,
    /// What the upstream sends, in order.
    pub(super) upstream: Vec<Reply>,
}

impl Script {
    pub(super) fn new(client: impl AsRef<[u8]>, upstream: Vec<Reply>) -> Script {
        Script {
            client: client.as_ref().to_vec(),
            client_eof: false,
            upstream,
        }
    }
    pub(super) fn then_eof(mut self) -> Script {
        self.client_eof = true;
        self
    }
}

/// Queue capacities and reader speeds.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    pub(super) cin: usize,
    pub(super) uout: usize,
    pub(super) uin: usize,
    pub(super) cout: usize,
    /// Bytes the client reads from `cout` per round.
    pub(super) client_reads: usize,
    /// Bytes the upstream reads from `uout` per round.
    pub(super) upstream_reads: usize,
}

impl Limits {
    /// 64 KiB queues, readers that take everything.
    pub(super) fn roomy() -> Limits {
        Limits {
            cin: 64 * 1024,
            uout: 64 * 1024,
            uin: 64 * 1024,
            cout: 64 * 1024,
            client_reads: usize::MAX,
            upstream_reads: usize::MAX,
        }
    }
    /// The smallest queues the contract allows (a head plus 1024) for
    /// [`HEAD_MAX`], and slow readers.
    pub(super) fn tight() -> Limits {
        let q = HEAD_MAX + 1024;
        Limits {
            cin: q,
            uout: q,
            uin: q,
            cout: q,
            client_reads: 7,
            upstream_reads: 5,
        }
    }
}

/// Where the peers pause while delivering (offsets into their streams).
#[derive(Debug, Clone, Default)]
pub(super) struct Plan {
    pub(super) client_cuts: Vec<usize>,
    pub(super) upstream_cuts: Vec<usize>,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Ending {
    /// Nothing more moves and the machine says Open (an idle keep-alive).
    Stalled,
    Closed(End),
    Upgraded,
    Switch(Target),
}

/// The head limit the tests use.
pub(super) const HEAD_MAX: usize = 2048;

/// The pump and its peers.
pub(super) struct Sim {
    pub(super) ex: Exchange,
    limits: Limits,
    plan: Plan,
    client: Vec<u8>,
    client_eof: bool,
    client_pos: usize,
    client_eof_given: bool,
    /// The upstream's replies as one stream; each reply's start and gate.
    upstream: Vec<u8>,
    replies: Vec<(usize, Reply)>,
    upstream_pos: usize,
    upstream_eof_given: bool,
    cin: Queue,
    uout: Queue,
    uin: Queue,
    cout: Queue,
    /// What the client received.
    pub(super) to_client: Vec<u8>,
    /// What the upstream received.
    pub(super) to_upstream: Vec<u8>,
    pub(super) records: Vec<Record>,
    pub(super) end: Option<Ending>,
    /// The most the machine held at any point.
    pub(super) peak: Queued,
    /// The bytes left in `cin` at a switch.
    pub(super) left: Vec<u8>,
}

impl Sim {
    /// How far into its stream the client got to send.
    pub(super) fn client_sent(&self) -> usize {
        self.client_pos
    }

    pub(super) fn new(config: ExchangeConfig, script: Script, plan: Plan, limits: Limits) -> Sim {
        let mut upstream = Vec::new();
        let mut replies = Vec::new();
        for r in script.upstream {
            replies.push((upstream.len(), r.clone()));
            upstream.extend_from_slice(&r.bytes);
        }
        Sim {
            ex: Exchange::new(config),
            limits,
            plan,
            client: script.client,
            client_eof: script.client_eof,
            client_pos: 0,
            client_eof_given: false,
            upstream,
            replies,
            upstream_pos: 0,
            upstream_eof_given: false,
            cin: Queue::new(limits.cin),
            uout: Queue::new(limits.uout),
            uin: Queue::new(limits.uin),
            cout: Queue::new(limits.cout),
            to_client: Vec::new(),
            to_upstream: Vec::new(),
            records: Vec::new(),
            end: None,
            peak: Queued {
                exchanges: 0,
                answer_bytes: 0,
                records: 0,
            },
            left: Vec::new(),
        }
    }

    /// Runs until the machine ends or nothing more moves.
    pub(super) fn run(&mut self) {
        while self.end.is_none() {
            if !self.round() {
                break;
            }
        }
    }

    /// Appends more client bytes (after what the script had).
    pub(super) fn client_sends(&mut self, bytes: impl AsRef<[u8]>) {
        self.client.extend_from_slice(bytes.as_ref());
    }

    /// The client half-closes once it has sent everything.
    pub(super) fn client_closes(&mut self) {
        self.client_eof = true;
    }

    /// The upstream sends more, at once (after its earlier replies).
    pub(super) fn upstream_sends(&mut self, bytes: impl AsRef<[u8]>) {
        self.replies
            .push((self.upstream.len(), Reply::now(bytes.as_ref())));
        self.upstream.extend_from_slice(bytes.as_ref());
    }

    /// The upstream closes once its earlier replies are sent.
    pub(super) fn upstream_closes(&mut self) {
        self.replies.push((self.upstream.len(), Reply::eof()));
    }

    /// What the run produced so far.
    pub(super) fn outcome(&self) -> Outcome {
        Outcome {
            to_client: self.to_client.clone(),
            to_upstream: self.to_upstream.clone(),
            end: self.end.clone().unwrap_or(Ending::Stalled),
            records: self.records.clone(),
            left: self.left.clone(),
        }
    }

    /// Gives the client output another capacity.
    pub(super) fn resize_cout(&mut self, cap: usize) {
        self.cout.cap = cap;
    }

    /// Sets how many bytes the client reads per round.
    pub(super) fn client_reads(&mut self, n: usize) {
        self.limits.client_reads = n;
    }

    /// What the upstream may have sent by now: replies whose gates opened,
    /// in order; and whether its EOF is due.
    fn upstream_available(&self) -> (usize, bool) {
        for (start, r) in &self.replies {
            let open = match &r.gate {
                Gate::Bytes(n) => self.to_upstream.len() >= *n,
                Gate::Seen(text) => contains(&self.to_upstream, text.as_bytes()),
            };
            if !open {
                return (*start, false);
            }
            if r.eof {
                return (*start, true);
            }
        }
        (self.upstream.len(), false)
    }

    /// One round of the session's loop; false when nothing moved.
    fn round(&mut self) -> bool {
        let mut moved = false;
        // The client sends, up to its next pause.
        let limit = next_cut(&self.plan.client_cuts, self.client_pos, self.client.len());
        let n = (limit - self.client_pos).min(self.cin.room());
        if n > 0 {
            let piece = &self.client[self.client_pos..self.client_pos + n];
            self.cin.push(piece, false);
            self.client_pos += n;
            moved = true;
        }
        if self.client_eof && self.client_pos == self.client.len() && !self.client_eof_given {
            self.client_eof_given = true;
            self.ex.client_eof();
            moved = true;
        }
        moved |= self.client_actions();
        if self.end.is_some() {
            return true;
        }
        moved |= self
            .uout
            .take_into(self.limits.upstream_reads, &mut self.to_upstream)
            > 0;
        // The upstream sends what its gates allow, up to its next pause.
        let (avail, eof) = self.upstream_available();
        let limit = next_cut(&self.plan.upstream_cuts, self.upstream_pos, avail);
        let n = (limit - self.upstream_pos).min(self.uin.room());
        if n > 0 {
            let piece = &self.upstream[self.upstream_pos..self.upstream_pos + n];
            self.uin.push(piece, false);
            self.upstream_pos += n;
            moved = true;
        }
        if eof && self.upstream_pos == avail && !self.upstream_eof_given {
            self.upstream_eof_given = true;
            self.ex.upstream_eof();
            moved = true;
        }
        moved |= self.upstream_actions();
        moved |= self
            .cout
            .take_into(self.limits.client_reads, &mut self.to_client)
            > 0;
        self.records.extend(self.ex.take_records());
        self.check_bounds();
        if self.end.is_none() {
            match self.ex.status() {
                Status::Open => {}
                Status::Upgraded => self.upgraded(),
                Status::Closed { answer, end } => self.closed(answer, end),
            }
        }
        moved || self.end.is_some()
    }

    fn client_actions(&mut self) -> bool {
        let mut moved = false;
        for _ in 0..100_000 {
            let input = self.cin.data();
            let (len, room) = (input.len(), self.uout.room());
            match self.ex.on_client(input, room) {
                ClientAction::Forward(n) => checked_forward(&mut self.cin, &mut self.uout, n, room),
                ClientAction::Send { consumed, bytes } => {
                    checked_send(&mut self.cin, &mut self.uout, consumed, &bytes, room)
                }
                ClientAction::Discard(n) => {
                    assert!(n > 0 && n <= len, "Discard({n}) of {len}");
                    self.cin.consume(n);
                }
                ClientAction::Switch { target, .. } => {
                    if self.uout.is_empty() && self.cout.is_empty() {
                        self.left = self.cin.data().to_vec();
                        self.end = Some(Ending::Switch(target));
                        return true;
                    }
                    return moved;
                }
                ClientAction::Wait | ClientAction::Stopped => return moved,
            }
            moved = true;
            self.check_bounds();
        }
        panic!("on_client never waits");
    }

    fn upstream_actions(&mut self) -> bool {
        let mut moved = false;
        for _ in 0..100_000 {
            let room = self.cout.room();
            match self.ex.on_upstream(self.uin.data(), room) {
                UpstreamAction::Forward(n) => {
                    checked_forward(&mut self.uin, &mut self.cout, n, room)
                }
                UpstreamAction::Send { consumed, bytes } => {
                    checked_send(&mut self.uin, &mut self.cout, consumed, &bytes, room)
                }
                UpstreamAction::Answer(bytes) => {
                    assert!(!bytes.is_empty() && bytes.len() <= room, "Answer too big");
                    assert!(bytes.len() <= MAX_ANSWER_LEN, "answer over MAX_ANSWER_LEN");
                    self.cout.push(&bytes, false);
                }
                UpstreamAction::Upgrade | UpstreamAction::Wait | UpstreamAction::Close => {
                    return moved
                }
            }
            moved = true;
            self.check_bounds();
        }
        panic!("on_upstream never waits");
    }

    fn check_bounds(&mut self) {
        let q = self.ex.queued();
        assert!(q.exchanges <= MAX_DUE, "{q:?}");
        assert!(q.answer_bytes <= MAX_ANSWER_BYTES + MAX_ANSWER_LEN, "{q:?}");
        assert!(q.records <= MAX_RECORDS, "{q:?}");
        self.peak.exchanges = self.peak.exchanges.max(q.exchanges);
        self.peak.answer_bytes = self.peak.answer_bytes.max(q.answer_bytes);
        self.peak.records = self.peak.records.max(q.records);
    }

    /// Closed: what `cout` holds, then the answer owed, reach the client.
    fn closed(&mut self, answer: Option<Vec<u8>>, end: End) {
        if let Some(a) = answer {
            self.cout.push(&a, true);
        }
        self.cout.take_into(usize::MAX, &mut self.to_client);
        // What was on its way up may still get there: flushed, so that runs
        // with slow upstream readers compare equal.
        self.uout.take_into(usize::MAX, &mut self.to_upstream);
        self.end = Some(Ending::Closed(end));
    }

    /// Upgraded: raw both ways, the queues and the rest of both peers' bytes.
    fn upgraded(&mut self) {
        assert_eq!(self.ex.on_client(self.cin.data(), 0), ClientAction::Stopped);
        for q in [&mut self.cout, &mut self.uin] {
            q.take_into(usize::MAX, &mut self.to_client);
        }
        for q in [&mut self.uout, &mut self.cin] {
            q.take_into(usize::MAX, &mut self.to_upstream);
        }
        self.to_upstream
            .extend_from_slice(&self.client[self.client_pos..]);
        self.to_client
            .extend_from_slice(&self.upstream[self.upstream_pos..]);
        self.end = Some(Ending::Upgraded);
    }
}

/// The end of the next piece from `pos`: the first cut after it, or `end`.
fn next_cut(cuts: &[usize], pos: usize, end: usize) -> usize {
    cuts.iter()
        .copied()
        .filter(|&c| c > pos)
        .min()
        .unwrap_or(end)
        .min(end)
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || hay.windows(needle.len()).any(|w| w == needle)
}
