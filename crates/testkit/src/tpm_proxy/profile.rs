//! Per-command latency profiles (`crates/testkit/profiles/*.profile`):
//! their text format, its parser and the figures a command gets.

use super::*;

/// Per-command latencies: the model of one kind of TPM.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    default: Duration,
    /// Uniform jitter, ± this fraction of the latency.
    jitter: f64,
    latencies: BTreeMap<u32, Duration>,
}

/// Why a profile could not be read: the file and line, and what to write
/// instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileError {
    pub source_name: String,
    pub line: usize,
    pub message: String,
}

impl std::fmt::Display for ProfileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            0 => write!(f, "{}: {}", self.source_name, self.message),
            line => write!(f, "{}:{line}: {}", self.source_name, self.message),
        }
    }
}

impl std::error::Error for ProfileError {}

impl Profile {
    /// The discrete-TPM profile shipped with the kit (profiles/).
    pub fn discrete_tpm() -> Profile {
        Self::parse(
            include_str!("../../profiles/discrete-tpm.profile"),
            "discrete-tpm.profile",
        )
        .expect("the shipped discrete-TPM profile parses")
    }

    /// The firmware-TPM profile shipped with the kit (profiles/).
    pub fn firmware_tpm() -> Profile {
        Self::parse(
            include_str!("../../profiles/firmware-tpm.profile"),
            "firmware-tpm.profile",
        )
        .expect("the shipped firmware-TPM profile parses")
    }

    /// No delay at all: the proxy only counts and injects faults.
    pub fn instant() -> Profile {
        Profile {
            default: Duration::ZERO,
            jitter: 0.0,
            latencies: BTreeMap::new(),
        }
    }

    pub fn load(path: &Path) -> Result<Profile, ProfileError> {
        let text = std::fs::read_to_string(path).map_err(|e| ProfileError {
            source_name: path.display().to_string(),
            line: 0,
            message: format!("cannot read the profile: {e}"),
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses the profile format: one `CommandName milliseconds` per line
    /// (a TPM2_CC name as in [`command_name`], or a hex code `0x…`),
    /// `default milliseconds` for every other command (required), and
    /// optionally `jitter percent`. `#` starts a comment.
    pub fn parse(text: &str, source_name: &str) -> Result<Profile, ProfileError> {
        let error = |line: usize, message: String| ProfileError {
            source_name: source_name.to_string(),
            line,
            message,
        };
        let (mut default, mut jitter) = (None, None);
        let mut latencies = BTreeMap::new();
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            let content = raw.split('#').next().unwrap_or_default();
            let words: Vec<&str> = content.split_whitespace().collect();
            let (key, value) = match words.as_slice() {
                [] => continue,
                [key, value] => (*key, *value),
                _ => {
                    return Err(error(
                        line,
                        format!(
                            "expected `CommandName milliseconds`, `default milliseconds` or \
                             `jitter percent`, got {:?}",
                            content.trim()
                        ),
                    ));
                }
            };
            let number = value
                .parse::<f64>()
                .ok()
                .filter(|n| n.is_finite() && *n >= 0.0)
                .ok_or_else(|| {
                    error(
                        line,
                        format!("{key}: {value:?} is not a non-negative number"),
                    )
                })?;
            let repeated = || error(line, format!("{key} is given twice"));
            match key {
                "default" if default.is_some() => return Err(repeated()),
                "default" => default = Some(Duration::from_secs_f64(number / 1000.0)),
                "jitter" if jitter.is_some() => return Err(repeated()),
                "jitter" if number > 100.0 => {
                    return Err(error(
                        line,
                        format!("jitter {value}: a percentage from 0 to 100"),
                    ));
                }
                "jitter" => jitter = Some(number / 100.0),
                name => {
                    let code = command_code(name).ok_or_else(|| {
                        error(
                            line,
                            format!(
                                "unknown command {name:?}: use a TPM2_CC name such as Create \
                                 or Unseal, or the hex code (0x153)"
                            ),
                        )
                    })?;
                    let latency = Duration::from_secs_f64(number / 1000.0);
                    if latencies.insert(code, latency).is_some() {
                        return Err(repeated());
                    }
                }
            }
        }
        let default = default.ok_or_else(|| {
            error(
                0,
                "no `default milliseconds` line: say how long the commands without a line \
                 of their own take"
                    .to_string(),
            )
        })?;
        Ok(Profile {
            default,
            jitter: jitter.unwrap_or(0.0),
            latencies,
        })
    }

    /// The modelled latency of `code`, before jitter and scale.
    pub fn latency(&self, code: u32) -> Duration {
        self.latencies.get(&code).copied().unwrap_or(self.default)
    }

    /// The jitter, as a fraction (0.15 for `jitter 15`).
    pub fn jitter(&self) -> f64 {
        self.jitter
    }
}
