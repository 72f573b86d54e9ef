//! Generates the KMS v2 gRPC bindings from the workspace's `proto/` with
//! protox, a pure-Rust protobuf compiler, so that building never needs an
//! installed `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "../../proto/kms/v2/api.proto";
    println!("cargo:rerun-if-changed={proto}");
    let descriptors = protox::compile([proto], ["../../proto"])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // No `connect` constructor over tonic's Channel: the client runs on
        // sceau-rpc's own connection.
        .build_transport(false)
        .compile_fds(descriptors)?;
    Ok(())
}
