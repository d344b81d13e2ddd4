//! Escaping for log lines: JSON strings and logfmt values. Whatever a client
//! controls (a path, a host, a header) goes through here, so it can neither
//! break a line nor pass for a key. Not serde_json's escaper: it leaves C1
//! controls and U+2028/U+2029 raw, and logfmt shares this quoting.

use std::fmt::Write;

/// Characters that must never appear raw in a line: C0 and C1 controls,
/// DEL, and the Unicode line and paragraph separators (which some readers
/// treat as line breaks).
fn is_hazard(c: char) -> bool {
    c.is_control() || c == '\u{2028}' || c == '\u{2029}'
}

/// Appends `s` quoted, with `\"`, `\\`, `\n`, `\r`, `\t` and `\uXXXX`
/// escapes: a JSON string, and the quoted form of a logfmt value.
fn quoted(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if is_hazard(c) => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Appends `s` as a JSON string, quotes included.
pub(crate) fn json_str(out: &mut String, s: &str) {
    quoted(out, s);
}

/// Appends `s` as a logfmt value: bare when it is plain printable ASCII
/// with no `=`, `"` or `\`, else quoted with `\"`, `\\`, `\n`, `\r`, `\t`
/// and `\uXXXX` escapes (what go-logfmt and most parsers read).
pub(crate) fn logfmt_value(out: &mut String, s: &str) {
    let bare = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_graphic() && !matches!(b, b'=' | b'"' | b'\\'));
    if bare {
        out.push_str(s);
        return;
    }
    quoted(out, s);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(s: &str) -> String {
        let mut out = String::new();
        json_str(&mut out, s);
        out
    }

    fn logfmt(s: &str) -> String {
        let mut out = String::new();
        logfmt_value(&mut out, s);
        out
    }

    #[test]
    fn json_escapes_quotes_backslashes_and_controls() {
        assert_eq!(json("plain"), r#""plain""#);
        assert_eq!(json(r#"a"b\c"#), r#""a\"b\\c""#);
        assert_eq!(json("l1\nl2\r\t"), r#""l1\nl2\r\t""#);
        assert_eq!(
            json("\u{0}\u{1b}\u{7f}\u{85}"),
            r#""\u0000\u001b\u007f\u0085""#
        );
        assert_eq!(json("a\u{2028}b"), r#""a\u2028b""#);
        assert_eq!(json("é/日本"), "\"é/日本\"");
    }

    #[test]
    fn logfmt_quotes_only_when_needed() {
        assert_eq!(logfmt("example.com:443"), "example.com:443");
        assert_eq!(logfmt("/v1/a-b_c.json"), "/v1/a-b_c.json");
        assert_eq!(logfmt(""), r#""""#);
        assert_eq!(logfmt("two words"), r#""two words""#);
        assert_eq!(logfmt("k=v"), r#""k=v""#);
        assert_eq!(logfmt(r#"say "hi""#), r#""say \"hi\"""#);
        assert_eq!(logfmt(r"a\b"), r#""a\\b""#);
        assert_eq!(logfmt("x\ny injected=1"), r#""x\ny injected=1""#);
        assert_eq!(logfmt("é"), "\"é\"");
        assert_eq!(logfmt("\u{85}"), r#""\u0085""#);
    }
}
