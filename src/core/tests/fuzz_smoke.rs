//! The fuzz targets' drivers ([`crate::fuzzing::inspect_session`], and
//! [`crate::fuzzing::session`] on random scripts) on its
//! committed seeds and on seeded random scripts built from HTTP fragments:
//! what `scripts/fuzz.sh` explores for minutes, a few thousand steps of in
//! every test run.

use super::Rng;
use crate::fuzzing::inspect_session;

const FRAGMENTS: &[&[u8]] = &[
    b"GET /v1/a HTTP/1.1\r\nHost: origin.test\r\n\r\n",
    b"GET /v1/admin/x HTTP/1.1\r\nHost: origin.test\r\n\r\n",
    b"POST /v1/b HTTP/1.1\r\nHost: origin.test\r\nContent-Length: 5\r\n\r\nhello",
    b"POST /c HTTP/1.1\r\nHost: origin.test\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    b"GET http://origin.test/v1/a HTTP/1.1\r\nHost: origin.test\r\n\r\n",
    b"GET http://other.test/ HTTP/1.1\r\nHost: other.test\r\n\r\n",
    b"GET /ws HTTP/1.1\r\nHost: origin.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi",
    b"HTTP/1.1 100 Continue\r\n\r\n",
    b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    b"HTTP/1.1 204 No Content\r\n\r\n",
    b"\r\n",
    b"Content-Length: 99999999999999999999\r\n",
];

/// A fuzz script from `rng`: a flags byte, then up to `steps` steps, each
/// an opcode drawn from `ops` (repeats weigh it) and its argument; opcodes
/// 0 and 1 send a fragment (now and then with one byte changed) in pieces
/// of at most `piece` bytes, as the fuzzer cuts them.
fn script_of(
    rng: &mut Rng,
    fragments: &[&[u8]],
    ops: &[u8],
    steps: usize,
    piece: usize,
) -> Vec<u8> {
    let mut out = vec![rng.next() as u8];
    for _ in 0..rng.below(steps) {
        let op = rng.pick(ops);
        if op <= 1 {
            let mut bytes = fragments[rng.below(fragments.len())].to_vec();
            if rng.below(8) == 0 && !bytes.is_empty() {
                let at = rng.below(bytes.len());
                bytes[at] = rng.next() as u8;
            }
            send(&mut out, rng, op, &bytes, piece);
        } else {
            out.extend_from_slice(&[op, rng.next() as u8]);
        }
    }
    out
}

/// Appends steps that send `bytes` with opcode `op`, in pieces of at most
/// `piece` bytes.
fn send(out: &mut Vec<u8>, rng: &mut Rng, op: u8, bytes: &[u8], piece: usize) {
    for chunk in bytes.chunks(1 + rng.below(piece)) {
        out.extend_from_slice(&[op, chunk.len() as u8]);
        out.extend_from_slice(chunk);
    }
}

fn script(rng: &mut Rng) -> Vec<u8> {
    script_of(rng, FRAGMENTS, &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9], 40, 255)
}

#[test]
fn the_committed_seeds_run() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/corpus/inspect_session");
    let mut n = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        inspect_session(&std::fs::read(entry.unwrap().path()).unwrap());
        n += 1;
    }
    assert!(n >= 8, "{n} seeds");
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/corpus/session");
    let mut n = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        crate::fuzzing::session(&std::fs::read(entry.unwrap().path()).unwrap());
        n += 1;
    }
    assert!(n >= 3, "{n} session seeds");
}

#[test]
fn random_scripts_keep_the_cores_rules() {
    let mut rng = Rng(0x5eed_c0de_1234_5678);
    for _ in 0..10_000 {
        inspect_session(&script(&mut rng));
    }
}

/// What a client sends in a handshake: SOCKS5 messages (greetings, a
/// login for each user, requests of each address type, UDP ASSOCIATE) and
/// HTTP heads, whole, to be cut and mutated; for targets the policy
/// allows, refuses, names for bob only, and that resolve anywhere.
const HANDSHAKE_FRAGMENTS: &[&[u8]] = &[
    b"\x05\x01\x00",
    b"\x05\x02\x00\x02",
    b"\x05\x01\x02",
    b"\x01\x05alice\x02pw",
    b"\x01\x03bob\x02pw",
    b"\x01\x03bob\x03bad",
    b"\x05\x01\x00\x01\xc0\x00\x02\x07\x01\xbb",
    b"\x05\x01\x00\x03\x0borigin.test\x00\x50",
    b"\x05\x01\x00\x04\x20\x01\x0d\xb8\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x01\xbb",
    b"\x05\x03\x00\x01\x00\x00\x00\x00\x00\x00",
    b"CONNECT origin.test:443 HTTP/1.1\r\nHost: origin.test:443\r\n\r\n",
    b"CONNECT origin.test:443 HTTP/1.1\r\nProxy-Authorization: Basic YWxpY2U6cHc=\r\n\r\n",
    b"CONNECT origin.test:443 HTTP/1.1\r\nProxy-Authorization: Basic Ym9iOnB3\r\n\r\n",
    b"GET http://origin.test/a HTTP/1.1\r\nHost: origin.test\r\n\r\n",
    b"CONNECT evil.test:443 HTTP/1.1\r\n\r\n",
    b"CONNECT bob.test:443 HTTP/1.1\r\nProxy-Authorization: Basic Ym9iOnB3\r\n\r\n",
    b"CONNECT bob.test:443 HTTP/1.1\r\nProxy-Authorization: Basic YWxpY2U6cHc=\r\n\r\n",
    b"CONNECT 169.254.169.254:443 HTTP/1.1\r\n\r\n",
    b"\x05\x01\x00\x03\x08bob.test\x01\xbb",
    b"\x05\x01\x00\x05\x01\x00\x03\x0borigin.test\x01\xbb",
    b"\x05\x01\x02\x01\x03bob\x02pw\x05\x01\x00\x03\x08bob.test\x01\xbb",
    b"CONNECT origin.test:443 HTTP/1.1\r\n\r\n\x16\x03\x01\x00\x05hello",
    b"\x16\x03\x01\x00\x05hello",
    b"\r\n",
];

/// Mostly requests and the answers to what they lead to (resolves, pins,
/// connects, a parent's reply), with time passing; ends and resets rarer,
/// so that scripts get past the handshake often.
/// What a vetted tunnel's client sends first: a request naming a host
/// the policy inspects (a switch), one it refuses, and neither TLS nor
/// HTTP (relayed).
const FIRST_FLIGHTS: &[&[u8]] = &[
    b"GET / HTTP/1.1\r\nHost: api.test\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n",
    b"\x00\x01 neither TLS nor HTTP",
];

/// What a forward-proxy client asks next on its connection.
const NEXT_REQUESTS: &[&[u8]] = &[
    b"GET http://origin.test/b HTTP/1.1\r\nHost: origin.test\r\n\r\n",
    b"GET https://api.test/ HTTP/1.1\r\nHost: api.test\r\n\r\n",
    b"GET http://evil.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n",
    b"GET /relative HTTP/1.1\r\nHost: origin.test\r\n\r\n",
];

fn opening_script(rng: &mut Rng) -> Vec<u8> {
    const OPS: &[u8] = &[0, 0, 1, 4, 5, 5, 6, 7, 7, 7, 8, 8, 9, 9, 9, 9, 2, 3, 9];
    let mut out = script_of(rng, HANDSHAKE_FRAGMENTS, OPS, 24, 64);
    // Mostly a listener not past a limit, with room for a whole head, and
    // a whole request first.
    if rng.below(4) != 0 {
        out[0] = (out[0] & !16) | 32;
    }
    // Half with no users, on a listener that sniffs.
    if rng.below(2) == 0 {
        out[0] &= !0b1111;
    }
    if rng.below(4) != 0 {
        let mut first = vec![out[0]];
        let request = HANDSHAKE_FRAGMENTS[rng.below(HANDSHAKE_FRAGMENTS.len())];
        send(&mut first, rng, 0, request, 64);
        if rng.below(2) == 0 {
            // The resolver gives 45.1.1.1 alone, the connect completes, and
            // a first flight follows (vetted, on the ports rules inspect).
            first.extend_from_slice(&[7, 1, 9, 0]);
            let flight = FIRST_FLIGHTS[rng.below(FIRST_FLIGHTS.len())];
            send(&mut first, rng, 0, flight, 64);
        } else if rng.below(2) == 0 {
            // A forward-proxy exchange: resolved, connected, answered (a
            // response head), then the client's next request, for the same
            // host, another (established afresh) or one refused.
            first.extend_from_slice(&[7, 1, 9, 0, 9, 0]);
            let next = NEXT_REQUESTS[rng.below(NEXT_REQUESTS.len())];
            send(&mut first, rng, 0, next, 64);
        }
        first.extend_from_slice(&out[1..]);
        out = first;
    }
    out
}

#[test]
fn random_sessions_keep_the_machines_rules() {
    let mut rng = Rng(0x0a11_ce5e_c0de_f00d);
    let mut ends = std::collections::BTreeMap::<&str, usize>::new();
    for _ in 0..20_000 {
        let end = crate::fuzzing::session(&opening_script(&mut rng));
        *ends.entry(end).or_default() += 1;
    }
    // The scripts reach every end, a raw tunnel handed on and the exchange
    // among them, and vetted tunnels switched to the name their first
    // flight carried.
    for end in ["open", "refused", "left", "closed", "fronting", "inspected"] {
        assert!(ends.get(end).copied().unwrap_or(0) > 100, "{end}: {ends:?}");
    }
    let switched: usize = ends
        .iter()
        .filter(|(end, _)| end.starts_with("switched"))
        .map(|(_, n)| n)
        .sum();
    assert!(switched > 50, "{ends:?}");
}
