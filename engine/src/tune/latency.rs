//! Latency-aware serving: which of the measured setups this device serves.
//!
//! Tuning measures accuracy, which does not depend on the device (rounding aside), so one
//! saved result serves everywhere (`calibration/tuned/` ships results measured on a GPU). What
//! a setup costs does depend on it: `permutation` reads each question once per option order
//! (up to four), which a GPU batches for a few milliseconds and two CPU cores pay for in
//! seconds. So at startup the server times one question over a new input with one read and
//! with the permuted reads (the fastest of three each), on its own model and device ([`measure`]), and [`choose`] serves
//! the most accurate candidate whose question fits the latency target
//! (`--latency-target-ms`); when none fits, the most accurate of those reading a question
//! once. A candidate must still be clear of the default by tuning's rule (its paired gain's
//! interval above zero) to replace it. The choice, the timings and the device are kept beside
//! the tuning result (`/health` `setup.serving`).

use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::store::Saved;
use super::{CandidateReport, MIN_ANSWERED};
use crate::pipeline::{Engine, Question, RequestScope, Resolved, Setup, SetupSource};
use crate::readout::{self, Choice};

/// The question timed: a choice among three teams, the shape of README's first question.
const QUESTION: &str = r#"{"type":"choice","instructions":"Which team owns this ticket?","choices":[{"value":"billing"},{"value":"shipping"},{"value":"technical"}]}"#;

/// What one question over a new input took on this device, read once and permuted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    /// How the model computes (`cpu f32`, `cpu amx bf16`, `cuda bf16 fused`).
    pub forward: String,
    pub single_ms: f64,
    pub permuted_ms: f64,
}

/// The setup this device serves, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Serving {
    /// `renderer+labels+readout`.
    pub setup: String,
    /// Whether it is what tuning chose on accuracy alone.
    pub as_tuned: bool,
    pub reason: String,
    pub timing: Timing,
    pub target_ms: f64,
}

/// Reads timed per readout; the fastest counts.
const TIMED_ROUNDS: u128 = 3;

/// A state no request has sent: its reads start after the cached template header, as a
/// newcomer's first question does.
fn fresh_state(nonce: u128) -> String {
    format!(
        "Ticket {nonce}: the customer writes that the parcel arrived late and the box was \
         crushed, and asks what can be done."
    )
}

/// Times one read of [`QUESTION`] over a new input with `setup`'s renderer and
/// labels, with `auto` and with `permutation`, each the fastest of [`TIMED_ROUNDS`] over states
/// of their own.
pub fn measure(engine: &Engine, setup: &Setup) -> Result<Timing, String> {
    let question = Question {
        loc: crate::loc!["latency"],
        plugin: "openai-choice".into(),
        json: QUESTION.into(),
    };
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let time = |choice: Choice, salt: u128| -> Result<f64, String> {
        let resolved = Resolved {
            renderer: setup.renderer.clone(),
            options: readout::Options {
                choice,
                labels: Some(setup.labels),
                ..readout::Options::default()
            },
            source: SetupSource::Tuned,
        };
        // The fastest of a few, each over a state of its own: a busy moment at startup
        // (another process, the background steps) must not decide what is served.
        let mut fastest = f64::INFINITY;
        for round in 0..TIMED_ROUNDS {
            let state = fresh_state(nonce + salt * 16 + round);
            let started = Instant::now();
            let mut reads = engine.read_raw_with(
                &RequestScope::default(),
                &resolved,
                &state,
                std::slice::from_ref(&question),
                None,
            );
            let elapsed = started.elapsed().as_secs_f64() * 1e3;
            reads.pop().expect("one read per question")?;
            fastest = fastest.min(elapsed);
        }
        Ok(fastest)
    };
    Ok(Timing {
        forward: engine.model().info().forward.clone(),
        single_ms: time(Choice::Auto, 0)?,
        permuted_ms: time(Choice::Permutation, 1)?,
    })
}

/// Whether a candidate reads each question several times.
fn permuted(report: &CandidateReport) -> bool {
    report.setup.ends_with("+permutation")
}

/// The setup to serve on a device with `timing`, among `saved`'s candidates: the most
/// accurate that is clear of the default (or the default) and whose question takes at most
/// `target_ms`; when none does, the most accurate of those reading once.
pub fn choose(saved: &Saved, timing: &Timing, target_ms: f64) -> Serving {
    let cost = |r: &CandidateReport| {
        if permuted(r) {
            timing.permuted_ms
        } else {
            timing.single_ms
        }
    };
    let eligible: Vec<&CandidateReport> = saved
        .candidates
        .iter()
        .filter(|r| r.answered >= MIN_ANSWERED)
        .filter(|r| r.setup == saved.baseline || r.gain.as_ref().is_some_and(|g| g.low > 0.0))
        .collect();
    let fits: Vec<&CandidateReport> = eligible
        .iter()
        .copied()
        .filter(|r| cost(r) <= target_ms)
        .collect();
    let pool = if fits.is_empty() {
        eligible.iter().copied().filter(|r| !permuted(r)).collect()
    } else {
        fits
    };
    let best = pool
        .iter()
        .copied()
        .max_by(|a, b| a.accuracy.total_cmp(&b.accuracy));
    let tuned = &saved.chosen;
    let Some(best) = best else {
        return Serving {
            setup: tuned.clone(),
            as_tuned: true,
            reason: "no measured candidate to weigh; the tuned setup is served".into(),
            timing: timing.clone(),
            target_ms,
        };
    };
    let chosen_accuracy = saved
        .candidates
        .iter()
        .find(|r| r.setup == *tuned)
        .map_or(f64::NAN, |r| r.accuracy);
    let times = format!(
        "on {}, a question over a new input took {:.0} ms read once and {:.0} ms permuted (target {:.0} ms)",
        timing.forward, timing.single_ms, timing.permuted_ms, target_ms
    );
    // The tuned choice stays when it is as accurate as what fits (ties keep it).
    if best.setup == *tuned
        || best.accuracy <= chosen_accuracy && pool.iter().any(|r| r.setup == *tuned)
    {
        return Serving {
            setup: tuned.clone(),
            as_tuned: true,
            reason: format!("{times}: the tuned setup fits"),
            timing: timing.clone(),
            target_ms,
        };
    }
    let why = if pool.iter().any(|r| cost(r) <= target_ms) {
        "the most accurate setup that fits"
    } else {
        "nothing fits, so the most accurate setup that reads a question once"
    };
    Serving {
        setup: best.setup.clone(),
        as_tuned: false,
        reason: format!(
            "{times}: {why}, {} (accuracy {:.3}), instead of the tuned {tuned} ({:.3})",
            best.setup, best.accuracy, chosen_accuracy
        ),
        timing: timing.clone(),
        target_ms,
    }
}

impl Serving {
    /// The setup answers get.
    pub fn setup(&self, saved: &Saved) -> Setup {
        if self.as_tuned {
            return saved.setup();
        }
        Setup::parse_label(&self.setup, SetupSource::Tuned).unwrap_or_else(|| saved.setup())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibration::ece::Interval;

    fn report(setup: &str, accuracy: f64, low: Option<f64>) -> CandidateReport {
        CandidateReport {
            setup: setup.into(),
            answered: 1000,
            skipped: 0,
            first_skipped: None,
            accuracy,
            log_loss: None,
            ece: None,
            mean_option_mass: 1.0,
            gain: low.map(|low| Interval {
                value: low + 0.02,
                low,
                high: low + 0.04,
            }),
            compared: 1000,
            seconds: 1.0,
        }
    }

    fn saved() -> Saved {
        let mut saved: Saved =
            serde_json::from_str(include_str!("../../../calibration/tuned/q15.json"))
                .expect("the shipped q15 result parses");
        saved.baseline = "direct-options+letters+auto".into();
        saved.chosen = "restated+letters+permutation".into();
        saved.candidates = vec![
            report("direct-options+letters+auto", 0.651, None),
            report("restated+words+auto", 0.681, Some(0.008)),
            report("framed+words+auto", 0.690, Some(-0.01)),
            report("restated+letters+permutation", 0.712, Some(0.037)),
        ];
        saved
    }

    fn timing(single_ms: f64, permuted_ms: f64) -> Timing {
        Timing {
            forward: "test".into(),
            single_ms,
            permuted_ms,
        }
    }

    #[test]
    fn a_fast_device_serves_the_tuned_setup() {
        let s = choose(&saved(), &timing(40.0, 90.0), 1000.0);
        assert_eq!(s.setup, "restated+letters+permutation");
        assert!(s.as_tuned, "{}", s.reason);
    }

    #[test]
    fn a_slow_device_serves_the_most_accurate_setup_that_fits() {
        let s = choose(&saved(), &timing(800.0, 2500.0), 1000.0);
        assert_eq!(s.setup, "restated+words+auto", "{}", s.reason);
        assert!(!s.as_tuned);
        assert!(s.reason.contains("fits"), "{}", s.reason);
        // framed+words+auto is more accurate but not clear of the default: never served.
        let none_fits = choose(&saved(), &timing(1500.0, 4000.0), 1000.0);
        assert_eq!(none_fits.setup, "restated+words+auto");
        assert!(
            none_fits.reason.contains("nothing fits"),
            "{}",
            none_fits.reason
        );
        let setup = none_fits.setup(&saved());
        assert_eq!(setup.label(), "restated+words+auto");
    }
}
