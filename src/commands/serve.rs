//! `sceau serve`: the start-up sequence, as a checklist. The step numbers are
//! those of docs/hardening.md ("Start-up order"), and the steps run in that
//! order: the process stays single-threaded until the sandbox is in place
//! (Landlock and capabilities are per thread), then starts the TPM thread and
//! builds the tokio runtime by hand (no `#[tokio::main]`), installs seccomp on
//! every thread, and only then reports READY=1.
//!
//! The runtime is tokio's current-thread one, on the main thread: gRPC work
//! is a fraction of a millisecond per call next to the TPM thread's, which
//! does all TPM work, and cluster mode's wrapping has its own thread too. So
//! the serving process has two threads (three in cluster mode), not four:
//! fewer stacks and malloc arenas to keep resident (docs/performance.md).
#![forbid(unsafe_code)]

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use sceau::cli::ServeOptions;
use sceau::events::{self, Event, Kind};
use sceau::kek::StateDir;
use sceau::kms;
use sceau::kms::ServedKeys;
use sceau::sandbox::landlock::LandlockPolicy;
use sceau::sandbox::{self, TpmAccess};
use sceau::server::peer::AllowedCallers;
use sceau::server::{self, DeferredStopSignals, StopReason, socket};
use sceau::{activation, metrics, notify};
use sceau_format::advisories::{self, Advisory};
use sceau_format::kek::single_node_config;
use sceau_format::members::Membership;
use sceau_sys as sys;
use sceau_tpm::worker::{SealingTpm, TpmWorker};
use sceau_tpm::{Observer, ParameterEncryption, Tcti, Tpm, TpmConfig};

use super::{RevealingTssLog, open_tpm_explained, silence_tss_log};

/// How long to wait for the TPM thread to flush its handles at exit.
const WORKER_EXIT_WAIT: Duration = Duration::from_secs(3);
/// How often the C heap's free pages go back to the kernel. A burst of
/// calls (an apiserver restart's Decrypts) leaves holes in the heap, which
/// glibc's perturb has written and so keeps resident; trimming costs
/// microseconds when there is nothing to return.
const HEAP_TRIM_INTERVAL: Duration = Duration::from_secs(10);

/// Steps 0 to 3 here, 5 to 11 in [`confine_and_serve`]; READY=1 is sent only
/// once every step has succeeded.
pub fn run(options: ServeOptions) -> anyhow::Result<()> {
    // 0. Re-execute once with glibc's free() wiping turned on.
    reexec_with_malloc_wiping()?;
    let mut clock = StartupClock::start();
    log::info!("{}", sceau::build_info::BUILD.summary());
    //    The process's own memory, for step 3's proof of the TSS scrub:
    //    once non-dumpable, a process that is not root cannot open it.
    let own_memory = sys::OwnMemory::open().context("opening /proc/self/mem")?;
    // 1. Not dumpable, no core file; tpm2-tss quiet on stderr.
    sandbox::forbid_core_dumps().context("making the process non-dumpable")?;
    silence_tss_log(match options.tss_log_reveals_secrets {
        true => RevealingTssLog::AllowAsAsked,
        false => RevealingTssLog::Refuse,
    })?;
    clock.step("non-dumpable");
    // 2. The socket systemd passed, if any, and the one sd_notify socket:
    //    after the sandbox no unix socket can be created or connected.
    let passed = sys::take_passed_fds().context("reading LISTEN_FDS")?;
    let activated = activation::select_listeners(passed)?;
    notify::connect();
    events::connect_for_daemon();
    let socket_options = socket::SocketOptions {
        path: options.socket.clone(),
        mode: options.socket_mode,
        group: options.socket_group.clone(),
    };
    if activated.is_none() {
        require_socket_directory(&socket_options.path)?;
        socket::preflight(&socket_options)?;
    }
    clock.step("passed sockets, notify socket, socket checks");
    //    Boot-state binding: the policy key and the signed policies, read
    //    while the filesystem is open (the TPM checks the signatures).
    let boot_policy = match &options.policy_key {
        Some(key) => Some(sceau::boot_policy::load(
            key,
            &options.former_policy_keys,
            &options.policies,
            options.accept_policies_another_os_can_meet,
        )?),
        None => None,
    };
    if let Some(boot) = &boot_policy {
        events::emit(
            Event::new(
                Kind::PolicyLoaded,
                format!(
                    "boot-state binding: policy key {}, {} signed policies",
                    sceau_format::key_id::hex(&boot.key.name()),
                    boot.policies.len()
                ),
            )
            .field(
                "POLICY_KEY_NAME",
                sceau_format::key_id::hex(&boot.key.name()),
            )
            .field("POLICIES", boot.policies.len()),
        );
    }
    // 3. The TPM: flush leftovers, recreate the SRK, start the salted
    //    session, extending systemd's start timeout meanwhile.
    let config = TpmConfig {
        tcti: options.tcti.clone(),
        srk_handle: options.srk_handle,
        parameter_encryption: ParameterEncryption::SaltedSession,
        observer: Observer::new(metrics::TpmMetrics),
        // Cluster mode signs every envelope it makes.
        envelope_signing_key: options.members.is_some() || options.recovery_key.is_some(),
        boot_policy,
        owner_auth: sceau::credentials::owner_auth()?,
        pinned_srk_name: options.expect_srk_name,
    };
    let advisories = load_advisories(options.tpm_advisories_file.as_deref())?;
    notify::status("opening the TPM");
    let mut tpm = notify::extending_start_timeout(|| open_tpm(&config))?;
    check_advisories(&mut tpm, &advisories, options.refuse_advised_tpms)?;
    clock.step("TPM open: SRK and salted session");
    //    Proves that scrubbing tpm2-tss's buffers works on this tpm2-tss.
    if sceau_sys::hooks::enabled(sceau_sys::hooks::Protection::TssScrubCheck) {
        tpm.verify_buffer_scrub(&own_memory).with_context(|| {
            format!(
                "refusing to serve with this tpm2-tss (sceau was built against {}); sceau \
                 supports the tpm2-tss of Debian 12 (docs/install.md)",
                env!("SCEAU_BUILD_TPM2_TSS")
            )
        })?;
        clock.step("TSS buffer scrub verified");
    }
    drop(own_memory);
    //    Cluster mode: the member files, read while the filesystem is open.
    let auth_policy = config
        .boot_policy
        .as_ref()
        .map(|boot| boot.key.authorized_policy());
    let membership = load_membership(&options, &tpm, auth_policy)?;
    //    The KEK generation and the key_id, with the state directory's
    //    ledger, written while the filesystem is open.
    let digest = membership.as_ref().map(|m| m.digest().0);
    let served_keys = served_keys(&options, &mut tpm, digest.as_ref())?;
    let membership = membership
        .map(|m| membership_at_its_epoch(&options, &mut tpm, m, &served_keys))
        .transpose()?
        .map(Arc::new);
    if let Some(membership) = &membership {
        let digest = sceau_format::key_id::hex(&membership.digest().0);
        events::emit(
            Event::new(
                Kind::Membership,
                format!(
                    "cluster mode: {} members, key_id {}",
                    membership.describe().len(),
                    membership.key_id()
                ),
            )
            .field("KEY_ID", membership.key_id())
            .field("MEMBERS", membership.describe().len())
            .field("MEMBERSHIP_DIGEST", digest),
        );
    }
    clock.step("KEK generations, key_id");
    //    Stop signals wait from here until their handlers exist.
    let deferred_signals = DeferredStopSignals::hold().context("holding stop signals")?;
    let (listeners, socket_file) = match activated {
        Some(listeners) => (listeners, None),
        None => socket::bind(&socket_options).map(|(kms, f)| {
            let listeners = activation::Listeners {
                kms,
                metrics: Vec::new(),
            };
            (listeners, Some(f))
        })?,
    };
    clock.step("members, socket bound");
    // 5 to 11.
    let result = confine_and_serve(
        &options,
        membership,
        served_keys,
        tpm,
        config,
        listeners,
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

/// The directory sceau will bind its socket in must exist before the TPM
/// is touched: otherwise the SRK would be made, and a slow TPM waited for,
/// only to fail at bind with a bare "No such file or directory".
fn require_socket_directory(socket: &Path) -> anyhow::Result<()> {
    let dir = match socket.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let fix = |what: &str| {
        format!(
            "the socket directory {} {what}: create it (install -d -m 0755 {}), or pass --socket \
             with a path in an existing directory; under systemd, use sceau.socket, which \
             creates /run/sceau",
            dir.display(),
            dir.display()
        )
    };
    match std::fs::metadata(dir) {
        Ok(metadata) if metadata.is_dir() => Ok(()),
        Ok(_) => bail!(fix("is not a directory")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(fix("does not exist")),
        Err(e) => bail!(fix(&format!("cannot be reached ({e})"))),
    }
}

fn open_tpm(config: &TpmConfig) -> anyhow::Result<Tpm> {
    let tcti = &config.tcti;
    log::info!("opening the TPM at {tcti}");
    if !tcti.has_resource_manager() {
        log::warn!(
            "{tcti} has no resource manager: sceau flushes the objects and sessions it finds \
             and assumes it is this TPM's only user"
        );
    }
    let started = Instant::now();
    let tpm = open_tpm_explained(config)?;
    let srk = tpm.srk();
    log::info!(
        "SRK {:?}{} ready in {:?}; Name {}",
        srk.algorithm,
        srk.persistent
            .map(|h| format!(" (persistent {h:#010x})"))
            .unwrap_or_default(),
        started.elapsed(),
        sceau_tpm::srk::hex(srk.name.value()),
    );
    Ok(tpm)
}

/// The advisories sceau checks the TPM against: the built-in list and the
/// operator's file, read before the sandbox closes the filesystem. A file
/// that is not a list stops the start with its line and why.
fn load_advisories(file: Option<&Path>) -> anyhow::Result<Vec<Advisory>> {
    let mut list = advisories::parse(advisories::BUILTIN).context("the built-in advisory list")?;
    if let Some(file) = file {
        let text = read_bounded_text(file, MAX_ADVISORY_FILE).with_context(|| {
            format!(
                "reading --tpm-advisories-file {}: fix or remove the option",
                file.display()
            )
        })?;
        let added = advisories::parse(&text).with_context(|| {
            format!(
                "--tpm-advisories-file {} is not an advisory list (CVE MANUFACTURER \
                 FIRMWARE SUMMARY a line; docs/hardening.md)",
                file.display()
            )
        })?;
        log::info!(
            "{} advisories from {} beside the {} built in",
            added.len(),
            file.display(),
            list.len()
        );
        list.extend(added);
    }
    Ok(list)
}

/// A bound on `--tpm-advisories-file`: far beyond any real list.
const MAX_ADVISORY_FILE: u64 = 64 * 1024;

fn read_bounded_text(path: &Path, limit: u64) -> anyhow::Result<String> {
    use std::io::Read as _;
    let mut text = String::new();
    std::fs::File::open(path)?
        .take(limit + 1)
        .read_to_string(&mut text)?;
    if text.len() as u64 > limit {
        bail!("longer than {limit} bytes");
    }
    Ok(text)
}

/// Logs the TPM's identity, sets `sceau_tpm_info` and `sceau_tpm_advisory`,
/// and holds the identity against the advisories: each match is a warning,
/// or with `refuse` the end of the start. A TPM that does not say its
/// firmware cannot be cleared, so `refuse` refuses it too.
fn check_advisories(tpm: &mut Tpm, list: &[Advisory], refuse: bool) -> anyhow::Result<()> {
    let identity = match tpm.identity() {
        Ok(identity) => identity,
        Err(error) if refuse => bail!(
            "the TPM did not say who made it or which firmware it runs ({}), so \
             --tpm-advisories refuse cannot clear it: use --tpm-advisories warn to serve anyway",
            error.fault()
        ),
        Err(error) => {
            log::warn!(
                "the TPM did not say who made it ({}): sceau_tpm_info stays empty and no \
                 advisory was checked",
                error.fault()
            );
            return Ok(());
        }
    };
    log::info!(
        "TPM: manufacturer {}, vendor {:?}, firmware {}",
        identity.manufacturer,
        identity.vendor,
        identity.firmware
    );
    let matched = advisories::matching(list, &identity.manufacturer, identity.firmware_version);
    metrics::METRICS.set_tpm_advisories(matched.iter().map(|a| a.cve.clone()).collect());
    let firmware = format!(
        "{} firmware {}",
        identity.manufacturer, identity.firmware_version
    );
    metrics::METRICS.set_tpm_identity(identity);
    for advisory in &matched {
        let line = format!(
            "this TPM ({firmware}) is under {} ({}): update its firmware from the vendor",
            advisory.cve, advisory.summary
        );
        if refuse {
            bail!("{line}, or use --tpm-advisories warn to serve anyway");
        }
        log::warn!("{line}; serving, as --tpm-advisories warn asks");
    }
    Ok(())
}

/// Cluster mode: reads the member files before the sandbox closes the
/// filesystem, and logs every member's Name so operators can audit it.
/// `--recovery-key` alone makes a cluster of this node and the recovery key.
fn load_membership(
    options: &ServeOptions,
    tpm: &Tpm,
    auth_policy: Option<[u8; 32]>,
) -> anyhow::Result<Option<Membership>> {
    if options.members.is_none() && options.enrollment_key.is_some() {
        anyhow::bail!("--enrollment-key checks member files: give --members DIR too");
    }
    let enrollment = match (&options.members, &options.enrollment_key) {
        (_, Some(path)) => Some(
            sceau::cluster::load::enrollment_key(path)
                .with_context(|| format!("loading the enrollment key {}", path.display()))?,
        ),
        (Some(_), None) => {
            log::warn!(
                "no --enrollment-key: membership rests on the member files' permissions; a \
                 file someone with root wrote admits their key (docs/ha.md, enrollment)"
            );
            None
        }
        (None, None) => None,
    };
    let membership = match (&options.members, &options.recovery_key) {
        (None, None) => {
            log::warn!(
                "no --recovery-key: the Secrets this node encrypts have no backup and are lost \
                 with this TPM (docs/recovery.md)"
            );
            return Ok(None);
        }
        (Some(dir), recovery) => {
            let own = tpm.members_by_generation()?;
            let (membership, generation) =
                sceau::cluster::load::load(dir, recovery.as_deref(), &own, enrollment.as_ref())
                    .with_context(|| format!("loading the members in {}", dir.display()))?;
            let current = own[0].0;
            if generation != current {
                log::warn!(
                    "the member files list this node under KEK generation {generation}, not the \
                     current {current}: DEKs are wrapped for generation {generation} until \
                     `sceau srk-public` is copied to every member (docs/ha.md, \"Rotating a \
                     member's KEK\")"
                );
            }
            membership
        }
        (None, Some(recovery)) => {
            // The current generation: a rotation takes effect at the next
            // start, for this node and the recovery key alone.
            let current = tpm.members_by_generation()?.remove(0).1;
            { sceau::cluster::load::alone_with_recovery(recovery, current) }
                .with_context(|| format!("loading the recovery key {}", recovery.display()))?
        }
    };
    let membership = match &options.former_members {
        None => membership,
        Some(dir) => sceau::cluster::load::former(membership, dir, enrollment.as_ref())
            .with_context(|| format!("loading the former members in {}", dir.display()))?,
    };
    // This node under its other KEK generations: envelopes wrapped for
    // them (before a rotation reached the member files) keep opening here.
    let own = tpm
        .members_by_generation()?
        .into_iter()
        .map(|(_, member)| member);
    let membership = membership.with_own_generations(own);
    if options.accept_unsigned_envelopes {
        log::warn!(
            "--accept-unsigned-envelopes: version 2 envelopes open unsigned, and anyone with a \
             member file can forge one; drop the flag once the Secrets are rewritten \
             (docs/migration.md)"
        );
    }
    // Cluster envelopes are sealed in software: the membership puts the
    // boot policy key's PolicyAuthorize in every object it makes.
    let membership = match auth_policy {
        Some(policy) => membership.with_boot_policy(policy),
        None => membership,
    };
    for recipient in membership.describe() {
        log::info!("cluster {recipient}");
    }
    if auth_policy.is_some() {
        log::info!("cluster mode: every DEK bound to the boot policy key");
    }
    Ok(Some(membership))
}

/// The cluster key_id's epoch, so that a membership brought back never
/// reports a key_id it reported before (docs/ha.md, "The membership
/// epoch"). With `--members`, the epoch is the members directory's `epoch`
/// file, the same on every member; this node refuses an epoch lower than
/// one it served, and the same epoch with another membership (the TPM's
/// membership mark). With `--recovery-key` alone, the node is the whole
/// membership and its own key_id's epoch, from the TPM's counter, serves.
fn membership_at_its_epoch(
    options: &ServeOptions,
    tpm: &mut Tpm,
    membership: Membership,
    served_keys: &ServedKeys,
) -> anyhow::Result<Membership> {
    let Some(dir) = &options.members else {
        let membership = membership.with_epoch(served_keys.table().current.epoch);
        log::info!("cluster mode: key_id {}", membership.key_id());
        return Ok(membership);
    };
    let file = dir.join(sceau::cluster::load::EPOCH_FILE);
    let Some(epoch) = sceau::cluster::load::epoch(dir)? else {
        log::warn!(
            "no {}: the cluster key_id is the membership's alone, so a membership brought back \
             (a member out and in again) reports its earlier key_id; write the same number, \
             from 1, into that file on every member (docs/ha.md, \"The membership epoch\")",
            file.display()
        );
        log::info!("cluster mode: key_id {}", membership.key_id());
        return Ok(membership);
    };
    let digest = membership.digest().0;
    match tpm
        .membership_mark()
        .context("reading the membership mark")?
    {
        Some((served, _)) if served > epoch => bail!(
            "{} says epoch {epoch}, but this node has served epoch {served}: an older membership \
             would report a key_id it reported before; write a number above {served} into {} \
             on every member",
            file.display(),
            file.display()
        ),
        Some((served, mark)) if served == epoch && mark != digest => bail!(
            "the membership changed, but {} still says epoch {epoch}: write {} into it on every \
             member, so that the new membership has a key_id never reported before",
            file.display(),
            epoch + 1
        ),
        Some((served, _)) if served == epoch => {}
        _ => tpm
            .set_membership_mark(epoch, &digest)
            .context("recording the membership epoch in the TPM")?,
    }
    let membership = membership.with_epoch(epoch);
    log::info!(
        "cluster mode: key_id {} (membership epoch {epoch})",
        membership.key_id()
    );
    Ok(membership)
}

/// Sandboxes the process, moves the TPM to its thread, builds the runtime,
/// installs seccomp, and serves until stopped.
#[allow(clippy::too_many_arguments)]
fn confine_and_serve(
    options: &ServeOptions,
    membership: Option<Arc<Membership>>,
    served_keys: Arc<ServedKeys>,
    tpm: Tpm,
    config: TpmConfig,
    listeners: activation::Listeners,
    socket_file: Option<&socket::SocketFile>,
    deferred_signals: DeferredStopSignals,
) -> anyhow::Result<StopReason> {
    let mut clock = StartupClock::resume();
    // 5 to 7. Landlock, capabilities, no_new_privs, still on one thread; the
    //    TCTI library stays loaded so that a lost TPM can be reopened.
    let tpm_access = TpmAccess::for_tcti(&options.tcti);
    let policy = LandlockPolicy {
        tpm: tpm_access.clone(),
        removable_socket_dir: socket_file.and_then(|f| f.path().parent()).map(Into::into),
    };
    pin_tcti_library(&options.tcti);
    let files = sandbox::confine(&policy, options.landlock)?;
    clock.step("Landlock, capabilities, no_new_privs");

    // 8. The TPM thread, then the runtime (on this thread), inheriting 5 to 7.
    let clustered = membership.is_some();
    let key_id = match &membership {
        Some(membership) => membership.key_id().clone(),
        None => served_keys.table().current.key_id.clone(),
    };
    let (worker, death, worker_thread) = TpmWorker::spawn(tpm, config, options.request_deadline)
        .context("starting the TPM thread")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("building the async runtime")?;
    //    The metrics thread, if systemd passed metrics sockets: optional, so
    //    a failure is logged and the KMS serves without it.
    start_metrics(listeners.metrics, &options.metrics_allowed_uids);
    clock.step("TPM thread, runtime, metrics thread");
    // 9. seccomp on every thread.
    let allow_inet = matches!(tpm_access, Some(TpmAccess::Tcp { .. }));
    sandbox::seccomp::install(allow_inet, files, options.seccomp)?;
    clock.step("seccomp");
    let landlock = match files {
        sandbox::Files::ConfinedByLandlock => "enforced",
        sandbox::Files::NotConfined => "not enforced",
    };
    let seccomp = match options.seccomp {
        sandbox::Enforcement::Require => "kill",
        sandbox::Enforcement::BestEffort => "log",
        sandbox::Enforcement::Off => "off",
    };
    events::emit(
        Event::new(
            Kind::Sandbox,
            format!("sandbox: Landlock {landlock}, seccomp {seccomp}, no capability, no_new_privs"),
        )
        .field("LANDLOCK", landlock)
        .field("SECCOMP", seccomp),
    );

    // 10. Serve; 11. READY=1 and the watchdog, once serving.
    let worker = Arc::new(worker);
    let service = kms::service_for(
        worker.clone(),
        served_keys.clone(),
        membership,
        options.accept_unsigned_envelopes,
    )
    .context("starting the wrapping thread")?;
    let callers = AllowedCallers::root_and(&options.allowed_uids);
    let reason = runtime.block_on(async {
        let listener = tokio::net::UnixListener::from_std(listeners.kms)?;
        let stop = server::stop_requested(death)?;
        let reloads = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
        let cluster_key_id = clustered.then(|| key_id.clone());
        let started = started_event(options, &key_id, &served_keys);
        tokio::spawn(reload_on_sighup(
            reloads,
            worker.clone(),
            served_keys,
            cluster_key_id,
        ));
        drop(deferred_signals);
        if let Some(interval) = notify::watchdog_interval() {
            tokio::spawn(feed_watchdog(worker, interval));
        }
        tokio::spawn(release_free_heap_periodically());
        sceau::metrics::METRICS.set_key_id(key_id.as_str());
        match socket_file {
            // Said, because the unit's socket is the expected way: in a
            // container or a shell, sceau binding its own socket is normal,
            // under systemd it means sceau.socket was bypassed.
            Some(file) => log::info!(
                "serving key_id={key_id} on {}, a socket sceau bound itself (no socket activation)",
                file.path().display()
            ),
            None => log::info!("serving key_id={key_id} on the socket systemd passed"),
        }
        events::emit(started);
        // Start-up's freed C heap (OpenSSL's initialisation above all)
        // leaves the resident set before serving begins.
        sys::release_free_heap();
        notify::ready(&key_id);
        clock.step("heap trimmed, READY=1");
        anyhow::Ok(server::serve(listener, service, callers, options.request_deadline, stop).await?)
    })?;
    drop(runtime);
    wait_for_worker(worker_thread);
    Ok(reason)
}

/// The start's record: the key_id, the generation, the TPM, and a digest of
/// the effective configuration (every option as `sceau serve` would be
/// given it, defaults included), so that two starts can be compared
/// without their command lines.
fn started_event(options: &ServeOptions, key_id: &sceau_tpm::KeyId, keys: &ServedKeys) -> Event {
    let args = sceau::cli::Command::Serve(Box::new(options.clone()))
        .to_args()
        .unwrap_or_default();
    let digest = sceau_format::key_id::hex(&sceau_format::wire::sha256(args.join("\0").as_bytes()));
    let generation = keys.table().current.generation;
    let mut event = Event::new(
        Kind::Started,
        format!("started: key_id {key_id}, KEK generation {generation}, configuration {digest}"),
    )
    .field("KEY_ID", key_id)
    .field("GENERATION", generation)
    .field("CONFIG_DIGEST", &digest);
    if let Some(tpm) = metrics::METRICS.tpm_identity() {
        event = event
            .field("TPM_MANUFACTURER", tpm.manufacturer)
            .field("TPM_FIRMWARE", tpm.firmware);
    }
    event
}

/// The served generation and key_id at start: the ledger's last key_id if
/// nothing changed (`sceau::kek::allocate`), else a new one from the TPM's
/// epoch counter, recorded in the ledger before serving.
fn served_keys(
    options: &ServeOptions,
    tpm: &mut Tpm,
    membership: Option<&[u8; 32]>,
) -> anyhow::Result<Arc<ServedKeys>> {
    let state = StateDir::open(&options.state_dir, true)?;
    let mut ledger = state.read_ledger()?;
    let generations = tpm
        .read_generations()
        .context("reading the KEK generations")?;
    let config = single_node_config(tpm.policy_key_name(), membership);
    let counter = generations.counter;
    let record =
        sceau::kek::allocate(&mut ledger, &generations, &config, || Ok(tpm.next_epoch()?))?;
    state.write_ledger(&ledger)?;
    let (generation, _) = generations.current();
    let legacy = [Some(tpm.key_id()), tpm.unbound_key_id()]
        .into_iter()
        .flatten()
        .chain(tpm.former_key_ids())
        .collect();
    let made = ledger.generations().get(&generation).map_or(0, |g| g.made);
    metrics::METRICS.set_kek(generation, made, generations.open.len() - 1);
    match record.epoch > counter {
        true => events::emit(
            Event::new(
                Kind::KeyIdChanged,
                format!(
                    "KEK generation {generation}: new key_id {} (epoch {}; the generation or what \
                     the key_id names changed since the last one, or the ledger in {} is older \
                     than the TPM's counter)",
                    record.key_id,
                    record.epoch,
                    state.path().display()
                ),
            )
            .field("KEY_ID", &record.key_id)
            .field("GENERATION", generation)
            .field("EPOCH", record.epoch),
        ),
        false => log::info!(
            "KEK generation {generation}: key_id {} as before",
            record.key_id
        ),
    }
    Ok(Arc::new(ServedKeys::new(
        record,
        &generations,
        &ledger,
        legacy,
        config,
    )))
}

/// Each SIGHUP (`systemctl reload sceau`): reads the TPM's generations
/// again and serves the current one, replacing the key_id table whole so
/// that calls in flight finish under the table they started with. A reload
/// that fails keeps serving what was served, and says so. In cluster mode
/// the membership's key_id is reported, and a reload changes only which
/// generations open this TPM's version 1 envelopes.
async fn reload_on_sighup(
    mut reloads: tokio::signal::unix::Signal,
    worker: Arc<TpmWorker>,
    keys: Arc<ServedKeys>,
    cluster_key_id: Option<sceau_tpm::KeyId>,
) {
    while reloads.recv().await.is_some() {
        notify::reloading();
        let before = keys.table();
        let reloaded = async {
            let generations = worker.read_generations().await?;
            let table = keys
                .reload(&generations, sceau::kek::now(), || worker.next_epoch())
                .await?;
            Ok::<_, sceau_tpm::Fault>((generations, table))
        };
        match reloaded.await {
            Ok((generations, table)) => {
                let generation = table.current.generation;
                let open = generations.open.len() - 1;
                // The age counts from when this process first served the
                // generation: the ledger's record of its making is not
                // readable inside the sandbox.
                match generation != before.current.generation {
                    true => metrics::METRICS.set_kek(generation, sceau::kek::now(), open),
                    false => metrics::METRICS.set_open_generations(open),
                }
                if cluster_key_id.is_none() {
                    metrics::METRICS.set_key_id(table.current.key_id.as_str());
                }
                if table.current.key_id != before.current.key_id {
                    events::emit(
                        Event::new(
                            Kind::KeyIdChanged,
                            format!(
                                "KEK generation {generation}: key_id {} replaces {}",
                                table.current.key_id, before.current.key_id
                            ),
                        )
                        .field("KEY_ID", &table.current.key_id)
                        .field("FORMER_KEY_ID", &before.current.key_id)
                        .field("GENERATION", generation),
                    );
                }
                events::emit(
                    Event::new(
                        Kind::Reloaded,
                        format!(
                            "reloaded: KEK generation {generation} (open: {:?}), key_id {}",
                            table.open, table.current.key_id
                        ),
                    )
                    .field("KEY_ID", &table.current.key_id)
                    .field("GENERATION", generation),
                );
            }
            Err(fault) => log::error!("reload failed ({fault}); serving as before"),
        }
        let key_id = cluster_key_id
            .clone()
            .unwrap_or_else(|| keys.table().current.key_id.clone());
        notify::ready(&key_id);
    }
}

/// glibc tunables that make free() overwrite every freed C heap block
/// (`perturb`; it skips blocks kept in the per-thread cache, hence
/// `tcache_count=0`). They cover what tpm2-tss and OpenSSL allocate, which
/// the Rust allocator never sees. glibc reads tunables only at exec.
const MALLOC_WIPING_TUNABLES: [(&str, &str); 2] = [
    ("glibc.malloc.tcache_count", "0"),
    ("glibc.malloc.perturb", "165"),
];
/// Set in the same exec, for the resident set only: one malloc arena for
/// the process instead of one per thread that allocates (the TPM thread's
/// C heap and the runtime's Rust heap share it; their allocations are
/// serial next to the TPM's work anyway). Not a protection: an environment
/// that already sets the wiping tunables without it is not re-executed.
const MALLOC_FOOTPRINT_TUNABLES: [(&str, &str); 1] = [("glibc.malloc.arena_max", "1")];
/// Set on the re-executed process, so that it never re-executes again. Its
/// value, the wall-clock time of the re-exec in µs since the epoch, only
/// feeds a DEBUG line ([`reexec_duration`]); its presence is what counts.
const REEXEC_MARKER: &str = "SCEAU_REEXECUTED";
/// The byte `glibc.malloc.perturb` is set to in [`MALLOC_WIPING_TUNABLES`].
const PERTURB_BYTE: u8 = 165;

/// What step 0 does, from what this process sees.
#[derive(Debug, PartialEq, Eq)]
enum MallocWiping {
    /// glibc wipes freed blocks in this process: go on.
    InForce,
    /// Not in force: execute again with this GLIBC_TUNABLES value.
    Reexecute(String),
    /// Not in force although this process is the re-execution: glibc
    /// ignores GLIBC_TUNABLES here (a secure-execution process, a glibc
    /// without these tunables). Serving would leave DEK bytes in freed C
    /// heap blocks.
    Refuse,
}

/// Decides step 0 from its effect (`in_force`, [`sys::malloc_wipes_with`]),
/// never from the text of GLIBC_TUNABLES: glibc ignores a whole value it
/// finds malformed (from 2.39: a trailing `:`, an entry without `=`;
/// from 2.40 also `glibc.rtld.enable_secure=1`), so a value that reads
/// right may do nothing. The re-execution gets a clean value, sceau's
/// tunables alone, which is well formed on every glibc; what the value held
/// before did not work, and is named in a warning.
fn decide_malloc_wiping(in_force: bool, reexecuted: bool) -> MallocWiping {
    match (in_force, reexecuted) {
        (true, _) => MallocWiping::InForce,
        (false, true) => MallocWiping::Refuse,
        (false, false) => MallocWiping::Reexecute(
            MALLOC_WIPING_TUNABLES
                .iter()
                .chain(&MALLOC_FOOTPRINT_TUNABLES)
                .map(|(name, value)| format!("{name}={value}"))
                .collect::<Vec<_>>()
                .join(":"),
        ),
    }
}

/// Re-executes sceau once with [`MALLOC_WIPING_TUNABLES`] (and
/// [`MALLOC_FOOTPRINT_TUNABLES`]) as GLIBC_TUNABLES, before anything else
/// happens (same pid, same fds, so socket activation is unaffected), unless
/// glibc already wipes freed blocks in this process: the unit sets the
/// tunables, saving a second exec and its dynamic loading at every start.
/// Whether they are in force is checked by their effect on a probe block
/// ([`sys::malloc_wipes_with`]), and a re-executed process in which they
/// still are not refuses to serve.
fn reexec_with_malloc_wiping() -> anyhow::Result<()> {
    use std::os::unix::process::CommandExt;
    if !sceau_sys::hooks::enabled(sceau_sys::hooks::Protection::MallocTunables) {
        return Ok(());
    }
    let in_force = sys::malloc_wipes_with(PERTURB_BYTE);
    // The marker, not the tunables, says "already done": glibc erases
    // GLIBC_TUNABLES for a secure-execution (setuid, file capabilities)
    // binary, and checking for them would then re-execute forever.
    let reexecuted = std::env::var_os(REEXEC_MARKER).is_some();
    let tunables = match decide_malloc_wiping(in_force, reexecuted) {
        MallocWiping::InForce => {
            log::debug!("glibc wipes freed C heap blocks (checked by effect); no re-exec needed");
            return Ok(());
        }
        MallocWiping::Refuse => bail!(
            "glibc ignored the GLIBC_TUNABLES sceau set for itself ({}), so freed C heap blocks \
             would keep DEK bytes: refusing to start. Is sceau setuid, or run with file \
             capabilities? glibc then ignores its tunables (docs/hardening.md, step 0)",
            std::env::var("GLIBC_TUNABLES").unwrap_or_default()
        ),
        MallocWiping::Reexecute(tunables) => tunables,
    };
    if let Some(current) = std::env::var_os("GLIBC_TUNABLES").filter(|v| !v.is_empty()) {
        log::warn!(
            "GLIBC_TUNABLES={} does not make glibc wipe freed C heap blocks (glibc ignores a \
             malformed value as a whole); re-executing with {tunables} instead",
            sceau_format::text::printable(&current.to_string_lossy())
        );
    }
    let mut args = std::env::args_os();
    let program = args.next().unwrap_or_else(|| "sceau".into());
    let error = std::process::Command::new("/proc/self/exe")
        .arg0(program)
        .args(args)
        .env("GLIBC_TUNABLES", tunables)
        .env(REEXEC_MARKER, micros_since_epoch().to_string())
        .exec();
    Err(error).context("re-executing with glibc's free() wiping enabled")
}

fn micros_since_epoch() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or_default()
}

/// How long ago the first image re-executed itself, from the marker's value
/// (wall-clock time, so only as good as the clock; DEBUG use only).
fn reexec_duration() -> Option<Duration> {
    let then: u128 = std::env::var(REEXEC_MARKER).ok()?.parse().ok()?;
    let elapsed = micros_since_epoch().checked_sub(then)?;
    Some(Duration::from_micros(u64::try_from(elapsed).ok()?))
}

/// Keeps the TCTI library loaded, so that the TPM thread can reopen a lost
/// connection after Landlock has closed /usr/lib. Without it the reopen
/// fails cleanly and sceau exits for its supervisor to restart it.
fn pin_tcti_library(tcti: &Tcti) {
    let kind = tcti.kind();
    if let Err(e) = sys::pin_tcti_library(kind) {
        log::warn!(
            "could not keep the {kind} TCTI loaded ({e}); a lost TPM connection will end sceau"
        );
    }
}

/// Serves metrics on their own thread (`server::metrics`) when systemd
/// passed `metrics` sockets. Only what the KMS needs may stop sceau, so a
/// failure here is logged and sceau serves without metrics.
fn start_metrics(listeners: Vec<activation::MetricsListener>, allowed_uids: &[u32]) {
    if listeners.is_empty() {
        return;
    }
    let count = listeners.len();
    let allowed = server::metrics::AllowedScrapers::root_and(allowed_uids);
    match server::metrics::start(listeners, allowed) {
        Ok(()) => {
            log::info!("serving metrics on the {count} socket(s) systemd passed as \"metrics\"")
        }
        Err(e) => log::warn!("metrics are off: {e}; the KMS serves without them"),
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

/// Where start-up time goes: a DEBUG line per step with its duration and
/// the time since `serve` began (after the re-exec), plus, once, how long
/// the re-exec took. Reading the clock costs nanoseconds; with DEBUG off the
/// lines cost a level check.
struct StartupClock {
    last: Instant,
}

/// When `serve` began, for [`StartupClock`]'s running total.
static SERVE_BEGAN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

impl StartupClock {
    fn start() -> Self {
        if let Some(reexec) = reexec_duration() {
            log::debug!("start-up: re-exec took {} µs", reexec.as_micros());
        }
        Self {
            last: *SERVE_BEGAN.get_or_init(Instant::now),
        }
    }

    /// Goes on timing in another function, from now.
    fn resume() -> Self {
        Self {
            last: Instant::now(),
        }
    }

    fn step(&mut self, what: &str) {
        let now = Instant::now();
        log::debug!(
            "start-up: {what} in {} µs ({} µs since serve began)",
            (now - self.last).as_micros(),
            (now - *SERVE_BEGAN.get_or_init(Instant::now)).as_micros()
        );
        self.last = now;
    }
}

/// Gives the C heap's free pages back every [`HEAP_TRIM_INTERVAL`], so that
/// the resident set returns to its idle size after a burst of calls.
async fn release_free_heap_periodically() {
    let first = tokio::time::Instant::now() + HEAP_TRIM_INTERVAL;
    let mut ticks = tokio::time::interval_at(first, HEAP_TRIM_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        sys::release_free_heap();
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malloc_wiping_is_decided_by_its_effect() {
        assert_eq!(decide_malloc_wiping(true, false), MallocWiping::InForce);
        assert_eq!(decide_malloc_wiping(true, true), MallocWiping::InForce);
        assert_eq!(decide_malloc_wiping(false, true), MallocWiping::Refuse);
        // Whatever GLIBC_TUNABLES held, the re-execution gets sceau's
        // tunables alone: a well-formed value on every glibc.
        assert_eq!(
            decide_malloc_wiping(false, false),
            MallocWiping::Reexecute(
                "glibc.malloc.tcache_count=0:glibc.malloc.perturb=165:glibc.malloc.arena_max=1"
                    .into()
            )
        );
    }

    #[test]
    fn the_unit_sets_what_a_reexecution_would() {
        let MallocWiping::Reexecute(ours) = decide_malloc_wiping(false, false) else {
            unreachable!("not in force and not re-executed: re-execute");
        };
        let unit = include_str!("../../systemd/sceau.service");
        assert!(unit.contains(&format!("Environment=GLIBC_TUNABLES={ours}\n")));
    }
}
