//! Slowloris: 1,000 connections from 127.0.0.1, each sending its CONNECT
//! head one byte per second. With `max_pending_handshakes_per_client` = 256
//! and a 3 s handshake timeout: the connections past the limit get 503
//! promptly, the pending-handshake gauge never exceeds the limit, the
//! handshake timer closes the slow ones (reason `handshake-timeout`), and a
//! normal client of another uid (`nobody`, from 127.0.0.2) is served throughout.

use crate::load;
use crate::support;

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use load::*;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use portcullis::CloseReason;
use support::*;

const SLOW: usize = 1_000;
const PER_CLIENT: usize = 256;

#[derive(Debug, Clone, PartialEq)]
enum Fate {
    Pending,
    /// Answered 503 with `X-Proxy-Error: limit; max_pending_handshakes_per_client`.
    Refused,
    /// Closed without a 503 (the handshake timer; an answer such as 408 is fine).
    TimedOut(String),
    /// Anything else (wrong answer, error).
    Other(String),
}

struct Slow {
    s: TcpStream,
    sent: usize,
    got: Vec<u8>,
    fate: Fate,
}

#[test]
#[ignore = "stress: scripts/stress.sh runs it"]
fn slowloris_is_held_by_the_pending_handshake_limit_and_timer() {
    raise_own_nofile();
    let echo = echo_server();
    let proxy = spawn(
        proxy_builder(allow_ports(&[echo.port()]))
            .timeouts(timeouts(|t| {
                t.handshake = Duration::from_secs(3);
                // Refusals linger until then: long enough for this test's
                // slow reader of 1,000 sockets to collect every 503.
                t.close = Duration::from_secs(5);
            }))
            .limits(limits(|t| {
                t.max_pending_handshakes = 4 * SLOW;
                t.max_pending_handshakes_per_client = PER_CLIENT;
            })),
    );
    let p = proxy_addr(&proxy);
    let head = format!(
        "CONNECT {t} HTTP/1.1\r\nHost: {t}\r\n\r\n",
        t = echo.target()
    )
    .into_bytes();

    // Watch the pending-handshake gauge the whole time.
    let stop = Arc::new(AtomicBool::new(false));
    let max_pending = Arc::new(AtomicU64::new(0));
    let watcher = {
        let (stop, max_pending, h) = (stop.clone(), max_pending.clone(), proxy.handle());
        thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                max_pending.fetch_max(h.stats().open.handshake, Ordering::SeqCst);
                thread::sleep(Duration::from_millis(2));
            }
        })
    };

    // A normal client of another uid, served throughout the storm.
    let normal = {
        let (stop, target) = (stop.clone(), echo.target());
        thread::spawn(move || -> Result<usize, String> {
            let mut rounds = 0;
            while !stop.load(Ordering::SeqCst) || rounds < 5 {
                let mut s = connect_as(NOBODY, ip("127.0.0.2"), p)
                    .map_err(|e| format!("round {rounds}: connect: {e}"))?;
                s.set_read_timeout(Some(PROMPTLY)).unwrap();
                let head = http_connect_raw(&mut s, &target)
                    .map_err(|e| format!("round {rounds}: CONNECT: {e}"))?;
                if head.status != 200 {
                    return Err(format!("round {rounds}: {}", head.raw));
                }
                let msg = format!("normal client, round {rounds}");
                let back = echo_roundtrip(&mut s, msg.as_bytes())
                    .map_err(|e| format!("round {rounds}: echo: {e}"))?;
                if back != msg.as_bytes() {
                    return Err(format!("round {rounds}: echo corrupted"));
                }
                rounds += 1;
                thread::sleep(Duration::from_millis(200));
            }
            Ok(rounds)
        })
    };

    // The storm: open all, first byte at once, then one byte per second each.
    let mut slow: Vec<Slow> = Vec::with_capacity(SLOW);
    for i in 0..SLOW {
        let mut s = TcpStream::connect(p).unwrap_or_else(|e| panic!("slow #{i}: connect: {e}"));
        s.write_all(&head[..1]).expect("first byte");
        s.set_nonblocking(true).unwrap();
        slow.push(Slow {
            s,
            sent: 1,
            got: Vec::new(),
            fate: Fate::Pending,
        });
    }
    let opened = Instant::now();
    let deadline = opened + Duration::from_secs(3) + 3 * PROMPTLY;
    let mut next_byte = opened + Duration::from_secs(1);
    let mut refused_by = None;
    let mut buf = [0u8; 1024];
    while slow.iter().any(|c| c.fate == Fate::Pending) {
        assert!(
            Instant::now() < deadline,
            "slow connections still open long after the handshake timeout: {}",
            slow.iter().filter(|c| c.fate == Fate::Pending).count()
        );
        for c in slow.iter_mut().filter(|c| c.fate == Fate::Pending) {
            loop {
                match c.s.read(&mut buf) {
                    Ok(0) => {
                        c.fate = judge(&c.got, true);
                        break;
                    }
                    Ok(n) => c.got.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => {
                        // A reset: whatever answer came first decides.
                        c.fate = judge(&c.got, true);
                        break;
                    }
                }
            }
        }
        let refused = slow.iter().filter(|c| c.fate == Fate::Refused).count();
        if refused_by.is_none() && refused >= SLOW - PER_CLIENT {
            refused_by = Some(opened.elapsed());
        }
        if Instant::now() >= next_byte {
            next_byte += Duration::from_secs(1);
            for c in slow.iter_mut().filter(|c| c.fate == Fate::Pending) {
                if c.sent < head.len() && c.s.write_all(&head[c.sent..c.sent + 1]).is_ok() {
                    c.sent += 1;
                }
            }
        }
        // Until a pending connection has something to read (an answer, an
        // EOF, a reset) or its next byte is due.
        let wake = next_byte.min(deadline);
        let mut fds: Vec<PollFd> = slow
            .iter()
            .filter(|c| c.fate == Fate::Pending)
            .map(|c| PollFd::new(c.s.as_fd(), PollFlags::POLLIN))
            .collect();
        let ms = wake.saturating_duration_since(Instant::now()).as_millis();
        match poll(&mut fds, PollTimeout::try_from(ms).unwrap()) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => panic!("poll: {e}"),
        }
    }
    stop.store(true, Ordering::SeqCst);
    watcher.join().unwrap();
    let rounds = normal
        .join()
        .unwrap()
        .unwrap_or_else(|e| panic!("the normal client (nobody, 127.0.0.2) failed: {e}"));

    let refused = slow.iter().filter(|c| c.fate == Fate::Refused).count();
    let timed_out = slow
        .iter()
        .filter(|c| matches!(c.fate, Fate::TimedOut(_)))
        .count();
    let others: Vec<_> = slow
        .iter()
        .enumerate()
        .filter(|(_, c)| matches!(c.fate, Fate::Other(_)))
        .map(|(i, c)| (i, c.fate.clone()))
        .take(5)
        .collect();
    let max_pending = max_pending.load(Ordering::SeqCst);
    eprintln!(
        "slowloris: {refused} refused (all {} refusals by {refused_by:?}), {timed_out} timed out, \
         max pending handshakes {max_pending}, normal client rounds {rounds}",
        SLOW - PER_CLIENT
    );
    assert!(others.is_empty(), "unexpected fates: {others:?}");
    assert!(
        // The gauge is global: the normal client's own handshake may be in
        // it too, so at most one over the per-client limit.
        max_pending <= PER_CLIENT as u64 + 1,
        "pending handshakes reached {max_pending} (limit {PER_CLIENT} per client)"
    );
    // At most PER_CLIENT were ever admitted at once, and every admitted one
    // was closed by the handshake timer; all the others were refused.
    assert!(
        refused >= SLOW - PER_CLIENT,
        "only {refused} of {SLOW} refused with 503 (limit {PER_CLIENT})"
    );
    assert_eq!(refused + timed_out, SLOW);
    assert!(timed_out > 0, "no slow connection was admitted at all");

    wait_for("every slow session closed", PROMPTLY, || {
        let st = proxy.stats();
        // The normal client's last tunnel closes on its own time too.
        st.open.handshake == 0
            && st.open.established == 0
            && st.closed.get(CloseReason::HandshakeTimeout) == timed_out as u64
            && st.closed.get(CloseReason::Limit) == refused as u64
    });
    let st = proxy.stats();
    assert_eq!(st.open.established, 0, "{st}");
}

/// What a closed slow connection was answered.
fn judge(got: &[u8], _closed: bool) -> Fate {
    if got.is_empty() {
        return Fate::TimedOut("closed without an answer".into());
    }
    let text = String::from_utf8_lossy(got);
    let status = text.split(' ').nth(1).unwrap_or_default();
    if status == "503" {
        let limit = text.lines().any(|l| {
            l.to_ascii_lowercase().starts_with("x-proxy-error:")
                && l.contains("limit; max_pending_handshakes_per_client")
        });
        if limit {
            Fate::Refused
        } else {
            Fate::Other(format!("503 without the limit header: {text:?}"))
        }
    } else if status == "408" || status == "400" {
        // An answer to the timeout (408), or to the half head (400), is fine.
        Fate::TimedOut(text.into_owned())
    } else {
        Fate::Other(format!("unexpected answer {text:?}"))
    }
}
