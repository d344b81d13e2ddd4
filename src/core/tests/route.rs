//! Routing a request, on data: the name checked (or not) before DNS, the
//! resolving stage's transitions, each admission a real policy's verdict
//! comes to (refused by a rule or a special range, waiting for the pins,
//! the proxy's own addresses dropped or refused, the handshake budget
//! charged only for terminated tunnels, the parent route), and the state
//! (and reply) each dialect goes on with once the upstream is open.

use std::cell::Cell;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::ClientKey;
use crate::core::dial::{Action, DialCore, Input as DialInput, Outcome, Unreachable};
use crate::core::refusal::{Dialect, Refusal};
use crate::core::route::{
    admit, after_connect, describe_client, start, Admission, Admitted, After, Input, Next,
    ResolvingCore, Start, Treatment,
};
use crate::lifecycle::CloseReason;
use crate::policy::{
    parse_cli_inspect, parse_cli_rule, parse_cli_terminate, Action as RuleAction, Allowed, Denial,
    Host, NameVerdict, Policy, RuleConfig, RuleMode, Verdict,
};
use crate::protocol::parent::ParentProxy;
use crate::target::Target;

const HTTP_REPLY: &[u8] = b"HTTP/1.1 200 Connection established\r\n\r\n";
/// SOCKS5 success, BND.ADDR 0.0.0.0 and BND.PORT 0.
const SOCKS5_REPLY: &[u8] = &[5, 0, 0, 1, 0, 0, 0, 0, 0, 0];
const ROUTED_PARENT: &str = "http://45.0.0.8:3128";
const DEFAULT_PARENT: &str = "http://45.0.0.9:3128";

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn sock(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// evil.test refused; good.test:443 terminated, plain.test:80 inspected,
/// raw.test:443 raw; routed.test through its own parent, direct.test never
/// through one; audited.test let through by audit mode; idle.test with
/// its own idle timeout.
fn policy() -> Policy {
    let mut routed = parse_cli_rule(RuleAction::Allow, "routed.test:443").unwrap();
    routed.upstream_proxy = Some(ROUTED_PARENT.into());
    let mut direct = parse_cli_rule(RuleAction::Allow, "direct.test:443").unwrap();
    direct.upstream_proxy = Some("direct".into());
    let mut audited = parse_cli_rule(RuleAction::Deny, "audited.test").unwrap();
    audited.mode = Some(RuleMode::Audit);
    let idle = RuleConfig::allow("idle.test")
        .port(443)
        .idle_timeout(Some(Duration::from_secs(7)))
        .build();
    Policy::from_rules(&[
        parse_cli_rule(RuleAction::Deny, "evil.test").unwrap(),
        parse_cli_terminate("good.test:443").unwrap(),
        parse_cli_inspect("plain.test:80").unwrap(),
        parse_cli_rule(RuleAction::Allow, "raw.test:443").unwrap(),
        parse_cli_rule(RuleAction::Allow, "evil.test:443").unwrap(),
        routed,
        direct,
        audited,
        parse_cli_rule(RuleAction::Allow, "audited.test:443").unwrap(),
        idle,
    ])
    .unwrap()
}

fn parent(url: &str) -> Arc<ParentProxy> {
    Arc::new(ParentProxy::parse(url).unwrap())
}

/// One call of [`admit`] on the policy's verdict for `host:port` resolved
/// to `addrs`, with the shell's answers as data.
struct Case {
    host: &'static str,
    port: u16,
    addrs: Vec<IpAddr>,
    dialect: Dialect,
    pins_settled: bool,
    own: Vec<SocketAddr>,
    /// What charging the handshake budget answers.
    budget_left: bool,
    default_parent: Option<Arc<ParentProxy>>,
}

impl Case {
    fn new(host: &'static str, port: u16, addrs: &[&str]) -> Case {
        Case {
            host,
            port,
            addrs: addrs.iter().map(|a| ip(a)).collect(),
            dialect: Dialect::Http,
            pins_settled: true,
            own: Vec::new(),
            budget_left: true,
            default_parent: None,
        }
    }

    fn verdict(&self) -> Verdict {
        let target = Target::new(self.host, self.port).unwrap();
        policy().check_resolved_at(&target, &self.addrs, Instant::now())
    }

    /// The admission, and how many times the handshake budget was charged.
    fn run(&self) -> (Admission, usize) {
        let charged = Cell::new(0);
        let admission = admit(
            self.verdict(),
            self.pins_settled,
            self.dialect,
            self.port,
            |addr| self.own.contains(&addr),
            || {
                charged.set(charged.get() + 1);
                self.budget_left
            },
            self.default_parent.as_ref(),
            super::deadline(10),
        );
        (admission, charged.get())
    }

    fn admitted(&self) -> Admitted {
        match self.run().0 {
            Admission::Dial(admitted) => *admitted,
            other => panic!("not dialled: {other:?}"),
        }
    }
}

/// Every connect the dial core asks for, each one failing: the vetted
/// addresses, in order, and what each dial goes to.
fn dials(core: &mut DialCore) -> Vec<Action> {
    let mut out = Vec::new();
    while let Some(action) = core.poll_action() {
        // Bounded: a core that dials forever fails here rather than hangs.
        assert!(
            out.len() < 64,
            "the core never stops dialling: {:?} ...",
            &out[..4]
        );
        out.push(action);
        let refused = io::ErrorKind::ConnectionRefused.into();
        if let Outcome::Unreachable(_) = core.handle(DialInput::Failed(refused)) {
            break;
        }
    }
    out
}

fn dial(to: &str, vetted: &str) -> Action {
    Action::Dial(sock(to), ip(vetted))
}

fn raw() -> Treatment {
    Treatment {
        idle: None,
        inspect: None,
        terminate: false,
    }
}

fn inspected() -> Treatment {
    Case::new("plain.test", 80, &["45.45.45.45"])
        .admitted()
        .treatment
}

fn terminated() -> Treatment {
    Case::new("good.test", 443, &["45.45.45.45"])
        .admitted()
        .treatment
}

fn allowed(host: &'static str, port: u16) -> Allowed {
    match Case::new(host, port, &["45.45.45.45"]).verdict() {
        Verdict::Allow(a) => a,
        Verdict::Deny(d) => panic!("denied: {d}"),
    }
}

// ---- start ----

#[test]
fn an_address_literal_is_decided_on_without_a_name_check() {
    let host = Host::Ip(ip("45.45.45.45"));
    let next = start(&host, || panic!("a literal has no name to check"));
    assert!(
        matches!(next, Start::Decide(a) if a == ip("45.45.45.45")),
        "{next:?}"
    );
}

#[test]
fn a_name_is_checked_before_dns_refused_or_resolved() {
    let p = policy();
    let check = |name: &str| {
        let target = Target::new(name, 443).unwrap();
        start(&target.host, || p.check_name_as(&target, None))
    };
    match check("evil.test") {
        Start::Deny(Denial::Rule(rule)) => assert_eq!(&*rule.name, "--deny evil.test"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        check("nowhere.test"),
        Start::Deny(Denial::NoRule(_))
    ));
    assert!(matches!(check("raw.test"), Start::Resolve(n) if n == "raw.test"));
    // What the name check said is carried out as it stands.
    let host = Host::Domain("x.test".into());
    let fix = Arc::new(crate::policy::AllowFix {
        flag: "--allow x.test:443".into(),
        file: "hosts = [\"x.test\"], ports = [443]".into(),
    });
    let denied = start(&host, || NameVerdict::Deny(Denial::NoRule(fix.clone())));
    assert!(matches!(denied, Start::Deny(Denial::NoRule(f)) if f == fix));
}

// ---- ResolvingCore ----

#[test]
fn a_dns_error_is_a_resolve_refusal() {
    let mut core = ResolvingCore::dns(super::deadline(10));
    assert_eq!(core.stage(), "dns");
    let failed = io::Error::new(io::ErrorKind::NotFound, "no such host");
    match core.handle(Input::Resolved(Err(failed))) {
        Next::Refuse(r @ Refusal::Resolve(_)) => {
            assert_eq!(r.describe(), "could not resolve the target: no such host");
            assert_eq!(r.close_reason(), CloseReason::ResolveFailed);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn pins_settled_before_the_dns_answer_keep_waiting_for_it() {
    let mut core = ResolvingCore::dns(super::deadline(10));
    assert!(matches!(core.handle(Input::PinsSettled), Next::Stay));
    assert_eq!(core.stage(), "dns", "still the target's own DNS");
    let addrs = vec![ip("45.45.45.45"), ip("2a00::1")];
    match core.handle(Input::Resolved(Ok(addrs.clone()))) {
        Next::Decide(got) => assert_eq!(got, addrs),
        other => panic!("{other:?}"),
    }
}

#[test]
fn waiting_for_the_pins_decides_on_the_addresses_kept() {
    let addrs = vec![ip("45.45.45.46"), ip("45.45.45.45")];
    let mut core = ResolvingCore::pins(addrs.clone(), super::deadline(10));
    assert_eq!(core.stage(), "pins");
    match core.handle(Input::PinsSettled) {
        Next::Decide(got) => assert_eq!(got, addrs, "in the resolver's order"),
        other => panic!("{other:?}"),
    }
}

/// Not a moment before it, and the connect that follows keeps it: the
/// resolve and the connect share one deadline.
#[test]
fn the_deadline_refuses_with_a_timeout_in_either_stage() {
    for core in [
        ResolvingCore::dns(super::deadline(10)),
        ResolvingCore::pins(vec![ip("45.45.45.45")], super::deadline(10)),
    ] {
        assert!(core.handle_timeout(super::at(9, 999)).is_none(), "not yet");
        let refusal = core.handle_timeout(super::at(10, 0)).expect("timed out");
        assert!(matches!(refusal, Refusal::Timeout), "{refusal:?}");
        assert_eq!(refusal.describe(), "timed out connecting to the target");
        assert_eq!(refusal.close_reason(), CloseReason::ConnectTimeout);
    }
}

// ---- admit ----

#[test]
fn a_denied_verdict_is_a_denial_and_charges_nothing() {
    for pins_settled in [true, false] {
        let mut case = Case::new("evil.test", 443, &["45.45.45.45"]);
        case.pins_settled = pins_settled;
        match case.run() {
            (Admission::Deny(Denial::Rule(rule)), 0) => {
                assert_eq!(&*rule.name, "--deny evil.test", "the deny rule wins")
            }
            other => panic!("pins settled {pins_settled}: {other:?}"),
        }
    }
}

#[test]
fn a_special_address_is_refused_with_its_range_and_the_fix() {
    let (admission, charged) = Case::new("good.test", 443, &["10.0.0.5"]).run();
    match admission {
        Admission::Deny(Denial::SpecialAddress(addr, range, Some(fix))) => {
            assert_eq!((addr, range), (ip("10.0.0.5"), "private"));
            assert_eq!(&*fix.rule, "--terminate good.test:443");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(charged, 0, "a refused terminated tunnel costs no handshake");
}

#[test]
fn an_allowed_request_waits_for_the_pins_then_is_decided_again() {
    let mut case = Case::new("good.test", 443, &["45.45.45.45"]);
    case.pins_settled = false;
    match case.run() {
        (Admission::AwaitPins, 0) => {}
        other => panic!("{other:?}"),
    }
    // The reactor calls back once they are known; the shell asks again.
    case.pins_settled = true;
    match case.run() {
        (Admission::Dial(_), 1) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_proxys_own_addresses_are_dropped_from_the_dial() {
    let mut case = Case::new(
        "raw.test",
        443,
        &["45.45.45.45", "45.45.45.46", "45.45.45.47"],
    );
    case.own = vec![sock("45.45.45.46:443"), sock("45.45.45.47:80")];
    let mut admitted = case.admitted();
    // The connect keeps the deadline it was admitted with.
    assert!(admitted.core.handle_timeout(super::at(9, 999)).is_none());
    assert_eq!(
        dials(&mut admitted.core),
        [
            dial("45.45.45.45:443", "45.45.45.45"),
            dial("45.45.45.47:443", "45.45.45.47"),
        ],
        "only the own address on the target's port is dropped"
    );
    assert!(
        admitted.core.handle_timeout(super::at(10, 0)).is_some(),
        "and not a moment later"
    );
}

#[test]
fn only_the_proxys_own_addresses_is_a_refusal_naming_the_first() {
    let mut case = Case::new("good.test", 443, &["45.45.45.45", "45.45.45.46"]);
    case.own = vec![sock("45.45.45.46:443"), sock("45.45.45.45:443")];
    match case.run() {
        (Admission::OwnAddress(addr), 0) => {
            assert_eq!(addr, sock("45.45.45.45:443"));
            let refusal = Refusal::OwnAddress(addr);
            assert_eq!(
                refusal.describe(),
                "45.45.45.45:443 is the proxy's own address"
            );
        }
        other => panic!("the budget is charged only after this check: {other:?}"),
    }
}

#[test]
fn the_handshake_budget_is_charged_only_for_terminated_tunnels() {
    for (host, port, dialect, charges) in [
        ("good.test", 443, Dialect::Http, 1),
        ("good.test", 443, Dialect::Socks5, 1),
        // Forward requests never have the proxy as their TLS server.
        ("good.test", 443, Dialect::Forward, 0),
        ("good.test", 443, Dialect::ForwardTls, 0),
        ("plain.test", 80, Dialect::Http, 0),
        ("raw.test", 443, Dialect::Socks5, 0),
    ] {
        let mut case = Case::new(host, port, &["45.45.45.45"]);
        case.dialect = dialect;
        case.budget_left = false;
        let (admission, charged) = case.run();
        assert_eq!(charged, charges, "{host} {dialect:?}");
        match (charges, admission) {
            (1, Admission::HandshakeRate) | (0, Admission::Dial(_)) => {}
            (_, other) => panic!("{host} {dialect:?}: {other:?}"),
        }
    }
    // With budget left, the charged tunnel is dialled.
    let case = Case::new("good.test", 443, &["45.45.45.45"]);
    assert!(matches!(case.run(), (Admission::Dial(_), 1)));
}

#[test]
fn the_route_is_the_rules_then_the_default_parent() {
    let default = parent(DEFAULT_PARENT);
    let first = |host: &'static str, default: Option<&Arc<ParentProxy>>| {
        let mut case = Case::new(host, 443, &["45.45.45.45", "45.45.45.46"]);
        case.default_parent = default.cloned();
        dials(&mut case.admitted().core)
    };
    // A rule's own parent, whatever the default; asked for one address.
    let routed = [dial("45.0.0.8:3128", "45.45.45.45")];
    assert_eq!(first("routed.test", Some(&default)), routed);
    assert_eq!(first("routed.test", None), routed);
    // `upstream_proxy = "direct"`: straight to each address.
    let direct = [
        dial("45.45.45.45:443", "45.45.45.45"),
        dial("45.45.45.46:443", "45.45.45.46"),
    ];
    assert_eq!(first("direct.test", Some(&default)), direct);
    // No route in the rule: the default parent, if there is one.
    assert_eq!(
        first("raw.test", Some(&default)),
        [dial("45.0.0.9:3128", "45.45.45.45")]
    );
    assert_eq!(first("raw.test", None), direct);
}

#[test]
fn an_admission_carries_the_rules_treatment_and_audit_reasons() {
    let plain = Case::new("raw.test", 443, &["45.45.45.45"]).admitted();
    assert_eq!(&*plain.rule, "--allow raw.test:443");
    assert!(plain.audit_reasons.is_empty());
    let t = plain.treatment;
    assert_eq!(
        (t.idle, t.inspect.is_none(), t.terminate),
        (None, true, false)
    );

    let idle = Case::new("idle.test", 443, &["45.45.45.45"]).admitted();
    assert_eq!(idle.treatment.idle, Some(Duration::from_secs(7)));

    let t = inspected();
    assert!(t.inspect.is_some() && !t.terminate);
    let t = terminated();
    assert!(t.inspect.is_some() && t.terminate);

    let audited = Case::new("audited.test", 443, &["45.45.45.45"]).admitted();
    assert_eq!(&*audited.rule, "--allow audited.test:443");
    assert_eq!(
        audited.audit_reasons,
        [Denial::Rule("--deny audited.test".into())]
    );
}

#[test]
fn the_client_is_named_as_its_key_says() {
    assert_eq!(describe_client(ClientKey::Uid(1000)), "uid 1000");
    assert_eq!(describe_client(ClientKey::Ip(ip("45.1.2.3"))), "45.1.2.3");
    assert_eq!(describe_client(ClientKey::Unix), "unix-socket peer");
    assert_eq!(describe_client(ClientKey::Loopback), "loopback");
}

#[test]
fn a_dial_failure_earns_its_refusal() {
    let refused: io::Error = io::ErrorKind::ConnectionRefused.into();
    let r = Refusal::from(Unreachable::Connect(refused));
    assert_eq!(r.close_reason(), CloseReason::ConnectFailed);
    assert!(r
        .describe()
        .starts_with("could not connect to the target: "));
    let r = Refusal::from(Unreachable::Parent("it said no".into()));
    assert_eq!(r.describe(), "through the parent proxy: it said no");
    let r = Refusal::from(Unreachable::Timeout);
    assert!(matches!(r, Refusal::Timeout));
}

// ---- after_connect ----

fn after(dialect: Dialect, replied: bool, leftover: &[u8], t: &Treatment, vets: bool) -> After {
    try_after(dialect, replied, leftover, t, vets).expect("not refused")
}

fn try_after(
    dialect: Dialect,
    replied: bool,
    leftover: &[u8],
    t: &Treatment,
    vets: bool,
) -> Result<After, Refusal> {
    after_connect(dialect, replied, leftover, t, || vets)
}

#[test]
fn a_raw_tunnel_passes_through_with_its_reply_per_dialect() {
    for (dialect, reply) in [(Dialect::Http, HTTP_REPLY), (Dialect::Socks5, SOCKS5_REPLY)] {
        match after(dialect, false, b"", &raw(), false) {
            After::Passthrough { to_client, own } => {
                assert_eq!(to_client, reply, "{dialect:?}");
                assert_eq!(own, reply.len());
            }
            other => panic!("{dialect:?}: {other:?}"),
        }
        // Behind a parent, what the destination sent follows the reply,
        // and is payload, not the proxy's own.
        match after(dialect, false, b"220 hi\r\n", &raw(), false) {
            After::Passthrough { to_client, own } => {
                assert_eq!(to_client, [reply, b"220 hi\r\n"].concat());
                assert_eq!(own, reply.len());
            }
            other => panic!("{dialect:?}: {other:?}"),
        }
    }
}

#[test]
fn a_replied_request_owes_no_reply() {
    for dialect in [Dialect::Http, Dialect::Socks5] {
        match after(dialect, true, b"banner", &raw(), false) {
            After::Passthrough { to_client, own } => {
                assert_eq!((to_client.as_slice(), own), (&b"banner"[..], 0))
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            after(dialect, true, b"", &raw(), true),
            After::Vetting { reply } if reply.is_empty()
        ));
        assert!(matches!(
            after(dialect, true, b"", &inspected(), false),
            After::Inspect { reply } if reply.is_empty()
        ));
        assert!(matches!(
            after(dialect, true, b"", &terminated(), false),
            After::Securing { reply } if reply.is_empty()
        ));
    }
}

#[test]
fn each_treatment_of_a_tunnel_has_its_state() {
    for (dialect, want) in [(Dialect::Http, HTTP_REPLY), (Dialect::Socks5, SOCKS5_REPLY)] {
        match after(dialect, false, b"", &terminated(), true) {
            After::Securing { reply } => assert_eq!(reply, want),
            other => panic!("{other:?}"),
        }
        match after(dialect, false, b"", &inspected(), true) {
            After::Inspect { reply } => assert_eq!(reply, want),
            other => panic!("{other:?}"),
        }
        match after(dialect, false, b"", &raw(), true) {
            After::Vetting { reply } => assert_eq!(reply, want),
            other => panic!("{other:?}"),
        }
    }
    // The port's vetting is asked for a raw tunnel alone.
    let asked = Cell::new(0);
    let vets = || {
        asked.set(asked.get() + 1);
        true
    };
    let _ = after_connect(Dialect::Http, false, b"", &inspected(), vets);
    let _ = after_connect(Dialect::Forward, false, b"", &raw(), vets);
    let _ = after_connect(Dialect::Socks5, false, b"", &terminated(), vets);
    assert_eq!(asked.get(), 0);
}

#[test]
fn a_forward_request_goes_to_the_exchange_without_a_reply() {
    for t in [raw(), inspected()] {
        for replied in [false, true] {
            assert!(matches!(
                after(Dialect::Forward, replied, b"", &t, true),
                After::Forward
            ));
            assert!(matches!(
                after(Dialect::ForwardTls, replied, b"", &t, true),
                After::ForwardTls
            ));
        }
    }
}

#[test]
fn bytes_behind_the_parents_answer_refuse_all_but_a_raw_tunnel() {
    let cases = [
        (Dialect::Http, inspected()),
        (Dialect::Socks5, terminated()),
        (Dialect::Forward, raw()),
        (Dialect::ForwardTls, raw()),
    ];
    for (dialect, t) in cases {
        for replied in [false, true] {
            match try_after(dialect, replied, b"x", &t, true) {
                Err(r @ Refusal::Parent(_)) => assert_eq!(
                    r.describe(),
                    "through the parent proxy: the destination spoke before any request \
                     (through the parent proxy)"
                ),
                other => panic!("{dialect:?}: {other:?}"),
            }
        }
    }
    // A raw tunnel carries them: to the vetting, which hands them on.
    assert!(matches!(
        after(Dialect::Http, false, b"x", &raw(), true),
        After::Vetting { reply } if reply == HTTP_REPLY
    ));
}

// ---- Treatment::reload ----

#[test]
fn a_reload_stricter_for_a_tunnel_is_refused_and_changes_nothing() {
    let inspecting = allowed("plain.test", 80);
    let terminating = allowed("good.test", 443);
    for dialect in [Dialect::Http, Dialect::Socks5] {
        let mut t = raw();
        assert!(!t.reload(&inspecting, dialect), "raw, now inspected");
        assert!(t.inspect.is_none());
        let mut t = inspected();
        assert!(!t.reload(&terminating, dialect), "not terminated, now is");
        assert!(!t.terminate);
    }
    // A forward request is inspected anyway: it takes the new rules.
    let mut t = raw();
    assert!(t.reload(&inspecting, Dialect::Forward));
    assert!(t.inspect.is_some());
}

#[test]
fn a_reload_as_strict_takes_the_new_rules_and_idle_timeout() {
    let mut t = terminated();
    assert!(t.reload(&allowed("idle.test", 443), Dialect::Http));
    assert_eq!(t.idle, Some(Duration::from_secs(7)));
    assert!(t.inspect.is_none(), "the new rule inspects nothing");
    assert!(t.terminate, "what is terminated stays so");
}
