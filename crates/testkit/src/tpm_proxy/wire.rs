//! What crosses the command port: TPM2_CC names and codes, the 10-byte
//! header, whole messages read within a bound, and the proxy's own error
//! answers.

use super::*;

/// TPM2_CC values (TPM 2.0 Part 2, table 12; tpm2-tss 3.2.1
/// `include/tss2/tss2_tpm2_types.h`) of the commands sceau and its SPIRE
/// plugins send, and those a soak or a by-hand session is likely to see.
/// Other codes print as hex.
pub(super) const COMMAND_NAMES: &[(u32, &str)] = &[
    (0x120, "EvictControl"),
    (0x126, "Clear"),
    (0x12A, "NV_DefineSpace"),
    (0x131, "CreatePrimary"),
    (0x134, "NV_Increment"),
    (0x137, "NV_Write"),
    (0x139, "DictionaryAttackLockReset"),
    (0x13E, "SequenceComplete"),
    (0x143, "SelfTest"),
    (0x144, "Startup"),
    (0x145, "Shutdown"),
    (0x147, "ActivateCredential"),
    (0x148, "Certify"),
    (0x14A, "CertifyCreation"),
    (0x14B, "Duplicate"),
    (0x14E, "NV_Read"),
    (0x151, "PolicySecret"),
    (0x153, "Create"),
    (0x154, "ECDH_ZGen"),
    (0x156, "Import"),
    (0x157, "Load"),
    (0x158, "Quote"),
    (0x159, "RSA_Decrypt"),
    (0x15D, "Sign"),
    (0x15E, "Unseal"),
    (0x160, "PolicySigned"),
    (0x161, "ContextLoad"),
    (0x162, "ContextSave"),
    (0x165, "FlushContext"),
    (0x167, "LoadExternal"),
    (0x168, "MakeCredential"),
    (0x169, "NV_ReadPublic"),
    (0x16A, "PolicyAuthorize"),
    (0x16B, "PolicyAuthValue"),
    (0x16C, "PolicyCommandCode"),
    (0x171, "PolicyOR"),
    (0x173, "ReadPublic"),
    (0x176, "StartAuthSession"),
    (0x177, "VerifySignature"),
    (0x17A, "GetCapability"),
    (0x17B, "GetRandom"),
    (0x17D, "Hash"),
    (0x17E, "PCR_Read"),
    (0x17F, "PolicyPCR"),
    (0x182, "PCR_Extend"),
    (0x186, "HashSequenceStart"),
    (0x189, "PolicyGetDigest"),
    (0x18A, "TestParms"),
    (0x191, "CreateLoaded"),
];

/// Command codes whose response handle area holds one new handle.
pub(super) const RETURNS_A_HANDLE: [u32; 6] = [0x131, 0x157, 0x167, 0x191, 0x176, 0x161];
pub(super) const CC_FLUSH_CONTEXT: u32 = 0x165;
pub(super) const CC_STARTUP: u32 = 0x144;
pub(super) const CC_CREATE_PRIMARY: u32 = 0x131;

/// tag, size, command code (or return code): the header of every command
/// and response.
pub const HEADER_LEN: usize = 10;
/// TPM_ST_NO_SESSIONS: the tag of every error response.
const TAG_NO_SESSIONS: u16 = 0x8001;
/// Far above any real command (TPM2_MAX_COMMAND_SIZE is 4096 on common
/// parts); a larger size field means the stream is out of step.
pub(super) const MAX_MESSAGE: u32 = 1 << 16;

/// TPM return codes the fault matrix injects (TPM 2.0 Part 2, table 16).
pub mod rc {
    pub const OBJECT_MEMORY: u32 = 0x902;
    pub const SESSION_MEMORY: u32 = 0x903;
    pub const MEMORY: u32 = 0x904;
    pub const YIELDED: u32 = 0x908;
    pub const TESTING: u32 = 0x90A;
    pub const RETRY: u32 = 0x922;
}

/// The name of a TPM2_CC value, or `0x…` for one without a name here.
pub fn command_name(code: u32) -> Cow<'static, str> {
    match COMMAND_NAMES.iter().find(|(c, _)| *c == code) {
        Some((_, name)) => Cow::Borrowed(name),
        None => Cow::Owned(format!("{code:#x}")),
    }
}

/// The TPM2_CC value of a command name (as in [`command_name`]) or of a hex
/// code written `0x…`.
pub fn command_code(name: &str) -> Option<u32> {
    if let Some(hex) = name.strip_prefix("0x") {
        return u32::from_str_radix(hex, 16).ok();
    }
    COMMAND_NAMES
        .iter()
        .find(|(_, n)| *n == name)
        .map(|(code, _)| *code)
}

/// The header of a command or response: tag, total size, and the command
/// code (in a command) or return code (in a response).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub tag: u16,
    pub size: u32,
    pub code: u32,
}

impl Header {
    /// Parses a header; refuses a size that cannot frame a TPM message.
    pub fn parse(bytes: &[u8; HEADER_LEN]) -> Result<Header, String> {
        let header = Header {
            tag: u16::from_be_bytes([bytes[0], bytes[1]]),
            size: u32::from_be_bytes([bytes[2], bytes[3], bytes[4], bytes[5]]),
            code: u32::from_be_bytes([bytes[6], bytes[7], bytes[8], bytes[9]]),
        };
        if header.size < HEADER_LEN as u32 || header.size > MAX_MESSAGE {
            return Err(format!(
                "a TPM message of {} bytes (header {bytes:02x?}): not a TPM 2.0 stream",
                header.size
            ));
        }
        Ok(header)
    }
}

/// The response a TPM gives when it refuses a command with `code`:
/// `80 01 | 00 00 00 0a | code`.
pub fn error_response(code: u32) -> Vec<u8> {
    let mut response = Vec::with_capacity(HEADER_LEN);
    response.extend_from_slice(&TAG_NO_SESSIONS.to_be_bytes());
    response.extend_from_slice(&(HEADER_LEN as u32).to_be_bytes());
    response.extend_from_slice(&code.to_be_bytes());
    response
}

/// Reads one whole TPM message (command or response). `Ok(None)` when the
/// peer closed the connection before its first byte.
pub fn read_message(stream: &mut impl Read) -> std::io::Result<Option<(Header, Vec<u8>)>> {
    let mut header_bytes = [0u8; HEADER_LEN];
    let mut filled = 0;
    while filled < HEADER_LEN {
        match stream.read(&mut header_bytes[filled..]) {
            Ok(0) if filled == 0 => return Ok(None),
            Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
            Ok(n) => filled += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let header = Header::parse(&header_bytes)
        .map_err(|why| std::io::Error::new(ErrorKind::InvalidData, why))?;
    let mut message = header_bytes.to_vec();
    message.resize(header.size as usize, 0);
    stream.read_exact(&mut message[HEADER_LEN..])?;
    Ok(Some((header, message)))
}
