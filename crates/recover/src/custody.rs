//! Private keys at rest. What `sceau-recover` writes that opens envelopes or
//! decides boot states or admits members (a recovery share, the recovery
//! identity, the PCR policy signing key, the enrollment identity) is written as an armored age file
//! (age-encryption.org/v1), encrypted to a passphrase (scrypt), to an age
//! X25519 recipient or to an SSH public key (ssh-ed25519, ssh-rsa: age's
//! own SSH recipients), so that its holder can inspect it with the `age` tool
//! and no file on disk is the key itself. The `age` crate does the
//! cryptography; this module chooses, asks and names.
//!
//! Passphrases come from the terminal with echo off, or one line each from
//! `--passphrase-fd N` for automation; never from the command line, where
//! any user of the machine reads them in `ps`.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};

use age::secrecy::SecretString;
use zeroize::Zeroizing;

/// What a refused `passphrase:…` or `--passphrase` says.
pub const NO_PASSPHRASE_ARGUMENT: &str = "a passphrase is never taken from the command line (any user of the machine sees it in ps, and the shell keeps it in its history): type it when asked, or pass --passphrase-fd N";

/// How one private file is protected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Protection {
    /// A passphrase, asked for when the file is written (scrypt).
    Passphrase,
    /// An age X25519 recipient (`age1…`), whose identity opens the file.
    Recipient(String),
    /// An SSH public key file (`id_ed25519.pub`), whose private key opens
    /// the file.
    Ssh(PathBuf),
    /// No encryption: only through `--unencrypted-private-key`.
    Unencrypted,
}

impl Protection {
    /// `passphrase` or `age:RECIPIENT`.
    pub fn parse(spec: &str) -> Result<Self, String> {
        if spec == "passphrase" {
            return Ok(Self::Passphrase);
        }
        if spec.starts_with("passphrase") {
            return Err(NO_PASSPHRASE_ARGUMENT.into());
        }
        if let Some(file) = spec.strip_prefix("ssh:") {
            if file.is_empty() {
                return Err("ssh: needs the custodian's public key file, ssh:PATH".into());
            }
            return Ok(Self::Ssh(PathBuf::from(file)));
        }
        match spec.strip_prefix("age:") {
            Some(recipient) => recipient
                .parse::<age::x25519::Recipient>()
                .map(|_| Self::Recipient(recipient.to_string()))
                .map_err(|e| format!("not an age X25519 recipient (age1…): {e}")),
            None => Err(
                "expected `passphrase`, `age:RECIPIENT` (an age1… public key) or `ssh:PUBKEY_FILE`"
                    .into(),
            ),
        }
    }

    /// The command-line form ([`Protection::parse`]'s inverse).
    pub fn spec(&self) -> String {
        match self {
            Self::Passphrase => "passphrase".into(),
            Self::Recipient(recipient) => format!("age:{recipient}"),
            Self::Ssh(file) => format!("ssh:{}", file.display()),
            Self::Unencrypted => "unencrypted".into(),
        }
    }
}

/// One custodian of a recovery share: `NAME=passphrase` or
/// `NAME=age:RECIPIENT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Custodian {
    pub name: String,
    pub protection: Protection,
}

impl Custodian {
    pub fn parse(spec: &str) -> Result<Self, String> {
        let Some((name, protection)) = spec.split_once('=') else {
            return Err(
                "expected NAME=passphrase, NAME=age:RECIPIENT or NAME=ssh:PUBKEY_FILE".into(),
            );
        };
        let name_ok = (1..=64).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._@-".contains(&b))
            && !name.starts_with('.');
        if !name_ok {
            return Err(
                "a custodian's name is 1 to 64 of A-Z a-z 0-9 . _ @ - (not starting with a dot): it names the share file"
                    .into(),
            );
        }
        Ok(Self {
            name: name.to_string(),
            protection: Protection::parse(protection)?,
        })
    }

    pub fn spec(&self) -> String {
        format!("{}={}", self.name, self.protection.spec())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CustodyError {
    #[error(
        "no terminal to ask for {what} on ({reason}): pass --passphrase-fd N with one passphrase a line"
    )]
    NoTerminal { what: String, reason: String },
    #[error("{what} typed on the terminal was refused: {reason}; run the command again")]
    BadPassphrase { what: String, reason: String },
    #[error("--passphrase-fd {fd}: {reason}")]
    PassphraseFd { fd: u32, reason: String },
    #[error(
        "--passphrase-fd {fd} has no line left for {what} (one passphrase a line, in the order asked)"
    )]
    NoLineLeft { fd: u32, what: String },
    #[error("the two passphrases for {0} differ; nothing written")]
    Mismatch(String),
    #[error("an empty passphrase for {0} would protect nothing")]
    Empty(String),
    #[error(
        "{0}: encrypted to an age recipient; give the matching identity with --age-identity FILE"
    )]
    NeedIdentity(String),
    #[error("{0}: wrong passphrase, or the file was altered")]
    WrongPassphrase(String),
    #[error(
        "{0}: none of the --age-identity keys opens it (encrypted for another recipient, such as another custodian)"
    )]
    NotForTheseKeys(String),
    #[error("{file}: not a whole age file, altered or truncated ({reason})")]
    Damaged { file: String, reason: String },
    #[error(
        "{file}: its passphrase needs scrypt work factor {required}, more than this machine does in about 16 s; open it on a faster machine"
    )]
    TooMuchWork { file: String, required: u8 },
    #[error("--age-identity {file}: {reason}")]
    BadIdentityFile { file: String, reason: String },
    #[error("encrypting {what}: {reason}")]
    Encrypt { what: String, reason: String },
}

/// What `--passphrase-fd` may hold: passphrases, one a line.
const MAX_PASSPHRASE_INPUT: u64 = 64 * 1024;

/// Where passphrases come from: the terminal (echo off), or one line each
/// from a file descriptor, read to its end at the first request. The
/// descriptor is opened anew through /proc/self/fd, so a regular file is
/// read from its start, whatever its offset.
pub struct Passphrases {
    fd: Option<u32>,
    lines: Option<std::vec::IntoIter<Zeroizing<String>>>,
}

impl Passphrases {
    pub fn new(fd: Option<u32>) -> Self {
        Self { fd, lines: None }
    }

    /// The next passphrase, for `what` (named in the prompt and in errors);
    /// asked twice on a terminal when `confirm` (a new passphrase).
    pub fn next(&mut self, what: &str, confirm: bool) -> Result<SecretString, CustodyError> {
        let passphrase = match self.fd {
            Some(fd) => self.line_from_fd(fd, what)?,
            None => {
                let first = ask(&format!("passphrase for {what}: "), what)?;
                if confirm {
                    let again = ask(&format!("passphrase for {what} (again): "), what)?;
                    if *again != *first {
                        return Err(CustodyError::Mismatch(what.into()));
                    }
                }
                first
            }
        };
        if passphrase.is_empty() {
            return Err(CustodyError::Empty(what.into()));
        }
        Ok(SecretString::from(passphrase.to_string()))
    }

    fn line_from_fd(&mut self, fd: u32, what: &str) -> Result<Zeroizing<String>, CustodyError> {
        if self.lines.is_none() {
            // /proc/self/fd/N opens the same file description without
            // claiming ownership of the descriptor (no unsafe from_raw_fd).
            let fd_error = |e: std::io::Error| CustodyError::PassphraseFd {
                fd,
                reason: e.to_string(),
            };
            let file = std::fs::File::open(format!("/proc/self/fd/{fd}")).map_err(fd_error)?;
            // A terminal would show what is typed: that is what the prompt
            // with echo off is for.
            if std::io::IsTerminal::is_terminal(&file) {
                return Err(CustodyError::PassphraseFd {
                    fd,
                    reason: "is a terminal, where the passphrase would echo: leave out --passphrase-fd to be asked with echo off".into(),
                });
            }
            let mut text = Zeroizing::new(String::new());
            file.take(MAX_PASSPHRASE_INPUT + 1)
                .read_to_string(&mut text)
                .map_err(fd_error)?;
            if text.len() as u64 > MAX_PASSPHRASE_INPUT {
                return Err(CustodyError::PassphraseFd {
                    fd,
                    reason: format!(
                        "more than {MAX_PASSPHRASE_INPUT} bytes: not a list of passphrases"
                    ),
                });
            }
            let lines: Vec<Zeroizing<String>> = text
                .lines()
                .map(|line| Zeroizing::new(line.trim_end_matches('\r').to_string()))
                .collect();
            self.lines = Some(lines.into_iter());
        }
        self.lines
            .as_mut()
            .and_then(Iterator::next)
            .ok_or_else(|| CustodyError::NoLineLeft {
                fd,
                what: what.into(),
            })
    }
}

/// One passphrase from the terminal, echo turned off before the prompt is
/// written (`sceau_sys::read_passphrase`).
fn ask(prompt: &str, what: &str) -> Result<Zeroizing<String>, CustodyError> {
    let what = format!("the passphrase for {what}");
    sceau_sys::read_passphrase(prompt).map_err(|e| match e.raw_os_error() {
        // An error of the system (no terminal, not a terminal): ask
        // through a descriptor instead.
        Some(_) => CustodyError::NoTerminal {
            what,
            reason: e.to_string(),
        },
        // The line itself (too long, not UTF-8): the terminal works.
        None => CustodyError::BadPassphrase {
            what,
            reason: e.to_string(),
        },
    })
}

/// A [`Protection`] made ready to encrypt: its passphrase asked for, its
/// recipient parsed. Prepared before any key exists, so that no key waits
/// in memory while someone types.
pub enum Sealer {
    Passphrase(SecretString),
    Recipient(Box<age::x25519::Recipient>),
    Ssh(Box<age::ssh::Recipient>),
    Plaintext,
}

impl Sealer {
    /// Asks for the passphrase (twice on a terminal) or parses the
    /// recipient; `what` names the file in the prompt and in errors.
    pub fn prepare(
        protection: &Protection,
        passphrases: &mut Passphrases,
        what: &str,
    ) -> Result<Self, CustodyError> {
        Ok(match protection {
            Protection::Unencrypted => Self::Plaintext,
            Protection::Passphrase => Self::Passphrase(passphrases.next(what, true)?),
            Protection::Recipient(recipient) => {
                Self::Recipient(Box::new(recipient.parse().map_err(|e: &str| {
                    CustodyError::Encrypt {
                        what: what.into(),
                        reason: e.to_string(),
                    }
                })?))
            }
            Protection::Ssh(file) => {
                let failed = |reason: String| CustodyError::Encrypt {
                    what: what.into(),
                    reason: format!("{}: {reason}", file.display()),
                };
                // A public key file: its first line is the key.
                let text = std::fs::read_to_string(file).map_err(|e| failed(e.to_string()))?;
                let line = text.lines().next().unwrap_or_default().trim();
                let recipient = line.parse::<age::ssh::Recipient>().map_err(|_| {
                    failed(
                        "not an ssh-ed25519 or ssh-rsa public key line (what ssh-keygen writes to .pub)"
                            .into(),
                    )
                })?;
                Self::Ssh(Box::new(recipient))
            }
        })
    }

    /// `plaintext` as an armored age file (as it is for
    /// [`Protection::Unencrypted`]).
    pub fn seal(&self, plaintext: &[u8], what: &str) -> Result<Vec<u8>, CustodyError> {
        let encryptor = match self {
            Self::Plaintext => return Ok(plaintext.to_vec()),
            Self::Passphrase(passphrase) => {
                age::Encryptor::with_user_passphrase(passphrase.clone())
            }
            Self::Recipient(recipient) => age::Encryptor::with_recipients(std::iter::once(
                recipient.as_ref() as &dyn age::Recipient,
            ))
            .map_err(|e| CustodyError::Encrypt {
                what: what.into(),
                reason: first_line(&e.to_string()),
            })?,
            Self::Ssh(recipient) => age::Encryptor::with_recipients(std::iter::once(
                recipient.as_ref() as &dyn age::Recipient,
            ))
            .map_err(|e| CustodyError::Encrypt {
                what: what.into(),
                reason: first_line(&e.to_string()),
            })?,
        };
        let failed = |e: std::io::Error| CustodyError::Encrypt {
            what: what.into(),
            reason: first_line(&e.to_string()),
        };
        let mut out = Vec::new();
        let armored =
            age::armor::ArmoredWriter::wrap_output(&mut out, age::armor::Format::AsciiArmor)
                .map_err(failed)?;
        let mut writer = encryptor.wrap_output(armored).map_err(failed)?;
        writer.write_all(plaintext).map_err(failed)?;
        writer
            .finish()
            .and_then(age::armor::ArmoredWriter::finish)
            .map_err(failed)?;
        Ok(out)
    }
}

/// Encrypts `plaintext` for `protection`: [`Sealer::prepare`], then
/// [`Sealer::seal`].
pub fn protect(
    plaintext: &[u8],
    protection: &Protection,
    passphrases: &mut Passphrases,
    what: &str,
) -> Result<Vec<u8>, CustodyError> {
    Sealer::prepare(protection, passphrases, what)?.seal(plaintext, what)
}

/// age's messages are localized paragraphs ("Unknown age format.\nHave you
/// tried upgrading…"); sceau's errors are one line.
fn first_line(text: &str) -> String {
    text.lines()
        .next()
        .unwrap_or_default()
        .trim_end_matches('.')
        .to_string()
}

/// Whether `bytes` are an age file, binary or armored.
pub fn is_age(bytes: &[u8]) -> bool {
    let text = bytes.trim_ascii_start();
    text.starts_with(b"age-encryption.org/")
        || text.starts_with(b"-----BEGIN AGE ENCRYPTED FILE-----")
}

/// The X25519 identities of `--age-identity` files (`age-keygen`'s format).
pub struct AgeIdentities {
    identities: Vec<Box<dyn age::Identity + Send + Sync>>,
}

impl AgeIdentities {
    /// Reads each file (which holds private keys, so it is refused when
    /// group or others can read it: `read_private`): an age identity file
    /// (`AGE-SECRET-KEY-1…` lines) or an OpenSSH private key, whose
    /// passphrase, when it has one, comes from `passphrases`.
    pub fn read(
        files: &[PathBuf],
        read_private: impl Fn(&Path) -> Result<Zeroizing<String>, String>,
        passphrases: &mut Passphrases,
    ) -> Result<Self, CustodyError> {
        let mut identities: Vec<Box<dyn age::Identity + Send + Sync>> = Vec::new();
        for file in files {
            let name = file.display().to_string();
            let bad = |reason: String| CustodyError::BadIdentityFile {
                file: name.clone(),
                reason,
            };
            let text = read_private(file).map_err(bad)?;
            if text.contains("-----BEGIN OPENSSH PRIVATE KEY-----") {
                let key = age::ssh::Identity::from_buffer(text.as_bytes(), Some(name.clone()))
                    .map_err(|e| bad(first_line(&e.to_string())))?;
                let key = match key {
                    age::ssh::Identity::Unencrypted(key) => key,
                    age::ssh::Identity::Encrypted(key) => {
                        let passphrase = passphrases.next(&format!("the SSH key {name}"), false)?;
                        key.decrypt(passphrase)
                            .map_err(|_| CustodyError::WrongPassphrase(name.clone()))?
                    }
                    age::ssh::Identity::Unsupported(_) => {
                        return Err(bad(
                            "an SSH key of a kind age cannot use (ssh-ed25519 and ssh-rsa can)"
                                .into(),
                        ));
                    }
                };
                identities.push(Box::new(age::ssh::Identity::Unencrypted(key)));
                continue;
            }
            let parsed = age::IdentityFile::from_buffer(text.as_bytes())
                .map_err(|e| bad(first_line(&e.to_string())))?
                .into_identities()
                .map_err(|e| bad(first_line(&e.to_string())))?;
            if parsed.is_empty() {
                return Err(bad(
                    "no AGE-SECRET-KEY-1… line and not an OpenSSH private key".into(),
                ));
            }
            identities.extend(parsed);
        }
        Ok(Self { identities })
    }

    pub fn none() -> Self {
        Self {
            identities: Vec::new(),
        }
    }
}

/// Opens an age file (`file` names it in errors and in the passphrase
/// prompt): with a passphrase when it was encrypted to one, else with the
/// identities.
pub fn open(
    bytes: &[u8],
    file: &str,
    identities: &AgeIdentities,
    passphrases: &mut Passphrases,
) -> Result<Zeroizing<Vec<u8>>, CustodyError> {
    let damaged = |reason: String| CustodyError::Damaged {
        file: file.into(),
        reason: first_line(&reason),
    };
    let decryptor = age::Decryptor::new_buffered(age::armor::ArmoredReader::new(bytes))
        .map_err(|e| damaged(e.to_string()))?;
    let scrypt = decryptor.is_scrypt();
    let reader = if scrypt {
        let identity = age::scrypt::Identity::new(passphrases.next(file, false)?);
        decryptor.decrypt(std::iter::once(&identity as &dyn age::Identity))
    } else {
        if identities.identities.is_empty() {
            return Err(CustodyError::NeedIdentity(file.into()));
        }
        decryptor.decrypt(
            identities
                .identities
                .iter()
                .map(|identity| identity.as_ref() as &dyn age::Identity),
        )
    };
    let mut reader = reader.map_err(|e| match e {
        age::DecryptError::NoMatchingKeys if !scrypt => CustodyError::NotForTheseKeys(file.into()),
        age::DecryptError::DecryptionFailed | age::DecryptError::KeyDecryptionFailed if scrypt => {
            CustodyError::WrongPassphrase(file.into())
        }
        age::DecryptError::ExcessiveWork { required, .. } => CustodyError::TooMuchWork {
            file: file.into(),
            required,
        },
        other => damaged(other.to_string()),
    })?;
    let mut plaintext = Zeroizing::new(Vec::new());
    reader
        .read_to_end(&mut plaintext)
        .map_err(|e| damaged(e.to_string()))?;
    Ok(plaintext)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sceau_format::as_printed;

    #[test]
    fn protection_and_custodian_specs_round_trip_and_refuse_a_passphrase_argument() {
        let recipient = age::x25519::Identity::generate().to_public().to_string();
        for spec in [
            "passphrase".to_string(),
            format!("age:{recipient}"),
            "ssh:/etc/keys/carol.pub".to_string(),
        ] {
            assert_eq!(Protection::parse(&spec).unwrap().spec(), spec);
            let custodian = format!("alice={spec}");
            assert_eq!(Custodian::parse(&custodian).unwrap().spec(), custodian);
        }
        for spec in ["passphrase:hunter2", "passphrase=hunter2"] {
            assert_eq!(Protection::parse(spec), Err(NO_PASSPHRASE_ARGUMENT.into()));
        }
        assert!(Protection::parse("age:age1notakey").is_err());
        assert!(Protection::parse("ssh:").is_err());
        for bad in [
            "=passphrase",
            "../x=passphrase",
            ".hidden=passphrase",
            "alice",
        ] {
            assert!(Custodian::parse(bad).is_err(), "{bad}");
        }
    }

    /// Round trips through a recipient, and the refusals a custodian meets:
    /// another custodian's key, no key, an altered file.
    #[test]
    fn a_file_for_a_recipient_opens_with_its_identity_only() {
        let alice = age::x25519::Identity::generate();
        let bob = age::x25519::Identity::generate();
        let protection = Protection::Recipient(alice.to_public().to_string());
        let mut none = Passphrases::new(None);
        let file = protect(b"the share", &protection, &mut none, "alice's share").unwrap();
        assert!(is_age(&file));
        assert!(file.starts_with(b"-----BEGIN AGE ENCRYPTED FILE-----"));
        let keys = |identity: &age::x25519::Identity| AgeIdentities {
            identities: vec![Box::new(identity.clone())],
        };
        let opened = open(&file, "alice.share.age", &keys(&alice), &mut none).unwrap();
        assert_eq!(opened.as_slice(), b"the share");
        let refused = [
            open(&file, "alice.share.age", &keys(&bob), &mut none)
                .err()
                .unwrap(),
            open(&file, "alice.share.age", &AgeIdentities::none(), &mut none)
                .err()
                .unwrap(),
        ];
        assert!(matches!(refused[0], CustodyError::NotForTheseKeys(_)));
        assert!(matches!(refused[1], CustodyError::NeedIdentity(_)));
        let mut altered = file.clone();
        let middle = altered.len() / 2;
        altered[middle] = if altered[middle] == b'A' { b'B' } else { b'A' };
        let error = open(&altered, "alice.share.age", &keys(&alice), &mut none)
            .err()
            .unwrap();
        assert!(matches!(error, CustodyError::Damaged { .. }), "{error}");
        for error in refused.iter().chain([&error]) {
            assert!(error.to_string().contains("alice.share.age"), "{error}");
            assert_eq!(as_printed(error), error.to_string());
        }
    }
}
