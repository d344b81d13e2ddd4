//! Driving an established tunnel: reading until the peer closes, echo round
//! trips, and a [`BackgroundTunnel`] that keeps relaying verified bytes.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use super::payload::{DataGen, Verifier};
use super::wait::{wait_until, PROMPTLY};

/// Reads until EOF or a reset; returns what was read. Errors other than a
/// reset (including a read timeout) are returned.
pub fn read_until_closed(s: &mut impl Read) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Ok(out),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted
                ) =>
            {
                return Ok(out)
            }
            Err(e) => return Err(e),
        }
    }
}

/// Asserts the peer closes `s` within [`PROMPTLY`]; returns what it sent first.
#[track_caller]
pub fn expect_closed(s: &mut TcpStream, what: &str) -> Vec<u8> {
    s.set_read_timeout(Some(PROMPTLY)).unwrap();
    match read_until_closed(s) {
        Ok(v) => v,
        Err(e) => panic!("{what}: expected the proxy to close the connection, got {e}"),
    }
}

/// Writes `data` and reads the same number of bytes back; returns them.
pub fn echo_roundtrip(s: &mut (impl Read + Write), data: &[u8]) -> io::Result<Vec<u8>> {
    s.write_all(data)?;
    let mut back = vec![0u8; data.len()];
    s.read_exact(&mut back)?;
    Ok(back)
}

/// Asserts one echo round trip through `s` returns `data` intact.
#[track_caller]
pub fn assert_echo(s: &mut (impl Read + Write), data: &[u8]) {
    let back = echo_roundtrip(s, data).expect("echo round trip");
    assert!(back == data, "echo returned different bytes");
}

/// A tunnel that keeps relaying in the background: a thread writes chunks of
/// the generator into an echo tunnel, reads them back and checks every byte.
pub struct BackgroundTunnel {
    stop: Arc<AtomicBool>,
    verified: Arc<AtomicU64>,
    error: Arc<Mutex<Option<String>>>,
    thread: Option<JoinHandle<()>>,
}

impl BackgroundTunnel {
    /// Starts pumping through an already established tunnel to an echo server.
    pub fn start(mut s: TcpStream, seed: u64) -> BackgroundTunnel {
        let stop = Arc::new(AtomicBool::new(false));
        let verified = Arc::new(AtomicU64::new(0));
        let error = Arc::new(Mutex::new(None));
        let (st, ve, er) = (stop.clone(), verified.clone(), error.clone());
        s.set_read_timeout(Some(PROMPTLY)).unwrap();
        let thread = thread::spawn(move || {
            let mut gen = DataGen::new(seed);
            let mut sizes = DataGen::new(seed ^ 0x5eed);
            let mut verifier = Verifier::new(seed);
            let mut back = vec![0u8; 64 * 1024];
            while !st.load(Ordering::SeqCst) {
                let n = sizes.range(1, 64 * 1024);
                let chunk = gen.bytes(n);
                let r = s
                    .write_all(&chunk)
                    .and_then(|_| s.read_exact(&mut back[..n]));
                if let Err(e) = r {
                    *er.lock().unwrap() = Some(format!(
                        "background tunnel failed after {} bytes: {e}",
                        verifier.offset
                    ));
                    return;
                }
                verifier.check(&back[..n]);
                if let Some(off) = verifier.first_mismatch {
                    *er.lock().unwrap() =
                        Some(format!("background tunnel corrupted at offset {off}"));
                    return;
                }
                ve.store(verifier.offset, Ordering::SeqCst);
                thread::sleep(Duration::from_millis(1));
            }
        });
        BackgroundTunnel {
            stop,
            verified,
            error,
            thread: Some(thread),
        }
    }

    /// Asserts no error so far and that the tunnel is still making progress.
    #[track_caller]
    pub fn check(&self, after: &str) {
        let before = self.verified.load(Ordering::SeqCst);
        let ok = wait_until(PROMPTLY, || {
            self.error.lock().unwrap().is_some() || self.verified.load(Ordering::SeqCst) > before
        });
        if let Some(e) = self.error.lock().unwrap().as_ref() {
            panic!("after {after}: {e}");
        }
        assert!(ok, "after {after}: background tunnel made no progress");
    }

    /// Stops the pump and asserts every byte was intact; returns bytes verified.
    #[track_caller]
    pub fn finish(mut self) -> u64 {
        self.check("the last case");
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().expect("background tunnel thread");
        }
        if let Some(e) = self.error.lock().unwrap().as_ref() {
            panic!("{e}");
        }
        self.verified.load(Ordering::SeqCst)
    }
}

impl Drop for BackgroundTunnel {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::scripted::{Scripted, Step};

    #[test]
    fn a_reset_counts_as_a_close_and_keeps_what_came_first() {
        for kind in [
            io::ErrorKind::ConnectionReset,
            io::ErrorKind::ConnectionAborted,
        ] {
            let mut r = Scripted::new(vec![
                Step::Data(b"last ".to_vec()),
                Step::Err(io::ErrorKind::Interrupted),
                Step::Data(b"words".to_vec()),
                Step::Err(kind),
                Step::Data(b"never read".to_vec()),
            ]);
            assert_eq!(read_until_closed(&mut r).unwrap(), b"last words");
        }
        assert!(read_until_closed(&mut Scripted::new(vec![]))
            .unwrap()
            .is_empty());
    }

    #[test]
    fn other_errors_are_not_a_close() {
        for kind in [io::ErrorKind::WouldBlock, io::ErrorKind::TimedOut] {
            let mut r = Scripted::new(vec![Step::Data(b"x".to_vec()), Step::Err(kind)]);
            assert_eq!(read_until_closed(&mut r).unwrap_err().kind(), kind);
        }
    }

    #[test]
    fn echo_round_trip_reads_back_as_many_bytes_as_it_wrote() {
        let mut s = Scripted::pieces(b"pingEXTRA", 3);
        assert_eq!(echo_roundtrip(&mut s, b"ping").unwrap(), b"ping");
        assert_eq!(s.written, b"ping");
        assert_eq!(s.unread(), b"EXTRA");
    }

    #[test]
    #[should_panic(expected = "different bytes")]
    fn assert_echo_notices_altered_bytes() {
        assert_echo(&mut Scripted::data(b"pong"), b"ping");
    }
}
