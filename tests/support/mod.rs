//! Shared helpers for the integration tests: proxies, upstreams, clients,
//! a deterministic data generator and polling helpers.
//!
//! Everything runs over real loopback sockets. Each test file pulls this in
//! with `mod support;` and uses a subset, hence the `dead_code` allowance.
#![allow(dead_code)]

pub mod origin;
pub mod tls;
#[allow(unused_imports)] // not every test file uses the origin
pub use origin::*;

use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use portcullis::policy::{parse_cli_rule, Action};
use portcullis::{
    Limits, ListenAddr, ListenerProtocol, Policy, Proxy, ProxyBuilder, SpawnedProxy, Timeouts,
};
use sha2::{Digest, Sha256};

/// Upper bound for anything that should happen "promptly" (never a speed assertion).
pub const PROMPTLY: Duration = Duration::from_secs(5);
/// Upper bound for a whole bulk transfer, to avoid hanging forever.
pub const BULK: Duration = Duration::from_secs(240);

pub type Hash = [u8; 32];

// ---------------------------------------------------------------------------
// Polling
// ---------------------------------------------------------------------------

/// Polls `cond` until it holds or `timeout` passes; returns whether it held.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// Like [`wait_until`], but panics with `what` when the deadline passes.
#[track_caller]
pub fn wait_for(what: &str, timeout: Duration, cond: impl FnMut() -> bool) {
    assert!(
        wait_until(timeout, cond),
        "timed out after {timeout:?} waiting for: {what}"
    );
}

// ---------------------------------------------------------------------------
// Deterministic data
// ---------------------------------------------------------------------------

/// A deterministic byte stream (xorshift64*). Filling in chunks of any sizes
/// yields the same stream as filling in one go.
#[derive(Clone)]
pub struct DataGen {
    state: u64,
    pending: [u8; 8],
    pending_len: usize,
}

impl DataGen {
    pub fn new(seed: u64) -> Self {
        // splitmix the seed so that small seeds give unrelated streams; never zero.
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        DataGen {
            state: z | 1,
            pending: [0; 8],
            pending_len: 0,
        }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A value in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next_u64() % (hi - lo + 1) as u64) as usize
    }

    /// Fills `buf` with the next bytes of the stream.
    pub fn fill(&mut self, buf: &mut [u8]) {
        let mut i = 0;
        while self.pending_len > 0 && i < buf.len() {
            buf[i] = self.pending[8 - self.pending_len];
            self.pending_len -= 1;
            i += 1;
        }
        let rest = &mut buf[i..];
        let mut chunks = rest.chunks_exact_mut(8);
        for c in &mut chunks {
            c.copy_from_slice(&self.next_u64().to_le_bytes());
        }
        let tail = chunks.into_remainder();
        if !tail.is_empty() {
            let v = self.next_u64().to_le_bytes();
            let n = tail.len();
            tail.copy_from_slice(&v[..n]);
            self.pending = v;
            self.pending_len = 8 - n;
        }
    }

    /// The next `n` bytes as a vector.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = vec![0; n];
        self.fill(&mut v);
        v
    }
}

/// The SHA-256 of the first `len` bytes of the stream for `seed`.
pub fn expected_hash(seed: u64, len: u64) -> Hash {
    let mut g = DataGen::new(seed);
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut left = len;
    while left > 0 {
        let n = left.min(buf.len() as u64) as usize;
        g.fill(&mut buf[..n]);
        h.update(&buf[..n]);
        left -= n as u64;
    }
    h.finalize().into()
}

pub fn sha256(data: &[u8]) -> Hash {
    Sha256::digest(data).into()
}

pub fn hex(h: &Hash) -> String {
    h.iter().map(|b| format!("{b:02x}")).collect()
}

/// Checks a received stream byte by byte against the generator.
pub struct Verifier {
    gen: DataGen,
    scratch: Vec<u8>,
    /// Bytes checked so far.
    pub offset: u64,
    /// Offset of the first byte that differed, if any.
    pub first_mismatch: Option<u64>,
}

impl Verifier {
    pub fn new(seed: u64) -> Self {
        Verifier {
            gen: DataGen::new(seed),
            scratch: Vec::new(),
            offset: 0,
            first_mismatch: None,
        }
    }

    pub fn check(&mut self, data: &[u8]) {
        self.scratch.resize(data.len(), 0);
        self.gen.fill(&mut self.scratch);
        if self.first_mismatch.is_none() && self.scratch[..] != *data {
            let i = data
                .iter()
                .zip(&self.scratch)
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            self.first_mismatch = Some(self.offset + i as u64);
        }
        self.offset += data.len() as u64;
    }

    /// Panics unless exactly `len` bytes were seen and all matched.
    #[track_caller]
    pub fn assert_complete(&self, what: &str, len: u64) {
        assert_eq!(
            self.first_mismatch, None,
            "{what}: corrupted stream, first bad byte at offset {:?}",
            self.first_mismatch
        );
        assert_eq!(self.offset, len, "{what}: wrong byte count");
    }
}

/// Writes `len` bytes of the stream for `seed` to `w` in chunks of random
/// sizes in `min_chunk..=max_chunk` (the sizes come from `seed ^ 0x5eed`).
pub fn write_stream(
    w: &mut impl Write,
    seed: u64,
    len: u64,
    min_chunk: usize,
    max_chunk: usize,
) -> io::Result<()> {
    let mut data = DataGen::new(seed);
    let mut sizes = DataGen::new(seed ^ 0x5eed);
    let mut buf = vec![0u8; max_chunk];
    let mut left = len;
    while left > 0 {
        let n = (sizes.range(min_chunk, max_chunk) as u64).min(left) as usize;
        data.fill(&mut buf[..n]);
        w.write_all(&buf[..n])?;
        left -= n as u64;
    }
    w.flush()
}

/// Reads `r` to EOF, returning (byte count, SHA-256).
pub fn hash_to_eof(r: &mut impl Read) -> io::Result<(u64, Hash)> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut n = 0u64;
    loop {
        match r.read(&mut buf) {
            Ok(0) => return Ok((n, h.finalize().into())),
            Ok(k) => {
                h.update(&buf[..k]);
                n += k as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// A reader schedule that stalls and bursts: read up to `burst` bytes, then
/// sleep `pause`, repeat. Every byte goes through `verifier`. Returns at EOF.
pub fn read_stalling(
    r: &mut impl Read,
    verifier: &mut Verifier,
    burst: usize,
    pause: Duration,
) -> io::Result<u64> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut cycles = 0u64;
    loop {
        let mut in_burst = 0;
        while in_burst < burst {
            let want = (burst - in_burst).min(buf.len());
            let k = match r.read(&mut buf[..want]) {
                Ok(0) => return Ok(cycles),
                Ok(k) => k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            verifier.check(&buf[..k]);
            in_burst += k;
        }
        cycles += 1;
        thread::sleep(pause);
    }
}

// ---------------------------------------------------------------------------
// Proxies
// ---------------------------------------------------------------------------

/// Short timeouts for tests: nothing should ever wait on them unless a test means to.
pub fn test_timeouts() -> Timeouts {
    Timeouts {
        handshake: Duration::from_secs(5),
        connect: Duration::from_secs(5),
        idle: None,
        close: Duration::from_secs(2),
        drain: Duration::from_secs(2),
        response: Duration::from_secs(5),
    }
}

/// A policy allowing exactly these loopback ports on 127.0.0.1.
pub fn allow_ports(ports: &[u16]) -> Policy {
    let rules: Vec<_> = ports
        .iter()
        .map(|p| parse_cli_rule(Action::Allow, &format!("127.0.0.1:{p}")).expect("rule"))
        .collect();
    Policy::from_rules(&rules).expect("policy")
}

/// A policy from command-line style allow rules, e.g. `["localhost:8080"]`.
pub fn allow_rules(specs: &[&str]) -> Policy {
    let rules: Vec<_> = specs
        .iter()
        .map(|s| parse_cli_rule(Action::Allow, s).expect("rule"))
        .collect();
    Policy::from_rules(&rules).expect("policy")
}

/// A builder with one auto listener on 127.0.0.1:0, `policy` and test timeouts.
pub fn proxy_builder(policy: Policy) -> ProxyBuilder {
    Proxy::builder()
        .listen(
            ListenAddr::Tcp("127.0.0.1:0".parse().unwrap()),
            ListenerProtocol::Auto,
        )
        .policy(policy)
        .timeouts(test_timeouts())
}

/// A proxy on 127.0.0.1:0 (auto) with `policy` and test timeouts, running on its thread.
pub fn start_proxy(policy: Policy) -> SpawnedProxy {
    spawn(proxy_builder(policy))
}

/// Builds and spawns.
pub fn spawn(builder: ProxyBuilder) -> SpawnedProxy {
    builder
        .build()
        .expect("bind proxy")
        .spawn()
        .expect("spawn proxy")
}

/// Limits with a given relay buffer size.
pub fn limits_with_buffer(buffer_size: usize) -> Limits {
    Limits {
        buffer_size,
        ..Limits::default()
    }
}

pub fn proxy_addr(p: &SpawnedProxy) -> SocketAddr {
    p.tcp_addr().expect("proxy has a TCP listener")
}

/// Waits until the proxy has no open sessions.
#[track_caller]
pub fn wait_no_open_sessions(p: &SpawnedProxy) {
    wait_for("no open sessions", PROMPTLY, || p.stats().open.total() == 0);
}

// ---------------------------------------------------------------------------
// Upstream servers
// ---------------------------------------------------------------------------

/// A loopback TCP server: one thread accepting, one thread per connection.
pub struct Server {
    pub addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
}

impl Server {
    /// Starts a server on 127.0.0.1:0 running `handler` for every connection.
    pub fn start<F>(handler: F) -> Server
    where
        F: Fn(TcpStream) + Send + Sync + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind upstream");
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        let handler = Arc::new(handler);
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                count.fetch_add(1, Ordering::SeqCst);
                let h = handler.clone();
                thread::spawn(move || h(stream));
            }
        });
        Server { addr, accepted }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `127.0.0.1:PORT`, as a CONNECT target.
    pub fn target(&self) -> String {
        format!("127.0.0.1:{}", self.addr.port())
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

/// Echoes every byte back until EOF, then closes.
pub fn echo_server() -> Server {
    Server::start(|mut s| {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if s.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = s.shutdown(Shutdown::Write);
    })
}

/// A listener that must accept nothing: use `accepted()` to check.
pub fn must_not_accept() -> Server {
    Server::start(|_| {})
}

/// Reads every connection to EOF and reports `(count, sha256)` on the channel.
pub fn sink_server() -> (Server, Receiver<io::Result<(u64, Hash)>>) {
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    let server = Server::start(move |mut s| {
        let r = hash_to_eof(&mut s);
        let _ = tx.lock().unwrap().send(r);
    });
    (server, rx)
}

/// Writes `len` bytes of the stream for `seed` to every connection, then closes.
pub fn source_server(seed: u64, len: u64) -> Server {
    Server::start(move |mut s| {
        let _ = write_stream(&mut s, seed, len, 64 * 1024, 64 * 1024);
        let _ = s.shutdown(Shutdown::Write);
    })
}

/// A tiny HTTP/1.1 origin: answers every request with 200 and `body`, then closes.
pub fn http_server(body: &'static str) -> Server {
    Server::start(move |mut s| {
        let _ = read_until_blank_line(&mut s);
        let resp = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
            body.len(),
            body
        );
        let _ = s.write_all(resp.as_bytes());
        let _ = s.shutdown(Shutdown::Write);
        // Drain until the client closes, so our close never resets unread bytes.
        let _ = s.set_read_timeout(Some(PROMPTLY));
        let mut sink = [0u8; 1024];
        while matches!(s.read(&mut sink), Ok(n) if n > 0) {}
    })
}

// ---------------------------------------------------------------------------
// WebSocket
// ---------------------------------------------------------------------------

/// Message size limits generous enough for the bulk tests.
pub fn ws_config() -> tungstenite::protocol::WebSocketConfig {
    tungstenite::protocol::WebSocketConfig::default()
        .max_message_size(Some(64 << 20))
        .max_frame_size(Some(64 << 20))
}

/// What the WebSocket server saw: bytes and hash of every binary message received.
#[derive(Debug)]
pub struct WsReport {
    pub received: u64,
    pub received_hash: Hash,
    pub messages: u64,
}

/// A WebSocket server that, on each connection, concurrently pushes
/// `push_len` bytes (stream `push_seed`) in `msg_size` binary messages and
/// hashes every binary message it receives until the client sends a text
/// message `"done"`; then it reports and answers the close handshake.
pub fn ws_server(
    push_seed: u64,
    push_len: u64,
    msg_size: usize,
) -> (Server, Receiver<Result<WsReport, String>>) {
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    let server = Server::start(move |stream| {
        let r = ws_serve(stream, push_seed, push_len, msg_size);
        let _ = tx.lock().unwrap().send(r);
    });
    (server, rx)
}

fn ws_serve(
    stream: TcpStream,
    push_seed: u64,
    push_len: u64,
    msg_size: usize,
) -> Result<WsReport, String> {
    use tungstenite::protocol::{Role, WebSocket};
    let writer_stream = stream.try_clone().map_err(|e| e.to_string())?;
    let mut reader = tungstenite::accept_with_config(stream, Some(ws_config()))
        .map_err(|e| format!("ws accept: {e}"))?;
    let mut writer = WebSocket::from_raw_socket(writer_stream, Role::Server, Some(ws_config()));
    let pusher = thread::spawn(move || ws_push(&mut writer, push_seed, push_len, msg_size));
    let report = ws_receive(&mut reader);
    let pushed = pusher
        .join()
        .map_err(|_| "ws pusher panicked".to_string())?;
    pushed?;
    let report = report?;
    // The client closes; answer the close handshake on the reading half
    // (the writer is finished, so frames cannot interleave). The data is
    // already verified; how the close ends does not matter here.
    while reader.read().is_ok() {}
    Ok(report)
}

/// Sends `len` bytes of stream `seed` as binary messages of `msg_size`, then a text "done".
pub fn ws_push<S: Read + Write>(
    ws: &mut tungstenite::WebSocket<S>,
    seed: u64,
    len: u64,
    msg_size: usize,
) -> Result<(), String> {
    let mut g = DataGen::new(seed);
    let mut left = len;
    while left > 0 {
        let n = left.min(msg_size as u64) as usize;
        let msg = tungstenite::Message::binary(g.bytes(n));
        ws.write(msg).map_err(|e| format!("ws write: {e}"))?;
        left -= n as u64;
    }
    ws.send(tungstenite::Message::text("done"))
        .map_err(|e| format!("ws send done: {e}"))
}

/// Receives binary messages until a text "done", hashing them.
pub fn ws_receive<S: Read + Write>(ws: &mut tungstenite::WebSocket<S>) -> Result<WsReport, String> {
    let mut h = Sha256::new();
    let mut received = 0u64;
    let mut messages = 0u64;
    loop {
        match ws.read().map_err(|e| format!("ws read: {e}"))? {
            tungstenite::Message::Binary(b) => {
                h.update(&b);
                received += b.len() as u64;
                messages += 1;
            }
            tungstenite::Message::Text(t) if t.as_str() == "done" => break,
            other => return Err(format!("unexpected ws message: {other:?}")),
        }
    }
    Ok(WsReport {
        received,
        received_hash: h.finalize().into(),
        messages,
    })
}

// ---------------------------------------------------------------------------
// Clients
// ---------------------------------------------------------------------------

/// A parsed HTTP response head.
#[derive(Debug, Clone)]
pub struct ResponseHead {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub raw: String,
}

impl ResponseHead {
    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Reads byte by byte up to and including the first blank line.
pub fn read_until_blank_line(r: &mut impl Read) -> io::Result<Vec<u8>> {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match r.read(&mut b) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "EOF after {} bytes of head: {:?}",
                        head.len(),
                        String::from_utf8_lossy(&head)
                    ),
                ))
            }
            Ok(_) => head.push(b[0]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
        if head.len() > 64 * 1024 {
            return Err(io::Error::other("response head too long"));
        }
    }
    Ok(head)
}

/// Reads a response head byte by byte (never past it) and parses it.
pub fn read_response_head(r: &mut impl Read) -> io::Result<ResponseHead> {
    let raw = read_until_blank_line(r)?;
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let mut lines = raw.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    if !version.starts_with("HTTP/1.") {
        return Err(io::Error::other(format!("bad status line {status_line:?}")));
    }
    let status = parts
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| io::Error::other(format!("bad status line {status_line:?}")))?;
    let headers = lines
        .filter(|l| !l.is_empty())
        .filter_map(|l| {
            l.split_once(':')
                .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
        })
        .collect();
    Ok(ResponseHead {
        status,
        headers,
        raw,
    })
}

/// Sends `CONNECT target` (with `extra` header lines) on `s` and reads the answer head.
pub fn http_connect_on<S: Read + Write>(
    s: &mut S,
    target: &str,
    extra: &[(&str, &str)],
) -> io::Result<ResponseHead> {
    let mut req = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n");
    for (n, v) in extra {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes())?;
    read_response_head(s)
}

/// Connects to the proxy and sends a CONNECT; returns the stream (positioned
/// right after the response head) and the head, whatever its status.
pub fn http_connect(
    proxy: SocketAddr,
    target: &str,
    extra: &[(&str, &str)],
) -> io::Result<(TcpStream, ResponseHead)> {
    let mut s = TcpStream::connect(proxy)?;
    // The answer should come promptly; the tunnel afterwards may idle longer.
    s.set_read_timeout(Some(PROMPTLY))?;
    s.set_write_timeout(Some(BULK))?;
    let head = http_connect_on(&mut s, target, extra)?;
    s.set_read_timeout(Some(BULK))?;
    Ok((s, head))
}

/// A tunnel through CONNECT; panics unless the proxy answers 200.
#[track_caller]
pub fn connect_via_http(proxy: SocketAddr, target: &str) -> TcpStream {
    let (s, head) = http_connect(proxy, target, &[]).expect("CONNECT");
    assert_eq!(head.status, 200, "CONNECT {target}: {}", head.raw);
    s
}

/// `Proxy-Authorization` value for Basic credentials.
pub fn basic_auth(user: &str, pass: &str) -> String {
    format!("Basic {}", base64(format!("{user}:{pass}").as_bytes()))
}

pub fn base64(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in data.chunks(3) {
        let b = [c[0], *c.get(1).unwrap_or(&0), *c.get(2).unwrap_or(&0)];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// How a SOCKS5 handshake failed.
#[derive(Debug)]
pub enum SocksError {
    Io(io::Error),
    /// The server picked a method other than the one we offered (0xff: none acceptable).
    Method(u8),
    /// RFC 1929 status was not success.
    Auth(u8),
    /// The request was answered with this non-zero reply code.
    Reply(u8),
    /// The server answered something that is not SOCKS5.
    Protocol(String),
}

impl From<io::Error> for SocksError {
    fn from(e: io::Error) -> Self {
        SocksError::Io(e)
    }
}

/// Encodes a SOCKS5 address: IPv4/IPv6 literal (ATYP 1/4) or domain (ATYP 3).
pub fn socks_addr(host: &str, port: u16) -> Vec<u8> {
    let mut v = Vec::new();
    match host
        .trim_matches(|c| c == '[' || c == ']')
        .parse::<IpAddr>()
    {
        Ok(IpAddr::V4(a)) => {
            v.push(0x01);
            v.extend_from_slice(&a.octets());
        }
        Ok(IpAddr::V6(a)) => {
            v.push(0x04);
            v.extend_from_slice(&a.octets());
        }
        Err(_) => {
            assert!(host.len() < 256, "domain too long for SOCKS5");
            v.push(0x03);
            v.push(host.len() as u8);
            v.extend_from_slice(host.as_bytes());
        }
    }
    v.extend_from_slice(&port.to_be_bytes());
    v
}

/// Reads a whole SOCKS5 reply; returns (REP, bound address bytes incl. port).
pub fn read_socks_reply(s: &mut impl Read) -> io::Result<(u8, Vec<u8>)> {
    let mut h = [0u8; 4];
    s.read_exact(&mut h)?;
    if h[0] != 0x05 {
        return Err(io::Error::other(format!("reply version {:#04x}", h[0])));
    }
    let len = match h[3] {
        0x01 => 4 + 2,
        0x04 => 16 + 2,
        0x03 => {
            let mut l = [0u8; 1];
            s.read_exact(&mut l)?;
            l[0] as usize + 2
        }
        t => return Err(io::Error::other(format!("reply ATYP {t:#04x}"))),
    };
    let mut rest = vec![0u8; len];
    s.read_exact(&mut rest)?;
    Ok((h[1], rest))
}

/// Runs a SOCKS5 CONNECT handshake on `s` (no auth, or user/pass when `auth` is set).
pub fn socks5_handshake<S: Read + Write>(
    s: &mut S,
    host: &str,
    port: u16,
    auth: Option<(&str, &str)>,
) -> Result<(), SocksError> {
    let method = if auth.is_some() { 0x02 } else { 0x00 };
    s.write_all(&[0x05, 0x01, method])?;
    let mut sel = [0u8; 2];
    s.read_exact(&mut sel)?;
    if sel[0] != 0x05 {
        return Err(SocksError::Protocol(format!("method selection {sel:?}")));
    }
    if sel[1] != method {
        return Err(SocksError::Method(sel[1]));
    }
    if let Some((user, pass)) = auth {
        let mut m = vec![0x01, user.len() as u8];
        m.extend_from_slice(user.as_bytes());
        m.push(pass.len() as u8);
        m.extend_from_slice(pass.as_bytes());
        s.write_all(&m)?;
        let mut st = [0u8; 2];
        s.read_exact(&mut st)?;
        if st[0] != 0x01 {
            return Err(SocksError::Protocol(format!("auth status {st:?}")));
        }
        if st[1] != 0 {
            return Err(SocksError::Auth(st[1]));
        }
    }
    let mut req = vec![0x05, 0x01, 0x00];
    req.extend(socks_addr(host, port));
    s.write_all(&req)?;
    let (rep, _) = read_socks_reply(s)?;
    if rep != 0 {
        return Err(SocksError::Reply(rep));
    }
    Ok(())
}

/// Connects to the proxy and runs a SOCKS5 CONNECT to `host:port`.
pub fn socks5_connect(
    proxy: SocketAddr,
    host: &str,
    port: u16,
    auth: Option<(&str, &str)>,
) -> Result<TcpStream, SocksError> {
    let mut s = TcpStream::connect(proxy)?;
    s.set_read_timeout(Some(PROMPTLY))?;
    s.set_write_timeout(Some(BULK))?;
    socks5_handshake(&mut s, host, port, auth)?;
    s.set_read_timeout(Some(BULK))?;
    Ok(s)
}

/// A tunnel through SOCKS5 (no auth). `Err(code)` when the request is answered
/// with a non-zero reply; panics on anything else that goes wrong.
#[track_caller]
pub fn connect_via_socks5(proxy: SocketAddr, host: &str, port: u16) -> Result<TcpStream, u8> {
    match socks5_connect(proxy, host, port, None) {
        Ok(s) => Ok(s),
        Err(SocksError::Reply(r)) => Err(r),
        Err(e) => panic!("SOCKS5 to {host}:{port}: {e:?}"),
    }
}

/// Reads until EOF or a reset; returns what was read. Errors other than a
/// reset (including a read timeout) are returned.
pub fn read_until_closed(s: &mut impl Read) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Ok(out),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted
                ) =>
            {
                return Ok(out)
            }
            Err(e) => return Err(e),
        }
    }
}

/// Asserts the peer closes `s` within [`PROMPTLY`]; returns what it sent first.
#[track_caller]
pub fn expect_closed(s: &mut TcpStream, what: &str) -> Vec<u8> {
    s.set_read_timeout(Some(PROMPTLY)).unwrap();
    match read_until_closed(s) {
        Ok(v) => v,
        Err(e) => panic!("{what}: expected the proxy to close the connection, got {e}"),
    }
}

/// Writes `data` and reads the same number of bytes back; returns them.
pub fn echo_roundtrip(s: &mut (impl Read + Write), data: &[u8]) -> io::Result<Vec<u8>> {
    s.write_all(data)?;
    let mut back = vec![0u8; data.len()];
    s.read_exact(&mut back)?;
    Ok(back)
}

/// Asserts one echo round trip through `s` returns `data` intact.
#[track_caller]
pub fn assert_echo(s: &mut (impl Read + Write), data: &[u8]) {
    let back = echo_roundtrip(s, data).expect("echo round trip");
    assert!(back == data, "echo returned different bytes");
}

/// A tunnel that keeps relaying in the background: a thread writes chunks of
/// the generator into an echo tunnel, reads them back and checks every byte.
pub struct BackgroundTunnel {
    stop: Arc<AtomicBool>,
    verified: Arc<AtomicU64>,
    error: Arc<Mutex<Option<String>>>,
    thread: Option<JoinHandle<()>>,
}

impl BackgroundTunnel {
    /// Starts pumping through an already established tunnel to an echo server.
    pub fn start(mut s: TcpStream, seed: u64) -> BackgroundTunnel {
        let stop = Arc::new(AtomicBool::new(false));
        let verified = Arc::new(AtomicU64::new(0));
        let error = Arc::new(Mutex::new(None));
        let (st, ve, er) = (stop.clone(), verified.clone(), error.clone());
        s.set_read_timeout(Some(PROMPTLY)).unwrap();
        let thread = thread::spawn(move || {
            let mut gen = DataGen::new(seed);
            let mut sizes = DataGen::new(seed ^ 0x5eed);
            let mut verifier = Verifier::new(seed);
            let mut back = vec![0u8; 64 * 1024];
            while !st.load(Ordering::SeqCst) {
                let n = sizes.range(1, 64 * 1024);
                let chunk = gen.bytes(n);
                let r = s
                    .write_all(&chunk)
                    .and_then(|_| s.read_exact(&mut back[..n]));
                if let Err(e) = r {
                    *er.lock().unwrap() = Some(format!(
                        "background tunnel failed after {} bytes: {e}",
                        verifier.offset
                    ));
                    return;
                }
                verifier.check(&back[..n]);
                if let Some(off) = verifier.first_mismatch {
                    *er.lock().unwrap() =
                        Some(format!("background tunnel corrupted at offset {off}"));
                    return;
                }
                ve.store(verifier.offset, Ordering::SeqCst);
                thread::sleep(Duration::from_millis(1));
            }
        });
        BackgroundTunnel {
            stop,
            verified,
            error,
            thread: Some(thread),
        }
    }

    /// Asserts no error so far and that the tunnel is still making progress.
    #[track_caller]
    pub fn check(&self, after: &str) {
        let before = self.verified.load(Ordering::SeqCst);
        let ok = wait_until(PROMPTLY, || {
            self.error.lock().unwrap().is_some() || self.verified.load(Ordering::SeqCst) > before
        });
        if let Some(e) = self.error.lock().unwrap().as_ref() {
            panic!("after {after}: {e}");
        }
        assert!(ok, "after {after}: background tunnel made no progress");
    }

    /// Stops the pump and asserts every byte was intact; returns bytes verified.
    #[track_caller]
    pub fn finish(mut self) -> u64 {
        self.check("the last case");
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().expect("background tunnel thread");
        }
        if let Some(e) = self.error.lock().unwrap().as_ref() {
            panic!("{e}");
        }
        self.verified.load(Ordering::SeqCst)
    }
}

impl Drop for BackgroundTunnel {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

// ---------------------------------------------------------------------------
// Processes
// ---------------------------------------------------------------------------

/// Open file descriptors of a process, from /proc/PID/fd.
pub fn count_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("read /proc/PID/fd")
        .count()
}

/// utime + stime of a process in clock ticks, from /proc/PID/stat.
pub fn proc_cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read /proc/PID/stat");
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let after = &stat[stat.rfind(')').expect("stat format") + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

/// A child process that is SIGKILLed and reaped when dropped, so a failing
/// test never leaves it running (holding our stderr open, streaming forever).
pub struct ChildGuard(pub Child);

impl std::ops::Deref for ChildGuard {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for ChildGuard {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Every python helper exits by itself after this long, whatever happens to us.
const PY_PROLOGUE: &str = "import threading as _t, os as _os\n_w = _t.Timer(120, lambda: _os._exit(9))\n_w.daemon = True\n_w.start()\n";

/// Spawns `python3 -u -c script args...` with piped stdout. Panics (fails the
/// test, never skips) when python3 is missing: CI installs it.
pub fn spawn_python(script: &str, args: &[String]) -> ChildGuard {
    match Command::new("python3")
        .arg("-u")
        .arg("-c")
        .arg(format!("{PY_PROLOGUE}{script}"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
    {
        Ok(c) => ChildGuard(c),
        Err(e) => panic!("cannot run python3 ({e}); this test needs it (CI installs it)"),
    }
}

/// Reads one line from a child's stdout, bounded by [`PROMPTLY`].
pub fn child_line(child: &mut Child, what: &str) -> String {
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut r = BufReader::new(stdout);
        let mut line = String::new();
        let _ = r.read_line(&mut line);
        let _ = tx.send(line);
        // Keep draining so the child never blocks on a full pipe.
        let mut sink = String::new();
        while matches!(r.read_line(&mut sink), Ok(n) if n > 0) {
            sink.clear();
        }
    });
    match rx.recv_timeout(PROMPTLY) {
        Ok(l) if !l.is_empty() => l.trim().to_string(),
        Ok(_) => panic!("{what}: child closed stdout without a line"),
        Err(_) => panic!("{what}: no line from the child within {PROMPTLY:?}"),
    }
}

/// The proxy binary running as a child process, its stderr collected.
pub struct ChildProxy {
    pub child: Child,
    pub addr: SocketAddr,
    lines: Arc<Mutex<Vec<String>>>,
}

impl ChildProxy {
    /// Starts the binary with `--listen 127.0.0.1:0` plus `args`, RUST_LOG=info,
    /// and waits for its `listening on ADDR` line.
    pub fn start(args: &[&str]) -> ChildProxy {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_portcullis"));
        cmd.arg("--listen").arg("127.0.0.1:0").args(args);
        ChildProxy::start_command(cmd)
    }

    /// Like [`ChildProxy::start`], but runs `cmd` as prepared by the caller
    /// (extra arguments, `pre_exec`, a wrapper); it must log `listening on ADDR`.
    pub fn start_command(mut cmd: Command) -> ChildProxy {
        let mut child = cmd
            .env("RUST_LOG", "info")
            .env("RUST_LOG_STYLE", "never")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn portcullis binary");
        let stderr = child.stderr.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let l = lines.clone();
        thread::spawn(move || {
            let r = BufReader::new(stderr);
            for line in r.lines() {
                let Ok(line) = line else { break };
                eprintln!("[portcullis] {line}");
                l.lock().unwrap().push(line);
            }
        });
        let mut cp = ChildProxy {
            child,
            addr: "0.0.0.0:0".parse().unwrap(),
            lines,
        };
        let mut addr = None;
        let found = wait_until(PROMPTLY, || {
            if let Ok(Some(status)) = cp.child.try_wait() {
                // Give the stderr reader a moment to collect the last words.
                thread::sleep(Duration::from_millis(100));
                panic!(
                    "the binary exited ({status}) before listening; stderr: {:?}",
                    cp.lines.lock().unwrap()
                );
            }
            addr = cp.lines.lock().unwrap().iter().find_map(|l| {
                let rest = &l[l.find("listening on ")? + "listening on ".len()..];
                rest.split_whitespace().next()?.parse::<SocketAddr>().ok()
            });
            addr.is_some()
        });
        assert!(
            found,
            "the binary logged no `listening on ADDR` line; stderr: {:?}",
            cp.lines.lock().unwrap()
        );
        cp.addr = addr.unwrap();
        cp
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn fds(&self) -> usize {
        count_fds(self.pid())
    }

    /// Sends SIGUSR1 and parses the next `stats:` line into key=value numbers
    /// (`open`, `wakeups`, `handshake`, ..., and `closed:` reasons like `client-gone`).
    pub fn stats(&self) -> HashMap<String, u64> {
        let is_stats = |l: &String| l.contains("stats: ");
        let before = self
            .lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| is_stats(l))
            .count();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.pid() as i32),
            nix::sys::signal::Signal::SIGUSR1,
        )
        .expect("SIGUSR1");
        let mut line = None;
        wait_for("a `stats:` line after SIGUSR1", PROMPTLY, || {
            let lines = self.lines.lock().unwrap();
            line = lines.iter().filter(|l| is_stats(l)).nth(before).cloned();
            line.is_some()
        });
        parse_stats_line(&line.unwrap())
    }

    /// Everything the binary logged so far.
    pub fn log(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }
}

impl Drop for ChildProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Parses `... stats: accepted=1 ... open=0 (handshake=0 ...) ... wakeups=7 ... closed: client-gone=1`.
/// Close reasons after `closed:` are keyed `closed.REASON` (e.g. `closed.client-gone`),
/// so `closed.denied` does not clash with the top-level `denied`.
pub fn parse_stats_line(line: &str) -> HashMap<String, u64> {
    let rest = &line[line.find("stats: ").expect("stats line") + "stats: ".len()..];
    let mut prefix = "";
    let mut m = HashMap::new();
    for tok in rest.split_whitespace() {
        if tok == "closed:" {
            prefix = "closed.";
            continue;
        }
        let tok = tok.trim_matches(|c| c == '(' || c == ')' || c == ',');
        let Some((k, v)) = tok.split_once('=') else {
            continue;
        };
        if let Ok(v) = v.parse() {
            m.insert(format!("{prefix}{k}"), v);
        }
    }
    m
}

/// Reads a stats key, panicking with the whole map when it is missing.
#[track_caller]
pub fn stat(m: &HashMap<String, u64>, key: &str) -> u64 {
    *m.get(key)
        .unwrap_or_else(|| panic!("stats line has no `{key}=`: {m:?}"))
}

// ---------------------------------------------------------------------------
// Temporary directories
// ---------------------------------------------------------------------------

/// A fresh directory under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "portcullis-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("create temp dir");
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs curl with a bounded runtime and no proxy settings from the
/// environment. Panics when curl is missing: the tests need it (CI installs it).
pub fn curl(args: &[&str]) -> std::process::Output {
    let mut cmd = std::process::Command::new("curl");
    for var in [
        "http_proxy",
        "HTTP_PROXY",
        "https_proxy",
        "HTTPS_PROXY",
        "all_proxy",
        "ALL_PROXY",
        "no_proxy",
        "NO_PROXY",
    ] {
        cmd.env_remove(var);
    }
    match cmd.args(["--max-time", "30"]).args(args).output() {
        Ok(o) => o,
        Err(e) => panic!("cannot run curl ({e}); this test needs it (CI installs it)"),
    }
}
