//! Attacks on users: credential spellings, the login cache, per-request
//! credentials on a kept-alive forward-proxy connection, RFC 1929 edge
//! cases, and one client filling the verifier queue for everyone.

use crate::load;
use crate::support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use load::{connect_as as connect_owned_by, ip, NOBODY};
use portcullis::auth::{hash_password, hash_password_with};
use portcullis::{Config, Proxy, SpawnedProxy};
use support::*;

/// Generous: argon2 on a shared two-core machine, many at once.
const SLOW: Duration = Duration::from_secs(60);

fn cheap(pw: &str) -> String {
    hash_password_with(pw.as_bytes(), 256, 1, 1).unwrap()
}

/// Users alice (`pw-alice`), bob (`pw-bob`), ali (`ce:pw-alice`: alice's
/// name is ali + "ce"), carol (`c:ol:on`: colons in the password), and
/// `extra` more users `victimN` (`pw-victimN`); `target`'s host is allowed
/// for alice, carol and the victims only.
fn users_proxy(target: &str, extra: usize, hash: impl Fn(&str) -> String) -> SpawnedProxy {
    let mut text = String::from("[[listen]]\naddress = \"127.0.0.1:0\"\n");
    let mut users = vec![
        ("alice".to_string(), "pw-alice".to_string()),
        ("bob".into(), "pw-bob".into()),
        ("ali".into(), "ce:pw-alice".into()),
        ("carol".into(), "c:ol:on".into()),
    ];
    users.extend((0..extra).map(|i| (format!("victim{i}"), format!("pw-victim{i}"))));
    for (name, pw) in &users {
        text.push_str(&format!(
            "[[auth.users]]\nname = \"{name}\"\npassword_hash = \"{}\"\n",
            hash(pw)
        ));
    }
    let allowed: Vec<String> = users
        .iter()
        .map(|(n, _)| n)
        .filter(|n| !matches!(n.as_str(), "bob" | "ali"))
        .map(|n| format!("\"{n}\""))
        .collect();
    text.push_str(&format!(
        "[[rules]]\nname = \"mine\"\naction = \"allow\"\nhost = \"{}\"\nusers = [{}]\n",
        target.rsplit_once(':').unwrap().0,
        allowed.join(", ")
    ));
    let mut config = Config::from_toml_str(&text).expect("config");
    config.timeouts = timeouts(|t| t.handshake = SLOW);
    config.limits = flood_limits();
    spawn(Proxy::builder().config(config))
}

/// CONNECT with these raw header lines; the response status.
fn connect_status(proxy: SocketAddr, target: &str, headers: &[(&str, &str)]) -> u16 {
    let mut s = TcpStream::connect(proxy).unwrap();
    s.set_read_timeout(Some(SLOW)).unwrap();
    let head = http_connect_on(&mut s, target, headers).unwrap();
    head.status
}

fn basic_raw(creds: &[u8]) -> String {
    format!("Basic {}", base64(creds))
}

#[test]
fn odd_credential_spellings_never_log_in_as_someone() {
    let echo = echo_server();
    let target = echo.target();
    let proxy = users_proxy(&target, 0, cheap);
    let p = proxy_addr(&proxy);
    let good = base64(b"alice:pw-alice");
    let unpadded = base64(b"alice:pw-alic").trim_end_matches('=').to_string();
    // Documented as accepted: any case of the scheme, several spaces,
    // trailing whitespace, unpadded base64.
    for ok in [
        format!("Basic {good}"),
        format!("bAsIc {good}"),
        format!("Basic    {good}"),
        format!("Basic {good} \t"),
        format!("Basic {}", good.trim_end_matches('=')),
    ] {
        assert_eq!(
            connect_status(p, &target, &[("Proxy-Authorization", &ok)]),
            200,
            "{ok:?}"
        );
    }
    assert_eq!(
        connect_status(
            p,
            &target,
            &[("Proxy-Authorization", &basic_raw(b"carol:c:ol:on"))]
        ),
        200,
        "a colon in the password"
    );
    let mut bad: Vec<String> = vec![
        format!("Basic\t{good}"),
        format!("Basic{good}"),
        format!("Bearer {good}"),
        format!("Basic {good}="),
        format!("Basic {good}, Basic {good}"),
        format!("Basic {} {}", &good[..4], &good[4..]),
        format!("Basic {}", unpadded),
        format!("Basic {}", good.to_lowercase()),
        "Basic".into(),
        "Basic ".into(),
        "Basic ====".into(),
    ];
    for creds in [
        &b"alice:pw-alic"[..],
        b"alice:pw-alice\n",
        b"alice:pw-alice\0",
        b"alice :pw-alice",
        b" alice:pw-alice",
        b"ALICE:pw-alice",
        b"alice\0:pw-alice",
        b"alice\xff:pw-alice",
        b"alice:pw-alice\xff",
        b"alice:",
        b":pw-alice",
        b":",
        b"alicepw-alice",
        b"alic:e:pw-alice",
        b"al:ice:pw-alice",
        b"alice:ce:pw-alice",
        b"carol:c:ol",
        b"carol:c",
        b"bob:pw-alice",
    ] {
        bad.push(basic_raw(creds));
    }
    for b in &bad {
        let status = connect_status(p, &target, &[("Proxy-Authorization", b)]);
        assert_eq!(status, 407, "{b:?}");
    }
    // ali's own password (a prefix of alice's name plus the rest) logs in as
    // ali, who is not in the rule: 403, never alice's 200.
    assert_eq!(
        connect_status(
            p,
            &target,
            &[("Proxy-Authorization", &basic_raw(b"ali:ce:pw-alice"))]
        ),
        403,
        "split at the first colon: user ali, password ce:pw-alice is right"
    );
    // Duplicate headers: the first is the one; a right second never rescues a wrong first.
    let wrong = basic_raw(b"alice:nope");
    let right = format!("Basic {good}");
    assert_eq!(
        connect_status(
            p,
            &target,
            &[
                ("Proxy-Authorization", &wrong),
                ("Proxy-Authorization", &right)
            ]
        ),
        407
    );
    assert_eq!(echo.accepted(), 6);
}

#[test]
fn the_login_cache_never_answers_a_wrong_password() {
    let echo = echo_server();
    let target = echo.target();
    let proxy = users_proxy(&target, 0, cheap);
    let p = proxy_addr(&proxy);
    let auth = |u: &str, pw: &str| basic_auth(u, pw);
    assert_eq!(
        connect_status(
            p,
            &target,
            &[("Proxy-Authorization", &auth("alice", "pw-alice"))]
        ),
        200
    );
    let verified = proxy.stats().auth_verifications;
    // Remembered now: same credentials, no new verification.
    assert_eq!(
        connect_status(
            p,
            &target,
            &[("Proxy-Authorization", &auth("alice", "pw-alice"))]
        ),
        200
    );
    assert_eq!(proxy.stats().auth_verifications, verified);
    // Near misses of the remembered login: each verified, each refused.
    for (u, pw) in [
        ("alice", "pw-alic"),
        ("alice", "pw-alicee"),
        ("alice", ""),
        ("alic", "epw-alice"),
        ("alice:pw", "-alice"),
        ("bob", "pw-alice"),
    ] {
        let status = connect_status(p, &target, &[("Proxy-Authorization", &auth(u, pw))]);
        assert_eq!(status, 407, "{u}:{pw}");
    }
    // Right and wrong in flight together: the wrong never shares the right's verdict.
    let handles: Vec<_> = (0..16)
        .map(|i| {
            let target = target.clone();
            std::thread::spawn(move || {
                let pw = if i % 2 == 0 { "pw-carol?" } else { "c:ol:on" };
                (
                    i,
                    connect_status(
                        p,
                        &target,
                        &[("Proxy-Authorization", &basic_auth("carol", pw))],
                    ),
                )
            })
        })
        .collect();
    for h in handles {
        let (i, status) = h.join().unwrap();
        assert_eq!(status, if i % 2 == 0 { 407 } else { 200 }, "login {i}");
    }
}

/// SOCKS5 greeting offering user/password, then `sub` as the RFC 1929
/// subnegotiation: the auth status byte, or `None` if the proxy closed.
fn socks_auth_status(proxy: SocketAddr, sub: &[u8]) -> Option<u8> {
    let mut s = TcpStream::connect(proxy).unwrap();
    s.set_read_timeout(Some(SLOW)).unwrap();
    s.write_all(&[5, 1, 2]).unwrap();
    let mut sel = [0u8; 2];
    s.read_exact(&mut sel).unwrap();
    assert_eq!(sel, [5, 2]);
    s.write_all(sub).unwrap();
    let mut st = [0u8; 2];
    match s.read_exact(&mut st) {
        Ok(()) => {
            if st[1] != 0 {
                // Refused: nothing more, and closed.
                let mut rest = Vec::new();
                let _ = s.read_to_end(&mut rest);
                assert!(rest.is_empty(), "{rest:?}");
            }
            Some(st[1])
        }
        Err(_) => None,
    }
}

fn rfc1929(ver: u8, user: &[u8], pw: &[u8]) -> Vec<u8> {
    let mut v = vec![ver, user.len() as u8];
    v.extend_from_slice(user);
    v.push(pw.len() as u8);
    v.extend_from_slice(pw);
    v
}

#[test]
fn socks5_subnegotiation_edge_cases_fail_closed() {
    let echo = echo_server();
    let target = echo.target();
    let proxy = users_proxy(&target, 0, cheap);
    let p = proxy_addr(&proxy);
    assert_eq!(
        socks_auth_status(p, &rfc1929(1, b"alice", b"pw-alice")),
        Some(0)
    );
    assert_eq!(
        socks_auth_status(p, &rfc1929(1, b"carol", b"c:ol:on")),
        Some(0)
    );
    for sub in [
        rfc1929(1, b"", b""),
        rfc1929(1, b"", b"pw-alice"),
        rfc1929(1, b"alice", b""),
        rfc1929(5, b"alice", b"pw-alice"),
        rfc1929(0, b"alice", b"pw-alice"),
        rfc1929(1, b"alice\0", b"pw-alice"),
        rfc1929(1, b"ali", b"ce:pw-alic"),
        rfc1929(1, b"alice", b"pw-alice\0"),
        rfc1929(1, b"bob", b"pw-alice"),
    ] {
        let status = socks_auth_status(p, &sub);
        assert!(
            matches!(status, Some(s) if s != 0) || status.is_none(),
            "{sub:?}: {status:?}"
        );
    }
    // ali logs in (right password) but is not in the rule: reply 0x02.
    let mut s = TcpStream::connect(p).unwrap();
    s.set_read_timeout(Some(SLOW)).unwrap();
    let err = socks5_handshake(
        &mut s,
        "127.0.0.1",
        echo.port(),
        Some(("ali", "ce:pw-alice")),
    )
    .unwrap_err();
    assert!(matches!(err, SocksError::Reply(2)), "{err:?}");
    assert_eq!(echo.accepted(), 0);
}

/// One kept-alive forward-proxy connection: a first request as alice, then
/// requests with other credentials. Each request carries its own
/// `Proxy-Authorization` (RFC 9110 section 11.7.2): a later request with
/// other credentials must not ride on alice's login.
#[test]
fn a_kept_alive_forward_connection_checks_each_requests_credentials() {
    let origin = Origin::echo_target();
    let target = origin.target();
    let proxy = users_proxy(&target, 0, cheap);
    let p = proxy_addr(&proxy);
    let req = |auth: &str, path: &str| {
        format!("GET http://{target}{path} HTTP/1.1\r\nHost: {target}\r\nProxy-Authorization: {auth}\r\n\r\n")
    };
    for (who, second) in [
        ("alice with a wrong password", basic_auth("alice", "wrong")),
        ("bob (not in the rule)", basic_auth("bob", "pw-bob")),
        ("bob with a wrong password", basic_auth("bob", "nope")),
    ] {
        let before = origin.requests().len();
        let mut c = HttpConn::new(TcpStream::connect(p).unwrap());
        c.send(req(&basic_auth("alice", "pw-alice"), "/first"));
        let r = c.response("GET");
        assert_eq!(r.status, 200, "{}", r.raw_head);
        c.send(req(&second, "/second"));
        let r = c.response("GET");
        assert_eq!(r.status, 407, "{who}: {}", r.raw_head);
        assert!(r.header("Proxy-Authenticate").is_some(), "{}", r.raw_head);
        c.expect_eof(who);
        let paths: Vec<String> = origin.requests()[before..]
            .iter()
            .map(|r| r.target.clone())
            .collect();
        assert_eq!(paths, ["/first"], "{who}");
    }
    // Pipelined in one write: the same.
    let before = origin.requests().len();
    let mut c = HttpConn::new(TcpStream::connect(p).unwrap());
    c.send(format!(
        "{}{}",
        req(&basic_auth("alice", "pw-alice"), "/one"),
        req(&basic_auth("bob", "pw-bob"), "/two")
    ));
    assert_eq!(c.response("GET").status, 200);
    if let Ok(r) = c.read_response("GET") {
        assert_ne!(r.status, 200, "pipelined bob served as alice");
    }
    let paths: Vec<String> = origin.requests()[before..]
        .iter()
        .map(|r| r.target.clone())
        .collect();
    assert_eq!(paths, ["/one"]);
    // The same credentials again (or another spelling of them) carry on.
    let mut c = HttpConn::new(TcpStream::connect(p).unwrap());
    c.send(req(&basic_auth("alice", "pw-alice"), "/a"));
    assert_eq!(c.response("GET").status, 200);
    c.send(req(
        &basic_auth("alice", "pw-alice").replace("Basic", "basic"),
        "/b",
    ));
    assert_eq!(c.response("GET").status, 200);
}

/// The verifier queue is one per worker: one client (uid nobody) keeping it
/// full with wrong passwords must not lock every other client out.
#[test]
fn one_client_cannot_fill_the_verifier_queue_for_everyone() {
    let echo = echo_server();
    let target = echo.target();
    let victims = 4;
    let proxy = users_proxy(&target, victims, |pw| hash_password(pw.as_bytes()).unwrap());
    let p = proxy_addr(&proxy);
    let stop = Arc::new(AtomicBool::new(false));
    // 96 attacker connections at a time, each a fresh wrong password.
    let attackers: Vec<_> = (0..96)
        .map(|t| {
            let stop = Arc::clone(&stop);
            let target = target.clone();
            std::thread::spawn(move || {
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let Ok(mut s) = connect_owned_by(NOBODY, ip("127.0.0.1"), p) else {
                        continue;
                    };
                    s.set_read_timeout(Some(SLOW)).unwrap();
                    let auth = basic_auth("alice", &format!("guess-{t}-{i}"));
                    let _ = http_connect_on(&mut s, &target, &[("Proxy-Authorization", &auth)]);
                }
            })
        })
        .collect();
    wait_for("the queue full", SLOW, || proxy.stats().auth_busy > 0);
    let mut statuses = Vec::new();
    for v in 0..victims {
        let auth = basic_auth(&format!("victim{v}"), &format!("pw-victim{v}"));
        statuses.push(connect_status(
            p,
            &target,
            &[("Proxy-Authorization", &auth)],
        ));
    }
    stop.store(true, Ordering::Relaxed);
    for a in attackers {
        a.join().unwrap();
    }
    assert_eq!(
        statuses,
        vec![200; victims],
        "root's logins while nobody floods"
    );
}
