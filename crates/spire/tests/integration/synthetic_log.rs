//! A synthetic crypto-agile firmware event log (SHA-256 digests only),
//! written independently of the parser (TCG PC Client PFP, "Event
//! Logging"). Shared by the measured-boot tests (`measured_boot`) and the
//! `synthetic_event_log` example that scripts/interop-spire.sh runs.

use sceau_spire::server::event_log::ALG_SHA256;
use sceau_spire::server::event_log::event_type::{
    EV_EFI_BOOT_SERVICES_APPLICATION, EV_EFI_VARIABLE_DRIVER_CONFIG, EV_NO_ACTION, EV_SEPARATOR,
};
use sha2::{Digest as _, Sha256};

/// The shim's Authenticode hash, as the firmware would measure it.
pub const SHIM: [u8; 32] = [0x51; 32];
/// EFI_GLOBAL_VARIABLE (8be4df61-93ca-11d2-aa0d-00e098032b8c) as EFI_GUID.
const EFI_GLOBAL_VARIABLE: [u8; 16] = [
    0x61, 0xdf, 0xe4, 0x8b, 0xca, 0x93, 0xd2, 0x11, 0xaa, 0x0d, 0x00, 0xe0, 0x98, 0x03, 0x2b, 0x8c,
];

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub struct Log {
    pub bytes: Vec<u8>,
    /// (PCR, digest) of every extending event, in order, to extend into
    /// the TPM.
    pub extends: Vec<(u8, [u8; 32])>,
    /// Where each extending event's SHA-256 digest starts in `bytes`.
    #[allow(dead_code)] // the tests read it, the example does not
    pub digest_offsets: Vec<usize>,
}

impl Log {
    /// The Spec ID event alone: a log that extends nothing.
    pub fn new() -> Self {
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
    /// then the shim (`SHIM`) started from PCR 4.
    pub fn secure_boot() -> Self {
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

    /// `tpm2_pcrextend` arguments that extend every event's digest into
    /// the SHA-256 bank, as the firmware would have, in order.
    pub fn pcrextend_args(&self) -> Vec<String> {
        self.extends
            .iter()
            .map(|(pcr, digest)| format!("{pcr}:sha256={}", hex(digest)))
            .collect()
    }
}
