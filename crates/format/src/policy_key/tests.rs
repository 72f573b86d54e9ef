//! The policy key's files against OpenSSL's (keys made with `openssl
//! genpkey` and `openssl pkey -pubout`; fingerprints with `openssl rsa
//! -RSAPublicKey_out -outform DER | sha256sum` and, for P-256, SHA-256 of
//! the point).

use super::*;

const OPENSSL_P256: &str = "\
-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEifpyQBKfDQkP3+L5rmMYZTZJAVox
aIlLvu3QKXXe3HQEPdUVRJlDtlcSiQNFXksXkP4CazhnIzqu9oXSwAbnPw==
-----END PUBLIC KEY-----
";
const OPENSSL_P256_FINGERPRINT: &str =
    "91541a2b225cfcc6998b1977d5db8a916b30be8e646f073652090c9173622cc6";
const OPENSSL_RSA_2048: &str = "\
-----BEGIN PUBLIC KEY-----
MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAvEtArsHDvWDZzMUIWSap
3x/Y8SZ/tCITQ1gDmoAGrsJ0tS5VRXclQbrDTyHWUWkVZts7tr+SkmekRciT5Dkr
HMAsMYXiqs72lTNXFjTlDorkInGNKEea5qqTuF2Pa+wrqLDYw7TislxN5Yq33ONx
XTSLJrL9Nl8S8w55gr8biuWTDrLZaiOnBw247M2UcfBYGcv2v/tXabYuNeFVRUyr
wPSO65WzN7H7JM/UpyR1KWphpIwQoWGdva1Ok57eWv5tNC4C13yhxkCSRh1M116h
vC0ULOGAZGTapGpnR3uapCZ+B4WKA3V/pERVvTpBXUyUkEkU/l/TeLxdA3x8FBED
SwIDAQAB
-----END PUBLIC KEY-----
";
const OPENSSL_RSA_2048_FINGERPRINT: &str =
    "b538c208145ca81448a4fcdf6b9d48c0c4ae79755ac5e6a9be4c9bb51dc515b0";
const OPENSSL_RSA_1024: &str = "\
-----BEGIN PUBLIC KEY-----
MIGfMA0GCSqGSIb3DQEBAQUAA4GNADCBiQKBgQDJ1Ih7HPzzI4+g+7she7EQFERq
+rcEQsFP+C6g2O//TRKQVjUQEnudSgzro8yuuL8QJvXrzsHl7Yv8qyKglCBz72Hq
Zpo6xHRh7LgL2QvzgI9sNXhyZ/DbC++GNkH0pyAzyh5Vf90yVKaLrCRSdUZwZzWs
izSVl4llFDbRqQqOHwIDAQAB
-----END PUBLIC KEY-----
";
const OPENSSL_P384: &str = "\
-----BEGIN PUBLIC KEY-----
MHYwEAYHKoZIzj0CAQYFK4EEACIDYgAEPFcno0f7E52q7XTscF0c1zzyr7swj4a9
/QvhhtUb0aiXh76p3lrLWkQw0Ha+E3e1+iAUZ4q9MY6gtIu3ZH4VRXAJH3ijHh9L
T93Wo59tI+fwgtC3E2e8CIyZAeX3BzSF
-----END PUBLIC KEY-----
";

#[test]
fn openssl_public_keys_read_back_byte_for_byte() {
    for (pem, fingerprint) in [
        (OPENSSL_P256, OPENSSL_P256_FINGERPRINT),
        (OPENSSL_RSA_2048, OPENSSL_RSA_2048_FINGERPRINT),
    ] {
        let key = PolicyKey::from_pem(pem).unwrap();
        assert_eq!(
            key.to_pem(),
            pem,
            "the SPKI is re-encoded as OpenSSL wrote it"
        );
        assert_eq!(crate::key_id::hex(&key.fingerprint()), fingerprint);
    }
    assert!(matches!(
        PolicyKey::from_pem(OPENSSL_RSA_2048).unwrap(),
        PolicyKey::Rsa {
            exponent: 65537,
            ..
        }
    ));
}

#[test]
fn other_sizes_and_curves_are_refused_with_what_to_use() {
    assert_eq!(
        PolicyKey::from_pem(OPENSSL_RSA_1024),
        Err(PolicyKeyError::RsaSize(1024))
    );
    assert_eq!(
        PolicyKey::from_pem(OPENSSL_P384),
        Err(PolicyKeyError::Algorithm)
    );
    assert_eq!(
        PolicyKey::from_pem("no key here"),
        Err(PolicyKeyError::NotPem)
    );
    let cut = OPENSSL_P256.replace(
        "aIlLvu3QKXXe3HQEPdUVRJlDtlcSiQNFXksXkP4CazhnIzqu9oXSwAbnPw==\n",
        "",
    );
    assert!(PolicyKey::from_pem(&cut).is_err());
}

#[test]
fn a_signature_verifies_only_for_its_policy_and_its_key() {
    let signer = PolicySigner::generate();
    let other = PolicySigner::generate();
    let policy = [0x5A; 32];
    let signature = signer.sign(&policy);
    signer.public().verify(&policy, &signature).unwrap();
    let mut changed = policy;
    changed[31] ^= 1;
    assert_eq!(
        signer.public().verify(&changed, &signature),
        Err(PolicySignatureError::Invalid)
    );
    assert_eq!(
        other.public().verify(&policy, &signature),
        Err(PolicySignatureError::Invalid)
    );
    assert_eq!(
        signer.public().verify(&policy, &signature[1..]),
        Err(PolicySignatureError::Malformed)
    );
    let rsa = PolicyKey::from_pem(OPENSSL_RSA_2048).unwrap();
    assert_eq!(
        rsa.verify(&policy, &signature),
        Err(PolicySignatureError::Rsa)
    );
}

#[test]
fn the_private_key_file_round_trips() {
    let signer = PolicySigner::generate();
    let again = PolicySigner::from_pem(&signer.to_pem()).unwrap();
    assert_eq!(again.public(), signer.public());
    assert!(PolicySigner::from_pem(OPENSSL_P256).is_err());
}

#[test]
fn the_authorized_policy_commits_to_the_key() {
    let a = PolicyKey::from_pem(OPENSSL_P256).unwrap();
    let b = PolicyKey::from_pem(OPENSSL_RSA_2048).unwrap();
    assert_ne!(a.authorized_policy(), b.authorized_policy());
    assert_eq!(a.name()[..2], [0x00, 0x0B]);
    // The public areas' shapes: ECC, then RSA with the default exponent
    // written as 0 and a 256-byte modulus.
    assert_eq!(a.tpmt_public().len(), 2 + 2 + 4 + 2 + 8 + 2 * 34);
    assert_eq!(b.tpmt_public().len(), 2 + 2 + 4 + 2 + 10 + 2 + 256);
    assert_eq!(&b.tpmt_public()[16..20], &[0, 0, 0, 0]);
}
