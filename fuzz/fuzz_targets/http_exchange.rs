//! The HTTP/1.1 exchange machine, driven by a fuzzer-chosen schedule: the
//! client and the upstream send arbitrary bytes in arbitrary pieces, EOFs
//! and timeouts come at arbitrary times, output room varies. The machine
//! never panics, every action keeps the pump's contract (sizes within the
//! input and the room, progress on every action but the stopping ones),
//! and its queues stay within their caps.
#![no_main]

use libfuzzer_sys::fuzz_target;
use portcullis::policy::{RequestRuleConfig, RequestRules, Target};
use portcullis::protocol::http1::exchange::{
    MAX_ANSWER_BYTES, MAX_ANSWER_LEN, MAX_DUE, MAX_RECORDS,
};
use portcullis::protocol::http1::{
    ClientAction, Exchange, ExchangeConfig, Mode, Status, UpstreamAction,
};
use std::sync::Arc;

const MAX_HEAD: usize = 1024;
/// The smallest output queue the contract allows.
const MIN_ROOM: usize = MAX_HEAD + 1024;

/// A bounded queue, as the session's buffers.
struct Queue {
    data: Vec<u8>,
    cap: usize,
}

impl Queue {
    fn room(&self) -> usize {
        self.cap.saturating_sub(self.data.len())
    }
}

fn config(flags: u8) -> ExchangeConfig {
    let origin = Target::new("origin.test", 80).unwrap();
    let mode = if flags & 1 == 0 {
        Mode::Tunnel {
            target: origin,
            tls: false,
        }
    } else {
        Mode::Forward {
            upstream: origin,
            tls: false,
        }
    };
    let mut config = ExchangeConfig::new(mode);
    config.max_head_bytes = MAX_HEAD;
    if flags & 2 != 0 {
        let rule = |action: &str, path: &str| {
            RequestRuleConfig::new(if action == "allow" {
                portcullis::policy::Action::Allow
            } else {
                portcullis::policy::Action::Deny
            })
            .path(path)
        };
        let rules = RequestRules::new(
            "fuzz".into(),
            &[rule("allow", "/a/**"), rule("deny", "/a/b/**")],
        )
        .unwrap();
        config.rules = Some(Arc::new(rules));
    }
    config
}

fn check_bounds(ex: &Exchange) {
    let q = ex.queued();
    assert!(q.exchanges <= MAX_DUE, "{q:?}");
    assert!(q.answer_bytes <= MAX_ANSWER_BYTES + MAX_ANSWER_LEN, "{q:?}");
    assert!(q.records <= MAX_RECORDS, "{q:?}");
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, mut ops)) = data.split_first() else {
        return;
    };
    let mut ex = Exchange::new(config(flags));
    let (mut cin, mut uin) = (Vec::new(), Vec::new());
    let mut uout = Queue {
        data: Vec::new(),
        cap: MIN_ROOM,
    };
    let mut cout = Queue {
        data: Vec::new(),
        cap: MIN_ROOM,
    };
    while let [op, len, rest @ ..] = ops {
        let n = usize::from(*len).min(rest.len());
        let (payload, rest) = rest.split_at(n);
        ops = rest;
        match op % 8 {
            0 | 1 => cin.extend_from_slice(payload),
            2 | 3 => uin.extend_from_slice(payload),
            4 => ex.client_eof(),
            5 => ex.upstream_eof(),
            6 => {
                // The peers read: room comes back, in a size the op picks.
                uout.data.clear();
                cout.data.clear();
                uout.cap = MIN_ROOM + n * 64;
                cout.cap = MIN_ROOM + usize::from(*len) * 16;
            }
            _ => {
                if ex.awaiting_response().is_some() {
                    assert!(ex.response_timeout());
                    assert!(matches!(ex.status(), Status::Closed { .. }));
                } else {
                    assert!(!ex.response_timeout());
                }
            }
        }
        // The pump: the client side until it stops...
        for i in 0.. {
            assert!(i < 100_000, "on_client never stops");
            let room = uout.room();
            match ex.on_client(&cin, room) {
                ClientAction::Forward(k) => {
                    assert!(k > 0 && k <= cin.len() && k <= room);
                    uout.data.extend(cin.drain(..k));
                }
                ClientAction::Send { consumed, bytes } => {
                    assert!(consumed > 0 && consumed <= cin.len() && bytes.len() <= room);
                    cin.drain(..consumed);
                    uout.data.extend_from_slice(&bytes);
                }
                ClientAction::Discard(k) => {
                    assert!(k > 0 && k <= cin.len());
                    cin.drain(..k);
                }
                ClientAction::Switch { .. } | ClientAction::Wait | ClientAction::Stopped => break,
            }
            check_bounds(&ex);
        }
        // ...then the client-bound side.
        for i in 0.. {
            assert!(i < 100_000, "on_upstream never stops");
            let room = cout.room();
            match ex.on_upstream(&uin, room) {
                UpstreamAction::Forward(k) => {
                    assert!(k > 0 && k <= uin.len() && k <= room);
                    cout.data.extend(uin.drain(..k));
                }
                UpstreamAction::Send { consumed, bytes } => {
                    assert!(consumed > 0 && consumed <= uin.len() && bytes.len() <= room);
                    uin.drain(..consumed);
                    cout.data.extend_from_slice(&bytes);
                }
                UpstreamAction::Answer(bytes) => {
                    assert!(!bytes.is_empty() && bytes.len() <= room.min(MAX_ANSWER_LEN));
                    cout.data.extend_from_slice(&bytes);
                }
                UpstreamAction::Upgrade => {
                    assert_eq!(ex.status(), Status::Upgraded);
                    return;
                }
                UpstreamAction::Wait | UpstreamAction::Close => break,
            }
            check_bounds(&ex);
        }
        let _ = ex.take_records().count();
        if let Status::Closed { answer, .. } = ex.status() {
            assert!(answer.is_none_or(|a| a.len() <= MAX_ANSWER_LEN));
            assert_eq!(ex.on_client(&cin, usize::MAX), ClientAction::Stopped);
            assert_eq!(ex.on_upstream(&uin, usize::MAX), UpstreamAction::Close);
            return;
        }
    }
});
