//! Contract test 3: every malformed envelope is an INVALID_ARGUMENT with a
//! clean message, and none of them disturbs the daemon or the TPM.

use crate::harness::envelope::{Envelope, HEADER_LEN, be16};
use crate::harness::rpc::{self, expect_invalid_argument};
use crate::harness::{Fixture, random_bytes};

// Offsets inside a TPM2B_PUBLIC (after its own 2-byte size): TPMT_PUBLIC is
// type (u16), nameAlg (u16), objectAttributes (u32), ...
const PUBLIC_TYPE: usize = 2;
const PUBLIC_NAME_ALG: usize = 4;
const PUBLIC_ATTRIBUTES: usize = 6;
// Inside a TPM2B_PRIVATE: size (u16), then the integrity HMAC as a TPM2B.
const PRIVATE_INTEGRITY_HMAC: usize = 4;

const TPM_ALG_RSA: u16 = 0x0001;
const TPM_ALG_SHA1: u16 = 0x0004;
const ATTR_FIXED_TPM: u32 = 1 << 1;
const ATTR_SIGN: u32 = 1 << 18;

#[tokio::test(flavor = "multi_thread")]
async fn malformed_envelopes_are_invalid_arguments() {
    let fx = Fixture::start("malformed", &[]);
    let (mut client, key_id) = fx.client().await;
    let dek = random_bytes(32);
    let good = rpc::seal(&mut client, &key_id, &dek).await;

    let cases = malformed_variants(&good);
    assert!(cases.len() >= 15);
    for (what, bytes) in &cases {
        assert_ne!(
            bytes, &good,
            "case {what:?} must differ from the real envelope"
        );
        let result = rpc::decrypt(&mut client, bytes, &key_id).await;
        let status = expect_invalid_argument(result, what);
        println!("{what}: {:?}", status.message());
    }

    assert_eq!(rpc::status(&mut client).await.healthz, "ok");
    rpc::open(&mut client, &key_id, &good, &dek).await;
    rpc::round_trip(&mut client, &key_id, &random_bytes(32)).await;
}

/// Named corruptions of a real 32-byte-DEK envelope, from framing errors that
/// a parser must catch to content errors only the TPM can detect.
fn malformed_variants(good: &[u8]) -> Vec<(&'static str, Vec<u8>)> {
    let env = Envelope::parse(good);
    let public_end = HEADER_LEN + env.public.len();
    let mut cases = vec![
        ("empty", vec![]),
        ("version byte only", good[..1].to_vec()),
        ("half a length field", good[..2].to_vec()),
        ("header only", good[..HEADER_LEN].to_vec()),
        (
            "truncated inside TPM2B_PUBLIC",
            good[..HEADER_LEN + env.public.len() / 2].to_vec(),
        ),
        ("nothing after TPM2B_PUBLIC", good[..public_end].to_vec()),
        ("TPM2B_PRIVATE size only", good[..public_end + 2].to_vec()),
        ("last byte missing", good[..good.len() - 1].to_vec()),
        ("one trailing byte", [good, &[0]].concat()),
        ("two envelopes back to back", [good, good].concat()),
        ("version 0x00", with_byte(good, 0, 0x00)),
        ("version 0x02", with_byte(good, 0, 0x02)),
        ("version 0xff", with_byte(good, 0, 0xff)),
        (
            "all zero after a valid header",
            [&good[..HEADER_LEN], &vec![0; good.len() - HEADER_LEN][..]].concat(),
        ),
        (
            "4 KiB of random bytes after the version",
            [&[1u8][..], &random_bytes(4096)].concat(),
        ),
        (
            "halves swapped",
            Envelope {
                public: env.private.clone(),
                private: env.public.clone(),
            }
            .encode(),
        ),
        (
            "empty TPM2B_PUBLIC",
            Envelope {
                public: vec![0, 0],
                private: env.private.clone(),
            }
            .encode(),
        ),
        (
            "empty TPM2B_PRIVATE",
            Envelope {
                public: env.public.clone(),
                private: vec![0, 0],
            }
            .encode(),
        ),
        (
            "random TPM2B_PUBLIC body",
            Envelope {
                public: random_tpm2b(env.public.len()),
                ..env.clone()
            }
            .encode(),
        ),
        (
            "random TPM2B_PRIVATE body",
            Envelope {
                private: random_tpm2b(env.private.len()),
                ..env.clone()
            }
            .encode(),
        ),
    ];
    cases.extend(length_field_variants(good, &env));
    cases.extend(public_content_variants(&env));
    cases.extend(private_content_variants(&env));
    cases
}

/// Length fields that disagree with each other or with the data.
fn length_field_variants(good: &[u8], env: &Envelope) -> Vec<(&'static str, Vec<u8>)> {
    let outer = be16(&good[1..3]);
    let public_size = be16(&env.public);
    let private_size = be16(&env.private);
    let private_at = HEADER_LEN + env.public.len();
    vec![
        ("public length one too big", with_u16(good, 1, outer + 1)),
        ("public length one too small", with_u16(good, 1, outer - 1)),
        ("public length zero", with_u16(good, 1, 0)),
        ("public length 0xffff", with_u16(good, 1, 0xffff)),
        (
            "TPM2B_PUBLIC size one too big",
            with_u16(good, HEADER_LEN, public_size + 1),
        ),
        (
            "TPM2B_PUBLIC size one too small",
            with_u16(good, HEADER_LEN, public_size - 1),
        ),
        (
            "TPM2B_PRIVATE size one too big",
            with_u16(good, private_at, private_size + 1),
        ),
        (
            "TPM2B_PRIVATE size one too small",
            with_u16(good, private_at, private_size - 1),
        ),
        (
            "TPM2B_PRIVATE size 0xffff",
            with_u16(good, private_at, 0xffff),
        ),
    ]
}

/// Well-framed envelopes whose TPM2B_PUBLIC says something else than what was
/// sealed. The TPM binds the private part to the public part's Name, so none
/// of these may load.
fn public_content_variants(env: &Envelope) -> Vec<(&'static str, Vec<u8>)> {
    let attributes = u32::from_be_bytes(
        env.public[PUBLIC_ATTRIBUTES..PUBLIC_ATTRIBUTES + 4]
            .try_into()
            .unwrap(),
    );
    let with_public = |public: Vec<u8>| {
        Envelope {
            public,
            private: env.private.clone(),
        }
        .encode()
    };
    let last = env.public.len() - 1;
    vec![
        (
            "public type RSA",
            with_public(with_u16(&env.public, PUBLIC_TYPE, TPM_ALG_RSA)),
        ),
        (
            "public type unassigned",
            with_public(with_u16(&env.public, PUBLIC_TYPE, 0x7fff)),
        ),
        (
            "public nameAlg sha1",
            with_public(with_u16(&env.public, PUBLIC_NAME_ALG, TPM_ALG_SHA1)),
        ),
        (
            "public fixedTPM flipped",
            with_public(with_u32(
                &env.public,
                PUBLIC_ATTRIBUTES,
                attributes ^ ATTR_FIXED_TPM,
            )),
        ),
        (
            "public sign flipped",
            with_public(with_u32(
                &env.public,
                PUBLIC_ATTRIBUTES,
                attributes ^ ATTR_SIGN,
            )),
        ),
        (
            "public unique digest changed",
            with_public(with_byte(&env.public, last, env.public[last] ^ 1)),
        ),
    ]
}

/// Bit flips in the sealed blob: the TPM's integrity check must catch them.
fn private_content_variants(env: &Envelope) -> Vec<(&'static str, Vec<u8>)> {
    let with_private = |private: Vec<u8>| {
        Envelope {
            public: env.public.clone(),
            private,
        }
        .encode()
    };
    let flip = |at: usize| with_private(with_byte(&env.private, at, env.private[at] ^ 0x80));
    vec![
        (
            "private integrity HMAC flipped",
            flip(PRIVATE_INTEGRITY_HMAC),
        ),
        (
            "private encrypted sensitive flipped",
            flip(env.private.len() - 1),
        ),
    ]
}

fn with_byte(bytes: &[u8], at: usize, value: u8) -> Vec<u8> {
    let mut out = bytes.to_vec();
    out[at] = value;
    out
}

fn with_u16(bytes: &[u8], at: usize, value: u16) -> Vec<u8> {
    let mut out = bytes.to_vec();
    out[at..at + 2].copy_from_slice(&value.to_be_bytes());
    out
}

fn with_u32(bytes: &[u8], at: usize, value: u32) -> Vec<u8> {
    let mut out = bytes.to_vec();
    out[at..at + 4].copy_from_slice(&value.to_be_bytes());
    out
}

/// A TPM2B of `total_len` bytes with a correct size prefix and random body.
fn random_tpm2b(total_len: usize) -> Vec<u8> {
    let size = u16::try_from(total_len - 2).expect("fits u16");
    [&size.to_be_bytes()[..], &random_bytes(total_len - 2)].concat()
}

/// sceau serves one gRPC service with no router in front of it: a method it
/// does not have, or another service, must still get UNIMPLEMENTED (from the
/// generated server), and the connection must stay usable.
#[tokio::test(flavor = "multi_thread")]
async fn unknown_methods_are_unimplemented() {
    use sceau_kms_api::pb::{StatusRequest, StatusResponse};
    use tonic::codegen::http::uri::{PathAndQuery, Uri};

    let fx = Fixture::start("unimplemented", &[]);
    let connection = sceau_kms_api::open(fx.sceau.socket())
        .await
        .expect("connect");
    let mut grpc =
        tonic::client::Grpc::with_origin(connection, Uri::from_static(sceau_kms_api::ORIGIN));
    for path in [
        "/v2.KeyManagementService/Rotate",
        "/v1beta1.KeyManagementService/Encrypt",
        "/grpc.health.v1.Health/Check",
    ] {
        grpc.ready().await.expect("connection ready");
        let call = grpc.unary::<StatusRequest, StatusResponse, _>(
            tonic::Request::new(StatusRequest {}),
            PathAndQuery::from_static(path),
            tonic_prost::ProstCodec::default(),
        );
        let status = tokio::time::timeout(rpc::CALL_TIMEOUT, call)
            .await
            .expect("an answer")
            .expect_err("no such method");
        assert_eq!(
            status.code(),
            tonic::Code::Unimplemented,
            "{path}: {status:?}"
        );
    }
    grpc.ready().await.expect("connection ready");
    let status = grpc
        .unary::<StatusRequest, StatusResponse, _>(
            tonic::Request::new(StatusRequest {}),
            PathAndQuery::from_static("/v2.KeyManagementService/Status"),
            tonic_prost::ProstCodec::default(),
        )
        .await
        .expect("Status on the same connection");
    assert_eq!(status.into_inner().healthz, "ok");
}
