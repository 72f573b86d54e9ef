//! One module per command of `sceau-recover`; `main.rs` parses and
//! dispatches here. `anyhow` is used from here up only.

pub mod enroll;
pub mod recover;
pub mod recovery_keygen;

use anyhow::Context as _;

/// Creates a file that must not exist yet, with `mode`.
pub(crate) fn write_new(path: &std::path::Path, mode: u32, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .and_then(|mut file| file.write_all(bytes))
        .with_context(|| format!("creating {}", path.display()))
}
