//! `sceau-spire-agent`: the SPIRE agent's NodeAttestor plugin.

fn main() -> std::process::ExitCode {
    std::process::ExitCode::FAILURE
}
