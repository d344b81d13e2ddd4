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

/// `portcullis man [SUBCOMMAND]`
#[derive(Debug, clap::Args)]
pub struct ManArgs {
    /// A subcommand's page instead (`portcullis man run`: portcullis-run(1)).
    #[arg(value_name = "SUBCOMMAND")]
    pub subcommand: Option<String>,
}

/// Prints the manual page, roff (`portcullis man | man -l -`): the main
/// command's, or a subcommand's.
pub fn man(args: &ManArgs) -> ExitCode {
    let mut command = Cli::command();
    command.build();
    if let Some(name) = &args.subcommand {
        let Some(sub) = command.find_subcommand(name).cloned() else {
            let names: Vec<_> = command
                .get_subcommands()
                .map(|c| c.get_name().to_string())
                .filter(|n| n != "help")
                .collect();
            fatal!(
                "no subcommand {name:?}: the pages are portcullis man, or portcullis man {}",
                names.join("|")
            );
            return ExitCode::from(2);
        };
        // clap takes a static name (without its `string` feature); the
        // process prints one page and exits.
        let page: &'static str = format!("portcullis-{}", sub.get_name()).leak();
        command = sub.name(page).bin_name(format!("portcullis {name}"));
    }
    let mut out = Vec::new();
    match clap_mangen::Man::new(command).render(&mut out) {
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
