//! Tuning: measure which prompt setup (renderer plugin x label scheme x readout) answers a
//! labelled question set best on the loaded model, and keep it only when its gain over the
//! default is clear.
//!
//! The read is exact, so what decides accuracy is what the model is asked. Flow ([`startup`],
//! also `decide tune`):
//! 1. the candidates: every renderer loaded (or `--tune-renderers`) x every label scheme
//!    ([`Scheme::ALL`]) read with `auto`, then the best of those read with `permutation` too;
//! 2. every candidate reads every question through the server's own pipeline
//!    ([`Engine::read_raw_with`]), questions about one input in one request;
//! 3. per candidate: accuracy, and the held-out log loss and ECE of the `temperature` policy
//!    fitted by the same group-disjoint 5-fold cross-validation calibration uses
//!    ([`crate::calibration::cv`]); per candidate its accuracy gain over the default
//!    (`direct-options`, letters, `auto`) on the questions both answered, with a 95% paired
//!    bootstrap interval over groups ([`ece::paired_gain`]);
//! 4. the rule: the most accurate candidate is kept only when its gain's interval lies above
//!    zero; otherwise the default stays. The result is saved ([`store`]) and reused while the
//!    model, the candidates' rendering, the question types and the question file are unchanged.
//!
//! With a held-out file (`decide tune --heldout FILE`), every candidate x policy is also
//! fitted on the tuning set and scored on the held-out one ([`heldout`]), which is what
//! `bench/reports/quality/` reports; nothing of the held-out file reaches the selection.

pub mod heldout;
pub mod latency;
pub mod store;

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::calibration;
use crate::calibration::budget::{self, Reading};
use crate::calibration::cv::{self, Sample};
use crate::calibration::ece::{self, Interval, Top};
use crate::calibration::questions::{self, QuestionSet};
use crate::pipeline::{Engine, Question, RequestScope, Resolved, Setup, SetupSource};
use crate::plugins::PluginKind;
use crate::progress::{Reporter, Task};
use crate::readout::{self, Choice, Scheme};
use store::Saved;

/// Value of `--tune-questions` that skips tuning.
pub const SKIP: &str = crate::calibration::SKIP;

/// The built-in tuning set (`calibration/tune.jsonl`, four fifths of decide's own labelled
/// set; the other fifth, `calibration/heldout.jsonl`, is never used to select or fit).
pub const BUILTIN_SET: &str = include_str!("../../../calibration/tune.jsonl");

/// Fewest answered questions a candidate is compared on.
pub const MIN_ANSWERED: usize = 50;

/// Inputs read at once on a GPU (on CPU one: candle already uses every core).
const GPU_WORKERS: usize = 16;

/// Bump when the selection rule changes, so saved results made by another rule are not reused.
pub const RULE: &str = "best-accuracy-kept-if-paired-gain-interval-above-zero/1";

/// Where the questions come from (`--tune-questions`; [`SKIP`] skips tuning).
pub use crate::calibration::Questions;

/// The built-in tuning set, parsed.
pub fn builtin_set() -> QuestionSet {
    QuestionSet::parse("built-in set calibration/tune.jsonl", BUILTIN_SET)
        .expect("the built-in tuning set parses")
}

/// What tuning needs to know.
pub struct Settings<'a> {
    pub questions: Questions,
    /// Where results are saved (`--calibration-dir`).
    pub dir: PathBuf,
    pub model_file: &'a Path,
    /// Renderers to compare; empty: every renderer loaded.
    pub renderers: Vec<String>,
    /// Reuse a saved result when the key matches (`decide tune` always measures).
    pub reuse: bool,
    /// Also read every question over these neutral states (content-free scores, for a
    /// held-out evaluation of content-free policies); none at startup.
    pub neutral: Option<Vec<String>>,
    /// How the reads are made: their scope (at startup: in the background, stopped with the
    /// server) and time budget ([`calibration::budget`]).
    pub reading: Reading,
}

/// One answered question of one candidate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Answered {
    /// Index of the question in its file.
    pub question: usize,
    pub sample: Sample,
    pub option_mass: f32,
    /// `permutation` reads: the top option under each shift.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shift_top: Option<Vec<usize>>,
}

/// What one candidate measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CandidateReport {
    /// `renderer+labels+readout`.
    pub setup: String,
    pub answered: usize,
    pub skipped: usize,
    /// The first reason a question was skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_skipped: Option<String>,
    pub accuracy: f64,
    /// Held-out (5-fold, `temperature` fitted on the other folds) mean negative log-likelihood.
    pub log_loss: Option<f64>,
    /// Held-out ECE of the same, with its 95% bootstrap interval over groups.
    pub ece: Option<Interval>,
    pub mean_option_mass: f64,
    /// Accuracy minus the default's on the questions both answered, with its interval.
    pub gain: Option<Interval>,
    /// On how many questions the gain was measured.
    pub compared: usize,
    pub seconds: f64,
}

/// Runs startup tuning and returns the setup answers get; never fails (a problem keeps the
/// default setup, with a warning naming the cause).
pub fn startup(
    engine: &Engine,
    settings: &Settings,
    progress: &Reporter,
) -> (Setup, Option<Saved>) {
    if matches!(settings.questions, Questions::Skip) {
        tracing::info!(
            "startup tuning skipped (--tune-questions {SKIP}): direct-options, letters, auto"
        );
        return (Setup::default_setup(), None);
    }
    match run(engine, settings, progress) {
        Ok(saved) => (saved.setup(), Some(saved)),
        Err(cause) => {
            tracing::warn!(
                "startup tuning not applied: {cause}; answers use direct-options, letters, auto"
            );
            (Setup::default_setup(), None)
        }
    }
}

/// The candidates read with `auto`: every renderer x every label scheme, the default first.
pub fn candidates(renderers: &[String]) -> Vec<Setup> {
    let mut names: Vec<&String> = renderers.iter().collect();
    names.sort_by_key(|name| {
        (
            name.as_str() != crate::pipeline::setup::DEFAULT_RENDERER,
            name.as_str(),
        )
    });
    names
        .into_iter()
        .flat_map(|renderer| {
            Scheme::ALL.into_iter().map(move |labels| Setup {
                renderer: renderer.clone(),
                labels,
                readout: Choice::Auto,
                source: SetupSource::Tuned,
            })
        })
        .collect()
}

/// Measures (or reuses) and saves; errors name the cause.
pub fn run(engine: &Engine, settings: &Settings, progress: &Reporter) -> Result<Saved, String> {
    run_measured(engine, settings, progress).map(|(saved, _)| saved)
}

/// Every candidate's setup and reads (empty when a saved result was reused).
pub type Measured = Vec<(Setup, Vec<Answered>)>;

/// The question set, the candidates and the key a run of `settings` is saved under.
fn keyed(
    engine: &Engine,
    settings: &Settings,
) -> Result<(QuestionSet, Vec<Setup>, store::Key), String> {
    let set = settings.questions.load_with(builtin_set)?;
    let renderers = renderer_names(engine, &settings.renderers)?;
    let setups = candidates(&renderers);
    let key = store::key(engine, settings.model_file, &set, &setups)?;
    Ok((set, setups, key))
}

/// The saved result a run of `settings` would reuse, without reading anything (none: it
/// would measure). What startup applies before the server answers.
pub fn saved(engine: &Engine, settings: &Settings) -> Result<Option<Saved>, String> {
    if matches!(settings.questions, Questions::Skip) {
        return Ok(None);
    }
    let (_, _, key) = keyed(engine, settings)?;
    Ok(store::load(&settings.dir, &key)?.map(|(saved, path)| {
        log_lines(&saved, &format!("saved result {} reused", path.display()));
        saved
    }))
}

/// [`run`], also returning what each candidate read (for [`heldout::evaluate`]).
pub fn run_measured(
    engine: &Engine,
    settings: &Settings,
    progress: &Reporter,
) -> Result<(Saved, Measured), String> {
    let started = Instant::now();
    let (set, mut setups, key) = keyed(engine, settings)?;
    let reading = &settings.reading;
    if settings.reuse {
        match store::load(&settings.dir, &key) {
            Ok(Some((saved, path))) => {
                log_lines(&saved, &format!("saved result {} reused", path.display()));
                return Ok((saved, Vec::new()));
            }
            Ok(None) => {}
            Err(cause) => tracing::warn!("{cause}; tuning again"),
        }
    }
    // Renderer selection: every candidate reads every question (the permuted one four times,
    // and the chosen one once more for a content-free policy).
    let reads_per_question = setups.len() + 5;
    let reads_of = |set: &QuestionSet| ((setups.len() + 4) * set.questions.len()) as u64;
    let task = progress.start("tuning", "reads", reads_of(&set));
    let set = match reading.budget {
        Some(budget) => {
            task.set_detail(format!(
                "timing a probe against the budget ({})",
                budget::SETTING
            ));
            let default = &setups[0];
            budget::within(
                reading,
                set,
                budget,
                reads_per_question,
                "tuning",
                |probe| {
                    read_set(engine, &reading.scope, default, probe, None, &mut |_| {});
                },
            )?
        }
        None => set,
    };
    task.set_total(reads_of(&set));
    let mut measured: Vec<(CandidateReport, Vec<Answered>)> = Vec::new();
    for setup in &setups {
        task.set_detail(setup.label());
        let (report, answered) = measure(
            engine,
            &reading.scope,
            setup,
            &set,
            settings.neutral.as_deref(),
            &mut |n| task.advance(n as u64),
        );
        reading.check()?;
        measured.push((report, answered));
    }
    // The most accurate single-read candidate, read under label shifts as well.
    if let Some(best) = best_index(&measured) {
        let mut permuted = setups[best].clone();
        permuted.readout = Choice::Permutation;
        // Words name options, not positions: a permutation reads those questions with letters.
        if permuted.labels == Scheme::Words {
            permuted.labels = Scheme::Letters;
        }
        task.set_detail(permuted.label());
        let (report, answered) = measure(
            engine,
            &reading.scope,
            &permuted,
            &set,
            settings.neutral.as_deref(),
            &mut |n| task.advance(n as u64 * 4),
        );
        reading.check()?;
        setups.push(permuted);
        measured.push((report, answered));
    }
    compare_with_default(&mut measured);
    let reads: Measured = setups
        .into_iter()
        .zip(measured.iter().map(|(_, answered)| answered.clone()))
        .collect();
    let mut saved = store::decide(key, &set, measured, started.elapsed().as_secs_f64(), engine);
    saved.policy = choose_policy(engine, reading, &saved.setup(), &reads, &set, &task);
    reading.check()?;
    task.finish();
    saved.seconds = started.elapsed().as_secs_f64();
    match store::save(&settings.dir, &saved) {
        Ok(path) => log_lines(&saved, &format!("saved to {}", path.display())),
        Err(cause) => {
            log_lines(&saved, "not saved");
            tracing::warn!("tuning result not saved: {cause}");
        }
    }
    Ok((saved, reads))
}

/// The correction for `chosen`: startup calibration's `auto` rule on its tuning reads (read
/// once more over the neutral states when a content-free policy is loaded and they lack them).
fn choose_policy(
    engine: &Engine,
    reading: &Reading,
    chosen: &Setup,
    reads: &Measured,
    set: &QuestionSet,
    task: &Task,
) -> Option<store::PolicyChoice> {
    let policies = calibration::compared_policies(engine, calibration::AUTO_FALLBACK);
    let neutral = policies
        .iter()
        .find_map(|p| p.neutral_states().map(<[String]>::to_vec));
    let (_, answered) = reads
        .iter()
        .find(|(setup, _)| setup.label() == chosen.label())?;
    let mut samples: Vec<Sample> = answered.iter().map(|a| a.sample.clone()).collect();
    if neutral.is_some() && samples.iter().any(|s| s.content_free.is_none()) {
        task.set_detail(format!("content-free reads of {}", chosen.label()));
        let (answered, _) = read_set(
            engine,
            &reading.scope,
            chosen,
            set,
            neutral.as_deref(),
            &mut |_| {},
        );
        samples = answered.into_iter().map(|a| a.sample).collect();
    }
    if samples.len() < MIN_ANSWERED {
        return None;
    }
    let reports = calibration::compare_policies(&policies, &samples, true, &|_| {});
    let first = reports.first()?;
    let served = policies.iter().find(|p| p.name() == first.policy)?;
    let verdict = calibration::verdict(&reports[0], served);
    Some(store::PolicyChoice {
        policy: served.name().to_string(),
        probe: store::probe(served, &verdict.params),
        params: verdict.params,
        temperature: verdict.temperature,
        kept: verdict.kept,
        reason: verdict.reason,
        reports,
    })
}

/// The renderers to compare: the named ones (each must be loaded) or every loaded renderer.
fn renderer_names(engine: &Engine, named: &[String]) -> Result<Vec<String>, String> {
    let plugins = engine.plugins();
    if !named.is_empty() {
        for name in named {
            if plugins.renderer(name).is_none() {
                return Err(format!(
                    "renderer plugin `{name}` is not loaded (setting --tune-renderers)"
                ));
            }
        }
        return Ok(named.to_vec());
    }
    Ok(plugins
        .list()
        .into_iter()
        .filter(|p| p.kind == PluginKind::Renderer)
        .map(|p| p.name)
        .collect())
}

/// Index of the most accurate measured candidate (enough answers; ties: lower log loss).
fn best_index(measured: &[(CandidateReport, Vec<Answered>)]) -> Option<usize> {
    (0..measured.len())
        .filter(|&i| measured[i].0.answered >= MIN_ANSWERED)
        .max_by(|&a, &b| {
            let (ra, rb) = (&measured[a].0, &measured[b].0);
            ra.accuracy.total_cmp(&rb.accuracy).then_with(|| {
                rb.log_loss
                    .unwrap_or(f64::INFINITY)
                    .total_cmp(&ra.log_loss.unwrap_or(f64::INFINITY))
            })
        })
}

/// Reads every question of `set` with `setup` and scores the answers.
pub fn measure(
    engine: &Engine,
    scope: &RequestScope,
    setup: &Setup,
    set: &QuestionSet,
    neutral: Option<&[String]>,
    progress: &mut dyn FnMut(usize),
) -> (CandidateReport, Vec<Answered>) {
    let started = Instant::now();
    let (answered, skipped) = read_set(engine, scope, setup, set, neutral, progress);
    let temperature = engine.plugins().calibration(calibration::AUTO_FALLBACK);
    let seconds = started.elapsed().as_secs_f64();
    let report = score(setup, &answered, &skipped, temperature.as_deref(), seconds);
    (report, answered)
}

/// Reads every question with `setup`, one request per input text; returns the answered ones
/// (in file order) and why the others were skipped.
pub fn read_set(
    engine: &Engine,
    scope: &RequestScope,
    setup: &Setup,
    set: &QuestionSet,
    neutral: Option<&[String]>,
    progress: &mut dyn FnMut(usize),
) -> (Vec<Answered>, Vec<String>) {
    let resolved = Resolved {
        renderer: setup.renderer.clone(),
        options: readout::Options {
            choice: setup.readout,
            labels: Some(setup.labels),
            ..readout::Options::default()
        },
        source: SetupSource::Tuned,
    };
    let mut by_state: Vec<(&str, Vec<usize>)> = Vec::new();
    let mut position: std::collections::HashMap<&str, usize> = Default::default();
    for (i, q) in set.questions.iter().enumerate() {
        match position.get(q.state.as_str()) {
            Some(&at) => by_state[at].1.push(i),
            None => {
                position.insert(&q.state, by_state.len());
                by_state.push((&q.state, vec![i]));
            }
        }
    }
    // Several inputs in flight at once, so the model worker batches them as it batches
    // concurrent requests: on a GPU one input at a time leaves it mostly idle.
    let workers = if engine.model().device().is_cpu() {
        1
    } else {
        GPU_WORKERS
    };
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results = std::sync::Mutex::new(Vec::with_capacity(by_state.len()));
    let (read, finished) = (
        std::sync::atomic::AtomicUsize::new(0),
        std::sync::atomic::AtomicUsize::new(0),
    );
    std::thread::scope(|threads| {
        for _ in 0..workers.min(by_state.len()).max(1) {
            threads.spawn(|| loop {
                let at = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some((state, indices)) = by_state.get(at) else {
                    break;
                };
                let batch: Vec<Question> = indices
                    .iter()
                    .map(|&i| Question {
                        loc: crate::loc!["tune", set.questions[i].id.as_str()],
                        plugin: set.questions[i].plugin.clone(),
                        json: set.questions[i].json.clone(),
                    })
                    .collect();
                let reads = engine.read_raw_with(scope, &resolved, state, &batch, neutral);
                results
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((indices.clone(), reads));
                read.fetch_add(indices.len(), std::sync::atomic::Ordering::Relaxed);
                finished.fetch_add(1, std::sync::atomic::Ordering::Release);
            });
        }
        // Progress is reported from this thread (the callback need not be thread-safe).
        let mut reported = 0;
        loop {
            let done = finished.load(std::sync::atomic::Ordering::Acquire) == by_state.len();
            let now = read.load(std::sync::atomic::Ordering::Relaxed);
            if now > reported {
                progress(now - reported);
                reported = now;
            }
            if done {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    });
    let mut answered = Vec::with_capacity(set.questions.len());
    let mut skipped = Vec::new();
    for (indices, reads) in results.into_inner().unwrap_or_else(|p| p.into_inner()) {
        for (&i, read) in indices.iter().zip(reads) {
            let q = &set.questions[i];
            match read {
                Err(reason) => skipped.push(format!("{}: {reason}", q.id)),
                Ok(read) if read.scores.iter().any(|s| !s.is_finite()) => {
                    skipped.push(format!("{}: a raw option score is not finite", q.id))
                }
                Ok(read) => match questions::expected_index(&read.options, &q.expected) {
                    Some(expected) => answered.push(Answered {
                        question: i,
                        sample: Sample {
                            scores: read.scores,
                            expected,
                            group: q.group.clone(),
                            content_free: read.content_free,
                        },
                        option_mass: read.option_mass,
                        shift_top: read.shift_top,
                    }),
                    None => skipped.push(format!(
                        "{}: expected {} is not one of the question's options",
                        q.id, q.expected
                    )),
                },
            }
        }
    }
    answered.sort_by_key(|a| a.question);
    skipped.sort();
    (answered, skipped)
}

/// Accuracy, and held-out log loss and ECE under the `temperature` policy plugin fitted by
/// 5-fold cross-validation as startup calibration fits it (a fold whose fit it refuses, at the
/// edge of its range, is served T = 1); none when that plugin is not loaded.
fn score(
    setup: &Setup,
    answered: &[Answered],
    skipped: &[String],
    temperature: Option<&crate::plugins::Calibration>,
    seconds: f64,
) -> CandidateReport {
    let samples: Vec<Sample> = answered.iter().map(|a| a.sample.clone()).collect();
    let correct = |s: &Sample| Top::of(&s.scores, s.expected).correct;
    let accuracy =
        samples.iter().filter(|s| correct(s)).count() as f64 / samples.len().max(1) as f64;
    let held_out = temperature.and_then(|t| cv::held_out_probabilities(t, &samples).ok());
    let (log_loss, ece) = match held_out.map(|(probabilities, _)| probabilities) {
        Some(probabilities) => {
            let tops: Vec<Top> = probabilities
                .iter()
                .zip(&samples)
                .map(|(p, s)| Top::of(p, s.expected))
                .collect();
            let groups = cv::group_indices(&samples);
            (
                Some(cv::log_loss(&probabilities, &samples)),
                Some(ece::with_intervals(&[&tops], &groups)[0]),
            )
        }
        None => (None, None),
    };
    CandidateReport {
        setup: setup.label(),
        answered: answered.len(),
        skipped: skipped.len(),
        first_skipped: skipped.first().cloned(),
        accuracy,
        log_loss,
        ece,
        mean_option_mass: answered
            .iter()
            .map(|a| f64::from(a.option_mass))
            .sum::<f64>()
            / answered.len().max(1) as f64,
        gain: None,
        compared: 0,
        seconds,
    }
}

/// Each candidate's accuracy gain over the first (the default) on the questions both answered.
fn compare_with_default(measured: &mut [(CandidateReport, Vec<Answered>)]) {
    let Some(((_, baseline), rest)) = measured.split_first_mut() else {
        return;
    };
    let baseline: std::collections::HashMap<usize, bool> = baseline
        .iter()
        .map(|a| {
            (
                a.question,
                Top::of(&a.sample.scores, a.sample.expected).correct,
            )
        })
        .collect();
    for (report, answered) in rest.iter_mut() {
        let both: Vec<&Answered> = answered
            .iter()
            .filter(|a| baseline.contains_key(&a.question))
            .collect();
        let as_f64 = |b: bool| f64::from(u8::from(b));
        let candidate: Vec<f64> = both
            .iter()
            .map(|a| as_f64(Top::of(&a.sample.scores, a.sample.expected).correct))
            .collect();
        let base: Vec<f64> = both.iter().map(|a| as_f64(baseline[&a.question])).collect();
        let samples: Vec<Sample> = both.iter().map(|a| a.sample.clone()).collect();
        report.compared = both.len();
        if both.len() >= MIN_ANSWERED {
            report.gain = Some(ece::paired_gain(
                &candidate,
                &base,
                &cv::group_indices(&samples),
            ));
        }
    }
}

/// The report lines: one per candidate, then the verdict.
pub fn report_lines(saved: &Saved) -> Vec<String> {
    let mut lines: Vec<String> = saved
        .candidates
        .iter()
        .map(|c| {
            let gain = match &c.gain {
                Some(g) => format!("gain {:+.3} [{:+.3}, {:+.3}] over {} on {} questions", g.value, g.low, g.high, saved.baseline, c.compared),
                None if c.setup == saved.baseline => "the default".to_string(),
                None => "gain not measured".to_string(),
            };
            format!(
                "tune {}: accuracy {:.3}, log loss {}, ECE {} (held-out, 5-fold, temperature), option mass {:.3}; {gain}; n = {} ({} skipped{}); {:.1} s",
                c.setup,
                c.accuracy,
                c.log_loss.map(|l| format!("{l:.3}")).unwrap_or_else(|| "n/a".into()),
                c.ece.map(|e| e.to_string()).unwrap_or_else(|| "n/a".into()),
                c.mean_option_mass,
                c.answered,
                c.skipped,
                c.first_skipped.as_deref().map(|r| format!(", first: {r}")).unwrap_or_default(),
                c.seconds,
            )
        })
        .collect();
    if let Some(choice) = &saved.policy {
        for report in &choice.reports {
            lines.push(format!(
                "tune policy {} on {}: {}; ECE raw {} -> {}; accuracy {:.3} -> {}; log loss {:.3} -> {}{}",
                report.policy,
                saved.chosen,
                if report.keep { "kept" } else { "not kept" },
                report.ece_raw,
                report.ece_calibrated.map(|e| e.to_string()).unwrap_or_else(|| "n/a".into()),
                report.accuracy_raw,
                report.accuracy_calibrated.map(|a| format!("{a:.3}")).unwrap_or_else(|| "n/a".into()),
                report.log_loss_raw,
                report.log_loss_calibrated.map(|l| format!("{l:.3}")).unwrap_or_else(|| "n/a".into()),
                report.error.as_deref().map(|e| format!("; {e}")).unwrap_or_default(),
            ));
        }
        lines.push(format!(
            "tune correction: {} with params {:?} ({})",
            choice.policy, choice.params, choice.reason
        ));
    }
    lines.push(format!(
        "tune chose {} ({}): {}; {} questions from {}, {:.1} s",
        saved.chosen, saved.source, saved.reason, saved.questions, saved.origin, saved.seconds
    ));
    lines
}

fn log_lines(saved: &Saved, how: &str) {
    for line in report_lines(saved) {
        tracing::info!("{line} [{how}]");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_put_the_default_first_and_cover_every_scheme() {
        let list = candidates(&["plain-letter".into(), "direct-options".into()]);
        assert_eq!(list.len(), 6);
        assert_eq!(list[0].label(), "direct-options+letters+auto");
        assert_eq!(list[3].label(), "plain-letter+letters+auto");
        assert!(list
            .iter()
            .all(|s| s.readout == Choice::Auto && s.source == SetupSource::Tuned));
    }
}
