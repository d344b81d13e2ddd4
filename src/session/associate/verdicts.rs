//! What the policy says about an association's destinations, and the
//! table that remembers it: a verdict per destination (host and port) for
//! [`VERDICT_TTL`], so a steady flow costs one policy check, not one per
//! datagram. Bounded: past [`MAX_VERDICTS`] the expired go, then all.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::super::conn::Conn;
use super::super::ctx::Ctx;
use crate::policy::{Host, NameVerdict, Route, Target, Verdict};
use crate::rule_stats::Outcome;
use crate::stats::UdpDrop;

/// How long a destination's verdict (and its resolved address) is reused.
pub(super) const VERDICT_TTL: Duration = Duration::from_secs(30);
/// How long a name that did not resolve is not asked again.
pub(super) const RESOLVE_FAILED_TTL: Duration = Duration::from_secs(5);
/// Destinations remembered at once, per association.
const MAX_VERDICTS: usize = 1024;

/// A destination's verdict, until `until`: where to send, or why not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Cached {
    pub(super) send: Result<SocketAddr, UdpDrop>,
    pub(super) until: Instant,
}

/// The verdicts of one association.
#[derive(Debug, Default)]
pub(super) struct Verdicts(HashMap<Target, Cached>);

impl Verdicts {
    /// The verdict on `target`, unless it expired.
    pub(super) fn get(&self, target: &Target, now: Instant) -> Option<Cached> {
        self.0.get(target).filter(|c| c.until > now).copied()
    }

    pub(super) fn remember(&mut self, target: Target, cached: Cached, now: Instant) {
        if self.0.len() >= MAX_VERDICTS {
            self.0.retain(|_, c| c.until > now);
            if self.0.len() >= MAX_VERDICTS {
                self.0.clear();
            }
        }
        self.0.insert(target, cached);
    }

    /// Forgets every verdict (a policy reload).
    pub(super) fn clear(&mut self) {
        self.0.clear();
    }
}

/// Judges `target` without DNS where it can: an address literal, or a
/// name the policy refuses as such. `None`: its name must be resolved.
pub(super) fn judge_now(
    target: &Target,
    relay: SocketAddr,
    loud: bool,
    conn: &Conn,
    ctx: &mut Ctx,
) -> Option<Cached> {
    let user = conn.log.user.as_deref();
    match &target.host {
        Host::Ip(ip) => Some(judge(target, &[*ip], relay, loud, conn, ctx)),
        Host::Domain(_) => match ctx.policy.check_name_as(target, user) {
            NameVerdict::Deny(denial) => {
                ctx.stats.rules.connection(denial.rule(), Outcome::Denied);
                refused_line(loud, conn, target, &denial);
                Some(Cached {
                    send: Err(UdpDrop::Denied),
                    until: ctx.now + VERDICT_TTL,
                })
            }
            NameVerdict::Resolve => None,
        },
    }
}

/// Logs a refused destination: at info while the association is `loud`
/// (its first refusals), else at debug (a datagram to a new destination
/// costs a client a few bytes; a log line each would let it flood the log).
pub(super) fn refused_line(loud: bool, conn: &Conn, target: &Target, why: &dyn std::fmt::Display) {
    let level = if loud {
        log::Level::Info
    } else {
        log::Level::Debug
    };
    log::log!(level, "conn={} udp {target}: dropped: {why}", conn.id);
}

/// The policy's verdict on `target` at `addrs`, as a datagram's fate
/// (`loud`: a refusal is logged at info, see [`refused_line`]).
pub(super) fn judge(
    target: &Target,
    addrs: &[IpAddr],
    relay: SocketAddr,
    loud: bool,
    conn: &Conn,
    ctx: &mut Ctx,
) -> Cached {
    let user = conn.log.user.as_deref();
    let until = ctx.now + VERDICT_TTL;
    let refuse = |why: String, rule: Option<&Arc<str>>| {
        ctx.stats.rules.connection(rule, Outcome::Denied);
        refused_line(loud, conn, target, &why);
        Cached {
            send: Err(UdpDrop::Denied),
            until,
        }
    };
    let allowed = match ctx.policy.check_resolved_as(target, user, addrs, ctx.now) {
        Verdict::Deny(denial) => return refuse(denial.to_string(), denial.rule()),
        Verdict::Allow(a) => a,
    };
    if allowed.is_inspected() {
        let why = format!(
            "rule {} inspects {target}, and UDP cannot be inspected; allow it for UDP with a rule that does not inspect",
            allowed.rule
        );
        return refuse(why, Some(&allowed.rule));
    }
    let parent = match &allowed.route {
        Some(Route::Direct) => false,
        Some(Route::Parent(_)) => true,
        None => ctx.settings.upstream_proxy.is_some(),
    };
    if parent {
        let why = format!(
            "rule {} sends {target} through a parent proxy, which cannot carry UDP; give the rule upstream_proxy = \"direct\" to relay it",
            allowed.rule
        );
        return refuse(why, Some(&allowed.rule));
    }
    let to = allowed
        .addrs
        .iter()
        .map(|ip| SocketAddr::new(*ip, target.port))
        .find(|a| {
            !ctx.settings.own.contains(*a) && !ctx.settings.own.contains_udp(*a) && *a != relay
        });
    let Some(to) = to else {
        return refuse("it is the proxy's own address".into(), Some(&allowed.rule));
    };
    let outcome = if allowed.audit.is_some() {
        Outcome::WouldDeny
    } else {
        Outcome::Allowed
    };
    ctx.stats.rules.connection(Some(&allowed.rule), outcome);
    log::debug!(
        "conn={} udp allow {target} by rule {}",
        conn.id,
        allowed.rule
    );
    Cached {
        send: Ok(to),
        until,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(port: u16) -> Target {
        Target::new("192.0.2.1", port).unwrap()
    }

    fn send(port: u16, until: Instant) -> Cached {
        Cached {
            send: Ok(SocketAddr::from(([192, 0, 2, 1], port))),
            until,
        }
    }

    #[test]
    fn verdicts_expire() {
        let now = Instant::now();
        let mut v = Verdicts::default();
        v.remember(target(53), send(53, now + VERDICT_TTL), now);
        assert_eq!(v.get(&target(53), now), Some(send(53, now + VERDICT_TTL)));
        assert_eq!(v.get(&target(54), now), None, "per port");
        assert_eq!(v.get(&target(53), now + VERDICT_TTL), None, "expired");
        v.clear();
        assert_eq!(v.get(&target(53), now), None);
    }

    #[test]
    fn the_table_is_bounded() {
        let now = Instant::now();
        let mut v = Verdicts::default();
        // Half expire soon: a full table drops those first.
        for p in 1..=MAX_VERDICTS as u16 {
            let until = if p % 2 == 0 {
                now + VERDICT_TTL
            } else {
                now + Duration::from_secs(1)
            };
            v.remember(target(p), send(p, until), now);
        }
        let later = now + Duration::from_secs(2);
        v.remember(target(60_000), send(60_000, later + VERDICT_TTL), later);
        assert_eq!(v.0.len(), MAX_VERDICTS / 2 + 1);
        assert!(v.get(&target(2), later).is_some());
        // Full of live verdicts: all go, the new one stays.
        let mut v = Verdicts::default();
        for p in 1..=MAX_VERDICTS as u16 {
            v.remember(target(p), send(p, now + VERDICT_TTL), now);
        }
        v.remember(target(60_001), send(1, now + VERDICT_TTL), now);
        assert_eq!(v.0.len(), 1);
    }
}
