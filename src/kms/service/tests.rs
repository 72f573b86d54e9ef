//! The service's validation and error mapping, with a fake TPM behind
//! [`Sealer`]. Claims about the real TPM are tested in `tests/integration`.
#![forbid(unsafe_code)]

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tss_esapi::structures::Private;

use super::*;
use crate::tpm::KeyId;
use crate::tpm::sealed::{blobs_from_created, sealed_template};
use sceau_format::sealed::SealedBlobs;

/// Keeps DEKs in a table; the "private blob" is the table index.
struct FakeTpm {
    key_id: KeyId,
    sealed: Mutex<Vec<Vec<u8>>>,
    unseals: AtomicUsize,
    fault: Mutex<Option<Fault>>,
    unseal_delay: Duration,
}

impl FakeTpm {
    fn new() -> Self {
        Self {
            key_id: KeyId::from_srk_name(b"fake"),
            sealed: Mutex::new(Vec::new()),
            unseals: AtomicUsize::new(0),
            fault: Mutex::new(None),
            unseal_delay: Duration::ZERO,
        }
    }

    fn fail_with(&self, fault: Fault) {
        *self.fault.lock().unwrap() = Some(fault);
    }

    fn injected(&self) -> Result<(), Fault> {
        self.fault.lock().unwrap().map_or(Ok(()), Err)
    }
}

impl Sealer for FakeTpm {
    fn key_id(&self) -> &KeyId {
        &self.key_id
    }

    async fn seal(&self, dek: Dek) -> Result<SealedBlobs, Fault> {
        self.injected()?;
        let mut sealed = self.sealed.lock().unwrap();
        sealed.push(dek.expose().to_vec());
        let index = (sealed.len() - 1) as u32;
        let private = Private::try_from(index.to_be_bytes().to_vec()).unwrap();
        Ok(blobs_from_created(sealed_template().unwrap(), &private).unwrap())
    }

    async fn unseal(&self, object: LoadableObject) -> Result<Dek, Fault> {
        self.unseals.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(self.unseal_delay).await;
        self.injected()?;
        let index = u32::from_be_bytes(object.private.value().try_into().unwrap());
        let sealed = self.sealed.lock().unwrap();
        let bytes = sealed.get(index as usize).ok_or(Fault::EnvelopeRejected)?;
        Ok(Dek::copy_from(bytes))
    }

    async fn health(&self) -> Result<(), Fault> {
        self.injected()
    }
}

fn service(fake: FakeTpm) -> (KmsService<FakeTpm>, Arc<FakeTpm>) {
    let fake = Arc::new(fake);
    (KmsService::new(fake.clone()), fake)
}

async fn encrypt(svc: &KmsService<FakeTpm>, plaintext: &[u8]) -> Result<EncryptResponse, Status> {
    let request = EncryptRequest {
        plaintext: plaintext.to_vec(),
        uid: "test".into(),
    };
    svc.encrypt(Request::new(request))
        .await
        .map(Response::into_inner)
}

async fn decrypt(
    svc: &KmsService<FakeTpm>,
    ciphertext: Vec<u8>,
    key_id: &str,
) -> Result<Vec<u8>, Status> {
    let request = DecryptRequest {
        ciphertext,
        uid: "test".into(),
        key_id: key_id.into(),
        annotations: HashMap::new(),
    };
    svc.decrypt(Request::new(request))
        .await
        .map(|r| r.into_inner().plaintext)
}

#[tokio::test]
async fn round_trip_and_status() {
    let (svc, fake) = service(FakeTpm::new());
    let sealed = encrypt(&svc, b"0123456789abcdef0123456789abcdef")
        .await
        .unwrap();
    assert_eq!(sealed.key_id, fake.key_id.as_str());
    assert!(sealed.annotations.is_empty());
    let opened = decrypt(&svc, sealed.ciphertext, &sealed.key_id)
        .await
        .unwrap();
    assert_eq!(opened, b"0123456789abcdef0123456789abcdef");

    let status = svc
        .status(Request::new(StatusRequest {}))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (status.version.as_str(), status.healthz.as_str()),
        ("v2", "ok")
    );
    assert_eq!(status.key_id, fake.key_id.as_str());
}

#[tokio::test]
async fn plaintext_sizes_outside_1_to_128_are_invalid() {
    let (svc, fake) = service(FakeTpm::new());
    for size in [0, 129, 4096] {
        let status = encrypt(&svc, &vec![1; size]).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "size {size}");
    }
    assert!(fake.sealed.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_foreign_key_id_is_refused_before_the_tpm() {
    let (svc, fake) = service(FakeTpm::new());
    let status = decrypt(&svc, vec![1, 2, 3], "sceau-0000000000000000")
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert_eq!(
        status.message(),
        format!(
            "unknown key_id sceau-0000000000000000; this TPM only serves {}",
            fake.key_id
        )
    );
    assert_eq!(fake.unseals.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn malformed_envelopes_never_reach_the_tpm() {
    let (svc, fake) = service(FakeTpm::new());
    let good = encrypt(&svc, &[5; 32]).await.unwrap().ciphertext;
    let mut not_sealed_data = good.clone();
    not_sealed_data[6] ^= 0x01; // flips the nameAlg
    for bad in [
        vec![],
        vec![1],
        good[..good.len() - 1].to_vec(),
        not_sealed_data,
    ] {
        let status = decrypt(&svc, bad, fake.key_id.as_str()).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{}", status.message());
    }
    assert_eq!(fake.unseals.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn tpm_faults_reach_the_client_as_class_words() {
    let cases = [
        (Fault::Unreachable, Code::Unavailable),
        (Fault::Busy, Code::Unavailable),
        (Fault::Timeout, Code::DeadlineExceeded),
        (Fault::Failure, Code::Internal),
        (Fault::EnvelopeRejected, Code::InvalidArgument),
    ];
    for (fault, code) in cases {
        let (svc, fake) = service(FakeTpm::new());
        let good = encrypt(&svc, &[5; 32]).await.unwrap().ciphertext;
        fake.fail_with(fault);
        let status = decrypt(&svc, good, fake.key_id.as_str()).await.unwrap_err();
        assert_eq!(
            (status.code(), status.message()),
            (code, fault.to_string().as_str())
        );
        let health = svc
            .status(Request::new(StatusRequest {}))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(health.healthz, fault.to_string());
    }
}

#[tokio::test]
async fn concurrent_decrypts_of_one_ciphertext_share_one_unseal() {
    let (svc, fake) = service(FakeTpm {
        unseal_delay: Duration::from_millis(100),
        ..FakeTpm::new()
    });
    let svc = Arc::new(svc);
    let ciphertext = encrypt(&svc, &[9; 32]).await.unwrap().ciphertext;
    let calls: Vec<_> = (0..16)
        .map(|_| {
            let (svc, ciphertext, key_id) =
                (svc.clone(), ciphertext.clone(), fake.key_id.to_string());
            tokio::spawn(async move { decrypt(&svc, ciphertext, &key_id).await })
        })
        .collect();
    for call in calls {
        assert_eq!(call.await.unwrap().unwrap(), vec![9; 32]);
    }
    assert_eq!(fake.unseals.load(Ordering::SeqCst), 1);
}

#[test]
fn echoed_client_text_is_bounded_and_escaped() {
    assert_eq!(printable("a\nb"), "a\\nb");
    assert_eq!(printable(&"x".repeat(200)).chars().count(), 81);
}

/// Found by the `envelope` fuzz target (audit/fuzzing.md): tpm2-tss decodes a
/// public blob whose unique field declares more bytes than follow as if that
/// field were empty, so without the marshal-back check sceau would send the
/// TPM an object the envelope does not hold.
#[tokio::test]
async fn a_public_blob_tpm2_tss_misreads_never_reaches_the_tpm() {
    let (svc, fake) = service(FakeTpm::new());
    let good = encrypt(&svc, &[5; 32]).await.unwrap().ciphertext;
    // Version, u16 length L, then the L-byte TPM2B_PUBLIC, whose last two
    // bytes are the (empty) unique field's size.
    let public_len = usize::from(u16::from_be_bytes([good[1], good[2]]));
    let unique_size = 1 + 2 + public_len - 2;
    let mut overlong_unique = good.clone();
    overlong_unique[unique_size..unique_size + 2].copy_from_slice(&[0x00, 0x40]);
    let status = decrypt(&svc, overlong_unique, fake.key_id.as_str())
        .await
        .unwrap_err();
    assert_eq!(
        (status.code(), status.message()),
        (
            Code::InvalidArgument,
            "malformed ciphertext: the public blob is not a valid TPM2B_PUBLIC"
        )
    );
    assert_eq!(fake.unseals.load(Ordering::SeqCst), 0);
}
