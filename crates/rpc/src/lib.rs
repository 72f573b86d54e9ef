//! gRPC over HTTP/2 on a unix socket, as sceau speaks it on both sides of
//! its sockets: [`client`], the transport every generated client of the
//! workspace runs on (`sceau check`, the test kit, the SPIRE plugins' host
//! tests), and, with the `server` feature, `serve`: the HTTP/2 settings,
//! the serving of one connection and the drain at a stop, which the
//! daemon's KMS socket and the SPIRE plugins' socket share.
#![forbid(unsafe_code)]

pub mod client;
#[cfg(feature = "server")]
pub mod serve;
