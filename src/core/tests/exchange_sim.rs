//! The exchange's tests run through the core's own pump
//! ([`InspectCore::pump`], the one production runs): a client and an
//! upstream on in-memory transports deliver their bytes in pieces (cut where
//! a [`Plan`] says), an upstream answers only once it has received what a
//! [`Reply`] waits for, and each peer takes a limited number of bytes per
//! round. The core checks every exchange action against the pump's
//! contract (debug assertions); the simulator checks the exchange's bounds
//! after every round.

pub(super) use super::exchange_runs::*;
use crate::buffer::BufPool;
use crate::config::Timeouts;
use crate::core::inspect::{InspectCore, Parts, Setup, Stop};
use crate::core::link::Link;
use crate::core::mem::MemPort;
use crate::protocol::http1::exchange::{
    Queued, MAX_ANSWER_BYTES, MAX_ANSWER_LEN, MAX_DUE, MAX_RECORDS,
};
use crate::protocol::http1::{End, Exchange, ExchangeConfig, Record};
use crate::target::Target;
use std::time::Instant;

/// When the upstream sends a reply.
#[derive(Debug, Clone)]
pub(super) enum Gate {
    /// Once it has received this many bytes.
    Bytes(usize),
    /// Once what it received contains this text.
    Seen(String),
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

/// The core and its peers.
pub(super) struct Sim {
    core: Option<InspectCore>,
    limits: Limits,
    plan: Plan,
    now: Instant,
    client: Vec<u8>,
    client_eof: bool,
    client_pos: usize,
    /// The upstream's replies as one stream; each reply's start and gate.
    upstream: Vec<u8>,
    replies: Vec<(usize, Reply)>,
    upstream_pos: usize,
    /// The client's transport and the upstream's.
    cport: MemPort,
    uport: MemPort,
    /// What the client received.
    pub(super) to_client: Vec<u8>,
    /// What the upstream received.
    pub(super) to_upstream: Vec<u8>,
    pub(super) records: Vec<Record>,
    pub(super) end: Option<Ending>,
    /// The most the machine held at any point.
    pub(super) peak: Queued,
    /// The client's bytes not yet handed on at a switch.
    pub(super) left: Vec<u8>,
    /// Records the exchange dropped, as it said when it stopped.
    dropped: u64,
}

impl Sim {
    /// How far into its stream the client got to send (what the core read).
    pub(super) fn client_sent(&self) -> usize {
        self.cport.read_total
    }

    pub(super) fn new(config: ExchangeConfig, script: Script, plan: Plan, limits: Limits) -> Sim {
        let mut upstream = Vec::new();
        let mut replies = Vec::new();
        for r in script.upstream {
            replies.push((upstream.len(), r.clone()));
            upstream.extend_from_slice(&r.bytes);
        }
        // The core's four queues are one size.
        assert!(
            limits.cin == limits.uout && limits.uin == limits.cout && limits.cin == limits.cout
        );
        let now = Instant::now();
        let setup = Setup {
            id: 0,
            exchange: config,
            timeouts: Timeouts::default(),
            idle: None,
            buffer: limits.cin,
        };
        let mut pool = BufPool::new(limits.cin, 0);
        let core = InspectCore::new(setup, Link::Plain, Link::Plain, &[], &[], &mut pool, now);
        Sim {
            core: Some(core),
            limits,
            plan,
            now,
            client: script.client,
            client_eof: script.client_eof,
            client_pos: 0,
            upstream,
            replies,
            upstream_pos: 0,
            cport: MemPort::default(),
            uport: MemPort::default(),
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
            dropped: 0,
        }
    }

    /// Records the exchange dropped for want of taking (while it runs, or
    /// when it stopped).
    pub(super) fn records_dropped(&mut self) -> u64 {
        match &mut self.core {
            Some(core) => core.exchange_mut().records_dropped(),
            None => self.dropped,
        }
    }

    /// The exchange inside the core (while it runs).
    pub(super) fn ex(&mut self) -> &mut Exchange {
        self.core
            .as_mut()
            .expect("the core has stopped")
            .exchange_mut()
    }

    /// Fires the head timer as the head clock does (while the core runs).
    pub(super) fn head_timeout(&mut self) -> bool {
        self.core
            .as_mut()
            .expect("the core has stopped")
            .head_timeout()
    }

    /// Runs until the core stops or nothing more moves.
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

    /// Gives the core's client output queue another capacity.
    pub(super) fn resize_cout(&mut self, cap: usize) {
        self.core.as_mut().expect("running").resize_cout(cap);
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

    /// One round: the client sends its next piece (or its EOF) and the
    /// core pumps, then the upstream sends what its gates allow and the core
    /// pumps again; each peer reads so much per round. False when nothing
    /// moved.
    fn round(&mut self) -> bool {
        self.cport.room = self.limits.client_reads;
        self.uport.room = self.limits.upstream_reads;
        let mut moved = false;
        // A piece at most a queue long (what a socket's receive buffer
        // holds), once the core has read the last one (so the core sees
        // the pieces apart).
        if self.cport.inbox.is_empty() {
            let limit = next_cut(&self.plan.client_cuts, self.client_pos, self.client.len())
                .min(self.client_pos + self.limits.cin);
            if limit > self.client_pos {
                self.cport.deliver(&self.client[self.client_pos..limit]);
                self.client_pos = limit;
                moved = true;
            }
        }
        if self.client_eof && self.client_pos == self.client.len() && !self.cport.fin {
            self.cport.fin = true;
            moved = true;
        }
        moved |= self.pump();
        if self.end.is_some() {
            return true;
        }
        if self.uport.inbox.is_empty() {
            let (avail, eof) = self.upstream_available();
            let limit = next_cut(&self.plan.upstream_cuts, self.upstream_pos, avail)
                .min(self.upstream_pos + self.limits.uin);
            if limit > self.upstream_pos {
                self.uport.deliver(&self.upstream[self.upstream_pos..limit]);
                self.upstream_pos = limit;
                moved = true;
            }
            if eof && self.upstream_pos == avail && !self.uport.fin {
                self.uport.fin = true;
                moved = true;
            }
        }
        moved |= self.pump();
        moved || self.end.is_some()
    }

    /// One call of the core's pump; the peers take what it wrote. Whether
    /// anything moved.
    fn pump(&mut self) -> bool {
        let core = self.core.as_mut().expect("running");
        let read_before = self.cport.read_total + self.uport.read_total;
        let result = core.pump(self.now, &mut self.cport, &mut self.uport);
        let mut moved = self.cport.read_total + self.uport.read_total > read_before;
        moved |= core.yielded();
        self.records.extend(core.take_records());
        let q = core.exchange_mut().queued();
        self.check_bounds(q);
        let (c, u) = (self.cport.take(), self.uport.take());
        moved |= !c.is_empty() || !u.is_empty();
        self.to_client.extend_from_slice(&c);
        self.to_upstream.extend_from_slice(&u);
        if let Err(stop) = result {
            self.stopped(stop);
        }
        moved
    }

    fn check_bounds(&mut self, q: Queued) {
        assert!(q.exchanges <= MAX_DUE, "{q:?}");
        assert!(q.answer_bytes <= MAX_ANSWER_BYTES + MAX_ANSWER_LEN, "{q:?}");
        assert!(q.records <= MAX_RECORDS, "{q:?}");
        self.peak.exchanges = self.peak.exchanges.max(q.exchanges);
        self.peak.answer_bytes = self.peak.answer_bytes.max(q.answer_bytes);
        self.peak.records = self.peak.records.max(q.records);
    }

    /// The core stopped: what the shell would do with its parts.
    fn stopped(&mut self, stop: Stop) {
        let mut core = self.core.take().expect("running");
        self.dropped = core.exchange_mut().records_dropped();
        let parts = core.into_parts();
        let Parts {
            cin,
            uout,
            uin,
            cout,
            ..
        } = parts;
        let unread_client: Vec<u8> = self.cport.inbox.drain(..).collect();
        let unread_upstream: Vec<u8> = self.uport.inbox.drain(..).collect();
        self.end = Some(match stop {
            // What the client is owed (the answer included) reaches it; what
            // was on its way up may still get there: flushed, so that runs
            // with slow upstream readers compare equal.
            Stop::Closed { end, .. } => {
                self.to_client.extend_from_slice(cout.data());
                self.to_upstream.extend_from_slice(uout.data());
                Ending::Closed(end)
            }
            // Raw both ways: the queues, then the rest of both peers' bytes.
            Stop::Upgraded => {
                for q in [
                    cout.data(),
                    uin.data(),
                    &unread_upstream,
                    &self.upstream[self.upstream_pos..],
                ] {
                    self.to_client.extend_from_slice(q);
                }
                for q in [
                    uout.data(),
                    cin.data(),
                    &unread_client,
                    &self.client[self.client_pos..],
                ] {
                    self.to_upstream.extend_from_slice(q);
                }
                Ending::Upgraded
            }
            Stop::Switch(target, _) => {
                self.left = [cin.data(), &unread_client].concat();
                Ending::Switch(target)
            }
            other => panic!("a plaintext exchange stopped with {other:?}"),
        });
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

/// A plain tunnel whose client sends one `GET /a`, the upstream silent
/// until the test says otherwise.
pub(super) fn one_get() -> Sim {
    Sim::new(
        tunnel(),
        Script::new(get("/a"), vec![]),
        Plan::default(),
        Limits::roomy(),
    )
}
