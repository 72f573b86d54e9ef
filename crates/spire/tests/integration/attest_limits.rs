//! The server plugin under stalled attestations, served in-process on a
//! plugin socket and called over one HTTP/2 connection as SPIRE's host
//! calls it: payloads made in software from public data (an EK on the
//! allow list, a software AK) reach the challenge and are never answered.
//! At the caps the next attestation is refused at once with
//! RESOURCE_EXHAUSTED, other calls are still served, and once the stalls
//! end (cancelled, or at the answer deadline) a new attestation gets its
//! challenge.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sceau_rpc::client::{Bodies, Connection};
use sceau_spire::agent::tpm::{Attestation, EkAlgorithm, TpmSettings};
use sceau_spire::payload::{Challenge, ChallengeResponse, PLACE_PROOF_LEN, Payload, place_proof};
use sceau_spire::pb::health::HealthCheckRequest;
use sceau_spire::pb::health::health_client::HealthClient;
use sceau_spire::pb::server_attestor::node_attestor_client::NodeAttestorClient;
use sceau_spire::pb::server_attestor::{AttestRequest, attest_request, attest_response};
use sceau_spire::plugin::{self, CoreConfig, Plugin as _, PluginSocket, SocketOptions};
use sceau_spire::server::ServerPlugin;
use sceau_spire::server::keys::Key;
use sceau_spire::server::limits::{ANSWER_TIMEOUT, Limits, MAX_PENDING, MAX_PENDING_PER_EK};
use sceau_spire::server::structures::PublicArea;
use sceau_spire::server::verify::test_support::forgery_with_ek;
use sceau_testkit::{Swtpm, TempDir, Tpm2Tools};

use crate::synthetic_log::Log;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;
use tonic::codegen::http::Uri;
use tonic::{Code, Status, Streaming};
use zeroize::Zeroizing;

/// Far above any answer's time here: reaching it is a hang.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How soon a refusal for capacity must come: at once, not after a
/// stall's deadline (5 s by default); 3 s leaves room for a loaded machine.
const AT_ONCE: Duration = Duration::from_secs(3);

struct Served {
    plugin: Arc<ServerPlugin>,
    connection: Connection,
    _stop: oneshot::Sender<()>,
    _dir: TempDir,
}

/// A PERMISSION_DENIED refusal whose message contains `text`.
fn assert_denied(status: &Status, text: &str) {
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    assert!(status.message().contains(text), "{status:?}");
}

/// The server plugin with `limits`, configured with an allow list of the
/// EK hashes `allowed` (written into `dir`).
fn configured(limits: Limits, dir: &TempDir, allowed: &[String]) -> Arc<ServerPlugin> {
    configured_with(limits, dir, allowed, "")
}

/// [`configured`], with more `plugin_data`.
fn configured_with(
    limits: Limits,
    dir: &TempDir,
    allowed: &[String],
    hcl: &str,
) -> Arc<ServerPlugin> {
    let list = dir.join("ek-hashes");
    std::fs::write(&list, allowed.join("\n") + "\n").unwrap();
    let plugin = Arc::new(ServerPlugin::with_limits(limits));
    plugin
        .configure(
            &CoreConfig {
                trust_domain: "example.org".into(),
            },
            &format!("ek_hashes_path = \"{}\"\n{hcl}", list.display()),
        )
        .unwrap();
    plugin
}

/// The EK hashes of the software EKs `eks`.
fn software_eks(eks: impl IntoIterator<Item = u8>) -> Vec<String> {
    eks.into_iter()
        .map(|ek| forgery_with_ek(ek).1.pub_hash())
        .collect()
}

/// The server plugin with `limits`, configured with an allow list of the
/// software EKs `eks`, served on a fresh socket, and a connection to it.
async fn serve(limits: Limits, eks: impl IntoIterator<Item = u8>) -> Served {
    let dir = TempDir::new("sceau-spire-limits");
    let plugin = configured(limits, &dir, &software_eks(eks));
    let socket = PluginSocket::bind(&SocketOptions {
        dir: Some(dir.subdir("socket")),
        group: None,
    })
    .unwrap();
    let path: PathBuf = socket.path().to_owned();
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(plugin::serve(plugin.clone(), socket, async {
        let _ = stopped.await;
    }));
    let connection = connect(&path).await;
    Served {
        plugin,
        connection,
        _stop: stop,
        _dir: dir,
    }
}

async fn connect(socket: &Path) -> Connection {
    tokio::time::timeout(
        CALL_TIMEOUT,
        sceau_rpc::client::open(socket, Bodies::AlongsideTheAnswer),
    )
    .await
    .expect("connecting hung")
    .unwrap()
}

fn origin() -> Uri {
    Uri::from_static("http://plugin")
}

/// An attestation open past its challenge, the request side held open: a
/// stall for as long as nothing is sent on it.
struct Stall {
    requests: mpsc::Sender<AttestRequest>,
    answers: Streaming<sceau_spire::pb::server_attestor::AttestResponse>,
}

impl Stall {
    /// Sends the agent's answer to the challenge.
    async fn respond(&self, response: &ChallengeResponse) {
        self.requests
            .send(AttestRequest {
                request: Some(attest_request::Request::ChallengeResponse(
                    response.encode(),
                )),
            })
            .await
            .unwrap();
    }
}

/// Opens an attestation with `payload` and waits for its challenge; returns
/// the attestation held open with that challenge, or the status it was
/// refused with.
async fn open(connection: &Connection, payload: &Payload) -> Result<(Stall, Challenge), Status> {
    let (requests, outgoing) = mpsc::channel(2);
    requests
        .send(AttestRequest {
            request: Some(attest_request::Request::Payload(payload.encode())),
        })
        .await
        .unwrap();
    let mut client = NodeAttestorClient::with_origin(connection.clone(), origin());
    let mut answers = client
        .attest(ReceiverStream::new(outgoing))
        .await?
        .into_inner();
    let first = answers
        .message()
        .await?
        .ok_or_else(|| Status::unknown("the stream ended without an answer"))?;
    match first.response {
        Some(attest_response::Response::Challenge(bytes)) => {
            let challenge = Challenge::decode(&bytes).expect("a well-formed challenge");
            let stall = Stall { requests, answers };
            Ok((stall, challenge))
        }
        other => panic!("expected a challenge, got {other:?}"),
    }
}

/// Opens an attestation with the payload of the software EK `ek`; returns
/// it held open once the challenge came, or the status it was refused
/// with, and how long that took.
async fn attest(connection: &Connection, ek: u8) -> (Result<Stall, Status>, Duration) {
    let started = Instant::now();
    let payload: Payload = forgery_with_ek(ek).0;
    let result = tokio::time::timeout(CALL_TIMEOUT, open(connection, &payload))
        .await
        .expect("the attestation hung")
        .map(|(stall, _)| stall);
    (result, started.elapsed())
}

async fn refused_at_once(connection: &Connection, ek: u8) -> Status {
    let (result, took) = attest(connection, ek).await;
    let status = match result {
        Ok(_) => panic!("EK {ek}: a challenge was issued past the cap"),
        Err(status) => status,
    };
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(took < AT_ONCE, "EK {ek}: refused after {took:?}");
    status
}

async fn wait_for_no_pending(plugin: &ServerPlugin) {
    let deadline = Instant::now() + CALL_TIMEOUT;
    while plugin.challenge_slots().pending() != 0 {
        assert!(Instant::now() < deadline, "the slots were never released");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

// Without the caps (try_acquire skipped in server/mod.rs), the 17th
// attestation gets a challenge: seen failing with "a challenge was issued
// past the cap".
#[tokio::test]
async fn past_the_caps_attestations_are_refused_at_once_until_stalls_are_cancelled() {
    // The shipped caps and deadline.
    let limits = Limits::default();
    let served = serve(limits, 10..=40).await;
    assert_eq!((MAX_PENDING, MAX_PENDING_PER_EK), (16, 2));

    // One EK's cap: two stalls, then a refusal; another EK is not affected.
    let mut stalls = Vec::new();
    for _ in 0..MAX_PENDING_PER_EK {
        stalls.push(attest(&served.connection, 10).await.0.expect("a challenge"));
    }
    let status = refused_at_once(&served.connection, 10).await;
    assert!(
        status.message().contains("for this EK"),
        "{}",
        status.message()
    );

    // The server's cap: 16 stalls in all (two EKs each).
    for ek in 11..(10 + MAX_PENDING as u8 / 2) {
        for _ in 0..2 {
            stalls.push(attest(&served.connection, ek).await.0.expect("a challenge"));
        }
    }
    assert_eq!(stalls.len(), MAX_PENDING);
    assert_eq!(served.plugin.challenge_slots().pending(), MAX_PENDING);
    let status = refused_at_once(&served.connection, 30).await;
    assert!(
        status.message().contains("the server's limit"),
        "{}",
        status.message()
    );
    assert_eq!(served.plugin.challenge_slots().refused(), 2);

    // The connection still serves other calls at once.
    let mut health = HealthClient::with_origin(served.connection.clone(), origin());
    let started = Instant::now();
    tokio::time::timeout(
        CALL_TIMEOUT,
        health.check(HealthCheckRequest {
            service: "plugin".into(),
        }),
    )
    .await
    .unwrap()
    .unwrap();
    assert!(started.elapsed() < AT_ONCE);

    // The stalls' agents go away: every slot is released, and a new
    // attestation gets its challenge.
    drop(stalls);
    wait_for_no_pending(&served.plugin).await;
    let fresh = attest(&served.connection, 30)
        .await
        .0
        .expect("a challenge after the stalls");
    assert_eq!(served.plugin.challenge_slots().pending(), 1);
    drop(fresh);
    wait_for_no_pending(&served.plugin).await;
}

// With the deadline removed (answer_timeout ignored), the stall never ends
// and the test fails with "the attestation hung".
#[tokio::test]
async fn a_stall_ends_at_the_answer_deadline_and_frees_its_slot() {
    let limits = Limits {
        answer_timeout: Duration::from_millis(300),
        total: 1,
        ..Limits::default()
    };
    let served = serve(limits, [1, 2]).await;
    let mut stall = attest(&served.connection, 1).await.0.expect("a challenge");
    refused_at_once(&served.connection, 2).await;
    let started = Instant::now();
    let ended = tokio::time::timeout(CALL_TIMEOUT, stall.answers.message())
        .await
        .expect("the attestation hung")
        .expect_err("a stalled attestation ends in a refusal");
    assert_eq!(ended.code(), Code::DeadlineExceeded, "{ended:?}");
    assert!(
        ended.message().contains("did not answer within 300 ms"),
        "{}",
        ended.message()
    );
    // Well under the 5 s default: the 300 ms deadline ended it, on a
    // loaded machine too.
    assert!(started.elapsed() < Duration::from_secs(4));
    wait_for_no_pending(&served.plugin).await;
    attest(&served.connection, 2)
        .await
        .0
        .expect("a challenge once the stall timed out");
}

/// The agent's answer (ActivateCredential and a quote over two PCRs)
/// through the test kit's discrete-TPM latency model (TpmProxy with
/// `Profile::discrete_tpm()`, each TPM command held for its modelled time),
/// for RSA and ECC EKs: the figure ANSWER_TIMEOUT is set from. The modelled
/// TPM time must fit in a quarter of the deadline, leaving the rest for
/// slower parts and the round trips through SPIRE (the wall time is printed).
#[test]
fn an_answer_through_a_discrete_tpm_model_fits_well_within_the_deadline() {
    use sceau_spire::agent::tpm::{Attestation, EkAlgorithm, TpmSettings};
    use sceau_spire::server::config::ServerConfig;

    use sceau_spire::server::keys::Key;
    use sceau_spire::server::structures::PublicArea;
    use sceau_spire::server::verify::{check_payload, check_response, issue_challenge};
    use sceau_testkit::tpm_proxy::Profile;
    use sceau_testkit::{Swtpm, TpmProxy};

    for (algorithm, name) in [(EkAlgorithm::EccP256, "ecc"), (EkAlgorithm::Rsa2048, "rsa")] {
        let dir = TempDir::new("sceau-spire-answer-time");
        let tpm = Swtpm::start(&dir.subdir("tpm"));
        let proxy = TpmProxy::start(tpm.port(), Profile::discrete_tpm());
        let settings = TpmSettings {
            tcti: proxy.tcti().parse().unwrap(),
            ek_algorithm: algorithm,
            event_log_path: None,
        };
        let (mut agent, payload) = Attestation::begin(&settings).unwrap();
        let ek = Key::from_tpm(&PublicArea::parse(&payload.ek_public).unwrap().key).unwrap();
        let config = ServerConfig::with_trust(
            "example.org",
            Some([ek.pub_hash()].into_iter().collect()),
            None,
            vec![0, 7],
        );
        let verified = check_payload(&config, &payload, std::time::SystemTime::now()).unwrap();
        let (pending, challenge) = issue_challenge(&config, verified).unwrap();
        proxy.reset_counts();
        let started = Instant::now();
        let response = agent.answer(&challenge).expect("the agent's TPM answers");
        let took = started.elapsed();
        check_response(pending, &response).expect("the answer is right");
        let modelled = proxy.modelled_delay();
        eprintln!(
            "{name} EK: the answer took {took:?} ({modelled:?} modelled TPM time) over {} commands: {:?}",
            proxy.total_commands(),
            proxy.counts()
        );
        // The modelled TPM time, not the wall clock: it is what a discrete
        // TPM would spend, and it does not vary with this machine's load.
        assert!(
            modelled * 4 <= ANSWER_TIMEOUT,
            "{name}: {modelled:?} of modelled TPM time is more than a quarter of {ANSWER_TIMEOUT:?}"
        );
    }
}

/// Answers `stall`'s challenge with a wrong credential and `log_len` bytes
/// of event log; returns the status the server ended the call with.
async fn answer_with_log(mut stall: Stall, log_len: usize) -> Status {
    let response = ChallengeResponse {
        credential: zeroize::Zeroizing::new(vec![0; 32]),
        quote: Vec::new(),
        quote_signature: Vec::new(),
        pcr_values: Vec::new(),
        event_log: vec![0x5a; log_len],
    };
    stall.respond(&response).await;
    tokio::time::timeout(CALL_TIMEOUT, stall.answers.message())
        .await
        .expect("the answer hung")
        .expect_err("a wrong credential attested")
}

// The largest event log a response may carry crosses the gRPC transport
// and reaches the checks (here the credential's, which refuses it); one
// byte more is refused by the codec, naming the log. With the gRPC limit
// left at its former 64 KiB, the first call failed in the transport
// (OUT_OF_RANGE, "decoded message length too large"): tried.
#[tokio::test]
async fn the_largest_event_log_crosses_the_transport_and_one_byte_more_is_refused() {
    use sceau_spire::payload::MAX_EVENT_LOG_LEN;
    let served = serve(Limits::default(), [3]).await;
    let (stall, _) = attest(&served.connection, 3).await;
    let status = answer_with_log(stall.expect("a challenge"), MAX_EVENT_LOG_LEN).await;
    assert_denied(&status, "the credential was not activated");
    wait_for_no_pending(&served.plugin).await;
    let (stall, _) = attest(&served.connection, 3).await;
    let status = answer_with_log(stall.expect("a challenge"), MAX_EVENT_LOG_LEN + 1).await;
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(
        status
            .message()
            .contains(&format!("event log is {} bytes", MAX_EVENT_LOG_LEN + 1)),
        "{status:?}"
    );
}

/// The server plugin served on a thread of its own with its own runtime,
/// as SPIRE runs it in a process of its own: its tasks and threads can be
/// counted apart from the test's, and the agent's blocking TPM work on the
/// test's side never holds the server up.
struct ServerThread {
    plugin: Arc<ServerPlugin>,
    runtime: tokio::runtime::Handle,
    socket: PathBuf,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    _dir: TempDir,
}

/// The name of the server's thread and of any its runtime starts.
const SERVER_THREAD: &str = "sceau-stalls";

impl ServerThread {
    fn start(limits: Limits, allowed: &[String]) -> Self {
        Self::start_with(limits, allowed, "")
    }

    /// [`ServerThread::start`], with more `plugin_data`.
    fn start_with(limits: Limits, allowed: &[String], hcl: &str) -> Self {
        let dir = TempDir::new("sceau-spire-stalls");
        let plugin = configured_with(limits, &dir, allowed, hcl);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .thread_name(SERVER_THREAD)
            .build()
            .unwrap();
        let handle = runtime.handle().clone();
        let socket = {
            let _entered = handle.enter();
            PluginSocket::bind(&SocketOptions {
                dir: Some(dir.subdir("socket")),
                group: None,
            })
            .unwrap()
        };
        let path = socket.path().to_owned();
        let (stop, stopped) = oneshot::channel::<()>();
        let served = plugin.clone();
        let thread = std::thread::Builder::new()
            .name(SERVER_THREAD.into())
            .spawn(move || {
                runtime
                    .block_on(plugin::serve(served, socket, async {
                        let _ = stopped.await;
                    }))
                    .unwrap();
            })
            .unwrap();
        ServerThread {
            plugin,
            runtime: handle,
            socket: path,
            stop: Some(stop),
            thread: Some(thread),
            _dir: dir,
        }
    }

    /// Tasks alive in the server's runtime.
    fn tasks(&self) -> usize {
        self.runtime.metrics().num_alive_tasks()
    }
}

impl Drop for ServerThread {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Threads of this process named `name` (the kernel keeps 15 bytes).
fn threads_named(name: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.trim_end() == &name[..name.len().min(15)])
        .count()
}

/// A node with a TPM (swtpm) whose agent plugin code attests over the
/// plugin connection: payload, challenge, the TPM's answer, the result.
struct GenuineNode {
    dir: TempDir,
    tpm: Swtpm,
    settings: TpmSettings,
    /// The EK's TPMT_PUBLIC, as its payloads carry it.
    ek_public: Vec<u8>,
    /// The place proof of the last answered challenge, as the agent
    /// plugin keeps it.
    proof: std::sync::Mutex<Option<Zeroizing<[u8; PLACE_PROOF_LEN]>>>,
}

impl GenuineNode {
    fn start() -> (Self, String) {
        let dir = TempDir::new("sceau-spire-genuine");
        let tpm = Swtpm::start(dir.path());
        let settings = TpmSettings {
            tcti: tpm.tcti().parse().unwrap(),
            ek_algorithm: EkAlgorithm::EccP256,
            event_log_path: None,
        };
        let (_, payload) = Attestation::begin(&settings).expect("the agent's payload");
        let ek = Key::from_tpm(&PublicArea::parse(&payload.ek_public).unwrap().key).unwrap();
        let node = GenuineNode {
            dir,
            tpm,
            settings,
            ek_public: payload.ek_public.clone(),
            proof: std::sync::Mutex::default(),
        };
        (node, ek.pub_hash())
    }

    /// The firmware's part of a boot: `log` extended into the TPM's
    /// SHA-256 bank, and written where the agent reads it.
    fn boot(&mut self, log: &Log) {
        let path = self.dir.join("binary_bios_measurements");
        std::fs::write(&path, log.bytes()).unwrap();
        self.settings.event_log_path = Some(path);
        let tools = Tpm2Tools::new(&self.tpm, self.dir.path());
        for argument in log.pcrextend_args() {
            tools.run("tpm2_pcrextend", &[&argument]);
        }
    }

    /// One whole attestation; the selectors, or the status it ended with,
    /// and how long it took.
    async fn attest(&self, connection: &Connection) -> (Result<Vec<String>, Status>, Duration) {
        let started = Instant::now();
        let proof = self.proof.lock().unwrap().clone();
        let (mut agent, payload) =
            Attestation::begin_with_place_proof(&self.settings, proof.as_deref())
                .expect("the agent's payload");
        let result = tokio::time::timeout(CALL_TIMEOUT, async {
            let (mut attestation, challenge) = open(connection, &payload).await?;
            let response = agent.answer(&challenge).expect("the TPM answers");
            attestation.respond(&response).await;
            *self.proof.lock().unwrap() = Some(place_proof(&response.credential));
            match attestation
                .answers
                .message()
                .await?
                .and_then(|m| m.response)
            {
                Some(attest_response::Response::AgentAttributes(attributes)) => {
                    Ok(attributes.selector_values)
                }
                other => panic!("expected the agent's attributes, got {other:?}"),
            }
        })
        .await
        .expect("the genuine attestation hung");
        (result, started.elapsed())
    }
}

// The attack as first seen: 62 stalled attestations (the connection's 64
// streams less go-plugin's two), each with a trusted EK and a software AK
// that never answers, here with 62 different EKs so that only the server's
// caps apply. 16 get a challenge and 46 are refused at once; a node that
// has attested before still attests, while all 16 stalls still wait (it
// did not queue behind them); a node that never attested is refused at
// once and retries. The stalls end at the 5 s deadline, and the server's
// tasks and threads return to their count before the stalls.
//
// Without the proven pool (every EK in one pool of 16, as before), the
// genuine node's second attestation was refused with RESOURCE_EXHAUSTED:
// seen failing.
#[tokio::test]
async fn sixty_two_stalls_leave_a_node_that_attested_before_unaffected_and_leak_nothing() {
    const STALLS: u8 = 62;
    let (node, genuine_ek) = GenuineNode::start();
    let fresh_ek = STALLS + 1;
    let mut allowed = software_eks(1..=fresh_ek);
    allowed.push(genuine_ek.clone());
    let server = ServerThread::start(Limits::default(), &allowed);
    let connection = connect(&server.socket).await;

    // The node attests once before the attack, as every node of a running
    // cluster has.
    let (first, normal) = node.attest(&connection).await;
    first.expect("the genuine node attests");
    assert_eq!(server.plugin.challenge_slots().proven(), 1);
    let tasks_before = server.tasks();
    let threads_before = threads_named(SERVER_THREAD);

    let attack = Instant::now();
    let mut stalls = Vec::new();
    let mut refused = 0;
    for ek in 1..=STALLS {
        let (result, took) = attest(&connection, ek).await;
        match result {
            Ok(stall) => stalls.push(stall),
            Err(status) => {
                assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
                assert!(took < AT_ONCE, "EK {ek}: refused after {took:?}");
                refused += 1;
            }
        }
    }
    assert_eq!((stalls.len(), refused), (MAX_PENDING, 46));

    let (again, under_attack) = node.attest(&connection).await;
    let selectors = again.expect("the genuine node attests during the stalls");
    assert!(selectors.contains(&format!("pub_hash:{genuine_ek}")));
    // Every stall still waits: the node was not served after them.
    assert_eq!(server.plugin.challenge_slots().pending(), MAX_PENDING);
    // The count sees the stalls: one task each, at least.
    let tasks_during = server.tasks();
    assert!(
        tasks_during >= tasks_before + MAX_PENDING,
        "{tasks_during} tasks during the stalls, {tasks_before} before"
    );
    assert!(
        attack.elapsed() < ANSWER_TIMEOUT,
        "the stalls' deadline passed before the node had attested"
    );
    eprintln!(
        "the genuine node attested in {normal:?} before the stalls and {under_attack:?} with {} stalls pending",
        MAX_PENDING
    );

    let status = refused_at_once(&connection, fresh_ek).await;
    assert!(
        status.message().contains("EKs that have not attested"),
        "{}",
        status.message()
    );

    for mut stall in stalls {
        let ended = tokio::time::timeout(CALL_TIMEOUT, stall.answers.message())
            .await
            .expect("a stall outlived its deadline")
            .expect_err("a stall attested");
        assert_eq!(ended.code(), Code::DeadlineExceeded, "{ended:?}");
    }
    let ended_after = attack.elapsed();
    assert!(
        ended_after >= ANSWER_TIMEOUT && ended_after < ANSWER_TIMEOUT + AT_ONCE,
        "the stalls ended {ended_after:?} after the attack began"
    );
    wait_for_no_pending(&server.plugin).await;

    // Nothing left behind: the stalls' tasks ended with them, and the
    // server runs on the threads it had.
    let deadline = Instant::now() + CALL_TIMEOUT;
    while server.tasks() > tasks_before && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(server.tasks(), tasks_before, "tasks leaked");
    assert_eq!(threads_named(SERVER_THREAD), threads_before);
    eprintln!(
        "server tasks: {tasks_before} before the stalls, {tasks_during} during, the same after; threads: {threads_before}, the same after"
    );
    let (last, _) = node.attest(&connection).await;
    last.expect("the genuine node attests after the stalls");
}

// The fill with public data: after a node attested, payloads naming its EK
// (its certificate is public) with AKs made in software, as many as the
// per-EK cap lets through, and others filling the rest of the shared pool.
// They carry no place proof, so they hold shared places; the node's next
// payload carries the proof of its last answer and takes a proven place.
// Shown failing: with the pool chosen by the EK alone (and the per-EK cap
// over both pools, as before), the two forged payloads naming the node's
// EK took proven places and the node was refused with
// RESOURCE_EXHAUSTED.
#[tokio::test]
async fn stalls_naming_a_proven_node_do_not_keep_it_out() {
    let (node, genuine_ek) = GenuineNode::start();
    let mut allowed = software_eks(1..=MAX_PENDING as u8);
    allowed.push(genuine_ek.clone());
    let server = ServerThread::start(Limits::default(), &allowed);
    let connection = connect(&server.socket).await;
    let (first, _) = node.attest(&connection).await;
    first.expect("the genuine node attests");

    let mut naming_the_node = forgery_with_ek(1).0;
    naming_the_node.ek_public = node.ek_public.clone();
    let mut stalls = Vec::new();
    for _ in 0..MAX_PENDING_PER_EK {
        let (stall, _) = open(&connection, &naming_the_node)
            .await
            .expect("a payload naming a proven EK gets a shared place");
        stalls.push(stall);
    }
    for ek in 1..=(MAX_PENDING - MAX_PENDING_PER_EK) as u8 {
        let (result, _) = attest(&connection, ek).await;
        stalls.push(result.expect("a shared place"));
    }
    let (again, _) = node.attest(&connection).await;
    let selectors = again.expect("the proven node attests during the stalls");
    assert!(selectors.contains(&format!("pub_hash:{genuine_ek}")));
    // The stalls all hold shared places, and a third naming the node is
    // refused.
    assert_eq!(
        (
            server.plugin.challenge_slots().pending(),
            server.plugin.challenge_slots().pending_proven()
        ),
        (MAX_PENDING, 0)
    );
    let status = open(&connection, &naming_the_node).await.err().unwrap();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    drop(stalls);
    wait_for_no_pending(&server.plugin).await;
}

// The reset check through the plugin connection, as SPIRE calls it, with
// measured boot required: the agent keeps the place proof of its last
// answer in memory, so a TPM reset in a payload that carries it is one the
// agent lived through: refused. An agent that starts again (a reboot)
// comes without it, and its reset is reported. Shown failing: with
// `Slot::is_proven` answering false, the third attestation passed with
// `tpm_reset:since_last_attestation`.
#[tokio::test]
async fn a_tpm_reset_the_agent_lived_through_is_refused_over_the_plugin_connection() {
    let (mut node, ek) = GenuineNode::start();
    let log = Log::secure_boot();
    node.boot(&log);
    let server = ServerThread::start_with(
        Limits::default(),
        std::slice::from_ref(&ek),
        "measured_boot = \"required\"",
    );
    let connection = connect(&server.socket).await;
    let resets = |selectors: Vec<String>| {
        selectors
            .into_iter()
            .filter(|s| s.starts_with("tpm_reset:") || s.starts_with("secureboot:"))
            .collect::<Vec<_>>()
    };
    let (first, _) = node.attest(&connection).await;
    assert_eq!(
        resets(first.unwrap()),
        ["secureboot:enabled", "tpm_reset:unknown"]
    );
    let (second, _) = node.attest(&connection).await;
    assert_eq!(resets(second.unwrap())[1], "tpm_reset:none");

    node.tpm.restart();
    node.boot(&log);
    let (lived_through, _) = node.attest(&connection).await;
    let status = lived_through.unwrap_err();
    assert_denied(&status, "while the agent that attested before kept running");
    // The same agent retries (its proof used up), or root restarts it to
    // shed the proof: the reset cycle stays refused. Shown failing: before
    // the cycle was marked, this retry attested.
    *node.proof.lock().unwrap() = None;
    let (retry, _) = node.attest(&connection).await;
    assert_denied(
        &retry.unwrap_err(),
        "while the agent that attested before kept running",
    );
    // A reboot: a new reset cycle, and an agent without its proof.
    node.tpm.restart();
    node.boot(&log);
    *node.proof.lock().unwrap() = None;
    let (rebooted, _) = node.attest(&connection).await;
    assert_eq!(
        resets(rebooted.unwrap())[1],
        "tpm_reset:since_last_attestation"
    );
}
