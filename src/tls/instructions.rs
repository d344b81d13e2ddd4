//! What `portcullis ca` prints: where the CA certificate is and how to make
//! common clients trust it; and the environment variables as data, for
//! `portcullis env`.
//!
//! Most of these variables *replace* a tool's trust store rather than add
//! to it, so pointing them at the CA alone would break every destination
//! that is tunnelled without inspection. They should point at a bundle: the
//! system's roots plus the CA ([`write_bundle`] makes one).
//! `NODE_EXTRA_CA_CERTS` is the exception: it adds.

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
    ("NODE_EXTRA_CA_CERTS", "Node.js (adds to its own roots)"),
    ("REQUESTS_CA_BUNDLE", "python requests and pip"),
    (
        "CURL_CA_BUNDLE",
        "curl (before SSL_CERT_FILE), python requests",
    ),
    ("PIP_CERT", "pip (before REQUESTS_CA_BUNDLE)"),
    ("AWS_CA_BUNDLE", "the AWS CLI and SDKs"),
    ("GIT_SSL_CAINFO", "git over HTTPS"),
    ("CARGO_HTTP_CAINFO", "cargo"),
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

/// Writes `dest`: the system bundle (if there is one) followed by the CA,
/// atomically (temporary file, then rename). Returns whether system roots
/// were included.
pub fn write_bundle(ca_pem: &str, dest: &Path) -> io::Result<bool> {
    let system = system_bundle();
    let mut text = match &system {
        Some(p) => std::fs::read_to_string(p)?,
        None => String::new(),
    };
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str("# portcullis local CA\n");
    text.push_str(ca_pem);
    let tmp = dest.with_extension(format!("tmp-{}", std::process::id()));
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, dest)?;
    Ok(system.is_some())
}

/// `(variable, value)` pairs for `portcullis env`: `NODE_EXTRA_CA_CERTS`
/// gets the CA itself, the others `bundle` (or the CA, if there is no bundle).
pub fn ca_env(ca_cert: &Path, bundle: Option<&Path>) -> Vec<(&'static str, PathBuf)> {
    CA_ENV_VARS
        .iter()
        .map(|&(var, _)| {
            let path = match (var, bundle) {
                ("NODE_EXTRA_CA_CERTS", _) | (_, None) => ca_cert,
                (_, Some(b)) => b,
            };
            (var, path.to_owned())
        })
        .collect()
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

/// The text `portcullis ca` prints.
pub fn ca_instructions(ca_cert: &Path, bundle: Option<&Path>) -> String {
    let mut t = String::new();
    let ca = sh(ca_cert);
    let _ = writeln!(t, "portcullis CA certificate: {}", ca_cert.display());
    if let Some(b) = bundle {
        let _ = writeln!(t, "trust bundle (system roots + this CA): {}", b.display());
    }
    t.push_str(
        "\nClients of rules with tls = \"terminate\" must trust this CA.\n\
         \ncurl, one request:\n",
    );
    let _ = writeln!(t, "  curl --cacert {ca} https://example.com/");
    t.push_str("\nEnvironment, for a shell or a sandbox's env:\n");
    for (var, path) in ca_env(ca_cert, bundle) {
        let _ = writeln!(t, "  export {var}={}", sh(&path));
    }
    if bundle.is_none() {
        t.push_str(
            "\nNote: all but NODE_EXTRA_CA_CERTS replace the tool's trusted roots, so with\n\
             the CA alone, destinations reached without TLS termination fail to verify.\n\
             Point them at a bundle of the system roots plus this CA instead.\n",
        );
    }
    t
}
