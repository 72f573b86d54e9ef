//! Command-line parsing. Hand-written because sceau has few flags and every
//! dependency in a KMS plugin is code a security reviewer must read.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::time::Duration;

use crate::sandbox::Enforcement;
use crate::tpm::worker::DEFAULT_DEADLINE;

pub const DEFAULT_SOCKET: &str = "/run/sceau/kms.sock";
pub const DEFAULT_TCTI: &str = "device:/dev/tpmrm0";
/// Landlock is required by default: seccomp allows `openat` (the TPM may
/// have to be reopened), so without Landlock any file could be opened.
/// `--landlock=best-effort` is the explicit, logged way to run without it.
pub const DEFAULT_LANDLOCK: Enforcement = Enforcement::Require;
pub const DEFAULT_SECCOMP: Enforcement = Enforcement::Require;
pub const TCTI_ENV: &str = "SCEAU_TCTI";
const MIN_DEADLINE: Duration = Duration::from_millis(100);
const MAX_DEADLINE: Duration = Duration::from_secs(60);
const PERSISTENT_HANDLES: std::ops::RangeInclusive<u32> = 0x8100_0000..=0x81FF_FFFF;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Serve(ServeOptions),
    Check(CheckOptions),
    SelfTest(SelfTestOptions),
    SrkPublic(SrkPublicOptions),
    Enroll(EnrollStep),
    Help(&'static str),
    Version,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeOptions {
    pub socket: PathBuf,
    pub tcti: String,
    pub socket_mode: u32,
    pub socket_group: Option<String>,
    pub srk_handle: Option<u32>,
    pub request_deadline: Duration,
    /// Callers' uids besides root's that may call the KMS API.
    pub allowed_uids: Vec<u32>,
    pub landlock: Enforcement,
    pub seccomp: Enforcement,
    /// Cluster mode: the directory of member SRK publics (`*.pub`).
    pub members: Option<PathBuf>,
    /// Cluster mode: the public half of the offline recovery key.
    pub recovery_key: Option<PathBuf>,
}

/// The member's two steps of enrollment; the verifier's are in
/// `sceau-recover enroll` (docs/ha.md, "Enrolling a member").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnrollStep {
    /// Member: print the SRK and EK publics and the EK certificate.
    Request(SrkPublicOptions),
    /// Member: answer with TPM2_ActivateCredential.
    Respond {
        tpm: SrkPublicOptions,
        challenge: PathBuf,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SrkPublicOptions {
    pub tcti: String,
    pub srk_handle: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelfTestOptions {
    /// The TCTI whose access the sandbox keeps, as for `serve`.
    pub tcti: String,
    /// The same modes, with the same defaults, as `serve`'s: the selftest
    /// proves the sandbox the daemon would run in.
    pub landlock: Enforcement,
    pub seccomp: Enforcement,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckOptions {
    pub socket: PathBuf,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UsageError {
    #[error("unknown command {0:?}; see `sceau --help`")]
    UnknownCommand(String),
    #[error("unknown option {0:?}; see `sceau {1} --help`")]
    UnknownOption(String, &'static str),
    #[error("{0} needs a value")]
    MissingValue(String),
    #[error("invalid value {value:?} for {flag}: {reason}")]
    InvalidValue {
        flag: &'static str,
        value: String,
        reason: &'static str,
    },
    #[error("arguments must be valid UTF-8")]
    NotUtf8,
    #[error("{0}")]
    Conflict(&'static str),
    #[error(
        "`{0}` is a command of `sceau-recover` (the offline tool, which needs no TPM); run `sceau-recover {0}`"
    )]
    Moved(String),
}

pub const MAIN_HELP: &str = "\
sceau: a Kubernetes KMS v2 plugin that seals every DEK with this machine's TPM 2.0

Usage: sceau <COMMAND> [OPTIONS]

Commands:
  serve   Serve the KMS v2 API (Status, Encrypt, Decrypt) on a unix socket
  check   Ask a running sceau for its Status and make one Encrypt/Decrypt round trip
  selftest --sandbox
          Try forbidden actions inside sceau's sandbox and report PASS/FAIL for each
  srk-public       Print this node's SRK public as a member file for `serve --members`
  enroll           Prove a member's SRK is in a real TPM (credential activation against its EK)

The offline tools (recovery-keygen, recover, and the verifier's side of enroll) are in
`sceau-recover`, which needs no TPM.

Options of `sceau serve`:
      --socket PATH          Unix socket to listen on [default: /run/sceau/kms.sock]
      --tcti TCTI            TPM connection [default: device:/dev/tpmrm0, or $SCEAU_TCTI]
      --socket-mode OCTAL    Permission bits of the socket [default: 0600]
      --socket-group GROUP   Group owning the socket, by name or number
      --srk-handle HANDLE    Use this persistent key as the SRK, if it is the template's key
      --request-deadline DUR Longest a request may wait for the TPM [default: 2.5s]
      --allow-uid UID        Let this uid call besides root (repeatable)
      --landlock MODE        require (default), best-effort or off
      --seccomp MODE         kill (default), log or off
      --members DIR          Cluster mode: wrap every DEK for each member SRK in DIR/*.pub
      --recovery-key FILE    Also wrap every DEK for this offline recovery key (a backup)

Options of `sceau check`:
      --socket PATH          Unix socket of the running sceau [default: /run/sceau/kms.sock]

Options:
  -h, --help     Print help (`sceau serve --help` explains the daemon's options in full)
  -V, --version  Print the version

Environment:
  SCEAU_TCTI  TPM connection, as --tcti (the flag wins)
  SCEAU_LOG   Log level: error, warn, info (default), debug, off
";

pub const SERVE_HELP: &str = "\
Serve the KMS v2 API on a unix socket, sealing DEKs under the TPM's storage root key

Usage: sceau serve [OPTIONS]

Options:
      --socket PATH          Unix socket to listen on [default: /run/sceau/kms.sock].
                             A stale socket there is replaced; any other file is refused.
      --tcti TCTI            TPM connection [default: device:/dev/tpmrm0, or $SCEAU_TCTI].
                             A software TPM: swtpm:host=127.0.0.1,port=2321 (control on port+1)
      --socket-mode OCTAL    Permission bits of the socket [default: 0600]
      --socket-group GROUP   Group owning the socket, by name or number (use with 0660)
      --srk-handle HANDLE    Use the persistent key at HANDLE (e.g. 0x81000001) as the SRK,
                             only if it is the same key the SRK template gives; else refuse to start
      --request-deadline DUR Longest a request may wait for the TPM, e.g. 2.5s or 800ms
                             [default: 2.5s; the apiserver gives up after 3s]
      --allow-uid UID        Let this uid call the KMS API besides root (repeatable);
                             any other caller gets PERMISSION_DENIED
      --landlock MODE        require (default): refuse to start if the kernel enforces no
                             Landlock; best-effort: apply what the kernel supports, and if
                             that is nothing, warn and let seccomp refuse every file open; off
      --seccomp MODE         kill (default): a call outside the allowlist kills sceau;
                             log: it is only logged; off
      --members DIR          Cluster mode (docs/ha.md): every DEK is wrapped for each member
                             SRK in DIR/*.pub (this node's included), as envelope version 2,
                             and key_id names the membership. Each file is pinned by its name:
      --recovery-key FILE    Also wrap every DEK for this offline recovery key (the --public
                             file of `sceau recovery-keygen`), so `sceau recover` can open
                             every Secret if the TPM is lost. Without --members, this node
                             is the only member (docs/recovery.md). Without either, there
                             is no backup: the Secrets live and die with this TPM
  -h, --help                 Print help

Under systemd, sceau takes over the socket passed as FileDescriptorName=kms
(socket activation) and ignores --socket, --socket-mode and --socket-group.
";

pub const SELFTEST_HELP: &str = "\
Put a child process in sceau's sandbox and try what it forbids; one PASS/FAIL line each

Usage: sceau selftest --sandbox [--tcti TCTI] [--landlock MODE] [--seccomp MODE]

Options:
      --sandbox        Test the sandbox: read and create files, connect TCP and to a unix
                       socket, a disallowed system call, clone3, a user namespace, make the
                       process dumpable, gain a capability. Exits 0 only if all are refused
      --tcti TCTI      The TPM connection whose access the sandbox keeps
                       [default: device:/dev/tpmrm0, or $SCEAU_TCTI]
      --landlock MODE  As for `serve`: require (default), best-effort or off
      --seccomp MODE   As for `serve`: kill (default), log or off
  -h, --help           Print help
";

pub const SRK_PUBLIC_HELP: &str = "\
Print this node's SRK public area, its Name and its key_id, as a member file for `serve --members`

Usage: sceau srk-public [--tcti TCTI] [--srk-handle HANDLE]

Options:
      --tcti TCTI          TPM connection [default: device:/dev/tpmrm0, or $SCEAU_TCTI]
      --srk-handle HANDLE  As for `serve`
  -h, --help               Print help

Copy the output into the --members directory of every control-plane node as
<node>.pub, after comparing its name: line with the one printed on the node.
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

pub const CHECK_HELP: &str = "\
Ask a running sceau for its Status and make one Encrypt/Decrypt round trip with a random DEK

Usage: sceau check [OPTIONS]

Options:
      --socket PATH  Unix socket of the running sceau [default: /run/sceau/kms.sock]
  -h, --help         Print help
";

/// Parses the arguments after the program name. `env_tcti` is `$SCEAU_TCTI`.
pub fn parse(args: &[String], env_tcti: Option<&str>) -> Result<Command, UsageError> {
    let Some((command, rest)) = args.split_first() else {
        return Ok(Command::Help(MAIN_HELP));
    };
    match command.as_str() {
        "-h" | "--help" | "help" => Ok(Command::Help(MAIN_HELP)),
        "-V" | "--version" => Ok(Command::Version),
        "serve" => parse_serve(rest, env_tcti),
        "check" => parse_check(rest),
        "selftest" => parse_selftest(rest, env_tcti),
        "srk-public" => parse_srk_public(rest, env_tcti),
        "recovery-keygen" | "recover" => Err(UsageError::Moved(command.clone())),
        "enroll" => parse_enroll(rest, env_tcti),
        other => Err(UsageError::UnknownCommand(other.into())),
    }
}

fn parse_serve(args: &[String], env_tcti: Option<&str>) -> Result<Command, UsageError> {
    let mut options = ServeOptions {
        socket: DEFAULT_SOCKET.into(),
        tcti: env_tcti.unwrap_or(DEFAULT_TCTI).into(),
        socket_mode: 0o600,
        socket_group: None,
        srk_handle: None,
        request_deadline: DEFAULT_DEADLINE,
        allowed_uids: Vec::new(),
        landlock: DEFAULT_LANDLOCK,
        seccomp: DEFAULT_SECCOMP,
        members: None,
        recovery_key: None,
    };
    let mut flags = Flags::new(args, "serve");
    while let Some(flag) = flags.next_flag()? {
        match flag.as_str() {
            "-h" | "--help" => return Ok(Command::Help(SERVE_HELP)),
            "--socket" => options.socket = flags.value(&flag)?.into(),
            "--tcti" => options.tcti = flags.value(&flag)?,
            "--socket-mode" => options.socket_mode = parse_mode(&flags.value(&flag)?)?,
            "--socket-group" => options.socket_group = Some(flags.value(&flag)?),
            "--srk-handle" => options.srk_handle = Some(parse_handle(&flags.value(&flag)?)?),
            "--request-deadline" => {
                options.request_deadline = parse_deadline(&flags.value(&flag)?)?
            }
            "--allow-uid" => options.allowed_uids.push(parse_uid(&flags.value(&flag)?)?),
            "--landlock" => options.landlock = parse_landlock(&flags.value(&flag)?)?,
            "--seccomp" => options.seccomp = parse_seccomp(&flags.value(&flag)?)?,
            "--members" => options.members = Some(flags.value(&flag)?.into()),
            "--recovery-key" => options.recovery_key = Some(flags.value(&flag)?.into()),
            _ => return Err(UsageError::UnknownOption(flag, "serve")),
        }
    }
    Ok(Command::Serve(options))
}

fn parse_selftest(args: &[String], env_tcti: Option<&str>) -> Result<Command, UsageError> {
    let mut options = SelfTestOptions {
        tcti: env_tcti.unwrap_or(DEFAULT_TCTI).into(),
        landlock: DEFAULT_LANDLOCK,
        seccomp: DEFAULT_SECCOMP,
    };
    let mut sandbox_requested = false;
    let mut flags = Flags::new(args, "selftest");
    while let Some(flag) = flags.next_flag()? {
        match flag.as_str() {
            "-h" | "--help" => return Ok(Command::Help(SELFTEST_HELP)),
            "--sandbox" => sandbox_requested = true,
            "--tcti" => options.tcti = flags.value(&flag)?,
            "--landlock" => options.landlock = parse_landlock(&flags.value(&flag)?)?,
            "--seccomp" => options.seccomp = parse_seccomp(&flags.value(&flag)?)?,
            _ => return Err(UsageError::UnknownOption(flag, "selftest")),
        }
    }
    if !sandbox_requested {
        return Err(UsageError::MissingValue("selftest needs --sandbox".into()));
    }
    Ok(Command::SelfTest(options))
}

fn parse_srk_public(args: &[String], env_tcti: Option<&str>) -> Result<Command, UsageError> {
    let mut options = SrkPublicOptions {
        tcti: env_tcti.unwrap_or(DEFAULT_TCTI).into(),
        srk_handle: None,
    };
    let mut flags = Flags::new(args, "srk-public");
    while let Some(flag) = flags.next_flag()? {
        match flag.as_str() {
            "-h" | "--help" => return Ok(Command::Help(SRK_PUBLIC_HELP)),
            "--tcti" => options.tcti = flags.value(&flag)?,
            "--srk-handle" => options.srk_handle = Some(parse_handle(&flags.value(&flag)?)?),
            _ => return Err(UsageError::UnknownOption(flag, "srk-public")),
        }
    }
    Ok(Command::SrkPublic(options))
}

fn parse_enroll(args: &[String], env_tcti: Option<&str>) -> Result<Command, UsageError> {
    let Some((step, rest)) = args.split_first() else {
        return Ok(Command::Help(ENROLL_HELP));
    };
    if matches!(step.as_str(), "challenge" | "verify") {
        return Err(UsageError::Moved(format!("enroll {step}")));
    }
    let mut tpm = SrkPublicOptions {
        tcti: env_tcti.unwrap_or(DEFAULT_TCTI).into(),
        srk_handle: None,
    };
    // Ordered, so that the extra flag an error names does not vary by run.
    let mut paths: std::collections::BTreeMap<String, PathBuf> = Default::default();
    let mut flags = Flags::new(rest, "enroll");
    while let Some(flag) = flags.next_flag()? {
        match flag.as_str() {
            "-h" | "--help" => return Ok(Command::Help(ENROLL_HELP)),
            "--tcti" => tpm.tcti = flags.value(&flag)?,
            "--srk-handle" => tpm.srk_handle = Some(parse_handle(&flags.value(&flag)?)?),
            "--challenge" => {
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
        "request" => EnrollStep::Request(tpm),
        "respond" => EnrollStep::Respond {
            challenge: take("--challenge")?,
            tpm,
        },
        other => return Err(UsageError::UnknownCommand(format!("enroll {other}"))),
    };
    match paths.keys().next() {
        Some(extra) => Err(UsageError::UnknownOption(extra.clone(), "enroll")),
        None => Ok(Command::Enroll(step)),
    }
}

fn parse_check(args: &[String]) -> Result<Command, UsageError> {
    let mut options = CheckOptions {
        socket: DEFAULT_SOCKET.into(),
    };
    let mut flags = Flags::new(args, "check");
    while let Some(flag) = flags.next_flag()? {
        match flag.as_str() {
            "-h" | "--help" => return Ok(Command::Help(CHECK_HELP)),
            "--socket" => options.socket = flags.value(&flag)?.into(),
            _ => return Err(UsageError::UnknownOption(flag, "check")),
        }
    }
    Ok(Command::Check(options))
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

fn invalid(flag: &'static str, value: &str, reason: &'static str) -> UsageError {
    UsageError::InvalidValue {
        flag,
        value: value.into(),
        reason,
    }
}

fn parse_mode(value: &str) -> Result<u32, UsageError> {
    let digits = value.strip_prefix("0o").unwrap_or(value);
    match u32::from_str_radix(digits, 8) {
        Ok(mode) if mode <= 0o777 => Ok(mode),
        _ => Err(invalid(
            "--socket-mode",
            value,
            "expected octal permission bits such as 0660",
        )),
    }
}

fn parse_handle(value: &str) -> Result<u32, UsageError> {
    let parsed = match value
        .strip_prefix("0x")
        .or_else(|| value.strip_prefix("0X"))
    {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None => value.parse().ok(),
    };
    parsed
        .filter(|handle| PERSISTENT_HANDLES.contains(handle))
        .ok_or_else(|| {
            invalid(
                "--srk-handle",
                value,
                "expected a persistent handle 0x81000000..0x81ffffff",
            )
        })
}

fn parse_uid(value: &str) -> Result<u32, UsageError> {
    value
        .parse()
        .map_err(|_| invalid("--allow-uid", value, "expected a numeric uid"))
}

fn parse_landlock(value: &str) -> Result<Enforcement, UsageError> {
    match value {
        "require" => Ok(Enforcement::Require),
        "best-effort" => Ok(Enforcement::BestEffort),
        "off" => Ok(Enforcement::Off),
        _ => Err(invalid(
            "--landlock",
            value,
            "expected require, best-effort or off",
        )),
    }
}

fn parse_seccomp(value: &str) -> Result<Enforcement, UsageError> {
    match value {
        "kill" => Ok(Enforcement::Require),
        "log" => Ok(Enforcement::BestEffort),
        "off" => Ok(Enforcement::Off),
        _ => Err(invalid("--seccomp", value, "expected kill, log or off")),
    }
}

fn parse_deadline(value: &str) -> Result<Duration, UsageError> {
    let parsed = if let Some(ms) = value.strip_suffix("ms") {
        ms.parse::<u64>().ok().map(Duration::from_millis)
    } else if let Some(s) = value.strip_suffix('s') {
        s.parse::<f64>()
            .ok()
            .and_then(|s| Duration::try_from_secs_f64(s).ok())
    } else {
        None
    };
    parsed
        .filter(|d| (MIN_DEADLINE..=MAX_DEADLINE).contains(d))
        .ok_or_else(|| {
            invalid(
                "--request-deadline",
                value,
                "expected 100ms to 60s, such as 2.5s or 800ms",
            )
        })
}

/// Converts `std::env::args_os()` (minus the program name) to strings.
pub fn utf8_args(
    args: impl Iterator<Item = std::ffi::OsString>,
) -> Result<Vec<String>, UsageError> {
    args.map(|a| a.into_string().map_err(|_| UsageError::NotUtf8))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(String::from).collect()
    }

    fn serve(line: &str, env: Option<&str>) -> ServeOptions {
        match parse(&args(line), env).unwrap() {
            Command::Serve(options) => options,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn serve_defaults() {
        let options = serve("serve", None);
        assert_eq!(options.socket, PathBuf::from(DEFAULT_SOCKET));
        assert_eq!(options.tcti, DEFAULT_TCTI);
        assert_eq!(options.socket_mode, 0o600);
        assert_eq!(options.request_deadline, Duration::from_millis(2500));
    }

    #[test]
    fn serve_flags_in_both_spellings() {
        let options = serve(
            "serve --socket=/tmp/k.sock --tcti swtpm:host=127.0.0.1,port=2321 --socket-mode 0660 \
             --socket-group kube --srk-handle 0x81000001 --request-deadline 800ms",
            Some("device:/dev/tpm0"),
        );
        assert_eq!(options.socket, PathBuf::from("/tmp/k.sock"));
        assert_eq!(options.tcti, "swtpm:host=127.0.0.1,port=2321");
        assert_eq!(options.socket_mode, 0o660);
        assert_eq!(options.socket_group.as_deref(), Some("kube"));
        assert_eq!(options.srk_handle, Some(0x8100_0001));
        assert_eq!(options.request_deadline, Duration::from_millis(800));
    }

    #[test]
    fn sandbox_flags() {
        let options = serve(
            "serve --allow-uid 1000 --allow-uid=1001 --landlock require --seccomp log",
            None,
        );
        assert_eq!(options.allowed_uids, vec![1000, 1001]);
        assert_eq!(options.landlock, Enforcement::Require);
        assert_eq!(options.seccomp, Enforcement::BestEffort);
        let defaults = serve("serve", None);
        assert_eq!(
            (defaults.landlock, defaults.seccomp),
            (Enforcement::Require, Enforcement::Require)
        );
        assert_eq!(
            serve("serve --landlock=best-effort", None).landlock,
            Enforcement::BestEffort
        );
    }

    /// The selftest takes the daemon's sandbox flags, with the same defaults.
    #[test]
    fn selftest_sandbox_flags_default_to_the_daemons() {
        let Ok(Command::SelfTest(defaults)) = parse(&args("selftest --sandbox"), None) else {
            panic!("selftest --sandbox");
        };
        let daemon = serve("serve", None);
        assert_eq!(
            (defaults.landlock, defaults.seccomp),
            (daemon.landlock, daemon.seccomp)
        );
        let Ok(Command::SelfTest(options)) = parse(
            &args("selftest --sandbox --landlock=best-effort --seccomp log"),
            None,
        ) else {
            panic!("selftest with flags");
        };
        assert_eq!(
            (options.landlock, options.seccomp),
            (Enforcement::BestEffort, Enforcement::BestEffort)
        );
        assert!(parse(&args("selftest --sandbox --landlock maybe"), None).is_err());
    }

    #[test]
    fn env_tcti_applies_when_the_flag_is_absent() {
        assert_eq!(
            serve("serve", Some("device:/dev/tpm0")).tcti,
            "device:/dev/tpm0"
        );
    }

    #[test]
    fn rejects_bad_values() {
        for line in [
            "serve --socket-mode 0999",
            "serve --socket-mode 01777",
            "serve --srk-handle 0x80000001",
            "serve --srk-handle nonsense",
            "serve --request-deadline 2.5",
            "serve --request-deadline 5ms",
            "serve --request-deadline 10m",
            "serve --allow-uid kube",
            "serve --landlock maybe",
            "serve --seccomp strict",
            "serve --tcti",
            "serve --bogus",
            "serve stray",
            "frobnicate",
        ] {
            assert!(parse(&args(line), None).is_err(), "{line}");
        }
    }

    #[test]
    fn help_lists_every_serve_flag() {
        assert_eq!(
            parse(&args("serve --help"), None),
            Ok(Command::Help(SERVE_HELP))
        );
        for flag in [
            "--socket ",
            "--tcti",
            "--socket-mode",
            "--socket-group",
            "--srk-handle",
            "--request-deadline",
        ] {
            assert!(SERVE_HELP.contains(flag), "{flag}");
            assert!(MAIN_HELP.contains(flag), "{flag}");
        }
    }

    /// Found by the `cli` fuzz target (audit/fuzzing.md, finding 6): with
    /// flags another step takes, the one the error named depended on a
    /// HashMap's random order, so the same arguments gave different errors.
    #[test]
    fn enroll_names_the_same_extra_flag_every_time() {
        let line = args("enroll request --challenge c");
        assert_eq!(
            parse(&line, None),
            Err(UsageError::UnknownOption("--challenge".into(), "enroll"))
        );
        assert_eq!(
            parse(&args("enroll verify --request q"), None),
            Err(UsageError::Moved("enroll verify".into()))
        );
    }
}
