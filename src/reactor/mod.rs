//! The event loop: one thread, one `mio::Poll`, sessions in a slab.

pub mod timer;

use std::io;
use std::sync::Arc;

use crate::api::Shared;
use crate::config::Config;
use crate::policy::Policy;

/// Messages from handles to the reactor thread (delivered through the Waker).
pub(crate) enum Control {
    Reload(Policy),
    Shutdown,
}

/// The reactor. STUB until the core lands.
pub(crate) struct Reactor {}

impl Reactor {
    pub(crate) fn new(config: Config) -> io::Result<(Reactor, Arc<Shared>)> {
        let _ = config;
        todo!()
    }
    pub(crate) fn run(self) -> io::Result<()> {
        todo!()
    }
}
