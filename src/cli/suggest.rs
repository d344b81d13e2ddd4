//! `portcullis suggest [FILE]`: learn mode. Reads the proxy's JSON log
//! (`--log-format json`, audit or enforce mode) and prints a policy of
//! `[[rules]]` that allows exactly the destinations its session events
//! name: one rule per host with its ports; where the host resolved to a
//! special address (private, documentation, ...), a `match = "both"` rule
//! opening that name into exactly that address (/32 or /128); address
//! literals as `cidrs` rules.
//!
//! The log is written by the proxy, but what it records comes from the
//! sandbox (the target names), so every value is vetted: the target is
//! canonicalised as the policy would, a name must be plain (letters,
//! digits, `-`, `_`, `.`) or it is skipped with a note (a `*` in a logged
//! name is a literal character, and written into a rule it would become a
//! wildcard), and the TOML is written by the `toml` serializer, never by
//! pasting text.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, Read};
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use portcullis::policy::{special_range, Host, Target};
use serde::Serialize;
use serde_json::Value;

/// Longest log line read; a longer one is skipped as not a log line.
const MAX_LINE: usize = 1 << 20;
/// Notes about skipped destinations printed at most.
const MAX_NOTES: usize = 20;

const SUGGEST_AFTER_HELP: &str = "\
Each destination a session event names (allowed, denied or would-deny) is
allowed by the printed policy, on the ports seen for it. A name that
resolved to a special address (private, loopback, documentation, ...) gets
a rule with cidrs = [\"ADDR/32\"] and match = \"both\": that name, into that
address only. Address literals become cidrs rules. Review it, then check it:
portcullis --check --config FILE.

Examples:
  portcullis --audit --log-format json 2> audit.log &
  portcullis suggest audit.log > policy.toml
  portcullis run --audit --log-format json --log-file a.log -- make
  portcullis suggest < a.log";

/// `portcullis suggest [FILE]`
#[derive(Debug, clap::Args)]
#[command(after_help = SUGGEST_AFTER_HELP)]
pub struct SuggestArgs {
    /// The JSON log (standard input when absent or `-`).
    #[arg(value_name = "FILE")]
    pub file: Option<PathBuf>,
}

/// `portcullis suggest`.
pub fn main(args: &SuggestArgs) -> ExitCode {
    let (source, learned) = match args.file.as_deref() {
        None => ("standard input".to_string(), read(std::io::stdin().lock())),
        Some(p) if p.as_os_str() == "-" => {
            ("standard input".to_string(), read(std::io::stdin().lock()))
        }
        Some(p) => {
            let shown = format!("{}", p.display());
            match std::fs::File::open(p) {
                Ok(f) => (shown, read(std::io::BufReader::new(f))),
                Err(e) => {
                    fatal!("cannot read {shown}: {e}");
                    return ExitCode::from(2);
                }
            }
        }
    };
    let learned = match learned {
        Ok(l) => l,
        Err(e) => {
            fatal!("reading {source}: {e}");
            return ExitCode::from(2);
        }
    };
    for note in learned.notes.iter().take(MAX_NOTES) {
        crate::report(log::Level::Warn, format_args!("{note}"));
    }
    if learned.notes.len() > MAX_NOTES {
        crate::report(
            log::Level::Warn,
            format_args!("... and {} more skipped", learned.notes.len() - MAX_NOTES),
        );
    }
    if learned.not_json > 0 {
        crate::report(
            log::Level::Warn,
            format_args!(
                "ignored {} {} that {} not JSON",
                learned.not_json,
                if learned.not_json == 1 {
                    "line"
                } else {
                    "lines"
                },
                if learned.not_json == 1 { "is" } else { "are" },
            ),
        );
    }
    match render(&learned, &source) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            fatal!("{source}: {e}");
            ExitCode::from(2)
        }
    }
}

/// What the log showed.
#[derive(Debug, Default, PartialEq)]
pub struct Learned {
    /// Names: host -> what was seen for it.
    names: BTreeMap<String, Seen>,
    /// Address literals: address -> ports.
    literals: BTreeMap<IpAddr, BTreeSet<u16>>,
    /// Session events used, by decision: allow, deny, would-deny.
    used: [u64; 3],
    /// JSON lines that were not usable session events (other log lines,
    /// request events, sessions refused before a target was known).
    other_json: u64,
    /// Lines that are not JSON objects.
    not_json: u64,
    /// Why destinations were skipped.
    notes: Vec<String>,
}

/// One name's ports: those it reached at public (or unknown) addresses,
/// and those at special ones, with the special addresses.
#[derive(Debug, Default, PartialEq)]
struct Seen {
    ports: BTreeSet<u16>,
    special_ports: BTreeSet<u16>,
    special: BTreeSet<IpAddr>,
}

/// Reads log lines from `input`. Errors only when it cannot be read.
pub fn read(mut input: impl BufRead) -> std::io::Result<Learned> {
    let mut learned = Learned::default();
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = (&mut input)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut line)?;
        if n == 0 {
            break;
        }
        if line.len() > MAX_LINE && line.last() != Some(&b'\n') {
            // Skip the rest of an overlong line.
            learned.not_json += 1;
            loop {
                line.clear();
                let m = (&mut input)
                    .take(MAX_LINE as u64)
                    .read_until(b'\n', &mut line)?;
                if m == 0 || line.last() == Some(&b'\n') {
                    break;
                }
            }
            continue;
        }
        learned.line(&line);
    }
    Ok(learned)
}

impl Learned {
    /// Takes one log line.
    fn line(&mut self, line: &[u8]) {
        let trimmed = line.trim_ascii();
        if trimmed.is_empty() {
            return;
        }
        let Ok(Value::Object(event)) = serde_json::from_slice::<Value>(trimmed) else {
            self.not_json += 1;
            return;
        };
        let field = |k: &str| event.get(k).and_then(Value::as_str);
        let decision = match field("decision") {
            Some("allow") => 0,
            Some("deny") => 1,
            Some("would-deny") => 2,
            _ => {
                self.other_json += 1;
                return;
            }
        };
        let (Some("session"), Some(target)) = (field("event"), field("target")) else {
            self.other_json += 1;
            return;
        };
        let target = match Target::parse_authority(target) {
            Ok(t) => t,
            Err(e) => {
                self.notes.push(format!(
                    "skipped target {target:?}: not a destination ({})",
                    e.0
                ));
                return;
            }
        };
        match target.host {
            Host::Ip(ip) => {
                self.used[decision] += 1;
                self.literals.entry(ip).or_default().insert(target.port);
            }
            Host::Domain(name) => {
                if !plain_name(&name) {
                    self.notes.push(format!(
                        "skipped {name:?}: a rule would read it as a pattern, not this \
                         literal name (allow it by hand if you mean it)"
                    ));
                    return;
                }
                self.used[decision] += 1;
                let addr = field("dialled")
                    .and_then(|d| d.parse().ok())
                    .or_else(|| field("reason").and_then(special_address_in));
                let seen = self.names.entry(name).or_default();
                match addr.filter(|a| special_range(*a).is_some()) {
                    Some(a) => {
                        seen.special.insert(a);
                        seen.special_ports.insert(target.port);
                    }
                    None => {
                        seen.ports.insert(target.port);
                    }
                }
            }
        }
    }
}

/// A name a rule's `hosts` reads as itself: letters, digits, `-`, `_` and
/// dots between labels (no `*`, no leading dot, nothing else).
fn plain_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// The special address a refusal names, from the policy's wording only:
/// `ADDR is a RANGE address ...` (or `RANGE-address=ADDR`). Other text in
/// a reason (a user name, quoted) can carry text chosen elsewhere, so no
/// address is taken from anywhere else, nor from a reason that quotes.
fn special_address_in(reason: &str) -> Option<IpAddr> {
    // Every refusal begins with the policy's own words (or, here, the
    // address DNS gave): quoted text later on cannot change the first word.
    if let Some((first, rest)) = reason.split_once(' ') {
        if rest.starts_with("is a ") {
            if let Ok(a) = first.parse() {
                return Some(a);
            }
        }
    }
    if reason.contains('"') {
        return None;
    }
    reason
        .split([' ', ';', ','])
        .filter_map(|w| w.split_once("-address="))
        .find_map(|(_, a)| a.parse().ok())
}

/// The policy's TOML shape, for the serializer.
#[derive(Serialize)]
struct PolicyOut {
    rules: Vec<RuleOut>,
}

#[derive(Serialize)]
struct RuleOut {
    name: String,
    action: &'static str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    hosts: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    cidrs: Vec<String>,
    ports: Vec<u16>,
    #[serde(rename = "match", skip_serializing_if = "Option::is_none")]
    match_mode: Option<&'static str>,
}

/// `ip` as a one-address CIDR.
fn host_cidr(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(a) => format!("{a}/32"),
        IpAddr::V6(a) => format!("{a}/128"),
    }
}

/// The policy text: a comment header, then the rules. An error when the
/// log held no usable session event.
pub fn render(learned: &Learned, source: &str) -> Result<String, String> {
    let total: u64 = learned.used.iter().sum();
    if total == 0 {
        return Err(if learned.other_json == 0 {
            "no JSON log lines: run the proxy with --log-format json (and --audit to let \
             everything through while learning), then give its log to suggest"
                .into()
        } else {
            format!(
                "{} JSON log lines but no session event with a destination: nothing to allow",
                learned.other_json
            )
        });
    }
    let mut rules = Vec::new();
    for (name, seen) in &learned.names {
        if !seen.ports.is_empty() {
            rules.push(RuleOut {
                name: name.clone(),
                action: "allow",
                hosts: vec![name.clone()],
                cidrs: Vec::new(),
                ports: seen.ports.iter().copied().collect(),
                match_mode: None,
            });
        }
        if !seen.special.is_empty() {
            let ranges: BTreeSet<&str> = seen
                .special
                .iter()
                .filter_map(|a| special_range(*a))
                .collect();
            rules.push(RuleOut {
                name: format!(
                    "{name} at its {} {}",
                    ranges.into_iter().collect::<Vec<_>>().join("/"),
                    if seen.special.len() == 1 {
                        "address"
                    } else {
                        "addresses"
                    }
                ),
                action: "allow",
                hosts: vec![name.clone()],
                cidrs: seen.special.iter().copied().map(host_cidr).collect(),
                ports: seen.special_ports.iter().copied().collect(),
                match_mode: Some("both"),
            });
        }
    }
    for (ip, ports) in &learned.literals {
        rules.push(RuleOut {
            name: ip.to_string(),
            action: "allow",
            hosts: Vec::new(),
            cidrs: vec![host_cidr(*ip)],
            ports: ports.iter().copied().collect(),
            match_mode: None,
        });
    }
    let body = toml::to_string(&PolicyOut { rules })
        .map_err(|e| format!("internal error writing TOML: {e}"))?;
    // The source in the comment: escaped, so no newline can end the comment.
    let source: String = format!("{source:?}");
    let [allowed, denied, would] = learned.used;
    let destinations = learned
        .names
        .values()
        .map(|s| s.ports.len() + s.special_ports.len())
        .sum::<usize>()
        + learned.literals.values().map(BTreeSet::len).sum::<usize>();
    Ok(format!(
        "# Suggested by `portcullis suggest` from {source}:\n\
         # {total} session events ({allowed} allowed, {denied} denied, {would} would-deny), \
         {destinations} destinations, {hosts} names, {literals} address literals.\n\
         # It allows exactly these destinations; review it, then:\n\
         #   portcullis --check --config THIS_FILE\n\n{body}",
        hosts = learned.names.len(),
        literals = learned.literals.len(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn learn(lines: &[&str]) -> Learned {
        read(lines.join("\n").as_bytes()).unwrap()
    }

    fn session(
        target: &str,
        decision: &str,
        dialled: Option<&str>,
        reason: Option<&str>,
    ) -> String {
        let mut v = serde_json::json!({
            "time": "2026-12-02T22:00:00.000Z", "level": "info", "event": "session",
            "conn": 1, "protocol": "connect", "client": "127.0.0.1:5000",
            "target": target, "decision": decision,
        });
        if let Some(d) = dialled {
            v["dialled"] = d.into();
        }
        if let Some(r) = reason {
            v["reason"] = r.into();
        }
        v.to_string()
    }

    /// The policy text parses as a policy, and its rules as TOML values.
    fn rules_of(text: &str) -> Vec<toml::Table> {
        portcullis::Policy::parse_toml(text).expect("a valid policy");
        let t: toml::Table = toml::from_str(text).unwrap();
        t["rules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_table().unwrap().clone())
            .collect()
    }

    #[test]
    fn hosts_grouped_ports_merged_special_addresses_scoped() {
        let lines = [
            session(
                "pypi.org:443",
                "would-deny",
                Some("203.0.113.80"),
                Some("x"),
            ),
            session("PyPI.org.:443", "would-deny", Some("203.0.113.80"), None),
            session("files.example:443", "allow", Some("93.184.216.34"), None),
            session("files.example:80", "allow", Some("93.184.216.34"), None),
            session(
                "mirror.corp:8080",
                "deny",
                None,
                Some("10.1.2.3 is a private address and no rule names it"),
            ),
            session(
                "10.0.0.5:22",
                "deny",
                None,
                Some("no rule allows this destination"),
            ),
            session("[2001:db8::1]:443", "would-deny", Some("2001:db8::1"), None),
            r#"{"time":"t","level":"info","event":"log","module":"portcullis","message":"hi"}"#
                .to_string(),
            "time=2026 level=info event=log message=text".into(),
            String::new(),
        ];
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        let learned = learn(&refs);
        assert_eq!(learned.used, [2, 2, 3]);
        assert_eq!(learned.other_json, 1);
        assert_eq!(learned.not_json, 1);
        let text = render(&learned, "audit.log").unwrap();
        assert!(text.starts_with("# Suggested by `portcullis suggest` from \"audit.log\":\n# 7 session events (2 allowed, 2 denied, 3 would-deny), 6 destinations, 3 names, 2 address literals."), "{text}");
        let rules = rules_of(&text);
        let show: Vec<String> = rules
            .iter()
            .map(|r| {
                let mut r = r.clone();
                r.remove("action");
                toml::Value::Table(r).to_string().replace('\n', " ")
            })
            .collect();
        assert_eq!(
            show,
            [
                r#"{ hosts = ["files.example"], name = "files.example", ports = [80, 443] }"#,
                r#"{ cidrs = ["10.1.2.3/32"], hosts = ["mirror.corp"], match = "both", name = "mirror.corp at its private address", ports = [8080] }"#,
                r#"{ cidrs = ["203.0.113.80/32"], hosts = ["pypi.org"], match = "both", name = "pypi.org at its documentation address", ports = [443] }"#,
                r#"{ cidrs = ["10.0.0.5/32"], name = "10.0.0.5", ports = [22] }"#,
                r#"{ cidrs = ["2001:db8::1/128"], name = "2001:db8::1", ports = [443] }"#,
            ],
            "{text}"
        );
        assert!(rules.iter().all(|r| r["action"].as_str() == Some("allow")));
    }

    #[test]
    fn a_name_at_public_and_special_addresses_gets_both_rules() {
        let a = session("cdn.example:443", "allow", Some("93.184.216.34"), None);
        let b = session("cdn.example:443", "would-deny", Some("192.168.1.9"), None);
        let text = render(&learn(&[&a, &b]), "-").unwrap();
        let rules = rules_of(&text);
        assert_eq!(rules.len(), 2, "{text}");
        assert!(rules[0].get("match").is_none());
        assert_eq!(rules[1]["match"].as_str(), Some("both"));
        assert_eq!(
            rules[1]["cidrs"].as_array().unwrap()[0].as_str(),
            Some("192.168.1.9/32")
        );
    }

    #[test]
    fn hostile_targets_inject_nothing() {
        let evil = "evil.com\"\n[[rules]]\nhosts=[\"*\"]";
        let lines = [
            session(&format!("{evil}:443"), "would-deny", None, None),
            session("*.x.example:443", "would-deny", None, None),
            session("a b:443", "would-deny", None, None),
            session(
                "ok.example:443",
                "would-deny",
                None,
                Some("user \"10.0.0.9\" not in rule \"r\""),
            ),
        ];
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        let learned = learn(&refs);
        assert_eq!(learned.notes.len(), 3, "{:?}", learned.notes);
        assert!(
            learned.notes.iter().all(|n| !n.contains('\n')),
            "{:?}",
            learned.notes
        );
        let text = render(&learned, "x\n[[rules]]\nhosts = [\"*\"]").unwrap();
        let rules = rules_of(&text);
        assert_eq!(rules.len(), 1, "{text}");
        assert_eq!(
            rules[0]["hosts"].as_array().unwrap()[0].as_str(),
            Some("ok.example")
        );
        // The address in a user name is not taken for a resolved address.
        assert!(rules[0].get("cidrs").is_none(), "{text}");
        assert!(!text.contains("\n[[rules]]\nhosts = [\"*\"]"), "{text}");
    }

    #[test]
    fn garbage_and_empty_inputs_are_refused_clearly() {
        let e = render(&learn(&["not json", "\u{0}\u{1}"]), "f").unwrap_err();
        assert!(e.contains("--log-format json"), "{e}");
        let e = render(&learn(&[r#"{"event":"log","message":"x"}"#, "[1,2]"]), "f").unwrap_err();
        assert!(e.contains("no session event"), "{e}");
        let learned = read(&[0xff, 0xfe, b'\n', b'{', b'\n'][..]).unwrap();
        assert_eq!(learned.not_json, 2);
        // An overlong line is skipped whole, and the next one read.
        let mut big = vec![b'a'; MAX_LINE + 10];
        big.push(b'\n');
        big.extend_from_slice(session("z.example:443", "allow", None, None).as_bytes());
        let learned = read(&big[..]).unwrap();
        assert_eq!((learned.not_json, learned.used[0]), (1, 1));
    }

    #[test]
    fn special_addresses_come_only_from_the_policys_wording() {
        assert_eq!(
            special_address_in("203.0.113.80 is a documentation address and no rule names it"),
            "203.0.113.80".parse().ok()
        );
        assert_eq!(
            special_address_in("denied; documentation-address=203.0.113.80"),
            "203.0.113.80".parse().ok()
        );
        assert_eq!(
            special_address_in("user \"10.0.0.1\" not in rule \"r\""),
            None
        );
        assert_eq!(special_address_in("denied by rule 10.0.0.1"), None);
        // An enforce-mode refusal names the rule that matched, quoted: the
        // address that opens the refusal is still the one to scope.
        assert_eq!(
            special_address_in(
                "203.0.113.80 is a documentation address and rule \"--allow pypi.org:443\" \
                 does not name it: to allow it for this destination alone, use \
                 --allow pypi.org:443@203.0.113.80/32"
            ),
            "203.0.113.80".parse().ok()
        );
        assert_eq!(
            special_address_in("user \"10.0.0.1 is a private\" not in rule \"r\""),
            None
        );
        assert!(plain_name("a-b_c.example"));
        for bad in ["*.x", ".x", "x..y", "a b", "", "x*"] {
            assert!(!plain_name(bad), "{bad}");
        }
    }
}
