//! The one `Config` of the server: every flag has an environment-variable twin (`DECIDE_*`), and
//! the whole struct is printed at startup so an operator sees what the server actually runs with.

use std::net::IpAddr;
use std::path::PathBuf;

use clap::{Args, Subcommand};

/// `decide plugin check FILE.wasm`.
#[derive(Debug, Clone, Args)]
pub struct PluginCheckArgs {
    /// The component (`.wasm`, built for wasm32-wasip2).
    pub file: PathBuf,

    /// The name it would be uploaded under (default: the file name without `.wasm`); a
    /// built-in of that name must be replaced by a plugin of the same kind.
    #[arg(long, env = "DECIDE_PLUGIN_NAME")]
    pub name: Option<String>,

    /// The size cap to check against, in bytes (an upload's is the tenant's max_plugin_bytes).
    #[arg(long, env = "DECIDE_TENANT_MAX_PLUGIN_BYTES", default_value_t = 16 << 20)]
    pub max_bytes: u64,

    /// Deadline of one plugin call during the self-test, in milliseconds.
    #[arg(long, env = "DECIDE_PLUGIN_TIMEOUT_MS", default_value_t = 1000)]
    pub plugin_timeout_ms: u64,

    /// Memory cap of one plugin instance during the self-test, in MiB.
    #[arg(long, env = "DECIDE_PLUGIN_MEMORY_MIB", default_value_t = 64)]
    pub plugin_memory_mib: u64,
}

/// `decide tenants ...`: the data directory plus one operation.
#[derive(Debug, Clone, Args)]
pub struct TenantsArgs {
    /// The server's data directory (same default as `serve`).
    #[arg(long, env = "DECIDE_DATA_DIR", global = true)]
    pub data_dir: Option<PathBuf>,

    /// The shared store of several replicas (same as `serve`): `postgres://...`; none: the
    /// embedded store in `--data-dir`.
    #[arg(long, env = "DECIDE_STORE_URL", global = true, hide_env_values = true)]
    pub store: Option<String>,

    #[command(subcommand)]
    pub command: TenantsCommand,
}

// The operation's own arguments (names, ids, JSON) have no environment twins on purpose: they
// differ per invocation, and a stray DECIDE_* variable must not silently change a tenant.

/// One tenant operation; `--limits` and `--settings` take the admin API's JSON objects.
#[derive(Debug, Clone, Subcommand)]
pub enum TenantsCommand {
    /// Create a tenant.
    Create {
        #[arg(long)]
        name: String,
        /// e.g. '{"requests_per_minute": 600, "max_questions": 50}'
        #[arg(long)]
        limits: Option<String>,
        /// e.g. '{"weight": 2, "renderer": "direct-options"}'
        #[arg(long)]
        settings: Option<String>,
    },
    /// List every tenant.
    List,
    /// Show one tenant.
    Show { id: String },
    /// Change a tenant: given fields replace, `null` inside --limits/--settings clears one.
    Update {
        id: String,
        #[arg(long)]
        name: Option<String>,
        #[arg(long)]
        limits: Option<String>,
        #[arg(long)]
        settings: Option<String>,
    },
    /// Delete a tenant with its keys, plugins and calibration.
    Delete { id: String },
    /// A tenant's API keys.
    #[command(subcommand)]
    Keys(KeysCommand),
}

/// `decide tenants keys ...`.
#[derive(Debug, Clone, Subcommand)]
pub enum KeysCommand {
    /// Create a key for tenant ID; the key is printed once and only its hash is stored.
    Create { id: String },
    /// List tenant ID's keys (prefixes, never the keys).
    List { id: String },
    /// Revoke key KEY_ID of tenant ID.
    Revoke { id: String, key_id: String },
}

/// `decide mcp`: the server's settings plus the key the session's calls present.
#[derive(Debug, Clone, Args)]
pub struct McpArgs {
    /// The API key the session's tool calls are made with, as `Authorization: Bearer KEY` on
    /// the HTTP API: a tenant's key, the operator's `--api-key`, or none (the default tenant,
    /// when no tenants are configured).
    #[arg(long, env = "DECIDE_MCP_KEY", hide_env_values = true)]
    pub key: Option<String>,

    #[command(flatten)]
    pub config: Config,
}

/// `decide eval`: the server's settings plus the question file and what to measure.
#[derive(Debug, Clone, Args)]
pub struct EvalArgs {
    /// Labelled question file (JSONL, like calibration/default.jsonl).
    #[arg(long)]
    pub questions: PathBuf,

    /// Readouts to compare, comma-separated (auto, direct, wide-direct, two-stage).
    #[arg(long, default_value = "auto")]
    pub readouts: String,

    /// Also re-ask each question under K cyclic option orders (one batched read) and report
    /// the top-answer flip rate, accuracy per order and accuracy of the averaged
    /// distribution (the `permutation` readout). 0: skip.
    #[arg(long, default_value_t = 0)]
    pub permute: usize,

    /// Two-stage finalists.
    #[arg(long, default_value_t = crate::readout::two_stage::DEFAULT_SHORTLIST)]
    pub shortlist: usize,

    /// Read only N questions, evenly spaced through the file (0: all).
    #[arg(long, default_value_t = 0)]
    pub limit: usize,

    /// Write the figures as JSON here.
    #[arg(long)]
    pub report: Option<PathBuf>,

    /// Write every question's answer here as JSON lines (readout, id, expected and top
    /// option, probabilities, option mass; per-order tops with --permute), to compare runs
    /// question by question.
    #[arg(long)]
    pub answers: Option<PathBuf>,

    #[command(flatten)]
    pub config: Config,
}

/// `decide tune`: the server's settings plus the question files.
#[derive(Debug, Clone, Args)]
pub struct TuneArgs {
    /// Labelled questions to select on (JSONL, the calibration format); default: the
    /// built-in tuning set (calibration/tune.jsonl).
    #[arg(long)]
    pub questions: Option<PathBuf>,

    /// Labelled questions never used to select or fit (e.g. calibration/heldout.jsonl):
    /// every setup x policy is fitted on --questions and scored here.
    #[arg(long)]
    pub heldout: Option<PathBuf>,

    /// With --heldout: the label-order flip rate of each setup under K cyclic option orders
    /// (K reads per question). 0: skip.
    #[arg(long, default_value_t = 0)]
    pub permute: usize,

    /// Write the figures as JSON here (and the held-out table as markdown next to it).
    #[arg(long)]
    pub report: Option<PathBuf>,

    #[command(flatten)]
    pub config: Config,
}

/// `decide calibrate`: the server's settings plus the question file.
#[derive(Debug, Clone, Args)]
pub struct CalibrateArgs {
    /// Labelled question file (JSONL, see calibration/default.jsonl); default: the built-in set.
    #[arg(long)]
    pub questions: Option<PathBuf>,

    #[command(flatten)]
    pub config: Config,
}

/// Server configuration. Limits are enforced before any model work; each error message names
/// the flag that changes the limit.
#[derive(Debug, Clone, Args)]
pub struct Config {
    /// Model to serve: a GGUF file (see scripts/fetch-model.sh) or a Hugging Face model
    /// directory (config.json, safetensors, tokenizer.json).
    #[arg(long, env = "DECIDE_MODEL")]
    pub model: PathBuf,

    /// Name reported as `model` in responses; defaults to the GGUF's `general.name`.
    #[arg(long, env = "DECIDE_SERVED_MODEL_NAME")]
    pub served_model_name: Option<String>,

    /// Compute device: `cpu` or `cuda` (`cuda:N` for GPU N; needs a build with `--features cuda`).
    #[arg(long, env = "DECIDE_DEVICE", default_value = "cpu")]
    pub device: String,

    /// How weight matrices are held: `auto` (on CPU `amx` where the CPU has AMX bf16, else f32,
    /// where dense matmuls prefill ~5x faster than candle's quantized kernels; bf16 on CUDA,
    /// which reads 1.7x faster than the quantized kernels), `quantized` (as stored in the GGUF,
    /// least memory), `f32`, `f16` or `bf16` (dequantized once at load), or `amx` (CPU only:
    /// bf16 in AMX tiles, f32 accumulation and output head; reads differ from f32 by bf16
    /// rounding).
    #[arg(long, env = "DECIDE_WEIGHTS", default_value = "auto")]
    pub weights: String,

    /// What runs the decoder layers: `auto` (decide's fused CUDA kernels on a CUDA device with
    /// bf16 weights, candle's ops otherwise) or `candle` (candle's ops everywhere, the slower
    /// reference the fused kernels are measured against).
    #[arg(long, env = "DECIDE_KERNELS", default_value = "auto")]
    pub kernels: String,

    /// How decide's CUDA kernels run a layer's four projections: `cublas` (cuBLAS's default
    /// algorithm for each shape) or `tuned` (per projection and row count, the fastest of that
    /// and cuBLASLt's candidates, timed on the GPU at load). On an H200 with q15 `tuned` took
    /// ~4 s more to start and changed no server figure beyond the run-to-run noise (throughput
    /// at 8-1,024 clients, the 28k read; bench/reports/h200-side-by-side-8/), so it is off by
    /// default; it is there for GPUs and models where cuBLAS's defaults fit worse. Ignored
    /// elsewhere.
    #[arg(long, env = "DECIDE_MATMULS", default_value = "cublas")]
    pub matmuls: String,

    /// Address to listen on.
    #[arg(long, env = "DECIDE_HOST", default_value = "127.0.0.1")]
    pub host: IpAddr,

    /// Port to listen on (0 picks a free port; the chosen one is logged).
    #[arg(long, env = "DECIDE_PORT", default_value_t = 8000)]
    pub port: u16,

    /// Require `Authorization: Bearer <key>` on decision requests (none: no authentication).
    #[arg(long, env = "DECIDE_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,

    /// Where tenants, key hashes, tenants' plugins and calibrations are kept (SQLite and
    /// blob files); default: $XDG_DATA_HOME/decide (~/.local/share/decide).
    #[arg(long, env = "DECIDE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,

    /// A store shared by several replicas instead of the embedded one in `--data-dir`:
    /// `postgres://user:password@host:port/database`. Every replica on it sees each change
    /// (tenants, keys, plugin uploads) within a second, through Postgres LISTEN/NOTIFY.
    #[arg(long, env = "DECIDE_STORE_URL", hide_env_values = true)]
    pub store: Option<String>,

    /// Enables the admin API (`/admin/v1/...`: tenants, keys, limits, usage) for requests
    /// with `Authorization: Bearer <admin key>` (none: the admin API answers 403).
    #[arg(long, env = "DECIDE_ADMIN_KEY", hide_env_values = true)]
    pub admin_key: Option<String>,

    /// Serve requests without a key on a server whose tenants were all deleted. A server
    /// that ever had tenants otherwise refuses such requests (401) unless `--api-key` is
    /// set, since deleting the last tenant would leave it open to anyone.
    #[arg(long, env = "DECIDE_ALLOW_ANONYMOUS")]
    pub allow_anonymous: bool,

    /// Key that `/metrics` requires (`Authorization: Bearer <key>`); the admin key is
    /// accepted too. With neither set `/metrics` is open, as it is for a server on loopback.
    #[arg(long, env = "DECIDE_METRICS_KEY", hide_env_values = true)]
    pub metrics_key: Option<String>,

    /// Seconds a client has to send a request's headers, after which the connection is
    /// closed (so slow-header connections cannot hold the server's sockets).
    #[arg(long, env = "DECIDE_HEADER_READ_TIMEOUT_S", default_value_t = 30.0, value_parser = positive_seconds)]
    pub header_read_timeout_s: f64,

    /// Server-wide default of a tenant's decision requests per minute (0: no limit). The
    /// `--tenant-*` defaults apply to every tenant without its own value, and to the default
    /// tenant (no tenants configured, or the operator's `--api-key`) too.
    #[arg(long, env = "DECIDE_TENANT_REQUESTS_PER_MINUTE", default_value_t = 0)]
    pub tenant_requests_per_minute: u64,

    /// Server-wide default of a tenant's questions (decisions) per minute (0: no limit).
    #[arg(long, env = "DECIDE_TENANT_DECISIONS_PER_MINUTE", default_value_t = 0)]
    pub tenant_decisions_per_minute: u64,

    /// Server-wide default of a tenant's prompt tokens per minute (0: no limit).
    #[arg(
        long,
        env = "DECIDE_TENANT_INPUT_TOKENS_PER_MINUTE",
        default_value_t = 0
    )]
    pub tenant_input_tokens_per_minute: u64,

    /// Server-wide default of a tenant's decision requests answered at once (0: no limit).
    #[arg(long, env = "DECIDE_TENANT_CONCURRENT_REQUESTS", default_value_t = 0)]
    pub tenant_concurrent_requests: u64,

    /// Server-wide default of a tenant's requests waiting for a concurrent slot; beyond it
    /// they get 429.
    #[arg(long, env = "DECIDE_TENANT_QUEUED_REQUESTS", default_value_t = 64)]
    pub tenant_queued_requests: u64,

    /// Server-wide default of how many plugins of its own a tenant may upload.
    #[arg(long, env = "DECIDE_TENANT_MAX_PLUGINS", default_value_t = 32)]
    pub tenant_max_plugins: usize,

    /// Server-wide default of the largest plugin component a tenant may upload, in bytes.
    #[arg(long, env = "DECIDE_TENANT_MAX_PLUGIN_BYTES", default_value_t = 16 << 20)]
    pub tenant_max_plugin_bytes: u64,

    /// Server-wide default of how many versions of one plugin a tenant keeps (its history,
    /// for rollback); an upload beyond it is refused until the tenant drops the history
    /// (`DELETE /v1/plugins/NAME?purge=true`).
    #[arg(long, env = "DECIDE_TENANT_MAX_PLUGIN_VERSIONS", default_value_t = 10)]
    pub tenant_max_plugin_versions: usize,

    /// Server-wide default of the bytes of plugin components a tenant keeps stored, all its
    /// plugins' versions together (a component kept by several versions counts once).
    #[arg(long, env = "DECIDE_TENANT_MAX_STORED_BYTES", default_value_t = 256 << 20)]
    pub tenant_max_stored_bytes: u64,

    /// Server-wide default of the labelled questions in one tenant calibration upload
    /// (`PUT /v1/calibration`); each is read on the model worker.
    #[arg(
        long,
        env = "DECIDE_TENANT_MAX_CALIBRATION_QUESTIONS",
        default_value_t = 1000
    )]
    pub tenant_max_calibration_questions: usize,

    /// Fair share on the model worker: the prompt tokens one tenant (of weight 1) gets per
    /// round while other tenants have requests waiting.
    #[arg(long, env = "DECIDE_FAIR_SHARE_TOKENS", default_value_t = 2048)]
    pub fair_share_tokens: usize,

    /// Fair share on the model worker: most rows of one forward pass (and prefill chunk)
    /// while several tenants are active, so a tenant with one request at a time waits for at
    /// most one such pass. Small passes cost the busy tenant throughput. 0 (auto): 64 on CPU,
    /// where a pass costs about its rows; 512 with decide's CUDA kernels, where a pass costs
    /// about the same up to a few hundred rows (chosen on an H200 with q15:
    /// bench/reports/h200-q15-tenancy/). With one tenant active passes are as large as
    /// `--max-batch-tokens` allows.
    #[arg(long, env = "DECIDE_FAIR_SHARE_PASS_TOKENS", default_value_t = 0)]
    pub fair_share_pass_tokens: usize,

    /// Directory of extra plugins (`NAME.wasm`); they add to or replace the built-ins, and are
    /// reloaded when their files change.
    #[arg(long, env = "DECIDE_PLUGINS")]
    pub plugins: Option<PathBuf>,

    /// How often the plugins directory is checked for changes, in milliseconds.
    #[arg(long, env = "DECIDE_PLUGIN_POLL_MS", default_value_t = 500)]
    pub plugin_poll_ms: u64,

    /// Wall-clock deadline of one plugin call, in milliseconds.
    #[arg(long, env = "DECIDE_PLUGIN_TIMEOUT_MS", default_value_t = 1000)]
    pub plugin_timeout_ms: u64,

    /// Memory cap of one plugin instance, in MiB.
    #[arg(long, env = "DECIDE_PLUGIN_MEMORY_MIB", default_value_t = 64)]
    pub plugin_memory_mib: u64,

    /// Where precompiled plugin artifacts are cached (default: $XDG_CACHE_HOME/decide/wasm).
    #[arg(long, env = "DECIDE_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,

    /// Renderer plugin that turns a compiled question into chat messages, pinned: startup
    /// tuning is then not run and questions read with letters and `auto`. Default: what
    /// tuning chose (see --tune-questions), else `direct-options`.
    #[arg(long, env = "DECIDE_RENDERER")]
    pub renderer: Option<String>,

    /// Labelled questions that startup tuning measures every renderer x label scheme x
    /// readout on (JSONL, the calibration format); default: the built-in tuning set
    /// (calibration/tune.jsonl); `none` skips tuning (direct-options, letters, auto).
    /// The result is saved in --calibration-dir and reused while the model, the candidates
    /// and the question file are unchanged.
    #[arg(long, env = "DECIDE_TUNE_QUESTIONS")]
    pub tune_questions: Option<String>,

    /// Renderer plugins startup tuning compares (comma-separated); default: every renderer
    /// loaded (built-ins and the plugins directory).
    #[arg(long, env = "DECIDE_TUNE_RENDERERS", value_delimiter = ',')]
    pub tune_renderers: Vec<String>,

    /// Most seconds startup tuning, and then startup calibration, may each spend reading when
    /// no saved result matches (0: no bound). Both run in the background after the server
    /// answers (with the default setup until they finish); past the budget the question set is
    /// subsampled, whole inputs spread evenly, to what a probe of its first inputs says fits,
    /// and a budget that fits too few questions to compare skips the run with a message that
    /// says how long the whole set would take.
    #[arg(long, env = "DECIDE_TUNE_BUDGET_S", default_value_t = 600.0)]
    pub tune_budget_s: f64,

    /// Latency-aware setup: after startup the server times one question over a new input
    /// read once and permuted on this device, and serves the most accurate tuned candidate
    /// (clear of the default) whose question takes at most this many milliseconds; when none
    /// does, the most accurate one that reads a question once. `/health` shows the choice
    /// (`setup.serving`). 0 serves what tuning chose on accuracy alone.
    #[arg(long, env = "DECIDE_LATENCY_TARGET_MS", default_value_t = 1000.0)]
    pub latency_target_ms: f64,

    /// Answers whose true next-token mass on the option labels is below this become
    /// refusals (`low_option_mass`) naming the mass: the model wanted to say something else.
    /// 0 turns abstention off. A tenant setting and `extra.min_option_mass` override it.
    #[arg(long, env = "DECIDE_MIN_OPTION_MASS", default_value_t = 0.0, value_parser = parse_mass)]
    pub min_option_mass: f64,

    /// Calibration policy plugin that maps option scores to probabilities and fits its parameters
    /// at startup (built-ins: `temperature`, `bias-temperature`, `contextual`); `auto`: every
    /// loaded policy is measured and the kept one of lowest held-out log loss is served
    /// (none kept: `temperature` at T = 1).
    #[arg(long, env = "DECIDE_CALIBRATION", default_value = "auto")]
    pub calibration: String,

    /// Temperature applied when a request sets none (operator override; startup calibration
    /// is then not run).
    #[arg(long, env = "DECIDE_TEMPERATURE")]
    pub temperature: Option<f64>,

    /// Labelled questions for startup calibration (JSONL); default: the built-in set
    /// (calibration/default.jsonl); `none` skips calibration (T = 1.0, source `default`).
    #[arg(long, env = "DECIDE_CALIBRATION_QUESTIONS")]
    pub calibration_questions: Option<String>,

    /// Where calibration results are saved and reused (default: $XDG_CACHE_HOME/decide/calibration).
    #[arg(long, env = "DECIDE_CALIBRATION_DIR")]
    pub calibration_dir: Option<PathBuf>,

    /// Most questions in one request.
    #[arg(long, env = "DECIDE_MAX_QUESTIONS", default_value_t = 400)]
    pub max_questions: usize,

    /// Most options in one question (choices, levels, criteria).
    #[arg(long, env = "DECIDE_MAX_OPTIONS", default_value_t = 255)]
    pub max_options: usize,

    /// Most bytes of input text (the state as rendered) in one request.
    #[arg(long, env = "DECIDE_MAX_INPUT_BYTES", default_value_t = 256 * 1024)]
    pub max_input_bytes: usize,

    /// JSON-Schema classification and field-schema decisions: most fields the model decides
    /// in one request.
    #[arg(long, env = "DECIDE_SCHEMA_MAX_FIELDS", default_value_t = 64)]
    pub schema_max_fields: usize,

    /// JSON-Schema classification: most nested objects and tuples in a schema.
    #[arg(long, env = "DECIDE_SCHEMA_MAX_DEPTH", default_value_t = 8)]
    pub schema_max_depth: usize,

    /// JSON-Schema classification: most bytes of a schema (as compact JSON).
    #[arg(long, env = "DECIDE_SCHEMA_MAX_BYTES", default_value_t = 64 * 1024)]
    pub schema_max_bytes: usize,

    /// JSON-Schema classification and field-schema decisions: most characters of the input
    /// (`state`, `context`).
    #[arg(long, env = "DECIDE_SCHEMA_MAX_INPUT_CHARS", default_value_t = 100_000)]
    pub schema_max_input_chars: usize,

    /// On SIGTERM or Ctrl-C: how long the requests in flight may take to finish, in seconds,
    /// while no new connections are accepted and `/health` answers 503 `draining`. Drained in
    /// time the process exits 0; past it the rest are abandoned and it exits 1.
    #[arg(long, env = "DECIDE_DRAIN_TIMEOUT_S", default_value_t = 30.0)]
    pub drain_timeout_s: f64,

    /// Most bytes in one HTTP request body (after decompression).
    #[arg(long, env = "DECIDE_MAX_BODY_BYTES", default_value_t = 4 * 1024 * 1024)]
    pub max_body_bytes: usize,

    /// Most items in one batch request (`/v1/systemone/batch`).
    #[arg(long, env = "DECIDE_BATCH_MAX_ITEMS", default_value_t = 256)]
    pub batch_max_items: usize,

    /// Most bytes of state (as rendered) over all items of one batch request; each item is
    /// also held to --max-input-bytes, and the body to --max-body-bytes.
    #[arg(long, env = "DECIDE_BATCH_MAX_INPUT_BYTES", default_value_t = 8 * 1024 * 1024)]
    pub batch_max_input_bytes: usize,

    /// Most prompt tokens of one question (0: the model's context length).
    #[arg(long, env = "DECIDE_MAX_PROMPT_TOKENS", default_value_t = 0)]
    pub max_prompt_tokens: usize,

    /// Memory budget of the cross-request prefix cache (the KV of every full 16-token block of
    /// a tenant's prompts, each block once, least recently used evicted first), in MiB; 0
    /// turns it off.
    #[arg(long, env = "DECIDE_PREFIX_CACHE_MIB", default_value_t = 2048)]
    pub prefix_cache_mib: usize,

    /// Memory budget of the token cache (token ids of long input texts, per tenant, least
    /// recently used evicted first), in MiB; 0 turns it off. A repeated 100 KB input is then
    /// tokenized once instead of on every request and question (~30-40 ms each).
    #[arg(long, env = "DECIDE_TOKEN_CACHE_MIB", default_value_t = 256)]
    pub token_cache_mib: usize,

    /// How long the model worker waits for more requests to join a batch after the first,
    /// in microseconds. 0: requests that arrive while a batch runs join the next one.
    #[arg(long, env = "DECIDE_BATCH_WAIT_US", default_value_t = 0)]
    pub batch_wait_us: u64,

    /// After a batch read for one tenant is answered, how long at most (microseconds) the
    /// model worker waits for its clients' next requests, so that clients sending one request
    /// after another join one batch instead of alternating in two. The window of a batch is
    /// half its read time, at most this; the worker waits only while each of the last 4
    /// batches' clients were all back within theirs (so an open-loop stream or slow clients
    /// are not waited for), and the wait ends once they are all back or a batch is full.
    /// 0: no wait. On an H200 with q15 it raised closed-loop throughput by 31% at 8 clients
    /// and 11% at 64 (one batch of 64 per round instead of two of 32), and cut p99 at 64
    /// clients from 19.5 to 17.6 ms; a cap of 2000 merged 8 clients but not 64
    /// (bench/reports/h200-side-by-side-7/).
    #[arg(long, env = "DECIDE_BATCH_REJOIN_US", default_value_t = 8000)]
    pub batch_rejoin_us: u64,

    /// Nice value of the threads that prepare and answer requests (rendering, plugins,
    /// tokenizing, calibration), above the model worker's 0 (`crate::priority`): a batch's
    /// answer wakes all of its requests at once, and the worker must not wait behind them
    /// for a core while the GPU waits for its next pass. 0: the same priority as the worker.
    /// On an H200 (16 cores) its effect on throughput was within the run-to-run noise at 8,
    /// 64 and 256 clients (bench/reports/h200-side-by-side-7/).
    #[arg(long, env = "DECIDE_REQUEST_THREAD_NICE", default_value_t = 5, value_parser = clap::value_parser!(i32).range(0..=19))]
    pub request_thread_nice: i32,

    /// A CPU core for the model worker alone (`crate::cores`): `off` (the default) reserves
    /// none; `auto` reserves the last core the process may use when the model runs on a GPU
    /// and at least 4 cores are allowed; a number reserves that core (on any device). No
    /// other thread of the server runs there, so request work cannot keep the worker, and
    /// with it the GPU, waiting for a core. On an H200 host (16 cores, decide using ~4 at
    /// saturation) it gained nothing measurable (bench/reports/h200-side-by-side-9/cores/):
    /// it is for hosts whose request threads (plugins, many tenants) keep every core busy.
    #[arg(long, env = "DECIDE_WORKER_CORE", default_value = "off")]
    pub worker_core: crate::cores::WorkerCore,

    /// Stop adding requests to a batch once their prompt tokens (cached ones included) reach
    /// this. 0 (auto): 8192 on CPU; 16384 with decide's CUDA kernels, where a larger batch is
    /// read in one larger pass at a higher rate (chosen on an H200 with q15:
    /// bench/reports/h200-side-by-side-9/).
    #[arg(long, env = "DECIDE_MAX_BATCH_TOKENS", default_value_t = 0)]
    pub max_batch_tokens: usize,

    /// Most rows (uncached prompt tokens) of one forward pass; a batch with more is read in
    /// several. 0 (auto): 512 on CPU (a pass is what a deadline cannot stop), 8192 with
    /// decide's CUDA kernels.
    #[arg(long, env = "DECIDE_MAX_PASS_TOKENS", default_value_t = 0)]
    pub max_pass_tokens: usize,

    /// Deadline of a decision request, in milliseconds from when its body was read until its
    /// answer (waiting for a tenant's concurrent slot and for the model worker included); past
    /// it the request gets 504 and its queued model work is dropped. A request's own
    /// `timeout_ms` (`extra.timeout_ms` on `/v1/decisions`) may shorten it, not lengthen it.
    /// 0: no deadline.
    #[arg(long, env = "DECIDE_REQUEST_TIMEOUT_MS", default_value_t = 60_000)]
    pub request_timeout_ms: u64,

    /// Most read jobs waiting for or being read by the model worker (one per request and
    /// read round; one per item of a batch); a request beyond it gets 503 with Retry-After at
    /// once, before its work is queued. 0: no bound.
    #[arg(long, env = "DECIDE_MAX_QUEUED_REQUESTS", default_value_t = 1024)]
    pub max_queued_requests: usize,

    /// Most tokens those jobs hold for the model (a request's shared input counted once,
    /// plus each question's own tokens); beyond it 503 as above. A job alone in the queue is
    /// taken whatever its size. 0: no bound.
    #[arg(long, env = "DECIDE_MAX_QUEUED_TOKENS", default_value_t = 1_000_000)]
    pub max_queued_tokens: usize,

    /// Test hook, never for production: `panic-every:N` or `error-every:N` makes every Nth
    /// batch of the model worker fail (its pass panics, or returns a compute error), counting
    /// every batch since start. Tests use it to show that only that batch's requests fail.
    #[arg(long, env = "DECIDE_INJECT_FAULT", hide = true, value_parser = crate::scheduler::Fault::parse)]
    pub inject_fault: Option<crate::scheduler::Fault>,

    /// Least next-token probability mass on the option labels that the startup self-check
    /// (an easy built-in question) must measure; below it the empty reasoning blocks the
    /// tokenizer knows are tried, and if none reaches it decision requests get 503.
    #[arg(long, env = "DECIDE_SELF_CHECK_MIN_MASS", default_value_t = crate::selfcheck::DEFAULT_MIN_MASS, value_parser = unit_interval)]
    pub self_check_min_mass: f64,

    /// Export traces over OTLP (HTTP/protobuf) to this collector, e.g.
    /// `http://127.0.0.1:4318` (`/v1/traces` is appended unless the URL already has a path):
    /// one span per request with child spans for compile, render and tokenize, queue wait, the
    /// model pass and answer. Off when unset: nothing is exported and spans cost nothing.
    #[arg(long, env = "DECIDE_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,

    /// Seconds between two progress lines of long work (model load, self-check, tuning,
    /// calibration, a tenant's calibration); `/health` shows the same progress at any time.
    #[arg(long, env = "DECIDE_PROGRESS_EVERY_S", default_value_t = crate::progress::DEFAULT_EVERY_S, value_parser = positive_seconds)]
    pub progress_every_s: f64,

    /// Delay readiness by this many milliseconds after loading (tests use it to observe the
    /// 503-before-ready path deterministically).
    #[arg(long, env = "DECIDE_READY_DELAY_MS", default_value_t = 0, hide = true)]
    pub ready_delay_ms: u64,
}

impl Config {
    /// The server-wide defaults of the per-tenant limits (`--tenant-*`).
    pub fn tenant_defaults(&self) -> crate::tenancy::limits::Defaults {
        crate::tenancy::limits::Defaults {
            requests_per_minute: self.tenant_requests_per_minute,
            decisions_per_minute: self.tenant_decisions_per_minute,
            input_tokens_per_minute: self.tenant_input_tokens_per_minute,
            concurrent_requests: self.tenant_concurrent_requests,
            queued_requests: self.tenant_queued_requests,
        }
    }

    /// The cache directory for precompiled plugins, resolved against the environment.
    pub fn resolved_cache_dir(&self) -> PathBuf {
        self.cache_dir
            .clone()
            .unwrap_or_else(crate::plugins::default_cache_dir)
    }

    /// The data directory (see [`resolve_data_dir`]).
    pub fn resolved_data_dir(&self) -> PathBuf {
        resolve_data_dir(self.data_dir.as_deref())
    }

    /// The calibration directory: the flag, else `calibration/` next to the default plugin cache.
    pub fn resolved_calibration_dir(&self) -> PathBuf {
        self.calibration_dir.clone().unwrap_or_else(|| {
            let wasm = crate::plugins::default_cache_dir();
            wasm.parent()
                .map(|decide| decide.join("calibration"))
                .unwrap_or_else(|| wasm.join("calibration"))
        })
    }
}

/// The data directory: `flag` (`--data-dir`), else `$XDG_DATA_HOME/decide`, else
/// `~/.local/share/decide`, else `./decide-data`. Shared by `serve` and `decide tenants`, so
/// the CLI finds the server's store with the same flags and environment.
pub fn resolve_data_dir(flag: Option<&std::path::Path>) -> PathBuf {
    if let Some(dir) = flag {
        return dir.to_path_buf();
    }
    if let Some(xdg) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(xdg).join("decide");
    }
    if let Some(home) = std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(home).join(".local/share/decide");
    }
    PathBuf::from("decide-data")
}

/// A number in [0, 1].
fn unit_interval(text: &str) -> Result<f64, String> {
    let value: f64 = text
        .parse()
        .map_err(|_| format!("`{text}` is not a number"))?;
    if (0.0..=1.0).contains(&value) {
        Ok(value)
    } else {
        Err(format!("{value} is outside [0, 1]"))
    }
}

/// A probability mass in [0, 1] (`--min-option-mass`).
fn parse_mass(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(mass) if (0.0..=1.0).contains(&mass) => Ok(mass),
        _ => Err(format!("`{text}` is not a probability mass from 0 to 1")),
    }
}

/// Seconds, at least 0.05 (`--progress-every-s`).
fn positive_seconds(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(seconds) if seconds.is_finite() && seconds >= 0.05 => Ok(seconds),
        _ => Err(format!(
            "`{text}` is not a number of seconds of at least 0.05"
        )),
    }
}
