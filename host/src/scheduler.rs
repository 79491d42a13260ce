//! The model worker: one thread runs every forward pass, and the questions of requests that
//! arrive together share those passes.
//!
//! A request hands its rendered prompts over as one job and blocks until they are read.
//! The worker takes every job waiting when it becomes free (and, with `--batch-wait-us`, those
//! arriving shortly after the first), then for the whole batch:
//!
//! 1. per job, finds the longest cached prefix of its prompts in the [`PrefixCache`] (per
//!    tenant), prefills what the job's prompts share beyond it once, and stores the result
//!    at a block boundary for later requests;
//! 2. reads every prompt's remaining tokens in packed passes of at most
//!    [`MAX_PASS_TOKENS`] rows, segments of different jobs side by side, each attending only
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

use std::panic::AssertUnwindSafe;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use decide_models::{KvCache, Model, ModelError, Readout, Segment, PREFILL_SCORE_BUDGET};

use crate::metrics::Metrics;
use crate::prefix_cache::{PrefixCache, BLOCK_TOKENS};

mod fair;
use fair::{FairQueue, Mode};

/// Most rows (tokens) in one packed pass. Bounds activations and attention scores of a pass;
/// more is read in several passes.
pub const MAX_PASS_TOKENS: usize = 2048;

/// [`MAX_PASS_TOKENS`] for a model on decide's fused CUDA kernels, which materialise no
/// attention scores: every pass costs ~250 kernel launches whatever its size, so 64 questions
/// over one input (~3k rows) read in one pass instead of two.
pub const MAX_FUSED_PASS_TOKENS: usize = 4096;

/// A lone prompt is read in a pass of its own, which also yields its KV for the prefix
/// cache, only when at least this many of its tokens are not cached yet; shorter ones join
/// the packed passes with other requests (more throughput, nothing stored).
pub const STORE_MIN_TOKENS: usize = 512;

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
}

/// How the worker batches and caches.
#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// KV bytes the prefix cache may hold (0: no cross-request cache).
    pub prefix_cache_bytes: usize,
    /// How long the worker waits for more jobs after the first of a batch. 0: it takes what
    /// is waiting and starts at once (jobs that arrive during a pass join the next one).
    pub batch_wait: Duration,
    /// Stop adding jobs to a batch once their prompt tokens reach this.
    pub max_batch_tokens: usize,
    /// Fair share: a backlogged flow's prompt tokens per round (times its weight).
    pub fair_share_tokens: usize,
    /// Fair share: most rows of one pass (and of one prefill chunk) while several flows
    /// are active, which bounds how long a sparse flow's job waits for the pass in flight.
    pub fair_share_pass_tokens: usize,
}

struct Job {
    prompts: Vec<Prompt>,
    salt: u64,
    flow: Flow,
    reply: Sender<JobResult>,
}

impl Job {
    fn tokens(&self) -> usize {
        self.prompts.iter().map(|p| p.tokens.len()).sum()
    }
}

/// The handle requests use; the worker thread stops when it is dropped.
pub struct Scheduler {
    jobs: Sender<Job>,
}

impl Scheduler {
    /// Starts the worker thread for `model`.
    pub fn start(model: Arc<Model>, config: SchedulerConfig, metrics: Arc<Metrics>) -> Self {
        let (jobs, queue) = mpsc::channel();
        std::thread::Builder::new()
            .name("decide-model".into())
            .spawn(move || work(&model, &config, &metrics, queue))
            .expect("spawning the model worker thread");
        Scheduler { jobs }
    }

    /// Reads `prompts` (blocking), sharing passes with concurrent requests and the prefix
    /// cache with earlier requests of the same tenant (`salt`).
    pub fn read(&self, prompts: Vec<Prompt>, salt: u64) -> JobResult {
        self.read_in(prompts, salt, Flow::default())
    }

    /// [`Scheduler::read`] under a fair-share flow (a tenant's).
    pub fn read_in(&self, prompts: Vec<Prompt>, salt: u64, flow: Flow) -> JobResult {
        let count = prompts.len();
        let (reply, result) = mpsc::channel();
        let sent = self.jobs.send(Job {
            prompts,
            salt,
            flow,
            reply,
        });
        match sent.ok().and_then(|()| result.recv().ok()) {
            Some(result) => result,
            None => failed(count, "the model worker stopped"),
        }
    }
}

fn failed(count: usize, reason: &str) -> JobResult {
    JobResult {
        reads: (0..count)
            .map(|_| Err(ModelError::Compute(reason.to_string())))
            .collect(),
        forward_passes: 0,
    }
}

/// The worker loop: gather the waiting jobs, read the batch fair share picks, reply; until
/// every handle is gone.
fn work(model: &Model, config: &SchedulerConfig, metrics: &Metrics, queue: Receiver<Job>) {
    let mut cache = PrefixCache::new(config.prefix_cache_bytes);
    let mut fair = FairQueue::new(config.fair_share_tokens);
    loop {
        if fair.is_empty() {
            match queue.recv() {
                Ok(job) => fair.push(job, Instant::now()),
                Err(_) => return,
            }
        }
        gather(&queue, &mut fair, config);
        let (batch, mode) = fair.next_batch(config.max_batch_tokens, Instant::now());
        if batch.is_empty() {
            continue;
        }
        let rows = match mode {
            Mode::Alone | Mode::Sparse => usize::MAX,
            Mode::Shared => config.fair_share_pass_tokens.max(1),
        };
        // Between two passes: sparse jobs that arrived meanwhile are read at once, also
        // when the batch began with one flow alone and another one just showed up.
        let mut between = |cache: &mut PrefixCache| {
            drain(&queue, &mut fair);
            let now = fair.mode(Instant::now());
            if now == Mode::Shared {
                let sparse = fair.take_sparse(config.max_batch_tokens);
                if !sparse.is_empty() {
                    // Read as it would be alone: nothing preempts it anyway.
                    serve(
                        model,
                        cache,
                        metrics,
                        &mut fair,
                        sparse,
                        usize::MAX,
                        &mut |_| None,
                    );
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
        let results = read_guarded(model, &mut cache, &batch, rows, &mut between);
        tracing::debug!(
            jobs = batch.len(),
            tokens = batch.iter().map(Job::tokens).sum::<usize>(),
            ?mode,
            ms = started.elapsed().as_secs_f64() * 1e3,
            "batch read"
        );
        metrics.record_batch(batch.len(), &cache.stats());
        reply(batch, results);
        for flow in flows {
            fair.done(flow);
        }
    }
}

/// Moves every job waiting in the channel into the fair queue.
fn drain(queue: &Receiver<Job>, fair: &mut FairQueue) {
    loop {
        match queue.try_recv() {
            Ok(job) => fair.push(job, Instant::now()),
            Err(TryRecvError::Empty | TryRecvError::Disconnected) => return,
        }
    }
}

/// Takes what is waiting, and with `--batch-wait-us` what arrives shortly after, until the
/// waiting prompt tokens reach `--max-batch-tokens`.
fn gather(queue: &Receiver<Job>, fair: &mut FairQueue, config: &SchedulerConfig) {
    drain(queue, fair);
    let deadline = Instant::now() + config.batch_wait;
    while fair.waiting_tokens() < config.max_batch_tokens {
        match queue.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(job) => {
                fair.push(job, Instant::now());
                drain(queue, fair);
            }
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
        }
    }
}

/// Reads a batch that needs no fair-share decisions of its own (sparse jobs between two
/// passes) and replies.
fn serve(
    model: &Model,
    cache: &mut PrefixCache,
    metrics: &Metrics,
    fair: &mut FairQueue,
    batch: Vec<Job>,
    rows: usize,
    between: &mut dyn FnMut(&mut PrefixCache) -> Option<usize>,
) {
    let started = Instant::now();
    let results = read_guarded(model, cache, &batch, rows, between);
    tracing::debug!(
        jobs = batch.len(),
        ms = started.elapsed().as_secs_f64() * 1e3,
        "sparse jobs read between two passes"
    );
    metrics.record_batch(batch.len(), &cache.stats());
    for job in &batch {
        fair.done(job.flow);
    }
    reply(batch, results);
}

fn reply(batch: Vec<Job>, results: Vec<JobResult>) {
    for (job, result) in batch.into_iter().zip(results) {
        // A requester that went away (client disconnected) no longer listens.
        let _ = job.reply.send(result);
    }
}

/// [`read_batch`], failing the batch's jobs (not the worker) when a pass panics.
fn read_guarded(
    model: &Model,
    cache: &mut PrefixCache,
    batch: &[Job],
    rows: usize,
    between: &mut dyn FnMut(&mut PrefixCache) -> Option<usize>,
) -> Vec<JobResult> {
    std::panic::catch_unwind(AssertUnwindSafe(|| {
        read_batch(model, cache, batch, rows, between)
    }))
    .unwrap_or_else(|panic| {
        let reason = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("unknown panic");
        tracing::error!(reason, "a forward pass panicked; its batch fails");
        batch
            .iter()
            .map(|job| {
                failed(
                    job.prompts.len(),
                    &format!("the forward pass failed: {reason}"),
                )
            })
            .collect()
    })
}

/// The prefix a job's prompts continue: the KV of their first `len` tokens.
struct JobPrefix {
    cache: Option<KvCache>,
    /// Tokens of each prompt covered by `cache`.
    len: usize,
    /// Of those, tokens that came from the cross-request prefix cache.
    hit: usize,
}

/// Reads a batch of jobs: their prefixes first, then every prompt's own tokens in shared
/// packed passes of at most `rows` rows (prefills in chunks of `rows`); `between` runs
/// before every model call after the first.
fn read_batch(
    model: &Model,
    cache: &mut PrefixCache,
    batch: &[Job],
    rows: usize,
    between: &mut dyn FnMut(&mut PrefixCache) -> Option<usize>,
) -> Vec<JobResult> {
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
        })
        .collect();
    // Every job's prefix (None: nothing left to pack, because its prompt was read already or
    // its prefix failed); a long lone prompt is read (and its prefix stored) right here.
    let mut prefixes: Vec<Option<JobPrefix>> = Vec::with_capacity(batch.len());
    let mut reads: Vec<Vec<Option<PromptRead>>> = batch
        .iter()
        .map(|job| (0..job.prompts.len()).map(|_| None).collect())
        .collect();
    for (j, (job, result)) in batch.iter().zip(&mut results).enumerate() {
        let prefix = match job_prefix(model, cache, job, result, rows, &mut step) {
            Ok(Prefixed::Prefix(prefix)) => Some(prefix),
            Ok(Prefixed::Read(read, cached)) => {
                reads[j][0] = Some(Ok((read, cached)));
                None
            }
            Err(error) => {
                for slot in &mut reads[j] {
                    *slot = Some(Err(ModelError::Compute(error.to_string())));
                }
                None
            }
        };
        prefixes.push(prefix);
    }

    // Every prompt of every job whose prefix is ready, as (job, prompt) in order.
    let items: Vec<(usize, usize)> = batch
        .iter()
        .zip(&prefixes)
        .enumerate()
        .filter(|(_, (_, prefix))| prefix.is_some())
        .flat_map(|(j, (job, _))| (0..job.prompts.len()).map(move |p| (j, p)))
        .collect();
    let bounds = PassBounds::of(model);
    // Passes are grouped one at a time, so a cap set by `between` applies to the next one.
    let mut rest: &[(usize, usize)] = &items;
    while !rest.is_empty() {
        let cap = step(cache);
        let bounds = PassBounds {
            rows: bounds.rows.min(cap),
            ..bounds
        };
        let pass = passes(rest, batch, &prefixes, bounds)
            .into_iter()
            .next()
            .expect("items left make a pass");
        rest = &rest[pass.len()..];
        let segments: Vec<Segment<'_>> = pass
            .iter()
            .map(|&(j, p)| {
                let prefix = prefixes[j].as_ref().expect("only jobs with a prefix");
                Segment {
                    prefix: prefix.cache.as_ref(),
                    tokens: &batch[j].prompts[p].tokens[prefix.len..],
                }
            })
            .collect();
        let labels: Vec<&[u32]> = pass
            .iter()
            .map(|&(j, p)| batch[j].prompts[p].label_ids.as_slice())
            .collect();
        let outcome = model.read_packed(&segments, &labels);
        let mut joined: Vec<usize> = pass.iter().map(|&(j, _)| j).collect();
        joined.dedup();
        for j in joined {
            results[j].forward_passes += 1;
        }
        match outcome {
            Ok(pass_reads) => {
                for (&(j, p), read) in pass.iter().zip(pass_reads) {
                    let prefix = prefixes[j].as_ref().expect("only jobs with a prefix");
                    // The first prompt paid for the job's shared prefix; the others reused it.
                    let cached = if p == 0 { prefix.hit } else { prefix.len };
                    reads[j][p] = Some(Ok((read, cached)));
                }
            }
            Err(error) => {
                for &(j, p) in &pass {
                    reads[j][p] = Some(Err(ModelError::Compute(error.to_string())));
                }
            }
        }
    }
    for (result, reads) in results.iter_mut().zip(reads) {
        result.reads = reads
            .into_iter()
            .map(|read| read.expect("every prompt was read or failed"))
            .collect();
    }
    results
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
    model: &Model,
    cache: &mut PrefixCache,
    job: &Job,
    result: &mut JobResult,
    rows: usize,
    step: &mut dyn FnMut(&mut PrefixCache) -> usize,
) -> Result<Prefixed, ModelError> {
    let shared = shared_prefix_len(&job.prompts);
    let tokens = &job.prompts[0].tokens;
    let found = cache.lookup(job.salt, &tokens[..shared]);
    let hit = found.as_ref().map_or(0, KvCache::len);
    if job.prompts.len() == 1 {
        // A lone prompt with a long uncached stretch: read it in a pass of its own that also
        // returns its KV, and keep its prefix (to a block boundary) for the next request. A
        // short one joins the packed passes; storing it would not pay. With passes bounded
        // (several flows active) a long one is prefilled in chunks below instead.
        if shared - hit < STORE_MIN_TOKENS {
            return Ok(Prefixed::Prefix(JobPrefix {
                cache: found,
                len: hit,
                hit,
            }));
        }
        if rows < shared - hit {
            return chunked_prefix(model, cache, job, result, found, hit, shared, rows, step);
        }
        step(cache);
        let prompt = &job.prompts[0];
        let (read, filled, passes) =
            model.read_and_cache(&tokens[hit..], found.as_ref(), &prompt.label_ids)?;
        result.forward_passes += passes;
        let store = shared / BLOCK_TOKENS * BLOCK_TOKENS;
        if store > hit {
            cache.insert(job.salt, &tokens[..store], filled.prefix(store)?);
        }
        return Ok(Prefixed::Read(read, hit));
    }
    // Several prompts: everything they share is prefilled once.
    if shared <= hit {
        return Ok(Prefixed::Prefix(JobPrefix {
            cache: found,
            len: hit,
            hit,
        }));
    }
    chunked_prefix(model, cache, job, result, found, hit, shared, rows, step)
}

/// Prefills a job's tokens `hit..shared` over `found` in chunks of at most `rows` (one
/// model call each, [`read_batch`]'s `between` before each), and stores the prefix.
#[allow(clippy::too_many_arguments)]
fn chunked_prefix(
    model: &Model,
    cache: &mut PrefixCache,
    job: &Job,
    result: &mut JobResult,
    found: Option<KvCache>,
    hit: usize,
    shared: usize,
    rows: usize,
    step: &mut dyn FnMut(&mut PrefixCache) -> usize,
) -> Result<Prefixed, ModelError> {
    let tokens = &job.prompts[0].tokens;
    result.forward_passes += 1;
    let mut filled = found;
    let mut at = hit;
    while at < shared {
        let cap = step(cache).min(rows);
        let end = shared.min(at.saturating_add(cap.max(1)));
        filled = Some(model.prefill(&tokens[at..end], filled.as_ref())?);
        at = end;
    }
    let filled = filled.expect("at least one chunk: shared > hit");
    let store = shared / BLOCK_TOKENS * BLOCK_TOKENS;
    if store > hit {
        cache.insert(job.salt, &tokens[..store], filled.prefix(store)?);
    }
    Ok(Prefixed::Prefix(JobPrefix {
        cache: Some(filled),
        len: shared,
        hit,
    }))
}

/// Groups `items` into passes of at most `max_rows` rows whose attention scores (rows x key
/// columns x `heads`) stay within the prefill budget (`heads` 0: no score limit); a single
/// larger item gets a pass of its own.
fn passes(
    items: &[(usize, usize)],
    batch: &[Job],
    prefixes: &[Option<JobPrefix>],
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
        let prefix = prefixes[j].as_ref().expect("only jobs with a prefix");
        let own = batch[j].prompts[p].tokens.len() - prefix.len;
        // A job's prefix adds key columns once per pass, with its first prompt there.
        let adds_prefix = |current: &[(usize, usize)]| {
            if current.last().is_none_or(|&(last, _)| last != j) {
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
    fn of(model: &Model) -> PassBounds {
        let transformer = model.transformer();
        if transformer.is_fused() {
            PassBounds {
                rows: MAX_FUSED_PASS_TOKENS,
                heads: 0,
                key_columns: usize::MAX,
            }
        } else {
            let dims = transformer.dims();
            PassBounds {
                rows: MAX_PASS_TOKENS,
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
    let Some(first) = prompts.first() else {
        return 0;
    };
    let mut len = prompts
        .iter()
        .map(|p| p.tokens.len())
        .min()
        .unwrap_or(0)
        .saturating_sub(1);
    for prompt in &prompts[1..] {
        len = first.tokens[..len]
            .iter()
            .zip(&prompt.tokens)
            .take_while(|(a, b)| a == b)
            .count();
    }
    len
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let (reply, _) = mpsc::channel();
        let job = || Job {
            prompts: vec![prompt(&vec![1; 160])],
            salt: 0,
            flow: Flow::default(),
            reply: reply.clone(),
        };
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
        let bounds = PassBounds {
            rows: MAX_PASS_TOKENS,
            heads: 4,
            key_columns: 500,
        };
        let grouped = passes(&items, &batch, &prefixes, bounds);
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
        let one = [Job {
            prompts: (0..10).map(|_| prompt(&vec![1; 160])).collect(),
            salt: 0,
            flow: Flow::default(),
            reply: reply.clone(),
        }];
        let items: Vec<(usize, usize)> = (0..10).map(|p| (0, p)).collect();
        assert_eq!(passes(&items, &one, &prefixes[..1], bounds).len(), 1);
    }

    #[test]
    fn passes_are_bounded_by_rows_and_a_longer_prompt_runs_alone() {
        let (reply, _) = mpsc::channel();
        let job = |lengths: &[usize]| Job {
            prompts: lengths.iter().map(|&n| prompt(&vec![1; n])).collect(),
            salt: 0,
            flow: Flow::default(),
            reply: reply.clone(),
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
        let grouped = passes(&items, &batch, &prefixes, bounds);
        assert_eq!(
            grouped,
            [vec![(0, 0)], vec![(0, 1)], vec![(0, 2), (1, 0)]],
            "rows of several jobs share a pass"
        );
    }
}
