//! What every SPIRE plugin process serves besides its own API, following
//! hashicorp/go-plugin's protocol as SPIRE's host uses it
//! (../shared/notes/spire.md §1): the magic-cookie check, one handshake line
//! on stdout, a gRPC server on a unix socket with Init, Config, GRPCBroker,
//! GRPCController, GRPCStdio and health beside the plugin's own service,
//! hclog-style JSON logs on stderr, and a clean exit on Shutdown.
//!
//! A plugin implements [`Plugin`]; a binary's `main` calls [`run`], which
//! does the rest. Tests drive [`serve`] in-process on a [`PluginSocket`].
//!
//! - `handshake`: the cookie, the protocol version, the socket, the line;
//! - `services`: Init, Config, broker, controller, stdio, health, router;
//! - `serve`: the HTTP/2 server and its stop;
//! - `log`: hclog JSON lines on stderr;
//! - `hcl`: the configuration's HCL subset;
//! - `file`: files named by a configuration, read without blocking and bounded.

pub mod file;
pub mod handshake;
pub mod hcl;
pub mod log;
mod serve;
mod services;

use std::convert::Infallible;
use std::ffi::OsString;
use std::io::Write as _;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use tonic::body::Body;
use tonic::codegen::http;

pub use handshake::{HandshakeError, PluginSocket, SocketOptions};
pub use serve::{
    MAX_CONCURRENT_STREAMS, MAX_CONNECTIONS, SHUTDOWN_GRACE, ServeError, StopReason, serve,
};
pub use services::CONFIG_SERVICE_NAME;

/// The largest gRPC message a plugin process decodes. Our messages are at
/// most 16 KiB, but a challenge response with the firmware event log is at
/// most [`crate::payload::MAX_RESPONSE_LEN`] (272 KiB and 4 bytes); 16 KiB
/// more covers the protobuf framing of the request around it. The
/// plumbing's services use this limit, and a plugin's own service should
/// too:
/// `NodeAttestorServer::from_arc(self).max_decoding_message_size(MAX_MESSAGE_BYTES)`.
pub const MAX_MESSAGE_BYTES: usize = crate::payload::MAX_RESPONSE_LEN + 16 * 1024;

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

/// A setting's syntax or kind refused by the parser, so that a plugin's
/// `configure` can use `?` on [`hcl::Body`]'s methods.
impl From<hcl::HclError> for ConfigError {
    fn from(error: hcl::HclError) -> Self {
        ConfigError(error.to_string())
    }
}

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
    /// carries notes for the operator. Like `configure`, it runs on the
    /// runtime's blocking pool, so it may read files (or the TPM).
    fn validate(&self, core: &CoreConfig, hcl: &str) -> Result<Vec<String>, ConfigError>;
    /// Applies a configuration (Config.Configure). SPIRE calls it at load
    /// and again on reconfiguration; a refused configuration leaves the one
    /// before it in force.
    fn configure(&self, core: &CoreConfig, hcl: &str) -> Result<(), ConfigError>;
    /// The plugin service (the generated NodeAttestor server over `self`,
    /// with `max_decoding_message_size(MAX_MESSAGE_BYTES)`).
    fn service(self: Arc<Self>) -> Service;
}

/// The program's name for messages and the `@module` of its log lines,
/// from the service it serves.
pub fn program_name(service_name: &str) -> &'static str {
    if service_name == crate::pb::server_attestor::node_attestor_server::SERVICE_NAME {
        "sceau-spire-server"
    } else if service_name == crate::pb::agent_attestor::node_attestor_server::SERVICE_NAME {
        "sceau-spire-agent"
    } else {
        "sceau-spire"
    }
}

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invocation {
    /// No arguments: serve, as SPIRE starts the plugin.
    Serve,
    Help,
    Version,
    /// An argument the plugin does not take (from `plugin_args`, say).
    Unknown(OsString),
}

impl Invocation {
    /// Reads the arguments after the program name.
    pub fn from_args(mut args: impl Iterator<Item = OsString>) -> Self {
        match args.next() {
            None => Invocation::Serve,
            Some(arg) if arg == "--help" || arg == "-h" => Invocation::Help,
            Some(arg) if arg == "--version" || arg == "-V" => Invocation::Version,
            Some(arg) => Invocation::Unknown(arg),
        }
    }
}

/// The `--help` text.
pub fn help_text(program: &str) -> String {
    let side = match program {
        "sceau-spire-server" => "SPIRE server",
        "sceau-spire-agent" => "SPIRE agent",
        _ => "SPIRE",
    };
    format!(
        "{program} {version}: the {side}'s TPM NodeAttestor plugin from sceau.\n\
         SPIRE starts it: name this file in the `plugin_cmd` (and its SHA-256 in\n\
         `plugin_checksum`) of a `NodeAttestor` block; settings go in `plugin_data`.\n\
         See docs/spire.md. Options: --help, --version. Set SCEAU_SPIRE_LOG=debug\n\
         for debug logs.\n",
        version = env!("CARGO_PKG_VERSION")
    )
}

/// Runs a plugin process: the command line, the cookie, the protocol
/// version, the socket, the handshake line, then serving until the host's
/// Shutdown or SIGTERM. SIGINT is ignored, as go-plugin's own plugins do:
/// a Ctrl-C at a terminal reaches the host too, which then unloads its
/// plugins with Shutdown.
///
/// Exits 0 after a clean stop (and for `--help`/`--version`), 1 otherwise.
pub fn run<P: Plugin>(plugin: Arc<P>) -> ExitCode {
    let program = program_name(P::SERVICE_NAME);
    match Invocation::from_args(std::env::args_os().skip(1)) {
        Invocation::Help => return print_and_exit(&help_text(program)),
        Invocation::Version => {
            return print_and_exit(&format!("{program} {}\n", env!("CARGO_PKG_VERSION")));
        }
        Invocation::Serve | Invocation::Unknown(_) => {}
    }
    if !handshake::has_magic_cookie(std::env::var_os(handshake::MAGIC_COOKIE_KEY).as_deref()) {
        eprintln!(
            "{program}: this is a SPIRE plugin; SPIRE starts it from plugin_cmd, it is not meant to be run by hand"
        );
        return ExitCode::FAILURE;
    }
    // From here on the host reads stderr: every message is a log line,
    // panics included (the host would show a raw panic at debug level).
    log::install(program);
    std::panic::set_hook(Box::new(|panic| ::log::error!("internal error: {panic}")));
    if let Invocation::Unknown(arg) = Invocation::from_args(std::env::args_os().skip(1)) {
        ::log::error!(
            "{program} takes no arguments, but was given {arg:?}; remove plugin_args from its NodeAttestor block"
        );
        return ExitCode::FAILURE;
    }
    match serve_process(plugin) {
        Ok(reason) => {
            ::log::info!(
                "stopped ({})",
                match reason {
                    StopReason::Shutdown => "the host asked",
                    StopReason::Stopped => "SIGTERM",
                }
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            ::log::error!("{e}");
            ExitCode::FAILURE
        }
    }
}

fn print_and_exit(text: &str) -> ExitCode {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::FAILURE,
    }
}

/// Why a plugin process could not serve.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Handshake(#[from] HandshakeError),
    #[error(transparent)]
    Serve(#[from] ServeError),
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
    #[error("cannot watch for SIGTERM: {0}")]
    Signals(std::io::Error),
    #[error("cannot write the handshake line to stdout: {0}")]
    Stdout(std::io::Error),
    #[error("the server task failed: {0}")]
    Task(String),
}

/// The handshake and the server, on a current-thread runtime (whose
/// blocking pool runs the plugin's TPM calls and configuration checks).
fn serve_process<P: Plugin>(plugin: Arc<P>) -> Result<StopReason, RunError> {
    handshake::check_protocol_versions(
        std::env::var_os(handshake::PROTOCOL_VERSIONS_VARIABLE).as_deref(),
    )?;
    let options = SocketOptions::from_environment()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(RunError::Runtime)?;
    let result = runtime.block_on(async {
        let stop = stop_signals().map_err(RunError::Signals)?;
        let socket = PluginSocket::bind(&options)?;
        let line = handshake::handshake_line(socket.path())?;
        ::log::debug!("serving on {}", socket.path().display());
        let server = tokio::spawn(serve(plugin, socket, stop));
        // The socket listens since it was bound; one turn lets the server
        // reach its accept loop before the host is told where it is.
        tokio::task::yield_now().await;
        let mut out = std::io::stdout().lock();
        if let Err(e) = out.write_all(line.as_bytes()).and_then(|()| out.flush()) {
            server.abort();
            return Err(RunError::Stdout(e));
        }
        drop(out);
        match server.await {
            Ok(served) => Ok(served?),
            Err(e) => Err(RunError::Task(e.to_string())),
        }
    });
    // A TPM call stuck on the blocking pool must not hold the exit.
    runtime.shutdown_timeout(Duration::from_secs(1));
    result
}

/// Resolves at SIGTERM; SIGINT is noted and ignored (see [`run`]).
fn stop_signals() -> std::io::Result<impl std::future::Future<Output = ()> + Send + 'static> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    Ok(async move {
        loop {
            tokio::select! {
                _ = terminate.recv() => return,
                _ = interrupt.recv() => {
                    ::log::debug!("SIGINT ignored: the host stops the plugin with Shutdown");
                }
            }
        }
    })
}
