//! The key_ids a serving daemon accepts and the one it serves, shared by
//! both modes and replaced whole by a reload (`systemctl reload sceau`)
//! while calls are in flight: a call reads one table from start to end, so
//! the key_id it reports and the generation it seals under always agree.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, RwLock};

use sceau_format::kek::{KeyIdRecord, KeyIdTable, Ledger, key_id};
use sceau_format::key_id::KeyId;
use sceau_tpm::Fault;
use sceau_tpm::device::Generations;

/// The key_ids a serving daemon accepts and the one it serves, shared by
/// the modes and replaced whole by a reload: a call reads one table from
/// start to end, so its key_id and generation always agree.
pub struct ServedKeys {
    table: RwLock<Arc<KeyIdTable>>,
    /// The key_ids of before generations (all generation 0).
    legacy: Vec<KeyId>,
    /// What this node's key_ids name besides their generation.
    config: [u8; 32],
}

impl ServedKeys {
    pub fn new(
        current: KeyIdRecord,
        generations: &Generations,
        ledger: &Ledger,
        legacy: Vec<KeyId>,
        config: [u8; 32],
    ) -> Self {
        let (_, name) = generations.current();
        let table = KeyIdTable::new(
            current,
            name,
            &generations.open,
            generations
                .counter
                .max(ledger.key_ids().last().map_or(0, |r| r.epoch)),
            ledger.key_ids(),
            legacy.clone(),
        );
        Self {
            table: RwLock::new(Arc::new(table)),
            legacy,
            config,
        }
    }

    /// A table that never changes, with one key_id of the form before
    /// generations: for the fake TPM of unit tests, fuzz targets and the
    /// bench.
    pub fn fixed(key_id: KeyId) -> Self {
        let current = KeyIdRecord {
            key_id: key_id.clone(),
            generation: 0,
            epoch: 0,
            config: [0; 32],
            at: 0,
        };
        let table = KeyIdTable::new(
            current,
            &[],
            &BTreeMap::from([(0, Vec::new())]),
            0,
            [],
            [key_id.clone()],
        );
        Self {
            table: RwLock::new(Arc::new(table)),
            legacy: vec![key_id],
            config: [0; 32],
        }
    }

    pub fn table(&self) -> Arc<KeyIdTable> {
        self.table.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn config(&self) -> &[u8; 32] {
        &self.config
    }

    /// Serves from what the TPM holds now: the current generation's key_id
    /// stays if it is the same generation; a new current generation takes
    /// the key_id `kek rotate` allocated for it (at the counter's value,
    /// which the rotation took: the same key_id if the rotation used this
    /// node's configuration) or a new epoch from `take_epoch`. Returns the
    /// new table, already in place.
    pub async fn reload<F>(
        &self,
        generations: &Generations,
        now: u64,
        take_epoch: impl FnOnce() -> F,
    ) -> Result<Arc<KeyIdTable>, Fault>
    where
        F: Future<Output = Result<u64, Fault>>,
    {
        let before = self.table();
        let (generation, name) = generations.current();
        let unchanged = before.current.generation == generation && before.current_name == name;
        let epoch = match (unchanged, generations.counter > before.counter) {
            (true, _) => None,
            (false, true) => Some(generations.counter),
            (false, false) => Some(take_epoch().await?),
        };
        let current = match epoch {
            None => before.current.clone(),
            Some(epoch) => KeyIdRecord {
                key_id: key_id(generation, epoch, name, &self.config),
                generation,
                epoch,
                config: self.config,
                at: now,
            },
        };
        let counter = generations.counter.max(current.epoch);
        let table = Arc::new(KeyIdTable::new(
            current,
            name,
            &generations.open,
            counter,
            before.known(),
            self.legacy.clone(),
        ));
        *self.table.write().unwrap_or_else(|e| e.into_inner()) = table.clone();
        Ok(table)
    }
}
