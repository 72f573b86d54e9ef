//! How long `sceau-recover inventory` takes over many stored Secrets, as a
//! table for docs/performance.md: `cargo run --release --locked -p
//! sceau-recover --example inventory_bench`.
//!
//! The input is `etcdctl get -w json` output made here: N Secrets under
//! `/registry/secrets/ns-I/secret-J`, each a KMS v2 value of 1,024 bytes of
//! ciphertext under one of three key_ids (what a cluster mid-rotation
//! holds), plus 1 % stored in the clear. Each row is the best of three
//! runs: reading the JSON into values, then counting them.

use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use sceau_recover::etcd::values_from_etcdctl_json;
use sceau_recover::inventory::{Current, Inventory};

/// One KMS v2 value: the prefix and an EncryptedObject (encryptedData,
/// keyID, encryptedDEKSource) with two-byte varint lengths.
fn kms_value(key_id: &str, filler: u8) -> Vec<u8> {
    let mut out = b"k8s:enc:kms:v2:sceau:".to_vec();
    for (tag, value) in [
        (0x0a, vec![filler; 1024]),
        (0x12, key_id.as_bytes().to_vec()),
        (0x1a, vec![filler; 211]),
    ] {
        out.push(tag);
        let len = value.len();
        out.extend_from_slice(&[0x80 | (len & 0x7f) as u8, (len >> 7) as u8]);
        out.extend_from_slice(&value);
    }
    out
}

fn etcdctl_json(secrets: usize) -> String {
    let key_ids = [
        "sceau-0000000000000001",
        "sceau-0000000000000002",
        "sceau-0000000000000003",
    ];
    let mut kvs = Vec::with_capacity(secrets);
    for i in 0..secrets {
        let key = format!("/registry/secrets/ns-{}/secret-{i}", i % 100);
        let value = if i % 100 == 99 {
            b"k8s\x00a Secret stored in the clear".to_vec()
        } else {
            kms_value(key_ids[i % 3], (i % 251) as u8)
        };
        kvs.push(format!(
            "{{\"key\":\"{}\",\"create_revision\":{},\"mod_revision\":{},\"version\":1,\"value\":\"{}\"}}",
            STANDARD.encode(key),
            i + 2,
            i + 2,
            STANDARD.encode(value)
        ));
    }
    format!(
        "{{\"header\":{{\"revision\":{}}},\"kvs\":[{}],\"count\":{secrets}}}",
        secrets + 2,
        kvs.join(",")
    )
}

fn main() {
    println!(
        "| Secrets | JSON size | read (JSON → values) | count (values → inventory) | total | per Secret |"
    );
    println!("|---:|---:|---:|---:|---:|---:|");
    for secrets in [1_000, 10_000, 100_000] {
        let text = etcdctl_json(secrets);
        let mut read = Duration::MAX;
        let mut count = Duration::MAX;
        for _ in 0..3 {
            let t = Instant::now();
            let values = values_from_etcdctl_json(&text).expect("generated JSON reads");
            read = read.min(t.elapsed());
            let t = Instant::now();
            let inventory = Inventory::take(&values, &Current::default());
            count = count.min(t.elapsed());
            assert_eq!(inventory.total(), secrets);
            let current = (0..secrets).filter(|i| i % 100 != 99 && i % 3 == 0).count();
            assert_eq!(
                inventory.not_under("sceau-0000000000000001"),
                secrets - current
            );
        }
        let total = read + count;
        println!(
            "| {secrets} | {:.1} MB | {:.0} ms | {:.0} ms | {:.0} ms | {:.1} µs |",
            text.len() as f64 / 1e6,
            read.as_secs_f64() * 1e3,
            count.as_secs_f64() * 1e3,
            total.as_secs_f64() * 1e3,
            total.as_secs_f64() * 1e6 / secrets as f64
        );
    }
}
