//! Subcommands beside the proxy's own flags: `portcullis run` and
//! `portcullis env`. Each takes the same proxy flags as the main command
//! (flattened from [`Args`]), so `--config`, `--listen`, `--allow` ... mean
//! the same everywhere. `completions` and `man` print what clap generates
//! from these definitions.

pub mod ca;
pub mod env;
pub mod generate;
pub mod hash;
pub mod suggest;

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use crate::args::Args;
use crate::run::RunArgs;

// The whole command line: the proxy's flags, or a subcommand. (A plain
// comment: a doc comment would replace the about text `Args` brings.)
#[derive(Debug, Parser)]
#[command(name = "portcullis", args_conflicts_with_subcommands = true)]
pub struct Cli {
    /// The proxy's flags (the main command).
    #[command(flatten)]
    pub args: Args,
    /// A subcommand, if any.
    #[command(subcommand)]
    pub command: Option<Command>,
}

// `portcullis SUBCOMMAND`. (A plain comment, as on `Cli`.)
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run CMD behind the proxy: in a new network namespace whose only way
    /// out is the proxy (Linux), with the proxy variables set.
    Run(RunArgs),
    /// Print the proxy environment variables for the configured listener:
    /// eval "$(portcullis env)".
    Env(EnvArgs),
    /// Print where the CA that signs terminated-TLS leaves is, and how to
    /// make programs trust it (generating it first if needed).
    Ca(CaArgs),
    /// Read a password (the first line of stdin) and print its argon2id
    /// hash, for [[auth.users]] password_hash or an --auth-file line.
    HashPassword(hash::HashArgs),
    /// Print a completion script for bash, zsh or fish (also elvish,
    /// powershell), generated from these flags.
    Completions(generate::CompletionsArgs),
    /// Print the manual page (roff): portcullis man | man -l -
    Man(generate::ManArgs),
    /// Learn mode: read the proxy's JSON log (a file, or standard input)
    /// and print a policy allowing exactly the destinations it shows.
    Suggest(suggest::SuggestArgs),
}

const CA_AFTER_HELP: &str = "\
Examples:
  portcullis ca --config portcullis.toml
  eval \"$(portcullis ca --shell sh)\"
  portcullis ca --shell fish | source";

/// `portcullis ca [proxy options] [--shell sh|fish|json]`
#[derive(Debug, clap::Args)]
#[command(after_help = CA_AFTER_HELP)]
pub struct CaArgs {
    /// The proxy's flags (`--config`, `--ca-cert`, `--ca-key` matter here).
    #[command(flatten)]
    pub proxy: Args,

    /// Print only the trust variables, in this syntax (to `eval`), instead
    /// of the instructions.
    #[arg(long, value_enum)]
    pub shell: Option<Shell>,
}

const ENV_AFTER_HELP: &str = "\
Examples:
  eval \"$(portcullis env)\"
  eval \"$(portcullis env --config portcullis.toml)\"
  portcullis env --shell fish | source
  portcullis env --listen 127.0.0.1:8080 --shell json";

/// `portcullis env [proxy options] [--shell sh|fish|json]`
#[derive(Debug, clap::Args)]
#[command(after_help = ENV_AFTER_HELP)]
pub struct EnvArgs {
    /// The proxy's flags (the listener, --auth, --config matter here).
    #[command(flatten)]
    pub proxy: Args,

    /// Output syntax.
    #[arg(long, value_enum, default_value_t = Shell::Sh)]
    pub shell: Shell,
}

/// `--shell`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Shell {
    /// POSIX sh: `export NAME='value'`.
    Sh,
    /// fish: `set -gx NAME 'value'`.
    Fish,
    /// One JSON object of names to values.
    Json,
}

/// Runs a subcommand.
pub fn main(command: Command) -> ExitCode {
    match command {
        Command::Run(run) => crate::run::main(run),
        Command::Env(env) => env::main(&env),
        Command::Ca(ca) => ca::main(&ca),
        Command::HashPassword(h) => hash::main(&h),
        Command::Completions(c) => generate::completions(&c),
        Command::Man(m) => generate::man(&m),
        Command::Suggest(s) => suggest::main(&s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("portcullis").chain(args.iter().copied()))
    }

    #[test]
    fn help_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn no_subcommand_is_the_proxy() {
        let cli = parse(&["--allow", "example.com:443"]).unwrap();
        assert!(cli.command.is_none());
        assert_eq!(cli.args.allow.len(), 1);
    }

    #[test]
    fn run_takes_proxy_flags_and_a_command_after_the_separator() {
        let cli = parse(&[
            "run",
            "--allow",
            "127.0.0.1:8080",
            "--no-isolate",
            "--",
            "sh",
            "-c",
            "exit 7",
        ])
        .unwrap();
        let Some(Command::Run(run)) = cli.command else {
            panic!("not run")
        };
        assert!(run.no_isolate);
        assert_eq!(run.proxy.allow.len(), 1);
        assert_eq!(run.cmd, ["sh", "-c", "exit 7"]);
    }

    #[test]
    fn run_needs_a_command_and_main_flags_stay_with_main() {
        assert!(parse(&["run"]).is_err());
        assert!(parse(&["run", "--"]).is_err());
        // Proxy flags go after the subcommand, not before it.
        assert!(parse(&["--allow", "a.example", "run", "--", "true"]).is_err());
    }

    #[test]
    fn hash_password_takes_an_optional_user() {
        let cli = parse(&["hash-password", "--user", "alice"]).unwrap();
        let Some(Command::HashPassword(h)) = cli.command else {
            panic!("not hash-password")
        };
        assert_eq!(h.user.as_deref(), Some("alice"));
        assert!(parse(&["hash-password", "--allow", "a.test"]).is_err());
    }

    #[test]
    fn env_shells() {
        let cli = parse(&["env", "--shell", "fish", "--listen", "127.0.0.1:9"]).unwrap();
        let Some(Command::Env(env)) = cli.command else {
            panic!("not env")
        };
        assert_eq!(env.shell, Shell::Fish);
        assert_eq!(env.proxy.listen.len(), 1);
        let cli = parse(&["env"]).unwrap();
        let Some(Command::Env(env)) = cli.command else {
            panic!("not env")
        };
        assert_eq!(env.shell, Shell::Sh);
        assert!(parse(&["env", "--shell", "csh"]).is_err());
    }

    #[test]
    fn completions_and_man() {
        let cli = parse(&["completions", "zsh"]).unwrap();
        let Some(Command::Completions(c)) = cli.command else {
            panic!("not completions")
        };
        assert_eq!(c.shell, clap_complete::Shell::Zsh);
        assert!(parse(&["completions"]).is_err());
        assert!(parse(&["completions", "csh"]).is_err());
        assert!(matches!(
            parse(&["man"]).unwrap().command,
            Some(Command::Man(generate::ManArgs { subcommand: None }))
        ));
        assert!(parse(&["man", "run"]).is_ok());
        assert!(parse(&["man", "--allow", "a.test"]).is_err());
    }
}
