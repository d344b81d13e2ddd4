//! The integration tests: one binary (so `support` is compiled once and its
//! self-tests run once), one module per scenario. Everything here runs the
//! real binary on loopback or in namespaces, with real clients.
//!
//! Stress tests (kill storms, scale, slowloris, accept exhaustion) are
//! `#[ignore]`d here and run once by `scripts/stress.sh`, which CI calls.

mod load;
mod support;

mod accept_exhaustion;
mod admin;
mod atk_fold;
mod atk_opening;
mod atk_pool;
mod attack_https;
mod attack_setup;
mod attack_users;
mod backpressure;
mod bad_input;
mod cabi;
mod client_identity;
mod composition;
mod control;
mod curl;
mod env;
mod fd_limits;
mod forward;
mod framing;
mod fronting;
mod half_close;
mod harness;
mod idle;
mod inspect_rules;
mod kill;
mod kill_storm;
mod ktls;
mod limits;
mod logs;
mod parent_proxy;
mod pins;
mod reload;
mod reset;
mod run;
mod scale;
mod shutdown;
mod slowloris;
mod std_listener;
mod tls_origin;
mod tls_terminate;
mod udp;
mod unix_listener;
mod upgrade;
mod users;
mod websocket;
mod workers;
mod writing_policy;
