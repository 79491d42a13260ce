//! `two-stage`: for more options than any label set holds.
//!
//! Stage 1 asks one yes/no question per option ("<the question> Is '<option>' the right
//! answer?", options Yes/No labelled A/B) through the same renderer. The prompts differ only
//! after the state, so they share its prefix and go into one packed batched read. Each option's
//! stage-1 score is its yes-share `p(A) / (p(A) + p(B))`, and the stage-1 distribution is
//! those scores normalised over the options.
//!
//! Stage 2 reads the top `shortlist` options (kept in their original order) as an ordinary
//! `direct` question. The finalists share the stage-1 mass they had together, split by the
//! direct read; every other option keeps its stage-1 share. So the result is a distribution
//! over all options in which the comparison that matters (between the best candidates) is made
//! by one model read that sees them side by side, and nothing is dropped.

use crate::plugins::{CompiledQuestion, OptionDef};

/// Finalists read directly when the request does not say.
pub const DEFAULT_SHORTLIST: usize = 8;
/// Fewest finalists a request may ask for.
pub const MIN_SHORTLIST: usize = 2;

/// The question asked when the compiled question has none (as the default renderer does).
const DEFAULT_QUESTION: &str = "Which option best fits the input?";

/// Labels of the stage-1 yes/no question: `A` = yes, `B` = no.
pub fn stage1_labels() -> Vec<String> {
    vec!["A".into(), "B".into()]
}

/// The stage-1 yes/no question about `option`.
pub fn stage1_question(question: &CompiledQuestion, option: &OptionDef) -> CompiledQuestion {
    let shown = match &option.description {
        Some(description) => format!("{} - {description}", option.text),
        None => option.text.clone(),
    };
    let asked = question.instructions.as_deref().unwrap_or(DEFAULT_QUESTION);
    CompiledQuestion {
        // The question first, the option last: every stage-1 prompt shares the state and the
        // question as its prefix, so only the option and the fixed tail are read per option.
        instructions: Some(format!("{asked} Is '{shown}' the right answer?")),
        options: vec![
            OptionDef {
                key: "true".into(),
                text: "Yes".into(),
                description: None,
            },
            OptionDef {
                key: "false".into(),
                text: "No".into(),
                description: None,
            },
        ],
    }
}

/// The yes-share of a stage-1 read: `p(yes) / (p(yes) + p(no))` from the two label
/// log-probabilities (yes first), computed stably.
pub fn yes_share(logprobs: &[f32]) -> f64 {
    let (yes, no) = (f64::from(logprobs[0]), f64::from(logprobs[1]));
    1.0 / (1.0 + (no - yes).exp())
}

/// Indices of the `k` highest scores, in their original (option) order; ties go to the earlier
/// option.
pub fn shortlist(scores: &[f64], k: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    order.truncate(k.min(scores.len()));
    order.sort_unstable();
    order
}

/// The stage-2 question: the original question with only the finalists, in original order.
pub fn finalists_question(question: &CompiledQuestion, finalists: &[usize]) -> CompiledQuestion {
    CompiledQuestion {
        instructions: question.instructions.clone(),
        options: finalists
            .iter()
            .map(|&i| question.options[i].clone())
            .collect(),
    }
}

/// The final distribution over all options: `stage1` scores normalised; the finalists' joint
/// share re-split by `finalist_probs` (a distribution over the finalists, in shortlist order).
pub fn combine(stage1: &[f64], finalists: &[usize], finalist_probs: &[f64]) -> Vec<f64> {
    let total: f64 = stage1.iter().sum();
    let n = stage1.len() as f64;
    // All scores zero (cannot happen with finite reads, but never divide by zero): uniform.
    let mut probs: Vec<f64> = if total > 0.0 {
        stage1.iter().map(|s| s / total).collect()
    } else {
        vec![1.0 / n; stage1.len()]
    };
    let mass: f64 = finalists.iter().map(|&i| probs[i]).sum();
    for (&i, &p) in finalists.iter().zip(finalist_probs) {
        probs[i] = mass * p;
    }
    probs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn question(n: usize) -> CompiledQuestion {
        CompiledQuestion {
            instructions: Some("Which city?".into()),
            options: (0..n)
                .map(|i| OptionDef {
                    key: format!("\"c{i}\""),
                    text: format!("city {i}"),
                    description: None,
                })
                .collect(),
        }
    }

    #[test]
    fn stage1_asks_about_one_option() {
        let q = question(3);
        let s = stage1_question(&q, &q.options[1]);
        assert_eq!(
            s.instructions.as_deref(),
            Some("Which city? Is 'city 1' the right answer?")
        );
        assert_eq!(s.options.len(), 2);
        assert_eq!(s.options[0].text, "Yes");
    }

    #[test]
    fn yes_share_is_the_normalised_yes_probability() {
        let share = yes_share(&[(0.3f32).ln(), (0.1f32).ln()]);
        assert!((share - 0.75).abs() < 1e-6, "{share}");
    }

    #[test]
    fn the_shortlist_is_the_top_k_in_option_order() {
        assert_eq!(shortlist(&[0.1, 0.9, 0.5, 0.9, 0.2], 3), [1, 2, 3]);
        assert_eq!(shortlist(&[0.5, 0.5, 0.5], 2), [0, 1]);
        assert_eq!(shortlist(&[0.5, 0.1], 8), [0, 1]);
        let q = finalists_question(&question(5), &[1, 3]);
        assert_eq!(q.options[1].text, "city 3");
    }

    #[test]
    fn finalists_share_their_stage1_mass() {
        let probs = combine(&[0.4, 0.3, 0.2, 0.1], &[0, 2], &[0.25, 0.75]);
        // Finalists had 0.4 + 0.2 = 0.6 of the mass; the direct read splits it 1:3.
        let expected = [0.15, 0.3, 0.45, 0.1];
        for (p, e) in probs.iter().zip(expected) {
            assert!((p - e).abs() < 1e-12, "{probs:?}");
        }
        assert!((probs.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        assert_eq!(combine(&[0.0, 0.0], &[0], &[1.0]), [0.5, 0.5]);
    }
}
