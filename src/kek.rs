//! The KEK lifecycle's files: the state directory that holds the ledger
//! (`sceau_format::kek::Ledger`), and the allocation of the key_id a node
//! serves at start (a reload's is `kms::key_ids`).
//!
//! The state directory passes the member files' checks
//! (`cluster::trusted_files`): no symbolic link anywhere in its path, owned
//! by root or sceau's own user, writable by neither group nor others. The
//! ledger is written to a temporary file, synced and renamed over the old
//! one, so that a crash leaves one or the other.
#![forbid(unsafe_code)]

use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use sceau_format::kek::{KeyIdRecord, LEDGER_FILE, Ledger, key_id};
use sceau_tpm::device::Generations;

use crate::cluster::trusted_files::{self, TrustError};

/// The default `--state-dir`: systemd's `StateDirectory=sceau`.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/sceau";

/// A checked state directory.
pub struct StateDir {
    path: PathBuf,
}

impl StateDir {
    /// Checks `path`; with `create`, makes it (mode 0700) if it is missing,
    /// as `kek rotate` run by root before sceau ever served does.
    pub fn open(path: &Path, create: bool) -> anyhow::Result<Self> {
        if create && !path.exists() {
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(path)
                .with_context(|| format!("creating the state directory {}", path.display()))?;
        }
        trusted_files::check_directory_also_owned_by(path, service_user()).map_err(
            |e| match e {
                TrustError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                    anyhow::anyhow!(
                        "the state directory {} does not exist: under systemd the unit's \
                     StateDirectory=sceau makes it; else create it (install -d -m 0700 {}) or \
                     pass --state-dir",
                        path.display(),
                        path.display()
                    )
                }
                other => {
                    anyhow::anyhow!("the state directory {}: {}", path.display(), explain(other))
                }
            },
        )?;
        Ok(Self {
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The ledger; an empty one if there is none yet.
    pub fn read_ledger(&self) -> anyhow::Result<Ledger> {
        let path = self.path.join(LEDGER_FILE);
        let text = match trusted_files::read_trusted_also_owned_by(&path, service_user()) {
            Ok(text) => text,
            Err(TrustError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Ledger::default());
            }
            Err(e) => bail!("the ledger {}: {}", path.display(), explain(e)),
        };
        Ledger::parse(&text).with_context(|| {
            format!(
                "reading {}: move it aside to start a new ledger (no key_id comes back: the \
                 TPM's counter decides)",
                path.display()
            )
        })
    }

    pub fn write_ledger(&self, ledger: &Ledger) -> anyhow::Result<()> {
        let path = self.path.join(LEDGER_FILE);
        let temporary = self.path.join(format!(".{LEDGER_FILE}.new"));
        let write = || -> std::io::Result<()> {
            let _ = std::fs::remove_file(&temporary);
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&temporary)?;
            // Root running `sceau kek` writes it for the service's user:
            // the file takes the directory's owner, as the daemon's own
            // writes have it.
            let directory = std::fs::metadata(&self.path)?;
            if file.metadata()?.uid() != directory.uid() {
                std::os::unix::fs::fchown(&file, Some(directory.uid()), Some(directory.gid()))?;
            }
            file.write_all(ledger.render().as_bytes())?;
            file.sync_all()?;
            std::fs::rename(&temporary, &path)?;
            std::fs::File::open(&self.path)?.sync_all()
        };
        write().with_context(|| format!("writing {}", path.display()))
    }
}

/// The user the unit runs sceau as (`User=sceau`, from sysusers.d, which
/// writes /etc/passwd): its state directory is its own, and root's `sceau
/// kek` trusts it too. Whoever is that user can already make sceau serve
/// what it likes; through the ledger it can change no key_id (the TPM's
/// counter decides), only what `kek list` shows.
fn service_user() -> Option<u32> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        (fields.next()? == SERVICE_USER)
            .then(|| fields.nth(1)?.parse().ok())
            .flatten()
    })
}

const SERVICE_USER: &str = "sceau";

/// The member files' refusals (`trusted_files`), said of the state
/// directory: whoever can write it can replace the ledger and make sceau
/// report an old key_id's record (never an old key_id: the TPM's counter
/// decides that), so it is held to the same owners and modes.
fn explain(error: TrustError) -> String {
    match error {
        TrustError::SymlinkInPath { path } | TrustError::Symlink { path } => format!(
            "{} is a symbolic link: give the real path with --state-dir (sceau follows no link \
             there)",
            path.display()
        ),
        TrustError::Owner { path, owner, own } => format!(
            "{} is owned by uid {owner}: the state directory and every directory above it must \
             be root's, the user {SERVICE_USER}'s or this process's (uid {own}); chown it",
            path.display()
        ),
        TrustError::Writable { path, mode } => format!(
            "{} has mode {mode:04o}, writable by group or others: run `chmod go-w {}`",
            path.display(),
            path.display()
        ),
        other => format!("{:#}", anyhow::Error::new(other)),
    }
}

/// Seconds since the epoch, for the ledger.
pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

/// The key_id a node serves for its current generation and `config`: the
/// one the ledger says was reported last if nothing changed since (same
/// generation and configuration, no epoch taken since), else a new one at
/// an epoch `take_epoch` takes from the TPM. The ledger is updated in memory
/// with every generation the TPM holds and the key_id; the caller writes it.
pub fn allocate(
    ledger: &mut Ledger,
    generations: &Generations,
    config: &[u8; 32],
    take_epoch: impl FnOnce() -> anyhow::Result<u64>,
) -> anyhow::Result<KeyIdRecord> {
    let now = now();
    if let (Some(recorded), Some(srk)) = (ledger.generations().get(&0), generations.open.get(&0))
        && recorded.name != *srk
    {
        log::warn!(
            "the SRK's Name is {}, but the ledger recorded {}: this TPM was cleared or replaced, \
             or the state directory is another node's; Secrets sealed under the old SRK do not \
             open here (docs/rotation-and-backup.md)",
            sceau_format::key_id::hex(srk),
            sceau_format::key_id::hex(&recorded.name)
        );
    }
    for (n, name) in &generations.open {
        ledger.note_generation(*n, name, now);
    }
    for n in ledger.generations().keys().copied().collect::<Vec<_>>() {
        if !generations.open.contains_key(&n) {
            ledger.note_retired(n, now);
        }
    }
    let (generation, name) = generations.current();
    if let Some(record) = ledger.reusable(generations.counter, generation, name, config) {
        return Ok(record.clone());
    }
    let epoch = take_epoch()?;
    if epoch <= generations.counter {
        bail!(
            "the TPM's epoch counter did not go up ({epoch} after {})",
            generations.counter
        );
    }
    let record = KeyIdRecord {
        key_id: key_id(generation, epoch, name, config),
        generation,
        epoch,
        config: *config,
        at: now,
    };
    ledger.note_key_id(record.clone());
    Ok(record)
}
