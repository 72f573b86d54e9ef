//! The formats sceau reads and writes, as pure functions of bytes and text:
//! no TPM, no I/O, no async, no `unsafe` (forbidden for the whole workspace
//! but `sceau-sys`, through `[workspace.lints]`).
//!
//! - Envelopes: `envelope` (the one parser, `Envelope::parse`, over every
//!   version), `sealed` (version 1, a TPM sealed-data object under one
//!   SRK) and `wrapped` (versions 2 and 3, one object wrapped for every
//!   cluster member and the recovery key; version 3 signed by the member
//!   that made it).
//! - TPM wire structures: `wire` (the bounded `Reader`), `public` (the one
//!   TPMT_PUBLIC reader), `storage_key`
//!   (an ECC P-256 storage key's TPM2B_PUBLIC and Name), `signing_key` (a
//!   member's envelope signing key and its ECDSA signatures), `kdf` (KDFa, KDFe),
//!   `duplicate` (TPM2_Import blobs made in software), `credential`
//!   (TPM2_MakeCredential's blob).
//! - Text files: `armor`, `members` (member files and the cluster
//!   membership), `recovery_key` (the recovery identity and its public
//!   half), `recovery_share` (that identity split among custodians,
//!   verifiable share by share), `enrollment` (request, challenge and response files),
//!   `endorsement` (the offline enrollment key and the endorsement it
//!   writes into a member file).
//! - Boot-state binding: `pcr_policy` (PCR lists and values, PolicyPCR
//!   digests, signed policy files in systemd's format) and `policy_key`
//!   (the key that signs them, in OpenSSL's PEM files; its TPM Name and the
//!   authPolicy that commits to it), `revocation` (the NV index a
//!   revocable policy commits to, and what its Name says), over `der` (the little DER those files
//!   need) and `json` (a strict reader, also `sceau-recover`'s).
//! - KEK generations: `kek` (their TPM handles, their key_ids from the
//!   TPM's epoch counter, the state directory's ledger, and which key_id
//!   opens under which generation).
//! - Trusting the TPM: `owner_auth` (the owner hierarchy's authorization
//!   value in the systemd credential `tpm-owner-auth`, and the pinned SRK
//!   Name of `--expect-srk-name`), `roca` (the fingerprint of RSA keys that
//!   can be factored from their public half, CVE-2017-15361), `tpm_info`
//!   (a TPM's manufacturer, vendor string and firmware version as text),
//!   `advisories` (vendors' advisories by manufacturer and firmware version).
//! - `key_id` and `text` (what may be echoed of client input).
//!
//! The daemon, the offline tool `sceau-recover`, the fuzz targets and the
//! SPIRE plugins depend on this crate; it depends on none of them.

pub mod advisories;
pub mod armor;
pub mod credential;
pub mod der;
pub mod duplicate;
pub mod endorsement;
pub mod enrollment;
pub mod envelope;
pub mod json;
pub mod kdf;
pub mod kek;
pub mod key_id;
pub mod members;
pub mod owner_auth;
pub mod pcr_policy;
pub mod policy_key;
pub mod public;
pub mod random;
pub mod recovery_key;
pub mod recovery_share;
pub mod revocation;
pub mod roca;
pub mod sealed;
pub mod signing_key;
pub mod storage_key;
pub mod text;
pub mod tpm_info;
pub mod wire;
pub mod wrapped;

/// `error` as sceau's tools print it (anyhow's `{:#}`): its message, then
/// each source's, joined by `: `. The tests of [`inner_errors!`] users read
/// it to show that a cause is printed once.
pub fn as_printed(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(inner) = source {
        text.push_str(&format!(": {inner}"));
        source = inner.source();
    }
    text
}

/// `From` conversions into an error enum whose variants hold an inner error
/// in their message but not as a `source`: sceau's tools print the whole
/// chain of sources, so a source would be printed twice.
/// `inner_errors!(Outer { Variant(Inner), … })`.
#[macro_export]
macro_rules! inner_errors {
    ($outer:ident { $($variant:ident($inner:ty)),* $(,)? }) => {
        $(
            impl From<$inner> for $outer {
                fn from(error: $inner) -> Self {
                    Self::$variant(error)
                }
            }
        )*
    };
}
