//! One admin connection's input, sans IO: bytes in, [`Input`]s out. The
//! first byte decides the protocol (`{`: control lines, else HTTP); an HTTP
//! connection carries one request; a control connection any number of
//! lines, each answered in order.

use super::http::{self, Head, Route};
use crate::control::wire::{error_value, unterminated, MAX_LINE};

/// Largest HTTP request head read on the admin socket.
pub(crate) const MAX_HEAD: usize = 8 * 1024;

/// What the connection asked for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Input {
    /// An HTTP request: answer it, then close.
    Http(Route),
    /// A control command line (without its newline).
    Line(String),
    /// Answer these bytes, then close (bad input that ends the connection).
    Fail(Vec<u8>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// No byte yet.
    Sniff,
    Http,
    Control,
    /// Nothing more is read (answered, or failed).
    Done,
}

/// The input side of one admin connection.
#[derive(Debug)]
pub(crate) struct Proto {
    mode: Mode,
    /// Whether control lines are accepted.
    control: bool,
    buf: Vec<u8>,
}

impl Proto {
    /// A connection on the admin socket; `control`: `[admin] control = true`.
    pub(crate) fn admin(control: bool) -> Proto {
        Proto {
            mode: Mode::Sniff,
            control,
            buf: Vec::new(),
        }
    }

    /// The control fd: control lines only.
    pub(crate) fn control_only() -> Proto {
        Proto {
            mode: Mode::Control,
            control: true,
            buf: Vec::new(),
        }
    }

    /// How many more bytes it takes now (0: stop reading).
    pub(crate) fn room(&self) -> usize {
        match self.mode {
            Mode::Done => 0,
            Mode::Sniff | Mode::Http => (MAX_HEAD + 1).saturating_sub(self.buf.len()),
            // A whole line and its newline.
            Mode::Control => (MAX_LINE + 1).saturating_sub(self.buf.len()),
        }
    }

    /// Takes bytes read from the connection.
    pub(crate) fn feed(&mut self, bytes: &[u8]) {
        if self.mode != Mode::Done {
            self.buf.extend_from_slice(bytes);
        }
    }

    /// Whether nothing more will be read.
    pub(crate) fn is_done(&self) -> bool {
        self.mode == Mode::Done
    }

    /// The peer finished sending: nothing more is read. A partial HTTP head
    /// is dropped; a partial control line is not run, and gets an error line
    /// (returned, for a peer that still reads).
    pub(crate) fn eof(&mut self) -> Option<Vec<u8>> {
        let partial = self.mode == Mode::Control && !self.buf.iter().all(u8::is_ascii_whitespace);
        let answer = partial.then(|| {
            let line = unterminated(&String::from_utf8_lossy(&self.buf));
            format!("{line}\n").into_bytes()
        });
        self.mode = Mode::Done;
        self.buf = Vec::new();
        answer
    }

    /// The next thing to act on, if the bytes so far make one.
    pub(crate) fn next(&mut self) -> Option<Input> {
        loop {
            match self.mode {
                Mode::Done => return None,
                Mode::Sniff => {
                    let first = *self.buf.first()?;
                    self.mode = match first {
                        b'{' if self.control => Mode::Control,
                        b'{' => {
                            let line = error_value(
                                "",
                                "control is off on this admin socket (set [admin] control = true)",
                            );
                            return Some(self.fail(format!("{line}\n").into_bytes()));
                        }
                        _ => Mode::Http,
                    };
                }
                Mode::Http => {
                    return match http::parse_head(&self.buf) {
                        Head::Partial if self.buf.len() > MAX_HEAD => {
                            Some(self.fail(http::error(431, "request head too large")))
                        }
                        Head::Partial => None,
                        Head::Malformed => Some(self.fail(http::error(400, "bad request"))),
                        Head::Request(route) => {
                            self.mode = Mode::Done;
                            self.buf = Vec::new();
                            Some(Input::Http(route))
                        }
                    }
                }
                Mode::Control => {
                    let Some(end) = self.buf.iter().position(|&b| b == b'\n') else {
                        if self.buf.len() > MAX_LINE {
                            let e = error_value("", &format!("line longer than {MAX_LINE} bytes"));
                            return Some(self.fail(format!("{e}\n").into_bytes()));
                        }
                        return None;
                    };
                    let mut line: Vec<u8> = self.buf.drain(..=end).collect();
                    line.pop();
                    if line.last() == Some(&b'\r') {
                        line.pop();
                    }
                    if line.iter().all(u8::is_ascii_whitespace) {
                        continue;
                    }
                    // Not UTF-8: the JSON parser says so, in an answer line.
                    return Some(Input::Line(String::from_utf8_lossy(&line).into_owned()));
                }
            }
        }
    }

    fn fail(&mut self, answer: Vec<u8>) -> Input {
        self.mode = Mode::Done;
        self.buf = Vec::new();
        Input::Fail(answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `bytes` one at a time, collecting every input.
    fn bytewise(mut p: Proto, bytes: &[u8]) -> Vec<Input> {
        let mut out = Vec::new();
        for b in bytes {
            if p.room() == 0 {
                break;
            }
            p.feed(std::slice::from_ref(b));
            while let Some(i) = p.next() {
                out.push(i);
            }
        }
        out
    }

    #[test]
    fn one_http_request_split_at_every_byte() {
        let req = b"GET /metrics HTTP/1.1\r\nHost: a\r\n\r\nGET /stats HTTP/1.1\r\n\r\n";
        let p = Proto::admin(false);
        assert_eq!(bytewise(p, req), [Input::Http(Route::Metrics)]);
    }

    #[test]
    fn control_lines_split_at_every_byte() {
        let lines = b"{\"cmd\":\"stats\"}\r\n\n  \n{\"cmd\":\"list-sessions\"}\n{\"cmd\"";
        let got = bytewise(Proto::admin(true), lines);
        assert_eq!(
            got,
            [
                Input::Line("{\"cmd\":\"stats\"}".into()),
                Input::Line("{\"cmd\":\"list-sessions\"}".into())
            ]
        );
        let got = bytewise(Proto::control_only(), b"not json\n");
        assert_eq!(got, [Input::Line("not json".into())]);
    }

    #[test]
    fn control_off_is_refused_with_a_line() {
        let got = bytewise(Proto::admin(false), b"{\"cmd\":\"stats\"}\n");
        let [Input::Fail(answer)] = &got[..] else {
            panic!("{got:?}")
        };
        let text = String::from_utf8(answer.clone()).unwrap();
        assert!(
            text.starts_with("{\"ok\":false,\"error\":\"control is off"),
            "{text}"
        );
        assert!(text.ends_with("}\n"));
    }

    #[test]
    fn oversized_input_fails_once() {
        let mut p = Proto::admin(false);
        p.feed(b"GET /");
        p.feed(&vec![b'a'; MAX_HEAD]);
        let Some(Input::Fail(a)) = p.next() else {
            panic!()
        };
        assert!(a.starts_with(b"HTTP/1.1 431 "));
        assert_eq!(p.room(), 0);
        assert_eq!(p.next(), None);

        let mut p = Proto::control_only();
        p.feed(&vec![b'x'; MAX_LINE + 1]);
        assert!(matches!(p.next(), Some(Input::Fail(_))));
        assert!(p.is_done());
    }

    #[test]
    fn eof_drops_a_partial_line() {
        let mut p = Proto::control_only();
        p.feed(b"{\"cmd\":");
        assert_eq!(p.next(), None);
        p.eof();
        assert_eq!(p.next(), None);
        assert_eq!(p.room(), 0);
    }
}
