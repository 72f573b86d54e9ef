//! A minimal self-removing temporary directory (the crate has no `tempfile`
//! dependency and tests must not add one).

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// Set this variable to keep every test directory for post-mortem inspection.
const KEEP_ENV: &str = "SCEAU_IT_KEEP";

pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// Creates a fresh, private (0700) directory. The name carries the pid and a
    /// per-process counter, so parallel tests and parallel test runs never share one.
    /// It is kept short because a unix socket path must fit in 108 bytes.
    pub fn new(label: &str) -> TempDir {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let label: String = label.chars().take(24).collect();
        let path =
            std::env::temp_dir().join(format!("sceau-it-{}-{n}-{label}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
        TempDir { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Creates (if needed) and returns a subdirectory, e.g. one swtpm state dir each.
    pub fn subdir(&self, name: &str) -> PathBuf {
        let dir = self.path.join(name);
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        dir
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::env::var_os(KEEP_ENV).is_some() {
            eprintln!("keeping test directory {}", self.path.display());
            return;
        }
        let _ = std::fs::remove_dir_all(&self.path);
    }
}
