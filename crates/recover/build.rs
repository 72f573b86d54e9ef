//! Records what `sceau-recover --version` reports: the git commit, profile
//! and features (`sceau_cli::build_script`).

fn main() {
    // What the binary is built from: a change re-runs this script, so that
    // the commit's `-dirty` mark stays true.
    sceau_cli::build_script::emit(&[
        "src",
        "build.rs",
        "Cargo.toml",
        "../cli/src",
        "../format/src",
        "../../Cargo.lock",
    ]);
}
