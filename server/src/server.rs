//! Startup: listen first, then load plugins and the model in the background, then flip to ready.
//!
//! Listening before loading lets orchestrators and clients see progress (`/health`) and get a
//! clean 503 with Retry-After instead of a refused connection.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use decide_models::{Device, Kernels, LoadOptions, Matmuls, Model, WeightFormat};

use crate::api;
use crate::calibration;
use crate::config::Config;
use crate::cores::WorkerCore;
use crate::metrics::Metrics;
use crate::pipeline::{Engine, EngineSettings, Limits, Setup};
use crate::plugins::{PluginRegistry, RuntimeConfig};
use crate::progress::Reporter;
use crate::scheduler::SchedulerConfig;
use crate::state::{AppState, Pending, SharedState};
use crate::tenancy::{Components, Directory};
use crate::tune;

/// Runs the server until Ctrl-C / SIGTERM.
pub async fn serve(config: Config) -> anyhow::Result<()> {
    let mut shown = config.clone();
    if shown.api_key.is_some() {
        shown.api_key = Some("<redacted>".into());
    }
    if shown.admin_key.is_some() {
        shown.admin_key = Some("<redacted>".into());
    }
    if shown.store.is_some() {
        // The URL may carry a password.
        shown.store = Some("<redacted>".into());
    }
    tracing::info!(config = ?shown, "starting decide {}", env!("CARGO_PKG_VERSION"));
    // Before anything can take long: a stop signal from now on stops the server cleanly.
    let signal = crate::drain::StopSignal::install().context("listening for stop signals")?;
    let listener = tokio::net::TcpListener::bind((config.host, config.port))
        .await
        .with_context(|| {
            format!(
                "cannot listen on {}:{} (settings --host/--port)",
                config.host, config.port
            )
        })?;
    let address = listener.local_addr()?;
    // Tests and scripts read this line to find a port chosen with --port 0.
    println!("decide listening on http://{address}");
    tracing::info!("listening on http://{address}");

    let directory = Arc::new(open_directory(&config)?);
    let state = AppState::new(config, Arc::new(Metrics::default()), directory);
    crate::store_watch::spawn(&state);
    let loader = state.clone();
    tokio::task::spawn_blocking(move || load(&loader));

    let drain = state.drain.clone();
    let timeout = std::time::Duration::from_secs_f64(state.config.drain_timeout_s);
    let header_read_timeout = Duration::from_secs_f64(state.config.header_read_timeout_s);
    match crate::drain::serve_until_drained(
        listener,
        api::router(state),
        drain,
        timeout,
        signal,
        header_read_timeout,
    )
    .await?
    {
        crate::drain::Stopped::Drained {
            startup_abandoned: false,
        } => {
            tracing::info!("drained: every request in flight finished");
            Ok(())
        }
        crate::drain::Stopped::Drained {
            startup_abandoned: true,
        } => anyhow::bail!(
            "stopped during startup: every request in flight finished, and the startup work still running (loading, self-check, tuning or calibration) was abandoned"
        ),
        crate::drain::Stopped::Cut { in_flight } => anyhow::bail!(
            "the drain deadline of {timeout:?} passed with {in_flight} requests still running; their work was cancelled and they were abandoned (setting --drain-timeout-s)"
        ),
    }
}

/// Opens the tenant store (`--store`, else the embedded one in `--data-dir`) and loads its
/// tenants and keys.
pub fn open_directory(config: &Config) -> anyhow::Result<Directory> {
    let dir = config.resolved_data_dir();
    let store =
        crate::tenancy::open_store(config.store.as_deref(), &dir).map_err(anyhow::Error::msg)?;
    let shared = config.store.is_some();
    let directory = Directory::open(store, config.api_key.as_deref())
        .map(|directory| directory.allow_anonymous(config.allow_anonymous))
        .with_context(|| {
            if shared {
                "reading the tenant store (setting --store)".to_string()
            } else {
                format!(
                    "reading the tenant store in {} (setting --data-dir)",
                    dir.display()
                )
            }
        })?;
    tracing::info!(store = if shared { "postgres" } else { "embedded" }, data_dir = %dir.display(), tenants = directory.tenants().len(), "tenant store opened");
    Ok(directory)
}

/// Loads plugins and model into the shared state, recording progress and failure (`serve`
/// in the background while it listens, `decide mcp` before it answers). The server answers
/// as soon as the model is loaded and the self-check passed, with the setup and correction
/// saved for it (a result measured earlier or shipped in the binary), else the default; what
/// has to be measured (startup tuning, then calibration) runs after that, in the background
/// ([`settle_setup`]), and swaps its result in when it is kept.
pub(crate) fn load(state: &SharedState) {
    match build_engine(state) {
        Ok((engine, served, pending)) => {
            let delay = state.config.ready_delay_ms;
            if delay > 0 {
                std::thread::sleep(Duration::from_millis(delay));
            }
            let engine = Arc::new(engine);
            let setup = engine.setup();
            tracing::info!(model = %served, setup = %setup.label(), setup_source = setup.source.as_str(), pending = ?pending.names(), "ready");
            state.set_ready(engine.clone(), served);
            settle_setup(state, &engine, pending);
        }
        Err(error) => {
            let reason = format!("{error:#}");
            tracing::error!(%reason, "startup failed; decision requests will get 503");
            state.set_failed(reason);
        }
    }
    state.drain.startup_done();
}

fn build_engine(state: &SharedState) -> anyhow::Result<(Engine, String, Pending)> {
    let config = &state.config;
    // Every long step below reports to the log (with its ETA) and to /health.
    let progress = state.reporter();
    let (mut engine, served) = load_engine(config, state.metrics.clone(), &progress, &|step| {
        state.set_loading(step)
    })?;
    state.set_loading("loading tenants' plugins");
    load_tenant_plugins(engine.plugins(), &state.directory);
    state.set_loading("answer-slot self-check");
    check_answer_slot(&mut engine, config, &progress)?;
    state.set_loading("saved tuning and calibration");
    let pending = apply_saved_setup(&engine, state);
    state.set_pending(pending);
    Ok((engine, served, pending))
}

/// Tuning's settings for `serve` and the CLI commands, read as `reading` says.
fn tune_settings(config: &Config, reading: calibration::budget::Reading) -> tune::Settings<'_> {
    tune::Settings {
        questions: tune::Questions::from_flag(config.tune_questions.as_deref()),
        dir: config.resolved_calibration_dir(),
        model_file: &config.model,
        renderers: config.tune_renderers.clone(),
        reuse: true,
        neutral: None,
        reading,
    }
}

/// Startup calibration's settings, read as `reading` says.
fn calibration_settings(
    config: &Config,
    reading: calibration::budget::Reading,
) -> calibration::Settings<'_> {
    calibration::Settings {
        questions: calibration::Questions::from_flag(config.calibration_questions.as_deref()),
        dir: config.resolved_calibration_dir(),
        model_file: &config.model,
        reuse: true,
        reading,
    }
}

/// Whether startup calibration has anything to do: not when the operator's temperature
/// applies to every answer, nor when the correction tuning measured is served.
fn calibration_wanted(config: &Config, corrected: bool) -> bool {
    if corrected {
        return false;
    }
    if config.temperature.is_some() {
        tracing::info!("startup calibration not run: the operator temperature (--temperature) applies to every answer without one of its own");
        return false;
    }
    true
}

/// Applies what tuning and calibration saved for this model (nothing is read: a saved or
/// shipped result is looked up by its key), and says what is left to measure.
fn apply_saved_setup(engine: &Engine, state: &AppState) -> Pending {
    let config = &state.config;
    let mut pending = Pending::default();
    let mut corrected = false;
    if let Some(renderer) = &config.renderer {
        tracing::info!("startup tuning not run: --renderer pins `{renderer}` (letters, auto)");
    } else {
        match tune::saved(engine, &tune_settings(config, Default::default())) {
            Ok(Some(saved)) => {
                corrected = install_tuned(engine, state, saved);
                pending.latency = latency_wanted(config);
            }
            Ok(None) => {
                pending.tuning = !matches!(
                    tune::Questions::from_flag(config.tune_questions.as_deref()),
                    tune::Questions::Skip
                )
            }
            Err(cause) => tracing::warn!(
                "startup tuning not applied: {cause}; answers use direct-options, letters, auto"
            ),
        }
    }
    if pending.tuning {
        // Calibration is measured with the setup tuning chooses: after it.
        pending.calibration = calibration_wanted(config, false);
        return pending;
    }
    if !calibration_wanted(config, corrected) {
        return pending;
    }
    let settings = calibration_settings(config, Default::default());
    match calibration::saved(engine, &settings) {
        Ok(Some(saved)) => engine.set_calibration(calibration::state_of(&saved)),
        Ok(None) => {
            pending.calibration = !matches!(settings.questions, calibration::Questions::Skip)
        }
        Err(cause) => tracing::warn!(
            "startup calibration not applied: {cause}; answers use T = 1.0, source default"
        ),
    }
    pending
}

/// Installs a tuning result: its setup, and its correction when it applies. Returns whether
/// the correction was installed (startup calibration then does not run).
fn install_tuned(engine: &Engine, state: &AppState, saved: tune::store::Saved) -> bool {
    let setup = saved.setup();
    tracing::info!(setup = %setup.label(), source = setup.source.as_str(), "prompt setup");
    engine.set_setup(setup);
    let corrected = apply_tuned_correction(engine, &state.config, &saved);
    state.set_tuned(Some(saved));
    corrected
}

/// Whether the served setup is weighed by its latency on this device (`--latency-target-ms`
/// above 0, no `--renderer` pinned).
fn latency_wanted(config: &Config) -> bool {
    config.latency_target_ms > 0.0 && config.renderer.is_none()
}

/// Times a question on this device and serves the setup [`tune::latency::choose`] picks
/// among the installed tuning result's candidates; whether that changed the setup.
fn serve_by_latency(state: &AppState, engine: &Engine) -> bool {
    let Some(saved) = state
        .tuned
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
    else {
        return false;
    };
    let task = state.reporter().start("latency", "reads", 6);
    let timing = match tune::latency::measure(engine, &saved.setup()) {
        Ok(timing) => timing,
        Err(cause) => {
            tracing::warn!(
                "the latency-aware setup was not measured: {cause}; the tuned setup is served"
            );
            return false;
        }
    };
    task.finish();
    let serving = tune::latency::choose(&saved, &timing, state.config.latency_target_ms);
    tracing::info!(setup = %serving.setup, as_tuned = serving.as_tuned, "latency-aware setup: {}", serving.reason);
    let changed = !serving.as_tuned;
    if changed {
        engine.set_setup(serving.setup(&saved));
        // The tuned correction was fitted to the tuned setup's reads: until calibration has
        // measured this one, answers are uncorrected (T = 1.0, source default).
        if calibration_wanted(&state.config, false) {
            let policy = engine.calibration().policy;
            engine.set_calibration(calibration::CalibrationState::default_for(&policy));
        }
    }
    state.set_serving(serving);
    changed
}

/// Startup's measurements after the server answers: tuning, then calibration, each read on
/// the model worker only while no request waits ([`crate::scheduler::Flow::BACKGROUND`]),
/// within `--tune-budget-s`, stopped by SIGTERM; each result is swapped in when it is kept
/// (requests in flight keep the setup they started with), as a plugin swap is.
fn settle_setup(state: &SharedState, engine: &Engine, pending: Pending) {
    let config = &state.config;
    let progress = state.reporter();
    let budget = (config.tune_budget_s > 0.0 && config.tune_budget_s.is_finite())
        .then(|| Duration::from_secs_f64(config.tune_budget_s));
    let reading =
        || calibration::budget::Reading::background(state.drain.background_token(), budget);
    let stopped = || state.drain.background_token().is_cancelled();
    let mut left = pending;
    let mut corrected = false;
    if pending.tuning {
        let settings = tune_settings(config, reading());
        let (setup, saved) = tune::startup(engine, &settings, &progress);
        if stopped() {
            tracing::info!("startup tuning stopped: the server is stopping");
            return;
        }
        match saved {
            Some(saved) => {
                corrected = install_tuned(engine, state, saved);
                left.latency = latency_wanted(config);
            }
            None => engine.set_setup(setup),
        }
        left.tuning = false;
        left.calibration = pending.calibration && calibration_wanted(config, corrected);
        state.set_pending(left);
    }
    if left.latency {
        if serve_by_latency(state, engine) {
            // Another setup than the tuned one: its correction must be measured for it.
            left.calibration = calibration_wanted(config, false);
        }
        if stopped() {
            tracing::info!("the latency-aware setup was not settled: the server is stopping");
            return;
        }
        left.latency = false;
        state.set_pending(left);
    }
    if left.calibration {
        let settings = calibration_settings(config, reading());
        let (calibrated, _) = calibration::startup(engine, &settings, &progress);
        if stopped() {
            tracing::info!("startup calibration stopped: the server is stopping");
            return;
        }
        engine.set_calibration(calibrated);
        left.calibration = false;
        state.set_pending(left);
    }
    if pending != Pending::default() {
        let setup = engine.setup();
        let calibration = engine.calibration();
        tracing::info!(setup = %setup.label(), setup_source = setup.source.as_str(), policy = %calibration.policy, temperature_source = calibration.source.as_str(), "startup setup settled");
    }
}

/// Loads every tenant's active plugins from the store (after the built-ins and the plugins
/// directory), and has the registry read tenants' current limits from the directory.
fn load_tenant_plugins(plugins: &PluginRegistry, directory: &Arc<Directory>) {
    let lookup = directory.clone();
    plugins.set_tenant_limits_lookup(Arc::new(move |tenant: &str| {
        lookup.tenant(tenant).map(|t| t.limits.plugins())
    }));
    let store = Components(directory.store().as_ref());
    plugins.load_tenant_plugins(&store, &|tenant: &str| {
        directory.tenant(tenant).map(|t| t.limits.plugins())
    });
}

/// Runs the answer-slot self-check (see [`crate::selfcheck`]) and records it in the engine;
/// an error with the reason when the model cannot serve decisions.
pub fn check_answer_slot(
    engine: &mut Engine,
    config: &Config,
    progress: &Reporter,
) -> anyhow::Result<()> {
    let report = engine.run_self_check(config.self_check_min_mass, progress);
    let summary = report.summary();
    if !report.passed() {
        anyhow::bail!("{summary}");
    }
    tracing::info!("{summary}");
    engine.set_self_check(report);
    Ok(())
}

/// Loads plugins and the model and builds the engine (uncalibrated), reporting steps to
/// `step` and the model's load (MiB of tensors read) to `progress`.
pub fn load_engine(
    config: &Config,
    metrics: Arc<Metrics>,
    progress: &Reporter,
    step: &dyn Fn(String),
) -> anyhow::Result<(Engine, String)> {
    step("loading plugins".into());
    let started = Instant::now();
    let runtime = RuntimeConfig {
        memory_limit_bytes: (config.plugin_memory_mib as usize) * 1024 * 1024,
        call_timeout: Duration::from_millis(config.plugin_timeout_ms),
        cache_dir: Some(config.resolved_cache_dir()),
        plugins_dir: config.plugins.clone(),
        poll_interval: Duration::from_millis(config.plugin_poll_ms),
    };
    let plugins = PluginRegistry::start(runtime).context("loading plugins")?;
    for name in config.renderer.iter() {
        if plugins.renderer(name).is_none() {
            anyhow::bail!("renderer plugin `{name}` is not loaded (setting --renderer)");
        }
    }
    if config.calibration != calibration::AUTO && plugins.calibration(&config.calibration).is_none()
    {
        anyhow::bail!(
            "calibration plugin `{}` is not loaded (setting --calibration)",
            config.calibration
        );
    }
    tracing::info!(
        seconds = started.elapsed().as_secs_f64(),
        plugins = plugins.list().len(),
        "plugins loaded"
    );

    step("loading the model".into());
    let started = Instant::now();
    let device = parse_device(&config.device)?;
    let weights = parse_weights(&config.weights, &device)?;
    tracing::info!(?weights, "weight format");
    let kernels = parse_kernels(&config.kernels)?;
    let matmuls = parse_matmuls(&config.matmuls)?;
    let options = LoadOptions {
        weights,
        kernels,
        matmuls,
    };
    let model = load_model(config, &device, &options, progress)?;
    let worker_core = reserve_worker_core(config.worker_core, device.is_cuda())?;
    model.set_token_cache_bytes(config.token_cache_mib.saturating_mul(1 << 20));
    let info = model.info().clone();
    tracing::info!(seconds = started.elapsed().as_secs_f64(), name = %info.name, arch = %info.arch, layers = info.n_layers, context = info.context_length, "model loaded");
    let served = config
        .served_model_name
        .clone()
        .unwrap_or_else(|| info.name.clone());
    let max_prompt_tokens = match config.max_prompt_tokens {
        0 => info.context_length,
        flag => flag.min(info.context_length),
    };
    let limits = Limits {
        max_questions: config.max_questions,
        max_options: config.max_options,
        max_input_bytes: config.max_input_bytes,
        max_prompt_tokens,
        narrowed: None,
    };
    let settings = EngineSettings {
        setup: match &config.renderer {
            Some(name) => Setup::pinned(name),
            None => Setup::default_setup(),
        },
        min_option_mass: config.min_option_mass,
        calibration: config.calibration.clone(),
        operator_temperature: config.temperature,
        limits,
        scheduler: SchedulerConfig {
            prefix_cache_bytes: config.prefix_cache_mib.saturating_mul(1 << 20),
            batch_wait: Duration::from_micros(config.batch_wait_us),
            batch_rejoin: Duration::from_micros(config.batch_rejoin_us),
            max_batch_tokens: match config.max_batch_tokens {
                0 if model.transformer().is_fused() => FUSED_MAX_BATCH_TOKENS,
                0 => CPU_MAX_BATCH_TOKENS,
                tokens => tokens,
            },
            max_pass_tokens: config.max_pass_tokens,
            fair_share_tokens: config.fair_share_tokens,
            fair_share_pass_tokens: match config.fair_share_pass_tokens {
                0 if model.transformer().is_fused() => FUSED_FAIR_SHARE_PASS_TOKENS,
                0 => CPU_FAIR_SHARE_PASS_TOKENS,
                rows => rows,
            },
            queue: crate::scheduler::QueueLimits {
                max_requests: config.max_queued_requests,
                max_tokens: config.max_queued_tokens,
            },
            fault: config.inject_fault,
            worker_core,
        },
    };
    let engine = Engine::new(model, plugins, settings, metrics);
    tracing::info!(
        readouts = %engine.label_sets().summary(),
        "readout capacities"
    );
    Ok((engine, served))
}

/// The core `--worker-core` reserves for the model worker, reserved ([`crate::cores`]). A
/// wrong explicit core stops the start; where the OS refuses, the worker shares the cores.
fn reserve_worker_core(setting: WorkerCore, on_gpu: bool) -> anyhow::Result<Option<usize>> {
    let allowed = match crate::cores::allowed() {
        Ok(allowed) => allowed,
        Err(error) if setting == WorkerCore::Auto => {
            tracing::debug!(%error, "cores not known; none reserved (--worker-core)");
            return Ok(None);
        }
        Err(error) => {
            return Err(anyhow::anyhow!(
                "reading the process's cores: {error} (setting --worker-core)"
            ))
        }
    };
    let Some(core) = crate::cores::choose(setting, &allowed, on_gpu).map_err(anyhow::Error::msg)?
    else {
        return Ok(None);
    };
    match crate::cores::reserve(core) {
        Ok(()) => {
            tracing::info!(
                core,
                of = allowed.len(),
                "a core reserved for the model worker (--worker-core)"
            );
            Ok(Some(core))
        }
        Err(error) => {
            tracing::warn!(core, %error, "cannot reserve a core for the model worker; it shares them (--worker-core)");
            Ok(None)
        }
    }
}

/// Loads the model file, its progress the task `loading the model` in MiB of tensors read.
fn load_model(
    config: &Config,
    device: &Device,
    options: &LoadOptions,
    progress: &Reporter,
) -> anyhow::Result<Model> {
    let task = Arc::new(progress.start("loading the model", "MiB", 0));
    let counter = task.clone();
    let report: decide_models::LoadProgress = Arc::new(move |read, total| {
        counter.set_total(total >> 20);
        counter.set_done(read >> 20);
    });
    let model = Model::load_reporting(&config.model, device, options, Some(report))
        .with_context(|| format!("loading model {} (setting --model)", config.model.display()));
    // The loader has let go of its handle: this one ends the task.
    drop(task);
    model
}

/// `--max-batch-tokens` auto on the candle (CPU) path.
pub const CPU_MAX_BATCH_TOKENS: usize = 8192;

/// `--max-batch-tokens` auto with decide's fused CUDA kernels. H200, q15, short prompts (~89
/// cached and 41 computed tokens each), one lease (bench/reports/h200-side-by-side-9/): 1,024
/// closed-loop clients got 4,599 decisions/s (62.9% of the roofline; batches of 177 jobs in
/// one 7.3k-row pass at 506 TFLOP/s) against 4,391 (59.6%; 92 jobs, 480 TFLOP/s) with 8192;
/// 256 clients 4,336 against 4,357, 64 clients (one batch of 64 either way) and the 28k read
/// the same. The other leases of that run agreed at 1,024 clients: 4,603 and 4,625/s with
/// 16384, 4,144 and 4,312/s with 8192.
pub const FUSED_MAX_BATCH_TOKENS: usize = 16384;

/// `--fair-share-pass-tokens` auto on the candle (CPU) path: a pass costs about its rows, so
/// small passes keep a sequential tenant's wait short at little cost (bench/reports/tenancy-cpu/).
pub const CPU_FAIR_SHARE_PASS_TOKENS: usize = 64;

/// `--fair-share-pass-tokens` auto with decide's fused CUDA kernels. H200, q15, tenant A with
/// 64 clients and B with one (bench/reports/h200-q15-tenancy/): 256 rows: B's p95 ratio 1.68, A
/// 530 requests/s; 512: 1.59-1.68, A 708-720/s; 1024: 2.09, A 1,047/s; A alone ~1,900/s.
pub const FUSED_FAIR_SHARE_PASS_TOKENS: usize = 512;

/// The CLI commands' tuning step (`decide calibrate` calibrates the setup answers get):
/// installs the setup a saved result chose, else measures it in the foreground, unless
/// `--renderer` pins one or `--tune-questions none` skips it.
fn startup_tuning(engine: &Engine, config: &Config, progress: &Reporter) {
    if let Some(renderer) = &config.renderer {
        tracing::info!("startup tuning not run: --renderer pins `{renderer}` (letters, auto)");
        return;
    }
    let settings = tune_settings(config, Default::default());
    let (setup, _) = tune::startup(engine, &settings, progress);
    tracing::info!(setup = %setup.label(), source = setup.source.as_str(), "prompt setup");
    engine.set_setup(setup);
}

/// Serves the correction tuning measured with its chosen setup, when startup calibration would
/// otherwise choose one itself (`--calibration auto`, no --calibration-questions file, no
/// --temperature) and the loaded policy plugin computes what was measured. Returns whether it
/// did; startup calibration then does not run.
fn apply_tuned_correction(engine: &Engine, config: &Config, saved: &tune::store::Saved) -> bool {
    let question_file = config
        .calibration_questions
        .as_deref()
        .is_some_and(|q| q != calibration::SKIP);
    if config.calibration != calibration::AUTO || question_file || config.temperature.is_some() {
        return false;
    }
    let Some(choice) = &saved.policy else {
        return false;
    };
    let Some(policy) = engine.plugins().calibration(&choice.policy) else {
        tracing::warn!(
            "the tuned correction's policy `{}` is not loaded; calibrating instead",
            choice.policy
        );
        return false;
    };
    if !choice.matches(&policy) {
        tracing::warn!("the loaded `{}` computes differently from the one tuning measured; calibrating instead", choice.policy);
        return false;
    }
    tracing::info!(
        "calibration from tuning: {} with params {:?} ({}; measured on {}, {})",
        choice.policy,
        choice.params,
        choice.reason,
        saved.forward,
        saved.origin
    );
    engine.set_calibration(calibration::CalibrationState {
        policy: choice.policy.clone(),
        plugin_sha256: policy.sha256().to_string(),
        params: choice.params.clone(),
        temperature: choice.temperature,
        source: crate::pipeline::TemperatureSource::Calibrated,
    });
    true
}

/// What the CLI subcommands start with: plugins and model loaded like `serve` and the
/// self-check passed, with the terminal's progress (bars on a terminal, lines otherwise).
pub fn load_for_cli(config: &Config) -> anyhow::Result<(Engine, String, Reporter)> {
    let progress = Reporter::cli(config.progress_every_s);
    let (mut engine, served) =
        load_engine(config, Arc::new(Metrics::default()), &progress, &|step| {
            tracing::info!("{step}")
        })?;
    check_answer_slot(&mut engine, config, &progress)?;
    Ok((engine, served, progress))
}

/// `decide tune`: loads plugins and model like `serve`, measures every candidate setup
/// (always anew), prints the report lines and saves the result where `serve` reuses it; with
/// `--heldout`, scores every setup x policy on the held-out file and prints the table.
pub fn tune(args: crate::config::TuneArgs) -> anyhow::Result<()> {
    let config = &args.config;
    let (engine, served, progress) = load_for_cli(config)?;
    let settings = tune::Settings {
        questions: match &args.questions {
            Some(path) => tune::Questions::File(path.clone()),
            None => tune::Questions::Builtin,
        },
        dir: config.resolved_calibration_dir(),
        model_file: &config.model,
        renderers: config.tune_renderers.clone(),
        reuse: false,
        // With a held-out evaluation, content-free policies are scored too.
        neutral: args.heldout.as_ref().and_then(|_| {
            engine
                .plugins()
                .list()
                .into_iter()
                .filter(|p| p.kind == crate::plugins::PluginKind::Calibration)
                .find_map(|p| {
                    engine
                        .plugins()
                        .calibration(&p.name)?
                        .neutral_states()
                        .map(<[String]>::to_vec)
                })
        }),
        reading: Default::default(),
    };
    let (saved, measured) = tune::run_measured(&engine, &settings, &progress)
        .map_err(|cause| anyhow::anyhow!("tuning failed: {cause}"))?;
    println!("model {served} ({})", config.model.display());
    for line in tune::report_lines(&saved) {
        println!("{line}");
    }
    let mut report = serde_json::json!({"model": served, "tune": saved});
    if let Some(path) = &args.heldout {
        let heldout =
            calibration::questions::QuestionSet::read(path).map_err(anyhow::Error::msg)?;
        let chosen = saved.setup();
        let chosen_policy = saved
            .policy
            .as_ref()
            .map(|p| p.policy.clone())
            .unwrap_or_else(|| calibration::AUTO_FALLBACK.to_string());

        let table = tune::heldout::evaluate(
            &engine,
            &measured,
            &heldout,
            &chosen,
            &chosen_policy,
            args.permute,
            &progress,
        );
        let markdown = tune::heldout::markdown(&table);
        println!("{markdown}");
        if let Some(path) = &args.report {
            std::fs::write(path.with_extension("md"), &markdown)
                .with_context(|| format!("writing {}", path.with_extension("md").display()))?;
        }
        report["heldout"] = serde_json::to_value(&table)?;
    }
    if let Some(path) = &args.report {
        std::fs::write(path, serde_json::to_string_pretty(&report)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
        println!("report written to {}", path.display());
    }
    println!("saved under {}", settings.dir.display());
    Ok(())
}

/// `decide calibrate`: loads plugins and model like `serve`, runs the calibration (always
/// re-fitting), prints the report lines and saves the result where `serve` reuses it.
pub fn calibrate(args: crate::config::CalibrateArgs) -> anyhow::Result<()> {
    let config = &args.config;
    let (engine, served, progress) = load_for_cli(config)?;
    // Calibrate the setup answers will get (a saved tuning result is reused).
    startup_tuning(&engine, config, &progress);
    let questions = match &args.questions {
        Some(path) => calibration::Questions::File(path.clone()),
        None => calibration::Questions::from_flag(config.calibration_questions.as_deref()),
    };
    let settings = calibration::Settings {
        questions,
        dir: config.resolved_calibration_dir(),
        model_file: &config.model,
        reuse: false,
        reading: Default::default(),
    };
    let saved = calibration::run(&engine, &settings, &progress)
        .map_err(|cause| anyhow::anyhow!("calibration failed: {cause}"))?;
    println!("model {served} ({})", config.model.display());
    for line in calibration::report_lines(&saved) {
        println!("{line}");
    }
    println!(
        "answers get: policy {}, params {:?}, T = {:.3}, source {} ({})",
        saved.policy, saved.params, saved.temperature, saved.source, saved.reason
    );
    println!("saved under {}", settings.dir.display());
    Ok(())
}

/// `auto`, `quantized`, `f32`, `amx`, `f16` or `bf16`; `auto` is AMX bf16 on a CPU with AMX
/// (~2-3x f32's prefill on a 2-core Xeon, see `decide_models::WeightFormat::AmxBf16`), f32 on other CPUs
/// (measured ~5x faster prefill than the quantized kernels on a 2-core x86 machine) and bf16
/// on CUDA (1.7x faster than the quantized kernels on an H200).
pub fn parse_weights(name: &str, device: &Device) -> anyhow::Result<WeightFormat> {
    Ok(match name {
        // Chosen by measurement (h200-q15-run2/forward.jsonl, in git history before c4f6a3a): on CPU candle
        // has no SIMD kernels for several quantized formats (f32 reads ~5x faster); on an
        // H200, bf16 weights read q15 1.7x faster than the quantized kernels. AMX: issue #56.
        "auto" if device.is_cpu() && decide_models::amx::available() => WeightFormat::AmxBf16,
        "auto" if device.is_cpu() => WeightFormat::F32,
        "auto" => WeightFormat::BF16,
        "quantized" => WeightFormat::Quantized,
        "f32" => WeightFormat::F32,
        "amx" if !device.is_cpu() => anyhow::bail!("--weights amx is for the CPU device"),
        "amx" if !decide_models::amx::available() => anyhow::bail!(
            "--weights amx: this CPU has no AMX bf16 (or the kernel did not grant the tile state); use f32"
        ),
        "amx" => WeightFormat::AmxBf16,
        "f16" => WeightFormat::F16,
        "bf16" => WeightFormat::BF16,
        other => anyhow::bail!("unknown weight format `{other}` (setting --weights): use auto, quantized, f32, amx, f16 or bf16"),
    })
}

/// `auto` or `candle` (see [`Kernels`]).
pub fn parse_kernels(name: &str) -> anyhow::Result<Kernels> {
    match name {
        "auto" => Ok(Kernels::Auto),
        "candle" => Ok(Kernels::Candle),
        other => anyhow::bail!("unknown kernels `{other}` (setting --kernels): use auto or candle"),
    }
}

/// `tuned` or `cublas` (see [`Matmuls`]).
pub fn parse_matmuls(name: &str) -> anyhow::Result<Matmuls> {
    match name {
        "tuned" => Ok(Matmuls::Tuned),
        "cublas" => Ok(Matmuls::Cublas),
        other => {
            anyhow::bail!("unknown matmuls `{other}` (setting --matmuls): use tuned or cublas")
        }
    }
}

/// `cpu`, `cuda` or `cuda:N`.
pub fn parse_device(name: &str) -> anyhow::Result<Device> {
    match name {
        "cpu" => Ok(Device::Cpu),
        "cuda" => Device::new_cuda(0)
            .context("opening CUDA device 0 (needs a build with --features cuda)"),
        other => match other
            .strip_prefix("cuda:")
            .and_then(|n| n.parse::<usize>().ok())
        {
            Some(ordinal) => Device::new_cuda(ordinal).with_context(|| {
                format!("opening CUDA device {ordinal} (needs a build with --features cuda)")
            }),
            None => anyhow::bail!(
                "unknown device `{other}` (setting --device): use cpu, cuda or cuda:N"
            ),
        },
    }
}
