//! Real users: `[[auth.users]]` with argon2 hashes, rules that name users,
//! `--auth-env`, `--auth-file`, `portcullis hash-password`, and the
//! verifier pool that keeps argon2 off the reactor thread.

use crate::support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use portcullis::auth::{hash_password, hash_password_with, PhcHash};
use portcullis::events::{Event, EventKind};
use portcullis::{Config, Proxy, SpawnedProxy};
use support::*;

/// Generous: argon2 on a shared two-core machine, many at once.
const SLOW: Duration = Duration::from_secs(60);

/// A proxy with users alice (`pw-alice`) and bob (`pw-bob`), hashed with
/// `hash`, and one rule: `target` for alice only. Events are collected.
fn users_proxy(
    target: &str,
    hash: impl Fn(&str) -> String,
) -> (SpawnedProxy, Arc<Mutex<Vec<Event>>>) {
    let text = format!(
        r#"
[[listen]]
address = "127.0.0.1:0"

[[auth.users]]
name = "alice"
password_hash = "{}"

[[auth.users]]
name = "bob"
password_hash = "{}"

[[rules]]
name = "alice-echo"
action = "allow"
host = "{}"
users = ["alice"]
"#,
        hash("pw-alice"),
        hash("pw-bob"),
        target.rsplit_once(':').unwrap().0,
    );
    let mut config = Config::from_toml_str(&text).expect("config");
    config.timeouts = timeouts(|t| t.handshake = SLOW);
    config.limits = flood_limits();
    let events = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&events);
    let proxy = spawn(
        Proxy::builder()
            .config(config)
            .on_event(move |e| seen.lock().unwrap().push(e.clone())),
    );
    (proxy, events)
}

fn cheap(pw: &str) -> String {
    hash_password_with(pw.as_bytes(), 256, 1, 1).unwrap()
}

/// CONNECT with Basic credentials; the stream and the response head.
fn connect_as(proxy: SocketAddr, target: &str, user: &str, pw: &str) -> (TcpStream, ResponseHead) {
    let mut s = TcpStream::connect(proxy).unwrap();
    s.set_read_timeout(Some(SLOW)).unwrap();
    let auth = basic_auth(user, pw);
    let head = http_connect_on(&mut s, target, &[("Proxy-Authorization", &auth)]).unwrap();
    (s, head)
}

/// SOCKS5 with user/password.
fn socks_as(proxy: SocketAddr, port: u16, user: &str, pw: &str) -> Result<TcpStream, SocksError> {
    let mut s = TcpStream::connect(proxy)?;
    s.set_read_timeout(Some(SLOW))?;
    socks5_handshake(&mut s, "127.0.0.1", port, Some((user, pw)))?;
    Ok(s)
}

#[track_caller]
fn echoes(s: &mut TcpStream, msg: &[u8]) {
    s.write_all(msg).unwrap();
    let mut back = vec![0u8; msg.len()];
    s.read_exact(&mut back).unwrap();
    assert_eq!(back, msg);
}

#[test]
fn a_user_past_users_is_refused() {
    let upstream = echo_server();
    let target = upstream.target();
    let (proxy, events) = users_proxy(&target, |pw| hash_password(pw.as_bytes()).unwrap());
    let p = proxy_addr(&proxy);

    // alice, through CONNECT: verified once on the pool.
    let (mut s, head) = connect_as(p, &target, "alice", "pw-alice");
    assert_eq!(head.status, 200, "{}", head.raw);
    echoes(&mut s, b"alice over connect");
    assert_eq!(proxy.stats().auth_verifications, 1);
    // ... and through SOCKS5: the login is remembered, no second argon2.
    let mut s2 = socks_as(p, upstream.port(), "alice", "pw-alice").expect("alice over SOCKS5");
    echoes(&mut s2, b"alice over socks");
    assert_eq!(proxy.stats().auth_verifications, 1, "the cache answered");

    // bob authenticates, but the rule is not his: 403 / SOCKS5 0x02.
    let (_, head) = connect_as(p, &target, "bob", "pw-bob");
    assert_eq!(head.status, 403, "{}", head.raw);
    assert_eq!(
        head.header("X-Proxy-Error"),
        Some("denied; user-not-in-rule=alice-echo")
    );
    match socks_as(p, upstream.port(), "bob", "pw-bob") {
        Err(SocksError::Reply(0x02)) => {}
        other => panic!("bob over SOCKS5: {other:?}"),
    }

    // A wrong password: 407 / SOCKS5 auth failure. Never remembered.
    let (_, head) = connect_as(p, &target, "alice", "pw-bob");
    assert_eq!(head.status, 407, "{}", head.raw);
    assert!(head.header("Proxy-Authenticate").is_some());
    match socks_as(p, upstream.port(), "alice", "wrong") {
        Err(SocksError::Auth(st)) => assert_ne!(st, 0),
        other => panic!("wrong password over SOCKS5: {other:?}"),
    }
    // An unknown name costs a verification too (a decoy), and fails.
    let (_, head) = connect_as(p, &target, "mallory", "pw-alice");
    assert_eq!(head.status, 407, "{}", head.raw);

    assert_eq!(upstream.accepted(), 2, "only alice's tunnels reached it");
    drop((s, s2));
    wait_no_open_sessions(&proxy);
    let stats = proxy.stats();
    assert_eq!(stats.auth_failures, 3);
    // alice once, bob once (then remembered), two wrong passwords, the decoy.
    assert_eq!(stats.auth_verifications, 5);

    // The sessions' events name the authenticated user.
    let events = events.lock().unwrap();
    let sessions: Vec<&Event> = events
        .iter()
        .filter(|e| e.kind == EventKind::Session)
        .collect();
    let users = |u: &str| {
        sessions
            .iter()
            .filter(|e| e.user.as_deref() == Some(u))
            .count()
    };
    assert_eq!(users("alice"), 2, "{sessions:?}");
    assert_eq!(users("bob"), 2, "{sessions:?}");
    let bob = sessions
        .iter()
        .find(|e| e.user.as_deref() == Some("bob"))
        .unwrap();
    assert_eq!(
        bob.reason.as_deref(),
        Some("user \"bob\" not in rule \"alice-echo\": add it to that rule's users")
    );
    // Refused logins name no user.
    assert_eq!(sessions.iter().filter(|e| e.user.is_none()).count(), 3);
}

#[test]
fn the_forward_proxy_judges_as_the_user_too() {
    let origin = http_server("hello from the origin");
    let (proxy, _) = users_proxy(&origin.target(), cheap);
    let p = proxy_addr(&proxy);
    let url = format!("http://{}/", origin.target());
    let proxy_url = |u: &str| format!("http://{u}@{p}");
    let out = curl(&["-sS", "-x", &proxy_url("alice:pw-alice"), &url]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "hello from the origin"
    );
    let out = curl(&[
        "-sS",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "-x",
        &proxy_url("bob:pw-bob"),
        &url,
    ]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "403");
    // curl over SOCKS5 (socks5h: the proxy resolves) as alice.
    let socks = format!("socks5h://alice:pw-alice@{p}");
    let out = curl(&["-sS", "-x", &socks, &url]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "hello from the origin"
    );
}

#[test]
fn many_tunnels_with_the_same_credentials_pay_argon2_once() {
    let upstream = echo_server();
    let target = upstream.target();
    let (proxy, _) = users_proxy(&target, |pw| hash_password(pw.as_bytes()).unwrap());
    let p = proxy_addr(&proxy);
    // Ten at once: the first is verified, the others share it or find it remembered.
    let handles: Vec<_> = (0..10)
        .map(|i| {
            let target = target.clone();
            std::thread::spawn(move || {
                let (mut s, head) = connect_as(p, &target, "alice", "pw-alice");
                assert_eq!(head.status, 200, "{}", head.raw);
                echoes(&mut s, format!("tunnel {i}").as_bytes());
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(proxy.stats().auth_verifications, 1);
}

#[test]
fn the_reactor_keeps_serving_while_verifications_are_in_flight() {
    let upstream = echo_server();
    let target = upstream.target();
    let (proxy, _) = users_proxy(&target, |pw| hash_password(pw.as_bytes()).unwrap());
    let p = proxy_addr(&proxy);
    let (mut good, head) = connect_as(p, &target, "alice", "pw-alice");
    assert_eq!(head.status, 200, "{}", head.raw);

    // 50 handshakes with distinct wrong passwords, all sent at once.
    let mut bad: Vec<TcpStream> = (0..50)
        .map(|_| {
            let s = TcpStream::connect(p).unwrap();
            s.set_read_timeout(Some(SLOW)).unwrap();
            s
        })
        .collect();
    for (i, s) in bad.iter_mut().enumerate() {
        let auth = basic_auth("alice", &format!("wrong-{i}"));
        let req = format!("CONNECT {target} HTTP/1.1\r\nProxy-Authorization: {auth}\r\n\r\n");
        s.write_all(req.as_bytes()).unwrap();
    }
    // Meanwhile the established tunnel relays, round trip after round trip.
    for i in 0..50 {
        echoes(&mut good, format!("still here {i}").as_bytes());
    }
    // Every bad login is answered: refused (407), or, if the queue was
    // full, refused unverified (503); none hangs, none gets through.
    let (mut refused, mut busy) = (0, 0);
    for s in bad.iter_mut() {
        let head = read_response_head(s).expect("an answer");
        match head.status {
            407 => refused += 1,
            503 => busy += 1,
            other => panic!("{other}: {}", head.raw),
        }
    }
    let stats = proxy.stats();
    assert_eq!(refused + busy, 50);
    assert_eq!(stats.auth_failures, refused);
    assert_eq!(stats.auth_busy, busy);
    echoes(&mut good, b"after the flood");
    assert_eq!(upstream.accepted(), 1);
}

#[test]
fn a_full_verifier_queue_is_a_503_not_a_stall() {
    let upstream = echo_server();
    let target = upstream.target();
    let (proxy, _) = users_proxy(&target, |pw| hash_password(pw.as_bytes()).unwrap());
    let p = proxy_addr(&proxy);
    // Connected first, then all requests written in one burst: the reactor
    // takes them in one go, faster than two threads run argon2, so the
    // queue (64) fills.
    let n = 120;
    let mut socks: Vec<TcpStream> = (0..n)
        .map(|_| {
            let s = TcpStream::connect(p).unwrap();
            s.set_read_timeout(Some(SLOW)).unwrap();
            s
        })
        .collect();
    wait_for("every client accepted", PROMPTLY, || {
        proxy.stats().open.handshake == n as u64
    });
    let reqs: Vec<String> = (0..n)
        .map(|i| {
            let auth = basic_auth("bob", &format!("guess-{i}"));
            format!("CONNECT {target} HTTP/1.1\r\nProxy-Authorization: {auth}\r\n\r\n")
        })
        .collect();
    for (s, req) in socks.iter_mut().zip(&reqs) {
        s.write_all(req.as_bytes()).unwrap();
    }
    let mut busy = 0;
    for s in socks.iter_mut() {
        let head = read_response_head(s).expect("an answer");
        match head.status {
            407 => {}
            503 => {
                busy += 1;
                assert!(
                    head.raw.contains("login verification queue"),
                    "{}",
                    head.raw
                );
            }
            other => panic!("{other}: {}", head.raw),
        }
    }
    assert!(busy > 0, "the queue never filled");
    assert_eq!(proxy.stats().auth_busy, busy);
    // Once it drains, a good login works.
    let (mut s, head) = connect_as(p, &target, "alice", "pw-alice");
    assert_eq!(head.status, 200, "{}", head.raw);
    echoes(&mut s, b"served after the storm");
}

/// Runs `portcullis hash-password ARGS` with `stdin`; its stdout.
fn hash_password_cli(args: &[&str], stdin: &str) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_portcullis"))
        .arg("hash-password")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn hash_password_output_verifies() {
    let out = hash_password_cli(&[], "correct horse\n");
    assert!(out.status.success(), "{out:?}");
    let line = String::from_utf8(out.stdout).unwrap();
    let hash = PhcHash::parse(line.trim()).expect("a PHC string");
    assert!(line.starts_with("$argon2id$"), "{line}");
    assert!(hash.verify(b"correct horse"));
    assert!(!hash.verify(b"correct horse\n"));
    let out = hash_password_cli(&[], "\n");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("empty password"));
}

#[test]
fn auth_file_users_log_in() {
    let upstream = echo_server();
    let dir = TempDir::new("auth-file");
    let mut file = String::from("# portcullis users\n");
    for (user, pw) in [("alice", "pw-a"), ("bob", "pw-b")] {
        let out = hash_password_cli(&["--user", user], &format!("{pw}\n"));
        assert!(out.status.success(), "{out:?}");
        file.push_str(&String::from_utf8(out.stdout).unwrap());
    }
    let path = dir.path().join("users.txt");
    std::fs::write(&path, &file).unwrap();
    let proxy = ChildProxy::start(&[
        "--auth-file",
        path.to_str().unwrap(),
        "--allow",
        &upstream.target(),
    ]);
    for (user, pw) in [("alice", "pw-a"), ("bob", "pw-b")] {
        let (mut s, head) = connect_as(proxy.addr, &upstream.target(), user, pw);
        assert_eq!(head.status, 200, "{user}: {}", head.raw);
        echoes(&mut s, user.as_bytes());
    }
    let (_, head) = connect_as(proxy.addr, &upstream.target(), "alice", "pw-b");
    assert_eq!(head.status, 407);
    // SIGUSR1's stats line counts the refusal and the verifications
    // (alice, bob, the wrong password).
    let stats = proxy.stats();
    assert_eq!(stat(&stats, "auth_failures"), 1);
    assert_eq!(stat(&stats, "auth_verifications"), 3);
}

#[test]
fn auth_env_keeps_the_password_out_of_the_command_line() {
    let upstream = echo_server();
    let secret = "s3cret-from-the-env";
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_portcullis"));
    cmd.args([
        "--listen",
        "127.0.0.1:0",
        "--auth-env",
        "PORTCULLIS_TEST_AUTH",
    ])
    .args(["--allow", &upstream.target()])
    .env("PORTCULLIS_TEST_AUTH", format!("agent:{secret}"));
    let proxy = ChildProxy::start_command(cmd);
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", proxy.pid())).unwrap();
    let cmdline = String::from_utf8_lossy(&cmdline);
    assert!(cmdline.contains("PORTCULLIS_TEST_AUTH"), "{cmdline}");
    assert!(!cmdline.contains(secret), "{cmdline}");
    let (mut s, head) = connect_as(proxy.addr, &upstream.target(), "agent", secret);
    assert_eq!(head.status, 200, "{}", head.raw);
    echoes(&mut s, b"from the env");
    let (_, head) = connect_as(proxy.addr, &upstream.target(), "agent", "nope");
    assert_eq!(head.status, 407);
    // No warning: the password is not on the command line.
    assert!(!proxy.log().iter().any(|l| l.contains("--auth puts")));

    // --auth still works, and says what it costs.
    let proxy = ChildProxy::start(&["--auth", "agent:pw", "--allow", &upstream.target()]);
    let (_, head) = connect_as(proxy.addr, &upstream.target(), "agent", "pw");
    assert_eq!(head.status, 200, "{}", head.raw);
    assert!(
        proxy
            .log()
            .iter()
            .any(|l| l.contains("--auth puts the password on the command line")),
        "{:?}",
        proxy.log()
    );

    // A missing variable is a startup error naming it.
    let out = Command::new(env!("CARGO_BIN_EXE_portcullis"))
        .args(["--auth-env", "PORTCULLIS_TEST_UNSET_VAR", "--check"])
        .env_remove("PORTCULLIS_TEST_UNSET_VAR")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("PORTCULLIS_TEST_UNSET_VAR"));
}

#[test]
fn check_lists_user_names_never_hashes() {
    let dir = TempDir::new("users-check");
    let hash = cheap("pw");
    let path = dir.path().join("p.toml");
    std::fs::write(
        &path,
        format!(
            "[[auth.users]]\nname = \"alice\"\npassword_hash = \"{hash}\"\n\n[[rules]]\nname = \"a\"\naction = \"allow\"\nhost = \"a.test\"\nusers = [\"alice\"]\n"
        ),
    )
    .unwrap();
    let check = |path: &std::path::Path| {
        Command::new(env!("CARGO_BIN_EXE_portcullis"))
            .arg("--config")
            .arg(path)
            .arg("--check")
            .output()
            .unwrap()
    };
    let out = check(&path);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout.contains("auth: on (users \"alice\""), "{stdout}");
    assert!(stdout.contains("users [alice]"), "{stdout}");
    assert!(!stdout.contains("$argon2"), "{stdout}");

    // A rule naming users with auth off: refused, pointing at the key.
    std::fs::write(
        &path,
        "[[rules]]\nname = \"a\"\naction = \"allow\"\nhost = \"a.test\"\nusers = [\"alice\"]\n",
    )
    .unwrap();
    let out = check(&path);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("rules[0].users: line 5, column 9: rule \"a\" names users but auth is off"),
        "{stderr}"
    );
}

#[test]
fn control_refuses_rules_for_users_the_proxy_does_not_have() {
    let upstream = echo_server();
    let target = upstream.target();
    let (proxy, _) = users_proxy(&target, cheap);
    let p = proxy_addr(&proxy);
    let carol = portcullis::policy::RuleConfig::allow("127.0.0.1")
        .name("carol-only")
        .user("carol")
        .build();
    let e = proxy.add_rule(carol).expect_err("carol is no user here");
    assert!(e.to_string().contains("names user \"carol\""), "{e}");
    // bob's own rule is fine, and takes effect for new connections.
    let bobs = portcullis::policy::RuleConfig::allow("127.0.0.1")
        .name("bob-too")
        .user("bob")
        .build();
    proxy.add_rule(bobs).expect("bob is a user");
    let (mut s, head) = connect_as(p, &target, "bob", "pw-bob");
    assert_eq!(head.status, 200, "{}", head.raw);
    echoes(&mut s, b"bob now");
    // Removing it: bob's open tunnel is re-checked as bob, and closed.
    proxy.remove_rule("bob-too").expect("remove");
    let mut buf = [0u8; 1];
    assert!(
        matches!(s.read(&mut buf), Ok(0) | Err(_)),
        "closed by the reload"
    );
    // alice's tunnel opened now stays.
    let (mut a, head) = connect_as(p, &target, "alice", "pw-alice");
    assert_eq!(head.status, 200, "{}", head.raw);
    echoes(&mut a, b"alice still");
}
