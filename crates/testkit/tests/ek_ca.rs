//! The local TPM manufacturer (`ek_ca`), judged by independent tools: the
//! certificates tpm2-tools reads from the TPM's NV verify with openssl against
//! their CA's roots and intermediates and not against another CA's; each
//! certifies the EK that the TCG default template derives in that TPM (RSA
//! 2048 and ECC P-256); two TPMs of one CA differ; the CA refuses to be made
//! twice and a TPM to be provisioned twice.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use sceau_testkit::ek_ca::{ECC_EK_CERT_INDEX, RSA_EK_CERT_INDEX};
use sceau_testkit::process::{Finished, run_with_timeout};
use sceau_testkit::{EkCa, Swtpm, TempDir, Tpm2Tools};

fn openssl(dir: &Path, args: &[&str]) -> Finished {
    let mut cmd = Command::new("openssl");
    cmd.args(args).current_dir(dir);
    run_with_timeout(&mut cmd, dir, Duration::from_secs(30))
}

/// The DER SubjectPublicKeyInfo of the PEM certificate `cert` (in `dir`).
fn cert_spki(dir: &Path, cert: &str) -> Vec<u8> {
    let pem = openssl(dir, &["x509", "-in", cert, "-pubkey", "-noout"]);
    assert!(pem.status.success(), "{}", pem.all_output());
    std::fs::write(dir.join("spki.pem"), pem.stdout).unwrap();
    let der = openssl(
        dir,
        &[
            "pkey", "-pubin", "-in", "spki.pem", "-outform", "DER", "-out", "spki.der",
        ],
    );
    assert!(der.status.success(), "{}", der.all_output());
    std::fs::read(dir.join("spki.der")).unwrap()
}

fn verifies(dir: &Path, ca: &EkCa, cert: &str) -> (bool, String) {
    let roots = ca.roots_pem.to_str().unwrap();
    let intermediates = ca.intermediates_pem.to_str().unwrap();
    let out = openssl(
        dir,
        &[
            "verify",
            "-CAfile",
            roots,
            "-untrusted",
            intermediates,
            cert,
        ],
    );
    (out.status.success(), out.all_output())
}

/// What one provisioned TPM shows: its two certificates (PEM files in `dir`)
/// and the SPKIs of the EKs its default templates derive.
struct Reading {
    rsa_cert_spki: Vec<u8>,
    ecc_cert_spki: Vec<u8>,
    rsa_ek_spki: Vec<u8>,
    ecc_ek_spki: Vec<u8>,
    rsa_san: String,
    ecc_san: String,
}

fn read_tpm(state: &Path, dir: &Path) -> Reading {
    std::fs::create_dir_all(dir).unwrap();
    let tpm = Swtpm::start(state);
    let tools = Tpm2Tools::new(&tpm, dir);
    for (index, name) in [(RSA_EK_CERT_INDEX, "rsa"), (ECC_EK_CERT_INDEX, "ecc")] {
        tools.run("tpm2_nvread", &[index, "-o", &format!("{name}.der")]);
        let pem = openssl(
            dir,
            &[
                "x509",
                "-inform",
                "DER",
                "-in",
                &format!("{name}.der"),
                "-out",
                &format!("{name}.pem"),
            ],
        );
        assert!(pem.status.success(), "{index}: {}", pem.all_output());
    }
    for (alg, name) in [("rsa", "rsa-ek.der"), ("ecc", "ecc-ek.der")] {
        tools.run(
            "tpm2_createek",
            &["-G", alg, "-c", "ek.ctx", "-u", name, "-f", "der"],
        );
        tools.flush_all();
    }
    let san = |cert: &str| {
        let out = openssl(
            dir,
            &["x509", "-in", cert, "-noout", "-ext", "subjectAltName"],
        );
        assert!(out.status.success(), "{}", out.all_output());
        out.stdout
    };
    Reading {
        rsa_cert_spki: cert_spki(dir, "rsa.pem"),
        ecc_cert_spki: cert_spki(dir, "ecc.pem"),
        rsa_ek_spki: std::fs::read(dir.join("rsa-ek.der")).unwrap(),
        ecc_ek_spki: std::fs::read(dir.join("ecc-ek.der")).unwrap(),
        rsa_san: san("rsa.pem"),
        ecc_san: san("ecc.pem"),
    }
}

#[test]
fn provisioned_tpms_hold_ek_certificates_of_their_own_ca_only() {
    let tmp = TempDir::new("ek-ca");
    let started = Instant::now();
    let ca = EkCa::create(&tmp.join("ca")).expect("create the CA");
    let other_ca = EkCa::create(&tmp.join("other-ca")).expect("create the second CA");
    let created = started.elapsed();
    ca.provision_tpm(&tmp.join("tpm-a"))
        .expect("provision tpm-a");
    let one_tpm = started.elapsed() - created;
    ca.provision_tpm(&tmp.join("tpm-b"))
        .expect("provision tpm-b");
    other_ca
        .provision_tpm(&tmp.join("tpm-c"))
        .expect("provision tpm-c");
    eprintln!("two CAs in {created:?}, one TPM in {one_tpm:?}");

    let a = read_tpm(&tmp.join("tpm-a"), &tmp.subdir("read-a"));
    assert_eq!(
        a.rsa_cert_spki, a.rsa_ek_spki,
        "the RSA certificate is not for the RSA EK"
    );
    assert_eq!(
        a.ecc_cert_spki, a.ecc_ek_spki,
        "the ECC certificate is not for the ECC EK"
    );
    assert!(a.ecc_ek_spki.len() == 91, "the ECC EK is not P-256");
    assert!(
        a.rsa_san.contains("2.23.133.2.1"),
        "no TPM manufacturer in {}",
        a.rsa_san
    );
    assert_eq!(
        a.rsa_san, a.ecc_san,
        "the two certificates describe different TPMs"
    );
    for cert in ["rsa.pem", "ecc.pem"] {
        let (ok, why) = verifies(&tmp.join("read-a"), &ca, cert);
        assert!(ok, "{cert} does not verify against its CA: {why}");
        let (ok, why) = verifies(&tmp.join("read-a"), &other_ca, cert);
        assert!(!ok, "{cert} verifies against another CA: {why}");
    }

    let b = read_tpm(&tmp.join("tpm-b"), &tmp.subdir("read-b"));
    assert_ne!(a.rsa_ek_spki, b.rsa_ek_spki, "two TPMs share an RSA EK");
    assert_ne!(a.ecc_ek_spki, b.ecc_ek_spki, "two TPMs share an ECC EK");
    assert_eq!(b.rsa_cert_spki, b.rsa_ek_spki);
    assert_eq!(b.ecc_cert_spki, b.ecc_ek_spki);

    let c = read_tpm(&tmp.join("tpm-c"), &tmp.subdir("read-c"));
    assert_eq!(c.ecc_cert_spki, c.ecc_ek_spki);
    for cert in ["rsa.pem", "ecc.pem"] {
        let (ok, why) = verifies(&tmp.join("read-c"), &other_ca, cert);
        assert!(ok, "{cert} does not verify against its CA: {why}");
        let (ok, why) = verifies(&tmp.join("read-c"), &ca, cert);
        assert!(
            !ok,
            "{cert} of the other CA verifies against the first: {why}"
        );
    }
}

#[test]
fn a_ca_and_a_tpm_are_made_once() {
    let tmp = TempDir::new("ek-ca-once");
    let ca = EkCa::create(&tmp.join("ca")).expect("create the CA");
    let again = EkCa::create(&tmp.join("ca")).expect_err("a second CA in the same directory");
    assert!(again.to_string().contains("already holds a CA"), "{again}");
    let reopened = EkCa::open_or_create(&tmp.join("ca")).expect("reopen the CA");
    assert_eq!(reopened.roots_pem, ca.roots_pem);
    assert_eq!(
        std::fs::read(&reopened.roots_pem).unwrap(),
        std::fs::read(&ca.roots_pem).unwrap()
    );
    ca.provision_tpm(&tmp.join("tpm")).expect("provision");
    let twice = ca
        .provision_tpm(&tmp.join("tpm"))
        .expect_err("provision the same state twice");
    assert!(twice.to_string().contains("already holds a TPM"), "{twice}");
    let missing = EkCa::open(&tmp.join("no-ca")).expect_err("open a missing CA");
    assert!(missing.to_string().contains("no-ca"), "{missing}");
}
