//! Sealed-data objects built in software and wrapped for a storage key as
//! TPM2_Import expects them (TPM 2.0 Part 1 §23.3, "outer wrapper" only):
//!
//! ```text
//! seed      = KDFe(Z, "DUPLICATE", ephemeral.x, storage_key.x, 256)   (ECDH, P-256)
//! sym_key   = KDFa(seed, "STORAGE", object Name, "", 128)
//! hmac_key  = KDFa(seed, "INTEGRITY", "", "", 256)
//! enc       = AES-128-CFB(sym_key, iv = 0, TPM2B_SENSITIVE)
//! duplicate = TPM2B(HMAC-SHA-256(hmac_key, enc ‖ Name)) ‖ enc          (TPM2B_PRIVATE)
//! in_sym_seed = TPMS_ECC_POINT(ephemeral)                             (TPM2B_ENCRYPTED_SECRET)
//! ```
//!
//! A member TPM runs exactly this in TPM2_Import; [`import_in_software`] runs
//! it with the recovery key's private scalar, with the same checks.

use crate::random::{self, SystemRandom};
use aes::Aes128;
use cfb_mode::cipher::{AsyncStreamCipher as _, KeyIvInit as _};
use p256::elliptic_curve::point::AffineCoordinates as _;
use p256::{FieldBytes, PublicKey, SecretKey};
use sha2::{Digest as _, Sha256};
use zeroize::Zeroizing;

use super::kdf::{hmac_sha256, hmac_sha256_verify, kdfa, kdfe};
use super::public::{PublicArea, PublicKey as TpmPublicKey, expect};
use super::storage_key::{
    PARENT_SYM_BITS, StorageKey, StorageKeyError, coordinates, point_from_coordinates,
};
use super::wire::{
    ALG_KEYEDHASH, ALG_NULL, ALG_SHA256, NAME_LEN, Reader, WireError, Writer, sha256_name,
};

/// userWithAuth and noDA; fixedTPM and fixedParent must be clear for
/// TPM2_Import. The empty authPolicy means no DUP-role session can ever be
/// satisfied, so an imported copy cannot be duplicated out again.
pub const IMPORTED_OBJECT_ATTRIBUTES: u32 = 0x0000_0440;
/// noDA alone: an imported object bound to a boot policy key
/// (docs/boot-binding.md), whose authPolicy is PolicyAuthorize of that key;
/// with userWithAuth clear, only a policy session unseals it.
pub const BOUND_IMPORTED_OBJECT_ATTRIBUTES: u32 = 0x0000_0400;
const SEED_VALUE_LEN: usize = 32;
/// A SHA-256 digest's length: the unique of a sealed object.
pub const DIGEST_LEN: usize = 32;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImportError {
    #[error("malformed import blob: {0}")]
    Wire(WireError),
    #[error("malformed ephemeral key: {0}")]
    Point(StorageKeyError),
    #[error("integrity check failed: the entry was not made for this key and object")]
    Integrity,
    #[error("the sealed object's public area does not match its sensitive area")]
    Binding,
    #[error("not a sceau sealed-data object: {0}")]
    NotSealedObject(&'static str),
}

crate::inner_errors!(ImportError {
    Wire(WireError),
    Point(StorageKeyError),
});

/// One recipient's share: the two TPM2_Import inputs besides the public area
/// (for a credential: TPM2_ActivateCredential's credentialBlob and secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportBlob {
    /// TPM2B_PRIVATE contents: outer HMAC then the encrypted sensitive area.
    pub duplicate: Vec<u8>,
    /// TPM2B_ENCRYPTED_SECRET contents: the marshalled ephemeral ECC point.
    pub in_sym_seed: Vec<u8>,
}

/// A sealed-data object made in software: its TPMT_PUBLIC (shared by every
/// recipient) and its marshalled TPM2B_SENSITIVE, which holds the DEK.
pub struct SealedObject {
    tpmt_public: Vec<u8>,
    name: [u8; NAME_LEN],
    sensitive: Zeroizing<Vec<u8>>,
}

impl SealedObject {
    pub fn new(data: &[u8]) -> Self {
        Self::with_policy(data, None)
    }

    /// An object whose authPolicy is `auth_policy` (a boot policy key's
    /// PolicyAuthorize), or none.
    pub fn with_policy(data: &[u8], auth_policy: Option<&[u8; DIGEST_LEN]>) -> Self {
        let mut seed_value = Zeroizing::new([0u8; SEED_VALUE_LEN]);
        random::fill(seed_value.as_mut());
        let unique = keyed_hash_unique(seed_value.as_ref(), data);
        let tpmt_public = sealed_public(&unique, auth_policy);
        Self {
            name: sha256_name(&tpmt_public),
            tpmt_public,
            sensitive: marshal_sensitive(seed_value.as_ref(), data),
        }
    }

    pub fn tpmt_public(&self) -> &[u8] {
        &self.tpmt_public
    }

    /// Wraps the object for one storage key with a fresh ephemeral ECDH key.
    pub fn wrap_for(&self, key: &StorageKey) -> ImportBlob {
        outer_wrap(key, "DUPLICATE", &self.name, &self.sensitive)
    }
}

/// The TPM's outer wrapper, shared by duplication ("DUPLICATE": the blob
/// TPM2_Import takes) and credentials ("IDENTITY": the blob
/// TPM2_ActivateCredential takes): ECDH to `key`, KDFe, AES-128-CFB of
/// `plaintext` under a key bound to `name`, and an HMAC over both.
///
/// Every value derived here opens the plaintext, so all of them are wiped:
/// the seed and both keys are [`Zeroizing`], the AES state zeroizes on drop
/// (the `zeroize` features of `aes` and `cfb-mode`), and the hash and HMAC
/// states, which `sha2` cannot wipe, live on the stack of the thread that
/// calls this. The daemon calls it only on its wrapping thread, whose stack
/// is scrubbed after every job (`kms::wrapping`).
pub fn outer_wrap(key: &StorageKey, label: &str, name: &[u8], plaintext: &[u8]) -> ImportBlob {
    let ephemeral = SecretKey::random(&mut SystemRandom);
    let ephemeral_public = ephemeral.public_key();
    let shared = ecdh_z(&ephemeral, key.point());
    let (ephemeral_x, ephemeral_y) = coordinates(&ephemeral_public);
    let seed = kdfe(&shared, label, &ephemeral_x, &key.x(), 256);
    let mut in_sym_seed = Writer::default();
    in_sym_seed.tpm2b(&ephemeral_x).tpm2b(&ephemeral_y);
    ImportBlob {
        duplicate: wrap_with_seed(seed, name, plaintext),
        in_sym_seed: in_sym_seed.finish(),
    }
}

/// The half of the outer wrapper that follows the seed, whichever way the
/// seed reached the key's holder (ECDH and KDFe above; RSA-OAEP for an RSA
/// endorsement key in the SPIRE attestor): AES-128-CFB of `plaintext` under
/// KDFa(seed, "STORAGE", `name`), then the HMAC under KDFa(seed,
/// "INTEGRITY"). Returns TPM2B_PRIVATE (or TPM2B_ID_OBJECT) contents.
pub fn wrap_with_seed(seed: Zeroizing<Vec<u8>>, name: &[u8], plaintext: &[u8]) -> Vec<u8> {
    let keys = WrappingKeys::derive(seed, name);
    let mut encrypted = Zeroizing::new(plaintext.to_vec());
    cfb(&keys.storage).encrypt(&mut encrypted);
    let outer_hmac = hmac_sha256(&keys.integrity, &[&encrypted, name]);
    let mut duplicate = Writer::default();
    duplicate.tpm2b(&outer_hmac).raw(&encrypted);
    duplicate.finish()
}

/// The secrets one recipient's outer wrapper derives, each of which opens
/// the wrapped object: the seed (from ECDH and KDFe), the AES-128 key
/// (KDFa "STORAGE", bound to the object's Name) and the HMAC key (KDFa
/// "INTEGRITY"). Public so that the memory-scan tests can look for them.
pub struct WrappingKeys {
    pub seed: Zeroizing<Vec<u8>>,
    pub storage: Zeroizing<Vec<u8>>,
    pub integrity: Zeroizing<Vec<u8>>,
}

impl WrappingKeys {
    fn derive(seed: Zeroizing<Vec<u8>>, name: &[u8]) -> Self {
        Self {
            storage: kdfa(&seed, "STORAGE", name, &[], u32::from(PARENT_SYM_BITS)),
            integrity: kdfa(&seed, "INTEGRITY", &[], &[], 8 * DIGEST_LEN as u32),
            seed,
        }
    }

    /// What the holder of `secret` derives from a blob wrapped for it (the
    /// first half of TPM2_Import).
    pub fn recover(
        secret: &SecretKey,
        tpmt_public: &[u8],
        blob: &ImportBlob,
    ) -> Result<Self, ImportError> {
        let seed = recover_seed(secret, &blob.in_sym_seed)?;
        Ok(Self::derive(seed, &sha256_name(tpmt_public)))
    }
}

/// TPM2_Import, Load and Unseal done in software with a storage key's
/// private scalar: returns the sealed data after the same integrity and
/// binding checks a TPM makes.
pub fn import_in_software(
    secret: &SecretKey,
    tpmt_public: &[u8],
    blob: &ImportBlob,
) -> Result<Zeroizing<Vec<u8>>, ImportError> {
    let unique = check_sealed_public(tpmt_public)?.unique;
    let name = sha256_name(tpmt_public);
    let keys = WrappingKeys::recover(secret, tpmt_public, blob)?;
    let mut r = Reader::new(&blob.duplicate);
    let outer_hmac = r.tpm2b("outer HMAC")?;
    let encrypted = r.take(r.remaining(), "encrypted sensitive")?;
    if !hmac_sha256_verify(&keys.integrity, &[encrypted, &name], outer_hmac) {
        return Err(ImportError::Integrity);
    }
    let mut sensitive = Zeroizing::new(encrypted.to_vec());
    cfb_mode::Decryptor::<Aes128>::new_from_slices(&keys.storage, &[0u8; 16])
        .expect("KDFa made a 16-byte key")
        .decrypt(&mut sensitive);
    let (seed_value, data) = parse_sensitive(&sensitive)?;
    if keyed_hash_unique(seed_value, data) != unique {
        return Err(ImportError::Binding);
    }
    Ok(Zeroizing::new(data.to_vec()))
}

fn recover_seed(secret: &SecretKey, in_sym_seed: &[u8]) -> Result<Zeroizing<Vec<u8>>, ImportError> {
    let mut r = Reader::new(in_sym_seed);
    let x = r.tpm2b("ephemeral x")?;
    let y = r.tpm2b("ephemeral y")?;
    r.finish("TPMS_ECC_POINT")?;
    let ephemeral: PublicKey = point_from_coordinates(x, y)?;
    let shared = ecdh_z(secret, &ephemeral);
    let own_x = coordinates(&secret.public_key()).0;
    Ok(kdfe(
        &shared,
        "DUPLICATE",
        &coordinates(&ephemeral).0,
        &own_x,
        256,
    ))
}

/// The ECDH shared secret Z as TPM2_ECDH_ZGen computes it (SP 800-56A
/// §5.7.1.2): the x coordinate of `secret` · `public`. Both are checked
/// values (a non-zero scalar, a point on the curve that is not the
/// identity), so the product is never the identity. The scalar copy and Z
/// are wiped on drop; p256's `ecdh` module computes the same, but its
/// feature would add `hkdf` to the daemon for a function sceau never calls.
fn ecdh_z(secret: &SecretKey, public: &PublicKey) -> Zeroizing<FieldBytes> {
    let scalar = Zeroizing::new(secret.to_nonzero_scalar());
    let product = (public.to_projective() * scalar.as_ref()).to_affine();
    Zeroizing::new(product.x())
}

/// AES-128-CFB with a zero IV, as the TPM's outer wrapper uses it (each key
/// encrypts exactly one message, so the fixed IV is sound).
fn cfb(key: &[u8]) -> cfb_mode::Encryptor<Aes128> {
    cfb_mode::Encryptor::<Aes128>::new_from_slices(key, &[0u8; 16])
        .expect("KDFa made a 16-byte key")
}

fn keyed_hash_unique(seed_value: &[u8], data: &[u8]) -> [u8; DIGEST_LEN] {
    let mut hash = Sha256::new();
    hash.update(seed_value);
    hash.update(data);
    hash.finalize().into()
}

/// TPMT_PUBLIC of a KEYEDHASH sealed-data object with the given unique.
fn sealed_public(unique: &[u8; DIGEST_LEN], auth_policy: Option<&[u8; DIGEST_LEN]>) -> Vec<u8> {
    let mut w = Writer::default();
    let attributes = match auth_policy {
        None => IMPORTED_OBJECT_ATTRIBUTES,
        Some(_) => BOUND_IMPORTED_OBJECT_ATTRIBUTES,
    };
    w.u16(ALG_KEYEDHASH).u16(ALG_SHA256).u32(attributes);
    w.tpm2b(auth_policy.map_or(&[][..], |p| &p[..]))
        .u16(ALG_NULL)
        .tpm2b(unique);
    w.finish()
}

/// What [`check_sealed_public`] accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SealedPublic {
    /// The digest that binds the sensitive area.
    pub unique: [u8; DIGEST_LEN],
    /// The authPolicy of an object bound to a boot policy key.
    pub auth_policy: Option<[u8; DIGEST_LEN]>,
}

/// Accepts only the exact public areas [`SealedObject`] builds: unbound
/// (userWithAuth|noDA, no policy) or bound (noDA, a 32-byte authPolicy).
pub fn check_sealed_public(tpmt_public: &[u8]) -> Result<SealedPublic, ImportError> {
    let invalid = |what| ImportError::NotSealedObject(what);
    let area = PublicArea::parse(tpmt_public).map_err(|_| invalid("not a readable public area"))?;
    let TpmPublicKey::KeyedHash { unique } = &area.key else {
        return Err(invalid("not a keyed-hash object"));
    };
    expect("nameAlg", area.name_alg, ALG_SHA256)?;
    let auth_policy = match (area.attributes, area.auth_policy.as_slice()) {
        (IMPORTED_OBJECT_ATTRIBUTES, []) => None,
        (BOUND_IMPORTED_OBJECT_ATTRIBUTES, policy) => Some(
            policy
                .try_into()
                .map_err(|_| invalid("an authPolicy that is not a SHA-256 digest"))?,
        ),
        (IMPORTED_OBJECT_ATTRIBUTES, _) => return Err(invalid("non-empty authPolicy")),
        _ => return Err(invalid("unexpected object attributes")),
    };
    if area.scheme.is_some() {
        return Err(invalid("a keyed-hash scheme"));
    }
    let unique = unique
        .as_slice()
        .try_into()
        .map_err(|_| invalid("unique is not a SHA-256 digest"))?;
    Ok(SealedPublic {
        unique,
        auth_policy,
    })
}

/// TPM2B_SENSITIVE: sensitiveType, empty authValue, seedValue, the data.
fn marshal_sensitive(seed_value: &[u8], data: &[u8]) -> Zeroizing<Vec<u8>> {
    let mut inner = Writer::default();
    inner
        .u16(ALG_KEYEDHASH)
        .tpm2b(&[])
        .tpm2b(seed_value)
        .tpm2b(data);
    let inner = Zeroizing::new(inner.finish());
    let mut outer = Writer::default();
    outer.tpm2b(&inner);
    Zeroizing::new(outer.finish())
}

fn parse_sensitive(sensitive: &[u8]) -> Result<(&[u8], &[u8]), ImportError> {
    let mut outer = Reader::new(sensitive);
    let inner = outer.tpm2b("TPM2B_SENSITIVE")?;
    outer.finish("TPM2B_SENSITIVE")?;
    let mut r = Reader::new(inner);
    r.expect_u16(ALG_KEYEDHASH, "sensitiveType")?;
    if !r.tpm2b("authValue")?.is_empty() {
        return Err(ImportError::NotSealedObject("non-empty authValue"));
    }
    let seed_value = r.tpm2b("seedValue")?;
    let data = r.tpm2b("sealed data")?;
    r.finish("TPMT_SENSITIVE")?;
    Ok((seed_value, data))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recipient() -> (SecretKey, StorageKey) {
        let secret = SecretKey::random(&mut SystemRandom);
        let key = StorageKey::from_point(&secret.public_key());
        (secret, key)
    }

    #[test]
    fn software_import_opens_what_wrap_for_made() {
        let (secret, key) = recipient();
        let object = SealedObject::new(b"a 32-byte DEK seed for the test!");
        let blob = object.wrap_for(&key);
        let data = import_in_software(&secret, object.tpmt_public(), &blob).unwrap();
        assert_eq!(data.as_slice(), b"a 32-byte DEK seed for the test!");
        // The sizes docs/envelope.md relies on: public 46, duplicate 108, seed 68.
        assert_eq!(object.tpmt_public().len(), 46);
        assert_eq!(blob.duplicate.len(), 108);
        assert_eq!(blob.in_sym_seed.len(), 68);
    }

    #[test]
    fn another_key_or_any_flipped_bit_is_refused() {
        let (_, key) = recipient();
        let (other_secret, _) = recipient();
        let object = SealedObject::new(&[9; 32]);
        let blob = object.wrap_for(&key);
        assert!(import_in_software(&other_secret, object.tpmt_public(), &blob).is_err());
        let (secret, key) = recipient();
        let blob = object.wrap_for(&key);
        for i in 0..blob.duplicate.len() {
            let mut bad = blob.clone();
            bad.duplicate[i] ^= 0x01;
            assert!(
                import_in_software(&secret, object.tpmt_public(), &bad).is_err(),
                "byte {i}"
            );
        }
        for i in 0..object.tpmt_public().len() {
            let mut public = object.tpmt_public().to_vec();
            public[i] ^= 0x01;
            assert!(
                import_in_software(&secret, &public, &blob).is_err(),
                "public byte {i}"
            );
        }
    }

    /// The AES key schedule and the CFB state wipe themselves when dropped
    /// (an outside review found they did not). Without the `zeroize` features of `aes` and
    /// `cfb-mode` (as before the fix) this test does not compile.
    #[test]
    fn the_aes_cfb_state_wipes_itself_on_drop() {
        fn wipes_on_drop<T: zeroize::ZeroizeOnDrop>() {}
        wipes_on_drop::<Aes128>();
        wipes_on_drop::<cfb_mode::Encryptor<Aes128>>();
        wipes_on_drop::<cfb_mode::Decryptor<Aes128>>();
    }

    #[test]
    fn an_entry_from_another_object_is_refused() {
        let (secret, key) = recipient();
        let first = SealedObject::new(&[1; 32]);
        let second = SealedObject::new(&[2; 32]);
        let blob = first.wrap_for(&key);
        assert_eq!(
            import_in_software(&secret, second.tpmt_public(), &blob),
            Err(ImportError::Integrity)
        );
    }
}
