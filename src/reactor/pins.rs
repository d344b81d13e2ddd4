//! Whether the addresses of the policy's inspected names are known yet.
//!
//! Rule composition keeps an inspected name's addresses from being reached
//! raw through a broader rule (a CIDR allow, a literal, an alias name), and
//! adds the name's rule (its request rules) to a broader inspecting one's,
//! but only as far as the policy's memory knows those addresses. The reactor
//! resolves the inspected names off the loop when a policy takes effect
//! (at start, on reload, on a control edit) and again every
//! [`crate::policy::REFRESH_EVERY`] while traffic flows. Until the first
//! round of a policy has been answered, an allowed connection (raw or
//! inspected) waits for it (within its connect deadline, so a resolver that never
//! answers fails it closed); whenever a round teaches the memory a new
//! address, every open session is checked again, so a raw tunnel to that
//! address closes with `policy-reload`.

/// One worker's rounds of resolving the inspected names.
#[derive(Debug, Default)]
pub(crate) struct Pins {
    /// The round in flight (answers of older rounds only teach the memory).
    round: u64,
    /// Answers of this round still due.
    pending: usize,
    /// The policy in force has had its names resolved once.
    settled: bool,
    /// This round taught the memory an address it did not have.
    learned: bool,
}

/// A round ended: what the reactor does about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Settled {
    /// Check every open session again (the memory knows more).
    pub(crate) recheck: bool,
}

impl Pins {
    /// A round of `jobs` resolutions starts; `new_policy`: a policy just
    /// took effect, so raw connections wait for this round. Returns the
    /// round's id, and whether it is already over (nothing to resolve).
    pub(crate) fn start(&mut self, jobs: usize, new_policy: bool) -> (u64, Option<Settled>) {
        self.round += 1;
        self.pending = jobs;
        self.learned = false;
        if new_policy {
            self.settled = false;
        }
        if jobs == 0 {
            self.settled = true;
            return (self.round, Some(Settled { recheck: false }));
        }
        (self.round, None)
    }

    /// An answer of round `round` came; `learned`: it taught the memory a
    /// new address. Returns what to do when it ends the current round.
    pub(crate) fn answered(&mut self, round: u64, learned: bool) -> Option<Settled> {
        if round != self.round || self.pending == 0 {
            // An older round's answer: the memory took it; nothing waits on it.
            return learned.then_some(Settled { recheck: true });
        }
        self.learned |= learned;
        self.pending -= 1;
        if self.pending > 0 {
            return None;
        }
        self.settled = true;
        Some(Settled {
            recheck: self.learned,
        })
    }

    /// The policy in force has had its inspected names resolved once: raw
    /// connections need not wait.
    pub(crate) fn settled(&self) -> bool {
        self.settled
    }

    /// A round's answers are still due. A refresh then starts none: it
    /// would queue every name again behind the jobs still in the resolver's
    /// queue, and supersede the round, so a policy not yet settled would
    /// wait for the new round instead (with slow DNS, rounds longer than
    /// the refresh interval would never settle and the queue would grow).
    pub(crate) fn in_flight(&self) -> bool {
        self.pending > 0
    }
}

/// The sessions waiting for the current policy's first round, by slab key
/// and session id. One that ends meanwhile (its connect deadline passed,
/// its client left) leaves its entry behind; entries are swept once they
/// outnumber the open sessions, so the list is bounded by the slab, not
/// by how many connections came and went while a round was out.
#[derive(Debug, Default)]
pub(crate) struct Waiting(Vec<(usize, u64)>);

impl Waiting {
    /// Adds `(key, id)`; `open`: the sessions in the slab, `live`: whether
    /// an entry's session is still there (and not done).
    pub(crate) fn push(
        &mut self,
        key: usize,
        id: u64,
        open: usize,
        live: impl Fn(usize, u64) -> bool,
    ) {
        // After a sweep at most `open` entries are left, so the next comes
        // at least `open + 16` pushes later: linear overall.
        if self.0.len() >= 2 * open + 16 {
            self.0.retain(|&(k, i)| live(k, i));
        }
        self.0.push((key, id));
    }

    /// Every entry, leaving none.
    pub(crate) fn take(&mut self) -> Vec<(usize, u64)> {
        std::mem::take(&mut self.0)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_policy_is_unsettled_until_its_round_is_answered() {
        let mut p = Pins::default();
        let (round, now) = p.start(2, true);
        assert_eq!(now, None);
        assert!(!p.settled());
        assert_eq!(p.answered(round, false), None);
        assert!(!p.settled(), "one answer of two");
        assert_eq!(p.answered(round, true), Some(Settled { recheck: true }));
        assert!(p.settled());
    }

    #[test]
    fn a_round_that_learns_nothing_rechecks_nothing() {
        let mut p = Pins::default();
        let (round, _) = p.start(1, true);
        assert_eq!(p.answered(round, false), Some(Settled { recheck: false }));
    }

    #[test]
    fn nothing_to_resolve_is_settled_at_once() {
        let mut p = Pins::default();
        assert_eq!(p.start(0, true).1, Some(Settled { recheck: false }));
        assert!(p.settled());
    }

    #[test]
    fn a_refresh_keeps_a_settled_policy_settled() {
        let mut p = Pins::default();
        let (r1, _) = p.start(1, true);
        p.answered(r1, false);
        let (r2, _) = p.start(3, false);
        assert!(p.settled(), "raw connections do not wait for refreshes");
        assert_eq!(p.answered(r2, false), None);
    }

    #[test]
    fn a_round_is_in_flight_until_its_last_answer() {
        let mut p = Pins::default();
        assert!(!p.in_flight());
        let (r, _) = p.start(2, true);
        assert!(p.in_flight());
        p.answered(r, false);
        assert!(p.in_flight());
        p.answered(r, false);
        assert!(!p.in_flight());
        p.start(0, false);
        assert!(!p.in_flight(), "nothing to resolve");
    }

    #[test]
    fn answers_of_an_older_round_settle_nothing_but_still_recheck() {
        let mut p = Pins::default();
        let (old, _) = p.start(1, true);
        let (new, _) = p.start(1, true);
        assert_eq!(p.answered(old, false), None);
        assert!(
            !p.settled(),
            "the old round's answer does not settle the new policy"
        );
        assert_eq!(p.answered(old, true), Some(Settled { recheck: true }));
        assert!(!p.settled());
        assert_eq!(p.answered(new, false), Some(Settled { recheck: false }));
        assert!(p.settled());
    }

    #[test]
    fn waiting_keeps_no_more_than_the_open_sessions_need() {
        let mut w = Waiting::default();
        // One session open at a time; every earlier one has ended (its
        // connect deadline passed while the round was out).
        for id in 0..10_000u64 {
            w.push(0, id, 1, |_, i| i == id);
        }
        assert!(w.len() <= 2 + 16 + 1, "{} entries for one session", w.len());
        assert_eq!(w.take().last(), Some(&(0, 9_999)));
        assert_eq!(w.len(), 0);
    }

    #[test]
    fn waiting_keeps_every_live_session() {
        let mut w = Waiting::default();
        for key in 0..100 {
            w.push(key, key as u64, key + 1, |_, _| true);
        }
        assert_eq!(w.take().len(), 100);
    }
}
