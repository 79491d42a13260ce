//! The held-out evaluation of `decide tune --heldout FILE`: every candidate x calibration
//! policy, fitted on the tuning set's reads and scored on the held-out file's, plus each
//! candidate's label-order flip rate on the held-out file (`--permute K`).
//!
//! Nothing here feeds the selection: [`super::run`] has chosen before these reads are made.
//! The figures are what `bench/reports/quality/` tables: accuracy, log loss and ECE of what
//! a deployment would serve with that setup and policy, on questions it never saw.

use serde::Serialize;

use super::{read_set, Answered};
use crate::calibration::cv::{self, Sample};
use crate::calibration::ece::{self, Interval, Top};
use crate::calibration::questions::QuestionSet;
use crate::pipeline::RequestScope;
use crate::pipeline::{Engine, Setup};
use crate::plugins::{LabelledScores, PluginKind};
use crate::readout::Choice;

/// One candidate x policy on the held-out file.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub setup: String,
    pub policy: String,
    /// Parameters fitted on the tuning set (`default-params(1)` when the fit was refused).
    pub params: Vec<f64>,
    /// Why the fit was refused, when it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fit_refused: Option<String>,
    pub answered: usize,
    pub accuracy: f64,
    pub log_loss: f64,
    pub ece: Interval,
    /// Accuracy by the `difficulty` field of the questions.
    pub by_difficulty: std::collections::BTreeMap<String, f64>,
    /// Per answered question: its index, whether the top option was right, its group.
    #[serde(skip)]
    outcomes: Vec<(usize, bool, String)>,
}

/// A candidate's flip rate under `k` label orders on the held-out file.
#[derive(Debug, Clone, Serialize)]
pub struct Flips {
    pub setup: String,
    pub k: usize,
    pub answered: usize,
    /// Share of questions whose top answer changes under some order.
    pub flip_rate: f64,
}

/// The whole held-out evaluation.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub origin: String,
    pub questions: usize,
    pub rows: Vec<Row>,
    pub flips: Vec<Flips>,
    /// The setup tuning chose, with the policy served with it.
    pub chosen: String,
    pub chosen_policy: String,
    /// The reference: the default setup with `temperature`.
    pub reference: String,
    /// Accuracy of the chosen setup + policy minus the reference's, on the held-out questions
    /// both answered, with its 95% paired bootstrap interval over groups.
    pub gain: Option<Interval>,
    pub compared: usize,
}

/// Evaluates every measured candidate on `heldout`: its reads there, every policy fitted on
/// its tuning reads, the flip rate under `permute` orders (0: not measured).
pub fn evaluate(
    engine: &Engine,
    measured: &[(Setup, Vec<Answered>)],
    heldout: &QuestionSet,
    chosen: &Setup,
    chosen_policy: &str,
    permute: usize,
    progress: &crate::progress::Reporter,
) -> Report {
    let policies: Vec<_> = engine
        .plugins()
        .list()
        .into_iter()
        .filter(|p| p.kind == PluginKind::Calibration)
        .filter_map(|p| engine.plugins().calibration(&p.name))
        .collect();
    let neutral = policies.iter().find_map(|p| p.neutral_states());
    let mut rows = Vec::new();
    let mut flips = Vec::new();
    let task = progress.start("held-out evaluation", "setups", measured.len() as u64);
    for (i, (setup, tuning)) in measured.iter().enumerate() {
        task.set_done(i as u64);
        task.set_detail(setup.label());
        let (answered, _) = read_set(
            engine,
            &RequestScope::default(),
            setup,
            heldout,
            neutral,
            &mut |_| {},
        );
        for policy in &policies {
            let train: Result<Vec<LabelledScores>, String> = tuning
                .iter()
                .map(|a| {
                    Ok(LabelledScores {
                        scores: cv::policy_scores(policy, &a.sample)?,
                        expected: a.sample.expected as u32,
                    })
                })
                .collect();
            let fitted = train.and_then(|train| policy.fit(&train).map_err(|e| e.to_string()));
            let (params, fit_refused) = match fitted {
                Ok(params) => (params, None),
                Err(error) => (
                    policy.default_params(1.0).unwrap_or_else(|_| vec![1.0]),
                    Some(error),
                ),
            };
            let probabilities: Vec<Vec<f64>> = answered
                .iter()
                .map(|a| {
                    cv::policy_scores(policy, &a.sample)
                        .and_then(|scores| {
                            policy.apply(&scores, &params).map_err(|e| e.to_string())
                        })
                        .unwrap_or_else(|_| cv::raw_probabilities(&a.sample.scores))
                })
                .collect();
            rows.push(row(
                setup,
                policy.name(),
                params,
                fit_refused,
                &answered,
                &probabilities,
                heldout,
            ));
        }
        if permute > 1 && setup.readout == Choice::Auto {
            let mut permuted = setup.clone();
            permuted.readout = Choice::Permutation;
            let (shifted, _) = read_set(
                engine,
                &RequestScope::default(),
                &permuted,
                heldout,
                None,
                &mut |_| {},
            );
            let changed = shifted
                .iter()
                .filter(|a| {
                    a.shift_top
                        .as_ref()
                        .is_some_and(|t| t.iter().any(|&x| x != t[0]))
                })
                .count();
            flips.push(Flips {
                setup: setup.label(),
                k: permute,
                answered: shifted.len(),
                flip_rate: changed as f64 / shifted.len().max(1) as f64,
            });
        }
    }
    let reference = format!(
        "{}+temperature",
        measured.first().map(|(s, _)| s.label()).unwrap_or_default()
    );
    let pick = |setup: &str, policy: &str| {
        rows.iter()
            .position(|r| r.setup == setup && r.policy == policy)
    };
    let (gain, compared) = match (
        pick(&chosen.label(), chosen_policy),
        measured
            .first()
            .and_then(|(s, _)| pick(&s.label(), "temperature")),
    ) {
        (Some(a), Some(b)) => paired(&rows[a], &rows[b]),
        _ => (None, 0),
    };
    Report {
        origin: heldout.origin.clone(),
        questions: heldout.questions.len(),
        rows,
        flips,
        chosen: chosen.label(),
        chosen_policy: chosen_policy.to_string(),
        reference,
        gain,
        compared,
    }
}

fn row(
    setup: &Setup,
    policy: &str,
    params: Vec<f64>,
    fit_refused: Option<String>,
    answered: &[Answered],
    probabilities: &[Vec<f64>],
    heldout: &QuestionSet,
) -> Row {
    let samples: Vec<Sample> = answered.iter().map(|a| a.sample.clone()).collect();
    let tops: Vec<Top> = probabilities
        .iter()
        .zip(&samples)
        .map(|(p, s)| Top::of(p, s.expected))
        .collect();
    let mut by: std::collections::BTreeMap<String, (usize, usize)> = Default::default();
    for (a, top) in answered.iter().zip(&tops) {
        let tier = heldout.questions[a.question]
            .difficulty
            .clone()
            .unwrap_or_else(|| "unlabelled".into());
        let entry = by.entry(tier).or_default();
        entry.0 += usize::from(top.correct);
        entry.1 += 1;
    }
    Row {
        setup: setup.label(),
        policy: policy.to_string(),
        params,
        fit_refused,
        answered: answered.len(),
        accuracy: tops.iter().filter(|t| t.correct).count() as f64 / tops.len().max(1) as f64,
        log_loss: cv::log_loss(probabilities, &samples),
        ece: ece::with_intervals(&[&tops], &cv::group_indices(&samples))[0],
        by_difficulty: by
            .into_iter()
            .map(|(k, (c, n))| (k, c as f64 / n.max(1) as f64))
            .collect(),
        outcomes: answered
            .iter()
            .zip(&tops)
            .map(|(a, t)| (a.question, t.correct, a.sample.group.clone()))
            .collect(),
    }
}

/// The paired accuracy gain of row `a` over row `b` on the questions both answered.
fn paired(a: &Row, b: &Row) -> (Option<Interval>, usize) {
    let of_b: std::collections::HashMap<usize, bool> = b
        .outcomes
        .iter()
        .map(|(q, right, _)| (*q, *right))
        .collect();
    let both: Vec<&(usize, bool, String)> = a
        .outcomes
        .iter()
        .filter(|(q, _, _)| of_b.contains_key(q))
        .collect();
    if both.len() < super::MIN_ANSWERED {
        return (None, both.len());
    }
    let f = |x: bool| f64::from(u8::from(x));
    let xa: Vec<f64> = both.iter().map(|(_, right, _)| f(*right)).collect();
    let xb: Vec<f64> = both.iter().map(|(q, _, _)| f(of_b[q])).collect();
    let groups: Vec<Sample> = both
        .iter()
        .map(|(_, _, group)| Sample {
            scores: vec![],
            expected: 0,
            group: group.clone(),
            content_free: None,
        })
        .collect();
    (
        Some(ece::paired_gain(&xa, &xb, &cv::group_indices(&groups))),
        both.len(),
    )
}

/// The table of a report, as markdown.
pub fn markdown(report: &Report) -> String {
    let mut out = String::from(
        "| setup | policy | accuracy | easy | standard | hard | log loss | ECE [95%] | flip rate |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for r in &report.rows {
        let tier = |name: &str| {
            r.by_difficulty
                .get(name)
                .map(|a| format!("{a:.3}"))
                .unwrap_or_else(|| "-".into())
        };
        let flip = report
            .flips
            .iter()
            .find(|f| f.setup == r.setup)
            .map(|f| format!("{:.3}", f.flip_rate))
            .unwrap_or_else(|| "-".into());
        let mark = if r.setup == report.chosen && r.policy == report.chosen_policy {
            " **chosen**"
        } else {
            ""
        };
        out.push_str(&format!(
            "| {}{mark} | {} | {:.3} | {} | {} | {} | {:.3} | {} | {flip} |\n",
            r.setup,
            r.policy,
            r.accuracy,
            tier("easy"),
            tier("standard"),
            tier("hard"),
            r.log_loss,
            r.ece
        ));
    }
    if let Some(g) = &report.gain {
        out.push_str(&format!(
            "\nChosen ({} + {}) vs {}: accuracy gain {:+.3} [{:+.3}, {:+.3}] (95% paired bootstrap over groups, {} held-out questions).\n",
            report.chosen, report.chosen_policy, report.reference, g.value, g.low, g.high, report.compared
        ));
    }
    out
}
