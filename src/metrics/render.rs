//! The registry in the Prometheus text exposition format, version 0.0.4:
//! for each family a `# HELP` and a `# TYPE` line, then one sample per line,
//! `name{label="value",…} number`, lines ending in `\n`.
//!
//! Series that are always there (so that `rate()` and alerts see them from
//! the first scrape): every method's OK count and latency, every TPM
//! command's latency, the gauges. A call count with another code, and the
//! `other` method, appear once they are not zero.
#![forbid(unsafe_code)]

use std::fmt::Write;
use std::sync::atomic::Ordering;

use super::{BUCKETS, GRPC_CODES, Histogram, METRICS, Method, Refusal, Registry, TpmCommand};

/// The content type of this format, for the HTTP response.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// This build, as `sceau_build_info` labels it: the version and the git
/// commit `sceau --version` names (`unknown` outside git).
const BUILD: Build = Build {
    version: crate::build_info::BUILD.version,
    commit: Some(crate::build_info::BUILD.commit),
};

/// The labels of `sceau_build_info`.
pub(super) struct Build {
    pub version: &'static str,
    pub commit: Option<&'static str>,
}

/// The process registry, rendered.
pub fn render() -> String {
    render_registry(&METRICS, &BUILD)
}

/// `registry` rendered, with `build` in `sceau_build_info`.
pub(super) fn render_registry(registry: &Registry, build: &Build) -> String {
    let mut out = String::with_capacity(16 * 1024);
    header(
        &mut out,
        "sceau_build_info",
        "gauge",
        "Always 1; the labels say which sceau this is.",
    );
    let commit = build
        .commit
        .map(|commit| format!(",commit=\"{}\"", label_value(commit)))
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "sceau_build_info{{version=\"{}\"{commit}}} 1",
        label_value(build.version)
    );
    header(
        &mut out,
        "sceau_key_id_info",
        "gauge",
        "Always 1; key_id is the one Status and Encrypt report.",
    );
    let key_id = registry.key_id();
    if !key_id.is_empty() {
        let _ = writeln!(
            out,
            "sceau_key_id_info{{key_id=\"{}\"}} 1",
            label_value(&key_id)
        );
    }
    header(
        &mut out,
        "sceau_tpm_info",
        "gauge",
        "Always 1; the labels are the TPM's manufacturer, vendor string and firmware version.",
    );
    if let Some(tpm) = registry.tpm_identity() {
        let _ = writeln!(
            out,
            "sceau_tpm_info{{manufacturer=\"{}\",vendor=\"{}\",firmware=\"{}\"}} 1",
            label_value(&tpm.manufacturer),
            label_value(&tpm.vendor),
            label_value(&tpm.firmware)
        );
    }
    header(
        &mut out,
        "sceau_tpm_advisory",
        "gauge",
        "Always 1, a series per vendor advisory the TPM's manufacturer and firmware fall under.",
    );
    for cve in registry.tpm_advisories() {
        let _ = writeln!(out, "sceau_tpm_advisory{{cve=\"{}\"}} 1", label_value(&cve));
    }
    kek(&mut out, registry);
    calls(&mut out, registry);
    tpm(&mut out, registry);
    refusals(&mut out, registry);
    out
}

/// The KEK generation served: what the 90-day rotation alert reads
/// (packaging/prometheus/sceau-rules.yml).
fn kek(out: &mut String, registry: &Registry) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let Some((generation, age, open)) = registry.kek(now) else {
        return;
    };
    for (name, help, value) in [
        (
            "sceau_kek_generation",
            "The KEK generation new DEKs are sealed under (0: the SRK).",
            generation,
        ),
        (
            "sceau_kek_generation_age_seconds",
            "Seconds since the current KEK generation was made (generation 0: first served).",
            age,
        ),
        (
            "sceau_kek_open_generations",
            "KEK generations the TPM holds besides the SRK (at most 3).",
            open,
        ),
    ] {
        header(out, name, "gauge", help);
        let _ = writeln!(out, "{name} {value}");
    }
}

fn refusals(out: &mut String, registry: &Registry) {
    header(
        out,
        "sceau_envelopes_refused_total",
        "counter",
        "Cluster envelopes Decrypt refused before any TPM work, by reason.",
    );
    for (reason, count) in Refusal::CLASSES.iter().zip(&registry.envelopes_refused) {
        let _ = writeln!(
            out,
            "sceau_envelopes_refused_total{{reason=\"{reason}\"}} {}",
            count.load(Ordering::Relaxed)
        );
    }
}

fn calls(out: &mut String, registry: &Registry) {
    header(
        out,
        "sceau_calls_total",
        "counter",
        "Completed KMS calls by method and gRPC code.",
    );
    for method in Method::ALL {
        for (code, name) in GRPC_CODES.iter().enumerate() {
            let count = registry.calls[method as usize][code].load(Ordering::Relaxed);
            let always = code == 0 && method != Method::Other;
            if count > 0 || always {
                let _ = writeln!(
                    out,
                    "sceau_calls_total{{method=\"{}\",code=\"{name}\"}} {count}",
                    method.name()
                );
            }
        }
    }
    header(
        out,
        "sceau_call_duration_seconds",
        "histogram",
        "Time from a call's arrival to its answer, by method.",
    );
    for method in Method::ALL {
        let histogram = &registry.call_durations[method as usize];
        if method != Method::Other || histogram.snapshot().0[BUCKETS.len()] > 0 {
            samples(
                out,
                "sceau_call_duration_seconds",
                "method",
                method.name(),
                histogram,
            );
        }
    }
}

fn tpm(out: &mut String, registry: &Registry) {
    header(
        out,
        "sceau_tpm_command_duration_seconds",
        "histogram",
        "Time the TPM took to answer each command the TPM thread sent while serving.",
    );
    for command in TpmCommand::ALL {
        samples(
            out,
            "sceau_tpm_command_duration_seconds",
            "command",
            command.name(),
            &registry.tpm_commands[command as usize],
        );
    }
    let load = |value: &std::sync::atomic::AtomicU64| value.load(Ordering::Relaxed);
    let values = [
        registry.tpm_queue_depth.load(Ordering::Relaxed).max(0) as u64,
        load(&registry.tpm_retries),
        load(&registry.tpm_reopens),
        load(&registry.tpm_deadline_misses),
        load(&registry.decrypt_coalesced),
        u64::from(registry.tpm_healthy.load(Ordering::Relaxed)),
    ];
    for ((name, kind, help), value) in SCALARS.iter().zip(values) {
        header(out, name, kind, help);
        let _ = writeln!(out, "{name} {value}");
    }
    // Only with --policy-key: a 0 would otherwise read as "no boot state
    // matches" on every node that does not bind to one.
    let boot_policy = registry.boot_policy.load(Ordering::Relaxed);
    if boot_policy != 0 {
        let name = "sceau_boot_policy_matched";
        header(
            out,
            name,
            "gauge",
            "1 while a signed PCR policy matches the PCRs, else 0 (with --policy-key only).",
        );
        let _ = writeln!(out, "{name} {}", u8::from(boot_policy == 1));
    }
}

/// The families of one unlabelled sample each: name, type, help, in the
/// order of the values `tpm` reads.
const SCALARS: [(&str, &str, &str); 6] = [
    (
        "sceau_tpm_queue_depth",
        "gauge",
        "Requests waiting for the TPM thread.",
    ),
    (
        "sceau_tpm_retries_total",
        "counter",
        "TPM commands sent again after a retryable answer (busy, retry, new session).",
    ),
    (
        "sceau_tpm_reopens_total",
        "counter",
        "Attempts to reopen a lost TPM connection.",
    ),
    (
        "sceau_tpm_deadline_misses_total",
        "counter",
        "Requests whose TPM work did not finish within --request-deadline.",
    ),
    (
        "sceau_decrypt_coalesced_total",
        "counter",
        "Decrypts answered by another caller's TPM work on the same ciphertext.",
    ),
    (
        "sceau_tpm_healthy",
        "gauge",
        "1 if the TPM's last answer was healthy, else 0.",
    ),
];

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// One histogram's `_bucket` lines, then `_sum` and `_count`.
fn samples(out: &mut String, name: &str, label: &str, value: &str, histogram: &Histogram) {
    let (cumulative, sum) = histogram.snapshot();
    let bounds = BUCKETS.iter().map(|(le, _)| *le).chain(["+Inf"]);
    for (le, count) in bounds.zip(cumulative) {
        let _ = writeln!(
            out,
            "{name}_bucket{{{label}=\"{value}\",le=\"{le}\"}} {count}"
        );
    }
    let _ = writeln!(
        out,
        "{name}_sum{{{label}=\"{value}\"}} {}",
        sum.as_secs_f64()
    );
    let _ = writeln!(
        out,
        "{name}_count{{{label}=\"{value}\"}} {}",
        cumulative[BUCKETS.len()]
    );
}

/// A label value as the format requires: backslash, double quote and line
/// feed escaped. Every value sceau renders is its own, but a key_id or
/// version with one of these must still not break the scrape.
fn label_value(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => escaped.push_str("\\\\"),
            '"' => escaped.push_str("\\\""),
            '\n' => escaped.push_str("\\n"),
            c => escaped.push(c),
        }
    }
    escaped
}

#[cfg(test)]
mod tests;
