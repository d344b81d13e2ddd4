//! Request paths as request rules see them: every percent-escape decoded, so a
//! path an origin would read as matching a rule is judged as matching it,
//! whatever the spelling; and refused where no single reading is safe.
//!
//! What the rule matcher sees, byte by byte (after dropping the query):
//!
//! | In the request | The matcher sees |
//! |---|---|
//! | `/` | a segment boundary; runs of `/` count as one (`/a//b` is `/a/b`) |
//! | a leading `//` (`//x/admin`) | both `/x/admin` and, as URL parsers read a network-path reference (`new URL(path, base)`, `urljoin`), `/admin`: the authority `x` dropped |
//! | `%XX` for any byte but those below (`%40`, `%3A`, `%3a`, `%2E`, `%7E`, `%C3%A9`) | the byte it encodes (`@`, `:`, `:`, `.`, `~`, `é`): hex digits in either case |
//! | any other byte allowed in a path (`A-Z a-z 0-9 - . _ ~ ! $ & ' ( ) * + , ; = : @`) | itself |
//! | `.` / `..` segments, raw or encoded (`%2e%2E`) | removed per RFC 3986 5.2.4, never above the root |
//! | `;` (raw or `%3B`) | itself; and the path is judged a second time with every segment cut at its first `;`, as Tomcat and Spring read path parameters |
//! | `%25` | `%`, unless two hex digits follow (see below) |
//!
//! Refused (the session answers 400), because origins disagree on them and
//! no single reading is safe:
//!
//! - `%2F` (an encoded `/`): one origin splits the segment there, another does not;
//! - `\` and `%5C`: some origins treat them as `/`;
//! - NUL and other control characters (`%00`-`%1F`, `%7F`), raw or encoded: C
//!   origins cut the path at NUL; raw space and `#`;
//! - `%25` followed by two hex digits (`%252F`, `%25%34%31`): double encoding,
//!   which an origin that decodes twice reads as another character;
//! - bytes that do not decode to UTF-8 (`%FF`, overlong forms such as `%C0%AF`);
//! - a segment that becomes `.` or `..` only once its `;` parameters are cut
//!   (`/public/..;/admin`, the Tomcat traversal);
//! - a malformed escape (`%`, `%4`, `%G1`), or a target not starting with `/`.
//!
//! The canonical spelling ([`Path::canonical`]) re-encodes only what a path
//! cannot carry raw (upper-case hex), so it reads the same to every origin and
//! normalising it again changes nothing.
//!
//! Deny rules also judge each reading folded ([`folded`]) as some origins
//! fold it before routing (IIS and Windows file names, .NET
//! `OrdinalIgnoreCase`, best-fit code pages), where that changes anything:
//!
//! | In the decoded path | The folded reading has |
//! |---|---|
//! | `ı` (U+0131), `İ` (U+0130) | `i` |
//! | `ſ` (U+017F) | `s` |
//! | `K` (Kelvin sign, U+212A) | `k` |
//! | fullwidth ASCII `！`-`～` (U+FF01-U+FF5E) | the ASCII character (`／` is `/`, a segment boundary; `＼` too) |
//! | trailing `.` and spaces on a segment (`admin.`, `admin%20`, `admin%2E%2E`) | the segment without them (one of only dots and spaces drops out) |
//!
//! and `.` / `..` segments the folding makes are removed again. Never for
//! allow rules: folding only ever makes a deny match more.

use std::fmt::Write;

/// A request path decoded and normalised: segments of decoded bytes (valid
/// UTF-8), dot segments removed. The root `/` is one empty segment; a
/// trailing `/` is a trailing empty segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Path {
    segs: Vec<Vec<u8>>,
    /// Some segment holds a `;` (path parameters): judge a second reading.
    params: bool,
    /// The target starts with `//`, which URL parsers read as a host
    /// (`new URL("//x/admin", base)` has the path `/admin`): that reading,
    /// the authority dropped, is judged too.
    network: Option<Box<Path>>,
}

/// Parses a request target (origin form, query allowed) or a rule's path
/// pattern. Refuses what cannot be judged safely (see the module docs).
pub(crate) fn parse(raw: &str) -> Result<Path, String> {
    let path = raw.split_once('?').map_or(raw, |(p, _)| p);
    let mut parsed = parse_path(path)?;
    if path.starts_with("//") {
        // A network-path reference: the authority runs to the next `/`
        // (WHATWG skips every leading `/` first), the rest is the path.
        let after = path.trim_start_matches('/');
        let tail = after.find('/').map_or("/", |i| &after[i..]);
        parsed.network = Some(Box::new(parse_path(tail)?));
    }
    Ok(parsed)
}

/// Parses a path without its query, collapsing runs of `/`.
fn parse_path(path: &str) -> Result<Path, String> {
    let Some(rest) = path.strip_prefix('/') else {
        return Err("the path does not start with '/'".into());
    };
    let pieces: Vec<&str> = rest.split('/').collect();
    let last = pieces.len() - 1;
    let mut segs: Vec<Vec<u8>> = Vec::with_capacity(pieces.len());
    let mut trailing = false;
    let mut params = false;
    for (i, piece) in pieces.iter().enumerate() {
        // `//` collapses; only the final empty piece (a trailing `/`) counts.
        if piece.is_empty() && i != last {
            continue;
        }
        let seg = decode_segment(piece)?;
        let param_cut = seg.iter().position(|&b| b == b';');
        if let Some(cut) = param_cut {
            params = true;
            if is_dot(&seg[..cut]) {
                return Err("a '.' or '..' segment with ';' parameters (e.g. '..;')".into());
            }
        }
        trailing = false;
        match seg.as_slice() {
            b"." => trailing = true,
            b".." => {
                segs.pop();
                trailing = true;
            }
            _ => segs.push(seg),
        }
    }
    if trailing || segs.is_empty() {
        segs.push(Vec::new());
    }
    Ok(Path {
        segs,
        params,
        network: None,
    })
}

fn is_dot(seg: &[u8]) -> bool {
    seg == b"." || seg == b".."
}

/// Decodes one segment, refusing what cannot be judged (module docs).
fn decode_segment(piece: &str) -> Result<Vec<u8>, String> {
    let b = piece.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'%' {
            let hex = |j: usize| b.get(j).and_then(|&h| (h as char).to_digit(16));
            let (Some(hi), Some(lo)) = (hex(i + 1), hex(i + 2)) else {
                return Err(format!("invalid percent-escape {:?}", escape_at(piece, i)));
            };
            let v = (hi * 16 + lo) as u8;
            match v {
                b'/' => return Err("encoded '/' (%2F) in the path".into()),
                b'\\' => return Err("encoded '\\' (%5C) in the path".into()),
                0..=0x1f | 0x7f => {
                    return Err(format!("encoded control character (%{v:02X}) in the path"))
                }
                _ => out.push(v),
            }
            i += 3;
            continue;
        }
        match c {
            b'\\' => return Err("'\\' in the path".into()),
            0..=0x1f | 0x7f => return Err("control character in the path".into()),
            b' ' => return Err("space in the path".into()),
            b'#' => return Err("'#' in the path".into()),
            _ => out.push(c),
        }
        i += 1;
    }
    if let Some(w) = out
        .windows(3)
        .find(|w| w[0] == b'%' && is_hex(w[1]) && is_hex(w[2]))
    {
        return Err(format!(
            "double-encoded escape (%25{}{}) in the path",
            w[1] as char, w[2] as char
        ));
    }
    if std::str::from_utf8(&out).is_err() {
        return Err("the path does not decode to UTF-8".into());
    }
    Ok(out)
}

fn is_hex(b: u8) -> bool {
    b.is_ascii_hexdigit()
}

/// The escape starting at byte `i`, for messages (at most 3 bytes).
fn escape_at(s: &str, i: usize) -> &str {
    let end = (i + 3).min(s.len());
    s.get(i..end).unwrap_or("%")
}

impl Path {
    /// The segments as the rules read them, decoded.
    pub(crate) fn segments(&self) -> impl Iterator<Item = &[u8]> {
        self.segs.iter().map(Vec::as_slice)
    }

    /// Every reading the rules must judge: the path as decoded, then, when a
    /// segment has `;` parameters, the same with each segment cut at its
    /// first `;`; and for a target starting with `//`, the same again for
    /// the path after its authority.
    pub(crate) fn readings(&self) -> Vec<Vec<&[u8]>> {
        let literal: Vec<&[u8]> = self.segments().collect();
        let mut all = Vec::with_capacity(4);
        if self.params {
            let cut = literal
                .iter()
                .map(|s| match s.iter().position(|&b| b == b';') {
                    Some(i) => &s[..i],
                    None => s,
                })
                .collect();
            all.push(literal);
            all.push(cut);
        } else {
            all.push(literal);
        }
        if let Some(net) = &self.network {
            all.extend(net.readings());
        }
        all
    }

    /// The canonical spelling: `/`-joined segments, each byte raw if a path
    /// may carry it raw, else `%XX` (upper-case).
    pub(crate) fn canonical(&self) -> String {
        // A leading `//` stays, so the canonical spelling is judged with the
        // network-path reading too (it covers the original's: see the tests).
        let mut s = String::from(if self.network.is_some() { "/" } else { "" });
        for seg in &self.segs {
            s.push('/');
            for &b in seg {
                if is_raw_path_byte(b) {
                    s.push(b as char);
                } else {
                    let _ = write!(s, "%{b:02X}");
                }
            }
        }
        s
    }
}

/// The readings folded as some origins fold paths (module docs), for deny
/// rules: one per reading the folding changes.
pub(crate) fn folded(readings: &[Vec<&[u8]>]) -> Vec<Vec<Vec<u8>>> {
    readings.iter().filter_map(|r| fold_reading(r)).collect()
}

/// One reading folded, or `None` when folding changes nothing.
fn fold_reading(segs: &[&[u8]]) -> Option<Vec<Vec<u8>>> {
    /// Ends the segment in `cur`: dot segments resolved, trailing dots and
    /// spaces dropped.
    fn end_segment(cur: &mut String, out: &mut Vec<Vec<u8>>, changed: &mut bool) {
        match cur.as_str() {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            seg => {
                let kept = seg.trim_end_matches(['.', ' ']);
                *changed |= kept.len() != seg.len();
                if !kept.is_empty() {
                    out.push(kept.as_bytes().to_vec());
                }
            }
        }
        cur.clear();
    }
    let mut changed = false;
    let mut out: Vec<Vec<u8>> = Vec::with_capacity(segs.len());
    let mut cur = String::new();
    for seg in segs {
        // Segments are valid UTF-8 (`decode_segment` checks), and cut at
        // ASCII `;` only.
        let text = std::str::from_utf8(seg).ok()?;
        for c in text.chars() {
            let f = fold_char(c);
            changed |= f != c;
            if f == '/' || f == '\\' {
                end_segment(&mut cur, &mut out, &mut changed);
            } else {
                cur.push(f);
            }
        }
        end_segment(&mut cur, &mut out, &mut changed);
    }
    if !changed {
        return None;
    }
    if out.is_empty() {
        out.push(Vec::new());
    }
    Some(out)
}

/// A character as a folding origin may read it (module docs).
fn fold_char(c: char) -> char {
    match c {
        '\u{0130}' | '\u{0131}' => 'i',
        '\u{017F}' => 's',
        '\u{212A}' => 'k',
        '\u{FF01}'..='\u{FF5E}' => char::from_u32(c as u32 - 0xFEE0).unwrap_or(c),
        _ => c,
    }
}

/// RFC 3986 `pchar` minus `%`: unreserved, sub-delims, `:` and `@`.
fn is_raw_path_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'-' | b'.'
                | b'_'
                | b'~'
                | b'!'
                | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
                | b':'
                | b'@'
        )
}

/// Normalises an origin-form request target (`/a/b?x=1`) to the canonical
/// path request rules judge (see the module docs for each character), or
/// says why it cannot be judged safely (answer 400).
pub fn normalize_path(raw: &str) -> Result<String, String> {
    parse(raw).map(|p| p.canonical())
}
