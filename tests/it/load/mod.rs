//! Helpers for the load, fault and limit tests (kill_storm, scale, slowloris,
//! accept_exhaustion, shutdown, limits): process metrics from /proc, source
//! address binding, config files, signals and a mio echo server that holds
//! thousands of connections on one thread.
//!
//! Each test file pulls this in with `mod load;` next to `mod support;`.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crate::support::*;

/// Raises this (test) process's soft RLIMIT_NOFILE to its hard limit; returns the new soft limit.
pub fn raise_own_nofile() -> u64 {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("getrlimit");
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard).expect("raise RLIMIT_NOFILE");
    }
    hard
}

/// Resident set size of a process in KiB (VmRSS from /proc/PID/status).
pub fn rss_kib(pid: u32) -> u64 {
    let status =
        std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read /proc/PID/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS in /proc/PID/status")
}

/// A TCP connection to `dst` from source address `src` (port chosen by the
/// kernel): bind-before-connect, so a test can be a second client (127.0.0.2).
pub fn connect_from(src: IpAddr, dst: SocketAddr) -> io::Result<TcpStream> {
    use socket2::{Domain, Socket, Type};
    let sock = Socket::new(Domain::for_address(dst), Type::STREAM, None)?;
    sock.bind(&SocketAddr::new(src, 0).into())?;
    sock.connect(&dst.into())?;
    Ok(sock.into())
}

/// The uid of `nobody`: another client than the root test process.
pub const NOBODY: u32 = 65_534;

/// Like [`connect_from`], from a socket owned by `uid`. The kernel records
/// the fsuid of the thread that creates a socket as its owner, which is what
/// the proxy reads for a loopback client; `setfsuid` affects the calling
/// thread only, so a fresh thread makes the socket. Needs root (CI is).
pub fn connect_as(uid: u32, src: IpAddr, dst: SocketAddr) -> io::Result<TcpStream> {
    assert!(
        nix::unistd::geteuid().is_root(),
        "a client of another uid needs root (CAP_SETUID) in the test process"
    );
    thread::spawn(move || {
        let uid = nix::unistd::Uid::from_raw(uid);
        nix::unistd::setfsuid(uid);
        // setfsuid returns the previous fsuid: asking again confirms the change.
        assert_eq!(nix::unistd::setfsuid(uid), uid, "setfsuid({uid})");
        connect_from(src, dst)
    })
    .join()
    .expect("connect thread")
}

pub fn ip(s: &str) -> IpAddr {
    s.parse().expect("IP literal")
}

/// Writes `text` to `DIR/name` and returns the path as a string.
pub fn write_file(dir: &TempDir, name: &str, text: &str) -> String {
    let p: PathBuf = dir.path().join(name);
    std::fs::write(&p, text).expect("write config file");
    p.to_string_lossy().into_owned()
}

/// Sends `sig` to `pid`.
pub fn signal(pid: u32, sig: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), sig).expect("send signal");
}

/// A snapshot of the proxy child's resources.
#[derive(Debug, Clone, Copy)]
pub struct Baseline {
    pub fds: usize,
    pub rss_kib: u64,
}

pub fn baseline(p: &ChildProxy) -> Baseline {
    Baseline {
        fds: p.fds(),
        rss_kib: rss_kib(p.pid()),
    }
}

/// After a fault phase: no open sessions and fds at baseline (polled, bounded
/// by `within`), then the reactor parked for good (no timer left) without
/// a wakeup, and RSS within `rss_slack_kib` of the baseline. Returns the
/// last stats.
#[track_caller]
pub fn assert_back_to_baseline(
    p: &ChildProxy,
    base: Baseline,
    within: Duration,
    rss_slack_kib: u64,
    phase: &str,
) -> HashMap<String, u64> {
    let ok = wait_until(within, || {
        stat(&p.stats(), "open") == 0 && p.fds() == base.fds
    });
    let s1 = p.stats();
    assert!(
        ok,
        "{phase}: not back to baseline within {within:?}: fds {} (baseline {}), stats {s1:?}",
        p.fds(),
        base.fds
    );
    let parked = wait_child_parked_for_good(p.pid(), p.addr);
    let s2 = p.stats();
    parked.assert_still_asleep();
    assert_eq!(
        stat(&s1, "wakeups"),
        stat(&s2, "wakeups"),
        "{phase}: the idle proxy woke up: {s1:?} then {s2:?}"
    );
    assert_eq!(stat(&s2, "open"), 0, "{phase}: {s2:?}");
    let rss = rss_kib(p.pid());
    assert!(
        rss <= base.rss_kib + rss_slack_kib,
        "{phase}: RSS {rss} KiB, baseline {} KiB (+{rss_slack_kib} KiB allowed)",
        base.rss_kib
    );
    eprintln!(
        "{phase}: back to baseline: fds {}, RSS {rss} KiB (baseline {} KiB), wakeups {}",
        p.fds(),
        base.rss_kib,
        stat(&s2, "wakeups")
    );
    s2
}

/// Sends `CONNECT target` and reads the answer head (status line + headers).
pub fn http_connect_raw(s: &mut TcpStream, target: &str) -> io::Result<ResponseHead> {
    http_connect_on(s, target, &[])
}

/// Sends a SOCKS5 greeting (no auth) and reads `n` bytes of answer, or fewer at EOF.
pub fn socks_greeting_answer(s: &mut TcpStream, n: usize) -> io::Result<Vec<u8>> {
    s.write_all(&[5, 1, 0])?;
    let mut out = vec![0u8; n];
    let mut got = 0;
    while got < n {
        match s.read(&mut out[got..])? {
            0 => break,
            k => got += k,
        }
    }
    out.truncate(got);
    Ok(out)
}

// ---------------------------------------------------------------------------
// A mio echo server: one thread, thousands of connections
// ---------------------------------------------------------------------------

/// Echoes every connection on one thread with mio; counts accepts and open connections.
pub struct MioEcho {
    pub addr: SocketAddr,
    pub accepted: Arc<AtomicUsize>,
    pub open: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    waker: Arc<mio::Waker>,
    thread: Option<JoinHandle<()>>,
}

impl MioEcho {
    pub fn start() -> MioEcho {
        use mio::net::TcpListener;
        use mio::{Events, Interest, Poll, Token};
        const LISTENER: Token = Token(usize::MAX - 1);
        const WAKE: Token = Token(usize::MAX - 2);

        let mut poll = Poll::new().expect("mio poll");
        let mut listener =
            TcpListener::bind("127.0.0.1:0".parse().unwrap()).expect("bind mio echo");
        let addr = listener.local_addr().unwrap();
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)
            .unwrap();
        let waker = Arc::new(mio::Waker::new(poll.registry(), WAKE).unwrap());
        let accepted = Arc::new(AtomicUsize::new(0));
        let open = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (acc, op, st) = (accepted.clone(), open.clone(), stop.clone());
        let thread = thread::spawn(move || {
            // Per connection: the stream and bytes owed back.
            let mut conns: slab::Slab<(mio::net::TcpStream, Vec<u8>)> = slab::Slab::new();
            let mut events = Events::with_capacity(1024);
            let mut buf = vec![0u8; 64 * 1024];
            while !st.load(Ordering::SeqCst) {
                if let Err(e) = poll.poll(&mut events, None) {
                    if e.kind() == io::ErrorKind::Interrupted {
                        continue;
                    }
                    panic!("mio echo poll: {e}");
                }
                for ev in events.iter() {
                    match ev.token() {
                        WAKE => {}
                        LISTENER => loop {
                            match listener.accept() {
                                Ok((mut s, _)) => {
                                    let e = conns.vacant_entry();
                                    poll.registry()
                                        .register(
                                            &mut s,
                                            Token(e.key()),
                                            Interest::READABLE | Interest::WRITABLE,
                                        )
                                        .unwrap();
                                    e.insert((s, Vec::new()));
                                    acc.fetch_add(1, Ordering::SeqCst);
                                    op.fetch_add(1, Ordering::SeqCst);
                                }
                                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                                Err(e) => panic!("mio echo accept: {e}"),
                            }
                        },
                        Token(k) => {
                            let Some((s, owed)) = conns.get_mut(k) else {
                                continue;
                            };
                            let mut done = false;
                            // Flush what is owed first, then read while we can.
                            loop {
                                while !owed.is_empty() {
                                    match s.write(owed) {
                                        Ok(n) => {
                                            owed.drain(..n);
                                        }
                                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                                        Err(_) => {
                                            done = true;
                                            break;
                                        }
                                    }
                                }
                                if done || !owed.is_empty() {
                                    break;
                                }
                                match s.read(&mut buf) {
                                    Ok(0) => {
                                        done = true;
                                        break;
                                    }
                                    Ok(n) => owed.extend_from_slice(&buf[..n]),
                                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                                    Err(_) => {
                                        done = true;
                                        break;
                                    }
                                }
                            }
                            if done {
                                let (mut s, _) = conns.remove(k);
                                let _ = poll.registry().deregister(&mut s);
                                op.fetch_sub(1, Ordering::SeqCst);
                            }
                        }
                    }
                }
            }
        });
        MioEcho {
            addr,
            accepted,
            open,
            stop,
            waker,
            thread: Some(thread),
        }
    }

    pub fn target(&self) -> String {
        format!("127.0.0.1:{}", self.addr.port())
    }
}

impl Drop for MioEcho {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.waker.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A python3 that `nobody` can run (a pyenv shim under /root is not).
fn python_for_others() -> String {
    let own = std::process::Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    let candidates = ["/usr/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .map(String::from)
        .chain(own);
    for py in candidates {
        let ok = std::process::Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                &py,
                "-c",
                "pass",
            ])
            .current_dir("/")
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return py;
        }
    }
    panic!(
        "no python3 that uid 65534 can run (tried /usr/bin, /usr/local/bin, PATH); CI installs one"
    );
}

/// Runs `python3 -u -c script args...` as `uid` (and gid) through `setpriv`,
/// stdin and stdout piped. Needs root, setpriv and python3 (CI has them).
pub fn spawn_python_as(uid: u32, script: &str, args: &[String]) -> ChildGuard {
    let id = uid.to_string();
    let child = std::process::Command::new("setpriv")
        .args([
            format!("--reuid={id}"),
            format!("--regid={id}"),
            "--clear-groups".into(),
            python_for_others(),
            "-u".into(),
            "-c".into(),
            script.into(),
        ])
        .args(args)
        .current_dir("/")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run setpriv ({e}); this test needs it (util-linux)"));
    ChildGuard(child)
}

/// The next line of a child's stdout, waiting at most `within`; the rest of
/// its output is kept for later calls.
pub struct Lines(std::sync::mpsc::Receiver<String>);

impl Lines {
    pub fn of(child: &mut std::process::Child) -> Lines {
        use std::io::BufRead;
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Lines(rx)
    }

    #[track_caller]
    pub fn next(&self, what: &str, within: Duration) -> String {
        self.0
            .recv_timeout(within)
            .unwrap_or_else(|e| panic!("{what}: no line from the child within {within:?} ({e})"))
    }
}
