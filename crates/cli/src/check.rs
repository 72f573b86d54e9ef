//! For the binaries' tests: what `PROGRAM --generate …` prints, checked
//! against the table with the real tools. The man page, rendered by `man`,
//! names every flag of every command (found by walking the table, so a new
//! flag cannot be missed) and draws no warning from `man` or `groff -ww`;
//! the completion scripts pass `bash -n` and `zsh -n`; and the bash one,
//! sourced into bash, completes every command from its first letters and
//! every flag of every command from its first letters.
//!
//! These panic, like the assertions they are; each message says what to
//! install when a tool is missing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::{Generate, Program};

/// Runs every check on `binary`, whose table is `program`.
pub fn generated(program: &Program, binary: &Path) {
    let dir = Scratch::new(program.name);
    let man = generate(binary, "man");
    assert_eq!(man, program.generate(Generate::Man), "--generate man");
    let page = dir.write(
        &format!("{}.{}", program.name, program.manual.section),
        &man,
    );
    let rendered = render_man(&page);
    for command in program.commands {
        assert!(
            mentions_flag(&rendered, command.name),
            "man page lacks the command {}:\n{rendered}",
            command.name
        );
        for flag in command.flags.iter().chain(&program.all_options()) {
            assert!(
                mentions_flag(&rendered, flag.name),
                "man page lacks {} of {}:\n{rendered}",
                flag.name,
                command.name
            );
            assert!(rendered.contains(flag.help.split_whitespace().next().unwrap_or("")));
        }
    }
    for section in crate::man::SECTIONS {
        assert!(
            rendered.lines().any(|l| l == section),
            "no {section} section:\n{rendered}"
        );
    }

    let bash = generate(binary, "complete-bash");
    assert_eq!(bash, program.generate(Generate::CompleteBash));
    let bash_file = dir.write("complete.bash", &bash);
    shell_syntax("bash", &bash_file);
    let zsh = generate(binary, "complete-zsh");
    assert_eq!(zsh, program.generate(Generate::CompleteZsh));
    shell_syntax(
        "zsh",
        &dir.write(format!("_{}", program.name).as_str(), &zsh),
    );

    let names: Vec<&str> = program
        .commands
        .iter()
        .map(|c| c.name)
        .chain(["help"])
        .collect();
    for command in program.commands {
        let prefix = &command.name[..2];
        let mut expected: Vec<&str> = names
            .iter()
            .copied()
            .filter(|n| n.starts_with(prefix))
            .collect();
        expected.sort_unstable();
        let mut got = complete_bash(&bash_file, &[program.name, prefix]);
        got.sort_unstable();
        assert_eq!(got, expected, "{} {prefix}<TAB>", program.name);
        for flag in command.flags {
            let prefix = &flag.name[..4];
            let mut words = vec![program.name, command.name];
            words.extend(command.steps.first());
            words.push(prefix);
            let got = complete_bash(&bash_file, &words);
            assert!(
                got.iter().any(|g| g == flag.name),
                "{words:?}<TAB> gave {got:?}, not {}",
                flag.name
            );
        }
    }
    let got = complete_bash(&bash_file, &[program.name, "--generate", "complete-"]);
    assert_eq!(got, ["complete-bash", "complete-zsh"]);
}

/// `binary --generate KIND`, which must succeed and print nothing on
/// standard error.
pub fn generate(binary: &Path, kind: &str) -> String {
    let output = run(Command::new(binary).args(["--generate", kind]));
    assert!(
        output.status.success() && output.stderr.is_empty(),
        "{} --generate {kind}: {}\n{}",
        binary.display(),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8 output")
}

/// The page as `man` shows it, as plain text; no warning from `man
/// --warnings` (which lintian runs too) nor from `groff -ww`.
pub fn render_man(page: &Path) -> String {
    let output = run(Command::new("man")
        .args(["--warnings", "-E", "UTF-8", "-l"])
        .arg(page)
        .env("MANWIDTH", "100")
        .env("LC_ALL", "C.UTF-8")
        .env_remove("MAN_KEEP_FORMATTING")
        .env_remove("MANPAGER")
        .env("PAGER", "cat"));
    let warnings = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && warnings.is_empty(),
        "man --warnings -l {}: {}\n{warnings}",
        page.display(),
        output.status
    );
    let groff = run(Command::new("groff")
        .args(["-man", "-Tutf8", "-ww", "-z"])
        .arg(page));
    let warnings = String::from_utf8_lossy(&groff.stderr);
    assert!(
        groff.status.success() && warnings.is_empty(),
        "groff -ww: {warnings}"
    );
    String::from_utf8(output.stdout).expect("UTF-8 page")
}

/// `shell -n FILE`: the script parses.
pub fn shell_syntax(shell: &str, script: &Path) {
    let output = run(Command::new(shell).arg("-n").arg(script));
    assert!(
        output.status.success() && output.stderr.is_empty(),
        "{shell} -n {}: {}",
        script.display(),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Sources the bash completion `script`, puts `words` on the command line
/// (the last one being completed) and returns COMPREPLY.
pub fn complete_bash(script: &Path, words: &[&str]) -> Vec<String> {
    let program = words.first().copied().unwrap_or_default();
    let function = format!("_{}", program.replace('-', "_"));
    let probe = format!(
        "source \"$1\"; shift; COMP_WORDS=(\"$@\"); COMP_CWORD=$(($# - 1)); \
         {function}; printf '%s\\n' \"${{COMPREPLY[@]}}\""
    );
    let output = run(Command::new("bash")
        .args(["-c", &probe, "bash"])
        .arg(script)
        .args(words));
    assert!(
        output.status.success(),
        "bash completion of {words:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect()
}

/// `flag` as a whole word: "--socket-mode" alone does not mention "--socket".
pub fn mentions_flag(text: &str, flag: &str) -> bool {
    text.match_indices(flag).any(|(at, _)| {
        let next = text[at + flag.len()..].chars().next();
        let before = text[..at].chars().next_back();
        let word = |c: char| c.is_ascii_alphanumeric() || c == '-';
        !next.is_some_and(word) && !before.is_some_and(word)
    })
}

fn run(command: &mut Command) -> Output {
    let program = command.get_program().to_string_lossy().into_owned();
    command.output().unwrap_or_else(|e| {
        panic!("cannot run {program}: {e} (install it: apt-get install man-db groff-base zsh)")
    })
}

/// A directory of its own under the system's temporary directory, removed
/// at the end.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let unique = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let dir = std::env::temp_dir().join(format!(
            "sceau-cli-check-{name}-{}-{unique}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("create a scratch directory");
        Self(dir)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).expect("write a scratch file");
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
