//! Running an [`Exchange`] script through the in-memory pump: whole, split
//! at every byte both ways, or with tight queues, and comparing the runs;
//! reading what the client got as responses; the fixtures the tests share.

use std::sync::Arc;

use super::exchange_sim::{Ending, Limits, Plan, Script, Sim, HEAD_MAX};
use crate::policy::{RequestRuleConfig, RequestRules};
use crate::protocol::http1::exchange::RequestJudge;
use crate::protocol::http1::{
    parse_response_head, response_body_kind, Body, ExchangeConfig, Mode, Record,
};
use crate::target::Target;

/// What one run produced, for comparing runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Outcome {
    pub(super) to_client: Vec<u8>,
    pub(super) to_upstream: Vec<u8>,
    pub(super) end: Ending,
    pub(super) records: Vec<Record>,
    pub(super) left: Vec<u8>,
}

impl Outcome {
    pub(super) fn client_text(&self) -> String {
        String::from_utf8_lossy(&self.to_client).into_owned()
    }
    pub(super) fn upstream_text(&self) -> String {
        String::from_utf8_lossy(&self.to_upstream).into_owned()
    }
    /// The statuses the client got, in order, for requests of `methods`.
    pub(super) fn statuses(&self, methods: &[&str]) -> Vec<u16> {
        responses(&self.to_client, methods)
            .iter()
            .map(|r| r.status)
            .collect()
    }
    /// The records' statuses, in order.
    pub(super) fn record_statuses(&self) -> Vec<Option<u16>> {
        self.records.iter().map(|r| r.status).collect()
    }
}

/// Runs `script` once with `plan` and `limits`.
pub(super) fn run_with(
    config: &ExchangeConfig,
    script: &Script,
    plan: Plan,
    limits: Limits,
) -> Outcome {
    let mut sim = Sim::new(config.clone(), script.clone(), plan, limits);
    sim.run();
    sim.outcome()
}

/// Runs `script` whole with roomy queues.
pub(super) fn run(config: &ExchangeConfig, script: &Script) -> Outcome {
    run_with(config, script, Plan::default(), Limits::roomy())
}

/// Runs `script` whole, then with each direction cut at every byte
/// position, one byte at a time, both one byte at a time, and with tight
/// queues and slow readers: every run must give the client and the
/// upstream the same bytes, end the same way and keep the same records.
/// Returns the whole run.
pub(super) fn run_split(config: &ExchangeConfig, script: &Script) -> Outcome {
    split_runs(config, script, Compare::All)
}

/// Like [`run_split`], comparing only how runs end and their records: for
/// a body that breaks its framing, how much of it went on before the break
/// was seen depends on the cuts.
pub(super) fn run_split_ends(config: &ExchangeConfig, script: &Script) -> Outcome {
    split_runs(config, script, Compare::Ends)
}

/// Like [`run_split`], comparing everything but the bytes the upstream
/// received: when it answers early and closes, how much of an upload went
/// up before the answer depends on the cuts, while the client must get the
/// same bytes every time.
pub(super) fn run_split_client(config: &ExchangeConfig, script: &Script) -> Outcome {
    split_runs(config, script, Compare::ButUpstream)
}

/// What split runs must have in common with the whole run.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Compare {
    All,
    /// How they end and their records.
    Ends,
    /// All but the bytes the upstream received.
    ButUpstream,
}

fn split_runs(config: &ExchangeConfig, script: &Script, compare: Compare) -> Outcome {
    let whole = run(config, script);
    let up_len: usize = script.upstream.iter().map(|r| r.bytes.len()).sum();
    let c_len = script.client.len();
    let check = |plan: Plan, limits: Limits, what: &str| {
        let mut got = run_with(config, script, plan, limits);
        if compare == Compare::Ends {
            got.to_client.clone_from(&whole.to_client);
        }
        if compare != Compare::All {
            got.to_upstream.clone_from(&whole.to_upstream);
        }
        assert_eq!(
            got,
            whole,
            "{what}: differs from the whole run\n got client: {:?}\nwant client: {:?}\n got upstream: {:?}\nwant upstream: {:?}",
            got.client_text(),
            whole.client_text(),
            got.upstream_text(),
            whole.upstream_text()
        );
    };
    for cut in 0..=c_len {
        let plan = Plan {
            client_cuts: vec![cut],
            ..Plan::default()
        };
        check(plan, Limits::roomy(), &format!("client cut at {cut}"));
    }
    for cut in 0..=up_len {
        let plan = Plan {
            upstream_cuts: vec![cut],
            ..Plan::default()
        };
        check(plan, Limits::roomy(), &format!("upstream cut at {cut}"));
    }
    let every = |n: usize| (0..=n).collect::<Vec<_>>();
    let one = |client: bool, upstream: bool| Plan {
        client_cuts: if client { every(c_len) } else { vec![] },
        upstream_cuts: if upstream { every(up_len) } else { vec![] },
    };
    check(
        one(true, false),
        Limits::roomy(),
        "client one byte at a time",
    );
    check(
        one(false, true),
        Limits::roomy(),
        "upstream one byte at a time",
    );
    check(one(true, true), Limits::roomy(), "both one byte at a time");
    check(
        Plan::default(),
        Limits::tight(),
        "tight queues, slow readers",
    );
    check(
        one(true, true),
        Limits::tight(),
        "tight and one byte at a time",
    );
    whole
}

/// One response as the client reads it.
#[derive(Debug, Clone)]
pub(super) struct Resp {
    pub(super) status: u16,
    pub(super) head: String,
    pub(super) body: Vec<u8>,
}

impl Resp {
    pub(super) fn header(&self, name: &str) -> Option<String> {
        let (head, _) = parse_response_head(self.head.as_bytes(), 1 << 20)
            .expect("parses")
            .expect("whole");
        head.header(name)
            .map(|v| String::from_utf8_lossy(v).into_owned())
    }
    pub(super) fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Splits what a client received into responses (interim ones included),
/// the n-th final one answering `methods[n]`; stops at anything that is
/// not a whole response (raw bytes after a 101, say).
pub(super) fn responses(mut bytes: &[u8], methods: &[&str]) -> Vec<Resp> {
    let mut out = Vec::new();
    let mut methods = methods.iter();
    let mut method = methods.next();
    while let Ok(Some((head, n))) = parse_response_head(bytes, 1 << 20) {
        let head_text = String::from_utf8_lossy(&bytes[..n]).into_owned();
        bytes = &bytes[n..];
        let m = method.copied().unwrap_or("GET");
        let kind = response_body_kind(m, &head).expect("framing");
        let mut body = Body::new(kind);
        let len = body.advance(bytes).expect("body");
        out.push(Resp {
            status: head.status,
            head: head_text,
            body: bytes[..len].to_vec(),
        });
        bytes = &bytes[len..];
        if head.status == 101 {
            break;
        }
        if !(100..200).contains(&head.status) {
            method = methods.next();
        }
    }
    out
}

/// The tunnel's target in the tests.
pub(super) fn origin() -> Target {
    Target::new("origin.test", 80).unwrap()
}

/// An inspected tunnel to [`origin`], every request allowed.
pub(super) fn tunnel() -> ExchangeConfig {
    ExchangeConfig {
        max_head_bytes: HEAD_MAX,
        ..ExchangeConfig::new(Mode::Tunnel {
            target: origin(),
            tls: false,
        })
    }
}

/// The forward proxy connected to [`origin`].
pub(super) fn forward() -> ExchangeConfig {
    ExchangeConfig {
        max_head_bytes: HEAD_MAX,
        ..ExchangeConfig::new(Mode::Forward {
            upstream: origin(),
            tls: false,
        })
    }
}

/// `allow GET /v1/**`, `deny * /v1/admin/**`, rule `api`.
pub(super) fn api_rules() -> Arc<dyn RequestJudge> {
    Arc::new(crate::core::verdicts::Rules(api_request_rules()))
}

/// [`api_rules`] as the policy holds them.
pub(super) fn api_request_rules() -> Arc<RequestRules> {
    let rule = |action: &str, method: &str, path: &str| {
        toml::from_str::<RequestRuleConfig>(&format!(
            "action = \"{action}\"\nmethod = \"{method}\"\npath = \"{path}\""
        ))
        .unwrap()
    };
    Arc::new(
        RequestRules::new(
            "api".into(),
            &[
                rule("allow", "GET", "/v1/**"),
                rule("deny", "*", "/v1/admin/**"),
            ],
        )
        .unwrap(),
    )
}

/// A GET for `path` to the origin.
pub(super) fn get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: origin.test\r\n\r\n")
}

/// A 200 whose body is `text`.
pub(super) fn ok(text: &str) -> String {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{text}",
        text.len()
    )
}
