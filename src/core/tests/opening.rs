//! From an accepted client to an open upstream as one machine, in virtual
//! time: the client's bytes on a [`MemPort`], the resolver, the verifier
//! and the dialler answered by hand, a real policy deciding. What is new
//! over the two stages' own tests is the seam: the handshake's exit as a
//! transition inside the machine, the user its login named reaching the
//! policy, the records in order, the deadline handed from one stage to
//! the next, and reports meant for the other stage changing nothing.

use std::io;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;

use super::at;
use super::establish::{ip, World};
use crate::auth::{hash_password_with, Credentials, HashedUser, PhcHash, Users, Verdict};
use crate::config::ListenerProtocol;
use crate::core::establish::Action as Establish;
use crate::core::handshake;
use crate::core::mem::MemPort;
use crate::core::opening::{
    Action, Env, Input, Next, Opened, OpeningCore, Refused, Refusing, Request,
};
use crate::core::port::Port;
use crate::core::refusal::{Dialect, Refusal};
use crate::core::route::After;
use crate::lifecycle::{CloseReason, Phase};
use crate::policy::{
    parse_cli_inspect, parse_cli_rule, Action as RuleAction, Denial, Fronting, Policy,
};
use crate::target::{Host, Target};

const CONNECT_SHOP: &[u8] = b"CONNECT shop.test:443 HTTP/1.1\r\nHost: shop.test:443\r\n\r\n";
const HTTP_REPLY: &[u8] = b"HTTP/1.1 200 Connection established\r\n\r\n";

impl Env for World {
    fn handshake(&self) -> handshake::Env<'_> {
        handshake::Env {
            max_head_bytes: 16 * 1024,
            users: self.users.as_ref(),
            logins: &self.logins,
        }
    }

    fn connect_timeout(&self) -> Duration {
        Duration::from_secs(10)
    }

    fn handshake_timeout(&self) -> Duration {
        Duration::from_secs(5)
    }

    fn close_timeout(&self) -> Duration {
        Duration::from_secs(2)
    }

    fn fronting(&self, target: &Target, user: Option<&str>, named: &Target) -> Option<Fronting> {
        self.policy.fronting(target, user, named, at(0, 0))
    }
}

/// One client's opening: the machine, its client, the world it is lent,
/// the time, and every action it asked for, as text, in order.
struct Run {
    core: OpeningCore,
    client: MemPort,
    /// The connect last dialled.
    upstream: Option<MemPort>,
    world: World,
    now: Instant,
    asked: Vec<String>,
    /// Every label seen, in order, without repeats.
    labels: Vec<String>,
    next: Next,
    /// Why the machine refused the client, once it did.
    refusing: Option<Refusing>,
}

impl Run {
    fn new(world: World) -> Run {
        let core = OpeningCore::handshake(ListenerProtocol::Auto, None, super::deadline(10));
        let mut run = Run {
            core,
            client: MemPort::roomy(),
            upstream: None,
            world,
            now: at(0, 0),
            asked: Vec::new(),
            labels: Vec::new(),
            next: Next::Working,
            refusing: None,
        };
        run.note_label();
        run
    }

    fn label(&self) -> String {
        format!("{}({})", self.core.name(), self.core.stage())
    }

    fn note_label(&mut self) {
        let label = format!("{} {:?}", self.label(), self.core.phase());
        if self.labels.last() != Some(&label) {
            self.labels.push(label);
        }
    }

    /// Pumps as the session runs its state: again while the label changes
    /// (a new sub-stage or stage), then carries out the actions.
    fn pump(&mut self) {
        for _ in 0..100 {
            let before = self.label();
            let upstream = self.upstream.as_mut();
            self.next = self
                .core
                .pump(self.now, &mut self.client, upstream, &self.world);
            self.carry_out();
            self.note_label();
            if !matches!(self.next, Next::Working) || self.label() == before {
                return;
            }
        }
        panic!("the machine never settles");
    }

    fn send(&mut self, bytes: &[u8]) {
        self.client.deliver(bytes);
        self.pump();
    }

    fn handle(&mut self, input: Input) {
        self.next = self.core.handle(self.now, input, &self.world);
        self.carry_out();
        self.note_label();
        if matches!(self.next, Next::Working) {
            // A new stage acts at once on what is there, as the session's does.
            self.pump();
        }
    }

    fn timer(&mut self, now: Instant) {
        self.now = now;
        let before = self.label();
        self.next = self.core.handle_timeout(now, &mut self.client, &self.world);
        self.carry_out();
        self.note_label();
        if matches!(self.next, Next::Working) && self.label() != before {
            // A new stage (a refusal's answer) acts at once, as the session's does.
            self.pump();
        }
    }

    fn carry_out(&mut self) {
        while let Some(action) = self.core.poll_action() {
            self.asked.push(match action {
                Action::Identified {
                    spoke,
                    user,
                    rejected,
                } => format!("identified {spoke:?} as {user:?}, rejected {rejected}"),
                Action::Target(target) => format!("target {target}"),
                Action::Verify(job) => format!("verify {:?}", job.user),
                Action::Establish(Establish::Resolve(name)) => format!("resolve {name}"),
                Action::Establish(Establish::AwaitPins) => "await pins".into(),
                Action::Establish(Establish::Admitted { rule, .. }) => format!("admitted {rule}"),
                Action::Establish(Establish::Dial(addr, vetted)) => {
                    // As the shell dials: a connect completes (or fails)
                    // with a writable edge, so writes are watched; in
                    // flight, it takes nothing yet.
                    let mut port = MemPort::default();
                    port.want_write(true);
                    self.upstream = Some(port);
                    format!("dial {addr} for {vetted}")
                }
                Action::Switched { why } => {
                    self.upstream = None;
                    format!("switched: {why}")
                }
                Action::Note(note) => format!("note: {note}"),
                Action::Certify(name) => format!("certify {name:?}"),
                Action::Trust
                | Action::CloseUpstream
                | Action::Failed { .. }
                | Action::Request(_)
                | Action::Relayed { .. } => {
                    panic!("the session machine's action from the opening: {action:?}")
                }
                Action::Refusing(refusing) => {
                    // Kept apart from what was asked: the shell records it
                    // and closes the upstream; the answer is the machine's.
                    assert!(self.refusing.is_none(), "refused twice");
                    self.upstream = None;
                    self.refusing = Some(refusing);
                    continue;
                }
            });
        }
    }

    fn resolved(&mut self, addrs: &[&str]) {
        let addrs: Vec<IpAddr> = addrs.iter().map(|a| ip(a)).collect();
        self.handle(Input::Resolved(Ok(addrs)));
    }

    fn opened(self) -> Opened {
        match self.next {
            Next::Open(opened) => *opened,
            other => panic!("not open: {other:?} after {:?}", self.asked),
        }
    }

    fn refused(self) -> Refused {
        match self.refusing {
            Some(Refusing::Target(refused)) => *refused,
            other => panic!("not refused: {other:?} after {:?}", self.asked),
        }
    }

    /// Why the client was answered and let go before any target, and what
    /// it was told.
    fn answered(&mut self) -> (String, Vec<u8>) {
        match self.refusing.take() {
            Some(Refusing::Answered { why }) => (why, self.client.take()),
            other => panic!("not answered: {other:?} after {:?}", self.asked),
        }
    }

    /// What a vetted tunnel's refusal said, to the log and to the client,
    /// and the refusing rule.
    fn fronting(&mut self) -> (String, Vec<u8>, Option<std::sync::Arc<str>>) {
        match self.refusing.take() {
            Some(Refusing::Fronting { why, rule }) => (why, self.client.take(), rule),
            other => panic!("not refused as fronting: {other:?} after {:?}", self.asked),
        }
    }
}

fn basic(user: &str, password: &str) -> String {
    format!("Basic {}", STANDARD.encode(format!("{user}:{password}")))
}

fn connect_as(host: &str, user: &str, password: &str) -> Vec<u8> {
    format!(
        "CONNECT {host} HTTP/1.1\r\nHost: {host}\r\nProxy-Authorization: {}\r\n\r\n",
        basic(user, password)
    )
    .into_bytes()
}

/// api.test:443 for alice only; alice logs in with a plaintext password,
/// bob with an argon2 hash (checked by the verifier pool).
fn alice_and_bob() -> World {
    let mut rule = parse_cli_rule(RuleAction::Allow, "api.test:443").unwrap();
    rule.users = Some(vec!["alice".into()]);
    let hash = hash_password_with(b"pw-bob", 64, 1, 1).unwrap();
    let users = Users::new(
        Some(&Credentials::new("alice", "pw-alice")),
        &[HashedUser::new("bob", PhcHash::parse(&hash).unwrap())],
    )
    .unwrap();
    let mut world = World::new();
    world.policy = Policy::from_rules(&[rule]).unwrap();
    world.users = Some(users);
    world
}

/// A CONNECT, with a ClientHello pipelined behind it, goes from the first
/// byte to an open tunnel in one machine: the records in order, nothing
/// read from the client once its request is whole, the early bytes handed
/// on with the reply owed.
#[test]
fn a_connect_goes_from_its_first_byte_to_an_open_tunnel() {
    let mut run = Run::new(World::new());
    let mut bytes = CONNECT_SHOP.to_vec();
    bytes.extend_from_slice(b"\x16\x03\x01hello");
    run.send(&bytes);
    assert!(matches!(run.next, Next::Working), "{:?}", run.next);
    assert_eq!(
        run.asked,
        [
            "identified Http as None, rejected false",
            "target shop.test:443",
            "resolve shop.test",
        ]
    );
    assert_eq!(
        run.labels,
        [
            "Handshake(sniff) Handshake",
            "Handshake(http) Handshake",
            "Resolving(dns) Resolving"
        ],
        "each label with its phase"
    );
    assert_eq!(run.client.wants(), (false, false), "nothing read meanwhile");
    assert!(run.core.poll_timeout().is_some());

    run.resolved(&["45.1.1.1"]);
    assert_eq!(run.label(), "Connecting(tcp)");
    assert_eq!(run.core.phase(), Phase::Connecting);
    assert!(run.core.connecting() && run.core.dialling());
    run.handle(Input::Connected);
    assert_eq!(
        &run.asked[3..],
        [
            "admitted --allow shop.test:443",
            "dial 45.1.1.1:443 for 45.1.1.1"
        ]
    );
    assert_eq!(run.core.poll_timeout(), None, "ended: no deadline left");
    let opened = run.opened();
    assert_eq!(opened.target.to_string(), "shop.test:443");
    assert_eq!(opened.request.early, b"\x16\x03\x01hello");
    assert_eq!(opened.request.dialect, Dialect::Http);
    assert!(!opened.request.replied);
    assert!(
        matches!(&opened.after, After::Passthrough { to_client, own }
            if to_client == HTTP_REPLY && *own == HTTP_REPLY.len()),
        "{:?}",
        opened.after
    );
}

/// The connect deadline starts when the handshake ends, not when the
/// client connected; the handshake's no longer applies.
#[test]
fn the_connect_deadline_starts_when_the_handshake_ends() {
    let mut run = Run::new(World::new());
    assert_eq!(run.core.poll_timeout(), Some(at(10, 0)));
    run.send(&CONNECT_SHOP[..10]);
    run.now = at(6, 0);
    run.send(&CONNECT_SHOP[10..]);
    assert_eq!(run.label(), "Resolving(dns)");
    assert_eq!(run.core.poll_timeout(), Some(at(16, 0)));
    run.timer(at(10, 0));
    assert!(matches!(run.next, Next::Working), "{:?}", run.next);
    run.timer(at(15, 999));
    assert!(matches!(run.next, Next::Working), "{:?}", run.next);
    run.timer(at(16, 0));
    let refused = run.refused();
    assert!(matches!(refused.refusal, Refusal::Timeout), "{refused:?}");
    assert_eq!(refused.target.to_string(), "shop.test:443");
}

/// A handshake that runs out of time ends with nothing to answer.
#[test]
fn a_handshake_out_of_time_is_closed() {
    let mut run = Run::new(World::new());
    run.send(b"CONNECT shop");
    run.timer(at(9, 999));
    assert!(matches!(run.next, Next::Working), "{:?}", run.next);
    run.timer(at(10, 0));
    assert!(
        matches!(run.next, Next::Closed(CloseReason::HandshakeTimeout)),
        "{:?}",
        run.next
    );
    assert!(run.asked.is_empty(), "{:?}", run.asked);
}

/// The user a login names is the one the policy judges: alice's rule lets
/// her through; bob, verified off the loop, is refused by name before any
/// DNS, told that the rule is for other users.
#[test]
fn the_user_a_login_names_is_the_one_the_policy_judges() {
    let mut alice = Run::new(alice_and_bob());
    alice.send(&connect_as("api.test:443", "alice", "pw-alice"));
    assert_eq!(
        alice.asked,
        [
            "identified Http as Some(\"alice\"), rejected false",
            "target api.test:443",
            "resolve api.test",
        ]
    );
    alice.resolved(&["45.2.2.2"]);
    assert!(alice.asked.iter().any(|a| a.starts_with("admitted")));

    let mut bob = Run::new(alice_and_bob());
    bob.send(&connect_as("api.test:443", "bob", "pw-bob"));
    assert_eq!(bob.asked, ["verify Some(\"bob\")"]);
    assert_eq!(bob.label(), "Handshake(authenticating)");
    bob.handle(Input::Verdict(Verdict::Accepted("bob".into())));
    assert_eq!(
        &bob.asked[1..],
        [
            "identified Http as Some(\"bob\"), rejected false",
            "target api.test:443",
        ],
        "refused before any DNS"
    );
    let refused = bob.refused();
    assert!(
        matches!(&refused.refusal, Refusal::Denied(Denial::User { user: Some(u), .. }) if &**u == "bob"),
        "{:?}",
        refused.refusal
    );
}

/// A login the verifier rejects is counted and refused in the client's
/// dialect; no target is recorded.
#[test]
fn a_rejected_login_is_counted_and_refused() {
    let mut run = Run::new(alice_and_bob());
    run.send(&connect_as("api.test:443", "bob", "wrong"));
    run.handle(Input::Verdict(Verdict::Rejected));
    assert_eq!(
        run.asked,
        [
            "verify Some(\"bob\")",
            "identified Http as None, rejected true",
        ]
    );
    let (why, answer) = run.answered();
    assert_eq!(why, Refusal::AuthRequired.describe());
    assert!(answer.starts_with(b"HTTP/1.1 407"), "{answer:?}");
    assert_eq!(run.label(), "Closing(linger)", "answered, then a FIN");
    assert!(run.client.shut);
}

/// Reports meant for the other stage change nothing: a resolve, pins or a
/// connect outcome during the handshake; a verdict while establishing.
#[test]
fn reports_for_the_other_stage_change_nothing() {
    let mut run = Run::new(World::new());
    run.send(b"CONNECT shop.test:443 HTTP/1.1\r\n");
    let strays = || {
        [
            Input::Resolved(Ok(vec![ip("45.1.1.1")])),
            Input::PinsSettled,
            Input::Connected,
            Input::ConnectFailed(io::ErrorKind::ConnectionRefused.into()),
        ]
    };
    for input in strays() {
        run.handle(input);
        assert!(matches!(run.next, Next::Working), "{:?}", run.next);
        assert_eq!(run.label(), "Handshake(http)");
    }
    assert!(run.asked.is_empty(), "{:?}", run.asked);

    run.send(b"Host: shop.test:443\r\n\r\n");
    assert_eq!(run.label(), "Resolving(dns)");
    let asked = run.asked.len();
    run.handle(Input::Verdict(Verdict::Accepted("mallory".into())));
    assert!(matches!(run.next, Next::Working), "{:?}", run.next);
    assert_eq!(run.label(), "Resolving(dns)");
    assert_eq!(run.asked.len(), asked);
}

/// While establishing, what the client pipelines stays unread; its reset
/// ends the machine.
#[test]
fn a_client_gone_while_establishing_ends_it_unread() {
    let mut run = Run::new(World::new());
    run.send(CONNECT_SHOP);
    let read = run.client.read_total;
    run.send(b"more");
    assert!(matches!(run.next, Next::Working), "{:?}", run.next);
    assert_eq!(
        run.client.read_total, read,
        "nothing read while establishing"
    );
    run.client.reset = true;
    run.pump();
    assert!(
        matches!(run.next, Next::Closed(CloseReason::ClientGone)),
        "{:?}",
        run.next
    );
    // Ended: a late answer changes nothing.
    run.handle(Input::Resolved(Ok(vec![ip("45.1.1.1")])));
    assert!(matches!(run.next, Next::Working), "{:?}", run.next);
    assert_eq!(run.asked.last().unwrap(), "resolve shop.test");
}

/// A name refused carries the request back for its answer: the dialect,
/// the early bytes, not replied.
#[test]
fn a_refused_name_carries_its_request() {
    let mut run = Run::new(World::new());
    run.send(b"CONNECT evil.test:443 HTTP/1.1\r\nHost: evil.test:443\r\n\r\nearly");
    assert_eq!(
        run.asked,
        [
            "identified Http as None, rejected false",
            "target evil.test:443",
        ]
    );
    let refused = run.refused();
    assert!(matches!(refused.refusal, Refusal::Denied(Denial::Rule(_))));
    assert_eq!(refused.request.dialect, Dialect::Http);
    assert_eq!(refused.request.early, b"early");
    assert!(!refused.request.replied);
}

/// SOCKS5 to an address literal: the method reply, then the admission and
/// the dial in the same pump (no name to resolve), then the success reply
/// owed once open.
#[test]
fn socks5_to_an_address_literal_dials_at_once() {
    let mut run = Run::new(World::new());
    run.send(&[5, 1, 0, 5, 1, 0, 1, 45, 1, 1, 9, 0x01, 0xbb]);
    assert_eq!(run.client.take(), [5, 0], "the method reply");
    assert_eq!(
        run.asked,
        [
            "identified Socks5 as None, rejected false",
            "target 45.1.1.9:443",
            "admitted --allow 45.1.1.9:443",
            "dial 45.1.1.9:443 for 45.1.1.9",
        ]
    );
    assert_eq!(run.label(), "Connecting(tcp)");
    run.handle(Input::Connected);
    let opened = run.opened();
    assert!(
        matches!(&opened.after, After::Passthrough { to_client, .. } if to_client.starts_with(&[5, 0])),
        "{:?}",
        opened.after
    );
}

/// A forward proxy's next host starts in the establishing stage, for the
/// user the session knows; refused, the request comes back for its answer.
#[test]
fn a_next_host_starts_establishing() {
    let world = World::new();
    let request = |early: &[u8]| Request {
        dialect: Dialect::Forward,
        early: early.to_vec(),
        login: None,
        replied: false,
        client_eof: false,
    };
    let target = Target::new("evil.test", 80).unwrap();
    let (mut core, next) =
        OpeningCore::establish(at(0, 0), target, None, request(b"GET /"), &world);
    assert!(matches!(next, Next::Working), "{next:?}");
    assert!(matches!(core.poll_action(), Some(Action::Target(_))));
    let Some(Action::Refusing(Refusing::Target(refused))) = core.poll_action() else {
        panic!("not refused");
    };
    assert_eq!(refused.request.early, b"GET /");
    assert!(core.poll_action().is_none());
    assert!(core.closing(), "its 403 is owed");

    let target = Target::new("shop.test", 443).unwrap();
    let (core, next) = OpeningCore::establish(at(3, 0), target, None, request(b""), &world);
    assert!(matches!(next, Next::Working));
    assert_eq!(
        format!("{}({})", core.name(), core.stage()),
        "Resolving(dns)"
    );
    assert_eq!(
        core.poll_timeout(),
        Some(at(13, 0)),
        "the connect timeout from now"
    );
}

/// shop.test:443 allowed raw on a port api.test:443's inspecting rule
/// makes vetted; evil.test refused.
fn vetted_world() -> World {
    let mut world = World::new();
    world.policy = Policy::from_rules(&[
        parse_cli_rule(RuleAction::Deny, "evil.test").unwrap(),
        parse_cli_rule(RuleAction::Allow, "shop.test:443").unwrap(),
        parse_cli_inspect("api.test:443").unwrap(),
    ])
    .unwrap();
    world.vets = true;
    world
}

/// A raw tunnel to a vetted port: open, its reply out, its first flight
/// read; one naming a host the policy inspects switches to that host
/// inside the machine (the first upstream dropped, the named host
/// established afresh for the same client, the first flight its early
/// bytes, no second reply).
#[test]
fn a_vetted_tunnel_switches_to_the_inspected_name_inside_the_machine() {
    let mut run = Run::new(vetted_world());
    run.send(CONNECT_SHOP);
    run.resolved(&["45.1.1.1"]);
    run.handle(Input::Connected);
    assert_eq!(run.label(), "Vetting(first-flight)");
    assert_eq!(run.core.phase(), Phase::Established);
    assert_eq!(
        run.client.take(),
        HTTP_REPLY,
        "the reply, before the first flight"
    );
    assert_eq!(
        run.core.poll_timeout(),
        Some(at(5, 0)),
        "the handshake timeout"
    );
    let asked = run.asked.len();
    let flight = b"GET / HTTP/1.1\r\nHost: api.test\r\n\r\n";
    run.send(flight);
    assert!(run.upstream.is_none(), "the first upstream dropped");
    assert!(
        run.asked[asked].starts_with("switched: "),
        "{:?}",
        run.asked
    );
    assert_eq!(
        &run.asked[asked + 1..],
        ["target api.test:443", "resolve api.test"]
    );
    assert_eq!(run.label(), "Resolving(dns)");
    assert_eq!(run.core.phase(), Phase::Resolving);
    run.resolved(&["45.2.2.2"]);
    run.handle(Input::Connected);
    assert_eq!(
        run.asked[asked + 3..],
        [
            "admitted --inspect api.test:443",
            "dial 45.2.2.2:443 for 45.2.2.2"
        ]
    );
    assert!(run.client.take().is_empty(), "no second reply");
    let opened = run.opened();
    assert_eq!(opened.target.to_string(), "api.test:443");
    assert!(opened.request.replied);
    assert_eq!(opened.request.early, flight);
    assert!(
        matches!(&opened.after, After::Inspect { reply } if reply.is_empty()),
        "{:?}",
        opened.after
    );
}

/// A first flight naming what the policy refuses ends the machine with the
/// refusal to send; one naming nothing stricter is relayed, the first
/// flight first; one that never becomes whole times out with a note.
#[test]
fn a_vetted_first_flight_is_refused_relayed_or_timed_out() {
    let open_vetted = || {
        let mut run = Run::new(vetted_world());
        run.send(CONNECT_SHOP);
        run.resolved(&["45.1.1.1"]);
        run.handle(Input::Connected);
        run.client.take();
        run
    };
    let mut run = open_vetted();
    run.send(b"GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n");
    let (why, answer, _) = run.fronting();
    assert!(answer.starts_with(b"HTTP/1.1 403"), "{answer:?}");
    assert!(why.contains("evil.test"), "{why}");

    let mut run = open_vetted();
    run.send(b"\x00\x01 neither TLS nor HTTP");
    let opened = match run.next {
        Next::Open(o) => *o,
        other => panic!("{other:?}: {:?}", run.refusing),
    };
    assert!(matches!(opened.after, After::Passthrough { own: 0, .. }));
    assert_eq!(opened.request.early, b"\x00\x01 neither TLS nor HTTP");

    let mut run = open_vetted();
    run.send(b"GET / HT");
    run.timer(at(4, 999));
    assert!(matches!(run.next, Next::Working), "{:?}", run.next);
    run.timer(at(5, 0));
    assert!(
        matches!(run.next, Next::Closed(CloseReason::HandshakeTimeout)),
        "{:?}",
        run.next
    );
    assert!(
        run.asked.last().unwrap().starts_with("note: "),
        "{:?}",
        run.asked
    );
}

/// A terminated tunnel: open, its reply out, its ClientHello read; the
/// machine asks for the leaf of the name it gives, and ends with both TLS
/// layers. A hello naming another host is refused with an alert, noted,
/// no leaf asked for; a mint that failed ends as a TLS failure.
#[test]
fn a_terminated_tunnel_reads_its_hello_and_ends_with_both_layers() {
    use rustls::pki_types::ServerName;
    use rustls::ClientConnection;

    use crate::tls::tests::Fixture;
    use crate::tls::ServerConfigs;

    let f = Fixture::new();
    let hello = |sni: &str| {
        let name = ServerName::try_from(sni.to_owned()).unwrap();
        let mut conn = ClientConnection::new(f.clients().config(), name).unwrap();
        let mut wire = Vec::new();
        while conn.wants_write() {
            conn.write_tls(&mut wire).unwrap();
        }
        wire
    };
    let open_terminated = || {
        let mut world = World::new();
        world.policy =
            Policy::from_rules(&[crate::policy::parse_cli_terminate("shop.test:443").unwrap()])
                .unwrap();
        let mut run = Run::new(world);
        run.send(CONNECT_SHOP);
        run.resolved(&["45.1.1.1"]);
        run.handle(Input::Connected);
        assert_eq!(run.label(), "Securing(sniff)");
        assert_eq!(run.core.phase(), Phase::Connecting);
        assert_eq!(run.client.take(), HTTP_REPLY);
        assert_eq!(
            run.core.poll_timeout(),
            Some(at(5, 0)),
            "the handshake timeout"
        );
        run
    };

    let mut run = open_terminated();
    run.send(&hello("shop.test"));
    assert_eq!(run.asked.last().unwrap(), "certify Domain(\"shop.test\")");
    assert_eq!(run.label(), "Securing(client-hello)");
    // Nothing more is read while the configs are awaited; a stray report
    // changes nothing.
    run.handle(Input::Connected);
    assert!(matches!(run.next, Next::Working), "{:?}", run.next);
    let leaf = f
        .minter
        .mint(&Host::Domain("shop.test".into()))
        .unwrap()
        .key;
    let configs = (ServerConfigs::new().for_leaf(leaf), f.clients().config());
    run.handle(Input::Certified(Ok(configs)));
    match run.next {
        Next::Secured(secured) => {
            assert_eq!(secured.target.to_string(), "shop.test:443");
            assert!(secured.treatment.terminate);
        }
        other => panic!("not secured: {other:?}"),
    }

    let mut run = open_terminated();
    run.send(&hello("other.test"));
    assert!(
        !run.asked.iter().any(|a| a.starts_with("certify")),
        "{:?}",
        run.asked
    );
    assert!(
        run.asked
            .last()
            .unwrap()
            .starts_with("note: shop.test:443: TLS SNI \"other.test\""),
        "{:?}",
        run.asked
    );
    let (_, alert) = run.answered();
    assert_eq!(alert.first(), Some(&21), "an alert: {alert:?}");
    assert_eq!(run.label(), "Closing(linger)");

    let mut run = open_terminated();
    run.send(&hello("shop.test"));
    run.handle(Input::Certified(Err("could not mint".into())));
    assert!(
        matches!(run.next, Next::Closed(CloseReason::TlsFailed)),
        "nothing to answer: {:?}",
        run.next
    );
    let (why, answer) = run.answered();
    assert_eq!(
        (why.as_str(), answer.as_slice()),
        ("could not mint", &b""[..])
    );
}

/// A vetted tunnel switched to an address literal dials it within the same
/// call; the first upstream, open and writable, must not count as that
/// connect done: only the new socket's readiness does, and a failed one's
/// error is the refusal.
#[test]
fn a_switch_to_an_address_waits_for_its_own_connect() {
    let mut world = vetted_world();
    world.policy = Policy::from_rules(&[
        parse_cli_rule(RuleAction::Allow, "shop.test:443").unwrap(),
        parse_cli_inspect("45.2.2.2:443").unwrap(),
    ])
    .unwrap();
    let flight = b"GET / HTTP/1.1\r\nHost: 45.2.2.2\r\n\r\n";
    let switched = |world| {
        let mut run = Run::new(world);
        run.send(CONNECT_SHOP);
        run.resolved(&["45.1.1.1"]);
        run.handle(Input::Connected);
        run.client.take();
        // The first upstream is open and could take writes.
        run.upstream.as_mut().unwrap().want_write(true);
        run.send(flight);
        run
    };
    let mut run = switched(world);
    assert!(
        run.asked
            .iter()
            .any(|a| a == "dial 45.2.2.2:443 for 45.2.2.2"),
        "{:?}",
        run.asked
    );
    assert!(
        matches!(run.next, Next::Working),
        "open too soon: {:?}",
        run.next
    );
    assert_eq!(run.label(), "Connecting(tcp)");
    // The new socket's own readiness completes it.
    run.upstream.as_mut().unwrap().room = usize::MAX;
    run.pump();
    let opened = run.opened();
    assert_eq!(opened.target.to_string(), "45.2.2.2:443");
    assert_eq!(opened.request.early, flight);

    // Its error, read through the port, is the refusal.
    let mut world = vetted_world();
    world.policy = Policy::from_rules(&[
        parse_cli_rule(RuleAction::Allow, "shop.test:443").unwrap(),
        parse_cli_inspect("45.2.2.2:443").unwrap(),
    ])
    .unwrap();
    let mut run = switched(world);
    run.upstream.as_mut().unwrap().reset = true;
    run.pump();
    let refused = run.refused();
    assert!(
        matches!(refused.refusal, Refusal::Connect(_)),
        "{:?}",
        refused.refusal
    );
    assert!(refused.request.replied, "a close, not a second answer");
}

/// Random clients (CONNECT, SOCKS5, forward; alice, bob
/// verified off the loop, nobody, a wrong password; whole or cut) and
/// random reports in random order, with the clock moving: the machine's
/// rules hold at every step.
#[test]
fn random_openings_keep_the_seams_rules() {
    let mut rng = super::Rng(0x0be1_1a5e_5eed);
    let socks_login = |u: &str, p: &str| {
        let mut v = vec![5, 1, 2, 1, u.len() as u8];
        v.extend_from_slice(u.as_bytes());
        v.push(p.len() as u8);
        v.extend_from_slice(p.as_bytes());
        v.extend_from_slice(&[5, 1, 0, 3, 8]);
        v.extend_from_slice(b"api.test");
        v.extend_from_slice(&443u16.to_be_bytes());
        v
    };
    let requests: Vec<(Option<&str>, Vec<u8>)> = vec![
        (Some("alice"), connect_as("api.test:443", "alice", "pw-alice")),
        (Some("bob"), connect_as("api.test:443", "bob", "pw-bob")),
        (None, connect_as("api.test:443", "bob", "wrong")),
        (None, b"CONNECT api.test:443 HTTP/1.1\r\n\r\n".to_vec()),
        (Some("alice"), socks_login("alice", "pw-alice")),
        (Some("bob"), socks_login("bob", "pw-bob")),
        (
            Some("alice"),
            format!(
                "GET http://api.test/ HTTP/1.1\r\nHost: api.test\r\nProxy-Authorization: {}\r\n\r\n",
                basic("alice", "pw-alice")
            )
            .into_bytes(),
        ),
    ];
    for case in 0..3000 {
        let (who, bytes) = &requests[rng.below(requests.len())];
        let mut run = Run::new(alice_and_bob());
        let cut = rng.below(bytes.len() + 1);
        let mut ended = false;
        let mut dialled = false;
        for step in 0..20 {
            let before_end = ended;
            match rng.below(13) {
                0 | 9 => run.send(&bytes[..cut]),
                1 | 10 => run.send(&bytes[cut..]),
                2 | 11 => run.handle(Input::Verdict(match rng.below(6) {
                    0 | 3 | 4 => Verdict::Accepted(who.unwrap_or("bob").into()),
                    1 => Verdict::Rejected,
                    _ => Verdict::Busy,
                })),
                3 | 12 => run.resolved(&["45.2.2.2"]),
                4 => run.handle(Input::Resolved(Err(io::ErrorKind::NotFound.into()))),
                5 => run.handle(Input::Connected),
                6 => run.handle(Input::ConnectFailed(
                    io::ErrorKind::ConnectionRefused.into(),
                )),
                7 => {
                    let now = run.now + Duration::from_secs(rng.below(6) as u64);
                    run.timer(now);
                }
                _ => {
                    run.client.reset = rng.below(8) == 0;
                    run.pump();
                }
            }
            let terminal = !matches!(run.next, Next::Working);
            assert!(
                !(before_end && terminal),
                "case {case} step {step}: a second end {:?} after {:?}",
                run.next,
                run.asked
            );
            if terminal {
                ended = true;
            }
            if ended {
                assert_eq!(
                    run.core.poll_timeout(),
                    None,
                    "case {case}: ended, a deadline"
                );
                run.next = Next::Working;
            } else {
                assert!(
                    run.core.poll_timeout().is_some(),
                    "case {case} step {step}: working with no deadline: {}",
                    run.label()
                );
            }
            dialled |= run.asked.iter().any(|a| a.starts_with("dial"));
        }
        if dialled {
            // Only alice is allowed api.test: whoever dialled logged in as her.
            let identified = run
                .asked
                .iter()
                .find(|a| a.starts_with("identified"))
                .unwrap();
            assert!(
                identified.contains("Some(\"alice\")"),
                "case {case}: {:?}",
                run.asked
            );
            assert_eq!(*who, Some("alice"), "case {case}: {:?}", run.asked);
        }
        // The records in order: identified, target, admitted, dial.
        let pos = |p: &str| run.asked.iter().position(|a| a.starts_with(p));
        let order = [
            pos("identified"),
            pos("target"),
            pos("admitted"),
            pos("dial"),
        ];
        let seen: Vec<usize> = order.iter().flatten().copied().collect();
        assert!(
            seen.windows(2).all(|w| w[0] < w[1]),
            "case {case}: {:?}",
            run.asked
        );
        assert!(
            run.asked
                .iter()
                .filter(|a| a.starts_with("identified"))
                .count()
                <= 1,
            "case {case}: {:?}",
            run.asked
        );
    }
}

/// Every name under cdn.test allowed raw on port 80, and inspected only
/// when it resolves into 10.20.0.0/16 (a scoped rule, `match = "both"`):
/// the policy's fronting answer names the inspecting rule for any of them
/// (it looks at names, not addresses), while each, resolving to a public
/// address, is established raw on a vetted port.
fn scoped_inspect_world() -> World {
    let mut world = World::new();
    world.policy = Policy::from_rules(&[
        parse_cli_rule(RuleAction::Allow, "*.cdn.test:80").unwrap(),
        parse_cli_inspect("*.cdn.test:80@10.20.0.0/16").unwrap(),
    ])
    .unwrap();
    world.vets = true;
    world
}

/// A first flight naming two hosts (an absolute-form target and a `Host`),
/// each of which the policy's fronting check calls inspected but which
/// establishes raw: the machine switches to one, vets the same flight
/// again there, switches back to the other, and so on. One client
/// connection must not make the proxy resolve and dial without end (each
/// switch restarts the connect and handshake deadlines, so none bounds
/// it): a tunnel is switched at most once.
#[test]
fn a_switched_tunnel_is_not_switched_again() {
    let mut run = Run::new(scoped_inspect_world());
    run.send(b"CONNECT a.cdn.test:80 HTTP/1.1\r\nHost: a.cdn.test:80\r\n\r\n");
    run.resolved(&["45.1.1.1"]);
    run.handle(Input::Connected);
    assert_eq!(run.label(), "Vetting(first-flight)");
    assert_eq!(run.client.take(), HTTP_REPLY);
    run.send(b"GET http://b.cdn.test/ HTTP/1.1\r\nHost: a.cdn.test\r\n\r\n");
    let mut dials = 1;
    for _ in 0..10 {
        if !matches!(run.next, Next::Working) || run.label() != "Resolving(dns)" {
            break;
        }
        run.resolved(&["45.1.1.2"]);
        if !run.core.connecting() {
            break;
        }
        dials += 1;
        run.handle(Input::Connected);
    }
    let switches = run
        .asked
        .iter()
        .filter(|a| a.starts_with("switched: "))
        .count();
    assert!(
        switches <= 1 && dials <= 2,
        "{switches} switches, {dials} dials from one client connection: {:#?}",
        run.asked
    );
    assert!(
        run.core.closing(),
        "still going as {}: {:?}",
        run.label(),
        run.next
    );
    // Refused in the first flight's own terms (a 403 to an HTTP request),
    // inside the tunnel the client was answered for.
    let (why, answer, rule) = run.fronting();
    assert!(answer.starts_with(b"HTTP/1.1 403"), "{answer:?}");
    assert!(why.contains("switched to b.cdn.test:80 already"), "{why}");
    assert!(rule.is_none());
}

/// A refusal is the machine's to the end: the answer written (a byte at a
/// time when the transport takes no more), a FIN, the linger reading away
/// what the client still sends, and the close at its EOF, all in the
/// `Closing` phase, with the upstream let go at the refusal.
#[test]
fn a_refused_client_is_answered_then_closed_at_its_eof() {
    const EVIL: &[u8] = b"CONNECT evil.test:443 HTTP/1.1\r\nHost: evil.test:443\r\n\r\n";
    let mut run = Run::new(World::new());
    run.client.room = 0;
    run.send(EVIL);
    let want = match run.refusing.take() {
        Some(Refusing::Target(r)) if matches!(r.refusal, Refusal::Denied(_)) => {
            r.refusal.answer(r.request.dialect)
        }
        other => panic!("not denied: {other:?}"),
    };
    assert_eq!(run.label(), "Closing(flush)");
    assert_eq!(run.core.phase(), Phase::Closing);
    assert_eq!(run.client.wants(), (false, true), "nothing read while owed");
    assert_eq!(run.core.poll_timeout(), Some(at(2, 0)), "the close timeout");
    let mut answer = Vec::new();
    for _ in 0..10_000 {
        if run.label() != "Closing(flush)" {
            break;
        }
        run.client.room = 1;
        run.pump();
        answer.extend(run.client.take());
    }
    assert!(answer.starts_with(b"HTTP/1.1 403"), "{answer:?}");
    assert_eq!(answer, want, "the whole answer, a byte at a time");
    assert_eq!(run.label(), "Closing(linger)");
    assert!(run.client.shut, "a FIN after the answer");
    assert!(matches!(run.next, Next::Working), "{:?}", run.next);
    // What the client still sends is read away (16 reads a call, then
    // again), never answered.
    run.client.max_io = 1;
    run.client.deliver(&[b'x'; 40]);
    run.pump();
    assert!(matches!(run.next, Next::Again), "{:?}", run.next);
    run.client.fin = true;
    for _ in 0..5 {
        run.pump();
        if !matches!(run.next, Next::Again) {
            break;
        }
    }
    assert!(
        matches!(run.next, Next::Closed(CloseReason::Denied)),
        "{:?}",
        run.next
    );
    assert_eq!(run.core.poll_timeout(), None, "ended, no deadline");
    assert!(run.client.take().is_empty(), "nothing after the answer");
}

/// The close is bounded: an answer the client never reads is cut off at
/// the close deadline with a reset (a FIN would make it look whole); a
/// client that read it and never closes is let go with a FIN. Nothing
/// before the deadline.
#[test]
fn a_refused_clients_close_is_bounded_by_the_close_timeout() {
    const EVIL: &[u8] = b"CONNECT evil.test:443 HTTP/1.1\r\nHost: evil.test:443\r\n\r\n";
    let mut run = Run::new(World::new());
    run.client.room = 10;
    run.send(EVIL);
    assert_eq!(run.label(), "Closing(flush)");
    run.timer(at(1, 999));
    assert!(matches!(run.next, Next::Working), "{:?}", run.next);
    run.timer(at(2, 0));
    assert!(
        matches!(run.next, Next::Reset(CloseReason::CloseTimeout)),
        "{:?}",
        run.next
    );

    let mut run = Run::new(World::new());
    run.now = at(1, 0);
    run.send(EVIL);
    assert_eq!(run.label(), "Closing(linger)");
    assert_eq!(run.core.poll_timeout(), Some(at(3, 0)), "from the refusal");
    run.client.deliver(b"unread");
    run.timer(at(3, 0));
    assert!(
        matches!(run.next, Next::Closed(CloseReason::Denied)),
        "{:?}",
        run.next
    );
    assert_eq!(
        run.client.inbox.len(),
        0,
        "queued input read away first: closing over it would reset the answer"
    );
}

/// A SOCKS5 client refused by the policy hears its reply code, then the
/// close; one refused before any target (no acceptable method) hears the
/// method selection's refusal.
#[test]
fn a_socks5_refusal_is_its_reply_then_the_close() {
    let mut run = Run::new(World::new());
    run.send(b"\x05\x01\x00");
    assert_eq!(run.client.take(), b"\x05\x00");
    let mut request = b"\x05\x01\x00\x03\x09evil.test".to_vec();
    request.extend_from_slice(&443u16.to_be_bytes());
    run.send(&request);
    let refused = run.refusing.take();
    assert!(matches!(refused, Some(Refusing::Target(_))), "{refused:?}");
    let reply = run.client.take();
    assert_eq!(
        reply.get(..2),
        Some(&b"\x05\x02"[..]),
        "not allowed by ruleset"
    );
    assert_eq!(run.label(), "Closing(linger)");
    run.client.fin = true;
    run.pump();
    assert!(
        matches!(run.next, Next::Closed(CloseReason::Denied)),
        "{:?}",
        run.next
    );

    let mut run = Run::new(World::new());
    run.send(b"\x05\x01\x02");
    let (_, answer) = run.answered();
    assert_eq!(answer, b"\x05\xff", "no acceptable method");
    assert_eq!(run.core.phase(), Phase::Closing);
}
