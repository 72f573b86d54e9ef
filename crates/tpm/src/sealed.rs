//! Sealed-data objects: the TPM form of one DEK under the SRK.
#![forbid(unsafe_code)]

use tss_esapi::attributes::{ObjectAttributes, ObjectAttributesBuilder};
use tss_esapi::interface_types::algorithm::{HashingAlgorithm, PublicAlgorithm};
use tss_esapi::structures::{
    Digest, EncryptedSecret, KeyedHashScheme, Private, Public, PublicBuffer, PublicBuilder,
    PublicKeyedHashParameters,
};
use tss_esapi::traits::{Marshall, UnMarshall};

use sceau_format::duplicate::{
    BOUND_IMPORTED_OBJECT_ATTRIBUTES, DIGEST_LEN, IMPORTED_OBJECT_ATTRIBUTES, SealedPublic,
};
use sceau_format::sealed::SealedBlobs;

/// fixedTPM|fixedParent|userWithAuth|noDA. sensitiveDataOrigin stays clear
/// because sceau supplies the data; sign and decrypt stay clear because a
/// sealed-data object is neither; noDA keeps Unseal out of lockout counting.
/// Bound to a boot policy, userWithAuth is clear too: then only a policy
/// session can authorize Unseal, never a password or an HMAC session.
pub fn sealed_attributes(policy_bound: bool) -> Result<ObjectAttributes, tss_esapi::Error> {
    ObjectAttributesBuilder::new()
        .with_fixed_tpm(true)
        .with_fixed_parent(true)
        .with_user_with_auth(!policy_bound)
        .with_no_da(true)
        .build()
}

/// A KeyedHash object with a null scheme and empty auth; its authPolicy is
/// `auth_policy` (the boot policy key's PolicyAuthorize), or empty.
pub fn sealed_template(auth_policy: Option<&[u8; 32]>) -> Result<Public, tss_esapi::Error> {
    PublicBuilder::new()
        .with_public_algorithm(PublicAlgorithm::KeyedHash)
        .with_name_hashing_algorithm(HashingAlgorithm::Sha256)
        .with_object_attributes(sealed_attributes(auth_policy.is_some())?)
        .with_auth_policy(match auth_policy {
            Some(policy) => Digest::try_from(policy.to_vec())?,
            None => Digest::default(),
        })
        .with_keyed_hash_parameters(PublicKeyedHashParameters::new(KeyedHashScheme::Null))
        .with_keyed_hash_unique_identifier(Digest::default())
        .build()
}

#[derive(Debug, thiserror::Error)]
pub enum BlobError {
    #[error("the public blob is not a valid TPM2B_PUBLIC")]
    PublicUnreadable,
    #[error("the public blob is not a sceau sealed-data object")]
    NotSealedData,
    #[error("the private blob is not a valid TPM2B_PRIVATE")]
    PrivateUnreadable,
}

/// Blobs decoded into the types ESAPI takes, checked to be exactly the kind
/// of object sceau creates before any of it reaches the TPM.
pub struct LoadableObject {
    pub public: Public,
    pub private: Private,
    /// The authPolicy of an object bound to a boot policy key.
    pub auth_policy: Option<[u8; 32]>,
}

impl LoadableObject {
    pub fn from_blobs(blobs: &SealedBlobs) -> Result<Self, BlobError> {
        // The envelope parser has already checked both u16 size prefixes.
        let public = exact_public(&blobs.public[2..])?;
        let auth_policy = sceau_sealed_object_policy(&public).ok_or(BlobError::NotSealedData)?;
        let private = Private::try_from(blobs.private[2..].to_vec())
            .map_err(|_| BlobError::PrivateUnreadable)?;
        Ok(Self {
            public,
            private,
            auth_policy,
        })
    }
}

/// Decodes a TPMT_PUBLIC, and only if it marshals back to exactly these
/// bytes. tpm2-tss 3.2.1 can decode a malformed area "successfully" (its
/// TPM2B unmarshal drops the inner return code, so a field cut short reads
/// as empty), and ESAPI sends the TPM the decoded form: only a public area
/// that round-trips is the object the envelope holds. Found by the
/// `envelope` fuzz target (audit/fuzzing.md).
fn exact_public(tpmt_public: &[u8]) -> Result<Public, BlobError> {
    let public = Public::unmarshall(tpmt_public).map_err(|_| BlobError::PublicUnreadable)?;
    match public.marshall() {
        Ok(bytes) if bytes == tpmt_public => Ok(public),
        _ => Err(BlobError::PublicUnreadable),
    }
}

/// `Some(None)` for a sceau sealed object without a policy, `Some(policy)`
/// for one bound to a boot policy key, `None` for anything else.
#[allow(clippy::option_option)]
fn sceau_sealed_object_policy(public: &Public) -> Option<Option<[u8; 32]>> {
    let Public::KeyedHash {
        object_attributes,
        name_hashing_algorithm: HashingAlgorithm::Sha256,
        auth_policy,
        parameters,
        ..
    } = public
    else {
        return None;
    };
    if *parameters != PublicKeyedHashParameters::new(KeyedHashScheme::Null) {
        return None;
    }
    let policy: Option<[u8; 32]> = match auth_policy.value() {
        [] => None,
        bytes => Some(bytes.try_into().ok()?),
    };
    (*object_attributes == sealed_attributes(policy.is_some()).ok()?).then_some(policy)
}

/// A cluster envelope's entry for this TPM, decoded into Import's inputs.
pub struct ImportableObject {
    pub public: Public,
    pub duplicate: Private,
    pub in_sym_seed: EncryptedSecret,
    /// The authPolicy of an object bound to a boot policy key.
    pub auth_policy: Option<[u8; DIGEST_LEN]>,
}

impl ImportableObject {
    /// The entry of an envelope whose public area
    /// `sceau_format::duplicate::check_sealed_public` accepted. That area is
    /// fixed but for its unique, so the `Public` is built from the unique
    /// that check returned rather than decoded a second time; it marshals to
    /// the same bytes (a unit test below holds the two together), so Import
    /// checks the duplicate's integrity against the envelope's own area.
    pub fn for_checked_public(
        area: &SealedPublic,
        duplicate: &[u8],
        in_sym_seed: &[u8],
    ) -> Result<Self, BlobError> {
        let public = imported_public(area).map_err(|_| BlobError::PublicUnreadable)?;
        let duplicate =
            Private::try_from(duplicate.to_vec()).map_err(|_| BlobError::PrivateUnreadable)?;
        let in_sym_seed = EncryptedSecret::try_from(in_sym_seed.to_vec())
            .map_err(|_| BlobError::PrivateUnreadable)?;
        Ok(Self {
            public,
            duplicate,
            in_sym_seed,
            auth_policy: area.auth_policy,
        })
    }
}

/// The public area of an imported sealed-data object with this unique and
/// binding: the forms `check_sealed_public` accepts.
fn imported_public(area: &SealedPublic) -> Result<Public, tss_esapi::Error> {
    let (attributes, auth_policy) = match &area.auth_policy {
        None => (IMPORTED_OBJECT_ATTRIBUTES, Digest::default()),
        Some(policy) => (
            BOUND_IMPORTED_OBJECT_ATTRIBUTES,
            Digest::try_from(policy.to_vec())?,
        ),
    };
    PublicBuilder::new()
        .with_public_algorithm(PublicAlgorithm::KeyedHash)
        .with_name_hashing_algorithm(HashingAlgorithm::Sha256)
        .with_object_attributes(ObjectAttributes::from(attributes))
        .with_auth_policy(auth_policy)
        .with_keyed_hash_parameters(PublicKeyedHashParameters::new(KeyedHashScheme::Null))
        .with_keyed_hash_unique_identifier(Digest::try_from(area.unique.to_vec())?)
        .build()
}

/// Marshals Create's output the way tpm2-tools writes `-u` and `-r` files.
pub fn blobs_from_created(
    public: Public,
    private: &Private,
) -> Result<SealedBlobs, tss_esapi::Error> {
    let public = PublicBuffer::try_from(public)?.marshall()?;
    let content = private.value();
    let size = u16::try_from(content.len()).expect("TPM2B_PRIVATE fits its u16 size field");
    let mut private = Vec::with_capacity(2 + content.len());
    private.extend_from_slice(&size.to_be_bytes());
    private.extend_from_slice(content);
    Ok(SealedBlobs { public, private })
}

/// The blobs of a sealed-data object with the unbound template and
/// `private` as its TPM2B_PRIVATE content: what the daemon's stand-in TPM
/// (`kms::fake`) writes, so that its envelopes go through the real parser.
pub fn unbound_blobs_with_private(private: &[u8]) -> Result<SealedBlobs, tss_esapi::Error> {
    blobs_from_created(
        sealed_template(None)?,
        &Private::try_from(private.to_vec())?,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_round_trips_through_the_blob_checks() {
        let blobs = blobs_from_created(
            sealed_template(None).unwrap(),
            &Private::try_from(vec![9u8; 158]).unwrap(),
        )
        .unwrap();
        // TPM2B_PUBLIC of a KeyedHash object with an empty unique.
        assert_eq!(&blobs.public[..2], &[0x00, 0x0e]);
        assert_eq!(&blobs.private[..2], &[0x00, 158]);
        assert!(LoadableObject::from_blobs(&blobs).is_ok());
    }

    #[test]
    fn refuses_objects_sceau_never_creates() {
        let signing = PublicBuilder::new()
            .with_public_algorithm(PublicAlgorithm::KeyedHash)
            .with_name_hashing_algorithm(HashingAlgorithm::Sha256)
            .with_object_attributes(
                ObjectAttributesBuilder::new()
                    .with_fixed_tpm(true)
                    .with_fixed_parent(true)
                    .with_user_with_auth(true)
                    .with_sign_encrypt(true)
                    .build()
                    .unwrap(),
            )
            .with_keyed_hash_parameters(PublicKeyedHashParameters::new(
                KeyedHashScheme::HMAC_SHA_256,
            ))
            .with_keyed_hash_unique_identifier(Digest::default())
            .build()
            .unwrap();
        let blobs =
            blobs_from_created(signing, &Private::try_from(vec![9u8; 158]).unwrap()).unwrap();
        assert!(matches!(
            LoadableObject::from_blobs(&blobs),
            Err(BlobError::NotSealedData)
        ));
    }

    /// The `Public` built from a checked area's unique is that area, byte
    /// for byte: otherwise Import would compute another Name and refuse
    /// every genuine entry. Shown to fail by setting noDA off in
    /// `imported_public` (the bytes differ at objectAttributes).
    #[test]
    fn the_imported_public_is_the_checked_area() {
        for policy in [None, Some([0x5A; DIGEST_LEN])] {
            let object =
                sceau_format::duplicate::SealedObject::with_policy(b"a DEK seed", policy.as_ref());
            let area = object.tpmt_public();
            let checked = sceau_format::duplicate::check_sealed_public(area).unwrap();
            assert_eq!(checked.auth_policy, policy);
            let built = imported_public(&checked).unwrap();
            assert_eq!(built.marshall().unwrap(), area);
        }
    }
}
