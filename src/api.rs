//! The embedding API: build a [`Proxy`] from a [`Config`], run it on this
//! thread or spawn it onto its own, and steer it through a [`ProxyHandle`].

use std::io;
use std::net::SocketAddr;
use std::ops::Deref;
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::config::{
    AdminConfig, Config, Credentials, Limits, ListenAddr, ListenerConfig, ListenerProtocol,
    Timeouts,
};
use crate::control::{Command, ControlError, Reply, SessionInfo};
use crate::events::{Callback, Event, EventSink};
pub use crate::io::StdListener;
use crate::io::Stream;
use crate::policy::{Policy, RuleConfig};
use crate::reactor::listener::Listener;
use crate::reactor::{Control, Hooks, Remote, Workers};
use crate::stats::{RuleCounts, StatsSnapshot, WorkerStats};

/// A proxy with its listeners bound, ready to [`run`](Proxy::run) or [`spawn`](Proxy::spawn).
///
/// ```
/// use portcullis::{Proxy, ListenAddr, ListenerProtocol, Policy};
///
/// let proxy = Proxy::builder()
///     .listen(ListenAddr::Tcp("127.0.0.1:0".parse().unwrap()), ListenerProtocol::Auto)
///     .policy(Policy::builtin_default())
///     .build()
///     .expect("bind");
/// let running = proxy.spawn().expect("spawn");
/// let addr = running.local_addrs()[0].clone();
/// println!("proxy on {addr}; open sessions: {}", running.stats().open.total());
/// running.shutdown();
/// running.join().expect("clean exit");
/// ```
pub struct Proxy {
    workers: Workers,
    handle: ProxyHandle,
}

impl Proxy {
    /// A builder starting from the built-in default configuration.
    pub fn builder() -> ProxyBuilder {
        ProxyBuilder {
            config: Config::default(),
            listeners_set: false,
            adopted: Vec::new(),
            on_event: None,
            control: None,
            relay_bind: None,
        }
    }

    /// Binds every listener in `config`.
    pub fn new(config: Config) -> io::Result<Proxy> {
        Proxy::with_listeners(config, Vec::new(), Hooks::default())
    }

    /// Binds the listeners in `config` and adds the already-bound `adopted` ones after them.
    fn with_listeners(config: Config, adopted: Vec<Listener>, hooks: Hooks) -> io::Result<Proxy> {
        if config.policy.secrets().is_some() {
            // It holds secret values from here on: no core dumps, no ptrace,
            // no /proc/PID/mem or environ for processes of the same uid.
            crate::policy::secret::protect_process();
        }
        let (workers, shared) = Workers::new(config, adopted, hooks)?;
        Ok(Proxy {
            workers,
            handle: ProxyHandle { shared },
        })
    }

    /// A handle to steer the proxy from other threads, before or after it runs.
    pub fn handle(&self) -> ProxyHandle {
        self.handle.clone()
    }

    /// The bound listener addresses (ephemeral ports resolved), in config order.
    pub fn local_addrs(&self) -> &[ListenAddr] {
        &self.handle.shared.local_addrs
    }

    /// Runs the reactor on the calling thread until [`ProxyHandle::shutdown`].
    /// With [`Limits::workers`] above 1, worker 0 runs on the calling thread
    /// and the others on threads of their own; this returns once all have
    /// exited.
    pub fn run(self) -> io::Result<()> {
        self.workers.run()
    }

    /// Runs the reactor (every worker) on new threads.
    pub fn spawn(self) -> io::Result<SpawnedProxy> {
        let handle = self.handle.clone();
        let thread = std::thread::Builder::new()
            .name("portcullis-reactor".into())
            .spawn(move || self.run())?;
        Ok(SpawnedProxy {
            handle,
            thread: Some(thread),
        })
    }
}

/// Builds a [`Proxy`]: every setter overrides one part of the default [`Config`].
#[derive(Clone)]
pub struct ProxyBuilder {
    config: Config,
    listeners_set: bool,
    /// Listeners bound by the caller; shared so that the builder stays `Clone`.
    adopted: Vec<(Arc<StdListener>, ListenerProtocol)>,
    on_event: Option<Callback>,
    /// The control stream; shared so that the builder stays `Clone`.
    control: Option<Arc<std::os::unix::net::UnixStream>>,
    relay_bind: Option<crate::session::RelayBind>,
}

impl std::fmt::Debug for ProxyBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyBuilder")
            .field("config", &self.config)
            .field("adopted", &self.adopted)
            .field("on_event", &self.on_event.is_some())
            .field("control", &self.control)
            .field("udp_relay_bind", &self.relay_bind.is_some())
            .finish()
    }
}

impl ProxyBuilder {
    /// Starts from `config` instead of the default.
    pub fn config(mut self, config: Config) -> Self {
        self.config = config;
        self.listeners_set = true;
        self
    }
    /// Adds a listener. The first call replaces the default listener.
    pub fn listen(mut self, addr: ListenAddr, protocol: ListenerProtocol) -> Self {
        if !self.listeners_set {
            self.config.listeners.clear();
            self.listeners_set = true;
        }
        self.config
            .listeners
            .push(ListenerConfig::new(addr, protocol));
        self
    }
    /// Adds a listener the caller has already bound (and put in the listening
    /// state): a `std::net::TcpListener` or a `std::os::unix::net::UnixListener`,
    /// for example one created in another network namespace or inherited from a
    /// service manager. Like [`listen`](Self::listen), the first listener added
    /// replaces the default one; these come after any [`listen`](Self::listen)
    /// addresses in [`Proxy::local_addrs`]. [`build`](Self::build) makes the
    /// socket non-blocking and close-on-exec and registers it with the reactor;
    /// it fails with `InvalidInput` if the socket is not listening. A Unix
    /// socket's file is left in place when the proxy stops (it is the caller's).
    /// If a clone of this builder is built too, the proxies share the socket.
    ///
    /// ```
    /// use portcullis::{ListenAddr, ListenerProtocol, Policy, Proxy};
    ///
    /// let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    /// let addr = std_listener.local_addr().unwrap();
    /// let proxy = Proxy::builder()
    ///     .listener(std_listener, ListenerProtocol::Auto)
    ///     .policy(Policy::builtin_default())
    ///     .build()
    ///     .expect("adopt the listener");
    /// assert_eq!(proxy.local_addrs(), &[ListenAddr::Tcp(addr)]);
    /// let running = proxy.spawn().unwrap();
    /// running.shutdown_now();
    /// running.join().unwrap();
    /// ```
    pub fn listener(
        mut self,
        listener: impl Into<StdListener>,
        protocol: ListenerProtocol,
    ) -> Self {
        if !self.listeners_set {
            self.config.listeners.clear();
            self.listeners_set = true;
        }
        self.adopted.push((Arc::new(listener.into()), protocol));
        self
    }
    /// Sets the policy.
    pub fn policy(mut self, policy: Policy) -> Self {
        self.config.policy = policy;
        self
    }
    /// Sets the timeouts.
    pub fn timeouts(mut self, timeouts: Timeouts) -> Self {
        self.config.timeouts = timeouts;
        self
    }
    /// Sets the limits.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.config.limits = limits;
        self
    }
    /// Runs `n` reactors (at least 1), as [`Limits::workers`]: each on its
    /// own thread, with its own event loop and its own copy of every
    /// listener; the limits, the counters and the policy are the whole
    /// proxy's. Set it after [`limits`](Self::limits), which replaces it.
    pub fn workers(mut self, n: usize) -> Self {
        self.config.limits.workers = n.max(1);
        self
    }
    /// Requires proxy credentials.
    pub fn auth(mut self, username: &str, password: &str) -> Self {
        self.config.auth = Some(Credentials::new(username, password));
        self
    }
    /// Serves the admin endpoint (`GET /metrics`, `GET /stats`, and control
    /// lines when [`AdminConfig::control`] is set) on its own socket.
    pub fn admin(mut self, admin: AdminConfig) -> Self {
        self.config.admin = Some(admin);
        self
    }
    /// Calls `callback` with every session event (at each session's close)
    /// and request event (each inspected request: allowed, denied or
    /// refused): the same events, with the same fields, as the log.
    ///
    /// It runs on the reactor thread, so it must be quick and must not
    /// block (hand the event to a channel for anything slow); a panic in it
    /// stops the proxy. [`ProxyHandle`] control methods called from it fail
    /// with [`ControlError::OnReactorThread`].
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use portcullis::events::{Decision, EventKind};
    /// use portcullis::{Policy, Proxy};
    ///
    /// let denials = Arc::new(Mutex::new(Vec::new()));
    /// let seen = Arc::clone(&denials);
    /// let builder = Proxy::builder()
    ///     .policy(Policy::builtin_default())
    ///     .on_event(move |e| {
    ///         if e.kind == EventKind::Session && e.decision == Some(Decision::Deny) {
    ///             seen.lock().unwrap().push(e.target.clone());
    ///         }
    ///     });
    /// # drop(builder);
    /// ```
    pub fn on_event(mut self, callback: impl Fn(&Event) + Send + Sync + 'static) -> Self {
        self.on_event = Some(Arc::new(callback));
        self
    }
    /// Takes control commands (JSON lines, one answer line each) on a
    /// connected Unix stream, e.g. one end of a `socketpair` whose other
    /// end the embedding host keeps (the binary's `--control-fd`). When the
    /// host closes its end, control over it ends; the proxy carries on.
    pub fn control(mut self, stream: std::os::unix::net::UnixStream) -> Self {
        self.control = Some(Arc::new(stream));
        self
    }
    /// Binds the relay socket of each SOCKS5 UDP association with `bind`
    /// instead of in this process's network namespace: for listeners bound
    /// in another one (given to [`listener`](Self::listener)), whose
    /// clients cannot reach a socket bound here. `bind(ip)` returns a UDP
    /// socket bound at `(ip, port 0)` there, `ip` being the address the
    /// client reached the listener on; the proxy checks the socket's
    /// address and type and makes it non-blocking. It is called on a
    /// reactor thread, once per association, so it should take
    /// microseconds (`portcullis run` asks a helper process inside the
    /// namespace over a socket pair). An error refuses the association
    /// with a general failure naming it.
    ///
    /// ```
    /// use portcullis::Proxy;
    /// // Here: bind in this namespace, as the proxy would by itself.
    /// let builder = Proxy::builder()
    ///     .udp_relay_bind(|ip| std::net::UdpSocket::bind((ip, 0)));
    /// # drop(builder);
    /// ```
    pub fn udp_relay_bind(
        mut self,
        bind: impl Fn(std::net::IpAddr) -> io::Result<std::net::UdpSocket> + Send + Sync + 'static,
    ) -> Self {
        self.relay_bind = Some(crate::session::RelayBind(Arc::new(bind)));
        self
    }
    /// Binds the listeners (and takes in the ones given to [`listener`](Self::listener)).
    pub fn build(self) -> io::Result<Proxy> {
        let mut adopted = Vec::with_capacity(self.adopted.len());
        for (l, protocol) in self.adopted {
            // The builder's own socket, or a dup of it when a clone still holds it.
            let l = Arc::try_unwrap(l).or_else(|shared| shared.try_clone())?;
            adopted.push(Listener::from_std(l, protocol)?);
        }
        let control = match self.control {
            Some(s) => {
                let s = Arc::try_unwrap(s).or_else(|shared| shared.try_clone())?;
                s.set_nonblocking(true)?;
                socket2::SockRef::from(&s).set_cloexec(true)?;
                Some(Stream::Unix(mio::net::UnixStream::from_std(s)))
            }
            None => None,
        };
        let hooks = Hooks {
            events: EventSink::new(self.on_event),
            control,
            relay_bind: self.relay_bind,
        };
        Proxy::with_listeners(self.config, adopted, hooks)
    }
}

/// Steers a proxy from any thread. Cheap to clone.
#[derive(Clone)]
pub struct ProxyHandle {
    shared: Arc<Remote>,
}

impl ProxyHandle {
    /// The bound listener addresses, in config order.
    pub fn local_addrs(&self) -> Vec<ListenAddr> {
        self.shared.local_addrs.clone()
    }
    /// The first TCP listener's address, if any (convenient in tests).
    pub fn tcp_addr(&self) -> Option<SocketAddr> {
        self.shared.local_addrs.iter().find_map(|a| match a {
            ListenAddr::Tcp(a) => Some(*a),
            ListenAddr::Unix(_) => None,
        })
    }
    /// The admin endpoint's bound address (its port resolved), if it has one.
    pub fn admin_addr(&self) -> Option<ListenAddr> {
        self.shared.admin_addr.clone()
    }
    /// A copy of the counters.
    pub fn stats(&self) -> StatsSnapshot {
        self.shared.stats.snapshot()
    }
    /// Each worker's own counters (connections accepted, wakeups), worker
    /// 0 first; [`stats`](Self::stats) has their sums.
    pub fn worker_stats(&self) -> Vec<WorkerStats> {
        self.shared.stats.workers()
    }
    /// Decisions counted by rule name (sessions, and inspected requests by
    /// request rule); `-` for those no rule made.
    pub fn rule_stats(&self) -> Vec<(String, RuleCounts)> {
        self.shared.stats.rules()
    }
    /// Swaps in a new policy: new sessions use it at once; open tunnels it no
    /// longer allows are closed (reason `policy-reload`), the rest carry on.
    /// Returns at once; [`replace_policy`](Self::replace_policy) waits.
    pub fn reload(&self, policy: Policy) {
        if policy.secrets().is_some() {
            crate::policy::secret::protect_process();
        }
        self.shared.send(Control::Reload(policy));
    }
    /// Reads the upstream trust roots again (the platform's store, which
    /// `SSL_CERT_FILE`/`SSL_CERT_DIR` may name, and the `upstream_ca`
    /// files), in the calling thread, if they were loaded: new upstream
    /// handshakes use them. On an error the roots in use stay.
    pub fn reload_upstream_trust(&self) -> Result<(), String> {
        self.shared.upstream.reload()
    }

    // Control: each call runs on the reactor thread and waits for its
    // answer; it blocks until the proxy runs if it has not started yet.

    /// Replaces the policy, as [`reload`](Self::reload) does, and returns
    /// once it is in force: a connection made after this returns gets it.
    pub fn replace_policy(&self, policy: Policy) -> Result<(), ControlError> {
        self.shared
            .request(Command::ReplacePolicy(policy))
            .map(drop)
    }
    /// Appends `rule` to the policy in force (then as
    /// [`replace_policy`](Self::replace_policy)). The rule must have a
    /// name no rule has yet, and compile; otherwise nothing changes.
    pub fn add_rule(&self, rule: impl Into<RuleConfig>) -> Result<(), ControlError> {
        self.shared
            .request(Command::AddRule(Box::new(rule.into())))
            .map(drop)
    }
    /// Removes the rule named `name` from the policy in force (then as
    /// [`replace_policy`](Self::replace_policy)); an error if there is none.
    pub fn remove_rule(&self, name: &str) -> Result<(), ControlError> {
        self.shared
            .request(Command::RemoveRule(name.to_owned()))
            .map(drop)
    }
    /// The open sessions, oldest first.
    pub fn sessions(&self) -> Result<Vec<SessionInfo>, ControlError> {
        match self.shared.request(Command::ListSessions)? {
            Reply::Sessions(mut list) => {
                list.sort_by_key(|s| s.id);
                Ok(list)
            }
            _ => Err(ControlError::Refused("unexpected answer".into())),
        }
    }
    /// Closes the open session `id` now (reason `closed-by-control`); an
    /// error if there is no such session.
    pub fn close_session(&self, id: u64) -> Result<(), ControlError> {
        self.shared.request(Command::CloseSession(id)).map(drop)
    }
    /// Graceful shutdown: listeners close at once (new connects are
    /// refused), open sessions may finish within the drain timeout
    /// ([`Timeouts::drain`]), then the rest are closed and the reactor exits.
    pub fn shutdown(&self) {
        self.shared.send(Control::Shutdown { graceful: true });
    }
    /// Immediate shutdown: every session is closed now and the reactor exits.
    pub fn shutdown_now(&self) {
        self.shared.send(Control::Shutdown { graceful: false });
    }
}

/// A proxy running on its own thread. Dereferences to its [`ProxyHandle`];
/// dropping it shuts the proxy down and waits for the thread.
pub struct SpawnedProxy {
    handle: ProxyHandle,
    thread: Option<JoinHandle<io::Result<()>>>,
}

impl SpawnedProxy {
    /// A clone of the handle.
    pub fn handle(&self) -> ProxyHandle {
        self.handle.clone()
    }
    /// Waits for the reactor thread to exit (after [`ProxyHandle::shutdown`]).
    pub fn join(mut self) -> io::Result<()> {
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(io::Error::other("reactor thread panicked")),
            None => Ok(()),
        }
    }
}

impl Deref for SpawnedProxy {
    type Target = ProxyHandle;
    fn deref(&self) -> &ProxyHandle {
        &self.handle
    }
}

impl Drop for SpawnedProxy {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            self.handle.shutdown_now();
            let _ = t.join();
        }
    }
}
