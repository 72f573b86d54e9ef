//! `sceau-recover`: sceau's offline tools. They need no TPM, and the binary
//! links no tpm2-tss library, so it runs on any Linux machine (CI checks it
//! with `ldd` and runs it where the tss2 libraries cannot be found).
//!
//! - `recover`: opens envelopes and etcd contents with the recovery identity;
//! - `recovery-keygen`: makes that identity and its public half, the
//!   identity encrypted or split among custodians;
//! - `share verify`: checks custodians' shares without combining them;
//! - `enroll challenge|verify`: the verifier's side of enrollment;
//! - `enrollment-keygen`: the key that endorses member files;
//! - `policy keygen|sign|show`: the key that signs boot states, and its
//!   signatures.
//!
//! This file parses and dispatches; each command is a module of `commands/`.
//! A usage error (a bare `sceau-recover` included) exits 2 with the error
//! and the command's usage line; any other failure exits 1.

mod commands;

use std::process::ExitCode;

use sceau_recover::cli::{self, Command};

/// Every heap block is wiped before it is freed, and no reallocation grows a
/// block in place: the tools read and write key files, shares and
/// passphrases through buffers that grow (read_to_end, armor, age's
/// stream), and each freed copy would otherwise keep its bytes.
#[global_allocator]
static ALLOCATOR: sceau_sys::alloc::WipeOnFree = sceau_sys::alloc::WipeOnFree;

/// The exit status of a usage error, as for most Unix tools.
const USAGE_ERROR: u8 = 2;

fn main() -> ExitCode {
    let args = match cli::utf8_args(std::env::args_os().skip(1)).and_then(|a| cli::parse(&a)) {
        Ok(command) => command,
        Err(error) => {
            eprintln!("sceau-recover: {error}");
            eprintln!("{}", cli::PROGRAM.usage_line(error.command));
            return ExitCode::from(USAGE_ERROR);
        }
    };
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sceau-recover: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(command: Command) -> anyhow::Result<()> {
    // The tools hold private keys: no core file, and /proc/PID/mem for
    // root only. A failure here only loses that protection.
    if let Err(error) = sceau_sys::forbid_core_dumps() {
        eprintln!("sceau-recover: warning: core dumps stay possible: {error}");
    }
    let holds_a_private_key = matches!(
        command,
        Command::RecoveryKeygen(_)
            | Command::Recover(_)
            | Command::ShareVerify(_)
            | Command::EnrollmentKeygen(_)
            | Command::Enroll(cli::EnrollStep::Verify {
                enrollment_identity: Some(_),
                ..
            })
            | Command::Policy(cli::PolicyStep::Keygen { .. } | cli::PolicyStep::Sign { .. })
    );
    if holds_a_private_key && let Err(error) = sceau_sys::lock_all_memory() {
        eprintln!(
            "sceau-recover: warning: memory not locked against swap ({error}): run with CAP_IPC_LOCK (root outside a restricted container), or on a machine without swap"
        );
    }
    match command {
        Command::Help(text) => print!("{text}"),
        Command::Version => print!("{}", cli::BUILD.version_text()),
        Command::Generate(kind) => print!("{}", cli::PROGRAM.generate(kind)),
        Command::RecoveryKeygen(options) => commands::recovery_keygen::run(&options)?,
        Command::Recover(options) => commands::recover::run(&options)?,
        Command::Inventory(options) => commands::inventory::run(&options)?,
        Command::Enroll(step) => commands::enroll::run(&step)?,
        Command::EnrollmentKeygen(options) => commands::enrollment_keygen::run(&options)?,
        Command::Policy(step) => commands::policy::run(&step)?,
        Command::ShareVerify(options) => commands::share::verify(&options)?,
    }
    Ok(())
}
