//! `portcullis completions SHELL` and `portcullis man`: a shell completion
//! script and the manual page, generated from the clap definitions, so they
//! always list the flags the binary takes.

use std::io::Write;
use std::process::ExitCode;

use clap::CommandFactory;

use super::Cli;

/// `portcullis completions SHELL`
#[derive(Debug, clap::Args)]
#[command(after_help = COMPLETIONS_AFTER_HELP)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

const COMPLETIONS_AFTER_HELP: &str = "\
Examples:
  portcullis completions bash > ~/.local/share/bash-completion/completions/portcullis
  portcullis completions zsh > ~/.zfunc/_portcullis      # with fpath+=~/.zfunc
  portcullis completions fish > ~/.config/fish/completions/portcullis.fish";

/// Prints the completion script for `shell`.
pub fn completions(args: &CompletionsArgs) -> ExitCode {
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut Cli::command(), "portcullis", &mut out);
    print_all(&out)
}

/// Prints the manual page, roff (`portcullis man | man -l -`).
pub fn man() -> ExitCode {
    let mut out = Vec::new();
    match clap_mangen::Man::new(Cli::command()).render(&mut out) {
        Ok(()) => print_all(&out),
        Err(e) => {
            fatal!("cannot render the manual page: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Writes `bytes` to standard output; a reader that went away (`| head`)
/// is not an error worth a message, anything else is.
fn print_all(bytes: &[u8]) -> ExitCode {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            fatal!("cannot write to standard output: {e}");
            ExitCode::FAILURE
        }
    }
}
