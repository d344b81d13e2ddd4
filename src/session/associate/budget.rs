//! The proxy-wide budget for datagrams waiting on a name lookup.
//!
//! Each association queues at most [`super::MAX_WAITING`] datagrams of
//! [`super::MAX_WAITING_BYTES`] while the names they are sent to resolve,
//! but associations are many (one per session the limits allow): clients
//! sending to names that never resolve could otherwise hold that much in
//! every one. Every association's queue also draws on one shared budget,
//! released when the datagrams leave the queue or the association ends
//! (by `Drop`, so no close path can leak it).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Bytes every association's waiting datagrams may hold together.
pub(crate) const WAITING_BYTES_TOTAL: usize = 32 * 1024 * 1024;

/// The shared budget (one per proxy, cloned into every worker's settings).
#[derive(Debug)]
pub(crate) struct WaitBudget {
    used: AtomicUsize,
    cap: usize,
}

impl WaitBudget {
    pub(crate) fn new(cap: usize) -> Arc<WaitBudget> {
        Arc::new(WaitBudget {
            used: AtomicUsize::new(0),
            cap,
        })
    }

    /// Bytes held now, by every association.
    #[cfg(test)]
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }
}

/// One association's share of the budget.
#[derive(Debug)]
pub(crate) struct Held {
    budget: Arc<WaitBudget>,
    bytes: usize,
}

impl Held {
    pub(crate) fn new(budget: Arc<WaitBudget>) -> Held {
        Held { budget, bytes: 0 }
    }

    /// This association's bytes.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Takes `n` bytes if the budget has them.
    pub(crate) fn take(&mut self, n: usize) -> bool {
        let cap = self.budget.cap;
        let taken = self
            .budget
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(n).filter(|&total| total <= cap)
            })
            .is_ok();
        if taken {
            self.bytes += n;
        }
        taken
    }

    /// Gives `n` bytes back (a datagram left the queue).
    pub(crate) fn give(&mut self, n: usize) {
        let n = n.min(self.bytes);
        self.bytes -= n;
        self.budget.used.fetch_sub(n, Ordering::AcqRel);
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_are_bounded_together_and_released_on_drop() {
        let budget = WaitBudget::new(100);
        let mut a = Held::new(Arc::clone(&budget));
        let mut b = Held::new(Arc::clone(&budget));
        assert!(a.take(60));
        assert!(!b.take(41), "over the shared cap");
        assert!(b.take(40));
        assert_eq!(budget.used(), 100);
        a.give(10);
        assert_eq!((a.bytes(), budget.used()), (50, 90));
        // More than held is never given back.
        b.give(1000);
        assert_eq!((b.bytes(), budget.used()), (0, 50));
        drop(a);
        assert_eq!(budget.used(), 0);
        assert!(!b.take(usize::MAX), "no overflow");
    }
}
