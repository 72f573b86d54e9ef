//! `sceau-recover inventory` run for real on the etcd v3.7.0 snapshot and
//! the `etcdctl get -w json` output of the recovery vectors
//! (tests/fixtures/recovery): both inputs give the same counts, the JSON
//! parses, and `--require-current` exits 0 only for the key_id every
//! Secret is under.

use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_sceau-recover");
const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/recovery");
/// The key_id the vectors' apiserver stored.
const KEY_ID: &str = "recovery-vectors-key";

fn inventory(args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("inventory")
        .args(args)
        .output()
        .expect("run sceau-recover")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn a_snapshot_is_counted_by_resource_and_key_id() {
    let snapshot = format!("{FIXTURES}/snapshot.db");
    let out = inventory(&["--etcd-snapshot", &snapshot]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(
        table.contains(&format!(
            "       45  secrets                  kms-v2 sceau {KEY_ID}"
        )),
        "{table}"
    );
    assert!(
        table.contains("       47  values; 45 KMS v2 under 1 key_id(s), 2 otherwise"),
        "{table}"
    );

    let out = inventory(&["--etcd-snapshot", &snapshot, "--json"]);
    let json = sceau_recover::json::parse(&text(&out.stdout)).expect("JSON");
    assert_eq!(json.get("values").and_then(|v| v.as_i64()), Some(47));

    // Finished under the vectors' key_id; not under another.
    let out = inventory(&["--etcd-snapshot", &snapshot, "--require-current", KEY_ID]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = inventory(&[
        "--etcd-snapshot",
        &snapshot,
        "--require-current",
        "sceau-new",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr)
            .contains("45 value(s) of encrypted resources are not KMS v2 values under sceau-new"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn etcdctl_json_gives_the_secrets_counts() {
    let json = format!("{FIXTURES}/etcdctl-get.json");
    let out = inventory(&["--etcd-json", &json, "--require-current", KEY_ID]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains(&format!("secrets                  kms-v2 sceau {KEY_ID}")),
        "{}",
        text(&out.stdout)
    );
    let both = inventory(&["--etcd-json", &json, "--etcd-snapshot", &json]);
    assert_eq!(both.status.code(), Some(2), "{}", text(&both.stderr));
}
