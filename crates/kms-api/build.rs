//! Generates the KMS v2 gRPC bindings from the workspace's
//! `proto/kms/v2/api.proto`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    sceau_cli::build_script::generate_grpc(&["../../proto/kms/v2/api.proto"], "../../proto")
}
