//! A validator for the part of JSON Schema that tool parameters use.
//!
//! Supported keywords: `type` (one name or a list; `integer` is distinct from `number`),
//! `properties`, `required`, `additionalProperties` (`false` or a schema), `enum`, `const`,
//! `items` (one schema for every element), `minItems`/`maxItems`, `minLength`/`maxLength`,
//! `minimum`/`maximum`, `exclusiveMinimum`/`exclusiveMaximum` (numeric form), and
//! `anyOf`/`oneOf` (both checked as "matches at least one"). Other keywords are ignored, so a
//! schema using them is accepted but not fully enforced: the tool must still check its input.

use std::fmt;

use serde_json::{Map, Value};

/// Most problems reported for one call; a model fixes the first few before it needs more.
const MAX_REPORTED: usize = 8;

/// One way the arguments break the schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaViolation {
    /// Where: `""` for the arguments as a whole, else a field path such as `edits[2].path`.
    pub location: String,
    /// The complete sentence for the model, e.g. `field 'limit' must be at least 1, got 0`.
    pub message: String,
}

impl fmt::Display for SchemaViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Checks `value` against `schema`; returns every violation found (at most a handful).
pub fn validate(schema: &Value, value: &Value) -> Vec<SchemaViolation> {
    let mut found = Vec::new();
    check(schema, value, "", &mut found);
    found.truncate(MAX_REPORTED);
    found
}

fn check(schema: &Value, value: &Value, location: &str, found: &mut Vec<SchemaViolation>) {
    // `true`, `{}` and non-object schemas accept anything; `false` accepts nothing.
    let schema = match schema {
        Value::Object(map) => map,
        Value::Bool(false) => {
            push(found, location, "is not allowed here".to_string());
            return;
        }
        _ => return,
    };
    if found.len() >= MAX_REPORTED {
        return;
    }

    if let Some(expected) = schema.get("type")
        && !type_matches(expected, value)
    {
        push(
            found,
            location,
            format!(
                "must be {}, got {}",
                describe_type(expected),
                describe_value(value)
            ),
        );
        // Further checks would only repeat the type mismatch in other words.
        return;
    }

    if let Some(Value::Array(allowed)) = schema.get("enum")
        && !allowed.iter().any(|a| json_equal(a, value))
    {
        let list: Vec<String> = allowed.iter().map(compact).collect();
        push(
            found,
            location,
            format!("must be one of {}, got {}", list.join(", "), compact(value)),
        );
    }
    if let Some(constant) = schema.get("const")
        && !json_equal(constant, value)
    {
        push(
            found,
            location,
            format!("must be {}, got {}", compact(constant), compact(value)),
        );
    }

    for keyword in ["anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = schema.get(keyword)
            && !branches.is_empty()
            && !branches.iter().any(|b| validate(b, value).is_empty())
        {
            push(
                found,
                location,
                format!(
                    "must match one of its {} allowed forms, got {}",
                    branches.len(),
                    describe_value(value)
                ),
            );
        }
    }

    match value {
        Value::Object(object) => check_object(schema, object, location, found),
        Value::Array(items) => check_array(schema, items, location, found),
        Value::String(text) => check_string(schema, text, location, found),
        Value::Number(_) => check_number(schema, value, location, found),
        Value::Bool(_) | Value::Null => {}
    }
}

fn check_object(
    schema: &Map<String, Value>,
    object: &Map<String, Value>,
    location: &str,
    found: &mut Vec<SchemaViolation>,
) {
    let properties = schema.get("properties").and_then(Value::as_object);

    if let Some(Value::Array(required)) = schema.get("required") {
        for name in required.iter().filter_map(Value::as_str) {
            if !object.contains_key(name) {
                let field = join(location, name);
                found.push(SchemaViolation {
                    message: format!("missing required field '{field}'"),
                    location: field,
                });
            }
        }
    }

    for (name, item) in object {
        let inner = join(location, name);
        match properties.and_then(|p| p.get(name)) {
            Some(property_schema) => check(property_schema, item, &inner, found),
            None => match schema.get("additionalProperties") {
                Some(Value::Bool(false)) => {
                    let allowed: Vec<&str> = properties
                        .map(|p| p.keys().map(String::as_str).collect())
                        .unwrap_or_default();
                    let hint = if allowed.is_empty() {
                        "this takes no fields".to_string()
                    } else {
                        format!("allowed fields: {}", allowed.join(", "))
                    };
                    push(found, &inner, format!("is not a known field ({hint})"));
                }
                Some(extra @ Value::Object(_)) => check(extra, item, &inner, found),
                _ => {}
            },
        }
    }
}

fn check_array(
    schema: &Map<String, Value>,
    items: &[Value],
    location: &str,
    found: &mut Vec<SchemaViolation>,
) {
    if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
        && (items.len() as u64) < min
    {
        push(
            found,
            location,
            format!("must have at least {min} items, got {}", items.len()),
        );
    }
    if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
        && (items.len() as u64) > max
    {
        push(
            found,
            location,
            format!("must have at most {max} items, got {}", items.len()),
        );
    }
    if let Some(item_schema @ (Value::Object(_) | Value::Bool(_))) = schema.get("items") {
        for (index, item) in items.iter().enumerate() {
            check(item_schema, item, &format!("{location}[{index}]"), found);
        }
    }
}

fn check_string(
    schema: &Map<String, Value>,
    text: &str,
    location: &str,
    found: &mut Vec<SchemaViolation>,
) {
    let length = text.chars().count() as u64;
    if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
        && length < min
    {
        push(
            found,
            location,
            format!("must be at least {min} characters long, got {length}"),
        );
    }
    if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
        && length > max
    {
        push(
            found,
            location,
            format!("must be at most {max} characters long, got {length}"),
        );
    }
}

fn check_number(
    schema: &Map<String, Value>,
    value: &Value,
    location: &str,
    found: &mut Vec<SchemaViolation>,
) {
    let Some(number) = value.as_f64() else {
        return;
    };
    let shown = compact(value);
    let bound = |keyword: &str| schema.get(keyword).and_then(Value::as_f64);
    let bound_text = |keyword: &str| schema.get(keyword).map(compact).unwrap_or_default();
    if let Some(min) = bound("minimum")
        && number < min
    {
        let min = bound_text("minimum");
        push(
            found,
            location,
            format!("must be at least {min}, got {shown}"),
        );
    }
    if let Some(max) = bound("maximum")
        && number > max
    {
        let max = bound_text("maximum");
        push(
            found,
            location,
            format!("must be at most {max}, got {shown}"),
        );
    }
    if let Some(min) = bound("exclusiveMinimum")
        && number <= min
    {
        let min = bound_text("exclusiveMinimum");
        push(
            found,
            location,
            format!("must be greater than {min}, got {shown}"),
        );
    }
    if let Some(max) = bound("exclusiveMaximum")
        && number >= max
    {
        let max = bound_text("exclusiveMaximum");
        push(
            found,
            location,
            format!("must be less than {max}, got {shown}"),
        );
    }
}

/// Records "<subject> <problem>", where the subject is the field or the arguments as a whole.
fn push(found: &mut Vec<SchemaViolation>, location: &str, problem: String) {
    let message = if location.is_empty() {
        format!("the arguments {problem}")
    } else {
        format!("field '{location}' {problem}")
    };
    found.push(SchemaViolation {
        location: location.to_string(),
        message,
    });
}

fn join(location: &str, name: &str) -> String {
    if location.is_empty() {
        name.to_string()
    } else {
        format!("{location}.{name}")
    }
}

fn type_matches(expected: &Value, value: &Value) -> bool {
    match expected {
        Value::String(name) => single_type_matches(name, value),
        Value::Array(names) => names
            .iter()
            .filter_map(Value::as_str)
            .any(|name| single_type_matches(name, value)),
        // A malformed `type` is not the model's fault; let the value through.
        _ => true,
    }
}

fn single_type_matches(name: &str, value: &Value) -> bool {
    match name {
        "string" => value.is_string(),
        // 3.0 is a number but not an integer here: tools read integers as integers.
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "object" => value.is_object(),
        "array" => value.is_array(),
        "null" => value.is_null(),
        _ => true,
    }
}

fn describe_type(expected: &Value) -> String {
    let article = |name: &str| match name {
        "integer" | "object" | "array" => format!("an {name}"),
        "null" => "null".to_string(),
        _ => format!("a {name}"),
    };
    match expected {
        Value::String(name) => article(name),
        Value::Array(names) => {
            let names: Vec<String> = names
                .iter()
                .filter_map(Value::as_str)
                .map(article)
                .collect();
            names.join(" or ")
        }
        other => compact(other),
    }
}

/// "a string (\"10\")", "an array", "null" ... for messages.
pub(crate) fn describe_value(value: &Value) -> String {
    match value {
        Value::Null => "null".to_string(),
        Value::Bool(b) => format!("a boolean ({b})"),
        Value::Number(n) if n.is_i64() || n.is_u64() => format!("an integer ({n})"),
        Value::Number(n) => format!("a number ({n})"),
        Value::String(_) => format!("a string ({})", compact(value)),
        Value::Array(items) => format!("an array of {} items", items.len()),
        Value::Object(_) => "an object".to_string(),
    }
}

/// The value as compact JSON, shortened for messages.
fn compact(value: &Value) -> String {
    const MAX_CHARS: usize = 60;
    let text = value.to_string();
    if text.chars().count() <= MAX_CHARS {
        text
    } else {
        let head: String = text.chars().take(MAX_CHARS).collect();
        format!("{head}…")
    }
}

/// JSON equality where 1 and 1.0 are the same number.
fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => x == y,
            _ => x.as_f64() == y.as_f64(),
        },
        _ => a == b,
    }
}

/// One line per parameter for error messages: `path (string, required), limit (integer)`.
pub fn summarize_parameters(schema: &Value) -> String {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return "none".to_string();
    };
    if properties.is_empty() {
        return "none".to_string();
    }
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    properties
        .iter()
        .map(|(name, property)| {
            let mut parts = Vec::new();
            match property.get("type") {
                Some(Value::String(t)) => parts.push(t.clone()),
                Some(Value::Array(ts)) => parts.push(
                    ts.iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join("|"),
                ),
                _ => {}
            }
            if let Some(Value::Array(allowed)) = property.get("enum") {
                let list: Vec<String> = allowed.iter().map(compact).collect();
                parts.push(format!("one of {}", list.join("/")));
            }
            if required.contains(&name.as_str()) {
                parts.push("required".to_string());
            }
            if parts.is_empty() {
                name.clone()
            } else {
                format!("{name} ({})", parts.join(", "))
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "minLength": 1},
                "limit": {"type": "integer", "minimum": 1, "maximum": 100},
                "ratio": {"type": "number", "exclusiveMinimum": 0},
                "mode": {"type": "string", "enum": ["fast", "slow"]},
                "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
                "maybe": {"type": ["string", "null"]},
                "inner": {
                    "type": "object",
                    "properties": {"x": {"type": "boolean"}},
                    "required": ["x"],
                    "additionalProperties": false
                }
            },
            "required": ["path"],
            "additionalProperties": false
        })
    }

    fn messages(value: Value) -> Vec<String> {
        validate(&schema(), &value)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn valid_arguments_pass() {
        assert!(messages(json!({"path": "a"})).is_empty());
        assert!(
            messages(json!({
                "path": "a", "limit": 100, "ratio": 0.5, "mode": "slow",
                "tags": ["x", "y"], "maybe": null, "inner": {"x": true}
            }))
            .is_empty()
        );
    }

    #[test]
    fn each_kind_of_violation_reads_as_a_sentence() {
        assert_eq!(messages(json!({})), ["missing required field 'path'"]);
        assert_eq!(
            messages(json!({"path": 3})),
            ["field 'path' must be a string, got an integer (3)"]
        );
        assert_eq!(
            messages(json!({"path": "a", "limit": "10"})),
            ["field 'limit' must be an integer, got a string (\"10\")"]
        );
        assert_eq!(
            messages(json!({"path": "a", "limit": 2.5})),
            ["field 'limit' must be an integer, got a number (2.5)"]
        );
        assert_eq!(
            messages(json!({"path": "a", "limit": 0})),
            ["field 'limit' must be at least 1, got 0"]
        );
        assert_eq!(
            messages(json!({"path": "a", "limit": 101})),
            ["field 'limit' must be at most 100, got 101"]
        );
        assert_eq!(
            messages(json!({"path": "a", "ratio": 0})),
            ["field 'ratio' must be greater than 0, got 0"]
        );
        assert_eq!(
            messages(json!({"path": "a", "mode": "medium"})),
            ["field 'mode' must be one of \"fast\", \"slow\", got \"medium\""]
        );
        assert_eq!(
            messages(json!({"path": "a", "colour": "red"})),
            [
                "field 'colour' is not a known field (allowed fields: path, limit, ratio, mode, tags, maybe, inner)"
            ]
        );
        assert_eq!(
            messages(json!({"path": "a", "tags": ["x", 1]})),
            ["field 'tags[1]' must be a string, got an integer (1)"]
        );
        assert_eq!(
            messages(json!({"path": "a", "tags": ["a", "b", "c", "d"]})),
            ["field 'tags' must have at most 3 items, got 4"]
        );
        assert_eq!(
            messages(json!({"path": "a", "maybe": 1})),
            ["field 'maybe' must be a string or null, got an integer (1)"]
        );
        assert_eq!(
            messages(json!({"path": "a", "inner": {"y": 1}})),
            [
                "missing required field 'inner.x'",
                "field 'inner.y' is not a known field (allowed fields: x)"
            ]
        );
        assert_eq!(
            messages(json!({"path": ""})),
            ["field 'path' must be at least 1 characters long, got 0"]
        );
        assert_eq!(
            messages(json!([1])),
            ["the arguments must be an object, got an array of 1 items"]
        );
    }

    #[test]
    fn several_problems_are_reported_together_but_capped() {
        let many: Map<String, Value> = (0..20).map(|i| (format!("f{i}"), json!(i))).collect();
        let found = validate(&schema(), &Value::Object(many));
        assert_eq!(found.len(), MAX_REPORTED);
    }

    #[test]
    fn any_of_accepts_a_value_matching_one_branch() {
        let schema = json!({"anyOf": [{"type": "string"}, {"type": "integer", "minimum": 0}]});
        assert!(validate(&schema, &json!("x")).is_empty());
        assert!(validate(&schema, &json!(3)).is_empty());
        let found = validate(&schema, &json!(-1));
        assert_eq!(
            found[0].to_string(),
            "the arguments must match one of its 2 allowed forms, got an integer (-1)"
        );
    }

    #[test]
    fn unknown_keywords_and_odd_schemas_do_not_reject() {
        assert!(validate(&json!({"pattern": "^a$"}), &json!("b")).is_empty());
        assert!(validate(&json!(true), &json!({"x": 1})).is_empty());
        assert!(validate(&json!({"type": 7}), &json!("x")).is_empty());
        assert!(!validate(&json!(false), &json!(1)).is_empty());
    }

    #[test]
    fn parameters_summarise_for_error_messages() {
        assert_eq!(
            summarize_parameters(&schema()),
            "path (string, required), limit (integer), ratio (number), mode (string, one of \"fast\"/\"slow\"), tags (array), maybe (string|null), inner (object)"
        );
        assert_eq!(summarize_parameters(&json!({"type": "object"})), "none");
    }

    fn arbitrary_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            "\\PC{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a-z]{1,6}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        // Whatever a model sends, validation answers with a bounded list and never panics.
        #[test]
        fn any_value_gets_a_bounded_answer(value in arbitrary_json()) {
            let found = validate(&schema(), &value);
            prop_assert!(found.len() <= MAX_REPORTED);
            // The schema requires an object, so anything else is always refused.
            if !value.is_object() {
                prop_assert!(!found.is_empty());
            }
            for violation in &found {
                prop_assert!(!violation.message.is_empty());
            }
        }

        // Arbitrary schemas (including nonsense) never make the validator panic.
        #[test]
        fn any_schema_is_survivable(schema in arbitrary_json(), value in arbitrary_json()) {
            let _ = validate(&schema, &value);
        }
    }
}
