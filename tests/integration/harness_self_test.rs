//! Checks of the harness itself, against swtpm and tpm2-tools only (no sceau),
//! so that a failure elsewhere can be trusted to be about sceau.

use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use crate::harness::envelope::{self, Envelope};
use crate::harness::process::run_with_timeout;
use crate::harness::rpc::{generation_key_id, is_well_formed_key_id, key_id_from_name};
use crate::harness::{Swtpm, TempDir, Tpm2Tools, random_bytes};

fn accepts(port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", port)).is_ok()
}

#[test]
fn swtpms_get_distinct_port_pairs_and_die_when_killed() {
    let tmp = TempDir::new("self-ports");
    let mut a = Swtpm::start(&tmp.subdir("a"));
    let b = Swtpm::start(&tmp.subdir("b"));
    let (pa, pb) = (a.port(), b.port());
    assert!(pa.abs_diff(pb) >= 2, "pairs overlap: {pa} and {pb}");
    assert!(accepts(pa) && accepts(pa + 1) && accepts(pb) && accepts(pb + 1));
    a.kill();
    assert!(!accepts(pa), "swtpm still listening after kill");
    assert!(accepts(pb), "killing one swtpm affected the other");
}

#[test]
fn template_primary_is_deterministic_and_survives_a_power_cycle() {
    let tmp = TempDir::new("self-primary");
    let mut tpm = Swtpm::start(&tmp.subdir("tpm"));
    let tools = Tpm2Tools::new(&tpm, tmp.path());
    tools.create_srk_primary("prim.ctx");
    let name = tools.read_name("prim.ctx");
    assert_eq!(
        name.len(),
        34,
        "sha256 Name = 2-byte alg id + 32-byte digest"
    );
    assert_eq!(&name[..2], &[0x00, 0x0b], "name algorithm is sha256");
    assert!(is_well_formed_key_id(&key_id_from_name(&name)));
    assert!(is_well_formed_key_id(&generation_key_id(0, 1, &name)));

    tools.create_srk_primary("again.ctx");
    assert_eq!(
        tools.read_name("again.ctx"),
        name,
        "same template, same TPM, same key"
    );

    tpm.restart();
    let tools = Tpm2Tools::new(&tpm, tmp.path());
    tools.create_srk_primary("after-restart.ctx");
    assert_eq!(
        tools.read_name("after-restart.ctx"),
        name,
        "seeds persist in the state dir"
    );
}

#[test]
fn different_swtpms_have_different_srks() {
    let tmp = TempDir::new("self-two-srks");
    let names: Vec<Vec<u8>> = ["a", "b"]
        .iter()
        .map(|label| {
            let tpm = Swtpm::start(&tmp.subdir(label));
            let tools = Tpm2Tools::new(&tpm, &tmp.subdir(&format!("{label}-tools")));
            tools.create_srk_primary("prim.ctx");
            tools.read_name("prim.ctx")
        })
        .collect();
    assert_ne!(names[0], names[1]);
}

/// The envelope layout the tests assume matches what tpm2-tools produces:
/// a 32-byte DEK gives 1 + 2 + 48 + 160 = 211 bytes, and splitting the
/// envelope gives back files tpm2_load accepts.
#[test]
fn envelope_of_tools_sealed_object_round_trips_through_tools() {
    let tmp = TempDir::new("self-envelope");
    let tpm = Swtpm::start(&tmp.subdir("tpm"));
    let tools = Tpm2Tools::new(&tpm, tmp.path());
    tools.create_srk_primary("prim.ctx");
    let dek = random_bytes(32);
    let (public, private) = tools.seal("prim.ctx", &dek);
    assert_eq!((public.len(), private.len()), (48, 160));

    let bytes = Envelope { public, private }.encode();
    assert_eq!(bytes.len(), 211);
    assert_eq!(bytes[0], envelope::VERSION);
    let parsed = Envelope::parse(&bytes);
    assert_eq!(parsed.encode(), bytes);
    assert_eq!(
        tools.unseal("prim.ctx", &parsed.public, &parsed.private),
        dek
    );
}

#[test]
fn run_with_timeout_captures_output_and_kills_hung_commands() {
    let tmp = TempDir::new("self-timeout");
    let done = run_with_timeout(
        Command::new("sh").args(["-c", "echo out; echo err >&2"]),
        tmp.path(),
        Duration::from_secs(5),
    );
    assert!(done.status.success());
    assert_eq!(
        (done.stdout.as_str(), done.stderr.as_str()),
        ("out\n", "err\n")
    );

    let hung = std::panic::catch_unwind(|| {
        run_with_timeout(
            Command::new("sleep").arg("30"),
            tmp.path(),
            Duration::from_millis(200),
        )
    });
    assert!(
        hung.is_err(),
        "a command exceeding its timeout must fail the test"
    );
}

#[test]
fn temp_dir_is_private_and_removed_on_drop() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = TempDir::new("self-tempdir");
    let path = tmp.path().to_path_buf();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    std::fs::write(tmp.join("file"), b"x").unwrap();
    drop(tmp);
    assert!(!path.exists() || std::env::var_os("SCEAU_IT_KEEP").is_some());
}
