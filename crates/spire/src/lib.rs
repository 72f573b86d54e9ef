//! sceau's SPIRE TPM node attestor: two go-plugin processes SPIRE loads with
//! `plugin_cmd`.
//!
//! - `plugin`: what any SPIRE plugin process serves besides its own API
//!   (the go-plugin handshake, Init, Config, the broker, the controller,
//!   health, hclog-style logs) and the HCL subset its configuration uses.
//! - `payload`: the attestation messages between the two plugins (the
//!   payload, the challenge, the response), as bounded binary records.
//! - `server`: the server plugin. It needs no TPM: it checks the EK (allow
//!   list, certificate chain, certificate key = EK key), the AK (a TPM
//!   creation attestation), makes a credential in software, checks the
//!   answer and the quote (and, with `measured_boot`, the firmware event
//!   log against it), and names the agent.
//! - `agent`: the agent plugin. It uses the node's TPM through the daemon's
//!   TPM layer (TCTI, SRK, salted sessions): EK and its certificate, an ECC AK
//!   certified by TPM2_CertifyCreation, TPM2_ActivateCredential, TPM2_Quote,
//!   and the firmware event log beside a quote of PCRs 0–7.
//!
//! docs/spire.md is the operator's guide; ARCHITECTURE.md places the crate.

pub mod agent;
pub mod payload;
pub mod plugin;
pub mod server;

/// Code generated from `proto/` (SPIRE, go-plugin and gRPC health APIs).
#[allow(clippy::all, missing_docs)]
pub mod pb {
    pub mod server_attestor {
        tonic::include_proto!("spire.plugin.server.nodeattestor.v1");
    }
    pub mod agent_attestor {
        tonic::include_proto!("spire.plugin.agent.nodeattestor.v1");
    }
    pub mod config {
        tonic::include_proto!("spire.service.common.config.v1");
    }
    pub mod init {
        tonic::include_proto!("spire.service.private.init.v1");
    }
    pub mod go_plugin {
        tonic::include_proto!("plugin");
    }
    pub mod health {
        tonic::include_proto!("grpc.health.v1");
    }
}
