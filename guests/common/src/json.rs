//! Strict JSON reading: unknown fields and wrong types are errors that name the field path.

use crate::{Error, Result};
use serde_json::{Map, Value};

/// Path of `key` under `path` (`""` is the question root).
pub fn child(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// Path of element `i` of the list at `path`.
pub fn index(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

/// A short name of a JSON value's type for messages.
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Parse question JSON text into its top-level object.
pub fn parse_question(text: &str) -> Result<Map<String, Value>> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(other) => Err(Error::invalid(
            "question",
            format!("must be a JSON object, got {}", type_name(&other)),
        )),
        Err(e) => Err(Error::invalid("question", format!("not valid JSON: {e}"))),
    }
}

/// An object whose fields are taken one by one; `finish` rejects the fields nobody took.
pub struct Fields<'a> {
    path: String,
    map: &'a Map<String, Value>,
    allowed: &'static [&'static str],
}

impl<'a> Fields<'a> {
    /// Read `v` (at `path`) as an object with the `allowed` fields.
    pub fn new(v: &'a Value, path: &str, allowed: &'static [&'static str]) -> Result<Self> {
        match v {
            Value::Object(map) => Self::of_map(map, path, allowed),
            other => Err(Error::invalid(
                path,
                format!("must be an object, got {}", type_name(other)),
            )),
        }
    }

    /// Same as `new` for an already parsed map; unknown fields are rejected right away.
    pub fn of_map(
        map: &'a Map<String, Value>,
        path: &str,
        allowed: &'static [&'static str],
    ) -> Result<Self> {
        for k in map.keys() {
            if !allowed.contains(&k.as_str()) {
                return Err(Error::invalid(
                    &child(path, k),
                    format!("unknown field (expected one of: {})", allowed.join(", ")),
                ));
            }
        }
        Ok(Fields {
            path: path.to_string(),
            map,
            allowed,
        })
    }

    /// The path of field `key`.
    pub fn path_of(&self, key: &str) -> String {
        child(&self.path, key)
    }

    /// Field `key`, `None` when absent or null.
    pub fn opt(&self, key: &str) -> Option<&'a Value> {
        debug_assert!(self.allowed.contains(&key));
        match self.map.get(key) {
            None | Some(Value::Null) => None,
            Some(v) => Some(v),
        }
    }

    /// Field `key`, required.
    pub fn req(&self, key: &str) -> Result<&'a Value> {
        self.opt(key)
            .ok_or_else(|| Error::invalid(&self.path_of(key), "required"))
    }

    /// Optional non-empty string field.
    pub fn opt_str(&self, key: &str) -> Result<Option<&'a str>> {
        match self.opt(key) {
            None => Ok(None),
            Some(v) => non_empty_str(v, &self.path_of(key)).map(Some),
        }
    }

    /// Required non-empty string field.
    pub fn req_str(&self, key: &str) -> Result<&'a str> {
        non_empty_str(self.req(key)?, &self.path_of(key))
    }

    /// Check the question's `type` field equals `expected`.
    pub fn check_type(&self, expected: &str) -> Result<()> {
        let t = self.req_str("type")?;
        if t != expected {
            return Err(Error::invalid(
                &self.path_of("type"),
                format!("must be \"{expected}\", got \"{t}\""),
            ));
        }
        Ok(())
    }
}

/// A non-empty string.
pub fn non_empty_str<'a>(v: &'a Value, path: &str) -> Result<&'a str> {
    match v {
        Value::String(s) if s.is_empty() => Err(Error::invalid(path, "must not be empty")),
        Value::String(s) => Ok(s),
        other => Err(Error::invalid(
            path,
            format!("must be a string, got {}", type_name(other)),
        )),
    }
}

/// An array.
pub fn array<'a>(v: &'a Value, path: &str) -> Result<&'a Vec<Value>> {
    match v {
        Value::Array(a) => Ok(a),
        other => Err(Error::invalid(
            path,
            format!("must be an array, got {}", type_name(other)),
        )),
    }
}

/// "Content": a non-empty string as is, an object or array as compact JSON (key order kept).
pub fn content_text(v: &Value, path: &str) -> Result<String> {
    match v {
        Value::String(s) if s.is_empty() => Err(Error::invalid(path, "must not be empty")),
        Value::String(s) => Ok(s.clone()),
        Value::Object(_) | Value::Array(_) => Ok(compact(v)),
        other => Err(Error::invalid(
            path,
            format!(
                "must be a string, an object or an array, got {}",
                type_name(other)
            ),
        )),
    }
}

/// Compact, deterministic JSON text (serde_json with `preserve_order`).
pub fn compact(v: &Value) -> String {
    serde_json::to_string(v).expect("a serde_json::Value always serializes")
}

/// OpenAI-style instructions: a non-empty string, or a non-empty list of parts
/// `{type: "input_text", text}` / `{type: "input_json", data: object | array of objects}`,
/// joined with newlines (JSON parts as compact JSON).
pub fn openai_instructions(v: &Value, path: &str) -> Result<String> {
    match v {
        Value::String(_) => Ok(non_empty_str(v, path)?.to_string()),
        Value::Array(parts) => {
            if parts.is_empty() {
                return Err(Error::invalid(path, "must not be empty"));
            }
            let mut out = Vec::with_capacity(parts.len());
            for (i, part) in parts.iter().enumerate() {
                let p = index(path, i);
                let obj = match part {
                    Value::Object(m) => m,
                    other => {
                        return Err(Error::invalid(
                            &p,
                            format!("must be an object, got {}", type_name(other)),
                        ))
                    }
                };
                let kind = match obj.get("type") {
                    Some(Value::String(s)) => s.as_str(),
                    Some(other) => {
                        return Err(Error::invalid(
                            &child(&p, "type"),
                            format!("must be a string, got {}", type_name(other)),
                        ))
                    }
                    None => return Err(Error::invalid(&child(&p, "type"), "required")),
                };
                match kind {
                    "input_text" => {
                        let f = Fields::of_map(obj, &p, &["type", "text"])?;
                        out.push(f.req_str("text")?.to_string());
                    }
                    "input_json" => {
                        let f = Fields::of_map(obj, &p, &["type", "data"])?;
                        let data = f.req("data")?;
                        let dp = f.path_of("data");
                        match data {
                            Value::Object(_) => {}
                            Value::Array(items) => {
                                for (j, item) in items.iter().enumerate() {
                                    if !item.is_object() {
                                        return Err(Error::invalid(
                                            &index(&dp, j),
                                            format!("must be an object, got {}", type_name(item)),
                                        ));
                                    }
                                }
                            }
                            other => {
                                return Err(Error::invalid(
                                    &dp,
                                    format!(
                                        "must be an object or an array of objects, got {}",
                                        type_name(other)
                                    ),
                                ))
                            }
                        }
                        out.push(compact(data));
                    }
                    "input_image" => {
                        return Err(Error::invalid(
                            &p,
                            "input_image is not supported: this server has no vision model",
                        ))
                    }
                    other => {
                        return Err(Error::invalid(
                            &child(&p, "type"),
                            format!(
                                "unknown part type \"{other}\" (expected input_text or input_json)"
                            ),
                        ))
                    }
                }
            }
            Ok(out.join("\n"))
        }
        other => Err(Error::invalid(
            path,
            format!(
                "must be a string or a list of parts, got {}",
                type_name(other)
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn content_text_forms() {
        assert_eq!(content_text(&json!("hi"), "x").unwrap(), "hi");
        assert_eq!(
            content_text(&json!({"b": 1, "a": [1, 2]}), "x").unwrap(),
            r#"{"b":1,"a":[1,2]}"#
        );
        assert_eq!(
            content_text(&json!(""), "x"),
            Err(Error::Invalid("x: must not be empty".into()))
        );
        assert!(
            matches!(content_text(&json!(3), "x"), Err(Error::Invalid(m)) if m.starts_with("x: must be a string"))
        );
    }

    #[test]
    fn openai_instruction_parts() {
        let v = json!([{"type": "input_text", "text": "Is it red?"}, {"type": "input_json", "data": {"k": "v"}}]);
        assert_eq!(
            openai_instructions(&v, "instructions").unwrap(),
            "Is it red?\n{\"k\":\"v\"}"
        );
        let img =
            json!([{"type": "input_text", "text": "a"}, {"type": "input_image", "image_url": "x"}]);
        assert_eq!(
            openai_instructions(&img, "instructions"),
            Err(Error::Invalid(
                "instructions[1]: input_image is not supported: this server has no vision model"
                    .into()
            ))
        );
        let bad = json!([{"type": "input_json", "data": [1]}]);
        assert!(
            matches!(openai_instructions(&bad, "instructions"), Err(Error::Invalid(m)) if m.starts_with("instructions[0].data[0]:"))
        );
        let extra = json!([{"type": "input_text", "text": "a", "x": 1}]);
        assert!(
            matches!(openai_instructions(&extra, "instructions"), Err(Error::Invalid(m)) if m.starts_with("instructions[0].x: unknown field"))
        );
    }

    #[test]
    fn unknown_fields_rejected() {
        let v = json!({"a": 1, "b": 2});
        let e = Fields::new(&v, "", &["a"]).err().unwrap();
        assert_eq!(
            e,
            Error::Invalid("b: unknown field (expected one of: a)".into())
        );
    }
}
