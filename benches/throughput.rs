//! sceau's benchmark: `cargo bench --features insecure-test-hooks --bench
//! throughput` (the feature allows the no-session comparison). Prints tables.
//!
//! Every figure comes from one run against one private swtpm, so the ratios
//! compare like with like on a shared, noisy machine:
//! (a) Encrypt/Decrypt through the unix socket (gRPC, the service layer and
//!     the TPM worker, in this process) with 1 and 16 clients, and
//! (b) the same TPM command sequences called directly in-process,
//! each with the salted session on and off; then (c) cluster mode (three
//! members and a recovery key: Encrypt wraps in software, Decrypt adds
//! TPM2_Import) against single-node mode, both through the socket. It also
//! measures exec → first served Status of the real binary, and its idle RSS;
//! and (e) the commands per call and their time on modelled hardware (the
//! test kit's TPM proxy with its discrete and firmware TPM profiles).
//! Absolute times on swtpm say nothing about a hardware TPM (100–1000× slower).

/// The daemon's allocator, so that both paths pay for wiping as sceau does.
#[global_allocator]
static ALLOCATOR: sceau_sys::alloc::WipeOnFree = sceau_sys::alloc::WipeOnFree;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sceau_format::members::{Member, Membership, member_file};
use sceau_format::recovery_key::RecoveryIdentity;
use sceau_format::signing_key::SoftwareSigner;
use sceau_kms_api::pb::{DecryptRequest, EncryptRequest, StatusRequest};
use sceau_kms_api::{KmsClient, connect};
use sceau_testkit::footprint::{self, Footprint};
use sceau_testkit::process::send_signal;
use sceau_testkit::tpm_proxy::{Profile, TpmProxy, command_code};
use sceau_testkit::{Swtpm, TempDir, random_bytes};
use sceau_tpm::sealed::LoadableObject;
use sceau_tpm::secret::Dek;
use sceau_tpm::worker::{DEFAULT_DEADLINE, TpmWorker};
use sceau_tpm::{ParameterEncryption, Tpm, TpmConfig};

/// Rounds alternate the paths, so that load from other tenants of the
/// machine hits both alike; each ratio is the median of per-round ratios.
const ROUNDS: usize = 7;
const OPS_PER_ROUND: usize = 60;
const PARALLEL_CLIENTS: usize = 16;
const STARTUP_RUNS: usize = 7;

/// Latencies of one measured series.
#[derive(Default)]
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

    fn absorb(&mut self, mut other: Series) {
        self.latencies.append(&mut other.latencies);
        self.wall += other.wall;
    }
}

#[derive(Default)]
struct Row {
    path: String,
    encrypt: Series,
    decrypt: Series,
}

impl Row {
    fn absorb(&mut self, other: Row) {
        self.encrypt.absorb(other.encrypt);
        self.decrypt.absorb(other.decrypt);
    }
}

/// Per-round (a)/(b) throughput ratios.
#[derive(Default)]
struct Ratios {
    encrypt: Vec<f64>,
    decrypt: Vec<f64>,
    decrypt_parallel: Vec<f64>,
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let tmp = TempDir::new("bench");
    // sceau flushes every transient object it finds at start (a TPM without
    // a resource manager is assumed to be its own), so each path gets a
    // swtpm of its own.
    let direct_swtpm = Swtpm::start(&tmp.subdir("tpm-direct"));
    let swtpm = Swtpm::start(&tmp.subdir("tpm"));
    let mut rows = Vec::new();
    let mut summary = Vec::new();
    for encryption in [ParameterEncryption::SaltedSession, ParameterEncryption::Off] {
        let label = match encryption {
            ParameterEncryption::SaltedSession => "salted session",
            ParameterEncryption::Off => "no session",
        };
        let direct_config = tpm_config(&direct_swtpm, encryption);
        let config = tpm_config(&swtpm, encryption);
        let socket = tmp.join(&format!("bench-{}.sock", summary.len()));
        let (mut measured, mut ratios) = alternate_rounds(&direct_config, &config, &socket);
        for (row, path) in measured.iter_mut().zip([
            "(b) in-process TPM",
            "(a) socket, 1 client",
            "(a) socket, 16 clients",
        ]) {
            row.path = format!("{path}, {label}");
        }
        rows.extend(measured);
        summary.push((
            label,
            median(&mut ratios.encrypt),
            median(&mut ratios.decrypt),
            median(&mut ratios.decrypt_parallel),
        ));
    }
    let (cluster_rows, mut cluster_ratios) = cluster_rounds(&tmp, &swtpm, &direct_swtpm);
    rows.extend(cluster_rows);
    print_table(&rows);
    println!();
    println!("| cluster/single, 1 client | Encrypt | Decrypt |");
    println!("|---|---|---|");
    println!(
        "| 3 members + recovery key | {:.2} | {:.2} |",
        median(&mut cluster_ratios.encrypt),
        median(&mut cluster_ratios.decrypt)
    );
    println!();
    println!(
        "| session | (a)/(b) Encrypt, 1 client | (a)/(b) Decrypt, 1 client | (a)/(b) Decrypt, 16 clients |"
    );
    println!("|---|---|---|---|");
    for (label, encrypt, decrypt, parallel) in summary {
        println!("| {label} | {encrypt:.2} | {decrypt:.2} | {parallel:.2} |");
    }
    println!("(ratios of ops/s, median over {ROUNDS} alternating rounds)");
    println!();
    modelled_hardware(&tmp);
    println!();
    let (startup, idle) = startup_and_rss(&tmp, &swtpm.tcti());
    println!(
        "exec → first served Status (real binary, median of {STARTUP_RUNS}): {:.1} ms",
        ms(startup)
    );
    println!(
        "idle RSS of the serving binary: {:.1} MiB ({idle})",
        idle.memory.rss_kib as f64 / 1024.0
    );
}

fn tpm_config(swtpm: &Swtpm, parameter_encryption: ParameterEncryption) -> TpmConfig {
    TpmConfig {
        parameter_encryption,
        ..TpmConfig::plain(swtpm.tcti().parse().expect("swtpm TCTI"))
    }
}

/// (b): Create, then Load+Unseal+Flush, called directly on an open TPM.
fn in_process(tpm: &mut Tpm, ops: usize) -> Row {
    let deks: Vec<Dek> = (0..ops)
        .map(|_| Dek::copy_from(&random_bytes(32)))
        .collect();
    let mut sealed = Vec::new();
    let encrypt = measure(&deks, |dek| sealed.push(tpm.seal(dek, 0).expect("seal")));
    let objects: Vec<LoadableObject> = sealed
        .iter()
        .map(|b| LoadableObject::from_blobs(b).unwrap())
        .collect();
    let decrypt = measure(&objects, |object| {
        drop(tpm.unseal(object, 0).expect("unseal"))
    });
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

/// (b) runs on a TPM context of the bench's own, (a) through the library's server on a unix socket, built as `sceau serve`
/// builds it, with clients on a runtime of their own, as the apiserver would
/// be in its own process.
fn alternate_rounds(direct: &TpmConfig, config: &TpmConfig, socket: &Path) -> ([Row; 3], Ratios) {
    let mut direct_tpm = Tpm::open(direct).expect("open TPM");
    let server = ServerUnderTest::start(config, socket);
    let clients = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut rows: [Row; 3] = Default::default();
    let mut ratios = Ratios::default();
    for _ in 0..ROUNDS {
        let direct = in_process(&mut direct_tpm, OPS_PER_ROUND);
        let one = clients.block_on(drive(socket, 1, OPS_PER_ROUND));
        let sixteen = clients.block_on(drive(
            socket,
            PARALLEL_CLIENTS,
            OPS_PER_ROUND / PARALLEL_CLIENTS + 1,
        ));
        let direct_decrypt = direct.decrypt.ops_per_sec();
        ratios
            .encrypt
            .push(one.encrypt.ops_per_sec() / direct.encrypt.ops_per_sec());
        ratios
            .decrypt
            .push(one.decrypt.ops_per_sec() / direct_decrypt);
        ratios
            .decrypt_parallel
            .push(sixteen.decrypt.ops_per_sec() / direct_decrypt);
        rows[0].absorb(direct);
        rows[1].absorb(one);
        rows[2].absorb(sixteen);
    }
    drop(clients);
    drop(direct_tpm);
    server.stop();
    (rows, ratios)
}

/// (c): single-node and cluster-mode servers, each on its own swtpm, driven
/// alternately by one client; ratios are cluster over single.
fn cluster_rounds(tmp: &TempDir, single_tpm: &Swtpm, cluster_tpm: &Swtpm) -> ([Row; 2], Ratios) {
    let single_config = tpm_config(single_tpm, ParameterEncryption::SaltedSession);
    let cluster_config = TpmConfig {
        envelope_signing_key: true,
        ..tpm_config(cluster_tpm, ParameterEncryption::SaltedSession)
    };
    let single_socket = tmp.join("bench-single.sock");
    let cluster_socket = tmp.join("bench-cluster.sock");
    let single = ServerUnderTest::start(&single_config, &single_socket);
    let membership = bench_membership(tmp, &cluster_config);
    let cluster = ServerUnderTest::start_with(&cluster_config, &cluster_socket, Some(membership));
    let clients = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut rows: [Row; 2] = Default::default();
    let mut ratios = Ratios::default();
    for _ in 0..ROUNDS {
        let one = clients.block_on(drive(&single_socket, 1, OPS_PER_ROUND));
        let clustered = clients.block_on(drive(&cluster_socket, 1, OPS_PER_ROUND));
        let ratio = |c: &Series, s: &Series| c.ops_per_sec() / s.ops_per_sec();
        ratios.encrypt.push(ratio(&clustered.encrypt, &one.encrypt));
        ratios.decrypt.push(ratio(&clustered.decrypt, &one.decrypt));
        rows[0].absorb(one);
        rows[1].absorb(clustered);
    }
    rows[0].path = "(c) socket, 1 client, single-node mode".into();
    rows[1].path = "(c) socket, 1 client, cluster mode (3 members + recovery)".into();
    drop(clients);
    single.stop();
    cluster.stop();
    (rows, ratios)
}

/// This TPM's keys, two software P-256 members and a recovery key, as member
/// files in a directory, loaded the way `serve --members` loads them.
fn bench_membership(tmp: &TempDir, config: &TpmConfig) -> Arc<Membership> {
    let own = Tpm::open(config).unwrap().member().unwrap();
    let dir = tmp.subdir("bench-members");
    let others = [1u8, 2].map(|seed| Member {
        srk: RecoveryIdentity::generate().public().clone(),
        signing: SoftwareSigner::from_bytes(&[seed; 32]).public(),
    });
    for (i, member) in std::iter::once(&own).chain(&others).enumerate() {
        let file = member_file(member, &sceau_tpm::KeyId::from_srk_name(member.srk.name()));
        std::fs::write(dir.join(format!("node-{i}.pub")), file).unwrap();
    }
    let recovery = tmp.join("bench-recovery.pub");
    std::fs::write(&recovery, RecoveryIdentity::generate().public_file()).unwrap();
    Arc::new(
        sceau::cluster::load::load(&dir, Some(&recovery), &[(0, own)], None)
            .unwrap()
            .0,
    )
}

/// The service, the TPM worker and the gRPC server, as in the daemon.
struct ServerUnderTest {
    runtime: tokio::runtime::Runtime,
    stop: tokio::sync::oneshot::Sender<()>,
    server: tokio::task::JoinHandle<Result<sceau::server::StopReason, std::convert::Infallible>>,
    worker_thread: std::thread::JoinHandle<()>,
}

impl ServerUnderTest {
    fn start(config: &TpmConfig, socket: &Path) -> Self {
        Self::start_with(config, socket, None)
    }

    fn start_with(config: &TpmConfig, socket: &Path, membership: Option<Arc<Membership>>) -> Self {
        let tpm = Tpm::open(config).expect("open TPM");
        // Generation 0 under its key_id of before generations: the bench
        // measures the calls, not the ledger.
        let keys = Arc::new(sceau::kms::ServedKeys::fixed(tpm.key_id()));
        let (worker, _death, worker_thread) =
            TpmWorker::spawn(tpm, config.clone(), DEFAULT_DEADLINE).unwrap();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let listener = {
            let _guard = runtime.enter();
            tokio::net::UnixListener::bind(socket).unwrap()
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let service = sceau::kms::service_for(Arc::new(worker), keys, membership, false)
            .expect("wrapping thread");
        let callers = sceau::server::peer::AllowedCallers::root_and(&[]);
        let server = runtime.spawn(sceau::server::serve(
            listener,
            service,
            callers,
            DEFAULT_DEADLINE,
            async move {
                let _ = stopped.await;
                sceau::server::StopReason::Terminate
            },
        ));
        Self {
            runtime,
            stop,
            server,
            worker_thread,
        }
    }

    fn stop(self) {
        let _ = self.stop.send(());
        self.runtime.block_on(self.server).unwrap().unwrap();
        drop(self.runtime);
        self.worker_thread.join().unwrap();
    }
}

/// `count` clients, each sealing `ops` DEKs and then opening them.
async fn drive(socket: &Path, count: usize, ops: usize) -> Row {
    let mut states = Vec::new();
    for _ in 0..count {
        let mut client = connect(socket).await.expect("connect");
        let key_id = client
            .status(StatusRequest {})
            .await
            .unwrap()
            .into_inner()
            .key_id;
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
            plaintext: random_bytes(32),
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

/// (e) The TPM command sequences on modelled hardware: each profile of the test
/// kit's TPM proxy (crates/testkit/profiles) in front of a swtpm of its own.
/// Counts the commands the proxy sees per Encrypt and per Decrypt (the
/// in-process sequences, as `sceau serve` runs them) and at `Tpm::open`, and
/// times them; "before the unsent scrub" is the same profile's time for the
/// sequences sceau ran while it scrubbed tpm2-tss's buffers with TPM commands
/// (Create + Load + FlushContext; Load + Unseal + FlushContext + Hash),
/// modelled, not measured. Then exec → first served Status of the real binary
/// through the proxy.
fn modelled_hardware(tmp: &TempDir) {
    const CALLS: usize = 5;
    println!(
        "| profile | commands at open | open ms | commands per Encrypt | Encrypt p50 ms | \
         before the unsent scrub, modelled ms | commands per Decrypt | Decrypt p50 ms | \
         before the unsent scrub, modelled ms | exec → first Status ms |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (name, profile) in [
        ("discrete TPM", Profile::discrete_tpm()),
        ("firmware TPM", Profile::firmware_tpm()),
    ] {
        let modelled = |commands: &[&str]| -> f64 {
            commands
                .iter()
                .map(|c| ms(profile.latency(command_code(c).expect("a named command"))))
                .sum()
        };
        let encrypt_before = modelled(&["Create", "Load", "FlushContext"]);
        let decrypt_before = modelled(&["Load", "Unseal", "FlushContext", "Hash"]);
        let swtpm = Swtpm::start(&tmp.subdir(&format!("tpm-{}", name.replace(' ', "-"))));
        let proxy = TpmProxy::start(swtpm.port(), profile);
        let config = TpmConfig::plain(proxy.tcti().parse().expect("proxy TCTI"));
        let opened = Instant::now();
        let mut tpm = Tpm::open(&config).expect("open the TPM through the proxy");
        let open_ms = ms(opened.elapsed());
        let at_open = proxy.total_commands();
        proxy.reset_counts();
        let row = in_process(&mut tpm, CALLS);
        let counts = proxy.counts();
        let per_call = |commands: &[&str]| -> String {
            let total: u64 = commands.iter().filter_map(|c| counts.get(*c)).sum();
            format!("{:.0}", total as f64 / CALLS as f64)
        };
        drop(tpm);
        let startup = startup_and_rss(tmp, &proxy.tcti()).0;
        println!(
            "| {name} | {at_open} | {open_ms:.0} | {} | {:.0} | {encrypt_before:.0} | {} | {:.0} | \
             {decrypt_before:.0} | {:.0} |",
            per_call(&["Create"]),
            ms(row.encrypt.percentile(0.5)),
            per_call(&["Load", "Unseal", "FlushContext", "Hash"]),
            ms(row.decrypt.percentile(0.5)),
            ms(startup),
        );
        let unexpected: Vec<_> = counts
            .keys()
            .filter(|c| !["Create", "Load", "Unseal", "FlushContext"].contains(&c.as_str()))
            .collect();
        assert!(
            unexpected.is_empty(),
            "commands other than Create, Load, Unseal and FlushContext per call: {counts:?}"
        );
    }
    println!(
        "(each profile: {CALLS} Encrypts then {CALLS} Decrypts in-process with the salted \
         session; exec → first Status: median of {STARTUP_RUNS} starts of the real binary)"
    );
}

/// Spawns the real binary on `tcti` until its first Status answers, then
/// reads its footprint (RSS from smaps_rollup, fds, threads) a second later.
fn startup_and_rss(tmp: &TempDir, tcti: &str) -> (Duration, Footprint) {
    let mut startups = Vec::new();
    let mut idle = None;
    for run in 0..STARTUP_RUNS {
        // One socket per TPM and run: the TCTI ends with the TPM's port.
        let port = tcti.rsplit('=').next().unwrap_or_default();
        let socket = tmp.join(&format!("startup-{port}-{run}.sock"));
        let started = Instant::now();
        // As the unit starts it: the malloc tunables set, no re-exec.
        let mut child = sceau_testkit::sceau::bench_serve_command(
            Path::new(env!("CARGO_BIN_EXE_sceau")),
            tcti,
            &socket,
        )
        .spawn()
        .expect("spawn sceau");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(first_status(&socket));
        startups.push(started.elapsed());
        // Closes the client's connection, so the daemon's drain is immediate.
        drop(runtime);
        std::thread::sleep(Duration::from_secs(1));
        idle = Some(footprint::footprint(child.id()).expect("the daemon's footprint"));
        send_signal(&child, libc::SIGTERM);
        child.wait().unwrap();
    }
    startups.sort();
    (
        startups[startups.len() / 2],
        idle.expect("at least one run"),
    )
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

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn print_table(rows: &[Row]) {
    println!(
        "| path | Encrypt ops/s | Encrypt p50 ms | Encrypt p99 ms | Decrypt ops/s | Decrypt p50 ms | Decrypt p99 ms |"
    );
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
