//! Status, Encrypt and Decrypt through `KmsService` (`src/kms/service.rs`)
//! in single-node mode (`src/kms/single.rs`), from raw protobuf bytes, with
//! [`FakeTpm`] as the TPM; Encrypt and Decrypt also through the same service
//! in cluster mode (`src/kms/cluster.rs`), over the same fake.
//!
//! Input: one header byte (`sceau_fuzz::decode_header`: which call, and which
//! TPM fault to inject), then the request as the apiserver would encode it.
//! Bytes that do not decode are dropped, as tonic drops them before sceau.
//!
//! Each call's outcome is predicted from the request alone (an oracle written
//! from the documented behaviour, not by calling the service's helpers) and
//! must match exactly. On top of that, every error must be a clean status:
//! a code sceau uses, no details or metadata, no control characters, and no
//! TPM or TSS text.
#![no_main]
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use prost::Message;
use sceau::kms::{KmsService, service_for};
use sceau_format::envelope::{Envelope, EnvelopeError, MAX_CIPHERTEXT_LEN};
use sceau_format::members::Refusal;
use sceau_fuzz::{Call, FakeTpm, decode_header};
use sceau_kms_api::pb::key_management_service_server::KeyManagementService;
use sceau_kms_api::pb::{DecryptRequest, EncryptRequest, StatusRequest};
use sceau_tpm::Fault;
use sceau_tpm::sealed::{BlobError, LoadableObject, blobs_from_created};
use sceau_tpm::secret::MAX_DEK_LEN;
use tokio::runtime::Runtime;
use tonic::{Code, Request, Status};

/// Built once: a tokio runtime costs far more than one fuzz input.
struct Harness {
    runtime: Runtime,
    sealer: Arc<FakeTpm>,
    service: KmsService,
    /// The same fake TPM in cluster mode (this node, another member and a
    /// recovery key, all software keys): every request goes to both.
    clustered: KmsService,
}

fn harness() -> &'static Harness {
    static HARNESS: OnceLock<Harness> = OnceLock::new();
    HARNESS.get_or_init(|| {
        let sealer = Arc::new(FakeTpm::default());
        Harness {
            runtime: tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("a current-thread runtime"),
            service: service_for(sealer.clone(), sealer.served_keys(), None, false).expect("single-node mode starts"),
            clustered: service_for(
                sealer.clone(),
                sealer.served_keys(),
                Some(Arc::new(FakeTpm::cluster_membership())),
                false,
            )
            .expect("the wrapping thread starts"),
            sealer,
        }
    })
}

/// What a call must return: the plaintext, or a status code and message.
type Outcome = Result<Vec<u8>, (Code, String)>;

fuzz_target!(|data: &[u8]| {
    let Some((&header, body)) = data.split_first() else {
        return;
    };
    let (call, fault) = decode_header(header);
    let h = harness();
    h.sealer.inject(fault);
    match call {
        Call::Status => check_status(h, fault),
        Call::Encrypt => {
            if let Ok(request) = EncryptRequest::decode(body) {
                // Each check injects the fault it needs; the single-node
                // one first, as its oracle reads the injected fault.
                check_encrypt(h, request.clone(), fault);
                check_cluster_encrypt(h, request, fault);
            }
        }
        Call::Decrypt | Call::DecryptAddressed => {
            if let Ok(mut request) = DecryptRequest::decode(body) {
                if call == Call::DecryptAddressed {
                    request.key_id = h.sealer.key_id().to_string();
                    request.annotations.clear();
                }
                check_decrypt(h, request.clone(), fault);
                let echoes = client_text(&request);
                let call = h.clustered.decrypt(Request::new(request));
                check_cluster_call(h, call, fault, &echoes);
            }
        }
    }
});

fn check_status(h: &Harness, fault: Option<Fault>) {
    let response = h
        .runtime
        .block_on(h.service.status(Request::new(StatusRequest {})))
        .expect("Status always answers; health goes in healthz")
        .into_inner();
    let healthz = fault.map_or_else(|| "ok".to_string(), |f| f.to_string());
    assert_eq!(response.version, "v2");
    assert_eq!(response.healthz, healthz);
    assert_eq!(response.key_id, h.sealer.key_id().as_str());
}

fn check_encrypt(h: &Harness, request: EncryptRequest, fault: Option<Fault>) {
    let plaintext = request.plaintext.clone();
    let len = plaintext.len();
    let result = h.runtime.block_on(h.service.encrypt(Request::new(request)));
    let expected: Outcome = if !(1..=MAX_DEK_LEN).contains(&len) {
        let message = format!("plaintext must be 1 to {MAX_DEK_LEN} bytes, got {len}");
        Err((Code::InvalidArgument, message))
    } else if let Some(fault) = fault {
        Err(fault_outcome(fault))
    } else {
        Ok(plaintext.clone())
    };
    let response = match (result, expected) {
        (Ok(response), Ok(_)) => response.into_inner(),
        (Err(status), Err(expected)) => return assert_status(&status, &expected),
        (got, expected) => panic!("Encrypt of {len} bytes: got {got:?}, expected {expected:?}"),
    };
    assert_eq!(response.key_id, h.sealer.key_id().as_str());
    assert!(response.annotations.is_empty());
    assert!(response.ciphertext.len() <= MAX_CIPHERTEXT_LEN);
    assert_eq!(
        Envelope::parse(&response.ciphertext, &HashMap::new()),
        Ok(Envelope::Sealed(FakeTpm::seal_bytes(&plaintext)))
    );
    // What Encrypt returns, Decrypt opens.
    let round_trip = DecryptRequest {
        ciphertext: response.ciphertext,
        uid: "round-trip".into(),
        key_id: response.key_id,
        annotations: response.annotations,
    };
    check_decrypt(h, round_trip, None);
}

/// Cluster mode's Encrypt: a signed version 3 envelope under the cluster
/// key_id whose signature Decrypt accepts, taking it on to the TPM (which
/// the fake refuses), or a clean error.
fn check_cluster_encrypt(h: &Harness, request: EncryptRequest, fault: Option<Fault>) {
    h.sealer.inject(fault);
    let result = h
        .runtime
        .block_on(h.clustered.encrypt(Request::new(request)));
    let Ok(response) = result else {
        return check_cluster_call(h, async { result }, fault, &[]);
    };
    let response = response.into_inner();
    assert_eq!(response.ciphertext.first(), Some(&0x03));
    let round_trip = DecryptRequest {
        ciphertext: response.ciphertext,
        uid: "round-trip".into(),
        key_id: response.key_id,
        annotations: response.annotations,
    };
    let echoes = client_text(&round_trip);
    h.sealer.inject(None);
    let opened = h
        .runtime
        .block_on(h.clustered.decrypt(Request::new(round_trip)));
    if let Err(status) = &opened {
        assert!(
            !Refusal::CLASSES.contains(&status.message()),
            "its own envelope refused: {status:?}"
        );
    }
    check_cluster_call(h, async { opened }, None, &echoes);
}

/// The request's own text as sceau may echo it (cut and escaped), which a
/// message may contain whatever it says.
fn client_text(request: &DecryptRequest) -> Vec<String> {
    let mut echoes: Vec<String> = request
        .annotations
        .keys()
        .chain([&request.key_id, &request.uid])
        .map(|text| sceau_format::text::printable(text))
        .collect();
    // Longest first, so that a shorter echo inside a longer one goes last.
    echoes.sort_by_key(|e| std::cmp::Reverse(e.len()));
    echoes
}

/// Cluster mode has no exact oracle here, but every
/// error must be a clean status with a bounded message, whatever the
/// client's annotations, key_id or ciphertext hold (a client's annotation
/// key was once echoed whole).
fn check_cluster_call<T: std::fmt::Debug>(
    h: &Harness,
    call: impl std::future::Future<Output = Result<T, Status>>,
    fault: Option<Fault>,
    echoes: &[String],
) {
    h.sealer.inject(fault);
    let Err(status) = h.runtime.block_on(call) else {
        return;
    };
    assert!(
        matches!(
            status.code(),
            Code::InvalidArgument
                | Code::Unavailable
                | Code::DeadlineExceeded
                | Code::Internal
                | Code::FailedPrecondition
        ),
        "{status:?}"
    );
    assert!(status.details().is_empty() && status.metadata().is_empty());
    let message = status.message();
    assert!(message.len() <= 520, "a {}-byte message", message.len());
    assert!(!message.chars().any(char::is_control), "{message:?}");
    let mut own_words = echoes.iter().fold(message.to_string(), |text, echo| {
        text.replace(echo.as_str(), "")
    });
    // A message cut at its bound may end inside an echo.
    if let Some(cut) = own_words.strip_suffix('…') {
        let tail = echoes
            .iter()
            .flat_map(|echo| echo.char_indices().map(|(i, _)| &echo[..i]))
            .filter(|prefix| cut.ends_with(prefix))
            .map(str::len)
            .max()
            .unwrap_or(0);
        own_words = cut[..cut.len() - tail].to_string();
    }
    assert_no_tpm_text(&own_words);
}

fn check_decrypt(h: &Harness, request: DecryptRequest, fault: Option<Fault>) {
    h.sealer.inject(fault);
    let expected = expected_decrypt(h.sealer.key_id().as_str(), &request, fault);
    let result = h.runtime.block_on(h.service.decrypt(Request::new(request)));
    match (result, expected) {
        (Ok(response), Ok(dek)) => assert_eq!(response.into_inner().plaintext, dek),
        (Err(status), Err(expected)) => assert_status(&status, &expected),
        (got, expected) => panic!("Decrypt: got {got:?}, expected {expected:?}"),
    }
}

/// The documented order: key_id, envelope (length, version, then for
/// version 1 no annotations and the blobs' framing), blob checks,
/// marshal-back (audit/fuzzing.md, «The public blob tpm2-tss misreads»), TPM.
fn expected_decrypt(ours: &str, request: &DecryptRequest, fault: Option<Fault>) -> Outcome {
    let invalid = |message: String| Err((Code::InvalidArgument, message));
    if request.key_id != ours {
        // The echoed key_id is checked by `assert_status`.
        return invalid(format!("unknown key_id …; this TPM only serves {ours}"));
    }
    let blobs = match Envelope::parse(&request.ciphertext, &request.annotations) {
        Ok(Envelope::Sealed(blobs)) => blobs,
        Ok(Envelope::Wrapped(_)) => {
            return invalid(
                "a cluster envelope, but this node serves without --members".to_string(),
            );
        }
        Err(EnvelopeError::AnnotationsOnSealed) => {
            return invalid(
                "version 1 envelopes carry no annotations, but the request has some".to_string(),
            );
        }
        Err(e) => return invalid(format!("malformed ciphertext: {e}")),
    };
    // Nothing binds an annotation to a version 1 envelope.
    assert!(
        request.annotations.is_empty(),
        "a version 1 envelope parsed with annotations"
    );
    let object = match LoadableObject::from_blobs(&blobs) {
        Ok(object) => object,
        Err(e) => return invalid(format!("malformed ciphertext: {e}")),
    };
    // What the TPM would be sent must be what the envelope holds.
    let remarshalled = blobs_from_created(object.public, &object.private);
    if remarshalled.as_ref().ok() != Some(&blobs) {
        return invalid(format!(
            "malformed ciphertext: {}",
            BlobError::PublicUnreadable
        ));
    }
    if let Some(fault) = fault {
        return Err(fault_outcome(fault));
    }
    FakeTpm::open(&blobs.private[2..]).ok_or_else(|| fault_outcome(Fault::EnvelopeRejected))
}

/// README: "Errors reach clients as a gRPC code and a class word".
fn fault_outcome(fault: Fault) -> (Code, String) {
    let code = match fault {
        Fault::EnvelopeRejected => Code::InvalidArgument,
        Fault::Timeout => Code::DeadlineExceeded,
        Fault::Unreachable | Fault::Busy | Fault::Lockout => Code::Unavailable,
        Fault::Failure => Code::Internal,
        Fault::PolicyMismatch => Code::FailedPrecondition,
    };
    (code, fault.to_string())
}

fn assert_status(status: &Status, (code, message): &(Code, String)) {
    assert_eq!(status.code(), *code, "{status:?}");
    assert!(status.details().is_empty() && status.metadata().is_empty());
    let got = status.message();
    assert!(!got.chars().any(char::is_control), "{got:?}");
    let Some((prefix, suffix)) = message.split_once('…') else {
        assert_eq!(got, message);
        return assert_no_tpm_text(got);
    };
    // "unknown key_id <echo>; this TPM only serves …": the client's own text
    // is echoed escaped and cut to a bound in bytes, plus an ellipsis; the
    // whole message is never cut by the service's 512-byte bound.
    let echo = got
        .strip_prefix(prefix)
        .and_then(|rest| rest.strip_suffix(suffix))
        .unwrap_or_else(|| panic!("{got:?} is not {message:?}"));
    assert!(
        echo.len() <= sceau_format::text::PRINTABLE_MAX_BYTES,
        "{echo:?}"
    );
    assert_no_tpm_text(&got.replace(echo, ""));
}

/// What tss-esapi's errors look like, none of which may reach a client.
fn assert_no_tpm_text(message: &str) {
    for marker in [
        "Esys",
        "Tss2",
        "TSS2",
        "tss",
        "ErrorCode",
        "0x",
        "response code",
        "TPM_RC",
    ] {
        assert!(!message.contains(marker), "{message:?} contains {marker:?}");
    }
}
