//! Lenient JSON: reading the JSON that language models write.
//!
//! Models wrap JSON in code fences and prose, and make small mistakes: trailing commas, single
//! quotes, unquoted keys, Python's `True`/`None`, comments, raw newlines in strings, missing
//! closing braces at the end. The parser here accepts a superset of JSON that covers these and
//! produces a `serde_json::Value`; valid JSON parses exactly as `serde_json` would. It never
//! panics and bounds its nesting depth.

use serde_json::{Map, Number, Value};

/// Deepest nesting of arrays and objects accepted; deeper input is rejected instead of
/// exhausting the stack. It is serde_json's own limit, so whatever is repaired can be written out
/// and read back (session logs, tool arguments kept in the history).
pub const MAX_DEPTH: usize = 127;

/// Most `{` positions tried when looking for an object inside prose (keeps the search linear-ish
/// on hostile input).
const MAX_CANDIDATES: usize = 64;

/// Why text could not be read as JSON, even leniently.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} at byte {offset}")]
pub struct LenientJsonError {
    /// What was expected or found.
    pub message: String,
    /// Where, as a byte offset into the text that was parsed.
    pub offset: usize,
}

/// Why a tool call's arguments could not be used; the text is written for the model to act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the tool arguments are not a valid JSON object ({reason}); call the tool again with its arguments as a single JSON object matching its parameters schema."
)]
pub struct ArgumentsError {
    /// What was wrong.
    pub reason: String,
}

/// Parses text that should be exactly one JSON value (surrounding whitespace and a code fence are
/// allowed), repairing small mistakes.
pub fn parse(text: &str) -> Result<Value, LenientJsonError> {
    let body = strip_code_fence(text);
    if let Ok(value) = serde_json::from_str::<Value>(body) {
        return Ok(value);
    }
    let offset = body.as_ptr() as usize - text.as_ptr() as usize;
    let mut parser = Parser::new(body);
    let value = parser.value(0).map_err(|e| e.shifted(offset))?;
    parser.skip_insignificant();
    if parser.pos < body.len() {
        return Err(LenientJsonError {
            message: "unexpected text after the JSON value".into(),
            offset: offset + parser.pos,
        });
    }
    Ok(value)
}

/// Parses one JSON value at the start of `text` (after whitespace), leniently, and returns it with
/// the number of bytes it took; text after the value is left alone.
pub fn parse_prefix(text: &str) -> Result<(Value, usize), LenientJsonError> {
    let mut parser = Parser::new(text);
    let value = parser.value(0)?;
    Ok((value, parser.pos))
}

/// Finds the first JSON object in text that may hold prose and code fences around it, such as a
/// model's answer. Returns `None` when there is none.
pub fn extract_object(text: &str) -> Option<Map<String, Value>> {
    find_object(text, |_| true)
}

/// Finds the first JSON object in `text` for which `accept` is true (see [`extract_object`]).
pub fn find_object(
    text: &str,
    mut accept: impl FnMut(&Map<String, Value>) -> bool,
) -> Option<Map<String, Value>> {
    if let Ok(Value::Object(map)) = parse(text)
        && accept(&map)
    {
        return Some(map);
    }
    let fenced = strip_code_fence(text);
    let haystacks: &[&str] = if fenced.len() == text.trim().len() {
        &[text]
    } else {
        &[fenced, text]
    };
    for haystack in haystacks {
        for (start, _) in haystack.match_indices('{').take(MAX_CANDIDATES) {
            if let Ok((Value::Object(map), _)) = parse_prefix(&haystack[start..])
                && accept(&map)
            {
                return Some(map);
            }
        }
    }
    None
}

/// Reads a tool call's argument text as a JSON object: empty text and `null` mean no arguments,
/// a JSON string holding an object is unwrapped, and small mistakes are repaired.
pub fn parse_arguments(text: &str) -> Result<Value, ArgumentsError> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    let value = match parse(trimmed) {
        Ok(value) => value,
        Err(first) => match extract_object(trimmed) {
            Some(map) => Value::Object(map),
            None => {
                return Err(ArgumentsError {
                    reason: first.to_string(),
                });
            }
        },
    };
    match value {
        Value::Object(_) => Ok(value),
        Value::Null => Ok(Value::Object(Map::new())),
        // Some models encode the arguments twice: a JSON string holding the object.
        Value::String(inner) => match parse(&inner) {
            Ok(Value::Object(map)) => Ok(Value::Object(map)),
            _ => Err(ArgumentsError {
                reason: "got a string where an object was expected".into(),
            }),
        },
        other => Err(ArgumentsError {
            reason: format!("got {} where an object was expected", type_name(&other)),
        }),
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The inside of a Markdown code fence (```` ```json ... ``` ````) when the whole text is one,
/// else the trimmed text. An unclosed fence is unwrapped too.
pub fn strip_code_fence(text: &str) -> &str {
    let trimmed = text.trim();
    let Some(rest) = trimmed.strip_prefix("```") else {
        return trimmed;
    };
    // Drop the info string ("json") up to the end of the first line.
    let Some(newline) = rest.find('\n') else {
        return trimmed;
    };
    let body = &rest[newline + 1..];
    let body = body.trim_end();
    body.strip_suffix("```").unwrap_or(body).trim()
}

struct Parser<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
}

impl LenientJsonError {
    fn shifted(mut self, by: usize) -> Self {
        self.offset += by;
        self
    }
}

impl<'a> Parser<'a> {
    fn new(text: &'a str) -> Self {
        Self {
            text,
            bytes: text.as_bytes(),
            pos: 0,
        }
    }

    fn error(&self, message: impl Into<String>) -> LenientJsonError {
        LenientJsonError {
            message: message.into(),
            offset: self.pos,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    /// Skips whitespace and `//`, `/* */` comments.
    fn skip_insignificant(&mut self) {
        loop {
            while let Some(b) = self.peek() {
                if b.is_ascii_whitespace() {
                    self.pos += 1;
                } else {
                    break;
                }
            }
            let rest = &self.bytes[self.pos..];
            if rest.starts_with(b"//") {
                match rest.iter().position(|&b| b == b'\n') {
                    Some(n) => self.pos += n + 1,
                    None => self.pos = self.bytes.len(),
                }
            } else if rest.starts_with(b"/*") {
                match self.text[self.pos + 2..].find("*/") {
                    Some(n) => self.pos += n + 4,
                    None => self.pos = self.bytes.len(),
                }
            } else {
                return;
            }
        }
    }

    /// A value inside `depth` arrays and objects.
    fn value(&mut self, depth: usize) -> Result<Value, LenientJsonError> {
        self.skip_insignificant();
        match self.peek() {
            None => Err(self.error("expected a value, found the end of the text")),
            Some(b'{' | b'[') if depth >= MAX_DEPTH => {
                Err(self.error(format!("nesting deeper than {MAX_DEPTH} levels")))
            }
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(q @ (b'"' | b'\'')) => self.string(q).map(Value::String),
            Some(b'-' | b'+' | b'.' | b'0'..=b'9') => self.number(),
            Some(b) if b.is_ascii_alphabetic() => self.literal(),
            Some(_) => Err(self.error("expected a value")),
        }
    }

    fn object(&mut self, depth: usize) -> Result<Value, LenientJsonError> {
        self.pos += 1; // '{'
        let mut map = Map::new();
        loop {
            self.skip_insignificant();
            match self.peek() {
                // A missing closing brace at the end of the text is closed for the model.
                None => return Ok(Value::Object(map)),
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(Value::Object(map));
                }
                // Stray or trailing commas.
                Some(b',') => {
                    self.pos += 1;
                    continue;
                }
                Some(_) => {}
            }
            let key = self.key()?;
            self.skip_insignificant();
            match self.peek() {
                Some(b':' | b'=') => self.pos += 1,
                _ => return Err(self.error(format!("expected ':' after the key {key:?}"))),
            }
            let value = self.value(depth + 1)?;
            map.insert(key, value);
            self.skip_insignificant();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') | None => {}
                // A missing comma between members: carry on if a key follows.
                Some(b'"' | b'\'') => {}
                Some(b) if b.is_ascii_alphabetic() || b == b'_' => {}
                Some(_) => return Err(self.error("expected ',' or '}' in an object")),
            }
        }
    }

    fn key(&mut self) -> Result<String, LenientJsonError> {
        match self.peek() {
            Some(q @ (b'"' | b'\'')) => self.string(q),
            Some(b) if is_bare_key_byte(b) => {
                let start = self.pos;
                while self.peek().is_some_and(is_bare_key_byte) {
                    self.pos += 1;
                }
                Ok(self.text[start..self.pos].to_string())
            }
            _ => Err(self.error("expected a key in an object")),
        }
    }

    fn array(&mut self, depth: usize) -> Result<Value, LenientJsonError> {
        self.pos += 1; // '['
        let mut items = Vec::new();
        loop {
            self.skip_insignificant();
            match self.peek() {
                None => return Ok(Value::Array(items)),
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Value::Array(items));
                }
                Some(b',') => {
                    self.pos += 1;
                    continue;
                }
                Some(_) => {}
            }
            items.push(self.value(depth + 1)?);
            self.skip_insignificant();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') | None => {}
                Some(b'{' | b'[' | b'"' | b'\'') => {}
                Some(_) => return Err(self.error("expected ',' or ']' in an array")),
            }
        }
    }

    /// A string in double or single quotes. Raw control characters are kept; an unknown escape
    /// keeps the escaped character; a string cut off by the end of the text ends there.
    fn string(&mut self, quote: u8) -> Result<String, LenientJsonError> {
        self.pos += 1;
        let mut out = String::new();
        loop {
            let rest = &self.text[self.pos..];
            let Some(special) = rest.find([quote as char, '\\']) else {
                out.push_str(rest);
                self.pos = self.bytes.len();
                return Ok(out);
            };
            out.push_str(&rest[..special]);
            self.pos += special;
            if self.bytes[self.pos] == quote {
                self.pos += 1;
                return Ok(out);
            }
            // A backslash escape.
            self.pos += 1;
            let Some(escaped) = self.text[self.pos..].chars().next() else {
                return Ok(out);
            };
            self.pos += escaped.len_utf8();
            match escaped {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                'r' => out.push('\r'),
                'b' => out.push('\u{8}'),
                'f' => out.push('\u{c}'),
                'u' => out.push(self.unicode_escape()),
                other => out.push(other),
            }
        }
    }

    /// The character of a `\uXXXX` escape (after the `u`), joining surrogate pairs; anything
    /// invalid becomes U+FFFD.
    fn unicode_escape(&mut self) -> char {
        let Some(high) = self.hex4() else {
            return char::REPLACEMENT_CHARACTER;
        };
        if (0xD800..0xDC00).contains(&high) && self.bytes[self.pos..].starts_with(b"\\u") {
            let save = self.pos;
            self.pos += 2;
            if let Some(low) = self.hex4()
                && (0xDC00..0xE000).contains(&low)
            {
                let code = 0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00);
                return char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER);
            }
            self.pos = save;
        }
        char::from_u32(high).unwrap_or(char::REPLACEMENT_CHARACTER)
    }

    fn hex4(&mut self) -> Option<u32> {
        let digits = self.text.get(self.pos..self.pos + 4)?;
        let code = u32::from_str_radix(digits, 16).ok()?;
        if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        self.pos += 4;
        Some(code)
    }

    fn number(&mut self) -> Result<Value, LenientJsonError> {
        let start = self.pos;
        while self
            .peek()
            .is_some_and(|b| b.is_ascii_digit() || matches!(b, b'-' | b'+' | b'.' | b'e' | b'E'))
        {
            self.pos += 1;
        }
        let raw = &self.text[start..self.pos];
        let cleaned = raw.strip_prefix('+').unwrap_or(raw);
        // "1." and ".5" are numbers to a model.
        let mut normalised = String::with_capacity(cleaned.len() + 2);
        let (sign, digits) = match cleaned.strip_prefix('-') {
            Some(rest) => ("-", rest),
            None => ("", cleaned),
        };
        normalised.push_str(sign);
        if digits.starts_with('.') {
            normalised.push('0');
        }
        normalised.push_str(digits);
        if normalised.ends_with('.') {
            normalised.push('0');
        }
        match serde_json::from_str::<Number>(&normalised) {
            Ok(n) => Ok(Value::Number(n)),
            Err(_) => {
                self.pos = start;
                Err(self.error(format!("'{raw}' is not a number")))
            }
        }
    }

    fn literal(&mut self) -> Result<Value, LenientJsonError> {
        let start = self.pos;
        while self
            .peek()
            .is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_')
        {
            self.pos += 1;
        }
        match &self.text[start..self.pos] {
            "true" | "True" | "TRUE" => Ok(Value::Bool(true)),
            "false" | "False" | "FALSE" => Ok(Value::Bool(false)),
            "null" | "None" | "NULL" | "Null" | "undefined" => Ok(Value::Null),
            word => {
                let word = word.to_string();
                self.pos = start;
                Err(self.error(format!(
                    "unexpected word '{word}' where a value was expected"
                )))
            }
        }
    }
}

fn is_bare_key_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'$')
}

#[cfg(test)]
mod tests {
    use super::*;

    use proptest::prelude::*;
    use serde_json::json;

    /// Found by the fuzz target `lenient_json`: a key holding a newline was quoted raw, making
    /// the error (shown to the model and in logs) two lines.
    #[test]
    fn an_error_quoting_a_key_stays_on_one_line() {
        let err = parse("```json\n{\" 11,}\n``").unwrap_err();
        assert!(!err.to_string().contains('\n'), "{err}");
        let err = parse_arguments("{\"a\nb\" 1}").unwrap_err();
        assert!(err.to_string().contains(r#"after the key "a\nb""#), "{err}");
    }

    /// Found by the fuzz target `lenient_json`: 128 nested arrays were repaired into a value
    /// serde_json refuses to read back (its limit), so it could not be logged and reloaded.
    #[test]
    fn what_is_repaired_reads_back_at_any_depth() {
        for levels in 120..135 {
            let repaired = format!("{}1,{}", "[".repeat(levels), "]".repeat(levels));
            let valid = format!("{}1{}", "[".repeat(levels), "]".repeat(levels));
            let strict = serde_json::from_str::<Value>(&valid).is_ok();
            match parse(&repaired) {
                Ok(value) => {
                    assert!(strict, "{levels} levels repaired past serde_json's limit");
                    assert_eq!(
                        serde_json::from_str::<Value>(&value.to_string()).ok(),
                        Some(value)
                    );
                }
                Err(err) => {
                    assert!(!strict, "{levels} levels refused: {err}");
                    assert!(err.to_string().contains("nesting deeper"), "{err}");
                }
            }
        }
    }

    #[test]
    fn repairs_common_model_mistakes() {
        let cases = [
            (r#"{"a": 1,}"#, json!({"a": 1})),
            (r#"{a: 1, b_c: "x"}"#, json!({"a": 1, "b_c": "x"})),
            (
                r#"{"a": [1, 2,], "b": {"c": true"#,
                json!({"a": [1, 2], "b": {"c": true}}),
            ),
            (
                r#"{"a": True, "b": None, "c": False}"#,
                json!({"a": true, "b": null, "c": false}),
            ),
            ("{\"a\": \"line\nbreak\"}", json!({"a": "line\nbreak"})),
            (
                "{\"a\": 1 // why\n, /* note */ \"b\": .5}",
                json!({"a": 1, "b": 0.5}),
            ),
            (r#"{"a": 1 "b": 2}"#, json!({"a": 1, "b": 2})),
            (r#"{"path": "src/main.rs"#, json!({"path": "src/main.rs"})),
            (r#"{"s": "\u00e9\ud83d\ude00\q"}"#, json!({"s": "é😀q"})),
        ];
        for (text, expected) in cases {
            assert_eq!(parse(text).unwrap(), expected, "{text}");
        }
        assert_eq!(parse("{'a': 'b'}").unwrap(), json!({"a": "b"}));
    }

    #[test]
    fn code_fences_are_stripped() {
        assert_eq!(strip_code_fence("```json\n{\"a\":1}\n```"), "{\"a\":1}");
        assert_eq!(strip_code_fence("```\n[1]\n```  "), "[1]");
        assert_eq!(strip_code_fence("```json\n{\"a\":1}"), "{\"a\":1}");
        assert_eq!(strip_code_fence("  plain "), "plain");
        assert_eq!(parse("```json\n{\"a\": 1,}\n```").unwrap(), json!({"a": 1}));
    }

    #[test]
    fn finds_objects_in_prose() {
        let text =
            "Sure! Here is the call:\n```json\n{\"tool\": \"x\", \"params\": {}}\n```\nDone.";
        assert_eq!(
            Value::Object(extract_object(text).unwrap()),
            json!({"tool": "x", "params": {}})
        );
        let text = "I think {not json} and then {\"a\": {\"b\": 2}} trailing";
        assert_eq!(
            Value::Object(extract_object(text).unwrap()),
            json!({"a": {"b": 2}})
        );
        assert_eq!(extract_object("no braces here"), None);
    }

    #[test]
    fn garbage_is_an_error_with_a_position() {
        let err = parse("{\"a\": @}").unwrap_err();
        assert_eq!(err.offset, 6);
        assert!(parse("hello").is_err());
        assert!(parse("{\"a\": 1} extra").is_err());
        assert!(parse("").is_err());
    }

    #[test]
    fn arguments_are_objects_or_a_message_for_the_model() {
        assert_eq!(parse_arguments("").unwrap(), json!({}));
        assert_eq!(parse_arguments("null").unwrap(), json!({}));
        assert_eq!(parse_arguments("{\"a\":1,}").unwrap(), json!({"a": 1}));
        assert_eq!(
            parse_arguments("\"{\\\"a\\\": 1}\"").unwrap(),
            json!({"a": 1}),
            "double-encoded arguments are unwrapped"
        );
        let err = parse_arguments("[1, 2]").unwrap_err();
        assert!(err.to_string().contains("got an array"), "{err}");
        let err = parse_arguments("{\"path\": ???}").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("the tool arguments are not a valid JSON object")
        );
    }

    #[test]
    fn deep_nesting_is_refused_not_a_crash() {
        let deep = "[".repeat(100_000);
        assert!(parse(&deep).is_err());
        let deep = "{\"a\":".repeat(10_000);
        assert!(parse(&deep).is_err());
        assert!(extract_object(&deep).is_none());
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            // serde_json's default float reading is not always exact; keep the floats it
            // reads back unchanged, so the comparison is about our parser.
            any::<f64>()
                .prop_map(|f| json!(f))
                .prop_filter("reads back exactly", |v| {
                    serde_json::from_str::<Value>(&v.to_string()).ok().as_ref() == Some(v)
                }),
            ".*".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map(".*", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn never_panics(text in ".*") {
            let _ = parse(&text);
            let _ = parse_prefix(&text);
            let _ = extract_object(&text);
            let _ = parse_arguments(&text);
        }

        #[test]
        fn never_panics_on_json_like_text(text in r#"[\{\}\[\]"',:a-z0-9 \\\n./*+-]{0,64}"#) {
            let _ = parse(&text);
            let _ = extract_object(&text);
            let _ = parse_arguments(&text);
        }

        #[test]
        fn valid_json_round_trips(value in json_value()) {
            let compact = serde_json::to_string(&value).unwrap();
            prop_assert_eq!(parse(&compact).unwrap(), value.clone());
            let pretty = serde_json::to_string_pretty(&value).unwrap();
            prop_assert_eq!(parse(&pretty).unwrap(), value.clone());
            // The repairing parser itself (not only the strict fast path) agrees with serde_json.
            let (prefix, used) = parse_prefix(&compact).unwrap();
            prop_assert_eq!(prefix, value);
            prop_assert_eq!(used, compact.len());
        }

        #[test]
        fn objects_are_found_inside_prose(
            value in prop::collection::btree_map("[a-z]{1,8}", json_value(), 1..4),
            before in "[^{]{0,40}",
            after in ".{0,40}",
        ) {
            let object = Value::Object(value.into_iter().collect());
            let text = format!("{before}\n```json\n{object}\n```\n{after}");
            prop_assert_eq!(Value::Object(extract_object(&text).unwrap()), object);
        }
    }
}
