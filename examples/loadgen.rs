//! Load generator for `scripts/bench.sh`: runs its own server on loopback and
//! a client that reaches it directly, through a plain TCP relay, or through
//! an HTTP CONNECT or SOCKS5 proxy. Nothing here talks to a non-loopback
//! address unless told to.
//!
//! ```text
//! loadgen transfer --via connect --proxy 127.0.0.1:3128 --sink 127.0.0.1:19100 --bytes 2GiB
//! loadgen churn    --via socks5  --proxy 127.0.0.1:3128 --sink 127.0.0.1:19100 --count 2000
//! loadgen idle     --via connect --proxy 127.0.0.1:3128 --sink 127.0.0.1:19100 --count 5000 --watch-pid PID
//! ```
//!
//! `transfer` moves `--bytes` through one tunnel (`--dir up`: client to
//! server, `down`, or `both` at once), checks the count and a position-
//! dependent pattern on every byte received, and prints MiB/s. With
//! `--watch-pid`, it also reads the CPU time (utime+stime, all threads and
//! descendant processes, from /proc) of the proxy around the transfer.
//! `idle` opens `--count` tunnels, leaves them idle, and prints the proxy's
//! memory (PSS) growth per tunnel. Every loop is bounded; every result line
//! starts with `RESULT` and is `key=value` pairs.

#[path = "../benches/common/mod.rs"]
mod common;
#[path = "common/proc_tree.rs"]
mod proc_tree;
use proc_tree::{cpu_seconds, process_tree};

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand, ValueEnum};
use common::{open, open_sending, Via};

#[derive(Parser)]
#[command(about = "Loopback load generator for proxy benchmarks")]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Args, Clone)]
struct Common {
    /// How to reach the server.
    #[arg(long, value_enum, default_value = "direct")]
    via: ViaKind,
    /// The proxy or relay address (not for `direct`).
    #[arg(long)]
    proxy: Option<SocketAddr>,
    /// Where this program's own server listens (loopback).
    #[arg(long, default_value = "127.0.0.1:19100")]
    sink: SocketAddr,
    /// A process whose CPU time / memory to report (descendants included).
    #[arg(long)]
    watch_pid: Option<u32>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Bulk transfer through one tunnel.
    Transfer {
        #[command(flatten)]
        c: Common,
        /// Bytes per direction (suffixes KiB, MiB, GiB).
        #[arg(long, default_value = "1GiB", value_parser = parse_size)]
        bytes: u64,
        /// up (client to server), down, or both at once.
        #[arg(long, value_enum, default_value = "up")]
        dir: Dir,
        /// Size of each write and read.
        #[arg(long, default_value = "256KiB", value_parser = parse_size)]
        chunk: u64,
        /// Tunnels at once; `--bytes` is split evenly over them.
        #[arg(long, default_value_t = 1)]
        streams: u32,
    },
    /// Open, echo 32 bytes, close; `--count` times in all, one after
    /// another on each of `--parallel` clients.
    Churn {
        #[command(flatten)]
        c: Common,
        #[arg(long, default_value_t = 2000)]
        count: u32,
        /// Clients churning at once (each runs count/parallel connections).
        #[arg(long, default_value_t = 1)]
        parallel: u32,
    },
    /// Open `--count` tunnels and hold them idle; report memory per tunnel.
    Idle {
        #[command(flatten)]
        c: Common,
        #[arg(long, default_value_t = 5000)]
        count: u32,
        /// Wait this long after the last tunnel opened before measuring.
        #[arg(long, default_value_t = 500)]
        settle_ms: u64,
        /// Keep the tunnels open this long after the RESULT line.
        #[arg(long, default_value_t = 0)]
        hold_secs: u64,
    },
    /// Sample a process tree's CPU time and RSS until a file exists.
    Watch {
        /// The process (and its descendants) to watch.
        #[arg(long)]
        watch_pid: u32,
        /// Stop when this file exists.
        #[arg(long)]
        until_file: std::path::PathBuf,
        /// Stop after this long in any case.
        #[arg(long, default_value_t = 900)]
        max_secs: u64,
    },
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq, Debug)]
enum ViaKind {
    Direct,
    Relay,
    Connect,
    /// CONNECT with the tunnel's first bytes in the request's write
    /// (`churn` only; elsewhere the same as `connect`).
    ConnectEarly,
    Socks5,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq, Debug)]
enum Dir {
    Up,
    Down,
    Both,
}

fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = [
        ("GiB", 1u64 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
        ("G", 1 << 30),
        ("M", 1 << 20),
        ("K", 1 << 10),
    ]
    .iter()
    .find_map(|(suf, m)| s.strip_suffix(suf).map(|n| (n, *m)))
    .unwrap_or((s, 1));
    num.trim()
        .parse::<u64>()
        .map(|n| n * mult)
        .map_err(|e| format!("bad size {s:?}: {e}"))
}

impl Common {
    fn via_name(&self) -> String {
        self.via
            .to_possible_value()
            .map_or_else(String::new, |v| v.get_name().to_owned())
    }
    fn via(&self) -> Via {
        let proxy = || self.proxy.expect("--proxy is required unless --via direct");
        match self.via {
            ViaKind::Direct => Via::Direct,
            ViaKind::Relay => Via::Relay(proxy()),
            ViaKind::Connect => Via::Connect(proxy()),
            ViaKind::ConnectEarly => Via::ConnectEarly(proxy()),
            ViaKind::Socks5 => Via::Socks5(proxy()),
        }
    }
}

fn main() {
    let args = Args::parse();
    let r = match args.cmd {
        Cmd::Transfer {
            c,
            bytes,
            dir,
            chunk,
            streams,
        } => transfer(&c, bytes, dir, chunk as usize, streams.max(1)),
        Cmd::Churn { c, count, parallel } => churn(&c, count, parallel.max(1)),
        Cmd::Idle {
            c,
            count,
            settle_ms,
            hold_secs,
        } => idle(&c, count, settle_ms, hold_secs),
        Cmd::Watch {
            watch_pid,
            until_file,
            max_secs,
        } => watch(watch_pid, &until_file, max_secs),
    };
    if let Err(e) = r {
        eprintln!("loadgen: {e}");
        std::process::exit(1);
    }
}

// ---- the data pattern -------------------------------------------------------

/// Period of the pattern: a prime, so a slip of any whole number of chunks shows.
const PERIOD: usize = 1_048_573;

/// The pattern twice over, so any window of up to `PERIOD` bytes at any
/// phase is one contiguous slice.
fn pattern() -> Vec<u8> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let one: Vec<u8> = (0..PERIOD)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    [one.as_slice(), one.as_slice()].concat()
}

fn send_pattern(s: &mut TcpStream, pat: &[u8], bytes: u64, chunk: usize) -> io::Result<()> {
    let chunk = chunk.min(PERIOD);
    let mut off = 0u64;
    while off < bytes {
        let phase = (off % PERIOD as u64) as usize;
        let n = chunk.min((bytes - off) as usize);
        let w = s.write(&pat[phase..phase + n])?;
        if w == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        off += w as u64;
    }
    Ok(())
}

/// Reads exactly `bytes`, checking every byte against the pattern.
fn recv_pattern(s: &mut TcpStream, pat: &[u8], bytes: u64, chunk: usize) -> io::Result<()> {
    let mut buf = vec![0u8; chunk.min(PERIOD)];
    let mut off = 0u64;
    while off < bytes {
        let want = buf.len().min((bytes - off) as usize);
        let n = s.read(&mut buf[..want])?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("EOF after {off} of {bytes} bytes"),
            ));
        }
        let phase = (off % PERIOD as u64) as usize;
        if buf[..n] != pat[phase..phase + n] {
            return Err(io::Error::other(format!("corrupt data near offset {off}")));
        }
        off += n as u64;
    }
    Ok(())
}

// ---- /proc ------------------------------------------------------------------

/// The proportional set size of the memory the processes of `pid`'s tree
/// own (anonymous and shared-memory pages: heap, stacks, buffers; a page
/// shared by forked children counts a share in each), in KiB. Mapped files
/// are left out: a binary's text is paid once, not per tunnel, and its PSS
/// moves with what other processes map (it fell by 170 KiB over one run
/// that added no text), which made a per-tunnel figure drift by ±10 bytes.
fn pss_kib(pid: u32) -> u64 {
    let field = |s: &str, name: &str| {
        s.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
    };
    process_tree(pid)
        .into_iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/smaps_rollup")).ok())
        .filter_map(
            |s| match (field(&s, "Pss_Anon:"), field(&s, "Pss_Shmem:")) {
                (Some(anon), shmem) => Some(anon + shmem.unwrap_or(0)),
                // Kernels before 5.9 split no PSS: all of it.
                (None, _) => field(&s, "Pss:"),
            },
        )
        .sum()
}

/// A `Vm*:` field of /proc/PID/status, in KiB.
fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Samples the resident memory of a process tree every 20 ms on a thread,
/// until dropped: forked children that come and go (socat) are seen, and
/// the kernel's high-water marks at the end catch peaks between samples.
/// Also the peak of its anonymous memory (`RssAnon`: heap, stacks, buffers,
/// what the process alone pays for; the rest of RSS is mapped files, its
/// binary's text and the libraries, shared with the page cache).
struct RssSampler {
    pid: u32,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<thread::JoinHandle<(u64, u64)>>,
}

/// Peak resident memory of a process tree, in KiB.
#[derive(Clone, Copy)]
struct Peak {
    rss: u64,
    anon: u64,
}

impl std::fmt::Display for Peak {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "peak_rss_kib={} peak_anon_kib={}", self.rss, self.anon)
    }
}

impl RssSampler {
    fn start(pid: u32) -> Self {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = thread::spawn(move || {
            let (mut peak, mut anon) = (0, 0);
            let mut tree = process_tree(pid);
            let mut rescan = Instant::now();
            while !flag.load(Ordering::Relaxed) {
                // Scanning all of /proc is the costly part: once a second.
                if rescan.elapsed() > Duration::from_secs(1) {
                    tree = process_tree(pid);
                    rescan = Instant::now();
                }
                let now: u64 = tree.iter().map(|&p| status_kib(p, "VmRSS:")).sum();
                peak = peak.max(now);
                let now: u64 = tree.iter().map(|&p| status_kib(p, "RssAnon:")).sum();
                anon = anon.max(now);
                thread::sleep(Duration::from_millis(20));
            }
            (peak, anon)
        });
        RssSampler {
            pid,
            stop,
            thread: Some(thread),
        }
    }

    /// The peak RSS of the tree: the largest sample, or the sum of the
    /// high-water marks of the processes alive now, whichever is larger;
    /// and the largest sample of its anonymous memory (the kernel keeps no
    /// high-water mark of that, so a peak between samples can be missed).
    fn finish(mut self) -> Peak {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let (sampled, anon) = self
            .thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or((0, 0));
        let hwm: u64 = process_tree(self.pid)
            .into_iter()
            .map(|p| status_kib(p, "VmHWM:"))
            .sum();
        Peak {
            rss: sampled.max(hwm),
            anon,
        }
    }
}

// ---- servers ----------------------------------------------------------------

/// Header a transfer client sends first: direction byte, then the byte count.
fn header(dir: Dir, bytes: u64) -> [u8; 9] {
    let mut h = [0u8; 9];
    h[0] = match dir {
        Dir::Up => b'u',
        Dir::Down => b'd',
        Dir::Both => b'b',
    };
    h[1..].copy_from_slice(&bytes.to_le_bytes());
    h
}

/// The transfer server: per connection, read the header, then receive
/// and check, send, or both; answer `ok` once everything received checked out.
fn transfer_server(l: TcpListener, chunk: usize) {
    thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut s) = conn else { continue };
            thread::spawn(move || {
                let mut h = [0u8; 9];
                if s.read_exact(&mut h).is_err() {
                    return;
                }
                let bytes = u64::from_le_bytes(h[1..].try_into().expect("8 bytes"));
                let pat = pattern();
                let sender = matches!(h[0], b'd' | b'b').then(|| {
                    let mut w = s.try_clone().expect("clone");
                    let pat = pat.clone();
                    thread::spawn(move || send_pattern(&mut w, &pat, bytes, chunk))
                });
                let received = matches!(h[0], b'u' | b'b').then(|| {
                    recv_pattern(&mut s, &pat, bytes, chunk)
                        .inspect_err(|e| eprintln!("loadgen server: {e}"))
                        .is_ok()
                });
                // The verdict goes after everything sent, never in the middle of it.
                if let Some(t) = sender {
                    if let Ok(Err(e)) = t.join() {
                        eprintln!("loadgen server send: {e}");
                    }
                }
                if let Some(ok) = received {
                    let _ = s.write_all(if ok { b"ok" } else { b"no" });
                }
                // Wait for the client to finish before closing.
                let mut rest = [0u8; 64];
                while matches!(s.read(&mut rest), Ok(n) if n > 0) {}
            });
        }
    });
}

/// The server's listener. Its accept queue is as deep as the proxies' (std
/// listens with 128): a plain relay dials the server as fast as clients
/// connect to it, and thousands of dials at once overflowed 128, leaving
/// connections to wait for SYN-ACK retransmits (seconds each).
fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let listen = || -> io::Result<TcpListener> {
        let s = socket2::Socket::new(
            socket2::Domain::for_address(addr),
            socket2::Type::STREAM,
            None,
        )?;
        s.set_reuse_address(true)?;
        s.bind(&addr.into())?;
        s.listen(4096)?;
        Ok(s.into())
    };
    listen().map_err(|e| io::Error::new(e.kind(), format!("cannot bind the server on {addr}: {e}")))
}

// ---- commands ---------------------------------------------------------------

/// One tunnel's part of a transfer: header, then send and/or receive
/// `bytes`, then the server's verdict on what it received.
fn transfer_one(
    mut s: TcpStream,
    pat: &[u8],
    bytes: u64,
    dir: Dir,
    chunk: usize,
) -> io::Result<()> {
    s.write_all(&header(dir, bytes))?;
    let receiver = matches!(dir, Dir::Down | Dir::Both).then(|| {
        let mut r = s.try_clone().expect("clone");
        let pat = pat.to_vec();
        thread::spawn(move || recv_pattern(&mut r, &pat, bytes, chunk))
    });
    if matches!(dir, Dir::Up | Dir::Both) {
        send_pattern(&mut s, pat, bytes, chunk)?;
    }
    if let Some(r) = receiver {
        r.join()
            .map_err(|_| io::Error::other("receiver panicked"))??;
    }
    if matches!(dir, Dir::Up | Dir::Both) {
        let mut ok = [0u8; 2];
        s.read_exact(&mut ok)?;
        if &ok != b"ok" {
            return Err(io::Error::other("the server saw corrupt or missing data"));
        }
    }
    Ok(())
}

fn transfer(c: &Common, bytes: u64, dir: Dir, chunk: usize, streams: u32) -> io::Result<()> {
    transfer_server(bind(c.sink)?, chunk);
    let pat = std::sync::Arc::new(pattern());
    let per_stream = bytes / u64::from(streams);
    // Every tunnel is open before the clock starts.
    let tunnels = (0..streams)
        .map(|i| {
            open(c.via(), c.sink).map_err(|e| io::Error::new(e.kind(), format!("tunnel {i}: {e}")))
        })
        .collect::<io::Result<Vec<_>>>()?;
    let sampler = c.watch_pid.map(RssSampler::start);
    let cpu0 = c.watch_pid.map(cpu_seconds);
    let t0 = Instant::now();
    let workers: Vec<_> = tunnels
        .iter()
        .map(|s| {
            let s = s.try_clone().expect("clone");
            let pat = pat.clone();
            thread::spawn(move || transfer_one(s, &pat, per_stream, dir, chunk))
        })
        .collect();
    for w in workers {
        w.join()
            .map_err(|_| io::Error::other("stream panicked"))??;
    }
    let secs = t0.elapsed().as_secs_f64();
    // Sampled before the tunnels close, so a per-connection child is still there.
    let cpu = c
        .watch_pid
        .zip(cpu0)
        .map(|(p, before)| cpu_seconds(p) - before);
    let peak = sampler.map(RssSampler::finish);
    for s in &tunnels {
        s.shutdown(Shutdown::Write)?;
    }
    let ways = if dir == Dir::Both { 2 } else { 1 };
    let total = per_stream * u64::from(streams) * ways;
    let mib = total as f64 / (1 << 20) as f64;
    let mut line = format!(
        "RESULT kind=transfer via={} dir={} streams={streams} bytes={total} secs={secs:.3} mib_per_s={:.1}",
        c.via_name(),
        format!("{dir:?}").to_lowercase(),
        mib / secs
    );
    if let Some(cpu) = cpu {
        let gib = total as f64 / (1u64 << 30) as f64;
        line += &format!(" proxy_cpu_s={cpu:.2} cpu_s_per_gib={:.3}", cpu / gib);
    }
    if let Some(peak) = peak {
        line += &format!(" {peak}");
    }
    println!("{line}");
    Ok(())
}

fn churn(c: &Common, count: u32, parallel: u32) -> io::Result<()> {
    let l = bind(c.sink)?;
    thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut s) = conn else { continue };
            let _ = s.set_nodelay(true);
            thread::spawn(move || {
                let mut buf = [0u8; 64];
                while let Ok(n @ 1..) = s.read(&mut buf) {
                    if s.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    let via = c.via();
    let cpu0 = c.watch_pid.map(cpu_seconds);
    let t0 = Instant::now();
    let per_client = count / parallel;
    let count = per_client * parallel;
    let sink = c.sink;
    let clients: Vec<_> = (0..parallel)
        .map(|_| {
            thread::spawn(move || -> io::Result<()> {
                let msg = [0x5au8; 32];
                for i in 0..per_client {
                    let (mut s, early) = open_sending(via, sink, &msg)
                        .map_err(|e| io::Error::new(e.kind(), format!("connection {i}: {e}")))?;
                    // A path that loses bytes fails the run instead of hanging it.
                    s.set_read_timeout(Some(Duration::from_secs(10)))?;
                    if early.len() > msg.len() {
                        return Err(io::Error::other("more echoed than sent"));
                    }
                    let mut back = [0u8; 32];
                    back[..early.len()].copy_from_slice(&early);
                    s.read_exact(&mut back[early.len()..])?;
                    if back != msg {
                        return Err(io::Error::other("echo mismatch"));
                    }
                }
                Ok(())
            })
        })
        .collect();
    for client in clients {
        client
            .join()
            .map_err(|_| io::Error::other("client thread panicked"))??;
    }
    let secs = t0.elapsed().as_secs_f64();
    let mut line = format!(
        "RESULT kind=churn via={} count={count} parallel={parallel} secs={secs:.3} conns_per_s={:.0}",
        c.via_name(),
        f64::from(count) / secs
    );
    if let Some(cpu) = c.watch_pid.zip(cpu0).map(|(p, b)| cpu_seconds(p) - b) {
        line += &format!(" proxy_cpu_us_per_conn={:.0}", cpu * 1e6 / f64::from(count));
    }
    println!("{line}");
    Ok(())
}

fn idle(c: &Common, count: u32, settle_ms: u64, hold_secs: u64) -> io::Result<()> {
    let pid = c
        .watch_pid
        .ok_or_else(|| io::Error::other("idle needs --watch-pid"))?;
    if count < 2 {
        return Err(io::Error::other(
            "idle needs --count 2 or more (one tunnel warms up)",
        ));
    }
    let l = bind(c.sink)?;
    let held = thread::spawn(move || {
        let mut held = Vec::new();
        for conn in l.incoming().take(count as usize) {
            match conn {
                Ok(s) => held.push(s),
                Err(e) => eprintln!("loadgen: accept: {e}"),
            }
        }
        held
    });
    let via = c.via();
    // One tunnel first, so one-off allocations (pools, tables) are not counted.
    let warm = open(via, c.sink)?;
    thread::sleep(Duration::from_millis(settle_ms));
    let before = pss_kib(pid);
    let mut tunnels = Vec::with_capacity(count as usize);
    let t0 = Instant::now();
    for i in 1..count {
        let s =
            open(via, c.sink).map_err(|e| io::Error::new(e.kind(), format!("tunnel {i}: {e}")))?;
        tunnels.push(s);
    }
    tunnels.push(warm);
    let open_secs = t0.elapsed().as_secs_f64();
    let server_side = held
        .join()
        .map_err(|_| io::Error::other("server thread panicked"))?;
    thread::sleep(Duration::from_millis(settle_ms));
    let after = pss_kib(pid);
    let per = (after as f64 - before as f64) * 1024.0 / f64::from(count - 1);
    let line = format!(
        "RESULT kind=idle via={} tunnels={} server_side={} open_secs={open_secs:.2} pss_before_kib={before} pss_after_kib={after} bytes_per_tunnel={per:.0}",
        c.via_name(),
        tunnels.len(),
        server_side.len()
    );
    println!("{line}");
    // The RESULT line is the signal that the tunnels are all open and idle.
    io::stdout().flush()?;
    thread::sleep(Duration::from_secs(hold_secs));
    drop(tunnels);
    Ok(())
}

fn watch(pid: u32, until: &std::path::Path, max_secs: u64) -> io::Result<()> {
    let sampler = RssSampler::start(pid);
    let cpu0 = cpu_seconds(pid);
    let t0 = Instant::now();
    while !until.exists() && t0.elapsed() < Duration::from_secs(max_secs) {
        thread::sleep(Duration::from_millis(50));
    }
    let cpu = cpu_seconds(pid) - cpu0;
    let peak = sampler.finish();
    println!(
        "RESULT kind=watch secs={:.3} cpu_s={cpu:.3} {peak}",
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}
