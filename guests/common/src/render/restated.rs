//! The `restated` renderer: `direct-options`' layout with the question asked again after the
//! options, right before the answer, so the last thing the model reads before answering is what
//! it is asked (a long input or option list no longer separates the question from the answer).

use super::{check_labels, labelled_options, question_text, reply_line, SYSTEM};
use crate::{Compiled, Result};

/// Messages `(role, content)`: `direct-options`' system message, then one user message
/// `Input:\n<state>\n\nQuestion: <q>\n\nOptions:\n<labelled list>\n\nQuestion again: <q>\nReply with one label: A, B.`;
/// `labels[i]` names `question.options[i]`.
pub fn restated(
    state: &str,
    question: &Compiled,
    labels: &[String],
) -> Result<Vec<(String, String)>> {
    check_labels(question, labels)?;
    let asked = question_text(question);
    let user = format!(
        "Input:\n{state}\n\nQuestion: {asked}\n\nOptions:\n{}\n\nQuestion again: {asked}\n{}",
        labelled_options(question, labels),
        reply_line(labels)
    );
    Ok(vec![
        ("system".into(), SYSTEM.into()),
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
        let m = restated("a red car", &q, &fixtures::labels(&["A", "B"])).unwrap();
        assert_eq!(m.len(), 2);
        assert_eq!(m[0], ("system".to_string(), SYSTEM.to_string()));
        assert_eq!(m[1].0, "user");
        assert_eq!(
            m[1].1,
            "Input:\na red car\n\nQuestion: Is it red?\n\nOptions:\nA. Yes - It is red\nB. No\n\nQuestion again: Is it red?\nReply with one label: A, B."
        );
        assert_eq!(m[1].1.matches("Reply with one label").count(), 1);
    }

    #[test]
    fn texts_as_labels_default_question_and_label_count() {
        let q = fixtures::red();
        let m = restated("a red car", &q, &fixtures::labels(&["Yes", "No"])).unwrap();
        assert_eq!(
            m[1].1,
            "Input:\na red car\n\nQuestion: Is it red?\n\nOptions:\nYes - It is red\nNo\n\nQuestion again: Is it red?\nReply with one label: Yes, No."
        );
        let none = Compiled {
            instructions: None,
            ..q.clone()
        };
        let m = restated("x", &none, &fixtures::labels(&["1", "2"])).unwrap();
        assert_eq!(
            m[1].1,
            format!("Input:\nx\n\nQuestion: {DEFAULT_QUESTION}\n\nOptions:\n1. Yes - It is red\n2. No\n\nQuestion again: {DEFAULT_QUESTION}\nReply with one label: 1, 2.")
        );
        assert!(matches!(
            restated("x", &q, &fixtures::labels(&["A", "B", "C"])),
            Err(Error::Failure(_))
        ));
    }
}
