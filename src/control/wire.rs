//! The control protocol on the wire: one JSON object per line each way.
//!
//! ```text
//! {"cmd":"replace-policy","policy":"[[rules]]\nname = \"web\"\naction = \"allow\"\nhost = \"*\"\nports = [443]\n"}
//! {"cmd":"add-rule","rule":{"name":"pypi","action":"allow","host":"pypi.org","port":443}}
//! {"cmd":"add-rule","rule":"name = \"pypi\"\naction = \"allow\"\nhost = \"pypi.org\"\n"}
//! {"cmd":"remove-rule","name":"pypi"}
//! {"cmd":"list-sessions"}
//! {"cmd":"close-session","id":42}
//! {"cmd":"stats"}
//! ```
//!
//! Answers: `{"ok":true,"cmd":"...",...}` or `{"ok":false,"error":"..."}`.
//! Parsing is strict (unknown commands and keys are errors) and compiles
//! policies in full, so a bad line changes nothing.

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::{Command, Reply, SessionInfo};
use crate::policy::{Policy, RuleConfig};

/// Longest command line accepted, newline excluded (a whole policy fits).
pub(crate) const MAX_LINE: usize = 1024 * 1024;

#[derive(Deserialize)]
#[serde(tag = "cmd", rename_all = "kebab-case", deny_unknown_fields)]
enum Wire {
    ReplacePolicy { policy: String },
    AddRule { rule: Value },
    RemoveRule { name: String },
    ListSessions {},
    CloseSession { id: u64 },
    Stats {},
}

/// Top-level keys of a policy document: what the file's policy part holds.
const POLICY_KEYS: &[&str] = &["rules", "mode", "default"];

/// The commands, as the `cmd` key names them.
const COMMANDS: &[&str] = &[
    "replace-policy",
    "add-rule",
    "remove-rule",
    "list-sessions",
    "close-session",
    "stats",
];

/// What a line must be, for error answers.
const EXPECTED: &str = r#"a command is one JSON object per line, such as {"cmd":"stats"}"#;

/// Parses one line (without its newline) into a command, compiling any
/// policy it carries. The error is the answer's `error` text.
pub(crate) fn parse(line: &str) -> Result<Command, String> {
    let value: Value = serde_json::from_str(line)
        .map_err(|e| format!("bad command: not JSON: {EXPECTED} ({e})"))?;
    if !value.is_object() {
        return Err(format!("bad command: not a JSON object: {EXPECTED}"));
    }
    let wire: Wire = serde_json::from_value(value).map_err(|e| format!("bad command: {e}"))?;
    Ok(match wire {
        Wire::ReplacePolicy { policy } => Command::ReplacePolicy(policy_from_toml(&policy)?),
        Wire::AddRule { rule } => Command::AddRule(Box::new(rule_from(rule)?)),
        Wire::RemoveRule { name } => Command::RemoveRule(name),
        Wire::ListSessions {} => Command::ListSessions,
        Wire::CloseSession { id } => Command::CloseSession(id),
        Wire::Stats {} => Command::Stats,
    })
}

/// A policy document (`[[rules]]`, `mode`, `default`), compiled as the
/// configuration file's rules are. Other keys are refused: a misspelt
/// `[[rule]]` must not pass as an empty policy that denies everything.
fn policy_from_toml(text: &str) -> Result<Policy, String> {
    let table: toml::Table = toml::from_str(text).map_err(|e| format!("invalid policy: {e}"))?;
    if let Some(key) = table.keys().find(|k| !POLICY_KEYS.contains(&k.as_str())) {
        return Err(format!(
            "invalid policy: unknown key {key:?} (a policy has [[rules]], mode and default)"
        ));
    }
    Policy::parse_toml(text).map_err(|e| e.to_string())
}

/// One rule: a JSON object, or the TOML text of one table (bare keys, or
/// one `[[rules]]` table).
fn rule_from(value: Value) -> Result<RuleConfig, String> {
    match value {
        Value::Object(_) => serde_json::from_value(value).map_err(|e| format!("invalid rule: {e}")),
        Value::String(text) => {
            #[derive(Deserialize)]
            #[serde(deny_unknown_fields)]
            struct Doc {
                rules: Vec<RuleConfig>,
            }
            if let Ok(Doc { mut rules }) = toml::from_str::<Doc>(&text) {
                return match rules.len() {
                    1 => Ok(rules.remove(0)),
                    n => Err(format!("add-rule takes one rule, not {n}")),
                };
            }
            toml::from_str(&text).map_err(|e| format!("invalid rule: {e}"))
        }
        _ => Err("invalid rule: expected a JSON object or the TOML text of one rule".into()),
    }
}

/// The answer line for `reply` to command `cmd` (no newline).
pub(crate) fn answer(cmd: &str, reply: &Result<Reply, String>) -> String {
    let value = match reply {
        Err(e) => error_value(cmd, e),
        Ok(reply) => {
            let mut m = Map::new();
            m.insert("ok".into(), Value::Bool(true));
            m.insert("cmd".into(), cmd.into());
            match reply {
                Reply::Policy(names) => {
                    m.insert("rules".into(), json!(names));
                }
                Reply::Sessions(list) => {
                    m.insert(
                        "sessions".into(),
                        Value::Array(list.iter().map(session_value).collect()),
                    );
                }
                Reply::Closed(id) => {
                    m.insert("id".into(), json!(id));
                }
                Reply::Stats(snapshot, rules) => {
                    m.insert(
                        "stats".into(),
                        crate::stats::json::stats_value(snapshot, rules, &[], None),
                    );
                }
            }
            Value::Object(m)
        }
    };
    value.to_string()
}

/// The command `line` names, if it is a JSON object whose `cmd` is one we
/// know (whether or not the rest of it is right): for its error answer.
pub(crate) fn command_name(line: &str) -> &'static str {
    let value: Option<Value> = serde_json::from_str(line).ok();
    let named = value.as_ref().and_then(|v| v.get("cmd")?.as_str());
    named
        .and_then(|n| COMMANDS.iter().find(|c| **c == n))
        .copied()
        .unwrap_or("")
}

/// The answer to input that ended inside a line (no newline before EOF):
/// it is never run.
pub(crate) fn unterminated(partial: &str) -> String {
    error_value(
        command_name(partial),
        &format!(
            "incomplete line: the input ended before its newline, so it was not run ({EXPECTED})"
        ),
    )
    .to_string()
}

/// An error answer; `cmd` is empty when the line did not name one.
pub(crate) fn error_value(cmd: &str, error: &str) -> Value {
    let mut m = Map::new();
    m.insert("ok".into(), Value::Bool(false));
    if !cmd.is_empty() {
        m.insert("cmd".into(), cmd.into());
    }
    m.insert("error".into(), error.into());
    Value::Object(m)
}

fn session_value(s: &SessionInfo) -> Value {
    json!({
        "id": s.id,
        "client": s.client,
        "protocol": s.protocol.map(|p| p.as_str()),
        "user": s.user,
        "target": s.target,
        "dialled": s.dialled.map(|ip| ip.to_string()),
        "state": s.state,
        "rule": s.rule,
        "bytes_up": s.bytes_up,
        "bytes_down": s.bytes_down,
        "age_ms": u64::try_from(s.age.as_millis()).unwrap_or(u64::MAX),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(line: &str) -> String {
        match parse(line) {
            Err(e) => e,
            Ok(c) => panic!("{line}: parsed as {}", c.name()),
        }
    }

    #[test]
    fn every_command_parses() {
        let policy = r#"{"cmd":"replace-policy","policy":"mode = \"audit\"\n[[rules]]\nname = \"web\"\naction = \"allow\"\nhost = \"*\"\nports = [443]\n"}"#;
        let Command::ReplacePolicy(p) = parse(policy).unwrap() else {
            panic!()
        };
        assert_eq!(p.rule_names().len(), 1);
        assert!(p.is_audit());
        let json_rule = r#"{"cmd":"add-rule","rule":{"name":"pypi","action":"allow","host":"pypi.org","ports":[443,"8000-8100"]}}"#;
        let Command::AddRule(r) = parse(json_rule).unwrap() else {
            panic!()
        };
        assert_eq!(r.name.as_deref(), Some("pypi"));
        assert_eq!(r.ports.len(), 2);
        for toml_rule in [
            r#"{"cmd":"add-rule","rule":"name = \"pypi\"\naction = \"allow\"\nhost = \"pypi.org\"\n"}"#,
            r#"{"cmd":"add-rule","rule":"[[rules]]\nname = \"pypi\"\naction = \"allow\"\nhost = \"pypi.org\"\n"}"#,
        ] {
            let Command::AddRule(r2) = parse(toml_rule).unwrap() else {
                panic!()
            };
            assert_eq!(r2.host.as_deref(), Some("pypi.org"));
        }
        assert!(matches!(
            parse(r#"{"cmd":"remove-rule","name":"pypi"}"#),
            Ok(Command::RemoveRule(n)) if n == "pypi"
        ));
        assert!(matches!(
            parse(r#"{"cmd":"list-sessions"}"#),
            Ok(Command::ListSessions)
        ));
        assert!(matches!(
            parse(r#" {"cmd":"close-session","id":42} "#),
            Ok(Command::CloseSession(42))
        ));
        assert!(matches!(parse(r#"{"cmd":"stats"}"#), Ok(Command::Stats)));
    }

    #[test]
    fn bad_input_is_an_error_never_a_change() {
        for (line, want) in [
            ("", "bad command"),
            ("not json", "bad command"),
            ("[1,2]", "bad command"),
            (r#"{"cmd":"reboot"}"#, "unknown variant"),
            (r#"{"cmd":"stats","extra":1}"#, "unknown field"),
            (r#"{"cmd":"close-session","id":"x"}"#, "bad command"),
            (r#"{"cmd":"close-session"}"#, "missing field"),
            (
                r#"{"cmd":"replace-policy","policy":"[[rule]]\naction = \"allow\"\nhost = \"*\"\n"}"#,
                "unknown key \"rule\"",
            ),
            (
                r#"{"cmd":"replace-policy","policy":"[[rules]]\naction = \"allow\"\n"}"#,
                "at least one host or cidr",
            ),
            (
                r#"{"cmd":"replace-policy","policy":"[[rules"}"#,
                "invalid policy",
            ),
            (
                r#"{"cmd":"add-rule","rule":{"name":"x","action":"allow","hosts":"a"}}"#,
                "invalid rule",
            ),
            (
                r#"{"cmd":"add-rule","rule":{"name":"x","action":"maybe","host":"a"}}"#,
                "invalid rule",
            ),
            (r#"{"cmd":"add-rule","rule":42}"#, "expected a JSON object"),
            (
                r#"{"cmd":"add-rule","rule":"[[rules]]\nname=\"a\"\naction=\"allow\"\nhost=\"a\"\n[[rules]]\nname=\"b\"\naction=\"allow\"\nhost=\"b\"\n"}"#,
                "not 2",
            ),
        ] {
            let e = err(line);
            assert!(e.contains(want), "{line}: {e}");
        }
    }

    #[test]
    fn answers_are_one_json_line() {
        let ok = answer("remove-rule", &Ok(Reply::Policy(vec!["a\nb".into()])));
        assert_eq!(ok, r#"{"ok":true,"cmd":"remove-rule","rules":["a\nb"]}"#);
        let bad = answer("add-rule", &Err("no \"rule\"\nhere".into()));
        assert_eq!(
            bad,
            r#"{"ok":false,"cmd":"add-rule","error":"no \"rule\"\nhere"}"#
        );
        assert!(!bad.contains('\n'));
        let s = SessionInfo {
            id: 3,
            client: "127.0.0.1:5".into(),
            protocol: Some(crate::events::Protocol::Socks5),
            user: None,
            target: Some("a.test:443".into()),
            dialled: Some("192.0.2.1".parse().unwrap()),
            state: "Passthrough(relay)".into(),
            rule: Some("web".into()),
            bytes_up: 1,
            bytes_down: 2,
            age: std::time::Duration::from_millis(1500),
        };
        let v: Value =
            serde_json::from_str(&answer("list-sessions", &Ok(Reply::Sessions(vec![s])))).unwrap();
        assert_eq!(v["sessions"][0]["age_ms"], 1500);
        assert_eq!(v["sessions"][0]["protocol"], "socks5");
        assert_eq!(v["sessions"][0]["user"], Value::Null);
    }
}
