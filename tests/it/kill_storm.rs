//! Kill storms against the binary (a child process, so its fds and RSS are its own):
//!
//! (a) 200 python3 clients, half HTTP CONNECT and half SOCKS5, each streaming
//!     both ways through the proxy, SIGKILLed at deterministic random moments
//!     (some before or during their handshake, most mid-stream);
//! (b) 200 python3 upstreams streaming to their client, SIGKILLed mid-stream;
//! (c) clients that stop reading while the upstream keeps sending: the
//!     proxy's buffers fill, reading stops, RSS stops growing and the reactor
//!     goes quiet; then the clients are SIGKILLed.
//!
//! After each phase: no open sessions and fds back to baseline within the
//! close timeout (plus slack), the reactor parked for good (asleep in
//! `epoll_wait` with no timeout) without a wakeup, RSS within 32 MiB of the
//! baseline. The machine has 2 cores: processes run in waves.

use crate::load;
use crate::support;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::process::Child;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use load::*;
use support::*;

/// argv: mode (http | socks | http-stall | socks-stall), proxy port, target host, target port.
/// Handshakes, prints "ready", then streams both ways forever (or, for
/// *-stall, never reads nor writes again).
const PY_CLIENT: &str = r#"
import socket, sys, threading, time
mode, port, host, tport = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
s = socket.create_connection(("127.0.0.1", port))
def exact(n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            sys.exit(2)
        b += c
    return b
if mode.startswith("http"):
    t = "%s:%d" % (host, tport)
    s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (t, t)).encode())
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        head += exact(1)
    if head.split(b" ")[1] != b"200":
        sys.exit(3)
else:
    s.sendall(b"\x05\x01\x00")
    if exact(2) != b"\x05\x00":
        sys.exit(3)
    s.sendall(b"\x05\x01\x00\x01" + socket.inet_aton(host) + tport.to_bytes(2, "big"))
    if exact(10)[1] != 0:
        sys.exit(3)
print("ready", flush=True)
if mode.endswith("stall"):
    time.sleep(3600)
    sys.exit(0)
def drain():
    while s.recv(65536):
        pass
threading.Thread(target=drain, daemon=True).start()
buf = b"c" * 16384
while True:
    s.sendall(buf)
    time.sleep(0.001)
"#;

/// Listens on 127.0.0.1:0, prints the port, accepts one connection and
/// streams both ways with it forever.
const PY_UPSTREAM: &str = r#"
import socket, threading, time
l = socket.socket()
l.bind(("127.0.0.1", 0))
l.listen(8)
print(l.getsockname()[1], flush=True)
c, _ = l.accept()
# Stream only once the client does: see upstreams_killed.
c.recv(1)
def drain():
    while c.recv(65536):
        pass
threading.Thread(target=drain, daemon=True).start()
buf = b"u" * 16384
while True:
    c.sendall(buf)
    time.sleep(0.001)
"#;

const PROCESSES: usize = 200;
const WAVE: usize = 50;
const RSS_SLACK_KIB: u64 = 32 * 1024;
/// Close timeout 1 s; everything else that is bounded fits in the slack.
const SETTLE: Duration = Duration::from_secs(6);

/// An in-process upstream that streams to every connection and counts both ways.
struct Streamer {
    server: Server,
    written: Arc<AtomicU64>,
    read: Arc<AtomicU64>,
    finished: Arc<AtomicUsize>,
}

fn streamer() -> Streamer {
    let written = Arc::new(AtomicU64::new(0));
    let read = Arc::new(AtomicU64::new(0));
    let finished = Arc::new(AtomicUsize::new(0));
    let (w, r, f) = (written.clone(), read.clone(), finished.clone());
    let server = Server::start(move |mut s| {
        let mut rd = s.try_clone().unwrap();
        let r = r.clone();
        let reader = thread::spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            while let Ok(n) = rd.read(&mut buf) {
                if n == 0 {
                    break;
                }
                r.fetch_add(n as u64, Ordering::SeqCst);
            }
        });
        let buf = vec![b'u'; 16 * 1024];
        while s.write_all(&buf).is_ok() {
            w.fetch_add(buf.len() as u64, Ordering::SeqCst);
            thread::sleep(Duration::from_millis(1));
        }
        let _ = s.shutdown(Shutdown::Both);
        let _ = reader.join();
        f.fetch_add(1, Ordering::SeqCst);
    });
    Streamer {
        server,
        written,
        read,
        finished,
    }
}

fn client_mode(i: usize, stall: bool) -> String {
    let proto = if i % 2 == 0 { "http" } else { "socks" };
    if stall {
        format!("{proto}-stall")
    } else {
        proto.to_string()
    }
}

/// Every python3 child still alive, so that a failing assertion leaves none behind.
static LIVE: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());

/// The real python3 interpreter: `python3` may be a shim script (pyenv) that
/// costs more to start than the interpreter itself, times 400 processes.
fn interpreter() -> &'static str {
    static PATH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let out = std::process::Command::new("python3")
            .args(["-c", "import sys; print(sys.executable)"])
            .output()
            .unwrap_or_else(|e| panic!("cannot run python3 ({e}); this test needs it"));
        let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(!path.is_empty(), "python3 did not report its executable");
        path
    })
}

/// Starts `python3 -S -u -c script args...` (no site import: faster start-up).
fn python(script: &str, args: &[String]) -> Child {
    let c = std::process::Command::new(interpreter())
        .args(["-S", "-u", "-c", script])
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .expect("spawn python3");
    LIVE.lock().unwrap().push(c.id());
    c
}

/// SIGKILLs and reaps a child.
fn kill(mut c: Child) {
    c.kill().expect("SIGKILL");
    c.wait().expect("reap");
    LIVE.lock().unwrap().retain(|&p| p != c.id());
}

/// On drop (also when a test panics) SIGKILLs every child still alive.
struct Reaper;

impl Drop for Reaper {
    fn drop(&mut self) {
        for pid in LIVE.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

fn py_client(mode: &str, proxy: &ChildProxy, up: &Server) -> Child {
    python(
        PY_CLIENT,
        &[
            mode.to_string(),
            proxy.addr.port().to_string(),
            "127.0.0.1".into(),
            up.port().to_string(),
        ],
    )
}

/// When a child printed its "ready" line (its tunnel is up), if it has.
fn watch_ready(c: &mut Child) -> Arc<std::sync::Mutex<Option<Instant>>> {
    use std::io::{BufRead, BufReader};
    let ready = Arc::new(std::sync::Mutex::new(None));
    let r = ready.clone();
    let stdout = c.stdout.take().expect("piped stdout");
    thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        if let Some(Ok(l)) = lines.next() {
            if l.trim() == "ready" {
                *r.lock().unwrap() = Some(Instant::now());
            }
        }
        for _ in lines {}
    });
    ready
}

/// Phase (a): clients killed at random moments: about one in eight at a
/// random time after its start (before, during or after its handshake), the rest
/// a random time after their tunnel is up and streaming.
fn clients_killed(proxy: &ChildProxy, base: Baseline, rng: &mut DataGen) {
    let up = streamer();
    let t0 = Instant::now();
    let mut streamed_before_kill = 0;
    for wave in 0..PROCESSES / WAVE {
        let start = Instant::now();
        let mut pending: Vec<_> = (0..WAVE)
            .map(|i| {
                let early = rng.range(0, 7) == 0;
                let delay = Duration::from_millis(if early {
                    rng.range(100, 1500)
                } else {
                    rng.range(0, 1000)
                } as u64);
                let mut c = py_client(&client_mode(i, false), proxy, &up.server);
                let ready = watch_ready(&mut c);
                (c, ready, early, delay)
            })
            .collect();
        // Every loop is bounded: whatever is left at the deadline is killed then.
        let deadline = start + 2 * PROMPTLY;
        while !pending.is_empty() {
            let now = Instant::now();
            let mut i = 0;
            while i < pending.len() {
                let (_, ready, early, delay) = &pending[i];
                let ready_at = *ready.lock().unwrap();
                let due = match (early, ready_at) {
                    (true, _) => now >= start + *delay,
                    (false, Some(t)) => now >= t + *delay,
                    (false, None) => now >= deadline,
                };
                if due {
                    let (c, _, _, _) = pending.swap_remove(i);
                    streamed_before_kill += usize::from(ready_at.is_some());
                    kill(c);
                } else {
                    i += 1;
                }
            }
            thread::sleep(Duration::from_millis(5));
        }
        eprintln!(
            "(a) wave {wave}: {streamed_before_kill} clients streamed before their kill so far; \
             upstream accepted {}, {} MiB up, {} MiB down",
            up.server.accepted(),
            up.read.load(Ordering::SeqCst) >> 20,
            up.written.load(Ordering::SeqCst) >> 20
        );
    }
    let st = assert_back_to_baseline(proxy, base, SETTLE, RSS_SLACK_KIB, "(a) clients killed");
    let accepted = up.server.accepted();
    wait_for("every upstream connection of (a) to end", PROMPTLY, || {
        up.finished.load(Ordering::SeqCst) == accepted
    });
    eprintln!(
        "(a) done in {:?}: {streamed_before_kill} of {PROCESSES} clients streamed before their kill, \
         {accepted} reached the upstream; {st:?}",
        t0.elapsed()
    );
    assert!(
        streamed_before_kill >= PROCESSES / 2,
        "only {streamed_before_kill} of {PROCESSES} clients were streaming when killed"
    );
    assert!(
        up.read.load(Ordering::SeqCst) > 0 && up.written.load(Ordering::SeqCst) > 0,
        "nothing streamed"
    );
    assert!(stat(&st, "closed.client-gone") > 0, "{st:?}");
}

/// SIGKILLs `children` at their deadlines (offsets from `start`), in order.
fn kill_on_schedule(start: Instant, mut children: Vec<(Duration, Child)>) {
    children.sort_by_key(|(d, _)| *d);
    for (at, c) in children {
        let now = start.elapsed();
        if at > now {
            thread::sleep(at - now);
        }
        kill(c);
    }
}

/// A test-process client streaming both ways through a tunnel until it ends.
fn stream_client(mut s: TcpStream, received: Arc<AtomicU64>) -> JoinHandle<()> {
    thread::spawn(move || {
        s.set_read_timeout(Some(PROMPTLY)).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let mut w = s.try_clone().unwrap();
        let st = stop.clone();
        let writer = thread::spawn(move || {
            let buf = vec![b'c'; 16 * 1024];
            while !st.load(Ordering::SeqCst) && w.write_all(&buf).is_ok() {
                thread::sleep(Duration::from_millis(1));
            }
        });
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n) = s.read(&mut buf) {
            if n == 0 {
                break;
            }
            received.fetch_add(n as u64, Ordering::SeqCst);
        }
        stop.store(true, Ordering::SeqCst);
        let _ = s.shutdown(Shutdown::Both);
        let _ = writer.join();
    })
}

/// Phase (b): upstreams killed mid-stream.
fn upstreams_killed(proxy: &ChildProxy, base: Baseline, rng: &mut DataGen) {
    let t0 = Instant::now();
    let received = Arc::new(AtomicU64::new(0));
    let mut tunnels = 0;
    for wave in 0..PROCESSES / WAVE {
        let mut ups: Vec<(Child, u16)> = (0..WAVE)
            .map(|_| python(PY_UPSTREAM, &[]))
            .map(|mut c| {
                let port = child_line(&mut c, "python upstream")
                    .parse()
                    .expect("upstream port");
                (c, port)
            })
            .collect();
        // Every tunnel of the wave is opened before any of them streams: 50
        // streaming upstreams on two cores would starve the setup of the rest.
        let streams: Vec<TcpStream> = ups
            .iter_mut()
            .enumerate()
            .map(|(i, (_, port))| {
                if i % 2 == 0 {
                    connect_via_http(proxy.addr, &format!("127.0.0.1:{port}"))
                } else {
                    connect_via_socks5(proxy.addr, "127.0.0.1", *port)
                        .unwrap_or_else(|c| panic!("SOCKS5 to upstream {port}: reply {c:#04x}"))
                }
            })
            .collect();
        tunnels += streams.len();
        let clients: Vec<_> = streams
            .into_iter()
            .map(|s| stream_client(s, received.clone()))
            .collect();
        let before = received.load(Ordering::SeqCst);
        wait_for("upstream data reaching the clients", PROMPTLY, || {
            received.load(Ordering::SeqCst) > before
        });
        let start = Instant::now();
        let schedule = ups
            .into_iter()
            .map(|(c, _)| (Duration::from_millis(rng.range(0, 1000) as u64), c))
            .collect();
        kill_on_schedule(start, schedule);
        for c in clients {
            c.join().expect("client thread");
        }
        eprintln!(
            "(b) wave {wave}: {} MiB received by the clients so far",
            received.load(Ordering::SeqCst) >> 20
        );
    }
    let st = assert_back_to_baseline(proxy, base, SETTLE, RSS_SLACK_KIB, "(b) upstreams killed");
    eprintln!("(b) done in {:?}: {tunnels} tunnels; {st:?}", t0.elapsed());
    assert!(stat(&st, "closed.upstream-gone") > 0, "{st:?}");
}

/// Phase (c): clients stop reading while the upstream keeps sending, then vanish.
fn stalled_clients(proxy: &ChildProxy, base: Baseline) {
    const STALLED: usize = 40;
    let t0 = Instant::now();
    let up = streamer();
    let mut children: Vec<Child> = (0..STALLED)
        .map(|i| py_client(&client_mode(i, true), proxy, &up.server))
        .collect();
    for c in &mut children {
        assert_eq!(child_line(c, "stalling python client"), "ready");
    }
    wait_for("every stalled tunnel established", PROMPTLY, || {
        stat(&proxy.stats(), "established") == STALLED as u64
    });
    // Buffers fill and the upstream's writes block: its progress stops. The
    // second measured is one in which the upstream wrote nothing.
    let mut second = None;
    wait_for(
        "a second of the upstream making no progress",
        PROMPTLY,
        || {
            let before = up.written.load(Ordering::SeqCst);
            let (s1, rss1) = (proxy.stats(), rss_kib(proxy.pid()));
            thread::sleep(Duration::from_millis(1100));
            let (s2, rss2) = (proxy.stats(), rss_kib(proxy.pid()));
            second = Some((s1, rss1, s2, rss2));
            up.written.load(Ordering::SeqCst) == before
        },
    );
    let (s1, rss1, s2, rss2) = second.unwrap();
    let written = up.written.load(Ordering::SeqCst);
    eprintln!(
        "(c) stalled: {STALLED} tunnels, upstream wrote {} MiB, RSS {rss1} -> {rss2} KiB (baseline {} KiB), \
         wakeups {} -> {}",
        written >> 20,
        base.rss_kib,
        stat(&s1, "wakeups"),
        stat(&s2, "wakeups")
    );
    assert!(
        rss2 <= rss1 + 1024,
        "RSS grew from {rss1} to {rss2} KiB in a second with every tunnel stalled"
    );
    assert!(
        rss2 <= base.rss_kib + RSS_SLACK_KIB,
        "RSS {rss2} KiB with {STALLED} stalled tunnels, baseline {} KiB",
        base.rss_kib
    );
    let w = stat(&s2, "wakeups") - stat(&s1, "wakeups");
    assert!(
        w <= 5,
        "{w} wakeups in a second with every tunnel stalled: spinning?"
    );
    assert_eq!(stat(&s2, "established"), STALLED as u64, "{s2:?}");

    for c in children {
        kill(c);
    }
    let st = assert_back_to_baseline(
        proxy,
        base,
        SETTLE,
        RSS_SLACK_KIB,
        "(c) stalled clients killed",
    );
    wait_for("every upstream connection of (c) to end", PROMPTLY, || {
        up.finished.load(Ordering::SeqCst) == STALLED
    });
    eprintln!("(c) done in {:?}; {st:?}", t0.elapsed());
}

#[test]
#[ignore = "stress: scripts/stress.sh runs it"]
fn kill_storm() {
    let _reaper = Reaper;
    raise_own_nofile();
    let proxy = ChildProxy::start(&[
        "--allow",
        "127.0.0.1",
        "--handshake-timeout",
        "5s",
        "--close-timeout",
        "1s",
    ]);
    let base = baseline(&proxy);
    let mut rng = DataGen::new(0x6b11_5707);
    clients_killed(&proxy, base, &mut rng);
    upstreams_killed(&proxy, base, &mut rng);
    stalled_clients(&proxy, base);
    let _ = std::io::stderr().flush();
}
