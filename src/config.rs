//! Configuration: listeners, policy, timeouts, limits, credentials, TLS.
//! The file as written is in `config/file.rs`, its errors (with line and
//! column) in `config/error.rs`, the `[tls]` table in `config/tls.rs`.
//!
//! `Config::default()` is the built-in default the binary runs with when given
//! no arguments. The TOML file format is documented in docs/configuration.md.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::policy::Policy;

pub use crate::auth::Credentials;
pub use crate::logging::LogFormat;

mod error;
mod file;
pub mod srt;
mod tls;

pub use error::ConfigError;
pub use file::{rule_names, ConfigFile};
pub use tls::{default_state_dir, TlsConfig};

/// Where a listener listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenAddr {
    /// A TCP address; port 0 picks an ephemeral port.
    Tcp(SocketAddr),
    /// A Unix-domain stream socket path (an existing socket file is replaced).
    Unix(PathBuf),
}

impl fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListenAddr::Tcp(a) => write!(f, "{a}"),
            ListenAddr::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// What a listener speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ListenerProtocol {
    /// HTTP or SOCKS5, told apart by the first byte (0x05 is SOCKS5).
    #[default]
    Auto,
    /// HTTP only.
    Http,
    /// SOCKS5 only.
    Socks5,
}

/// One listener.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListenerConfig {
    /// Where.
    pub addr: ListenAddr,
    /// What it speaks.
    pub protocol: ListenerProtocol,
    /// Who may connect to a Unix-socket listener (ignored for TCP).
    pub unix: UnixAccess,
}

impl ListenerConfig {
    /// A listener at `addr` speaking `protocol`; a Unix socket gets [`UnixAccess::default`].
    pub fn new(addr: ListenAddr, protocol: ListenerProtocol) -> ListenerConfig {
        ListenerConfig {
            addr,
            protocol,
            unix: UnixAccess::default(),
        }
    }
}

/// Who may connect to a Unix-socket listener. Connecting to a Unix socket
/// needs write permission on its file (and search permission on the
/// directories above it), so the file's mode and group are the access
/// control.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct UnixAccess {
    /// Permission bits of the socket file; default `0o600` (the proxy's uid
    /// only). `0o660` with a [`group`](Self::group) lets that group in.
    pub mode: u32,
    /// The socket file's group; `None`: the process's group.
    pub group: Option<UnixGroup>,
}

/// A group, as configured: resolved when the socket is made, so that a
/// file names groups of the machine it runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum UnixGroup {
    /// A numeric gid.
    Gid(u32),
    /// A group name.
    Name(String),
}

impl UnixGroup {
    /// The gid, looking a name up in the group database.
    pub fn gid(&self) -> Result<u32, String> {
        match self {
            UnixGroup::Gid(gid) => Ok(*gid),
            UnixGroup::Name(name) => match nix::unistd::Group::from_name(name) {
                Ok(Some(g)) => Ok(g.gid.as_raw()),
                Ok(None) => Err(format!("no group named {name:?}")),
                Err(e) => Err(format!("cannot look up group {name:?}: {e}")),
            },
        }
    }
}

impl fmt::Display for UnixGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UnixGroup::Gid(gid) => write!(f, "{gid}"),
            UnixGroup::Name(name) => f.write_str(name),
        }
    }
}

impl Default for UnixAccess {
    fn default() -> Self {
        UnixAccess {
            mode: 0o600,
            group: None,
        }
    }
}

/// Parses a socket file mode: octal, `"0660"`, `"660"` or `"0o660"`, at most `0777`.
pub fn parse_unix_mode(s: &str) -> Result<u32, String> {
    let t = s.trim();
    let digits = t.strip_prefix("0o").unwrap_or(t);
    match u32::from_str_radix(digits, 8) {
        Ok(m) if m <= 0o777 && !digits.is_empty() && digits.len() <= 4 => Ok(m),
        _ => Err(format!(
            "invalid mode {s:?}: expected octal permission bits such as \"0600\" or \"0660\""
        )),
    }
}

/// The admin endpoint (`[admin]`): `GET /metrics` and `GET /stats` on its
/// own socket, served by the reactor; with `control`, JSON control lines
/// on it too.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AdminConfig {
    /// Where it listens: `IP:PORT` or a Unix socket path.
    pub listen: ListenAddr,
    /// Accept control commands on this socket too (anyone who can connect
    /// to it can then change the policy: prefer a Unix socket).
    pub control: bool,
    /// Refuse every admin connection from a process in this network
    /// namespace (the device and inode of its `/proc/PID/ns/net`), checked
    /// with `SO_PEERCRED` on Unix-socket connections (Linux): `portcullis
    /// run` sets it to CMD's, so CMD cannot use the endpoint.
    pub refuse_netns: Option<(u64, u64)>,
    /// Refuse every admin connection from this process or any descendant
    /// of it (Linux, `SO_PEERCRED` and `/proc/PID/stat`): `portcullis run`
    /// sets it to CMD's namespace child, so CMD cannot use the endpoint
    /// from a network namespace of its own (`unshare -Urn`) either.
    pub refuse_descendants_of: Option<i32>,
}

impl AdminConfig {
    /// The admin endpoint at `listen`, control off.
    pub fn new(listen: ListenAddr) -> AdminConfig {
        AdminConfig {
            listen,
            control: false,
            refuse_netns: None,
            refuse_descendants_of: None,
        }
    }
}

/// Timeouts. Every session has a deadline in every phase, except an
/// established tunnel when `idle` is `None` and its rule sets none.
/// Start from `Timeouts::default()` and set the fields to change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Timeouts {
    /// From accept until the request is read and answered by policy.
    pub handshake: Duration,
    /// Resolve plus connect, over all addresses.
    pub connect: Duration,
    /// Established tunnels with no traffic either way; `None` means never.
    pub idle: Option<Duration>,
    /// A half-closed tunnel (one side sent EOF) with no traffic either way:
    /// a peer that never finishes must not hold two fds for ever. Always on.
    pub half_close: Duration,
    /// Flushing what is owed before closing.
    pub close: Duration,
    /// On graceful shutdown, how long open sessions may finish before they
    /// are closed.
    pub drain: Duration,
    /// Inspected HTTP: how long an upstream may take to send the whole
    /// head of its response to a request (504 after that).
    pub response: Duration,
    /// TCP keepalive on both sockets of every TCP session: probes start
    /// after this long without traffic (then every 10 s, 6 unanswered
    /// probes close the socket), so a peer that vanished without a FIN is
    /// found; `None` turns it off.
    pub keepalive: Option<Duration>,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            handshake: Duration::from_secs(10),
            connect: Duration::from_secs(10),
            idle: None,
            half_close: Duration::from_secs(30),
            close: Duration::from_secs(5),
            drain: Duration::from_secs(30),
            response: Duration::from_secs(60),
            keepalive: Some(Duration::from_secs(60)),
        }
    }
}

/// Sizes and limits. Start from `Limits::default()` and set the fields to change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Largest request head (HTTP) accepted; larger gets 431.
    pub max_head_bytes: usize,
    /// Relay buffer per direction, in bytes.
    pub buffer_size: usize,
    /// Resolver threads (one pool shared by every worker).
    pub resolver_threads: usize,
    /// Reactor threads (`workers`): each runs its own event loop and
    /// accepts on its own listening sockets; 1 is the single-threaded proxy.
    /// See [`parse_workers`] for `"auto"`.
    pub workers: usize,
    /// Open sessions overall; past it new clients are refused (503 / SOCKS 0x01).
    pub max_sessions: usize,
    /// Open sessions per client address (or per Unix-socket peer uid).
    pub max_sessions_per_client: usize,
    /// Sessions still in their handshake, overall.
    pub max_pending_handshakes: usize,
    /// Sessions still in their handshake, per client address (or uid).
    pub max_pending_handshakes_per_client: usize,
    /// TLS handshakes a client may start per second, on rules that
    /// terminate TLS (a token bucket per client, charged at CONNECT); 0
    /// switches the budget off. Past it, the CONNECT gets `429`.
    pub handshakes_per_client_per_sec: u32,
    /// How many terminated handshakes a client may start at once before the
    /// per-second rate applies (the bucket's size).
    pub handshake_burst_per_client: u32,
    /// Move bulk tunnels through kernel pipes with `splice(2)` (Linux; the
    /// default there when built with the `splice` feature). Off: the
    /// portable read/write path, the one other platforms run.
    pub splice: bool,
}

impl Default for Limits {
    /// The defaults for this process's open-file limit, read now: see
    /// [`Limits::for_open_files`]. `PORTCULLIS_SPLICE=off` (or `0`, `false`)
    /// in the environment makes the read/write path the default, so a whole
    /// test suite or benchmark runs the portable path without a rebuild; an
    /// explicit `splice` setting still wins.
    fn default() -> Self {
        let mut limits = Limits::for_open_files(crate::fd_budget::nofile_limit());
        if let Ok(v) = std::env::var("PORTCULLIS_SPLICE") {
            if matches!(v.trim(), "off" | "0" | "false" | "no") {
                limits.splice = false;
            }
        }
        limits
    }
}

impl Limits {
    /// The defaults for a process allowed `nofile` open files (`None`:
    /// unlimited). `max_sessions` is what the limit holds at two fds per
    /// tunnel, after fds set aside for the process, a reserve (1/64) and
    /// splice pipes (at most 1/8); `max_pending_handshakes` is that or 1024,
    /// whichever is less; each per-client limit is a quarter of its overall
    /// limit, so no one client can take the proxy. 20,000 open files give
    /// 9,316 sessions, 2,329 per client, 1,024 handshakes, 256 per client.
    pub fn for_open_files(nofile: Option<u64>) -> Limits {
        let sessions = crate::fd_budget::FdBudget::for_limit(nofile).sessions();
        let handshakes = sessions.min(1_024);
        Limits {
            max_head_bytes: 32 * 1024,
            buffer_size: 64 * 1024,
            resolver_threads: 2,
            workers: 1,
            max_sessions: sessions,
            max_sessions_per_client: (sessions / 4).max(1),
            splice: cfg!(all(target_os = "linux", feature = "splice")),
            max_pending_handshakes: handshakes,
            max_pending_handshakes_per_client: (handshakes / 4).max(1),
            handshakes_per_client_per_sec: 50,
            handshake_burst_per_client: 100,
        }
    }
}

/// Everything a proxy needs to run. Start from `Config::default()` (or
/// [`Config::load`]) and set the fields to change.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Config {
    /// Listeners; at least one.
    pub listeners: Vec<ListenerConfig>,
    /// Who may connect where.
    pub policy: Policy,
    /// Timeouts.
    pub timeouts: Timeouts,
    /// Limits.
    pub limits: Limits,
    /// The plaintext user (`[auth] username/password`, `--auth`,
    /// `--auth-env`), if any: compared inline.
    pub auth: Option<Credentials>,
    /// Users with argon2-hashed passwords (`[[auth.users]]`, `--auth-file`),
    /// verified off the reactor thread. Credentials are required when this
    /// or [`auth`](Config::auth) is set.
    pub users: Vec<crate::auth::HashedUser>,
    /// TLS termination: the CA and upstream trust anchors.
    pub tls: TlsConfig,
    /// A parent proxy every allowed connection goes through (a rule's own
    /// `upstream_proxy`, or `"direct"`, overrides it).
    pub upstream_proxy: Option<std::sync::Arc<crate::protocol::parent::ParentProxy>>,
    /// The admin endpoint, if any (off by default).
    pub admin: Option<AdminConfig>,
    /// How the binary's log lines are written (`log_format`); the library
    /// itself logs through the `log` crate and leaves formatting to the
    /// logger installed ([`crate::logging::init`] writes this format).
    pub log_format: LogFormat,
}

/// A duration as `--check` and logs show it: `250ms`, `10s`, `5m`, `2h`, `1d`.
pub fn format_duration(d: Duration) -> String {
    crate::policy::describe_duration(d)
}

/// The built-in default listener address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:3128";

impl Default for Config {
    fn default() -> Self {
        Config {
            listeners: vec![default_listener()],
            policy: Policy::builtin_default(),
            timeouts: Timeouts::default(),
            limits: Limits::default(),
            auth: None,
            users: Vec::new(),
            tls: TlsConfig::default(),
            upstream_proxy: None,
            admin: None,
            log_format: LogFormat::default(),
        }
    }
}

/// The built-in default listener address, parsed.
fn default_listener() -> ListenerConfig {
    ListenerConfig::new(
        ListenAddr::Tcp(DEFAULT_LISTEN.parse().expect("valid default")),
        ListenerProtocol::Auto,
    )
}

/// Smallest accepted `limits.buffer_size`.
pub const MIN_BUFFER_SIZE: usize = 4096;
/// Largest accepted `limits.buffer_size` (16 MiB).
pub const MAX_BUFFER_SIZE: usize = 16 * 1024 * 1024;
/// Smallest accepted `limits.max_head_bytes`.
pub const MIN_HEAD_BYTES: usize = 1024;
/// Largest accepted `limits.resolver_threads`.
pub const MAX_RESOLVER_THREADS: usize = 64;
/// Largest accepted `limits.workers`.
pub const MAX_WORKERS: usize = 256;

/// Parses a worker count: a number (1 ..= [`MAX_WORKERS`]) or `auto`, the
/// number of cores this process may run on
/// ([`std::thread::available_parallelism`], 1 if unknown).
pub fn parse_workers(s: &str) -> Result<usize, String> {
    let t = s.trim();
    if t.eq_ignore_ascii_case("auto") {
        return Ok(available_workers());
    }
    match t.parse::<usize>() {
        Ok(n) if (1..=MAX_WORKERS).contains(&n) => Ok(n),
        Ok(n) => Err(format!(
            "{n} workers is out of range: must be between 1 and {MAX_WORKERS}, or auto"
        )),
        Err(_) => Err(format!(
            "invalid worker count {s:?}: expected a number or auto"
        )),
    }
}

/// `workers = "auto"`: the cores available to this process, at most [`MAX_WORKERS`].
pub fn available_workers() -> usize {
    std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(MAX_WORKERS)
}

/// Parses a listener address: `unix:/path/to.sock`, or a socket address such
/// as `127.0.0.1:3128` or `[::1]:3128` (port 0 picks an ephemeral port).
pub fn parse_listen_addr(s: &str) -> Result<ListenAddr, String> {
    let t = s.trim();
    if let Some(path) = t.strip_prefix("unix:") {
        if path.is_empty() {
            return Err(format!(
                "invalid listen address {s:?}: empty Unix socket path"
            ));
        }
        return Ok(ListenAddr::Unix(PathBuf::from(path)));
    }
    t.parse::<SocketAddr>().map(ListenAddr::Tcp).map_err(|_| {
        format!(
            "invalid listen address {s:?}: expected IP:PORT (e.g. 127.0.0.1:3128, [::1]:3128) or unix:/path"
        )
    })
}

impl std::str::FromStr for ListenerProtocol {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(ListenerProtocol::Auto),
            "http" => Ok(ListenerProtocol::Http),
            "socks5" => Ok(ListenerProtocol::Socks5),
            _ => Err(format!(
                "invalid protocol {s:?}: expected auto, http or socks5"
            )),
        }
    }
}

impl Config {
    /// Parses a TOML configuration (format in docs/configuration.md) and validates it.
    /// A file with no `[[rules]]` denies everything; it does not fall back to
    /// the built-in default policy.
    pub fn from_toml_str(text: &str) -> Result<Config, ConfigError> {
        ConfigFile::parse(text)?.compile()
    }

    /// Reads, parses and validates a TOML configuration file.
    pub fn load(path: impl AsRef<Path>) -> Result<Config, ConfigError> {
        ConfigFile::load(path)?.compile()
    }

    /// Checks limits, listeners, timeouts and credentials; errors name the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let l = &self.limits;
        if !(MIN_BUFFER_SIZE..=MAX_BUFFER_SIZE).contains(&l.buffer_size) {
            return Err(ConfigError::key(
                "limits.buffer_size",
                format!(
                    "{} is out of range: must be between {MIN_BUFFER_SIZE} and {MAX_BUFFER_SIZE} bytes",
                    l.buffer_size
                ),
            ));
        }
        if l.max_head_bytes < MIN_HEAD_BYTES {
            return Err(ConfigError::key(
                "limits.max_head_bytes",
                format!(
                    "{} is too small: must be at least {MIN_HEAD_BYTES} bytes",
                    l.max_head_bytes
                ),
            ));
        }
        if !(1..=MAX_RESOLVER_THREADS).contains(&l.resolver_threads) {
            return Err(ConfigError::key(
                "limits.resolver_threads",
                format!(
                    "{} is out of range: must be between 1 and {MAX_RESOLVER_THREADS}",
                    l.resolver_threads
                ),
            ));
        }
        if !(1..=MAX_WORKERS).contains(&l.workers) {
            return Err(ConfigError::key(
                "limits.workers",
                format!(
                    "{} is out of range: must be between 1 and {MAX_WORKERS}, or auto",
                    l.workers
                ),
            ));
        }
        for (key, n) in [
            ("limits.max_sessions", l.max_sessions),
            ("limits.max_sessions_per_client", l.max_sessions_per_client),
            ("limits.max_pending_handshakes", l.max_pending_handshakes),
            (
                "limits.max_pending_handshakes_per_client",
                l.max_pending_handshakes_per_client,
            ),
        ] {
            if n == 0 {
                return Err(ConfigError::key(key, "must be at least 1"));
            }
        }
        if l.handshakes_per_client_per_sec > 0 && l.handshake_burst_per_client == 0 {
            return Err(ConfigError::key(
                "limits.handshake_burst_per_client",
                "must be at least 1 (to switch the budget off, set limits.handshakes_per_client_per_sec = 0)",
            ));
        }
        if self.listeners.is_empty() {
            return Err(ConfigError::key(
                "listen",
                "at least one listener is required",
            ));
        }
        for (i, l) in self.listeners.iter().enumerate() {
            if matches!(&l.addr, ListenAddr::Unix(p) if p.as_os_str().is_empty()) {
                return Err(ConfigError::key(
                    format!("listen[{i}].address"),
                    "empty Unix socket path",
                ));
            }
            if l.unix.mode > 0o777 {
                return Err(ConfigError::key(
                    format!("listen[{i}].mode"),
                    format!("{:#o} is not a permission mode (at most 0777)", l.unix.mode),
                ));
            }
        }
        if let Some(a) = &self.admin {
            if matches!(&a.listen, ListenAddr::Unix(p) if p.as_os_str().is_empty()) {
                return Err(ConfigError::key("admin.listen", "empty Unix socket path"));
            }
            if let Some(i) = self.listeners.iter().position(|l| l.addr == a.listen) {
                return Err(ConfigError::key(
                    "admin.listen",
                    format!(
                        "{} is listen[{i}]'s address too: the admin endpoint needs its own",
                        a.listen
                    ),
                ));
            }
        }
        let t = &self.timeouts;
        for (key, d) in [
            ("timeouts.handshake", t.handshake),
            ("timeouts.connect", t.connect),
            ("timeouts.half_close", t.half_close),
            ("timeouts.close", t.close),
            ("timeouts.drain", t.drain),
            ("timeouts.response", t.response),
        ] {
            if d.is_zero() {
                return Err(ConfigError::key(key, "must be greater than zero"));
            }
        }
        if t.keepalive == Some(Duration::ZERO) {
            return Err(ConfigError::key(
                "timeouts.keepalive",
                "must be greater than zero, or \"off\"",
            ));
        }
        if t.idle == Some(Duration::ZERO) {
            return Err(ConfigError::key(
                "timeouts.idle",
                "must be greater than zero, or \"off\"",
            ));
        }
        match (&self.tls.ca_cert, &self.tls.ca_key) {
            (Some(_), None) => {
                return Err(ConfigError::key(
                    "tls.ca_cert",
                    "needs tls.ca_key too: give both (the CA's certificate and key) or neither (a CA is generated)",
                ))
            }
            (None, Some(_)) => {
                return Err(ConfigError::key(
                    "tls.ca_key",
                    "needs tls.ca_cert too: give both (the CA's certificate and key) or neither (a CA is generated)",
                ))
            }
            _ => {}
        }
        if let Some(a) = &self.auth {
            // SOCKS5 user/password auth (RFC 1929) carries each in 1..=255 bytes.
            for (key, v) in [
                ("auth.username", &a.username),
                ("auth.password", &a.password),
            ] {
                if v.is_empty() || v.len() > 255 {
                    return Err(ConfigError::key(key, "must be 1 to 255 bytes long"));
                }
            }
            if a.username.contains(':') {
                return Err(ConfigError::key(
                    "auth.username",
                    "must not contain ':' (HTTP Basic credentials are USER:PASS)",
                ));
            }
        }
        self.validate_users()
    }

    /// Whether clients must authenticate.
    pub fn auth_required(&self) -> bool {
        self.auth.is_some() || !self.users.is_empty()
    }

    /// Every user name, the plaintext user first.
    pub fn user_names(&self) -> Vec<&str> {
        let plain = self.auth.iter().map(|a| a.username.as_str());
        plain
            .chain(self.users.iter().map(|u| u.name.as_str()))
            .collect()
    }

    /// Users: valid, unique names; and every rule's `users` names only
    /// them (and needs auth on at all).
    fn validate_users(&self) -> Result<(), ConfigError> {
        for (i, u) in self.users.iter().enumerate() {
            let key = format!("auth.users[{i}].name");
            crate::auth::check_name(&u.name).map_err(|e| ConfigError::key(&key, e))?;
            let plain = self.auth.as_ref().is_some_and(|a| a.username == u.name);
            if plain || self.users[..i].iter().any(|o| o.name == u.name) {
                return Err(ConfigError::key(
                    key,
                    format!("user {:?} is defined twice", u.name),
                ));
            }
        }
        let names = self.user_names();
        for (i, rule, users) in self.policy.rule_users() {
            if names.is_empty() {
                return Err(ConfigError::key(
                    format!("rules[{i}].users"),
                    format!(
                        "rule {rule:?} names users but auth is off: define them in [[auth.users]] (or --auth-file), or remove users"
                    ),
                ));
            }
            for (j, user) in users.iter().enumerate() {
                if !names.contains(&&**user) {
                    return Err(ConfigError::key(
                        format!("rules[{i}].users[{j}]"),
                        format!(
                            "rule {rule:?} names user {user:?}, who is not defined (users: {})",
                            names.join(", ")
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
