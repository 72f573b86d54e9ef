//! Cluster envelopes: one sealed-data object wrapped for several storage
//! keys; version 3 is signed by the member TPM that made it, version 2 (the
//! same body, unsigned) is what sceau wrote before. Layout (integers
//! big-endian; docs/envelope.md has the sizes):
//!
//! ```text
//! ciphertext  = version ‖ layout ‖ TPM2B(TPMT_PUBLIC of the sealed object)
//!               ‖ tail [‖ u8 signer ‖ signature]      (version 3 only)
//!   version 0x02: unsigned; 0x03: signed
//!   layout 0x00: tail = recipients
//!   layout 0x01: tail = SHA-256(recipients); the recipients travel in the
//!                annotation `recipients.sceau.io`
//! recipients  = u8 count ‖ count × entry, sorted by (role, Name), no Name
//!               twice, at most one recovery entry
//! entry       = u8 role (1 member SRK, 2 recovery key) ‖ Name (34 bytes)
//!               ‖ TPM2B(duplicate) ‖ TPM2B(in_sym_seed)
//! signer      = the index in recipients of the member whose TPM signed
//! signature   = ECDSA P-256 r ‖ s (low s), 64 bytes, by that member's
//!               envelope signing key, over SHA-256(SIGNATURE_DOMAIN ‖ every
//!               byte of the ciphertext before the signature)
//! ```
//!
//! The signature covers the version, the layout, the object's public area,
//! every recipient entry (inline, or through the digest of the annotation
//! that holds them) and the signer's index: a member that checks it has
//! checked every byte any member will read.
//!
//! Ciphertexts are parsed by `envelope::Envelope::parse`, which reads the
//! version byte and the length limit and hands the rest to [`parse_body`];
//! `ClusterEnvelope::parse` (in `envelope.rs`) is the same parser for callers
//! that accept cluster envelopes only. Parsing is pure and strict; the
//! signature is checked against the membership (`members`), and each
//! entry's HMAC, which binds it to the object's Name, by the TPM's Import or
//! by recovery.

use std::collections::HashMap;

use sha2::{Digest as _, Sha256};

use super::duplicate::ImportBlob;
use super::signing_key::SIGNATURE_LEN;
use super::wire::{MAX_CIPHERTEXT_LEN, NAME_LEN, Reader, WireError, Writer};
use crate::text::printable;

/// A ciphertext and the annotations that go with it.
type EncodedParts = (Vec<u8>, HashMap<String, Vec<u8>>);

/// Unsigned cluster envelopes, written before signatures; opened only
/// while the operator allows it (`serve --accept-unsigned-envelopes`).
pub const VERSION_CLUSTER: u8 = 0x02;
/// Signed cluster envelopes.
pub const VERSION_SIGNED: u8 = 0x03;
/// What the signature's digest starts with, so that a signature over an
/// envelope can never stand for anything else the key might sign.
pub const SIGNATURE_DOMAIN: &[u8] = b"sceau cluster envelope signature v1\0";
/// The signer's index and the signature, after the tail.
const SIGNATURE_TRAILER_LEN: usize = 1 + SIGNATURE_LEN;
/// The annotation key that holds the recipients when they do not fit the
/// ciphertext; a DNS-style name, as the apiserver requires.
pub const RECIPIENTS_ANNOTATION: &str = "recipients.sceau.io";
/// The apiserver's limit on the annotations together (the ciphertext's is
/// [`MAX_CIPHERTEXT_LEN`], shared with version 1).
pub const MAX_ANNOTATIONS_LEN: usize = 32 * 1024;
/// More recipients than any control plane has members; bounds parsing work.
pub const MAX_RECIPIENTS: usize = 16;
const LAYOUT_INLINE: u8 = 0x00;
const LAYOUT_ANNOTATION: u8 = 0x01;
const DIGEST_LEN: usize = 32;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    Member = 1,
    Recovery = 2,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recipient {
    pub role: Role,
    pub name: [u8; NAME_LEN],
    pub blob: ImportBlob,
}

/// A parsed cluster envelope (version 2 or 3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterEnvelope {
    /// The sealed object's TPMT_PUBLIC, shared by every recipient.
    pub object_public: Vec<u8>,
    pub recipients: Vec<Recipient>,
    /// `None` for a version 2 envelope.
    pub signature: Option<EnvelopeSignature>,
}

/// A version 3 envelope's signature, as parsed: not yet verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvelopeSignature {
    /// The signer's index in `recipients`: always a member entry.
    pub signer: usize,
    pub signature: [u8; SIGNATURE_LEN],
    /// The SHA-256 digest the signature must verify over.
    pub digest: [u8; DIGEST_LEN],
}

/// A version 3 envelope before its signature: what the signer's TPM signs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToSign {
    signed_part: Vec<u8>,
    annotations: HashMap<String, Vec<u8>>,
    digest: [u8; DIGEST_LEN],
}

impl ToSign {
    /// The digest the signer's TPM signs.
    pub fn digest(&self) -> &[u8; DIGEST_LEN] {
        &self.digest
    }

    /// The finished envelope, with `signature` (`r ‖ s`, low s) appended.
    pub fn finish(self, signature: &[u8; SIGNATURE_LEN]) -> Encoded {
        let mut ciphertext = self.signed_part;
        ciphertext.extend_from_slice(signature);
        Encoded {
            ciphertext,
            annotations: self.annotations,
        }
    }
}

/// The KMS v2 EncryptResponse fields an envelope occupies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encoded {
    pub ciphertext: Vec<u8>,
    pub annotations: HashMap<String, Vec<u8>>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterEnvelopeError {
    #[error(transparent)]
    Wire(#[from] WireError),
    #[error("not a cluster envelope (version 2 or 3)")]
    NotVersion2,
    #[error("the signer is entry {0}, which is not a member entry")]
    SignerNotAMember(usize),
    #[error("unknown recipient layout {0}")]
    UnknownLayout(u8),
    #[error("unknown recipient role {0}")]
    UnknownRole(u8),
    #[error("{0} recipients; between 1 and {MAX_RECIPIENTS} are allowed")]
    RecipientCount(usize),
    #[error("recipients are not sorted or repeat a Name")]
    RecipientOrder,
    #[error("more than one recovery entry")]
    SecondRecovery,
    #[error("one Name appears as both a member and the recovery key")]
    NameInTwoRoles,
    #[error("ciphertext is {0} bytes, above the {MAX_CIPHERTEXT_LEN}-byte limit")]
    CiphertextTooLong(usize),
    #[error("the recipients do not fit the {MAX_ANNOTATIONS_LEN}-byte annotation limit")]
    AnnotationTooLong,
    #[error(
        "the recipients fit the ciphertext, yet travel in the {RECIPIENTS_ANNOTATION} annotation"
    )]
    AnnotationNotNeeded,
    #[error("the ciphertext expects the {RECIPIENTS_ANNOTATION} annotation, which is missing")]
    MissingAnnotation,
    #[error("the {RECIPIENTS_ANNOTATION} annotation does not match the ciphertext's digest")]
    AnnotationDigest,
    /// The key as [`printable`] shows it: a client chooses it.
    #[error("unexpected annotation \"{0}\"; sceau reads only {RECIPIENTS_ANNOTATION}")]
    UnexpectedAnnotation(String),
}

impl ClusterEnvelope {
    /// Sorts the recipients into canonical order and encodes the envelope
    /// as it stands: with a signature (as `parse` read one), the version 3
    /// envelope of that signer and signature; without, an unsigned version 2
    /// one, which sceau no longer writes (the tests make them as envelopes
    /// of the past and as forgeries). Inline when the ciphertext stays
    /// within 1 KiB, else with the recipients in an annotation.
    pub fn encode(mut self) -> Result<Encoded, ClusterEnvelopeError> {
        let Some(signed) = self.signature.take() else {
            let (ciphertext, annotations) = self.encode_parts(VERSION_CLUSTER, None)?;
            return Ok(Encoded {
                ciphertext,
                annotations,
            });
        };
        let signer = self
            .recipients
            .get(signed.signer)
            .ok_or(ClusterEnvelopeError::SignerNotAMember(
                self.recipients.len(),
            ))?
            .name;
        Ok(self.encode_for_signing(&signer)?.finish(&signed.signature))
    }

    /// A version 3 envelope up to its signature, signed by the member whose
    /// SRK has Name `signer`; [`ToSign::finish`] appends the signature.
    pub fn encode_for_signing(
        self,
        signer: &[u8; NAME_LEN],
    ) -> Result<ToSign, ClusterEnvelopeError> {
        let (signed_part, annotations) = self.encode_parts(VERSION_SIGNED, Some(signer))?;
        let digest = signature_digest(&signed_part);
        Ok(ToSign {
            signed_part,
            annotations,
            digest,
        })
    }

    /// The ciphertext (for version 3, up to the signer's index and without
    /// the signature, whose room is kept) and the annotations.
    fn encode_parts(
        mut self,
        version: u8,
        signer: Option<&[u8; NAME_LEN]>,
    ) -> Result<EncodedParts, ClusterEnvelopeError> {
        self.recipients.sort_by_key(|r| (r.role, r.name));
        check_recipients(&self.recipients)?;
        let trailer = match signer {
            None => Vec::new(),
            Some(name) => {
                let index = self
                    .recipients
                    .iter()
                    .position(|r| r.role == Role::Member && &r.name == name)
                    .ok_or(ClusterEnvelopeError::SignerNotAMember(
                        self.recipients.len(),
                    ))?;
                vec![u8::try_from(index).expect("checked against MAX_RECIPIENTS")]
            }
        };
        let signature_room = if signer.is_some() { SIGNATURE_LEN } else { 0 };
        let block = encode_recipients(&self.recipients);
        let mut inline = self.header(version, LAYOUT_INLINE, &block);
        if inline.len() + trailer.len() + signature_room <= MAX_CIPHERTEXT_LEN {
            inline.extend_from_slice(&trailer);
            return Ok((inline, HashMap::new()));
        }
        if block.len() > MAX_ANNOTATIONS_LEN - RECIPIENTS_ANNOTATION.len() {
            return Err(ClusterEnvelopeError::AnnotationTooLong);
        }
        let mut ciphertext = self.header(version, LAYOUT_ANNOTATION, &Sha256::digest(&block));
        ciphertext.extend_from_slice(&trailer);
        if ciphertext.len() + signature_room > MAX_CIPHERTEXT_LEN {
            return Err(ClusterEnvelopeError::CiphertextTooLong(
                ciphertext.len() + signature_room,
            ));
        }
        Ok((
            ciphertext,
            HashMap::from([(RECIPIENTS_ANNOTATION.to_string(), block)]),
        ))
    }

    fn header(&self, version: u8, layout: u8, tail: &[u8]) -> Vec<u8> {
        let mut w = Writer::default();
        w.u8(version)
            .u8(layout)
            .tpm2b(&self.object_public)
            .raw(tail);
        w.finish()
    }

    pub fn entry_for(&self, name: &[u8; NAME_LEN]) -> Option<&Recipient> {
        self.recipients.iter().find(|r| &r.name == name)
    }
}

/// A cluster envelope of `version` (2 or 3): `ciphertext` is all of it,
/// version byte included, and `annotations` the request's. Annotations
/// other than sceau's own are refused, so nothing unbound rides along.
pub(crate) fn parse_body(
    version: u8,
    ciphertext: &[u8],
    annotations: &HashMap<String, Vec<u8>>,
) -> Result<ClusterEnvelope, ClusterEnvelopeError> {
    let (body, trailer) = match version {
        VERSION_SIGNED => {
            let split = ciphertext
                .len()
                .checked_sub(SIGNATURE_TRAILER_LEN)
                .filter(|&split| split >= 1)
                .ok_or(WireError::Truncated("signature"))?;
            ciphertext.split_at(split)
        }
        _ => (ciphertext, &[][..]),
    };
    let mut r = Reader::new(body);
    r.u8("version")?;
    let layout = r.u8("layout")?;
    let object_public = r.tpm2b("sealed object public")?.to_vec();
    let tail = r.take(r.remaining(), "recipients")?;
    let recipients = match layout {
        LAYOUT_INLINE => {
            refuse_annotations(annotations, None)?;
            parse_recipients(tail)?
        }
        LAYOUT_ANNOTATION => {
            let block = annotated_block(tail, annotations)?;
            // Only what `encode` writes, so an envelope has one encoding.
            if 4 + object_public.len() + block.len() + trailer.len() <= MAX_CIPHERTEXT_LEN {
                return Err(ClusterEnvelopeError::AnnotationNotNeeded);
            }
            if block.len() > MAX_ANNOTATIONS_LEN - RECIPIENTS_ANNOTATION.len() {
                return Err(ClusterEnvelopeError::AnnotationTooLong);
            }
            parse_recipients(block)?
        }
        other => return Err(ClusterEnvelopeError::UnknownLayout(other)),
    };
    let signature = match trailer.split_first() {
        None => None,
        Some((&signer, signature)) => {
            let signer = usize::from(signer);
            if recipients.get(signer).map(|r| r.role) != Some(Role::Member) {
                return Err(ClusterEnvelopeError::SignerNotAMember(signer));
            }
            let signed_part = &ciphertext[..ciphertext.len() - SIGNATURE_LEN];
            Some(EnvelopeSignature {
                signer,
                signature: signature.try_into().expect("SIGNATURE_LEN bytes"),
                digest: signature_digest(signed_part),
            })
        }
    };
    Ok(ClusterEnvelope {
        object_public,
        recipients,
        signature,
    })
}

fn signature_digest(signed_part: &[u8]) -> [u8; DIGEST_LEN] {
    let mut hash = Sha256::new();
    hash.update(SIGNATURE_DOMAIN);
    hash.update(signed_part);
    hash.finalize().into()
}

fn refuse_annotations(
    annotations: &HashMap<String, Vec<u8>>,
    allowed: Option<&str>,
) -> Result<(), ClusterEnvelopeError> {
    match annotations.keys().find(|key| Some(key.as_str()) != allowed) {
        Some(key) => Err(ClusterEnvelopeError::UnexpectedAnnotation(printable(key))),
        None => Ok(()),
    }
}

fn annotated_block<'a>(
    digest: &[u8],
    annotations: &'a HashMap<String, Vec<u8>>,
) -> Result<&'a [u8], ClusterEnvelopeError> {
    if digest.len() != DIGEST_LEN {
        return Err(WireError::Trailing(digest.len().saturating_sub(DIGEST_LEN), "digest").into());
    }
    refuse_annotations(annotations, Some(RECIPIENTS_ANNOTATION))?;
    let block = annotations
        .get(RECIPIENTS_ANNOTATION)
        .ok_or(ClusterEnvelopeError::MissingAnnotation)?;
    if Sha256::digest(block).as_slice() != digest {
        return Err(ClusterEnvelopeError::AnnotationDigest);
    }
    Ok(block)
}

fn encode_recipients(recipients: &[Recipient]) -> Vec<u8> {
    let mut w = Writer::default();
    w.u8(u8::try_from(recipients.len()).expect("checked against MAX_RECIPIENTS"));
    for r in recipients {
        w.u8(r.role as u8).raw(&r.name);
        w.tpm2b(&r.blob.duplicate).tpm2b(&r.blob.in_sym_seed);
    }
    w.finish()
}

fn parse_recipients(block: &[u8]) -> Result<Vec<Recipient>, ClusterEnvelopeError> {
    let mut r = Reader::new(block);
    let count = usize::from(r.u8("recipient count")?);
    if count == 0 || count > MAX_RECIPIENTS {
        return Err(ClusterEnvelopeError::RecipientCount(count));
    }
    let recipients = (0..count)
        .map(|_| parse_entry(&mut r))
        .collect::<Result<Vec<_>, _>>()?;
    r.finish("recipients")?;
    check_recipients(&recipients)?;
    Ok(recipients)
}

fn parse_entry(r: &mut Reader<'_>) -> Result<Recipient, ClusterEnvelopeError> {
    let role = match r.u8("role")? {
        1 => Role::Member,
        2 => Role::Recovery,
        other => return Err(ClusterEnvelopeError::UnknownRole(other)),
    };
    let name = r
        .take(NAME_LEN, "recipient Name")?
        .try_into()
        .expect("NAME_LEN bytes");
    let duplicate = r.tpm2b("duplicate")?.to_vec();
    let in_sym_seed = r.tpm2b("in_sym_seed")?.to_vec();
    Ok(Recipient {
        role,
        name,
        blob: ImportBlob {
            duplicate,
            in_sym_seed,
        },
    })
}

/// Canonical order makes the encoding, and so the key_id, unique. At most
/// one recovery entry, and no Name in two roles: the key_id hashes every
/// (role, Name) pair, and each pair must stand for one recipient.
fn check_recipients(recipients: &[Recipient]) -> Result<(), ClusterEnvelopeError> {
    if recipients.is_empty() || recipients.len() > MAX_RECIPIENTS {
        return Err(ClusterEnvelopeError::RecipientCount(recipients.len()));
    }
    let ordered = recipients
        .windows(2)
        .all(|pair| (pair[0].role, pair[0].name) < (pair[1].role, pair[1].name));
    if !ordered {
        return Err(ClusterEnvelopeError::RecipientOrder);
    }
    if recipients
        .iter()
        .filter(|r| r.role == Role::Recovery)
        .count()
        > 1
    {
        return Err(ClusterEnvelopeError::SecondRecovery);
    }
    let mut names: Vec<&[u8; NAME_LEN]> = recipients.iter().map(|r| &r.name).collect();
    names.sort_unstable();
    if names.windows(2).any(|pair| pair[0] == pair[1]) {
        return Err(ClusterEnvelopeError::NameInTwoRoles);
    }
    Ok(())
}

#[cfg(test)]
mod tests;
