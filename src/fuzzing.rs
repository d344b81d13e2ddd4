//! Entry points for the fuzz targets (`fuzz/`): not a stable API.
//!
//! [`session`] drives the whole session machine production runs, from a
//! client's first byte (HTTP and SOCKS5, logins, the head limit, the
//! policy, DNS, connects, a parent proxy) through the exchange where a rule
//! inspects to its close or the raw hand-off, on in-memory transports with
//! virtual time, from a fuzzer-chosen script. [`inspect_session`] goes
//! deeper into one stage of it, the exchange: request rules and their
//! reloads, queue sizes, both peers' pace, ends and resets.

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

/// Runs one client session from its first byte, through the session
/// machine production runs (the opening, the exchange where a rule
/// inspects, the close it owns, or a raw tunnel's hand-off), from `data`. Its first byte chooses the
/// listener's protocol, whether users must log in (a plaintext user, or a
/// hashed one the verifier checks), the head limit, whether every dial
/// goes through a parent proxy, and whether one address is the proxy's
/// own; the rest is a script of steps: the client sends bytes (taken from
/// the script), ends or resets; its socket's write room changes; the
/// verifier answers; time passes; the resolver answers (addresses from a
/// pool of public, private, loopback, link-local and documentation ones,
/// none, or an error); the inspected names settle; a connect completes or
/// fails; the parent, or once open the destination, answers (bytes from
/// the script: a response to an inspected request) or resets.
///
/// Panics when the machine breaks a rule: a stage that never settles; a
/// handshake or a vetted tunnel that waits while the client's transport
/// could move bytes it wants (or for nothing); a client read while the
/// target is established; an action
/// out of order (a record after the end, a second target, a dial before
/// the admission or while another is in flight); an address dialled that
/// the resolver did not give, that a rule does not name (private,
/// loopback, link-local), or that is the proxy's own; a rule for other
/// users admitting this one; a deadline answered early, or passed without
/// an end; anything but silence after the end. Returns how it ended
/// (`open` for a raw tunnel relayed, `upgraded`, `refused`, `fronting`,
/// `left`, `closed`; `working` when the script ran out first; `inspected`
/// for a session that reached the exchange and closed or ran out there),
/// so a test can see what its scripts reach.
pub fn session(data: &[u8]) -> &'static str {
    use std::net::{IpAddr, SocketAddr};

    use crate::auth::Verdict;
    use crate::config::ListenerProtocol;
    use crate::core::clock::Deadline;
    use crate::core::establish::Action as Establish;
    use crate::core::opening::{Action, Input, Refusing};
    use crate::core::port::Port;
    use crate::core::session::{Next, SessionCore};
    use crate::target::Host;

    let Some((&flags, mut script)) = data.split_first() else {
        return "working";
    };
    let protocol = match flags & 3 {
        1 => ListenerProtocol::Http,
        2 => ListenerProtocol::Socks5,
        _ => ListenerProtocol::Auto,
    };
    let (plain, hashed) = fuzz_users();
    let users = match (flags >> 2) & 3 {
        1 => Some(plain),
        2 => Some(hashed),
        _ => None,
    };
    let refusing = (flags & 16 != 0).then_some("fuzz limit");
    let own: SocketAddr = ([45, 1, 1, 2], 443).into();
    let env = OpeningEnv {
        policy: opening_policy(),
        users,
        logins: crate::auth::cache::LoginCache::new(4),
        max_head_bytes: if flags & 32 == 0 { 64 } else { 1024 },
        parent: (flags & 64 != 0).then(|| {
            Arc::new(crate::target::parent::ParentProxy::parse(PARENT).expect("a parent"))
        }),
        own: (flags & 128 != 0).then_some(own),
        // (Users 3 is no users, with the inspected names not yet resolved.)
        pins_settled: std::cell::Cell::new((flags >> 2) & 3 != 3),
        now: std::cell::Cell::new(Instant::now()),
    };
    let pool: [IpAddr; 8] = [
        [45, 1, 1, 1].into(),
        [45, 1, 1, 2].into(),
        [10, 0, 0, 1].into(),
        [127, 0, 0, 1].into(),
        [169, 254, 169, 254].into(),
        [192, 0, 2, 7].into(),
        [45, 1, 1, 9].into(),
        std::net::Ipv6Addr::LOCALHOST.into(),
    ];
    let start = env.now.get();
    let limit = Duration::from_secs(10);
    let mut core = SessionCore::accept(protocol, refusing, Deadline::after(start, limit));
    // The session reached the exchange; some target was admitted.
    let mut inspected = false;
    let mut ever_admitted = false;
    let mut client = MemPort::roomy();
    let mut upstream: Option<MemPort> = None;
    // What the machine has asked for and been told, to check it by.
    let mut awaiting_verdict = false;
    let mut resolving = false;
    let mut awaiting_pins = false;
    let mut in_flight = false;
    let mut ended = false;
    let mut end = "working";
    // The machine refused the client (the end, as the records name it);
    // its answer and close may still be on the way.
    let mut refused: Option<&'static str> = None;
    let mut switches = 0;
    let mut identified: Option<Option<Arc<str>>> = None;
    let mut target: Option<crate::target::Target> = None;
    let mut admitted = false;
    let mut answer: Vec<IpAddr> = Vec::new();
    let take = |script: &mut &[u8], n: usize| -> Vec<u8> {
        let n = n.min(script.len());
        let (head, rest) = script.split_at(n);
        *script = rest;
        head.to_vec()
    };
    // The first step is the one the session takes on accepting: a pump.
    let mut accepted = false;
    loop {
        // The label before the step, as the shell's transition point sees it.
        let mut before = (core.name(), core.stage());
        let mut next = if !std::mem::replace(&mut accepted, true) {
            None
        } else {
            let Some((&op, rest)) = script.split_first() else {
                break;
            };
            script = rest;
            let arg = take(&mut script, 1).first().copied().unwrap_or(0) as usize;
            let now = env.now.get();
            match op % 10 {
                0 | 1 => {
                    let bytes = take(&mut script, arg);
                    client.deliver(&bytes);
                    None
                }
                2 => {
                    client.fin = true;
                    None
                }
                3 => {
                    client.reset = true;
                    None
                }
                4 => {
                    client.room = if arg == 0 { usize::MAX } else { arg };
                    None
                }
                5 if awaiting_verdict => {
                    awaiting_verdict = false;
                    let verdict = match arg % 3 {
                        0 => Verdict::Accepted("bob".into()),
                        1 => Verdict::Rejected,
                        _ => Verdict::Busy,
                    };
                    Some(core.handle(now, Input::Verdict(verdict), &env))
                }
                // Time passes: `arg` seconds. The session's timer fires only at
                // the deadline or later; earlier, the machine must say not yet.
                5 | 6 => {
                    let now = now + Duration::from_secs(arg as u64 % 16);
                    env.now.set(now);
                    let due = core.poll_timeout(&client);
                    let before = (core.name(), core.stage());
                    let next = core.handle_timeout(now, &mut client, upstream.as_mut(), &env);
                    match due {
                        // An end, or a refusal (its answer on the way out).
                        Some(due) if due <= now => assert!(
                            !matches!(next, Next::Working) || core.closing(),
                            "its deadline passed in {before:?} without an end"
                        ),
                        _ => assert!(
                            matches!(next, Next::Working) && before == (core.name(), core.stage()),
                            "a timeout before the deadline: {next:?}"
                        ),
                    }
                    Some(next)
                }
                7 if resolving => {
                    resolving = false;
                    let result = match arg % 6 {
                        5 => Err(std::io::ErrorKind::NotFound.into()),
                        n => {
                            let addrs: Vec<IpAddr> =
                                (0..n).map(|i| pool[(arg / 6 + i) % 8]).collect();
                            answer = addrs.clone();
                            Ok(addrs)
                        }
                    };
                    Some(core.handle(now, Input::Resolved(result), &env))
                }
                8 if awaiting_pins => {
                    awaiting_pins = false;
                    env.pins_settled.set(true);
                    Some(core.handle(now, Input::PinsSettled, &env))
                }
                9 if in_flight && core.connecting() => {
                    in_flight = false;
                    // Reported by the shell, or seen on the socket by the
                    // machine's next pump (writable, or an error).
                    let up = upstream.as_mut().expect("a connect in flight has a socket");
                    match arg % 4 {
                        0 => {
                            up.room = usize::MAX;
                            Some(core.handle(now, Input::Connected, &env))
                        }
                        1 => {
                            upstream = None;
                            let refused = std::io::ErrorKind::ConnectionRefused.into();
                            Some(core.handle(now, Input::ConnectFailed(refused), &env))
                        }
                        2 => {
                            up.room = usize::MAX;
                            None
                        }
                        _ => {
                            up.reset = true;
                            None
                        }
                    }
                }
                9 => {
                    // The parent, once connected, answers (or resets).
                    if let Some(up) = upstream.as_mut() {
                        match arg % 3 {
                            0 => up.deliver(b"HTTP/1.1 200 Connection established\r\n\r\n"),
                            1 => up.deliver(&take(&mut script, arg / 3)),
                            _ => up.reset = true,
                        }
                    }
                    None
                }
                // A report the machine did not ask for: it must change nothing.
                _ => {
                    let before = (core.name(), core.stage());
                    let stray = match arg % 4 {
                        0 => Input::Verdict(Verdict::Accepted("mallory".into())),
                        1 => Input::Resolved(Ok(vec![pool[3]])),
                        2 => Input::PinsSettled,
                        _ => Input::Connected,
                    };
                    // (Only what the machine is not waiting for is stray.)
                    let awaited = match stray {
                        Input::Verdict(_) => awaiting_verdict,
                        Input::Resolved(_) => resolving,
                        Input::PinsSettled => awaiting_pins,
                        _ => core.connecting(),
                    };
                    if awaited {
                        None
                    } else {
                        let next = core.handle(now, stray, &env);
                        assert!(
                            matches!(next, Next::Working) && before == (core.name(), core.stage()),
                            "a stray report moved the machine: {next:?}"
                        );
                        None
                    }
                }
            }
        };
        // As the shell runs it: pumped again while the stage changes, the
        // actions carried out after every call.
        let mut settled = false;
        for _ in 0..64 {
            let now = env.now.get();
            // A report's answer, unless it only says "working": then the
            // machine is pumped (a new stage acts at once, as the session's
            // does, even when it came from a report answered in the middle
            // of the last call's actions).
            let n = match next.take() {
                Some(n) if !matches!(n, Next::Working | Next::Again) => n,
                _ => core.pump(now, &mut client, upstream.as_mut(), &env),
            };
            while let Some(action) = core.poll_action() {
                assert!(!ended, "an action after the end: {action:?}");
                assert!(refused.is_none(), "an action after the refusal: {action:?}");
                match action {
                    Action::Refusing(why) => {
                        // The shell closes the upstream; the answer is the
                        // machine's to write.
                        upstream = None;
                        in_flight = false;
                        let label = match why {
                            Refusing::Answered { .. } => "left",
                            Refusing::Target(_) => "refused",
                            Refusing::Fronting { .. } => "fronting",
                            Refusing::Revoked(_) => "revoked",
                        };
                        refused = Some(label);
                        end = label;
                    }
                    Action::Identified { user, .. } => {
                        assert!(identified.is_none(), "identified twice");
                        identified = Some(user);
                    }
                    Action::Switched { .. } => {
                        // The first upstream closes; the named host is
                        // established afresh.
                        assert!(target.is_some() && admitted, "a switch before a tunnel");
                        switches += 1;
                        target = None;
                        admitted = false;
                        in_flight = false;
                        upstream = None;
                    }
                    Action::Note(_) => {}
                    // The exchange's (it may have started and ended within
                    // one call): only after an admission.
                    Action::Failed { .. } | Action::Request(_) | Action::Relayed { .. } => {
                        assert!(ever_admitted, "an exchange's record before any admission");
                        inspected = true;
                    }
                    // No trust here: the https request is refused.
                    Action::Trust => {
                        assert!(admitted, "trust asked before a tunnel");
                        let no = Err("no trust in the fuzz world".to_string());
                        next = Some(core.handle(now, Input::Trusted(no), &env));
                    }
                    Action::CloseUpstream => {
                        // The exchange ended, or the forward proxy goes on
                        // to another host (a second target, admitted afresh).
                        assert!(ever_admitted, "an upstream let go before any admission");
                        inspected = true;
                        target = None;
                        admitted = false;
                        in_flight = false;
                        upstream = None;
                    }
                    // No leaf is minted here: the terminated tunnel ends
                    // as a TLS failure.
                    Action::Certify(_) => {
                        let no = Err("no certificates in the fuzz world".to_string());
                        next = Some(core.handle(now, Input::Certified(no), &env));
                    }
                    Action::Target(t) => {
                        assert!(target.is_none(), "a second target");
                        assert!(identified.is_some(), "a target before the handshake's end");
                        if let Host::Ip(ip) = t.host {
                            answer = vec![ip];
                        }
                        target = Some(t);
                    }
                    Action::Verify(_) => {
                        assert!(core.handshaking() && !awaiting_verdict);
                        awaiting_verdict = true;
                    }
                    Action::Establish(Establish::Resolve(_)) => resolving = true,
                    Action::Establish(Establish::AwaitPins) => awaiting_pins = true,
                    Action::Establish(Establish::Admitted { rule, .. }) => {
                        assert!(!admitted, "admitted twice");
                        admitted = true;
                        ever_admitted = true;
                        if rule.contains("bob.test") {
                            let user = identified.clone().flatten();
                            assert_eq!(user.as_deref(), Some("bob"), "another user's rule");
                        }
                    }
                    Action::Establish(Establish::Dial(addr, vetted)) => {
                        assert!(admitted, "a dial before the admission");
                        assert!(!in_flight, "a second connect in flight");
                        assert!(answer.contains(&vetted), "{vetted} was never resolved");
                        let special = [pool[2], pool[3], pool[4], pool[7]];
                        assert!(!special.contains(&vetted), "{vetted}: no rule names it");
                        let port = target.as_ref().map_or(0, |t| t.port);
                        if env.own.is_some() {
                            assert_ne!(SocketAddr::new(vetted, port), own, "the proxy's own");
                        }
                        match &env.parent {
                            Some(_) => assert_eq!(addr.to_string(), PARENT_ADDR),
                            None => assert_eq!(addr, SocketAddr::new(vetted, port)),
                        }
                        in_flight = true;
                        // As the shell dials: writes watched, nothing
                        // taken until the connect completes.
                        let mut port = MemPort::default();
                        port.want_write(true);
                        upstream = Some(port);
                    }
                }
            }
            if core.name() == "Inspect" {
                inspected = true;
            }
            if !matches!(n, Next::Working | Next::Again) {
                assert!(!ended, "ended twice: {n:?}");
                ended = true;
                end = match n {
                    Next::Relay(_) => "open",
                    Next::Upgraded(_) => "upgraded",
                    Next::Associate { .. } => "left",
                    Next::Closed(_) | Next::Reset(_) => refused.unwrap_or("closed"),
                    Next::Working | Next::Again => unreachable!(),
                };
                if matches!(n, Next::Relay(_) | Next::Upgraded(_)) {
                    assert!(
                        upstream.is_some(),
                        "a tunnel handed on without its upstream"
                    );
                }
                if let Next::Reset(reason) = n {
                    // Only a refused client's answer cut off by the close
                    // deadline is reset, or an exchange's client whose
                    // response was cut short.
                    assert!(
                        refused.is_some() || inspected,
                        "a reset without a refusal or an exchange: {reason:?}"
                    );
                }
                assert_eq!(core.poll_timeout(&client), None, "a deadline after the end");
                settled = true;
                break;
            }
            let after = (core.name(), core.stage());
            if before == after {
                settled = true;
                break;
            }
            before = after;
        }
        assert!(settled, "the machine never settles");
        if ended {
            return label(end, switches, inspected);
        }
        if core.handshaking() || core.vetting() {
            // Waiting is only right when nothing it wants can move, and
            // (but for a login being verified) for something.
            assert!(
                !client.can_read() && !client.can_write(),
                "waits in {} while its transport is ready",
                core.stage()
            );
            let (read, write) = client.wants();
            assert!(
                read || write || core.stage() == "authenticating",
                "waits in {} for nothing",
                core.stage()
            );
        } else if core.closing() {
            // The answer's write, or the linger's read for the EOF.
            let (read, write) = client.wants();
            assert!(read || write, "closing waits for nothing");
        } else if core.name() == "Inspect" {
            // The exchange reads and writes as its queues allow.
        } else {
            assert_eq!(
                client.wants(),
                (false, false),
                "the client read while establishing"
            );
        }
        let _ = client.take();
        if let Some(up) = upstream.as_mut() {
            let _ = up.take();
        }
    }
    label(end, switches, inspected)
}

/// How a session ended, as [`session`] names it.
fn label(end: &'static str, switches: usize, inspected: bool) -> &'static str {
    match (end, switches, inspected) {
        ("closed" | "working", 0, true) => "inspected",
        (end, 0, _) => end,
        (end, _, _) => switched(end),
    }
}

/// An end, after a switch.
fn switched(end: &'static str) -> &'static str {
    match end {
        "open" => "switched, open",
        "refused" => "switched, refused",
        "working" => "switched, working",
        _ => "switched, closed",
    }
}

const PARENT: &str = "http://45.0.0.9:3128";
const PARENT_ADDR: &str = "45.0.0.9:3128";

/// The opening machine's world in the fuzz target: a real policy, the
/// users, the parent and the proxy's own address the flags chose, and the
/// virtual clock.
struct OpeningEnv {
    policy: crate::policy::Policy,
    users: Option<&'static crate::auth::Users>,
    logins: crate::auth::cache::LoginCache,
    max_head_bytes: usize,
    parent: Option<Arc<crate::target::parent::ParentProxy>>,
    own: Option<std::net::SocketAddr>,
    pins_settled: std::cell::Cell<bool>,
    now: std::cell::Cell<Instant>,
}

impl crate::core::establish::Env for OpeningEnv {
    fn check_name(&self, target: &Target, user: Option<&str>) -> crate::policy::NameVerdict {
        self.policy.check_name_as(target, user)
    }
    fn check_resolved(
        &self,
        target: &Target,
        user: Option<&str>,
        addrs: &[std::net::IpAddr],
    ) -> crate::policy::Verdict {
        self.policy
            .check_resolved_as(target, user, addrs, self.now.get())
    }
    fn remember(&self, host: &crate::target::Host, addrs: &[std::net::IpAddr]) {
        self.policy.remember(host, addrs, self.now.get());
    }
    fn pins_settled(&self) -> bool {
        self.pins_settled.get()
    }
    fn is_own(&self, addr: std::net::SocketAddr) -> bool {
        self.own == Some(addr)
    }
    fn take_handshake(&self) -> Result<(), String> {
        Ok(())
    }
    fn default_parent(&self) -> Option<&Arc<crate::target::parent::ParentProxy>> {
        self.parent.as_ref()
    }
    fn vets_port(&self, port: u16) -> bool {
        port == 80 || port == 443
    }
}

impl crate::core::session::Env for OpeningEnv {
    fn id(&self) -> u64 {
        1
    }
    fn timeouts(&self) -> crate::config::Timeouts {
        crate::config::Timeouts {
            handshake: Duration::from_secs(10),
            close: Duration::from_secs(3),
            idle: Some(Duration::from_secs(12)),
            ..crate::config::Timeouts::default()
        }
    }
    fn secrets(&self) -> Option<Arc<crate::policy::secret::Secrets>> {
        None
    }
    fn inspect_buffer(&self) -> usize {
        // A head and then some: small, so that queues fill.
        self.max_head_bytes + 1024
    }
}

impl crate::core::opening::Env for OpeningEnv {
    fn handshake(&self) -> crate::core::handshake::Env<'_> {
        crate::core::handshake::Env {
            max_head_bytes: self.max_head_bytes,
            users: self.users,
            logins: &self.logins,
        }
    }
    fn connect_timeout(&self) -> Duration {
        Duration::from_secs(10)
    }
    fn handshake_timeout(&self) -> Duration {
        Duration::from_secs(10)
    }
    fn close_timeout(&self) -> Duration {
        Duration::from_secs(3)
    }
    fn fronting(
        &self,
        target: &Target,
        user: Option<&str>,
        named: &Target,
    ) -> Option<crate::policy::Fronting> {
        self.policy.fronting(target, user, named, self.now.get())
    }
}

/// evil.test refused; origin.test:443 allowed raw, :80 inspected;
/// api.test:443 inspected (a raw tunnel's first flight naming it switches
/// to it, and raw tunnels to 443 and 80 are vetted);
/// bob.test:443 for bob only; the documentation address 192.0.2.7:443
/// named, so allowed; nothing private, loopback or link-local.
fn opening_policy() -> crate::policy::Policy {
    use crate::policy::{parse_cli_inspect, parse_cli_rule, Action};
    let mut bob = parse_cli_rule(Action::Allow, "bob.test:443").expect("a rule");
    bob.users = Some(vec!["bob".into()]);
    crate::policy::Policy::from_rules(&[
        parse_cli_rule(Action::Deny, "evil.test").expect("a rule"),
        parse_cli_rule(Action::Allow, "origin.test:443").expect("a rule"),
        parse_cli_inspect("origin.test:80").expect("a rule"),
        parse_cli_inspect("api.test:443").expect("a rule"),
        bob,
        parse_cli_rule(Action::Allow, "192.0.2.7:443").expect("a rule"),
    ])
    .expect("valid rules")
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
