//! The file as written: the full example, defaults, the documented example (docs/configuration.md),
//! `[admin]` and the log format, a policy given beside the file.

use super::*;
use crate::policy::{Action, PortSpec};

const FULL: &str = r#"
[[listen]]
address = "127.0.0.1:3128"
protocol = "auto"

[[listen]]
address = "[::1]:3129"
protocol = "socks5"

[[listen]]
address = "unix:/run/portcullis.sock"
protocol = "http"

[auth]
username = "agent"
password = "s3cret"

[timeouts]
handshake = "5s"
connect = "250ms"
idle = "off"
close = 2

[limits]
max_head_bytes = 16384
buffer_size = 131072
resolver_threads = 4

[[rules]]
name = "github"
action = "allow"
hosts = ["github.com", "*.github.com"]
ports = [443]

[[rules]]
action = "deny"
cidr = "10.0.0.0/8"
port = "1-1024"
idle_timeout = "30s"
"#;

#[test]
fn full_example_parses() {
    let f = ConfigFile::parse(FULL).expect("parses");
    assert_eq!(
        f.listeners,
        Some(vec![
            ListenerConfig::new(
                ListenAddr::Tcp("127.0.0.1:3128".parse().unwrap()),
                ListenerProtocol::Auto
            ),
            ListenerConfig::new(
                ListenAddr::Tcp("[::1]:3129".parse().unwrap()),
                ListenerProtocol::Socks5
            ),
            ListenerConfig::new(
                ListenAddr::Unix(PathBuf::from("/run/portcullis.sock")),
                ListenerProtocol::Http
            ),
        ])
    );
    assert_eq!(
        f.auth,
        Some(Credentials {
            username: "agent".into(),
            password: "s3cret".into()
        })
    );
    assert_eq!(
        f.timeouts,
        Timeouts {
            handshake: Duration::from_secs(5),
            connect: Duration::from_millis(250),
            idle: None,
            close: Duration::from_secs(2),
            ..Timeouts::default()
        }
    );
    assert_eq!(
        f.limits,
        Limits {
            max_head_bytes: 16384,
            buffer_size: 131072,
            resolver_threads: 4,
            ..Limits::default()
        }
    );
    assert_eq!(f.rules.len(), 2);
    assert_eq!(f.rules[0].action, Action::Allow);
    assert_eq!(f.rules[0].hosts, vec!["github.com", "*.github.com"]);
    assert_eq!(f.rules[0].ports, vec![PortSpec::Number(443)]);
    assert_eq!(f.rules[1].action, Action::Deny);
    assert_eq!(f.rules[1].cidr.as_deref(), Some("10.0.0.0/8"));
    assert_eq!(f.rules[1].port, Some(PortSpec::Text("1-1024".into())));
    assert_eq!(f.rules[1].idle_timeout.as_deref(), Some("30s"));
    assert_eq!(f.rule_names(), vec!["github", "rules[1]"]);
}

/// Needs `Policy::from_rules` (policy branch).
#[test]
fn full_example_compiles_into_a_config() {
    let c = Config::from_toml_str(FULL).expect("valid");
    assert_eq!(c.listeners.len(), 3);
    assert_eq!(c.limits.resolver_threads, 4);
    assert!(c.auth.is_some());
}

/// Needs `Policy::from_rules` (policy branch).
#[test]
fn empty_file_gets_defaults_and_compiles() {
    let c = Config::from_toml_str("").expect("valid");
    assert_eq!(c.listeners, Config::default().listeners);
    assert_eq!(c.timeouts, Timeouts::default());
    assert_eq!(c.limits, Limits::default());
    assert_eq!(c.auth, None);
}

#[test]
fn missing_sections_take_defaults() {
    let f = ConfigFile::parse("").expect("empty file is fine");
    assert_eq!(f.listeners, None);
    assert_eq!(f.auth, None);
    assert_eq!(f.timeouts, Timeouts::default());
    assert_eq!(f.limits, Limits::default());
    assert!(f.rules.is_empty());

    let f = ConfigFile::parse("[timeouts]\nidle = \"5m\"\n[limits]\nbuffer_size = 8192\n").unwrap();
    assert_eq!(f.timeouts.idle, Some(Duration::from_secs(300)));
    assert_eq!(f.timeouts.handshake, Timeouts::default().handshake);
    assert_eq!(f.limits.buffer_size, 8192);
    assert_eq!(f.limits.max_head_bytes, Limits::default().max_head_bytes);
}

#[test]
fn readme_example_parses() {
    let readme = include_str!("../../../docs/configuration.md");
    let start = readme
        .find("```toml\n")
        .expect("docs/configuration.md has a TOML example")
        + 8;
    let end = start + readme[start..].find("```").expect("closed");
    let f = ConfigFile::parse(&readme[start..end]).expect("the documented example parses");
    assert_eq!(f.listeners.as_ref().map(Vec::len), Some(2));
    assert!(f.auth.is_some());
    assert_eq!(
        f.rule_names(),
        vec![
            "github",
            "python-packages",
            "build-cache",
            "mirror",
            "deploy-api",
            "api",
            "api-tls",
            "trial",
            "no-metadata"
        ]
    );
    assert!(!f.default && !f.audit);
    assert_eq!(f.tls.upstream_ca, [PathBuf::from("corp-root.pem")]);
    assert_eq!(f.log_format, crate::config::LogFormat::Text);
    assert_eq!(
        f.admin.as_ref().map(|a| (a.listen.to_string(), a.control)),
        Some(("127.0.0.1:9090".to_string(), false))
    );
    assert_eq!(f.users.len(), 1);
    assert!(f.users[0].hash.verify(b"correct horse battery staple"));
    let c = f.compile().expect("the documented example compiles");
    assert_eq!(c.user_names(), ["agent", "alice"]);
    assert_eq!(c.policy.inspected_names(), ["api.example.com"]);
    assert!(c.policy.warnings().is_empty(), "{:?}", c.policy.warnings());
}

#[test]
fn admin_and_log_format_keys() {
    let f = ConfigFile::parse(
        "log_format = \"json\"\n[admin]\nlisten = \"unix:/tmp/admin.sock\"\ncontrol = true\n",
    )
    .unwrap();
    assert_eq!(f.log_format, crate::config::LogFormat::Json);
    let c = f.compile().unwrap();
    let admin = c.admin.unwrap();
    assert_eq!(admin.listen, ListenAddr::Unix("/tmp/admin.sock".into()));
    assert!(admin.control);
    assert_eq!(c.log_format, crate::config::LogFormat::Json);
    assert!(ConfigFile::parse("").unwrap().admin.is_none());
    for (text, want) in [
        ("log_format = \"xml\"", "log_format"),
        ("[admin]\nlisten = \"nowhere\"", "admin.listen"),
        ("[admin]\ncontrol = true", "listen"),
        ("[admin]\nlisten = \"127.0.0.1:1\"\nport = 2", "port"),
    ] {
        let e = err(text);
        assert!(e.contains(want), "{text}: {e}");
    }
    let same = "[[listen]]\naddress = \"127.0.0.1:7000\"\n[admin]\nlisten = \"127.0.0.1:7000\"\n";
    let e = ConfigFile::parse(same).unwrap().compile().unwrap_err();
    assert_eq!(e.key_name(), Some("admin.listen"));
}

#[test]
fn with_policy_validates_and_names_the_file() {
    let mut f = ConfigFile::parse("[limits]\nresolver_threads = 0\n").unwrap();
    f.path = Some(PathBuf::from("p.toml"));
    let e = f.with_policy(Policy::default()).unwrap_err();
    assert_eq!(e.path(), Some(Path::new("p.toml")));
    assert_eq!(e.key_name(), Some("limits.resolver_threads"));

    let c = ConfigFile::parse("")
        .unwrap()
        .with_policy(Policy::default())
        .unwrap();
    assert_eq!(c.listeners, vec![default_listener()]);
}
