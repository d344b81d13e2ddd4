//! Limits sized to the open-file limit, and shedding near it, with the
//! binary run under a low RLIMIT_NOFILE (the machine's hard limit would make
//! these slow). The attacker is a python client running as `nobody`; the
//! victim is this (root) process.
//!
//! - Defaults: one client opening tunnels until refused is stopped at
//!   `max_sessions_per_client` (a quarter of what the fds hold), another uid
//!   is served, and once the attacker closes its sockets the proxy is back
//!   to its baseline fds within the half-close timeout (its upstream never
//!   closes).
//! - Limits set past what the fds hold: the fd reserve refuses the heavy
//!   client (`fd_reserve`) and still serves a light one, without EMFILE.
//! - EMFILE anyway (the limit lowered under the running proxy): the
//!   heaviest client's two oldest pending handshakes are closed (reason
//!   `shed`) to make room, and the new client is served.

use crate::load;
use crate::support;

use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use load::*;
use portcullis::Limits;
use support::*;

/// A proxy binary with RLIMIT_NOFILE `nofile` (soft and hard), `--listen
/// 127.0.0.1:0` and `args`.
fn start_with_nofile(nofile: u64, args: &[&str]) -> ChildProxy {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_portcullis"));
    cmd.arg("--listen").arg("127.0.0.1:0").args(args);
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::resource::setrlimit(
                nix::sys::resource::Resource::RLIMIT_NOFILE,
                nofile,
                nofile,
            )
            .map_err(std::io::Error::from)
        });
    }
    let p = ChildProxy::start_command(cmd);
    assert!(
        p.log()
            .iter()
            .any(|l| l.contains(&format!("open file limit: {nofile}"))),
        "{:?}",
        p.log()
    );
    p
}

/// Session limits far past what 256 fds hold: only the fd budget binds.
const UNLIMITED: &str = "[limits]\nmax_sessions = 10000\nmax_sessions_per_client = 10000\n\
     max_pending_handshakes = 10000\nmax_pending_handshakes_per_client = 10000\n";

/// An upstream that accepts and then neither reads, writes nor closes.
fn silent_server() -> (Server, Arc<Mutex<Vec<TcpStream>>>) {
    let held = Arc::new(Mutex::new(Vec::new()));
    let h = held.clone();
    (Server::start(move |s| h.lock().unwrap().push(s)), held)
}

/// Runs `script` as nobody against `proxy`, aimed at `target`, for at most
/// 1000 sessions: the attacker (still holding what it opened) and its
/// summary line.
fn attack(proxy: &ChildProxy, script: &str, target: String) -> (ChildGuard, String) {
    let mut attacker = spawn_python_as(
        NOBODY,
        script,
        &[
            proxy.addr.ip().to_string(),
            proxy.addr.port().to_string(),
            target,
            "1000".into(),
        ],
    );
    let summary = Lines::of(&mut attacker).next("the attacker's summary", Duration::from_secs(60));
    eprintln!("attacker (nobody): {summary}; proxy fds {}", proxy.fds());
    (attacker, summary)
}

/// Under the attacker's fd pressure a client holding no session (lighter
/// than the mean) is still served, and the proxy never hit EMFILE.
fn a_light_client_is_served(proxy: &ChildProxy, echo: &Server) {
    let mut victim = tunnel_ok(proxy, echo, "a light client under fd pressure");
    assert_echo(&mut victim, b"still");
    let s = proxy.stats();
    assert_eq!(stat(&s, "accept_pauses"), 0, "no EMFILE: {s:?}");
}

/// Opens CONNECT tunnels to a target until one is refused, prints
/// `{"opened": N, "refusal": "<status line>", "error": "<X-Proxy-Error>"}`,
/// then waits for a line on stdin and closes every socket.
const TUNNELS_UNTIL_REFUSED: &str = r#"
import socket, sys, json
host, port, target, cap = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
socks, refusal, error = [], None, None
while len(socks) < cap:
    s = socket.create_connection((host, port))
    s.settimeout(10)
    s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(1)
        if not chunk:
            break
        head += chunk
    lines = head.decode(errors="replace").split("\r\n")
    if lines[0].split(" ")[1:2] == ["200"]:
        socks.append(s)
        continue
    refusal = lines[0]
    error = next((l.split(":", 1)[1].strip() for l in lines if l.lower().startswith("x-proxy-error:")), None)
    s.close()
    break
print(json.dumps({"opened": len(socks), "refusal": refusal, "error": error}), flush=True)
sys.stdin.readline()
for s in socks:
    s.close()
print("closed", flush=True)
sys.stdin.readline()
"#;

/// Opens `n` connections that each send the first byte of a CONNECT
/// (pending handshakes), prints `ready`; on each stdin line, prints the
/// indexes of the connections the proxy has closed.
const PENDING: &str = r#"
import socket, sys, select, json
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
socks = []
for i in range(n):
    s = socket.create_connection((host, port))
    s.sendall(b"C")
    socks.append(s)
print("ready", flush=True)
while sys.stdin.readline():
    closed = []
    for i, s in enumerate(socks):
        r, _, _ = select.select([s], [], [], 0)
        if r:
            closed.append(i)
    print(json.dumps(closed), flush=True)
"#;

fn tunnel_ok(proxy: &ChildProxy, echo: &Server, what: &str) -> TcpStream {
    let mut s = TcpStream::connect(proxy.addr).expect("connect");
    s.set_read_timeout(Some(PROMPTLY)).unwrap();
    let head = http_connect_raw(&mut s, &echo.target()).expect("CONNECT");
    assert_eq!(head.status, 200, "{what}: {}", head.raw);
    assert_echo(&mut s, what.as_bytes());
    s
}

fn field<'a>(json: &'a str, key: &str) -> &'a str {
    let at = json
        .find(&format!("\"{key}\": "))
        .unwrap_or_else(|| panic!("no {key} in {json}"));
    let rest = &json[at + key.len() + 4..];
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    rest[..end].trim_matches('"')
}

/// Sets a running process's RLIMIT_NOFILE with util-linux `prlimit`. Only
/// the soft limit moves: raising a hard limit needs CAP_SYS_RESOURCE, which
/// a container may not grant even to root.
fn set_nofile(pid: u32, soft: u64, hard: u64) {
    let arg = format!("--nofile={soft}:{hard}");
    let st = Command::new("prlimit")
        .args(["--pid", &pid.to_string(), &arg])
        .status()
        .unwrap_or_else(|e| panic!("cannot run prlimit ({e}); this test needs it (util-linux)"));
    assert!(st.success(), "prlimit --pid {pid} {arg}");
}

#[test]
fn one_client_cannot_take_the_proxy_and_its_fds_come_back() {
    const NOFILE: u64 = 2048;
    let per_client = Limits::for_open_files(Some(NOFILE)).max_sessions_per_client;
    let echo = echo_server();
    let (silent, upstreams) = silent_server();
    let proxy = start_with_nofile(
        NOFILE,
        &[
            "--allow",
            &echo.target(),
            "--allow",
            &silent.target(),
            "--half-close-timeout",
            "1s",
            "--close-timeout",
            "1s",
        ],
    );
    let base = baseline(&proxy);

    let mut attacker = spawn_python_as(
        NOBODY,
        TUNNELS_UNTIL_REFUSED,
        &[
            proxy.addr.ip().to_string(),
            proxy.addr.port().to_string(),
            silent.target(),
            (4 * per_client).to_string(),
        ],
    );
    let lines = Lines::of(&mut attacker);
    let summary = lines.next("the attacker's summary", Duration::from_secs(60));
    eprintln!("attacker (nobody): {summary}; the limit per client is {per_client}");
    assert_eq!(
        field(&summary, "opened"),
        per_client.to_string(),
        "{summary}"
    );
    assert!(field(&summary, "refusal").contains(" 503 "), "{summary}");
    assert_eq!(
        field(&summary, "error"),
        "limit; max_sessions_per_client",
        "{summary}"
    );
    wait_for("the attacker's tunnels upstream", PROMPTLY, || {
        upstreams.lock().unwrap().len() == per_client
    });
    assert!(proxy.fds() >= base.fds + 2 * per_client);

    // Another uid is served meanwhile.
    let victim = tunnel_ok(
        &proxy,
        &echo,
        "the victim while the attacker holds its share",
    );
    drop(victim);

    // The attacker closes every socket; its upstreams never close, so each
    // tunnel is half-closed and silent: the half-close timeout ends them.
    let stdin = attacker.stdin.as_mut().unwrap();
    std::io::Write::write_all(stdin, b"close\n").unwrap();
    assert_eq!(lines.next("the attacker closing", PROMPTLY), "closed");
    let s = assert_back_to_baseline(
        &proxy,
        base,
        Duration::from_secs(1) + PROMPTLY,
        32 * 1024,
        "after the attacker closed its sockets",
    );
    assert_eq!(
        stat(&s, "closed.half-close-timeout"),
        per_client as u64,
        "{s:?}"
    );
    assert_eq!(stat(&s, "accept_pauses"), 0, "{s:?}");
}

#[test]
fn past_what_the_fds_hold_the_heavy_client_gives_way_first() {
    const NOFILE: u64 = 256;
    let echo = echo_server();
    let (silent, _upstreams) = silent_server();
    let dir = TempDir::new("fd-reserve");
    let config = write_file(&dir, "limits.toml", UNLIMITED);
    let proxy = start_with_nofile(
        NOFILE,
        &[
            "--config",
            &config,
            "--allow",
            &echo.target(),
            "--allow",
            &silent.target(),
        ],
    );
    let (attacker, summary) = attack(&proxy, TUNNELS_UNTIL_REFUSED, silent.target());
    assert_eq!(field(&summary, "error"), "limit; fd_reserve", "{summary}");
    let opened: usize = field(&summary, "opened").parse().unwrap();
    // Refused before its tunnels could exhaust the fds: some room is left.
    assert!(opened > 0 && 2 * opened < NOFILE as usize, "{summary}");
    assert!(proxy.fds() < NOFILE as usize - 16, "{} fds", proxy.fds());

    // The victim holds no session: lighter than the mean, it is served.
    a_light_client_is_served(&proxy, &echo);
    drop(attacker);
}

#[test]
fn out_of_fds_the_heaviest_clients_oldest_handshakes_make_room() {
    const PENDING_N: usize = 40;
    let echo = echo_server();
    let dir = TempDir::new("fd-shed");
    let config = write_file(&dir, "limits.toml", UNLIMITED);
    let proxy = start_with_nofile(
        256,
        &[
            "--config",
            &config,
            "--allow",
            &echo.target(),
            "--handshake-timeout",
            "60s",
        ],
    );
    let mut attacker = spawn_python_as(
        NOBODY,
        PENDING,
        &[
            proxy.addr.ip().to_string(),
            proxy.addr.port().to_string(),
            PENDING_N.to_string(),
        ],
    );
    let lines = Lines::of(&mut attacker);
    assert_eq!(lines.next("the attacker's handshakes", PROMPTLY), "ready");
    wait_for("the attacker's handshakes pending", PROMPTLY, || {
        stat(&proxy.stats(), "handshake") == PENDING_N as u64
    });
    // Every fd below the limit taken: the next accept fails with EMFILE.
    let limit = first_free_fd(proxy.pid());
    set_nofile(proxy.pid(), limit, 256);
    eprintln!("limit lowered to {limit} with {} fds open", proxy.fds());

    let _victim = tunnel_ok(&proxy, &echo, "a new client once room is made");
    let s = proxy.stats();
    assert_eq!(stat(&s, "closed.shed"), 2, "{s:?}");
    assert_eq!(stat(&s, "accept_pauses"), 0, "{s:?}");
    // The two oldest of the attacker's handshakes were the ones closed.
    let stdin = attacker.stdin.as_mut().unwrap();
    std::io::Write::write_all(stdin, b"which\n").unwrap();
    assert_eq!(lines.next("closed connections", PROMPTLY), "[0, 1]");
    proxy.wait_for_line("saying the heaviest client's handshakes were closed", |l| {
        l.contains("closing pending handshakes of the heaviest client")
    });
    // The shed sessions' lines follow the warning, and are counted before
    // they are written: wait for both.
    let shed = || {
        proxy
            .log()
            .into_iter()
            .filter(|l| l.contains("event=session ") && l.contains("close=shed"))
            .collect::<Vec<_>>()
    };
    wait_for("both shed sessions' access lines", PROMPTLY, || {
        shed().len() >= 2
    });
    let shed_lines = shed();
    assert_eq!(shed_lines.len(), 2, "{shed_lines:?}");
    assert!(
        shed_lines
            .iter()
            .all(|l| l.contains(&format!("client_uid={NOBODY} "))),
        "{shed_lines:?}"
    );
    set_nofile(proxy.pid(), 256, 256);
    drop(attacker);
}

/// Opens SOCKS5 UDP associations until one is refused, each carrying one
/// datagram to the UDP echo at `127.0.0.1:<echo>` and back (so the proxy
/// holds its relay and outbound sockets); prints `{"opened": N, "reply":
/// <the refusing reply code, or the error>}`, then waits for a line on
/// stdin and closes every socket.
const ASSOCIATIONS_UNTIL_REFUSED: &str = r#"
import socket, sys, json, struct
host, port, echo, cap = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
held, reply = [], None
while len(held) < cap:
    try:
        c = socket.create_connection((host, port))
        c.settimeout(10)
        c.sendall(b"\x05\x01\x00")
        if c.recv(2) != b"\x05\x00":
            reply = "greeting refused"
            break
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.bind(("127.0.0.1", 0))
        u.settimeout(10)
        c.sendall(b"\x05\x03\x00\x01\x7f\x00\x00\x01" + struct.pack(">H", u.getsockname()[1]))
        rep = c.recv(10)
        if len(rep) < 2 or rep[1] != 0:
            reply = rep[1] if len(rep) > 1 else "closed"
            c.close()
            u.close()
            break
        relay = (socket.inet_ntoa(rep[4:8]), struct.unpack(">H", rep[8:10])[0])
        u.sendto(b"\x00\x00\x00\x01\x7f\x00\x00\x01" + struct.pack(">H", echo) + b"hi", relay)
        u.recvfrom(64)
        held.append((c, u))
    except Exception as e:
        reply = repr(e)
        break
print(json.dumps({"opened": len(held), "reply": reply}), flush=True)
sys.stdin.readline()
for c, u in held:
    c.close()
    u.close()
print("closed", flush=True)
"#;

/// A UDP association holds three fds (control, relay, outbound), not the
/// two a tunnel does: the fd reserve counts the third, so one client
/// opening associations is refused (`fd_reserve`) before the proxy runs
/// out of fds, and a light client is still served, without EMFILE.
#[test]
fn udp_associations_count_their_third_fd() {
    const NOFILE: u64 = 256;
    let echo = echo_server();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let udp_port = udp.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        while let Ok((n, from)) = udp.recv_from(&mut buf) {
            let _ = udp.send_to(&buf[..n], from);
        }
    });
    let dir = TempDir::new("fd-udp");
    let config = write_file(&dir, "limits.toml", UNLIMITED);
    let proxy = start_with_nofile(
        NOFILE,
        &[
            "--config",
            &config,
            "--allow",
            &echo.target(),
            "--allow",
            &format!("127.0.0.1:{udp_port}"),
        ],
    );
    let (attacker, summary) = attack(&proxy, ASSOCIATIONS_UNTIL_REFUSED, udp_port.to_string());
    let opened: usize = field(&summary, "opened").parse().unwrap();
    assert!(opened > 0 && 3 * opened < NOFILE as usize, "{summary}");
    // 0x01 (general failure): SOCKS5's answer to a limit.
    assert_eq!(field(&summary, "reply"), "1", "{summary}");
    proxy.wait_for_line("the fd_reserve refusal", |l| {
        l.contains("refused, at the fd_reserve limit")
    });
    assert!(proxy.fds() < NOFILE as usize - 16, "{} fds", proxy.fds());
    a_light_client_is_served(&proxy, &echo);
    drop(attacker);
}

/// Out of fds, an association cannot open its outbound socket: each
/// datagram is dropped (`send-failed`), with one warning per association,
/// not one per datagram.
#[test]
fn udp_without_an_outbound_socket_warns_once() {
    let proxy = start_with_nofile(256, &["--allow", "127.0.0.1:9"]);
    let client = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut c = TcpStream::connect(proxy.addr).unwrap();
    c.set_read_timeout(Some(PROMPTLY)).unwrap();
    std::io::Write::write_all(&mut c, &[5, 1, 0]).unwrap();
    let mut sel = [0u8; 2];
    std::io::Read::read_exact(&mut c, &mut sel).unwrap();
    let mut req = vec![5, 3, 0, 1, 127, 0, 0, 1];
    req.extend(client.local_addr().unwrap().port().to_be_bytes());
    std::io::Write::write_all(&mut c, &req).unwrap();
    let mut rep = [0u8; 10];
    std::io::Read::read_exact(&mut c, &mut rep).unwrap();
    assert_eq!(rep[1], 0, "{rep:?}");
    let relay = std::net::SocketAddr::from(([127, 0, 0, 1], u16::from_be_bytes([rep[8], rep[9]])));
    // No fd left below the limit.
    let limit = first_free_fd(proxy.pid());
    set_nofile(proxy.pid(), limit, 256);
    const N: u64 = 50;
    for _ in 0..N {
        client
            .send_to(&[0, 0, 0, 1, 127, 0, 0, 1, 0, 9, b'x'], relay)
            .unwrap();
    }
    wait_for("every datagram dropped", PROMPTLY, || {
        stat(&proxy.stats(), "udp_dropped") == N
    });
    set_nofile(proxy.pid(), 256, 256);
    let warnings = proxy
        .log()
        .iter()
        .filter(|l| l.contains("cannot open an outbound socket"))
        .count();
    assert_eq!(warnings, 1, "{:?}", proxy.log());
}
