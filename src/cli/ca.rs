//! `portcullis ca`: where the CA that signs terminated-TLS leaves lives, and
//! how to make programs trust it. Generates the CA (into the state
//! directory) if it does not exist yet, so the answer is usable at once.

use std::path::PathBuf;
use std::process::ExitCode;

use portcullis::config::TlsConfig;
use portcullis::tls::instructions::{ca_instructions, write_bundle};
use portcullis::tls::CertAuthority;

use crate::args::Args;

/// The CA certificate, and a trust bundle (the system's roots plus the CA)
/// written beside the generated CA, when the system has roots to copy.
pub fn ca_files(tls: &TlsConfig) -> Result<(PathBuf, Option<PathBuf>), String> {
    let state_dir = tls.state_dir.clone().ok_or_else(|| {
        "no state directory for the CA: set [tls] state_dir, or ca_cert and ca_key".to_string()
    })?;
    let ca = CertAuthority::from_config(tls.ca_cert.as_deref(), tls.ca_key.as_deref(), &state_dir)
        .map_err(|e| e.to_string())?;
    std::fs::create_dir_all(&state_dir).map_err(|e| format!("{}: {e}", state_dir.display()))?;
    let bundle = state_dir.join("bundle.pem");
    let wrote =
        write_bundle(ca.cert_pem(), &bundle).map_err(|e| format!("{}: {e}", bundle.display()))?;
    Ok((ca.cert_path().to_owned(), wrote.then_some(bundle)))
}

/// Runs `portcullis ca`.
pub fn main(args: &Args) -> ExitCode {
    let setup = match args.load() {
        Ok(s) => s,
        Err(e) => {
            fatal!("{e}");
            return ExitCode::from(2);
        }
    };
    match ca_files(&setup.config.tls) {
        Ok((cert, bundle)) => {
            print!("{}", ca_instructions(&cert, bundle.as_deref()));
            ExitCode::SUCCESS
        }
        Err(e) => {
            fatal!("{e}");
            ExitCode::FAILURE
        }
    }
}
