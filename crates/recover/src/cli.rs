//! Command-line parsing of `sceau-recover`.

use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    RecoveryKeygen(RecoveryKeygenOptions),
    Recover(RecoverOptions),
    Enroll(EnrollStep),
    Help(&'static str),
    Version,
}

/// The verifier's two steps of enrollment (docs/ha.md, "Enrolling a member").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnrollStep {
    /// Make the challenge and keep the expected answer.
    Challenge {
        request: PathBuf,
        challenge_out: PathBuf,
        expected_out: PathBuf,
    },
    /// Compare, then write the member file.
    Verify {
        request: PathBuf,
        expected: PathBuf,
        response: PathBuf,
        member_out: PathBuf,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveryKeygenOptions {
    /// Where the private identity goes (created 0600, never overwritten; not
    /// created at all when the public file exists).
    pub identity: PathBuf,
    /// Where the public half goes, for `serve --recovery-key`.
    pub public: PathBuf,
}

/// What `sceau recover` reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecoverInput {
    /// One raw ciphertext (a version 2 envelope), from a file or `-` (stdin).
    Envelope(PathBuf),
    /// An `etcdctl snapshot save` file.
    EtcdSnapshot(PathBuf),
    /// The output of `etcdctl get --prefix /registry/secrets -w json`.
    EtcdJson(PathBuf),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoverOptions {
    pub identity: PathBuf,
    pub input: RecoverInput,
    /// Write plaintext even when standard output is a terminal.
    pub force: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UsageError {
    #[error("unknown command {0:?}; see `sceau-recover --help`")]
    UnknownCommand(String),
    #[error("unknown option {0:?}; see `sceau-recover {1} --help`")]
    UnknownOption(String, &'static str),
    #[error("{0} needs a value")]
    MissingValue(String),
    #[error("arguments must be valid UTF-8")]
    NotUtf8,
    #[error("{0}")]
    Conflict(&'static str),
}

pub const MAIN_HELP: &str = "\
sceau-recover: sceau's offline tools; they need no TPM and no tpm2-tss

Usage: sceau-recover <COMMAND> [OPTIONS]

Commands:
  recovery-keygen  Create the offline recovery key pair (run offline)
  recover          Open envelopes or an etcd snapshot with the recovery identity, no TPM
  enroll           The verifier's side of enrollment: challenge, then verify

Options:
  -h, --help     Print help
  -V, --version  Print the version
";

pub const RECOVERY_KEYGEN_HELP: &str = "\
Create the offline recovery key pair (P-256); run it on an offline machine

Usage: sceau-recover recovery-keygen --identity FILE --public FILE

Options:
      --identity FILE  The private half: created with mode 0600; an existing file is refused.
                       Keep it offline: it opens every envelope made while its public half
                       was configured
      --public FILE    The public half, for `serve --recovery-key`. If either file exists,
                       nothing is written
  -h, --help           Print help
";

pub const RECOVER_HELP: &str = "\
Open envelopes and etcd contents with the recovery identity, without any TPM

Usage: sceau-recover recover --identity FILE [INPUT] [--force]

Input (one; default: --envelope -):
      --envelope FILE       A raw ciphertext (version 2 envelope), or a whole stored etcd value
                            (k8s:enc:kms:v2:…, needed for envelopes whose recipients are in
                            an annotation); `-` reads standard input.
                            Prints the DEK seed the apiserver gave Encrypt
      --etcd-snapshot FILE  An `etcdctl snapshot save` file: prints every Secret in plaintext
      --etcd-json FILE      `etcdctl get --prefix /registry/secrets -w json` output: as above
Options:
      --identity FILE       The file `sceau-recover recovery-keygen --identity` wrote; refused if group
                            or others can access it (`chmod 600 FILE`)
      --force               Write plaintext even when standard output is a terminal
  -h, --help                Print help
";

pub const ENROLL_HELP: &str = "\
Prove that a member's SRK lives in the same TPM as its endorsement key (credential activation)

Usage:
  sceau enroll request [--tcti TCTI] [--srk-handle HANDLE] > node.request      (on the member)
  sceau-recover enroll challenge --request node.request \\
      --challenge-out node.challenge --expected-out node.expected             (verifier, offline)
  sceau enroll respond --challenge node.challenge [--tcti TCTI] > node.response (on the member)
  sceau-recover enroll verify --request node.request --expected node.expected \\
      --response node.response --member-out members/node.pub                  (verifier)

The request carries the SRK public, the EK public (TCG default ECC template) and the EK
certificate when the TPM has one; `challenge` checks that the certificate names the EK and
prints its SHA-256 fingerprint for you to check against the manufacturer's CA. Only a TPM
holding both keys can answer the challenge; `verify` then writes the member file.
";

/// Parses the arguments after the program name.
pub fn parse(args: &[String]) -> Result<Command, UsageError> {
    let Some((command, rest)) = args.split_first() else {
        return Ok(Command::Help(MAIN_HELP));
    };
    match command.as_str() {
        "-h" | "--help" | "help" => Ok(Command::Help(MAIN_HELP)),
        "-V" | "--version" => Ok(Command::Version),
        "recovery-keygen" => parse_recovery_keygen(rest),
        "recover" => parse_recover(rest),
        "enroll" => parse_enroll(rest),
        other => Err(UsageError::UnknownCommand(other.into())),
    }
}

fn parse_recovery_keygen(args: &[String]) -> Result<Command, UsageError> {
    let (mut identity, mut public) = (None, None);
    let mut flags = Flags::new(args, "recovery-keygen");
    while let Some(flag) = flags.next_flag()? {
        match flag.as_str() {
            "-h" | "--help" => return Ok(Command::Help(RECOVERY_KEYGEN_HELP)),
            "--identity" => identity = Some(flags.value(&flag)?.into()),
            "--public" => public = Some(flags.value(&flag)?.into()),
            _ => return Err(UsageError::UnknownOption(flag, "recovery-keygen")),
        }
    }
    match (identity, public) {
        (Some(identity), Some(public)) => Ok(Command::RecoveryKeygen(RecoveryKeygenOptions {
            identity,
            public,
        })),
        _ => Err(UsageError::MissingValue(
            "recovery-keygen needs --identity FILE and --public FILE".into(),
        )),
    }
}

fn parse_recover(args: &[String]) -> Result<Command, UsageError> {
    let (mut identity, mut input, mut force) = (None, None, false);
    let mut flags = Flags::new(args, "recover");
    let set_input = |new: RecoverInput, input: &mut Option<RecoverInput>| match input {
        Some(_) => Err(UsageError::Conflict(
            "give one of --envelope, --etcd-snapshot, --etcd-json",
        )),
        None => {
            *input = Some(new);
            Ok(())
        }
    };
    while let Some(flag) = flags.next_flag()? {
        match flag.as_str() {
            "-h" | "--help" => return Ok(Command::Help(RECOVER_HELP)),
            "--identity" => identity = Some(flags.value(&flag)?.into()),
            "--envelope" => set_input(
                RecoverInput::Envelope(flags.value(&flag)?.into()),
                &mut input,
            )?,
            "--etcd-snapshot" => set_input(
                RecoverInput::EtcdSnapshot(flags.value(&flag)?.into()),
                &mut input,
            )?,
            "--etcd-json" => set_input(
                RecoverInput::EtcdJson(flags.value(&flag)?.into()),
                &mut input,
            )?,
            "--force" => force = true,
            _ => return Err(UsageError::UnknownOption(flag, "recover")),
        }
    }
    let identity =
        identity.ok_or_else(|| UsageError::MissingValue("recover needs --identity FILE".into()))?;
    Ok(Command::Recover(RecoverOptions {
        identity,
        input: input.unwrap_or(RecoverInput::Envelope("-".into())),
        force,
    }))
}

fn parse_enroll(args: &[String]) -> Result<Command, UsageError> {
    let Some((step, rest)) = args.split_first() else {
        return Ok(Command::Help(ENROLL_HELP));
    };
    // Ordered, so that the extra flag an error names does not vary by run.
    let mut paths: std::collections::BTreeMap<String, PathBuf> = Default::default();
    let mut flags = Flags::new(rest, "enroll");
    while let Some(flag) = flags.next_flag()? {
        match flag.as_str() {
            "-h" | "--help" => return Ok(Command::Help(ENROLL_HELP)),
            "--request" | "--challenge-out" | "--expected-out" | "--expected" | "--response"
            | "--member-out" => {
                let value = flags.value(&flag)?;
                paths.insert(flag, value.into());
            }
            _ => return Err(UsageError::UnknownOption(flag, "enroll")),
        }
    }
    let mut take = |flag: &str| {
        paths
            .remove(flag)
            .ok_or_else(|| UsageError::MissingValue(format!("enroll {step} needs {flag} FILE")))
    };
    let step = match step.as_str() {
        "-h" | "--help" => return Ok(Command::Help(ENROLL_HELP)),
        "challenge" => EnrollStep::Challenge {
            request: take("--request")?,
            challenge_out: take("--challenge-out")?,
            expected_out: take("--expected-out")?,
        },
        "verify" => EnrollStep::Verify {
            request: take("--request")?,
            expected: take("--expected")?,
            response: take("--response")?,
            member_out: take("--member-out")?,
        },
        other => return Err(UsageError::UnknownCommand(format!("enroll {other}"))),
    };
    match paths.keys().next() {
        Some(extra) => Err(UsageError::UnknownOption(extra.clone(), "enroll")),
        None => Ok(Command::Enroll(step)),
    }
}

/// Walks `--flag value` and `--flag=value` pairs.
struct Flags<'a> {
    args: std::slice::Iter<'a, String>,
    inline_value: Option<String>,
    command: &'static str,
}

impl<'a> Flags<'a> {
    fn new(args: &'a [String], command: &'static str) -> Self {
        Self {
            args: args.iter(),
            inline_value: None,
            command,
        }
    }

    fn next_flag(&mut self) -> Result<Option<String>, UsageError> {
        let Some(arg) = self.args.next() else {
            return Ok(None);
        };
        if !arg.starts_with('-') {
            return Err(UsageError::UnknownOption(arg.clone(), self.command));
        }
        match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => {
                self.inline_value = Some(value.into());
                Ok(Some(flag.into()))
            }
            _ => {
                self.inline_value = None;
                Ok(Some(arg.clone()))
            }
        }
    }

    fn value(&mut self, flag: &str) -> Result<String, UsageError> {
        self.inline_value
            .take()
            .or_else(|| self.args.next().cloned())
            .ok_or_else(|| UsageError::MissingValue(flag.into()))
    }
}

/// Converts `std::env::args_os()` (minus the program name) to strings.
pub fn utf8_args(
    args: impl Iterator<Item = std::ffi::OsString>,
) -> Result<Vec<String>, UsageError> {
    args.map(|a| a.into_string().map_err(|_| UsageError::NotUtf8))
        .collect()
}
