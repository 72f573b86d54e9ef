//! `sceau enroll`: credential activation proves that a member file's SRK is in
//! the same TPM as an endorsement key. The member's side runs
//! TPM2_ActivateCredential on a real swtpm.

use std::path::Path;
use std::process::{Command, Output};

use crate::harness::ek_ca::EkCa;
use crate::harness::sceau::{BIN, recover_bin};
use crate::harness::{Swtpm, TempDir, Tpm2Tools};
use sceau_format::key_id::hex;

fn sceau(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .output()
        .expect("running sceau")
}

/// The verifier's steps run `sceau-recover`, which needs no TPM.
fn sceau_recover(args: &[&str]) -> Output {
    Command::new(recover_bin())
        .args(args)
        .output()
        .expect("running sceau-recover")
}

/// `sceau-recover` with `stdin` as its standard input (for
/// `--passphrase-fd 0`).
fn sceau_recover_reading(args: &[&str], stdin: &Path) -> Output {
    Command::new(recover_bin())
        .args(args)
        .stdin(std::fs::File::open(stdin).unwrap())
        .output()
        .expect("running sceau-recover")
}

fn ok(output: Output, what: &str) -> String {
    assert!(
        output.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `enroll verify` of the files `enroll_with` wrote for `label`, with
/// `request` (written to `LABEL.swapped`) in place of the request the
/// challenge was made from; the member file goes to `LABEL.swapped.pub`.
fn verify_with_request(tmp: &TempDir, label: &str, request: &str) -> Output {
    let swapped = tmp.join(&format!("{label}.swapped"));
    std::fs::write(&swapped, request).unwrap();
    sceau_recover(&[
        "enroll",
        "verify",
        "--request",
        path(&swapped),
        "--expected",
        path(&tmp.join(&format!("{label}.expected"))),
        "--response",
        path(&tmp.join(&format!("{label}.response"))),
        "--member-out",
        path(&tmp.join(&format!("{label}.swapped.pub"))),
        "--accept-any-ek",
    ])
}

/// The refusal of a request swapped between challenge and verify: one
/// line naming what changed, and no member file.
fn assert_swap_refused(tmp: &TempDir, label: &str, refused: Output, says: &str) {
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{label}: verified");
    assert_eq!(stderr.lines().count(), 1, "{label}: {stderr}");
    assert!(
        stderr.contains(says) && stderr.contains("the request changed since `enroll challenge`"),
        "{label}: {stderr}"
    );
    assert!(!tmp.join(&format!("{label}.swapped.pub")).exists());
}

/// Runs steps 2–4 for `request`, answering on `answering_tpm`, trusting
/// any EK.
fn enroll_with(
    tmp: &TempDir,
    label: &str,
    request: &str,
    answering_tpm: &Swtpm,
) -> (Output, Output) {
    let challenged = challenge(tmp, label, request, &["--accept-any-ek"]);
    ok(challenged, "challenge");
    answer_and_verify(tmp, label, answering_tpm, &["--accept-any-ek"])
}

/// Step 2 for `request` as `label`, with `trust` (the EK options).
fn challenge(tmp: &TempDir, label: &str, request: &str, trust: &[&str]) -> Output {
    let request_file = tmp.join(&format!("{label}.request"));
    std::fs::write(&request_file, request).unwrap();
    let mut args = vec![
        "enroll".to_string(),
        "challenge".into(),
        "--request".into(),
        path(&request_file).into(),
        "--challenge-out".into(),
        path(&tmp.join(&format!("{label}.challenge"))).into(),
        "--expected-out".into(),
        path(&tmp.join(&format!("{label}.expected"))).into(),
    ];
    args.extend(trust.iter().map(|a| a.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    sceau_recover(&args)
}

/// Steps 3 and 4 for the files `challenge` wrote for `label`.
fn answer_and_verify(
    tmp: &TempDir,
    label: &str,
    answering_tpm: &Swtpm,
    trust: &[&str],
) -> (Output, Output) {
    let request_file = tmp.join(&format!("{label}.request"));
    let challenge = tmp.join(&format!("{label}.challenge"));
    let expected = tmp.join(&format!("{label}.expected"));
    let response = tmp.join(&format!("{label}.response"));
    let member = tmp.join(&format!("{label}.pub"));
    let answer = sceau(&[
        "enroll",
        "respond",
        "--challenge",
        path(&challenge),
        "--tcti",
        &answering_tpm.tcti(),
    ]);
    std::fs::write(&response, &answer.stdout).unwrap();
    let mut args = vec![
        "enroll",
        "verify",
        "--request",
        path(&request_file),
        "--expected",
        path(&expected),
        "--response",
        path(&response),
        "--member-out",
        path(&member),
    ];
    args.extend(trust);
    let verified = sceau_recover(&args);
    (answer, verified)
}

/// Steps 1–4 for `tpm` as label `node`, each of which must succeed.
fn enrolled(tmp: &TempDir, tpm: &Swtpm) {
    let request = ok(
        sceau(&["enroll", "request", "--tcti", &tpm.tcti()]),
        "request",
    );
    let (answer, verified) = enroll_with(tmp, "node", &request, tpm);
    ok(answer, "respond");
    ok(verified, "verify");
}

#[test]
fn a_member_proves_its_srk_and_ek_share_a_tpm() {
    let tmp = TempDir::new("enroll");
    let tpm = Swtpm::start(&tmp.subdir("tpm"));
    enrolled(&tmp, &tpm);
    // The member file written is exactly what srk-public prints.
    let member = std::fs::read_to_string(tmp.join("node.pub")).unwrap();
    assert_eq!(
        member,
        ok(sceau(&["srk-public", "--tcti", &tpm.tcti()]), "srk-public")
    );
}

/// Two swtpm instances, each with its `sceau enroll request`.
fn two_tpms_and_their_requests(tmp: &TempDir) -> [(Swtpm, String); 2] {
    ["a", "b"].map(|label| {
        let tpm = Swtpm::start(&tmp.subdir(&format!("tpm-{label}")));
        let request = ok(
            sceau(&["enroll", "request", "--tcti", &tpm.tcti()]),
            &format!("request {label}"),
        );
        (tpm, request)
    })
}

/// A request that pairs one TPM's SRK with another TPM's EK cannot be
/// answered: not by the SRK's TPM (ActivateCredential fails its integrity
/// check) and not by the EK's TPM (its SRK has another Name).
#[test]
fn an_srk_paired_with_a_foreign_ek_is_not_enrolled() {
    let tmp = TempDir::new("enroll-forged");
    let [(tpm_a, request_a), (tpm_b, request_b)] = two_tpms_and_their_requests(&tmp);
    let srk_a = &request_a[..request_a.find("# The endorsement key").unwrap()];
    let ek_b = &request_b[request_b.find("# The endorsement key").unwrap()..];
    let forged = format!("{srk_a}{ek_b}");
    for (label, tpm) in [("at-a", &tpm_a), ("at-b", &tpm_b)] {
        let (answer, verified) = enroll_with(&tmp, label, &forged, tpm);
        assert!(
            !answer.status.success(),
            "{label}: the TPM answered a forged challenge"
        );
        assert!(
            !verified.status.success(),
            "{label}: verify accepted no answer"
        );
        assert!(!tmp.join(&format!("{label}.pub")).exists());
    }
}

/// A request whose signing key is another TPM's (its block spliced in with
/// its pin line) is not enrolled: neither TPM holds both keys the challenge
/// names, and `respond` refuses it by the pin lines before the TPM. With
/// the pins edited to the answering TPM's own keys, the TPM itself refuses:
/// the credential for the signing key is bound to the other TPM's Name, and
/// ActivateCredential fails its integrity check. Before the challenge
/// covered the signing key, this request was enrolled and the foreign key
/// copied into the member file (tried once).
#[test]
fn a_signing_key_from_another_tpm_is_not_enrolled() {
    let tmp = TempDir::new("enroll-signing");
    let [(tpm_a, request_a), (tpm_b, request_b)] = two_tpms_and_their_requests(&tmp);
    let signing = |r: &str| r.find("# This node's envelope signing key").unwrap();
    let ek = |r: &str| r.find("# The endorsement key").unwrap();
    let forged = format!(
        "{}{}{}",
        &request_a[..signing(&request_a)],
        &request_b[signing(&request_b)..ek(&request_b)],
        &request_a[ek(&request_a)..]
    );
    for (label, tpm) in [("at-a", &tpm_a), ("at-b", &tpm_b)] {
        let (answer, verified) = enroll_with(&tmp, label, &forged, tpm);
        assert!(!answer.status.success(), "{label}: answered");
        assert!(!verified.status.success(), "{label}: verified");
        assert!(!tmp.join(&format!("{label}.pub")).exists());
    }
    let pin = |r: &str| {
        r.lines()
            .find_map(|l| l.strip_prefix("signing-name: "))
            .unwrap()
            .to_string()
    };
    let challenge = std::fs::read_to_string(tmp.join("at-a.challenge")).unwrap();
    let edited = tmp.join("edited.challenge");
    std::fs::write(
        &edited,
        challenge.replace(
            &format!("signing_name: {}", pin(&request_b)),
            &format!("signing_name: {}", pin(&request_a)),
        ),
    )
    .unwrap();
    let answer = sceau(&[
        "enroll",
        "respond",
        "--challenge",
        path(&edited),
        "--tcti",
        &tpm_a.tcti(),
    ]);
    let stderr = String::from_utf8_lossy(&answer.stderr);
    assert!(!answer.status.success());
    assert!(
        stderr.contains("refused the challenge for the signing key"),
        "{stderr}"
    );
}

/// The answer proves the SRK and signing key share a TPM with the EK the
/// challenge was made for; `verify` then reports that EK and endorses the
/// member file with it. A request swapped between challenge and verify
/// (the same member keys with another TPM's EK) is refused by the EK the
/// expected answer pins. Shown failing before the pin: verify wrote the
/// member file and reported the other TPM's EK.
#[test]
fn a_request_with_another_ek_at_verify_is_refused() {
    let tmp = TempDir::new("enroll-swapped-ek");
    let [(tpm_a, request_a), (_tpm_b, request_b)] = two_tpms_and_their_requests(&tmp);
    let (answer, verified) = enroll_with(&tmp, "node", &request_a, &tpm_a);
    ok(answer, "respond");
    ok(verified, "verify");
    let member_a = &request_a[..request_a.find("# The endorsement key").unwrap()];
    let ek_b = &request_b[request_b.find("# The endorsement key").unwrap()..];
    let swapped = verify_with_request(&tmp, "node", &format!("{member_a}{ek_b}"));
    assert_swap_refused(&tmp, "node", swapped, "the challenge was made for EK");
}

/// A TCG EK certificate at NV index 0x01c0000a (issued here by swtpm's own
/// local CA for the TPM's P-256 EK) travels in the request, and the challenge
/// step checks that it names the EK; one for another key is refused.
#[test]
fn an_ek_certificate_must_name_the_ek() {
    let tmp = TempDir::new("enroll-cert");
    let tpm = Swtpm::start(&tmp.subdir("tpm"));
    let tools = Tpm2Tools::new(&tpm, &tmp.subdir("tools"));
    let request = ok(
        sceau(&["enroll", "request", "--tcti", &tpm.tcti()]),
        "request",
    );
    assert!(
        !request.contains("EK CERTIFICATE"),
        "a fresh swtpm has no P-256 EK certificate"
    );
    let ek_x_y = ek_coordinates(&tools);
    let certificate = issue_ek_certificate(&tmp, &ek_x_y);
    store_ek_certificate(&tools, &certificate);
    let request = ok(
        sceau(&["enroll", "request", "--tcti", &tpm.tcti()]),
        "request",
    );
    assert!(request.contains("-----BEGIN EK CERTIFICATE-----"));
    let (answer, verified) = enroll_with(&tmp, "certified", &request, &tpm);
    ok(answer, "respond");
    ok(verified, "verify");
    // The certificate is pinned by the expected answer: the same request
    // without it is refused at verify (shown failing before the pin).
    let cert_at = request.find("# DER").unwrap();
    let uncertified = verify_with_request(&tmp, "certified", &request[..cert_at]);
    assert_swap_refused(
        &tmp,
        "certified",
        uncertified,
        "the challenge was made for EK certificate",
    );

    // The same certificate in another TPM's request does not name its EK.
    let other = Swtpm::start(&tmp.subdir("other"));
    let other_request = ok(
        sceau(&["enroll", "request", "--tcti", &other.tcti()]),
        "other request",
    );
    let cert_block = &request[request.find("# DER").unwrap()..];
    let forged = format!("{other_request}{cert_block}");
    let refused = challenge(&tmp, "forged", &forged, &["--accept-any-ek"]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("does not contain this EK"));
}

/// A manufacturer CA (the test kit's swtpm CA), a TPM it certified, running,
/// and that TPM's enrollment request.
fn certified_tpm(tmp: &TempDir) -> (EkCa, std::path::PathBuf, Swtpm, String) {
    let ca = EkCa::create(&tmp.subdir("ca")).expect("a manufacturer CA");
    let state = tmp.join("tpm");
    ca.provision_tpm(&state)
        .expect("a TPM with EK certificates");
    let tpm = Swtpm::start(&state);
    let request = ok(
        sceau(&["enroll", "request", "--tcti", &tpm.tcti()]),
        "request",
    );
    (ca, state, tpm, request)
}

/// With `--ek-roots`, the EK certificate must chain to the manufacturer
/// (the test kit's swtpm CA: a root and an intermediate, made by
/// swtpm_localca) with the SPIRE server's validator: a genuine certificate
/// enrolls, also given as a file; no certificate, another EK's, one of
/// another manufacturer, an expired one (the same key, signed by the
/// intermediate with its notAfter passed), a revoked one (`openssl ca
/// -gencrl` with the intermediate's key) and one under a stale CRL are
/// refused, each with its reason and no member file. Shown failing: with
/// the chain check (`TrustStore::verify`) left out, the other
/// manufacturer's certificate was challenged; with the leaf's validity
/// check left out, the expired one was.
#[test]
fn an_ek_certificate_must_chain_to_the_manufacturer() {
    let tmp = TempDir::new("enroll-chain");
    let (ca, state, tpm, request) = certified_tpm(&tmp);
    assert!(request.contains("-----BEGIN EK CERTIFICATE-----"));
    let roots = ca.roots_pem.to_str().unwrap().to_string();
    let intermediates = ca.intermediates_pem.to_str().unwrap().to_string();
    let chain = ["--ek-roots", &roots, "--ek-intermediates", &intermediates];

    ok(challenge(&tmp, "genuine", &request, &chain), "challenge");
    let (answer, verified) = answer_and_verify(&tmp, "genuine", &tpm, &chain);
    ok(answer, "respond");
    let said = String::from_utf8_lossy(&verified.stderr).into_owned();
    ok(verified, "verify");
    assert!(said.contains("chains to a configured root"), "{said}");
    let certificate = state.join("ek-p256.der");
    let as_file = [
        &chain[..],
        &["--ek-certificate", certificate.to_str().unwrap()],
    ]
    .concat();
    ok(
        challenge(&tmp, "as-file", &request, &as_file),
        "challenge with the file",
    );

    let refused = |label: &str, request: &str, trust: &[&str], says: &str| {
        let run = challenge(&tmp, label, request, trust);
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(!run.status.success(), "{label}: challenged\n{stderr}");
        assert!(stderr.contains(says), "{label}: {stderr}");
        assert!(!tmp.join(&format!("{label}.challenge")).exists(), "{label}");
    };
    let fresh = Swtpm::start(&tmp.subdir("fresh"));
    let uncertified = ok(
        sceau(&["enroll", "request", "--tcti", &fresh.tcti()]),
        "fresh request",
    );
    refused(
        "none",
        &uncertified,
        &chain,
        "the request has no EK certificate",
    );
    let others = [
        &chain[..],
        &["--ek-certificate", certificate.to_str().unwrap()],
    ]
    .concat();
    refused(
        "another-ek",
        &uncertified,
        &others,
        "does not contain this EK's public key",
    );
    let stranger = EkCa::create(&tmp.subdir("other-ca")).expect("another manufacturer");
    let stranger_roots = stranger.roots_pem.to_str().unwrap().to_string();
    refused(
        "other-manufacturer",
        &request,
        &[
            "--ek-roots",
            &stranger_roots,
            "--ek-intermediates",
            &intermediates,
        ],
        "does not chain to a configured manufacturer root",
    );

    // The fresh TPM's own EK in an expired certificate from the genuine
    // intermediate, given as a file (its request carries none).
    let fresh_tools = Tpm2Tools::new(&fresh, &tmp.subdir("fresh-tools"));
    fresh_tools.run(
        "tpm2_createek",
        &["-G", "ecc", "-c", "ek.ctx", "-u", "ek.der", "-f", "der"],
    );
    let expired = ca.expired_certificate(&fresh_tools.path("ek.der"), &tmp.subdir("expired"));
    refused(
        "expired",
        &uncertified,
        &[&chain[..], &["--ek-certificate", expired.to_str().unwrap()]].concat(),
        "is outside its validity period",
    );

    let revoked = ca.crl(&tmp.subdir("crl-revoked"), Some(&certificate), None);
    let with_crl = [&chain[..], &["--crl", revoked.to_str().unwrap()]].concat();
    refused("revoked", &request, &with_crl, "is revoked");
    let empty = ca.crl(&tmp.subdir("crl-stale"), None, Some("20200101000000Z"));
    let stale = [&chain[..], &["--crl", empty.to_str().unwrap()]].concat();
    refused("stale", &request, &stale, "past its nextUpdate");

    let neither = challenge(&tmp, "neither", &request, &[]);
    assert_eq!(neither.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&neither.stderr).contains("--accept-any-ek"));
}

/// Trust material that cannot be used stops `challenge` with one line that
/// names the file and what is wrong, before any challenge is written: a
/// roots path that does not exist, a roots file that holds no certificate,
/// and a CRL that does not parse.
#[test]
fn unusable_trust_material_is_refused_in_one_line() {
    let tmp = TempDir::new("enroll-bad-trust");
    let (ca, _, _tpm, request) = certified_tpm(&tmp);
    let roots = ca.roots_pem.to_str().unwrap().to_string();
    let not_pem = tmp.join("not-a-bundle.pem");
    std::fs::write(&not_pem, "this is not a certificate\n").unwrap();
    let not_crl = tmp.join("not-a-crl.pem");
    std::fs::write(
        &not_crl,
        "-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n",
    )
    .unwrap();
    let missing = tmp.join("no-such-roots");
    for (label, trust, says) in [
        (
            "missing-roots",
            vec!["--ek-roots", missing.to_str().unwrap()],
            "no-such-roots",
        ),
        (
            "not-pem",
            vec!["--ek-roots", not_pem.to_str().unwrap()],
            "not-a-bundle.pem",
        ),
        (
            "not-a-crl",
            vec!["--ek-roots", &roots, "--crl", not_crl.to_str().unwrap()],
            "not-a-crl.pem",
        ),
    ] {
        let run = challenge(&tmp, label, &request, &trust);
        let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
        assert!(!run.status.success(), "{label}: challenged");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{label}: {stderr}");
        assert!(stderr.contains(says), "{label}: {stderr}");
        assert!(!tmp.join(&format!("{label}.challenge")).exists(), "{label}");
    }
}

/// The EK's public point, as swtpm_localca takes it (hex x and y).
fn ek_coordinates(tools: &Tpm2Tools) -> (String, String) {
    tools.run(
        "tpm2_createek",
        &["-G", "ecc", "-c", "ek.ctx", "-u", "ek.pub", "-f", "tpmt"],
    );
    let public = std::fs::read(tools.path("ek.pub")).unwrap();
    // TPMT_PUBLIC of the TCG ECC template: 32-byte authPolicy, then x and y.
    let x_at = public.len() - 2 * 34 + 2;
    let y_at = public.len() - 32;
    (hex(&public[x_at..x_at + 32]), hex(&public[y_at..]))
}

fn issue_ek_certificate(tmp: &TempDir, (x, y): &(String, String)) -> Vec<u8> {
    let dir = tmp.subdir("ca");
    let output = Command::new("swtpm_localca")
        .args([
            "--type",
            "ek",
            "--ek",
            &format!("x={x},y={y},id=secp256r1"),
            "--dir",
            path(&dir),
            "--tpm2",
        ])
        .args(sceau_testkit::ek_ca::TPM_DESCRIPTION)
        .output()
        .expect("swtpm_localca");
    assert!(
        output.status.success(),
        "swtpm_localca: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    std::fs::read(dir.join("ek.cert")).expect("swtpm_localca writes ek.cert")
}

fn store_ek_certificate(tools: &Tpm2Tools, der: &[u8]) {
    std::fs::write(tools.path("ek.der"), der).unwrap();
    let size = der.len().to_string();
    tools.run(
        "tpm2_nvdefine",
        &[
            "0x01c0000a",
            "-C",
            "p",
            "-s",
            &size,
            "-a",
            "ppwrite|ppread|ownerread|authread|no_da|platformcreate",
        ],
    );
    tools.run("tpm2_nvwrite", &["0x01c0000a", "-C", "p", "-i", "ek.der"]);
}

/// `enrollment-keygen` writes the enrollment identity as an age file (to a
/// passphrase by default, asked before the key exists), as
/// `recovery-keygen` does, and `enroll verify --enrollment-identity` opens it
/// with the passphrase (through `--passphrase-fd`) and endorses; a wrong
/// passphrase writes no member file. Plaintext only with
/// `--unencrypted-private-key`, which verify still opens, with a warning.
/// Shown failing before `--protect`: keygen wrote the identity in plaintext
/// (and refused `--passphrase-fd` as a usage error).
#[test]
fn the_enrollment_identity_is_written_encrypted() {
    let tmp = TempDir::new("enroll-protected");
    let tpm = Swtpm::start(&tmp.subdir("tpm"));
    let passphrase = tmp.join("passphrase");
    std::fs::write(&passphrase, "enrolment custodian phrase\n").unwrap();
    let identity = tmp.join("enrollment.identity");
    let public = tmp.join("enrollment.pub");
    ok(
        sceau_recover_reading(
            &[
                "enrollment-keygen",
                "--enrollment-identity",
                path(&identity),
                "--enrollment-public",
                path(&public),
                "--passphrase-fd",
                "0",
            ],
            &passphrase,
        ),
        "enrollment-keygen",
    );
    let file = std::fs::read_to_string(&identity).unwrap();
    assert!(
        file.starts_with("-----BEGIN AGE ENCRYPTED FILE-----") && !file.contains("SCEAU"),
        "{file}"
    );
    enrolled(&tmp, &tpm);
    let verify_endorsed = |label: &str, identity: &Path, passphrase: &Path| {
        sceau_recover_reading(
            &[
                "enroll",
                "verify",
                "--request",
                path(&tmp.join("node.request")),
                "--expected",
                path(&tmp.join("node.expected")),
                "--response",
                path(&tmp.join("node.response")),
                "--member-out",
                path(&tmp.join(&format!("{label}.pub"))),
                "--enrollment-identity",
                path(identity),
                "--passphrase-fd",
                "0",
                "--accept-any-ek",
            ],
            passphrase,
        )
    };
    let wrong = tmp.join("wrong");
    std::fs::write(&wrong, "not the phrase\n").unwrap();
    let refused = verify_endorsed("wrong", &identity, &wrong);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("wrong passphrase"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    assert!(!tmp.join("wrong.pub").exists());
    ok(
        verify_endorsed("endorsed", &identity, &passphrase),
        "verify with the encrypted identity",
    );
    let member = std::fs::read_to_string(tmp.join("endorsed.pub")).unwrap();
    assert!(member.contains("SCEAU MEMBER ENDORSEMENT"), "{member}");

    // Plaintext only when asked; it still opens, with a warning.
    let plain = tmp.join("plain.identity");
    ok(
        sceau_recover(&[
            "enrollment-keygen",
            "--enrollment-identity",
            path(&plain),
            "--enrollment-public",
            path(&tmp.join("plain.pub")),
            "--unencrypted-private-key",
        ]),
        "enrollment-keygen --unencrypted-private-key",
    );
    let opened = verify_endorsed("plain-endorsed", &plain, &passphrase);
    let stderr = String::from_utf8_lossy(&opened.stderr);
    assert!(opened.status.success(), "{stderr}");
    assert!(
        stderr.contains("holds the enrollment private key unencrypted"),
        "{stderr}"
    );
}
