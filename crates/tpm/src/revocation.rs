//! Revocation serials in the TPM (`sceau_format::revocation` says why a
//! written NV index revokes): reading a serial's index, defining it
//! unwritten, and writing it to revoke.
//!
//! Defining and writing take the owner hierarchy's authorization, which
//! sceau sends empty; a TPM whose owner has set one refuses both, and the
//! error says so.
#![forbid(unsafe_code)]

use tss_esapi::Context;
use tss_esapi::attributes::NvIndexAttributesBuilder;
use tss_esapi::constants::NvIndexType;
use tss_esapi::handles::{NvIndexHandle, NvIndexTpmHandle, TpmHandle};
use tss_esapi::interface_types::algorithm::HashingAlgorithm;
use tss_esapi::interface_types::resource_handles::{NvAuth, Provision};
use tss_esapi::interface_types::session_handles::AuthSession;
use tss_esapi::structures::{MaxNvBuffer, NvPublicBuilder};

use super::fault::{Fault, TpmError};
use super::owner::{self, OwnerAuth};
use super::tcti::Tcti;
use sceau_format::revocation::{DATA_SIZE, Serial, SerialState, state_from_name};

/// TPM_RC_HANDLE for the first handle: no NV index there.
const RC_NO_SUCH_INDEX: u32 = 0x018B;

/// What the TPM holds for a serial.
pub enum IndexState {
    /// No index at the serial's handle.
    Missing,
    /// An index, with ESAPI's handle for it and what its Name says.
    Present(NvIndexHandle, SerialState),
}

/// How [`revoke`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Revocation {
    Revoked,
    AlreadyRevoked,
}

/// Reads the serial's index: TR_FromTPMPublic (one TPM2_NV_ReadPublic),
/// whose Name ESAPI checks against the public area it returns.
pub fn read(ctx: &mut Context, serial: Serial) -> Result<IndexState, TpmError> {
    let handle = NvIndexTpmHandle::new(serial.index_handle())
        .map_err(|e| TpmError::new("revocation index handle", e))?;
    let object =
        match ctx.execute_without_session(|c| c.tr_from_tpm_public(TpmHandle::NvIndex(handle))) {
            Ok(object) => object,
            Err(e) => {
                let error = TpmError::new("NV_ReadPublic (revocation index)", e);
                return match error.response_code() {
                    Some(RC_NO_SUCH_INDEX) => Ok(IndexState::Missing),
                    _ => Err(error),
                };
            }
        };
    let name = ctx
        .tr_get_name(object)
        .map_err(|e| TpmError::new("TR_GetName (revocation index)", e))?;
    Ok(IndexState::Present(
        NvIndexHandle::from(object),
        state_from_name(serial, name.value()),
    ))
}

/// The serial's state as the TPM holds it now (TPM2_NV_ReadPublic on a
/// handle [`read`] gave): for a serial revoked while sceau runs.
pub fn refresh(
    ctx: &mut Context,
    serial: Serial,
    index: NvIndexHandle,
) -> Result<SerialState, TpmError> {
    let (_, name) = ctx
        .execute_without_session(|c| c.nv_read_public(index))
        .map_err(|e| TpmError::new("NV_ReadPublic (revocation index)", e))?;
    Ok(state_from_name(serial, name.value()))
}

/// Defines the serial's index, unwritten, in the owner hierarchy.
pub fn define(ctx: &mut Context, serial: Serial) -> Result<NvIndexHandle, TpmError> {
    let public = (|| {
        let attributes = NvIndexAttributesBuilder::new()
            .with_nv_index_type(NvIndexType::Ordinary)
            .with_owner_write(true)
            .with_auth_read(true)
            .with_no_da(true)
            .build()?;
        NvPublicBuilder::new()
            .with_nv_index(NvIndexTpmHandle::new(serial.index_handle())?)
            .with_index_name_algorithm(HashingAlgorithm::Sha256)
            .with_index_attributes(attributes)
            .with_data_area_size(usize::from(DATA_SIZE))
            .build()
    })()
    .map_err(|e| TpmError::new("revocation index template", e))?;
    ctx.execute_with_session(Some(AuthSession::Password), |c| {
        c.nv_define_space(Provision::Owner, None, public)
    })
    .map_err(|e| owner_refusal(TpmError::new("NV_DefineSpace (revocation index)", e)))
}

/// The handle of a standing serial's index, defined now if it is missing;
/// `None` for a serial revoked, or whose handle holds another index.
pub fn standing(
    ctx: &mut Context,
    serial: Serial,
) -> Result<Result<NvIndexHandle, SerialState>, TpmError> {
    match read(ctx, serial)? {
        IndexState::Missing => define(ctx, serial).map(Ok),
        IndexState::Present(index, SerialState::Standing) => Ok(Ok(index)),
        IndexState::Present(_, state) => Ok(Err(state)),
    }
}

/// Revokes `serial`: defines its index if it is missing, then writes its
/// one byte with the owner's authorization, and reads the Name back to
/// prove the index now says revoked.
pub fn revoke(ctx: &mut Context, serial: Serial) -> Result<Revocation, TpmError> {
    let index = match read(ctx, serial)? {
        IndexState::Missing => define(ctx, serial)?,
        IndexState::Present(_, SerialState::Revoked) => return Ok(Revocation::AlreadyRevoked),
        IndexState::Present(_, SerialState::Foreign) => {
            return Err(TpmError::refused(
                format!(
                    "NV index 0x{:08x} is not sceau's index for serial {serial} (other \
                     attributes or size): policies signed with this serial never open on this \
                     TPM; sign with another serial",
                    serial.index_handle()
                ),
                Fault::Failure,
            ));
        }
        IndexState::Present(index, SerialState::Standing) => index,
    };
    let data =
        MaxNvBuffer::try_from(vec![1u8]).map_err(|e| TpmError::new("revocation index data", e))?;
    ctx.execute_with_session(Some(AuthSession::Password), |c| {
        c.nv_write(NvAuth::Owner, index, data, 0)
    })
    .map_err(|e| owner_refusal(TpmError::new("NV_Write (revocation index)", e)))?;
    match refresh(ctx, serial, index)? {
        SerialState::Revoked => Ok(Revocation::Revoked),
        _ => Err(TpmError::refused(
            format!("the TPM's index for serial {serial} does not read as revoked after the write"),
            Fault::Failure,
        )),
    }
}

/// [`revoke`] on a TPM of its own (`sceau revoke-policy`): no SRK, no
/// session but the owner's password one.
pub fn revoke_at(
    tcti: &Tcti,
    owner_auth: Option<&OwnerAuth>,
    serial: Serial,
) -> Result<Revocation, TpmError> {
    let mut ctx = super::start::started_context(tcti)?;
    if let Some(auth) = owner_auth {
        auth.apply(&mut ctx)?;
    }
    revoke(&mut ctx, serial)
}

/// A refusal of the owner authorization, said in words.
fn owner_refusal(error: TpmError) -> TpmError {
    match owner::refused(&error) {
        true => TpmError::refused(
            format!(
                "the TPM refused the owner authorization a revocation index needs: {}",
                owner::HOW_TO_PROVIDE
            ),
            Fault::Failure,
        ),
        false => error,
    }
}
