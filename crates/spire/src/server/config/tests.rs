//! The unit tests of `config` (config.rs), kept beside it once they
//! outgrew an inline module (ARCHITECTURE.md, "Where tests go").

use super::*;
use sceau_testkit::TempDir;
use std::path::PathBuf;
use std::time::{Duration, Instant};

const HASH: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// `ServerConfig::parse` with `ek_hashes_path = path`, in a thread, so
/// that a hang fails the test (after 5 s) instead of stalling it; the
/// stalled thread is left behind, as the plugin's was.
fn parse_with_hashes(path: &Path) -> (Result<ServerConfig, ConfigError>, Duration) {
    parse_bounded(format!("ek_hashes_path = \"{}\"", path.display()))
}

fn parse_bounded(hcl: String) -> (Result<ServerConfig, ConfigError>, Duration) {
    let (sender, receiver) = std::sync::mpsc::channel();
    let started = Instant::now();
    let shown = hcl.clone();
    std::thread::spawn(move || {
        let core = CoreConfig {
            trust_domain: "example.org".into(),
        };
        let _ = sender.send(ServerConfig::parse(&core, &hcl));
    });
    let result = receiver
        .recv_timeout(Duration::from_secs(5))
        .unwrap_or_else(|_| panic!("parsing hung: {shown:?}"));
    (result, started.elapsed())
}

fn refused(path: &Path) -> String {
    let (result, took) = parse_with_hashes(path);
    let error = result.expect_err("a special file was accepted").0;
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert!(!error.contains('\n'), "{error:?}");
    error
}

fn fifo(dir: &TempDir) -> PathBuf {
    let path = dir.join("ek-hashes");
    let status = std::process::Command::new("mkfifo")
        .arg(&path)
        .status()
        .expect("mkfifo runs");
    assert!(status.success());
    path
}

// Before O_NONBLOCK, the open of the FIFO blocked until a writer came:
// this test failed with "parsing hung".
#[test]
fn a_fifo_is_refused_at_once() {
    let dir = TempDir::new("sceau-spire-config");
    let path = fifo(&dir);
    assert_eq!(
        refused(&path),
        format!(
            "ek_hashes_path: {} is a FIFO, not a regular file",
            path.display()
        )
    );
}

#[test]
fn a_directory_and_a_device_are_refused_with_their_type() {
    let dir = TempDir::new("sceau-spire-config");
    assert_eq!(
        refused(dir.path()),
        format!(
            "ek_hashes_path: {} is a directory, not a regular file",
            dir.path().display()
        )
    );
    assert_eq!(
        refused(Path::new("/dev/zero")),
        "ek_hashes_path: /dev/zero is a character device, not a regular file"
    );
}

#[test]
fn the_roots_and_intermediates_paths_are_checked_the_same_way() {
    let dir = TempDir::new("sceau-spire-config");
    let path = fifo(&dir);
    let (result, _) = parse_bounded(format!("ek_roots_path = \"{}\"", path.display()));
    let error = result.unwrap_err();
    assert!(error.0.starts_with("ek_roots_path: ") && error.0.contains("is a FIFO"));
    let roots = dir.join("roots.pem");
    std::fs::write(&roots, "").unwrap();
    let (result, _) = parse_bounded(format!(
        "ek_roots_path = \"{}\"\nek_intermediates_path = \"/dev/zero\"",
        roots.display()
    ));
    let error = result.unwrap_err();
    assert_eq!(
        error.0,
        "ek_intermediates_path: /dev/zero is a character device, not a regular file"
    );
}

#[test]
fn advisory_settings_that_cannot_work_are_refused_at_configuration() {
    let dir = TempDir::new("sceau-spire-config");
    let hashes = dir.join("ek-hashes");
    std::fs::write(&hashes, format!("{HASH}\n")).unwrap();
    let with = |extra: &str| {
        parse_bounded(format!(
            "ek_hashes_path = \"{}\"\nquote_pcrs = [0]\n{extra}",
            hashes.display()
        ))
        .0
    };
    let config = with("").expect("warn is the default");
    assert!(!config.refuse_advised_tpms);
    assert_eq!(config.advisories.len(), 2, "the built-in list");
    assert!(
        with("tpm_advisories = \"refuse\"")
            .unwrap_err()
            .0
            .contains("needs ek_roots_path")
    );
    assert!(
        with("tpm_advisories = \"deny\"")
            .unwrap_err()
            .0
            .contains("\"warn\" or \"refuse\"")
    );
    let list = dir.join("advisories");
    std::fs::write(
        &list,
        "CVE-2099-0001 SWTP 1.0 fine\nCVE-2099-0002 SWTP one bad\n",
    )
    .unwrap();
    let error = with(&format!("tpm_advisories_path = \"{}\"", list.display()))
        .unwrap_err()
        .0;
    assert!(
        error.contains("line 2: one is not a firmware version"),
        "{error}"
    );
    std::fs::write(&list, "CVE-2099-0001 SWTP 1.0 fine\n").unwrap();
    let config = with(&format!("tpm_advisories_path = \"{}\"", list.display())).unwrap();
    assert_eq!(config.advisories.len(), 3);
}

#[test]
fn an_oversized_file_is_refused() {
    let dir = TempDir::new("sceau-spire-config");
    let path = dir.join("ek-hashes");
    let file = std::fs::File::create(&path).unwrap();
    file.set_len(MAX_FILE_LEN + 1).unwrap();
    assert_eq!(
        refused(&path),
        format!(
            "ek_hashes_path: {} is larger than {MAX_FILE_LEN} bytes",
            path.display()
        )
    );
}

fn parse_hcl(hcl: &str) -> Result<ServerConfig, ConfigError> {
    let core = CoreConfig {
        trust_domain: "example.org".into(),
    };
    let dir = TempDir::new("sceau-spire-config");
    let path = dir.join("ek-hashes");
    std::fs::write(&path, format!("{HASH}\n")).unwrap();
    ServerConfig::parse(
        &core,
        &format!("ek_hashes_path = \"{}\"\n{hcl}", path.display()),
    )
}

#[test]
fn measured_boot_is_off_by_default_and_adds_the_boot_pcrs() {
    let off = parse_hcl("quote_pcrs = [7, 11]").unwrap();
    assert_eq!(off.measured_boot, MeasuredBoot::Off);
    assert_eq!(off.quote_pcrs, vec![7, 11]);
    let on = parse_hcl("quote_pcrs = [7, 11]\nmeasured_boot = \"required\"").unwrap();
    assert_eq!(on.measured_boot, MeasuredBoot::Required);
    assert_eq!(on.measured_boot_bank, Bank::Sha256);
    assert_eq!(on.measured_boot_banks, [Bank::Sha256]);
    assert_eq!(on.quote_pcrs, vec![0, 1, 2, 3, 4, 5, 6, 7, 11]);
    assert!(
        on.notes()
            .iter()
            .any(|n| n.starts_with("measured boot required"))
    );
    let optional =
        parse_hcl("measured_boot = \"optional\"\nmeasured_boot_bank = \"sha256\"").unwrap();
    assert_eq!(optional.measured_boot, MeasuredBoot::Optional);
    assert_eq!(optional.quote_pcrs, vec![0, 1, 2, 3, 4, 5, 6, 7]);
}

#[test]
fn unknown_measured_boot_values_are_refused() {
    let error = parse_hcl("measured_boot = \"on\"").unwrap_err();
    assert!(error.0.starts_with("measured_boot is `on`"), "{error:?}");
    let error = parse_hcl("measured_boot_bank = \"sha1\"").unwrap_err();
    assert!(
        error.0.starts_with("measured_boot_bank is `sha1`"),
        "{error:?}"
    );
    let error = parse_hcl("measured_boot_banks = [\"sm3\"]").unwrap_err();
    assert!(
        error
            .0
            .starts_with("measured_boot_banks: `sm3` is not a bank"),
        "{error:?}"
    );
}

#[test]
fn required_banks_always_include_sha256() {
    let both = parse_hcl("measured_boot = \"required\"\nmeasured_boot_banks = [\"sha1\"]").unwrap();
    assert_eq!(both.measured_boot_banks, [Bank::Sha256, Bank::Sha1]);
    assert!(
        both.notes()
            .iter()
            .any(|n| n.contains("must declare sha256, sha1")),
        "{:?}",
        both.notes()
    );
    let repeated = parse_hcl("measured_boot_banks = [\"sha384\", \"sha256\", \"sha384\"]").unwrap();
    assert_eq!(repeated.measured_boot_banks, [Bank::Sha256, Bank::Sha384]);
}

#[test]
fn a_regular_file_is_read() {
    let dir = TempDir::new("sceau-spire-config");
    let path = dir.join("ek-hashes");
    std::fs::write(
        &path,
        format!("# nodes\n{HASH}\n\n{}  # upper\n", HASH.to_uppercase()),
    )
    .unwrap();
    let (result, _) = parse_with_hashes(&path);
    let config = result.unwrap();
    assert_eq!(config.ek_hashes, Some(HashSet::from([HASH.to_string()])));
    // At the limit exactly, the size passes (the content does not).
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(MAX_FILE_LEN).unwrap();
    let error = parse_with_hashes(&path).0.unwrap_err();
    assert!(
        error
            .0
            .ends_with("line 5: not a SHA-256 in hex (64 characters)"),
        "{error:?}"
    );
}
