//! Talking to a parent (upstream) proxy, sans-IO: the client side of an HTTP
//! `CONNECT` or a SOCKS5 `CONNECT` (RFC 1928, username/password RFC 1929),
//! asking the parent for a tunnel to one address. Bytes in, bytes out.

use std::net::SocketAddr;

use super::http1::parse_response_head;
use super::socks5;

pub use crate::target::parent::{ParentKind, ParentProxy};

/// Where a handshake with a parent stands after bytes came in.
#[derive(Debug, PartialEq, Eq)]
pub enum Progress {
    /// More bytes from the parent are needed (send [`ParentHandshake::to_send`] first).
    NeedMore,
    /// The tunnel is open; bytes that followed the parent's answer belong
    /// to the destination (rare, but never dropped).
    Open(Vec<u8>),
    /// The parent refused or broke the protocol: why, for a 502.
    Failed(String),
}

/// The client side of one handshake with a parent proxy.
#[derive(Debug)]
pub struct ParentHandshake {
    stage: Stage,
    out: Vec<u8>,
    input: Vec<u8>,
    credentials: Option<(String, String)>,
    target: SocketAddr,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    HttpReply,
    SocksMethod,
    SocksAuth,
    SocksReply,
    Done,
}

/// The most a parent's answer head may take.
const MAX_ANSWER: usize = 16 * 1024;

impl ParentHandshake {
    /// Starts asking `parent` for a tunnel to `target`; the first bytes to
    /// send are ready at once.
    pub fn new(parent: &ParentProxy, target: SocketAddr) -> ParentHandshake {
        let mut hs = ParentHandshake {
            stage: Stage::Done,
            out: Vec::new(),
            input: Vec::new(),
            credentials: parent.credentials.clone(),
            target,
        };
        match parent.kind {
            ParentKind::Http => {
                let mut req = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n");
                if let Some((user, pass)) = &hs.credentials {
                    let token = base64(format!("{user}:{pass}").as_bytes());
                    req.push_str(&format!("Proxy-Authorization: Basic {token}\r\n"));
                }
                req.push_str("\r\n");
                hs.out = req.into_bytes();
                hs.stage = Stage::HttpReply;
            }
            ParentKind::Socks5 => {
                hs.out = match hs.credentials {
                    Some(_) => vec![5, 1, socks5::METHOD_USER_PASS],
                    None => vec![5, 1, socks5::METHOD_NO_AUTH],
                };
                hs.stage = Stage::SocksMethod;
            }
        }
        hs
    }

    /// Bytes waiting to go to the parent.
    pub fn to_send(&self) -> &[u8] {
        &self.out
    }

    /// `n` bytes of [`ParentHandshake::to_send`] went out.
    pub fn sent(&mut self, n: usize) {
        self.out.drain(..n.min(self.out.len()));
    }

    /// Bytes the parent sent.
    pub fn received(&mut self, bytes: &[u8]) -> Progress {
        self.input.extend_from_slice(bytes);
        loop {
            let step = match self.stage {
                Stage::HttpReply => self.http_reply(),
                Stage::SocksMethod => self.socks_method(),
                Stage::SocksAuth => self.socks_auth(),
                Stage::SocksReply => self.socks_reply(),
                Stage::Done => return Progress::Open(std::mem::take(&mut self.input)),
            };
            match step {
                Some(Progress::NeedMore) if self.stage != Stage::Done => {
                    if self.input.len() > MAX_ANSWER {
                        return self.fail("the parent proxy's answer is too long".into());
                    }
                    return Progress::NeedMore;
                }
                Some(other) => return other,
                // A stage finished and queued our next message: nothing the
                // parent sent yet can answer what it has not read.
                None if self.stage != Stage::Done && !self.out.is_empty() => {
                    if !self.input.is_empty() {
                        return self.fail("the parent proxy answered before our request".into());
                    }
                    return Progress::NeedMore;
                }
                // A stage finished: go on with what is left.
                None => {}
            }
        }
    }

    fn fail(&mut self, why: String) -> Progress {
        self.stage = Stage::Done;
        self.input.clear();
        Progress::Failed(why)
    }

    fn http_reply(&mut self) -> Option<Progress> {
        let (head, n) = match parse_response_head(&self.input, MAX_ANSWER) {
            Ok(None) => return Some(Progress::NeedMore),
            Ok(Some(parsed)) => parsed,
            Err(e) => return Some(self.fail(format!("the parent proxy's answer: {e:?}"))),
        };
        if !(200..300).contains(&head.status) {
            let detail = head
                .header("X-Proxy-Error")
                .map(|v| format!(" ({})", String::from_utf8_lossy(v)))
                .unwrap_or_default();
            let why = format!(
                "the parent proxy answered {} {}{detail}",
                head.status, head.reason
            );
            return Some(self.fail(why));
        }
        self.input.drain(..n);
        self.stage = Stage::Done;
        None
    }

    fn socks_method(&mut self) -> Option<Progress> {
        let [ver, method] = match self.input.get(..2) {
            Some(&[v, m]) => [v, m],
            _ => return Some(Progress::NeedMore),
        };
        self.input.drain(..2);
        if ver != 5 {
            return Some(self.fail("the parent proxy does not speak SOCKS5".into()));
        }
        match (method, &self.credentials) {
            (socks5::METHOD_NO_AUTH, _) => self.socks_request(),
            (socks5::METHOD_USER_PASS, Some((user, pass))) => {
                self.out.push(1);
                self.out.push(user.len() as u8);
                self.out.extend_from_slice(user.as_bytes());
                self.out.push(pass.len() as u8);
                self.out.extend_from_slice(pass.as_bytes());
                self.stage = Stage::SocksAuth;
                None
            }
            _ => Some(self.fail(
                "the parent proxy accepted none of our SOCKS5 authentication methods".into(),
            )),
        }
    }

    fn socks_auth(&mut self) -> Option<Progress> {
        let status = match self.input.get(..2) {
            Some(&[_, s]) => s,
            _ => return Some(Progress::NeedMore),
        };
        self.input.drain(..2);
        if status != 0 {
            return Some(self.fail("the parent proxy rejected our SOCKS5 credentials".into()));
        }
        self.socks_request()
    }

    fn socks_request(&mut self) -> Option<Progress> {
        self.out.extend_from_slice(&[5, 1, 0]);
        match self.target {
            SocketAddr::V4(a) => {
                self.out.push(1);
                self.out.extend_from_slice(&a.ip().octets());
            }
            SocketAddr::V6(a) => {
                self.out.push(4);
                self.out.extend_from_slice(&a.ip().octets());
            }
        }
        self.out
            .extend_from_slice(&self.target.port().to_be_bytes());
        self.stage = Stage::SocksReply;
        None
    }

    fn socks_reply(&mut self) -> Option<Progress> {
        // VER REP RSV ATYP BND.ADDR BND.PORT
        let Some(&[ver, rep, _, atyp]) = self.input.get(..4) else {
            return Some(Progress::NeedMore);
        };
        let addr_len = match atyp {
            1 => 4,
            4 => 16,
            3 => match self.input.get(4) {
                Some(&n) => 1 + n as usize,
                None => return Some(Progress::NeedMore),
            },
            _ => return Some(self.fail("the parent proxy's SOCKS5 reply is malformed".into())),
        };
        let len = 4 + addr_len + 2;
        if self.input.len() < len {
            return Some(Progress::NeedMore);
        }
        if ver != 5 {
            return Some(self.fail("the parent proxy's SOCKS5 reply is malformed".into()));
        }
        if rep != 0 {
            let why = format!(
                "the parent proxy refused the SOCKS5 connect (reply {rep:#04x}: {})",
                socks_reply_text(rep)
            );
            return Some(self.fail(why));
        }
        self.input.drain(..len);
        self.stage = Stage::Done;
        None
    }
}

fn socks_reply_text(rep: u8) -> &'static str {
    match rep {
        1 => "general failure",
        2 => "not allowed by ruleset",
        3 => "network unreachable",
        4 => "host unreachable",
        5 => "connection refused",
        6 => "TTL expired",
        7 => "command not supported",
        8 => "address type not supported",
        _ => "unknown",
    }
}

fn base64(data: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parent(url: &str) -> ParentProxy {
        ParentProxy::parse(url).unwrap()
    }

    /// Feeds `answer` cut in two at every byte; the outcome must not depend
    /// on the cut. An `Open` carries what followed the answer in the call
    /// that finished it, plus whatever was never fed (the tunnel's bytes).
    fn split_everywhere(p: &ParentProxy, answer: &[u8]) -> Vec<Progress> {
        let target: SocketAddr = "192.0.2.7:443".parse().unwrap();
        (0..=answer.len())
            .map(|cut| {
                let mut hs = ParentHandshake::new(p, target);
                let (first, second) = answer.split_at(cut);
                match hs.received(first) {
                    Progress::NeedMore => hs.received(second),
                    Progress::Open(mut left) => {
                        left.extend_from_slice(second);
                        Progress::Open(left)
                    }
                    failed => failed,
                }
            })
            .collect()
    }

    #[test]
    fn urls_parse_with_defaults_and_hidden_passwords() {
        let p = parent("http://127.0.0.1");
        assert_eq!((p.kind, p.addr.port()), (ParentKind::Http, 3128));
        let p = parent("socks5h://us%65r:p%40ss@127.0.0.1:9050");
        assert_eq!((p.kind, p.addr.port()), (ParentKind::Socks5, 9050));
        assert_eq!(p.credentials, Some(("user".into(), "p@ss".into())));
        assert_eq!(p.to_string(), "socks5h://user:***@127.0.0.1:9050");
        assert!(ParentProxy::parse("ftp://x").is_err());
        assert!(ParentProxy::parse("127.0.0.1:3128").is_err());
    }

    #[test]
    fn errors_never_quote_the_password() {
        for url in [
            "ftp://agent:s3cret@127.0.0.1",
            "http://agent:s3cret@no-such-host.invalid:3128",
            "http://agent:s3cret%zz@127.0.0.1",
            "http://:s3cret@127.0.0.1",
            // No scheme (a common slip): the userinfo is still hidden.
            "agent:s3cret@127.0.0.1:3128",
            "agent:s3cret@proxy:3128/",
        ] {
            let e = ParentProxy::parse(url).unwrap_err();
            assert!(!e.contains("s3cret"), "{url}: {e}");
        }
    }

    #[test]
    fn http_connect_with_credentials() {
        let p = parent("http://agent:s3cret@127.0.0.1:3128");
        let hs = ParentHandshake::new(&p, "192.0.2.7:443".parse().unwrap());
        let sent = String::from_utf8(hs.to_send().to_vec()).unwrap();
        assert!(
            sent.starts_with("CONNECT 192.0.2.7:443 HTTP/1.1\r\n"),
            "{sent}"
        );
        assert!(
            sent.contains("Proxy-Authorization: Basic YWdlbnQ6czNjcmV0\r\n"),
            "{sent}"
        );
        for out in split_everywhere(&p, b"HTTP/1.1 200 Connection established\r\n\r\nhi") {
            assert_eq!(out, Progress::Open(b"hi".to_vec()));
        }
    }

    #[test]
    fn http_refusal_says_why() {
        let p = parent("http://127.0.0.1:3128");
        let answer = b"HTTP/1.1 403 Forbidden\r\nX-Proxy-Error: denied; no-matching-rule\r\nContent-Length: 0\r\n\r\n";
        for out in split_everywhere(&p, answer) {
            let Progress::Failed(why) = out else {
                panic!("{out:?}")
            };
            assert!(
                why.contains("403") && why.contains("no-matching-rule"),
                "{why}"
            );
        }
    }

    /// A SOCKS5 conversation: each reply but the last read once our
    /// message before it went out, the last cut in two at every byte.
    fn socks_everywhere(p: &ParentProxy, to: &str, replies: &[&[u8]]) -> Vec<Progress> {
        let (last, before) = replies.split_last().unwrap();
        (0..=last.len())
            .map(|cut| {
                let mut hs = ParentHandshake::new(p, to.parse().unwrap());
                for reply in before {
                    hs.sent(hs.to_send().len());
                    assert_eq!(hs.received(reply), Progress::NeedMore);
                }
                hs.sent(hs.to_send().len());
                let (first, second) = last.split_at(cut);
                match hs.received(first) {
                    Progress::NeedMore => hs.received(second),
                    other => other,
                }
            })
            .collect()
    }

    #[test]
    fn socks5_with_and_without_credentials() {
        let plain = parent("socks5://127.0.0.1:1080");
        let ok = [5u8, 0, 0, 1, 10, 0, 0, 1, 0x1f, 0x90];
        for out in socks_everywhere(&plain, "192.0.2.7:443", &[&[5, 0], &ok]) {
            assert_eq!(out, Progress::Open(Vec::new()));
        }
        let auth = parent("socks5://u:p@127.0.0.1:1080");
        let hs = ParentHandshake::new(&auth, "[2001:db8::1]:443".parse().unwrap());
        assert_eq!(hs.to_send(), [5, 1, 2]);
        let ok6 = [
            5u8, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        for out in socks_everywhere(&auth, "[2001:db8::1]:443", &[&[5, 2], &[1, 0], &ok6]) {
            assert_eq!(out, Progress::Open(Vec::new()));
        }
        let refused = [5u8, 2, 0, 1, 0, 0, 0, 0, 0, 0];
        for out in socks_everywhere(&plain, "192.0.2.7:443", &[&[5, 0], &refused]) {
            assert!(
                matches!(out, Progress::Failed(ref w) if w.contains("not allowed")),
                "{out:?}"
            );
        }
    }

    /// Replies sent ahead, with the method choice, answer requests the
    /// parent has not read: refused, never an open tunnel.
    #[test]
    fn socks5_replies_ahead_of_our_messages_are_refused() {
        let plain = parent("socks5://127.0.0.1:1080");
        let auth = parent("socks5://u:p@127.0.0.1:1080");
        let ok = [5u8, 0, 0, 1, 10, 0, 0, 1, 0x1f, 0x90];
        for (p, ahead) in [
            (&plain, [&[5u8, 0][..], &ok].concat()),
            (&auth, [&[5u8, 2, 1, 0][..], &ok].concat()),
            (&auth, vec![5, 2, 1]),
        ] {
            let mut hs = ParentHandshake::new(p, "192.0.2.7:443".parse().unwrap());
            hs.sent(3);
            assert_eq!(
                hs.received(&ahead),
                Progress::Failed("the parent proxy answered before our request".into()),
                "{ahead:?}"
            );
        }
    }

    #[test]
    fn socks5_sends_the_request_bytes_in_order() {
        let p = parent("socks5://u:pw@127.0.0.1:1080");
        let mut hs = ParentHandshake::new(&p, "192.0.2.7:443".parse().unwrap());
        hs.sent(3);
        assert_eq!(hs.received(&[5, 2]), Progress::NeedMore);
        assert_eq!(hs.to_send(), [1, 1, b'u', 2, b'p', b'w']);
        hs.sent(6);
        assert_eq!(hs.received(&[1, 0]), Progress::NeedMore);
        assert_eq!(hs.to_send(), [5, 1, 0, 1, 192, 0, 2, 7, 1, 187]);
    }

    #[test]
    fn base64_matches_rfc_4648() {
        for (i, o) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
        ] {
            assert_eq!(base64(i.as_bytes()), o);
        }
    }
}
