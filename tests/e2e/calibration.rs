//! Startup calibration on the real model: the server reads a labelled question set before it
//! is ready, answers report the temperature and its source, and a second start reuses the
//! saved result. The only e2e test that calibrates (the harness passes
//! `--calibration-questions none` to every other server): it reads 60 questions on SmolLM2.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::server::{scratch_dir, Server};

/// The first `n` questions of the built-in set.
fn question_file(dir: &Path, n: usize) -> PathBuf {
    let set = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../calibration/default.jsonl"),
    )
    .unwrap();
    let lines: Vec<&str> = set
        .lines()
        .filter(|l| !l.trim().is_empty())
        .take(n)
        .collect();
    assert_eq!(lines.len(), n);
    let path = dir.join(format!("questions-{n}.jsonl"));
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

fn audit(server: &Server, extra: Value) -> Value {
    let request = json!({
        "model": "smol",
        "input": "I was charged twice this month. Please refund the extra charge.",
        "questions": [{"type": "choice", "instructions": "Which team owns this ticket?",
                       "choices": [{"value": "billing"}, {"value": "shipping"}, {"value": "technical"}]}],
        "extra": extra,
    });
    let reply = server.post("/v1/decisions", &request);
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.body["answers"][0]["extra"]["audit"].clone()
}

fn saved_files(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "json"))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn startup_calibration_measures_reports_and_is_reused() {
    let scratch = scratch_dir("calibration");
    let questions = question_file(&scratch, 60);
    let dir = scratch.join("saved");
    let flags = [
        "--calibration-questions",
        questions.to_str().unwrap(),
        "--calibration-dir",
        dir.to_str().unwrap(),
    ];

    let started = Instant::now();
    let server = Server::start(&flags);
    // The server answers before calibration has measured: /health is ok and lists it as
    // pending, with its progress, and answers meanwhile get the default correction.
    server.wait_ready_within(Duration::from_secs(120));
    let mut saw_step = false;
    loop {
        let health = server.get("/health");
        assert_eq!(health.status, 200, "{}", health.body);
        if health.body["setup"]["pending"] == json!([]) {
            break;
        }
        assert_eq!(
            health.body["setup"]["pending"],
            json!(["calibration"]),
            "{}",
            health.body
        );
        if health.body["progress"]
            .to_string()
            .contains("\"task\":\"calibrating\"")
            && !saw_step
        {
            saw_step = true;
            let early = audit(&server, json!({"detail": "full"}));
            assert_eq!(early["temperature_source"], "default", "{early}");
        }
        assert!(
            started.elapsed() < Duration::from_secs(900),
            "calibration not done after 900 s: {}",
            health.body
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(saw_step, "/health never reported calibrating in progress");
    let first_start = started.elapsed();

    let files = saved_files(&dir);
    assert_eq!(files.len(), 1, "{files:?}");
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(&files[0]).unwrap()).unwrap();
    assert_eq!(saved["questions"]["total"], 60);
    assert!(
        saved["questions"]["used"].as_u64().unwrap() >= 50,
        "{}",
        saved["questions"]
    );
    // `--calibration auto`: every built-in policy is measured; the served one comes first, and
    // it is the kept policy of lowest held-out log loss (none kept: temperature, T = 1).
    let reports = saved["reports"].as_array().unwrap();
    let mut names: Vec<&str> = reports
        .iter()
        .map(|r| r["policy"].as_str().unwrap())
        .collect();
    assert_eq!(saved["policy"], names[0], "{saved}");
    names.sort_unstable();
    assert_eq!(names, ["bias-temperature", "contextual", "temperature"]);
    let kept: Vec<&Value> = reports.iter().filter(|r| r["keep"] == true).collect();
    match kept.iter().min_by(|a, b| {
        a["log_loss_calibrated"]
            .as_f64()
            .unwrap()
            .total_cmp(&b["log_loss_calibrated"].as_f64().unwrap())
    }) {
        Some(best) => assert_eq!(saved["policy"], best["policy"], "{saved}"),
        None => assert_eq!(saved["policy"], "temperature", "{saved}"),
    }
    for field in [
        "model_sha256",
        "policy_sha256",
        "questions_sha256",
        "render_version",
    ] {
        assert!(
            saved["key"][field].as_str().is_some_and(|s| !s.is_empty()),
            "key.{field}"
        );
    }
    let source = saved["source"].as_str().unwrap().to_string();
    let temperature = saved["temperature"].as_f64().unwrap();
    assert!(source == "calibrated" || source == "default", "{source}");

    let plain = audit(&server, json!({"detail": "full"}));
    assert_eq!(plain["temperature_source"], source.as_str(), "{plain}");
    assert!(
        (plain["calibration_temperature"].as_f64().unwrap() - temperature).abs() < 1e-9,
        "{plain}"
    );
    let requested = audit(
        &server,
        json!({"detail": "basic", "calibration_temperature": 2.0}),
    );
    assert_eq!(requested["temperature_source"], "request");
    assert_eq!(requested["calibration_temperature"], 2.0);
    drop(server);

    // Second start: same model, policy and questions: the saved result is reused, no reads.
    let started = Instant::now();
    let server = Server::start(&flags);
    server.wait_ready_within(Duration::from_secs(120));
    let second_start = started.elapsed();
    assert_eq!(
        server.get("/health").body["setup"]["pending"],
        json!([]),
        "the saved result applies before the server answers"
    );
    assert!(
        second_start < first_start / 3,
        "second start {second_start:?} vs first {first_start:?}: not reused?"
    );
    let again = audit(&server, json!({"detail": "full"}));
    assert_eq!(again["temperature_source"], plain["temperature_source"]);
    assert_eq!(
        again["calibration_temperature"],
        plain["calibration_temperature"]
    );
    assert_eq!(saved_files(&dir).len(), 1);
    drop(server);

    // The operator's temperature outranks the calibrated one.
    let server = Server::ready(&[&flags[..], &["--temperature", "0.5"]].concat());
    let operator = audit(&server, json!({"detail": "basic"}));
    assert_eq!(operator["temperature_source"], "operator");
    assert_eq!(operator["calibration_temperature"], 0.5);
}

#[test]
fn a_missing_or_short_question_file_starts_with_the_default() {
    let scratch = scratch_dir("calibration-fallback");
    let dir = scratch.join("saved");
    let missing = scratch.join("missing.jsonl");
    let short = question_file(&scratch, 2);
    for file in [&missing, &short] {
        let server = Server::ready(&[
            "--calibration-questions",
            file.to_str().unwrap(),
            "--calibration-dir",
            dir.to_str().unwrap(),
        ]);
        let answer = audit(&server, json!({"detail": "basic"}));
        assert_eq!(
            answer["temperature_source"],
            "default",
            "{}",
            file.display()
        );
        assert_eq!(answer["calibration_temperature"], 1.0);
    }
    assert!(saved_files(&dir).is_empty());
}
