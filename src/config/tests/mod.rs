//! Unit tests for the configuration (`src/config.rs` and `src/config/`),
//! one file per concern; the helpers they share are here.

mod errors;
mod file;
mod listeners;
mod rules;
mod tls;
mod users;
mod validation;

use super::*;

pub(super) fn err(text: &str) -> String {
    ConfigFile::parse(text)
        .expect_err("should fail")
        .to_string()
}

/// A config with an empty policy, so validation tests need no policy code.
pub(super) fn valid() -> Config {
    Config {
        listeners: vec![default_listener()],
        policy: Policy::default(),
        timeouts: Timeouts::default(),
        limits: Limits::default(),
        auth: None,
        users: Vec::new(),
        tls: TlsConfig::default(),
        upstream_proxy: None,
        admin: None,
        log_format: crate::config::LogFormat::Text,
    }
}

pub(super) fn invalid_key(c: &Config) -> String {
    c.validate()
        .expect_err("should be invalid")
        .key_name()
        .expect("names a key")
        .to_string()
}

/// Compiles `text` and returns the error as printed.
pub(super) fn compile_err(text: &str) -> String {
    ConfigFile::parse(text)
        .and_then(ConfigFile::compile)
        .expect_err("should fail")
        .to_string()
}
