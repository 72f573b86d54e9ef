//! The library of `sceau-recover`: offline disaster recovery, which opens
//! envelopes and etcd contents with the recovery identity, with no TPM.
//!
//! The Kubernetes side: `etcd` lists the values a cluster stored, from an
//! etcd snapshot or `etcdctl get -w json` output; `kubernetes` parses a KMS v2
//! value, decrypts it with the plaintext DEK source as the kube-apiserver
//! does, and prints the Secret inside. `bbolt`, `json` and `protowire` are
//! their small, strict readers of the file and wire formats involved.
//! `verify` checks each envelope's signature against the member files
//! before it is opened; `inventory` counts the stored values by resource,
//! provider and key_id, with no key.
//!
//! The key material: `custody` writes and reads the private files (recovery
//! shares, the recovery identity, the policy signing key) as age files.

mod bbolt;
pub mod cli;
pub mod custody;
pub mod etcd;
pub mod inventory;
// The JSON reader lives with the other formats; sceau's daemon reads signed
// PCR policies with it too.
pub use sceau_format::json;
pub mod kubernetes;
mod protowire;
pub mod report;
pub mod verify;
