//! The counters as JSON: what `GET /stats` on the admin endpoint and the
//! control `stats` command answer (both sides use it, so neither imports
//! the other for it).

use serde_json::{json, Map, Value};

use super::{RuleCounts, StatsSnapshot, UdpDrop, WorkerStats};
use crate::lifecycle::CloseReason;

/// The counters as one JSON object; each worker's own counters under
/// `workers` when given; `open_fds` when known.
pub(crate) fn stats_value(
    s: &StatsSnapshot,
    rules: &[(String, RuleCounts)],
    workers: &[WorkerStats],
    open_fds: Option<u64>,
) -> Value {
    let o = &s.open;
    let closed: Map<String, Value> = CloseReason::ALL
        .iter()
        .map(|&r| (r.as_str().to_string(), json!(s.closed.get(r))))
        .collect();
    let by_rule: Map<String, Value> = rules
        .iter()
        .map(|(name, c)| {
            (
                name.clone(),
                json!({
                    "allowed": c.allowed,
                    "denied": c.denied,
                    "would_deny": c.would_deny,
                    "requests_allowed": c.requests_allowed,
                    "requests_denied": c.requests_denied,
                    "requests_would_deny": c.requests_would_deny,
                }),
            )
        })
        .collect();
    let mut v = json!({
        "accepted": s.accepted,
        "allowed": s.allowed,
        "denied": s.denied,
        "open": {
            "total": o.total(),
            "handshake": o.handshake,
            "resolving": o.resolving,
            "connecting": o.connecting,
            "established": o.established,
            "closing": o.closing,
        },
        "closed": closed,
        "bytes_up": s.bytes_up,
        "bytes_down": s.bytes_down,
        "wakeups": s.wakeups,
        "events": s.events,
        "accept_pauses": s.accept_pauses,
        "requests": s.requests,
        "requests_allowed": s.requests_allowed,
        "requests_denied": s.requests_denied,
        "upgrades": s.upgrades,
        "tls_offloads": s.tls_offloads,
        "resolver_queue": s.resolver_queue,
        "auth_failures": s.auth_failures,
        "auth_verifications": s.auth_verifications,
        "auth_busy": s.auth_busy,
        "handshake_rate_refused": s.handshake_rate_refused,
        "rules": by_rule,
        "udp": {
            "associations": s.udp.associations,
            "datagrams_up": s.udp.datagrams_up,
            "datagrams_down": s.udp.datagrams_down,
            "bytes_up": s.udp.bytes_up,
            "bytes_down": s.udp.bytes_down,
            "dropped": UdpDrop::ALL
                .iter()
                .map(|&w| (w.as_str().to_string(), json!(s.udp.dropped(w))))
                .collect::<Map<String, Value>>(),
        },
    });
    if let (false, Value::Object(m)) = (workers.is_empty(), &mut v) {
        let list: Vec<Value> = workers
            .iter()
            .map(|w| json!({"accepted": w.accepted, "wakeups": w.wakeups}))
            .collect();
        m.insert("workers".into(), Value::Array(list));
    }
    if let (Some(n), Value::Object(m)) = (open_fds, &mut v) {
        m.insert("open_fds".into(), json!(n));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_counter_and_every_close_reason() {
        let v = stats_value(
            &StatsSnapshot::default(),
            &[("web".into(), RuleCounts::default())],
            &[WorkerStats::default(); 2],
            Some(7),
        );
        assert_eq!(v["open_fds"], 7);
        assert_eq!(v["workers"][1]["accepted"], 0);
        assert_eq!(v["open"]["total"], 0);
        assert_eq!(v["rules"]["web"]["allowed"], 0);
        let closed = v["closed"].as_object().unwrap();
        assert_eq!(closed.len(), CloseReason::ALL.len());
        assert_eq!(v["udp"]["dropped"]["denied"], 0);
        assert_eq!(
            v["udp"]["dropped"].as_object().unwrap().len(),
            UdpDrop::ALL.len()
        );
        assert!(stats_value(&StatsSnapshot::default(), &[], &[], None)
            .get("open_fds")
            .is_none());
    }
}
