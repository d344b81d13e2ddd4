//! The core's tests: the exchange through the core's pump, and whole
//! sessions (TLS, timeouts, ends) in the simulator with virtual time.

mod attack;
mod exchange_bounds;
mod exchange_flow;
mod exchange_refusals;
mod exchange_runs;
mod exchange_secrets;
mod exchange_sim;
mod exchange_upstream;
mod fuzz_smoke;
mod session;
mod sim;
