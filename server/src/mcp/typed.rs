//! One MCP tool per question type a caller has: the built-ins, the operator's plugins and the
//! caller's own uploads (`/v1/plugins`), each described from the plugin's own info and
//! example.
//!
//! A question type serves one wire format by its name: `systemone-T` is `{"type": "T"}` on
//! `/v1/systemone`, `openai-T` on `/v1/decisions`. Its tool has the plugin's name and takes
//! `{state, question, timeout_ms?, return_prompt?}`: `question` is the type's own question
//! object (`type` may be left out), which the plugin validates as on its endpoint, and it is
//! read through the same pipeline, under the caller's limits, as one question of a request.
//! The structured result is `{model, answer, probabilities, audit, usage}` (and `prompt` when
//! asked): the plugin's answer fields, the calibrated distribution over its options and how it
//! was read.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rmcp::model::{Tool, ToolAnnotations};
use serde_json::{json, Map, Value};

use crate::error::{ApiError, Wire};
use crate::frontends::json::{self as j, at};
use crate::frontends::{audit, systemone};
use crate::loc;
use crate::pipeline::{Engine, Outcome, Question};
use crate::plugins::{PluginKind, PluginSummary};
use crate::state::SharedState;
use crate::tenancy::Caller;

/// The wire-format prefixes a question type's name starts with.
const PREFIXES: &[&str] = &["systemone-", "openai-"];

/// The fields a per-type tool takes; the rest are refused.
const FIELDS: &[&str] = &["state", "question", "timeout_ms", "return_prompt"];

/// A question type a caller can ask through its tool.
pub struct QuestionTypeTool {
    /// The plugin's name, which is the tool's.
    plugin: String,
    /// The type a question of it names (`noul` of `systemone-noul`).
    kind: String,
}

/// The question type `name` names, when the caller has it.
pub fn find(engine: &Engine, caller: &Caller, name: &str) -> Option<QuestionTypeTool> {
    let kind = kind_of(name)?;
    engine
        .plugins()
        .question_type_in(caller.tenant_id(), name)
        .map(|_| QuestionTypeTool {
            plugin: name.to_string(),
            kind: kind.to_string(),
        })
}

/// `T` of `systemone-T` or `openai-T`.
fn kind_of(name: &str) -> Option<&str> {
    PREFIXES
        .iter()
        .find_map(|prefix| name.strip_prefix(prefix))
        .filter(|kind| !kind.is_empty())
}

/// Hints for clients: every tool only reads (nothing it does changes anything), and only
/// this server.
pub fn annotations(title: &str) -> ToolAnnotations {
    ToolAnnotations::with_title(title)
        .read_only(true)
        .destructive(false)
        .idempotent(true)
        .open_world(false)
}

/// A tool for every question type `caller` sees, by name. `body` is the `decide` tool's
/// schema, whose `state`, `timeout_ms` and `return_prompt` these tools share.
pub fn tools(engine: &Engine, caller: &Caller, body: &Map<String, Value>) -> Vec<Tool> {
    let registry = engine.plugins();
    registry
        .list_for(caller.tenant_id())
        .into_iter()
        .filter(|plugin| plugin.kind == PluginKind::QuestionType)
        .filter_map(|plugin| {
            let kind = kind_of(&plugin.name)?.to_string();
            let example = example(engine, caller, &plugin);
            Some(tool(&plugin, &kind, example, body))
        })
        .collect()
}

/// The plugin's example question (its `example()`), parsed; remembered by the component's
/// hash, since asking costs an instance.
fn example(engine: &Engine, caller: &Caller, plugin: &PluginSummary) -> Option<Value> {
    static EXAMPLES: Mutex<Option<HashMap<String, Option<Value>>>> = Mutex::new(None);
    let mut guard = EXAMPLES.lock().unwrap_or_else(|p| p.into_inner());
    let examples = guard.get_or_insert_with(HashMap::new);
    if let Some(known) = examples.get(&plugin.sha256) {
        return known.clone();
    }
    let example = engine
        .plugins()
        .question_type_in(caller.tenant_id(), &plugin.name)
        .and_then(|question_type| question_type.example().ok())
        .and_then(|text| serde_json::from_str::<Value>(&text).ok())
        .filter(Value::is_object);
    // Versions come and go with uploads; a handful of entries per plugin at most.
    if examples.len() >= 1024 {
        examples.clear();
    }
    examples.insert(plugin.sha256.clone(), example.clone());
    example
}

fn tool(
    plugin: &PluginSummary,
    kind: &str,
    example: Option<Value>,
    body: &Map<String, Value>,
) -> Tool {
    let format = if plugin.name.starts_with("openai-") {
        "OpenAI Decisions (/v1/decisions)"
    } else {
        "Jev (/v1/systemone)"
    };
    let source = serde_json::to_value(&plugin.source)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let example_text = example
        .as_ref()
        .map(|e| format!(" Example question: {e}."))
        .unwrap_or_default();
    let description = format!(
        "{} Asks one `{kind}` question ({format} format) about a state, read by the question-type plugin `{}` ({source}, version {}); answers with its fields, the probabilities over its options and an audit.{example_text}",
        plugin.description.trim_end(),
        plugin.name,
        plugin.version,
    );
    let mut question = json!({
        "type": "object",
        "description": format!("A `{kind}` question as the plugin `{}` takes it (`type` may be left out: it is `{kind}`); the plugin validates it.", plugin.name),
    });
    if let Some(example) = example {
        question["examples"] = json!([example]);
    }
    let shared = body.get("properties").and_then(Value::as_object);
    let mut properties = Map::new();
    properties.insert("question".into(), question);
    for field in ["state", "timeout_ms", "return_prompt"] {
        if let Some(schema) = shared.and_then(|p| p.get(field)) {
            properties.insert(field.into(), schema.clone());
        }
    }
    let mut schema = Map::new();
    schema.insert("type".into(), json!("object"));
    schema.insert("properties".into(), Value::Object(properties));
    schema.insert("required".into(), json!(["state", "question"]));
    schema.insert("additionalProperties".into(), json!(false));
    if let Some(defs) = body.get("$defs") {
        schema.insert("$defs".into(), defs.clone());
    }
    Tool::new(plugin.name.clone(), description, Arc::new(schema))
        .annotate(annotations(&format!("Ask a `{kind}` question")))
}

impl QuestionTypeTool {
    /// Asks the question of `arguments` for `caller`, through the pipeline as one question of
    /// a request (the caller's limits, plugins, settings and cache).
    pub async fn ask(
        &self,
        state: &SharedState,
        caller: &Caller,
        engine: Arc<Engine>,
        arguments: &Value,
    ) -> Result<Value, ApiError> {
        let root = loc![];
        let body = j::object(arguments, &root)?;
        j::only_fields(body, FIELDS, &root)?;
        let text = systemone::parse_state(body, &root)?;
        let question_loc = loc!["question"];
        let mut question = j::object(j::required(body, "question", &root)?, &question_loc)?.clone();
        match question.get("type") {
            None | Some(Value::Null) => {
                question.insert("type".into(), json!(self.kind));
            }
            Some(Value::String(kind)) if *kind == self.kind => {}
            Some(other) => {
                return Err(j::invalid(
                    &at(&question_loc, "type"),
                    format!(
                        "this tool asks `{}` questions, got {}; call the tool of that type, or `decide`",
                        self.kind,
                        j::compact(other)
                    ),
                ))
            }
        }
        let mut request = systemone::decision_request(
            text,
            vec![Question {
                loc: question_loc,
                plugin: self.plugin.clone(),
                json: j::compact(&Value::Object(question)),
            }],
        );
        request.timeout = j::timeout_ms(body, "timeout_ms", &root, systemone::TIMEOUT_FIELD)?;
        request.return_prompt = j::flag(body, "return_prompt", &root)?;
        request.scope = crate::frontends::request_scope(caller);
        request.cache_salt = crate::frontends::cache_salt(&caller, None);
        let model = crate::frontends::check_model(state, Wire::SystemOne, None)?;
        let (decided, _request) = crate::frontends::decide(state, caller, engine, request).await?;
        // One question, answered (a refused one fails the call in `decide`).
        let Some(Outcome::Answer(answer)) = decided.outcomes.first() else {
            return Err(ApiError::Internal(
                "a decided question has no answer".into(),
            ));
        };
        let mut fields = Map::new();
        fields.insert("type".into(), json!(self.kind));
        fields.extend(answer.fields.clone());
        let mut result = json!({
            "model": model,
            "answer": fields,
            "probabilities": audit::probabilities(answer),
            "audit": audit::of_answer(answer, false),
            "usage": systemone::usage(decided.input_tokens, decided.cached_tokens),
        });
        if let Some(prompt) = &answer.prompt {
            result["prompt"] = crate::frontends::prompts::to_json(prompt);
        }
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn question_types_are_named_by_their_wire_format() {
        assert_eq!(kind_of("systemone-noul"), Some("noul"));
        assert_eq!(kind_of("openai-sentiment"), Some("sentiment"));
        assert_eq!(kind_of("openai-"), None);
        assert_eq!(kind_of("direct-options"), None);
    }
}
