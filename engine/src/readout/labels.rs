//! Which labels a model can answer with, measured once per model at load.
//!
//! A label is usable only if the model's tokenizer reads it as one token at the answer slot
//! (the in-context rule of [`Model::label_ids`]): appended to the rendered prompt it is exactly
//! one new token, leaves the prompt's tokens unchanged, and decodes back to itself. Which
//! strings pass depends on the vocabulary and on how the chat template ends, so the sets are
//! measured on a real rendered prompt of the model rather than assumed.
//!
//! # The label scheme
//!
//! `direct` uses the single letters `A`..`Z`. `wide-direct` continues the same sequence the
//! way spreadsheet columns do: `A`..`Z`, then the letter pairs `AA`, `AB`, ..., `ZZ`, keeping
//! only the pairs that are single tokens of this vocabulary. Why this scheme:
//!
//! - **The first 26 options read exactly as `direct` reads them.** An option keeps its label
//!   when a question grows past 26 options, and a wide read of a short question *is* the
//!   direct read, so the two readouts can never disagree where both apply.
//! - **Uppercase only.** Mixing cases (`Ab`, `ab`) would put labels in one list that differ
//!   only by case, which small models confuse; digits are out because both tokenizers served
//!   here split numbers into single digits, so `10` is two tokens.
//! - **No prefix confusion at the read.** `A` and `AB` are different tokens, and the canonical
//!   tokenization of `AB` is the single token `AB`, never `A` followed by `B`; so the
//!   probability of the token `A` is the probability of answering `A`, not a share of `AB`.
//!   The pairs that are *not* single tokens are skipped (never shown), so no shown label can be
//!   read only as its first letter.
//!
//! Measured capacities (`decide doctor`): SmolLM2-135M `direct` 26, `wide-direct` 403; Qwen2.5
//! `direct` 26, `wide-direct` 578.
//!
//! # Other label schemes ([`Scheme`])
//!
//! What the model is asked to answer with changes what it answers, so the label scheme is one
//! of the things `decide tune` measures: `letters` (the scheme above), `numbers` (`1`..`9`, for
//! questions of up to 9 options: single digits are single tokens in both vocabularies) and
//! `words` (a yes/no question answered with `Yes` / `No` themselves, its option texts). A
//! question a scheme cannot hold is read with letters.

use decide_models::{ChatMessage, Model};

/// The letters of `direct`, in order.
pub fn letters() -> impl Iterator<Item = String> {
    (b'A'..=b'Z').map(|c| char::from(c).to_string())
}

/// The candidates `wide-direct` adds after the letters, in the order they are tried.
pub fn pairs() -> impl Iterator<Item = String> {
    (b'A'..=b'Z')
        .flat_map(|a| (b'A'..=b'Z').map(move |b| format!("{}{}", char::from(a), char::from(b))))
}

/// The digits of the `numbers` scheme, in order.
pub fn digits() -> impl Iterator<Item = String> {
    (1..=9).map(|d| d.to_string())
}

/// The option texts the `words` scheme answers with, in option order (yes/no questions).
pub const YES_NO: [&str; 2] = ["Yes", "No"];

/// How a single read labels its options.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Scheme {
    /// `A`, `B`, ... (then letter pairs past 26 options).
    #[default]
    Letters,
    /// `1`..`9`; questions of more options use letters.
    Numbers,
    /// A yes/no question's option texts, `Yes` and `No`; other questions use letters.
    Words,
}

impl Scheme {
    /// Every accepted name, for messages.
    pub const NAMES: [&'static str; 3] = ["letters", "numbers", "words"];

    /// Every scheme, in the order `decide tune` tries them.
    pub const ALL: [Scheme; 3] = [Scheme::Letters, Scheme::Numbers, Scheme::Words];

    pub fn parse(name: &str) -> Option<Scheme> {
        Some(match name {
            "letters" => Scheme::Letters,
            "numbers" => Scheme::Numbers,
            "words" => Scheme::Words,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Letters => "letters",
            Scheme::Numbers => "numbers",
            Scheme::Words => "words",
        }
    }
}

/// The label sets of one model (tokenizer + chat-template ending).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSets {
    /// Labels of `direct`: the letters that are single tokens at the answer slot, in order.
    pub direct: Vec<String>,
    /// Labels of `wide-direct`: `direct`'s letters, then the usable letter pairs.
    pub wide: Vec<String>,
    /// Labels of the `numbers` scheme: the leading digits `1`.. that are single tokens.
    pub numbers: Vec<String>,
    /// Whether `Yes` and `No` read as two distinct single tokens (the `words` scheme).
    pub yes_no: bool,
    /// Why the sets are empty, when the model could not be probed (e.g. no chat template).
    pub unavailable: Option<String>,
}

/// A minimal conversation whose rendering ends at the template's answer slot, like every
/// question's prompt: where label sets are measured and `decide doctor` shows the ending.
pub fn probe_messages() -> [ChatMessage; 2] {
    [
        ChatMessage {
            role: "system".into(),
            content: "Answer with one label.".into(),
        },
        ChatMessage {
            role: "user".into(),
            content: "Which option?".into(),
        },
    ]
}

impl LabelSets {
    /// Keeps the candidates for which `fits` holds (the model's single-token rule).
    pub fn select(fits: impl Fn(&str) -> bool) -> LabelSets {
        let direct: Vec<String> = letters().filter(|l| fits(l)).collect();
        let mut wide = direct.clone();
        wide.extend(pairs().filter(|l| fits(l)));
        LabelSets {
            direct,
            wide,
            numbers: digits().take_while(|d| fits(d)).collect(),
            yes_no: YES_NO.iter().all(|w| fits(w)),
            unavailable: None,
        }
    }

    /// The labels `scheme` gives a single read of `option_texts`, when it holds them.
    pub fn scheme_labels(&self, scheme: Scheme, option_texts: &[&str]) -> Option<Vec<String>> {
        match scheme {
            Scheme::Letters => None,
            Scheme::Numbers => (option_texts.len() <= self.numbers.len())
                .then(|| self.numbers[..option_texts.len()].to_vec()),
            Scheme::Words => (self.yes_no && option_texts == YES_NO)
                .then(|| YES_NO.iter().map(|w| w.to_string()).collect()),
        }
    }

    /// Measures the sets on a prompt rendered with `model`'s chat template (and its current
    /// answer suffix): the label is read right after the template's generation prompt, which
    /// is the same text for every question, so one probe prompt stands for all of them. Every
    /// read still checks its labels in its own prompt.
    pub fn measure(model: &Model) -> LabelSets {
        let prompt = match model.render(&probe_messages()) {
            Ok(prompt) => prompt,
            Err(error) => {
                return LabelSets {
                    unavailable: Some(format!("no prompt can be rendered: {error}")),
                    ..LabelSets::default()
                }
            }
        };
        let mut sets =
            LabelSets::select(|label| model.label_ids(&prompt, &[label.to_string()]).is_ok());
        // Each label alone is one token; together they must also be distinct tokens.
        if let Err(error) = model.label_ids(&prompt, &sets.wide) {
            sets.unavailable = Some(format!("the wide label set is not readable: {error}"));
            sets.wide = sets.direct.clone();
        }
        if model.label_ids(&prompt, &sets.numbers).is_err() {
            sets.numbers.clear();
        }
        let words: Vec<String> = YES_NO.iter().map(|w| w.to_string()).collect();
        sets.yes_no = sets.yes_no && model.label_ids(&prompt, &words).is_ok();
        sets
    }

    /// Most options `direct` can hold.
    pub fn direct_capacity(&self) -> usize {
        self.direct.len()
    }

    /// Most options `wide-direct` can hold.
    pub fn wide_capacity(&self) -> usize {
        self.wide.len()
    }

    /// One line for logs and `decide doctor`: `direct up to 26, wide-direct up to 403`.
    pub fn summary(&self) -> String {
        let mut line = format!(
            "direct up to {}, wide-direct up to {}, two-stage any count (shortlist read directly); labels: numbers up to {}, words {}",
            self.direct_capacity(),
            self.wide_capacity(),
            self.numbers.len(),
            if self.yes_no { "Yes/No" } else { "unavailable" }
        );
        if let Some(why) = &self.unavailable {
            line.push_str(&format!(" ({why})"));
        }
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_follow_the_letters_in_spreadsheet_order() {
        let all: Vec<String> = pairs().collect();
        assert_eq!(all.len(), 676);
        assert_eq!(&all[..3], ["AA", "AB", "AC"]);
        assert_eq!(all.last().unwrap(), "ZZ");
    }

    #[test]
    fn selection_keeps_only_fitting_labels_in_order() {
        let sets = LabelSets::select(|l| l.len() == 1 || l.starts_with('Q'));
        assert_eq!(sets.direct_capacity(), 26);
        assert_eq!(sets.wide_capacity(), 26 + 26);
        assert_eq!(sets.wide[26], "QA");
        assert_eq!(sets.wide[..26], sets.direct[..]);
        let no_x = LabelSets::select(|l| l != "X");
        assert_eq!(no_x.direct_capacity(), 25);
        assert!(!no_x.direct.contains(&"X".to_string()));
        assert!(no_x
            .summary()
            .starts_with("direct up to 25, wide-direct up to 701"));
    }

    #[test]
    fn schemes_hold_what_they_can_and_leave_the_rest_to_letters() {
        let sets = LabelSets::select(|l| l != "8");
        assert_eq!(sets.numbers, ["1", "2", "3", "4", "5", "6", "7"]);
        assert!(sets.yes_no);
        let three = ["a", "b", "c"];
        assert_eq!(
            sets.scheme_labels(Scheme::Numbers, &three).unwrap(),
            ["1", "2", "3"]
        );
        assert_eq!(sets.scheme_labels(Scheme::Numbers, &["x"; 8]), None);
        assert_eq!(
            sets.scheme_labels(Scheme::Words, &["Yes", "No"]).unwrap(),
            ["Yes", "No"]
        );
        assert_eq!(sets.scheme_labels(Scheme::Words, &["No", "Yes"]), None);
        assert_eq!(sets.scheme_labels(Scheme::Words, &three), None);
        assert_eq!(sets.scheme_labels(Scheme::Letters, &three), None);
        for name in Scheme::NAMES {
            assert_eq!(Scheme::parse(name).unwrap().as_str(), name);
        }
    }
}
