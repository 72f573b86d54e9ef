//! What every SPIRE plugin process serves besides its own API, following
//! hashicorp/go-plugin's protocol as SPIRE's host uses it
//! (../shared/notes/spire.md §1): the magic-cookie check, one handshake line
//! on stdout, a gRPC server on a unix socket with Init, Config, GRPCBroker,
//! GRPCController, GRPCStdio and health beside the plugin's own service,
//! hclog-style JSON logs on stderr, and a clean exit on Shutdown.
//!
//! A plugin implements [`Plugin`]; [`run`] does the rest.

pub mod hcl;

use std::convert::Infallible;
use std::sync::Arc;

use tonic::body::Body;
use tonic::codegen::http;

/// What SPIRE's host tells every plugin in Configure and Validate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CoreConfig {
    /// The bare trust domain name, for example `example.org`.
    pub trust_domain: String,
}

/// A configuration the plugin refused: one line saying what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// The plugin's own service, as the router serves it.
pub type Service = tower::util::BoxCloneSyncService<
    http::Request<hyper::body::Incoming>,
    http::Response<Body>,
    Infallible,
>;

/// One SPIRE plugin: its service and its configuration.
pub trait Plugin: Send + Sync + 'static {
    /// The full gRPC name of the plugin service, which Init reports first.
    const SERVICE_NAME: &'static str;
    /// Checks a configuration without applying it (Config.Validate); `Ok`
    /// carries notes for the operator.
    fn validate(&self, core: &CoreConfig, hcl: &str) -> Result<Vec<String>, ConfigError>;
    /// Applies a configuration (Config.Configure). SPIRE calls it at load
    /// and again on reconfiguration; a refused configuration leaves the one
    /// before it in force.
    fn configure(&self, core: &CoreConfig, hcl: &str) -> Result<(), ConfigError>;
    /// The plugin service (the generated NodeAttestor server over `self`).
    fn service(self: Arc<Self>) -> Service;
}
