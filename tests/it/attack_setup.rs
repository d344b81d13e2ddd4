//! Attacks on the setup-path changes (audit 11): pins with several
//! workers, level-triggered listeners, lazy TCP_NODELAY, SOCKS5 BND.

use crate::support;

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use support::*;

/// Starts the binary in a mount namespace whose `/etc/hosts` and
/// `/etc/resolv.conf` are `dir`'s (in the caller's network namespace).
fn child_with_dns(dir: &std::path::Path, args: &[&str]) -> ChildProxy {
    let mut cmd = std::process::Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(
            r#"mount --bind "$0/hosts" /etc/hosts && mount --bind "$0/resolv.conf" /etc/resolv.conf && exec "$@""#,
        )
        .arg(dir)
        .arg(env!("CARGO_BIN_EXE_portcullis"))
        .args(["--listen", "127.0.0.1:0"])
        .args(args);
    ChildProxy::start_command(cmd)
}

/// With two workers the memory of inspected names' addresses is shared,
/// but each worker runs its own pin round and re-checks its own sessions
/// only when one of its answers taught the memory something new. After a
/// reload that brings an inspected name, the worker whose answer comes
/// second learns nothing new (the other worker's answer taught the memory
/// first), so its raw tunnels to the newly inspected address stay open.
/// The one pin thread answers the two workers' rounds one after the other,
/// so one of them always learns nothing new. (A client's lookup that a
/// blackholed nameserver never answers holds the client thread meanwhile:
/// pin rounds do not wait for it.)
#[test]
fn a_reload_closes_raw_tunnels_to_a_newly_inspected_address_in_every_worker() {
    in_netns(&[], || {
        let up = echo_server();
        let port = up.port();
        // A nameserver that never answers: lookups of names not in
        // /etc/hosts take the resolver's timeout.
        let _blackhole = std::net::UdpSocket::bind("127.0.0.1:53").unwrap();
        let dir = TempDir::new("pins-workers");
        std::fs::write(dir.0.join("hosts"), "127.0.0.1 localhost\n").unwrap();
        std::fs::write(
            dir.0.join("resolv.conf"),
            "nameserver 127.0.0.1\noptions timeout:2 attempts:1\n",
        )
        .unwrap();
        let cfg = dir.0.join("portcullis.toml");
        let write = |inspect: bool| {
            let api = if inspect {
                format!(
                    "[[rules]]\nname = \"api\"\naction = \"allow\"\nhost = \"localhost\"\n\
                     port = {port}\ninspect = \"http\"\n\n"
                )
            } else {
                String::new()
            };
            let text = format!(
                "[limits]\nworkers = 2\nresolver_threads = 1\n\n{api}\
                 [[rules]]\nname = \"slow\"\naction = \"allow\"\nhost = \"slow.test\"\nport = {port}\n\n\
                 [[rules]]\nname = \"loopback-web\"\naction = \"allow\"\ncidr = \"127.0.0.0/8\"\n\
                 port = {port}\n"
            );
            std::fs::write(&cfg, text).unwrap();
        };
        write(false);
        let proxy = child_with_dns(&dir.0, &["--config", cfg.to_str().unwrap()]);
        let p = proxy.addr;
        // Raw tunnels, spread over both workers by SO_REUSEPORT (32 source
        // ports: all on one worker has odds of 2^-31).
        let mut open: Vec<TcpStream> = (0..32)
            .map(|i| {
                let mut s = connect_via_http(p, &format!("127.0.0.1:{port}"));
                assert_echo(&mut s, format!("raw {i}").as_bytes());
                s
            })
            .collect();
        // Hold the one resolver thread.
        let mut slow = TcpStream::connect(p).unwrap();
        write!(
            slow,
            "CONNECT slow.test:{port} HTTP/1.1\r\nHost: slow.test:{port}\r\n\r\n"
        )
        .unwrap();
        wait_for("the slow lookup to start", PROMPTLY, || {
            proxy.stats().get("resolving").copied().unwrap_or(0) >= 1
                || proxy.log().iter().any(|l| l.contains("slow.test"))
        });
        write(true);
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(proxy.pid() as i32),
            nix::sys::signal::Signal::SIGHUP,
        )
        .unwrap();
        for (i, s) in open.iter_mut().enumerate() {
            s.set_read_timeout(Some(Duration::from_secs(8))).unwrap();
            let r = read_until_closed(s);
            assert!(
                r.is_ok(),
                "raw tunnel {i} to 127.0.0.1 outlived the reload that inspects \
                 localhost: {r:?}; log: {:#?}",
                proxy
                    .log()
                    .iter()
                    .filter(|l| l.contains("re-check"))
                    .collect::<Vec<_>>()
            );
        }
    });
}

/// Pin rounds have a resolver thread of their own. After a reload every
/// allowed connection waits for the round that resolves the inspected
/// names; queued behind a client's lookups that a blackholed nameserver
/// never answers (one client thread, four lookups of two seconds each),
/// the round came after the victim's connect timeout, and a raw tunnel to
/// an address the policy allows got `504`.
#[test]
fn a_clients_slow_lookups_do_not_hold_up_the_pin_round() {
    in_netns(&[], || {
        let up = echo_server();
        let port = up.port();
        let _blackhole = std::net::UdpSocket::bind("127.0.0.1:53").unwrap();
        let dir = TempDir::new("pins-lane");
        // The inspected name lives elsewhere: tunnels to 127.0.0.1 stay raw.
        std::fs::write(dir.0.join("hosts"), "127.0.0.3 api.test\n").unwrap();
        std::fs::write(
            dir.0.join("resolv.conf"),
            "nameserver 127.0.0.1\noptions timeout:2 attempts:1\n",
        )
        .unwrap();
        let cfg = dir.0.join("portcullis.toml");
        std::fs::write(
            &cfg,
            format!(
                "[limits]\nresolver_threads = 1\n\n\
                 [[rules]]\nname = \"api\"\naction = \"allow\"\nhost = \"api.test\"\n\
                 port = {port}\ninspect = \"http\"\n\n\
                 [[rules]]\nname = \"slow\"\naction = \"allow\"\nhost = \"*.slow.test\"\nport = {port}\n\n\
                 [[rules]]\nname = \"loopback-web\"\naction = \"allow\"\ncidr = \"127.0.0.0/8\"\n\
                 port = {port}\n"
            ),
        )
        .unwrap();
        let proxy = child_with_dns(
            &dir.0,
            &["--config", cfg.to_str().unwrap(), "--connect-timeout", "3s"],
        );
        let p = proxy.addr;
        // The first round is done: a raw tunnel goes straight through.
        let mut s = connect_via_http(p, &format!("127.0.0.1:{port}"));
        // A whole line: a lone word on a port an inspecting rule covers
        // could still become a request line, and is waited for.
        assert_echo(&mut s, b"before\n");
        // Four slow lookups queue on the one client thread (8 s in all).
        let slow: Vec<TcpStream> = (0..4)
            .map(|i| {
                let mut s = TcpStream::connect(p).unwrap();
                let host = format!("n{i}.slow.test:{port}");
                write!(s, "CONNECT {host} HTTP/1.1\r\nHost: {host}\r\n\r\n").unwrap();
                s
            })
            .collect();
        wait_for("the slow lookups to queue", PROMPTLY, || {
            let st = proxy.stats();
            st.get("resolving").copied().unwrap_or(0) >= 4
        });
        // A reload starts a new round, which every allowed connection awaits.
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(proxy.pid() as i32),
            nix::sys::signal::Signal::SIGHUP,
        )
        .unwrap();
        wait_for("the reload", PROMPTLY, || {
            proxy.log().iter().any(|l| l.contains("reload"))
        });
        let mut victim = TcpStream::connect(p).unwrap();
        victim
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let head =
            http_connect_on(&mut victim, &format!("127.0.0.1:{port}"), &[]).expect("CONNECT");
        assert_eq!(head.status, 200, "{}", head.raw);
        assert_echo(&mut victim, b"after the reload, behind slow lookups\n");
        drop(slow);
    });
}
