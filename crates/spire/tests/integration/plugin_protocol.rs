//! The go-plugin and SPIRE plumbing as SPIRE's host sees it: gRPC calls over
//! HTTP/2 on the plugin's unix socket, made with the generated clients on a
//! plain h2 connection (support/mod.rs).
//!
//! In-process: `plugin::serve` with a small test plugin on a temporary
//! socket. Process-level: the `echo_attestor` example (a plugin binary
//! built on `plugin::run`), started as SPIRE starts a plugin, for the
//! cookie, the handshake line, stdout/stderr discipline, signals and exit;
//! and the two shipped binaries for the same handshake, Init and Shutdown.

use std::io::{BufRead as _, BufReader, Read as _};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sceau_rpc::client::{Bodies, Connection};
use sceau_spire::pb::agent_attestor::Challenge;
use sceau_spire::pb::agent_attestor::node_attestor_client::NodeAttestorClient as AgentAttestorClient;
use sceau_spire::pb::config::config_client::ConfigClient;
use sceau_spire::pb::config::{ConfigureRequest, CoreConfiguration, ValidateRequest};
use sceau_spire::pb::go_plugin::grpc_broker_client::GrpcBrokerClient;
use sceau_spire::pb::go_plugin::grpc_controller_client::GrpcControllerClient;
use sceau_spire::pb::go_plugin::grpc_stdio_client::GrpcStdioClient;
use sceau_spire::pb::go_plugin::{ConnInfo, Empty};
use sceau_spire::pb::health::HealthCheckRequest;
use sceau_spire::pb::health::health_check_response::ServingStatus;
use sceau_spire::pb::health::health_client::HealthClient;
use sceau_spire::pb::init::init_client::InitClient;
use sceau_spire::pb::init::{DeinitRequest, InitRequest};
use sceau_spire::pb::server_attestor::node_attestor_client::NodeAttestorClient;
use sceau_spire::pb::server_attestor::node_attestor_server::{NodeAttestor, NodeAttestorServer};
use sceau_spire::pb::server_attestor::{
    AgentAttributes, AttestRequest, AttestResponse, attest_request, attest_response,
};
use sceau_spire::plugin::hcl::Body;
use sceau_spire::plugin::{
    self, ConfigError, CoreConfig, MAX_MESSAGE_BYTES, Plugin, PluginSocket, Service, SocketOptions,
    StopReason,
};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::codegen::http::Uri;
use tonic::{Code, Request, Response, Status, Streaming};

const SERVER_ATTESTOR: &str = "spire.plugin.server.nodeattestor.v1.NodeAttestor";
const CONFIG: &str = "spire.service.common.config.v1.Config";
/// Far above any answer's time here: a call that reaches it is a hang.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// A server NodeAttestor that records its configurations and attests any
/// agent by echoing its payload.
#[derive(Default)]
struct TestAttestor {
    configured: Mutex<Vec<(String, String)>>,
}

impl TestAttestor {
    /// Accepts `greeting = "…"` only, and refuses an empty trust domain.
    fn check(core: &CoreConfig, hcl: &str) -> Result<Option<String>, ConfigError> {
        let refuse = |e: plugin::hcl::HclError| ConfigError(e.to_string());
        let body = Body::parse(hcl).map_err(refuse)?;
        body.check_keys(&["greeting"]).map_err(refuse)?;
        if core.trust_domain.is_empty() {
            return Err(ConfigError("the trust domain is empty".to_owned()));
        }
        body.string("greeting").map_err(refuse)
    }
}

impl Plugin for TestAttestor {
    const SERVICE_NAME: &'static str = SERVER_ATTESTOR;

    fn validate(&self, core: &CoreConfig, hcl: &str) -> Result<Vec<String>, ConfigError> {
        let greeting = Self::check(core, hcl)?;
        Ok(greeting
            .map(|g| vec![format!("greeting is {g:?}")])
            .unwrap_or_default())
    }

    fn configure(&self, core: &CoreConfig, hcl: &str) -> Result<(), ConfigError> {
        let greeting = Self::check(core, hcl)?.unwrap_or_default();
        self.configured
            .lock()
            .unwrap()
            .push((core.trust_domain.clone(), greeting));
        Ok(())
    }

    fn service(self: Arc<Self>) -> Service {
        Service::new(
            NodeAttestorServer::from_arc(self).max_decoding_message_size(MAX_MESSAGE_BYTES),
        )
    }
}

#[tonic::async_trait]
impl NodeAttestor for TestAttestor {
    type AttestStream = tokio_stream::Once<Result<AttestResponse, Status>>;

    async fn attest(
        &self,
        request: Request<Streaming<AttestRequest>>,
    ) -> Result<Response<Self::AttestStream>, Status> {
        let Some(AttestRequest {
            request: Some(attest_request::Request::Payload(payload)),
        }) = request.into_inner().message().await?
        else {
            return Err(Status::invalid_argument("expected a payload"));
        };
        let attributes = AgentAttributes {
            spiffe_id: format!(
                "spiffe://example.org/spire/agent/test/{}",
                String::from_utf8_lossy(&payload)
            ),
            selector_values: vec!["test:yes".to_owned()],
            can_reattest: true,
        };
        Ok(Response::new(tokio_stream::once(Ok(AttestResponse {
            response: Some(attest_response::Response::AgentAttributes(attributes)),
        }))))
    }
}

/// A temporary directory removed at the end of a test.
struct TempDir(PathBuf);

impl TempDir {
    fn new(what: &str) -> Self {
        let path = std::env::temp_dir().join(format!(
            "sceau-spire-{what}-{}-{:016x}",
            std::process::id(),
            rand_suffix()
        ));
        std::fs::create_dir(&path).unwrap();
        TempDir(path)
    }
}

fn rand_suffix() -> u64 {
    let mut bytes = [0u8; 8];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut bytes)
        .unwrap();
    u64::from_le_bytes(bytes)
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `serve` running on a fresh socket in its own directory.
struct Served {
    plugin: Arc<TestAttestor>,
    socket: PathBuf,
    stop: Option<oneshot::Sender<()>>,
    server: JoinHandle<Result<StopReason, plugin::ServeError>>,
    _dir: TempDir,
}

impl Served {
    /// Each configuration the plugin applied: (trust domain, greeting).
    fn configured(&self) -> Vec<(String, String)> {
        self.plugin.configured.lock().unwrap().clone()
    }
}

async fn start() -> Served {
    let dir = TempDir::new("test");
    let options = SocketOptions {
        dir: Some(dir.0.clone()),
        group: None,
    };
    let socket = PluginSocket::bind(&options).unwrap();
    let path = socket.path().to_owned();
    let plugin = Arc::new(TestAttestor::default());
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(plugin::serve(plugin.clone(), socket, async {
        let _ = stopped.await;
    }));
    Served {
        plugin,
        socket: path,
        stop: Some(stop),
        server,
        _dir: dir,
    }
}

/// The example plugin served, and the host's connection to it.
async fn start_connected() -> (Served, Connection) {
    let served = start().await;
    let connection = connect(&served.socket).await;
    (served, connection)
}

/// An HTTP/2 connection to the plugin, as the host holds one: a request's
/// body goes out while its answer comes in, as grpc-go sends (the broker
/// stream's request side never ends while the host runs).
async fn connect(socket: &Path) -> Connection {
    tokio::time::timeout(CALL_TIMEOUT, open(socket))
        .await
        .expect("connecting hung")
        .unwrap_or_else(|e| panic!("connect to {}: {e}", socket.display()))
}

async fn open(socket: &Path) -> Result<Connection, sceau_rpc::client::ConnectError> {
    sceau_rpc::client::open(socket, Bodies::AlongsideTheAnswer).await
}

fn origin() -> Uri {
    Uri::from_static("http://plugin")
}

async fn bounded<T>(call: impl Future<Output = Result<Response<T>, Status>>) -> Result<T, Status> {
    tokio::time::timeout(CALL_TIMEOUT, call)
        .await
        .expect("the call hung")
        .map(Response::into_inner)
}

fn core(trust_domain: &str) -> Option<CoreConfiguration> {
    Some(CoreConfiguration {
        trust_domain: trust_domain.to_owned(),
    })
}

/// Configure with plugin data `hcl`, for the trust domain example.org.
fn configure_request(hcl: impl Into<String>) -> ConfigureRequest {
    ConfigureRequest {
        core_configuration: core("example.org"),
        hcl_configuration: hcl.into(),
    }
}

/// Validate of plugin data `hcl`, for the trust domain example.org.
fn validate_request(hcl: impl Into<String>) -> ValidateRequest {
    ValidateRequest {
        core_configuration: core("example.org"),
        hcl_configuration: hcl.into(),
    }
}

/// Calls Shutdown and expects `serve` to end with the socket removed.
async fn shut_down(served: Served, connection: &Connection) {
    let mut controller = GrpcControllerClient::with_origin(connection.clone(), origin());
    bounded(controller.shutdown(Empty {})).await.unwrap();
    let reason = tokio::time::timeout(CALL_TIMEOUT, served.server)
        .await
        .expect("serve did not end after Shutdown")
        .unwrap()
        .unwrap();
    assert_eq!(reason, StopReason::Shutdown);
    assert!(!served.socket.exists(), "the socket file is left behind");
    drop(served.stop);
}

#[tokio::test]
async fn init_lists_the_plugin_service_then_config() {
    let (served, connection) = start_connected().await;
    let mut init = InitClient::with_origin(connection.clone(), origin());
    let answer = bounded(init.init(InitRequest {
        host_service_names: vec![
            "spire.hostservice.server.agentstore.v1.AgentStore".to_owned(),
            "spire.hostservice.common.metrics.v1.Metrics".to_owned(),
        ],
    }))
    .await
    .unwrap();
    assert_eq!(answer.plugin_service_names, [SERVER_ATTESTOR, CONFIG]);
    bounded(init.deinit(DeinitRequest {})).await.unwrap();
    shut_down(served, &connection).await;
}

#[tokio::test]
async fn configure_applies_reconfigures_and_refuses_with_invalid_argument() {
    let (served, connection) = start_connected().await;
    let mut config = ConfigClient::with_origin(connection.clone(), origin());
    // An absent plugin_data arrives as "".
    bounded(config.configure(configure_request("")))
        .await
        .unwrap();
    bounded(config.configure(configure_request("greeting = \"hello\"\n")))
        .await
        .unwrap();
    let refused = bounded(config.configure(configure_request("greting = \"hello\"\n")))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
    assert_eq!(
        refused.message(),
        "unknown setting `greting`; known settings: greeting"
    );
    let refused = bounded(config.configure(ConfigureRequest {
        core_configuration: None,
        hcl_configuration: String::new(),
    }))
    .await
    .unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
    assert_eq!(refused.message(), "the trust domain is empty");
    assert_eq!(
        served.configured(),
        [
            ("example.org".to_owned(), String::new()),
            ("example.org".to_owned(), "hello".to_owned())
        ]
    );
    shut_down(served, &connection).await;
}

#[tokio::test]
async fn validate_reports_notes_or_the_refusal() {
    let (served, connection) = start_connected().await;
    let mut config = ConfigClient::with_origin(connection.clone(), origin());
    let valid = bounded(config.validate(validate_request("greeting = \"hi\"")))
        .await
        .unwrap();
    assert!(valid.valid);
    assert_eq!(valid.notes, ["greeting is \"hi\""]);
    let invalid = bounded(config.validate(validate_request("greeting {\n}")))
        .await
        .unwrap();
    assert!(!invalid.valid);
    assert_eq!(
        invalid.notes,
        [
            "plugin data, line 1: `greeting` is a block; this plugin takes only `key = value` settings"
        ]
    );
    // Validation applies nothing.
    assert_eq!(served.configured(), []);
    shut_down(served, &connection).await;
}

#[tokio::test]
async fn an_oversized_message_is_refused() {
    let (served, connection) = start_connected().await;
    let mut config = ConfigClient::with_origin(connection.clone(), origin());
    let refused = bounded(config.configure(configure_request(format!(
        "greeting = \"{}\"",
        "x".repeat(MAX_MESSAGE_BYTES)
    ))))
    .await
    .unwrap_err();
    assert_eq!(refused.code(), Code::OutOfRange, "{refused:?}");
    assert_eq!(served.configured(), []);
    shut_down(served, &connection).await;
}

#[tokio::test]
async fn the_plugin_service_is_served() {
    let (served, connection) = start_connected().await;
    let mut attestor = NodeAttestorClient::with_origin(connection.clone(), origin());
    let requests = tokio_stream::iter([AttestRequest {
        request: Some(attest_request::Request::Payload(b"node-1".to_vec())),
    }]);
    let mut answers = bounded(attestor.attest(requests)).await.unwrap();
    let answer = tokio::time::timeout(CALL_TIMEOUT, answers.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let Some(attest_response::Response::AgentAttributes(attributes)) = answer.response else {
        panic!("expected agent attributes, got {answer:?}");
    };
    assert_eq!(
        attributes.spiffe_id,
        "spiffe://example.org/spire/agent/test/node-1"
    );
    shut_down(served, &connection).await;
}

#[tokio::test]
async fn an_unknown_service_is_unimplemented() {
    let (served, connection) = start_connected().await;
    // The agent side's service, which a server plugin does not serve.
    let mut other = AgentAttestorClient::with_origin(connection.clone(), origin());
    let refused =
        bounded(other.aid_attestation(tokio_stream::iter([Challenge { challenge: vec![1] }])))
            .await
            .unwrap_err();
    assert_eq!(refused.code(), Code::Unimplemented, "{refused:?}");
    // The connection still serves.
    let mut health = HealthClient::with_origin(connection.clone(), origin());
    bounded(health.check(HealthCheckRequest {
        service: "plugin".to_owned(),
    }))
    .await
    .unwrap();
    shut_down(served, &connection).await;
}

#[tokio::test]
async fn health_is_serving_for_plugin_and_the_server() {
    let (served, connection) = start_connected().await;
    let mut health = HealthClient::with_origin(connection.clone(), origin());
    for service in ["plugin", "", SERVER_ATTESTOR] {
        let answer = bounded(health.check(HealthCheckRequest {
            service: service.to_owned(),
        }))
        .await
        .unwrap();
        assert_eq!(answer.status(), ServingStatus::Serving, "{service:?}");
    }
    let unknown = bounded(health.check(HealthCheckRequest {
        service: "other".to_owned(),
    }))
    .await
    .unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound);
    let mut watch = bounded(health.watch(HealthCheckRequest {
        service: "plugin".to_owned(),
    }))
    .await
    .unwrap();
    let first = watch.message().await.unwrap().unwrap();
    assert_eq!(first.status(), ServingStatus::Serving);
    assert!(
        tokio::time::timeout(Duration::from_millis(300), watch.message())
            .await
            .is_err(),
        "the watch ended or sent more"
    );
    shut_down(served, &connection).await;
    // The watch ends with the server.
    let end = tokio::time::timeout(CALL_TIMEOUT, watch.message()).await;
    assert!(matches!(end, Ok(Ok(None))), "{end:?}");
}

#[tokio::test]
async fn the_broker_and_stdio_streams_stay_open_until_shutdown() {
    let (served, connection) = start_connected().await;
    // The host's side of the broker stream: the address of its host
    // services, then nothing, with the stream kept open.
    let (offers, offered) = tokio::sync::mpsc::channel(4);
    offers
        .send(ConnInfo {
            service_id: 1,
            network: "unix".to_owned(),
            address: "/tmp/plugin-host-services".to_owned(),
            knock: None,
        })
        .await
        .unwrap();
    let mut broker = GrpcBrokerClient::with_origin(connection.clone(), origin());
    let mut from_broker =
        bounded(broker.start_stream(tokio_stream::wrappers::ReceiverStream::new(offered)))
            .await
            .unwrap();
    let mut stdio = GrpcStdioClient::with_origin(connection.clone(), origin());
    let mut from_stdio = bounded(stdio.stream_stdio(Empty {})).await.unwrap();
    let waited = tokio::time::timeout(Duration::from_secs(1), async {
        tokio::select! {
            received = from_broker.message() => format!("broker: {received:?}"),
            received = from_stdio.message() => format!("stdio: {received:?}"),
        }
    })
    .await;
    assert!(
        waited.is_err(),
        "a stream ended or sent early: {}",
        waited.unwrap()
    );
    // Other calls go on beside the open streams.
    let mut init = InitClient::with_origin(connection.clone(), origin());
    bounded(init.init(InitRequest::default())).await.unwrap();
    shut_down(served, &connection).await;
    for (what, end) in [
        (
            "broker",
            tokio::time::timeout(CALL_TIMEOUT, from_broker.message())
                .await
                .map(|r| r.map(|m| m.is_none())),
        ),
        (
            "stdio",
            tokio::time::timeout(CALL_TIMEOUT, from_stdio.message())
                .await
                .map(|r| r.map(|m| m.is_none())),
        ),
    ] {
        assert!(matches!(end, Ok(Ok(true))), "{what}: {end:?}");
    }
    drop(offers);
}

#[tokio::test]
async fn connections_beyond_the_limit_are_closed() {
    let served = start().await;
    let check = |connection: &Connection| {
        let mut health = HealthClient::with_origin(connection.clone(), origin());
        async move {
            tokio::time::timeout(
                CALL_TIMEOUT,
                health.check(HealthCheckRequest {
                    service: "plugin".to_owned(),
                }),
            )
            .await
            .expect("the call hung")
        }
    };
    let mut held = Vec::new();
    for _ in 0..plugin::MAX_CONNECTIONS {
        let connection = connect(&served.socket).await;
        check(&connection).await.unwrap();
        held.push(connection);
    }
    let extra = connect(&served.socket).await;
    assert!(
        check(&extra).await.is_err(),
        "a connection beyond the limit was served"
    );
    // Once one closes, a new one is served again.
    drop(held.pop());
    let deadline = Instant::now() + CALL_TIMEOUT;
    loop {
        let again = connect(&served.socket).await;
        if check(&again).await.is_ok() {
            held.push(again);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no connection is served after one closed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    shut_down(served, &held[0]).await;
}

#[tokio::test]
async fn the_stop_future_ends_serving_and_removes_the_socket() {
    let mut served = start().await;
    let connection = connect(&served.socket).await;
    let mut init = InitClient::with_origin(connection.clone(), origin());
    bounded(init.init(InitRequest::default())).await.unwrap();
    served.stop.take().unwrap().send(()).unwrap();
    let reason = tokio::time::timeout(CALL_TIMEOUT, served.server)
        .await
        .expect("serve did not end")
        .unwrap()
        .unwrap();
    assert_eq!(reason, StopReason::Stopped);
    assert!(!served.socket.exists());
    // New connections are refused.
    assert!(open(&served.socket).await.is_err());
}

#[tokio::test]
async fn a_private_socket_and_its_directory_are_removed_at_the_end() {
    let socket = PluginSocket::bind(&SocketOptions::default()).unwrap();
    let path = socket.path().to_owned();
    let dir = path.parent().unwrap().to_owned();
    assert_eq!(
        std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
        0o700
    );
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let plugin = Arc::new(TestAttestor::default());
    let server = tokio::spawn(plugin::serve(plugin, socket, std::future::pending()));
    let connection = connect(&path).await;
    let mut controller = GrpcControllerClient::with_origin(connection, origin());
    bounded(controller.shutdown(Empty {})).await.unwrap();
    let reason = tokio::time::timeout(CALL_TIMEOUT, server)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(reason, StopReason::Shutdown);
    assert!(
        !path.exists() && !dir.exists(),
        "{} is left behind",
        dir.display()
    );
}

// --- The plugin as a process -------------------------------------------

/// The example plugin binary, which `cargo test` builds with the tests.
fn example_plugin() -> PathBuf {
    let deps = std::env::current_exe().unwrap();
    let path = deps
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .join("examples")
        .join("echo_attestor");
    assert!(
        path.exists(),
        "{} is missing: run `cargo test -p sceau-spire` (which builds the examples) or `cargo build -p sceau-spire --example echo_attestor`",
        path.display()
    );
    path
}

/// A command with none of the go-plugin variables the test's own
/// environment might carry.
fn plugin_command() -> Command {
    command_for(&example_plugin())
}

fn command_for(program: &Path) -> Command {
    let mut command = Command::new(program);
    for variable in [
        "NodeAttestor",
        "PLUGIN_PROTOCOL_VERSIONS",
        "PLUGIN_UNIX_SOCKET_DIR",
        "PLUGIN_UNIX_SOCKET_GROUP",
        "SCEAU_SPIRE_LOG",
    ] {
        command.env_remove(variable);
    }
    command.stdin(Stdio::null());
    command
}

/// Runs `program` as SPIRE runs a plugin: the handshake, Init (which must
/// name `service` and Config), `calls` on the connection, then Shutdown.
/// The process must exit 0, remove its socket and write nothing on stdout
/// after the handshake line. Returns what it wrote on stderr.
fn run_as_spire<Calls, Done>(program: &Path, service: &str, calls: Calls) -> String
where
    Calls: FnOnce(Connection) -> Done,
    Done: std::future::Future<Output = ()>,
{
    let name = program.display();
    let dir = TempDir::new("process");
    let mut child = spawn_program_as_spire(program, &dir.0);
    let (line, mut stdout) = handshake_line(&mut child);
    let socket = socket_of(&line, &dir.0);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let connection = connect(&socket).await;
        let mut init = InitClient::with_origin(connection.clone(), origin());
        let names = bounded(init.init(InitRequest::default())).await.unwrap();
        assert_eq!(names.plugin_service_names, [service, CONFIG], "{name}");
        calls(connection.clone()).await;
        let mut controller = GrpcControllerClient::with_origin(connection, origin());
        bounded(controller.shutdown(Empty {})).await.unwrap();
    });
    assert_eq!(wait_exit(&mut child).code(), Some(0), "{name}");
    assert!(!socket.exists(), "{name} left its socket behind");
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    assert_eq!(
        rest, "",
        "{name} wrote more than the handshake line on stdout"
    );
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    stderr
}

/// Starts the example plugin as SPIRE does.
fn spawn_as_spire(socket_dir: &Path) -> Child {
    spawn_program_as_spire(&example_plugin(), socket_dir)
}

fn spawn_program_as_spire(program: &Path, socket_dir: &Path) -> Child {
    command_for(program)
        .env("NodeAttestor", "NodeAttestor")
        .env("PLUGIN_PROTOCOL_VERSIONS", "1")
        .env("PLUGIN_UNIX_SOCKET_DIR", socket_dir)
        .env("SCEAU_SPIRE_LOG", "debug")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Reads the handshake line (in a thread, bounded in time).
fn handshake_line(child: &mut Child) -> (String, BufReader<std::process::ChildStdout>) {
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let read = stdout.read_line(&mut line).map(|_| line);
        let _ = sender.send((read, stdout));
    });
    let (line, stdout) = receiver
        .recv_timeout(CALL_TIMEOUT)
        .expect("no handshake line in time");
    (line.unwrap(), stdout)
}

fn wait_exit(child: &mut Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + CALL_TIMEOUT;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the plugin did not exit");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every stderr line is an hclog JSON object with string fields, from the
/// example plugin.
fn check_log_lines(stderr: &str) -> Vec<(String, String)> {
    check_log_lines_of(stderr, "sceau-spire-server")
}

fn check_log_lines_of(stderr: &str, module: &str) -> Vec<(String, String)> {
    stderr
        .lines()
        .map(|line| {
            let body = Body::parse(line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
            for field in ["@level", "@message", "@module", "@timestamp"] {
                assert!(
                    body.string(field).unwrap().is_some(),
                    "{line:?} lacks {field}"
                );
            }
            assert_eq!(body.string("@module").unwrap().unwrap(), module);
            (
                body.string("@level").unwrap().unwrap(),
                body.string("@message").unwrap().unwrap(),
            )
        })
        .collect()
}

fn socket_of(line: &str, dir: &Path) -> PathBuf {
    let fields: Vec<&str> = line.trim_end_matches('\n').split('|').collect();
    assert_eq!(fields.len(), 6, "{line:?}");
    assert_eq!(&fields[..3], ["1", "1", "unix"], "{line:?}");
    assert_eq!(&fields[4..], ["grpc", ""], "{line:?}");
    assert!(line.ends_with('\n'));
    let socket = PathBuf::from(fields[3]);
    assert_eq!(socket.parent(), Some(dir), "{line:?}");
    assert_eq!(
        std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777,
        0o600
    );
    socket
}

#[test]
fn without_the_cookie_the_plugin_says_what_it_is_and_exits_1() {
    let output = plugin_command().output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(output.stdout.is_empty());
    assert_eq!(
        String::from_utf8(output.stderr).unwrap(),
        "sceau-spire-server: this is a SPIRE plugin; SPIRE starts it from plugin_cmd, it is not meant to be run by hand\n"
    );
    let output = plugin_command()
        .env("NodeAttestor", "KeyManager")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(output.stdout.is_empty());
}

#[test]
fn version_and_help_need_no_cookie() {
    let output = plugin_command().arg("--version").output().unwrap();
    assert!(output.status.success());
    let version = String::from_utf8(output.stdout).unwrap();
    assert!(version.starts_with("sceau-spire-server "), "{version:?}");
    let output = plugin_command().arg("--help").output().unwrap();
    assert!(output.status.success());
    assert!(
        String::from_utf8(output.stdout)
            .unwrap()
            .contains("plugin_cmd")
    );
}

#[test]
fn a_host_without_protocol_1_or_with_arguments_is_refused_in_a_log_line() {
    for (versions, argument, expected) in [
        ("2,3", None, "plugin protocol versions \"2,3\""),
        ("1", Some("--socket"), "takes no arguments"),
    ] {
        let mut command = plugin_command();
        command
            .env("NodeAttestor", "NodeAttestor")
            .env("PLUGIN_PROTOCOL_VERSIONS", versions);
        command.args(argument);
        let output = command.output().unwrap();
        assert_eq!(output.status.code(), Some(1));
        assert!(output.stdout.is_empty(), "stdout: {:?}", output.stdout);
        let lines = check_log_lines(&String::from_utf8(output.stderr).unwrap());
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert_eq!(lines[0].0, "error");
        assert!(lines[0].1.contains(expected), "{lines:?}");
    }
}

#[test]
fn the_plugin_process_handshakes_serves_and_exits_0_on_shutdown() {
    let stderr = run_as_spire(
        &example_plugin(),
        SERVER_ATTESTOR,
        |connection| async move {
            let mut config = ConfigClient::with_origin(connection, origin());
            bounded(config.configure(configure_request("note = \"x\"")))
                .await
                .unwrap();
        },
    );
    let lines = check_log_lines(&stderr);
    let messages: Vec<&str> = lines.iter().map(|(_, m)| m.as_str()).collect();
    assert!(
        messages.iter().any(|m| m.starts_with("configured")),
        "{messages:?}"
    );
    assert!(
        messages.contains(&"the host asked the plugin to stop"),
        "{messages:?}"
    );
}

#[test]
fn sigterm_stops_the_plugin_cleanly_and_sigint_is_ignored() {
    let dir = TempDir::new("signals");
    let mut child = spawn_as_spire(&dir.0);
    let (line, _stdout) = handshake_line(&mut child);
    let socket = socket_of(&line, &dir.0);
    let pid = child.id();
    let signal = |name: &str| {
        let status = Command::new("kill")
            .args([format!("-{name}"), pid.to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    };
    signal("INT");
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        child.try_wait().unwrap().is_none(),
        "SIGINT stopped the plugin"
    );
    assert!(socket.exists());
    signal("TERM");
    let status = wait_exit(&mut child);
    assert_eq!(status.code(), Some(0));
    assert!(!socket.exists(), "the socket is left behind");
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let lines = check_log_lines(&stderr);
    assert!(
        lines.iter().any(|(_, m)| m == "stopped (SIGTERM)"),
        "{lines:?}"
    );
}

/// The shipped binaries, as SPIRE starts them: each refuses to run by hand,
/// and with the cookie prints the handshake line, lists its own service
/// and Config in Init, is healthy, and exits 0 on Shutdown with its socket
/// removed. (No TPM is needed for these calls.)
#[test]
fn the_shipped_binaries_load_as_spire_plugins() {
    for (program, service) in [
        (
            Path::new(env!("CARGO_BIN_EXE_sceau-spire-server")),
            SERVER_ATTESTOR,
        ),
        (
            Path::new(env!("CARGO_BIN_EXE_sceau-spire-agent")),
            "spire.plugin.agent.nodeattestor.v1.NodeAttestor",
        ),
    ] {
        let name = program.file_name().unwrap().to_str().unwrap();
        let output = command_for(program).output().unwrap();
        assert_eq!(output.status.code(), Some(1), "{name}");
        assert!(output.stdout.is_empty(), "{name}");
        assert_eq!(
            String::from_utf8(output.stderr).unwrap(),
            format!(
                "{name}: this is a SPIRE plugin; SPIRE starts it from plugin_cmd, it is not meant to be run by hand\n"
            )
        );
        let output = command_for(program).arg("--version").output().unwrap();
        assert!(output.status.success(), "{name}");
        assert!(
            String::from_utf8(output.stdout)
                .unwrap()
                .starts_with(&format!("{name} "))
        );

        let stderr = run_as_spire(program, service, |connection| async move {
            let mut health = HealthClient::with_origin(connection, origin());
            let status = bounded(health.check(HealthCheckRequest {
                service: "plugin".to_owned(),
            }))
            .await
            .unwrap();
            assert_eq!(status.status(), ServingStatus::Serving);
        });
        let lines = check_log_lines_of(&stderr, name);
        assert!(
            lines.iter().any(|(_, m)| m == "stopped (the host asked)"),
            "{name}: {lines:?}"
        );
    }
}
