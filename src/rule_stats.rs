//! Decisions counted per rule: connections allowed, denied and let through
//! by audit mode under each rule, and inspected requests likewise under each
//! request rule. Shared like the other counters (one map for every reactor
//! of a proxy); keyed by name, so counts carry over a policy reload.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Names tracked at most; decisions under further names are counted under
/// [`OTHER`], so a stream of reloads with new names cannot grow the map
/// without bound.
const MAX_NAMES: usize = 1024;
/// Where decisions past [`MAX_NAMES`] are counted.
pub const OTHER: &str = "(other)";
/// The label of decisions no rule made (deny by default, a special address,
/// a request refused before the rules).
pub const NO_RULE: &str = "-";

/// What was decided, for the per-rule tally.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Allowed,
    Denied,
    WouldDeny,
}

/// One rule's tallies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RuleCounts {
    /// Connections this rule allowed.
    pub allowed: u64,
    /// Connections this rule denied.
    pub denied: u64,
    /// Connections this rule would have denied (audit mode).
    pub would_deny: u64,
    /// Inspected requests this request rule allowed.
    pub requests_allowed: u64,
    /// Inspected requests this request rule denied.
    pub requests_denied: u64,
    /// Inspected requests this request rule would have denied (audit mode).
    pub requests_would_deny: u64,
}

/// The per-rule tallies of a proxy.
#[derive(Debug, Default)]
pub(crate) struct RuleStats {
    map: Mutex<BTreeMap<Arc<str>, RuleCounts>>,
}

impl RuleStats {
    /// Counts a connection decision under `rule` (`None`: [`NO_RULE`]).
    pub(crate) fn connection(&self, rule: Option<&Arc<str>>, outcome: Outcome) {
        self.bump(rule, |c| match outcome {
            Outcome::Allowed => &mut c.allowed,
            Outcome::Denied => &mut c.denied,
            Outcome::WouldDeny => &mut c.would_deny,
        });
    }

    /// Counts a request decision under `rule` (`None`: [`NO_RULE`]).
    pub(crate) fn request(&self, rule: Option<&Arc<str>>, outcome: Outcome) {
        self.bump(rule, |c| match outcome {
            Outcome::Allowed => &mut c.requests_allowed,
            Outcome::Denied => &mut c.requests_denied,
            Outcome::WouldDeny => &mut c.requests_would_deny,
        });
    }

    fn bump(&self, rule: Option<&Arc<str>>, field: impl FnOnce(&mut RuleCounts) -> &mut u64) {
        // A poisoned lock only means a reader panicked mid-copy: the counts are fine.
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let name: Arc<str> = match rule {
            Some(r) if map.contains_key(r) || map.len() < MAX_NAMES => Arc::clone(r),
            Some(_) => OTHER.into(),
            None => NO_RULE.into(),
        };
        *field(map.entry(name).or_default()) += 1;
    }

    /// Every rule's tallies, by name.
    pub(crate) fn snapshot(&self) -> Vec<(String, RuleCounts)> {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_name_and_caps_the_names() {
        let s = RuleStats::default();
        let a: Arc<str> = "a".into();
        s.connection(Some(&a), Outcome::Allowed);
        s.connection(Some(&a), Outcome::Allowed);
        s.connection(None, Outcome::Denied);
        s.request(Some(&a), Outcome::WouldDeny);
        let snap = s.snapshot();
        assert_eq!(snap.len(), 2);
        assert_eq!(snap[0].0, "-");
        assert_eq!(snap[0].1.denied, 1);
        assert_eq!((snap[1].1.allowed, snap[1].1.requests_would_deny), (2, 1));

        for i in 0..MAX_NAMES + 10 {
            s.connection(Some(&Arc::from(format!("r{i}"))), Outcome::Denied);
        }
        let snap = s.snapshot();
        assert!(snap.len() <= MAX_NAMES + 1, "{}", snap.len());
        let other = snap.iter().find(|(n, _)| n == OTHER).unwrap();
        assert!(other.1.denied >= 10);
    }
}
