//! Small, strict JSON readers that produce error messages naming the exact field.
//!
//! serde's derive errors ("unknown variant at line 1 column 80") do not say which question or
//! which field is wrong, so the frontends walk `serde_json::Value`s with these helpers instead.

use serde_json::{Map, Value};

use crate::error::{dotted, ApiError, Loc, LocPart};

/// `loc` extended by one more segment.
pub fn at(loc: &Loc, part: impl Into<LocPart>) -> Loc {
    let mut loc = loc.clone();
    loc.push(part.into());
    loc
}

/// An invalid-field error whose message starts with the dotted path.
pub fn invalid(loc: &Loc, what: impl std::fmt::Display) -> ApiError {
    let path = dotted(loc);
    let message = if path.is_empty() {
        what.to_string()
    } else {
        format!("{path}: {what}")
    };
    ApiError::invalid(loc.clone(), message)
}

/// Longest timeout a request may ask for, in milliseconds (a day): a larger number is a
/// mistake, and the server's `--request-timeout-ms` bounds it anyway.
pub const MAX_TIMEOUT_MS: u64 = 86_400_000;

/// The optional timeout field `key` of `map` (at `loc`): whole milliseconds from 1 to
/// [`MAX_TIMEOUT_MS`]; a 504 names it as `field`.
pub fn timeout_ms(
    map: &Map<String, Value>,
    key: &str,
    loc: &Loc,
    field: &'static str,
) -> Result<Option<crate::cancel::Requested>, ApiError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => match value.as_u64() {
            Some(ms) if (1..=MAX_TIMEOUT_MS).contains(&ms) => {
                Ok(Some(crate::cancel::Requested { ms, field }))
            }
            _ => Err(invalid(
                &at(loc, key),
                format!(
                    "expected whole milliseconds from 1 to {MAX_TIMEOUT_MS}, got {}",
                    compact(value)
                ),
            )),
        },
    }
}

/// The optional boolean field `key` of `map` (at `loc`): absent or null is `false`; anything
/// but a boolean is refused, naming the field (a string `"true"` is a mistake to point out,
/// not a yes).
pub fn flag(map: &Map<String, Value>, key: &str, loc: &Loc) -> Result<bool, ApiError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(value)) => Ok(*value),
        Some(other) => Err(invalid(
            &at(loc, key),
            format!("expected true or false, got {}", type_name(other)),
        )),
    }
}

/// The JSON type name used in messages.
pub fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

pub fn object<'a>(value: &'a Value, loc: &Loc) -> Result<&'a Map<String, Value>, ApiError> {
    value
        .as_object()
        .ok_or_else(|| invalid(loc, format!("expected an object, got {}", type_name(value))))
}

pub fn array<'a>(value: &'a Value, loc: &Loc) -> Result<&'a Vec<Value>, ApiError> {
    value
        .as_array()
        .ok_or_else(|| invalid(loc, format!("expected an array, got {}", type_name(value))))
}

/// A non-empty string.
pub fn string<'a>(value: &'a Value, loc: &Loc) -> Result<&'a str, ApiError> {
    match value {
        Value::String(text) if text.trim().is_empty() => Err(invalid(loc, "must not be empty")),
        Value::String(text) => Ok(text),
        other => Err(invalid(
            loc,
            format!("expected a string, got {}", type_name(other)),
        )),
    }
}

/// Why `text` is not a printable name, if it is not: names (of tenants, questions) are
/// echoed in responses, logs and terminals, where a control character (NUL, escape
/// sequences) or a bidirectional-text control (which reorders what is displayed, so a name
/// can read as another) would let a caller forge what an operator or another client sees.
pub fn unprintable(text: &str) -> Option<String> {
    let bad = text
        .chars()
        .find(|c| c.is_control() || is_bidi_control(*c))?;
    let kind = if bad.is_control() {
        "a control character"
    } else {
        "a bidirectional-text control"
    };
    Some(format!(
        "must be printable characters: it contains {kind} (U+{:04X}); use letters, digits, spaces and punctuation",
        bad as u32
    ))
}

/// The Unicode characters that change the display order of text (Bidi_Control).
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// [`string`], also refusing what is not [printable](unprintable): for names.
pub fn name<'a>(value: &'a Value, loc: &Loc) -> Result<&'a str, ApiError> {
    let text = string(value, loc)?;
    match unprintable(text) {
        Some(why) => Err(invalid(loc, why)),
        None => Ok(text),
    }
}

/// Refuses fields outside `allowed`, naming the first unknown one and the accepted set.
pub fn only_fields(map: &Map<String, Value>, allowed: &[&str], loc: &Loc) -> Result<(), ApiError> {
    for key in map.keys() {
        if !allowed.contains(&key.as_str()) {
            return Err(ApiError::Invalid {
                loc: at(loc, key.as_str()),
                message: format!(
                    "{}: unknown field; accepted fields here: {}",
                    dotted(&at(loc, key.as_str())),
                    allowed.join(", ")
                ),
                kind: "extra_forbidden",
            });
        }
    }
    Ok(())
}

/// A required field.
pub fn required<'a>(
    map: &'a Map<String, Value>,
    field: &str,
    loc: &Loc,
) -> Result<&'a Value, ApiError> {
    map.get(field).ok_or_else(|| ApiError::Invalid {
        loc: at(loc, field),
        message: format!("{}: field required", dotted(&at(loc, field))),
        kind: "missing",
    })
}

/// The input text of a `state`: text as it is, a JSON object or array as compact JSON (keys
/// in the order sent), anything else refused.
pub fn state_text(value: &Value, loc: &Loc) -> Result<String, ApiError> {
    match value {
        Value::String(_) => string(value, loc).map(str::to_string),
        Value::Object(_) | Value::Array(_) => Ok(compact(value)),
        other => Err(invalid(
            loc,
            format!(
                "expected text, a JSON object or an array, got {}",
                type_name(other)
            ),
        )),
    }
}

/// Compact JSON text with keys in the order they were sent: deterministic for a given body.
pub fn compact(value: &Value) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// Limits on a JSON value embedded in the input (OpenAI's `input_json`).
pub struct JsonLimits {
    pub max_depth: usize,
    pub max_values: usize,
    pub max_bytes: usize,
}

/// OpenAI's documented limits for `input_json`: 32 container levels, 10,000 values, 256 KiB.
pub const INPUT_JSON_LIMITS: JsonLimits = JsonLimits {
    max_depth: 32,
    max_values: 10_000,
    max_bytes: 256 * 1024,
};

/// Checks a JSON value against [`JsonLimits`].
pub fn check_json_limits(value: &Value, limits: &JsonLimits, loc: &Loc) -> Result<(), ApiError> {
    fn walk(value: &Value, depth: usize, count: &mut usize) -> usize {
        *count += 1;
        match value {
            Value::Array(items) => items
                .iter()
                .map(|v| walk(v, depth + 1, count))
                .max()
                .unwrap_or(depth + 1)
                .max(depth + 1),
            Value::Object(map) => map
                .values()
                .map(|v| walk(v, depth + 1, count))
                .max()
                .unwrap_or(depth + 1)
                .max(depth + 1),
            _ => depth,
        }
    }
    let mut count = 0;
    let depth = walk(value, 0, &mut count);
    if depth > limits.max_depth {
        return Err(invalid(
            loc,
            format!(
                "nested {depth} levels deep; the limit is {} container levels",
                limits.max_depth
            ),
        ));
    }
    if count > limits.max_values {
        return Err(invalid(
            loc,
            format!("holds {count} values; the limit is {}", limits.max_values),
        ));
    }
    let bytes = compact(value).len();
    if bytes > limits.max_bytes {
        return Err(invalid(
            loc,
            format!(
                "is {bytes} bytes as compact JSON; the limit is {} bytes",
                limits.max_bytes
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loc;
    use serde_json::json;

    #[test]
    fn unknown_fields_are_named() {
        let value = json!({"input": "x", "bogus": 1});
        let error = only_fields(value.as_object().unwrap(), &["input"], &loc![]).unwrap_err();
        assert!(
            error.to_string().starts_with("bogus: unknown field"),
            "{error}"
        );
    }

    #[test]
    fn json_depth_and_size_limits() {
        let mut deep = json!(1);
        for _ in 0..40 {
            deep = json!([deep]);
        }
        assert!(check_json_limits(&deep, &INPUT_JSON_LIMITS, &loc!["input"])
            .unwrap_err()
            .to_string()
            .contains("levels"));
        let wide = Value::Array((0..20_000).map(|i| json!(i)).collect());
        assert!(check_json_limits(&wide, &INPUT_JSON_LIMITS, &loc!["input"])
            .unwrap_err()
            .to_string()
            .contains("values"));
        assert!(check_json_limits(
            &json!({"a": [1, 2, {"b": null}]}),
            &INPUT_JSON_LIMITS,
            &loc![]
        )
        .is_ok());
    }

    #[test]
    fn flags_are_booleans_or_absent() {
        let map = json!({"on": true, "off": false, "null": null, "text": "true", "one": 1});
        let map = map.as_object().unwrap();
        let root = loc!["extra"];
        assert!(flag(map, "on", &root).unwrap());
        assert!(!flag(map, "off", &root).unwrap());
        assert!(!flag(map, "null", &root).unwrap());
        assert!(!flag(map, "missing", &root).unwrap());
        for key in ["text", "one"] {
            let error = flag(map, key, &root).unwrap_err().to_string();
            assert!(
                error.starts_with(&format!("extra.{key}: expected true or false")),
                "{error}"
            );
        }
    }

    #[test]
    fn empty_strings_are_refused() {
        assert!(string(&json!("  "), &loc!["input"]).is_err());
        assert_eq!(string(&json!("ok"), &loc!["input"]).unwrap(), "ok");
    }
}

#[cfg(test)]
mod name_tests {
    use super::*;

    #[test]
    fn names_refuse_controls_and_bidi_controls_only() {
        assert!(unprintable("team-a (billing) é 日本").is_none());
        for bad in [
            "a\u{0}b",
            "evil\u{202E}gpj.exe",
            "x\u{2066}y",
            "tab\there",
            "\u{1b}[31m",
        ] {
            assert!(unprintable(bad).is_some(), "{bad:?}");
        }
        let loc = crate::loc!["questions", 0, "name"];
        let Err(error) = name(&Value::String("a\u{202E}b".into()), &loc) else {
            panic!("a bidi control is refused");
        };
        let message = error.to_string();
        assert!(message.contains("questions[0].name"), "{message}");
        assert!(message.contains("U+202E"), "{message}");
    }
}
