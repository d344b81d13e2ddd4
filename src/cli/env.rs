//! `portcullis env`: prints the proxy variables for the configured listener,
//! as sh or fish commands to `eval`, or as a JSON object.

use std::fmt::Write;
use std::process::ExitCode;

use super::{EnvArgs, Shell};
use crate::proxy_env::ProxyEnv;

/// Loads the configuration like the main command and prints its variables.
pub fn main(args: &EnvArgs) -> ExitCode {
    let setup = match args.proxy.load() {
        Ok(s) => s,
        Err(e) => {
            fatal!("{e}");
            return ExitCode::from(2);
        }
    };
    match ProxyEnv::for_config(&setup.config) {
        Ok(env) => {
            if args.shell == Shell::Json {
                // JSON has no comments: the notes go to stderr.
                for note in &env.notes {
                    crate::report(log::Level::Warn, format_args!("note: {note}"));
                }
            }
            print!("{}", render(&env, args.shell));
            ExitCode::SUCCESS
        }
        Err(e) => {
            fatal!("{e}");
            ExitCode::from(2)
        }
    }
}

/// The variables in `shell`'s syntax; notes become comment lines (sh, fish).
pub fn render(env: &ProxyEnv, shell: Shell) -> String {
    let mut out = String::new();
    match shell {
        Shell::Sh | Shell::Fish => {
            for note in &env.notes {
                // A note quotes paths (a Unix listener's): a newline in one
                // would end the comment and `eval` the rest.
                let note: String = note
                    .chars()
                    .flat_map(|c| {
                        let esc = c.is_control().then(|| c.escape_default());
                        let plain = (!c.is_control()).then_some(c);
                        esc.into_iter().flatten().chain(plain)
                    })
                    .collect();
                let _ = writeln!(out, "# {note}");
            }
            for (name, value) in &env.vars {
                let _ = match shell {
                    Shell::Sh => writeln!(out, "export {name}={}", sh_quote(value)),
                    _ => writeln!(out, "set -gx {name} {}", fish_quote(value)),
                };
            }
        }
        Shell::Json => {
            out.push('{');
            for (i, (name, value)) in env.vars.iter().enumerate() {
                let sep = if i == 0 { "" } else { ", " };
                let _ = write!(out, "{sep}{}: {}", json_string(name), json_string(value));
            }
            out.push_str("}\n");
        }
    }
    out
}

/// Single quotes for sh: nothing inside is special but `'`, written `'\''`.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Single quotes for fish: `\` and `'` are escaped with a backslash.
fn fish_quote(s: &str) -> String {
    format!("'{}'", s.replace('\\', r"\\").replace('\'', r"\'"))
}

/// A JSON string literal.
fn json_string(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ProxyEnv {
        ProxyEnv {
            vars: vec![
                ("HTTP_PROXY".into(), "http://u:it's@127.0.0.1:1".into()),
                ("X".into(), "a\\b\"c\n".into()),
            ],
            notes: vec!["a note".into()],
        }
    }

    #[test]
    fn sh_quotes_single_quotes() {
        let out = render(&sample(), Shell::Sh);
        assert_eq!(
            out,
            "# a note\nexport HTTP_PROXY='http://u:it'\\''s@127.0.0.1:1'\nexport X='a\\b\"c\n'\n"
        );
    }

    #[test]
    fn fish_escapes_backslash_and_quote() {
        let out = render(&sample(), Shell::Fish);
        assert!(out.starts_with("# a note\nset -gx HTTP_PROXY 'http://u:it\\'s@127.0.0.1:1'\n"));
        assert!(out.contains("set -gx X 'a\\\\b\"c\n'"));
    }

    /// Every line of sh or fish output is a comment or one assignment: a
    /// note quoting a path with a newline stays inside its comment.
    #[test]
    fn a_newline_in_a_note_stays_in_the_comment() {
        let env = ProxyEnv {
            vars: vec![("A".into(), "1".into())],
            notes: vec!["socket (/tmp/x\ntouch /tmp/pwned\r\n)".into()],
        };
        assert!(env.notes[0].contains('\n'));
        for shell in [Shell::Sh, Shell::Fish] {
            let out = render(&env, shell);
            assert_eq!(out.lines().count(), 2, "{out}");
            assert!(
                out.starts_with("# socket (/tmp/x\\ntouch /tmp/pwned\\r\\n)\n"),
                "{out}"
            );
        }
    }

    #[test]
    fn json_is_one_object() {
        let out = render(&sample(), Shell::Json);
        assert_eq!(
            out,
            "{\"HTTP_PROXY\": \"http://u:it's@127.0.0.1:1\", \"X\": \"a\\\\b\\\"c\\n\"}\n"
        );
    }
}
