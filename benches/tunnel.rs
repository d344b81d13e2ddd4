//! Relay benchmarks: bulk throughput and connection churn, directly over
//! loopback (the baseline) and through an in-process portcullis, over HTTP
//! CONNECT and SOCKS5, in the same run.
//!
//! `cargo bench --bench tunnel`. The proxy's reactor, the client and the sink
//! are three threads; on a 2-core machine they compete for CPU, so compare
//! rows of one run, not absolute figures across machines.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::thread;
use std::time::Duration;

use common::{open, Via};
use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use portcullis::policy::{parse_cli_rule, Action};
use portcullis::{ListenAddr, ListenerProtocol, Policy, Proxy, SpawnedProxy};

/// Bytes per bulk iteration.
const BULK: usize = 64 << 20;
/// Client write / sink read size.
const CHUNK: usize = 256 << 10;

/// A sink: reads forever, answers one byte each time another `BULK` bytes arrived.
fn spawn_sink() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind sink");
    let addr = l.local_addr().expect("sink addr");
    thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut conn) = conn else { continue };
            thread::spawn(move || {
                let mut buf = vec![0u8; CHUNK];
                let mut got = 0usize;
                loop {
                    match conn.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got += n,
                    }
                    while got >= BULK {
                        got -= BULK;
                        if conn.write_all(&[1]).is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    addr
}

/// An echo server for the churn bench: echoes what it reads until EOF.
fn spawn_echo() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind echo");
    let addr = l.local_addr().expect("echo addr");
    thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut conn) = conn else { continue };
            let _ = conn.set_nodelay(true);
            let mut buf = [0u8; 512];
            loop {
                match conn.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if conn.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                }
            }
        }
    });
    addr
}

/// portcullis on an ephemeral loopback port, allowing exactly `targets`.
fn spawn_proxy(targets: &[SocketAddr]) -> (SpawnedProxy, SocketAddr) {
    let rules = targets
        .iter()
        .map(|t| parse_cli_rule(Action::Allow, &t.to_string()).expect("rule"))
        .collect::<Vec<_>>();
    let proxy = Proxy::builder()
        .listen(
            ListenAddr::Tcp("127.0.0.1:0".parse().expect("addr")),
            ListenerProtocol::Auto,
        )
        .policy(Policy::from_rules(&rules).expect("policy"))
        .build()
        .expect("build proxy")
        .spawn()
        .expect("spawn proxy");
    let addr = proxy.tcp_addr().expect("tcp listener");
    (proxy, addr)
}

fn ways(proxy: SocketAddr) -> [(&'static str, Via); 3] {
    [
        ("direct", Via::Direct),
        ("portcullis_connect", Via::Connect(proxy)),
        ("portcullis_socks5", Via::Socks5(proxy)),
    ]
}

fn bulk(c: &mut Criterion) {
    let sink = spawn_sink();
    let (proxy, proxy_addr) = spawn_proxy(&[sink]);
    let mut g = c.benchmark_group("bulk_64MiB_upload");
    g.throughput(Throughput::Bytes(BULK as u64))
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    let data = vec![0xa5u8; CHUNK];
    for (name, via) in ways(proxy_addr) {
        let mut s = open(via, sink).expect("open tunnel");
        g.bench_function(name, |b| {
            b.iter(|| {
                let mut left = BULK;
                while left > 0 {
                    let n = left.min(CHUNK);
                    s.write_all(&data[..n]).expect("write");
                    left -= n;
                }
                let mut ack = [0u8; 1];
                s.read_exact(&mut ack).expect("sink ack");
            })
        });
    }
    g.finish();
    let stats = proxy.stats();
    eprintln!(
        "proxy: bytes_up={} wakeups={} events={} ({:.1} events/wakeup, {:.1} wakeups/MiB)",
        stats.bytes_up,
        stats.wakeups,
        stats.events,
        stats.events as f64 / stats.wakeups.max(1) as f64,
        stats.wakeups as f64 / (stats.bytes_up.max(1) as f64 / (1 << 20) as f64),
    );
}

fn churn(c: &mut Criterion) {
    let echo = spawn_echo();
    let (_proxy, proxy_addr) = spawn_proxy(&[echo]);
    let mut g = c.benchmark_group("churn_open_echo_close");
    g.throughput(Throughput::Elements(1))
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    let msg = [0x5au8; 32];
    for (name, via) in ways(proxy_addr) {
        g.bench_function(name, |b| {
            b.iter(|| {
                let mut s: TcpStream = open(via, echo).expect("open");
                s.write_all(&msg).expect("write");
                let mut back = [0u8; 32];
                s.read_exact(&mut back).expect("echo");
                assert_eq!(back, msg);
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bulk, churn);
criterion_main!(benches);
