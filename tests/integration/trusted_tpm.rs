//! Trusting only the expected TPM: an owner hierarchy with an
//! authorization value, given to sceau as the systemd credential
//! `tpm-owner-auth` and never shown; `--srk-handle`, which reads the SRK
//! instead of making it with CreatePrimary; and `--expect-srk-name`, which pins the
//! node's SRK so that another TPM is refused with both Names in the line.

use sceau_format::key_id::hex;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::harness::process::{Finished, run_with_timeout};
use crate::harness::sceau::{self, BIN};
use crate::harness::tpm_proxy::{Profile, TpmProxy};
use crate::harness::{Sceau, Swtpm, TempDir, Tpm2Tools, random_bytes, rpc};

/// A start that fails does so before anything slow: a TPM start-up.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// The owner authorization set with tpm2-tools: a value no log line,
/// error or listing may ever carry.
const OWNER_SECRET: &str = "owner-Zq8rT3vK";

fn write_credential(dir: &Path, value: &str) {
    let path = dir.join("tpm-owner-auth");
    let _ = std::fs::remove_file(&path);
    std::fs::write(&path, value).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o400)).unwrap();
}

/// `sceau serve` with `env`, which must fail at start; its stderr.
fn refused_start(tmp: &TempDir, tpm: &Swtpm, extra: &[&str], env: &[(&str, &str)]) -> String {
    let socket = tmp.join("sceau.sock");
    let args = sceau::serve_args(&socket, Some(&tpm.tcti()), extra);
    let mut sceau = Sceau::spawn(tmp, &socket, args, env);
    let status = sceau.wait_exit(START_TIMEOUT).unwrap_or_else(|| {
        panic!(
            "sceau started where it must refuse:\n{}",
            sceau.stderr_text()
        )
    });
    assert!(!status.success(), "{status}");
    sceau.stderr_text()
}

fn serving(tmp: &TempDir, tpm: &Swtpm, extra: &[&str], env: &[(&str, &str)]) -> Sceau {
    let socket = tmp.join("sceau.sock");
    let args = sceau::serve_args(&socket, Some(&tpm.tcti()), extra);
    let mut sceau = Sceau::spawn(tmp, &socket, args, env);
    if let Err(why) = sceau.wait_serving() {
        panic!("sceau did not start: {why}\n{}", sceau.stderr_text());
    }
    sceau
}

fn kek(tmp: &TempDir, tpm: &Swtpm, args: &[&str], env: &[(&str, &str)]) -> Finished {
    let state = tmp.join("sceau.state");
    let mut command = Command::new(BIN);
    command
        .args(args)
        .args([
            "--tcti",
            &tpm.tcti(),
            "--state-dir",
            state.to_str().unwrap(),
        ])
        .env("SCEAU_LOG", "debug");
    for (key, value) in env {
        command.env(key, value);
    }
    run_with_timeout(&mut command, tmp.path(), START_TIMEOUT)
}

/// Shown failing: with `OwnerAuth::apply` left out of `Tpm::open`, the
/// start with the right credential was refused like the one without.
#[tokio::test(flavor = "multi_thread")]
async fn an_owner_authorization_comes_from_the_credential_and_never_shows() {
    let tmp = TempDir::new("owner-auth");
    let tpm = Swtpm::start(&tmp.subdir("tpm"));
    let tools = Tpm2Tools::new(&tpm, &tmp.subdir("tools"));
    tools.run("tpm2_changeauth", &["-c", "o", OWNER_SECRET]);
    let credentials = tmp.subdir("credentials");
    let credentials = credentials.to_str().unwrap();
    let env = [
        ("CREDENTIALS_DIRECTORY", credentials),
        ("SCEAU_LOG", "debug"),
    ];
    let mut everything = String::new();

    let none = refused_start(&tmp, &tpm, &[], &env);
    assert!(
        none.contains("no credential tpm-owner-auth was given")
            && none.contains("LoadCredentialEncrypted=tpm-owner-auth"),
        "{none}"
    );
    everything += &none;

    write_credential(Path::new(credentials), "not-the-owner-value");
    let wrong = refused_start(&tmp, &tpm, &[], &env);
    assert!(
        wrong.contains("the one in the credential tpm-owner-auth is not the TPM's"),
        "{wrong}"
    );
    everything += &wrong;

    // tpm2-tools' `str:` form, with the newline `echo` adds.
    write_credential(Path::new(credentials), &format!("str:{OWNER_SECRET}\n"));
    let mut sceau = serving(&tmp, &tpm, &[], &env);
    let mut client = sceau.client().await;
    let key_id = rpc::status(&mut client).await.key_id;
    rpc::round_trip(&mut client, &key_id, &random_bytes(32)).await;
    drop(client);
    assert!(sceau.terminate().success());
    everything += &sceau.stderr_text();

    // The KEK lifecycle asks the owner for EvictControl and NV space.
    let without = kek(&tmp, &tpm, &["kek", "rotate"], &[]);
    assert!(!without.status.success());
    assert!(
        without.all_output().contains("tpm-owner-auth"),
        "{}",
        without.all_output()
    );
    everything += &without.all_output();
    let rotated = kek(&tmp, &tpm, &["kek", "rotate"], &env);
    assert!(rotated.status.success(), "{}", rotated.all_output());
    assert!(rotated.stdout.starts_with("generation 1 key_id "));
    everything += &rotated.all_output();

    assert!(!everything.contains(OWNER_SECRET), "{everything}");
    assert!(
        !everything.contains(&hex(OWNER_SECRET.as_bytes())),
        "{everything}"
    );
}

/// `--srk-handle` reads the persistent SRK (ReadPublic) where a start
/// without it makes the SRK (CreatePrimary, seconds for RSA on a real
/// TPM), counted through the test kit's proxy; pinned, it serves.
/// Shown failing: with CreatePrimary still run before the persistent key
/// is read, the pinned start made one (and, with the owner's value not
/// applied, was refused for it).
#[tokio::test(flavor = "multi_thread")]
async fn a_persistent_srk_is_read_not_made() {
    let tmp = TempDir::new("srk-persistent-read");
    let tpm = Swtpm::start(&tmp.subdir("tpm"));
    let tools = Tpm2Tools::new(&tpm, &tmp.subdir("tools"));
    tools.create_srk_primary("prim.ctx");
    let name = hex(&tools.read_name("prim.ctx"));
    tools.persist("prim.ctx", "0x81000001");
    tools.run("tpm2_changeauth", &["-c", "o", OWNER_SECRET]);
    let credentials = tmp.subdir("credentials");
    write_credential(&credentials, OWNER_SECRET);
    let env = [("CREDENTIALS_DIRECTORY", credentials.to_str().unwrap())];
    let proxy = TpmProxy::start(tpm.port(), Profile::discrete_tpm());
    proxy.set_scale(0.0);

    let create_primaries = |extra: &[&str]| {
        proxy.reset_counts();
        let socket = tmp.join("sceau.sock");
        let args = sceau::serve_args(&socket, Some(&proxy.tcti()), extra);
        let mut sceau = Sceau::spawn(&tmp, &socket, args, &env);
        if let Err(why) = sceau.wait_serving() {
            panic!("sceau did not start: {why}\n{}", sceau.stderr_text());
        }
        assert!(sceau.terminate().success());
        proxy.counts().get("CreatePrimary").copied().unwrap_or(0)
    };
    let pinned = ["--srk-handle", "0x81000001", "--expect-srk-name", &name];
    assert_eq!(create_primaries(&pinned), 0, "{:?}", proxy.counts());
    assert_eq!(create_primaries(&[]), 1, "{:?}", proxy.counts());
}

/// `--expect-srk-name` refuses another TPM (here a second swtpm, as a
/// swapped TPM or a cleared owner hierarchy would look) and an SRK an
/// interposer substitutes on the right TPM's bus (the test kit's proxy
/// rewriting CreatePrimary) with both Names in one line, and serves with
/// the right Name. Shown failing: with the pin not checked, the start on
/// the second TPM served; the unpinned start through the proxy shows that
/// the substitution is otherwise silent.
#[tokio::test(flavor = "multi_thread")]
async fn a_pinned_srk_name_refuses_another_tpm() {
    let tmp = TempDir::new("srk-pin");
    let tpm = Swtpm::start(&tmp.subdir("tpm"));
    let other = Swtpm::start(&tmp.subdir("other-tpm"));
    let srk_name = |tpm: &Swtpm, dir: &str| {
        let tools = Tpm2Tools::new(tpm, &tmp.subdir(dir));
        tools.create_srk_primary("prim.ctx");
        hex(&tools.read_name("prim.ctx"))
    };
    let ours = srk_name(&tpm, "tools");
    let theirs = srk_name(&other, "other-tools");
    assert_ne!(ours, theirs);

    let refused = refused_start(&tmp, &other, &["--expect-srk-name", &ours], &[]);
    let line = refused
        .lines()
        .find(|l| l.contains("--expect-srk-name pins"))
        .unwrap_or_else(|| panic!("{refused}"));
    assert!(line.contains(&ours) && line.contains(&theirs), "{line}");

    let mut sceau = serving(
        &tmp,
        &tpm,
        &["--expect-srk-name", &ours.to_uppercase()],
        &[],
    );
    assert!(sceau.terminate().success());

    // An interposer on the bus of the right TPM rewrites CreatePrimary's
    // template: the TPM makes another key of the SRK template and answers
    // well-formed. Unpinned, sceau takes that key and logs its Name; pinned,
    // the start is refused with both Names.
    let proxy = TpmProxy::start(tpm.port(), Profile::instant());
    proxy.inject(crate::harness::tpm_proxy::Fault::SubstitutePrimaries);
    let socket = tmp.join("sceau.sock");
    let through_proxy = |extra: &[&str]| {
        let mut sceau = Sceau::spawn(
            &tmp,
            &socket,
            sceau::serve_args(&socket, Some(&proxy.tcti()), extra),
            &[],
        );
        let exited = sceau.wait_exit(START_TIMEOUT);
        (exited, sceau)
    };
    let (exited, refused) = through_proxy(&["--expect-srk-name", &ours]);
    let refused = refused.stderr_text();
    assert!(
        matches!(exited, Some(status) if !status.success()),
        "{refused}"
    );
    let line = refused
        .lines()
        .find(|l| l.contains("--expect-srk-name pins"))
        .unwrap_or_else(|| panic!("{refused}"));
    assert!(line.contains(&ours), "{line}");
    assert!(proxy.substituted() >= 1);
    let substitute = line
        .split(|c: char| !c.is_ascii_hexdigit())
        .find(|word| word.len() == ours.len() && !word.eq_ignore_ascii_case(&ours))
        .unwrap_or_else(|| panic!("no second Name in {line}"))
        .to_ascii_lowercase();
    let mut unpinned = Sceau::spawn(
        &tmp,
        &socket,
        sceau::serve_args(&socket, Some(&proxy.tcti()), &[]),
        &[],
    );
    if let Err(why) = unpinned.wait_serving() {
        panic!(
            "unpinned through the proxy: {why}\n{}",
            unpinned.stderr_text()
        );
    }
    assert!(unpinned.terminate().success());
    let log = unpinned.stderr_text();
    assert!(
        log.contains(&format!("Name {substitute}")) && !log.contains(&format!("Name {ours}")),
        "the unpinned start should have taken the substituted SRK {substitute}:\n{log}"
    );

    for malformed in ["000b", "zz", &format!("0004{}", &ours[4..])] {
        let socket = tmp.join("sceau.sock");
        let run = run_with_timeout(
            Command::new(BIN)
                .args(sceau::serve_args(&socket, Some(&tpm.tcti()), &[]))
                .args(["--expect-srk-name", malformed]),
            tmp.path(),
            START_TIMEOUT,
        );
        assert_eq!(run.status.code(), Some(2), "{}", run.all_output());
        assert!(
            run.all_output().contains("is not a TPM Name"),
            "{}",
            run.all_output()
        );
    }
}

/// Bad credential files stop the start with one line that names the
/// credential, before the TPM is opened.
#[test]
fn a_credential_systemd_would_not_write_is_refused() {
    let tmp = TempDir::new("owner-auth-bad");
    let credentials = tmp.subdir("credentials");
    let path = credentials.join("tpm-owner-auth");
    std::fs::write(&path, "value").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    let socket = tmp.join("sceau.sock");
    // No TPM at all: the credential is read before the TPM is opened.
    let run = run_with_timeout(
        Command::new(BIN)
            .args(sceau::serve_args(&socket, Some("swtpm:port=1"), &[]))
            .env("CREDENTIALS_DIRECTORY", &credentials),
        tmp.path(),
        START_TIMEOUT,
    );
    assert_eq!(run.status.code(), Some(1), "{}", run.all_output());
    assert!(
        run.all_output().contains("tpm-owner-auth")
            && run.all_output().contains("mode 0640")
            && !run.all_output().contains("swtpm"),
        "{}",
        run.all_output()
    );
}

/// The manufacturer, vendor string and firmware version sceau logs at
/// start, and `sceau check --tpm-identity` prints, are the ones tpm2-tools
/// read from the same TPM.
#[test]
fn the_tpm_identity_logged_is_what_tpm2_getcap_reads() {
    let tmp = TempDir::new("tpm-identity");
    let tpm = Swtpm::start(&tmp.subdir("tpm"));
    let tools = Tpm2Tools::new(&tpm, &tmp.subdir("tools"));
    let firmware = tools.firmware_version();
    let mut sceau = serving(&tmp, &tpm, &[], &[]);

    // `sceau check --tpm-identity` prints the same from its own
    // GetCapability. swtpm serves one connection at a time and sceau holds
    // its own, so check reads a second swtpm here; the VM reads the
    // serving TPM through /dev/tpmrm0.
    let other = Swtpm::start(&tmp.subdir("other"));
    let socket = tmp.join("sceau.sock");
    let checked = run_with_timeout(
        Command::new(BIN).args([
            "check",
            "--status-only",
            "--socket",
            socket.to_str().unwrap(),
            "--tpm-identity",
            "--tcti",
            &other.tcti(),
        ]),
        tmp.path(),
        START_TIMEOUT,
    );
    let printed = format!("tpm: manufacturer=IBM vendor=\"SW   TPM\" firmware={firmware}");
    assert!(checked.status.success(), "{}", checked.stderr);
    assert!(
        checked.stdout.contains(&printed),
        "{printed:?} not in:\n{}",
        checked.stdout
    );

    assert!(sceau.terminate().success());
    let log = sceau.stderr_text();
    let expected = format!("TPM: manufacturer IBM, vendor \"SW   TPM\", firmware {firmware}");
    assert!(log.contains(&expected), "{expected:?} not in:\n{log}");
}

/// A vendor advisory that names this TPM's manufacturer and firmware (an
/// operator's file, since no real advisory names swtpm) is a warning by
/// default and the end of the start with `--tpm-advisories refuse`; an
/// advisory for the next firmware version is neither; a file that is not
/// a list stops the start with its line. Shown failing: with the refusal
/// in `check_advisories` turned into a warning, the refusing start served.
#[test]
fn a_tpm_under_an_advisory_is_named_and_can_be_refused() {
    let tmp = TempDir::new("tpm-advisories");
    let tpm = Swtpm::start(&tmp.subdir("tpm"));
    let tools = Tpm2Tools::new(&tpm, &tmp.subdir("tools"));
    let firmware = tools.firmware_version();
    let mut parts = firmware.split('.').map(|p| p.parse::<u32>().unwrap());
    let (major, minor) = (parts.next().unwrap(), parts.next().unwrap());
    drop(tools);
    let file = tmp.join("advisories");
    let file_arg = file.to_str().unwrap().to_string();
    let write = |line: &str| std::fs::write(&file, format!("# local\n{line}\n")).unwrap();
    let refusing = [
        "--tpm-advisories-file",
        file_arg.as_str(),
        "--tpm-advisories",
        "refuse",
    ];

    write(&format!(
        "CVE-2099-0001 IBM {major}.{minor} a test advisory naming this swtpm"
    ));
    let mut sceau = serving(&tmp, &tpm, &["--tpm-advisories-file", &file_arg], &[]);
    assert!(sceau.terminate().success());
    let log = sceau.stderr_text();
    assert!(
        log.contains(&format!(
            "this TPM (IBM firmware {major}.{minor}) is under CVE-2099-0001 (a test advisory \
             naming this swtpm)"
        )) && log.contains("serving, as --tpm-advisories warn asks"),
        "{log}"
    );

    let refused = refused_start(&tmp, &tpm, &refusing, &[]);
    assert!(
        refused.contains("is under CVE-2099-0001")
            && refused.contains("or use --tpm-advisories warn to serve anyway"),
        "{refused}"
    );

    write(&format!(
        "CVE-2099-0001 IBM {major}.{} the next version only",
        minor + 1
    ));
    let mut sceau = serving(&tmp, &tpm, &refusing, &[]);
    assert!(sceau.terminate().success());
    assert!(!sceau.stderr_text().contains("CVE-2099-0001 ("));

    write("CVE-2099-0001 IBM seven a version that is not one");
    let refused = refused_start(&tmp, &tpm, &["--tpm-advisories-file", &file_arg], &[]);
    assert!(
        refused.contains("is not an advisory list")
            && refused.contains("line 2: seven is not a firmware version"),
        "{refused}"
    );
}
