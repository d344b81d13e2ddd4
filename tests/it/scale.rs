//! Scale: 9,000 concurrent tunnels through the binary, all at once, each
//! echoing a message; the proxy spends at most two fds per tunnel and idle
//! tunnels hold no relay buffers (RSS per idle tunnel is small).
//!
//! The test process holds the 9,000 client sockets and, in a mio echo server
//! on one thread, the 9,000 upstream sockets: it raises its own soft
//! RLIMIT_NOFILE to the hard limit (the binary does the same for itself).

use crate::load;
use crate::support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use load::*;
use support::*;

const TUNNELS: usize = 9_000;
const BATCH: usize = 250;

#[test]
#[ignore = "stress: scripts/stress.sh runs it"]
fn nine_thousand_concurrent_tunnels() {
    let limit = raise_own_nofile();
    // Both ends of every tunnel live in this process; the proxy holds two
    // fds per tunnel and keeps its fd reserve and splice pipes (about 1/32
    // plus 1,024 fds) out of reach of sessions.
    const NEEDED: u64 = 19_700;
    assert!(
        limit >= NEEDED,
        "this test needs a hard RLIMIT_NOFILE of at least {NEEDED} ({TUNNELS} tunnels, two fds each, plus the proxy's fd reserve); it is {limit}",
    );
    let echo = MioEcho::start();
    let dir = TempDir::new("scale");
    let config = write_file(
        &dir,
        "scale.toml",
        "[limits]\n\
         max_sessions = 20000\n\
         max_sessions_per_client = 20000\n\
         max_pending_handshakes = 20000\n\
         max_pending_handshakes_per_client = 20000\n\
         [timeouts]\n\
         handshake = \"30s\"\n\
         connect = \"30s\"\n\
         close = \"1s\"\n",
    );
    let proxy = ChildProxy::start(&["--config", &config, "--allow", &echo.target()]);
    assert!(
        proxy.log().iter().any(|l| l.contains("open file limit")),
        "the binary logged no `open file limit` line: {:?}",
        proxy.log()
    );

    // Warm up once, so the baseline includes whatever the first session allocates.
    let mut w = connect_via_http(proxy.addr, &echo.target());
    assert_echo(&mut w, b"warm up");
    drop(w);
    wait_for("the warm-up session to close", PROMPTLY, || {
        stat(&proxy.stats(), "open") == 0
    });
    let base = baseline(&proxy);

    let started = Instant::now();
    let mut tunnels: Vec<TcpStream> = Vec::with_capacity(TUNNELS);
    let request = format!(
        "CONNECT {t} HTTP/1.1\r\nHost: {t}\r\n\r\n",
        t = echo.target()
    );
    while tunnels.len() < TUNNELS {
        let n = BATCH.min(TUNNELS - tunnels.len());
        let first = tunnels.len();
        for i in 0..n {
            let mut s = TcpStream::connect(proxy.addr)
                .unwrap_or_else(|e| panic!("connect #{}: {e}", first + i));
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            s.write_all(request.as_bytes()).expect("send CONNECT");
            tunnels.push(s);
        }
        for (i, s) in tunnels[first..].iter_mut().enumerate() {
            let head = read_response_head(s)
                .unwrap_or_else(|e| panic!("tunnel #{}: no CONNECT answer: {e}", first + i));
            assert_eq!(head.status, 200, "tunnel #{}: {}", first + i, head.raw);
        }
        for (i, s) in tunnels[first..].iter_mut().enumerate() {
            s.write_all(format!("hello {:>10}\n", first + i).as_bytes())
                .expect("send echo");
        }
        for (i, s) in tunnels[first..].iter_mut().enumerate() {
            let want = format!("hello {:>10}\n", first + i);
            let mut back = vec![0u8; want.len()];
            s.read_exact(&mut back)
                .unwrap_or_else(|e| panic!("tunnel #{}: echo: {e}", first + i));
            assert_eq!(back, want.as_bytes(), "tunnel #{}", first + i);
        }
    }
    let opened_in = started.elapsed();

    let st = proxy.stats();
    assert_eq!(stat(&st, "established"), TUNNELS as u64, "{st:?}");
    assert_eq!(stat(&st, "open"), TUNNELS as u64, "{st:?}");
    assert_eq!(echo.open.load(std::sync::atomic::Ordering::SeqCst), TUNNELS);
    let fds = proxy.fds();
    assert!(
        fds <= base.fds + 2 * TUNNELS + 16,
        "the proxy holds {fds} fds for {TUNNELS} tunnels (baseline {}): more than two per tunnel",
        base.fds
    );
    let rss = rss_kib(proxy.pid());
    let per_tunnel = (rss.saturating_sub(base.rss_kib) as f64 * 1024.0) / TUNNELS as f64;
    eprintln!(
        "scale: {TUNNELS} tunnels opened and echoed in {opened_in:?}; proxy fds {fds} (baseline {}), \
         RSS {rss} KiB (baseline {} KiB): {per_tunnel:.0} bytes per idle tunnel",
        base.fds, base.rss_kib
    );
    assert!(
        per_tunnel < 64.0 * 1024.0,
        "{per_tunnel:.0} bytes of RSS per idle tunnel: idle tunnels should hold no relay buffers"
    );

    // Every tunnel still works with all of them open.
    for (i, s) in tunnels.iter_mut().enumerate().step_by(97) {
        assert_echo(s, format!("still here {i}").as_bytes());
    }

    drop(tunnels);
    assert_back_to_baseline(
        &proxy,
        base,
        Duration::from_secs(30),
        32 * 1024,
        "after closing every tunnel",
    );
    wait_for("the upstream side to close", PROMPTLY, || {
        echo.open.load(std::sync::atomic::Ordering::SeqCst) == 0
    });
    eprintln!("scale: total {:?}", started.elapsed());
}
