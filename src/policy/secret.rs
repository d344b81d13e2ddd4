//! Credential injection: `[[secrets]]` tables. CMD (under `run`, or after
//! `portcullis env`) holds a placeholder in the secret's variable instead of
//! its value; inside an inspected exchange a placeholder in a request
//! header bound for one of the secret's hosts is replaced by the value, and
//! anywhere else it is refused. The value lives only here: [`Secret`]'s
//! `Debug` hides it, and no message this module writes quotes it.

use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use serde::Deserialize;

use super::rule::{parse_host_pattern, HostPattern, Pattern};
use super::{Host, Target};

/// What every placeholder starts with: recognisable in logs and headers.
pub const PLACEHOLDER_PREFIX: &str = "portcullis-secret-";

/// A head's header lines, as parsed: names as received, values as bytes.
pub type Headers = Vec<(String, Vec<u8>)>;

/// One `[[secrets]]` table as written.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SecretConfig {
    /// The variable CMD gets the placeholder in (`ANTHROPIC_API_KEY`).
    pub name: String,
    /// The value is in this variable of the proxy's environment.
    #[serde(default)]
    pub env: Option<String>,
    /// The value is this file's contents (a final newline dropped).
    #[serde(default)]
    pub file: Option<String>,
    /// The hosts the value may be sent to (rule host syntax: `api.test`,
    /// `*.api.test`, an address literal).
    #[serde(default)]
    pub hosts: Vec<String>,
    /// The request headers it may be sent in (any case); absent: any header.
    #[serde(default)]
    pub headers: Option<Vec<String>>,
    /// Whether it may also be sent over plaintext HTTP (`http://`, a
    /// plaintext inspected tunnel). Off by default: there anyone on the path
    /// reads it, and nothing authenticated the host it goes to, so `hosts`
    /// would bind it to whoever answers for the name.
    #[serde(default)]
    pub plaintext: bool,
}

/// Where a secret may go.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Dest {
    Name(HostPattern),
    Addr(IpAddr),
}

/// A loaded secret: its placeholder, its value, where it may go.
#[derive(Clone)]
pub struct Secret {
    name: Arc<str>,
    placeholder: String,
    value: Vec<u8>,
    env: Option<String>,
    /// The file the value came from, if any (as opened).
    file: Option<PathBuf>,
    hosts: Vec<Dest>,
    /// The hosts as written, for messages.
    hosts_text: Vec<String>,
    /// Lower-case header names; `None`: any header.
    headers: Option<Vec<String>>,
    /// May go over plaintext HTTP too.
    plaintext: bool,
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the value.
        f.debug_struct("Secret")
            .field("name", &self.name)
            .field("hosts", &self.hosts_text)
            .field("headers", &self.headers)
            .finish_non_exhaustive()
    }
}

impl Drop for Secret {
    fn drop(&mut self) {
        // A reload drops the old values: leave no copy in freed memory.
        self.value.fill(0);
    }
}

impl Secret {
    /// The secret's name (CMD's variable).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What CMD gets instead of the value.
    pub fn placeholder(&self) -> &str {
        &self.placeholder
    }

    /// The proxy's variable the value came from, if any (kept out of CMD's
    /// environment).
    pub fn env_source(&self) -> Option<&str> {
        self.env.as_deref()
    }

    /// The file the value was read from, if any: `run` refuses it, since
    /// CMD runs with the proxy's uid and files and could read it there.
    pub fn file_source(&self) -> Option<&Path> {
        self.file.as_deref()
    }

    /// The value: for scrubbing it out of CMD's environment only.
    pub fn value(&self) -> &[u8] {
        &self.value
    }

    /// The hosts as written.
    pub fn hosts(&self) -> &[String] {
        &self.hosts_text
    }

    /// Whether the value may be sent to `host`.
    pub fn allows_host(&self, host: &Host) -> bool {
        self.hosts.iter().any(|d| match (d, host) {
            (Dest::Name(p), Host::Domain(name)) => p.matches_name(name),
            (Dest::Addr(a), Host::Ip(ip)) => a == ip,
            _ => false,
        })
    }

    /// The hosts (as written) no inspecting allow rule covers: there a
    /// placeholder travels inside a raw tunnel and cannot be replaced. A
    /// secret without `plaintext = true` counts terminating rules only.
    pub(crate) fn uninspected_hosts(&self, rules: &[super::rule::Rule]) -> Vec<&str> {
        let inspecting = || {
            rules.iter().filter(|r| {
                r.action == super::Action::Allow
                    && r.inspect
                        .as_ref()
                        .is_some_and(|i| self.plaintext || i.tls == super::TlsMode::Terminate)
            })
        };
        self.hosts
            .iter()
            .zip(&self.hosts_text)
            .filter(|(d, _)| {
                !inspecting().any(|r| match d {
                    // A name the pattern covers stands for all of them.
                    Dest::Name(HostPattern::Exact(n)) => r.host_matches(&Host::Domain(n.clone())),
                    Dest::Name(HostPattern::Suffix(s)) => {
                        r.host_matches(&Host::Domain(format!("x{s}")))
                    }
                    Dest::Name(HostPattern::Any) => r.hosts.contains(&HostPattern::Any),
                    Dest::Addr(a) => {
                        r.host_matches(&Host::Ip(*a)) || r.cidrs.iter().any(|c| c.contains(*a))
                    }
                })
            })
            .map(|(_, t)| t.as_str())
            .collect()
    }

    fn allows_header(&self, name: &str) -> bool {
        self.headers
            .as_ref()
            .is_none_or(|hs| hs.iter().any(|h| h.eq_ignore_ascii_case(name)))
    }
}

/// Why a request carrying a placeholder is refused (`403`,
/// `X-Proxy-Error: secret-not-allowed`). Names the secret, never its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretRefusal {
    /// The secret's name.
    pub secret: Arc<str>,
    /// What was wrong, and the key that would allow it.
    pub why: String,
}

/// The secrets of a configuration.
#[derive(Debug, Clone, Default)]
pub struct Secrets {
    list: Vec<Secret>,
}

impl Secrets {
    /// Reads every secret's value (`file` paths relative to `base`) and
    /// draws its placeholder with `key`. Errors name the key at fault
    /// (`secrets[N].env`) and never quote a value.
    pub fn load(
        configs: &[SecretConfig],
        base: Option<&Path>,
        key: &[u8; 32],
    ) -> Result<Secrets, (String, String)> {
        let mut list: Vec<Secret> = Vec::with_capacity(configs.len());
        for (i, c) in configs.iter().enumerate() {
            let at = |k: &str| format!("secrets[{i}].{k}");
            let mut source = None;
            let value = match (&c.env, &c.file) {
                (Some(var), None) => match std::env::var_os(var) {
                    Some(v) => v.into_encoded_bytes(),
                    None => {
                        return Err((
                            at("env"),
                            format!("{var} is not set in the proxy's environment: export it before starting the proxy"),
                        ))
                    }
                },
                (None, Some(file)) => {
                    let path = match base {
                        Some(b) => b.join(file),
                        None => PathBuf::from(file),
                    };
                    match std::fs::read(&path) {
                        Ok(mut v) => {
                            source = Some(path);
                            while v.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
                                v.pop();
                            }
                            v
                        }
                        Err(e) => {
                            return Err((at("file"), format!("cannot read {}: {e}", path.display())))
                        }
                    }
                }
                _ => {
                    return Err((
                        at("env"),
                        "give exactly one of env = \"VAR\" (the proxy's environment) or file = \"PATH\""
                            .into(),
                    ))
                }
            };
            let mut secret = Secret::compile(i, c, value, key, &list)?;
            secret.file = source;
            list.push(secret);
        }
        Ok(Secrets { list })
    }

    /// Secrets with the values given (tests: no environment, no files).
    #[cfg(test)]
    pub(crate) fn with_values(configs: &[(SecretConfig, &str)], key: &[u8; 32]) -> Secrets {
        let mut list = Vec::new();
        for (i, (c, v)) in configs.iter().enumerate() {
            list.push(Secret::compile(i, c, v.as_bytes().to_vec(), key, &list).unwrap());
        }
        Secrets { list }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The secrets, in file order.
    pub fn iter(&self) -> impl Iterator<Item = &Secret> {
        self.list.iter()
    }

    /// CMD's variables: each secret's name with its placeholder.
    pub fn placeholder_vars(&self) -> Vec<(String, String)> {
        self.list
            .iter()
            .map(|s| (s.name.to_string(), s.placeholder.clone()))
            .collect()
    }

    /// The request line `target` and `headers` of a request bound for
    /// `dest` (only its host counts), sent inside TLS to it or not (`tls`):
    /// `Ok(None)` when no placeholder is in them, `Ok(Some(headers))`
    /// with every placeholder replaced by its value when all may go there,
    /// else why not. The first refusal found wins: a header the secret may
    /// not travel in, a host it may not go to, plaintext HTTP for a secret
    /// without `plaintext = true`, or a placeholder in the request line
    /// (never substituted: URLs end up in logs, `Referer`s and histories,
    /// and a credential there would leak beyond the request).
    pub fn inject(
        &self,
        target: &str,
        headers: &[(String, Vec<u8>)],
        dest: &Target,
        tls: bool,
    ) -> Result<Option<Headers>, SecretRefusal> {
        if self.list.is_empty() {
            return Ok(None);
        }
        for s in &self.list {
            if target.contains(s.placeholder.as_str()) {
                return Err(SecretRefusal {
                    secret: s.name.clone(),
                    why: format!(
                        "the placeholder of secret {} is in the request line: it is only \
                         replaced in header values (send it in a header such as Authorization)",
                        s.name
                    ),
                });
            }
        }
        let mut out: Option<Headers> = None;
        for (i, (name, value)) in headers.iter().enumerate() {
            if find(value, PLACEHOLDER_PREFIX.as_bytes()).is_none() {
                continue;
            }
            let mut new = value.clone();
            for s in &self.list {
                if find(&new, s.placeholder.as_bytes()).is_none() {
                    continue;
                }
                if !s.allows_header(name) {
                    return Err(SecretRefusal {
                        secret: s.name.clone(),
                        why: format!(
                            "secret {} may not be sent in the {name} header (its headers: {}): \
                             add {name:?} to the secret's headers",
                            s.name,
                            s.headers.as_deref().unwrap_or_default().join(", ")
                        ),
                    });
                }
                if !s.allows_host(&dest.host) {
                    return Err(SecretRefusal {
                        secret: s.name.clone(),
                        why: format!(
                            "secret {} may not be sent to {dest} (its hosts: {}): \
                             exfiltration attempt refused; add the host to the secret's hosts if it is meant to get it",
                            s.name,
                            s.hosts_text.join(", ")
                        ),
                    });
                }
                if !tls && !s.plaintext {
                    return Err(SecretRefusal {
                        secret: s.name.clone(),
                        why: format!(
                            "secret {} is only sent inside TLS, and this request to {dest} is \
                             plaintext HTTP (anyone on the path could read it): use https://, \
                             or set plaintext = true on the secret",
                            s.name
                        ),
                    });
                }
                new = replace_all(&new, s.placeholder.as_bytes(), &s.value);
            }
            if new != *value {
                out.get_or_insert_with(|| headers.to_vec())[i].1 = new;
            }
        }
        Ok(out)
    }
}

impl Secret {
    /// Secret `i` of the file with its `value` read, checked against the
    /// secrets before it.
    fn compile(
        i: usize,
        c: &SecretConfig,
        value: Vec<u8>,
        key: &[u8; 32],
        before: &[Secret],
    ) -> Result<Secret, (String, String)> {
        let at = |k: &str| format!("secrets[{i}].{k}");
        if !valid_name(&c.name) {
            return Err((
                at("name"),
                format!(
                    "{:?}: a secret's name is the variable CMD gets its placeholder in: \
                     letters, digits and '_', not starting with a digit",
                    c.name
                ),
            ));
        }
        if before.iter().any(|s| *s.name == c.name) {
            return Err((
                at("name"),
                format!(
                    "{:?} names an earlier secret too: names must be unique",
                    c.name
                ),
            ));
        }
        let source = if c.file.is_some() { "file" } else { "env" };
        if value.is_empty() {
            return Err((at(source), "the secret's value is empty".into()));
        }
        // The value goes into header values: nothing that could end a
        // header line or smuggle another one.
        if value.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
            return Err((
                at(source),
                "the secret's value holds control characters (a line break?): \
                 a header value cannot carry it"
                    .into(),
            ));
        }
        if c.hosts.is_empty() {
            return Err((
                at("hosts"),
                "a secret needs the hosts it may be sent to: hosts = [\"api.example.com\"]".into(),
            ));
        }
        let mut hosts = Vec::with_capacity(c.hosts.len());
        for (j, h) in c.hosts.iter().enumerate() {
            hosts.push(match parse_host_pattern(h) {
                Ok(Pattern::Host(p)) => Dest::Name(p),
                Ok(Pattern::Addr(a)) => Dest::Addr(a),
                Err(e) => return Err((format!("secrets[{i}].hosts[{j}]"), e)),
            });
        }
        let headers = match &c.headers {
            None => None,
            Some(hs) if hs.is_empty() => {
                return Err((
                    at("headers"),
                    "an empty list allows no header: leave headers out to allow any".into(),
                ))
            }
            Some(hs) => Some(hs.iter().map(|h| h.trim().to_ascii_lowercase()).collect()),
        };
        Ok(Secret {
            name: c.name.as_str().into(),
            placeholder: placeholder(key, &c.name),
            value,
            env: c.env.clone(),
            file: None,
            hosts,
            hosts_text: c.hosts.clone(),
            headers,
            plaintext: c.plaintext,
        })
    }
}

/// Whether `name` can be an environment variable's name.
fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `portcullis-secret-<name>-<32 hex>`: the hex is a keyed digest of the
/// name, so it is stable for as long as the key is (across reloads, and
/// across restarts with the key file) and unguessable without the key.
pub fn placeholder(key: &[u8; 32], name: &str) -> String {
    let tag = ring::hmac::sign(
        &ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key),
        name.as_bytes(),
    );
    let hex: String = tag.as_ref()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{PLACEHOLDER_PREFIX}{name}-{hex}")
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn replace_all(hay: &[u8], needle: &[u8], with: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(hay.len() + with.len());
    let mut rest = hay;
    while let Some(at) = find(rest, needle) {
        out.extend_from_slice(&rest[..at]);
        out.extend_from_slice(with);
        rest = &rest[at + needle.len()..];
    }
    out.extend_from_slice(rest);
    out
}

/// The file beside the CA state that keeps placeholders stable across
/// restarts (and lets `portcullis env` print the ones the proxy uses).
pub const KEY_FILE: &str = "secrets.key";

/// The placeholder key of this process: read from `state_dir/secrets.key`
/// (created, mode 0600, when missing), or, without a state directory or
/// when it cannot be used, drawn at random for this process (then `env`
/// and the proxy disagree; `run` is one process and does not care). Fixed
/// at the first call: a reload never changes a placeholder.
pub fn placeholder_key(state_dir: Option<&Path>) -> &'static [u8; 32] {
    static KEY: OnceLock<[u8; 32]> = OnceLock::new();
    KEY.get_or_init(|| match state_dir.map(load_or_create_key) {
        Some(Ok(k)) => k,
        Some(Err(e)) => {
            log::warn!("secrets: placeholders are drawn for this process only: {e}");
            random_key()
        }
        None => random_key(),
    })
}

fn random_key() -> [u8; 32] {
    use ring::rand::SecureRandom;
    let mut k = [0u8; 32];
    if ring::rand::SystemRandom::new().fill(&mut k).is_err() {
        // No randomness at all: refuse to make guessable placeholders.
        panic!("no system randomness for secret placeholders");
    }
    k
}

fn load_or_create_key(dir: &Path) -> Result<[u8; 32], String> {
    let path = dir.join(KEY_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => {
            return bytes
                .try_into()
                .map_err(|_| format!("{} is not 32 bytes: remove it", path.display()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    }
    let key = random_key();
    write_key(dir, &path, &key).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(key)
}

#[cfg(unix)]
fn write_key(dir: &Path, path: &Path, key: &[u8; 32]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(key)
}

#[cfg(not(unix))]
fn write_key(dir: &Path, path: &Path, key: &[u8; 32]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(path, key)
}

/// Marks the process non-dumpable while it holds secret values: no core
/// dump, no ptrace and no `/proc/PID/{mem,environ}` for its own uid (CMD
/// under `run`). Linux only; elsewhere a no-op.
pub fn protect_process() {
    #[cfg(target_os = "linux")]
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        log::warn!("secrets: cannot mark the proxy non-dumpable (prctl): {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: [u8; 32] = [1; 32];

    fn config(name: &str, hosts: &[&str]) -> SecretConfig {
        SecretConfig {
            name: name.into(),
            env: Some("X".into()),
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
            ..SecretConfig::default()
        }
    }

    fn one(hosts: &[&str]) -> Secrets {
        Secrets::with_values(&[(config("TOKEN", hosts), "v4lue")], &KEY)
    }

    fn to(host: &str) -> Target {
        Target::new(host, 443).unwrap()
    }

    fn header(v: &str) -> Vec<(String, Vec<u8>)> {
        vec![("Authorization".into(), v.as_bytes().to_vec())]
    }

    #[test]
    fn placeholders_are_recognisable_keyed_and_never_the_value() {
        let p = placeholder(&KEY, "TOKEN");
        assert!(p.starts_with("portcullis-secret-TOKEN-"), "{p}");
        assert_eq!(p.len(), "portcullis-secret-TOKEN-".len() + 32);
        assert_eq!(p, placeholder(&KEY, "TOKEN"), "stable for one key");
        assert_ne!(p, placeholder(&[2; 32], "TOKEN"), "unguessable without it");
        assert_ne!(p, placeholder(&KEY, "OTHER"));
        let s = one(&["api.test"]);
        assert_eq!(s.placeholder_vars(), [("TOKEN".to_string(), p)]);
        assert!(!format!("{s:?}").contains("v4lue"), "Debug hides the value");
    }

    #[test]
    fn hosts_use_the_rule_syntax() {
        let s = one(&["API.test.", "*.wild.test", "192.0.2.7"]);
        let p = placeholder(&KEY, "TOKEN");
        for (host, ok) in [
            ("api.test", true),
            ("x.api.test", false),
            ("a.wild.test", true),
            ("wild.test", false),
            ("192.0.2.7", true),
            ("192.0.2.8", false),
            ("api.test.evil", false),
        ] {
            let got = s.inject("/", &header(&format!("Bearer {p}")), &to(host), true);
            assert_eq!(got.is_ok(), ok, "{host}: {got:?}");
            if ok {
                assert_eq!(got.unwrap().unwrap(), header("Bearer v4lue"));
            }
        }
    }

    #[test]
    fn headers_limit_where_it_travels_in_any_case() {
        let mut c = config("TOKEN", &["api.test"]);
        c.headers = Some(vec!["x-api-KEY".into()]);
        let s = Secrets::with_values(&[(c, "v4lue")], &KEY);
        let p = placeholder(&KEY, "TOKEN");
        let ok = vec![("X-Api-Key".to_string(), p.clone().into_bytes())];
        assert!(s.inject("/", &ok, &to("api.test"), true).unwrap().is_some());
        let err = s
            .inject("/", &header(&p), &to("api.test"), true)
            .unwrap_err();
        assert_eq!(&*err.secret, "TOKEN");
        assert!(err.why.contains("Authorization header"), "{}", err.why);
        assert!(!err.why.contains("v4lue"));
    }

    #[test]
    fn two_secrets_in_one_value_and_near_misses() {
        let s = Secrets::with_values(
            &[
                (config("A", &["api.test"]), "va"),
                (config("B", &["api.test"]), "vb"),
            ],
            &KEY,
        );
        let (a, b) = (placeholder(&KEY, "A"), placeholder(&KEY, "B"));
        let got = s.inject("/", &header(&format!("{a}:{b}")), &to("api.test"), true);
        assert_eq!(got.unwrap().unwrap(), header("va:vb"));
        // A truncated or foreign placeholder is just text.
        let near = a[..a.len() - 1].to_string();
        assert_eq!(
            s.inject("/", &header(&near), &to("api.test"), true),
            Ok(None)
        );
        // One of them may not go: the whole request is refused.
        let s = Secrets::with_values(
            &[
                (config("A", &["api.test"]), "va"),
                (config("B", &["other.test"]), "vb"),
            ],
            &KEY,
        );
        let err = s.inject("/", &header(&format!("{a}:{b}")), &to("api.test"), true);
        assert_eq!(&*err.unwrap_err().secret, "B");
    }

    #[test]
    fn plaintext_http_gets_the_value_only_when_the_secret_says_so() {
        let p = placeholder(&KEY, "TOKEN");
        let err = one(&["api.test"])
            .inject("/", &header(&p), &to("api.test"), false)
            .unwrap_err();
        assert_eq!(&*err.secret, "TOKEN");
        assert!(
            err.why.contains("only sent inside TLS") && err.why.contains("plaintext = true"),
            "{}",
            err.why
        );
        let mut c = config("TOKEN", &["api.test"]);
        c.plaintext = true;
        let s = Secrets::with_values(&[(c, "v4lue")], &KEY);
        let got = s.inject("/", &header(&p), &to("api.test"), false);
        assert_eq!(got.unwrap().unwrap(), header("v4lue"));
        // Elsewhere is still elsewhere.
        let err = s
            .inject("/", &header(&p), &to("x.test"), false)
            .unwrap_err();
        assert!(err.why.contains("may not be sent to x.test"), "{}", err.why);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn protect_process_makes_it_non_dumpable() {
        use nix::sys::prctl::{get_dumpable, set_dumpable};
        protect_process();
        let got = get_dumpable();
        // The test binary's other tests read /proc/self freely either way;
        // put it back all the same.
        set_dumpable(true).unwrap();
        assert_eq!(got, Ok(false));
    }

    #[test]
    fn bad_tables_name_their_key() {
        let err = |c: SecretConfig, v: &str| {
            let mut list = Vec::new();
            let first = Secret::compile(0, &config("FIRST", &["a.test"]), b"x".to_vec(), &KEY, &[])
                .unwrap();
            list.push(first);
            Secret::compile(1, &c, v.as_bytes().to_vec(), &KEY, &list).unwrap_err()
        };
        assert_eq!(err(config("1BAD", &["a.test"]), "v").0, "secrets[1].name");
        assert_eq!(err(config("FIRST", &["a.test"]), "v").0, "secrets[1].name");
        assert_eq!(err(config("OK", &[]), "v").0, "secrets[1].hosts");
        assert_eq!(
            err(config("OK", &["a.test:443"]), "v").0,
            "secrets[1].hosts[0]"
        );
        let (key, why) = err(config("OK", &["a.test"]), "line\r\nX-Injected: 1");
        assert_eq!(key, "secrets[1].env");
        assert!(why.contains("control characters") && !why.contains("Injected"));
        assert_eq!(err(config("OK", &["a.test"]), "").0, "secrets[1].env");
        let mut c = config("OK", &["a.test"]);
        c.headers = Some(vec![]);
        assert_eq!(err(c, "v").0, "secrets[1].headers");
        let both = SecretConfig {
            file: Some("f".into()),
            ..config("OK", &["a.test"])
        };
        let e = Secrets::load(&[both], None, &KEY).unwrap_err();
        assert!(e.1.contains("exactly one of env"), "{e:?}");
    }
}
