//! A tenant's own calibration: uploaded labelled questions are fitted in the background,
//! the tenant's answers then report the temperature source `tenant` (other tenants' do not),
//! the result survives a restart, and deleting it restores the server's calibration.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::server::{scratch_dir, Server};
use crate::tenant_fixture::seed_tenant;

/// `n` labelled questions a tenant might have: support tickets, four in five about billing
/// (a billing team's queue), in groups of five so cross-validation has folds. SmolLM2 answers
/// nearly every ticket `billing` with ~0.67, so its fit lands inside the policy's search
/// range (on the built-in set it is near chance and its fit is rejected at the edge).
pub fn labelled_questions(n: usize) -> String {
    let criteria: serde_json::Map<String, Value> = ["billing", "shipping", "login"]
        .iter()
        .map(|t| (t.to_string(), Value::Null))
        .collect();
    (0..n)
        .map(|i| {
            let (expected, text) = if i % 5 == 4 {
                ("shipping", "My parcel never arrived and the tracking shows no delivery.")
            } else {
                ("billing", "I was charged twice on my invoice and want the extra payment back.")
            };
            json!({
                "id": format!("q{i}"),
                "group": format!("g{}", i / 5),
                "state": format!("Ticket {i}: {text}"),
                "question": {"type": "choice", "instructions": "Which topic is this ticket about?", "criteria": criteria},
                "expected": expected,
            })
            .to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first `n` questions of the built-in labelled set.
fn builtin_questions(n: usize) -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../calibration/default.jsonl");
    let text = std::fs::read_to_string(path).expect("calibration/default.jsonl");
    text.lines().take(n).collect::<Vec<_>>().join("\n")
}

fn temperature_source(server: &Server, key: &str) -> String {
    let reply = server.post_as(
        "/v1/decisions",
        key,
        &json!({"model": "smol", "input": "My card was charged twice for one order.",
                "questions": [{"type": "predicate", "instructions": "The customer asks for money back."}]}),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.body["answers"][0]["extra"]["audit"]["temperature_source"]
        .as_str()
        .expect("temperature_source")
        .to_string()
}

pub fn put_questions(server: &Server, key: &str, text: String) -> crate::server::Reply {
    server.put_bytes_as(
        "/v1/calibration",
        key,
        text.into_bytes(),
        "application/x-ndjson",
    )
}

/// Polls `GET /v1/calibration` until the fit is no longer running; returns the last body.
fn wait_finished(server: &Server, key: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let reply = server.send_as("GET", "/v1/calibration", key, None);
        assert_eq!(reply.status, 200, "{}", reply.body);
        if reply.body["status"] != "running" {
            return reply.body;
        }
        assert!(
            Instant::now() < deadline,
            "calibration still running: {}",
            reply.body
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn a_tenants_uploaded_questions_calibrate_its_answers_only_and_survive_a_restart() {
    let data = scratch_dir("tenant-calibration");
    let a = seed_tenant(&data, "alpha", Default::default());
    let b = seed_tenant(&data, "beta", Default::default());
    let data_arg = data.to_str().unwrap();
    let server = Server::ready(&["--data-dir", data_arg, "--api-key", "operator-key"]);

    // Bad uploads: too few questions, not JSONL, the default tenant (operator key).
    let few = put_questions(&server, &a.key, labelled_questions(10));
    assert_eq!(few.status, 400, "{}", few.body);
    assert!(
        few.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("at least 50"),
        "{}",
        few.body
    );
    let garbage = put_questions(&server, &a.key, "this is not json\n".repeat(60));
    assert_eq!(garbage.status, 400, "{}", garbage.body);
    assert!(
        garbage.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("line 1"),
        "{}",
        garbage.body
    );
    let operator = put_questions(&server, "operator-key", labelled_questions(60));
    assert_eq!(operator.status, 403, "{}", operator.body);
    assert_eq!(
        server.send_as("GET", "/v1/calibration", &a.key, None).body["status"],
        "none"
    );

    let started = put_questions(&server, &a.key, labelled_questions(60));
    assert_eq!(started.status, 202, "{}", started.body);
    assert_eq!(started.body["progress"]["total"], 60, "{}", started.body);
    let again = put_questions(&server, &a.key, labelled_questions(60));
    assert!(
        again.status == 409 || again.status == 202,
        "a second upload while one runs: {} {}",
        again.status,
        again.body
    );
    let done = wait_finished(&server, &a.key);
    assert_eq!(done["status"], "done", "{done}");
    let result = &done["result"];
    assert_eq!(
        result["used"].as_u64().unwrap() + result["skipped"].as_u64().unwrap(),
        60,
        "{done}"
    );
    assert!(result["used"].as_u64().unwrap() >= 50, "{done}");
    assert!(result["temperature"].as_f64().unwrap() > 0.0, "{done}");
    assert_eq!(result["policy"], "temperature");
    // The reliability diagram behind the two ECEs: every answer in one bin of each.
    for side in ["reliability_raw", "reliability_calibrated"] {
        let bins = result[side].as_array().expect(side);
        let counted: u64 = bins.iter().map(|b| b["count"].as_u64().unwrap()).sum();
        assert_eq!(counted, result["used"].as_u64().unwrap(), "{side}: {done}");
        for bin in bins {
            let (low, confidence) = (
                bin["low"].as_f64().unwrap(),
                bin["confidence"].as_f64().unwrap(),
            );
            assert!(
                low <= confidence && confidence <= bin["high"].as_f64().unwrap(),
                "{bin}"
            );
            assert!(
                (0.0..=1.0).contains(&bin["accuracy"].as_f64().unwrap()),
                "{bin}"
            );
        }
    }

    assert_eq!(temperature_source(&server, &a.key), "tenant");
    assert_ne!(temperature_source(&server, &b.key), "tenant");
    assert_eq!(
        server.send_as("GET", "/v1/calibration", &b.key, None).body["status"],
        "none"
    );

    // Tenant b's questions are harder for this small model: whether its fit is established
    // or rejected (a temperature at the edge of the search range), the outcome is reported,
    // and only an established fit changes b's answers.
    let started = put_questions(&server, &b.key, builtin_questions(60));
    assert_eq!(started.status, 202, "{}", started.body);
    let finished = wait_finished(&server, &b.key);
    match finished["status"].as_str() {
        Some("done") => assert_eq!(temperature_source(&server, &b.key), "tenant"),
        Some("failed") => {
            let error = finished["progress"]["error"].as_str().unwrap_or("");
            assert!(!error.is_empty(), "{finished}");
            assert_ne!(temperature_source(&server, &b.key), "tenant");
        }
        other => panic!("unexpected status {other:?}: {finished}"),
    }
    assert_eq!(
        temperature_source(&server, &a.key),
        "tenant",
        "b's fit does not touch a's"
    );
    drop(server);

    let server = Server::ready(&["--data-dir", data_arg]);
    assert_eq!(
        temperature_source(&server, &a.key),
        "tenant",
        "the fit survives a restart"
    );
    let removed = server.send_as("DELETE", "/v1/calibration", &a.key, None);
    assert_eq!(removed.status, 204, "{}", removed.body);
    assert_eq!(temperature_source(&server, &a.key), "default");
    assert_eq!(
        server
            .send_as("DELETE", "/v1/calibration", &a.key, None)
            .status,
        404
    );
}
