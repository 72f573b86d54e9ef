//! KEK generations in the TPM (`sceau_format::kek` says what they are):
//! listing the ones the TPM holds, creating one, destroying one, and the
//! epoch counter that key_ids are allocated from.
//!
//! A generation is a storage key made by TPM2_Create under the SRK, so its
//! private part comes from the TPM's random number generator and nothing
//! public derives it; TPM2_EvictControl then keeps it at a persistent
//! handle, and the private blob Create returned is dropped (its buffer is
//! zeroed on drop) without being written anywhere. EvictControl of that
//! handle is then the only copy's destruction.
//!
//! Making and destroying a persistent object, and defining the counter,
//! take the owner hierarchy's authorization, which sceau sends empty; a
//! TPM whose owner has set one refuses them, and the error says so.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;

use tss_esapi::Context;
use tss_esapi::attributes::NvIndexAttributesBuilder;
use tss_esapi::constants::{CapabilityType, NvIndexType};
use tss_esapi::handles::{
    KeyHandle, NvIndexHandle, NvIndexTpmHandle, ObjectHandle, PersistentTpmHandle, TpmHandle,
};
use tss_esapi::interface_types::algorithm::HashingAlgorithm;
use tss_esapi::interface_types::dynamic_handles::Persistent;
use tss_esapi::interface_types::resource_handles::{NvAuth, Provision};
use tss_esapi::interface_types::session_handles::AuthSession;
use tss_esapi::structures::{CapabilityData, MaxNvBuffer, NvPublicBuilder, Public, PublicBuffer};
use tss_esapi::traits::Marshall as _;

use super::fault::{Fault, TpmError};
use super::owner;
use super::srk::{Srk, SrkAlgorithm, has_template, template};
use sceau_format::kek::{
    EPOCH_COUNTER_INDEX, GENERATION_HANDLE_BASE, MAX_GENERATION, MAX_OPEN_GENERATIONS,
    MEMBERSHIP_MARK_ATTRIBUTES, MEMBERSHIP_MARK_INDEX, MEMBERSHIP_MARK_SIZE, generation_handle,
    generation_of_handle,
};
use sceau_format::key_id::hex;

/// TPM_RC_HANDLE for the first handle: nothing at that handle.
const RC_NO_SUCH_HANDLE: u32 = 0x018B;
/// TPM_RC_NV_SPACE: no room left in the TPM's NV memory.
const RC_NV_SPACE: u32 = 0x014B;
/// TPMA_NV_WRITTEN: a counter never incremented reads as no epoch yet.
const NV_WRITTEN: u32 = 1 << 29;

/// A generation the TPM holds.
#[derive(Debug)]
pub struct OpenGeneration {
    /// ESAPI's handle for the persistent key.
    pub handle: KeyHandle,
    /// Its TPM Name, which its key_ids cover.
    pub name: Vec<u8>,
    /// Its public area as a marshalled TPM2B_PUBLIC: a cluster member file's
    /// storage key, when this generation is what members wrap DEKs for.
    pub public: Vec<u8>,
}

/// Why a generation command could not be done; every message says what to
/// do instead, and none carries TPM detail but through [`KekError::Tpm`].
#[derive(Debug, thiserror::Error)]
pub enum KekError {
    #[error(
        "{} generations are open ({}), the most sceau keeps in the TPM's persistent slots: \
         rewrite the Secrets (docs/rotation-and-backup.md), then `sceau kek retire --generation {}`, \
         and rotate again",
        MAX_OPEN_GENERATIONS,
        list(.open),
        .open.first().copied().unwrap_or_default()
    )]
    TooManyOpen { open: Vec<u32> },
    #[error("generation numbers are used up (the last is {MAX_GENERATION})")]
    Exhausted,
    #[error(
        "the TPM has no room left for {what}: free a persistent handle or NV index you no \
         longer need (tpm2_getcap handles-persistent, tpm2_getcap handles-nv-index)"
    )]
    NoRoom { what: &'static str },
    #[error(
        "the TPM refused the owner authorization {what} needs: {}",
        owner::HOW_TO_PROVIDE
    )]
    OwnerAuth { what: &'static str },
    #[error(
        "persistent handle {handle:#010x}, in sceau's range, holds a key sceau did not make; \
         move it elsewhere (tpm2_evictcontrol) before using KEK generations"
    )]
    Foreign { handle: u32 },
    #[error(
        "NV index {EPOCH_COUNTER_INDEX:#010x} is not sceau's epoch counter (another kind of \
         index); undefine it with tpm2_nvundefine if nothing else uses it"
    )]
    ForeignCounter,
    #[error(
        "NV index {MEMBERSHIP_MARK_INDEX:#010x} is not sceau's membership mark (another kind of \
         index); undefine it with tpm2_nvundefine if nothing else uses it"
    )]
    ForeignMark,
    #[error(transparent)]
    Tpm(#[from] TpmError),
}

fn list(numbers: &[u32]) -> String {
    numbers
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The generations the TPM holds (1 and up): one GetCapability, then one
/// ReadPublic each (TR_FromTPMPublic), whose public area must be the
/// storage template of the SRK's algorithm.
pub fn read_open(
    ctx: &mut Context,
    algorithm: SrkAlgorithm,
) -> Result<BTreeMap<u32, OpenGeneration>, KekError> {
    let (data, _) = ctx
        .execute_without_session(|c| {
            c.get_capability(
                CapabilityType::Handles,
                GENERATION_HANDLE_BASE,
                MAX_GENERATION + 1,
            )
        })
        .map_err(|e| TpmError::new("GetCapability (persistent handles)", e))?;
    let CapabilityData::Handles(handles) = data else {
        return Ok(BTreeMap::new());
    };
    let mut open = BTreeMap::new();
    for raw in handles.iter().map(|h| u32::from(*h)) {
        let Some(generation) = generation_of_handle(raw) else {
            continue;
        };
        let handle = persistent(raw)?;
        let object = ctx
            .execute_without_session(|c| c.tr_from_tpm_public(TpmHandle::Persistent(handle)))
            .map_err(|e| TpmError::new("TR_FromTPMPublic (KEK generation)", e))?;
        let (public, name, _) = ctx
            .execute_without_session(|c| c.read_public(object.into()))
            .map_err(|e| TpmError::new("ReadPublic (KEK generation)", e))?;
        if !has_template(&public, algorithm) {
            return Err(KekError::Foreign { handle: raw });
        }
        open.insert(
            generation,
            OpenGeneration {
                handle: KeyHandle::from(object),
                name: name.value().to_vec(),
                public: tpm2b_public(public)?,
            },
        );
    }
    Ok(open)
}

/// Creates generation `number` under the SRK and makes it persistent. The
/// caller picks a number above every one ever used (the ledger's and the
/// TPM's); the open generations must number fewer than
/// [`MAX_OPEN_GENERATIONS`].
pub fn create(
    ctx: &mut Context,
    srk: &Srk,
    number: u32,
    open: &BTreeMap<u32, OpenGeneration>,
) -> Result<OpenGeneration, KekError> {
    if open.len() >= MAX_OPEN_GENERATIONS {
        return Err(KekError::TooManyOpen {
            open: open.keys().copied().collect(),
        });
    }
    if !(1..=MAX_GENERATION).contains(&number) {
        return Err(KekError::Exhausted);
    }
    let template =
        template(srk.algorithm).map_err(|e| TpmError::new("KEK generation template", e))?;
    let created = ctx
        .execute_with_session(Some(AuthSession::Password), |c| {
            c.create(srk.handle, template, None, None, None, None)
        })
        .map_err(|e| TpmError::new("Create (KEK generation)", e))?;
    let public = tpm2b_public(created.out_public.clone())?;
    let loaded = ctx
        .execute_with_session(Some(AuthSession::Password), |c| {
            c.load(srk.handle, created.out_private, created.out_public)
        })
        .map_err(|e| TpmError::new("Load (KEK generation)", e))?;
    let slot = persistent(generation_handle(number))?;
    let evicted = ctx.execute_with_session(Some(AuthSession::Password), |c| {
        c.evict_control(
            Provision::Owner,
            loaded.into(),
            Persistent::Persistent(slot),
        )
    });
    if let Err(e) = ctx.flush_context(ObjectHandle::from(loaded)) {
        log::debug!("FlushContext of the loaded generation failed: {e}");
    }
    let object = evicted.map_err(|e| {
        classify(
            TpmError::new("EvictControl (KEK generation)", e),
            "a persistent KEK generation",
        )
    })?;
    let name = ctx
        .tr_get_name(object)
        .map_err(|e| TpmError::new("TR_GetName (KEK generation)", e))?;
    Ok(OpenGeneration {
        handle: KeyHandle::from(object),
        name: name.value().to_vec(),
        public,
    })
}

fn tpm2b_public(public: Public) -> Result<Vec<u8>, TpmError> {
    PublicBuffer::try_from(public)
        .and_then(|buffer| buffer.marshall())
        .map_err(|e| TpmError::new("marshal KEK generation public", e))
}

/// Destroys an open generation: EvictControl of its persistent handle.
pub fn destroy(ctx: &mut Context, number: u32, generation: OpenGeneration) -> Result<(), KekError> {
    let handle = persistent(generation_handle(number))?;
    ctx.execute_with_session(Some(AuthSession::Password), |c| {
        c.evict_control(
            Provision::Owner,
            generation.handle.into(),
            Persistent::Persistent(handle),
        )
    })
    .map_err(|e| {
        classify(
            TpmError::new("EvictControl (retire)", e),
            "destroying a generation",
        )
    })?;
    Ok(())
}

/// The epoch counter's value; 0 while it is undefined or never incremented.
pub fn read_epoch(ctx: &mut Context) -> Result<u64, KekError> {
    match counter(ctx)? {
        None => Ok(0),
        Some((_, false)) => Ok(0),
        Some((index, true)) => read_counter(ctx, index),
    }
}

/// Takes a new epoch: defines the counter if it is missing, increments it,
/// and reads the new value back. The TPM sets a newly defined counter, at
/// its first increment, to at least the highest value any counter held, so
/// undefining and redefining it never gives an epoch again.
pub fn next_epoch(ctx: &mut Context) -> Result<u64, KekError> {
    let index = match counter(ctx)? {
        Some((index, _)) => index,
        None => define_counter(ctx)?,
    };
    ctx.execute_with_session(Some(AuthSession::Password), |c| {
        c.nv_increment(NvAuth::Owner, index)
    })
    .map_err(|e| {
        classify(
            TpmError::new("NV_Increment (epoch)", e),
            "the epoch counter",
        )
    })?;
    read_counter(ctx, index)
}

fn read_counter(ctx: &mut Context, index: NvIndexHandle) -> Result<u64, KekError> {
    let data = ctx
        .execute_with_session(Some(AuthSession::Password), |c| {
            c.nv_read(NvAuth::Owner, index, 8, 0)
        })
        .map_err(|e| {
            classify(
                TpmError::new("NV_Read (epoch)", e),
                "reading the epoch counter",
            )
        })?;
    let bytes: [u8; 8] = data
        .value()
        .try_into()
        .map_err(|_| KekError::ForeignCounter)?;
    Ok(u64::from_be_bytes(bytes))
}

/// The membership mark (`sceau_format::kek::MEMBERSHIP_MARK_INDEX`): the
/// highest membership epoch this node served and its digest; `None` before
/// any.
pub fn membership_mark(ctx: &mut Context) -> Result<Option<(u64, [u8; 32])>, KekError> {
    let Some((index, written)) = mark_index(ctx)? else {
        return Ok(None);
    };
    if !written {
        return Ok(None);
    }
    let data = ctx
        .execute_with_session(Some(AuthSession::Password), |c| {
            c.nv_read(NvAuth::Owner, index, MEMBERSHIP_MARK_SIZE, 0)
        })
        .map_err(|e| {
            classify(
                TpmError::new("NV_Read (membership mark)", e),
                "reading the membership mark",
            )
        })?;
    let bytes = data.value();
    let epoch = u64::from_be_bytes(bytes[..8].try_into().map_err(|_| KekError::ForeignMark)?);
    let digest = bytes[8..].try_into().map_err(|_| KekError::ForeignMark)?;
    Ok(Some((epoch, digest)))
}

/// Records that this node serves membership `digest` at `epoch`.
pub fn set_membership_mark(
    ctx: &mut Context,
    epoch: u64,
    digest: &[u8; 32],
) -> Result<(), KekError> {
    let index = match mark_index(ctx)? {
        Some((index, _)) => index,
        None => define_mark(ctx)?,
    };
    let mut bytes = epoch.to_be_bytes().to_vec();
    bytes.extend_from_slice(digest);
    let data =
        MaxNvBuffer::try_from(bytes).map_err(|e| TpmError::new("membership mark data", e))?;
    ctx.execute_with_session(Some(AuthSession::Password), |c| {
        c.nv_write(NvAuth::Owner, index, data, 0)
    })
    .map_err(|e| {
        classify(
            TpmError::new("NV_Write (membership mark)", e),
            "the membership mark",
        )
    })?;
    Ok(())
}

/// One of sceau's two NV indices: the epoch counter and the membership mark.
struct Index {
    handle: u32,
    kind: NvIndexType,
    attributes: u32,
    size: u16,
    what: &'static str,
    foreign: fn() -> KekError,
}

const COUNTER: Index = Index {
    handle: EPOCH_COUNTER_INDEX,
    kind: NvIndexType::Counter,
    attributes: sceau_format::kek::EPOCH_COUNTER_ATTRIBUTES,
    size: 8,
    what: "the epoch counter",
    foreign: || KekError::ForeignCounter,
};

const MARK: Index = Index {
    handle: MEMBERSHIP_MARK_INDEX,
    kind: NvIndexType::Ordinary,
    attributes: MEMBERSHIP_MARK_ATTRIBUTES,
    size: MEMBERSHIP_MARK_SIZE,
    what: "the membership mark",
    foreign: || KekError::ForeignMark,
};

/// The counter's handle and whether it was ever incremented, or `None`.
fn counter(ctx: &mut Context) -> Result<Option<(NvIndexHandle, bool)>, KekError> {
    find(ctx, &COUNTER)
}

fn define_counter(ctx: &mut Context) -> Result<NvIndexHandle, KekError> {
    define(ctx, &COUNTER)
}

fn mark_index(ctx: &mut Context) -> Result<Option<(NvIndexHandle, bool)>, KekError> {
    find(ctx, &MARK)
}

fn define_mark(ctx: &mut Context) -> Result<NvIndexHandle, KekError> {
    define(ctx, &MARK)
}

/// The index's handle and whether it was ever written, or `None` while it
/// is undefined; an index of other attributes or size at its handle is
/// refused.
fn find(ctx: &mut Context, index: &Index) -> Result<Option<(NvIndexHandle, bool)>, KekError> {
    let tpm_handle =
        NvIndexTpmHandle::new(index.handle).map_err(|e| TpmError::new("NV index handle", e))?;
    let object = match ctx
        .execute_without_session(|c| c.tr_from_tpm_public(TpmHandle::NvIndex(tpm_handle)))
    {
        Ok(object) => NvIndexHandle::from(object),
        Err(e) => {
            let error = TpmError::new("NV_ReadPublic (sceau's NV index)", e);
            return match error.response_code() {
                Some(RC_NO_SUCH_HANDLE) => Ok(None),
                _ => Err(error.into()),
            };
        }
    };
    let (public, _) = ctx
        .execute_without_session(|c| c.nv_read_public(object))
        .map_err(|e| TpmError::new("NV_ReadPublic (sceau's NV index)", e))?;
    let attributes = tss_esapi::tss2_esys::TPMA_NV::try_from(public.attributes())
        .map_err(|_| (index.foreign)())?;
    if attributes & !NV_WRITTEN != index.attributes || public.data_size() != usize::from(index.size)
    {
        return Err((index.foreign)());
    }
    Ok(Some((object, attributes & NV_WRITTEN != 0)))
}

/// Defines the index, owner-written and owner-read, with no DA.
fn define(ctx: &mut Context, index: &Index) -> Result<NvIndexHandle, KekError> {
    let public = (|| {
        let attributes = NvIndexAttributesBuilder::new()
            .with_nv_index_type(index.kind)
            .with_owner_write(true)
            .with_owner_read(true)
            .with_no_da(true)
            .build()?;
        NvPublicBuilder::new()
            .with_nv_index(NvIndexTpmHandle::new(index.handle)?)
            .with_index_name_algorithm(HashingAlgorithm::Sha256)
            .with_index_attributes(attributes)
            .with_data_area_size(usize::from(index.size))
            .build()
    })()
    .map_err(|e| TpmError::new("NV index template", e))?;
    ctx.execute_with_session(Some(AuthSession::Password), |c| {
        c.nv_define_space(Provision::Owner, None, public)
    })
    .map_err(|e| classify(TpmError::new("NV_DefineSpace", e), index.what))
}

fn persistent(raw: u32) -> Result<PersistentTpmHandle, TpmError> {
    PersistentTpmHandle::new(raw).map_err(|e| TpmError::new("persistent handle", e))
}

/// A TPM refusal in words where sceau knows its meaning.
fn classify(error: TpmError, what: &'static str) -> KekError {
    match error.response_code() {
        _ if owner::refused(&error) => KekError::OwnerAuth { what },
        Some(RC_NV_SPACE) => KekError::NoRoom { what },
        _ => KekError::Tpm(error),
    }
}

/// The Names of the open generations, for logs and errors.
pub fn describe(open: &BTreeMap<u32, OpenGeneration>) -> String {
    open.iter()
        .map(|(n, g)| format!("{n} ({})", hex(&g.name)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Fault for a request naming a generation the TPM does not hold.
pub(crate) fn not_held(generation: u32) -> TpmError {
    TpmError::refused(
        format!("KEK generation {generation} is not in this TPM (retired, or never made here)"),
        Fault::EnvelopeRejected,
    )
}
