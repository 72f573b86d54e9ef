//! The command-line table of `sceau` and `sceau-recover`.
//!
//! Each binary declares every flag once, as a [`Flag`] (name, value name,
//! one-line help, longer help, default), and every command once, as a
//! [`CommandSpec`] listing its flags. From those declarations come the main
//! help, each command's help, the usage line printed with a usage error, the
//! walk over the arguments ([`parse_flags`]) and the way back from options to
//! arguments ([`Args`]), which the unit tests and the `cli` fuzz target use.
//! The man page ([`man`]) and the bash and zsh completions ([`complete`]) are
//! rendered from the same table, so they cannot drift from `--help`; the
//! version text ([`build_info`]) is shared too. The binaries keep only what is
//! theirs: the typed value of each flag.
//!
//! Hand-written rather than clap or lexopt: the two binaries have about
//! twenty flags, and every dependency of a KMS plugin is code a reviewer must
//! read (audit/dependencies.md, "Command line", has the measurements).

use std::fmt::Write as _;

pub mod build_info;
pub mod build_script;
pub mod check;
pub mod complete;
pub mod man;

/// One flag, declared once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flag {
    /// `--name`.
    pub name: &'static str,
    /// The value's placeholder (`PATH`); `None` for a switch.
    pub value: Option<&'static str>,
    /// One line, shown in the main help and in the command's help.
    pub help: &'static str,
    /// Further lines, shown only in the command's help.
    pub long_help: &'static str,
    /// The value used when the flag is absent, shown as `[default: …]`.
    pub default: Option<&'static str>,
    /// An environment variable that stands in for the flag when it is absent.
    pub env: Option<&'static str>,
}

impl Flag {
    /// A flag that takes a value.
    pub const fn value(name: &'static str, value: &'static str, help: &'static str) -> Self {
        Self {
            name,
            value: Some(value),
            help,
            long_help: "",
            default: None,
            env: None,
        }
    }

    /// A flag that takes no value.
    pub const fn switch(name: &'static str, help: &'static str) -> Self {
        Self {
            name,
            value: None,
            help,
            long_help: "",
            default: None,
            env: None,
        }
    }

    pub const fn default(self, default: &'static str) -> Self {
        Self {
            default: Some(default),
            ..self
        }
    }

    pub const fn env(self, env: &'static str) -> Self {
        Self {
            env: Some(env),
            ..self
        }
    }

    pub const fn long_help(self, long_help: &'static str) -> Self {
        Self { long_help, ..self }
    }

    /// `--name VALUE`, as the help shows it.
    pub fn synopsis(&self) -> String {
        match self.value {
            Some(value) => format!("{} {value}", self.name),
            None => self.name.to_string(),
        }
    }

    /// `-h, --help` for the two options with a short form, else the synopsis.
    pub fn with_short(&self) -> String {
        match self.name {
            "--help" => "-h, --help".into(),
            "--version" => "-V, --version".into(),
            _ => self.synopsis(),
        }
    }

    /// The one-line help with its default appended.
    fn short_line(&self) -> String {
        match (self.default, self.env) {
            (Some(default), Some(env)) => format!("{} [default: {default}, or ${env}]", self.help),
            (Some(default), None) => format!("{} [default: {default}]", self.help),
            (None, Some(env)) => format!("{} [default: ${env}]", self.help),
            (None, None) => self.help.to_string(),
        }
    }
}

/// One command (`serve`, `recover`, …), declared once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommandSpec {
    pub name: &'static str,
    /// One line in the main help's list of commands.
    pub summary: &'static str,
    /// The first line of the command's own help.
    pub about: &'static str,
    /// What follows the program name on the usage line.
    pub usage: &'static str,
    /// The steps a command takes before its flags (`enroll request …`);
    /// empty for a command without steps.
    pub steps: &'static [&'static str],
    pub flags: &'static [&'static Flag],
    /// Free text after the options (examples, notes).
    pub notes: &'static str,
}

impl CommandSpec {
    /// The flag called `name`, if this command has it.
    pub fn flag(&self, name: &str) -> Option<&'static Flag> {
        self.flags.iter().copied().find(|flag| flag.name == name)
    }
}

/// A binary: its commands, and the text around them in the main help.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Program {
    pub name: &'static str,
    /// `CARGO_PKG_VERSION`, for the man page's title line.
    pub version: &'static str,
    /// The first line of the main help: `name: what it is`.
    pub about: &'static str,
    pub commands: &'static [&'static CommandSpec],
    /// Text after the list of commands.
    pub notes: &'static str,
    /// Commands whose one-line option help the main help repeats.
    pub options_in_main_help: &'static [&'static str],
    /// Options of the program itself, given instead of a command, besides
    /// `--help` and `--version` (which every program has): [`GENERATE`].
    pub options: &'static [&'static Flag],
    /// Environment variables and what they do, at the end of the main help
    /// and in the man page.
    pub environment: &'static [(&'static str, &'static str)],
    /// What only the man page says.
    pub manual: Manual,
}

/// The parts of a man page the help texts do not have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Manual {
    /// `8` for a daemon and administration tool, `1` for a user command.
    pub section: &'static str,
    /// The date on the title line, `YYYY-MM-DD`: the commit's, from
    /// [`build_date!`] (empty when unknown).
    pub date: &'static str,
    /// The DESCRIPTION section, paragraphs separated by blank lines.
    pub description: &'static str,
    /// The FILES section: path and what it is.
    pub files: &'static [(&'static str, &'static str)],
    /// The SEE ALSO section: `name(section)` each.
    pub see_also: &'static [&'static str],
}

/// `-h`, `--help`: every program has it, so it is not in [`Program::options`].
pub const HELP: Flag = Flag::switch(
    "--help",
    "Print help (`help COMMAND` or `COMMAND --help` explains a command in full)",
);
/// `-V`, `--version`: every program has it, like [`HELP`].
pub const VERSION: Flag = Flag::switch(
    "--version",
    "Print the version, git commit, build profile and features",
);
/// `--generate KIND`: the man page or a completion script, on standard
/// output. Declared here because both binaries have it, with one meaning.
pub const GENERATE: Flag = Flag::value(
    "--generate",
    "KIND",
    "Print the man page (man) or a completion script (complete-bash, complete-zsh)",
)
.long_help("e.g. `--generate man > NAME.8`; for packagers");

/// What `--generate` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Generate {
    Man,
    CompleteBash,
    CompleteZsh,
}

impl Generate {
    /// Every kind, with the value `--generate` takes for it.
    pub const ALL: [(&'static str, Generate); 3] = [
        ("man", Generate::Man),
        ("complete-bash", Generate::CompleteBash),
        ("complete-zsh", Generate::CompleteZsh),
    ];

    fn parse(value: &str) -> Result<Self, UsageError> {
        Self::ALL
            .iter()
            .find(|(name, _)| *name == value)
            .map(|(_, kind)| *kind)
            .ok_or_else(|| {
                invalid(
                    &GENERATE,
                    value,
                    "expected man, complete-bash or complete-zsh",
                )
            })
    }
}

/// Width of the flag column, indentation included (`      --flag VALUE  `).
const FLAG_INDENT: &str = "      ";

impl Program {
    pub fn command(&self, name: &str) -> Option<&'static CommandSpec> {
        self.commands.iter().copied().find(|c| c.name == name)
    }

    /// The text `--generate` prints.
    pub fn generate(&self, kind: Generate) -> String {
        match kind {
            Generate::Man => man::render(self),
            Generate::CompleteBash => complete::bash(self),
            Generate::CompleteZsh => complete::zsh(self),
        }
    }

    /// `Usage: …` of one command, or of the program when `command` is `None`.
    pub fn usage_line(&self, command: Option<&str>) -> String {
        match command.and_then(|name| self.command(name)) {
            Some(spec) => format!("Usage: {} {}", self.name, spec.usage),
            None => format!("Usage: {} <COMMAND> [OPTIONS]", self.name),
        }
    }

    /// `program --help`.
    pub fn main_help(&self) -> String {
        let mut out = format!("{}\n\n{}\n\nCommands:\n", self.about, self.usage_line(None));
        let width = self
            .commands
            .iter()
            .map(|c| c.name.len())
            .max()
            .unwrap_or(0)
            + 2;
        for command in self.commands {
            let _ = writeln!(out, "  {:width$}{}", command.name, command.summary);
        }
        if !self.notes.is_empty() {
            let _ = write!(out, "\n{}", self.notes);
        }
        for name in self.options_in_main_help {
            let Some(command) = self.command(name) else {
                continue;
            };
            let _ = writeln!(out, "\nOptions of `{} {}`:", self.name, command.name);
            let width = column_width(command.flags);
            for flag in command.flags {
                write_flag_line(&mut out, flag, width);
            }
        }
        out.push_str("\nOptions:\n");
        let flags = self.all_options();
        // Long names line up under `-h, --help`'s.
        let width = column_width(&flags) + 4;
        for flag in flags {
            let names = match flag.with_short() {
                short if short.starts_with("--") => format!("    {short}"),
                short => short,
            };
            let _ = writeln!(out, "  {names:width$}{}", flag.short_line());
        }
        if !self.environment.is_empty() {
            out.push_str("\nEnvironment:\n");
            let width = self
                .environment
                .iter()
                .map(|(n, _)| n.len())
                .max()
                .unwrap_or(0)
                + 2;
            for (name, what) in self.environment {
                let _ = writeln!(out, "  {name:width$}{what}");
            }
        }
        out
    }

    /// `--help`, `--version` and [`Program::options`], in that order.
    pub fn all_options(&self) -> Vec<&'static Flag> {
        [&HELP, &VERSION]
            .into_iter()
            .chain(self.options.iter().copied())
            .collect()
    }

    /// `program COMMAND --help`, or `program help COMMAND`.
    pub fn command_help(&self, command: &CommandSpec) -> String {
        let mut out = format!(
            "{}\n\n{}\n\nOptions:\n",
            command.about,
            self.usage_line(Some(command.name))
        );
        // At least wide enough for `  -h, --help  `.
        let width = column_width(command.flags).max(8);
        for flag in command.flags {
            write_flag_line(&mut out, flag, width);
            for line in flag.long_help.lines() {
                let _ = writeln!(out, "{FLAG_INDENT}{:width$}{line}", "");
            }
        }
        let _ = writeln!(out, "  -h, --help{:pad$}Print help", "", pad = width - 6);
        if !command.notes.is_empty() {
            let _ = write!(out, "\n{}", command.notes);
        }
        out
    }

    /// Every help text this program can print.
    pub fn help_texts(&self) -> Vec<String> {
        let mut texts = vec![self.main_help()];
        texts.extend(self.commands.iter().map(|c| self.command_help(c)));
        texts
    }

    /// The first step of parsing: help, version, or which command runs with
    /// which arguments.
    pub fn dispatch<'a>(&self, args: &'a [String]) -> Result<Invocation<'a>, UsageError> {
        let Some((first, rest)) = args.split_first() else {
            return Err(UsageError::new(
                None,
                Problem::NoCommand {
                    program: self.name,
                    commands: self.command_list(),
                },
            ));
        };
        match first.as_str() {
            "-h" | "--help" => Ok(Invocation::Help(self.main_help())),
            "-V" | "--version" => Ok(Invocation::Version),
            option
                if option.starts_with("--")
                    && self.options.iter().any(|f| {
                        option.split_once('=').map_or(option, |(name, _)| name) == f.name
                    }) =>
            {
                self.program_option(option, rest)
            }
            "help" => match rest.first() {
                None => Ok(Invocation::Help(self.main_help())),
                Some(name) => self
                    .command(name)
                    .map(|command| Invocation::Help(self.command_help(command)))
                    .ok_or_else(|| self.unknown_command(name)),
            },
            name => self
                .command(name)
                .map(|command| Invocation::Run(command, rest))
                .ok_or_else(|| self.unknown_command(name)),
        }
    }

    /// `--generate KIND` (or `--generate=KIND`), alone on the command line.
    fn program_option<'a>(
        &self,
        option: &str,
        rest: &'a [String],
    ) -> Result<Invocation<'a>, UsageError> {
        let (value, extra) = match option.split_once('=') {
            Some((_, value)) => (Some(value), rest),
            None => (
                rest.first().map(String::as_str),
                rest.get(1..).unwrap_or_default(),
            ),
        };
        let value =
            value.ok_or_else(|| UsageError::new(None, Problem::MissingValue(GENERATE.name)))?;
        if let Some(extra) = extra.first() {
            return Err(self.unknown_command(extra));
        }
        Generate::parse(value).map(Invocation::Generate)
    }

    /// `serve, check, …`, for the error of a command line without one.
    fn command_list(&self) -> String {
        self.commands
            .iter()
            .map(|c| c.name)
            .collect::<Vec<_>>()
            .join(", ")
    }

    pub fn unknown_command(&self, name: &str) -> UsageError {
        UsageError {
            problem: Problem::UnknownCommand {
                program: self.name,
                command: name.into(),
            },
            command: None,
        }
    }
}

/// What [`Program::dispatch`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invocation<'a> {
    Help(String),
    Version,
    /// `--generate KIND`: print [`Program::generate`].
    Generate(Generate),
    /// A command and the arguments after its name.
    Run(&'static CommandSpec, &'a [String]),
}

/// A command line, dispatched and its flags walked.
#[derive(Debug)]
pub enum Parsed<'a> {
    Help(String),
    Version,
    Generate(Generate),
    /// The command, its step if it takes one (`enroll request`), its flags.
    Run(&'static CommandSpec, Option<&'a str>, Matches),
}

impl Program {
    /// [`Program::dispatch`], then [`parse_flags`]. A command with
    /// [`CommandSpec::steps`] takes its step before its flags
    /// (`enroll request …`); such a command alone prints its help.
    pub fn parse<'a>(&self, args: &'a [String]) -> Result<Parsed<'a>, UsageError> {
        let (command, rest) = match self.dispatch(args)? {
            Invocation::Help(text) => return Ok(Parsed::Help(text)),
            Invocation::Version => return Ok(Parsed::Version),
            Invocation::Generate(kind) => return Ok(Parsed::Generate(kind)),
            Invocation::Run(command, rest) => (command, rest),
        };
        let takes_step = !command.steps.is_empty();
        let (step, rest) = match rest.split_first() {
            None if takes_step => return Ok(Parsed::Help(self.command_help(command))),
            Some((step, rest)) if takes_step && !step.starts_with('-') => {
                (Some(step.as_str()), rest)
            }
            _ => (None, rest),
        };
        Ok(match parse_flags(self, command, rest)? {
            None => Parsed::Help(self.command_help(command)),
            Some(matches) => Parsed::Run(command, step, matches),
        })
    }
}

/// A flag's synopsis and one-line help, in a column `width` wide.
fn write_flag_line(out: &mut String, flag: &Flag, width: usize) {
    let _ = writeln!(
        out,
        "{FLAG_INDENT}{:width$}{}",
        flag.synopsis(),
        flag.short_line()
    );
}

/// The four steps of enrollment, shown by both `sceau enroll --help` (the
/// member's steps) and `sceau-recover enroll --help` (the verifier's).
pub const ENROLL_STEPS: &str = "\
The four steps:
  sceau enroll request [--tcti TCTI] [--srk-handle HANDLE] > node.request      (on the member)
  sceau-recover enroll challenge --request node.request \\
      --challenge-out node.challenge --expected-out node.expected             (verifier, offline)
  sceau enroll respond --challenge node.challenge [--tcti TCTI] > node.response (on the member)
  sceau-recover enroll verify --request node.request --expected node.expected \\
      --response node.response --member-out members/node.pub \\
      [--enrollment-identity enrollment.identity]                             (verifier)

The request carries the SRK and signing key publics, the EK public (TCG default ECC template) and the EK
certificate when the TPM has one; `challenge` checks that the certificate names the EK and
prints its SHA-256 fingerprint for you to check against the manufacturer's CA. Only a TPM
holding the EK, the SRK and the envelope signing key can answer the challenge; `verify`
then writes the member file, endorsed by the enrollment key if one is given (what
`sceau serve --enrollment-key` requires).
";

fn column_width(flags: &[&Flag]) -> usize {
    flags.iter().map(|f| f.synopsis().len()).max().unwrap_or(0) + 2
}

/// The flags one command was given, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matches {
    command: &'static CommandSpec,
    given: Vec<(&'static Flag, Option<String>)>,
}

/// Walks `--flag value` and `--flag=value` against a command's table;
/// `Ok(None)` when help was asked for.
pub fn parse_flags(
    program: &Program,
    command: &'static CommandSpec,
    args: &[String],
) -> Result<Option<Matches>, UsageError> {
    let error = |problem| UsageError {
        problem,
        command: Some(command.name),
    };
    let unknown = |option: &str| {
        error(Problem::UnknownOption {
            program: program.name,
            command: command.name,
            option: option.into(),
        })
    };
    let mut given = Vec::new();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        if !arg.starts_with('-') {
            return Err(unknown(arg));
        }
        let (name, inline) = match arg.split_once('=') {
            Some((name, value)) if name.starts_with("--") => (name, Some(value)),
            _ => (arg.as_str(), None),
        };
        if matches!(name, "-h" | "--help") {
            return Ok(None);
        }
        let flag = command.flag(name).ok_or_else(|| unknown(name))?;
        let value = match (flag.value, inline) {
            (None, None) => None,
            (None, Some(_)) => return Err(error(Problem::UnexpectedValue(flag.name))),
            (Some(_), Some(value)) => Some(value.to_string()),
            (Some(_), None) => Some(
                args.next()
                    .cloned()
                    .ok_or_else(|| error(Problem::MissingValue(flag.name)))?,
            ),
        };
        given.push((flag, value));
    }
    Ok(Some(Matches { command, given }))
}

impl Matches {
    /// Whether `flag` was given.
    pub fn present(&self, flag: &Flag) -> bool {
        self.given.iter().any(|(f, _)| f.name == flag.name)
    }

    /// Every value given for `flag`, in order.
    pub fn values<'a>(&'a self, flag: &'a Flag) -> impl Iterator<Item = &'a str> + 'a {
        self.given
            .iter()
            .filter(move |(f, _)| f.name == flag.name)
            .filter_map(|(_, value)| value.as_deref())
    }

    /// Converts every value given for `flag` (so that a bad one is an error
    /// even when a later one overrides it) and returns the last.
    pub fn last<T>(
        &self,
        flag: &Flag,
        convert: impl Fn(&str) -> Result<T, UsageError>,
    ) -> Result<Option<T>, UsageError> {
        let mut last = None;
        for value in self.values(flag) {
            last = Some(convert(value)?);
        }
        Ok(last)
    }

    /// The last value given for `flag`, else `fallback`, else the flag's
    /// declared default, converted.
    pub fn or_default<T>(
        &self,
        flag: &Flag,
        fallback: Option<&str>,
        convert: impl Fn(&str) -> Result<T, UsageError>,
    ) -> Result<T, UsageError> {
        match self.last(flag, &convert)? {
            Some(value) => Ok(value),
            None => convert(fallback.or(flag.default).unwrap_or_default()),
        }
    }

    /// A usage error of this command.
    pub fn error(&self, problem: Problem) -> UsageError {
        UsageError {
            problem,
            command: Some(self.command.name),
        }
    }
}

/// Options written back as arguments: the inverse of parsing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Args(pub Vec<String>);

impl Args {
    pub fn command(name: &str) -> Self {
        Self(name.split(' ').map(String::from).collect())
    }

    pub fn flag(mut self, flag: &Flag, value: impl Into<String>) -> Self {
        self.0.extend([flag.name.to_string(), value.into()]);
        self
    }

    pub fn optional(self, flag: &Flag, value: Option<impl Into<String>>) -> Self {
        match value {
            Some(value) => self.flag(flag, value),
            None => self,
        }
    }

    pub fn switch(mut self, flag: &Flag, on: bool) -> Self {
        if on {
            self.0.push(flag.name.to_string());
        }
        self
    }
}

/// A usage error, and the command it belongs to (for its usage line).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{problem}")]
pub struct UsageError {
    pub problem: Problem,
    /// `None` for errors before a command was chosen.
    pub command: Option<&'static str>,
}

impl UsageError {
    pub fn new(command: Option<&'static str>, problem: Problem) -> Self {
        Self { problem, command }
    }

    /// Names the command, for an error made without knowing it (a value
    /// converter's).
    pub fn in_command(self, command: &'static str) -> Self {
        Self {
            command: self.command.or(Some(command)),
            ..self
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    #[error("no command given; the commands are {commands} (see `{program} --help`)")]
    NoCommand {
        program: &'static str,
        commands: String,
    },
    #[error("unknown command {command:?}; see `{program} --help`")]
    UnknownCommand {
        program: &'static str,
        command: String,
    },
    #[error("unknown option {option:?}; see `{program} {command} --help`")]
    UnknownOption {
        program: &'static str,
        command: &'static str,
        option: String,
    },
    #[error("{0} needs a value")]
    MissingValue(&'static str),
    #[error("{0} takes no value")]
    UnexpectedValue(&'static str),
    #[error("invalid value {value:?} for {flag}: {reason}")]
    InvalidValue {
        flag: &'static str,
        value: String,
        reason: String,
    },
    /// A flag the command cannot do without: "recover needs --identity FILE".
    #[error("{0}")]
    Required(String),
    #[error("{0}")]
    Conflict(&'static str),
    #[error("arguments must be valid UTF-8")]
    NotUtf8,
    #[error(
        "`{command}` is a command of `{program}` (the offline tool, which needs no TPM); run `{program} {command}`"
    )]
    Moved {
        program: &'static str,
        command: String,
    },
}

/// An invalid value for `flag`, as the value converters report it.
pub fn invalid(flag: &Flag, value: &str, reason: impl Into<String>) -> UsageError {
    UsageError::new(
        None,
        Problem::InvalidValue {
            flag: flag.name,
            value: value.into(),
            reason: reason.into(),
        },
    )
}

/// Converts `std::env::args_os()` (minus the program name) to strings.
pub fn utf8_args(
    args: impl Iterator<Item = std::ffi::OsString>,
) -> Result<Vec<String>, UsageError> {
    args.map(|a| {
        a.into_string()
            .map_err(|_| UsageError::new(None, Problem::NotUtf8))
    })
    .collect()
}

/// The value parser of a path flag: any text names a path.
pub fn path(value: &str) -> Result<std::path::PathBuf, UsageError> {
    Ok(value.into())
}

/// A path as an argument, for the inverse (arguments are UTF-8 here).
pub fn path_arg(path: &std::path::Path) -> String {
    path.display().to_string()
}

/// A command line written as one string, split at white space (tests and
/// examples; real arguments come from the operating system).
pub fn words(line: &str) -> Vec<String> {
    line.split_whitespace().map(String::from).collect()
}

/// For the binaries' unit tests: each command's help is what both
/// `help CMD` and `CMD --help` give (`help_of` runs the binary's parser and
/// returns the help it chose, if any), it names every flag of the command,
/// and some example's arguments (`inverses`, the way back from parsed
/// options) write each flag. So a flag cannot be declared without reaching
/// the help and the inverse.
pub fn check_table(
    program: &Program,
    help_of: impl Fn(&[String]) -> Option<String>,
    inverses: &[Vec<String>],
) {
    for spec in program.commands {
        let help = program.command_help(spec);
        for asked in [
            format!("{} --help", spec.name),
            format!("help {}", spec.name),
        ] {
            let args: Vec<String> = asked.split(' ').map(String::from).collect();
            assert_eq!(help_of(&args).as_deref(), Some(help.as_str()), "{asked}");
        }
        for flag in spec.flags {
            assert!(
                help.contains(flag.name),
                "{} help lacks {}",
                spec.name,
                flag.name
            );
            assert!(
                inverses
                    .iter()
                    .any(|a| a.first().map(String::as_str) == Some(spec.name)
                        && a.iter().any(|x| x == flag.name)),
                "no example of {} writes {}",
                spec.name,
                flag.name
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NAME: Flag = Flag::value("--name", "NAME", "Who").default("world");
    const LOUD: Flag = Flag::switch("--loud", "Shout").long_help("Really shout\nevery word");
    const GREET: CommandSpec = CommandSpec {
        name: "greet",
        summary: "Say hello",
        about: "Say hello to someone",
        usage: "greet [--name NAME] [--loud]",
        steps: &[],
        flags: &[&NAME, &LOUD],
        notes: "",
    };
    pub(crate) const PROGRAM: Program = Program {
        name: "demo",
        version: "1.2.3",
        about: "demo: a test program",
        commands: &[&GREET],
        notes: "",
        options_in_main_help: &["greet"],
        options: &[&GENERATE],
        environment: &[("DEMO_LOG", "Log level")],
        manual: Manual {
            section: "1",
            date: "2026-01-02",
            description: "Greets.\n\nLoudly, if asked.\n",
            files: &[("/etc/demo", "Nothing")],
            see_also: &["hello(1)"],
        },
    };

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(String::from).collect()
    }

    fn matches(line: &str) -> Result<Option<Matches>, UsageError> {
        parse_flags(&PROGRAM, &GREET, &args(line))
    }

    #[test]
    fn both_spellings_and_the_last_value_win() {
        let m = matches("--name=a --loud --name b").unwrap().unwrap();
        assert!(m.present(&LOUD));
        assert_eq!(m.values(&NAME).collect::<Vec<_>>(), ["a", "b"]);
        let name = m.or_default(&NAME, None, |v| Ok(v.to_string())).unwrap();
        assert_eq!(name, "b");
        let none = matches("").unwrap().unwrap();
        let name = none.or_default(&NAME, None, |v| Ok(v.to_string())).unwrap();
        assert_eq!(name, "world");
    }

    #[test]
    fn usage_errors_name_their_command() {
        for (line, problem) in [
            ("--name", Problem::MissingValue("--name")),
            ("--loud=yes", Problem::UnexpectedValue("--loud")),
            (
                "stray",
                Problem::UnknownOption {
                    program: "demo",
                    command: "greet",
                    option: "stray".into(),
                },
            ),
        ] {
            let error = matches(line).unwrap_err();
            assert_eq!(error, UsageError::new(Some("greet"), problem), "{line}");
        }
        assert_eq!(matches("--loud --help"), Ok(None));
    }

    #[test]
    fn help_is_derived_from_the_table() {
        let main = PROGRAM.main_help();
        assert!(main.contains("greet  Say hello\n"), "{main}");
        assert!(
            main.contains("--name NAME  Who [default: world]\n"),
            "{main}"
        );
        assert!(!main.contains("Really shout"), "{main}");
        let help = PROGRAM.command_help(&GREET);
        assert!(
            help.contains("Usage: demo greet [--name NAME] [--loud]\n"),
            "{help}"
        );
        assert!(help.contains("Really shout\n"), "{help}");
        assert_eq!(
            PROGRAM.dispatch(&args("help greet")),
            Ok(Invocation::Help(help))
        );
        assert_eq!(
            PROGRAM.dispatch(&args("help nothing")),
            Err(PROGRAM.unknown_command("nothing"))
        );
    }

    #[test]
    fn the_program_takes_help_version_and_generate_alone() {
        let error = PROGRAM.dispatch(&[]).unwrap_err();
        assert!(
            matches!(error.problem, Problem::NoCommand { .. }),
            "{error}"
        );
        assert!(error.to_string().contains("greet"), "{error}");
        for (line, kind) in [
            ("--generate man", Generate::Man),
            ("--generate=complete-bash", Generate::CompleteBash),
            ("--generate complete-zsh", Generate::CompleteZsh),
        ] {
            assert_eq!(
                PROGRAM.dispatch(&args(line)),
                Ok(Invocation::Generate(kind)),
                "{line}"
            );
        }
        for line in [
            "--generate",
            "--generate roff",
            "--generate man greet",
            "--generate=man extra",
        ] {
            assert!(PROGRAM.dispatch(&args(line)).is_err(), "{line}");
        }
        let main = PROGRAM.main_help();
        for flag in PROGRAM.all_options() {
            assert!(main.contains(&flag.with_short()), "{main}");
        }
        assert!(
            main.contains("\nEnvironment:\n  DEMO_LOG  Log level\n"),
            "{main}"
        );
    }

    #[test]
    fn args_are_the_inverse() {
        let back = Args::command("greet")
            .flag(&NAME, "x")
            .switch(&LOUD, true)
            .optional(&NAME, None::<String>);
        assert_eq!(back.0, args("greet --name x --loud"));
    }
}
