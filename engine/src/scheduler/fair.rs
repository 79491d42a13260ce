//! Fair share of the model worker between flows (tenants): which waiting jobs the next
//! batch takes.
//!
//! This module owns the waiting jobs, one queue per flow, and the order they are served in.
//! Three rules, checked in this order for every batch:
//!
//! 1. **One flow recently**: while at most one flow has sent jobs within [`RECENT`] (and no
//!    other has jobs waiting), a batch takes jobs in arrival order until their prompt tokens
//!    reach `--max-batch-tokens`, exactly as before fair share: nothing to share, and big
//!    batches keep a GPU busy.
//! 2. **Sparse jobs first**: a job whose flow had nothing waiting or running when it arrived
//!    (a client that sends one request at a time), and that fits in its flow's quantum, goes
//!    ahead of backlogged flows, and the worker even serves it between two passes of the
//!    batch in flight ([`FairQueue::take_sparse`]). This is FQ-CoDel's new-flow rule: a flow
//!    with one request outstanding cannot flood, and its latency stays near its latency
//!    alone; a flow with many requests outstanding is backlogged and shares by rule 3.
//! 3. **Deficit round robin** between backlogged flows, cost = a job's prompt tokens,
//!    quantum = `--fair-share-tokens` x the flow's weight: one flow per batch, so the batch
//!    in flight is at most about one quantum, and flows get tokens in proportion to weight.
//!
//! The server's own background reads (startup tuning and calibration, [`Flow::BACKGROUND`])
//! come last: their jobs are taken only when no request's job waits, and their batches are
//! read in small passes (as in shared mode), so that a request arriving meanwhile waits for
//! at most one small pass, then is read between two of the background batch's passes.
//!
//! While several flows are active the worker also keeps each pass small
//! (`--fair-share-pass-tokens` rows, see the scheduler) so that a sparse job waits at most
//! one small pass.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use super::{Flow, Job};

/// How long a flow counts as active after its last job arrived or was answered: longer than
/// a client's gap between two requests, so a sequential client keeps the worker in shared
/// mode.
pub const RECENT: Duration = Duration::from_secs(1);

/// One backlogged flow.
struct FlowQueue {
    weight: u32,
    jobs: VecDeque<Job>,
    /// Tokens the flow may still take this round (may go negative: a job is taken while the
    /// deficit is positive, whatever its size, so any job is served within a few rounds).
    deficit: i64,
}

/// What a batch is, for the worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Only one flow is active: big batches and passes as without fair share.
    Alone,
    /// Several flows are active: small passes, sparse jobs between them.
    Shared,
    /// Several flows are active and the batch is sparse jobs (at most a quantum each): read
    /// in passes as large as alone, so a sparse job costs what it costs alone.
    Sparse,
}

/// Waiting jobs and the fair-share state.
pub struct FairQueue {
    quantum: usize,
    /// Sparse jobs (rule 2), in arrival order.
    sparse: VecDeque<Job>,
    /// Backlogged flows' jobs.
    flows: HashMap<u64, FlowQueue>,
    /// Backlogged flows in round-robin order (the head is served next).
    order: VecDeque<u64>,
    /// The server's background jobs ([`Flow::BACKGROUND`]), in arrival order.
    background: VecDeque<Job>,
    /// Jobs of each flow waiting or being read.
    outstanding: HashMap<u64, usize>,
    /// When each flow's last job arrived.
    seen: HashMap<u64, Instant>,
}

impl FairQueue {
    /// `quantum`: `--fair-share-tokens` (at least 1).
    pub fn new(quantum: usize) -> FairQueue {
        FairQueue {
            quantum: quantum.max(1),
            sparse: VecDeque::new(),
            flows: HashMap::new(),
            order: VecDeque::new(),
            background: VecDeque::new(),
            outstanding: HashMap::new(),
            seen: HashMap::new(),
        }
    }

    fn quantum_of(&self, flow: Flow) -> usize {
        self.quantum.saturating_mul(flow.weight.max(1) as usize)
    }

    /// Whether no job waits.
    pub fn is_empty(&self) -> bool {
        self.sparse.is_empty() && self.order.is_empty() && self.background.is_empty()
    }

    /// Prompt tokens waiting.
    pub fn waiting_tokens(&self) -> usize {
        self.sparse
            .iter()
            .chain(self.flows.values().flat_map(|f| f.jobs.iter()))
            .chain(self.background.iter())
            .map(Job::tokens)
            .sum()
    }

    /// A job arrived at `now`.
    pub fn push(&mut self, job: Job, now: Instant) {
        let flow = job.flow;
        self.seen.insert(flow.id, now);
        if flow == Flow::BACKGROUND {
            *self.outstanding.entry(flow.id).or_insert(0) += 1;
            self.background.push_back(job);
            return;
        }
        let quantum = self.quantum_of(flow);
        let outstanding = self.outstanding.entry(flow.id).or_insert(0);
        let sparse = *outstanding == 0 && job.tokens() <= quantum;
        *outstanding += 1;
        if sparse {
            self.sparse.push_back(job);
            return;
        }
        let queue = self.flows.entry(flow.id).or_insert_with(|| FlowQueue {
            weight: flow.weight.max(1),
            jobs: VecDeque::new(),
            deficit: 0,
        });
        if queue.jobs.is_empty() {
            self.order.push_back(flow.id);
        }
        queue.jobs.push_back(job);
    }

    /// A job of `flow` was answered (at `now`: the flow was active until then).
    pub fn done(&mut self, flow: Flow) {
        self.seen.insert(flow.id, Instant::now());
        if let Some(count) = self.outstanding.get_mut(&flow.id) {
            *count -= 1;
            if *count == 0 {
                self.outstanding.remove(&flow.id);
            }
        }
    }

    /// Whether several flows are active at `now` (recently seen, or with jobs waiting).
    pub fn mode(&mut self, now: Instant) -> Mode {
        self.seen
            .retain(|_, at| now.saturating_duration_since(*at) < RECENT);
        let mut active = self.seen.len();
        for id in self
            .order
            .iter()
            .chain(self.sparse.iter().map(|j| &j.flow.id))
        {
            if !self.seen.contains_key(id) {
                active += 1;
            }
        }
        if active > 1 {
            Mode::Shared
        } else {
            Mode::Alone
        }
    }

    /// Takes every waiting job whose request was cancelled by `now` out of the queue: it is
    /// answered as cancelled instead of read. Its flow counts it as done, and a flow left
    /// with nothing waiting leaves the round.
    pub fn remove_cancelled(&mut self, now: Instant) -> Vec<Job> {
        let mut gone = Vec::new();
        take_cancelled(&mut self.sparse, now, &mut gone);
        take_cancelled(&mut self.background, now, &mut gone);
        let mut emptied = Vec::new();
        for (&id, queue) in &mut self.flows {
            take_cancelled(&mut queue.jobs, now, &mut gone);
            if queue.jobs.is_empty() {
                emptied.push(id);
            }
        }
        for id in emptied {
            self.flows.remove(&id);
            self.order.retain(|&other| other != id);
        }
        for job in &gone {
            self.done(job.flow);
        }
        gone
    }

    /// The sparse jobs waiting, up to `max_tokens` (at least one when any waits).
    pub fn take_sparse(&mut self, max_tokens: usize) -> Vec<Job> {
        take_up_to(&mut self.sparse, max_tokens)
    }

    /// The next batch at `now`, at most about `max_tokens` prompt tokens, and its mode.
    pub fn next_batch(&mut self, max_tokens: usize, now: Instant) -> (Vec<Job>, Mode) {
        let mode = self.mode(now);
        if self.sparse.is_empty() && self.order.is_empty() {
            // Only background work waits: small passes, so a request that arrives is read
            // after one of them.
            return (take_up_to(&mut self.background, max_tokens), Mode::Shared);
        }
        if mode == Mode::Alone {
            return (self.take_in_order(max_tokens), mode);
        }
        if !self.sparse.is_empty() {
            return (self.take_sparse(max_tokens), Mode::Sparse);
        }
        (self.take_round_robin(max_tokens), mode)
    }

    /// Rule 1: every waiting job in arrival order (one flow: its sparse job is its oldest).
    fn take_in_order(&mut self, max_tokens: usize) -> Vec<Job> {
        let mut batch = self.take_sparse(max_tokens);
        let mut tokens: usize = batch.iter().map(Job::tokens).sum();
        while tokens < max_tokens {
            let Some(&id) = self.order.front() else {
                break;
            };
            let queue = self.flows.get_mut(&id).expect("ordered flows are queued");
            while tokens < max_tokens {
                let Some(job) = queue.jobs.pop_front() else {
                    break;
                };
                tokens += job.tokens();
                batch.push(job);
            }
            if queue.jobs.is_empty() {
                self.flows.remove(&id);
                self.order.pop_front();
            }
        }
        batch
    }

    /// Rule 3: the head flow's jobs while its deficit lasts.
    fn take_round_robin(&mut self, max_tokens: usize) -> Vec<Job> {
        loop {
            let Some(&id) = self.order.front() else {
                return Vec::new();
            };
            let quantum = self.quantum;
            let queue = self.flows.get_mut(&id).expect("ordered flows are queued");
            if queue.deficit <= 0 {
                // A new round for this flow: its quantum, then its turn comes again.
                queue.deficit += (quantum as i64).saturating_mul(i64::from(queue.weight));
                self.order.rotate_left(1);
                continue;
            }
            let mut batch = Vec::new();
            let mut tokens = 0;
            while queue.deficit > 0 && tokens < max_tokens {
                let Some(job) = queue.jobs.pop_front() else {
                    break;
                };
                queue.deficit -= job.tokens() as i64;
                tokens += job.tokens();
                batch.push(job);
            }
            if queue.jobs.is_empty() {
                // An emptied flow leaves the round and starts afresh when it is backlogged again.
                self.flows.remove(&id);
                self.order.pop_front();
            } else if queue.deficit <= 0 {
                self.order.rotate_left(1);
            }
            return batch;
        }
    }
}

/// The jobs at the front of `jobs` until their prompt tokens reach `max_tokens` (at least
/// one when any waits).
fn take_up_to(jobs: &mut VecDeque<Job>, max_tokens: usize) -> Vec<Job> {
    let mut batch = Vec::new();
    let mut tokens = 0;
    while tokens < max_tokens {
        let Some(job) = jobs.pop_front() else {
            break;
        };
        tokens += job.tokens();
        batch.push(job);
    }
    batch
}

/// Moves the jobs of `jobs` cancelled by `now` into `into`, keeping the others in order.
fn take_cancelled(jobs: &mut VecDeque<Job>, now: Instant, into: &mut Vec<Job>) {
    if !jobs.iter().any(|job| job.cancel.is_cancelled_at(now)) {
        return;
    }
    for job in std::mem::take(jobs) {
        if job.cancel.is_cancelled_at(now) {
            into.push(job);
        } else {
            jobs.push_back(job);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cancel::Cancel;
    use crate::scheduler::Prompt;

    fn prompts(tokens: usize) -> Vec<Prompt> {
        vec![Prompt {
            tokens: vec![1; tokens],
            label_ids: vec![],
        }]
    }

    fn job(flow: u64, weight: u32, tokens: usize) -> Job {
        Job::for_test(prompts(tokens), Flow { id: flow, weight })
    }

    fn flows_of(batch: &[Job]) -> Vec<u64> {
        batch.iter().map(|j| j.flow.id).collect()
    }

    #[test]
    fn background_jobs_wait_for_every_request_and_read_in_small_passes() {
        let mut fair = FairQueue::new(100);
        let now = Instant::now();
        let background = Flow::BACKGROUND;
        fair.push(Job::for_test(prompts(50), background), now);
        fair.push(Job::for_test(prompts(50), background), now);
        fair.push(job(1, 1, 30), now);
        fair.push(job(1, 1, 30), now);
        // The request's jobs first, though the background ones came earlier.
        let mut taken = Vec::new();
        while taken.len() < 2 {
            let (batch, _) = fair.next_batch(1000, now);
            assert_eq!(flows_of(&batch).iter().filter(|&&f| f != 1).count(), 0);
            for job in &batch {
                fair.done(job.flow);
            }
            taken.extend(flows_of(&batch));
        }
        let (batch, mode) = fair.next_batch(1000, now);
        assert_eq!(flows_of(&batch), vec![u64::MAX, u64::MAX]);
        assert_eq!(
            mode,
            Mode::Shared,
            "background batches read in small passes"
        );
        // A request arriving during a background batch makes the worker share: it is taken
        // between two of the batch's passes.
        fair.push(job(2, 1, 30), now);
        assert_eq!(fair.mode(now), Mode::Shared);
        assert_eq!(flows_of(&fair.take_sparse(1000)), vec![2]);
        assert!(fair.is_empty());
    }

    #[test]
    fn a_single_flow_is_batched_in_order_up_to_the_batch_tokens() {
        let mut fair = FairQueue::new(100);
        let now = Instant::now();
        for _ in 0..10 {
            fair.push(job(7, 1, 300), now);
        }
        let (batch, mode) = fair.next_batch(1000, now);
        assert_eq!(mode, Mode::Alone);
        // As before fair share: jobs are added until their tokens reach the limit.
        assert_eq!(batch.len(), 4);
        let (rest, _) = fair.next_batch(10_000, now);
        assert_eq!(rest.len(), 6);
        assert!(fair.is_empty());
    }

    #[test]
    fn backlogged_flows_share_tokens_by_weight() {
        let mut fair = FairQueue::new(100);
        let now = Instant::now();
        for _ in 0..200 {
            fair.push(job(1, 1, 50), now);
            fair.push(job(2, 3, 50), now);
        }
        // Each flow's first job was sparse: they go first, together.
        let (sparse, _) = fair.next_batch(10_000, now);
        assert_eq!(flows_of(&sparse), [1, 2]);
        let mut served = HashMap::<u64, usize>::new();
        for _ in 0..40 {
            let (batch, mode) = fair.next_batch(10_000, now);
            assert_eq!(mode, Mode::Shared);
            let ids = flows_of(&batch);
            assert!(ids.windows(2).all(|w| w[0] == w[1]), "one flow per batch");
            for job in &batch {
                *served.entry(job.flow.id).or_default() += job.tokens();
                fair.done(job.flow);
            }
        }
        let ratio = served[&2] as f64 / served[&1] as f64;
        assert!(
            (2.5..=3.5).contains(&ratio),
            "weights 3:1 served {served:?}"
        );
    }

    #[test]
    fn a_flow_of_large_jobs_is_not_starved() {
        let mut fair = FairQueue::new(64);
        let now = Instant::now();
        for _ in 0..100 {
            fair.push(job(1, 1, 10), now);
        }
        fair.push(job(2, 1, 1000), now);
        let mut batches = 0;
        loop {
            let (batch, _) = fair.next_batch(10_000, now);
            batches += 1;
            if flows_of(&batch).contains(&2) {
                break;
            }
            assert!(batches < 10, "the large job waits for ever");
        }
    }

    #[test]
    fn a_sparse_job_goes_ahead_of_a_backlog() {
        let mut fair = FairQueue::new(500);
        let now = Instant::now();
        for _ in 0..50 {
            fair.push(job(1, 1, 100), now);
        }
        let (first, mode) = fair.next_batch(100, now);
        assert_eq!(mode, Mode::Alone);
        assert_eq!(flows_of(&first), [1]);
        fair.done(first[0].flow);
        fair.push(job(2, 1, 100), now);
        let (batch, mode) = fair.next_batch(10_000, now);
        assert_eq!(mode, Mode::Sparse);
        assert_eq!(flows_of(&batch), [2]);
        fair.done(batch[0].flow);
        // While its job is outstanding a second one is not sparse: it waits its turn.
        fair.push(job(2, 1, 100), now);
        fair.push(job(2, 1, 100), now);
        let (batch, _) = fair.next_batch(10_000, now);
        assert_eq!(flows_of(&batch), [2]);
        let (next, _) = fair.next_batch(10_000, now);
        assert!(
            flows_of(&next).iter().all(|&f| f == 1),
            "then flow 1's turn"
        );
    }

    #[test]
    fn a_flow_quiet_for_a_while_leaves_shared_mode() {
        let mut fair = FairQueue::new(100);
        let start = Instant::now();
        fair.push(job(1, 1, 10), start);
        let (batch, _) = fair.next_batch(1000, start);
        fair.done(batch[0].flow);
        fair.push(job(2, 1, 10), start);
        assert_eq!(fair.mode(start), Mode::Shared, "flow 1 was seen just now");
        let later = start + RECENT + Duration::from_millis(1);
        assert_eq!(fair.mode(later), Mode::Alone, "only flow 2 is left");
    }

    #[test]
    fn cancelled_jobs_leave_the_queue_and_their_flows() {
        let mut fair = FairQueue::new(100);
        let now = Instant::now();
        let gone = Cancel::new(None);
        let flow = |id| Flow { id, weight: 1 };
        fair.push(Job::cancellable(prompts(10), flow(1), gone.clone()), now);
        fair.push(Job::cancellable(prompts(10), flow(1), gone.clone()), now);
        fair.push(job(2, 1, 10), now);
        fair.push(Job::cancellable(prompts(10), flow(3), gone.clone()), now);
        assert!(
            fair.remove_cancelled(now).is_empty(),
            "nothing cancelled yet"
        );
        gone.disconnect();
        let removed = fair.remove_cancelled(now);
        assert_eq!(removed.len(), 3);
        assert!(!fair.outstanding.contains_key(&1) && !fair.outstanding.contains_key(&3));
        assert!(!fair.flows.contains_key(&1), "flow 1 has nothing waiting");
        assert!(!fair.order.contains(&1));
        let (batch, _) = fair.next_batch(10_000, now);
        assert_eq!(flows_of(&batch), [2], "only the live job is read");
        assert!(fair.is_empty());
    }
}
