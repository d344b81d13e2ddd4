//! Loopback upstream servers for the proxy to dial: echo, sink, source, a
//! tiny HTTP origin, a keep-alive one answering with the request line, and
//! a listener that must never be dialled.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::thread;

use super::http_client::read_until_blank_line;
use super::payload::{hash_to_eof, write_stream, Hash};
use super::wait::PROMPTLY;

/// A loopback TCP server: one thread accepting, one thread per connection.
pub struct Server {
    pub addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
}

impl Server {
    /// Starts a server on 127.0.0.1:0 running `handler` for every connection.
    pub fn start<F>(handler: F) -> Server
    where
        F: Fn(TcpStream) + Send + Sync + 'static,
    {
        Server::start_on("127.0.0.1:0".parse().unwrap(), handler)
    }

    /// Like [`Server::start`], on `addr` (another loopback address, the host's own address).
    pub fn start_on<F>(addr: SocketAddr, handler: F) -> Server
    where
        F: Fn(TcpStream) + Send + Sync + 'static,
    {
        let listener = TcpListener::bind(addr).expect("bind upstream");
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        let handler = Arc::new(handler);
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                count.fetch_add(1, Ordering::SeqCst);
                let h = handler.clone();
                thread::spawn(move || h(stream));
            }
        });
        Server { addr, accepted }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `IP:PORT` (`127.0.0.1:PORT` for [`Server::start`]), as a CONNECT target.
    pub fn target(&self) -> String {
        self.addr.to_string()
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

/// Echoes every byte back until EOF, then closes.
pub fn echo_server() -> Server {
    Server::start(|mut s| {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if s.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = s.shutdown(Shutdown::Write);
    })
}

/// A listener that must accept nothing: use `accepted()` to check.
pub fn must_not_accept() -> Server {
    Server::start(|_| {})
}

/// Reads every connection to EOF and reports `(count, sha256)` on the channel.
pub fn sink_server() -> (Server, Receiver<io::Result<(u64, Hash)>>) {
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    let server = Server::start(move |mut s| {
        let r = hash_to_eof(&mut s);
        let _ = tx.lock().unwrap().send(r);
    });
    (server, rx)
}

/// Writes `len` bytes of the stream for `seed` to every connection, then closes.
pub fn source_server(seed: u64, len: u64) -> Server {
    Server::start(move |mut s| {
        let _ = write_stream(&mut s, seed, len, 64 * 1024, 64 * 1024);
        let _ = s.shutdown(Shutdown::Write);
    })
}

/// A tiny HTTP/1.1 origin: answers every request with 200 and `body`, then closes.
pub fn http_server(body: &'static str) -> Server {
    http_server_on("127.0.0.1:0".parse().unwrap(), body)
}

/// [`http_server`] on `addr`.
pub fn http_server_on(addr: SocketAddr, body: &'static str) -> Server {
    Server::start_on(addr, move |mut s| {
        let _ = read_until_blank_line(&mut s);
        let resp = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
            body.len(),
            body
        );
        let _ = s.write_all(resp.as_bytes());
        let _ = s.shutdown(Shutdown::Write);
        // Drain until the client closes, so our close never resets unread bytes.
        let _ = s.set_read_timeout(Some(PROMPTLY));
        let mut sink = [0u8; 1024];
        while matches!(s.read(&mut sink), Ok(n) if n > 0) {}
    })
}

/// A keep-alive HTTP/1.1 origin that answers every request with 200 and a
/// body of its request line and `\n` (request bodies are not read).
pub fn request_line_server() -> Server {
    request_line_server_on("127.0.0.1:0".parse().unwrap())
}

/// [`request_line_server`] on `addr`.
pub fn request_line_server_on(addr: SocketAddr) -> Server {
    Server::start_on(addr, |mut s| loop {
        let Ok(head) = read_until_blank_line(&mut s) else {
            return;
        };
        if head.is_empty() {
            return;
        }
        let text = String::from_utf8_lossy(&head);
        let body = format!("{}\n", text.lines().next().unwrap_or_default());
        let resp = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        if s.write_all(resp.as_bytes()).is_err() {
            return;
        }
    })
}
