//! The roots upstream certificates are verified against: the platform's
//! trust store (default) or webpki's bundled roots, plus `[tls] upstream_ca`.
//!
//! Why rustls-native-certs and not rustls-platform-verifier: native-certs
//! reads the store once (at start and on SIGHUP), honours `SSL_CERT_FILE` and
//! `SSL_CERT_DIR` as OpenSSL does, reads macOS's keychain the same way, and
//! leaves verification in rustls's webpki verifier, the one already used for
//! `upstream_ca`. platform-verifier would call into the OS on every handshake
//! (on the reactor thread), behave differently per platform, and could not
//! combine the platform's roots with our `upstream_ca` anchors in one check.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use rustls::RootCertStore;

use super::config::{add_anchors, ConfigError};

/// Where upstream trust starts (`[tls] upstream_roots`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum UpstreamRoots {
    /// The platform's store: `SSL_CERT_FILE`/`SSL_CERT_DIR` when set, else
    /// the system bundle (Linux) or the keychain (macOS).
    #[default]
    Platform,
    /// webpki-roots only (Mozilla's list, compiled in): the same on every
    /// machine, blind to a corporate root in the system store.
    Webpki,
}

impl UpstreamRoots {
    /// `platform` or `webpki`.
    pub fn as_str(self) -> &'static str {
        match self {
            UpstreamRoots::Platform => "platform",
            UpstreamRoots::Webpki => "webpki",
        }
    }
}

impl fmt::Display for UpstreamRoots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for UpstreamRoots {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "platform" => Ok(UpstreamRoots::Platform),
            "webpki" => Ok(UpstreamRoots::Webpki),
            other => Err(format!(
                "unknown upstream_roots {other:?}: use \"platform\" (the system's store, SSL_CERT_FILE/SSL_CERT_DIR) or \"webpki\" (the bundled Mozilla roots)"
            )),
        }
    }
}

/// The roots loaded, and what to say about them.
#[derive(Debug)]
pub struct LoadedRoots {
    /// Every anchor: the platform's or webpki's, then `upstream_ca`'s.
    pub store: RootCertStore,
    /// One line for the info log: how many roots came from where.
    pub summary: String,
    /// Set when the platform store gave nothing usable and webpki's roots
    /// stand in: the warning, naming the fix.
    pub warning: Option<String>,
}

/// Where the platform store is read from, as OpenSSL would pick it.
fn platform_origin() -> String {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    match (var("SSL_CERT_FILE"), var("SSL_CERT_DIR")) {
        (Some(f), Some(d)) => format!(
            "SSL_CERT_FILE={} and SSL_CERT_DIR={}",
            PathBuf::from(f).display(),
            PathBuf::from(d).display()
        ),
        (Some(f), None) => format!("SSL_CERT_FILE={}", PathBuf::from(f).display()),
        (None, Some(d)) => format!("SSL_CERT_DIR={}", PathBuf::from(d).display()),
        (None, None) => "the system store".into(),
    }
}

/// Loads the roots `source` names plus every `upstream_ca` file. Reads
/// files (and on macOS asks the keychain): call it off the reactor.
pub fn load(source: UpstreamRoots, upstream_ca: &[PathBuf]) -> Result<LoadedRoots, ConfigError> {
    let mut store = RootCertStore::empty();
    let mut warning = None;
    let base = match source {
        UpstreamRoots::Webpki => {
            store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
            format!(
                "{} from webpki-roots (upstream_roots = \"webpki\")",
                store.len()
            )
        }
        UpstreamRoots::Platform => {
            let origin = platform_origin();
            let found = rustls_native_certs::load_native_certs();
            let (added, _unusable) = store.add_parsable_certificates(found.certs);
            if added == 0 {
                let why = match found.errors.first() {
                    Some(e) => format!("nothing usable ({e})"),
                    None => "no certificates".into(),
                };
                store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
                warning = Some(format!(
                    "upstream trust: the platform store ({origin}) has {why}; using webpki-roots instead. \
                     Point SSL_CERT_FILE at a CA bundle, add your root with --upstream-ca FILE ([tls] upstream_ca), \
                     or set [tls] upstream_roots = \"webpki\" to say so"
                ));
                format!(
                    "{} from webpki-roots (the platform store was empty)",
                    store.len()
                )
            } else {
                format!("{added} from {origin}")
            }
        }
    };
    let before = store.len();
    for path in upstream_ca {
        add_anchors(&mut store, path)?;
    }
    let extra = store.len() - before;
    let summary = if upstream_ca.is_empty() {
        format!("upstream trust: {base}")
    } else {
        format!("upstream trust: {base}, {extra} from upstream_ca")
    };
    Ok(LoadedRoots {
        store,
        summary,
        warning,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_print() {
        for r in [UpstreamRoots::Platform, UpstreamRoots::Webpki] {
            assert_eq!(r.as_str().parse::<UpstreamRoots>(), Ok(r));
        }
        let e = "system".parse::<UpstreamRoots>().unwrap_err();
        assert!(
            e.contains("\"platform\"") && e.contains("\"webpki\""),
            "{e}"
        );
        assert_eq!(UpstreamRoots::default(), UpstreamRoots::Platform);
    }

    #[test]
    fn webpki_roots_plus_upstream_ca() {
        let dir = std::env::temp_dir().join(format!("portcullis-roots-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = rcgen::generate_simple_self_signed(vec!["a.test".into()]).unwrap();
        let path = dir.join("extra.pem");
        std::fs::write(&path, ca.cert.pem()).unwrap();
        let l = load(UpstreamRoots::Webpki, std::slice::from_ref(&path)).unwrap();
        let webpki = webpki_roots::TLS_SERVER_ROOTS.len();
        assert_eq!(l.store.len(), webpki + 1);
        assert_eq!(
            l.summary,
            format!("upstream trust: {webpki} from webpki-roots (upstream_roots = \"webpki\"), 1 from upstream_ca")
        );
        assert!(l.warning.is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
