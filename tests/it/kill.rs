//! A peer SIGKILLed mid-stream: the proxy (a child process, so its fds are
//! its own) must release every descriptor, report no open sessions, and go
//! quiet (no reactor wakeups while idle).
//!
//! python3 plays the killed peer; if it is missing these tests fail.

use crate::support;

use std::io::{Read, Write};
use std::net::Shutdown;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::thread;
use std::time::Duration;

use portcullis::CloseReason;
use support::*;

/// argv: proxy_port target. CONNECTs, prints "ready", then streams both ways forever.
const PY_CLIENT: &str = r#"
import socket, sys, threading
port, target = int(sys.argv[1]), sys.argv[2]
s = socket.create_connection(("127.0.0.1", port))
s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
head = b""
while not head.endswith(b"\r\n\r\n"):
    c = s.recv(1)
    if not c:
        print("eof during CONNECT", flush=True)
        sys.exit(2)
    head += c
if head.split(b" ")[1] != b"200":
    print("refused: %r" % head, flush=True)
    sys.exit(3)
def drain():
    while s.recv(65536):
        pass
threading.Thread(target=drain, daemon=True).start()
print("ready", flush=True)
buf = b"c" * 65536
while True:
    s.sendall(buf)
"#;

/// Listens on 127.0.0.1:0, prints the port, and streams both ways forever
/// with the first connection.
const PY_UPSTREAM: &str = r#"
import socket, threading
l = socket.socket()
l.bind(("127.0.0.1", 0))
l.listen(8)
print(l.getsockname()[1], flush=True)
c, _ = l.accept()
def drain():
    while c.recv(65536):
        pass
threading.Thread(target=drain, daemon=True).start()
buf = b"u" * 65536
while True:
    c.sendall(buf)
"#;

const MIB: u64 = 1 << 20;

/// These tests stream flat out until the kill; run them one at a time so a
/// neighbour's load never eats into another's bounded waits.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// An in-process upstream that streams to each connection and counts what it reads.
struct StreamingUpstream {
    server: Server,
    received: Arc<AtomicU64>,
    finished: Arc<AtomicBool>,
}

fn streaming_upstream() -> StreamingUpstream {
    let received = Arc::new(AtomicU64::new(0));
    let finished = Arc::new(AtomicBool::new(false));
    let (r, f) = (received.clone(), finished.clone());
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
        let buf = vec![b'u'; 64 * 1024];
        while s.write_all(&buf).is_ok() {}
        let _ = reader.join();
        f.store(true, Ordering::SeqCst);
    });
    StreamingUpstream {
        server,
        received,
        finished,
    }
}

/// After the kill: fds back to baseline, no open sessions, and a quiet reactor.
fn assert_released(proxy: &ChildProxy, baseline: usize) {
    let ok = wait_until(Duration::from_secs(2), || proxy.fds() == baseline);
    assert!(
        ok,
        "proxy holds {} fds, baseline {baseline}, 2 s after the kill",
        proxy.fds()
    );
    // The fds close inside the reactor's call a moment before the gauges
    // move: a loaded machine can show the one without the other, so wait.
    let closed = wait_until(Duration::from_secs(2), || stat(&proxy.stats(), "open") == 0);
    let s1 = proxy.stats();
    assert!(closed, "open sessions after the kill: {s1:?}");
    // No timer left behind: asleep with no timeout. (SIGUSR1, which the
    // stats come by, is another thread's.)
    let parked = wait_child_parked_for_good(proxy.pid(), proxy.addr);
    let s2 = proxy.stats();
    parked.assert_still_asleep();
    assert_eq!(
        stat(&s1, "wakeups"),
        stat(&s2, "wakeups"),
        "an idle proxy woke up: {s1:?} then {s2:?}"
    );
    assert_eq!(stat(&s2, "open"), 0);
}

#[test]
fn client_killed_mid_stream_releases_everything() {
    let _serial = serial();
    let up = streaming_upstream();
    let proxy = ChildProxy::start(&[
        "--allow",
        &up.server.target(),
        "--handshake-timeout",
        "2s",
        "--close-timeout",
        "1s",
    ]);
    let baseline = proxy.fds();

    let mut client = spawn_python(
        PY_CLIENT,
        &[proxy.addr.port().to_string(), up.server.target()],
    );
    assert_eq!(child_line(&mut client, "python client"), "ready");
    wait_for("the client's data reaching upstream", PROMPTLY, || {
        up.received.load(Ordering::SeqCst) >= MIB
    });
    let before = up.received.load(Ordering::SeqCst);
    wait_for(
        "the tunnel to stream another MiB before the kill",
        PROMPTLY,
        || up.received.load(Ordering::SeqCst) >= before + MIB,
    );
    let s = proxy.stats();
    assert_eq!(stat(&s, "open"), 1, "{s:?}");
    assert!(proxy.fds() > baseline);

    client.kill().expect("SIGKILL the client");
    client.wait().unwrap();

    assert_released(&proxy, baseline);
    wait_for("the upstream connection to end", PROMPTLY, || {
        up.finished.load(Ordering::SeqCst)
    });
    let s = proxy.stats();
    assert_eq!(stat(&s, "closed.client-gone"), 1, "{s:?}");
}

#[test]
fn upstream_killed_mid_stream_releases_everything() {
    let _serial = serial();
    let mut upstream = spawn_python(PY_UPSTREAM, &[]);
    let port: u16 = child_line(&mut upstream, "python upstream")
        .parse()
        .expect("upstream port");
    let target = format!("127.0.0.1:{port}");
    let proxy = ChildProxy::start(&[
        "--allow",
        &target,
        "--handshake-timeout",
        "2s",
        "--close-timeout",
        "1s",
    ]);
    let baseline = proxy.fds();

    let s = connect_via_http(proxy.addr, &target);
    let received = Arc::new(AtomicU64::new(0));
    let (end_tx, end_rx) = mpsc::channel();
    let mut rd = s.try_clone().unwrap();
    let r = received.clone();
    thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        let end = loop {
            match rd.read(&mut buf) {
                Ok(0) => break Ok("EOF"),
                Ok(n) => {
                    r.fetch_add(n as u64, Ordering::SeqCst);
                }
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break Ok("reset"),
                Err(e) => break Err(e.to_string()),
            }
        };
        let _ = end_tx.send(end);
    });
    let mut wr = s.try_clone().unwrap();
    let (wdone_tx, wdone_rx) = mpsc::channel();
    thread::spawn(move || {
        let buf = vec![b'c'; 64 * 1024];
        while wr.write_all(&buf).is_ok() {}
        let _ = wdone_tx.send(());
    });

    wait_for("upstream data reaching the client", PROMPTLY, || {
        received.load(Ordering::SeqCst) >= MIB
    });
    let before = received.load(Ordering::SeqCst);
    wait_for(
        "the tunnel to stream another MiB before the kill",
        PROMPTLY,
        || received.load(Ordering::SeqCst) >= before + MIB,
    );
    let st = proxy.stats();
    assert_eq!(stat(&st, "open"), 1, "{st:?}");

    upstream.kill().expect("SIGKILL the upstream");
    upstream.wait().unwrap();

    let end = end_rx
        .recv_timeout(PROMPTLY)
        .expect("the client saw neither EOF nor reset after the upstream died");
    assert!(end.is_ok(), "client read ended with {end:?}");
    wdone_rx
        .recv_timeout(PROMPTLY)
        .expect("the client's writes kept succeeding after the upstream died");
    let _ = s.shutdown(Shutdown::Both);
    drop(s);

    assert_released(&proxy, baseline);
    let st = proxy.stats();
    assert_eq!(stat(&st, "closed.upstream-gone"), 1, "{st:?}");
}

/// The same client kill against an in-process proxy, checked through the API.
#[test]
fn client_killed_in_process_stats() {
    let _serial = serial();
    let up = streaming_upstream();
    let proxy = start_proxy(allow_ports(&[up.server.port()]));
    let p = proxy_addr(&proxy);

    let mut client = spawn_python(PY_CLIENT, &[p.port().to_string(), up.server.target()]);
    assert_eq!(child_line(&mut client, "python client"), "ready");
    wait_for("the client's data reaching upstream", PROMPTLY, || {
        up.received.load(Ordering::SeqCst) >= MIB
    });
    let before = up.received.load(Ordering::SeqCst);
    wait_for(
        "the tunnel to stream another MiB before the kill",
        PROMPTLY,
        || up.received.load(Ordering::SeqCst) >= before + MIB,
    );
    assert_eq!(proxy.stats().open.established, 1);

    client.kill().expect("SIGKILL the client");
    client.wait().unwrap();

    wait_no_open_sessions(&proxy);
    wait_for("the upstream connection to end", PROMPTLY, || {
        up.finished.load(Ordering::SeqCst)
    });
    let s1 = proxy.stats();
    assert_eq!(s1.closed.get(CloseReason::ClientGone), 1, "{s1}");
    assert_eq!(s1.closed.total(), 1, "{s1}");
    assert!(s1.bytes_up >= MIB && s1.bytes_down > 0, "{s1}");
    let parked = wait_reactor_parked_for_good(p);
    let s2 = proxy.stats();
    parked.assert_still_asleep();
    assert_eq!(
        s1.wakeups, s2.wakeups,
        "an idle proxy woke up: {s1} then {s2}"
    );
    assert_eq!(s2.open.total(), 0);
}
