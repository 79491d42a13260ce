//! The `direct-options` renderer: one system message, one user message listing the options
//! with their labels, asking for exactly one label.

use crate::{Compiled, Error, Result};

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
    if labels.len() != question.options.len() {
        return Err(Error::Failure(format!(
            "got {} labels for {} options",
            labels.len(),
            question.options.len()
        )));
    }
    let mut options = String::new();
    for (label, o) in labels.iter().zip(&question.options) {
        options.push_str(label);
        options.push_str(". ");
        options.push_str(&o.text);
        if let Some(d) = &o.description {
            options.push_str(" - ");
            options.push_str(d);
        }
        options.push('\n');
    }
    let user = format!(
        "Input:\n{state}\n\nQuestion: {}\n\nOptions:\n{options}\nReply with one label: {}.",
        question.instructions.as_deref().unwrap_or(DEFAULT_QUESTION),
        labels.join(", ")
    );
    Ok(vec![
        ("system".into(), SYSTEM.into()),
        ("user".into(), user),
    ])
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
}
