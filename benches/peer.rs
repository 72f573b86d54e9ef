//! The side-by-side with the TPM peer plugin: sceau and
//! jc-lab/k8s-tpm-kms-plugin, each the real release binary on a fresh swtpm
//! of its own, driven by the same KMS v2 client (`sceau_kms_api`) in one run.
//! `scripts/bench-peer.sh` builds the peer and runs this with
//! `SCEAU_PEER_PLUGIN` set (and `SCEAU_BIN`, the release `sceau` to
//! measure; else Cargo's build of it for the bench); without
//! `SCEAU_PEER_PLUGIN` the bench says so and does nothing (so a bare
//! `cargo bench` still works). Not part of CI.
//!
//! After one unmeasured start of each (first-start work and a cold page
//! cache are nobody's steady state), each of ROUNDS rounds starts each plugin
//! afresh, in alternating order so that load from other tenants of the
//! machine hits both alike, and measures:
//! - exec → first Status answered with healthz "ok" (one connection attempt
//!   per millisecond);
//! - idle RSS (`Rss` of /proc/PID/smaps_rollup) SETTLE after that Status;
//! - Status, Encrypt and Decrypt latency, one client on one connection, each
//!   call awaited before the next; every Decrypt must give back its plaintext;
//! - RSS again, SETTLE after those calls, then SIGTERM.
//!
//! The ratio column is the median of the per-round ratios sceau/peer; the
//! value columns are medians over the rounds (for latencies, the p50 of all
//! rounds' calls together). Sizes are of copies stripped by strip(1), both
//! the same way.
//!
//! The two do different work per call by design: the peer unseals one domain
//! key at start and then does AES in memory; sceau does TPM work per
//! Encrypt and Decrypt. Absolute times on swtpm say nothing about a hardware
//! TPM (100–1000× slower), which only widens that gap.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sceau_kms_api::pb::{DecryptRequest, EncryptRequest, StatusRequest};
use sceau_kms_api::{KmsClient, connect};
use sceau_testkit::peer::{PeerPlugin, UnixSwtpm};
use sceau_testkit::process::{read_lossy, send_signal, wait_timeout};
use sceau_testkit::{Swtpm, TempDir, random_bytes};

const ROUNDS: usize = 7;
const STATUS_CALLS: usize = 100;
const CRYPTO_CALLS: usize = 100;
/// Between a measured phase and the RSS read: lets freed memory go back and
/// background start-up work (Go's GC, tokio's idle threads) finish.
const SETTLE: Duration = Duration::from_secs(1);
const FIRST_STATUS_TIMEOUT: Duration = Duration::from_secs(20);
const STOP_TIMEOUT: Duration = Duration::from_secs(20);
const PLAINTEXT_BYTES: usize = 32;

/// One plugin under test: how to start it serving on a socket.
struct Contender {
    name: &'static str,
    binary: PathBuf,
    serve: Box<dyn Fn(&Path) -> Command>,
    log: PathBuf,
}

/// What one round measured of one contender.
struct Round {
    first_status: Duration,
    rss_idle_kib: u64,
    rss_after_kib: u64,
    status: Vec<Duration>,
    encrypt: Vec<Duration>,
    decrypt: Vec<Duration>,
}

fn main() {
    let Some(peer_binary) = std::env::var_os("SCEAU_PEER_PLUGIN").map(PathBuf::from) else {
        println!(
            "peer bench skipped: SCEAU_PEER_PLUGIN is not set (run scripts/bench-peer.sh, which builds the peer and sets it)"
        );
        return;
    };
    assert!(
        peer_binary.is_file(),
        "SCEAU_PEER_PLUGIN={} is not a file: run scripts/bench-peer.sh",
        peer_binary.display()
    );
    let peer_version =
        std::env::var("SCEAU_PEER_VERSION").unwrap_or_else(|_| "version not given".into());

    let tmp = TempDir::new("bench-peer");
    // Each on a fresh TPM of its own: sceau flushes every transient object
    // it finds at start, and neither should see the other's commands.
    let sceau_tpm = Swtpm::start(&tmp.subdir("tpm-sceau"));
    let peer_tpm = UnixSwtpm::start(&tmp.subdir("tpm-peer"));
    let peer = PeerPlugin::provision(&peer_binary, &peer_tpm, &tmp.subdir("peer-data"));

    // The script passes the plain `cargo build --release` binary, the one
    // that ships and that scripts/size.sh measures: the bench's own build of
    // the bin (CARGO_BIN_EXE_sceau) has the dev-dependencies' features.
    let sceau_binary = std::env::var_os("SCEAU_BIN")
        .map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_sceau")), PathBuf::from);
    let tcti = sceau_tpm.tcti();
    let serve_sceau = {
        let binary = sceau_binary.clone();
        move |socket: &Path| sceau_testkit::sceau::bench_serve_command(&binary, &tcti, socket)
    };
    let contenders = [
        Contender {
            name: "sceau",
            binary: sceau_binary,
            serve: Box::new(serve_sceau),
            log: tmp.join("sceau.log"),
        },
        Contender {
            name: "peer",
            binary: peer_binary,
            serve: Box::new(move |socket: &Path| peer.serve_command(socket)),
            log: tmp.join("peer.log"),
        },
    ];

    for contender in &contenders {
        run_round(&tmp, contender, "warmup");
    }
    let mut rounds: [Vec<Round>; 2] = Default::default();
    for round in 0..ROUNDS {
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for index in order {
            let measured = run_round(&tmp, &contenders[index], &round.to_string());
            rounds[index].push(measured);
        }
    }
    let sizes = contenders
        .each_ref()
        .map(|c| stripped_size(&c.binary, &tmp));
    print_report(&rounds, sizes, &contenders[0].binary, &peer_version);
}

/// Starts `contender`, measures it, stops it.
fn run_round(tmp: &TempDir, contender: &Contender, label: &str) -> Round {
    // The client's runtime is the round's own: dropping it closes the
    // connection before SIGTERM (its connection task runs only inside the
    // runtime), so neither plugin waits out a drain on an idle client.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let socket = tmp.join(&format!("{}-{label}.sock", contender.name));
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&contender.log)
        .unwrap_or_else(|e| panic!("open {}: {e}", contender.log.display()));
    let log_err = log.try_clone().unwrap();
    let mut command = (contender.serve)(&socket);
    command.stdin(Stdio::null()).stdout(log).stderr(log_err);
    let started = Instant::now();
    let mut child = command
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {}: {e}", contender.binary.display()));
    let first = runtime.block_on(first_healthy_status(&socket, &mut child));
    let first_status = started.elapsed();
    let Some(mut client) = first else {
        stop(&mut child);
        panic!(
            "{} served no healthy Status within {FIRST_STATUS_TIMEOUT:?}; its log ({}):\n{}",
            contender.name,
            contender.log.display(),
            read_lossy(&contender.log)
        );
    };
    std::thread::sleep(SETTLE);
    let rss_idle_kib = rss_kib(&child);
    let (status, encrypt, decrypt) = runtime.block_on(calls(&mut client));
    std::thread::sleep(SETTLE);
    let rss_after_kib = rss_kib(&child);
    drop(client);
    drop(runtime);
    stop(&mut child);
    Round {
        first_status,
        rss_idle_kib,
        rss_after_kib,
        status,
        encrypt,
        decrypt,
    }
}

/// Tries once a millisecond until a Status says healthz "ok"; None if the
/// plugin exited or the timeout passed.
async fn first_healthy_status(socket: &Path, child: &mut Child) -> Option<KmsClient> {
    let deadline = Instant::now() + FIRST_STATUS_TIMEOUT;
    while Instant::now() < deadline {
        if let Ok(mut client) = connect(socket).await
            && let Ok(reply) = client.status(StatusRequest {}).await
            && reply.get_ref().healthz == "ok"
        {
            return Some(client);
        }
        if child.try_wait().unwrap().is_some() {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    None
}

type Latencies = Vec<Duration>;

/// STATUS_CALLS Status, then CRYPTO_CALLS Encrypt, then a Decrypt of each
/// ciphertext, checked against its plaintext.
async fn calls(client: &mut KmsClient) -> (Latencies, Latencies, Latencies) {
    let mut status = Vec::with_capacity(STATUS_CALLS);
    for _ in 0..STATUS_CALLS {
        let t = Instant::now();
        let reply = client.status(StatusRequest {}).await.expect("Status");
        status.push(t.elapsed());
        assert_eq!(reply.get_ref().healthz, "ok", "Status healthz");
    }
    let mut encrypt = Vec::with_capacity(CRYPTO_CALLS);
    let mut sealed = Vec::with_capacity(CRYPTO_CALLS);
    for _ in 0..CRYPTO_CALLS {
        let plaintext = random_bytes(PLAINTEXT_BYTES);
        let request = EncryptRequest {
            plaintext: plaintext.clone(),
            uid: String::new(),
        };
        let t = Instant::now();
        let reply = client.encrypt(request).await.expect("Encrypt").into_inner();
        encrypt.push(t.elapsed());
        sealed.push((plaintext, reply.ciphertext, reply.key_id));
    }
    let mut decrypt = Vec::with_capacity(CRYPTO_CALLS);
    for (plaintext, ciphertext, key_id) in sealed {
        let request = DecryptRequest {
            ciphertext,
            uid: String::new(),
            key_id,
            annotations: Default::default(),
        };
        let t = Instant::now();
        let reply = client.decrypt(request).await.expect("Decrypt").into_inner();
        decrypt.push(t.elapsed());
        assert!(
            reply.plaintext == plaintext,
            "Decrypt gave back another plaintext"
        );
    }
    (status, encrypt, decrypt)
}

/// SIGTERM, then SIGKILL if it is still running after STOP_TIMEOUT.
fn stop(child: &mut Child) {
    send_signal(child, libc::SIGTERM);
    if wait_timeout(child, STOP_TIMEOUT).is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// The resident set of the whole process, from smaps_rollup (the kernel's
/// sum over every mapping; VmRSS in /proc/PID/status is a cached counter).
fn rss_kib(child: &Child) -> u64 {
    let path = format!("/proc/{}/smaps_rollup", child.id());
    let rollup = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {path}: {e}"));
    rollup
        .lines()
        .find_map(|line| line.strip_prefix("Rss:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no Rss line in {path}"))
}

/// The size of a copy of `binary` stripped by strip(1) (binutils).
fn stripped_size(binary: &Path, tmp: &TempDir) -> u64 {
    let copy = tmp.join("stripped");
    let status = Command::new("strip")
        .arg("-o")
        .arg(&copy)
        .arg(binary)
        .status()
        .expect("run strip (binutils)");
    assert!(status.success(), "strip {} failed", binary.display());
    let bytes = std::fs::metadata(&copy).unwrap().len();
    std::fs::remove_file(&copy).unwrap();
    bytes
}

fn percentile(values: &[Duration], p: f64) -> Duration {
    let mut sorted = values.to_vec();
    sorted.sort();
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn median_f64(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// One table row: its value in one round, each contender's column over
/// all rounds, and (in `print_report`) the median of the per-round ratios.
struct Measure {
    label: String,
    unit: &'static str,
    value: Value,
}

enum Value {
    /// One number per round; the column is their median.
    PerRound(fn(&Round) -> f64),
    /// Call latencies; a round's value is their p50 and the column the p50
    /// of every round's latencies together.
    LatencyP50(fn(&Round) -> &Latencies),
}

impl Measure {
    fn latency(call: &str, calls: usize, pick: fn(&Round) -> &Latencies) -> Measure {
        Measure {
            label: format!("{call} p50, 1 client ({ROUNDS}×{calls} calls)"),
            unit: "ms",
            value: Value::LatencyP50(pick),
        }
    }

    fn per_round(label: String, unit: &'static str, value: fn(&Round) -> f64) -> Measure {
        Measure {
            label,
            unit,
            value: Value::PerRound(value),
        }
    }

    fn of_round(&self, round: &Round) -> f64 {
        match self.value {
            Value::PerRound(value) => value(round),
            Value::LatencyP50(pick) => ms(percentile(pick(round), 0.5)),
        }
    }

    fn column(&self, rounds: &[Round]) -> f64 {
        match self.value {
            Value::PerRound(_) => median_f64(rounds.iter().map(|r| self.of_round(r)).collect()),
            Value::LatencyP50(pick) => {
                let pooled: Latencies = rounds.iter().flat_map(|r| pick(r).clone()).collect();
                ms(percentile(&pooled, 0.5))
            }
        }
    }
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn print_report(rounds: &[Vec<Round>; 2], sizes: [u64; 2], sceau_binary: &Path, peer: &str) {
    let measures = [
        Measure::per_round(
            format!("exec → first served Status (median of {ROUNDS})"),
            "ms",
            |r| ms(r.first_status),
        ),
        Measure::latency("Status", STATUS_CALLS, |r| &r.status),
        Measure::latency("Encrypt", CRYPTO_CALLS, |r| &r.encrypt),
        Measure::latency("Decrypt", CRYPTO_CALLS, |r| &r.decrypt),
        Measure::per_round("idle RSS after start (median)".into(), "MiB", |r| {
            mib(r.rss_idle_kib)
        }),
        Measure::per_round(
            format!(
                "RSS after {} calls (median)",
                STATUS_CALLS + 2 * CRYPTO_CALLS
            ),
            "MiB",
            |r| mib(r.rss_after_kib),
        ),
    ];
    println!("| measure | sceau | peer | sceau/peer |");
    println!("|---|---|---|---|");
    for measure in &measures {
        let [sceau, peer] = rounds.each_ref().map(|r| measure.column(r));
        let ratio = median_f64(
            rounds[0]
                .iter()
                .zip(&rounds[1])
                .map(|(s, p)| measure.of_round(s) / measure.of_round(p))
                .collect(),
        );
        println!(
            "| {}, {} | {sceau:.2} | {peer:.2} | {ratio:.2} |",
            measure.label, measure.unit
        );
    }
    println!(
        "| stripped binary, bytes | {} | {} | {:.2} |",
        sizes[0],
        sizes[1],
        sizes[0] as f64 / sizes[1] as f64
    );
    println!();
    println!("sceau: {}", sceau_version(sceau_binary));
    println!("peer:  jc-lab/k8s-tpm-kms-plugin {peer}");
    println!(
        "date:  {}",
        command_line("date", &["-u", "+%Y-%m-%d %H:%M UTC"])
    );
    println!("machine: {}", machine());
    println!(
        "each plugin on its own fresh swtpm (sceau: TCP, peer: unix socket); {ROUNDS} rounds in alternating order after one unmeasured start of each; RSS is Rss of smaps_rollup {}s after the phase; ratio = median of per-round ratios",
        SETTLE.as_secs()
    );
}

fn sceau_version(binary: &Path) -> String {
    let output = Command::new(binary)
        .arg("--version")
        .output()
        .expect("run sceau --version");
    String::from_utf8_lossy(&output.stdout)
        .trim()
        .replace('\n', "; ")
}

/// A command's first line of output, or what failed.
fn command_line(program: &str, args: &[&str]) -> String {
    match Command::new(program).args(args).output() {
        Ok(output) => String::from_utf8_lossy(&output.stdout)
            .lines()
            .next()
            .unwrap_or_default()
            .to_string(),
        Err(e) => format!("({program}: {e})"),
    }
}

/// CPU model, core count and kernel: enough to tell two runs' machines apart.
fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!(
        "{cpu}, {cores} cores, Linux {}",
        command_line("uname", &["-r"])
    )
}
