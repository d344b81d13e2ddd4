//! SOCKS5 UDP ASSOCIATE through the binary, with a real SOCKS5 UDP client
//! (python's PySocks): a DNS query answered by a local DNS server, a
//! datagram to a denied destination dropped and counted, a reply from a
//! source the client never sent to not relayed, and the association gone
//! once its TCP control connection closes.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;

use crate::support::child::{strict, ChildGuard, ChildProxy};

/// A tiny DNS server on 127.0.0.1: answers every A query with 192.0.2.53.
/// Before answering the first query it has a stranger socket send a
/// datagram to the query's source (the proxy's outbound socket), so that
/// datagram is queued ahead of the answer.
pub(crate) struct Dns {
    pub(crate) port: u16,
    /// Sources of the queries it got.
    pub(crate) seen: Arc<Mutex<Vec<SocketAddr>>>,
}

impl Dns {
    pub(crate) fn start() -> Dns {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let stranger = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = sock.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = Arc::clone(&seen);
        thread::spawn(move || {
            let mut buf = [0u8; 1500];
            while let Ok((n, from)) = sock.recv_from(&mut buf) {
                let first = {
                    let mut seen = s.lock().unwrap();
                    seen.push(from);
                    seen.len() == 1
                };
                if first {
                    let _ = stranger.send_to(b"not a reply", from);
                }
                if let Some(answer) = dns_answer(&buf[..n], [192, 0, 2, 53]) {
                    let _ = sock.send_to(&answer, from);
                }
            }
        });
        Dns { port, seen }
    }
}

/// The answer to a one-question query: the question, and one A record.
fn dns_answer(q: &[u8], addr: [u8; 4]) -> Option<Vec<u8>> {
    if q.len() < 12 {
        return None;
    }
    // The question: labels up to the root, then QTYPE and QCLASS.
    let mut i = 12;
    while *q.get(i)? != 0 {
        i += 1 + usize::from(q[i]);
    }
    let end = i + 5;
    let mut a = Vec::with_capacity(end + 16);
    a.extend_from_slice(&q[..2]);
    a.extend_from_slice(&[0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0]);
    a.extend_from_slice(q.get(12..end)?);
    a.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4]);
    a.extend_from_slice(&addr);
    Some(a)
}

/// The client: PySocks over the proxy. Sends a datagram to the denied
/// port first, then DNS queries for svc.test to the DNS server by address
/// and by name (`localhost`, resolved by the proxy), and prints the
/// relay's port, each answer's address and its source, and whether any
/// other datagram was waiting. Then waits for a line on stdin before
/// closing (the TCP control connection with it).
const CLIENT: &str = r#"
import socket, struct, sys, select
import socks
proxy, dns, denied = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
s = socks.socksocket(socket.AF_INET, socket.SOCK_DGRAM)
s.set_proxy(socks.SOCKS5, "127.0.0.1", proxy)
s.settimeout(10)
s.sendto(b"must not arrive", ("127.0.0.1", denied))
print("relay", socket.socket.getpeername(s)[1], flush=True)
def query(qid, where):
    q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    q += b"".join(bytes([len(l)]) + l for l in [b"svc", b"test"]) + b"\0" + struct.pack(">HH", 1, 1)
    s.sendto(q, (where, dns))
    data, src = s.recvfrom(4096)
    rid, = struct.unpack(">H", data[:2])
    assert rid == qid, (rid, qid)
    print("answer", socket.inet_ntoa(data[-4:]), src[0], src[1], flush=True)
query(0x1234, "127.0.0.1")
query(0x4321, "localhost")
r, _, _ = select.select([s], [], [], 0)
print("extra", len(r), flush=True)
sys.stdin.readline()
s.close()
print("closed", flush=True)
"#;

pub(crate) fn python_with_socks() -> Option<()> {
    let ok = Command::new("python3")
        .args(["-c", "import socks"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        return Some(());
    }
    assert!(
        !strict(),
        "python3 has no `socks` module (PySocks; scripts/test-deps.sh installs it)"
    );
    eprintln!("SKIP: python3 has no `socks` module (scripts/test-deps.sh installs it)");
    None
}

/// GET `path` from the admin endpoint; the body.
fn admin_get(addr: SocketAddr, path: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out.split_once("\r\n\r\n").unwrap().1.to_string()
}

fn metric(body: &str, line_start: &str) -> u64 {
    body.lines()
        .find_map(|l| l.strip_prefix(line_start)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no metric {line_start} in:\n{body}"))
}

fn read_line(r: &mut impl std::io::BufRead) -> String {
    let mut l = String::new();
    r.read_line(&mut l).unwrap();
    l.trim().to_string()
}

#[test]
fn udp_associate_dns_through_pysocks() {
    if python_with_socks().is_none() {
        return;
    }
    let dns = Dns::start();
    // The denied port: allowed and denied, so deny wins.
    let sink = UdpSocket::bind("127.0.0.1:0").unwrap();
    sink.set_nonblocking(true).unwrap();
    let denied = sink.local_addr().unwrap().port();
    let allow_dns = format!("127.0.0.1:{}", dns.port);
    let sink_rule = format!("127.0.0.1:{denied}");
    let free = free_addr();
    let proxy = ChildProxy::start(&[
        "--log-format",
        "json",
        "--admin",
        &free.to_string(),
        "--allow",
        &allow_dns,
        "--allow",
        &sink_rule,
        "--deny",
        &sink_rule,
    ]);
    let admin = free;
    proxy.wait_for_line("admin endpoint", |l| l.contains("admin endpoint on "));

    let mut py = ChildGuard(
        Command::new("python3")
            .arg("-u")
            .arg("-c")
            .arg(CLIENT)
            .args([
                proxy.addr.port().to_string(),
                dns.port.to_string(),
                denied.to_string(),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3"),
    );
    let mut out = std::io::BufReader::new(py.stdout.take().unwrap());
    let relay_port: u16 = read_line(&mut out)
        .strip_prefix("relay ")
        .expect("relay line")
        .parse()
        .unwrap();
    let dns_src = format!("127.0.0.1 {}", dns.port);
    assert_eq!(read_line(&mut out), format!("answer 192.0.2.53 {dns_src}"));
    assert_eq!(read_line(&mut out), format!("answer 192.0.2.53 {dns_src}"));
    // The stranger's datagram was queued ahead of the first answer: had
    // it been relayed, it would have come first, or be waiting now.
    assert_eq!(read_line(&mut out), "extra 0");
    // Both queries reached the server from the proxy's outbound socket.
    let seen = dns.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    // The denied datagram never left (it was sent before the queries, on
    // the same association, and loopback delivery is immediate).
    let mut buf = [0u8; 64];
    assert!(
        sink.recv_from(&mut buf).is_err(),
        "a denied datagram arrived"
    );

    let body = admin_get(admin, "/metrics");
    assert_eq!(metric(&body, "portcullis_udp_associations_total "), 1);
    assert_eq!(
        metric(&body, "portcullis_udp_datagrams_total{direction=\"up\"} "),
        2
    );
    assert_eq!(
        metric(&body, "portcullis_udp_datagrams_total{direction=\"down\"} "),
        2
    );
    assert_eq!(
        metric(&body, "portcullis_udp_dropped_total{reason=\"denied\"} "),
        1
    );
    assert_eq!(
        metric(
            &body,
            "portcullis_udp_dropped_total{reason=\"uncontacted\"} "
        ),
        1
    );
    assert_eq!(
        metric(&body, "portcullis_udp_dropped_total{reason=\"malformed\"} "),
        0
    );
    let refusal = proxy.wait_for_line("the denied datagram's reason", |l| {
        l.contains(&format!("udp 127.0.0.1:{denied}: dropped"))
    });
    assert!(refusal.contains("deny"), "{refusal}");

    // Closing the client closes the control connection: the association
    // ends, its session line has the datagrams, and its relay port is free.
    py.stdin.take().unwrap().write_all(b"close\n").unwrap();
    assert_eq!(read_line(&mut out), "closed");
    let line = proxy.wait_for_line("the association's session line", |l| {
        l.contains(r#""event":"session""#) && l.contains(r#""protocol":"socks5-udp""#)
    });
    for field in [
        r#""datagrams_up":2"#,
        r#""datagrams_down":2"#,
        r#""datagrams_dropped":2"#,
        r#""close":"done""#,
    ] {
        assert!(line.contains(field), "{field} missing: {line}");
    }
    UdpSocket::bind(("127.0.0.1", relay_port)).expect("the relay socket is closed");
}

/// A UDP socket of uid 65534 (`nobody`): a socket is owned by the fsuid
/// of the thread that creates it. Needs root.
fn nobodys_socket() -> UdpSocket {
    thread::spawn(|| {
        nix::unistd::setfsuid(nix::unistd::Uid::from_raw(65_534));
        UdpSocket::bind("127.0.0.1:0").unwrap()
    })
    .join()
    .unwrap()
}

/// A new client socket sends `ping` to the echo server at `echo_port`
/// through `relay` and gets the echo back from the relay, header and all.
fn pinged_through(relay: SocketAddr, echo_port: u16) {
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    client
        .set_read_timeout(Some(crate::support::wait::PROMPTLY))
        .unwrap();
    client
        .send_to(&dgram(echo_port, 0, b"ping"), relay)
        .unwrap();
    let mut buf = [0u8; 2048];
    let (n, from) = client.recv_from(&mut buf).expect("the echo");
    assert_eq!(from, relay);
    assert_eq!(&buf[..n], &dgram(echo_port, 0, b"ping")[..]);
}

/// A UDP echo server on 127.0.0.1; its port.
fn udp_echo() -> u16 {
    let echo = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = echo.local_addr().unwrap().port();
    thread::spawn(move || {
        let mut buf = [0u8; 2048];
        while let Ok((n, from)) = echo.recv_from(&mut buf) {
            let _ = echo.send_to(&buf[..n], from);
        }
    });
    port
}

/// A free loopback TCP address (for the admin endpoint: `127.0.0.1:0`
/// would clash with the listener's own `:0`).
fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// Opens an association on `proxy` for datagrams from `port`; the control
/// connection and the relay's address.
fn associate(proxy: SocketAddr, port: u16) -> (TcpStream, SocketAddr) {
    let mut c = TcpStream::connect(proxy).unwrap();
    c.set_read_timeout(Some(crate::support::wait::PROMPTLY))
        .unwrap();
    c.write_all(&[5, 1, 0]).unwrap();
    let mut sel = [0u8; 2];
    c.read_exact(&mut sel).unwrap();
    assert_eq!(sel, [5, 0]);
    let mut req = vec![5, 3, 0];
    req.extend(crate::support::socks::socks_addr("0.0.0.0", port));
    c.write_all(&req).unwrap();
    let (rep, bound) = crate::support::socks::read_socks_reply(&mut c).unwrap();
    assert_eq!(rep, 0, "UDP ASSOCIATE answered {rep:#04x}");
    assert_eq!(bound.len(), 6, "an IPv4 relay address: {bound:?}");
    let ip = std::net::Ipv4Addr::new(bound[0], bound[1], bound[2], bound[3]);
    let relay = SocketAddr::from((ip, u16::from_be_bytes([bound[4], bound[5]])));
    (c, relay)
}

/// A SOCKS UDP datagram to 127.0.0.1:`port` with `frag`.
fn dgram(port: u16, frag: u8, payload: &[u8]) -> Vec<u8> {
    let mut d = vec![0, 0, frag];
    d.extend(crate::support::socks::socks_addr("127.0.0.1", port));
    d.extend_from_slice(payload);
    d
}

/// Bad input on the relay is dropped and counted by reason, and harms
/// nothing: a datagram from another port than the one the client named, a
/// malformed header, a fragment; then a good one is echoed. The
/// association counts against the client's session limit, and idles out.
#[test]
fn udp_bad_datagrams_limits_and_idle() {
    let echo_port = udp_echo();
    let dir = crate::support::temp_dir::TempDir::new("udp-limits");
    let config = dir.path().join("p.toml");
    std::fs::write(&config, "[limits]\nmax_sessions_per_client = 1\n").unwrap();
    let free = free_addr();
    let proxy = ChildProxy::start(&[
        "--config",
        config.to_str().unwrap(),
        "--log-format",
        "json",
        "--admin",
        &free.to_string(),
        "--idle-timeout",
        "1s",
        "--allow",
        &format!("127.0.0.1:{echo_port}"),
    ]);
    proxy.wait_for_line("admin endpoint", |l| l.contains("admin endpoint on "));
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    client
        .set_read_timeout(Some(crate::support::wait::PROMPTLY))
        .unwrap();
    let other = UdpSocket::bind("127.0.0.1:0").unwrap();
    let (_control, relay) = associate(proxy.addr, client.local_addr().unwrap().port());

    other
        .send_to(&dgram(echo_port, 0, b"other"), relay)
        .unwrap();
    let mut bad = dgram(echo_port, 0, b"rsv");
    bad[1] = 1;
    client.send_to(&bad, relay).unwrap();
    client.send_to(&[0, 0, 0, 9, 1], relay).unwrap();
    client
        .send_to(&dgram(echo_port, 1, b"frag"), relay)
        .unwrap();
    client
        .send_to(&dgram(echo_port, 0, b"ping"), relay)
        .unwrap();
    let mut buf = [0u8; 2048];
    let (n, from) = client.recv_from(&mut buf).unwrap();
    assert_eq!(from, relay);
    assert_eq!(
        &buf[..n],
        &dgram(echo_port, 0, b"ping")[..],
        "the echo, with its header"
    );

    let body = admin_get(free, "/metrics");
    for (reason, n) in [
        ("foreign-source", 1),
        ("malformed", 2),
        ("fragment", 1),
        ("denied", 0),
    ] {
        let line = format!("portcullis_udp_dropped_total{{reason=\"{reason}\"}} ");
        assert_eq!(metric(&body, &line), n, "{reason}");
    }
    assert_eq!(
        metric(&body, "portcullis_udp_bytes_total{direction=\"up\"} "),
        4
    );
    assert_eq!(
        metric(&body, "portcullis_udp_bytes_total{direction=\"down\"} "),
        4
    );

    // The association is this client's one session: another is refused.
    assert!(
        crate::support::socks::socks5_connect(proxy.addr, "127.0.0.1", echo_port, None).is_err(),
        "a second session past max_sessions_per_client = 1"
    );
    // Quiet for the idle timeout: the association ends.
    let line = proxy.wait_for_line("the association's idle close", |l| {
        l.contains(r#""protocol":"socks5-udp""#) && l.contains(r#""close":"idle-timeout""#)
    });
    assert!(line.contains(r#""datagrams_dropped":4"#), "{line}");
}

/// An open, quiet association costs no wakeups: the reactor sleeps until
/// its idle deadline (here: none is due for minutes). The library's
/// counters are read without waking it.
#[test]
fn an_idle_association_does_not_wake_the_proxy() {
    use crate::support::proxy::{allow_ports, proxy_addr, start_proxy};
    use crate::support::reactor::{wait_reactors_parked, Sleep};
    use crate::support::wait::{wait_for, PROMPTLY};
    use std::time::Duration;
    const MINUTE: Duration = Duration::from_secs(60);
    let echo = UdpSocket::bind("127.0.0.1:0").unwrap();
    let echo_port = echo.local_addr().unwrap().port();
    let proxy = start_proxy(allow_ports(&[echo_port]));
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    client.set_read_timeout(Some(PROMPTLY)).unwrap();
    let (_control, relay) = associate(proxy_addr(&proxy), client.local_addr().unwrap().port());
    client.send_to(&dgram(echo_port, 0, b"one"), relay).unwrap();
    let mut buf = [0u8; 64];
    let (n, from) = echo.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"one");
    echo.send_to(b"back", from).unwrap();
    let (n, _) = client.recv_from(&mut buf).unwrap();
    assert!(buf[..n].ends_with(b"back"));
    // Counted just after the send that the client saw.
    wait_for("the reply counted", PROMPTLY, || {
        proxy.stats().udp.datagrams_down == 1
    });
    // Every event the test caused has reached the proxy's sockets (the
    // client has the reply): once asleep, the reactor has handled them all.
    // Its one timer is the association's idle deadline, minutes away
    // (DEFAULT_IDLE, 300 s): a sleep of a minute at least.
    let parked = wait_reactors_parked("self", proxy_addr(&proxy), 1, Sleep::AtLeast(MINUTE));
    let s1 = proxy.stats();
    parked.assert_still_asleep();
    let s2 = proxy.stats();
    assert_eq!(s1.wakeups, s2.wakeups, "an idle association woke the proxy");
    assert_eq!(s2.open.established, 1, "the association is still open");
}

/// One association's datagrams cannot be aimed at another's relay (a
/// proxy UDP socket), even under a rule allowing every loopback port: they
/// would come from the proxy's outbound socket, on the victim's IP, and a
/// victim that asked with port 0 would have its client port fixed to the
/// attacker's (its own datagrams dropped as foreign; the attacker's relayed
/// under the victim's identity and policy). They are dropped as denied,
/// and the victim's association works.
#[test]
fn an_association_cannot_reach_another_relay() {
    let echo_port = udp_echo();
    let free = free_addr();
    let proxy = ChildProxy::start(&["--admin", &free.to_string(), "--allow", "127.0.0.1:1-65535"]);
    proxy.wait_for_line("admin endpoint", |l| l.contains("admin endpoint on "));
    let mut buf = [0u8; 2048];
    // The victim asks with port 0: its first datagram fixes its port.
    let victim = UdpSocket::bind("127.0.0.1:0").unwrap();
    victim
        .set_read_timeout(Some(crate::support::wait::PROMPTLY))
        .unwrap();
    let (_victim_control, victim_relay) = associate(proxy.addr, 0);
    let attacker = UdpSocket::bind("127.0.0.1:0").unwrap();
    attacker
        .set_read_timeout(Some(crate::support::wait::PROMPTLY))
        .unwrap();
    let (_control, relay) = associate(proxy.addr, attacker.local_addr().unwrap().port());
    // First a datagram through to the echo (the outbound socket exists).
    attacker
        .send_to(&dgram(echo_port, 0, b"warm"), relay)
        .unwrap();
    let (n, _) = attacker.recv_from(&mut buf).unwrap();
    assert!(buf[..n].ends_with(b"warm"));
    // Then a whole SOCKS datagram, as payload, to the victim's relay.
    let inner = dgram(echo_port, 0, b"as the victim");
    attacker
        .send_to(&dgram(victim_relay.port(), 0, &inner), relay)
        .unwrap();
    let dropped = proxy.wait_for_line("the datagram to a relay refused", |l| {
        l.contains(&format!("udp 127.0.0.1:{}: dropped", victim_relay.port()))
    });
    assert!(dropped.contains("the proxy's own address"), "{dropped}");
    victim
        .send_to(&dgram(echo_port, 0, b"mine"), victim_relay)
        .unwrap();
    let (n, from) = victim.recv_from(&mut buf).expect("the victim's echo");
    assert_eq!(from, victim_relay);
    assert_eq!(&buf[..n], &dgram(echo_port, 0, b"mine")[..]);
    let body = admin_get(free, "/metrics");
    assert_eq!(
        metric(
            &body,
            "portcullis_udp_dropped_total{reason=\"foreign-source\"} "
        ),
        0
    );
}

/// Refused datagrams are cheap to send and each new destination is judged
/// anew: the log does not grow a line per datagram. The first refusals of
/// an association are logged with their reasons, then one line says the
/// rest are only counted (every one is, in the metrics and the session line).
#[test]
fn refused_destinations_do_not_flood_the_log() {
    let free = free_addr();
    let proxy = ChildProxy::start(&["--admin", &free.to_string(), "--allow", "127.0.0.1:1"]);
    proxy.wait_for_line("admin endpoint", |l| l.contains("admin endpoint on "));
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    let (_control, relay) = associate(proxy.addr, client.local_addr().unwrap().port());
    const N: u16 = 200;
    for port in 1000..1000 + N {
        client.send_to(&dgram(port, 0, b"x"), relay).unwrap();
    }
    crate::support::wait::wait_for(
        "every datagram refused",
        crate::support::wait::PROMPTLY,
        || {
            let body = admin_get(free, "/metrics");
            metric(&body, "portcullis_udp_dropped_total{reason=\"denied\"} ") == u64::from(N)
        },
    );
    proxy.wait_for_line("the line saying the rest are counted", |l| {
        l.contains("further refused destinations of this association are counted, not logged")
    });
    let refusals = proxy
        .log()
        .iter()
        .filter(|l| l.contains(": dropped: "))
        .count();
    assert_eq!(refusals, 16, "{:?}", proxy.log());
}

/// Attack: an association opened with port 0 has its port fixed by the
/// first datagram. Another local user's socket that learnt the relay port
/// first, or a datagram from a socket closed at once, must not take it
/// over: the sender's socket must belong to the control connection's uid.
#[test]
fn a_port_zero_association_is_not_taken_over_by_another_users_socket() {
    let echo_port = udp_echo();
    let free = free_addr();
    let proxy = ChildProxy::start(&[
        "--log-format",
        "json",
        "--admin",
        &free.to_string(),
        "--allow",
        &format!("127.0.0.1:{echo_port}"),
    ]);
    proxy.wait_for_line("admin endpoint", |l| l.contains("admin endpoint on "));
    let (_control, relay) = associate(proxy.addr, 0);

    let root = nix::unistd::geteuid().is_root();
    let stranger = root.then(nobodys_socket);
    if let Some(s) = &stranger {
        s.send_to(&dgram(echo_port, 0, b"steal"), relay).unwrap();
    }
    // Sent, then closed before the proxy could ask who owned it.
    sent_and_closed(&proxy, relay, &dgram(echo_port, 0, b"gone"));
    proxy.wait_for_line("the closed sender's datagram dropped", |l| {
        l.contains("dropped: its socket is closed")
    });

    pinged_through(relay, echo_port);
    let mut buf = [0u8; 2048];

    let body = admin_get(free, "/metrics");
    assert_eq!(
        metric(
            &body,
            "portcullis_udp_dropped_total{reason=\"foreign-source\"} "
        ),
        1 + u64::from(root)
    );
    if let Some(s) = stranger {
        let line = proxy.wait_for_line("the stranger's datagram dropped", |l| {
            l.contains("its socket belongs to uid 65534, the control connection's to uid 0")
        });
        assert!(line.contains("clients should name their port"), "{line}");
        // Nothing reached it: the echo went to the client only.
        s.set_nonblocking(true).unwrap();
        assert!(s.recv_from(&mut buf).is_err(), "the stranger got a reply");
    }
}

/// Attack: the owner check must not depend on the access lines. With the
/// events off (`RUST_LOG=info,portcullis::event=off`, as the docs suggest
/// to drop them) a loopback client's uid is not asked at accept; the
/// association must ask it itself, or any local user's first datagram
/// (or one from a socket closed at once) takes a port-0 association over.
#[test]
fn the_port_zero_owner_check_holds_with_access_lines_off() {
    let echo_port = udp_echo();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_portcullis"));
    cmd.env("RUST_LOG", "info,portcullis::event=off")
        .args(["--listen", "127.0.0.1:0", "--allow"])
        .arg(format!("127.0.0.1:{echo_port}"));
    let proxy = ChildProxy::start_command(cmd);
    let (_control, relay) = associate(proxy.addr, 0);

    let stranger = nix::unistd::geteuid().is_root().then(nobodys_socket);
    if let Some(s) = &stranger {
        s.send_to(&dgram(echo_port, 0, b"steal"), relay).unwrap();
        proxy.wait_for_line("the stranger's datagram dropped", |l| {
            l.contains("its socket belongs to uid 65534")
        });
    }
    sent_and_closed(&proxy, relay, &dgram(echo_port, 0, b"gone"));
    proxy.wait_for_line("the closed sender's datagram dropped", |l| {
        l.contains("dropped: its socket is closed")
    });

    pinged_through(relay, echo_port);
    let mut buf = [0u8; 2048];
    if let Some(s) = stranger {
        s.set_nonblocking(true).unwrap();
        assert!(s.recv_from(&mut buf).is_err(), "the stranger got a reply");
    }
}

/// Sends `dgram` to `relay` from a socket closed before the proxy can read
/// it (the proxy is stopped meanwhile: else it may ask about the socket
/// first, find it open and ours, and fix the association's port to it).
fn sent_and_closed(proxy: &ChildProxy, relay: SocketAddr, dgram: &[u8]) {
    use nix::sys::signal::{kill, Signal};
    let pid = nix::unistd::Pid::from_raw(proxy.pid() as i32);
    kill(pid, Signal::SIGSTOP).unwrap();
    let gone = UdpSocket::bind("127.0.0.1:0").unwrap();
    gone.send_to(dgram, relay).unwrap();
    drop(gone);
    kill(pid, Signal::SIGCONT).unwrap();
}
