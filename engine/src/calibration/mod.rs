//! Startup calibration: measure how well the loaded model's raw probabilities are calibrated
//! on a labelled question set, and let the calibration policy plugin correct them.
//!
//! Flow ([`startup`], also `decide calibrate`):
//! 1. the question file ([`questions`]) is read through the server's own pipeline
//!    ([`Engine::read_raw`]: the question-type plugin compiles, the renderer renders, the model
//!    reads), recording each question's raw option scores and expected option;
//! 2. the policy plugin fits its parameters (`fit` in `wit/plugin.wit`); the host does what is
//!    the same for every policy ([`cv`]): 5-fold cross-validation with groups kept in one fold,
//!    ECE raw vs held-out calibrated with 95% bootstrap intervals over groups ([`ece`]), and the
//!    keep rule; every loaded policy is measured and compared in the log. With `--calibration
//!    auto` (the default) the kept policy of lowest held-out log loss is served (none kept:
//!    `temperature` at T = 1.0); with a named policy, that one;
//! 3. the result is saved ([`store`]) and reused at the next start when the model file, the
//!    readout, the policy, the render version and the question file are all unchanged.
//!
//! Fewer than [`MIN_ANSWERED`] answered questions, a missing or malformed file, or a failed fit:
//! T = 1.0 with source `default` and a warning naming the cause; the server always starts.

pub mod budget;
pub mod cv;
pub mod ece;
pub mod questions;
pub mod state;
pub mod store;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use crate::pipeline::{render_version, Engine, Question, RequestScope};
use crate::plugins::Calibration;
use crate::progress::{Reporter, Task};
use cv::{PolicyReport, Sample};
use questions::QuestionSet;
pub use state::{CalibrationState, TemperatureSource, AUTO, AUTO_FALLBACK};
use store::{Key, QuestionCounts, Saved};

/// Fewest answered questions a fit is made on.
pub const MIN_ANSWERED: usize = 50;

/// Value of `--calibration-questions` that skips startup calibration.
pub const SKIP: &str = "none";

/// Where the questions come from (startup calibration's and tuning's).
#[derive(Debug, Clone)]
pub enum Questions {
    /// The built-in set.
    Builtin,
    /// An operator's file.
    File(PathBuf),
    /// Do not run.
    Skip,
}

impl Questions {
    /// From a flag (`--calibration-questions`, `--tune-questions`): none given = the built-in
    /// set, `none` = skip, else a file.
    pub fn from_flag(flag: Option<&str>) -> Questions {
        match flag {
            None | Some("") => Questions::Builtin,
            Some(SKIP) => Questions::Skip,
            Some(path) => Questions::File(PathBuf::from(path)),
        }
    }

    /// The questions, `builtin` being the built-in set.
    pub fn load_with(&self, builtin: impl FnOnce() -> QuestionSet) -> Result<QuestionSet, String> {
        match self {
            Questions::Builtin => Ok(builtin()),
            Questions::File(path) => QuestionSet::read(path),
            Questions::Skip => Err("skipped".into()),
        }
    }

    fn load(&self) -> Result<QuestionSet, String> {
        self.load_with(QuestionSet::builtin)
    }
}

/// What startup calibration needs to know.
pub struct Settings<'a> {
    pub questions: Questions,
    /// Where results are saved (`--calibration-dir`).
    pub dir: PathBuf,
    /// The model file (hashed for the key).
    pub model_file: &'a Path,
    /// Reuse a saved result when the key matches (`decide calibrate` always re-fits).
    pub reuse: bool,
    /// How the reads are made: their scope (at startup: in the background, stopped with the
    /// server) and time budget ([`budget`]).
    pub reading: budget::Reading,
}

/// Runs startup calibration and returns the state answers get. Never fails: every problem
/// ends in T = 1.0 with source `default` and a warning naming the cause. Its progress is the
/// task `calibrating` (questions read, then the policies fitted). The report lines are
/// logged; the saved result is returned too.
pub fn startup(
    engine: &Engine,
    settings: &Settings,
    progress: &Reporter,
) -> (CalibrationState, Option<Saved>) {
    let (_, policy_name) = engine.plugin_names();
    let fallback = CalibrationState::default_for(&policy_name);
    if matches!(settings.questions, Questions::Skip) {
        tracing::info!(
            "startup calibration skipped (--calibration-questions {SKIP}): T = 1.0, source default"
        );
        return (fallback, None);
    }
    match run(engine, settings, progress) {
        Ok(saved) => (state_of(&saved), Some(saved)),
        Err(cause) => {
            tracing::warn!(
                "startup calibration not applied: {cause}; answers use T = 1.0, source default"
            );
            (fallback, None)
        }
    }
}

/// The state answers get from a saved result.
pub fn state_of(saved: &Saved) -> CalibrationState {
    let policy_name = saved.policy.as_str();
    let source = if saved.source == "calibrated" {
        TemperatureSource::Calibrated
    } else {
        TemperatureSource::Default
    };
    CalibrationState {
        policy: policy_name.to_string(),
        plugin_sha256: saved
            .reports
            .iter()
            .find(|r| r.policy == saved.policy)
            .map(|r| r.policy_sha256.clone())
            .unwrap_or_else(|| saved.key.policy_sha256.clone()),
        params: saved.params.clone(),
        temperature: saved.temperature,
        source,
    }
}

/// The saved result a run of `settings` would reuse, without reading anything (none: it
/// would measure). What startup applies before the server answers.
pub fn saved(engine: &Engine, settings: &Settings) -> Result<Option<Saved>, String> {
    if matches!(settings.questions, Questions::Skip) {
        return Ok(None);
    }
    let keyed = keyed(engine, settings)?;
    Ok(
        store::load(&settings.dir, &keyed.key)?.map(|(saved, path)| {
            log_report(&saved, &format!("saved result {} reused", path.display()));
            saved
        }),
    )
}

/// What a run of `settings` reads and fits, and the key its result is saved under.
struct Keyed {
    key: Key,
    set: QuestionSet,
    /// `--calibration auto`.
    auto: bool,
    /// The policy fitted (the fallback's name with `auto`).
    policy_name: String,
    policy: Arc<Calibration>,
}

fn keyed(engine: &Engine, settings: &Settings) -> Result<Keyed, String> {
    let choice = engine.calibration_choice();
    let auto = choice == AUTO;
    let policy_name = if auto { AUTO_FALLBACK } else { choice };
    // The questions read with the server's setup (pinned, tuned or default), as answers do.
    let setup = engine.resolve_setup(None, None);
    let renderer_name = setup.renderer.as_str();
    let plugins = engine.plugins();
    let policy = plugins.calibration(policy_name).ok_or_else(|| {
        format!("calibration plugin `{policy_name}` is not loaded (setting --calibration)")
    })?;
    let renderer = plugins.renderer(renderer_name).ok_or_else(|| {
        format!("renderer plugin `{renderer_name}` is not loaded (setting --renderer)")
    })?;
    let set = settings.questions.load()?;
    let mut question_types: Vec<String> = set
        .questions
        .iter()
        .map(|q| match plugins.question_type(&q.plugin) {
            Some(p) => format!("{}={}", q.plugin, p.sha256()),
            None => format!("{}=missing", q.plugin),
        })
        .collect();
    question_types.sort();
    question_types.dedup();
    let model_sha256 = store::file_sha256(settings.model_file).map_err(|e| {
        format!(
            "cannot hash the model file {}: {e}",
            settings.model_file.display()
        )
    })?;
    // The readout and label scheme of the setup are part of the key; so is an answer suffix
    // kept by the self-check, which changes every prompt.
    let suffix = engine.model().answer_suffix();
    let readout = format!(
        "{} labels {}",
        setup.options.choice.as_str(),
        setup.options.labels.unwrap_or_default().as_str()
    );
    let key = Key {
        model_sha256,
        forward: engine.model().info().forward.clone(),
        readout: if suffix.is_empty() {
            readout
        } else {
            format!("{readout} after {suffix:?}")
        },
        policy: choice.to_string(),
        policy_sha256: if auto {
            compared_policies(engine, policy_name)
                .iter()
                .map(|p| format!("{}={}", p.name(), p.sha256()))
                .collect::<Vec<_>>()
                .join(",")
        } else {
            policy.sha256().to_string()
        },
        render_version: render_version(&renderer),
        renderer: renderer_name.to_string(),
        renderer_sha256: renderer.sha256().to_string(),
        question_types,
        questions_sha256: set.sha256.clone(),
    };
    Ok(Keyed {
        key,
        set,
        auto,
        policy_name: policy_name.to_string(),
        policy,
    })
}

/// Reads the questions (or reuses a saved result), fits, saves, logs. Errors name the cause.
pub fn run(engine: &Engine, settings: &Settings, progress: &Reporter) -> Result<Saved, String> {
    let started = Instant::now();
    let Keyed {
        key,
        set,
        auto,
        policy_name,
        policy,
    } = keyed(engine, settings)?;
    let policy_name = policy_name.as_str();
    let reading = &settings.reading;
    if settings.reuse {
        match store::load(&settings.dir, &key) {
            Ok(Some((saved, path))) => {
                log_report(&saved, &format!("saved result {} reused", path.display()));
                return Ok(saved);
            }
            Ok(None) => {}
            Err(cause) => tracing::warn!("{cause}; calibrating again"),
        }
    }

    let policies = compared_policies(engine, policy_name);
    // Content-free reads for a content-free policy (the first one's neutral states).
    let neutral = policies
        .iter()
        .find_map(|p| p.neutral_states().map(<[String]>::to_vec));
    let task = progress.start("calibrating", "questions", set.questions.len() as u64);
    let set = match reading.budget {
        Some(budget) => {
            task.set_detail(format!(
                "timing a probe against the budget ({})",
                budget::SETTING
            ));
            budget::within(reading, set, budget, 1, "calibration", |probe| {
                collect_in(
                    engine,
                    &reading.scope,
                    probe,
                    neutral.as_deref(),
                    &|_, _| {},
                );
            })?
        }
        None => set,
    };
    task.set_total(set.questions.len() as u64);
    let (samples, counts) = collect(engine, reading, &set, neutral.as_deref(), &task);
    reading.check()?;
    if samples.len() < MIN_ANSWERED {
        return Err(format!(
            "only {} of {} questions from {} were answered, at least {MIN_ANSWERED} are needed{}",
            samples.len(),
            counts.total,
            set.origin,
            counts
                .skipped_reasons
                .first()
                .map(|r| format!(" (first skipped: {r})"))
                .unwrap_or_default()
        ));
    }
    let reports = compare_policies(&policies, &samples, auto, &|step| task.set_detail(step));
    task.finish();
    let served = policies
        .iter()
        .find(|p| p.name() == reports[0].policy)
        .cloned()
        .unwrap_or_else(|| policy.clone());
    let mut saved = decide(
        key,
        counts,
        reports,
        &served,
        started.elapsed().as_secs_f64(),
    );
    saved.samples = samples;
    match store::save(&settings.dir, &saved) {
        Ok(path) => log_report(&saved, &format!("saved to {}", path.display())),
        Err(cause) => {
            log_report(&saved, "not saved");
            tracing::warn!("calibration result not saved: {cause}");
        }
    }
    Ok(saved)
}

/// Cross-validates every policy on `samples`; the served one first: with `auto`, the kept
/// policy of lowest held-out log loss (none kept: the first, which then serves T = 1.0).
pub fn compare_policies(
    policies: &[Arc<Calibration>],
    samples: &[Sample],
    auto: bool,
    progress: &dyn Fn(String),
) -> Vec<cv::PolicyReport> {
    let mut reports = Vec::with_capacity(policies.len());
    for plugin in policies {
        progress(format!("fitting {}", plugin.name()));
        reports.push(cv::evaluate(plugin, samples));
    }
    if auto {
        if let Some(best) = (0..reports.len())
            .filter(|&i| reports[i].keep)
            .min_by(|&a, &b| {
                let loss = |i: usize| reports[i].log_loss_calibrated.unwrap_or(f64::INFINITY);
                loss(a).total_cmp(&loss(b))
            })
        {
            reports.swap(0, best);
        }
    }
    reports
}

/// The policies startup calibration measures: `first`, then every other loaded one by name.
pub fn compared_policies(engine: &Engine, first: &str) -> Vec<Arc<Calibration>> {
    let plugins = engine.plugins();
    let mut names: Vec<String> = plugins
        .list()
        .into_iter()
        .filter(|p| p.kind == crate::plugins::PluginKind::Calibration && p.name != first)
        .map(|p| p.name)
        .collect();
    names.sort();
    names.insert(0, first.to_string());
    names
        .iter()
        .filter_map(|name| plugins.calibration(name))
        .collect()
}

/// What a policy's cross-validation report means for answers.
pub struct Verdict {
    /// The parameters answers get.
    pub params: Vec<f64>,
    /// The temperature they stand for.
    pub temperature: f64,
    /// Whether a fit was measured (kept or not); false when it failed.
    pub measured: bool,
    /// Whether the fitted parameters are kept.
    pub kept: bool,
    /// Why, in words.
    pub reason: String,
}

/// The keep rule: the fitted parameters when the held-out ECE interval lies below the raw
/// one; else T = 1.0 (measured: no correction needed; or the fit failed).
pub fn verdict(report: &PolicyReport, policy: &Calibration) -> Verdict {
    let one = policy.default_params(1.0).unwrap_or_else(|_| vec![1.0]);
    let failed = |reason: String| Verdict {
        params: one.clone(),
        temperature: 1.0,
        measured: false,
        kept: false,
        reason,
    };
    match (&report.error, &report.params) {
        (Some(error), _) => failed(format!("fit failed: {error}")),
        (None, None) => failed("fit failed".to_string()),
        (None, Some(params)) if report.keep => Verdict {
            params: params.clone(),
            temperature: params.first().copied().unwrap_or(1.0),
            measured: true,
            kept: true,
            reason: if report
                .ece_calibrated
                .is_some_and(|c| cv::keep(&report.ece_raw, &c))
            {
                "held-out ECE interval lies below the raw one".to_string()
            } else {
                "held-out accuracy gain is clear of zero and log loss is no worse".to_string()
            },
        },
        (None, Some(_)) => Verdict {
            params: one.clone(),
            temperature: 1.0,
            measured: true,
            kept: false,
            reason: "neither the held-out ECE interval lies below the raw one nor is the accuracy gain clear: no correction established, T = 1.0".to_string(),
        },
    }
}

/// Applies the keep rule of the configured policy's report.
fn decide(
    key: Key,
    questions: QuestionCounts,
    reports: Vec<PolicyReport>,
    policy: &Calibration,
    seconds: f64,
) -> Saved {
    let Verdict {
        params,
        temperature,
        measured,
        kept,
        reason,
    } = verdict(&reports[0], policy);
    let source = if measured { "calibrated" } else { "default" };
    Saved {
        key,
        date: store::now_rfc3339(),
        decide_version: env!("CARGO_PKG_VERSION").to_string(),
        policy: reports[0].policy.clone(),
        params,
        temperature,
        source: source.to_string(),
        kept,
        reason,
        questions,
        seconds,
        reports,
        samples: Vec::new(),
    }
}

/// Reads every question through the engine, grouped by state (one request per state).
fn collect(
    engine: &Engine,
    reading: &budget::Reading,
    set: &QuestionSet,
    neutral: Option<&[String]>,
    task: &Task,
) -> (Vec<Sample>, QuestionCounts) {
    collect_in(engine, &reading.scope, set, neutral, &|done, total| {
        task.set_total(total as u64);
        task.set_done(done as u64)
    })
}

/// [`collect`] with a tenant's scope (its plugins and renderer); with `neutral` states each
/// sample also gets its content-free scores; `progress(done, total)`.
pub fn collect_in(
    engine: &Engine,
    scope: &RequestScope,
    set: &QuestionSet,
    neutral: Option<&[String]>,
    progress: &dyn Fn(usize, usize),
) -> (Vec<Sample>, QuestionCounts) {
    let setup = engine.resolve_setup(scope.renderer.as_deref(), None);
    let total = set.questions.len();
    let mut by_state: Vec<(&str, Vec<usize>)> = Vec::new();
    for (i, q) in set.questions.iter().enumerate() {
        match by_state.iter_mut().find(|(state, _)| *state == q.state) {
            Some((_, list)) => list.push(i),
            None => by_state.push((&q.state, vec![i])),
        }
    }
    let mut samples = Vec::with_capacity(total);
    let mut skipped = Vec::new();
    let mut done = 0;
    progress(0, total);
    for (state, indices) in by_state {
        // A cancelled fit (a tenant's, by DELETE /v1/calibration) compiles nothing more.
        if scope.cancel.is_cancelled() {
            break;
        }
        let batch: Vec<Question> = indices
            .iter()
            .map(|&i| Question {
                loc: crate::loc!["calibration", set.questions[i].id.as_str()],
                plugin: set.questions[i].plugin.clone(),
                json: set.questions[i].json.clone(),
            })
            .collect();
        let reads = engine.read_raw_with(scope, &setup, state, &batch, neutral);
        for (&i, read) in indices.iter().zip(reads) {
            let q = &set.questions[i];
            match read {
                Err(reason) => skipped.push(format!("{}: {reason}", q.id)),
                Ok(read) if read.scores.iter().any(|s| !s.is_finite()) => {
                    skipped.push(format!("{}: a raw option score is not finite", q.id))
                }
                Ok(read) => match questions::expected_index(&read.options, &q.expected) {
                    Some(expected) => samples.push(Sample {
                        scores: read.scores,
                        expected,
                        group: q.group.clone(),
                        content_free: read.content_free,
                    }),
                    None => skipped.push(format!(
                        "{}: expected {} is not one of the question's options",
                        q.id, q.expected
                    )),
                },
            }
            done += 1;
        }
        progress(done, total);
    }
    let counts = QuestionCounts {
        origin: set.origin.clone(),
        total,
        used: samples.len(),
        skipped: skipped.len(),
        skipped_reasons: skipped.iter().take(20).cloned().collect(),
    };
    for reason in skipped.iter().take(5) {
        tracing::warn!("calibration question skipped: {reason}");
    }
    (samples, counts)
}

/// The report lines: one per policy, the configured one first.
pub fn report_lines(saved: &Saved) -> Vec<String> {
    let mut lines = Vec::new();
    for (i, report) in saved.reports.iter().enumerate() {
        let role = if i == 0 { "served" } else { "compared" };
        let fitted = match &report.params {
            Some(params) if params.len() > 1 => {
                let biases: Vec<String> = params[1..].iter().map(|b| format!("{b:+.2}")).collect();
                format!("T = {:.3}, biases [{}]", params[0], biases.join(", "))
            }
            Some(params) => format!("T = {:.3}", params.first().copied().unwrap_or(f64::NAN)),
            None => "no fit".to_string(),
        };
        let verdict = if i == 0 {
            if saved.kept {
                "kept".to_string()
            } else {
                format!(
                    "not kept, answers use T = {:.3} ({})",
                    saved.temperature, saved.source
                )
            }
        } else if report.keep {
            "would be kept".to_string()
        } else {
            "would not be kept".to_string()
        };
        let calibrated = report
            .ece_calibrated
            .map(|c| c.to_string())
            .unwrap_or_else(|| "n/a".into());
        let accuracy = match (report.accuracy_calibrated, report.accuracy_gain) {
            (Some(a), Some(g)) => format!(
                "accuracy {:.3} -> {:.3} (gain {:+.3} [{:+.3}, {:+.3}])",
                report.accuracy_raw, a, g.value, g.low, g.high
            ),
            (Some(a), None) => format!("accuracy {:.3} -> {:.3}", report.accuracy_raw, a),
            _ => format!("accuracy {:.3}", report.accuracy_raw),
        };
        let log_loss = match report.log_loss_calibrated {
            Some(l) => format!("log loss {:.3} -> {l:.3}", report.log_loss_raw),
            None => format!("log loss {:.3}", report.log_loss_raw),
        };
        let mut line = format!(
            "calibration {} ({role}): {fitted}, {verdict}; ECE raw {} -> calibrated {calibrated} (held-out, 5-fold, 95% bootstrap over groups); {accuracy}; {log_loss}; n = {} questions ({} skipped); {:.1} s",
            report.policy, report.ece_raw, saved.questions.used, saved.questions.skipped, saved.seconds
        );
        if !report.rejected_folds.is_empty() {
            line.push_str(&format!(
                "; {} of 5 fold fits rejected (served T = 1.0)",
                report.rejected_folds.len()
            ));
        }
        if let Some(error) = &report.error {
            line.push_str(&format!("; {error}"));
        }
        lines.push(line);
    }
    lines
}

fn log_report(saved: &Saved, how: &str) {
    for line in report_lines(saved) {
        tracing::info!("{line} [{how}]");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::{PluginRegistry, PluginRuntime, RuntimeConfig};
    use std::sync::Arc;

    fn registry() -> Arc<PluginRegistry> {
        let config = RuntimeConfig {
            cache_dir: Some(PathBuf::from(env!("OUT_DIR")).join("test-wasm-cache")),
            ..RuntimeConfig::default()
        };
        PluginRegistry::with_builtins(PluginRuntime::new(config).unwrap()).unwrap()
    }

    /// Samples whose labels follow softmax(scores / t), 3 per group.
    fn synthetic(t: f64, n: usize, seed: u64) -> Vec<Sample> {
        let mut rng = ece::Rng::new(seed);
        let mut uniform = move || (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        (0..n)
            .map(|i| {
                let k = 2 + i % 3;
                let scores: Vec<f64> = (0..k).map(|_| uniform() * 8.0 - 8.0).collect();
                let p = cv::raw_probabilities(&scores.iter().map(|s| s / t).collect::<Vec<_>>());
                let u = uniform();
                let mut acc = 0.0;
                let expected = p.iter().position(|x| {
                    acc += x;
                    u < acc
                });
                Sample {
                    scores,
                    expected: expected.unwrap_or(k - 1),
                    group: format!("g{}", i / 3),
                    content_free: None,
                }
            })
            .collect()
    }

    #[test]
    fn the_fit_recovers_a_known_temperature_and_the_keep_rule_decides() {
        let registry = registry();
        for name in ["temperature", "bias-temperature"] {
            let policy = registry.calibration(name).unwrap();
            // Overconfident scores (truth T = 3): the fit finds T near 3, and the held-out ECE
            // improves clearly, so the parameters are kept.
            let report = cv::evaluate(&policy, &synthetic(3.0, 1500, 1));
            let t = report.temperature().unwrap();
            assert!((t - 3.0).abs() < 0.4, "{name}: fitted T = {t}");
            assert!(report.keep, "{name}: {report:?}");
            assert!(report.ece_calibrated.unwrap().high < report.ece_raw.low);
            // Already calibrated scores (truth T = 1): T near 1, no clear improvement, not kept.
            let report = cv::evaluate(&policy, &synthetic(1.0, 600, 2));
            let t = report.temperature().unwrap();
            assert!((t - 1.0).abs() < 0.25, "{name}: fitted T = {t}");
            assert!(!report.keep, "{name}: {report:?}");
        }
    }

    #[test]
    fn the_saved_result_follows_the_keep_rule() {
        let registry = registry();
        let policy = registry.calibration("temperature").unwrap();
        let key = Key {
            model_sha256: String::new(),
            forward: "cpu f32".into(),
            readout: "direct".into(),
            policy: "temperature".into(),
            policy_sha256: policy.sha256().into(),
            render_version: "direct-options/0.1.0".into(),
            renderer: "direct-options".into(),
            renderer_sha256: String::new(),
            question_types: vec![],
            questions_sha256: String::new(),
        };
        let counts = QuestionCounts {
            origin: "test".into(),
            total: 600,
            used: 600,
            skipped: 0,
            skipped_reasons: vec![],
        };
        let kept = decide(
            key.clone(),
            counts.clone(),
            vec![cv::evaluate(&policy, &synthetic(3.0, 600, 3))],
            &policy,
            0.0,
        );
        assert!(
            kept.kept && kept.source == "calibrated" && (kept.temperature - 3.0).abs() < 0.6,
            "{kept:?}"
        );
        let not_kept = decide(
            key.clone(),
            counts.clone(),
            vec![cv::evaluate(&policy, &synthetic(1.0, 600, 4))],
            &policy,
            0.0,
        );
        assert!(
            !not_kept.kept && not_kept.source == "calibrated" && not_kept.params == vec![1.0],
            "{not_kept:?}"
        );
        // Labels that contradict the scores: the fit is at the edge of its range and rejected.
        let mut wrong = synthetic(1.0, 300, 5);
        for s in &mut wrong {
            s.expected = (0..s.scores.len())
                .min_by(|a, b| s.scores[*a].total_cmp(&s.scores[*b]))
                .unwrap();
        }
        let failed = decide(
            key,
            counts,
            vec![cv::evaluate(&policy, &wrong)],
            &policy,
            0.0,
        );
        assert!(
            !failed.kept && failed.source == "default" && failed.reason.contains("edge"),
            "{failed:?}"
        );
        assert_eq!(report_lines(&failed).len(), 1);
    }
}
