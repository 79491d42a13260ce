//! `predicate-inverted`: Test only: openai-predicate with its option keys swapped (probability 1 - p).

wit_bindgen::generate!({ path: "../../../wit", world: "question-type-plugin" });

use decide::plugin::types::{CompiledQuestion, OptionDef, PluginError, PluginInfo};
use decide_guest_common::{questions::predicate_inverted as q, Compiled, Error};
use exports::decide::plugin::question_type::Guest;

struct Plugin;

fn to_wit(c: Compiled) -> CompiledQuestion {
    CompiledQuestion {
        instructions: c.instructions,
        options: c
            .options
            .into_iter()
            .map(|o| OptionDef {
                key: o.key,
                text: o.text,
                description: o.description,
            })
            .collect(),
    }
}

fn err(e: Error) -> PluginError {
    match e {
        Error::Invalid(m) => PluginError::InvalidQuestion(m),
        Error::Failure(m) => PluginError::Failure(m),
    }
}

impl Guest for Plugin {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "predicate-inverted".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description:
                "Test only: openai-predicate with its option keys swapped (probability 1 - p)."
                    .into(),
        }
    }

    fn example() -> String {
        q::EXAMPLE.into()
    }

    fn compile(question: String) -> Result<CompiledQuestion, PluginError> {
        q::compile(&question).map(to_wit).map_err(err)
    }

    fn answer(question: String, probabilities: Vec<f64>) -> Result<String, PluginError> {
        q::answer(&question, &probabilities).map_err(err)
    }
}

export!(Plugin);
