//! Rules in the file: semantic errors with their position, ports, rules
//! from flags, `mode` and `default`.

use std::sync::Arc;

use super::*;
use crate::policy::Action;

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
        e.starts_with("rules[1].hosts[0]: line 9, column 10: \"https://a.test/x\": a rule takes a host, not a URL: give \"a.test\", and the port as port = 443 (or in ports)"),
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
