//! Generates the gRPC bindings the plugins serve (SPIRE's NodeAttestor,
//! Config and Init; go-plugin's broker, controller and stdio; gRPC health),
//! and their clients, which the tests use to play SPIRE's side.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    sceau_cli::build_script::generate_grpc(
        &[
            "proto/spire/plugin/server/nodeattestor/v1/nodeattestor.proto",
            "proto/spire/plugin/agent/nodeattestor/v1/nodeattestor.proto",
            "proto/spire/service/common/config/v1/config.proto",
            "proto/spire/service/private/init/v1/init.proto",
            "proto/plugin/go_plugin.proto",
            "proto/grpc/health/v1/health.proto",
        ],
        "proto",
    )
}
