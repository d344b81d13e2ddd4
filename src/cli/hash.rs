//! `portcullis hash-password`: reads a password (one line on stdin) and
//! prints its argon2id PHC string, for `[[auth.users]] password_hash`, a
//! `password_file` or an `--auth-file` line (`--user NAME` prints that line).

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;

/// `portcullis hash-password [--user NAME]`
#[derive(Debug, clap::Args)]
#[command(after_help = HASH_AFTER_HELP)]
pub struct HashArgs {
    /// Print `NAME:HASH`, a line for --auth-file, instead of the hash alone.
    #[arg(long, value_name = "NAME")]
    pub user: Option<String>,
}

const HASH_AFTER_HELP: &str = "\
The password is the first line of standard input (a terminal shows what
is typed). The hash is argon2id with a random salt: the same password
hashes differently each time, and any of its hashes verifies it.

Examples:
  portcullis hash-password < pw.txt
  printf '%s\\n' \"$PW\" | portcullis hash-password --user alice >> users.txt";

/// The password in the first line of `input`, without its line ending.
pub fn read_password(input: &mut impl BufRead) -> Result<String, String> {
    let mut line = String::new();
    input
        .read_line(&mut line)
        .map_err(|e| format!("cannot read the password: {e}"))?;
    let pw = line
        .strip_suffix('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .unwrap_or(&line);
    if pw.is_empty() {
        return Err("empty password: give it as the first line of standard input".into());
    }
    if pw.len() > 255 {
        return Err("the password is longer than 255 bytes, which SOCKS5 cannot carry".into());
    }
    Ok(pw.to_owned())
}

/// Runs `portcullis hash-password`.
pub fn main(args: &HashArgs) -> ExitCode {
    if let Some(name) = &args.user {
        if let Err(e) = portcullis::auth::check_name(name) {
            fatal!("--user {name:?}: {e}");
            return ExitCode::from(2);
        }
    }
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        eprint!("Password: ");
        let _ = std::io::stderr().flush();
    }
    let hashed = read_password(&mut stdin.lock())
        .and_then(|pw| portcullis::auth::hash_password(pw.as_bytes()));
    match hashed {
        Ok(hash) => {
            match &args.user {
                Some(name) => println!("{name}:{hash}"),
                None => println!("{hash}"),
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            fatal!("{e}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_line_without_its_ending() {
        let read = |s: &str| read_password(&mut s.as_bytes());
        assert_eq!(read("pw\n").unwrap(), "pw");
        assert_eq!(read("pw\r\nmore\n").unwrap(), "pw");
        assert_eq!(read("p w:x").unwrap(), "p w:x");
        assert!(read("\n").is_err());
        assert!(read("").is_err());
        assert!(read(&"x".repeat(256)).is_err());
    }
}
