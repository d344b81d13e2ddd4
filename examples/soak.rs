//! Soak load generator for a running portcullis (see `scripts/soak.sh`).
//!
//! ```sh
//! cargo run --release --example soak -- --proxy 127.0.0.1:3128 --minutes 10 \
//!     [--pid PROXY_PID --log PROXY_STDERR_FILE] [--seconds S]
//! ```
//!
//! Runs, for a bounded time, a mixed load through the proxy to loopback
//! upstreams it starts itself (the proxy must allow 127.0.0.1 on ports
//! 1024-65535 and deny port 9):
//!
//! - long WebSocket sessions (tungstenite) echoing binary messages;
//! - short tunnels (HTTP CONNECT and SOCKS5 alternately) carrying a payload
//!   up and another down;
//! - denied requests (403 / SOCKS5 0x02 expected);
//! - clients killed mid-stream (the socket is reset with SO_LINGER 0).
//!
//! Every payload is SHA-256 hashed and checked at the other end. With
//! `--pid`/`--log` it samples the proxy's fd count and RSS (high-water marks)
//! and reads its SIGUSR1 stats. The last line is `lost: N`, N counting
//! payloads that did not arrive intact (or at all); the exit status is 1 when
//! N > 0.

use std::io::{self, BufRead, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

/// A deterministic byte stream (xorshift64*).
struct Gen(u64);

impl Gen {
    fn new(seed: u64) -> Gen {
        Gen(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
    fn fill(&mut self, buf: &mut [u8]) {
        for c in buf.chunks_mut(8) {
            let v = self.next().to_le_bytes();
            c.copy_from_slice(&v[..c.len()]);
        }
    }
}

fn payload(seed: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    Gen::new(seed).fill(&mut v);
    v
}

fn sha(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

/// Counters shared by every worker.
#[derive(Default)]
struct Tally {
    /// Payloads that arrived and matched their hash.
    ok: AtomicU64,
    /// Payloads that did not match or never arrived.
    lost: AtomicU64,
    bytes: AtomicU64,
    short_sessions: AtomicU64,
    ws_sessions: AtomicU64,
    ws_messages: AtomicU64,
    denied_ok: AtomicU64,
    denied_wrong: AtomicU64,
    killed: AtomicU64,
    /// Errors outside a payload (connect failures, ...), by kind.
    errors: std::sync::Mutex<std::collections::BTreeMap<String, u64>>,
}

impl Tally {
    fn error(&self, what: &str) {
        *self.errors.lock().unwrap().entry(what.into()).or_default() += 1;
    }
}

struct Args {
    proxy: SocketAddr,
    duration: Duration,
    pid: Option<u32>,
    log: Option<String>,
}

fn parse_args() -> Args {
    let mut a = std::env::args().skip(1);
    let (mut proxy, mut duration, mut pid, mut log) = (None, Duration::from_secs(600), None, None);
    while let Some(k) = a.next() {
        let mut v = || {
            a.next()
                .unwrap_or_else(|| usage(&format!("{k} needs a value")))
        };
        match k.as_str() {
            "--proxy" => proxy = Some(v().parse().unwrap_or_else(|_| usage("bad --proxy"))),
            "--minutes" => {
                let m: u64 = v().parse().unwrap_or_else(|_| usage("bad --minutes"));
                duration = Duration::from_secs(60 * m);
            }
            "--seconds" => {
                let s: u64 = v().parse().unwrap_or_else(|_| usage("bad --seconds"));
                duration = Duration::from_secs(s);
            }
            "--pid" => pid = Some(v().parse().unwrap_or_else(|_| usage("bad --pid"))),
            "--log" => log = Some(v()),
            _ => usage(&format!("unknown argument {k}")),
        }
    }
    Args {
        proxy: proxy.unwrap_or_else(|| usage("--proxy is required")),
        duration,
        pid,
        log,
    }
}

fn usage(msg: &str) -> ! {
    eprintln!(
        "soak: {msg}\nusage: soak --proxy ADDR [--minutes N | --seconds S] [--pid PID --log FILE]"
    );
    std::process::exit(2)
}

// ---------------------------------------------------------------------------
// Upstreams
// ---------------------------------------------------------------------------

fn serve(handler: impl Fn(TcpStream) + Send + Sync + Clone + 'static) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind upstream");
    let addr = l.local_addr().unwrap();
    thread::spawn(move || {
        for s in l.incoming().flatten() {
            let h = handler.clone();
            thread::spawn(move || h(s));
        }
    });
    addr
}

/// Transfer server: reads `[seed u64][len u64]` and `len` bytes, checks them
/// against the seed, answers its SHA-256 of what it received, then sends
/// `len` bytes of stream `seed ^ 1`.
fn transfer_server(t: Arc<Tally>) -> SocketAddr {
    serve(move |mut s| {
        let _ = s.set_read_timeout(Some(Duration::from_secs(60)));
        let mut hdr = [0u8; 16];
        if s.read_exact(&mut hdr).is_err() {
            return;
        }
        let seed = u64::from_le_bytes(hdr[..8].try_into().unwrap());
        let len = u64::from_le_bytes(hdr[8..].try_into().unwrap()) as usize;
        let mut got = vec![0u8; len];
        if s.read_exact(&mut got).is_err() {
            return; // a killed client: not a payload that was owed
        }
        let h = sha(&got);
        if h != sha(&payload(seed, len)) {
            t.lost.fetch_add(1, SeqCst);
        } else {
            t.ok.fetch_add(1, SeqCst);
        }
        let _ = s.write_all(&h);
        let _ = s.write_all(&payload(seed ^ 1, len));
        let _ = s.shutdown(Shutdown::Write);
        let mut sink = [0u8; 1024];
        while matches!(s.read(&mut sink), Ok(n) if n > 0) {}
    })
}

/// WebSocket server: checks each binary message (8-byte seed + payload of
/// that seed) and echoes it back.
fn ws_server(t: Arc<Tally>) -> SocketAddr {
    serve(move |s| {
        let _ = s.set_read_timeout(Some(Duration::from_secs(60)));
        let Ok(mut ws) = tungstenite::accept(s) else {
            return;
        };
        loop {
            match ws.read() {
                Ok(tungstenite::Message::Binary(b)) => {
                    if b.len() >= 8 {
                        let seed = u64::from_le_bytes(b[..8].try_into().unwrap());
                        if b[8..] != payload(seed, b.len() - 8)[..] {
                            t.lost.fetch_add(1, SeqCst);
                        }
                    }
                    if ws.send(tungstenite::Message::Binary(b)).is_err() {
                        return;
                    }
                }
                Ok(tungstenite::Message::Close(_)) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
}

// ---------------------------------------------------------------------------
// Clients
// ---------------------------------------------------------------------------

fn tunnel(proxy: SocketAddr, target: SocketAddr, socks: bool) -> io::Result<TcpStream> {
    let mut s = TcpStream::connect(proxy)?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    s.set_write_timeout(Some(Duration::from_secs(60)))?;
    if socks {
        let (code, _) = socks5(&mut s, target)?;
        if code != 0 {
            return Err(io::Error::other(format!("SOCKS5 reply {code:#04x}")));
        }
    } else {
        let status = http_connect(&mut s, &target.to_string())?;
        if status != 200 {
            return Err(io::Error::other(format!("CONNECT answered {status}")));
        }
    }
    Ok(s)
}

fn http_connect(s: &mut TcpStream, target: &str) -> io::Result<u16> {
    s.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())?;
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut b)? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        head.push(b[0]);
    }
    let text = String::from_utf8_lossy(&head);
    text.split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| io::Error::other(format!("bad answer {text:?}")))
}

fn socks5(s: &mut TcpStream, target: SocketAddr) -> io::Result<(u8, ())> {
    s.write_all(&[5, 1, 0])?;
    let mut sel = [0u8; 2];
    s.read_exact(&mut sel)?;
    if sel != [5, 0] {
        return Err(io::Error::other(format!("method selection {sel:?}")));
    }
    let SocketAddr::V4(a) = target else {
        return Err(io::Error::other("IPv4 only"));
    };
    let mut req = vec![5, 1, 0, 1];
    req.extend_from_slice(&a.ip().octets());
    req.extend_from_slice(&a.port().to_be_bytes());
    s.write_all(&req)?;
    let mut rep = [0u8; 10];
    s.read_exact(&mut rep)?;
    Ok((rep[1], ()))
}

/// One short tunnel: a payload up, another down; both checked.
fn short_session(proxy: SocketAddr, up: SocketAddr, rng: &mut Gen, t: &Tally) {
    let seed = rng.next();
    let len = rng.range(1, 1 << 20) as usize;
    let socks = rng.next() % 2 == 0;
    let mut s = match tunnel(proxy, up, socks) {
        Ok(s) => s,
        Err(e) => {
            t.error(&format!("short tunnel setup: {}", e.kind()));
            t.lost.fetch_add(2, SeqCst);
            return;
        }
    };
    let data = payload(seed, len);
    let mut hdr = seed.to_le_bytes().to_vec();
    hdr.extend_from_slice(&(len as u64).to_le_bytes());
    let sent = s.write_all(&hdr).and_then(|_| s.write_all(&data));
    let mut their_hash = [0u8; 32];
    let mut back = vec![0u8; len];
    let got = sent
        .and_then(|_| s.read_exact(&mut their_hash))
        .and_then(|_| s.read_exact(&mut back));
    match got {
        Err(e) => {
            t.error(&format!("short transfer: {}", e.kind()));
            t.lost.fetch_add(2, SeqCst);
        }
        Ok(()) => {
            // Up: the server's hash of what it got (it also counted it); down: ours.
            if their_hash != sha(&data) {
                t.error("short transfer: upstream hash differs");
            }
            if sha(&back) == sha(&payload(seed ^ 1, len)) {
                t.ok.fetch_add(1, SeqCst);
            } else {
                t.lost.fetch_add(1, SeqCst);
            }
            t.bytes.fetch_add(2 * len as u64, SeqCst);
        }
    }
    let _ = s.shutdown(Shutdown::Write);
    let mut sink = [0u8; 64];
    let _ = s.read(&mut sink);
    t.short_sessions.fetch_add(1, SeqCst);
}

/// One long WebSocket session: messages echoed and checked, until `until`.
fn ws_session(proxy: SocketAddr, ws: SocketAddr, until: Instant, rng: &mut Gen, t: &Tally) {
    let s = match tunnel(proxy, ws, rng.next() % 2 == 0) {
        Ok(s) => s,
        Err(e) => {
            t.error(&format!("ws tunnel setup: {}", e.kind()));
            return;
        }
    };
    let url = format!("ws://{ws}/soak");
    let mut sock = match tungstenite::client(url.as_str(), s) {
        Ok((w, _)) => w,
        Err(e) => {
            t.error(&format!("ws handshake: {e}"));
            return;
        }
    };
    t.ws_sessions.fetch_add(1, SeqCst);
    for _ in 0..100_000 {
        if Instant::now() >= until {
            break;
        }
        let seed = rng.next();
        let len = rng.range(1, 64 * 1024) as usize;
        let mut msg = seed.to_le_bytes().to_vec();
        msg.extend_from_slice(&payload(seed, len));
        let want = sha(&msg);
        let r = sock
            .send(tungstenite::Message::binary(msg))
            .and_then(|_| sock.read());
        match r {
            Ok(tungstenite::Message::Binary(b)) if sha(&b) == want => {
                t.ok.fetch_add(1, SeqCst);
                t.ws_messages.fetch_add(1, SeqCst);
                t.bytes.fetch_add(2 * b.len() as u64, SeqCst);
            }
            Ok(_) => {
                t.lost.fetch_add(1, SeqCst);
            }
            Err(e) => {
                t.error(&format!("ws message: {e}"));
                t.lost.fetch_add(1, SeqCst);
                return;
            }
        }
        thread::sleep(Duration::from_millis(rng.range(10, 200)));
    }
    let _ = sock.close(None);
    for _ in 0..16 {
        if sock.read().is_err() {
            break;
        }
    }
}

/// A request the policy must refuse: 403, or SOCKS5 reply 0x02.
fn denied(proxy: SocketAddr, socks: bool, t: &Tally) {
    let target: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let r = TcpStream::connect(proxy).and_then(|mut s| {
        s.set_read_timeout(Some(Duration::from_secs(30)))?;
        if socks {
            socks5(&mut s, target).map(|(c, _)| c == 0x02)
        } else {
            http_connect(&mut s, "127.0.0.1:9").map(|c| c == 403)
        }
    });
    match r {
        Ok(true) => t.denied_ok.fetch_add(1, SeqCst),
        _ => t.denied_wrong.fetch_add(1, SeqCst),
    };
}

/// A client that dies mid-stream: sends part of a large payload, then resets.
fn killed(proxy: SocketAddr, up: SocketAddr, rng: &mut Gen, t: &Tally) {
    let Ok(mut s) = tunnel(proxy, up, rng.next() % 2 == 0) else {
        t.error("kill tunnel setup");
        return;
    };
    let len = 8u64 << 20;
    let mut hdr = rng.next().to_le_bytes().to_vec();
    hdr.extend_from_slice(&len.to_le_bytes());
    let part = payload(rng.next(), rng.range(1, 2 << 20) as usize);
    let _ = s.write_all(&hdr).and_then(|_| s.write_all(&part));
    let sock = socket2::SockRef::from(&s);
    let _ = sock.set_linger(Some(Duration::ZERO));
    drop(s);
    t.killed.fetch_add(1, SeqCst);
}

// ---------------------------------------------------------------------------
// The proxy's side
// ---------------------------------------------------------------------------

fn proc_fds(pid: u32) -> Option<u64> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64)
}

fn proc_rss_kib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// SIGUSR1, then the new `stats:` line from the proxy's log file.
fn proxy_stats(pid: u32, log: &str) -> Option<String> {
    let count = |log: &str| -> usize {
        std::fs::File::open(log)
            .map(|f| {
                io::BufReader::new(f)
                    .lines()
                    .map_while(Result::ok)
                    .filter(|l| l.contains("stats: "))
                    .count()
            })
            .unwrap_or(0)
    };
    let before = count(log);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGUSR1,
    )
    .ok()?;
    for _ in 0..100 {
        thread::sleep(Duration::from_millis(50));
        if count(log) > before {
            let f = std::fs::File::open(log).ok()?;
            return io::BufReader::new(f)
                .lines()
                .map_while(Result::ok)
                .filter(|l| l.contains("stats: "))
                .last()
                .map(|l| l[l.find("stats: ").unwrap() + 7..].to_string());
        }
    }
    None
}

fn main() {
    let args = parse_args();
    let t = Arc::new(Tally::default());
    let up = transfer_server(t.clone());
    let ws = ws_server(t.clone());
    let start = Instant::now();
    let deadline = start + args.duration;
    eprintln!(
        "soak: {:?} through {} (transfer upstream {up}, websocket upstream {ws})",
        args.duration, args.proxy
    );

    // Sample the proxy's fds and RSS.
    let stop = Arc::new(AtomicBool::new(false));
    let (fd_hwm, rss_hwm) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let sampler = args.pid.map(|pid| {
        let (stop, f, r) = (stop.clone(), fd_hwm.clone(), rss_hwm.clone());
        thread::spawn(move || {
            while !stop.load(SeqCst) {
                if let Some(n) = proc_fds(pid) {
                    f.fetch_max(n, SeqCst);
                }
                if let Some(n) = proc_rss_kib(pid) {
                    r.fetch_max(n, SeqCst);
                }
                thread::sleep(Duration::from_millis(250));
            }
        })
    });

    let mut workers = Vec::new();
    let proxy = args.proxy;
    for w in 0..8u64 {
        let t = t.clone();
        workers.push(thread::spawn(move || {
            let mut rng = Gen::new(0x5eed_0000 + w);
            for _ in 0..10_000 {
                if Instant::now() >= deadline {
                    break;
                }
                let until = (Instant::now() + Duration::from_secs(rng.range(5, 60))).min(deadline);
                ws_session(proxy, ws, until, &mut rng, &t);
            }
        }));
    }
    for w in 0..12u64 {
        let t = t.clone();
        workers.push(thread::spawn(move || {
            let mut rng = Gen::new(0x5107_0000 + w);
            for _ in 0..10_000_000 {
                if Instant::now() >= deadline {
                    break;
                }
                short_session(proxy, up, &mut rng, &t);
            }
        }));
    }
    for w in 0..2u64 {
        let t = t.clone();
        workers.push(thread::spawn(move || {
            let mut rng = Gen::new(0xdead_0000 + w);
            for i in 0..10_000_000u64 {
                if Instant::now() >= deadline {
                    break;
                }
                if w == 0 {
                    denied(proxy, i % 2 == 0, &t);
                    thread::sleep(Duration::from_millis(20));
                } else {
                    killed(proxy, up, &mut rng, &t);
                    thread::sleep(Duration::from_millis(50));
                }
            }
        }));
    }
    for h in workers {
        if h.join().is_err() {
            t.error("worker panicked");
            t.lost.fetch_add(1, SeqCst);
        }
    }
    stop.store(true, SeqCst);
    if let Some(s) = sampler {
        let _ = s.join();
    }

    println!("soak: ran {:?}", start.elapsed());
    println!(
        "client side: {} short sessions, {} websocket sessions ({} messages), {} denied as expected, \
         {} denied wrongly, {} clients killed mid-stream, {} MiB relayed and verified, {} payloads intact",
        t.short_sessions.load(SeqCst),
        t.ws_sessions.load(SeqCst),
        t.ws_messages.load(SeqCst),
        t.denied_ok.load(SeqCst),
        t.denied_wrong.load(SeqCst),
        t.killed.load(SeqCst),
        t.bytes.load(SeqCst) >> 20,
        t.ok.load(SeqCst)
    );
    for (what, n) in t.errors.lock().unwrap().iter() {
        println!("client error: {what}: {n}");
    }
    if let (Some(pid), Some(log)) = (args.pid, args.log.as_deref()) {
        // Let the last sessions close before reading the counters.
        thread::sleep(Duration::from_secs(3));
        match proxy_stats(pid, log) {
            Some(s) => {
                println!("proxy stats: {s}");
                if let Some(closed) = s.split("closed:").nth(1) {
                    println!("proxy sessions closed by reason:{closed}");
                }
            }
            None => println!("proxy stats: unavailable"),
        }
        println!(
            "proxy high-water marks: {} fds, {} KiB RSS",
            fd_hwm.load(SeqCst),
            rss_hwm.load(SeqCst)
        );
    }
    let lost = t.lost.load(SeqCst);
    if t.denied_wrong.load(SeqCst) > 0 {
        // Not a payload, so not in `lost`; still a failure.
        eprintln!("soak: some denied requests were not refused as expected");
    }
    println!("lost: {lost}");
    let _ = io::stdout().flush();
    if lost > 0 || t.denied_wrong.load(SeqCst) > 0 {
        std::process::exit(1);
    }
}
