//! What the admin endpoint reports beside the counters: the process's open
//! file descriptors, counted when asked. (The counters as JSON, for
//! `GET /stats` and the control `stats` answer alike, are
//! `crate::stats::json`.)

/// The process's open file descriptors now (Linux: the entries of
/// /proc/self/fd, less the one reading it); `None` elsewhere.
pub(crate) fn open_fds() -> Option<u64> {
    if !cfg!(target_os = "linux") {
        return None;
    }
    let dir = std::fs::read_dir("/proc/self/fd").ok()?;
    Some((dir.count() as u64).saturating_sub(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_os = "linux")]
    fn open_fds_counts_ours() {
        let before = open_fds().unwrap();
        let f = std::fs::File::open("/proc/self/stat").unwrap();
        // Other test threads open files too: at least one more.
        assert!(open_fds().unwrap() >= 1);
        drop(f);
        assert!(before >= 3, "stdin, stdout, stderr at least: {before}");
    }
}
