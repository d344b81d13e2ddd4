//! HTTP Basic credentials (`Proxy-Authorization: Basic ...`): checking a
//! value against a user and password, splitting it into both, and the
//! [`SameLogin`] check an HTTP exchange asks of a connection's later
//! requests. Bytes in, answers out.

use std::sync::Arc;

/// Checks a `Proxy-Authorization` value (`Basic base64(user:pass)`).
///
/// The scheme is case-insensitive and followed by one or more spaces; the
/// base64 (standard alphabet) may be padded or not. Trailing spaces and tabs
/// are ignored. Anything malformed is `false`. The decoded credentials are
/// compared in time independent of where they differ.
pub fn basic_auth_matches(value: &[u8], username: &str, password: &str) -> bool {
    let Some(decoded) = basic_auth_decoded(value) else {
        return false;
    };
    let mut expected = Vec::with_capacity(username.len() + 1 + password.len());
    expected.extend_from_slice(username.as_bytes());
    expected.push(b':');
    expected.extend_from_slice(password.as_bytes());
    constant_time_eq(&decoded, &expected)
}

/// The user and password of a `Proxy-Authorization: Basic` value, split
/// at the first `:` (a user name cannot hold one; a password can). `None`
/// when it is not Basic or not well-formed base64.
pub fn basic_auth_credentials(value: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut decoded = basic_auth_decoded(value)?;
    let colon = decoded.iter().position(|&b| b == b':')?;
    let password = decoded.split_off(colon + 1);
    decoded.truncate(colon);
    Some((decoded, password))
}

/// The decoded `USER:PASS` of a Basic credential.
fn basic_auth_decoded(value: &[u8]) -> Option<Vec<u8>> {
    let value = trim_end_ows(value);
    let (scheme, rest) = value.split_at_checked(5)?;
    if !scheme.eq_ignore_ascii_case(b"Basic") || rest.first() != Some(&b' ') {
        return None;
    }
    let start = rest.iter().position(|&b| b != b' ').unwrap_or(rest.len());
    base64_decode(&rest[start..])
}

/// `value` without trailing spaces and tabs.
fn trim_end_ows(value: &[u8]) -> &[u8] {
    let end = value
        .iter()
        .rposition(|&b| b != b' ' && b != b'\t')
        .map_or(0, |i| i + 1);
    &value[..end]
}

/// Equality whose running time depends on the lengths only.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Decodes standard base64, padded or not. `None` if malformed (bad
/// character, misplaced or wrong padding, impossible length, or non-zero
/// unused bits, so each credential has exactly one encoding per padding style).
fn base64_decode(text: &[u8]) -> Option<Vec<u8>> {
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
    use base64::Engine;
    // A length that is a multiple of four is the padded form (or needs no
    // padding); anything else is the unpadded form.
    let engine = if text.len() % 4 == 0 {
        &STANDARD
    } else {
        &STANDARD_NO_PAD
    };
    engine.decode(text).ok()
}

/// The forward proxy's login: whether a later request's
/// `Proxy-Authorization` value names the credentials the connection logged
/// in with. The caller supplies the check (a keyed digest), so the HTTP
/// exchange that asks it never holds a password.
#[derive(Clone)]
pub struct SameLogin(Arc<Box<LoginCheck>>);

/// The check behind a [`SameLogin`].
type LoginCheck = dyn Fn(&[u8]) -> bool + Send + Sync;

impl SameLogin {
    /// A login checked by `same`.
    pub fn new(same: impl Fn(&[u8]) -> bool + Send + Sync + 'static) -> SameLogin {
        // A thin pointer (the box holds the closure's vtable): a pending
        // handshake holds an `Option<SameLogin>`, and the handshake's state
        // sizes every session's slab slot.
        SameLogin(Arc::new(Box::new(same)))
    }

    /// Whether `value` (a `Proxy-Authorization` value) is the same login.
    pub fn matches(&self, value: &[u8]) -> bool {
        (self.0)(value)
    }
}

impl std::fmt::Debug for SameLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SameLogin")
    }
}
