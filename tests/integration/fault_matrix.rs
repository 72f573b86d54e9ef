//! The fault matrix's return-code rows and its "TPM 20× slower" row
//! (docs/reliability.md), each on a real swtpm behind the TPM proxy
//! (`sceau_testkit::tpm_proxy`) and a real `sceau serve`; and the command
//! counts of one Encrypt and one Decrypt.
//!
//! For each row: the time to a clean gRPC result (ok once sceau's retry or
//! reopen absorbed a passing fault; the row's class word, and no TPM code or
//! TSS text, when the fault persists), whether sceau recovers (a later call
//! succeeds) or exits for systemd, and that an envelope sealed before the
//! fault still opens after it.
//!
//! What sceau does with each code (crates/tpm/src/fault.rs, crates/tpm/src/worker.rs):
//! RETRY, YIELDED and TESTING are first resubmitted by tpm2-tss itself (ESYS
//! sends a command up to 5 times in all, at once), then retried by sceau's
//! worker with a doubling backoff until the request deadline, then reported
//! as `tpm-busy`; MEMORY gets only sceau's retries; OBJECT_MEMORY and
//! SESSION_MEMORY make sceau reopen the TPM once (flushing leftovers) and
//! try again, and report `tpm-failure` if the code comes back.

use std::time::{Duration, Instant};

use tonic::Code;

use crate::harness::rpc::{self, Client, assert_clean_message};
use crate::harness::tpm_proxy::{Fault, Profile, command_code, rc};
use crate::harness::{ProxiedFixture, Sceau, Swtpm, TempDir, process, random_bytes};

/// The rows run sceau with a short request deadline, so a persistent fault
/// costs one second of test time, not the default 2.5.
const DEADLINE: Duration = Duration::from_secs(1);
const DEADLINE_ARG: &str = "1s";
/// What a call may take beyond the deadline (scheduling on a loaded machine).
const MARGIN: Duration = Duration::from_secs(1);
/// The discrete-TPM profile at 2 %: the command mix and ordering of the
/// model without its seconds (the 20× row runs it at full scale).
const FAST: f64 = 0.02;
/// An endless injected answer.
const ENDLESS: u64 = u64::MAX;

/// sceau on the discrete profile at `scale`, through the proxy.
fn on_discrete_profile(label: &str, scale: f64, extra: &[&str]) -> ProxiedFixture {
    let rig = ProxiedFixture::start(label, Profile::discrete_tpm(), extra);
    rig.proxy.set_scale(scale);
    rig
}

/// How many times this sceau reopened its TPM.
fn reopens(sceau: &Sceau) -> usize {
    sceau
        .stderr_text()
        .matches("TPM reopened; SRK unchanged")
        .count()
}

/// Which KMS call carries the faulted command.
#[derive(Clone, Copy, Debug)]
enum Call {
    Encrypt,
    Decrypt,
}

/// What a call ends with while a retried code keeps coming back: sceau's
/// worker stops retrying when the next backoff would pass the deadline and
/// says `tpm-busy`; on a loaded machine an attempt may still be running at
/// the deadline, and the caller gets `tpm-timeout` instead. Either way the
/// retries stop (the row checks that the TPM sees no more commands).
const BUSY: &[(Code, &str)] = &[
    (Code::Unavailable, "tpm-busy"),
    (Code::DeadlineExceeded, "tpm-timeout"),
];
/// What a call ends with while a code that makes sceau reopen the TPM comes
/// back after the reopen.
const FAILED: &[(Code, &str)] = &[(Code::Internal, "tpm-failure")];

/// Runs one return-code row: `command` (Create, in an Encrypt; or Load or
/// Unseal, in a Decrypt) is answered `rc`, first `passing` times (a fault a
/// retrying or reopening sceau absorbs within the deadline), then endlessly
/// (the call must end with one of `expected`: a gRPC code and class word,
/// and sceau must then stop sending the command).
/// Prints the row's report line.
async fn run_row(
    label: &'static str,
    rc: u32,
    command: &'static str,
    passing: u64,
    expected: &[(Code, &str)],
) {
    let which = match command {
        "Create" => Call::Encrypt,
        _ => Call::Decrypt,
    };
    let mut rig = on_discrete_profile(label, FAST, &["--request-deadline", DEADLINE_ARG]);
    let (mut client, key_id) = rig.client().await;
    let only = Some(command_code(command).expect("a named command"));
    let before_dek = random_bytes(32);
    let before = rpc::seal(&mut client, &key_id, &before_dek).await;
    let probe_dek = random_bytes(32);
    let probe = rpc::seal(&mut client, &key_id, &probe_dek).await;

    // A passing fault: the call succeeds, within the deadline.
    rig.proxy.reset_counts();
    let count = passing;
    rig.proxy.inject(Fault::Answer { rc, count, only });
    let started = Instant::now();
    let absorbed = call(&mut client, which, &key_id, &probe, &probe_dek).await;
    let absorbed_in = started.elapsed();
    let commands = rig.proxy.counts();
    assert!(
        absorbed.is_ok(),
        "{label}: {command} answered {rc:#x} {passing} times: {absorbed:?}"
    );
    assert!(absorbed_in <= DEADLINE, "{label}: took {absorbed_in:?}");
    assert_eq!(
        rig.proxy.pending_answers(),
        0,
        "{label}: sceau gave up before the fault passed"
    );
    let reopens = reopens(&rig.sceau);

    // A persistent fault: a clean error with the row's class word, in time.
    let count = ENDLESS;
    rig.proxy.inject(Fault::Answer { rc, count, only });
    let started = Instant::now();
    let refused = call(&mut client, which, &key_id, &probe, &probe_dek).await;
    let refused_in = started.elapsed();
    let status = refused.expect_err("a call through an endless fault must fail");
    assert!(
        expected
            .iter()
            .any(|(code, word)| status.code() == *code && status.message() == *word),
        "{label}: expected one of {expected:?}, got {status:?}"
    );
    assert_clean_message(&status, label);
    assert!(
        refused_in <= DEADLINE + MARGIN,
        "{label}: the persistent fault took {refused_in:?}"
    );
    // No retrying long past the answer: once an attempt that was running at
    // the deadline has ended, the TPM sees no more of the command.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let answered = rig.proxy.injected();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        rig.proxy.injected(),
        answered,
        "{label}: sceau kept sending {command} after answering the client"
    );
    rig.proxy.clear_faults();

    // Recovery: sceau still serves, and nothing sealed before is lost.
    assert!(rig.sceau.try_exit().is_none(), "{label}: sceau exited");
    rpc::round_trip(&mut client, &key_id, &random_bytes(32)).await;
    rpc::open(&mut client, &key_id, &before, &before_dek).await;
    println!(
        "{label}: {command} answers {rc:#x} in a {which:?}: {passing}x: ok in {absorbed_in:?} \
         with {reopens} reopen(s), commands {commands:?}; endless: {:?} {:?} in \
         {refused_in:?}; recovered, earlier envelope opens; handles held {:x?}",
        status.code(),
        status.message(),
        rig.proxy.held_handles()
    );
}

/// Encrypt of a fresh DEK, or Decrypt of `envelope` (which must give `dek`).
async fn call(
    client: &mut Client,
    which: Call,
    key_id: &str,
    envelope: &[u8],
    dek: &[u8],
) -> Result<(), tonic::Status> {
    match which {
        Call::Encrypt => rpc::encrypt(client, &random_bytes(32)).await.map(|_| ()),
        Call::Decrypt => {
            let plaintext = rpc::decrypt(client, envelope, key_id).await?;
            assert!(plaintext == dek, "Decrypt returned other bytes");
            Ok(())
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn tpm_rc_retry_on_create() {
    // More than tpm2-tss's own 5 submissions, so sceau's retry runs too.
    run_row("retry", rc::RETRY, "Create", 12, BUSY).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn tpm_rc_yielded_on_unseal() {
    run_row("yielded", rc::YIELDED, "Unseal", 12, BUSY).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn tpm_rc_testing_on_load() {
    run_row("testing", rc::TESTING, "Load", 12, BUSY).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn tpm_rc_memory_on_create() {
    // tpm2-tss does not resubmit MEMORY: these are sceau's own retries.
    run_row("memory", rc::MEMORY, "Create", 3, BUSY).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn tpm_rc_object_memory_on_load() {
    // One reopen flushes what is loaded; the second Load succeeds.
    run_row("object-memory", rc::OBJECT_MEMORY, "Load", 1, FAILED).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn tpm_rc_session_memory_on_unseal() {
    run_row("session-memory", rc::SESSION_MEMORY, "Unseal", 1, FAILED).await;
}

/// SESSION_MEMORY where a TPM really gives it, to StartAuthSession, during
/// the reopen that an earlier SESSION_MEMORY started: sceau reopens only
/// once, so the daemon ends (non-zero, for systemd to restart it) and the
/// next sceau on the same TPM opens what the first sealed.
#[tokio::test(flavor = "multi_thread")]
async fn tpm_rc_session_memory_during_the_reopen_ends_the_daemon() {
    let mut rig = on_discrete_profile(
        "session-memory-reopen",
        FAST,
        &["--request-deadline", DEADLINE_ARG],
    );
    let (mut client, key_id) = rig.client().await;
    let dek = random_bytes(32);
    let before = rpc::seal(&mut client, &key_id, &dek).await;
    for command in ["Unseal", "StartAuthSession"] {
        rig.proxy.inject(Fault::Answer {
            rc: rc::SESSION_MEMORY,
            count: 1,
            only: command_code(command),
        });
    }
    let started = Instant::now();
    let status = rpc::decrypt(&mut client, &before, &key_id)
        .await
        .expect_err("the reopen failed");
    let took = started.elapsed();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(status.message().contains("tpm-unreachable"), "{status:?}");
    assert_clean_message(&status, "Decrypt");
    assert!(took <= DEADLINE + MARGIN, "took {took:?}");
    let exit = rig
        .sceau
        .wait_exit(Duration::from_secs(10))
        .expect("sceau exits once its TPM could not be reopened");
    let exit_after = started.elapsed();
    assert!(
        matches!(exit.code(), Some(code) if code != 0),
        "exit {exit}"
    );

    rig.restart_sceau(&["--request-deadline", DEADLINE_ARG]);
    let (mut client, second_key_id) = rig.client().await;
    assert_eq!(second_key_id, key_id);
    rpc::open(&mut client, &key_id, &before, &dek).await;
    println!(
        "session-memory during reopen: Decrypt {:?} {:?} in {took:?}; sceau exited {exit} \
         after {exit_after:?}; the next sceau opens the earlier envelope",
        status.code(),
        status.message()
    );
}

/// The TPM 20× slower than the discrete profile (e.g. a chip on a slow bus
/// under firmware contention): with the default 2.5 s deadline a call costs
/// 2.8-3 s of TPM time, so calls end at the deadline with `tpm-timeout`
/// (or succeed when the jitter brings them under it), never later; Status
/// keeps answering; at normal speed the next calls succeed and the earlier
/// envelope opens.
#[tokio::test(flavor = "multi_thread")]
async fn tpm_twenty_times_slower_than_the_discrete_profile() {
    const DEFAULT_DEADLINE: Duration = Duration::from_millis(2_500);
    let rig = on_discrete_profile("slow-20x", 1.0, &[]);
    let (mut client, key_id) = rig.client().await;
    let dek = random_bytes(32);
    let before = rpc::seal(&mut client, &key_id, &dek).await;

    rig.proxy.set_scale(20.0);
    let mut outcomes = Vec::new();
    for which in [Call::Encrypt, Call::Decrypt] {
        let started = Instant::now();
        let result = call(&mut client, which, &key_id, &before, &dek).await;
        let took = started.elapsed();
        assert!(
            took <= DEFAULT_DEADLINE + MARGIN,
            "{which:?} took {took:?}: {result:?}"
        );
        if let Err(status) = &result {
            assert!(
                matches!(
                    (status.code(), status.message()),
                    (Code::DeadlineExceeded, "tpm-timeout") | (Code::Unavailable, "tpm-busy")
                ),
                "{which:?}: {status:?}"
            );
            assert_clean_message(status, "slow call");
        }
        outcomes.push(format!(
            "{which:?} {} in {took:?}",
            match &result {
                Ok(()) => "ok".to_string(),
                Err(status) => status.message().to_string(),
            }
        ));
    }
    let started = Instant::now();
    let status = rpc::status(&mut client).await;
    let status_took = started.elapsed();
    outcomes.push(format!(
        "Status healthz={} in {status_took:?}",
        status.healthz
    ));

    rig.proxy.set_scale(1.0);
    rpc::round_trip(&mut client, &key_id, &random_bytes(32)).await;
    rpc::open(&mut client, &key_id, &before, &dek).await;
    println!(
        "20x slower: {}; recovered at 1x, earlier envelope opens",
        outcomes.join("; ")
    );
}

/// One Encrypt and one Decrypt through the proxy: the TPM commands each costs,
/// and their modelled time on the discrete profile. An Encrypt is one Create
/// and a Decrypt one Load, Unseal and FlushContext, the minimum for a sealed
/// object; the scrub of tpm2-tss's buffers after each
/// (`Tpm::scrub_tss_without_sending`) adds none. Before, an Encrypt also cost a
/// Load and a FlushContext, and a Decrypt a TPM2_Hash, and this test failed on
/// both counts.
#[tokio::test(flavor = "multi_thread")]
async fn commands_per_encrypt_and_decrypt() {
    let rig = on_discrete_profile("command-counts", FAST, &[]);
    let (mut client, key_id) = rig.client().await;
    let dek = random_bytes(32);
    rig.proxy.reset_counts();
    let envelope = rpc::seal(&mut client, &key_id, &dek).await;
    let encrypt = (rig.proxy.counts(), rig.proxy.modelled_delay());
    rig.proxy.reset_counts();
    rpc::open(&mut client, &key_id, &envelope, &dek).await;
    let decrypt = (rig.proxy.counts(), rig.proxy.modelled_delay());
    for (what, (counts, modelled)) in [("Encrypt", &encrypt), ("Decrypt", &decrypt)] {
        let total: u64 = counts.values().sum();
        println!(
            "{what}: {total} TPM commands {counts:?}, modelled on the discrete profile {:?}",
            modelled.div_f64(FAST)
        );
        assert!(total > 0, "{what}: no TPM command counted");
    }
    let counted = |pairs: &[(&str, u64)]| -> std::collections::BTreeMap<String, u64> {
        pairs.iter().map(|(c, n)| (c.to_string(), *n)).collect()
    };
    assert_eq!(encrypt.0, counted(&[("Create", 1)]), "one Encrypt");
    assert_eq!(
        decrypt.0,
        counted(&[("FlushContext", 1), ("Load", 1), ("Unseal", 1)]),
        "one Decrypt"
    );
}

/// The same counts under KEK generations: an Encrypt under the current
/// generation, and a Decrypt under it, under an older open generation and
/// under generation 0 (the SRK), each cost what they cost before
/// generations (the parent is a persistent key, which needs no Load); and
/// what `kek rotate`, `kek list` and `kek retire` cost, start-up included,
/// printed for docs/performance.md. Shown failing: with a ReadPublic of
/// the generation's persistent key before each use, the Encrypt under
/// generation 1 counted `{"Create": 1, "ReadPublic": 1}`.
#[tokio::test(flavor = "multi_thread")]
async fn commands_per_call_under_kek_generations() {
    let mut rig = on_discrete_profile("command-counts-kek", FAST, &[]);
    let (mut client, key_id0) = rig.client().await;
    let dek0 = random_bytes(32);
    let envelope0 = rpc::seal(&mut client, &key_id0, &dek0).await;
    drop(client);
    rig.sceau.terminate();
    let state = rig.tmp.join("sceau.sock").with_extension("state");
    let kek = |rig: &ProxiedFixture, args: &[&str]| {
        rig.proxy.reset_counts();
        let run = std::process::Command::new(crate::harness::sceau::BIN)
            .args(args)
            .args(["--tcti", &rig.proxy.tcti(), "--state-dir"])
            .arg(&state)
            .output()
            .expect("sceau kek");
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
        let counts = rig.proxy.counts();
        println!(
            "sceau {}: {} TPM commands {counts:?}",
            args.join(" "),
            counts.values().sum::<u64>()
        );
        counts
    };
    let rotate = kek(&rig, &["kek", "rotate"]);
    assert_eq!(rotate.get("Create"), Some(&1), "{rotate:?}");
    assert_eq!(rotate.get("EvictControl"), Some(&1), "{rotate:?}");
    assert_eq!(rotate.get("NV_Increment"), Some(&1), "{rotate:?}");
    kek(&rig, &["kek", "list"]);

    rig.restart_sceau(&[]);
    let (mut client, key_id1) = rig.client().await;
    let dek1 = random_bytes(32);
    rig.proxy.reset_counts();
    let envelope1 = rpc::seal(&mut client, &key_id1, &dek1).await;
    let counted = |pairs: &[(&str, u64)]| -> std::collections::BTreeMap<String, u64> {
        pairs.iter().map(|(c, n)| (c.to_string(), *n)).collect()
    };
    let decrypt = counted(&[("FlushContext", 1), ("Load", 1), ("Unseal", 1)]);
    assert_eq!(
        rig.proxy.counts(),
        counted(&[("Create", 1)]),
        "Encrypt, generation 1"
    );
    for (what, key_id, envelope, dek) in [
        ("Decrypt, generation 1", &key_id1, &envelope1, &dek1),
        ("Decrypt, generation 0", &key_id0, &envelope0, &dek0),
    ] {
        rig.proxy.reset_counts();
        rpc::open(&mut client, key_id, envelope, dek).await;
        assert_eq!(rig.proxy.counts(), decrypt, "{what}");
    }
    drop(client);
    rig.sceau.terminate();
    kek(&rig, &["kek", "rotate"]);
    rig.restart_sceau(&[]);
    let (mut client, _) = rig.client().await;
    rig.proxy.reset_counts();
    rpc::open(&mut client, &key_id1, &envelope1, &dek1).await;
    assert_eq!(
        rig.proxy.counts(),
        decrypt,
        "Decrypt, an older open generation"
    );
    drop(client);
    rig.sceau.terminate();
    let retire = kek(&rig, &["kek", "retire", "--generation", "1"]);
    assert_eq!(retire.get("EvictControl"), Some(&1), "{retire:?}");
}

/// Cluster mode's member files for the fixture's TPM: its own (from `sceau
/// srk-public` through the proxy) and one software member.
fn cluster_members(rig: &ProxiedFixture) -> std::path::PathBuf {
    use sceau_format::members::{Member, member_file};
    use sceau_format::recovery_key::RecoveryIdentity;
    use sceau_format::signing_key::SoftwareSigner;
    let own = std::process::Command::new(crate::harness::sceau::BIN)
        .args(["srk-public", "--tcti", &rig.proxy.tcti()])
        .output()
        .expect("sceau srk-public");
    assert!(
        own.status.success(),
        "{}",
        String::from_utf8_lossy(&own.stderr)
    );
    let other = Member {
        srk: RecoveryIdentity::generate().public().clone(),
        signing: SoftwareSigner::from_bytes(&[0x42; 32]).public(),
    };
    let dir = rig.tmp.subdir("members");
    std::fs::write(dir.join("own.pub"), &own.stdout).unwrap();
    let other_file = member_file(&other, &sceau_tpm::KeyId::from_srk_name(other.srk.name()));
    std::fs::write(dir.join("other.pub"), other_file).unwrap();
    dir
}

/// Cluster mode through the proxy: an Encrypt costs one TPM2_Sign (the
/// wrapping is software), a Decrypt the Import, Load, Unseal and
/// FlushContext it cost before envelopes were signed (the signature is
/// checked in software). A Sign the TPM keeps refusing ends the Encrypt
/// with a class word and no envelope, the retries stop, and the next
/// Encrypt succeeds.
#[tokio::test(flavor = "multi_thread")]
async fn cluster_mode_signs_once_per_encrypt_and_survives_a_failing_sign() {
    let mut rig = on_discrete_profile("cluster-sign", FAST, &[]);
    let members = cluster_members(&rig);
    assert!(rig.sceau.terminate().success());
    rig.proxy.reset_counts();
    rig.restart_sceau(&[
        "--members",
        members.to_str().unwrap(),
        "--request-deadline",
        DEADLINE_ARG,
    ]);
    let (mut client, key_id) = rig.client().await;
    // The start recreates two primaries: the SRK and the signing key.
    let start = rig.proxy.counts();
    assert_eq!(start.get("CreatePrimary"), Some(&2), "start: {start:?}");
    let dek = random_bytes(32);
    rig.proxy.reset_counts();
    let sealed = rpc::encrypt(&mut client, &dek).await.expect("Encrypt");
    let encrypt = rig.proxy.counts();
    rig.proxy.reset_counts();
    let opened = rpc::decrypt(&mut client, &sealed.ciphertext, &key_id).await;
    let decrypt = rig.proxy.counts();
    assert_eq!(opened.expect("Decrypt"), dek);
    println!("cluster Encrypt: {encrypt:?}; cluster Decrypt: {decrypt:?}");
    let counted = |pairs: &[(&str, u64)]| -> std::collections::BTreeMap<String, u64> {
        pairs.iter().map(|(c, n)| (c.to_string(), *n)).collect()
    };
    assert_eq!(encrypt, counted(&[("Sign", 1)]), "one cluster Encrypt");
    assert_eq!(
        decrypt,
        counted(&[
            ("FlushContext", 1),
            ("Import", 1),
            ("Load", 1),
            ("Unseal", 1)
        ]),
        "one cluster Decrypt"
    );

    let only = Some(command_code("Sign").expect("a named command"));
    rig.proxy.inject(Fault::Answer {
        rc: rc::RETRY,
        count: ENDLESS,
        only,
    });
    let started = Instant::now();
    let status = rpc::encrypt(&mut client, &random_bytes(32))
        .await
        .expect_err("no envelope while Sign fails");
    let took = started.elapsed();
    assert!(
        BUSY.iter()
            .any(|(code, word)| status.code() == *code && status.message() == *word),
        "{status:?}"
    );
    assert_clean_message(&status, "failing Sign");
    assert!(took <= DEADLINE + MARGIN, "the failing Sign took {took:?}");
    println!(
        "Sign answers {:#x} endlessly in a cluster Encrypt: {:?} {:?} in {took:?}",
        rc::RETRY,
        status.code(),
        status.message()
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let answered = rig.proxy.injected();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(rig.proxy.injected(), answered, "Sign kept being sent");
    rig.proxy.clear_faults();
    let again = rpc::encrypt(&mut client, &dek)
        .await
        .expect("Encrypt after");
    let opened = rpc::decrypt(&mut client, &again.ciphertext, &key_id).await;
    assert_eq!(opened.expect("Decrypt after"), dek);
    assert!(rig.sceau.try_exit().is_none(), "sceau exited");
}

/// The proxy's own hang (every answer held, the connection kept open): the
/// calls end at the deadline with `tpm-timeout` or `tpm-busy`, sceau stays
/// up, and once the TPM answers again the next call succeeds. The process
/// level version of this row (SIGSTOP) is in tpm_faults.rs.
#[tokio::test(flavor = "multi_thread")]
async fn tpm_holding_its_answers_times_calls_out_and_is_survived() {
    let rig = on_discrete_profile("tpm-hang", FAST, &["--request-deadline", DEADLINE_ARG]);
    let (mut client, key_id) = rig.client().await;
    let dek = random_bytes(32);
    let before = rpc::seal(&mut client, &key_id, &dek).await;

    rig.proxy.inject(Fault::Hang);
    let mut outcomes = Vec::new();
    for which in [Call::Encrypt, Call::Decrypt] {
        let started = Instant::now();
        let status = call(&mut client, which, &key_id, &before, &dek)
            .await
            .expect_err("no answer while the TPM hangs");
        let took = started.elapsed();
        assert!(
            matches!(
                (status.code(), status.message()),
                (Code::DeadlineExceeded, "tpm-timeout") | (Code::Unavailable, "tpm-busy")
            ),
            "{which:?}: {status:?}"
        );
        assert!(took <= DEADLINE + MARGIN, "{which:?} took {took:?}");
        outcomes.push(format!("{which:?} {} in {took:?}", status.message()));
    }
    rig.proxy.release();
    rpc::round_trip(&mut client, &key_id, &random_bytes(32)).await;
    rpc::open(&mut client, &key_id, &before, &dek).await;
    assert_eq!(reopens(&rig.sceau), 0, "{}", rig.sceau.stderr_text());
    println!(
        "hang: {}; after release: recovered, earlier envelope opens",
        outcomes.join("; ")
    );
}

/// The TPM's connection cut while a command is in flight (a TCTI I/O
/// error): sceau reopens the TPM and the same call succeeds within its
/// deadline.
#[tokio::test(flavor = "multi_thread")]
async fn tpm_connection_cut_mid_command_is_reopened() {
    let rig = on_discrete_profile("tpm-cut", FAST, &["--request-deadline", DEADLINE_ARG]);
    let (mut client, key_id) = rig.client().await;
    let dek = random_bytes(32);
    let before = rpc::seal(&mut client, &key_id, &dek).await;

    rig.proxy.inject(Fault::Hang);
    let seen = rig.proxy.total_commands();
    let socket = rig.sceau.socket().to_path_buf();
    let (envelope, expected, id) = (before.clone(), dek.clone(), key_id.clone());
    let started = Instant::now();
    let decrypt = tokio::spawn(async move {
        let mut client = rpc::connect(&socket).await;
        rpc::open(&mut client, &id, &envelope, &expected).await;
    });
    while rig.proxy.total_commands() == seen {
        assert!(
            started.elapsed() < DEADLINE,
            "the Decrypt never reached the TPM"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    rig.proxy.inject(Fault::DropConnections);
    rig.proxy.release();
    decrypt.await.expect("the Decrypt after the cut succeeds");
    let took = started.elapsed();
    assert!(took <= DEADLINE, "took {took:?}");
    assert_eq!(reopens(&rig.sceau), 1, "{}", rig.sceau.stderr_text());
    rpc::round_trip(&mut client, &key_id, &random_bytes(32)).await;
    println!("connection cut mid-Decrypt: reopened, ok in {took:?}");
}

/// `sceau-rig tpm-proxy` by hand: it prints `port=Q`, sceau serves through
/// it, and on SIGTERM it reports the command counts on stderr.
#[tokio::test(flavor = "multi_thread")]
async fn sceau_rig_tpm_proxy_serves_sceau_and_reports_counts() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    let tmp = TempDir::new("rig-tpm-proxy");
    let tpm = Swtpm::start(&tmp.subdir("tpm"));
    let profile = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/crates/testkit/profiles/discrete-tpm.profile"
    );
    let stderr_path = tmp.join("rig.stderr");
    let mut rig = Reaped(
        Command::new(crate::harness::sceau::rig_bin())
            .args(["tpm-proxy", "--tpm-port", &tpm.port().to_string()])
            .args(["--profile", profile, "--scale", "0.02", "--seed", "7"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(process::create_file(&stderr_path))
            .spawn()
            .expect("spawn sceau-rig"),
    );
    let mut line = String::new();
    BufReader::new(rig.0.stdout.take().expect("piped stdout"))
        .read_line(&mut line)
        .expect("read the rig's port line");
    let port = line
        .trim()
        .strip_prefix("port=")
        .unwrap_or_else(|| panic!("expected port=Q, got {line:?}"));
    let tcti = format!("swtpm:host=127.0.0.1,port={port}");
    let mut sceau = Sceau::start_on_socket(&tmp, &tmp.join("sceau.sock"), &tcti, &[]);
    let (mut client, key_id) = {
        let mut client = sceau.client().await;
        let key_id = rpc::status(&mut client).await.key_id;
        (client, key_id)
    };
    rpc::round_trip(&mut client, &key_id, &random_bytes(32)).await;
    sceau.terminate();

    process::send_signal(&rig.0, libc::SIGTERM);
    let status = process::wait_timeout(&mut rig.0, Duration::from_secs(10))
        .expect("sceau-rig exits on SIGTERM");
    let report = process::read_lossy(&stderr_path);
    assert!(status.success(), "{status}: {report}");
    for expected in [
        "TPM commands, modelled delay",
        "  Create 1",
        "  Unseal 1",
        "handles held: 0",
    ] {
        assert!(report.contains(expected), "no {expected:?} in {report}");
    }
}

/// A child killed and reaped however the test ends (a no-op once reaped).
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        process::kill_and_reap(&mut self.0);
    }
}

/// `sceau check --status-only`, the static pod's liveness probe: ten
/// probes in a row cost the TPM at most the one health probe Status makes
/// per 5 s (counted through the proxy), where one `sceau check` with its
/// round trip costs an Encrypt and a Decrypt. Shown failing: with
/// `--status-only` ignored (the round trip always made), the first probe
/// already printed "round trip: ok" and made its four TPM commands.
#[tokio::test(flavor = "multi_thread")]
async fn a_liveness_probe_costs_the_tpm_at_most_one_command_per_five_seconds() {
    let rig = on_discrete_profile("liveness-probe", FAST, &[]);
    let (client, _) = rig.client().await;
    drop(client);
    let socket = rig.sceau.socket().to_path_buf();
    let check = |args: &[&str]| {
        let run = std::process::Command::new(crate::harness::sceau::BIN)
            .arg("check")
            .args(args)
            .arg("--socket")
            .arg(&socket)
            .output()
            .expect("sceau check");
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
        String::from_utf8_lossy(&run.stdout).into_owned()
    };
    rig.proxy.reset_counts();
    let started = Instant::now();
    for _ in 0..10 {
        let out = check(&["--status-only"]);
        assert!(
            out.starts_with("status: version=v2 healthz=ok key_id="),
            "{out}"
        );
        assert!(!out.contains("round trip"), "{out}");
    }
    let probes = rig.proxy.total_commands();
    let allowed = 1 + started.elapsed().as_secs() / 5;
    println!(
        "10 x check --status-only in {:?}: {probes} TPM commands {:?}",
        started.elapsed(),
        rig.proxy.counts()
    );
    assert!(
        probes <= allowed,
        "{probes} TPM commands for ten probes: {:?}",
        rig.proxy.counts()
    );

    rig.proxy.reset_counts();
    let out = check(&[]);
    assert!(out.contains("round trip: ok"), "{out}");
    assert!(rig.proxy.total_commands() >= 4, "{:?}", rig.proxy.counts());
}
