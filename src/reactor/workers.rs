//! `workers = N`: N reactors, each on its own thread with its own poll,
//! slab, timer wheel, buffer pool and TLS state, sharing nothing on the
//! per-byte path.
//!
//! What they share: the admission counts (one lock, taken at accept,
//! handshake end and close), the counters (atomics; per-worker ones on
//! their own cache lines), the splice pipe budget (one atomic count), and
//! the resolver pool. Each worker has its own copy of every listener (see
//! `listener`: `SO_REUSEPORT` or a shared `dup`).
//!
//! Worker 0 coordinates, so the workers act as one proxy: handles send it
//! every control message but shutdown (sent to all); it passes reloads and
//! policy changes on to the others (in order, so every worker runs the same
//! policy), waits for them where the caller waits, and gathers their
//! sessions for `list-sessions`. The admin endpoint and the control fd live
//! on worker 0. Workers other than 0 never wait for anyone, so worker 0
//! may wait for them.
//!
//! With one worker this builds exactly the single reactor the proxy always
//! had, and runs it on the calling thread.

use std::io;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use mio::{Events, Poll, Waker};
use slab::Slab;

use super::admin::{Admin, Sandbox};
use super::admission::Admission;
use super::listener::Listener;
use super::remote::Door;
use super::resolver::ResolverPool;
use super::timer::TimerWheel;
use super::{token, Accepting, Control, Env, Hooks, Reactor, Remote, POOL_IDLE, SLOTS, TICK};
use crate::buffer::BufPool;
use crate::client::Identify;
use crate::config::{Config, ListenAddr, ListenerConfig, ListenerProtocol};
use crate::control::{Command, Reply, SessionInfo};
use crate::fd_budget::{self, FdBudget};
use crate::policy::Policy;
use crate::session::{OwnAddrs, Settings, TlsEnv};

/// The reactors of one proxy, built and ready to run.
pub(crate) struct Workers {
    reactors: Vec<Reactor>,
}

/// What one worker starts from, before its reactor is assembled.
struct Parts {
    poll: Poll,
    waker: Arc<Waker>,
    control: mpsc::Receiver<Control>,
    listeners: Vec<Listener>,
}

impl Workers {
    /// Binds `config`'s listeners (once per worker, or shared), then
    /// registers the `adopted` (already bound) ones after them, and builds
    /// `config.limits.workers` reactors.
    pub(crate) fn new(
        config: Config,
        adopted: Vec<Listener>,
        hooks: Hooks,
    ) -> io::Result<(Workers, Arc<Remote>)> {
        if config.listeners.is_empty() && adopted.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "no listeners configured",
            ));
        }
        let n = config.limits.workers.max(1);
        let mut parts = Vec::with_capacity(n);
        let mut doors = Vec::with_capacity(n);
        for _ in 0..n {
            let poll = Poll::new()?;
            let waker = Arc::new(Waker::new(poll.registry(), token::WAKER)?);
            let (tx, control) = mpsc::channel();
            doors.push(Door::new(tx, Arc::clone(&waker)));
            parts.push(Parts {
                poll,
                waker,
                control,
                listeners: Vec::new(),
            });
        }
        for lc in &config.listeners {
            let first = Listener::bind(lc, n > 1).map_err(|e| {
                let fix = bind_fix(&e, &lc.addr, "--listen ADDR:PORT (or [[listen]] address)");
                io::Error::new(e.kind(), format!("cannot listen on {}: {e}{fix}", lc.addr))
            })?;
            share(first, &mut parts, &lc.addr)?;
        }
        for l in adopted {
            let addr = l.local.clone();
            share(l, &mut parts, &addr)?;
        }
        for p in &mut parts {
            for (i, l) in p.listeners.iter_mut().enumerate() {
                // A copy bound with SO_REUSEPORT is this worker's alone; a
                // dup is watched by every worker's poll.
                let exclusive = n == 1 || l.reuses_port();
                l.register(p.poll.registry(), token::listener(i), exclusive)?;
            }
        }
        let local_addrs: Vec<ListenAddr> =
            parts[0].listeners.iter().map(|l| l.local.clone()).collect();
        let admin_listener = match &config.admin {
            Some(a) => {
                let lc = ListenerConfig::new(a.listen.clone(), ListenerProtocol::Auto);
                let mut l = Listener::bind(&lc, false).map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!(
                            "cannot listen on {} (admin): {e}{}",
                            a.listen,
                            bind_fix(&e, &a.listen, "another [admin] listen address")
                        ),
                    )
                })?;
                // Edge-triggered: the admin endpoint drains its own accepts.
                l.register(parts[0].poll.registry(), token::ADMIN_LISTENER, false)?;
                Some(l)
            }
            None => None,
        };
        // This host's addresses join the refused ranges (refreshed on reload).
        crate::policy::this_host::refresh();
        let admin_addr = admin_listener.as_ref().map(|l| l.local.clone());
        let own = OwnAddrs::new(local_addrs.iter().chain(&admin_addr));
        let upstream = Arc::new(crate::session::UpstreamTrust::new(config.tls.clone()));
        let remote = Arc::new(Remote::new(local_addrs, admin_addr, doors, upstream));
        let resolvers = ResolverPool::new(config.limits.resolver_threads, Arc::clone(&remote))?;
        let mut admin = match (admin_listener, &hooks.control) {
            (None, None) => None,
            (listener, _) => {
                let control = config.admin.as_ref().is_some_and(|a| a.control);
                let refuse = config.admin.as_ref().and_then(|a| {
                    a.refuse_netns.map(|netns| Sandbox {
                        netns,
                        root: a.refuse_descendants_of,
                    })
                });
                Some(Admin::new(listener, control, refuse, Arc::clone(&remote)))
            }
        };
        if let (Some(admin), Some(stream)) = (&mut admin, hooks.control) {
            admin.adopt_control(stream, parts[0].poll.registry())?;
        }
        let fds = FdBudget::current();
        // Counted once every worker is built (see below).
        let admission = Arc::new(Mutex::new(Admission::new(fds, 0)));
        #[cfg(target_os = "linux")]
        let pipes =
            crate::session::PipeBudget::new(fds.pipes, super::PIPE_SIZE, config.limits.splice);
        let now = Instant::now();
        let auth = crate::auth::Users::new(config.auth.as_ref(), &config.users).map(Arc::new);
        // Each worker verifies its own logins (and caches them): threads
        // only where there are hashed passwords to check.
        let verifier_threads = if config.users.is_empty() {
            0
        } else {
            super::verifier::THREADS
        };
        let udp_waiting = crate::session::WaitBudget::new(crate::session::WAITING_BYTES_TOTAL);
        let ktls = ktls_support(config.tls.ktls);
        let mut reactors = Vec::with_capacity(n);
        for (w, p) in parts.into_iter().enumerate() {
            let (answers_tx, answers) = mpsc::channel();
            let mut env = Env {
                registry: p.poll.registry().try_clone()?,
                pool: BufPool::new(config.limits.buffer_size, POOL_IDLE),
                // One budget for the proxy: its count of live pipes is shared.
                #[cfg(target_os = "linux")]
                pipes: pipes.clone(),
                settings: Settings {
                    timeouts: config.timeouts,
                    limits: config.limits,
                    auth: auth.clone(),
                    upstream_proxy: config.upstream_proxy.clone(),
                    own: own.clone(),
                    relay_bind: hooks.relay_bind.clone(),
                    udp_waiting: Arc::clone(&udp_waiting),
                    ktls,
                },
                policy: config.policy.clone(),
                remote: Arc::clone(&remote),
                tls: TlsEnv::new(config.tls.clone(), Arc::clone(&remote.upstream)),
                events: hooks.events.clone(),
                logins: super::verifier::login_cache(auth.is_some()),
                // Until the first round of resolving inspected names is in.
                pins_settled: false,
            };
            // Workers are built one after another: the first to need a CA
            // generates it, the others load it.
            env.prepare_tls()?;
            let identify = Identify::new(p.listeners.iter().any(Listener::identifies));
            let verifier = super::verifier::Verifier::new(
                verifier_threads,
                super::verifier::QUEUE,
                super::verifier::PER_CLIENT,
                Arc::clone(&p.waker),
            )?;
            reactors.push(Reactor {
                worker: w,
                poll: p.poll,
                events: Events::with_capacity(1024),
                listeners: p.listeners.into_iter().map(Some).collect(),
                admin: if w == 0 { admin.take() } else { None },
                sessions: Slab::new(),
                env,
                timers: TimerWheel::new(TICK, SLOTS, now),
                resolver: resolvers.resolver(answers_tx, p.waker),
                verifier,
                admission: Arc::clone(&admission),
                identify,
                control: p.control,
                answers,
                next_id: w as u64 + 1,
                id_step: n as u64,
                requeue: Vec::new(),
                reap: Vec::new(),
                expired: Vec::new(),
                accepting: Accepting::Open,
                exhausted: false,
                draining: false,
                now,
                pins_resolved: None,
                checked_memory: 0,
                pool_epoch: 0,
                iteration: 0,
                pins: Default::default(),
                awaiting_pins: Default::default(),
            });
        }
        // Counted last: everything the workers opened is in the base.
        super::lock(&admission).set_base_fds(fd_budget::open_fds());
        Ok((Workers { reactors }, remote))
    }

    /// Runs worker 0 on the calling thread and the others on threads of
    /// their own, until every one has exited. A worker that fails or
    /// panics stops the others (at once) and its error is returned.
    pub(crate) fn run(self) -> io::Result<()> {
        let mut reactors = self.reactors.into_iter();
        let first = reactors.next().expect("at least one worker");
        let remote = Arc::clone(&first.env.remote);
        let mut peers: Vec<JoinHandle<io::Result<()>>> = Vec::new();
        for r in reactors {
            let name = format!("portcullis-worker-{}", r.worker);
            match std::thread::Builder::new()
                .name(name)
                .spawn(move || run_fused(r))
            {
                Ok(t) => peers.push(t),
                Err(e) => {
                    // The ones started must not outlive the proxy.
                    remote.send(Control::Shutdown { graceful: false });
                    let _ = join(peers);
                    return Err(e);
                }
            }
        }
        let result = run_fused(first);
        let rest = join(peers);
        result.and(rest)
    }
}

/// Gives `first` to worker 0 and a copy to each other worker.
fn share(first: Listener, parts: &mut [Parts], addr: &crate::config::ListenAddr) -> io::Result<()> {
    for p in parts.iter_mut().skip(1) {
        let copy = first
            .replicate()
            .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {addr} again: {e}")))?;
        p.listeners.push(copy);
    }
    parts[0].listeners.push(first);
    Ok(())
}

/// Waits for the worker threads; the first failure, if any.
fn join(peers: Vec<JoinHandle<io::Result<()>>>) -> io::Result<()> {
    let mut result = Ok(());
    for t in peers {
        let r = t
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("worker thread panicked")));
        if result.is_ok() {
            result = r;
        }
    }
    result
}

/// Runs one reactor; if it fails or panics, every other worker is told to
/// stop now (one worker's end is the proxy's end, as with one reactor).
fn run_fused(reactor: Reactor) -> io::Result<()> {
    struct Fuse {
        remote: Arc<Remote>,
        armed: bool,
    }
    impl Drop for Fuse {
        fn drop(&mut self) {
            if self.armed && self.remote.workers() > 1 {
                self.remote.send(Control::Shutdown { graceful: false });
            }
        }
    }
    let mut fuse = Fuse {
        remote: Arc::clone(&reactor.env.remote),
        armed: true,
    };
    let result = reactor.run();
    fuse.armed = result.is_err();
    result
}

impl Reactor {
    /// The other workers, when this is worker 0 of several: the ones it
    /// passes policy changes to and asks for sessions.
    pub(super) fn peers(&self) -> std::ops::Range<usize> {
        match self.worker {
            0 => 1..self.env.remote.workers(),
            _ => 0..0,
        }
    }

    /// The worker that owns session `id` (see `next_id`).
    fn worker_of(&self, id: u64) -> usize {
        (id.saturating_sub(1) % self.id_step) as usize
    }

    /// A reload arrived: passes it on to the other workers (without
    /// waiting, as a reload does not wait).
    pub(super) fn forward_reload(&self, policy: &Policy) {
        for w in self.peers() {
            self.env.remote.send_to(w, Control::Reload(policy.clone()));
        }
    }

    /// Puts `policy` in force on the other workers and waits until each has
    /// (or has exited).
    pub(super) fn share_policy(&self, policy: &Policy) {
        for w in self.peers() {
            if let Some(Err(e)) = self
                .env
                .remote
                .ask(w, Command::ReplacePolicy(policy.clone()))
            {
                log::error!("worker {w} refused the new policy: {e}");
            }
        }
    }

    /// The other workers' open sessions.
    pub(super) fn peer_sessions(&self) -> Vec<SessionInfo> {
        let mut all = Vec::new();
        for w in self.peers() {
            if let Some(Ok(Reply::Sessions(list))) = self.env.remote.ask(w, Command::ListSessions) {
                all.extend(list);
            }
        }
        all
    }

    /// Closes session `id` on the worker that owns it, if that is another
    /// one: `None` when it is this worker's to close.
    pub(super) fn close_elsewhere(&self, id: u64) -> Option<Result<Reply, String>> {
        let owner = self.worker_of(id);
        if owner == self.worker || !self.peers().contains(&owner) {
            return None;
        }
        Some(
            self.env
                .remote
                .ask(owner, Command::CloseSession(id))
                .unwrap_or_else(|| Err(format!("no open session {id}"))),
        )
    }
}

/// What to do about a TCP address that cannot be bound, as a clause to
/// append to the error (empty when there is nothing better to say; a Unix
/// socket's bind error already says it).
fn bind_fix(e: &io::Error, addr: &ListenAddr, elsewhere: &str) -> String {
    let ListenAddr::Tcp(a) = addr else {
        return String::new();
    };
    match e.kind() {
        io::ErrorKind::AddrInUse => format!(
            ": another process is listening there (another portcullis?); stop it, or listen elsewhere with {elsewhere}"
        ),
        io::ErrorKind::AddrNotAvailable => format!(
            ": {} is not an address of this host; use one it has (127.0.0.1, or 0.0.0.0 for every interface) with {elsewhere}",
            a.ip()
        ),
        io::ErrorKind::PermissionDenied if a.port() < 1024 => format!(
            ": port {} is privileged (below 1024); use a higher port with {elsewhere}",
            a.port()
        ),
        _ => String::new(),
    }
}

/// What terminated TLS may hand to the kernel: the probe's answer when the
/// setting is on. A kernel without it is told once, with its fix.
fn ktls_support(on: bool) -> crate::tls::ktls::Support {
    if !on {
        return crate::tls::ktls::Support::NONE;
    }
    match crate::io::ktls::probe() {
        Ok(s) => {
            log::info!(
                "ktls: terminated TLS goes to the kernel after its handshakes ({})",
                s.names().join(", ")
            );
            s
        }
        Err(e) => {
            log::warn!(
                "ktls: this kernel cannot take TLS ({e}); terminated TLS stays in user space. \
                 Fix: load the tls module (modprobe tls), or drop --ktls / [tls] ktls"
            );
            crate::tls::ktls::Support::NONE
        }
    }
}

#[cfg(test)]
mod tests {
    /// Session ids of worker `w` of `n`, as `Reactor::admit` hands them out.
    fn ids(w: u64, n: u64) -> impl Iterator<Item = u64> {
        (0..).map(move |k| w + 1 + k * n)
    }

    #[test]
    fn session_ids_name_their_worker() {
        for n in 1..=4u64 {
            for w in 0..n {
                for id in ids(w, n).take(50) {
                    assert_eq!((id - 1) % n, w, "id {id} of worker {w}/{n}");
                }
            }
        }
        // One worker numbers sessions 1, 2, 3, ... as it always did.
        assert_eq!(ids(0, 1).take(3).collect::<Vec<_>>(), vec![1, 2, 3]);
    }
}
