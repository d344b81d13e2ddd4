//! Graceful shutdown. SIGTERM/SIGINT (or `ProxyHandle::shutdown`): listeners
//! close at once (new connects are refused), open sessions may finish for up
//! to `timeouts.drain`, the rest are closed with reason `shutdown`, and the
//! binary exits 0. A second signal exits at once. `shutdown_now` closes
//! everything at once.

use crate::load;
use crate::support;

use std::io::{self, Read};
use std::net::{SocketAddr, TcpStream};
use std::process::ExitStatus;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use load::*;
use nix::sys::signal::Signal;
use portcullis::{CloseReason, SpawnedProxy};
use support::*;

/// Waits (bounded) until connecting to `addr` is refused: the listener is closed.
#[track_caller]
fn wait_refused(addr: SocketAddr, what: &str) {
    let mut last = None;
    let ok = wait_until(PROMPTLY, || match TcpStream::connect(addr) {
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => true,
        other => {
            last = Some(format!("{other:?}"));
            false
        }
    });
    assert!(ok, "{what}: connects still succeed: {last:?}");
}

/// Waits for a child to exit within `within`.
#[track_caller]
fn wait_exit(proxy: &mut ChildProxy, within: Duration) -> ExitStatus {
    let mut status = None;
    let ok = wait_until(within, || {
        status = proxy.child.try_wait().expect("try_wait");
        status.is_some()
    });
    assert!(
        ok,
        "the binary did not exit within {within:?}; log: {:?}",
        proxy.log()
    );
    status.unwrap()
}

fn child_with_drain(echo: &Server, drain: &str) -> (ChildProxy, TempDir) {
    let dir = TempDir::new("shutdown");
    let config = write_file(
        &dir,
        "drain.toml",
        &format!("[timeouts]\ndrain = \"{drain}\"\nclose = \"1s\"\n"),
    );
    let proxy = ChildProxy::start(&["--config", &config, "--allow", &echo.target()]);
    (proxy, dir)
}

#[test]
fn sigterm_drains_then_closes_at_the_drain_timeout() {
    let echo = echo_server();
    let (mut proxy, _dir) = child_with_drain(&echo, "2s");
    let mut t = connect_via_http(proxy.addr, &echo.target());
    assert_echo(&mut t, b"before");

    signal(proxy.pid(), Signal::SIGTERM);
    wait_refused(proxy.addr, "after SIGTERM");
    // Draining: the open tunnel still relays.
    assert_echo(&mut t, b"during the drain");
    assert!(
        proxy.child.try_wait().unwrap().is_none(),
        "the binary exited although a tunnel was open and the drain timeout (2s) has not passed"
    );
    // The tunnel stays open; the drain timeout closes it and the process exits 0.
    let rest = expect_closed_within(&mut t, Duration::from_secs(2) + PROMPTLY);
    assert!(rest.is_empty(), "{rest:?}");
    let status = wait_exit(&mut proxy, PROMPTLY);
    assert_eq!(
        status.code(),
        Some(0),
        "exit status after a drain: {status}"
    );
}

#[test]
fn sigterm_exits_as_soon_as_the_last_session_finishes() {
    let echo = echo_server();
    // A drain timeout far beyond the waits below: only the session's end can end the process.
    let (mut proxy, _dir) = child_with_drain(&echo, "60s");
    let mut t = connect_via_http(proxy.addr, &echo.target());
    assert_echo(&mut t, b"before");

    signal(proxy.pid(), Signal::SIGINT);
    wait_refused(proxy.addr, "after SIGINT");
    assert_echo(&mut t, b"finishing up");
    drop(t);
    let status = wait_exit(&mut proxy, PROMPTLY);
    assert_eq!(status.code(), Some(0), "exit status: {status}");
}

#[test]
fn second_sigterm_during_the_drain_exits_at_once() {
    let echo = echo_server();
    let (mut proxy, _dir) = child_with_drain(&echo, "60s");
    let mut t = connect_via_http(proxy.addr, &echo.target());
    assert_echo(&mut t, b"before");

    signal(proxy.pid(), Signal::SIGTERM);
    wait_refused(proxy.addr, "after the first SIGTERM");
    assert_echo(&mut t, b"draining");
    assert!(proxy.child.try_wait().unwrap().is_none());

    signal(proxy.pid(), Signal::SIGTERM);
    let status = wait_exit(&mut proxy, PROMPTLY);
    eprintln!("second SIGTERM: exit status {status}");
    expect_closed(&mut t, "the tunnel after the process exited");
}

fn spawn_with_drain(echo: &Server, drain: Duration) -> SpawnedProxy {
    spawn(
        proxy_builder(allow_ports(&[echo.port()])).timeouts(timeouts(|t| {
            t.drain = drain;
        })),
    )
}

/// Joins the reactor thread in the background; the receiver yields its result.
fn join_in_background(proxy: SpawnedProxy) -> mpsc::Receiver<io::Result<()>> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(proxy.join());
    });
    rx
}

#[test]
fn library_shutdown_drains_open_tunnels() {
    let echo = echo_server();
    let proxy = spawn_with_drain(&echo, Duration::from_secs(60));
    let p = proxy_addr(&proxy);
    let handle = proxy.handle();
    let mut t = connect_via_http(p, &echo.target());
    assert_echo(&mut t, b"before");

    handle.shutdown();
    let joined = join_in_background(proxy);
    wait_refused(p, "after shutdown()");
    assert_echo(&mut t, b"during the drain");
    assert!(
        joined.try_recv().is_err(),
        "the reactor stopped while a tunnel was draining"
    );
    drop(t);
    joined
        .recv_timeout(PROMPTLY)
        .expect("the reactor did not stop once the last tunnel closed")
        .expect("reactor result");
    let st = handle.stats();
    assert_eq!(st.closed.get(CloseReason::Shutdown), 0, "{st}");
    assert_eq!(st.closed.total(), 1, "{st}");
    assert_eq!(st.open.total(), 0, "{st}");
}

#[test]
fn library_shutdown_closes_what_is_left_at_the_drain_timeout() {
    let echo = echo_server();
    let proxy = spawn_with_drain(&echo, Duration::from_secs(1));
    let p = proxy_addr(&proxy);
    let handle = proxy.handle();
    let mut t = connect_via_http(p, &echo.target());
    assert_echo(&mut t, b"before");

    handle.shutdown();
    let joined = join_in_background(proxy);
    assert_echo(&mut t, b"during the drain");
    expect_closed_within(&mut t, Duration::from_secs(1) + PROMPTLY);
    joined
        .recv_timeout(PROMPTLY)
        .expect("the reactor did not stop after the drain timeout")
        .expect("reactor result");
    let st = handle.stats();
    assert_eq!(st.closed.get(CloseReason::Shutdown), 1, "{st}");
    assert_eq!(st.open.total(), 0, "{st}");
}

#[test]
fn library_shutdown_now_closes_at_once() {
    let echo = echo_server();
    // With a long drain, only shutdown_now can close the tunnel within the waits below.
    let proxy = spawn_with_drain(&echo, Duration::from_secs(60));
    let p = proxy_addr(&proxy);
    let handle = proxy.handle();
    let mut t = connect_via_http(p, &echo.target());
    assert_echo(&mut t, b"before");

    handle.shutdown_now();
    let joined = join_in_background(proxy);
    expect_closed(&mut t, "a tunnel after shutdown_now()");
    joined
        .recv_timeout(PROMPTLY)
        .expect("the reactor did not stop after shutdown_now()")
        .expect("reactor result");
    wait_refused(p, "after shutdown_now()");
    let st = handle.stats();
    assert_eq!(st.closed.get(CloseReason::Shutdown), 1, "{st}");
    assert_eq!(st.open.total(), 0, "{st}");
}

/// Reads until the peer closes, bounded by `within`; returns what came first.
#[track_caller]
fn expect_closed_within(s: &mut TcpStream, within: Duration) -> Vec<u8> {
    s.set_read_timeout(Some(within)).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return out,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return out,
            Err(e) => panic!("expected the proxy to close the tunnel within {within:?}: {e}"),
        }
    }
}
