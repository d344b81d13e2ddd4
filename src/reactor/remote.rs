//! What other threads share with the reactors: the counters, the bound
//! addresses, and a way to send each worker control messages (woken
//! through its `mio::Waker`). The embedding API wraps this in `ProxyHandle`.
//!
//! With several workers, worker 0 coordinates: handles send it every
//! control message but shutdown (which goes to all), and it forwards policy
//! changes to the others and asks them for their sessions (see
//! `reactor::workers`). Only worker 0 and threads outside the proxy ever
//! wait for a worker's answer, and worker 0 waits only for the others, so
//! no two threads wait for each other.

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

/// The way to one worker: its control channel and its waker.
pub(crate) struct Door {
    control: Mutex<Sender<Control>>,
    waker: Arc<mio::Waker>,
}

impl Door {
    pub(crate) fn new(control: Sender<Control>, waker: Arc<mio::Waker>) -> Door {
        Door {
            control: Mutex::new(control),
            waker,
        }
    }

    /// Delivers `msg` and wakes the worker. False once it has exited.
    fn send(&self, msg: Control) -> bool {
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

    /// Runs `cmd` on this worker and waits for its answer (`None`: the
    /// worker has exited).
    fn ask(&self, cmd: Command) -> Option<Result<Reply, String>> {
        let (reply, answer) = mpsc::channel();
        if !self.send(Control::Command { cmd, reply }) {
            return None;
        }
        // The reactor drops the message unanswered only when it exits.
        answer.recv().ok()
    }
}

/// The reactors' side shared with their handles.
pub(crate) struct Remote {
    pub(crate) stats: Stats,
    pub(crate) local_addrs: Vec<ListenAddr>,
    /// The admin endpoint's bound address, when it has one.
    pub(crate) admin_addr: Option<ListenAddr>,
    /// The threads running the reactors, as they start.
    reactor_threads: Mutex<Vec<ThreadId>>,
    /// One per worker, worker 0 first.
    doors: Vec<Door>,
    /// The upstream-facing TLS config every worker uses (reloaded on SIGHUP).
    pub(crate) upstream: Arc<crate::session::UpstreamTrust>,
    /// Every client's terminated-handshake budget, shared by the workers
    /// (locked once per CONNECT a terminating rule allows).
    pub(crate) handshake_rates: Mutex<crate::session::handshake_rate::HandshakeRates>,
}

impl Remote {
    pub(crate) fn new(
        local_addrs: Vec<ListenAddr>,
        admin_addr: Option<ListenAddr>,
        doors: Vec<Door>,
        upstream: Arc<crate::session::UpstreamTrust>,
    ) -> Self {
        Remote {
            upstream,
            stats: Stats::for_workers(doors.len()),
            local_addrs,
            admin_addr,
            reactor_threads: Mutex::new(Vec::new()),
            doors,
            handshake_rates: Mutex::default(),
        }
    }

    /// How many workers the proxy runs.
    pub(crate) fn workers(&self) -> usize {
        self.doors.len()
    }

    /// Records a reactor's thread (called as it starts running).
    pub(crate) fn running_on(&self, thread: ThreadId) {
        if let Ok(mut t) = self.reactor_threads.lock() {
            t.push(thread);
        }
    }

    /// Delivers `msg`: a shutdown to every worker, anything else to worker
    /// 0 (which passes policy changes on). False once they have exited.
    pub(crate) fn send(&self, msg: Control) -> bool {
        match msg {
            Control::Shutdown { graceful } => self.doors.iter().fold(false, |sent, d| {
                d.send(Control::Shutdown { graceful }) | sent
            }),
            msg => self.doors[0].send(msg),
        }
    }

    /// Sends `msg` to worker `worker` only.
    pub(crate) fn send_to(&self, worker: usize, msg: Control) -> bool {
        self.doors.get(worker).is_some_and(|d| d.send(msg))
    }

    /// Runs `cmd` on worker `worker` and waits for its answer; `None` when
    /// that worker has exited. Called by worker 0 about the others only.
    pub(crate) fn ask(&self, worker: usize, cmd: Command) -> Option<Result<Reply, String>> {
        self.doors.get(worker).and_then(|d| d.ask(cmd))
    }

    /// Runs `cmd` on the reactor (worker 0, which asks the others as it
    /// needs) and waits for its answer. Blocks until the reactor runs, if
    /// it has not started yet.
    pub(crate) fn request(&self, cmd: Command) -> Result<Reply, ControlError> {
        // From a reactor thread (an event callback) the wait could never
        // end: worker 0 may be waiting for that very thread.
        let on_reactor = self
            .reactor_threads
            .lock()
            .is_ok_and(|t| t.contains(&std::thread::current().id()));
        if on_reactor {
            return Err(ControlError::OnReactorThread);
        }
        match self.doors[0].ask(cmd) {
            Some(Ok(reply)) => Ok(reply),
            Some(Err(why)) => Err(ControlError::Refused(why)),
            None => Err(ControlError::NotRunning),
        }
    }
}
