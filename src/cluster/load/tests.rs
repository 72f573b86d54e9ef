use p256::SecretKey;
use sceau_format::random::SystemRandom;

/// `load` with this node under generation 0 only, as before generations.
fn load_own(
    dir: &std::path::Path,
    recovery: Option<&std::path::Path>,
    own: Member,
    enrollment: Option<&sceau_format::endorsement::EnrollmentPublic>,
) -> Result<Membership, LoadError> {
    load(dir, recovery, &[(0, own)], enrollment).map(|(membership, _)| membership)
}

use super::*;
use sceau_format::duplicate::import_in_software;
use sceau_format::key_id::KeyId;
use sceau_format::members::member_file;
use sceau_format::recovery_key::RecoveryIdentity;
use sceau_format::signing_key::{SigningKey, sign_in_software};
use sceau_format::wrapped::{ClusterEnvelope, Encoded};

/// A member whose SRK and signing key share one software scalar: the
/// loader only reads the public halves.
fn key() -> (SecretKey, Member) {
    let secret = SecretKey::random(&mut SystemRandom);
    let member = Member {
        srk: StorageKey::from_point(&secret.public_key()),
        signing: SigningKey::from_point(&secret.public_key()),
    };
    (secret, member)
}

/// Encrypt as the member with `secret` would: wrap, then sign.
fn sealed(membership: &Membership, secret: &SecretKey, dek: &[u8]) -> Encoded {
    let to_sign = membership.seal(dek).unwrap();
    let signature = sign_in_software(secret, to_sign.digest());
    to_sign.finish(&signature)
}

fn members_dir(keys: &[&Member]) -> tempdir::Dir {
    let dir = tempdir::Dir::new();
    for (i, k) in keys.iter().enumerate() {
        let text = member_file(k, &KeyId::from_srk_name(k.srk.name()));
        std::fs::write(dir.path().join(format!("node-{i}.pub")), text).unwrap();
    }
    std::fs::write(dir.path().join("README"), "not a member file").unwrap();
    dir
}

/// A directory removed on drop; unit tests have no tempfile crate.
mod tempdir {
    pub struct Dir(std::path::PathBuf);
    impl Dir {
        pub fn new() -> Self {
            use std::sync::atomic::{AtomicU32, Ordering};
            static NEXT: AtomicU32 = AtomicU32::new(0);
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let path =
                std::env::temp_dir().join(format!("sceau-members-{}-{n}", std::process::id()));
            std::fs::create_dir_all(&path).unwrap();
            Self(path)
        }
        pub fn path(&self) -> &std::path::Path {
            &self.0
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

#[test]
fn every_member_computes_the_same_key_id_and_opens_the_envelope() {
    let parties: Vec<_> = (0..3).map(|_| key()).collect();
    let keys: Vec<&Member> = parties.iter().map(|(_, k)| k).collect();
    let dir = members_dir(&keys);
    let views: Vec<Membership> = keys
        .iter()
        .map(|k| load_own(dir.path(), None, (*k).clone(), None).unwrap())
        .collect();
    assert!(views.windows(2).all(|w| w[0].key_id() == w[1].key_id()));
    assert_eq!(views[0].key_id().as_str().len(), "sceau-".len() + 32);
    let encoded = sealed(&views[1], &parties[1].0, &[0xAB; 32]);
    let envelope = ClusterEnvelope::parse(&encoded.ciphertext, &encoded.annotations).unwrap();
    for view in &views {
        assert_eq!(view.verify(&envelope, views[0].key_id().as_str()), Ok(()));
    }
    for (secret, key) in &parties {
        let entry = envelope.entry_for(key.srk.name()).unwrap();
        let dek = import_in_software(secret, &envelope.object_public, &entry.blob).unwrap();
        assert_eq!(dek.as_slice(), &[0xAB; 32]);
    }
}

#[test]
fn membership_changes_change_the_key_id() {
    let parties: Vec<_> = (0..3).map(|_| key()).collect();
    let keys: Vec<&Member> = parties.iter().map(|(_, k)| k).collect();
    let own = keys[0].clone();
    let three = load_own(members_dir(&keys).path(), None, own.clone(), None).unwrap();
    let two = load_own(members_dir(&keys[..2]).path(), None, own.clone(), None).unwrap();
    assert_ne!(three.key_id(), two.key_id());
    let recovery = RecoveryIdentity::generate();
    let dir = members_dir(&keys);
    let recovery_path = dir.path().join("recovery.key");
    std::fs::write(&recovery_path, recovery.public_file()).unwrap();
    let with_recovery = load_own(dir.path(), Some(&recovery_path), own, None).unwrap();
    assert_ne!(three.key_id(), with_recovery.key_id());
    let encoded = sealed(&with_recovery, &parties[0].0, &[1; 32]);
    let dek = recovery
        .open(&encoded.ciphertext, &encoded.annotations)
        .unwrap();
    assert_eq!(dek.as_slice(), &[1; 32]);
}

#[test]
fn refuses_unpinned_mispinned_duplicate_and_foreign_members() {
    let (_, a) = key();
    let (_, b) = key();
    let (_, outsider) = key();
    let dir = members_dir(&[&a, &b]);
    let refused = load_own(dir.path(), None, outsider, None);
    assert!(
        matches!(refused, Err(LoadError::NotAMember { files: 2, .. })),
        "{refused:?}"
    );
    let path = dir.path().join("node-1.pub");
    let text = std::fs::read_to_string(&path).unwrap();
    let unpinned: String = text
        .lines()
        .filter(|l| !l.starts_with("name:"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&path, unpinned).unwrap();
    assert!(matches!(
        load_own(dir.path(), None, a.clone(), None),
        Err(LoadError::Pinned {
            source: PinnedKeyError::Unpinned,
            ..
        })
    ));
    std::fs::write(&path, text.replace(&hex(b.srk.name()), &hex(a.srk.name()))).unwrap();
    assert!(matches!(
        load_own(dir.path(), None, a.clone(), None),
        Err(LoadError::Pinned {
            source: PinnedKeyError::PinMismatch { .. },
            ..
        })
    ));
    std::fs::write(
        &path,
        std::fs::read_to_string(dir.path().join("node-0.pub")).unwrap(),
    )
    .unwrap();
    assert!(matches!(
        load_own(dir.path(), None, a.clone(), None),
        Err(LoadError::Duplicate(_))
    ));
}

/// Fails with the `is_srk` check in `read_members` switched off (tried once).
#[test]
fn refuses_member_keys_that_are_not_tcg_srks() {
    let (_, own) = key();
    let (_, other) = key();
    // restricted|decrypt|userWithAuth|noDA: what an imported software key has.
    let imported = Member {
        srk: sceau_format::storage_key::imported_lookalike(other.srk.point()),
        ..other
    };
    let dir = members_dir(&[&own, &imported]);
    assert!(matches!(
        load_own(dir.path(), None, own.clone(), None),
        Err(LoadError::NotAnSrk {
            attributes: 0x0003_0440,
            ..
        })
    ));
}

/// Membership is protected by who can write its files.
/// A member file or directory others can write, a symbolic link, a file
/// another user owns, and a directory below a world-writable (non-sticky)
/// one are refused. Before the fix every one of these loaded (the first
/// `is_err` assertion failed).
#[test]
fn refuses_member_files_others_can_write_own_or_link() {
    use std::os::unix::fs::PermissionsExt as _;
    let chmod = |path: &Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap()
    };
    let (_, a) = key();
    let (_, b) = key();
    let dir = members_dir(&[&a, &b]);
    let try_load = || load_own(dir.path(), None, a.clone(), None);
    let untrusted = |result: Result<Membership, LoadError>| match result {
        Err(LoadError::Untrusted(why)) => why.to_string(),
        other => panic!("expected a refusal, got {other:?}"),
    };
    assert!(try_load().is_ok());
    let file = dir.path().join("node-1.pub");

    chmod(&file, 0o666);
    assert!(untrusted(try_load()).contains("chmod go-w"));
    chmod(&file, 0o644);

    chmod(dir.path(), 0o777);
    assert!(untrusted(try_load()).contains("writable by group or others"));
    chmod(dir.path(), 0o1777);
    assert!(
        try_load().is_err(),
        "the members directory itself may not be sticky-shared"
    );
    chmod(dir.path(), 0o755);

    let elsewhere = dir.path().join("node-1.copy");
    std::fs::rename(&file, &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &file).unwrap();
    assert!(untrusted(try_load()).contains("symbolic link"));
    std::fs::remove_file(&file).unwrap();
    std::fs::rename(&elsewhere, &file).unwrap();
    assert!(try_load().is_ok());

    // Ownership can only be given away by root (CI runs as root).
    if std::os::unix::fs::chown(&file, Some(4242), None).is_ok() {
        assert!(untrusted(try_load()).contains("owned by uid 4242"));
        std::os::unix::fs::chown(&file, Some(0), None).unwrap();
    }

    // The same directory reached below a world-writable parent.
    let shared = tempdir::Dir::new();
    chmod(shared.path(), 0o777);
    let below = shared.path().join("members");
    std::fs::rename(dir.path(), &below).unwrap();
    let result = load_own(&below, None, a.clone(), None);
    std::fs::rename(&below, dir.path()).unwrap();
    assert!(untrusted(result).contains(&shared.path().display().to_string()));
}
