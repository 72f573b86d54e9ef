//! The KEK lifecycle on a real swtpm: `sceau kek rotate|list|retire`, the
//! key_ids each generation is served under, a reload (SIGHUP), and what a
//! retire destroys, checked with tpm2-tools.
//!
//! swtpm has no resource manager, so `kek` runs here while sceau is
//! stopped, except where the test is the refusal to run beside it; the VM
//! test (tests/vm/guest-checks.sh) runs `kek rotate` beside a serving sceau
//! on the guest's /dev/tpmrm0 and reloads it with `systemctl reload`.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use tonic::Code;

use crate::harness::envelope::Envelope;
use crate::harness::process::{Finished, run_with_timeout};
use crate::harness::rpc::{self, generation_and_epoch};
use crate::harness::sceau::BIN;
use crate::harness::{Sceau, Swtpm, TempDir, Tpm2Tools, random_bytes};

const TOOL_TIMEOUT: Duration = Duration::from_secs(60);

/// One node: its TPM, and the state directory the test kit gives its sceau
/// (`<socket>.state`).
struct Node {
    tmp: TempDir,
    tpm: Swtpm,
}

impl Node {
    fn new(label: &str) -> Self {
        let tmp = TempDir::new(label);
        let tpm = Swtpm::start(&tmp.subdir("tpm"));
        Self { tmp, tpm }
    }

    fn state_dir(&self) -> PathBuf {
        self.tmp.join("sceau.sock").with_extension("state")
    }

    fn serve(&self) -> Sceau {
        Sceau::start(&self.tmp, &self.tpm, &[])
    }

    fn kek(&self, args: &[&str]) -> Finished {
        let state = self.state_dir();
        let tcti = self.tpm.tcti();
        let mut all = args.to_vec();
        all.extend(["--tcti", &tcti, "--state-dir", state.to_str().unwrap()]);
        run_with_timeout(
            Command::new(BIN).args(&all).current_dir(self.tmp.path()),
            self.tmp.path(),
            TOOL_TIMEOUT,
        )
    }

    fn kek_ok(&self, args: &[&str]) -> String {
        let run = self.kek(args);
        assert!(
            run.status.success(),
            "sceau kek {args:?}: {}",
            run.all_output()
        );
        run.stdout
    }

    /// `kek rotate`: the generation and key_id it printed.
    fn rotate(&self) -> (u32, String) {
        let out = self.kek_ok(&["kek", "rotate"]);
        let words: Vec<&str> = out.split_whitespace().collect();
        match words.as_slice() {
            ["generation", n, "key_id", key_id] => (n.parse().unwrap(), key_id.to_string()),
            _ => panic!("kek rotate printed {out:?}"),
        }
    }

    fn tools(&self, dir: &str) -> Tpm2Tools {
        Tpm2Tools::new(&self.tpm, &self.tmp.subdir(dir))
    }
}

async fn stop(mut sceau: Sceau) -> String {
    let status = sceau.terminate();
    assert!(
        status.success(),
        "sceau exit: {status}\n{}",
        sceau.stderr_text()
    );
    sceau.stderr_text()
}

/// The key_id is of the generation form and names `generation`.
fn assert_generation(key_id: &str, generation: u32) {
    assert_eq!(
        generation_and_epoch(key_id).map(|(g, _)| g),
        Some(generation),
        "{key_id}"
    );
}

async fn served_key_id(sceau: &Sceau) -> String {
    let mut client = sceau.client().await;
    rpc::status(&mut client).await.key_id
}

/// Opens `envelope` with tpm2-tools under the persistent key at `parent`.
fn tools_unseal(tools: &Tpm2Tools, parent: &str, envelope: &[u8]) -> Result<Vec<u8>, String> {
    let parts = Envelope::parse(envelope);
    tools.write("obj.pub", &parts.public);
    tools.write("obj.priv", &parts.private);
    let load = tools.try_run(
        "tpm2_load",
        &[
            "-C", parent, "-u", "obj.pub", "-r", "obj.priv", "-c", "obj.ctx",
        ],
    );
    if !load.status.success() {
        tools.flush_all();
        return Err(format!("tpm2_load: {}", load.all_output()));
    }
    tools.run("tpm2_unseal", &["-c", "obj.ctx", "-o", "unsealed.bin"]);
    tools.flush_all();
    Ok(std::fs::read(tools.path("unsealed.bin")).unwrap())
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o700)).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

/// Rotation end to end: each generation's envelopes open under their own
/// key_id and not under another's; a restart keeps the key_id; a retired
/// generation's envelope opens neither in sceau nor with tpm2-tools, also
/// after the state directory is restored from a copy taken before the
/// retire. Shown failing: with `kek::destroy` returning before its
/// EvictControl, tpm2-tools still unsealed the retired generation's
/// envelope (`unwrap_err` on `Ok`).
#[tokio::test(flavor = "multi_thread")]
async fn rotate_reload_by_restart_and_retire_for_good() {
    let node = Node::new("kek-rotate");
    let dek0 = random_bytes(32);
    let sceau = node.serve();
    let key_id0 = served_key_id(&sceau).await;
    assert_generation(&key_id0, 0);
    let mut client = sceau.client().await;
    let envelope0 = rpc::seal(&mut client, &key_id0, &dek0).await;
    drop(client);
    stop(sceau).await;

    let (generation, key_id1) = node.rotate();
    assert_eq!(generation, 1);
    assert_ne!(key_id1, key_id0);

    let sceau = node.serve();
    assert_eq!(
        served_key_id(&sceau).await,
        key_id1,
        "the key_id kek rotate printed"
    );
    let mut client = sceau.client().await;
    let dek1 = random_bytes(32);
    let envelope1 = rpc::seal(&mut client, &key_id1, &dek1).await;
    rpc::open(&mut client, &key_id0, &envelope0, &dek0).await;
    rpc::open(&mut client, &key_id1, &envelope1, &dek1).await;
    // Each under the other's key_id: the object does not load under the
    // other generation's key.
    for (key_id, envelope) in [(&key_id1, &envelope0), (&key_id0, &envelope1)] {
        let refused = rpc::decrypt(&mut client, envelope, key_id)
            .await
            .expect_err("an envelope under another generation's key_id");
        assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
        rpc::assert_clean_message(&refused, "another generation's key_id");
    }
    drop(client);
    stop(sceau).await;

    // A restart without change: the same key_id.
    let sceau = node.serve();
    assert_eq!(served_key_id(&sceau).await, key_id1);
    stop(sceau).await;

    let list = node.kek_ok(&["kek", "list"]);
    assert!(list.contains("0           open     "), "{list}");
    assert!(
        list.contains("current  ") && list.contains(&key_id1),
        "{list}"
    );

    // tpm2-tools open generation 1's envelope under its persistent key.
    let tools = node.tools("tools");
    assert_eq!(
        tools_unseal(&tools, "0x815ce001", &envelope1),
        Ok(dek1.clone())
    );

    let backup = node.tmp.join("state-backup");
    copy_dir(&node.state_dir(), &backup);
    let (generation, key_id2) = node.rotate();
    assert_eq!(generation, 2);
    let out = node.kek_ok(&["kek", "retire", "--generation", "1"]);
    assert!(out.contains("generation 1 retired"), "{out}");
    assert!(out.contains(&key_id1), "{out}");

    let tools_refusal = tools_unseal(&tools, "0x815ce001", &envelope1).unwrap_err();
    assert!(tools_refusal.starts_with("tpm2_load"), "{tools_refusal}");

    // Every file as it was before the retire.
    std::fs::remove_dir_all(node.state_dir()).unwrap();
    copy_dir(&backup, &node.state_dir());
    let sceau = node.serve();
    let served = served_key_id(&sceau).await;
    assert_ne!(served, key_id1);
    let mut client = sceau.client().await;
    let refused = rpc::decrypt(&mut client, &envelope1, &key_id1)
        .await
        .expect_err("a retired generation must not open");
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    assert!(refused.message().contains("generation 1"), "{refused:?}");
    rpc::assert_clean_message(&refused, "a retired generation");
    rpc::open(&mut client, &key_id0, &envelope0, &dek0).await;
    drop(client);
    stop(sceau).await;
    let list = node.kek_ok(&["kek", "list"]);
    assert!(list.contains("1           retired"), "{list}");
    assert!(list.contains("2           current"), "{list}");
    // The restored ledger lacks generation 2's key_id: a new one, never a
    // key_id reported before.
    assert_generation(&served, 2);
    assert!(![&key_id0, &key_id1].contains(&&served));
    let _ = key_id2;
}

/// A, B, A: a generation made and then lost (evicted with tpm2-tools)
/// brings generation 0 back, under a key_id never reported before; a
/// restored state directory does not bring the first key_id back either.
/// Shown failing: with `Ledger::reusable` ignoring the epoch counter, the
/// third start reported the first key_id again.
#[tokio::test(flavor = "multi_thread")]
async fn an_earlier_configuration_brought_back_gets_a_new_key_id() {
    let node = Node::new("kek-aba");
    let sceau = node.serve();
    let a = served_key_id(&sceau).await;
    let mut client = sceau.client().await;
    let dek = random_bytes(32);
    let envelope = rpc::seal(&mut client, &a, &dek).await;
    drop(client);
    stop(sceau).await;
    let backup = node.tmp.join("state-backup");
    copy_dir(&node.state_dir(), &backup);

    let (_, b) = node.rotate();
    let tools = node.tools("tools");
    tools.run("tpm2_evictcontrol", &["-C", "o", "-c", "0x815ce001"]);
    let sceau = node.serve();
    let a_again = served_key_id(&sceau).await;
    assert_ne!(a_again, a, "A after B must be new");
    assert_ne!(a_again, b);
    let mut client = sceau.client().await;
    rpc::open(&mut client, &a, &envelope, &dek).await;
    rpc::open(&mut client, &a_again, &envelope, &dek).await;
    drop(client);
    stop(sceau).await;

    std::fs::remove_dir_all(node.state_dir()).unwrap();
    copy_dir(&backup, &node.state_dir());
    let sceau = node.serve();
    let restored = served_key_id(&sceau).await;
    assert!(![&a, &b, &a_again].contains(&&restored), "{restored}");
    let mut client = sceau.client().await;
    rpc::open(&mut client, &a, &envelope, &dek).await;
    drop(client);
    stop(sceau).await;
}

/// SIGHUP serves what the TPM holds now, at once and without dropping the
/// calls in flight: Decrypts run throughout the reload and every one
/// succeeds. Here the current generation is evicted with tpm2-tools while
/// sceau serves (a persistent handle's eviction loads nothing, so it runs
/// beside sceau on swtpm, which has no resource manager): the reload falls
/// back to generation 1 under a key_id never reported before. The forward
/// case, `kek rotate` beside a serving sceau and `systemctl reload`, runs
/// in the VM on /dev/tpmrm0. Shown failing: with the SIGHUP task not
/// spawned, the key_id stayed generation 2's (`Some(2)` for `Some(1)`).
#[tokio::test(flavor = "multi_thread")]
async fn a_reload_serves_what_the_tpm_holds_without_dropping_calls() {
    let node = Node::new("kek-reload");
    node.rotate();
    let sceau = node.serve();
    let first = served_key_id(&sceau).await;
    assert_generation(&first, 1);
    let mut client = sceau.client().await;
    let dek = random_bytes(32);
    let envelope = rpc::seal(&mut client, &first, &dek).await;
    drop(client);
    stop(sceau).await;
    let (_, second) = node.rotate();

    let sceau = node.serve();
    let mut client = sceau.client().await;
    assert_eq!(rpc::status(&mut client).await.key_id, second);
    let tools = node.tools("tools");
    tools.run("tpm2_evictcontrol", &["-C", "o", "-c", "0x815ce002"]);

    let busy = {
        let socket = sceau.socket().to_path_buf();
        let (key_id, envelope, dek) = (first.clone(), envelope.clone(), dek.clone());
        tokio::spawn(async move {
            let mut client = rpc::connect(&socket).await;
            for _ in 0..200 {
                rpc::open(&mut client, &key_id, &envelope, &dek).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    sceau.signal(libc::SIGHUP);
    let mut after = second.clone();
    for _ in 0..100 {
        after = rpc::status(&mut client).await.key_id;
        if after != second {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    busy.await
        .expect("every Decrypt during the reload succeeds");
    assert_generation(&after, 1);
    assert!(
        after != first && after != second,
        "{after}: a key_id never reported"
    );
    let dek1 = random_bytes(32);
    let envelope1 = rpc::seal(&mut client, &after, &dek1).await;
    rpc::open(&mut client, &first, &envelope, &dek).await;
    drop(client);
    let log = stop(sceau).await;
    assert!(log.contains("reloaded: KEK generation 1"), "{log}");
    assert_eq!(tools_unseal(&tools, "0x815ce001", &envelope1), Ok(dek1));
}

/// Bad input to `sceau kek`: each refused with one line that says what to
/// do, and nothing changed in the TPM or the state directory.
#[tokio::test(flavor = "multi_thread")]
async fn kek_refusals_say_what_to_do_and_change_nothing() {
    let node = Node::new("kek-refusals");
    let sceau = node.serve();
    // Beside a serving sceau on a TPM without a resource manager.
    let beside = node.kek(&["kek", "rotate"]);
    assert!(!beside.status.success());
    assert!(
        beside.stderr.contains("stop sceau first"),
        "{}",
        beside.all_output()
    );
    stop(sceau).await;
    let ledger = std::fs::read_to_string(node.state_dir().join("kek-ledger")).unwrap();

    let refusals: [(&[&str], &str); 4] = [
        (
            &["kek", "retire", "--generation", "0"],
            "clearing the owner hierarchy",
        ),
        (
            &["kek", "retire", "--generation", "7"],
            "holds no generation 7",
        ),
        (&["kek", "retire"], "needs --generation"),
        (&["kek", "retire", "--generation", "x"], "generation number"),
    ];
    for (args, expected) in refusals {
        let run = node.kek(args);
        assert!(!run.status.success(), "{args:?}");
        let first = run.stderr.lines().next().unwrap_or_default();
        assert!(first.contains(expected), "{args:?}: {}", run.all_output());
        // The line, and for a usage error the usage line.
        assert!(run.stderr.trim().lines().count() <= 2, "{}", run.stderr);
    }
    let list = node.kek_ok(&["kek", "list"]);
    assert!(!list.contains("\n1 "), "{list}");

    // The current generation, and the slot limit.
    for _ in 0..3 {
        node.rotate();
    }
    let current = node.kek(&["kek", "retire", "--generation", "3"]);
    assert!(
        current.stderr.contains("is the current one"),
        "{}",
        current.all_output()
    );
    let full = node.kek(&["kek", "rotate"]);
    assert!(!full.status.success());
    assert!(
        full.stderr.contains("3 generations are open (1, 2, 3)")
            && full.stderr.contains("kek retire --generation 1"),
        "{}",
        full.all_output()
    );

    // The state directory: a symbolic link, and a wrong owner.
    let link = node.tmp.join("state-link");
    std::os::unix::fs::symlink(node.state_dir(), &link).unwrap();
    let run = run_with_timeout(
        Command::new(BIN)
            .args(["kek", "list", "--tcti", &node.tpm.tcti(), "--state-dir"])
            .arg(&link),
        node.tmp.path(),
        TOOL_TIMEOUT,
    );
    assert!(run.stderr.contains("symbolic link"), "{}", run.all_output());
    std::os::unix::fs::chown(node.state_dir(), Some(4242), None).unwrap();
    let run = node.kek(&["kek", "list"]);
    assert!(
        run.stderr.contains("owned by uid 4242"),
        "{}",
        run.all_output()
    );
    std::os::unix::fs::chown(node.state_dir(), Some(0), None).unwrap();
    let after = std::fs::read_to_string(node.state_dir().join("kek-ledger")).unwrap();
    assert!(after.starts_with(ledger.lines().next().unwrap()));
}

/// A TPM whose NV memory has no room for another persistent key (filled
/// here with tpm2_evictcontrol, as other software on the machine could):
/// `kek rotate` says there is no room and which handles to look at, and
/// leaves no generation, no persistent key and no ledger change behind;
/// once room is made, it rotates. Shown failing: with `classify` passing
/// TPM_RC_NV_SPACE through as a TPM fault, the line was "EvictControl (KEK
/// generation) failed: insufficient space for NV allocation", which named
/// no remedy. (NV indices alone cannot fill it: swtpm keeps room for the
/// seven persistent objects the PC Client profile promises; 65 persistent
/// RSA keys do.)
#[tokio::test(flavor = "multi_thread")]
async fn a_tpm_without_nv_space_refuses_rotate_and_changes_nothing() {
    let node = Node::new("kek-nv-full");
    let sceau = node.serve();
    let key_id = served_key_id(&sceau).await;
    stop(sceau).await;
    let ledger = std::fs::read_to_string(node.state_dir().join("kek-ledger")).unwrap();
    let list = node.kek_ok(&["kek", "list"]);

    let tools = node.tools("tools");
    tools.create_rsa_primary("filler.ctx");
    let mut defined = Vec::new();
    for i in 0..300u32 {
        let handle = format!("{:#x}", 0x8101_0000u32 + i);
        let run = tools.try_run(
            "tpm2_evictcontrol",
            &["-C", "o", "-c", "filler.ctx", &handle],
        );
        tools.flush_all();
        if !run.status.success() {
            assert!(
                run.stderr.contains("0x14b")
                    || run.stderr.contains("0x14B")
                    || run.stderr.contains("space"),
                "{}",
                run.all_output()
            );
            break;
        }
        defined.push(handle);
    }
    assert!(
        !defined.is_empty(),
        "no persistent handle could be filled at all"
    );

    let full = node.kek(&["kek", "rotate"]);
    assert!(
        !full.status.success(),
        "rotated on a full TPM: {}",
        full.all_output()
    );
    let line = full.stderr.trim();
    assert_eq!(line.lines().count(), 1, "{line}");
    assert!(
        line.contains("no room left") && line.contains("tpm2_getcap handles-persistent"),
        "{line}"
    );
    assert!(
        !line.contains("0x"),
        "a TPM code reached the operator: {line}"
    );
    let handles = tools.run("tpm2_getcap", &["handles-persistent"]).stdout;
    assert!(!handles.contains("0x815CE001"), "{handles}");
    assert_eq!(node.kek_ok(&["kek", "list"]), list);
    assert_eq!(
        std::fs::read_to_string(node.state_dir().join("kek-ledger")).unwrap(),
        ledger
    );

    for handle in &defined {
        tools.run("tpm2_evictcontrol", &["-C", "o", "-c", handle]);
    }
    let (generation, rotated) = node.rotate();
    assert_eq!(generation, 1);
    assert_ne!(rotated, key_id);
}
