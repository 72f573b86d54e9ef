//! Start-up time and memory of the real daemon, against the targets of docs/performance.md:
//! exec → READY=1 and exec → first served Status, then the idle footprint
//! (RSS from smaps_rollup, fds, threads) after one Status, and optionally
//! after a bounded number of Encrypt/Decrypt calls.
//!
//! ```text
//! cargo run -p sceau-testkit --example footprint -- \
//!     --sceau target/release/sceau [--runs 7] [--calls 100000] [--clients 4] [--mappings]
//! ```
//!
//! Each run starts sceau on one private swtpm with its own sd_notify socket;
//! a client polls Status from the moment of exec. Medians over the runs are
//! printed; `--mappings` adds the resident KiB of the largest mappings of
//! the last run. The call load (all on the last run) is a fixed count of
//! Encrypt+Decrypt round trips shared by the clients; it stops by itself.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sceau_kms_api::pb::StatusRequest;
use sceau_testkit::footprint::{self, Footprint};
use sceau_testkit::notify::NotifyReceiver;
use sceau_testkit::process::send_signal;
use sceau_testkit::{Swtpm, TempDir, random_bytes, rpc};

/// Past the daemon's idle limit (10 s), so that the load's connections are
/// closed and their buffers freed before the second reading.
const SETTLE_AFTER_LOAD: Duration = Duration::from_secs(12);
const SETTLE_AFTER_STATUS: Duration = Duration::from_secs(1);
const START_LIMIT: Duration = Duration::from_secs(30);

struct Options {
    sceau: PathBuf,
    runs: usize,
    calls: usize,
    clients: usize,
    mappings: bool,
}

struct Run {
    ready: Duration,
    first_status: Duration,
    idle: Footprint,
}

fn main() {
    let options = parse_options();
    let tmp = TempDir::new("footprint");
    let tpm = Swtpm::start(&tmp.subdir("tpm"));
    let mut runs = Vec::new();
    for run in 0..options.runs {
        let last = run + 1 == options.runs;
        runs.push(measure_once(&options, &tmp, &tpm, run, last));
    }
    let median = |f: fn(&Run) -> Duration| {
        let mut values: Vec<Duration> = runs.iter().map(f).collect();
        values.sort();
        values[values.len() / 2]
    };
    let mut rss: Vec<u64> = runs.iter().map(|r| r.idle.memory.rss_kib).collect();
    rss.sort();
    println!(
        "exec → READY=1 (median of {}): {:.1} ms",
        runs.len(),
        ms(median(|r| r.ready))
    );
    println!(
        "exec → first served Status (median of {}): {:.1} ms",
        runs.len(),
        ms(median(|r| r.first_status))
    );
    println!(
        "idle RSS after one Status (median of {}): {:.1} MiB",
        runs.len(),
        rss[rss.len() / 2] as f64 / 1024.0
    );
}

fn measure_once(options: &Options, tmp: &TempDir, tpm: &Swtpm, run: usize, last: bool) -> Run {
    let socket = tmp.join(&format!("run-{run}.sock"));
    let notify_path = tmp.join(&format!("notify-{run}.sock"));
    let mut notify = NotifyReceiver::bind(&notify_path);
    let started = Instant::now();
    let mut child = Command::new(&options.sceau)
        .args(["serve", "--tcti", &tpm.tcti(), "--socket"])
        .arg(&socket)
        .env("NOTIFY_SOCKET", &notify_path)
        .env(
            "SCEAU_LOG",
            std::env::var("SCEAU_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdin(Stdio::null())
        .spawn()
        .expect("start sceau");
    let waiting_for_ready = std::thread::spawn(move || {
        assert!(notify.wait_for("READY=1", START_LIMIT), "no READY=1");
        notify
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let first_status = runtime.block_on(first_status(&socket)) - started;
    let notify = waiting_for_ready.join().expect("READY=1");
    let ready_at = notify
        .received
        .iter()
        .find(|(_, message)| message.contains("READY=1"))
        .map(|(at, _)| *at)
        .unwrap();
    std::thread::sleep(SETTLE_AFTER_STATUS);
    let pid = child.id();
    let idle = footprint::footprint(pid).expect("read the daemon's footprint");
    println!(
        "run {run}: READY {:.1} ms, Status {:.1} ms, idle {idle}",
        ms(ready_at - started),
        ms(first_status)
    );
    if last && options.mappings {
        print_mappings(pid);
    }
    if last && options.calls > 0 {
        let started_load = Instant::now();
        runtime.block_on(load(&socket, options.calls, options.clients));
        let elapsed = started_load.elapsed();
        std::thread::sleep(SETTLE_AFTER_LOAD);
        let after = footprint::footprint(pid).expect("read the daemon's footprint");
        println!(
            "after {} calls ({} clients, {:.0} s): {after}",
            options.calls,
            options.clients,
            elapsed.as_secs_f64()
        );
        if options.mappings {
            print_mappings(pid);
        }
    }
    drop(runtime);
    send_signal(&child, libc::SIGTERM);
    child.wait().expect("reap sceau");
    Run {
        ready: ready_at - started,
        first_status,
        idle,
    }
}

/// Polls Status from exec on; returns when the first one is answered.
async fn first_status(socket: &Path) -> Instant {
    let limit = Instant::now() + START_LIMIT;
    loop {
        if let Ok(mut client) = sceau_kms_api::connect(socket).await
            && client.status(StatusRequest {}).await.is_ok()
        {
            return Instant::now();
        }
        assert!(Instant::now() < limit, "no Status within {START_LIMIT:?}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// `calls` Encrypt and Decrypt calls (half each), shared by `clients`.
async fn load(socket: &Path, calls: usize, clients: usize) {
    let round_trips = calls.div_ceil(2);
    let mut tasks = tokio::task::JoinSet::new();
    for client_index in 0..clients {
        let share = round_trips / clients + usize::from(client_index < round_trips % clients);
        let socket = socket.to_path_buf();
        tasks.spawn(async move {
            let mut client = rpc::connect(&socket).await;
            let key_id = rpc::status(&mut client).await.key_id;
            for _ in 0..share {
                rpc::round_trip(&mut client, &key_id, &random_bytes(32)).await;
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("a load client failed");
    }
}

fn print_mappings(pid: u32) {
    let mappings = footprint::rss_by_mapping(pid).expect("read the daemon's smaps");
    for (name, kib) in mappings.iter().take(16) {
        println!("  {kib:>6} KiB  {name}");
    }
}

fn parse_options() -> Options {
    let mut options = Options {
        sceau: PathBuf::from("target/release/sceau"),
        runs: 7,
        calls: 0,
        clients: 4,
        mappings: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || {
            args.next()
                .unwrap_or_else(|| usage(&format!("{flag} needs a value")))
        };
        let number = |text: String| {
            text.parse::<usize>()
                .unwrap_or_else(|_| usage("not a number"))
        };
        match flag.as_str() {
            "--sceau" => options.sceau = PathBuf::from(value()),
            "--runs" => options.runs = number(value()).max(1),
            "--calls" => options.calls = number(value()),
            "--clients" => options.clients = number(value()).max(1),
            "--mappings" => options.mappings = true,
            other => usage(&format!("unknown option {other}")),
        }
    }
    if !options.sceau.exists() {
        usage(&format!(
            "{} does not exist: build it (cargo build --release --bin sceau) or pass --sceau",
            options.sceau.display()
        ));
    }
    options
}

fn usage(why: &str) -> ! {
    eprintln!(
        "footprint: {why}\nusage: footprint [--sceau PATH] [--runs N] [--calls N] [--clients N] [--mappings]"
    );
    std::process::exit(2)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
