//! The owner hierarchy's authorization value: set on the ESAPI context
//! before anything asks for the owner (CreatePrimary of the SRK and the
//! envelope signing key, EvictControl and NV definitions of the KEK
//! lifecycle and of revocation), and recognised in the TPM's refusals.
#![forbid(unsafe_code)]

use std::sync::Arc;

use tss_esapi::Context;
use tss_esapi::handles::ObjectHandle;
use tss_esapi::structures::Auth;
use zeroize::Zeroizing;

use super::fault::TpmError;

/// TPM_RC_BAD_AUTH and TPM_RC_AUTH_FAIL for the first session: the owner
/// authorization sent is not the TPM's. Hierarchy authorizations are not
/// counted by dictionary-attack protection, so a wrong value locks nothing.
const RC_OWNER_AUTH: [u32; 2] = [0x09A2, 0x098E];

/// Where an operator puts the value, said in every refusal.
pub const HOW_TO_PROVIDE: &str = "provide the value set with `tpm2_changeauth -c o` as the \
     systemd credential tpm-owner-auth (LoadCredentialEncrypted=tpm-owner-auth in a drop-in, \
     or systemd-run -p LoadCredentialEncrypted=... for a one-shot command; docs/hardening.md, \
     \"Owner authorization\")";

/// The value, shared by every reopen of the TPM (a reset makes sceau
/// recreate the SRK) and wiped when the last holder drops it. It has no
/// Display, and its Debug shows its length only.
#[derive(Clone)]
pub struct OwnerAuth(Arc<Zeroizing<Vec<u8>>>);

impl OwnerAuth {
    pub fn new(value: Zeroizing<Vec<u8>>) -> Self {
        Self(Arc::new(value))
    }

    /// Makes ESAPI send this value whenever a command authorizes with the
    /// owner hierarchy in a password session.
    pub fn apply(&self, ctx: &mut Context) -> Result<(), TpmError> {
        let auth = Auth::try_from(self.0.as_slice())
            .map_err(|e| TpmError::new("owner authorization", e))?;
        ctx.tr_set_auth(ObjectHandle::Owner, auth)
            .map_err(|e| TpmError::new("TR_SetAuth", e))
    }
}

impl std::fmt::Debug for OwnerAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OwnerAuth({} bytes)", self.0.len())
    }
}

/// Whether the TPM refused the owner authorization sent with a command.
pub fn refused(error: &TpmError) -> bool {
    error
        .response_code()
        .is_some_and(|rc| RC_OWNER_AUTH.contains(&rc))
}
