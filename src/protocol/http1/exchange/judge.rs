//! What the exchange asks of whoever runs it: a verdict on each request and
//! each upgrade, and the secrets a request's headers may carry. The session
//! core answers from the policy (`core::verdicts`); the exchange never sees
//! the policy itself, so protocol code does not import it.

use std::fmt;
use std::sync::Arc;

use crate::target::Target;

/// A verdict on a request or an upgrade.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Allowed; names the request rule(s) (or the rule, when it has no request rules).
    Allow(Arc<str>),
    /// Refused; names the request rule, or says that none matched.
    Deny(Arc<str>),
    /// Audit mode: would be refused, named as for `Deny`; let it through
    /// and log `decision=would-deny`.
    WouldDeny(Arc<str>),
}

/// Judges requests inside a session: the request rules of the rule that
/// allowed it.
pub trait RequestJudge: Send + Sync + fmt::Debug {
    /// May `method` go to `path` (as the origin will read it)?
    fn request(&self, method: &str, path: &str) -> Verdict;
    /// May the connection switch to raw bytes for the `Upgrade` protocol
    /// `name` (its version stripped)?
    fn upgrade(&self, name: &str) -> Verdict;
}

/// Request headers: names and raw values.
pub type Headers = Vec<(String, Vec<u8>)>;

/// Why a request carrying a secret's placeholder may not go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretRefusal {
    /// The secret's name (never its value).
    pub secret: Arc<str>,
    /// What was wrong, and the key that would allow it.
    pub why: String,
}

/// Replaces secrets' placeholders in request headers.
pub trait HeaderSecrets: Send + Sync + fmt::Debug {
    /// `headers` with placeholders replaced (`None`: none in them) for a
    /// request with request-line `target` going to `dest` (inside TLS to it
    /// when `tls`), or why it may not go.
    fn inject(
        &self,
        target: &str,
        headers: &[(String, Vec<u8>)],
        dest: &Target,
        tls: bool,
    ) -> Result<Option<Headers>, SecretRefusal>;
}
