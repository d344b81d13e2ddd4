//! WebSocket (tungstenite) helpers: a server that pushes and hashes binary
//! messages at once, and the push/receive halves a client reuses.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::mpsc::{self, Receiver};
use std::sync::Mutex;
use std::thread;

use sha2::{Digest, Sha256};

use super::payload::{DataGen, Hash};
use super::upstream::Server;

/// Message size limits generous enough for the bulk tests.
pub fn ws_config() -> tungstenite::protocol::WebSocketConfig {
    tungstenite::protocol::WebSocketConfig::default()
        .max_message_size(Some(64 << 20))
        .max_frame_size(Some(64 << 20))
}

/// What the WebSocket server saw: bytes and hash of every binary message received.
#[derive(Debug)]
pub struct WsReport {
    pub received: u64,
    pub received_hash: Hash,
    pub messages: u64,
}

/// A WebSocket server that, on each connection, concurrently pushes
/// `push_len` bytes (stream `push_seed`) in `msg_size` binary messages and
/// hashes every binary message it receives until the client sends a text
/// message `"done"`; then it reports and answers the close handshake.
pub fn ws_server(
    push_seed: u64,
    push_len: u64,
    msg_size: usize,
) -> (Server, Receiver<Result<WsReport, String>>) {
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    let server = Server::start(move |stream| {
        let r = ws_serve(stream, push_seed, push_len, msg_size);
        let _ = tx.lock().unwrap().send(r);
    });
    (server, rx)
}

fn ws_serve(
    stream: TcpStream,
    push_seed: u64,
    push_len: u64,
    msg_size: usize,
) -> Result<WsReport, String> {
    use tungstenite::protocol::{Role, WebSocket};
    let writer_stream = stream.try_clone().map_err(|e| e.to_string())?;
    let mut reader = tungstenite::accept_with_config(stream, Some(ws_config()))
        .map_err(|e| format!("ws accept: {e}"))?;
    let mut writer = WebSocket::from_raw_socket(writer_stream, Role::Server, Some(ws_config()));
    let pusher = thread::spawn(move || ws_push(&mut writer, push_seed, push_len, msg_size));
    let report = ws_receive(&mut reader);
    let pushed = pusher
        .join()
        .map_err(|_| "ws pusher panicked".to_string())?;
    pushed?;
    let report = report?;
    // The client closes; answer the close handshake on the reading half
    // (the writer is finished, so frames cannot interleave). The data is
    // already verified; how the close ends does not matter here.
    while reader.read().is_ok() {}
    Ok(report)
}

/// Sends `len` bytes of stream `seed` as binary messages of `msg_size`, then a text "done".
pub fn ws_push<S: Read + Write>(
    ws: &mut tungstenite::WebSocket<S>,
    seed: u64,
    len: u64,
    msg_size: usize,
) -> Result<(), String> {
    let mut g = DataGen::new(seed);
    let mut left = len;
    while left > 0 {
        let n = left.min(msg_size as u64) as usize;
        let msg = tungstenite::Message::binary(g.bytes(n));
        ws.write(msg).map_err(|e| format!("ws write: {e}"))?;
        left -= n as u64;
    }
    ws.send(tungstenite::Message::text("done"))
        .map_err(|e| format!("ws send done: {e}"))
}

/// Receives binary messages until a text "done", hashing them.
pub fn ws_receive<S: Read + Write>(ws: &mut tungstenite::WebSocket<S>) -> Result<WsReport, String> {
    let mut h = Sha256::new();
    let mut received = 0u64;
    let mut messages = 0u64;
    loop {
        match ws.read().map_err(|e| format!("ws read: {e}"))? {
            tungstenite::Message::Binary(b) => {
                h.update(&b);
                received += b.len() as u64;
                messages += 1;
            }
            tungstenite::Message::Text(t) if t.as_str() == "done" => break,
            other => return Err(format!("unexpected ws message: {other:?}")),
        }
    }
    Ok(WsReport {
        received,
        received_hash: h.finalize().into(),
        messages,
    })
}
