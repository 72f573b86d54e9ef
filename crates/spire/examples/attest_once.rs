//! One whole `sceau_tpm` attestation in one process, agent side on a real
//! TPM and server side in software, through the encoded messages: the check
//! scripts/vm-e2e.sh runs in its guest to prove the agent's TPM work
//! (including TPM2_CertifyCreation on a second connection) through the
//! kernel's resource manager, `/dev/tpmrm0`, which no test on the host has.
//!
//! Usage: `attest_once TCTI rsa|ecc`. Prints one line, `attested …` or
//! `refused …`, and exits 0 only for an attestation that passed every
//! check, with a quote over PCRs 0 and 7.

use std::process::ExitCode;
use std::time::{Instant, SystemTime};

use sceau_spire::agent::tpm::{Attestation, EkAlgorithm, TpmSettings};
use sceau_spire::payload::{Challenge, ChallengeResponse, Payload};
use sceau_spire::server::config::{EkTrust, MeasuredBoot, ServerConfig};
use sceau_spire::server::event_log::Bank;
use sceau_spire::server::keys::Key;
use sceau_spire::server::structures::PublicArea;
use sceau_spire::server::verify::{check_payload, check_response, issue_challenge};

fn main() -> ExitCode {
    if let Err(error) = sceau_spire::agent::silence_tss_log() {
        eprintln!("attest_once: {error}");
        return ExitCode::FAILURE;
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(tcti), Some(algorithm)) = (args.first(), args.get(1)) else {
        eprintln!("usage: attest_once TCTI rsa|ecc");
        return ExitCode::from(2);
    };
    match attest(tcti, algorithm) {
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

fn attest(tcti: &str, algorithm: &str) -> Result<String, String> {
    let ek_algorithm = match algorithm {
        "rsa" => EkAlgorithm::Rsa2048,
        "ecc" => EkAlgorithm::EccP256,
        other => return Err(format!("unknown EK algorithm {other}")),
    };
    let settings = TpmSettings {
        tcti: tcti.parse().map_err(|e| format!("{e}"))?,
        ek_algorithm,
        event_log_path: None,
    };
    let started = Instant::now();
    let (mut agent, payload) = Attestation::begin(&settings).map_err(|e| e.to_string())?;
    let payload = Payload::decode(&payload.encode()).map_err(|e| e.to_string())?;
    let ek = PublicArea::parse(&payload.ek_public)
        .map_err(|e| e.to_string())
        .and_then(|area| Key::from_tpm(&area.key).map_err(|e| e.to_string()))?;
    let config = ServerConfig {
        trust_domain: "example.org".into(),
        ek_hashes: Some([ek.pub_hash()].into_iter().collect()),
        trust_store: None,
        ek_trust: EkTrust::Either,
        quote_pcrs: vec![0, 7],
        measured_boot: MeasuredBoot::Off,
        measured_boot_bank: Bank::Sha256,
    };
    let verified =
        check_payload(&config, &payload, SystemTime::now()).map_err(|e| e.to_string())?;
    let (pending, challenge) = issue_challenge(&config, verified).map_err(|e| e.to_string())?;
    let challenge = Challenge::decode(&challenge.encode()).map_err(|e| e.to_string())?;
    let response = agent.answer(&challenge).map_err(|e| e.to_string())?;
    let response = ChallengeResponse::decode(&response.encode()).map_err(|e| e.to_string())?;
    let selectors = check_response(pending, &response).map_err(|e| e.to_string())?;
    drop(agent);
    Ok(format!(
        "{algorithm} EK {} in {} ms, {} selectors",
        &ek.pub_hash()[..16],
        started.elapsed().as_millis(),
        selectors.len()
    ))
}
