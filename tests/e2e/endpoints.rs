//! Both endpoints answer every question type from the model, and agree with each other.

use serde_json::{json, Value};

use crate::assert_distribution;
use crate::server::Server;

const TICKET: &str = "Hi, I was charged twice for my subscription this month and I am really upset. Please refund the extra charge today.";

fn openai_request() -> Value {
    json!({
        "model": "smol",
        "input": TICKET,
        "questions": [
            {"type": "predicate", "name": "refund", "instructions": "The customer asks for a refund."},
            {"type": "choice", "name": "team", "instructions": "Which team should handle this ticket?",
             "choices": [{"value": "billing", "description": "payments and invoices"}, {"value": "shipping"}, {"value": "technical"}]},
            {"type": "score", "instructions": "How angry is the customer?",
             "levels": [{"label": "calm"}, {"label": "annoyed"}, {"label": "furious"}]}
        ]
    })
}

fn systemone_request() -> Value {
    json!({
        "model": "jev-latest",
        "state": TICKET,
        "questions": {
            "refund": {"type": "noul", "instructions": "The customer asks for a refund."},
            "team": {"type": "choice", "instructions": "Which team should handle this ticket?",
                     "criteria": {"billing": "payments and invoices", "shipping": null, "technical": null}},
            "anger": {"type": "score", "instructions": "How angry is the customer?", "criteria": ["calm", "annoyed", "furious"]}
        }
    })
}

fn floats(values: &[Value]) -> Vec<f64> {
    values
        .iter()
        .map(|v| v.as_f64().expect("a number"))
        .collect()
}

#[test]
fn openai_decisions_answer_every_question_type() {
    let server = Server::ready(&[]);
    let reply = server.post("/v1/decisions", &openai_request());
    assert_eq!(reply.status, 200, "{}", reply.body);
    // Server-Timing names each step with its duration; the model step is never free.
    let timing = reply.headers["server-timing"].to_str().unwrap();
    let steps: Vec<(&str, f64)> = timing
        .split(", ")
        .map(|entry| {
            let (name, dur) = entry.split_once(";dur=").expect("name;dur=ms");
            (name, dur.parse().expect("milliseconds"))
        })
        .collect();
    let names: Vec<&str> = steps.iter().map(|(name, _)| *name).collect();
    assert_eq!(names, ["compile", "prepare", "model", "answer"], "{timing}");
    assert!(steps[2].1 > 0.0, "{timing}");
    let body = &reply.body;
    let answers = body["answers"].as_array().unwrap();
    assert_eq!(answers.len(), 3);

    assert_eq!(answers[0]["type"], "predicate");
    assert_eq!(answers[0]["name"], "refund");
    let p = answers[0]["probability"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&p));

    assert_eq!(answers[1]["type"], "choice");
    let probabilities: Vec<&Value> = answers[1]["probabilities"]
        .as_array()
        .unwrap()
        .iter()
        .collect();
    assert_eq!(
        probabilities
            .iter()
            .map(|p| p["value"].clone())
            .collect::<Vec<_>>(),
        [json!("billing"), json!("shipping"), json!("technical")]
    );
    let ps = floats(
        &probabilities
            .iter()
            .map(|p| p["probability"].clone())
            .collect::<Vec<_>>(),
    );
    assert_distribution(&ps);
    let best = ps.iter().cloned().fold(f64::MIN, f64::max);
    let chosen = probabilities
        .iter()
        .find(|p| p["value"] == answers[1]["choice"])
        .unwrap();
    assert_eq!(chosen["probability"].as_f64().unwrap(), best);
    let confidence = answers[1]["confidence"].as_f64().unwrap();
    assert!((confidence - (3.0 * best - 1.0) / 2.0).abs() < 1e-9);

    assert_eq!(answers[2]["type"], "score");
    assert_eq!(answers[2]["name"], Value::Null);
    let levels = answers[2]["probabilities"].as_array().unwrap();
    let ps = floats(
        &levels
            .iter()
            .map(|l| l["probability"].clone())
            .collect::<Vec<_>>(),
    );
    assert_distribution(&ps);
    assert_eq!(levels[2]["label"], "furious");
    assert_eq!(levels[2]["value"], 2);
    let expected: f64 = ps.iter().enumerate().map(|(i, p)| i as f64 * p).sum();
    assert!((answers[2]["score"].as_f64().unwrap() - expected).abs() < 1e-9);

    let usage = &body["usage"];
    assert!(usage["input_tokens"].as_u64().unwrap() > 50);
    assert_eq!(usage["output_tokens"], 0);
    assert_eq!(usage["total_tokens"], usage["input_tokens"]);
    assert!(
        usage["input_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap()
            < usage["input_tokens"].as_u64().unwrap()
    );
    let audit = &answers[0]["extra"]["audit"];
    assert_eq!(audit["temperature_source"], "default");
    assert!(audit["option_mass"].as_f64().unwrap() > 0.0);
}

#[test]
fn systemone_answers_every_question_type() {
    let server = Server::ready(&[]);
    let reply = server.post("/v1/systemone", &systemone_request());
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(reply.headers.contains_key("x-typesafe-request-id"));
    let answers = &reply.body["answers"];
    assert_eq!(answers.as_object().unwrap().len(), 3);
    assert_eq!(answers["refund"]["type"], "noul");
    assert!((0.0..=1.0).contains(&answers["refund"]["noul"].as_f64().unwrap()));
    let team = answers["team"]["probabilities"].as_object().unwrap();
    assert_eq!(
        team.keys().collect::<Vec<_>>(),
        ["billing", "shipping", "technical"]
    );
    assert_distribution(&floats(&team.values().cloned().collect::<Vec<_>>()));
    assert!(team.contains_key(answers["team"]["choice"].as_str().unwrap()));
    let anger = &answers["anger"];
    assert_eq!(
        anger["legend"],
        json!({"0": "calm", "1": "annoyed", "2": "furious"})
    );
    assert_distribution(&floats(
        &anger["probabilities"]
            .as_object()
            .unwrap()
            .values()
            .cloned()
            .collect::<Vec<_>>(),
    ));
    assert!(reply.body["usage"]["input_tokens"].as_u64().unwrap() > 50);
    assert!(reply.body.get("partial_failures").is_none());
}

#[test]
fn the_same_question_gives_the_same_probabilities_on_both_endpoints() {
    let server = Server::ready(&[]);
    let openai = server.post("/v1/decisions", &openai_request());
    let jev = server.post("/v1/systemone", &systemone_request());
    assert_eq!(openai.status, 200, "{}", openai.body);
    assert_eq!(jev.status, 200, "{}", jev.body);
    let oa = &openai.body["answers"];
    let js = &jev.body["answers"];
    let close = |a: f64, b: f64| assert!((a - b).abs() < 1e-9, "{a} != {b}");
    close(
        oa[0]["probability"].as_f64().unwrap(),
        js["refund"]["noul"].as_f64().unwrap(),
    );
    for (i, label) in ["billing", "shipping", "technical"].iter().enumerate() {
        close(
            oa[1]["probabilities"][i]["probability"].as_f64().unwrap(),
            js["team"]["probabilities"][label].as_f64().unwrap(),
        );
    }
    for i in 0..3 {
        close(
            oa[2]["probabilities"][i]["probability"].as_f64().unwrap(),
            js["anger"]["probabilities"][i.to_string()]
                .as_f64()
                .unwrap(),
        );
    }
    close(
        oa[2]["score"].as_f64().unwrap(),
        js["anger"]["score"].as_f64().unwrap(),
    );
    assert_eq!(
        openai.body["usage"]["input_tokens"],
        jev.body["usage"]["input_tokens"]
    );
}

#[test]
fn renaming_a_question_never_changes_its_answer() {
    let server = Server::ready(&[]);
    let ask = |id: &str| {
        let reply = server.post(
            "/v1/systemone",
            &json!({"state": TICKET, "questions": {id: {"type": "noul", "instructions": "The customer is angry."}}}),
        );
        assert_eq!(reply.status, 200, "{}", reply.body);
        reply.body["answers"][id]["noul"].as_f64().unwrap()
    };
    assert_eq!(ask("angry"), ask("q_7"));
}

#[test]
fn calibration_temperature_flattens_the_distribution_and_is_reported() {
    let server = Server::ready(&[]);
    let ask = |extra: Value| {
        let mut request = openai_request();
        request["extra"] = extra;
        let reply = server.post("/v1/decisions", &request);
        assert_eq!(reply.status, 200, "{}", reply.body);
        reply.body["answers"][1].clone()
    };
    let plain = ask(json!({"detail": "full"}));
    let hot = ask(json!({"calibration_temperature": 50.0, "detail": "full"}));
    assert_eq!(hot["extra"]["audit"]["temperature_source"], "request");
    assert_eq!(hot["extra"]["audit"]["calibration_temperature"], 50.0);
    assert!(hot["confidence"].as_f64().unwrap() < plain["confidence"].as_f64().unwrap());
    let logits = plain["extra"]["backend"]["option_logits"]
        .as_object()
        .unwrap();
    assert_eq!(
        logits.keys().collect::<Vec<_>>(),
        ["billing", "shipping", "technical"]
    );
    assert_eq!(
        plain["extra"]["audit"]["label_layout"],
        json!(["A", "B", "C"])
    );
    let none = ask(json!({"detail": "none"}));
    assert!(none.get("extra").is_none());
}

#[test]
fn models_and_health_endpoints() {
    let server = Server::ready(&[]);
    let health = server.get("/health");
    assert_eq!(health.body["status"], "ok");
    let models = server.get("/v1/models");
    assert_eq!(models.status, 200);
    let served = models.body["data"][0]["id"].as_str().unwrap().to_string();
    assert_eq!(models.body["models"][0]["name"], served.as_str());
    let metrics = server.get("/metrics");
    assert!(metrics
        .body
        .as_str()
        .unwrap()
        .contains("decide_requests_total"));
    // Loading the model alone took the process CPU time.
    let cpu = server.metric("process_cpu_seconds_total");
    assert!(cpu > 0.0, "process_cpu_seconds_total {cpu}");
}

/// `/console` is static and keyless, with a policy that keeps its script and requests on
/// this origin; anything else under it is the API's JSON 404 or 405, never a 5xx; and it is
/// not in the API document.
#[test]
fn the_console_is_served_static_and_its_wrong_requests_are_json_4xx() {
    // Keys on: the page needs none; the API calls it makes carry the typed key.
    let server = Server::start(&["--api-key", "console-key", "--admin-key", "console-admin"]);
    for (path, kind) in [
        ("/console", "text/html"),
        ("/console/", "text/html"),
        ("/console/console.js", "text/javascript"),
        ("/console/console.css", "text/css"),
    ] {
        let reply = server.get_anonymous(path);
        assert_eq!(reply.status, 200, "{path}: {}", reply.body);
        let header = |name: &str| reply.headers[name].to_str().unwrap_or_default().to_string();
        assert!(header("content-type").starts_with(kind), "{path}");
        assert!(header("content-security-policy").contains("script-src 'self'"));
        assert_eq!(header("x-content-type-options"), "nosniff");
    }
    let head = reqwest::blocking::Client::new()
        .head(format!("{}/console", server.base))
        .send()
        .expect("HEAD");
    assert_eq!(head.status().as_u16(), 200);
    let missing = server.get_anonymous("/console/../../etc/passwd");
    assert_eq!(missing.status, 404, "{}", missing.body);
    let missing = server.get_anonymous("/console/app.js");
    assert_eq!(missing.status, 404);
    assert_eq!(
        missing.body["error"]["code"], "not_found",
        "{}",
        missing.body
    );
    let post = server.send_as("POST", "/console", "console-key", Some(&json!({})));
    assert_eq!(post.status, 405, "{}", post.body);
    assert_eq!(post.body["error"]["code"], "method_not_allowed");
    let document = server.get("/openapi.json");
    let paths = document.body["paths"].as_object().unwrap();
    assert!(paths.keys().all(|p| !p.starts_with("/console")));
}

#[test]
fn questions_read_together_over_a_shared_prefix_equal_questions_read_alone() {
    let server = Server::ready(&[]);
    let together = server.post("/v1/decisions", &openai_request());
    assert_eq!(together.status, 200, "{}", together.body);
    let usage = &together.body["usage"];
    let cached = usage["input_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    assert!(
        cached > 0,
        "the shared prefix is computed once and reused: {usage}"
    );
    assert!(cached < usage["input_tokens"].as_u64().unwrap());
    let questions = openai_request()["questions"].as_array().unwrap().clone();
    for (i, question) in questions.into_iter().enumerate() {
        let mut alone = openai_request();
        alone["questions"] = json!([question]);
        let reply = server.post("/v1/decisions", &alone);
        assert_eq!(reply.status, 200, "{}", reply.body);
        let (a, b) = (&together.body["answers"][i], &reply.body["answers"][0]);
        // Dense (f32) weights, the CPU default, agree to ~1e-5 between a packed batch and a
        // lone read; quantized weights agree bit for bit (tested in models/).
        assert_eq!(
            a.get("choice"),
            b.get("choice"),
            "question {i}: batched {a} vs alone {b}"
        );
        for (x, y) in numbers(a).iter().zip(numbers(b)) {
            assert!(
                (x - y).abs() < 1e-4,
                "question {i}: batched {a} vs alone {b}"
            );
        }
    }
}

/// Every number in an answer (probabilities, score, confidence), in document order.
pub fn numbers(answer: &Value) -> Vec<f64> {
    let mut out = Vec::new();
    fn walk(value: &Value, out: &mut Vec<f64>, top: bool) {
        match value {
            Value::Number(n) => out.push(n.as_f64().unwrap()),
            Value::Array(items) => items.iter().for_each(|v| walk(v, out, false)),
            Value::Object(map) => {
                for (key, v) in map {
                    if !(top && key == "extra") && key != "value" {
                        walk(v, out, false);
                    }
                }
            }
            _ => {}
        }
    }
    walk(answer, &mut out, true);
    out
}
