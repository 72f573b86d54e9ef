//! The recovery key under dual control: split K-of-N among custodians by
//! `sceau-recover recovery-keygen`, each share an age file for its
//! custodian, combined by `recover` from any K of them. The envelopes are a
//! real sceau's (a real swtpm through the real TCTI), the custodians' keys
//! are made by the real `age-keygen`, and a share is opened with the real
//! `age` as a custodian would. The snapshot and etcdctl JSON inputs read the
//! same combined key; scripts/interop-ha.sh recovers both from three real
//! kube-apiservers with two of three shares.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::harness::memscan::find_all_in_process;
use crate::harness::process::{kill_and_reap, poll_until, wait_timeout};
use crate::harness::rpc;
use crate::harness::sceau::{BIN, recover_bin};
use crate::harness::{Sceau, Swtpm, TempDir, random_bytes};

const TOOL_TIMEOUT: Duration = Duration::from_secs(60);

/// What one run of a tool left: exit status, raw standard output, stderr.
struct Ran {
    success: bool,
    code: Option<i32>,
    stdout: Vec<u8>,
    stderr: String,
}

/// Runs `program` in `dir` with `stdin` (a file, or nothing), bounded in
/// time, keeping standard output as bytes (a DEK is binary).
fn run(dir: &Path, program: &Path, args: &[&str], stdin: Option<&Path>) -> Ran {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let out = dir.join(format!("run-{n}.out"));
    let err = dir.join(format!("run-{n}.err"));
    let mut child = Command::new(program)
        .args(args)
        .current_dir(dir)
        .stdin(stdin.map_or_else(Stdio::null, |p| std::fs::File::open(p).unwrap().into()))
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", program.display()));
    let Some(status) = wait_timeout(&mut child, TOOL_TIMEOUT) else {
        kill_and_reap(&mut child);
        panic!("{} {args:?} did not finish", program.display());
    };
    let ran = Ran {
        success: status.success(),
        code: status.code(),
        stdout: std::fs::read(&out).unwrap(),
        stderr: String::from_utf8_lossy(&std::fs::read(&err).unwrap()).into_owned(),
    };
    let _ = std::fs::remove_file(out);
    let _ = std::fs::remove_file(err);
    ran
}

fn recover_tool(dir: &Path, args: &[&str]) -> Ran {
    run(dir, &recover_bin(), args, None)
}

fn ok(ran: Ran, what: &str) -> Ran {
    assert!(ran.success, "{what}: {}", ran.stderr);
    ran
}

/// A custodian's key pair: the private file `--age-identity` takes (mode
/// 0600) and the `--custodian NAME=HOW` that encrypts to it.
#[derive(Clone)]
struct AgeKey {
    identity: PathBuf,
    spec: String,
}

fn age_key(dir: &Path, name: &str) -> AgeKey {
    let identity = dir.join(format!("{name}.agekey"));
    let made = ok(
        run(
            dir,
            Path::new("age-keygen"),
            &["-o", identity.to_str().unwrap()],
            None,
        ),
        "age-keygen",
    );
    let recipient = made
        .stderr
        .trim()
        .strip_prefix("Public key: ")
        .unwrap_or_else(|| panic!("age-keygen said: {}", made.stderr))
        .to_string();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&identity, std::fs::Permissions::from_mode(0o600)).unwrap();
    AgeKey {
        identity,
        spec: format!("age:{recipient}"),
    }
}

/// An OpenSSH ed25519 key made by `ssh-keygen` (no passphrase, or
/// `passphrase`), as a custodian's `ssh:` recipient.
fn ssh_key(dir: &Path, name: &str, passphrase: &str) -> AgeKey {
    let identity = dir.join(format!("{name}_ed25519"));
    ok(
        run(
            dir,
            Path::new("ssh-keygen"),
            &[
                "-q",
                "-t",
                "ed25519",
                "-N",
                passphrase,
                "-C",
                name,
                "-f",
                identity.to_str().unwrap(),
            ],
            None,
        ),
        "ssh-keygen",
    );
    AgeKey {
        spec: format!("ssh:{}.pub", identity.display()),
        identity,
    }
}

/// One split: the public file and the share files, in custodian order.
struct KeySet {
    public: PathBuf,
    shares: Vec<PathBuf>,
    /// The key set fingerprint keygen printed, for the ceremony record.
    recorded: String,
}

/// `recovery-keygen` splitting a new key K-of-N among the first N `keys`.
fn split(dir: &Path, label: &str, k: usize, keys: &[AgeKey]) -> KeySet {
    let public = dir.join(format!("{label}.pub"));
    let shares_dir = dir.join(format!("{label}-shares"));
    let n = keys.len().to_string();
    let k = k.to_string();
    let custodians: Vec<String> = keys
        .iter()
        .enumerate()
        .map(|(i, key)| format!("c{i}={}", key.spec))
        .collect();
    let mut args = vec![
        "recovery-keygen",
        "--public",
        public.to_str().unwrap(),
        "--custodians",
        &n,
        "--threshold",
        &k,
        "--shares-out",
        shares_dir.to_str().unwrap(),
    ];
    for custodian in &custodians {
        args.extend(["--custodian", custodian]);
    }
    let keygen = ok(recover_tool(dir, &args), "recovery-keygen --custodians");
    let recorded = keygen
        .stderr
        .lines()
        .find_map(|l| l.strip_prefix("key set "))
        .and_then(|l| l.split(':').next())
        .unwrap_or_else(|| panic!("keygen printed no key set: {}", keygen.stderr))
        .to_string();
    let shares = (0..keys.len())
        .map(|i| shares_dir.join(format!("c{i}.share.age")))
        .collect();
    KeySet {
        public,
        shares,
        recorded,
    }
}

/// `recover --envelope` with the shares of `chosen` (indices into the key
/// set) and every custodian's age identity.
fn recover_with(
    dir: &Path,
    set: &KeySet,
    chosen: &[usize],
    keys: &[AgeKey],
    envelope: &Path,
) -> Ran {
    let mut args = vec!["recover".to_string()];
    for &i in chosen {
        args.extend(["--share".into(), set.shares[i].display().to_string()]);
    }
    for key in keys {
        args.extend(["--age-identity".into(), key.identity.display().to_string()]);
    }
    args.extend(["--envelope".into(), envelope.display().to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    recover_tool(dir, &args)
}

fn subsets(n: usize, k: usize) -> Vec<Vec<usize>> {
    (0u32..1 << n)
        .filter(|mask| mask.count_ones() as usize == k)
        .map(|mask| (0..n).filter(|i| mask & (1 << i) != 0).collect())
        .collect()
}

/// A real sceau on `tpm` wrapping for `public`: alone (`--recovery-key`), or
/// as the one member of a cluster (`--members`).
async fn envelope_for(
    tmp: &TempDir,
    tpm: &Swtpm,
    public: &Path,
    cluster: Option<&Path>,
    label: &str,
) -> (Vec<u8>, PathBuf) {
    let mut extra = vec!["--recovery-key", public.to_str().unwrap()];
    if let Some(members) = cluster {
        extra.extend(["--members", members.to_str().unwrap()]);
    }
    let socket = tmp.join(&format!("{label}.sock"));
    let sceau = Sceau::start_on_socket(tmp, &socket, &tpm.tcti(), &extra);
    let mut client = sceau.client().await;
    let dek = random_bytes(32);
    let sealed = rpc::encrypt(&mut client, &dek).await.expect("Encrypt");
    drop(client);
    drop(sceau);
    let path = tmp.join(&format!("{label}.envelope"));
    std::fs::write(&path, &sealed.ciphertext).unwrap();
    (dek, path)
}

/// For N ≤ 5 and every K: every K of the N shares open a real envelope
/// made by sceau alone with `--recovery-key` and by sceau in cluster mode,
/// and every K−1 of them are refused before the envelope is read (the
/// message says how many shares there are and how many are needed). Without
/// the count check, K−1 shares would combine to a wrong key: "the combined
/// shares do not give the recovery key" instead of the count.
#[tokio::test(flavor = "multi_thread")]
async fn every_k_of_n_subset_recovers_a_real_envelope() {
    let tmp = TempDir::new("shares-subsets");
    let dir = tmp.path();
    let tpm = Swtpm::start(&tmp.subdir("tpm"));
    let member = ok(
        run(
            dir,
            Path::new(BIN),
            &["srk-public", "--tcti", &tpm.tcti()],
            None,
        ),
        "srk-public",
    );
    let members = tmp.subdir("members");
    std::fs::write(members.join("a.pub"), &member.stdout).unwrap();
    let keys: Vec<AgeKey> = (0..5)
        .map(|i| age_key(dir, &format!("custodian-{i}")))
        .collect();
    let mut opened = 0;
    for n in 1..=5 {
        for k in 1..=n {
            let label = format!("{k}-of-{n}");
            let set = split(dir, &label, k, &keys[..n]);
            for cluster in [None, Some(members.as_path())] {
                let mode = if cluster.is_some() {
                    "cluster"
                } else {
                    "single"
                };
                let (dek, envelope) =
                    envelope_for(&tmp, &tpm, &set.public, cluster, &format!("{label}-{mode}"))
                        .await;
                for subset in subsets(n, k) {
                    let ran = recover_with(dir, &set, &subset, &keys[..n], &envelope);
                    assert!(ran.success, "{label} {mode} {subset:?}: {}", ran.stderr);
                    assert_eq!(ran.stdout, dek, "{label} {mode} {subset:?}");
                    opened += 1;
                }
                for subset in subsets(n, k - 1).into_iter().filter(|s| !s.is_empty()) {
                    let ran = recover_with(dir, &set, &subset, &keys[..n], &envelope);
                    assert!(!ran.success, "{label} {mode} {subset:?} opened");
                    assert!(ran.stdout.is_empty(), "{label} {mode} {subset:?}");
                    assert!(
                        ran.stderr.contains(&format!(
                            "shares given: {} of the {k} that open recovery key",
                            k - 1
                        )) && ran.stderr.contains("nothing was opened"),
                        "{label} {mode} {subset:?}: {}",
                        ran.stderr
                    );
                }
            }
        }
    }
    // Σ over N ≤ 5 of 2^N − 1 subsets, in both modes.
    assert_eq!(opened, 2 * (1 + 3 + 7 + 15 + 31));
}

/// Each refusal names the file, opens nothing and prints no DEK: a flipped
/// byte in a share file, a share of another key set, a wrong passphrase, a
/// share for another custodian's recipient. The control (the same call with
/// the right files) opens the envelope; the three custodians use the three
/// kinds of protection (an age key, a passphrase, an SSH key).
#[tokio::test(flavor = "multi_thread")]
async fn refused_shares_are_named_by_file() {
    let tmp = TempDir::new("shares-refused");
    let dir = tmp.path();
    let tpm = Swtpm::start(&tmp.subdir("tpm"));
    let alice = age_key(dir, "alice");
    // Carol's share is encrypted to her SSH key, as age does for ssh-ed25519.
    let carol = ssh_key(dir, "carol", "");
    let passphrase_file = dir.join("bob.passphrase");
    std::fs::write(&passphrase_file, "correct horse battery staple\n").unwrap();
    let public = dir.join("recovery.pub");
    let shares_dir = dir.join("shares");
    let alice_spec = format!("alice={}", alice.spec);
    let carol_spec = format!("carol={}", carol.spec);
    ok(
        run(
            dir,
            &recover_bin(),
            &[
                "recovery-keygen",
                "--public",
                public.to_str().unwrap(),
                "--custodians",
                "3",
                "--threshold",
                "2",
                "--shares-out",
                shares_dir.to_str().unwrap(),
                "--custodian",
                &alice_spec,
                "--custodian",
                "bob=passphrase",
                "--custodian",
                &carol_spec,
                "--passphrase-fd",
                "0",
            ],
            Some(&passphrase_file),
        ),
        "keygen",
    );
    let share = |name: &str| shares_dir.join(format!("{name}.share.age"));
    let (dek, envelope) = envelope_for(&tmp, &tpm, &public, None, "node").await;
    let identities = [
        "--age-identity",
        alice.identity.to_str().unwrap(),
        "--age-identity",
        carol.identity.to_str().unwrap(),
    ];
    let attempt = |shares: &[&Path], extra: &[&str], stdin: Option<&Path>| {
        let mut args = vec!["recover"];
        for share in shares {
            args.extend(["--share", share.to_str().unwrap()]);
        }
        args.extend(extra);
        args.extend(["--envelope", envelope.to_str().unwrap()]);
        run(dir, &recover_bin(), &args, stdin)
    };

    // The controls: alice and carol by their keys, bob by his passphrase.
    let control = attempt(&[&share("alice"), &share("carol")], &identities, None);
    assert!(control.success, "{}", control.stderr);
    assert_eq!(control.stdout, dek);
    let mut with_bob = identities.to_vec();
    with_bob.extend(["--passphrase-fd", "0"]);
    let control = attempt(
        &[&share("bob"), &share("carol")],
        &with_bob,
        Some(&passphrase_file),
    );
    assert!(control.success, "{}", control.stderr);
    assert_eq!(control.stdout, dek);

    // A flipped character in the middle of alice's armored file.
    let flipped = dir.join("flipped.share.age");
    let mut bytes = std::fs::read(share("alice")).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] = if bytes[middle] == b'A' { b'B' } else { b'A' };
    std::fs::write(&flipped, &bytes).unwrap();
    set_private(&flipped);
    // A share of another key set, with a name of its own.
    let other = split(dir, "other", 2, &[alice.clone(), carol.clone()]);
    // A wrong passphrase for bob's share.
    let wrong = dir.join("wrong.passphrase");
    std::fs::write(&wrong, "incorrect horse\n").unwrap();
    let mut bob_wrong = identities.to_vec();
    bob_wrong.extend(["--passphrase-fd", "0"]);
    // Alice's share with only carol's key.
    let carol_only = ["--age-identity", carol.identity.to_str().unwrap()];

    let cases: Vec<(&str, Ran, PathBuf, &str)> = vec![
        (
            "flipped byte",
            attempt(&[&flipped, &share("carol")], &identities, None),
            flipped.clone(),
            "altered or truncated",
        ),
        (
            "another key set",
            attempt(&[&share("alice"), &other.shares[1]], &identities, None),
            other.shares[1].clone(),
            "sceau-recover: key set ",
        ),
        (
            "wrong passphrase",
            attempt(&[&share("bob"), &share("carol")], &bob_wrong, Some(&wrong)),
            share("bob"),
            "wrong passphrase",
        ),
        (
            "another custodian's recipient",
            attempt(&[&share("alice"), &share("carol")], &carol_only, None),
            share("alice"),
            "none of the --age-identity keys opens it",
        ),
    ];
    for (what, ran, file, says) in cases {
        assert!(!ran.success, "{what}: opened");
        assert!(
            ran.stdout.is_empty(),
            "{what}: printed {} bytes",
            ran.stdout.len()
        );
        let line = ran
            .stderr
            .lines()
            .find(|l| l.contains(&file.display().to_string()) && l.contains(says))
            .unwrap_or_else(|| panic!("{what}: no line naming the file in {}", ran.stderr));
        assert!(
            line.contains("share refused") || line.contains("key set"),
            "{what}: {line}"
        );
        assert!(
            ran.stderr.contains("nothing was opened"),
            "{what}: {}",
            ran.stderr
        );
    }
}

/// A share forged for a custodian (anyone who knows their recipient can
/// write one: the real recovery key as C_0, the other commitments made to
/// fit) verifies alone, and `share verify --public` passes it; what gives
/// it away is the key set fingerprint, which differs from the one keygen
/// printed for the ceremony record and `share verify` prints for the
/// genuine shares. Given to `recover` with genuine shares, the groups are
/// listed and nothing opens; no genuine share is blamed. Without the
/// grouping, the genuine shares after the forged first file were refused
/// as "a share of another key set".
#[tokio::test(flavor = "multi_thread")]
async fn a_forged_share_is_told_by_its_key_set_and_blames_no_genuine_share() {
    let tmp = TempDir::new("shares-forged");
    let dir = tmp.path();
    let keys: Vec<AgeKey> = (0..3).map(|i| age_key(dir, &format!("f{i}"))).collect();
    let KeySet {
        public,
        shares,
        recorded,
    } = split(dir, "set", 2, &keys);
    let share = |i: usize| shares[i].clone();

    // The forger writes c0 a share, encrypted with the real `age` to c0's
    // public recipient.
    let genuine = ok(
        run(
            dir,
            Path::new("age"),
            &[
                "-d",
                "-i",
                keys[0].identity.to_str().unwrap(),
                share(0).to_str().unwrap(),
            ],
            None,
        ),
        "age -d",
    );
    let genuine =
        sceau_format::recovery_share::Share::parse(std::str::from_utf8(&genuine.stdout).unwrap())
            .unwrap();
    let plain = dir.join("forged.share");
    std::fs::write(&plain, genuine.forged_for_the_same_key().file().as_bytes()).unwrap();
    let forged = dir.join("forged.share.age");
    let recipient = keys[0].spec.strip_prefix("age:").unwrap();
    ok(
        run(
            dir,
            Path::new("age"),
            &[
                "-a",
                "-r",
                recipient,
                "-o",
                forged.to_str().unwrap(),
                plain.to_str().unwrap(),
            ],
            None,
        ),
        "age -r",
    );
    std::fs::remove_file(&plain).unwrap();
    set_private(&forged);

    let verify = |file: &Path| {
        ok(
            recover_tool(
                dir,
                &[
                    "share",
                    "verify",
                    "--share",
                    file.to_str().unwrap(),
                    "--public",
                    public.to_str().unwrap(),
                    "--age-identity",
                    keys[0].identity.to_str().unwrap(),
                ],
            ),
            "share verify",
        )
    };
    let shown = |ran: &Ran| {
        String::from_utf8_lossy(&ran.stdout)
            .lines()
            .find_map(|l| l.strip_prefix("key set ").map(str::to_string))
            .expect("share verify prints the key set")
    };
    assert_eq!(shown(&verify(&share(0))), recorded);
    assert_ne!(
        shown(&verify(&forged)),
        recorded,
        "a forged share shows the recorded key set"
    );

    let mut args = vec!["recover".to_string()];
    for file in [forged.clone(), share(1), share(2)] {
        args.extend(["--share".into(), file.display().to_string()]);
    }
    for key in &keys {
        args.extend(["--age-identity".into(), key.identity.display().to_string()]);
    }
    args.extend(["--envelope".into(), "/dev/null".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let ran = recover_tool(dir, &args);
    assert!(!ran.success && ran.stdout.is_empty(), "{}", ran.stderr);
    assert!(!ran.stderr.contains("share refused"), "{}", ran.stderr);
    let genuine_group = format!("key set {recorded} (recovery key ");
    let line = ran
        .stderr
        .lines()
        .find(|l| l.contains(&genuine_group))
        .unwrap_or_else(|| panic!("no line for the recorded key set: {}", ran.stderr));
    assert!(
        line.contains(&share(1).display().to_string())
            && line.contains(&share(2).display().to_string())
            && !line.contains(&forged.display().to_string()),
        "{line}"
    );
    assert!(
        ran.stderr.contains("2 different key sets"),
        "{}",
        ran.stderr
    );
}

/// `recovery-keygen` of one identity file, `LABEL.identity` and
/// `LABEL.pub`, protected as `protection` says.
fn identity_keygen(dir: &Path, label: &str, protection: &[&str]) -> (PathBuf, PathBuf) {
    let identity = dir.join(format!("{label}.identity"));
    let public = dir.join(format!("{label}.pub"));
    let mut args = vec![
        "recovery-keygen",
        "--identity",
        identity.to_str().unwrap(),
        "--public",
        public.to_str().unwrap(),
    ];
    args.extend(protection);
    ok(
        recover_tool(dir, &args),
        &format!("recovery-keygen {protection:?}"),
    );
    (identity, public)
}

fn set_private(path: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// Drives a program on a pseudo-terminal: answers every prompt that ends
/// in "passphrase for …: " with the passphrase (read from standard input,
/// so that it is in no argument), as soon as the prompt is there, and
/// prints what the terminal showed. Typing before the prompt would be
/// echoed by the line discipline whatever the program does; typing right
/// after it is what a program that writes its prompt before turning echo
/// off (rpassword did) shows on the screen, so the driver does not wait.
/// Given `^C` as the passphrase, it types Ctrl-C at the prompt and Enter
/// 300 ms later, and then prints the program's exit status and whether
/// the terminal echoes.
const PTY_DRIVER: &str = r#"
import os, pty, signal, sys, termios, time
passphrase = sys.stdin.readline().rstrip("\n").encode()
pid, fd = pty.fork()
if pid == 0:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.execvp(sys.argv[1], sys.argv[1:])
shown, answered = b"", 0
while True:
    try:
        chunk = os.read(fd, 4096)
    except OSError:
        break
    if not chunk:
        break
    shown += chunk
    if shown.count(b"passphrase for") > answered:
        answered += 1
        if passphrase == b"^C":
            os.write(fd, b"\x03")
            time.sleep(0.3)
        os.write(fd, passphrase + b"\n" if passphrase != b"^C" else b"\n")
_, status = os.waitpid(pid, 0)
sys.stdout.write(shown.decode("utf-8", "replace"))
if passphrase == b"^C":
    echo = termios.tcgetattr(fd)[3] & termios.ECHO
    sys.stdout.write("\nstatus %d, echo %s\n" % (os.waitstatus_to_exitcode(status), "on" if echo else "off"))
    sys.exit(0)
sys.exit(os.waitstatus_to_exitcode(status))
"#;

fn on_terminal(dir: &Path, passphrase: &str, program: &Path, args: &[&str]) -> Ran {
    let driver = dir.join("pty-driver.py");
    std::fs::write(&driver, PTY_DRIVER).unwrap();
    let input = dir.join("pty-input");
    std::fs::write(&input, format!("{passphrase}\n")).unwrap();
    let mut all = vec![driver.to_str().unwrap(), program.to_str().unwrap()];
    all.extend(args);
    run(dir, Path::new("python3"), &all, Some(&input))
}

/// `recovery-keygen --identity DIR/recovery.identity --public
/// DIR/recovery.pub` on a pseudo-terminal, run by `under` (a program and
/// its arguments, such as strace) or directly; what the terminal showed.
fn keygen_on_terminal(dir: &Path, passphrase: &str, under: &[&str]) -> String {
    let identity = dir.join("recovery.identity");
    let public = dir.join("recovery.pub");
    let recover = recover_bin();
    let (program, mut args) = match under.split_first() {
        Some((program, rest)) => (Path::new(*program), rest.to_vec()),
        None => (recover.as_path(), Vec::new()),
    };
    if !under.is_empty() {
        args.push(recover.to_str().unwrap());
    }
    args.extend([
        "recovery-keygen",
        "--identity",
        identity.to_str().unwrap(),
        "--public",
        public.to_str().unwrap(),
    ]);
    let keygen = on_terminal(dir, passphrase, program, &args);
    let shown = String::from_utf8_lossy(&keygen.stdout).into_owned();
    assert!(
        keygen.success,
        "keygen on a terminal ({under:?}): {shown} {}",
        keygen.stderr
    );
    shown
}

/// The passphrase of an identity is typed on a terminal with echo off
/// (asked twice at keygen) and read through a file descriptor at recover;
/// on the command line it is refused. The control runs the same driver
/// on a shell `read`, which echoes: there the passphrase shows, so the
/// check can see an echo. Without the echo-off in `sceau_sys::read_passphrase`, keygen fails this
/// with the passphrase in the terminal transcript.
#[tokio::test(flavor = "multi_thread")]
async fn the_passphrase_is_read_without_echo_and_through_a_descriptor() {
    let tmp = TempDir::new("shares-passphrase");
    let dir = tmp.path();
    let tpm = Swtpm::start(&tmp.subdir("tpm"));
    let passphrase = "tr0ub4dor-and-3";
    let echoing = on_terminal(
        dir,
        passphrase,
        Path::new("/bin/sh"),
        &["-c", "printf 'passphrase for x: '; read line; echo read"],
    );
    assert!(
        String::from_utf8_lossy(&echoing.stdout).contains(passphrase),
        "the control shows no echo: {}",
        String::from_utf8_lossy(&echoing.stdout)
    );

    let (identity, public) = (dir.join("recovery.identity"), dir.join("recovery.pub"));
    let shown = keygen_on_terminal(dir, passphrase, &[]);
    assert!(
        shown.contains("passphrase for the recovery identity: ")
            && shown.contains("passphrase for the recovery identity (again): "),
        "{shown}"
    );
    assert!(
        !shown.contains(passphrase),
        "the passphrase was echoed: {shown}"
    );
    let file = std::fs::read_to_string(&identity).unwrap();
    assert!(
        file.starts_with("-----BEGIN AGE ENCRYPTED FILE-----"),
        "{file}"
    );

    // The identity opens with the passphrase on a descriptor (stdin here).
    let (dek, envelope) = envelope_for(&tmp, &tpm, &public, None, "node").await;
    let fd_input = dir.join("fd-input");
    std::fs::write(&fd_input, format!("{passphrase}\n")).unwrap();
    let recover_args = [
        "recover",
        "--identity",
        identity.to_str().unwrap(),
        "--passphrase-fd",
        "0",
        "--envelope",
        envelope.to_str().unwrap(),
    ];
    let opened = run(dir, &recover_bin(), &recover_args, Some(&fd_input));
    assert!(opened.success, "{}", opened.stderr);
    assert_eq!(opened.stdout, dek);
    std::fs::write(&fd_input, "not it\n").unwrap();
    let refused = run(dir, &recover_bin(), &recover_args, Some(&fd_input));
    assert!(!refused.success && refused.stdout.is_empty());
    assert!(
        refused.stderr.contains("wrong passphrase"),
        "{}",
        refused.stderr
    );

    // An identity encrypted to a passphrase-protected SSH key: that key's
    // passphrase comes through the descriptor too.
    let dave = ssh_key(dir, "dave", "dave's own ssh passphrase");
    let (ssh_identity, ssh_public) = identity_keygen(dir, "ssh", &["--protect", &dave.spec]);
    let (ssh_dek, ssh_envelope) = envelope_for(&tmp, &tpm, &ssh_public, None, "node-ssh").await;
    std::fs::write(&fd_input, "dave's own ssh passphrase\n").unwrap();
    let opened = run(
        dir,
        &recover_bin(),
        &[
            "recover",
            "--identity",
            ssh_identity.to_str().unwrap(),
            "--age-identity",
            dave.identity.to_str().unwrap(),
            "--passphrase-fd",
            "0",
            "--envelope",
            ssh_envelope.to_str().unwrap(),
        ],
        Some(&fd_input),
    );
    assert!(opened.success, "{}", opened.stderr);
    assert_eq!(opened.stdout, ssh_dek);

    // An identity written in plaintext (only on request) still opens, with
    // a warning that says how to encrypt it.
    let (plain_identity, plain_public) =
        identity_keygen(dir, "plain", &["--unencrypted-private-key"]);
    let (plain_dek, plain_envelope) =
        envelope_for(&tmp, &tpm, &plain_public, None, "node-plain").await;
    let opened = recover_tool(
        dir,
        &[
            "recover",
            "--identity",
            plain_identity.to_str().unwrap(),
            "--envelope",
            plain_envelope.to_str().unwrap(),
        ],
    );
    assert!(opened.success, "{}", opened.stderr);
    assert_eq!(opened.stdout, plain_dek);
    assert!(
        opened
            .stderr
            .contains("holds the recovery private key unencrypted")
            && opened.stderr.contains("age -p"),
        "{}",
        opened.stderr
    );

    // A passphrase on the command line: refused as a usage error (exit 2),
    // saying why, and nothing written.
    for spec in [
        format!("bob=passphrase:{passphrase}"),
        format!("bob=passphrase={passphrase}"),
    ] {
        let ran = recover_tool(
            dir,
            &[
                "recovery-keygen",
                "--public",
                dir.join("never.pub").to_str().unwrap(),
                "--custodians",
                "1",
                "--threshold",
                "1",
                "--shares-out",
                dir.join("never").to_str().unwrap(),
                "--custodian",
                &spec,
            ],
        );
        assert_eq!(ran.code, Some(2), "{spec}: {}", ran.stderr);
        assert!(
            ran.stderr.contains("never taken from the command line"),
            "{}",
            ran.stderr
        );
        assert!(!dir.join("never.pub").exists() && !dir.join("never").exists());
    }
    let ran = recover_tool(
        dir,
        &[
            "recovery-keygen",
            "--public",
            "p",
            "--identity",
            "i",
            "--protect",
            &format!("passphrase:{passphrase}"),
        ],
    );
    assert_eq!(ran.code, Some(2), "{}", ran.stderr);
}

/// The terminal prompt turns echo off before it writes the prompt, as
/// readpassphrase(3) does: `strace` of `recovery-keygen` on a
/// pseudo-terminal records every TCSETS ioctl (with its c_lflag) and every
/// write, and at each write of a prompt the last TCSETS must have cleared
/// ECHO. Shown failing with rpassword, which wrote the prompt first and then
/// called tcsetattr: "prompt written with echo on".
#[test]
fn the_prompt_is_written_after_echo_is_turned_off() {
    let tmp = TempDir::new("shares-prompt-order");
    let dir = tmp.path();
    let trace = dir.join("keygen.strace");
    let shown = keygen_on_terminal(
        dir,
        "order-0f-things",
        &[
            "strace",
            "-f",
            "-o",
            trace.to_str().unwrap(),
            "-e",
            "trace=write,ioctl",
        ],
    );
    let trace = std::fs::read_to_string(&trace).unwrap();
    let mut echo = true;
    let mut prompts = 0;
    let mut settings = 0;
    for line in trace.lines() {
        if line.contains("ioctl(") && line.contains("TCSETS") {
            let lflag = line
                .split("c_lflag=")
                .nth(1)
                .and_then(|rest| rest.split([',', '}']).next())
                .unwrap_or_else(|| panic!("no c_lflag in {line}"));
            echo = lflag.split('|').any(|flag| flag.trim() == "ECHO");
            settings += 1;
        } else if line.contains("write(") && line.contains("\"passphrase for") {
            assert!(!echo, "prompt written with echo on:\n{trace}");
            prompts += 1;
        }
    }
    // Two prompts (the passphrase and its confirmation), each between echo
    // off and the restore.
    assert_eq!((prompts, settings), (2, 4), "{trace}");
    assert!(echo, "the terminal was left with echo off:\n{trace}");
    assert!(!shown.contains("order-0f-things"), "echoed: {shown}");
}

/// Ctrl-C while a passphrase is asked ends the command with the terminal
/// echoing again: the stop signals are held while echo is off and
/// delivered once it is restored, so the run ends by SIGINT at the next
/// Enter, and no key is written. Shown failing with SIGINT left out of the
/// held signals: the process died at once and left the terminal with echo
/// off. The driver gives the program SIGINT's default action, since a
/// shell without job control starts its background jobs with SIGINT
/// ignored and exec keeps that: run so, the program saw no Ctrl-C at all
/// and went on to refuse the empty passphrase.
#[test]
fn ctrl_c_at_the_prompt_leaves_the_terminal_echoing() {
    let tmp = TempDir::new("shares-prompt-interrupt");
    let dir = tmp.path();
    // The driver exits 0 and reports the program's status in its output.
    let shown = keygen_on_terminal(dir, "^C", &[]);
    assert!(
        shown.contains("passphrase for the recovery identity: "),
        "{shown}"
    );
    // SIGINT is 2: waitstatus_to_exitcode gives -2.
    assert!(shown.contains("status -2, echo on"), "{shown}");
    assert!(!dir.join("recovery.identity").exists());
}

/// A recovery key split 2-of-3 among custodians with age keys, and an
/// envelope a real sceau made for it alone (its DEK, or KMS v2 seed).
struct TwoOfThree {
    tmp: TempDir,
    keys: Vec<AgeKey>,
    set: KeySet,
    dek: Vec<u8>,
    envelope: PathBuf,
}

async fn two_of_three(label: &str) -> TwoOfThree {
    let tmp = TempDir::new(label);
    let dir = tmp.path();
    let tpm = Swtpm::start(&tmp.subdir("tpm"));
    let keys: Vec<AgeKey> = (0..3).map(|i| age_key(dir, &format!("k{i}"))).collect();
    let set = split(dir, "set", 2, &keys);
    let (dek, envelope) = envelope_for(&tmp, &tpm, &set.public, None, "node").await;
    TwoOfThree {
        tmp,
        keys,
        set,
        dek,
        envelope,
    }
}

/// Where the recovery scalar may be: nowhere on disk (every file keygen and
/// recover wrote, in every encoding the scalar has: raw, base64 in an
/// identity file, hex), and nowhere in `sceau-recover recover`'s memory
/// once it has opened the envelope: the scan runs while the process is
/// blocked writing the DEK to a full pipe, after it dropped the key. The
/// scan looks for the scalar big-endian and little-endian (p256 keeps it as
/// little-endian limbs), for each share value, and for the base64 block of
/// each share file and of the identity file (what a freed copy of a file's
/// text would hold). Without the wiping allocator, the scan found the share
/// files' base64 (read_to_end's and armor's grown buffers, freed unwiped:
/// shown once). Checked once to fail,
/// three ways: with the share values inline in `Share`, the scan found one
/// on the heap (a moved-from Vec slot); with the key inline in
/// `RecoveryIdentity`, copies of the scalar in `run`'s frame (moved-from
/// temporaries); without `scrub_stack`, copies in the dead frames of
/// `combine`.
#[tokio::test(flavor = "multi_thread")]
async fn no_file_and_no_memory_holds_the_recovery_scalar() {
    let TwoOfThree {
        tmp,
        keys,
        set,
        dek,
        envelope,
    } = two_of_three("shares-no-scalar").await;
    let dir = tmp.path();

    let plain = opened_by_custodians(dir, &set, &keys);
    let identity = sceau_format::recovery_share::combine(&plain[..2]).unwrap();
    let identity_file = identity.identity_file();
    let scalar = scalar_of(&identity_file);
    let encodings: Vec<(String, Vec<u8>)> = vec![
        ("raw".into(), scalar.clone()),
        (
            "base64".into(),
            identity_file
                .lines()
                .skip_while(|l| !l.starts_with("-----BEGIN"))
                .nth(1)
                .expect("the identity's base64 line")
                .as_bytes()
                .to_vec(),
        ),
        (
            "hex".into(),
            scalar
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
                .into_bytes(),
        ),
    ];

    // The memory: recover with a pipe that is already full as its
    // standard output, so that it blocks in write(1, DEK) with the key gone.
    let args = recover_args(&set.shares[1..], &keys, "--envelope", &envelope);
    let (child, reader) = blocked_writing(dir, &args, 1, Stdio::null());
    let mut needles = key_needles(&scalar, &plain[1..], 2);
    needles.extend(armored_block_lines("identity file", &identity_file));
    let hits = find_all_in_process(child.id(), &needles, 16);
    // Let it finish: drain the pipe, then check it printed the DEK.
    let (success, output) = finish(child, reader);
    assert!(success);
    assert_eq!(output, dek);
    assert!(
        hits.is_empty(),
        "the recovery key or a share in memory: {hits:#?}"
    );

    // The files: everything keygen, age and recover left in the directory.
    let mut files = Vec::new();
    walk(dir, &mut files);
    assert!(files.len() >= 5, "{files:?}");
    for file in files {
        let bytes = std::fs::read(&file).unwrap();
        for (encoding, needle) in &encodings {
            assert!(
                !bytes.windows(needle.len()).any(|w| w == needle.as_slice()),
                "{} holds the recovery scalar ({encoding})",
                file.display()
            );
        }
    }
    drop(identity);
}

fn set_nonblocking_fill(writer: &mut std::io::PipeWriter, filler: &[u8]) {
    use std::io::Write as _;
    // 64 KiB is the default pipe capacity on Linux: exactly full, the next
    // write (recover's) blocks.
    writer.write_all(filler).unwrap();
}

fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            walk(&path, files);
        } else if path.is_file() {
            files.push(path);
        }
    }
}

/// `age -d -i KEY FILE`, as the holder of KEY opens FILE; the text.
fn age_decrypt(dir: &Path, key: &Path, file: &Path) -> String {
    let opened = ok(
        run(
            dir,
            Path::new("age"),
            &["-d", "-i", key.to_str().unwrap(), file.to_str().unwrap()],
            None,
        ),
        "age -d",
    );
    String::from_utf8(opened.stdout).unwrap()
}

/// What each custodian sees with `age -d`: the share files of `set` opened
/// with their keys. The tests combine these themselves to learn the scalar
/// they then look for.
fn opened_by_custodians(
    dir: &Path,
    set: &KeySet,
    keys: &[AgeKey],
) -> Vec<sceau_format::recovery_share::Share> {
    set.shares
        .iter()
        .zip(keys)
        .map(|(share, key)| {
            let text = age_decrypt(dir, &key.identity, share);
            assert!(
                text.contains("-----BEGIN SCEAU RECOVERY SHARE-----"),
                "{text}"
            );
            sceau_format::recovery_share::Share::parse(&text).unwrap()
        })
        .collect()
}

/// The scalar of a recovery identity file's text.
fn scalar_of(identity_file: &str) -> Vec<u8> {
    let armored =
        sceau_format::armor::decode(identity_file, sceau_format::recovery_key::IDENTITY_LABEL)
            .unwrap();
    assert_eq!(armored.bytes.len(), 32);
    armored.bytes.to_vec()
}

/// `recover` with `shares`, every custodian's age identity, and `input`
/// (`--envelope`, `--etcd-json`, …) `path`.
fn recover_args(shares: &[PathBuf], keys: &[AgeKey], input: &str, path: &Path) -> Vec<String> {
    let mut args = vec!["recover".to_string()];
    for share in shares {
        args.extend(["--share".into(), share.display().to_string()]);
    }
    for key in keys {
        args.extend(["--age-identity".into(), key.identity.display().to_string()]);
    }
    args.extend([input.into(), path.display().to_string()]);
    args
}

/// A memory scan's needles for the recovery key: the scalar in both byte
/// orders (p256 keeps it as little-endian limbs), and for each of `shares`
/// (numbered from `first`) its value in both orders and its file's base64.
fn key_needles(
    scalar: &[u8],
    shares: &[sceau_format::recovery_share::Share],
    first: usize,
) -> Vec<(String, Vec<u8>)> {
    let mut needles = vec![
        ("scalar (big-endian)".to_string(), scalar.to_vec()),
        (
            "scalar (little-endian)".to_string(),
            scalar.iter().rev().copied().collect(),
        ),
    ];
    for (n, share) in (first..).zip(shares) {
        let value = share.value_bytes();
        needles.push((format!("share {n} value"), value.to_vec()));
        needles.push((
            format!("share {n} value (little-endian)"),
            value.iter().rev().copied().collect(),
        ));
        // The share file's text as age gives it back: its base64 block.
        needles.extend(armored_block_lines(&format!("share {n}"), &share.file()));
    }
    needles
}

/// The base64 lines of an armored text's block, each a needle: what a
/// freed copy of a key or share file's text would hold.
fn armored_block_lines(label: &str, text: &str) -> Vec<(String, Vec<u8>)> {
    text.lines()
        .skip_while(|l| !l.starts_with("-----BEGIN"))
        .skip(1)
        .take_while(|l| !l.starts_with("-----END"))
        .enumerate()
        .map(|(i, line)| {
            (
                format!("{label} base64 line {}", i + 1),
                line.as_bytes().to_vec(),
            )
        })
        .collect()
}

/// Spawns `sceau-recover ARGS` with a full pipe as `stream` (1: standard
/// output, 2: standard error), the other output to /dev/null, and waits
/// until it blocks writing to that pipe. Returns the child and the pipe's
/// reading end (drain it to let the child finish).
fn blocked_writing(
    dir: &Path,
    args: &[String],
    stream: u32,
    stdin: Stdio,
) -> (std::process::Child, std::io::PipeReader) {
    let (reader, mut writer) = std::io::pipe().unwrap();
    set_nonblocking_fill(&mut writer, &vec![b'.'; 1 << 16]);
    let mut command = Command::new(recover_bin());
    command.args(args).current_dir(dir).stdin(stdin);
    if stream == 1 {
        command.stdout(writer).stderr(Stdio::null());
    } else {
        command.stdout(Stdio::null()).stderr(writer);
    }
    let child = command.spawn().unwrap();
    let pid = child.id();
    let blocked = poll_until(Duration::from_secs(60), || {
        std::fs::read_to_string(format!("/proc/{pid}/syscall"))
            .is_ok_and(|s| s.starts_with(&format!("1 {stream:#x} ")))
    });
    assert!(blocked, "{args:?} never blocked writing to fd {stream}");
    (child, reader)
}

/// Drains `reader` and waits for `child`; its exit status and what it wrote
/// after the 64 KiB that filled the pipe.
fn finish(mut child: std::process::Child, reader: std::io::PipeReader) -> (bool, Vec<u8>) {
    let drained = std::thread::spawn(move || {
        let mut all = Vec::new();
        std::io::Read::read_to_end(&mut { reader }, &mut all).unwrap();
        all
    });
    let status = wait_timeout(&mut child, TOOL_TIMEOUT).expect("sceau-recover finished");
    let output = drained.join().unwrap();
    (status.success(), output[1 << 16..].to_vec())
}

/// The private key `recovery-keygen --identity` and `enrollment-keygen`
/// made is in none of their memory once the files are written: the scan
/// runs while each is blocked writing its closing line to a full standard
/// error, and looks for the scalar (both byte orders) and the base64 of
/// the identity file, which armor builds in a growing string and age
/// encrypts through its own stream buffer. Shown failing: without the
/// wiping allocator, recovery-keygen's heap held the identity file's base64
/// in freed blocks; with the enrollment key inline in `EnrollmentIdentity`,
/// enrollment-keygen's stack held the scalar (a moved-from copy in its
/// caller's frame).
#[test]
fn keygen_leaves_no_copy_of_the_private_key_in_memory() {
    let tmp = TempDir::new("keygen-no-key");
    let dir = tmp.path();
    let holder = age_key(dir, "holder");
    let cases = [
        (
            "recovery-keygen",
            ["--identity", "--public"],
            sceau_format::recovery_key::IDENTITY_LABEL,
        ),
        (
            "enrollment-keygen",
            ["--enrollment-identity", "--enrollment-public"],
            sceau_format::endorsement::ENROLLMENT_IDENTITY_LABEL,
        ),
    ];
    for (command, [identity_flag, public_flag], label) in cases {
        let identity = dir.join(format!("{command}.identity"));
        let args: Vec<String> = [
            command,
            identity_flag,
            identity.to_str().unwrap(),
            public_flag,
            dir.join(format!("{command}.pub")).to_str().unwrap(),
            "--protect",
            &holder.spec,
        ]
        .map(str::to_string)
        .to_vec();
        let (child, reader) = blocked_writing(dir, &args, 2, Stdio::null());
        let pid = child.id();
        // The file is written before the closing line; the test opens it
        // with the holder's key, as its holder would.
        let text = age_decrypt(dir, &holder.identity, &identity);
        let scalar = sceau_format::armor::decode(&text, label).unwrap().bytes;
        assert_eq!(scalar.len(), 32, "{command}");
        let mut needles = vec![
            (format!("{command} scalar"), scalar.to_vec()),
            (
                format!("{command} scalar (little-endian)"),
                scalar.iter().rev().copied().collect(),
            ),
        ];
        needles.extend(armored_block_lines(command, &text));
        let hits = find_all_in_process(pid, &needles, 16);
        let (success, stderr) = finish(child, reader);
        assert!(success, "{command}: {}", String::from_utf8_lossy(&stderr));
        assert!(
            hits.is_empty(),
            "{command}: the private key in memory: {hits:#?}"
        );
    }
}

/// Builds an `etcdctl get -w json` answer holding one Secret stored as the
/// kube-apiserver stores it with KMS v2: JSON-encoded, AES-256-GCM under
/// HKDF-SHA256(seed, info), the etcd key as additional data, the envelope
/// as encryptedDEKSource. Python's `cryptography` does the AES-GCM, which
/// the test binary does not link.
const ETCD_JSON_WRITER: &str = r#"
import base64, json, os, sys
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand
seed = bytes.fromhex(sys.argv[1])
envelope = open(sys.argv[2], "rb").read()
secret, key = sys.argv[4].encode(), sys.argv[5].encode()
info, nonce = os.urandom(32), os.urandom(12)
dek = HKDFExpand(algorithm=hashes.SHA256(), length=32, info=info).derive(seed)
sealed = AESGCM(dek).encrypt(nonce, secret, key)
def field(number, data):
    out, n = bytes([number << 3 | 2]), len(data)
    while n >= 0x80:
        out += bytes([n & 0x7f | 0x80]); n >>= 7
    return out + bytes([n]) + data
value = (b"k8s:enc:kms:v2:sceau:" + field(1, info + nonce + sealed)
         + field(2, b"sceau-test") + field(3, envelope) + bytes([5 << 3, 1]))
kv = {"key": base64.b64encode(key).decode(), "value": base64.b64encode(value).decode(),
      "create_revision": 2, "mod_revision": 2, "version": 1}
open(sys.argv[3], "w").write(json.dumps({"kvs": [kv], "count": 1}))
"#;

/// With `--etcd-json` (as with `--etcd-snapshot`), `recover` opens every DEK
/// seed first and wipes the recovery key before it prints the first
/// Secret: blocked writing that Secret to a full pipe, its memory holds
/// neither the scalar nor the shares (values and base64), and its memory is
/// still locked (VmLck) while the Secrets are printed. Shown failing before
/// the seeds were opened first: the scalar was found on the heap while the
/// Secret was being written; and, with `lock_all_memory` not called, VmLck
/// was 0.
#[tokio::test(flavor = "multi_thread")]
async fn etcd_recovery_wipes_the_key_before_printing() {
    let TwoOfThree {
        tmp,
        keys,
        set,
        dek: seed,
        envelope,
    } = two_of_three("shares-etcd-no-key").await;
    let dir = tmp.path();
    let secret = r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"db","namespace":"default"},"data":{"password":"c2VjcmV0"}}"#;
    let json = dir.join("etcd.json");
    let writer = dir.join("etcd-json-writer.py");
    std::fs::write(&writer, ETCD_JSON_WRITER).unwrap();
    let seed_hex: String = seed.iter().map(|b| format!("{b:02x}")).collect();
    ok(
        run(
            dir,
            Path::new("python3"),
            &[
                writer.to_str().unwrap(),
                &seed_hex,
                envelope.to_str().unwrap(),
                json.to_str().unwrap(),
                secret,
                "/registry/secrets/default/db",
            ],
            None,
        ),
        "etcd JSON writer",
    );
    let plain = opened_by_custodians(dir, &set, &keys);
    let identity = sceau_format::recovery_share::combine(&plain[..2]).unwrap();
    let scalar = scalar_of(&identity.identity_file());
    let args = recover_args(&set.shares[..2], &keys, "--etcd-json", &json);
    let (child, reader) = blocked_writing(dir, &args, 1, Stdio::null());
    let pid = child.id();
    let needles = key_needles(&scalar, &plain[..2], 1);
    let hits = find_all_in_process(pid, &needles, 16);
    let locked = locked_kib(pid);
    let (success, output) = finish(child, reader);
    assert!(success);
    assert_eq!(String::from_utf8(output).unwrap().trim_end(), secret);
    assert!(
        hits.is_empty(),
        "the recovery key or a share in memory: {hits:#?}"
    );
    assert!(
        locked > 0,
        "memory not locked while the Secrets are printed"
    );
}

/// VmLck of a live process, in KiB.
fn locked_kib(pid: u32) -> u64 {
    kib(
        &std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap(),
        "VmLck:",
    )
}

/// A `FIELD: N kB` line of /proc/PID/status, in KiB.
fn kib(status: &str, field: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in {status}"))
}

/// `recover` locks all its memory (mlockall) before it holds a key: run
/// as root (CAP_IPC_LOCK) with the identity read and the envelope still to
/// come on a pipe nobody writes yet (`--envelope -`), its VmLck is most of
/// its resident memory. Shown failing with `lock_all_memory` not called:
/// VmLck 0 kB.
#[test]
fn recover_locks_its_memory_before_it_reads_a_key() {
    let tmp = TempDir::new("recover-mlock");
    let dir = tmp.path();
    let (identity, _) = identity_keygen(dir, "locked", &["--unencrypted-private-key"]);
    let (reader, writer) = std::io::pipe().unwrap();
    let mut child = Command::new(recover_bin())
        .args(["recover", "--identity", identity.to_str().unwrap()])
        .args(["--envelope", "-"])
        .current_dir(dir)
        .stdin(reader)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let blocked = poll_until(Duration::from_secs(30), || {
        std::fs::read_to_string(format!("/proc/{pid}/syscall"))
            .is_ok_and(|s| s.starts_with("0 0x0 "))
    });
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    drop(writer);
    let _ = wait_timeout(&mut child, TOOL_TIMEOUT).expect("recover finished");
    assert!(blocked, "recover never blocked reading its input");
    let (locked, resident) = (kib(&status, "VmLck:"), kib(&status, "VmRSS:"));
    assert!(
        locked > 0 && locked * 2 >= resident,
        "VmLck {locked} kB of VmRSS {resident} kB:\n{status}"
    );
}
