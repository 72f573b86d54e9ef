//! What a call's record costs, against what the call costs: `cargo bench
//! --bench call_record`. Prints one table.
//!
//! The record is the line `server::observe` writes for every call. Its
//! audit fields, the key_id and the envelope's fingerprint (SHA-256 of the
//! ciphertext), are measured with and without, each built from a task's
//! call record as the server builds it and written to `/dev/null` with one
//! write(2), as stderr gets it. The calls are the TPM's share of Encrypt
//! (Create) and Decrypt (Load, Unseal, Flush) on an in-process swtpm, with
//! the salted session: less than a whole call through the socket, so the
//! percentages are upper bounds, and swtpm is 100 to 1000 times faster than
//! a hardware TPM, which shrinks them further. Every figure is from one run.

/// The daemon's allocator, as the server pays for it.
#[global_allocator]
static ALLOCATOR: sceau_sys::alloc::WipeOnFree = sceau_sys::alloc::WipeOnFree;

use std::io::Write as _;
use std::time::{Duration, Instant};

use sceau::metrics::Method;
use sceau::metrics::call::{CallRecord, note_envelope, note_uid};
use sceau::server::observe::log_line;
use sceau_testkit::{Swtpm, TempDir, random_bytes};
use sceau_tpm::sealed::LoadableObject;
use sceau_tpm::secret::Dek;
use sceau_tpm::{Tpm, TpmConfig};

const CALLS: usize = 200;
const RECORDS: usize = 20_000;
/// The envelope a Decrypt names: the size `sceau check` reports.
const ENVELOPE_LEN: usize = 211;

fn main() {
    let tmp = TempDir::new("bench-call-record");
    let swtpm = Swtpm::start(&tmp.subdir("tpm"));
    let mut tpm = Tpm::open(&TpmConfig::plain(swtpm.tcti().parse().expect("swtpm TCTI")))
        .expect("the TPM opens");
    let deks: Vec<Dek> = (0..CALLS)
        .map(|_| Dek::copy_from(&random_bytes(32)))
        .collect();
    let started = Instant::now();
    let sealed: Vec<_> = deks.iter().map(|d| tpm.seal(d, 0).expect("seal")).collect();
    let encrypt = started.elapsed() / CALLS as u32;
    let objects: Vec<LoadableObject> = sealed
        .iter()
        .map(|b| LoadableObject::from_blobs(b).unwrap())
        .collect();
    let started = Instant::now();
    for object in &objects {
        drop(tpm.unseal(object, 0).expect("unseal"));
    }
    let decrypt = started.elapsed() / CALLS as u32;

    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let ciphertext = random_bytes(ENVELOPE_LEN);
    let mut sink = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/null")
        .expect("/dev/null");
    let mut records = |with_fields: bool| -> Duration {
        let started = Instant::now();
        for i in 0..RECORDS {
            let record = CallRecord::new();
            let line = runtime.block_on(record.clone().scope(async {
                note_uid("5b0d6a1e-6d52-4b59-9f0e-0c7a9d1b2c3d");
                if with_fields {
                    note_envelope("sceau-2.7-1008d9f4f20c19f8", &ciphertext);
                }
                log_line(
                    Method::Decrypt,
                    &record,
                    0,
                    None,
                    Duration::from_micros(900 + i as u64 % 7),
                )
            }));
            sink.write_all(format!("<6>{line}\n").as_bytes())
                .expect("a write to /dev/null");
        }
        started.elapsed() / RECORDS as u32
    };
    // Alternating rounds, the median of each, against the machine's noise.
    let mut without = Vec::new();
    let mut with = Vec::new();
    for _ in 0..5 {
        without.push(records(false));
        with.push(records(true));
    }
    without.sort();
    with.sort();
    let (without, with) = (without[2], with[2]);
    let added = with.saturating_sub(without);
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let percent =
        |part: Duration, whole: Duration| 100.0 * part.as_secs_f64() / whole.as_secs_f64();
    println!(
        "call records on swtpm ({CALLS} calls, {RECORDS} records a round, median of 5 rounds)"
    );
    println!("| what | µs | % of Encrypt | % of Decrypt |");
    println!("|---|---:|---:|---:|");
    println!("| Encrypt's TPM work (Create) | {:.1} | | |", us(encrypt));
    println!(
        "| Decrypt's TPM work (Load, Unseal, Flush) | {:.1} | | |",
        us(decrypt)
    );
    for (what, cost) in [
        ("record without key_id and fingerprint", without),
        ("record with key_id and fingerprint", with),
        ("the two audit fields alone", added),
    ] {
        println!(
            "| {what} | {:.2} | {:.3} | {:.3} |",
            us(cost),
            percent(cost, encrypt),
            percent(cost, decrypt)
        );
    }
}
