//! The embedding API: build a [`Proxy`] from a [`Config`], run it on this
//! thread or spawn it onto its own, and steer it through a [`ProxyHandle`].

use std::io;
use std::net::SocketAddr;
use std::ops::Deref;
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::config::{
    Config, Credentials, Limits, ListenAddr, ListenerConfig, ListenerProtocol, Timeouts,
};
use crate::policy::Policy;
use crate::reactor::listener::Listener;
use crate::reactor::{Control, Reactor, Remote};
use crate::stats::StatsSnapshot;

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
    reactor: Reactor,
    handle: ProxyHandle,
}

impl Proxy {
    /// A builder starting from the built-in default configuration.
    pub fn builder() -> ProxyBuilder {
        ProxyBuilder {
            config: Config::default(),
            listeners_set: false,
            adopted: Vec::new(),
        }
    }

    /// Binds every listener in `config`.
    pub fn new(config: Config) -> io::Result<Proxy> {
        Proxy::with_listeners(config, Vec::new())
    }

    /// Binds the listeners in `config` and adds the already-bound `adopted` ones after them.
    fn with_listeners(config: Config, adopted: Vec<Listener>) -> io::Result<Proxy> {
        let (reactor, shared) = Reactor::new(config, adopted)?;
        Ok(Proxy {
            reactor,
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
    pub fn run(self) -> io::Result<()> {
        self.reactor.run()
    }

    /// Runs the reactor on a new thread.
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
#[derive(Debug, Clone)]
pub struct ProxyBuilder {
    config: Config,
    listeners_set: bool,
    /// Listeners bound by the caller; shared so that the builder stays `Clone`.
    adopted: Vec<(Arc<StdListener>, ListenerProtocol)>,
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
    /// Requires proxy credentials.
    pub fn auth(mut self, username: &str, password: &str) -> Self {
        self.config.auth = Some(Credentials {
            username: username.into(),
            password: password.into(),
        });
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
        Proxy::with_listeners(self.config, adopted)
    }
}

/// A listening socket bound by the caller, for [`ProxyBuilder::listener`].
#[derive(Debug)]
pub enum StdListener {
    /// A TCP listener.
    Tcp(std::net::TcpListener),
    /// A Unix-domain stream listener.
    Unix(std::os::unix::net::UnixListener),
}

impl StdListener {
    /// A second handle on the same socket (`dup`).
    pub fn try_clone(&self) -> io::Result<StdListener> {
        Ok(match self {
            StdListener::Tcp(l) => StdListener::Tcp(l.try_clone()?),
            StdListener::Unix(l) => StdListener::Unix(l.try_clone()?),
        })
    }
}

impl From<std::net::TcpListener> for StdListener {
    fn from(l: std::net::TcpListener) -> Self {
        StdListener::Tcp(l)
    }
}

impl From<std::os::unix::net::UnixListener> for StdListener {
    fn from(l: std::os::unix::net::UnixListener) -> Self {
        StdListener::Unix(l)
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
    /// A copy of the counters.
    pub fn stats(&self) -> StatsSnapshot {
        self.shared.stats.snapshot()
    }
    /// Swaps in a new policy: new sessions use it at once; open tunnels it no
    /// longer allows are closed (reason `policy-reload`), the rest carry on.
    pub fn reload(&self, policy: Policy) {
        self.shared.send(Control::Reload(policy));
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
