//! Bounds on waiting, and polling until a condition holds. The bounds only
//! stop a broken test from hanging: no test asserts on wall-clock time.

use std::thread;
use std::time::{Duration, Instant};

/// Upper bound for anything that should happen "promptly" (never a speed assertion).
pub const PROMPTLY: Duration = Duration::from_secs(5);
/// Upper bound for a whole bulk transfer, to avoid hanging forever.
pub const BULK: Duration = Duration::from_secs(240);

/// Polls `cond` until it holds or `timeout` passes; returns whether it held.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// Like [`wait_until`], but panics with `what` when the deadline passes.
#[track_caller]
pub fn wait_for(what: &str, timeout: Duration, cond: impl FnMut() -> bool) {
    assert!(
        wait_until(timeout, cond),
        "timed out after {timeout:?} waiting for: {what}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_until_reports_whether_the_condition_held() {
        assert!(wait_until(Duration::ZERO, || true));
        assert!(!wait_until(Duration::ZERO, || false));
        let mut calls = 0;
        assert!(wait_until(PROMPTLY, || {
            calls += 1;
            calls == 3
        }));
        assert_eq!(calls, 3);
    }

    #[test]
    #[should_panic(expected = "waiting for: the impossible")]
    fn wait_for_panics_with_its_reason() {
        wait_for("the impossible", Duration::ZERO, || false);
    }
}
