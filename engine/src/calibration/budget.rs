//! Fitting startup tuning and calibration into a time budget (`--tune-budget-s`), and how
//! their reads are made.
//!
//! Why: tuning reads every labelled question once per candidate setup, and calibration once
//! more; on a CPU that is hours (SmolLM2 on 2 cores: 19,361 tuning reads, ETA 34,184 s). The
//! server answers before either runs (they run in the background at low priority), but an
//! unbounded run still holds the model worker's idle time for hours before a result comes.
//! With a budget, a probe reads the first few inputs to measure the time a question costs
//! here, and the set is cut to whole inputs spread evenly over it that fit the rest of the
//! budget; a cut that would fall under the fewest answers the comparison needs is not
//! measured at all, and the message says how long the whole set would take and which setting
//! to raise. A budgeted result is saved under the whole set's key (its `origin` says it was a
//! subsample), so the next start reuses it at once.

use std::time::Duration;

use crate::cancel::Cancel;
use crate::pipeline::RequestScope;
use crate::scheduler::Flow;

use super::questions::QuestionSet;

/// The setting that bounds both runs.
pub const SETTING: &str = "--tune-budget-s / DECIDE_TUNE_BUDGET_S";

/// Questions the probe reads (whole inputs: at least this many).
pub const PROBE_QUESTIONS: usize = 8;

/// How a tuning or calibration run makes its reads.
#[derive(Clone, Default)]
pub struct Reading {
    /// The scope of every read: at startup, the server's background token (set by SIGTERM)
    /// and the background flow (read only while no request waits). Default: the server's
    /// own reads, never cancelled (the `decide tune` and `decide calibrate` commands).
    pub scope: RequestScope,
    /// At most this long for the run's reads; none: no bound.
    pub budget: Option<Duration>,
}

impl Reading {
    /// Startup's background run: low priority, stopped with the server, within `budget`.
    pub fn background(cancel: Cancel, budget: Option<Duration>) -> Reading {
        Reading {
            scope: RequestScope {
                cancel,
                flow: Flow::BACKGROUND,
                ..RequestScope::default()
            },
            budget,
        }
    }

    /// An error when the run was stopped (the server is shutting down): nothing it measured
    /// may be saved or served.
    pub fn check(&self) -> Result<(), String> {
        match self.scope.cancel.is_cancelled() {
            true => Err("stopped: the server is shutting down".into()),
            false => Ok(()),
        }
    }
}

/// `set` cut to what `budget` reads ([`fit`]): `probe` reads the first inputs
/// ([`head`]), which times a question at `reads_per_question` reads; `what` names the run
/// in messages. An error when the run was stopped meanwhile or too few questions fit.
pub fn within(
    reading: &Reading,
    set: QuestionSet,
    budget: Duration,
    reads_per_question: usize,
    what: &str,
    probe: impl FnOnce(&QuestionSet),
) -> Result<QuestionSet, String> {
    let started = std::time::Instant::now();
    let sample = head(&set, PROBE_QUESTIONS);
    probe(&sample);
    reading.check()?;
    let per_read = started.elapsed().as_secs_f64() / sample.questions.len().max(1) as f64;
    let fitted = fit(
        set,
        budget.saturating_sub(started.elapsed()),
        per_read * reads_per_question as f64,
        super::MIN_ANSWERED,
        what,
    )?;
    tracing::info!(
        questions = fitted.questions.len(),
        per_read_s = per_read,
        "{what} within its budget: {}",
        fitted.origin
    );
    Ok(fitted)
}

/// The first inputs of `set`, whole, until they hold at least `count` questions.
pub fn head(set: &QuestionSet, count: usize) -> QuestionSet {
    let groups = by_state(set);
    let mut keep = Vec::new();
    for group in groups {
        if keep.len() >= count {
            break;
        }
        keep.extend(group);
    }
    subset(set, keep, None)
}

/// `set` cut to what `left` (the budget after the probe) reads at `per_question` seconds a
/// question; the whole set when it fits. An error when fewer than `min` questions fit.
pub fn fit(
    set: QuestionSet,
    left: Duration,
    per_question: f64,
    min: usize,
    what: &str,
) -> Result<QuestionSet, String> {
    let total = set.questions.len();
    let fits = if per_question > 0.0 {
        (left.as_secs_f64() / per_question).floor() as usize
    } else {
        total
    };
    if fits >= total {
        return Ok(set);
    }
    if fits < min {
        return Err(format!(
            "{what} of the {total} questions of {} would take ~{:.0} s here ({per_question:.2} s a question, measured); the budget leaves {:.0} s, which reads {fits}, fewer than the {min} a comparison needs (setting {SETTING}; 0 = no bound)",
            set.origin,
            per_question * total as f64,
            left.as_secs_f64()
        ));
    }
    let note = format!(
        "{} (a subsample of {fits} of {total} questions, whole inputs spread evenly, to fit {SETTING})",
        set.origin
    );
    Ok(spread(&set, fits, note))
}

/// Whole inputs of `set`, spread evenly over it, until they hold `count` questions (inputs
/// are not split, so it may hold a few more).
fn spread(set: &QuestionSet, count: usize, origin: String) -> QuestionSet {
    let groups = by_state(set);
    let mean = set.questions.len() as f64 / groups.len().max(1) as f64;
    let picks = ((count as f64 / mean).ceil() as usize).clamp(1, groups.len().max(1));
    let mut taken = vec![false; groups.len()];
    let mut keep = Vec::new();
    // Every (inputs / picks)-th input, then the first ones not taken while short.
    let evenly = (0..picks).map(|k| k * groups.len() / picks);
    for at in evenly.chain(0..groups.len()) {
        if keep.len() >= count {
            break;
        }
        if !std::mem::replace(&mut taken[at], true) {
            keep.extend(groups[at].iter().copied());
        }
    }
    keep.sort_unstable();
    subset(set, keep, Some(origin))
}

/// Indices of `set`'s questions, grouped by input text in order of first appearance.
fn by_state(set: &QuestionSet) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut at: std::collections::HashMap<&str, usize> = Default::default();
    for (i, q) in set.questions.iter().enumerate() {
        match at.get(q.state.as_str()) {
            Some(&g) => groups[g].push(i),
            None => {
                at.insert(&q.state, groups.len());
                groups.push(vec![i]);
            }
        }
    }
    groups
}

/// The questions of `set` at `keep`, same sha256 (the saved-result key stays the whole set's).
fn subset(set: &QuestionSet, keep: Vec<usize>, origin: Option<String>) -> QuestionSet {
    QuestionSet {
        origin: origin.unwrap_or_else(|| set.origin.clone()),
        sha256: set.sha256.clone(),
        questions: keep.into_iter().map(|i| set.questions[i].clone()).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(inputs: usize, per_input: usize) -> QuestionSet {
        let mut text = String::new();
        for i in 0..inputs {
            for j in 0..per_input {
                text.push_str(&format!(
                    "{{\"state\": \"input {i}\", \"question\": {{\"type\": \"noul\", \"instructions\": \"q{j}\"}}, \"expected\": true}}\n"
                ));
            }
        }
        QuestionSet::parse("test set", &text).unwrap()
    }

    #[test]
    fn the_probe_takes_whole_inputs_from_the_start() {
        let probe = head(&set(10, 3), PROBE_QUESTIONS);
        assert_eq!(probe.questions.len(), 9, "three whole inputs of three");
        assert!(probe.questions.iter().all(|q| q.state != "input 3"));
    }

    #[test]
    fn a_set_that_fits_is_kept_whole_and_one_that_does_not_is_spread() {
        let whole = set(100, 2);
        let kept = fit(whole.clone(), Duration::from_secs(1000), 1.0, 50, "tuning").unwrap();
        assert_eq!(kept.questions.len(), 200);
        let cut = fit(whole.clone(), Duration::from_secs(120), 1.0, 50, "tuning").unwrap();
        assert_eq!(cut.questions.len(), 120);
        assert_eq!(cut.sha256, whole.sha256, "keyed as the whole set");
        assert!(
            cut.origin.contains("subsample of 120 of 200"),
            "{}",
            cut.origin
        );
        // Spread over the set, not its first inputs.
        let last = cut.questions.last().unwrap();
        assert!(last.state.as_str() > "input 9", "{}", last.state);
        let inputs: std::collections::HashSet<&str> =
            cut.questions.iter().map(|q| q.state.as_str()).collect();
        assert_eq!(inputs.len(), 60, "whole inputs only");
    }

    #[test]
    fn a_budget_under_the_minimum_says_how_long_the_set_takes_and_what_to_raise() {
        let error = fit(set(100, 2), Duration::from_secs(30), 1.0, 50, "tuning").unwrap_err();
        assert!(error.contains("~200 s"), "{error}");
        assert!(error.contains("--tune-budget-s"), "{error}");
        assert!(error.contains("reads 30, fewer than the 50"), "{error}");
    }
}
