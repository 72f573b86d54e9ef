//! `sceau-spire-server`: the SPIRE server's NodeAttestor plugin
//! (`NodeAttestor "sceau_tpm"` in server.conf; docs/spire.md). It verifies
//! agents' TPMs in software and needs no TPM of its own.

use std::process::ExitCode;
use std::sync::Arc;

fn main() -> ExitCode {
    sceau_spire::plugin::run(Arc::new(sceau_spire::server::ServerPlugin::default()))
}
