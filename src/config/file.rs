//! The TOML file as written, and [`ConfigFile`]: parsed but not compiled,
//! so a front end can override parts and append rules before compiling.

use std::sync::Arc;

use crate::target::parent::ParentProxy;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::{
    default_listener, default_state_dir, parse_listen_addr, parse_unix_mode, AdminConfig, Config,
    ConfigError, Credentials, Limits, ListenAddr, ListenerConfig, ListenerProtocol, LogFormat,
    Timeouts, TlsConfig, UnixAccess, UnixGroup,
};
use crate::auth::{HashedUser, PhcHash};
use crate::policy::secret::{placeholder_key, SecretConfig, Secrets};
use crate::policy::{builtin_default_rule, Policy, PolicyError, RuleConfig, RuleMode};

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
    #[serde(default)]
    default: bool,
    #[serde(default)]
    mode: Option<RuleMode>,
    #[serde(default)]
    tls: RawTls,
    #[serde(default)]
    upstream_proxy: Option<String>,
    admin: Option<RawAdmin>,
    #[serde(default)]
    log_format: Option<String>,
    /// srt's settings JSON, whose `network` section adds rules.
    #[serde(default)]
    srt_settings: Option<PathBuf>,
    #[serde(default)]
    secrets: Vec<SecretConfig>,
}

/// `[admin]`: the admin endpoint.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAdmin {
    listen: String,
    #[serde(default)]
    control: bool,
}

impl RawAdmin {
    fn compile(self) -> Result<AdminConfig, ConfigError> {
        let listen =
            parse_listen_addr(&self.listen).map_err(|e| ConfigError::key("admin.listen", e))?;
        Ok(AdminConfig {
            listen,
            control: self.control,
            refuse_netns: None,
            refuse_descendants_of: None,
        })
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    #[serde(default)]
    ca_cert: Option<String>,
    #[serde(default)]
    ca_key: Option<String>,
    #[serde(default)]
    upstream_ca: Vec<String>,
    #[serde(default)]
    upstream_roots: Option<String>,
    #[serde(default)]
    state_dir: Option<String>,
    #[serde(default)]
    ktls: bool,
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

/// `workers` as written: a number, or `"auto"` (or a number in a string).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawWorkers {
    Count(i64),
    Text(String),
}

impl RawWorkers {
    fn parse(&self) -> Result<usize, ConfigError> {
        let parsed = match self {
            RawWorkers::Count(n) => super::parse_workers(&n.to_string()),
            RawWorkers::Text(s) => super::parse_workers(s),
        };
        parsed.map_err(|e| ConfigError::key("limits.workers", e))
    }
}

/// `[auth]`: the plaintext user (`username`, `password`) and/or
/// `[[auth.users]]` with hashed passwords.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAuth {
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default)]
    users: Vec<RawUser>,
}

/// One `[[auth.users]]` table: a name and exactly one of `password_hash`
/// (a PHC string) or `password_file` (a file holding one).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUser {
    name: String,
    #[serde(default)]
    password_hash: Option<String>,
    #[serde(default)]
    password_file: Option<String>,
}

impl RawAuth {
    /// The plaintext user and the hashed users; `password_file` paths are
    /// relative to `base` (the file's directory) and read now.
    fn compile(
        self,
        base: Option<&Path>,
    ) -> Result<(Option<Credentials>, Vec<HashedUser>), ConfigError> {
        let plain = match (self.username, self.password) {
            (Some(u), Some(p)) => Some(Credentials::new(u, p)),
            (None, None) => None,
            (Some(_), None) => {
                return Err(ConfigError::key(
                    "auth.username",
                    "needs auth.password too (or use [[auth.users]] with a password_hash)",
                ))
            }
            (None, Some(_)) => {
                return Err(ConfigError::key("auth.password", "needs auth.username too"))
            }
        };
        if plain.is_none() && self.users.is_empty() {
            return Err(ConfigError::key(
                "auth",
                "names no user: give username and password, or [[auth.users]] tables",
            ));
        }
        let mut users = Vec::with_capacity(self.users.len());
        for (i, u) in self.users.into_iter().enumerate() {
            let key = |k: &str| format!("auth.users[{i}].{k}");
            let hash = match (&u.password_hash, &u.password_file) {
                (Some(h), None) => {
                    PhcHash::parse(h).map_err(|e| ConfigError::key(key("password_hash"), e))?
                }
                (None, Some(f)) => {
                    let path = match base {
                        Some(dir) => dir.join(f),
                        None => PathBuf::from(f),
                    };
                    let text = std::fs::read_to_string(&path).map_err(|e| {
                        ConfigError::key(key("password_file"), format!("{}: {e}", path.display()))
                    })?;
                    PhcHash::parse(&text).map_err(|e| {
                        ConfigError::key(key("password_file"), format!("{}: {e}", path.display()))
                    })?
                }
                (Some(_), Some(_)) => {
                    return Err(ConfigError::key(
                        key("password_file"),
                        "give password_hash or password_file, not both",
                    ))
                }
                (None, None) => {
                    return Err(ConfigError::key(
                        key("name"),
                        "needs password_hash (a PHC string from `portcullis hash-password`) or password_file",
                    ))
                }
            };
            users.push(HashedUser::new(u.name, hash));
        }
        Ok((plain, users))
    }
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
    #[serde(default)]
    keepalive: Option<RawDuration>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    #[serde(default)]
    max_head_bytes: Option<usize>,
    #[serde(default)]
    buffer_size: Option<usize>,
    #[serde(default)]
    splice: Option<bool>,
    #[serde(default)]
    resolver_threads: Option<usize>,
    #[serde(default)]
    workers: Option<RawWorkers>,
    #[serde(default)]
    max_sessions: Option<usize>,
    #[serde(default)]
    max_sessions_per_client: Option<usize>,
    #[serde(default)]
    max_pending_handshakes: Option<usize>,
    #[serde(default)]
    max_pending_handshakes_per_client: Option<usize>,
    #[serde(default)]
    handshakes_per_client_per_sec: Option<u32>,
    #[serde(default)]
    handshake_burst_per_client: Option<u32>,
}

/// A configuration file parsed but not yet compiled: the policy is still a
/// list of [`RuleConfig`]s, so a front end (the binary) can override parts and
/// append rules before [`compile`](ConfigFile::compile) builds the [`Config`].
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ConfigFile {
    /// The file this came from, for error messages (`None` for a string).
    pub path: Option<PathBuf>,
    /// `[[listen]]` tables; `None` when the file has none (the default listener applies).
    pub listeners: Option<Vec<ListenerConfig>>,
    /// `[auth]` `username` and `password`: the plaintext user.
    pub auth: Option<Credentials>,
    /// `[[auth.users]]`, `password_file`s read.
    pub users: Vec<HashedUser>,
    /// `[timeouts]`, defaults filled in.
    pub timeouts: Timeouts,
    /// `[limits]`, defaults filled in.
    pub limits: Limits,
    /// `[[rules]]`, in file order; a front end may append its own.
    pub rules: Vec<RuleConfig>,
    /// `default = true`: add the built-in default rule to the rules.
    pub default: bool,
    /// `mode = "audit"`: the whole policy in audit mode.
    pub audit: bool,
    /// `[tls]`, paths as written (made relative to the file by [`ConfigFile::load`]).
    pub tls: TlsConfig,
    /// `upstream_proxy`: every allowed connection goes through this parent
    /// proxy, unless its rule says otherwise.
    pub upstream_proxy: Option<Arc<ParentProxy>>,
    /// `[admin]`, if present.
    pub admin: Option<AdminConfig>,
    /// `log_format`, default text.
    pub log_format: LogFormat,
    /// `srt_settings`: srt's settings JSON (relative to the file), whose
    /// `network` section the front end adds as rules (`config::srt`).
    pub srt_settings: Option<PathBuf>,
    /// `[[secrets]]` as written; their values are read when the
    /// configuration is compiled (so every reload reads them again).
    pub secrets: Vec<SecretConfig>,
    /// The directory relative `file` paths of secrets start from.
    base: Option<PathBuf>,
    /// The text parsed, to point errors at line and column.
    source: Option<Source>,
    /// How many of `rules` came from the file (the rest were appended).
    file_rules: usize,
}

/// The text a [`ConfigFile`] was parsed from.
#[derive(Clone)]
struct Source(std::sync::Arc<str>);

impl fmt::Debug for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Source({} bytes)", self.0.len())
    }
}

impl ConfigFile {
    /// Parses TOML text. Unknown keys are errors.
    pub fn parse(text: &str) -> Result<ConfigFile, ConfigError> {
        ConfigFile::parse_in(text, None)
    }

    /// Parses TOML text whose relative `password_file` paths are relative to `base`.
    fn parse_in(text: &str, base: Option<&Path>) -> Result<ConfigFile, ConfigError> {
        let raw: RawFile = toml::from_str(text).map_err(|e| ConfigError::from_toml(&e, text))?;
        let mut file = ConfigFile::from_raw(raw, base).map_err(|e| e.locate(text))?;
        file.source = Some(Source(text.into()));
        Ok(file)
    }

    /// Reads and parses a file; errors name it.
    pub fn load(path: impl AsRef<Path>) -> Result<ConfigFile, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::other(format!("cannot read: {e}")).in_file(path))?;
        let mut file = ConfigFile::parse_in(&text, path.parent()).map_err(|e| e.in_file(path))?;
        file.path = Some(path.to_path_buf());
        if let Some(dir) = path.parent() {
            file.tls.rebase(dir);
            if let Some(srt) = &mut file.srt_settings {
                *srt = dir.join(&*srt);
            }
        }
        Ok(file)
    }

    fn from_raw(raw: RawFile, base: Option<&Path>) -> Result<ConfigFile, ConfigError> {
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
                        let mut listener = ListenerConfig::new(addr, protocol);
                        listener.unix = unix;
                        Ok(listener)
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
            keepalive: match &t.keepalive {
                Some(v) => v.parse("timeouts.keepalive")?,
                None => d.keepalive,
            },
        };

        let d = Limits::default();
        let limits = Limits {
            max_head_bytes: raw.limits.max_head_bytes.unwrap_or(d.max_head_bytes),
            buffer_size: raw.limits.buffer_size.unwrap_or(d.buffer_size),
            splice: raw.limits.splice.unwrap_or(d.splice),
            resolver_threads: raw.limits.resolver_threads.unwrap_or(d.resolver_threads),
            workers: match &raw.limits.workers {
                Some(w) => w.parse()?,
                None => d.workers,
            },
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
            handshakes_per_client_per_sec: raw
                .limits
                .handshakes_per_client_per_sec
                .unwrap_or(d.handshakes_per_client_per_sec),
            handshake_burst_per_client: raw
                .limits
                .handshake_burst_per_client
                .unwrap_or(d.handshake_burst_per_client),
        };

        let path_of = |key: &str, v: String| {
            if v.is_empty() {
                Err(ConfigError::key(key, "must not be empty"))
            } else {
                Ok(PathBuf::from(v))
            }
        };
        let t = raw.tls;
        let tls = TlsConfig {
            ca_cert: t.ca_cert.map(|v| path_of("tls.ca_cert", v)).transpose()?,
            ca_key: t.ca_key.map(|v| path_of("tls.ca_key", v)).transpose()?,
            upstream_ca: t
                .upstream_ca
                .into_iter()
                .enumerate()
                .map(|(i, v)| path_of(&format!("tls.upstream_ca[{i}]"), v))
                .collect::<Result<_, _>>()?,
            upstream_roots: match t.upstream_roots {
                Some(v) => v
                    .parse()
                    .map_err(|e: String| ConfigError::key("tls.upstream_roots", e))?,
                None => Default::default(),
            },
            state_dir: match t.state_dir {
                Some(v) => Some(path_of("tls.state_dir", v)?),
                None => default_state_dir(),
            },
            ktls: t.ktls,
        };
        let upstream_proxy = match raw.upstream_proxy {
            None => None,
            Some(url) => Some(Arc::new(
                ParentProxy::parse(&url).map_err(|e| ConfigError::key("upstream_proxy", e))?,
            )),
        };
        let admin = raw.admin.map(RawAdmin::compile).transpose()?;
        let log_format = match &raw.log_format {
            Some(f) => f.parse().map_err(|e| ConfigError::key("log_format", e))?,
            None => LogFormat::default(),
        };
        let file_rules = raw.rules.len();
        let (auth, users) = match raw.auth {
            Some(a) => a.compile(base)?,
            None => (None, Vec::new()),
        };
        Ok(ConfigFile {
            path: None,
            listeners,
            auth,
            users,
            timeouts,
            limits,
            rules: raw.rules,
            default: raw.default,
            audit: raw.mode == Some(RuleMode::Audit),
            tls,
            upstream_proxy,
            admin,
            log_format,
            srt_settings: raw.srt_settings,
            secrets: raw.secrets,
            base: base.map(Path::to_path_buf),
            source: None,
            file_rules,
        })
    }

    /// The name each rule will have in logs: its `name`, or `rules[N]`.
    pub fn rule_names(&self) -> Vec<String> {
        rule_names(&self.rules)
    }

    /// Compiles the rules (none means deny everything; `default` adds the
    /// built-in default rule after them; `audit` puts the policy in audit
    /// mode) and validates the result.
    pub fn compile(self) -> Result<Config, ConfigError> {
        let mut rules = self.rules.clone();
        if self.default {
            rules.push(builtin_default_rule());
        }
        let mut policy = Policy::from_rules(&rules).map_err(|e| self.policy_error(e))?;
        policy.set_audit(self.audit);
        self.with_policy(policy)
    }

    /// A rule error, pointed at the file's key when the rule is the file's.
    fn policy_error(&self, e: PolicyError) -> ConfigError {
        let err = match (e.rule, &e.key) {
            (Some(i), key) if i < self.file_rules => {
                let key = match key {
                    Some(k) => format!("rules[{i}].{k}"),
                    None => format!("rules[{i}]"),
                };
                let name = match &self.rules[i].name {
                    Some(n) => format!(" (rule {n:?})"),
                    None => String::new(),
                };
                ConfigError::key(key, format!("{}{name}", e.message))
            }
            _ => ConfigError::other(e.to_string()),
        };
        self.attach(err)
    }

    /// Adds the file's name and the key's line and column to an error.
    fn attach(&self, e: ConfigError) -> ConfigError {
        let e = match &self.source {
            Some(s) => e.locate(&s.0),
            None => e,
        };
        match &self.path {
            Some(p) => e.in_file(p),
            None => e,
        }
    }

    /// Builds and validates a [`Config`] with `policy` instead of compiling
    /// [`rules`](ConfigFile::rules) (which are ignored).
    pub fn with_policy(self, mut policy: Policy) -> Result<Config, ConfigError> {
        if !self.secrets.is_empty() {
            let key = placeholder_key(self.tls.state_dir.as_deref());
            let secrets = Secrets::load(&self.secrets, self.base.as_deref(), key)
                .map_err(|(k, e)| self.attach(ConfigError::key(k, e)))?;
            policy.set_secrets(secrets);
        }
        let config = Config {
            listeners: self
                .listeners
                .clone()
                .unwrap_or_else(|| vec![default_listener()]),
            policy,
            timeouts: self.timeouts,
            limits: self.limits,
            auth: self.auth.clone(),
            users: self.users.clone(),
            tls: self.tls.clone(),
            upstream_proxy: self.upstream_proxy.clone(),
            admin: self.admin.clone(),
            log_format: self.log_format,
        };
        config.validate().map_err(|e| self.attach(e))?;
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
