//! Running the answer-slot self-check on the engine: the built-in question read with each
//! answer suffix the tokenizer allows until one passes (the check and its report are
//! [`crate::selfcheck`]).

use super::{Engine, Question};
use crate::selfcheck::{Attempt, Report, FALLBACKS, QUESTION, STATE};

/// Measures the option mass of the built-in question with the engine's current answer suffix.
fn measure(engine: &Engine) -> Result<f32, String> {
    let question = Question {
        loc: crate::loc!["self_check"],
        plugin: "openai-choice".into(),
        json: QUESTION.into(),
    };
    let mut reads = engine.read_raw(STATE, std::slice::from_ref(&question));
    reads
        .pop()
        .expect("one read per question")
        .map(|read| read.option_mass)
}

impl Engine {
    /// Runs the answer-slot self-check ([`crate::selfcheck`]), leaving the engine with the
    /// answer suffix that passed (or none).
    pub fn run_self_check(
        &mut self,
        min_mass: f64,
        progress: &crate::progress::Reporter,
    ) -> Report {
        run(self, min_mass, progress)
    }
}

fn run(engine: &mut Engine, min_mass: f64, progress: &crate::progress::Reporter) -> Report {
    let mut report = Report {
        min_mass,
        attempts: Vec::new(),
        kept: None,
        skipped: Vec::new(),
    };
    let original = engine.model().answer_suffix();
    let mut candidates = vec![original.clone()];
    for (suffix, tokens) in FALLBACKS {
        if tokens.iter().all(|t| engine.model().is_added_token(t)) {
            candidates.push(suffix.to_string());
        } else {
            report.skipped.push(format!("{suffix:?}"));
        }
    }
    // A read of the built-in question per answer suffix tried, until one passes.
    let task = progress.start("answer-slot self-check", "checks", candidates.len() as u64);
    for suffix in candidates {
        task.set_detail(format!("answer suffix {suffix:?}"));
        if engine.model().answer_suffix() != suffix {
            engine.set_answer_suffix(&suffix);
        }
        let mass = measure(engine);
        let passed = matches!(&mass, Ok(m) if f64::from(*m) >= min_mass);
        tracing::info!(suffix = ?suffix, mass = ?mass, min_mass, passed, "answer-slot self-check");
        report.attempts.push(Attempt {
            suffix: suffix.clone(),
            mass,
        });
        task.advance(1);
        if passed {
            report.kept = Some(suffix);
            return report;
        }
    }
    engine.set_answer_suffix(&original);
    report
}
