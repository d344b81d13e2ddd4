//! A Unix-domain socket listener: CONNECT and SOCKS5 over it reach a TCP upstream.

use crate::support;

use std::os::unix::net::UnixStream;

use portcullis::{ListenAddr, ListenerProtocol, Proxy};
use support::*;

fn unix_proxy(dir: &TempDir, allow: u16) -> (portcullis::SpawnedProxy, std::path::PathBuf) {
    let path = dir.path().join("proxy.sock");
    let proxy = spawn(
        Proxy::builder()
            .listen(ListenAddr::Unix(path.clone()), ListenerProtocol::Auto)
            .policy(allow_ports(&[allow]))
            .timeouts(test_timeouts()),
    );
    assert_eq!(proxy.local_addrs(), vec![ListenAddr::Unix(path.clone())]);
    assert_eq!(proxy.tcp_addr(), None);
    (proxy, path)
}

#[test]
fn connect_over_unix_socket() {
    let echo = echo_server();
    let dir = TempDir::new("unix");
    let (proxy, path) = unix_proxy(&dir, echo.port());

    let mut s = UnixStream::connect(&path).expect("connect to the unix listener");
    s.set_read_timeout(Some(PROMPTLY)).unwrap();
    let head = http_connect_on(&mut s, &echo.target(), &[]).expect("CONNECT");
    assert_eq!(head.status, 200, "{}", head.raw);
    let data = DataGen::new(5).bytes(256 * 1024);
    assert_echo(&mut s, &data);
    assert_echo(&mut s, b"again");
    drop(s);

    // Denied targets are refused here too.
    let denied = must_not_accept();
    let mut s = UnixStream::connect(&path).unwrap();
    s.set_read_timeout(Some(PROMPTLY)).unwrap();
    let head = http_connect_on(&mut s, &denied.target(), &[]).expect("CONNECT");
    assert_eq!(head.status, 403, "{}", head.raw);
    assert_eq!(denied.accepted(), 0);

    wait_no_open_sessions(&proxy);
    let st = proxy.stats();
    assert_eq!(st.accepted, 2);
    assert_eq!(st.allowed, 1);
    assert_eq!(st.denied, 1);
    assert_eq!(st.bytes_up, 256 * 1024 + 5);
}

#[test]
fn socks5_over_unix_socket() {
    let echo = echo_server();
    let dir = TempDir::new("unix-socks");
    let (proxy, path) = unix_proxy(&dir, echo.port());

    let mut s = UnixStream::connect(&path).unwrap();
    s.set_read_timeout(Some(PROMPTLY)).unwrap();
    socks5_handshake(&mut s, "127.0.0.1", echo.port(), None).expect("SOCKS5 over unix");
    assert_echo(&mut s, b"socks over a unix socket");
    drop(s);
    wait_no_open_sessions(&proxy);
    assert_eq!(proxy.stats().allowed, 1);
}

// ---------------------------------------------------------------------------
// The socket file: its mode, a live socket at the path, and whose file an
// exit removes. These run the binary (umask and signals are per process).

use crate::load;

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::process::CommandExt;
use std::process::Command;

use load::{signal, write_file, NOBODY};

/// The binary with `--listen unix:PATH` (after ChildProxy's TCP listener),
/// `args`, under umask 000: whatever the mode, it is not the umask's.
fn binary_on(path: &std::path::Path, args: &[&str]) -> ChildProxy {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_portcullis"));
    cmd.args(["--listen", "127.0.0.1:0", "--listen"])
        .arg(format!("unix:{}", path.display()))
        .args(args);
    // SAFETY: umask is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::stat::umask(nix::sys::stat::Mode::empty());
            Ok(())
        });
    }
    ChildProxy::start_command(cmd)
}

/// Connects to a Unix socket as `nobody` (fsuid and fsgid 65534 on a fresh
/// thread), so that the file's permissions apply (root bypasses them).
fn connect_as_nobody(path: &std::path::Path) -> std::io::Result<UnixStream> {
    let path = path.to_path_buf();
    std::thread::spawn(move || {
        nix::unistd::setfsgid(nix::unistd::Gid::from_raw(NOBODY));
        nix::unistd::setfsuid(nix::unistd::Uid::from_raw(NOBODY));
        UnixStream::connect(&path)
    })
    .join()
    .unwrap()
}

fn mode_of(path: &std::path::Path) -> (u32, u32) {
    let m = std::fs::symlink_metadata(path).expect("socket file");
    assert!(m.file_type().is_socket());
    (m.mode() & 0o7777, m.gid())
}

#[test]
fn the_socket_file_is_0600_whatever_the_umask_or_as_configured() {
    let dir = TempDir::new("unix-mode");
    let path = dir.path().join("p.sock");
    let proxy = binary_on(&path, &[]);
    assert_eq!(mode_of(&path).0, 0o600, "--listen unix: under umask 000");
    // Only the proxy's own uid may connect: nobody is refused by the file.
    let e = connect_as_nobody(&path).expect_err("nobody must not connect to a 0600 socket");
    assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}");
    UnixStream::connect(&path).expect("the owner connects");
    drop(proxy);

    // mode and group in a [[listen]] table: that group gets in.
    let config = write_file(
        &dir,
        "unix.toml",
        &format!(
            "[[listen]]\naddress = \"127.0.0.1:0\"\n\n\
             [[listen]]\naddress = \"unix:{}\"\nmode = \"0660\"\ngroup = {NOBODY}\n",
            path.display()
        ),
    );
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_portcullis"));
    cmd.args(["--config", &config]);
    // SAFETY: as in binary_on.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
            Ok(())
        });
    }
    let _proxy = ChildProxy::start_command(cmd);
    assert_eq!(mode_of(&path), (0o660, NOBODY), "mode 0660 under umask 077");
    connect_as_nobody(&path).expect("a member of the socket's group connects");
}

/// A TCP address already taken (the default 127.0.0.1:3128 with another
/// portcullis on it, the first thing a new user meets) is refused with the
/// flag that moves the proxy elsewhere.
#[test]
fn a_tcp_address_in_use_is_refused_naming_listen() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_portcullis"))
        .arg("--listen")
        .arg(addr.to_string())
        .env("RUST_LOG", "off")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = ChildGuard(child);
    let exited = wait_until(PROMPTLY, || matches!(child.try_wait(), Ok(Some(_))));
    assert!(exited, "it started on an address in use");
    let out = std::mem::replace(&mut child.0, Command::new("true").spawn().unwrap())
        .wait_with_output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot listen on {addr}"))
            && stderr.contains("another process is listening there")
            && stderr.contains("--listen ADDR:PORT"),
        "{stderr}"
    );
}

#[test]
fn a_live_socket_is_not_taken_over_and_an_exit_removes_only_its_own_file() {
    let dir = TempDir::new("unix-live");
    let path = dir.path().join("p.sock");
    let mut first = binary_on(&path, &[]);

    // A second instance refuses to start while the first is live (and one
    // that takes the path over instead runs on: it is killed and fails the test).
    let second = Command::new(env!("CARGO_BIN_EXE_portcullis"))
        .arg("--listen")
        .arg(format!("unix:{}", path.display()))
        .env("RUST_LOG", "off")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut second = ChildGuard(second);
    let exited = wait_until(PROMPTLY, || matches!(second.try_wait(), Ok(Some(_))));
    assert!(exited, "a second instance started over a live socket");
    let out = std::mem::replace(&mut second.0, Command::new("true").spawn().unwrap())
        .wait_with_output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot start") && stderr.contains("in use"),
        "{stderr}"
    );
    let mut s = UnixStream::connect(&path).expect("the first still serves its path");
    s.set_read_timeout(Some(PROMPTLY)).unwrap();
    socks5_greeting_is_answered(&mut s);
    drop(s);

    // Someone replaces the path (here: this test) while the first runs;
    // the first one's exit must leave the replacement alone.
    std::fs::remove_file(&path).unwrap();
    let theirs = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let ino = std::fs::symlink_metadata(&path).unwrap().ino();
    signal(first.pid(), nix::sys::signal::Signal::SIGTERM);
    assert!(first.child.wait().unwrap().success());
    assert_eq!(std::fs::symlink_metadata(&path).unwrap().ino(), ino);
    UnixStream::connect(&path).expect("the replacement is still there");
    drop(theirs);

    // Now stale (nobody listens): a new instance replaces it, and its exit
    // removes its own file.
    let mut third = binary_on(&path, &[]);
    // It serves the path (an inode number may be reused, so that says nothing).
    let mut s = UnixStream::connect(&path).expect("the third serves the path");
    s.set_read_timeout(Some(PROMPTLY)).unwrap();
    socks5_greeting_is_answered(&mut s);
    drop(s);
    signal(third.pid(), nix::sys::signal::Signal::SIGTERM);
    assert!(third.child.wait().unwrap().success());
    assert!(!path.exists(), "its own socket file is removed at exit");
}

/// The proxy answers a SOCKS5 greeting (no auth) with `[5, 0]`.
fn socks5_greeting_is_answered(s: &mut UnixStream) {
    use std::io::{Read, Write};
    s.write_all(&[5, 1, 0]).unwrap();
    let mut answer = [0u8; 2];
    s.read_exact(&mut answer).unwrap();
    assert_eq!(answer, [5, 0]);
}
