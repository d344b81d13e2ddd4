//! The core's tests: the exchange through the core's pump, and whole
//! sessions (TLS, timeouts, ends) in the simulator with virtual time.

mod attack;
mod closing;
mod dial;
mod establish;
mod exchange_bounds;
mod exchange_flow;
mod exchange_gate;
mod exchange_refusals;
mod exchange_runs;
mod exchange_secrets;
mod exchange_sim;
mod exchange_upstream;
mod fuzz_smoke;
mod handshake;
pub(crate) mod kernel;
mod ktls;
mod machine;
mod opening;
mod route;
mod securing;
mod session;
mod sim;
mod vetting;

/// Pseudo-random numbers (xorshift) from a fixed seed, so a failure
/// reproduces.
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number below `n`.
    pub(super) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub(super) fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}

/// Virtual time's origin: the instant the tests' stages start at (read
/// once; nothing here waits on the clock).
pub(super) fn t0() -> std::time::Instant {
    static T0: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    *T0.get_or_init(std::time::Instant::now)
}

/// The deadline a stage started at [`t0`] has: `secs` later.
pub(super) fn deadline(secs: u64) -> crate::core::clock::Deadline {
    crate::core::clock::Deadline::after(t0(), std::time::Duration::from_secs(secs))
}

/// `secs` (and `millis`) after [`t0`].
pub(super) fn at(secs: u64, millis: u64) -> std::time::Instant {
    t0() + std::time::Duration::from_secs(secs) + std::time::Duration::from_millis(millis)
}
