//! `GET /metrics`: the counters in the Prometheus text exposition format
//! (version 0.0.4). Every family has `# HELP` and `# TYPE`; counters end
//! in `_total`; label values are escaped (rule names are the operator's,
//! but request-rule labels quote paths).

use std::fmt::Write;

use crate::lifecycle::CloseReason;
use crate::stats::{RuleCounts, StatsSnapshot, UdpDrop, WorkerStats};

/// The content type of the exposition format.
pub(crate) const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Renders every metric: the proxy's totals, then each worker's own
/// counters (`workers`, summing to the totals). `open_fds` when known.
pub(crate) fn render(
    s: &StatsSnapshot,
    rules: &[(String, RuleCounts)],
    workers: &[WorkerStats],
    open_fds: Option<u64>,
) -> String {
    let mut m = Metrics(String::with_capacity(4096));
    let o = &s.open;
    m.family(
        "portcullis_sessions_open",
        "gauge",
        "Sessions open now, by phase.",
    );
    for (phase, n) in [
        ("handshake", o.handshake),
        ("resolving", o.resolving),
        ("connecting", o.connecting),
        ("established", o.established),
        ("closing", o.closing),
    ] {
        m.sample("portcullis_sessions_open", &[("phase", phase)], n);
    }
    m.single(
        "portcullis_connections_accepted_total",
        "counter",
        "Connections accepted on the proxy listeners.",
        s.accepted,
    );
    m.single(
        "portcullis_sessions_allowed_total",
        "counter",
        "Sessions whose target policy allowed.",
        s.allowed,
    );
    m.single(
        "portcullis_sessions_denied_total",
        "counter",
        "Sessions whose target policy refused.",
        s.denied,
    );
    m.single(
        "portcullis_handshake_rate_refused_total",
        "counter",
        "CONNECTs to terminating rules refused at the per-client handshake rate.",
        s.handshake_rate_refused,
    );
    m.single(
        "portcullis_udp_associations_total",
        "counter",
        "SOCKS5 UDP associations opened.",
        s.udp.associations,
    );
    m.family(
        "portcullis_udp_datagrams_total",
        "counter",
        "SOCKS5 UDP datagrams relayed (up: client to destination, down: back).",
    );
    m.sample(
        "portcullis_udp_datagrams_total",
        &[("direction", "up")],
        s.udp.datagrams_up,
    );
    m.sample(
        "portcullis_udp_datagrams_total",
        &[("direction", "down")],
        s.udp.datagrams_down,
    );
    m.family(
        "portcullis_udp_bytes_total",
        "counter",
        "SOCKS5 UDP payload bytes relayed (headers not counted).",
    );
    m.sample(
        "portcullis_udp_bytes_total",
        &[("direction", "up")],
        s.udp.bytes_up,
    );
    m.sample(
        "portcullis_udp_bytes_total",
        &[("direction", "down")],
        s.udp.bytes_down,
    );
    m.family(
        "portcullis_udp_dropped_total",
        "counter",
        "SOCKS5 UDP datagrams dropped, never relayed, by reason.",
    );
    for why in UdpDrop::ALL {
        m.sample(
            "portcullis_udp_dropped_total",
            &[("reason", why.as_str())],
            s.udp.dropped(why),
        );
    }
    m.family(
        "portcullis_rule_sessions_total",
        "counter",
        "Session decisions by rule (rule=\"-\": no rule decided, e.g. deny by default).",
    );
    for (rule, c) in rules {
        for (decision, n) in [
            ("allow", c.allowed),
            ("deny", c.denied),
            ("would-deny", c.would_deny),
        ] {
            if n > 0 {
                m.sample(
                    "portcullis_rule_sessions_total",
                    &[("rule", rule), ("decision", decision)],
                    n,
                );
            }
        }
    }
    m.family(
        "portcullis_sessions_closed_total",
        "counter",
        "Sessions closed, by reason.",
    );
    for r in CloseReason::ALL {
        m.sample(
            "portcullis_sessions_closed_total",
            &[("reason", r.as_str())],
            s.closed.get(r),
        );
    }
    m.family(
        "portcullis_bytes_total",
        "counter",
        "Payload bytes relayed, by direction (up: client to upstream).",
    );
    m.sample("portcullis_bytes_total", &[("direction", "up")], s.bytes_up);
    m.sample(
        "portcullis_bytes_total",
        &[("direction", "down")],
        s.bytes_down,
    );
    m.family(
        "portcullis_requests_total",
        "counter",
        "Inspected HTTP requests, by decision.",
    );
    m.sample(
        "portcullis_requests_total",
        &[("decision", "allow")],
        s.requests_allowed,
    );
    m.sample(
        "portcullis_requests_total",
        &[("decision", "deny")],
        s.requests_denied,
    );
    m.family(
        "portcullis_rule_requests_total",
        "counter",
        "Inspected HTTP request decisions by request rule (rule=\"-\": refused before the rules, or no rules).",
    );
    for (rule, c) in rules {
        for (decision, n) in [
            ("allow", c.requests_allowed),
            ("deny", c.requests_denied),
            ("would-deny", c.requests_would_deny),
        ] {
            if n > 0 {
                m.sample(
                    "portcullis_rule_requests_total",
                    &[("rule", rule), ("decision", decision)],
                    n,
                );
            }
        }
    }
    m.single(
        "portcullis_upgrades_total",
        "counter",
        "Inspected sessions switched to raw bytes after 101 Switching Protocols.",
        s.upgrades,
    );
    m.single(
        "portcullis_tls_offloads_total",
        "counter",
        "Sides of terminated TLS sessions handed to the kernel after their handshakes (kTLS).",
        s.tls_offloads,
    );
    m.single(
        "portcullis_reactor_wakeups_total",
        "counter",
        "Times the reactor returned from poll (an idle proxy does not wake).",
        s.wakeups,
    );
    m.single(
        "portcullis_reactor_events_total",
        "counter",
        "Readiness events the reactor handled.",
        s.events,
    );
    m.family(
        "portcullis_reactor_events_per_wakeup",
        "gauge",
        "Readiness events per wakeup since start.",
    );
    let per = if s.wakeups == 0 {
        0.0
    } else {
        s.events as f64 / s.wakeups as f64
    };
    let _ = writeln!(m.0, "portcullis_reactor_events_per_wakeup {per}");
    m.single(
        "portcullis_accept_pauses_total",
        "counter",
        "Times accepting paused for lack of file descriptors.",
        s.accept_pauses,
    );
    m.single(
        "portcullis_resolver_queue_depth",
        "gauge",
        "Names waiting for a resolver thread.",
        s.resolver_queue,
    );
    m.single(
        "portcullis_workers",
        "gauge",
        "Reactor threads (workers) the proxy runs.",
        workers.len() as u64,
    );
    for (family, help, value) in [
        (
            "portcullis_worker_accepted_total",
            "Connections accepted, by worker.",
            (|w: &WorkerStats| w.accepted) as fn(&WorkerStats) -> u64,
        ),
        (
            "portcullis_worker_wakeups_total",
            "Times each worker's reactor returned from poll.",
            |w: &WorkerStats| w.wakeups,
        ),
    ] {
        m.family(family, "counter", help);
        for (i, w) in workers.iter().enumerate() {
            m.sample(family, &[("worker", &i.to_string())], value(w));
        }
    }
    m.single(
        "portcullis_auth_failures_total",
        "counter",
        "Logins refused: wrong password, unknown user, malformed credentials.",
        s.auth_failures,
    );
    m.single(
        "portcullis_auth_verifications_total",
        "counter",
        "Passwords verified with argon2 on the verifier pool.",
        s.auth_verifications,
    );
    m.single(
        "portcullis_auth_busy_total",
        "counter",
        "Logins refused unverified because the verifier queue was full.",
        s.auth_busy,
    );
    if let Some(n) = open_fds {
        m.single(
            "portcullis_open_fds",
            "gauge",
            "Open file descriptors of the process.",
            n,
        );
    }
    m.0
}

struct Metrics(String);

impl Metrics {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(
            self.0,
            "# HELP {name} {}",
            help.replace('\\', "\\\\").replace('\n', "\\n")
        );
        let _ = writeln!(self.0, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: u64) {
        self.0.push_str(name);
        if !labels.is_empty() {
            self.0.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.0.push(',');
                }
                let _ = write!(self.0, "{k}=\"");
                for c in v.chars() {
                    match c {
                        '\\' => self.0.push_str("\\\\"),
                        '"' => self.0.push_str("\\\""),
                        '\n' => self.0.push_str("\\n"),
                        c => self.0.push(c),
                    }
                }
                self.0.push('"');
            }
            self.0.push('}');
        }
        let _ = writeln!(self.0, " {value}");
    }

    fn single(&mut self, name: &str, kind: &str, help: &str, value: u64) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_declared_once_and_labels_escaped() {
        let rules = vec![(
            "we\"ird\\rule\nname".to_string(),
            RuleCounts {
                allowed: 2,
                requests_denied: 1,
                ..RuleCounts::default()
            },
        )];
        let s = StatsSnapshot {
            wakeups: 4,
            events: 6,
            ..StatsSnapshot::default()
        };
        let w = WorkerStats {
            accepted: 5,
            ..WorkerStats::default()
        };
        let text = render(&s, &rules, &[WorkerStats::default(), w], Some(9));
        assert!(text.contains("portcullis_workers 2\n"));
        assert!(text.contains("portcullis_worker_accepted_total{worker=\"0\"} 0\n"));
        assert!(text.contains("portcullis_worker_accepted_total{worker=\"1\"} 5\n"));
        assert!(text.contains(
            "portcullis_rule_sessions_total{rule=\"we\\\"ird\\\\rule\\nname\",decision=\"allow\"} 2\n"
        ), "{text}");
        assert!(text.contains("portcullis_rule_requests_total{rule=\"we\\\"ird\\\\rule\\nname\",decision=\"deny\"} 1\n"));
        assert!(text.contains("portcullis_reactor_events_per_wakeup 1.5\n"));
        assert!(text.contains("portcullis_open_fds 9\n"));
        assert!(text.contains("portcullis_sessions_closed_total{reason=\"client-gone\"} 0\n"));
        let mut types = std::collections::HashSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let name = rest.split(' ').next().unwrap();
                assert!(types.insert(name.to_string()), "{name} declared twice");
            } else if !line.starts_with('#') {
                let name = line.split(['{', ' ']).next().unwrap();
                assert!(types.contains(name), "{name} sampled before its TYPE");
            }
        }
        assert!(!render(&s, &[], &[], None).contains("open_fds"));
    }
}
