//! The `plain-letter` renderer: the prompt a plain user script would send. No system message
//! (the model's chat template then inserts its own default system prompt, if it has one), no
//! headings: the input, the question, one line per option, and the instruction to answer.
//!
//! An option line shows the option's description when it has one (a SystemOne criterion is
//! the option's real content; its text is only a name), else its text.

use super::{check_labels, labelled, labels_are_texts, question_text};
use crate::{Compiled, Result};

/// Messages `(role, content)`: one user message
/// `<state>\n\n<question>\n\n<label>. <option>\n...\n\nAnswer with the letter of the correct option only.`;
/// `labels[i]` names `question.options[i]`.
pub fn plain_letter(
    state: &str,
    question: &Compiled,
    labels: &[String],
) -> Result<Vec<(String, String)>> {
    check_labels(question, labels)?;
    let options = labels
        .iter()
        .zip(&question.options)
        .map(|(label, o)| labelled(label, o.description.as_deref().unwrap_or(&o.text)))
        .collect::<Vec<_>>()
        .join("\n");
    let user = format!(
        "{state}\n\n{}\n\n{options}\n\n{}",
        question_text(question),
        answer_line(question, labels)
    );
    Ok(vec![("user".into(), user)])
}

/// How the answer is asked for, by what the labels are: "the letter" for single letters, "the
/// number" for digits, else (the option texts themselves, or any other labels) the labels
/// spelled out: `Answer with one of: Yes, No only.`
fn answer_line(question: &Compiled, labels: &[String]) -> String {
    let all = |f: fn(&str) -> bool| !labels.is_empty() && labels.iter().all(|l| f(l));
    if !labels_are_texts(question, labels) {
        if all(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_digit())) {
            return "Answer with the number of the correct option only.".into();
        }
        if all(|l| l.len() == 1 && l.bytes().all(|b| b.is_ascii_alphabetic())) {
            return "Answer with the letter of the correct option only.".into();
        }
    }
    format!("Answer with one of: {} only.", labels.join(", "))
}

#[cfg(test)]
mod tests {
    use super::super::{fixtures, DEFAULT_QUESTION};
    use super::*;
    use crate::{Error, Opt};

    #[test]
    fn renders_the_documented_text() {
        let q = fixtures::red();
        let m = plain_letter("a red car", &q, &fixtures::labels(&["A", "B"])).unwrap();
        assert_eq!(m.len(), 1, "no system message");
        assert_eq!(m[0].0, "user");
        assert_eq!(
            m[0].1,
            "a red car\n\nIs it red?\n\nA. It is red\nB. No\n\nAnswer with the letter of the correct option only."
        );
    }

    #[test]
    fn the_answer_line_follows_the_labels() {
        let q = fixtures::red();
        let m = plain_letter("a red car", &q, &fixtures::labels(&["1", "2"])).unwrap();
        assert_eq!(
            m[0].1,
            "a red car\n\nIs it red?\n\n1. It is red\n2. No\n\nAnswer with the number of the correct option only."
        );
        // Labels that are the option texts: shown once, spelled out in the answer line.
        let yes_no = Compiled {
            instructions: Some("Is it red?".into()),
            options: vec![Opt::new("true", "Yes", None), Opt::new("false", "No", None)],
        };
        let m = plain_letter("a red car", &yes_no, &fixtures::labels(&["Yes", "No"])).unwrap();
        assert_eq!(
            m[0].1,
            "a red car\n\nIs it red?\n\nYes\nNo\n\nAnswer with one of: Yes, No only."
        );
        // A described option keeps its label in front of the description.
        let m = plain_letter("a red car", &q, &fixtures::labels(&["Yes", "No"])).unwrap();
        assert_eq!(
            m[0].1,
            "a red car\n\nIs it red?\n\nYes. It is red\nNo\n\nAnswer with one of: Yes, No only."
        );
        // Letter pairs (wide readout) are spelled out too.
        let m = plain_letter("x", &q, &fixtures::labels(&["AA", "AB"])).unwrap();
        assert!(m[0]
            .1
            .ends_with("\n\nAA. It is red\nAB. No\n\nAnswer with one of: AA, AB only."));
    }

    #[test]
    fn default_question_and_label_count() {
        let none = Compiled {
            instructions: None,
            ..fixtures::red()
        };
        let m = plain_letter("x", &none, &fixtures::labels(&["A", "B"])).unwrap();
        assert_eq!(
            m[0].1,
            format!("x\n\n{DEFAULT_QUESTION}\n\nA. It is red\nB. No\n\nAnswer with the letter of the correct option only.")
        );
        assert!(matches!(
            plain_letter("x", &none, &fixtures::labels(&["A"])),
            Err(Error::Failure(_))
        ));
    }
}
