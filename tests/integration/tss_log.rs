//! tpm2-tss's own log never carries a DEK into sceau's output (the journal).
//!
//! At debug, tpm2-tss's ESAPI dumps every parameter it encrypts as hex
//! lines (`0000: 00000020…`), the DEK of Create and of Unseal's answer
//! among them. `serve` refuses such a TSS2_LOG unless told
//! `--tss-log-reveals-secrets`; the control run with that flag finds the
//! marker DEK in the output, which shows the scan sees what it looks for
//! (and that the refusal is needed). `tcti+debug`, which `serve` allows,
//! logs the bytes on the bus, which the salted session encrypts: the same
//! scan finds nothing there.

use crate::harness::sceau::serve_args;
use crate::harness::{Sceau, Swtpm, TempDir, rpc};

/// 32 bytes that occur nowhere else.
const MARKER_DEK: &[u8; 32] = b"sceau-tss-log-marker-DEK-0xBEEF!";
/// Any 16 bytes of the marker count as a copy.
const WINDOW: usize = 16;

/// sceau started with `tss2_log` (and `extra` flags) on a fresh swtpm.
fn spawn(tmp: &TempDir, tpm: &Swtpm, tss2_log: &str, extra: &[&str]) -> Sceau {
    let socket = tmp.join("sceau.sock");
    let args = serve_args(&socket, Some(&tpm.tcti()), extra);
    Sceau::spawn(tmp, &socket, args, &[("TSS2_LOG", tss2_log)])
}

/// Three round trips with the marker DEK, then the whole output.
async fn round_trips_then_output(mut sceau: Sceau) -> String {
    sceau
        .wait_serving()
        .unwrap_or_else(|why| panic!("{why}\n{}", sceau.stderr_text()));
    let mut client = sceau.client().await;
    let key_id = rpc::status(&mut client).await.key_id;
    for _ in 0..3 {
        rpc::round_trip(&mut client, &key_id, MARKER_DEK).await;
    }
    drop(client);
    sceau.terminate();
    sceau.stderr_text()
}

/// The hex digits of tpm2-tss's dump lines (`OFFS: HEX  ASCII`), joined
/// per dump, lower case; a line of any other shape ends a dump.
fn dumped_hex(output: &str) -> Vec<String> {
    let mut dumps = vec![String::new()];
    for line in output.lines() {
        let hex = line
            .split_once(": ")
            .filter(|(offset, _)| {
                offset.len() == 4 && offset.bytes().all(|b| b.is_ascii_hexdigit())
            })
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .filter(|hex| hex.bytes().all(|b| b.is_ascii_hexdigit()));
        match hex {
            Some(hex) => dumps
                .last_mut()
                .unwrap()
                .push_str(&hex.to_ascii_lowercase()),
            None if !dumps.last().unwrap().is_empty() => dumps.push(String::new()),
            None => {}
        }
    }
    dumps
}

/// Whether any WINDOW bytes of the marker appear in a dump, in hex or as
/// text anywhere in the output.
fn marker_in(output: &str) -> bool {
    let windows: Vec<&[u8]> = MARKER_DEK.windows(WINDOW).collect();
    let as_hex = |w: &[u8]| w.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let dumps = dumped_hex(output);
    windows.iter().any(|w| {
        let hex = as_hex(w);
        dumps.iter().any(|d| d.contains(&hex))
            || output.contains(std::str::from_utf8(w).expect("the marker is ASCII"))
    })
}

#[test]
fn a_tss2_log_that_dumps_parameters_stops_serve_before_the_tpm() {
    for value in ["esys+debug", "all+trace", "tcti+debug,sys+debug"] {
        let tmp = TempDir::new("tss-log-refused");
        let tpm = Swtpm::start(&tmp.subdir("tpm"));
        let mut sceau = spawn(&tmp, &tpm, value, &[]);
        let status = sceau
            .wait_exit(crate::harness::sceau::EXIT_TIMEOUT)
            .unwrap_or_else(|| panic!("sceau started with TSS2_LOG={value}"));
        let output = sceau.stderr_text();
        assert_eq!(status.code(), Some(1), "{output}");
        assert!(
            output.contains(&format!("TSS2_LOG={value} makes tpm2-tss log DEKs")),
            "{output}"
        );
        assert!(output.contains("--tss-log-reveals-secrets"), "{output}");
        assert!(!output.contains("opening the TPM"), "{output}");
    }
}

/// The control: with the flag, tpm2-tss writes the DEK into the output,
/// in the very form the scan reads.
#[tokio::test(flavor = "multi_thread")]
async fn with_the_flag_the_dek_reaches_the_output() {
    let tmp = TempDir::new("tss-log-revealed");
    let tpm = Swtpm::start(&tmp.subdir("tpm"));
    let sceau = spawn(&tmp, &tpm, "esys+debug", &["--tss-log-reveals-secrets"]);
    let output = round_trips_then_output(sceau).await;
    assert!(
        output.contains("--tss-log-reveals-secrets: TSS2_LOG=esys+debug"),
        "{output}"
    );
    assert!(
        marker_in(&output),
        "the control found no DEK in tpm2-tss's debug output"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_wire_level_log_carries_no_dek() {
    let tmp = TempDir::new("tss-log-wire");
    let tpm = Swtpm::start(&tmp.subdir("tpm"));
    let sceau = spawn(&tmp, &tpm, "tcti+trace", &[]);
    let output = round_trips_then_output(sceau).await;
    assert!(
        !dumped_hex(&output).concat().is_empty(),
        "tcti+trace dumped no bytes, so this test would prove nothing:\n{output}"
    );
    assert!(!marker_in(&output), "the marker DEK is in the tcti log");
}

#[test]
fn the_dump_reader_reads_tpm2_tss_lines() {
    let output = "debug:esys:x.c:1:f() param to encrypt (size=36): \n\
                  0000: 0000002073636561752d7473732d6c6f  ... sceau-tss-lo\n\
                  0010: 672d6d61726b65722d44454b2d3078    g-marker-DEK-0x\n\
                  other line\n";
    assert!(marker_in(output));
    assert!(!marker_in("0000: 00112233\n"));
}
