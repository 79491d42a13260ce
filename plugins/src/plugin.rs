//! Typed wrappers over the plugin worlds: what the pipeline calls.
//!
//! Contract versions: the bindings are generated from the current `wit/plugin.wit` (0.1.1);
//! wasmtime looks an export up by its semver-compatible name, so a component built against
//! 0.1.0 (exporting `decide:plugin/calibration@0.1.0`) binds to the same calls. A calibration
//! policy that also exports `content-free` (0.1.1) names neutral states, kept at load
//! ([`Calibration::neutral_states`]), and takes 2k scores (see `wit/plugin.wit`).
//!
//! A wrapper holds a compiled component pre-linked for instantiation ([`InstancePre`]); a call
//! instantiates it in a fresh store, or, for the `*_in` calls of a request, runs on an instance
//! the request's [`Session`] kept from an earlier call of the same plugin. A trap, a deadline or
//! a memory cap hit fails only that call (a call that fails on a kept instance is run again on
//! a fresh one), and concurrent calls share nothing. The host checks the size of every input
//! and output against [`limits`].

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Map, Value};
use wasmtime::component::Component;
use wasmtime::Store;

use super::bindings::{self, types as wit};
use super::runtime::{
    limits, sha256_hex, truncate, CacheOutcome, PluginId, PluginRuntime, PluginState, Session,
    SharedLimits,
};
use super::{
    ChatMessage, CompiledQuestion, LabelledScores, OptionDef, PluginCallError, PluginInfo,
    PluginKind,
};

/// The exported interface (without version) of each kind.
const QUESTION_TYPE_EXPORT: &str = "decide:plugin/question-type";
const RENDERER_EXPORT: &str = "decide:plugin/renderer";
const CALIBRATION_EXPORT: &str = "decide:plugin/calibration";
/// The interface a contextual-calibration policy exports besides `calibration` (added in 0.1.1).
const CONTENT_FREE_EXPORT: &str = "decide:plugin/content-free";
/// The contract version that added `content-free`.
const CONTENT_FREE_SINCE: &str = "0.1.1";

/// Most neutral states a content-free policy may name (each is one more read per question).
pub const MAX_NEUTRAL_STATES: usize = 8;
/// Longest neutral state, in bytes.
pub const MAX_NEUTRAL_STATE_BYTES: usize = 4096;

/// The exports each kind's calls go through.
type QuestionTypeExports = bindings::question_type::exports::decide::plugin::question_type::Guest;
type RendererExports = bindings::renderer::exports::decide::plugin::renderer::Guest;
type CalibrationExports = bindings::calibration::exports::decide::plugin::calibration::Guest;

/// Contract versions this host links (`decide:plugin@<version>`), oldest first; the last is the
/// current `wit/plugin.wit`.
pub const SUPPORTED_VERSIONS: &[&str] = &["0.1.0", "0.1.1"];

/// The current contract version (what the bindings are generated from).
fn current_version() -> &'static str {
    SUPPORTED_VERSIONS[SUPPORTED_VERSIONS.len() - 1]
}

/// What every wrapper knows about its plugin.
#[derive(Debug, Clone)]
pub(crate) struct Meta {
    pub name: String,
    pub info: PluginInfo,
    pub sha256: String,
    /// The contract version it exports (`decide:plugin@<contract>`).
    pub contract: String,
    /// The name and an id of this loaded plugin, for calls and [`Session`]s.
    pub call: PluginId,
}

/// A question-type plugin.
pub struct QuestionType {
    meta: Meta,
    runtime: Arc<PluginRuntime>,
    pre: bindings::question_type::QuestionTypePluginPre<super::runtime::PluginState>,
}

/// A prompt-renderer plugin.
pub struct Renderer {
    meta: Meta,
    runtime: Arc<PluginRuntime>,
    pre: bindings::renderer::RendererPluginPre<super::runtime::PluginState>,
}

/// A calibration-policy plugin.
pub struct Calibration {
    meta: Meta,
    runtime: Arc<PluginRuntime>,
    pre: bindings::calibration::CalibrationPluginPre<super::runtime::PluginState>,
    /// What `content-free.neutral-states` returned at load; `None` when it is not exported.
    neutral_states: Option<Vec<String>>,
}

/// A loaded plugin of any kind.
#[derive(Clone)]
pub enum Plugin {
    /// A question type.
    QuestionType(Arc<QuestionType>),
    /// A renderer.
    Renderer(Arc<Renderer>),
    /// A calibration policy.
    Calibration(Arc<Calibration>),
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Plugin({} {}, sha256 {})",
            self.kind(),
            self.name(),
            &self.sha256()[..12]
        )
    }
}

macro_rules! meta_accessors {
    ($t:ty) => {
        impl $t {
            /// The name the plugin is registered under (its file name).
            pub fn name(&self) -> &str {
                &self.meta.name
            }
            /// What the plugin says about itself.
            pub fn info(&self) -> &PluginInfo {
                &self.meta.info
            }
            /// Hex SHA-256 of the component bytes.
            pub fn sha256(&self) -> &str {
                &self.meta.sha256
            }
        }
        impl std::fmt::Debug for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($t))
                    .field("meta", &self.meta)
                    .finish_non_exhaustive()
            }
        }
    };
}
meta_accessors!(QuestionType);
meta_accessors!(Renderer);
meta_accessors!(Calibration);

impl Plugin {
    /// Its kind.
    pub fn kind(&self) -> PluginKind {
        match self {
            Plugin::QuestionType(_) => PluginKind::QuestionType,
            Plugin::Renderer(_) => PluginKind::Renderer,
            Plugin::Calibration(_) => PluginKind::Calibration,
        }
    }

    pub(crate) fn meta(&self) -> &Meta {
        match self {
            Plugin::QuestionType(p) => &p.meta,
            Plugin::Renderer(p) => &p.meta,
            Plugin::Calibration(p) => &p.meta,
        }
    }

    /// The name it is registered under.
    pub fn name(&self) -> &str {
        &self.meta().name
    }

    /// Hex SHA-256 of the component bytes.
    pub fn sha256(&self) -> &str {
        &self.meta().sha256
    }

    /// What the plugin says about itself.
    pub fn info(&self) -> &PluginInfo {
        &self.meta().info
    }

    /// The contract version it was built against (`0.1.0` of `decide:plugin@0.1.0`).
    pub fn contract_version(&self) -> &str {
        &self.meta().contract
    }

    /// Loads a component: compile (or take from the cache), detect its kind from its exports,
    /// link it, and ask it who it is. Does not run the self-test (see [`Plugin::self_test`]).
    /// Its calls run under the server's limits.
    pub fn load(
        runtime: &Arc<PluginRuntime>,
        name: &str,
        bytes: &[u8],
    ) -> anyhow::Result<(Plugin, LoadStats)> {
        Plugin::load_limited(runtime, name, bytes, None)
    }

    /// [`Plugin::load`] with limits of its own (a tenant's plugin): every call, `info` and the
    /// self-test included, runs under `limits` as they are when the call starts.
    pub fn load_limited(
        runtime: &Arc<PluginRuntime>,
        name: &str,
        bytes: &[u8],
        limits: Option<Arc<SharedLimits>>,
    ) -> anyhow::Result<(Plugin, LoadStats)> {
        let started = Instant::now();
        let sha256 = sha256_hex(bytes);
        let (component, cache) = runtime.component(bytes, &sha256)?;
        let compiled_at = started.elapsed();
        let Detected {
            kind,
            contract,
            content_free,
        } = detect_kind(runtime, &component)?;
        let instance_pre = runtime.linker().instantiate_pre(&component).map_err(|e| {
            anyhow::anyhow!("cannot be linked (it may import something beyond WASI 0.2): {e:#}")
        })?;
        let meta = |info: PluginInfo| Meta {
            name: name.to_string(),
            info,
            sha256: sha256.clone(),
            contract: contract.clone(),
            call: PluginId::new(name, limits.clone()),
        };
        let mismatch = |e: wasmtime::Error| {
            anyhow::anyhow!(
                "its {kind} exports do not match decide:plugin@{} (supported: {}): {e:#}",
                current_version(),
                SUPPORTED_VERSIONS.join(", ")
            )
        };
        let placeholder = PluginInfo::default();
        let plugin = match kind {
            PluginKind::QuestionType => {
                let pre = bindings::question_type::QuestionTypePluginPre::new(instance_pre)
                    .map_err(mismatch)?;
                let mut p = QuestionType {
                    meta: meta(placeholder),
                    runtime: runtime.clone(),
                    pre,
                };
                p.meta.info = p.fetch_info()?;
                Plugin::QuestionType(Arc::new(p))
            }
            PluginKind::Renderer => {
                let pre =
                    bindings::renderer::RendererPluginPre::new(instance_pre).map_err(mismatch)?;
                let mut p = Renderer {
                    meta: meta(placeholder),
                    runtime: runtime.clone(),
                    pre,
                };
                p.meta.info = p.fetch_info()?;
                Plugin::Renderer(Arc::new(p))
            }
            PluginKind::Calibration => {
                let content_free = if content_free {
                    Some(
                        bindings::contextual_calibration::ContextualCalibrationPluginPre::new(
                            instance_pre.clone(),
                        )
                        .map_err(mismatch)?,
                    )
                } else {
                    None
                };
                let pre = bindings::calibration::CalibrationPluginPre::new(instance_pre)
                    .map_err(mismatch)?;
                let mut p = Calibration {
                    meta: meta(placeholder),
                    runtime: runtime.clone(),
                    pre,
                    neutral_states: None,
                };
                p.meta.info = p.fetch_info()?;
                if let Some(content_free) = content_free {
                    p.neutral_states = Some(p.fetch_neutral_states(&content_free)?);
                }
                Plugin::Calibration(Arc::new(p))
            }
        };
        Ok((
            plugin,
            LoadStats {
                cache,
                compile: compiled_at,
                total: started.elapsed(),
            },
        ))
    }

    /// The check a plugin must pass before it is served: question type: `compile(example())`
    /// then `answer` with uniform probabilities gives a JSON object; renderer: renders a fixed
    /// question; calibration: `apply([0, 1], default_params(1))` gives 2 probabilities summing
    /// to 1 (a content-free policy gets `[0, 1, ln 0.5, ln 0.5]`: the same read over a uniform
    /// prior).
    pub fn self_test(&self) -> Result<(), String> {
        let describe = |e: PluginCallError| match e {
            PluginCallError::InvalidQuestion(m) => format!("rejected its own test input: {m}"),
            PluginCallError::Failed { message, .. } => message,
        };
        match self {
            Plugin::QuestionType(p) => {
                let example = p.example().map_err(describe)?;
                let compiled = p
                    .compile(&example)
                    .map_err(|e| format!("compile(example()): {}", describe(e)))?;
                let n = compiled.options.len();
                if n < 2 {
                    return Err(format!(
                        "compile(example()) gave {n} options; a question needs at least 2"
                    ));
                }
                p.answer(&example, &vec![1.0 / n as f64; n])
                    .map_err(|e| format!("answer(example()): {}", describe(e)))?;
                Ok(())
            }
            Plugin::Renderer(p) => {
                let question = CompiledQuestion {
                    instructions: Some("Is the input a greeting?".into()),
                    options: vec![
                        OptionDef {
                            key: "true".into(),
                            text: "Yes".into(),
                            description: None,
                        },
                        OptionDef {
                            key: "false".into(),
                            text: "No".into(),
                            description: Some("Anything else".into()),
                        },
                    ],
                };
                let messages = p
                    .render(
                        "Hello there!",
                        &question,
                        &["A".to_string(), "B".to_string()],
                    )
                    .map_err(|e| format!("render: {}", describe(e)))?;
                if messages.is_empty() {
                    return Err("render gave no messages".into());
                }
                Ok(())
            }
            Plugin::Calibration(p) => {
                let params = p
                    .default_params(1.0)
                    .map_err(|e| format!("default-params(1): {}", describe(e)))?;
                let half = 0.5f64.ln();
                let scores: &[f64] = if p.neutral_states().is_some() {
                    &[0.0, 1.0, half, half]
                } else {
                    &[0.0, 1.0]
                };
                let probs = p
                    .apply(scores, &params)
                    .map_err(|e| format!("apply: {}", describe(e)))?;
                let sum: f64 = probs.iter().sum();
                if probs.len() != 2 || (sum - 1.0).abs() > 1e-6 {
                    return Err(format!("apply({scores:?}, default-params(1)) gave {probs:?}, not 2 probabilities summing to 1"));
                }
                Ok(())
            }
        }
    }
}

/// How a load went (for logs and the cache test).
#[derive(Debug, Clone, Copy)]
pub struct LoadStats {
    /// Whether the precompiled artifact came from the disk cache.
    pub cache: CacheOutcome,
    /// Time to obtain the compiled component (compile or deserialize).
    pub compile: std::time::Duration,
    /// Whole load, linking and the `info` call included.
    pub total: std::time::Duration,
}

/// What a component's exports say it is.
struct Detected {
    kind: PluginKind,
    /// The contract version it was built against (`0.1.0`), from its kind's export.
    contract: String,
    /// Whether it exports `content-free` (a calibration policy's neutral states).
    content_free: bool,
}

/// The kind of a component, from the plugin interfaces it exports, with the contract version it
/// was built against and whether it exports `content-free` (only a calibration policy may, and
/// only from 0.1.1 on).
fn detect_kind(runtime: &PluginRuntime, component: &Component) -> anyhow::Result<Detected> {
    let ty = component.component_type();
    let mut kinds = Vec::new();
    let mut names = Vec::new();
    let mut content_free = false;
    for (name, _) in ty.exports(runtime.engine()) {
        names.push(name.to_string());
        let (interface, version) = name.split_once('@').unwrap_or((name, ""));
        let kind = match interface {
            QUESTION_TYPE_EXPORT => Some(PluginKind::QuestionType),
            RENDERER_EXPORT => Some(PluginKind::Renderer),
            CALIBRATION_EXPORT => Some(PluginKind::Calibration),
            CONTENT_FREE_EXPORT => None,
            _ => continue,
        };
        if !SUPPORTED_VERSIONS.contains(&version) {
            anyhow::bail!(
                "exports {name}, a contract version this host does not link (supported: decide:plugin@{})",
                SUPPORTED_VERSIONS.join(", @")
            );
        }
        match kind {
            Some(kind) => kinds.push((kind, version.to_string())),
            None => {
                let since = SUPPORTED_VERSIONS
                    .iter()
                    .position(|v| *v == CONTENT_FREE_SINCE);
                let at = SUPPORTED_VERSIONS.iter().position(|v| *v == version);
                if at < since {
                    anyhow::bail!(
                        "exports {name}, but content-free was added in decide:plugin@{CONTENT_FREE_SINCE}"
                    );
                }
                content_free = true;
            }
        }
    }
    if content_free && kinds.iter().any(|(k, _)| *k != PluginKind::Calibration) {
        anyhow::bail!(
            "exports {CONTENT_FREE_EXPORT}, which only a calibration policy may export (world contextual-calibration-plugin); it exports: [{}]",
            names.join(", ")
        );
    }
    match kinds.as_slice() {
        [(kind, contract)] => Ok(Detected {
            kind: *kind,
            contract: contract.clone(),
            content_free,
        }),
        [] => anyhow::bail!(
            "exports no decide:plugin interface (question-type, renderer or calibration); it exports: [{}]",
            names.join(", ")
        ),
        _ => anyhow::bail!("exports several plugin interfaces ({}); a plugin must be exactly one kind", names.join(", ")),
    }
}

fn to_info(info: wit::PluginInfo) -> PluginInfo {
    PluginInfo {
        name: truncate(&info.name, 256).to_string(),
        version: truncate(&info.version, 256).to_string(),
        description: truncate(&info.description, 4096).to_string(),
    }
}

impl QuestionType {
    /// Runs `f` on the plugin's `question-type` exports, on an instance kept in `session` (see
    /// [`Session`]) or on a fresh one.
    fn call<R>(
        &self,
        session: Option<&Session>,
        f: impl Fn(&QuestionTypeExports, &mut Store<PluginState>) -> wasmtime::Result<R>,
    ) -> Result<R, PluginCallError> {
        self.runtime.call(
            &self.meta.call,
            session,
            |store| self.pre.instantiate(store),
            |store, instance| f(instance.decide_plugin_question_type(), store),
        )
    }

    fn fetch_info(&self) -> anyhow::Result<PluginInfo> {
        self.call(None, |q, store| q.call_info(store))
            .map(to_info)
            .map_err(|e| anyhow::anyhow!("info(): {e}"))
    }

    /// The plugin's example question (JSON text), used by the self-test.
    pub fn example(&self) -> Result<String, PluginCallError> {
        let example = self.call(None, |q, store| q.call_example(store))?;
        check_len(
            &self.meta.name,
            "example()",
            example.len(),
            limits::MAX_INPUT_BYTES,
        )?;
        Ok(example)
    }

    /// Validates `question_json` (the question object without `name`) and names its options.
    pub fn compile(&self, question_json: &str) -> Result<CompiledQuestion, PluginCallError> {
        self.compile_at(None, question_json)
    }

    /// [`QuestionType::compile`] on an instance kept in `session` (see [`Session`]).
    pub fn compile_in(
        &self,
        session: &Session,
        question_json: &str,
    ) -> Result<CompiledQuestion, PluginCallError> {
        self.compile_at(Some(session), question_json)
    }

    fn compile_at(
        &self,
        session: Option<&Session>,
        question_json: &str,
    ) -> Result<CompiledQuestion, PluginCallError> {
        check_input("question", question_json.len())?;
        let result = self.call(session, |q, store| q.call_compile(store, question_json))?;
        let compiled = result.map_err(|e| plugin_error(&self.meta.name, e))?;
        check_compiled(&self.meta.name, &compiled)?;
        Ok(CompiledQuestion {
            instructions: compiled.instructions,
            options: compiled
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

    /// The type's answer fields from `probabilities` over the compiled options (same order).
    pub fn answer(
        &self,
        question_json: &str,
        probabilities: &[f64],
    ) -> Result<Map<String, Value>, PluginCallError> {
        self.answer_at(None, question_json, probabilities)
    }

    /// [`QuestionType::answer`] on an instance kept in `session` (see [`Session`]).
    pub fn answer_in(
        &self,
        session: &Session,
        question_json: &str,
        probabilities: &[f64],
    ) -> Result<Map<String, Value>, PluginCallError> {
        self.answer_at(Some(session), question_json, probabilities)
    }

    fn answer_at(
        &self,
        session: Option<&Session>,
        question_json: &str,
        probabilities: &[f64],
    ) -> Result<Map<String, Value>, PluginCallError> {
        check_input("question", question_json.len())?;
        if probabilities.len() > limits::MAX_OPTIONS {
            return Err(failed(
                &self.meta.name,
                format!(
                    "{} probabilities exceed the limit of {}",
                    probabilities.len(),
                    limits::MAX_OPTIONS
                ),
            ));
        }
        let result = self.call(session, |q, store| {
            q.call_answer(store, question_json, probabilities)
        })?;
        let text = result.map_err(|e| plugin_error(&self.meta.name, e))?;
        check_len(
            &self.meta.name,
            "the answer",
            text.len(),
            limits::MAX_ANSWER_BYTES,
        )?;
        match serde_json::from_str::<Value>(&text) {
            Ok(Value::Object(map)) => Ok(map),
            Ok(_) => Err(failed(
                &self.meta.name,
                "answer() did not return a JSON object".into(),
            )),
            Err(e) => Err(failed(
                &self.meta.name,
                format!("answer() did not return valid JSON: {e}"),
            )),
        }
    }
}

impl Renderer {
    /// Runs `f` on the plugin's `renderer` exports, on an instance kept in `session` (see
    /// [`Session`]) or on a fresh one.
    fn call<R>(
        &self,
        session: Option<&Session>,
        f: impl Fn(&RendererExports, &mut Store<PluginState>) -> wasmtime::Result<R>,
    ) -> Result<R, PluginCallError> {
        self.runtime.call(
            &self.meta.call,
            session,
            |store| self.pre.instantiate(store),
            |store, instance| f(instance.decide_plugin_renderer(), store),
        )
    }

    fn fetch_info(&self) -> anyhow::Result<PluginInfo> {
        self.call(None, |r, store| r.call_info(store))
            .map(to_info)
            .map_err(|e| anyhow::anyhow!("info(): {e}"))
    }

    /// Chat messages for `state` and `question`; `labels[i]` names `question.options[i]`.
    pub fn render(
        &self,
        state: &str,
        question: &CompiledQuestion,
        labels: &[String],
    ) -> Result<Vec<ChatMessage>, PluginCallError> {
        self.render_at(None, state, question, labels)
    }

    /// [`Renderer::render`] on an instance kept in `session` (see [`Session`]).
    pub fn render_in(
        &self,
        session: &Session,
        state: &str,
        question: &CompiledQuestion,
        labels: &[String],
    ) -> Result<Vec<ChatMessage>, PluginCallError> {
        self.render_at(Some(session), state, question, labels)
    }

    fn render_at(
        &self,
        session: Option<&Session>,
        state: &str,
        question: &CompiledQuestion,
        labels: &[String],
    ) -> Result<Vec<ChatMessage>, PluginCallError> {
        check_input("input", state.len())?;
        let wit_question = wit::CompiledQuestion {
            instructions: question.instructions.clone(),
            options: question
                .options
                .iter()
                .map(|o| wit::OptionDef {
                    key: o.key.clone(),
                    text: o.text.clone(),
                    description: o.description.clone(),
                })
                .collect(),
        };
        let result = self.call(session, |r, store| {
            r.call_render(store, state, &wit_question, labels)
        })?;
        let messages = result.map_err(|e| plugin_error(&self.meta.name, e))?;
        if messages.len() > limits::MAX_MESSAGES {
            return Err(failed(
                &self.meta.name,
                format!(
                    "returned {} messages, over the limit of {}",
                    messages.len(),
                    limits::MAX_MESSAGES
                ),
            ));
        }
        let total: usize = messages
            .iter()
            .map(|m| m.content.len() + m.role.len())
            .sum();
        check_len(
            &self.meta.name,
            "the rendered messages",
            total,
            limits::MAX_MESSAGES_BYTES,
        )?;
        for m in &messages {
            if !matches!(m.role.as_str(), "system" | "user" | "assistant") {
                return Err(failed(
                    &self.meta.name,
                    format!(
                        "returned a message with role `{}` (expected system, user or assistant)",
                        truncate(&m.role, 64)
                    ),
                ));
            }
        }
        Ok(messages
            .into_iter()
            .map(|m| ChatMessage {
                role: m.role,
                content: m.content,
            })
            .collect())
    }
}

impl Calibration {
    /// Runs `f` on the plugin's `calibration` exports, on an instance kept in `session` (see
    /// [`Session`]) or on a fresh one.
    fn call<R>(
        &self,
        session: Option<&Session>,
        f: impl Fn(&CalibrationExports, &mut Store<PluginState>) -> wasmtime::Result<R>,
    ) -> Result<R, PluginCallError> {
        self.runtime.call(
            &self.meta.call,
            session,
            |store| self.pre.instantiate(store),
            |store, instance| f(instance.decide_plugin_calibration(), store),
        )
    }

    fn fetch_info(&self) -> anyhow::Result<PluginInfo> {
        self.call(None, |c, store| c.call_info(store))
            .map(to_info)
            .map_err(|e| anyhow::anyhow!("info(): {e}"))
    }

    /// Calls `content-free.neutral-states` (once, at load) and checks what it returns.
    fn fetch_neutral_states(
        &self,
        pre: &bindings::contextual_calibration::ContextualCalibrationPluginPre<PluginState>,
    ) -> anyhow::Result<Vec<String>> {
        let states = self
            .runtime
            .call(
                &self.meta.call,
                None,
                |store| pre.instantiate(store),
                |store, instance| {
                    instance
                        .decide_plugin_content_free()
                        .call_neutral_states(store)
                },
            )
            .map_err(|e| anyhow::anyhow!("neutral-states(): {e}"))?;
        check_neutral_states(&self.meta.name, states)
    }

    /// The neutral states this policy has each question read over, besides the real input:
    /// `Some` for a policy that exports `decide:plugin/content-free` (contextual calibration;
    /// its `fit` and `apply` then take 2k scores, the real read's then the content-free ones,
    /// see `wit/plugin.wit`), `None` for every other policy (k scores).
    pub fn neutral_states(&self) -> Option<&[String]> {
        self.neutral_states.as_deref()
    }

    /// How many scores `apply` takes per option: 2 for a content-free policy, else 1.
    fn scores_per_option(&self) -> usize {
        if self.neutral_states.is_some() {
            2
        } else {
            1
        }
    }

    fn check_params(&self, params: Vec<f64>) -> Result<Vec<f64>, PluginCallError> {
        if params.len() > limits::MAX_PARAMS {
            return Err(failed(
                &self.meta.name,
                format!(
                    "returned {} parameters, over the limit of {}",
                    params.len(),
                    limits::MAX_PARAMS
                ),
            ));
        }
        Ok(params)
    }

    /// Parameters meaning "temperature `temperature`, nothing fitted".
    pub fn default_params(&self, temperature: f64) -> Result<Vec<f64>, PluginCallError> {
        self.default_params_at(None, temperature)
    }

    /// [`Calibration::default_params`] on an instance kept in `session` (see [`Session`]).
    pub fn default_params_in(
        &self,
        session: &Session,
        temperature: f64,
    ) -> Result<Vec<f64>, PluginCallError> {
        self.default_params_at(Some(session), temperature)
    }

    fn default_params_at(
        &self,
        session: Option<&Session>,
        temperature: f64,
    ) -> Result<Vec<f64>, PluginCallError> {
        let params = self.call(session, |c, store| {
            c.call_default_params(store, temperature)
        })?;
        self.check_params(params)
    }

    /// Probabilities (one per option, summing to 1) from raw option scores and parameters. For a
    /// policy with [`Calibration::neutral_states`], `scores` holds 2k numbers (the real read's
    /// k scores, then the k content-free scores) and k probabilities come back.
    pub fn apply(&self, scores: &[f64], params: &[f64]) -> Result<Vec<f64>, PluginCallError> {
        self.apply_at(None, scores, params)
    }

    /// [`Calibration::apply`] on an instance kept in `session` (see [`Session`]).
    pub fn apply_in(
        &self,
        session: &Session,
        scores: &[f64],
        params: &[f64],
    ) -> Result<Vec<f64>, PluginCallError> {
        self.apply_at(Some(session), scores, params)
    }

    fn apply_at(
        &self,
        session: Option<&Session>,
        scores: &[f64],
        params: &[f64],
    ) -> Result<Vec<f64>, PluginCallError> {
        let per_option = self.scores_per_option();
        let max_scores = limits::MAX_OPTIONS * per_option;
        if scores.len() > max_scores || params.len() > limits::MAX_PARAMS {
            return Err(PluginCallError::InvalidQuestion(format!(
                "{} scores and {} parameters exceed the limits of {} and {}",
                scores.len(),
                params.len(),
                max_scores,
                limits::MAX_PARAMS
            )));
        }
        if !scores.len().is_multiple_of(per_option) {
            return Err(failed(
                &self.meta.name,
                format!(
                    "takes 2k scores (the real read's k, then k content-free scores), not {}",
                    scores.len()
                ),
            ));
        }
        let options = scores.len() / per_option;
        let result = self.call(session, |c, store| c.call_apply(store, scores, params))?;
        let probs = result.map_err(|e| plugin_error(&self.meta.name, e))?;
        if probs.len() != options {
            return Err(failed(
                &self.meta.name,
                format!(
                    "apply() returned {} probabilities for {} scores ({options} options)",
                    probs.len(),
                    scores.len()
                ),
            ));
        }
        if let Some(p) = probs
            .iter()
            .find(|p| !p.is_finite() || **p < 0.0 || **p > 1.0 + 1e-9)
        {
            return Err(failed(
                &self.meta.name,
                format!("apply() returned {p}, not a probability"),
            ));
        }
        Ok(probs)
    }

    /// Fits parameters on labelled observations.
    pub fn fit(&self, samples: &[LabelledScores]) -> Result<Vec<f64>, PluginCallError> {
        let total: usize = samples.iter().map(|s| s.scores.len().max(1)).sum();
        if total > limits::MAX_FIT_SCORES {
            return Err(PluginCallError::InvalidQuestion(format!(
                "samples: {total} scores exceed the limit of {} per fit",
                limits::MAX_FIT_SCORES
            )));
        }
        let wit_samples: Vec<wit::LabelledScores> = samples
            .iter()
            .map(|s| wit::LabelledScores {
                scores: s.scores.clone(),
                expected: s.expected,
            })
            .collect();
        let result = self.call(None, |c, store| c.call_fit(store, &wit_samples))?;
        let params = result.map_err(|e| plugin_error(&self.meta.name, e))?;
        self.check_params(params)
    }
}

/// Refuses a content-free policy's neutral states unless there are 1 to
/// [`MAX_NEUTRAL_STATES`] of them, each at most [`MAX_NEUTRAL_STATE_BYTES`] long (each state is
/// one more read of every question).
fn check_neutral_states(plugin: &str, states: Vec<String>) -> anyhow::Result<Vec<String>> {
    if states.is_empty() || states.len() > MAX_NEUTRAL_STATES {
        anyhow::bail!(
            "plugin {plugin}: neutral-states() returned {} states; a content-free policy names 1 to {MAX_NEUTRAL_STATES}",
            states.len()
        );
    }
    if let Some((i, s)) = states
        .iter()
        .enumerate()
        .find(|(_, s)| s.len() > MAX_NEUTRAL_STATE_BYTES)
    {
        anyhow::bail!(
            "plugin {plugin}: neutral state {i} is {} bytes, over the limit of {MAX_NEUTRAL_STATE_BYTES}",
            s.len()
        );
    }
    Ok(states)
}

fn failed(plugin: &str, what: String) -> PluginCallError {
    PluginCallError::Failed {
        plugin: plugin.to_string(),
        message: format!("plugin {plugin} {what}"),
    }
}

fn plugin_error(plugin: &str, error: wit::PluginError) -> PluginCallError {
    match error {
        wit::PluginError::InvalidQuestion(m) => {
            PluginCallError::InvalidQuestion(truncate(&m, limits::MAX_ERROR_BYTES).to_string())
        }
        wit::PluginError::Failure(m) => failed(
            plugin,
            format!("failed: {}", truncate(&m, limits::MAX_ERROR_BYTES)),
        ),
    }
}

fn check_input(what: &str, len: usize) -> Result<(), PluginCallError> {
    if len > limits::MAX_INPUT_BYTES {
        return Err(PluginCallError::InvalidQuestion(format!(
            "{what}: {len} bytes exceed the plugin input limit of {} bytes",
            limits::MAX_INPUT_BYTES
        )));
    }
    Ok(())
}

fn check_len(plugin: &str, what: &str, len: usize, max: usize) -> Result<(), PluginCallError> {
    if len > max {
        return Err(failed(
            plugin,
            format!("returned {what} of {len} bytes, over the limit of {max}"),
        ));
    }
    Ok(())
}

fn check_compiled(plugin: &str, c: &wit::CompiledQuestion) -> Result<(), PluginCallError> {
    if c.options.len() > limits::MAX_OPTIONS {
        return Err(failed(
            plugin,
            format!(
                "returned {} options, over the limit of {}",
                c.options.len(),
                limits::MAX_OPTIONS
            ),
        ));
    }
    if let Some(i) = &c.instructions {
        check_len(plugin, "instructions", i.len(), limits::MAX_STRING_BYTES)?;
    }
    for o in &c.options {
        check_len(
            plugin,
            "an option key",
            o.key.len(),
            limits::MAX_STRING_BYTES,
        )?;
        check_len(
            plugin,
            "an option text",
            o.text.len(),
            limits::MAX_STRING_BYTES,
        )?;
        if let Some(d) = &o.description {
            check_len(
                plugin,
                "an option description",
                d.len(),
                limits::MAX_STRING_BYTES,
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neutral_states_are_bounded() {
        let states = |n: usize, len: usize| vec!["x".repeat(len); n];
        assert_eq!(check_neutral_states("p", states(1, 0)).unwrap(), vec![""]);
        assert!(
            check_neutral_states("p", states(MAX_NEUTRAL_STATES, MAX_NEUTRAL_STATE_BYTES)).is_ok()
        );
        let none = check_neutral_states("ctx", vec![]).unwrap_err().to_string();
        assert!(
            none.contains("plugin ctx") && none.contains("returned 0 states"),
            "{none}"
        );
        let many = check_neutral_states("ctx", states(MAX_NEUTRAL_STATES + 1, 1)).unwrap_err();
        assert!(
            many.to_string()
                .contains("returned 9 states; a content-free policy names 1 to 8"),
            "{many}"
        );
        let long = check_neutral_states("ctx", states(2, MAX_NEUTRAL_STATE_BYTES + 1)).unwrap_err();
        assert!(
            long.to_string()
                .contains("plugin ctx: neutral state 0 is 4097 bytes, over the limit of 4096"),
            "{long}"
        );
    }
}
