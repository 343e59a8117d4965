//! The YAML front matter of a SKILL.md: splitting it from the body and reading it as JSON
//! values, so the rest of the code deals with one data model.

use serde_json::{Map, Number, Value};
use yaml_rust2::{Yaml, YamlLoader};

/// A SKILL.md split into its front matter (a mapping) and its body.
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    /// The front matter's keys and values.
    pub front: Map<String, Value>,
    /// Everything after the closing `---`.
    pub body: String,
}

/// Splits and parses a SKILL.md. The front matter must open the file with a `---` line and
/// close with another `---` (or `...`) line.
pub fn parse(text: &str) -> Result<Document, String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split_inclusive('\n');
    let first = lines.next().unwrap_or_default();
    if first.trim_end() != "---" {
        return Err(
            "it does not start with YAML front matter (a '---' line, then name and description, then '---')"
                .into(),
        );
    }
    let mut yaml = String::new();
    let mut consumed = first.len();
    let mut closed = false;
    for line in lines {
        consumed += line.len();
        if matches!(line.trim_end(), "---" | "...") {
            closed = true;
            break;
        }
        yaml.push_str(line);
    }
    if !closed {
        return Err("its front matter is never closed by a '---' line".into());
    }
    let docs = YamlLoader::load_from_str(&yaml)
        .map_err(|e| format!("its front matter is not valid YAML: {e}"))?;
    let front = match docs.into_iter().next() {
        None | Some(Yaml::Null) => Map::new(),
        Some(doc) => match to_json(doc)? {
            Value::Object(map) => map,
            _ => return Err("its front matter is not a set of 'key: value' lines".into()),
        },
    };
    Ok(Document {
        front,
        body: text[consumed..].to_string(),
    })
}

fn to_json(yaml: Yaml) -> Result<Value, String> {
    Ok(match yaml {
        Yaml::Null => Value::Null,
        Yaml::Boolean(b) => Value::Bool(b),
        Yaml::Integer(i) => Value::Number(i.into()),
        Yaml::Real(text) => text
            .parse::<f64>()
            .ok()
            .and_then(Number::from_f64)
            .map(Value::Number)
            .unwrap_or(Value::String(text)),
        Yaml::String(s) => Value::String(s),
        Yaml::Array(items) => {
            Value::Array(items.into_iter().map(to_json).collect::<Result<_, _>>()?)
        }
        Yaml::Hash(hash) => {
            let mut map = Map::new();
            for (key, value) in hash {
                let key = match key {
                    Yaml::String(s) => s,
                    Yaml::Integer(i) => i.to_string(),
                    Yaml::Boolean(b) => b.to_string(),
                    Yaml::Real(r) => r,
                    other => {
                        return Err(format!(
                            "its front matter has a key that is not text: {other:?}"
                        ));
                    }
                };
                map.insert(key, to_json(value)?);
            }
            Value::Object(map)
        }
        Yaml::Alias(_) => {
            return Err("its front matter uses YAML aliases, which are not supported".into());
        }
        Yaml::BadValue => return Err("its front matter holds a value that cannot be read".into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn splits_front_matter_and_body() {
        let doc = parse("---\nname: gh\ndescription: \"GitHub: issues\"\nalways: true\nrequires:\n  bins: [gh, git]\n  env:\n    - GH_TOKEN\n---\n# Body\ntext\n").unwrap();
        assert_eq!(
            Value::Object(doc.front),
            json!({"name": "gh", "description": "GitHub: issues", "always": true,
                   "requires": {"bins": ["gh", "git"], "env": ["GH_TOKEN"]}})
        );
        assert_eq!(doc.body, "# Body\ntext\n");
    }

    #[test]
    fn folded_descriptions_and_json_metadata_strings() {
        let doc = parse("---\nname: x\ndescription: >\n  one\n  two\nmetadata: '{\"nanobot\":{\"requires\":{\"bins\":[\"gh\"]}}}'\n---\n").unwrap();
        assert_eq!(doc.front["description"], json!("one two\n"));
        assert_eq!(
            doc.front["metadata"],
            json!("{\"nanobot\":{\"requires\":{\"bins\":[\"gh\"]}}}")
        );
        assert_eq!(doc.body, "");
    }

    #[test]
    fn malformed_front_matter_is_explained() {
        let cases = [
            ("# no front matter", "does not start with YAML front matter"),
            ("---\nname: x\n", "never closed"),
            ("---\nname: [unclosed\n---\n", "not valid YAML"),
            ("---\n- a\n- b\n---\n", "not a set of 'key: value' lines"),
        ];
        for (text, want) in cases {
            let err = parse(text).unwrap_err();
            assert!(err.contains(want), "{text:?}: {err}");
        }
    }
}
