//! `sceau-recover inventory`: the stored values of an etcd snapshot or
//! `etcdctl get -w json` output counted by resource, provider and key_id
//! (`sceau_recover::inventory`), with no key; `--require-current KEY_ID`
//! makes it the check that a rewrite finished before an old key is retired.

use sceau_recover::cli::InventoryOptions;
use sceau_recover::inventory::Inventory;

pub fn run(options: &InventoryOptions) -> anyhow::Result<()> {
    let values = super::etcd_values(&options.input)?;
    let inventory = Inventory::take(&values);
    if options.json {
        print!("{}", inventory.to_json());
    } else {
        print!("{}", inventory.to_text());
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
