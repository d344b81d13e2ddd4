//! A vetted raw tunnel in the simulator: the reply before any read, the
//! first flight read whole however it is split, and each verdict a real
//! policy gives the names it carries (refused, inspected, held to its
//! host, relayed), with the texts users see.

use std::sync::Arc;
use std::time::Instant;

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection};

use super::Rng;
use crate::core::mem::MemPort;
use crate::core::vetting::{Next, TimedOut, Verdict, VettingCore};
use crate::policy::{parse_cli_inspect, parse_cli_rule, parse_cli_terminate, Action, Policy};
use crate::protocol::first_flight::{self, FirstFlight};
use crate::target::Target;
use crate::tls::tests::Fixture;

const REPLY: &[u8] = b"HTTP/1.1 200 Connection Established\r\n\r\n";

/// Raw to other.test; good.test terminated, plain.test inspected,
/// evil.test refused.
fn policy() -> Policy {
    Policy::from_rules(&[
        parse_cli_terminate("good.test:443").unwrap(),
        parse_cli_inspect("plain.test:80").unwrap(),
        parse_cli_rule(Action::Deny, "evil.test:443").unwrap(),
        parse_cli_rule(Action::Allow, "other.test:443").unwrap(),
        parse_cli_rule(Action::Allow, "other.test:80").unwrap(),
    ])
    .unwrap()
}

fn tunnel(port: u16) -> Target {
    Target::new("other.test", port).unwrap()
}

/// A ClientHello for `sni`, from rustls.
fn client_hello(config: Arc<ClientConfig>, sni: &str) -> Vec<u8> {
    let name = ServerName::try_from(sni.to_owned()).unwrap();
    let mut conn = ClientConnection::new(config, name).unwrap();
    let mut wire = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut wire).unwrap();
    }
    wire
}

/// Runs the core on `first` (delivered whole) and judges what it read.
fn verdict_for(first: &[u8], port: u16) -> Verdict {
    let mut core = VettingCore::new(Vec::new(), Vec::new(), tunnel(port), super::deadline(10));
    let (mut client, mut upstream) = (MemPort::roomy(), MemPort::roomy());
    client.deliver(first);
    let flight = match core.pump(&mut client, &mut upstream) {
        Next::Flight(f) => f,
        other => panic!("{other:?}"),
    };
    judge(&core, flight, port, false)
}

fn judge(core: &VettingCore, flight: FirstFlight, port: u16, spoke: bool) -> Verdict {
    let p = policy();
    core.judge(flight, spoke, |named| {
        p.fronting(&tunnel(port), None, named, Instant::now())
    })
}

fn get(host: &str) -> Vec<u8> {
    format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n").into_bytes()
}

#[test]
fn the_reply_goes_first_and_nothing_is_read_or_watched_before_it() {
    let mut core = VettingCore::new(REPLY.to_vec(), Vec::new(), tunnel(80), super::deadline(10));
    let mut client = MemPort::default();
    client.room = 7;
    let mut upstream = MemPort::roomy();
    client.deliver(&get("other.test"));
    assert!(matches!(core.pump(&mut client, &mut upstream), Next::Wait));
    assert_eq!(core.stage(), "reply");
    assert_eq!((client.read_total, upstream.read_total), (0, 0));
    let mut got = client.take();
    let mut next = Next::Wait;
    while core.stage() == "reply" {
        client.room = 7;
        next = core.pump(&mut client, &mut upstream);
        got.extend(client.take());
    }
    assert_eq!(got, REPLY);
    // The call that sent the reply's last bytes read the flight.
    assert!(
        matches!(next, Next::Flight(FirstFlight::Http { .. })),
        "{next:?}"
    );
    assert_eq!(upstream.read_total, 0, "the upstream is never read here");
}

/// A destination that has spoken when the first flight is first looked
/// at is no TLS or HTTP front (those wait for the client): relayed, even
/// with the client's bytes there too.
#[test]
fn an_upstream_banner_beside_the_first_flight_means_no_front() {
    let mut core = VettingCore::new(Vec::new(), Vec::new(), tunnel(443), super::deadline(10));
    let (mut client, mut upstream) = (MemPort::roomy(), MemPort::roomy());
    client.deliver(&get("evil.test"));
    upstream.deliver(b"220 smtp.other.test ESMTP\r\n");
    assert!(matches!(core.pump(&mut client, &mut upstream), Next::Relay));
}

#[test]
fn a_first_flight_split_anywhere_is_read_whole() {
    let f = Fixture::new();
    let hello = client_hello(f.clients().config(), "good.test");
    for bytes in [hello, get("plain.test")] {
        for early in [0, 1, 5, bytes.len() / 2] {
            let mut core = VettingCore::new(
                Vec::new(),
                bytes[..early].to_vec(),
                tunnel(443),
                super::deadline(10),
            );
            let (mut client, mut upstream) = (MemPort::roomy(), MemPort::roomy());
            let mut next = core.pump(&mut client, &mut upstream);
            for b in &bytes[early..] {
                assert!(matches!(next, Next::Wait), "early {early}: {next:?}");
                client.deliver(&[*b]);
                next = core.pump(&mut client, &mut upstream);
            }
            assert!(matches!(next, Next::Flight(_)), "early {early}: {next:?}");
            assert_eq!(core.into_first(), bytes, "every byte kept for the tunnel");
        }
    }
}

#[test]
fn an_sni_a_rule_terminates_switches_the_tunnel_to_it() {
    let f = Fixture::new();
    match verdict_for(&client_hello(f.clients().config(), "good.test"), 443) {
        Verdict::Switch { to, why } => {
            assert_eq!(to, Target::new("good.test", 443).unwrap());
            assert_eq!(
                why,
                "fronting sni=good.test target=other.test:443: rule --terminate good.test:443 \
                 terminates and inspects good.test; treated as a tunnel to good.test:443"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_sni_a_rule_refuses_gets_an_access_denied_alert() {
    let f = Fixture::new();
    match verdict_for(&client_hello(f.clients().config(), "evil.test"), 443) {
        Verdict::Refuse { answer, why, rule } => {
            assert_eq!(answer, [0x15, 3, 3, 0, 2, 2, 49], "access_denied");
            assert!(
                why.starts_with(
                    "fronting sni=evil.test target=other.test:443: evil.test is refused"
                ),
                "{why}"
            );
            assert_eq!(rule.as_deref(), Some("--deny evil.test:443"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_tunnels_own_name_or_no_sni_is_relayed() {
    let f = Fixture::new();
    let own = verdict_for(&client_hello(f.clients().config(), "other.test"), 443);
    assert!(matches!(own, Verdict::Relay), "{own:?}");
    // An IP literal as the server name: rustls sends no SNI.
    let bare = verdict_for(&client_hello(f.clients().config(), "192.0.2.1"), 443);
    assert!(matches!(bare, Verdict::Relay), "{bare:?}");
}

#[test]
fn plaintext_http_is_held_to_the_host_it_names_first() {
    match verdict_for(&get("other.test"), 80) {
        Verdict::HoldToHost(host) => assert_eq!(host, tunnel(80)),
        other => panic!("{other:?}"),
    }
    // A destination that spoke already cannot be an HTTP front: relayed.
    let mut core = VettingCore::new(
        Vec::new(),
        get("other.test"),
        tunnel(80),
        super::deadline(10),
    );
    let Next::Flight(flight) = core.pump(&mut MemPort::roomy(), &mut MemPort::roomy()) else {
        panic!("no flight");
    };
    assert!(matches!(judge(&core, flight, 80, true), Verdict::Relay));
}

#[test]
fn a_host_a_rule_inspects_switches_the_tunnel_to_it() {
    match verdict_for(&get("PLAIN.test."), 80) {
        Verdict::Switch { to, why } => {
            assert_eq!(to, Target::new("plain.test", 80).unwrap());
            assert!(
                why.contains("rule --inspect plain.test:80 inspects"),
                "{why}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_refused_host_gets_a_403_that_says_fronting() {
    let answer = match verdict_for(&get("evil.test:443"), 443) {
        Verdict::Refuse { answer, .. } => String::from_utf8(answer).unwrap(),
        other => panic!("{other:?}"),
    };
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert!(answer.contains("X-Proxy-Error: fronting"), "{answer}");
}

#[test]
fn a_host_that_is_no_host_name_is_refused() {
    match verdict_for(&get("bad host"), 80) {
        Verdict::Refuse { why, rule, .. } => {
            assert!(why.contains("not a host name"), "{why}");
            assert!(rule.is_none());
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn malformed_and_oversized_first_flights_are_refused_in_their_dialect() {
    // A handshake record that is no ClientHello: an alert.
    let broken = [0x16, 3, 1, 0, 4, 0x02, 0, 0, 0];
    match verdict_for(&broken, 443) {
        Verdict::Refuse { answer, why, .. } => {
            assert_eq!(answer[0], 0x15, "{why}");
        }
        other => panic!("{other:?}"),
    }
    // A request head that never ends: over the bound, a 403.
    let mut long = b"GET / HTTP/1.1\r\nX-Pad: ".to_vec();
    long.resize(64 * 1024, b'a');
    match verdict_for(&long, 80) {
        Verdict::Refuse { answer, why, .. } => {
            assert!(why.contains("the first flight is over"), "{why}");
            assert!(answer.starts_with(b"HTTP/1.1 403"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn neither_tls_nor_http_is_relayed() {
    let v = verdict_for(b"SSH-2.0-OpenSSH_9.6\r\n", 443);
    assert!(matches!(v, Verdict::Relay), "{v:?}");
}

#[test]
fn an_upstream_that_speaks_before_the_client_is_relayed() {
    let mut core = VettingCore::new(Vec::new(), Vec::new(), tunnel(443), super::deadline(10));
    let (mut client, mut upstream) = (MemPort::roomy(), MemPort::roomy());
    assert!(matches!(core.pump(&mut client, &mut upstream), Next::Wait));
    upstream.deliver(b"220 smtp.other.test ESMTP\r\n");
    assert!(matches!(core.pump(&mut client, &mut upstream), Next::Relay));
    assert_eq!(upstream.read_total, 0, "watched, never read");
    // But once the client has begun, its flight is what counts.
    let mut core = VettingCore::new(
        Vec::new(),
        b"GET / HT".to_vec(),
        tunnel(80),
        super::deadline(10),
    );
    let mut upstream = MemPort::roomy();
    upstream.deliver(b"hello");
    assert!(matches!(
        core.pump(&mut MemPort::roomy(), &mut upstream),
        Next::Wait
    ));
}

#[test]
fn a_client_that_leaves_before_its_flight_is_whole_is_gone() {
    for reset in [false, true] {
        let mut core = VettingCore::new(
            Vec::new(),
            b"GET / HT".to_vec(),
            tunnel(80),
            super::deadline(10),
        );
        let mut client = MemPort::roomy();
        if reset {
            client.reset = true;
        } else {
            client.fin = true;
        }
        assert!(matches!(
            core.pump(&mut client, &mut MemPort::roomy()),
            Next::ClientGone
        ));
    }
}

#[test]
fn the_timeout_says_how_to_fix_it_once_the_reply_is_out() {
    let core = VettingCore::new(REPLY.to_vec(), Vec::new(), tunnel(443), super::deadline(10));
    assert_eq!(
        timed_out(&core),
        Err(None),
        "the client was never asked yet"
    );
    let core = VettingCore::new(
        Vec::new(),
        b"GET".to_vec(),
        tunnel(443),
        super::deadline(10),
    );
    let note = timed_out(&core).unwrap_err().unwrap();
    assert!(note.contains("the first 3 bytes"), "{note}");
    assert!(note.contains("send this protocol to another port, or inspect or terminate it"));
}

/// A first request that names no host (HTTP/1.0, or HTTP/1.1 without a
/// `Host`) opens no raw tunnel: a keep-alive request behind it could name
/// any host the edge serves (`Host: plain.test` on a tunnel to
/// other.test). It is held to the tunnel's own host, as if it had named it.
#[test]
fn a_first_request_naming_no_host_is_held_to_the_tunnels_host() {
    for first in [
        &b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"[..],
        b"GET / HTTP/1.1\r\n\r\n",
        b"GET / HTTP/1.1\r\n\r\nGET /admin HTTP/1.1\r\nHost: plain.test\r\n\r\n",
    ] {
        match verdict_for(first, 80) {
            Verdict::HoldToHost(host) => assert_eq!(host, tunnel(80)),
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(first)),
        }
    }
}

/// A request head that goes wrong before its end, in two reads: the first
/// is parsed (a first read always is), the second held back by the gate
/// (no empty line yet, not twice the bytes), though a parse on arrival
/// would refuse it already.
fn held_back_head(core: &mut VettingCore, client: &mut MemPort) {
    let upstream = &mut MemPort::roomy();
    client.deliver(b"GET / HTTP/1.1\r\nHost: other.test\r\n");
    assert!(matches!(core.pump(client, upstream), Next::Wait));
    client.deliver(b"Bad Header: x\r\n");
    assert!(matches!(core.pump(client, upstream), Next::Wait));
}

/// The deadline passed (after checking it does nothing a moment before):
/// the flight to judge, or the note of a plain timeout.
fn timed_out(core: &VettingCore) -> Result<FirstFlight, Option<String>> {
    assert_eq!(core.poll_timeout(), super::at(10, 0));
    assert_eq!(core.handle_timeout(super::at(9, 999)), None, "not yet");
    match core.handle_timeout(super::at(10, 0)) {
        Some(TimedOut::Judge(flight)) => Ok(flight),
        Some(TimedOut::Close { note }) => Err(note),
        None => panic!("not timed out at the deadline"),
    }
}

const REFUSED_HEAD: FirstFlight = FirstFlight::Malformed("a request head that does not parse");

/// At the deadline, what the gate held back gets the verdict a parse on
/// arrival gave (a malformed head refused with a 403 that says why), not
/// a bare timeout; what needs more still times out.
#[test]
fn a_flight_the_gate_held_back_gets_its_verdict_at_the_deadline() {
    let mut core = VettingCore::new(Vec::new(), Vec::new(), tunnel(80), super::deadline(10));
    let mut client = MemPort::roomy();
    held_back_head(&mut core, &mut client);
    let flight = timed_out(&core).expect("a verdict, not a timeout");
    assert_eq!(flight, REFUSED_HEAD);
    match judge(&core, flight, 80, false) {
        Verdict::Refuse { answer, why, .. } => {
            assert!(answer.starts_with(b"HTTP/1.1 403"));
            assert!(why.contains("a request head that does not parse"), "{why}");
        }
        other => panic!("{other:?}"),
    }
    // A whole flight never looked at yet: its own verdict.
    let core = VettingCore::new(
        Vec::new(),
        get("evil.test"),
        tunnel(443),
        super::deadline(10),
    );
    let flight = timed_out(&core).expect("a verdict, not a timeout");
    assert!(matches!(
        judge(&core, flight, 443, false),
        Verdict::Refuse { .. }
    ));
    // A flight that needs more, or one not asked for yet: timed out.
    let core = VettingCore::new(
        Vec::new(),
        b"GET / HTTP/1.1\r\nHost: a".to_vec(),
        tunnel(80),
        super::deadline(10),
    );
    assert!(timed_out(&core).is_err());
    let core = VettingCore::new(
        REPLY.to_vec(),
        get("evil.test"),
        tunnel(80),
        super::deadline(10),
    );
    assert!(timed_out(&core).is_err());
}

/// A client that ends (or resets) after a flight the gate held back gets
/// the verdict a parse on arrival gave, before its end was seen.
#[test]
fn a_flight_the_gate_held_back_is_judged_when_the_client_leaves() {
    for reset in [false, true] {
        let mut core = VettingCore::new(Vec::new(), Vec::new(), tunnel(80), super::deadline(10));
        let mut client = MemPort::roomy();
        held_back_head(&mut core, &mut client);
        if reset {
            client.reset = true;
        } else {
            client.fin = true;
        }
        match core.pump(&mut client, &mut MemPort::roomy()) {
            Next::Flight(flight) => assert_eq!(flight, REFUSED_HEAD),
            other => panic!("reset {reset}: {other:?}"),
        }
    }
}

/// `hello` (one record, as rustls writes it) re-split into records of at
/// most `most` bytes.
fn in_records(hello: &[u8], most: usize, rng: &mut Rng) -> Vec<u8> {
    assert_eq!(
        hello.len(),
        5 + (usize::from(hello[3]) << 8 | usize::from(hello[4]))
    );
    let mut rest = &hello[5..];
    let mut out = Vec::new();
    while !rest.is_empty() {
        let n = (1 + rng.below(most)).min(rest.len());
        out.extend([0x16, 0x03, 0x01, 0x00, n as u8]);
        out.extend(&rest[..n]);
        rest = &rest[n..];
    }
    out
}

/// Flights in random pieces (down to a byte), a ClientHello in random
/// records (down to a byte): the verdict comes at the very read that
/// decides the flight (as parsing everything at every read says), never
/// later; every byte is kept for the tunnel.
#[test]
fn a_flight_in_pieces_gets_its_verdict_at_the_read_that_decides_it() {
    let f = Fixture::new();
    let hello = client_hello(f.clients().config(), "good.test");
    let mut rng = Rng(0x51_7cc1_b727_220a);
    for case in 0..300 {
        let most = rng.pick(&[1, 2, 16, 300]);
        let mut bytes = match rng.below(7) {
            0 | 1 => in_records(&hello, most, &mut rng),
            2 => get("plain.test"),
            3 => [&b"\r\n\r\n"[..], &get("evil.test")].concat(),
            // Neither, at the first word's end, or at the first line's.
            4 => b"SSH-2.0-OpenSSH_9.6p1_Ubuntu-3ubuntu13.5\r\n".to_vec(),
            5 => b"hello there, this is no request line\r\nmore".to_vec(),
            _ => b"get /x HTTP/1.1\r\nHost: other.test\r\n\r\n".to_vec(),
        };
        if bytes[0] == 0x16 && rng.below(3) == 0 {
            // A record no ClientHello is sent in, somewhere.
            let at = rng.below(bytes.len());
            bytes.splice(at..at, [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x28]);
        }
        let mut core = VettingCore::new(Vec::new(), Vec::new(), tunnel(443), super::deadline(10));
        let (mut client, mut upstream) = (MemPort::roomy(), MemPort::roomy());
        let mut at = 0;
        while at < bytes.len() {
            let piece = rng.pick(&[1, 3, 50]);
            let n = (1 + rng.below(piece)).min(bytes.len() - at);
            client.deliver(&bytes[at..at + n]);
            at += n;
            let want = first_flight::parse(&bytes[..at]);
            match core.pump(&mut client, &mut upstream) {
                Next::Wait if want == FirstFlight::NeedMore => {}
                Next::Flight(got) => {
                    assert_eq!(got, want, "case {case} at {at}");
                    break;
                }
                other => panic!("case {case} at {at}: {other:?}, a parse says {want:?}"),
            }
        }
        assert_eq!(core.into_first(), bytes[..at], "case {case}: all kept");
    }
}

/// A ClientHello whose record header carries another version than 0x0301
/// to 0x0304: a server reads it as TLS (RFC 8446 5.1: the field is ignored;
/// rustls and OpenSSL check only its major byte, Go only that it is under
/// 0x1000), so the name it carries must be vetted, not relayed raw as
/// "neither TLS nor HTTP".
#[test]
fn a_client_hello_with_an_odd_record_version_is_vetted() {
    let f = Fixture::new();
    let hello = client_hello(f.clients().config(), "evil.test");
    for version in [
        [0x03, 0x05],
        [0x03, 0xff],
        [0x00, 0x00],
        [0x02, 0x00],
        [0x0f, 0xff],
    ] {
        let mut odd = hello.clone();
        odd[1..3].copy_from_slice(&version);
        if version[0] == 0x03 {
            // A real server takes it for the ClientHello it is.
            let mut acceptor = rustls::server::Acceptor::default();
            acceptor.read_tls(&mut &odd[..]).unwrap();
            let accepted = acceptor.accept().map_err(|(e, _)| e).unwrap().unwrap();
            assert_eq!(accepted.client_hello().server_name(), Some("evil.test"));
        }
        let v = verdict_for(&odd, 443);
        assert!(
            matches!(v, Verdict::Refuse { .. }),
            "record version {version:02x?}: {v:?}"
        );
    }
}

/// A warning alert before the ClientHello: Go's and rustls's servers drop
/// it (a warning before any version is agreed) and read the ClientHello
/// behind it, so the flight must be vetted as TLS (refused: a record other
/// than a handshake before the ClientHello), not relayed raw as neither
/// TLS nor HTTP.
#[test]
fn a_client_hello_behind_a_warning_alert_is_not_relayed() {
    let f = Fixture::new();
    let hello = client_hello(f.clients().config(), "evil.test");
    // user_canceled (90), a warning.
    let mut flight = vec![0x15, 0x03, 0x01, 0x00, 0x02, 0x01, 90];
    flight.extend_from_slice(&hello);
    assert_eq!(server_reads_sni(&flight).as_deref(), Some("evil.test"));
    match verdict_for(&flight, 443) {
        Verdict::Refuse { answer, .. } => assert_eq!(answer[0], 0x15, "an alert: {answer:?}"),
        other => panic!("{other:?}"),
    }
}

/// The SNI a rustls server reads from `flight` (its certificate lookup).
fn server_reads_sni(flight: &[u8]) -> Option<String> {
    use rustls::server::{ClientHello, ResolvesServerCert};
    use rustls::sign::CertifiedKey;
    use std::sync::Mutex;
    #[derive(Debug, Default)]
    struct Seen(Mutex<Option<String>>);
    impl ResolvesServerCert for Seen {
        fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
            *self.0.lock().unwrap() = hello.server_name().map(str::to_owned);
            None
        }
    }
    let seen = Arc::new(Seen::default());
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_cert_resolver(seen.clone());
    let mut server = rustls::ServerConnection::new(Arc::new(config)).unwrap();
    let mut rest = flight;
    while !rest.is_empty() && server.read_tls(&mut rest).unwrap() > 0 {
        if server.process_new_packets().is_err() {
            break;
        }
    }
    let name = seen.0.lock().unwrap().clone();
    name
}

/// Request lines a lenient server takes (RFC 9112 3 lets it split on any
/// whitespace: HAProxy takes tabs and runs of blanks, nginx runs of
/// spaces and blanks after the version) and routes by their `Host`: they
/// are refused as malformed, never relayed raw as "neither TLS nor HTTP".
#[test]
fn a_request_line_with_odd_whitespace_is_not_relayed() {
    for line in [
        "GET\t/ HTTP/1.1",
        "get\t/\tHTTP/1.1",
        "get  / HTTP/1.1",
        "get / HTTP/1.1 ",
        "get /  HTTP/1.1",
        "get\x0b/ HTTP/1.1",
    ] {
        let flight = format!("{line}\r\nHost: plain.test\r\n\r\n");
        let v = verdict_for(flight.as_bytes(), 80);
        assert!(matches!(v, Verdict::Refuse { .. }), "{line:?}: {v:?}");
    }
    // A line that names no HTTP version is still no request.
    let v = verdict_for(b"SSH-2.0-OpenSSH_9.6 Ubuntu-3\r\n", 443);
    assert!(matches!(v, Verdict::Relay), "{v:?}");
}

/// A PROXY protocol v2 header the client wrote, then a request or a
/// ClientHello naming an inspected host: nginx (`listen ... proxy_protocol`)
/// and HAProxy (`accept-proxy`) read the header from any client and route
/// by the name behind it (checked against nginx 1.22 and HAProxy 2.6).
/// Refused, never relayed raw as naming nothing.
#[test]
fn a_proxy_protocol_header_before_the_flight_is_not_relayed() {
    let f = Fixture::new();
    let mut header = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    header.extend([
        0x21, 0x11, 0, 12, 10, 0, 0, 1, 10, 0, 0, 2, 0x04, 0x57, 0, 80,
    ]);
    for (behind, port) in [
        (get("plain.test"), 80),
        (client_hello(f.clients().config(), "good.test"), 443),
    ] {
        let flight = [header.clone(), behind].concat();
        match verdict_for(&flight, port) {
            Verdict::Refuse { why, .. } => {
                assert!(why.contains("a PROXY protocol header"), "{why}");
            }
            other => panic!("{port}: {other:?}"),
        }
    }
}

/// An HTTP/0.9 request split by a tab (`GET`, a target, no version):
/// HAProxy with `option accept-invalid-http-request` takes it, as HTTP/1.0,
/// and sends it on with its absolute-form target, which names where it
/// goes (checked against HAProxy 2.6 in front of nginx 1.22). Refused like
/// the same line split by a space, never relayed raw.
#[test]
fn an_http_0_9_request_split_by_a_tab_is_not_relayed() {
    for flight in [
        &b"GET\thttp://plain.test/\r\n\r\n"[..],
        b"GET\thttp://plain.test/\r\n",
        b"\r\nGET\thttp://plain.test/ \r\n",
        b"GET http://plain.test/\r\n",
    ] {
        let v = verdict_for(flight, 80);
        assert!(matches!(v, Verdict::Refuse { .. }), "{flight:?}: {v:?}");
    }
}

/// Request lines Apache httpd takes with `HttpProtocolOptions Unsafe`
/// (checked against 2.4.71): a method of any visible or non-ASCII bytes,
/// not only a token (`GET"`, `{`, `é`), and an HTTP/0.9 line with any
/// method (`get`, `POST"`) and an absolute-form target, which names its
/// host (httpd then picks that virtual host and runs its handlers, a CGI
/// script here). They name an inspected host: refused, never relayed raw
/// as naming nothing.
#[test]
fn request_lines_with_odd_methods_are_not_relayed() {
    for flight in [
        &b"GET\" / HTTP/1.1\r\nHost: plain.test\r\n\r\n"[..],
        b"{ / HTTP/1.1\r\nHost: plain.test\r\n\r\n",
        b"\r\n\xc3\xa9 / HTTP/1.1\r\nHost: plain.test\r\n\r\n",
        b"get http://plain.test/\r\n",
        b"Get http://plain.test/x \r\n",
        b"\r\nPOST\" http://plain.test/\r\n",
    ] {
        let v = verdict_for(flight, 80);
        assert!(
            matches!(v, Verdict::Refuse { .. }),
            "{:?}: {v:?}",
            String::from_utf8_lossy(flight)
        );
    }
    // Words that name no HTTP version nor a host are still no request.
    for flight in [&b"hello world\r\n"[..], b"get /x\r\n", b"{\"a\": 1}\r\n"] {
        let v = verdict_for(flight, 80);
        assert!(matches!(v, Verdict::Relay), "{flight:?}: {v:?}");
    }
}
