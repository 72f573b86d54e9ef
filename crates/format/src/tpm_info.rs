//! What a TPM says of itself, in text fit for a log line, a metric label
//! and a SPIRE selector: its manufacturer (TPM_PT_MANUFACTURER, four ASCII
//! bytes such as `IFX`, `STM`, `NTC`, `INTC`, `IBM` for swtpm), its vendor
//! string (TPM_PT_VENDOR_STRING_1..4) and its firmware version
//! (TPM_PT_FIRMWARE_VERSION_1 and _2, which also stand in a quote's
//! `firmwareVersion`).
//!
//! A TPM's answer is not trusted to be text: anything but printable ASCII
//! is dropped, and each value is cut to a bound, so that no TPM can grow a
//! log line or put a quote into a label.

/// The longest value kept: the vendor string's 16 bytes.
const MAX_LEN: usize = 16;

/// TPM_PT_MANUFACTURER: four ASCII bytes, padded with NULs or spaces.
pub fn manufacturer(raw: u32) -> String {
    printable(&raw.to_be_bytes())
}

/// TPM_PT_VENDOR_STRING_1..4 in order, each four ASCII bytes; the TPM
/// pads with NULs or spaces.
pub fn vendor_string(words: &[u32]) -> String {
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_be_bytes()).collect();
    printable(&bytes)
}

/// The firmware version as the four 16-bit halves of its two 32-bit words,
/// most significant first, in decimal: how fwupd and the vendors' update
/// advisories write it (Infineon's 7.85.4555.0, for one). The TCG leaves
/// the meaning of the bits to the vendor, so nothing else is read into it.
pub fn firmware_version(first: u32, second: u32) -> String {
    format!(
        "{}.{}.{}.{}",
        first >> 16,
        first & 0xffff,
        second >> 16,
        second & 0xffff
    )
}

/// The firmware version of a quote's 64-bit `firmwareVersion` field.
pub fn firmware_version_of(quoted: u64) -> String {
    firmware_version((quoted >> 32) as u32, quoted as u32)
}

fn printable(bytes: &[u8]) -> String {
    let text: String = bytes
        .iter()
        .copied()
        .take_while(|&b| b != 0)
        .filter(|b| b.is_ascii_graphic() || *b == b' ')
        .map(char::from)
        .take(MAX_LEN)
        .collect();
    text.trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swtpm_and_vendor_values_read_as_their_tools_print_them() {
        // swtpm (libtpms): "IBM", vendor "SW   TPM", as tpm2_getcap shows.
        assert_eq!(manufacturer(0x4942_4D00), "IBM");
        assert_eq!(manufacturer(0x4946_5800), "IFX");
        assert_eq!(manufacturer(0x494E_5443), "INTC");
        assert_eq!(vendor_string(&[0x5357_2020, 0x2054_504D, 0, 0]), "SW   TPM");
        assert_eq!(firmware_version(0x0007_0055, 0x11CB_0000), "7.85.4555.0");
        assert_eq!(firmware_version_of(0x0007_0055_11CB_0000), "7.85.4555.0");
    }

    #[test]
    fn a_tpm_cannot_put_markup_or_length_into_a_label() {
        assert_eq!(manufacturer(0x2241_0A42), "\"AB");
        assert_eq!(manufacturer(0x0041_4243), "");
        assert_eq!(vendor_string(&[0x4142_4344; 8]).len(), MAX_LEN);
        assert_eq!(vendor_string(&[0x41FF_7F42]), "AB");
    }
}
