//! Counters exported in Prometheus text format at `/metrics`.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::pipeline::{Decided, Outcome};

/// Process-wide counters. Atomics, not a metrics framework: a handful of numbers does not need one.
#[derive(Debug, Default)]
pub struct Metrics {
    requests: AtomicU64,
    rejected_requests: AtomicU64,
    answers: AtomicU64,
    refusals: AtomicU64,
    input_tokens: AtomicU64,
    forward_passes: AtomicU64,
    decide_micros: AtomicU64,
}

impl Metrics {
    /// Records a request that reached the pipeline and was decided.
    pub fn record_request(&self, decided: &Decided, elapsed: Duration) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        for outcome in &decided.outcomes {
            match outcome {
                Outcome::Answer(_) => self.answers.fetch_add(1, Ordering::Relaxed),
                Outcome::Refusal(_) => self.refusals.fetch_add(1, Ordering::Relaxed),
            };
        }
        self.input_tokens
            .fetch_add(decided.input_tokens as u64, Ordering::Relaxed);
        self.forward_passes
            .fetch_add(decided.forward_passes as u64, Ordering::Relaxed);
        self.decide_micros
            .fetch_add(elapsed.as_micros() as u64, Ordering::Relaxed);
    }

    /// Records a request refused before the pipeline (validation, not ready).
    pub fn record_rejected(&self) {
        self.rejected_requests.fetch_add(1, Ordering::Relaxed);
    }

    /// The Prometheus text exposition of all counters.
    pub fn render(&self) -> String {
        let counters = [
            (
                "decide_requests_total",
                "Decision requests answered by the pipeline.",
                &self.requests,
            ),
            (
                "decide_rejected_requests_total",
                "Decision requests refused before the pipeline.",
                &self.rejected_requests,
            ),
            ("decide_answers_total", "Questions answered.", &self.answers),
            (
                "decide_refusals_total",
                "Questions refused.",
                &self.refusals,
            ),
            (
                "decide_input_tokens_total",
                "Prompt tokens read by the model.",
                &self.input_tokens,
            ),
            (
                "decide_forward_passes_total",
                "Forward passes run.",
                &self.forward_passes,
            ),
        ];
        let mut text = String::new();
        for (name, help, value) in counters {
            let _ = writeln!(
                text,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                value.load(Ordering::Relaxed)
            );
        }
        let seconds = self.decide_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(
            text,
            "# HELP decide_pipeline_seconds_total Time spent in the decision pipeline.\n# TYPE decide_pipeline_seconds_total counter\ndecide_pipeline_seconds_total {seconds}"
        );
        text
    }
}
