//! Nothing grows without bound: a client that pipelines refused requests
//! and never reads is stopped by backpressure, records are capped, and
//! random conversations keep the contract (sizes, progress, bounds).

use super::exchange_sim::*;
use super::Rng;
use crate::protocol::http1::exchange::{MAX_ANSWER_BYTES, MAX_DUE, MAX_RECORDS};
use crate::protocol::http1::{ClientAction, Exchange, ExchangeConfig, UpstreamAction};

fn api(max_head: usize) -> ExchangeConfig {
    let mut c = tunnel();
    c.rules = Some(api_rules());
    c.max_head_bytes = max_head;
    c
}

fn denied(i: usize, pad: &str) -> String {
    format!("GET /v1/admin/{i} HTTP/1.1\r\nHost: origin.test\r\nX-Pad: {pad}\r\n\r\n")
}

/// 50 MB of pipelined denied GETs from a client that reads nothing: the
/// machine stops taking input once its queues are full, holds no more than
/// its caps, and once the client reads, every request is answered in order.
#[test]
fn pipelined_refusals_from_a_client_that_never_reads_stay_bounded() {
    let pad = "p".repeat(4000);
    let one = denied(0, &pad).len();
    let count = 50_000_000 / one;
    let mut client = String::with_capacity(count * (one + 8));
    for i in 0..count {
        client += &denied(i, &pad);
    }
    assert!(client.len() >= 50_000_000);
    let limits = Limits::roomy();
    let mut sim = Sim::new(
        api(8192),
        Script::new(&client, vec![]).then_eof(),
        Plan::default(),
        limits,
    );
    // No room for answers at all: the machine queues what it may, then
    // waits, and the client is no longer read.
    sim.resize_cout(0);
    sim.run();
    let q = sim.ex().queued();
    assert_eq!(q.exchanges, MAX_DUE, "{q:?}");
    assert!(q.answer_bytes <= MAX_ANSWER_BYTES, "{q:?}");
    assert!(sim.to_client.is_empty());
    assert!(
        sim.client_sent() <= (MAX_DUE + 1) * one + limits.cin,
        "the client got {} bytes in",
        sim.client_sent()
    );
    // Still stuck, however often it is asked.
    for _ in 0..3 {
        sim.run();
        assert_eq!(sim.ex().queued().exchanges, MAX_DUE);
    }
    // Room: everything drains, in order, and the machine stays bounded.
    sim.resize_cout(limits.cout);
    sim.run();
    let out = sim.outcome();
    assert_eq!(out.end, Ending::Closed(crate::protocol::http1::End::Done));
    assert!(out.to_upstream.is_empty());
    assert!(sim.peak.exchanges <= MAX_DUE, "{:?}", sim.peak);
    assert!(sim.peak.records <= MAX_RECORDS, "{:?}", sim.peak);
    let methods = vec!["GET"; count];
    let answers = responses(&out.to_client, &methods);
    assert_eq!(answers.len(), count);
    for (i, r) in answers.iter().enumerate() {
        assert_eq!(r.status, 403);
        assert!(
            r.text()
                .starts_with(&format!("GET /v1/admin/{i} is denied")),
            "answer {i} out of order: {}",
            r.text()
        );
    }
    assert_eq!(out.records.len(), count, "one record per request");
    assert_eq!(sim.records_dropped(), 0);
}

/// A head of a refused request has a cost too: small answers are counted
/// by their bytes, so big ones fill the queue sooner.
#[test]
fn answer_bytes_cap_the_queue_too() {
    let long = format!("/v1/admin/{}", "a".repeat(1000));
    let client = get(&long).repeat(200);
    let mut sim = Sim::new(
        api(8192),
        Script::new(&client, vec![]),
        Plan::default(),
        Limits::roomy(),
    );
    sim.resize_cout(0);
    sim.run();
    let q = sim.ex().queued();
    assert!(q.exchanges <= MAX_DUE);
    assert!(q.answer_bytes <= MAX_ANSWER_BYTES + 2048, "{q:?}");
}

/// Records nobody takes are capped; the oldest go, and are counted.
#[test]
fn untaken_records_are_capped() {
    let mut ex = Exchange::new(api(8192));
    let request = get("/v1/admin/x");
    let mut answered = 0;
    for _ in 0..MAX_RECORDS * 3 {
        let mut input = request.as_bytes();
        while let ClientAction::Discard(n) = ex.on_client(input, 1 << 20) {
            input = &input[n..];
        }
        while let UpstreamAction::Answer(_) = ex.on_upstream(b"", 1 << 20) {
            answered += 1;
        }
        assert!(ex.queued().records <= MAX_RECORDS);
    }
    assert_eq!(answered, MAX_RECORDS * 3);
    assert_eq!(ex.records_dropped(), (MAX_RECORDS * 2) as u64);
    assert_eq!(ex.take_records().count(), MAX_RECORDS);
}

const CLIENT_PIECES: &[&str] = &[
    "GET /v1/a HTTP/1.1\r\nHost: origin.test\r\n\r\n",
    "GET /v1/admin/b HTTP/1.1\r\nHost: origin.test\r\n\r\n",
    "POST /v1/c HTTP/1.1\r\nHost: origin.test\r\nContent-Length: 4\r\n\r\nbody",
    "POST /v1/d HTTP/1.1\r\nHost: origin.test\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    "GET /v1/ws HTTP/1.1\r\nHost: origin.test\r\nConnection: upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: k\r\n\r\n",
    "GET /v1/h2 HTTP/1.1\r\nHost: origin.test\r\nConnection: upgrade\r\nUpgrade: h2c\r\n\r\n",
    "GET /v1/e HTTP/1.1\r\nHost: evil.test\r\n\r\n",
    "PUT /v1/f HTTP/1.1\r\nHost: origin.test\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi",
    "HEAD /v1/g HTTP/1.1\r\nHost: origin.test\r\n\r\n",
    "GET /v1/h HTTP/1.1\r\nHost: origin.test\r\nConnection: close\r\n\r\n",
    "\r\n",
    "garbage \x00\x01",
    "5\r\nhello\r\n",
    "CONNECT a:1 HTTP/1.1\r\n\r\n",
];

const UPSTREAM_PIECES: &[&str] = &[
    "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nT: 1\r\n\r\n",
    "HTTP/1.1 100 Continue\r\n\r\n",
    "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
    "HTTP/1.1 204 No Content\r\n\r\n",
    "HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n",
    "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil close",
    "HTTP/1.1 413 Too Large\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
    "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n",
    "zz\r\n",
    "\x00\x7f",
];

/// Random mixes of good and broken messages, cut at random places, with
/// random queue sizes and reader speeds: the pump's contract checks
/// (sizes, progress, bounds) hold, and every run ends.
#[test]
fn random_conversations_keep_the_contract() {
    for seed in 1..400u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let mut client = String::new();
        for _ in 0..(rng.next() % 8) {
            client += rng.pick(CLIENT_PIECES);
        }
        let mut upstream = Vec::new();
        for _ in 0..(rng.next() % 8) {
            let gate = (rng.next() % (client.len() as u64 + 1)) as usize;
            upstream.push(Reply::at(gate, rng.pick(UPSTREAM_PIECES)));
        }
        if rng.next() % 3 == 0 {
            upstream.push(Reply::eof());
        }
        let mut script = Script::new(&client, upstream);
        script.client_eof = rng.next() % 2 == 0;
        let cut = |rng: &mut Rng, len: usize| {
            (0..rng.next() % 6)
                .map(|_| (rng.next() % (len as u64 + 1)) as usize)
                .collect()
        };
        let up_len = UPSTREAM_PIECES.iter().map(|p| p.len()).sum();
        let plan = Plan {
            client_cuts: cut(&mut rng, client.len()),
            upstream_cuts: cut(&mut rng, up_len),
        };
        let q = HEAD_MAX + 1024 + (rng.next() % 4096) as usize;
        let limits = Limits {
            cin: q,
            uout: q,
            uin: q,
            cout: q,
            client_reads: 1 + (rng.next() % 64) as usize,
            upstream_reads: 1 + (rng.next() % 64) as usize,
        };
        let mut config = tunnel();
        if rng.next() % 2 == 0 {
            config.rules = Some(api_rules());
        }
        let out = run_with(&config, &script, plan, limits);
        assert!(out.records.len() <= client.len(), "seed {seed}");
    }
}
