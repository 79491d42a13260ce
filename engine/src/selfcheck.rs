//! The answer-slot self-check, run once at startup (and by `decide doctor`).
//!
//! A read is only meaningful if the model's next token at the answer slot is one of the
//! labels. A chat template can leave the slot somewhere else (a reasoning block the model
//! wants to fill first, a preamble the model always writes), and then the label
//! probabilities are a small, distorted corner of the distribution. So before serving, an easy
//! built-in question goes through the real pipeline and its `option_mass` (the true next-token
//! probability on the labels) is compared with a threshold (`--self-check-min-mass`).
//!
//! Below the threshold, the empty reasoning blocks this tokenizer knows (only those whose
//! control tokens are added tokens of the vocabulary) are tried one by one as an answer
//! suffix after the generation prompt, and the first that passes is kept. If none passes, the
//! model is refused: the server stays up, every decision request gets 503 with the reason, and
//! `/health` reports it.
//!
//! This module is what the check asks and what it found ([`Report`]); the engine runs it
//! ([`crate::pipeline::Engine::run_self_check`]).

/// The built-in easy question's input.
pub const STATE: &str = "The sky is blue.";

/// The built-in easy question (OpenAI `choice`): eight colours, one of them stated in the
/// input. Eight options rather than two: with more labels shown, a model that does answer
/// with a label puts more of its mass on them, so the check measures the answer slot and not
/// the model's doubt between two letters.
pub const QUESTION: &str = r#"{"type":"choice","instructions":"What colour is the sky?","choices":[{"value":"red"},{"value":"orange"},{"value":"yellow"},{"value":"green"},{"value":"blue"},{"value":"purple"},{"value":"black"},{"value":"white"}]}"#;

/// Empty reasoning blocks tried at the answer slot, each with the tokens it needs: Qwen3 /
/// DeepSeek-R1 style, Cohere Command-A style, Seed style.
pub const FALLBACKS: &[(&str, &[&str])] = &[
    ("<think>\n\n</think>\n\n", &["<think>", "</think>"]),
    (
        "<|START_THINKING|><|END_THINKING|>",
        &["<|START_THINKING|>", "<|END_THINKING|>"],
    ),
    (
        "<seed:think></seed:think>",
        &["<seed:think>", "</seed:think>"],
    ),
];

/// The default threshold of `--self-check-min-mass`.
pub const DEFAULT_MIN_MASS: f64 = 0.5;

/// One measurement: the answer suffix tried and the option mass it gave (or why no read).
#[derive(Debug, Clone)]
pub struct Attempt {
    /// Empty for the template's own ending.
    pub suffix: String,
    pub mass: Result<f32, String>,
}

/// What the self-check found.
#[derive(Debug, Clone)]
pub struct Report {
    pub min_mass: f64,
    pub attempts: Vec<Attempt>,
    /// The suffix that passed (empty: none needed), or `None` when nothing passed.
    pub kept: Option<String>,
    /// Fallbacks not tried because this tokenizer lacks their tokens.
    pub skipped: Vec<String>,
}

impl Report {
    pub fn passed(&self) -> bool {
        self.kept.is_some()
    }

    /// The option mass of the kept attempt (or of the first attempt when nothing passed).
    pub fn mass(&self) -> Option<f32> {
        let attempt = match &self.kept {
            Some(kept) => self.attempts.iter().find(|a| &a.suffix == kept),
            None => self.attempts.first(),
        };
        attempt.and_then(|a| a.mass.as_ref().ok().copied())
    }

    /// One line for logs, `/health` and `decide doctor`.
    pub fn summary(&self) -> String {
        let tried: Vec<String> = self
            .attempts
            .iter()
            .map(|a| {
                let what = if a.suffix.is_empty() {
                    "the template's own ending".to_string()
                } else {
                    format!("answer suffix {:?}", a.suffix)
                };
                match &a.mass {
                    Ok(mass) => format!("{what}: option mass {mass:.3}"),
                    Err(why) => format!("{what}: no read ({why})"),
                }
            })
            .collect();
        let verdict = match &self.kept {
            Some(s) if s.is_empty() => "passed".to_string(),
            Some(s) => format!("passed with answer suffix {s:?}"),
            None => format!(
                "failed: the model does not answer the built-in question with a label (needs option mass >= {}, setting --self-check-min-mass / DECIDE_SELF_CHECK_MIN_MASS); no empty reasoning block this tokenizer knows fixes it{}",
                self.min_mass,
                if self.skipped.is_empty() {
                    String::new()
                } else {
                    format!(" (not in its vocabulary: {})", self.skipped.join(", "))
                }
            ),
        };
        format!("answer-slot self-check {verdict} [{}]", tried.join("; "))
    }
}
