//! Fresh temporary directories, removed on drop.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A fresh directory under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "portcullis-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("create temp dir");
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_are_fresh_distinct_and_removed_on_drop() {
        let a = TempDir::new("self-test");
        let b = TempDir::new("self-test");
        assert_ne!(a.path(), b.path());
        std::fs::write(a.path().join("f"), "x").unwrap();
        let p = a.path().to_path_buf();
        assert!(p.join("f").exists());
        drop(a);
        assert!(!p.exists());
        assert!(b.path().is_dir());
    }
}
