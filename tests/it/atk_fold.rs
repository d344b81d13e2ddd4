//! Attacks on the opening machine (handshake, establishing, vetting and
//! securing as one core), through the binary.
//!
//! These run in a network namespace with public addresses on `lo` (see
//! support/netns.rs): `a.cdn.test` at 45.45.45.47, `b.cdn.test` at
//! 45.45.45.48, one front listening on both.

use crate::support;

use std::io::{Read, Write};

use support::*;

const A_ADDR: &str = "45.45.45.47";
const B_ADDR: &str = "45.45.45.48";

/// A front on both addresses (one port) that reads what it is sent and
/// answers nothing; the servers count the connections they accepted.
fn silent_front() -> (Vec<Server>, u16) {
    let mut servers = Vec::new();
    let mut port = 0;
    for ip in [A_ADDR, B_ADDR] {
        let server = Server::start_on(format!("{ip}:{port}").parse().unwrap(), |mut s| {
            let mut buf = [0u8; 4096];
            while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
        });
        port = server.port();
        servers.push(server);
    }
    (servers, port)
}

/// The proxy, resolving both names through its own /etc/hosts, with
/// `config` (TOML).
fn proxy(tag: &str, config: &str) -> (TempDir, ChildProxy) {
    let dir = TempDir::new(tag);
    let hosts = dir.0.join("hosts");
    std::fs::write(
        &hosts,
        format!("127.0.0.1 localhost\n{A_ADDR} a.cdn.test\n{B_ADDR} b.cdn.test\n"),
    )
    .unwrap();
    let cfg = dir.0.join("portcullis.toml");
    std::fs::write(&cfg, config).unwrap();
    let proxy = ChildProxy::with_hosts(&hosts, &["--config", cfg.to_str().unwrap()]);
    (dir, proxy)
}

/// Every name under cdn.test allowed raw on the port, and inspected when
/// it resolves into the corporate range (a scoped rule, as `HOST:PORT@CIDR`
/// writes it). Both names resolve to public addresses: raw.
fn scoped_rules(port: u16) -> String {
    format!(
        r#"
[[rules]]
name = "cdn"
action = "allow"
hosts = ["*.cdn.test"]
port = {port}

[[rules]]
name = "cdn-inside"
action = "allow"
hosts = ["*.cdn.test"]
cidrs = ["10.20.0.0/16"]
match = "both"
port = {port}
inspect = "http"
"#
    )
}

/// A raw tunnel to a vetted port whose first flight names two hosts (an
/// absolute-form target and a `Host`), each of which the fronting check
/// calls inspected (it reads the scoped rule's names, not its range) and
/// each of which is established raw. On main the session switches to one,
/// vets the same flight again there, switches back, and so on without end:
/// a resolve and a connect to the front per switch, fresh deadlines each
/// time, and it never reads the client again, so it goes on after the
/// client has gone. One switch is the most a tunnel gets.
#[test]
fn a_first_flight_naming_two_hosts_does_not_switch_without_end() {
    in_netns(&[A_ADDR, B_ADDR], || {
        let (front, port) = silent_front();
        let (_dir, proxy) = proxy("atk-fold-switch-loop", &scoped_rules(port));
        let mut s = connect_via_http(proxy.addr, &format!("a.cdn.test:{port}"));
        s.set_read_timeout(Some(PROMPTLY)).unwrap();
        write!(
            s,
            "GET http://b.cdn.test:{port}/ HTTP/1.1\r\nHost: a.cdn.test:{port}\r\n\r\n"
        )
        .unwrap();
        // The client is answered (or closed) rather than left waiting.
        let mut answer = Vec::new();
        let read = s.read_to_end(&mut answer);
        let text = String::from_utf8_lossy(&answer);
        let switches = |p: &ChildProxy| {
            p.log()
                .iter()
                .filter(|l| {
                    l.contains("event=log")
                        && l.contains("treated as a tunnel to")
                        && !l.contains("refused:")
                })
                .count()
        };
        assert!(
            read.is_ok(),
            "the client was left waiting ({read:?}) while the proxy switched {} times and \
             the front took {} connections",
            switches(&proxy),
            front.iter().map(Server::accepted).sum::<usize>()
        );
        assert!(
            text.starts_with("HTTP/1.1 403") && text.contains("X-Proxy-Error: fronting"),
            "{text}"
        );
        drop(s);
        // Once the client has gone, nothing of the session is left open.
        let mut open = u64::MAX;
        wait_until(PROMPTLY, || {
            open = stat(&proxy.stats(), "open");
            open == 0
        });
        assert_eq!(
            open,
            0,
            "a session outlived its client: {} switches, {} connections to the front",
            switches(&proxy),
            front.iter().map(Server::accepted).sum::<usize>()
        );
        // One switch (a.cdn.test to b.cdn.test), the next refused: two dials.
        assert_eq!(switches(&proxy), 1, "{:#?}", proxy.log());
        proxy.wait_for_line("the second switch refused", |l| {
            l.contains(&format!(
                "fronting host=a.cdn.test target=b.cdn.test:{port}: rule cdn-inside inspects \
                 a.cdn.test; treated as a tunnel to a.cdn.test:{port}; refused: the tunnel was \
                 switched to b.cdn.test:{port} already"
            ))
        });
        wait_for("both dials at the front", PROMPTLY, || {
            front.iter().map(Server::accepted).sum::<usize>() >= 2
        });
        assert_eq!(
            front.iter().map(Server::accepted).collect::<Vec<_>>(),
            [1, 1]
        );
    });
}
