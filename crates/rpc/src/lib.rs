//! gRPC over HTTP/2 on a unix socket, as sceau speaks it on both sides of
//! its sockets: [`client`], the transport every generated client of the
//! workspace runs on (`sceau check`, the test kit, the SPIRE plugins' host
//! tests).
#![forbid(unsafe_code)]

pub mod client;
