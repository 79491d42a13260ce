//! The `options-first` renderer: the labelled options come before the input, so the model
//! reads the input already knowing what it must decide between.
//!
//! The cost: the options are part of the prompt's beginning, so questions over one input share
//! only the system message as a prefix, not the input.

use super::{check_labels, labelled_options, question_text, reply_line};
use crate::{Compiled, Result};

/// The system message of `options-first`.
pub const OPTIONS_FIRST_SYSTEM: &str = "You are a careful classifier. You are shown a set of labelled options, then an input and a question about it. Answer by replying with the label of exactly one option and nothing else.";

/// Messages `(role, content)`: the system message, then one user message
/// `Options:\n<labelled list>\n\nInput:\n<state>\n\nQuestion: <instructions>\nReply with one label: A, B.`;
/// `labels[i]` names `question.options[i]`.
pub fn options_first(
    state: &str,
    question: &Compiled,
    labels: &[String],
) -> Result<Vec<(String, String)>> {
    check_labels(question, labels)?;
    let user = format!(
        "Options:\n{}\n\nInput:\n{state}\n\nQuestion: {}\n{}",
        labelled_options(question, labels),
        question_text(question),
        reply_line(labels)
    );
    Ok(vec![
        ("system".into(), OPTIONS_FIRST_SYSTEM.into()),
        ("user".into(), user),
    ])
}

#[cfg(test)]
mod tests {
    use super::super::{fixtures, DEFAULT_QUESTION};
    use super::*;
    use crate::Error;

    #[test]
    fn renders_the_documented_text() {
        let q = fixtures::red();
        let m = options_first("a red car", &q, &fixtures::labels(&["A", "B"])).unwrap();
        assert_eq!(m.len(), 2);
        assert_eq!(
            m[0],
            ("system".to_string(), OPTIONS_FIRST_SYSTEM.to_string())
        );
        assert_eq!(m[1].0, "user");
        assert_eq!(
            m[1].1,
            "Options:\nA. Yes - It is red\nB. No\n\nInput:\na red car\n\nQuestion: Is it red?\nReply with one label: A, B."
        );
    }

    #[test]
    fn texts_as_labels_digits_default_question_and_label_count() {
        let q = fixtures::red();
        let m = options_first("a red car", &q, &fixtures::labels(&["Yes", "No"])).unwrap();
        assert_eq!(
            m[1].1,
            "Options:\nYes - It is red\nNo\n\nInput:\na red car\n\nQuestion: Is it red?\nReply with one label: Yes, No."
        );
        let m = options_first("x", &q, &fixtures::labels(&["1", "2"])).unwrap();
        assert!(m[1]
            .1
            .starts_with("Options:\n1. Yes - It is red\n2. No\n\n"));
        assert!(m[1].1.ends_with("\nReply with one label: 1, 2."));
        let none = Compiled {
            instructions: None,
            ..q.clone()
        };
        let m = options_first("x", &none, &fixtures::labels(&["A", "B"])).unwrap();
        assert!(m[1]
            .1
            .contains(&format!("\n\nQuestion: {DEFAULT_QUESTION}\n")));
        assert_eq!(
            options_first("x", &q, &fixtures::labels(&["A"])),
            Err(Error::Failure("got 1 labels for 2 options".into()))
        );
    }
}
