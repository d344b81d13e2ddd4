//! UDP load generator for `scripts/bench-udp.sh`: runs its own UDP echo
//! server on loopback and a client that reaches it directly or through a
//! SOCKS5 UDP association, keeping `--window` datagrams in flight until
//! `--count` echoes came back. Nothing here talks to a non-loopback address.
//!
//! ```text
//! udp_loadgen --via socks5 --proxy 127.0.0.1:1080 --count 200000 --window 32 --size 64 --watch-pid PID
//! udp_loadgen --via direct --count 200000
//! ```
//!
//! Prints one `RESULT key=value ...` line: echoes per second (each echo is
//! two datagrams through the relay, one each way), datagrams lost (a window
//! that stalled for 200 ms is topped up again), and with `--watch-pid` the
//! watched process tree's CPU time (utime+stime, from /proc) per echo and
//! per relayed datagram.

#[path = "common/proc_tree.rs"]
mod proc_tree;
use proc_tree::cpu_seconds;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::thread;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Via {
    Direct,
    Socks5,
}

#[derive(Parser)]
#[command(about = "Loopback UDP load generator for SOCKS5 UDP benchmarks")]
struct Args {
    #[arg(long, value_enum, default_value = "direct")]
    via: Via,
    /// The SOCKS5 proxy (with --via socks5).
    #[arg(long)]
    proxy: Option<SocketAddr>,
    /// Echoes to complete.
    #[arg(long, default_value_t = 100_000)]
    count: u64,
    /// Datagrams in flight.
    #[arg(long, default_value_t = 32)]
    window: u64,
    /// Payload bytes per datagram.
    #[arg(long, default_value_t = 64)]
    size: usize,
    /// A process whose CPU time to report.
    #[arg(long)]
    watch_pid: Option<u32>,
    /// The echo server's port on 127.0.0.1 (0: any free one), so a proxy
    /// can be started beforehand with a rule naming it.
    #[arg(long, default_value_t = 0)]
    echo_port: u16,
}

fn main() {
    let args = Args::parse();
    let echo = UdpSocket::bind((Ipv4Addr::LOCALHOST, args.echo_port)).expect("bind echo");
    let echo_addr = echo.local_addr().unwrap();
    thread::spawn(move || {
        let mut buf = [0u8; 65_536];
        while let Ok((n, from)) = echo.recv_from(&mut buf) {
            let _ = echo.send_to(&buf[..n], from);
        }
    });
    let client = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind client");
    client
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let (_control, to, header) = match args.via {
        Via::Direct => (None, echo_addr, Vec::new()),
        Via::Socks5 => {
            let proxy = args.proxy.expect("--proxy with --via socks5");
            let (control, relay) = associate(proxy, client.local_addr().unwrap().port());
            let mut h = vec![0, 0, 0, 1];
            h.extend_from_slice(&[127, 0, 0, 1]);
            h.extend_from_slice(&echo_addr.port().to_be_bytes());
            (Some(control), relay, h)
        }
    };
    let mut dgram = header.clone();
    dgram.resize(header.len() + args.size, 0x5a);
    let cpu0 = args.watch_pid.map(cpu_seconds);
    let start = Instant::now();
    let (mut sent, mut got, mut lost) = (0u64, 0u64, 0u64);
    let mut buf = [0u8; 65_536];
    while sent < args.window.min(args.count) {
        client.send_to(&dgram, to).expect("send");
        sent += 1;
    }
    while got < args.count {
        match client.recv_from(&mut buf) {
            Ok((n, _)) => {
                assert_eq!(n, dgram.len(), "an echo of another length");
                got += 1;
                if sent < args.count {
                    client.send_to(&dgram, to).expect("send");
                    sent += 1;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                // The window stalled: what is in flight is lost; refill it.
                let in_flight = sent - got;
                lost += in_flight;
                sent -= in_flight;
                while sent < args.count && sent - got < args.window {
                    client.send_to(&dgram, to).expect("send");
                    sent += 1;
                }
                if start.elapsed() > Duration::from_secs(600) {
                    panic!("no progress: {got} of {} echoes", args.count);
                }
            }
            Err(e) => panic!("recv: {e}"),
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let mut line = format!(
        "RESULT echoes={got} secs={secs:.3} echoes_per_sec={:.0} datagrams_per_sec={:.0} lost={lost}",
        got as f64 / secs,
        2.0 * got as f64 / secs
    );
    if let (Some(pid), Some(c0)) = (args.watch_pid, cpu0) {
        let cpu = cpu_seconds(pid) - c0;
        line += &format!(
            " cpu_secs={cpu:.3} cpu_us_per_echo={:.2} cpu_us_per_datagram={:.2}",
            cpu * 1e6 / got as f64,
            cpu * 1e6 / (2 * got) as f64
        );
    }
    println!("{line}");
}

/// UDP ASSOCIATE for datagrams from `port`: the control connection and the relay.
fn associate(proxy: SocketAddr, port: u16) -> (TcpStream, SocketAddr) {
    let mut c = TcpStream::connect(proxy).expect("connect to the proxy");
    c.write_all(&[5, 1, 0]).unwrap();
    let mut sel = [0u8; 2];
    c.read_exact(&mut sel).unwrap();
    assert_eq!(sel, [5, 0], "method selection");
    let mut req = vec![5, 3, 0, 1, 127, 0, 0, 1];
    req.extend_from_slice(&port.to_be_bytes());
    c.write_all(&req).unwrap();
    let mut rep = [0u8; 10];
    c.read_exact(&mut rep).unwrap();
    assert_eq!(rep[..2], [5, 0], "UDP ASSOCIATE reply {rep:?}");
    assert_eq!(rep[3], 1, "an IPv4 relay address");
    let ip = Ipv4Addr::new(rep[4], rep[5], rep[6], rep[7]);
    // A proxy that answers 0.0.0.0 means "the address you reached me on".
    let ip = if ip.is_unspecified() {
        Ipv4Addr::LOCALHOST
    } else {
        ip
    };
    (
        c,
        SocketAddr::from((ip, u16::from_be_bytes([rep[8], rep[9]]))),
    )
}
