//! The services every plugin process serves besides its own (Init, Config,
//! go-plugin's broker, controller and stdio, gRPC health), and the router
//! that puts them and the plugin's service on one HTTP/2 server by the
//! service name in the gRPC path.
//!
//! What SPIRE's host expects of each is in ../shared/notes/spire.md §1.5-1.7;
//! the comments below say where an answer matters.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use hyper::body::Incoming;
use tokio::sync::watch;
use tokio_stream::Stream;
use tonic::body::Body;
use tonic::codegen::http;
use tonic::{Request, Response, Status, Streaming};
use tower::ServiceExt as _;

use super::{CoreConfig, MAX_MESSAGE_BYTES, Plugin, Service};
use crate::pb::config::config_server::{Config, ConfigServer};
use crate::pb::config::{
    ConfigureRequest, ConfigureResponse, CoreConfiguration, ValidateRequest, ValidateResponse,
};
use crate::pb::go_plugin::grpc_broker_server::{GrpcBroker, GrpcBrokerServer};
use crate::pb::go_plugin::grpc_controller_server::{GrpcController, GrpcControllerServer};
use crate::pb::go_plugin::grpc_stdio_server::{GrpcStdio, GrpcStdioServer};
use crate::pb::go_plugin::{ConnInfo, Empty, StdioData};
use crate::pb::health::health_check_response::ServingStatus;
use crate::pb::health::health_server::{Health, HealthServer};
use crate::pb::health::{HealthCheckRequest, HealthCheckResponse};
use crate::pb::init::init_server::{Init, InitServer};
use crate::pb::init::{DeinitRequest, DeinitResponse, InitRequest, InitResponse};

/// The full gRPC name of SPIRE's Config service, which Init lists second.
pub const CONFIG_SERVICE_NAME: &str = crate::pb::config::config_server::SERVICE_NAME;

/// The stop signal shared by the server and its long-lived streams: the
/// controller's Shutdown or the process's own stop sets it; the broker,
/// stdio and health-watch streams end when it is set, so that a graceful
/// drain does not wait for the host to close them.
#[derive(Clone, Debug)]
pub(crate) struct Stop(Arc<watch::Sender<bool>>);

impl Stop {
    pub(crate) fn new() -> Self {
        Stop(Arc::new(watch::Sender::new(false)))
    }

    pub(crate) fn trigger(&self) {
        self.0.send_replace(true);
    }

    pub(crate) fn is_set(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once the stop is set (at once if it already is).
    pub(crate) fn stopped(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut watching = self.0.subscribe();
        async move {
            // The sender lives in `self`'s Arc, held by the server for as
            // long as anything waits; an error would mean it is gone, which
            // is a stop as well.
            let _ = watching.wait_for(|stopped| *stopped).await;
        }
    }
}

/// What the services share: the plugin, the stop signal, and what the host
/// told us.
struct Shared<P> {
    plugin: Arc<P>,
    stop: Stop,
    /// The host services SPIRE offered in Init. No plugin uses one today
    /// (one would dial the address the broker stream gives for service id
    /// 1); they are kept for the logs.
    host_services: Mutex<Vec<String>>,
}

/// The router serving `plugin`'s service and the plumbing beside it.
pub(crate) fn router<P: Plugin>(plugin: Arc<P>, stop: Stop) -> Router {
    let shared = Arc::new(Shared {
        plugin: plugin.clone(),
        stop,
        host_services: Mutex::new(Vec::new()),
    });
    let routes: Vec<(&'static str, Service)> = vec![
        (P::SERVICE_NAME, plugin.service()),
        (
            crate::pb::init::init_server::SERVICE_NAME,
            boxed(
                InitServer::new(InitService(shared.clone()))
                    .max_decoding_message_size(MAX_MESSAGE_BYTES),
            ),
        ),
        (
            CONFIG_SERVICE_NAME,
            boxed(
                ConfigServer::new(ConfigService(shared.clone()))
                    .max_decoding_message_size(MAX_MESSAGE_BYTES),
            ),
        ),
        (
            crate::pb::go_plugin::grpc_broker_server::SERVICE_NAME,
            boxed(
                GrpcBrokerServer::new(BrokerService(shared.clone()))
                    .max_decoding_message_size(MAX_MESSAGE_BYTES),
            ),
        ),
        (
            crate::pb::go_plugin::grpc_controller_server::SERVICE_NAME,
            boxed(
                GrpcControllerServer::new(ControllerService(shared.clone()))
                    .max_decoding_message_size(MAX_MESSAGE_BYTES),
            ),
        ),
        (
            crate::pb::go_plugin::grpc_stdio_server::SERVICE_NAME,
            boxed(
                GrpcStdioServer::new(StdioService(shared.clone()))
                    .max_decoding_message_size(MAX_MESSAGE_BYTES),
            ),
        ),
        (
            crate::pb::health::health_server::SERVICE_NAME,
            boxed(
                HealthServer::new(HealthService(shared))
                    .max_decoding_message_size(MAX_MESSAGE_BYTES),
            ),
        ),
    ];
    Router {
        routes: routes
            .into_iter()
            .map(|(name, service)| (format!("/{name}/"), service))
            .collect(),
    }
}

fn boxed<S>(service: S) -> Service
where
    S: tower::Service<
            http::Request<Incoming>,
            Response = http::Response<Body>,
            Error = Infallible,
            Future: Send + 'static,
        > + Clone
        + Send
        + Sync
        + 'static,
{
    tower::util::BoxCloneSyncService::new(service)
}

/// Dispatches a call by the `/<full service name>/` prefix of its path;
/// any other path is answered UNIMPLEMENTED, as gRPC servers do.
#[derive(Clone)]
pub(crate) struct Router {
    routes: Arc<[(String, Service)]>,
}

impl tower::Service<http::Request<Incoming>> for Router {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<http::Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // Each route's readiness is awaited in `call` (`oneshot`).
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Incoming>) -> Self::Future {
        let path = request.uri().path();
        let route = self
            .routes
            .iter()
            .find(|(prefix, _)| path.starts_with(prefix.as_str()));
        match route {
            Some((_, service)) => Box::pin(service.clone().oneshot(request)),
            None => {
                log::debug!("call to an unknown service refused: {path:?}");
                let answer = Status::unimplemented("this plugin does not serve that service");
                Box::pin(std::future::ready(Ok(answer.into_http())))
            }
        }
    }
}

/// A response stream that sends `first` (if any), then nothing, and ends
/// when the server stops: the host treats the end of the broker stream as
/// the plugin going away, so it must not end before.
pub(crate) struct OpenUntilStop<T> {
    first: Option<T>,
    stopped: Pin<Box<dyn Future<Output = ()> + Send>>,
}

impl<T> OpenUntilStop<T> {
    fn new(first: Option<T>, stop: &Stop) -> Self {
        OpenUntilStop {
            first,
            stopped: Box::pin(stop.stopped()),
        }
    }
}

impl<T: Unpin> Stream for OpenUntilStop<T> {
    type Item = Result<T, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Some(first) = self.first.take() {
            return Poll::Ready(Some(Ok(first)));
        }
        self.stopped.as_mut().poll(cx).map(|()| None)
    }
}

/// `spire.service.private.init.v1.Init`.
struct InitService<P>(Arc<Shared<P>>);

#[tonic::async_trait]
impl<P: Plugin> Init for InitService<P> {
    /// Lists the plugin service first, then Config: SPIRE binds the plugin
    /// by the first name it knows and configures it only if Config is
    /// listed.
    async fn init(&self, request: Request<InitRequest>) -> Result<Response<InitResponse>, Status> {
        let offered = request.into_inner().host_service_names;
        log::debug!("init: the host offers services [{}]", offered.join(", "));
        *lock(&self.0.host_services) = offered;
        Ok(Response::new(InitResponse {
            plugin_service_names: vec![P::SERVICE_NAME.to_owned(), CONFIG_SERVICE_NAME.to_owned()],
        }))
    }

    async fn deinit(
        &self,
        _request: Request<DeinitRequest>,
    ) -> Result<Response<DeinitResponse>, Status> {
        log::debug!(
            "deinit: the host is unloading the plugin (it offered services [{}])",
            lock(&self.0.host_services).join(", ")
        );
        Ok(Response::new(DeinitResponse {}))
    }
}

/// `spire.service.common.config.v1.Config`.
struct ConfigService<P>(Arc<Shared<P>>);

/// The core configuration SPIRE sent (an absent one reads as empty; the
/// plugin decides whether it needs the trust domain).
fn core_config(core: Option<CoreConfiguration>) -> CoreConfig {
    CoreConfig {
        trust_domain: core.map(|c| c.trust_domain).unwrap_or_default(),
    }
}

#[tonic::async_trait]
impl<P: Plugin> Config for ConfigService<P> {
    /// Applies a configuration; SPIRE calls it at load and again on
    /// reconfiguration (SIGUSR1 with `plugin_data_file`). The plugin may
    /// read files or the TPM here, so it runs on the blocking pool.
    async fn configure(
        &self,
        request: Request<ConfigureRequest>,
    ) -> Result<Response<ConfigureResponse>, Status> {
        let request = request.into_inner();
        let core = core_config(request.core_configuration);
        let plugin = self.0.plugin.clone();
        let hcl = request.hcl_configuration;
        let trust_domain = core.trust_domain.clone();
        let outcome = tokio::task::spawn_blocking(move || plugin.configure(&core, &hcl))
            .await
            .map_err(|e| {
                log::error!("configuration failed: the check ended abnormally ({e})");
                Status::internal("the plugin failed while checking its configuration")
            })?;
        match outcome {
            Ok(()) => {
                log::info!("configured (trust domain {trust_domain:?})");
                Ok(Response::new(ConfigureResponse {}))
            }
            Err(refused) => {
                log::warn!("configuration refused: {refused}");
                Err(Status::invalid_argument(refused.0))
            }
        }
    }

    /// Checks a configuration without applying it (`spire-server validate`).
    async fn validate(
        &self,
        request: Request<ValidateRequest>,
    ) -> Result<Response<ValidateResponse>, Status> {
        let request = request.into_inner();
        let core = core_config(request.core_configuration);
        let plugin = self.0.plugin.clone();
        let hcl = request.hcl_configuration;
        let outcome = tokio::task::spawn_blocking(move || plugin.validate(&core, &hcl))
            .await
            .map_err(|e| {
                log::error!("validation failed: the check ended abnormally ({e})");
                Status::internal("the plugin failed while checking its configuration")
            })?;
        let response = match outcome {
            Ok(notes) => {
                log::info!("configuration validated");
                ValidateResponse { valid: true, notes }
            }
            Err(refused) => {
                log::info!("configuration invalid: {refused}");
                ValidateResponse {
                    valid: false,
                    notes: vec![refused.0],
                }
            }
        };
        Ok(Response::new(response))
    }
}

/// `plugin.GRPCBroker`: the host opens this stream as soon as it connects
/// and sends the address of its host services on it. Its end would make the
/// host fail the plugin's load with "broker closed", so the response stream
/// stays open until the server stops.
struct BrokerService<P>(Arc<Shared<P>>);

#[tonic::async_trait]
impl<P: Plugin> GrpcBroker for BrokerService<P> {
    type StartStreamStream = OpenUntilStop<ConnInfo>;

    async fn start_stream(
        &self,
        request: Request<Streaming<ConnInfo>>,
    ) -> Result<Response<Self::StartStreamStream>, Status> {
        let mut inbound = request.into_inner();
        let stopped = self.0.stop.stopped();
        // Reads what the host sends, for the logs, until the server stops.
        tokio::spawn(async move {
            tokio::pin!(stopped);
            loop {
                let received = tokio::select! {
                    () = &mut stopped => return,
                    received = inbound.message() => received,
                };
                match received {
                    Ok(Some(info)) => {
                        log::debug!(
                            "broker: the host offers service id {} at {} {:?}",
                            info.service_id,
                            info.network,
                            info.address
                        );
                    }
                    Ok(None) => {
                        log::debug!("broker: the host closed its side of the stream");
                        return;
                    }
                    Err(status) => {
                        log::debug!("broker: the host's side of the stream ended: {status}");
                        return;
                    }
                }
            }
        });
        Ok(Response::new(OpenUntilStop::new(None, &self.0.stop)))
    }
}

/// `plugin.GRPCController`: the host's Shutdown at unload. Answering it
/// lets the host wait for a clean exit instead of killing the process.
struct ControllerService<P>(Arc<Shared<P>>);

#[tonic::async_trait]
impl<P: Plugin> GrpcController for ControllerService<P> {
    async fn shutdown(&self, _request: Request<Empty>) -> Result<Response<Empty>, Status> {
        log::info!("the host asked the plugin to stop");
        // The answer still goes out: the server drains calls in flight.
        self.0.stop.trigger();
        Ok(Response::new(Empty {}))
    }
}

/// `plugin.GRPCStdio`: the plugin never writes to stdout or stderr other
/// than its handshake and log lines, so the stream carries nothing; it
/// stays open so that the host does not log it as lost.
struct StdioService<P>(Arc<Shared<P>>);

#[tonic::async_trait]
impl<P: Plugin> GrpcStdio for StdioService<P> {
    type StreamStdioStream = OpenUntilStop<StdioData>;

    async fn stream_stdio(
        &self,
        _request: Request<Empty>,
    ) -> Result<Response<Self::StreamStdioStream>, Status> {
        Ok(Response::new(OpenUntilStop::new(None, &self.0.stop)))
    }
}

/// `grpc.health.v1.Health`: "plugin" (go-plugin's name), "" (the server)
/// and the plugin's own service are SERVING while the process serves.
struct HealthService<P>(Arc<Shared<P>>);

impl<P: Plugin> HealthService<P> {
    fn status_of(&self, service: &str) -> Option<ServingStatus> {
        if !["", "plugin", P::SERVICE_NAME].contains(&service) {
            return None;
        }
        Some(if self.0.stop.is_set() {
            ServingStatus::NotServing
        } else {
            ServingStatus::Serving
        })
    }
}

#[tonic::async_trait]
impl<P: Plugin> Health for HealthService<P> {
    async fn check(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        match self.status_of(&request.into_inner().service) {
            Some(status) => Ok(Response::new(HealthCheckResponse {
                status: status.into(),
            })),
            None => Err(Status::not_found("unknown service")),
        }
    }

    type WatchStream = OpenUntilStop<HealthCheckResponse>;

    async fn watch(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let status = self
            .status_of(&request.into_inner().service)
            .unwrap_or(ServingStatus::ServiceUnknown);
        let first = HealthCheckResponse {
            status: status.into(),
        };
        Ok(Response::new(OpenUntilStop::new(Some(first), &self.0.stop)))
    }
}

/// Locks a mutex that a panicking holder may have poisoned: what it guards
/// (names and addresses, each written whole) stays usable.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
