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
//! - clients killed mid-stream (the socket is reset with SO_LINGER 0);
//! - with `--work DIR` (what `--prepare DIR` wrote, its `inspect.toml` in the
//!   proxy's config; the secret's value in `SOAK_SECRET`, its placeholder in
//!   `--placeholder`): inspected HTTP tunnels, terminated TLS sessions with
//!   WebSockets after the 101, requests refused by a request rule, the
//!   secret injected for `localhost` and refused for `127.0.0.1` (see
//!   "Inspected and terminated sessions" below);
//! - with `--pid`: a SIGHUP reload every `--reload-every` seconds (3).
//!
//! Every payload is SHA-256 hashed and checked at the other end. With
//! `--pid`/`--log` it samples the proxy's fd count and RSS (high-water marks),
//! checks memory stayed flat (`rss_flat`) and reads its SIGUSR1 stats. The
//! last line is `lost: N`, N counting payloads that did not arrive intact (or
//! at all); the exit status is 1 when N > 0 or any other check failed.

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
    inspected_sessions: AtomicU64,
    terminated_sessions: AtomicU64,
    tls_ws_sessions: AtomicU64,
    /// Requests a request rule refused with 403, as expected (or not).
    refused_ok: AtomicU64,
    refused_wrong: AtomicU64,
    /// Requests at the terminated origin carrying the secret's value (or not).
    secret_ok: AtomicU64,
    secret_wrong: AtomicU64,
    /// Placeholders sent elsewhere refused with `secret-not-allowed`.
    secret_refused_ok: AtomicU64,
    reloads: AtomicU64,
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
    /// What `--prepare` wrote: enables inspected and terminated sessions.
    work: Option<std::path::PathBuf>,
    placeholder: Option<String>,
    /// Seconds between SIGHUPs (0: none).
    reload_every: u64,
    /// Allowed RSS growth, last third of the run over the first, in KiB
    /// (default: the larger of 4 MiB and a quarter of the first third's).
    rss_slack_kib: Option<u64>,
}

fn parse_args() -> Args {
    let mut a = std::env::args().skip(1);
    let (mut proxy, mut duration, mut pid, mut log) = (None, Duration::from_secs(600), None, None);
    let (mut work, mut placeholder, mut reload_every, mut rss_slack_kib) = (None, None, 3, None);
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
            "--prepare" => {
                prepare(std::path::Path::new(&v()));
                std::process::exit(0)
            }
            "--work" => work = Some(v().into()),
            "--placeholder" => placeholder = Some(v()),
            "--reload-every" => {
                reload_every = v().parse().unwrap_or_else(|_| usage("bad --reload-every"))
            }
            "--rss-slack-kib" => {
                rss_slack_kib = Some(v().parse().unwrap_or_else(|_| usage("bad --rss-slack-kib")))
            }
            _ => usage(&format!("unknown argument {k}")),
        }
    }
    Args {
        proxy: proxy.unwrap_or_else(|| usage("--proxy is required")),
        duration,
        pid,
        log,
        work,
        placeholder,
        reload_every,
        rss_slack_kib,
    }
}

fn usage(msg: &str) -> ! {
    eprintln!(
        "soak: {msg}\nusage: soak --prepare DIR\n       soak --proxy ADDR [--minutes N | --seconds S] \
         [--pid PID --log FILE] [--work DIR --placeholder P] [--reload-every S] [--rss-slack-kib K]\n\
         (--work: the secret's value in SOAK_SECRET)"
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
// Inspected and terminated sessions
// ---------------------------------------------------------------------------
//
// `--prepare DIR` (run by scripts/soak.sh before the proxy starts) writes a
// proxy CA and an origin CA (PEM for the proxy, DER for us), an origin leaf
// for `localhost` and `127.0.0.1`, picks two free ports (the plaintext
// origin the proxy inspects, the TLS origin it terminates) and writes the
// config fragment `inspect.toml` for them. The load run (`--work DIR`) binds
// those ports again and drives:
//
// - inspected HTTP tunnels (CONNECT, `inspect = "http"`): POSTs hashed both
//   ways on one keep-alive connection, then sometimes a request rule's 403;
// - terminated TLS (`tls = "terminate"`, trusting the proxy CA): the same
//   POSTs, each carrying the secret's placeholder in `Authorization`; the
//   origin checks it got the real value (`--secret-value`); then a 403, a
//   WebSocket after the 101 (hashed both ways), or nothing;
// - the placeholder sent to `127.0.0.1` (terminated, but not in the secret's
//   hosts): `403` with `X-Proxy-Error: secret-not-allowed` expected.

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};

/// What the inspected and terminated sessions need.
#[derive(Clone)]
struct TlsSetup {
    http_port: u16,
    tls_port: u16,
    client: Arc<rustls::ClientConfig>,
    placeholder: String,
    secret: String,
}

fn rcgen_key() -> rcgen::KeyPair {
    rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("key")
}

fn ca_params(cn: &str) -> rcgen::CertificateParams {
    let mut p = rcgen::CertificateParams::default();
    let mut dn = rcgen::DistinguishedName::new();
    dn.push(rcgen::DnType::CommonName, cn);
    p.distinguished_name = dn;
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    p.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
    ];
    p
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// `--prepare DIR`: CAs, origin leaf, ports and `inspect.toml` in DIR.
fn prepare(dir: &std::path::Path) {
    let w = |name: &str, data: &[u8]| std::fs::write(dir.join(name), data).expect("write");
    // The proxy's CA: signs the leaves our client sees.
    let pk = rcgen_key();
    let pca = ca_params("portcullis soak proxy CA")
        .self_signed(&pk)
        .expect("CA");
    w("proxy-ca.pem", pca.pem().as_bytes());
    w("proxy-ca-key.pem", pk.serialize_pem().as_bytes());
    // The proxy warns about a CA key others can read.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::Permissions::from_mode(0o600);
        std::fs::set_permissions(dir.join("proxy-ca-key.pem"), mode).expect("chmod");
    }
    w("proxy-ca.der", pca.der());
    // The origin's CA (the proxy trusts it as `upstream_ca`) and its leaf.
    let ok = rcgen_key();
    let op = ca_params("portcullis soak origin CA");
    let oca = op.self_signed(&ok).expect("CA");
    w("origin-ca.pem", oca.pem().as_bytes());
    let issuer = rcgen::Issuer::new(op, ok);
    let lk = rcgen_key();
    let mut lp = rcgen::CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])
        .expect("leaf params");
    lp.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let leaf = lp.signed_by(&lk, &issuer).expect("leaf");
    w("origin-leaf.der", leaf.der());
    w("origin-ca.der", oca.der());
    w("origin-key.der", &lk.serialize_der());
    let (http_port, tls_port) = (free_port(), free_port());
    w("ports", format!("{http_port} {tls_port}\n").as_bytes());
    let d = dir.display();
    w(
        "inspect.toml",
        format!(
            r#"
[tls]
ca_cert = "{d}/proxy-ca.pem"
ca_key = "{d}/proxy-ca-key.pem"
upstream_ca = ["{d}/origin-ca.pem"]
state_dir = "{d}/state"

# Plaintext HTTP, inspected: /admin/** refused by a request rule.
[[rules]]
name = "soak-inspected"
action = "allow"
cidr = "127.0.0.1/32"
ports = [{http_port}]
inspect = "http"
requests = [ {{ action = "allow", path = "/**" }}, {{ action = "deny", path = "/admin/**" }} ]

# TLS terminated (localhost and its address), the same request rules.
[[rules]]
name = "soak-terminated"
action = "allow"
hosts = ["localhost"]
cidrs = ["127.0.0.1/32"]
ports = [{tls_port}]
tls = "terminate"
requests = [ {{ action = "allow", path = "/**" }}, {{ action = "deny", path = "/admin/**" }} ]

# Injected into requests for localhost only: 127.0.0.1 is refused.
[[secrets]]
name = "SOAK_TOKEN"
env = "SOAK_SECRET"
hosts = ["localhost"]
"#
        )
        .as_bytes(),
    );
}

/// `--work DIR`: reads what `prepare` wrote.
fn load_setup(dir: &std::path::Path, placeholder: String, secret: String) -> TlsSetup {
    let r = |name: &str| std::fs::read(dir.join(name)).expect("a --prepare file");
    let ports = String::from_utf8(r("ports")).unwrap();
    let mut it = ports.split_whitespace().map(|p| p.parse::<u16>().unwrap());
    let (http_port, tls_port) = (it.next().unwrap(), it.next().unwrap());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from(r("proxy-ca.der"))).unwrap();
    let mut c = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    c.alpn_protocols = vec![b"http/1.1".to_vec()];
    TlsSetup {
        http_port,
        tls_port,
        client: Arc::new(c),
        placeholder,
        secret,
    }
}

fn serve_on(port: u16, handler: impl Fn(TcpStream) + Send + Sync + Clone + 'static) {
    let l = TcpListener::bind(("127.0.0.1", port)).expect("bind a prepared port");
    thread::spawn(move || {
        for s in l.incoming().flatten() {
            let h = handler.clone();
            thread::spawn(move || h(s));
        }
    });
}

/// Reads a head up to the blank line (byte by byte: the rest stays put).
fn read_head(s: &mut impl Read) -> io::Result<String> {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut b)? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        head.push(b[0]);
        if head.len() > 64 * 1024 {
            return Err(io::Error::other("head too long"));
        }
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().skip(1).find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// The origins' HTTP/1.1 loop: `POST /data/SEED` bodies checked against the
/// seed, answered with stream `SEED ^ 1`; `GET /ws` upgrades to a checking
/// echo. With `secret`, every request must carry `Authorization: Bearer
/// <secret>` (the proxy replaced the placeholder).
fn origin_loop<S: Read + Write>(mut s: S, secret: Option<&str>, t: &Tally) {
    loop {
        let Ok(head) = read_head(&mut s) else { return };
        let path = head.split(' ').nth(1).unwrap_or("").to_string();
        if path.starts_with("/admin") {
            t.error("origin received a request a rule refuses");
            t.lost.fetch_add(1, SeqCst);
        }
        if let Some(v) = secret {
            if header(&head, "authorization") != Some(&format!("Bearer {v}")) {
                t.secret_wrong.fetch_add(1, SeqCst);
            } else {
                t.secret_ok.fetch_add(1, SeqCst);
            }
        }
        if path == "/ws" {
            let Some(key) = header(&head, "sec-websocket-key") else {
                return;
            };
            let accept = tungstenite::handshake::derive_accept_key(key.as_bytes());
            let r = write!(
                s,
                "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\
                 Connection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n"
            )
            .and_then(|_| s.flush());
            if r.is_err() {
                return;
            }
            let ws = tungstenite::WebSocket::from_raw_socket(
                s,
                tungstenite::protocol::Role::Server,
                None,
            );
            return ws_echo(ws, t);
        }
        let len: usize = header(&head, "content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0u8; len];
        if s.read_exact(&mut body).is_err() {
            return;
        }
        let seed: u64 = path
            .strip_prefix("/data/")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        if sha(&body) == sha(&payload(seed, len)) {
            t.ok.fetch_add(1, SeqCst);
        } else {
            t.lost.fetch_add(1, SeqCst);
        }
        let back = payload(seed ^ 1, len);
        let r = write!(
            s,
            "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {len}\r\n\r\n"
        )
        .and_then(|_| s.write_all(&back))
        .and_then(|_| s.flush());
        if r.is_err() {
            return;
        }
    }
}

/// Checks each binary message (8-byte seed + payload of that seed), echoes it.
fn ws_echo<S: Read + Write>(mut ws: tungstenite::WebSocket<S>, t: &Tally) {
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
}

/// Starts the plaintext (inspected) and TLS (terminated) origins.
fn start_inspect_origins(dir: &std::path::Path, setup: &TlsSetup, t: Arc<Tally>) {
    let r = |name: &str| std::fs::read(dir.join(name)).expect("a --prepare file");
    let t2 = t.clone();
    serve_on(setup.http_port, move |s| {
        let _ = s.set_read_timeout(Some(Duration::from_secs(60)));
        origin_loop(s, None, &t2)
    });
    let chain = vec![
        CertificateDer::from(r("origin-leaf.der")),
        CertificateDer::from(r("origin-ca.der")),
    ];
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(r("origin-key.der")));
    let mut sc = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .expect("origin config");
    sc.alpn_protocols = vec![b"http/1.1".to_vec()];
    let sc = Arc::new(sc);
    let secret = setup.secret.clone();
    serve_on(setup.tls_port, move |s| {
        let _ = s.set_read_timeout(Some(Duration::from_secs(60)));
        let Ok(conn) = rustls::ServerConnection::new(sc.clone()) else {
            return;
        };
        origin_loop(rustls::StreamOwned::new(conn, s), Some(&secret), &t)
    });
}

/// One request on `s`; the answer's status, head and body.
fn exchange<S: Read + Write>(
    s: &mut S,
    req: &str,
    body: &[u8],
) -> io::Result<(u16, String, Vec<u8>)> {
    s.write_all(req.as_bytes())?;
    s.write_all(body)?;
    s.flush()?;
    let head = read_head(s)?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| io::Error::other(format!("bad answer {head:?}")))?;
    let len: usize = header(&head, "content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut b = vec![0u8; len];
    s.read_exact(&mut b)?;
    Ok((status, head, b))
}

/// CONNECT `target` (a name:port) through the proxy.
fn connect_name(proxy: SocketAddr, target: &str) -> io::Result<TcpStream> {
    let mut s = TcpStream::connect(proxy)?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    s.set_write_timeout(Some(Duration::from_secs(60)))?;
    let status = http_connect(&mut s, target)?;
    if status != 200 {
        return Err(io::Error::other(format!("CONNECT answered {status}")));
    }
    Ok(s)
}

/// POSTs hashed both ways; `auth` adds the placeholder.
fn posts<S: Read + Write>(
    s: &mut S,
    host: &str,
    auth: Option<&str>,
    n: u64,
    rng: &mut Gen,
    t: &Tally,
) -> bool {
    for _ in 0..n {
        let seed = rng.next() >> 1;
        let len = rng.range(1, 256 * 1024) as usize;
        let data = payload(seed, len);
        let auth = auth.map_or(String::new(), |p| format!("Authorization: Bearer {p}\r\n"));
        let req = format!(
            "POST /data/{seed} HTTP/1.1\r\nHost: {host}\r\n{auth}Content-Length: {len}\r\n\r\n"
        );
        match exchange(s, &req, &data) {
            Ok((200, _, b)) if sha(&b) == sha(&payload(seed ^ 1, len)) => {
                t.ok.fetch_add(1, SeqCst);
                t.bytes.fetch_add(2 * len as u64, SeqCst);
            }
            Ok((status, _, _)) => {
                t.error(&format!("inspected POST answered {status} or a bad body"));
                t.lost.fetch_add(2, SeqCst);
                return false;
            }
            Err(e) => {
                t.error(&format!("inspected POST: {}", e.kind()));
                t.lost.fetch_add(2, SeqCst);
                return false;
            }
        }
    }
    true
}

/// A request a rule refuses: 403 expected.
fn refused<S: Read + Write>(s: &mut S, host: &str, t: &Tally) {
    let req = format!("GET /admin/soak HTTP/1.1\r\nHost: {host}\r\n\r\n");
    match exchange(s, &req, &[]) {
        Ok((403, _, _)) => t.refused_ok.fetch_add(1, SeqCst),
        _ => t.refused_wrong.fetch_add(1, SeqCst),
    };
}

/// An inspected plaintext HTTP tunnel.
fn inspected_session(proxy: SocketAddr, setup: &TlsSetup, rng: &mut Gen, t: &Tally) {
    let host = format!("127.0.0.1:{}", setup.http_port);
    let mut s = match connect_name(proxy, &host) {
        Ok(s) => s,
        Err(e) => {
            t.error(&format!("inspected tunnel setup: {}", e.kind()));
            t.lost.fetch_add(1, SeqCst);
            return;
        }
    };
    let n = rng.range(1, 8);
    if posts(&mut s, &host, None, n, rng, t) && rng.next() % 2 == 0 {
        refused(&mut s, &host, t);
    }
    t.inspected_sessions.fetch_add(1, SeqCst);
}

fn tls_to(
    proxy: SocketAddr,
    setup: &TlsSetup,
    name: &str,
) -> io::Result<rustls::StreamOwned<rustls::ClientConnection, TcpStream>> {
    let tcp = connect_name(proxy, &format!("{name}:{}", setup.tls_port))?;
    let sn = ServerName::try_from(name.to_owned()).map_err(io::Error::other)?;
    let conn = rustls::ClientConnection::new(setup.client.clone(), sn).map_err(io::Error::other)?;
    Ok(rustls::StreamOwned::new(conn, tcp))
}

/// A terminated TLS session to `localhost`: POSTs carrying the placeholder,
/// then a refusal, a WebSocket, or nothing.
fn terminated_session(
    proxy: SocketAddr,
    setup: &TlsSetup,
    deadline: Instant,
    rng: &mut Gen,
    t: &Tally,
) {
    let host = format!("localhost:{}", setup.tls_port);
    let mut s = match tls_to(proxy, setup, "localhost") {
        Ok(s) => s,
        Err(e) => {
            t.error(&format!("terminated tunnel setup: {}", e.kind()));
            t.lost.fetch_add(1, SeqCst);
            return;
        }
    };
    let n = rng.range(1, 6);
    t.terminated_sessions.fetch_add(1, SeqCst);
    if !posts(&mut s, &host, Some(&setup.placeholder), n, rng, t) {
        return;
    }
    match rng.next() % 3 {
        0 => refused(&mut s, &host, t),
        1 => {
            let until = (Instant::now() + Duration::from_secs(rng.range(2, 15))).min(deadline);
            let url = format!("wss://{host}/ws");
            // The upgrade request carries the placeholder too (checked).
            let mut req = tungstenite::client::IntoClientRequest::into_client_request(url.as_str())
                .expect("request");
            req.headers_mut().insert(
                "authorization",
                format!("Bearer {}", setup.placeholder).parse().unwrap(),
            );
            match tungstenite::client::client(req, s) {
                Ok((ws, _)) => {
                    t.tls_ws_sessions.fetch_add(1, SeqCst);
                    ws_messages(ws, until, rng, t);
                }
                Err(e) => {
                    t.error(&format!("ws in TLS handshake: {e}"));
                    t.lost.fetch_add(1, SeqCst);
                }
            }
            return;
        }
        _ => {}
    }
    s.conn.send_close_notify();
    let _ = s.flush();
}

/// Messages echoed and checked until `until`.
fn ws_messages<S: Read + Write>(
    mut sock: tungstenite::WebSocket<S>,
    until: Instant,
    rng: &mut Gen,
    t: &Tally,
) {
    while Instant::now() < until {
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

/// The placeholder bound for `127.0.0.1` (terminated, not in the secret's
/// hosts): `403` with `X-Proxy-Error: secret-not-allowed`.
fn secret_elsewhere(proxy: SocketAddr, setup: &TlsSetup, t: &Tally) {
    let host = format!("127.0.0.1:{}", setup.tls_port);
    let r = tls_to(proxy, setup, "127.0.0.1").and_then(|mut s| {
        let req = format!(
            "GET /data/0 HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {}\r\n\r\n",
            setup.placeholder
        );
        exchange(&mut s, &req, &[])
    });
    match r {
        Ok((403, head, _))
            if header(&head, "x-proxy-error")
                .is_some_and(|v| v.starts_with("secret-not-allowed")) =>
        {
            t.secret_refused_ok.fetch_add(1, SeqCst)
        }
        Ok((status, _, _)) => {
            t.error(&format!("placeholder elsewhere answered {status}"));
            t.refused_wrong.fetch_add(1, SeqCst)
        }
        Err(e) => {
            t.error(&format!("placeholder elsewhere: {}", e.kind()));
            t.refused_wrong.fetch_add(1, SeqCst)
        }
    };
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
    let setup = args.work.as_deref().map(|dir| {
        let secret = std::env::var("SOAK_SECRET")
            .unwrap_or_else(|_| usage("--work needs the secret's value in SOAK_SECRET"));
        let placeholder = args
            .placeholder
            .clone()
            .unwrap_or_else(|| usage("--work needs --placeholder"));
        let setup = load_setup(dir, placeholder, secret);
        start_inspect_origins(dir, &setup, t.clone());
        setup
    });
    let start = Instant::now();
    let deadline = start + args.duration;
    eprintln!(
        "soak: {:?} through {} (transfer upstream {up}, websocket upstream {ws})",
        args.duration, args.proxy
    );

    // Sample the proxy's fds and RSS.
    let stop = Arc::new(AtomicBool::new(false));
    let (fd_hwm, rss_hwm) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    // RSS samples (time since start, KiB) for the flatness check.
    let rss_samples = Arc::new(std::sync::Mutex::new(Vec::<(Duration, u64)>::new()));
    let sampler = args.pid.map(|pid| {
        let (stop, f, r) = (stop.clone(), fd_hwm.clone(), rss_hwm.clone());
        let samples = rss_samples.clone();
        thread::spawn(move || {
            while !stop.load(SeqCst) {
                if let Some(n) = proc_fds(pid) {
                    f.fetch_max(n, SeqCst);
                }
                if let Some(n) = proc_rss_kib(pid) {
                    r.fetch_max(n, SeqCst);
                    samples.lock().unwrap().push((start.elapsed(), n));
                }
                thread::sleep(Duration::from_millis(250));
            }
        })
    });
    // Reloads while traffic flows: SIGHUP every few seconds.
    let reloader = args.pid.filter(|_| args.reload_every > 0).map(|pid| {
        let (stop, t, every) = (stop.clone(), t.clone(), args.reload_every);
        thread::spawn(move || {
            let mut next = Instant::now() + Duration::from_secs(every);
            while !stop.load(SeqCst) && Instant::now() + Duration::from_secs(every) < deadline {
                thread::sleep(Duration::from_millis(100));
                if Instant::now() >= next {
                    next += Duration::from_secs(every);
                    let r = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid as i32),
                        nix::sys::signal::Signal::SIGHUP,
                    );
                    match r {
                        Ok(()) => t.reloads.fetch_add(1, SeqCst),
                        Err(_) => {
                            t.error("SIGHUP failed");
                            0
                        }
                    };
                }
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
    if let Some(setup) = &setup {
        for w in 0..6u64 {
            let (t, setup) = (t.clone(), setup.clone());
            workers.push(thread::spawn(move || {
                let mut rng = Gen::new(0x1a5e_0000 + w);
                for i in 0..10_000_000u64 {
                    if Instant::now() >= deadline {
                        break;
                    }
                    match w % 3 {
                        0 => inspected_session(proxy, &setup, &mut rng, &t),
                        1 => terminated_session(proxy, &setup, deadline, &mut rng, &t),
                        // Mostly terminated sessions; every fourth a placeholder elsewhere.
                        _ if i % 4 == 0 => secret_elsewhere(proxy, &setup, &t),
                        _ => terminated_session(proxy, &setup, deadline, &mut rng, &t),
                    }
                    thread::sleep(Duration::from_millis(rng.range(5, 50)));
                }
            }));
        }
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
    if let Some(r) = reloader {
        let _ = r.join();
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
    if setup.is_some() {
        println!(
            "inspected/terminated: {} inspected HTTP tunnels, {} terminated TLS sessions \
             ({} WebSockets inside TLS), {} requests refused by a rule as expected, {} not, \
             {} secrets injected, {} wrong at the origin, {} placeholders refused elsewhere \
             (secret-not-allowed), {} SIGHUP reloads sent",
            t.inspected_sessions.load(SeqCst),
            t.terminated_sessions.load(SeqCst),
            t.tls_ws_sessions.load(SeqCst),
            t.refused_ok.load(SeqCst),
            t.refused_wrong.load(SeqCst),
            t.secret_ok.load(SeqCst),
            t.secret_wrong.load(SeqCst),
            t.secret_refused_ok.load(SeqCst),
            t.reloads.load(SeqCst),
        );
    }
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
    let mut failed = false;
    if let (Some(log), true) = (args.log.as_deref(), t.reloads.load(SeqCst) > 0) {
        let logged = std::fs::read_to_string(log)
            .map(|l| l.lines().filter(|l| l.contains("policy reloaded:")).count())
            .unwrap_or(0) as u64;
        let sent = t.reloads.load(SeqCst);
        println!("reloads: {sent} SIGHUP sent, {logged} logged as `policy reloaded:`");
        // Two signals pending at once coalesce; 3 s apart, that is rare.
        if logged == 0 || 2 * logged < sent {
            eprintln!("soak: reloads were not applied (a reload failed or the loop stalled)");
            failed = true;
        }
    }
    if args.pid.is_some() {
        failed |= !rss_flat(&rss_samples.lock().unwrap(), args.rss_slack_kib);
    }
    let lost = t.lost.load(SeqCst);
    let wrong =
        t.denied_wrong.load(SeqCst) + t.refused_wrong.load(SeqCst) + t.secret_wrong.load(SeqCst);
    if wrong > 0 {
        // Not payloads, so not in `lost`; still failures.
        eprintln!("soak: {wrong} refusals or injections were not as expected");
        failed = true;
    }
    if setup.is_some() && (t.secret_ok.load(SeqCst) == 0 || t.secret_refused_ok.load(SeqCst) == 0) {
        eprintln!("soak: no secret injected intact, or no placeholder refused elsewhere");
        failed = true;
    }
    println!("lost: {lost}");
    let _ = io::stdout().flush();
    if lost > 0 || failed {
        std::process::exit(1);
    }
}

/// Memory is flat when the RSS high-water mark of the run's last third is
/// at most that of its first third plus the slack (`slack_kib`, else the
/// larger of 4 MiB and a quarter of the first third's mark; the first third
/// holds the warm-up: buffers, TLS state, the allocator's arenas). Prints
/// the verdict; false when RSS grew beyond the slack.
fn rss_flat(samples: &[(Duration, u64)], slack_kib: Option<u64>) -> bool {
    let Some(&(end, _)) = samples.last() else {
        println!("rss: no samples");
        return true;
    };
    let third = end / 3;
    let hwm = |keep: &dyn Fn(Duration) -> bool| {
        samples
            .iter()
            .filter(|(at, _)| keep(*at))
            .map(|&(_, kib)| kib)
            .max()
            .unwrap_or(0)
    };
    let first = hwm(&|at| at <= third);
    let last = hwm(&|at| at >= end - third);
    let slack_kib = slack_kib.unwrap_or((first / 4).max(4096));
    let flat = last <= first + slack_kib;
    println!(
        "rss: first third {first} KiB, last third {last} KiB (high-water marks; slack {slack_kib} KiB): {}",
        if flat { "flat" } else { "GREW" }
    );
    flat
}
