//! Saved tuning results: one JSON file per model and candidate set in the calibration
//! directory, reused only when nothing that could change a read or the selection changed.
//!
//! The key holds the model file's sha256, the answer suffix the self-check kept, the question
//! file's sha256 with a *compile fingerprint* (the sha256 of what the question types compile
//! every question to), the selection rule, and per candidate its setup and a *render
//! fingerprint*: the sha256 of what its renderer renders for a few fixed probe questions with
//! every label scheme. Fingerprints rather than component hashes: a guest rebuilt on another
//! machine differs in bytes (it embeds build paths) while behaving the same, and a result
//! measured once (e.g. on a GPU, shipped in `calibration/tuned/`) should serve everywhere the
//! behaviour is the same; a component that behaves differently is measured again. How the
//! model computes (CPU or CUDA, weight format) is recorded but not keyed: it moves scores by
//! rounding, not which prompt reads best.
//!
//! The result also carries the correction measured with the chosen setup ([`PolicyChoice`]):
//! startup calibration's rule applied to the chosen setup's tuning reads, with a probe of the
//! policy's outputs so that it is applied only by a policy plugin that computes the same.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{best_index, Answered, CandidateReport, MIN_ANSWERED, RULE};
use crate::calibration::questions::QuestionSet;
use crate::calibration::store::{file_sha256, now_rfc3339, read_json, write_json};
use crate::pipeline::{Engine, Setup, SetupSource};
use crate::plugins::{CompiledQuestion, OptionDef};

/// One candidate as keyed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CandidateKey {
    /// `renderer+labels+readout`.
    pub setup: String,
    /// sha256 of the renderer's renders of the probe questions ([`fingerprint`]).
    pub fingerprint: String,
}

/// What a saved result depends on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Key {
    pub model_sha256: String,
    pub answer_suffix: String,
    /// sha256 of every question's compiled form (instructions, option keys, texts,
    /// descriptions) or compile error, in file order.
    pub compiled_sha256: String,
    pub questions_sha256: String,
    pub rule: String,
    pub candidates: Vec<CandidateKey>,
}

impl Key {
    fn path_in(&self, dir: &Path) -> PathBuf {
        let digest = hex::encode(Sha256::digest(
            serde_json::to_vec(self).expect("a key serializes"),
        ));
        dir.join(format!("tune-{}.json", &digest[..16]))
    }
}

/// A saved tuning result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Saved {
    pub key: Key,
    pub date: String,
    pub decide_version: String,
    /// How the model computed when this was measured (not keyed, see the module doc).
    pub forward: String,
    /// The setup answers get (`renderer+labels+readout`).
    pub chosen: String,
    /// `tuned` (a candidate's gain was clear) or `default`.
    pub source: String,
    /// One line on why.
    pub reason: String,
    /// The default every candidate is compared with.
    pub baseline: String,
    pub candidates: Vec<CandidateReport>,
    /// Questions in the file, and where it came from.
    pub questions: usize,
    pub origin: String,
    pub seconds: f64,
    /// The correction measured with the chosen setup (none when no policy could be measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<PolicyChoice>,
}

/// The calibration policy tuning measured with the chosen setup: every loaded policy
/// cross-validated on the chosen setup's tuning reads, the kept one of lowest held-out log
/// loss served (none kept: `temperature` at T = 1.0), as startup calibration's `auto` does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyChoice {
    pub policy: String,
    /// Parameters fitted on all tuning reads of the chosen setup (or T = 1.0).
    pub params: Vec<f64>,
    pub temperature: f64,
    pub kept: bool,
    pub reason: String,
    /// The policy's outputs for [`probe_scores`] with `params`: a loaded plugin of that name
    /// applies these parameters only if it computes the same.
    pub probe: Vec<Vec<f64>>,
    pub reports: Vec<crate::calibration::cv::PolicyReport>,
}

/// Score vectors the policy probe applies (2 and 3 options; content-free policies get the
/// same followed by a neutral read).
pub fn probe_scores(policy: &crate::plugins::Calibration) -> Vec<Vec<f64>> {
    let base = [vec![-0.2, -1.8], vec![-1.1, -0.6, -2.5]];
    base.iter()
        .map(|s| match policy.neutral_states() {
            Some(_) => [s.as_slice(), &vec![-0.7; s.len()]].concat(),
            None => s.clone(),
        })
        .collect()
}

/// The policy's outputs on the probe, `params` applied (an error as an empty vector).
pub fn probe(policy: &crate::plugins::Calibration, params: &[f64]) -> Vec<Vec<f64>> {
    probe_scores(policy)
        .iter()
        .map(|s| policy.apply(s, params).unwrap_or_default())
        .collect()
}

impl PolicyChoice {
    /// Whether `policy` (a loaded plugin of this choice's name) computes what was measured.
    pub fn matches(&self, policy: &crate::plugins::Calibration) -> bool {
        let now = probe(policy, &self.params);
        now.len() == self.probe.len()
            && now.iter().zip(&self.probe).all(|(a, b)| {
                a.len() == b.len()
                    && !a.is_empty()
                    && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-9)
            })
    }
}

impl Saved {
    /// The setup answers get.
    pub fn setup(&self) -> Setup {
        let source = if self.source == "tuned" {
            SetupSource::Tuned
        } else {
            SetupSource::Default
        };
        Setup::parse_label(&self.chosen, source).unwrap_or_else(Setup::default_setup)
    }
}

/// The probe questions of the render fingerprint: a yes/no question with a description, a
/// lettered choice with descriptions, and a choice without instructions.
fn probes() -> Vec<CompiledQuestion> {
    let option = |key: &str, text: &str, description: Option<&str>| OptionDef {
        key: key.into(),
        text: text.into(),
        description: description.map(String::from),
    };
    vec![
        CompiledQuestion {
            instructions: Some("Does the customer ask for a refund?".into()),
            options: vec![
                option("true", "Yes", Some("Money back is requested")),
                option("false", "No", None),
            ],
        },
        CompiledQuestion {
            instructions: Some("Which team should handle this ticket?".into()),
            options: vec![
                option("\"billing\"", "billing", Some("Charges and invoices")),
                option("\"shipping\"", "shipping", None),
                option("\"technical\"", "technical", Some("Bugs and crashes")),
            ],
        },
        CompiledQuestion {
            instructions: None,
            options: vec![option("0", "low", None), option("1", "high", None)],
        },
    ]
}

/// sha256 over a renderer's renders of the probe questions with letters, digits and (for the
/// yes/no probe) the option texts as labels. An error renders as its text.
pub fn fingerprint(engine: &Engine, renderer: &str) -> Result<String, String> {
    let plugin = engine
        .plugins()
        .renderer(renderer)
        .ok_or_else(|| format!("renderer plugin `{renderer}` is not loaded"))?;
    let mut hasher = Sha256::new();
    hasher.update(renderer.as_bytes());
    let state = "I was charged twice. Please refund the extra charge.";
    for question in probes() {
        let n = question.options.len();
        let letters: Vec<String> = crate::readout::labels::letters().take(n).collect();
        let digits: Vec<String> = crate::readout::labels::digits().take(n).collect();
        let texts: Vec<String> = question.options.iter().map(|o| o.text.clone()).collect();
        for labels in [letters, digits, texts] {
            match plugin.render(state, &question, &labels) {
                Ok(messages) => {
                    for m in messages {
                        hasher.update([0u8]);
                        hasher.update(m.role.as_bytes());
                        hasher.update([1u8]);
                        hasher.update(m.content.as_bytes());
                    }
                }
                Err(error) => hasher.update(format!("error: {error}").as_bytes()),
            }
            hasher.update([2u8]);
        }
    }
    Ok(hex::encode(hasher.finalize()))
}

/// The key of tuning `setups` on `set` with `engine`'s model.
pub fn key(
    engine: &Engine,
    model_file: &Path,
    set: &QuestionSet,
    setups: &[Setup],
) -> Result<Key, String> {
    let plugins = engine.plugins();
    let mut compiled = Sha256::new();
    for q in &set.questions {
        compiled.update(q.plugin.as_bytes());
        match plugins.question_type(&q.plugin).map(|p| p.compile(&q.json)) {
            Some(Ok(c)) => {
                compiled.update(format!("{:?}", c.instructions).as_bytes());
                for o in &c.options {
                    compiled
                        .update(format!("\0{}\0{}\0{:?}", o.key, o.text, o.description).as_bytes());
                }
            }
            Some(Err(error)) => compiled.update(format!("error: {error}").as_bytes()),
            None => compiled.update(b"missing"),
        }
        compiled.update([0xffu8]);
    }
    let mut fingerprints = std::collections::HashMap::new();
    let mut candidates = Vec::with_capacity(setups.len());
    for setup in setups {
        if !fingerprints.contains_key(&setup.renderer) {
            fingerprints.insert(
                setup.renderer.clone(),
                fingerprint(engine, &setup.renderer)?,
            );
        }
        candidates.push(CandidateKey {
            setup: setup.label(),
            fingerprint: fingerprints[&setup.renderer].clone(),
        });
    }
    Ok(Key {
        model_sha256: file_sha256(model_file)
            .map_err(|e| format!("cannot hash the model file {}: {e}", model_file.display()))?,
        answer_suffix: engine.model().answer_suffix(),
        compiled_sha256: hex::encode(compiled.finalize()),
        questions_sha256: set.sha256.clone(),
        rule: RULE.into(),
        candidates,
    })
}

/// Applies the rule to the measured candidates (the default first).
pub fn decide(
    key: Key,
    set: &QuestionSet,
    measured: Vec<(CandidateReport, Vec<Answered>)>,
    seconds: f64,
    engine: &Engine,
) -> Saved {
    let baseline = measured
        .first()
        .map(|(r, _)| r.setup.clone())
        .unwrap_or_else(|| Setup::default_setup().label());
    let best = best_index(&measured);
    let (chosen, source, reason) = match best {
        None => (
            baseline.clone(),
            "default",
            format!("no candidate answered {MIN_ANSWERED} questions"),
        ),
        Some(0) => (
            baseline.clone(),
            "default",
            "the default is the most accurate candidate".to_string(),
        ),
        Some(i) => {
            let report = &measured[i].0;
            match &report.gain {
                Some(gain) if gain.low > 0.0 => (
                    report.setup.clone(),
                    "tuned",
                    format!(
                        "the most accurate candidate; its accuracy gain over {baseline} is {:+.3} [{:+.3}, {:+.3}] (95% paired bootstrap over groups), clear of zero",
                        gain.value, gain.low, gain.high
                    ),
                ),
                Some(gain) => (
                    baseline.clone(),
                    "default",
                    format!(
                        "the most accurate candidate, {}, gains {:+.3} [{:+.3}, {:+.3}] over the default: not clear of zero, so the default stays",
                        report.setup, gain.value, gain.low, gain.high
                    ),
                ),
                None => (
                    baseline.clone(),
                    "default",
                    format!("the gain of {} over the default could not be measured", report.setup),
                ),
            }
        }
    };
    Saved {
        key,
        date: now_rfc3339(),
        decide_version: env!("CARGO_PKG_VERSION").to_string(),
        forward: engine.model().info().forward.clone(),
        chosen,
        source: source.to_string(),
        reason,
        baseline,
        candidates: measured.into_iter().map(|(r, _)| r).collect(),
        questions: set.questions.len(),
        origin: set.origin.clone(),
        seconds,
        policy: None,
    }
}

include!(concat!(env!("OUT_DIR"), "/tuned_seeds.rs"));

/// The saved result for `key` in `dir`, if one with exactly this key is there; else a result
/// shipped in the binary (`calibration/tuned/`, measured by the project) with exactly this key.
pub fn load(dir: &Path, key: &Key) -> Result<Option<(Saved, PathBuf)>, String> {
    let path = key.path_in(dir);
    match read_json::<Saved>(&path, "a saved tuning result")? {
        None => Ok(shipped(key)),
        Some(saved) => Ok((saved.key == *key).then_some((saved, path))),
    }
}

/// The shipped result with exactly `key`, if any (its path names the shipped file).
fn shipped(key: &Key) -> Option<(Saved, PathBuf)> {
    TUNED_SEEDS.iter().find_map(|(name, text)| {
        let saved: Saved = serde_json::from_str(text).ok()?;
        (saved.key == *key).then(|| {
            (
                saved,
                PathBuf::from(format!("calibration/tuned/{name} (shipped)")),
            )
        })
    })
}

/// Saves under `dir` (a temporary name, fsynced, renamed into place).
pub fn save(dir: &Path, saved: &Saved) -> Result<PathBuf, String> {
    std::fs::create_dir_all(dir).map_err(|e| {
        format!(
            "cannot create {} (setting --calibration-dir): {e}",
            dir.display()
        )
    })?;
    write_json(&saved.key.path_in(dir), saved)
}
