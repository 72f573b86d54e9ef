//! What can go wrong in a TPM call, in three vocabularies.
//!
//! [`TpmError`] carries the TSS detail for sceau's own log. [`Fault`] is the
//! only thing that leaves the TPM layer towards a client: a class word with no
//! return code and no TSS text, so nothing about the TPM can leak by mistake.
//! [`ConnectFailure`] is for the operator at start-up: why the TPM could not
//! be reached and what to do, found by looking at the machine once tpm2-tss
//! has failed (its return code says "I/O error" for a missing device, a
//! refused permission and a stopped swtpm alike).
#![forbid(unsafe_code)]

use std::path::PathBuf;

use tss_esapi::constants::response_code::Tss2ResponseCode;

/// The client-facing class of a failed TPM operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Fault {
    /// The TCTI or the ESAPI context is gone and could not be rebuilt.
    #[error("tpm-unreachable")]
    Unreachable,
    /// The TPM kept answering "retry", or the request queue stayed full.
    #[error("tpm-busy")]
    Busy,
    /// The request's deadline passed before the TPM answered.
    #[error("tpm-timeout")]
    Timeout,
    /// The TPM's dictionary-attack protection is engaged.
    #[error("tpm-lockout")]
    Lockout,
    /// The TPM refused the operation for a reason sceau cannot fix.
    #[error("tpm-failure")]
    Failure,
    /// The TPM could not load the envelope under this SRK: it was sealed by
    /// another TPM, or altered.
    #[error("envelope-not-for-this-tpm")]
    EnvelopeRejected,
    /// The DEK is sealed to the boot policy key, and no signed policy matches
    /// the PCRs: the machine is not in a boot state its operator signed.
    #[error("policy-mismatch")]
    PolicyMismatch,
}

impl Fault {
    /// Every class, for tests and fuzzers that must cover them all.
    pub const ALL: [Fault; 7] = [
        Fault::Unreachable,
        Fault::Busy,
        Fault::Timeout,
        Fault::Lockout,
        Fault::Failure,
        Fault::EnvelopeRejected,
        Fault::PolicyMismatch,
    ];
}

/// Why the TPM could not be reached at start-up, each with its fix. No TPM
/// return code and no TSS text: the caller logs those at DEBUG.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnectFailure {
    #[error(
        "the TCTI library {library} cannot be loaded (is it installed?): install the Debian \
         package {package} (apt install {package}), or choose another TPM with --tcti or SCEAU_TCTI"
    )]
    LibraryMissing { library: String, package: String },
    #[error(
        "the TPM device {path} does not exist: sceau needs a TPM 2.0 and the kernel's TPM \
         driver (tpm_tis or tpm_crb; check `dmesg | grep -i tpm` and that the TPM is enabled in \
         the firmware) or, in a VM, a vTPM; to use another TPM pass --tcti or set SCEAU_TCTI \
         (for example swtpm:host=127.0.0.1,port=2321)"
    )]
    DeviceMissing { path: PathBuf },
    #[error(
        "permission denied on {path}: run sceau as root, or add the user it runs as to the \
         group that owns {path} (`tss` on Debian, from the tpm-udev package: usermod -aG tss \
         USER; sceau.service has SupplementaryGroups=tss)"
    )]
    PermissionDenied { path: PathBuf },
    #[error(
        "{path} is not allowed by the device cgroup: under systemd, the unit's DeviceAllow= \
         must name it (sceau.service allows /dev/tpmrm0 only)"
    )]
    DeviceNotAllowed { path: PathBuf },
    #[error(
        "{path} is busy: another process holds it, and the raw device serves one at a time; \
         use the kernel's resource manager instead (--tcti device:/dev/tpmrm0)"
    )]
    DeviceBusy { path: PathBuf },
    #[error(
        "{path} cannot be opened ({reason}): --tcti device: needs the TPM's character device \
         (/dev/tpmrm0)"
    )]
    DeviceUnusable { path: PathBuf, reason: String },
    #[error(
        "host {host:?} of the software TPM does not resolve: use an IP address or a known host \
         name in --tcti"
    )]
    UnknownHost { host: String },
    #[error(
        "nothing listens on {host}:{port}, where --tcti says the software TPM is: start it \
         (swtpm socket --tpm2 --server type=tcp,port={port} --ctrl type=tcp,port={control} \
         --flags startup-clear), or correct --tcti"
    )]
    NothingListening {
        host: String,
        port: u16,
        control: u32,
    },
    #[error(
        "tpm2-abrmd did not answer on D-Bus: start it (systemctl start tpm2-abrmd), or use the \
         kernel's resource manager instead (--tcti device:/dev/tpmrm0)"
    )]
    BrokerUnreachable,
    #[error(
        "the TPM at {tcti} could not be reached although its {what} is there: check that it is \
         a working TPM 2.0; SCEAU_LOG=debug shows tpm2-tss's own account"
    )]
    Unexplained { tcti: String, what: &'static str },
}

/// A TPM call that failed, with the detail for the log.
#[derive(Debug)]
pub struct TpmError {
    pub operation: &'static str,
    pub source: tss_esapi::Error,
    /// Set when the TPM was parsing blobs a client supplied, where a
    /// parameter error is the client's envelope, not the TPM's health.
    pub client_blob: bool,
    /// Set when sceau decided the outcome itself, with no TPM code to
    /// classify (no signed policy matches the PCRs): the fault to report and
    /// the line for the log.
    pub decided: Option<(Fault, String)>,
}

impl std::fmt::Display for TpmError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.decided {
            Some((_, why)) => f.write_str(why),
            None => write!(f, "{} failed: {}", self.operation, self.source),
        }
    }
}

impl std::error::Error for TpmError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        // The TSS error is part of the message already; a decided outcome
        // has none.
        None
    }
}

/// How the worker should react to an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recovery {
    /// The TPM asked to be asked again (RETRY, YIELDED, TESTING).
    RetryLater,
    /// The salted session is unusable; start a new one and try again.
    NewSession,
    /// The connection or the ESAPI context is dead; rebuild it.
    Reconnect,
    /// Give up and report this fault.
    Report(Fault),
}

/// The operation name of the ESAPI context's creation (`Context::new`).
pub const INITIALIZE: &str = "Initialize";

/// tpm2-tss layer numbers (bits 16..24 of a TSS2_RC).
const LAYER_TPM: u32 = 0;
const LAYER_ESAPI: u32 = 7;
const LAYER_TCTI: u32 = 10;

/// TSS2_BASE_RC values that mean the ESAPI context can no longer talk to the TPM.
const BASE_RC_GENERAL_FAILURE: u32 = 1;
const BASE_RC_BAD_SEQUENCE: u32 = 7;
const BASE_RC_NO_CONNECTION: u32 = 8;
const BASE_RC_TRY_AGAIN: u32 = 9;
const BASE_RC_IO_ERROR: u32 = 10;
const BASE_RC_MALFORMED_RESPONSE: u32 = 17;
const BASE_RC_INSUFFICIENT_RESPONSE: u32 = 19;
/// The response HMAC did not verify: a broken session, or someone on the bus.
const BASE_RC_RSP_AUTH_FAILED: u32 = 27;

/// TPM 2.0 format-zero codes (TPM2_RC_*).
const RC_INITIALIZE: u32 = 0x100;
const RC_FAILURE: u32 = 0x101;
const RC_YIELDED: u32 = 0x908;
const RC_TESTING: u32 = 0x90A;
const RC_LOCKOUT: u32 = 0x921;
const RC_RETRY: u32 = 0x922;
/// Format-one codes carry their error number in the low 6 bits.
const RC_FMT1: u32 = 0x080;
/// In a format-one code, bit 6 marks a parameter error; without it, bit 11
/// marks a session error (bits 8..11 number the parameter, handle or session).
const RC_FMT1_PARAMETER: u32 = 0x040;
const RC_FMT1_SESSION: u32 = 0x800;
const RC_FMT1_ERROR_NUMBER: u32 = 0x03F;
/// Format-one error numbers meaning "not supported": ASYMMETRIC, VALUE,
/// KEY_SIZE, KDF, SCHEME, SYMMETRIC, CURVE.
const UNSUPPORTED_PARAMETER_ERRORS: [u32; 7] = [0x01, 0x04, 0x07, 0x0C, 0x12, 0x16, 0x26];
/// Warnings that mean "not now": CONTEXT_GAP, MEMORY, CANCELED, NV_RATE,
/// NV_UNAVAILABLE, besides RETRY, YIELDED and TESTING.
const RC_CONTEXT_GAP: u32 = 0x901;
const RC_MEMORY: u32 = 0x904;
const RC_CANCELED: u32 = 0x909;
const RC_NV_RATE: u32 = 0x920;
const RC_NV_UNAVAILABLE: u32 = 0x923;
/// The TPM ran out of object or session slots: something left handles
/// loaded. Reopening flushes what sceau finds.
const RC_OBJECT_MEMORY: u32 = 0x902;
const RC_SESSION_MEMORY: u32 = 0x903;
/// REFERENCE_H0..H6 and REFERENCE_S0..S6: a handle or session sceau holds
/// no longer refers to anything loaded.
const RC_REFERENCE_HANDLES: std::ops::RangeInclusive<u32> = 0x910..=0x916;
const RC_REFERENCE_SESSIONS: std::ops::RangeInclusive<u32> = 0x918..=0x91E;

impl TpmError {
    pub fn new(operation: &'static str, source: tss_esapi::Error) -> Self {
        Self {
            operation,
            source,
            client_blob: false,
            decided: None,
        }
    }

    /// An outcome sceau decided without a TPM error: reported as `fault`,
    /// logged as `why`.
    pub fn refused(why: String, fault: Fault) -> Self {
        Self {
            operation: "sceau",
            source: tss_esapi::Error::WrapperError(tss_esapi::WrapperErrorKind::InvalidParam),
            client_blob: false,
            decided: Some((fault, why)),
        }
    }

    /// An error from TPM2_Load of an envelope's blobs.
    pub fn loading_client_blob(source: tss_esapi::Error) -> Self {
        Self::on_client_blob("Load", source)
    }

    /// An error from a command whose input came from a client's envelope
    /// (Load, Import): integrity and binding failures are bad input.
    pub fn on_client_blob(operation: &'static str, source: tss_esapi::Error) -> Self {
        Self {
            operation,
            source,
            client_blob: true,
            decided: None,
        }
    }

    /// The raw TSS2_RC, when the error came from the TSS rather than the wrapper.
    pub fn response_code(&self) -> Option<u32> {
        match self.source {
            tss_esapi::Error::Tss2Error(rc) => raw_response_code(rc),
            tss_esapi::Error::WrapperError(_) => None,
        }
    }

    /// The TPM rejected an algorithm, curve or size as unsupported: the
    /// answer TestParms gives for a template the TPM cannot make.
    pub fn is_unsupported_parameter(&self) -> bool {
        self.response_code().is_some_and(|rc| {
            let format_one_parameter =
                rc & (RC_FMT1 | RC_FMT1_PARAMETER) == RC_FMT1 | RC_FMT1_PARAMETER;
            let layer = (rc >> 16) & 0xFF;
            layer == LAYER_TPM
                && format_one_parameter
                && UNSUPPORTED_PARAMETER_ERRORS.contains(&(rc & RC_FMT1_ERROR_NUMBER))
        })
    }

    /// The TPM refused one of the command's parameters (a format-one code
    /// with the parameter bit): for VerifySignature, a signature that does
    /// not verify (TPM_RC_SIGNATURE) or does not fit the key (TPM_RC_SCHEME,
    /// TPM_RC_SIZE, TPM_RC_VALUE), as opposed to a TPM that is busy or gone.
    pub fn is_parameter_error(&self) -> bool {
        self.response_code().is_some_and(|rc| {
            (rc >> 16) & 0xFF == LAYER_TPM
                && rc & (RC_FMT1 | RC_FMT1_PARAMETER) == RC_FMT1 | RC_FMT1_PARAMETER
        })
    }

    /// Whether tpm2-tss could not reach the TPM at all (as opposed to a TPM
    /// that answered with an error): Initialize itself failed, or the TCTI
    /// layer reported the failure.
    pub fn is_connection_failure(&self) -> bool {
        self.operation == INITIALIZE
            || self
                .response_code()
                .is_some_and(|rc| (rc >> 16) & 0xFF == LAYER_TCTI)
    }

    /// The client-facing class of this error, for a log line or a start-up
    /// message that must carry no TSS text.
    pub fn fault(&self) -> Fault {
        match self.recovery() {
            Recovery::Report(fault) => fault,
            Recovery::RetryLater => Fault::Busy,
            Recovery::Reconnect => Fault::Unreachable,
            Recovery::NewSession => Fault::Failure,
        }
    }

    /// Decides what the worker does next.
    pub fn recovery(&self) -> Recovery {
        if let Some((fault, _)) = &self.decided {
            return Recovery::Report(*fault);
        }
        match self.response_code() {
            None => Recovery::Report(Fault::Failure),
            Some(rc) => classify(rc, self.client_blob),
        }
    }
}

fn classify(rc: u32, client_blob: bool) -> Recovery {
    let layer = (rc >> 16) & 0xFF;
    let base = rc & 0xFFFF;
    match layer {
        LAYER_TCTI => Recovery::Reconnect,
        LAYER_ESAPI => classify_esapi(base),
        LAYER_TPM => classify_tpm(base, client_blob),
        _ => Recovery::Report(Fault::Failure),
    }
}

fn classify_esapi(base: u32) -> Recovery {
    match base {
        BASE_RC_RSP_AUTH_FAILED => Recovery::NewSession,
        BASE_RC_GENERAL_FAILURE
        | BASE_RC_BAD_SEQUENCE
        | BASE_RC_NO_CONNECTION
        | BASE_RC_TRY_AGAIN
        | BASE_RC_IO_ERROR
        | BASE_RC_MALFORMED_RESPONSE
        | BASE_RC_INSUFFICIENT_RESPONSE => Recovery::Reconnect,
        _ => Recovery::Report(Fault::Failure),
    }
}

fn classify_tpm(code: u32, client_blob: bool) -> Recovery {
    match code {
        RC_RETRY | RC_YIELDED | RC_TESTING | RC_CONTEXT_GAP | RC_MEMORY | RC_CANCELED
        | RC_NV_RATE | RC_NV_UNAVAILABLE => Recovery::RetryLater,
        RC_LOCKOUT => Recovery::Report(Fault::Lockout),
        // The TPM was reset under us and sceau's handles are gone, or its
        // slots are full: a new context sends Startup, flushes leftovers and
        // recreates the SRK.
        RC_INITIALIZE | RC_OBJECT_MEMORY | RC_SESSION_MEMORY => Recovery::Reconnect,
        _ if RC_REFERENCE_HANDLES.contains(&code) => Recovery::Reconnect,
        RC_FAILURE => Recovery::Report(Fault::Failure),
        _ if RC_REFERENCE_SESSIONS.contains(&code) => Recovery::NewSession,
        _ if code & RC_FMT1 == 0 => Recovery::Report(Fault::Failure),
        _ if code & RC_FMT1_PARAMETER != 0 => match client_blob {
            true => Recovery::Report(Fault::EnvelopeRejected),
            false => Recovery::Report(Fault::Failure),
        },
        _ if code & RC_FMT1_SESSION != 0 => Recovery::NewSession,
        // A handle error: a handle sceau holds (the SRK) no longer exists.
        _ => Recovery::Reconnect,
    }
}

/// tss-esapi 7.x keeps the raw code private but prints it as
/// `Response code value: 0x…` in the inner code's `Display`. This depends on
/// that text; `reads_the_raw_code_back` fails if a tss-esapi update changes
/// it. tss-esapi 8 exposes the code directly.
fn raw_response_code(rc: Tss2ResponseCode) -> Option<u32> {
    let text = match rc {
        Tss2ResponseCode::Success => return Some(0),
        Tss2ResponseCode::FormatZero(inner) => inner.to_string(),
        Tss2ResponseCode::FormatOne(inner) => inner.to_string(),
    };
    let hex = text.rsplit("0x").next()?;
    u32::from_str_radix(hex.trim(), 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tss(rc: u32) -> TpmError {
        TpmError::new(
            "test",
            tss_esapi::Error::Tss2Error(Tss2ResponseCode::from(rc)),
        )
    }

    fn load(rc: u32) -> TpmError {
        TpmError::loading_client_blob(tss_esapi::Error::Tss2Error(Tss2ResponseCode::from(rc)))
    }

    #[test]
    fn reads_the_raw_code_back() {
        for rc in [0x1df, 0x902, 0x922, 0xA000A, 0x70007, 0x9000A] {
            assert_eq!(tss(rc).response_code(), Some(rc));
        }
    }

    #[test]
    fn classifies_the_codes_seen_in_practice() {
        // Measured on swtpm: a foreign or altered envelope fails Load with
        // TPM_RC_INTEGRITY on parameter 1.
        assert_eq!(
            load(0x1df).recovery(),
            Recovery::Report(Fault::EnvelopeRejected)
        );
        assert_eq!(tss(0x1df).recovery(), Recovery::Report(Fault::Failure));
        assert_eq!(tss(0x922).recovery(), Recovery::RetryLater);
        assert_eq!(tss(0x908).recovery(), Recovery::RetryLater);
        assert_eq!(tss(0x90A).recovery(), Recovery::RetryLater);
        assert_eq!(tss(0x921).recovery(), Recovery::Report(Fault::Lockout));
        // TCTI I/O error, and the dead-context code ESAPI returns afterwards.
        assert_eq!(tss(0xA000A).recovery(), Recovery::Reconnect);
        assert_eq!(tss(0x70007).recovery(), Recovery::Reconnect);
        assert_eq!(tss(0x7001B).recovery(), Recovery::NewSession);
        // TPM_RC_SESSION_HANDLE-like format-one code on session 1.
        assert_eq!(load(0x98B).recovery(), Recovery::NewSession);
        // A parameter error on parameter 8 also sets bit 11; it is not a session error.
        assert_eq!(
            load(0x8DF).recovery(),
            Recovery::Report(Fault::EnvelopeRejected)
        );
        assert_eq!(tss(0x902).recovery(), Recovery::Reconnect);
        assert_eq!(tss(0x903).recovery(), Recovery::Reconnect);
        assert_eq!(tss(0x920).recovery(), Recovery::RetryLater);
        assert_eq!(tss(0x91A).recovery(), Recovery::NewSession);
        assert_eq!(tss(0x912).recovery(), Recovery::Reconnect);
        // TPM_RC_HANDLE on handle 1: the SRK vanished (TPM reset).
        assert_eq!(load(0x18B).recovery(), Recovery::Reconnect);
        assert_eq!(tss(0x910).recovery(), Recovery::Reconnect);
    }

    /// What VerifySignature answers for a signature by another key
    /// (TPM_RC_SIGNATURE on parameter 2: 0x2DB) is a
    /// parameter error; a busy, reset or unreachable TPM is not.
    #[test]
    fn a_refused_signature_is_a_parameter_error() {
        assert!(tss(0x2DB).is_parameter_error());
        assert!(tss(0x1C4).is_parameter_error());
        for rc in [0x922, 0x100, 0x98B, 0x18B, 0xA000A, 0x70007] {
            assert!(!tss(rc).is_parameter_error(), "{rc:#x}");
        }
        // A decided outcome is never mistaken for one.
        assert!(!TpmError::refused("no".into(), Fault::PolicyMismatch).is_parameter_error());
        assert_eq!(
            TpmError::refused("no".into(), Fault::PolicyMismatch).recovery(),
            Recovery::Report(Fault::PolicyMismatch)
        );
    }

    #[test]
    fn recognises_unsupported_algorithms() {
        // TPM_RC_CURVE and TPM_RC_VALUE on parameter 1, as TestParms answers.
        assert!(tss(0x1E6).is_unsupported_parameter());
        assert!(tss(0x1C4).is_unsupported_parameter());
        // RETRY, an I/O error and an integrity failure are not "unsupported".
        for rc in [0x922, 0xA000A, 0x1DF] {
            assert!(!tss(rc).is_unsupported_parameter(), "{rc:#x}");
        }
    }

    #[test]
    fn tells_a_connection_failure_from_a_tpm_answer() {
        assert!(tss(0xA000A).is_connection_failure());
        assert!(
            TpmError::new(
                INITIALIZE,
                tss_esapi::Error::WrapperError(tss_esapi::WrapperErrorKind::InvalidParam)
            )
            .is_connection_failure()
        );
        assert!(!tss(0x921).is_connection_failure());
        assert_eq!(tss(0x921).fault(), Fault::Lockout);
        assert_eq!(tss(0x922).fault(), Fault::Busy);
    }

    /// The operator's start-up lines name a cause and a fix, and carry no
    /// return code or TSS wording.
    #[test]
    fn connect_failures_carry_no_tpm_detail() {
        let all = [
            ConnectFailure::LibraryMissing {
                library: "libtss2-tcti-swtpm.so.0".into(),
                package: "libtss2-tcti-swtpm0".into(),
            },
            ConnectFailure::DeviceMissing {
                path: "/dev/tpmrm0".into(),
            },
            ConnectFailure::PermissionDenied {
                path: "/dev/tpmrm0".into(),
            },
            ConnectFailure::DeviceBusy {
                path: "/dev/tpm0".into(),
            },
            ConnectFailure::DeviceNotAllowed {
                path: "/dev/tpm0".into(),
            },
            ConnectFailure::DeviceUnusable {
                path: "/tmp/x".into(),
                reason: "No such device".into(),
            },
            ConnectFailure::UnknownHost { host: "tpm".into() },
            ConnectFailure::NothingListening {
                host: "localhost".into(),
                port: 2321,
                control: 2322,
            },
            ConnectFailure::BrokerUnreachable,
            ConnectFailure::Unexplained {
                tcti: "device:/dev/tpmrm0".into(),
                what: "device",
            },
        ];
        for failure in all {
            let line = failure.to_string();
            assert!(line.contains(": "), "no fix in {line}");
            for word in ["0x", "Esys", "TSS2", "response code"] {
                assert!(!line.contains(word), "{line}");
            }
        }
    }

    #[test]
    fn client_words_carry_no_tpm_detail() {
        for fault in Fault::ALL {
            let word = fault.to_string();
            assert!(
                word.bytes().all(|b| b.is_ascii_lowercase() || b == b'-'),
                "{word}"
            );
        }
    }
}
