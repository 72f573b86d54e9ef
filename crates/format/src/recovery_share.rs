//! The recovery key split among custodians: Feldman's verifiable secret
//! sharing over P-256's scalar field.
//!
//! `sceau-recover recovery-keygen --custodians N --threshold K` draws a
//! polynomial f of degree K−1 whose constant term is the recovery key's
//! scalar, gives custodian i the value f(i) (i = 1…N), and puts in every
//! share the commitments C_j = a_j·G to the coefficients. C_0 is the recovery
//! public key itself, so a share names the key it belongs to, and one share
//! is checked alone, before anything is combined: f(i)·G = Σ C_j·iʲ. Any K
//! shares give f(0) by Lagrange interpolation; K−1 shares leave every value
//! of f(0) equally likely (Shamir), and the commitments add only what the
//! public key already says, points whose discrete logarithms are as hard to
//! find as the recovery key's (audit/recovery-key.md).
//!
//! A share file, before `sceau-recover` encrypts it to its custodian:
//!
//! ```text
//! custodian: alice
//! share: 2 of 3, any 2 open
//! name: 000b…            (the recovery key's Name, as in its public file)
//! -----BEGIN SCEAU RECOVERY SHARE-----
//! base64( version 1 ‖ K ‖ N ‖ i ‖ f(i) (32 bytes, big-endian) ‖ C_0…C_{K−1} (33 bytes each, SEC1 compressed) )
//! -----END SCEAU RECOVERY SHARE-----
//! ```

use p256::elliptic_curve::Field as _;
use p256::elliptic_curve::PrimeField as _;
use p256::elliptic_curve::sec1::{FromEncodedPoint as _, ToEncodedPoint as _};
use p256::{AffinePoint, EncodedPoint, ProjectivePoint, PublicKey, Scalar, SecretKey};
use zeroize::{Zeroize as _, Zeroizing};

use super::armor::{self, ArmorError};
use super::recovery_key::RecoveryIdentity;
use super::storage_key::StorageKey;
use crate::key_id::hex;

pub const SHARE_LABEL: &str = "SCEAU RECOVERY SHARE";
/// Vault allows 255 shares; sixteen custodians is already more people than
/// any recovery ceremony gathers, and keeps a share file under 1 KiB.
pub const MAX_CUSTODIANS: u8 = 16;
const VERSION: u8 = 1;
const SCALAR_LEN: usize = 32;
const POINT_LEN: usize = 33;
const HEADER_LEN: usize = 4;

#[derive(Debug, thiserror::Error)]
pub enum ShareError {
    #[error("share file: {0}")]
    Armor(ArmorError),
    #[error("share file: unsupported version {0} (this sceau-recover reads version 1)")]
    Version(u8),
    #[error("share file: {0}")]
    Malformed(&'static str),
    #[error("share file: the name line does not match the recovery key the share commits to")]
    PinMismatch,
    #[error("share file: the share line does not match the share it carries")]
    ShapeLineMismatch,
    #[error(
        "share {index} does not match its key set's commitments: the share or its commitments were altered"
    )]
    DoesNotVerify { index: u8 },
    #[error(
        "a threshold of {threshold} among {custodians} custodians: need 1 ≤ threshold ≤ custodians ≤ {MAX_CUSTODIANS}"
    )]
    Shape { threshold: usize, custodians: usize },
}

crate::inner_errors!(ShareError { Armor(ArmorError) });

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CombineError {
    #[error("shares given: {have} of the {need} that open recovery key {key}")]
    TooFew {
        have: usize,
        need: usize,
        key: String,
    },
    #[error("the shares belong to different key sets")]
    MixedKeySets,
    #[error("share {0} was given twice")]
    Duplicate(u8),
    #[error("the combined shares do not give the recovery key")]
    WrongKey,
}

/// One custodian's share: f(i), and the commitments that check it.
pub struct Share {
    threshold: u8,
    custodians: u8,
    index: u8,
    /// Boxed so that moving a share (into a Vec, out of a tuple) moves a
    /// pointer and leaves no copy of f(i) behind to outlive the wipe.
    value: Box<Zeroizing<Scalar>>,
    commitments: Vec<AffinePoint>,
    custodian: String,
}

impl Share {
    pub fn index(&self) -> u8 {
        self.index
    }

    pub fn threshold(&self) -> u8 {
        self.threshold
    }

    pub fn custodians(&self) -> u8 {
        self.custodians
    }

    /// The custodian's name as the file's header line says: bound to
    /// nothing (age protects a file's integrity, not who wrote it), so it
    /// is shown, never trusted.
    pub fn custodian(&self) -> &str {
        &self.custodian
    }

    /// f(i), big-endian: the secret part of the share (for the tests that
    /// look for copies of it in memory).
    pub fn value_bytes(&self) -> Zeroizing<[u8; SCALAR_LEN]> {
        Zeroizing::new(self.value.to_bytes().into())
    }

    /// The recovery public key this share belongs to (C_0).
    pub fn recovery_key(&self) -> StorageKey {
        let point = PublicKey::from_affine(self.commitments[0]).expect("checked at parse");
        StorageKey::from_point(&point)
    }

    /// Whether both shares come from one split: same shape, same commitments.
    pub fn same_key_set(&self, other: &Share) -> bool {
        self.key_set() == other.key_set()
    }

    /// The key set's fingerprint: SHA-256 over K, N and every commitment.
    /// C_0 alone (the recovery key) says which key a share opens, but anyone
    /// who knows a custodian's recipient can write them a share with C_0
    /// and made-up other commitments that verifies alone; the fingerprint,
    /// printed at keygen for the ceremony record and by `share verify` for
    /// each custodian, is what tells the genuine set from such a forgery.
    pub fn key_set(&self) -> [u8; 32] {
        use sha2::{Digest as _, Sha256};
        let mut hash = Sha256::new();
        hash.update(b"sceau recovery key set v1\0");
        hash.update([self.threshold, self.custodians]);
        for point in &self.commitments {
            hash.update(point.to_encoded_point(true).as_bytes());
        }
        hash.finalize().into()
    }

    /// The plaintext share file (to be encrypted to its custodian).
    pub fn file(&self) -> Zeroizing<String> {
        let mut bytes = Zeroizing::new(Vec::with_capacity(
            HEADER_LEN + SCALAR_LEN + POINT_LEN * self.commitments.len(),
        ));
        bytes.extend_from_slice(&[VERSION, self.threshold, self.custodians, self.index]);
        bytes.extend_from_slice(&self.value.to_bytes());
        for point in &self.commitments {
            bytes.extend_from_slice(point.to_encoded_point(true).as_bytes());
        }
        Zeroizing::new(armor::encode(
            SHARE_LABEL,
            &[
                "sceau recovery share: with the other custodians' shares, it opens every",
                "envelope wrapped for this recovery key. Keep it encrypted and offline.",
            ],
            &[
                ("custodian", self.custodian.clone()),
                ("share", self.shape_line()),
                ("name", hex(self.recovery_key().name())),
            ],
            &bytes,
        ))
    }

    /// Reads a plaintext share file and checks the share against its
    /// commitments: a share that parses is one that verifies.
    pub fn parse(text: &str) -> Result<Self, ShareError> {
        let armored = armor::decode(text, SHARE_LABEL)?;
        let bytes: &[u8] = &armored.bytes;
        let [version, threshold, custodians, index, ..] = *bytes else {
            return Err(ShareError::Malformed("shorter than its header"));
        };
        if version != VERSION {
            return Err(ShareError::Version(version));
        }
        if !(1..=custodians).contains(&threshold) || custodians > MAX_CUSTODIANS {
            return Err(ShareError::Malformed(
                "threshold or custodian count out of range",
            ));
        }
        if !(1..=custodians).contains(&index) {
            return Err(ShareError::Malformed("share index out of range"));
        }
        if bytes.len() != HEADER_LEN + SCALAR_LEN + POINT_LEN * usize::from(threshold) {
            return Err(ShareError::Malformed("length does not match its threshold"));
        }
        let (value, points) = bytes[HEADER_LEN..].split_at(SCALAR_LEN);
        let value = Option::<Scalar>::from(Scalar::from_repr(*p256::FieldBytes::from_slice(value)))
            .ok_or(ShareError::Malformed(
                "share value not below the group order",
            ))?;
        let value = Box::new(Zeroizing::new(value));
        let commitments = points
            .chunks_exact(POINT_LEN)
            .map(|encoded| {
                let encoded = EncodedPoint::from_bytes(encoded)
                    .map_err(|_| ShareError::Malformed("commitment not a SEC1 point"))?;
                Option::<AffinePoint>::from(AffinePoint::from_encoded_point(&encoded))
                    .ok_or(ShareError::Malformed("commitment not on P-256"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if PublicKey::from_affine(commitments[0]).is_err() {
            return Err(ShareError::Malformed(
                "the recovery key commitment is the identity",
            ));
        }
        let share = Share {
            threshold,
            custodians,
            index,
            value,
            commitments,
            custodian: crate::text::printable(armored.header("custodian").unwrap_or("")),
        };
        match armored.header("name") {
            Some(name) if name.eq_ignore_ascii_case(&hex(share.recovery_key().name())) => {}
            _ => return Err(ShareError::PinMismatch),
        }
        // The line custodians read with `age -d` must say what the block
        // does (N is in no equation, so only this check binds it there).
        if armored.header("share") != Some(share.shape_line().as_str()) {
            return Err(ShareError::ShapeLineMismatch);
        }
        if ProjectivePoint::GENERATOR * **share.value != share.committed_value() {
            return Err(ShareError::DoesNotVerify { index });
        }
        Ok(share)
    }

    /// What anyone who knows this custodian's recipient can write them: a
    /// share of the same recovery key (C_0) with a value of the forger's
    /// choosing and C_1 made to fit, so that it verifies alone. Only its
    /// key set fingerprint gives it away. For the tests that show so.
    #[cfg(any(test, feature = "test-support"))]
    pub fn forged_for_the_same_key(&self) -> Share {
        assert!(self.threshold >= 2, "a threshold-1 share has no C_1 to fit");
        let value = Scalar::random(&mut crate::random::SystemRandom);
        let x = Scalar::from(u64::from(self.index));
        // f(i)·G = C_0 + C_1·i + Σ_{j≥2} C_j·iʲ: solve for C_1.
        let mut rest = ProjectivePoint::from(self.commitments[0]);
        let mut power = x * x;
        for commitment in &self.commitments[2..] {
            rest += ProjectivePoint::from(*commitment) * power;
            power *= x;
        }
        let inverse = Option::<Scalar>::from(x.invert()).expect("index ≥ 1");
        let mut commitments = self.commitments.clone();
        commitments[1] = ((ProjectivePoint::GENERATOR * value - rest) * inverse).to_affine();
        Share {
            threshold: self.threshold,
            custodians: self.custodians,
            index: self.index,
            value: Box::new(Zeroizing::new(value)),
            commitments,
            custodian: self.custodian.clone(),
        }
    }

    /// `2 of 3, any 2 open`: the `share:` line of the file.
    fn shape_line(&self) -> String {
        format!(
            "{} of {}, any {} open",
            self.index, self.custodians, self.threshold
        )
    }

    /// Σ C_j·iʲ: what f(i)·G must be.
    fn committed_value(&self) -> ProjectivePoint {
        let x = Scalar::from(u64::from(self.index));
        let mut power = Scalar::ONE;
        let mut sum = ProjectivePoint::IDENTITY;
        for commitment in &self.commitments {
            sum += ProjectivePoint::from(*commitment) * power;
            power *= x;
        }
        sum
    }
}

/// Splits `identity` into one share per custodian, any `threshold` of which
/// give it back. The polynomial's coefficients are wiped when this returns.
pub fn split(
    identity: &RecoveryIdentity,
    threshold: usize,
    custodians: &[String],
) -> Result<Vec<Share>, ShareError> {
    let shape = ShareError::Shape {
        threshold,
        custodians: custodians.len(),
    };
    let (Ok(threshold_byte), Ok(count)) = (u8::try_from(threshold), u8::try_from(custodians.len()))
    else {
        return Err(shape);
    };
    if !(1..=count).contains(&threshold_byte) || count > MAX_CUSTODIANS {
        return Err(shape);
    }
    let mut coefficients = Zeroizing::new(Vec::with_capacity(threshold));
    coefficients.push(*identity.secret_scalar());
    for _ in 1..threshold {
        coefficients.push(Scalar::random(&mut crate::random::SystemRandom));
    }
    let commitments: Vec<AffinePoint> = coefficients
        .iter()
        .map(|a| (ProjectivePoint::GENERATOR * a).to_affine())
        .collect();
    let shares = custodians
        .iter()
        .zip(1..=count)
        .map(|(name, index)| {
            let x = Scalar::from(u64::from(index));
            // Horner's rule, from the highest coefficient down.
            let mut value = Box::new(Zeroizing::new(Scalar::ZERO));
            for a in coefficients.iter().rev() {
                **value = **value * x + a;
            }
            Share {
                threshold: threshold_byte,
                custodians: count,
                index,
                value,
                commitments: commitments.clone(),
                custodian: name.clone(),
            }
        })
        .collect();
    Ok(shares)
}

/// The recovery key from `threshold` verified shares of one key set (more
/// are ignored), checked against the key set's C_0.
pub fn combine(shares: &[Share]) -> Result<RecoveryIdentity, CombineError> {
    let Some(first) = shares.first() else {
        return Err(CombineError::TooFew {
            have: 0,
            need: 1,
            key: "(none given)".into(),
        });
    };
    if shares.iter().any(|share| !share.same_key_set(first)) {
        return Err(CombineError::MixedKeySets);
    }
    for (n, share) in shares.iter().enumerate() {
        if shares[..n]
            .iter()
            .any(|earlier| earlier.index == share.index)
        {
            return Err(CombineError::Duplicate(share.index));
        }
    }
    let need = usize::from(first.threshold);
    if shares.len() < need {
        return Err(CombineError::TooFew {
            have: shares.len(),
            need,
            key: hex(first.recovery_key().name()),
        });
    }
    let used = &shares[..need];
    let mut secret = Zeroizing::new(Scalar::ZERO);
    for share in used {
        let xi = Scalar::from(u64::from(share.index));
        let mut numerator = Scalar::ONE;
        let mut denominator = Scalar::ONE;
        for other in used.iter().filter(|other| other.index != share.index) {
            let xj = Scalar::from(u64::from(other.index));
            numerator *= xj;
            denominator *= xj - xi;
        }
        // Distinct indices make every factor non-zero.
        let inverse = Option::<Scalar>::from(denominator.invert()).expect("distinct indices");
        *secret += **share.value * numerator * inverse;
    }
    if ProjectivePoint::GENERATOR * *secret != ProjectivePoint::from(first.commitments[0]) {
        return Err(CombineError::WrongKey);
    }
    let mut bytes = secret.to_bytes();
    let key = SecretKey::from_slice(&bytes).map_err(|_| CombineError::WrongKey);
    bytes.zeroize();
    Ok(RecoveryIdentity::from_secret(key?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::as_printed;

    fn names(n: usize) -> Vec<String> {
        (1..=n).map(|i| format!("custodian-{i}")).collect()
    }

    fn subsets(n: usize, k: usize) -> Vec<Vec<usize>> {
        (0u32..1 << n)
            .filter(|mask| mask.count_ones() as usize == k)
            .map(|mask| (0..n).filter(|i| mask & (1 << i) != 0).collect())
            .collect()
    }

    fn reparsed(share: &Share) -> Share {
        Share::parse(&share.file()).unwrap()
    }

    /// For N ≤ 5 and every K, every K of the shares (through their files)
    /// give the key back, and every K−1 are refused before combining.
    #[test]
    fn every_threshold_subset_recovers_and_every_smaller_one_is_refused() {
        for n in 1..=5 {
            for k in 1..=n {
                let identity = RecoveryIdentity::generate();
                let shares: Vec<Share> = split(&identity, k, &names(n))
                    .unwrap()
                    .iter()
                    .map(reparsed)
                    .collect();
                for subset in subsets(n, k) {
                    let chosen: Vec<Share> = subset.iter().map(|&i| reparsed(&shares[i])).collect();
                    let combined = combine(&chosen).unwrap();
                    assert_eq!(
                        combined.public(),
                        identity.public(),
                        "{k} of {n}: {subset:?}"
                    );
                }
                for subset in subsets(n, k - 1) {
                    let chosen: Vec<Share> = subset.iter().map(|&i| reparsed(&shares[i])).collect();
                    assert!(
                        matches!(combine(&chosen), Err(CombineError::TooFew { have, need, .. }) if have == k - 1 && need == k),
                        "{k} of {n}: {subset:?}"
                    );
                }
            }
        }
    }

    /// The check that makes the sharing verifiable: a share value changed
    /// (and re-armored, as a holder who decrypted their file could) fails
    /// against the commitments. Without the check in `parse`, this fails
    /// with "an altered share parsed".
    #[test]
    fn an_altered_share_value_is_refused_by_the_commitments() {
        let identity = RecoveryIdentity::generate();
        let shares = split(&identity, 2, &names(3)).unwrap();
        let mut altered = reparsed(&shares[1]);
        **altered.value += Scalar::ONE;
        let result = Share::parse(&altered.file());
        assert!(
            matches!(result, Err(ShareError::DoesNotVerify { index: 2 })),
            "an altered share parsed"
        );
    }

    /// A share forged for the same recovery key verifies alone (C_0 is
    /// all it shares with the genuine set) but has another key set
    /// fingerprint, and does not combine with genuine shares.
    #[test]
    fn a_forged_share_of_the_same_key_shows_another_key_set() {
        let identity = RecoveryIdentity::generate();
        let shares = split(&identity, 2, &names(3)).unwrap();
        let forged = reparsed(&shares[0]).forged_for_the_same_key();
        let forged = Share::parse(&forged.file()).expect("a forgery verifies alone");
        assert_eq!(forged.recovery_key(), shares[0].recovery_key());
        assert_ne!(forged.key_set(), shares[0].key_set());
        assert_eq!(shares[1].key_set(), shares[0].key_set());
        assert_eq!(
            combine(&[forged, reparsed(&shares[1])]).err(),
            Some(CombineError::MixedKeySets)
        );
    }

    #[test]
    fn shares_of_two_key_sets_and_a_repeated_share_are_refused() {
        let one = split(&RecoveryIdentity::generate(), 2, &names(3)).unwrap();
        let other = split(&RecoveryIdentity::generate(), 2, &names(3)).unwrap();
        let mixed = [reparsed(&one[0]), reparsed(&other[1])];
        assert_eq!(combine(&mixed).err(), Some(CombineError::MixedKeySets));
        let twice = [reparsed(&one[0]), reparsed(&one[0])];
        assert_eq!(combine(&twice).err(), Some(CombineError::Duplicate(1)));
    }

    #[test]
    fn a_share_names_its_recovery_key_and_its_pin_is_checked() {
        let identity = RecoveryIdentity::generate();
        let shares = split(&identity, 2, &names(2)).unwrap();
        assert_eq!(&shares[0].recovery_key(), identity.public());
        let text = shares[0].file();
        assert!(text.contains("custodian: custodian-1\nshare: 1 of 2, any 2 open\n"));
        let tampered = text.replace("name: 000b", "name: 000c");
        assert!(matches!(
            Share::parse(&tampered),
            Err(ShareError::PinMismatch)
        ));
    }

    #[test]
    fn impossible_shapes_are_refused() {
        let identity = RecoveryIdentity::generate();
        for (k, n) in [(0, 3), (4, 3), (1, 0), (2, 17)] {
            let error = split(&identity, k, &names(n)).err().unwrap();
            assert!(matches!(error, ShareError::Shape { .. }), "{k} of {n}");
            assert_eq!(as_printed(&error), error.to_string());
        }
    }

    /// Every byte of a share's block is checked: flipping any one breaks
    /// the structure, fails the commitments, or (N, the custodian count,
    /// which no equation involves) no longer matches the file's `share:`
    /// line. Without that line check, flipping N parses.
    #[test]
    fn every_flipped_byte_is_refused() {
        use base64::Engine as _;
        let identity = RecoveryIdentity::generate();
        let share = &split(&identity, 3, &names(4)).unwrap()[2];
        let text = share.file();
        let armored = armor::decode(&text, SHARE_LABEL).unwrap();
        let block = base64::engine::general_purpose::STANDARD.encode(&*armored.bytes);
        for at in 0..armored.bytes.len() {
            let mut bytes = armored.bytes.to_vec();
            bytes[at] ^= 0x01;
            let flipped = base64::engine::general_purpose::STANDARD.encode(&bytes);
            let unwrapped: String = text
                .lines()
                .filter(|l| !l.starts_with('#'))
                .collect::<Vec<_>>()
                .join("\n");
            let header_end = unwrapped.find("-----BEGIN").unwrap();
            let forged = format!(
                "{}-----BEGIN {SHARE_LABEL}-----\n{flipped}\n-----END {SHARE_LABEL}-----\n",
                &unwrapped[..header_end]
            );
            assert_ne!(flipped, block);
            assert!(
                Share::parse(&forged).is_err(),
                "byte {at} flipped still parses"
            );
        }
    }
}
