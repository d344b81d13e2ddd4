//! What `run` refused while CMD ran, and the one-line summary it prints on
//! CMD's stderr at exit. Pure: fed by the proxy's event callback and the
//! DNS trap, rendered once.

use std::collections::HashMap;
use std::path::Path;

/// How many destinations (and names) the summary lists before "and N more".
const TOP: usize = 5;
/// A reason longer than this is cut in the summary (the log has it whole).
const REASON_CHARS: usize = 90;
/// Where a refusal's fix gives its policy-file form, after its flag.
const FILE_FORM: &str = " (in a policy file: ";
/// What precedes a fix's flag in a refusal's reason.
const FIX: &str = "use --";
/// Distinct destinations (and names) remembered: CMD chooses them, so past
/// this they are only counted, and memory stays bounded.
const MAX_DISTINCT: usize = 1024;

/// Refusals by destination, and direct DNS queries by name.
#[derive(Debug, Default)]
pub struct Tally {
    /// `host:port` -> (count, first reason, first-seen order).
    refused: HashMap<String, (u64, Option<String>, usize)>,
    /// Name -> (count, first-seen order).
    dns: HashMap<String, (u64, usize)>,
    /// Whether the refusals were audit-mode would-denies.
    audit: bool,
    /// Refusals of destinations past [`MAX_DISTINCT`], only counted.
    refused_beyond: u64,
    /// Queries for names past [`MAX_DISTINCT`], only counted.
    dns_beyond: u64,
}

impl Tally {
    /// A connection to `target` was refused (or, `audit`, would have been).
    pub fn refused(&mut self, target: &str, reason: Option<&str>, audit: bool) {
        self.audit |= audit;
        let next = self.refused.len();
        if next >= MAX_DISTINCT && !self.refused.contains_key(target) {
            self.refused_beyond += 1;
            return;
        }
        let e = self.refused.entry(target.to_string());
        e.or_insert((0, reason.map(String::from), next)).0 += 1;
    }

    /// CMD asked a resolver for `name` directly and got `REFUSED`.
    pub fn dns_query(&mut self, name: &str) {
        let next = self.dns.len();
        if next >= MAX_DISTINCT && !self.dns.contains_key(name) {
            self.dns_beyond += 1;
            return;
        }
        self.dns.entry(name.to_string()).or_insert((0, next)).0 += 1;
    }

    /// The summary (without the `portcullis: ` prefix), or `None` when
    /// nothing was refused. `log` is where the details are.
    pub fn summary(&self, log: Option<&Path>) -> Option<String> {
        if self.refused.is_empty() && self.dns.is_empty() {
            return None;
        }
        let mut parts = Vec::new();
        if !self.refused.is_empty() {
            let mut v: Vec<_> = self.refused.iter().collect();
            v.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.1 .2.cmp(&b.1 .2)));
            let total = v.iter().map(|(_, e)| e.0).sum::<u64>() + self.refused_beyond;
            let verb = if self.audit {
                "would have refused"
            } else {
                "refused"
            };
            let list = top(
                v.iter().map(|(t, (n, reason, _))| {
                    let mut s = format!("{t} x{n}");
                    if let Some(r) = reason {
                        s += &format!(" ({})", cut(r));
                    }
                    s
                }),
                self.refused_beyond,
            );
            parts.push(format!(
                "{verb} {total} {}: {list}",
                plural(total, "connection")
            ));
        }
        if !self.dns.is_empty() {
            let mut v: Vec<_> = self.dns.iter().collect();
            v.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.1 .1.cmp(&b.1 .1)));
            let total = v.iter().map(|(_, e)| e.0).sum::<u64>() + self.dns_beyond;
            let list = top(
                v.iter().map(|(name, (n, _))| format!("{name} x{n}")),
                self.dns_beyond,
            );
            parts.push(format!(
                "refused {total} DNS {} CMD sent directly, ignoring the proxy: {list} \
                 (it must reach the network through HTTPS_PROXY/ALL_PROXY, which run sets)",
                plural(total, "query")
            ));
        }
        parts.push(match log {
            Some(p) => format!("log: {}", p.display()),
            None => "details: rerun with --log-file FILE".into(),
        });
        Some(parts.join("; "))
    }
}

fn plural(n: u64, word: &str) -> String {
    match (n, word) {
        (1, w) => w.into(),
        (_, "query") => "queries".into(),
        (_, w) => format!("{w}s"),
    }
}

/// The first [`TOP`] items, comma-separated, then "and N more" (the
/// items left), and the events past [`MAX_DISTINCT`] (`beyond`).
fn top(items: impl ExactSizeIterator<Item = String>, beyond: u64) -> String {
    let n = items.len();
    let mut s: Vec<String> = items.take(TOP).collect();
    if n > TOP {
        s.push(format!("and {} more", n - TOP));
    }
    if beyond > 0 {
        s.push(format!("{beyond} more not told apart"));
    }
    s.join(", ")
}

fn cut(reason: &str) -> String {
    let mut line: String = reason.chars().filter(|c| !c.is_control()).collect();
    // `run` takes flags: a fix's policy-file form only crowds out the rest.
    if let Some(start) = find_unquoted(&line, FILE_FORM) {
        let end = find_unquoted(&line[start..], ")").map_or(line.len(), |e| start + e + 1);
        line.replace_range(start..end, "");
    }
    if line.chars().count() <= REASON_CHARS {
        return line;
    }
    let mut s: String = line.chars().take(REASON_CHARS).collect();
    s.push_str("...");
    // The fix is what the reader needs most: never cut it off.
    if let Some(at) = find_unquoted(&line, FIX) {
        // The flag and its value: `--allow pypi.org:443@203.0.113.80/32`
        // (after `--default`, when the built-in rule is to be kept).
        let mut words = line[at + FIX.len()..].split(' ');
        let mut flag = words.next().unwrap_or_default().to_string();
        if flag == "default" {
            if let Some(next) = words.next() {
                flag = format!("default {next}");
            }
        }
        // `--allow=-name:443` is one word (a value beginning with `-`).
        let arg = match flag.contains('=') {
            true => Some(flag.trim_end_matches([',', ';', ')']).to_string()),
            false => words.next().map(|value| {
                let value = value.trim_end_matches([',', ';', ')']);
                format!("{flag} {value}")
            }),
        };
        if let Some(arg) = arg {
            if !s.contains(&format!("{FIX}{arg}")) {
                s.push_str(&format!(" fix: --{arg}"));
            }
        }
    }
    s
}

/// Where `pat` first occurs in `line` outside a quoted string. A reason
/// quotes what the client sent (`{:?}`-escaped: a fronting refusal's
/// `Host`, spaces and all); those words are CMD's, never the proxy's fix.
fn find_unquoted(line: &str, pat: &str) -> Option<usize> {
    let (mut quoted, mut escaped) = (false, false);
    for (i, c) in line.char_indices() {
        if !quoted && line[i..].starts_with(pat) {
            return Some(i);
        }
        match c {
            '\\' if quoted && !escaped => {
                escaped = true;
                continue;
            }
            '"' if !escaped => quoted = !quoted,
            _ => {}
        }
        escaped = false;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distinct_entries_are_bounded() {
        let mut t = Tally::default();
        for i in 0..MAX_DISTINCT + 10 {
            t.dns_query(&format!("n{i}.example"));
            t.refused(&format!("n{i}.example:443"), None, false);
        }
        t.dns_query("n0.example");
        assert_eq!((t.dns.len(), t.refused.len()), (MAX_DISTINCT, MAX_DISTINCT));
        let s = t.summary(None).unwrap();
        let want = format!("refused {} connections: ", MAX_DISTINCT + 10);
        assert!(s.starts_with(&want), "{s}");
        let want = format!("and {} more, 10 more not told apart;", MAX_DISTINCT - 5);
        assert!(s.contains(&want), "{s}");
        let want = format!("refused {} DNS queries", MAX_DISTINCT + 11);
        assert!(s.contains(&want), "{s}");
        assert!(s.contains(": n0.example x2, "), "{s}");
    }

    #[test]
    fn nothing_refused_says_nothing() {
        assert_eq!(Tally::default().summary(None), None);
    }

    #[test]
    fn destinations_by_count_then_first_seen_with_the_log() {
        let mut t = Tally::default();
        t.refused("10.0.0.5:22", Some("10.0.0.5 is a private address"), false);
        t.refused(
            "pypi.org:443",
            Some("no rule allows this destination"),
            false,
        );
        t.refused("pypi.org:443", Some("a later reason"), false);
        assert_eq!(
            t.summary(Some(Path::new("/tmp/x.log"))).unwrap(),
            "refused 3 connections: pypi.org:443 x2 (no rule allows this destination), \
             10.0.0.5:22 x1 (10.0.0.5 is a private address); log: /tmp/x.log"
        );
    }

    #[test]
    fn a_fix_is_given_as_its_flag() {
        let mut t = Tally::default();
        t.refused(
            "files.example:443",
            Some(
                "no rule allows this destination: use --allow files.example:443 \
                 (in a policy file: hosts = [\"files.example\"], ports = [443])",
            ),
            false,
        );
        t.refused(
            "pypi.org:443",
            Some(
                "203.0.113.80 is a documentation address and rule \"--allow pypi.org:443\" \
                 does not name it: to allow it for this destination alone, use \
                 --allow pypi.org:443@203.0.113.80/32 (in a policy file: hosts = \
                 [\"pypi.org\"], cidrs = [\"203.0.113.80/32\"], match = \"both\", ports = \
                 [443]); rule \"--allow pypi.org:443\": mirrors only",
            ),
            false,
        );
        assert_eq!(
            t.summary(None).unwrap(),
            "refused 2 connections: files.example:443 x1 (no rule allows this destination: \
             use --allow files.example:443), pypi.org:443 x1 (203.0.113.80 is a documentation \
             address and rule \"--allow pypi.org:443\" does not name it: ... fix: \
             --allow pypi.org:443@203.0.113.80/32); details: rerun with --log-file FILE"
        );
    }

    /// CMD's own words, quoted in a reason (a fronting refusal quotes the
    /// `Host` it sent, spaces and all), are never taken for the proxy's
    /// fix, nor do they cut the reason short.
    #[test]
    fn a_fix_quoted_from_the_client_is_not_the_proxys() {
        let mut t = Tally::default();
        let pad = "a".repeat(70);
        let reason = format!(
            "fronting host=\"{pad} then use --upstream-proxy http://evil.example:8080 now\" \
             target=127.0.0.1:8000: not a host name, on port 8000, which an inspecting rule covers"
        );
        t.refused("127.0.0.1:8000", Some(&reason), false);
        let s = t.summary(None).unwrap();
        assert!(!s.contains("fix:"), "{s}");
        let mut t = Tally::default();
        let reason = format!(
            "fronting host=\"{pad} (in a policy file: \" target=127.0.0.1:8000: \
             not a host name (on port 8000)"
        );
        t.refused("127.0.0.1:8000", Some(&reason), false);
        let s = t.summary(None).unwrap();
        assert!(
            s.contains(&format!("(fronting host=\"{}", "a".repeat(70))),
            "{s}"
        );
        assert!(
            !s.contains("on port 8000"),
            "cut at 90 characters, as it stands: {s}"
        );
        let mut t = Tally::default();
        let reason = "fronting host=\"a (in a policy file: \" target=a:1: not a host name";
        t.refused("a:1", Some(reason), false);
        assert!(
            t.summary(None).unwrap().contains("target=a:1"),
            "nothing left out"
        );
    }

    #[test]
    fn a_fix_joined_by_an_equals_sign_is_given_whole() {
        let mut t = Tally::default();
        let name = format!("-{}.example", "x".repeat(120));
        t.refused(
            &format!("{name}:443"),
            Some(&format!(
                "no rule allows this destination: use --allow={name}:443 \
                 (in a policy file: hosts = [\"{name}\"], ports = [443])"
            )),
            false,
        );
        let s = t.summary(None).unwrap();
        assert!(s.contains(&format!("... fix: --allow={name}:443)")), "{s}");
    }

    #[test]
    fn a_fix_that_keeps_the_builtin_rule_is_given_whole() {
        let mut t = Tally::default();
        t.refused(
            "very-long-name-for-a-package-mirror.internal.example:8080",
            Some(
                "port 8080 is not among the ports of the built-in rule \"default-public-web\" \
                 (80, 443), which matches very-long-name-for-a-package-mirror.internal.example: \
                 use --default --allow very-long-name-for-a-package-mirror.internal.example:8080 \
                 (a rule flag alone replaces the built-in rule; --default keeps it)",
            ),
            false,
        );
        let s = t.summary(None).unwrap();
        assert!(
            s.contains(
                "... fix: --default --allow very-long-name-for-a-package-mirror.internal.example:8080)"
            ),
            "{s}"
        );
    }

    #[test]
    fn dns_queries_top_n_audit_and_hostile_reasons() {
        let mut t = Tally::default();
        for i in 0..7 {
            t.refused(&format!("h{i}:443"), Some("bad\nline"), true);
        }
        t.dns_query("example.com");
        t.dns_query("example.com");
        let s = t.summary(None).unwrap();
        assert!(
            s.starts_with("would have refused 7 connections: h0:443 x1 (badline)"),
            "{s}"
        );
        assert!(s.contains("h4:443 x1 (badline), and 2 more;"), "{s}");
        assert!(
            s.contains(
                "refused 2 DNS queries CMD sent directly, ignoring the proxy: example.com x2"
            ),
            "{s}"
        );
        assert!(s.ends_with("details: rerun with --log-file FILE"), "{s}");
        assert!(!s.contains('\n'));
        let long = "x".repeat(200);
        let mut t = Tally::default();
        t.refused("a:1", Some(&long), false);
        assert!(t
            .summary(None)
            .unwrap()
            .contains(&format!("({}...)", "x".repeat(90))));
    }
}
