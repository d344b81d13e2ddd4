//! Password verification off the reactor thread.
//!
//! argon2 costs milliseconds by design, so a small pool of threads runs it
//! and hands verdicts back through a channel and the reactor's Waker (as the
//! resolver does). The queue is bounded: when it is full a login is refused
//! at once ([`Verdict::Busy`]) rather than waited for, so a flood of wrong
//! passwords costs the attacker pool slots, never the reactor. One client
//! holds at most [`PER_CLIENT`] verifications at a time, so it cannot fill
//! the queue and lock every other client out. Logins with
//! the same credentials in flight share one verification, and successes are
//! remembered in the [`LoginCache`], so a client opening many tunnels pays
//! argon2 once.

use std::collections::HashMap;
use std::io;
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};

use super::Reactor;
use crate::auth::cache::{Digest, LoginCache};
use crate::auth::{Verdict, Verify};
use crate::client::ClientKey;
use crate::session::Session;

/// Verifier threads.
pub(crate) const THREADS: usize = crate::auth::VERIFIER_THREADS;
/// Verifications waiting for a thread, at most.
pub(crate) const QUEUE: usize = 64;
/// Verifications one client may have queued or running at once: a quarter
/// of the queue, so a client guessing passwords leaves room for the others.
pub(crate) const PER_CLIENT: usize = QUEUE / 4;

/// A session waiting for a verdict, by slot and id (a stale one is dropped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Waiter {
    pub(crate) key: usize,
    pub(crate) id: u64,
}

/// A finished verification: `user` when the password was right.
struct Done {
    digest: Digest,
    user: Option<Arc<str>>,
}

/// The reactor's side of the pool.
pub(crate) struct Verifier {
    jobs: SyncSender<Verify>,
    done: Receiver<Done>,
    /// Logins being verified, by digest: who asked first (charged for
    /// it) and who waits for each.
    in_flight: HashMap<Digest, (ClientKey, Vec<Waiter>)>,
    /// Verifications each client has in flight (absent: none).
    per_client: HashMap<ClientKey, usize>,
    /// At most this many per client.
    client_max: usize,
    /// The queue was found full and has not taken a job since (logged once).
    full: bool,
}

/// What the pool said about one login, for every session that waits for it.
pub(crate) struct Answer {
    pub(crate) waiters: Vec<Waiter>,
    pub(crate) verdict: Verdict,
    /// The login's digest, to remember a success under.
    pub(crate) digest: Digest,
}

impl Verifier {
    /// Starts `threads` verifier threads with a queue of `queue` jobs;
    /// each verdict wakes the reactor through `waker`. With no hashed
    /// users there is nothing to verify: pass 0 and no thread starts.
    pub(crate) fn new(
        threads: usize,
        queue: usize,
        client_max: usize,
        waker: Arc<mio::Waker>,
    ) -> io::Result<Self> {
        // No threads, no queue: a bounded channel allocates its slots up
        // front, memory a proxy without hashed users would never use.
        let (jobs, rx) = mpsc::sync_channel::<Verify>(if threads == 0 { 0 } else { queue });
        let (done_tx, done) = mpsc::channel();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..threads {
            let rx = Arc::clone(&rx);
            let done_tx = done_tx.clone();
            let waker = Arc::clone(&waker);
            std::thread::Builder::new()
                .name(format!("portcullis-auth-{i}"))
                .spawn(move || work(&rx, &done_tx, &waker))?;
        }
        Ok(Verifier {
            jobs,
            done,
            in_flight: HashMap::new(),
            per_client: HashMap::new(),
            client_max: client_max.max(1),
            full: false,
        })
    }

    /// Queues `job` for `waiter` of `client` (`Ok(true)`), or joins the
    /// same login already in flight (`Ok(false)`). Gives the job back when
    /// the queue is full or `client` has its share in flight.
    pub(crate) fn submit(
        &mut self,
        client: ClientKey,
        waiter: Waiter,
        job: Verify,
    ) -> Result<bool, Verify> {
        if let Some((_, waiting)) = self.in_flight.get_mut(&job.digest) {
            waiting.push(waiter);
            return Ok(false);
        }
        let held = self.per_client.get(&client).copied().unwrap_or(0);
        if held >= self.client_max {
            return Err(job);
        }
        let digest = job.digest;
        match self.jobs.try_send(job) {
            Ok(()) => {
                self.full = false;
                self.in_flight.insert(digest, (client, vec![waiter]));
                self.per_client.insert(client, held + 1);
                Ok(true)
            }
            Err(TrySendError::Full(job) | TrySendError::Disconnected(job)) => {
                if !self.full {
                    log::warn!(
                        "login verification queue full ({QUEUE} waiting): refusing new logins until it drains"
                    );
                    self.full = true;
                }
                Err(job)
            }
        }
    }

    /// The next finished verification, if any.
    pub(crate) fn next_answer(&mut self) -> Option<Answer> {
        let done = self.done.try_recv().ok()?;
        let waiters = match self.in_flight.remove(&done.digest) {
            Some((client, waiters)) => {
                if let Some(held) = self.per_client.get_mut(&client) {
                    *held -= 1;
                    if *held == 0 {
                        self.per_client.remove(&client);
                    }
                }
                waiters
            }
            None => Vec::new(),
        };
        Some(Answer {
            waiters,
            verdict: match done.user {
                Some(user) => Verdict::Accepted(user),
                None => Verdict::Rejected,
            },
            digest: done.digest,
        })
    }
}

fn work(rx: &Mutex<Receiver<Verify>>, done: &mpsc::Sender<Done>, waker: &mio::Waker) {
    loop {
        // The lock is held only while waiting for the next job.
        let job = match rx.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => return,
        };
        let Ok(job) = job else { return };
        let user = job.run();
        let digest = job.digest;
        drop(job);
        if done.send(Done { digest, user }).is_err() {
            return;
        }
        let _ = waker.wake();
    }
}

impl Reactor {
    /// Hands a session's login to the pool; a full queue refuses it at once.
    pub(super) fn verify_login(&mut self, key: usize, id: u64, client: ClientKey, job: Verify) {
        match self.verifier.submit(client, Waiter { key, id }, job) {
            Ok(true) => self.env.remote.stats.login_verifying(),
            Ok(false) => {}
            Err(_) => {
                self.env.remote.stats.login_busy();
                self.call(key, |s, ctx| s.on_verified(Verdict::Busy, ctx));
            }
        }
    }

    /// Delivers finished verifications: successes are remembered, then
    /// every session still waiting gets the verdict.
    pub(super) fn deliver_logins(&mut self) {
        while let Some(answer) = self.verifier.next_answer() {
            if let Verdict::Accepted(user) = &answer.verdict {
                self.env.logins.insert(answer.digest, Arc::clone(user));
            }
            for w in answer.waiters {
                let current = self
                    .sessions
                    .get(w.key)
                    .is_some_and(|s| s.session.id() == w.id);
                if current {
                    let verdict = answer.verdict.clone();
                    self.call(w.key, |s: &mut Session, ctx| s.on_verified(verdict, ctx));
                }
            }
        }
    }
}

/// A cache sized for the default, its key drawn now if there are `logins`.
pub(crate) fn login_cache(logins: bool) -> LoginCache {
    let cache = LoginCache::new(crate::auth::cache::CAPACITY);
    if logins {
        cache.with_key()
    } else {
        cache
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{hash_password_with, Check, HashedUser, PhcHash, Users};
    use std::time::{Duration, Instant};

    fn pool(threads: usize, queue: usize) -> (Verifier, mio::Poll) {
        let poll = mio::Poll::new().unwrap();
        let waker = Arc::new(mio::Waker::new(poll.registry(), mio::Token(0)).unwrap());
        (Verifier::new(threads, queue, queue, waker).unwrap(), poll)
    }

    const ME: ClientKey = ClientKey::Uid(0);

    fn job(users: &Users, cache: &LoginCache, user: &str, pw: &str) -> Verify {
        match users.check(user.as_bytes(), pw.as_bytes(), cache) {
            Check::Verify(j) => j,
            other => panic!("{other:?}"),
        }
    }

    /// Users holding just `alice`, password `pw`, hashed with `memory`
    /// KiB and `passes` (one lane): the cost of each check.
    fn alice(memory: u32, passes: u32) -> Users {
        let h = hash_password_with(b"pw", memory, passes, 1).unwrap();
        Users::new(
            None,
            &[HashedUser::new("alice", PhcHash::parse(&h).unwrap())],
        )
        .unwrap()
    }

    fn wait(v: &mut Verifier, poll: &mut mio::Poll) -> Answer {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut events = mio::Events::with_capacity(4);
        loop {
            if let Some(a) = v.next_answer() {
                return a;
            }
            assert!(Instant::now() < deadline, "no answer");
            poll.poll(&mut events, Some(Duration::from_millis(100)))
                .unwrap();
        }
    }

    #[test]
    fn verdicts_come_back_and_same_logins_share_one_job() {
        let users = alice(64, 1);
        let cache = LoginCache::new(4);
        let (mut v, mut poll) = pool(1, 4);
        let a = Waiter { key: 1, id: 10 };
        let b = Waiter { key: 2, id: 11 };
        assert_eq!(
            v.submit(ME, a, job(&users, &cache, "alice", "pw")).ok(),
            Some(true)
        );
        assert_eq!(
            v.submit(ME, b, job(&users, &cache, "alice", "pw")).ok(),
            Some(false)
        );
        let answer = wait(&mut v, &mut poll);
        assert_eq!(answer.verdict, Verdict::Accepted("alice".into()));
        assert_eq!(answer.waiters, [a, b]);
        assert_eq!(answer.digest, cache.digest(b"alice", b"pw"));
        v.submit(ME, a, job(&users, &cache, "alice", "nope"))
            .unwrap();
        let answer = wait(&mut v, &mut poll);
        assert_eq!(answer.verdict, Verdict::Rejected);
        assert_eq!(answer.waiters, [a]);
    }

    #[test]
    fn a_full_queue_gives_the_job_back() {
        // Costly enough that the one thread is still busy when the queue fills.
        let users = alice(8 * 1024, 4);
        let cache = LoginCache::new(4);
        let (mut v, mut poll) = pool(1, 1);
        let mut refused = 0;
        let mut queued = 0;
        for i in 0..8 {
            let w = Waiter {
                key: i,
                id: i as u64,
            };
            match v.submit(ME, w, job(&users, &cache, "alice", &format!("wrong{i}"))) {
                Ok(_) => queued += 1,
                Err(_) => refused += 1,
            }
        }
        // One running and one queued at most could have been taken before
        // the rest found the queue full (never all eight).
        assert!(refused >= 1, "queued {queued}");
        assert!(queued >= 1);
        for _ in 0..queued {
            assert_eq!(wait(&mut v, &mut poll).verdict, Verdict::Rejected);
        }
    }

    #[test]
    fn one_client_holds_at_most_its_share() {
        let users = alice(8 * 1024, 4);
        let cache = LoginCache::new(4);
        let poll = mio::Poll::new().unwrap();
        let waker = Arc::new(mio::Waker::new(poll.registry(), mio::Token(0)).unwrap());
        let (mut v, mut poll) = (Verifier::new(1, 16, 2, waker).unwrap(), poll);
        let w = |i: usize| Waiter {
            key: i,
            id: i as u64,
        };
        let them = ClientKey::Uid(65534);
        assert!(v
            .submit(them, w(0), job(&users, &cache, "alice", "g0"))
            .is_ok());
        assert!(v
            .submit(them, w(1), job(&users, &cache, "alice", "g1"))
            .is_ok());
        // Its third is refused; joining a login in flight costs nothing;
        // another client still gets in.
        assert!(v
            .submit(them, w(2), job(&users, &cache, "alice", "g2"))
            .is_err());
        assert_eq!(
            v.submit(them, w(3), job(&users, &cache, "alice", "g1"))
                .ok(),
            Some(false)
        );
        assert_eq!(
            v.submit(ME, w(4), job(&users, &cache, "alice", "pw")).ok(),
            Some(true)
        );
        // Once one of its verifications is done it may queue another.
        let mut done = 0;
        while v.per_client.get(&them).copied().unwrap_or(0) == 2 {
            wait(&mut v, &mut poll);
            done += 1;
        }
        assert!(done >= 1);
        assert!(v
            .submit(them, w(5), job(&users, &cache, "alice", "g5"))
            .is_ok());
    }
}
