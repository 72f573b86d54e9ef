//! The server plugin: verifies a node's TPM without one of its own.
