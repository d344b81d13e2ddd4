//! DNS off the reactor thread.
//!
//! `getaddrinfo` blocks, so a small pool of threads (one pool for every
//! worker) runs it and hands answers back through the asking worker's
//! channel and Waker. Requests carry the
//! session's `(key, id)`; the reactor drops answers whose session is gone.
//!
//! The policy's own lookups (pin rounds: the inspected names, which every
//! allowed connection waits for after a start or reload) have a thread of
//! their own: behind clients' lookups of names whose nameserver never
//! answers, they would make every other client wait out its connect timeout.

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
    /// The reactor, keeping the addresses of inspected names fresh; the
    /// round tells answers for a policy no longer in force.
    Pin { round: u64 },
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

/// Where an answer goes: the asking worker's channel, and its waker.
struct Replier {
    answers: Sender<Answer>,
    waker: Arc<mio::Waker>,
}

/// A job on its way to the pool, with where its answer goes.
type Queued = (Job, Arc<Replier>);

/// The resolver threads, shared by every worker of a proxy.
pub(crate) struct ResolverPool {
    jobs: Sender<Queued>,
    /// The pin lane: one thread, for [`Asker::Pin`] jobs only.
    pins: Sender<Queued>,
    remote: Arc<Remote>,
}

impl ResolverPool {
    /// Starts `threads` resolver threads for sessions and one for pin
    /// rounds; they end when every [`Resolver`] made from this pool (and
    /// the pool) is gone.
    pub(crate) fn new(threads: usize, remote: Arc<Remote>) -> io::Result<Self> {
        let spawn = |name: String, rx: &Arc<Mutex<Receiver<Queued>>>| {
            let (rx, remote) = (Arc::clone(rx), Arc::clone(&remote));
            std::thread::Builder::new()
                .name(name)
                .spawn(move || work(&rx, &remote))
                .map(drop)
        };
        let (jobs, rx) = mpsc::channel::<Queued>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..threads.max(1) {
            spawn(format!("portcullis-dns-{i}"), &rx)?;
        }
        let (pins, rx) = mpsc::channel::<Queued>();
        spawn("portcullis-dns-pins".into(), &Arc::new(Mutex::new(rx)))?;
        Ok(ResolverPool {
            jobs,
            pins,
            remote: Arc::clone(&remote),
        })
    }

    /// A worker's way into the pool: its answers come back on `answers`,
    /// and `waker` wakes it.
    pub(crate) fn resolver(&self, answers: Sender<Answer>, waker: Arc<mio::Waker>) -> Resolver {
        Resolver {
            jobs: self.jobs.clone(),
            pins: self.pins.clone(),
            replier: Arc::new(Replier { answers, waker }),
            remote: Arc::clone(&self.remote),
        }
    }
}

/// One worker's handle on the resolver pool.
pub(crate) struct Resolver {
    jobs: Sender<Queued>,
    pins: Sender<Queued>,
    replier: Arc<Replier>,
    /// The counters: the queue depth gauge.
    remote: Arc<Remote>,
}

impl Resolver {
    pub(crate) fn resolve(&self, job: Job) {
        // Fails only if every worker died; the session's connect timer still
        // bounds it, so there is nothing more to do here.
        // Counted before it is sent, so a worker never takes it off an empty gauge.
        self.remote.stats.resolve_queued();
        let lane = match job.asker {
            Asker::Session { .. } => &self.jobs,
            Asker::Pin { .. } => &self.pins,
        };
        if lane.send((job, Arc::clone(&self.replier))).is_err() {
            self.remote.stats.resolve_started();
        }
    }
}

fn work(rx: &Mutex<Receiver<Queued>>, remote: &Remote) {
    loop {
        // The lock is held only while waiting for the next job.
        let job = match rx.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => return,
        };
        let Ok((job, to)) = job else { return };
        remote.stats.resolve_started();
        let result = lookup(&job.host);
        let answer = Answer {
            asker: job.asker,
            host: job.host,
            result,
        };
        // A worker that has exited takes no answers; the others still may.
        if to.answers.send(answer).is_ok() {
            let _ = to.waker.wake();
        }
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
