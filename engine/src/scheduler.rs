//! The model worker: one thread runs every forward pass, and the questions of requests that
//! arrive together share those passes.
//!
//! A request hands its rendered prompts over as one job and blocks until they are read.
//! The worker takes every job waiting when it becomes free (and, with `--batch-wait-us`, those
//! arriving shortly after the first; with `--batch-rejoin-us`, after a batch read alone for
//! one tenant, its clients' next requests for a short window, [`rejoin`], so that
//! closed-loop clients make one batch per round instead of alternating cohorts), then for
//! the whole batch:
//!
//! 1. per job, finds the longest cached prefix of its prompts in the [`PrefixCache`] (per
//!    tenant), prefills what the job's prompts share beyond it once, and stores the result
//!    at a block boundary for later requests; a short one-question prompt instead stores
//!    the beginning it shares with its tenant's previous one ([`crate::recent_starts`]);
//! 2. reads every prompt's remaining tokens in packed passes of at most
//!    [`MAX_PASS_TOKENS`] rows (`--max-pass-tokens`), segments of different jobs side by side, each attending only
//!    to its own prefix and itself (`Model::read_packed`).
//!
//! So with many clients the model runs few large passes instead of many small ones, and a
//! prompt that starts like an earlier one skips the tokens it shares with it.
//!
//! Jobs carry a [`Flow`] (a tenant): which waiting jobs a batch takes is decided by [`fair`]
//! (in arrival order while one flow is active; otherwise sparse flows first, then deficit
//! round robin between backlogged flows, one flow per batch). While several flows are
//! active, passes and prefills hold at most `--fair-share-pass-tokens` rows, and between two
//! passes of a batch the worker reads the jobs of sparse flows that arrived meanwhile: a
//! client with one request at a time waits for one small pass, not for another tenant's
//! whole batch. On CPU every
//! read is bit-for-bit the read of its prompt alone, whatever it was batched with and
//! whether its prefix came from the cache (the models crate's split-invariant numerics).

//!
//! What a busy or failing worker must not do to the server (issue #16):
//!
//! - **Cancelled jobs are not read.** A job carries its request's [`Cancel`] token (set when
//!   the client goes away or the request's deadline passes); the worker drops cancelled jobs
//!   from its queue whenever it looks at it (before every batch and between every two passes)
//!   and stops a cancelled job of the batch in flight before its next pass or prefill chunk.
//! - **The queue is bounded** in jobs and tokens ([`QueueLimits`], `--max-queued-requests`,
//!   `--max-queued-tokens`): a request reserves its place ([`Scheduler::reserve`]) before its
//!   job is built into the queue, and is refused at once when it does not fit, so an overload
//!   sheds requests instead of growing memory and latency without bound.
//! - **A failed pass fails only its batch.** A pass that returns an error fails the prompts
//!   it held; one that panics fails its batch ([`std::panic::catch_unwind`]); and should the
//!   worker loop itself panic, it restarts with an empty queue (the jobs it held fail). The
//!   server keeps serving. `--inject-fault` ([`Fault`]) makes passes fail on purpose, so
//!   tests can show it.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use decide_models::{
    chunk_lengths, last_chunk_start, prefill_aligned, KvCache, Model, ModelError, Readout, Segment,
    PREFILL_ALIGN, PREFILL_SCORE_BUDGET,
};

use crate::cancel::Cancel;
use crate::metrics::Metrics;
use crate::prefix_cache::{PrefixCache, BLOCK_TOKENS};

mod fair;
mod rejoin;
use fair::{FairQueue, Mode};
use rejoin::Rejoin;

/// Most rows (tokens) in one packed pass on candle's ops (the CPU). Bounds activations and
/// attention scores of a pass; more is read in several passes. A pass is what a request's
/// deadline cannot interrupt, so on the CPU it is as long as a prefill chunk
/// ([`PREFILL_CHECK_ROWS`]): with 2048, a field-schema request of 12 fields of 30 choices kept
/// SmolLM2 on 2 cores busy 4.5 s past its 504 and another request waited as long (the e2e
/// `stalls` test); the matmuls run at the same rate on 512 rows.
pub const MAX_PASS_TOKENS: usize = 512;

/// [`MAX_PASS_TOKENS`] for a model on decide's fused CUDA kernels, which materialise no
/// attention scores: every pass costs ~250 kernel launches whatever its size, and larger
/// passes run the matmuls at a higher rate. With `--max-batch-tokens` at 16384 a saturated
/// batch of short prompts (~7.3k uncached rows) is then one pass: on an H200 with q15, 4,599
/// decisions/s at 1,024 clients against 4,391 with 4096 and 8192-token batches
/// (bench/reports/h200-side-by-side-9/; the server's `FUSED_MAX_BATCH_TOKENS`).
pub const MAX_FUSED_PASS_TOKENS: usize = 8192;

/// A lone prompt is read in a pass of its own, which also yields its KV for the prefix
/// cache, only when at least this many of its tokens are not cached yet; shorter ones join
/// the packed passes with other requests (more throughput, nothing stored).
pub const STORE_MIN_TOKENS: usize = 512;

/// Most rows of one prefill call on candle's ops (CPU), below the model's own chunk (4,096
/// rows): a long prefill is where a cancelled request would otherwise keep the worker, and
/// on CPU a 4,096-row chunk of SmolLM2 takes 10-40 s. A call costs about its rows there, so
/// 512-row calls cost no throughput and let the worker drop a cancelled job (and serve
/// another tenant's short read) within a second or so. On decide's fused kernels, where
/// every call costs ~250 kernel launches, prefills keep the model's chunk.
pub const PREFILL_CHECK_ROWS: usize = 512;

/// What a read of a cancelled job ends with (nobody reads it: the pipeline answers with its
/// request's cancellation instead).
const CANCELLED: &str = "the request was cancelled (its client went away or its deadline passed)";

/// Whose work a job is, for fair share between tenants: jobs of one flow are served in
/// arrival order, flows get passes in proportion to their weight. Opaque to the scheduler
/// (the frontends derive it from the tenant).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Flow {
    /// Distinguishes flows; equal ids are one flow.
    pub id: u64,
    /// Share relative to other flows (at least 1).
    pub weight: u32,
}

impl Flow {
    /// The server's own background reads (startup tuning and calibration after the server
    /// answers): read only when no request's job waits, in small passes ([`fair`]).
    pub const BACKGROUND: Flow = Flow {
        id: u64::MAX,
        weight: 1,
    };
}

impl Default for Flow {
    fn default() -> Self {
        Flow { id: 0, weight: 1 }
    }
}

/// One prompt to read.
#[derive(Debug, Clone, Default)]
pub struct Prompt {
    pub tokens: Vec<u32>,
    pub label_ids: Vec<u32>,
}

/// One prompt's read and how many of its tokens came from a cache (the cross-request
/// prefix cache, or the request's shared prefix computed once for all its questions).
pub type PromptRead = Result<(Readout, usize), ModelError>;

/// What a job got back.
#[derive(Debug)]
pub struct JobResult {
    /// One per prompt, in order.
    pub reads: Vec<PromptRead>,
    /// Model calls this job took part in (a prefill counts once, however many chunks).
    pub forward_passes: usize,
    /// The job's request was cancelled before all its prompts were read; the reads not done
    /// are errors, and the request ends with its cancellation (its 504, or nothing when its
    /// client is gone).
    pub cancelled: bool,
}

impl JobResult {
    /// The result of a job dropped unread because its request was cancelled.
    fn cancelled(count: usize) -> JobResult {
        JobResult {
            reads: (0..count)
                .map(|_| Err(ModelError::Compute(CANCELLED.into())))
                .collect(),
            forward_passes: 0,
            cancelled: true,
        }
    }
}

/// How much may wait for the model worker (0: no bound). Counted from when a request reserves
/// its place until its job is answered or dropped: jobs waiting and jobs being read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueLimits {
    /// Jobs (one per request and read round; one per item of a batch).
    pub max_requests: usize,
    /// Tokens the model must read for them ([`work_tokens`]).
    pub max_tokens: usize,
}

/// What waits for the model worker now ([`QueueLimits`] counts the same).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueDepth {
    pub requests: usize,
    pub tokens: usize,
}

/// A reservation that did not fit the queue: what it holds, its bounds, and what was asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overloaded {
    pub depth: QueueDepth,
    pub limits: QueueLimits,
    /// Tokens of the job refused (0: the request was refused before its prompts were made).
    pub tokens: usize,
}

/// The queue's bound and its depth, behind a lock held only for a few additions: `/health`
/// reads it while the worker runs passes, and never waits for one.
struct Queue {
    limits: QueueLimits,
    depth: Mutex<QueueDepth>,
}

impl Queue {
    fn depth(&self) -> QueueDepth {
        *self.depth.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a request could not even get a place for an empty job: checked before a
    /// request's prompts are made, so an overloaded server refuses it before any work.
    fn is_full(&self) -> bool {
        let depth = self.depth();
        let over = |max: usize, at: usize| max > 0 && at >= max;
        over(self.limits.max_requests, depth.requests) || over(self.limits.max_tokens, depth.tokens)
    }

    /// A place for a job of `tokens` tokens. An empty queue takes any job (a request larger
    /// than the token bound on its own is not refused for ever); `bounded: false` (the
    /// server's own reads) always gets one.
    fn reserve(self: &Arc<Self>, tokens: usize, bounded: bool) -> Result<Ticket, Overloaded> {
        let mut depth = self.depth.lock().unwrap_or_else(|p| p.into_inner());
        let over = |max: usize, after: usize| max > 0 && after > max;
        let full = over(self.limits.max_requests, depth.requests + 1)
            || over(self.limits.max_tokens, depth.tokens.saturating_add(tokens));
        if bounded && depth.requests > 0 && full {
            return Err(Overloaded {
                depth: *depth,
                limits: self.limits,
                tokens,
            });
        }
        depth.requests += 1;
        depth.tokens = depth.tokens.saturating_add(tokens);
        Ok(Ticket {
            queue: self.clone(),
            tokens,
        })
    }
}

/// A job's place in the queue, given back when it is dropped: when the job was answered,
/// dropped as cancelled, or lost with a failed worker. Owned by the job, so no path can leak
/// a place.
pub struct Ticket {
    queue: Arc<Queue>,
    tokens: usize,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut depth = self.queue.depth.lock().unwrap_or_else(|p| p.into_inner());
        depth.requests = depth.requests.saturating_sub(1);
        depth.tokens = depth.tokens.saturating_sub(self.tokens);
    }
}

impl std::fmt::Debug for Ticket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ticket")
            .field("tokens", &self.tokens)
            .finish()
    }
}

/// Tokens the model worker must read for `prompts`: what they share once, and each one's own
/// rest. What a request costs the worker (its questions share their input's prefill), not the
/// prompts' total length, which counts a long input once per question.
pub fn work_tokens(prompts: &[Prompt]) -> usize {
    let shared = shared_prefix_len(prompts);
    shared
        + prompts
            .iter()
            .map(|p| p.tokens.len().saturating_sub(shared))
            .sum::<usize>()
}

/// What `--inject-fault` makes fail. A test hook, always compiled in and hidden from
/// `--help`: the only way to show end to end that a pass failing on the device (a CUDA error,
/// a panic in a kernel wrapper) fails its batch alone and the server keeps serving.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// The batch's pass panics (caught: the batch fails, the worker survives).
    Panic,
    /// The batch's pass returns a compute error.
    Error,
}

/// `--inject-fault KIND-every:N`: every `N`th batch the model worker reads (counting every
/// batch since it started, the startup self-check's too) fails as if its first pass had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    pub kind: FaultKind,
    /// At least 1.
    pub every: u64,
}

impl Fault {
    /// Parses `panic-every:N` or `error-every:N` (N >= 1).
    pub fn parse(text: &str) -> Result<Fault, String> {
        let usage =
            || format!("`{text}` is not a fault; use panic-every:N or error-every:N (N >= 1)");
        let (kind, every) = text.split_once(':').ok_or_else(usage)?;
        let kind = match kind {
            "panic-every" => FaultKind::Panic,
            "error-every" => FaultKind::Error,
            _ => return Err(usage()),
        };
        match every.parse::<u64>() {
            Ok(every) if every >= 1 => Ok(Fault { kind, every }),
            _ => Err(usage()),
        }
    }
}

/// The fault schedule: which batch fails. Kept across worker restarts.
struct Faults {
    fault: Option<Fault>,
    batches: AtomicU64,
}

impl Faults {
    /// Counts a batch; what should fail in it.
    fn next_batch(&self) -> Option<FaultKind> {
        let fault = self.fault?;
        let batch = self.batches.fetch_add(1, Ordering::Relaxed) + 1;
        batch.is_multiple_of(fault.every).then_some(fault.kind)
    }
}

/// How the worker batches and caches.
#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// KV bytes the prefix cache may hold (0: no cross-request cache).
    pub prefix_cache_bytes: usize,
    /// How long the worker waits for more jobs after the first of a batch. 0: it takes what
    /// is waiting and starts at once (jobs that arrive during a pass join the next one).
    pub batch_wait: Duration,
    /// After a batch is answered, how long at most the worker waits for its clients' next
    /// requests to join the next batch ([`rejoin`]; zero: it does not).
    pub batch_rejoin: Duration,
    /// Stop adding jobs to a batch once their prompt tokens reach this.
    pub max_batch_tokens: usize,
    /// Most rows of one packed pass (0: the model's default, [`MAX_PASS_TOKENS`] or
    /// [`MAX_FUSED_PASS_TOKENS`]).
    pub max_pass_tokens: usize,
    /// Fair share: a backlogged flow's prompt tokens per round (times its weight).
    pub fair_share_tokens: usize,
    /// Fair share: most rows of one pass (and of one prefill chunk) while several flows
    /// are active, which bounds how long a sparse flow's job waits for the pass in flight.
    pub fair_share_pass_tokens: usize,
    /// How much may wait for the worker (`--max-queued-requests`, `--max-queued-tokens`).
    pub queue: QueueLimits,
    /// `--inject-fault`: passes that fail on purpose (tests only; none in production).
    pub fault: Option<Fault>,
    /// The core the worker runs on, reserved for it by [`crate::cores::reserve`] (None: any).
    pub worker_core: Option<usize>,
}

struct Job {
    prompts: Vec<Prompt>,
    salt: u64,
    flow: Flow,
    /// The request's token: once set, the job's remaining prompts are not read.
    cancel: Cancel,
    /// Its place in the queue, given back when the job is dropped. Declared before `reply`
    /// so that it is dropped first: a requester that learns its job ended (a reply, or the
    /// reply channel closing) finds the place free again.
    ticket: Ticket,
    reply: Sender<JobResult>,
    /// Where the job sits in its request's trace.
    trace: JobTrace,
    /// When its request handed it over (the rejoin window learns its clients' turnaround).
    sent: Instant,
}

/// A job's place in its request's trace (spans are disabled, and free, without
/// `--otlp-endpoint`): the request's span, under which every batch that serves the job opens
/// a `model_pass` span, and the job's open `queue_wait` span, closed when the worker takes it.
struct JobTrace {
    request: tracing::Span,
    queue_wait: Option<tracing::Span>,
}

impl JobTrace {
    /// The trace of a job of `prompts` sent now from inside its request's span.
    fn sent(prompts: &[Prompt]) -> JobTrace {
        let request = tracing::Span::current();
        let queue_wait = tracing::debug_span!(
            target: "decide::scheduler",
            parent: &request,
            "queue_wait",
            decide.prompts = prompts.len() as i64,
            decide.tokens = work_tokens(prompts) as i64,
        );
        JobTrace {
            request,
            queue_wait: Some(queue_wait),
        }
    }
}

/// The worker takes `batch`: their queue waits end and each job's `model_pass` span opens
/// under its request's span, with the batch's size and tokens and the job's own.
fn model_pass_spans(batch: &mut [Job]) -> Vec<tracing::Span> {
    let batch_tokens: usize = batch.iter().map(Job::tokens).sum();
    let requests = batch.len();
    batch
        .iter_mut()
        .map(|job| {
            job.trace.queue_wait.take();
            tracing::debug_span!(
                target: "decide::scheduler",
                parent: &job.trace.request,
                "model_pass",
                decide.batch.requests = requests as i64,
                decide.batch.tokens = batch_tokens as i64,
                decide.prompts = job.prompts.len() as i64,
                decide.tokens = job.tokens() as i64,
                decide.cached_tokens = tracing::field::Empty,
                decide.forward_passes = tracing::field::Empty,
            )
        })
        .collect()
}

/// Records what each job's batch read did for it, and closes the spans.
fn close_model_pass_spans(spans: Vec<tracing::Span>, results: &[JobResult]) {
    for (span, result) in spans.into_iter().zip(results) {
        if span.is_disabled() {
            continue;
        }
        let cached: usize = result
            .reads
            .iter()
            .flatten()
            .map(|(_, cached)| cached)
            .sum();
        span.record("decide.cached_tokens", cached as i64);
        span.record("decide.forward_passes", result.forward_passes as i64);
    }
}

impl Job {
    fn tokens(&self) -> usize {
        self.prompts.iter().map(|p| p.tokens.len()).sum()
    }

    /// Gives the job's place back, then its result to the requester: a client whose answer
    /// came back can queue its next request at once.
    fn answer(self, result: JobResult) {
        let Job { ticket, reply, .. } = self;
        drop(ticket);
        // A requester that went away (client disconnected) no longer listens.
        let _ = reply.send(result);
    }
}

/// The handle requests use; the worker thread stops when it is dropped.
pub struct Scheduler {
    jobs: Sender<Job>,
    queue: Arc<Queue>,
}

impl Scheduler {
    /// Starts the worker thread for `model`.
    pub fn start(model: Arc<Model>, config: SchedulerConfig, metrics: Arc<Metrics>) -> Self {
        let (jobs, receiver) = mpsc::channel();
        let queue = Arc::new(Queue {
            limits: config.queue,
            depth: Mutex::new(QueueDepth::default()),
        });
        // Started from this thread, not the worker, so that it may run on any core but the
        // worker's (crate::cores).
        let (answers, answered) = mpsc::channel();
        std::thread::Builder::new()
            .name("decide-answers".into())
            .spawn(move || answer_batches(answered))
            .expect("spawning the answer thread");
        std::thread::Builder::new()
            .name("decide-model".into())
            .spawn(move || {
                if let Some(core) = config.worker_core {
                    match crate::cores::pin_this_thread(core) {
                        Ok(()) => tracing::info!(core, "the model worker runs on a core of its own"),
                        Err(error) => tracing::warn!(core, %error, "cannot move the model worker to its core (--worker-core)"),
                    }
                }
                supervise(&model, &config, &metrics, &receiver, &answers)
            })
            .expect("spawning the model worker thread");
        Scheduler { jobs, queue }
    }

    /// A place in the queue for a job of `prompts` (reserved before anything else is spent on
    /// it, such as a tenant's token rate), or [`Overloaded`] when the queue is full.
    /// `bounded: false` always gets one (the server's own reads wait instead).
    pub fn reserve(&self, prompts: &[Prompt], bounded: bool) -> Result<Ticket, Overloaded> {
        self.queue.reserve(work_tokens(prompts), bounded)
    }

    /// Whether the queue is full already, before a request has made its prompts: such a
    /// request is refused before any work.
    pub fn overloaded(&self) -> Option<Overloaded> {
        self.queue.is_full().then(|| Overloaded {
            depth: self.queue.depth(),
            limits: self.queue.limits,
            tokens: 0,
        })
    }

    /// What waits for the worker now (jobs waiting and being read, and their tokens).
    pub fn depth(&self) -> QueueDepth {
        self.queue.depth()
    }

    /// The queue's bounds.
    pub fn limits(&self) -> QueueLimits {
        self.queue.limits
    }

    /// Reads `prompts` (blocking) in the place `ticket` reserved, under a fair-share flow
    /// (a tenant's), sharing passes with concurrent requests and the prefix cache with
    /// earlier requests of the same tenant (`salt`). Once `cancel` is set the job's remaining
    /// prompts are not read ([`JobResult::cancelled`]).
    pub fn read_in(
        &self,
        ticket: Ticket,
        prompts: Vec<Prompt>,
        salt: u64,
        flow: Flow,
        cancel: Cancel,
    ) -> JobResult {
        let count = prompts.len();
        let (reply, result) = mpsc::channel();
        let trace = JobTrace::sent(&prompts);
        let sent = self.jobs.send(Job {
            prompts,
            salt,
            flow,
            cancel,
            ticket,
            reply,
            trace,
            sent: Instant::now(),
        });
        match sent.ok().and_then(|()| result.recv().ok()) {
            Some(result) => result,
            None => failed(count, "the model worker stopped before reading it"),
        }
    }
}

fn failed(count: usize, reason: &str) -> JobResult {
    JobResult {
        reads: (0..count)
            .map(|_| Err(ModelError::Compute(reason.to_string())))
            .collect(),
        forward_passes: 0,
        cancelled: false,
    }
}

/// What every step of the worker needs: the model, the counters, the fault schedule, the
/// pass size (`--max-pass-tokens`, 0: the model's default).
struct Worker<'a> {
    model: &'a Model,
    metrics: &'a Metrics,
    faults: &'a Faults,
    max_pass_tokens: usize,
    answers: &'a Sender<Answered>,
    /// Whether packed passes keep each prompt's keys and values for the prefix cache
    /// ([`keeps_rows`]).
    keep_rows: bool,
}

/// Whether the packed passes of `model` keep every prompt's keys and values, so that the
/// prefix cache holds each prompt's full blocks (the question's own tokens too, not only
/// what a job's prompts share): whenever there is a prefix cache. On candle's ops cutting a
/// prompt's rows out is a few copies beside a pass that costs about its rows; on decide's
/// fused CUDA kernels the cuts are views the attention reads in place (`KvCache::range`), so
/// keeping costs no copy there. A pass keeps only where some prompt has a full block not
/// stored yet ([`stores_new_blocks`]): a kept pass runs eagerly, not as a CUDA graph.
/// `DECIDE_KEEP_ROWS=0` stores only what a job's prompts share and lone long prompts, as
/// before (for A/B runs on a GPU).
fn keeps_rows(cache_bytes: usize) -> bool {
    cache_bytes > 0 && std::env::var("DECIDE_KEEP_ROWS").map_or(true, |v| v != "0")
}

/// Whether prompt `p` of `job` has a full block its tenant's cache does not hold yet (then
/// the pass that reads it keeps its rows).
fn stores_new_blocks(cache: &PrefixCache, job: &Job, p: usize) -> bool {
    let tokens = &job.prompts[p].tokens;
    let full = tokens.len() / BLOCK_TOKENS * BLOCK_TOKENS;
    full > 0 && cache.held(job.salt, &tokens[..full]) < full
}

/// A read batch and its results, on their way to the answer thread.
type Answered = (Vec<Job>, Vec<JobResult>);

impl Worker<'_> {
    /// Hands a read batch to the answer thread ([`answer_batches`]); answers it here should
    /// that thread be gone.
    fn answer(&self, batch: Vec<Job>, results: Vec<JobResult>) {
        if let Err(mpsc::SendError((batch, results))) = self.answers.send((batch, results)) {
            reply(batch, results);
        }
    }

    /// One model call, counted; its failure counted as an engine failure.
    fn call<T>(&self, run: impl FnOnce(&Model) -> Result<T, ModelError>) -> Result<T, ModelError> {
        self.metrics.record_model_call();
        let outcome = run(self.model);
        if let Err(error) = &outcome {
            tracing::error!(%error, "a model call failed; its prompts fail");
            self.metrics.record_engine_failure();
        }
        outcome
    }
}

/// Runs the worker loop, and runs it again should it panic outside a pass (a bug: passes are
/// guarded on their own, [`read_guarded`]). The jobs it held then fail (their replies are
/// dropped: "the model worker stopped"), and the prefix cache starts empty; the server keeps
/// serving.
fn supervise(
    model: &Model,
    config: &SchedulerConfig,
    metrics: &Metrics,
    queue: &Receiver<Job>,
    answers: &Sender<Answered>,
) {
    // Request threads run at `--request-thread-nice` so that they do not keep this one off
    // a core; a worker started from such a thread would share their priority.
    if let Some(nice) = crate::priority::this_thread().filter(|&nice| nice > 0) {
        tracing::warn!(
            nice,
            "the model worker runs below the default priority (started from a lowered thread)"
        );
    }
    let faults = Faults {
        fault: config.fault,
        batches: AtomicU64::new(0),
    };
    let worker = Worker {
        model,
        metrics,
        faults: &faults,
        max_pass_tokens: config.max_pass_tokens,
        answers,
        keep_rows: keeps_rows(config.prefix_cache_bytes),
    };
    loop {
        match std::panic::catch_unwind(AssertUnwindSafe(|| work(&worker, config, queue))) {
            Ok(()) => return,
            Err(panic) => {
                tracing::error!(
                    reason = panic_text(panic.as_ref()),
                    "the model worker panicked outside a pass; it restarts, the jobs it held fail"
                );
                metrics.record_worker_restart();
            }
        }
    }
}

/// A panic's message.
fn panic_text(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or("unknown panic")
}

/// The worker loop: gather the waiting jobs, drop the cancelled ones, read the batch fair
/// share picks, reply; until every handle is gone.
fn work(worker: &Worker<'_>, config: &SchedulerConfig, queue: &Receiver<Job>) {
    let metrics = worker.metrics;
    let mut cache = PrefixCache::new(config.prefix_cache_bytes);
    let mut fair = FairQueue::new(config.fair_share_tokens);
    let mut rejoin = Rejoin::new(config.batch_rejoin);
    loop {
        if fair.is_empty() {
            match queue.recv() {
                Ok(job) => take(job, &mut fair, &mut rejoin),
                Err(_) => return,
            }
        }
        let waited = gather(queue, &mut fair, &mut rejoin, config);
        metrics.record_rejoin(rejoin.rounds(), waited);
        drop_cancelled(worker, &mut fair);
        let (mut batch, mode) = fair.next_batch(config.max_batch_tokens, Instant::now());
        if batch.is_empty() {
            continue;
        }
        let rows = match mode {
            Mode::Alone | Mode::Sparse => usize::MAX,
            Mode::Shared => config.fair_share_pass_tokens.max(1),
        };
        // Between two passes: cancelled jobs that wait are dropped, and sparse jobs that
        // arrived meanwhile are read at once, also when the batch began with one flow alone
        // and another one just showed up.
        let mut between = |cache: &mut PrefixCache| {
            drain(queue, &mut fair, &mut rejoin);
            drop_cancelled(worker, &mut fair);
            let now = fair.mode(Instant::now());
            if now == Mode::Shared {
                let sparse = fair.take_sparse(config.max_batch_tokens);
                if !sparse.is_empty() {
                    // Read as it would be alone: nothing preempts it anyway.
                    serve(worker, cache, &mut fair, sparse, usize::MAX, &mut |_| None);
                }
            }
            // Passes shrink once another flow shows up, and grow when it has gone.
            Some(match (mode, now) {
                (Mode::Sparse, _) | (_, Mode::Alone) => usize::MAX,
                _ => config.fair_share_pass_tokens.max(1),
            })
        };
        // The batch's own flows are settled after it; `between` borrows `fair` until then.
        let flows: Vec<Flow> = batch.iter().map(|job| job.flow).collect();
        let started = Instant::now();
        let results = read_guarded(worker, &mut cache, &mut batch, rows, &mut between);
        tracing::debug!(
            jobs = batch.len(),
            tokens = batch.iter().map(Job::tokens).sum::<usize>(),
            ?mode,
            ms = started.elapsed().as_secs_f64() * 1e3,
            "batch read"
        );
        let read = started.elapsed();
        metrics.record_model_busy(read);
        metrics.record_batch(batch.len(), &cache.stats());
        // Only one tenant's clients are waited for: while several share the worker, a
        // sparse tenant's request must not wait for a busy one's clients. The jobs sent
        // during the read are the round before's (the other cohort's, or its stragglers).
        match mode {
            Mode::Alone => rejoin.answered(batch.len(), read, Instant::now()),
            Mode::Shared | Mode::Sparse => rejoin.shared(),
        }
        worker.answer(batch, results);
        // What the batch's lone reads left to store, while the answers go out.
        if cache.flush() {
            metrics.record_cache(&cache.stats());
        }
        for flow in flows {
            fair.done(flow);
        }
        drain(queue, &mut fair, &mut rejoin);
        rejoin.settle();
    }
}

/// Drops the waiting jobs whose requests were cancelled, answering each as cancelled: they
/// would only delay the jobs behind them, and nobody waits for their reads.
fn drop_cancelled(worker: &Worker<'_>, fair: &mut FairQueue) {
    let gone = fair.remove_cancelled(Instant::now());
    if gone.is_empty() {
        return;
    }
    tracing::debug!(
        jobs = gone.len(),
        "cancelled jobs dropped before their passes"
    );
    worker.metrics.record_cancelled_jobs(gone.len());
    for job in gone {
        let count = job.prompts.len();
        job.answer(JobResult::cancelled(count));
    }
}

/// Moves a job from the channel into the fair queue, telling the rejoin window when it
/// was sent.
fn take(job: Job, fair: &mut FairQueue, rejoin: &mut Rejoin) {
    rejoin.arrived(job.sent);
    fair.push(job, Instant::now());
}

/// Moves every job waiting in the channel into the fair queue.
fn drain(queue: &Receiver<Job>, fair: &mut FairQueue, rejoin: &mut Rejoin) {
    loop {
        match queue.try_recv() {
            Ok(job) => take(job, fair, rejoin),
            Err(TryRecvError::Empty | TryRecvError::Disconnected) => return,
        }
    }
}

/// Takes what is waiting, and what arrives shortly after, until the waiting prompt tokens
/// reach `--max-batch-tokens`: for `--batch-wait-us` after the first job, and while the last
/// batch's clients are not back yet, until its window ends ([`Rejoin`]). Returns how long it
/// waited for the window.
fn gather(
    queue: &Receiver<Job>,
    fair: &mut FairQueue,
    rejoin: &mut Rejoin,
    config: &SchedulerConfig,
) -> Duration {
    drain(queue, fair, rejoin);
    let fixed = Instant::now() + config.batch_wait;
    let mut waited = Duration::ZERO;
    while fair.waiting_tokens() < config.max_batch_tokens {
        let window = rejoin.deadline().filter(|&until| until > fixed);
        let deadline = window.unwrap_or(fixed);
        let since = Instant::now();
        let got = queue.recv_timeout(deadline.saturating_duration_since(since));
        if window.is_some() {
            waited += since.elapsed();
        }
        match got {
            Ok(job) => {
                take(job, fair, rejoin);
                drain(queue, fair, rejoin);
            }
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
        }
    }
    waited
}

/// Reads a batch that needs no fair-share decisions of its own (sparse jobs between two
/// passes) and replies.
fn serve(
    worker: &Worker<'_>,
    cache: &mut PrefixCache,
    fair: &mut FairQueue,
    mut batch: Vec<Job>,
    rows: usize,
    between: &mut dyn FnMut(&mut PrefixCache) -> Option<usize>,
) {
    let started = Instant::now();
    let results = read_guarded(worker, cache, &mut batch, rows, between);
    tracing::debug!(
        jobs = batch.len(),
        ms = started.elapsed().as_secs_f64() * 1e3,
        "sparse jobs read between two passes"
    );
    worker.metrics.record_batch(batch.len(), &cache.stats());
    for job in &batch {
        fair.done(job.flow);
    }
    worker.answer(batch, results);
    // What the batch's lone reads left to store, while the answers go out.
    if cache.flush() {
        worker.metrics.record_cache(&cache.stats());
    }
}

/// The answer thread: replies to each batch the worker read, in order, until the worker is
/// gone. Why a thread of its own: waking a batch's requests (a syscall each, a few hundred
/// at saturation) and dropping their jobs is host time, and on the worker it would delay
/// the next pass while the GPU waits. Here it runs beside that pass. Measured on an H200 with
/// q15 at 1,024 clients and 16384-token batches: before it, the worker was idle 21.6% of the
/// window (3,915 decisions/s, bench/reports/h200-side-by-side-8/ab/); with it 1.2-1.9%
/// (4,599-4,625/s in three leases, bench/reports/h200-side-by-side-9/).
fn answer_batches(batches: Receiver<Answered>) {
    for (batch, results) in batches {
        reply(batch, results);
    }
}

fn reply(batch: Vec<Job>, results: Vec<JobResult>) {
    for (job, result) in batch.into_iter().zip(results) {
        job.answer(result);
    }
}

/// [`read_batch`], failing the batch's jobs (not the worker) when a pass panics; counts the
/// jobs it stopped as cancelled.
fn read_guarded(
    worker: &Worker<'_>,
    cache: &mut PrefixCache,
    batch: &mut [Job],
    rows: usize,
    between: &mut dyn FnMut(&mut PrefixCache) -> Option<usize>,
) -> Vec<JobResult> {
    let spans = model_pass_spans(batch);
    let batch = &*batch;
    let fault = worker.faults.next_batch();
    let results = std::panic::catch_unwind(AssertUnwindSafe(|| {
        read_batch(worker, cache, batch, rows, between, fault)
    }))
    .unwrap_or_else(|panic| {
        let reason = panic_text(panic.as_ref());
        tracing::error!(reason, "a forward pass panicked; its batch fails");
        worker.metrics.record_engine_failure();
        batch
            .iter()
            .map(|job| {
                failed(
                    job.prompts.len(),
                    &format!("the forward pass panicked: {reason}"),
                )
            })
            .collect()
    });
    let cancelled = results.iter().filter(|result| result.cancelled).count();
    if cancelled > 0 {
        worker.metrics.record_cancelled_jobs(cancelled);
    }
    close_model_pass_spans(spans, &results);
    results
}

/// The prefix a job's prompts continue: the KV of their first `len` tokens.
struct JobPrefix {
    cache: Option<KvCache>,
    /// Tokens of each prompt covered by `cache`.
    len: usize,
    /// Of those, tokens that came from the cross-request prefix cache.
    hit: usize,
}

impl JobPrefix {
    /// Just what the prefix cache held (`hit` tokens, or none).
    fn cached(found: Option<KvCache>, hit: usize) -> Self {
        JobPrefix {
            cache: found,
            len: hit,
            hit,
        }
    }
}

/// Why a job's prefix was not made.
enum Stop {
    /// Its request was cancelled between two chunks.
    Cancelled,
    /// A model call failed.
    Failed(ModelError),
}

impl From<ModelError> for Stop {
    fn from(error: ModelError) -> Self {
        Stop::Failed(error)
    }
}

/// Reads a batch of jobs: their prefixes first, then every prompt's own tokens in shared
/// packed passes of at most `rows` rows (prefills in chunks of `rows`); `between` runs
/// before every model call after the first. A job cancelled meanwhile is not read further.
/// `fault` (`--inject-fault`) fails the batch before its first pass.
fn read_batch(
    worker: &Worker<'_>,
    cache: &mut PrefixCache,
    batch: &[Job],
    rows: usize,
    between: &mut dyn FnMut(&mut PrefixCache) -> Option<usize>,
    fault: Option<FaultKind>,
) -> Vec<JobResult> {
    const INJECTED: &str = "fault injected by --inject-fault: the batch's first pass failed";
    match fault {
        Some(FaultKind::Panic) => panic!("{INJECTED}"),
        Some(FaultKind::Error) => {
            tracing::error!("{INJECTED}");
            worker.metrics.record_engine_failure();
            return batch
                .iter()
                .map(|job| failed(job.prompts.len(), INJECTED))
                .collect();
        }
        None => {}
    }
    let (mut calls, mut cap) = (0usize, rows);
    // Before each model call: `between` (after the first), which may change the row cap.
    let mut step = |cache: &mut PrefixCache| {
        if calls > 0 {
            if let Some(new) = between(cache) {
                cap = new;
            }
        }
        calls += 1;
        cap
    };
    let mut results: Vec<JobResult> = batch
        .iter()
        .map(|job| JobResult {
            reads: Vec::with_capacity(job.prompts.len()),
            forward_passes: 0,
            cancelled: false,
        })
        .collect();
    // Every job's prefix (None: nothing left to pack, because its prompt was read already,
    // its prefix failed or its request was cancelled); a long lone prompt is read (and its
    // prefix stored) right here.
    let mut prefixes: Vec<Option<JobPrefix>> = Vec::with_capacity(batch.len());
    let mut reads: Vec<Vec<Option<PromptRead>>> = batch
        .iter()
        .map(|job| (0..job.prompts.len()).map(|_| None).collect())
        .collect();
    // Per prompt of a job of several, a stored prefix of its own longer than what the job's
    // prompts share (the same question asked again): looked up before the job's shared
    // prefix is made and stored, so the counters say what earlier reads left.
    let mut own: Vec<Vec<Option<Own>>> = batch
        .iter()
        .map(|job| vec![None; job.prompts.len()])
        .collect();
    // A cancelled job's prompts not read yet end as cancelled, and it takes no more passes.
    let cancel = |j: usize, results: &mut [JobResult], reads: &mut [Vec<Option<PromptRead>>]| {
        results[j].cancelled = true;
        for slot in reads[j].iter_mut().filter(|slot| slot.is_none()) {
            *slot = Some(Err(ModelError::Compute(CANCELLED.into())));
        }
    };
    for (j, job) in batch.iter().enumerate() {
        if job.cancel.is_cancelled() {
            cancel(j, &mut results, &mut reads);
            prefixes.push(None);
            continue;
        }
        let every_own = own_prefixes(cache, job, &mut own[j]);
        let made = if every_own {
            // Nothing the prompts share needs making: each continues a longer stored prefix.
            Ok(Prefixed::Prefix(JobPrefix::cached(None, 0)))
        } else {
            job_prefix(worker, cache, job, &mut results[j], rows, &mut step)
        };
        let prefix = match made {
            Ok(Prefixed::Prefix(prefix)) => Some(prefix),
            Ok(Prefixed::Read(read, cached)) => {
                reads[j][0] = Some(Ok((read, cached)));
                None
            }
            Err(Stop::Cancelled) => {
                cancel(j, &mut results, &mut reads);
                None
            }
            Err(Stop::Failed(error)) => {
                for slot in &mut reads[j] {
                    *slot = Some(Err(ModelError::Compute(error.to_string())));
                }
                None
            }
        };
        prefixes.push(prefix);
    }

    if worker.keep_rows {
        let rows = PassBounds::of(worker.model, worker.max_pass_tokens).rows;
        read_stems(
            worker,
            cache,
            batch,
            &prefixes,
            &mut own,
            &mut results,
            rows,
            &mut step,
        );
    }
    // Every prompt of every job whose prefix is ready, as (job, prompt) in order.
    let mut rest: Vec<(usize, usize)> = batch
        .iter()
        .zip(&prefixes)
        .enumerate()
        .filter(|(_, (_, prefix))| prefix.is_some())
        .flat_map(|(j, (job, _))| (0..job.prompts.len()).map(move |p| (j, p)))
        .collect();
    let bounds = PassBounds::of(worker.model, worker.max_pass_tokens);
    // Passes are grouped one at a time, so a cap set by `between` applies to the next one,
    // and a job cancelled meanwhile leaves the rest before it.
    while !rest.is_empty() {
        let cap = step(cache);
        let now = Instant::now();
        let gone: Vec<bool> = batch
            .iter()
            .enumerate()
            .map(|(j, job)| !results[j].cancelled && job.cancel.is_cancelled_at(now))
            .collect();
        if gone.iter().any(|&g| g) {
            for j in (0..batch.len()).filter(|&j| gone[j]) {
                cancel(j, &mut results, &mut reads);
            }
            rest.retain(|&(j, _)| !results[j].cancelled);
            if rest.is_empty() {
                break;
            }
        }
        let bounds = PassBounds {
            rows: bounds.rows.min(cap),
            ..bounds
        };
        // A prompt longer than a prefill chunk past its start would be a pass of its own
        // that no deadline stops: its own stretch is prefilled a chunk per call first.
        let (j, p) = rest[0];
        match prefill_own_chunk(worker, batch, &prefixes, &mut own, (j, p), cap) {
            Ok(false) => {}
            Ok(true) => {
                results[j].forward_passes += 1;
                continue;
            }
            Err(error) => {
                reads[j][p] = Some(Err(error));
                rest.remove(0);
                continue;
            }
        }
        let start = |j: usize, p: usize| -> Start<'_> {
            match &own[j][p] {
                Some(own) => Start {
                    cache: Some(&own.cache),
                    len: own.cache.len(),
                    own: true,
                },
                None => {
                    let prefix = prefixes[j].as_ref().expect("only jobs with a prefix");
                    Start {
                        cache: prefix.cache.as_ref(),
                        len: prefix.len,
                        own: false,
                    }
                }
            }
        };
        let pass = passes(&rest, batch, &start, bounds)
            .into_iter()
            .next()
            .expect("items left make a pass");
        let segments: Vec<Segment<'_>> = pass
            .iter()
            .map(|&(j, p)| {
                let start = start(j, p);
                Segment {
                    prefix: start.cache,
                    tokens: &batch[j].prompts[p].tokens[start.len..],
                }
            })
            .collect();
        let labels: Vec<&[u32]> = pass
            .iter()
            .map(|&(j, p)| batch[j].prompts[p].label_ids.as_slice())
            .collect();
        // Jobs of many prompts (a long option list read in pieces, a wide classify) keep only
        // their shared prefix: their prompts' own blocks are long, rarely asked again, and
        // storing them split the tree's runs (a copy each) hundreds of times a batch.
        let keep = worker.keep_rows
            && pass
                .iter()
                .all(|&(j, _)| batch[j].prompts.len() <= MAX_KEPT_PROMPTS)
            && pass
                .iter()
                .any(|&(j, p)| stores_new_blocks(cache, &batch[j], p));
        let outcome = if keep {
            worker
                .call(|model| model.read_packed_keeping(&segments, &labels))
                .map(|(reads, kept)| (reads, Some(kept)))
        } else {
            worker
                .call(|model| model.read_packed(&segments, &labels))
                .map(|reads| (reads, None))
        };
        let mut joined: Vec<usize> = pass.iter().map(|&(j, _)| j).collect();
        joined.dedup();
        for j in joined {
            results[j].forward_passes += 1;
        }
        match outcome {
            Ok((pass_reads, kept)) => {
                for (&(j, p), read) in pass.iter().zip(pass_reads) {
                    let prefix = prefixes[j].as_ref().expect("only jobs with a prefix");
                    // A prompt over its own stored prefix reused all of it; otherwise the
                    // first prompt paid for the job's shared prefix and the others reused it.
                    let cached = match &own[j][p] {
                        Some(own) => own.cached,
                        None if p == 0 => prefix.hit,
                        None => prefix.len,
                    };
                    reads[j][p] = Some(Ok((read, cached)));
                }
                // Every prompt's full blocks, stored once the batch is answered.
                for (&(j, p), kept) in pass.iter().zip(kept.into_iter().flatten()) {
                    cache.insert_later(batch[j].salt, &batch[j].prompts[p].tokens, kept);
                }
            }
            Err(error) => {
                for &(j, p) in &pass {
                    reads[j][p] = Some(Err(ModelError::Compute(error.to_string())));
                }
            }
        }
        rest.drain(..pass.len());
    }
    for (result, reads) in results.iter_mut().zip(reads) {
        result.reads = reads
            .into_iter()
            .map(|read| read.expect("every prompt was read, failed or cancelled"))
            .collect();
    }
    results
}

/// Prefills one chunk of prompt `(j, p)`'s own stretch, past its start (its own prefix or
/// its job's), when that stretch is longer than one prefill call may be (the model's chunk,
/// at most `cap` rows); the prompt then continues the longer prefix in [`Own`]. Whether it
/// did. The cuts fall on the attention's key tiles as [`chunked_prefix`]'s do, and the
/// read's last rows stay for its packed pass.
fn prefill_own_chunk(
    worker: &Worker<'_>,
    batch: &[Job],
    prefixes: &[Option<JobPrefix>],
    own: &mut [Vec<Option<Own>>],
    (j, p): (usize, usize),
    cap: usize,
) -> Result<bool, ModelError> {
    let tokens = &batch[j].prompts[p].tokens;
    let prefix = prefixes[j].as_ref().expect("only jobs with a prefix");
    // Where the prompt starts: its own prefix or its job's, and how much of it counts as cached.
    let (start, from, cached) = match &own[j][p] {
        Some(own) => (Some(&own.cache), own.cache.len(), own.cached),
        None => (
            prefix.cache.as_ref(),
            prefix.len,
            if p == 0 { prefix.hit } else { prefix.len },
        ),
    };
    let chunk = prefill_rows(worker.model, tokens.len()).min(cap).max(1);
    if tokens.len() - from <= chunk {
        return Ok(false);
    }
    let mut end = from + chunk;
    let tile = end / PREFILL_ALIGN * PREFILL_ALIGN;
    if tile > from && prefill_aligned() {
        end = tile;
    }
    let filled = worker.call(|model| model.prefill(&tokens[from..end], start))?;
    own[j][p] = Some(Own {
        cache: filled,
        cached,
    });
    Ok(true)
}

/// What [`job_prefix`] did for a job.
enum Prefixed {
    /// The KV its prompts continue from; they are read in the packed passes.
    Prefix(JobPrefix),
    /// A lone long prompt, read on its own (one pass that also yields its KV, whose prefix
    /// was stored): the read and its cached tokens.
    Read(Readout, usize),
}

/// Finds or computes the KV a job's prompts continue from, and stores new prefixes.
fn job_prefix(
    worker: &Worker<'_>,
    cache: &mut PrefixCache,
    job: &Job,
    result: &mut JobResult,
    rows: usize,
    step: &mut dyn FnMut(&mut PrefixCache) -> usize,
) -> Result<Prefixed, Stop> {
    let shared = shared_prefix_len(&job.prompts);
    let tokens = &job.prompts[0].tokens;
    // A job of several prompts had each prompt's lookup counted ([`own_prefixes`]).
    let found = if job.prompts.len() > 1 {
        cache.peek(job.salt, &tokens[..shared])
    } else {
        cache.lookup(job.salt, &tokens[..shared])
    };
    let hit = found.as_ref().map_or(0, KvCache::len);
    if job.prompts.len() == 1 {
        // A lone prompt with a long uncached stretch: read it in a pass of its own that also
        // returns its KV, and keep its prefix (to a block boundary) for the next request. A
        // short one joins the packed passes; storing it whole would not pay, but a short
        // prompt stores what it has in common with its tenant's previous one (the beginning
        // every question repeats), and a short stretch after a long cached prefix is read
        // over it. With passes bounded (several flows active) a long one is prefilled in
        // chunks below instead.
        if shared - hit < STORE_MIN_TOKENS {
            // Only short prompts: a common start after a long cached input would store
            // another copy of that whole input's KV. Where the packed pass keeps every
            // prompt's blocks, it stores that start anyway.
            if shared < STORE_MIN_TOKENS && !worker.keep_rows {
                return shared_start(worker, cache, job, result, found, hit, shared, step);
            }
            return Ok(Prefixed::Prefix(JobPrefix::cached(found, hit)));
        }
        if rows < shared - hit {
            return chunked_prefix(worker, cache, job, result, found, hit, shared, rows, step);
        }
        let prompt = &job.prompts[0];
        // In chunks of one call each, so a cancelled request stops between two (what
        // `read_and_cache` would run in one call, read for read the same: the remainder
        // first, the cuts on the attention's key tiles, `chunk_lengths`).
        let chunk = prefill_rows(worker.model, tokens.len());
        let head = hit + last_chunk_start(hit, tokens.len() - hit, chunk);
        let mut filled = found;
        let mut at = hit;
        for rows in chunk_lengths(hit, head - hit, chunk) {
            step(cache);
            if job.cancel.is_cancelled() {
                return Err(Stop::Cancelled);
            }
            let end = at + rows;
            filled = Some(worker.call(|model| model.prefill(&tokens[at..end], filled.as_ref()))?);
            result.forward_passes += 1;
            at = end;
        }
        step(cache);
        if job.cancel.is_cancelled() {
            return Err(Stop::Cancelled);
        }
        let (read, filled, passes) = worker.call(|model| {
            model.read_and_cache(&tokens[at..], filled.as_ref(), &prompt.label_ids)
        })?;
        result.forward_passes += passes;
        // Its full blocks, stored once the batch is answered (`work`, `serve`): the reply
        // does not wait.
        cache.insert_later(job.salt, tokens, filled);
        return Ok(Prefixed::Read(read, hit));
    }
    // Several prompts: everything they share is prefilled once.
    if shared <= hit {
        return Ok(Prefixed::Prefix(JobPrefix::cached(found, hit)));
    }
    chunked_prefix(worker, cache, job, result, found, hit, shared, rows, step)
}

/// A short lone prompt's prefix: the cached one, or, when it shares more than that with the
/// tenant's previous short prompt (the chat-template header, a system message, an input
/// asked about again), that common beginning to a block boundary, prefilled once here and
/// stored, so the next prompts that start alike find it in the cache ([`RecentStarts`]).
///
/// [`RecentStarts`]: crate::recent_starts::RecentStarts
#[allow(clippy::too_many_arguments)]
fn shared_start(
    worker: &Worker<'_>,
    cache: &mut PrefixCache,
    job: &Job,
    result: &mut JobResult,
    found: Option<KvCache>,
    hit: usize,
    shared: usize,
    step: &mut dyn FnMut(&mut PrefixCache) -> usize,
) -> Result<Prefixed, Stop> {
    let tokens = &job.prompts[0].tokens[..shared];
    let store = cache.common_start(job.salt, tokens) / BLOCK_TOKENS * BLOCK_TOKENS;
    if store <= hit {
        return Ok(Prefixed::Prefix(JobPrefix::cached(found, hit)));
    }
    step(cache);
    if job.cancel.is_cancelled() {
        return Err(Stop::Cancelled);
    }
    let filled = worker.call(|model| model.prefill(&tokens[hit..store], found.as_ref()))?;
    result.forward_passes += 1;
    // Only the blocks not stored yet are copied out of `filled` (`KvCache::range`).
    cache.insert(job.salt, &tokens[..store], filled.clone());
    Ok(Prefixed::Prefix(JobPrefix {
        cache: Some(filled),
        len: store,
        hit,
    }))
}

/// Rows of one prefill call once the keys reach `keys`: the model's own chunk, at most
/// [`PREFILL_CHECK_ROWS`] on candle's ops. Chunking does not change a read (split-invariant
/// numerics), so this only decides how often the worker looks up between two calls.
fn prefill_rows(model: &Model, keys: usize) -> usize {
    let rows = model.prefill_chunk_rows(keys).max(1);
    if model.transformer().is_fused() {
        rows
    } else {
        rows.min(PREFILL_CHECK_ROWS)
    }
}

/// Prefills a job's tokens `hit..shared` over `found` in chunks of at most `rows` (and of at
/// most [`prefill_rows`]: one model call each, [`read_batch`]'s `between` before each,
/// the job's cancellation checked before each), and stores the prefix.
#[allow(clippy::too_many_arguments)]
fn chunked_prefix(
    worker: &Worker<'_>,
    cache: &mut PrefixCache,
    job: &Job,
    result: &mut JobResult,
    found: Option<KvCache>,
    hit: usize,
    shared: usize,
    rows: usize,
    step: &mut dyn FnMut(&mut PrefixCache) -> usize,
) -> Result<Prefixed, Stop> {
    let tokens = &job.prompts[0].tokens;
    result.forward_passes += 1;
    let own_chunk = prefill_rows(worker.model, shared);
    let mut filled = found;
    let mut at = hit;
    while at < shared {
        let cap = step(cache).min(rows).min(own_chunk);
        if job.cancel.is_cancelled() {
            return Err(Stop::Cancelled);
        }
        let mut end = shared.min(at.saturating_add(cap.max(1)));
        // Cut on the attention's key tiles where the pass still gets rows (`chunk_lengths`).
        let tile = end / PREFILL_ALIGN * PREFILL_ALIGN;
        if end < shared && tile > at && prefill_aligned() {
            end = tile;
        }
        filled = Some(worker.call(|model| model.prefill(&tokens[at..end], filled.as_ref()))?);
        at = end;
    }
    let filled = filled.expect("at least one chunk: shared > hit");
    // Its full blocks not stored yet (`PrefixCache::insert` cuts to whole blocks).
    cache.insert(job.salt, &tokens[..shared], filled.clone());
    Ok(Prefixed::Prefix(JobPrefix {
        cache: Some(filled),
        len: shared,
        hit,
    }))
}

/// What a prompt continues in its packed pass: its job's prefix, or a longer stored prefix
/// of its own.
#[derive(Clone, Copy)]
struct Start<'a> {
    cache: Option<&'a KvCache>,
    len: usize,
    own: bool,
}

/// For a job of several prompts, each prompt's stored prefix where it is longer than what
/// the job's prompts share (`own`); whether every prompt has one (then the shared prefix
/// need not be made). Reads up to each prompt's last token, which the pass computes.
fn own_prefixes(cache: &mut PrefixCache, job: &Job, own: &mut [Option<Own>]) -> bool {
    if job.prompts.len() < 2 {
        return false;
    }
    let shared = shared_prefix_len(&job.prompts);
    for (slot, prompt) in own.iter_mut().zip(&job.prompts) {
        let tokens = &prompt.tokens[..prompt.tokens.len() - 1];
        *slot = cache
            .lookup_longer(job.salt, tokens, shared)
            .map(|cache| Own {
                cached: cache.len(),
                cache,
            });
    }
    own.iter().all(Option::is_some)
}

/// A prefix a prompt continues instead of its job's: a longer stored one, or the stem it
/// shares with its neighbours ([`read_stems`]).
#[derive(Clone)]
struct Own {
    cache: KvCache,
    /// Of its positions, how many count as cached for this prompt (all of a stored prefix;
    /// of a stem, what its first prompt did not pay for).
    cached: usize,
}

/// Most prompts of a job whose every prompt's blocks a pass keeps for the prefix cache (a
/// request's questions times their permutation orders; more is an option list read in pieces).
const MAX_KEPT_PROMPTS: usize = 32;

/// Fewest tokens beyond its job's prefix a stem must have to be read on its own.
const MIN_STEM_TOKENS: usize = 4;

/// Reads that share more: in a job, consecutive prompts that share more than the job's
/// prefix (a question's permutation orders share its input, its question and the options'
/// heading; they part where the options' order does) have that stem read once, all stems of
/// the batch in one packed pass that keeps their keys and values, and continue from it.
/// Without this each order computed its stem anew. Stems beyond `rows` rows wait for
/// nothing: their prompts read whole, as before.
#[allow(clippy::too_many_arguments)]
fn read_stems(
    worker: &Worker<'_>,
    cache: &mut PrefixCache,
    batch: &[Job],
    prefixes: &[Option<JobPrefix>],
    own: &mut [Vec<Option<Own>>],
    results: &mut [JobResult],
    rows: usize,
    step: &mut dyn FnMut(&mut PrefixCache) -> usize,
) {
    // (job, its prompts sharing the stem, the stem's end)
    let mut stems: Vec<(usize, Vec<usize>, usize)> = Vec::new();
    let mut total = 0;
    for (j, job) in batch.iter().enumerate() {
        let Some(prefix) = &prefixes[j] else { continue };
        if job.prompts.len() > MAX_KEPT_PROMPTS {
            continue;
        }
        let tokens = |p: usize| job.prompts[p].tokens.as_slice();
        let mut p = 0;
        while p < job.prompts.len() {
            let mut members = vec![p];
            let mut end = tokens(p).len() - 1;
            let mut q = p + 1;
            while own[j][p].is_none() && q < job.prompts.len() && own[j][q].is_none() {
                let common = tokens(p)
                    .iter()
                    .zip(tokens(q))
                    .take_while(|(a, b)| a == b)
                    .count()
                    .min(tokens(q).len() - 1);
                if common.min(end) < prefix.len + MIN_STEM_TOKENS {
                    break;
                }
                end = end.min(common);
                members.push(q);
                q += 1;
            }
            if members.len() > 1 {
                stems.push((j, members, end));
            }
            p = q.max(p + 1);
        }
    }
    if stems.is_empty() {
        return;
    }
    let rows = rows.min(step(cache));
    stems.retain(|(j, _, end)| {
        total += end - prefixes[*j].as_ref().map_or(0, |p| p.len);
        total <= rows
    });
    if stems.is_empty() {
        return;
    }
    let segments: Vec<Segment<'_>> = stems
        .iter()
        .map(|(j, members, end)| {
            let prefix = prefixes[*j].as_ref().expect("only jobs with a prefix");
            Segment {
                prefix: prefix.cache.as_ref(),
                tokens: &batch[*j].prompts[members[0]].tokens[prefix.len..*end],
            }
        })
        .collect();
    let kept = match worker.call(|model| model.transformer().forward_packed_keeping(&segments)) {
        Ok((_, kept)) => kept,
        // Their prompts are read whole instead (and fail there if the model does).
        Err(_) => return,
    };
    let mut joined: Vec<usize> = stems.iter().map(|(j, _, _)| *j).collect();
    joined.dedup();
    for j in joined {
        results[j].forward_passes += 1;
    }
    for ((j, members, end), cache) in stems.into_iter().zip(kept) {
        let prefix = prefixes[j].as_ref().expect("only jobs with a prefix");
        for (i, p) in members.into_iter().enumerate() {
            // The first prompt paid for the stem (and, as prompt 0, for the job's prefix).
            let cached = match (i, p) {
                (0, 0) => prefix.hit,
                (0, _) => prefix.len,
                _ => end,
            };
            own[j][p] = Some(Own {
                cache: cache.clone(),
                cached,
            });
        }
    }
}

/// Groups `items` into passes of at most `max_rows` rows whose attention scores (rows x key
/// columns x `heads`) stay within the prefill budget (`heads` 0: no score limit); a single
/// larger item gets a pass of its own.
fn passes<'a>(
    items: &[(usize, usize)],
    batch: &[Job],
    start: &dyn Fn(usize, usize) -> Start<'a>,
    bounds: PassBounds,
) -> Vec<Vec<(usize, usize)>> {
    let PassBounds {
        rows: max_rows,
        heads,
        key_columns,
    } = bounds;
    let mut passes = Vec::new();
    let mut current: Vec<(usize, usize)> = Vec::new();
    let (mut rows, mut prefix_cols) = (0, 0);
    for &(j, p) in items {
        let prefix = start(j, p);
        let own = batch[j].prompts[p].tokens.len() - prefix.len;
        // A job's prefix adds key columns once per pass, with its first prompt there; a
        // prompt's own prefix adds its columns.
        let adds_prefix = |current: &[(usize, usize)]| {
            if prefix.own || current.last().is_none_or(|&(last, _)| last != j) {
                prefix.len
            } else {
                0
            }
        };
        let cols = prefix_cols + adds_prefix(&current);
        // Prompts of one job share its prefix columns, so only another job's prompt is held
        // to the column bound.
        let one_job = current.iter().all(|&(other, _)| other == j);
        let fits = rows + own <= max_rows
            && (one_job || cols + rows + own <= key_columns)
            && (rows + own) * (cols + rows + own) * heads <= PREFILL_SCORE_BUDGET;
        if !current.is_empty() && !fits {
            passes.push(std::mem::take(&mut current));
            rows = 0;
            prefix_cols = 0;
        }
        prefix_cols += adds_prefix(&current);
        rows += own;
        current.push((j, p));
    }
    if !current.is_empty() {
        passes.push(current);
    }
    passes
}

/// What one packed pass may hold.
#[derive(Debug, Clone, Copy)]
struct PassBounds {
    /// Rows (query tokens).
    rows: usize,
    /// Heads for the score budget (0: no score matrix, no budget).
    heads: usize,
    /// Key columns once a second job joins: every job's prefix counts once, plus the
    /// pass's own rows (one job's prompts alone are not bound by it).
    key_columns: usize,
}

impl PassBounds {
    /// Decide's fused kernels hold no score matrix and read only each row's own key bands:
    /// large passes, no score or column bound. candle's ops compute every row against every
    /// key column of the pass (masked), so a pass of k jobs costs ~k times the attention of
    /// k lone reads; once several jobs share a pass its key columns are bounded where every
    /// row's attention costs about a quarter of its matmuls ([`candle_key_columns`]).
    /// `max_rows` (`--max-pass-tokens`) replaces the default row bound unless it is 0.
    fn of(model: &Model, max_rows: usize) -> PassBounds {
        let transformer = model.transformer();
        let rows = |default: usize| if max_rows == 0 { default } else { max_rows };
        if transformer.is_fused() {
            PassBounds {
                rows: rows(MAX_FUSED_PASS_TOKENS),
                heads: 0,
                key_columns: usize::MAX,
            }
        } else {
            let dims = transformer.dims();
            PassBounds {
                rows: rows(MAX_PASS_TOKENS),
                heads: dims.n_head,
                key_columns: candle_key_columns(dims),
            }
        }
    }
}

/// Key columns at which a row's attention (~4 x width flops per column and layer: scores and
/// weighted values) costs a quarter of its matmuls (~2 flops per weight): the layer's weights
/// over eight times its width. The MLP is taken as 8 x hidden^2 weights (SwiGLU at
/// 8/3 x hidden), a lower bound for the models here. SmolLM2-135M: 768 columns, so ~3 jobs
/// of a 150-token prefix and 60 own rows share a pass.
fn candle_key_columns(dims: &decide_models::forward::Dims) -> usize {
    let q = dims.n_head * dims.head_dim;
    let kv = dims.n_kv_head * dims.head_dim;
    let attention = dims.hidden * (2 * q + 2 * kv);
    let mlp = 8 * dims.hidden * dims.hidden;
    ((attention + mlp) / (8 * dims.hidden.max(1))).max(1)
}

/// Longest common token prefix of all prompts, leaving every prompt at least one own token
/// (the read happens at the last token, which must be computed in the packed pass).
fn shared_prefix_len(prompts: &[Prompt]) -> usize {
    shared_prefix_of(prompts.iter().map(|p| p.tokens.as_slice()))
}

/// [`shared_prefix_len`] of token lists: what a job of prompts with these tokens shares. The
/// pipeline reports it with the prompts a request asks back, so it is the scheduler's own rule.
pub(crate) fn shared_prefix_of<'a>(prompts: impl Iterator<Item = &'a [u32]> + Clone) -> usize {
    let mut rest = prompts.clone();
    let Some(first) = rest.next() else {
        return 0;
    };
    let mut len = prompts
        .map(<[u32]>::len)
        .min()
        .unwrap_or(0)
        .saturating_sub(1);
    for tokens in rest {
        len = first[..len]
            .iter()
            .zip(tokens)
            .take_while(|(a, b)| a == b)
            .count();
    }
    len
}

#[cfg(test)]
impl Job {
    /// A job for tests of batching and fair share, in an unbounded queue of its own, never
    /// cancelled, whose reply nobody reads.
    fn for_test(prompts: Vec<Prompt>, flow: Flow) -> Job {
        Job::cancellable(prompts, flow, Cancel::default())
    }

    /// [`Job::for_test`] under a cancellation token.
    fn cancellable(prompts: Vec<Prompt>, flow: Flow, cancel: Cancel) -> Job {
        let queue = Arc::new(Queue {
            limits: QueueLimits::default(),
            depth: Mutex::new(QueueDepth::default()),
        });
        let ticket = queue
            .reserve(work_tokens(&prompts), false)
            .expect("unbounded");
        let (reply, _) = mpsc::channel();
        Job {
            prompts,
            salt: 0,
            flow,
            cancel,
            ticket,
            reply,
            trace: JobTrace {
                request: tracing::Span::none(),
                queue_wait: None,
            },
            sent: Instant::now(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every prompt continues its job's prefix.
    fn job_starts<'a>(
        prefixes: &'a [Option<JobPrefix>],
    ) -> impl Fn(usize, usize) -> Start<'a> + 'a {
        move |j, _| {
            let prefix = prefixes[j].as_ref().expect("a prefix");
            Start {
                cache: prefix.cache.as_ref(),
                len: prefix.len,
                own: false,
            }
        }
    }

    fn prompt(tokens: &[u32]) -> Prompt {
        Prompt {
            tokens: tokens.to_vec(),
            label_ids: vec![],
        }
    }

    #[test]
    fn shared_prefix_leaves_every_prompt_a_token() {
        assert_eq!(shared_prefix_len(&[prompt(&[1, 2, 3])]), 2);
        assert_eq!(
            shared_prefix_len(&[prompt(&[1, 2, 3, 4]), prompt(&[1, 2, 5])]),
            2
        );
        assert_eq!(shared_prefix_len(&[prompt(&[1, 2]), prompt(&[1, 2, 3])]), 1);
        assert_eq!(shared_prefix_len(&[prompt(&[7]), prompt(&[8])]), 0);
    }

    #[test]
    fn on_candle_a_pass_holds_only_so_many_jobs_prefixes() {
        let job = || Job::for_test(vec![prompt(&vec![1; 160])], Flow::default());
        let batch: Vec<Job> = (0..10).map(|_| job()).collect();
        // Each job continues its own 100-token prefix and reads 60 rows of its own.
        let prefixes: Vec<Option<JobPrefix>> = (0..10)
            .map(|_| {
                Some(JobPrefix {
                    cache: None,
                    len: 100,
                    hit: 0,
                })
            })
            .collect();
        let items: Vec<(usize, usize)> = (0..10).map(|j| (j, 0)).collect();
        // Rows never bind here: the test is about the key columns.
        let bounds = PassBounds {
            rows: 2048,
            heads: 4,
            key_columns: 500,
        };
        let grouped = passes(&items, &batch, &job_starts(&prefixes), bounds);
        // 3 jobs: 300 prefix columns + 180 rows = 480 <= 500; a fourth would be 640.
        assert_eq!(
            grouped.iter().map(Vec::len).collect::<Vec<_>>(),
            [3, 3, 3, 1]
        );
        let dims = decide_models::forward::Dims {
            n_layers: 30,
            hidden: 576,
            n_head: 9,
            n_kv_head: 3,
            head_dim: 64,
            vocab_size: 49152,
            context_length: 8192,
        };
        assert_eq!(candle_key_columns(&dims), 768, "SmolLM2-135M");
        // One job's prompts share its prefix: they are not held to the column bound.
        let one = [Job::for_test(
            (0..10).map(|_| prompt(&vec![1; 160])).collect(),
            Flow::default(),
        )];
        let items: Vec<(usize, usize)> = (0..10).map(|p| (0, p)).collect();
        assert_eq!(
            passes(&items, &one, &job_starts(&prefixes[..1]), bounds).len(),
            1
        );
    }

    #[test]
    fn passes_are_bounded_by_rows_and_a_longer_prompt_runs_alone() {
        let job = |lengths: &[usize]| {
            Job::for_test(
                lengths.iter().map(|&n| prompt(&vec![1; n])).collect(),
                Flow::default(),
            )
        };
        let batch = [job(&[30, MAX_PASS_TOKENS + 20, 30]), job(&[30])];
        let prefixes: Vec<Option<JobPrefix>> = [10, 0]
            .iter()
            .map(|&len| {
                Some(JobPrefix {
                    cache: None,
                    len,
                    hit: 0,
                })
            })
            .collect();
        let items = [(0, 0), (0, 1), (0, 2), (1, 0)];
        let bounds = PassBounds {
            rows: MAX_PASS_TOKENS,
            heads: 4,
            key_columns: usize::MAX,
        };
        let grouped = passes(&items, &batch, &job_starts(&prefixes), bounds);
        assert_eq!(
            grouped,
            [vec![(0, 0)], vec![(0, 1)], vec![(0, 2), (1, 0)]],
            "rows of several jobs share a pass"
        );
    }

    fn queue(max_requests: usize, max_tokens: usize) -> Arc<Queue> {
        Arc::new(Queue {
            limits: QueueLimits {
                max_requests,
                max_tokens,
            },
            depth: Mutex::new(QueueDepth::default()),
        })
    }

    #[test]
    fn the_queue_refuses_beyond_its_requests_and_gives_places_back() {
        let queue = queue(2, 0);
        let first = queue.reserve(10, true).unwrap();
        let second = queue.reserve(10, true).unwrap();
        assert!(queue.is_full());
        let refused = queue.reserve(10, true).unwrap_err();
        assert_eq!(
            refused.depth,
            QueueDepth {
                requests: 2,
                tokens: 20
            }
        );
        // The server's own reads are never refused; they count while they wait.
        let internal = queue.reserve(10, false).unwrap();
        assert_eq!(queue.depth().requests, 3);
        drop((first, internal));
        assert_eq!(
            queue.depth(),
            QueueDepth {
                requests: 1,
                tokens: 10
            }
        );
        assert!(!queue.is_full());
        let third = queue.reserve(10, true).unwrap();
        drop((second, third));
        assert_eq!(queue.depth(), QueueDepth::default());
    }

    #[test]
    fn the_queue_bounds_tokens_but_an_empty_queue_takes_any_job() {
        let queue = queue(0, 100);
        let big = queue
            .reserve(1_000, true)
            .expect("alone, a job of any size is read");
        assert!(queue.is_full());
        assert!(
            queue.reserve(1, true).is_err(),
            "nothing more fits beside it"
        );
        drop(big);
        let a = queue.reserve(60, true).unwrap();
        assert!(queue.reserve(41, true).is_err());
        let b = queue.reserve(40, true).unwrap();
        assert_eq!(
            queue.depth(),
            QueueDepth {
                requests: 2,
                tokens: 100
            }
        );
        drop((a, b));
        // Unbounded (0, 0): everything fits.
        let open = self::queue(0, 0);
        let held: Vec<Ticket> = (0..100)
            .map(|_| open.reserve(1 << 20, true).unwrap())
            .collect();
        assert!(!open.is_full());
        drop(held);
    }

    #[test]
    fn work_tokens_count_a_shared_input_once() {
        let shared: Vec<u32> = (0..100).collect();
        let ask = |own: u32| {
            let mut tokens = shared.clone();
            tokens.extend([1000 + own, 2000 + own]);
            prompt(&tokens)
        };
        assert_eq!(work_tokens(&[ask(0)]), 102);
        assert_eq!(work_tokens(&[ask(0), ask(1), ask(2)]), 100 + 3 * 2);
        assert_eq!(work_tokens(&[]), 0);
    }

    #[test]
    fn faults_parse_and_fire_on_every_nth_batch() {
        assert_eq!(
            Fault::parse("panic-every:3"),
            Ok(Fault {
                kind: FaultKind::Panic,
                every: 3
            })
        );
        assert_eq!(
            Fault::parse("error-every:1").unwrap().kind,
            FaultKind::Error
        );
        for bad in [
            "panic",
            "panic-every:0",
            "panic-every:x",
            "crash-every:2",
            "",
        ] {
            assert!(Fault::parse(bad).is_err(), "{bad}");
        }
        let faults = Faults {
            fault: Some(Fault::parse("error-every:3").unwrap()),
            batches: AtomicU64::new(0),
        };
        let fired: Vec<bool> = (0..7).map(|_| faults.next_batch().is_some()).collect();
        assert_eq!(fired, [false, false, true, false, false, true, false]);
        let none = Faults {
            fault: None,
            batches: AtomicU64::new(0),
        };
        assert!((0..5).all(|_| none.next_batch().is_none()));
    }
}
