//! Command-line flags, and how they combine with the configuration file.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use portcullis::config::{self, ConfigError, ConfigFile};
use portcullis::policy::{
    parse_cli_inspect, parse_cli_rule, parse_cli_terminate, Action, RuleConfig,
};
use portcullis::{
    AdminConfig, Config, Credentials, ListenAddr, ListenerConfig, ListenerProtocol, LogFormat,
    Policy,
};

const AFTER_HELP: &str = "\
Policy: with no --config and no rule flag (--allow, --deny, --inspect,
--terminate), the built-in default applies (host names on ports 80 and 443;
address literals, private, loopback and other special ranges refused).
Otherwise the policy is exactly the file's [[rules]] plus the rule flags, and
everything else is denied; --default (or default = true in the file) adds the
built-in default to them. --audit logs denials as would-deny instead.

Examples:
  portcullis
  portcullis --allow github.com:443 --allow '*.github.com:443'
  portcullis --default --deny '*.tracker.example'
  portcullis --config portcullis.toml --listen unix:/tmp/portcullis.sock
  portcullis --config portcullis.toml --check
  portcullis --inspect example.com:80
  portcullis --terminate api.example.com:443 --ca-cert ca.pem --ca-key ca.key

  curl -x http://127.0.0.1:3128 http://example.com/

  curl -p -x http://127.0.0.1:3128 https://example.com
  curl -x socks5h://127.0.0.1:3128 https://example.com

Signals: SIGHUP reloads the policy (--config file plus the rule flags);
SIGUSR1 logs the counters; SIGTERM/SIGINT shut down.
Logging: RUST_LOG (default: info); --log-format text (logfmt) or json.
Admin: --admin 127.0.0.1:9090 serves GET /metrics (Prometheus) and GET /stats.";

/// A sandbox egress proxy for HTTP CONNECT and SOCKS5, deny by default.
#[derive(Debug, Parser)]
#[command(name = "portcullis", version, after_help = AFTER_HELP)]
pub struct Args {
    /// TOML configuration file: listeners, auth, timeouts, limits and [[rules]].
    #[arg(short, long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Listen on ADDR: IP:PORT, [IPv6]:PORT or unix:/path. Repeatable; replaces
    /// the file's [[listen]] tables. [default: 127.0.0.1:3128]
    #[arg(short, long, value_name = "ADDR", value_parser = config::parse_listen_addr)]
    pub listen: Vec<ListenAddr>,

    /// What the --listen listeners speak (auto tells HTTP and SOCKS5 apart). [default: auto]
    #[arg(long, value_enum, value_name = "PROTOCOL", requires = "listen")]
    pub protocol: Option<ProtocolArg>,

    /// Allow HOST[:PORT|:LO-HI] or CIDR[:PORT|:LO-HI] (IPv6 in brackets before a
    /// port: [::1]:443). Repeatable; added to the file's rules.
    #[arg(short, long, value_name = "RULE", value_parser = allow_rule)]
    pub allow: Vec<RuleConfig>,

    /// Deny a destination, same syntax as --allow. Repeatable; a deny beats any allow.
    #[arg(short, long, value_name = "RULE", value_parser = deny_rule)]
    pub deny: Vec<RuleConfig>,

    /// Allow a destination like --allow, and inspect it as HTTP/1.1 (every
    /// request allowed; request rules need a --config file). Repeatable.
    #[arg(long, value_name = "RULE", value_parser = inspect_rule)]
    pub inspect: Vec<RuleConfig>,

    /// Like --inspect, and terminate TLS with the local CA to inspect the
    /// HTTP/1.1 inside (tls = "terminate"). Repeatable.
    #[arg(long, value_name = "RULE", value_parser = terminate_rule)]
    pub terminate: Vec<RuleConfig>,

    /// Add the rules of srt's (sandbox-runtime) settings JSON: its network
    /// allowedDomains, deniedDomains (with deniedDomainReasons) and
    /// deniedResolvedAddresses, with srt's meaning. Same as srt_settings in
    /// the file. Keys that cannot be honoured are named in a warning.
    #[arg(long, value_name = "FILE")]
    pub srt_settings: Option<PathBuf>,

    /// Add the built-in default rule (host names on ports 80 and 443) to the
    /// rules given, instead of replacing it.
    #[arg(long = "default")]
    pub default_rule: bool,

    /// Audit mode for the whole policy: denials are logged as would-deny and
    /// let through. For building an allowlist from a real run.
    #[arg(long)]
    pub audit: bool,

    /// PEM certificate of the CA that signs minted leaves (with --ca-key).
    /// Overrides the file's [tls] ca_cert.
    #[arg(long, value_name = "FILE")]
    pub ca_cert: Option<PathBuf>,

    /// PEM private key of that CA (with --ca-cert). Overrides [tls] ca_key.
    #[arg(long, value_name = "FILE")]
    pub ca_key: Option<PathBuf>,

    /// Extra PEM trust anchor for upstream certificates. Repeatable; added to
    /// the file's [tls] upstream_ca.
    #[arg(long, value_name = "FILE")]
    pub upstream_ca: Vec<PathBuf>,

    /// Hand terminated TLS to the kernel after its handshakes (kTLS, Linux
    /// with the tls module): bytes are then en- and decrypted in the kernel
    /// and spliced. Sets the file's [tls] ktls.
    #[arg(long)]
    pub ktls: bool,

    /// Require proxy credentials (HTTP Basic and SOCKS5 username/password).
    /// Visible to every user in `ps`: prefer --auth-env or --auth-file.
    /// Overrides the file's [auth].
    #[arg(long, value_name = "USER:PASS", value_parser = parse_auth)]
    pub auth: Option<Credentials>,

    /// Like --auth, reading USER:PASS from the environment variable VAR (so
    /// the password never shows in `ps`). Overrides the file's [auth].
    #[arg(long, value_name = "VAR", conflicts_with = "auth")]
    pub auth_env: Option<String>,

    /// Users with hashed passwords: lines NAME:HASH (a PHC argon2id string
    /// from `portcullis hash-password`), # comments. Read at start and on
    /// SIGHUP. Overrides the file's [auth]; combines with --auth/--auth-env.
    #[arg(long, value_name = "FILE")]
    pub auth_file: Option<PathBuf>,

    /// Time to read and answer a client's request, e.g. 10s. [default: 10s]
    #[arg(long, value_name = "DURATION", value_parser = portcullis::duration::parse_required)]
    pub handshake_timeout: Option<Duration>,

    /// Time to resolve and connect, over all addresses. [default: 10s]
    #[arg(long, value_name = "DURATION", value_parser = portcullis::duration::parse_required)]
    pub connect_timeout: Option<Duration>,

    /// Close established tunnels idle this long; "off" never does. [default: off]
    #[arg(long, value_name = "DURATION", value_parser = parse_idle)]
    pub idle_timeout: Option<IdleTimeout>,

    /// TCP keepalive on both sockets of every session: probes after this
    /// long without traffic, so a peer gone without a FIN is found; "off"
    /// turns it off. Same as [timeouts] keepalive. [default: 60s]
    #[arg(long, value_name = "DURATION", value_parser = parse_idle)]
    pub keepalive: Option<IdleTimeout>,

    /// Close half-closed tunnels (one side finished) idle this long. [default: 30s]
    #[arg(long, value_name = "DURATION", value_parser = portcullis::duration::parse_required)]
    pub half_close_timeout: Option<Duration>,

    /// Time to flush what is owed before closing. [default: 5s]
    #[arg(long, value_name = "DURATION", value_parser = portcullis::duration::parse_required)]
    pub close_timeout: Option<Duration>,

    /// Reach every allowed destination through this parent proxy:
    /// http://[USER:PASS@]HOST:PORT or socks5://... Overrides the file's
    /// `upstream_proxy`; a rule's own `upstream_proxy` still wins. A password
    /// here is visible to every user in `ps`: prefer --upstream-proxy-env or
    /// --upstream-proxy-file.
    #[arg(long, value_name = "URL", value_parser = parse_parent)]
    pub upstream_proxy: Option<std::sync::Arc<portcullis::protocol::parent::ParentProxy>>,

    /// Like --upstream-proxy, reading the URL from the environment variable
    /// VAR (so a password never shows in `ps`).
    #[arg(long, value_name = "VAR", conflicts_with_all = ["upstream_proxy", "upstream_proxy_file"])]
    pub upstream_proxy_env: Option<String>,

    /// Like --upstream-proxy, reading the URL from the first line of FILE
    /// (so a password never shows in `ps`; keep the file mode 0600).
    #[arg(long, value_name = "FILE", conflicts_with = "upstream_proxy")]
    pub upstream_proxy_file: Option<PathBuf>,
    /// Reactor threads: a number, or auto (one per available core). Each
    /// accepts on its own socket (SO_REUSEPORT on Linux) and runs its own
    /// event loop; limits and stats stay global. Overrides the file's
    /// [limits] workers. [default: 1]
    #[arg(long, value_name = "N|auto", value_parser = config::parse_workers)]
    pub workers: Option<usize>,

    /// Log lines on stderr as text (logfmt: key=value) or json (one object
    /// per line), same keys. Overrides the file's log_format. [default: text]
    #[arg(long, value_name = "FORMAT", value_parser = parse_log_format)]
    pub log_format: Option<LogFormat>,

    /// Serve the admin endpoint on ADDR (IP:PORT or unix:/path): GET /metrics
    /// (Prometheus) and GET /stats (JSON). Overrides the file's [admin] listen.
    #[arg(long, value_name = "ADDR", value_parser = config::parse_listen_addr)]
    pub admin: Option<ListenAddr>,

    /// Accept control commands (JSON lines) on the admin socket too: anyone
    /// who can connect to it can change the policy. Same as [admin] control = true.
    #[arg(long)]
    pub admin_control: bool,

    /// Take control commands (JSON lines, one answer line each) on the
    /// inherited file descriptor FD, a connected Unix stream socket (one end
    /// of a socketpair the embedding host keeps).
    #[arg(long, value_name = "FD")]
    pub control_fd: Option<i32>,

    /// Validate the configuration, print a summary and exit: 0 if valid, 2 if not.
    #[arg(long)]
    pub check: bool,
}

fn parse_log_format(s: &str) -> Result<LogFormat, String> {
    s.parse()
}

/// `--protocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProtocolArg {
    /// HTTP CONNECT or SOCKS5, told apart by the first byte.
    Auto,
    /// HTTP CONNECT only.
    Http,
    /// SOCKS5 only.
    Socks5,
}

impl From<ProtocolArg> for ListenerProtocol {
    fn from(p: ProtocolArg) -> Self {
        match p {
            ProtocolArg::Auto => ListenerProtocol::Auto,
            ProtocolArg::Http => ListenerProtocol::Http,
            ProtocolArg::Socks5 => ListenerProtocol::Socks5,
        }
    }
}

/// `--idle-timeout`: `None` is "off" (a newtype, as clap reads `Option<Option<_>>` specially).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdleTimeout(pub Option<Duration>);

fn parse_parent(
    s: &str,
) -> Result<std::sync::Arc<portcullis::protocol::parent::ParentProxy>, String> {
    portcullis::protocol::parent::ParentProxy::parse(s).map(std::sync::Arc::new)
}

fn parse_idle(s: &str) -> Result<IdleTimeout, String> {
    portcullis::duration::parse(s).map(IdleTimeout)
}

fn allow_rule(s: &str) -> Result<RuleConfig, String> {
    parse_cli_rule(Action::Allow, s).map_err(|e| e.to_string())
}

fn deny_rule(s: &str) -> Result<RuleConfig, String> {
    parse_cli_rule(Action::Deny, s).map_err(|e| e.to_string())
}

fn inspect_rule(s: &str) -> Result<RuleConfig, String> {
    parse_cli_inspect(s).map_err(|e| e.to_string())
}

fn terminate_rule(s: &str) -> Result<RuleConfig, String> {
    parse_cli_terminate(s).map_err(|e| e.to_string())
}

fn parse_auth(s: &str) -> Result<Credentials, String> {
    match s.split_once(':') {
        Some((user, pass)) if !user.is_empty() && !pass.is_empty() => {
            Ok(Credentials::new(user, pass))
        }
        _ => Err("expected USER:PASS, both non-empty".into()),
    }
}

/// The configuration the flags describe, ready to run.
pub struct Setup {
    /// What the proxy runs with.
    pub config: Config,
    /// Names of the policy's rules, or `None` for the built-in default alone.
    pub rules: Option<Vec<String>>,
    /// Settings that could not be honoured (srt keys), one sentence each:
    /// logged as warnings at start, printed by `--check`.
    pub warnings: Vec<String>,
}

impl Args {
    /// True when the built-in default policy alone applies: no file, no rule
    /// flags (`--allow`, `--deny`, `--inspect`, `--terminate`).
    pub fn uses_builtin_policy(&self) -> bool {
        self.config.is_none()
            && self.srt_settings.is_none()
            && self.allow.is_empty()
            && self.deny.is_empty()
            && self.inspect.is_empty()
            && self.terminate.is_empty()
    }

    /// Reads the `--config` file (if any), applies the flags over it, and
    /// compiles the policy. Called at start-up and again on every SIGHUP.
    pub fn load(&self) -> Result<Setup, ConfigError> {
        let mut file = match &self.config {
            Some(path) => ConfigFile::load(path)?,
            None => ConfigFile::default(),
        };
        if !self.listen.is_empty() {
            let protocol = self.protocol.map_or(ListenerProtocol::Auto, Into::into);
            file.listeners = Some(
                self.listen
                    .iter()
                    .map(|addr| ListenerConfig::new(addr.clone(), protocol))
                    .collect(),
            );
        }
        self.apply_auth(&mut file)?;
        let t = &mut file.timeouts;
        t.handshake = self.handshake_timeout.unwrap_or(t.handshake);
        t.connect = self.connect_timeout.unwrap_or(t.connect);
        t.idle = self.idle_timeout.map_or(t.idle, |i| i.0);
        t.keepalive = self.keepalive.map_or(t.keepalive, |k| k.0);
        t.half_close = self.half_close_timeout.unwrap_or(t.half_close);
        t.close = self.close_timeout.unwrap_or(t.close);
        if let Some(n) = self.workers {
            file.limits.workers = n;
        }
        if let Some(p) = self.upstream_proxy()? {
            file.upstream_proxy = Some(p);
        }
        let tls = &mut file.tls;
        if let Some(c) = &self.ca_cert {
            tls.ca_cert = Some(c.clone());
        }
        if let Some(k) = &self.ca_key {
            tls.ca_key = Some(k.clone());
        }
        tls.upstream_ca.extend(self.upstream_ca.iter().cloned());
        tls.ktls |= self.ktls;
        file.audit |= self.audit;
        if let Some(f) = self.log_format {
            file.log_format = f;
        }
        if let Some(addr) = &self.admin {
            let control = file.admin.as_ref().is_some_and(|a| a.control);
            let mut admin = AdminConfig::new(addr.clone());
            admin.control = control;
            file.admin = Some(admin);
        }
        if self.admin_control {
            match &mut file.admin {
                Some(a) => a.control = true,
                None => {
                    return Err(ConfigError::key(
                        "admin.control",
                        "--admin-control needs an admin endpoint: --admin ADDR, or [admin] listen in the file",
                    ))
                }
            }
        }

        if self.uses_builtin_policy() {
            let mut policy = Policy::builtin_default();
            policy.set_audit(file.audit);
            let config = file.with_policy(policy)?;
            return Ok(Setup {
                config,
                rules: None,
                warnings: Vec::new(),
            });
        }
        let mut warnings = Vec::new();
        if let Some(path) = self.srt_settings.as_ref().or(file.srt_settings.as_ref()) {
            let srt = load_srt(path)?;
            for w in &srt.warnings {
                log::warn!("{}: {w}", path.display());
            }
            warnings.extend(
                srt.warnings
                    .iter()
                    .map(|w| format!("{}: {w}", path.display())),
            );
            file.rules.extend(srt.rules);
        }
        // A flag given twice is one rule (flag rules are named after their
        // flag, and rule names are unique).
        let mut flags: Vec<&RuleConfig> = Vec::new();
        for r in self
            .allow
            .iter()
            .chain(&self.deny)
            .chain(&self.inspect)
            .chain(&self.terminate)
        {
            if !flags.contains(&r) {
                flags.push(r);
            }
        }
        file.rules.extend(flags.into_iter().cloned());
        file.default |= self.default_rule;
        let mut rules = file.rule_names();
        if file.default {
            rules.push(
                portcullis::policy::builtin_default_rule()
                    .name
                    .unwrap_or_default(),
            );
        }
        let config = file.compile()?;
        Ok(Setup {
            config,
            rules: Some(rules),
            warnings,
        })
    }
}

/// Reads srt's settings at `path` as rules; errors name the file and the key.
fn load_srt(path: &std::path::Path) -> Result<config::srt::SrtRules, ConfigError> {
    let key = "srt_settings";
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError::key(key, format!("{}: cannot read: {e}", path.display())))?;
    config::srt::map(&text, &config::srt::local_addresses())
        .map_err(|e| ConfigError::key(key, format!("{}: {e}", path.display())))
}

impl Args {
    /// `--upstream-proxy`, `--upstream-proxy-env` or `--upstream-proxy-file`.
    /// A password on the command line is readable by every local user (and
    /// by a `run` CMD) in /proc/PID/cmdline: warned about, as for --auth.
    fn upstream_proxy(
        &self,
    ) -> Result<Option<std::sync::Arc<portcullis::protocol::parent::ParentProxy>>, ConfigError>
    {
        if let Some(p) = &self.upstream_proxy {
            if p.credentials.is_some() {
                static WARNED: std::sync::Once = std::sync::Once::new();
                WARNED.call_once(|| {
                    log::warn!("--upstream-proxy puts the parent proxy's password on the command line, where any local user can read it (ps, /proc): prefer --upstream-proxy-env VAR or --upstream-proxy-file FILE");
                });
            }
            return Ok(Some(p.clone()));
        }
        let (key, url) = if let Some(var) = &self.upstream_proxy_env {
            let url = std::env::var(var)
                .map_err(|e| ConfigError::key("--upstream-proxy-env", format!("{var}: {e}")))?;
            ("--upstream-proxy-env", url)
        } else if let Some(path) = &self.upstream_proxy_file {
            let text = std::fs::read_to_string(path).map_err(|e| {
                ConfigError::key("--upstream-proxy-file", format!("{}: {e}", path.display()))
            })?;
            let line = text.lines().next().unwrap_or("").trim().to_string();
            ("--upstream-proxy-file", line)
        } else {
            return Ok(None);
        };
        // The parser's errors quote the URL without its password.
        parse_parent(url.trim())
            .map(Some)
            .map_err(|e| ConfigError::key(key, e))
    }

    /// `--auth`, `--auth-env` and `--auth-file`: any of them replaces the
    /// file's `[auth]` (its plaintext user and its `[[auth.users]]`).
    fn apply_auth(&self, file: &mut ConfigFile) -> Result<(), ConfigError> {
        let plain = match (&self.auth, &self.auth_env) {
            (Some(c), _) => {
                static WARNED: std::sync::Once = std::sync::Once::new();
                WARNED.call_once(|| {
                    log::warn!("--auth puts the password on the command line, where any local user can read it (ps, /proc): prefer --auth-env VAR or --auth-file FILE");
                });
                Some(c.clone())
            }
            (None, Some(var)) => {
                let value = std::env::var(var)
                    .map_err(|e| ConfigError::key("--auth-env", format!("{var}: {e}")))?;
                Some(
                    parse_auth(&value)
                        .map_err(|e| ConfigError::key("--auth-env", format!("{var}: {e}")))?,
                )
            }
            (None, None) => None,
        };
        let users = match &self.auth_file {
            Some(path) => {
                let in_file =
                    |e: String| ConfigError::other(format!("--auth-file {}: {e}", path.display()));
                let text = std::fs::read_to_string(path).map_err(|e| in_file(e.to_string()))?;
                Some(portcullis::auth::parse_auth_file(&text).map_err(in_file)?)
            }
            None => None,
        };
        if plain.is_some() || users.is_some() {
            file.auth = plain;
            file.users = users.unwrap_or_default();
        }
        Ok(())
    }
}

/// Renders a clap error on one line: `error: ...` without the usage, but
/// with clap's tips (`a similar argument exists: '--allow'` for `--alow`),
/// which name the fix.
pub fn one_line(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let mut parts = text.split("\n\n");
    let head = parts.next().unwrap_or(&text);
    let joined = head
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    let mut line = joined
        .strip_prefix("error: ")
        .unwrap_or(&joined)
        .to_string();
    for tip in parts
        .flat_map(str::lines)
        .map(str::trim)
        .filter(|l| l.starts_with("tip: "))
    {
        line.push_str("; ");
        line.push_str(tip);
    }
    line
}

#[cfg(test)]
#[path = "args_tests.rs"]
mod tests;
