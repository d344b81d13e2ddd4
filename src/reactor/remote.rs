//! What other threads share with the reactor: the counters, the bound
//! addresses, and a way to send it control messages (woken through its
//! `mio::Waker`). The embedding API wraps this in `ProxyHandle`.

use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;

use crate::config::ListenAddr;
use crate::control::{Command, ControlError, Reply};
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
    /// A control command; the reactor answers on `reply`.
    Command {
        cmd: Command,
        reply: Sender<Result<Reply, String>>,
    },
}

/// The reactor's side shared with its handles.
pub(crate) struct Remote {
    pub(crate) stats: Stats,
    pub(crate) local_addrs: Vec<ListenAddr>,
    /// The admin endpoint's bound address, when it has one.
    pub(crate) admin_addr: Option<ListenAddr>,
    /// The thread running the reactor, once it runs.
    reactor_thread: Mutex<Option<ThreadId>>,
    control: Mutex<Sender<Control>>,
    waker: Arc<mio::Waker>,
}

impl Remote {
    pub(crate) fn new(
        local_addrs: Vec<ListenAddr>,
        admin_addr: Option<ListenAddr>,
        control: Sender<Control>,
        waker: Arc<mio::Waker>,
    ) -> Self {
        Remote {
            stats: Stats::default(),
            local_addrs,
            admin_addr,
            reactor_thread: Mutex::new(None),
            control: Mutex::new(control),
            waker,
        }
    }

    /// Records the reactor's thread (called as it starts running).
    pub(crate) fn running_on(&self, thread: ThreadId) {
        if let Ok(mut t) = self.reactor_thread.lock() {
            *t = Some(thread);
        }
    }

    /// Delivers `msg` and wakes the reactor. False once the reactor has exited.
    pub(crate) fn send(&self, msg: Control) -> bool {
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
        sent
    }

    /// Runs `cmd` on the reactor thread and waits for its answer. Blocks
    /// until the reactor runs, if it has not started yet.
    pub(crate) fn request(&self, cmd: Command) -> Result<Reply, ControlError> {
        let on_reactor = self
            .reactor_thread
            .lock()
            .is_ok_and(|t| *t == Some(std::thread::current().id()));
        if on_reactor {
            return Err(ControlError::OnReactorThread);
        }
        let (reply, answer) = mpsc::channel();
        if !self.send(Control::Command { cmd, reply }) {
            return Err(ControlError::NotRunning);
        }
        // The reactor drops the message unanswered only when it exits.
        match answer.recv() {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(why)) => Err(ControlError::Refused(why)),
            Err(_) => Err(ControlError::NotRunning),
        }
    }
}
