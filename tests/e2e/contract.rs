//! The contract: real responses of every endpoint, successes and each error kind, validate
//! against the schema `/openapi.json` gives for their path, method, status and content type.
//!
//! The document is registered with `jsonschema` as a resource, and each response is validated
//! against `{"$ref": "<document>#/paths/<path>/<method>/responses/<status>/content/<type>/schema"}`,
//! so the document's own `#/components/schemas/...` references resolve inside it (OpenAPI 3.1
//! schemas are JSON Schema 2020-12). A status the document does not list for the operation
//! fails, and so does an operation of the document that no request here exercised.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{json, Value};

use crate::server::{option_mass_range, test_guest, Reply, Server};

const DOCUMENT: &str = "urn:decide:openapi";
const ADMIN: &str = "contract-admin-key";

/// The document and what has been checked against it.
struct Contract {
    document: Value,
    registry: jsonschema::Registry<'static>,
    checked: BTreeSet<(String, String, u16)>,
}

/// A JSON pointer segment.
fn escape(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

impl Contract {
    fn fetch(server: &Server) -> Contract {
        let reply = server.get("/openapi.json");
        assert_eq!(reply.status, 200, "{}", reply.body);
        let document = reply.body.clone();
        assert_eq!(document["openapi"], "3.1.0", "{document}");
        let registry = jsonschema::Registry::new()
            .add(DOCUMENT, document.clone())
            .expect("the document is a resource")
            .prepare()
            .expect("the document's references resolve");
        let mut contract = Contract {
            document,
            registry,
            checked: BTreeSet::new(),
        };
        contract.check("get", "/openapi.json", &reply);
        contract
    }

    /// Checks `reply` to `method path` (`path` as the document writes it, `{name}` and all).
    fn check(&mut self, method: &str, path: &str, reply: &Reply) {
        let operation = &self.document["paths"][path][method];
        assert!(
            operation.is_object(),
            "{method} {path} is not in the document"
        );
        let status = reply.status.to_string();
        let Some(response) = operation["responses"].get(&status) else {
            panic!(
                "{method} {path} answered {status}, which the document does not list ({:?}): {}",
                operation["responses"]
                    .as_object()
                    .map(|r| r.keys().collect::<Vec<_>>()),
                reply.body
            );
        };
        let content_type = reply
            .headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .map(|v| v.split(';').next().unwrap_or("").trim().to_string());
        match (response.get("content"), content_type) {
            (None, None) => {}
            (None, Some(_)) if reply.body == Value::String(String::new()) => {}
            (None, Some(kind)) => {
                panic!(
                    "{method} {path} {status}: a body of {kind} where none is documented: {}",
                    reply.body
                )
            }
            (Some(content), kind) => {
                let kind =
                    kind.unwrap_or_else(|| panic!("{method} {path} {status}: no content-type"));
                assert!(
                    content.get(&kind).is_some(),
                    "{method} {path} {status}: content-type {kind} is not documented ({content})"
                );
                let pointer = format!(
                    "/paths/{}/{method}/responses/{status}/content/{}/schema",
                    escape(path),
                    escape(&kind)
                );
                let encoded = pointer.replace('{', "%7B").replace('}', "%7D");
                let schema = json!({"$ref": format!("{DOCUMENT}#{encoded}")});
                let validator = jsonschema::options()
                    .with_registry(&self.registry)
                    .build(&schema)
                    .unwrap_or_else(|e| panic!("{method} {path} {status}: {e}"));
                let errors: Vec<String> = validator
                    .iter_errors(&reply.body)
                    .map(|e| format!("at {}: {e}", e.instance_path()))
                    .collect();
                assert!(
                    errors.is_empty(),
                    "{method} {path} {status} does not match its schema:\n{}\nbody: {}",
                    errors.join("\n"),
                    reply.body
                );
            }
        }
        self.checked
            .insert((method.to_string(), path.to_string(), reply.status));
    }

    /// Checks a reply and asserts its status.
    fn expect(&mut self, method: &str, path: &str, reply: Reply, status: u16) -> Reply {
        assert_eq!(reply.status, status, "{method} {path}: {}", reply.body);
        self.check(method, path, &reply);
        reply
    }

    /// Every operation of the document was exercised.
    fn assert_every_operation_checked(&self) {
        let mut missing = Vec::new();
        for (path, item) in self.document["paths"].as_object().unwrap() {
            for method in item.as_object().unwrap().keys() {
                if !self
                    .checked
                    .iter()
                    .any(|(m, p, _)| m == method && p == path)
                {
                    missing.push(format!("{method} {path}"));
                }
            }
        }
        assert!(missing.is_empty(), "not exercised: {missing:?}");
    }
}

/// `method url` with optional key, raw body and headers.
fn send(
    server: &Server,
    method: &str,
    path: &str,
    key: Option<&str>,
    body: Option<(Vec<u8>, &str)>,
    headers: &[(&str, &str)],
) -> Reply {
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    let mut request = client.request(
        reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap(),
        format!("{}{path}", server.base),
    );
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    if let Some((bytes, content_type)) = body {
        request = request.header("content-type", content_type).body(bytes);
    }
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    Server::reply(request.send().expect("request"))
}

fn json_body(value: &Value) -> Option<(Vec<u8>, &'static str)> {
    Some((value.to_string().into_bytes(), "application/json"))
}

fn decisions() -> Value {
    json!({
        "model": "gpt-6-luna",
        "input": "I was charged twice this month. Please refund the extra charge.",
        "questions": [
            {"type": "predicate", "name": "refund", "instructions": "The customer asks for a refund."},
            {"type": "choice", "name": "team", "instructions": "Which team owns this ticket?",
             "choices": [{"value": "billing"}, {"value": "shipping"}, {"value": false, "description": "none"}]},
            {"type": "score", "name": "anger", "instructions": "How angry is the customer?",
             "levels": [{"label": "calm"}, {"label": "annoyed"}, {"label": "furious"}]}
        ],
        "extra": {"detail": "full", "return_prompt": true},
    })
}

fn systemone() -> Value {
    json!({
        "state": {"subject": "Refund", "body": "I was charged twice."},
        "questions": {
            "refund": {"type": "noul", "instructions": "The customer asks for a refund."},
            "team": {"type": "choice", "instructions": "Which team?", "criteria": {"billing": null, "shipping": "Parcels"}},
            "anger": {"type": "score", "instructions": "How angry?", "criteria": ["calm", "annoyed", {"level": "furious"}]},
            // Over --max-prompt-tokens: this question alone fails (a partial failure).
            "broken": {"type": "noul", "instructions": "Is the parcel late again? ".repeat(500)},
        },
        "return_prompt": true,
    })
}

fn fields() -> Value {
    json!({"context": "I was charged twice. Please refund it.", "min_probability": 0.9, "return_prompt": true,
           "schema": {"refund": {"type": "boolean", "description": "Does the customer ask for a refund?"},
                      "team": {"type": "enum", "description": "Which team?", "choices": ["billing", "shipping"]}}})
}

fn classify() -> Value {
    json!({"state": "I was charged twice. Please refund it.", "question": "Triage this ticket.", "return_prompt": true,
           "schema": {"type": "object", "additionalProperties": false,
                      "required": ["refund", "team", "severity", "kind"],
                      "properties": {"refund": {"type": "boolean"},
                                     "team": {"enum": ["billing", "shipping"]},
                                     "severity": {"type": "integer", "minimum": 1, "maximum": 3},
                                     "kind": {"const": "ticket"}}}})
}

#[test]
fn real_responses_match_the_openapi_document() {
    let server = Server::ready(&[
        "--admin-key",
        ADMIN,
        "--max-body-bytes",
        "300000",
        "--batch-max-input-bytes",
        "2000",
        "--schema-max-input-chars",
        "2000",
        "--max-prompt-tokens",
        "2048",
    ]);
    let mut c = Contract::fetch(&server);
    let s = &server;

    // The service endpoints.
    c.expect("get", "/health", s.get("/health"), 200);
    c.expect("get", "/metrics", s.get("/metrics"), 200);
    // With --admin-key set, /metrics needs it (or --metrics-key).
    c.expect("get", "/metrics", s.get_anonymous("/metrics"), 401);
    c.expect("get", "/v1/models", s.get("/v1/models"), 200);
    c.expect(
        "get",
        "/plugins/jev-decison/capabilities",
        s.get("/plugins/jev-decison/capabilities"),
        200,
    );

    // OpenAI's Decisions format: answers, a refusal among answers, every error kind.
    let path = "/v1/decisions";
    let reply = c.expect("post", path, s.post(path, &decisions()), 200);
    assert!(
        reply.body["answers"][0]["extra"]["prompt"]["reads"].is_array(),
        "{}",
        reply.body
    );
    // A threshold between the answers' option masses: a refusal with its prompt among answers.
    let (low, high) = option_mass_range(&reply.body);
    let mut some_abstain = decisions();
    some_abstain["extra"]["min_option_mass"] = json!((low + high) / 2.0);
    let reply = c.expect("post", path, s.post(path, &some_abstain), 200);
    assert!(
        reply.body["answers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["type"] == "refusal" && a["extra"]["prompt"].is_object()),
        "{}",
        reply.body
    );
    let mut mixed = decisions();
    // 30 options do not fit the direct readout's 26 labels: that question alone is refused.
    let many: Vec<Value> = (0..30)
        .map(|i| json!({"value": format!("team {i}")}))
        .collect();
    mixed["questions"][1]["choices"] = json!(many);
    mixed["extra"] =
        json!({"detail": "none", "backend_options": {"readout": "direct"}, "return_prompt": true});
    let reply = c.expect("post", path, s.post(path, &mixed), 200);
    assert_eq!(
        reply.body["answers"][1]["type"], "refusal",
        "{}",
        reply.body
    );
    c.expect("post", path, s.post(path, &fields()), 200);
    c.expect(
        "post",
        path,
        s.post(
            path,
            &json!({"model": "gpt-6-luna", "input": "x", "questions": []}),
        ),
        400,
    );
    let mut unknown = decisions();
    unknown["model"] = json!("no-such-model");
    c.expect("post", path, s.post(path, &unknown), 404);
    let big = json!({"model": "gpt-6-luna", "input": "x".repeat(400_000), "questions": []});
    c.expect("post", path, s.post(path, &big), 413);
    let gzip = send(
        s,
        "post",
        path,
        None,
        json_body(&decisions()),
        &[("content-encoding", "gzip")],
    );
    c.expect("post", path, gzip, 415);
    // Every answer below its min_option_mass abstains: 422.
    let mut abstain = decisions();
    abstain["extra"] = json!({"min_option_mass": 1.0});
    c.expect("post", path, s.post(path, &abstain), 422);
    let invalid_question =
        json!({"model": "gpt-6-luna", "input": "x", "questions": [{"type": "predicate"}]});
    c.expect("post", path, s.post(path, &invalid_question), 400);
    c.expect(
        "post",
        path,
        s.post(path, &json!({"context": "x", "schema": {}})),
        422,
    );

    // /v1/fields.
    let path = "/v1/fields";
    let reply = c.expect("post", path, s.post(path, &fields()), 200);
    assert!(reply.body["prompts"]["team"].is_object(), "{}", reply.body);
    c.expect(
        "post",
        path,
        s.post(
            path,
            &json!({"context": "x", "schema": {"a": {"type": "text", "description": "d"}}}),
        ),
        422,
    );
    c.expect(
        "post",
        path,
        s.post_raw(path, "{not json", "application/json"),
        422,
    );
    c.expect(
        "post",
        path,
        s.post(path, &json!({"context": "y".repeat(400_000), "schema": {}})),
        413,
    );
    let multipart = send(
        s,
        "post",
        path,
        None,
        Some((b"--b--".to_vec(), "multipart/form-data; boundary=b")),
        &[],
    );
    c.expect("post", path, multipart, 415);

    // TypeSafe's Jev format.
    let path = "/v1/systemone";
    let reply = c.expect("post", path, s.post(path, &systemone()), 200);
    assert!(
        reply.body["partial_failures"]["broken"].is_object(),
        "{}",
        reply.body
    );
    assert!(
        reply.body["prompts"]["refund"].is_object(),
        "{}",
        reply.body
    );
    c.expect(
        "post",
        path,
        s.post(path, &json!({"state": "", "questions": {}})),
        422,
    );
    c.expect("post", path, s.post(path, &json!({"model": "gpt-9", "state": "x", "questions": {"q": {"type": "noul", "instructions": "?"}}})), 404);
    c.expect(
        "post",
        path,
        s.post(
            path,
            &json!({"state": "z".repeat(400_000), "questions": {}}),
        ),
        413,
    );
    let zstd = send(
        s,
        "post",
        path,
        None,
        json_body(&systemone()),
        &[("content-encoding", "br")],
    );
    c.expect("post", path, zstd, 415);
    // A prompt over --max-prompt-tokens: every question refused with 400.
    let long = "The parcel was late again and nobody answered the phone. ".repeat(300);
    let over =
        json!({"state": long, "questions": {"q": {"type": "noul", "instructions": "Late?"}}});
    c.expect("post", path, s.post(path, &over), 400);

    // Batches.
    let path = "/v1/systemone/batch";
    let batch = json!({"questions": {"q": {"type": "noul", "instructions": "Is this about billing?"}}, "return_prompt": true,
                       "items": [{"state": "I was charged twice."}, {"state": ""}, {"state": {"k": 1}, "questions": {"u": {"type": "noul", "instructions": "Urgent?"}}}]});
    let reply = c.expect("post", path, s.post(path, &batch), 200);
    assert!(
        reply.body["items"][1]["error"].is_object(),
        "{}",
        reply.body
    );
    assert!(
        reply.body["items"][0]["prompts"]["q"].is_object(),
        "{}",
        reply.body
    );
    c.expect("post", path, s.post(path, &json!({"items": []})), 422);
    c.expect("post", path, s.post(path, &json!({"model": "gpt-9", "questions": {"q": {"type": "noul", "instructions": "?"}}, "items": [{"state": "x"}]})), 404);
    let heavy = json!({"questions": {"q": {"type": "noul", "instructions": "?"}}, "items": [{"state": "w".repeat(2500)}]});
    c.expect("post", path, s.post(path, &heavy), 413);
    let multipart = send(
        s,
        "post",
        path,
        None,
        Some((b"--b--".to_vec(), "multipart/form-data; boundary=b")),
        &[],
    );
    c.expect("post", path, multipart, 415);

    // JSON-Schema classification, on both of its paths.
    for path in ["/v1/classify", "/plugins/jev-decison/infer"] {
        let reply = c.expect("post", path, s.post(path, &classify()), 200);
        assert!(reply.body["prompts"]["/team"].is_object(), "{}", reply.body);
        let mut generate = classify();
        generate["mode"] = json!("generate");
        c.expect("post", path, s.post(path, &generate), 400);
        let mut free = classify();
        free["schema"] = json!({"type": "string"});
        c.expect("post", path, s.post(path, &free), 422);
        let mut long = classify();
        long["state"] = json!("v".repeat(2500));
        c.expect("post", path, s.post(path, &long), 413);
        let mut unknown = classify();
        unknown["model"] = json!("gpt-9");
        c.expect("post", path, s.post(path, &unknown), 404);
        let br = send(
            s,
            "post",
            path,
            None,
            json_body(&classify()),
            &[("content-encoding", "br")],
        );
        c.expect("post", path, br, 415);
    }
    let mut fixed = classify();
    fixed["schema"] = json!({"const": 3});
    let reply = c.expect("post", "/v1/classify", s.post("/v1/classify", &fixed), 200);
    assert_eq!(reply.body["value"], 3, "{}", reply.body);

    // The default tenant sees the plugins but may not change them or calibrate.
    c.expect("get", "/v1/plugins", s.get("/v1/plugins"), 200);
    let sentiment = std::fs::read(test_guest("openai-sentiment")).unwrap();
    let wasm = |bytes: &[u8]| Some((bytes.to_vec(), "application/wasm"));
    c.expect(
        "put",
        "/v1/plugins/{name}",
        send(
            s,
            "put",
            "/v1/plugins/openai-sentiment",
            None,
            wasm(&sentiment),
            &[],
        ),
        403,
    );
    c.expect("get", "/v1/calibration", s.get("/v1/calibration"), 403);
    // No tenants yet: the default tenant's own usage.
    c.expect("get", "/v1/usage", s.get("/v1/usage"), 200);

    // The admin API.
    let admin = Some(ADMIN);
    let tenants = "/admin/v1/tenants";
    c.expect("get", tenants, s.get(tenants), 401);
    c.expect(
        "get",
        tenants,
        send(s, "get", tenants, admin, None, &[]),
        200,
    );
    let create = json!({"name": "contract", "limits": {"requests_per_minute": 600}, "settings": {"weight": 2}});
    let tenant = c.expect(
        "post",
        tenants,
        send(s, "post", tenants, admin, json_body(&create), &[]),
        201,
    );
    let id = tenant.body["id"].as_str().unwrap().to_string();
    c.expect(
        "post",
        tenants,
        send(s, "post", tenants, admin, json_body(&create), &[]),
        409,
    );
    c.expect(
        "post",
        tenants,
        send(
            s,
            "post",
            tenants,
            admin,
            json_body(&json!({"name": ""})),
            &[],
        ),
        400,
    );
    c.expect(
        "post",
        tenants,
        send(
            s,
            "post",
            tenants,
            admin,
            Some((b"{".to_vec(), "application/json")),
            &[("content-encoding", "br")],
        ),
        415,
    );
    let one = "/admin/v1/tenants/{id}";
    let at = format!("{tenants}/{id}");
    c.expect("get", one, send(s, "get", &at, admin, None, &[]), 200);
    c.expect(
        "get",
        one,
        send(s, "get", "/admin/v1/tenants/tn_missing", admin, None, &[]),
        404,
    );
    let patch = json!({"limits": {"requests_per_minute": null, "max_questions": 50}, "settings": {"min_option_mass": 0.0}});
    c.expect(
        "patch",
        one,
        send(s, "patch", &at, admin, json_body(&patch), &[]),
        200,
    );
    c.expect(
        "patch",
        one,
        send(
            s,
            "patch",
            &at,
            admin,
            json_body(&json!({"colour": 1})),
            &[],
        ),
        400,
    );
    let keys = "/admin/v1/tenants/{id}/keys";
    let key = c.expect(
        "post",
        keys,
        send(s, "post", &format!("{at}/keys"), admin, None, &[]),
        201,
    );
    let key_id = key.body["id"].as_str().unwrap().to_string();
    let key = key.body["key"].as_str().unwrap().to_string();
    c.expect(
        "post",
        keys,
        send(
            s,
            "post",
            &format!("{at}/keys"),
            admin,
            json_body(&json!({"x": 1})),
            &[],
        ),
        400,
    );
    c.expect(
        "post",
        keys,
        send(
            s,
            "post",
            "/admin/v1/tenants/tn_missing/keys",
            admin,
            None,
            &[],
        ),
        404,
    );
    c.expect(
        "get",
        keys,
        send(s, "get", &format!("{at}/keys"), admin, None, &[]),
        200,
    );
    c.expect(
        "get",
        keys,
        send(
            s,
            "get",
            "/admin/v1/tenants/tn_missing/keys",
            admin,
            None,
            &[],
        ),
        404,
    );

    // With a tenant, decision requests need a key.
    let key = Some(key.as_str());
    c.expect(
        "post",
        "/v1/decisions",
        s.post("/v1/decisions", &decisions()),
        401,
    );
    c.expect(
        "post",
        "/v1/decisions",
        send(
            s,
            "post",
            "/v1/decisions",
            key,
            json_body(&decisions()),
            &[],
        ),
        200,
    );
    c.expect(
        "post",
        "/v1/systemone",
        s.post("/v1/systemone", &systemone()),
        401,
    );
    c.expect(
        "post",
        "/v1/systemone/batch",
        s.post("/v1/systemone/batch", &json!({"items": [{"state": "x"}]})),
        401,
    );
    c.expect("post", "/v1/fields", s.post("/v1/fields", &fields()), 401);
    c.expect(
        "post",
        "/v1/classify",
        s.post("/v1/classify", &classify()),
        401,
    );
    c.expect(
        "post",
        "/plugins/jev-decison/infer",
        s.post("/plugins/jev-decison/infer", &classify()),
        401,
    );
    c.expect("get", "/v1/plugins", s.get("/v1/plugins"), 401);
    let usage = "/admin/v1/tenants/{id}/usage";
    c.expect(
        "get",
        usage,
        send(s, "get", &format!("{at}/usage"), admin, None, &[]),
        200,
    );
    c.expect(
        "get",
        usage,
        send(
            s,
            "get",
            "/admin/v1/tenants/default/usage",
            admin,
            None,
            &[],
        ),
        200,
    );
    c.expect(
        "get",
        usage,
        send(
            s,
            "get",
            "/admin/v1/tenants/tn_missing/usage",
            admin,
            None,
            &[],
        ),
        404,
    );

    // The tenant's own plugins.
    let plugin = "/v1/plugins/{name}";
    let at_plugin = "/v1/plugins/openai-sentiment";
    c.expect(
        "put",
        plugin,
        send(
            s,
            "put",
            at_plugin,
            key,
            Some((sentiment.clone(), "application/octet-stream")),
            &[],
        ),
        415,
    );
    c.expect(
        "put",
        plugin,
        send(s, "put", at_plugin, key, wasm(b"not a component"), &[]),
        400,
    );
    c.expect(
        "put",
        plugin,
        send(
            s,
            "put",
            "/v1/plugins/Bad%20Name",
            key,
            wasm(&sentiment),
            &[],
        ),
        400,
    );
    c.expect(
        "put",
        plugin,
        send(s, "put", at_plugin, None, wasm(&sentiment), &[]),
        401,
    );
    c.expect(
        "put",
        plugin,
        send(s, "put", at_plugin, key, wasm(&sentiment), &[]),
        200,
    );
    c.expect(
        "put",
        plugin,
        send(s, "put", at_plugin, key, wasm(&sentiment), &[]),
        200,
    );
    c.expect(
        "get",
        "/v1/plugins",
        send(s, "get", "/v1/plugins", key, None, &[]),
        200,
    );
    let versions = "/v1/plugins/{name}/versions";
    c.expect(
        "get",
        versions,
        send(s, "get", &format!("{at_plugin}/versions"), key, None, &[]),
        200,
    );
    c.expect(
        "get",
        versions,
        send(s, "get", "/v1/plugins/openai-none/versions", key, None, &[]),
        404,
    );
    c.expect(
        "get",
        versions,
        send(s, "get", &format!("{at_plugin}/versions"), None, None, &[]),
        401,
    );
    let rollback = "/v1/plugins/{name}/rollback";
    let at_rollback = format!("{at_plugin}/rollback");
    c.expect(
        "post",
        rollback,
        send(
            s,
            "post",
            &at_rollback,
            key,
            json_body(&json!({"version": 1})),
            &[],
        ),
        200,
    );
    c.expect(
        "post",
        rollback,
        send(
            s,
            "post",
            &at_rollback,
            key,
            json_body(&json!({"version": 9})),
            &[],
        ),
        404,
    );
    c.expect(
        "post",
        rollback,
        send(
            s,
            "post",
            &at_rollback,
            key,
            json_body(&json!({"version": 0})),
            &[],
        ),
        400,
    );
    c.expect(
        "post",
        rollback,
        send(
            s,
            "post",
            &at_rollback,
            key,
            json_body(&json!({"pad": "p".repeat(5000)})),
            &[],
        ),
        413,
    );
    c.expect(
        "delete",
        plugin,
        send(s, "delete", at_plugin, key, None, &[]),
        204,
    );
    c.expect(
        "delete",
        plugin,
        send(s, "delete", at_plugin, key, None, &[]),
        404,
    );
    // Its history: kept after a plain delete, dropped with `purge=true`.
    c.expect(
        "delete",
        plugin,
        send(
            s,
            "delete",
            &format!("{at_plugin}?purge=maybe"),
            key,
            None,
            &[],
        ),
        400,
    );
    c.expect(
        "delete",
        plugin,
        send(
            s,
            "delete",
            &format!("{at_plugin}?purge=true"),
            key,
            None,
            &[],
        ),
        204,
    );
    c.expect(
        "get",
        versions,
        send(s, "get", &format!("{at_plugin}/versions"), key, None, &[]),
        404,
    );

    // The tenant's own usage, by its key; none without one.
    c.expect(
        "get",
        "/v1/usage",
        send(s, "get", "/v1/usage", key, None, &[]),
        200,
    );
    c.expect(
        "get",
        "/v1/usage",
        send(s, "get", "/v1/usage", None, None, &[]),
        401,
    );

    // The tenant's calibration: none, a file too small, a fit started and one refused while
    // it runs.
    let calibration = "/v1/calibration";
    c.expect(
        "get",
        calibration,
        send(s, "get", calibration, key, None, &[]),
        200,
    );
    c.expect(
        "delete",
        calibration,
        send(s, "delete", calibration, key, None, &[]),
        404,
    );
    c.expect(
        "delete",
        calibration,
        send(s, "delete", calibration, None, None, &[]),
        401,
    );
    let text = |body: String| Some((body.into_bytes(), "application/x-ndjson"));
    let questions = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../calibration/default.jsonl"
    ))
    .unwrap();
    let few: String = questions.lines().take(3).collect::<Vec<_>>().join("\n");
    c.expect(
        "put",
        calibration,
        send(s, "put", calibration, key, text(few), &[]),
        400,
    );
    let fifty: String = questions.lines().take(50).collect::<Vec<_>>().join("\n");
    c.expect(
        "put",
        calibration,
        send(s, "put", calibration, key, text(fifty.clone()), &[]),
        202,
    );
    c.expect(
        "put",
        calibration,
        send(s, "put", calibration, key, text(fifty), &[]),
        409,
    );
    c.expect(
        "get",
        calibration,
        send(s, "get", calibration, key, None, &[]),
        200,
    );
    // DELETE cancels the running fit (or, had it finished, removes its result).
    c.expect(
        "delete",
        calibration,
        send(s, "delete", calibration, key, None, &[]),
        204,
    );
    c.expect(
        "get",
        calibration,
        send(s, "get", calibration, key, None, &[]),
        200,
    );

    // Revoking and deleting.
    let revoke = "/admin/v1/tenants/{id}/keys/{key_id}";
    c.expect(
        "delete",
        revoke,
        send(
            s,
            "delete",
            &format!("{at}/keys/{key_id}"),
            admin,
            None,
            &[],
        ),
        204,
    );
    c.expect(
        "delete",
        revoke,
        send(
            s,
            "delete",
            &format!("{at}/keys/{key_id}"),
            admin,
            None,
            &[],
        ),
        404,
    );
    c.expect("delete", one, send(s, "delete", &at, admin, None, &[]), 204);
    c.expect("delete", one, send(s, "delete", &at, admin, None, &[]), 404);

    // Without --admin-key the admin API is off: 403.
    let plain = Server::start(&["--ready-delay-ms", "60000"]);
    c.expect(
        "get",
        tenants,
        send(&plain, "get", tenants, admin, None, &[]),
        403,
    );
    // While loading: 503 (with Retry-After) from every endpoint that needs the model.
    c.expect("get", "/health", plain.get("/health"), 503);
    c.expect("get", "/v1/models", plain.get("/v1/models"), 503);
    for (path, body) in [
        ("/v1/decisions", decisions()),
        ("/v1/decisions", fields()),
        ("/v1/fields", fields()),
        ("/v1/systemone", systemone()),
        (
            "/v1/systemone/batch",
            json!({"items": [{"state": "x", "questions": {"q": {"type": "noul", "instructions": "?"}}}]}),
        ),
        ("/v1/classify", classify()),
        ("/plugins/jev-decison/infer", classify()),
    ] {
        let reply = c.expect("post", path, plain.post(path, &body), 503);
        assert!(
            reply.headers.get("retry-after").is_some(),
            "{path}: {:?}",
            reply.headers
        );
    }
    c.expect("get", "/v1/plugins", plain.get("/v1/plugins"), 503);

    c.assert_every_operation_checked();
}

/// A state long enough that reading it takes far more than a millisecond on any machine.
fn long_state(seed: &str) -> String {
    format!("{seed}: the parcel was late again and nobody answered the phone. ").repeat(25)
}

/// Each decision format with `timeout_ms` set to 1 over a state that is not cached.
fn past_deadline() -> Vec<(&'static str, Value)> {
    let mut openai = decisions();
    openai["input"] = json!(long_state("decisions"));
    openai["extra"] = json!({"timeout_ms": 1});
    let mut jev = systemone();
    jev["state"] = json!(long_state("systemone"));
    jev["questions"].as_object_mut().unwrap().remove("broken");
    jev["timeout_ms"] = json!(1);
    let mut field_schema = fields();
    field_schema["context"] = json!(long_state("fields"));
    field_schema["timeout_ms"] = json!(1);
    let mut openai_fields = field_schema.clone();
    openai_fields["context"] = json!(long_state("decisions fields"));
    let mut classification = classify();
    classification["state"] = json!(long_state("classify"));
    classification["timeout_ms"] = json!(1);
    let mut infer = classification.clone();
    infer["state"] = json!(long_state("infer"));
    let batch = json!({"questions": {"q": {"type": "noul", "instructions": "Is this about billing?"}},
                       "items": [{"state": long_state("batch")}], "timeout_ms": 1});
    vec![
        ("/v1/decisions", openai),
        ("/v1/decisions", openai_fields),
        ("/v1/systemone", jev),
        ("/v1/fields", field_schema),
        ("/v1/systemone/batch", batch),
        ("/v1/classify", classification),
        ("/plugins/jev-decison/infer", infer),
    ]
}

/// The statuses a well-formed request can still get from a working server: 504 past its
/// deadline, 502 when the model's pass fails (an injected fault, as a CUDA error would), each
/// in the body shape the document gives for it.
#[test]
fn deadlines_and_engine_failures_match_the_openapi_document() {
    let server = Server::ready(&[
        "--schema-max-input-chars",
        "4000",
        "--batch-max-input-bytes",
        "4000",
    ]);
    let mut c = Contract::fetch(&server);
    for (path, body) in past_deadline() {
        let reply = c.expect("post", path, server.post(path, &body), 504);
        assert!(
            reply.body.to_string().contains("timeout_ms"),
            "{path}: {}",
            reply.body
        );
    }
    drop(server);

    // Every second pass fails (every pass would fail the startup self-check): each format
    // reports a request whose pass failed as 502, and the next one is answered.
    let server = Server::ready(&["--inject-fault", "error-every:2"]);
    let mut c = Contract::fetch(&server);
    for (path, body) in [
        ("/v1/decisions", decisions()),
        ("/v1/decisions", fields()),
        ("/v1/systemone", systemone()),
        ("/v1/fields", fields()),
        ("/v1/classify", classify()),
        ("/plugins/jev-decison/infer", classify()),
    ] {
        let replies: Vec<Reply> = (0..2).map(|_| server.post(path, &body)).collect();
        let statuses: Vec<u16> = replies.iter().map(|r| r.status).collect();
        assert!(
            statuses.contains(&502) && statuses.contains(&200),
            "{path}: {statuses:?}"
        );
        for reply in replies {
            c.check("post", path, &reply);
            if reply.status == 502 {
                assert!(
                    reply.body.to_string().contains("engine_error"),
                    "{path}: {}",
                    reply.body
                );
            }
        }
    }
    // A batch's items fail alone, each with its engine error.
    let batch = json!({"questions": {"q": {"type": "noul", "instructions": "Is this about billing?"}},
                       "items": [{"state": "I was charged twice."}]});
    let replies: Vec<Reply> = (0..2)
        .map(|_| {
            c.expect(
                "post",
                "/v1/systemone/batch",
                server.post("/v1/systemone/batch", &batch),
                200,
            )
        })
        .collect();
    assert!(
        replies.iter().any(|r| r.body["items"][0]["error"]
            .to_string()
            .contains("engine_error")),
        "{:?}",
        replies.iter().map(|r| &r.body).collect::<Vec<_>>()
    );
}
