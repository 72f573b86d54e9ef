//! Records what `sceau --version` reports (src/build_info.rs): the git
//! commit, profile and features (`sceau_cli::build_script`), and the
//! tss2-esys version pkg-config finds, the same lookup tss-esapi-sys links by.
//! (The KMS v2 bindings are generated in `crates/kms-api`.)

use std::process::Command;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // What the binary is built from: a change re-runs this script, so that
    // the commit's `-dirty` mark stays true.
    sceau_cli::build_script::emit(&[
        "src",
        "proto",
        "crates/cli/src",
        "crates/format/src",
        "crates/kms-api/src",
        "crates/rpc/src",
        "crates/sys/src",
        "crates/tpm/src",
        "Cargo.toml",
        "Cargo.lock",
    ]);
    println!(
        "cargo:rustc-env=SCEAU_BUILD_TPM2_TSS={}",
        pkg_config_version("tss2-esys")
    );
    Ok(())
}

/// `pkg-config --modversion NAME`, else `unknown`; re-run when the `.pc`
/// file or pkg-config's search path changes (a new libtss2-dev).
fn pkg_config_version(name: &str) -> String {
    for variable in [
        "PKG_CONFIG_PATH",
        "PKG_CONFIG_LIBDIR",
        "PKG_CONFIG_SYSROOT_DIR",
    ] {
        println!("cargo:rerun-if-env-changed={variable}");
    }
    let pkg_config = |args: &[&str]| {
        Command::new("pkg-config")
            .args(args)
            .arg(name)
            .output()
            .ok()
            .filter(|out| out.status.success())
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    if let Some(dir) = pkg_config(&["--variable=pcfiledir"]) {
        println!("cargo:rerun-if-changed={dir}/{name}.pc");
    }
    pkg_config(&["--modversion"]).unwrap_or_else(|| "unknown".into())
}
