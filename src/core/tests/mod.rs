//! The core's tests: the exchange through the core's pump, and whole
//! sessions (TLS, timeouts, ends) in the simulator with virtual time.

mod attack;
mod closing;
mod dial;
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
