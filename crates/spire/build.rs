//! Generates the gRPC bindings the plugins serve (SPIRE's NodeAttestor,
//! Config and Init; go-plugin's broker, controller and stdio; gRPC health)
//! with protox, so that building never needs an installed `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = [
        "proto/spire/plugin/server/nodeattestor/v1/nodeattestor.proto",
        "proto/spire/plugin/agent/nodeattestor/v1/nodeattestor.proto",
        "proto/spire/service/common/config/v1/config.proto",
        "proto/spire/service/private/init/v1/init.proto",
        "proto/plugin/go_plugin.proto",
        "proto/grpc/health/v1/health.proto",
    ];
    println!("cargo:rerun-if-changed=proto");
    let descriptors = protox::compile(protos, ["proto"])?;
    tonic_prost_build::configure()
        .build_server(true)
        // Clients for the tests, which play SPIRE's side over the same socket.
        .build_client(true)
        .build_transport(false)
        .compile_fds(descriptors)?;
    Ok(())
}
