//! `sceau-spire-agent`: the SPIRE agent's NodeAttestor plugin
//! (`NodeAttestor "sceau_tpm"` in agent.conf; docs/spire.md). It proves the
//! node's TPM to the server plugin.

use std::process::ExitCode;
use std::sync::Arc;

fn main() -> ExitCode {
    // tpm2-tss reads TSS2_LOG when it is first used; set it while the
    // process still has one thread.
    if let Err(error) = sceau_spire::agent::silence_tss_log() {
        eprintln!("sceau-spire-agent: {error}");
        return ExitCode::FAILURE;
    }
    sceau_spire::plugin::run(Arc::new(sceau_spire::agent::AgentPlugin::new()))
}
