//! Boot-state binding on a real swtpm: DEKs sealed with `--policy-key` open
//! only while the PCRs match a policy the key signed, whoever signed it
//! (`sceau-recover policy sign`, or Debian's own `systemd-measure sign`),
//! and never through a password session.
//!
//! swtpm serves one client at a time, so the PCRs are extended with
//! tpm2-tools while no sceau runs, as the firmware and boot loader would
//! before the daemon starts.

use sceau_format::key_id::hex;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use sceau::events::Kind;
use sha2::{Digest as _, Sha256};
use tonic::Code;

use crate::audit_events::has_event;
use crate::harness::envelope::Envelope;
use crate::harness::process::{Finished, run_with_timeout};
use crate::harness::rpc::{self, assert_clean_message};
use crate::harness::sceau::{BIN, recover_bin, serve_args};
use crate::harness::tpm_proxy::Profile;
use crate::harness::{ProxiedFixture, Sceau, Swtpm, TempDir, Tpm2Tools, random_bytes};
use sceau_format::pcr_policy::{PcrSelection, PcrValues, SignedPolicy, write_signed_policies};
use sceau_format::policy_key::PolicySigner;
use sceau_format::revocation::Serial;

const TOOL_TIMEOUT: Duration = Duration::from_secs(60);

/// A swtpm whose PCRs the test extends, and the files of one policy key.
struct Rig {
    tmp: TempDir,
    tpm: Swtpm,
    tools: Tpm2Tools,
    key: PathBuf,
    public: PathBuf,
    policies: PathBuf,
    /// The age identity the policy key is encrypted to (`age-keygen`).
    age_identity: PathBuf,
    /// The next revocation serial `sign_state_at` gives a boot state.
    next_serial: std::cell::Cell<u16>,
}

impl Rig {
    fn new(label: &str) -> Self {
        let tmp = TempDir::new(label);
        let tpm = Swtpm::start(&tmp.subdir("tpm"));
        let tools = Tpm2Tools::new(&tpm, &tmp.subdir("tools"));
        let key = tmp.join("policy.key");
        let public = tmp.join("policy.pub");
        let policies = tmp.subdir("policies");
        let age_identity = tmp.join("operator.agekey");
        let recipient = run_ok(
            tmp.path(),
            Path::new("age-keygen"),
            &["-o", age_identity.to_str().unwrap()],
        );
        let recipient = recipient
            .stderr
            .trim()
            .strip_prefix("Public key: ")
            .unwrap_or_else(|| panic!("age-keygen: {}", recipient.stderr))
            .to_string();
        let rig = Self {
            tmp,
            tpm,
            tools,
            key,
            public,
            policies,
            age_identity,
            next_serial: std::cell::Cell::new(1),
        };
        // The private key at rest is an age file for the operator's key;
        // `policy sign` opens it with --age-identity.
        rig.recover(&[
            "policy",
            "keygen",
            "--policy-private",
            rig.key.to_str().unwrap(),
            "--policy-key",
            rig.public.to_str().unwrap(),
            "--protect",
            &format!("age:{recipient}"),
        ]);
        assert!(
            std::fs::read_to_string(&rig.key)
                .unwrap()
                .starts_with("-----BEGIN AGE ENCRYPTED FILE-----"),
            "the policy signing key was written unencrypted"
        );
        rig
    }

    /// A rig whose PCR 7 holds a measurement, signed as NAME.json.
    fn in_signed_state(label: &str, name: &str) -> (Self, PathBuf) {
        let rig = Self::new(label);
        rig.extend(7, &sha256(b"measured"));
        let policy = rig.sign_current("7", name);
        (rig, policy)
    }

    fn extend(&self, pcr: u8, digest: &[u8]) {
        self.tools.run(
            "tpm2_pcrextend",
            &[&format!("{pcr}:sha256={}", hex(digest))],
        );
    }

    /// `sceau pcrs --pcrs LIST`, as an operator runs it on the node.
    fn read_pcrs(&self, list: &str) -> String {
        self.read_pcrs_at(&self.tpm.tcti(), list)
    }

    fn read_pcrs_at(&self, tcti: &str, list: &str) -> String {
        let args = ["pcrs", "--tcti", tcti, "--pcrs", list];
        run_ok(self.tmp.path(), Path::new(BIN), &args).stdout
    }

    /// `sceau pcrs`, then `sceau-recover policy sign` with the next
    /// revocation serial, into the policies directory as NAME.json.
    fn sign_current(&self, list: &str, name: &str) -> PathBuf {
        self.sign_state_at(&self.tpm.tcti(), list, name)
    }

    /// The same for the TPM at `tcti` (another cluster member).
    fn sign_state_at(&self, tcti: &str, list: &str, name: &str) -> PathBuf {
        let values = self.tmp.join(&format!("{name}.pcrs"));
        std::fs::write(&values, self.read_pcrs_at(tcti, list)).unwrap();
        let out = self.policies.join(format!("{name}.json"));
        let serial = self.next_serial.get();
        self.next_serial.set(serial + 1);
        self.recover(&[
            "policy",
            "sign",
            "--policy-private",
            self.key.to_str().unwrap(),
            "--pcrs",
            list,
            "--values",
            values.to_str().unwrap(),
            "--serial",
            &serial.to_string(),
            "--policy-out",
            out.to_str().unwrap(),
            "--age-identity",
            self.age_identity.to_str().unwrap(),
        ]);
        out
    }

    /// The policy signing key, decrypted by the real `age` as its holder
    /// would.
    fn signer(&self) -> PolicySigner {
        let pem = run_ok(
            self.tmp.path(),
            Path::new("age"),
            &[
                "-d",
                "-i",
                self.age_identity.to_str().unwrap(),
                self.key.to_str().unwrap(),
            ],
        )
        .stdout;
        PolicySigner::from_pem(&pem).unwrap()
    }

    fn recover(&self, args: &[&str]) -> String {
        run_ok(self.tmp.path(), &recover_bin(), args).stderr
    }

    fn bound_args(&self) -> Vec<String> {
        vec![
            "--policy-key".into(),
            self.public.display().to_string(),
            "--policy".into(),
            self.policies.display().to_string(),
        ]
    }

    fn start(&self, extra: &[String]) -> Sceau {
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        Sceau::start(&self.tmp, &self.tpm, &extra)
    }

    /// sceau started with `extra`, and a client on it; [`stop`] ends both.
    async fn serving(&self, extra: &[String]) -> (Sceau, rpc::Client) {
        let sceau = self.start(extra);
        let client = sceau.client().await;
        (sceau, client)
    }

    /// Starts sceau with `extra`, expects it to refuse, returns its log.
    fn start_refused(&self, extra: &[&str]) -> String {
        let socket = self.tmp.join("refused.sock");
        let args = serve_args(&socket, Some(&self.tpm.tcti()), extra);
        let mut sceau = Sceau::spawn(&self.tmp, &socket, args, &[]);
        let status = sceau.wait_exit(TOOL_TIMEOUT);
        let log = sceau.stderr_text();
        assert!(
            status.is_some_and(|s| !s.success()),
            "sceau must refuse to start: {log}"
        );
        log
    }
}

/// Closes the client, then stops sceau, which must exit cleanly; returns
/// its log.
fn stop(mut sceau: Sceau, client: rpc::Client) -> String {
    drop(client);
    assert!(sceau.terminate().success());
    sceau.stderr_text()
}

/// Runs `program` in `dir` to completion; it must succeed.
fn run_ok(dir: &Path, program: &Path, args: &[&str]) -> Finished {
    let finished = run_with_timeout(
        Command::new(program).current_dir(dir).args(args),
        dir,
        TOOL_TIMEOUT,
    );
    assert!(
        finished.status.success(),
        "{program:?} {args:?}: {}",
        finished.all_output()
    );
    finished
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// The whole life of a bound DEK: it opens in the signed state; after the
/// boot state changes (PCR 7 extended), sceau still starts and seals, but
/// Decrypt is refused with `policy-mismatch` and Status is not ok; a policy
/// signed for the new state, added next to the old one, opens every old
/// envelope without re-encrypting anything.
///
/// Without the policy check (the sealed object's authPolicy left empty),
/// the Decrypt after the PCR change succeeds: sealing with
/// `sealed_template(None)` in `Tpm::seal` makes this test fail at "a changed
/// boot state must not open" (tried).
#[tokio::test(flavor = "multi_thread")]
async fn a_dek_opens_only_in_a_signed_boot_state() {
    let rig = Rig::new("boot-binding-life");
    rig.extend(7, &sha256(b"secure boot: on, db of this machine"));
    rig.extend(11, &sha256(b"a unified kernel image"));
    rig.sign_current("7,11", "first");

    let mut sceau = rig.start(&rig.bound_args());
    assert!(
        sceau.stderr_text().contains("boot policy: the PCRs match")
            && has_event(&sceau.stderr_text(), Kind::PolicyLoaded),
        "{}",
        sceau.stderr_text()
    );
    let mut client = sceau.client().await;
    let status = rpc::status(&mut client).await;
    assert_eq!(status.healthz, "ok");
    let key_id = status.key_id;
    let mut sealed = Vec::new();
    for len in [1, 32, 128] {
        let dek = random_bytes(len);
        let envelope = rpc::seal(&mut client, &key_id, &dek).await;
        rpc::open(&mut client, &key_id, &envelope, &dek).await;
        sealed.push((envelope, dek));
    }
    drop(client);
    assert!(sceau.terminate().success());

    // Another boot state: PCR 7 differs. The log line names it, with the
    // value the policy was signed at and the one it reads now, and not
    // PCR 11, which did not move (a file without its values, as systemd
    // writes, logs only which PCRs it covers: this check then fails).
    let pcr7 = |rig: &Rig| {
        hex(PcrValues::parse(&rig.read_pcrs("7"))
            .unwrap()
            .get(7)
            .unwrap())
    };
    let signed7 = pcr7(&rig);
    rig.extend(7, &sha256(b"secure boot: off"));
    let now7 = pcr7(&rig);
    let mut sceau = rig.start(&rig.bound_args());
    let log = sceau.stderr_text();
    let line = log
        .lines()
        .find(|l| l.contains("no signed policy matches the PCRs"))
        .unwrap_or_else(|| panic!("no mismatch line: {log}"));
    assert!(
        line.contains(&format!(
            "first.json: PCR 7 expected {signed7} actual {now7}"
        )) && !line.contains("PCR 11"),
        "{line}"
    );
    assert!(has_event(&log, Kind::PolicyMismatch), "{log}");
    let mut client = sceau.client().await;
    assert_eq!(rpc::status(&mut client).await.healthz, "policy-mismatch");
    for (envelope, _) in &sealed {
        let refused = rpc::decrypt(&mut client, envelope, &key_id)
            .await
            .expect_err("a changed boot state must not open");
        assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
        assert_eq!(refused.message(), "policy-mismatch");
        assert_clean_message(&refused, "policy mismatch");
    }
    // Encrypt needs no policy session: the apiserver can still write.
    let late_dek = random_bytes(32);
    let late = rpc::seal(&mut client, &key_id, &late_dek).await;
    drop(client);
    assert!(sceau.terminate().success());

    // The operator signs the new state; the old policy stays.
    rig.sign_current("7,11", "second");
    let mut sceau = rig.start(&rig.bound_args());
    let mut client = sceau.client().await;
    assert_eq!(rpc::status(&mut client).await.healthz, "ok");
    for (envelope, dek) in &sealed {
        rpc::open(&mut client, &key_id, envelope, dek).await;
    }
    rpc::open(&mut client, &key_id, &late, &late_dek).await;
    drop(client);
    assert!(sceau.terminate().success());
}

/// The sealed object has no password path: tpm2_load + tpm2_unseal (a
/// password session) opens an envelope made without `--policy-key` (the
/// control) and fails on one made with it, in the very state it was
/// signed for. Sealed without the authPolicy (`sealed_template(None)` in
/// `Tpm::seal`), the bound envelope opens and this test fails (tried).
#[tokio::test(flavor = "multi_thread")]
async fn a_password_session_cannot_unseal_a_bound_envelope() {
    let (rig, _) = Rig::in_signed_state("boot-binding-password", "now");

    let mut plain = rig.start(&[]);
    let mut client = plain.client().await;
    let key_id = rpc::status(&mut client).await.key_id;
    let plain_dek = b"opened with a password session!".to_vec();
    let plain_envelope = rpc::seal(&mut client, &key_id, &plain_dek).await;
    drop(client);
    assert!(plain.terminate().success());

    let mut bound = rig.start(&rig.bound_args());
    let mut client = bound.client().await;
    // A new key_id, so that the apiserver makes a new (bound) DEK seed; the
    // old one still opens what was sealed before.
    let bound_key_id = rpc::status(&mut client).await.key_id;
    assert_ne!(bound_key_id, key_id);
    rpc::open(&mut client, &key_id, &plain_envelope, &plain_dek).await;
    let bound_dek = random_bytes(32);
    let bound_envelope = rpc::seal(&mut client, &bound_key_id, &bound_dek).await;
    rpc::open(&mut client, &bound_key_id, &bound_envelope, &bound_dek).await;
    drop(client);
    assert!(bound.terminate().success());

    rig.tools.flush_all();
    rig.tools.create_srk_primary("prim.ctx");
    let parts = Envelope::parse(&plain_envelope);
    assert_eq!(
        rig.tools.unseal("prim.ctx", &parts.public, &parts.private),
        plain_dek
    );
    let parts = Envelope::parse(&bound_envelope);
    rig.tools
        .load("prim.ctx", &parts.public, &parts.private, "bound.ctx");
    let refused = rig
        .tools
        .try_run("tpm2_unseal", &["-c", "bound.ctx", "-o", "unsealed.bin"]);
    assert!(
        !refused.status.success(),
        "tpm2_unseal with a password session opened a bound envelope"
    );
    // TPM_RC_AUTH_UNAVAILABLE: userWithAuth is clear.
    assert!(
        refused.all_output().contains("(0x12F)"),
        "{}",
        refused.all_output()
    );
}

/// What must stop the start, each with a line naming the file: a policy
/// over PCR 16 or 23, one over PCR 11 alone without
/// `--accept-policies-another-os-can-meet`, a policy of another key, a
/// signature that the TPM does not verify, a TPM without a SHA-256 bank;
/// and flags that do not go together. (A policy over a PCR no one extended
/// is skipped instead: `a_staged_policy_over_an_unextended_pcr_is_skipped`;
/// `policy sign` refuses it, checked here.)
#[test]
fn bad_policies_stop_the_start() {
    let mut rig = Rig::new("boot-binding-refusals");
    rig.extend(7, &sha256(b"measured"));
    let own = rig.signer();
    let other = PolicySigner::generate();
    let values = PcrValues::parse(&rig.read_pcrs("7,11")).unwrap();
    let write = |dir: &str, signer: &PolicySigner, pcrs: &str, fingerprint_of: &PolicySigner| {
        let pcrs = PcrSelection::parse(pcrs).unwrap();
        let mut signed = SignedPolicy::sign(signer, pcrs, &values, Serial::new(1)).unwrap();
        signed.key_fingerprint = Some(fingerprint_of.public().fingerprint());
        let file = rig.tmp.subdir(dir).join("policy.json");
        std::fs::write(&file, write_signed_policies(&[signed])).unwrap();
        file
    };
    let public = rig.public.to_str().unwrap();

    // Policies another OS booted on the machine could meet. A resettable
    // PCR (a file as systemd's tools write it: only the digest): refused
    // even with the flag. PCR 11 alone: refused without the flag. Shown
    // failing: without the checks in `boot_policy::load`, both started.
    let systemd_style = |dir: &str, pcrs: &str| {
        let pcrs = PcrSelection::parse(pcrs).unwrap();
        let policy = [0x5A; 32];
        let signed = SignedPolicy {
            pcrs,
            key_fingerprint: Some(own.public().fingerprint()),
            policy,
            signature: own.sign(&policy),
            values: None,
            serial: None,
        };
        let file = rig.tmp.subdir(dir).join("policy.json");
        std::fs::write(&file, write_signed_policies(&[signed])).unwrap();
        file
    };
    let resettable = systemd_style("resettable", "7,23");
    let log = rig.start_refused(&[
        "--policy-key",
        public,
        "--policy",
        resettable.to_str().unwrap(),
        "--accept-policies-another-os-can-meet",
    ]);
    assert!(log.contains(resettable.to_str().unwrap()), "{log}");
    assert!(log.contains("PCR 23 can be reset"), "{log}");
    let eleven = systemd_style("eleven", "11");
    let log = rig.start_refused(&["--policy-key", public, "--policy", eleven.to_str().unwrap()]);
    assert!(log.contains(eleven.to_str().unwrap()), "{log}");
    assert!(log.contains("no PCR the firmware extends"), "{log}");

    let foreign = write("foreign", &other, "7", &other);
    let log = rig.start_refused(&[
        "--policy-key",
        public,
        "--policy",
        foreign.to_str().unwrap(),
    ]);
    assert!(log.contains(foreign.to_str().unwrap()), "{log}");
    assert!(log.contains("signed by another key"), "{log}");

    // The fingerprint claims our key; the signature is the other key's.
    let forged = write("forged", &other, "7", &own);
    let log = rig.start_refused(&["--policy-key", public, "--policy", forged.to_str().unwrap()]);
    assert!(log.contains(forged.to_str().unwrap()), "{log}");
    assert!(log.contains("does not verify"), "{log}");

    let log = rig.start_refused(&["--policy-key", public]);
    assert!(
        log.contains("--policy-key and --policy go together"),
        "{log}"
    );
    // sceau's own tools refuse the unextended PCR before any file exists:
    // `sceau pcrs` names it, `policy sign` will not sign it (nor PCR 11
    // alone, nor PCR 23).
    let read = run_with_timeout(
        Command::new(BIN).args(["pcrs", "--tcti", &rig.tpm.tcti(), "--pcrs", "7,11"]),
        rig.tmp.path(),
        TOOL_TIMEOUT,
    );
    assert!(read.status.success(), "{}", read.all_output());
    assert!(
        read.stderr.contains("PCR 11 reads all zeros"),
        "{}",
        read.stderr
    );
    let values_file = rig.tmp.join("zero.pcrs");
    std::fs::write(&values_file, &read.stdout).unwrap();
    for (pcrs, why) in [
        ("7,11", "PCR 11 reads all zeros"),
        ("11", "no PCR the firmware extends"),
        ("7,23", "PCR 23 can be reset"),
    ] {
        let refused = run_with_timeout(
            Command::new(recover_bin()).args([
                "policy",
                "sign",
                "--policy-private",
                rig.key.to_str().unwrap(),
                "--pcrs",
                pcrs,
                "--values",
                values_file.to_str().unwrap(),
                "--serial",
                "9",
                "--policy-out",
                rig.tmp.join("never.json").to_str().unwrap(),
                "--age-identity",
                rig.age_identity.to_str().unwrap(),
            ]),
            rig.tmp.path(),
            TOOL_TIMEOUT,
        );
        assert!(!refused.status.success());
        assert!(refused.stderr.contains(why), "{}", refused.stderr);
    }
    assert!(!rig.tmp.join("never.json").exists());

    let own_policy = write("own", &own, "7", &own);
    let own_args = [
        "--policy-key",
        public,
        "--policy",
        own_policy.to_str().unwrap(),
    ];

    // A TPM whose SHA-256 bank is not allocated (PCR_Read answers an empty
    // selection, which tss-esapi's own reader loops on forever): refused.
    rig.tools.run("tpm2_pcrallocate", &["sha1:all+sha256:none"]);
    rig.tpm.restart();
    let log = rig.start_refused(&own_args);
    assert!(log.contains("sha256 bank is not allocated"), "{log}");
    assert!(log.contains("tpm2_pcrallocate"), "{log}");
}

/// Debian's own systemd-measure signs the PCR 11 values of a unified kernel
/// image's sections (an RSA-2048 key from OpenSSL); PCR 11 is extended as
/// systemd-stub and systemd's boot phases extend it; sceau accepts the
/// file as systemd wrote it, the TPM verifies the RSA signature, and a DEK
/// opens in the `enter-initrd` phase and again after `leave-initrd`.
#[tokio::test(flavor = "multi_thread")]
async fn a_policy_signed_by_systemd_measure_opens() {
    let measure = Path::new("/usr/lib/systemd/systemd-measure");
    assert!(
        measure.exists(),
        "Debian 12's systemd ships {}",
        measure.display()
    );
    let rig = Rig::new("boot-binding-systemd");
    let dir = rig.tmp.path();
    let run = |program: &str, args: &[&str]| run_ok(dir, Path::new(program), args).stdout;
    run(
        "openssl",
        &[
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-out",
            "rsa.key",
        ],
    );
    run(
        "openssl",
        &["pkey", "-in", "rsa.key", "-pubout", "-out", "rsa.pub"],
    );
    let sections: [(&str, &[u8]); 3] = [
        (".linux", b"a kernel image, for the test"),
        (".osrel", b"ID=debian\nVERSION_ID=12\n"),
        (".cmdline", b"console=ttyS0 root=/dev/vda1"),
    ];
    for (name, content) in &sections {
        std::fs::write(dir.join(&name[1..]), content).unwrap();
    }
    let policy = rig.policies.join("measure.json");
    let json = run(
        measure.to_str().unwrap(),
        &[
            "sign",
            "--linux=linux",
            "--osrel=osrel",
            "--cmdline=cmdline",
            "--bank=sha256",
            "--private-key=rsa.key",
            "--public-key=rsa.pub",
            &format!("--tpm2-device={}", rig.tpm.tcti()),
        ],
    );
    std::fs::write(&policy, json).unwrap();

    // systemd-stub: each section's name (with its NUL) then its content;
    // then systemd's phase strings (without NUL).
    for (name, content) in &sections {
        rig.extend(11, &sha256(format!("{name}\0").as_bytes()));
        rig.extend(11, &sha256(content));
    }
    rig.extend(11, &sha256(b"enter-initrd"));

    // PCR 11 alone is what systemd-measure signs: any OS booted without
    // systemd-stub could extend it so, which the flag accepts by name.
    let args = vec![
        "--policy-key".to_string(),
        dir.join("rsa.pub").display().to_string(),
        "--policy".to_string(),
        policy.display().to_string(),
        "--accept-policies-another-os-can-meet".to_string(),
    ];
    let mut sceau = rig.start(&args);
    let mut client = sceau.client().await;
    let status = rpc::status(&mut client).await;
    assert_eq!(status.healthz, "ok", "{}", sceau.stderr_text());
    let dek = random_bytes(32);
    let envelope = rpc::seal(&mut client, &status.key_id, &dek).await;
    rpc::open(&mut client, &status.key_id, &envelope, &dek).await;
    drop(client);
    assert!(sceau.terminate().success());
    assert!(
        sceau.stderr_text().contains("measure.json (policy 1 of 4)"),
        "{}",
        sceau.stderr_text()
    );

    // The next phase: systemd extends PCR 11 when it leaves the initrd; the
    // file's second policy matches.
    rig.extend(11, &sha256(b"leave-initrd"));
    let mut sceau = rig.start(&args);
    let mut client = sceau.client().await;
    rpc::open(&mut client, &status.key_id, &envelope, &dek).await;
    drop(client);
    assert!(sceau.terminate().success());
    assert!(
        sceau.stderr_text().contains("measure.json (policy 2 of 4)"),
        "{}",
        sceau.stderr_text()
    );
}

/// TPM commands through the proxy, on the discrete profile: with a boot
/// policy, an Encrypt is still one Create, and a Decrypt two commands more
/// than without one (PolicyPCR and PolicyAuthorize; the policy session and
/// the tickets are made at start and reused), three with a revocable
/// policy (PolicySecret).
#[tokio::test(flavor = "multi_thread")]
async fn a_bound_decrypt_costs_two_commands_more() {
    const FAST: f64 = 0.02;
    let mut rig = ProxiedFixture::start("boot-binding-counts", Profile::discrete_tpm(), &[]);
    rig.proxy.set_scale(FAST);
    let (mut client, key_id) = rig.client().await;
    let dek = random_bytes(32);
    let plain = rpc::seal(&mut client, &key_id, &dek).await;
    rig.proxy.reset_counts();
    rpc::open(&mut client, &key_id, &plain, &dek).await;
    let unbound = (rig.proxy.counts(), rig.proxy.modelled_delay());
    drop(client);
    assert!(rig.sceau.terminate().success());

    // The boot state and its policy, made with the TPM to themselves.
    let tools = Tpm2Tools::new(&rig.tpm, &rig.tmp.subdir("tools"));
    tools.run(
        "tpm2_pcrextend",
        &[&format!("7:sha256={}", hex(&sha256(b"measured")))],
    );
    let signer = PolicySigner::generate();
    let public = rig.tmp.join("policy.pub");
    std::fs::write(&public, signer.public().to_pem()).unwrap();
    let values = run_with_timeout(
        Command::new(BIN).args(["pcrs", "--tcti", &rig.tpm.tcti(), "--pcrs", "7"]),
        rig.tmp.path(),
        TOOL_TIMEOUT,
    );
    let pcrs = PcrSelection::parse("7").unwrap();
    let values = PcrValues::parse(&values.stdout).unwrap();
    // Without a revocation serial first (systemd's kind of policy), then
    // with one, which costs PolicySecret.
    let revocable = SignedPolicy::sign(&signer, pcrs, &values, Serial::new(3)).unwrap();
    let policy = sceau_format::pcr_policy::policy_pcr_digest(pcrs, &values).unwrap();
    let signed = SignedPolicy {
        serial: None,
        policy,
        signature: signer.sign(&policy),
        ..revocable.clone()
    };
    let file = rig.tmp.join("policy.json");
    let serve_with = |rig: &mut ProxiedFixture, policy: &SignedPolicy| {
        std::fs::write(&file, write_signed_policies(std::slice::from_ref(policy))).unwrap();
        rig.restart_sceau(&[
            "--policy-key",
            public.to_str().unwrap(),
            "--policy",
            file.to_str().unwrap(),
        ]);
    };
    serve_with(&mut rig, &signed);

    let (mut client, bound_key_id) = rig.client().await;
    rig.proxy.reset_counts();
    let bound = rpc::seal(&mut client, &bound_key_id, &dek).await;
    let encrypt = rig.proxy.counts();
    rig.proxy.reset_counts();
    rpc::open(&mut client, &bound_key_id, &bound, &dek).await;
    let decrypt = (rig.proxy.counts(), rig.proxy.modelled_delay());
    // An envelope sealed before the key was configured opens as before.
    rig.proxy.reset_counts();
    rpc::open(&mut client, &key_id, &plain, &dek).await;
    let old = rig.proxy.counts();
    for (what, (counts, modelled)) in [("unbound", &unbound), ("bound", &decrypt)] {
        println!(
            "Decrypt, {what}: {} TPM commands {counts:?}, modelled on the discrete profile {:?}",
            counts.values().sum::<u64>(),
            modelled.div_f64(FAST)
        );
    }
    let counted = |pairs: &[(&str, u64)]| -> std::collections::BTreeMap<String, u64> {
        pairs.iter().map(|(c, n)| (c.to_string(), *n)).collect()
    };
    assert_eq!(encrypt, counted(&[("Create", 1)]), "one bound Encrypt");
    assert_eq!(
        decrypt.0,
        counted(&[
            ("FlushContext", 1),
            ("Load", 1),
            ("PolicyAuthorize", 1),
            ("PolicyPCR", 1),
            ("Unseal", 1)
        ]),
        "one bound Decrypt"
    );
    assert_eq!(
        old, unbound.0,
        "an unbound envelope, with the key configured"
    );

    drop(client);
    serve_with(&mut rig, &revocable);
    let (mut client, _) = rig.client().await;
    rig.proxy.reset_counts();
    rpc::open(&mut client, &bound_key_id, &bound, &dek).await;
    let revocable = (rig.proxy.counts(), rig.proxy.modelled_delay());
    println!(
        "Decrypt, revocable: {} TPM commands {:?}, modelled on the discrete profile {:?}",
        revocable.0.values().sum::<u64>(),
        revocable.0,
        revocable.1.div_f64(FAST)
    );
    assert_eq!(
        revocable.0,
        counted(&[
            ("FlushContext", 1),
            ("Load", 1),
            ("PolicyAuthorize", 1),
            ("PolicyPCR", 1),
            ("PolicySecret", 1),
            ("Unseal", 1)
        ]),
        "one bound Decrypt through a revocable policy: one command more"
    );
}

/// Cluster mode: two members whose PCR 7 differ, one policy key, each
/// member's own signed policy (both in one directory on both nodes). A DEK
/// sealed on either opens on both, each in its own signed state; once b's
/// boot state changes, b refuses it and a still opens it; the recovery key
/// opens it with no TPM, whatever the PCRs. Sealed without the authPolicy
/// (`SealedObject::with_policy(dek, None)` in `Membership::seal`), the first
/// Decrypt already fails: the key_id covers the binding (tried).
#[tokio::test(flavor = "multi_thread")]
async fn cluster_members_open_only_in_their_own_signed_state() {
    let rig = Rig::new("boot-binding-cluster");
    let other = rig.tmp.subdir("tpm-b");
    let mut tpm_b = Swtpm::start(&other);
    let tools_b = Tpm2Tools::new(&tpm_b, &rig.tmp.subdir("tools-b"));
    rig.extend(7, &sha256(b"node a: secure boot on"));
    tools_b.run(
        "tpm2_pcrextend",
        &[&format!("7:sha256={}", hex(&sha256(b"node b: another db")))],
    );
    let tool = |program: &Path, args: &[&str]| run_ok(rig.tmp.path(), program, args).stdout;
    let members = rig.tmp.subdir("members");
    let recovery_identity = rig.tmp.join("recovery.identity");
    let recovery_public = rig.tmp.join("recovery.pub");
    tool(
        &recover_bin(),
        &[
            "recovery-keygen",
            "--identity",
            recovery_identity.to_str().unwrap(),
            "--public",
            recovery_public.to_str().unwrap(),
            "--unencrypted-private-key",
        ],
    );
    // Each member's file, and each member's policy: `sceau pcrs` on the
    // node, `policy sign` offline.
    for (name, tcti) in [("a", rig.tpm.tcti()), ("b", tpm_b.tcti())] {
        let file = tool(Path::new(BIN), &["srk-public", "--tcti", &tcti]);
        std::fs::write(members.join(format!("{name}.pub")), file).unwrap();
        rig.sign_state_at(&tcti, "7", name);
    }
    let mut args = rig.bound_args();
    args.extend([
        "--members".to_string(),
        members.display().to_string(),
        "--recovery-key".to_string(),
        recovery_public.display().to_string(),
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let start = |tpm: &Swtpm, label: &str| {
        Sceau::start_on_socket(
            &rig.tmp,
            &rig.tmp.join(&format!("{label}.sock")),
            &tpm.tcti(),
            &args,
        )
    };
    let a = start(&rig.tpm, "a");
    let mut b = start(&tpm_b, "b-first");
    for (sceau, own) in [(&a, "a.json"), (&b, "b.json")] {
        let log = sceau.stderr_text();
        assert!(
            log.contains("every DEK bound to the boot policy key"),
            "{log}"
        );
        assert!(
            log.lines()
                .any(|l| l.contains("boot policy: the PCRs match") && l.contains(own)),
            "{log}"
        );
    }
    let mut client_a = a.client().await;
    let mut client_b = b.client().await;
    let key_id = rpc::status(&mut client_a).await.key_id;
    assert_eq!(rpc::status(&mut client_b).await.key_id, key_id);
    let dek = random_bytes(32);
    let reply = rpc::encrypt(&mut client_a, &dek)
        .await
        .expect("Encrypt on a");
    assert_eq!(reply.key_id, key_id);
    let envelope = reply.ciphertext;
    assert!(
        reply.annotations.is_empty(),
        "two members fit the ciphertext"
    );
    for client in [&mut client_a, &mut client_b] {
        assert_eq!(
            rpc::decrypt(client, &envelope, &key_id)
                .await
                .expect("Decrypt"),
            dek
        );
    }
    let from_b = random_bytes(32);
    let reply = rpc::encrypt(&mut client_b, &from_b)
        .await
        .expect("Encrypt on b");
    assert_eq!(
        rpc::decrypt(&mut client_a, &reply.ciphertext, &key_id)
            .await
            .expect("a opens b's"),
        from_b
    );
    drop(client_b);
    assert!(b.terminate().success());

    // b's boot state changes: b refuses, a still opens.
    tools_b.run(
        "tpm2_pcrextend",
        &[&format!(
            "7:sha256={}",
            hex(&sha256(b"node b: booted from a stick"))
        )],
    );
    let b = start(&tpm_b, "b-changed");
    let mut client_b = b.client().await;
    assert_eq!(rpc::status(&mut client_b).await.healthz, "policy-mismatch");
    let refused = rpc::decrypt(&mut client_b, &envelope, &key_id)
        .await
        .expect_err("b's changed state must not open");
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    assert_eq!(refused.message(), "policy-mismatch");
    assert_eq!(
        rpc::decrypt(&mut client_a, &envelope, &key_id)
            .await
            .expect("a still opens"),
        dek
    );

    // The recovery key needs no TPM and no PCR.
    let file = rig.tmp.join("envelope.bin");
    std::fs::write(&file, &envelope).unwrap();
    let recovered = Command::new(recover_bin())
        .args([
            "recover",
            "--identity",
            recovery_identity.to_str().unwrap(),
            "--members",
            members.to_str().unwrap(),
            "--envelope",
            file.to_str().unwrap(),
        ])
        .output()
        .expect("running sceau-recover recover");
    assert!(
        recovered.status.success(),
        "{}",
        String::from_utf8_lossy(&recovered.stderr)
    );
    assert_eq!(recovered.stdout, dek);
    drop(client_b);
    drop(b);
    tpm_b.kill();
}

/// A bound Decrypt unseals in the policy session, which is salted with the
/// SRK and has encrypt set: a recording proxy between sceau and swtpm sees
/// no 8-byte window of the DEK. With encrypt off on that session
/// (`session::start_salted_policy`), Unseal's answer carries the DEK in the
/// clear and this test fails (tried).
#[tokio::test(flavor = "multi_thread")]
async fn a_bound_unseal_crosses_the_bus_encrypted() {
    use crate::harness::bus_proxy::RecordingProxy;
    const MARKER: &[u8; 32] = b"sceau-bound-bus-marker-012345678";
    let (rig, _) = Rig::in_signed_state("boot-binding-bus", "now");
    let proxy = RecordingProxy::start(rig.tpm.port());
    let args = rig.bound_args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut sceau =
        Sceau::start_on_socket(&rig.tmp, &rig.tmp.join("bus.sock"), &proxy.tcti(), &args);
    let mut client = sceau.client().await;
    let key_id = rpc::status(&mut client).await.key_id;
    let envelope = rpc::seal(&mut client, &key_id, MARKER).await;
    rpc::open(&mut client, &key_id, &envelope, MARKER).await;
    drop(client);
    assert!(sceau.terminate().success());
    proxy.assert_never_carried(MARKER);
}

/// `policy_file`'s policy through tpm2-tools alone, as anyone holding the
/// file and the envelope would: LoadExternal of the policy key,
/// VerifySignature for the ticket, then PolicyPCR, PolicySecret on the
/// serial's NV index and PolicyAuthorize in a policy session, and Unseal.
/// Returns the unsealed bytes, or the failed tool's output.
fn unseal_with_tools(rig: &Rig, policy_file: &Path, envelope: &[u8]) -> Result<Vec<u8>, String> {
    let text = std::fs::read_to_string(policy_file).unwrap();
    let signed = sceau_format::pcr_policy::parse_signed_policies(&text).unwrap()[0].clone();
    let serial = signed.serial.expect("a revocable policy");
    let tools = &rig.tools;
    tools.write("pol.bin", &signed.policy);
    tools.write("sig.der", &signed.signature);
    let parts = Envelope::parse(envelope);
    // The policy key's public area as sceau loads it: its Name, which the
    // sealed object's authPolicy commits to, covers the attributes too.
    let area = rig.signer().public().tpmt_public();
    let size = u16::try_from(area.len()).unwrap().to_be_bytes();
    tools.write("key.pub", &[&size[..], &area].concat());
    let nv = format!("{:#x}", serial.index_handle());
    // swtpm holds three objects: the ticket first, then the SRK and the
    // envelope's object.
    let ticket: [(&str, Vec<&str>); 2] = [
        (
            "tpm2_loadexternal",
            vec![
                "-C", "o", "-u", "key.pub", "-c", "key.ctx", "-n", "key.name",
            ],
        ),
        (
            "tpm2_verifysignature",
            vec![
                "-c",
                "key.ctx",
                "-g",
                "sha256",
                "-m",
                "pol.bin",
                "-f",
                "ecdsa",
                "-s",
                "sig.der",
                "-t",
                "ticket.bin",
            ],
        ),
    ];
    for (tool, args) in &ticket {
        let run = tools.try_run(tool, args);
        assert!(run.status.success(), "{tool}: {}", run.all_output());
    }
    tools.flush_all();
    tools.create_srk_primary("prim.ctx");
    tools.load("prim.ctx", &parts.public, &parts.private, "bound.ctx");
    let steps: [(&str, Vec<&str>); 2] = [
        (
            "tpm2_startauthsession",
            vec!["--policy-session", "-S", "session.ctx"],
        ),
        (
            "tpm2_policypcr",
            vec!["-S", "session.ctx", "-l", "sha256:7"],
        ),
    ];
    let more: [(&str, Vec<&str>); 2] = [
        ("tpm2_policysecret", vec!["-S", "session.ctx", "-c", &nv]),
        (
            "tpm2_policyauthorize",
            vec![
                "-S",
                "session.ctx",
                "-i",
                "pol.bin",
                "-n",
                "key.name",
                "-t",
                "ticket.bin",
            ],
        ),
    ];
    let steps = steps.iter().chain(more.iter());
    let mut result = Ok(());
    for (tool, args) in steps {
        let run = tools.try_run(tool, args);
        if !run.status.success() {
            result = Err(format!("{tool}: {}", run.all_output()));
            break;
        }
    }
    let unsealed = result.and_then(|()| {
        let run = tools.try_run(
            "tpm2_unseal",
            &[
                "-c",
                "bound.ctx",
                "-p",
                "session:session.ctx",
                "-o",
                "unsealed.bin",
            ],
        );
        match run.status.success() {
            true => Ok(std::fs::read(tools.path("unsealed.bin")).unwrap()),
            false => Err(format!("tpm2_unseal: {}", run.all_output())),
        }
    });
    tools.flush_all();
    unsealed
}

/// A revoked boot state never opens again: not through the running sceau,
/// not after a restart with every file as it was, and not with tpm2-tools
/// and the old policy file (the control run of the same tools opens the
/// envelope before the revocation). A policy signed anew for the same
/// state, under another serial, opens the old envelope: nothing is
/// re-encrypted. Shown failing: with `revocation::revoke` returning before
/// its NV_Write, the running sceau still opened the envelope ("a revoked
/// state must not open").
#[tokio::test(flavor = "multi_thread")]
async fn a_revoked_boot_state_never_opens_again() {
    let (rig, old) = Rig::in_signed_state("boot-binding-revoked", "old");
    let kept = rig.tmp.join("kept-old.json");
    std::fs::copy(&old, &kept).unwrap();

    let (sceau, mut client) = rig.serving(&rig.bound_args()).await;
    let key_id = rpc::status(&mut client).await.key_id;
    let dek = random_bytes(32);
    let envelope = rpc::seal(&mut client, &key_id, &dek).await;
    stop(sceau, client);
    assert_eq!(unseal_with_tools(&rig, &kept, &envelope), Ok(dek.clone()));

    // Revoked while sceau serves: its next Decrypt reads the serial again.
    let (sceau, mut client) = rig.serving(&rig.bound_args()).await;
    rpc::open(&mut client, &key_id, &envelope, &dek).await;
    let revoke = |expect: &str| {
        let out = run_ok(
            rig.tmp.path(),
            Path::new(BIN),
            &["revoke-policy", "--tcti", &rig.tpm.tcti(), "--serial", "1"],
        );
        assert!(out.stdout.contains(expect), "{}", out.all_output());
        assert_eq!(
            has_event(&out.stderr, Kind::PolicyRevoked),
            !expect.contains("already"),
            "{}",
            out.all_output()
        );
    };
    revoke("serial 1 revoked");
    let refused = rpc::decrypt(&mut client, &envelope, &key_id)
        .await
        .expect_err("a revoked state must not open");
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    assert_eq!(refused.message(), "policy-mismatch");
    assert_clean_message(&refused, "revoked state");
    let log = stop(sceau, client);
    assert!(log.contains("revoked while sceau served"), "{log}");
    revoke("already revoked");

    // Every file as it was: the revocation lives in the TPM.
    let tools_refusal = unseal_with_tools(&rig, &kept, &envelope).unwrap_err();
    assert!(
        tools_refusal.starts_with("tpm2_policyauthorize"),
        "{tools_refusal}"
    );
    let (sceau, mut client) = rig.serving(&rig.bound_args()).await;
    let log = sceau.stderr_text();
    assert!(log.contains("old.json: its serial 1 is revoked"), "{log}");
    assert_eq!(rpc::status(&mut client).await.healthz, "policy-mismatch");
    stop(sceau, client);

    // The same state signed anew (serial 2) opens the old envelope.
    rig.sign_current("7", "new");
    let (sceau, mut client) = rig.serving(&rig.bound_args()).await;
    rpc::open(&mut client, &key_id, &envelope, &dek).await;
    stop(sceau, client);
}

/// A policy staged for a boot state still to come (over PCR 11, which this
/// boot never extended) is skipped with a warning that names it, and sceau
/// serves with the policy of this boot. Shown failing: before, the start
/// was refused ("PCR 11 reads all zeros").
#[tokio::test(flavor = "multi_thread")]
async fn a_staged_policy_over_an_unextended_pcr_is_skipped() {
    let (rig, _) = Rig::in_signed_state("boot-binding-staged", "now");
    let values = PcrValues::parse(&rig.read_pcrs("7,11")).unwrap();
    let signer = rig.signer();
    let staged = SignedPolicy::sign(
        &signer,
        PcrSelection::parse("7,11").unwrap(),
        &values,
        Serial::new(40),
    )
    .unwrap();
    let file = rig.policies.join("staged.json");
    std::fs::write(&file, write_signed_policies(&[staged])).unwrap();

    let (sceau, mut client) = rig.serving(&rig.bound_args()).await;
    let log = sceau.stderr_text();
    assert!(
        log.contains("skipping") && log.contains("staged.json: PCR 11 reads all zeros"),
        "{log}"
    );
    let status = rpc::status(&mut client).await;
    assert_eq!(status.healthz, "ok");
    rpc::round_trip(
        &mut client,
        &status.key_id,
        b"served with the staged policy",
    )
    .await;
    stop(sceau, client);
}

/// A rotation of the policy key: DEKs sealed to the old key keep opening,
/// under their own key_id, while `--former-policy-key` names it and its
/// policies are loaded beside the new key's; new DEKs are sealed to the new
/// key, under a new key_id. Without the flag, the old envelope is refused
/// before any TPM work.
#[tokio::test(flavor = "multi_thread")]
async fn a_policy_key_rotation_keeps_old_deks_open() {
    rotate_the_policy_key("boot-binding-rotation", false).await;
}

/// The same in cluster mode (this node and a recovery key): the cluster
/// key_id covers the authPolicy, so the old envelope names the key_id of
/// the old key's membership, and opens through the former key's policies.
#[tokio::test(flavor = "multi_thread")]
async fn a_policy_key_rotation_keeps_old_deks_open_in_cluster_mode() {
    rotate_the_policy_key("boot-binding-rotation-cluster", true).await;
}

async fn rotate_the_policy_key(label: &str, cluster: bool) {
    let (rig, _) = Rig::in_signed_state(label, "old-key");
    // Cluster mode: a membership of this node and a recovery key.
    let mut common = Vec::new();
    if cluster {
        let recovery = rig.tmp.join("recovery.pub");
        rig.recover(&[
            "recovery-keygen",
            "--identity",
            rig.tmp.join("recovery.identity").to_str().unwrap(),
            "--public",
            recovery.to_str().unwrap(),
            "--unencrypted-private-key",
        ]);
        common = vec!["--recovery-key".to_string(), recovery.display().to_string()];
    }
    let with_common = |args: Vec<String>| [args, common.clone()].concat();
    let (sceau, mut client) = rig.serving(&with_common(rig.bound_args())).await;
    let old_key_id = rpc::status(&mut client).await.key_id;
    let old_dek = random_bytes(32);
    let old_envelope = rpc::seal(&mut client, &old_key_id, &old_dek).await;
    stop(sceau, client);

    // The new key, and the same boot state signed with it, in a directory
    // of its own.
    let new_private = rig.tmp.join("new-policy.key");
    let new_public = rig.tmp.join("new-policy.pub");
    rig.recover(&[
        "policy",
        "keygen",
        "--policy-private",
        new_private.to_str().unwrap(),
        "--policy-key",
        new_public.to_str().unwrap(),
        "--unencrypted-private-key",
    ]);
    let new_policies = rig.tmp.subdir("new-policies");
    let values = rig.tmp.join("now.pcrs");
    std::fs::write(&values, rig.read_pcrs("7")).unwrap();
    let new_policy = new_policies.join("new-key.json");
    rig.recover(&[
        "policy",
        "sign",
        "--policy-private",
        new_private.to_str().unwrap(),
        "--pcrs",
        "7",
        "--values",
        values.to_str().unwrap(),
        "--serial",
        "20",
        "--policy-out",
        new_policy.to_str().unwrap(),
    ]);
    let new_key = new_public.display().to_string();
    let policy_dir = |dir: &Path| ["--policy".to_string(), dir.display().to_string()];

    // The new key alone: the old envelope is sealed to a key sceau lacks.
    let mut args = vec!["--policy-key".to_string(), new_key.clone()];
    args.extend(policy_dir(&new_policies));
    let (sceau, mut client) = rig.serving(&with_common(args.clone())).await;
    let new_key_id = rpc::status(&mut client).await.key_id;
    assert_ne!(new_key_id, old_key_id);
    let refused = rpc::decrypt(&mut client, &old_envelope, &old_key_id)
        .await
        .expect_err("an envelope of a key sceau was not given");
    assert_clean_message(&refused, "old key");
    stop(sceau, client);

    // Both keys: the old envelope opens under its key_id; new DEKs go to
    // the new key.
    args.extend(policy_dir(&rig.policies));
    args.extend([
        "--former-policy-key".to_string(),
        rig.public.display().to_string(),
    ]);
    let (sceau, mut client) = rig.serving(&with_common(args)).await;
    assert_eq!(rpc::status(&mut client).await.key_id, new_key_id);
    rpc::open(&mut client, &old_key_id, &old_envelope, &old_dek).await;
    let new_dek = random_bytes(32);
    let new_envelope = rpc::seal(&mut client, &new_key_id, &new_dek).await;
    rpc::open(&mut client, &new_key_id, &new_envelope, &new_dek).await;
    stop(sceau, client);

    // The new envelope is sealed to the new key: the old key alone cannot
    // open it.
    let (sceau, mut client) = rig.serving(&with_common(rig.bound_args())).await;
    rpc::decrypt(&mut client, &new_envelope, &new_key_id)
        .await
        .expect_err("a DEK sealed to the new key, with only the old key configured");
    stop(sceau, client);
}

/// The KMS v2 rule that a key_id is never reported again for something
/// else, for the policy key: off, on, off, on gives four key_ids, none
/// reported before, and each earlier envelope opens under its own key_id
/// whenever its key is configured (the unbound one always, the bound one
/// with the policy key on). The epoch from the TPM's NV counter is what
/// makes the second "off" new: with the key_id made from the configuration
/// alone, as sceau made it before KEK generations, the third start
/// reported the first start's key_id again (the flip-flop the issue found).
#[tokio::test(flavor = "multi_thread")]
async fn a_policy_key_off_on_off_on_reports_a_new_key_id_each_time() {
    let (rig, _) = Rig::in_signed_state("boot-binding-policy-aba", "now");
    let plain_dek = random_bytes(32);
    let bound_dek = random_bytes(32);

    let (sceau, mut client) = rig.serving(&[]).await;
    let off = rpc::status(&mut client).await.key_id;
    let plain = rpc::seal(&mut client, &off, &plain_dek).await;
    stop(sceau, client);

    let (sceau, mut client) = rig.serving(&rig.bound_args()).await;
    let on = rpc::status(&mut client).await.key_id;
    let bound = rpc::seal(&mut client, &on, &bound_dek).await;
    rpc::open(&mut client, &off, &plain, &plain_dek).await;
    stop(sceau, client);

    let (sceau, mut client) = rig.serving(&[]).await;
    let off_again = rpc::status(&mut client).await.key_id;
    rpc::open(&mut client, &off, &plain, &plain_dek).await;
    stop(sceau, client);

    let (sceau, mut client) = rig.serving(&rig.bound_args()).await;
    let on_again = rpc::status(&mut client).await.key_id;
    rpc::open(&mut client, &on, &bound, &bound_dek).await;
    rpc::open(&mut client, &off, &plain, &plain_dek).await;
    // Presented under a key_id of its epoch that this node never
    // reported, the bound envelope is refused.
    let mut forged = on.clone();
    let last = forged.pop().unwrap();
    forged.push(if last == '0' { '1' } else { '0' });
    let refused = rpc::decrypt(&mut client, &bound, &forged).await;
    assert!(
        refused.is_err(),
        "opened under {forged}, which names no configuration"
    );
    stop(sceau, client);

    let all = [&off, &on, &off_again, &on_again];
    for (i, a) in all.iter().enumerate() {
        for b in &all[i + 1..] {
            assert_ne!(a, b, "a key_id was reported twice: {all:?}");
        }
    }
}
