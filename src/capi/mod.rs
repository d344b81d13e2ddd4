//! The C ABI: `include/portcullis.h`, generated from
//! this module by cbindgen (the doc comments become the header's comments;
//! a test fails when the checked-in header is stale).
//!
//! A thin layer over [`crate::api`]: each entry point checks its pointers,
//! converts strings, calls the Rust API and turns its error into a
//! [`PortcullisStatus`] with a message for [`portcullis_last_error`]. No
//! panic crosses the boundary: every entry point runs inside
//! `catch_unwind`.
//!
//! The crate stays an `rlib` (so no ordinary build links C libraries); the
//! C libraries are built on demand with `cargo rustc --release --lib
//! --crate-type cdylib --crate-type staticlib` (see docs/embedding-c.md).

mod error;
mod events;

use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::{Mutex, MutexGuard};

use error::{guard, Error};
pub use error::{portcullis_last_error, PortcullisStatus};
use events::Hub;
pub use events::PortcullisEventCallback;

use crate::api::{Proxy, ProxyHandle, SpawnedProxy};
use crate::config::{parse_listen_addr, Config, ListenerProtocol};
use crate::control::ControlError;
use crate::policy::{parse_cli_rule, Action, Policy};

/// A running proxy: its reactor runs on a thread of its own
/// (`portcullis-reactor`).
///
/// Made by `portcullis_start`, `portcullis_start_toml` or
/// `portcullis_start_file`; owned by the caller, who frees it with
/// `portcullis_free` exactly once. Every other function may be called on
/// it from any thread, concurrently.
pub struct PortcullisProxy {
    handle: ProxyHandle,
    /// The reactor thread until `portcullis_stop` joins it.
    running: Mutex<Option<SpawnedProxy>>,
    events: std::sync::Arc<Hub>,
}

impl PortcullisProxy {
    fn running(&self) -> MutexGuard<'_, Option<SpawnedProxy>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stops the reactor (at once, or draining for `timeouts.drain`), waits
    /// for it, then delivers the queued events and ends the events thread.
    fn stop(&self, graceful: bool) -> Result<(), Error> {
        // Asked through the handle, without the lock: an immediate stop
        // can cut short a graceful one under way.
        if graceful {
            self.handle.shutdown();
        } else {
            self.handle.shutdown_now();
        }
        // The lock is held until the reactor has exited: a concurrent stop
        // waits for it instead of returning while the proxy drains (its
        // caller may free the proxy next). The reactor never waits for the
        // events thread, so a callback calling stop cannot deadlock here.
        let mut running = self.running();
        let result = match running.take() {
            Some(p) => p.join(),
            None => Ok(()),
        };
        drop(running);
        self.events.close();
        result.map_err(|e| Error::new(PortcullisStatus::Io, format!("the proxy failed: {e}")))
    }
}

/// Borrows a C string as UTF-8; `what` names the argument in the error.
///
/// # Safety
/// `s` is NULL or a NUL-terminated string valid for the call.
unsafe fn text<'a>(s: *const c_char, what: &str) -> Result<&'a str, Error> {
    if s.is_null() {
        return Err(Error::invalid(format!("{what} is NULL")));
    }
    unsafe { CStr::from_ptr(s) }
        .to_str()
        .map_err(|_| Error::invalid(format!("{what} is not UTF-8")))
}

/// # Safety
/// `p` is NULL or a pointer from a `portcullis_start*` function not yet freed.
unsafe fn proxy<'a>(p: *const PortcullisProxy) -> Result<&'a PortcullisProxy, Error> {
    unsafe { p.as_ref() }.ok_or_else(|| Error::invalid("proxy is NULL"))
}

/// Hands a string to the caller (who frees it with `portcullis_string_free`).
///
/// # Safety
/// `out` is a valid pointer to write to (checked non-NULL by the caller).
unsafe fn give(out: *mut *mut c_char, s: String) {
    let s = CString::new(s).unwrap_or_default();
    unsafe { *out = s.into_raw() };
}

fn control_error(e: ControlError) -> Error {
    let status = match e {
        ControlError::NotRunning => PortcullisStatus::NotRunning,
        _ => PortcullisStatus::Refused,
    };
    Error::new(status, e.to_string())
}

/// Binds, spawns and hands the proxy to the caller.
///
/// # Safety
/// `out` is non-NULL and valid to write to.
unsafe fn start(config: Config, out: *mut *mut PortcullisProxy) -> Result<(), Error> {
    let io =
        |what: &str, e: std::io::Error| Error::new(PortcullisStatus::Io, format!("{what}: {e}"));
    let events = std::sync::Arc::new(Hub::new());
    let hub = std::sync::Arc::clone(&events);
    let proxy = Proxy::builder()
        .config(config)
        .on_event(move |e| hub.offer(e))
        .build()
        .map_err(|e| io("cannot start", e))?;
    let spawned = proxy
        .spawn()
        .map_err(|e| io("cannot start the reactor thread", e))?;
    let p = PortcullisProxy {
        handle: spawned.handle(),
        running: Mutex::new(Some(spawned)),
        events,
    };
    unsafe { *out = Box::into_raw(Box::new(p)) };
    Ok(())
}

/// Checks `out`, and sets `*out` to NULL so that a failed start leaves no stale pointer.
///
/// # Safety
/// `out` is NULL or valid to write to.
unsafe fn start_out(out: *mut *mut PortcullisProxy) -> Result<(), Error> {
    if out.is_null() {
        return Err(Error::invalid("out is NULL"));
    }
    unsafe { *out = std::ptr::null_mut() };
    Ok(())
}

/// Reads `n` C strings from `list` as `--allow` or `--deny` rules.
///
/// # Safety
/// `list` is NULL (with `n == 0`) or points to `n` valid C strings.
unsafe fn rules(
    action: Action,
    list: *const *const c_char,
    n: usize,
    what: &str,
    into: &mut Vec<crate::policy::RuleConfig>,
) -> Result<(), Error> {
    if n == 0 {
        return Ok(());
    }
    if list.is_null() {
        return Err(Error::invalid(format!(
            "{what} is NULL but its length is {n}"
        )));
    }
    for i in 0..n {
        let spec = unsafe { text(*list.add(i), &format!("{what}[{i}]")) }?;
        let rule = parse_cli_rule(action, spec)
            .map_err(|e| Error::new(PortcullisStatus::Config, format!("{what}[{i}]: {e}")))?;
        into.push(rule);
    }
    Ok(())
}

/// Starts a proxy listening on `listen` (`"127.0.0.1:0"` picks a free
/// port; `"unix:/path"` a Unix socket), speaking HTTP and SOCKS5, with a
/// policy of the given rules (the syntax of the `--allow` and `--deny`
/// flags: `HOST[:PORT|:LO-HI]` or `CIDR[:PORT|:LO-HI]`, e.g.
/// `"api.example.com:443"`, `"127.0.0.1:8080"`). Deny rules win. With no
/// allow rule everything is refused. Everything else is the default
/// configuration.
///
/// Ownership: `listen`, `allow`, `deny` and their strings are only read
/// during the call (the caller keeps them). `allow` (`deny`) may be NULL
/// when `allow_len` (`deny_len`) is 0. On success `*out` is a proxy the
/// caller owns and frees with `portcullis_free`; on failure `*out` is NULL.
///
/// # Safety
/// Every non-NULL pointer is valid as described; `out` is valid to write.
#[no_mangle]
pub unsafe extern "C" fn portcullis_start(
    listen: *const c_char,
    allow: *const *const c_char,
    allow_len: usize,
    deny: *const *const c_char,
    deny_len: usize,
    out: *mut *mut PortcullisProxy,
) -> PortcullisStatus {
    guard(|| unsafe {
        start_out(out)?;
        let listen = text(listen, "listen")?;
        let addr = parse_listen_addr(listen)
            .map_err(|e| Error::new(PortcullisStatus::Config, format!("listen: {e}")))?;
        let mut list = Vec::new();
        rules(Action::Allow, allow, allow_len, "allow", &mut list)?;
        rules(Action::Deny, deny, deny_len, "deny", &mut list)?;
        let policy = Policy::from_rules(&list)
            .map_err(|e| Error::new(PortcullisStatus::Config, e.to_string()))?;
        let mut config = Config::default();
        config.listeners.clear();
        config.listeners.push(crate::config::ListenerConfig::new(
            addr,
            ListenerProtocol::Auto,
        ));
        config.policy = policy;
        start(config, out)
    })
}

/// Starts a proxy from a TOML configuration (the format of
/// `portcullis --config`: listeners, `[[rules]]`, limits, timeouts, ...).
/// A configuration with no `[[rules]]` refuses everything.
///
/// Ownership: `toml` is only read during the call. On success `*out` is a
/// proxy the caller owns and frees with `portcullis_free`; on failure
/// `*out` is NULL.
///
/// # Safety
/// `toml` is a NUL-terminated string; `out` is valid to write.
#[no_mangle]
pub unsafe extern "C" fn portcullis_start_toml(
    toml: *const c_char,
    out: *mut *mut PortcullisProxy,
) -> PortcullisStatus {
    guard(|| unsafe {
        start_out(out)?;
        let config = Config::from_toml_str(text(toml, "toml")?)
            .map_err(|e| Error::new(PortcullisStatus::Config, e.to_string()))?;
        start(config, out)
    })
}

/// Starts a proxy from a TOML configuration file (as `portcullis --config
/// PATH`; relative paths in it are taken from the file's directory).
///
/// Ownership: `path` is only read during the call. On success `*out` is a
/// proxy the caller owns and frees with `portcullis_free`; on failure
/// `*out` is NULL.
///
/// # Safety
/// `path` is a NUL-terminated string; `out` is valid to write.
#[no_mangle]
pub unsafe extern "C" fn portcullis_start_file(
    path: *const c_char,
    out: *mut *mut PortcullisProxy,
) -> PortcullisStatus {
    guard(|| unsafe {
        start_out(out)?;
        let config = Config::load(text(path, "path")?)
            .map_err(|e| Error::new(PortcullisStatus::Config, e.to_string()))?;
        start(config, out)
    })
}

/// The bound address of listener `index` (0 is the first, in configuration
/// order), its port resolved: `"127.0.0.1:40123"`, `"[::1]:8080"`, or
/// `"unix:/path"`. `PORTCULLIS_STATUS_INVALID_ARGUMENT` past the last one.
///
/// Ownership: on success `*out` is a new string the caller owns and frees
/// with `portcullis_string_free`; on failure `*out` is NULL.
///
/// # Safety
/// `proxy` is a live proxy; `out` is valid to write.
#[no_mangle]
pub unsafe extern "C" fn portcullis_local_addr(
    proxy: *const PortcullisProxy,
    index: usize,
    out: *mut *mut c_char,
) -> PortcullisStatus {
    guard(|| unsafe {
        if out.is_null() {
            return Err(Error::invalid("out is NULL"));
        }
        *out = std::ptr::null_mut();
        let addrs = self::proxy(proxy)?.handle.local_addrs();
        let addr = addrs.get(index).ok_or_else(|| {
            Error::invalid(format!(
                "no listener {index}: the proxy has {} (0 is the first)",
                addrs.len()
            ))
        })?;
        give(out, addr.to_string());
        Ok(())
    })
}

/// The counters as one JSON object, as the admin endpoint's `GET /stats`
/// answers (`accepted`, `allowed`, `denied`, `open`, `closed`, `bytes_up`,
/// `bytes_down`, `by_rule`, `workers`, ...), plus `events_dropped`: events
/// the subscriber's callback fell too far behind to receive.
///
/// Ownership: on success `*out` is a new string the caller owns and frees
/// with `portcullis_string_free`; on failure `*out` is NULL.
///
/// # Safety
/// `proxy` is a live proxy; `out` is valid to write.
#[no_mangle]
pub unsafe extern "C" fn portcullis_stats_json(
    proxy: *const PortcullisProxy,
    out: *mut *mut c_char,
) -> PortcullisStatus {
    guard(|| unsafe {
        if out.is_null() {
            return Err(Error::invalid("out is NULL"));
        }
        *out = std::ptr::null_mut();
        let p = self::proxy(proxy)?;
        let h = &p.handle;
        let mut v =
            crate::stats::json::stats_value(&h.stats(), &h.rule_stats(), &h.worker_stats(), None);
        if let Some(o) = v.as_object_mut() {
            o.insert("events_dropped".into(), p.events.dropped().into());
        }
        give(out, v.to_string());
        Ok(())
    })
}

/// Replaces the policy with a TOML policy document (its `[[rules]]`, and
/// the top-level `mode = "audit"` and `default = true`; other keys are
/// ignored, so a whole configuration file works). Returns once the new
/// policy is in force: a connection made afterwards gets it; open tunnels
/// it no longer allows are closed (reason `policy-reload`). On an error
/// nothing changes.
///
/// Ownership: `policy_toml` is only read during the call.
///
/// # Safety
/// `proxy` is a live proxy; `policy_toml` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn portcullis_replace_policy(
    proxy: *const PortcullisProxy,
    policy_toml: *const c_char,
) -> PortcullisStatus {
    guard(|| unsafe {
        let p = self::proxy(proxy)?;
        let policy = Policy::parse_toml(text(policy_toml, "policy_toml")?)
            .map_err(|e| Error::new(PortcullisStatus::Config, e.to_string()))?;
        p.handle.replace_policy(policy).map_err(control_error)
    })
}

/// Subscribes `callback` to the proxy's events: one call per session (at
/// its close) and per inspected HTTP request, with the event as JSON. It
/// replaces any earlier callback; NULL unsubscribes. When this returns, the
/// previous callback is not running and will not be called again (unless
/// this is called from inside it).
///
/// Thread: the callback runs on a thread the proxy starts for it, named
/// `portcullis-evt` (one per proxy, started by the first subscription),
/// one event at a time in the order they happened; never on the reactor,
/// and with no portcullis lock held: it may call any `portcullis_`
/// function on this proxy (`portcullis_stats_json`,
/// `portcullis_replace_policy`, `portcullis_stop`...) except
/// `portcullis_free`. A slow callback does not slow the proxy: beyond 4096
/// waiting events the newest are dropped and counted (`events_dropped` in
/// `portcullis_stats_json`). Events only flow while subscribed.
///
/// Ownership: `user_data` stays the caller's; portcullis only passes it to
/// `callback`, on the events thread, until the callback is replaced or the
/// proxy is stopped or freed.
///
/// # Safety
/// `proxy` is a live proxy; `callback` is NULL or a function safe to call
/// from another thread with `user_data`.
#[no_mangle]
pub unsafe extern "C" fn portcullis_subscribe(
    proxy: *const PortcullisProxy,
    callback: PortcullisEventCallback,
    user_data: *mut c_void,
) -> PortcullisStatus {
    guard(|| unsafe {
        let p = self::proxy(proxy)?;
        p.events.subscribe(callback, user_data).map_err(|e| {
            Error::new(
                PortcullisStatus::Io,
                format!("cannot start the events thread: {e}"),
            )
        })
    })
}

/// Stops the proxy and waits for it: with `graceful` non-zero, listeners
/// close at once and open sessions may finish within `timeouts.drain`;
/// with 0 every session is closed now. Then the events still queued are
/// delivered, and the events thread ends. Stopping a stopped proxy
/// returns `PORTCULLIS_STATUS_OK`. Called from two threads, both return
/// once the proxy has stopped; an immediate stop cuts a graceful one
/// short. The proxy must still be freed.
///
/// # Safety
/// `proxy` is a live proxy.
#[no_mangle]
pub unsafe extern "C" fn portcullis_stop(
    proxy: *const PortcullisProxy,
    graceful: i32,
) -> PortcullisStatus {
    guard(|| unsafe { self::proxy(proxy)?.stop(graceful != 0) })
}

/// Stops the proxy at once if it is running (as `portcullis_stop(proxy,
/// 0)`) and frees it. NULL is ignored. After this `proxy` is invalid; do
/// not call it from the event callback.
///
/// # Safety
/// `proxy` is NULL or a live proxy, not used again after this call.
#[no_mangle]
pub unsafe extern "C" fn portcullis_free(proxy: *mut PortcullisProxy) {
    let _ = guard(|| {
        if !proxy.is_null() {
            let p = unsafe { Box::from_raw(proxy) };
            p.stop(false)?;
        }
        Ok(())
    });
}

/// Frees a string portcullis handed out (`portcullis_local_addr`,
/// `portcullis_stats_json`). NULL is ignored.
///
/// # Safety
/// `s` is NULL or a string from portcullis not yet freed.
#[no_mangle]
pub unsafe extern "C" fn portcullis_string_free(s: *mut c_char) {
    let _ = guard(|| {
        if !s.is_null() {
            drop(unsafe { CString::from_raw(s) });
        }
        Ok(())
    });
}

/// The library's version (`"0.1.0"`).
///
/// Ownership: a static string; do not free it.
#[no_mangle]
pub extern "C" fn portcullis_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}
