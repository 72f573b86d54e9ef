//! The `sceau` binary: parses the command line and runs one command, each in
//! its own module under `commands/` (`serve` is the daemon's start-up
//! sequence, written as the checklist of docs/hardening.md).
//!
//! A usage error (a bare `sceau` included) exits 2 with a one-line error and
//! the command's usage line; any other failure is logged and exits 1.
#![forbid(unsafe_code)]

mod commands;

use std::process::ExitCode;

use sceau::cli::{self, Command};

/// Every heap block is wiped before it is freed, so DEK bytes in gRPC, h2 and
/// prost buffers do not outlive their call.
#[global_allocator]
static ALLOCATOR: sceau_sys::alloc::WipeOnFree = sceau_sys::alloc::WipeOnFree;

/// The exit status of a usage error, as for most Unix tools.
const USAGE_ERROR: u8 = 2;

fn main() -> ExitCode {
    let journald = std::env::var_os("JOURNAL_STREAM").is_some();
    let log_level = std::env::var_os("SCEAU_LOG").map(|v| v.to_string_lossy().into_owned());
    match sceau::logging::level_from_env(log_level.as_deref()) {
        Ok(level) => sceau::logging::init(level, journald),
        Err(error) => {
            eprintln!("sceau: {error}");
            return ExitCode::from(USAGE_ERROR);
        }
    }
    #[cfg(feature = "insecure-test-hooks")]
    sceau_sys::hooks::disable_from_environment();
    let env_tcti = std::env::var(cli::TCTI_ENV).ok();
    let command = match cli::utf8_args(std::env::args_os().skip(1))
        .and_then(|args| cli::parse(&args, env_tcti.as_deref()))
    {
        Ok(command) => command,
        Err(error) => {
            eprintln!("sceau: {error}");
            eprintln!("{}", cli::PROGRAM.usage_line(error.command));
            return ExitCode::from(USAGE_ERROR);
        }
    };
    let result = match command {
        Command::Help(text) => {
            print!("{text}");
            Ok(())
        }
        Command::Version => {
            print!("{}", sceau::build_info::BUILD.version_text());
            Ok(())
        }
        Command::Generate(kind) => {
            print!("{}", cli::PROGRAM.generate(kind));
            Ok(())
        }
        Command::Serve(options) => commands::serve::run(*options),
        Command::Check(options) => commands::check::run(&options),
        Command::SelfTest(options) => commands::selftest::run(&options),
        Command::SrkPublic(options) => commands::srk_public::run(&options),
        Command::Pcrs(options) => commands::pcrs::run(&options),
        Command::RevokePolicy(options) => commands::revoke_policy::run(&options),
        Command::Kek(options) => commands::kek::run(&options),
        Command::Enroll(step) => commands::enroll::run(&step),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}
