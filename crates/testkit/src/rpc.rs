//! gRPC client helpers, built on `sceau_kms_api`, and the checks every test
//! applies to sceau's answers.

use sceau_format::key_id::hex;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sceau_kms_api::KmsClient;
use sceau_kms_api::pb::{
    DecryptRequest, EncryptRequest, EncryptResponse, StatusRequest, StatusResponse,
};
use sha2::{Digest, Sha256};
use tonic::{Code, Status};

/// sceau's own unix-socket client (`sceau_kms_api::connect`), which `sceau check` uses.
pub type Client = KmsClient;

/// Far above sceau's own request deadline (2.5 s by default): a call that
/// reaches it is a hang, not a slow TPM.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

pub const KEY_ID_PREFIX: &str = "sceau-";

/// The key_id of before KEK generations, which envelopes of that time
/// still carry: "sceau-" ‖ hex(SHA-256(SRK Name)[..8]); the Name is the
/// full TPM Name, i.e. the 2-byte name-algorithm id followed by the digest.
pub fn key_id_from_name(tpm_name: &[u8]) -> String {
    let digest = Sha256::digest(tpm_name);
    format!("{KEY_ID_PREFIX}{}", hex(&digest[..8]))
}

/// A single node's key_id, computed here apart from sceau's own code so
/// that the tests cross-check it: "sceau-N.E-" and 16 hex digits of
/// SHA-256 over a domain, the generation N and epoch E (big-endian), the
/// generation key's Name (length-prefixed) and the configuration digest
/// (a node without a boot policy key: SHA-256 of its domain and a 0 byte).
pub fn generation_key_id(generation: u32, epoch: u64, key_name: &[u8]) -> String {
    let config = Sha256::new()
        .chain_update(b"sceau single-node configuration\0")
        .chain_update([0])
        .finalize();
    let digest = Sha256::new()
        .chain_update(b"sceau key_id v5\0")
        .chain_update(generation.to_be_bytes())
        .chain_update(epoch.to_be_bytes())
        .chain_update((key_name.len() as u16).to_be_bytes())
        .chain_update(key_name)
        .chain_update(config)
        .finalize();
    format!("{KEY_ID_PREFIX}{generation}.{epoch}-{}", hex(&digest[..8]))
}

/// The generation and epoch a key_id of the generation form names.
pub fn generation_and_epoch(key_id: &str) -> Option<(u32, u64)> {
    let (numbers, _) = key_id.strip_prefix(KEY_ID_PREFIX)?.split_once('-')?;
    let (generation, epoch) = numbers.split_once('.')?;
    Some((generation.parse().ok()?, epoch.parse().ok()?))
}

/// A key_id sceau may report: the generation form, a cluster's "sceau-"
/// and 32 hex digits (at a membership epoch: "sceau-mN-" and 32), or the
/// form of before generations.
pub fn is_well_formed_key_id(s: &str) -> bool {
    let lower_hex = |t: &str| t.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    let Some(rest) = s.strip_prefix(KEY_ID_PREFIX) else {
        return false;
    };
    match rest.split_once('-') {
        // A cluster's at a membership epoch: "sceau-mN-" and 32 hex digits.
        Some((epoch, digest)) if epoch.starts_with('m') => {
            epoch[1..].parse::<u64>().is_ok_and(|e| e > 0)
                && digest.len() == 32
                && lower_hex(digest)
        }
        Some((_, digest)) => {
            generation_and_epoch(s).is_some() && digest.len() == 16 && lower_hex(digest)
        }
        None => matches!(rest.len(), 16 | 32) && lower_hex(rest),
    }
}

/// Connects to the KMS socket at `socket`. A refused connection is tried
/// again for up to [`CALL_TIMEOUT`]: a socket file exists from its bind, and
/// a connect before its listen (systemd-socket-activate's, on a busy
/// machine) is refused; a refused connect reaches no one.
pub async fn connect(socket: &Path) -> Client {
    let refused = |e: &sceau_kms_api::ConnectError| {
        matches!(e, sceau_kms_api::ConnectError::Socket(io)
            if io.kind() == std::io::ErrorKind::ConnectionRefused)
    };
    let deadline = tokio::time::Instant::now() + CALL_TIMEOUT;
    loop {
        match tokio::time::timeout_at(deadline, sceau_kms_api::connect(socket)).await {
            Ok(Ok(client)) => return client,
            Ok(Err(e)) if refused(&e) && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            Ok(Err(e)) => panic!("connect to {}: {e:?}", socket.display()),
            Err(_) => panic!("connect to {} hung for {CALL_TIMEOUT:?}", socket.display()),
        }
    }
}

/// A distinct request uid per call, as the API server would send.
pub fn next_uid() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "it-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Bounds `call` by CALL_TIMEOUT, turning a hang into a test failure.
async fn bounded<T>(
    what: &str,
    call: impl Future<Output = Result<tonic::Response<T>, Status>>,
) -> Result<T, Status> {
    match tokio::time::timeout(CALL_TIMEOUT, call).await {
        Ok(result) => result.map(tonic::Response::into_inner),
        Err(_) => panic!("{what} hung for {CALL_TIMEOUT:?}"),
    }
}

pub async fn status(client: &mut Client) -> StatusResponse {
    bounded("Status", client.status(StatusRequest {}))
        .await
        .unwrap_or_else(|s| panic!("Status failed: {s:?}"))
}

pub async fn encrypt(client: &mut Client, plaintext: &[u8]) -> Result<EncryptResponse, Status> {
    let request = EncryptRequest {
        plaintext: plaintext.to_vec(),
        uid: next_uid(),
    };
    bounded("Encrypt", client.encrypt(request)).await
}

pub async fn decrypt(
    client: &mut Client,
    ciphertext: &[u8],
    key_id: &str,
) -> Result<Vec<u8>, Status> {
    let request = DecryptRequest {
        ciphertext: ciphertext.to_vec(),
        uid: next_uid(),
        key_id: key_id.to_string(),
        annotations: Default::default(),
    };
    bounded("Decrypt", client.decrypt(request))
        .await
        .map(|r| r.plaintext)
}

/// Encrypt must succeed with the expected key_id and no annotations; returns
/// the envelope.
pub async fn seal(client: &mut Client, key_id: &str, plaintext: &[u8]) -> Vec<u8> {
    let reply = encrypt(client, plaintext)
        .await
        .unwrap_or_else(|s| panic!("Encrypt of {} bytes failed: {s:?}", plaintext.len()));
    assert_eq!(reply.key_id, key_id, "Encrypt returned another key_id");
    assert!(
        reply.annotations.is_empty(),
        "Encrypt returned annotations: {:?}",
        reply.annotations
    );
    reply.ciphertext
}

/// Decrypt must succeed and give back exactly `expected`.
pub async fn open(client: &mut Client, key_id: &str, envelope: &[u8], expected: &[u8]) {
    let plaintext = decrypt(client, envelope, key_id).await.unwrap_or_else(|s| {
        panic!(
            "Decrypt of a {}-byte envelope failed: {s:?}",
            envelope.len()
        )
    });
    assert!(
        plaintext == expected,
        "Decrypt returned other bytes than were sealed"
    );
}

pub async fn round_trip(client: &mut Client, key_id: &str, plaintext: &[u8]) {
    let envelope = seal(client, key_id, plaintext).await;
    open(client, key_id, &envelope, plaintext).await;
}

/// The call must have failed with INVALID_ARGUMENT and a clean message.
pub fn expect_invalid_argument<T>(result: Result<T, Status>, what: &str) -> Status {
    let status = match result {
        Ok(_) => panic!("{what}: accepted, expected INVALID_ARGUMENT"),
        Err(status) => status,
    };
    assert_eq!(status.code(), Code::InvalidArgument, "{what}: {status:?}");
    assert_clean_message(&status, what);
    status
}

/// Client-visible messages must not leak TPM or TSS internals: no hex return
/// codes, no TPM_RC names, no tss/Esys error text.
pub fn assert_clean_message(status: &Status, what: &str) {
    let message = status.message().to_ascii_lowercase();
    for needle in ["0x", "tpm_rc", "tss", "esys"] {
        assert!(
            !message.contains(needle),
            "{what}: message leaks {needle:?}: {:?}",
            status.message()
        );
    }
}
