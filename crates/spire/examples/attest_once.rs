//! One whole `sceau_tpm` attestation in one process, agent side on a real
//! TPM and server side in software, through the encoded messages: the check
//! scripts/vm-e2e.sh runs in its guest to prove the agent's TPM work
//! (including TPM2_CertifyCreation on a second connection) through the
//! kernel's resource manager, `/dev/tpmrm0`, which no test on the host has.
//!
//! Usage: `attest_once TCTI rsa|ecc [--event-log PATH]`. Prints one line,
//! `attested …` or `refused: …`, and exits 0 only for an attestation that
//! passed every check.
//!
//! Without `--event-log` the quote is over PCRs 0 and 7 and measured boot
//! is off. With it the agent sends the firmware event log at PATH (in the
//! guest, the kernel's copy of what the UEFI firmware measured) and the
//! server requires it (`measured_boot = "required"`, the SHA-256 bank,
//! PCRs 0–7 quoted: `server::config::pcrs_to_quote`, as the server does): a log that
//! does not replay to the quoted PCRs is refused, the refusal naming the
//! PCR, and an accepted one adds the log's selectors (`secureboot:`,
//! `boot_app:`, `eventlog:`) to the `attested` line, after the log's size.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Instant, SystemTime};

use sceau_spire::agent::tpm::{Attestation, EkAlgorithm, TpmSettings};
use sceau_spire::payload::{Challenge, ChallengeResponse, Payload};
use sceau_spire::server::config::{MeasuredBoot, ServerConfig, pcrs_to_quote};
use sceau_spire::server::keys::Key;
use sceau_spire::server::structures::PublicArea;
use sceau_spire::server::verify::{check_payload, check_response, issue_challenge};

const USAGE: &str = "usage: attest_once TCTI rsa|ecc [--event-log PATH]";

fn main() -> ExitCode {
    if let Err(error) = sceau_spire::agent::silence_tss_log() {
        eprintln!("attest_once: {error}");
        return ExitCode::FAILURE;
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let event_log = match args.get(2..).unwrap_or_default() {
        [] => None,
        [flag, path] if flag == "--event-log" => Some(PathBuf::from(path)),
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let (Some(tcti), Some(algorithm)) = (args.first(), args.get(1)) else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    match attest(tcti, algorithm, event_log) {
        Ok(line) => {
            println!("attested {line}");
            ExitCode::SUCCESS
        }
        Err(why) => {
            println!("refused: {why}");
            ExitCode::FAILURE
        }
    }
}

fn attest(tcti: &str, algorithm: &str, event_log: Option<PathBuf>) -> Result<String, String> {
    let ek_algorithm = match algorithm {
        "rsa" => EkAlgorithm::Rsa2048,
        "ecc" => EkAlgorithm::EccP256,
        other => return Err(format!("unknown EK algorithm {other}")),
    };
    let measured = event_log.is_some();
    let settings = TpmSettings {
        tcti: tcti.parse().map_err(|e| format!("{e}"))?,
        ek_algorithm,
        event_log_path: event_log,
    };
    let started = Instant::now();
    let (mut agent, payload) = Attestation::begin(&settings).map_err(|e| e.to_string())?;
    let payload = Payload::decode(&payload.encode()).map_err(|e| e.to_string())?;
    let ek = PublicArea::parse(&payload.ek_public)
        .map_err(|e| e.to_string())
        .and_then(|area| Key::from_tpm(&area.key).map_err(|e| e.to_string()))?;
    let measured_boot = if measured {
        MeasuredBoot::Required
    } else {
        MeasuredBoot::Off
    };
    let quote_pcrs = pcrs_to_quote(vec![0, 7], measured_boot);
    let config = ServerConfig {
        measured_boot,
        ..ServerConfig::with_trust(
            "example.org",
            Some([ek.pub_hash()].into_iter().collect()),
            None,
            quote_pcrs,
        )
    };
    let verified =
        check_payload(&config, &payload, SystemTime::now()).map_err(|e| e.to_string())?;
    let (pending, challenge) = issue_challenge(&config, verified).map_err(|e| e.to_string())?;
    let challenge = Challenge::decode(&challenge.encode()).map_err(|e| e.to_string())?;
    let response = agent.answer(&challenge).map_err(|e| e.to_string())?;
    let response = ChallengeResponse::decode(&response.encode()).map_err(|e| e.to_string())?;
    let log_len = response.event_log.len();
    let selectors = check_response(pending, &response).map_err(|e| e.to_string())?;
    drop(agent);
    let mut line = format!(
        "{algorithm} EK {} in {} ms, {} selectors",
        &ek.pub_hash()[..16],
        started.elapsed().as_millis(),
        selectors.len()
    );
    if measured {
        // The guest script greps these; the pcr: selectors are left out
        // (eight digests nobody compares with anything here).
        let boot: Vec<&str> = selectors
            .iter()
            .map(String::as_str)
            .filter(|s| {
                s.starts_with("secureboot:")
                    || s.starts_with("boot_app:")
                    || s.starts_with("eventlog:")
            })
            .collect();
        line.push_str(&format!("; event log {log_len} bytes: {}", boot.join(" ")));
    }
    Ok(line)
}
