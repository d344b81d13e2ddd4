//! `portcullis ca`: where the CA that signs terminated-TLS leaves lives, and
//! how to make programs trust it. Generates the CA (into the state
//! directory) if it does not exist yet, so the answer is usable at once.

use std::process::ExitCode;

use portcullis::tls::instructions::ca_instructions;

use crate::args::Args;
use crate::proxy_env::ca_files;

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
