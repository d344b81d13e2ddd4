//! Status codes, the calling thread's last error, and the guard every entry
//! point runs its body in: no panic unwinds into C.

use std::cell::RefCell;
use std::ffi::{c_char, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

/// What a `portcullis_` function returned. Every value but
/// `PORTCULLIS_STATUS_OK` comes with a message: call `portcullis_last_error`
/// on the same thread.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortcullisStatus {
    /// Success.
    Ok = 0,
    /// A required pointer was NULL, a string was not UTF-8, or an index was
    /// out of range.
    InvalidArgument = 1,
    /// The configuration, the policy or a rule did not parse or validate;
    /// the message names the key (or the rule) and the fix.
    Config = 2,
    /// The operating system refused: binding a listener, reading the
    /// configuration file, starting a thread.
    Io = 3,
    /// The proxy has stopped (`portcullis_stop`), or its reactor exited.
    NotRunning = 4,
    /// The proxy refused the request and changed nothing; the message says why.
    Refused = 5,
    /// A bug in portcullis: it panicked. The message has the panic's text;
    /// please report it. The proxy may be unusable, but freeing it is safe.
    Panic = 6,
}

/// An error to hand back across the boundary: a status and its message.
#[derive(Debug)]
pub(crate) struct Error {
    pub(crate) status: PortcullisStatus,
    pub(crate) message: String,
}

impl Error {
    pub(crate) fn new(status: PortcullisStatus, message: impl Into<String>) -> Error {
        Error {
            status,
            message: message.into(),
        }
    }
    pub(crate) fn invalid(message: impl Into<String>) -> Error {
        Error::new(PortcullisStatus::InvalidArgument, message)
    }
}

thread_local! {
    static LAST_ERROR: RefCell<Option<CString>> = const { RefCell::new(None) };
}

fn set_last_error(message: &str) {
    // A NUL inside the message would cut it short in C: show it instead.
    let text = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = Some(text));
}

/// Runs an entry point's body: clears the thread's last error, turns an
/// `Err` into its status (the message kept for `portcullis_last_error`),
/// and a panic into `PORTCULLIS_STATUS_PANIC`.
pub(crate) fn guard(body: impl FnOnce() -> Result<(), Error>) -> PortcullisStatus {
    LAST_ERROR.with(|e| *e.borrow_mut() = None);
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => PortcullisStatus::Ok,
        Ok(Err(e)) => {
            set_last_error(&e.message);
            e.status
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(no message)".into());
            set_last_error(&format!(
                "portcullis panicked (a bug; please report it): {what}"
            ));
            PortcullisStatus::Panic
        }
    }
}

/// The message of the last failed `portcullis_` call on this thread, or
/// NULL if the last call succeeded (every call clears it first).
///
/// Ownership: the string belongs to portcullis and stays valid until the
/// next `portcullis_` call on this thread; copy it to keep it. Do not free it.
#[no_mangle]
pub extern "C" fn portcullis_last_error() -> *const c_char {
    // Reading it must not clear it, nor unwind.
    catch_unwind(|| LAST_ERROR.with(|e| e.borrow().as_ref().map_or(ptr::null(), |s| s.as_ptr())))
        .unwrap_or(ptr::null())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn last() -> Option<String> {
        let p = portcullis_last_error();
        (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_str().unwrap().to_owned())
    }

    #[test]
    fn errors_and_panics_become_statuses_with_messages() {
        assert_eq!(guard(|| Ok(())), PortcullisStatus::Ok);
        assert_eq!(last(), None);
        let s = guard(|| Err(Error::new(PortcullisStatus::Config, "bad\0key")));
        assert_eq!(s, PortcullisStatus::Config);
        assert_eq!(last().as_deref(), Some("bad\\0key"));
        let s = guard(|| panic!("boom {}", 7));
        assert_eq!(s, PortcullisStatus::Panic);
        assert!(last().unwrap().ends_with("boom 7"), "{:?}", last());
        // The next call clears it.
        assert_eq!(guard(|| Ok(())), PortcullisStatus::Ok);
        assert_eq!(last(), None);
    }
}
