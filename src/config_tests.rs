//! Unit tests for the configuration file (`src/config.rs`).

use super::*;
use std::sync::Arc;

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
fn listener_protocol_defaults_to_auto() {
    let f = ConfigFile::parse("[[listen]]\naddress = \"0.0.0.0:8080\"\n").unwrap();
    assert_eq!(
        f.listeners.unwrap(),
        vec![ListenerConfig::new(
            ListenAddr::Tcp("0.0.0.0:8080".parse().unwrap()),
            ListenerProtocol::Auto
        )]
    );
}

fn err(text: &str) -> String {
    ConfigFile::parse(text)
        .expect_err("should fail")
        .to_string()
}

#[test]
fn unknown_keys_are_rejected_by_name() {
    let e = err("[limits]\nbuffer_size = 8192\nbogus_limit = 1\n");
    assert!(e.contains("bogus_limit"), "{e}");
    assert!(e.contains("line 3"), "{e}");
    let e = err("colour = \"blue\"\n");
    assert!(e.contains("colour"), "{e}");
    let e = err("[[listen]]\naddress = \"127.0.0.1:1\"\nproto = \"http\"\n");
    assert!(e.contains("proto"), "{e}");
    let e = err("[[rules]]\naction = \"allow\"\nhostz = [\"a\"]\n");
    assert!(e.contains("hostz"), "{e}");
    let e = err("[auth]\nusername = \"a\"\npassword = \"b\"\ntoken = \"c\"\n");
    assert!(e.contains("token"), "{e}");
}

#[test]
fn errors_are_one_line() {
    let e = err("[limits\n");
    assert!(!e.contains('\n'), "{e:?}");
    let e = err("[limits]\nbogus = 1\n");
    assert!(!e.contains('\n'), "{e:?}");
}

#[test]
fn bad_durations_name_their_key() {
    let e = err("[timeouts]\nconnect = \"ten seconds\"\n");
    assert!(e.starts_with("timeouts.connect: "), "{e}");
    let e = err("[timeouts]\nidle = \"5y\"\n");
    assert!(e.starts_with("timeouts.idle: "), "{e}");
    let e = err("[timeouts]\nhandshake = \"off\"\n");
    assert!(e.starts_with("timeouts.handshake: "), "{e}");
    let e = err("[timeouts]\nclose = 0\n");
    assert!(e.starts_with("timeouts.close: "), "{e}");
    // idle may be off, by word or by zero.
    assert_eq!(
        ConfigFile::parse("[timeouts]\nidle = 0\n")
            .unwrap()
            .timeouts
            .idle,
        None
    );
    assert_eq!(
        ConfigFile::parse("[timeouts]\nidle = \"2h\"\n")
            .unwrap()
            .timeouts
            .idle,
        Some(Duration::from_secs(7200))
    );
}

#[test]
fn bad_listeners_name_their_key() {
    let e = err("[[listen]]\naddress = \"localhost\"\n");
    assert!(e.starts_with("listen[0].address: "), "{e}");
    let e = err("[[listen]]\naddress = \"127.0.0.1:1\"\n[[listen]]\naddress = \"unix:\"\n");
    assert!(e.starts_with("listen[1].address: "), "{e}");
    let e = err("[[listen]]\naddress = \"127.0.0.1:1\"\nprotocol = \"socks4\"\n");
    assert!(e.starts_with("listen[0].protocol: "), "{e}");
}

#[test]
fn unix_listener() {
    let f = ConfigFile::parse("[[listen]]\naddress = \"unix:/tmp/p.sock\"\n").unwrap();
    let l = f.listeners.unwrap();
    assert_eq!(l[0].addr, ListenAddr::Unix(PathBuf::from("/tmp/p.sock")));
    assert_eq!(l[0].addr.to_string(), "unix:/tmp/p.sock");
}

#[test]
fn listen_addr_parsing() {
    assert_eq!(
        parse_listen_addr("127.0.0.1:3128"),
        Ok(ListenAddr::Tcp("127.0.0.1:3128".parse().unwrap()))
    );
    assert_eq!(
        parse_listen_addr("[::1]:0"),
        Ok(ListenAddr::Tcp("[::1]:0".parse().unwrap()))
    );
    assert_eq!(
        parse_listen_addr("unix:relative.sock"),
        Ok(ListenAddr::Unix(PathBuf::from("relative.sock")))
    );
    assert!(parse_listen_addr("unix:").is_err());
    assert!(parse_listen_addr("127.0.0.1").is_err());
    assert!(parse_listen_addr("::1:3128").is_err());
    assert!(parse_listen_addr("example.com:80").is_err());
}

#[test]
fn protocol_parsing() {
    assert_eq!("auto".parse(), Ok(ListenerProtocol::Auto));
    assert_eq!("HTTP".parse(), Ok(ListenerProtocol::Http));
    assert_eq!("socks5".parse(), Ok(ListenerProtocol::Socks5));
    assert!("socks4".parse::<ListenerProtocol>().is_err());
}

/// A config with an empty policy, so validation tests need no policy code.
fn valid() -> Config {
    Config {
        listeners: vec![default_listener()],
        policy: Policy::default(),
        timeouts: Timeouts::default(),
        limits: Limits::default(),
        auth: None,
        users: Vec::new(),
        tls: TlsConfig::default(),
        upstream_proxy: None,
        admin: None,
        log_format: crate::config::LogFormat::Text,
    }
}

fn invalid_key(c: &Config) -> String {
    c.validate()
        .expect_err("should be invalid")
        .key_name()
        .expect("names a key")
        .to_string()
}

#[test]
fn validation_names_the_key() {
    assert_eq!(valid().validate(), Ok(()));

    let mut c = valid();
    c.limits.buffer_size = 4095;
    assert_eq!(invalid_key(&c), "limits.buffer_size");
    c.limits.buffer_size = MAX_BUFFER_SIZE + 1;
    assert_eq!(invalid_key(&c), "limits.buffer_size");
    c.limits.buffer_size = MIN_BUFFER_SIZE;
    assert_eq!(c.validate(), Ok(()));
    c.limits.buffer_size = MAX_BUFFER_SIZE;
    assert_eq!(c.validate(), Ok(()));

    let mut c = valid();
    c.limits.max_head_bytes = 1023;
    assert_eq!(invalid_key(&c), "limits.max_head_bytes");

    let mut c = valid();
    c.limits.resolver_threads = 0;
    assert_eq!(invalid_key(&c), "limits.resolver_threads");
    c.limits.resolver_threads = 65;
    assert_eq!(invalid_key(&c), "limits.resolver_threads");
    c.limits.resolver_threads = 64;
    assert_eq!(c.validate(), Ok(()));

    let mut c = valid();
    c.listeners.clear();
    assert_eq!(invalid_key(&c), "listen");

    let mut c = valid();
    c.timeouts.connect = Duration::ZERO;
    assert_eq!(invalid_key(&c), "timeouts.connect");
    let mut c = valid();
    c.timeouts.idle = Some(Duration::ZERO);
    assert_eq!(invalid_key(&c), "timeouts.idle");

    let mut c = valid();
    c.auth = Some(Credentials {
        username: String::new(),
        password: "x".into(),
    });
    assert_eq!(invalid_key(&c), "auth.username");
    c.auth = Some(Credentials {
        username: "a:b".into(),
        password: "x".into(),
    });
    assert_eq!(invalid_key(&c), "auth.username");
    c.auth = Some(Credentials {
        username: "a".into(),
        password: "x".repeat(256),
    });
    assert_eq!(invalid_key(&c), "auth.password");
}

#[test]
fn error_display_has_file_and_key() {
    let e = ConfigError::key("limits.buffer_size", "too big").in_file("/etc/p.toml");
    assert_eq!(e.to_string(), "/etc/p.toml: limits.buffer_size: too big");
    assert_eq!(e.path(), Some(Path::new("/etc/p.toml")));
}

#[test]
fn load_names_the_file() {
    let dir = std::env::temp_dir().join(format!("portcullis-config-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.toml");
    std::fs::write(&path, "[limits]\nbuffer_size = \"big\"\n").unwrap();
    let e = ConfigFile::load(&path).unwrap_err();
    assert_eq!(e.path(), Some(path.as_path()));
    assert!(
        e.to_string().starts_with(&format!("{}: ", path.display())),
        "{e}"
    );

    let e = ConfigFile::load(dir.join("missing.toml")).unwrap_err();
    assert!(e.to_string().contains("cannot read"), "{e}");

    std::fs::write(&path, "[limits]\nbuffer_size = 8192\n").unwrap();
    let f = ConfigFile::load(&path).unwrap();
    assert_eq!(f.path.as_deref(), Some(path.as_path()));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn readme_example_parses() {
    let readme = include_str!("../README.md");
    let start = readme.find("```toml\n").expect("README has a TOML example") + 8;
    let end = start + readme[start..].find("```").expect("closed");
    let f = ConfigFile::parse(&readme[start..end]).expect("README example parses");
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
    let c = f.compile().expect("README example compiles");
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

/// Compiles `text` and returns the error as printed.
fn compile_err(text: &str) -> String {
    ConfigFile::parse(text)
        .and_then(ConfigFile::compile)
        .expect_err("should fail")
        .to_string()
}

const RULES: &str = r#"# three rules
[[rules]]
name = "ok"
action = "allow"
host = "example.com"

[[rules]]
action = "allow"
hosts = ["a.test"]

[[rules]]
name = "build-cache"
action = "allow"
cidr = "10.20.0.0/33"
"#;

#[test]
fn semantic_errors_carry_line_and_column() {
    assert_eq!(
        compile_err(RULES),
        "rules[2].cidr: line 14, column 8: \"10.20.0.0/33\": prefix length /33 too long \
         (at most /32 for 10.20.0.0) (rule \"build-cache\")"
    );
    let e = ConfigFile::parse(RULES).unwrap().compile().unwrap_err();
    assert_eq!(e.key_name(), Some("rules[2].cidr"));
    assert_eq!(e.location(), Some((14, 8)));
    // List elements, and keys of inline tables.
    let e = compile_err(&RULES.replace(
        "cidr = \"10.20.0.0/33\"",
        "cidrs = [\"10.0.0.0/8\", \"10.0.0.1/8\"]",
    ));
    assert!(
        e.starts_with("rules[2].cidrs[1]: line 14, column 24: \"10.0.0.1/8\": 10.0.0.1/8 has host bits set: use 10.0.0.0/8"),
        "{e}"
    );
    let e = compile_err(&RULES.replace(
        "cidr = \"10.20.0.0/33\"",
        "host = \"x.test\"\ninspect = \"http\"\nrequests = [{ action = \"allow\", path = \"/ok\" }, { action = \"deny\", path = \"nope\" }]",
    ));
    assert!(
        e.starts_with("rules[2].requests[1].path: line 16, column 75: "),
        "{e}"
    );
    let e = compile_err(&RULES.replace("hosts = [\"a.test\"]", "hosts = [\"https://a.test/x\"]"));
    assert!(
        e.starts_with("rules[1].hosts[0]: line 9, column 10: \"https://a.test/x\": a rule takes a host, not a URL: use a.test:443"),
        "{e}"
    );
    let e = compile_err(&RULES.replace("host = \"example.com\"", "host = \"github.com:443\""));
    assert!(
        e.starts_with("rules[0].host: line 5, column 8: \"github.com:443\": a host has no port: give \"github.com\", and the port as port = 443 (or in ports)"),
        "{e}"
    );
    let e = compile_err(
        &RULES
            .replace("name = \"build-cache\"", "name = \"ok\"")
            .replace("/33", "/16"),
    );
    assert!(
        e.starts_with("rules[2].name: line 12, column 8: \"ok\" names an earlier rule too"),
        "{e}"
    );
    // A whole rule: the table.
    let e = compile_err("[[rules]]\naction = \"allow\"\n");
    assert!(e.starts_with("rules[0]: line "), "{e}");
    assert!(e.ends_with("a rule needs at least one host or cidr"), "{e}");
    // Limits, timeouts, listeners and tls keys too.
    let e = compile_err("\n[limits]\nbuffer_size = 10\n");
    assert!(
        e.starts_with("limits.buffer_size: line 3, column 15: 10 is out of range"),
        "{e}"
    );
    let e = err("[timeouts]\n\nconnect = \"soon\"\n");
    assert!(
        e.starts_with("timeouts.connect: line 3, column 11: "),
        "{e}"
    );
    let e = err("[[listen]]\naddress = \"127.0.0.1:1\"\n[[listen]]\naddress = \"nowhere\"\n");
    assert!(
        e.starts_with("listen[1].address: line 4, column 11: "),
        "{e}"
    );
}

#[test]
fn bad_ports_read_plainly_with_their_position() {
    let e = err("[[rules]]\naction = \"allow\"\nhost = \"x\"\nports = [443, 70000]\n");
    assert!(e.contains("line 4, column 15"), "{e}");
    assert!(e.contains("port 70000 is out of range (1-65535)"), "{e}");
    assert!(!e.contains("untagged"), "{e}");
    let e = compile_err("[[rules]]\naction = \"allow\"\nhost = \"x\"\nport = \"99999\"\n");
    assert_eq!(
        e,
        "rules[0].port: line 4, column 8: port 99999 is out of range (1-65535)"
    );
}

#[test]
fn cli_rules_after_the_files_are_named_by_their_flag() {
    let mut f = ConfigFile::parse(
        RULES
            .split("[[rules]]\nname = \"build-cache\"")
            .next()
            .unwrap(),
    )
    .unwrap();
    let mut bad = crate::policy::parse_cli_rule(Action::Allow, "ok.test").unwrap();
    bad.cidr = Some("10.0.0.1/8".into());
    f.rules.push(bad);
    let e = f.compile().unwrap_err();
    assert_eq!(e.key_name(), None);
    assert_eq!(e.location(), None);
    assert!(
        e.to_string()
            .starts_with("rule \"--allow ok.test\": cidr: "),
        "{e}"
    );
}

#[test]
fn default_and_audit_at_the_top_of_the_file() {
    let f = ConfigFile::parse(
        "default = true\nmode = \"audit\"\n[[rules]]\naction = \"deny\"\nhost = \"evil.test\"\n",
    )
    .unwrap();
    assert!(f.default && f.audit);
    let c = f.compile().unwrap();
    assert!(c.policy.is_audit());
    assert_eq!(
        c.policy.rule_names(),
        vec![Arc::from("rules[0]"), Arc::from("default-public-web")]
    );
    let c = Config::from_toml_str("[[rules]]\naction = \"allow\"\nhost = \"a.test\"\n").unwrap();
    assert!(!c.policy.is_audit());
    assert_eq!(c.policy.len(), 1);
    let e = err("mode = \"loud\"\n");
    assert!(e.contains("loud") && e.contains("line 1"), "{e}");
    let e = err("default = \"yes\"\n");
    assert!(e.contains("line 1"), "{e}");
}

#[test]
fn tls_table() {
    let f = ConfigFile::parse(
        "[tls]\nca_cert = \"ca.pem\"\nca_key = \"/abs/ca.key\"\nupstream_ca = [\"a.pem\", \"b.pem\"]\nstate_dir = \"state\"\n",
    )
    .unwrap();
    assert_eq!(f.tls.ca_cert.as_deref(), Some(Path::new("ca.pem")));
    assert_eq!(
        f.tls.upstream_ca,
        [PathBuf::from("a.pem"), PathBuf::from("b.pem")]
    );
    assert_eq!(f.tls.state_dir.as_deref(), Some(Path::new("state")));
    let c = f.compile().unwrap();
    assert_eq!(c.tls.ca_key.as_deref(), Some(Path::new("/abs/ca.key")));
    // Absent: nothing, and the default state directory.
    let c = Config::from_toml_str("").unwrap();
    assert_eq!(c.tls.ca_cert, None);
    assert!(c.tls.upstream_ca.is_empty());
    assert_eq!(c.tls.state_dir, default_state_dir());
    // Both or neither.
    let e = compile_err("[tls]\nca_cert = \"ca.pem\"\n");
    assert!(
        e.starts_with("tls.ca_cert: line 2, column 11: needs tls.ca_key too"),
        "{e}"
    );
    let e = compile_err("\n[tls]\nca_key = \"ca.key\"\n");
    assert!(
        e.starts_with("tls.ca_key: line 3, column 10: needs tls.ca_cert too"),
        "{e}"
    );
    let e = err("[tls]\nca_cert = \"\"\nca_key = \"k\"\n");
    assert!(
        e.starts_with("tls.ca_cert: line 2, column 11: must not be empty"),
        "{e}"
    );
    let e = err("[tls]\nca_certificate = \"x\"\n");
    assert!(e.contains("ca_certificate"), "{e}");
}

#[test]
fn tls_paths_are_relative_to_the_file() {
    let dir = std::env::temp_dir().join(format!("portcullis-tls-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("p.toml");
    std::fs::write(
        &path,
        "[tls]\nca_cert = \"ca.pem\"\nca_key = \"/abs/ca.key\"\nupstream_ca = [\"up/a.pem\"]\n",
    )
    .unwrap();
    let c = Config::load(&path).unwrap();
    assert_eq!(c.tls.ca_cert, Some(dir.join("ca.pem")));
    assert_eq!(c.tls.ca_key.as_deref(), Some(Path::new("/abs/ca.key")));
    assert_eq!(c.tls.upstream_ca, [dir.join("up/a.pem")]);
    // A file error names the file and the position.
    std::fs::write(&path, "[tls]\nca_key = \"k\"\n").unwrap();
    let e = Config::load(&path).unwrap_err();
    assert_eq!(e.path(), Some(path.as_path()));
    assert!(e.to_string().ends_with("tls.ca_key: line 2, column 10: needs tls.ca_cert too: give both (the CA's certificate and key) or neither (a CA is generated)"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn state_dir_default_follows_xdg_then_home() {
    // Pure on the environment it is given: checked through the same rules.
    let d = default_state_dir();
    match (std::env::var_os("XDG_STATE_HOME"), std::env::var_os("HOME")) {
        (Some(x), _) if Path::new(&x).is_absolute() => {
            assert_eq!(d, Some(PathBuf::from(x).join("portcullis")))
        }
        (_, Some(h)) if Path::new(&h).is_absolute() => {
            assert_eq!(d, Some(PathBuf::from(h).join(".local/state/portcullis")))
        }
        _ => assert_eq!(d, None),
    }
    assert_eq!(format_duration(Duration::from_millis(250)), "250ms");
    assert_eq!(format_duration(Duration::from_secs(90)), "90s");
    assert_eq!(format_duration(Duration::from_secs(300)), "5m");
    assert_eq!(format_duration(Duration::from_secs(7200)), "2h");
    assert_eq!(format_duration(Duration::from_secs(86400)), "1d");
    assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
}

#[test]
fn unix_listener_mode_and_group() {
    let l = |text: &str| ConfigFile::parse(text).map(|f| f.listeners.unwrap().remove(0));
    // Default: 0600, the process's group.
    let d = l("[[listen]]\naddress = \"unix:/tmp/p.sock\"\n").unwrap();
    assert_eq!(d.unix, UnixAccess::default());
    assert_eq!(d.unix.mode, 0o600);
    let g = l("[[listen]]\naddress = \"unix:/tmp/p.sock\"\nmode = \"0660\"\ngroup = 0\n").unwrap();
    assert_eq!(
        (g.unix.mode, &g.unix.group),
        (0o660, &Some(UnixGroup::Gid(0)))
    );
    // Names are resolved when the socket is made, on the machine it runs on.
    let n =
        l("[[listen]]\naddress = \"unix:/p\"\nmode = \"0o640\"\ngroup = \"sandbox\"\n").unwrap();
    let sandbox = UnixGroup::Name("sandbox".into());
    assert_eq!((n.unix.mode, &n.unix.group), (0o640, &Some(sandbox)));
    let digits = l("[[listen]]\naddress = \"unix:/p\"\ngroup = \"100\"\n").unwrap();
    assert_eq!(digits.unix.group, Some(UnixGroup::Gid(100)));
    let root = nix::unistd::Group::from_gid(0.into())
        .unwrap()
        .unwrap()
        .name;
    assert_eq!(UnixGroup::Name(root).gid(), Ok(0));
    let unknown = UnixGroup::Name("no-such-group-here".into()).gid();
    assert!(unknown.unwrap_err().contains("no group named"));
    for (text, key, says) in [
        (
            "address = \"unix:/p\"\nmode = \"0999\"",
            "listen[0].mode",
            "octal",
        ),
        (
            "address = \"unix:/p\"\nmode = \"1777\"",
            "listen[0].mode",
            "octal",
        ),
        (
            "address = \"unix:/p\"\nmode = \"\"",
            "listen[0].mode",
            "octal",
        ),
        (
            "address = \"unix:/p\"\ngroup = \" \"",
            "listen[0].group",
            "empty group name",
        ),
        (
            "address = \"127.0.0.1:1\"\nmode = \"0600\"",
            "listen[0].mode",
            "only a unix: listener",
        ),
        (
            "address = \"127.0.0.1:1\"\ngroup = 0",
            "listen[0].group",
            "only a unix: listener",
        ),
    ] {
        let e = l(&format!("[[listen]]\n{text}\n")).unwrap_err();
        assert_eq!(e.key_name(), Some(key), "{text}: {e}");
        assert!(e.message().contains(says), "{text}: {e}");
    }
    // A decimal number is refused: 600 is not 0600.
    assert!(l("[[listen]]\naddress = \"unix:/p\"\nmode = 600\n").is_err());
    // Validation catches an embedder's impossible mode.
    let mut listener = ListenerConfig::new(ListenAddr::Unix("/p".into()), ListenerProtocol::Auto);
    listener.unix.mode = 0o4755;
    let c = Config {
        listeners: vec![listener],
        ..Config::default()
    };
    assert_eq!(c.validate().unwrap_err().key_name(), Some("listen[0].mode"));
}

#[test]
fn session_limits_default_to_what_the_fd_limit_holds() {
    let l = Limits::for_open_files(Some(20_000));
    assert_eq!((l.max_sessions, l.max_sessions_per_client), (9_316, 2_329));
    assert_eq!(
        (
            l.max_pending_handshakes,
            l.max_pending_handshakes_per_client
        ),
        (1_024, 256)
    );
    let small = Limits::for_open_files(Some(2048));
    assert_eq!(
        (small.max_sessions, small.max_sessions_per_client),
        (864, 216)
    );
    assert_eq!(
        (
            small.max_pending_handshakes,
            small.max_pending_handshakes_per_client
        ),
        (864, 216)
    );
    let tiny = Limits::for_open_files(Some(8));
    assert_eq!((tiny.max_sessions, tiny.max_sessions_per_client), (1, 1));
    assert_eq!(tiny.max_pending_handshakes_per_client, 1);
    // An explicit value in the file wins; the others keep their defaults.
    let f = ConfigFile::parse("[limits]\nmax_sessions = 5\n").unwrap();
    assert_eq!(f.limits.max_sessions, 5);
    assert_eq!(
        f.limits.max_sessions_per_client,
        Limits::default().max_sessions_per_client
    );
}

#[test]
fn workers_is_a_count_or_auto() {
    let auto = crate::config::available_workers();
    assert!(auto >= 1);
    for (text, want) in [
        ("", 1),
        ("[limits]\nworkers = 2\n", 2),
        ("[limits]\nworkers = \"3\"\n", 3),
        ("[limits]\nworkers = \"auto\"\n", auto),
        ("[limits]\nworkers = \"AUTO\"\n", auto),
    ] {
        let c = ConfigFile::parse(text).unwrap().compile().unwrap();
        assert_eq!(c.limits.workers, want, "{text}");
    }
    for (text, why) in [
        ("[limits]\nworkers = 0\n", "out of range"),
        ("[limits]\nworkers = -1\n", "expected a number or auto"),
        ("[limits]\nworkers = 257\n", "out of range"),
        (
            "[limits]\nworkers = \"many\"\n",
            "expected a number or auto",
        ),
    ] {
        let e = ConfigFile::parse(text).unwrap_err();
        assert_eq!(e.key_name(), Some("limits.workers"), "{text}");
        let e = e.to_string();
        assert!(e.contains(why) && e.contains("line 2"), "{text}: {e}");
    }
    let mut c = Config::default();
    c.limits.workers = 0;
    assert_eq!(invalid_key(&c), "limits.workers");
}
