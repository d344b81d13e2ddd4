//! Human durations in config and on the command line: `250ms`, `10s`, `5m`,
//! `2h`, `1d`, a bare number of seconds, or `off`/`none` for "never".

use std::time::Duration;

/// Parses a duration; `Ok(None)` for `off`, `none` or `0`.
pub fn parse(s: &str) -> Result<Option<Duration>, String> {
    let t = s.trim();
    if t.eq_ignore_ascii_case("off") || t.eq_ignore_ascii_case("none") || t == "0" {
        return Ok(None);
    }
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().map_err(|_| {
        format!("invalid duration {s:?}: expected e.g. 500ms, 10s, 5m, 2h, 1d or off")
    })?;
    let ms = match unit.trim() {
        "ms" => Some(n),
        "" | "s" => n.checked_mul(1_000),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        "d" => n.checked_mul(86_400_000),
        other => return Err(format!("invalid duration {s:?}: unknown unit {other:?}")),
    };
    match ms {
        Some(0) => Ok(None),
        Some(ms) => Ok(Some(Duration::from_millis(ms))),
        None => Err(format!("invalid duration {s:?}: too large")),
    }
}

/// Parses a duration that must not be `off`.
pub fn parse_required(s: &str) -> Result<Duration, String> {
    parse(s)?.ok_or_else(|| format!("duration {s:?} must be greater than zero"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse("250ms"), Ok(Some(Duration::from_millis(250))));
        assert_eq!(parse("10"), Ok(Some(Duration::from_secs(10))));
        assert_eq!(parse("10s"), Ok(Some(Duration::from_secs(10))));
        assert_eq!(parse("5m"), Ok(Some(Duration::from_secs(300))));
        assert_eq!(parse("2h"), Ok(Some(Duration::from_secs(7200))));
        assert_eq!(parse("1d"), Ok(Some(Duration::from_secs(86400))));
        assert_eq!(parse("off"), Ok(None));
        assert!(parse("ten").is_err());
        assert!(parse("5y").is_err());
        assert!(parse_required("off").is_err());
    }
}
