//! A listening socket the embedder bound itself: the public
//! [`StdListener`], adopted by the reactor's listeners. It lives here, below
//! both `api` and `reactor`, so neither has to import the other for it.

use std::io;

/// A listening socket bound by the caller, for [`ProxyBuilder::listener`](crate::ProxyBuilder::listener).
#[derive(Debug)]
pub enum StdListener {
    /// A TCP listener.
    Tcp(std::net::TcpListener),
    /// A Unix-domain stream listener.
    Unix(std::os::unix::net::UnixListener),
}

impl StdListener {
    /// A second handle on the same socket (`dup`).
    pub fn try_clone(&self) -> io::Result<StdListener> {
        Ok(match self {
            StdListener::Tcp(l) => StdListener::Tcp(l.try_clone()?),
            StdListener::Unix(l) => StdListener::Unix(l.try_clone()?),
        })
    }
}

impl From<std::net::TcpListener> for StdListener {
    fn from(l: std::net::TcpListener) -> Self {
        StdListener::Tcp(l)
    }
}

impl From<std::os::unix::net::UnixListener> for StdListener {
    fn from(l: std::os::unix::net::UnixListener) -> Self {
        StdListener::Unix(l)
    }
}
