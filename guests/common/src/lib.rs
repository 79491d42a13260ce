//! Shared logic of decide's built-in plugins.
//!
//! Every built-in plugin crate is a thin `wit-bindgen` wrapper over a module of this crate, so
//! that the logic (validation, option sets, answers, prompt text, calibration maths) is plain
//! Rust with native unit tests, and so that the two wire formats (OpenAI-style and
//! SystemOne-style) share one code path to the compiled form: the same question compiles to the
//! same option set, hence gets the same probabilities, on both endpoints.
//!
//! Nothing here knows about wasm: the types mirror the WIT records (`option-def`,
//! `compiled-question`, `plugin-error`) and the wrappers convert.

pub mod bias_temperature;
pub mod contextual;
pub mod json;
pub mod questions;
pub mod render;
pub mod temperature;

/// Why a call failed; mirrors WIT `plugin-error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The caller's input is wrong: "<field path>: <what is wrong>".
    Invalid(String),
    /// The plugin could not do its job (bad probabilities from the host, unsupported case).
    Failure(String),
}

impl Error {
    /// An `Invalid` error for the field at `path`.
    pub fn invalid(path: &str, what: impl std::fmt::Display) -> Self {
        Error::Invalid(format!("{path}: {what}"))
    }
}

/// Result alias for plugin logic.
pub type Result<T> = std::result::Result<T, Error>;

/// One option of a closed option set; mirrors WIT `option-def`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opt {
    /// How the option is named in answers: a JSON value as text.
    pub key: String,
    /// What the model is shown.
    pub text: String,
    /// Optional longer description.
    pub description: Option<String>,
}

impl Opt {
    /// Shorthand constructor.
    pub fn new(
        key: impl Into<String>,
        text: impl Into<String>,
        description: Option<String>,
    ) -> Self {
        Opt {
            key: key.into(),
            text: text.into(),
            description,
        }
    }
}

/// A compiled question; mirrors WIT `compiled-question`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compiled {
    /// What to ask about the state.
    pub instructions: Option<String>,
    /// The closed option set, in label order.
    pub options: Vec<Opt>,
}

/// Confidence of a distribution: `(k * max - 1) / (k - 1)`, 0 for uniform, 1 for certain.
///
/// For `k < 2` there is no choice to be confident about; returns 1.
pub fn confidence(probs: &[f64]) -> f64 {
    let k = probs.len() as f64;
    if probs.len() < 2 {
        return 1.0;
    }
    let max = probs.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    (k * max - 1.0) / (k - 1.0)
}

/// Index of the largest probability (the first one on ties).
pub fn argmax(probs: &[f64]) -> usize {
    let mut best = 0;
    for (i, p) in probs.iter().enumerate() {
        if *p > probs[best] {
            best = i;
        }
    }
    best
}

/// Check that the host sent one finite probability per option.
pub fn check_probabilities(probs: &[f64], options: usize) -> Result<()> {
    if probs.len() != options {
        return Err(Error::Failure(format!(
            "expected {options} probabilities (one per option), got {}",
            probs.len()
        )));
    }
    if let Some(i) = probs.iter().position(|p| !p.is_finite()) {
        return Err(Error::Failure(format!(
            "probability {i} is not finite ({})",
            probs[i]
        )));
    }
    Ok(())
}

/// A JSON number for `x` (finite by `check_probabilities`; 0 otherwise so output stays valid JSON).
pub fn num(x: f64) -> serde_json::Value {
    serde_json::Number::from_f64(x)
        .map(serde_json::Value::Number)
        .unwrap_or(serde_json::Value::from(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confidence_endpoints() {
        assert_eq!(confidence(&[0.5, 0.5]), 0.0);
        assert_eq!(confidence(&[1.0, 0.0, 0.0]), 1.0);
        assert!((confidence(&[0.7, 0.3]) - 0.4).abs() < 1e-12);
    }

    #[test]
    fn argmax_first_on_ties() {
        assert_eq!(argmax(&[0.2, 0.4, 0.4]), 1);
    }

    #[test]
    fn probabilities_checked() {
        assert!(check_probabilities(&[0.5, 0.5], 2).is_ok());
        assert!(matches!(
            check_probabilities(&[1.0], 2),
            Err(Error::Failure(_))
        ));
        assert!(matches!(
            check_probabilities(&[f64::NAN, 0.5], 2),
            Err(Error::Failure(_))
        ));
    }
}

/// Defines a crate's whole question-type plugin component from one module of [`questions`]
/// (its `EXAMPLE`, `compile` and `answer`): the wit-bindgen glue is the same for every
/// question type, so each guest crate is one invocation of this macro.
///
/// The invoking crate depends on `wit-bindgen`. Built-ins sit at `guests/NAME/`; crates elsewhere
/// (the test guests) pass `wit: "../../../wit"` and may pass `before_compile: FN`, a
/// `fn(&str)` run on the question before `compile` (where the test guests misbehave).
#[macro_export]
macro_rules! question_type_plugin {
    (module: $module:ident, name: $name:literal, description: $description:literal $(,)?) => {
        $crate::question_type_plugin! {
            wit: "../../wit", module: $module, name: $name, description: $description,
            before_compile: |_question: &str| {},
        }
    };
    (wit: $wit:tt, module: $module:ident, name: $name:literal, description: $description:literal $(,)?) => {
        $crate::question_type_plugin! {
            wit: $wit, module: $module, name: $name, description: $description,
            before_compile: |_question: &str| {},
        }
    };
    (wit: $wit:tt, module: $module:ident, name: $name:literal, description: $description:literal,
     before_compile: $before:expr $(,)?) => {
        wit_bindgen::generate!({ path: $wit, world: "question-type-plugin" });

        use decide::plugin::types::{CompiledQuestion, OptionDef, PluginError, PluginInfo};
        use exports::decide::plugin::question_type::Guest;
        use $crate::{questions::$module as q, Compiled, Error};

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
                    name: $name.into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    description: $description.into(),
                }
            }

            fn example() -> String {
                q::EXAMPLE.into()
            }

            fn compile(question: String) -> Result<CompiledQuestion, PluginError> {
                let before: fn(&str) = $before;
                before(&question);
                q::compile(&question).map(to_wit).map_err(err)
            }

            fn answer(question: String, probabilities: Vec<f64>) -> Result<String, PluginError> {
                q::answer(&question, &probabilities).map_err(err)
            }
        }

        export!(Plugin);
    };
}

/// Defines a crate's whole calibration-policy plugin component from one module of this crate
/// (its `default_params`, `fit` and `apply`), as [`question_type_plugin!`] does for question
/// types: the wit-bindgen glue is the same for every policy.
///
/// Built-ins sit at `guests/NAME/`; crates elsewhere pass `wit: "PATH"` (the test guest built
/// against an older contract passes `wit: "../../../wit/compat/0.1.0"`). A policy that also
/// exports `content-free` (world `contextual-calibration-plugin`, added in 0.1.1) passes
/// `neutral_states: true`, and its module has `fn neutral_states() -> Vec<String>`.
#[macro_export]
macro_rules! calibration_plugin {
    (module: $module:ident, name: $name:literal, description: $description:literal $(,)?) => {
        $crate::calibration_plugin! {
            wit: "../../wit", module: $module, name: $name, description: $description,
        }
    };
    (wit: $wit:tt, module: $module:ident, name: $name:literal, description: $description:literal $(,)?) => {
        wit_bindgen::generate!({ path: $wit, world: "calibration-plugin" });
        $crate::calibration_plugin!(@calibration $module, $name, $description);
        export!(Plugin);
    };
    (module: $module:ident, name: $name:literal, description: $description:literal,
     neutral_states: true $(,)?) => {
        wit_bindgen::generate!({ path: "../../wit", world: "contextual-calibration-plugin" });
        $crate::calibration_plugin!(@calibration $module, $name, $description);

        impl exports::decide::plugin::content_free::Guest for Plugin {
            fn neutral_states() -> Vec<String> {
                policy::neutral_states()
            }
        }

        export!(Plugin);
    };
    (@calibration $module:ident, $name:literal, $description:literal) => {
        use decide::plugin::types::{LabelledScores, PluginError, PluginInfo};
        use exports::decide::plugin::calibration::Guest;
        use $crate::{$module as policy, Error};

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
                    name: $name.into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    description: $description.into(),
                }
            }

            fn default_params(temperature: f64) -> Vec<f64> {
                policy::default_params(temperature)
            }

            fn fit(samples: Vec<LabelledScores>) -> Result<Vec<f64>, PluginError> {
                let samples: Vec<(Vec<f64>, u32)> = samples
                    .into_iter()
                    .map(|s| (s.scores, s.expected))
                    .collect();
                policy::fit(&samples).map_err(err)
            }

            fn apply(scores: Vec<f64>, params: Vec<f64>) -> Result<Vec<f64>, PluginError> {
                policy::apply(&scores, &params).map_err(err)
            }
        }
    };
}

/// Defines a crate's whole renderer plugin component from one function of [`render`] (a
/// `fn(&str, &Compiled, &[String]) -> Result<Vec<(String, String)>>`), as
/// [`question_type_plugin!`] does for question types: the wit-bindgen glue is the same for
/// every renderer.
#[macro_export]
macro_rules! renderer_plugin {
    (function: $function:ident, name: $name:literal, description: $description:literal $(,)?) => {
        wit_bindgen::generate!({ path: "../../wit", world: "renderer-plugin" });

        use decide::plugin::types::{ChatMessage, CompiledQuestion, PluginError, PluginInfo};
        use exports::decide::plugin::renderer::Guest;
        use $crate::{render, Compiled, Error, Opt};

        struct Plugin;

        impl Guest for Plugin {
            fn info() -> PluginInfo {
                PluginInfo {
                    name: $name.into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    description: $description.into(),
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
                match render::$function(&state, &q, &labels) {
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
    };
}
