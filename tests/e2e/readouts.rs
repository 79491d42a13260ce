//! Readouts over every option count, explicit readouts, the answer-slot self-check and
//! `decide doctor`.

use std::process::Command;

use serde_json::{json, Value};

use crate::server::{model_path, scratch_dir, Server};

fn choices(n: usize) -> Vec<Value> {
    (0..n).map(|i| json!({"value": format!("c{i}")})).collect()
}

fn choice(n: usize) -> Value {
    json!({"type": "choice", "instructions": "Which code is named in the input?", "choices": choices(n)})
}

/// The answer's probabilities as (value, p), checked to be a distribution over exactly `n`
/// options `c0..c{n-1}`.
fn assert_over_exactly(answer: &Value, n: usize) {
    let probabilities = answer["probabilities"]
        .as_array()
        .unwrap_or_else(|| panic!("{answer}"));
    let values: Vec<&str> = probabilities
        .iter()
        .map(|p| p["value"].as_str().unwrap())
        .collect();
    let expected: Vec<String> = (0..n).map(|i| format!("c{i}")).collect();
    assert_eq!(values, expected, "keys match the options");
    let ps: Vec<f64> = probabilities
        .iter()
        .map(|p| p["probability"].as_f64().unwrap())
        .collect();
    crate::assert_distribution(&ps);
}

#[test]
fn every_option_count_answers_with_a_distribution_over_exactly_its_options() {
    let server = Server::ready(&[]);
    let input = "The code named here is c1.";
    // 255 options alone: one forward pass over one prompt.
    let reply = server.post(
        "/v1/decisions",
        &json!({"model": "smol", "input": input, "questions": [choice(255)], "extra": {"detail": "full"}}),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    let answer = &reply.body["answers"][0];
    assert_over_exactly(answer, 255);
    let audit = &answer["extra"]["audit"];
    assert_eq!(audit["readout"], "wide-direct", "{audit}");
    // One read of the prompt: on CPU a lone long prompt is prefilled in 512-row calls (so a
    // cancelled request stops within one), its last call reading the labels.
    let tokens = audit["input_tokens"].as_u64().unwrap();
    assert_eq!(audit["forward_passes"], tokens.div_ceil(512), "{audit}");
    let layout: Vec<&str> = audit["label_layout"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    assert_eq!(&layout[24..28], ["Y", "Z", "AA", "AB"]);
    let mass = audit["option_mass"].as_f64().unwrap();
    assert!(mass > 0.0 && mass <= 1.0 + 1e-6, "{audit}");

    // 2, 26, 27 and 100 options together, read over their shared prefix.
    let counts = [2, 26, 27, 100];
    let reply = server.post(
        "/v1/decisions",
        &json!({"model": "smol", "input": input, "questions": counts.map(choice)}),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    for (answer, (n, readout)) in
        reply.body["answers"]
            .as_array()
            .unwrap()
            .iter()
            .zip(
                counts
                    .iter()
                    .zip(["direct", "direct", "wide-direct", "wide-direct"]),
            )
    {
        assert_over_exactly(answer, *n);
        assert_eq!(answer["extra"]["audit"]["readout"], readout, "{answer}");
    }

    // The Jev endpoint has no readout option: auto reads 40 criteria wide.
    let criteria: serde_json::Map<String, Value> =
        (0..40).map(|i| (format!("c{i}"), Value::Null)).collect();
    let jev = server.post(
        "/v1/systemone",
        &json!({"state": input, "questions": {"q": {"type": "choice", "instructions": "Which code?", "criteria": criteria}}}),
    );
    assert_eq!(jev.status, 200, "{}", jev.body);
    assert!(
        jev.body["answers"]["q"]["choice"].is_string(),
        "{}",
        jev.body
    );
}

#[test]
fn explicit_readouts_are_honoured_or_refused_with_a_reason() {
    let server = Server::ready(&[]);
    let input = "The code named here is c2.";
    let with = |question: Value, options: Value| {
        server.post(
            "/v1/decisions",
            &json!({"model": "smol", "input": input, "questions": [question, {"type": "predicate", "instructions": "A code is named."}],
                    "extra": {"detail": "full", "backend_options": options}}),
        )
    };
    // direct cannot hold 27 options: that question is refused, the other answers.
    let reply = with(choice(27), json!({"readout": "direct"}));
    assert_eq!(reply.status, 200, "{}", reply.body);
    let refused = &reply.body["answers"][0];
    assert_eq!(refused["type"], "refusal", "{refused}");
    assert_eq!(refused["extra"]["error"]["code"], "readout_capacity");
    let message = refused["extra"]["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("27 options")
            && message.contains("capacity of 26")
            && message.contains("extra.backend_options.readout"),
        "{message}"
    );
    assert_eq!(reply.body["answers"][1]["type"], "predicate");

    // two-stage on a small question: stage-1 scores for all, the shortlist read directly.
    let reply = with(choice(6), json!({"readout": "two-stage", "shortlist": 3}));
    assert_eq!(reply.status, 200, "{}", reply.body);
    let answer = &reply.body["answers"][0];
    assert_over_exactly(answer, 6);
    let audit = &answer["extra"]["audit"];
    assert_eq!(audit["readout"], "two-stage", "{audit}");
    assert_eq!(audit["shortlist"].as_array().unwrap().len(), 3, "{audit}");
    assert_eq!(audit["stage1"].as_object().unwrap().len(), 6, "{audit}");
    assert_eq!(
        reply.body["answers"][1]["extra"]["audit"]["readout"],
        "two-stage"
    );

    // permutation: three label shifts averaged, each shift's top answer reported.
    let reply = with(choice(4), json!({"permutations": 3}));
    assert_eq!(reply.status, 200, "{}", reply.body);
    let answer = &reply.body["answers"][0];
    assert_over_exactly(answer, 4);
    assert_eq!(answer["extra"]["audit"]["readout"], "permutation");
    assert_eq!(
        answer["extra"]["audit"]["permutation_top"]
            .as_array()
            .unwrap()
            .len(),
        3
    );

    // Bad options are 400s naming the field and what is allowed.
    for (options, field, needle) in [
        (
            json!({"readout": "widest"}),
            "extra.backend_options.readout",
            "wide-direct",
        ),
        (
            json!({"shortlist": 1}),
            "extra.backend_options.shortlist",
            "from 2 to 26",
        ),
        (
            json!({"readout": "direct", "permutations": 2}),
            "extra.backend_options.permutations",
            "permutation",
        ),
    ] {
        let reply = with(choice(3), options.clone());
        assert_eq!(reply.status, 400, "{options} -> {}", reply.body);
        assert_eq!(reply.body["error"]["param"], field, "{}", reply.body);
        let message = reply.body["error"]["message"].as_str().unwrap();
        assert!(message.contains(needle), "{message}");
    }
}

#[test]
fn a_model_that_fails_the_self_check_is_refused_with_503() {
    // No model puts 99.99% of its next token on the labels: the check fails, and SmolLM2's
    // tokenizer knows no empty reasoning block to try.
    let server = Server::start(&["--self-check-min-mass", "0.9999"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let health = loop {
        let health = server.get("/health");
        if health.body["status"] == "failed" {
            break health;
        }
        assert_ne!(health.body["status"], "ok", "{}", health.body);
        assert!(std::time::Instant::now() < deadline, "{}", health.body);
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert_eq!(health.status, 503);
    let reason = health.body["reason"].as_str().unwrap();
    assert!(
        reason.contains("self-check failed") && reason.contains("--self-check-min-mass"),
        "{reason}"
    );
    assert!(
        reason.contains("option mass 0."),
        "the measured mass is reported: {reason}"
    );
    let openai = server.post(
        "/v1/decisions",
        &json!({"model": "smol", "input": "x", "questions": [{"type": "predicate", "instructions": "?"}]}),
    );
    assert_eq!(openai.status, 503, "{}", openai.body);
    assert!(openai.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("self-check failed"));
    let jev = server.post(
        "/v1/systemone",
        &json!({"state": "x", "questions": {"q": {"type": "noul", "instructions": "?"}}}),
    );
    assert_eq!(jev.status, 503, "{}", jev.body);
    assert!(
        jev.body.to_string().contains("self-check failed"),
        "{}",
        jev.body
    );
}

fn doctor(args: &[&str]) -> (i32, String) {
    let cache = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("wasm-cache");
    let output = Command::new(crate::server::binary())
        .arg("doctor")
        .arg("--cache-dir")
        .arg(&cache)
        .args(args)
        .env("DECIDE_LOG", "warn")
        .output()
        .expect("run decide doctor");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

/// A valid GGUF file with one metadata key, `general.architecture`, and no tensors.
fn gguf_with_arch(arch: &str) -> Vec<u8> {
    let mut bytes = b"GGUF".to_vec();
    bytes.extend(3u32.to_le_bytes()); // version
    bytes.extend(0u64.to_le_bytes()); // tensors
    bytes.extend(1u64.to_le_bytes()); // metadata entries
    let key = "general.architecture";
    bytes.extend((key.len() as u64).to_le_bytes());
    bytes.extend(key.as_bytes());
    bytes.extend(8u32.to_le_bytes()); // string
    bytes.extend((arch.len() as u64).to_le_bytes());
    bytes.extend(arch.as_bytes());
    bytes
}

#[test]
fn doctor_reports_the_model_and_exits_non_zero_when_it_cannot_serve() {
    let model = model_path();
    let model = model.to_str().unwrap();
    let (code, out) = doctor(&["--model", model]);
    assert_eq!(code, 0, "{out}");
    for needle in [
        "arch llama",
        "template ending: ",
        "<|im_start|>assistant\\n",
        "direct up to 26, wide-direct up to ",
        "255 options -> wide-direct",
        "self-check passed",
        "verdict: ok",
    ] {
        assert!(out.contains(needle), "{needle:?} missing from:\n{out}");
    }

    let (code, out) = doctor(&["--model", model, "--self-check-min-mass", "0.9999"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("verdict: cannot serve decisions"), "{out}");

    let dir = scratch_dir("doctor");
    let falcon = dir.join("falcon.gguf");
    std::fs::write(&falcon, gguf_with_arch("falcon")).unwrap();
    let (code, out) = doctor(&["--model", falcon.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("verdict: cannot serve decisions")
            && out.contains("unsupported model architecture `falcon`"),
        "{out}"
    );
}
