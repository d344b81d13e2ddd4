//! Logins: HTTP and SOCKS5 credentials verified off the loop, remembered
//! logins, refusals, and the deadline on a login that waits.

use super::*;

/// Users alice and bob with (cheap) hashed passwords `pw-alice`, `pw-bob`.
fn with_users(h: &mut Harness) {
    use crate::auth::{hash_password_with, HashedUser, PhcHash, Users};
    let user = |name: &str| {
        let hash = hash_password_with(format!("pw-{name}").as_bytes(), 64, 1, 1).unwrap();
        HashedUser::new(name, PhcHash::parse(&hash).unwrap())
    };
    h.settings.auth = Users::new(None, &[user("alice"), user("bob")]).map(Arc::new);
}

fn basic(user: &str, pw: &str) -> String {
    let creds = format!("{user}:{pw}");
    // A tiny base64 encoder for the test.
    const ABC: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in creds.as_bytes().chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, &b)| acc | (b as u32) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(ABC[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
        out.push_str(&"=="[..3 - chunk.len()]);
    }
    out
}

fn alice_only(port: u16) -> Policy {
    let mut r = parse_cli_rule(Action::Allow, &format!("127.0.0.1:{port}")).unwrap();
    r.users = Some(vec!["alice".into()]);
    Policy::from_rules(&[r]).unwrap()
}

#[test]
fn http_login_waits_authenticating_then_goes_on_as_the_user() {
    let port = closed_port();
    let (mut h, _) = Harness::new(alice_only(port), ListenerProtocol::Http);
    with_users(&mut h);
    let head = format!(
        "CONNECT 127.0.0.1:{port} HTTP/1.1\r\nProxy-Authorization: Basic {}\r\n\r\n",
        basic("bob", "pw-bob")
    );
    let effects = h.client_sends(head.as_bytes());
    let job = effects.verify.expect("a verification for the pool");
    assert_eq!(job.user.as_deref(), Some("bob"));
    assert_eq!(h.state(), "Handshake(authenticating)");
    assert_eq!(
        effects.deadline,
        Some(h.now + h.settings.timeouts.handshake),
        "the handshake deadline still runs"
    );
    // The pool's verdict (run here, as a pool thread would).
    let verdict = match job.run() {
        Some(user) => crate::auth::Verdict::Accepted(user),
        None => crate::auth::Verdict::Rejected,
    };
    let mut s = h.session.take().unwrap();
    let _ = h.with_ctx(|ctx| s.on_verified(verdict, ctx));
    h.session = Some(s);
    // bob is not in the rule: 403, and the reason names him.
    let answer = String::from_utf8(h.client_reads(200)).unwrap();
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert!(
        answer.contains("denied; user-not-in-rule=--allow 127.0.0.1:"),
        "{answer}"
    );
    h.peer.shutdown(std::net::Shutdown::Write).unwrap();
    let _ = h.poll_events();
    let seen = h.seen.lock().unwrap();
    let [e] = &seen[..] else { panic!("{seen:?}") };
    assert_eq!(e.user.as_deref(), Some("bob"));
    assert!(e
        .reason
        .as_deref()
        .unwrap()
        .starts_with("user \"bob\" not in rule"));
}

#[test]
fn a_remembered_login_needs_no_verification() {
    let port = closed_port();
    let (mut h, _) = Harness::new(alice_only(port), ListenerProtocol::Http);
    with_users(&mut h);
    let digest = h.logins.digest(b"alice", b"pw-alice");
    h.logins.insert(digest, "alice".into());
    let head = format!(
        "CONNECT 127.0.0.1:{port} HTTP/1.1\r\nProxy-Authorization: Basic {}\r\n\r\n",
        basic("alice", "pw-alice")
    );
    let effects = h.client_sends(head.as_bytes());
    assert!(effects.verify.is_none());
    assert!(effects.left_handshake);
    assert_eq!(h.state(), "Connecting(tcp)", "alice's rule allowed it");
}

#[test]
fn http_wrong_password_is_407_and_a_full_queue_503() {
    for (verdict, status) in [
        (crate::auth::Verdict::Rejected, "HTTP/1.1 407"),
        (crate::auth::Verdict::Busy, "HTTP/1.1 503"),
    ] {
        let (mut h, _) = Harness::new(alice_only(9), ListenerProtocol::Http);
        with_users(&mut h);
        let head = format!(
            "CONNECT 127.0.0.1:9 HTTP/1.1\r\nProxy-Authorization: Basic {}\r\n\r\n",
            basic("alice", "wrong")
        );
        let effects = h.client_sends(head.as_bytes());
        assert!(effects.verify.is_some());
        let mut s = h.session.take().unwrap();
        let _ = h.with_ctx(|ctx| s.on_verified(verdict.clone(), ctx));
        h.session = Some(s);
        let answer = String::from_utf8(h.client_reads(12)).unwrap();
        assert_eq!(answer, status, "{verdict:?}");
    }
    // No credentials at all: 407 at once, nothing for the pool.
    let (mut h, _) = Harness::new(alice_only(9), ListenerProtocol::Http);
    with_users(&mut h);
    let effects = h.client_sends(b"CONNECT 127.0.0.1:9 HTTP/1.1\r\n\r\n");
    assert!(effects.verify.is_none());
    assert_eq!(
        String::from_utf8(h.client_reads(12)).unwrap(),
        "HTTP/1.1 407"
    );
}

#[test]
fn socks5_login_waits_then_answers_the_auth_status() {
    let (mut h, _) = Harness::new(alice_only(9), ListenerProtocol::Socks5);
    with_users(&mut h);
    let _ = h.client_sends(&[5, 1, 2]);
    assert_eq!(h.client_reads(2), [5, 2], "username/password selected");
    let mut auth = vec![1, 5];
    auth.extend_from_slice(b"alice");
    auth.push(5);
    auth.extend_from_slice(b"wrong");
    let effects = h.client_sends(&auth);
    assert!(effects.verify.is_some());
    assert_eq!(h.state(), "Handshake(authenticating)");
    let mut s = h.session.take().unwrap();
    let effects = h.with_ctx(|ctx| s.on_verified(crate::auth::Verdict::Rejected, ctx));
    h.session = Some(s);
    assert_eq!(h.client_reads(2), [1, 1], "auth failure");
    assert_eq!(h.stats.snapshot().auth_failures, 1);
    assert!(effects.closed.is_none() || effects.closed == Some(CloseReason::AuthFailed));
}

#[test]
fn the_handshake_deadline_ends_a_login_that_waits_too_long() {
    let (mut h, _) = Harness::new(alice_only(9), ListenerProtocol::Socks5);
    with_users(&mut h);
    let _ = h.client_sends(&[5, 1, 2, 1, 3, b'b', b'o', b'b', 1, b'x']);
    assert_eq!(h.state(), "Handshake(authenticating)");
    h.now += h.settings.timeouts.handshake;
    let mut s = h.session.take().unwrap();
    let effects = h.with_ctx(|ctx| s.on_timer(ctx));
    assert_eq!(effects.closed, Some(CloseReason::HandshakeTimeout));
    // A verdict after the end changes nothing.
    let effects = h.with_ctx(|ctx| s.on_verified(crate::auth::Verdict::Rejected, ctx));
    assert_eq!(effects.closed, Some(CloseReason::HandshakeTimeout));
}
