//! The unit tests of `hcl` (hcl.rs), kept beside it once they
//! outgrew an inline module (ARCHITECTURE.md, "Where tests go").

use super::*;

fn parse(text: &str) -> Body {
    Body::parse(text).unwrap_or_else(|e| panic!("{text:?} refused: {e}"))
}

fn refused(text: &str) -> String {
    match Body::parse(text) {
        Ok(body) => panic!("{text:?} accepted as {body:?}"),
        Err(e) => {
            let message = e.to_string();
            assert!(!message.contains('\n'), "not one line: {message:?}");
            message
        }
    }
}

#[test]
fn empty_and_comment_only_texts_have_no_settings() {
    for text in [
        "",
        "\n\n",
        "  # nothing\n",
        "// nothing",
        "/* a\nb */\n",
        "{}",
        " { } \n",
    ] {
        assert!(parse(text).is_empty(), "{text:?}");
    }
}

#[test]
fn reads_each_kind_of_value() {
    let body = parse(
        "ca_path = \"/etc/ca\"\n\
             strict = true\n\
             lax = false\n\
             pcrs = [0, 7, 18446744073709551615]\n\
             hashes = [\"ab\", \"cd\"]\n\
             none = []\n",
    );
    assert_eq!(body.string("ca_path").unwrap(), Some("/etc/ca".to_owned()));
    assert_eq!(body.boolean("strict").unwrap(), Some(true));
    assert_eq!(body.boolean("lax").unwrap(), Some(false));
    assert_eq!(body.integers("pcrs").unwrap(), Some(vec![0, 7, u64::MAX]));
    assert_eq!(
        body.strings("hashes").unwrap(),
        Some(vec!["ab".to_owned(), "cd".to_owned()])
    );
    assert_eq!(body.strings("none").unwrap(), Some(vec![]));
    assert_eq!(body.integers("none").unwrap(), Some(vec![]));
    assert_eq!(body.string("absent").unwrap(), None);
    assert_eq!(
        body.keys().collect::<Vec<_>>(),
        ["ca_path", "strict", "lax", "pcrs", "hashes", "none"]
    );
}

#[test]
fn resolves_string_escapes() {
    // `${…}` stays as it is, as in HCL 1's decoder, which SPIRE uses.
    let text = r#"s = "a\"b\\c\nd\te\u00e9 ü ${x} $${y} %{z}""#;
    let resolved = "a\"b\\c\nd\te\u{e9} ü ${x} $${y} %{z}";
    assert_eq!(parse(text).string("s").unwrap().as_deref(), Some(resolved));
}

#[test]
fn lists_may_span_lines_with_comments_and_a_trailing_comma() {
    let body =
        parse("pcrs = [\n  0, # firmware\n  7, // secure boot\n  /* shim */ 14,\n]\nnext = 1\n");
    assert_eq!(body.integers("pcrs").unwrap(), Some(vec![0, 7, 14]));
    assert_eq!(
        body.string("next").unwrap_err().to_string(),
        "plugin data, line 6: `next` is a number; it must be a string in quotes, like `key = \"…\"`"
    );
}

#[test]
fn reads_comments_quoted_keys_and_crlf() {
    let body = parse(
        "# header\r\n\"a\" = 1 # trailing\r\n/* block\n comment */ b = \"x\" // trailing\r\n",
    );
    assert_eq!(
        body.integers("a").unwrap_err().to_string(),
        "plugin data, line 2: `a` is a number; it must be a list of whole numbers, like `key = [1, 2]`"
    );
    assert_eq!(body.string("b").unwrap(), Some("x".to_owned()));
}

#[test]
fn reads_what_spire_prints_for_plugin_data() {
    // SPIRE 1.15.3's printer (hcl v1.0.1-vault-7), run on
    // `plugin_data { ca_path = "/opt/ca"   hash_path = "/x\"y\\z"
    // pcrs = [0, 7] names = ["a",⏎ "b",] flag = true # comment⏎ n = 12 }`:
    let printed = "ca_path = \"/opt/ca\"\n\nhash_path = \"/x\\\"y\\\\z\"\n\npcrs = [0, 7]\n\nnames = [\n  \"a\",\n  \"b\",\n]\n\nflag = true\n\n# comment\nn = 12";
    let body = parse(printed);
    assert_eq!(body.string("ca_path").unwrap(), Some("/opt/ca".to_owned()));
    assert_eq!(
        body.string("hash_path").unwrap(),
        Some("/x\"y\\z".to_owned())
    );
    assert_eq!(body.integers("pcrs").unwrap(), Some(vec![0, 7]));
    assert_eq!(
        body.strings("names").unwrap(),
        Some(vec!["a".to_owned(), "b".to_owned()])
    );
    assert_eq!(body.boolean("flag").unwrap(), Some(true));
    assert_eq!(
        body.integers("n").unwrap_err().to_string(),
        "plugin data, line 15: `n` is a number; it must be a list of whole numbers, like `key = [1, 2]`"
    );
    // An empty block is printed as nothing; a nested one is refused.
    assert!(parse("").is_empty());
    assert!(refused("nested {\n  a = 1\n}").contains("line 1: `nested` is a block"));
}

#[test]
fn reads_the_json_form() {
    let body = parse(
        "{\n  \"ca_path\": \"/etc/ca\\/x\\u00e9\\ud83d\\ude00\",\n  \"strict\": true,\n  \"pcrs\": [0, 7],\n  \"hashes\": [\"a\"]\n}\n",
    );
    assert_eq!(
        body.string("ca_path").unwrap(),
        Some("/etc/ca/x\u{e9}\u{1f600}".to_owned())
    );
    assert_eq!(body.boolean("strict").unwrap(), Some(true));
    assert_eq!(body.integers("pcrs").unwrap(), Some(vec![0, 7]));
    assert_eq!(body.strings("hashes").unwrap(), Some(vec!["a".to_owned()]));
    let error = body.boolean("pcrs").unwrap_err().to_string();
    assert_eq!(
        error,
        "plugin data, line 4: `pcrs` is a list; it must be true or false (no quotes)"
    );
}

#[test]
fn wrong_kinds_name_the_key_and_the_expected_kind() {
    let body = parse("a = \"1\"\nb = [1, \"x\"]\nc = [\"x\", 2]\nd = \"true\"\n");
    assert_eq!(
        body.boolean("a").unwrap_err().to_string(),
        "plugin data, line 1: `a` is a string; it must be true or false (no quotes)"
    );
    assert_eq!(
        body.integers("b").unwrap_err().to_string(),
        "plugin data, line 2: `b` holds a string; it must be a list of whole numbers, like `key = [1, 2]`"
    );
    assert_eq!(
        body.strings("c").unwrap_err().to_string(),
        "plugin data, line 3: `c` holds a number; it must be a list of strings, like `key = [\"a\", \"b\"]`"
    );
    assert!(
        body.boolean("d")
            .unwrap_err()
            .to_string()
            .contains("`d` is a string")
    );
    assert!(
        body.strings("a")
            .unwrap_err()
            .to_string()
            .contains("`a` is a string; it must be a list of strings")
    );
}

#[test]
fn check_keys_names_the_unknown_key_and_the_known_ones() {
    let body = parse("ca_path = \"x\"\nca_pth = \"y\"\n");
    assert_eq!(body.check_keys(&["ca_path", "hash_path", "ca_pth"]), Ok(()));
    assert_eq!(
        body.check_keys(&["ca_path", "hash_path"])
            .unwrap_err()
            .to_string(),
        "unknown setting `ca_pth`; known settings: ca_path, hash_path"
    );
    assert_eq!(
        body.check_keys(&[]).unwrap_err().to_string(),
        "unknown setting `ca_path`; this plugin takes no settings"
    );
    assert_eq!(parse("").check_keys(&[]), Ok(()));
}

#[test]
fn refuses_what_is_outside_the_subset_with_the_line() {
    let cases = [
        ("a = 1\nblock {\n}\n", "line 2: `block` is a block"),
        (
            "a = 1\n\nblock \"label\" {\n}\n",
            "line 3: `block` is a block",
        ),
        (
            "a = 1\nb = 2\na = 3\n",
            "line 3: `a` is set twice (first on line 1)",
        ),
        (
            "{\"a\": 1,\n \"a\": 2}",
            "line 2: `a` is set twice (first on line 1)",
        ),
        ("a = <<EOF\nx\nEOF\n", "line 1: `a`: heredoc strings"),
        (
            "a = \"x\n\"",
            "line 1: a string is not closed before the end of the line",
        ),
        ("a = \"x", "line 1: a string is never closed"),
        (
            "a = 1 b = 2\n",
            "line 1: expected the end of the line after the value of `a`, found `b`",
        ),
        ("a = 1.5\n", "line 1: `a`: only whole decimal numbers"),
        ("a = -1\n", "line 1: `a`: only whole numbers from 0"),
        (
            "a = 18446744073709551616\n",
            "line 1: `a`: 18446744073709551616 is too large",
        ),
        ("a = [[1]]\n", "line 1: `a`: lists inside lists"),
        ("a = [1,\n2\n", "line 1: the list of `a` is never closed"),
        (
            "a = [1 2]\n",
            "line 1: expected `,` or `]` in the list of `a`, found `2`",
        ),
        ("a = { b = 1 }\n", "line 1: `a` is an object"),
        (
            "a = yes\n",
            "line 1: `a`: `yes` is not a value; put strings in quotes",
        ),
        (
            "a\n",
            "line 1: expected `=` after `a`, found the end of the line",
        ),
        (
            "a = \n",
            "line 1: expected a value for `a`, found the end of the line",
        ),
        ("a: 1\n", "line 1: `a` is followed by `:`"),
        ("= 1\n", "line 1: expected a setting name, found `=`"),
        ("/* open\n\n", "line 1: a `/*` comment is never closed"),
        ("a = \"\\q\"\n", "line 1: `\\q` is not a supported escape"),
        (
            "a = \"\\u12\"\n",
            "line 1: `\\u` must be followed by four hex digits",
        ),
        (
            "a = \"\\ud800\"\n",
            "line 1: a `\\u` escape is not a character",
        ),
        (
            "a = \"x\u{1}y\"\n",
            "line 1: a string holds a control character",
        ),
        (
            "{\"a\": 1} x",
            "line 1: expected the end after the closing `}`, found `x`",
        ),
        (
            "{\"a\": 1,}",
            "line 1: expected a setting name in quotes, found `}`",
        ),
        (
            "{\"a\": [1,]}",
            "line 1: a trailing `,` is not allowed in JSON",
        ),
        ("{\"a\" 1}", "line 1: expected `:` after \"a\""),
        ("{\"a\": {\"b\": 1}}", "line 1: `a` is an object"),
        (
            "{\n# c\n\"a\": 1}",
            "line 2: expected a setting name in quotes, found `#`",
        ),
        (
            "{\"a\": 1 \"b\": 2}",
            "line 1: expected `,` or `}` after a value",
        ),
    ];
    for (text, expected) in cases {
        let message = refused(text);
        assert!(
            message.contains(expected),
            "{text:?}: {message:?} does not contain {expected:?}"
        );
    }
}

#[test]
fn refuses_oversized_input_before_parsing() {
    let text = format!("a = \"{}\"", "x".repeat(MAX_INPUT_BYTES));
    assert!(refused(&text).contains("at most 65536"));
    let fits = format!("a = \"{}\"", "x".repeat(MAX_INPUT_BYTES - 6));
    assert_eq!(
        parse(&fits).string("a").unwrap().unwrap().len(),
        MAX_INPUT_BYTES - 6
    );
}

#[test]
fn deep_brackets_are_refused_without_recursion() {
    // Nesting is refused at the second level, so no input can recurse deep.
    let text = format!("a = {}", "[".repeat(60_000));
    assert!(refused(&text).contains("lists inside lists"));
    let json = "{\"a\": ".to_owned() + &"{".repeat(60_000);
    assert!(refused(&json).contains("is an object"));
}
