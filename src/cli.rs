//! The command line of `sceau`: each flag declared once in the table below
//! (name, value, help, default), from which `sceau_cli` derives the help
//! texts, the walk over the arguments and the inverse ([`Command::to_args`]).
//! This file adds only the typed value of each flag.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::time::Duration;

use sceau_cli::{
    Args, CommandSpec, Flag, Manual, Matches, Parsed, Problem, Program, invalid, path, path_arg,
};
pub use sceau_cli::{Generate, UsageError, utf8_args};

use crate::sandbox::Enforcement;
use sceau_format::key_id::hex;
use sceau_format::owner_auth;
use sceau_format::pcr_policy::PcrSelection;
use sceau_format::revocation::Serial;
use sceau_format::wire::NAME_LEN;
use sceau_tpm::Tcti;

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
/// The tool that took over `recover`, `recovery-keygen` and the verifier's
/// side of `enroll`.
const OFFLINE_TOOL: &str = "sceau-recover";

/// The spellings of `--landlock` and `--seccomp`, for parsing and back.
const LANDLOCK_MODES: [(&str, Enforcement); 3] = [
    ("require", Enforcement::Require),
    ("best-effort", Enforcement::BestEffort),
    ("off", Enforcement::Off),
];
const SECCOMP_MODES: [(&str, Enforcement); 3] = [
    ("kill", Enforcement::Require),
    ("log", Enforcement::BestEffort),
    ("off", Enforcement::Off),
];

// Every flag of `sceau`, once.

pub const SOCKET: Flag = Flag::value("--socket", "PATH", "The KMS unix socket")
    .default(DEFAULT_SOCKET)
    .long_help("serve: a stale socket there is replaced; any other file is refused");
pub const TCTI: Flag = Flag::value("--tcti", "TCTI", "TPM connection")
    .default(DEFAULT_TCTI)
    .env(TCTI_ENV)
    .long_help(
        "A software TPM: swtpm:host=127.0.0.1,port=2321 (control on port+1).\n\
         An invalid TCTI is refused before anything starts",
    );
pub const SOCKET_MODE: Flag =
    Flag::value("--socket-mode", "OCTAL", "Permission bits of the socket").default("0600");
pub const SOCKET_GROUP: Flag = Flag::value(
    "--socket-group",
    "GROUP",
    "Group owning the socket, by name or number",
)
.long_help("(use with --socket-mode 0660)");
pub const SRK_HANDLE: Flag = Flag::value(
    "--srk-handle",
    "HANDLE",
    "Use the persistent key at HANDLE (e.g. 0x81000001) as the SRK",
)
.long_help(
    "read with ReadPublic alone, so serving needs no owner authorization; only a key of the SRK \
     template is taken (pin which one with --expect-srk-name)",
);
pub const EXPECT_SRK_NAME: Flag = Flag::value(
    "--expect-srk-name",
    "HEX",
    "Refuse to start unless the SRK's Name is HEX (as srk-public prints it)",
)
.long_help(
    "pins the node's TPM: a swapped TPM, a cleared owner hierarchy or a substituted key is \
     refused at start and at every reopen, with both Names in the line",
);
pub const REQUEST_DEADLINE: Flag = Flag::value(
    "--request-deadline",
    "DUR",
    "Longest a request may wait for the TPM, e.g. 2.5s or 800ms",
)
.default("2.5s")
.long_help("(100ms to 60s; the apiserver gives up after 3s)");
pub const ALLOW_UID: Flag = Flag::value(
    "--allow-uid",
    "UID",
    "Let this uid call the KMS API besides root (repeatable)",
)
.long_help("any other caller gets PERMISSION_DENIED");
pub const METRICS_ALLOW_UID: Flag = Flag::value(
    "--metrics-allow-uid",
    "UID",
    "On a unix metrics socket, let only root and this uid scrape (repeatable)",
)
.long_help(
    "other peers are closed at accept, before anything is read (docs/metrics.md);\n\
     without it, the socket file's permissions alone decide",
);
pub const TSS_LOG_REVEALS_SECRETS: Flag = Flag::switch(
    "--tss-log-reveals-secrets",
    "Start even if TSS2_LOG makes tpm2-tss log DEKs in clear",
)
.long_help(
    "(any module but tcti at debug or trace); for a throwaway TPM only:\n\
     the log then holds every DEK of every call (docs/troubleshooting.md)",
);
pub const LANDLOCK: Flag = Flag::value("--landlock", "MODE", "require, best-effort or off")
    .default("require")
    .long_help(
        "require: refuse to start if the kernel enforces no Landlock;\n\
         best-effort: apply what the kernel supports, and if that is nothing,\n\
         warn and let seccomp refuse every file open; off: no Landlock",
    );
pub const SECCOMP: Flag = Flag::value("--seccomp", "MODE", "kill, log or off")
    .default("kill")
    .long_help("kill: a call outside the allowlist kills sceau; log: it is only logged");
pub const MEMBERS: Flag = Flag::value(
    "--members",
    "DIR",
    "Cluster mode: wrap every DEK for each member SRK in DIR/*.pub",
)
.long_help(
    "(docs/ha.md; this node's included) as envelope version 3, signed by\n\
     this TPM; key_id names the membership. Each file holds a member's SRK\n\
     and signing key, each pinned by its Name; sceau refuses to start if a\n\
     name and its key disagree",
);
pub const FORMER_MEMBERS: Flag = Flag::value(
    "--former-members",
    "DIR",
    "Still open envelopes signed by the removed members in DIR/*.pub",
)
.long_help(
    "(their old member files) while the Secrets are rewritten; they get no\n\
     new DEK. Drop the flag afterwards, and their envelopes, and every\n\
     envelope of a membership that included them, are refused (docs/ha.md)",
);
pub const ACCEPT_UNSIGNED_ENVELOPES: Flag = Flag::switch(
    "--accept-unsigned-envelopes",
    "Open unsigned (version 2) cluster envelopes, during migration only",
)
.long_help(
    "Envelopes written before sceau signed them. Anyone with a member file\n\
     can forge one, so use this only until the Secrets are rewritten\n\
     (docs/migration.md)",
);
pub const ENROLLMENT_KEY: Flag = Flag::value(
    "--enrollment-key",
    "FILE",
    "Start only if every member file is endorsed by this enrollment key",
)
.long_help(
    "(the --enrollment-public file of `sceau-recover enrollment-keygen`):\n\
     each file in --members and --former-members must carry the endorsement\n\
     `sceau-recover enroll verify --enrollment-identity` writes after proving\n\
     its keys in one TPM. Without it, membership rests on file permissions",
);
pub const RECOVERY_KEY: Flag = Flag::value(
    "--recovery-key",
    "FILE",
    "Also wrap every DEK for this offline recovery key (a backup)",
)
.long_help(
    "(the --public file of `sceau-recover recovery-keygen`), so that\n\
     `sceau-recover recover` can open every Secret if the TPM is lost.\n\
     Without --members, this node is the only member (docs/recovery.md).\n\
     Without either, there is no backup: the Secrets live and die with this TPM",
);
pub const SANDBOX: Flag = Flag::switch(
    "--sandbox",
    "Test the sandbox: one PASS/FAIL line per forbidden action",
)
.long_help(
    "read and create files, connect TCP and to a unix socket, a disallowed\n\
     system call, clone3, a user namespace, make the process dumpable, gain\n\
     a capability. Exits 0 only if all are refused",
);
pub const CHALLENGE: Flag = Flag::value(
    "--challenge",
    "FILE",
    "respond: the file `sceau-recover enroll challenge` wrote",
);
pub const POLICY_KEY: Flag = Flag::value(
    "--policy-key",
    "FILE",
    "Seal every DEK to this PCR policy signing key (PEM, P-256 or RSA-2048)",
)
.long_help(
    "Boot-state binding (docs/boot-binding.md): a DEK then opens only in a\n\
     boot state the key signed (--policy), never with a password session.\n\
     The format of systemd's tpm2-pcr-public-key.pem; needs --policy",
);
pub const POLICY: Flag = Flag::value(
    "--policy",
    "FILE|DIR",
    "Signed PCR policies (a file, or a directory of *.json); repeatable",
)
.long_help(
    "What `sceau-recover policy sign` or `systemd-measure sign` wrote. A DEK\n\
     opens through the one whose PCRs match the TPM's; keep the old and the\n\
     new during an update. Read at start: restart sceau to load new ones",
);
pub const FORMER_POLICY_KEY: Flag = Flag::value(
    "--former-policy-key",
    "FILE",
    "Still open DEKs sealed to this earlier policy key; repeatable",
)
.long_help(
    "During a rotation of the policy key: DEKs sealed to it open through the\n\
     policies it signed (--policy), new DEKs are sealed to --policy-key.\n\
     Drop it once every Secret is rewritten (docs/boot-binding.md)",
);
pub const ACCEPT_POLICIES_ANOTHER_OS_CAN_MEET: Flag = Flag::switch(
    "--accept-policies-another-os-can-meet",
    "Serve policies that cover no firmware PCR (0-7), such as PCR 11 alone",
)
.long_help(
    "Any OS booted on this machine without systemd-stub can extend such PCRs\n\
     from userspace to the signed values and open every bound DEK. Without\n\
     this flag sceau refuses to start with such a policy (docs/boot-binding.md)",
);
pub const SERIAL: Flag = Flag::value(
    "--serial",
    "N",
    "The revocation serial to revoke (0-65535), as `sceau-recover policy show` prints it",
);
pub const PCRS: Flag = Flag::value(
    "--pcrs",
    "LIST",
    "The PCRs to print, of the sha256 bank, e.g. 7 or 7,11",
)
.default("0-23")
.long_help("(0-23: all of them)");

pub const STATE_DIR: Flag = Flag::value(
    "--state-dir",
    "DIR",
    "Where the KEK ledger lives (made if missing, mode 0700)",
)
.default(crate::kek::DEFAULT_STATE_DIR)
.long_help(
    "owned by root or sceau's user, no symbolic link in its path; under systemd, the \
     unit's StateDirectory=sceau",
);
pub const TPM_ADVISORIES: Flag = Flag::value(
    "--tpm-advisories",
    "MODE",
    "warn or refuse when the TPM's firmware is under a vendor advisory",
)
.default("warn")
.long_help(
    "warn: log each advisory and set sceau_tpm_advisory{cve}; refuse: do not\n\
     serve on that TPM, nor on one that does not say its firmware. The list\n\
     is built in (docs/hardening.md) plus --tpm-advisories-file",
);
pub const TPM_ADVISORIES_FILE: Flag = Flag::value(
    "--tpm-advisories-file",
    "FILE",
    "More advisories, one a line: CVE MANUFACTURER FIRMWARE SUMMARY",
)
.long_help(
    "for an advisory newer than this release, e.g.\n\
     CVE-2017-15361 IFX 7.0-7.61 ROCA; added to the built-in list",
);
pub const GENERATION: Flag = Flag::value(
    "--generation",
    "N",
    "The KEK generation to retire (`sceau kek list` shows them)",
);
pub const JSON: Flag = Flag::switch("--json", "Print one JSON object a generation, a line each");

// Every command of `sceau`, once.

pub const SERVE: CommandSpec = CommandSpec {
    name: "serve",
    summary: "Serve the KMS v2 API (Status, Encrypt, Decrypt) on a unix socket",
    about: "Serve the KMS v2 API on a unix socket, sealing DEKs under the TPM's storage root key",
    usage: "serve [OPTIONS]",
    steps: &[],
    flags: &[
        &SOCKET,
        &TCTI,
        &SOCKET_MODE,
        &SOCKET_GROUP,
        &SRK_HANDLE,
        &EXPECT_SRK_NAME,
        &REQUEST_DEADLINE,
        &ALLOW_UID,
        &LANDLOCK,
        &SECCOMP,
        &MEMBERS,
        &RECOVERY_KEY,
        &FORMER_MEMBERS,
        &ENROLLMENT_KEY,
        &ACCEPT_UNSIGNED_ENVELOPES,
        &POLICY_KEY,
        &POLICY,
        &FORMER_POLICY_KEY,
        &ACCEPT_POLICIES_ANOTHER_OS_CAN_MEET,
        &METRICS_ALLOW_UID,
        &TSS_LOG_REVEALS_SECRETS,
        &STATE_DIR,
        &TPM_ADVISORIES,
        &TPM_ADVISORIES_FILE,
    ],
    notes: "\
SIGHUP (systemctl reload sceau) picks up a KEK rotation without dropping calls.
Under systemd, sceau takes over the socket passed as FileDescriptorName=kms
(socket activation) and ignores --socket, --socket-mode and --socket-group.
",
};
pub const STATUS_ONLY: Flag = Flag::switch(
    "--status-only",
    "check: Status alone, no round trip (a liveness probe's call)",
)
.long_help(
    "Status answers from sceau's cached TPM health verdict (at most one\n\
     light TPM probe every 5 s), so a probe every few seconds costs the TPM\n\
     next to nothing; exits 1 unless healthz is ok",
);
pub const TPM_IDENTITY: Flag = Flag::switch(
    "--tpm-identity",
    "check: also print the TPM's manufacturer, vendor and firmware, read through --tcti",
)
.long_help(
    "One GetCapability, no authorization and nothing created, so it runs beside\n\
     the serving sceau through /dev/tpmrm0; match the firmware against the\n\
     vendors' advisories (docs/hardening.md)",
);
pub const CHECK: CommandSpec = CommandSpec {
    name: "check",
    summary: "Ask a running sceau for its Status and make one Encrypt/Decrypt round trip",
    about: "Ask a running sceau for its Status and make one Encrypt/Decrypt round trip with a random DEK",
    usage: "check [--socket PATH] [--status-only] [--tpm-identity [--tcti TCTI]]",
    steps: &[],
    flags: &[&SOCKET, &STATUS_ONLY, &TPM_IDENTITY, &TCTI],
    notes: "",
};
pub const SELFTEST: CommandSpec = CommandSpec {
    name: "selftest",
    summary: "With --sandbox: try forbidden actions inside sceau's sandbox, PASS/FAIL each",
    about: "Put a child process in sceau's sandbox and try what it forbids; one PASS/FAIL line each",
    usage: "selftest --sandbox [--tcti TCTI] [--landlock MODE] [--seccomp MODE]",
    steps: &[],
    flags: &[&SANDBOX, &TCTI, &LANDLOCK, &SECCOMP],
    notes: "The sandbox is the one `serve` would run in with the same --tcti, --landlock and --seccomp.\n",
};
pub const SRK_PUBLIC: CommandSpec = CommandSpec {
    name: "srk-public",
    summary: "Print this node's SRK public as a member file for `serve --members`",
    about: "Print this node's SRK public area, its Name and its key_id, as a member file for `serve --members`",
    usage: "srk-public [--tcti TCTI] [--srk-handle HANDLE]",
    steps: &[],
    flags: &[&TCTI, &SRK_HANDLE],
    notes: "\
Copy the output into the --members directory of every control-plane node as
<node>.pub, after comparing its name: line with the one printed on the node.
",
};
pub const PCRS_COMMAND: CommandSpec = CommandSpec {
    name: "pcrs",
    summary: "Print this TPM's PCR values (sha256) for `sceau-recover policy sign`",
    about: "Print this TPM's PCR values of the sha256 bank, as tpm2_pcrread does, for signing a boot state",
    usage: "pcrs [--tcti TCTI] [--pcrs LIST]",
    steps: &[],
    flags: &[&TCTI, &PCRS],
    notes: "\
Reads only: no key is created. A PCR that reads all zeros or all ones was never
extended this boot, and any booted OS can extend it to any value: it is named on
standard error, and `sceau-recover policy sign` refuses to sign it.
",
};
pub const REVOKE_POLICY: CommandSpec = CommandSpec {
    name: "revoke-policy",
    summary: "Revoke, in this TPM, every boot policy signed with a revocation serial",
    about: "Revoke every signed boot policy of a revocation serial, for good, in this TPM's NV",
    usage: "revoke-policy --serial N [--tcti TCTI]",
    steps: &[],
    flags: &[&TCTI, &SERIAL],
    notes: "\
Writes the serial's NV index (0x013A0000 + N), with the owner hierarchy's empty
authorization: no session can satisfy a policy of that serial again, whatever
files are kept or restored. Runs while sceau serves on /dev/tpmrm0; a running
sceau drops the policy at its next Decrypt. Only deleting the index with the
owner authorization undoes it (docs/boot-binding.md, \"Revoking a boot state\").
",
};
pub const KEK: CommandSpec = CommandSpec {
    name: "kek",
    summary: "Rotate, list and retire this TPM's KEK generations",
    about: "Rotate the key-encryption key, list its generations, and retire (destroy) old ones",
    usage: "kek rotate|list|retire [OPTIONS]",
    steps: &["rotate", "list", "retire"],
    flags: &[&TCTI, &SRK_HANDLE, &STATE_DIR, &GENERATION, &JSON],
    notes: "\
  sceau kek rotate                   make a new generation from the TPM's randomness;
                                     prints `generation N key_id sceau-…`
  sceau kek list [--json]            every generation: number, state, made, key_id
  sceau kek retire --generation N    destroy generation N in the TPM, for good

Then `systemctl reload sceau`: new DEKs are sealed under the new generation and
older envelopes still open under theirs. Rewrite the Secrets, check with
`sceau-recover inventory --require-current`, then retire the old generation: its
envelopes never open again, whatever files are restored. Generation 0 is the SRK,
which only clearing the owner hierarchy destroys. At most 3 generations besides it
are kept (docs/rotation-and-backup.md).
",
};
pub const ENROLL: CommandSpec = CommandSpec {
    name: "enroll",
    summary: "Prove a member's SRK is in a real TPM (credential activation against its EK)",
    about: "Prove that a member's SRK lives in the same TPM as its endorsement key (credential activation)",
    usage: "enroll request|respond [OPTIONS]",
    steps: &["request", "respond"],
    flags: &[&TCTI, &SRK_HANDLE, &CHALLENGE],
    notes: sceau_cli::ENROLL_STEPS,
};

pub const PROGRAM: Program = Program {
    name: "sceau",
    version: env!("CARGO_PKG_VERSION"),
    about: "sceau: a Kubernetes KMS v2 plugin that seals every DEK with this machine's TPM 2.0",
    commands: &[
        &SERVE,
        &CHECK,
        &SELFTEST,
        &SRK_PUBLIC,
        &PCRS_COMMAND,
        &REVOKE_POLICY,
        &KEK,
        &ENROLL,
    ],
    notes: "\
The offline tools (recovery-keygen, recover, and the verifier's side of enroll) are in
`sceau-recover`, which needs no TPM.
",
    options_in_main_help: &["serve", "check"],
    options: &[&sceau_cli::GENERATE],
    environment: &[
        (TCTI_ENV, "TPM connection, as --tcti (the flag wins)"),
        (
            "SCEAU_LOG",
            "Log level: error, warn, info (default), debug, trace, off; any other value is a usage error",
        ),
    ],
    manual: Manual {
        section: "8",
        date: sceau_cli::build_date!(),
        description: "\
sceau serves the Kubernetes KMS v2 API (Status, Encrypt, Decrypt) on a unix
socket for kube-apiserver, and seals every data encryption key (DEK) under the
storage root key (SRK) of this machine's TPM 2.0, so that an envelope opens
only in the TPM that made it. In cluster mode (serve --members) every DEK is
wrapped for each member's SRK; with --recovery-key, also for an offline
recovery key.

It normally runs under systemd: sceau.socket creates the socket and passes
it, sceau.service starts the daemon at boot inside its sandbox (Landlock,
seccomp, no capabilities). sceau logs to standard error, one line per event,
which journald records with the line's priority.
",
        files: &[
            (
                DEFAULT_SOCKET,
                "The KMS socket kube-apiserver connects to (--socket; under systemd, the \
                 one sceau.socket creates).",
            ),
            (
                "/dev/tpmrm0",
                "The TPM, through the kernel's resource manager (the default --tcti); \
                 members of the tss group may open it.",
            ),
            (
                "/usr/lib/systemd/system/sceau.service",
                "The service: its ExecStart= flags and sandbox; start it at boot, so the \
                 SRK is ready before kube-apiserver's first call.",
            ),
            (
                "/usr/lib/systemd/system/sceau.socket",
                "The socket unit, passing the socket as FileDescriptorName=kms.",
            ),
        ],
        see_also: &[
            "sceau-recover(1)",
            "systemd.socket(5)",
            "systemd.exec(5)",
            "journalctl(1)",
        ],
    },
};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Boxed: serve's options are most of the enum's size.
    Serve(Box<ServeOptions>),
    Check(CheckOptions),
    SelfTest(SelfTestOptions),
    SrkPublic(SrkPublicOptions),
    Pcrs(PcrsOptions),
    RevokePolicy(RevokePolicyOptions),
    Kek(KekOptions),
    Enroll(EnrollStep),
    Help(String),
    Version,
    /// `--generate KIND`: the man page or a completion script.
    Generate(Generate),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeOptions {
    pub socket: PathBuf,
    pub tcti: Tcti,
    pub socket_mode: u32,
    pub socket_group: Option<String>,
    pub srk_handle: Option<u32>,
    /// The SRK Name this node's TPM must have.
    pub expect_srk_name: Option<[u8; NAME_LEN]>,
    pub request_deadline: Duration,
    /// Callers' uids besides root's that may call the KMS API.
    pub allowed_uids: Vec<u32>,
    pub landlock: Enforcement,
    pub seccomp: Enforcement,
    /// Cluster mode: the directory of member SRK publics (`*.pub`).
    pub members: Option<PathBuf>,
    /// Cluster mode: the public half of the offline recovery key.
    pub recovery_key: Option<PathBuf>,
    /// Cluster mode: removed members whose envelopes still open.
    pub former_members: Option<PathBuf>,
    /// Cluster mode: the enrollment key every member file must be endorsed by.
    pub enrollment_key: Option<PathBuf>,
    /// Cluster mode: open unsigned (version 2) envelopes.
    pub accept_unsigned_envelopes: bool,
    /// Boot-state binding: the key DEKs are sealed to, and the signed PCR
    /// policies (files or directories) they open through.
    pub policy_key: Option<PathBuf>,
    pub policies: Vec<PathBuf>,
    /// Boot-state binding: keys being rotated out, whose DEKs still open.
    pub former_policy_keys: Vec<PathBuf>,
    /// Serve policies that cover no firmware PCR.
    pub accept_policies_another_os_can_meet: bool,
    /// Uids besides root's that may scrape a unix metrics socket; empty:
    /// whoever the socket file lets connect.
    pub metrics_allowed_uids: Vec<u32>,
    /// Start although `TSS2_LOG` makes tpm2-tss log secrets.
    pub tss_log_reveals_secrets: bool,
    /// Where the KEK ledger lives.
    pub state_dir: PathBuf,
    /// Refuse a TPM under a vendor advisory (`--tpm-advisories refuse`)
    /// rather than warn.
    pub refuse_advised_tpms: bool,
    /// Advisories added to the built-in list.
    pub tpm_advisories_file: Option<PathBuf>,
}

/// `sceau kek`: its step and what it works on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KekOptions {
    pub step: KekStep,
    pub tpm: SrkPublicOptions,
    pub state_dir: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KekStep {
    Rotate,
    List { json: bool },
    Retire { generation: u32 },
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
pub struct RevokePolicyOptions {
    pub tcti: Tcti,
    pub serial: Serial,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PcrsOptions {
    pub tcti: Tcti,
    pub pcrs: PcrSelection,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SrkPublicOptions {
    pub tcti: Tcti,
    pub srk_handle: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelfTestOptions {
    /// The TCTI whose access the sandbox keeps, as for `serve`.
    pub tcti: Tcti,
    /// The same modes, with the same defaults, as `serve`'s: the selftest
    /// proves the sandbox the daemon would run in.
    pub landlock: Enforcement,
    pub seccomp: Enforcement,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckOptions {
    pub socket: PathBuf,
    /// Status alone, without the Encrypt/Decrypt round trip.
    pub status_only: bool,
    /// With `--tpm-identity`: the TPM whose identity is printed too.
    pub tpm_identity: Option<Tcti>,
}

/// Parses the arguments after the program name. `env_tcti` is `$SCEAU_TCTI`.
pub fn parse(args: &[String], env_tcti: Option<&str>) -> Result<Command, UsageError> {
    if let Some(moved) = moved_command(args) {
        return Err(UsageError::new(
            None,
            Problem::Moved {
                program: OFFLINE_TOOL,
                command: moved,
            },
        ));
    }
    let (spec, step, matches) = match PROGRAM.parse(args)? {
        Parsed::Help(text) => return Ok(Command::Help(text)),
        Parsed::Version => return Ok(Command::Version),
        Parsed::Generate(kind) => return Ok(Command::Generate(kind)),
        Parsed::Run(command, step, matches) => (command, step, matches),
    };
    let command = match spec.name {
        "serve" => serve(&matches, env_tcti).map(|o| Command::Serve(Box::new(o))),
        "check" => check(&matches, env_tcti).map(Command::Check),
        "selftest" => selftest(&matches, env_tcti).map(Command::SelfTest),
        "srk-public" => srk_public(&matches, env_tcti).map(Command::SrkPublic),
        "pcrs" => pcrs(&matches, env_tcti).map(Command::Pcrs),
        "revoke-policy" => revoke_policy(&matches, env_tcti).map(Command::RevokePolicy),
        "kek" => kek(&matches, step, env_tcti).map(Command::Kek),
        "enroll" => enroll(&matches, step, env_tcti).map(Command::Enroll),
        other => unreachable!("{other} is in PROGRAM but has no parser"),
    };
    command.map_err(|error| error.in_command(spec.name))
}

/// `recover`, `recovery-keygen` and `enroll challenge|verify` (also after
/// `help`), which moved to `sceau-recover`.
fn moved_command(args: &[String]) -> Option<String> {
    let args = match args.first().map(String::as_str) {
        Some("help") => &args[1..],
        _ => args,
    };
    match args {
        [first, ..] if matches!(first.as_str(), "recover" | "recovery-keygen") => {
            Some(first.clone())
        }
        [enroll, step, ..]
            if enroll == "enroll" && matches!(step.as_str(), "challenge" | "verify") =>
        {
            Some(format!("enroll {step}"))
        }
        _ => None,
    }
}

fn serve(m: &Matches, env_tcti: Option<&str>) -> Result<ServeOptions, UsageError> {
    Ok(ServeOptions {
        socket: m.or_default(&SOCKET, None, path)?,
        tcti: tcti(m, env_tcti)?,
        socket_mode: m.or_default(&SOCKET_MODE, None, parse_mode)?,
        socket_group: m.last(&SOCKET_GROUP, |v| Ok(v.to_string()))?,
        srk_handle: m.last(&SRK_HANDLE, parse_handle)?,
        expect_srk_name: m.last(&EXPECT_SRK_NAME, parse_srk_name)?,
        request_deadline: m.or_default(&REQUEST_DEADLINE, None, parse_deadline)?,
        allowed_uids: m
            .values(&ALLOW_UID)
            .map(parse_uid)
            .collect::<Result<_, _>>()?,
        landlock: m.or_default(&LANDLOCK, None, |v| mode(&LANDLOCK, &LANDLOCK_MODES, v))?,
        seccomp: m.or_default(&SECCOMP, None, |v| mode(&SECCOMP, &SECCOMP_MODES, v))?,
        members: m.last(&MEMBERS, path)?,
        recovery_key: m.last(&RECOVERY_KEY, path)?,
        former_members: m.last(&FORMER_MEMBERS, path)?,
        enrollment_key: m.last(&ENROLLMENT_KEY, path)?,
        accept_unsigned_envelopes: m.present(&ACCEPT_UNSIGNED_ENVELOPES),
        policy_key: m.last(&POLICY_KEY, path)?,
        policies: m.values(&POLICY).map(path).collect::<Result<_, _>>()?,
        former_policy_keys: m
            .values(&FORMER_POLICY_KEY)
            .map(path)
            .collect::<Result<_, _>>()?,
        accept_policies_another_os_can_meet: m.present(&ACCEPT_POLICIES_ANOTHER_OS_CAN_MEET),
        metrics_allowed_uids: m
            .values(&METRICS_ALLOW_UID)
            .map(parse_uid)
            .collect::<Result<_, _>>()?,
        tss_log_reveals_secrets: m.present(&TSS_LOG_REVEALS_SECRETS),
        state_dir: m.or_default(&STATE_DIR, None, path)?,
        refuse_advised_tpms: m.or_default(&TPM_ADVISORIES, None, |v| match v {
            "warn" => Ok(false),
            "refuse" => Ok(true),
            other => Err(invalid(&TPM_ADVISORIES, other, "expected warn or refuse")),
        })?,
        tpm_advisories_file: m.last(&TPM_ADVISORIES_FILE, path)?,
    })
    .and_then(|options| {
        if options.policy_key.is_some() == options.policies.is_empty() {
            return Err(m.error(Problem::Required(
                "--policy-key and --policy go together: the key DEKs are sealed to, and the \
                 signed policies they open through"
                    .into(),
            )));
        }
        if options.policy_key.is_none()
            && (!options.former_policy_keys.is_empty()
                || options.accept_policies_another_os_can_meet)
        {
            return Err(m.error(Problem::Required(
                "--former-policy-key and --accept-policies-another-os-can-meet need --policy-key"
                    .into(),
            )));
        }
        Ok(options)
    })
}

fn revoke_policy(m: &Matches, env_tcti: Option<&str>) -> Result<RevokePolicyOptions, UsageError> {
    let serial = m
        .last(&SERIAL, |v| {
            Serial::parse(v).map_err(|e| invalid(&SERIAL, v, e.to_string()))
        })?
        .ok_or_else(|| m.error(Problem::Required("revoke-policy needs --serial N".into())))?;
    Ok(RevokePolicyOptions {
        tcti: tcti(m, env_tcti)?,
        serial,
    })
}

fn kek(m: &Matches, step: Option<&str>, env_tcti: Option<&str>) -> Result<KekOptions, UsageError> {
    let generation = m.last(&GENERATION, |v| {
        v.parse::<u32>()
            .ok()
            .filter(|n| *n <= sceau_format::kek::MAX_GENERATION)
            .ok_or_else(|| invalid(&GENERATION, v, "expected a generation number, 0 to 4095"))
    })?;
    let json = m.present(&JSON);
    let misplaced = |flag: &Flag| {
        Err(m.error(Problem::UnknownOption {
            program: PROGRAM.name,
            command: KEK.name,
            option: flag.name.into(),
        }))
    };
    let step = match (step, generation) {
        (Some("rotate"), None) if !json => KekStep::Rotate,
        (Some("list"), None) => KekStep::List { json },
        (Some("retire"), Some(generation)) if !json => KekStep::Retire { generation },
        (Some("retire"), None) => {
            return Err(m.error(Problem::Required(
                "kek retire needs --generation N (`sceau kek list` shows them)".into(),
            )));
        }
        (Some("rotate" | "list"), Some(_)) => return misplaced(&GENERATION),
        (Some("rotate" | "retire"), _) => return misplaced(&JSON),
        (Some(step), _) => return Err(PROGRAM.unknown_command(&format!("kek {step}"))),
        (None, _) => {
            return Err(m.error(Problem::Required(
                "kek needs its step first: `sceau kek rotate|list|retire …`".into(),
            )));
        }
    };
    Ok(KekOptions {
        step,
        tpm: srk_public(m, env_tcti)?,
        state_dir: m.or_default(&STATE_DIR, None, path)?,
    })
}

fn check(m: &Matches, env_tcti: Option<&str>) -> Result<CheckOptions, UsageError> {
    let tpm_identity = if m.present(&TPM_IDENTITY) {
        Some(tcti(m, env_tcti)?)
    } else if m.present(&TCTI) {
        return Err(m.error(Problem::Required(
            "--tcti with check is where --tpm-identity reads: add --tpm-identity".into(),
        )));
    } else {
        None
    };
    Ok(CheckOptions {
        socket: m.or_default(&SOCKET, None, path)?,
        status_only: m.present(&STATUS_ONLY),
        tpm_identity,
    })
}

fn selftest(m: &Matches, env_tcti: Option<&str>) -> Result<SelfTestOptions, UsageError> {
    if !m.present(&SANDBOX) {
        return Err(m.error(Problem::Required("selftest needs --sandbox".into())));
    }
    Ok(SelfTestOptions {
        tcti: tcti(m, env_tcti)?,
        landlock: m.or_default(&LANDLOCK, None, |v| mode(&LANDLOCK, &LANDLOCK_MODES, v))?,
        seccomp: m.or_default(&SECCOMP, None, |v| mode(&SECCOMP, &SECCOMP_MODES, v))?,
    })
}

fn srk_public(m: &Matches, env_tcti: Option<&str>) -> Result<SrkPublicOptions, UsageError> {
    Ok(SrkPublicOptions {
        tcti: tcti(m, env_tcti)?,
        srk_handle: m.last(&SRK_HANDLE, parse_handle)?,
    })
}

fn enroll(
    m: &Matches,
    step: Option<&str>,
    env_tcti: Option<&str>,
) -> Result<EnrollStep, UsageError> {
    let tpm = srk_public(m, env_tcti)?;
    let challenge = m.last(&CHALLENGE, path)?;
    match (step, challenge) {
        (Some("request"), None) => Ok(EnrollStep::Request(tpm)),
        (Some("request"), Some(_)) => Err(m.error(Problem::UnknownOption {
            program: PROGRAM.name,
            command: ENROLL.name,
            option: CHALLENGE.name.into(),
        })),
        (Some("respond"), Some(challenge)) => Ok(EnrollStep::Respond { tpm, challenge }),
        (Some("respond"), None) => Err(m.error(Problem::Required(
            "enroll respond needs --challenge FILE".into(),
        ))),
        (Some(step), _) => Err(PROGRAM.unknown_command(&format!("enroll {step}"))),
        (None, _) => Err(m.error(Problem::Required(
            "enroll needs its step first: `sceau enroll request|respond …`".into(),
        ))),
    }
}

/// `--tcti`, else `$SCEAU_TCTI`, else the default; parsed here, once.
fn tcti(m: &Matches, env_tcti: Option<&str>) -> Result<Tcti, UsageError> {
    let from_env = |value: &str| {
        value.parse().map_err(|e: sceau_tpm::tcti::InvalidTcti| {
            UsageError::new(
                None,
                Problem::InvalidValue {
                    flag: "$SCEAU_TCTI",
                    value: value.into(),
                    reason: e.to_string(),
                },
            )
        })
    };
    match (m.last(&TCTI, parse_tcti)?, env_tcti) {
        (Some(tcti), _) => Ok(tcti),
        (None, Some(env)) => from_env(env),
        (None, None) => parse_tcti(DEFAULT_TCTI),
    }
}

fn parse_tcti(value: &str) -> Result<Tcti, UsageError> {
    value
        .parse()
        .map_err(|e: sceau_tpm::tcti::InvalidTcti| invalid(&TCTI, value, e.to_string()))
}

fn parse_mode(value: &str) -> Result<u32, UsageError> {
    let digits = value.strip_prefix("0o").unwrap_or(value);
    match u32::from_str_radix(digits, 8) {
        Ok(mode) if mode <= 0o777 => Ok(mode),
        _ => Err(invalid(
            &SOCKET_MODE,
            value,
            "expected octal permission bits such as 0660",
        )),
    }
}

fn pcrs(m: &Matches, env_tcti: Option<&str>) -> Result<PcrsOptions, UsageError> {
    Ok(PcrsOptions {
        tcti: tcti(m, env_tcti)?,
        pcrs: m.or_default(&PCRS, None, parse_pcrs)?,
    })
}

fn parse_pcrs(value: &str) -> Result<PcrSelection, UsageError> {
    let parsed = match value {
        "0-23" => PcrSelection::from_indices(0..24),
        list => PcrSelection::parse(list),
    };
    parsed.map_err(|e| invalid(&PCRS, value, e.to_string()))
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
                &SRK_HANDLE,
                value,
                "expected a persistent handle 0x81000000..0x81ffffff",
            )
        })
}

fn parse_srk_name(value: &str) -> Result<[u8; NAME_LEN], UsageError> {
    owner_auth::parse_srk_name(value)
        .map_err(|error| invalid(&EXPECT_SRK_NAME, value, error.to_string()))
}

fn parse_uid(value: &str) -> Result<u32, UsageError> {
    value
        .parse()
        .map_err(|_| invalid(&ALLOW_UID, value, "expected a numeric uid"))
}

fn mode(
    flag: &Flag,
    modes: &[(&str, Enforcement); 3],
    value: &str,
) -> Result<Enforcement, UsageError> {
    modes
        .iter()
        .find(|(name, _)| *name == value)
        .map(|(_, mode)| *mode)
        .ok_or_else(|| invalid(flag, value, format!("expected {}", flag.help)))
}

fn mode_name(modes: &[(&'static str, Enforcement); 3], mode: Enforcement) -> &'static str {
    modes
        .iter()
        .find(|(_, m)| *m == mode)
        .map(|(name, _)| *name)
        .unwrap_or("off")
}

fn parse_deadline(value: &str) -> Result<Duration, UsageError> {
    let parsed = if let Some(ms) = value.strip_suffix("ms") {
        ms.parse::<u64>().ok().map(Duration::from_millis)
    } else if let Some(s) = value.strip_suffix('s') {
        decimal_seconds(s)
    } else {
        None
    };
    parsed
        .filter(|d| (MIN_DEADLINE..=MAX_DEADLINE).contains(d))
        .ok_or_else(|| {
            invalid(
                &REQUEST_DEADLINE,
                value,
                "expected 100ms to 60s, such as 2.5s or 800ms",
            )
        })
}

/// Seconds written as digits with at most nine decimals, read exactly: a
/// float parse would round `0.1s` and link the float parser for this one
/// flag.
fn decimal_seconds(text: &str) -> Option<Duration> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let digits = |part: &str| part.bytes().all(|b| b.is_ascii_digit());
    let well_formed = !whole.is_empty() && digits(whole) && digits(fraction);
    if !well_formed || fraction.len() > 9 || text.ends_with('.') {
        return None;
    }
    let nanos = format!("{fraction:0<9}").parse::<u32>().ok()?;
    Some(Duration::new(whole.parse().ok()?, nanos))
}

/// A deadline as `--request-deadline` takes it: whole milliseconds when it
/// is, else seconds with nine decimals.
fn deadline_arg(deadline: Duration) -> String {
    if deadline.subsec_nanos().is_multiple_of(1_000_000) {
        format!("{}ms", deadline.as_millis())
    } else {
        format!("{}.{:09}s", deadline.as_secs(), deadline.subsec_nanos())
    }
}

impl Command {
    /// Arguments that parse back to this command, every flag explicit (the
    /// inverse of [`parse`], which the unit tests and the `cli` fuzz target
    /// check). `None` for help, version and generated text, which take no
    /// command options.
    pub fn to_args(&self) -> Option<Vec<String>> {
        let tpm = |args: Args, options: &SrkPublicOptions| {
            args.flag(&TCTI, options.tcti.to_string()).optional(
                &SRK_HANDLE,
                options.srk_handle.map(|handle| format!("{handle:#x}")),
            )
        };
        let args = match self {
            Self::Serve(o) => {
                let mut args = Args::command(SERVE.name)
                    .flag(&SOCKET, path_arg(&o.socket))
                    .flag(&TCTI, o.tcti.to_string())
                    .flag(&SOCKET_MODE, format!("{:o}", o.socket_mode))
                    .optional(&SOCKET_GROUP, o.socket_group.clone())
                    .optional(&SRK_HANDLE, o.srk_handle.map(|h| format!("{h:#x}")))
                    .optional(&EXPECT_SRK_NAME, o.expect_srk_name.map(|n| hex(&n)))
                    .flag(&REQUEST_DEADLINE, deadline_arg(o.request_deadline));
                for uid in &o.allowed_uids {
                    args = args.flag(&ALLOW_UID, uid.to_string());
                }
                args = args
                    .flag(&LANDLOCK, mode_name(&LANDLOCK_MODES, o.landlock))
                    .flag(&SECCOMP, mode_name(&SECCOMP_MODES, o.seccomp))
                    .optional(&MEMBERS, o.members.as_deref().map(path_arg))
                    .optional(&RECOVERY_KEY, o.recovery_key.as_deref().map(path_arg))
                    .optional(&FORMER_MEMBERS, o.former_members.as_deref().map(path_arg))
                    .optional(&ENROLLMENT_KEY, o.enrollment_key.as_deref().map(path_arg))
                    .switch(&ACCEPT_UNSIGNED_ENVELOPES, o.accept_unsigned_envelopes)
                    .optional(&POLICY_KEY, o.policy_key.as_deref().map(path_arg));
                for policy in &o.policies {
                    args = args.flag(&POLICY, path_arg(policy));
                }
                for key in &o.former_policy_keys {
                    args = args.flag(&FORMER_POLICY_KEY, path_arg(key));
                }
                args = args.switch(
                    &ACCEPT_POLICIES_ANOTHER_OS_CAN_MEET,
                    o.accept_policies_another_os_can_meet,
                );
                for uid in &o.metrics_allowed_uids {
                    args = args.flag(&METRICS_ALLOW_UID, uid.to_string());
                }
                args.switch(&TSS_LOG_REVEALS_SECRETS, o.tss_log_reveals_secrets)
                    .flag(&STATE_DIR, path_arg(&o.state_dir))
                    .flag(
                        &TPM_ADVISORIES,
                        if o.refuse_advised_tpms {
                            "refuse"
                        } else {
                            "warn"
                        },
                    )
                    .optional(
                        &TPM_ADVISORIES_FILE,
                        o.tpm_advisories_file.as_deref().map(path_arg),
                    )
            }
            Self::Kek(o) => {
                let args = match o.step {
                    KekStep::Rotate => Args::command("kek rotate"),
                    KekStep::List { json } => Args::command("kek list").switch(&JSON, json),
                    KekStep::Retire { generation } => {
                        Args::command("kek retire").flag(&GENERATION, generation.to_string())
                    }
                };
                tpm(args, &o.tpm).flag(&STATE_DIR, path_arg(&o.state_dir))
            }
            Self::Check(o) => {
                let args = Args::command(CHECK.name)
                    .flag(&SOCKET, path_arg(&o.socket))
                    .switch(&STATUS_ONLY, o.status_only);
                match &o.tpm_identity {
                    Some(tcti) => args
                        .switch(&TPM_IDENTITY, true)
                        .flag(&TCTI, tcti.to_string()),
                    None => args,
                }
            }
            Self::SelfTest(o) => Args::command(SELFTEST.name)
                .switch(&SANDBOX, true)
                .flag(&TCTI, o.tcti.to_string())
                .flag(&LANDLOCK, mode_name(&LANDLOCK_MODES, o.landlock))
                .flag(&SECCOMP, mode_name(&SECCOMP_MODES, o.seccomp)),
            Self::SrkPublic(o) => tpm(Args::command(SRK_PUBLIC.name), o),
            Self::Pcrs(o) => Args::command(PCRS_COMMAND.name)
                .flag(&TCTI, o.tcti.to_string())
                .flag(&PCRS, o.pcrs.to_string()),
            Self::RevokePolicy(o) => Args::command(REVOKE_POLICY.name)
                .flag(&TCTI, o.tcti.to_string())
                .flag(&SERIAL, o.serial.to_string()),
            Self::Enroll(EnrollStep::Request(o)) => tpm(Args::command("enroll request"), o),
            Self::Enroll(EnrollStep::Respond { tpm: o, challenge }) => {
                tpm(Args::command("enroll respond"), o).flag(&CHALLENGE, path_arg(challenge))
            }
            Self::Help(_) | Self::Version | Self::Generate(_) => return None,
        };
        Some(args.0)
    }
}

#[cfg(test)]
mod tests;
