//! `broken-example` (test only): a question type whose `example()` its own `compile()` rejects,
//! so it loads and links but fails the host's self-test; it must never replace a good plugin.

wit_bindgen::generate!({ path: "../../../wit", world: "question-type-plugin" });

use decide::plugin::types::{CompiledQuestion, OptionDef, PluginError, PluginInfo};
use decide_guest_common::{questions::predicate as q, Error};
use exports::decide::plugin::question_type::Guest;

struct Plugin;

fn err(e: Error) -> PluginError {
    match e {
        Error::Invalid(m) => PluginError::InvalidQuestion(m),
        Error::Failure(m) => PluginError::Failure(m),
    }
}

impl Guest for Plugin {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "broken-example".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: "Test only: fails the host self-test.".into(),
        }
    }

    fn example() -> String {
        r#"{"type":"predicate"}"#.into()
    }

    fn compile(question: String) -> Result<CompiledQuestion, PluginError> {
        let c = q::compile(&question).map_err(err)?;
        Ok(CompiledQuestion {
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
        })
    }

    fn answer(question: String, probabilities: Vec<f64>) -> Result<String, PluginError> {
        q::answer(&question, &probabilities).map_err(err)
    }
}

export!(Plugin);
