//! The one decision pipeline behind every wire format.
//!
//! A frontend turns its HTTP body into a [`DecisionRequest`]; the pipeline compiles each
//! question with its question-type plugin, plans the labels, renders the prompt with the
//! renderer plugin and the model's chat template, reads the label log-probabilities in one
//! forward pass, calibrates them with the calibration plugin and lets the question type turn
//! probabilities into its answer fields. Because both endpoints go through here, the same
//! question gives the same probabilities on both.
//!
//! A request may carry many inputs ([`Item`]s, `/v1/systemone/batch`): what does not depend on
//! an input is done once per request and the items are read together ([`Engine::decide_items`]);
//! a single request is a batch of one item.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use decide_models::{Model, ModelError};

pub use crate::calibration::state::TemperatureSource;
use crate::calibration::state::{CalibrationState, AUTO, AUTO_FALLBACK};
use crate::cancel::Cancel;
use crate::error::{dotted, EngineError, Loc, LocPart, RefusalKind};
use crate::metrics::{DecidedCounts, Metrics};
use crate::plugins::{CompiledQuestion, PluginCallError, PluginRegistry, QuestionType, Session};
use crate::readout;
use crate::scheduler::{self, Scheduler, SchedulerConfig};

mod items;
mod prompts;
mod rounds;
mod self_check;
pub mod setup;
pub use items::Item;
pub use prompts::{QuestionPrompts, ReadPrompt};
use rounds::Read;
pub use setup::{Resolved, Setup, SetupSource};

/// The render version of a renderer plugin, `<name>/<plugin version>`: part of every audit
/// block (with the label scheme) and of saved calibrations, so a change of rendering is
/// visible in answers and re-fits what was measured with another.
pub fn render_version(renderer: &crate::plugins::Renderer) -> String {
    format!("{}/{}", renderer.name(), renderer.info().version)
}

/// One question as a frontend hands it over.
#[derive(Debug, Clone)]
pub struct Question {
    /// Where the question sits in the request body, for error messages.
    pub loc: Loc,
    /// The question-type plugin that understands it (`openai-choice`, `systemone-noul`, ...).
    pub plugin: String,
    /// The question object as JSON text, without the frontend-level `name`.
    pub json: String,
}

/// A request reduced to what the pipeline needs.
#[derive(Debug, Clone)]
pub struct DecisionRequest {
    /// The input text every question is asked about.
    pub state: String,
    pub questions: Vec<Question>,
    /// `extra.calibration_temperature` of the request, when given.
    pub temperature: Option<f64>,
    /// The caller's prefix-cache salt (the server derives it from the tenant): requests share
    /// cached prefixes only with requests of the same salt.
    pub cache_salt: u64,
    /// `extra.backend_options` of the request (readout, shortlist, permutations, labels).
    pub readout: readout::Options,
    /// `extra.renderer` of the request: a renderer plugin by name instead of the tenant's or
    /// the server's.
    pub renderer: Option<String>,
    /// `extra.min_option_mass` of the request (see [`EngineSettings::min_option_mass`]).
    pub min_option_mass: Option<f64>,
    /// The request's own timeout (`extra.timeout_ms`, `timeout_ms`): it shortens the server's
    /// `--request-timeout-ms` for this request (see [`crate::cancel::Deadline::of`]).
    pub timeout: Option<crate::cancel::Requested>,
    /// `extra.return_prompt` / `return_prompt` of the request: every outcome whose prompts
    /// were rendered and tokenized carries them ([`QuestionPrompts`]). It changes nothing
    /// about how the questions are read: the same prompts go to the model worker, in the same
    /// jobs.
    pub return_prompt: bool,
    /// What the request's tenant changes about how it is answered.
    pub scope: RequestScope,
}

/// What a request's tenant changes about how it is answered, as opaque values: the pipeline
/// learns no tenant records, only which plugins to resolve, which limits and calibration
/// apply, and under which fair-share flow its passes are scheduled. The default is the
/// server's own settings (no tenants).
#[derive(Clone, Default)]
pub struct RequestScope {
    /// Whose plugins resolve first (the tenant id); `None`: the operator's and built-ins only.
    pub plugins: Option<String>,
    /// Renderer plugin instead of `--renderer`.
    pub renderer: Option<String>,
    /// Calibration policy instead of `--calibration`.
    pub calibration: Option<String>,
    /// The tenant's `min_option_mass` instead of `--min-option-mass`.
    pub min_option_mass: Option<f64>,
    /// The tenant's own fitted calibration (answers report source `tenant`).
    pub calibrated: Option<Arc<CalibrationState>>,
    /// Limits narrower than the server's (each at most the server's).
    pub limits: Option<Limits>,
    /// The fair-share flow the request's reads are scheduled under.
    pub flow: scheduler::Flow,
    /// Called with the prompt tokens of each batched read before it goes to the model; an
    /// error (a tokens-per-minute limit) fails the request with it.
    pub admit_tokens: Option<AdmitTokens>,
    /// The request's cancellation (its client gone, its deadline passed): once set, the
    /// pipeline stops at its next step and the model worker drops the request's jobs. The
    /// default never cancels (the server's own reads).
    pub cancel: Cancel,
    /// Whether the model worker's queue bound (`--max-queued-requests`,
    /// `--max-queued-tokens`) may refuse the request's reads (503): true for HTTP requests;
    /// the server's own reads (self-check, calibration, tenants' fits) wait instead.
    pub sheddable: bool,
}

/// See [`RequestScope::admit_tokens`].
pub type AdmitTokens = Arc<dyn Fn(usize) -> Result<(), EngineError> + Send + Sync>;

impl std::fmt::Debug for RequestScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestScope")
            .field("plugins", &self.plugins)
            .field("renderer", &self.renderer)
            .field("calibration", &self.calibration)
            .field("limits", &self.limits)
            .field("flow", &self.flow)
            .field("cancel", &self.cancel)
            .field("sheddable", &self.sheddable)
            .finish_non_exhaustive()
    }
}

/// The calibration an answer gets: the policy's parameters, the temperature they stand for,
/// and where it came from.
#[derive(Debug, Clone)]
struct Applied {
    policy: String,
    params: Result<Vec<f64>, PluginCallError>,
    temperature: f64,
    source: TemperatureSource,
}

/// Raw option scores of one question, read without calibration (for startup calibration).
#[derive(Debug, Clone)]
pub struct RawRead {
    /// The compiled options (keys are JSON values as text), in label order.
    pub options: Vec<crate::plugins::OptionDef>,
    /// Log-softmax over the whole vocabulary at the label tokens, in option order (`ln p` of
    /// the combined distribution for combined readouts).
    pub scores: Vec<f64>,
    /// True next-token mass on the labels of the deciding read.
    pub option_mass: f32,
    /// `permutation`: the top option under each label shift (how often the order changes it).
    pub shift_top: Option<Vec<usize>>,
    /// When neutral states were given: the log of the mean option distribution of the same
    /// question read over each of them (what a content-free policy divides out).
    pub content_free: Option<Vec<f64>>,
}

/// How an answer's prompt was made, for the audit block.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendering {
    /// The renderer plugin.
    pub renderer: String,
    /// `<renderer>/<plugin version>` ([`render_version`]).
    pub render_version: String,
    /// The label scheme asked for (a question it cannot hold is read with letters).
    pub labels: readout::Scheme,
    /// Who chose the renderer.
    pub source: SetupSource,
}

/// A question the model answered.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The question type's answer fields (`probability`, `choice`, `score`, ...).
    pub fields: Map<String, Value>,
    /// Option keys (JSON text) in option order.
    pub option_keys: Vec<String>,
    /// Option scores: for a single read (`direct`, `wide-direct`) the log-softmax over the
    /// whole vocabulary at the label tokens; for combined readouts `ln p` of the combined
    /// distribution.
    pub logprobs: Vec<f32>,
    /// How it was read: readout, label layout, two-stage and permutation details.
    pub readout: readout::Detail,
    /// Calibrated probabilities, in option order.
    pub probabilities: Vec<f64>,
    /// True next-token probability mass on the labels.
    pub option_mass: f32,
    /// Prompt tokens of this question.
    pub input_tokens: usize,
    /// Of those, tokens whose KV came from a prefix computed once for the request.
    pub cached_tokens: usize,
    /// The temperature the calibration used (`params[0]` of the built-in policies).
    pub temperature: f64,
    pub temperature_source: TemperatureSource,
    /// The calibration policy plugin and the parameters it applied (more than `[T]` for
    /// policies such as `bias-temperature`).
    pub calibration_policy: String,
    pub calibration_params: Vec<f64>,
    /// How the prompt was made.
    pub rendering: Rendering,
    /// The least option mass an answer needs (0: no abstention).
    pub min_option_mass: f64,
    /// The prompts it was read with, when the request asked for them.
    pub prompt: Option<QuestionPrompts>,
}

/// A question that failed while others may have succeeded.
#[derive(Debug, Clone)]
pub struct Refusal {
    /// What kind of refusal it is: the server gives the whole request the status of this
    /// kind if every question fails like this.
    pub kind: RefusalKind,
    pub code: &'static str,
    pub message: String,
    pub loc: Loc,
    /// Set when the model was read but abstained: its option mass fell below the threshold.
    pub abstained: Option<Abstention>,
    /// The prompts the question was read with, when the request asked for them and they were
    /// all rendered and tokenized (an abstention, a failed read, a calibration or answer
    /// plugin failure); none for a question refused before (an invalid question, a renderer
    /// failure, a prompt over `--max-prompt-tokens`, an unreadable label).
    pub prompt: Option<QuestionPrompts>,
}

impl Refusal {
    /// The refusal carrying the prompts of the reads it was refused after (when kept).
    fn with_reads(mut self, reads: Option<Vec<ReadPrompt>>) -> Refusal {
        self.prompt = reads.map(|reads| QuestionPrompts { reads });
        self
    }
}

/// Why an answer became a refusal: the model's next-token mass on the option labels fell
/// below `min_option_mass` (it wanted to say something else).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Abstention {
    pub option_mass: f32,
    pub min_option_mass: f64,
}

/// The outcome of one question.
#[derive(Debug, Clone)]
pub enum Outcome {
    Answer(Box<Answer>),
    Refusal(Refusal),
}

impl Outcome {
    /// The prompts the question was read with, when the request asked for them.
    pub fn prompt(&self) -> Option<&QuestionPrompts> {
        match self {
            Outcome::Answer(answer) => answer.prompt.as_ref(),
            Outcome::Refusal(refusal) => refusal.prompt.as_ref(),
        }
    }

    /// The outcome carrying `prompt`.
    fn with_prompt(mut self, prompt: Option<QuestionPrompts>) -> Outcome {
        match &mut self {
            Outcome::Answer(answer) => answer.prompt = prompt,
            Outcome::Refusal(refusal) => refusal.prompt = prompt,
        }
        self
    }
}

/// The outcomes of a request, in question order.
#[derive(Debug, Clone)]
pub struct Decided {
    pub outcomes: Vec<Outcome>,
    pub input_tokens: usize,
    pub cached_tokens: usize,
    pub forward_passes: usize,
    /// Jobs handed to the model worker: one per read round (one for every question of a
    /// request read directly, two when two-stage finalists need a second round). What the
    /// field-schema format reports as `backend_requests`.
    pub scheduler_jobs: usize,
    pub timings: StepTimes,
}

impl Decided {
    /// The metrics' counts of these decided items: answers, refusals, input tokens, passes.
    pub fn counts<'a>(items: impl IntoIterator<Item = &'a Decided>) -> DecidedCounts {
        let mut counts = DecidedCounts::default();
        for decided in items {
            for outcome in &decided.outcomes {
                match outcome {
                    Outcome::Answer(_) => counts.answers += 1,
                    Outcome::Refusal(_) => counts.refusals += 1,
                }
            }
            counts.input_tokens += decided.input_tokens as u64;
            counts.forward_passes += decided.forward_passes as u64;
        }
        counts
    }

    fn new() -> Self {
        Decided {
            outcomes: Vec::new(),
            input_tokens: 0,
            cached_tokens: 0,
            forward_passes: 0,
            scheduler_jobs: 0,
            timings: StepTimes::default(),
        }
    }

    /// Adds work done for this request outside its own reads (a batch's shared neutral
    /// reads): tokens, passes, jobs and step times; no outcomes.
    fn add_work(&mut self, other: &Decided) {
        self.input_tokens += other.input_tokens;
        self.cached_tokens += other.cached_tokens;
        self.forward_passes += other.forward_passes;
        self.scheduler_jobs += other.scheduler_jobs;
        self.timings.add(&other.timings);
    }
}

/// Where a request's time went inside the server, reported in the `Server-Timing` header so
/// that a slow request shows which step to look at without a profiler.
#[derive(Debug, Clone, Copy, Default)]
pub struct StepTimes {
    /// Limits and question-type plugin `compile` calls.
    pub compile: Duration,
    /// Renderer plugin calls, chat template and tokenization.
    pub prepare: Duration,
    /// Waiting for the model worker and the forward passes (prefix cache included).
    pub model: Duration,
    /// Calibration and question-type `answer` plugin calls.
    pub answer: Duration,
}

impl StepTimes {
    /// Adds another request's (or item's) step times to these, step by step: what a batch
    /// reports is the work of its items, which overlap in time.
    pub fn add(&mut self, other: &StepTimes) {
        self.compile += other.compile;
        self.prepare += other.prepare;
        self.model += other.model;
        self.answer += other.answer;
    }
}

/// Limits enforced before any model work.
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_questions: usize,
    pub max_options: usize,
    pub max_input_bytes: usize,
    /// Most prompt tokens of one question (already resolved against the model's context).
    pub max_prompt_tokens: usize,
    /// Which of these are a tenant's own, narrower than the server's (none: all the server's).
    pub narrowed: Option<Narrowed>,
}

/// Which of a request's limits are its tenant's, narrower than the server's: their errors
/// name the tenant limit (which the operator changes per tenant) instead of the server's flag.
#[derive(Debug, Clone, Default)]
pub struct Narrowed {
    /// The tenant's id, for the message.
    pub tenant: String,
    pub max_questions: bool,
    pub max_options: bool,
    pub max_input_bytes: bool,
}

impl Limits {
    /// What a message says about a limit: the tenant's limit when it is the binding one,
    /// else the server's flag.
    fn setting(&self, bound: impl Fn(&Narrowed) -> bool, name: &str, flag: &str) -> String {
        match &self.narrowed {
            Some(narrowed) if bound(narrowed) => format!(
                "tenant limit {name}; the operator sets it with PATCH /admin/v1/tenants/{}",
                narrowed.tenant
            ),
            _ => format!("setting {flag}"),
        }
    }

    /// Checks a request's question count and input size, before anything is computed (the
    /// frontends call it before taking from the tenant's rates; the pipeline checks both
    /// again, per item of a batch: [`Limits::check_questions`], [`Limits::check_input`]).
    pub fn check_request(&self, questions: usize, input_bytes: usize) -> Result<(), EngineError> {
        self.check_questions(questions, &crate::loc!["questions"])?;
        self.check_input(input_bytes, &[])
    }

    /// Checks a question count: at least one, at most `max_questions`; `loc` is where the
    /// questions sit (`questions`, or a batch item's `items[3].questions`).
    pub fn check_questions(&self, questions: usize, loc: &Loc) -> Result<(), EngineError> {
        if questions > self.max_questions && self.narrowed.as_ref().is_some_and(|n| n.max_questions)
        {
            return Err(EngineError::invalid_at(
                loc,
                format!(
                    "{questions} questions exceed the limit of {} per request ({})",
                    self.max_questions,
                    self.setting(|n| n.max_questions, "max_questions", "")
                ),
            ));
        }
        question_count(questions, self.max_questions, loc)
    }

    /// Checks the size of one input text against `max_input_bytes`; `loc` is where it sits
    /// (empty: the request's input, whatever its field, named `input` in the message).
    pub fn check_input(&self, input_bytes: usize, loc: &[LocPart]) -> Result<(), EngineError> {
        if input_bytes <= self.max_input_bytes {
            return Ok(());
        }
        let name = if loc.is_empty() {
            "input".to_string()
        } else {
            dotted(loc)
        };
        Err(EngineError::TooLarge {
            loc: loc.to_vec(),
            message: format!(
                "{name}: {input_bytes} bytes exceed the limit of {} bytes ({})",
                self.max_input_bytes,
                self.setting(
                    |n| n.max_input_bytes,
                    "max_input_bytes",
                    "--max-input-bytes / DECIDE_MAX_INPUT_BYTES"
                )
            ),
        })
    }
}

/// What an engine is configured with, besides the model and plugins.
#[derive(Debug, Clone)]
pub struct EngineSettings {
    /// The server's setup until tuning replaces it: `--renderer` pinned, else the default.
    pub setup: Setup,
    /// Answers whose option mass is below this become refusals (`--min-option-mass`; 0: off).
    pub min_option_mass: f64,
    /// Calibration policy plugin name (`--calibration`).
    pub calibration: String,
    /// `--temperature`, when set.
    pub operator_temperature: Option<f64>,
    pub limits: Limits,
    pub scheduler: SchedulerConfig,
}

/// How the server answers a request that names no setup or correction of its own: one value,
/// read once per request, so that a swap in the middle of a request (background tuning or
/// calibration finishing) never mixes two setups in one answer.
#[derive(Debug, Clone)]
pub struct Served {
    /// The server's renderer, label scheme and readout (pinned, tuned or default).
    pub setup: Setup,
    /// The policy answers get: `--calibration`, or what startup calibration chose for `auto`.
    pub calibration: String,
    /// What startup calibration (or tuning) measured, or the default when neither has yet.
    pub calibrated: CalibrationState,
}

/// The loaded model and plugins, ready to answer.
pub struct Engine {
    model: Arc<Model>,
    /// Runs every forward pass on one worker thread (candle's kernels already use every
    /// core; two interleaved forwards only slow each other), batching concurrent requests.
    scheduler: Scheduler,
    plugins: Arc<PluginRegistry>,
    /// The server's setup and correction, swapped whole when startup tuning or calibration,
    /// running in the background after the server answers, keeps a result.
    served: std::sync::RwLock<Arc<Served>>,
    min_option_mass: f64,
    /// `--calibration` as given (`auto` or a policy name).
    calibration_choice: String,
    operator_temperature: Option<f64>,
    limits: Limits,
    metrics: Arc<Metrics>,
    /// The labels this model can answer with, measured at load (see [`readout::labels`]).
    label_sets: readout::LabelSets,
    /// What the startup answer-slot self-check found (none when it has not run).
    self_check: Option<crate::selfcheck::Report>,
}

/// How a request's prompts are made and read: its renderer plugin, its tenant salt (token
/// and prefix caches), its plugin session, and its scope (fair-share flow, token admission).
#[derive(Clone, Copy)]
struct Prompting<'a> {
    renderer: &'a crate::plugins::Renderer,
    salt: u64,
    session: &'a Session,
    scope: &'a RequestScope,
    /// Whether [`RequestScope::admit_tokens`] let the reads of this item (or request) through.
    admission: &'a Admission<'a>,
    /// Whether each read's prompt is kept for the answer ([`DecisionRequest::return_prompt`]).
    keep_prompts: bool,
}

/// The tenant's token admission ([`RequestScope::admit_tokens`]) for the reads of one item
/// of a request (a single request is a batch of one item). The first refusal stops the
/// whole batch: the refused item and every item that reads after it fail with it, while
/// items read before keep their answers.
struct Admission<'a> {
    /// The batch's first refusal; once set, no read of any of its items is admitted.
    batch: &'a std::sync::OnceLock<EngineError>,
    /// This item's refusal (its own, or the batch's that stopped it): the item fails with it.
    item: std::sync::Mutex<Option<EngineError>>,
}

impl<'a> Admission<'a> {
    fn new(batch: &'a std::sync::OnceLock<EngineError>) -> Self {
        Admission {
            batch,
            item: std::sync::Mutex::new(None),
        }
    }

    /// Whether a read of `tokens` prompt tokens may go to the model; a refusal is kept for
    /// the item (and the batch).
    fn admit(&self, tokens: usize, scope: &RequestScope) -> bool {
        let mut item = self.item.lock().unwrap_or_else(|p| p.into_inner());
        if item.is_some() {
            return false;
        }
        if let Some(error) = self.batch.get() {
            *item = Some(error.clone());
            return false;
        }
        let Some(admit) = &scope.admit_tokens else {
            return true;
        };
        match admit(tokens) {
            Ok(()) => true,
            Err(error) => {
                let _ = self.batch.set(error.clone());
                *item = Some(error);
                false
            }
        }
    }

    /// Stops the item and the batch with `error` (its request was cancelled, the model
    /// worker's queue is full), unless they were stopped already.
    fn stop(&self, error: EngineError) {
        let mut item = self.item.lock().unwrap_or_else(|p| p.into_inner());
        if item.is_none() {
            let _ = self.batch.set(error.clone());
            *item = Some(error);
        }
    }

    /// The refusal the item fails with, if any of its reads was refused.
    fn into_refused(self) -> Option<EngineError> {
        self.item.into_inner().unwrap_or_else(|p| p.into_inner())
    }
}

/// A compiled question waiting for the model.
#[derive(Clone)]
struct Planned {
    index: usize,
    /// The plugin that compiled the question answers it too, even if a newer version is
    /// swapped in meanwhile: one question never mixes two versions of its type.
    plugin: Arc<QuestionType>,
    compiled: CompiledQuestion,
    /// How the question is read.
    plan: readout::Plan,
}

impl Engine {
    pub fn new(
        model: Model,
        plugins: Arc<PluginRegistry>,
        settings: EngineSettings,
        metrics: Arc<Metrics>,
    ) -> Self {
        let EngineSettings {
            setup,
            min_option_mass,
            calibration,
            operator_temperature,
            limits,
            scheduler,
        } = settings;
        let label_sets = readout::LabelSets::measure(&model);
        let model = Arc::new(model);
        let served_policy = if calibration == AUTO {
            AUTO_FALLBACK.to_string()
        } else {
            calibration.clone()
        };
        Engine {
            scheduler: Scheduler::start(model.clone(), scheduler, metrics.clone()),
            label_sets,
            self_check: None,
            model,
            plugins,
            served: std::sync::RwLock::new(Arc::new(Served {
                calibrated: CalibrationState::default_for(&served_policy),
                setup,
                calibration: served_policy,
            })),
            min_option_mass,
            calibration_choice: calibration,
            operator_temperature,
            limits,
            metrics,
        }
    }

    /// How requests naming nothing of their own are answered now.
    pub fn served(&self) -> Arc<Served> {
        self.served
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Replaces the served setup and correction; requests already running keep theirs.
    fn swap_served(&self, change: impl FnOnce(&mut Served)) {
        let mut served = self.served.write().unwrap_or_else(|p| p.into_inner());
        let mut next = Served::clone(&served);
        change(&mut next);
        *served = Arc::new(next);
    }

    /// Installs the result of startup calibration; its policy is the one answers get from
    /// then on (a swap: callable while the engine serves).
    pub fn set_calibration(&self, state: CalibrationState) {
        self.swap_served(|served| {
            served.calibration = state.policy.clone();
            served.calibrated = state;
        });
    }

    /// `--calibration` as given: `auto` or a policy name.
    pub fn calibration_choice(&self) -> &str {
        &self.calibration_choice
    }

    /// Installs the setup tuning chose (a swap: callable while the engine serves).
    pub fn set_setup(&self, setup: Setup) {
        self.swap_served(|served| served.setup = setup);
    }

    /// The server's renderer, label scheme and readout.
    pub fn setup(&self) -> Setup {
        self.served().setup.clone()
    }

    /// The server's `--min-option-mass`.
    pub fn min_option_mass(&self) -> f64 {
        self.min_option_mass
    }

    /// Sets the model's answer suffix (the self-check's fix for a template that leaves the
    /// answer slot open) and re-measures the label sets, which depend on the prompt's end.
    /// Before the engine is shared.
    pub fn set_answer_suffix(&mut self, suffix: &str) {
        self.model.set_answer_suffix(suffix);
        self.label_sets = readout::LabelSets::measure(&self.model);
    }

    /// Records the startup self-check (before the engine is shared).
    pub fn set_self_check(&mut self, report: crate::selfcheck::Report) {
        self.self_check = Some(report);
    }

    /// What the startup self-check found.
    pub fn self_check(&self) -> Option<&crate::selfcheck::Report> {
        self.self_check.as_ref()
    }

    /// The labels this model can answer with, and so the readouts' capacities.
    pub fn label_sets(&self) -> &readout::LabelSets {
        &self.label_sets
    }

    /// The calibration state answers get when neither the request nor the operator sets T.
    pub fn calibration(&self) -> CalibrationState {
        self.served().calibrated.clone()
    }

    /// The server's renderer and the configured calibration plugin names.
    pub fn plugin_names(&self) -> (String, String) {
        let served = self.served();
        (served.setup.renderer.clone(), served.calibration.clone())
    }

    pub fn model(&self) -> &Model {
        &self.model
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    pub fn plugins(&self) -> &Arc<PluginRegistry> {
        &self.plugins
    }

    /// What waits for the model worker now, and its bounds (`/health`, `/metrics`).
    pub fn queue(&self) -> (scheduler::QueueDepth, scheduler::QueueLimits) {
        (self.scheduler.depth(), self.scheduler.limits())
    }

    /// A 503 when the model worker's queue is full already: checked before a request's
    /// questions are compiled and its prompts rendered, so an overloaded server refuses it
    /// before any work. A request that passes may still be refused when its prompts, counted
    /// in tokens, do not fit ([`scheduler::Scheduler::reserve`]).
    pub fn check_queue(&self) -> Result<(), EngineError> {
        match self.scheduler.overloaded() {
            Some(full) => Err(overloaded(&full)),
            None => Ok(()),
        }
    }

    /// The request's limits: its tenant's narrowed ones, else the server's.
    fn limits_of<'s>(&'s self, scope: &'s RequestScope) -> &'s Limits {
        scope.limits.as_ref().unwrap_or(&self.limits)
    }

    /// Compiles every question of one question set (its count is checked by the caller).
    /// Invalid questions fail the set as a whole (nothing was computed yet); plugin failures
    /// refuse one question.
    fn compile(
        &self,
        questions: &[Question],
        options: &readout::Options,
        scope: &RequestScope,
        session: &Session,
    ) -> Result<Vec<Result<Planned, Refusal>>, EngineError> {
        questions
            .iter()
            .enumerate()
            .map(|(index, question)| {
                // A cancelled request compiles no more questions (each may be a plugin
                // call of up to --plugin-timeout-ms).
                if let Some(error) = scope.cancel.error() {
                    return Err(error);
                }
                self.compile_one(index, question, options, scope, session)
            })
            .collect()
    }

    fn compile_one(
        &self,
        index: usize,
        question: &Question,
        options: &readout::Options,
        request_scope: &RequestScope,
        session: &Session,
    ) -> Result<Result<Planned, Refusal>, EngineError> {
        let limits = self.limits_of(request_scope);
        let scope = request_scope.plugins.as_deref();
        let Some(plugin) = self
            .plugins
            .question_type_for(session, scope, &question.plugin)
        else {
            return Err(EngineError::invalid(
                with_field(&question.loc, "type"),
                format!(
                    "{}: no question-type plugin `{}` is loaded",
                    dotted(&with_field(&question.loc, "type")),
                    question.plugin
                ),
            ));
        };
        let compiled = match plugin.compile_in(session, &question.json) {
            Ok(compiled) => compiled,
            Err(PluginCallError::InvalidQuestion(message)) => {
                return Err(invalid_from_plugin(&question.loc, &message))
            }
            Err(PluginCallError::Failed { message, .. }) => {
                return Ok(Err(plugin_refusal(&question.loc, &message)))
            }
        };
        let count = compiled.options.len();
        if count > limits.max_options {
            return Err(EngineError::invalid(
                question.loc.clone(),
                format!(
                    "{}: {count} options exceed the limit of {} per question ({})",
                    dotted(&question.loc),
                    limits.max_options,
                    limits.setting(
                        |n| n.max_options,
                        "max_options",
                        "--max-options / DECIDE_MAX_OPTIONS"
                    )
                ),
            ));
        }
        if count < 2 {
            return Err(EngineError::invalid(
                question.loc.clone(),
                format!(
                    "{}: a question needs at least 2 options, got {count}",
                    dotted(&question.loc)
                ),
            ));
        }
        Ok(match readout::plan(options, &compiled, &self.label_sets) {
            Ok(plan) => Ok(Planned {
                index,
                plugin,
                compiled,
                plan,
            }),
            Err(message) => Err(Refusal {
                kind: RefusalKind::Invalid,
                code: "readout_capacity",
                message: format!("{}: {message}", dotted(&question.loc)),
                loc: question.loc.clone(),
                abstained: None,
                prompt: None,
            }),
        })
    }

    /// Which calibration an answer gets, highest first: the request's temperature, the
    /// operator's, the calibrated parameters, T = 1.0. A temperature is mapped through the
    /// policy's `default-params(t)`. Fitted parameters are used only with the plugin version
    /// they were fitted with; after a hot swap of the policy, answers fall back to the default.
    fn applied(
        &self,
        requested: Option<f64>,
        server: &CalibrationState,
        tenant: Option<&CalibrationState>,
        calibration: &crate::plugins::Calibration,
        session: &Session,
    ) -> Applied {
        let policy = calibration.name().to_string();
        let from_temperature = |t: f64, source| Applied {
            policy: policy.clone(),
            params: calibration.default_params_in(session, t),
            temperature: t,
            source,
        };
        let fitted_here = |c: &CalibrationState| c.plugin_sha256 == calibration.sha256();
        match (requested, self.operator_temperature) {
            (Some(t), _) => from_temperature(t, TemperatureSource::Request),
            // The tenant's own fit, made with this very policy plugin.
            (None, _) if tenant.is_some_and(fitted_here) => {
                let c = tenant.expect("checked");
                Applied {
                    policy,
                    params: Ok(c.params.clone()),
                    temperature: c.temperature,
                    source: TemperatureSource::Tenant,
                }
            }
            (None, Some(t)) => from_temperature(t, TemperatureSource::Operator),
            (None, None) => {
                let c = server;
                if c.source == TemperatureSource::Calibrated && fitted_here(c) {
                    Applied {
                        policy,
                        params: Ok(c.params.clone()),
                        temperature: c.temperature,
                        source: c.source,
                    }
                } else {
                    from_temperature(1.0, TemperatureSource::Default)
                }
            }
        }
    }

    /// Answers every question of the request. Blocking: call from a blocking thread. A
    /// request is a batch of one item, its input asked the request's questions
    /// ([`Engine::decide_items`]), so single requests and batches read alike.
    pub fn decide(&self, request: &DecisionRequest) -> Result<Decided, EngineError> {
        let item = Item::shared(request.state.clone());
        let mut items = self.decide_items(request, vec![item])?;
        items.pop().unwrap_or_else(|| {
            Err(EngineError::Internal(
                "a batch of one item answered no item".into(),
            ))
        })
    }

    /// Raw option scores of each question about `state`, through the same compile, render and
    /// read steps as [`Engine::decide`] (readout `auto`) but without calibration and without
    /// request metrics: what startup calibration and the self-check measure. A question that
    /// cannot be read gives the reason.
    pub fn read_raw(&self, state: &str, questions: &[Question]) -> Vec<Result<RawRead, String>> {
        self.read_raw_in(&RequestScope::default(), state, questions)
    }

    /// [`Engine::read_raw`] with a tenant's plugins and renderer (its own calibration fit),
    /// read with the setup a request of that scope naming nothing would get.
    pub fn read_raw_in(
        &self,
        scope: &RequestScope,
        state: &str,
        questions: &[Question],
    ) -> Vec<Result<RawRead, String>> {
        let resolved = self.resolve_setup(scope.renderer.as_deref(), None);
        self.read_raw_with(scope, &resolved, state, questions, None)
    }

    /// What a request of a scope with this tenant renderer and request renderer is read with.
    pub fn resolve_setup(&self, tenant: Option<&str>, request: Option<&str>) -> Resolved {
        setup::resolve(
            &self.served().setup,
            tenant,
            request,
            &readout::Options::default(),
        )
    }

    /// [`Engine::read_raw_in`] with an explicit setup (what `decide tune` compares), and,
    /// with `neutral` states, each question's content-free scores ([`RawRead::content_free`]).
    pub fn read_raw_with(
        &self,
        scope: &RequestScope,
        resolved: &Resolved,
        state: &str,
        questions: &[Question],
        neutral: Option<&[String]>,
    ) -> Vec<Result<RawRead, String>> {
        let Some(renderer) = self
            .plugins
            .renderer_in(scope.plugins.as_deref(), &resolved.renderer)
        else {
            let reason = missing_renderer(resolved).to_string();
            return questions.iter().map(|_| Err(reason.clone())).collect();
        };
        let options = resolved.options;
        let session = scope.cancel.plugin_session();
        let planned: Vec<Result<Planned, Refusal>> = questions
            .iter()
            .enumerate()
            .map(|(index, question)| {
                match self.compile_one(index, question, &options, scope, &session) {
                    Ok(planned) => planned,
                    Err(error) => Err(Refusal {
                        kind: error.refusal_kind(),
                        code: "invalid_question",
                        message: error.to_string(),
                        loc: question.loc.clone(),
                        abstained: None,
                        prompt: None,
                    }),
                }
            })
            .collect();
        let mut decided = Decided::new();
        // Calibration and self-check reads have a tenant of their own (one per tenant scope).
        let salt = crate::prefix_cache::tenant_salt(&[
            "decide-internal",
            scope.plugins.as_deref().unwrap_or(""),
        ]);
        let stopped = std::sync::OnceLock::new();
        let admission = Admission::new(&stopped);
        let prompting = Prompting {
            renderer: &renderer,
            salt,
            session: &session,
            scope,
            admission: &admission,
            keep_prompts: false,
        };
        let mut content_free = neutral
            .map(|states| {
                self.read_content_free(states, questions, &planned, &prompting, &mut decided)
            })
            .map(Vec::into_iter);
        self.read_planned(state, questions, planned, &prompting, &mut decided)
            .into_iter()
            .map(|read| {
                let free = content_free
                    .as_mut()
                    .map(|c| c.next().expect("one per question"));
                let (planned, read) = read.map_err(|refusal| refusal.message)?;
                Ok(RawRead {
                    options: planned.compiled.options,
                    scores: read.combined.scores,
                    option_mass: read.combined.option_mass,
                    shift_top: read.combined.detail.shift_top,
                    content_free: free.transpose()?,
                })
            })
            .collect()
    }

    /// Content-free scores of each planned question (in question order): the question read
    /// over each neutral state with the same renderer, labels and readout, its option
    /// distributions averaged, as logs. A question whose neutral read fails gets the reason.
    fn read_content_free(
        &self,
        states: &[String],
        questions: &[Question],
        planned: &[Result<Planned, Refusal>],
        prompting: &Prompting<'_>,
        decided: &mut Decided,
    ) -> Vec<Result<Vec<f64>, String>> {
        let mut sums: Vec<Result<Vec<f64>, String>> = planned
            .iter()
            .map(|p| match p {
                Ok(p) => Ok(vec![0.0; p.compiled.options.len()]),
                Err(refusal) => Err(refusal.message.clone()),
            })
            .collect();
        // The neutral reads are not the request's own: their prompts are not returned.
        let prompting = &Prompting {
            keep_prompts: false,
            ..*prompting
        };
        for state in states {
            let reads = self.read_planned(state, questions, planned.to_vec(), prompting, decided);
            for (sum, read) in sums.iter_mut().zip(reads) {
                let Ok(total) = sum else { continue };
                match read {
                    Ok((_, read)) => {
                        let p = crate::calibration::cv::raw_probabilities(&read.combined.scores);
                        for (t, x) in total.iter_mut().zip(p) {
                            *t += x;
                        }
                    }
                    Err(refusal) => {
                        *sum = Err(format!(
                            "the content-free read over the neutral state {state:?} failed: {}",
                            refusal.message
                        ))
                    }
                }
            }
        }
        let n = states.len().max(1) as f64;
        sums.into_iter()
            .map(|sum| sum.map(|total| total.iter().map(|t| (t / n).ln()).collect()))
            .collect()
    }

    /// Renders one ask into prompt tokens and checks its labels. Long texts are tokenized
    /// through the model's token cache under the tenant's salt, so a tenant's repeated
    /// input is tokenized once and no tenant can time another's cache entries.
    fn prepare_one(
        &self,
        state: &str,
        loc: &Loc,
        ask: &readout::Ask,
        prompting: &Prompting<'_>,
    ) -> Result<Prepared, Refusal> {
        let Prompting {
            renderer,
            salt,
            session,
            ..
        } = *prompting;
        let messages = match renderer.render_in(session, state, &ask.question, &ask.labels) {
            Ok(messages) => messages,
            Err(error) => return Err(plugin_call_refusal(loc, error)),
        };
        let prompt = match self.model.render_cached(&messages, salt) {
            Ok(prompt) => prompt,
            Err(error) => return Err(model_refusal(loc, error)),
        };
        if prompt.tokens.len() > self.limits.max_prompt_tokens {
            return Err(Refusal {
                kind: RefusalKind::BadRequest,
                code: "context_length_exceeded",
                message: format!(
                    "{}: the prompt is {} tokens, over the limit of {} (setting --max-prompt-tokens / DECIDE_MAX_PROMPT_TOKENS, at most the model's context length); shorten the input",
                    dotted(loc),
                    prompt.tokens.len(),
                    self.limits.max_prompt_tokens
                ),
                loc: loc.clone(),
                abstained: None,
                prompt: None,
            });
        }
        let label_ids = match self.model.label_ids_cached(&prompt, &ask.labels, salt) {
            Ok(ids) => ids,
            Err(error) => return Err(model_refusal(loc, error)),
        };
        let shown = prompting.keep_prompts.then(|| ReadPrompt {
            token_ids: prompt.tokens.clone(),
            text: prompt.text,
            // Set once the round's prompts are all prepared (`prompts::set_round_prefix`) and
            // once the read is back.
            prefix_tokens: 0,
            cached_tokens: 0,
            labels: ask.labels.clone(),
            label_token_ids: label_ids.clone(),
        });
        Ok(Prepared {
            tokens: prompt.tokens.len(),
            prompt: scheduler::Prompt {
                tokens: prompt.tokens,
                label_ids,
            },
            shown,
        })
    }

    /// Reads every prepared prompt of one request on the model worker ([`Scheduler`]): the
    /// prompts' shared prefix is prefilled once (or found in the tenant's prefix cache) and
    /// every prompt's own tokens run in packed passes, possibly with other requests'. On CPU
    /// each readout equals a lone read of its full prompt bit for bit (tested in models/).
    /// Returns per prompt the readout and how many of its tokens came from a cache.
    ///
    /// The request's prompt tokens are admitted first ([`RequestScope::admit_tokens`], a
    /// tenant's tokens-per-minute): a refusal is kept in `prompting.admission` for
    /// [`Engine::decide_items`] to fail the item with, and nothing more of it is read.
    fn read_batch(
        &self,
        prompts: Vec<scheduler::Prompt>,
        prompting: &Prompting<'_>,
        decided: &mut Decided,
    ) -> Vec<scheduler::PromptRead> {
        if prompts.is_empty() {
            return Vec::new();
        }
        let scope = prompting.scope;
        let unread = |reason: &str| -> Vec<scheduler::PromptRead> {
            (0..prompts.len())
                .map(|_| Err(ModelError::Compute(reason.into())))
                .collect()
        };
        // A request cancelled (client gone, deadline passed) sends nothing more to the model.
        if let Some(error) = scope.cancel.error() {
            prompting.admission.stop(error);
            return unread("the request was cancelled");
        }
        // Its place in the worker's queue first: an overloaded server refuses before the
        // tenant's token rate is spent on it.
        let ticket = match self.scheduler.reserve(&prompts, scope.sheddable) {
            Ok(ticket) => ticket,
            Err(full) => {
                prompting.admission.stop(overloaded(&full));
                return unread("the model worker's queue is full");
            }
        };
        let tokens = prompts.iter().map(|p| p.tokens.len()).sum::<usize>();
        if !prompting.admission.admit(tokens, scope) {
            let reason = "the request was refused by its tenant's input-token rate";
            return unread(reason);
        }
        decided.input_tokens += tokens;
        decided.scheduler_jobs += 1;
        let sent = Instant::now();
        let result = self.scheduler.read_in(
            ticket,
            prompts,
            prompting.salt,
            scope.flow,
            scope.cancel.clone(),
        );
        decided.timings.model += sent.elapsed();
        decided.forward_passes += result.forward_passes;
        if result.cancelled {
            if let Some(error) = scope.cancel.error() {
                prompting.admission.stop(error);
            }
        }
        for read in result.reads.iter().flatten() {
            decided.cached_tokens += read.1;
        }
        result.reads
    }

    /// Calibrates a read and lets the question type turn it into its answer, or abstains
    /// when the model's mass on the option labels is below the request's `min_option_mass`.
    /// Either carries the read's prompts when the request asked for them.
    fn answer_one(
        &self,
        question: &Question,
        planned: Planned,
        mut read: Read,
        given: &Given,
    ) -> Outcome {
        let prompt = read.prompts.take().map(|reads| QuestionPrompts { reads });
        self.answer_read(question, planned, read, given)
            .with_prompt(prompt)
    }

    /// [`Engine::answer_one`] without the prompts.
    fn answer_read(
        &self,
        question: &Question,
        planned: Planned,
        read: Read,
        given: &Given,
    ) -> Outcome {
        let Given {
            calibration,
            applied,
            rendering,
            min_option_mass,
            content_free,
            session,
        } = *given;
        let loc = &question.loc;
        let refuse_plugin =
            |error: PluginCallError| Outcome::Refusal(plugin_call_refusal(loc, error));
        let Read {
            combined,
            input_tokens,
            cached_tokens,
            ..
        } = read;
        if f64::from(combined.option_mass) < min_option_mass {
            return Outcome::Refusal(abstention(loc, combined.option_mass, min_option_mass));
        }
        let params = match &applied.params {
            Ok(params) => params.clone(),
            Err(error) => return refuse_plugin(error.clone()),
        };
        let scores = match content_free.map(|all| &all[planned.index]) {
            None => combined.scores.clone(),
            Some(Ok(free)) => [combined.scores.as_slice(), free.as_slice()].concat(),
            // The reason already names the question (it is the neutral read's refusal).
            Some(Err(reason)) => {
                return Outcome::Refusal(Refusal {
                    kind: RefusalKind::Invalid,
                    code: "content_free_read_failed",
                    message: reason.clone(),
                    loc: loc.clone(),
                    abstained: None,
                    prompt: None,
                })
            }
        };
        let probabilities = match calibration.apply_in(session, &scores, &params) {
            Ok(probabilities) => probabilities,
            Err(error) => return refuse_plugin(error),
        };
        let fields = match planned
            .plugin
            .answer_in(session, &question.json, &probabilities)
        {
            Ok(fields) => fields,
            Err(error) => return refuse_plugin(error),
        };
        Outcome::Answer(Box::new(Answer {
            fields,
            option_keys: planned
                .compiled
                .options
                .iter()
                .map(|o| o.key.clone())
                .collect(),
            logprobs: combined.scores.iter().map(|&s| s as f32).collect(),
            probabilities,
            option_mass: combined.option_mass,
            readout: combined.detail,
            input_tokens,
            cached_tokens,
            temperature: applied.temperature,
            temperature_source: applied.source,
            calibration_policy: applied.policy.clone(),
            calibration_params: params,
            rendering: rendering.clone(),
            min_option_mass,
            prompt: None,
        }))
    }
}

/// What every answer of one request is given besides its own read.
#[derive(Clone, Copy)]
struct Given<'a> {
    calibration: &'a crate::plugins::Calibration,
    applied: &'a Applied,
    rendering: &'a Rendering,
    min_option_mass: f64,
    /// Per question (by index), its content-free scores when the policy takes them.
    content_free: Option<&'a [Result<Vec<f64>, String>]>,
    session: &'a Session,
}

/// The refusal of an answer whose option mass fell below `min_option_mass`.
/// Checks a request's question count against the server's `--max-questions`: at least one, at
/// most `max`; `loc` is where the questions sit.
pub fn question_count(count: usize, max: usize, loc: &Loc) -> Result<(), EngineError> {
    if count == 0 {
        return Err(EngineError::invalid_at(
            loc,
            "at least one question is required",
        ));
    }
    if count > max {
        return Err(EngineError::invalid_at(
            loc,
            format!("{count} questions exceed the limit of {max} per request (setting --max-questions / DECIDE_MAX_QUESTIONS)"),
        ));
    }
    Ok(())
}

fn abstention(loc: &Loc, option_mass: f32, min_option_mass: f64) -> Refusal {
    Refusal {
        kind: RefusalKind::Invalid,
        code: "low_option_mass",
        message: format!(
            "{}: abstained: the model put {option_mass:.3} of its next-token probability on the option labels, below min_option_mass {min_option_mass} (extra.min_option_mass, tenant setting min_option_mass, or --min-option-mass / DECIDE_MIN_OPTION_MASS): it wanted to say something else, as when text in the input steers it or no option fits",
            dotted(loc)
        ),
        loc: loc.clone(),
        abstained: Some(Abstention {
            option_mass,
            min_option_mass,
        }),
        prompt: None,
    }
}

/// A question rendered to prompt tokens, with its label token ids.
struct Prepared {
    /// The tokens and label ids, moved to the model worker by [`Engine::read_round`] (not
    /// copied: with a long input they are tens of kilobytes per question).
    prompt: scheduler::Prompt,
    /// How many tokens the prompt has (kept once the prompt has gone to the worker).
    tokens: usize,
    /// A copy of the prompt for the answer, when the request asked for its prompts.
    shown: Option<ReadPrompt>,
}

/// The error for a renderer that is not loaded: the request's field or the tenant's setting
/// when either chose it (a 400 for the caller to fix), else the server's (a 503).
fn missing_renderer(resolved: &Resolved) -> EngineError {
    let name = &resolved.renderer;
    match resolved.source {
        SetupSource::Request => EngineError::invalid(
            crate::loc!["extra", "renderer"],
            format!("extra.renderer: no renderer plugin `{name}` is loaded; see GET /v1/plugins for the renderers"),
        ),
        SetupSource::Tenant => EngineError::invalid(
            vec![],
            format!("the tenant's renderer plugin `{name}` is not loaded (tenant setting `renderer`; upload it or change the setting)"),
        ),
        _ => EngineError::NotReady {
            reason: format!("renderer plugin `{name}` is not loaded (setting --renderer)"),
            retry_after_s: None,
        },
    }
}

/// The error for a renderer or calibration plugin that is not loaded: the tenant's setting
/// when the tenant chose it (a 400 for the tenant to fix), else the server's (a 503).
fn missing_plugin(kind: &str, name: &str, scope: &RequestScope, flag: &str) -> EngineError {
    let chosen_by_tenant = match kind {
        "renderer" => scope.renderer.is_some(),
        _ => scope.calibration.is_some(),
    };
    if chosen_by_tenant {
        EngineError::invalid(
            vec![],
            format!("the tenant's {kind} plugin `{name}` is not loaded (tenant setting `{kind}`; upload it or change the setting)"),
        )
    } else {
        EngineError::NotReady {
            reason: format!("{kind} plugin `{name}` is not loaded (setting {flag})"),
            retry_after_s: None,
        }
    }
}

/// Seconds an overloaded server asks a client to wait: the queue moves in passes of
/// milliseconds (GPU) to a second or so (CPU).
pub const OVERLOADED_RETRY_AFTER_S: u64 = 1;

/// The 503 of a request the model worker's queue has no room for.
fn overloaded(full: &scheduler::Overloaded) -> EngineError {
    let bound = |max: usize| match max {
        0 => "none".to_string(),
        max => max.to_string(),
    };
    let asked = match full.tokens {
        0 => String::new(),
        tokens => format!(" (this request's read: {tokens} tokens)"),
    };
    EngineError::Overloaded {
        message: format!(
            "the server is overloaded: {} requests and {} tokens wait for the model{asked}, at the bounds --max-queued-requests {} / --max-queued-tokens {} (DECIDE_MAX_QUEUED_REQUESTS, DECIDE_MAX_QUEUED_TOKENS); retry after {OVERLOADED_RETRY_AFTER_S} s or on another replica",
            full.depth.requests,
            full.depth.tokens,
            bound(full.limits.max_requests),
            bound(full.limits.max_tokens),
        ),
        retry_after_s: OVERLOADED_RETRY_AFTER_S,
    }
}

/// A refusal for a read the model worker failed: a pass that returned an error or panicked,
/// a worker that stopped. The engine failed, not the question, so it is 502 `engine_error`
/// (the field-schema format's "engine failure"): the request may be retried as it is, and
/// the server keeps serving. Errors that are the prompt's own keep their own refusals.
fn engine_refusal(loc: &Loc, error: ModelError) -> Refusal {
    match error {
        ModelError::PromptTooLong { .. }
        | ModelError::Label { .. }
        | ModelError::TokenOutOfRange { .. }
        | ModelError::EmptyPrompt => model_refusal(loc, error),
        error => Refusal {
            kind: RefusalKind::EngineFailed,
            code: "engine_error",
            message: format!(
                "{}: the model failed to read this question ({error}); only this request's batch failed and the server keeps serving: retry the request",
                dotted(loc)
            ),
            loc: loc.clone(),
            abstained: None,
            prompt: None,
        },
    }
}

/// A refusal for a failed renderer or calibration call.
fn plugin_call_refusal(loc: &Loc, error: PluginCallError) -> Refusal {
    match error {
        PluginCallError::InvalidQuestion(message) => Refusal {
            kind: RefusalKind::Invalid,
            code: "invalid_question",
            message: format!("{}: {message}", dotted(loc)),
            loc: loc.clone(),
            abstained: None,
            prompt: None,
        },
        PluginCallError::Failed { message, .. } => plugin_refusal(loc, &message),
    }
}

fn with_field(loc: &Loc, field: &str) -> Loc {
    let mut loc = loc.clone();
    loc.push(LocPart::Field(field.to_string()));
    loc
}

/// A plugin's `invalid-question` message reads `<path within the question>: <what is wrong>`;
/// the host prefixes the question's own location so the caller sees the full path.
fn invalid_from_plugin(question_loc: &Loc, message: &str) -> EngineError {
    let (path, reason) = match message.split_once(": ") {
        Some((path, reason)) if !path.is_empty() && !path.contains(' ') => (Some(path), reason),
        _ => (None, message),
    };
    let mut loc = question_loc.clone();
    if let Some(path) = path {
        loc.extend(parse_path(path));
    }
    EngineError::invalid(loc.clone(), format!("{}: {reason}", dotted(&loc)))
}

/// Parses `choices[2].value` into location parts.
fn parse_path(path: &str) -> Vec<LocPart> {
    let mut parts = Vec::new();
    for segment in path.split('.') {
        let mut rest = segment;
        if let Some(open) = rest.find('[') {
            if open > 0 {
                parts.push(LocPart::Field(rest[..open].to_string()));
            }
            rest = &rest[open..];
            while let Some(stripped) = rest.strip_prefix('[') {
                let Some(close) = stripped.find(']') else {
                    break;
                };
                match stripped[..close].parse::<usize>() {
                    Ok(index) => parts.push(LocPart::Index(index)),
                    Err(_) => parts.push(LocPart::Field(stripped[..close].to_string())),
                }
                rest = &stripped[close + 1..];
            }
        } else if !rest.is_empty() {
            parts.push(LocPart::Field(rest.to_string()));
        }
    }
    parts
}

/// A refusal for a plugin failure; the runtime's message already names the plugin and cause.
fn plugin_refusal(loc: &Loc, message: &str) -> Refusal {
    Refusal {
        kind: RefusalKind::Invalid,
        code: "plugin_failed",
        message: format!("{}: {message}", dotted(loc)),
        loc: loc.clone(),
        abstained: None,
        prompt: None,
    }
}

fn model_refusal(loc: &Loc, error: ModelError) -> Refusal {
    let (kind, code) = match &error {
        ModelError::PromptTooLong { .. } => (RefusalKind::BadRequest, "context_length_exceeded"),
        ModelError::Label { .. } => (RefusalKind::Invalid, "label_not_readable"),
        _ => (RefusalKind::Invalid, "model_failed"),
    };
    Refusal {
        kind,
        code,
        message: format!("{}: {error}", dotted(loc)),
        loc: loc.clone(),
        abstained: None,
        prompt: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loc;

    #[test]
    fn plugin_paths_are_prefixed_with_the_question_location() {
        let error = invalid_from_plugin(
            &loc!["questions", 1],
            "choices[2].value: must be a string or a boolean",
        );
        match error {
            EngineError::Invalid { loc, message, .. } => {
                assert_eq!(dotted(&loc), "questions[1].choices[2].value");
                assert_eq!(
                    message,
                    "questions[1].choices[2].value: must be a string or a boolean"
                );
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn messages_without_a_path_keep_the_question_location() {
        let error = invalid_from_plugin(&loc!["questions", "q1"], "the question must be an object");
        assert_eq!(dotted(error_loc(&error)), "questions.q1");
    }

    fn error_loc(error: &EngineError) -> &Loc {
        match error {
            EngineError::Invalid { loc, .. } => loc,
            _ => panic!("not invalid"),
        }
    }
}
