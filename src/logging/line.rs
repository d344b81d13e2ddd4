//! One log record as one line: `time`, `level`, then either an event's
//! fields (a record carrying an `event` key-value) or `event=log`, `module`
//! and `message`. JSON and logfmt write the same keys in the same order.

use std::fmt::Write;

use log::kv::{self, Key, Value, VisitSource, VisitValue};

use super::escape::{json_str, logfmt_value};
use super::LogFormat;

/// Appends `record` as one line (no newline) to `out`; `time` is the RFC
/// 3339 timestamp to stamp it with.
pub(crate) fn render(format: LogFormat, time: &str, record: &log::Record, out: &mut String) {
    let mut w = Writer::new(format, out);
    w.str("time", time);
    w.str("level", level(record.level()));
    let kvs = record.key_values();
    if kvs.get(Key::from_str("event")).is_none() {
        w.str("event", "log");
        w.str("module", record.target());
        let mut message = String::new();
        let _ = write!(message, "{}", record.args());
        w.str("message", &message);
    }
    let _ = kvs.visit(&mut Pairs(&mut w));
    w.finish();
}

fn level(l: log::Level) -> &'static str {
    match l {
        log::Level::Error => "error",
        log::Level::Warn => "warn",
        log::Level::Info => "info",
        log::Level::Debug => "debug",
        log::Level::Trace => "trace",
    }
}

/// Writes `key=value` pairs (logfmt) or `"key":value` members (JSON).
struct Writer<'o> {
    format: LogFormat,
    out: &'o mut String,
    first: bool,
}

impl<'o> Writer<'o> {
    fn new(format: LogFormat, out: &'o mut String) -> Writer<'o> {
        if format == LogFormat::Json {
            out.push('{');
        }
        Writer {
            format,
            out,
            first: true,
        }
    }

    fn key(&mut self, key: &str) {
        match (self.format, self.first) {
            (LogFormat::Json, false) => self.out.push(','),
            (LogFormat::Text, false) => self.out.push(' '),
            (_, true) => {}
        }
        self.first = false;
        match self.format {
            LogFormat::Json => {
                json_str(self.out, key);
                self.out.push(':');
            }
            LogFormat::Text => {
                // Keys are ours, but a logged key-value from elsewhere could
                // hold anything: keep only what a logfmt key may be.
                self.out.extend(key.chars().map(|c| {
                    if c.is_ascii_graphic() && c != '=' && c != '"' {
                        c
                    } else {
                        '_'
                    }
                }));
                self.out.push('=');
            }
        }
    }

    fn str(&mut self, key: &str, value: &str) {
        self.key(key);
        match self.format {
            LogFormat::Json => json_str(self.out, value),
            LogFormat::Text => logfmt_value(self.out, value),
        }
    }

    /// A number or a boolean, written bare in both formats.
    fn raw(&mut self, key: &str, value: impl std::fmt::Display) {
        self.key(key);
        let _ = write!(self.out, "{value}");
    }

    fn finish(self) {
        if self.format == LogFormat::Json {
            self.out.push('}');
        }
    }
}

struct Pairs<'w, 'o>(&'w mut Writer<'o>);

impl<'kvs> VisitSource<'kvs> for Pairs<'_, '_> {
    fn visit_pair(&mut self, key: Key<'kvs>, value: Value<'kvs>) -> Result<(), kv::Error> {
        value.visit(Member {
            w: self.0,
            key: key.as_str(),
        })
    }
}

/// Writes one value by its type.
struct Member<'w, 'o, 'k> {
    w: &'w mut Writer<'o>,
    key: &'k str,
}

impl<'v> VisitValue<'v> for Member<'_, '_, '_> {
    fn visit_any(&mut self, value: Value) -> Result<(), kv::Error> {
        self.w.str(self.key, &value.to_string());
        Ok(())
    }
    fn visit_u64(&mut self, value: u64) -> Result<(), kv::Error> {
        self.w.raw(self.key, value);
        Ok(())
    }
    fn visit_i64(&mut self, value: i64) -> Result<(), kv::Error> {
        self.w.raw(self.key, value);
        Ok(())
    }
    fn visit_f64(&mut self, value: f64) -> Result<(), kv::Error> {
        if value.is_finite() {
            self.w.raw(self.key, value);
        } else {
            self.w.str(self.key, &value.to_string());
        }
        Ok(())
    }
    fn visit_bool(&mut self, value: bool) -> Result<(), kv::Error> {
        self.w.raw(self.key, value);
        Ok(())
    }
    fn visit_str(&mut self, value: &str) -> Result<(), kv::Error> {
        self.w.str(self.key, value);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{Decision, Event, EventKind, Protocol};
    use std::sync::Arc;

    const T: &str = "2026-01-02T03:04:05.678Z";

    fn plain(format: LogFormat, level: log::Level, msg: &str) -> String {
        let mut out = String::new();
        render(
            format,
            T,
            &log::Record::builder()
                .level(level)
                .target("portcullis::reactor")
                .args(format_args!("{msg}"))
                .build(),
            &mut out,
        );
        out
    }

    fn event(format: LogFormat, e: &Event) -> String {
        let mut out = String::new();
        render(
            format,
            T,
            &log::Record::builder()
                .level(log::Level::Info)
                .target(crate::events::LOG_TARGET)
                .args(format_args!("{e}"))
                .key_values(e)
                .build(),
            &mut out,
        );
        out
    }

    fn denied_request() -> Event {
        let mut e = Event::new(EventKind::Request, 42, "127.0.0.1:5000");
        e.protocol = Some(Protocol::Connect);
        e.target = Some("api.test:80".into());
        e.rule = Some(Arc::from("api requests[1]"));
        e.decision = Some(Decision::Deny);
        e.reason = Some("GET /admin\" x=1\nis denied".into());
        e.method = Some("GET".into());
        e.path = Some("/admin\" x=1\n".into());
        e.status = Some(403);
        e
    }

    #[test]
    fn plain_lines_in_both_formats() {
        assert_eq!(
            plain(LogFormat::Text, log::Level::Warn, "listening on 127.0.0.1:3128 (auto)"),
            "time=2026-01-02T03:04:05.678Z level=warn event=log module=portcullis::reactor message=\"listening on 127.0.0.1:3128 (auto)\""
        );
        assert_eq!(
            plain(LogFormat::Json, log::Level::Info, "two\nlines \"quoted\""),
            r#"{"time":"2026-01-02T03:04:05.678Z","level":"info","event":"log","module":"portcullis::reactor","message":"two\nlines \"quoted\""}"#
        );
    }

    #[test]
    fn events_in_both_formats() {
        let e = denied_request();
        assert_eq!(
            event(LogFormat::Text, &e),
            "time=2026-01-02T03:04:05.678Z level=info event=request conn=42 protocol=connect client=127.0.0.1:5000 target=api.test:80 rule=\"api requests[1]\" decision=deny reason=\"GET /admin\\\" x=1\\nis denied\" method=GET path=\"/admin\\\" x=1\\n\" status=403"
        );
        assert_eq!(
            event(LogFormat::Json, &e),
            r#"{"time":"2026-01-02T03:04:05.678Z","level":"info","event":"request","conn":42,"protocol":"connect","client":"127.0.0.1:5000","target":"api.test:80","rule":"api requests[1]","decision":"deny","reason":"GET /admin\" x=1\nis denied","method":"GET","path":"/admin\" x=1\n","status":403}"#
        );
    }

    #[test]
    fn numbers_and_booleans_are_bare() {
        let mut e = Event::new(EventKind::Session, 1, "unix");
        e.upgraded = Some(true);
        e.bytes_up = Some(10);
        e.dialled = Some("::1".parse().unwrap());
        let line = event(LogFormat::Json, &e);
        assert!(
            line.ends_with(r#""dialled":"::1","upgraded":true,"bytes_up":10}"#),
            "{line}"
        );
        let line = event(LogFormat::Text, &e);
        assert!(
            line.ends_with(" dialled=::1 upgraded=true bytes_up=10"),
            "{line}"
        );
    }
}
