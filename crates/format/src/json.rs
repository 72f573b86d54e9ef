//! A small, strict JSON (RFC 8259) reader and a string writer, enough to read
//! `etcdctl -w json` output and signed PCR policies (systemd's format), and
//! to print Secrets, without a JSON dependency.
//!
//! Numbers are kept as their text so that 64-bit integers (etcd's cluster and
//! member ids are full `uint64`s) are never rounded through a float. Objects
//! with a repeated name are refused: no reader can agree on which one counts.
//! An object holds at most [`MAX_MEMBERS`] members and repeats are found with
//! a set, so no input makes the reader slower than linear in its length.

use std::collections::HashSet;

/// Nesting deeper than this is refused, so that hostile input cannot exhaust
/// the stack; etcdctl output nests four levels.
const MAX_DEPTH: usize = 64;

/// Objects with more members than this are refused: etcdctl's objects have
/// at most seven (a `KeyValue` six), and a bound keeps a hostile file from
/// growing one object without limit. Lists of keys are arrays, not bounded.
const MAX_MEMBERS: usize = 1024;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid JSON at byte {offset}: {what}")]
pub struct JsonError {
    pub offset: usize,
    pub what: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Json {
    Null,
    Bool(bool),
    /// The number's text, as written (validated against the JSON grammar).
    Number(String),
    String(String),
    Array(Vec<Json>),
    /// Members in document order; names are unique.
    Object(Vec<(String, Json)>),
}

impl Json {
    /// The member `name` of an object (None for a missing member or a
    /// non-object).
    pub fn get(&self, name: &str) -> Option<&Json> {
        match self {
            Json::Object(members) => members.iter().find(|(n, _)| n == name).map(|(_, v)| v),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Json::String(s) => Some(s),
            _ => None,
        }
    }

    /// An integer number that fits an `i64` (no fraction, no exponent).
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Json::Number(text) => text.parse().ok(),
            _ => None,
        }
    }
}

/// Parses one JSON text (surrounding whitespace allowed).
pub fn parse(text: &str) -> Result<Json, JsonError> {
    let mut values = parse_stream(text)?;
    match values.len() {
        1 => Ok(values.remove(0)),
        0 => Err(JsonError {
            offset: 0,
            what: "no value",
        }),
        _ => Err(JsonError {
            offset: 0,
            what: "more than one value",
        }),
    }
}

/// Parses a sequence of JSON texts separated by whitespace, as left by
/// appending the output of several commands to one file.
pub fn parse_stream(text: &str) -> Result<Vec<Json>, JsonError> {
    let mut parser = Parser {
        bytes: text.as_bytes(),
        pos: 0,
    };
    let mut values = Vec::new();
    loop {
        parser.skip_whitespace();
        if parser.pos == parser.bytes.len() {
            return Ok(values);
        }
        values.push(parser.value(0)?);
    }
}

struct Parser<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Parser<'_> {
    fn fail<T>(&self, what: &'static str) -> Result<T, JsonError> {
        Err(JsonError {
            offset: self.pos,
            what,
        })
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn skip_whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn expect(&mut self, byte: u8, what: &'static str) -> Result<(), JsonError> {
        self.skip_whitespace();
        if self.peek() != Some(byte) {
            return self.fail(what);
        }
        self.pos += 1;
        Ok(())
    }

    fn value(&mut self, depth: usize) -> Result<Json, JsonError> {
        if depth > MAX_DEPTH {
            return self.fail("nested too deeply");
        }
        self.skip_whitespace();
        match self.peek() {
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(b'"') => self.string().map(Json::String),
            Some(b't') => self.literal("true", Json::Bool(true)),
            Some(b'f') => self.literal("false", Json::Bool(false)),
            Some(b'n') => self.literal("null", Json::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => self.fail("unexpected character"),
            None => self.fail("unexpected end"),
        }
    }

    fn literal(&mut self, word: &'static str, value: Json) -> Result<Json, JsonError> {
        if !self.bytes[self.pos..].starts_with(word.as_bytes()) {
            return self.fail("unknown literal");
        }
        self.pos += word.len();
        Ok(value)
    }

    fn object(&mut self, depth: usize) -> Result<Json, JsonError> {
        self.pos += 1;
        let mut members: Vec<(String, Json)> = Vec::new();
        // Names seen so far, so that a repeat is found in constant time: a
        // scan of `members` made a large object quadratic.
        let mut names = HashSet::new();
        self.skip_whitespace();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(Json::Object(members));
        }
        loop {
            self.skip_whitespace();
            if self.peek() != Some(b'"') {
                return self.fail("expected a member name");
            }
            if members.len() == MAX_MEMBERS {
                return self.fail("too many members");
            }
            let name = self.string()?;
            if !names.insert(name.clone()) {
                return self.fail("repeated member name");
            }
            self.expect(b':', "expected ':'")?;
            let value = self.value(depth + 1)?;
            members.push((name, value));
            if self.end_of_list(b'}')? {
                return Ok(Json::Object(members));
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Json, JsonError> {
        self.pos += 1;
        let mut items = Vec::new();
        self.skip_whitespace();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(Json::Array(items));
        }
        loop {
            items.push(self.value(depth + 1)?);
            if self.end_of_list(b']')? {
                return Ok(Json::Array(items));
            }
        }
    }

    /// After a member or item: true at the closing bracket, false at a comma.
    fn end_of_list(&mut self, close: u8) -> Result<bool, JsonError> {
        self.skip_whitespace();
        match self.peek() {
            Some(b',') => {
                self.pos += 1;
                Ok(false)
            }
            Some(c) if c == close => {
                self.pos += 1;
                Ok(true)
            }
            _ => self.fail("expected ',' or a closing bracket"),
        }
    }

    fn number(&mut self) -> Result<Json, JsonError> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => self.digits(),
            _ => return self.fail("expected a digit"),
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            self.required_digits()?;
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            self.required_digits()?;
        }
        // The grammar above only admits ASCII, so this slice is valid UTF-8.
        let text = String::from_utf8_lossy(&self.bytes[start..self.pos]).into_owned();
        Ok(Json::Number(text))
    }

    fn digits(&mut self) {
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.pos += 1;
        }
    }

    fn required_digits(&mut self) -> Result<(), JsonError> {
        if !matches!(self.peek(), Some(b'0'..=b'9')) {
            return self.fail("expected a digit");
        }
        self.digits();
        Ok(())
    }

    fn string(&mut self) -> Result<String, JsonError> {
        self.pos += 1;
        let mut out = Vec::new();
        loop {
            let Some(byte) = self.peek() else {
                return self.fail("unterminated string");
            };
            self.pos += 1;
            match byte {
                b'"' => break,
                b'\\' => self.escape(&mut out)?,
                0x00..=0x1f => return self.fail("control character in string"),
                _ => out.push(byte),
            }
        }
        // The input is a &str and escapes produce UTF-8, so this cannot fail
        // unless a string was split inside a character, which the grammar
        // does not allow.
        String::from_utf8(out).or_else(|_| self.fail("invalid UTF-8 in string"))
    }

    fn escape(&mut self, out: &mut Vec<u8>) -> Result<(), JsonError> {
        let Some(byte) = self.peek() else {
            return self.fail("unterminated escape");
        };
        self.pos += 1;
        let simple = match byte {
            b'"' => b'"',
            b'\\' => b'\\',
            b'/' => b'/',
            b'b' => 0x08,
            b'f' => 0x0c,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'u' => {
                let c = self.unicode_escape()?;
                out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
                return Ok(());
            }
            _ => return self.fail("unknown escape"),
        };
        out.push(simple);
        Ok(())
    }

    /// `\uXXXX`, with a UTF-16 surrogate pair as two escapes.
    fn unicode_escape(&mut self) -> Result<char, JsonError> {
        let first = self.hex4()?;
        let code = match first {
            0xd800..=0xdbff => {
                if !self.bytes[self.pos..].starts_with(b"\\u") {
                    return self.fail("unpaired surrogate");
                }
                self.pos += 2;
                let second = self.hex4()?;
                if !(0xdc00..=0xdfff).contains(&second) {
                    return self.fail("unpaired surrogate");
                }
                0x10000 + ((first - 0xd800) << 10) + (second - 0xdc00)
            }
            0xdc00..=0xdfff => return self.fail("unpaired surrogate"),
            _ => first,
        };
        char::from_u32(code).map_or_else(|| self.fail("invalid code point"), Ok)
    }

    fn hex4(&mut self) -> Result<u32, JsonError> {
        let Some(digits) = self.bytes.get(self.pos..self.pos + 4) else {
            return self.fail("short \\u escape");
        };
        // Checked digit by digit: from_str_radix would also take a '+'.
        let mut code = 0;
        for &d in digits {
            let Some(v) = char::from(d).to_digit(16) else {
                return self.fail("bad \\u escape");
            };
            code = code * 16 + v;
        }
        self.pos += 4;
        Ok(code)
    }
}

pub use crate::text::push_json_string as write_string;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_nested_values() {
        let v = parse(r#" {"a": [1, -2.5e+3, true, false, null], "b": {"c": "d"}} "#).unwrap();
        let a = v.get("a").unwrap();
        assert_eq!(
            *a,
            Json::Array(vec![
                Json::Number("1".into()),
                Json::Number("-2.5e+3".into()),
                Json::Bool(true),
                Json::Bool(false),
                Json::Null,
            ])
        );
        assert_eq!(v.get("b").unwrap().get("c").unwrap().as_str(), Some("d"));
    }

    #[test]
    fn keeps_big_integers_exact() {
        let v = parse(r#"{"cluster_id":11103263719474598048,"revision":51}"#).unwrap();
        assert_eq!(
            v.get("cluster_id"),
            Some(&Json::Number("11103263719474598048".into()))
        );
        assert_eq!(v.get("cluster_id").unwrap().as_i64(), None);
        assert_eq!(v.get("revision").unwrap().as_i64(), Some(51));
    }

    #[test]
    fn decodes_escapes() {
        let v = parse(r#""q\" b\\ s\/ \b\f\n\r\t \u00e9 \ud83d\ude00""#).unwrap();
        assert_eq!(v.as_str(), Some("q\" b\\ s/ \u{8}\u{c}\n\r\t é 😀"));
    }

    #[test]
    fn refuses_invalid_json() {
        for bad in [
            "",
            "{",
            "[1,]",
            "{\"a\":1,}",
            "01",
            "1.",
            "-",
            "+1",
            "tru",
            "\"\\x\"",
            "\"a\u{1}\"",
            "\"\\ud800\"",
            "\"\\udc00\"",
            "{\"a\":1,\"a\":2}",
            "{a:1}",
            "[1 2]",
            "\"abc",
        ] {
            assert!(parse(bad).is_err(), "accepted {bad:?}");
        }
        assert!(parse(&"[".repeat(MAX_DEPTH + 2)).is_err());
    }

    /// An object of many members is refused at a fixed count, and repeated
    /// names are still found at that size. Without the cap, this fails with
    /// "accepted an object of 1025 members" (and the old name check was
    /// quadratic: 40 000 members took seconds).
    #[test]
    fn refuses_objects_with_too_many_members() {
        let object = |count: usize, last: &str| {
            let mut text = String::from("{");
            for i in 0..count - 1 {
                text.push_str(&format!("\"m{i}\":{i},"));
            }
            text.push_str(&format!("\"{last}\":0}}"));
            text
        };
        let full = parse(&object(MAX_MEMBERS, "last")).unwrap();
        assert!(matches!(full, Json::Object(ref m) if m.len() == MAX_MEMBERS));
        assert_eq!(
            parse(&object(MAX_MEMBERS, "m0")).err().map(|e| e.what),
            Some("repeated member name")
        );
        let over = parse(&object(MAX_MEMBERS + 1, "last"));
        assert!(
            over.is_err(),
            "accepted an object of {} members",
            MAX_MEMBERS + 1
        );
        assert_eq!(over.err().map(|e| e.what), Some("too many members"));
        // Arrays stay unbounded: an etcdctl response lists every key.
        let items = vec!["0"; 4 * MAX_MEMBERS].join(",");
        assert!(parse(&format!("[{items}]")).is_ok());
    }

    #[test]
    fn reads_a_stream_of_values() {
        let values = parse_stream("{\"a\":1}\n{\"a\":2}\n").unwrap();
        assert_eq!(values.len(), 2);
        assert!(parse("{} {}").is_err());
    }

    #[test]
    fn writes_strings_that_read_back() {
        let original = "quote \" backslash \\ newline \n tab \t bell \u{7} é ✓";
        let mut text = String::new();
        write_string(&mut text, original);
        assert_eq!(
            text,
            "\"quote \\\" backslash \\\\ newline \\n tab \\t bell \\u0007 é ✓\""
        );
        assert_eq!(parse(&text).unwrap().as_str(), Some(original));
    }
}
