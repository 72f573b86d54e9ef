//! TPM2_CertifyCreation, sent as raw command bytes on a second connection to
//! the same TPM.
//!
//! tss-esapi 7.7 has no CertifyCreation ("Missing function" in its source)
//! and does not expose its ESYS context, and this crate has no `unsafe` to
//! call tpm2-tss directly. So the AK's context is saved through ESAPI
//! (TPM2_ContextSave), loaded again on a connection this module opens
//! (TPM2_ContextLoad), certified there with a password session (the AK has
//! an empty authValue), and flushed. The TPMS_ATTEST and TPMT_SIGNATURE
//! come back exactly as the TPM produced them.
//!
//! The second connection needs a TPM that accepts one: `/dev/tpmrm0` (the
//! kernel gives every open file its own view, and object contexts are
//! global), or swtpm (whose TCTI connects once per command). `/dev/tpm0` is
//! single-open, and the MS simulator and tabrmd hold their connection.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::Duration;

use sceau_format::wire::{Reader, Writer};
use sceau_tpm::fault::TpmError;
use sceau_tpm::tcti::{Tcti, Transport};
use tss_esapi::constants::response_code::Tss2ResponseCode;
use tss_esapi::tss2_esys::{TPMS_CONTEXT, TPMT_TK_CREATION};
use tss_esapi::utils::TpmsContext;

const TAG_NO_SESSIONS: u16 = 0x8001;
const TAG_SESSIONS: u16 = 0x8002;
const CC_CERTIFY_CREATION: u32 = 0x0000_014A;
const CC_CONTEXT_LOAD: u32 = 0x0000_0161;
const CC_FLUSH_CONTEXT: u32 = 0x0000_0165;
/// TPM_RS_PW: a password authorization, here with the AK's empty authValue.
const PASSWORD_SESSION: u32 = 0x4000_0009;
const ALG_ECDSA: u16 = 0x0018;
const ALG_SHA256: u16 = 0x000B;
const HEADER_LEN: usize = 10;
/// TPM2_CertifyCreation's response (about 250 bytes for a P-256 AK) fits
/// the PC Client's 4 KiB command buffer.
const MAX_RESPONSE_LEN: usize = 4096;
/// How long a TPM may take for one command before the agent gives up; far
/// above what a slow discrete TPM needs for an ECDSA signature.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// Why the second connection could not be used.
#[derive(Debug, thiserror::Error)]
pub enum RawError {
    #[error(
        "TCTI {0} cannot carry TPM2_CertifyCreation (tss-esapi 7 lacks it); use device:/dev/tpmrm0 or swtpm:"
    )]
    Unsupported(String),
    #[error("second TPM connection ({what}): {source}")]
    Io {
        what: &'static str,
        source: std::io::Error,
    },
    #[error("the TPM's {0} response is malformed")]
    Malformed(&'static str),
    #[error(transparent)]
    Tpm(#[from] TpmError),
}

/// Where the second connection goes.
#[derive(Debug, Clone)]
pub enum RawChannel {
    Device(PathBuf),
    Swtpm { host: String, port: u16 },
}

impl RawChannel {
    /// The second connection for `tcti`, or why there is none.
    pub fn for_tcti(tcti: &Tcti) -> Result<Self, RawError> {
        match tcti.transport() {
            Transport::Device { path } if tcti.has_resource_manager() => {
                Ok(Self::Device(path.clone()))
            }
            Transport::Swtpm { host, port } => Ok(Self::Swtpm {
                host: host.clone(),
                port: *port,
            }),
            _ => Err(RawError::Unsupported(tcti.to_string())),
        }
    }

    /// ContextLoad of `ak`, CertifyCreation of it by itself (no qualifying
    /// data, ECDSA-SHA256), FlushContext. Returns the TPMS_ATTEST and the
    /// TPMT_SIGNATURE bytes as the TPM sent them.
    pub fn certify_creation(
        &self,
        ak: &TpmsContext,
        creation_hash: &[u8],
        ticket: &TPMT_TK_CREATION,
    ) -> Result<(Vec<u8>, Vec<u8>), RawError> {
        let mut connection = self.connect()?;
        let handle = connection.context_load(ak)?;
        let certified = connection.certify_creation(handle, creation_hash, ticket);
        let flushed = connection.flush(handle);
        let certified = certified?;
        flushed?;
        Ok(certified)
    }

    fn connect(&self) -> Result<Connection, RawError> {
        let io = |what| move |source| RawError::Io { what, source };
        match self {
            Self::Device(path) => {
                let file = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(path)
                    .map_err(io("open"))?;
                Ok(Connection::Device(file))
            }
            Self::Swtpm { .. } => Ok(Connection::Swtpm(self.clone())),
        }
    }
}

/// One open device file (its handles live as long as it), or swtpm, where
/// every command gets its own TCP connection as tpm2-tss's swtpm TCTI does,
/// so that the ESAPI context's next command is not locked out.
enum Connection {
    Device(std::fs::File),
    Swtpm(RawChannel),
}

impl Connection {
    fn transact(&mut self, command: &[u8]) -> Result<Vec<u8>, RawError> {
        let io = |what| move |source| RawError::Io { what, source };
        let mut response = vec![0u8; MAX_RESPONSE_LEN];
        let len = match self {
            Self::Device(file) => {
                file.write_all(command).map_err(io("write"))?;
                // The TPM character device returns a whole response per read.
                file.read(&mut response).map_err(io("read"))?
            }
            Self::Swtpm(RawChannel::Swtpm { host, port }) => {
                let mut stream =
                    TcpStream::connect((host.as_str(), *port)).map_err(io("connect"))?;
                stream
                    .set_read_timeout(Some(COMMAND_TIMEOUT))
                    .and_then(|()| stream.set_write_timeout(Some(COMMAND_TIMEOUT)))
                    .map_err(io("timeout"))?;
                stream.write_all(command).map_err(io("write"))?;
                read_response(&mut stream, &mut response)?
            }
            Self::Swtpm(RawChannel::Device(_)) => unreachable!("built by RawChannel::connect"),
        };
        response.truncate(len);
        Ok(response)
    }

    /// Sends `command` and returns the response after its header, or the
    /// TPM's error as a [`TpmError`] for `operation`.
    fn run(&mut self, operation: &'static str, command: &[u8]) -> Result<Vec<u8>, RawError> {
        let response = self.transact(command)?;
        let mut r = Reader::new(&response);
        let header = (|| {
            let _tag = r.u16("tag")?;
            let size = r.u32("size")?;
            let code = r.u32("response code")?;
            Ok::<_, sceau_format::wire::WireError>((size, code))
        })();
        let (size, code) = header.map_err(|_| RawError::Malformed(operation))?;
        if usize::try_from(size).ok() != Some(response.len()) {
            return Err(RawError::Malformed(operation));
        }
        if code != 0 {
            return Err(RawError::Tpm(TpmError::new(
                operation,
                tss_esapi::Error::Tss2Error(Tss2ResponseCode::from(code)),
            )));
        }
        Ok(response[HEADER_LEN..].to_vec())
    }

    fn context_load(&mut self, context: &TpmsContext) -> Result<u32, RawError> {
        let raw = TPMS_CONTEXT::try_from(context.clone())
            .map_err(|e| RawError::Tpm(TpmError::new("ContextLoad", e)))?;
        let blob_len = usize::from(raw.contextBlob.size).min(raw.contextBlob.buffer.len());
        let blob = tpm_context_blob(&raw.contextBlob.buffer[..blob_len])?;
        let mut params = Writer::default();
        params
            .raw(&raw.sequence.to_be_bytes())
            .u32(raw.savedHandle)
            .u32(raw.hierarchy)
            .tpm2b(blob);
        let command = command(TAG_NO_SESSIONS, CC_CONTEXT_LOAD, &[], &params.finish());
        let body = self.run("ContextLoad", &command)?;
        let mut r = Reader::new(&body);
        let handle = r
            .u32("loaded handle")
            .map_err(|_| RawError::Malformed("ContextLoad"))?;
        r.finish("ContextLoad")
            .map_err(|_| RawError::Malformed("ContextLoad"))?;
        Ok(handle)
    }

    fn certify_creation(
        &mut self,
        ak: u32,
        creation_hash: &[u8],
        ticket: &TPMT_TK_CREATION,
    ) -> Result<(Vec<u8>, Vec<u8>), RawError> {
        let digest_len = usize::from(ticket.digest.size).min(ticket.digest.buffer.len());
        let mut params = Writer::default();
        params
            .tpm2b(&[]) // qualifyingData
            .tpm2b(creation_hash)
            .u16(ALG_ECDSA)
            .u16(ALG_SHA256)
            .u16(ticket.tag)
            .u32(ticket.hierarchy)
            .tpm2b(&ticket.digest.buffer[..digest_len]);
        let command = command(
            TAG_SESSIONS,
            CC_CERTIFY_CREATION,
            &[ak, ak],
            &params.finish(),
        );
        let body = self.run("CertifyCreation", &command)?;
        let malformed = |_| RawError::Malformed("CertifyCreation");
        let mut r = Reader::new(&body);
        let parameter_size = usize::try_from(r.u32("parameterSize").map_err(malformed)?)
            .map_err(|_| RawError::Malformed("CertifyCreation"))?;
        let parameters = r.take(parameter_size, "parameters").map_err(malformed)?;
        let mut p = Reader::new(parameters);
        let attest = p.tpm2b("certifyInfo").map_err(malformed)?.to_vec();
        // TPMT_SIGNATURE is the rest of the parameter area.
        let signature = p
            .take(p.remaining(), "signature")
            .map_err(malformed)?
            .to_vec();
        if attest.is_empty() || signature.is_empty() {
            return Err(RawError::Malformed("CertifyCreation"));
        }
        Ok((attest, signature))
    }

    fn flush(&mut self, handle: u32) -> Result<(), RawError> {
        let mut params = Writer::default();
        params.u32(handle);
        let command = command(TAG_NO_SESSIONS, CC_FLUSH_CONTEXT, &[], &params.finish());
        self.run("FlushContext", &command).map(|_| ())
    }
}

/// The TPM's own context blob inside the one Esys_ContextSave returns,
/// which wraps it with ESAPI's metadata (tpm2-tss IESYS_CONTEXT_DATA: a
/// reserved u32, the TPM's TPM2B_CONTEXT_DATA, then the metadata).
fn tpm_context_blob(esys_blob: &[u8]) -> Result<&[u8], RawError> {
    let mut r = Reader::new(esys_blob);
    let malformed = |_| RawError::Malformed("ContextSave");
    r.u32("reserved").map_err(malformed)?;
    r.tpm2b("tpmContext").map_err(malformed)
}

/// Header, handles, a password authorization area when `tag` has sessions,
/// then the parameters.
fn command(tag: u16, code: u32, handles: &[u32], params: &[u8]) -> Vec<u8> {
    let mut body = Writer::default();
    for handle in handles {
        body.u32(*handle);
    }
    if tag == TAG_SESSIONS {
        // sessionHandle, nonce (empty), sessionAttributes, hmac (empty).
        let mut auth = Writer::default();
        auth.u32(PASSWORD_SESSION).tpm2b(&[]).u8(0).tpm2b(&[]);
        let auth = auth.finish();
        body.u32(u32::try_from(auth.len()).expect("a few bytes"))
            .raw(&auth);
    }
    body.raw(params);
    let body = body.finish();
    let mut out = Writer::default();
    out.u16(tag)
        .u32(u32::try_from(HEADER_LEN + body.len()).expect("a small command"))
        .u32(code)
        .raw(&body);
    out.finish()
}

/// Reads one response from a byte stream: the header, then the rest its
/// size field announces.
fn read_response(stream: &mut TcpStream, buffer: &mut [u8]) -> Result<usize, RawError> {
    let io = |what| move |source| RawError::Io { what, source };
    stream
        .read_exact(&mut buffer[..HEADER_LEN])
        .map_err(io("read"))?;
    let size = u32::from_be_bytes(buffer[2..6].try_into().expect("4 bytes"));
    let size = usize::try_from(size)
        .ok()
        .filter(|size| (HEADER_LEN..=buffer.len()).contains(size))
        .ok_or(RawError::Malformed("response header"))?;
    stream
        .read_exact(&mut buffer[HEADER_LEN..size])
        .map_err(io("read"))?;
    Ok(size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_carry_their_size_and_a_password_session() {
        let flush = command(TAG_NO_SESSIONS, CC_FLUSH_CONTEXT, &[], &[0x80, 0, 0, 1]);
        assert_eq!(
            flush,
            [0x80, 0x01, 0, 0, 0, 14, 0, 0, 0x01, 0x65, 0x80, 0, 0, 1]
        );
        let certify = command(TAG_SESSIONS, CC_CERTIFY_CREATION, &[1, 2], &[]);
        assert_eq!(
            certify[HEADER_LEN..],
            [
                0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 9, 0x40, 0, 0, 9, 0, 0, 0, 0, 0
            ]
        );
        assert_eq!(certify.len(), 31);
    }

    #[test]
    fn only_connections_that_allow_a_second_one_are_accepted() {
        for ok in ["device:/dev/tpmrm0", "swtpm:host=127.0.0.1,port=2321"] {
            assert!(RawChannel::for_tcti(&ok.parse().unwrap()).is_ok(), "{ok}");
        }
        for refused in ["device:/dev/tpm0", "mssim", "tabrmd"] {
            let err = RawChannel::for_tcti(&refused.parse().unwrap()).unwrap_err();
            assert!(err.to_string().contains("use device:/dev/tpmrm0"), "{err}");
        }
    }
}
