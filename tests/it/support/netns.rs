//! Public addresses on a private loopback, and names of the test's own.
//!
//! Policy treats loopback and private ranges specially (a name rule does
//! not open them), so the composition of a wildcard or a CIDR allow with an
//! inspecting name rule is only visible at a public address. [`in_netns`]
//! runs a test on a thread of its own in a new network namespace whose `lo`
//! carries such addresses (a network namespace is per thread: sockets and
//! children made on that thread live in it), and [`ChildProxy::with_hosts`]
//! starts the binary in a mount namespace where `/etc/hosts` is the test's
//! file, so names resolve to those addresses. Nothing outside changes.
//!
//! These need root (the tests run as root: see `client_identity.rs`). Where
//! namespaces cannot be had, set `PORTCULLIS_TEST_NO_NAMESPACES=1` to skip
//! them (as `run.rs` does); otherwise a failure to make one fails the test.

use std::path::Path;
use std::process::Command;

use super::child::ChildProxy;

/// Runs `f` on a new thread inside a new network namespace whose loopback
/// is up and also carries each of `addrs` (`45.45.45.45`). Returns `None`,
/// having said why, when `PORTCULLIS_TEST_NO_NAMESPACES` is set.
pub fn in_netns<T: Send + 'static>(
    addrs: &[&str],
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    if std::env::var_os("PORTCULLIS_TEST_NO_NAMESPACES").is_some() {
        eprintln!("PORTCULLIS_TEST_NO_NAMESPACES is set: skipped (needs a network namespace)");
        return None;
    }
    let addrs: Vec<String> = addrs.iter().map(|a| a.to_string()).collect();
    let t = std::thread::spawn(move || {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).unwrap_or_else(|e| {
            panic!(
                "unshare(CLONE_NEWNET): {e}; this test needs root and network namespaces \
                 (set PORTCULLIS_TEST_NO_NAMESPACES=1 only where there are none)"
            )
        });
        ip(&["link", "set", "lo", "up"]);
        for a in &addrs {
            let prefix = if a.contains(':') { "128" } else { "32" };
            ip(&["addr", "add", &format!("{a}/{prefix}"), "dev", "lo"]);
        }
        f()
    });
    match t.join() {
        Ok(v) => Some(v),
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// Runs `ip ARGS` (iproute2) in the calling thread's network namespace.
fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run `ip` ({e}); this test needs iproute2"));
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl ChildProxy {
    /// Starts the binary (`--listen 127.0.0.1:0` plus `args`) in a mount
    /// namespace of its own where `hosts` is bind-mounted over `/etc/hosts`:
    /// its resolver sees the test's names, nothing else does.
    pub fn with_hosts(hosts: &Path, args: &[&str]) -> ChildProxy {
        let mut cmd = Command::new("unshare");
        // unshare and sh exec in turn: the pid is the binary's.
        cmd.args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(r#"mount --bind "$0" /etc/hosts && exec "$@""#)
            .arg(hosts)
            .arg(env!("CARGO_BIN_EXE_portcullis"))
            .args(["--listen", "127.0.0.1:0"])
            .args(args);
        ChildProxy::start_command(cmd)
    }
}

/// Runs `make` on a thread in a second network namespace joined to the
/// calling thread's (itself in [`in_netns`]) by a veth pair: `here` (CIDR)
/// on this side, `there` on the other. What `make` builds (a server bound
/// on `there`'s address) lives there, so its address is not one of the
/// proxy's own (srt refuses those for allowed names).
pub fn across_veth<T: Send + 'static>(
    here: &str,
    there: &str,
    make: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let there = there.to_owned();
    let peer = std::thread::spawn(move || {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).expect("unshare(CLONE_NEWNET)");
        tid_tx.send(nix::unistd::gettid().as_raw()).unwrap();
        go_rx.recv().unwrap();
        ip(&["link", "set", "lo", "up"]);
        ip(&["addr", "add", &there, "dev", "pc-vb"]);
        ip(&["link", "set", "pc-vb", "up"]);
        make()
    });
    let tid = tid_rx.recv().expect("the peer namespace's thread");
    let ns = format!("/proc/{tid}/ns/net");
    ip(&[
        "link", "add", "pc-va", "type", "veth", "peer", "name", "pc-vb", "netns", &ns,
    ]);
    ip(&["addr", "add", here, "dev", "pc-va"]);
    ip(&["link", "set", "pc-va", "up"]);
    go_tx.send(()).unwrap();
    match peer.join() {
        Ok(v) => v,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}
