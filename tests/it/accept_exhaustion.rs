//! Out of file descriptors with nothing to shed: the proxy's soft
//! RLIMIT_NOFILE is lowered under it (with `prlimit`) until every fd below
//! the limit is taken, while it holds only established tunnels. Accepting
//! fails with EMFILE and no pending handshake can make room, so the proxy
//! must stay up, keep serving open tunnels, pause accepting (one log line per
//! episode, `accept_pauses` counted) without spinning, and accept again once
//! the limit allows. (Shedding, when there is something to shed, is
//! tests/fd_limits.rs.)

use crate::support;

use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::thread;
use std::time::Duration;

use support::*;

/// The proxy's fd limit at start, soft and hard.
const NOFILE: u64 = 256;

fn start_low_nofile(args: &[&str]) -> ChildProxy {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_portcullis"));
    cmd.arg("--listen").arg("127.0.0.1:0").args(args);
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::resource::setrlimit(
                nix::sys::resource::Resource::RLIMIT_NOFILE,
                NOFILE,
                NOFILE,
            )
            .map_err(std::io::Error::from)
        });
    }
    ChildProxy::start_command(cmd)
}

#[test]
#[ignore = "stress: scripts/stress.sh runs it"]
fn fd_exhaustion_pauses_accepts_without_spinning_and_recovers() {
    let echo = echo_server();
    let proxy = start_low_nofile(&[
        "--allow",
        &echo.target(),
        "--handshake-timeout",
        "60s",
        "--close-timeout",
        "1s",
    ]);
    assert!(
        proxy
            .log()
            .iter()
            .any(|l| l.contains(&format!("open file limit: {NOFILE}"))),
        "expected `open file limit: {NOFILE}` in the log: {:?}",
        proxy.log()
    );
    let base_fds = proxy.fds();

    // A few tunnels that must survive the exhaustion.
    let mut tunnels: Vec<TcpStream> = (0..4)
        .map(|_| connect_via_http(proxy.addr, &echo.target()))
        .collect();
    for t in &mut tunnels {
        t.set_read_timeout(Some(PROMPTLY)).unwrap();
        assert_echo(t, b"before");
    }

    // Every fd below the limit taken: quiet connections wait in the backlog.
    let limit = first_free_fd(proxy.pid());
    set_soft_nofile(proxy.pid(), limit);
    let mut held = Vec::new();
    for _ in 0..16 {
        held.push(TcpStream::connect(proxy.addr).expect("connect (kernel backlog)"));
    }
    wait_for("an accept pause", PROMPTLY, || {
        stat(&proxy.stats(), "accept_pauses") > 0
    });
    let st = proxy.stats();
    assert_eq!(stat(&st, "open"), 4, "{st:?}");
    assert_eq!(st.get("closed.shed"), None, "nothing to shed: {st:?}");
    eprintln!(
        "exhausted: {} fds below a limit of {limit}, stats {st:?}",
        proxy.fds()
    );

    // Still alive, still relaying.
    assert!(proxy_alive(&proxy), "the proxy died");
    for t in &mut tunnels {
        assert_echo(t, b"while out of fds");
    }

    // Not spinning: a few pause-timer wakeups (250 ms) per second, little CPU.
    let (s1, cpu1) = (proxy.stats(), proc_cpu_ticks(proxy.pid()));
    thread::sleep(Duration::from_secs(1));
    let (s2, cpu2) = (proxy.stats(), proc_cpu_ticks(proxy.pid()));
    let wakeups = stat(&s2, "wakeups") - stat(&s1, "wakeups");
    let cpu_ticks = cpu2 - cpu1; // USER_HZ = 100 ticks per second on Linux
    eprintln!("while exhausted: {wakeups} wakeups and {cpu_ticks} CPU ticks in 1 s");
    assert!(
        wakeups < 20,
        "{wakeups} wakeups in 1 s while out of fds: {s1:?} then {s2:?}"
    );
    assert!(
        cpu_ticks < 20,
        "{cpu_ticks} ticks of CPU in 1 s while out of fds"
    );
    let pausing: Vec<_> = proxy
        .log()
        .into_iter()
        .filter(|l| l.contains("accept failed") && l.contains("pausing accepts"))
        .collect();
    assert_eq!(
        pausing.len(),
        1,
        "one `accept failed (...); pausing accepts` line per episode: {pausing:?}"
    );

    // The limit allows again: the proxy accepts the queued connections and
    // serves new clients.
    set_soft_nofile(proxy.pid(), NOFILE);
    let mut fresh = None;
    wait_for(
        "a new tunnel after the fds freed up",
        PROMPTLY,
        || match http_connect(proxy.addr, &echo.target(), &[]) {
            Ok((s, head)) if head.status == 200 => {
                fresh = Some(s);
                true
            }
            _ => false,
        },
    );
    let mut fresh = fresh.unwrap();
    fresh.set_read_timeout(Some(PROMPTLY)).unwrap();
    assert_echo(&mut fresh, b"accepting again");
    for t in &mut tunnels {
        assert_echo(t, b"after");
    }

    drop(fresh);
    drop(tunnels);
    drop(held);
    wait_for("fds back to baseline", PROMPTLY, || {
        proxy.fds() == base_fds && stat(&proxy.stats(), "open") == 0
    });
    let s1 = proxy.stats();
    // The accept-pause timer is gone with the episode: no timeout left.
    let parked = wait_child_parked_for_good(proxy.pid(), proxy.addr);
    let s2 = proxy.stats();
    parked.assert_still_asleep();
    assert_eq!(
        stat(&s1, "wakeups"),
        stat(&s2, "wakeups"),
        "idle after recovery, yet woke up: {s1:?} then {s2:?}"
    );
}

/// Sets a running process's soft RLIMIT_NOFILE (hard stays `NOFILE`) with
/// util-linux `prlimit`.
fn set_soft_nofile(pid: u32, soft: u64) {
    let arg = format!("--nofile={soft}:{NOFILE}");
    let st = Command::new("prlimit")
        .args(["--pid", &pid.to_string(), &arg])
        .status()
        .unwrap_or_else(|e| panic!("cannot run prlimit ({e}); this test needs it (util-linux)"));
    assert!(st.success(), "prlimit --pid {pid} {arg}");
}

fn proxy_alive(p: &ChildProxy) -> bool {
    std::path::Path::new(&format!("/proc/{}/stat", p.pid())).exists()
        && !std::fs::read_to_string(format!("/proc/{}/stat", p.pid()))
            .unwrap_or_default()
            .contains(") Z ")
}
