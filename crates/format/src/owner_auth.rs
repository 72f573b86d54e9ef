//! The owner hierarchy's authorization value as the systemd credential
//! `tpm-owner-auth` holds it, and the SRK Name an operator pins with
//! `--expect-srk-name`.
//!
//! The credential holds exactly what was given to `tpm2_changeauth -c o`:
//! plain bytes, or tpm2-tools' `hex:` and `str:` forms, so that one value
//! works in both places. One trailing newline is dropped, because `echo`
//! and editors add it and no one means it as part of a password.

use zeroize::Zeroizing;

use super::text::decode_hex;
use super::wire::NAME_LEN;

/// TPM2B_AUTH's buffer is a TPMU_HA: 64 bytes, SHA-512's digest. A TPM
/// without SHA-512 takes at most its largest digest, and says so itself.
pub const MAX_OWNER_AUTH_LEN: usize = 64;

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum OwnerAuthError {
    #[error(
        "is empty: an empty owner authorization is the TPM's default and needs no credential; \
         remove the credential, or write the value set with tpm2_changeauth -c o"
    )]
    Empty,
    #[error(
        "holds {0} bytes, and a TPM takes at most {MAX_OWNER_AUTH_LEN}: write the value set \
         with tpm2_changeauth -c o"
    )]
    TooLong(usize),
    #[error(
        "starts with hex: but the rest is not an even number of hex digits: write the value \
         as given to tpm2_changeauth -c o"
    )]
    BadHex,
}

/// The authorization value in a credential's bytes, in memory that is
/// wiped when dropped.
pub fn parse(credential: &[u8]) -> Result<Zeroizing<Vec<u8>>, OwnerAuthError> {
    let text = credential.strip_suffix(b"\n").unwrap_or(credential);
    let value = if let Some(digits) = text.strip_prefix(b"hex:") {
        let digits = std::str::from_utf8(digits).map_err(|_| OwnerAuthError::BadHex)?;
        Zeroizing::new(decode_hex(digits).ok_or(OwnerAuthError::BadHex)?)
    } else {
        Zeroizing::new(text.strip_prefix(b"str:").unwrap_or(text).to_vec())
    };
    match value.len() {
        0 => Err(OwnerAuthError::Empty),
        n if n > MAX_OWNER_AUTH_LEN => Err(OwnerAuthError::TooLong(n)),
        _ => Ok(value),
    }
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum SrkNameError {
    #[error(
        "is not a TPM Name: expected {} hex digits starting 000b (SHA-256), as `sceau \
         srk-public` and `tpm2_readpublic -n` print it",
        NAME_LEN * 2
    )]
    Malformed,
}

/// A SHA-256 TPM Name in hex (`000b` and 32 bytes), either case.
pub fn parse_srk_name(text: &str) -> Result<[u8; NAME_LEN], SrkNameError> {
    let bytes = decode_hex(text.trim()).ok_or(SrkNameError::Malformed)?;
    let name: [u8; NAME_LEN] = bytes.try_into().map_err(|_| SrkNameError::Malformed)?;
    match name[..2] {
        [0x00, 0x0b] => Ok(name),
        _ => Err(SrkNameError::Malformed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_hex_and_str_forms_are_those_of_tpm2_tools() {
        assert_eq!(parse(b"s3cret").unwrap().as_slice(), b"s3cret");
        assert_eq!(parse(b"s3cret\n").unwrap().as_slice(), b"s3cret");
        assert_eq!(parse(b"str:hex:x").unwrap().as_slice(), b"hex:x");
        assert_eq!(parse(b"hex:00FF10\n").unwrap().as_slice(), [0, 0xff, 0x10]);
        // Only one newline is dropped: a second one is the value's own.
        assert_eq!(parse(b"a\n\n").unwrap().as_slice(), b"a\n");
    }

    #[test]
    fn empty_long_and_bad_hex_values_are_refused() {
        assert_eq!(parse(b""), Err(OwnerAuthError::Empty));
        assert_eq!(parse(b"\n"), Err(OwnerAuthError::Empty));
        assert_eq!(parse(b"hex:"), Err(OwnerAuthError::Empty));
        assert_eq!(parse(&[b'a'; 65]), Err(OwnerAuthError::TooLong(65)));
        assert!(parse(&[b'a'; 64]).is_ok());
        assert_eq!(parse(b"hex:abc"), Err(OwnerAuthError::BadHex));
        assert_eq!(parse(b"hex:zz"), Err(OwnerAuthError::BadHex));
        assert_eq!(parse(b"hex:\xff\xfe"), Err(OwnerAuthError::BadHex));
    }

    #[test]
    fn srk_names_are_sha256_names() {
        let good = format!("000b{}", "ab".repeat(32));
        assert_eq!(parse_srk_name(&good).unwrap()[..3], [0, 0x0b, 0xab]);
        assert_eq!(
            parse_srk_name(&good.to_uppercase()).unwrap()[2],
            0xab,
            "either case"
        );
        for bad in [
            "",
            "000b",
            &good[..66],
            &format!("{good}00"),
            &format!("0004{}", "ab".repeat(32)),
            &format!("000b{}", "zz".repeat(32)),
        ] {
            assert_eq!(parse_srk_name(bad), Err(SrkNameError::Malformed), "{bad}");
        }
    }
}
