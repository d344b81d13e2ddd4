//! The binary's logger: every line on stderr is either logfmt
//! (`key=value`, the default) or one JSON object, with the same keys in the
//! same order. Session and request [events](crate::events) carry their
//! fields (`event=session conn=3 protocol=connect ...`); any other line is
//! `event=log` with `module` and `message`. Both start with `time` (RFC 3339,
//! UTC, milliseconds) and `level`.
//!
//! Built on `env_logger`, so `RUST_LOG` filters as usual (default `info`).
//! An embedder may install any other logger: events are ordinary `log`
//! records whose fields are key-values.

mod escape;
mod line;

use std::fmt;
use std::io::Write;
use std::str::FromStr;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// logfmt: `time=... level=info event=session conn=3 ...`.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

impl LogFormat {
    /// `text` or `json`.
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

impl fmt::Display for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for LogFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<LogFormat, String> {
        match s.trim() {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            _ => Err(format!("invalid log format {s:?}: expected text or json")),
        }
    }
}

/// Installs the logger on stderr in `format`, filtered by `RUST_LOG`
/// (default `info`). Fails if a logger is installed already.
pub fn init(format: LogFormat) -> Result<(), log::SetLoggerError> {
    init_with(format, "info", None)
}

/// Installs the logger in `format`, filtered by `RUST_LOG` (default
/// `default_filter`), writing to `to` (stderr when `None`). Fails if a
/// logger is installed already.
pub fn init_with(
    format: LogFormat,
    default_filter: &str,
    to: Option<Box<dyn Write + Send>>,
) -> Result<(), log::SetLoggerError> {
    let mut builder =
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(default_filter));
    if let Some(w) = to {
        builder.target(env_logger::Target::Pipe(w));
    }
    builder
        .format(move |buf, record| {
            let mut out = String::with_capacity(256);
            line::render(
                format,
                &buf.timestamp_millis().to_string(),
                record,
                &mut out,
            );
            out.push('\n');
            buf.write_all(out.as_bytes())
        })
        .try_init()
}

/// Renders `record` as the line [`init`]'s logger writes (without the
/// newline), stamped with `time`: for loggers of an embedder's own.
pub fn render(format: LogFormat, time: &str, record: &log::Record) -> String {
    let mut out = String::with_capacity(256);
    line::render(format, time, record, &mut out);
    out
}
