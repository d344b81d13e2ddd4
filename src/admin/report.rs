//! `GET /stats` and the control `stats` answer: the counters as JSON. Also
//! the process's open file descriptors, counted when asked.

use serde_json::{json, Map, Value};

use crate::lifecycle::CloseReason;
use crate::stats::{RuleCounts, StatsSnapshot};

/// The counters as one JSON object; `open_fds` when known.
pub(crate) fn stats_value(
    s: &StatsSnapshot,
    rules: &[(String, RuleCounts)],
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
        "resolver_queue": s.resolver_queue,
        "rules": by_rule,
    });
    if let (Some(n), Value::Object(m)) = (open_fds, &mut v) {
        m.insert("open_fds".into(), json!(n));
    }
    v
}

/// The process's open file descriptors now (Linux: the entries of
/// /proc/self/fd, less the one reading it); `None` elsewhere.
pub(crate) fn open_fds() -> Option<u64> {
    if !cfg!(target_os = "linux") {
        return None;
    }
    let dir = std::fs::read_dir("/proc/self/fd").ok()?;
    Some((dir.count() as u64).saturating_sub(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_counter_and_every_close_reason() {
        let v = stats_value(
            &StatsSnapshot::default(),
            &[("web".into(), RuleCounts::default())],
            Some(7),
        );
        assert_eq!(v["open_fds"], 7);
        assert_eq!(v["open"]["total"], 0);
        assert_eq!(v["rules"]["web"]["allowed"], 0);
        let closed = v["closed"].as_object().unwrap();
        assert_eq!(closed.len(), CloseReason::ALL.len());
        assert!(stats_value(&StatsSnapshot::default(), &[], None)
            .get("open_fds")
            .is_none());
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn open_fds_counts_ours() {
        let before = open_fds().unwrap();
        let f = std::fs::File::open("/proc/self/stat").unwrap();
        // Other test threads open files too: at least one more.
        assert!(open_fds().unwrap() >= 1);
        drop(f);
        assert!(before >= 3, "stdin, stdout, stderr at least: {before}");
    }
}
