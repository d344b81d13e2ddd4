//! Configuration errors: which file, which key, where in the file, and why.

use std::fmt;
use std::path::{Path, PathBuf};

/// A configuration file that does not load, parse or validate: says which
/// file, which key (when known) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    path: Option<PathBuf>,
    key: Option<String>,
    /// 1-based line and column of the offending value in the file.
    location: Option<(usize, usize)>,
    message: String,
}

impl ConfigError {
    /// An error about `key` (a dotted path such as `limits.buffer_size`).
    pub fn key(key: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError {
            path: None,
            key: Some(key.into()),
            location: None,
            message: message.into(),
        }
    }
    /// An error not tied to one key.
    pub fn other(message: impl Into<String>) -> ConfigError {
        ConfigError {
            path: None,
            key: None,
            location: None,
            message: message.into(),
        }
    }
    /// Attributes the error to a file.
    pub fn in_file(mut self, path: impl Into<PathBuf>) -> ConfigError {
        self.path = Some(path.into());
        self
    }
    /// The file, if the error came from one.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }
    /// The offending key, if known.
    pub fn key_name(&self) -> Option<&str> {
        self.key.as_deref()
    }
    /// What is wrong.
    pub fn message(&self) -> &str {
        &self.message
    }
    /// 1-based line and column of the offending value, when it came from a file.
    pub fn location(&self) -> Option<(usize, usize)> {
        self.location
    }

    /// Points the error at its key's value in `text`, if the key is there.
    pub(super) fn locate(mut self, text: &str) -> ConfigError {
        if self.location.is_none() {
            if let Some(key) = &self.key {
                self.location = value_offset(text, key).map(|at| line_col(text, at));
            }
        }
        self
    }

    pub(super) fn from_toml(e: &toml::de::Error, input: &str) -> ConfigError {
        let message = e.message().trim().replace('\n', "; ");
        let message = match e.span() {
            Some(span) => {
                let (line, col) = line_col(input, span.start);
                format!("line {line}, column {col}: {message}")
            }
            None => message,
        };
        ConfigError::other(message)
    }
}

/// Byte offset of the value at a dotted key path (`rules[2].cidrs[1]`,
/// `limits.buffer_size`) in a TOML document, if it is there.
fn value_offset(text: &str, key: &str) -> Option<usize> {
    let table = toml::de::DeTable::parse(text).ok()?;
    let doc = toml::Spanned::new(table.span(), toml::de::DeValue::Table(table.into_inner()));
    let mut at = &doc;
    for part in key.split('.') {
        let (name, indexes) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if !name.is_empty() {
            at = at.get_ref().get(name)?;
        }
        for index in indexes.split('[').skip(1) {
            let n: usize = index.strip_suffix(']')?.parse().ok()?;
            at = at.get_ref().get(n)?;
        }
    }
    Some(at.span().start)
}

/// 1-based line and column of byte `offset` in `input`.
fn line_col(input: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(input.len());
    let before = input.get(..offset).unwrap_or(input);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let col = before[line_start..].chars().count() + 1;
    (line, col)
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(p) = &self.path {
            write!(f, "{}: ", p.display())?;
        }
        if let Some(k) = &self.key {
            write!(f, "{k}: ")?;
        }
        if let Some((line, col)) = self.location {
            write!(f, "line {line}, column {col}: ")?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConfigError {}
