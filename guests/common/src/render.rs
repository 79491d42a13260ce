//! The prompt renderers: each turns the state and a compiled question into chat messages
//! `(role, content)` whose last user message ends with the instruction to answer with one label,
//! so that the model's next token after the assistant turn opens is a label.
//!
//! - [`direct_options`] (`direct-options`, the default): a system message sets the task; the
//!   user message shows the input, the question and the labelled options.
//! - [`options_first`] (`options-first`): the labelled options before the input.
//! - [`restated`] (`restated`): `direct-options`' layout with the question asked again right
//!   before the answer.
//! - [`plain_letter`] (`plain-letter`): no system message and no headings, as a plain user
//!   script would ask (the model's chat template adds its own default system prompt).
//! - [`framed`] (`framed`): a long system prompt framing the task, the input between
//!   delimiters, a separate legend for the option descriptions.
//!
//! Labels are letters (`A`, `B`, ...), digits (`1`, `2`, ...) or the option texts themselves
//! (the host labels `Yes`/`No` options with `Yes`/`No`). Where a label equals its option's text
//! the option is shown once (`Yes`, not `Yes. Yes`). A label count different from the option
//! count is a [`Error::Failure`] in every renderer.

use crate::{Compiled, Error, Result};

mod framed;
mod options_first;
mod plain_letter;
mod restated;

pub use framed::{framed, FRAMED_SYSTEM};
pub use options_first::{options_first, OPTIONS_FIRST_SYSTEM};
pub use plain_letter::plain_letter;
pub use restated::restated;

/// The system message of `direct-options`.
pub const SYSTEM: &str = "You are a careful classifier. Read the input, then answer the question by replying with the label of exactly one option and nothing else.";

/// The question asked when the compiled question has no instructions.
pub const DEFAULT_QUESTION: &str = "Which option best fits the input?";

/// Messages `(role, content)`; `labels[i]` names `question.options[i]`.
pub fn direct_options(
    state: &str,
    question: &Compiled,
    labels: &[String],
) -> Result<Vec<(String, String)>> {
    check_labels(question, labels)?;
    let user = format!(
        "Input:\n{state}\n\nQuestion: {}\n\nOptions:\n{}\n\n{}",
        question_text(question),
        labelled_options(question, labels),
        reply_line(labels)
    );
    Ok(vec![
        ("system".into(), SYSTEM.into()),
        ("user".into(), user),
    ])
}

/// Refuses a label count different from the option count (the host's bug, not the caller's).
pub fn check_labels(question: &Compiled, labels: &[String]) -> Result<()> {
    if labels.len() != question.options.len() {
        return Err(Error::Failure(format!(
            "got {} labels for {} options",
            labels.len(),
            question.options.len()
        )));
    }
    Ok(())
}

/// The question's instructions, or [`DEFAULT_QUESTION`] when it has none.
pub fn question_text(question: &Compiled) -> &str {
    question.instructions.as_deref().unwrap_or(DEFAULT_QUESTION)
}

/// The closing line every renderer but `plain-letter` ends with: `Reply with one label: A, B.`
pub fn reply_line(labels: &[String]) -> String {
    format!("Reply with one label: {}.", labels.join(", "))
}

/// `label. shown`, or only `shown` when the label is that very text (`Yes`, not `Yes. Yes`).
pub fn labelled(label: &str, shown: &str) -> String {
    if label == shown {
        shown.to_string()
    } else {
        format!("{label}. {shown}")
    }
}

/// Whether every label is its option's own text (the `Yes`/`No` labels of a yes/no question).
pub fn labels_are_texts(question: &Compiled, labels: &[String]) -> bool {
    !labels.is_empty()
        && labels
            .iter()
            .zip(&question.options)
            .all(|(l, o)| *l == o.text)
}

/// `direct-options`' option lines, one per option, without a final newline:
/// `A. text - description` (`text - description` when the label is the text).
pub fn labelled_options(question: &Compiled, labels: &[String]) -> String {
    labels
        .iter()
        .zip(&question.options)
        .map(|(label, o)| {
            let mut line = labelled(label, &o.text);
            if let Some(d) = &o.description {
                line.push_str(" - ");
                line.push_str(d);
            }
            line
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Questions and labels the renderers' tests share.
#[cfg(test)]
mod fixtures {
    use crate::{Compiled, Opt};

    /// "Is it red?" with options `Yes` (described) and `No`.
    pub fn red() -> Compiled {
        Compiled {
            instructions: Some("Is it red?".into()),
            options: vec![
                Opt::new("true", "Yes", Some("It is red".into())),
                Opt::new("false", "No", None),
            ],
        }
    }

    /// Owned labels.
    pub fn labels(l: &[&str]) -> Vec<String> {
        l.iter().map(|s| s.to_string()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Opt;

    #[test]
    fn renders_the_documented_text() {
        let q = Compiled {
            instructions: Some("Is it red?".into()),
            options: vec![
                Opt::new("true", "Yes", Some("It is red".into())),
                Opt::new("false", "No", None),
            ],
        };
        let m = direct_options("a red car", &q, &["A".into(), "B".into()]).unwrap();
        assert_eq!(m[0], ("system".to_string(), SYSTEM.to_string()));
        assert_eq!(
            m[1].1,
            "Input:\na red car\n\nQuestion: Is it red?\n\nOptions:\nA. Yes - It is red\nB. No\n\nReply with one label: A, B."
        );
        let q2 = Compiled {
            instructions: None,
            ..q.clone()
        };
        assert!(
            direct_options("s", &q2, &["A".into(), "B".into()]).unwrap()[1]
                .1
                .contains(DEFAULT_QUESTION)
        );
        assert!(matches!(
            direct_options("s", &q, &["A".into()]),
            Err(Error::Failure(_))
        ));
    }

    #[test]
    fn a_label_that_is_its_text_is_shown_once() {
        let q = fixtures::red();
        let m = direct_options("a red car", &q, &fixtures::labels(&["Yes", "No"])).unwrap();
        assert_eq!(
            m[1].1,
            "Input:\na red car\n\nQuestion: Is it red?\n\nOptions:\nYes - It is red\nNo\n\nReply with one label: Yes, No."
        );
        assert!(labels_are_texts(&q, &fixtures::labels(&["Yes", "No"])));
        assert!(!labels_are_texts(&q, &fixtures::labels(&["A", "B"])));
        assert!(!labels_are_texts(&q, &[]));
        // Digits read like letters.
        let m = direct_options("a red car", &q, &fixtures::labels(&["1", "2"])).unwrap();
        assert!(m[1]
            .1
            .ends_with("Options:\n1. Yes - It is red\n2. No\n\nReply with one label: 1, 2."));
    }
}
