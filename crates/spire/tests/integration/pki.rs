//! A "manufacturer" CA hierarchy made with the real `openssl` tool, shared
//! by the certificate tests and the end-to-end tests on swtpm: a P-384 root,
//! an RSA intermediate, and EK certificates carrying the TCG's critical
//! subjectAltName (manufacturer, model, version) for any key.

use std::path::{Path, PathBuf};
use std::process::Command;

use sceau_spire::server::keys::Key;
use sceau_testkit::tempdir::TempDir;

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

const EXTENSIONS: &str = "\
[root]
basicConstraints = critical, CA:true
keyUsage = critical, keyCertSign, cRLSign
[intermediate]
basicConstraints = critical, CA:true, pathlen:0
keyUsage = critical, keyCertSign, cRLSign
[not_a_ca]
basicConstraints = critical, CA:false
[ca_without_cert_sign]
basicConstraints = critical, CA:true
keyUsage = critical, digitalSignature
[ek]
basicConstraints = critical, CA:false
keyUsage = critical, keyEncipherment
extendedKeyUsage = 2.23.133.8.1
subjectAltName = critical, dirName:tpm
[ek_for_tls]
basicConstraints = critical, CA:false
extendedKeyUsage = serverAuth
subjectAltName = critical, dirName:tpm
[ek_with_unknown_critical]
basicConstraints = critical, CA:false
subjectAltName = critical, dirName:tpm
1.3.6.1.4.1.99999.1 = critical, ASN1:NULL
[tpm]
a.2.23.133.2.1 = id:53575450
b.2.23.133.2.2 = swtpm
c.2.23.133.2.3 = id:20191023
";

/// A CA hierarchy in a temporary directory.
pub struct Pki {
    dir: TempDir,
}

impl Pki {
    pub fn new() -> Self {
        let pki = Self {
            dir: TempDir::new("sceau-spire-pki"),
        };
        std::fs::write(pki.path("ext.cnf"), EXTENSIONS).unwrap();
        pki.self_signed("root", "Test TPM Manufacturer Root");
        pki.issue_ca(
            "intermediate",
            "Test TPM Manufacturer Intermediate",
            "root",
            "intermediate",
        );
        pki
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn run(&self, args: &[&str]) {
        openssl(self.dir.path(), args);
    }

    fn self_signed(&self, name: &str, cn: &str) {
        self.self_signed_with_subject(name, &format!("/CN={cn}"));
    }

    /// A self-signed root `name` whose subject is `subject`, in openssl's
    /// `-subj` form (`/OU=a/OU=b`).
    pub fn self_signed_with_subject(&self, name: &str, subject: &str) {
        self.run(&[
            "ecparam",
            "-name",
            "secp384r1",
            "-genkey",
            "-noout",
            "-out",
            &format!("{name}.key"),
        ]);
        self.request_with_subject(name, subject);
        self.run(&[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-signkey",
            &format!("{name}.key"),
            "-days",
            "3650",
            "-sha384",
            "-extfile",
            "ext.cnf",
            "-extensions",
            "root",
            "-out",
            &format!("{name}.pem"),
        ]);
    }

    /// A certificate request `NAME.csr` for the key `NAME.key`, subject CN.
    fn request(&self, name: &str, cn: &str) {
        self.request_with_subject(name, &format!("/CN={cn}"));
    }

    fn request_with_subject(&self, name: &str, subject: &str) {
        self.run(&[
            "req",
            "-new",
            "-key",
            &format!("{name}.key"),
            "-subj",
            subject,
            "-config",
            "/dev/null",
            "-out",
            &format!("{name}.csr"),
        ]);
    }

    pub fn issue_ca(&self, name: &str, cn: &str, issuer: &str, extensions: &str) {
        self.run(&["genrsa", "-out", &format!("{name}.key"), "2048"]);
        self.request(name, cn);
        self.sign(name, issuer, extensions, &["-in", &format!("{name}.csr")]);
    }

    fn sign(&self, name: &str, issuer: &str, extensions: &str, extra: &[&str]) {
        let mut args = vec![
            "x509",
            "-req",
            "-days",
            "3650",
            "-sha256",
            "-CA",
            &format!("{issuer}.pem"),
            "-CAkey",
            &format!("{issuer}.key"),
            "-set_serial",
            "7",
            "-extfile",
            "ext.cnf",
            "-extensions",
            extensions,
            "-out",
            &format!("{name}.pem"),
        ]
        .into_iter()
        .map(String::from)
        .collect::<Vec<_>>();
        args.extend(extra.iter().map(|s| s.to_string()));
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        self.run(&refs);
    }

    /// An EK certificate for `ek` (its SubjectPublicKeyInfo forced in),
    /// issued by `issuer`, as DER.
    pub fn ek_certificate(&self, ek: &Key, issuer: &str, extensions: &str) -> Vec<u8> {
        self.ek_certificate_signed_with(ek, issuer, extensions, "-sha256")
    }

    /// As [`Pki::ek_certificate`], signed with the digest `digest` (an
    /// openssl option such as `-sha1`).
    pub fn ek_certificate_signed_with(
        &self,
        ek: &Key,
        issuer: &str,
        extensions: &str,
        digest: &str,
    ) -> Vec<u8> {
        let spki = self.path("ek-pub.der");
        std::fs::write(&spki, ek.spki_der()).unwrap();
        self.run(&[
            "pkey",
            "-pubin",
            "-inform",
            "DER",
            "-in",
            "ek-pub.der",
            "-out",
            "ek-pub.pem",
        ]);
        // The request is only a carrier for the subject; its key is replaced.
        self.run(&[
            "ecparam",
            "-name",
            "prime256v1",
            "-genkey",
            "-noout",
            "-out",
            "carrier.key",
        ]);
        self.run(&[
            "req",
            "-new",
            "-key",
            "carrier.key",
            "-subj",
            "/",
            "-config",
            "/dev/null",
            "-out",
            "ek.csr",
        ]);
        self.sign(
            "ek-leaf",
            issuer,
            extensions,
            &[
                "-in",
                "ek.csr",
                "-force_pubkey",
                "ek-pub.pem",
                "-outform",
                "DER",
                digest,
            ],
        );
        std::fs::read(self.path("ek-leaf.pem")).unwrap()
    }

    pub fn pem(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(&format!("{name}.pem"))).unwrap()
    }
}
