//! From a target to an open upstream as one machine, in virtual time: an
//! in-memory resolver and dialler answer its actions, a real policy
//! decides through its [`Env`], and a parent proxy answers over a
//! [`MemPort`]. Each chain the shell used to glue together (name check,
//! DNS, pins, verdict, each connect, the parent, the one deadline) is run
//! here end to end.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use super::{at, deadline};
use crate::auth::cache::LoginCache;
use crate::auth::Users;
use crate::core::establish::{Action, Env, EstablishCore, Input, Next};
use crate::core::mem::MemPort;
use crate::core::refusal::{Dialect, Refusal};
use crate::core::route::After;
use crate::policy::{
    parse_cli_inspect, parse_cli_rule, Action as RuleAction, Denial, NameVerdict, Policy, Verdict,
};
use crate::protocol::parent::ParentProxy;
use crate::target::{Host, Target};

const PARENT: &str = "http://45.0.0.9:3128";
const HTTP_REPLY: &[u8] = b"HTTP/1.1 200 Connection established\r\n\r\n";

pub(super) fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// evil.test refused by name; shop.test:443 (and any other .test name)
/// allowed raw; api.test:80 inspected (its addresses are pins, which the
/// policy may not know yet); the literal 45.1.1.9:443 allowed.
fn policy() -> Policy {
    Policy::from_rules(&[
        parse_cli_rule(RuleAction::Deny, "evil.test").unwrap(),
        parse_cli_rule(RuleAction::Allow, "shop.test:443").unwrap(),
        parse_cli_rule(RuleAction::Allow, "*.test:443").unwrap(),
        parse_cli_inspect("api.test:80").unwrap(),
        parse_cli_rule(RuleAction::Allow, "45.1.1.9:443").unwrap(),
    ])
    .unwrap()
}

/// The policy and the proxy's facts, as the shell lends them (and, for
/// the opening machine's tests, the settings its handshake reads).
pub(super) struct World {
    pub(super) policy: Policy,
    pins_settled: Cell<bool>,
    own: Vec<SocketAddr>,
    budget_left: bool,
    parent: Option<Arc<ParentProxy>>,
    remembered: RefCell<Vec<(Host, Vec<IpAddr>)>>,
    /// Some rule inspects every port (raw tunnels are vetted first).
    pub(super) vets: bool,
    /// The proxy's users, when clients must log in.
    pub(super) users: Option<Users>,
    pub(super) logins: LoginCache,
}

impl World {
    pub(super) fn new() -> World {
        World {
            policy: policy(),
            pins_settled: Cell::new(true),
            own: Vec::new(),
            budget_left: true,
            parent: None,
            remembered: RefCell::new(Vec::new()),
            vets: false,
            users: None,
            logins: LoginCache::new(16),
        }
    }
}

impl World {
    /// Every dial through [`PARENT`].
    fn behind_parent() -> World {
        World {
            parent: Some(Arc::new(ParentProxy::parse(PARENT).unwrap())),
            ..World::new()
        }
    }
}

impl Env for World {
    fn check_name(&self, target: &Target, user: Option<&str>) -> NameVerdict {
        self.policy.check_name_as(target, user)
    }
    fn check_resolved(&self, target: &Target, user: Option<&str>, addrs: &[IpAddr]) -> Verdict {
        self.policy.check_resolved_as(target, user, addrs, at(0, 0))
    }
    fn remember(&self, host: &Host, addrs: &[IpAddr]) {
        self.remembered
            .borrow_mut()
            .push((host.clone(), addrs.to_vec()));
    }
    fn pins_settled(&self) -> bool {
        self.pins_settled.get()
    }
    fn is_own(&self, addr: SocketAddr) -> bool {
        self.own.contains(&addr)
    }
    fn take_handshake(&self) -> Result<(), String> {
        match self.budget_left {
            true => Ok(()),
            false => Err("uid 1000".into()),
        }
    }
    fn default_parent(&self) -> Option<&Arc<ParentProxy>> {
        self.parent.as_ref()
    }
    fn vets_port(&self, _port: u16) -> bool {
        self.vets
    }
}

/// How the in-memory dialler answers a connect to an address.
#[derive(Clone, Copy)]
enum Dial {
    /// connect(2) itself fails.
    FailsAtOnce,
    /// Refused once in flight.
    Refused,
    /// Completes.
    Connects,
    /// Never answers.
    Hangs,
}

/// One establishing run: the core, the world, the resolver's answers and
/// the dialler's, and everything the core asked for.
struct Run {
    core: EstablishCore,
    world: World,
    dns: HashMap<&'static str, io::Result<Vec<IpAddr>>>,
    dials: HashMap<SocketAddr, Dial>,
    /// Every action, as text, in order.
    asked: Vec<String>,
    /// The resolve asked for and not answered yet.
    resolving: Option<String>,
    /// A connect in flight that completes when [`Run::settle`] runs.
    in_flight: Option<(SocketAddr, Dial)>,
    next: Next,
}

impl Run {
    fn new(host: &str, port: u16, dialect: Dialect, world: World) -> Run {
        Run {
            core: EstablishCore::new(
                Target::new(host, port).unwrap(),
                None,
                dialect,
                false,
                deadline(10),
            ),
            world,
            dns: HashMap::new(),
            dials: HashMap::new(),
            asked: Vec::new(),
            resolving: None,
            in_flight: None,
            next: Next::Working,
        }
    }

    fn resolves(mut self, name: &'static str, addrs: &[&str]) -> Run {
        self.dns
            .insert(name, Ok(addrs.iter().map(|a| ip(a)).collect()));
        self
    }

    fn dial(mut self, addr: &str, how: Dial) -> Run {
        self.dials.insert(addr.parse().unwrap(), how);
        self
    }

    fn begin(&mut self) {
        self.next = self.core.begin(&self.world);
        self.carry_out();
    }

    /// Carries out what the core asks, as the shell does.
    fn carry_out(&mut self) {
        while let Some(action) = self.core.poll_action() {
            match action {
                Action::Resolve(name) => {
                    self.asked.push(format!("resolve {name}"));
                    self.resolving = Some(name);
                }
                Action::AwaitPins => self.asked.push("await pins".into()),
                Action::Admitted { rule, .. } => self.asked.push(format!("admitted {rule}")),
                Action::Dial(addr, vetted) => {
                    self.asked.push(format!("dial {addr} for {vetted}"));
                    let how = self.dials.get(&addr).copied().unwrap_or(Dial::Refused);
                    if let Dial::FailsAtOnce = how {
                        let e = io::Error::from(io::ErrorKind::AddrNotAvailable);
                        self.next = self.core.handle(Input::ConnectFailed(e), &self.world);
                    } else {
                        self.in_flight = Some((addr, how));
                    }
                }
            }
        }
    }

    /// The resolver answers, then every connect in flight settles, until
    /// nothing more can move.
    fn settle(&mut self) {
        loop {
            if let Some(name) = self.resolving.take() {
                let answer = self
                    .dns
                    .remove(name.as_str())
                    .unwrap_or_else(|| Err(io::ErrorKind::NotFound.into()));
                self.next = self.core.handle(Input::Resolved(answer), &self.world);
            } else if let Some((_, how)) = self.in_flight {
                let input = match how {
                    Dial::Connects => Input::Connected,
                    Dial::Refused => Input::ConnectFailed(io::ErrorKind::ConnectionRefused.into()),
                    Dial::Hangs | Dial::FailsAtOnce => break,
                };
                self.in_flight = None;
                self.next = self.core.handle(input, &self.world);
            } else {
                break;
            }
            self.carry_out();
        }
    }

    /// Begins, and lets every answer and connect settle.
    fn settled(mut self) -> Run {
        self.begin();
        self.settle();
        self
    }

    /// Whether any action asked for so far names `text`.
    fn asked_for(&self, text: &str) -> bool {
        self.asked.iter().any(|a| a.contains(text))
    }

    fn refusal(&self) -> &Refusal {
        match &self.next {
            Next::Refused(refusal) => refusal,
            other => panic!("not refused: {other:?} after {:?}", self.asked),
        }
    }

    fn label(&self) -> String {
        format!("{}({})", self.core.name(), self.core.stage())
    }
}

/// A name checked, resolved, allowed, its first address refused and its
/// second connected: one machine, one deadline, the actions in order.
#[test]
fn a_name_resolves_and_the_second_address_connects() {
    let mut run = Run::new("shop.test", 443, Dialect::Http, World::new())
        .resolves("shop.test", &["45.1.1.1", "45.1.1.2", "45.1.1.3"])
        .dial("45.1.1.2:443", Dial::Connects);
    run.begin();
    assert_eq!(run.label(), "Resolving(dns)");
    assert_eq!(run.core.poll_timeout(), at(10, 0));
    run.settle();
    assert!(
        matches!(
            &run.next,
            Next::Open { after: After::Passthrough { to_client, own }, leftover }
                if leftover.is_empty() && to_client == HTTP_REPLY && *own == HTTP_REPLY.len()
        ),
        "{:?}",
        run.next
    );
    assert_eq!(
        run.asked,
        [
            "resolve shop.test",
            "admitted --allow shop.test:443",
            "dial 45.1.1.1:443 for 45.1.1.1",
            "dial 45.1.1.2:443 for 45.1.1.2",
        ]
    );
    assert_eq!(run.label(), "Connecting(open)");
    assert_eq!(
        run.world.remembered.borrow().as_slice(),
        [(
            Host::Domain("shop.test".into()),
            vec![ip("45.1.1.1"), ip("45.1.1.2"), ip("45.1.1.3")]
        )],
        "the resolver's answer is shown to the policy"
    );
    let (target, treatment) = run.core.into_parts();
    assert_eq!(target.to_string(), "shop.test:443");
    assert!(treatment.is_some_and(|t| t.inspect.is_none() && !t.terminate));
}

/// A name the policy refuses is refused before any DNS.
#[test]
fn a_name_refused_is_never_resolved() {
    let mut run = Run::new("evil.test", 443, Dialect::Socks5, World::new());
    run.begin();
    assert!(matches!(run.refusal(), Refusal::Denied(Denial::Rule(_))));
    assert!(run.asked.is_empty(), "{:?}", run.asked);
}

/// A name that resolves to a private address is refused after DNS (the
/// special ranges are checked on what the name resolved to), and the
/// refusal says which key would allow it.
#[test]
fn a_name_resolving_to_a_private_address_is_refused_naming_the_fix() {
    let run = Run::new("shop.test", 443, Dialect::Http, World::new())
        .resolves("shop.test", &["10.0.0.7"])
        .settled();
    let refusal = run.refusal();
    assert!(matches!(refusal, Refusal::Denied(_)), "{refusal:?}");
    let why = refusal.describe();
    assert!(why.contains("10.0.0.7"), "{why}");
    assert!(why.contains("--allow") || why.contains("allow"), "{why}");
    assert_eq!(run.asked, ["resolve shop.test"]);
}

/// An address literal is decided at once: no resolve.
#[test]
fn an_address_literal_is_decided_without_dns() {
    let mut run =
        Run::new("45.1.1.9", 443, Dialect::Http, World::new()).dial("45.1.1.9:443", Dial::Connects);
    run.begin();
    assert_eq!(run.asked.len(), 2, "{:?}", run.asked);
    assert_eq!(run.asked[1], "dial 45.1.1.9:443 for 45.1.1.9");
    run.settle();
    assert!(matches!(run.next, Next::Open { .. }));
}

/// The policy does not know its inspected names' addresses yet: the
/// machine waits for them with the target's addresses in hand, then
/// decides again; pins settled before the target's own DNS keep it
/// waiting for that.
#[test]
fn an_allowed_target_waits_for_the_pins_then_decides() {
    let world = World::new();
    world.pins_settled.set(false);
    let mut run = Run::new("shop.test", 443, Dialect::Http, world)
        .resolves("shop.test", &["45.1.1.1"])
        .dial("45.1.1.1:443", Dial::Connects);
    run.begin();
    // Pins settled early: still the target's own DNS.
    assert!(matches!(
        run.core.handle(Input::PinsSettled, &run.world),
        Next::Working
    ));
    assert_eq!(run.label(), "Resolving(dns)");
    run.settle();
    assert_eq!(run.asked, ["resolve shop.test", "await pins"]);
    assert_eq!(run.label(), "Resolving(pins)");
    assert!(matches!(run.next, Next::Working));
    run.world.pins_settled.set(true);
    run.next = run.core.handle(Input::PinsSettled, &run.world);
    run.carry_out();
    run.settle();
    assert!(matches!(run.next, Next::Open { .. }), "{:?}", run.next);
    assert_eq!(run.asked[2], "admitted --allow shop.test:443");
}

/// Every allowed address the proxy's own: refused as such; some of them:
/// only the others are dialled.
#[test]
fn the_proxys_own_addresses_are_never_dialled() {
    let mut world = World::new();
    world.own = vec!["45.1.1.1:443".parse().unwrap()];
    let run = Run::new("shop.test", 443, Dialect::Http, world)
        .resolves("shop.test", &["45.1.1.1"])
        .settled();
    assert!(matches!(run.refusal(), Refusal::OwnAddress(a) if a.to_string() == "45.1.1.1:443"));

    let mut world = World::new();
    world.own = vec!["45.1.1.1:443".parse().unwrap()];
    let run = Run::new("shop.test", 443, Dialect::Http, world)
        .resolves("shop.test", &["45.1.1.1", "45.1.1.2"])
        .dial("45.1.1.2:443", Dial::Connects)
        .settled();
    assert!(matches!(run.next, Next::Open { .. }));
    assert!(!run.asked_for("45.1.1.1:"), "{:?}", run.asked);
}

/// A literal for the proxy's own address is refused as such, whatever
/// the policy: not with the fix a refusal by the policy names (a rule
/// for it, or for its port), which, followed, would only end here. A deny
/// rule that names it keeps its refusal.
#[test]
fn the_proxys_own_address_is_refused_as_such_not_with_a_fix() {
    let own: Vec<SocketAddr> = vec![
        "45.1.1.1:3128".parse().unwrap(),
        "45.1.1.9:3128".parse().unwrap(),
    ];
    // No rule matches 45.1.1.1; --allow 45.1.1.9:443 matches the other's
    // address on another port; the mapped spelling is the same address.
    for host in ["45.1.1.1", "45.1.1.9", "::ffff:45.1.1.1"] {
        let mut world = World::new();
        world.own = own.clone();
        let run = Run::new(host, 3128, Dialect::Http, world).settled();
        let refusal = run.refusal();
        assert!(
            matches!(refusal, Refusal::OwnAddress(_)),
            "{host}: {refusal:?}"
        );
        assert!(
            !refusal.describe().contains("--allow"),
            "{host}: {}",
            refusal.describe()
        );
    }
    let mut world = World::new();
    world.own = own;
    world.policy =
        Policy::from_rules(&[parse_cli_rule(RuleAction::Deny, "45.1.1.1").unwrap()]).unwrap();
    let run = Run::new("45.1.1.1", 3128, Dialect::Http, world).settled();
    let refusal = run.refusal();
    assert!(
        matches!(refusal, Refusal::Denied(Denial::Rule(_))),
        "{refusal:?}"
    );
}

/// An empty answer from the resolver is a failed resolve, said as such
/// (not a policy refusal of no addresses).
#[test]
fn an_empty_answer_is_a_failed_resolve() {
    let run = Run::new("shop.test", 443, Dialect::Http, World::new())
        .resolves("shop.test", &[])
        .settled();
    let refusal = run.refusal();
    assert!(matches!(refusal, Refusal::Resolve(_)), "{refusal:?}");
    assert!(
        refusal.describe().contains("no address"),
        "{}",
        refusal.describe()
    );
}

/// A resolver failure, every connect refused, a connect(2) that fails at
/// once: each refused as its cause says.
#[test]
fn failures_are_refused_as_their_cause_says() {
    let run = Run::new("gone.test", 443, Dialect::Http, World::new()).settled();
    assert!(matches!(run.refusal(), Refusal::Resolve(_)));

    let run = Run::new("shop.test", 443, Dialect::Http, World::new())
        .resolves("shop.test", &["45.1.1.1", "45.1.1.2"])
        .settled();
    match run.refusal() {
        Refusal::Connect(e) => assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused),
        other => panic!("{other:?}"),
    }
    assert_eq!(run.asked.len(), 4, "both tried: {:?}", run.asked);

    let run = Run::new("shop.test", 443, Dialect::Http, World::new())
        .resolves("shop.test", &["45.1.1.1", "45.1.1.2"])
        .dial("45.1.1.1:443", Dial::FailsAtOnce)
        .dial("45.1.1.2:443", Dial::Connects)
        .settled();
    assert!(matches!(run.next, Next::Open { .. }), "{:?}", run.next);
}

/// One deadline for the resolve and every connect: not a moment before
/// it, and refused as the stage it caught says.
#[test]
fn the_one_deadline_refuses_in_whichever_stage_it_catches() {
    let mut run = Run::new("slow.test", 443, Dialect::Http, World::new());
    run.begin();
    assert!(run.core.handle_timeout(at(9, 999)).is_none());
    assert!(matches!(
        run.core.handle_timeout(at(10, 0)),
        Some(Refusal::Timeout)
    ));

    let mut run = Run::new("shop.test", 443, Dialect::Http, World::new())
        .resolves("shop.test", &["45.1.1.1"])
        .dial("45.1.1.1:443", Dial::Hangs)
        .settled();
    assert_eq!(run.label(), "Connecting(tcp)");
    assert_eq!(run.core.poll_timeout(), at(10, 0), "the resolve's deadline");
    assert!(run.core.handle_timeout(at(9, 999)).is_none());
    assert!(matches!(
        run.core.handle_timeout(at(10, 0)),
        Some(Refusal::Timeout)
    ));
    assert!(run.core.handle_timeout(at(11, 0)).is_none(), "said once");
}

/// Through a parent proxy: the vetted address is dialled as the parent's,
/// the parent is asked for exactly it, and bytes the destination sent
/// behind the parent's answer come out with the open upstream.
#[test]
fn through_a_parent_the_vetted_address_is_asked_for() {
    let world = World::behind_parent();
    let mut run = Run::new("shop.test", 443, Dialect::Http, world)
        .resolves("shop.test", &["45.1.1.1"])
        .dial("45.0.0.9:3128", Dial::Connects)
        .settled();
    assert_eq!(run.asked[2], "dial 45.0.0.9:3128 for 45.1.1.1");
    assert!(matches!(run.next, Next::Working));
    assert_eq!(run.label(), "Connecting(parent-proxy)");
    let mut upstream = MemPort::roomy();
    assert!(matches!(
        run.core.pump(&mut upstream, &run.world),
        Next::Working
    ));
    let asked = String::from_utf8(upstream.take()).unwrap();
    assert!(
        asked.starts_with("CONNECT 45.1.1.1:443 HTTP/1.1\r\n"),
        "{asked}"
    );
    upstream.deliver(b"HTTP/1.1 200 Connection established\r\n\r\nhello");
    match run.core.pump(&mut upstream, &run.world) {
        Next::Open {
            after: After::Passthrough { to_client, own },
            leftover,
        } => {
            assert_eq!(leftover, b"hello");
            // A raw tunnel: what the destination sent follows the reply.
            assert_eq!(to_client, [HTTP_REPLY, b"hello"].concat());
            assert_eq!(own, HTTP_REPLY.len());
        }
        other => panic!("{other:?}"),
    }

    // A parent that does not answer in time is the parent's delay.
    let world = World::behind_parent();
    let mut run = Run::new("shop.test", 443, Dialect::Http, world)
        .resolves("shop.test", &["45.1.1.1"])
        .dial("45.0.0.9:3128", Dial::Connects)
        .settled();
    match run.core.handle_timeout(at(10, 0)) {
        Some(Refusal::Parent(why)) => assert!(why.contains("no answer"), "{why}"),
        other => panic!("{other:?}"),
    }
}

/// A stray report (a late resolve, pins settled while dialling) changes
/// nothing.
#[test]
fn stray_reports_change_nothing() {
    let mut run = Run::new("shop.test", 443, Dialect::Http, World::new())
        .resolves("shop.test", &["45.1.1.1"])
        .dial("45.1.1.1:443", Dial::Hangs)
        .settled();
    assert_eq!(run.label(), "Connecting(tcp)");
    let late = Input::Resolved(Ok(vec![ip("10.0.0.1")]));
    assert!(matches!(run.core.handle(late, &run.world), Next::Working));
    assert!(matches!(
        run.core.handle(Input::PinsSettled, &run.world),
        Next::Working
    ));
    assert!(run.core.poll_action().is_none());
    assert_eq!(run.label(), "Connecting(tcp)");
}

/// A terminated tunnel charges the client's handshake budget before any
/// dial; spent, the refusal names the client as the shell described it.
#[test]
fn a_spent_handshake_budget_is_refused_naming_the_client() {
    let mut world = World::new();
    world.budget_left = false;
    world.policy =
        Policy::from_rules(&[crate::policy::parse_cli_terminate("shop.test:443").unwrap()])
            .unwrap();
    let run = Run::new("shop.test", 443, Dialect::Http, world)
        .resolves("shop.test", &["45.1.1.1"])
        .settled();
    assert!(matches!(run.refusal(), Refusal::HandshakeRate(who) if who == "uid 1000"));
    assert!(!run.asked_for("dial "), "{:?}", run.asked);
}

/// A reload while dialling: the allowing rule's treatment is taken, the
/// addresses left that the new policy treats otherwise are dropped, and a
/// raw tunnel the new policy inspects must close. Before any verdict there
/// is nothing to reload.
#[test]
fn a_reload_while_dialling_prunes_or_closes() {
    let mut run = Run::new("shop.test", 443, Dialect::Http, World::new())
        .resolves("shop.test", &["45.1.1.1", "45.1.1.2", "45.1.1.3"])
        .dial("45.1.1.3:443", Dial::Connects);
    let raw = crate::policy::parse_cli_rule(RuleAction::Allow, "shop.test:443").unwrap();
    let inspected = parse_cli_inspect("shop.test:443").unwrap();
    let now_raw = Policy::from_rules(&[raw]).unwrap();
    let now_inspected = Policy::from_rules(&[inspected]).unwrap();
    let target = Target::new("shop.test", 443).unwrap();
    let allowed = |p: &Policy| match p.check_resolved_at(&target, &[ip("45.1.1.1")], at(0, 0)) {
        Verdict::Allow(a) => a,
        other => panic!("{other:?}"),
    };
    run.begin();
    assert!(
        run.core.reload(&allowed(&now_inspected), |_| false),
        "nothing to reload yet"
    );
    run.dials
        .insert("45.1.1.1:443".parse().unwrap(), Dial::Hangs);
    run.settle();
    assert!(run.core.dialling());
    // Only 45.1.1.3 stays among those left.
    assert!(run.core.reload(&allowed(&now_raw), |a| a == ip("45.1.1.3")));
    run.in_flight = Some(("45.1.1.1:443".parse().unwrap(), Dial::Refused));
    run.settle();
    assert!(matches!(run.next, Next::Open { .. }), "{:?}", run.next);
    assert!(!run.asked_for("45.1.1.2"), "{:?}", run.asked);

    let mut run = Run::new("shop.test", 443, Dialect::Http, World::new())
        .resolves("shop.test", &["45.1.1.1"])
        .dial("45.1.1.1:443", Dial::Hangs)
        .settled();
    assert!(
        !run.core.reload(&allowed(&now_inspected), |_| true),
        "a raw tunnel the policy now inspects closes"
    );
}

/// Waiting for the pins, the target's own answer is in hand: a second
/// resolver answer is stray, and changes nothing. It is neither dialled
/// nor remembered as the target's addresses, and a failed one refuses
/// nothing.
#[test]
fn a_stray_resolve_while_waiting_for_the_pins_changes_nothing() {
    let world = World::new();
    world.pins_settled.set(false);
    let mut run = Run::new("shop.test", 443, Dialect::Http, world)
        .resolves("shop.test", &["45.1.1.1"])
        .dial("45.1.1.1:443", Dial::Connects)
        .settled();
    assert_eq!(run.label(), "Resolving(pins)");
    for stray in [
        Ok(vec![ip("45.1.1.7")]),
        Ok(vec![]),
        Err(io::ErrorKind::NotFound.into()),
    ] {
        let next = run.core.handle(Input::Resolved(stray), &run.world);
        assert!(matches!(next, Next::Working), "{next:?}");
        assert!(run.core.poll_action().is_none());
        assert_eq!(run.label(), "Resolving(pins)");
    }
    assert_eq!(
        run.world.remembered.borrow().len(),
        1,
        "only the target's own answer is remembered: {:?}",
        run.world.remembered.borrow()
    );
    run.world.pins_settled.set(true);
    run.next = run.core.handle(Input::PinsSettled, &run.world);
    run.carry_out();
    run.settle();
    assert!(matches!(run.next, Next::Open { .. }), "{:?}", run.next);
    assert_eq!(
        run.asked,
        [
            "resolve shop.test",
            "await pins",
            "admitted --allow shop.test:443",
            "dial 45.1.1.1:443 for 45.1.1.1",
        ]
    );
}

/// The machine says which state an open upstream goes on in, with the
/// reply owed: an inspected tunnel, a raw one to a port some rule
/// inspects (vetted first), a forward-proxied request (the upstream
/// answers), and a tunnel switched to the name its first flight carried
/// (answered already: no second reply).
#[test]
fn the_open_upstream_goes_on_as_the_rule_and_dialect_say() {
    let open = |host: &str, port: u16, dialect: Dialect, replied: bool, vets: bool| {
        let mut world = World::new();
        world.vets = vets;
        let mut run = Run::new(host, port, dialect, world);
        run.core = EstablishCore::new(
            Target::new(host, port).unwrap(),
            None,
            dialect,
            replied,
            deadline(10),
        );
        run.dns.insert("api.test", Ok(vec![ip("45.2.2.2")]));
        run.dns.insert("shop.test", Ok(vec![ip("45.1.1.1")]));
        run.dials
            .insert("45.2.2.2:80".parse().unwrap(), Dial::Connects);
        run.dials
            .insert("45.1.1.1:443".parse().unwrap(), Dial::Connects);
        run.begin();
        run.settle();
        match run.next {
            Next::Open { after, leftover } => {
                assert!(leftover.is_empty());
                after
            }
            other => panic!("{host} {dialect:?}: {other:?}"),
        }
    };
    assert!(matches!(
        open("api.test", 80, Dialect::Http, false, false),
        After::Inspect { reply } if reply == HTTP_REPLY
    ));
    assert!(matches!(
        open("shop.test", 443, Dialect::Http, false, true),
        After::Vetting { reply } if reply == HTTP_REPLY
    ));
    assert!(matches!(
        open("shop.test", 443, Dialect::Http, false, false),
        After::Passthrough { .. }
    ));
    assert!(matches!(
        open("api.test", 80, Dialect::Forward, false, false),
        After::Forward
    ));
    assert!(matches!(
        open("shop.test", 443, Dialect::Socks5, true, true),
        After::Vetting { reply } if reply.is_empty()
    ));
}

/// Bytes behind a parent's answer to a tunnel that is not raw: an HTTP
/// or TLS destination never speaks first, so the machine refuses (the
/// parent's fault) rather than open.
#[test]
fn a_destination_that_speaks_first_behind_a_parent_is_refused_unless_raw() {
    let world = World::behind_parent();
    let mut run = Run::new("api.test", 80, Dialect::Http, world)
        .resolves("api.test", &["45.2.2.2"])
        .dial("45.0.0.9:3128", Dial::Connects)
        .settled();
    let mut upstream = MemPort::roomy();
    run.core.pump(&mut upstream, &run.world);
    upstream.deliver(b"HTTP/1.1 200 Connection established\r\n\r\n220 hi\r\n");
    match run.core.pump(&mut upstream, &run.world) {
        Next::Refused(Refusal::Parent(why)) => {
            assert!(why.contains("spoke before any request"), "{why}")
        }
        other => panic!("{other:?}"),
    }
}

/// Random orderings of everything the shell may report (answers, stray
/// answers, pins, connect outcomes, stray outcomes, a parent's bytes, late
/// timers, reloads), on random worlds: the machine never dials an address
/// the policy did not vet for this target (never a special-range address
/// no rule names, never the proxy's own), has at most one connect in
/// flight, keeps its one deadline, records the admission before any dial,
/// and ends once: after `Refused` or `Open`, nothing more is asked or said.
#[test]
fn random_reports_keep_the_machines_rules() {
    let mut rng = super::Rng(0x5eed_e57a_b115);
    let targets = [
        ("shop.test", 443),
        ("evil.test", 443),
        ("api.test", 80),
        ("45.1.1.9", 443),
        ("10.0.0.7", 443),
        ("gone.test", 443),
    ];
    let pool = [
        "45.1.1.1",
        "45.1.1.2",
        "10.0.0.7",
        "127.0.0.1",
        "169.254.169.254",
    ];
    let dialects = [Dialect::Http, Dialect::Socks5, Dialect::Forward];
    let inspected = Policy::from_rules(&[parse_cli_inspect("shop.test:443").unwrap()]).unwrap();
    for case in 0..3000 {
        let mut world = World::new();
        world.pins_settled.set(rng.below(3) != 0);
        world.budget_left = rng.below(4) != 0;
        world.vets = rng.below(2) == 0;
        if rng.below(3) == 0 {
            world.parent = Some(Arc::new(ParentProxy::parse(PARENT).unwrap()));
        }
        if rng.below(3) == 0 {
            world.own = vec!["45.1.1.1:443".parse().unwrap()];
        }
        let (host, port) = targets[rng.below(targets.len())];
        let dialect = dialects[rng.below(dialects.len())];
        let target = Target::new(host, port).unwrap();
        let mut core = EstablishCore::new(
            target.clone(),
            None,
            dialect,
            rng.below(2) == 0,
            deadline(10),
        );
        let answer: Vec<IpAddr> = (0..rng.below(4)).map(|_| ip(rng.pick(&pool))).collect();
        let mut vetted: Vec<IpAddr> = match &target.host {
            Host::Ip(ip) => vec![*ip],
            Host::Domain(_) => Vec::new(),
        };
        let (mut ended, mut admitted, mut in_flight) = (false, false, false);
        let mut now = at(0, 0);
        let mut next = core.begin(&world);
        let mut upstream = MemPort::roomy();
        for step in 0..30 {
            let ctx = format!("case {case} step {step} {host}:{port} {dialect:?}");
            // The shell carries out every action first.
            while let Some(action) = core.poll_action() {
                match action {
                    Action::Resolve(_) => {}
                    Action::AwaitPins => {}
                    Action::Admitted { .. } => {
                        assert!(!admitted, "{ctx}: admitted twice");
                        admitted = true;
                    }
                    Action::Dial(addr, vetted_ip) => {
                        assert!(!ended, "{ctx}: a dial after the end");
                        assert!(admitted, "{ctx}: a dial before the admission");
                        assert!(!in_flight, "{ctx}: two connects in flight");
                        assert!(
                            vetted.contains(&vetted_ip),
                            "{ctx}: {vetted_ip} never given"
                        );
                        assert!(
                            ip("45.1.1.0") < vetted_ip && vetted_ip <= ip("45.1.1.9"),
                            "{ctx}: dialled {vetted_ip}, which no rule names"
                        );
                        assert!(
                            !world.own.contains(&SocketAddr::new(vetted_ip, port)),
                            "{ctx}: dialled the proxy's own {vetted_ip}"
                        );
                        if world.parent.is_none() {
                            assert_eq!(addr, SocketAddr::new(vetted_ip, port), "{ctx}");
                        }
                        in_flight = true;
                        if rng.below(4) == 0 {
                            in_flight = false;
                            let e = io::Error::from(io::ErrorKind::AddrNotAvailable);
                            next = core.handle(Input::ConnectFailed(e), &world);
                        }
                    }
                }
            }
            match &next {
                Next::Working => {}
                Next::Refused(_) | Next::Open { .. } => {
                    assert!(!ended, "{ctx}: ended twice: {next:?}");
                    ended = true;
                    in_flight = false;
                }
            }
            assert_eq!(core.poll_timeout(), at(10, 0), "{ctx}: the one deadline");
            next = match rng.below(9) {
                0 | 1 => {
                    if core.stage() == "dns" {
                        vetted.extend(&answer);
                    }
                    core.handle(Input::Resolved(Ok(answer.clone())), &world)
                }
                2 => {
                    // Another answer: the target's own while its DNS is
                    // awaited, and stray (given for nothing) after.
                    let other = vec![ip(rng.pick(&pool))];
                    if core.stage() == "dns" {
                        vetted.extend(&other);
                    }
                    core.handle(Input::Resolved(Ok(other)), &world)
                }
                3 => {
                    world.pins_settled.set(true);
                    core.handle(Input::PinsSettled, &world)
                }
                4 => {
                    let was = std::mem::replace(&mut in_flight, false);
                    let input = match rng.below(2) {
                        0 => Input::Connected,
                        _ => Input::ConnectFailed(io::ErrorKind::ConnectionRefused.into()),
                    };
                    let n = core.handle(input, &world);
                    in_flight = was && core.connecting();
                    n
                }
                5 => {
                    let bytes: &[u8] = match rng.below(4) {
                        0 => b"HTTP/1.1 200 Connection established\r\n\r\n",
                        1 => b"HTTP/1.1 403 Forbidden\r\n\r\n",
                        2 => b"HTTP/1.1 200 OK\r\n\r\n220 hi",
                        _ => b"\x05\x00",
                    };
                    upstream.deliver(bytes);
                    core.pump(&mut upstream, &world)
                }
                6 => {
                    now += std::time::Duration::from_millis(rng.below(6000) as u64);
                    match core.handle_timeout(now) {
                        Some(refusal) => Next::Refused(refusal),
                        None => {
                            assert!(ended || now < at(10, 0), "{ctx}: a deadline not kept");
                            Next::Working
                        }
                    }
                }
                7 => {
                    let checked = inspected.check_resolved_at(&target, &[ip("45.1.1.1")], now);
                    if let Verdict::Allow(allowed) = checked {
                        core.reload(&allowed, |_| rng.below(2) == 0);
                    }
                    Next::Working
                }
                _ => Next::Working,
            };
            if ended {
                assert!(
                    matches!(next, Next::Working),
                    "{ctx}: said more after the end: {next:?}"
                );
            }
        }
    }
}
