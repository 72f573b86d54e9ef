//! `sceau kek rotate|list|retire`: the KEK generations of this TPM
//! (`sceau_tpm::kek`), and the ledger in the state directory that
//! remembers when each was made and which key_id it was served under
//! (`sceau::kek`).
//!
//! The TPM is the authority on which generations exist: `list` reads it,
//! and a generation the ledger remembers but the TPM no longer holds is
//! retired, whatever the ledger says.
#![forbid(unsafe_code)]

use std::collections::BTreeSet;

use anyhow::{Context as _, bail};
use sceau::cli::{KekOptions, KekStep};
use sceau::events::{self, Event, Kind};
use sceau::kek::{StateDir, now};
use sceau_format::kek::{KeyIdRecord, Ledger, MAX_OPEN_GENERATIONS, key_id, single_node_config};
use sceau_format::key_id::hex;
use sceau_format::text::utc;
use sceau_tpm::device::Generations;
use sceau_tpm::{Observer, ParameterEncryption, Tpm, TpmConfig};

pub fn run(options: &KekOptions) -> anyhow::Result<()> {
    super::silence_tss_log(super::RevealingTssLog::Warn)?;
    if !matches!(options.step, KekStep::List { .. }) {
        events::connect_for_command();
    }
    let create = matches!(options.step, KekStep::Rotate);
    let state = StateDir::open(&options.state_dir, create)?;
    let mut tpm = open(options)?;
    let generations = tpm
        .read_generations()
        .context("reading the KEK generations")?;
    let mut ledger = state.read_ledger()?;
    note_what_the_tpm_holds(&mut ledger, &generations);
    match options.step {
        KekStep::Rotate => rotate(&mut tpm, &state, ledger, &generations),
        KekStep::List { json } => {
            print!("{}", listing(&ledger, &generations, json));
            Ok(())
        }
        KekStep::Retire { generation } => {
            retire(&mut tpm, &state, ledger, &generations, generation)
        }
    }
}

/// The TPM without the envelope signing key: the generations are storage
/// keys under the SRK, and nothing here signs.
fn open(options: &KekOptions) -> anyhow::Result<Tpm> {
    let config = TpmConfig {
        tcti: options.tpm.tcti.clone(),
        srk_handle: options.tpm.srk_handle,
        parameter_encryption: ParameterEncryption::SaltedSession,
        observer: Observer::none(),
        envelope_signing_key: false,
        boot_policy: None,
        owner_auth: sceau::credentials::owner_auth()?,
        pinned_srk_name: None,
    };
    Tpm::open_beside_others(&config).map_err(|error| {
        if let Some(detail) = error.detail() {
            log::debug!("tpm2-tss's account of the failure below: {detail}");
        }
        let error = anyhow::Error::new(error);
        match config.tcti.has_resource_manager() {
            true => error,
            // A device without one is opened exclusively: EBUSY while
            // sceau holds it.
            false => error.context(format!(
                "{} has no resource manager, so one process at a time uses it: stop sceau \
                 first (systemctl stop sceau), or use device:/dev/tpmrm0",
                config.tcti
            )),
        }
    })
}

fn note_what_the_tpm_holds(ledger: &mut Ledger, generations: &Generations) {
    let now = now();
    for (n, name) in &generations.open {
        ledger.note_generation(*n, name, now);
    }
    let gone: Vec<u32> = ledger
        .generations()
        .keys()
        .copied()
        .filter(|n| !generations.open.contains_key(n))
        .collect();
    for n in gone {
        ledger.note_retired(n, now);
    }
}

fn rotate(
    tpm: &mut Tpm,
    state: &StateDir,
    mut ledger: Ledger,
    generations: &Generations,
) -> anyhow::Result<()> {
    let open: BTreeSet<u32> = generations.open.keys().copied().collect();
    let number = ledger.next_generation(&open);
    let name = tpm.create_generation(number)?;
    ledger.note_generation(number, &name, now());
    // The configuration the node served last: its next reload then takes
    // this very key_id. Without a ledger, a node without a policy key.
    let config = ledger
        .last_config()
        .unwrap_or_else(|| single_node_config(None, None));
    let mut made = || -> anyhow::Result<KeyIdRecord> {
        let epoch = tpm.next_epoch()?;
        let record = KeyIdRecord {
            key_id: key_id(number, epoch, &name, &config),
            generation: number,
            epoch,
            config,
            at: now(),
        };
        ledger.note_key_id(record.clone());
        state.write_ledger(&ledger)?;
        Ok(record)
    };
    let record = made().with_context(|| {
        format!(
            "generation {number} was made in the TPM (persistent handle {:#010x}) and serves \
             from sceau's next reload, but its key_id could not be recorded",
            sceau_format::kek::generation_handle(number)
        )
    })?;
    println!("generation {number} key_id {}", record.key_id);
    events::emit(
        Event::new(
            Kind::KekRotated,
            format!(
                "kek rotate: generation {number} made, key_id {}",
                record.key_id
            ),
        )
        .field("GENERATION", number)
        .field("KEY_ID", &record.key_id),
    );
    eprintln!(
        "next: systemctl reload sceau; rewrite the Secrets; sceau-recover inventory \
         --require-current {}; then sceau kek retire the older generations",
        record.key_id
    );
    Ok(())
}

fn retire(
    tpm: &mut Tpm,
    state: &StateDir,
    mut ledger: Ledger,
    generations: &Generations,
    number: u32,
) -> anyhow::Result<()> {
    let (current, _) = generations.current();
    if number == 0 {
        bail!(
            "generation 0 is the SRK, which the TPM derives again from the owner hierarchy's \
             seed at every start: nothing short of clearing the owner hierarchy (tpm2_clear, \
             which also destroys every generation and every other owner key) destroys it. \
             Its envelopes stop opening only with a cleared TPM (docs/rotation-and-backup.md)"
        );
    }
    if number == current {
        bail!(
            "generation {number} is the current one, which new Secrets are sealed under: run \
             `sceau kek rotate`, reload sceau, rewrite the Secrets, then retire {number}"
        );
    }
    if !generations.open.contains_key(&number) {
        match ledger.generations().get(&number) {
            Some(record) if record.retired.is_some() => bail!(
                "generation {number} is already retired: this TPM no longer holds it \
                 (`sceau kek list`)"
            ),
            _ => bail!(
                "this TPM holds no generation {number}; its generations are {} (`sceau kek \
                 list`)",
                numbers(generations)
            ),
        }
    }
    tpm.destroy_generation(number)?;
    ledger.note_retired(number, now());
    let key_ids: Vec<String> = ledger
        .key_ids()
        .iter()
        .filter(|r| r.generation == number)
        .map(|r| r.key_id.to_string())
        .collect();
    if let Err(error) = state.write_ledger(&ledger) {
        log::warn!("generation {number} is destroyed, but the ledger was not updated: {error:#}");
    }
    let said = format!(
        "generation {number} retired: its key is destroyed in the TPM, and its envelopes{} \
         never open here again",
        match key_ids.is_empty() {
            true => String::new(),
            false => format!(" (key_id {})", key_ids.join(", ")),
        }
    );
    println!("{said}");
    events::emit(
        Event::new(Kind::KekRetired, format!("kek retire: {said}"))
            .field("GENERATION", number)
            .field("KEY_IDS", key_ids.join(" ")),
    );
    Ok(())
}

fn numbers(generations: &Generations) -> String {
    generations
        .open
        .keys()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// `kek list`: one line a generation, or one JSON object a line.
fn listing(ledger: &Ledger, generations: &Generations, json: bool) -> String {
    let (current, _) = generations.current();
    let mut numbers: BTreeSet<u32> = generations.open.keys().copied().collect();
    numbers.extend(ledger.generations().keys());
    let mut text = match json {
        true => String::new(),
        false => format!(
            "{:<10}  {:<7}  {:<20}  {}\n",
            "generation", "state", "made", "key_id"
        ),
    };
    for n in numbers {
        let state = match (n == current, generations.open.contains_key(&n)) {
            (true, _) => "current",
            (false, true) => "open",
            (false, false) => "retired",
        };
        let made = ledger
            .generations()
            .get(&n)
            .map_or_else(|| "unknown".to_string(), |g| utc(g.made));
        let key_id = ledger
            .key_ids()
            .iter()
            .rev()
            .find(|r| r.generation == n)
            .map_or_else(|| "-".to_string(), |r| r.key_id.to_string());
        let name = generations
            .open
            .get(&n)
            .or_else(|| ledger.generations().get(&n).map(|g| &g.name))
            .map(|name| hex(name))
            .unwrap_or_default();
        text.push_str(&match json {
            true => format!(
                "{{\"generation\":{n},\"state\":\"{state}\",\"made\":\"{made}\",\"key_id\":\"{key_id}\",\"name\":\"{name}\"}}\n"
            ),
            false => format!("{n:<10}  {state:<7}  {made:<20}  {key_id}\n"),
        });
    }
    if !json {
        let open = generations.open.len() - 1;
        text.push_str(&format!(
            "{open} of {MAX_OPEN_GENERATIONS} generation slots in use (generation 0, the SRK, takes none)\n"
        ));
    }
    text
}
