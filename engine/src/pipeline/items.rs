//! Batches of items: many input texts, each asked its own questions or the request's, answered
//! as one request ([`Engine::decide_items`]); a single request is a batch of one item
//! ([`Engine::decide`]), so both read through the same steps.
//!
//! What does not depend on an item is worked out once per request: the setup and its renderer,
//! the calibration policy and its parameters, the request's questions compiled and planned
//! (question-type `compile` and the readout plan once per question, not per item), and a
//! content-free policy's neutral reads of them (they read no item's text). The items are then
//! read on several threads at once, each item its own scheduler job per read round with its
//! own text as the shared prefix, so that the jobs meet on the model worker and share packed
//! passes instead of queueing one after another. Answers come back in item order; an item
//! that fails (a limit, an invalid question of its own, its tenant's token rate) fails alone.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use super::{
    missing_plugin, missing_renderer, render_version, setup, with_field, Admission, Applied,
    Decided, DecisionRequest, Engine, Given, Outcome, Planned, Prompting, Question, Refusal,
    Rendering,
};
use crate::error::{EngineError, Loc};
use crate::plugins::{Calibration, Renderer, Session};
use crate::readout;

/// Most threads reading one batch's items at once. Each mostly waits for the model worker, so
/// more threads than cores are fine; enough of them keep many items' jobs waiting for the
/// worker to pack together, and a bound keeps a large batch from starting hundreds of
/// threads (and from holding more plugin instances than a session keeps).
const MAX_ITEM_THREADS: usize = 32;

/// A question set compiled and planned, in question order: each question planned, or refused
/// by its plugin or its readout.
type PlannedSet = Vec<Result<Planned, Refusal>>;

/// One input of a batch and the questions it is asked.
#[derive(Debug, Clone)]
pub struct Item {
    /// Where the item sits in the request body (`items[3]`), named by its own errors; empty
    /// for a single request's input.
    pub loc: Loc,
    /// The input text the item's questions are asked about.
    pub state: String,
    /// The item's own questions (their locations within the item), or `None`: the request's.
    pub questions: Option<Vec<Question>>,
}

impl Item {
    /// A single request's input, asked the request's questions.
    pub fn shared(state: String) -> Item {
        Item {
            loc: Vec::new(),
            state,
            questions: None,
        }
    }

    /// Where the input-size limit points: the item's `state`, or nothing for a single
    /// request (whose input field differs by wire format: `input`, `input_json`, `state`).
    fn state_loc(&self) -> Loc {
        if self.loc.is_empty() {
            Vec::new()
        } else {
            with_field(&self.loc, "state")
        }
    }
}

/// What a request works out once for all its items.
struct Shared<'r> {
    request: &'r DecisionRequest,
    /// The resolved readout options (labels, readout) every question is planned with.
    options: readout::Options,
    renderer: Arc<Renderer>,
    rendering: Rendering,
    calibration: Arc<Calibration>,
    applied: Applied,
    min_option_mass: f64,
    /// The request's questions, compiled and planned (none when no item asks them).
    planned: PlannedSet,
    /// A content-free policy's neutral reads of the request's questions.
    content_free: Option<Vec<Result<Vec<f64>, String>>>,
    /// Plugin instances for the request's calls (from every item's thread), dropped with it.
    session: Session,
    /// The first token-admission refusal of the batch (see [`Admission`]).
    stopped: OnceLock<EngineError>,
}

impl Shared<'_> {
    /// How an item's prompts are made and read, under the item's own admission.
    fn prompting<'s>(&'s self, admission: &'s Admission<'s>) -> Prompting<'s> {
        Prompting {
            renderer: &self.renderer,
            salt: self.request.cache_salt,
            session: &self.session,
            scope: &self.request.scope,
            admission,
            keep_prompts: self.request.return_prompt,
        }
    }

    /// What every answer of an item is given besides its read.
    fn given<'s>(&'s self, content_free: Option<&'s [Result<Vec<f64>, String>]>) -> Given<'s> {
        Given {
            calibration: &self.calibration,
            applied: &self.applied,
            rendering: &self.rendering,
            min_option_mass: self.min_option_mass,
            content_free,
            session: &self.session,
        }
    }
}

impl Engine {
    /// Answers a batch: every item's questions (its own, or the request's shared
    /// `request.questions`) about its text. `request.state` is not read; everything else of
    /// the request (shared questions, scope, cache salt, renderer, readout, temperature,
    /// `min_option_mass`) applies to every item. Blocking: call from a blocking thread.
    ///
    /// Fails as a whole (nothing was read) when the request cannot be answered at all: a
    /// renderer or calibration plugin not loaded, the request cancelled already, or the
    /// shared questions invalid or over the question limit. Otherwise each item gets its
    /// [`Decided`], or the error of that item alone: its input over `max_input_bytes`, its own
    /// questions invalid or too many, or one of its reads refused: by its tenant's token
    /// rate, by the model worker's full queue, or by the request's cancellation (its client
    /// gone, its deadline passed). Such a refusal also fails the items read after it.
    pub fn decide_items(
        &self,
        request: &DecisionRequest,
        items: Vec<Item>,
    ) -> Result<Vec<Result<Decided, EngineError>>, EngineError> {
        let started = Instant::now();
        if let Some(error) = request.scope.cancel.error() {
            return Err(error);
        }
        let asked = items.iter().any(|item| item.questions.is_none());
        let mut shared =
            tracing::debug_span!(target: "decide::pipeline", "compile", decide.questions = request.questions.len() as i64)
                .in_scope(|| self.shared(request, asked))?;
        // The request's own work (setup, shared compile and neutral reads), not any item's.
        let mut work = Decided::new();
        work.timings.compile = started.elapsed();
        shared.content_free = self.shared_content_free(&shared, &mut work);
        let mut results = each_item(items, |item| self.decide_item(&shared, item));
        // It is counted once, with the first item answered (the only item of a single request).
        if let Some(first) = results.iter_mut().find_map(|result| result.as_mut().ok()) {
            first.add_work(&work);
        }
        self.metrics
            .record_token_cache(&self.model.token_cache_stats());
        if results.iter().any(Result::is_ok) {
            let decided = results.iter().filter_map(|result| result.as_ref().ok());
            self.metrics
                .record_request(Decided::counts(decided), started.elapsed());
        }
        Ok(results)
    }

    /// The request-level work: setup, renderer, the shared questions compiled (when an item
    /// asks them or the request has any: invalid ones fail the batch, as every item asking
    /// them would fail alike), calibration.
    fn shared<'r>(
        &self,
        request: &'r DecisionRequest,
        asked: bool,
    ) -> Result<Shared<'r>, EngineError> {
        let scope = &request.scope;
        let session = scope.cancel.plugin_session();
        let served = self.served();
        let resolved = setup::resolve(
            &served.setup,
            scope.renderer.as_deref(),
            request.renderer.as_deref(),
            &request.readout,
        );
        let renderer = self
            .plugins
            .renderer_in(scope.plugins.as_deref(), &resolved.renderer)
            .ok_or_else(|| missing_renderer(&resolved))?;
        let planned = if asked || !request.questions.is_empty() {
            self.limits_of(scope)
                .check_questions(request.questions.len(), &crate::loc!["questions"])?;
            self.compile(&request.questions, &resolved.options, scope, &session)?
        } else {
            Vec::new()
        };
        let rendering = Rendering {
            renderer: resolved.renderer.clone(),
            render_version: render_version(&renderer),
            labels: resolved.options.labels.unwrap_or_default(),
            source: resolved.source,
        };
        let min_option_mass = request
            .min_option_mass
            .or(scope.min_option_mass)
            .unwrap_or(self.min_option_mass);
        let calibration_name = scope.calibration.as_deref().unwrap_or(&served.calibration);
        let calibration = self
            .plugins
            .calibration_in(scope.plugins.as_deref(), calibration_name)
            .ok_or_else(|| {
                missing_plugin("calibration", calibration_name, scope, "--calibration")
            })?;
        let applied = self.applied(
            request.temperature,
            &served.calibrated,
            scope.calibrated.as_deref(),
            &calibration,
            &session,
        );
        Ok(Shared {
            request,
            options: resolved.options,
            renderer,
            rendering,
            calibration,
            applied,
            min_option_mass,
            planned,
            content_free: None,
            session,
            stopped: OnceLock::new(),
        })
    }

    /// A content-free policy's neutral reads of the shared questions, once per batch (they
    /// do not depend on any item's text); their tokens, passes and time go in `work`.
    fn shared_content_free(
        &self,
        shared: &Shared<'_>,
        work: &mut Decided,
    ) -> Option<Vec<Result<Vec<f64>, String>>> {
        let states = shared.calibration.neutral_states()?;
        if shared.planned.is_empty() {
            return None;
        }
        let started = Instant::now();
        let admission = Admission::new(&shared.stopped);
        let content_free = self.read_content_free(
            states,
            &shared.request.questions,
            &shared.planned,
            &shared.prompting(&admission),
            work,
        );
        work.timings.prepare += started.elapsed().saturating_sub(work.timings.model);
        Some(content_free)
    }

    /// Answers one item: its limits, its questions (its own compiled here, or the request's
    /// compiled once), its reads on the model worker, its answers in question order.
    fn decide_item(&self, shared: &Shared<'_>, item: Item) -> Result<Decided, EngineError> {
        let started = Instant::now();
        // A cancelled request (client gone, deadline passed) starts no more items.
        if let Some(error) = shared.request.scope.cancel.error() {
            return Err(error);
        }
        let (questions, planned) = match &item.questions {
            // An item's own questions are compiled for it.
            Some(own) => tracing::debug_span!(target: "decide::pipeline", "compile", decide.questions = own.len() as i64)
                .in_scope(|| self.item_questions(shared, &item))?,
            None => self.item_questions(shared, &item)?,
        };
        let mut decided = Decided::new();
        let compiled_at = Instant::now();
        decided.timings.compile = compiled_at - started;
        let admission = Admission::new(&shared.stopped);
        let prompting = shared.prompting(&admission);
        // Own questions get their own neutral reads; the request's were read once.
        let own_free = match &item.questions {
            Some(_) => shared.calibration.neutral_states().map(|states| {
                self.read_content_free(states, questions, &planned, &prompting, &mut decided)
            }),
            None => None,
        };
        let content_free = match &item.questions {
            Some(_) => own_free.as_deref(),
            None => shared.content_free.as_deref(),
        };
        let reads = self.read_planned(&item.state, questions, planned, &prompting, &mut decided);
        // The tenant's token rate refused one of its reads: the item fails (429 or 413).
        if let Some(error) = admission.into_refused() {
            return Err(error);
        }
        let read_at = Instant::now();
        decided.timings.prepare = (read_at - compiled_at).saturating_sub(decided.timings.model);
        let given = shared.given(content_free);
        let _answer =
            tracing::debug_span!(target: "decide::pipeline", "answer", decide.questions = reads.len() as i64)
                .entered();
        for read in reads {
            decided.outcomes.push(match read {
                Err(refusal) => Outcome::Refusal(refusal),
                Ok((planned, read)) => {
                    self.answer_one(&questions[planned.index], planned, read, &given)
                }
            });
        }
        decided.timings.answer = read_at.elapsed();
        Ok(decided)
    }

    /// The questions an item is asked, planned: its own, checked against the request's limits
    /// (count, then its input's size) and compiled for it; or the request's, compiled once
    /// (its input's size checked).
    fn item_questions<'s>(
        &self,
        shared: &'s Shared<'_>,
        item: &'s Item,
    ) -> Result<(&'s [Question], PlannedSet), EngineError> {
        let scope = &shared.request.scope;
        let limits = self.limits_of(scope);
        match &item.questions {
            Some(questions) => {
                limits.check_questions(questions.len(), &with_field(&item.loc, "questions"))?;
                limits.check_input(item.state.len(), &item.state_loc())?;
                let planned = self.compile(questions, &shared.options, scope, &shared.session)?;
                Ok((questions.as_slice(), planned))
            }
            None => {
                limits.check_input(item.state.len(), &item.state_loc())?;
                Ok((shared.request.questions.as_slice(), shared.planned.clone()))
            }
        }
    }
}

/// `items.map(f)` in order, on up to [`MAX_ITEM_THREADS`] threads that each take the next
/// item as they finish one (inline for a single item). Items differ in cost (their texts,
/// their questions), so a shared queue keeps every thread busy to the last item where fixed
/// chunks would leave threads idle.
fn each_item<T: Send, R: Send>(items: Vec<T>, f: impl Fn(T) -> R + Sync) -> Vec<R> {
    let threads = items.len().min(MAX_ITEM_THREADS);
    if threads <= 1 {
        return items.into_iter().map(f).collect();
    }
    let slots: Vec<Mutex<Option<T>>> = items.into_iter().map(|i| Mutex::new(Some(i))).collect();
    let results: Vec<Mutex<Option<R>>> = slots.iter().map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    // Each thread works inside the request's span.
    let span = tracing::Span::current();
    let span = &span;
    // Only references are captured, so the closure is `Copy`: one per thread.
    let work = || loop {
        let index = next.fetch_add(1, Ordering::Relaxed);
        let Some(slot) = slots.get(index) else {
            return;
        };
        let taken = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(item) = taken {
            let result = span.in_scope(|| f(item));
            *results[index].lock().unwrap_or_else(|p| p.into_inner()) = Some(result);
        }
    };
    // A panic in `f` ends the scope with that panic, as it would inline.
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(work);
        }
    });
    results
        .into_iter()
        .map(|result| {
            result
                .into_inner()
                .unwrap_or_else(|p| p.into_inner())
                .expect("every index below the item count is taken by exactly one thread")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::each_item;

    #[test]
    fn each_item_keeps_the_order_and_runs_every_item_once() {
        for n in [0, 1, 2, 31, 32, 33, 257] {
            let items: Vec<usize> = (0..n).collect();
            let calls = std::sync::atomic::AtomicUsize::new(0);
            let out = each_item(items.clone(), |x| {
                calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                x * 3
            });
            assert_eq!(out, items.iter().map(|x| x * 3).collect::<Vec<_>>());
            assert_eq!(calls.into_inner(), n);
        }
    }

    #[test]
    fn each_item_runs_items_at_once() {
        // Two items that each wait for the other can only finish on two threads.
        let barrier = std::sync::Barrier::new(2);
        let out = each_item(vec![1, 2], |x| {
            barrier.wait();
            x
        });
        assert_eq!(out, [1, 2]);
    }
}
