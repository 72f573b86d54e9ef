//! For the workspace's `build.rs` scripts, which take this crate as a
//! build-dependency: [`emit`] (the `sceau` and `sceau-recover` packages) sets
//! the variables [`build_info!`](crate::build_info!) reads, and, with the
//! `grpc-build` feature, `generate_grpc` (`sceau-kms-api`, `sceau-spire`)
//! generates gRPC bindings. The commit comes from git, or
//! from `$SCEAU_COMMIT` for a build outside git that knows its commit (a
//! packager's), else it is `unknown`: never a guess.
//! The date (for the man page) is `$SOURCE_DATE_EPOCH`'s, else the commit's.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Generates the messages, servers and clients of `protos` (paths relative
/// to the package, imports resolved under `include`) with protox, a
/// pure-Rust protobuf compiler, so that no build needs an installed `protoc`.
/// No `connect` constructor over tonic's Channel is made: the clients run
/// on sceau-rpc's own unix-socket connection.
#[cfg(feature = "grpc-build")]
pub fn generate_grpc(protos: &[&str], include: &str) -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed={include}");
    let descriptors = protox::compile(protos, [include])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .build_transport(false)
        .compile_fds(descriptors)?;
    Ok(())
}

/// Names the commit of a build outside git (`SCEAU_COMMIT=0123abcd cargo build`).
pub const COMMIT_ENV: &str = "SCEAU_COMMIT";

/// Prints the `cargo:` lines. `watch` lists the package's inputs (relative
/// to its manifest): a change there re-runs the build script, so that
/// `-dirty` follows the working tree and not only the commit.
pub fn emit(watch: &[&str]) {
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    println!("cargo:rerun-if-env-changed={COMMIT_ENV}");
    for path in watch {
        println!("cargo:rerun-if-changed={path}");
    }
    let commit = match std::env::var(COMMIT_ENV) {
        Ok(commit) if !commit.trim().is_empty() => commit.trim().to_string(),
        _ => git_commit(&manifest_dir).unwrap_or_else(|| "unknown".into()),
    };
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    let date = source_date()
        .or_else(|| git(&manifest_dir, &["log", "-1", "--format=%cs", "HEAD"]))
        .unwrap_or_default();
    println!("cargo:rustc-env=SCEAU_BUILD_DATE={date}");
    let profile = std::env::var("PROFILE").unwrap_or_else(|_| "unknown".into());
    // Cargo lists the enabled features, by their declared names.
    let features: Vec<String> = std::env::var("CARGO_CFG_FEATURE")
        .unwrap_or_default()
        .split(',')
        .filter(|f| !f.is_empty() && *f != "default")
        .map(String::from)
        .collect();
    println!("cargo:rustc-env=SCEAU_BUILD_COMMIT={commit}");
    println!("cargo:rustc-env=SCEAU_BUILD_PROFILE={profile}");
    println!(
        "cargo:rustc-env=SCEAU_BUILD_FEATURES={}",
        features.join(",")
    );
}

/// `$SOURCE_DATE_EPOCH` (reproducible builds) as `YYYY-MM-DD`, in UTC.
fn source_date() -> Option<String> {
    let seconds: i64 = std::env::var("SOURCE_DATE_EPOCH")
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let (year, month, day) = civil_from_days(seconds.div_euclid(86_400));
    Some(format!("{year:04}-{month:02}-{day:02}"))
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// `git` in `dir`, its output trimmed; `None` if git is missing or fails.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let output = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_string())
}

/// The short hash of HEAD, `-dirty` when tracked files differ from it.
/// Only when this package's own manifest is tracked: sources unpacked inside
/// some other repository are not that repository's commit.
fn git_commit(dir: &Path) -> Option<String> {
    git(dir, &["ls-files", "--error-unmatch", "Cargo.toml"])?;
    let hash = git(dir, &["rev-parse", "--short=12", "HEAD"])?;
    // No optional locks: reading the status must not rewrite the index.
    let changes = git(
        dir,
        &[
            "--no-optional-locks",
            "status",
            "--porcelain",
            "--untracked-files=no",
        ],
    )?;
    watch_git(dir);
    Some(if changes.is_empty() {
        hash
    } else {
        format!("{hash}-dirty")
    })
}

/// Re-run when HEAD moves: HEAD itself (another branch), the branch's ref
/// (a commit) and packed-refs. Works in a linked worktree too, where HEAD
/// and the refs live in different directories.
fn watch_git(dir: &Path) {
    let git_path = |name: &str| git(dir, &["rev-parse", "--git-path", name]).map(|p| dir.join(p));
    let mut paths: Vec<PathBuf> = ["HEAD", "packed-refs"]
        .into_iter()
        .filter_map(git_path)
        .collect();
    if let Some(branch) = git(dir, &["symbolic-ref", "-q", "HEAD"]).and_then(|r| git_path(&r)) {
        // A branch without a loose ref yet gets one at its next commit, in
        // this directory.
        match branch.exists() {
            true => paths.push(branch),
            false => paths.extend(branch.parent().map(Path::to_path_buf)),
        }
    }
    // A path that does not exist would re-run the script on every build.
    for path in paths.into_iter().filter(|p| p.exists()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}

#[cfg(test)]
mod tests {
    use super::civil_from_days;

    #[test]
    fn days_to_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(20_454), (2026, 1, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
    }
}
