//! An envelope kept across a reboot, for the VM test's boot-binding checks
//! (tests/vm/guest-checks.sh): `sceau check` makes and opens its envelope in
//! one call, this tool makes one now and opens it later.
//!
//! ```text
//! kms_envelope encrypt SOCKET FILE   # a random 32-byte DEK, Encrypt; FILE keeps it and the reply
//! kms_envelope decrypt SOCKET FILE   # Decrypt FILE's envelope; must give FILE's DEK back
//! kms_envelope flood SOCKET N/R      # N Status calls with R refused Decrypts among them
//! ```
//!
//! `flood` is the audit trail's load: Status answers without the TPM, so
//! thousands of successful calls a second reach the journal even under
//! TCG, and each refused Decrypt (an unknown key_id, refused before the
//! TPM) must leave its record among them. It prints `flood: N status, R
//! refused in S s`.
//!
//! Each prints one line: `status: healthz=… key_id=…`, then
//! `encrypt: ok (…)` / `decrypt: ok (…)` and exit 0, or
//! `encrypt|decrypt: failed: CODE: MESSAGE` and exit 1 (the gRPC code and
//! sceau's message, e.g. `FailedPrecondition: policy-mismatch`). FILE is
//! text: `dek HEX`, `key_id ID`, `ciphertext HEX`. Test-only: the DEK is
//! written in the clear.

use std::path::Path;
use std::process::ExitCode;

use sceau_format::key_id::hex;
use sceau_testkit::{random_bytes, rpc};

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

fn field<'a>(file: &'a str, name: &str) -> Option<&'a str> {
    file.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
}

async fn run(op: &str, socket: &Path, file: &Path) -> Result<String, String> {
    let mut client = rpc::connect(socket).await;
    let status = rpc::status(&mut client).await;
    println!(
        "status: healthz={} key_id={}",
        status.healthz, status.key_id
    );
    let failed = |s: tonic::Status| format!("{op}: failed: {:?}: {}", s.code(), s.message());
    match op {
        "encrypt" => {
            let dek = random_bytes(32);
            let reply = rpc::encrypt(&mut client, &dek).await.map_err(failed)?;
            if !reply.annotations.is_empty() {
                return Err(format!("encrypt: annotations {:?}", reply.annotations));
            }
            let text = format!(
                "dek {}\nkey_id {}\nciphertext {}\n",
                hex(&dek),
                reply.key_id,
                hex(&reply.ciphertext)
            );
            std::fs::write(file, text).map_err(|e| format!("writing {}: {e}", file.display()))?;
            Ok(format!(
                "encrypt: ok ({}-byte envelope, key_id {})",
                reply.ciphertext.len(),
                reply.key_id
            ))
        }
        "decrypt" => {
            let text = std::fs::read_to_string(file)
                .map_err(|e| format!("reading {}: {e}", file.display()))?;
            let malformed = || format!("{}: not a kms_envelope file", file.display());
            let dek = field(&text, "dek").and_then(unhex).ok_or_else(malformed)?;
            let key_id = field(&text, "key_id").ok_or_else(malformed)?;
            let ciphertext = field(&text, "ciphertext")
                .and_then(unhex)
                .ok_or_else(malformed)?;
            let opened = rpc::decrypt(&mut client, &ciphertext, key_id)
                .await
                .map_err(failed)?;
            if opened != dek {
                return Err("decrypt: returned other bytes than were sealed".into());
            }
            Ok(format!(
                "decrypt: ok ({}-byte envelope, key_id {key_id})",
                ciphertext.len()
            ))
        }
        "flood" => {
            let spec = file.to_string_lossy();
            let (calls, refusals) = spec
                .split_once('/')
                .and_then(|(n, r)| Some((n.parse::<u64>().ok()?, r.parse::<u64>().ok()?)))
                .filter(|(n, r)| *r > 0 && n >= r)
                .ok_or_else(|| format!("flood: {spec} is not N/R with N >= R > 0"))?;
            let every = calls / refusals;
            let started = std::time::Instant::now();
            let mut refused = 0;
            for i in 0..calls {
                rpc::status(&mut client).await;
                if i % every == 0 && refused < refusals {
                    let answer =
                        rpc::decrypt(&mut client, &[0x5a; 64], "flood-unknown-key-id").await;
                    if answer.is_ok() {
                        return Err("flood: a Decrypt for an unknown key_id was answered".into());
                    }
                    refused += 1;
                }
            }
            Ok(format!(
                "flood: {calls} status, {refused} refused in {:.1} s",
                started.elapsed().as_secs_f64()
            ))
        }
        _ => Err(format!("unknown operation {op}")),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [op, socket, file] = args.as_slice() else {
        eprintln!("usage: kms_envelope encrypt|decrypt SOCKET FILE, or flood SOCKET N/R");
        return ExitCode::from(2);
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match runtime.block_on(run(op, Path::new(socket), Path::new(file))) {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(line) => {
            println!("{line}");
            ExitCode::FAILURE
        }
    }
}
