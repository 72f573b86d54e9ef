//! PCR lists, `tpm2_pcrread` text, PolicyPCR digests and signed policy
//! files. The digest vector is a swtpm's own: `tpm2_pcrextend 7:sha256=0…01`,
//! then in a trial session `tpm2_policypcr -l sha256:7,11`.

use super::*;
use crate::policy_key::PolicySigner;
use crate::revocation::Serial;

/// `tpm2_pcrread sha1:7+sha256:0,7,11` on that swtpm.
const PCRREAD: &str = "\
  sha1:
    7 : 0x0000000000000000000000000000000000000000
  sha256:
    0 : 0x0000000000000000000000000000000000000000000000000000000000000000
    7 : 0x90F4B39548DF55AD6187A1D20D731ECEE78C545B94AFD16F42EF7592D99CD365
    11: 0x0000000000000000000000000000000000000000000000000000000000000000
";
const POLICY_PCR_7_11: &str = "1613d540a9dfc3654f9931b416cd2cf332affac081fb7acd7b1ac739e1e81006";

#[test]
fn the_policy_pcr_digest_is_the_tpms() {
    let values = PcrValues::parse(PCRREAD).unwrap();
    assert_eq!(values.iter().count(), 3, "the sha1 line is skipped");
    let selection = PcrSelection::parse("7,11").unwrap();
    assert_eq!(
        hex(&policy_pcr_digest(selection, &values).unwrap()),
        POLICY_PCR_7_11
    );
    // The selection, whatever order it was written in, is hashed in PCR order.
    assert_eq!(PcrSelection::parse("11, 7").unwrap(), selection);
    assert_eq!(
        selection.tpml(),
        [0, 0, 0, 1, 0x00, 0x0B, 3, 0x80, 0x08, 0x00]
    );
    assert_eq!(
        policy_pcr_digest(PcrSelection::parse("7,12").unwrap(), &values),
        Err(PolicyError::MissingValue(12))
    );
}

#[test]
fn pcr_values_print_as_tpm2_pcrread_does_and_read_back() {
    let values = PcrValues::parse(PCRREAD).unwrap();
    let text = values.to_text();
    assert!(PCRREAD.ends_with(&text[..]), "{text}");
    assert_eq!(PcrValues::parse(&text).unwrap(), values);
}

#[test]
fn pcr_lists_are_plain_numbers_below_24() {
    for bad in ["", "7,", "24", "+7", "0x7", "7,7", "-1", "007", "7 11"] {
        assert!(PcrSelection::parse(bad).is_err(), "{bad:?}");
    }
    assert_eq!(PcrSelection::parse("0,23").unwrap().to_string(), "0,23");
    // Found by the boot_policy fuzz target: the refused list was echoed as
    // it came, control characters and all.
    let hostile = PcrSelection::parse("7\u{1b}]0;x\u{7}")
        .unwrap_err()
        .to_string();
    assert!(!hostile.chars().any(char::is_control), "{hostile:?}");
    for bad in [
        "  sha256:\n    7 : 0x1234\n",
        "  sha256:\n    24: 0x90F4B39548DF55AD6187A1D20D731ECEE78C545B94AFD16F42EF7592D99CD365\n",
        "  sha256:\n    7 : +0F4B39548DF55AD6187A1D20D731ECEE78C545B94AFD16F42EF7592D99CD365\n",
        "  sha1:\n    7 : 0x0000000000000000000000000000000000000000\n",
        "  sha256:\n    7 0x90F4B39548DF55AD6187A1D20D731ECEE78C545B94AFD16F42EF7592D99CD365\n",
    ] {
        assert!(PcrValues::parse(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn signed_policy_files_round_trip_and_are_checked() {
    let signer = PolicySigner::generate();
    let values = PcrValues::parse(PCRREAD).unwrap();
    let pcrs = PcrSelection::parse("7,11").unwrap();
    let serial = Serial::new(3);
    let signed = SignedPolicy::sign(&signer, pcrs, &values, serial).unwrap();
    assert_eq!(
        signed.policy,
        serial.policy_secret(&policy_pcr_digest(pcrs, &values).unwrap())
    );
    let text = write_signed_policies(std::slice::from_ref(&signed));
    assert!(
        text.starts_with("{\"sha256\":[{\"pcrs\":[7,11],\"pkfp\":\""),
        "{text}"
    );
    let read = parse_signed_policies(&text).unwrap();
    assert_eq!(read, std::slice::from_ref(&signed));
    signer
        .public()
        .verify(&read[0].policy, &read[0].signature)
        .unwrap();
    assert!(read[0].names_key(&signer.public()));
    assert!(!read[0].names_key(&PolicySigner::generate().public()));

    // The values it was signed at ride along and must give its digest: a
    // file whose values were edited (to mislead the mismatch log) is
    // refused. Without the digest check, the altered file parses.
    assert_eq!(read[0].values, Some(values.select(pcrs).unwrap()));
    assert!(
        text.contains("\"sceau-pcr-values\":{\"7\":\"90f4b395"),
        "{text}"
    );
    let altered = text.replace("\"7\":\"90f4b395", "\"7\":\"90f4b396");
    assert_eq!(
        parse_signed_policies(&altered),
        Err(PolicyError::ValuesNotSigned)
    );
    // The serial is committed to by the digest alone: another serial in the
    // file (so that `policy show` would name the wrong one to revoke) is
    // refused like altered values, and a serial without values is refused.
    // Shown failing: with the serial left out of the digest check, the
    // edited file parsed.
    assert!(text.contains(",\"sceau-revocation-serial\":3}"), "{text}");
    let reserialed = text.replace("serial\":3}", "serial\":4}");
    assert_eq!(
        parse_signed_policies(&reserialed),
        Err(PolicyError::ValuesNotSigned)
    );
    let without_values = format!(
        "{{\"sha256\":[{{\"pcrs\":[7],\"pol\":\"{}\",\"sig\":\"AQID\",\"sceau-revocation-serial\":3}}]}}",
        "11".repeat(32)
    );
    assert_eq!(
        parse_signed_policies(&without_values),
        Err(PolicyError::SerialWithoutValues)
    );
    for (bad, why) in [
        (
            text.replace(",\"11\":\"", ",\"12\":\""),
            "a PCR it does not cover",
        ),
        (
            text.replace("\"7\":\"90f4b395", "\"7\":\"90f4"),
            "a short value",
        ),
        (
            text.replace(",\"11\":\"0000", ",\"7\":\"0000"),
            "a PCR named twice and one missing",
        ),
    ] {
        // A repeated name is the JSON reader's refusal, the rest the shape's.
        assert!(parse_signed_policies(&bad).is_err(), "{why}: {bad}");
    }

    // systemd's files may carry other banks, and entries without pkfp.
    let systemd = format!(
        "{{\"sha1\":[{{\"pcrs\":[11],\"pol\":\"{}\",\"sig\":\"AA==\"}}],\"sha256\":[{{\"pcrs\":[11],\"pol\":\"{}\",\"sig\":\"AQID\"}}]}}",
        "00".repeat(20),
        "11".repeat(32)
    );
    let read = parse_signed_policies(&systemd).unwrap();
    assert_eq!(read.len(), 1);
    assert_eq!(read[0].key_fingerprint, None);
    assert_eq!(read[0].signature, [1, 2, 3]);

    let pol = "11".repeat(32);
    for (bad, why) in [
        ("[]".to_string(), "not an object"),
        ("{\"sha1\":[]}".to_string(), "no sha256"),
        ("{\"sha256\":[]}".to_string(), "no policy"),
        (
            format!("{{\"sha256\":[{{\"pcrs\":[11],\"pol\":\"{pol}\"}}]}}"),
            "unsigned",
        ),
        (
            format!("{{\"sha256\":[{{\"pcrs\":[],\"pol\":\"{pol}\",\"sig\":\"AQ==\"}}]}}"),
            "no PCR",
        ),
        (
            format!("{{\"sha256\":[{{\"pcrs\":[24],\"pol\":\"{pol}\",\"sig\":\"AQ==\"}}]}}"),
            "PCR 24",
        ),
        (
            format!(
                "{{\"sha256\":[{{\"pcrs\":[11],\"pol\":\"{}\",\"sig\":\"AQ==\"}}]}}",
                "11".repeat(31)
            ),
            "short pol",
        ),
        (
            format!("{{\"sha256\":[{{\"pcrs\":[11],\"pol\":\"{pol}\",\"sig\":\"!\"}}]}}"),
            "bad base64",
        ),
        (
            format!(
                "{{\"sha256\":[{{\"pcrs\":[11],\"pol\":\"{pol}\",\"sig\":\"AQ==\",\"x\":1}}]}}"
            ),
            "unknown member",
        ),
        (
            format!(
                "{{\"sha256\":[{{\"pcrs\":[11],\"pol\":\"{pol}\",\"sig\":\"{}\"}}]}}",
                "A".repeat(700)
            ),
            "long sig",
        ),
        (" ".repeat(MAX_POLICY_FILE_LEN + 1), "too large"),
    ] {
        assert!(parse_signed_policies(&bad).is_err(), "{why}");
    }
    let many = format!(
        "{{\"sha256\":[{}]}}",
        vec![format!("{{\"pcrs\":[11],\"pol\":\"{pol}\",\"sig\":\"AQ==\"}}"); MAX_POLICIES + 1]
            .join(",")
    );
    assert_eq!(parse_signed_policies(&many), Err(PolicyError::TooMany));
}

// Shown failing: without `check_bindable` in `sign`, a policy over PCR 23
// was signed.
#[test]
fn resettable_pcrs_are_never_signed_and_firmware_pcrs_are_told_apart() {
    let signer = PolicySigner::generate();
    let mut values = PcrValues::parse(PCRREAD).unwrap();
    values.insert(16, [1; 32]);
    values.insert(23, [2; 32]);
    for (list, pcr) in [("7,16", 16), ("23", 23)] {
        let pcrs = PcrSelection::parse(list).unwrap();
        assert_eq!(pcrs.resettable(), Some(pcr));
        assert_eq!(
            SignedPolicy::sign(&signer, pcrs, &values, Serial::new(0)),
            Err(PolicyError::Resettable(pcr))
        );
    }
    let eleven = PcrSelection::parse("11").unwrap();
    let seven_eleven = PcrSelection::parse("7,11").unwrap();
    let four = PcrSelection::parse("4").unwrap();
    assert!(!eleven.covers_firmware());
    assert!(seven_eleven.covers_firmware() && four.covers_firmware());
    assert!(!PcrSelection::parse("8,9,12,15").unwrap().covers_firmware());
}
