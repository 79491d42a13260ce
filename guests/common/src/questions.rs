//! The question types. Each module has `compile` (question JSON -> option set), `answer`
//! (question JSON + probabilities -> answer fields as a JSON object) and `EXAMPLE`.
//!
//! Equivalent questions of the two wire formats compile to identical `Compiled` values:
//! `predicate` == `noul` without criteria, `openai_choice` with string values ==
//! `systemone_choice`, `openai_score` == `systemone_score` with string criteria.

use crate::json::{
    array, child, content_text, index, openai_instructions, parse_question, type_name, Fields,
};
use crate::{argmax, check_probabilities, confidence, num, Compiled, Error, Opt, Result};
use serde_json::{json, Map, Value};

/// Most options a choice question may have.
pub const MAX_CHOICES: usize = 255;
/// Most levels a score question may have.
pub const MAX_LEVELS: usize = 10;

fn yes_no(instructions: Option<String>, yes: Option<String>, no: Option<String>) -> Compiled {
    Compiled {
        instructions,
        options: vec![Opt::new("true", "Yes", yes), Opt::new("false", "No", no)],
    }
}

fn answer_json(m: Map<String, Value>) -> Result<String> {
    Ok(Value::Object(m).to_string())
}

fn count_between(path: &str, n: usize, min: usize, max: usize, what: &str) -> Result<()> {
    if n < min || n > max {
        return Err(Error::invalid(
            path,
            format!("must have {min} to {max} {what}, got {n}"),
        ));
    }
    Ok(())
}

/// OpenAI `{type: "predicate", instructions}` -> Yes/No. Answer `{"probability": p_true}`.
pub mod predicate {
    use super::*;

    /// A valid question (for the host's self-test).
    pub const EXAMPLE: &str =
        r#"{"type":"predicate","instructions":"Is the input about the weather?"}"#;

    /// Validate and name the options.
    pub fn compile(question: &str) -> Result<Compiled> {
        let q = parse_question(question)?;
        let f = Fields::of_map(&q, "", &["type", "instructions"])?;
        f.check_type("predicate")?;
        let instructions = openai_instructions(f.req("instructions")?, "instructions")?;
        Ok(yes_no(Some(instructions), None, None))
    }

    /// `{"probability": p_true}`.
    pub fn answer(question: &str, probs: &[f64]) -> Result<String> {
        let c = compile(question)?;
        check_probabilities(probs, c.options.len())?;
        answer_json(
            json!({"probability": num(probs[0])})
                .as_object()
                .cloned()
                .unwrap(),
        )
    }
}

/// SystemOne `{type: "noul", instructions?, criteria?: {true?, false?}}` -> Yes/No with the
/// outcome descriptions. Answer `{"noul": p_true}`.
pub mod noul {
    use super::*;

    /// A valid question (for the host's self-test).
    pub const EXAMPLE: &str = r#"{"type":"noul","instructions":"Is the input about the weather?","criteria":{"true":"It mentions weather","false":null}}"#;

    /// Validate and name the options.
    pub fn compile(question: &str) -> Result<Compiled> {
        let q = parse_question(question)?;
        let f = Fields::of_map(&q, "", &["type", "instructions", "criteria"])?;
        f.check_type("noul")?;
        let instructions = f
            .opt("instructions")
            .map(|v| content_text(v, "instructions"))
            .transpose()?;
        let (yes, no) = match f.opt("criteria") {
            None => (None, None),
            Some(c) => {
                let cf = Fields::new(c, "criteria", &["true", "false"])?;
                let yes = cf
                    .opt("true")
                    .map(|v| content_text(v, "criteria.true"))
                    .transpose()?;
                let no = cf
                    .opt("false")
                    .map(|v| content_text(v, "criteria.false"))
                    .transpose()?;
                (yes, no)
            }
        };
        if instructions.is_none() && yes.is_none() && no.is_none() {
            return Err(Error::invalid(
                "instructions",
                "required when criteria describes no outcome",
            ));
        }
        Ok(yes_no(instructions, yes, no))
    }

    /// `{"noul": p_true}`.
    pub fn answer(question: &str, probs: &[f64]) -> Result<String> {
        let c = compile(question)?;
        check_probabilities(probs, c.options.len())?;
        answer_json(json!({"noul": num(probs[0])}).as_object().cloned().unwrap())
    }
}

/// OpenAI `{type: "choice", instructions, choices: [{value: string|bool, description?}]}`.
pub mod openai_choice {
    use super::*;

    /// A valid question (for the host's self-test).
    pub const EXAMPLE: &str = r#"{"type":"choice","instructions":"Which colour is mentioned?","choices":[{"value":"red","description":"Red or crimson"},{"value":"blue"},{"value":false,"description":"No colour"}]}"#;

    fn parse(question: &str) -> Result<(Compiled, Vec<Value>)> {
        let q = parse_question(question)?;
        let f = Fields::of_map(&q, "", &["type", "instructions", "choices"])?;
        f.check_type("choice")?;
        let instructions = openai_instructions(f.req("instructions")?, "instructions")?;
        let choices = array(f.req("choices")?, "choices")?;
        count_between("choices", choices.len(), 2, MAX_CHOICES, "choices")?;
        let mut options = Vec::with_capacity(choices.len());
        let mut values = Vec::with_capacity(choices.len());
        for (i, c) in choices.iter().enumerate() {
            let p = index("choices", i);
            let cf = Fields::new(c, &p, &["value", "description"])?;
            let value = cf.req("value")?;
            let text = match value {
                Value::String(s) if s.is_empty() => {
                    return Err(Error::invalid(&cf.path_of("value"), "must not be empty"))
                }
                Value::String(s) => s.clone(),
                Value::Bool(b) => b.to_string(),
                other => {
                    return Err(Error::invalid(
                        &cf.path_of("value"),
                        format!("must be a string or a boolean, got {}", type_name(other)),
                    ))
                }
            };
            if values.contains(value) {
                return Err(Error::invalid(
                    &cf.path_of("value"),
                    format!("duplicate choice {value}"),
                ));
            }
            let description = cf.opt_str("description")?.map(str::to_string);
            options.push(Opt::new(value.to_string(), text, description));
            values.push(value.clone());
        }
        Ok((
            Compiled {
                instructions: Some(instructions),
                options,
            },
            values,
        ))
    }

    /// Validate and name the options (key = the value as JSON).
    pub fn compile(question: &str) -> Result<Compiled> {
        parse(question).map(|(c, _)| c)
    }

    /// `{"choice": value, "confidence": c, "probabilities": [{"value", "probability"}]}`.
    pub fn answer(question: &str, probs: &[f64]) -> Result<String> {
        let (c, values) = parse(question)?;
        check_probabilities(probs, c.options.len())?;
        let list: Vec<Value> = values
            .iter()
            .zip(probs)
            .map(|(v, p)| json!({"value": v, "probability": num(*p)}))
            .collect();
        let mut m = Map::new();
        m.insert("choice".into(), values[argmax(probs)].clone());
        m.insert("confidence".into(), num(confidence(probs)));
        m.insert("probabilities".into(), Value::Array(list));
        answer_json(m)
    }
}

/// SystemOne `{type: "choice", instructions?, criteria: {label: description|null}}`.
pub mod systemone_choice {
    use super::*;

    /// A valid question (for the host's self-test).
    pub const EXAMPLE: &str = r#"{"type":"choice","instructions":"Which colour is mentioned?","criteria":{"red":"Red or crimson","blue":null}}"#;

    /// Validate and name the options (key = the label as a JSON string).
    pub fn compile(question: &str) -> Result<Compiled> {
        let q = parse_question(question)?;
        let f = Fields::of_map(&q, "", &["type", "instructions", "criteria"])?;
        f.check_type("choice")?;
        let instructions = f
            .opt("instructions")
            .map(|v| content_text(v, "instructions"))
            .transpose()?;
        let criteria = match f.req("criteria")? {
            Value::Object(m) => m,
            other => {
                return Err(Error::invalid(
                    "criteria",
                    format!("must be an object, got {}", type_name(other)),
                ))
            }
        };
        count_between("criteria", criteria.len(), 2, MAX_CHOICES, "labels")?;
        let mut options = Vec::with_capacity(criteria.len());
        for (label, desc) in criteria {
            let p = child("criteria", label);
            if label.is_empty() {
                return Err(Error::invalid(&p, "a label must not be empty"));
            }
            let description = match desc {
                Value::Null => None,
                v => Some(content_text(v, &p)?),
            };
            options.push(Opt::new(
                Value::String(label.clone()).to_string(),
                label.clone(),
                description,
            ));
        }
        Ok(Compiled {
            instructions,
            options,
        })
    }

    /// `{"choice": label, "confidence": c, "probabilities": {label: p}}`.
    pub fn answer(question: &str, probs: &[f64]) -> Result<String> {
        let c = compile(question)?;
        check_probabilities(probs, c.options.len())?;
        let mut by_label = Map::new();
        for (o, p) in c.options.iter().zip(probs) {
            by_label.insert(o.text.clone(), num(*p));
        }
        let mut m = Map::new();
        m.insert(
            "choice".into(),
            Value::String(c.options[argmax(probs)].text.clone()),
        );
        m.insert("confidence".into(), num(confidence(probs)));
        m.insert("probabilities".into(), Value::Object(by_label));
        answer_json(m)
    }
}

/// Expected score `sum(i * p_i)`.
fn expected_score(probs: &[f64]) -> f64 {
    probs.iter().enumerate().map(|(i, p)| i as f64 * p).sum()
}

/// OpenAI `{type: "score", instructions, levels: [{label, description?}]}`; options keyed "0".."n-1".
pub mod openai_score {
    use super::*;

    /// A valid question (for the host's self-test).
    pub const EXAMPLE: &str = r#"{"type":"score","instructions":"How positive is the input?","levels":[{"label":"negative"},{"label":"neutral"},{"label":"positive","description":"Clearly happy"}]}"#;

    /// Validate and name the options.
    pub fn compile(question: &str) -> Result<Compiled> {
        let q = parse_question(question)?;
        let f = Fields::of_map(&q, "", &["type", "instructions", "levels"])?;
        f.check_type("score")?;
        let instructions = openai_instructions(f.req("instructions")?, "instructions")?;
        let levels = array(f.req("levels")?, "levels")?;
        count_between("levels", levels.len(), 2, MAX_LEVELS, "levels")?;
        let mut options: Vec<Opt> = Vec::with_capacity(levels.len());
        for (i, l) in levels.iter().enumerate() {
            let p = index("levels", i);
            let lf = Fields::new(l, &p, &["label", "description"])?;
            let label = lf.req_str("label")?;
            if options.iter().any(|o| o.text == label) {
                return Err(Error::invalid(
                    &lf.path_of("label"),
                    format!("duplicate level \"{label}\""),
                ));
            }
            let description = lf.opt_str("description")?.map(str::to_string);
            options.push(Opt::new(i.to_string(), label, description));
        }
        Ok(Compiled {
            instructions: Some(instructions),
            options,
        })
    }

    /// `{"score", "confidence", "probabilities": [{"label", "value": i, "probability"}]}`.
    pub fn answer(question: &str, probs: &[f64]) -> Result<String> {
        let c = compile(question)?;
        check_probabilities(probs, c.options.len())?;
        let list: Vec<Value> = c
            .options
            .iter()
            .zip(probs)
            .enumerate()
            .map(|(i, (o, p))| json!({"label": o.text, "value": i, "probability": num(*p)}))
            .collect();
        let mut m = Map::new();
        m.insert("score".into(), num(expected_score(probs)));
        m.insert("confidence".into(), num(confidence(probs)));
        m.insert("probabilities".into(), Value::Array(list));
        answer_json(m)
    }
}

/// SystemOne `{type: "score", instructions?, criteria: [Content, ...]}`; options keyed "0".."n-1".
pub mod systemone_score {
    use super::*;

    /// A valid question (for the host's self-test).
    pub const EXAMPLE: &str = r#"{"type":"score","instructions":"How positive is the input?","criteria":["negative","neutral",{"level":"positive","hint":"clearly happy"}]}"#;

    fn parse(question: &str) -> Result<(Compiled, Vec<Value>)> {
        let q = parse_question(question)?;
        let f = Fields::of_map(&q, "", &["type", "instructions", "criteria"])?;
        f.check_type("score")?;
        let instructions = f
            .opt("instructions")
            .map(|v| content_text(v, "instructions"))
            .transpose()?;
        let criteria = array(f.req("criteria")?, "criteria")?;
        count_between("criteria", criteria.len(), 2, MAX_LEVELS, "criteria")?;
        let mut options: Vec<Opt> = Vec::with_capacity(criteria.len());
        for (i, c) in criteria.iter().enumerate() {
            let p = index("criteria", i);
            let text = content_text(c, &p)?;
            if options.iter().any(|o| o.text == text) {
                return Err(Error::invalid(&p, "duplicate criterion"));
            }
            options.push(Opt::new(i.to_string(), text, None));
        }
        Ok((
            Compiled {
                instructions,
                options,
            },
            criteria.clone(),
        ))
    }

    /// Validate and name the options.
    pub fn compile(question: &str) -> Result<Compiled> {
        parse(question).map(|(c, _)| c)
    }

    /// `{"score", "confidence", "legend": {"0": criterion}, "probabilities": {"0": p}}`.
    pub fn answer(question: &str, probs: &[f64]) -> Result<String> {
        let (c, criteria) = parse(question)?;
        check_probabilities(probs, c.options.len())?;
        let mut legend = Map::new();
        let mut by_key = Map::new();
        for (i, (crit, p)) in criteria.into_iter().zip(probs).enumerate() {
            legend.insert(i.to_string(), crit);
            by_key.insert(i.to_string(), num(*p));
        }
        let mut m = Map::new();
        m.insert("score".into(), num(expected_score(probs)));
        m.insert("confidence".into(), num(confidence(probs)));
        m.insert("legend".into(), Value::Object(legend));
        m.insert("probabilities".into(), Value::Object(by_key));
        answer_json(m)
    }
}

/// Test-only: a predicate whose option keys are swapped (texts unchanged), so the same prompt
/// gives `probability = 1 - p`. Used to test hot replacement of `openai-predicate`.
pub mod predicate_inverted {
    use super::*;

    /// Same example as `predicate`.
    pub const EXAMPLE: &str = super::predicate::EXAMPLE;

    /// Options `[{key: "false", text: "Yes"}, {key: "true", text: "No"}]`.
    pub fn compile(question: &str) -> Result<Compiled> {
        let mut c = super::predicate::compile(question)?;
        c.options[0].key = "false".into();
        c.options[1].key = "true".into();
        Ok(c)
    }

    /// `{"probability": p of the option keyed "true"}` (the second one).
    pub fn answer(question: &str, probs: &[f64]) -> Result<String> {
        let c = compile(question)?;
        check_probabilities(probs, c.options.len())?;
        answer_json(
            json!({"probability": num(probs[1])})
                .as_object()
                .cloned()
                .unwrap(),
        )
    }
}

/// Test-only misbehaving plugins: they behave as a lenient Yes/No question for their `EXAMPLE`
/// (so the host's self-test passes and they can be installed) and misbehave in `compile` for any
/// other question.
pub mod misbehaving {
    use super::*;

    /// The example every misbehaving plugin handles correctly.
    pub const EXAMPLE: &str = r#"{"type":"predicate","instructions":"self-test"}"#;

    /// Is this the self-test question?
    pub fn is_example(question: &str) -> bool {
        question == EXAMPLE
    }

    /// The well-behaved compile (the misbehaving guests misbehave before calling it, except for
    /// [`EXAMPLE`]).
    pub fn compile(_question: &str) -> Result<Compiled> {
        Ok(yes_no(Some("self-test".into()), None, None))
    }

    /// `{"probability": p0}` for any question.
    pub fn answer(_question: &str, probs: &[f64]) -> Result<String> {
        check_probabilities(probs, 2)?;
        answer_json(
            json!({"probability": num(probs[0])})
                .as_object()
                .cloned()
                .unwrap(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Value {
        serde_json::from_str(s).unwrap()
    }

    fn invalid(r: Result<Compiled>) -> String {
        match r {
            Err(Error::Invalid(m)) => m,
            other => panic!("expected invalid-question, got {other:?}"),
        }
    }

    #[test]
    fn examples_compile_and_answer() {
        type C = fn(&str) -> Result<Compiled>;
        type A = fn(&str, &[f64]) -> Result<String>;
        let all: [(&str, C, A); 7] = [
            (predicate::EXAMPLE, predicate::compile, predicate::answer),
            (noul::EXAMPLE, noul::compile, noul::answer),
            (
                openai_choice::EXAMPLE,
                openai_choice::compile,
                openai_choice::answer,
            ),
            (
                systemone_choice::EXAMPLE,
                systemone_choice::compile,
                systemone_choice::answer,
            ),
            (
                openai_score::EXAMPLE,
                openai_score::compile,
                openai_score::answer,
            ),
            (
                systemone_score::EXAMPLE,
                systemone_score::compile,
                systemone_score::answer,
            ),
            (
                predicate_inverted::EXAMPLE,
                predicate_inverted::compile,
                predicate_inverted::answer,
            ),
        ];
        for (ex, compile, answer) in all {
            let c = compile(ex).unwrap();
            let n = c.options.len();
            let a = answer(ex, &vec![1.0 / n as f64; n]).unwrap();
            assert!(parse(&a).is_object(), "{a}");
            assert!(matches!(
                answer(ex, &vec![0.5; n + 1]),
                Err(Error::Failure(_))
            ));
        }
    }

    #[test]
    fn predicate_equals_noul() {
        let a =
            predicate::compile(r#"{"type":"predicate","instructions":"Is it raining?"}"#).unwrap();
        let b = noul::compile(r#"{"type":"noul","instructions":"Is it raining?"}"#).unwrap();
        assert_eq!(a, b);
        let c = noul::compile(r#"{"type":"noul","instructions":"Is it raining?","criteria":{"true":null,"false":null}}"#).unwrap();
        assert_eq!(a, c);
        assert_eq!(a.options[0], Opt::new("true", "Yes", None));
        assert_eq!(
            predicate::answer(r#"{"type":"predicate","instructions":"x"}"#, &[0.25, 0.75]).unwrap(),
            r#"{"probability":0.25}"#
        );
        assert_eq!(
            noul::answer(r#"{"type":"noul","instructions":"x"}"#, &[0.25, 0.75]).unwrap(),
            r#"{"noul":0.25}"#
        );
    }

    #[test]
    fn noul_needs_instructions_or_outcome() {
        assert_eq!(
            invalid(noul::compile(r#"{"type":"noul"}"#)),
            "instructions: required when criteria describes no outcome"
        );
        let c = noul::compile(r#"{"type":"noul","criteria":{"true":{"rain":true}}}"#).unwrap();
        assert_eq!(c.instructions, None);
        assert_eq!(
            c.options[0].description.as_deref(),
            Some(r#"{"rain":true}"#)
        );
        assert_eq!(
            invalid(noul::compile(r#"{"type":"noul","criteria":{"maybe":"x"}}"#)),
            "criteria.maybe: unknown field (expected one of: true, false)"
        );
    }

    #[test]
    fn choice_formats_agree() {
        let a = openai_choice::compile(
            r#"{"type":"choice","instructions":"Colour?","choices":[{"value":"red","description":"Red"},{"value":"blue"}]}"#,
        )
        .unwrap();
        let b = systemone_choice::compile(
            r#"{"type":"choice","instructions":"Colour?","criteria":{"red":"Red","blue":null}}"#,
        )
        .unwrap();
        assert_eq!(a, b);
        assert_eq!(a.options[0], Opt::new("\"red\"", "red", Some("Red".into())));
    }

    #[test]
    fn openai_choice_typed_values() {
        let q =
            r#"{"type":"choice","instructions":"?","choices":[{"value":"true"},{"value":true}]}"#;
        let c = openai_choice::compile(q).unwrap();
        assert_eq!(c.options[0].key, "\"true\"");
        assert_eq!(c.options[1].key, "true");
        let a = parse(&openai_choice::answer(q, &[0.2, 0.8]).unwrap());
        assert_eq!(a["choice"], Value::Bool(true));
        assert!((a["confidence"].as_f64().unwrap() - 0.6).abs() < 1e-12);
        assert_eq!(a["probabilities"][0]["value"], Value::String("true".into()));
        let dup = r#"{"type":"choice","instructions":"?","choices":[{"value":"a"},{"value":"a"}]}"#;
        assert_eq!(
            invalid(openai_choice::compile(dup)),
            "choices[1].value: duplicate choice \"a\""
        );
        let num = r#"{"type":"choice","instructions":"?","choices":[{"value":1},{"value":"a"}]}"#;
        assert_eq!(
            invalid(openai_choice::compile(num)),
            "choices[0].value: must be a string or a boolean, got a number"
        );
        let one = r#"{"type":"choice","instructions":"?","choices":[{"value":"a"}]}"#;
        assert_eq!(
            invalid(openai_choice::compile(one)),
            "choices: must have 2 to 255 choices, got 1"
        );
        let empty = r#"{"type":"choice","instructions":"?","choices":[{"value":"a","description":""},{"value":"b"}]}"#;
        assert_eq!(
            invalid(openai_choice::compile(empty)),
            "choices[0].description: must not be empty"
        );
    }

    #[test]
    fn systemone_choice_answer() {
        let q = r#"{"type":"choice","criteria":{"red":null,"blue":{"shade":"navy"}}}"#;
        let c = systemone_choice::compile(q).unwrap();
        assert_eq!(
            c.options[1].description.as_deref(),
            Some(r#"{"shade":"navy"}"#)
        );
        let a = systemone_choice::answer(q, &[0.1, 0.9]).unwrap();
        assert!(a.starts_with(r#"{"choice":"blue","confidence":0.8"#), "{a}");
        assert!(
            a.ends_with(r#""probabilities":{"red":0.1,"blue":0.9}}"#),
            "{a}"
        );
        assert_eq!(
            invalid(systemone_choice::compile(
                r#"{"type":"choice","criteria":{"a":null}}"#
            )),
            "criteria: must have 2 to 255 labels, got 1"
        );
    }

    #[test]
    fn score_formats_agree() {
        let a = openai_score::compile(
            r#"{"type":"score","instructions":"How?","levels":[{"label":"bad"},{"label":"good"}]}"#,
        )
        .unwrap();
        let b = systemone_score::compile(
            r#"{"type":"score","instructions":"How?","criteria":["bad","good"]}"#,
        )
        .unwrap();
        assert_eq!(a, b);
        assert_eq!(a.options[1], Opt::new("1", "good", None));
    }

    #[test]
    fn score_answers() {
        let q = r#"{"type":"score","instructions":"How?","levels":[{"label":"bad"},{"label":"ok"},{"label":"good"}]}"#;
        let a = parse(&openai_score::answer(q, &[0.2, 0.3, 0.5]).unwrap());
        assert!((a["score"].as_f64().unwrap() - 1.3).abs() < 1e-12);
        assert_eq!(a["probabilities"][2]["label"], "good");
        assert_eq!(a["probabilities"][2]["value"], 2);
        let q = r#"{"type":"score","criteria":["bad",{"k":1}]}"#;
        let a = parse(&systemone_score::answer(q, &[0.25, 0.75]).unwrap());
        assert_eq!(a["legend"]["1"], serde_json::json!({"k":1}));
        assert_eq!(a["probabilities"]["0"], 0.25);
        assert!((a["score"].as_f64().unwrap() - 0.75).abs() < 1e-12);
        let many = format!(
            r#"{{"type":"score","criteria":[{}]}}"#,
            (0..11)
                .map(|i| format!("\"l{i}\""))
                .collect::<Vec<_>>()
                .join(",")
        );
        assert_eq!(
            invalid(systemone_score::compile(&many)),
            "criteria: must have 2 to 10 criteria, got 11"
        );
    }

    #[test]
    fn strictness() {
        assert_eq!(
            invalid(predicate::compile(
                r#"{"type":"predicate","instructions":"x","extra":1}"#
            )),
            "extra: unknown field (expected one of: type, instructions)"
        );
        assert_eq!(
            invalid(predicate::compile(
                r#"{"type":"choice","instructions":"x"}"#
            )),
            "type: must be \"predicate\", got \"choice\""
        );
        assert_eq!(
            invalid(predicate::compile(r#"{"type":"predicate"}"#)),
            "instructions: required"
        );
        assert_eq!(
            invalid(predicate::compile(
                r#"{"type":"predicate","instructions":""}"#
            )),
            "instructions: must not be empty"
        );
        assert_eq!(
            invalid(predicate::compile("[1]")),
            "question: must be a JSON object, got an array"
        );
        assert!(invalid(predicate::compile("{")).starts_with("question: not valid JSON"));
    }

    #[test]
    fn inverted_predicate() {
        let q = predicate::EXAMPLE;
        assert_eq!(
            predicate_inverted::answer(q, &[0.25, 0.75]).unwrap(),
            r#"{"probability":0.75}"#
        );
        assert_eq!(
            predicate_inverted::compile(q).unwrap().options[0].text,
            "Yes"
        );
    }
}
