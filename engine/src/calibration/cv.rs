//! Cross-validation of a calibration policy: what is the same for every policy.
//!
//! Groups are dealt into 5 folds (every group in exactly one fold, so questions about one text
//! never sit on both sides of a split); for each fold the policy is fitted on the other four and
//! applied to the held-out one. ECE of the raw scores (softmax at T = 1) and of the held-out
//! calibrated probabilities are compared with bootstrap intervals over groups, and the keep
//! rule decides: keep the parameters fitted on all questions only when the calibrated
//! interval's top is below the raw interval's bottom, or when the held-out accuracy gain (a
//! label-bias policy reorders answers) has a paired bootstrap interval above zero and the
//! held-out log loss is no worse than the raw one. A fold whose fit the policy rejects (an
//! edge fit) gets what the server would then serve, `default-params(1.0)`, so the held-out ECE
//! measures the whole procedure; the rejections are listed in the report.

use serde::{Deserialize, Serialize};

use super::ece::{self, Interval, ReliabilityBin, Rng, Top, SEED};
use crate::plugins::{Calibration, LabelledScores, PluginCallError};

/// Folds of the cross-validation.
pub const FOLDS: usize = 5;

/// One answered calibration question.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Raw option scores (log-probabilities at the label tokens).
    pub scores: Vec<f64>,
    /// Index of the expected option.
    pub expected: usize,
    /// Cross-validation group.
    pub group: String,
    /// The content-free scores of the same question (log of the mean option distribution over
    /// neutral states), when they were read: what a content-free policy (`contextual`) takes
    /// after `scores` (see `wit/plugin.wit`, interface `content-free`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_free: Option<Vec<f64>>,
}

/// The scores `policy` is given for `sample`: the raw scores, followed by the content-free
/// ones for a content-free policy.
pub fn policy_scores(policy: &Calibration, sample: &Sample) -> Result<Vec<f64>, String> {
    match (policy.neutral_states(), &sample.content_free) {
        (None, _) => Ok(sample.scores.clone()),
        (Some(_), Some(free)) => Ok([sample.scores.as_slice(), free.as_slice()].concat()),
        (Some(_), None) => Err(format!(
            "`{}` divides out content-free reads, and this question was read without them",
            policy.name()
        )),
    }
}

/// The fold of each sample: groups shuffled with a fixed seed and dealt round-robin into
/// `min(FOLDS, groups)` folds. Fewer than 2 groups cannot be cross-validated.
pub fn assign_folds(samples: &[Sample]) -> Result<(Vec<usize>, usize), String> {
    let mut groups: Vec<&str> = samples.iter().map(|s| s.group.as_str()).collect();
    groups.sort_unstable();
    groups.dedup();
    if groups.len() < 2 {
        return Err(format!(
            "{} group(s): cross-validation needs at least 2",
            groups.len()
        ));
    }
    let mut rng = Rng::new(SEED);
    for i in (1..groups.len()).rev() {
        groups.swap(i, rng.below(i + 1));
    }
    let folds = FOLDS.min(groups.len());
    let fold_of: std::collections::HashMap<&str, usize> = groups
        .iter()
        .enumerate()
        .map(|(i, g)| (*g, i % folds))
        .collect();
    Ok((
        samples.iter().map(|s| fold_of[s.group.as_str()]).collect(),
        folds,
    ))
}

/// Answer indices per group, for the bootstrap.
pub fn group_indices(samples: &[Sample]) -> Vec<Vec<usize>> {
    let mut by_group: std::collections::BTreeMap<&str, Vec<usize>> = Default::default();
    for (i, s) in samples.iter().enumerate() {
        by_group.entry(s.group.as_str()).or_default().push(i);
    }
    by_group.into_values().collect()
}

/// Softmax of raw scores at T = 1, renormalised over the options.
pub fn raw_probabilities(scores: &[f64]) -> Vec<f64> {
    let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
    let sum: f64 = e.iter().sum();
    e.into_iter().map(|x| x / sum).collect()
}

/// What cross-validation says about one policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyReport {
    pub policy: String,
    pub policy_sha256: String,
    /// Parameters fitted on all questions; none when the fit failed or was rejected.
    pub params: Option<Vec<f64>>,
    /// ECE of the raw answers.
    pub ece_raw: Interval,
    /// ECE of the held-out calibrated answers; none when a fold's fit failed.
    pub ece_calibrated: Option<Interval>,
    /// Accuracy of the top option (raw; calibration may reorder for label-bias policies).
    pub accuracy_raw: f64,
    pub accuracy_calibrated: Option<f64>,
    /// Held-out calibrated accuracy minus raw, with its 95% paired bootstrap interval.
    #[serde(default)]
    pub accuracy_gain: Option<Interval>,
    /// Mean negative log-likelihood of the raw and of the held-out calibrated answers.
    #[serde(default)]
    pub log_loss_raw: f64,
    #[serde(default)]
    pub log_loss_calibrated: Option<f64>,
    /// The keep rule's verdict: calibrated interval's top below the raw interval's bottom.
    pub keep: bool,
    /// The reliability diagram of the raw answers and of the held-out calibrated ones (the
    /// bins the two ECEs are computed over), so a reader sees where the correction moved
    /// confidence, not only by how much the ECE changed.
    #[serde(default)]
    pub reliability_raw: Vec<ReliabilityBin>,
    #[serde(default)]
    pub reliability_calibrated: Option<Vec<ReliabilityBin>>,
    /// Why nothing was fitted, when a fit failed (an edge fit, a plugin failure).
    pub error: Option<String>,
    /// Folds whose fit the policy rejected (their held-out answers use T = 1.0), with why.
    #[serde(default)]
    pub rejected_folds: Vec<String>,
}

impl PolicyReport {
    /// The temperature of the fitted parameters (`params[0]` by convention).
    pub fn temperature(&self) -> Option<f64> {
        self.params.as_ref().and_then(|p| p.first().copied())
    }
}

/// The keep rule on ECE.
pub fn keep(raw: &Interval, calibrated: &Interval) -> bool {
    calibrated.high < raw.low
}

/// The keep rule on accuracy: a clear gain, and log loss no worse.
pub fn keep_for_accuracy(report: &PolicyReport) -> bool {
    report.accuracy_gain.is_some_and(|g| g.low > 0.0)
        && report
            .log_loss_calibrated
            .is_some_and(|l| l <= report.log_loss_raw)
}

/// Cross-validates `policy` on `samples`.
pub fn evaluate(policy: &Calibration, samples: &[Sample]) -> PolicyReport {
    let raw_tops: Vec<Top> = samples
        .iter()
        .map(|s| Top::of(&raw_probabilities(&s.scores), s.expected))
        .collect();
    let groups = group_indices(samples);
    let raw: Vec<Vec<f64>> = samples
        .iter()
        .map(|s| raw_probabilities(&s.scores))
        .collect();
    let mut report = PolicyReport {
        policy: policy.name().to_string(),
        policy_sha256: policy.sha256().to_string(),
        params: None,
        ece_raw: ece::with_intervals(&[&raw_tops], &groups)[0],
        ece_calibrated: None,
        accuracy_raw: accuracy(&raw_tops),
        accuracy_calibrated: None,
        accuracy_gain: None,
        log_loss_raw: log_loss(&raw, samples),
        log_loss_calibrated: None,
        keep: false,
        reliability_raw: ece::reliability(&raw_tops),
        reliability_calibrated: None,
        error: None,
        rejected_folds: Vec::new(),
    };
    let describe = |e: PluginCallError| e.to_string();
    match held_out_probabilities(policy, samples) {
        Ok((probabilities, rejected)) => {
            let tops: Vec<Top> = probabilities
                .iter()
                .zip(samples)
                .map(|(p, s)| Top::of(p, s.expected))
                .collect();
            report.rejected_folds = rejected;
            let intervals = ece::with_intervals(&[&raw_tops, &tops], &groups);
            report.ece_raw = intervals[0];
            report.ece_calibrated = Some(intervals[1]);
            report.accuracy_calibrated = Some(accuracy(&tops));
            report.reliability_calibrated = Some(ece::reliability(&tops));
            let right = |t: &Top| f64::from(u8::from(t.correct));
            let calibrated: Vec<f64> = tops.iter().map(right).collect();
            let base: Vec<f64> = raw_tops.iter().map(right).collect();
            report.accuracy_gain = Some(ece::paired_gain(&calibrated, &base, &groups));
            report.log_loss_calibrated = Some(log_loss(&probabilities, samples));
        }
        Err(error) => report.error = Some(error),
    }
    let fitted =
        labelled(policy, samples.iter()).and_then(|all| policy.fit(&all).map_err(describe));
    match fitted {
        Ok(params) => report.params = Some(params),
        Err(error) => {
            let error = format!("fit on all questions: {error}");
            report.error = Some(
                report
                    .error
                    .map_or(error.clone(), |e| format!("{e}; {error}")),
            );
        }
    }
    report.keep = report.params.is_some()
        && report.error.is_none()
        && (report
            .ece_calibrated
            .as_ref()
            .is_some_and(|c| keep(&report.ece_raw, c))
            || keep_for_accuracy(&report));
    report
}

fn accuracy(tops: &[Top]) -> f64 {
    tops.iter().filter(|t| t.correct).count() as f64 / tops.len().max(1) as f64
}

fn labelled<'a>(
    policy: &Calibration,
    samples: impl Iterator<Item = &'a Sample>,
) -> Result<Vec<LabelledScores>, String> {
    samples
        .map(|s| {
            Ok(LabelledScores {
                scores: policy_scores(policy, s)?,
                expected: s.expected as u32,
            })
        })
        .collect()
}

/// Mean negative log-likelihood of the expected options (probabilities floored at 1e-12, so
/// one confident miss costs at most ~27.6 nats instead of infinity).
pub fn log_loss(probabilities: &[Vec<f64>], samples: &[Sample]) -> f64 {
    probabilities
        .iter()
        .zip(samples)
        .map(|(p, s)| -p[s.expected].max(1e-12).ln())
        .sum::<f64>()
        / samples.len().max(1) as f64
}

/// Held-out calibrated probabilities of every sample (fit on the other folds, applied to
/// the sample's fold) and the folds whose fit was rejected.
pub fn held_out_probabilities(
    policy: &Calibration,
    samples: &[Sample],
) -> Result<(Vec<Vec<f64>>, Vec<String>), String> {
    let (fold_of, folds) = assign_folds(samples)?;
    let mut out = vec![Vec::new(); samples.len()];
    let mut rejected = Vec::new();
    for fold in 0..folds {
        let train = labelled(
            policy,
            samples
                .iter()
                .zip(&fold_of)
                .filter(|(_, f)| **f != fold)
                .map(|(s, _)| s),
        )?;
        let params = match policy.fit(&train) {
            Ok(params) => params,
            Err(PluginCallError::Failed { message, .. }) => {
                rejected.push(format!("fold {}/{folds}: {message}", fold + 1));
                policy
                    .default_params(1.0)
                    .map_err(|e| format!("default-params(1): {e}"))?
            }
            Err(error) => return Err(format!("fold {}/{folds}: {error}", fold + 1)),
        };
        for (i, sample) in samples
            .iter()
            .enumerate()
            .filter(|(i, _)| fold_of[*i] == fold)
        {
            out[i] = policy
                .apply(&policy_scores(policy, sample)?, &params)
                .map_err(|e| format!("fold {}/{folds}: apply: {e}", fold + 1))?;
        }
    }
    Ok((out, rejected))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(group: &str) -> Sample {
        Sample {
            scores: vec![0.0, 1.0],
            expected: 1,
            group: group.into(),
            content_free: None,
        }
    }

    #[test]
    fn folds_are_group_disjoint_and_balanced() {
        let samples: Vec<Sample> = (0..120).map(|i| sample(&format!("g{}", i % 37))).collect();
        let (fold_of, folds) = assign_folds(&samples).unwrap();
        assert_eq!(folds, 5);
        let mut fold_of_group = std::collections::HashMap::new();
        for (s, f) in samples.iter().zip(&fold_of) {
            assert_eq!(
                *fold_of_group.entry(&s.group).or_insert(*f),
                *f,
                "group {} split across folds",
                s.group
            );
        }
        for fold in 0..5 {
            let groups = fold_of_group.values().filter(|f| **f == fold).count();
            assert!((7..=8).contains(&groups), "fold {fold}: {groups} groups");
        }
        assert_eq!(
            assign_folds(&samples).unwrap().0,
            fold_of,
            "fold assignment is deterministic"
        );
        let (_, two) = assign_folds(&[sample("a"), sample("b"), sample("a")]).unwrap();
        assert_eq!(two, 2);
        assert!(assign_folds(&[sample("a"), sample("a")]).is_err());
    }

    #[test]
    fn keep_rule_on_both_sides() {
        let raw = Interval {
            value: 0.20,
            low: 0.15,
            high: 0.25,
        };
        assert!(keep(
            &raw,
            &Interval {
                value: 0.05,
                low: 0.02,
                high: 0.10
            }
        ));
        // Overlapping intervals: the improvement is not shown, keep T = 1.0.
        assert!(!keep(
            &raw,
            &Interval {
                value: 0.10,
                low: 0.05,
                high: 0.16
            }
        ));
        assert!(!keep(
            &raw,
            &Interval {
                value: 0.10,
                low: 0.05,
                high: 0.15
            }
        ));
        assert!(!keep(
            &raw,
            &Interval {
                value: 0.30,
                low: 0.26,
                high: 0.35
            }
        ));
    }

    #[test]
    fn raw_probabilities_are_a_softmax() {
        let p = raw_probabilities(&[-1.0, -2.0, f64::NEG_INFINITY]);
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-12 && p[2] == 0.0 && p[0] > p[1]);
    }
}
