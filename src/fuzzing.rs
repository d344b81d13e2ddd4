//! Entry points for the fuzz targets (`fuzz/`): not a stable API.
//!
//! [`inspect_session`] drives a whole inspected session's core, the one
//! production runs, on in-memory transports with virtual time, from a
//! fuzzer-chosen script; [`handshake`] drives the client's handshake core
//! (HTTP and SOCKS5, logins, the head limit) the same way.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::buffer::BufPool;
use crate::config::Timeouts;
use crate::core::inspect::{InspectCore, Setup};
use crate::core::link::Link;
use crate::core::mem::MemPort;
use crate::core::verdicts;
use crate::policy::{RequestRuleConfig, RequestRules};
use crate::protocol::http1::exchange::{MAX_ANSWER_BYTES, MAX_ANSWER_LEN, MAX_DUE, MAX_RECORDS};
use crate::protocol::http1::{ExchangeConfig, Mode};
use crate::target::Target;

/// Runs one inspected session from `data`: its first byte chooses the mode
/// (tunnel or forward proxy), request rules, and queue sizes; the rest is a
/// script of steps, each an opcode and an argument: a peer sends bytes
/// (taken from the script), half-closes or resets; a peer's read room
/// changes; virtual time passes (firing what is due); the rules are
/// reloaded. Panics when the core breaks a rule: the exchange's bounds,
/// the pump's contract (debug assertions), or a deadline still due after
/// it fired (a timer spin).
pub fn inspect_session(data: &[u8]) {
    let Some((&flags, mut script)) = data.split_first() else {
        return;
    };
    let origin = Target::new("origin.test", 80).expect("a valid target");
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
    let rules = || Some(fuzz_rules());
    let max_head = 1024;
    let buffer = if flags & 4 == 0 {
        max_head + 1024
    } else {
        64 * 1024
    };
    let start = Instant::now();
    let mut now = start;
    let setup = Setup {
        id: 0,
        exchange: ExchangeConfig {
            rules: verdicts::judge(if flags & 2 != 0 { rules() } else { None }),
            max_head_bytes: max_head,
            ..ExchangeConfig::new(mode)
        },
        timeouts: Timeouts {
            handshake: Duration::from_secs(10),
            connect: Duration::from_secs(10),
            response: Duration::from_secs(30),
            half_close: Duration::from_secs(60),
            ..Timeouts::default()
        },
        idle: (flags & 8 != 0).then(|| Duration::from_secs(20)),
        buffer,
    };
    let mut pool = BufPool::new(buffer, 0);
    let mut core = InspectCore::new(setup, Link::Plain, Link::Plain, &[], &[], &mut pool, now);
    let mut client = MemPort::roomy();
    let mut upstream = MemPort::roomy();
    let mut reloaded = false;
    while let [op, arg, rest @ ..] = script {
        script = rest;
        let n = usize::from(*arg);
        match op % 10 {
            0 | 1 => {
                let (bytes, rest) = script.split_at(n.min(script.len()));
                script = rest;
                let port = if op % 10 == 0 {
                    &mut client
                } else {
                    &mut upstream
                };
                port.deliver(bytes);
            }
            2 => client.fin = true,
            3 => upstream.fin = true,
            4 => client.reset = true,
            5 => upstream.reset = true,
            6 => client.room = n * 64,
            7 => upstream.room = n * 64,
            8 => {
                // As the shell does: fire what is due, pump, re-arm.
                now += Duration::from_millis(n as u64 * 500);
                if core.poll_timeout(&client).is_some_and(|due| due <= now) {
                    if core.handle_timeout(now, &client).is_err() {
                        return;
                    }
                    if core.pump(now, &mut client, &mut upstream).is_err() {
                        return;
                    }
                    if let Some(again) = core.poll_timeout(&client) {
                        assert!(
                            again > now,
                            "a deadline still due after it fired: a timer spin"
                        );
                    }
                }
            }
            _ => {
                reloaded = !reloaded;
                core.set_rules(if reloaded { rules() } else { None });
            }
        }
        let result = core.pump(now, &mut client, &mut upstream);
        let _ = core.take_records().count();
        let _ = core.take_relayed();
        let q = core.queued();
        assert!(q.exchanges <= MAX_DUE, "{q:?}");
        assert!(q.answer_bytes <= MAX_ANSWER_BYTES + MAX_ANSWER_LEN, "{q:?}");
        assert!(q.records <= MAX_RECORDS, "{q:?}");
        client.take();
        upstream.take();
        if result.is_err() {
            return;
        }
    }
}

/// `GET /v1/**` allowed, `/v1/admin/**` denied, everything else denied.
fn fuzz_rules() -> Arc<RequestRules> {
    let rule = |action: &str, method: &str, path: &str| {
        toml::from_str::<RequestRuleConfig>(&format!(
            "action = \"{action}\"\nmethod = \"{method}\"\npath = \"{path}\""
        ))
        .expect("a valid rule")
    };
    Arc::new(
        RequestRules::new(
            "fuzz".into(),
            &[
                rule("allow", "GET", "/v1/**"),
                rule("deny", "*", "/v1/admin/**"),
            ],
        )
        .expect("valid rules"),
    )
}

/// Runs one client handshake from `data`: its first byte chooses the
/// listener's protocol, whether users must log in (a plaintext user, or a
/// hashed one the verifier checks) and the head limit; the rest is a script
/// of steps: the client sends bytes (taken from the script), ends or
/// resets; its socket's write room changes; the verifier answers; time
/// passes (the deadline is 10 s in). Panics
/// when the core breaks a rule: a sub-stage that never settles, or a call
/// that waits while its transport could still move bytes it wants (on an
/// edge-triggered reactor, that session would hang).
pub fn handshake(data: &[u8]) {
    use crate::auth::Verdict;
    use crate::config::ListenerProtocol;
    use crate::core::clock::Deadline;
    use crate::core::handshake::{Env, HandshakeCore, Next};
    use crate::core::port::Port;

    let Some((&flags, mut script)) = data.split_first() else {
        return;
    };
    let protocol = match flags % 3 {
        0 => ListenerProtocol::Auto,
        1 => ListenerProtocol::Http,
        _ => ListenerProtocol::Socks5,
    };
    let (plain, hashed) = fuzz_users();
    let users = match (flags >> 2) & 3 {
        1 => Some(plain),
        2 => Some(hashed),
        _ => None,
    };
    let refusing = (flags & 16 != 0).then_some("fuzz limit");
    let max_head_bytes = if flags & 32 == 0 { 64 } else { 1024 };
    let logins = crate::auth::cache::LoginCache::new(4);
    // Virtual time: the deadline 10 s in; a time step moves `now` on.
    let start = std::time::Instant::now();
    let mut now = start;
    let limit = std::time::Duration::from_secs(10);
    let mut core = HandshakeCore::new(protocol, refusing, Deadline::after(start, limit));
    let mut port = MemPort::roomy();
    let mut awaiting = false;
    let take = |script: &mut &[u8], n: usize| -> Vec<u8> {
        let n = n.min(script.len());
        let (head, rest) = script.split_at(n);
        *script = rest;
        head.to_vec()
    };
    while let Some((&op, rest)) = script.split_first() {
        script = rest;
        let arg = take(&mut script, 1).first().copied().unwrap_or(0) as usize;
        let next = match op % 6 {
            0 | 1 => {
                let bytes = take(&mut script, arg);
                port.deliver(&bytes);
                None
            }
            2 => {
                port.fin = true;
                None
            }
            3 => {
                port.reset = true;
                None
            }
            4 => {
                port.room = if arg == 0 { usize::MAX } else { arg };
                None
            }
            _ if awaiting => {
                awaiting = false;
                let verdict = match arg % 3 {
                    0 => Verdict::Accepted("bob".into()),
                    1 => Verdict::Rejected,
                    _ => Verdict::Busy,
                };
                Some(core.handle_verdict(verdict))
            }
            // Time passes: `arg` seconds (the session's timer fires only at
            // the deadline or later; earlier, the core must say not yet).
            _ => {
                now += std::time::Duration::from_secs(arg as u64);
                let env = Env {
                    max_head_bytes,
                    users,
                    logins: &logins,
                };
                let due = now >= core.poll_timeout();
                let next = core.handle_timeout(now, env);
                assert_eq!(next.is_some(), due, "a timeout only at the deadline");
                next
            }
        };
        let env = Env {
            max_head_bytes,
            users,
            logins: &logins,
        };
        let mut next = next.unwrap_or(Next::Stay);
        // As the shell runs it: pumped again while the sub-stage changes.
        let mut settled = false;
        for _ in 0..64 {
            let before = core.stage();
            next = match next {
                Next::Stay => core.pump(&mut port, env),
                other => other,
            };
            if !matches!(next, Next::Stay) || core.stage() == before {
                settled = true;
                break;
            }
        }
        assert!(settled, "the handshake never settles");
        match next {
            Next::Stay => {
                // Waiting is only right when nothing it wants can move,
                // and (but for a login being verified) for something.
                assert!(
                    !port.can_read() && !port.can_write(),
                    "waits in {} while its transport is ready",
                    core.stage()
                );
                let (read, write) = port.wants();
                assert!(
                    read || write || core.stage() == "authenticating",
                    "waits in {} for nothing",
                    core.stage()
                );
            }
            Next::Verify(_) => awaiting = true,
            Next::Gone | Next::TimedOut | Next::Leave(_) => return,
        }
        let _ = port.take();
    }
}

/// A plaintext user and a hashed one (hashed once: argon2 is slow).
fn fuzz_users() -> &'static (crate::auth::Users, crate::auth::Users) {
    use crate::auth::{hash_password_with, Credentials, HashedUser, PhcHash, Users};
    static USERS: std::sync::OnceLock<(Users, Users)> = std::sync::OnceLock::new();
    USERS.get_or_init(|| {
        let plain = Users::new(Some(&Credentials::new("alice", "pw")), &[]).expect("a user");
        let hash = hash_password_with(b"pw", 64, 1, 1).expect("a hash");
        let bob = HashedUser::new("bob", PhcHash::parse(&hash).expect("a PHC string"));
        (plain, Users::new(None, &[bob]).expect("a user"))
    })
}
