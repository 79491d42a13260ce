//! Plugin tests through wasmtime with the real built components (`plugins/build.rs` builds them).
//!
//! Run: `cargo test --release -p decide-plugins -- --nocapture` (the timing tests print figures).

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::*;

mod tenants;

/// Cache shared by the tests (so most tests load the built-ins from precompiled artifacts).
fn shared_cache_dir() -> PathBuf {
    PathBuf::from(env!("OUT_DIR")).join("test-wasm-cache")
}

fn config(plugins_dir: Option<PathBuf>) -> RuntimeConfig {
    RuntimeConfig {
        memory_limit_bytes: 64 << 20,
        call_timeout: Duration::from_millis(1000),
        cache_dir: Some(shared_cache_dir()),
        plugins_dir,
        poll_interval: Duration::from_millis(50),
    }
}

/// One registry with the built-ins for the read-only tests.
fn builtins() -> &'static Arc<PluginRegistry> {
    static REGISTRY: OnceLock<Arc<PluginRegistry>> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        PluginRegistry::with_builtins(PluginRuntime::new(config(None)).unwrap()).unwrap()
    })
}

fn test_guest(name: &str) -> PathBuf {
    let path = PathBuf::from(env!("DECIDE_TEST_GUESTS_DIR")).join(format!("{name}.wasm"));
    assert!(path.is_file(), "{} was not built", path.display());
    path
}

fn scratch_dir(name: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let dir = std::env::temp_dir().join(format!(
        "decide-plugin-test-{name}-{}-{nanos}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Copy as an operator would: write a temp name, then rename into place.
fn deploy(from: &Path, dir: &Path, name: &str) {
    let staged = dir.join(format!("{name}.wasm.tmp"));
    std::fs::copy(from, &staged).unwrap();
    std::fs::rename(&staged, dir.join(format!("{name}.wasm"))).unwrap();
}

fn qt(name: &str) -> Arc<QuestionType> {
    builtins()
        .question_type(name)
        .unwrap_or_else(|| panic!("no question type {name}"))
}

fn invalid(r: Result<CompiledQuestion, PluginCallError>) -> String {
    match r {
        Err(PluginCallError::InvalidQuestion(m)) => m,
        other => panic!("expected invalid-question, got {other:?}"),
    }
}

fn failed_message<T: std::fmt::Debug>(r: Result<T, PluginCallError>) -> String {
    match r {
        Err(PluginCallError::Failed { message, .. }) => message,
        other => panic!("expected a plugin failure, got {other:?}"),
    }
}

#[test]
fn builtins_are_listed_with_kinds() {
    let list = builtins().list();
    let names: Vec<(&str, PluginKind)> = list.iter().map(|s| (s.name.as_str(), s.kind)).collect();
    assert_eq!(
        names,
        vec![
            ("bias-temperature", PluginKind::Calibration),
            ("contextual", PluginKind::Calibration),
            ("direct-options", PluginKind::Renderer),
            ("framed", PluginKind::Renderer),
            ("openai-choice", PluginKind::QuestionType),
            ("openai-predicate", PluginKind::QuestionType),
            ("openai-score", PluginKind::QuestionType),
            ("options-first", PluginKind::Renderer),
            ("plain-letter", PluginKind::Renderer),
            ("restated", PluginKind::Renderer),
            ("systemone-choice", PluginKind::QuestionType),
            ("systemone-noul", PluginKind::QuestionType),
            ("systemone-score", PluginKind::QuestionType),
            ("temperature", PluginKind::Calibration),
        ]
    );
    for s in &list {
        assert_eq!(s.source, PluginSource::Builtin);
        assert_eq!(s.version, "0.1.0");
        assert_eq!(s.sha256.len(), 64);
    }
    let direct = list.iter().find(|s| s.name == "direct-options").unwrap();
    let json = serde_json::to_value(direct).unwrap();
    assert_eq!(json["kind"], "renderer");
    assert_eq!(json["source"], "builtin");
    // Lookups are by kind.
    assert!(builtins().question_type("temperature").is_none());
    assert!(builtins().calibration("temperature").is_some());
    assert!(builtins().renderer("nope").is_none());
}

#[test]
fn predicate_compiles_and_answers() {
    let p = qt("openai-predicate");
    let q = r#"{"type":"predicate","instructions":"Is it raining?"}"#;
    let c = p.compile(q).unwrap();
    assert_eq!(c.instructions.as_deref(), Some("Is it raining?"));
    assert_eq!(
        c.options,
        vec![
            OptionDef {
                key: "true".into(),
                text: "Yes".into(),
                description: None
            },
            OptionDef {
                key: "false".into(),
                text: "No".into(),
                description: None
            },
        ]
    );
    let a = p.answer(q, &[0.25, 0.75]).unwrap();
    assert_eq!(Value::Object(a), json!({"probability": 0.25}));
    let noul = qt("systemone-noul")
        .answer(r#"{"type":"noul","instructions":"x"}"#, &[0.25, 0.75])
        .unwrap();
    assert_eq!(Value::Object(noul), json!({"noul": 0.25}));
}

#[test]
fn equivalent_questions_compile_identically_across_formats() {
    let pairs = [
        (
            "openai-predicate",
            r#"{"type":"predicate","instructions":"Is the parcel damaged?"}"#,
            "systemone-noul",
            r#"{"type":"noul","instructions":"Is the parcel damaged?"}"#,
        ),
        (
            "openai-choice",
            r#"{"type":"choice","instructions":"Which colour?","choices":[{"value":"red","description":"Crimson too"},{"value":"blue"},{"value":"green"}]}"#,
            "systemone-choice",
            r#"{"type":"choice","instructions":"Which colour?","criteria":{"red":"Crimson too","blue":null,"green":null}}"#,
        ),
        (
            "openai-score",
            r#"{"type":"score","instructions":[{"type":"input_text","text":"How angry?"},{"type":"input_json","data":{"scale":"0-2"}}],"levels":[{"label":"calm"},{"label":"annoyed"},{"label":"furious"}]}"#,
            "systemone-score",
            r#"{"type":"score","instructions":"How angry?\n{\"scale\":\"0-2\"}","criteria":["calm","annoyed","furious"]}"#,
        ),
    ];
    for (a, qa, b, qb) in pairs {
        let ca = qt(a).compile(qa).unwrap();
        let cb = qt(b).compile(qb).unwrap();
        assert_eq!(ca, cb, "{a} vs {b}");
    }
}

#[test]
fn choice_and_score_answers_have_their_shapes() {
    let q = r#"{"type":"choice","instructions":"?","choices":[{"value":"true"},{"value":true},{"value":false}]}"#;
    let c = qt("openai-choice").compile(q).unwrap();
    let keys: Vec<&str> = c.options.iter().map(|o| o.key.as_str()).collect();
    assert_eq!(keys, ["\"true\"", "true", "false"]);
    let a = Value::Object(qt("openai-choice").answer(q, &[0.2, 0.5, 0.3]).unwrap());
    assert_eq!(a["choice"], json!(true));
    assert!((a["confidence"].as_f64().unwrap() - 0.25).abs() < 1e-12);
    assert_eq!(
        a["probabilities"][0],
        json!({"value": "true", "probability": 0.2})
    );

    let q = r#"{"type":"choice","criteria":{"cat":null,"dog":{"size":"big"}}}"#;
    let a = Value::Object(qt("systemone-choice").answer(q, &[0.9, 0.1]).unwrap());
    assert_eq!(a["choice"], "cat");
    assert_eq!(a["probabilities"], json!({"cat": 0.9, "dog": 0.1}));

    let q = r#"{"type":"score","instructions":"?","levels":[{"label":"low"},{"label":"high","description":"very"}]}"#;
    let a = Value::Object(qt("openai-score").answer(q, &[0.25, 0.75]).unwrap());
    assert_eq!(a["score"], 0.75);
    assert_eq!(
        a["probabilities"][1],
        json!({"label": "high", "value": 1, "probability": 0.75})
    );

    let q = r#"{"type":"score","criteria":["low",{"level":"high"}]}"#;
    let a = Value::Object(qt("systemone-score").answer(q, &[0.5, 0.5]).unwrap());
    assert_eq!(a["legend"], json!({"0": "low", "1": {"level": "high"}}));
    assert_eq!(a["probabilities"], json!({"0": 0.5, "1": 0.5}));
    assert_eq!(a["confidence"], 0.0);
}

#[test]
fn invalid_questions_name_the_field() {
    assert_eq!(
        invalid(qt("openai-choice").compile(
            r#"{"type":"choice","instructions":"?","choices":[{"value":1},{"value":"a"}]}"#
        )),
        "choices[0].value: must be a string or a boolean, got a number"
    );
    assert_eq!(
        invalid(qt("openai-predicate").compile(
            r#"{"type":"predicate","instructions":[{"type":"input_image","image_url":"x"}]}"#
        )),
        "instructions[0]: input_image is not supported: this server has no vision model"
    );
    assert_eq!(
        invalid(
            qt("systemone-noul").compile(r#"{"type":"noul","instructions":"x","colour":"red"}"#)
        ),
        "colour: unknown field (expected one of: type, instructions, criteria)"
    );
    // Answering with the wrong number of probabilities is a plugin failure, not the caller's.
    let m =
        match qt("openai-predicate").answer(r#"{"type":"predicate","instructions":"x"}"#, &[1.0]) {
            Err(PluginCallError::Failed { plugin, message }) => {
                assert_eq!(plugin, "openai-predicate");
                message
            }
            other => panic!("{other:?}"),
        };
    assert!(m.contains("expected 2 probabilities"), "{m}");
    // Oversize input never reaches the plugin.
    let huge = format!(
        r#"{{"type":"predicate","instructions":"{}"}}"#,
        "x".repeat(2 << 20)
    );
    assert!(invalid(qt("openai-predicate").compile(&huge)).starts_with("question: "));
}

#[test]
fn direct_options_renders_the_documented_prompt() {
    let r = builtins().renderer("direct-options").unwrap();
    let q = CompiledQuestion {
        instructions: Some("Is it red?".into()),
        options: vec![
            OptionDef {
                key: "true".into(),
                text: "Yes".into(),
                description: Some("It is red".into()),
            },
            OptionDef {
                key: "false".into(),
                text: "No".into(),
                description: None,
            },
        ],
    };
    let m = r
        .render("a red car", &q, &["A".into(), "B".into()])
        .unwrap();
    assert_eq!(m.len(), 2);
    assert_eq!(m[0].role, "system");
    assert_eq!(
        m[0].content,
        "You are a careful classifier. Read the input, then answer the question by replying with the label of exactly one option and nothing else."
    );
    assert_eq!(m[1].role, "user");
    assert_eq!(
        m[1].content,
        "Input:\na red car\n\nQuestion: Is it red?\n\nOptions:\nA. Yes - It is red\nB. No\n\nReply with one label: A, B."
    );
    let no_instructions = CompiledQuestion {
        instructions: None,
        ..q.clone()
    };
    let m = r
        .render("s", &no_instructions, &["A".into(), "B".into()])
        .unwrap();
    assert!(m[1]
        .content
        .contains("Question: Which option best fits the input?"));
    assert!(failed_message(r.render("s", &q, &["A".into()])).contains("got 1 labels for 2 options"));
}

/// Every built-in renderer, through wasm: its info, the label rules (a label count that differs
/// from the option count fails the question; the last user message ends with the instruction to
/// answer with one label) and the start of its text (the exact texts are unit-tested in
/// `guests/common/src/render*`).
#[test]
fn every_renderer_ends_on_the_label_instruction() {
    let q = CompiledQuestion {
        instructions: Some("Is it red?".into()),
        options: vec![
            OptionDef {
                key: "true".into(),
                text: "Yes".into(),
                description: Some("It is red".into()),
            },
            OptionDef {
                key: "false".into(),
                text: "No".into(),
                description: None,
            },
        ],
    };
    let cases = [
        (
            "direct-options",
            true,
            "Input:\na red car\n",
            "Reply with one label: A, B.",
        ),
        (
            "options-first",
            true,
            "Options:\nA. Yes - It is red\nB. No\n",
            "\nReply with one label: A, B.",
        ),
        (
            "restated",
            true,
            "Input:\na red car\n",
            "\nQuestion again: Is it red?\nReply with one label: A, B.",
        ),
        (
            "plain-letter",
            false,
            "a red car\n\nIs it red?\n\nA. It is red\n",
            "Answer with the letter of the correct option only.",
        ),
        (
            "framed",
            true,
            "<input>\na red car\n</input>\n",
            "Definitions:\nYes: It is red\n\nReply with one label: A, B.",
        ),
    ];
    for (name, system, start, end) in cases {
        let r = builtins()
            .renderer(name)
            .unwrap_or_else(|| panic!("no renderer {name}"));
        assert_eq!(r.info().name, name);
        assert!(!r.info().description.is_empty());
        let m = r
            .render("a red car", &q, &["A".into(), "B".into()])
            .unwrap();
        assert_eq!(m.len(), if system { 2 } else { 1 }, "{name}");
        assert_eq!(m[0].role == "system", system, "{name}");
        let user = m.last().unwrap();
        assert_eq!(user.role, "user", "{name}");
        assert!(user.content.starts_with(start), "{name}: {}", user.content);
        assert!(user.content.ends_with(end), "{name}: {}", user.content);
        // Labels that are the option texts are shown once.
        let m = r
            .render("a red car", &q, &["Yes".into(), "No".into()])
            .unwrap();
        let user = &m.last().unwrap().content;
        assert!(
            !user.contains("Yes. Yes") && !user.contains("No. No"),
            "{name}: {user}"
        );
        assert!(
            failed_message(r.render("s", &q, &["A".into()])).contains("got 1 labels for 2 options"),
            "{name}"
        );
    }
}

#[test]
fn temperature_calibration_applies_and_fits() {
    let c = builtins().calibration("temperature").unwrap();
    assert_eq!(c.default_params(0.7).unwrap(), vec![0.7]);
    let p = c.apply(&[0.0, 1.0], &[1.0]).unwrap();
    assert!((p[1] - 1.0 / (1.0 + (-1f64).exp())).abs() < 1e-12);
    let p = c
        .apply(&[-1000.0, -1001.0, f64::NEG_INFINITY], &[1.0])
        .unwrap();
    assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-12 && p[2] == 0.0);
    assert!(matches!(
        c.apply(&[0.0, 1.0], &[0.0]),
        Err(PluginCallError::InvalidQuestion(_))
    ));
    assert!(matches!(
        c.fit(&[]),
        Err(PluginCallError::InvalidQuestion(_))
    ));
    // Scores twice as sharp as the truth: the fitted temperature comes out near 2.
    let mut samples = Vec::new();
    for i in 0..400 {
        let s = (i % 7) as f64 - 3.0;
        let scores = vec![0.0, s];
        let truth = c.apply(&scores, &[2.0]).unwrap();
        // Deterministic labels in proportion to the true probabilities, over 20 replicas.
        let ones = (truth[1] * 20.0).round() as usize;
        for j in 0..20 {
            samples.push(LabelledScores {
                scores: scores.clone(),
                expected: u32::from(j < ones),
            });
        }
    }
    let t = c.fit(&samples).unwrap()[0];
    assert!((t - 2.0).abs() < 0.15, "fitted T = {t}");
}

/// The contextual-calibration policy through wasm: it names its neutral states (kept at load),
/// takes 2k scores (the real read's, then the content-free ones) and returns k probabilities;
/// the other policies name none.
#[test]
fn contextual_calibration_names_neutral_states_and_divides_out_the_prior() {
    let c = builtins().calibration("contextual").unwrap();
    assert_eq!(c.info().name, "contextual");
    assert_eq!(
        c.neutral_states(),
        Some(&["N/A".to_string(), String::new(), "[MASK]".to_string()][..])
    );
    for other in ["temperature", "bias-temperature"] {
        assert_eq!(
            builtins().calibration(other).unwrap().neutral_states(),
            None
        );
    }
    assert_eq!(c.default_params(0.7).unwrap(), vec![0.7]);
    // The read equals the prior: no evidence, uniform.
    let (a, b) = (0.8f64.ln(), 0.2f64.ln());
    let p = c.apply(&[a, b, a, b], &[1.0]).unwrap();
    assert!(
        (p[0] - 0.5).abs() < 1e-12 && (p[1] - 0.5).abs() < 1e-12,
        "{p:?}"
    );
    // p ∝ p_content / p_neutral.
    let p = c.apply(&[0.6f64.ln(), 0.4f64.ln(), a, b], &[1.0]).unwrap();
    assert!((p[0] - 0.75 / 2.75).abs() < 1e-12, "{p:?}");
    // An odd count breaks the convention: refused by the host before the call.
    assert!(failed_message(c.apply(&[0.0, 1.0, 2.0], &[1.0])).contains("takes 2k scores"));
    assert!(failed_message(c.apply(&[0.0, 1.0], &[1.0, 2.0])).contains("expected 1 parameter"));
    // Fit on 2k scores: the label prior is divided out, T comes from the corrected scores.
    let mut samples = Vec::new();
    for i in 0..400 {
        let s = (i % 7) as f64 - 3.0;
        let truth = builtins()
            .calibration("temperature")
            .unwrap()
            .apply(&[0.0, s], &[2.0])
            .unwrap();
        let ones = (truth[1] * 20.0).round() as usize;
        for j in 0..20 {
            samples.push(LabelledScores {
                // A prior of +1.5 on the first label, in the real read and the neutral read.
                scores: vec![1.5, s, 1.5, 0.0],
                expected: u32::from(j < ones),
            });
        }
    }
    let t = c.fit(&samples).unwrap()[0];
    assert!((t - 2.0).abs() < 0.15, "fitted T = {t}");
}

/// Components built against an older contract keep loading: `temperature-v010`, the temperature
/// policy built against `wit/compat/0.1.0`, exports `decide:plugin/calibration@0.1.0`; the host's
/// bindings (0.1.1) find it by its semver-compatible name. It loads, self-tests and applies next
/// to the built-ins, which are all 0.1.1.
#[test]
fn a_plugin_built_against_0_1_0_loads_and_applies_next_to_the_0_1_1_builtins() {
    assert_eq!(SUPPORTED_VERSIONS, ["0.1.0", "0.1.1"]);
    let runtime = PluginRuntime::new(config(None)).unwrap();
    let bytes = std::fs::read(test_guest("temperature-v010")).unwrap();
    let (plugin, _) = Plugin::load(&runtime, "temperature-v010", &bytes).unwrap();
    assert_eq!(plugin.contract_version(), "0.1.0");
    plugin.self_test().unwrap();
    let Plugin::Calibration(old) = plugin else {
        panic!("temperature-v010 is not a calibration policy: {plugin:?}")
    };
    assert_eq!(old.info().name, "temperature-v010");
    assert_eq!(old.neutral_states(), None);
    let expected = 1.0 / (1.0 + (-0.5f64).exp());
    let p = old
        .apply(&[0.0, 1.0], &old.default_params(2.0).unwrap())
        .unwrap();
    assert!((p[1] - expected).abs() < 1e-12, "{p:?}");

    for (name, _, bytes) in builtin::BUILTIN_PLUGINS {
        let (plugin, _) = Plugin::load(&runtime, name, bytes).unwrap();
        assert_eq!(plugin.contract_version(), "0.1.1", "{name}");
    }
    let new = builtins().calibration("temperature").unwrap();
    let p = new
        .apply(&[0.0, 1.0], &new.default_params(2.0).unwrap())
        .unwrap();
    assert!((p[1] - expected).abs() < 1e-12, "{p:?}");
    let contextual = builtins().calibration("contextual").unwrap();
    let p = contextual
        .apply(
            &[0.0, 1.0, 0.0, 0.0],
            &contextual.default_params(2.0).unwrap(),
        )
        .unwrap();
    assert!((p[1] - expected).abs() < 1e-12, "{p:?}");
}

fn misbehaving_runtime(timeout_ms: u64) -> Arc<PluginRuntime> {
    PluginRuntime::new(RuntimeConfig {
        call_timeout: Duration::from_millis(timeout_ms),
        ..config(None)
    })
    .unwrap()
}

fn load_question_type(runtime: &Arc<PluginRuntime>, name: &str) -> Arc<QuestionType> {
    let bytes = std::fs::read(test_guest(name)).unwrap();
    let (plugin, _) = Plugin::load(runtime, name, &bytes).unwrap();
    plugin.self_test().unwrap();
    match plugin {
        Plugin::QuestionType(p) => p,
        other => panic!("{other:?}"),
    }
}

#[test]
fn misbehaving_plugins_fail_only_their_call() {
    let runtime = misbehaving_runtime(300);
    let question = r#"{"type":"predicate","instructions":"misbehave"}"#;
    for (name, cause) in [
        ("trap-question", "trapped"),
        (
            "spin-question",
            "exceeded its 300 ms deadline (setting --plugin-timeout-ms)",
        ),
        (
            "hog-question",
            "exceeded its memory cap of 64 MiB (setting --plugin-memory-mib)",
        ),
    ] {
        let p = load_question_type(&runtime, name);
        let started = Instant::now();
        let message = failed_message(p.compile(question));
        let elapsed = started.elapsed();
        println!(
            "{name}: failed after {:.1} ms: {message}",
            elapsed.as_secs_f64() * 1e3
        );
        assert!(message.starts_with(&format!("plugin {name} ")), "{message}");
        assert!(message.contains(cause), "{message}");
        if name == "trap-question" {
            assert!(
                message.contains("deliberate panic"),
                "stderr is in the message: {message}"
            );
        }
        if name == "spin-question" {
            assert!(
                elapsed >= Duration::from_millis(290) && elapsed < Duration::from_millis(1500),
                "{elapsed:?}"
            );
        }
        // The failure left nothing behind: the next call on the same plugin works.
        let example = p.example().unwrap();
        assert_eq!(p.compile(&example).unwrap().options.len(), 2);
    }
    // And other plugins on the same runtime are unaffected.
    let bytes = std::fs::read(test_guest("predicate-inverted")).unwrap();
    let (plugin, _) = Plugin::load(&runtime, "predicate-inverted", &bytes).unwrap();
    plugin.self_test().unwrap();
}

/// A request's calls share instances through a session; a call that traps, loops or hits the
/// memory cap on a kept instance fails exactly as on a fresh one, and the plugin's next call
/// in the same session answers.
#[test]
fn a_session_keeps_instances_and_a_failure_fails_only_its_call() {
    let runtime = misbehaving_runtime(300);
    let bad = r#"{"type":"predicate","instructions":"misbehave"}"#;
    for name in ["trap-question", "spin-question", "hog-question"] {
        let p = load_question_type(&runtime, name);
        let example = p.example().unwrap();
        let alone = failed_message(p.compile(bad));
        let session = Session::new();
        assert_eq!(p.compile_in(&session, &example).unwrap().options.len(), 2);
        assert_eq!(session.kept(), 1, "{name}: the instance is kept");
        assert_eq!(p.compile_in(&session, &example).unwrap().options.len(), 2);
        assert_eq!(session.kept(), 1, "{name}: and used again");
        // Fails on the kept instance, again on a fresh one: the message is a fresh call's.
        let in_session = failed_message(p.compile_in(&session, bad));
        assert_eq!(in_session, alone, "{name}");
        assert_eq!(session.kept(), 0, "{name}: a failed instance is dropped");
        // The next question of the same request answers.
        assert_eq!(p.compile_in(&session, &example).unwrap().options.len(), 2);
        let answer = p.answer_in(&session, &example, &[0.25, 0.75]).unwrap();
        assert_eq!(answer["probability"], 0.25, "{name}");
        assert_eq!(session.kept(), 1, "{name}");
    }
}

/// Sessions keep instances per plugin: another plugin, a new session or a hot-swapped
/// version of the same plugin never gets them.
#[test]
fn sessions_keep_instances_per_plugin_and_per_session() {
    let p = qt("openai-predicate");
    let q = r#"{"type":"predicate","instructions":"Is it raining?"}"#;
    let c = builtins().calibration("temperature").unwrap();
    let session = Session::new();
    let compiled = p.compile_in(&session, q).unwrap();
    let probabilities = c.apply_in(&session, &[-0.1, -2.3], &[1.0]).unwrap();
    assert_eq!(session.kept(), 2, "one instance of each plugin");
    assert_eq!(
        p.answer_in(&session, q, &probabilities).unwrap(),
        p.answer(q, &probabilities).unwrap()
    );
    assert_eq!(compiled, p.compile(q).unwrap());
    assert_eq!(session.kept(), 2);
    assert_eq!(Session::new().kept(), 0);
    // The same component loaded again (as a hot swap loads it) is another plugin.
    let bytes = super::builtin::BUILTIN_PLUGINS
        .iter()
        .find(|(name, ..)| *name == "openai-predicate")
        .unwrap()
        .2;
    let (again, _) = Plugin::load(builtins().runtime(), "openai-predicate", bytes).unwrap();
    let Plugin::QuestionType(again) = again else {
        panic!("not a question type")
    };
    assert_eq!(again.compile_in(&session, q).unwrap(), compiled);
    assert_eq!(
        session.kept(),
        3,
        "the new version got an instance of its own"
    );
    // Threads take instances of their own.
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..20 {
                    assert_eq!(
                        p.answer_in(&session, q, &[0.3, 0.7]).unwrap()["probability"],
                        0.3
                    );
                }
            });
        }
    });
    assert!((3..=6).contains(&session.kept()), "{}", session.kept());
}

#[test]
fn bad_files_never_replace_a_good_plugin() {
    let dir = scratch_dir("bad-files");
    let registry =
        PluginRegistry::with_builtins(PluginRuntime::new(config(Some(dir.clone()))).unwrap())
            .unwrap();
    let q = r#"{"type":"predicate","instructions":"x"}"#;
    let original = registry.question_type("openai-predicate").unwrap();
    type Write = Box<dyn Fn(&Path)>;
    let cases: [(&str, Write, &str); 4] = [
        (
            "garbage",
            Box::new(|p: &Path| std::fs::write(p, b"\0asm garbage").unwrap()),
            "not a valid WebAssembly component",
        ),
        (
            "wrong kind",
            Box::new(|p: &Path| {
                std::fs::copy(
                    test_guest("broken-example").with_file_name("temperature.wasm"),
                    p,
                )
                .unwrap();
            }),
            "a replacement must be of the same kind",
        ),
        (
            "failing self-test",
            Box::new(|p: &Path| {
                std::fs::copy(test_guest("broken-example"), p).unwrap();
            }),
            "self-test failed",
        ),
        (
            "a core module",
            Box::new(|p: &Path| std::fs::write(p, b"\0asm\x01\0\0\0").unwrap()),
            "not a valid WebAssembly component",
        ),
    ];
    for (what, write, reason) in cases {
        let path = dir.join("openai-predicate.wasm");
        write(&path);
        let changes = registry.poll_once();
        match changes.as_slice() {
            [Change::Rejected {
                name, reason: r, ..
            }] => {
                assert_eq!(name, "openai-predicate");
                assert!(r.contains(reason), "{what}: {r}");
                println!("{what}: refused: {r}");
            }
            other => panic!("{what}: {other:?}"),
        }
        let current = registry.question_type("openai-predicate").unwrap();
        assert!(
            Arc::ptr_eq(&current, &original),
            "{what} replaced the plugin"
        );
        assert_eq!(
            Value::Object(current.answer(q, &[0.25, 0.75]).unwrap()),
            json!({"probability": 0.25})
        );
        // The same bad file is not re-examined (nor re-logged) at every poll.
        assert!(registry.poll_once().is_empty());
        std::fs::remove_file(&path).unwrap();
        assert!(
            registry.poll_once().is_empty(),
            "removing a refused file changes nothing"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn watcher_picks_up_new_and_replaced_files_and_falls_back_on_removal() {
    let dir = scratch_dir("watcher");
    let registry = PluginRegistry::start(config(Some(dir.clone()))).unwrap();
    let q = r#"{"type":"predicate","instructions":"Is it raining?"}"#;
    let before = registry.question_type("openai-predicate").unwrap();
    let wait_for = |what: &str, check: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !check() {
            assert!(
                Instant::now() < deadline,
                "the watcher did not pick up: {what}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };

    // A new name.
    deploy(&test_guest("predicate-inverted"), &dir, "inverted");
    wait_for("a new plugin", &|| {
        registry.question_type("inverted").is_some()
    });
    let summary = registry
        .list()
        .into_iter()
        .find(|s| s.name == "inverted")
        .unwrap();
    assert_eq!(
        summary.source,
        PluginSource::File(dir.join("inverted.wasm"))
    );

    // A replacement of a built-in: the answer flips, while an Arc taken before keeps answering.
    let started = Instant::now();
    deploy(&test_guest("predicate-inverted"), &dir, "openai-predicate");
    wait_for("a replacement", &|| {
        registry
            .question_type("openai-predicate")
            .unwrap()
            .answer(q, &[0.25, 0.75])
            .unwrap()["probability"]
            == 0.75
    });
    println!(
        "replacement picked up in {:.0} ms (poll interval 50 ms)",
        started.elapsed().as_secs_f64() * 1e3
    );
    assert_eq!(
        before.answer(q, &[0.25, 0.75]).unwrap()["probability"],
        0.25,
        "in-flight Arc keeps the old version"
    );

    // Removal falls back to the built-in.
    std::fs::remove_file(dir.join("openai-predicate.wasm")).unwrap();
    wait_for("a removal", &|| {
        registry
            .list()
            .iter()
            .any(|s| s.name == "openai-predicate" && s.source == PluginSource::Builtin)
    });
    assert_eq!(
        registry
            .question_type("openai-predicate")
            .unwrap()
            .answer(q, &[0.25, 0.75])
            .unwrap()["probability"],
        0.25
    );
    std::fs::remove_file(dir.join("inverted.wasm")).unwrap();
    wait_for("a removal without built-in", &|| {
        registry.question_type("inverted").is_none()
    });
    drop(registry);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn precompiled_cache_is_reused_and_timed() {
    let cache = scratch_dir("cache");
    let cfg = RuntimeConfig {
        cache_dir: Some(cache.clone()),
        ..config(None)
    };
    let mut totals = Vec::new();
    for round in ["cold", "cached"] {
        // A fresh runtime (engine) each round, as after a restart.
        let runtime = PluginRuntime::new(cfg.clone()).unwrap();
        let started = Instant::now();
        let mut compile = Duration::ZERO;
        for (name, _, bytes) in builtin::BUILTIN_PLUGINS {
            let (_, stats) = Plugin::load(&runtime, name, bytes).unwrap();
            let expected = if round == "cold" {
                CacheOutcome::Compiled
            } else {
                CacheOutcome::Hit
            };
            assert_eq!(stats.cache, expected, "{round} {name}");
            compile += stats.compile;
        }
        let total = started.elapsed();
        println!(
            "load of the {} built-ins, {round}: {:.1} ms (compile/deserialize {:.1} ms)",
            builtin::BUILTIN_PLUGINS.len(),
            total.as_secs_f64() * 1e3,
            compile.as_secs_f64() * 1e3
        );
        totals.push(total);
    }
    assert!(totals[1] < totals[0], "cached load is faster: {totals:?}");
    let files = std::fs::read_dir(&cache).unwrap().count();
    assert_eq!(
        files,
        builtin::BUILTIN_PLUGINS.len(),
        "one artifact per component"
    );

    // A corrupt artifact is replaced, not trusted.
    let runtime = PluginRuntime::new(cfg.clone()).unwrap();
    for entry in std::fs::read_dir(&cache).unwrap() {
        std::fs::write(entry.unwrap().path(), b"not an artifact").unwrap();
    }
    let (name, _, bytes) = builtin::BUILTIN_PLUGINS[0];
    let (plugin, stats) = Plugin::load(&runtime, name, bytes).unwrap();
    assert_eq!(stats.cache, CacheOutcome::Compiled);
    plugin.self_test().unwrap();
    std::fs::remove_dir_all(&cache).unwrap();
}

#[test]
fn per_call_overhead() {
    let p = qt("openai-predicate");
    let c = builtins().calibration("temperature").unwrap();
    let r = builtins().renderer("direct-options").unwrap();
    let q = r#"{"type":"predicate","instructions":"Is it raining?"}"#;
    let compiled = p.compile(q).unwrap();
    let labels = vec!["A".to_string(), "B".to_string()];
    let n = 300;
    let time = |what: &str, f: &dyn Fn()| {
        f();
        let started = Instant::now();
        for _ in 0..n {
            f();
        }
        let us = started.elapsed().as_secs_f64() * 1e6 / n as f64;
        println!("per call (fresh store + instantiate + call): {what}: {us:.1} us");
        us
    };
    let us = time("openai-predicate compile", &|| {
        p.compile(q).unwrap();
    });
    time("openai-predicate answer", &|| {
        p.answer(q, &[0.3, 0.7]).unwrap();
    });
    time("direct-options render", &|| {
        r.render("It is pouring outside.", &compiled, &labels)
            .unwrap();
    });
    time("temperature apply", &|| {
        c.apply(&[-0.1, -2.3], &[1.0]).unwrap();
    });
    assert!(
        us < 20_000.0,
        "a call should take well under 20 ms, took {us} us"
    );
    // Concurrent calls share nothing.
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..50 {
                    assert_eq!(p.answer(q, &[0.3, 0.7]).unwrap()["probability"], 0.3);
                }
            });
        }
    });
}

#[test]
fn files_present_at_start_are_loaded_and_a_removed_dir_falls_back() {
    let dir = scratch_dir("at-start");
    deploy(&test_guest("predicate-inverted"), &dir, "openai-predicate");
    deploy(&test_guest("trap-question"), &dir, "openai-trap-question");
    std::fs::write(dir.join("notes.txt"), "not a plugin").unwrap();
    let registry =
        PluginRegistry::with_builtins(PluginRuntime::new(config(Some(dir.clone()))).unwrap())
            .unwrap();
    let mut changes = registry.poll_once();
    changes.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
    assert!(
        matches!(
            changes.as_slice(),
            [Change::Installed { .. }, Change::Installed { .. }]
        ),
        "{changes:?}"
    );
    assert!(registry.question_type("openai-trap-question").is_some());
    let q = r#"{"type":"predicate","instructions":"x"}"#;
    assert_eq!(
        registry
            .question_type("openai-predicate")
            .unwrap()
            .answer(q, &[0.25, 0.75])
            .unwrap()["probability"],
        0.75
    );
    std::fs::remove_dir_all(&dir).unwrap();
    let changes = registry.poll_once();
    assert_eq!(changes.len(), 2, "{changes:?}");
    assert!(registry.question_type("openai-trap-question").is_none());
    assert_eq!(
        registry
            .question_type("openai-predicate")
            .unwrap()
            .answer(q, &[0.25, 0.75])
            .unwrap()["probability"],
        0.25
    );
    assert!(registry.poll_once().is_empty());
}

/// The pipeline calls plugins from `spawn_blocking` threads. A guest writing to stderr (a panic
/// message) goes through wasmtime-wasi's sync stream bindings, which enter tokio: that must work
/// there (it would panic on an async worker thread, so never call plugins from async code).
#[test]
fn a_trapping_plugin_inside_spawn_blocking_is_contained() {
    let runtime = misbehaving_runtime(1000);
    let p = load_question_type(&runtime, "trap-question");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let result = rt.block_on(async move {
        tokio::task::spawn_blocking(move || {
            p.compile(r#"{"type":"predicate","instructions":"boom"}"#)
        })
        .await
        .unwrap()
    });
    let message = failed_message(result);
    assert!(message.contains("deliberate panic"), "{message}");
}

/// Even from an async task (which the pipeline should not do), a guest's stderr write does not
/// panic the host.
#[test]
fn a_trapping_plugin_called_from_an_async_task_is_contained() {
    let runtime = misbehaving_runtime(1000);
    let p = load_question_type(&runtime, "trap-question");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let result = rt.block_on(async move {
        tokio::spawn(async move { p.compile(r#"{"type":"predicate","instructions":"boom"}"#) })
            .await
            .unwrap()
    });
    let message = failed_message(result);
    assert!(message.contains("deliberate panic"), "{message}");
}

#[test]
fn the_memory_cap_is_configurable() {
    let runtime = PluginRuntime::new(RuntimeConfig {
        memory_limit_bytes: 1 << 20,
        ..config(None)
    })
    .unwrap();
    let (name, _, bytes) = builtin::BUILTIN_PLUGINS[0];
    // Loading calls `info()`, which already needs more than 1 MiB of linear memory.
    let error = Plugin::load(&runtime, name, bytes).unwrap_err().to_string();
    assert!(
        error.contains(&format!("plugin {name} exceeded its memory cap of 1 MiB")),
        "{error}"
    );
}

/// More requests in flight than the instance pool has slots for their instances (each keeps
/// one instance of two plugins until it ends, as requests waiting for the model do), and
/// calls outside them still answer: on the H200 at 256 clients, kept instances used up the
/// pool's core instances and 98% of requests failed with "maximum concurrent limit of 1000
/// for core instances reached".
#[test]
fn requests_keeping_instances_never_exhaust_the_instance_pool() {
    let p = qt("openai-predicate");
    let c = builtins().calibration("temperature").unwrap();
    let q = r#"{"type":"predicate","instructions":"Is it raining?"}"#;
    let sessions: Vec<Session> = (0..600).map(|_| Session::new()).collect();
    for (i, session) in sessions.iter().enumerate() {
        p.compile_in(session, q)
            .unwrap_or_else(|e| panic!("request {i}: {e}"));
        c.apply_in(session, &[-0.1, -2.3], &[1.0])
            .unwrap_or_else(|e| panic!("request {i}: {e}"));
    }
    for _ in 0..20 {
        p.compile(q).unwrap();
    }
}
