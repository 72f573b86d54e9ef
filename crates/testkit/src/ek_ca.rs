//! A local TPM "manufacturer" for the SPIRE attestor's tests: a CA (a root and
//! an intermediate, made by swtpm's own `swtpm_localca`) and swtpm states whose
//! TPM holds EK certificates it issued, as a real TPM does:
//!
//! - an RSA 2048 EK certificate at NV index 0x01C00002 (the TCG low-range
//!   index), made by `swtpm_setup --create-ek-cert`;
//! - an ECC NIST P-256 EK certificate at NV index 0x01C0000A. swtpm_setup
//!   0.7 only certifies a P-384 EK (at 0x01C00016, which is left in place), so
//!   this one is made here: the EK is derived from the TCG default ECC template
//!   (`tpm2_createek -G ecc`), `swtpm_localca` certifies its public point, and
//!   the certificate is written to the NV index with the attributes
//!   swtpm_setup gives its own.
//!
//! Several TPMs may be provisioned under one CA (its serial numbers and lock
//! live in its directory), and a second [`EkCa`] is an independent
//! manufacturer, for the "untrusted CA" refusals. The scripts reach this
//! through `sceau-rig provision --ca DIR --state DIR`.
//!
//! Everything is bounded in time and reported as an [`EkCaError`] whose text
//! names the step and the tool's own output.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::process::wait_timeout;
use crate::swtpm::Swtpm;
use sceau_format::key_id::hex;

/// The TCG EK certificate NV indices filled here.
pub const RSA_EK_CERT_INDEX: &str = "0x01c00002";
pub const ECC_EK_CERT_INDEX: &str = "0x01c0000a";

/// The NV attributes swtpm_setup gives its EK certificate indices
/// (0x62072001): written by the platform, readable by owner and by the index's
/// own (empty) auth, so `tpm2_nvread INDEX` and SPIRE's agent can read it.
const EK_CERT_NV_ATTRIBUTES: &str =
    "ppwrite|writedefine|ppread|ownerread|authread|no_da|platformcreate";

/// The TPM description swtpm_setup 0.7 passes to swtpm_localca for the RSA
/// certificate (its manufacturer is the TCG vendor ID of IBM, whose libtpms
/// swtpm runs); the P-256 certificate gets the same, so both name one TPM
/// model. `ek_ca::tests` checks that the two certificates agree.
pub const TPM_DESCRIPTION: [&str; 12] = [
    "--tpm-spec-family",
    "2.0",
    "--tpm-spec-level",
    "0",
    "--tpm-spec-revision",
    "164",
    "--tpm-manufacturer",
    "id:00001014",
    "--tpm-model",
    "swtpm",
    "--tpm-version",
    "id:20191023",
];

/// A DER SubjectPublicKeyInfo of an uncompressed NIST P-256 point is this
/// fixed prefix (id-ecPublicKey, prime256v1, BIT STRING, 0x04) and x ‖ y.
const P256_SPKI_PREFIX: [u8; 27] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00, 0x04,
];

/// The x coordinate of P-256's base point, and its y: a valid public point
/// that belongs to no TPM, certified once to make swtpm_localca create its
/// root and intermediate (it makes them lazily, on its first certificate).
const P256_GENERATOR_X: &str = "6b17d1f2e12c4247f8bce6e563a440f277037d812deb33a0f4a13945d898c296";
const P256_GENERATOR_Y: &str = "4fe342e2fe1a7f9b8ee7eb4a7c0f9e162bce33576b315ececbb6406837bf51f5";

const STEP_TIMEOUT: Duration = Duration::from_secs(120);

/// What went wrong while making a CA or provisioning a TPM: the step, and
/// what the tool said.
#[derive(Debug)]
pub struct EkCaError(String);

impl fmt::Display for EkCaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for EkCaError {}

fn error(what: impl fmt::Display) -> EkCaError {
    EkCaError(what.to_string())
}

/// A manufacturer CA in a directory of its own.
#[derive(Debug, Clone)]
pub struct EkCa {
    dir: PathBuf,
    /// PEM: the self-signed root, the trust anchor a verifier is given.
    pub roots_pem: PathBuf,
    /// PEM: the intermediate ("issuer") that signs the EK certificates.
    pub intermediates_pem: PathBuf,
}

impl EkCa {
    /// Makes a new CA in `dir` (created if missing; it must not already hold
    /// one): swtpm_localca's configuration, its root and intermediate, and
    /// `roots.pem` / `intermediates.pem` beside them.
    pub fn create(dir: &Path) -> Result<EkCa, EkCaError> {
        fs::create_dir_all(dir).map_err(|e| error(format!("create {}: {e}", dir.display())))?;
        let dir =
            fs::canonicalize(dir).map_err(|e| error(format!("resolve {}: {e}", dir.display())))?;
        let ca = EkCa::at(&dir);
        if ca.signing_key().exists() {
            return Err(error(format!(
                "{} already holds a CA: use EkCa::open, or an empty directory",
                dir.display()
            )));
        }
        ca.write_configuration()?;
        let work = ca.dir.join("bootstrap");
        fs::create_dir_all(&work).map_err(|e| error(format!("create {}: {e}", work.display())))?;
        ca.certify_point(P256_GENERATOR_X, P256_GENERATOR_Y, &work)?;
        let _ = fs::remove_dir_all(&work);
        copy(&ca.dir.join("swtpm-localca-rootca-cert.pem"), &ca.roots_pem)?;
        copy(&ca.dir.join("issuercert.pem"), &ca.intermediates_pem)?;
        Ok(ca)
    }

    /// The CA [`EkCa::create`] made in `dir` earlier.
    pub fn open(dir: &Path) -> Result<EkCa, EkCaError> {
        let dir =
            fs::canonicalize(dir).map_err(|e| error(format!("open CA {}: {e}", dir.display())))?;
        let ca = EkCa::at(&dir);
        for file in [&ca.roots_pem, &ca.intermediates_pem, &ca.signing_key()] {
            if !file.is_file() {
                return Err(error(format!(
                    "{} is not a CA made by EkCa::create (no {})",
                    dir.display(),
                    file.display()
                )));
            }
        }
        Ok(ca)
    }

    /// `open` if `dir` holds a CA, else `create`.
    pub fn open_or_create(dir: &Path) -> Result<EkCa, EkCaError> {
        if dir.join("roots.pem").is_file() {
            EkCa::open(dir)
        } else {
            EkCa::create(dir)
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Manufactures a new TPM in `state_dir` (created if missing; it must not
    /// hold a TPM yet) with RSA 2048 and ECC P-256 EK certificates from this
    /// CA at [`RSA_EK_CERT_INDEX`] and [`ECC_EK_CERT_INDEX`]. Copies of the
    /// two certificates (DER) are left in the state directory as
    /// `ek-rsa2048.der` and `ek-p256.der`. Starts and stops its own swtpm.
    pub fn provision_tpm(&self, state_dir: &Path) -> Result<(), EkCaError> {
        fs::create_dir_all(state_dir)
            .map_err(|e| error(format!("create {}: {e}", state_dir.display())))?;
        if state_dir.join("tpm2-00.permall").exists() {
            return Err(error(format!(
                "{} already holds a TPM: provision an empty directory",
                state_dir.display()
            )));
        }
        let work = state_dir.join("ek-provision");
        fs::create_dir_all(&work).map_err(|e| error(format!("create {}: {e}", work.display())))?;

        // The TPM's state, its persisted RSA 2048 and P-384 EKs, and their
        // certificates from this CA.
        let mut setup = Command::new("swtpm_setup");
        setup
            .args(["--tpm2", "--create-ek-cert", "--pcr-banks", "sha256"])
            .arg("--tpmstate")
            .arg(state_dir)
            .arg("--config")
            .arg(self.dir.join("swtpm_setup.conf"))
            .arg("--write-ek-cert-files")
            .arg(&work);
        run("swtpm_setup (is swtpm-tools installed?)", &mut setup, &work)?;
        copy(
            &work.join("ek-rsa2048.crt"),
            &state_dir.join("ek-rsa2048.der"),
        )?;

        // The P-256 EK and its certificate, through a running swtpm.
        let tpm = Swtpm::start(state_dir);
        let tools = |tool: &str, args: &[&str]| {
            let mut cmd = Command::new(tool);
            cmd.args(args)
                .current_dir(&work)
                .env("TPM2TOOLS_TCTI", tpm.tcti());
            run(tool, &mut cmd, &work)
        };
        tools(
            "tpm2_createek",
            &[
                "-G",
                "ecc",
                "-c",
                "ek-ecc.ctx",
                "-u",
                "ek-ecc.der",
                "-f",
                "der",
            ],
        )?;
        tools("tpm2_flushcontext", &["-t"])?;
        let spki = read(&work.join("ek-ecc.der"))?;
        let point = spki
            .strip_prefix(&P256_SPKI_PREFIX[..])
            .filter(|p| p.len() == 64)
            .ok_or_else(|| error("tpm2_createek -G ecc did not give a P-256 public key"))?;
        let (x, y) = point.split_at(32);
        self.certify_point(&hex(x), &hex(y), &work)?;
        let cert = work.join("ek.cert");
        let size = fs::metadata(&cert)
            .map_err(|e| error(format!("swtpm_localca left no {}: {e}", cert.display())))?
            .len()
            .to_string();
        tools(
            "tpm2_nvdefine",
            &[
                ECC_EK_CERT_INDEX,
                "-C",
                "p",
                "-s",
                &size,
                "-a",
                EK_CERT_NV_ATTRIBUTES,
            ],
        )?;
        tools(
            "tpm2_nvwrite",
            &[ECC_EK_CERT_INDEX, "-C", "p", "-i", "ek.cert"],
        )?;
        drop(tpm);
        copy(&cert, &state_dir.join("ek-p256.der"))?;
        let _ = fs::remove_dir_all(&work);
        Ok(())
    }

    fn at(dir: &Path) -> EkCa {
        EkCa {
            dir: dir.to_path_buf(),
            roots_pem: dir.join("roots.pem"),
            intermediates_pem: dir.join("intermediates.pem"),
        }
    }

    fn signing_key(&self) -> PathBuf {
        self.dir.join("signkey.pem")
    }

    /// A CRL of this CA's intermediate (PEM, version 2), made in `dir` by
    /// `openssl ca -gencrl` with the intermediate's key: listing `revoked`
    /// (a DER certificate) if given, and due at `next_update`
    /// (YYYYMMDDHHMMSSZ) if given, else in 30 days.
    pub fn crl(&self, dir: &Path, revoked: Option<&Path>, next_update: Option<&str>) -> PathBuf {
        let index = match revoked {
            Some(certificate) => {
                let serial = Command::new("openssl")
                    .args(["x509", "-inform", "DER", "-noout", "-serial", "-in"])
                    .arg(certificate)
                    .output()
                    .expect("openssl x509");
                let serial = String::from_utf8_lossy(&serial.stdout)
                    .trim()
                    .trim_start_matches("serial=")
                    .to_string();
                format!("R\t991231235959Z\t240101000000Z\t{serial}\tunknown\t/CN=EK\n")
            }
            None => String::new(),
        };
        fs::create_dir_all(dir).expect("the CRL's directory");
        fs::write(dir.join("index.txt"), index).expect("index.txt");
        fs::write(dir.join("crlnumber"), "01\n").expect("crlnumber");
        // crl_extensions makes a version 2 CRL, as RFC 5280 asks.
        fs::write(
            dir.join("ca.cnf"),
            format!(
                "[ca]\ndefault_ca = ek\n[ek]\ndatabase = {d}/index.txt\ndefault_md = sha256\n\
                 default_crl_days = 30\ncrl_extensions = crl_ext\ncrlnumber = {d}/crlnumber\n\
                 [crl_ext]\nauthorityKeyIdentifier = keyid:always\n",
                d = dir.display()
            ),
        )
        .expect("ca.cnf");
        let out = dir.join("crl.pem");
        let mut command = Command::new("openssl");
        command
            .args(["ca", "-gencrl", "-config"])
            .arg(dir.join("ca.cnf"))
            .arg("-keyfile")
            .arg(self.signing_key())
            .arg("-cert")
            .arg(self.dir.join("issuercert.pem"))
            .arg("-out")
            .arg(&out);
        if let Some(when) = next_update {
            command.args([
                "-crl_lastupdate",
                "20190101000000Z",
                "-crl_nextupdate",
                when,
            ]);
        }
        let made = command.output().expect("openssl ca");
        assert!(
            made.status.success(),
            "openssl ca -gencrl: {}",
            String::from_utf8_lossy(&made.stderr)
        );
        out
    }

    /// An expired certificate from this CA's intermediate for the public key
    /// `ek_public` (SubjectPublicKeyInfo, DER, as `tpm2_createek -f der`
    /// writes it): `openssl x509 -req -days -1` makes its notAfter a day
    /// before its notBefore, so it is past at any time the test runs.
    /// Written as DER in `dir`. Everything but the dates may differ from
    /// swtpm_localca's (subject, extensions): a validator that refused it
    /// for another reason would say another reason, which the test checks.
    pub fn expired_certificate(&self, ek_public: &Path, dir: &Path) -> PathBuf {
        fs::create_dir_all(dir).expect("the certificate's directory");
        let openssl = |args: &[&str]| {
            let made = Command::new("openssl")
                .args(args)
                .current_dir(dir)
                .output()
                .expect("openssl");
            assert!(
                made.status.success(),
                "openssl {}: {}",
                args[0],
                String::from_utf8_lossy(&made.stderr)
            );
        };
        let ek_public = ek_public.to_str().expect("a UTF-8 path");
        let key = self.signing_key();
        let issuer = self.dir.join("issuercert.pem");
        openssl(&[
            "pkey", "-pubin", "-inform", "DER", "-in", ek_public, "-out", "ek.pub",
        ]);
        // The request's own key only signs the request: -force_pubkey puts
        // the EK's public key in the certificate.
        openssl(&[
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            "request.key",
            "-subj",
            "/CN=expired EK",
            "-out",
            "request.csr",
        ]);
        openssl(&[
            "x509",
            "-req",
            "-in",
            "request.csr",
            "-CA",
            issuer.to_str().expect("a UTF-8 path"),
            "-CAkey",
            key.to_str().expect("a UTF-8 path"),
            "-force_pubkey",
            "ek.pub",
            "-days",
            "-1",
            "-outform",
            "DER",
            "-out",
            "expired.der",
        ]);
        dir.join("expired.der")
    }

    /// swtpm_setup's and swtpm_localca's configuration, all in `dir`.
    fn write_configuration(&self) -> Result<(), EkCaError> {
        let d = self.dir.display();
        // swtpm_setup runs the tool by the path it is given, without a PATH search.
        let localca = find_in_path("swtpm_localca")
            .ok_or_else(|| error("swtpm_localca not found on PATH: install swtpm-tools"))?;
        write(
            &self.dir.join("swtpm-localca.conf"),
            &format!(
                "statedir = {d}\nsigningkey = {d}/signkey.pem\n\
                 issuercert = {d}/issuercert.pem\ncertserial = {d}/certserial\n"
            ),
        )?;
        // Used only for platform certificates, which are not made; swtpm_localca
        // wants the file all the same.
        write(
            &self.dir.join("swtpm-localca.options"),
            "--platform-manufacturer sceau-testkit\n--platform-version 1.0\n--platform-model swtpm\n",
        )?;
        write(
            &self.dir.join("swtpm_setup.conf"),
            &format!(
                "create_certs_tool = {}\n\
                 create_certs_tool_config = {d}/swtpm-localca.conf\n\
                 create_certs_tool_options = {d}/swtpm-localca.options\n\
                 active_pcr_banks = sha256\n",
                localca.display()
            ),
        )
    }

    /// An EK certificate for the P-256 point (x, y), as `work/ek.cert` (DER).
    fn certify_point(&self, x: &str, y: &str, work: &Path) -> Result<(), EkCaError> {
        let mut localca = Command::new("swtpm_localca");
        localca
            .args(["--type", "ek", "--tpm2"])
            .arg("--ek")
            .arg(format!("x={x},y={y}"))
            .arg("--dir")
            .arg(work)
            .args(TPM_DESCRIPTION)
            .arg("--configfile")
            .arg(self.dir.join("swtpm-localca.conf"))
            .arg("--optsfile")
            .arg(self.dir.join("swtpm-localca.options"));
        run(
            "swtpm_localca (is swtpm-tools installed?)",
            &mut localca,
            work,
        )
        .map(drop)
    }
}

/// Runs `cmd` to completion within [`STEP_TIMEOUT`], its output in files in
/// `work`; its stdout on success, else an error naming `what` with the output.
fn run(what: &str, cmd: &mut Command, work: &Path) -> Result<String, EkCaError> {
    let out = work.join("step.out");
    let create =
        |p: &Path| fs::File::create(p).map_err(|e| error(format!("create {}: {e}", p.display())));
    let stdout = create(&out)?;
    let stderr = stdout
        .try_clone()
        .map_err(|e| error(format!("{}: {e}", out.display())))?;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .map_err(|e| error(format!("cannot run {what}: {e}")))?;
    let status = wait_timeout(&mut child, STEP_TIMEOUT);
    let output = String::from_utf8_lossy(&fs::read(&out).unwrap_or_default()).into_owned();
    match status {
        Some(s) if s.success() => Ok(output),
        Some(s) => Err(error(format!("{what} failed ({s}): {}", output.trim()))),
        None => {
            crate::process::kill_and_reap(&mut child);
            Err(error(format!(
                "{what} did not finish within {STEP_TIMEOUT:?}: {}",
                output.trim()
            )))
        }
    }
}

fn find_in_path(program: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

fn read(path: &Path) -> Result<Vec<u8>, EkCaError> {
    fs::read(path).map_err(|e| error(format!("read {}: {e}", path.display())))
}

fn write(path: &Path, text: &str) -> Result<(), EkCaError> {
    fs::write(path, text).map_err(|e| error(format!("write {}: {e}", path.display())))
}

fn copy(from: &Path, to: &Path) -> Result<(), EkCaError> {
    fs::copy(from, to)
        .map(drop)
        .map_err(|e| error(format!("copy {} to {}: {e}", from.display(), to.display())))
}
