//! Request rules for inspected HTTP: method and path-glob matching.
//!
//! One inspecting rule's request rules ([`RuleRequests`]): a deny request
//! rule beats any allow; a request no rule matches is denied; no request
//! rules allow every request.
//!
//! A connection is inspected under the request rules of **every** matching
//! inspecting rule ([`RequestRules`]): a request passes only if each of them
//! allows it (intersection), so a second inspecting rule can only narrow.
//!
//! Paths are decoded first (`path.rs`) and judged under every reading an
//! origin may give them: a deny request rule matches if it matches any
//! reading, an allow request rule set allows only if every reading is
//! allowed. Deny request rules also match generously, as lenient origins
//! route: method and path compared ASCII-case-insensitively (Express and
//! ASP.NET route `/ADMIN` to `/admin`), a trailing `/` ignored on either
//! side, and each reading judged again folded as some origins fold it
//! (`path::folded`: `ı` and `İ` as `i`, `ſ` as `s`, fullwidth ASCII as
//! ASCII, trailing dots and spaces dropped). Allow request rules match
//! exactly.

use std::sync::Arc;

use super::{Action, PolicyError, RequestRuleConfig, RequestVerdict, TlsMode, DEFAULT_UPGRADES};
use crate::target::path::{self, Path};

/// One compiled request rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RequestRule {
    /// `"<rule name> requests[i]"`, the name verdicts carry.
    label: Arc<str>,
    action: Action,
    /// `None`: any method.
    method: Option<String>,
    /// The path pattern, one item per `/`-separated segment.
    path: Vec<Seg>,
}

/// One segment of a path pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seg {
    /// `**`: zero or more whole segments.
    AnyDepth,
    /// A segment glob on decoded bytes: `*` matches any run of bytes.
    Glob(Vec<u8>),
}

/// The inspection settings and request rules of one inspecting rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RuleRequests {
    /// The inspecting rule's name.
    pub(crate) name: Arc<str>,
    /// In file order; empty means every request is allowed.
    rules: Vec<RequestRule>,
    /// The verdict's name when requests are given and none matches.
    no_match: Arc<str>,
    /// Audit mode (the rule's or the policy's): denials become would-deny.
    pub(crate) audit: bool,
    /// `Upgrade` tokens that may switch the connection to raw bytes, lower-case.
    pub(crate) upgrades: Vec<String>,
    /// Whether the rule terminates TLS.
    pub(crate) tls: TlsMode,
}

/// The request rules a connection is inspected under: those of every
/// matching inspecting rule, all of which must allow a request. The default
/// holds none and allows every request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RequestRules {
    /// The first part's rule name (empty for the default).
    name: Arc<str>,
    /// One per inspecting rule, in policy order.
    parts: Vec<Arc<RuleRequests>>,
}

impl RuleRequests {
    /// Compiles the request rules of the inspecting rule `rule`.
    pub(crate) fn compile(
        rule: Arc<str>,
        requests: &[RequestRuleConfig],
        upgrades: Option<&[String]>,
        tls: TlsMode,
        audit: bool,
    ) -> Result<RuleRequests, PolicyError> {
        let rules = requests
            .iter()
            .enumerate()
            .map(|(i, r)| compile_one(&rule, i, r))
            .collect::<Result<Vec<_>, _>>()?;
        let upgrades = match upgrades {
            None => DEFAULT_UPGRADES.iter().map(|u| u.to_string()).collect(),
            Some(list) => list
                .iter()
                .enumerate()
                .map(|(i, u)| {
                    if !u.is_empty() && u.bytes().all(is_tchar) {
                        Ok(u.to_ascii_lowercase())
                    } else {
                        Err(PolicyError::field(
                            &rule,
                            format!("upgrades[{i}]"),
                            format!("{u:?} is not an Upgrade token (e.g. \"websocket\")"),
                        ))
                    }
                })
                .collect::<Result<Vec<_>, _>>()?,
        };
        Ok(RuleRequests {
            no_match: format!("{rule}: no request rule matched").into(),
            name: rule,
            rules,
            audit,
            upgrades,
            tls,
        })
    }

    /// The request rules, for `--check`: `(action, method or "*", path)`.
    pub(crate) fn describe(&self) -> Vec<(Action, String, String)> {
        self.rules
            .iter()
            .map(|r| {
                let method = r.method.clone().unwrap_or_else(|| "*".into());
                (r.action, method, pattern_text(&r.path))
            })
            .collect()
    }

    /// Whether there are no request rules.
    pub(crate) fn allows_all(&self) -> bool {
        self.rules.is_empty()
    }

    /// This rule's own verdict on a request: the allowing label, or the
    /// denying one.
    /// `folded`: the readings as folding origins read them, judged by deny
    /// rules only.
    fn judge(
        &self,
        method: &str,
        readings: &[Vec<&[u8]>],
        folded: &[Vec<&[u8]>],
    ) -> Result<Arc<str>, Arc<str>> {
        if self.rules.is_empty() {
            return Ok(self.name.clone());
        }
        let denies = self.rules.iter().filter(|r| r.action == Action::Deny);
        for r in denies {
            if readings
                .iter()
                .chain(folded)
                .any(|segs| r.matches_generously(method, segs))
            {
                return Err(r.label.clone());
            }
        }
        let allowing = |segs: &[&[u8]]| {
            self.rules
                .iter()
                .find(|r| r.action == Action::Allow && r.matches_exactly(method, segs))
        };
        let mut label = None;
        for segs in readings {
            match allowing(segs) {
                Some(r) => {
                    label.get_or_insert_with(|| r.label.clone());
                }
                None => return Err(self.no_match.clone()),
            }
        }
        label.ok_or_else(|| self.no_match.clone())
    }
}

impl RequestRules {
    /// Request rules of one inspecting rule named `rule` (enforced, default
    /// upgrades, no TLS termination). No request rules: every request is allowed.
    pub fn new(
        rule: Arc<str>,
        requests: &[RequestRuleConfig],
    ) -> Result<RequestRules, PolicyError> {
        let part = RuleRequests::compile(rule, requests, None, TlsMode::Passthrough, false)?;
        Ok(RequestRules::all_of(vec![Arc::new(part)]))
    }

    /// The intersection of several rules' request rules (policy order).
    pub(crate) fn all_of(parts: Vec<Arc<RuleRequests>>) -> RequestRules {
        let name = parts.first().map(|p| p.name.clone()).unwrap_or_default();
        RequestRules { name, parts }
    }

    /// The name of the (first) inspecting rule these request rules come from.
    pub fn rule_name(&self) -> &Arc<str> {
        &self.name
    }

    /// The names of every inspecting rule whose request rules apply.
    pub fn rule_names(&self) -> Vec<Arc<str>> {
        self.parts.iter().map(|p| p.name.clone()).collect()
    }

    /// Whether every request is allowed (no applicable rule has request rules).
    pub fn allows_all(&self) -> bool {
        self.parts.iter().all(|p| p.allows_all())
    }

    /// Whether TLS is terminated (some applicable rule has `tls = "terminate"`).
    pub fn terminates_tls(&self) -> bool {
        self.parts.iter().any(|p| p.tls == TlsMode::Terminate)
    }

    /// Checks a request's method and path against every applicable rule.
    ///
    /// `path` should be the output of [`super::normalize_path`] (the session
    /// answers 400 when that fails); it is decoded again here, which changes
    /// nothing for a normalised path, and a path that cannot be judged is
    /// denied. The query is ignored.
    ///
    /// [`RequestVerdict::Deny`] if an enforcing rule denies;
    /// [`RequestVerdict::WouldDeny`] if only audit-mode rules deny;
    /// [`RequestVerdict::Allow`] otherwise, naming the allowing request rules.
    pub fn check(&self, method: &str, path: &str) -> RequestVerdict {
        let parsed: Path = match path::parse(path) {
            Ok(p) => p,
            Err(why) => {
                return RequestVerdict::Deny(
                    format!("{}: path not judged: {why}", self.name).into(),
                )
            }
        };
        let readings = parsed.readings();
        // Only deny rules judge the folded readings: with none, the copy of
        // every segment folding makes would be thrown away.
        let denies = self
            .parts
            .iter()
            .any(|p| p.rules.iter().any(|r| r.action == Action::Deny));
        let folded = if denies {
            path::folded(&readings)
        } else {
            Vec::new()
        };
        let folded: Vec<Vec<&[u8]>> = folded
            .iter()
            .map(|r| r.iter().map(Vec::as_slice).collect())
            .collect();
        self.combine(|part| part.judge(method, &readings, &folded))
    }

    /// Checks an `Upgrade` token (case-insensitive): may the connection switch
    /// to raw bytes for it? Every applicable rule must list it (by default
    /// only `websocket`). With no applicable rule, only the default tokens pass.
    pub fn check_upgrade(&self, token: &str) -> RequestVerdict {
        if self.parts.is_empty() {
            let ok = DEFAULT_UPGRADES
                .iter()
                .any(|u| u.eq_ignore_ascii_case(token));
            let label: Arc<str> = format!("upgrade {token:?}").into();
            return if ok {
                RequestVerdict::Allow(label)
            } else {
                RequestVerdict::Deny(format!("upgrade {token:?} is not allowed").into())
            };
        }
        self.combine(|part| {
            if part.upgrades.iter().any(|u| u.eq_ignore_ascii_case(token)) {
                Ok(part.name.clone())
            } else {
                Err(format!("{}: upgrade {token:?} is not allowed", part.name).into())
            }
        })
    }

    /// Deny if an enforcing part denies, would-deny if only audit parts do,
    /// else allow with the parts' labels joined.
    fn combine(
        &self,
        mut judge: impl FnMut(&RuleRequests) -> Result<Arc<str>, Arc<str>>,
    ) -> RequestVerdict {
        let mut would: Option<Arc<str>> = None;
        let mut allowed: Vec<Arc<str>> = Vec::with_capacity(self.parts.len());
        for part in &self.parts {
            match judge(part) {
                Ok(label) => allowed.push(label),
                Err(label) if part.audit => {
                    would.get_or_insert(label);
                }
                Err(label) => return RequestVerdict::Deny(label),
            }
        }
        if let Some(label) = would {
            return RequestVerdict::WouldDeny(label);
        }
        match allowed.len() {
            0 => RequestVerdict::Allow(self.name.clone()),
            1 => RequestVerdict::Allow(allowed.swap_remove(0)),
            _ => {
                let names: Vec<&str> = allowed.iter().map(|l| l.as_ref()).collect();
                RequestVerdict::Allow(names.join(" + ").into())
            }
        }
    }
}

impl RequestRule {
    fn matches_exactly(&self, method: &str, segs: &[&[u8]]) -> bool {
        let method_ok = self.method.as_deref().is_none_or(|m| m == method);
        method_ok && path_matches(&self.path, segs, false)
    }

    /// Deny matching: case-insensitive, and a trailing `/` on the path does
    /// not matter (patterns lost theirs when compiled).
    fn matches_generously(&self, method: &str, segs: &[&[u8]]) -> bool {
        let method_ok = self
            .method
            .as_deref()
            .is_none_or(|m| m.eq_ignore_ascii_case(method));
        if !method_ok {
            return false;
        }
        path_matches(&self.path, segs, true)
            || matches!(segs.split_last(), Some((last, rest)) if last.is_empty() && path_matches(&self.path, rest, true))
    }
}

fn compile_one(rule: &str, i: usize, cfg: &RequestRuleConfig) -> Result<RequestRule, PolicyError> {
    let fail =
        |key: &str, msg: String| PolicyError::field(rule, format!("requests[{i}].{key}"), msg);
    let method = match cfg.method.as_deref() {
        None | Some("*") => None,
        Some(m) if !m.is_empty() && m.bytes().all(is_tchar) => Some(m.to_owned()),
        Some(m) => {
            return Err(fail(
                "method",
                format!("{m:?}: not a method token (e.g. \"GET\", or \"*\" for any)"),
            ))
        }
    };
    let mut path = match cfg.path.as_deref() {
        None => vec![Seg::AnyDepth],
        Some(p) => compile_path(p).map_err(|e| fail("path", format!("{p:?}: {e}")))?,
    };
    if cfg.action == Action::Deny && path.len() > 1 && path.last() == Some(&Seg::Glob(Vec::new())) {
        // A deny ignores a trailing `/` (see matches_generously).
        path.pop();
    }
    if cfg.action == Action::Allow
        && path
            .iter()
            .any(|s| matches!(s, Seg::Glob(g) if g.contains(&b';')))
    {
        return Err(fail(
            "path",
            "';' in an allow pattern: requests are also judged with their ';' parameters cut, \
             so it could never allow; use '*' (e.g. \"/items/*\")"
                .into(),
        ));
    }
    Ok(RequestRule {
        label: format!("{rule} requests[{i}]").into(),
        action: cfg.action,
        method,
        path,
    })
}

/// Decodes a pattern like a request path (so `%7e` and `~` are the same),
/// refusing `..` and a query, then splits it into segments.
fn compile_path(p: &str) -> Result<Vec<Seg>, String> {
    if p.contains('?') {
        return Err("a path pattern cannot contain a query ('?')".into());
    }
    let raw_segments = p
        .split('/')
        .map(|s| s.replace("%2e", ".").replace("%2E", "."));
    if raw_segments.into_iter().any(|s| s == "..") {
        return Err("'..' segments are not allowed".into());
    }
    let parsed = path::parse(p)?;
    let mut segs = Vec::new();
    for s in parsed.segments() {
        if s == b"**" {
            // `**/**` is `**`; collapsing keeps matching linear.
            if segs.last() != Some(&Seg::AnyDepth) {
                segs.push(Seg::AnyDepth);
            }
        } else if s.windows(2).any(|w| w == b"**") {
            return Err("'**' must be a whole segment (use '*' within a segment)".into());
        } else {
            segs.push(Seg::Glob(s.to_vec()));
        }
    }
    Ok(segs)
}

/// A compiled pattern written back, for `--check`.
fn pattern_text(pat: &[Seg]) -> String {
    if pat.is_empty() {
        return "/".into();
    }
    let mut s = String::new();
    for seg in pat {
        s.push('/');
        match seg {
            Seg::AnyDepth => s.push_str("**"),
            Seg::Glob(g) => s.push_str(&String::from_utf8_lossy(g)),
        }
    }
    s
}

// Steps the matchers took on this thread: tests bound the work on hostile
// input by this count, not by a clock.
#[cfg(test)]
thread_local! {
    pub(crate) static MATCH_STEPS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

#[inline]
fn count_step() {
    #[cfg(test)]
    MATCH_STEPS.with(|c| c.set(c.get() + 1));
}

/// Whether `pat` matches the path segments `segs`. Greedy matching with
/// backtracking to the last `**` only: O(pattern × path), whatever the input.
fn path_matches(pat: &[Seg], segs: &[&[u8]], fold: bool) -> bool {
    let (mut p, mut s) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while s < segs.len() {
        count_step();
        match pat.get(p) {
            Some(Seg::AnyDepth) => {
                star = Some((p, s));
                p += 1;
            }
            Some(Seg::Glob(g)) if glob_matches(g, segs[s], fold) => {
                p += 1;
                s += 1;
            }
            _ => match star {
                Some((sp, ss)) => {
                    star = Some((sp, ss + 1));
                    p = sp + 1;
                    s = ss + 1;
                }
                None => return false,
            },
        }
    }
    pat[p..].iter().all(|x| *x == Seg::AnyDepth)
}

/// Whether a segment glob (`*` = any run of bytes) matches `text`, ASCII
/// case-insensitively when `fold`. Same greedy-with-backtracking scheme as
/// [`path_matches`].
fn glob_matches(pat: &[u8], text: &[u8], fold: bool) -> bool {
    let eq = |a: u8, b: u8| a == b || (fold && a.eq_ignore_ascii_case(&b));
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        count_step();
        match pat.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
            }
            Some(&c) if eq(c, text[t]) => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    star = Some((sp, st + 1));
                    p = sp + 1;
                    t = st + 1;
                }
                None => return false,
            },
        }
    }
    pat[p..].iter().all(|&c| c == b'*')
}

/// RFC 9110 `tchar`: what a method or an `Upgrade` token may contain.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}
