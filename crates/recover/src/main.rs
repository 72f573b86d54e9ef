//! `sceau-recover`: sceau's offline tools. They need no TPM, and the binary
//! links no tpm2-tss library, so it runs on any Linux machine (CI checks it
//! with `ldd` and runs it where the tss2 libraries cannot be found).
//!
//! - `recover`: opens envelopes and etcd contents with the recovery identity;
//! - `recovery-keygen`: makes that identity and its public half;
//! - `enroll challenge|verify`: the verifier's side of enrollment.

use std::process::ExitCode;

use anyhow::{Context as _, bail};
use sceau_format::key_id::{KeyId, hex};
use sceau_format::members::member_file;
use sceau_format::recovery_key::RecoveryIdentity;
use sceau_recover::cli::{
    self, Command, EnrollStep, RecoverInput, RecoverOptions, RecoveryKeygenOptions,
};

fn main() -> ExitCode {
    let args = match cli::utf8_args(std::env::args_os().skip(1)).and_then(|a| cli::parse(&a)) {
        Ok(command) => command,
        Err(error) => {
            eprintln!("sceau-recover: {error}");
            eprintln!("{}", cli::PROGRAM.usage_line(error.command));
            return ExitCode::from(2);
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
    match command {
        Command::Help(text) => print!("{text}"),
        Command::Version => println!("sceau-recover {}", env!("CARGO_PKG_VERSION")),
        Command::RecoveryKeygen(options) => recovery_keygen(&options)?,
        Command::Recover(options) => recover(&options)?,
        Command::Enroll(step) => enroll(&step)?,
    }
    Ok(())
}

fn enroll(step: &EnrollStep) -> anyhow::Result<()> {
    use sceau_format::enrollment::{self, Request};
    let read = |path: &std::path::Path| {
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
    };
    match step {
        EnrollStep::Challenge {
            request,
            challenge_out,
            expected_out,
        } => {
            let request = Request::parse(&read(request)?)?;
            match request.check_certificate()? {
                Some(fingerprint) => eprintln!(
                    "EK certificate names the EK; SHA-256 {fingerprint}: check its issuer chain against the TPM manufacturer's CA (docs/ha.md)"
                ),
                None => eprintln!(
                    "no EK certificate: the answer proves the SRK and EK share a TPM, not that the TPM is genuine"
                ),
            }
            let (challenge, expected) = enrollment::challenge_files(&request);
            write_new(challenge_out, 0o644, challenge.as_bytes())?;
            write_new(expected_out, 0o600, expected.as_bytes())?;
        }
        EnrollStep::Verify {
            request,
            expected,
            response,
            member_out,
        } => {
            let parsed = Request::parse(&read(request)?)?;
            enrollment::verify(&parsed, &read(expected)?, &read(response)?)?;
            let node_key_id = KeyId::from_srk_name(parsed.srk.name());
            write_new(
                member_out,
                0o644,
                member_file(&parsed.srk, &node_key_id).as_bytes(),
            )?;
            eprintln!(
                "enrolled: SRK {} shares a TPM with EK {}",
                hex(parsed.srk.name()),
                hex(parsed.ek.name())
            );
        }
    }
    Ok(())
}

/// Creates a file that must not exist yet, with `mode`.
fn write_new(path: &std::path::Path, mode: u32, bytes: &[u8]) -> anyhow::Result<()> {
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

/// Writes the two halves of a new recovery key; never overwrites a file, and
/// never leaves one half without the other: an identity whose public file
/// was not written would be a private key nobody knows to keep.
fn recovery_keygen(options: &RecoveryKeygenOptions) -> anyhow::Result<()> {
    if options.identity == options.public {
        bail!("--identity and --public name the same file; give two different paths");
    }
    // Checked before anything is written; O_EXCL below still settles a race.
    for path in [&options.identity, &options.public] {
        if path.symlink_metadata().is_ok() {
            bail!(
                "{} already exists; recovery-keygen never overwrites a key: move it away or choose another path",
                path.display()
            );
        }
    }
    let identity = RecoveryIdentity::generate();
    write_new(
        &options.identity,
        0o600,
        identity.identity_file().as_bytes(),
    )?;
    if let Err(error) = write_new(&options.public, 0o644, identity.public_file().as_bytes()) {
        // The identity was created by this run (O_EXCL), so it is ours to
        // remove; a failure to do so is reported with the first error.
        return Err(match std::fs::remove_file(&options.identity) {
            Ok(()) => error.context(format!(
                "no key written ({} removed again)",
                options.identity.display()
            )),
            Err(removal) => error.context(format!(
                "{} was written but could not be removed ({removal}): delete it by hand",
                options.identity.display()
            )),
        });
    }
    eprintln!(
        "recovery key {} written: identity {} (keep offline), public {}",
        hex(identity.public().name()),
        options.identity.display(),
        options.public.display()
    );
    Ok(())
}

/// `sceau recover`: no TPM, no sandbox; an offline operator tool.
fn recover(options: &RecoverOptions) -> anyhow::Result<()> {
    use std::io::{IsTerminal as _, Read as _, Write as _};
    if std::io::stdout().is_terminal() && !options.force {
        bail!("refusing to write plaintext to a terminal; redirect the output or pass --force");
    }
    let identity = RecoveryIdentity::parse(&read_identity(&options.identity)?)?;
    let read_input = |path: &std::path::Path| -> anyhow::Result<Vec<u8>> {
        let mut bytes = Vec::new();
        if path == std::path::Path::new("-") {
            std::io::stdin().read_to_end(&mut bytes)?;
        } else {
            bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        }
        Ok(bytes)
    };
    match &options.input {
        RecoverInput::Envelope(path) => {
            let input = read_input(path)?;
            let dek = open_envelope_input(&identity, &input)?;
            std::io::stdout().write_all(&dek)?;
        }
        RecoverInput::EtcdSnapshot(path) => {
            let values = sceau_recover::etcd::values_from_snapshot(&read_input(path)?)?;
            print_secrets(&identity, &values)?;
        }
        RecoverInput::EtcdJson(path) => {
            let text = String::from_utf8(read_input(path)?).context("etcdctl JSON is not UTF-8")?;
            let values = sceau_recover::etcd::values_from_etcdctl_json(&text)?;
            print_secrets(&identity, &values)?;
        }
    }
    Ok(())
}

/// Reads the recovery identity, refusing a file that group or others can
/// access: it holds the key that opens every envelope, and a loose mode is
/// how a copy of it leaks. The mode is taken from the opened file, not the
/// path, so it is the mode of the bytes read.
fn read_identity(path: &std::path::Path) -> anyhow::Result<zeroize::Zeroizing<String>> {
    use std::io::Read as _;
    use std::os::unix::fs::PermissionsExt as _;
    let mut file =
        std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let mode = file
        .metadata()
        .with_context(|| format!("reading {}", path.display()))?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        bail!(
            "{path} holds the recovery private key but has mode {mode:04o} (group or others have access): run `chmod 600 {path}` and check who may have copied it",
            path = path.display(),
            mode = mode & 0o7777,
        );
    }
    let mut text = zeroize::Zeroizing::new(String::new());
    file.read_to_string(&mut text)
        .with_context(|| format!("reading {}", path.display()))?;
    Ok(text)
}

/// A raw ciphertext, or a whole stored etcd value (`k8s:enc:kms:v2:…`), which
/// also carries the annotations that envelopes of five or more recipients need.
fn open_envelope_input(
    identity: &RecoveryIdentity,
    input: &[u8],
) -> anyhow::Result<zeroize::Zeroizing<Vec<u8>>> {
    use sceau_recover::kubernetes::parse_stored_value;
    match parse_stored_value(input)? {
        Some(object) => {
            let annotations = object.annotations.into_iter().collect();
            Ok(identity.open(&object.encrypted_dek_source, &annotations)?)
        }
        None => Ok(identity.open(input, &Default::default())?),
    }
}

fn print_secrets(
    identity: &RecoveryIdentity,
    values: &[sceau_recover::etcd::StoredValue],
) -> anyhow::Result<()> {
    let summary = sceau_recover::report::recover_secrets(
        identity,
        values,
        &mut std::io::stdout().lock(),
        &mut std::io::stderr().lock(),
    )?;
    eprintln!(
        "{} Secrets recovered, {} values skipped, {} failed",
        summary.printed, summary.skipped, summary.failed
    );
    if summary.failed > 0 {
        bail!("{} encrypted values could not be recovered", summary.failed);
    }
    Ok(())
}
