//! Session and request events for C: the reactor hands each event to a
//! bounded queue (never blocking, never calling C); a thread of the
//! proxy's own, `portcullis-evt`, turns them into JSON and calls the
//! subscriber's callback with no portcullis lock held.

use std::ffi::{c_char, c_void, CString};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{JoinHandle, ThreadId};

use serde_json::{Map, Value};

use crate::events::{Event, Field};

/// Events waiting for a slow callback; beyond this they are dropped (and
/// counted as `events_dropped` in the stats), never queued without bound.
const QUEUE: usize = 4096;

/// The event callback: `user_data` as given to `portcullis_subscribe`, and
/// one event as a JSON object (the fields of the JSON log line: `event` is
/// `"session"` or `"request"`, then `conn`, `client`, `target`, `decision`,
/// `rule`, `reason`, `bytes_up`, `bytes_down`, `close`, ... as they apply).
///
/// It runs on the proxy's `portcullis-evt` thread, never on the reactor
/// and with no portcullis lock held. Ownership: `event_json` belongs to
/// portcullis and is valid only during the call; copy it to keep it.
pub type PortcullisEventCallback =
    Option<unsafe extern "C" fn(user_data: *mut c_void, event_json: *const c_char)>;

/// The subscriber, as the events thread reads it.
struct Subscriber {
    callback: PortcullisEventCallback,
    user_data: *mut c_void,
    /// The events thread is inside the callback.
    busy: bool,
}

// SAFETY: `user_data` is the caller's pointer, only ever handed back to the
// caller's callback; the header tells the caller it is used on the events thread.
unsafe impl Send for Subscriber {}

struct Shared {
    subscriber: Mutex<Subscriber>,
    idle: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Subscriber> {
        // The lock is never held across a callback, so it cannot be poisoned by one.
        self.subscriber.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One proxy's event plumbing.
pub(crate) struct Hub {
    /// Fast path for the reactor: no subscriber, nothing to do.
    subscribed: AtomicBool,
    /// The queue's sending side; `None` before the first subscription and
    /// after the proxy stopped. Held only to hand over an event.
    tx: Mutex<Option<SyncSender<Event>>>,
    /// The proxy stopped: no new events thread.
    closed: AtomicBool,
    dropped: AtomicU64,
    shared: Arc<Shared>,
    thread: Mutex<Option<(ThreadId, JoinHandle<()>)>>,
}

impl Hub {
    pub(crate) fn new() -> Hub {
        Hub {
            subscribed: AtomicBool::new(false),
            tx: Mutex::new(None),
            closed: AtomicBool::new(false),
            dropped: AtomicU64::new(0),
            shared: Arc::new(Shared {
                subscriber: Mutex::new(Subscriber {
                    callback: None,
                    user_data: std::ptr::null_mut(),
                    busy: false,
                }),
                idle: Condvar::new(),
            }),
            thread: Mutex::new(None),
        }
    }

    /// On the reactor: queue `event` for the events thread, or drop and
    /// count it if the queue is full. Never blocks, never calls C.
    pub(crate) fn offer(&self, event: &Event) {
        if !self.subscribed.load(Ordering::Acquire) {
            return;
        }
        let tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(tx) = tx.as_ref() {
            if let Err(TrySendError::Full(_)) = tx.try_send(event.clone()) {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Events dropped because the callback fell behind.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Sets (or, with `None`, removes) the callback; starts the events
    /// thread the first time. Returns once the previous callback is no
    /// longer running (unless called from it).
    pub(crate) fn subscribe(
        &self,
        callback: PortcullisEventCallback,
        user_data: *mut c_void,
    ) -> std::io::Result<()> {
        if callback.is_some() && !self.closed.load(Ordering::Acquire) {
            self.start_thread()?;
        }
        let from_callback = self.on_events_thread();
        let mut s = self.shared.lock();
        s.callback = callback;
        s.user_data = user_data;
        self.subscribed.store(callback.is_some(), Ordering::Release);
        if !from_callback {
            while s.busy {
                s = self.shared.idle.wait(s).unwrap_or_else(|p| p.into_inner());
            }
        }
        Ok(())
    }

    fn start_thread(&self) -> std::io::Result<()> {
        let mut thread = self.thread.lock().unwrap_or_else(|p| p.into_inner());
        if thread.is_some() {
            return Ok(());
        }
        let (tx, rx) = sync_channel(QUEUE);
        let shared = Arc::clone(&self.shared);
        let t = std::thread::Builder::new()
            .name("portcullis-evt".into())
            .spawn(move || deliver(&shared, rx))?;
        *thread = Some((t.thread().id(), t));
        *self.tx.lock().unwrap_or_else(|p| p.into_inner()) = Some(tx);
        Ok(())
    }

    fn on_events_thread(&self) -> bool {
        let thread = self.thread.lock().unwrap_or_else(|p| p.into_inner());
        thread
            .as_ref()
            .is_some_and(|(id, _)| *id == std::thread::current().id())
    }

    /// After the reactor has exited: delivers what is queued, then ends the
    /// events thread and waits for it (unless called from it).
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        // Dropping the only sender ends the thread's loop once it has drained.
        drop(self.tx.lock().unwrap_or_else(|p| p.into_inner()).take());
        let mut thread = self.thread.lock().unwrap_or_else(|p| p.into_inner());
        let mine = thread
            .as_ref()
            .is_some_and(|(id, _)| *id == std::thread::current().id());
        let t = if mine { None } else { thread.take() };
        drop(thread);
        if let Some((_, t)) = t {
            let _ = t.join();
        }
    }
}

/// The events thread: one event at a time, in order, to the subscriber of
/// the moment.
fn deliver(shared: &Shared, rx: Receiver<Event>) {
    while let Ok(event) = rx.recv() {
        let (callback, user_data) = {
            let mut s = shared.lock();
            let Some(cb) = s.callback else { continue };
            s.busy = true;
            (cb, s.user_data)
        };
        let json = CString::new(event_json(&event)).unwrap_or_default();
        // SAFETY: the caller gave this function and its user data to
        // portcullis_subscribe for exactly this call; the string outlives it.
        unsafe { callback(user_data, json.as_ptr()) };
        shared.lock().busy = false;
        shared.idle.notify_all();
    }
}

/// The event as the JSON log line's fields.
pub(crate) fn event_json(event: &Event) -> String {
    let mut map = Map::new();
    let _ = event.for_each_field(|key, field| {
        let v = match field {
            Field::Str(s) => Value::from(s),
            Field::Num(n) => Value::from(n),
            Field::Bool(b) => Value::from(b),
            Field::Ip(ip) => Value::from(ip.to_string()),
        };
        map.insert(key.to_owned(), v);
        Ok::<_, ()>(())
    });
    // serde_json escapes every control character, NUL included.
    Value::Object(map).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::EventKind;

    #[test]
    fn event_json_has_the_log_fields() {
        let mut e = Event::new(EventKind::Session, 3, "127.0.0.1:9");
        e.target = Some("a\0b:80".into());
        e.bytes_up = Some(5);
        e.upgraded = Some(true);
        let v: Value = serde_json::from_str(&event_json(&e)).unwrap();
        assert_eq!(v["event"], "session");
        assert_eq!(v["conn"], 3);
        assert_eq!(v["target"], "a\u{0}b:80");
        assert_eq!(v["bytes_up"], 5);
        assert_eq!(v["upgraded"], true);
        assert!(!event_json(&e).contains('\0'));
    }
}
