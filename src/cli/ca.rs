//! `portcullis ca`: where the CA that signs terminated-TLS leaves lives, and
//! how to make programs trust it. Generates the CA (into the state
//! directory) if it does not exist yet, so the answer is usable at once.
//! `--shell sh|fish|json` prints only the variables, to `eval`.

use std::process::ExitCode;

use portcullis::tls::instructions::ca_instructions;

use super::CaArgs;
use crate::proxy_env::{ca_vars, ProxyEnv};

/// Runs `portcullis ca`.
pub fn main(args: &CaArgs) -> ExitCode {
    let setup = match args.proxy.load() {
        Ok(s) => s,
        Err(e) => {
            fatal!("{e}");
            return ExitCode::from(2);
        }
    };
    match ca_vars(&setup.config.tls) {
        Ok((cert, vars)) => {
            match args.shell {
                None => print!("{}", ca_instructions(&cert, &vars)),
                Some(shell) => {
                    let env = ProxyEnv {
                        vars: vars
                            .into_iter()
                            .map(|(n, p)| (n.to_string(), p.display().to_string()))
                            .collect(),
                        notes: Vec::new(),
                    };
                    print!("{}", super::env::render(&env, shell));
                }
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            fatal!("{e}");
            ExitCode::FAILURE
        }
    }
}
