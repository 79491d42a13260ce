//! Counters exported in Prometheus text format at `/metrics`.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::prefix_cache::CacheStats;
use decide_models::TokenCacheStats;

/// Process-wide counters. Atomics, not a metrics framework: a handful of numbers does not need one.
#[derive(Debug, Default)]
pub struct Metrics {
    requests: AtomicU64,
    rejected_requests: AtomicU64,
    answers: AtomicU64,
    refusals: AtomicU64,
    input_tokens: AtomicU64,
    forward_passes: AtomicU64,
    decide_micros: AtomicU64,
    /// Wall time the model worker spent reading batches (over the wall time of a run: how
    /// busy the model was; at saturation, below 1 means the host side kept it waiting).
    model_busy_micros: AtomicU64,
    batches: AtomicU64,
    batched_jobs: AtomicU64,
    /// The rejoin window (`--batch-rejoin-us`): answered batches whose clients were all back
    /// within it and those that were not (copied from the worker), and the time the worker
    /// waited for them.
    rejoin_back: AtomicU64,
    rejoin_late: AtomicU64,
    rejoin_wait_micros: AtomicU64,
    /// Batch requests (`/v1/systemone/batch`) and their items.
    item_batches: AtomicU64,
    batch_items: AtomicU64,
    /// The prefix cache's own counters, copied after every batch (the worker owns the cache).
    cache_hits: AtomicU64,
    cache_misses: AtomicU64,
    cache_hit_tokens: AtomicU64,
    cache_evictions: AtomicU64,
    cache_block_hits: AtomicU64,
    cache_block_misses: AtomicU64,
    cache_inserts: AtomicU64,
    cache_entries: AtomicU64,
    cache_blocks: AtomicU64,
    cache_bytes: AtomicU64,
    /// The model's token cache counters, copied after every request's prompts are prepared.
    token_cache_hits: AtomicU64,
    token_cache_misses: AtomicU64,
    token_cache_bytes: AtomicU64,
    /// Robustness (issue #16): jobs the model worker dropped unread because their request was
    /// cancelled, requests refused because the worker's queue was full, requests past their
    /// deadline, requests whose client left before the answer, failed model calls or
    /// batches, restarts of the worker loop, and every model call the worker made.
    cancelled_jobs: AtomicU64,
    shed_requests: AtomicU64,
    timed_out_requests: AtomicU64,
    disconnected_requests: AtomicU64,
    engine_failures: AtomicU64,
    worker_restarts: AtomicU64,
    model_calls: AtomicU64,
}

/// What a decided request adds to the counters, summed over its decided items (the pipeline
/// counts them, so that these counters need none of its types).
#[derive(Debug, Clone, Copy, Default)]
pub struct DecidedCounts {
    pub answers: u64,
    pub refusals: u64,
    pub input_tokens: u64,
    pub forward_passes: u64,
}

impl Metrics {
    /// Records a request that reached the pipeline and was decided: the outcomes, tokens and
    /// passes of its decided items (one for a single request, each answered item of a batch,
    /// summed by the pipeline), and its time.
    pub fn record_request(&self, decided: DecidedCounts, elapsed: Duration) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.answers.fetch_add(decided.answers, Ordering::Relaxed);
        self.refusals.fetch_add(decided.refusals, Ordering::Relaxed);
        self.input_tokens
            .fetch_add(decided.input_tokens, Ordering::Relaxed);
        self.forward_passes
            .fetch_add(decided.forward_passes, Ordering::Relaxed);
        self.decide_micros
            .fetch_add(elapsed.as_micros() as u64, Ordering::Relaxed);
    }

    /// Records a batch request (`/v1/systemone/batch`) and how many items it carried,
    /// answered or not.
    pub fn record_item_batch(&self, items: usize) {
        self.item_batches.fetch_add(1, Ordering::Relaxed);
        self.batch_items.fetch_add(items as u64, Ordering::Relaxed);
    }

    /// Records a batch of the model worker: how many jobs (requests) shared it, and the
    /// prefix cache's state after it.
    pub fn record_batch(&self, jobs: usize, cache: &CacheStats) {
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.batched_jobs.fetch_add(jobs as u64, Ordering::Relaxed);
        self.record_cache(cache);
    }

    /// Records what the prefix cache has done and holds.
    pub fn record_cache(&self, cache: &CacheStats) {
        for (counter, value) in [
            (&self.cache_hits, cache.hits),
            (&self.cache_misses, cache.misses),
            (&self.cache_hit_tokens, cache.hit_tokens),
            (&self.cache_evictions, cache.evictions),
            (&self.cache_block_hits, cache.block_hits),
            (&self.cache_block_misses, cache.block_misses),
            (&self.cache_inserts, cache.inserts),
            (&self.cache_entries, cache.entries as u64),
            (&self.cache_blocks, cache.blocks as u64),
            (&self.cache_bytes, cache.bytes as u64),
        ] {
            counter.store(value, Ordering::Relaxed);
        }
    }

    /// Records the rejoin window's rounds back and late so far, and a wait of `waited`.
    pub fn record_rejoin(&self, (back, late): (u64, u64), waited: Duration) {
        self.rejoin_back.store(back, Ordering::Relaxed);
        self.rejoin_late.store(late, Ordering::Relaxed);
        self.rejoin_wait_micros
            .fetch_add(waited.as_micros() as u64, Ordering::Relaxed);
    }

    /// Records the wall time of one batch read by the model worker (passes and prefills,
    /// with the sparse jobs read between them).
    pub fn record_model_busy(&self, elapsed: Duration) {
        self.model_busy_micros
            .fetch_add(elapsed.as_micros() as u64, Ordering::Relaxed);
    }

    /// The prefix cache as last recorded, for `/health` (the counters [`CacheStats`] has).
    pub fn prefix_cache_use(&self) -> CacheStats {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        CacheStats {
            hits: load(&self.cache_hits),
            misses: load(&self.cache_misses),
            hit_tokens: load(&self.cache_hit_tokens),
            block_hits: load(&self.cache_block_hits),
            block_misses: load(&self.cache_block_misses),
            inserts: load(&self.cache_inserts),
            evictions: load(&self.cache_evictions),
            entries: load(&self.cache_entries) as usize,
            blocks: load(&self.cache_blocks) as usize,
            bytes: load(&self.cache_bytes) as usize,
        }
    }

    /// Records the token cache's state (its counters are the model's own, so they are copied).
    pub fn record_token_cache(&self, stats: &TokenCacheStats) {
        for (counter, value) in [
            (&self.token_cache_hits, stats.hits),
            (&self.token_cache_misses, stats.misses),
            (&self.token_cache_bytes, stats.bytes as u64),
        ] {
            counter.store(value, Ordering::Relaxed);
        }
    }

    /// Records jobs the model worker dropped unread (or stopped before their next pass)
    /// because their request was cancelled.
    pub fn record_cancelled_jobs(&self, jobs: usize) {
        self.cancelled_jobs
            .fetch_add(jobs as u64, Ordering::Relaxed);
    }

    /// Records a request refused (503) because the model worker's queue was full.
    pub fn record_shed(&self) {
        self.shed_requests.fetch_add(1, Ordering::Relaxed);
    }

    /// Records a request answered 504: its deadline passed.
    pub fn record_timed_out(&self) {
        self.timed_out_requests.fetch_add(1, Ordering::Relaxed);
    }

    /// Records a request whose client closed the connection before its answer.
    pub fn record_disconnected(&self) {
        self.disconnected_requests.fetch_add(1, Ordering::Relaxed);
    }

    /// Records a model call that failed, or a batch whose pass panicked.
    pub fn record_engine_failure(&self) {
        self.engine_failures.fetch_add(1, Ordering::Relaxed);
    }

    /// Records a restart of the model worker's loop after a panic outside a pass.
    pub fn record_worker_restart(&self) {
        self.worker_restarts.fetch_add(1, Ordering::Relaxed);
    }

    /// Records one call into the model (a packed pass, a prefill chunk, a lone read).
    pub fn record_model_call(&self) {
        self.model_calls.fetch_add(1, Ordering::Relaxed);
    }

    /// Records a request refused before the pipeline (validation, not ready).
    pub fn record_rejected(&self) {
        self.rejected_requests.fetch_add(1, Ordering::Relaxed);
    }

    /// The Prometheus text exposition of all counters.
    pub fn render(&self) -> String {
        let counters = [
            (
                "decide_requests_total",
                "Decision requests answered by the pipeline.",
                &self.requests,
            ),
            (
                "decide_rejected_requests_total",
                "Decision requests refused before the pipeline.",
                &self.rejected_requests,
            ),
            ("decide_answers_total", "Questions answered.", &self.answers),
            (
                "decide_refusals_total",
                "Questions refused.",
                &self.refusals,
            ),
            (
                "decide_input_tokens_total",
                "Prompt tokens read by the model.",
                &self.input_tokens,
            ),
            (
                "decide_forward_passes_total",
                "Forward passes run.",
                &self.forward_passes,
            ),
            (
                "decide_batches_total",
                "Batches run by the model worker.",
                &self.batches,
            ),
            (
                "decide_batched_jobs_total",
                "Read jobs (requests, calibration runs) in those batches; over batches: jobs per batch.",
                &self.batched_jobs,
            ),
            (
                "decide_rejoin_rounds_back_total",
                "Answered batches whose clients' next requests all came within --batch-rejoin-us.",
                &self.rejoin_back,
            ),
            (
                "decide_rejoin_rounds_late_total",
                "Answered batches whose clients' next requests did not all come within --batch-rejoin-us.",
                &self.rejoin_late,
            ),
            (
                "decide_batch_requests_total",
                "Batch requests (/v1/systemone/batch) that reached the pipeline.",
                &self.item_batches,
            ),
            (
                "decide_batch_items_total",
                "Items in those batch requests, answered or failed.",
                &self.batch_items,
            ),
            (
                "decide_prefix_cache_hits_total",
                "Prefix cache lookups that found a stored prefix.",
                &self.cache_hits,
            ),
            (
                "decide_prefix_cache_misses_total",
                "Prefix cache lookups that found nothing.",
                &self.cache_misses,
            ),
            (
                "decide_prefix_cache_hit_tokens_total",
                "Prompt tokens served from the prefix cache.",
                &self.cache_hit_tokens,
            ),
            (
                "decide_prefix_cache_evictions_total",
                "Runs of blocks evicted to stay within --prefix-cache-mib.",
                &self.cache_evictions,
            ),
            (
                "decide_prefix_cache_block_hits_total",
                "Full blocks (16 tokens) of looked-up prompts found in the prefix cache.",
                &self.cache_block_hits,
            ),
            (
                "decide_prefix_cache_block_misses_total",
                "Full blocks (16 tokens) of looked-up prompts not found in the prefix cache.",
                &self.cache_block_misses,
            ),
            (
                "decide_prefix_cache_inserts_total",
                "Runs of new blocks stored in the prefix cache.",
                &self.cache_inserts,
            ),
            (
                "decide_token_cache_hits_total",
                "Long input text pieces whose token ids came from the token cache.",
                &self.token_cache_hits,
            ),
            (
                "decide_token_cache_misses_total",
                "Long input text pieces tokenized because the token cache did not hold them.",
                &self.token_cache_misses,
            ),
            (
                "decide_model_calls_total",
                "Calls into the model by the worker (a packed pass, a prefill chunk, a lone read), whoever they served.",
                &self.model_calls,
            ),
            (
                "decide_cancelled_jobs_total",
                "Read jobs the model worker dropped before (more of) their passes: the client went away or the deadline passed.",
                &self.cancelled_jobs,
            ),
            (
                "decide_shed_requests_total",
                "Requests refused with 503 because the model worker's queue was full (--max-queued-requests, --max-queued-tokens).",
                &self.shed_requests,
            ),
            (
                "decide_timed_out_requests_total",
                "Requests answered 504: their deadline passed (--request-timeout-ms or the request's timeout_ms).",
                &self.timed_out_requests,
            ),
            (
                "decide_disconnected_requests_total",
                "Requests whose client closed the connection before the answer; their work is cancelled.",
                &self.disconnected_requests,
            ),
            (
                "decide_engine_failures_total",
                "Model calls that failed and batches whose pass panicked; only their requests failed.",
                &self.engine_failures,
            ),
            (
                "decide_worker_restarts_total",
                "Restarts of the model worker after a panic outside a pass.",
                &self.worker_restarts,
            ),
        ];
        let mut text = String::new();
        for (name, help, value) in counters {
            let _ = writeln!(
                text,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                value.load(Ordering::Relaxed)
            );
        }
        for (name, help, value) in [
            (
                "decide_prefix_cache_entries",
                "Runs of blocks held in the prefix cache (nodes of its tree).",
                &self.cache_entries,
            ),
            (
                "decide_prefix_cache_blocks",
                "Blocks (16 tokens each) held in the prefix cache.",
                &self.cache_blocks,
            ),
            (
                "decide_prefix_cache_bytes",
                "KV bytes held by the prefix cache.",
                &self.cache_bytes,
            ),
            (
                "decide_token_cache_bytes",
                "Bytes held by the token cache (text, ids, overhead).",
                &self.token_cache_bytes,
            ),
        ] {
            let _ = writeln!(
                text,
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {}",
                value.load(Ordering::Relaxed)
            );
        }
        for (name, help, micros) in [
            (
                "decide_pipeline_seconds_total",
                "Time spent in the decision pipeline.",
                &self.decide_micros,
            ),
            (
                "decide_model_busy_seconds_total",
                "Time the model worker spent reading batches; its rate is the worker's utilization.",
                &self.model_busy_micros,
            ),
            (
                "decide_rejoin_wait_seconds_total",
                "Time the model worker waited for answered clients' next requests (--batch-rejoin-us).",
                &self.rejoin_wait_micros,
            ),
        ] {
            let seconds = micros.load(Ordering::Relaxed) as f64 / 1e6;
            let _ = writeln!(
                text,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {seconds}"
            );
        }
        if let Some(seconds) = process_cpu_seconds() {
            let name = "process_cpu_seconds_total";
            let _ = writeln!(
                text,
                "# HELP {name} User and system CPU time of the whole server process (all threads), in seconds; its rate over the host's cores says whether the host side can keep the model fed.\n# TYPE {name} counter\n{name} {seconds}"
            );
        }
        text
    }
}

/// The process's user + system CPU time (Prometheus' standard `process_cpu_seconds_total`),
/// from `getrusage`.
fn process_cpu_seconds() -> Option<f64> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: getrusage writes a `rusage` on success and nothing else.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: written by the successful call.
    let usage = unsafe { usage.assume_init() };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Some(seconds(usage.ru_utime) + seconds(usage.ru_stime))
}
