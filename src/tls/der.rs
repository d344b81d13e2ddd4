//! Just enough DER to read the facts we check on a CA certificate (subject,
//! public key, basic constraints, key usage, key identifier, validity).
//!
//! rcgen can parse certificates only through x509-parser (a large tree of
//! crates); the handful of fields needed here take a few dozen lines.

use std::fmt;

/// A certificate that is not the DER we can read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DerError(pub(crate) &'static str);

impl fmt::Display for DerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

const BOOLEAN: u8 = 0x01;
const INTEGER: u8 = 0x02;
const BIT_STRING: u8 = 0x03;
const OCTET_STRING: u8 = 0x04;
const OID: u8 = 0x06;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;
const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const CTX0: u8 = 0xa0;
const CTX3: u8 = 0xa3;

/// One tag-length-value: `value` is the contents, `raw` the whole encoding.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tlv<'a> {
    pub(crate) tag: u8,
    pub(crate) value: &'a [u8],
    pub(crate) raw: &'a [u8],
}

/// Reads consecutive TLVs from a slice.
pub(crate) struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Reader { rest: bytes }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    pub(crate) fn next(&mut self) -> Result<Tlv<'a>, DerError> {
        let b = self.rest;
        let short = DerError("truncated DER");
        let (&tag, after_tag) = b.split_first().ok_or(short.clone())?;
        if tag & 0x1f == 0x1f {
            return Err(DerError("multi-byte DER tags are not supported"));
        }
        let (&first, mut p) = after_tag.split_first().ok_or(short.clone())?;
        let len = if first < 0x80 {
            usize::from(first)
        } else {
            let n = usize::from(first & 0x7f);
            if n == 0 || n > 4 || p.len() < n {
                return Err(DerError("bad DER length"));
            }
            let len = p[..n]
                .iter()
                .fold(0usize, |a, &d| (a << 8) | usize::from(d));
            p = &p[n..];
            len
        };
        if p.len() < len {
            return Err(short);
        }
        let header = b.len() - p.len();
        let raw = &b[..header + len];
        self.rest = &b[header + len..];
        Ok(Tlv {
            tag,
            value: &p[..len],
            raw,
        })
    }

    pub(crate) fn expect(&mut self, tag: u8, what: &'static str) -> Result<Tlv<'a>, DerError> {
        let t = self.next()?;
        if t.tag != tag {
            return Err(DerError(what));
        }
        Ok(t)
    }

    /// The next TLV if it has `tag`, else nothing consumed.
    pub(crate) fn optional(&mut self, tag: u8) -> Result<Option<Tlv<'a>>, DerError> {
        if self.rest.first() == Some(&tag) {
            self.next().map(Some)
        } else {
            Ok(None)
        }
    }
}

/// One attribute of a distinguished name, as encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NameAttr<'a> {
    pub(crate) oid: Vec<u64>,
    /// The string type's tag (UTF8String, PrintableString, ...).
    pub(crate) tag: u8,
    pub(crate) value: &'a [u8],
}

/// The facts read from one certificate.
#[derive(Debug, Clone)]
pub(crate) struct CertFacts<'a> {
    pub(crate) issuer_raw: &'a [u8],
    pub(crate) subject_raw: &'a [u8],
    /// Each relative distinguished name, in order (usually one attribute each).
    pub(crate) subject: Vec<Vec<NameAttr<'a>>>,
    /// The subjectPublicKey bits (an EC point, or an RSAPublicKey).
    pub(crate) public_key: &'a [u8],
    /// basicConstraints cA (false when the extension is absent).
    pub(crate) is_ca: bool,
    /// keyUsage keyCertSign, when a keyUsage extension is present.
    pub(crate) key_cert_sign: Option<bool>,
    pub(crate) subject_key_id: Option<&'a [u8]>,
    /// Seconds since the Unix epoch.
    pub(crate) not_before: i64,
    pub(crate) not_after: i64,
}

/// Decodes an OID's arcs.
pub(crate) fn oid_arcs(v: &[u8]) -> Result<Vec<u64>, DerError> {
    let mut arcs = Vec::new();
    let mut n: u64 = 0;
    for (i, &b) in v.iter().enumerate() {
        if n > (u64::MAX >> 7) {
            return Err(DerError("OID arc too large"));
        }
        n = (n << 7) | u64::from(b & 0x7f);
        if b & 0x80 == 0 {
            if arcs.is_empty() {
                let first = (n / 40).min(2);
                arcs.push(first);
                arcs.push(n - first * 40);
            } else {
                arcs.push(n);
            }
            n = 0;
        } else if i + 1 == v.len() {
            return Err(DerError("truncated OID"));
        }
    }
    if arcs.is_empty() {
        return Err(DerError("empty OID"));
    }
    Ok(arcs)
}

const OID_BASIC_CONSTRAINTS: &[u64] = &[2, 5, 29, 19];
const OID_KEY_USAGE: &[u64] = &[2, 5, 29, 15];
const OID_SUBJECT_KEY_ID: &[u64] = &[2, 5, 29, 14];

/// Reads the facts of an X.509 certificate.
pub(crate) fn parse_cert(der: &[u8]) -> Result<CertFacts<'_>, DerError> {
    let mut top = Reader::new(der);
    let cert = top.expect(SEQUENCE, "not a certificate (no outer SEQUENCE)")?;
    let mut cert = Reader::new(cert.value);
    let tbs = cert.expect(SEQUENCE, "not a certificate (no tbsCertificate)")?;
    let mut tbs = Reader::new(tbs.value);
    tbs.optional(CTX0)?; // version
    tbs.expect(INTEGER, "bad serial number")?;
    tbs.expect(SEQUENCE, "bad signature algorithm")?;
    let issuer = tbs.expect(SEQUENCE, "bad issuer")?;
    let validity = tbs.expect(SEQUENCE, "bad validity")?;
    let subject = tbs.expect(SEQUENCE, "bad subject")?;
    let spki = tbs.expect(SEQUENCE, "bad subjectPublicKeyInfo")?;

    let mut v = Reader::new(validity.value);
    let not_before = parse_time(v.next()?)?;
    let not_after = parse_time(v.next()?)?;

    let mut s = Reader::new(spki.value);
    s.expect(SEQUENCE, "bad public key algorithm")?;
    let bits = s.expect(BIT_STRING, "bad public key")?;
    let public_key = match bits.value.split_first() {
        Some((0, key)) => key,
        _ => return Err(DerError("bad public key bit string")),
    };

    let mut facts = CertFacts {
        issuer_raw: issuer.raw,
        subject_raw: subject.raw,
        subject: parse_name(subject.value)?,
        public_key,
        is_ca: false,
        key_cert_sign: None,
        subject_key_id: None,
        not_before,
        not_after,
    };

    // Skip issuerUniqueID [1] and subjectUniqueID [2], then extensions [3].
    while !tbs.is_empty() {
        let t = tbs.next()?;
        if t.tag != CTX3 {
            continue;
        }
        let mut exts = Reader::new(
            Reader::new(t.value)
                .expect(SEQUENCE, "bad extensions")?
                .value,
        );
        while !exts.is_empty() {
            let ext = exts.expect(SEQUENCE, "bad extension")?;
            let mut e = Reader::new(ext.value);
            let oid = oid_arcs(e.expect(OID, "bad extension id")?.value)?;
            e.optional(BOOLEAN)?; // critical
            let value = e.expect(OCTET_STRING, "bad extension value")?.value;
            if oid == OID_BASIC_CONSTRAINTS {
                let bc = Reader::new(value).expect(SEQUENCE, "bad basicConstraints")?;
                if let Some(ca) = Reader::new(bc.value).optional(BOOLEAN)? {
                    facts.is_ca = ca.value.first().is_some_and(|&b| b != 0);
                }
            } else if oid == OID_KEY_USAGE {
                let ku = Reader::new(value).expect(BIT_STRING, "bad keyUsage")?;
                // keyCertSign is bit 5: the first content byte after the
                // unused-bits count, mask 0x04.
                facts.key_cert_sign = Some(ku.value.get(1).is_some_and(|&b| b & 0x04 != 0));
            } else if oid == OID_SUBJECT_KEY_ID {
                let id = Reader::new(value).expect(OCTET_STRING, "bad subjectKeyIdentifier")?;
                facts.subject_key_id = Some(id.value);
            }
        }
    }
    Ok(facts)
}

fn parse_name(v: &[u8]) -> Result<Vec<Vec<NameAttr<'_>>>, DerError> {
    let mut rdns = Vec::new();
    let mut r = Reader::new(v);
    while !r.is_empty() {
        let set = r.expect(SET, "bad name (RDN is not a SET)")?;
        let mut attrs = Vec::new();
        let mut s = Reader::new(set.value);
        while !s.is_empty() {
            let atv = s.expect(SEQUENCE, "bad name attribute")?;
            let mut a = Reader::new(atv.value);
            let oid = oid_arcs(a.expect(OID, "bad name attribute type")?.value)?;
            let val = a.next()?;
            attrs.push(NameAttr {
                oid,
                tag: val.tag,
                value: val.value,
            });
        }
        rdns.push(attrs);
    }
    Ok(rdns)
}

/// A distinguished name (`raw`: its whole SEQUENCE) as RFC 4514-style text,
/// most specific first: `CN=Corp Root CA, O=Example, C=NL`. It comes from a
/// peer and goes into a header: `,+"\<>;` are backslash-escaped, any byte
/// outside printable ASCII becomes `\XX`, and the text is at most 256 bytes.
pub(crate) fn parse_name_text(raw: &[u8]) -> Option<String> {
    let seq = Reader::new(raw).expect(SEQUENCE, "bad name").ok()?;
    let rdns = parse_name(seq.value).ok()?;
    let mut out = String::new();
    for (i, rdn) in rdns.iter().rev().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        for (j, attr) in rdn.iter().enumerate() {
            if j > 0 {
                out.push('+');
            }
            out.push_str(&attr_label(&attr.oid));
            out.push('=');
            escape_value(&attr_bytes(attr), &mut out);
        }
        if out.len() > 256 {
            let mut end = 253;
            while !out.is_char_boundary(end) {
                end -= 1;
            }
            out.truncate(end);
            out.push_str("...");
            break;
        }
    }
    Some(out)
}

/// The short name of a name attribute (`CN`), else its dotted OID.
fn attr_label(oid: &[u64]) -> String {
    let short = match oid {
        [2, 5, 4, 3] => "CN",
        [2, 5, 4, 6] => "C",
        [2, 5, 4, 7] => "L",
        [2, 5, 4, 8] => "ST",
        [2, 5, 4, 10] => "O",
        [2, 5, 4, 11] => "OU",
        [0, 9, 2342, 19200300, 100, 1, 25] => "DC",
        [1, 2, 840, 113549, 1, 9, 1] => "emailAddress",
        _ => {
            let arcs: Vec<String> = oid.iter().map(u64::to_string).collect();
            return arcs.join(".");
        }
    };
    short.to_owned()
}

/// An attribute's value as UTF-8 bytes (BMPString is UTF-16BE; the other
/// string types are taken as they are).
fn attr_bytes(attr: &NameAttr<'_>) -> Vec<u8> {
    const BMP_STRING: u8 = 0x1e;
    if attr.tag == BMP_STRING {
        let units = attr
            .value
            .chunks(2)
            .map(|c| u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
        return char::decode_utf16(units)
            .map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER))
            .collect::<String>()
            .into_bytes();
    }
    attr.value.to_vec()
}

fn escape_value(v: &[u8], out: &mut String) {
    use std::fmt::Write;
    for &b in v {
        match b {
            b',' | b'+' | b'"' | b'\\' | b'<' | b'>' | b';' => {
                out.push('\\');
                out.push(b as char);
            }
            0x20..=0x7e => out.push(b as char),
            _ => {
                let _ = write!(out, "\\{b:02X}");
            }
        }
    }
}

/// UTCTime (`YYMMDDHHMMSSZ`) or GeneralizedTime (`YYYYMMDDHHMMSSZ`) to Unix seconds.
fn parse_time(t: Tlv<'_>) -> Result<i64, DerError> {
    let bad = DerError("bad certificate time");
    let s = std::str::from_utf8(t.value).map_err(|_| bad.clone())?;
    let s = s.strip_suffix('Z').ok_or(bad.clone())?;
    if !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad);
    }
    let num = |r: std::ops::Range<usize>| s[r].parse::<i64>().map_err(|_| bad.clone());
    let (year, rest) = match (t.tag, s.len()) {
        (UTC_TIME, 12) => {
            let yy = num(0..2)?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, 2)
        }
        (GENERALIZED_TIME, 14) => (num(0..4)?, 4),
        _ => return Err(bad),
    };
    let month = num(rest..rest + 2)?;
    let day = num(rest + 2..rest + 4)?;
    let hour = num(rest + 4..rest + 6)?;
    let min = num(rest + 6..rest + 8)?;
    let sec = num(rest + 8..rest + 10)?;
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || min > 59 || sec > 60 {
        return Err(bad);
    }
    Ok(days_from_civil(year, month, day) * 86_400 + hour * 3600 + min * 60 + sec)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_days() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(2038, 1, 19), 24_855);
    }

    #[test]
    fn oids() {
        assert_eq!(oid_arcs(&[0x55, 0x1d, 0x13]).unwrap(), vec![2, 5, 29, 19]);
        assert_eq!(
            oid_arcs(&[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01]).unwrap(),
            vec![1, 2, 840, 10045, 2, 1]
        );
        assert!(oid_arcs(&[0x2a, 0x86]).is_err());
    }

    #[test]
    fn truncated_input_is_an_error_not_a_panic() {
        let ca = rcgen::generate_simple_self_signed(vec!["a.test".into()]).unwrap();
        let der = ca.cert.der().to_vec();
        assert!(parse_cert(&der).is_ok());
        for cut in 0..der.len() {
            assert!(parse_cert(&der[..cut]).is_err(), "cut at {cut}");
        }
    }
}
