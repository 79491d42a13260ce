//! The labelled question file: JSONL, one question per line,
//! `{"state", "question", "expected", "group"?, "id"?, "domain"?, "difficulty"?}`.
//!
//! `question` is a `/v1/systemone` typed question (`noul`, `choice`, `score`, or any
//! `systemone-*` question-type plugin); `expected` is the answer value on that endpoint: a
//! boolean for `noul`, a criterion label for `choice`, a level index (or the level's text) for
//! `score`. `group` keeps related questions in one cross-validation fold (default: the state, so
//! questions about one text stay together); `id` names the question in messages (default:
//! `line N`); `domain` and `difficulty` (text) are kept for reports broken down by them.
//! Blank lines and lines starting with `#` are ignored. A malformed line makes the
//! whole file malformed: the message names the line and the field.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// The fields of a line.
const FIELDS: [&str; 7] = [
    "state",
    "question",
    "expected",
    "group",
    "id",
    "domain",
    "difficulty",
];

/// The built-in question set (`calibration/default.jsonl`), embedded in the binary.
pub const DEFAULT_SET: &str = include_str!("../../../calibration/default.jsonl");

/// One labelled question.
#[derive(Debug, Clone, PartialEq)]
pub struct LabelledQuestion {
    /// `id`, or `line N`.
    pub id: String,
    /// The input text (objects and arrays as compact JSON, like `/v1/systemone`).
    pub state: String,
    /// The question-type plugin: `systemone-<type>`.
    pub plugin: String,
    /// The question object as JSON text.
    pub json: String,
    /// The expected answer value.
    pub expected: Value,
    /// Cross-validation group.
    pub group: String,
    /// `domain` of the line, for reports.
    pub domain: Option<String>,
    /// `difficulty` of the line (`easy`, `standard`, `hard`), for reports.
    pub difficulty: Option<String>,
}

/// A parsed question file.
#[derive(Debug, Clone)]
pub struct QuestionSet {
    /// Where it came from (a path, or `built-in`), for messages.
    pub origin: String,
    /// sha256 of the file content (part of the saved-result key).
    pub sha256: String,
    pub questions: Vec<LabelledQuestion>,
}

impl QuestionSet {
    /// Parses JSONL `text` from `origin`.
    pub fn parse(origin: &str, text: &str) -> Result<QuestionSet, String> {
        let mut questions = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let number = index + 1;
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let at = |what: String| format!("{origin} line {number}: {what}");
            let value: Value =
                serde_json::from_str(line).map_err(|e| at(format!("not JSON: {e}")))?;
            let Value::Object(object) = value else {
                return Err(at("expected a JSON object".into()));
            };
            if let Some(unknown) = object.keys().find(|k| !FIELDS.contains(&k.as_str())) {
                return Err(at(format!(
                    "unknown field `{unknown}` (fields: {})",
                    FIELDS.join(", ")
                )));
            }
            let label = |field: &str| -> Result<Option<String>, String> {
                match object.get(field) {
                    None | Some(Value::Null) => Ok(None),
                    Some(Value::String(s)) => Ok(Some(s.clone())),
                    Some(_) => Err(at(format!("`{field}` must be text"))),
                }
            };
            let (domain, difficulty) = (label("domain")?, label("difficulty")?);
            let state = match object.get("state") {
                Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
                Some(v @ (Value::Object(_) | Value::Array(_))) => v.to_string(),
                Some(_) => {
                    return Err(at(
                        "`state` must be non-empty text, an object or an array".into()
                    ))
                }
                None => return Err(at("`state` is required".into())),
            };
            let question =
                match object.get("question") {
                    Some(q @ Value::Object(map)) => match map.get("type") {
                        Some(Value::String(kind)) if !kind.is_empty() => {
                            (format!("systemone-{kind}"), q.to_string())
                        }
                        _ => return Err(at(
                            "`question.type` must be a question type such as noul, choice, score"
                                .into(),
                        )),
                    },
                    _ => {
                        return Err(at(
                            "`question` must be a /v1/systemone question object".into()
                        ))
                    }
                };
            let expected = match object.get("expected") {
                None | Some(Value::Null) => return Err(at("`expected` is required".into())),
                Some(v) => v.clone(),
            };
            let id = match object.get("id") {
                None | Some(Value::Null) => format!("line {number}"),
                Some(Value::String(s)) => s.clone(),
                Some(v) => v.to_string(),
            };
            let group = match object.get("group") {
                None | Some(Value::Null) => format!(
                    "state:{}",
                    hex::encode(&Sha256::digest(state.as_bytes())[..8])
                ),
                Some(Value::String(s)) => s.clone(),
                Some(v) => v.to_string(),
            };
            questions.push(LabelledQuestion {
                id,
                state,
                plugin: question.0,
                json: question.1,
                expected,
                group,
                domain,
                difficulty,
            });
        }
        if questions.is_empty() {
            return Err(format!("{origin}: no questions"));
        }
        Ok(QuestionSet {
            origin: origin.to_string(),
            sha256: hex::encode(Sha256::digest(text.as_bytes())),
            questions,
        })
    }

    /// The built-in set.
    pub fn builtin() -> QuestionSet {
        QuestionSet::parse("built-in set calibration/default.jsonl", DEFAULT_SET)
            .expect("the built-in question set parses")
    }

    /// Reads and parses a file.
    pub fn read(path: &std::path::Path) -> Result<QuestionSet, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read question file {}: {e}", path.display()))?;
        QuestionSet::parse(&path.display().to_string(), &text)
    }
}

/// Index of the option `expected` names: the option whose key (a JSON value as text) equals
/// it, else (for text) the option whose shown text equals it.
pub fn expected_index(options: &[crate::plugins::OptionDef], expected: &Value) -> Option<usize> {
    options
        .iter()
        .position(|o| serde_json::from_str::<Value>(&o.key).is_ok_and(|key| same(&key, expected)))
        .or_else(|| match expected {
            Value::String(text) => options.iter().position(|o| &o.text == text),
            _ => None,
        })
}

/// JSON equality with numbers compared by value (`2` == `2.0`).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::OptionDef;
    use serde_json::json;

    fn opt(key: &str, text: &str) -> OptionDef {
        OptionDef {
            key: key.into(),
            text: text.into(),
            description: None,
        }
    }

    #[test]
    fn the_builtin_set_parses_and_is_large_and_varied() {
        let set = QuestionSet::builtin();
        assert!(
            set.questions.len() >= 200,
            "{} questions",
            set.questions.len()
        );
        for kind in ["systemone-noul", "systemone-choice", "systemone-score"] {
            let n = set.questions.iter().filter(|q| q.plugin == kind).count();
            assert!(n >= 40, "{kind}: {n} questions");
        }
        let groups: std::collections::HashSet<_> = set.questions.iter().map(|q| &q.group).collect();
        assert!(groups.len() >= 50, "{} groups", groups.len());
    }

    #[test]
    fn lines_are_checked_and_named() {
        let ok = r#"{"state": "hi", "question": {"type": "noul", "instructions": "Greeting?"}, "expected": true}"#;
        let set = QuestionSet::parse("f", &format!("# comment\n\n{ok}\n")).unwrap();
        assert_eq!(set.questions[0].id, "line 3");
        assert_eq!(set.questions[0].plugin, "systemone-noul");
        for (bad, needle) in [
            ("{", "line 1: not JSON"),
            (
                r#"{"question": {"type": "noul"}, "expected": true}"#,
                "`state` is required",
            ),
            (
                r#"{"state": "x", "question": {"instructions": "?"}, "expected": true}"#,
                "question.type",
            ),
            (
                r#"{"state": "x", "question": {"type": "noul"}}"#,
                "`expected` is required",
            ),
            (
                r#"{"state": "x", "question": {"type": "noul"}, "expected": 1, "extra": 2}"#,
                "unknown field `extra`",
            ),
        ] {
            let error = QuestionSet::parse("f", bad).unwrap_err();
            assert!(error.contains(needle), "{error}");
        }
        assert!(QuestionSet::parse("f", "\n# nothing\n")
            .unwrap_err()
            .contains("no questions"));
    }

    #[test]
    fn expected_values_name_options() {
        let noul = [opt("true", "Yes"), opt("false", "No")];
        assert_eq!(expected_index(&noul, &json!(false)), Some(1));
        let choice = [
            opt("\"billing\"", "billing"),
            opt("\"shipping\"", "shipping"),
        ];
        assert_eq!(expected_index(&choice, &json!("shipping")), Some(1));
        assert_eq!(expected_index(&choice, &json!("nope")), None);
        let score = [opt("0", "low"), opt("1", "mid"), opt("2", "high")];
        assert_eq!(expected_index(&score, &json!(2)), Some(2));
        assert_eq!(expected_index(&score, &json!(1.0)), Some(1));
        assert_eq!(expected_index(&score, &json!("low")), Some(0));
    }
}
