//! Request rules for inspected HTTP: method and path-glob matching, and the
//! path normalisation that makes every spelling of a path meet the same rule.
//!
//! Semantics: a deny request rule beats any allow; a request no rule matches
//! is denied; an inspecting rule with no request rules allows every request.

use std::sync::Arc;

use super::{Action, PolicyError, RequestRuleConfig, RequestRules, RequestVerdict};

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
    /// A segment glob: `*` matches any run of characters except `/`.
    Glob(String),
}

impl RequestRules {
    /// Compiles the request rules of the rule named `rule` (which inspects).
    /// No request rules: every request is allowed.
    pub fn new(
        rule: Arc<str>,
        requests: &[RequestRuleConfig],
    ) -> Result<RequestRules, PolicyError> {
        let rules = requests
            .iter()
            .enumerate()
            .map(|(i, r)| {
                compile_one(&rule, i, r)
                    .map_err(|e| PolicyError(format!("rule {rule:?}: requests[{i}]: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let no_match = format!("{rule}: no request rule matched").into();
        Ok(RequestRules {
            name: rule,
            rules,
            no_match,
        })
    }

    /// The name of the rule these request rules belong to.
    pub fn rule_name(&self) -> &Arc<str> {
        &self.name
    }

    /// Whether the rule has no request rules (every request is allowed).
    pub fn allows_all(&self) -> bool {
        self.rules.is_empty()
    }

    /// Checks a request's method (exact, case-sensitive) and path.
    ///
    /// `path` must already be normalised with [`normalize_path`]: the session
    /// does that, and refuses a request whose target does not normalise. As a
    /// defence, anything from a `?` on is ignored here.
    pub fn check(&self, method: &str, path: &str) -> RequestVerdict {
        if self.rules.is_empty() {
            return RequestVerdict::Allow(self.name.clone());
        }
        let path = path.split_once('?').map_or(path, |(p, _)| p);
        let segs: Vec<&str> = path.strip_prefix('/').unwrap_or(path).split('/').collect();
        let matching = |action: Action| {
            self.rules
                .iter()
                .find(|r| r.action == action && r.matches(method, &segs))
        };
        if let Some(r) = matching(Action::Deny) {
            return RequestVerdict::Deny(r.label.clone());
        }
        if let Some(r) = matching(Action::Allow) {
            return RequestVerdict::Allow(r.label.clone());
        }
        RequestVerdict::Deny(self.no_match.clone())
    }
}

impl RequestRule {
    fn matches(&self, method: &str, segs: &[&str]) -> bool {
        let method_ok = match &self.method {
            Some(m) => m == method,
            None => true,
        };
        method_ok && path_matches(&self.path, segs)
    }
}

fn compile_one(rule: &str, i: usize, cfg: &RequestRuleConfig) -> Result<RequestRule, String> {
    let method = match cfg.method.as_deref() {
        None | Some("*") => None,
        Some(m) if !m.is_empty() && m.bytes().all(is_tchar) => Some(m.to_owned()),
        Some(m) => {
            return Err(format!(
                "method {m:?}: not a method token (e.g. \"GET\", or \"*\" for any)"
            ))
        }
    };
    let path = match cfg.path.as_deref() {
        None => vec![Seg::AnyDepth],
        Some(p) => compile_path(p).map_err(|e| format!("path {p:?}: {e}"))?,
    };
    Ok(RequestRule {
        label: format!("{rule} requests[{i}]").into(),
        action: cfg.action,
        method,
        path,
    })
}

/// Normalises a pattern like a request path (so `%7e` and `~` are the same),
/// refusing `..`, then splits it into segments.
fn compile_path(p: &str) -> Result<Vec<Seg>, String> {
    if p.contains('?') {
        return Err("a path pattern cannot contain a query ('?')".into());
    }
    let decoded = decode(p)?;
    if decoded.split('/').any(|s| s == "..") {
        return Err("'..' segments are not allowed".into());
    }
    let norm = remove_dot_segments(&collapse_slashes(&decoded));
    let mut segs = Vec::new();
    for s in norm[1..].split('/') {
        if s == "**" {
            // `**/**` is `**`; collapsing keeps matching linear.
            if segs.last() != Some(&Seg::AnyDepth) {
                segs.push(Seg::AnyDepth);
            }
        } else if s.contains("**") {
            return Err("'**' must be a whole segment (use '*' within a segment)".into());
        } else {
            segs.push(Seg::Glob(s.to_owned()));
        }
    }
    Ok(segs)
}

/// Whether `pat` matches the path segments `segs`. Greedy matching with
/// backtracking to the last `**` only: O(pattern × path), whatever the input.
fn path_matches(pat: &[Seg], segs: &[&str]) -> bool {
    let (mut p, mut s) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while s < segs.len() {
        match pat.get(p) {
            Some(Seg::AnyDepth) => {
                star = Some((p, s));
                p += 1;
            }
            Some(Seg::Glob(g)) if glob_matches(g.as_bytes(), segs[s].as_bytes()) => {
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

/// Whether a segment glob (`*` = any run of bytes) matches `text`. Same
/// greedy-with-backtracking scheme as [`path_matches`].
fn glob_matches(pat: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pat.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
            }
            Some(&c) if c == text[t] => {
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

/// RFC 9110 `tchar`: what a method token may contain.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Normalises an origin-form request target (`/a/b?x=1`) to the path that
/// request rules see, so that no spelling slips past a rule:
///
/// - the query (from `?`) is dropped;
/// - percent-escapes of unreserved characters (`A-Z a-z 0-9 - . _ ~`) are
///   decoded, other escapes upper-cased (`%c3%a9` → `%C3%A9`), and bytes
///   that are not allowed in a path (spaces excepted: refused) percent-encoded;
/// - `//` becomes `/`, then dot segments are removed as in RFC 3986
///   §5.2.4 (`/v1/../admin` → `/admin`, never above the root).
///
/// Refused, with the reason: a target not starting with `/`; an encoded `/`
/// (`%2F`) or `\` (`%5C`), a literal `\`; control characters or NUL, raw or
/// encoded; a space; a `#`; an invalid escape.
pub fn normalize_path(raw: &str) -> Result<String, String> {
    let path = raw.split_once('?').map_or(raw, |(p, _)| p);
    let decoded = decode(path)?;
    Ok(remove_dot_segments(&collapse_slashes(&decoded)))
}

/// The escape-level part of [`normalize_path`] (no dot or slash handling).
fn decode(path: &str) -> Result<String, String> {
    if !path.starts_with('/') {
        return Err("the path does not start with '/'".into());
    }
    let b = path.as_bytes();
    let mut out = String::with_capacity(path.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'%' {
            let hex = |j: usize| b.get(j).and_then(|&h| (h as char).to_digit(16));
            let (Some(hi), Some(lo)) = (hex(i + 1), hex(i + 2)) else {
                return Err(format!("invalid percent-escape at byte {i}"));
            };
            let v = (hi * 16 + lo) as u8;
            match v {
                b'/' => return Err("encoded '/' (%2F) in the path".into()),
                b'\\' => return Err("encoded '\\' (%5C) in the path".into()),
                0..=0x1f | 0x7f => {
                    return Err(format!("encoded control character (%{v:02X}) in the path"))
                }
                _ if is_unreserved(v) => out.push(v as char),
                _ => out.push_str(&format!("%{v:02X}")),
            }
            i += 3;
            continue;
        }
        match c {
            b'\\' => return Err("'\\' in the path".into()),
            0..=0x1f | 0x7f => return Err("control character in the path".into()),
            b' ' => return Err("space in the path".into()),
            b'#' => return Err("'#' in the path".into()),
            _ if is_unreserved(c) || is_path_char(c) => out.push(c as char),
            // Non-ASCII and other bytes a path may not carry raw: encode, so
            // a raw and an encoded spelling normalise alike.
            _ => out.push_str(&format!("%{c:02X}")),
        }
        i += 1;
    }
    Ok(out)
}

/// RFC 3986 unreserved.
fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// Besides unreserved: sub-delims, `:`, `@` (pchar) and the `/` separator.
fn is_path_char(b: u8) -> bool {
    matches!(
        b,
        b'!' | b'$'
            | b'&'
            | b'\''
            | b'('
            | b')'
            | b'*'
            | b'+'
            | b','
            | b';'
            | b'='
            | b':'
            | b'@'
            | b'/'
    )
}

/// `//` (any run of slashes) becomes `/`.
fn collapse_slashes(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for c in path.chars() {
        if c == '/' && out.ends_with('/') {
            continue;
        }
        out.push(c);
    }
    out
}

/// RFC 3986 §5.2.4 on an absolute path without empty segments: `.` goes,
/// `..` drops the previous segment (never above the root), and a path ending
/// in `.` or `..` keeps its trailing slash.
fn remove_dot_segments(path: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    let mut trailing = false;
    for seg in path[1..].split('/') {
        trailing = false;
        match seg {
            "." => trailing = true,
            ".." => {
                out.pop();
                trailing = true;
            }
            s => out.push(s),
        }
    }
    let mut s = String::with_capacity(path.len());
    for seg in &out {
        s.push('/');
        s.push_str(seg);
    }
    if trailing || s.is_empty() {
        s.push('/');
    }
    s
}
