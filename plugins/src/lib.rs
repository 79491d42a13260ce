//! Plugins: question types, prompt renderers and calibration policies as sandboxed
//! WebAssembly components (the contract is `wit/plugin.wit`, package `decide:plugin`).
//!
//! Design choices:
//! - **One engine, a fresh instance per request.** Components are compiled once (and cached on
//!   disk by content hash); a call instantiates a pre-linked
//!   [`wasmtime::component::InstancePre`] in a new store, and the pipeline's calls for one
//!   request keep their instances in a [`Session`] for the request's later calls of the same
//!   plugin (an instantiation costs more than a small call). Nothing outlives the request, so
//!   requests and tenants share no plugin state; a call that fails on a kept instance is run
//!   again on a fresh one and the instance dropped, so a trap leaves nothing behind and fails
//!   only its question; concurrent calls share nothing.
//! - **Sandbox.** Components built for `wasm32-wasip2` import WASI through `std`, so WASI is
//!   linked, but with nothing behind it: no arguments, environment, preopened directories,
//!   network or stdin; stdout is discarded and stderr captured (it carries panic messages into
//!   failure messages); clocks are frozen and randomness fixed, so plugins are deterministic.
//!   Each call runs under a memory cap ([`RuntimeConfig::memory_limit_bytes`]) and a deadline
//!   enforced by epoch interruption (a thread ticks the epoch every 10 ms). Inputs and outputs
//!   are size-checked by the host ([`runtime::limits`]).
//! - **Errors are typed.** A plugin's `invalid-question` becomes
//!   [`PluginCallError::InvalidQuestion`] (the caller's fault: 400/422); everything else (a
//!   `failure`, a trap, the deadline, the memory cap, an oversize output) becomes
//!   [`PluginCallError::Failed`], whose message names the plugin and the cause, so the host
//!   refuses that one question.
//! - **Hot replacement.** [`PluginRegistry`] keys plugins by name; a new file is validated,
//!   precompiled and self-tested ([`check`]) before its `Arc` is swapped in; requests in
//!   flight keep the `Arc` they took.
//! - **Tenants' own plugins.** Each tenant has a layer of its own plugins above the
//!   operator's and the built-ins; a request resolves its tenant's first. A tenant's plugins
//!   run under its own memory cap and deadline ([`CallLimits`]), at most the server's.
//!
//! Entry points: [`PluginRegistry::start`] with a [`RuntimeConfig`], then
//! [`PluginRegistry::question_type`], [`PluginRegistry::renderer`],
//! [`PluginRegistry::calibration`] and [`PluginRegistry::list`].

mod bindings;
pub mod check;
mod plugin;
mod registry;
pub mod runtime;
mod slots;
mod tenants;

#[cfg(test)]
mod tests;

use serde::Serialize;

pub use plugin::{Calibration, LoadStats, Plugin, QuestionType, Renderer, SUPPORTED_VERSIONS};
pub use registry::{
    stored_component, Change, ComponentStore, PluginRegistry, PluginSource, PluginSourceName,
    PluginSummary, StoredPlugin, MAX_COMPONENT_BYTES,
};
pub use runtime::{
    default_cache_dir, CacheOutcome, CallLimits, PluginRuntime, RuntimeConfig, Session,
    SharedLimits,
};
pub use tenants::{tenant_call_limits, LimitsLookup, TenantPluginLimits};

/// The built-in plugins embedded by `plugins/build.rs`.
pub mod builtin {
    use super::PluginKind;
    include!(concat!(env!("OUT_DIR"), "/builtin_plugins.rs"));

    /// Where the build put every guest it built, test-only ones included, as `<name>.wasm`:
    /// tests copy plugins from here.
    pub const TEST_GUESTS_DIR: &str = env!("DECIDE_TEST_GUESTS_DIR");
}

/// The three kinds of plugin, one per WIT world (a contextual-calibration policy is a
/// calibration policy).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum PluginKind {
    /// World `question-type-plugin`: validates a question, names its options, answers.
    QuestionType,
    /// World `renderer-plugin`: turns a compiled question into chat messages.
    Renderer,
    /// World `calibration-plugin` (or `contextual-calibration-plugin`, which also exports
    /// `content-free`): maps option scores to probabilities.
    Calibration,
}

impl std::fmt::Display for PluginKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PluginKind::QuestionType => "question-type",
            PluginKind::Renderer => "renderer",
            PluginKind::Calibration => "calibration",
        })
    }
}

/// Why a plugin call did not give a result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PluginCallError {
    /// The caller's input is wrong: `<field path>: <what is wrong>` (path within the question).
    #[error("{0}")]
    InvalidQuestion(String),
    /// The plugin failed (its own `failure`, a trap, the deadline, the memory cap, an oversize
    /// output). `message` is complete and names the plugin, e.g. "plugin spin-question exceeded
    /// its 1000 ms deadline (setting --plugin-timeout-ms)".
    #[error("{message}")]
    Failed {
        /// The registry name of the plugin.
        plugin: String,
        /// What went wrong, naming the plugin and the cause.
        message: String,
    },
}

/// What a plugin says about itself (WIT `plugin-info`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PluginInfo {
    /// The plugin's own name for itself (informative; the registry keys by file name).
    pub name: String,
    /// The plugin's own version.
    pub version: String,
    /// One line on what it does.
    pub description: String,
}

/// One option of a closed option set (WIT `option-def`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OptionDef {
    /// How the option is named in answers: a JSON value as text (`"red"`, `true`, `3`).
    pub key: String,
    /// What the model is shown.
    pub text: String,
    /// Optional longer description shown next to the text.
    pub description: Option<String>,
}

/// A question reduced to instructions and a closed option set (WIT `compiled-question`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CompiledQuestion {
    /// What to ask about the state; `None` when the options speak for themselves.
    pub instructions: Option<String>,
    /// The options, in the order labels are assigned.
    pub options: Vec<OptionDef>,
}

/// One chat message from a renderer (WIT `chat-message`): the model's own type, so rendered
/// messages go to the chat template as they are (the host checks the role).
pub use decide_models::ChatMessage;

/// One labelled observation for fitting a calibration policy (WIT `labelled-scores`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LabelledScores {
    /// Raw option scores (log-probabilities at the answer position).
    pub scores: Vec<f64>,
    /// Index of the correct option.
    pub expected: u32,
}
