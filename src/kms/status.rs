//! How the service's refusals and the TPM's faults become gRPC statuses:
//! a code and sceau's own words, never TPM return codes or TSS text.
#![forbid(unsafe_code)]

use tonic::{Code, Status};

use sceau_format::envelope::EnvelopeError;
use sceau_tpm::Fault;

/// Bad input in a ciphertext, for either envelope version.
pub fn malformed(error: impl std::fmt::Display) -> Status {
    Status::invalid_argument(format!("malformed ciphertext: {error}"))
}

/// An envelope the parser refused. Annotations on a version 1 envelope are
/// the request's fault, not the ciphertext's, so they are not "malformed".
pub fn refused_envelope(error: EnvelopeError) -> Status {
    match error {
        EnvelopeError::AnnotationsOnSealed => Status::invalid_argument(error.to_string()),
        error => malformed(error),
    }
}

/// The class word only: TPM return codes and TSS text stay in sceau's log.
pub fn fault_status(fault: Fault) -> Status {
    let code = match fault {
        Fault::EnvelopeRejected => Code::InvalidArgument,
        Fault::Timeout => Code::DeadlineExceeded,
        Fault::Unreachable | Fault::Busy | Fault::Lockout => Code::Unavailable,
        Fault::Failure => Code::Internal,
        // Not the request's fault, nor the TPM's: the machine's boot state.
        Fault::PolicyMismatch => Code::FailedPrecondition,
    };
    Status::new(code, fault.to_string())
}
