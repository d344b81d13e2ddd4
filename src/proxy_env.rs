//! The environment that points programs at the proxy: `HTTP_PROXY` and
//! friends, in both cases, for `portcullis env` and `portcullis run`.
//!
//! Which tool reads what (see docs/run-and-env.md, "Keeping a program behind the proxy"):
//! curl reads `http_proxy` (lower case only), `HTTPS_PROXY`/`https_proxy`,
//! `ALL_PROXY`/`all_proxy` and `NO_PROXY`; Python (urllib, requests, pip),
//! Go, git, cargo and npm read the `*_PROXY` pair; gRPC reads `GRPC_PROXY`;
//! Node reads none unless `NODE_USE_ENV_PROXY=1` (Node 22.21 / 24 and later)
//! or the program installs undici's `EnvHttpProxyAgent`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;

use portcullis::config::TlsConfig;
use portcullis::tls::instructions::ca_bundles;
use portcullis::tls::CertAuthority;
use portcullis::{Config, Credentials, ListenAddr, ListenerProtocol};

/// Destinations reached directly, not through the proxy: the loopback only,
/// so a test suite that starts a local server reaches it (inside `run`'s
/// namespace that loopback is the namespace's own).
pub const NO_PROXY: &str = "localhost,127.0.0.1,::1";

/// One environment variable.
pub type Var = (String, String);

/// Where a program reaches the proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// A TCP listener (an unspecified address is reached on loopback).
    Tcp(SocketAddr),
    /// A Unix-socket listener.
    Unix(PathBuf),
}

impl Endpoint {
    /// The endpoint for a bound listener address.
    pub fn of(addr: &ListenAddr) -> Endpoint {
        match addr {
            ListenAddr::Tcp(a) => Endpoint::Tcp(reachable(*a)),
            ListenAddr::Unix(p) => Endpoint::Unix(p.clone()),
        }
    }
}

/// The variables, plus notes for a human (printed as comments by `env`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProxyEnv {
    /// Name and value, in print order.
    pub vars: Vec<Var>,
    /// Remarks about what the variables cannot do.
    pub notes: Vec<String>,
}

impl ProxyEnv {
    /// The proxy variables for `endpoint`, speaking `protocol`, with `auth`
    /// credentials in the URLs if the proxy requires them.
    pub fn new(
        endpoint: &Endpoint,
        protocol: ListenerProtocol,
        auth: Option<&Credentials>,
    ) -> Self {
        let user = auth.map_or_else(String::new, |c| {
            format!(
                "{}:{}@",
                percent_encode(&c.username),
                percent_encode(&c.password)
            )
        });
        let mut notes = Vec::new();
        let (http, socks) = match endpoint {
            Endpoint::Tcp(a) => (format!("http://{user}{a}"), format!("socks5h://{user}{a}")),
            Endpoint::Unix(p) => {
                notes.push(format!(
                    "the proxy listens on a Unix socket ({}): most tools cannot use one; \
                     curl 7.84+ can, with the socks5h://localhost/PATH form set below",
                    p.display()
                ));
                let url = format!("socks5h://{user}localhost{}", p.display());
                (url.clone(), url)
            }
        };
        let (http, all) = match protocol {
            ListenerProtocol::Auto => (http, socks),
            ListenerProtocol::Http => (http.clone(), http),
            ListenerProtocol::Socks5 => {
                notes.push(
                    "the listener speaks SOCKS5 only: tools that need an HTTP proxy \
                     (Python without PySocks, gRPC, Node) fail rather than go direct"
                        .into(),
                );
                (socks.clone(), socks)
            }
        };
        let mut vars = Vec::new();
        for (name, value) in [
            ("HTTP_PROXY", &http),
            ("HTTPS_PROXY", &http),
            ("ALL_PROXY", &all),
            ("NO_PROXY", &NO_PROXY.to_string()),
            ("GRPC_PROXY", &http),
        ] {
            vars.push((name.to_string(), value.clone()));
            vars.push((name.to_ascii_lowercase(), value.clone()));
        }
        // Node 22.21+/24+ honour the variables only when asked to.
        vars.push(("NODE_USE_ENV_PROXY".into(), "1".into()));
        let inherited = std::env::var(JAVA_TOOL_OPTIONS).ok();
        if let Some(java) = java_options(endpoint, protocol, inherited.as_deref()) {
            if auth.is_some() {
                notes.push(
                    "JVMs take no proxy credentials from properties: a JVM program must \
                     authenticate itself (java.net.Authenticator)"
                        .into(),
                );
            }
            vars.push((JAVA_TOOL_OPTIONS.into(), java));
        }
        ProxyEnv { vars, notes }
    }

    /// The variables for the first TCP listener of `config` (else its first
    /// Unix listener), plus the hook's extra variables.
    pub fn for_config(config: &Config) -> Result<ProxyEnv, String> {
        let listener = config
            .listeners
            .iter()
            .find(|l| matches!(l.addr, ListenAddr::Tcp(_)))
            .or_else(|| config.listeners.first())
            .ok_or("no listener is configured")?;
        if let ListenAddr::Tcp(a) = listener.addr {
            if a.port() == 0 {
                return Err(format!(
                    "the listener {a} has port 0 (an ephemeral port, known only once the \
                     proxy runs): give a fixed port with --listen or in the [[listen]] table"
                ));
            }
        }
        let env = ProxyEnv::new(
            &Endpoint::of(&listener.addr),
            listener.protocol,
            config.auth.as_ref(),
        );
        Ok(env
            .with_extra(tls_ca_vars(config))
            .with_extra(secret_vars(config)))
    }

    /// Adds (or replaces) variables: the hook for whatever else a program
    /// needs to use the proxy, such as the CA bundle of TLS termination.
    /// `JAVA_TOOL_OPTIONS` is the exception: options, added to the value.
    pub fn with_extra(mut self, extra: impl IntoIterator<Item = Var>) -> Self {
        for (name, value) in extra {
            if name == JAVA_TOOL_OPTIONS {
                if let Some((_, v)) = self.vars.iter_mut().find(|(n, _)| *n == name) {
                    v.push(' ');
                    v.push_str(&value);
                    continue;
                }
            }
            self.vars.retain(|(n, _)| *n != name);
            self.vars.push((name, value));
        }
        self
    }
}

/// A trust variable and the bundle it names.
pub type CaVar = (&'static str, PathBuf);

/// The CA's trust variables ([`CA_ENV_VARS`](portcullis::tls::instructions::CA_ENV_VARS)),
/// each naming a bundle in the state directory (the CA plus the roots that
/// variable named in this process's environment, else the system's), and
/// the CA certificate's path. Generates the CA if it does not exist yet.
pub fn ca_vars(tls: &TlsConfig) -> Result<(PathBuf, Vec<CaVar>), String> {
    let (ca, dir) = load_ca(tls)?;
    let vars = ca_bundles(ca.cert_path(), ca.cert_pem(), &dir, |v| std::env::var_os(v))
        .map_err(|e| format!("writing a trust bundle into {}: {e}", dir.display()))?;
    Ok((ca.cert_path().to_owned(), vars))
}

/// The CA (loaded, or generated into the state directory) and the
/// directory trust files are written into.
fn load_ca(tls: &TlsConfig) -> Result<(CertAuthority, PathBuf), String> {
    let state_dir = tls.state_dir.clone().ok_or_else(|| {
        "no state directory for the CA: set [tls] state_dir, or ca_cert and ca_key".to_string()
    })?;
    let ca = CertAuthority::from_config(tls.ca_cert.as_deref(), tls.ca_key.as_deref(), &state_dir)
        .map_err(|e| e.to_string())?;
    std::fs::create_dir_all(&state_dir).map_err(|e| format!("{}: {e}", state_dir.display()))?;
    Ok((ca, state_dir))
}

/// A JKS trust store (the CA plus the system's roots) for JVMs, in the
/// state directory, named by its content.
fn java_trust_store(ca: &CertAuthority, dir: &std::path::Path) -> std::io::Result<PathBuf> {
    use portcullis::tls::instructions::{system_bundle, write_by_hash};
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let mut certs = vec![ca.cert_der().clone()];
    if let Some(bundle) = system_bundle() {
        let bytes = std::fs::read(bundle)?;
        certs.extend(CertificateDer::pem_slice_iter(&bytes).filter_map(Result::ok));
    }
    // A fixed stamp: the same roots make the same file.
    let store = portcullis::tls::jks::trust_store(&certs, "portcullis", 0);
    write_by_hash(dir, "java-trust", "jks", &store)
}

/// Each `[[secrets]]` name with its placeholder: what CMD holds instead of
/// the value.
pub fn secret_vars(config: &Config) -> Vec<Var> {
    config
        .policy
        .secrets()
        .map(|s| s.placeholder_vars())
        .unwrap_or_default()
}

/// The variables of this process that must not reach CMD: every secret's
/// `env` source, and any variable whose value holds a secret's value.
pub fn secret_scrub(config: &Config) -> Vec<std::ffi::OsString> {
    let Some(secrets) = config.policy.secrets() else {
        return Vec::new();
    };
    let mut out: Vec<std::ffi::OsString> = secrets
        .iter()
        .filter_map(|s| s.env_source().map(Into::into))
        .collect();
    for (name, value) in std::env::vars_os() {
        let value = value.as_encoded_bytes();
        let holds = secrets.iter().any(|s| {
            let v = s.value();
            value.windows(v.len()).any(|w| w == v)
        });
        if holds && !out.contains(&name) {
            out.push(name);
        }
    }
    out
}

/// When a rule terminates TLS: the variables that make programs trust the
/// proxy's CA (every one of `CA_ENV_VARS`, so none inherited wins), and
/// `JAVA_TOOL_OPTIONS` naming a JVM trust store (added to the proxy
/// properties by [`ProxyEnv::with_extra`]). The CA is generated if it does
/// not exist yet. Nothing when no rule terminates.
pub fn tls_ca_vars(config: &Config) -> Vec<Var> {
    if !config.policy.terminates_any() {
        return Vec::new();
    }
    let result = load_ca(&config.tls).and_then(|(ca, dir)| {
        let mut vars: Vec<Var> = ca_bundles(ca.cert_path(), ca.cert_pem(), &dir, |v| std::env::var_os(v))
            .map_err(|e| format!("writing a trust bundle into {}: {e}", dir.display()))?
            .into_iter()
            .map(|(name, path)| (name.to_string(), path.display().to_string()))
            .collect();
        match java_trust_store(&ca, &dir) {
            // JAVA_TOOL_OPTIONS splits on white space.
            Ok(p) if !p.to_string_lossy().contains(char::is_whitespace) => vars.push((
                JAVA_TOOL_OPTIONS.into(),
                format!(
                    "-Djavax.net.ssl.trustStore={} -Djavax.net.ssl.trustStoreType=JKS -Djavax.net.ssl.trustStorePassword={}",
                    p.display(),
                    portcullis::tls::jks::PASSWORD
                ),
            )),
            Ok(p) => crate::report(
                log::Level::Warn,
                format_args!(
                    "JVMs will not trust the CA: its trust store's path has white space ({}); set [tls] state_dir",
                    p.display()
                ),
            ),
            Err(e) => crate::report(
                log::Level::Warn,
                format_args!(
                    "JVMs will not trust the CA: writing their trust store in {}: {e}",
                    dir.display()
                ),
            ),
        }
        Ok(vars)
    });
    match result {
        Ok(vars) => vars,
        Err(e) => {
            fatal!("the CA for TLS termination: {e}");
            Vec::new()
        }
    }
}

/// JVMs' variable: they read no `*_PROXY` and no PEM bundle.
pub const JAVA_TOOL_OPTIONS: &str = "JAVA_TOOL_OPTIONS";

/// The JVM's proxy properties for `endpoint`, after `inherited` (the value
/// the environment had): `http(s).proxyHost/Port` (or `socksProxyHost/Port`
/// for a SOCKS5-only listener) and `http.nonProxyHosts` from [`NO_PROXY`].
/// `None` for a Unix socket, which a JVM cannot use.
pub fn java_options(
    endpoint: &Endpoint,
    protocol: ListenerProtocol,
    inherited: Option<&str>,
) -> Option<String> {
    let Endpoint::Tcp(a) = endpoint else {
        return None;
    };
    let host = match a.ip() {
        IpAddr::V6(ip) => format!("[{ip}]"),
        ip => ip.to_string(),
    };
    let port = a.port();
    let ours = match protocol {
        ListenerProtocol::Socks5 => format!("-DsocksProxyHost={host} -DsocksProxyPort={port}"),
        _ => format!(
            "-Dhttp.proxyHost={host} -Dhttp.proxyPort={port} -Dhttps.proxyHost={host} -Dhttps.proxyPort={port}"
        ),
    };
    let non_proxy = NO_PROXY.replace(',', "|");
    let ours = format!("{ours} -Dhttp.nonProxyHosts={non_proxy}");
    Some(match inherited.map(str::trim).filter(|s| !s.is_empty()) {
        Some(before) => format!("{before} {ours}"),
        None => ours,
    })
}

/// The address a local client would use: the unspecified address becomes loopback.
fn reachable(a: SocketAddr) -> SocketAddr {
    match a.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => (Ipv4Addr::LOCALHOST, a.port()).into(),
        IpAddr::V6(ip) if ip.is_unspecified() => (Ipv6Addr::LOCALHOST, a.port()).into(),
        _ => a,
    }
}

/// Percent-encodes everything but RFC 3986's unreserved characters (for URL userinfo).
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get<'a>(env: &'a ProxyEnv, name: &str) -> Option<&'a str> {
        env.vars
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn tcp_auto_sets_both_cases() {
        let env = ProxyEnv::new(
            &Endpoint::Tcp("127.0.0.1:3128".parse().unwrap()),
            ListenerProtocol::Auto,
            None,
        );
        for name in ["HTTP_PROXY", "HTTPS_PROXY", "GRPC_PROXY"] {
            assert_eq!(get(&env, name), Some("http://127.0.0.1:3128"));
            let lower = name.to_ascii_lowercase();
            assert_eq!(get(&env, &lower), Some("http://127.0.0.1:3128"));
        }
        assert_eq!(get(&env, "ALL_PROXY"), Some("socks5h://127.0.0.1:3128"));
        assert_eq!(get(&env, "all_proxy"), Some("socks5h://127.0.0.1:3128"));
        assert_eq!(get(&env, "no_proxy"), Some(NO_PROXY));
        assert_eq!(get(&env, "NODE_USE_ENV_PROXY"), Some("1"));
        assert!(env.notes.is_empty());
    }

    #[test]
    fn unspecified_and_ipv6_addresses_are_reachable_urls() {
        let env = ProxyEnv::new(
            &Endpoint::of(&ListenAddr::Tcp("[::]:8080".parse().unwrap())),
            ListenerProtocol::Http,
            None,
        );
        assert_eq!(get(&env, "http_proxy"), Some("http://[::1]:8080"));
        assert_eq!(get(&env, "ALL_PROXY"), Some("http://[::1]:8080"));
    }

    #[test]
    fn credentials_are_percent_encoded() {
        let creds = Credentials::new("agent", "p@ss:w/rd");
        let env = ProxyEnv::new(
            &Endpoint::Tcp("127.0.0.1:3128".parse().unwrap()),
            ListenerProtocol::Auto,
            Some(&creds),
        );
        assert_eq!(
            get(&env, "HTTPS_PROXY"),
            Some("http://agent:p%40ss%3Aw%2Frd@127.0.0.1:3128")
        );
    }

    #[test]
    fn a_unix_listener_gets_the_curl_form_and_a_note() {
        let env = ProxyEnv::new(
            &Endpoint::Unix("/tmp/p.sock".into()),
            ListenerProtocol::Auto,
            None,
        );
        assert_eq!(
            get(&env, "ALL_PROXY"),
            Some("socks5h://localhost/tmp/p.sock")
        );
        assert_eq!(
            get(&env, "https_proxy"),
            Some("socks5h://localhost/tmp/p.sock")
        );
        assert_eq!(env.notes.len(), 1);
    }

    #[test]
    // Set field by field: `Config` may become #[non_exhaustive].
    #[allow(clippy::field_reassign_with_default)]
    fn config_picks_the_first_tcp_listener_and_refuses_port_zero() {
        use portcullis::ListenerConfig;
        let mut config = Config::default();
        config.listeners = vec![
            ListenerConfig::new(
                ListenAddr::Unix("/tmp/x.sock".into()),
                ListenerProtocol::Auto,
            ),
            ListenerConfig::new(
                ListenAddr::Tcp("127.0.0.1:9000".parse().unwrap()),
                ListenerProtocol::Auto,
            ),
        ];
        let env = ProxyEnv::for_config(&config).unwrap();
        assert_eq!(get(&env, "HTTP_PROXY"), Some("http://127.0.0.1:9000"));
        config.listeners[1].addr = ListenAddr::Tcp("127.0.0.1:0".parse().unwrap());
        assert!(ProxyEnv::for_config(&config)
            .unwrap_err()
            .contains("port 0"));
    }

    #[test]
    fn extra_vars_replace_and_append() {
        let env = ProxyEnv::new(
            &Endpoint::Tcp("127.0.0.1:1".parse().unwrap()),
            ListenerProtocol::Auto,
            None,
        )
        .with_extra([
            ("SSL_CERT_FILE".to_string(), "/ca.pem".to_string()),
            ("NODE_USE_ENV_PROXY".to_string(), "0".to_string()),
        ]);
        assert_eq!(get(&env, "SSL_CERT_FILE"), Some("/ca.pem"));
        assert_eq!(get(&env, "NODE_USE_ENV_PROXY"), Some("0"));
        let n = env
            .vars
            .iter()
            .filter(|(n, _)| n == "NODE_USE_ENV_PROXY")
            .count();
        assert_eq!(n, 1);
    }

    #[test]
    fn java_options_for_each_listener_kind() {
        let tcp = Endpoint::Tcp("127.0.0.1:3128".parse().unwrap());
        assert_eq!(
            java_options(&tcp, ListenerProtocol::Auto, Some("  -Xmx1g ")).unwrap(),
            "-Xmx1g -Dhttp.proxyHost=127.0.0.1 -Dhttp.proxyPort=3128 -Dhttps.proxyHost=127.0.0.1 \
             -Dhttps.proxyPort=3128 -Dhttp.nonProxyHosts=localhost|127.0.0.1|::1"
        );
        let v6 = Endpoint::Tcp("[::1]:1080".parse().unwrap());
        assert_eq!(
            java_options(&v6, ListenerProtocol::Socks5, None).unwrap(),
            "-DsocksProxyHost=[::1] -DsocksProxyPort=1080 -Dhttp.nonProxyHosts=localhost|127.0.0.1|::1"
        );
        let unix = Endpoint::Unix("/run/p.sock".into());
        assert_eq!(java_options(&unix, ListenerProtocol::Auto, None), None);
        // The trust store's options add to the proxy's, never replace them.
        let env = ProxyEnv::new(&tcp, ListenerProtocol::Auto, None)
            .with_extra([(JAVA_TOOL_OPTIONS.to_string(), "-Dtrust=1".to_string())]);
        let java = get(&env, JAVA_TOOL_OPTIONS).unwrap();
        assert!(
            java.contains("-Dhttps.proxyPort=3128 ") && java.ends_with(" -Dtrust=1"),
            "{java}"
        );
    }
}
