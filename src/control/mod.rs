//! Control: change the policy and look at (or close) open sessions while
//! the proxy runs. Three ways in, one set of commands:
//!
//! - JSON lines on a connection: the inherited `--control-fd`
//!   socket ([`crate::ProxyBuilder::control`]), and the admin socket when
//!   `[admin] control = true`. Each line
//!   is one command, `{"cmd": "..."}`, and gets one answer line,
//!   `{"ok":true,...}` or `{"ok":false,"error":"..."}`.
//! - [`crate::ProxyHandle`]'s methods (`replace_policy`, `add_rule`,
//!   `remove_rule`, `sessions`, `close_session`), which send a command
//!   to the reactor with a reply channel and wait for the answer.
//!
//! Commands run on the reactor thread, which owns the sessions and the
//! policy in force, so a command sees and changes exactly what new sessions
//! get. A command that fails changes nothing: policies are compiled in full
//! before they replace the running one. A replaced policy takes effect like
//! a SIGHUP reload: new sessions use it at once, open sessions are
//! re-checked (`Session::on_reload`).
//!
//! With several reactors (workers), the reactor that reads a command would
//! send it on to every other one through its control channel (the same
//! command with a reply channel) and join the answers: a policy change
//! reaches each, `list-sessions` concatenates, `close-session` succeeds
//! where the session lives. Nothing here assumes one reactor.

pub(crate) mod edit;
pub(crate) mod wire;

use std::fmt;

use crate::policy::{Policy, RuleConfig};
use crate::stats::{RuleCounts, StatsSnapshot};

/// A control command, parsed and (for a whole policy) compiled.
#[derive(Debug)]
pub(crate) enum Command {
    /// Replace the policy with this one.
    ReplacePolicy(Policy),
    /// Append one rule (it must be named, and the name unused).
    AddRule(Box<RuleConfig>),
    /// Remove the rule of this name.
    RemoveRule(String),
    /// Describe every open session.
    ListSessions,
    /// Close this session now (reason `closed-by-control`).
    CloseSession(u64),
    /// The counters.
    Stats,
}

impl Command {
    /// The command's name on the wire.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Command::ReplacePolicy(_) => "replace-policy",
            Command::AddRule(_) => "add-rule",
            Command::RemoveRule(_) => "remove-rule",
            Command::ListSessions => "list-sessions",
            Command::CloseSession(_) => "close-session",
            Command::Stats => "stats",
        }
    }
}

/// A command's answer.
#[derive(Debug, Clone)]
pub(crate) enum Reply {
    /// The policy now in force: its rule names, in order.
    Policy(Vec<String>),
    /// The open sessions.
    Sessions(Vec<SessionInfo>),
    /// The session was closed.
    Closed(u64),
    /// The counters, overall and by rule.
    Stats(Box<StatsSnapshot>, Vec<(String, RuleCounts)>),
}

pub use crate::lifecycle::SessionInfo;

/// Why a control operation through [`crate::ProxyHandle`] did not happen.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ControlError {
    /// The proxy is not running: it stopped, or was never started.
    NotRunning,
    /// Called on the reactor's own thread (from an event callback), where
    /// waiting for the reactor's answer would wait for ever.
    OnReactorThread,
    /// The command was refused; nothing changed. Says why.
    Refused(String),
}

impl fmt::Display for ControlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ControlError::NotRunning => f.write_str("the proxy is not running"),
            ControlError::OnReactorThread => {
                f.write_str("called on the reactor thread (from an event callback?)")
            }
            ControlError::Refused(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for ControlError {}
