//! sceau's benchmark: `cargo bench --bench throughput`. Prints one table.
//!
//! Every figure comes from one run against one private swtpm, so the ratios
//! compare like with like on a shared, noisy machine:
//! (a) Encrypt/Decrypt through the unix socket (gRPC, the service layer and
//!     the TPM worker, in this process) with 1 and 16 clients, and
//! (b) the same TPM command sequences called directly in-process,
//! each with the salted session on and off. It also measures exec → first
//! served Status of the real binary, and the binary's idle RSS.
//! Absolute times on swtpm say nothing about a hardware TPM (100–1000× slower).

#[allow(dead_code, unused_imports)]
#[path = "../tests/integration/harness/mod.rs"]
mod harness;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use harness::{Swtpm, TempDir};
use sceau::client::{KmsClient, connect};
use sceau::kms::KmsService;
use sceau::pb::{DecryptRequest, EncryptRequest, StatusRequest};
use sceau::secret::Dek;
use sceau::tpm::sealed::LoadableObject;
use sceau::tpm::worker::{DEFAULT_DEADLINE, TpmWorker};
use sceau::tpm::{ParameterEncryption, Tpm, TpmConfig};
use tss_esapi::tcti_ldr::TctiNameConf;

const OPS_PER_CLIENT_SERIAL: usize = 300;
const OPS_PER_CLIENT_PARALLEL: usize = 40;
const PARALLEL_CLIENTS: usize = 16;
const STARTUP_RUNS: usize = 7;

/// Latencies of one measured series.
struct Series {
    latencies: Vec<Duration>,
    wall: Duration,
}

impl Series {
    fn ops_per_sec(&self) -> f64 {
        self.latencies.len() as f64 / self.wall.as_secs_f64()
    }

    fn percentile(&self, p: f64) -> Duration {
        let mut sorted = self.latencies.clone();
        sorted.sort();
        sorted[((sorted.len() - 1) as f64 * p).round() as usize]
    }
}

struct Row {
    path: String,
    encrypt: Series,
    decrypt: Series,
}

fn main() {
    let tmp = TempDir::new("bench");
    let swtpm = Swtpm::start(&tmp.subdir("tpm"));
    let mut rows = Vec::new();
    let mut ratios = Vec::new();
    for encryption in [ParameterEncryption::SaltedSession, ParameterEncryption::Off] {
        let config = tpm_config(&swtpm, encryption);
        let label = match encryption {
            ParameterEncryption::SaltedSession => "salted",
            ParameterEncryption::Off => "no session",
        };
        let direct = in_process(&config);
        let socket = tmp.join(&format!("bench-{}.sock", rows.len()));
        let (one, sixteen) = through_socket(&config, &socket);
        ratios.push((
            label,
            one.encrypt.ops_per_sec() / direct.encrypt.ops_per_sec(),
            one.decrypt.ops_per_sec() / direct.decrypt.ops_per_sec(),
            sixteen.decrypt.ops_per_sec() / direct.decrypt.ops_per_sec(),
        ));
        for (path, row) in [("(b) in-process TPM", direct), ("(a) socket, 1 client", one), ("(a) socket, 16 clients", sixteen)] {
            rows.push(Row {
                path: format!("{path}, {label}"),
                ..row
            });
        }
    }
    print_table(&rows);
    println!();
    println!("| session | (a)/(b) Encrypt ops/s, 1 client | (a)/(b) Decrypt ops/s, 1 client | (a)/(b) Decrypt ops/s, 16 clients |");
    println!("|---|---|---|---|");
    for (label, enc, dec, dec16) in ratios {
        println!("| {label} | {enc:.2} | {dec:.2} | {dec16:.2} |");
    }
    println!();
    let (startup, rss_kib) = startup_and_rss(&tmp, &swtpm);
    println!("exec → first served Status (real binary, median of {STARTUP_RUNS}): {:.1} ms", ms(startup));
    println!("idle RSS of the serving binary: {:.1} MiB", rss_kib as f64 / 1024.0);
}

fn tpm_config(swtpm: &Swtpm, parameter_encryption: ParameterEncryption) -> TpmConfig {
    TpmConfig {
        tcti: swtpm.tcti().parse::<TctiNameConf>().expect("swtpm TCTI"),
        srk_handle: None,
        parameter_encryption,
    }
}

/// (b): Create, then Load+Unseal+Flush, called directly on an open TPM.
fn in_process(config: &TpmConfig) -> Row {
    let mut tpm = Tpm::open(config).expect("open TPM");
    let deks: Vec<Dek> = (0..OPS_PER_CLIENT_SERIAL).map(|_| Dek::copy_from(&harness::random_bytes(32))).collect();
    let mut sealed = Vec::new();
    let encrypt = measure(&deks, |dek| sealed.push(tpm.seal(dek).expect("seal")));
    let objects: Vec<LoadableObject> = sealed.iter().map(|b| LoadableObject::from_blobs(b).unwrap()).collect();
    let decrypt = measure(&objects, |object| drop(tpm.unseal(object).expect("unseal")));
    Row {
        path: String::new(),
        encrypt,
        decrypt,
    }
}

fn measure<T>(items: &[T], mut op: impl FnMut(&T)) -> Series {
    let started = Instant::now();
    let latencies = items
        .iter()
        .map(|item| {
            let t = Instant::now();
            op(item);
            t.elapsed()
        })
        .collect();
    Series {
        latencies,
        wall: started.elapsed(),
    }
}

/// (a): the library's own server on a unix socket, built as `sceau serve`
/// builds it, driven by gRPC clients on a runtime of their own, as the
/// apiserver would be in its own process.
fn through_socket(config: &TpmConfig, socket: &Path) -> (Row, Row) {
    let tpm = Tpm::open(config).expect("open TPM");
    let (worker, _death, thread) = TpmWorker::spawn(tpm, config.clone(), DEFAULT_DEADLINE).unwrap();
    let server_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let listener = {
        let _guard = server_runtime.enter();
        tokio::net::UnixListener::bind(socket).unwrap()
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let service = KmsService::new(Arc::new(worker));
    let server = server_runtime.spawn(sceau::server::serve(listener, service, async move {
        let _ = stopped.await;
        sceau::server::StopReason::Terminate
    }));
    let client_runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let rows = client_runtime.block_on(async {
        let one = clients(socket, 1, OPS_PER_CLIENT_SERIAL).await;
        let sixteen = clients(socket, PARALLEL_CLIENTS, OPS_PER_CLIENT_PARALLEL).await;
        (one, sixteen)
    });
    drop(client_runtime);
    let _ = stop.send(());
    server_runtime.block_on(server).unwrap().unwrap();
    drop(server_runtime);
    thread.join().unwrap();
    rows
}

/// `count` clients, each sealing `ops` DEKs and then opening them.
async fn clients(socket: &Path, count: usize, ops: usize) -> Row {
    let mut states = Vec::new();
    for _ in 0..count {
        let mut client = connect(socket).await.expect("connect");
        let key_id = client.status(StatusRequest {}).await.unwrap().into_inner().key_id;
        states.push(ClientState {
            client,
            key_id,
            ciphertexts: Vec::new(),
        });
    }
    let (states, encrypt) = phase(states, ops, Phase::Encrypt).await;
    let (_, decrypt) = phase(states, ops, Phase::Decrypt).await;
    Row {
        path: String::new(),
        encrypt,
        decrypt,
    }
}

struct ClientState {
    client: KmsClient,
    key_id: String,
    ciphertexts: Vec<Vec<u8>>,
}

#[derive(Clone, Copy)]
enum Phase {
    Encrypt,
    Decrypt,
}

/// Runs one phase on every client at once; the wall time spans all of them.
async fn phase(states: Vec<ClientState>, ops: usize, phase: Phase) -> (Vec<ClientState>, Series) {
    let started = Instant::now();
    let tasks: Vec<_> = states
        .into_iter()
        .map(|mut state| {
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(ops);
                for index in 0..ops {
                    let t = Instant::now();
                    match phase {
                        Phase::Encrypt => one_encrypt(&mut state).await,
                        Phase::Decrypt => one_decrypt(&mut state, index).await,
                    }
                    latencies.push(t.elapsed());
                }
                (state, latencies)
            })
        })
        .collect();
    let mut states = Vec::new();
    let mut latencies = Vec::new();
    for task in tasks {
        let (state, mut own) = task.await.unwrap();
        states.push(state);
        latencies.append(&mut own);
    }
    let series = Series {
        latencies,
        wall: started.elapsed(),
    };
    (states, series)
}

async fn one_encrypt(state: &mut ClientState) {
    let reply = state
        .client
        .encrypt(EncryptRequest {
            plaintext: harness::random_bytes(32),
            uid: String::new(),
        })
        .await
        .expect("encrypt");
    state.ciphertexts.push(reply.into_inner().ciphertext);
}

async fn one_decrypt(state: &mut ClientState, index: usize) {
    state
        .client
        .decrypt(DecryptRequest {
            ciphertext: state.ciphertexts[index].clone(),
            uid: String::new(),
            key_id: state.key_id.clone(),
            annotations: Default::default(),
        })
        .await
        .expect("decrypt");
}

/// Spawns the real binary until its first Status answers, then reads VmRSS.
fn startup_and_rss(tmp: &TempDir, swtpm: &Swtpm) -> (Duration, u64) {
    let mut startups = Vec::new();
    let mut rss = 0;
    for run in 0..STARTUP_RUNS {
        let socket = tmp.join(&format!("startup-{run}.sock"));
        let started = Instant::now();
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_sceau"))
            .args(["serve", "--tcti", &swtpm.tcti(), "--socket"])
            .arg(&socket)
            .env("SCEAU_LOG", "warn")
            .spawn()
            .expect("spawn sceau");
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(first_status(&socket));
        startups.push(started.elapsed());
        // Closes the client's connection, so the daemon's drain is immediate.
        drop(runtime);
        std::thread::sleep(Duration::from_secs(1));
        rss = vm_rss_kib(child.id());
        harness::process::send_signal(&child, libc::SIGTERM);
        child.wait().unwrap();
    }
    startups.sort();
    (startups[startups.len() / 2], rss)
}

async fn first_status(socket: &Path) {
    loop {
        if let Ok(mut client) = connect(socket).await
            && client.status(StatusRequest {}).await.is_ok()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

fn vm_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn print_table(rows: &[Row]) {
    println!("| path | Encrypt ops/s | Encrypt p50 ms | Encrypt p99 ms | Decrypt ops/s | Decrypt p50 ms | Decrypt p99 ms |");
    println!("|---|---|---|---|---|---|---|");
    for row in rows {
        let (e, d) = (&row.encrypt, &row.decrypt);
        println!(
            "| {} | {:.0} | {:.2} | {:.2} | {:.0} | {:.2} | {:.2} |",
            row.path,
            e.ops_per_sec(),
            ms(e.percentile(0.5)),
            ms(e.percentile(0.99)),
            d.ops_per_sec(),
            ms(d.percentile(0.5)),
            ms(d.percentile(0.99)),
        );
    }
}
