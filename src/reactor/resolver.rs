//! DNS off the reactor thread.
//!
//! `getaddrinfo` blocks, so a small pool of threads runs it and hands answers
//! back through a channel and the reactor's Waker. Requests carry the
//! session's `(key, id)`; the reactor drops answers whose session is gone.

use std::io;
use std::net::{IpAddr, ToSocketAddrs};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};

use super::Remote;

/// Who asked for a resolution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Asker {
    /// A session, by slot and id (a stale answer is dropped).
    Session { key: usize, id: u64 },
    /// The reactor, keeping the addresses of inspected names fresh.
    Pin,
}

/// A name to resolve.
pub(crate) struct Job {
    pub(crate) asker: Asker,
    pub(crate) host: String,
}

/// The answer, addresses in resolver order, de-duplicated.
pub(crate) struct Answer {
    pub(crate) asker: Asker,
    pub(crate) host: String,
    pub(crate) result: io::Result<Vec<IpAddr>>,
}

pub(crate) struct Resolver {
    jobs: Sender<Job>,
    /// The counters: the queue depth gauge.
    remote: Arc<Remote>,
}

impl Resolver {
    pub(crate) fn new(
        threads: usize,
        answers: Sender<Answer>,
        waker: Arc<mio::Waker>,
        remote: Arc<Remote>,
    ) -> io::Result<Self> {
        let (jobs, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..threads.max(1) {
            let rx = Arc::clone(&rx);
            let answers = answers.clone();
            let waker = Arc::clone(&waker);
            let remote = Arc::clone(&remote);
            std::thread::Builder::new()
                .name(format!("portcullis-dns-{i}"))
                .spawn(move || work(&rx, &answers, &waker, &remote))?;
        }
        Ok(Resolver { jobs, remote })
    }

    pub(crate) fn resolve(&self, job: Job) {
        // Fails only if every worker died; the session's connect timer still
        // bounds it, so there is nothing more to do here.
        // Counted before it is sent, so a worker never takes it off an empty gauge.
        self.remote.stats.resolve_queued();
        if self.jobs.send(job).is_err() {
            self.remote.stats.resolve_started();
        }
    }
}

fn work(rx: &Mutex<Receiver<Job>>, answers: &Sender<Answer>, waker: &mio::Waker, remote: &Remote) {
    loop {
        // The lock is held only while waiting for the next job.
        let job = match rx.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => return,
        };
        let Ok(job) = job else { return };
        remote.stats.resolve_started();
        let result = lookup(&job.host);
        if answers
            .send(Answer {
                asker: job.asker,
                host: job.host,
                result,
            })
            .is_err()
        {
            return;
        }
        let _ = waker.wake();
    }
}

fn lookup(host: &str) -> io::Result<Vec<IpAddr>> {
    let mut out: Vec<IpAddr> = Vec::new();
    for sa in (host, 0).to_socket_addrs()? {
        let ip = sa.ip();
        if !out.contains(&ip) {
            out.push(ip);
        }
    }
    if out.is_empty() {
        return Err(io::Error::new(io::ErrorKind::NotFound, "no addresses"));
    }
    Ok(out)
}
