//! Generates the KMS v2 gRPC bindings with protox, a pure-Rust protobuf
//! compiler, so that building sceau never needs an installed `protoc`; and
//! records what `sceau --version` reports (src/build_info.rs): the git
//! commit, profile and features (`sceau_cli::build_script`), and the
//! tss2-esys version pkg-config finds, the same lookup tss-esapi-sys links by.

use std::process::Command;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // What the binary is built from: a change re-runs this script, so that
    // the commit's `-dirty` mark stays true.
    sceau_cli::build_script::emit(&[
        "src",
        "proto",
        "crates/cli/src",
        "crates/format/src",
        "Cargo.toml",
        "Cargo.lock",
    ]);
    println!(
        "cargo:rustc-env=SCEAU_BUILD_TPM2_TSS={}",
        pkg_config_version("tss2-esys")
    );
    let proto = "proto/kms/v2/api.proto";
    println!("cargo:rerun-if-changed={proto}");
    let descriptors = protox::compile([proto], ["proto"])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // No `connect` constructor over tonic's Channel: the client in
        // src/client.rs brings its own connection.
        .build_transport(false)
        .compile_fds(descriptors)?;
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
