//! The unit tests of `render` (render.rs), kept beside it once they
//! outgrew an inline module (ARCHITECTURE.md, "Where tests go").

use std::time::Duration;

use super::*;

fn build(version: &'static str) -> Build {
    Build {
        version,
        commit: None,
    }
}

#[test]
fn build_info_carries_the_commit_when_there_is_one() {
    let with_commit = Build {
        version: "1.2.3",
        commit: Some("abc1234-dirty"),
    };
    let text = render_registry(&Registry::new(), &with_commit);
    assert!(text.contains("sceau_build_info{version=\"1.2.3\",commit=\"abc1234-dirty\"} 1\n"));
}

fn lines(text: &str) -> Vec<&str> {
    text.lines().collect()
}

#[test]
fn a_fresh_registry_shows_every_family_and_the_always_present_series() {
    let registry = Registry::new();
    let text = render_registry(&registry, &build("1.2.3"));
    assert!(text.ends_with('\n'));
    let lines = lines(&text);
    for family in [
        "sceau_build_info gauge",
        "sceau_key_id_info gauge",
        "sceau_calls_total counter",
        "sceau_call_duration_seconds histogram",
        "sceau_tpm_command_duration_seconds histogram",
        "sceau_tpm_queue_depth gauge",
        "sceau_tpm_retries_total counter",
        "sceau_tpm_reopens_total counter",
        "sceau_tpm_deadline_misses_total counter",
        "sceau_decrypt_coalesced_total counter",
        "sceau_tpm_healthy gauge",
        "sceau_envelopes_refused_total counter",
    ] {
        assert!(
            lines.contains(&format!("# TYPE {family}").as_str()),
            "{family}"
        );
    }
    assert!(lines.contains(&"sceau_build_info{version=\"1.2.3\"} 1"));
    assert!(lines.contains(&"sceau_calls_total{method=\"Encrypt\",code=\"OK\"} 0"));
    assert!(lines.contains(&"sceau_calls_total{method=\"Status\",code=\"OK\"} 0"));
    assert!(lines.contains(&"sceau_tpm_healthy 1"));
    assert!(lines.contains(&"sceau_tpm_queue_depth 0"));
    assert!(lines.contains(&"sceau_envelopes_refused_total{reason=\"bad-signature\"} 0"));
    assert!(lines.contains(&"sceau_tpm_command_duration_seconds_count{command=\"Unseal\"} 0"));
    // No key_id before serving, no other codes, no `other` method.
    assert!(!text.contains("sceau_key_id_info{"));
    assert!(!text.contains("sceau_boot_policy_matched"));
    assert!(!text.contains("code=\"Internal\""));
    assert!(!text.contains("method=\"other\""));
}

#[test]
fn histograms_are_cumulative_and_agree_with_their_count() {
    let registry = Registry::new();
    registry.call(Method::Decrypt, 0, Duration::from_micros(700));
    registry.call(Method::Decrypt, 3, Duration::from_millis(30));
    registry.call(Method::Decrypt, 0, Duration::from_secs(100));
    let text = render_registry(&registry, &build("0"));
    let lines = lines(&text);
    for expected in [
        "sceau_call_duration_seconds_bucket{method=\"Decrypt\",le=\"0.0005\"} 0",
        "sceau_call_duration_seconds_bucket{method=\"Decrypt\",le=\"0.001\"} 1",
        "sceau_call_duration_seconds_bucket{method=\"Decrypt\",le=\"0.025\"} 1",
        "sceau_call_duration_seconds_bucket{method=\"Decrypt\",le=\"0.05\"} 2",
        "sceau_call_duration_seconds_bucket{method=\"Decrypt\",le=\"60\"} 2",
        "sceau_call_duration_seconds_bucket{method=\"Decrypt\",le=\"+Inf\"} 3",
        "sceau_call_duration_seconds_count{method=\"Decrypt\"} 3",
        "sceau_call_duration_seconds_sum{method=\"Decrypt\"} 100.0307",
        "sceau_calls_total{method=\"Decrypt\",code=\"OK\"} 2",
        "sceau_calls_total{method=\"Decrypt\",code=\"InvalidArgument\"} 1",
    ] {
        assert!(lines.contains(&expected), "missing {expected}\n{text}");
    }
}

#[test]
fn unknown_paths_and_codes_fall_into_fixed_labels() {
    let registry = Registry::new();
    registry.call(
        Method::from_path("/v2.KeyManagementService/Evil\"}"),
        99,
        Duration::ZERO,
    );
    registry.call(Method::Status, -1, Duration::ZERO);
    let text = render_registry(&registry, &build("0"));
    assert!(text.contains("sceau_calls_total{method=\"other\",code=\"Unknown\"} 1"));
    assert!(text.contains("sceau_calls_total{method=\"Status\",code=\"Unknown\"} 1"));
    assert!(text.contains("sceau_call_duration_seconds_count{method=\"other\"} 1"));
    assert!(!text.contains("Evil"));
}

/// The gauge exists only with --policy-key, and follows the last
/// evaluation (the integration test `boot_binding` drives the real one).
#[test]
fn the_boot_policy_gauge_appears_once_a_policy_was_evaluated() {
    let registry = Registry::new();
    assert!(!render_registry(&registry, &build("0")).contains("sceau_boot_policy_matched"));
    registry.set_boot_policy_matched(true);
    assert!(render_registry(&registry, &build("0")).contains("\nsceau_boot_policy_matched 1\n"));
    registry.set_boot_policy_matched(false);
    assert!(render_registry(&registry, &build("0")).contains("\nsceau_boot_policy_matched 0\n"));
}

#[test]
fn label_values_are_escaped() {
    let registry = Registry::new();
    registry.set_key_id("a\"b\\c\nd");
    let text = render_registry(&registry, &build("0"));
    assert!(text.contains("sceau_key_id_info{key_id=\"a\\\"b\\\\c\\nd\"} 1\n"));
    // A reload replaces it: one series, the new value.
    registry.set_key_id("other");
    let text = render_registry(&registry, &build("0"));
    assert_eq!(text.matches("sceau_key_id_info{").count(), 1, "{text}");
    assert!(text.contains("key_id=\"other\""));
}

#[test]
fn the_kek_generation_and_its_age_once_serving() {
    let registry = Registry::new();
    assert!(!render_registry(&registry, &build("0")).contains("sceau_kek_"));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    registry.set_kek(2, now - 91 * 86_400, 2);
    let text = render_registry(&registry, &build("0"));
    assert!(text.contains("\nsceau_kek_generation 2\n"), "{text}");
    assert!(text.contains("\nsceau_kek_open_generations 2\n"), "{text}");
    let age: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("sceau_kek_generation_age_seconds "))
        .unwrap()
        .parse()
        .unwrap();
    assert!((91 * 86_400..91 * 86_400 + 60).contains(&age), "{age}");
}

#[test]
fn every_line_is_a_comment_or_a_sample_with_a_number() {
    let registry = Registry::new();
    registry.set_key_id("sceau-0123456789abcdef");
    registry.tpm_command(TpmCommand::Create, Duration::from_millis(3));
    for line in render_registry(&registry, &build("0")).lines() {
        if line.starts_with('#') {
            assert!(line.starts_with("# HELP ") || line.starts_with("# TYPE "));
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect(line);
        assert!(value.parse::<f64>().is_ok(), "{line}");
        assert!(series.starts_with("sceau_"), "{line}");
    }
}

/// The shipped dashboard and alert rules name only metrics sceau
/// exports: every `sceau_…` name in them (a histogram's `_bucket`,
/// `_sum` and `_count` series read as their family) is a `# TYPE`
/// family of a registry with every optional family present. Shown
/// failing with a query on `sceau_tpm_errors_total`, which sceau does
/// not export.
#[test]
fn the_dashboard_and_the_alerts_name_only_exported_metrics() {
    let registry = Registry::new();
    registry.set_boot_policy_matched(true);
    registry.set_key_id("sceau-0.1-0000000000000000");
    registry.set_kek(1, 1, 1);
    registry.set_tpm_identity(sceau_tpm::identity::TpmIdentity {
        manufacturer: "IBM".into(),
        vendor: "SW TPM".into(),
        firmware: "1.2.3.4".into(),
        firmware_version: sceau_format::advisories::Version::from_first_word(0x0001_0002),
    });
    registry.set_tpm_advisories(vec!["CVE-2017-15361".into()]);
    let text = render_registry(&registry, &build("1.2.3"));
    let families: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    for (file, content) in [
        (
            "packaging/grafana/sceau-dashboard.json",
            include_str!("../../../packaging/grafana/sceau-dashboard.json"),
        ),
        (
            "packaging/prometheus/sceau-rules.yml",
            include_str!("../../../packaging/prometheus/sceau-rules.yml"),
        ),
    ] {
        let mut named = 0;
        for (at, _) in content.match_indices("sceau_") {
            if at > 0 && content.as_bytes()[at - 1].is_ascii_alphanumeric() {
                continue;
            }
            let name: String = content[at..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| name.strip_suffix(suffix))
                .filter(|family| families.contains(family))
                .unwrap_or(&name);
            assert!(
                families.contains(&family),
                "{file} names {name}, which sceau does not export ({families:?})"
            );
            named += 1;
        }
        assert!(named >= 10, "{file}: only {named} metric names");
    }
}
