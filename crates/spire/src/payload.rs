//! The three messages of a `sceau_tpm` attestation, as SPIRE relays them
//! between the agent plugin and the server plugin (docs/spire.md, "Payload
//! format"):
//!
//! ```text
//! payload   (agent → server) "STP1" ‖ EK TPMT_PUBLIC ‖ EK certificate (DER, may be empty)
//!                            ‖ AK TPMT_PUBLIC ‖ TPMS_CREATION_DATA ‖ TPMS_ATTEST ‖ TPMT_SIGNATURE
//! challenge (server → agent) "STC1" ‖ credentialBlob ‖ secret ‖ nonce ‖ PCR indices
//! response  (agent → server) "STR1" ‖ credential ‖ quote TPMS_ATTEST ‖ TPMT_SIGNATURE ‖ PCR values
//!                            [‖ event log]
//! ```
//!
//! Every field but the PCR lists and the event log is a TPM2B (a big-endian
//! u16 length, then the bytes); a PCR list is a u8 count then that many
//! entries (an index byte in the challenge, a TPM2B digest in the
//! response). The response's values are the quote's, in its selection's
//! order: the asked PCRs of the SHA-256 bank, then, when the agent sends an
//! event log, the same PCRs of every other bank the log declares, bank
//! after bank (so an agent that quotes SHA-256 alone writes what agents
//! before banks wrote). The event log is optional and last: a big-endian u32 length
//! (a log outgrows a u16), then the TCG PC Client firmware event log
//! (crypto-agile). It rides in the response, beside the quote it is
//! checked against, rather than in the payload: the server names the PCRs
//! to quote only in the challenge, so only then does the agent know whether
//! a log is wanted (a quote covering PCRs 0–7), and the log read with the
//! quote (right before it, to quote every bank it declares) describes the
//! same boot as the PCR values it must replay to, not the one of an
//! attestation started a minute earlier. A response
//! without it is exactly what agents before measured boot send, so they
//! still attest with servers that do not require a log. The TPM
//! structures inside are exactly what the TPM produced, unmodified, so the
//! server can hash and verify them. Parsing is bounded: every length is
//! checked against what is left and against a per-field limit, and trailing
//! bytes are refused.

use sceau_format::wire::{Reader, WireError, Writer};
use zeroize::Zeroizing;

const PAYLOAD_TAG: &[u8; 4] = b"STP1";
const CHALLENGE_TAG: &[u8; 4] = b"STC1";
const RESPONSE_TAG: &[u8; 4] = b"STR1";

/// The largest message either side accepts, the event log aside: an EK
/// certificate (a few KiB at most) and TPM structures of a few hundred
/// bytes each.
pub const MAX_MESSAGE_LEN: usize = 16 * 1024;
/// The largest event log a response may carry. The five real firmware
/// logs in tests/fixtures/event_log (from go-attestation, tpm2-tools and
/// OVMF) measure 12–38 KB, 15–106 events, the largest event 12 KB (a dbx);
/// `server::event_log`'s survey of ten logs found at most 112 events, and
/// logs are cited up to about 80 KB. 256 KiB leaves more than six times
/// the largest measured, and room for a dbx or db several times today's,
/// without letting a response grow unbounded.
pub const MAX_EVENT_LOG_LEN: usize = 256 * 1024;
/// The largest response: every other field, the log's length and the log.
pub const MAX_RESPONSE_LEN: usize = MAX_MESSAGE_LEN + 4 + MAX_EVENT_LOG_LEN;
/// The largest DER certificate accepted.
pub const MAX_CERTIFICATE_LEN: usize = 8 * 1024;
/// The largest TPM structure accepted in any field (an RSA-4096 TPMT_PUBLIC
/// is about 600 bytes).
pub const MAX_TPM_STRUCTURE_LEN: usize = 2048;
/// The credential the server makes and the nonce it sends: 32 bytes each.
pub const SECRET_LEN: usize = 32;
/// A place proof's length.
pub const PLACE_PROOF_LEN: usize = 32;
/// What a place proof hashes before the credential's secret.
const PLACE_PROOF_LABEL: &[u8] = b"sceau-spire place proof\0";

/// The place proof after an attestation whose credential carried
/// `secret`: SHA-256 of a label and the secret. The server expects it in
/// the EK's next payload for a place in its proven pool
/// (`server::limits`); the agent sends it there as the outsideInfo of its
/// next AK's creation data, a field servers that do not read it ignore.
/// Only the TPM holding the EK opened the credential, so only its agent
/// can know it; the hash keeps the secret itself out of the next payload.
pub fn place_proof(secret: &[u8]) -> Zeroizing<[u8; PLACE_PROOF_LEN]> {
    use sha2::Digest as _;
    let mut hash = sha2::Sha256::new();
    hash.update(PLACE_PROOF_LABEL);
    hash.update(secret);
    Zeroizing::new(hash.finalize().into())
}

/// PCRs a quote may cover in one bank (a PC client TPM has 24).
pub const PCR_COUNT: u8 = 24;
/// Banks a quote may cover: SHA-1, SHA-256, SHA-384, SHA-512.
pub const MAX_QUOTED_BANKS: u8 = 4;
/// The longest PCR value (SHA-512).
pub const MAX_PCR_DIGEST_LEN: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    #[error("the message is {len} bytes; at most {max} are accepted")]
    TooLong { len: usize, max: usize },
    #[error("not a sceau_tpm {0} (wrong tag or version)")]
    Tag(&'static str),
    #[error("malformed {what}: {source}")]
    Wire {
        what: &'static str,
        source: WireError,
    },
    #[error("{what} is {len} bytes; at most {max} are accepted")]
    FieldTooLong {
        what: &'static str,
        len: usize,
        max: usize,
    },
    #[error("{what} is {len} bytes; {expected} were expected")]
    FieldLength {
        what: &'static str,
        len: usize,
        expected: usize,
    },
    #[error("{0} is missing")]
    Missing(&'static str),
    #[error("PCR {0} is out of range or listed twice (indices must increase, below 24)")]
    PcrIndex(u8),
}

/// The agent's claim: its EK and an AK the TPM says it created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Payload {
    /// The EK's TPMT_PUBLIC, as TPM2_ReadPublic returned it (no size prefix).
    pub ek_public: Vec<u8>,
    /// The EK certificate from the TPM's NV index, DER; empty if none.
    pub ek_certificate: Vec<u8>,
    /// The AK's TPMT_PUBLIC.
    pub ak_public: Vec<u8>,
    /// TPMS_CREATION_DATA from the AK's TPM2_Create.
    pub creation_data: Vec<u8>,
    /// TPMS_ATTEST from TPM2_CertifyCreation of the AK, by the AK.
    pub creation_attestation: Vec<u8>,
    /// TPMT_SIGNATURE over `creation_attestation`.
    pub creation_signature: Vec<u8>,
}

/// The server's challenge: a credential only the TPM holding both the EK and
/// the AK can open, and a fresh nonce for the quote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    /// TPM2B_ID_OBJECT contents for TPM2_ActivateCredential.
    pub credential_blob: Vec<u8>,
    /// TPM2B_ENCRYPTED_SECRET contents (RSA-OAEP ciphertext or ECC point).
    pub encrypted_secret: Vec<u8>,
    /// The quote's qualifying data; fresh for every challenge.
    pub nonce: [u8; SECRET_LEN],
    /// SHA-256 PCRs to quote, increasing; empty: no quote is asked.
    pub quote_pcrs: Vec<u8>,
}

/// The agent's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChallengeResponse {
    /// What TPM2_ActivateCredential returned.
    pub credential: Zeroizing<Vec<u8>>,
    /// TPMS_ATTEST from TPM2_Quote; empty when no quote was asked.
    pub quote: Vec<u8>,
    /// TPMT_SIGNATURE over `quote`; empty when no quote was asked.
    pub quote_signature: Vec<u8>,
    /// The quoted PCRs' values, in the quote's selection order: the
    /// challenge's PCRs in the SHA-256 bank, then in each other bank
    /// quoted.
    pub pcr_values: Vec<Vec<u8>>,
    /// The firmware event log, as the kernel exposes it; empty: none sent
    /// (not asked, none on the node, or an agent that predates it).
    pub event_log: Vec<u8>,
}

impl Payload {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Writer::default();
        out.raw(PAYLOAD_TAG)
            .tpm2b(&self.ek_public)
            .tpm2b(&self.ek_certificate)
            .tpm2b(&self.ak_public)
            .tpm2b(&self.creation_data)
            .tpm2b(&self.creation_attestation)
            .tpm2b(&self.creation_signature);
        out.finish()
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, PayloadError> {
        let mut r = open(bytes, MAX_MESSAGE_LEN, PAYLOAD_TAG, "payload")?;
        let payload = Self {
            ek_public: required(&mut r, "EK public area", MAX_TPM_STRUCTURE_LEN)?,
            ek_certificate: field(&mut r, "EK certificate", MAX_CERTIFICATE_LEN)?,
            ak_public: required(&mut r, "AK public area", MAX_TPM_STRUCTURE_LEN)?,
            creation_data: required(&mut r, "AK creation data", MAX_TPM_STRUCTURE_LEN)?,
            creation_attestation: required(
                &mut r,
                "AK creation attestation",
                MAX_TPM_STRUCTURE_LEN,
            )?,
            creation_signature: required(&mut r, "AK creation signature", MAX_TPM_STRUCTURE_LEN)?,
        };
        close(r, "payload")?;
        Ok(payload)
    }
}

impl Challenge {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Writer::default();
        out.raw(CHALLENGE_TAG)
            .tpm2b(&self.credential_blob)
            .tpm2b(&self.encrypted_secret)
            .tpm2b(&self.nonce)
            .u8(u8::try_from(self.quote_pcrs.len()).expect("at most 24 PCRs"));
        for index in &self.quote_pcrs {
            out.u8(*index);
        }
        out.finish()
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, PayloadError> {
        let mut r = open(bytes, MAX_MESSAGE_LEN, CHALLENGE_TAG, "challenge")?;
        let credential_blob = required(&mut r, "credential blob", MAX_TPM_STRUCTURE_LEN)?;
        let encrypted_secret = required(&mut r, "encrypted secret", MAX_TPM_STRUCTURE_LEN)?;
        let nonce = exact::<SECRET_LEN>(&mut r, "nonce")?;
        let count = r.u8("PCR count").map_err(wire("PCR list"))?;
        let mut quote_pcrs = Vec::with_capacity(usize::from(count.min(PCR_COUNT)));
        for _ in 0..count {
            let index = r.u8("PCR index").map_err(wire("PCR list"))?;
            if index >= PCR_COUNT || quote_pcrs.last().is_some_and(|last| *last >= index) {
                return Err(PayloadError::PcrIndex(index));
            }
            quote_pcrs.push(index);
        }
        close(r, "challenge")?;
        Ok(Self {
            credential_blob,
            encrypted_secret,
            nonce,
            quote_pcrs,
        })
    }
}

impl ChallengeResponse {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Writer::default();
        out.raw(RESPONSE_TAG)
            .tpm2b(&self.credential)
            .tpm2b(&self.quote)
            .tpm2b(&self.quote_signature)
            .u8(u8::try_from(self.pcr_values.len()).expect("at most 96 PCR values"));
        for value in &self.pcr_values {
            out.tpm2b(value);
        }
        if !self.event_log.is_empty() {
            out.u32(u32::try_from(self.event_log.len()).expect("a log under 4 GiB"))
                .raw(&self.event_log);
        }
        out.finish()
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, PayloadError> {
        let mut r = open(bytes, MAX_RESPONSE_LEN, RESPONSE_TAG, "challenge response")?;
        let credential = Zeroizing::new(field(&mut r, "credential", SECRET_LEN)?);
        let quote = field(&mut r, "quote", MAX_TPM_STRUCTURE_LEN)?;
        let quote_signature = field(&mut r, "quote signature", MAX_TPM_STRUCTURE_LEN)?;
        let count = r.u8("PCR count").map_err(wire("PCR values"))?;
        let max = PCR_COUNT * MAX_QUOTED_BANKS;
        if count > max {
            return Err(PayloadError::FieldTooLong {
                what: "PCR values",
                len: usize::from(count),
                max: usize::from(max),
            });
        }
        let mut pcr_values = Vec::with_capacity(usize::from(count));
        for _ in 0..count {
            // Each value's length is checked against its bank by the
            // server, which knows the banks from the signed quote.
            pcr_values.push(required(&mut r, "PCR value", MAX_PCR_DIGEST_LEN)?);
        }
        let event_log = if r.remaining() == 0 {
            Vec::new()
        } else {
            let what = "event log";
            let len = r.u32(what).map_err(wire(what))?;
            let len = usize::try_from(len).unwrap_or(usize::MAX);
            if len > MAX_EVENT_LOG_LEN {
                return Err(PayloadError::FieldTooLong {
                    what,
                    len,
                    max: MAX_EVENT_LOG_LEN,
                });
            }
            // Sent only when there is one: a present but empty log is not
            // what an agent writes.
            if len == 0 {
                return Err(PayloadError::Missing(what));
            }
            r.take(len, what).map_err(wire(what))?.to_vec()
        };
        close(r, "challenge response")?;
        Ok(Self {
            credential,
            quote,
            quote_signature,
            pcr_values,
            event_log,
        })
    }
}

fn open<'a>(
    bytes: &'a [u8],
    max: usize,
    tag: &[u8; 4],
    what: &'static str,
) -> Result<Reader<'a>, PayloadError> {
    if bytes.len() > max {
        return Err(PayloadError::TooLong {
            len: bytes.len(),
            max,
        });
    }
    let mut r = Reader::new(bytes);
    match r.take(tag.len(), "tag") {
        Ok(found) if found == tag => Ok(r),
        _ => Err(PayloadError::Tag(what)),
    }
}

fn close(r: Reader<'_>, what: &'static str) -> Result<(), PayloadError> {
    r.finish("message").map_err(wire(what))
}

fn wire(what: &'static str) -> impl Fn(WireError) -> PayloadError {
    move |source| PayloadError::Wire { what, source }
}

fn field(r: &mut Reader<'_>, what: &'static str, max: usize) -> Result<Vec<u8>, PayloadError> {
    let bytes = r.tpm2b(what).map_err(wire(what))?;
    if bytes.len() > max {
        return Err(PayloadError::FieldTooLong {
            what,
            len: bytes.len(),
            max,
        });
    }
    Ok(bytes.to_vec())
}

fn required(r: &mut Reader<'_>, what: &'static str, max: usize) -> Result<Vec<u8>, PayloadError> {
    let bytes = field(r, what, max)?;
    if bytes.is_empty() {
        return Err(PayloadError::Missing(what));
    }
    Ok(bytes)
}

fn exact<const N: usize>(r: &mut Reader<'_>, what: &'static str) -> Result<[u8; N], PayloadError> {
    let bytes = r.tpm2b(what).map_err(wire(what))?;
    bytes.try_into().map_err(|_| PayloadError::FieldLength {
        what,
        len: bytes.len(),
        expected: N,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload() -> Payload {
        Payload {
            ek_public: vec![1; 300],
            ek_certificate: vec![2; 900],
            ak_public: vec![3; 88],
            creation_data: vec![4; 60],
            creation_attestation: vec![5; 120],
            creation_signature: vec![6; 72],
        }
    }

    #[test]
    fn every_message_round_trips() {
        let p = payload();
        assert_eq!(Payload::decode(&p.encode()).unwrap(), p);
        let c = Challenge {
            credential_blob: vec![7; 70],
            encrypted_secret: vec![8; 256],
            nonce: [9; 32],
            quote_pcrs: vec![0, 7, 23],
        };
        assert_eq!(Challenge::decode(&c.encode()).unwrap(), c);
        let r = ChallengeResponse {
            credential: Zeroizing::new(vec![10; 32]),
            quote: vec![11; 140],
            quote_signature: vec![12; 72],
            pcr_values: vec![vec![13; 32], vec![14; 32], vec![15; 20]],
            event_log: Vec::new(),
        };
        assert_eq!(ChallengeResponse::decode(&r.encode()).unwrap(), r);
        let with_log = ChallengeResponse {
            event_log: vec![16; 40_000],
            ..r
        };
        assert_eq!(
            ChallengeResponse::decode(&with_log.encode()).unwrap(),
            with_log
        );
    }

    fn response_with_log(len: usize) -> ChallengeResponse {
        ChallengeResponse {
            credential: Zeroizing::new(vec![1; 32]),
            quote: vec![2; 140],
            quote_signature: vec![3; 72],
            pcr_values: vec![vec![4; 32]; 8],
            event_log: vec![5; len],
        }
    }

    // What an agent before measured boot sends is what a response without
    // a log encodes to: the log adds nothing when empty.
    #[test]
    fn a_response_without_a_log_is_the_old_encoding() {
        let old = response_with_log(0);
        let bytes = old.encode();
        let mut expected = b"STR1".to_vec();
        expected.extend([0, 32]);
        expected.extend([1; 32]);
        assert!(bytes.starts_with(&expected));
        assert_eq!(bytes.len(), 4 + 34 + 142 + 74 + 1 + 8 * 34);
        assert_eq!(ChallengeResponse::decode(&bytes).unwrap().event_log, b"");
    }

    #[test]
    fn the_event_log_is_bounded() {
        let largest = response_with_log(MAX_EVENT_LOG_LEN);
        assert_eq!(
            ChallengeResponse::decode(&largest.encode()).unwrap(),
            largest
        );
        let mut bytes = response_with_log(MAX_EVENT_LOG_LEN + 1).encode();
        assert_eq!(
            ChallengeResponse::decode(&bytes),
            Err(PayloadError::FieldTooLong {
                what: "event log",
                len: MAX_EVENT_LOG_LEN + 1,
                max: MAX_EVENT_LOG_LEN
            })
        );
        // A log that claims more than is left, or that is cut short (cut
        // before its length, it is a response without a log).
        bytes.truncate(bytes.len() - 2);
        assert!(ChallengeResponse::decode(&bytes).is_err());
        let cut = response_with_log(100).encode();
        for len in cut.len() - 103..cut.len() {
            assert!(ChallengeResponse::decode(&cut[..len]).is_err(), "{len}");
        }
        // An empty log is never written, so never accepted.
        let mut empty = response_with_log(0).encode();
        empty.extend([0; 4]);
        assert_eq!(
            ChallengeResponse::decode(&empty),
            Err(PayloadError::Missing("event log"))
        );
        // Nothing else may grow to the response's size.
        let padded = vec![0; MAX_MESSAGE_LEN + 1];
        assert_eq!(
            Payload::decode(&padded),
            Err(PayloadError::TooLong {
                len: MAX_MESSAGE_LEN + 1,
                max: MAX_MESSAGE_LEN
            })
        );
    }

    // Values of four banks fit; a fifth bank's, or a value longer than a
    // SHA-512 digest, does not.
    #[test]
    fn pcr_values_are_bounded_per_bank_and_in_length() {
        let mut r = response_with_log(0);
        r.pcr_values = vec![vec![1; 64]; 96];
        assert_eq!(ChallengeResponse::decode(&r.encode()).unwrap(), r);
        r.pcr_values.push(vec![1; 20]);
        assert_eq!(
            ChallengeResponse::decode(&r.encode()),
            Err(PayloadError::FieldTooLong {
                what: "PCR values",
                len: 97,
                max: 96
            })
        );
        r.pcr_values = vec![vec![1; 65]];
        assert_eq!(
            ChallengeResponse::decode(&r.encode()),
            Err(PayloadError::FieldTooLong {
                what: "PCR value",
                len: 65,
                max: 64
            })
        );
    }

    #[test]
    fn every_truncation_and_extension_is_refused() {
        let bytes = payload().encode();
        for len in 0..bytes.len() {
            assert!(Payload::decode(&bytes[..len]).is_err(), "prefix of {len}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(Payload::decode(&longer).is_err());
    }

    #[test]
    fn messages_are_not_interchangeable() {
        let bytes = payload().encode();
        assert_eq!(
            Challenge::decode(&bytes),
            Err(PayloadError::Tag("challenge"))
        );
        assert!(ChallengeResponse::decode(&bytes).is_err());
    }

    #[test]
    fn pcr_lists_must_increase_and_stay_in_range() {
        let mut c = Challenge {
            credential_blob: vec![1],
            encrypted_secret: vec![1],
            nonce: [0; 32],
            quote_pcrs: vec![7, 7],
        };
        assert_eq!(
            Challenge::decode(&c.encode()),
            Err(PayloadError::PcrIndex(7))
        );
        c.quote_pcrs = vec![24];
        assert_eq!(
            Challenge::decode(&c.encode()),
            Err(PayloadError::PcrIndex(24))
        );
    }

    #[test]
    fn an_empty_required_field_is_named() {
        let mut p = payload();
        p.ak_public.clear();
        assert_eq!(
            Payload::decode(&p.encode()),
            Err(PayloadError::Missing("AK public area"))
        );
    }
}
