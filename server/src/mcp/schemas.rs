//! The tools' input schemas, taken from the HTTP API's own OpenAPI document so that a tool's
//! schema is the endpoint's request body, with the server's limits, and cannot drift from it.
//!
//! An OpenAPI 3.1 schema is a JSON Schema (Draft 2020-12) whose references point into the
//! document's `components`; a tool's schema must stand alone, so the body schema is copied
//! with every component it reaches, transitively, under `$defs`, and its references rewritten
//! to point there.

use serde_json::{Map, Value};

/// Where OpenAPI keeps named schemas, and where a standalone JSON Schema keeps them.
const COMPONENTS: &str = "#/components/schemas/";
const DEFS: &str = "#/$defs/";

/// The standalone JSON Schema of `POST path`'s JSON request body in `document`, or `None`
/// when the document has no such body.
pub fn request_body(document: &Value, path: &str) -> Option<Map<String, Value>> {
    let escaped = path.replace('~', "~0").replace('/', "~1");
    let schema = document.pointer(&format!(
        "/paths/{escaped}/post/requestBody/content/application~1json/schema"
    ))?;
    // The root itself, when it is a reference: a tool's schema must be an object schema.
    let root = match reference(schema) {
        Some(name) => component(document, name)?,
        None => schema,
    };
    let mut defs = Map::new();
    collect(document, root, &mut defs);
    let Value::Object(mut standalone) = rewrite(root) else {
        return None;
    };
    if !defs.is_empty() {
        standalone.insert("$defs".into(), Value::Object(defs));
    }
    Some(standalone)
}

/// The component a `$ref` names, if `schema` is one.
fn reference(schema: &Value) -> Option<&str> {
    schema.get("$ref")?.as_str()?.strip_prefix(COMPONENTS)
}

fn component<'a>(document: &'a Value, name: &str) -> Option<&'a Value> {
    document.get("components")?.get("schemas")?.get(name)
}

/// Adds every component `schema` reaches (rewritten) to `defs`.
fn collect(document: &Value, schema: &Value, defs: &mut Map<String, Value>) {
    match schema {
        Value::Object(map) => {
            if let Some(name) = reference(schema) {
                if !defs.contains_key(name) {
                    if let Some(target) = component(document, name) {
                        defs.insert(name.to_string(), rewrite(target));
                        collect(document, target, defs);
                    }
                }
            }
            for value in map.values() {
                collect(document, value, defs);
            }
        }
        Value::Array(items) => items.iter().for_each(|item| collect(document, item, defs)),
        _ => {}
    }
}

/// `schema` with its component references pointing into `$defs`.
fn rewrite(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(key, value)| {
                    let value = match (key.as_str(), value) {
                        ("$ref", Value::String(target)) => Value::String(
                            target
                                .strip_prefix(COMPONENTS)
                                .map_or_else(|| target.clone(), |name| format!("{DEFS}{name}")),
                        ),
                        _ => rewrite(value),
                    };
                    (key.clone(), value)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(rewrite).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `$ref` of `schema`, which must all resolve inside it.
    fn refs(schema: &Value, out: &mut Vec<String>) {
        match schema {
            Value::Object(map) => {
                if let Some(Value::String(target)) = map.get("$ref") {
                    out.push(target.clone());
                }
                map.values().for_each(|v| refs(v, out));
            }
            Value::Array(items) => items.iter().for_each(|v| refs(v, out)),
            _ => {}
        }
    }

    #[test]
    fn the_systemone_and_classify_bodies_stand_alone() {
        let document = crate::openapi::document();
        for path in ["/v1/systemone", "/v1/classify"] {
            let schema = Value::Object(request_body(document, path).expect(path));
            assert_eq!(schema["type"], "object", "{path}");
            assert!(schema["properties"]["state"].is_object(), "{path}");
            let mut found = Vec::new();
            refs(&schema, &mut found);
            for target in found {
                let pointer = target.strip_prefix('#').expect("a local reference");
                assert!(
                    schema.pointer(pointer).is_some(),
                    "{path}: {target} does not resolve"
                );
            }
        }
        let systemone = request_body(document, "/v1/systemone").unwrap();
        assert!(systemone["required"]
            .as_array()
            .unwrap()
            .contains(&Value::from("questions")));
        // The standalone schema validates what the endpoint takes, and refuses what it refuses.
        let validator = jsonschema::draft202012::new(&Value::Object(systemone)).unwrap();
        assert!(validator.is_valid(&serde_json::json!({
            "state": "I was charged twice.",
            "questions": {"refund": {"type": "noul", "instructions": "A refund?"}}})));
        assert!(!validator.is_valid(&serde_json::json!({"state": "x"})));
        assert!(request_body(document, "/v1/nothing").is_none());
    }
}
