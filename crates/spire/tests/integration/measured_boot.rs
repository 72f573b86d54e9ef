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
use sceau_spire::server::event_log::event_type::{
    EV_EFI_BOOT_SERVICES_APPLICATION, EV_EFI_VARIABLE_DRIVER_CONFIG, EV_NO_ACTION, EV_SEPARATOR,
};
use sceau_spire::server::event_log::{ALG_SHA256, Bank, PcrCheckError};
use sceau_spire::server::keys::Key;
use sceau_spire::server::structures::PublicArea;
use sceau_spire::server::verify::{Refusal, check_payload, check_response, issue_challenge};
use sceau_testkit::{Swtpm, TempDir, Tpm2Tools};
use sha2::{Digest as _, Sha256};

/// The shim's Authenticode hash, as the firmware would measure it.
const SHIM: [u8; 32] = [0x51; 32];
/// EFI_GLOBAL_VARIABLE (8be4df61-93ca-11d2-aa0d-00e098032b8c) as EFI_GUID.
const EFI_GLOBAL_VARIABLE: [u8; 16] = [
    0x61, 0xdf, 0xe4, 0x8b, 0xca, 0x93, 0xd2, 0x11, 0xaa, 0x0d, 0x00, 0xe0, 0x98, 0x03, 0x2b, 0x8c,
];

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A crypto-agile log with SHA-256 digests only, written independently of
/// the parser (TCG PC Client PFP, "Event Logging").
struct Log {
    bytes: Vec<u8>,
    /// (PCR, digest) of every extending event, in order, to extend into
    /// the TPM.
    extends: Vec<(u8, [u8; 32])>,
    /// Where each extending event's SHA-256 digest starts in `bytes`.
    digest_offsets: Vec<usize>,
}

impl Log {
    fn new() -> Self {
        let mut spec = b"Spec ID Event03\0".to_vec();
        spec.extend(0u32.to_le_bytes()); // platformClass
        spec.extend([0, 2, 0, 2]); // minor, major, errata, uintnSize
        spec.extend(1u32.to_le_bytes());
        spec.extend(ALG_SHA256.to_le_bytes());
        spec.extend(32u16.to_le_bytes());
        spec.push(0); // vendorInfoSize
        let mut bytes = Vec::new();
        bytes.extend(0u32.to_le_bytes());
        bytes.extend(EV_NO_ACTION.to_le_bytes());
        bytes.extend([0; 20]);
        bytes.extend((spec.len() as u32).to_le_bytes());
        bytes.extend(spec);
        Self {
            bytes,
            extends: Vec::new(),
            digest_offsets: Vec::new(),
        }
    }

    fn event(&mut self, pcr: u8, kind: u32, digest: [u8; 32], data: &[u8]) {
        self.bytes.extend(u32::from(pcr).to_le_bytes());
        self.bytes.extend(kind.to_le_bytes());
        self.bytes.extend(1u32.to_le_bytes());
        self.bytes.extend(ALG_SHA256.to_le_bytes());
        self.digest_offsets.push(self.bytes.len());
        self.bytes.extend(digest);
        self.bytes.extend((data.len() as u32).to_le_bytes());
        self.bytes.extend(data);
        self.extends.push((pcr, digest));
    }

    fn measure(&mut self, pcr: u8, kind: u32, data: &[u8]) {
        self.event(pcr, kind, Sha256::digest(data).into(), data);
    }

    /// A Secure Boot UEFI boot reduced to what the server reads: the
    /// SecureBoot variable (1) in PCR 7, a separator in each of PCRs 0–7,
    /// then the shim started from PCR 4.
    fn secure_boot() -> Self {
        let mut log = Self::new();
        let mut variable = EFI_GLOBAL_VARIABLE.to_vec();
        let name: Vec<u16> = "SecureBoot".encode_utf16().collect();
        variable.extend((name.len() as u64).to_le_bytes());
        variable.extend(1u64.to_le_bytes());
        for unit in name {
            variable.extend(unit.to_le_bytes());
        }
        variable.push(1);
        log.measure(7, EV_EFI_VARIABLE_DRIVER_CONFIG, &variable);
        for pcr in 0..=7 {
            log.measure(pcr, EV_SEPARATOR, &[0; 4]);
        }
        // A UEFI_IMAGE_LOAD_EVENT with an empty device path.
        let mut image = Vec::new();
        for field in [0x1000u64, 0x10_0000, 0, 4] {
            image.extend(field.to_le_bytes());
        }
        image.extend([0x7f, 0xff, 0x04, 0x00]);
        log.event(4, EV_EFI_BOOT_SERVICES_APPLICATION, SHIM, &image);
        log
    }

    /// Extends every event's digest into the TPM's SHA-256 bank, as the
    /// firmware would have.
    fn extend_into(&self, tools: &Tpm2Tools) {
        for (pcr, digest) in &self.extends {
            tools.run(
                "tpm2_pcrextend",
                &[&format!("{pcr}:sha256={}", hex(digest))],
            );
        }
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
    log.extend_into(&node.tools());
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
    log.extend_into(&node.tools());
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
    Log::secure_boot().extend_into(&node.tools());
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
