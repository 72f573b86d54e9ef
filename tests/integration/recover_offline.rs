//! `sceau-recover` runs where tpm2-tss is absent: the recovery machine of
//! docs/recovery.md is any Linux machine, with no TPM software.
//!
//! The proof is a chroot holding the tool and exactly the libraries `ldd`
//! names for it, so no libtss2 can be found there. The control case puts the
//! daemon in a chroot with all of its libraries but tpm2-tss's and shows the
//! loader failing on libtss2: before the split, `sceau recover` was the
//! daemon binary and failed that way. (chroot needs root, as CI runs.)
//!
//! In the chroot, the recovery key is made as an operator makes it, its
//! private half an age file for an age key (`age-keygen` on the host), and
//! an envelope sealed to its public half is opened there with that age key:
//! the age code runs without tpm2-tss too.

use std::path::{Path, PathBuf};
use std::process::Command;

use sceau_format::members::{Member, Membership, RECOVERY_PUBLIC_LABEL, parse_pinned};
use sceau_format::signing_key::SoftwareSigner;
use sceau_format::storage_key::StorageKey;

use crate::harness::TempDir;
use crate::harness::sceau::{BIN, recover_bin};

/// The shared libraries the dynamic loader resolves for `binary`, by path,
/// and the loader itself.
fn linked_libraries(binary: &Path) -> Vec<PathBuf> {
    let output = Command::new("ldd")
        .arg(binary)
        .output()
        .expect("running ldd");
    assert!(output.status.success(), "ldd {}", binary.display());
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .filter_map(|line| {
            // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or
            // "/lib64/ld-linux-x86-64.so.2 (0x...)"; vdso has no path.
            let path = match line.split_once("=>") {
                Some((_, right)) => right.split_whitespace().next()?,
                None => line.split_whitespace().next()?,
            };
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect()
}

/// Copies `binary` to `/<name>` in `root` and each library to its own path.
fn install(root: &Path, binary: &Path, name: &str, libraries: &[PathBuf]) {
    std::fs::copy(binary, root.join(name)).unwrap();
    for library in libraries {
        let target = root.join(library.strip_prefix("/").unwrap());
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::copy(library, &target).unwrap();
    }
}

/// Writes `contents` to `path`, owned by root with mode 0600, as
/// sceau-recover wants a private key file.
fn write_private(path: &Path, contents: &[u8]) {
    std::fs::write(path, contents).unwrap();
    std::os::unix::fs::chown(path, Some(0), None).ok();
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
}

fn in_chroot(root: &Path, args: &[&str]) -> std::process::Output {
    Command::new("/usr/sbin/chroot")
        .arg(root)
        .args(args)
        .env_clear()
        .output()
        .expect("running chroot")
}

#[test]
fn sceau_recover_runs_where_no_tss2_library_can_be_found() {
    let recover = recover_bin();
    let libraries = linked_libraries(&recover);
    assert!(
        !libraries
            .iter()
            .any(|l| l.to_string_lossy().contains("tss2")),
        "sceau-recover links tpm2-tss: {libraries:?}"
    );
    let tmp = TempDir::new("recover-offline");
    let root = tmp.subdir("root");
    install(&root, &recover, "sceau-recover", &libraries);

    // An age key made on the host with age-keygen, as a custodian would, and
    // copied into the chroot: the recovery key's private half is encrypted
    // to it there.
    let age_key = tmp.join("custodian.agekey");
    let age_keygen = Command::new("age-keygen")
        .arg("-o")
        .arg(&age_key)
        .output()
        .expect("running age-keygen");
    let age_keygen_stderr = String::from_utf8_lossy(&age_keygen.stderr);
    assert!(
        age_keygen.status.success(),
        "age-keygen: {age_keygen_stderr}"
    );
    let recipient = age_keygen_stderr
        .trim()
        .strip_prefix("Public key: ")
        .unwrap_or_else(|| panic!("age-keygen: {age_keygen_stderr}"))
        .to_string();
    write_private(&root.join("age.key"), &std::fs::read(&age_key).unwrap());

    let protect = format!("age:{recipient}");
    let keygen = in_chroot(
        &root,
        &[
            "/sceau-recover",
            "recovery-keygen",
            "--identity",
            "/new.id",
            "--public",
            "/new.pub",
            "--protect",
            &protect,
        ],
    );
    assert!(
        keygen.status.success(),
        "recovery-keygen in the chroot: {}",
        String::from_utf8_lossy(&keygen.stderr)
    );
    assert!(
        std::fs::read_to_string(root.join("new.id"))
            .unwrap()
            .starts_with("-----BEGIN AGE ENCRYPTED FILE-----"),
        "the recovery identity was written unencrypted"
    );

    // A cluster envelope for one member and the recovery key made in the
    // chroot, made here with the same code the daemon uses.
    let recovery_public = parse_pinned(
        &std::fs::read_to_string(root.join("new.pub")).unwrap(),
        RECOVERY_PUBLIC_LABEL,
    )
    .unwrap();
    let signer = SoftwareSigner::from_bytes(&[0x31; 32]);
    let member = Member {
        srk: StorageKey::from_point(
            &p256::SecretKey::random(&mut sceau_format::random::SystemRandom).public_key(),
        ),
        signing: signer.public(),
    };
    let membership =
        Membership::from_keys(member.clone(), vec![member], Some(recovery_public)).unwrap();
    let dek = [0x5c_u8; 32];
    let to_sign = membership.seal(&dek).unwrap();
    let signature = signer.sign(to_sign.digest());
    let encoded = to_sign.finish(&signature);
    assert!(encoded.annotations.is_empty(), "two recipients fit inline");
    std::fs::write(root.join("envelope"), &encoded.ciphertext).unwrap();

    let opened = in_chroot(
        &root,
        &[
            "/sceau-recover",
            "recover",
            "--identity",
            "/new.id",
            "--age-identity",
            "/age.key",
            "--envelope",
            "/envelope",
        ],
    );
    assert!(
        opened.status.success(),
        "recover in the chroot: {}",
        String::from_utf8_lossy(&opened.stderr)
    );
    assert_eq!(opened.stdout, dek);

    // Control: the daemon, with every library but tpm2-tss's, cannot start.
    let daemon_libraries: Vec<PathBuf> = linked_libraries(Path::new(BIN))
        .into_iter()
        .filter(|l| !l.to_string_lossy().contains("tss2"))
        .collect();
    install(&root, Path::new(BIN), "sceau", &daemon_libraries);
    let daemon = in_chroot(&root, &["/sceau", "--version"]);
    assert!(!daemon.status.success());
    assert!(
        String::from_utf8_lossy(&daemon.stderr).contains("libtss2"),
        "{}",
        String::from_utf8_lossy(&daemon.stderr)
    );
}
