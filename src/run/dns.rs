//! Sans-IO DNS: just enough of RFC 1035 to answer a query `REFUSED`.
//!
//! Under `run` CMD's only network is the proxy; a program that ignores the
//! proxy variables still asks the resolvers in `/etc/resolv.conf`. Those
//! queries reach a socket `run` binds at the resolver's address inside the
//! namespace, and [`answer`] turns each into a `REFUSED` answer (same id,
//! same question), so the program fails at once instead of timing out, and
//! the name it wanted can be logged. Everything here works on bytes: no
//! sockets, no clock.

use std::fmt;

/// Response codes used here (RFC 1035 4.1.1).
const FORMERR: u8 = 1;
const NOTIMP: u8 = 4;
const REFUSED: u8 = 5;

/// The longest name on the wire, length octets included (RFC 1035 3.1).
const MAX_NAME: usize = 255;
/// Compression pointers followed before a name is called a loop.
const MAX_POINTERS: usize = 16;
/// Header length.
const HEADER: usize = 12;

/// A query's question, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Question {
    /// The labels, as sent (any bytes but none empty).
    pub labels: Vec<Vec<u8>>,
    /// QTYPE (1 = A, 28 = AAAA, ...).
    pub qtype: u16,
    /// QCLASS (1 = IN).
    pub qclass: u16,
}

impl Question {
    /// The name in presentation form (`example.com`; `.` for the root):
    /// bytes outside printable ASCII, and `.` `\` `"` inside a label, are
    /// escaped as `\DDD`, so a hostile name cannot forge log text.
    pub fn name(&self) -> String {
        if self.labels.is_empty() {
            return ".".into();
        }
        let mut s = String::new();
        for (i, label) in self.labels.iter().enumerate() {
            if i > 0 {
                s.push('.');
            }
            for &b in label {
                if b.is_ascii_graphic() && !matches!(b, b'.' | b'\\' | b'"') {
                    s.push(b as char);
                } else {
                    s.push_str(&format!("\\{b:03}"));
                }
            }
        }
        s
    }

    /// QTYPE by its usual name where it has one.
    pub fn type_name(&self) -> String {
        match self.qtype {
            1 => "A".into(),
            2 => "NS".into(),
            5 => "CNAME".into(),
            6 => "SOA".into(),
            12 => "PTR".into(),
            15 => "MX".into(),
            16 => "TXT".into(),
            28 => "AAAA".into(),
            33 => "SRV".into(),
            64 => "SVCB".into(),
            65 => "HTTPS".into(),
            255 => "ANY".into(),
            n => format!("TYPE{n}"),
        }
    }
}

/// What came in, and what to send back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A well-formed query: `reply` is its `REFUSED` answer.
    Refused { question: Question, reply: Vec<u8> },
    /// A malformed query or one this does not answer (not QUERY, not one
    /// question): `reply` says so (`FORMERR`/`NOTIMP`, no question).
    Rejected { why: Malformed, reply: Vec<u8> },
    /// Not worth an answer: shorter than a header (no id to echo), or a
    /// response (answering those could make two answerers loop).
    Dropped(Malformed),
}

/// Why a message got no `REFUSED` answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    /// Shorter than the 12-byte header.
    Short,
    /// QR is set: a response, not a query.
    Response,
    /// OPCODE is not QUERY.
    Opcode(u8),
    /// QDCOUNT is not 1.
    QuestionCount(u16),
    /// The question runs past the message.
    Truncated,
    /// A label length with the reserved bits `01`/`10`.
    BadLabel,
    /// The name exceeds 255 octets.
    NameTooLong,
    /// A compression pointer that points forward, at itself, or loops.
    BadPointer,
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Malformed::Short => f.write_str("shorter than a DNS header"),
            Malformed::Response => f.write_str("a response, not a query"),
            Malformed::Opcode(o) => write!(f, "opcode {o}, not QUERY"),
            Malformed::QuestionCount(n) => write!(f, "{n} questions, not 1"),
            Malformed::Truncated => f.write_str("the question is truncated"),
            Malformed::BadLabel => f.write_str("a reserved label type"),
            Malformed::NameTooLong => f.write_str("a name longer than 255 octets"),
            Malformed::BadPointer => {
                f.write_str("a compression pointer that loops or points ahead")
            }
        }
    }
}

/// Answers one datagram (`msg`, a DNS message over UDP).
pub fn answer(msg: &[u8]) -> Outcome {
    if msg.len() < HEADER {
        return Outcome::Dropped(Malformed::Short);
    }
    let flags = u16::from_be_bytes([msg[2], msg[3]]);
    if flags & 0x8000 != 0 {
        return Outcome::Dropped(Malformed::Response);
    }
    let opcode = ((flags >> 11) & 0xf) as u8;
    if opcode != 0 {
        return reject(msg, Malformed::Opcode(opcode), NOTIMP);
    }
    let qdcount = u16::from_be_bytes([msg[4], msg[5]]);
    if qdcount != 1 {
        return reject(msg, Malformed::QuestionCount(qdcount), FORMERR);
    }
    match question(msg) {
        Ok(question) => {
            let mut reply = header(msg, REFUSED, 1);
            for label in &question.labels {
                reply.push(label.len() as u8);
                reply.extend_from_slice(label);
            }
            reply.push(0);
            reply.extend_from_slice(&question.qtype.to_be_bytes());
            reply.extend_from_slice(&question.qclass.to_be_bytes());
            Outcome::Refused { question, reply }
        }
        Err(why) => reject(msg, why, FORMERR),
    }
}

fn reject(msg: &[u8], why: Malformed, rcode: u8) -> Outcome {
    Outcome::Rejected {
        why,
        reply: header(msg, rcode, 0),
    }
}

/// A response header for query `msg`: its id, QR set, its opcode and RD,
/// RA clear, `rcode`, `qdcount` questions and no records.
fn header(msg: &[u8], rcode: u8, qdcount: u16) -> Vec<u8> {
    let mut h = Vec::with_capacity(HEADER + 64);
    h.extend_from_slice(&msg[..2]);
    // QR=1, opcode and RD kept (byte 2: QR opcode(4) AA TC RD).
    h.push(0x80 | (msg[2] & 0x79));
    h.push(rcode & 0x0f);
    h.extend_from_slice(&qdcount.to_be_bytes());
    h.extend_from_slice(&[0; 6]);
    h
}

/// The one question, starting after the header. Pointers are followed
/// (only backwards, a bounded number of times) and the name is returned
/// uncompressed.
fn question(msg: &[u8]) -> Result<Question, Malformed> {
    let mut labels = Vec::new();
    let mut wire_len = 1; // the root's zero octet
    let mut pos = HEADER;
    let mut end = None; // where the question continues after the name
    let mut pointers = 0;
    loop {
        let &len = msg.get(pos).ok_or(Malformed::Truncated)?;
        match len & 0xc0 {
            0x00 if len == 0 => {
                let after = end.unwrap_or(pos + 1);
                let fixed = msg.get(after..after + 4).ok_or(Malformed::Truncated)?;
                return Ok(Question {
                    labels,
                    qtype: u16::from_be_bytes([fixed[0], fixed[1]]),
                    qclass: u16::from_be_bytes([fixed[2], fixed[3]]),
                });
            }
            0x00 => {
                let len = usize::from(len);
                let label = msg
                    .get(pos + 1..pos + 1 + len)
                    .ok_or(Malformed::Truncated)?;
                wire_len += 1 + len;
                if wire_len > MAX_NAME {
                    return Err(Malformed::NameTooLong);
                }
                labels.push(label.to_vec());
                pos += 1 + len;
            }
            0xc0 => {
                let &low = msg.get(pos + 1).ok_or(Malformed::Truncated)?;
                let target = usize::from(u16::from_be_bytes([len & 0x3f, low]));
                pointers += 1;
                // Backwards only (so it ends), never into the header.
                if target >= pos || target < HEADER || pointers > MAX_POINTERS {
                    return Err(Malformed::BadPointer);
                }
                end.get_or_insert(pos + 2);
                pos = target;
            }
            _ => return Err(Malformed::BadLabel),
        }
    }
}

/// The `nameserver` addresses of a resolv.conf text, in order, at most
/// three (as glibc reads them); unparsable entries are skipped. A scope
/// suffix (`fe80::1%eth0`) is dropped with its address: it names an
/// interface the namespace does not have.
pub fn nameservers(resolv_conf: &str) -> Vec<std::net::IpAddr> {
    let mut out = Vec::new();
    for line in resolv_conf.lines() {
        let mut words = line.split_whitespace();
        if words.next() != Some("nameserver") {
            continue;
        }
        if let Some(ip) = words.next().and_then(|w| w.parse().ok()) {
            if !out.contains(&ip) {
                out.push(ip);
            }
        }
        if out.len() == 3 {
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A query for `name` (dotted, plain labels) of `qtype`, id 0xbeef, RD set.
    fn query(name: &str, qtype: u16) -> Vec<u8> {
        let mut m = vec![0xbe, 0xef, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        for label in name.split('.').filter(|l| !l.is_empty()) {
            m.push(label.len() as u8);
            m.extend_from_slice(label.as_bytes());
        }
        m.push(0);
        m.extend_from_slice(&qtype.to_be_bytes());
        m.extend_from_slice(&1u16.to_be_bytes());
        m
    }

    #[test]
    fn a_query_is_refused_with_its_id_and_question() {
        let q = query("pypi.org", 28);
        let Outcome::Refused { question, reply } = answer(&q) else {
            panic!("{:?}", answer(&q));
        };
        assert_eq!(question.name(), "pypi.org");
        assert_eq!(question.type_name(), "AAAA");
        assert_eq!(&reply[..2], &[0xbe, 0xef], "same id");
        assert_eq!(reply[2], 0x81, "QR, opcode QUERY, RD kept");
        assert_eq!(reply[3] & 0x0f, 5, "REFUSED");
        assert_eq!(&reply[4..12], &[0, 1, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&reply[12..], &q[12..], "the question, as asked");
    }

    #[test]
    fn compression_pointers_that_loop_or_point_ahead_are_formerr() {
        // A question can only point back into itself: `test` then a pointer
        // at its own start is an endless name.
        let mut looped = vec![0, 7, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0];
        looped.extend_from_slice(&[4, b't', b'e', b's', b't', 0xc0, 12, 0, 1, 0, 1]);
        assert!(matches!(
            answer(&looped),
            Outcome::Rejected {
                why: Malformed::BadPointer | Malformed::NameTooLong,
                ..
            }
        ));
        // A pointer at itself, ahead of itself, and into the header.
        for target in [14u8, 16, 0, 11] {
            let mut q = vec![0, 7, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0];
            q.extend_from_slice(&[1, b'a', 0xc0, target, 0, 0, 1, 0, 1]);
            assert!(
                matches!(
                    answer(&q),
                    Outcome::Rejected {
                        why: Malformed::BadPointer,
                        ..
                    }
                ),
                "pointer to {target}"
            );
        }
        // A pointer cut off after its first byte.
        let mut cut = vec![0, 7, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0];
        cut.extend_from_slice(&[1, b'a', 0xc0]);
        assert!(matches!(
            answer(&cut),
            Outcome::Rejected {
                why: Malformed::Truncated,
                ..
            }
        ));
    }

    #[test]
    fn the_root_name_is_a_question_and_its_truncation_is_not() {
        let mut root = vec![0, 9, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 1];
        let Outcome::Refused { question, reply } = answer(&root) else {
            panic!()
        };
        assert_eq!(question.name(), ".");
        assert_eq!(question.type_name(), "NS");
        assert_eq!(&reply[12..], &root[12..]);
        root.truncate(15);
        assert!(matches!(
            answer(&root),
            Outcome::Rejected {
                why: Malformed::Truncated,
                ..
            }
        ));
    }

    #[test]
    fn hostile_labels_are_escaped_in_the_name() {
        let mut q = vec![0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0];
        q.extend_from_slice(&[
            5, b'a', b'.', b'\n', b'"', 0xff, 3, b'c', b'o', b'm', 0, 0, 1, 0, 1,
        ]);
        let Outcome::Refused { question, .. } = answer(&q) else {
            panic!()
        };
        assert_eq!(question.name(), "a\\046\\010\\034\\255.com");
    }

    #[test]
    fn every_truncation_of_a_query_gets_a_clear_outcome() {
        let q = query("files.pythonhosted.org", 1);
        for n in 0..q.len() {
            match answer(&q[..n]) {
                Outcome::Dropped(Malformed::Short) => assert!(n < 12),
                Outcome::Rejected { why, reply } => {
                    assert_eq!(why, Malformed::Truncated, "at {n}");
                    assert_eq!(reply.len(), 12);
                    assert_eq!(reply[3], FORMERR);
                }
                other => panic!("at {n}: {other:?}"),
            }
        }
    }

    #[test]
    fn counts_opcodes_responses_and_bad_lengths() {
        let mut q = query("a.b", 1);
        q[5] = 0;
        assert!(matches!(
            answer(&q),
            Outcome::Rejected { why: Malformed::QuestionCount(0), ref reply } if reply[3] == FORMERR
        ));
        q[5] = 2;
        assert!(matches!(
            answer(&q),
            Outcome::Rejected {
                why: Malformed::QuestionCount(2),
                ..
            }
        ));
        let mut r = query("a.b", 1);
        r[2] |= 0x80;
        assert_eq!(answer(&r), Outcome::Dropped(Malformed::Response));
        let mut u = query("a.b", 1);
        u[2] = 5 << 3; // UPDATE
        assert!(matches!(
            answer(&u),
            Outcome::Rejected { why: Malformed::Opcode(5), ref reply } if reply[3] == NOTIMP && reply[2] == 0x80 | (5 << 3)
        ));
        // A label length past the end, and the reserved 0x40/0x80 types.
        let mut l = query("", 1);
        l.truncate(12);
        l.extend_from_slice(&[63, b'a']);
        assert!(matches!(
            answer(&l),
            Outcome::Rejected {
                why: Malformed::Truncated,
                ..
            }
        ));
        for bad in [0x40, 0x80] {
            let mut b = query("", 1);
            b[12] = bad;
            assert!(matches!(
                answer(&b),
                Outcome::Rejected {
                    why: Malformed::BadLabel,
                    ..
                }
            ));
        }
    }

    #[test]
    fn names_over_255_octets_are_refused() {
        let label = "a".repeat(63);
        let ok = format!("{label}.{label}.{label}.{}", "b".repeat(61)); // 255 octets
        assert!(matches!(answer(&query(&ok, 1)), Outcome::Refused { .. }));
        let long = format!("{label}.{label}.{label}.{label}");
        assert!(matches!(
            answer(&query(&long, 1)),
            Outcome::Rejected {
                why: Malformed::NameTooLong,
                ..
            }
        ));
    }

    #[test]
    fn every_byte_string_gets_an_answer_without_panic() {
        // A cheap exhaustive-ish walk: every 1- and 2-byte mutation of a query.
        let q = query("x.example", 1);
        for i in 0..q.len() {
            for v in [0u8, 1, 0x3f, 0x40, 0x80, 0xc0, 0xc1, 0xff] {
                let mut m = q.clone();
                m[i] = v;
                let _ = answer(&m);
                m.truncate(i);
                let _ = answer(&m);
            }
        }
    }

    #[test]
    fn resolv_conf_nameservers() {
        let text = "# comment\nsearch corp\nnameserver 10.255.255.53\nnameserver  ::1\n\
                    nameserver fe80::1%eth0\nnameserver bogus\nnameserver 10.255.255.53\n\
                    nameserver 1.1.1.1\nnameserver 8.8.8.8\n";
        let got: Vec<String> = nameservers(text).iter().map(|a| a.to_string()).collect();
        assert_eq!(got, ["10.255.255.53", "::1", "1.1.1.1"]);
        assert!(nameservers("").is_empty());
    }
}
