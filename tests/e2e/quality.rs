//! Better answers from the same model: `decide tune` measures renderer x label scheme x
//! readout on a labelled set and saves its choice, which `serve` reuses and reports; requests
//! choose a renderer and label scheme by name; `min_option_mass` turns an answer the model did
//! not want to give into a refusal with the reason.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

use crate::server::{model_path, scratch_dir, Server};

/// The first `n` questions of the built-in tuning set.
fn tuning_file(dir: &Path, n: usize) -> PathBuf {
    let set = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../calibration/tune.jsonl"),
    )
    .unwrap();
    let lines: Vec<&str> = set
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .take(n)
        .collect();
    assert_eq!(lines.len(), n);
    let path = dir.join(format!("tune-{n}.jsonl"));
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

fn tune_files(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("tune-") && n.ends_with(".json"))
                })
                .collect()
        })
        .unwrap_or_default()
}

const RENDERERS: &str = "direct-options,plain-letter";

#[test]
fn tune_measures_every_candidate_saves_its_choice_and_serve_reuses_it() {
    let scratch = scratch_dir("tune");
    let questions = tuning_file(&scratch, 60);
    let dir = scratch.join("saved");
    let output = Command::new(crate::server::binary())
        .arg("tune")
        .arg("--model")
        .arg(model_path())
        .arg("--questions")
        .arg(&questions)
        .arg("--calibration-dir")
        .arg(&dir)
        .args(["--tune-renderers", RENDERERS])
        .arg("--cache-dir")
        .arg(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("wasm-cache"))
        .env("DECIDE_LOG", "warn")
        .output()
        .expect("run decide tune");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // One line per candidate (2 renderers x 3 label schemes, then the best with
    // `permutation`), each with accuracy, held-out log loss and ECE, then the verdict.
    let lines: Vec<&str> = stdout
        .lines()
        .filter(|l| {
            l.starts_with("tune ")
                && !l.starts_with("tune policy ")
                && !l.starts_with("tune correction: ")
        })
        .collect();
    assert_eq!(lines.len(), 8, "{stdout}");
    // Then every loaded policy measured with the chosen setup, and the correction served.
    let policies: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("tune policy "))
        .collect();
    assert_eq!(
        policies.len(),
        3,
        "temperature, bias-temperature, contextual: {stdout}"
    );
    assert!(
        stdout.lines().any(|l| l.starts_with("tune correction: ")),
        "{stdout}"
    );
    for renderer in ["direct-options", "plain-letter"] {
        for labels in ["letters", "numbers", "words"] {
            let setup = format!("tune {renderer}+{labels}+auto: accuracy ");
            assert!(
                lines.iter().any(|l| l.starts_with(&setup)),
                "{setup} missing: {stdout}"
            );
        }
    }
    assert!(lines[6].contains("+permutation: accuracy"), "{stdout}");
    assert!(
        lines[1].contains("gain ") && lines[1].contains("over direct-options+letters+auto"),
        "{stdout}"
    );
    assert!(lines[7].starts_with("tune chose "), "{stdout}");
    let files = tune_files(&dir);
    assert_eq!(files.len(), 1, "{files:?}");
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(&files[0]).unwrap()).unwrap();
    assert_eq!(saved["candidates"].as_array().unwrap().len(), 7, "{saved}");
    assert_eq!(saved["baseline"], "direct-options+letters+auto");
    assert_eq!(saved["key"]["candidates"].as_array().unwrap().len(), 6);
    let source = saved["source"].as_str().unwrap();
    assert!(["tuned", "default"].contains(&source), "{saved}");
    // The rule: a tuned choice has a gain whose interval lies above zero.
    let chosen = saved["chosen"].as_str().unwrap().to_string();
    if source == "tuned" {
        let entry = saved["candidates"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["setup"] == chosen.as_str())
            .unwrap();
        assert!(entry["gain"]["low"].as_f64().unwrap() > 0.0, "{entry}");
    } else {
        assert_eq!(chosen, "direct-options+letters+auto");
    }

    // `serve` with the same model, candidates and file reuses the result: it is ready without
    // measuring again (the saved date is the one /health reports), and answers say so.
    let server = Server::ready(&[
        "--tune-questions",
        questions.to_str().unwrap(),
        "--tune-renderers",
        RENDERERS,
        "--calibration-dir",
        dir.to_str().unwrap(),
    ]);
    let health = server.get("/health").body;
    let setup = &health["setup"];
    assert_eq!(
        format!(
            "{}+{}+{}",
            setup["renderer"].as_str().unwrap(),
            setup["labels"].as_str().unwrap(),
            setup["readout"].as_str().unwrap()
        ),
        chosen,
        "{health}"
    );
    assert_eq!(setup["source"], source, "{health}");
    assert_eq!(
        setup["tuning"]["date"], saved["date"],
        "reused, not measured again: {health}"
    );
    // The correction measured with the chosen setup is served (startup calibration did not run).
    assert_eq!(
        health["calibration"]["policy"], saved["policy"]["policy"],
        "{health}"
    );
    assert_eq!(
        health["calibration"]["params"], saved["policy"]["params"],
        "{health}"
    );
    assert_eq!(tune_files(&dir).len(), 1);
    let reply = server.post(
        "/v1/decisions",
        &json!({"model": "smol", "input": "I was charged twice. Please refund the extra charge.",
                "questions": [{"type": "predicate", "instructions": "The customer asks for a refund."}],
                "extra": {"detail": "full"}}),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    let audit = &reply.body["answers"][0]["extra"]["audit"];
    assert_eq!(audit["renderer"], setup["renderer"], "{audit}");
    assert_eq!(audit["setup_source"], source, "{audit}");
    assert_eq!(audit["label_scheme"], setup["labels"], "{audit}");
    assert!(
        audit["render_version"]
            .as_str()
            .unwrap()
            .starts_with(&format!("{}/", setup["renderer"].as_str().unwrap())),
        "{audit}"
    );
}

fn ask(server: &Server, questions: Value, extra: Value) -> crate::server::Reply {
    server.post(
        "/v1/decisions",
        &json!({"model": "smol", "input": "I was charged twice. Please refund the extra charge.",
                "questions": questions, "extra": extra}),
    )
}

fn predicate() -> Value {
    json!([{"type": "predicate", "instructions": "The customer asks for a refund."}])
}

#[test]
fn requests_choose_the_renderer_and_labels_and_low_mass_answers_abstain() {
    let server = Server::ready(&[]);
    let health = server.get("/health").body;
    assert_eq!(health["setup"]["source"], "default", "{health}");
    assert_eq!(health["setup"]["renderer"], "direct-options", "{health}");

    // Every built-in renderer answers, and the audit names it and its version.
    for renderer in [
        "direct-options",
        "options-first",
        "restated",
        "plain-letter",
        "framed",
    ] {
        let reply = ask(
            &server,
            predicate(),
            json!({"detail": "full", "renderer": renderer}),
        );
        assert_eq!(reply.status, 200, "{renderer}: {}", reply.body);
        let audit = &reply.body["answers"][0]["extra"]["audit"];
        assert_eq!(audit["renderer"], renderer, "{audit}");
        assert_eq!(audit["setup_source"], "request", "{audit}");
        assert!(
            audit["render_version"]
                .as_str()
                .unwrap()
                .starts_with(&format!("{renderer}/")),
            "{audit}"
        );
        crate::assert_distribution(&[
            reply.body["answers"][0]["probability"].as_f64().unwrap(),
            1.0 - reply.body["answers"][0]["probability"].as_f64().unwrap(),
        ]);
    }
    let reply = ask(
        &server,
        predicate(),
        json!({"renderer": "no-such-renderer"}),
    );
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert!(
        reply.body.to_string().contains("extra.renderer"),
        "{}",
        reply.body
    );

    // Label schemes: numbers for a short choice, the words Yes/No for a yes/no question.
    let choice = json!([{"type": "choice", "instructions": "Which team owns this ticket?",
                         "choices": [{"value": "billing"}, {"value": "shipping"}, {"value": "technical"}]}]);
    let reply = ask(
        &server,
        choice.clone(),
        json!({"detail": "full", "backend_options": {"labels": "numbers"}}),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(
        reply.body["answers"][0]["extra"]["audit"]["label_layout"],
        json!(["1", "2", "3"])
    );
    let reply = ask(
        &server,
        predicate(),
        json!({"detail": "full", "backend_options": {"labels": "words"}}),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    let audit = &reply.body["answers"][0]["extra"]["audit"];
    assert_eq!(audit["label_layout"], json!(["Yes", "No"]), "{audit}");
    assert_eq!(audit["label_scheme"], "words", "{audit}");
    let reply = ask(
        &server,
        choice,
        json!({"backend_options": {"labels": "roman"}}),
    );
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert!(
        reply
            .body
            .to_string()
            .contains("extra.backend_options.labels"),
        "{}",
        reply.body
    );

    // Abstention: the audit always reports the threshold; above the mass, a refusal naming it.
    let reply = ask(&server, predicate(), json!({}));
    let mass = reply.body["answers"][0]["extra"]["audit"]["option_mass"]
        .as_f64()
        .unwrap();
    assert_eq!(
        reply.body["answers"][0]["extra"]["audit"]["min_option_mass"],
        0.0
    );
    assert!(
        mass < 0.999,
        "the test needs a mass below 0.999, got {mass}"
    );
    let reply = ask(&server, predicate(), json!({"min_option_mass": 0.999}));
    assert_eq!(reply.status, 422, "{}", reply.body);
    let body = reply.body.to_string();
    assert!(
        body.contains("low_option_mass") && body.contains("min_option_mass"),
        "{body}"
    );
    let reply = ask(
        &server,
        json!([{"type": "predicate", "instructions": "The customer asks for a refund."},
               {"type": "predicate", "instructions": "The customer is happy."}]),
        json!({"min_option_mass": mass.max(0.0) * 0.5}),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    let reply = ask(&server, predicate(), json!({"min_option_mass": 1.5}));
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert!(
        reply.body.to_string().contains("extra.min_option_mass"),
        "{}",
        reply.body
    );

    // The server's default applies to requests that set none.
    drop(server);
    let strict = Server::ready(&["--min-option-mass", "0.999"]);
    let reply = ask(&strict, predicate(), json!({}));
    assert_eq!(reply.status, 422, "{}", reply.body);
    assert!(
        reply.body.to_string().contains("--min-option-mass"),
        "{}",
        reply.body
    );
    let reply = ask(&strict, predicate(), json!({"min_option_mass": 0}));
    assert_eq!(reply.status, 200, "a request can lower it: {}", reply.body);
}

#[test]
fn a_tenants_min_option_mass_and_renderer_apply_to_its_requests_only() {
    use crate::tenant_fixture::seed_tenant_with;
    let data = scratch_dir("quality-tenants");
    let strict = seed_tenant_with(
        &data,
        "strict",
        Default::default(),
        decide_tenancy::TenantSettings {
            min_option_mass: Some(0.999),
            renderer: Some("plain-letter".into()),
            ..Default::default()
        },
    );
    let lenient = seed_tenant_with(&data, "lenient", Default::default(), Default::default());
    let server = Server::ready(&["--data-dir", data.to_str().unwrap()]);
    let body = json!({"model": "smol", "input": "I was charged twice. Please refund the extra charge.",
                      "questions": predicate(), "extra": {"detail": "full"}});
    // The strict tenant's answers abstain (its threshold, named in the refusal).
    let reply = server.post_as("/v1/decisions", &strict.key, &body);
    assert_eq!(reply.status, 422, "{}", reply.body);
    assert!(
        reply.body.to_string().contains("low_option_mass"),
        "{}",
        reply.body
    );
    // Its request can lower the threshold; its renderer is its own setting.
    let mut lowered = body.clone();
    lowered["extra"]["min_option_mass"] = json!(0.0);
    let reply = server.post_as("/v1/decisions", &strict.key, &lowered);
    assert_eq!(reply.status, 200, "{}", reply.body);
    let audit = &reply.body["answers"][0]["extra"]["audit"];
    assert_eq!(audit["renderer"], "plain-letter", "{audit}");
    assert_eq!(audit["setup_source"], "tenant", "{audit}");
    // Another tenant keeps the server's defaults.
    let reply = server.post_as("/v1/decisions", &lenient.key, &body);
    assert_eq!(reply.status, 200, "{}", reply.body);
    let audit = &reply.body["answers"][0]["extra"]["audit"];
    assert_eq!(audit["renderer"], "direct-options", "{audit}");
    assert_eq!(audit["min_option_mass"], 0.0, "{audit}");
}

#[test]
fn the_contextual_policy_reads_each_question_over_its_neutral_states_too() {
    let body = json!({"model": "smol", "input": "I was charged twice. Please refund the extra charge.",
                      "questions": predicate(), "extra": {"detail": "full"}});
    let plain = Server::ready(&["--calibration", "temperature"]);
    let reply = plain.post("/v1/decisions", &body);
    assert_eq!(reply.status, 200, "{}", reply.body);
    let (plain_tokens, plain_p) = (
        reply.body["usage"]["input_tokens"].as_u64().unwrap(),
        reply.body["answers"][0]["probability"].as_f64().unwrap(),
    );
    drop(plain);
    let contextual = Server::ready(&["--calibration", "contextual"]);
    let reply = contextual.post("/v1/decisions", &body);
    assert_eq!(reply.status, 200, "{}", reply.body);
    let answer = &reply.body["answers"][0];
    assert_eq!(
        answer["extra"]["audit"]["calibration_policy"], "contextual",
        "{answer}"
    );
    // Three neutral reads ("N/A", "", "[MASK]") besides the real one.
    let tokens = reply.body["usage"]["input_tokens"].as_u64().unwrap();
    assert!(tokens > 3 * plain_tokens, "{tokens} vs {plain_tokens}");
    let p = answer["probability"].as_f64().unwrap();
    crate::assert_distribution(&[p, 1.0 - p]);
    assert!(
        (p - plain_p).abs() > 1e-6,
        "dividing out the prior moves the answer: {p} vs {plain_p}"
    );
    // The raw option scores reported are the real read's, one per option.
    assert_eq!(
        answer["extra"]["backend"]["option_logits"]
            .as_object()
            .unwrap()
            .len(),
        2,
        "{answer}"
    );
}
