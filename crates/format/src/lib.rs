//! The formats sceau reads and writes, as pure functions of bytes and text:
//! no TPM, no I/O, no async, no `unsafe` (forbidden for the whole workspace
//! but `sceau-sys`, through `[workspace.lints]`).
//!
//! Its modules are listed in ARCHITECTURE.md ("The crates"), the one map
//! of the tree; each module's own documentation says what it reads and
//! writes.
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
