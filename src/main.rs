//! The `sceau` binary: parses the command line and runs the start-up sequence.
//!
//! `serve` runs the steps docs/hardening.md lists, in that order: it stays
//! single-threaded until the sandbox is in place (Landlock and capabilities
//! are per thread), then starts the TPM thread and builds the tokio runtime by
//! hand (no `#[tokio::main]`), installs seccomp on every thread, and only then
//! reports READY=1.
//!
//! Its two `unsafe` blocks (environment writes while single-threaded) are
//! listed in audit/unsafe.md; each carries an explicit `allow(unsafe_code)`.

#![deny(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]
#![deny(clippy::multiple_unsafe_ops_per_block)]

use std::process::ExitCode;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use sceau::cli::{self, CheckOptions, Command, EnrollStep, ServeOptions, SrkPublicOptions};
use sceau::kms;
use sceau::sandbox::landlock::LandlockPolicy;
use sceau::sandbox::{self, TpmAccess};
use sceau::server::peer::AllowedCallers;
use sceau::server::{self, DeferredStopSignals, StopReason, socket};
use sceau::tpm::worker::TpmWorker;
use sceau::tpm::{ParameterEncryption, Tpm, TpmConfig};
use sceau::{activation, notify};
use sceau_format::members::{Membership, member_file};
use sceau_format::storage_key::StorageKey;
use tss_esapi::tcti_ldr::TctiNameConf;

/// Every heap block is wiped before it is freed, so DEK bytes in gRPC, h2 and
/// prost buffers do not outlive their call.
#[global_allocator]
static ALLOCATOR: sceau::alloc::WipeOnFree = sceau::alloc::WipeOnFree;

/// Tokio threads for gRPC. TPM work runs on its own thread, so two suffice.
const RUNTIME_THREADS: usize = 2;
/// `sceau check` gives up after this: a healthy sceau answers in milliseconds,
/// and each of its calls is bounded by a 2.5 s TPM deadline.
const CHECK_TIMEOUT: Duration = Duration::from_secs(10);
/// How long to wait for the TPM thread to flush its handles at exit.
const WORKER_EXIT_WAIT: Duration = Duration::from_secs(3);

fn main() -> ExitCode {
    let journald = std::env::var_os("JOURNAL_STREAM").is_some();
    sceau::logging::init(
        sceau::logging::level_from_env(std::env::var("SCEAU_LOG").ok().as_deref()),
        journald,
    );
    #[cfg(feature = "insecure-test-hooks")]
    sceau::hooks::disable_from_environment();
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<()> {
    let args = cli::utf8_args(std::env::args_os().skip(1))?;
    let env_tcti = std::env::var(cli::TCTI_ENV).ok();
    match cli::parse(&args, env_tcti.as_deref())? {
        Command::Help(text) => print!("{text}"),
        Command::Version => println!("sceau {}", env!("CARGO_PKG_VERSION")),
        Command::Serve(options) => serve(options)?,
        Command::Check(options) => check(options)?,
        Command::SelfTest(options) => {
            if !sceau::selftest::run(&options).context("preparing the selftest's targets")? {
                bail!("the sandbox let a forbidden action through");
            }
        }
        Command::SrkPublic(options) => srk_public(&options)?,
        Command::Enroll(step) => enroll(&step)?,
    }
    Ok(())
}

/// The start-up sequence. It stays single-threaded until the sandbox is in
/// place (Landlock and capabilities are per thread), and sends READY=1 only
/// once every step has succeeded.
fn serve(options: ServeOptions) -> anyhow::Result<()> {
    reexec_with_malloc_wiping()?;
    sandbox::forbid_core_dumps().context("making the process non-dumpable")?;
    silence_tss_log();
    // SAFETY: nothing has started a thread yet (the TPM thread and the
    // runtime start in confine_and_serve), so the environment writes in
    // take_passed_fds cannot race with a reader.
    #[allow(unsafe_code)]
    let passed = unsafe { sceau::sys::take_passed_fds() }.context("reading LISTEN_FDS")?;
    let activated = activation::select_listener(passed)?;
    // The only socket sd_notify will use: after the sandbox no unix socket
    // can be created or connected (see sandbox::seccomp).
    notify::connect();
    let config = TpmConfig {
        tcti: TctiNameConf::from_str(&options.tcti)
            .with_context(|| format!("invalid --tcti {:?}", options.tcti))?,
        srk_handle: options.srk_handle,
        parameter_encryption: ParameterEncryption::SaltedSession,
    };
    let socket_options = socket::SocketOptions {
        path: options.socket.clone(),
        mode: options.socket_mode,
        group: options.socket_group.clone(),
    };
    if activated.is_none() {
        socket::preflight(&socket_options)?;
    }
    notify::status("opening the TPM");
    let tpm = notify::extending_start_timeout(|| open_tpm(&options, &config))?;
    let membership = load_membership(&options, &tpm)?;
    let deferred_signals = DeferredStopSignals::hold().context("holding stop signals")?;
    let (listener, socket_file) = match activated {
        Some(listener) => (listener, None),
        None => socket::bind(&socket_options).map(|(l, f)| (l, Some(f)))?,
    };
    let result = confine_and_serve(
        &options,
        membership,
        tpm,
        config,
        listener,
        socket_file.as_ref(),
        deferred_signals,
    );
    if let Some(file) = socket_file {
        file.remove();
    }
    match result? {
        StopReason::TpmLost => bail!("stopped because the TPM was lost"),
        reason => log::info!("stopped cleanly ({reason})"),
    }
    Ok(())
}

fn open_tpm(options: &ServeOptions, config: &TpmConfig) -> anyhow::Result<Tpm> {
    log::info!("opening the TPM at {}", options.tcti);
    if !has_resource_manager(&options.tcti) {
        log::warn!(
            "{} has no resource manager: sceau flushes the objects and sessions it finds \
             and assumes it is this TPM's only user",
            options.tcti
        );
    }
    let started = Instant::now();
    let tpm = Tpm::open(config).with_context(|| format!("opening the TPM at {}", options.tcti))?;
    let srk = tpm.srk();
    log::info!(
        "SRK {:?}{} ready in {:?}; Name {}",
        srk.algorithm,
        srk.persistent
            .map(|h| format!(" (persistent {h:#010x})"))
            .unwrap_or_default(),
        started.elapsed(),
        sceau::tpm::srk::hex(srk.name.value()),
    );
    Ok(tpm)
}

/// Sandboxes the process, moves the TPM to its thread, builds the runtime,
/// installs seccomp, and serves until stopped.
/// Cluster mode: reads the member files before the sandbox closes the
/// filesystem, and logs every member's Name so operators can audit it.
/// `--recovery-key` alone makes a cluster of this node and the recovery key.
fn load_membership(options: &ServeOptions, tpm: &Tpm) -> anyhow::Result<Option<Arc<Membership>>> {
    let own_public = || tpm.srk().tpm2b_public();
    let membership = match (&options.members, &options.recovery_key) {
        (None, None) => {
            log::warn!(
                "no --recovery-key: the Secrets this node encrypts have no backup and are lost \
                 with this TPM (docs/recovery.md)"
            );
            return Ok(None);
        }
        (Some(dir), recovery) => {
            sceau::cluster::load::load(dir, recovery.as_deref(), &own_public()?)
                .with_context(|| format!("loading the members in {}", dir.display()))?
        }
        (None, Some(recovery)) => {
            { sceau::cluster::load::alone_with_recovery(recovery, &own_public()?) }
                .with_context(|| format!("loading the recovery key {}", recovery.display()))?
        }
    };
    for recipient in membership.describe() {
        log::info!("cluster {recipient}");
    }
    log::info!("cluster mode: key_id {}", membership.key_id());
    Ok(Some(Arc::new(membership)))
}

/// Prints the member file of this node's SRK.
fn srk_public(options: &SrkPublicOptions) -> anyhow::Result<()> {
    let tpm = open_tpm_for_tool(options)?;
    print!(
        "{}",
        member_file(&srk_storage_key(&tpm)?, &tpm.srk().key_id())
    );
    Ok(())
}

/// The TPM for a one-shot command (no daemon, no sandbox). tpm2-tss stays
/// quiet, as for `serve`: an absent EK certificate is an answer, not an error.
fn open_tpm_for_tool(options: &SrkPublicOptions) -> anyhow::Result<Tpm> {
    silence_tss_log();
    let config = TpmConfig {
        tcti: TctiNameConf::from_str(&options.tcti)
            .with_context(|| format!("invalid --tcti {:?}", options.tcti))?,
        srk_handle: options.srk_handle,
        parameter_encryption: ParameterEncryption::SaltedSession,
    };
    Tpm::open(&config).with_context(|| format!("opening the TPM at {}", options.tcti))
}

fn srk_storage_key(tpm: &Tpm) -> anyhow::Result<StorageKey> {
    StorageKey::from_tpm2b_public(&tpm.srk().tpm2b_public()?)
        .context("cluster mode needs an ECC P-256 SRK, and this TPM gave another")
}

fn enroll(step: &EnrollStep) -> anyhow::Result<()> {
    use sceau_format::enrollment;
    let read = |path: &std::path::Path| {
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
    };
    match step {
        EnrollStep::Request(options) => {
            let mut tpm = open_tpm_for_tool(options)?;
            let srk = srk_storage_key(&tpm)?;
            let key_id = tpm.srk().key_id();
            let (ctx, _) = tpm.context_and_srk();
            let ek = sceau::tpm::enroll::endorsement_key(ctx)?;
            let ek_key = StorageKey::from_tpm2b_public(&ek.public)
                .context("the EK is not an ECC P-256 decryption key")?;
            let text = enrollment::request_file(&srk, &key_id, &ek_key, ek.certificate.as_deref());
            print!("{text}");
        }
        EnrollStep::Respond { tpm, challenge } => {
            let mut tpm = open_tpm_for_tool(tpm)?;
            let (ctx, srk) = tpm.context_and_srk();
            let blob = enrollment::parse_challenge(&read(challenge)?, srk.name.value())?;
            let srk_handle = srk.handle;
            let ek = sceau::tpm::enroll::endorsement_key(ctx)?;
            let credential = sceau::tpm::enroll::activate_credential(
                ctx,
                srk_handle,
                &ek,
                &blob.duplicate,
                &blob.in_sym_seed,
            )
            .context("TPM2_ActivateCredential refused the challenge")?;
            print!("{}", enrollment::response_file(&credential));
        }
    }
    Ok(())
}

fn confine_and_serve(
    options: &ServeOptions,
    membership: Option<Arc<Membership>>,
    tpm: Tpm,
    config: TpmConfig,
    listener: std::os::unix::net::UnixListener,
    socket_file: Option<&socket::SocketFile>,
    deferred_signals: DeferredStopSignals,
) -> anyhow::Result<StopReason> {
    let tpm_access = TpmAccess::for_tcti(&options.tcti);
    let policy = LandlockPolicy {
        tpm: tpm_access.clone(),
        removable_socket_dir: socket_file.and_then(|f| f.path().parent()).map(Into::into),
    };
    pin_tcti_library(&options.tcti);
    let files = sandbox::confine(&policy, options.landlock)?;

    let key_id = match &membership {
        Some(membership) => membership.key_id().clone(),
        None => tpm.srk().key_id(),
    };
    let (worker, death, worker_thread) = TpmWorker::spawn(tpm, config, options.request_deadline)
        .context("starting the TPM thread")?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(RUNTIME_THREADS)
        .thread_name("sceau-grpc")
        .enable_all()
        .build()
        .context("building the async runtime")?;
    let allow_inet = matches!(tpm_access, Some(TpmAccess::Tcp { .. }));
    sandbox::seccomp::install(allow_inet, files, options.seccomp)?;

    let worker = Arc::new(worker);
    let service =
        kms::service_for(worker.clone(), membership).context("starting the wrapping thread")?;
    let callers = AllowedCallers::root_and(&options.allowed_uids);
    let reason = runtime.block_on(async {
        let listener = tokio::net::UnixListener::from_std(listener)?;
        let stop = server::stop_requested(death)?;
        drop(deferred_signals);
        if let Some(interval) = notify::watchdog_interval() {
            tokio::spawn(feed_watchdog(worker, interval));
        }
        match socket_file {
            Some(file) => log::info!("serving key_id={key_id} on {}", file.path().display()),
            None => log::info!("serving key_id={key_id} on the socket systemd passed"),
        }
        notify::ready(&key_id);
        anyhow::Ok(server::serve(listener, service, callers, options.request_deadline, stop).await?)
    })?;
    drop(runtime);
    wait_for_worker(worker_thread);
    Ok(reason)
}

/// glibc tunables that make free() overwrite every freed C heap block
/// (`perturb`; it skips blocks kept in the per-thread cache, hence
/// `tcache_count=0`). They cover what tpm2-tss and OpenSSL allocate, which
/// the Rust allocator never sees. glibc reads tunables only at exec.
const MALLOC_WIPING_TUNABLES: &str = "glibc.malloc.tcache_count=0:glibc.malloc.perturb=165";
/// Set on the re-executed process, so that it never re-executes again.
const REEXEC_MARKER: &str = "SCEAU_REEXECUTED";

/// Re-executes sceau once with [`MALLOC_WIPING_TUNABLES`] added to
/// GLIBC_TUNABLES, before anything else happens (same pid, same fds, so
/// socket activation is unaffected). A no-op when they are already set.
fn reexec_with_malloc_wiping() -> anyhow::Result<()> {
    use std::os::unix::process::CommandExt;
    if !sceau::hooks::enabled(sceau::hooks::Protection::MallocTunables) {
        return Ok(());
    }
    // The marker, not the tunables, says "already done": glibc erases
    // GLIBC_TUNABLES for a secure-execution (setuid, file capabilities)
    // binary, and checking for them would then re-execute forever.
    if std::env::var_os(REEXEC_MARKER).is_some() {
        if !std::env::var("GLIBC_TUNABLES").is_ok_and(|t| t.contains(MALLOC_WIPING_TUNABLES)) {
            log::warn!("glibc ignored GLIBC_TUNABLES; freed C heap blocks are not wiped");
        }
        return Ok(());
    }
    let current = std::env::var("GLIBC_TUNABLES").unwrap_or_default();
    let tunables = match current.as_str() {
        "" => MALLOC_WIPING_TUNABLES.to_string(),
        other => format!("{other}:{MALLOC_WIPING_TUNABLES}"),
    };
    let mut args = std::env::args_os();
    let program = args.next().unwrap_or_else(|| "sceau".into());
    let error = std::process::Command::new("/proc/self/exe")
        .arg0(program)
        .args(args)
        .env("GLIBC_TUNABLES", tunables)
        .env(REEXEC_MARKER, "1")
        .exec();
    Err(error).context("re-executing with glibc's free() wiping enabled")
}

/// Keeps the TCTI library loaded, so that the TPM thread can reopen a lost
/// connection after Landlock has closed /usr/lib. Without it the reopen
/// fails cleanly and sceau exits for its supervisor to restart it.
fn pin_tcti_library(tcti: &str) {
    let kind = tcti.split(':').next().unwrap_or(tcti);
    if let Err(e) = sceau::sys::pin_tcti_library(kind) {
        log::warn!(
            "could not keep the {kind} TCTI loaded ({e}); a lost TPM connection will end sceau"
        );
    }
}

/// Pings the systemd watchdog at half its interval, but only while the TPM
/// answers: a wedged TPM thread then turns into a restart.
async fn feed_watchdog(worker: Arc<TpmWorker>, interval: Duration) {
    let mut ticks = tokio::time::interval(interval / 2);
    loop {
        ticks.tick().await;
        match worker.health().await {
            Ok(()) => notify::watchdog(),
            Err(fault) => log::warn!("TPM unhealthy ({fault}); withholding the watchdog ping"),
        }
    }
}

/// The kernel's /dev/tpmrm* and tpm2-abrmd give each client its own view of
/// the TPM's handles; anything else is the raw TPM, shared with every user.
fn has_resource_manager(tcti: &str) -> bool {
    tcti.starts_with("device:/dev/tpmrm") || tcti.starts_with("tabrmd")
}

/// The worker flushes the SRK and the session when its queue closes. A TPM
/// that hangs must not keep the process alive, so the wait is bounded.
fn wait_for_worker(worker_thread: std::thread::JoinHandle<()>) {
    let deadline = Instant::now() + WORKER_EXIT_WAIT;
    while !worker_thread.is_finished() {
        if Instant::now() >= deadline {
            log::warn!("the TPM thread did not finish within {WORKER_EXIT_WAIT:?}; exiting anyway");
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = worker_thread.join();
}

/// tpm2-tss prints its own diagnostics to stderr, TPM return codes included.
/// sceau logs its own account of every failure, so the TSS is silenced
/// unless the operator set TSS2_LOG explicitly.
fn silence_tss_log() {
    if std::env::var_os("TSS2_LOG").is_none() {
        // SAFETY: called before any other thread exists (the runtime and the
        // TPM thread start later), so nothing reads the environment concurrently.
        #[allow(unsafe_code)]
        unsafe {
            std::env::set_var("TSS2_LOG", "all+none");
        }
    }
}

fn check(options: CheckOptions) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let report = runtime
        .block_on(async {
            tokio::time::timeout(CHECK_TIMEOUT, sceau::client::check(&options.socket)).await
        })
        .map_err(|_| anyhow::anyhow!("no answer within {CHECK_TIMEOUT:?}"))
        .and_then(|report| Ok(report?))
        .with_context(|| format!("checking {}", options.socket.display()))?;
    let status = &report.status;
    println!(
        "status: version={} healthz={} key_id={}",
        status.version, status.healthz, status.key_id
    );
    println!(
        "round trip: ok (32-byte DEK, {}-byte ciphertext, encrypt {:.1} ms, decrypt {:.1} ms)",
        report.ciphertext_len,
        report.encrypt.as_secs_f64() * 1e3,
        report.decrypt.as_secs_f64() * 1e3
    );
    if status.healthz != "ok" {
        bail!("sceau reports healthz={}", status.healthz);
    }
    Ok(())
}
