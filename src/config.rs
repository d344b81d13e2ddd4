//! Configuration: listeners, policy, timeouts, limits, credentials.
//!
//! `Config::default()` is the built-in default the binary runs with when given
//! no arguments. The TOML file format is documented in README.md.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::policy::{Policy, RuleConfig};

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

/// Timeouts. Every session has a deadline in every phase, except an
/// established tunnel when `idle` is `None` and its rule sets none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    /// Inspected HTTP: how long an upstream may take to start answering a
    /// request (504 after that).
    pub response: Duration,
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
        }
    }
}

/// Sizes and limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest request head (HTTP) accepted; larger gets 431.
    pub max_head_bytes: usize,
    /// Relay buffer per direction, in bytes.
    pub buffer_size: usize,
    /// Resolver threads.
    pub resolver_threads: usize,
    /// Open sessions overall; past it new clients are refused (503 / SOCKS 0x01).
    pub max_sessions: usize,
    /// Open sessions per client address (or per Unix-socket peer uid).
    pub max_sessions_per_client: usize,
    /// Sessions still in their handshake, overall.
    pub max_pending_handshakes: usize,
    /// Sessions still in their handshake, per client address (or uid).
    pub max_pending_handshakes_per_client: usize,
}

impl Default for Limits {
    /// The defaults for this process's open-file limit, read now: see
    /// [`Limits::for_open_files`].
    fn default() -> Self {
        Limits::for_open_files(crate::fd_budget::nofile_limit())
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
            max_sessions: sessions,
            max_sessions_per_client: (sessions / 4).max(1),
            max_pending_handshakes: handshakes,
            max_pending_handshakes_per_client: (handshakes / 4).max(1),
        }
    }
}

/// Proxy credentials: HTTP `Proxy-Authorization: Basic` and SOCKS5 user/pass.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// User name.
    pub username: String,
    /// Password.
    pub password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// Everything a proxy needs to run.
#[derive(Debug, Clone)]
pub struct Config {
    /// Listeners; at least one.
    pub listeners: Vec<ListenerConfig>,
    /// Who may connect where.
    pub policy: Policy,
    /// Timeouts.
    pub timeouts: Timeouts,
    /// Limits.
    pub limits: Limits,
    /// Required credentials, if any.
    pub auth: Option<Credentials>,
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

/// A configuration file that does not load, parse or validate: says which
/// file, which key (when known) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    path: Option<PathBuf>,
    key: Option<String>,
    message: String,
}

impl ConfigError {
    /// An error about `key` (a dotted path such as `limits.buffer_size`).
    pub fn key(key: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError {
            path: None,
            key: Some(key.into()),
            message: message.into(),
        }
    }
    /// An error not tied to one key.
    pub fn other(message: impl Into<String>) -> ConfigError {
        ConfigError {
            path: None,
            key: None,
            message: message.into(),
        }
    }
    /// Attributes the error to a file.
    pub fn in_file(mut self, path: impl Into<PathBuf>) -> ConfigError {
        self.path = Some(path.into());
        self
    }
    /// The file, if the error came from one.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }
    /// The offending key, if known.
    pub fn key_name(&self) -> Option<&str> {
        self.key.as_deref()
    }
    /// What is wrong.
    pub fn message(&self) -> &str {
        &self.message
    }

    fn from_toml(e: &toml::de::Error, input: &str) -> ConfigError {
        let message = e.message().trim().replace('\n', "; ");
        let message = match e.span() {
            Some(span) => {
                let (line, col) = line_col(input, span.start);
                format!("line {line}, column {col}: {message}")
            }
            None => message,
        };
        ConfigError::other(message)
    }
}

/// 1-based line and column of byte `offset` in `input`.
fn line_col(input: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(input.len());
    let before = input.get(..offset).unwrap_or(input);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let col = before[line_start..].chars().count() + 1;
    (line, col)
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(p) = &self.path {
            write!(f, "{}: ", p.display())?;
        }
        if let Some(k) = &self.key {
            write!(f, "{k}: ")?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConfigError {}

// ---------------------------------------------------------------------------
// The TOML file, as written.

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    listen: Option<Vec<RawListen>>,
    #[serde(default)]
    auth: Option<RawAuth>,
    #[serde(default)]
    timeouts: RawTimeouts,
    #[serde(default)]
    limits: RawLimits,
    #[serde(default)]
    rules: Vec<RuleConfig>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawListen {
    address: String,
    #[serde(default)]
    protocol: Option<String>,
    /// Unix sockets only: the socket file's mode, as an octal string.
    #[serde(default)]
    mode: Option<String>,
    /// Unix sockets only: the socket file's group, a name or a gid.
    #[serde(default)]
    group: Option<RawGroup>,
}

/// A group as written: a name, or a numeric gid.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawGroup {
    Gid(u32),
    Name(String),
}

impl RawListen {
    /// The `mode` and `group` keys, for listener `i` at `addr`.
    fn unix_access(&self, i: usize, addr: &ListenAddr) -> Result<UnixAccess, ConfigError> {
        if !matches!(addr, ListenAddr::Unix(_)) {
            for (key, given) in [
                ("mode", self.mode.is_some()),
                ("group", self.group.is_some()),
            ] {
                if given {
                    return Err(ConfigError::key(
                        format!("listen[{i}].{key}"),
                        "only a unix: listener has a socket file to set it on",
                    ));
                }
            }
        }
        let mut access = UnixAccess::default();
        if let Some(m) = &self.mode {
            access.mode =
                parse_unix_mode(m).map_err(|e| ConfigError::key(format!("listen[{i}].mode"), e))?;
        }
        access.group = match &self.group {
            None => None,
            Some(RawGroup::Gid(gid)) => Some(UnixGroup::Gid(*gid)),
            // A name that is all digits is a gid, as for chgrp.
            Some(RawGroup::Name(name)) => Some(match name.trim().parse() {
                Ok(gid) => UnixGroup::Gid(gid),
                Err(_) if name.trim().is_empty() => {
                    return Err(ConfigError::key(
                        format!("listen[{i}].group"),
                        "empty group name",
                    ))
                }
                Err(_) => UnixGroup::Name(name.trim().to_string()),
            }),
        };
        Ok(access)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAuth {
    username: String,
    password: String,
}

/// A duration as written: `"10s"`, `"off"`, or a bare number of seconds.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawDuration {
    Secs(u64),
    Text(String),
}

impl RawDuration {
    fn parse(&self, key: &str) -> Result<Option<Duration>, ConfigError> {
        match self {
            RawDuration::Secs(0) => Ok(None),
            RawDuration::Secs(n) => Ok(Some(Duration::from_secs(*n))),
            RawDuration::Text(s) => crate::duration::parse(s).map_err(|e| ConfigError::key(key, e)),
        }
    }
    fn parse_required(&self, key: &str) -> Result<Duration, ConfigError> {
        self.parse(key)?.ok_or_else(|| {
            ConfigError::key(
                key,
                "must be greater than zero (\"off\" is not allowed here)",
            )
        })
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTimeouts {
    #[serde(default)]
    handshake: Option<RawDuration>,
    #[serde(default)]
    connect: Option<RawDuration>,
    #[serde(default)]
    idle: Option<RawDuration>,
    #[serde(default)]
    half_close: Option<RawDuration>,
    #[serde(default)]
    close: Option<RawDuration>,
    #[serde(default)]
    drain: Option<RawDuration>,
    #[serde(default)]
    response: Option<RawDuration>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    #[serde(default)]
    max_head_bytes: Option<usize>,
    #[serde(default)]
    buffer_size: Option<usize>,
    #[serde(default)]
    resolver_threads: Option<usize>,
    #[serde(default)]
    max_sessions: Option<usize>,
    #[serde(default)]
    max_sessions_per_client: Option<usize>,
    #[serde(default)]
    max_pending_handshakes: Option<usize>,
    #[serde(default)]
    max_pending_handshakes_per_client: Option<usize>,
}

/// A configuration file parsed but not yet compiled: the policy is still a
/// list of [`RuleConfig`]s, so a front end (the binary) can override parts and
/// append rules before [`compile`](ConfigFile::compile) builds the [`Config`].
#[derive(Debug, Clone, Default)]
pub struct ConfigFile {
    /// The file this came from, for error messages (`None` for a string).
    pub path: Option<PathBuf>,
    /// `[[listen]]` tables; `None` when the file has none (the default listener applies).
    pub listeners: Option<Vec<ListenerConfig>>,
    /// `[auth]`.
    pub auth: Option<Credentials>,
    /// `[timeouts]`, defaults filled in.
    pub timeouts: Timeouts,
    /// `[limits]`, defaults filled in.
    pub limits: Limits,
    /// `[[rules]]`, in file order.
    pub rules: Vec<RuleConfig>,
}

impl ConfigFile {
    /// Parses TOML text. Unknown keys are errors.
    pub fn parse(text: &str) -> Result<ConfigFile, ConfigError> {
        let raw: RawFile = toml::from_str(text).map_err(|e| ConfigError::from_toml(&e, text))?;
        ConfigFile::from_raw(raw)
    }

    /// Reads and parses a file; errors name it.
    pub fn load(path: impl AsRef<Path>) -> Result<ConfigFile, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::other(format!("cannot read: {e}")).in_file(path))?;
        let mut file = ConfigFile::parse(&text).map_err(|e| e.in_file(path))?;
        file.path = Some(path.to_path_buf());
        Ok(file)
    }

    fn from_raw(raw: RawFile) -> Result<ConfigFile, ConfigError> {
        let listeners = match raw.listen {
            None => None,
            Some(list) => Some(
                list.into_iter()
                    .enumerate()
                    .map(|(i, l)| {
                        let addr = parse_listen_addr(&l.address)
                            .map_err(|e| ConfigError::key(format!("listen[{i}].address"), e))?;
                        let protocol = match &l.protocol {
                            None => ListenerProtocol::Auto,
                            Some(p) => p.parse().map_err(|e| {
                                ConfigError::key(format!("listen[{i}].protocol"), e)
                            })?,
                        };
                        let unix = l.unix_access(i, &addr)?;
                        Ok(ListenerConfig {
                            addr,
                            protocol,
                            unix,
                        })
                    })
                    .collect::<Result<Vec<_>, ConfigError>>()?,
            ),
        };

        let d = Timeouts::default();
        let t = &raw.timeouts;
        let timeouts = Timeouts {
            handshake: match &t.handshake {
                Some(v) => v.parse_required("timeouts.handshake")?,
                None => d.handshake,
            },
            connect: match &t.connect {
                Some(v) => v.parse_required("timeouts.connect")?,
                None => d.connect,
            },
            idle: match &t.idle {
                Some(v) => v.parse("timeouts.idle")?,
                None => d.idle,
            },
            half_close: match &t.half_close {
                Some(v) => v.parse_required("timeouts.half_close")?,
                None => d.half_close,
            },
            close: match &t.close {
                Some(v) => v.parse_required("timeouts.close")?,
                None => d.close,
            },
            drain: match &t.drain {
                Some(v) => v.parse_required("timeouts.drain")?,
                None => d.drain,
            },
            response: match &t.response {
                Some(v) => v.parse_required("timeouts.response")?,
                None => d.response,
            },
        };

        let d = Limits::default();
        let limits = Limits {
            max_head_bytes: raw.limits.max_head_bytes.unwrap_or(d.max_head_bytes),
            buffer_size: raw.limits.buffer_size.unwrap_or(d.buffer_size),
            resolver_threads: raw.limits.resolver_threads.unwrap_or(d.resolver_threads),
            max_sessions: raw.limits.max_sessions.unwrap_or(d.max_sessions),
            max_sessions_per_client: raw
                .limits
                .max_sessions_per_client
                .unwrap_or(d.max_sessions_per_client),
            max_pending_handshakes: raw
                .limits
                .max_pending_handshakes
                .unwrap_or(d.max_pending_handshakes),
            max_pending_handshakes_per_client: raw
                .limits
                .max_pending_handshakes_per_client
                .unwrap_or(d.max_pending_handshakes_per_client),
        };

        Ok(ConfigFile {
            path: None,
            listeners,
            auth: raw.auth.map(|a| Credentials {
                username: a.username,
                password: a.password,
            }),
            timeouts,
            limits,
            rules: raw.rules,
        })
    }

    /// The name each rule will have in logs: its `name`, or `rules[N]`.
    pub fn rule_names(&self) -> Vec<String> {
        rule_names(&self.rules)
    }

    /// Compiles the rules (none means deny everything) and validates the result.
    pub fn compile(self) -> Result<Config, ConfigError> {
        let policy = Policy::from_rules(&self.rules).map_err(|e| {
            let e = ConfigError::key("rules", e.0);
            match &self.path {
                Some(p) => e.in_file(p),
                None => e,
            }
        })?;
        self.with_policy(policy)
    }

    /// Builds and validates a [`Config`] with `policy` instead of compiling
    /// [`rules`](ConfigFile::rules) (which are ignored).
    pub fn with_policy(self, policy: Policy) -> Result<Config, ConfigError> {
        let path = self.path;
        let attach = |e: ConfigError| match &path {
            Some(p) => e.in_file(p),
            None => e,
        };
        let config = Config {
            listeners: self.listeners.unwrap_or_else(|| vec![default_listener()]),
            policy,
            timeouts: self.timeouts,
            limits: self.limits,
            auth: self.auth,
        };
        config.validate().map_err(attach)?;
        Ok(config)
    }
}

/// The name each rule has in logs: its `name`, or `rules[N]` (N from 0).
pub fn rule_names(rules: &[RuleConfig]) -> Vec<String> {
    rules
        .iter()
        .enumerate()
        .map(|(i, r)| r.name.clone().unwrap_or_else(|| format!("rules[{i}]")))
        .collect()
}

impl Config {
    /// Parses a TOML configuration (format in README.md) and validates it.
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
        if t.idle == Some(Duration::ZERO) {
            return Err(ConfigError::key(
                "timeouts.idle",
                "must be greater than zero, or \"off\"",
            ));
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
        Ok(())
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
