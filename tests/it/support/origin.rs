//! A keep-alive HTTP/1.1 origin for the inspection tests, and a matching
//! client: both parse heads with httparse, read bodies by their framing
//! (Content-Length, chunked with trailers, until close) and stream them
//! through SHA-256 so large bodies never sit whole in memory.
#![allow(dead_code)]

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};

use super::{DataGen, Hash, Server, PROMPTLY};

/// Bodies up to this size are also kept whole (for assertions on content).
pub const BODY_KEEP: usize = 1 << 20;

/// How a message body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    None,
    Length(u64),
    Chunked,
    UntilClose,
}

/// A body read off the wire.
#[derive(Debug, Clone)]
pub struct ReadBody {
    pub len: u64,
    pub hash: Hash,
    /// The bytes, when `len <= BODY_KEEP`.
    pub bytes: Vec<u8>,
    pub trailers: Vec<(String, String)>,
}

fn lower_eq(a: &str, b: &str) -> bool {
    a.eq_ignore_ascii_case(b)
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| lower_eq(n, name))
        .map(|(_, v)| v.as_str())
}

fn parse_header_lines(raw: &str) -> Vec<(String, String)> {
    raw.split("\r\n")
        .filter(|l| !l.is_empty())
        .filter_map(|l| {
            l.split_once(':')
                .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
        })
        .collect()
}

/// Reads one CRLF-terminated line (with its CRLF). `Ok(None)` at a clean EOF.
fn read_line(r: &mut impl BufRead) -> io::Result<Option<Vec<u8>>> {
    let mut line = Vec::new();
    let n = r.read_until(b'\n', &mut line)?;
    if n == 0 {
        return Ok(None);
    }
    if !line.ends_with(b"\n") {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("EOF inside a line: {:?}", String::from_utf8_lossy(&line)),
        ));
    }
    Ok(Some(line))
}

/// Reads a head up to and including its blank line. `Ok(None)`: clean EOF
/// before any byte of a head.
pub fn read_head(r: &mut impl BufRead) -> io::Result<Option<Vec<u8>>> {
    let mut head = Vec::new();
    loop {
        match read_line(r)? {
            None if head.is_empty() => return Ok(None),
            None => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("EOF inside a head: {:?}", String::from_utf8_lossy(&head)),
                ))
            }
            Some(line) => {
                let blank = line == b"\r\n";
                head.extend_from_slice(&line);
                if blank && head.len() > 2 {
                    return Ok(Some(head));
                }
                if blank {
                    // A stray CRLF between messages: RFC 9112 2.2 allows ignoring it.
                    head.clear();
                }
            }
        }
        if head.len() > 256 * 1024 {
            return Err(io::Error::other("head too long"));
        }
    }
}

struct BodySink {
    h: Sha256,
    len: u64,
    keep: Vec<u8>,
}

impl BodySink {
    fn new() -> Self {
        BodySink {
            h: Sha256::new(),
            len: 0,
            keep: Vec::new(),
        }
    }
    fn take(&mut self, data: &[u8]) {
        self.h.update(data);
        self.len += data.len() as u64;
        if self.keep.len() < BODY_KEEP + 1 {
            self.keep.extend_from_slice(data);
        }
    }
    fn finish(self, trailers: Vec<(String, String)>) -> ReadBody {
        let bytes = if self.len as usize <= BODY_KEEP {
            self.keep
        } else {
            Vec::new()
        };
        ReadBody {
            len: self.len,
            hash: self.h.finalize().into(),
            bytes,
            trailers,
        }
    }
}

fn copy_n(r: &mut impl BufRead, n: u64, sink: &mut BodySink) -> io::Result<()> {
    let mut left = n;
    while left > 0 {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("EOF with {left} body bytes still due"),
            ));
        }
        let k = buf.len().min(left.min(usize::MAX as u64) as usize);
        sink.take(&buf[..k]);
        r.consume(k);
        left -= k as u64;
    }
    Ok(())
}

/// Reads a body of `framing` from `r` (an `UntilClose` body reads to EOF).
pub fn read_body(r: &mut impl BufRead, framing: Framing) -> io::Result<ReadBody> {
    let mut sink = BodySink::new();
    let mut trailers = Vec::new();
    match framing {
        Framing::None => {}
        Framing::Length(n) => copy_n(r, n, &mut sink)?,
        Framing::UntilClose => loop {
            let buf = match r.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => break,
                Err(e) => return Err(e),
            };
            if buf.is_empty() {
                break;
            }
            let k = buf.len();
            sink.take(buf);
            r.consume(k);
        },
        Framing::Chunked => loop {
            let line = read_line(r)?
                .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "EOF at chunk"))?;
            let text = String::from_utf8_lossy(&line);
            let size_txt = text.trim_end().split(';').next().unwrap_or("").trim();
            let size = u64::from_str_radix(size_txt, 16)
                .map_err(|_| io::Error::other(format!("bad chunk size line {text:?}")))?;
            if size == 0 {
                let mut raw = String::new();
                loop {
                    let l = read_line(r)?.ok_or_else(|| {
                        io::Error::new(io::ErrorKind::UnexpectedEof, "EOF in trailers")
                    })?;
                    if l == b"\r\n" {
                        break;
                    }
                    raw.push_str(&String::from_utf8_lossy(&l));
                }
                trailers = parse_header_lines(&raw);
                break;
            }
            copy_n(r, size, &mut sink)?;
            let crlf = read_line(r)?;
            if crlf.as_deref() != Some(b"\r\n") {
                return Err(io::Error::other(format!(
                    "chunk data not followed by CRLF: {crlf:?}"
                )));
            }
        },
    }
    Ok(sink.finish(trailers))
}

fn framing_of(headers: &[(String, String)], until_close: bool) -> io::Result<Framing> {
    let te = header(headers, "transfer-encoding");
    let cl = header(headers, "content-length");
    match (te, cl) {
        (Some(te), _) if te.to_ascii_lowercase().trim().ends_with("chunked") => {
            Ok(Framing::Chunked)
        }
        (Some(_), _) if until_close => Ok(Framing::UntilClose),
        (Some(te), _) => Err(io::Error::other(format!("unsupported TE {te:?}"))),
        (None, Some(cl)) => cl
            .trim()
            .parse()
            .map(Framing::Length)
            .map_err(|_| io::Error::other(format!("bad Content-Length {cl:?}"))),
        (None, None) if until_close => Ok(Framing::UntilClose),
        (None, None) => Ok(Framing::None),
    }
}

/// Writes `len` bytes of stream `seed` as a chunked body: chunk sizes from
/// `sizes` (cycled), then the last chunk with `trailers`.
pub fn write_chunked(
    w: &mut impl Write,
    seed: u64,
    len: u64,
    sizes: &[usize],
    trailers: &[(&str, &str)],
) -> io::Result<()> {
    let mut g = DataGen::new(seed);
    let mut left = len;
    let mut i = 0;
    let max = sizes.iter().copied().max().unwrap_or(1).max(1);
    let mut buf = vec![0u8; max];
    while left > 0 {
        let n = (sizes[i % sizes.len()].max(1) as u64).min(left) as usize;
        i += 1;
        g.fill(&mut buf[..n]);
        w.write_all(format!("{n:x}\r\n").as_bytes())?;
        w.write_all(&buf[..n])?;
        w.write_all(b"\r\n")?;
        left -= n as u64;
    }
    let mut end = String::from("0\r\n");
    for (n, v) in trailers {
        end.push_str(&format!("{n}: {v}\r\n"));
    }
    end.push_str("\r\n");
    w.write_all(end.as_bytes())?;
    w.flush()
}

// ---------------------------------------------------------------------------
// The origin
// ---------------------------------------------------------------------------

/// A request as the origin received it.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// Which accepted connection (1-based, accept order).
    pub conn: usize,
    pub method: String,
    pub target: String,
    /// Minor version.
    pub version: u8,
    pub headers: Vec<(String, String)>,
    pub body: ReadBody,
    pub raw_head: String,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }
    pub fn headers_named(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| lower_eq(n, name))
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

/// Chunk sizes (cycled) and trailers of a chunked body.
pub type Chunking = (Vec<usize>, Vec<(String, String)>);

/// What the origin does with a request.
pub enum Reply {
    /// These bytes, verbatim; the connection stays open.
    Bytes(Vec<u8>),
    /// These bytes, then the origin closes its side.
    Close(Vec<u8>),
    /// `head` (status line and header lines, each ending in CRLF, without the
    /// blank line), then `len` bytes of stream `seed`: chunked (chunk sizes
    /// `sizes`, `trailers`) or with a Content-Length added.
    Stream {
        head: String,
        seed: u64,
        len: u64,
        chunked: Option<Chunking>,
    },
    /// Never answer; keep reading until the client goes.
    Hang,
    /// Close at once without answering.
    Drop,
}

/// `200 OK` with `body` and a Content-Length.
pub fn ok(body: &str) -> Reply {
    Reply::Bytes(
        format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nContent-Type: text/plain\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    )
}

type Handler = dyn Fn(&Recorded) -> Reply + Send + Sync;

/// The keep-alive origin: records every request it reads.
pub struct Origin {
    pub server: Server,
    log: Arc<Mutex<Vec<Recorded>>>,
}

impl Origin {
    /// Starts an origin answering with `handler`.
    pub fn start(handler: impl Fn(&Recorded) -> Reply + Send + Sync + 'static) -> Origin {
        let log = Arc::new(Mutex::new(Vec::new()));
        let l = log.clone();
        let handler: Arc<Handler> = Arc::new(handler);
        let conns = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let server = Server::start(move |s| {
            let id = conns.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
            let _ = serve(s, id, &*handler, &l);
        });
        Origin { server, log }
    }

    /// An origin answering every request with `200` and `"<METHOD> <target>"`.
    pub fn echo_target() -> Origin {
        Origin::start(|r| ok(&format!("{} {}", r.method, r.target)))
    }

    pub fn port(&self) -> u16 {
        self.server.port()
    }

    pub fn target(&self) -> String {
        self.server.target()
    }

    pub fn accepted(&self) -> usize {
        self.server.accepted()
    }

    /// Every request read so far, in order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.log.lock().unwrap().clone()
    }
}

fn serve(s: TcpStream, id: usize, handler: &Handler, log: &Mutex<Vec<Recorded>>) -> io::Result<()> {
    let mut w = s.try_clone()?;
    let mut r = BufReader::with_capacity(64 * 1024, s);
    loop {
        let Some(raw) = read_head(&mut r)? else {
            let _ = w.shutdown(Shutdown::Write);
            return Ok(());
        };
        let mut hs = [httparse::EMPTY_HEADER; 128];
        let mut req = httparse::Request::new(&mut hs);
        match req.parse(&raw) {
            Ok(httparse::Status::Complete(_)) => {}
            other => {
                let _ = w.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
                return Err(io::Error::other(format!(
                    "origin could not parse: {other:?}"
                )));
            }
        }
        let headers: Vec<(String, String)> = req
            .headers
            .iter()
            .map(|h| {
                (
                    h.name.to_string(),
                    String::from_utf8_lossy(h.value).trim().to_string(),
                )
            })
            .collect();
        let method = req.method.unwrap_or_default().to_string();
        let target = req.path.unwrap_or_default().to_string();
        let version = req.version.unwrap_or(1);
        if header(&headers, "expect").is_some_and(|v| v.eq_ignore_ascii_case("100-continue")) {
            w.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
        }
        let framing = framing_of(&headers, false)?;
        let body = read_body(&mut r, framing)?;
        let rec = Recorded {
            conn: id,
            method,
            target,
            version,
            headers,
            body,
            raw_head: String::from_utf8_lossy(&raw).into_owned(),
        };
        let close_asked = header(&rec.headers, "connection")
            .is_some_and(|v| v.to_ascii_lowercase().contains("close"));
        log.lock().unwrap().push(rec.clone());
        match handler(&rec) {
            Reply::Bytes(b) => w.write_all(&b)?,
            Reply::Close(b) => {
                w.write_all(&b)?;
                let _ = w.shutdown(Shutdown::Write);
                drain(&mut r);
                return Ok(());
            }
            Reply::Stream {
                head,
                seed,
                len,
                chunked,
            } => match chunked {
                Some((sizes, trailers)) => {
                    w.write_all(format!("{head}Transfer-Encoding: chunked\r\n\r\n").as_bytes())?;
                    let t: Vec<(&str, &str)> = trailers
                        .iter()
                        .map(|(a, b)| (a.as_str(), b.as_str()))
                        .collect();
                    write_chunked(&mut w, seed, len, &sizes, &t)?;
                }
                None => {
                    w.write_all(format!("{head}Content-Length: {len}\r\n\r\n").as_bytes())?;
                    super::write_stream(&mut w, seed, len, 1, 64 * 1024)?;
                }
            },
            Reply::Hang => {
                drain(&mut r);
                return Ok(());
            }
            Reply::Drop => return Ok(()),
        }
        if close_asked {
            let _ = w.shutdown(Shutdown::Write);
            drain(&mut r);
            return Ok(());
        }
    }
}

/// Reads until the peer goes (bounded), so our close never resets unread bytes.
fn drain(r: &mut BufReader<TcpStream>) {
    let _ = r.get_ref().set_read_timeout(Some(PROMPTLY * 6));
    let mut sink = [0u8; 16 * 1024];
    while matches!(r.read(&mut sink), Ok(n) if n > 0) {}
}

// ---------------------------------------------------------------------------
// The client
// ---------------------------------------------------------------------------

/// A response as the client read it.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: ReadBody,
    pub raw_head: String,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body.bytes).into_owned()
    }
}

/// An HTTP/1.1 client connection (through a tunnel, or to the proxy itself).
pub struct HttpConn {
    pub r: BufReader<TcpStream>,
    pub w: TcpStream,
}

impl HttpConn {
    pub fn new(s: TcpStream) -> HttpConn {
        s.set_read_timeout(Some(super::BULK)).unwrap();
        let w = s.try_clone().expect("clone stream");
        HttpConn {
            r: BufReader::with_capacity(64 * 1024, s),
            w,
        }
    }

    pub fn send(&mut self, bytes: impl AsRef<[u8]>) {
        self.w.write_all(bytes.as_ref()).expect("send to the proxy");
    }

    /// Reads one response to a `method` request (1xx included, returned as is).
    pub fn read_response(&mut self, method: &str) -> io::Result<Response> {
        let raw = read_head(&mut self.r)?
            .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "EOF before a response"))?;
        let mut hs = [httparse::EMPTY_HEADER; 128];
        let mut resp = httparse::Response::new(&mut hs);
        match resp.parse(&raw) {
            Ok(httparse::Status::Complete(_)) => {}
            other => {
                return Err(io::Error::other(format!(
                    "unparsable response head {:?}: {other:?}",
                    String::from_utf8_lossy(&raw)
                )))
            }
        }
        let status = resp.code.unwrap_or(0);
        let headers: Vec<(String, String)> = resp
            .headers
            .iter()
            .map(|h| {
                (
                    h.name.to_string(),
                    String::from_utf8_lossy(h.value).trim().to_string(),
                )
            })
            .collect();
        let framing = if method == "HEAD" || matches!(status, 100..=199 | 204 | 304) {
            Framing::None
        } else {
            framing_of(&headers, true)?
        };
        let body = read_body(&mut self.r, framing)?;
        Ok(Response {
            status,
            headers,
            body,
            raw_head: String::from_utf8_lossy(&raw).into_owned(),
        })
    }

    /// Like [`HttpConn::read_response`], panicking on errors.
    #[track_caller]
    pub fn response(&mut self, method: &str) -> Response {
        self.read_response(method)
            .unwrap_or_else(|e| panic!("reading a response to {method}: {e}"))
    }

    /// Sends `GET path` (keep-alive) with `Host: host` and reads the answer.
    #[track_caller]
    pub fn get(&mut self, host: &str, path: &str) -> Response {
        self.send(format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n"));
        self.response("GET")
    }

    /// Asserts the peer closes within [`PROMPTLY`] with no more bytes.
    #[track_caller]
    pub fn expect_eof(&mut self, what: &str) {
        self.r.get_ref().set_read_timeout(Some(PROMPTLY)).unwrap();
        let mut rest = Vec::new();
        match self.r.read_to_end(&mut rest) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {}
            Err(e) => panic!("{what}: expected the connection to close, got {e}"),
        }
        assert!(
            rest.is_empty(),
            "{what}: unexpected bytes before the close: {:?}",
            String::from_utf8_lossy(&rest)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::scripted::{Scripted, Step};
    use crate::support::{expected_hash, sha256};

    /// `wire` in two pieces, cut at `k`, behind a reader (an empty piece
    /// would read as EOF, so a cut at either end gives one piece).
    fn split(wire: &[u8], k: usize) -> BufReader<Scripted> {
        let pieces = [&wire[..k], &wire[k..]];
        BufReader::new(Scripted::new(
            pieces
                .iter()
                .filter(|p| !p.is_empty())
                .map(|p| Step::Data(p.to_vec()))
                .collect(),
        ))
    }

    /// What is left after a reader stopped.
    fn rest(mut r: BufReader<Scripted>) -> Vec<u8> {
        let mut v = Vec::new();
        r.read_to_end(&mut v).unwrap();
        v
    }

    #[test]
    fn heads_are_read_whole_at_every_split() {
        let one = b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n";
        let two = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
        // A stray CRLF between messages is skipped (RFC 9112 2.2).
        let wire = [&one[..], b"\r\n", &two[..], b"body"].concat();
        for k in 0..=wire.len() {
            let mut r = split(&wire, k);
            assert_eq!(read_head(&mut r).unwrap().unwrap(), one, "cut at {k}");
            assert_eq!(read_head(&mut r).unwrap().unwrap(), two, "cut at {k}");
            assert_eq!(rest(r), b"body", "cut at {k}: the body stays unread");
        }
    }

    #[test]
    fn eof_before_a_head_is_none_inside_one_an_error() {
        assert!(read_head(&mut split(b"", 0)).unwrap().is_none());
        let wire = b"GET / HTTP/1.1\r\nHost: x\r\n";
        for k in 0..=wire.len() {
            let e = read_head(&mut split(wire, k)).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "cut at {k}");
        }
        // EOF inside a line.
        let e = read_head(&mut split(b"GET / HT", 3)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn length_bodies_stop_at_their_length() {
        let wire = b"0123456789NEXT";
        for k in 0..=wire.len() {
            let mut r = split(wire, k);
            let body = read_body(&mut r, Framing::Length(10)).unwrap();
            assert_eq!(body.len, 10);
            assert_eq!(body.bytes, b"0123456789");
            assert_eq!(body.hash, sha256(b"0123456789"));
            assert_eq!(rest(r), b"NEXT", "cut at {k}");
        }
        let e = read_body(&mut split(b"short", 2), Framing::Length(10)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        let none = read_body(&mut split(b"NEXT", 1), Framing::None).unwrap();
        assert_eq!((none.len, none.bytes.len()), (0, 0));
    }

    #[test]
    fn chunked_bodies_with_trailers_at_every_split() {
        let wire = b"4\r\nWiki\r\n5;ext=1\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nX-Sum: abc\r\nX-Two:  2 \r\n\r\nNEXT";
        let data = b"Wikipedia in\r\n\r\nchunks.";
        for k in 0..=wire.len() {
            let mut r = split(wire, k);
            let body = read_body(&mut r, Framing::Chunked).unwrap();
            assert_eq!(body.bytes, data, "cut at {k}");
            assert_eq!(body.len, data.len() as u64);
            assert_eq!(body.hash, sha256(data));
            assert_eq!(
                body.trailers,
                [("X-Sum".into(), "abc".into()), ("X-Two".into(), "2".into())],
                "cut at {k}"
            );
            assert_eq!(rest(r), b"NEXT", "cut at {k}");
        }
    }

    #[test]
    fn broken_chunked_bodies_are_errors() {
        for (wire, what) in [
            (&b"zz\r\n"[..], "a bad size line"),
            (b"4\r\nWikiX\r\n0\r\n\r\n", "data not followed by CRLF"),
            (b"4\r\nWi", "EOF in the data"),
            (b"4\r\nWiki\r\n0\r\nX-Sum: 1\r\n", "EOF in the trailers"),
            (b"", "EOF at a chunk"),
        ] {
            assert!(
                read_body(&mut split(wire, wire.len() / 2), Framing::Chunked).is_err(),
                "{what}"
            );
        }
    }

    #[test]
    fn until_close_bodies_read_to_eof() {
        let wire = b"all of it, to the end";
        for k in 0..=wire.len() {
            let body = read_body(&mut split(wire, k), Framing::UntilClose).unwrap();
            assert_eq!(body.bytes, wire, "cut at {k}");
        }
        // A reset ends such a body like an EOF.
        let mut r = BufReader::new(Scripted::new(vec![
            Step::Data(b"cut".to_vec()),
            Step::Err(io::ErrorKind::ConnectionReset),
        ]));
        assert_eq!(
            read_body(&mut r, Framing::UntilClose).unwrap().bytes,
            b"cut"
        );
    }

    #[test]
    fn write_chunked_round_trips_through_read_body() {
        for (len, sizes) in [
            (0u64, &[7usize][..]),
            (1, &[1][..]),
            (1000, &[1, 2, 300][..]),
            (70_000, &[0, 65_536][..]),
        ] {
            let mut wire = Vec::new();
            write_chunked(&mut wire, 9, len, sizes, &[("X-Len", &len.to_string())]).unwrap();
            wire.extend_from_slice(b"NEXT");
            let mut r = BufReader::new(Scripted::pieces(&wire, 333));
            let body = read_body(&mut r, Framing::Chunked).unwrap();
            assert_eq!(body.len, len, "{sizes:?}");
            assert_eq!(body.hash, expected_hash(9, len), "{sizes:?}");
            assert_eq!(body.trailers, [("X-Len".into(), len.to_string())]);
            assert_eq!(rest(r), b"NEXT", "{sizes:?}");
        }
    }

    #[test]
    fn framing_follows_transfer_encoding_then_length() {
        let h = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect()
        };
        let chunked = h(&[
            ("Transfer-Encoding", "gzip, Chunked"),
            ("Content-Length", "3"),
        ]);
        assert_eq!(framing_of(&chunked, false).unwrap(), Framing::Chunked);
        let length = h(&[("content-length", " 12 ")]);
        assert_eq!(framing_of(&length, false).unwrap(), Framing::Length(12));
        assert_eq!(framing_of(&[], false).unwrap(), Framing::None);
        assert_eq!(framing_of(&[], true).unwrap(), Framing::UntilClose);
        let gzip = h(&[("Transfer-Encoding", "gzip")]);
        assert!(framing_of(&gzip, false).is_err());
        assert_eq!(framing_of(&gzip, true).unwrap(), Framing::UntilClose);
        assert!(framing_of(&h(&[("Content-Length", "x")]), false).is_err());
    }
}
