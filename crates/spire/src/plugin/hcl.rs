//! The subset of HCL that the plugins' `plugin_data` uses.
//!
//! SPIRE hands a plugin its `plugin_data { … }` block re-printed as HCL text
//! (or the contents of `plugin_data_file` as they are) in
//! `hcl_configuration`. The plugins only take flat settings, so this parser
//! reads flat attributes and refuses everything else with a line number:
//!
//! - `key = "string"` (escapes `\"`, `\\`, `\n`, `\t`, `\r`, `\uXXXX`),
//!   `key = true|false`, `key = 123`, `key = ["a", "b"]`, `key = [1, 2]`
//!   (newlines and a trailing comma allowed inside lists);
//! - `#`, `//` and `/* */` comments, empty input;
//! - the JSON form HCL also accepts: one top-level object
//!   `{ "key": value, … }` with the same kinds of values (its strings also
//!   take JSON's `\/` escape, which HCL v1 refuses: harmless, it only
//!   widens what is read).
//!
//! Refused: blocks, nested lists or objects, duplicate keys, heredocs,
//! fractional or negative numbers, more than [`MAX_INPUT_BYTES`] of text.
//! The text comes from a file an operator wrote, so every refusal says
//! where and what to change.
//!
//! SPIRE reads its configuration with HCL version 1, whose decoder keeps
//! `${…}` in a string as it is (SPIRE's `-expandEnv` expands variables in
//! the whole file before); so does this parser. What SPIRE's printer
//! writes for a `plugin_data` block was checked with its hcl v1.0.1-vault-7:
//! one `key = value` per line, a blank line between them, comments kept,
//! lists of more than one line with a trailing comma, nothing for an empty
//! block.
//!
//! Why a parser of our own rather than an HCL crate: the maintained ones
//! speak HCL 2, which refuses the quoted keys SPIRE prints for a
//! configuration written in JSON, reads no JSON form, and rewrites `$${`;
//! measured in audit/dependencies.md, "HCL".

use std::fmt;

/// The most configuration text the parser reads. Our settings are a few
/// paths and hashes; a larger text is a mistake (a wrong file).
pub const MAX_INPUT_BYTES: usize = 64 * 1024;

/// A configuration text that is not in the supported subset, or a setting
/// of the wrong kind: one line saying where and what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct HclError(String);

impl HclError {
    /// An error at `line` of the text. For an inline `plugin_data` block
    /// that is a line of SPIRE's re-printed text (one setting per line, a
    /// blank line between), not of the server's file, so every message
    /// about a setting names the setting too.
    fn at(line: usize, what: impl fmt::Display) -> Self {
        HclError(format!("plugin data, line {line}: {what}"))
    }
}

/// One value of a setting.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Value {
    String(String),
    Bool(bool),
    Integer(u64),
    List(Vec<Value>),
}

impl Value {
    /// What the value is, in the words an error message uses.
    fn kind(&self) -> &'static str {
        match self {
            Value::String(_) => "a string",
            Value::Bool(_) => "a boolean",
            Value::Integer(_) => "a number",
            Value::List(_) => "a list",
        }
    }
}

/// One `key = value` line.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Setting {
    key: String,
    value: Value,
    line: usize,
}

/// A parsed configuration: flat settings, each key once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Body {
    settings: Vec<Setting>,
}

impl Body {
    /// Parses a configuration text (HCL attributes or the JSON form).
    pub fn parse(text: &str) -> Result<Body, HclError> {
        if text.len() > MAX_INPUT_BYTES {
            return Err(HclError(format!(
                "the plugin data is {} bytes; at most {MAX_INPUT_BYTES} are accepted (is it the right file?)",
                text.len()
            )));
        }
        let mut parser = Parser {
            text: text.as_bytes(),
            at: 0,
            line: 1,
        };
        let settings = parser.body()?;
        Ok(Body { settings })
    }

    /// Refuses a key that is not in `known`, so that a misspelt setting is
    /// not silently ignored.
    pub fn check_keys(&self, known: &[&str]) -> Result<(), HclError> {
        match self
            .settings
            .iter()
            .find(|s| !known.contains(&s.key.as_str()))
        {
            None => Ok(()),
            Some(unknown) if known.is_empty() => Err(HclError(format!(
                "unknown setting `{}`; this plugin takes no settings",
                unknown.key
            ))),
            Some(unknown) => Err(HclError(format!(
                "unknown setting `{}`; known settings: {}",
                unknown.key,
                known.join(", ")
            ))),
        }
    }

    /// Whether the configuration sets no key at all.
    pub fn is_empty(&self) -> bool {
        self.settings.is_empty()
    }

    /// The keys set, in the order they appear.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.settings.iter().map(|s| s.key.as_str())
    }

    fn get(&self, key: &str) -> Option<&Setting> {
        self.settings.iter().find(|s| s.key == key)
    }

    /// A `key = "…"` setting.
    pub fn string(&self, key: &str) -> Result<Option<String>, HclError> {
        match self.get(key) {
            None => Ok(None),
            Some(Setting {
                value: Value::String(s),
                ..
            }) => Ok(Some(s.clone())),
            Some(other) => Err(wrong_kind(other, "a string in quotes, like `key = \"…\"`")),
        }
    }

    /// A `key = true|false` setting.
    pub fn boolean(&self, key: &str) -> Result<Option<bool>, HclError> {
        match self.get(key) {
            None => Ok(None),
            Some(Setting {
                value: Value::Bool(b),
                ..
            }) => Ok(Some(*b)),
            Some(other) => Err(wrong_kind(other, "true or false (no quotes)")),
        }
    }

    /// A `key = [1, 2]` setting (whole numbers, possibly none).
    pub fn integers(&self, key: &str) -> Result<Option<Vec<u64>>, HclError> {
        self.list(
            key,
            "a list of whole numbers, like `key = [1, 2]`",
            |item| match item {
                Value::Integer(n) => Some(*n),
                _ => None,
            },
        )
    }

    /// A `key = ["a", "b"]` setting (strings, possibly none).
    pub fn strings(&self, key: &str) -> Result<Option<Vec<String>>, HclError> {
        self.list(
            key,
            "a list of strings, like `key = [\"a\", \"b\"]`",
            |item| match item {
                Value::String(s) => Some(s.clone()),
                _ => None,
            },
        )
    }

    /// A list setting whose every item `take` accepts; `expected` names the
    /// kind in a refusal.
    fn list<T>(
        &self,
        key: &str,
        expected: &str,
        take: impl Fn(&Value) -> Option<T>,
    ) -> Result<Option<Vec<T>>, HclError> {
        let Some(setting) = self.get(key) else {
            return Ok(None);
        };
        let Value::List(items) = &setting.value else {
            return Err(wrong_kind(setting, expected));
        };
        items
            .iter()
            .map(|item| take(item).ok_or_else(|| wrong_item(setting, item, expected)))
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }
}

fn wrong_kind(setting: &Setting, expected: &str) -> HclError {
    HclError::at(
        setting.line,
        format_args!(
            "`{}` is {}; it must be {expected}",
            setting.key,
            setting.value.kind()
        ),
    )
}

fn wrong_item(setting: &Setting, item: &Value, expected: &str) -> HclError {
    HclError::at(
        setting.line,
        format_args!(
            "`{}` holds {}; it must be {expected}",
            setting.key,
            item.kind()
        ),
    )
}

/// A byte cursor over the text, counting lines for error messages. The
/// text is UTF-8 (a `&str`); multi-byte characters only occur inside
/// strings and comments, where they are copied or skipped whole.
struct Parser<'a> {
    text: &'a [u8],
    at: usize,
    line: usize,
}

/// Which of the two syntaxes the text is in.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Syntax {
    Hcl,
    Json,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    fn peek_at(&self, offset: usize) -> Option<u8> {
        self.text.get(self.at + offset).copied()
    }

    fn bump(&mut self) -> Option<u8> {
        let byte = self.peek()?;
        self.at += 1;
        if byte == b'\n' {
            self.line += 1;
        }
        Some(byte)
    }

    fn error(&self, what: impl fmt::Display) -> HclError {
        HclError::at(self.line, what)
    }

    /// Skips spaces, tabs, carriage returns and comments; newlines too when
    /// `newlines` is set. A `#` or `//` comment stops before its newline.
    fn skip_trivia(&mut self, syntax: Syntax, newlines: bool) -> Result<(), HclError> {
        loop {
            match self.peek() {
                Some(b' ' | b'\t' | b'\r') => {
                    self.bump();
                }
                Some(b'\n') if newlines => {
                    self.bump();
                }
                Some(b'#') if syntax == Syntax::Hcl => self.skip_line_comment(),
                Some(b'/') if syntax == Syntax::Hcl && self.peek_at(1) == Some(b'/') => {
                    self.skip_line_comment()
                }
                Some(b'/') if syntax == Syntax::Hcl && self.peek_at(1) == Some(b'*') => {
                    let opened = self.line;
                    self.at += 2;
                    loop {
                        match self.bump() {
                            None => {
                                return Err(HclError::at(
                                    opened,
                                    "a `/*` comment is never closed with `*/`",
                                ));
                            }
                            Some(b'*') if self.peek() == Some(b'/') => {
                                self.bump();
                                break;
                            }
                            Some(_) => {}
                        }
                    }
                }
                _ => return Ok(()),
            }
        }
    }

    fn skip_line_comment(&mut self) {
        while let Some(byte) = self.peek() {
            if byte == b'\n' {
                return;
            }
            self.at += 1;
        }
    }

    /// The whole text: settings in HCL, or one JSON object.
    fn body(&mut self) -> Result<Vec<Setting>, HclError> {
        self.skip_trivia(Syntax::Hcl, true)?;
        if self.peek() == Some(b'{') {
            return self.json_object();
        }
        let mut settings = Vec::new();
        while self.peek().is_some() {
            let setting = self.hcl_setting()?;
            push_once(&mut settings, setting)?;
            self.skip_trivia(Syntax::Hcl, true)?;
        }
        Ok(settings)
    }

    /// `key = value`, then the end of the line (or of the text).
    fn hcl_setting(&mut self) -> Result<Setting, HclError> {
        let line = self.line;
        let key = match self.peek() {
            Some(b'"') => self.string(Syntax::Hcl)?,
            Some(byte) if byte.is_ascii_alphabetic() || byte == b'_' => self.identifier(),
            Some(_) => {
                return Err(self.error(format_args!(
                    "expected a setting name, found {}",
                    self.describe_next()
                )));
            }
            None => return Err(self.error("expected a setting name, found the end")),
        };
        self.skip_trivia(Syntax::Hcl, false)?;
        match self.peek() {
            Some(b'=') => {
                self.bump();
            }
            Some(b'{' | b'"') => {
                return Err(self.error(format_args!(
                    "`{key}` is a block; this plugin takes only `key = value` settings"
                )));
            }
            Some(b':') => {
                return Err(self.error(format_args!(
                    "`{key}` is followed by `:`; write `{key} = value`"
                )));
            }
            _ => {
                return Err(self.error(format_args!(
                    "expected `=` after `{key}`, found {}",
                    self.describe_next()
                )));
            }
        }
        self.skip_trivia(Syntax::Hcl, false)?;
        let value = self.value(Syntax::Hcl, &key, true)?;
        self.skip_trivia(Syntax::Hcl, false)?;
        match self.peek() {
            None | Some(b'\n') => Ok(Setting { key, value, line }),
            Some(_) => Err(self.error(format_args!(
                "expected the end of the line after the value of `{key}`, found {}",
                self.describe_next()
            ))),
        }
    }

    /// A bare name: letters, digits, `_` and `-`.
    fn identifier(&mut self) -> String {
        let start = self.at;
        while let Some(byte) = self.peek() {
            if byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-' {
                self.at += 1;
            } else {
                break;
            }
        }
        String::from_utf8_lossy(&self.text[start..self.at]).into_owned()
    }

    /// `{ "key": value, … }` and nothing after it but whitespace.
    fn json_object(&mut self) -> Result<Vec<Setting>, HclError> {
        self.bump(); // `{`
        let mut settings = Vec::new();
        self.skip_trivia(Syntax::Json, true)?;
        if self.peek() == Some(b'}') {
            self.bump();
        } else {
            loop {
                let line = self.line;
                if self.peek() != Some(b'"') {
                    return Err(self.error(format_args!(
                        "expected a setting name in quotes, found {}",
                        self.describe_next()
                    )));
                }
                let key = self.string(Syntax::Json)?;
                self.skip_trivia(Syntax::Json, true)?;
                if self.bump() != Some(b':') {
                    return Err(self.error(format_args!("expected `:` after \"{key}\"")));
                }
                self.skip_trivia(Syntax::Json, true)?;
                let value = self.value(Syntax::Json, &key, true)?;
                push_once(&mut settings, Setting { key, value, line })?;
                self.skip_trivia(Syntax::Json, true)?;
                match self.bump() {
                    Some(b',') => self.skip_trivia(Syntax::Json, true)?,
                    Some(b'}') => break,
                    _ => return Err(self.error("expected `,` or `}` after a value")),
                }
            }
        }
        self.skip_trivia(Syntax::Json, true)?;
        match self.peek() {
            None => Ok(settings),
            Some(_) => Err(self.error(format_args!(
                "expected the end after the closing `}}`, found {}",
                self.describe_next()
            ))),
        }
    }

    /// A string, boolean, number or (when `list_allowed`) a list of those.
    fn value(&mut self, syntax: Syntax, key: &str, list_allowed: bool) -> Result<Value, HclError> {
        match self.peek() {
            Some(b'"') => self.string(syntax).map(Value::String),
            Some(b'0'..=b'9') => self.integer(key),
            Some(b'-' | b'+') => Err(self.error(format_args!(
                "`{key}`: only whole numbers from 0 are supported"
            ))),
            Some(b'[') if list_allowed => self.list(syntax, key),
            Some(b'[') => Err(self.error(format_args!(
                "`{key}`: lists inside lists are not supported"
            ))),
            Some(b'{') => Err(self.error(format_args!(
                "`{key}` is an object; this plugin takes only strings, numbers, booleans and lists of them"
            ))),
            Some(b'<') if self.peek_at(1) == Some(b'<') => Err(self.error(format_args!(
                "`{key}`: heredoc strings (`<<`) are not supported; use a quoted string"
            ))),
            Some(byte) if byte.is_ascii_alphabetic() => {
                let word = self.identifier();
                match word.as_str() {
                    "true" => Ok(Value::Bool(true)),
                    "false" => Ok(Value::Bool(false)),
                    _ => Err(self.error(format_args!(
                        "`{key}`: `{word}` is not a value; put strings in quotes"
                    ))),
                }
            }
            Some(_) => Err(self.error(format_args!(
                "expected a value for `{key}`, found {}",
                self.describe_next()
            ))),
            None => Err(self.error(format_args!(
                "expected a value for `{key}`, found the end"
            ))),
        }
    }

    /// `[ value, value, … ]`, across lines, with an optional trailing comma
    /// in HCL.
    fn list(&mut self, syntax: Syntax, key: &str) -> Result<Value, HclError> {
        let opened = self.line;
        self.bump(); // `[`
        let mut items = Vec::new();
        let never_closed = || {
            HclError::at(
                opened,
                format_args!("the list of `{key}` is never closed with `]`"),
            )
        };
        loop {
            self.skip_trivia(syntax, true)?;
            match self.peek() {
                Some(b']') => {
                    if syntax == Syntax::Json && !items.is_empty() {
                        return Err(self.error("a trailing `,` is not allowed in JSON"));
                    }
                    self.bump();
                    return Ok(Value::List(items));
                }
                None => return Err(never_closed()),
                Some(_) => {}
            }
            items.push(self.value(syntax, key, false)?);
            self.skip_trivia(syntax, true)?;
            match self.peek() {
                Some(b',') => {
                    self.bump();
                }
                Some(b']') => {
                    self.bump();
                    return Ok(Value::List(items));
                }
                None => return Err(never_closed()),
                Some(_) => {
                    return Err(self.error(format_args!(
                        "expected `,` or `]` in the list of `{key}`, found {}",
                        self.describe_next()
                    )));
                }
            }
        }
    }

    /// Decimal digits, as a `u64`.
    fn integer(&mut self, key: &str) -> Result<Value, HclError> {
        let start = self.at;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.at += 1;
        }
        if matches!(self.peek(), Some(b'.' | b'e' | b'E' | b'x' | b'X')) {
            return Err(self.error(format_args!(
                "`{key}`: only whole decimal numbers are supported"
            )));
        }
        let digits = std::str::from_utf8(&self.text[start..self.at]).unwrap_or_default();
        digits
            .parse::<u64>()
            .map(Value::Integer)
            .map_err(|_| self.error(format_args!("`{key}`: {digits} is too large a number")))
    }

    /// A quoted string with its escapes resolved. Strings stay on one line.
    fn string(&mut self, syntax: Syntax) -> Result<String, HclError> {
        self.bump(); // `"`
        let mut bytes = Vec::new();
        loop {
            let Some(byte) = self.peek() else {
                return Err(self.error("a string is never closed with `\"`"));
            };
            match byte {
                b'"' => {
                    self.bump();
                    break;
                }
                b'\n' => {
                    return Err(self.error("a string is not closed before the end of the line"));
                }
                b'\\' => {
                    self.bump();
                    self.escape(syntax, &mut bytes)?;
                }
                byte if byte < 0x20 && byte != b'\t' => {
                    return Err(self
                        .error("a string holds a control character; use an escape such as `\\n`"));
                }
                _ => {
                    self.at += 1;
                    bytes.push(byte);
                }
            }
        }
        // Only whole UTF-8 sequences of the input and whole encoded
        // characters from escapes were copied.
        String::from_utf8(bytes).map_err(|_| self.error("a string is not valid UTF-8"))
    }

    /// One escape, after its `\`.
    fn escape(&mut self, syntax: Syntax, out: &mut Vec<u8>) -> Result<(), HclError> {
        let simple = match self.bump() {
            Some(b'"') => b'"',
            Some(b'\\') => b'\\',
            Some(b'/') if syntax == Syntax::Json => b'/',
            Some(b'n') => b'\n',
            Some(b't') => b'\t',
            Some(b'r') => b'\r',
            Some(b'u') => {
                let c = self.unicode_escape(syntax)?;
                let mut buffer = [0; 4];
                out.extend_from_slice(c.encode_utf8(&mut buffer).as_bytes());
                return Ok(());
            }
            Some(other) if other.is_ascii_graphic() => {
                return Err(self.error(format_args!(
                    "`\\{}` is not a supported escape (use \\\", \\\\, \\n, \\t, \\r or \\uXXXX)",
                    other as char
                )));
            }
            _ => {
                return Err(self
                    .error("a `\\` must start an escape (\\\", \\\\, \\n, \\t, \\r or \\uXXXX)"));
            }
        };
        out.push(simple);
        Ok(())
    }

    /// `XXXX` after `\u`; in JSON a surrogate pair spells one character as
    /// two escapes.
    fn unicode_escape(&mut self, syntax: Syntax) -> Result<char, HclError> {
        let first = self.hex4()?;
        if (0xD800..0xDC00).contains(&first)
            && syntax == Syntax::Json
            && self.peek() == Some(b'\\')
            && self.peek_at(1) == Some(b'u')
        {
            self.at += 2;
            let second = self.hex4()?;
            if (0xDC00..0xE000).contains(&second) {
                let code = 0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00);
                if let Some(c) = char::from_u32(code) {
                    return Ok(c);
                }
            }
            return Err(self.error("a `\\u` escape is an unpaired surrogate"));
        }
        char::from_u32(first).ok_or_else(|| self.error("a `\\u` escape is not a character"))
    }

    fn hex4(&mut self) -> Result<u32, HclError> {
        let mut code = 0;
        for _ in 0..4 {
            let digit = self
                .peek()
                .and_then(|b| (b as char).to_digit(16))
                .ok_or_else(|| self.error("`\\u` must be followed by four hex digits"))?;
            self.at += 1;
            code = code * 16 + digit;
        }
        Ok(code)
    }

    /// The next character, for an error message.
    fn describe_next(&self) -> String {
        let rest = std::str::from_utf8(&self.text[self.at..]).unwrap_or_default();
        match rest.chars().next() {
            None => "the end".to_owned(),
            Some('\n') => "the end of the line".to_owned(),
            Some(c) if c.is_control() => format!("{c:?}"),
            Some(c) => format!("`{c}`"),
        }
    }
}

/// Adds a setting, refusing a key set twice (HCL's rule; in JSON a later
/// key would silently win).
fn push_once(settings: &mut Vec<Setting>, setting: Setting) -> Result<(), HclError> {
    if let Some(first) = settings.iter().find(|s| s.key == setting.key) {
        return Err(HclError::at(
            setting.line,
            format_args!(
                "`{}` is set twice (first on line {}); keep one",
                setting.key, first.line
            ),
        ));
    }
    settings.push(setting);
    Ok(())
}

#[cfg(test)]
mod tests;
