//! The structured formats: JSON-Schema classification (`/v1/classify`) and field-schema
//! decisions (`/v1/fields`, and `/v1/decisions` with `context` + `schema`). Each field is one
//! question over the same input, read in one shared-prefix pass, with the probabilities the
//! same question gets on `/v1/systemone`.

use serde_json::{json, Value};

use crate::assert_distribution;
use crate::server::Server;

const TICKET: &str = "Hi, I was charged twice for my subscription this month and I am really upset. Please refund the extra charge today.";
const QUESTION: &str = "Triage this support ticket.";

/// A schema with every supported kind, nested: boolean, enum (with a repeat and an object
/// value), bounded integer, const, null, a closed nested object, a tuple, and a union.
fn every_kind() -> Value {
    json!({
        "type": "object", "additionalProperties": false,
        "required": ["refund", "team", "severity", "kind", "customer", "flags", "channel"],
        "properties": {
            "refund": {"type": "boolean", "description": "Does the customer ask for a refund?"},
            "team": {"enum": ["billing", "shipping", "billing", {"name": "technical", "tier": 2}]},
            "severity": {"type": "integer", "minimum": 1, "maximum": 4},
            "kind": {"const": "ticket"},
            "customer": {
                "type": "object", "additionalProperties": false, "required": ["angry", "note"],
                "properties": {"angry": {"type": "boolean"}, "note": {"type": "null"}}
            },
            "flags": {"type": "array", "prefixItems": [{"type": "boolean"}, {"enum": ["low", "high"]}],
                      "items": false, "minItems": 2},
            "channel": {"anyOf": [{"enum": ["email", "phone"]}, {"type": "null"}]}
        }
    })
}

fn probabilities(decision: &Value) -> Vec<f64> {
    decision["candidates"]
        .as_array()
        .expect("candidates")
        .iter()
        .map(|c| c["probability"].as_f64().expect("a probability"))
        .collect()
}

/// The Jev question a leaf is asked as: the question, the field's path, its description.
fn jev_question(instructions: &str, candidates: &[Value]) -> Value {
    if candidates == [json!(true), json!(false)] {
        return json!({"type": "noul", "instructions": instructions});
    }
    let labels: Vec<String> = candidates
        .iter()
        .map(|v| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect();
    let criteria: serde_json::Map<String, Value> =
        labels.into_iter().map(|l| (l, Value::Null)).collect();
    json!({"type": "choice", "instructions": instructions, "criteria": criteria})
}

/// The probabilities `/v1/systemone` gives the question, in candidate order.
fn jev_probabilities(answer: &Value, candidates: &[Value]) -> Vec<f64> {
    if let Some(p) = answer["noul"].as_f64() {
        return vec![p, 1.0 - p];
    }
    candidates
        .iter()
        .map(|v| {
            let label = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            answer["probabilities"][&label]
                .as_f64()
                .expect("a probability per label")
        })
        .collect()
}

fn assert_close(a: &[f64], b: &[f64], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: {a:?} vs {b:?}");
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() < 1e-4, "{what}: {a:?} vs {b:?}");
    }
}

#[test]
fn classify_answers_every_schema_kind_with_the_probabilities_of_systemone() {
    let server = Server::ready(&[]);
    let body =
        json!({"state": TICKET, "question": QUESTION, "schema": every_kind(), "mode": "classify"});
    let reply = server.post("/v1/classify", &body);
    assert_eq!(reply.status, 200, "{}", reply.body);
    let r = &reply.body;
    assert_eq!(r["accepted"], true, "{r}");
    let value = &r["value"];
    assert_eq!(value["kind"], "ticket");
    assert_eq!(value["customer"]["note"], Value::Null);
    assert!(
        value["refund"].is_boolean() && value["customer"]["angry"].is_boolean(),
        "{value}"
    );
    assert!(
        (1..=4).contains(&value["severity"].as_i64().expect("an integer")),
        "{value}"
    );
    assert_eq!(value["flags"].as_array().map(Vec::len), Some(2), "{value}");
    // Model leaves in schema order, then the values the schema fixes.
    let decisions = r["decisions"].as_array().expect("decisions");
    let pointers: Vec<&str> = decisions
        .iter()
        .map(|d| d["pointer"].as_str().unwrap())
        .collect();
    assert_eq!(
        pointers,
        [
            "/refund",
            "/team",
            "/severity",
            "/customer/angry",
            "/flags/0",
            "/flags/1",
            "/channel",
            "/kind",
            "/customer/note"
        ]
    );
    let team = &decisions[1];
    let values: Vec<&Value> = team["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["value"])
        .collect();
    assert_eq!(
        values,
        [
            &json!("billing"),
            &json!("shipping"),
            &json!({"name": "technical", "tier": 2})
        ]
    );
    for decision in &decisions[..7] {
        assert_distribution(&probabilities(decision));
        let mass = decision["candidate_mass"].as_f64().expect("candidate_mass");
        assert!(mass > 0.0 && mass <= 1.0, "{decision}");
        let chosen = &decision["value"];
        let best = decision["candidates"]
            .as_array()
            .unwrap()
            .iter()
            .max_by(|a, b| {
                a["probability"]
                    .as_f64()
                    .unwrap()
                    .total_cmp(&b["probability"].as_f64().unwrap())
            })
            .unwrap();
        assert_eq!(&best["value"], chosen, "{decision}");
    }
    // One job on the model worker: the input prefilled once, every field's own tokens in one
    // packed pass over it.
    assert_eq!(r["audit"]["backend_requests"], 1, "{r}");
    assert!(r["audit"]["forward_passes"].as_u64().unwrap() <= 2, "{r}");
    let usage = &r["usage"];
    assert!(
        usage["cached_input_tokens"].as_u64().unwrap() > 0,
        "{usage}"
    );

    // The same questions on /v1/systemone get the same probabilities.
    let paths = [
        "refund",
        "team",
        "severity",
        "customer.angry",
        "flags[0]",
        "flags[1]",
        "channel",
    ];
    let descriptions = [
        "Does the customer ask for a refund?",
        "",
        "",
        "",
        "",
        "",
        "",
    ];
    let mut questions = serde_json::Map::new();
    for (i, (path, description)) in paths.iter().zip(descriptions).enumerate() {
        let mut instructions = format!("{QUESTION}\nField: {path}");
        if !description.is_empty() {
            instructions.push_str(&format!("\n{description}"));
        }
        let candidates: Vec<Value> = decisions[i]["candidates"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["value"].clone())
            .collect();
        questions.insert(format!("q{i}"), jev_question(&instructions, &candidates));
    }
    let jev = server.post(
        "/v1/systemone",
        &json!({"state": TICKET, "questions": questions}),
    );
    assert_eq!(jev.status, 200, "{}", jev.body);
    for (i, decision) in decisions[..7].iter().enumerate() {
        let candidates: Vec<Value> = decision["candidates"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["value"].clone())
            .collect();
        let expected = jev_probabilities(&jev.body["answers"][format!("q{i}")], &candidates);
        assert_close(&probabilities(decision), &expected, paths[i]);
    }

    // The jev-decison plugin path answers the same.
    let plugin = server.post("/plugins/jev-decison/infer", &body);
    assert_eq!(plugin.status, 200, "{}", plugin.body);
    for (a, b) in decisions
        .iter()
        .zip(plugin.body["decisions"].as_array().unwrap())
    {
        assert_close(&probabilities(a), &probabilities(b), "plugin path");
    }
    // A schema that fixes everything is built without the model.
    let fixed = server.post(
        "/v1/classify",
        &json!({"state": TICKET, "question": QUESTION, "schema": {"enum": [{"a": 1}, {"a": 1}]}}),
    );
    assert_eq!(fixed.status, 200, "{}", fixed.body);
    assert_eq!(fixed.body["value"], json!({"a": 1}));
    assert_eq!(fixed.body["usage"]["input_tokens"], 0);
}

#[test]
fn classify_refuses_what_it_cannot_decide_before_any_model_work() {
    let server = Server::ready(&[
        "--schema-max-fields",
        "3",
        "--schema-max-depth",
        "2",
        "--schema-max-bytes",
        "600",
        "--schema-max-input-chars",
        "200",
    ]);
    let caps = server.get("/plugins/jev-decison/capabilities");
    assert_eq!(caps.status, 200, "{}", caps.body);
    assert_eq!(caps.body["modes"], json!(["classify"]));
    assert_eq!(
        caps.body["limits"],
        json!({"max_fields": 3, "max_candidates_per_field": 255, "max_depth": 2,
               "max_input_chars": 200, "max_schema_bytes": 600})
    );
    let passes = server.metric("decide_forward_passes_total");
    let closed = |properties: Value| {
        let names: Vec<String> = properties.as_object().unwrap().keys().cloned().collect();
        json!({"type": "object", "additionalProperties": false, "required": names, "properties": properties})
    };
    let ask = |schema: Value| json!({"state": TICKET, "question": QUESTION, "schema": schema});
    let with = |mut body: Value, field: &str, value: Value| {
        body[field] = value;
        body
    };
    let boolean = json!({"type": "boolean"});
    // (body, status, location after "body", words in the message)
    let cases: Vec<(Value, u16, Value, &str)> = vec![
        (
            with(ask(boolean.clone()), "mode", json!("generate")),
            400,
            json!(["mode"]),
            "only classifies",
        ),
        (
            with(ask(boolean.clone()), "mode", json!("auto")),
            400,
            json!(["mode"]),
            "only classifies",
        ),
        (
            with(ask(boolean.clone()), "max_output_tokens", json!(16)),
            400,
            json!(["max_output_tokens"]),
            "output-token budgets",
        ),
        (
            ask(closed(json!({"note": {"type": "string"}}))),
            422,
            json!(["schema", "properties", "note", "type"]),
            "free text",
        ),
        (
            ask(closed(json!({"n": {"type": "number"}}))),
            422,
            json!(["schema", "properties", "n", "type"]),
            "open numbers",
        ),
        (
            ask(closed(json!({"r": {"$ref": "#/$defs/r"}}))),
            422,
            json!(["schema", "properties", "r", "$ref"]),
            "references",
        ),
        (
            ask(json!({"type": "object", "required": ["a"], "properties": {"a": boolean}})),
            422,
            json!(["schema", "additionalProperties"]),
            "open objects",
        ),
        (
            ask(
                json!({"type": "object", "additionalProperties": false, "properties": {"a": boolean}}),
            ),
            422,
            json!(["schema", "required"]),
            "optional fields",
        ),
        (
            ask(closed(json!({"l": {"type": "array", "items": boolean}}))),
            422,
            json!(["schema", "properties", "l"]),
            "open length",
        ),
        (
            ask(json!({"anyOf": [closed(json!({"a": boolean})), {"type": "null"}]})),
            422,
            json!(["schema", "anyOf", 0]),
            "joint constraint",
        ),
        (
            ask(json!({"type": "integer", "minimum": 0, "maximum": 300})),
            422,
            json!(["schema"]),
            "--max-options",
        ),
        (
            ask(closed(
                json!({"a": boolean, "b": boolean, "c": boolean, "d": boolean}),
            )),
            422,
            json!(["schema", "properties", "d"]),
            "--schema-max-fields",
        ),
        (
            ask(closed(
                json!({"a": closed(json!({"b": closed(json!({"c": boolean}))}))}),
            )),
            422,
            json!(["schema", "properties", "a", "properties", "b"]),
            "--schema-max-depth",
        ),
        (
            ask(json!({"enum": ["x".repeat(700), "y"]})),
            413,
            json!(["schema"]),
            "--schema-max-bytes",
        ),
        (
            json!({"state": "x".repeat(201), "question": QUESTION, "schema": boolean}),
            413,
            json!(["state"]),
            "--schema-max-input-chars",
        ),
        (
            with(ask(boolean.clone()), "min_confidence", json!(1.5)),
            422,
            json!(["min_confidence"]),
            "from 0 to 1",
        ),
        (
            json!({"state": TICKET, "schema": boolean}),
            422,
            json!(["question"]),
            "field required",
        ),
    ];
    for (body, status, loc, words) in cases {
        let reply = server.post("/v1/classify", &body);
        assert_eq!(reply.status, status, "{body}: {}", reply.body);
        let detail = &reply.body["detail"][0];
        let mut expected = vec![json!("body")];
        expected.extend(loc.as_array().unwrap().iter().cloned());
        assert_eq!(detail["loc"], Value::Array(expected), "{}", reply.body);
        assert!(
            detail["msg"].as_str().unwrap().contains(words),
            "{words}: {}",
            reply.body
        );
    }
    assert_eq!(
        server.metric("decide_forward_passes_total"),
        passes,
        "a refused request ran the model"
    );
}

#[test]
fn min_confidence_and_min_probability_abstain() {
    let server = Server::ready(&[]);
    let schema = json!({"type": "object", "additionalProperties": false, "required": ["refund", "team"],
        "properties": {"refund": {"type": "boolean"}, "team": {"enum": ["billing", "shipping", "technical"]}}});
    let ask = |min: f64| json!({"state": TICKET, "question": QUESTION, "schema": schema, "min_confidence": min});
    let lenient = server.post("/v1/classify", &ask(0.0));
    assert_eq!(lenient.status, 200, "{}", lenient.body);
    assert_eq!(lenient.body["accepted"], true);
    let strict = server.post("/v1/classify", &ask(0.999));
    assert_eq!(strict.status, 200, "{}", strict.body);
    assert_eq!(strict.body["accepted"], false, "{}", strict.body);
    assert_eq!(strict.body["value"], Value::Null);
    for decision in strict.body["decisions"].as_array().unwrap() {
        assert_eq!(decision["accepted"], false, "{decision}");
        assert!(
            !decision["value"].is_null(),
            "the field's own choice is still reported"
        );
    }
    // Between the two: exactly the fields at or above the threshold are accepted.
    let confidences: Vec<f64> = lenient.body["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["confidence"].as_f64().unwrap())
        .collect();
    let middle = (confidences[0] + confidences[1]) / 2.0;
    let mixed = server.post("/v1/classify", &ask(middle));
    for (decision, confidence) in mixed.body["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .zip(&confidences)
    {
        assert_eq!(decision["accepted"], *confidence >= middle, "{decision}");
    }

    let fields = |min: f64| {
        json!({"context": TICKET, "min_probability": min, "schema": {
        "refund": {"type": "boolean", "description": "Does the customer ask for a refund?"},
        "team": {"type": "enum", "description": "Which team owns it?", "choices": ["billing", "shipping", "technical"]}}})
    };
    let answered = server.post("/v1/fields", &fields(0.0));
    assert_eq!(answered.status, 200, "{}", answered.body);
    assert_eq!(answered.body["abstained_fields"], json!([]));
    let abstained = server.post("/v1/fields", &fields(0.999));
    assert_eq!(abstained.status, 200, "{}", abstained.body);
    assert_eq!(
        abstained.body["abstained_fields"],
        json!(["refund", "team"])
    );
    assert_eq!(
        abstained.body["parsed_json"],
        json!({"refund": null, "team": null})
    );
    for name in ["refund", "team"] {
        let field = &abstained.body["fields"][name];
        assert_eq!(field["abstained"], true);
        assert_eq!(
            field["selected_value"], answered.body["parsed_json"][name],
            "{field}"
        );
    }
}

#[test]
fn field_schema_decisions_answer_on_both_paths_as_systemone_does() {
    let server = Server::ready(&[]);
    let body = json!({"context": TICKET, "strategy": "aligned_prefill", "cache_salt": "team-a", "schema": {
        "refund": {"type": "boolean", "description": "Does the customer ask for a refund?"},
        "team": {"type": "enum", "description": "Which team owns it?", "choices": ["billing", "shipping", "technical"]}}});
    let on_decisions = server.post("/v1/decisions", &body);
    assert_eq!(on_decisions.status, 200, "{}", on_decisions.body);
    let r = &on_decisions.body;
    assert_eq!(r["strategy"], "prefill_then_batch");
    assert_eq!(r["requested_strategy"], "aligned_prefill");
    assert_eq!(r["backend_requests"], 1);
    assert_eq!(
        r["scores_are_calibrated"], false,
        "no calibration was measured: {r}"
    );
    assert_eq!(
        r["cache_block_tokens"],
        decide_engine::prefix_cache::BLOCK_TOKENS
    );
    assert!(r["max_prompt_tokens"].as_u64().unwrap() > 0);
    assert!(r["elapsed_ms"].as_f64().unwrap() > 0.0);
    for name in ["refund", "team"] {
        let field = &r["fields"][name];
        assert_distribution(&probabilities(field));
        for candidate in field["candidates"].as_array().unwrap() {
            assert!(candidate["logprob"].as_f64().unwrap() < 0.0, "{candidate}");
            assert!(candidate["label"].is_string(), "{candidate}");
        }
        assert_eq!(r["parsed_json"][name], field["value"]);
    }
    let on_fields = server.post("/v1/fields", &body);
    assert_eq!(on_fields.status, 200, "{}", on_fields.body);
    // The same salt: the second request's input came from the prefix cache.
    assert!(
        on_fields.body["usage"]["cached_input_tokens"].as_u64()
            > r["usage"]["cached_input_tokens"].as_u64(),
        "{} vs {}",
        on_fields.body["usage"],
        r["usage"]
    );
    let jev = server.post("/v1/systemone", &json!({"state": TICKET, "questions": {
        "refund": {"type": "noul", "instructions": "Field: refund\nDoes the customer ask for a refund?"},
        "team": {"type": "choice", "instructions": "Field: team\nWhich team owns it?",
                 "criteria": {"billing": null, "shipping": null, "technical": null}}}}));
    assert_eq!(jev.status, 200, "{}", jev.body);
    let refund = jev.body["answers"]["refund"]["noul"].as_f64().unwrap();
    for reply in [r, &on_fields.body] {
        assert_close(
            &probabilities(&reply["fields"]["refund"]),
            &[refund, 1.0 - refund],
            "refund",
        );
        let team = &jev.body["answers"]["team"]["probabilities"];
        let expected: Vec<f64> = ["billing", "shipping", "technical"]
            .iter()
            .map(|l| team[*l].as_f64().unwrap())
            .collect();
        assert_close(&probabilities(&reply["fields"]["team"]), &expected, "team");
    }
    // score_temperature is the request's own temperature: the probabilities move.
    let mut hot = body.clone();
    hot["score_temperature"] = json!(5.0);
    let hot = server.post("/v1/fields", &hot);
    assert_eq!(hot.status, 200, "{}", hot.body);
    let p = hot.body["fields"]["refund"]["probability"]
        .as_f64()
        .unwrap();
    assert!(
        (p - 0.5).abs() < (r["fields"]["refund"]["probability"].as_f64().unwrap() - 0.5).abs(),
        "{p}"
    );
    // Its errors are 422s naming the field, on both paths; OpenAI's shape keeps its own.
    let mut bad = body.clone();
    bad["schema"]["team"]["choices"] = json!(["billing", "billing"]);
    for path in ["/v1/decisions", "/v1/fields"] {
        let reply = server.post(path, &bad);
        assert_eq!(reply.status, 422, "{}", reply.body);
        assert_eq!(
            reply.body["detail"][0]["loc"],
            json!(["body", "schema", "team", "choices", 1]),
            "{}",
            reply.body
        );
    }
    let openai = server.post(
        "/v1/decisions",
        &json!({"model": "smol", "input": "", "questions": []}),
    );
    assert_eq!(openai.status, 400, "{}", openai.body);
    assert!(
        openai.body["error"]["message"].is_string(),
        "{}",
        openai.body
    );
}

/// What the model computes grows with the fields' own text, the input counted once: 32
/// boolean fields over one input cost the input once plus 32 short suffixes.
#[test]
fn input_tokens_grow_linearly_with_the_fields_not_the_input() {
    let server = Server::ready(&[]);
    let context = format!("{TICKET} ").repeat(12);
    let fields = |n: usize| {
        let schema: serde_json::Map<String, Value> = (0..n)
            .map(|i| (format!("f{i:02}"), json!({"type": "boolean", "description": format!("Does the ticket mention topic number {i}?")})))
            .collect();
        // A salt per request: every request reads its input cold.
        json!({"context": context, "schema": schema, "cache_salt": format!("cold-{n}")})
    };
    let computed = |n: usize| {
        let reply = server.post("/v1/fields", &fields(n));
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(reply.body["backend_requests"], 1);
        let usage = &reply.body["usage"];
        (
            usage["computed_input_tokens"].as_u64().unwrap(),
            usage["input_tokens"].as_u64().unwrap(),
        )
    };
    let (one, one_total) = computed(1);
    let (two, _) = computed(2);
    let (many, many_total) = computed(32);
    let per_field = two - one;
    println!(
        "computed input tokens: 1 field {one}, 32 fields {many} (x{:.2}); prompt tokens {one_total} -> {many_total}; per field {per_field}",
        many as f64 / one as f64
    );
    assert!(
        per_field > 0 && per_field * 4 < one,
        "a field's own text is short next to the input: {per_field} vs {one}"
    );
    // The input once, then each field's own tokens (field names and descriptions differ in
    // length by a token or two).
    let expected = one + 31 * per_field;
    assert!(
        many.abs_diff(expected) <= 31 * 2,
        "32 fields computed {many} tokens, expected about {expected}"
    );
    // Repeating the input per field would cost the prompt tokens: several times more.
    assert!(
        many * 5 < many_total,
        "{many} computed of {many_total} prompt tokens"
    );
}
