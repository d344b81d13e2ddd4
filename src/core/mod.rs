//! The session core: what a session does with bytes, events and time,
//! without touching a socket, mio, the clock or a thread.
//!
//! The shell (`session/`, driven by the reactor) owns the sockets and
//! their readiness; it lends each side to the core as a [`port::Port`]
//! and passes the time in, and carries out the actions a core asks for
//! (such as [`opening::OpeningCore::poll_action`]'s logins, resolves and
//! connects). The simulator in
//! this module's tests lends in-memory ports and virtual time to the same
//! code.

pub(crate) mod clock;
pub(crate) mod closing;
pub(crate) mod dial;
pub(crate) mod establish;
pub(crate) mod handshake;
pub(crate) mod inspect;
pub(crate) mod link;
pub(crate) mod mem;
pub(crate) mod opening;
pub(crate) mod port;
pub(crate) mod refusal;
pub(crate) mod route;
pub(crate) mod securing;
pub(crate) mod session;
pub(crate) mod verdicts;
pub(crate) mod vetting;

#[cfg(test)]
mod tests;
