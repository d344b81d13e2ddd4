//! Command-line flags, and how they combine with the configuration file.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use portcullis::config::{self, ConfigError, ConfigFile};
use portcullis::policy::{parse_cli_inspect, parse_cli_rule, Action, RuleConfig};
use portcullis::{Config, Credentials, ListenAddr, ListenerConfig, ListenerProtocol, Policy};

const AFTER_HELP: &str = "\
Policy: with no --config and no --allow/--deny/--inspect, the built-in default
applies (public internet on ports 80 and 443; private, loopback and other
special ranges refused). Otherwise the policy is exactly the file's [[rules]]
plus the --allow/--deny/--inspect rules, and everything else is denied.

Examples:
  portcullis
  portcullis --allow github.com:443 --allow '*.github.com:443'
  portcullis --config portcullis.toml --listen unix:/tmp/portcullis.sock
  portcullis --config portcullis.toml --check
  portcullis --inspect example.com:80

  curl -x http://127.0.0.1:3128 http://example.com/

  curl -p -x http://127.0.0.1:3128 https://example.com
  curl -x socks5h://127.0.0.1:3128 https://example.com

Signals: SIGHUP reloads the policy (--config file plus the rule flags);
SIGUSR1 logs the counters; SIGTERM/SIGINT shut down.
Logging: RUST_LOG (default: info).";

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

    /// Validate the configuration, print a summary and exit: 0 if valid, 2 if not.
    #[arg(long)]
    pub check: bool,
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

fn parse_idle(s: &str) -> Result<IdleTimeout, String> {
    portcullis::duration::parse(s).map(IdleTimeout)
}

fn allow_rule(s: &str) -> Result<RuleConfig, String> {
    parse_cli_rule(Action::Allow, s).map_err(|e| e.0)
}

fn deny_rule(s: &str) -> Result<RuleConfig, String> {
    parse_cli_rule(Action::Deny, s).map_err(|e| e.0)
}

fn inspect_rule(s: &str) -> Result<RuleConfig, String> {
    parse_cli_inspect(s).map_err(|e| e.0)
}

fn parse_auth(s: &str) -> Result<Credentials, String> {
    match s.split_once(':') {
        Some((user, pass)) if !user.is_empty() && !pass.is_empty() => Ok(Credentials {
            username: user.into(),
            password: pass.into(),
        }),
        _ => Err("expected USER:PASS, both non-empty".into()),
    }
}

/// The configuration the flags describe, ready to run.
pub struct Setup {
    /// What the proxy runs with.
    pub config: Config,
    /// Names of the policy's rules, or `None` for the built-in default.
    pub rules: Option<Vec<String>>,
}

impl Args {
    /// True when the built-in default policy applies: no file, no rule flags
    /// (`--allow`, `--deny`, `--inspect`).
    pub fn uses_builtin_policy(&self) -> bool {
        self.config.is_none()
            && self.allow.is_empty()
            && self.deny.is_empty()
            && self.inspect.is_empty()
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

        if self.uses_builtin_policy() {
            let config = file.with_policy(Policy::builtin_default())?;
            return Ok(Setup {
                config,
                rules: None,
            });
        }
        file.rules.extend(self.allow.iter().cloned());
        file.rules.extend(self.deny.iter().cloned());
        file.rules.extend(self.inspect.iter().cloned());
        let rules = file.rule_names();
        let config = file.compile()?;
        Ok(Setup {
            config,
            rules: Some(rules),
        })
    }
}

impl Setup {
    /// `--check`: what would run, one item a line.
    pub fn summary(&self, args: &Args) -> String {
        use std::fmt::Write;
        let c = &self.config;
        let mut s = String::new();
        let _ = match &args.config {
            Some(p) => writeln!(s, "configuration OK: {}", p.display()),
            None => writeln!(s, "configuration OK (no --config file)"),
        };
        for l in &c.listeners {
            let _ = writeln!(s, "listen: {} ({:?})", l.addr, l.protocol);
            if matches!(l.addr, ListenAddr::Unix(_)) {
                let group = match &l.unix.group {
                    None => "the process's".to_string(),
                    Some(g) => match g.gid() {
                        Ok(gid) => format!("{g} (gid {gid})"),
                        Err(e) => format!("{g} ({e} here)"),
                    },
                };
                let _ = writeln!(s, "  socket file: mode {:04o}, group {group}", l.unix.mode);
            }
        }
        let _ = match &self.rules {
            None => writeln!(
                s,
                "policy: built-in default (public internet on ports 80 and 443)"
            ),
            Some(names) if names.is_empty() => {
                writeln!(s, "policy: no rules (every destination is denied)")
            }
            Some(names) => writeln!(s, "policy: {} rules: {}", names.len(), names.join(", ")),
        };
        let t = &c.timeouts;
        let idle = t.idle.map_or_else(|| "off".into(), |d| format!("{d:?}"));
        let _ = writeln!(
            s,
            "timeouts: handshake {:?}, connect {:?}, idle {idle}, close {:?}",
            t.handshake, t.connect, t.close
        );
        let l = &c.limits;
        let _ = writeln!(
            s,
            "limits: max_head_bytes {}, buffer_size {}, resolver_threads {}",
            l.max_head_bytes, l.buffer_size, l.resolver_threads
        );
        let _ = writeln!(s, "{}", session_limits(l));
        let _ = match &c.auth {
            Some(a) => writeln!(s, "auth: required (user {:?})", a.username),
            None => writeln!(s, "auth: none"),
        };
        s
    }
}

/// The session limits in force, and the open-file limit the defaults are
/// sized to (an explicit value in the file wins over its default).
fn session_limits(l: &portcullis::Limits) -> String {
    use nix::sys::resource::{getrlimit, Resource, RLIM_INFINITY};
    let nofile = match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((RLIM_INFINITY, _)) => "unlimited".to_string(),
        Ok((soft, _)) => soft.to_string(),
        Err(e) => format!("unknown ({e})"),
    };
    format!(
        "sessions: max_sessions {}, max_sessions_per_client {}, max_pending_handshakes {}, max_pending_handshakes_per_client {} (defaults sized to an open file limit of {nofile})",
        l.max_sessions,
        l.max_sessions_per_client,
        l.max_pending_handshakes,
        l.max_pending_handshakes_per_client
    )
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
}
