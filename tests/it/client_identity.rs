//! Loopback clients are told apart by the uid that owns their socket (the
//! kernel's socket diagnostics), not by the loopback address they bind:
//! a process of one uid that opens handshakes from 127.0.0.2, .3 and .4 is
//! one client, refused at its per-client limit, and a client of another uid,
//! from the very same addresses, is still served. Access lines say who.
//!
//! The attacker runs as `nobody` through `setpriv` (the tests run as root,
//! as CI does).

use crate::load;
use crate::support;

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::process::Command;
use std::time::Duration;

use load::*;
use support::*;

const PER_CLIENT: usize = 64;
const ATTEMPTS: usize = 100;

/// Opens `n` connections round-robin from 127.0.0.2/.3/.4, sends each the
/// first byte of a CONNECT (a pending handshake; one past a limit is
/// answered at once), collects `expect` answers (or gives up after 20 s),
/// prints a summary line, closes the answered ones, then holds the rest
/// until stdin closes.
const ATTACKER: &str = r#"
import socket, sys, select, time, json, collections
host, port, n, expect = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
srcs = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
socks = []
for i in range(n):
    s = socket.socket()
    s.bind((srcs[i % 3], 0))
    s.connect((host, port))
    s.sendall(b"C")
    socks.append(s)
p = select.poll()
byfd = {s.fileno(): s for s in socks}
for fd in byfd:
    p.register(fd, select.POLLIN)
answers = {}
deadline = time.monotonic() + 20
while len(answers) < expect and time.monotonic() < deadline:
    for fd, _ in p.poll(200):
        s = byfd[fd]
        s.settimeout(5)
        data = b""
        while True:
            try:
                chunk = s.recv(4096)
            except OSError:
                break
            if not chunk:
                break
            data += chunk
        answers[fd] = data
        p.unregister(fd)
statuses = collections.Counter(d.split(b"\r\n")[0].decode() for d in answers.values())
errors = collections.Counter(
    l.split(b":", 1)[1].strip().decode()
    for d in answers.values() for l in d.split(b"\r\n") if l.lower().startswith(b"x-proxy-error:"))
srcs_answered = collections.Counter(byfd[fd].getsockname()[0] for fd in answers)
print(json.dumps({"answered": len(answers), "statuses": statuses, "errors": errors, "srcs": srcs_answered}), flush=True)
for fd in answers:
    byfd[fd].close()
sys.stdin.read()
"#;

/// Starts a proxy (with `rust_log`) allowing `echo`, has `nobody` open
/// `ATTEMPTS` handshakes from 127.0.0.2/.3/.4, and checks it is refused at
/// its per-client limit as one client while root, from the same addresses,
/// is served. Returns the proxy and the attacker, still holding its
/// pending handshakes.
fn nobody_is_refused_as_one_client(echo: &Server, rust_log: &str) -> (ChildProxy, ChildGuard) {
    let dir = TempDir::new("ident");
    let config = write_file(
        &dir,
        "limits.toml",
        &format!("[limits]\nmax_pending_handshakes_per_client = {PER_CLIENT}\n"),
    );
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_portcullis"));
    cmd.env("RUST_LOG", rust_log).args([
        "--listen",
        "127.0.0.1:0",
        "--config",
        &config,
        "--allow",
        &echo.target(),
        "--handshake-timeout",
        "60s",
        "--close-timeout",
        "1s",
    ]);
    let proxy = ChildProxy::start_command(cmd);
    let expect = ATTEMPTS - PER_CLIENT;
    let mut attacker = spawn_python_as(
        NOBODY,
        ATTACKER,
        &[
            proxy.addr.ip().to_string(),
            proxy.addr.port().to_string(),
            ATTEMPTS.to_string(),
            expect.to_string(),
        ],
    );
    let lines = Lines::of(&mut attacker);
    let summary = lines.next("the attacker's summary", Duration::from_secs(60));
    eprintln!("attacker (nobody): {summary}");
    // Refused at its per-client limit across all three addresses together:
    // per address it would have had 64 each and never been refused.
    assert!(
        summary.contains(&format!("\"answered\": {expect}")),
        "{summary}"
    );
    assert!(
        summary.contains(&format!(
            "\"errors\": {{\"limit; max_pending_handshakes_per_client\": {expect}}}"
        )),
        "{summary}"
    );
    assert!(summary.contains("HTTP/1.1 503"), "{summary}");
    wait_for("the attacker's handshakes pending", PROMPTLY, || {
        stat(&proxy.stats(), "handshake") == PER_CLIENT as u64
    });

    // A root client from the attacker's own addresses is another client.
    for src in ["127.0.0.2", "127.0.0.3"] {
        let mut s = connect_from(ip(src), proxy.addr).expect("connect");
        s.set_read_timeout(Some(PROMPTLY)).unwrap();
        let head = http_connect_raw(&mut s, &echo.target()).expect("CONNECT");
        assert_eq!(head.status, 200, "the victim from {src}: {}", head.raw);
        assert_echo(&mut s, b"served while nobody is at its limit");
    }

    (proxy, attacker)
}

#[test]
fn a_uid_binding_more_loopback_addresses_is_still_one_client() {
    let echo = echo_server();
    let (proxy, attacker) = nobody_is_refused_as_one_client(&echo, "info");
    let expect = ATTEMPTS - PER_CLIENT;

    // Access lines say who: the refused attacker's with its uid, the
    // victim's with root's.
    let uid_line = |uid: u32, close: &str| {
        let needle = format!("client_uid={uid} ");
        proxy
            .log()
            .into_iter()
            .filter(|l| l.contains("event=session ") && l.contains(&needle) && l.contains(close))
            .count()
    };
    wait_for("the refused attacker's access lines", PROMPTLY, || {
        uid_line(NOBODY, "close=limit") == expect
    });
    wait_for("the victim's access lines", PROMPTLY, || {
        uid_line(0, "decision=allow") == 2
    });
    // One line per victim, each with its own source address (the two may
    // close in either order).
    let victims: Vec<String> = proxy
        .log()
        .into_iter()
        .filter(|l| l.contains("event=session ") && l.contains("client_uid=0 "))
        .collect();
    for src in ["127.0.0.2", "127.0.0.3"] {
        let from = format!("client={src}:");
        assert!(victims.iter().any(|l| l.contains(&from)), "{victims:?}");
    }
    assert_eq!(uid_line(NOBODY, "decision=allow"), 0);
    drop(attacker);
}

/// With no access line to write, a loopback client's uid is not asked until
/// admission needs it: the first quarter of the per-client limit is pooled
/// unidentified, the pool counts against every local client, so the
/// attacker is still refused at exactly its limit and root is still served.
#[test]
fn without_access_lines_uids_are_asked_only_when_a_limit_needs_them() {
    let echo = echo_server();
    let (proxy, attacker) = nobody_is_refused_as_one_client(&echo, "info,portcullis::event=warn");
    // A stats line comes after every line written before it: once it is
    // read, so is any access line.
    let _ = proxy.stats();
    assert!(
        !proxy.log().iter().any(|l| l.contains("event=session ")),
        "access lines were off"
    );
    drop(attacker);
}

#[test]
fn unix_peers_are_their_uid_and_pid_and_share_the_tcp_count() {
    let echo = echo_server();
    let dir = TempDir::new("ident-unix");
    let path = dir.path().join("p.sock");
    let config = write_file(
        &dir,
        "limits.toml",
        "[limits]\nmax_sessions_per_client = 1\n",
    );
    let proxy = ChildProxy::start(&[
        "--config",
        &config,
        "--listen",
        &format!("unix:{}", path.display()),
        "--allow",
        &echo.target(),
    ]);
    // ChildProxy adds a TCP listener first; the Unix one comes second.
    let mut u = UnixStream::connect(&path).expect("unix listener");
    u.set_read_timeout(Some(PROMPTLY)).unwrap();
    let head = http_connect_on(&mut u, &echo.target(), &[]).expect("CONNECT");
    assert_eq!(head.status, 200, "{}", head.raw);
    assert_echo(&mut u, b"over unix");

    // The same uid over loopback TCP is the same client: its one session is taken.
    let mut t = connect_from(ip("127.0.0.9"), proxy.addr).unwrap();
    t.set_read_timeout(Some(PROMPTLY)).unwrap();
    let head = http_connect_raw(&mut t, &echo.target()).expect("CONNECT");
    assert_eq!(head.status, 503, "{}", head.raw);
    assert_eq!(
        head.header("X-Proxy-Error"),
        Some("limit; max_sessions_per_client")
    );
    // Another uid is not.
    let mut other = connect_as(NOBODY, ip("127.0.0.9"), proxy.addr).unwrap();
    other.set_read_timeout(Some(PROMPTLY)).unwrap();
    let head = http_connect_raw(&mut other, &echo.target()).expect("CONNECT");
    assert_eq!(head.status, 200, "{}", head.raw);

    u.write_all(b"bye").unwrap();
    drop(u);
    let me = format!(
        "client=unix client_uid=0 client_pid={} ",
        std::process::id()
    );
    wait_for("the unix client's access line", PROMPTLY, || {
        proxy
            .log()
            .iter()
            .any(|l| l.contains("event=session ") && l.contains(&me))
    });
    drop(other);
    let nobody = format!("client_uid={NOBODY} ");
    wait_for("nobody's access line", PROMPTLY, || {
        proxy.log().iter().any(|l| {
            l.contains("event=session ") && l.contains("client=127.0.0.9:") && l.contains(&nobody)
        })
    });
}
