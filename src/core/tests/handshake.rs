//! The client's handshake in the simulator: [`HandshakeCore`] over an
//! in-memory client, pumped as the session pumps it (again after every new
//! sub-stage). HTTP heads and SOCKS5 messages split at every byte, early
//! bytes carried out, the head limit, logins decided at once or by the
//! verifier (nothing read while it works), refusals and their answers.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use std::time::Instant;

use crate::auth::cache::LoginCache;
use crate::auth::{hash_password_with, Credentials, HashedUser, PhcHash, Users, Verdict};
use crate::config::ListenerProtocol;
use crate::core::handshake::{Env, Exit, HandshakeCore, Leave, Next};
use crate::core::mem::MemPort;
use crate::core::port::Port;
use crate::core::refusal::{Dialect, Refusal};
use crate::lifecycle::CloseReason;
use crate::target::Target;

/// A handshake, the client's end of it, and the settings it is lent.
struct Client {
    core: HandshakeCore,
    port: MemPort,
    users: Option<Users>,
    logins: LoginCache,
    max_head_bytes: usize,
    /// Every sub-stage seen, in order, without repeats.
    stages: Vec<&'static str>,
}

impl Client {
    fn new(protocol: ListenerProtocol) -> Client {
        Client::with(protocol, None, None)
    }

    fn with(
        protocol: ListenerProtocol,
        refusing: Option<&'static str>,
        users: Option<Users>,
    ) -> Client {
        let core = HandshakeCore::new(protocol, refusing, super::deadline(10));
        Client {
            stages: vec![core.stage()],
            core,
            port: MemPort::roomy(),
            users,
            logins: LoginCache::new(16),
            max_head_bytes: 16 * 1024,
        }
    }

    fn note_stage(&mut self) {
        let now = self.core.stage();
        if self.stages.last() != Some(&now) {
            self.stages.push(now);
        }
    }

    /// Pumps as the session runs a state: again while the sub-stage
    /// changes, until it waits or asks for something.
    fn run(&mut self) -> Next {
        for _ in 0..100 {
            let before = self.core.stage();
            let env = Env {
                max_head_bytes: self.max_head_bytes,
                users: self.users.as_ref(),
                logins: &self.logins,
            };
            let next = self.core.pump(&mut self.port, env);
            self.note_stage();
            match next {
                Next::Stay if self.core.stage() != before => continue,
                next => return next,
            }
        }
        panic!("the handshake never settles");
    }

    /// The session's timer fired at `now`.
    fn timer(&mut self, now: Instant) -> Option<Next> {
        let env = Env {
            max_head_bytes: self.max_head_bytes,
            users: self.users.as_ref(),
            logins: &self.logins,
        };
        self.core.handle_timeout(now, env)
    }

    /// The handshake deadline passed: how it left, or `None` when it was
    /// closed as timed out.
    fn timed_out(&mut self) -> Option<Exit> {
        assert_eq!(self.core.poll_timeout(), super::at(10, 0));
        assert!(self.timer(super::at(9, 999)).is_none(), "not yet");
        match self.timer(super::at(10, 0)) {
            Some(Next::TimedOut) => None,
            Some(Next::Leave(exit)) => Some(exit),
            other => panic!("{other:?} at the deadline"),
        }
    }

    fn send(&mut self, bytes: &[u8]) -> Next {
        self.port.deliver(bytes);
        self.run()
    }

    /// Sends `bytes` one at a time; every call before the last must wait.
    fn send_bytewise(&mut self, bytes: &[u8]) -> Next {
        let (last, head) = bytes.split_last().unwrap();
        for (i, b) in head.iter().enumerate() {
            let next = self.send(&[*b]);
            assert!(
                matches!(next, Next::Stay),
                "done early, at byte {i}: {next:?}"
            );
        }
        self.send(&[*last])
    }

    fn verdict(&mut self, verdict: Verdict) -> Next {
        match self.core.handle_verdict(verdict) {
            // A new sub-stage: pumped again, as the session does.
            Next::Stay => self.run(),
            next => next,
        }
    }
}

/// Runs `check` on a fresh client sent `bytes` split in two at every
/// point, and sent them one byte at a time.
fn at_every_split(
    protocol: ListenerProtocol,
    bytes: &[u8],
    mut check: impl FnMut(&mut Client, Next, &str),
) {
    for at in 1..bytes.len() {
        let mut c = Client::new(protocol);
        let first = c.send(&bytes[..at]);
        assert!(matches!(first, Next::Stay), "split at {at}: {first:?}");
        let next = c.send(&bytes[at..]);
        check(&mut c, next, &format!("split at {at}"));
    }
    let mut c = Client::new(protocol);
    let next = c.send_bytewise(bytes);
    check(&mut c, next, "byte by byte");
}

fn left(next: Next) -> Exit {
    match next {
        Next::Leave(exit) => exit,
        other => panic!("still in the handshake: {other:?}"),
    }
}

/// The target, dialect and early bytes of a handshake that named a target.
fn to(next: Next) -> (Target, Dialect, Vec<u8>) {
    match left(next).leave {
        Leave::To {
            target,
            dialect,
            early,
            ..
        } => (target, dialect, early),
        other => panic!("not to a target: {other:?}"),
    }
}

/// The refusal and dialect of a refused handshake.
fn refused(next: Next) -> (Refusal, Dialect) {
    match left(next).leave {
        Leave::Refuse(refusal, dialect) => (refusal, dialect),
        other => panic!("not refused: {other:?}"),
    }
}

fn answered(next: Next) -> (Vec<u8>, CloseReason, String) {
    match left(next).leave {
        Leave::Answer { bytes, reason, why } => (bytes, reason, why),
        other => panic!("not answered: {other:?}"),
    }
}

fn basic(user: &str, password: &str) -> String {
    format!("Basic {}", STANDARD.encode(format!("{user}:{password}")))
}

/// alice with the plaintext password `pw-alice`.
fn plain_alice() -> Users {
    Users::new(Some(&Credentials::new("alice", "pw-alice")), &[]).unwrap()
}

/// bob with a (cheap) argon2 hash of `pw-bob`: checked by the verifier.
fn hashed_bob() -> Users {
    let hash = hash_password_with(b"pw-bob", 64, 1, 1).unwrap();
    Users::new(
        None,
        &[HashedUser::new("bob", PhcHash::parse(&hash).unwrap())],
    )
    .unwrap()
}

/// An RFC 1929 login.
fn user_pass(user: &str, password: &str) -> Vec<u8> {
    let mut out = vec![1, user.len() as u8];
    out.extend_from_slice(user.as_bytes());
    out.push(password.len() as u8);
    out.extend_from_slice(password.as_bytes());
    out
}

const CONNECT: &[u8] = b"CONNECT example.test:443 HTTP/1.1\r\nHost: example.test:443\r\n\r\n";
const NO_AUTH: &[u8] = &[5, 1, 0];
/// CONNECT 127.0.0.1:80.
const REQUEST_V4: &[u8] = &[5, 1, 0, 1, 127, 0, 0, 1, 0, 80];

// ---- HTTP ----

#[test]
fn a_connect_head_split_anywhere_names_its_target() {
    at_every_split(ListenerProtocol::Auto, CONNECT, |c, next, when| {
        let (target, dialect, early) = to(next);
        assert_eq!(target.to_string(), "example.test:443", "{when}");
        assert_eq!(dialect, Dialect::Http, "{when}");
        assert!(early.is_empty(), "{when}");
        assert_eq!(c.stages, ["sniff", "http"], "{when}");
        assert!(
            c.port.outbox.is_empty(),
            "nothing is owed to an HTTP client"
        );
    });
}

#[test]
fn bytes_pipelined_behind_a_connect_head_are_carried_out_as_early() {
    const HELLO: &[u8] = b"\x16\x03\x01 a ClientHello";
    let mut bytes = CONNECT.to_vec();
    bytes.extend_from_slice(HELLO);
    // Whatever arrived with the end of the head goes on with it.
    for at in 0..CONNECT.len() {
        let mut c = Client::new(ListenerProtocol::Auto);
        if at > 0 {
            assert!(matches!(c.send(&bytes[..at]), Next::Stay), "split at {at}");
        }
        let (_, _, early) = to(c.send(&bytes[at..]));
        assert_eq!(early, HELLO, "split at {at}");
    }
    // What follows later is not the handshake's: it stays for the relay.
    let mut c = Client::new(ListenerProtocol::Auto);
    let (_, _, early) = to(c.send(CONNECT));
    assert!(early.is_empty());
}

#[test]
fn a_forward_proxy_head_leaves_whole_for_the_forward_proxy() {
    let head = b"GET http://example.test/a?b HTTP/1.1\r\nHost: example.test\r\n\r\n";
    at_every_split(ListenerProtocol::Http, head, |_, next, when| {
        let (target, dialect, early) = to(next);
        assert_eq!(target.to_string(), "example.test:80", "{when}");
        assert_eq!(dialect, Dialect::Forward, "{when}");
        assert_eq!(early, head, "{when}: the head stays for the exchange");
    });
}

#[test]
fn an_https_forward_request_is_forward_tls_on_443() {
    let head = b"POST https://example.test/up HTTP/1.1\r\nHost: example.test\r\nContent-Length: 2\r\n\r\nhi";
    let mut c = Client::new(ListenerProtocol::Auto);
    let (target, dialect, early) = to(c.send(head));
    assert_eq!(target.to_string(), "example.test:443");
    assert_eq!(dialect, Dialect::ForwardTls);
    assert_eq!(early, head, "the body follows the head to the exchange");
}

#[test]
fn an_origin_form_request_is_refused_405_naming_connect() {
    let mut c = Client::new(ListenerProtocol::Auto);
    let (refusal, dialect) = refused(c.send(b"GET /index.html HTTP/1.1\r\nHost: x\r\n\r\n"));
    assert!(
        matches!(&refusal, Refusal::Method(m) if m == "GET"),
        "{refusal:?}"
    );
    let answer = String::from_utf8(refusal.answer(dialect)).unwrap();
    assert!(answer.starts_with("HTTP/1.1 405"), "{answer}");
    assert!(answer.contains("Allow: CONNECT"), "{answer}");
}

#[test]
fn garbage_and_bad_hosts_are_refused_400_over_http() {
    for (bytes, bad_host) in [
        (&b"\x01\x02garbage\r\n\r\n"[..], false),
        (b"CONNECT a b c d\r\n\r\n", false),
        (b"CONNECT :443 HTTP/1.1\r\n\r\n", true),
        (b"CONNECT example.test:99999 HTTP/1.1\r\n\r\n", true),
        (b"GET http://exa%20mple/ HTTP/1.1\r\n\r\n", false),
    ] {
        let mut c = Client::new(ListenerProtocol::Http);
        let text = String::from_utf8_lossy(bytes).into_owned();
        let exit = left(c.send(bytes));
        assert_eq!(exit.spoke, Dialect::Http, "{text}");
        let Leave::Refuse(refusal, dialect) = exit.leave else {
            panic!("{text}: not refused")
        };
        assert_eq!(
            matches!(refusal, Refusal::BadHost(_)),
            bad_host,
            "{text}: {refusal:?}"
        );
        assert_eq!(refusal.close_reason(), CloseReason::BadRequest, "{text}");
        let answer = refusal.answer(dialect);
        assert!(answer.starts_with(b"HTTP/1.1 400"), "{text}");
    }
}

/// A malformed head the client ends by its EOF before its empty line:
/// refused 400 however it arrived (as when it came whole and was parsed
/// on arrival), not a client that merely left.
#[test]
fn a_malformed_head_cut_short_by_the_clients_eof_is_refused_400() {
    let head = b"CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\nBad Header: x\r\n";
    let bad_at = 51;
    for cut in 1..=head.len() {
        let mut c = Client::new(ListenerProtocol::Http);
        let first = c.send(&head[..cut]);
        if cut >= bad_at {
            // Parsed on arrival: refused at once.
            assert!(
                matches!(refused(first).0, Refusal::Malformed(_)),
                "cut {cut}"
            );
            continue;
        }
        assert!(matches!(first, Next::Stay), "cut {cut}: {first:?}");
        c.port.fin = true;
        let (refusal, dialect) = refused(c.send(&head[cut..]));
        assert!(
            matches!(refusal, Refusal::Malformed(_)),
            "cut {cut}: {refusal:?}"
        );
        assert_eq!(dialect, Dialect::Http);
    }
    // A byte at a time, then the EOF.
    let mut c = Client::new(ListenerProtocol::Http);
    for (i, b) in head[..bad_at].iter().enumerate() {
        assert!(matches!(c.send(&[*b]), Next::Stay), "byte {i}");
    }
    let mut rest = Next::Stay;
    for b in &head[bad_at..] {
        rest = c.send(&[*b]);
        if !matches!(rest, Next::Stay) {
            break;
        }
    }
    if matches!(rest, Next::Stay) {
        c.port.fin = true;
        rest = c.run();
    }
    assert!(matches!(refused(rest).0, Refusal::Malformed(_)));
}

#[test]
fn a_head_past_the_limit_is_refused_431() {
    let mut head = b"CONNECT example.test:443 HTTP/1.1\r\nX: ".to_vec();
    head.resize(2000, b'a');
    let mut c = Client::new(ListenerProtocol::Http);
    c.max_head_bytes = 1024;
    let exit = left(c.send(&head));
    assert_eq!(exit.spoke, Dialect::Http, "the access line says HTTP");
    let Leave::Refuse(refusal, dialect) = exit.leave else {
        panic!("not refused")
    };
    assert!(matches!(refusal, Refusal::HeadTooLarge));
    assert!(refusal.answer(dialect).starts_with(b"HTTP/1.1 431"));
    assert!(
        c.port.read_total <= 1024,
        "read no further than the limit: {}",
        c.port.read_total
    );
    // Just under the limit, the same head (ended) is fine.
    let mut c = Client::new(ListenerProtocol::Http);
    c.max_head_bytes = 1024;
    head.truncate(1020);
    head.extend_from_slice(b"\r\n\r\n");
    let (target, ..) = to(c.send(&head));
    assert_eq!(target.to_string(), "example.test:443");
}

#[test]
fn a_socks5_message_past_a_tiny_limit_is_refused_unparsed() {
    // A greeting longer than the limit: refused before it is whole, and
    // silently, but the access line still says SOCKS5.
    let mut c = Client::new(ListenerProtocol::Socks5);
    c.max_head_bytes = 4;
    let exit = left(c.send(&[5, 8, 1, 2, 3, 4, 5, 6, 7, 8]));
    assert_eq!(exit.spoke, Dialect::Socks5);
    assert!(matches!(
        exit.leave,
        Leave::Refuse(Refusal::HeadTooLarge, Dialect::Socks5)
    ));
    assert_eq!(c.port.read_total, 4);
}

// ---- SOCKS5 ----

#[test]
fn socks5_without_auth_split_anywhere_selects_no_auth_and_names_its_target() {
    let mut bytes = NO_AUTH.to_vec();
    bytes.extend_from_slice(REQUEST_V4);
    at_every_split(ListenerProtocol::Auto, &bytes, |c, next, when| {
        let (target, dialect, early) = to(next);
        assert_eq!(target.to_string(), "127.0.0.1:80", "{when}");
        assert_eq!(dialect, Dialect::Socks5, "{when}");
        assert!(early.is_empty(), "{when}");
        assert_eq!(c.port.take(), [5, 0], "{when}: method selection, no auth");
        assert_eq!(
            c.stages,
            ["sniff", "socks5-greeting", "socks5-request"],
            "{when}"
        );
    });
}

#[test]
fn socks5_requests_name_ipv6_and_domain_targets() {
    let v6: std::net::Ipv6Addr = "2001:db8::1".parse().unwrap();
    let mut ipv6 = vec![5, 1, 0, 4];
    ipv6.extend_from_slice(&v6.octets());
    ipv6.extend_from_slice(&443u16.to_be_bytes());
    let mut domain = vec![5, 1, 0, 3, 12];
    domain.extend_from_slice(b"Example.TEST");
    domain.extend_from_slice(&8080u16.to_be_bytes());
    for (request, want) in [(ipv6, "[2001:db8::1]:443"), (domain, "example.test:8080")] {
        let mut bytes = NO_AUTH.to_vec();
        bytes.extend_from_slice(&request);
        at_every_split(ListenerProtocol::Socks5, &bytes, |_, next, when| {
            let (target, dialect, _) = to(next);
            assert_eq!(target.to_string(), want, "{when}");
            assert_eq!(dialect, Dialect::Socks5);
        });
    }
}

#[test]
fn bytes_behind_a_socks5_request_are_carried_out_as_early() {
    let mut c = Client::new(ListenerProtocol::Auto);
    let mut bytes = NO_AUTH.to_vec();
    bytes.extend_from_slice(REQUEST_V4);
    bytes.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
    let (_, _, early) = to(c.send(&bytes));
    assert_eq!(early, b"GET / HTTP/1.1\r\n\r\n");
    assert_eq!(c.port.take(), [5, 0]);
}

#[test]
fn the_method_reply_is_written_before_the_request_is_parsed() {
    // A client that reads slowly: the request waits behind what is owed.
    let mut c = Client::new(ListenerProtocol::Socks5);
    c.port.room = 1;
    let mut bytes = NO_AUTH.to_vec();
    bytes.extend_from_slice(REQUEST_V4);
    assert!(matches!(c.send(&bytes), Next::Stay));
    assert_eq!(c.port.take(), [5]);
    assert_eq!(c.core.stage(), "socks5-request");
    assert!(!c.port.can_read(), "no reading while a reply is owed");
    c.port.room = 1;
    let (target, ..) = to(c.run());
    assert_eq!(c.port.take(), [0]);
    assert_eq!(target.to_string(), "127.0.0.1:80");
}

#[test]
fn a_udp_associate_leaves_for_an_association_from_its_port() {
    let mut bytes = NO_AUTH.to_vec();
    bytes.extend_from_slice(&[5, 3, 0, 1, 0, 0, 0, 0, 0x1f, 0x90]);
    at_every_split(ListenerProtocol::Socks5, &bytes, |c, next, when| {
        let exit = left(next);
        assert_eq!(exit.spoke, Dialect::Socks5, "{when}");
        assert!(
            matches!(exit.leave, Leave::Associate { port: 8080 }),
            "{when}: {:?}",
            exit.leave
        );
        assert_eq!(c.port.take(), [5, 0], "{when}");
    });
}

#[test]
fn socks5_bind_is_refused_as_an_unsupported_command() {
    let mut c = Client::new(ListenerProtocol::Socks5);
    let mut bytes = NO_AUTH.to_vec();
    bytes.extend_from_slice(&[5, 2, 0, 1, 127, 0, 0, 1, 0, 80]);
    let (refusal, dialect) = refused(c.send(&bytes));
    assert!(matches!(refusal, Refusal::SocksCommand));
    assert_eq!(dialect, Dialect::Socks5);
    assert_eq!(
        refusal.answer(dialect)[..2],
        [5, 7],
        "command not supported"
    );
}

#[test]
fn a_socks5_client_offering_no_acceptable_method_is_told_so() {
    // No users: it must offer "no auth"; with users: "username/password".
    for (users, offered) in [
        (None, &[5u8, 1, 2][..]),
        (Some(plain_alice()), &[5, 2, 0, 1]),
    ] {
        let mut c = Client::with(ListenerProtocol::Socks5, None, users);
        let (bytes, reason, why) = answered(c.send(offered));
        assert_eq!(bytes, [5, 0xff], "{offered:?}");
        assert_eq!(reason, CloseReason::AuthFailed);
        assert_eq!(why, "no acceptable SOCKS5 authentication method");
        assert!(
            c.port.outbox.is_empty(),
            "the answer is the shell's to send"
        );
    }
}

#[test]
fn bad_socks5_versions_are_refused() {
    // The greeting: malformed, answered with silence.
    let mut c = Client::new(ListenerProtocol::Socks5);
    let (refusal, dialect) = refused(c.send(&[4, 1, 0]));
    assert!(
        matches!(&refusal, Refusal::Malformed(why) if why.starts_with("SOCKS5 greeting")),
        "{refusal:?}"
    );
    assert_eq!(dialect, Dialect::Socks5);
    assert!(refusal.answer(dialect).is_empty());
    // The request: a SOCKS5 reply.
    let mut c = Client::new(ListenerProtocol::Socks5);
    let mut bytes = NO_AUTH.to_vec();
    bytes.extend_from_slice(&[4, 1, 0, 1, 127, 0, 0, 1, 0, 80]);
    let (refusal, dialect) = refused(c.send(&bytes));
    assert!(matches!(refusal, Refusal::Socks(_)), "{refusal:?}");
    assert_eq!(refusal.answer(dialect)[0], 5);
}

#[test]
fn the_listener_protocol_decides_the_dialect_not_the_first_byte() {
    // An HTTP listener reads a SOCKS5 greeting as a (bad) HTTP head.
    let mut c = Client::new(ListenerProtocol::Http);
    let (_, dialect) = refused(c.send(&[5, 1, 0, b'\r', b'\n', b'\r', b'\n']));
    assert_eq!(dialect, Dialect::Http);
    assert_eq!(c.stages, ["sniff", "http"]);
    // A SOCKS5 listener reads an HTTP head as a (bad) greeting.
    let mut c = Client::new(ListenerProtocol::Socks5);
    let (_, dialect) = refused(c.send(CONNECT));
    assert_eq!(dialect, Dialect::Socks5);
    assert_eq!(c.stages, ["sniff", "socks5-greeting"]);
}

// ---- Logins ----

#[test]
fn socks5_user_pass_split_anywhere_goes_on_as_the_user() {
    let mut bytes = vec![5, 1, 2];
    bytes.extend(user_pass("alice", "pw-alice"));
    bytes.extend_from_slice(REQUEST_V4);
    let check = |c: &mut Client, next: Next, when: &str| {
        let exit = left(next);
        assert_eq!(exit.user.as_deref(), Some("alice"), "{when}");
        assert!(!exit.rejected);
        let Leave::To { target, login, .. } = exit.leave else {
            panic!("{when}: not to a target")
        };
        assert_eq!(target.to_string(), "127.0.0.1:80");
        assert!(login.is_none(), "{when}: only HTTP credentials are held");
        assert_eq!(
            c.port.take(),
            [5, 2, 1, 0],
            "{when}: user/pass, then success"
        );
        assert_eq!(
            c.stages,
            ["sniff", "socks5-greeting", "socks5-auth", "socks5-request"],
            "{when}"
        );
    };
    for at in 1..bytes.len() {
        let mut c = Client::with(ListenerProtocol::Socks5, None, Some(plain_alice()));
        assert!(matches!(c.send(&bytes[..at]), Next::Stay), "split at {at}");
        let next = c.send(&bytes[at..]);
        check(&mut c, next, &format!("split at {at}"));
    }
    let mut c = Client::with(ListenerProtocol::Socks5, None, Some(plain_alice()));
    let next = c.send_bytewise(&bytes);
    check(&mut c, next, "byte by byte");
}

#[test]
fn a_socks5_request_past_the_limit_after_a_login_is_refused_as_that_user() {
    // Greeting and login fit 20 bytes each; a request naming a long host
    // does not: refused unparsed, and the access line names alice.
    let mut c = Client::with(ListenerProtocol::Socks5, None, Some(plain_alice()));
    c.max_head_bytes = 20;
    assert!(matches!(c.send(&[5, 1, 2]), Next::Stay));
    assert!(matches!(
        c.send(&user_pass("alice", "pw-alice")),
        Next::Stay
    ));
    let mut request = vec![5, 1, 0, 3, 40];
    request.extend_from_slice(&[b'a'; 40]);
    request.extend_from_slice(&443u16.to_be_bytes());
    let exit = left(c.send(&request));
    assert!(matches!(
        exit.leave,
        Leave::Refuse(Refusal::HeadTooLarge, Dialect::Socks5)
    ));
    assert_eq!(exit.spoke, Dialect::Socks5);
    assert_eq!(exit.user.as_deref(), Some("alice"));
}

#[test]
fn socks5_wrong_or_malformed_credentials_get_the_failure_status() {
    for auth in [
        user_pass("alice", "nope"),
        user_pass("mallory", "pw-alice"),
        vec![2, 0, 0],
    ] {
        let mut c = Client::with(ListenerProtocol::Socks5, None, Some(plain_alice()));
        let mut bytes = vec![5, 1, 2];
        bytes.extend_from_slice(&auth);
        let exit = left(c.send(&bytes));
        assert!(exit.rejected, "{auth:?}: counted as a rejected login");
        assert_eq!(exit.user, None);
        let Leave::Answer { bytes, reason, why } = exit.leave else {
            panic!("{auth:?}: not answered")
        };
        assert_eq!(bytes, [1, 1], "{auth:?}");
        assert_eq!(reason, CloseReason::AuthFailed);
        assert_eq!(why, "SOCKS5 credentials rejected");
        assert_eq!(c.port.take(), [5, 2], "only the method selection went out");
    }
}

#[test]
fn http_basic_credentials_right_wrong_and_absent() {
    let head = |auth: Option<String>| {
        let mut h = "CONNECT example.test:443 HTTP/1.1\r\n".to_string();
        if let Some(a) = auth {
            h += &format!("Proxy-Authorization: {a}\r\n");
        }
        h + "\r\n"
    };
    // Right: on as alice, holding the login for later requests.
    let mut c = Client::with(ListenerProtocol::Http, None, Some(plain_alice()));
    let exit = left(c.send(head(Some(basic("alice", "pw-alice"))).as_bytes()));
    assert_eq!(exit.user.as_deref(), Some("alice"));
    let Leave::To { login, .. } = exit.leave else {
        panic!("not to a target")
    };
    let login = login.expect("the login is held");
    assert!(login.matches(basic("alice", "pw-alice").as_bytes()));
    assert!(!login.matches(basic("alice", "other").as_bytes()));
    // Wrong: 407, counted.
    let mut c = Client::with(ListenerProtocol::Http, None, Some(plain_alice()));
    let exit = left(c.send(head(Some(basic("alice", "nope"))).as_bytes()));
    assert!(exit.rejected);
    assert_eq!(exit.user, None);
    let Leave::Refuse(refusal, dialect) = exit.leave else {
        panic!("not refused")
    };
    assert!(matches!(refusal, Refusal::AuthRequired));
    let answer = String::from_utf8(refusal.answer(dialect)).unwrap();
    assert!(answer.starts_with("HTTP/1.1 407"), "{answer}");
    assert!(answer.contains("Proxy-Authenticate: Basic"), "{answer}");
    // Absent (or not Basic): 407, not a rejected login.
    for auth in [None, Some("Bearer abc".to_string())] {
        let mut c = Client::with(ListenerProtocol::Http, None, Some(plain_alice()));
        let exit = left(c.send(head(auth.clone()).as_bytes()));
        assert!(!exit.rejected, "{auth:?}");
        assert!(
            matches!(
                exit.leave,
                Leave::Refuse(Refusal::AuthRequired, Dialect::Http)
            ),
            "{auth:?}"
        );
    }
    // Without users, credentials are neither needed nor held.
    let mut c = Client::new(ListenerProtocol::Http);
    let exit = left(c.send(head(Some(basic("alice", "pw-alice"))).as_bytes()));
    assert_eq!(exit.user, None);
    assert!(matches!(exit.leave, Leave::To { login: None, .. }));
}

#[test]
fn an_http_login_waits_for_its_verdict_reading_nothing_then_goes_on() {
    for (verdict, user) in [
        (Verdict::Accepted("bob".into()), Some("bob")),
        (Verdict::Rejected, None),
        (Verdict::Busy, None),
    ] {
        let mut c = Client::with(ListenerProtocol::Http, None, Some(hashed_bob()));
        let mut head = format!(
            "CONNECT example.test:443 HTTP/1.1\r\nProxy-Authorization: {}\r\n\r\n",
            basic("bob", "pw-bob")
        )
        .into_bytes();
        head.extend_from_slice(b"early");
        let Next::Verify(job) = c.send(&head) else {
            panic!("no verification asked for")
        };
        assert_eq!(job.user.as_deref(), Some("bob"));
        assert_eq!(job.run().as_deref(), Some("bob"), "the job checks pw-bob");
        assert_eq!(c.core.stage(), "authenticating");
        // Meanwhile: nothing is read, and the client is not watched.
        let read = c.port.read_total;
        c.port.deliver(b" more");
        assert!(matches!(c.run(), Next::Stay));
        assert_eq!(c.port.read_total, read);
        assert!(!c.port.can_read() && !c.port.can_write());
        // The verdict.
        let exit = left(c.verdict(verdict.clone()));
        assert_eq!(exit.user.as_deref(), user, "{verdict:?}");
        match (verdict, exit.leave) {
            (Verdict::Accepted(_), Leave::To { early, login, .. }) => {
                assert_eq!(early, b"early", "what came with the head goes on");
                assert!(login.is_some());
                assert!(!exit.rejected);
            }
            (Verdict::Rejected, Leave::Refuse(Refusal::AuthRequired, Dialect::Http)) => {
                assert!(exit.rejected);
            }
            (Verdict::Busy, Leave::Refuse(r @ Refusal::Limit(_), Dialect::Http)) => {
                assert!(!exit.rejected, "a full queue rejects no login");
                assert!(r.answer(Dialect::Http).starts_with(b"HTTP/1.1 503"));
            }
            (verdict, leave) => panic!("{verdict:?} led to {leave:?}"),
        }
    }
}

#[test]
fn a_socks5_login_waits_for_its_verdict_then_answers_the_status() {
    for verdict in [
        Verdict::Accepted("bob".into()),
        Verdict::Rejected,
        Verdict::Busy,
    ] {
        let mut c = Client::with(ListenerProtocol::Socks5, None, Some(hashed_bob()));
        let mut bytes = vec![5, 1, 2];
        bytes.extend(user_pass("bob", "pw-bob"));
        bytes.extend_from_slice(REQUEST_V4);
        assert!(matches!(c.send(&bytes), Next::Verify(_)));
        assert_eq!(c.port.take(), [5, 2]);
        assert_eq!(
            c.stages,
            ["sniff", "socks5-greeting", "socks5-auth", "authenticating"]
        );
        let read = c.port.read_total;
        assert!(matches!(c.run(), Next::Stay));
        assert_eq!(c.port.read_total, read, "nothing read while verifying");
        let next = c.verdict(verdict.clone());
        match verdict {
            Verdict::Accepted(_) => {
                let exit = left(next);
                assert_eq!(exit.user.as_deref(), Some("bob"));
                assert!(matches!(exit.leave, Leave::To { .. }));
                assert_eq!(c.port.take(), [1, 0], "success, before the request");
            }
            Verdict::Rejected => {
                let (bytes, reason, _) = answered(next);
                assert_eq!((bytes, reason), (vec![1, 1], CloseReason::AuthFailed));
            }
            Verdict::Busy => {
                let (bytes, reason, why) = answered(next);
                assert_eq!((bytes, reason), (vec![1, 1], CloseReason::Limit));
                assert!(why.contains("login verification queue"), "{why}");
            }
        }
    }
}

#[test]
fn a_remembered_login_is_accepted_without_the_verifier() {
    let mut c = Client::with(ListenerProtocol::Http, None, Some(hashed_bob()));
    let digest = c.logins.digest(b"bob", b"pw-bob");
    c.logins.insert(digest, "bob".into());
    let head = format!(
        "CONNECT example.test:443 HTTP/1.1\r\nProxy-Authorization: {}\r\n\r\n",
        basic("bob", "pw-bob")
    );
    let exit = left(c.send(head.as_bytes()));
    assert_eq!(exit.user.as_deref(), Some("bob"));
    assert!(!c.stages.contains(&"authenticating"));
}

#[test]
fn a_verdict_nobody_waits_for_changes_nothing() {
    let mut c = Client::new(ListenerProtocol::Auto);
    assert!(matches!(c.send(b"CONN"), Next::Stay));
    assert!(matches!(
        c.core.handle_verdict(Verdict::Accepted("eve".into())),
        Next::Stay
    ));
    assert_eq!(c.core.stage(), "http");
    let exit = left(c.send(&CONNECT[4..]));
    assert_eq!(exit.user, None, "no login was asked for");
}

// ---- Ends and refusals ----

#[test]
fn a_client_that_leaves_mid_handshake_is_gone() {
    // FIN, reset, or an error seen on the socket, at each sub-stage.
    let partial: [&[u8]; 3] = [b"", b"CONNECT exa", &[5, 1, 0, 5, 1]];
    for bytes in partial {
        for how in ["fin", "reset"] {
            let mut c = Client::new(ListenerProtocol::Auto);
            if !bytes.is_empty() {
                assert!(matches!(c.send(bytes), Next::Stay));
            }
            match how {
                "fin" => c.port.fin = true,
                _ => c.port.reset = true,
            }
            let next = c.run();
            assert!(matches!(next, Next::Gone), "{bytes:?} {how}: {next:?}");
        }
    }
}

#[test]
fn a_refusing_handshake_answers_in_the_clients_dialect() {
    const LIMIT: &str = "sessions";
    // HTTP: at the first byte.
    let mut c = Client::with(ListenerProtocol::Auto, Some(LIMIT), None);
    assert!(c.core.is_refusing());
    let exit = left(c.send(b"C"));
    assert_eq!(exit.spoke, Dialect::Http);
    let Leave::Refuse(refusal, dialect) = exit.leave else {
        panic!("not refused")
    };
    assert!(matches!(refusal, Refusal::Limit(LIMIT)));
    let answer = String::from_utf8(refusal.answer(dialect)).unwrap();
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("limit; sessions"), "{answer}");
    // SOCKS5: once the greeting is whole, split anywhere; a method
    // selection and a general failure, nothing owed by the core itself.
    let greeting = [5, 2, 0, 2];
    for at in 0..greeting.len() {
        let mut c = Client::with(ListenerProtocol::Auto, Some(LIMIT), None);
        if at > 0 {
            assert!(matches!(c.send(&greeting[..at]), Next::Stay), "at {at}");
        }
        let (refusal, dialect) = refused(c.send(&greeting[at..]));
        assert!(matches!(refusal, Refusal::Limit(LIMIT)), "at {at}");
        assert_eq!(dialect, Dialect::Socks5);
        assert_eq!(
            refusal.answer(dialect),
            [5, 0, 5, 1, 0, 1, 0, 0, 0, 0, 0, 0]
        );
        assert!(c.port.outbox.is_empty());
    }
}

#[test]
fn a_malformed_start_the_gate_held_back_is_refused_400_at_the_deadline() {
    // Parsed on arrival it was a 400 at once; split so the gate holds the
    // bad header line back, then silence: the deadline refuses it for what
    // it is, not as a timeout. A valid start timed out is closed as before.
    let head = b"GET /x HTTP/1.1\r\nHost: origin.test\r\nBad Header: x\r\n";
    let mut c = Client::new(ListenerProtocol::Http);
    assert!(matches!(c.send(&head[..26]), Next::Stay));
    assert!(matches!(c.send(&head[26..]), Next::Stay), "held back");
    let exit = c.timed_out().expect("refused");
    assert!(matches!(
        exit.leave,
        Leave::Refuse(Refusal::Malformed(_), Dialect::Http)
    ));
    assert_eq!(exit.spoke, Dialect::Http);
    let mut c = Client::new(ListenerProtocol::Http);
    assert!(matches!(c.send(&head[..30]), Next::Stay));
    assert!(c.timed_out().is_none(), "a valid start is only slow");
}

/// One deadline for the whole handshake: a SOCKS5 client moving through
/// its greeting and login does not earn more time with each sub-stage.
#[test]
fn the_handshake_deadline_does_not_move_with_its_sub_stages() {
    let users = Users::new(Some(&Credentials::new("alice", "pw")), &[]).unwrap();
    let mut c = Client::with(ListenerProtocol::Socks5, None, Some(users));
    assert!(matches!(c.send(&[5, 1, 2]), Next::Stay));
    assert_eq!(c.core.stage(), "socks5-auth");
    assert!(matches!(c.send(b"\x01\x05alice\x02pw"), Next::Stay));
    assert_eq!(c.core.stage(), "socks5-request");
    assert!(
        c.timed_out().is_none(),
        "closed as timed out at the first deadline"
    );
}
