//! What terminating TLS costs the reactor per connection, without I/O:
//! minting a leaf (shared key, and a key per leaf), a cache hit, the
//! per-connection ServerConfig, and a whole in-memory handshake (server and
//! client both in this thread, so the figure is the sum of the two sides).
//! `cargo bench --bench tls`.
//!
//! Measured on the 2-core development machine under a load average of ~10
//! (other builds running), medians: mint with the shared key 116 µs, with a
//! key per leaf 264 µs, cache hit 0.2 µs, per-connection ServerConfig
//! 0.4 µs, whole TLS 1.3 handshake (both sides) 2.1 ms.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use criterion::{criterion_group, criterion_main, Criterion};
use portcullis::policy::Host;
use portcullis::tls::{CertAuthority, ClientConfigs, LeafCache, LeafKeys, Minter, ServerConfigs};
use rustls::pki_types::ServerName;
use rustls::{ClientConnection, RootCertStore, ServerConnection};

fn state_dir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("portcullis-bench-tls-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Runs a whole handshake between two in-memory connections.
fn handshake(server: &mut ServerConnection, client: &mut ClientConnection) {
    let mut buf = Vec::with_capacity(16 * 1024);
    while client.is_handshaking() || server.is_handshaking() {
        buf.clear();
        client.write_tls(&mut buf).unwrap();
        if !buf.is_empty() {
            server.read_tls(&mut &buf[..]).unwrap();
            server.process_new_packets().unwrap();
        }
        buf.clear();
        server.write_tls(&mut buf).unwrap();
        if !buf.is_empty() {
            client.read_tls(&mut &buf[..]).unwrap();
            client.process_new_packets().unwrap();
        }
    }
}

fn tls(c: &mut Criterion) {
    let dir = state_dir();
    let ca = Arc::new(CertAuthority::load_or_generate(&dir).unwrap());
    let shared = Minter::new(ca.clone(), LeafKeys::Shared).unwrap();
    let per_leaf = Minter::new(ca.clone(), LeafKeys::PerLeaf).unwrap();
    let name = Host::Domain("api.example.com".into());

    let mut g = c.benchmark_group("tls");
    g.sample_size(300)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    g.bench_function("mint_shared_key", |b| {
        b.iter(|| shared.mint(black_box(&name)).unwrap())
    });
    g.bench_function("mint_key_per_leaf", |b| {
        b.iter(|| per_leaf.mint(black_box(&name)).unwrap())
    });

    let mut cache = LeafCache::new(1024);
    cache.get_or_mint(&shared, &name).unwrap();
    g.bench_function("cache_hit", |b| {
        b.iter(|| cache.get(black_box(&name), SystemTime::now()).unwrap())
    });

    let servers = ServerConfigs::new();
    let leaf = shared.mint(&name).unwrap().key;
    g.bench_function("server_config_for_leaf", |b| {
        b.iter(|| servers.for_leaf(black_box(leaf.clone())))
    });

    let mut roots = RootCertStore::empty();
    roots.add(ca.cert_der().clone()).unwrap();
    // Full handshakes every time: no client-side resumption.
    let mut client_config = (*ClientConfigs::with_roots(roots).config()).clone();
    client_config.resumption = rustls::client::Resumption::disabled();
    let client_config = Arc::new(client_config);
    let sni = ServerName::try_from("api.example.com").unwrap();
    g.bench_function("handshake_tls13_both_sides", |b| {
        b.iter(|| {
            let mut s = ServerConnection::new(servers.for_leaf(leaf.clone())).unwrap();
            let mut c = ClientConnection::new(client_config.clone(), sni.clone()).unwrap();
            handshake(&mut s, &mut c);
        })
    });
    g.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, tls);
criterion_main!(benches);
