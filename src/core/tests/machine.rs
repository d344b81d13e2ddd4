//! Whole sessions through the one session machine ([`SessionCore`]), in
//! virtual time: a client's first byte, its target established, the
//! exchange where a rule inspects, and every end the machine owns (the
//! client's close after the exchange, a refusal after the opening) or
//! hands on (a raw tunnel after a `101`). What is new over the stages'
//! own tests is the seam between them: the opening's records kept when it
//! ends, the exchange started on the bytes the opening read, the forward
//! proxy's next host established for the same user, the exchange's last
//! records and bytes accounted for when it stops.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::at;
use super::establish::{ip, World};
use crate::buffer::BufPool;
use crate::config::{ListenerProtocol, Timeouts};
use crate::core::establish::Action as Establish;
use crate::core::mem::MemPort;
use crate::core::opening::{Action, Input, Refusing};
use crate::core::port::Port;
use crate::core::route::After;
use crate::core::session::{Env, Next, SessionCore};
use crate::lifecycle::{CloseReason, Phase};
use crate::policy::secret::Secrets;
use crate::policy::{parse_cli_inspect, parse_cli_rule, Action as RuleAction, Policy};
use crate::protocol::http1::exchange::Decision;

impl Env for World {
    fn id(&self) -> u64 {
        7
    }

    fn timeouts(&self) -> Timeouts {
        Timeouts {
            close: Duration::from_secs(2),
            ..Timeouts::default()
        }
    }

    fn secrets(&self) -> Option<Arc<Secrets>> {
        None
    }

    fn inspect_buffer(&self) -> usize {
        16 * 1024 + 1024
    }
}

/// api.test and web.test inspected on port 80 (the forward proxy's
/// hosts, and an inspected tunnel), shop.test raw on 443, evil.test refused.
fn world() -> World {
    let mut world = World::new();
    world.policy = Policy::from_rules(&[
        parse_cli_rule(RuleAction::Deny, "evil.test").unwrap(),
        parse_cli_rule(RuleAction::Allow, "shop.test:443").unwrap(),
        parse_cli_inspect("api.test:80").unwrap(),
        parse_cli_inspect("web.test:80").unwrap(),
    ])
    .unwrap();
    world
}

/// One client's session: the machine, its client, the upstream last
/// dialled, the time, and what it asked for and counted.
struct Run {
    core: SessionCore,
    client: MemPort,
    upstream: Option<MemPort>,
    world: World,
    now: Instant,
    /// Every action, as text, in order.
    asked: Vec<String>,
    /// Requests recorded (by path), whether taken or handed over at the end.
    requests: Vec<(String, &'static str)>,
    /// Payload counted: (up, down).
    relayed: (usize, usize),
    /// Every label seen, in order, without repeats.
    labels: Vec<String>,
    next: Next,
    /// The trust to answer [`Action::Trust`] with.
    trust: Option<Result<Arc<rustls::ClientConfig>, String>>,
    /// The shell's buffer pool, lent for each call when there is one.
    pool: Option<BufPool>,
}

impl Run {
    fn new(world: World) -> Run {
        let core = SessionCore::accept(ListenerProtocol::Auto, None, super::deadline(10));
        let mut run = Run {
            core,
            client: MemPort::roomy(),
            upstream: None,
            world,
            now: at(0, 0),
            asked: Vec::new(),
            requests: Vec::new(),
            relayed: (0, 0),
            labels: Vec::new(),
            next: Next::Working,
            trust: None,
            pool: None,
        };
        run.note_label();
        run
    }

    fn label(&self) -> String {
        format!("{}({})", self.core.name(), self.core.stage())
    }

    fn note_label(&mut self) {
        let label = self.label();
        if self.labels.last() != Some(&label) {
            self.labels.push(label);
        }
    }

    fn working(&self) -> bool {
        matches!(self.next, Next::Working | Next::Again)
    }

    /// Pumps as the session runs its state: again while the label changes
    /// or the machine has work left, the actions carried out after each.
    fn pump(&mut self) {
        for _ in 0..200 {
            let before = self.label();
            self.lend();
            let upstream = self.upstream.as_mut();
            self.next = self
                .core
                .pump(self.now, &mut self.client, upstream, &self.world);
            self.after_call();
            let again = matches!(self.next, Next::Again);
            if !self.working() || (self.label() == before && !again) {
                return;
            }
        }
        panic!("the machine never settles: {}", self.label());
    }

    fn handle(&mut self, input: Input) {
        let before = self.label();
        self.lend();
        self.next = self.core.handle(self.now, input, &self.world);
        self.after_call();
        if self.working() && self.label() != before {
            self.pump();
        }
    }

    fn timer(&mut self, now: Instant) {
        self.now = now;
        let before = self.label();
        self.lend();
        let upstream = self.upstream.as_mut();
        self.next = self
            .core
            .handle_timeout(now, &mut self.client, upstream, &self.world);
        self.after_call();
        if self.working() && self.label() != before {
            self.pump();
        }
    }

    fn after_call(&mut self) {
        while let Some(action) = self.core.poll_action() {
            let said = match action {
                Action::Identified { spoke, user, .. } => format!("identified {spoke:?} {user:?}"),
                Action::Target(target) => format!("target {target}"),
                Action::Verify(_) => "verify".into(),
                Action::Establish(Establish::Resolve(name)) => format!("resolve {name}"),
                Action::Establish(Establish::AwaitPins) => "await pins".into(),
                Action::Establish(Establish::Admitted { rule, .. }) => format!("admitted {rule}"),
                Action::Establish(Establish::Dial(addr, _)) => {
                    let mut port = MemPort::default();
                    port.want_write(true);
                    self.upstream = Some(port);
                    format!("dial {addr}")
                }
                Action::Switched { .. } => {
                    self.upstream = None;
                    "switched".into()
                }
                Action::Note(note) => format!("note: {note}"),
                Action::Certify(name) => format!("certify {name:?}"),
                Action::Refusing(refusing) => {
                    self.upstream = None;
                    match refusing {
                        Refusing::Answered { why } => format!("answered: {why}"),
                        Refusing::Target(r) => format!("refused: {}", r.refusal.describe()),
                        Refusing::Fronting { why, .. } => format!("fronting: {why}"),
                        Refusing::Revoked(r) => format!("revoked: {}", r.refusal.describe()),
                    }
                }
                Action::Trust => {
                    let trust = self.trust.take().expect("a trust to answer with");
                    self.next = self
                        .core
                        .handle(self.now, Input::Trusted(trust), &self.world);
                    "trust".into()
                }
                Action::CloseUpstream => {
                    self.upstream = None;
                    "close upstream".into()
                }
                Action::Failed { why, .. } => format!("failed: {why}"),
                Action::Request(record) => {
                    self.note_request(&record);
                    continue;
                }
                Action::Relayed { up, down } => {
                    self.relayed.0 += up;
                    self.relayed.1 += down;
                    continue;
                }
            };
            self.asked.push(said);
        }
        let (up, down) = self.core.take_relayed();
        self.relayed.0 += up;
        self.relayed.1 += down;
        let records: Vec<_> = self.core.take_records().collect();
        for record in records {
            self.note_request(&record);
        }
        if let Some(pool) = &mut self.pool {
            self.core.park(pool);
        }
        self.note_label();
    }

    /// Lends the pool for the next call, as the shell does.
    fn lend(&mut self) {
        if let Some(pool) = &mut self.pool {
            self.core.unpark(pool);
        }
    }

    fn note_request(&mut self, record: &crate::protocol::http1::exchange::Record) {
        let kind = match record.decision {
            Decision::Allowed(_) => "allowed",
            Decision::Denied(_) => "denied",
            Decision::WouldDeny(_) => "would-deny",
            Decision::Failed { .. } => "failed",
            Decision::Refused { .. } => "refused",
        };
        self.requests
            .push((record.path.clone().unwrap_or_default(), kind));
    }

    fn send(&mut self, bytes: &[u8]) {
        self.client.deliver(bytes);
        self.pump();
    }

    /// The name resolves to `addr` and the connect completes.
    fn connect(&mut self, addr: &str) {
        let addrs: Vec<IpAddr> = vec![ip(addr)];
        self.handle(Input::Resolved(Ok(addrs)));
        self.upstream.as_mut().expect("dialled").room = usize::MAX;
        self.pump();
    }

    fn upstream(&mut self) -> &mut MemPort {
        let (asked, label) = (&self.asked, self.core.name());
        match self.upstream.as_mut() {
            Some(upstream) => upstream,
            None => panic!("no upstream in {label}: {asked:?}, {:?}", self.next),
        }
    }
}

/// An inspected CONNECT runs in one machine from its first byte: the
/// exchange starts on what the opening read (the success reply owed, the
/// request pipelined behind the CONNECT), each request is recorded, and
/// the deadline moves from the connect's to the exchange's clocks.
#[test]
fn an_inspected_tunnel_goes_from_its_first_byte_through_the_exchange() {
    let mut run = Run::new(world());
    run.send(
        b"CONNECT api.test:80 HTTP/1.1\r\nHost: api.test:80\r\n\r\n\
          GET /a HTTP/1.1\r\nHost: api.test\r\n\r\n",
    );
    assert_eq!(run.label(), "Resolving(dns)");
    run.connect("45.1.1.1");
    assert_eq!(
        run.label(),
        "Inspect(awaiting-response)",
        "{:?}",
        run.labels
    );
    assert_eq!(run.core.phase(), Phase::Established);
    assert_eq!(
        run.client.take(),
        b"HTTP/1.1 200 Connection established\r\n\r\n"
    );
    assert_eq!(
        run.upstream().take(),
        b"GET /a HTTP/1.1\r\nHost: api.test\r\n\r\n"
    );
    assert_eq!(
        run.core.poll_timeout(&run.client),
        Some(at(60, 0)),
        "the response clock"
    );
    run.upstream()
        .deliver(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi");
    run.pump();
    assert_eq!(
        run.client.take(),
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi"
    );
    assert_eq!(run.requests, [("/a".to_string(), "allowed")]);
    assert_eq!(run.label(), "Inspect(http)");
    assert_eq!(
        &run.asked[..4],
        [
            "identified Http None",
            "target api.test:80",
            "resolve api.test",
            "admitted --inspect api.test:80",
        ]
    );
    assert!(run.relayed.0 > 0 && run.relayed.1 > 0, "{:?}", run.relayed);
}

/// The forward proxy's request for another host goes back to establishing
/// it inside the machine: the old upstream closes, the new host is
/// resolved and dialled, and the request that named it goes to it.
#[test]
fn the_forward_proxys_next_host_is_established_inside_the_machine() {
    let mut run = Run::new(world());
    run.send(b"GET http://api.test/one HTTP/1.1\r\nHost: api.test\r\n\r\n");
    run.connect("45.1.1.1");
    assert_eq!(run.label(), "Inspect(awaiting-response)");
    assert!(run.upstream().take().starts_with(b"GET /one HTTP/1.1\r\n"));
    run.upstream()
        .deliver(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n1");
    run.pump();
    assert!(run.client.take().ends_with(b"\r\n\r\n1"));
    let asked = run.asked.len();

    run.send(b"GET http://web.test/two HTTP/1.1\r\nHost: web.test\r\n\r\n");
    assert_eq!(
        &run.asked[asked..],
        ["close upstream", "target web.test:80", "resolve web.test"],
    );
    assert!(run.upstream.is_none(), "the old upstream closed");
    assert_eq!(run.label(), "Resolving(dns)");
    assert_eq!(run.core.phase(), Phase::Resolving);
    run.connect("45.1.1.2");
    assert_eq!(run.label(), "Inspect(awaiting-response)");
    assert!(run.upstream().take().starts_with(b"GET /two HTTP/1.1\r\n"));
    assert_eq!(run.requests, [("/one".to_string(), "allowed")]);
    // A refused next host is the client's answer and the close, with the
    // records of the requests before it kept.
    run.upstream()
        .deliver(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n2");
    run.pump();
    run.client.take();
    run.send(b"GET http://evil.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n");
    assert!(
        run.asked
            .iter()
            .any(|a| a.starts_with("refused: denied by rule")),
        "{:?}",
        run.asked
    );
    assert!(run.client.take().starts_with(b"HTTP/1.1 403"));
    assert_eq!(run.label(), "Closing(linger)");
    assert_eq!(run.requests.len(), 2);
}

/// A `101` hands the raw tunnel to the shell with every byte the machine
/// holds: what the upstream sent behind its `101`, what the client sent
/// behind its request; the upgrade request's record is not lost with the
/// exchange.
#[test]
fn an_upgrade_leaves_the_machine_with_every_byte_read() {
    let mut run = Run::new(world());
    run.send(
        b"CONNECT api.test:80 HTTP/1.1\r\nHost: api.test:80\r\n\r\n\
          GET /ws HTTP/1.1\r\nHost: api.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
          Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\nframe-up",
    );
    run.connect("45.1.1.1");
    run.client.take();
    run.upstream().take();
    run.upstream().deliver(
        b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\nframe-down",
    );
    run.pump();
    let Next::Upgraded(parts) = std::mem::replace(&mut run.next, Next::Working) else {
        panic!("not upgraded: {:?}", run.next);
    };
    let mut to_client = run.client.take();
    to_client.extend(parts.cout.data());
    to_client.extend(parts.uin.data());
    assert!(to_client.starts_with(b"HTTP/1.1 101"));
    assert!(to_client.ends_with(b"frame-down"), "{to_client:?}");
    let mut to_upstream = run.upstream().take();
    to_upstream.extend(parts.uout.data());
    to_upstream.extend(parts.cin.data());
    assert!(to_upstream.ends_with(b"frame-up"), "{to_upstream:?}");
    assert_eq!(run.requests, [("/ws".to_string(), "allowed")]);
    assert_eq!(run.core.poll_timeout(&run.client), None, "handed on");
}

/// The exchange's end is the client's close inside the machine: an
/// upstream that resets before answering earns the client a `502`, the
/// upstream is let go at once, and the client hears the answer, then a
/// FIN, and is closed at its EOF (or reset at the close deadline).
#[test]
fn the_exchange_ends_with_the_clients_close_inside_the_machine() {
    let start = || {
        let mut run = Run::new(world());
        run.send(
            b"CONNECT api.test:80 HTTP/1.1\r\nHost: api.test:80\r\n\r\n\
              GET /x HTTP/1.1\r\nHost: api.test\r\n\r\n",
        );
        run.connect("45.1.1.1");
        run.client.take();
        run.upstream().reset = true;
        run.pump();
        run
    };
    let mut run = start();
    assert!(
        run.asked.contains(&"close upstream".to_string()),
        "{:?}",
        run.asked
    );
    assert!(run.upstream.is_none());
    assert!(run.client.take().starts_with(b"HTTP/1.1 502"));
    assert_eq!(run.label(), "Closing(linger)");
    assert_eq!(run.core.phase(), Phase::Closing);
    assert_eq!(run.requests, [("/x".to_string(), "allowed")]);
    run.client.fin = true;
    run.pump();
    assert!(
        matches!(run.next, Next::Closed(CloseReason::UpstreamGone)),
        "{:?}",
        run.next
    );

    // A client that never reads its 502 is reset at the close deadline.
    let mut run = Run::new(world());
    run.client.room = 0;
    run.send(
        b"CONNECT api.test:80 HTTP/1.1\r\nHost: api.test:80\r\n\r\n\
          GET /x HTTP/1.1\r\nHost: api.test\r\n\r\n",
    );
    run.connect("45.1.1.1");
    run.upstream().reset = true;
    run.now = at(1, 0);
    run.pump();
    assert!(run.core.closing(), "{}", run.label());
    let due = run.core.poll_timeout(&run.client).expect("bounded");
    assert_eq!(due, at(3, 0), "the close timeout from the end");
    run.timer(due);
    assert!(
        matches!(run.next, Next::Reset(CloseReason::CloseTimeout)),
        "{:?}",
        run.next
    );
}

/// A forward-proxy `https` request asks the shell for the upstream trust;
/// without one it is refused (`502`, saying why) and closed, never sent in
/// plaintext.
#[test]
fn a_forward_https_request_without_trust_is_refused() {
    let mut world = world();
    world.policy = Policy::from_rules(&[parse_cli_inspect("api.test:443").unwrap()]).unwrap();
    let mut run = Run::new(world);
    run.trust = Some(Err("TLS to the upstream: no roots".into()));
    run.send(b"GET https://api.test/ HTTP/1.1\r\nHost: api.test\r\n\r\n");
    run.connect("45.1.1.1");
    assert!(run.asked.contains(&"trust".to_string()), "{:?}", run.asked);
    assert!(
        run.asked.iter().any(|a| a.starts_with(
            "refused: could not connect to the target: TLS to the upstream: no roots"
        )),
        "{:?}",
        run.asked
    );
    let answer = run.client.take();
    assert!(answer.starts_with(b"HTTP/1.1 502"), "{answer:?}");
    assert!(run.upstream.is_none(), "let go");
    assert_eq!(run.label(), "Closing(linger)");
}

/// A raw tunnel leaves the machine as it opens, the reply owed and the
/// early bytes with it; the opening's last records come first.
#[test]
fn a_raw_tunnel_leaves_as_it_opens() {
    let mut run = Run::new(world());
    run.send(b"CONNECT shop.test:443 HTTP/1.1\r\nHost: shop.test:443\r\n\r\n\x16\x03\x01");
    run.connect("45.1.1.1");
    let Next::Relay(opened) = std::mem::replace(&mut run.next, Next::Working) else {
        panic!("not relayed: {:?}", run.next);
    };
    assert!(matches!(opened.after, After::Passthrough { .. }));
    assert_eq!(opened.request.early, b"\x16\x03\x01");
    assert_eq!(
        &run.asked[3..],
        ["admitted --allow shop.test:443", "dial 45.1.1.1:443"]
    );
    assert_eq!(run.core.poll_timeout(&run.client), None);
}

/// An opening that ends in the same call as its last records keeps them:
/// a SOCKS5 UDP ASSOCIATE says who the client is, then leaves.
#[test]
fn an_ending_opening_keeps_what_it_still_had_to_say() {
    let mut run = Run::new(world());
    run.send(b"\x05\x01\x00");
    assert_eq!(run.client.take(), b"\x05\x00");
    run.send(b"\x05\x03\x00\x01\x00\x00\x00\x00\x1f\x90");
    assert!(
        matches!(run.next, Next::Associate { port: 8080 }),
        "{:?}",
        run.next
    );
    assert_eq!(run.asked, ["identified Socks5 None"]);
}

/// The exchange takes its queues from the pool the shell lends for each
/// call, and an idle one gives them back to it: a shell with many idle
/// inspected sessions keeps the few spare buffers they share, not four
/// fresh ones for every exchange that ever began.
#[test]
fn an_exchange_takes_its_queues_from_the_shells_pool() {
    let mut pool = BufPool::new(World::new().inspect_buffer(), 256);
    let spare: Vec<_> = (0..4).map(|_| pool.take()).collect();
    spare.into_iter().for_each(|buf| pool.give(buf));
    assert_eq!(pool.spare(), 4);
    let mut run = Run::new(world());
    run.pool = Some(pool);
    run.send(b"CONNECT api.test:80 HTTP/1.1\r\nHost: api.test:80\r\n\r\n");
    run.connect("45.1.1.1");
    assert_eq!(run.label(), "Inspect(http)", "{:?}", run.asked);
    assert_eq!(
        run.client.take(),
        b"HTTP/1.1 200 Connection established\r\n\r\n"
    );
    assert_eq!(run.pool.as_ref().unwrap().spare(), 4, "idle: all parked");

    run.send(b"POST /a HTTP/1.1\r\nHost: api.test\r\nContent-Length: 4\r\n\r\nbo");
    assert!(run.upstream().take().starts_with(b"POST /a HTTP/1.1\r\n"));
    run.send(b"dy");
    assert_eq!(run.upstream().take(), b"dy");
    run.upstream()
        .deliver(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    run.pump();
    assert!(run.client.take().ends_with(b"\r\n\r\nok"));
    assert_eq!(run.requests, [("/a".to_string(), "allowed")]);
    assert_eq!(
        run.pool.as_ref().unwrap().spare(),
        4,
        "idle again: the same four"
    );
}

/// With a head limit above the buffer size, the exchange's queues are not
/// the pool's size: an idle session frees them rather than keep four for
/// as long as it is open.
#[test]
fn an_idle_exchange_holds_no_queue_whatever_its_size() {
    let mut run = Run::new(world());
    run.pool = Some(BufPool::new(4096, 256));
    run.send(b"CONNECT api.test:80 HTTP/1.1\r\nHost: api.test:80\r\n\r\n");
    run.connect("45.1.1.1");
    assert_eq!(run.label(), "Inspect(http)", "{:?}", run.asked);
    assert_eq!(run.core.held(), 0, "idle: nothing held");
    assert_eq!(run.pool.as_ref().unwrap().spare(), 0, "none pooled");

    run.send(b"GET /a HTTP/1.1\r\nHost: api.test\r\n\r\n");
    assert!(run.upstream().take().starts_with(b"GET /a HTTP/1.1\r\n"));
    run.upstream()
        .deliver(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    run.pump();
    assert!(run.client.take().ends_with(b"\r\n\r\nok"));
    assert_eq!(run.requests, [("/a".to_string(), "allowed")]);
    assert_eq!(run.core.held(), 0, "idle again");
}

/// A client that asks the forward proxy for another host and half-closes
/// behind the request is served, then closed: its EOF, read by the first
/// host's exchange, raises no new readiness, so the next host's exchange
/// is told of it rather than waiting out the idle timeout for a request
/// that cannot come.
#[test]
fn the_clients_eof_is_kept_across_the_forward_proxys_next_host() {
    // A forward request to api.test answered, from a client whose EOF
    // raises readiness once, as a socket's does.
    let served_once = || {
        let mut run = Run::new(world());
        run.client.eof_once = true;
        run.send(b"GET http://api.test/one HTTP/1.1\r\nHost: api.test\r\n\r\n");
        run.connect("45.1.1.1");
        run.upstream()
            .deliver(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n1");
        run.pump();
        assert!(run.client.take().ends_with(b"\r\n\r\n1"));
        run
    };
    let mut run = served_once();
    run.client.fin = true;
    run.send(b"GET http://web.test/two HTTP/1.1\r\nHost: web.test\r\n\r\n");
    assert_eq!(run.label(), "Resolving(dns)");
    assert!(!run.client.can_read(), "the EOF was read: no new readiness");
    run.connect("45.1.1.2");
    assert!(run.upstream().take().starts_with(b"GET /two HTTP/1.1\r\n"));
    run.upstream()
        .deliver(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n2");
    run.pump();
    assert!(run.client.take().ends_with(b"\r\n\r\n2"));
    assert_eq!(
        run.requests,
        [
            ("/one".to_string(), "allowed"),
            ("/two".to_string(), "allowed")
        ]
    );
    assert!(!run.working(), "closed, not idle: {}", run.label());

    // Refused, the next host's answer is followed by the close, not a
    // linger for an EOF read already.
    let mut run = served_once();
    run.client.fin = true;
    run.send(b"GET http://evil.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n");
    assert!(run.client.take().starts_with(b"HTTP/1.1 403"));
    assert!(
        matches!(run.next, Next::Closed(CloseReason::Denied)),
        "{}: {:?}",
        run.label(),
        run.next
    );
}

/// A half-closed client whose next host is an `https` one the proxy
/// cannot reach over TLS (no trust) is answered (`502`) and closed at
/// once, as a refused plain next host is: its EOF was read by the first
/// host's exchange and raises no new readiness, so a linger for it would
/// wait out the close timeout.
#[test]
fn a_half_closed_client_refused_its_next_https_host_is_closed_after_the_answer() {
    let mut world = world();
    world.policy = Policy::from_rules(&[
        parse_cli_inspect("api.test:80").unwrap(),
        parse_cli_inspect("api.test:443").unwrap(),
    ])
    .unwrap();
    let mut run = Run::new(world);
    run.client.eof_once = true;
    run.send(b"GET http://api.test/one HTTP/1.1\r\nHost: api.test\r\n\r\n");
    run.connect("45.1.1.1");
    run.upstream()
        .deliver(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n1");
    run.pump();
    assert!(run.client.take().ends_with(b"\r\n\r\n1"));

    run.trust = Some(Err("TLS to the upstream: no roots".into()));
    run.client.fin = true;
    run.send(b"GET https://api.test/two HTTP/1.1\r\nHost: api.test\r\n\r\n");
    assert_eq!(run.label(), "Resolving(dns)");
    run.connect("45.1.1.2");
    assert!(run.asked.contains(&"trust".to_string()), "{:?}", run.asked);
    let answer = run.client.take();
    assert!(answer.starts_with(b"HTTP/1.1 502"), "{answer:?}");
    assert!(
        matches!(run.next, Next::Closed(_)),
        "{}: {:?}",
        run.label(),
        run.next
    );
}

/// A reload that refuses the target being dialled answers a client still
/// waiting for its reply (`403` with the reason, SOCKS5 reply `0x02`), then
/// closes it; one answered already, or past dialling, is the shell's to
/// close.
#[test]
fn a_reload_refusing_the_target_being_dialled_answers_the_client() {
    let denial = || match world()
        .policy
        .check_name(&crate::target::Target::new("evil.test", 80).unwrap())
    {
        crate::policy::NameVerdict::Deny(d) => d,
        other => panic!("{other:?}"),
    };
    let mut run = Run::new(world());
    run.send(b"CONNECT api.test:80 HTTP/1.1\r\nHost: api.test:80\r\n\r\n");
    run.handle(Input::Resolved(Ok(vec![ip("45.1.1.1")])));
    assert!(run.core.dialling(), "{}", run.label());
    let next = run
        .core
        .revoke(run.now, denial(), &run.world)
        .expect("answered");
    run.next = next;
    run.after_call();
    run.pump();
    assert!(run.upstream.is_none(), "the connect in flight is let go");
    let answer = String::from_utf8(run.client.take()).unwrap();
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert!(answer.contains("denied by rule"), "{answer}");
    assert!(
        run.asked
            .iter()
            .any(|a| a.starts_with("revoked: denied by rule")),
        "{:?}",
        run.asked
    );
    run.client.fin = true;
    run.pump();
    assert!(
        matches!(run.next, Next::Closed(CloseReason::PolicyReload)),
        "{:?}",
        run.next
    );

    // SOCKS5: reply 0x02, not allowed by the ruleset.
    let mut run = Run::new(world());
    run.send(b"\x05\x01\x00");
    assert_eq!(run.client.take(), b"\x05\x00");
    run.send(b"\x05\x01\x00\x03\x08api.test\x00\x50");
    run.handle(Input::Resolved(Ok(vec![ip("45.1.1.1")])));
    let next = run
        .core
        .revoke(run.now, denial(), &run.world)
        .expect("answered");
    run.next = next;
    run.after_call();
    run.pump();
    assert_eq!(run.client.take()[..2], [5, 2]);

    // Open already: the exchange's client was answered; the shell closes it.
    let mut run = Run::new(world());
    run.send(b"CONNECT api.test:80 HTTP/1.1\r\nHost: api.test:80\r\n\r\n");
    run.connect("45.1.1.1");
    assert!(run.core.inspecting());
    assert!(run.core.revoke(run.now, denial(), &run.world).is_none());
}
