//! The lifecycle events off the journal (a terminal, a container, these
//! tests): each an ordinary log line carrying `event=` and the
//! `message_id=` of its kind, the one the packaged catalog explains. The
//! same events as native journal records, found by `MESSAGE_ID` and
//! explained by `journalctl -x`, are checked in the VM under real journald
//! (tests/vm/guest-checks.sh).

use std::process::Command;
use std::time::Duration;

use sceau::events::Kind;

use crate::harness::process::run_with_timeout;
use crate::harness::sceau::BIN;
use crate::harness::{Sceau, Swtpm, TempDir, Tpm2Tools, random_bytes, rpc};

const TOOL_TIMEOUT: Duration = Duration::from_secs(60);

/// The lines of `log` that are events of `kind`.
fn events(log: &str, kind: Kind) -> Vec<&str> {
    let marker = format!(" event={} message_id={}", kind.name(), kind.message_id());
    log.lines().filter(|l| l.contains(&marker)).collect()
}

/// Whether `log` holds an event of `kind`: for the tests that provoke one
/// on the way (boot binding, cluster mode, a frozen TPM).
pub(crate) fn has_event(log: &str, kind: Kind) -> bool {
    !events(log, kind).is_empty()
}

fn one(log: &str, kind: Kind) -> &str {
    let found = events(log, kind);
    assert_eq!(found.len(), 1, "{}: {found:?}\n{log}", kind.name());
    found[0]
}

fn field<'a>(line: &'a str, name: &str) -> &'a str {
    let start = format!(" {name}=\"");
    let at = line
        .find(&start)
        .unwrap_or_else(|| panic!("no {name} in {line}"))
        + start.len();
    &line[at..at + line[at..].find('"').unwrap()]
}

/// Start, sandbox, a new key_id, a refused call, a rotation picked up by a
/// reload, and a retire: each event once, with its facts; a restart with
/// the same options has the same configuration digest and another option
/// another. Shown failing: with `events::emit` dropping call-refused events
/// off the journal, the refused Decrypt left no line here.
#[tokio::test(flavor = "multi_thread")]
async fn lifecycle_events_name_their_kind_and_facts() {
    let tmp = TempDir::new("audit-events");
    let tpm = Swtpm::start(&tmp.subdir("tpm"));
    let state = tmp.join("sceau.sock").with_extension("state");
    let kek = |args: &[&str]| {
        let mut all = args.to_vec();
        let tcti = tpm.tcti();
        all.extend(["--tcti", &tcti, "--state-dir", state.to_str().unwrap()]);
        let run = run_with_timeout(Command::new(BIN).args(&all), tmp.path(), TOOL_TIMEOUT);
        assert!(run.status.success(), "{args:?}: {}", run.all_output());
        run.stderr
    };

    let rotated = kek(&["kek", "rotate"]);
    let line = one(&rotated, Kind::KekRotated);
    assert_eq!(field(line, "generation"), "1", "{line}");

    let mut sceau = Sceau::start(&tmp, &tpm, &[]);
    let mut client = sceau.client().await;
    let first = rpc::status(&mut client).await.key_id;
    let refused = rpc::decrypt(&mut client, &random_bytes(64), "not-a-key-id").await;
    assert!(refused.is_err());
    drop(client);
    assert!(sceau.terminate().success());
    let log = sceau.stderr_text();

    // swtpm has no resource manager: the second rotation runs between two
    // serves, and the reload's change comes from generation 2 evicted by
    // tpm2-tools beside the serving sceau (as in kek.rs).
    let rotated = kek(&["kek", "rotate"]);
    let second = field(one(&rotated, Kind::KekRotated), "key_id").to_string();
    let mut sceau = Sceau::start(&tmp, &tpm, &[]);
    let mut client = sceau.client().await;
    assert_eq!(rpc::status(&mut client).await.key_id, second);
    Tpm2Tools::new(&tpm, &tmp.subdir("tools"))
        .run("tpm2_evictcontrol", &["-C", "o", "-c", "0x815ce002"]);
    sceau.signal(libc::SIGHUP);
    let mut third = second.clone();
    for _ in 0..100 {
        third = rpc::status(&mut client).await.key_id;
        if third != second {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(client);
    assert!(sceau.terminate().success());
    let reloaded = sceau.stderr_text();
    let changes = events(&reloaded, Kind::KeyIdChanged);
    // At start the key_id is the one `kek rotate` made and announced.
    assert_eq!(changes.len(), 1, "at the reload only: {changes:?}");
    assert_eq!(field(changes[0], "former_key_id"), second, "{}", changes[0]);
    assert_eq!(field(changes[0], "key_id"), third, "{}", changes[0]);
    assert_eq!(field(one(&reloaded, Kind::Reloaded), "key_id"), third);

    let started = one(&log, Kind::Started);
    assert_eq!(field(started, "key_id"), first, "{started}");
    assert_eq!(field(started, "tpm_manufacturer"), "IBM", "{started}");
    let digest = field(started, "config_digest").to_string();
    assert_eq!(digest.len(), 64, "{started}");
    let sandbox = one(&log, Kind::Sandbox);
    assert_eq!(field(sandbox, "seccomp"), "kill", "{sandbox}");
    let refusal = one(&log, Kind::CallRefused);
    assert!(
        refusal.starts_with("sceau WARN  call method=Decrypt ")
            && refusal.contains("code=InvalidArgument"),
        "{refusal}"
    );
    assert!(events(&log, Kind::KeyIdChanged).is_empty(), "{log}");

    kek(&["kek", "rotate"]);
    let retired = kek(&["kek", "retire", "--generation", "1"]);
    let line = one(&retired, Kind::KekRetired);
    assert!(field(line, "key_ids").contains(&first), "{line}");

    // The same options again: the same digest; one option more: another.
    let mut again = Sceau::start(&tmp, &tpm, &[]);
    assert!(again.terminate().success());
    assert_eq!(
        field(one(&again.stderr_text(), Kind::Started), "config_digest"),
        digest
    );
    let mut other = Sceau::start(&tmp, &tpm, &["--request-deadline", "3s"]);
    assert!(other.terminate().success());
    assert_ne!(
        field(one(&other.stderr_text(), Kind::Started), "config_digest"),
        digest
    );
}
