//! The agent plugin's TPM work against a real swtpm: the payload with an RSA
//! and an ECC EK, byte-exact TPM structures (the creation hash and the AK's
//! Name inside the attestation, the signatures), credential activation of a
//! challenge made in software, a quote with the server's nonce, and no
//! transient object or session left in the TPM afterwards.

use std::time::Instant;

use p256::ecdsa::signature::Verifier as _;
use p256::ecdsa::{Signature, VerifyingKey};
use sceau_format::credential::make_credential;
use sceau_format::storage_key::StorageKey;
use sceau_format::wire::{Reader, sha256_name};
use sceau_spire::agent::tpm::{AgentTpmError, Attestation, EkAlgorithm, TpmSettings};
use sceau_spire::payload::{Challenge, ChallengeResponse, Payload};
use sceau_testkit::{Swtpm, TempDir};
use sha2::{Digest as _, Sha256};
use tss_esapi::Context;
use tss_esapi::constants::CapabilityType;
use tss_esapi::structures::CapabilityData;
use tss_esapi::tcti_ldr::TctiNameConf;

const TPM_GENERATED: u32 = 0xff54_4347;
const ST_ATTEST_QUOTE: u16 = 0x8018;
const ST_ATTEST_CREATION: u16 = 0x801A;
/// sign | restricted | fixedTPM | fixedParent | sensitiveDataOrigin |
/// userWithAuth | noDA.
const AK_ATTRIBUTES: u32 = 0x0005_0472;

fn settings(tpm: &Swtpm, ek_algorithm: EkAlgorithm) -> TpmSettings {
    TpmSettings {
        tcti: tpm.tcti().parse().unwrap(),
        ek_algorithm,
        event_log_path: None,
    }
}

/// Transient objects and loaded sessions the TPM holds, seen through a
/// connection of the test's own (swtpm has no resource manager, so every
/// connection sees them all).
fn loaded_handles(tpm: &Swtpm) -> (usize, usize) {
    let mut ctx = Context::new(tpm.tcti().parse::<TctiNameConf>().unwrap()).unwrap();
    let mut count = |first: u32| {
        let (data, _) = ctx
            .get_capability(CapabilityType::Handles, first, 64)
            .unwrap();
        match data {
            CapabilityData::Handles(handles) => handles
                .iter()
                .filter(|h| u32::from(**h) >> 24 == first >> 24)
                .count(),
            _ => 0,
        }
    };
    (count(0x8000_0000), count(0x0200_0000))
}

/// What the tests read from a TPMS_ATTEST.
struct Attest {
    kind: u16,
    extra_data: Vec<u8>,
    /// TPMS_CREATION_INFO (objectName, creationHash) or TPMS_QUOTE_INFO
    /// (the PCR selection, then pcrDigest): the two TPM2Bs at the end.
    tail: Vec<u8>,
}

fn parse_attest(bytes: &[u8]) -> Attest {
    let mut r = Reader::new(bytes);
    assert_eq!(r.u32("magic").unwrap(), TPM_GENERATED);
    let kind = r.u16("type").unwrap();
    r.tpm2b("qualifiedSigner").unwrap();
    let extra_data = r.tpm2b("extraData").unwrap().to_vec();
    r.take(17, "clockInfo").unwrap();
    r.take(8, "firmwareVersion").unwrap();
    let tail = r.take(r.remaining(), "attested").unwrap().to_vec();
    Attest {
        kind,
        extra_data,
        tail,
    }
}

/// The AK's public point from its TPMT_PUBLIC, after checking the
/// template's fields.
fn ak_key(ak_public: &[u8]) -> VerifyingKey {
    let mut r = Reader::new(ak_public);
    assert_eq!(r.u16("type").unwrap(), 0x0023, "ECC");
    assert_eq!(r.u16("nameAlg").unwrap(), 0x000B, "SHA-256");
    assert_eq!(r.u32("attributes").unwrap(), AK_ATTRIBUTES);
    assert!(r.tpm2b("authPolicy").unwrap().is_empty());
    assert_eq!(r.u16("symmetric").unwrap(), 0x0010, "no symmetric");
    assert_eq!(r.u16("scheme").unwrap(), 0x0018, "ECDSA");
    assert_eq!(r.u16("scheme hash").unwrap(), 0x000B);
    assert_eq!(r.u16("curve").unwrap(), 0x0003, "P-256");
    assert_eq!(r.u16("kdf").unwrap(), 0x0010);
    let x = r.tpm2b("x").unwrap();
    let y = r.tpm2b("y").unwrap();
    r.finish("TPMT_PUBLIC").unwrap();
    let mut sec1 = vec![4u8];
    sec1.extend_from_slice(&pad32(x));
    sec1.extend_from_slice(&pad32(y));
    VerifyingKey::from_sec1_bytes(&sec1).unwrap()
}

fn pad32(bytes: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out[32 - bytes.len()..].copy_from_slice(bytes);
    out
}

/// Verifies a TPMT_SIGNATURE (ECDSA-SHA256) over `message` with the AK.
fn verify(ak_public: &[u8], message: &[u8], signature: &[u8]) {
    let mut r = Reader::new(signature);
    assert_eq!(r.u16("sigAlg").unwrap(), 0x0018);
    assert_eq!(r.u16("hash").unwrap(), 0x000B);
    let rr = pad32(r.tpm2b("r").unwrap());
    let ss = pad32(r.tpm2b("s").unwrap());
    r.finish("TPMT_SIGNATURE").unwrap();
    let signature = Signature::from_scalars(rr, ss).unwrap();
    ak_key(ak_public)
        .verify(message, &signature)
        .expect("the AK's signature verifies over the exact bytes sent");
}

fn check_payload(payload: &Payload) {
    assert_eq!(Payload::decode(&payload.encode()).unwrap(), *payload);
    // A fresh swtpm has no EK certificate.
    assert!(payload.ek_certificate.is_empty());
    let attest = parse_attest(&payload.creation_attestation);
    assert_eq!(attest.kind, ST_ATTEST_CREATION);
    assert!(attest.extra_data.is_empty());
    let mut info = Reader::new(&attest.tail);
    let object_name = info.tpm2b("objectName").unwrap();
    let creation_hash = info.tpm2b("creationHash").unwrap();
    info.finish("TPMS_CREATION_INFO").unwrap();
    assert_eq!(
        object_name,
        sha256_name(&payload.ak_public),
        "ak_public is the TPMT_PUBLIC the TPM certified"
    );
    assert_eq!(
        creation_hash,
        Sha256::digest(&payload.creation_data).as_slice(),
        "creation_data is the TPMS_CREATION_DATA the TPM hashed"
    );
    verify(
        &payload.ak_public,
        &payload.creation_attestation,
        &payload.creation_signature,
    );
}

#[test]
fn payload_with_an_rsa_ek() {
    let tmp = TempDir::new("spire-agent-rsa");
    let tpm = Swtpm::start(&tmp.subdir("tpm"));
    let started = Instant::now();
    let (attestation, payload) = Attestation::begin(&settings(&tpm, EkAlgorithm::Rsa2048)).unwrap();
    eprintln!("RSA-EK payload: {:?}", started.elapsed());
    check_payload(&payload);
    let mut r = Reader::new(&payload.ek_public);
    assert_eq!(r.u16("type").unwrap(), 0x0001, "an RSA EK");
    assert_eq!(r.u16("nameAlg").unwrap(), 0x000B);
    // SRK, AK and EK are loaded while the attestation lives.
    assert_eq!(loaded_handles(&tpm).0, 3);
    drop(attestation);
    assert_eq!(loaded_handles(&tpm), (0, 0));
}

#[test]
fn ecc_ek_payload_challenge_and_quote() {
    let tmp = TempDir::new("spire-agent-ecc");
    let tpm = Swtpm::start(&tmp.subdir("tpm"));
    let before = loaded_handles(&tpm);
    assert_eq!(before, (0, 0));
    let started = Instant::now();
    let (mut attestation, payload) =
        Attestation::begin(&settings(&tpm, EkAlgorithm::EccP256)).unwrap();
    eprintln!("ECC-EK payload: {:?}", started.elapsed());
    check_payload(&payload);

    // The server's side, in software: a credential for the AK's Name
    // wrapped to the EK, and a nonce for the quote.
    let ek = StorageKey::from_tpmt_public(&payload.ek_public).unwrap();
    let made = make_credential(&ek, &sha256_name(&payload.ak_public));
    let nonce: [u8; 32] = sceau_testkit::random_bytes(32).try_into().unwrap();
    let challenge = Challenge {
        credential_blob: made.blob.duplicate.clone(),
        encrypted_secret: made.blob.in_sym_seed.clone(),
        nonce,
        quote_pcrs: vec![0, 7],
    };
    let challenge = Challenge::decode(&challenge.encode()).unwrap();
    let started = Instant::now();
    let response = attestation.answer(&challenge).unwrap();
    eprintln!("ECC-EK answer with a 2-PCR quote: {:?}", started.elapsed());
    let response = ChallengeResponse::decode(&response.encode()).unwrap();
    assert_eq!(response.credential.as_slice(), made.expected.as_slice());

    let quote = parse_attest(&response.quote);
    assert_eq!(quote.kind, ST_ATTEST_QUOTE);
    assert_eq!(quote.extra_data, nonce);
    assert_eq!(response.pcr_values.len(), 2);
    // TPMS_QUOTE_INFO: one SHA-256 selection of PCRs 0 and 7, then the
    // digest of their values in index order.
    let mut info = Reader::new(&quote.tail);
    assert_eq!(info.u32("count").unwrap(), 1);
    assert_eq!(info.u16("hash").unwrap(), 0x000B);
    assert_eq!(info.u8("sizeofSelect").unwrap(), 3);
    assert_eq!(info.take(3, "pcrSelect").unwrap(), [0b1000_0001, 0, 0]);
    let digest = info.tpm2b("pcrDigest").unwrap();
    info.finish("TPMS_QUOTE_INFO").unwrap();
    let mut hash = Sha256::new();
    for value in &response.pcr_values {
        hash.update(value);
    }
    assert_eq!(digest, hash.finalize().as_slice());
    verify(
        &payload.ak_public,
        &response.quote,
        &response.quote_signature,
    );

    // One challenge per attestation.
    assert!(matches!(
        attestation.answer(&challenge),
        Err(AgentTpmError::AlreadyAnswered)
    ));
    // The salted and policy sessions are gone already; the objects go with
    // the attestation.
    assert_eq!(loaded_handles(&tpm), (3, 0));
    drop(attestation);
    assert_eq!(loaded_handles(&tpm), before);
}

/// A credential made for another AK (another Name) does not open, the error
/// says so in one line without TPM codes, and nothing stays loaded.
#[test]
fn a_credential_for_another_ak_is_refused_and_everything_is_flushed() {
    let tmp = TempDir::new("spire-agent-foreign");
    let tpm = Swtpm::start(&tmp.subdir("tpm"));
    let (mut attestation, payload) =
        Attestation::begin(&settings(&tpm, EkAlgorithm::EccP256)).unwrap();
    let ek = StorageKey::from_tpmt_public(&payload.ek_public).unwrap();
    let mut other_name = sha256_name(&payload.ak_public);
    other_name[33] ^= 1;
    let made = make_credential(&ek, &other_name);
    let challenge = Challenge {
        credential_blob: made.blob.duplicate.clone(),
        encrypted_secret: made.blob.in_sym_seed.clone(),
        nonce: [0; 32],
        quote_pcrs: Vec::new(),
    };
    let err = attestation.answer(&challenge).unwrap_err();
    assert!(matches!(err, AgentTpmError::CredentialRejected), "{err:?}");
    let line = err.to_string();
    assert!(!line.contains('\n') && !line.contains("0x"), "{line}");
    drop(attestation);
    assert_eq!(loaded_handles(&tpm), (0, 0));
}

/// A TCTI that cannot carry the second connection is refused before any
/// TPM work, with the way out in the message.
#[test]
fn a_tcti_without_a_second_connection_is_refused_up_front() {
    let settings = TpmSettings {
        tcti: "mssim:host=127.0.0.1,port=1".parse().unwrap(),
        ek_algorithm: EkAlgorithm::Rsa2048,
        event_log_path: None,
    };
    let err = Attestation::begin(&settings).unwrap_err();
    assert!(err.to_string().contains("device:/dev/tpmrm0"), "{err}");
}

mod plugin_stream {
    //! The AidAttestation stream as SPIRE's agent drives it, through the
    //! generated client talking to the generated server in process.

    use std::sync::Arc;
    use std::time::Duration;

    use sceau_spire::agent::AgentPlugin;
    use sceau_spire::pb::agent_attestor::node_attestor_client::NodeAttestorClient;
    use sceau_spire::pb::agent_attestor::node_attestor_server::NodeAttestorServer;
    use sceau_spire::pb::agent_attestor::payload_or_challenge_response::Data;
    use sceau_spire::pb::agent_attestor::{
        Challenge as ChallengeMessage, PayloadOrChallengeResponse,
    };
    use sceau_spire::plugin::{CoreConfig, Plugin as _};
    use tokio::sync::mpsc;
    use tokio_stream::wrappers::ReceiverStream;
    use tonic::Code;

    use super::*;

    type Client = NodeAttestorClient<NodeAttestorServer<AgentPlugin>>;

    fn client(plugin: &Arc<AgentPlugin>) -> Client {
        NodeAttestorClient::new(NodeAttestorServer::from_arc(Arc::clone(plugin)))
    }

    fn configured(tpm: &Swtpm) -> Arc<AgentPlugin> {
        let plugin = Arc::new(AgentPlugin::new());
        let hcl = format!("tcti = \"{}\"\nek_algorithm = \"ecc\"\n", tpm.tcti());
        plugin.validate(&CoreConfig::default(), &hcl).unwrap();
        plugin.configure(&CoreConfig::default(), &hcl).unwrap();
        plugin
    }

    /// Opens the AidAttestation stream as SPIRE's agent does: the sender
    /// of its challenge messages, and the plugin's answers.
    async fn attest(
        plugin: &Arc<AgentPlugin>,
    ) -> Result<
        (
            mpsc::Sender<ChallengeMessage>,
            tonic::Streaming<PayloadOrChallengeResponse>,
        ),
        tonic::Status,
    > {
        let (sender, receiver) = mpsc::channel(1);
        let stream = client(plugin)
            .aid_attestation(ReceiverStream::new(receiver))
            .await?
            .into_inner();
        Ok((sender, stream))
    }

    async fn next(stream: &mut tonic::Streaming<PayloadOrChallengeResponse>) -> Data {
        tokio::time::timeout(Duration::from_secs(30), stream.message())
            .await
            .expect("the plugin answers")
            .expect("no error")
            .expect("a message")
            .data
            .expect("data")
    }

    /// The plugin releases the TPM after the stream; wait for it.
    async fn wait_flushed(tpm: &Swtpm) {
        for _ in 0..100 {
            if loaded_handles(tpm) == (0, 0) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("handles left loaded: {:?}", loaded_handles(tpm));
    }

    // A TPM that stops answering (here swtpm under SIGSTOP) fails the
    // attestation with DEADLINE_EXCEEDED at the step limit, in the plugin's
    // words, instead of holding SPIRE's stream forever. Seen failing with an
    // hour-long limit: "the plugin answers within its limit: Elapsed(())".
    #[tokio::test]
    async fn a_frozen_tpm_fails_the_attestation_at_the_step_limit() {
        let tmp = TempDir::new("spire-agent-frozen");
        let tpm = Swtpm::start(&tmp.subdir("tpm"));
        let plugin = Arc::new(AgentPlugin::with_tpm_step_timeout(Duration::from_secs(2)));
        let hcl = format!("tcti = \"{}\"\nek_algorithm = \"ecc\"\n", tpm.tcti());
        plugin.configure(&CoreConfig::default(), &hcl).unwrap();
        tpm.freeze();
        let started = std::time::Instant::now();
        let (_sender, mut stream) = attest(&plugin).await.unwrap();
        let status = tokio::time::timeout(Duration::from_secs(10), stream.message())
            .await
            .expect("the plugin answers within its limit")
            .unwrap_err();
        let elapsed = started.elapsed();
        tpm.thaw();
        assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
        assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");
        assert!(!status.message().contains("0x"), "{}", status.message());
    }

    #[tokio::test]
    async fn refuses_before_configure() {
        let plugin = Arc::new(AgentPlugin::new());
        let status = attest(&plugin).await.unwrap_err();
        assert_eq!(status.code(), Code::FailedPrecondition);
        assert_eq!(status.message(), "not configured");
    }

    #[tokio::test]
    async fn payload_challenge_response_then_nothing_stays_loaded() {
        let tmp = TempDir::new("spire-agent-stream");
        let tpm = Swtpm::start(&tmp.subdir("tpm"));
        let plugin = configured(&tpm);
        let (sender, mut stream) = attest(&plugin).await.unwrap();
        let Data::Payload(payload) = next(&mut stream).await else {
            panic!("the payload comes first");
        };
        let payload = Payload::decode(&payload).unwrap();
        let ek = StorageKey::from_tpmt_public(&payload.ek_public).unwrap();
        let made = make_credential(&ek, &sha256_name(&payload.ak_public));
        let challenge = Challenge {
            credential_blob: made.blob.duplicate.clone(),
            encrypted_secret: made.blob.in_sym_seed.clone(),
            nonce: [7; 32],
            quote_pcrs: vec![7],
        };
        sender
            .send(ChallengeMessage {
                challenge: challenge.encode(),
            })
            .await
            .unwrap();
        let Data::ChallengeResponse(response) = next(&mut stream).await else {
            panic!("then the challenge response");
        };
        let response = ChallengeResponse::decode(&response).unwrap();
        assert_eq!(response.credential.as_slice(), made.expected.as_slice());
        assert_eq!(response.pcr_values.len(), 1);
        drop(sender);
        wait_flushed(&tpm).await;
    }

    /// SPIRE may end the stream after the payload (no challenge): the TPM
    /// objects go then too. A malformed challenge is refused by name.
    #[tokio::test]
    async fn an_early_end_or_a_bad_challenge_releases_the_tpm() {
        let tmp = TempDir::new("spire-agent-early");
        let tpm = Swtpm::start(&tmp.subdir("tpm"));
        let plugin = configured(&tpm);

        let (sender, mut stream) = attest(&plugin).await.unwrap();
        assert!(matches!(next(&mut stream).await, Data::Payload(_)));
        drop(sender);
        wait_flushed(&tpm).await;

        let (sender, mut stream) = attest(&plugin).await.unwrap();
        assert!(matches!(next(&mut stream).await, Data::Payload(_)));
        sender
            .send(ChallengeMessage {
                challenge: b"STC1 garbage".to_vec(),
            })
            .await
            .unwrap();
        let status = tokio::time::timeout(Duration::from_secs(30), stream.message())
            .await
            .unwrap()
            .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument);
        assert!(
            status.message().starts_with("the server's challenge: "),
            "{status:?}"
        );
        wait_flushed(&tpm).await;
    }
}

/// The credential is the proof the server checks: an interposer on the TPM
/// bus must not read it from ActivateCredential's response (the AK's
/// session is salted to the SRK with response encryption).
#[test]
fn the_credential_never_crosses_the_bus_in_the_clear() {
    let tmp = TempDir::new("spire-agent-bus");
    let tpm = Swtpm::start(&tmp.subdir("tpm"));
    let proxy = sceau_testkit::bus_proxy::RecordingProxy::start(tpm.port());
    let settings = TpmSettings {
        tcti: proxy.tcti().parse().unwrap(),
        ek_algorithm: EkAlgorithm::EccP256,
        event_log_path: None,
    };
    let (mut attestation, payload) = Attestation::begin(&settings).unwrap();
    let ek = StorageKey::from_tpmt_public(&payload.ek_public).unwrap();
    let made = make_credential(&ek, &sha256_name(&payload.ak_public));
    let challenge = Challenge {
        credential_blob: made.blob.duplicate.clone(),
        encrypted_secret: made.blob.in_sym_seed.clone(),
        nonce: [0; 32],
        quote_pcrs: Vec::new(),
    };
    let response = attestation.answer(&challenge).unwrap();
    assert_eq!(response.credential.as_slice(), made.expected.as_slice());
    drop(attestation);
    let bus = proxy.recorded();
    // The proxy saw the attestation (the AK's x coordinate went by) ...
    let ak_x = &payload.ak_public[22..54];
    assert!(sceau_testkit::bus_proxy::occurrences(&bus, ak_x) > 0);
    // ... but not the credential.
    assert_eq!(
        sceau_testkit::bus_proxy::occurrences(&bus, made.expected.as_slice()),
        0
    );
}

/// The hook the rogue test agent uses: another AK template is created and
/// certified as asked (here without `restricted`), so the server's refusal
/// of such an AK can be tested with a real TPM's payload.
#[test]
fn another_ak_template_is_certified_as_asked() {
    let tmp = TempDir::new("spire-agent-unrestricted");
    let tpm = Swtpm::start(&tmp.subdir("tpm"));
    let template = sceau_spire::agent::tpm::ak_template_with(false).unwrap();
    let (attestation, payload) =
        Attestation::begin_with_ak_template(&settings(&tpm, EkAlgorithm::EccP256), template)
            .unwrap();
    let mut r = Reader::new(&payload.ak_public);
    r.take(4, "type and nameAlg").unwrap();
    assert_eq!(r.u32("attributes").unwrap(), AK_ATTRIBUTES & !0x0001_0000);
    let attest = parse_attest(&payload.creation_attestation);
    assert_eq!(attest.kind, ST_ATTEST_CREATION);
    let mut info = Reader::new(&attest.tail);
    assert_eq!(
        info.tpm2b("objectName").unwrap(),
        sha256_name(&payload.ak_public)
    );
    drop(attestation);
    assert_eq!(loaded_handles(&tpm), (0, 0));
}

/// An RSA EK's credential (RSA-OAEP seed), made by a second TPM from the
/// payload's EK public area and AK Name, opens on the attesting TPM.
#[test]
fn an_rsa_ek_challenge_is_answered() {
    use tss_esapi::interface_types::resource_handles::Hierarchy;
    use tss_esapi::structures::{Digest, Name, Public};
    use tss_esapi::traits::UnMarshall as _;

    let tmp = TempDir::new("spire-agent-rsa-challenge");
    let tpm = Swtpm::start(&tmp.subdir("tpm"));
    let verifier = Swtpm::start(&tmp.subdir("verifier"));
    let (mut attestation, payload) =
        Attestation::begin(&settings(&tpm, EkAlgorithm::Rsa2048)).unwrap();

    let expected = sceau_testkit::random_bytes(32);
    let mut ctx = Context::new(verifier.tcti().parse::<TctiNameConf>().unwrap()).unwrap();
    let ek = ctx
        .load_external_public(
            Public::unmarshall(&payload.ek_public).unwrap(),
            Hierarchy::Null,
        )
        .unwrap();
    let (blob, secret) = ctx
        .make_credential(
            ek,
            Digest::try_from(expected.clone()).unwrap(),
            Name::try_from(sha256_name(&payload.ak_public).to_vec()).unwrap(),
        )
        .unwrap();
    ctx.flush_context(ek.into()).unwrap();
    let challenge = Challenge {
        credential_blob: blob.value().to_vec(),
        encrypted_secret: secret.value().to_vec(),
        nonce: [1; 32],
        quote_pcrs: (0..10).collect(),
    };
    let response = attestation.answer(&challenge).unwrap();
    assert_eq!(response.credential.as_slice(), expected.as_slice());
    // More PCRs than one PCR_Read returns: all ten values, in order.
    assert_eq!(response.pcr_values.len(), 10);
    drop(attestation);
    assert_eq!(loaded_handles(&tpm), (0, 0));
}
