//! `direct-options`: the default renderer. A system message sets the task; the user message
//! shows the input, the question and the labelled options, and asks for one label.

wit_bindgen::generate!({ path: "../../wit", world: "renderer-plugin" });

use decide::plugin::types::{ChatMessage, CompiledQuestion, PluginError, PluginInfo};
use decide_guest_common::{render, Compiled, Error, Opt};
use exports::decide::plugin::renderer::Guest;

struct Plugin;

impl Guest for Plugin {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "direct-options".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: "Lists the options with their labels and asks for exactly one label."
                .into(),
        }
    }

    fn render(
        state: String,
        question: CompiledQuestion,
        labels: Vec<String>,
    ) -> Result<Vec<ChatMessage>, PluginError> {
        let q = Compiled {
            instructions: question.instructions,
            options: question
                .options
                .into_iter()
                .map(|o| Opt::new(o.key, o.text, o.description))
                .collect(),
        };
        match render::direct_options(&state, &q, &labels) {
            Ok(m) => Ok(m
                .into_iter()
                .map(|(role, content)| ChatMessage { role, content })
                .collect()),
            Err(Error::Invalid(m)) => Err(PluginError::InvalidQuestion(m)),
            Err(Error::Failure(m)) => Err(PluginError::Failure(m)),
        }
    }
}

export!(Plugin);
