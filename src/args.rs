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

/// portcullis: a sandbox egress proxy for HTTP CONNECT and SOCKS5, deny by default.
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

    /// Require proxy credentials (HTTP Basic and SOCKS5 username/password).
    /// Overrides the file's [auth].
    #[arg(long, value_name = "USER:PASS", value_parser = parse_auth)]
    pub auth: Option<Credentials>,

    /// Time to read and answer a client's request, e.g. 10s. [default: 10s]
    #[arg(long, value_name = "DURATION", value_parser = portcullis::duration::parse_required)]
    pub handshake_timeout: Option<Duration>,

    /// Time to resolve and connect, over all addresses. [default: 10s]
    #[arg(long, value_name = "DURATION", value_parser = portcullis::duration::parse_required)]
    pub connect_timeout: Option<Duration>,

    /// Close established tunnels idle this long; "off" never does. [default: off]
    #[arg(long, value_name = "DURATION", value_parser = parse_idle)]
    pub idle_timeout: Option<IdleTimeout>,

    /// Close half-closed tunnels (one side finished) idle this long. [default: 30s]
    #[arg(long, value_name = "DURATION", value_parser = portcullis::duration::parse_required)]
    pub half_close_timeout: Option<Duration>,

    /// Time to flush what is owed before closing. [default: 5s]
    #[arg(long, value_name = "DURATION", value_parser = portcullis::duration::parse_required)]
    pub close_timeout: Option<Duration>,

    /// Reach every allowed destination through this parent proxy:
    /// http://[USER:PASS@]HOST:PORT or socks5://... Overrides the file's
    /// `upstream_proxy`; a rule's own `upstream_proxy` still wins.
    #[arg(long, value_name = "URL", value_parser = parse_parent)]
    pub upstream_proxy: Option<std::sync::Arc<portcullis::protocol::parent::ParentProxy>>,
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
}

impl Args {
    /// True when the built-in default policy alone applies: no file, no rule
    /// flags (`--allow`, `--deny`, `--inspect`, `--terminate`).
    pub fn uses_builtin_policy(&self) -> bool {
        self.config.is_none()
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
        if let Some(auth) = &self.auth {
            file.auth = Some(auth.clone());
        }
        let t = &mut file.timeouts;
        t.handshake = self.handshake_timeout.unwrap_or(t.handshake);
        t.connect = self.connect_timeout.unwrap_or(t.connect);
        t.idle = self.idle_timeout.map_or(t.idle, |i| i.0);
        t.half_close = self.half_close_timeout.unwrap_or(t.half_close);
        t.close = self.close_timeout.unwrap_or(t.close);
        if let Some(p) = &self.upstream_proxy {
            file.upstream_proxy = Some(p.clone());
        }
        let tls = &mut file.tls;
        if let Some(c) = &self.ca_cert {
            tls.ca_cert = Some(c.clone());
        }
        if let Some(k) = &self.ca_key {
            tls.ca_key = Some(k.clone());
        }
        tls.upstream_ca.extend(self.upstream_ca.iter().cloned());
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
            });
        }
        file.rules.extend(self.allow.iter().cloned());
        file.rules.extend(self.deny.iter().cloned());
        file.rules.extend(self.inspect.iter().cloned());
        file.rules.extend(self.terminate.iter().cloned());
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
        })
    }
}

/// Renders a clap error on one line: `error: ...` without usage or tips.
pub fn one_line(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let head = text.split("\n\n").next().unwrap_or(&text);
    let joined = head
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    joined
        .strip_prefix("error: ")
        .unwrap_or(&joined)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Result<Args, clap::Error> {
        Args::try_parse_from(std::iter::once("portcullis").chain(args.iter().copied()))
    }

    #[test]
    fn help_is_consistent() {
        Args::command().debug_assert();
    }

    #[test]
    fn no_arguments_means_builtin_policy() {
        let a = parse(&[]).unwrap();
        assert!(a.uses_builtin_policy());
        assert!(!a.check);
    }

    #[test]
    fn flags_parse() {
        let a = parse(&[
            "--listen",
            "127.0.0.1:0",
            "-l",
            "unix:/tmp/p.sock",
            "--protocol",
            "socks5",
            "--auth",
            "user:pa:ss",
            "--handshake-timeout",
            "3s",
            "--connect-timeout",
            "250ms",
            "--idle-timeout",
            "off",
            "--close-timeout",
            "1m",
            "--check",
        ])
        .unwrap();
        assert_eq!(a.listen.len(), 2);
        assert_eq!(a.listen[1], ListenAddr::Unix("/tmp/p.sock".into()));
        assert_eq!(a.protocol, Some(ProtocolArg::Socks5));
        let auth = a.auth.clone().unwrap();
        assert_eq!(
            (auth.username.as_str(), auth.password.as_str()),
            ("user", "pa:ss")
        );
        assert_eq!(a.handshake_timeout, Some(Duration::from_secs(3)));
        assert_eq!(a.connect_timeout, Some(Duration::from_millis(250)));
        assert_eq!(a.idle_timeout, Some(IdleTimeout(None)));
        assert_eq!(a.close_timeout, Some(Duration::from_secs(60)));
        assert!(a.check);
        assert!(a.uses_builtin_policy());
    }

    #[test]
    fn bad_flags_are_rejected_on_one_line() {
        for bad in [
            &["--listen", "nowhere"][..],
            &["--protocol", "http"],
            &["--listen", "127.0.0.1:1", "--protocol", "socks4"],
            &["--auth", "nopassword"],
            &["--connect-timeout", "off"],
            &["--idle-timeout", "soon"],
            &["--inspect", ""],
            &["--inspect", "example.com:0"],
            &["--bogus"],
        ] {
            let e = parse(bad).expect_err("should fail");
            let line = one_line(&e);
            assert!(
                !line.contains('\n') && !line.is_empty(),
                "{bad:?}: {line:?}"
            );
            assert!(!line.starts_with("error:"), "{line}");
            assert_eq!(e.exit_code(), 2, "{bad:?}");
        }
    }

    #[test]
    fn flags_override_the_file_timeouts_listeners_and_auth() {
        let a = parse(&[
            "--listen",
            "127.0.0.1:0",
            "--protocol",
            "http",
            "--idle-timeout",
            "30s",
            "--auth",
            "a:b",
        ])
        .unwrap();
        // The built-in policy path: needs Policy::builtin_default (policy branch).
        let s = a.load().unwrap();
        assert!(s.rules.is_none());
        assert_eq!(
            s.config.listeners,
            vec![ListenerConfig::new(
                ListenAddr::Tcp("127.0.0.1:0".parse().unwrap()),
                ListenerProtocol::Http,
            )]
        );
        assert_eq!(s.config.timeouts.idle, Some(Duration::from_secs(30)));
        assert_eq!(s.config.auth.unwrap().username, "a");
    }

    #[test]
    fn rule_flags_replace_the_builtin_policy() {
        // Needs parse_cli_rule and Policy::from_rules (policy branch).
        let a = parse(&["--allow", "example.com:443", "--deny", "10.0.0.0/8"]).unwrap();
        assert!(!a.uses_builtin_policy());
        let s = a.load().unwrap();
        assert_eq!(s.rules.map(|r| r.len()), Some(2));
    }

    #[test]
    fn inspect_flags_are_rule_flags() {
        let a = parse(&["--inspect", "api.example.com:8080", "--inspect", "10.1.2.3"]).unwrap();
        assert!(!a.uses_builtin_policy());
        assert_eq!(a.inspect.len(), 2);
        let r = &a.inspect[0];
        assert_eq!(r.name.as_deref(), Some("--inspect api.example.com:8080"));
        assert_eq!(r.action, Action::Allow);
        assert_eq!(r.inspect.as_deref(), Some("http"));
        assert!(r.requests.is_empty());
        let s = a.load().unwrap();
        assert_eq!(
            s.rules,
            Some(vec![
                "--inspect api.example.com:8080".to_string(),
                "--inspect 10.1.2.3".to_string()
            ])
        );
    }

    #[test]
    fn inspect_rules_follow_allow_and_deny() {
        let a = parse(&[
            "--inspect",
            "a.example:80",
            "--deny",
            "b.example",
            "--allow",
            "c.example",
        ])
        .unwrap();
        let names = a.load().unwrap().rules.unwrap();
        assert_eq!(
            names,
            [
                "--allow c.example",
                "--deny b.example",
                "--inspect a.example:80"
            ]
        );
    }

    #[test]
    fn default_adds_the_builtin_rule_to_the_given_ones() {
        let a = parse(&["--default", "--deny", "*.tracker.test"]).unwrap();
        assert!(!a.uses_builtin_policy());
        let s = a.load().unwrap();
        assert_eq!(
            s.rules,
            Some(vec![
                "--deny *.tracker.test".to_string(),
                "default-public-web".to_string()
            ])
        );
        assert_eq!(s.config.policy.len(), 2);
        // Alone, it is the built-in default.
        let a = parse(&["--default"]).unwrap();
        assert!(a.uses_builtin_policy());
        assert_eq!(a.load().unwrap().rules, None);
        // Without it, rule flags replace the default.
        let s = parse(&["--deny", "*.tracker.test"])
            .unwrap()
            .load()
            .unwrap();
        assert_eq!(s.config.policy.len(), 1);
    }

    #[test]
    fn audit_flag_sets_the_policy_mode() {
        for args in [&["--audit"][..], &["--audit", "--allow", "a.test"]] {
            let s = parse(args).unwrap().load().unwrap();
            assert!(s.config.policy.is_audit(), "{args:?}");
        }
        assert!(!parse(&[]).unwrap().load().unwrap().config.policy.is_audit());
    }

    #[test]
    fn terminate_and_tls_flags() {
        let a = parse(&[
            "--terminate",
            "api.test:443",
            "--ca-cert",
            "ca.pem",
            "--ca-key",
            "ca.key",
            "--upstream-ca",
            "a.pem",
            "--upstream-ca",
            "b.pem",
        ])
        .unwrap();
        assert!(!a.uses_builtin_policy());
        assert_eq!(
            a.terminate[0].name.as_deref(),
            Some("--terminate api.test:443")
        );
        let s = a.load().unwrap();
        assert_eq!(s.config.policy.inspected_names(), ["api.test"]);
        let tls = &s.config.tls;
        assert_eq!(tls.ca_cert.as_deref(), Some(std::path::Path::new("ca.pem")));
        assert_eq!(tls.ca_key.as_deref(), Some(std::path::Path::new("ca.key")));
        assert_eq!(tls.upstream_ca.len(), 2);
        // Both or neither.
        let e = parse(&["--ca-cert", "ca.pem"])
            .unwrap()
            .load()
            .err()
            .expect("invalid");
        assert_eq!(e.key_name(), Some("tls.ca_cert"));
    }

    #[test]
    fn admin_log_format_and_control_flags() {
        let a = parse(&[
            "--admin",
            "127.0.0.1:0",
            "--admin-control",
            "--log-format",
            "json",
            "--control-fd",
            "3",
        ])
        .unwrap();
        assert_eq!(a.log_format, Some(LogFormat::Json));
        assert_eq!(a.control_fd, Some(3));
        let s = a.load().unwrap();
        let admin = s.config.admin.unwrap();
        assert_eq!(
            admin.listen,
            ListenAddr::Tcp("127.0.0.1:0".parse().unwrap())
        );
        assert!(admin.control);
        assert_eq!(s.config.log_format, LogFormat::Json);
        let e = parse(&["--admin-control"])
            .unwrap()
            .load()
            .err()
            .expect("needs --admin");
        assert_eq!(e.key_name(), Some("admin.control"));
        assert!(parse(&["--log-format", "xml"]).is_err());
        assert!(parse(&["--admin", "nowhere"]).is_err());
        assert_eq!(parse(&[]).unwrap().load().unwrap().config.admin, None);
    }

    #[test]
    fn rule_flag_mistakes_read_plainly() {
        for (args, want) in [
            (
                &["--allow", "https://github.com"][..],
                "rule \"--allow https://github.com\": a rule takes a host, not a URL: use github.com:443",
            ),
            (
                &["--inspect", "http://api.test/v1"],
                "a rule takes a host, not a URL: use api.test:80",
            ),
            (&["--deny", "example.com:70000"], "port 70000 is out of range (1-65535)"),
            (&["--allow", "10.0.0.1/8"], "use 10.0.0.0/8"),
            (&["--terminate", "[::1]:99999"], "port 99999 is out of range (1-65535)"),
        ] {
            let line = one_line(&parse(args).expect_err("should fail"));
            assert!(line.contains(want), "{args:?}: {line}");
            assert!(!line.contains('\n'), "{line}");
        }
    }
}
