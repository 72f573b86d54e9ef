//! The SPIRE plugins' integration tests, in one binary: the go-plugin and
//! SPIRE protocol against the plugins in-process (`plugin_protocol`), the
//! agent's TPM steps on swtpm (`agent_tpm`), the server's verdicts on
//! evidence a real TPM made (`attest`), the server plugin under stalled
//! attestations (`attest_limits`), EK certificate chains
//! (`certificates`), and measured boot with a firmware event log
//! (`measured_boot`, on the synthetic log of `synthetic_log`). `pki`
//! issues the test certificates with openssl.

mod agent_tpm;
mod attest;
mod attest_limits;
mod certificates;
mod measured_boot;
mod pki;
mod plugin_protocol;
mod synthetic_log;
