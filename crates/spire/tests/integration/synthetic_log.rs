//! A synthetic crypto-agile firmware event log (one bank, SHA-256 unless
//! a test asks for another, or SHA-1 and SHA-256), written independently
//! of the parser (TCG PC
//! Client PFP, "Event Logging"). Shared by the measured-boot tests
//! (`measured_boot`) and the `synthetic_event_log` example that
//! scripts/interop-spire.sh runs. The events are kept as a list, so that
//! a test can change, drop or reorder one and write the log again.

pub use sceau_format::key_id::hex;
use sceau_spire::server::event_log::ALG_SHA1;
use sceau_spire::server::event_log::ALG_SHA256;
use sceau_spire::server::event_log::event_type::{
    EV_EFI_BOOT_SERVICES_APPLICATION, EV_EFI_VARIABLE_DRIVER_CONFIG, EV_NO_ACTION, EV_SEPARATOR,
};
use sha2::{Digest as _, Sha256};

/// The shim's Authenticode hash, as the firmware would measure it.
pub const SHIM: [u8; 32] = [0x51; 32];
/// Its SHA-1 Authenticode hash.
pub const SHIM_SHA1: [u8; 20] = [0x15; 20];
/// EFI_GLOBAL_VARIABLE (8be4df61-93ca-11d2-aa0d-00e098032b8c) as EFI_GUID.
const EFI_GLOBAL_VARIABLE: [u8; 16] = [
    0x61, 0xdf, 0xe4, 0x8b, 0xca, 0x93, 0xd2, 0x11, 0xaa, 0x0d, 0x00, 0xe0, 0x98, 0x03, 0x2b, 0x8c,
];

/// One extending event: its PCR, type, digest in the log's one bank, data.
#[derive(Clone)]
pub struct Event {
    pub pcr: u8,
    pub kind: u32,
    pub digest: Vec<u8>,
    pub data: Vec<u8>,
    /// Its SHA-1 digest, written when the log declares SHA-1 too.
    pub sha1: Vec<u8>,
}

pub struct Log {
    /// The bank's TPM_ALG_ID, as the Spec ID event declares it.
    pub alg: u16,
    /// Every extending event, in log order (the Spec ID event is written
    /// before them).
    pub events: Vec<Event>,
    /// Whether the log declares SHA-1 before its bank, each event then
    /// carrying its `sha1` digest first, as firmware logs do.
    pub with_sha1: bool,
}

impl Log {
    /// The Spec ID event alone: a log that extends nothing.
    pub fn new() -> Self {
        Self {
            alg: ALG_SHA256,
            events: Vec::new(),
            with_sha1: false,
        }
    }

    /// The log's bytes: the Spec ID event (one bank, `alg`, with the
    /// length of the events' digests), then every event.
    pub fn bytes(&self) -> Vec<u8> {
        let digest_len = self.events.first().map_or(32, |e| e.digest.len()) as u16;
        let mut spec = b"Spec ID Event03\0".to_vec();
        spec.extend(0u32.to_le_bytes()); // platformClass
        spec.extend([0, 2, 0, 2]); // minor, major, errata, uintnSize
        spec.extend((1 + u32::from(self.with_sha1)).to_le_bytes());
        if self.with_sha1 {
            spec.extend(ALG_SHA1.to_le_bytes());
            spec.extend(20u16.to_le_bytes());
        }
        spec.extend(self.alg.to_le_bytes());
        spec.extend(digest_len.to_le_bytes());
        spec.push(0); // vendorInfoSize
        let mut bytes = Vec::new();
        bytes.extend(0u32.to_le_bytes());
        bytes.extend(EV_NO_ACTION.to_le_bytes());
        bytes.extend([0; 20]);
        bytes.extend((spec.len() as u32).to_le_bytes());
        bytes.extend(spec);
        for event in &self.events {
            bytes.extend(u32::from(event.pcr).to_le_bytes());
            bytes.extend(event.kind.to_le_bytes());
            bytes.extend((1 + u32::from(self.with_sha1)).to_le_bytes());
            if self.with_sha1 {
                bytes.extend(ALG_SHA1.to_le_bytes());
                bytes.extend(&event.sha1);
            }
            bytes.extend(self.alg.to_le_bytes());
            bytes.extend(&event.digest);
            bytes.extend((event.data.len() as u32).to_le_bytes());
            bytes.extend(&event.data);
        }
        bytes
    }

    fn event(&mut self, pcr: u8, kind: u32, digest: [u8; 32], sha1: [u8; 20], data: &[u8]) {
        self.events.push(Event {
            pcr,
            kind,
            digest: digest.to_vec(),
            data: data.to_vec(),
            sha1: sha1.to_vec(),
        });
    }

    /// Appends an event whose digests are the SHA-256 and SHA-1 of its
    /// data.
    pub fn measure(&mut self, pcr: u8, kind: u32, data: &[u8]) {
        self.event(
            pcr,
            kind,
            Sha256::digest(data).into(),
            sha1::Sha1::digest(data).into(),
            data,
        );
    }

    /// The position in `events` of the first event of `kind` in `pcr`.
    #[allow(dead_code)] // the tests use it, the example does not
    pub fn position(&self, pcr: u8, kind: u32) -> usize {
        self.events
            .iter()
            .position(|e| e.pcr == pcr && e.kind == kind)
            .expect("the synthetic log has that event")
    }

    /// A Secure Boot UEFI boot reduced to what the server reads: the
    /// SecureBoot variable (1) in PCR 7, a separator in each of PCRs 0–7,
    /// then the shim (`SHIM`) started from PCR 4.
    pub fn secure_boot() -> Self {
        Self::boot(1)
    }

    /// `secure_boot`, with the SecureBoot variable holding `state`.
    pub fn boot(state: u8) -> Self {
        let mut log = Self::new();
        log.measure(
            7,
            EV_EFI_VARIABLE_DRIVER_CONFIG,
            &secure_boot_variable(state),
        );
        for pcr in 0..=7 {
            log.measure(pcr, EV_SEPARATOR, &[0; 4]);
        }
        // A UEFI_IMAGE_LOAD_EVENT with an empty device path.
        let mut image = Vec::new();
        for field in [0x1000u64, 0x10_0000, 0, 4] {
            image.extend(field.to_le_bytes());
        }
        image.extend([0x7f, 0xff, 0x04, 0x00]);
        log.event(4, EV_EFI_BOOT_SERVICES_APPLICATION, SHIM, SHIM_SHA1, &image);
        log
    }

    /// `tpm2_pcrextend` arguments that extend every event's digest into
    /// the SHA-256 bank, as the firmware would have, in order.
    pub fn pcrextend_args(&self) -> Vec<String> {
        assert_eq!(self.alg, ALG_SHA256, "only SHA-256 logs are extended");
        self.events
            .iter()
            .map(|e| format!("{}:sha256={}", e.pcr, hex(&e.digest)))
            .collect()
    }

    /// The same for the SHA-1 bank, with each event's `sha1` digest.
    #[allow(dead_code)] // the tests use it, the example does not
    pub fn pcrextend_sha1_args(&self) -> Vec<String> {
        self.events
            .iter()
            .map(|e| format!("{}:sha1={}", e.pcr, hex(&e.sha1)))
            .collect()
    }
}

/// The SecureBoot variable's UEFI_VARIABLE_DATA with one byte of data.
pub fn secure_boot_variable(state: u8) -> Vec<u8> {
    let mut variable = EFI_GLOBAL_VARIABLE.to_vec();
    let name: Vec<u16> = "SecureBoot".encode_utf16().collect();
    variable.extend((name.len() as u64).to_le_bytes());
    variable.extend(1u64.to_le_bytes());
    for unit in name {
        variable.extend(unit.to_le_bytes());
    }
    variable.push(state);
    variable
}
