//! The server plugin's `plugin_data`:
//!
//! ```hcl
//! ek_hashes_path        = "/etc/spire/sceau/ek-hashes"        # allow list
//! ek_roots_path         = "/etc/spire/sceau/ek-roots.pem"     # manufacturer roots
//! ek_intermediates_path = "/etc/spire/sceau/ek-intermediates.pem"
//! ek_trust              = "either"                            # or "both"
//! quote_pcrs            = [0, 7]                              # optional
//! ```
//!
//! At least one trust source is required. The files are read when SPIRE
//! configures the plugin (at load, and again on reconfiguration), so a
//! changed allow list takes effect on SIGUSR1 with `plugin_data_file`.

use std::collections::HashSet;
use std::path::Path;

use super::x509::TrustStore;
use crate::payload::PCR_COUNT;
use crate::plugin::hcl::Body;
use crate::plugin::{ConfigError, CoreConfig};

const KEYS: [&str; 5] = [
    "ek_hashes_path",
    "ek_roots_path",
    "ek_intermediates_path",
    "ek_trust",
    "quote_pcrs",
];
/// The largest allow list or PEM bundle read.
const MAX_FILE_LEN: u64 = 4 * 1024 * 1024;

/// How the two trust sources combine when both are configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EkTrust {
    /// The EK passes if it is on the allow list or its certificate chains.
    Either,
    /// The EK must be on the allow list and its certificate must chain.
    Both,
}

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub trust_domain: String,
    pub ek_hashes: Option<HashSet<String>>,
    pub trust_store: Option<TrustStore>,
    pub ek_trust: EkTrust,
    /// SHA-256 PCRs to quote, increasing; empty: no quote.
    pub quote_pcrs: Vec<u8>,
}

impl ServerConfig {
    pub fn parse(core: &CoreConfig, hcl: &str) -> Result<Self, ConfigError> {
        let error = |e: crate::plugin::hcl::HclError| ConfigError(e.to_string());
        let body = Body::parse(hcl).map_err(error)?;
        body.check_keys(&KEYS).map_err(error)?;
        if core.trust_domain.is_empty() {
            return Err(ConfigError("SPIRE sent no trust domain".into()));
        }
        let ek_hashes = match body.string("ek_hashes_path").map_err(error)? {
            Some(path) => Some(read_hashes(Path::new(&path))?),
            None => None,
        };
        let roots = body.string("ek_roots_path").map_err(error)?;
        let intermediates = body.string("ek_intermediates_path").map_err(error)?;
        let trust_store = match (roots, intermediates) {
            (Some(roots), intermediates) => {
                let roots_text = read_text(Path::new(&roots), "ek_roots_path")?;
                let intermediates_text = match intermediates {
                    Some(path) => read_text(Path::new(&path), "ek_intermediates_path")?,
                    None => String::new(),
                };
                Some(
                    TrustStore::from_pem(&roots_text, &intermediates_text).map_err(|e| {
                        ConfigError(format!("ek_roots_path or ek_intermediates_path: {e}"))
                    })?,
                )
            }
            (None, Some(_)) => {
                return Err(ConfigError(
                    "ek_intermediates_path is set without ek_roots_path; intermediates are never trusted as roots"
                        .into(),
                ));
            }
            (None, None) => None,
        };
        if ek_hashes.is_none() && trust_store.is_none() {
            return Err(ConfigError(
                "no trust source: set ek_hashes_path (an allow list of EK hashes), ek_roots_path (manufacturer roots), or both"
                    .into(),
            ));
        }
        let ek_trust = match body.string("ek_trust").map_err(error)?.as_deref() {
            None | Some("either") => EkTrust::Either,
            Some("both") => {
                if ek_hashes.is_none() || trust_store.is_none() {
                    return Err(ConfigError(
                        "ek_trust = \"both\" needs both ek_hashes_path and ek_roots_path".into(),
                    ));
                }
                EkTrust::Both
            }
            Some(other) => {
                return Err(ConfigError(format!(
                    "ek_trust is `{other}`; it must be \"either\" or \"both\""
                )));
            }
        };
        let mut quote_pcrs = Vec::new();
        for index in body
            .integers("quote_pcrs")
            .map_err(error)?
            .unwrap_or_default()
        {
            let index = u8::try_from(index)
                .ok()
                .filter(|i| *i < PCR_COUNT)
                .ok_or_else(|| {
                    ConfigError(format!("quote_pcrs: PCR {index} does not exist (0 to 23)"))
                })?;
            quote_pcrs.push(index);
        }
        quote_pcrs.sort_unstable();
        quote_pcrs.dedup();
        Ok(Self {
            trust_domain: core.trust_domain.clone(),
            ek_hashes,
            trust_store,
            ek_trust,
            quote_pcrs,
        })
    }

    /// What Validate reports besides errors.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if let Some(hashes) = &self.ek_hashes {
            notes.push(format!("{} EK hashes on the allow list", hashes.len()));
        }
        if let Some(store) = &self.trust_store {
            notes.push(format!("{} manufacturer roots", store.root_count()));
        }
        if self.quote_pcrs.is_empty() {
            notes.push("no quote is asked (quote_pcrs is empty)".into());
        }
        notes
    }
}

/// O_NONBLOCK, so that opening a FIFO (or a device that blocks in open)
/// returns at once and is refused by type below. The value of Linux's
/// generic ABI (asm-generic/fcntl.h), which the architectures sceau builds
/// for use; the spire crate does not link libc for one constant.
#[cfg(all(
    target_os = "linux",
    any(
        target_arch = "x86_64",
        target_arch = "aarch64",
        target_arch = "x86",
        target_arch = "arm",
        target_arch = "riscv64",
        target_arch = "s390x",
        target_arch = "powerpc64",
    )
))]
const O_NONBLOCK: i32 = 0o4000;

/// A configuration file, read safely: opened without blocking (O_NONBLOCK;
/// std adds O_CLOEXEC), its type checked on the open descriptor (a FIFO, a
/// directory, a device or a socket is refused with its type named), then
/// read through that same descriptor, at most [`MAX_FILE_LEN`] bytes of it
/// whatever its size said.
fn read_text(path: &Path, key: &str) -> Result<String, ConfigError> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let unreadable =
        |e: std::io::Error| ConfigError(format!("{key}: cannot read {}: {e}", path.display()));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(O_NONBLOCK)
        .open(path)
        .map_err(unreadable)?;
    let metadata = file.metadata().map_err(unreadable)?;
    if !metadata.is_file() {
        return Err(ConfigError(format!(
            "{key}: {} is {}, not a regular file",
            path.display(),
            file_type(&metadata.file_type())
        )));
    }
    let too_large = || {
        ConfigError(format!(
            "{key}: {} is larger than {MAX_FILE_LEN} bytes",
            path.display()
        ))
    };
    if metadata.len() > MAX_FILE_LEN {
        return Err(too_large());
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE_LEN + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    // The file may have grown since its size was read.
    if bytes.len() as u64 > MAX_FILE_LEN {
        return Err(too_large());
    }
    String::from_utf8(bytes)
        .map_err(|_| ConfigError(format!("{key}: {} is not UTF-8 text", path.display())))
}

/// What a file that is not a regular file is, for the refusal.
fn file_type(kind: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt as _;
    if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "a special file"
    }
}

/// One lowercase hex SHA-256 per line; blank lines and `#` comments allowed.
fn read_hashes(path: &Path) -> Result<HashSet<String>, ConfigError> {
    let text = read_text(path, "ek_hashes_path")?;
    let mut hashes = HashSet::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let hash = line.to_ascii_lowercase();
        if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(ConfigError(format!(
                "ek_hashes_path: {} line {}: not a SHA-256 in hex (64 characters)",
                path.display(),
                number + 1
            )));
        }
        hashes.insert(hash);
    }
    Ok(hashes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sceau_testkit::TempDir;
    use std::path::PathBuf;
    use std::time::{Duration, Instant};

    const HASH: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    /// `ServerConfig::parse` with `ek_hashes_path = path`, in a thread, so
    /// that a hang fails the test (after 5 s) instead of stalling it; the
    /// stalled thread is left behind, as the plugin's was.
    fn parse_with_hashes(path: &Path) -> (Result<ServerConfig, ConfigError>, Duration) {
        parse_bounded(format!("ek_hashes_path = \"{}\"", path.display()))
    }

    fn parse_bounded(hcl: String) -> (Result<ServerConfig, ConfigError>, Duration) {
        let (sender, receiver) = std::sync::mpsc::channel();
        let started = Instant::now();
        let shown = hcl.clone();
        std::thread::spawn(move || {
            let core = CoreConfig {
                trust_domain: "example.org".into(),
            };
            let _ = sender.send(ServerConfig::parse(&core, &hcl));
        });
        let result = receiver
            .recv_timeout(Duration::from_secs(5))
            .unwrap_or_else(|_| panic!("parsing hung: {shown:?}"));
        (result, started.elapsed())
    }

    fn refused(path: &Path) -> String {
        let (result, took) = parse_with_hashes(path);
        let error = result.expect_err("a special file was accepted").0;
        assert!(took < Duration::from_secs(2), "{took:?}");
        assert!(!error.contains('\n'), "{error:?}");
        error
    }

    fn fifo(dir: &TempDir) -> PathBuf {
        let path = dir.join("ek-hashes");
        let status = std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .expect("mkfifo runs");
        assert!(status.success());
        path
    }

    // Before O_NONBLOCK, the open of the FIFO blocked until a writer came:
    // this test failed with "parsing hung".
    #[test]
    fn a_fifo_is_refused_at_once() {
        let dir = TempDir::new("sceau-spire-config");
        let path = fifo(&dir);
        assert_eq!(
            refused(&path),
            format!(
                "ek_hashes_path: {} is a FIFO, not a regular file",
                path.display()
            )
        );
    }

    #[test]
    fn a_directory_and_a_device_are_refused_with_their_type() {
        let dir = TempDir::new("sceau-spire-config");
        assert_eq!(
            refused(dir.path()),
            format!(
                "ek_hashes_path: {} is a directory, not a regular file",
                dir.path().display()
            )
        );
        assert_eq!(
            refused(Path::new("/dev/zero")),
            "ek_hashes_path: /dev/zero is a character device, not a regular file"
        );
    }

    #[test]
    fn the_roots_and_intermediates_paths_are_checked_the_same_way() {
        let dir = TempDir::new("sceau-spire-config");
        let path = fifo(&dir);
        let (result, _) = parse_bounded(format!("ek_roots_path = \"{}\"", path.display()));
        let error = result.unwrap_err();
        assert!(error.0.starts_with("ek_roots_path: ") && error.0.contains("is a FIFO"));
        let roots = dir.join("roots.pem");
        std::fs::write(&roots, "").unwrap();
        let (result, _) = parse_bounded(format!(
            "ek_roots_path = \"{}\"\nek_intermediates_path = \"/dev/zero\"",
            roots.display()
        ));
        let error = result.unwrap_err();
        assert_eq!(
            error.0,
            "ek_intermediates_path: /dev/zero is a character device, not a regular file"
        );
    }

    #[test]
    fn an_oversized_file_is_refused() {
        let dir = TempDir::new("sceau-spire-config");
        let path = dir.join("ek-hashes");
        let file = std::fs::File::create(&path).unwrap();
        file.set_len(MAX_FILE_LEN + 1).unwrap();
        assert_eq!(
            refused(&path),
            format!(
                "ek_hashes_path: {} is larger than {MAX_FILE_LEN} bytes",
                path.display()
            )
        );
    }

    #[test]
    fn a_regular_file_is_read() {
        let dir = TempDir::new("sceau-spire-config");
        let path = dir.join("ek-hashes");
        std::fs::write(
            &path,
            format!("# nodes\n{HASH}\n\n{}  # upper\n", HASH.to_uppercase()),
        )
        .unwrap();
        let (result, _) = parse_with_hashes(&path);
        let config = result.unwrap();
        assert_eq!(config.ek_hashes, Some(HashSet::from([HASH.to_string()])));
        // At the limit exactly, the size passes (the content does not).
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(MAX_FILE_LEN).unwrap();
        let error = parse_with_hashes(&path).0.unwrap_err();
        assert!(
            error
                .0
                .ends_with("line 5: not a SHA-256 in hex (64 characters)"),
            "{error:?}"
        );
    }
}
