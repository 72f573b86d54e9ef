//! The agent plugin: proves the node's TPM to the server plugin.
