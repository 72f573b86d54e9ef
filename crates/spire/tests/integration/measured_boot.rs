//! Measured boot on swtpm: a synthetic firmware event log (crypto-agile,
//! SHA-256) whose digests the test extends into the swtpm's PCRs, read by
//! the agent from its `event_log_path` after the quote, and checked by the
//! server as `ServerConfig::parse` configures it (`measured_boot`), through
//! the real encoded messages.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use sceau_spire::agent::tpm::{Attestation, EkAlgorithm, TpmSettings};
use sceau_spire::payload::{Challenge, ChallengeResponse, Payload};
use sceau_spire::plugin::CoreConfig;
use sceau_spire::server::config::ServerConfig;
use sceau_spire::server::event_log::{Bank, PcrCheckError};
use sceau_spire::server::keys::Key;
use sceau_spire::server::structures::PublicArea;
use sceau_spire::server::verify::{Refusal, check_payload, check_response, issue_challenge};
use sceau_testkit::{Swtpm, TempDir, Tpm2Tools};

use crate::synthetic_log::{Log, SHIM, hex};

/// Extends every event's digest into the TPM's SHA-256 bank, as the
/// firmware would have.
fn extend_into(log: &Log, tools: &Tpm2Tools) {
    for argument in log.pcrextend_args() {
        tools.run("tpm2_pcrextend", &[&argument]);
    }
}

struct Node {
    _dir: TempDir,
    tpm: Swtpm,
    dir: PathBuf,
}

impl Node {
    fn start(name: &str) -> Self {
        let dir = TempDir::new(name);
        let tpm = Swtpm::start(dir.path());
        let path = dir.path().to_path_buf();
        Node {
            _dir: dir,
            tpm,
            dir: path,
        }
    }

    fn tools(&self) -> Tpm2Tools {
        Tpm2Tools::new(&self.tpm, &self.dir)
    }

    fn write_log(&self, bytes: &[u8]) -> PathBuf {
        let path = self.dir.join("binary_bios_measurements");
        std::fs::write(&path, bytes).unwrap();
        path
    }

    /// One attestation: the agent with `event_log_path`, the server with
    /// `server_hcl` (after the node's EK hash on its allow list).
    fn attest(
        &self,
        event_log_path: Option<&Path>,
        server_hcl: &str,
    ) -> Result<Vec<String>, Refusal> {
        let settings = TpmSettings {
            tcti: self.tpm.tcti().parse().unwrap(),
            ek_algorithm: EkAlgorithm::EccP256,
            event_log_path: event_log_path.map(Path::to_path_buf),
        };
        let (mut agent, payload) = Attestation::begin(&settings).expect("the agent's payload");
        let ek = Key::from_tpm(&PublicArea::parse(&payload.ek_public).unwrap().key).unwrap();
        let hashes = self.dir.join("ek-hashes");
        std::fs::write(&hashes, format!("{}\n", ek.pub_hash())).unwrap();
        let core = CoreConfig {
            trust_domain: "example.org".into(),
        };
        let config = ServerConfig::parse(
            &core,
            &format!("ek_hashes_path = \"{}\"\n{server_hcl}", hashes.display()),
        )
        .expect("the server's configuration");
        let payload = Payload::decode(&payload.encode()).unwrap();
        let verified = check_payload(&config, &payload, SystemTime::now())?;
        let (pending, challenge) = issue_challenge(&config, verified)?;
        let challenge = Challenge::decode(&challenge.encode()).unwrap();
        let response = agent.answer(&challenge).expect("the agent's TPM answers");
        let response = ChallengeResponse::decode(&response.encode()).unwrap();
        check_response(pending, &response)
    }
}

const REQUIRED: &str = "measured_boot = \"required\"\nmeasured_boot_bank = \"sha256\"";
const OPTIONAL: &str = "measured_boot = \"optional\"";

fn log_selectors(selectors: &[String]) -> Vec<&String> {
    selectors
        .iter()
        .filter(|s| {
            s.starts_with("secureboot:") || s.starts_with("boot_app:") || s.starts_with("eventlog:")
        })
        .collect()
}

#[test]
fn a_log_that_replays_to_the_quote_gives_its_selectors() {
    let node = Node::start("sceau-spire-mb-good");
    let log = Log::secure_boot();
    extend_into(&log, &node.tools());
    let path = node.write_log(&log.bytes);
    let selectors = node
        .attest(Some(&path), REQUIRED)
        .unwrap_or_else(|refusal| panic!("refused: {refusal}"));
    assert_eq!(
        log_selectors(&selectors),
        [
            "secureboot:enabled",
            &format!("boot_app:sha256:{}", hex(&SHIM)),
            "eventlog:complete",
        ],
        "{selectors:?}"
    );
    // PCRs 0-7 were added to the quote without quote_pcrs.
    for pcr in 0..=7 {
        assert!(
            selectors
                .iter()
                .any(|s| s.starts_with(&format!("pcr:sha256:{pcr}:"))),
            "PCR {pcr}: {selectors:?}"
        );
    }
}

#[test]
fn a_log_altered_in_one_byte_is_refused_naming_the_pcr() {
    let node = Node::start("sceau-spire-mb-altered");
    let log = Log::secure_boot();
    extend_into(&log, &node.tools());
    let mut altered = log.bytes.clone();
    // The shim's digest, which PCR 4 is extended with: another shim.
    let shim = *log.digest_offsets.last().unwrap();
    altered[shim] ^= 1;
    let path = node.write_log(&altered);
    let refusal = node.attest(Some(&path), REQUIRED).unwrap_err();
    assert!(
        matches!(
            &refusal,
            Refusal::EventLog(PcrCheckError::Mismatch {
                pcr: 4,
                bank: Bank::Sha256,
                ..
            })
        ),
        "{refusal:?}"
    );
    let line = refusal.to_string();
    assert!(
        line.starts_with("the event log does not match the quote: PCR 4 (sha256): quoted "),
        "{line}"
    );
    assert!(!line.contains('\n'));
}

#[test]
fn no_log_is_refused_when_required_and_attests_without_its_selectors_when_optional() {
    let node = Node::start("sceau-spire-mb-absent");
    extend_into(&Log::secure_boot(), &node.tools());
    // The agent finds no file there, and sends none.
    let missing = node.dir.join("no-such-log");
    assert_eq!(
        node.attest(Some(&missing), REQUIRED),
        Err(Refusal::NoEventLog)
    );
    assert_eq!(node.attest(None, REQUIRED), Err(Refusal::NoEventLog));
    let selectors = node
        .attest(Some(&missing), OPTIONAL)
        .unwrap_or_else(|refusal| panic!("refused: {refusal}"));
    assert!(log_selectors(&selectors).is_empty(), "{selectors:?}");
    assert!(selectors.iter().any(|s| s.starts_with("pcr:sha256:7:")));
}

// swtpm's PCRs 0-7 were never extended: all zeros, which a log without boot
// events replays to exactly. The bank says nothing about a boot.
#[test]
fn an_unextended_bank_is_refused_even_when_the_log_replays_to_it() {
    let node = Node::start("sceau-spire-mb-unextended");
    let path = node.write_log(&Log::new().bytes);
    assert_eq!(
        node.attest(Some(&path), OPTIONAL),
        Err(Refusal::Unextended {
            pcr: 0,
            bank: Bank::Sha256
        })
    );
}

// A server with measured boot off ignores a log, and the agent sends none
// unless the quote covers PCRs 0-7.
#[test]
fn with_measured_boot_off_the_log_changes_nothing() {
    let node = Node::start("sceau-spire-mb-off");
    let path = node.write_log(&Log::new().bytes);
    let selectors = node
        .attest(Some(&path), "quote_pcrs = [0, 7]")
        .unwrap_or_else(|refusal| panic!("refused: {refusal}"));
    assert!(log_selectors(&selectors).is_empty(), "{selectors:?}");
}
