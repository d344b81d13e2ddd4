//! The connect stage's core, without a socket: the dials it asks for and
//! in what order, what a failed connect leads to, a parent proxy's HTTP or
//! SOCKS5 handshake over an in-memory upstream (answers cut at every byte,
//! refusals, ends, resets, bytes behind the answer), the refusal each
//! timeout earns, and a reload's pruning of the addresses left.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use super::{at, deadline};
use crate::core::clock::Deadline;
use crate::core::dial::{Action, DialCore, Input, Outcome, Unreachable};
use crate::core::mem::MemPort;
use crate::core::port::Port;
use crate::io::Io;
use crate::protocol::parent::ParentProxy;
use crate::tls::wire::Wire;

const HTTP_PARENT: &str = "http://127.0.0.1:3128";
const OK_ANSWER: &[u8] = b"HTTP/1.1 200 Connection established\r\n\r\n";

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn parent(url: &str) -> Arc<ParentProxy> {
    Arc::new(ParentProxy::parse(url).unwrap())
}

/// Four vetted addresses, v4 and v6.
fn addrs() -> Vec<IpAddr> {
    ["192.0.2.1", "2001:db8::2", "192.0.2.3", "192.0.2.4"]
        .map(ip)
        .to_vec()
}

fn refused() -> io::Error {
    io::ErrorKind::ConnectionRefused.into()
}

/// Plays the shell against `net` (what each connect does): dials what the
/// core asks, reports each result, until it is open, waits for a parent,
/// or is unreachable. Returns the dials, in order, and the outcome.
fn connect(
    core: &mut DialCore,
    mut net: impl FnMut(SocketAddr) -> io::Result<()>,
) -> (Vec<Action>, Outcome) {
    let mut dials = Vec::new();
    // Bounded: a core that dials forever fails here rather than hangs.
    for _ in 0..64 {
        let Some(action) = core.poll_action() else {
            return (dials, Outcome::Unreachable(core.give_up()));
        };
        let Action::Dial(addr, _) = action;
        dials.push(action);
        assert!(core.connecting());
        assert_eq!(core.poll_action(), None, "one connect at a time");
        let input = match net(addr) {
            Ok(()) => Input::Connected,
            Err(e) => Input::Failed(e),
        };
        match core.handle(input) {
            Outcome::Working if !core.connecting() && core.stage() == "tcp" => {}
            outcome => return (dials, outcome),
        }
    }
    panic!("the core never stops dialling: {:?} ...", &dials[..4]);
}

fn dial(addr: &str, vetted: &str) -> Action {
    Action::Dial(addr.parse().unwrap(), ip(vetted))
}

fn open(outcome: Outcome) -> Vec<u8> {
    match outcome {
        Outcome::Open { leftover } => leftover,
        other => panic!("not open: {other:?}"),
    }
}

/// The connect deadline of a stage started at virtual time zero.
fn connect_deadline() -> Deadline {
    deadline(10)
}

/// The parent's reason, exactly.
fn parent_why(outcome: Outcome) -> String {
    match outcome {
        Outcome::Unreachable(Unreachable::Parent(why)) => why,
        other => panic!("not the parent's failure: {other:?}"),
    }
}

/// A core connected to the parent at `url` for the vetted `to`, port 443.
fn asking(url: &str, to: &str) -> DialCore {
    let mut core = DialCore::new(vec![ip(to)], 443, Some(parent(url)), connect_deadline());
    let (dials, outcome) = connect(&mut core, |_| Ok(()));
    assert_eq!(dials.len(), 1);
    assert!(matches!(outcome, Outcome::Working), "{outcome:?}");
    assert_eq!(core.stage(), "parent-proxy");
    core
}

/// Asks the parent at `url` for `to`. The parent reads each message of
/// `script` (checking it is exactly what it must get) before it sends that
/// message's reply, as a real parent does; the replies, as one stream, are
/// cut in two at every byte (the parent pauses at the cut, and the core is
/// pumped in between). The outcome, per cut; an `Open` also carries any of
/// the stream never delivered (the relay would read it).
fn every_cut(url: &str, to: &str, script: Script) -> Vec<Outcome> {
    let messages: Vec<u8> = script.iter().flat_map(|(m, _)| m.to_vec()).collect();
    let replies: Vec<u8> = script.iter().flat_map(|(_, r)| r.to_vec()).collect();
    (0..=replies.len())
        .map(|cut| {
            let mut core = asking(url, to);
            let mut port = Shaped(MemPort::roomy(), Shape::Strict);
            let (mut heard, mut given) = (Vec::new(), 0);
            loop {
                let outcome = core.pump(&mut port);
                let took = port.0.take();
                heard.extend_from_slice(&took);
                assert!(messages.starts_with(&heard), "cut {cut}: sent {heard:?}");
                match outcome {
                    Outcome::Working => {}
                    Outcome::Open { mut leftover } => {
                        assert_eq!(heard, messages, "cut {cut}: opened before all was sent");
                        leftover.extend_from_slice(&replies[given..]);
                        return Outcome::Open { leftover };
                    }
                    failed => return failed,
                }
                // What the parent may send: the replies to each message it
                // has read in full.
                let mut may = 0;
                let mut read = 0;
                for (message, reply) in script {
                    read += message.len();
                    if heard.len() < read {
                        break;
                    }
                    may += reply.len();
                }
                let upto = if given < cut { may.min(cut) } else { may };
                assert!(upto > given || !took.is_empty(), "cut {cut}: stuck");
                port.0.deliver(&replies[given..upto]);
                given = upto;
            }
        })
        .collect()
}

/// A parent's side of a handshake: each message it reads, and its reply.
type Script<'a> = &'a [(&'a [u8], &'a [u8])];

/// What an HTTP parent must read, for `to`.
fn connect_request(to: &str) -> Vec<u8> {
    format!("CONNECT {to} HTTP/1.1\r\nHost: {to}\r\n\r\n").into_bytes()
}

/// SOCKS5, no authentication: the greeting, and the request for 192.0.2.7:443.
const SOCKS_HELLO: &[u8] = &[5, 1, 0];
const SOCKS_REQUEST: &[u8] = &[5, 1, 0, 1, 192, 0, 2, 7, 1, 187];
/// A SOCKS5 success reply (bound to 10.0.0.1:8080).
const SOCKS_OK: &[u8] = &[5, 0, 0, 1, 10, 0, 0, 1, 0x1f, 0x90];

/// A [`MemPort`] behind a transport of a given [`Shape`].
struct Shaped(MemPort, Shape);

#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// Fails the test when the core reads or writes without the
    /// transport's say-so: with a socket, each would be a syscall spent on
    /// `EAGAIN`.
    Strict,
    /// Has not flagged the reset a read or write will meet (the kernel's
    /// error event not in yet).
    Unflagged,
}

impl Wire for Shaped {
    fn read(&mut self, buf: &mut [u8]) -> Io {
        if self.1 == Shape::Strict {
            assert!(self.0.can_read(), "a read the transport did not offer");
        }
        self.0.read(buf)
    }
    fn write(&mut self, buf: &[u8]) -> Io {
        if self.1 == Shape::Strict {
            assert!(self.0.can_write(), "a write the transport did not offer");
        }
        self.0.write(buf)
    }
}

impl Port for Shaped {
    fn want_read(&mut self, on: bool) {
        self.0.want_read(on)
    }
    fn want_write(&mut self, on: bool) {
        self.0.want_write(on)
    }
    fn can_read(&self) -> bool {
        self.0.can_read()
    }
    fn can_write(&self) -> bool {
        self.0.can_write()
    }
    fn failed(&self) -> bool {
        self.1 != Shape::Unflagged && self.0.failed()
    }
    fn peer_finished(&self) -> bool {
        self.0.peer_finished()
    }
    fn shutdown_write(&mut self) {
        self.0.shutdown_write()
    }
}

// Direct.

/// The first vetted address that answers is the upstream: nothing is
/// dialled after it, and nothing is left over.
#[test]
fn direct_the_first_address_that_connects_is_open() {
    let mut core = DialCore::new(addrs(), 8443, None, connect_deadline());
    assert_eq!(core.stage(), "tcp");
    let (dials, outcome) = connect(&mut core, |_| Ok(()));
    assert_eq!(dials, [dial("192.0.2.1:8443", "192.0.2.1")]);
    assert_eq!(open(outcome), b"");
    assert_eq!(core.poll_action(), None, "nothing more to dial once open");
}

/// Failed connects fall back to the next address, in the vetted order, on
/// the target's port, whether the connect failed at once or later.
#[test]
fn direct_failures_fall_back_in_order_to_the_first_that_connects() {
    let mut core = DialCore::new(addrs(), 443, None, connect_deadline());
    let (dials, outcome) = connect(&mut core, |a| match a.ip() == ip("192.0.2.3") {
        true => Ok(()),
        false => Err(refused()),
    });
    assert_eq!(
        dials,
        [
            dial("192.0.2.1:443", "192.0.2.1"),
            dial("[2001:db8::2]:443", "2001:db8::2"),
            dial("192.0.2.3:443", "192.0.2.3"),
        ]
    );
    assert_eq!(open(outcome), b"");
}

/// When every address fails, the refusal carries the last connect's error
/// (not the first's), after every address was tried once.
#[test]
fn direct_every_address_failing_reports_the_last_error() {
    let mut core = DialCore::new(addrs(), 443, None, connect_deadline());
    let mut n = 0;
    let (dials, outcome) = connect(&mut core, |_| {
        n += 1;
        Err(io::Error::other(format!("failure {n}")))
    });
    assert_eq!(dials.len(), 4);
    match outcome {
        Outcome::Unreachable(Unreachable::Connect(e)) => assert_eq!(e.to_string(), "failure 4"),
        other => panic!("{other:?}"),
    }
    assert_eq!(core.poll_action(), None);
}

/// No address at all: refused as such, nothing dialled.
#[test]
fn direct_no_address_is_refused_as_such() {
    let mut core = DialCore::new(Vec::new(), 443, None, connect_deadline());
    let (dials, outcome) = connect(&mut core, |_| Ok(()));
    assert!(dials.is_empty());
    match outcome {
        Outcome::Unreachable(Unreachable::Connect(e)) => {
            assert_eq!(e.to_string(), "no address to connect to")
        }
        other => panic!("{other:?}"),
    }
}

// Through a parent.

/// The parent is dialled for the first vetted address; when it cannot be
/// reached, that is the parent's fault: no other address is tried, and the
/// refusal names the parent (without its password).
#[test]
fn a_parent_that_cannot_be_reached_is_not_tried_for_the_next_address() {
    let mut core = DialCore::new(
        addrs(),
        443,
        Some(parent("socks5://u:pw@127.0.0.1:1080")),
        connect_deadline(),
    );
    let (dials, outcome) = connect(&mut core, |_| Err(refused()));
    assert_eq!(dials, [dial("127.0.0.1:1080", "192.0.2.1")]);
    assert_eq!(
        parent_why(outcome),
        "cannot connect to socks5://u:***@127.0.0.1:1080: connection refused"
    );
    assert_eq!(core.poll_action(), None);
}

/// Connected to an HTTP parent, the core asks it for the vetted address
/// (never the name), and the tunnel opens on its 200, however the answer
/// is cut.
#[test]
fn an_http_parent_is_asked_for_the_vetted_address_and_opens_at_every_cut() {
    let request = b"CONNECT 192.0.2.7:443 HTTP/1.1\r\nHost: 192.0.2.7:443\r\n\r\n";
    for outcome in every_cut(HTTP_PARENT, "192.0.2.7", &[(request, OK_ANSWER)]) {
        assert_eq!(open(outcome), b"");
    }
}

/// With credentials, the CONNECT carries them as Basic; an IPv6 target is
/// bracketed.
#[test]
fn an_http_parent_with_credentials_gets_basic_auth() {
    let url = "http://agent:s3cret@127.0.0.1:3128";
    let request = "CONNECT [2001:db8::7]:443 HTTP/1.1\r\nHost: [2001:db8::7]:443\r\n\
                   Proxy-Authorization: Basic YWdlbnQ6czNjcmV0\r\n\r\n";
    let script: [(&[u8], &[u8]); 1] = [(request.as_bytes(), OK_ANSWER)];
    for outcome in every_cut(url, "2001:db8::7", &script) {
        assert_eq!(open(outcome), b"");
    }
}

/// A SOCKS5 parent without credentials: the greeting offers no
/// authentication, the request names the vetted IPv4 address; open at
/// every cut of the answers.
#[test]
fn a_socks5_parent_without_credentials_opens_at_every_cut() {
    let script = [(SOCKS_HELLO, &[5u8, 0][..]), (SOCKS_REQUEST, SOCKS_OK)];
    for outcome in every_cut("socks5://127.0.0.1:1080", "192.0.2.7", &script) {
        assert_eq!(open(outcome), b"");
    }
}

/// A SOCKS5 parent with a username and password (RFC 1929), to a vetted
/// IPv6 address, its reply's bound address a domain name: open at every
/// cut.
#[test]
fn a_socks5_parent_with_credentials_opens_at_every_cut() {
    let mut request = vec![5u8, 1, 0, 4, 0x20, 0x01, 0x0d, 0xb8];
    request.extend_from_slice(&[0; 11]);
    request.extend_from_slice(&[7, 1, 187]);
    let script: [(&[u8], &[u8]); 3] = [
        (&[5, 1, 2], &[5, 2]),
        (b"\x01\x05agent\x06s3cret", &[1, 0]),
        (&request, b"\x05\x00\x00\x03\x04bind\x00\x50"),
    ];
    let url = "socks5://agent:s3cret@127.0.0.1:1080";
    for outcome in every_cut(url, "2001:db8::7", &script) {
        assert_eq!(open(outcome), b"");
    }
}

/// A parent that answers each step only once it has read what it needs,
/// over a transport that moves one byte per call and takes our bytes only
/// as it frees room: the core waits for room (wanting to write) and for
/// answers (wanting to read), and gets there.
#[test]
fn a_socks5_conversation_one_byte_at_a_time() {
    let mut core = asking("socks5://u:p@127.0.0.1:1080", "192.0.2.7");
    let mut port = Shaped(MemPort::default(), Shape::Strict);
    port.0.max_io = 1;
    // No room: nothing is written, and a write is wanted.
    assert!(matches!(core.pump(&mut port), Outcome::Working));
    assert!(port.0.outbox.is_empty());
    let steps: [(&[u8], &[u8]); 3] = [
        (&[5, 1, 2], &[5, 2]),
        (&[1, 1, b'u', 1, b'p'], &[1, 0]),
        (
            &[5, 1, 0, 1, 192, 0, 2, 7, 1, 187],
            &[5, 0, 0, 1, 0, 0, 0, 0, 0, 0],
        ),
    ];
    let mut outcome = Outcome::Working;
    for (expect, reply) in steps {
        let mut got = Vec::new();
        while got.len() < expect.len() {
            port.0.room = 1;
            assert!(port.can_write(), "bytes wait: a write is wanted");
            outcome = core.pump(&mut port);
            assert!(matches!(outcome, Outcome::Working), "{outcome:?}");
            got.extend(port.0.take());
        }
        assert_eq!(got, expect);
        // Nothing more is sent before the answer, and none is wanted.
        port.0.room = 100;
        assert!(!port.can_write());
        assert!(matches!(core.pump(&mut port), Outcome::Working));
        assert!(port.0.outbox.is_empty());
        port.0.room = 0;
        port.0.deliver(reply);
        assert!(port.can_read(), "the answer is wanted");
        outcome = core.pump(&mut port);
    }
    assert_eq!(open(outcome), b"");
}

/// An HTTP parent's refusal is refused with its status, reason and
/// X-Proxy-Error, exactly, at every cut.
#[test]
fn an_http_parent_refusal_says_exactly_why() {
    let cases: [(&[u8], &str); 3] = [
        (
            b"HTTP/1.1 403 Forbidden\r\nX-Proxy-Error: denied; no-matching-rule\r\nContent-Length: 0\r\n\r\n",
            "the parent proxy answered 403 Forbidden (denied; no-matching-rule)",
        ),
        (
            b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic\r\n\r\n",
            "the parent proxy answered 407 Proxy Authentication Required",
        ),
        (
            b"HTTP/1.0 502 Bad Gateway\r\n\r\nsorry",
            "the parent proxy answered 502 Bad Gateway",
        ),
    ];
    let request = connect_request("192.0.2.7:443");
    for (answer, why) in cases {
        for outcome in every_cut(HTTP_PARENT, "192.0.2.7", &[(&request, answer)]) {
            assert_eq!(parent_why(outcome), why);
        }
    }
}

/// A SOCKS5 parent's refusals: of the connect (with its reply code), of our
/// credentials, of every method we offered.
#[test]
fn a_socks5_parent_refusal_says_exactly_why() {
    let url = "socks5://u:p@127.0.0.1:1080";
    let (hello, auth): (&[u8], &[u8]) = (&[5, 1, 2], &[1, 1, b'u', 1, b'p']);
    let cases: [(Script, &str); 3] = [
        (
            &[
                (hello, &[5, 2]),
                (auth, &[1, 0]),
                (SOCKS_REQUEST, &[5, 2, 0, 1, 0, 0, 0, 0, 0, 0]),
            ],
            "the parent proxy refused the SOCKS5 connect (reply 0x02: not allowed by ruleset)",
        ),
        (
            &[(hello, &[5, 2]), (auth, &[1, 1])],
            "the parent proxy rejected our SOCKS5 credentials",
        ),
        (
            &[(hello, &[5, 0xff])],
            "the parent proxy accepted none of our SOCKS5 authentication methods",
        ),
    ];
    for (script, why) in cases {
        for outcome in every_cut(url, "192.0.2.7", script) {
            assert_eq!(parent_why(outcome), why);
        }
    }
}

/// The parent's FIN before its answer is complete (or before any of it):
/// refused as closing before answering, however much came first.
#[test]
fn a_parent_closing_before_answering_is_refused() {
    for cut in 0..OK_ANSWER.len() {
        let mut core = asking(HTTP_PARENT, "192.0.2.7");
        let mut port = MemPort::roomy();
        port.deliver(&OK_ANSWER[..cut]);
        assert!(matches!(core.pump(&mut port), Outcome::Working));
        port.fin = true;
        assert_eq!(
            parent_why(core.pump(&mut port)),
            "the parent proxy closed the connection before answering"
        );
    }
}

/// A reset the transport reports (an error event) ends the handshake as
/// the parent closing the connection, whatever came before it.
#[test]
fn a_parent_reset_reported_by_the_transport_is_refused() {
    let mut core = asking(HTTP_PARENT, "192.0.2.7");
    let mut port = MemPort::roomy();
    port.deliver(b"HTTP/1.1 200 Conn");
    assert!(matches!(core.pump(&mut port), Outcome::Working));
    port.reset = true;
    assert_eq!(
        parent_why(core.pump(&mut port)),
        "the parent proxy closed the connection"
    );
}

/// A reset met by a read mid-answer (before the transport flagged it), or
/// by the write of our request: refused with the error.
#[test]
fn a_parent_reset_met_by_a_read_or_a_write_is_refused_with_the_error() {
    let mut core = asking(HTTP_PARENT, "192.0.2.7");
    let mut port = Shaped(MemPort::roomy(), Shape::Unflagged);
    assert!(matches!(core.pump(&mut port), Outcome::Working));
    port.0.deliver(b"HTTP/1.1 200 Conn");
    port.0.reset = true;
    assert_eq!(
        parent_why(core.pump(&mut port)),
        "the parent proxy: connection reset"
    );

    let mut core = asking(HTTP_PARENT, "192.0.2.7");
    let mut port = Shaped(MemPort::roomy(), Shape::Unflagged);
    port.0.reset = true;
    assert_eq!(
        parent_why(core.pump(&mut port)),
        "the parent proxy: broken pipe"
    );
}

/// Bytes behind the parent's answer are the destination's: handed out
/// with the open upstream, at every cut, for HTTP and SOCKS5 parents.
#[test]
fn bytes_behind_the_answer_are_handed_out_at_every_cut() {
    let request = connect_request("192.0.2.7:443");
    let answer = [OK_ANSWER, b"SSH-2.0-x\r\n"].concat();
    for outcome in every_cut(HTTP_PARENT, "192.0.2.7", &[(&request, &answer)]) {
        assert_eq!(open(outcome), b"SSH-2.0-x\r\n");
    }
    let answer = [SOCKS_OK, b"hi"].concat();
    let script = [(SOCKS_HELLO, &[5u8, 0][..]), (SOCKS_REQUEST, &answer)];
    for outcome in every_cut("socks5://127.0.0.1:1080", "192.0.2.7", &script) {
        assert_eq!(open(outcome), b"hi");
    }
}

/// More behind the answer than one read takes: the read that finished the
/// handshake is handed out, the rest stays in the transport for the relay;
/// no byte is lost or read twice.
#[test]
fn a_long_tail_behind_the_answer_stays_in_the_transport() {
    let mut core = asking(HTTP_PARENT, "192.0.2.7");
    let mut port = MemPort::roomy();
    let tail: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
    port.deliver(OK_ANSWER);
    port.deliver(&tail);
    let leftover = open(core.pump(&mut port));
    assert!(!leftover.is_empty() && leftover.len() < tail.len());
    let rest: Vec<u8> = port.inbox.iter().copied().collect();
    assert_eq!([leftover, rest].concat(), tail);
}

/// Pumping before the parent stage moves nothing (the connect is in flight).
#[test]
fn nothing_is_sent_before_the_connect_completes() {
    let mut core = DialCore::new(
        vec![ip("192.0.2.7")],
        443,
        Some(parent(HTTP_PARENT)),
        connect_deadline(),
    );
    assert!(core.poll_action().is_some());
    let mut port = MemPort::roomy();
    assert!(matches!(core.pump(&mut port), Outcome::Working));
    assert!(port.outbox.is_empty());
}

// Timeouts.

/// The connect deadline passing: a plain timeout when direct; through a
/// parent, its delay in connecting or in answering, each said so. Not a
/// moment before it.
#[test]
fn a_timeout_is_refused_as_the_stage_it_caught_says() {
    let mut core = DialCore::new(addrs(), 443, None, connect_deadline());
    core.poll_action();
    assert_eq!(core.stage(), "tcp");
    assert!(core.handle_timeout(at(9, 999)).is_none(), "not yet");
    assert!(matches!(
        core.handle_timeout(at(10, 0)),
        Some(Unreachable::Timeout)
    ));

    let mut core = DialCore::new(addrs(), 443, Some(parent(HTTP_PARENT)), connect_deadline());
    core.poll_action();
    assert_eq!(core.stage(), "tcp");
    match core.handle_timeout(at(10, 0)) {
        Some(Unreachable::Parent(why)) => {
            assert_eq!(why, "timed out connecting to http://127.0.0.1:3128")
        }
        other => panic!("{other:?}"),
    }

    let mut core = asking("socks5://u:p@127.0.0.1:1080", "192.0.2.7");
    let mut port = MemPort::roomy();
    port.deliver(&[5, 2]);
    assert!(matches!(core.pump(&mut port), Outcome::Working));
    assert_eq!(core.stage(), "parent-proxy");
    assert!(core.handle_timeout(at(9, 999)).is_none(), "not yet");
    match core.handle_timeout(at(11, 0)) {
        Some(Unreachable::Parent(why)) => {
            assert_eq!(why, "no answer from socks5://u:***@127.0.0.1:1080 in time")
        }
        other => panic!("{other:?}"),
    }
    // Said once: the core is spent.
    assert!(core.poll_action().is_none());
}

// Reloads.

/// A reload keeps, of the addresses not yet tried, only those the new
/// policy treats the same, in order; the address in flight and those tried
/// before are not its business.
#[test]
fn a_reload_prunes_only_the_untried_addresses() {
    let mut core = DialCore::new(addrs(), 443, None, connect_deadline());
    let Some(Action::Dial(_, first)) = core.poll_action() else {
        panic!()
    };
    assert_eq!(first, ip("192.0.2.1"));
    assert!(matches!(
        core.handle(Input::Failed(refused())),
        Outcome::Working
    ));
    // 2001:db8::2 in flight now.
    assert!(core.poll_action().is_some());
    let mut asked = Vec::new();
    core.retain_untried(|a| {
        asked.push(a);
        a != ip("192.0.2.3")
    });
    assert_eq!(
        asked,
        [ip("192.0.2.3"), ip("192.0.2.4")],
        "only the untried"
    );
    assert!(matches!(
        core.handle(Input::Failed(refused())),
        Outcome::Working
    ));
    assert_eq!(core.poll_action(), Some(dial("192.0.2.4:443", "192.0.2.4")));
    assert!(matches!(
        core.handle(Input::Failed(refused())),
        Outcome::Unreachable(_)
    ));
}

/// A reload that leaves nothing untried: the connect in flight is the last
/// chance, and its failure is reported.
#[test]
fn a_reload_that_leaves_nothing_makes_the_connect_in_flight_the_last() {
    let mut core = DialCore::new(addrs(), 443, None, connect_deadline());
    assert!(core.poll_action().is_some());
    core.retain_untried(|_| false);
    let e = io::Error::from(io::ErrorKind::TimedOut);
    match core.handle(Input::Failed(e)) {
        Outcome::Unreachable(Unreachable::Connect(e)) => {
            assert_eq!(e.kind(), io::ErrorKind::TimedOut)
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(core.poll_action(), None);
}

// A parent that answers ahead of us.

/// A SOCKS5 parent that sends its connect reply (and the destination's
/// bytes) together with its method choice, before our request (or our
/// credentials) went out: no tunnel opens on an answer to a request never
/// sent, and nothing more is sent to it.
#[test]
fn a_socks5_answer_ahead_of_our_request_opens_nothing() {
    let cases: [(&str, Vec<u8>); 2] = [
        (
            "socks5://127.0.0.1:1080",
            [&[5u8, 0][..], SOCKS_OK, b"hi"].concat(),
        ),
        (
            "socks5://u:p@127.0.0.1:1080",
            [&[5u8, 2, 1, 0][..], SOCKS_OK, b"hi"].concat(),
        ),
    ];
    for (url, early) in cases {
        let mut core = asking(url, "192.0.2.7");
        let mut port = MemPort::roomy();
        // The greeting goes out; the parent's reply is not in yet.
        assert!(matches!(core.pump(&mut port), Outcome::Working));
        let greeting = port.take();
        assert_eq!(greeting.first(), Some(&5), "{url}");
        port.deliver(&early);
        assert_eq!(
            parent_why(core.pump(&mut port)),
            "the parent proxy answered before our request",
            "{url}"
        );
        assert!(port.take().is_empty(), "{url}: sent after its answer");
    }
}
