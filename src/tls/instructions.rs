//! What `portcullis ca` prints: where the CA certificate is and how to make
//! common clients trust it; and the environment variables as data, for
//! `portcullis ca --shell`, `env` and `run`.
//!
//! Most of these variables *replace* a tool's trust store rather than add
//! to it, so pointing them at the CA alone would break every destination
//! that is tunnelled without inspection. Each points at a bundle: the CA
//! plus the roots the variable named before (a corporate bundle stays
//! trusted), else the system's ([`ca_bundles`] writes them).
//! `NODE_EXTRA_CA_CERTS` adds to Node's own roots: its bundle is the CA
//! plus what it named before.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};

/// The trust variables and what reads them: every one a tool prefers to
/// `SSL_CERT_FILE` is set too, since an inherited value (a system's own
/// bundle) would otherwise win over the proxy's CA.
pub const CA_ENV_VARS: &[(&str, &str)] = &[
    (
        "SSL_CERT_FILE",
        "OpenSSL-based tools (curl, wget, python ssl, ruby, ...)",
    ),
    ("REQUESTS_CA_BUNDLE", "python requests and pip"),
    (
        "CURL_CA_BUNDLE",
        "curl (before SSL_CERT_FILE), python requests",
    ),
    ("NODE_EXTRA_CA_CERTS", "Node.js (adds to its own roots)"),
    ("NPM_CONFIG_CAFILE", "npm (over a cafile in .npmrc)"),
    ("GIT_SSL_CAINFO", "git over HTTPS"),
    ("CARGO_HTTP_CAINFO", "cargo"),
    ("PIP_CERT", "pip (before REQUESTS_CA_BUNDLE)"),
    ("DENO_CERT", "Deno"),
    ("AWS_CA_BUNDLE", "the AWS CLI and SDKs"),
    ("NIX_SSL_CERT_FILE", "programs built by Nix"),
    ("HTTPLIB2_CA_CERTS", "python httplib2 (Google API clients)"),
    ("GRPC_DEFAULT_SSL_ROOTS_FILE_PATH", "gRPC"),
    ("CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE", "gcloud"),
];

/// Where the system's roots are, on common systems.
pub const SYSTEM_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt", // Debian, Ubuntu, Alpine, Arch
    "/etc/pki/tls/certs/ca-bundle.crt",   // Fedora, RHEL
    "/etc/ssl/ca-bundle.pem",             // openSUSE
    "/etc/ssl/cert.pem",                  // macOS, BSDs
];

/// The first system bundle that exists.
pub fn system_bundle() -> Option<PathBuf> {
    SYSTEM_BUNDLES
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

/// The variable whose value adds to a tool's roots instead of replacing them.
const ADDS: &str = "NODE_EXTRA_CA_CERTS";

/// `(variable, bundle)` for every one of [`CA_ENV_VARS`], the bundles written
/// into `dir`: the CA (`ca_pem`, its file `ca_cert`) plus the certificates
/// of the file `inherited(var)` names (a readable, non-empty file), else
/// (except for `NODE_EXTRA_CA_CERTS`) the system bundle. A file that holds
/// the CA already is used as it is (`eval` twice does not stack copies).
/// Files are named by a hash of their content and written atomically, so
/// concurrent runs share them and never see half a file.
pub fn ca_bundles(
    ca_cert: &Path,
    ca_pem: &str,
    dir: &Path,
    inherited: impl Fn(&str) -> Option<OsString>,
) -> io::Result<Vec<(&'static str, PathBuf)>> {
    let system = system_bundle().and_then(|p| std::fs::read_to_string(p).ok());
    let mut written: HashMap<String, PathBuf> = HashMap::new();
    let mut out = Vec::with_capacity(CA_ENV_VARS.len());
    for &(var, _) in CA_ENV_VARS {
        let before = inherited(var)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .and_then(|p| Some((std::fs::read_to_string(&p).ok()?, p)))
            .filter(|(text, _)| text.contains("-----BEGIN CERTIFICATE-----"));
        if let Some((text, path)) = &before {
            if text.contains(ca_pem.trim()) {
                out.push((var, path.clone()));
                continue;
            }
        }
        let base = match (before, var) {
            (Some((text, _)), _) => Some(text),
            (None, ADDS) => None,
            (None, _) => system.clone(),
        };
        let Some(mut text) = base else {
            out.push((var, ca_cert.to_owned()));
            continue;
        };
        if !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str("# portcullis local CA\n");
        text.push_str(ca_pem);
        let path = match written.get(&text) {
            Some(p) => p.clone(),
            None => {
                let p = write_by_hash(dir, "trust", "pem", text.as_bytes())?;
                written.insert(text, p.clone());
                p
            }
        };
        out.push((var, path));
    }
    Ok(out)
}

/// Writes `bytes` to `dir/PREFIX-HASH.EXT` (HASH: the first 16 hex digits
/// of their SHA-256) unless that file exists; returns its path.
pub fn write_by_hash(dir: &Path, prefix: &str, ext: &str, bytes: &[u8]) -> io::Result<PathBuf> {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    let hex: String = digest.as_ref()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let dest = dir.join(format!("{prefix}-{hex}.{ext}"));
    if dest.is_file() {
        return Ok(dest);
    }
    // A name of our own (pid and a counter): runs writing the same content
    // at once each rename a whole file over the same name.
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!(".{prefix}-{hex}.{}-{n}.tmp", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, &dest)?;
    Ok(dest)
}

/// Quotes a path for a POSIX shell when it needs it.
fn sh(path: &Path) -> String {
    let s = path.display().to_string();
    if s.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"/._-+=:,@".contains(&b))
    {
        s
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// The text `portcullis ca` prints: `vars` from [`ca_bundles`].
pub fn ca_instructions(ca_cert: &Path, vars: &[(&str, PathBuf)]) -> String {
    let mut t = String::new();
    let ca = sh(ca_cert);
    let _ = writeln!(t, "portcullis CA certificate: {}", ca_cert.display());
    t.push_str(
        "\nClients of rules with tls = \"terminate\" must trust this CA.\n\
         \ncurl, one request:\n",
    );
    let _ = writeln!(t, "  curl --cacert {ca} https://example.com/");
    t.push_str(
        "\nEnvironment, for a shell or a sandbox's env (each a bundle of the CA plus the\n\
         roots the variable named before, else the system's):\n\
         \n  eval \"$(portcullis ca --shell sh)\"      # or --shell fish | source, --shell json\n\n",
    );
    for (var, path) in vars {
        let _ = writeln!(t, "  export {var}={}", sh(path));
    }
    t.push_str(
        "\nJVMs read none of these: `portcullis env` and `run` set JAVA_TOOL_OPTIONS\n\
         (proxy properties, and a trust store holding the CA).\n",
    );
    t
}
