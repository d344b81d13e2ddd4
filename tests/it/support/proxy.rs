//! The proxy in-process: a builder on 127.0.0.1:0 with short timeouts,
//! loopback allow policies, and waits on its stats.

use std::net::SocketAddr;
use std::time::Duration;

use portcullis::policy::{parse_cli_rule, Action};
use portcullis::{
    Limits, ListenAddr, ListenerProtocol, Policy, Proxy, ProxyBuilder, SpawnedProxy, Timeouts,
};

use super::wait::{wait_for, PROMPTLY};

/// Short timeouts for tests: nothing should ever wait on them unless a test means to.
pub fn test_timeouts() -> Timeouts {
    let mut t = Timeouts::default();
    t.handshake = Duration::from_secs(5);
    t.connect = Duration::from_secs(5);
    t.idle = None;
    t.half_close = Duration::from_secs(30);
    t.close = Duration::from_secs(2);
    t.drain = Duration::from_secs(2);
    t.response = Duration::from_secs(5);
    t
}

/// [`test_timeouts`] changed by `f` (`Timeouts` is `#[non_exhaustive]`:
/// no struct literals outside the crate).
pub fn timeouts(f: impl FnOnce(&mut Timeouts)) -> Timeouts {
    let mut t = test_timeouts();
    f(&mut t);
    t
}

/// The default limits.
pub fn test_limits() -> Limits {
    Limits::default()
}

/// [`test_limits`] changed by `f`.
pub fn limits(f: impl FnOnce(&mut Limits)) -> Limits {
    let mut l = test_limits();
    f(&mut l);
    l
}

/// [`test_limits`] with room for floods: 1000 sessions and pending
/// handshakes, in all and per client (every test client is one client to
/// admission).
pub fn flood_limits() -> Limits {
    limits(|l| {
        l.max_sessions = 1000;
        l.max_sessions_per_client = 1000;
        l.max_pending_handshakes = 1000;
        l.max_pending_handshakes_per_client = 1000;
    })
}

/// A policy allowing exactly these loopback ports on 127.0.0.1.
pub fn allow_ports(ports: &[u16]) -> Policy {
    let rules: Vec<_> = ports
        .iter()
        .map(|p| parse_cli_rule(Action::Allow, &format!("127.0.0.1:{p}")).expect("rule"))
        .collect();
    Policy::from_rules(&rules).expect("policy")
}

/// A policy from command-line style allow rules, e.g. `["localhost:8080"]`.
pub fn allow_rules(specs: &[&str]) -> Policy {
    let rules: Vec<_> = specs
        .iter()
        .map(|s| parse_cli_rule(Action::Allow, s).expect("rule"))
        .collect();
    Policy::from_rules(&rules).expect("policy")
}

/// A builder with one auto listener on 127.0.0.1:0, `policy` and test timeouts.
pub fn proxy_builder(policy: Policy) -> ProxyBuilder {
    Proxy::builder()
        .listen(
            ListenAddr::Tcp("127.0.0.1:0".parse().unwrap()),
            ListenerProtocol::Auto,
        )
        .policy(policy)
        .timeouts(test_timeouts())
}

/// A proxy on 127.0.0.1:0 (auto) with `policy` and test timeouts, running on its thread.
pub fn start_proxy(policy: Policy) -> SpawnedProxy {
    spawn(proxy_builder(policy))
}

/// Builds and spawns.
pub fn spawn(builder: ProxyBuilder) -> SpawnedProxy {
    builder
        .build()
        .expect("bind proxy")
        .spawn()
        .expect("spawn proxy")
}

/// Limits with a given relay buffer size.
pub fn limits_with_buffer(buffer_size: usize) -> Limits {
    limits(|l| l.buffer_size = buffer_size)
}

pub fn proxy_addr(p: &SpawnedProxy) -> SocketAddr {
    p.tcp_addr().expect("proxy has a TCP listener")
}

/// Waits until the proxy has no open sessions.
#[track_caller]
pub fn wait_no_open_sessions(p: &SpawnedProxy) {
    wait_for("no open sessions", PROMPTLY, || p.stats().open.total() == 0);
}
