//! What other threads share with the reactor: the counters, the bound
//! addresses, and a way to send it control messages (woken through its
//! `mio::Waker`). The embedding API wraps this in `ProxyHandle`.

use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};

use crate::config::ListenAddr;
use crate::policy::Policy;
use crate::stats::Stats;

/// Messages from handles to the reactor thread.
pub(crate) enum Control {
    Reload(Policy),
    /// Stop accepting; `graceful`: let open sessions finish within the drain
    /// timeout, else close them at once.
    Shutdown {
        graceful: bool,
    },
}

/// The reactor's side shared with its handles.
pub(crate) struct Remote {
    pub(crate) stats: Stats,
    pub(crate) local_addrs: Vec<ListenAddr>,
    control: Mutex<Sender<Control>>,
    waker: Arc<mio::Waker>,
}

impl Remote {
    pub(crate) fn new(
        local_addrs: Vec<ListenAddr>,
        control: Sender<Control>,
        waker: Arc<mio::Waker>,
    ) -> Self {
        Remote {
            stats: Stats::default(),
            local_addrs,
            control: Mutex::new(control),
            waker,
        }
    }

    /// Delivers `msg` and wakes the reactor.
    pub(crate) fn send(&self, msg: Control) {
        // A send fails only once the reactor has exited; then there is nothing to steer.
        let sent = self
            .control
            .lock()
            .map(|tx| tx.send(msg).is_ok())
            .unwrap_or(false);
        if sent {
            if let Err(e) = self.waker.wake() {
                log::warn!("could not wake the reactor: {e}");
            }
        }
    }
}
