//! The command line of `sceau-recover`: each flag declared once in the table
//! below, from which `sceau_cli` derives the help texts, the walk over the
//! arguments and the inverse ([`Command::to_args`]). In the library, not the
//! binary, so that the `cli` fuzz target reaches it.

use std::path::PathBuf;

use sceau_cli::build_info::BuildInfo;
use sceau_cli::{
    Args, CommandSpec, Flag, Manual, Matches, Parsed, Problem, Program, invalid, path, path_arg,
};

use crate::custody::{Custodian, Protection};
pub use sceau_cli::{Generate, UsageError, utf8_args};
use sceau_format::revocation::Serial;

/// What `sceau-recover --version` prints (build.rs sets the values; no
/// tpm2-tss: this binary links none).
pub const BUILD: BuildInfo = sceau_cli::build_info!("sceau-recover", None);

// Every flag of `sceau-recover`, once.

pub const IDENTITY: Flag = Flag::value(
    "--identity",
    "FILE",
    "The recovery key's private half (mode 0600)",
)
.long_help(
    "recovery-keygen: an age file (see --protect), created with mode 0600;\n\
     an existing file is refused. Keep it offline: it opens every envelope\n\
     made while its public half was configured. recover: refused if group\n\
     or others can access it (`chmod 600 FILE`); a plaintext identity from\n\
     an earlier sceau-recover still opens, with a warning",
);
pub const PUBLIC: Flag = Flag::value(
    "--public",
    "FILE",
    "The public half, for `sceau serve --recovery-key`",
)
.long_help(
    "recovery-keygen: if it or a private file exists, nothing is written.\n\
     share verify: the shares must belong to this key",
);
pub const ENVELOPE: Flag = Flag::value(
    "--envelope",
    "FILE",
    "Input: a raw ciphertext (version 2 envelope), `-` for standard input",
)
.default("-")
.long_help(
    "or a whole stored etcd value (k8s:enc:kms:v2:…, needed for envelopes\n\
     whose recipients are in an annotation). Prints the DEK seed the\n\
     apiserver gave Encrypt",
);
pub const ETCD_SNAPSHOT: Flag = Flag::value(
    "--etcd-snapshot",
    "FILE",
    "Input: an `etcdctl snapshot save` file; prints every Secret in plaintext",
);
pub const ETCD_JSON: Flag = Flag::value(
    "--etcd-json",
    "FILE",
    "Input: `etcdctl get --prefix /registry/secrets -w json` output; as above",
);
pub const MEMBERS: Flag = Flag::value(
    "--members",
    "DIR",
    "Verify each envelope's signature against the member files in DIR/*.pub",
)
.long_help(
    "(repeatable: give the former members' directory too). An envelope that\n\
     is unsigned or not signed by one of these members is not opened.\n\
     Without --members, envelopes open unverified, and each is named",
);
pub const FORCE: Flag = Flag::switch(
    "--force",
    "Write plaintext even when standard output is a terminal",
);
pub const REQUEST: Flag = Flag::value("--request", "FILE", "The member's `sceau enroll request`");
pub const CHALLENGE_OUT: Flag = Flag::value(
    "--challenge-out",
    "FILE",
    "challenge: where the challenge for the member goes",
);
pub const EXPECTED_OUT: Flag = Flag::value(
    "--expected-out",
    "FILE",
    "challenge: where the expected answer goes (mode 0600)",
);
pub const EXPECTED: Flag = Flag::value("--expected", "FILE", "verify: the expected answer");
pub const RESPONSE: Flag = Flag::value(
    "--response",
    "FILE",
    "verify: the member's `sceau enroll respond`",
);
pub const MEMBER_OUT: Flag =
    Flag::value("--member-out", "FILE", "verify: where the member file goes");
pub const EK_ROOTS: Flag = Flag::value(
    "--ek-roots",
    "PATH",
    "The TPM manufacturers' root CAs: a PEM or DER file, or a directory of them",
)
.long_help(
    "the EK certificate (from the request, or --ek-certificate) must chain to one of them,\n\
     with the same validator as the SPIRE server: validity, CA constraints, signatures,\n\
     the EK usage, and the certified key must be the request's EK",
);
pub const EK_INTERMEDIATES: Flag = Flag::value(
    "--ek-intermediates",
    "PATH",
    "Intermediate CAs the chain may pass through (never trusted as roots)",
);
pub const CRL: Flag = Flag::value(
    "--crl",
    "FILE",
    "A CRL (PEM or DER) of a root or intermediate; repeat for several",
)
.long_help(
    "a certificate its issuer's CRL lists is refused, and so is any certificate\n\
     of an issuer whose CRL is past its nextUpdate",
);
pub const EK_CERTIFICATE: Flag = Flag::value(
    "--ek-certificate",
    "FILE",
    "The EK certificate (PEM or DER), for TPMs that keep it outside NV",
)
.long_help(
    "firmware TPMs (Intel PTT, AMD fTPM) publish it on the vendor's server rather than in\n\
     the TPM; give the same file to challenge and verify",
);
pub const ACCEPT_ANY_EK: Flag = Flag::switch(
    "--accept-any-ek",
    "Enroll without checking the EK against a manufacturer (a software TPM then enrolls)",
)
.long_help(
    "gives up the proof that the TPM is genuine: the answer still proves that the SRK\n\
     and the EK share a TPM, but that TPM may be one an attacker emulates",
);
pub const ENROLLMENT_IDENTITY: Flag = Flag::value(
    "--enrollment-identity",
    "FILE",
    "The enrollment key's private half (mode 0600)",
)
.long_help(
    "enrollment-keygen: an age file (see --protect), created with mode 0600;\n\
     an existing file is refused. enroll verify: opens it with a passphrase\n\
     or --age-identity (a plaintext one still works, with a warning) and endorses the member file it writes, so that `sceau serve\n\
     --enrollment-key` admits it. Whoever holds it admits members: keep it\n\
     on the verifier's offline machine",
);
pub const ENROLLMENT_PUBLIC: Flag = Flag::value(
    "--enrollment-public",
    "FILE",
    "The enrollment key's public half, for `sceau serve --enrollment-key`",
)
.long_help("If either file exists, nothing is written");

/// The inputs of `recover`, of which at most one is given.
pub const POLICY_PRIVATE: Flag = Flag::value(
    "--policy-private",
    "FILE",
    "The PCR policy signing key's private half (PKCS#8 PEM, mode 0600)",
)
.long_help(
    "keygen: an age file (see --protect), created with mode 0600; an\n\
     existing file is refused. Keep it on the offline machine: whoever\n\
     holds it decides in which boot states the nodes' DEKs open. sign:\n\
     refused if group or others can access it; a plaintext P-256 key from\n\
     `openssl genpkey` still works, with a warning",
);
pub const POLICY_KEY: Flag = Flag::value(
    "--policy-key",
    "FILE",
    "The policy signing key's public half (PEM), for `sceau serve --policy-key`",
)
.long_help(
    "keygen: written (never overwritten). show: the signature and the\n\
     key fingerprint are checked against it (P-256 in software; RSA keys,\n\
     such as systemd-measure's, by the node's TPM at load)",
);
pub const PCRS: Flag = Flag::value(
    "--pcrs",
    "LIST",
    "The PCRs the policy binds to, of the sha256 bank, e.g. 7 or 7,11",
);
pub const VALUES: Flag = Flag::value(
    "--values",
    "FILE",
    "Their expected values: what `sceau pcrs` or `tpm2_pcrread` printed",
)
.long_help("on the node, in the boot state to sign (or values you computed for the next one)");
pub const SERIAL: Flag = Flag::value(
    "--serial",
    "N",
    "The revocation serial of this boot state (0-65535), for `sceau revoke-policy`",
)
.long_help(
    "Give every policy of one boot state the same serial, and each new state\n\
     a serial never used with this key: `sceau revoke-policy --serial N` on a\n\
     node then withdraws that state for good (docs/boot-binding.md)",
);
pub const ACCEPT_POLICIES_ANOTHER_OS_CAN_MEET: Flag = Flag::switch(
    "--accept-policies-another-os-can-meet",
    "Sign PCRs none of which the firmware extends (0-7), such as PCR 11 alone",
)
.long_help(
    "Any OS booted on the machine without systemd-stub can extend such PCRs\n\
     from userspace to the signed values; `sceau serve` then needs the same flag",
);
pub const POLICY_OUT: Flag = Flag::value(
    "--policy-out",
    "FILE",
    "The signed policy to write (systemd's JSON), for `sceau serve --policy`",
)
.long_help("Never overwritten");
pub const POLICY: Flag = Flag::value(
    "--policy",
    "FILE",
    "A signed policy file (sceau's or `systemd-measure sign`'s)",
);

pub const CUSTODIANS: Flag = Flag::value(
    "--custodians",
    "N",
    "Split the recovery key among N custodians (1 to 16) instead of writing it",
)
.long_help(
    "with --threshold, --shares-out and one --custodian each. Each share is\n\
     checked against public commitments; the whole key is written nowhere",
);
pub const THRESHOLD: Flag = Flag::value(
    "--threshold",
    "K",
    "Any K of the shares open the recovery key; K-1 of them reveal nothing of it",
);
pub const SHARES_OUT: Flag = Flag::value(
    "--shares-out",
    "DIR",
    "Where the share files go: DIR/NAME.share.age, one per custodian (mode 0600)",
)
.long_help("Created (mode 0700) if missing; an existing share file is never overwritten");
pub const CUSTODIAN: Flag = Flag::value(
    "--custodian",
    "NAME=HOW",
    "A custodian and how their share is encrypted (repeatable, one per share)",
)
.long_help(
    "HOW: `passphrase` (the custodian types it now, on the terminal or\n\
     through --passphrase-fd; scrypt), `age:age1…` (the custodian's age\n\
     X25519 recipient, from `age-keygen`) or `ssh:FILE` (the custodian's\n\
     ssh-ed25519 or ssh-rsa public key). `age -d` opens a share file",
);
pub const PROTECT: Flag = Flag::value(
    "--protect",
    "HOW",
    "How the private key file is encrypted: `passphrase`, `age:age1…` or `ssh:FILE`",
)
.default("passphrase")
.long_help(
    "recovery-keygen --identity, enrollment-keygen and policy keygen write an\n\
     armored age file; recover, enroll verify, policy sign and share verify\n\
     open it with a passphrase or --age-identity",
);
pub const UNENCRYPTED_PRIVATE_KEY: Flag = Flag::switch(
    "--unencrypted-private-key",
    "Write the private key file in plaintext (test rigs only)",
)
.long_help("Anyone who copies the file then holds the key");
pub const PASSPHRASE_FD: Flag = Flag::value(
    "--passphrase-fd",
    "N",
    "Read passphrases from file descriptor N, one a line, not the terminal",
)
.long_help("In the order they are asked for. A passphrase is never taken as an argument");
pub const SHARE: Flag = Flag::value(
    "--share",
    "FILE",
    "A custodian's share file (repeatable; recover needs the threshold)",
);
pub const AGE_IDENTITY: Flag = Flag::value(
    "--age-identity",
    "FILE",
    "An age identity (`age-keygen`) or OpenSSH private key that opens files",
)
.long_help(
    "Repeatable; refused if group or others can access it. A passphrase-\n\
     protected SSH key asks for its passphrase first",
);

const INPUTS: [&Flag; 3] = [&ENVELOPE, &ETCD_SNAPSHOT, &ETCD_JSON];
pub const JSON: Flag = Flag::switch("--json", "inventory: one JSON object instead of the table");
pub const LIST_VALUES: Flag = Flag::switch(
    "--list-values",
    "inventory: also list each KMS v2 value: its etcd key, key_id and envelope fingerprint",
)
.long_help(
    "the fingerprint is the one sceau's call log writes (envelope=…) for the Encrypt\n\
     that made the envelope and every Decrypt that opened it",
);
pub const KEK_LEDGER: Flag = Flag::value(
    "--kek-ledger",
    "FILE",
    "inventory: a node's kek-ledger (its state directory): count values under its retired generations",
);
pub const CURRENT_MEMBERS: Flag = Flag::value(
    "--current-members",
    "DIR",
    "inventory: count envelopes naming a member key that no DIR/*.pub lists",
)
.long_help(
    "(a removed member, or a member's earlier generation: the keys a\n\
     `sceau kek retire` on that member would leave them waiting for)",
);
pub const CURRENT_RECOVERY_KEY: Flag = Flag::value(
    "--current-recovery-key",
    "FILE",
    "inventory: count envelopes naming a recovery key other than this public file's",
)
.long_help(
    "(whoever holds that earlier recovery key can still open them: rewrite\n\
     them before its shares are destroyed)",
);
pub const REQUIRE_CURRENT: Flag = Flag::value(
    "--require-current",
    "KEY_ID",
    "inventory: exit 1 unless every value of the encrypted resources is under KEY_ID",
)
.long_help(
    "(the key_id `sceau check` reports): the proof that a rewrite finished\n\
     before an old key is retired. Encrypted resources are those with at least\n\
     one KMS v2 value; any other value of theirs (another key_id, another\n\
     provider, in the clear) counts against it",
);

// Every command of `sceau-recover`, once.

pub const RECOVERY_KEYGEN: CommandSpec = CommandSpec {
    name: "recovery-keygen",
    summary: "Create the offline recovery key pair (run offline)",
    about: "Create the offline recovery key pair (P-256); run it on an offline machine",
    usage: "recovery-keygen --public FILE (--identity FILE [--protect HOW | --unencrypted-private-key] | --custodians N --threshold K --shares-out DIR --custodian NAME=HOW...) [--passphrase-fd N]",
    steps: &[],
    flags: &[
        &PUBLIC,
        &IDENTITY,
        &PROTECT,
        &UNENCRYPTED_PRIVATE_KEY,
        &CUSTODIANS,
        &THRESHOLD,
        &SHARES_OUT,
        &CUSTODIAN,
        &PASSPHRASE_FD,
    ],
    notes: "\
Split among custodians, any two of three opening it:
  sceau-recover recovery-keygen --public recovery.pub --custodians 3 --threshold 2 \\
      --shares-out shares --custodian alice=age:age1… --custodian bob=passphrase \\
      --custodian carol=age:age1…
docs/recovery.md has the ceremony.
",
};
pub const ENROLLMENT_KEYGEN: CommandSpec = CommandSpec {
    name: "enrollment-keygen",
    summary: "Create the enrollment key pair that endorses member files (run offline)",
    about: "Create the enrollment key pair (P-256) whose endorsement `sceau serve --enrollment-key` requires of every member file",
    usage: "enrollment-keygen --enrollment-identity FILE --enrollment-public FILE [--protect HOW | --unencrypted-private-key] [--passphrase-fd N]",
    steps: &[],
    flags: &[
        &ENROLLMENT_IDENTITY,
        &ENROLLMENT_PUBLIC,
        &PROTECT,
        &UNENCRYPTED_PRIVATE_KEY,
        &PASSPHRASE_FD,
    ],
    notes: "",
};
pub const RECOVER: CommandSpec = CommandSpec {
    name: "recover",
    summary: "Open envelopes or an etcd snapshot with the recovery identity, no TPM",
    about: "Open envelopes and etcd contents with the recovery identity, without any TPM",
    usage: "recover (--identity FILE | --share FILE...) [--age-identity FILE]... [--passphrase-fd N] [--envelope FILE | --etcd-snapshot FILE | --etcd-json FILE] [--members DIR]... [--force]",
    steps: &[],
    flags: &[
        &IDENTITY,
        &SHARE,
        &AGE_IDENTITY,
        &PASSPHRASE_FD,
        &ENVELOPE,
        &ETCD_SNAPSHOT,
        &ETCD_JSON,
        &MEMBERS,
        &FORCE,
    ],
    notes: "",
};
pub const INVENTORY: CommandSpec = CommandSpec {
    name: "inventory",
    summary: "Count etcd's values by resource, provider and key_id (no key needed)",
    about: "Count the values of an etcd snapshot or etcdctl JSON by resource and by how each is stored, reading no key",
    usage: "inventory (--etcd-snapshot FILE | --etcd-json FILE) [--json] [--list-values] [--require-current KEY_ID] [--kek-ledger FILE] [--current-members DIR] [--current-recovery-key FILE]",
    steps: &[],
    flags: &[
        &ETCD_SNAPSHOT,
        &ETCD_JSON,
        &JSON,
        &LIST_VALUES,
        &REQUIRE_CURRENT,
        &KEK_LEDGER,
        &CURRENT_MEMBERS,
        &CURRENT_RECOVERY_KEY,
    ],
    notes: "",
};
pub const ENROLL: CommandSpec = CommandSpec {
    name: "enroll",
    summary: "The verifier's side of enrollment: challenge, then verify",
    about: "Prove that a member's SRK lives in the same TPM as its endorsement key (credential activation)",
    usage: "enroll challenge|verify [OPTIONS]",
    steps: &["challenge", "verify"],
    flags: &[
        &REQUEST,
        &CHALLENGE_OUT,
        &EXPECTED_OUT,
        &EXPECTED,
        &RESPONSE,
        &MEMBER_OUT,
        &ENROLLMENT_IDENTITY,
        &AGE_IDENTITY,
        &PASSPHRASE_FD,
        &EK_ROOTS,
        &EK_INTERMEDIATES,
        &CRL,
        &EK_CERTIFICATE,
        &ACCEPT_ANY_EK,
    ],
    notes: sceau_cli::ENROLL_STEPS,
};

pub const POLICY_COMMAND: CommandSpec = CommandSpec {
    name: "policy",
    summary: "Sign the boot states in which DEKs open: keygen, sign, show (run offline)",
    about: "Make the PCR policy signing key, sign PCR values with it, and show a signed policy",
    usage: "policy keygen|sign|show [OPTIONS]",
    steps: &["keygen", "sign", "show"],
    flags: &[
        &POLICY_PRIVATE,
        &POLICY_KEY,
        &PCRS,
        &VALUES,
        &SERIAL,
        &ACCEPT_POLICIES_ANOTHER_OS_CAN_MEET,
        &POLICY_OUT,
        &POLICY,
        &PROTECT,
        &UNENCRYPTED_PRIVATE_KEY,
        &AGE_IDENTITY,
        &PASSPHRASE_FD,
    ],
    notes: "\
The steps:
  sceau-recover policy keygen --policy-private policy.key --policy-key policy.pub  (offline)
  sceau pcrs --pcrs 7 > node.pcrs                                                  (on the node)
  sceau-recover policy sign --policy-private policy.key --pcrs 7 \\
      --values node.pcrs --serial 1 --policy-out node.policy                       (offline)
  sceau-recover policy show --policy node.policy [--policy-key policy.pub]
  sceau revoke-policy --serial 1                        (on each node, to withdraw it)

docs/boot-binding.md says which PCRs to choose, how to sign before an update and
how to revoke a boot state.
",
};

pub const SHARE_COMMAND: CommandSpec = CommandSpec {
    name: "share",
    summary: "Check recovery shares without combining them: verify (run offline)",
    about: "Decrypt each share and check it against its key set's commitments (and the public file), without combining",
    usage: "share verify --share FILE... [--public FILE] [--age-identity FILE]... [--passphrase-fd N]",
    steps: &["verify"],
    flags: &[&SHARE, &PUBLIC, &AGE_IDENTITY, &PASSPHRASE_FD],
    notes: "",
};

pub const PROGRAM: Program = Program {
    name: "sceau-recover",
    version: env!("CARGO_PKG_VERSION"),
    about: "sceau-recover: sceau's offline tools; they need no TPM and no tpm2-tss",
    commands: &[
        &RECOVERY_KEYGEN,
        &RECOVER,
        &INVENTORY,
        &SHARE_COMMAND,
        &ENROLL,
        &ENROLLMENT_KEYGEN,
        &POLICY_COMMAND,
    ],
    notes: "",
    options_in_main_help: &[],
    options: &[&sceau_cli::GENERATE],
    environment: &[],
    manual: Manual {
        section: "1",
        date: sceau_cli::build_date!(),
        description: "\
sceau-recover holds the tools of sceau(8) that need no TPM; it links no
tpm2-tss, so it runs on any Linux machine, such as an offline one.

recovery-keygen makes the offline recovery key, whose public half `sceau serve
--recovery-key` wraps every DEK for, and writes its private half encrypted, or
splits it among custodians (any K of N shares open it). recover opens
envelopes, an etcd snapshot or etcdctl's JSON output with the private half or
the shares when the TPM is lost; share verify checks shares alone. enroll
challenge and enroll verify are the verifier's side of enrolling a cluster
member; enrollment-keygen makes the key with which enroll verify endorses
the member files it writes. policy keygen, sign and show make and use the
key that signs the boot states in which `sceau serve --policy-key` lets DEKs
open.
",
        files: &[],
        see_also: &["sceau(8)", "etcdctl(1)"],
    },
};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    RecoveryKeygen(RecoveryKeygenOptions),
    Recover(RecoverOptions),
    Inventory(InventoryOptions),
    Enroll(EnrollStep),
    EnrollmentKeygen(EnrollmentKeygenOptions),
    Policy(PolicyStep),
    ShareVerify(ShareVerifyOptions),
    Help(String),
    Version,
    /// `--generate KIND`: the man page or a completion script.
    Generate(Generate),
}

/// The verifier's two steps of enrollment (docs/ha.md, "Enrolling a member").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnrollStep {
    /// Make the challenge and keep the expected answer.
    Challenge {
        request: PathBuf,
        challenge_out: PathBuf,
        expected_out: PathBuf,
        ek_trust: EkTrust,
    },
    /// Compare, then write the member file, endorsed when an enrollment
    /// identity is given.
    Verify {
        request: PathBuf,
        expected: PathBuf,
        response: PathBuf,
        member_out: PathBuf,
        enrollment_identity: Option<PathBuf>,
        /// What opens the enrollment identity when it is an age file.
        unlock: Unlock,
        ek_trust: EkTrust,
    },
}

/// What an enrollment trusts of the member's EK: a manufacturer's chain
/// (`roots` set), or nothing, when the operator said so.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EkTrust {
    pub roots: Option<PathBuf>,
    pub intermediates: Option<PathBuf>,
    pub crls: Vec<PathBuf>,
    pub certificate: Option<PathBuf>,
    pub accept_any_ek: bool,
}

/// The offline steps of boot-state binding (docs/boot-binding.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyStep {
    /// A new P-256 policy signing key: private (0600, protected) and public
    /// (PEM).
    Keygen {
        private: PathBuf,
        public: PathBuf,
        protection: Protection,
        passphrase_fd: Option<u32>,
    },
    /// Sign the PolicyPCR digest of `pcrs` at `values`.
    Sign {
        private: PathBuf,
        pcrs: String,
        values: PathBuf,
        serial: Serial,
        accept_policies_another_os_can_meet: bool,
        out: PathBuf,
        unlock: Unlock,
    },
    /// Print what a signed policy file holds; check it against `key`.
    Show {
        policy: PathBuf,
        key: Option<PathBuf>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnrollmentKeygenOptions {
    /// The private half (created 0600, never overwritten).
    pub identity: PathBuf,
    /// The public half, for `serve --enrollment-key`.
    pub public: PathBuf,
    pub protection: Protection,
    pub passphrase_fd: Option<u32>,
}

/// What opens the age files a command reads: identities, passphrases.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Unlock {
    pub age_identities: Vec<PathBuf>,
    pub passphrase_fd: Option<u32>,
}

/// Where the recovery key's private half goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecoveryPrivate {
    /// One identity file (created 0600, never overwritten; not created at
    /// all when the public file exists).
    Identity {
        path: PathBuf,
        protection: Protection,
    },
    /// Shares, any `threshold` of which open it, one file per custodian.
    Shares {
        threshold: usize,
        dir: PathBuf,
        custodians: Vec<Custodian>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveryKeygenOptions {
    /// Where the public half goes, for `serve --recovery-key`.
    pub public: PathBuf,
    pub private: RecoveryPrivate,
    pub passphrase_fd: Option<u32>,
}

/// What `recover` opens envelopes with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecoveryKey {
    Identity(PathBuf),
    Shares(Vec<PathBuf>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareVerifyOptions {
    pub shares: Vec<PathBuf>,
    /// The recovery key's public file, which the shares must commit to.
    pub public: Option<PathBuf>,
    pub unlock: Unlock,
}

/// What `sceau-recover recover` reads.
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
    pub key: RecoveryKey,
    pub unlock: Unlock,
    pub input: RecoverInput,
    /// Member directories whose signing keys envelopes are checked against;
    /// empty: envelopes open unverified.
    pub members: Vec<PathBuf>,
    /// Write plaintext even when standard output is a terminal.
    pub force: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InventoryOptions {
    /// An etcd snapshot or etcdctl JSON (never an envelope).
    pub input: RecoverInput,
    pub json: bool,
    /// List each KMS v2 value with its envelope's fingerprint.
    pub values: bool,
    pub require_current: Option<String>,
    pub kek_ledger: Option<PathBuf>,
    pub current_members: Option<PathBuf>,
    pub current_recovery_key: Option<PathBuf>,
}

/// Parses the arguments after the program name.
pub fn parse(args: &[String]) -> Result<Command, UsageError> {
    let (spec, step, matches) = match PROGRAM.parse(args)? {
        Parsed::Help(text) => return Ok(Command::Help(text)),
        Parsed::Version => return Ok(Command::Version),
        Parsed::Generate(kind) => return Ok(Command::Generate(kind)),
        Parsed::Run(command, step, matches) => (command, step, matches),
    };
    let command = match spec.name {
        "recovery-keygen" => recovery_keygen(&matches).map(Command::RecoveryKeygen),
        "recover" => recover(&matches).map(Command::Recover),
        "inventory" => inventory(&matches).map(Command::Inventory),
        "enroll" => enroll(&matches, step).map(Command::Enroll),
        "enrollment-keygen" => enrollment_keygen(&matches).map(Command::EnrollmentKeygen),
        "policy" => policy(&matches, step).map(Command::Policy),
        "share" => share(&matches, step).map(Command::ShareVerify),
        other => unreachable!("{other} is in PROGRAM but has no parser"),
    };
    command.map_err(|error| error.in_command(spec.name))
}

/// A flag the command cannot do without.
fn required(m: &Matches, flag: &Flag, what: &str) -> Result<PathBuf, UsageError> {
    m.last(flag, path)?.ok_or_else(|| {
        m.error(Problem::Required(format!(
            "{what} needs {} {}",
            flag.name,
            flag.value.unwrap_or_default()
        )))
    })
}

fn fd_number(value: &str) -> Result<u32, UsageError> {
    value
        .parse()
        .map_err(|_| invalid(&PASSPHRASE_FD, value, "not a file descriptor number"))
}

/// `--ek-roots` or `--accept-any-ek`, one of them: an enrollment that
/// checks no manufacturer says so on its command line.
fn ek_trust(m: &Matches) -> Result<EkTrust, UsageError> {
    let trust = EkTrust {
        roots: m.last(&EK_ROOTS, path)?,
        intermediates: m.last(&EK_INTERMEDIATES, path)?,
        crls: m.values(&CRL).map(path).collect::<Result<_, _>>()?,
        certificate: m.last(&EK_CERTIFICATE, path)?,
        accept_any_ek: m.present(&ACCEPT_ANY_EK),
    };
    match (&trust.roots, trust.accept_any_ek) {
        (None, false) => Err(m.error(Problem::Required(
            "enroll needs --ek-roots (the TPM manufacturer's CA, which the EK certificate must \
             chain to) or --accept-any-ek (a software TPM then enrolls)"
                .into(),
        ))),
        (Some(_), true) => Err(m.error(Problem::Required(
            "--ek-roots and --accept-any-ek contradict each other: give one".into(),
        ))),
        (None, true) if trust.intermediates.is_some() || !trust.crls.is_empty() => Err(m.error(
            Problem::Required("--ek-intermediates and --crl need --ek-roots".into()),
        )),
        _ => Ok(trust),
    }
}

fn unlock(m: &Matches) -> Result<Unlock, UsageError> {
    Ok(Unlock {
        age_identities: m
            .values(&AGE_IDENTITY)
            .map(path)
            .collect::<Result<_, _>>()?,
        passphrase_fd: m.last(&PASSPHRASE_FD, fd_number)?,
    })
}

/// `--protect HOW` (default: a passphrase), or `--unencrypted-private-key`.
fn protection(m: &Matches) -> Result<Protection, UsageError> {
    if m.present(&UNENCRYPTED_PRIVATE_KEY) {
        if m.present(&PROTECT) {
            return Err(m.error(Problem::Conflict(
                "give --protect or --unencrypted-private-key, not both",
            )));
        }
        return Ok(Protection::Unencrypted);
    }
    m.or_default(&PROTECT, None, |v| {
        Protection::parse(v).map_err(|reason| invalid(&PROTECT, v, reason))
    })
}

fn recovery_keygen(m: &Matches) -> Result<RecoveryKeygenOptions, UsageError> {
    let public = required(m, &PUBLIC, "recovery-keygen")?;
    let passphrase_fd = m.last(&PASSPHRASE_FD, fd_number)?;
    let split_flags = [&CUSTODIANS, &THRESHOLD, &SHARES_OUT, &CUSTODIAN];
    let private = if split_flags.iter().any(|f| m.present(f)) {
        if [&IDENTITY, &PROTECT, &UNENCRYPTED_PRIVATE_KEY]
            .iter()
            .any(|f| m.present(f))
        {
            return Err(m.error(Problem::Conflict(
                "shares replace the identity file: give --identity (with --protect) or --custodians, not both",
            )));
        }
        let number = |flag: &'static Flag| {
            move |v: &str| {
                v.parse::<usize>()
                    .map_err(|_| invalid(flag, v, "not a number"))
            }
        };
        let needs = "recovery-keygen --custodians N needs --threshold K, --shares-out DIR and one --custodian NAME=HOW a share";
        let (Some(count), Some(threshold), Some(dir)) = (
            m.last(&CUSTODIANS, number(&CUSTODIANS))?,
            m.last(&THRESHOLD, number(&THRESHOLD))?,
            m.last(&SHARES_OUT, path)?,
        ) else {
            return Err(m.error(Problem::Required(needs.into())));
        };
        let custodians = m
            .values(&CUSTODIAN)
            .map(|v| Custodian::parse(v).map_err(|reason| invalid(&CUSTODIAN, v, reason)))
            .collect::<Result<Vec<_>, _>>()?;
        if custodians.len() != count {
            return Err(m.error(Problem::Required(format!(
                "--custodians {count} needs {count} --custodian flags, {} given",
                custodians.len()
            ))));
        }
        if let Some(twice) = custodians
            .iter()
            .enumerate()
            .find(|(i, c)| custodians[..*i].iter().any(|e| e.name == c.name))
        {
            return Err(invalid(
                &CUSTODIAN,
                &twice.1.spec(),
                "this name is given twice",
            ));
        }
        if !(1..=count).contains(&threshold) || count > 16 {
            return Err(m.error(Problem::Required(format!(
                "a threshold of {threshold} among {count} custodians: need 1 <= K <= N <= 16"
            ))));
        }
        RecoveryPrivate::Shares {
            threshold,
            dir,
            custodians,
        }
    } else {
        RecoveryPrivate::Identity {
            path: required(m, &IDENTITY, "recovery-keygen")?,
            protection: protection(m)?,
        }
    };
    Ok(RecoveryKeygenOptions {
        public,
        private,
        passphrase_fd,
    })
}

fn share(m: &Matches, step: Option<&str>) -> Result<ShareVerifyOptions, UsageError> {
    match step {
        Some("verify") => {}
        Some(step) => return Err(PROGRAM.unknown_command(&format!("share {step}"))),
        None => {
            return Err(m.error(Problem::Required(
                "share needs its step first: `sceau-recover share verify --share FILE`".into(),
            )));
        }
    }
    let shares: Vec<PathBuf> = m.values(&SHARE).map(path).collect::<Result<_, _>>()?;
    if shares.is_empty() {
        return Err(m.error(Problem::Required(
            "share verify needs --share FILE (one or more)".into(),
        )));
    }
    Ok(ShareVerifyOptions {
        shares,
        public: m.last(&PUBLIC, path)?,
        unlock: unlock(m)?,
    })
}

fn enrollment_keygen(m: &Matches) -> Result<EnrollmentKeygenOptions, UsageError> {
    Ok(EnrollmentKeygenOptions {
        identity: required(m, &ENROLLMENT_IDENTITY, "enrollment-keygen")?,
        public: required(m, &ENROLLMENT_PUBLIC, "enrollment-keygen")?,
        protection: protection(m)?,
        passphrase_fd: m.last(&PASSPHRASE_FD, fd_number)?,
    })
}

fn recover(m: &Matches) -> Result<RecoverOptions, UsageError> {
    let given: Vec<&Flag> = INPUTS.into_iter().filter(|f| m.present(f)).collect();
    if given.len() > 1 || given.iter().any(|f| m.values(f).count() > 1) {
        return Err(m.error(Problem::Conflict(
            "give one of --envelope, --etcd-snapshot, --etcd-json",
        )));
    }
    let input = match given.first().map(|f| f.name) {
        Some("--etcd-snapshot") => RecoverInput::EtcdSnapshot(required(m, &ETCD_SNAPSHOT, "")?),
        Some("--etcd-json") => RecoverInput::EtcdJson(required(m, &ETCD_JSON, "")?),
        _ => RecoverInput::Envelope(m.or_default(&ENVELOPE, None, path)?),
    };
    let shares: Vec<PathBuf> = m.values(&SHARE).map(path).collect::<Result<_, _>>()?;
    let key = match (m.last(&IDENTITY, path)?, shares.is_empty()) {
        (Some(identity), true) => RecoveryKey::Identity(identity),
        (None, false) => RecoveryKey::Shares(shares),
        (Some(_), false) => {
            return Err(m.error(Problem::Conflict("give --identity or --share, not both")));
        }
        (None, true) => {
            return Err(m.error(Problem::Required(
                "recover needs --identity FILE or the custodians' --share FILE flags".into(),
            )));
        }
    };
    Ok(RecoverOptions {
        key,
        unlock: unlock(m)?,
        input,
        members: m.values(&MEMBERS).map(path).collect::<Result<_, _>>()?,
        force: m.present(&FORCE),
    })
}

fn inventory(m: &Matches) -> Result<InventoryOptions, UsageError> {
    let snapshot = m.last(&ETCD_SNAPSHOT, path)?;
    let json = m.last(&ETCD_JSON, path)?;
    let input = match (snapshot, json) {
        (Some(file), None) => RecoverInput::EtcdSnapshot(file),
        (None, Some(file)) => RecoverInput::EtcdJson(file),
        (Some(_), Some(_)) => {
            return Err(m.error(Problem::Conflict(
                "give one of --etcd-snapshot, --etcd-json",
            )));
        }
        (None, None) => {
            return Err(m.error(Problem::Required(
                "inventory needs --etcd-snapshot FILE or --etcd-json FILE".into(),
            )));
        }
    };
    Ok(InventoryOptions {
        input,
        json: m.present(&JSON),
        values: m.present(&LIST_VALUES),
        require_current: m.last(&REQUIRE_CURRENT, |v| Ok(v.to_string()))?,
        kek_ledger: m.last(&KEK_LEDGER, path)?,
        current_members: m.last(&CURRENT_MEMBERS, path)?,
        current_recovery_key: m.last(&CURRENT_RECOVERY_KEY, path)?,
    })
}

fn enroll(m: &Matches, step: Option<&str>) -> Result<EnrollStep, UsageError> {
    let (parsed, takes): (Result<EnrollStep, UsageError>, &[&Flag]) = match step {
        Some(what @ "challenge") => (
            (|| {
                Ok(EnrollStep::Challenge {
                    request: required(m, &REQUEST, &format!("enroll {what}"))?,
                    challenge_out: required(m, &CHALLENGE_OUT, &format!("enroll {what}"))?,
                    expected_out: required(m, &EXPECTED_OUT, &format!("enroll {what}"))?,
                    ek_trust: ek_trust(m)?,
                })
            })(),
            &[
                &REQUEST,
                &CHALLENGE_OUT,
                &EXPECTED_OUT,
                &EK_ROOTS,
                &EK_INTERMEDIATES,
                &CRL,
                &EK_CERTIFICATE,
                &ACCEPT_ANY_EK,
            ],
        ),
        Some(what @ "verify") => (
            (|| {
                Ok(EnrollStep::Verify {
                    request: required(m, &REQUEST, &format!("enroll {what}"))?,
                    expected: required(m, &EXPECTED, &format!("enroll {what}"))?,
                    response: required(m, &RESPONSE, &format!("enroll {what}"))?,
                    member_out: required(m, &MEMBER_OUT, &format!("enroll {what}"))?,
                    enrollment_identity: m.last(&ENROLLMENT_IDENTITY, path)?,
                    unlock: unlock(m)?,
                    ek_trust: ek_trust(m)?,
                })
            })(),
            &[
                &REQUEST,
                &EXPECTED,
                &RESPONSE,
                &MEMBER_OUT,
                &ENROLLMENT_IDENTITY,
                &AGE_IDENTITY,
                &PASSPHRASE_FD,
                &EK_ROOTS,
                &EK_INTERMEDIATES,
                &CRL,
                &EK_CERTIFICATE,
                &ACCEPT_ANY_EK,
            ],
        ),
        Some(step) => return Err(PROGRAM.unknown_command(&format!("enroll {step}"))),
        None => {
            return Err(m.error(Problem::Required(
                "enroll needs its step first: `sceau-recover enroll challenge|verify …`".into(),
            )));
        }
    };
    let step = parsed?;
    refuse_other_steps_flags(m, &ENROLL, takes)?;
    Ok(step)
}

fn policy(m: &Matches, step: Option<&str>) -> Result<PolicyStep, UsageError> {
    let (parsed, takes): (Result<PolicyStep, UsageError>, &[&Flag]) = match step {
        Some(what @ "keygen") => (
            (|| {
                Ok(PolicyStep::Keygen {
                    private: required(m, &POLICY_PRIVATE, &format!("policy {what}"))?,
                    public: required(m, &POLICY_KEY, &format!("policy {what}"))?,
                    protection: protection(m)?,
                    passphrase_fd: m.last(&PASSPHRASE_FD, fd_number)?,
                })
            })(),
            &[
                &POLICY_PRIVATE,
                &POLICY_KEY,
                &PROTECT,
                &UNENCRYPTED_PRIVATE_KEY,
                &PASSPHRASE_FD,
            ],
        ),
        Some(what @ "sign") => (
            (|| {
                let pcrs = m.last(&PCRS, |v| Ok(v.to_string()))?.ok_or_else(|| {
                    m.error(Problem::Required(format!(
                        "policy {what} needs --pcrs LIST"
                    )))
                })?;
                let serial = m
                    .last(&SERIAL, |v| {
                        Serial::parse(v).map_err(|e| invalid(&SERIAL, v, e.to_string()))
                    })?
                    .ok_or_else(|| {
                        m.error(Problem::Required(format!(
                            "policy {what} needs --serial N: the number `sceau revoke-policy` \
                             takes to withdraw this boot state; one never used with this key"
                        )))
                    })?;
                Ok(PolicyStep::Sign {
                    private: required(m, &POLICY_PRIVATE, &format!("policy {what}"))?,
                    pcrs,
                    values: required(m, &VALUES, &format!("policy {what}"))?,
                    serial,
                    accept_policies_another_os_can_meet: m
                        .present(&ACCEPT_POLICIES_ANOTHER_OS_CAN_MEET),
                    out: required(m, &POLICY_OUT, &format!("policy {what}"))?,
                    unlock: unlock(m)?,
                })
            })(),
            &[
                &POLICY_PRIVATE,
                &PCRS,
                &VALUES,
                &SERIAL,
                &ACCEPT_POLICIES_ANOTHER_OS_CAN_MEET,
                &POLICY_OUT,
                &AGE_IDENTITY,
                &PASSPHRASE_FD,
            ],
        ),
        Some(what @ "show") => (
            (|| {
                Ok(PolicyStep::Show {
                    policy: required(m, &POLICY, &format!("policy {what}"))?,
                    key: m.last(&POLICY_KEY, path)?,
                })
            })(),
            &[&POLICY, &POLICY_KEY],
        ),
        Some(step) => return Err(PROGRAM.unknown_command(&format!("policy {step}"))),
        None => {
            return Err(m.error(Problem::Required(
                "policy needs its step first: `sceau-recover policy keygen|sign|show …`".into(),
            )));
        }
    };
    let step = parsed?;
    refuse_other_steps_flags(m, &POLICY_COMMAND, takes)?;
    Ok(step)
}

/// A flag of another step of `command` is an error, named in table order so
/// the error is stable.
fn refuse_other_steps_flags(
    m: &Matches,
    command: &CommandSpec,
    takes: &[&Flag],
) -> Result<(), UsageError> {
    match command
        .flags
        .iter()
        .find(|flag| m.present(flag) && !takes.iter().any(|t| t.name == flag.name))
    {
        Some(extra) => Err(m.error(Problem::UnknownOption {
            program: PROGRAM.name,
            command: command.name,
            option: extra.name.into(),
        })),
        None => Ok(()),
    }
}
mod inverse;

#[cfg(test)]
mod tests;
