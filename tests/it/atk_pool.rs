//! Attacks on the unidentified loopback pool (commit b7c5484), run against
//! the real binary with access lines off (`portcullis::event=warn`), so
//! loopback clients' uids are asked only when admission needs them. The
//! attacker is `nobody` (sockets made with setfsuid); the tests run as root.

use crate::load;
use crate::support;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

use load::*;
use support::*;

const NO_ACCESS_LINES: &str = "info,portcullis::event=warn";

fn start(
    limits: &str,
    echo: &Server,
    nofile: Option<u64>,
    extra: &[&str],
) -> (TempDir, ChildProxy) {
    let dir = TempDir::new("atk-pool");
    let config = write_file(&dir, "limits.toml", limits);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_portcullis"));
    cmd.env("RUST_LOG", NO_ACCESS_LINES)
        .args([
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
        ])
        .args(extra);
    if let Some(n) = nofile {
        // SAFETY: setrlimit is async-signal-safe.
        unsafe {
            cmd.pre_exec(move || {
                nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, n, n)
                    .map_err(std::io::Error::from)
            });
        }
    }
    (dir, ChildProxy::start_command(cmd))
}

/// A connection of `uid` that sent the first byte of a CONNECT.
fn pending(uid: u32, proxy: &ChildProxy) -> TcpStream {
    let mut s = connect_as(uid, ip("127.0.0.1"), proxy.addr).expect("connect");
    s.write_all(b"C").unwrap();
    s
}

/// A CONNECT tunnel of `uid`, or None when refused.
fn tunnel(uid: u32, proxy: &ChildProxy, echo: &Server) -> Option<TcpStream> {
    let mut s = connect_as(uid, ip("127.0.0.1"), proxy.addr).expect("connect");
    s.set_read_timeout(Some(PROMPTLY)).unwrap();
    let head = http_connect_raw(&mut s, &echo.target()).expect("CONNECT");
    match head.status {
        200 => Some(s),
        503 => None,
        _ => panic!("{}", head.raw),
    }
}

/// Whether the proxy closed `s` (EOF or reset), within a short wait.
fn closed(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut b = [0u8; 64];
    match s.read(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => false,
        Err(_) => true,
    }
}

/// nobody leaves 2 handshakes pending: the pool is "full" by its
/// handshake share (8 / 4) while it holds 2 of its 10 sessions. Its tunnels
/// are then identified and counted with the pool's 2: 38 more. It closes
/// the 2 pending, and the pool, empty, takes 10 of its tunnels more. 48 with
/// a limit of 40.
fn a_uid_passes_max_sessions_per_client_by_refilling_the_pool(workers: &str) {
    let echo = echo_server();
    let (_dir, proxy) = start(
        "[limits]\nmax_sessions_per_client = 40\nmax_pending_handshakes_per_client = 8\n",
        &echo,
        None,
        &["--workers", workers],
    );
    let held: Vec<TcpStream> = (0..2).map(|_| pending(NOBODY, &proxy)).collect();
    wait_for("two pending handshakes", PROMPTLY, || {
        stat(&proxy.stats(), "handshake") == 2
    });
    let mut tunnels = Vec::new();
    while let Some(t) = tunnel(NOBODY, &proxy, &echo) {
        tunnels.push(t);
        assert!(tunnels.len() <= 40, "runaway");
    }
    let first = tunnels.len();
    drop(held);
    wait_for("the pending ones gone", PROMPTLY, || {
        stat(&proxy.stats(), "handshake") == 0
            && stat(&proxy.stats(), "established") == first as u64
    });
    while let Some(t) = tunnel(NOBODY, &proxy, &echo) {
        tunnels.push(t);
        assert!(tunnels.len() <= 80, "runaway");
    }
    eprintln!("nobody: {first} tunnels, then {} in all", tunnels.len());
    assert!(
        tunnels.len() <= 40,
        "nobody holds {} tunnels; max_sessions_per_client is 40",
        tunnels.len()
    );
}

#[test]
fn atk_a_uid_passes_max_sessions_per_client_by_refilling_the_pool() {
    a_uid_passes_max_sessions_per_client_by_refilling_the_pool("1");
}

#[test]
fn atk_a_uid_passes_max_sessions_per_client_by_refilling_the_pool_workers_2() {
    a_uid_passes_max_sessions_per_client_by_refilling_the_pool("2");
}

fn set_nofile(pid: u32, soft: u64, hard: u64) {
    let arg = format!("--nofile={soft}:{hard}");
    let st = Command::new("prlimit")
        .args(["--pid", &pid.to_string(), &arg])
        .status()
        .expect("prlimit");
    assert!(st.success(), "prlimit --pid {pid} {arg}");
}

/// Out of fds, the pending handshakes of the heaviest client are shed. The
/// pool is one client to `heaviest()`: nobody keeps its 8 sessions (6
/// tunnels and 2 handshakes) pooled, with root's 2 older handshakes, and the
/// pool is "heaviest" (10 sessions): the two oldest pooled handshakes, root's
/// (2 sessions), are shed instead of nobody's. With uids asked at accept
/// (access lines on), nobody would be the heaviest and root kept.
#[test]
fn atk_shedding_closes_a_light_uids_pooled_handshakes_for_a_heavy_one() {
    let echo = echo_server();
    let (_dir, proxy) = start(
        "[limits]\nmax_sessions = 10000\nmax_sessions_per_client = 40\n\
         max_pending_handshakes = 10000\nmax_pending_handshakes_per_client = 40\n",
        &echo,
        Some(256),
        &[],
    );
    let mut victim: Vec<TcpStream> = (0..2).map(|_| pending(0, &proxy)).collect();
    let _tunnels: Vec<TcpStream> = (0..6)
        .map(|_| tunnel(NOBODY, &proxy, &echo).expect("nobody's tunnel"))
        .collect();
    let mut attacker: Vec<TcpStream> = (0..2).map(|_| pending(NOBODY, &proxy)).collect();
    wait_for("4 pending handshakes", PROMPTLY, || {
        stat(&proxy.stats(), "handshake") == 4
    });
    let limit = first_free_fd(proxy.pid());
    set_nofile(proxy.pid(), limit, 256);
    // A new client: accept fails with EMFILE, shedding makes room.
    let mut s = TcpStream::connect(proxy.addr).unwrap();
    s.set_read_timeout(Some(PROMPTLY)).unwrap();
    let head = http_connect_raw(&mut s, &echo.target()).expect("CONNECT");
    assert_eq!(head.status, 200, "{}", head.raw);
    let st = proxy.stats();
    set_nofile(proxy.pid(), 256, 256);
    eprintln!("closed.shed={:?}", st.get("closed.shed"));
    let victims_closed = victim.iter_mut().map(closed).filter(|&c| c).count();
    let attacker_closed = attacker.iter_mut().map(closed).filter(|&c| c).count();
    assert!(
        victims_closed == 0 && attacker_closed == 2,
        "shed {victims_closed} of root's 2 handshakes (root: 2 sessions) and \
         {attacker_closed} of nobody's 2 (nobody: 8 sessions)"
    );
}

/// A client that closes its socket before the proxy accepts it leaves a
/// FIN_WAIT2 timewait socket behind (loopback acks the FIN at once). The
/// kernel reports such a `tw_sock` with `idiag_state` FIN_WAIT2 (its
/// substate), uid 0 and inode 0; the decoder only treats the TIME_WAIT
/// state as ownerless, so nobody's connection is counted, and logged, as
/// root's (`client_uid=0`), and what it sent before closing is still
/// served. The proxy is stopped (SIGSTOP) meanwhile so the close lands
/// before the accept.
#[test]
fn atk_a_client_gone_before_the_lookup_is_taken_for_root() {
    let echo = echo_server();
    let (_dir, proxy) = {
        let dir = TempDir::new("atk-gone");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_portcullis"));
        cmd.env("RUST_LOG", "info")
            .args(["--listen", "127.0.0.1:0", "--allow", &echo.target()]);
        (dir, ChildProxy::start_command(cmd))
    };
    let pid = nix::unistd::Pid::from_raw(proxy.pid() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let client = {
        let mut s = connect_as(NOBODY, ip("127.0.0.5"), proxy.addr).expect("connect");
        let t = echo.target();
        s.write_all(format!("CONNECT {t} HTTP/1.1\r\nHost: {t}\r\n\r\nhello").as_bytes())
            .unwrap();
        s.local_addr().unwrap()
    };
    gone_before_the_accept(&proxy, client);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    let line = || {
        proxy
            .log()
            .into_iter()
            .find(|l| l.contains("event=session ") && l.contains("client=127.0.0.5:"))
    };
    wait_for("the access line", PROMPTLY, || line().is_some());
    let line = line().unwrap();
    eprintln!("{line}");
    assert!(
        !line.contains("client_uid=0 "),
        "nobody's connection was taken for root's: {line}"
    );
}

/// The fd reserve with the pool (tests/fd_limits.rs's
/// `past_what_the_fds_hold_the_heavy_client_gives_way_first`, access lines
/// off). Per-client limits past what 256 fds hold make the pool's quarter
/// larger than the fds: nobody's tunnels are all pooled until fd pressure,
/// then identified under a uid that holds none of them ("light"), so the
/// reserve lets it double up: accept hits EMFILE with no handshake to shed
/// and pauses, and every other uid is locked out while nobody holds its
/// tunnels.
#[test]
fn atk_a_pooled_uid_runs_the_proxy_out_of_fds() {
    const NOFILE: u64 = 256;
    let echo = echo_server();
    let held = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let h = held.clone();
    let silent = Server::start(move |s| h.lock().unwrap().push(s));
    let (_dir, proxy) = start(
        "[limits]\nmax_sessions = 10000\nmax_sessions_per_client = 10000\n\
         max_pending_handshakes = 10000\nmax_pending_handshakes_per_client = 10000\n",
        &echo,
        Some(NOFILE),
        &["--allow", &silent.target()],
    );
    let mut tunnels = Vec::new();
    let refusal = loop {
        let mut s = connect_as(NOBODY, ip("127.0.0.1"), proxy.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        match http_connect_raw(&mut s, &silent.target()) {
            Ok(head) if head.status == 200 => tunnels.push(s),
            Ok(head) => break head.header("X-Proxy-Error").unwrap_or("").to_string(),
            Err(e) => break format!("no answer ({e})"),
        }
        assert!(tunnels.len() < NOFILE as usize, "runaway");
    };
    let s = proxy.stats();
    eprintln!("nobody: {} tunnels, then {refusal}; {s:?}", tunnels.len());
    // Root, holding nothing, is served (or locked out while nobody holds on).
    let mut v = TcpStream::connect(proxy.addr).unwrap();
    v.set_read_timeout(Some(PROMPTLY)).unwrap();
    let victim = http_connect_raw(&mut v, &echo.target());
    assert!(
        matches!(&victim, Ok(h) if h.status == 200),
        "root, holding no session, not served: {victim:?}"
    );
    assert_eq!(refusal, "limit; fd_reserve");
    assert_eq!(stat(&s, "accept_pauses"), 0, "EMFILE: {s:?}");
}

fn stop(proxy: &ChildProxy) {
    let pid = nix::unistd::Pid::from_raw(proxy.pid() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    // Stopped for real (every thread) before going on.
    wait_for("the proxy stopped", PROMPTLY, || {
        std::fs::read_dir(format!("/proc/{}/task", proxy.pid()))
            .unwrap()
            .all(|t| {
                let stat = std::fs::read_to_string(t.unwrap().path().join("stat")).unwrap();
                stat.rsplit(')')
                    .next()
                    .unwrap()
                    .trim_start()
                    .starts_with('T')
            })
    });
}

/// Waits until the kernel holds `client`'s connection to the stopped
/// proxy in `state` (its end, waiting in the accept queue or accepted).
fn proxy_end_in(proxy: &ChildProxy, client: std::net::SocketAddr, state: u8, what: &str) {
    wait_for(what, PROMPTLY, || {
        tcp_row(proxy.addr, client).is_some_and(|r| r.state == state)
    });
}

/// Waits until `client`, closed, is gone before the stopped proxy accepts
/// it: its FIN in the proxy's end, acked (the client's end a FIN_WAIT2
/// timewait socket).
fn gone_before_the_accept(proxy: &ChildProxy, client: std::net::SocketAddr) {
    proxy_end_in(
        proxy,
        client,
        TCP_CLOSE_WAIT,
        "the client's FIN in the proxy's end",
    );
    wait_for("the client's end in FIN_WAIT2", PROMPTLY, || {
        tcp_row(client, proxy.addr).is_some_and(|r| r.state == TCP_FIN_WAIT2)
    });
}

fn cont(proxy: &ChildProxy) {
    let pid = nix::unistd::Pid::from_raw(proxy.pid() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
}

/// Round 2. `Reactor::identify_pool` walks every slot with a stored tuple,
/// including one whose session ended earlier in the same poll iteration
/// (`ended(Loopback)` already ran; the slot waits for the reap): that slot
/// is `leave_pool`ed too, so the pool is decremented twice and its owner
/// gains a session that never ends (a client gone: keyed by its address,
/// here 127.0.0.1). Each round: nobody's pooled handshake P ends (EOF) in
/// the same iteration as an accept that hits EMFILE and sheds (shedding
/// identifies the pool first); the proxy is stopped meanwhile so both
/// events land in one `epoll_wait`, P's first. After 8 rounds, with nothing
/// open, a client keyed 127.0.0.1 (one gone before its lookup) is refused
/// at max_sessions_per_client.
#[test]
fn atk_a_session_ended_in_the_same_iteration_leaks_into_its_owner() {
    let echo = echo_server();
    let (_dir, proxy) = start(
        "[limits]\nmax_sessions_per_client = 8\nmax_pending_handshakes_per_client = 8\n",
        &echo,
        Some(256),
        &[],
    );
    for round in 0..8 {
        // Two pooled handshakes of nobody's (the pool's cap is 8 / 4 = 2).
        let p = pending(NOBODY, &proxy);
        let p2 = pending(NOBODY, &proxy);
        wait_for("two pending handshakes", PROMPTLY, || {
            stat(&proxy.stats(), "handshake") == 2
        });
        // Below P's fd too (P's and P2's are the last two sockets accepted):
        // the fd P frees is not accept's to take.
        let mut sockets: Vec<u64> = std::fs::read_dir(format!("/proc/{}/fd", proxy.pid()))
            .unwrap()
            .map(|e| e.unwrap())
            .filter(|e| {
                std::fs::read_link(e.path())
                    .is_ok_and(|l| l.to_string_lossy().starts_with("socket:"))
            })
            .map(|e| e.file_name().to_string_lossy().parse().unwrap())
            .collect();
        sockets.sort();
        let limit = sockets[sockets.len() - 2];
        set_nofile(proxy.pid(), limit, 256);
        stop(&proxy);
        // P ends ...
        p.shutdown(std::net::Shutdown::Write).unwrap();
        let p_addr = p.local_addr().unwrap();
        proxy_end_in(&proxy, p_addr, TCP_CLOSE_WAIT, "P's FIN in the proxy's end");
        // ... and a new client's accept fails with EMFILE: shed.
        let x = TcpStream::connect(proxy.addr).unwrap();
        let x_addr = x.local_addr().unwrap();
        proxy_end_in(&proxy, x_addr, TCP_ESTABLISHED, "X in the accept queue");
        cont(&proxy);
        wait_for("P gone, P2 shed", PROMPTLY, || {
            stat(&proxy.stats(), "handshake") == 0
        });
        set_nofile(proxy.pid(), 256, 256);
        drop((p, p2, x));
        wait_for("nothing open", PROMPTLY, || {
            stat(&proxy.stats(), "open") == 0
        });
        eprintln!("round {round}: {:?}", proxy.stats().get("closed.shed"));
    }
    // A client keyed 127.0.0.1: its lookup finds no one (gone before the
    // accept; the pool is full of nobody's handshake so it is asked).
    let _held = pending(NOBODY, &proxy);
    wait_for("the held handshake", PROMPTLY, || {
        stat(&proxy.stats(), "handshake") == 1
    });
    let accepted = stat(&proxy.stats(), "accepted");
    stop(&proxy);
    let client = {
        let mut s = connect_as(NOBODY, ip("127.0.0.1"), proxy.addr).expect("connect");
        let t = echo.target();
        s.write_all(format!("CONNECT {t} HTTP/1.1\r\nHost: {t}\r\n\r\n").as_bytes())
            .unwrap();
        s.local_addr().unwrap()
    };
    gone_before_the_accept(&proxy, client);
    cont(&proxy);
    // Admitted or refused when accepted (a refusal is logged then), and
    // ended since; every line written before the stats line is read with it.
    wait_for(
        "the gone client's connection accepted and ended",
        PROMPTLY,
        || {
            let s = proxy.stats();
            stat(&s, "accepted") == accepted + 1 && stat(&s, "open") == 1
        },
    );
    let refused: Vec<String> = proxy
        .log()
        .into_iter()
        .filter(|l| l.contains("refused, at the max_sessions_per_client"))
        .collect();
    assert!(
        refused.is_empty(),
        "with nothing open, refused at the per-client limit: {refused:?}"
    );
}
