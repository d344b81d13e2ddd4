//! The head gate ([`crate::protocol::http::HeadGate`]) against the parse it
//! gates: random conversations (heads after empty lines, with bare LFs,
//! refused with bodies, cut short, with a byte changed; interim answers,
//! chunked ones, long ones, ones with a byte changed), cut into pieces down
//! to a byte at a time, run gated and ungated the same way. The gate only
//! decides when a head is parsed: each run must end as the ungated one.
//!
//! A head with a byte changed may be malformed, and the gate refuses that
//! later (by at most as many bytes again, or at the peer's EOF): what
//! happens meanwhile (an answer that closes, another request forwarded)
//! would end runs apart for that alone. So only the last head is
//! changed, either the client's (the upstream answering cleanly) or the
//! upstream's (the client sending nothing after the request it answers,
//! the upstream closing after it).

use super::exchange_sim::*;
use super::Rng;
use crate::protocol::http::UNGATED;
use crate::protocol::http1::ExchangeConfig;

fn api() -> ExchangeConfig {
    let mut c = tunnel();
    c.rules = Some(api_rules());
    c
}

/// `bytes` with one byte changed, now and then, when `on`.
fn mutate(rng: &mut Rng, on: bool, mut bytes: Vec<u8>) -> Vec<u8> {
    if on && rng.below(3) == 0 && !bytes.is_empty() {
        let at = rng.below(bytes.len());
        let any = rng.next() as u8;
        bytes[at] = rng.pick(&[b'\r', b'\n', b' ', b':', 0, 0x7f, b'x', any]);
    }
    bytes
}

/// A response to an allowed request (none closes but when `change`).
fn response(rng: &mut Rng, change: bool, i: usize) -> Vec<u8> {
    let body = format!("r{i}");
    let text = match rng.below(6) {
        0 => format!("HTTP/1.1 100 Continue\r\n\r\n{}", ok(&body)),
        // Refused for its bare LFs (and closing): a change too.
        1 if change => format!("HTTP/1.1 200 OK\nContent-Length: {}\n\n{body}", body.len()),
        2 => format!(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
            body.len()
        ),
        3 => format!(
            "HTTP/1.1 204 No Content\r\nX-Long: {}\r\n\r\n",
            "v".repeat(rng.below(300))
        ),
        4 => "\r\n".repeat(rng.below(20)) + &ok(&body),
        _ => ok(&body),
    };
    mutate(rng, change, text.into_bytes())
}

/// A random conversation; the client ends it.
fn conversation(rng: &mut Rng) -> Script {
    let change_client = rng.below(2) == 0;
    let mut client = Vec::new();
    let mut replies = Vec::new();
    let n = 1 + rng.below(5);
    for i in 0..n {
        let path = format!("/v1/a{i}");
        // When the upstream's answers change, the last request is one it
        // answers (and then closes).
        let last = i + 1 == n;
        let pick = match (change_client, last) {
            (false, true) => 0,
            (_, false) => rng.below(6),
            (true, true) => rng.below(7),
        };
        let head = match pick {
            // Allowed: the upstream answers once it has the whole head.
            0 | 1 => {
                let head = get(&path);
                replies.push(Reply::on(&head, response(rng, last && !change_client, i)));
                head
            }
            // After empty lines.
            2 => {
                let head = get(&path);
                replies.push(Reply::on(&head, response(rng, last && !change_client, i)));
                "\r\n".repeat(rng.below(40)) + &head
            }
            // Denied, with a body to skip.
            3 => format!(
                "POST /v1/admin/{i} HTTP/1.1\r\nHost: origin.test\r\nContent-Length: 5\r\n\r\nhello"
            ),
            // Denied, long.
            4 => format!(
                "GET /v1/admin/{i} HTTP/1.1\r\nHost: origin.test\r\nX-Pad: {}\r\n\r\n",
                "p".repeat(rng.below(2100))
            ),
            // Bare LF line ends.
            5 => format!("GET {path} HTTP/1.1\nHost: origin.test\n\n"),
            // Cut short (last only).
            _ => {
                let head = get(&path);
                head[..rng.below(head.len())].to_string()
            }
        };
        client.extend(mutate(rng, last && change_client, head.into_bytes()));
    }
    if !change_client {
        replies.push(Reply::eof_on(&get(&format!("/v1/a{}", n - 1))));
    }
    Script::new(client, replies).then_eof()
}

/// Runs `script` as `plan` and `limits` say, with the gates or without.
fn run_gated(script: &Script, plan: &Plan, limits: Limits, gated: bool) -> Outcome {
    UNGATED.with(|u| u.set(!gated));
    let out = run_with(&api(), script, plan.clone(), limits);
    UNGATED.with(|u| u.set(false));
    out
}

#[test]
fn random_conversations_end_gated_as_ungated_however_they_are_cut() {
    let mut rng = Rng(0x6a7e_4ead_0000_0001);
    for n in 0..300 {
        let script = conversation(&mut rng);
        let c_len = script.client.len();
        let up_len: usize = script.upstream.iter().map(|r| r.bytes.len()).sum();
        let every = |n: usize| (0..=n).collect::<Vec<_>>();
        let mut plans = vec![
            ("whole", vec![], vec![]),
            ("client bytewise", every(c_len), vec![]),
            ("upstream bytewise", vec![], every(up_len)),
            ("both bytewise", every(c_len), every(up_len)),
        ];
        for _ in 0..4 {
            let cuts = |rng: &mut Rng, len: usize| {
                let mut c: Vec<usize> = (0..rng.below(8)).map(|_| rng.below(len + 1)).collect();
                c.sort_unstable();
                c
            };
            let (cc, uc) = (cuts(&mut rng, c_len), cuts(&mut rng, up_len));
            plans.push(("random cuts", cc, uc));
        }
        for (what, client_cuts, upstream_cuts) in plans {
            let plan = Plan {
                client_cuts,
                upstream_cuts,
            };
            for limits in [Limits::roomy(), Limits::tight()] {
                let got = run_gated(&script, &plan, limits, true);
                let want = run_gated(&script, &plan, limits, false);
                assert_eq!(
                    got,
                    want,
                    "script {n}, {what} {plan:?}\nclient: {:?}\nreplies: {:?}\n got client: {:?}\nwant client: {:?}",
                    String::from_utf8_lossy(&script.client),
                    script
                        .upstream
                        .iter()
                        .map(|r| String::from_utf8_lossy(&r.bytes).into_owned())
                        .collect::<Vec<_>>(),
                    got.client_text(),
                    want.client_text(),
                );
            }
        }
    }
}
