//! `hog-question` (test only): compile allocates until it exceeds the host's memory cap.
//!
//! It behaves for its own example (so the host's self-test passes and it can be installed) and
//! misbehaves in `compile` for every other question.

wit_bindgen::generate!({ path: "../../../wit", world: "question-type-plugin" });

use decide::plugin::types::{CompiledQuestion, OptionDef, PluginError, PluginInfo};
use decide_guest_common::{questions::misbehaving as q, Error};
use exports::decide::plugin::question_type::Guest;

struct Plugin;

fn misbehave() -> ! {
    let mut hoard: Vec<Vec<u8>> = Vec::new();
    loop {
        let mut block = vec![0u8; 1 << 20];
        block[4096] = 1;
        hoard.push(std::hint::black_box(block));
    }
}

impl Guest for Plugin {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "hog-question".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: "compile allocates until it exceeds the host's memory cap.".into(),
        }
    }

    fn example() -> String {
        q::EXAMPLE.into()
    }

    fn compile(question: String) -> Result<CompiledQuestion, PluginError> {
        if !q::is_example(&question) {
            misbehave();
        }
        let c = q::compile_ok();
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

    fn answer(_question: String, probabilities: Vec<f64>) -> Result<String, PluginError> {
        q::answer(&probabilities).map_err(|e| match e {
            Error::Invalid(m) => PluginError::InvalidQuestion(m),
            Error::Failure(m) => PluginError::Failure(m),
        })
    }
}

export!(Plugin);
