//! `sceau-recover inventory`: the stored values of an etcd snapshot or
//! `etcdctl get -w json` output counted by resource, provider and key_id
//! (`sceau_recover::inventory`), with no key; `--require-current KEY_ID`
//! makes it the check that a rewrite finished before an old key is retired,
//! and the ledger, member files and recovery key of today name the values
//! still waiting on a key that is going.

use anyhow::Context as _;
use sceau_format::kek::Ledger;
use sceau_format::members::{RECOVERY_PUBLIC_LABEL, parse_pinned};
use sceau_recover::cli::InventoryOptions;
use sceau_recover::inventory::{Current, Inventory};
use sceau_recover::verify::read_members;

pub fn run(options: &InventoryOptions) -> anyhow::Result<()> {
    let current = current(options)?;
    let values = super::etcd_values(&options.input)?;
    let inventory = Inventory::take(&values, &current);
    if options.json {
        print!("{}", inventory.to_json());
    } else {
        print!("{}", inventory.to_text());
    }
    if options.values {
        print!("{}", sceau_recover::inventory::value_lines(&values));
    }
    if let Some(key_id) = &options.require_current {
        let pending = inventory.not_under(key_id);
        if pending > 0 {
            anyhow::bail!(
                "{pending} value(s) of encrypted resources are not KMS v2 values under {key_id}: \
                 rewrite them (`kubectl get secrets -A -o json | kubectl replace -f -`) and take \
                 a new snapshot before retiring the old key"
            );
        }
        eprintln!("every value of the encrypted resources is under {key_id}");
    }
    Ok(())
}

/// What the configuration holds now, from the files given.
fn current(options: &InventoryOptions) -> anyhow::Result<Current> {
    let mut current = Current::default();
    if let Some(path) = &options.kek_ledger {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let ledger = Ledger::parse(&text).with_context(|| {
            format!(
                "{} is not a kek-ledger: give the file of that name from the node's state directory",
                path.display()
            )
        })?;
        current = current.with_ledger(&ledger);
    }
    if let Some(dir) = &options.current_members {
        let known = read_members(std::slice::from_ref(dir))?.unwrap_or_default();
        current.members = Some(known.srk_names().copied().collect());
    }
    if let Some(path) = &options.current_recovery_key {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let key = parse_pinned(&text, RECOVERY_PUBLIC_LABEL)
            .with_context(|| format!("{}: not a recovery public key", path.display()))?;
        current.recovery = Some(*key.name());
    }
    Ok(current)
}
