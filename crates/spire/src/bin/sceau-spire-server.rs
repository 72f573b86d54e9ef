//! `sceau-spire-server`: the SPIRE server's NodeAttestor plugin.

fn main() -> std::process::ExitCode {
    std::process::ExitCode::FAILURE
}
