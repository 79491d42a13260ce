//! Reading planned questions in rounds: every question's first-round reads (one read, one per
//! label shift, or one per option for two-stage) go into one batched read, the second round
//! (two-stage finalists) into another. Kept apart from the pipeline's request handling so the
//! read path (`Engine::read_batch`) is called from exactly one place, [`Engine::read_round`].

use decide_models::{ModelError, Readout};

use super::{
    engine_refusal, prompts, Decided, Engine, Planned, Prepared, Prompting, Question, ReadPrompt,
    Refusal,
};
use crate::error::Loc;
use crate::readout;

impl Engine {
    /// Renders, reads and combines every planned question. The first round of every
    /// question's reads (one read, or one per shift, or one per option for two-stage) goes
    /// into one batched read over the shared prefix; the second round (two-stage finalists)
    /// into another. Outcomes come back in question order.
    pub(super) fn read_planned(
        &self,
        state: &str,
        questions: &[Question],
        planned: Vec<Result<Planned, Refusal>>,
        prompting: &Prompting<'_>,
        decided: &mut Decided,
    ) -> Vec<Result<(Planned, Read), Refusal>> {
        // A cancelled request renders no more prompts: a two-stage question of 255 options
        // is 255 renderer calls and tokenizations before any read.
        let prepare_all = |planned: &Planned, asks: &[readout::Ask]| {
            let loc = &questions[planned.index].loc;
            asks.iter()
                .map(|ask| match prompting.scope.cancel.is_cancelled() {
                    true => Err(engine_refusal(
                        loc,
                        ModelError::Compute("the request was cancelled".into()),
                    )),
                    false => self.prepare_one(state, loc, ask, prompting),
                })
                .collect::<Result<Vec<Prepared>, Refusal>>()
        };
        // Round 1.
        // Rendering and tokenizing a prompt with a long input costs milliseconds of CPU each
        // (64 questions over a 4k-token input: ~0.5 s on one core), so questions are prepared
        // on all cores.
        let rendering = render_span(planned.len());
        let mut first: Vec<Result<(Planned, Vec<Prepared>), Refusal>> =
            parallel_map(planned, |planned| {
                let planned = planned?;
                let asks = planned.plan.asks(&planned.compiled);
                let prepared = prepare_all(&planned, &asks)?;
                Ok((planned, prepared))
            });
        record_prompts(
            &rendering,
            first.iter().flatten().map(|(_, p)| p.as_slice()),
        );
        drop(rendering);
        let groups: Vec<&mut [Prepared]> = first
            .iter_mut()
            .filter_map(|w| w.as_mut().ok().map(|(_, p)| p.as_mut_slice()))
            .collect();
        let mut reads = self.read_round(groups, prompting, decided).into_iter();
        let mut after_first: Vec<Result<Stage, Refusal>> = Vec::with_capacity(first.len());
        for work in first {
            after_first.push(work.and_then(|(planned, mut prepared)| {
                let loc = &questions[planned.index].loc;
                let read = reads.next().expect("reads per group");
                let (results, tokens, shown) = collect_reads(read, &mut prepared, None, loc)?;
                Ok(match planned.plan.combine(&planned.compiled, &results) {
                    readout::Step::Done(combined) => {
                        Stage::Done(planned, Read::new(combined, tokens, shown))
                    }
                    readout::Step::Again(pending) => {
                        // A two-stage question's finalists, rendered for the second round.
                        let rendering = render_span(1);
                        let second = rendering.in_scope(|| {
                            prepare_all(&planned, std::slice::from_ref(pending.ask()))
                        })?;
                        record_prompts(&rendering, std::iter::once(second.as_slice()));
                        Stage::Waiting(planned, pending, second, tokens, shown)
                    }
                })
            }));
        }
        // Round 2.
        let groups: Vec<&mut [Prepared]> = after_first
            .iter_mut()
            .filter_map(|s| match s {
                Ok(Stage::Waiting(_, _, prepared, _, _)) => Some(prepared.as_mut_slice()),
                _ => None,
            })
            .collect();
        let mut reads = self.read_round(groups, prompting, decided).into_iter();
        after_first
            .into_iter()
            .map(|stage| match stage? {
                Stage::Done(planned, read) => Ok((planned, read)),
                Stage::Waiting(planned, pending, mut prepared, (tokens, cached), shown) => {
                    let loc = &questions[planned.index].loc;
                    let read = reads.next().expect("reads per group");
                    let (results, (more, more_cached), shown) =
                        collect_reads(read, &mut prepared, shown, loc)?;
                    let combined = pending.finish(&results[0]);
                    Ok((
                        planned,
                        Read::new(combined, (tokens + more, cached + more_cached), shown),
                    ))
                }
            })
            .collect()
    }

    /// One round of reads: every group's prompts go into one batched read (the only caller of
    /// [`Engine::read_batch`]); the results come back split by group. The prompts are moved
    /// to the model worker, leaving their token counts.
    fn read_round(
        &self,
        mut groups: Vec<&mut [Prepared]>,
        prompting: &Prompting<'_>,
        decided: &mut Decided,
    ) -> Vec<Vec<Result<(Readout, usize), ModelError>>> {
        if groups.is_empty() {
            return Vec::new();
        }
        prompts::set_round_prefix(&mut groups);
        let sizes: Vec<usize> = groups.iter().map(|g| g.len()).collect();
        let prompts: Vec<crate::scheduler::Prompt> = groups
            .into_iter()
            .flat_map(|g| g.iter_mut())
            .map(|p| std::mem::take(&mut p.prompt))
            .collect();
        let mut reads = self.read_batch(prompts, prompting, decided).into_iter();
        sizes
            .into_iter()
            .map(|size| reads.by_ref().take(size).collect())
            .collect()
    }
}

/// The span of rendering and tokenizing a round's prompts (renderer plugin, chat template,
/// tokenizer), for `questions` questions.
fn render_span(questions: usize) -> tracing::Span {
    tracing::debug_span!(
        target: "decide::pipeline",
        "render_tokenize",
        decide.questions = questions as i64,
        decide.prompts = tracing::field::Empty,
        decide.prompt_tokens = tracing::field::Empty,
    )
}

/// Records how many prompts a round rendered and their tokens.
fn record_prompts<'p>(span: &tracing::Span, groups: impl Iterator<Item = &'p [Prepared]>) {
    if span.is_disabled() {
        return;
    }
    let (mut prompts, mut tokens) = (0, 0);
    for group in groups {
        prompts += group.len();
        tokens += group.iter().map(|p| p.tokens).sum::<usize>();
    }
    span.record("decide.prompts", prompts as i64);
    span.record("decide.prompt_tokens", tokens as i64);
}

/// `items.map(f)` in order, spread over the available cores in contiguous chunks (inline
/// when there are too few items for threads to pay).
fn parallel_map<T: Send, R: Send>(items: Vec<T>, f: impl Fn(T) -> R + Sync) -> Vec<R> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = cores.min(items.len() / 4);
    if threads <= 1 {
        return items.into_iter().map(f).collect();
    }
    // The first item runs alone: questions over one input share its long text, and once one
    // of them has tokenized it the token cache serves the rest. Started together, every
    // thread would tokenize the whole input once before any could reuse it.
    let mut items = items.into_iter();
    let mut out = Vec::with_capacity(items.len());
    out.extend(items.next().map(&f));
    let per = items.len().div_ceil(threads);
    let mut chunks: Vec<Vec<T>> = Vec::with_capacity(threads);
    loop {
        let chunk: Vec<T> = items.by_ref().take(per).collect();
        if chunk.is_empty() {
            break;
        }
        chunks.push(chunk);
    }
    let f = &f;
    std::thread::scope(|scope| {
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|chunk| scope.spawn(move || chunk.into_iter().map(f).collect::<Vec<R>>()))
            .collect();
        out.extend(
            handles
                .into_iter()
                .flat_map(|h| h.join().expect("a preparing thread panicked")),
        );
        out
    })
}

/// A question's reads, combined, with the prompt tokens they took.
pub(super) struct Read {
    pub(super) combined: readout::Combined,
    /// Prompt tokens of all the question's reads.
    pub(super) input_tokens: usize,
    /// Of those, tokens whose KV came from a shared prefix.
    pub(super) cached_tokens: usize,
    /// The prompts of the question's reads, in the order read, when the request asked.
    pub(super) prompts: Option<Vec<ReadPrompt>>,
}

impl Read {
    fn new(
        combined: readout::Combined,
        (input_tokens, cached_tokens): (usize, usize),
        prompts: Option<Vec<ReadPrompt>>,
    ) -> Read {
        Read {
            combined,
            input_tokens,
            cached_tokens,
            prompts,
        }
    }
}

/// Where a question is between the two read rounds.
enum Stage {
    Done(Planned, Read),
    /// Waiting for the second round: the pending combination, its prompt, the tokens
    /// (total, cached) of the first round and its prompts (when the request asked).
    Waiting(
        Planned,
        readout::Pending,
        Vec<Prepared>,
        (usize, usize),
        Option<Vec<ReadPrompt>>,
    ),
}

/// What one round of a question's reads came to: the readouts, their (total, cached) prompt
/// tokens, and the prompts of the question's reads so far when the request asked for them.
type Collected = (Vec<Readout>, (usize, usize), Option<Vec<ReadPrompt>>);

/// The readouts of one question's prompts in a round and their (total, cached) prompt tokens,
/// or the refusal for the first read that failed (the model worker's failure:
/// `engine_error`). The kept prompts (when the request asked) follow `earlier` (the first
/// round's, for a second round), each with the tokens it found cached; a refusal carries them.
fn collect_reads(
    reads: Vec<Result<(Readout, usize), ModelError>>,
    prepared: &mut [Prepared],
    earlier: Option<Vec<ReadPrompt>>,
    loc: &Loc,
) -> Result<Collected, Refusal> {
    let mut out = Vec::with_capacity(reads.len());
    let (mut tokens, mut cached) = (0, 0);
    let mut failed = None;
    for (read, prompt) in reads.into_iter().zip(prepared.iter_mut()) {
        match read {
            Ok((read, from_cache)) => {
                tokens += prompt.tokens;
                cached += from_cache;
                if let Some(shown) = prompt.shown.as_mut() {
                    shown.cached_tokens = from_cache;
                }
                out.push(read);
            }
            Err(error) => {
                failed = Some(engine_refusal(loc, error));
                break;
            }
        }
    }
    let shown = prompts::take(prepared).map(|more| {
        let mut all = earlier.unwrap_or_default();
        all.extend(more);
        all
    });
    match failed {
        Some(refusal) => Err(refusal.with_reads(shown)),
        None => Ok((out, (tokens, cached), shown)),
    }
}

#[cfg(test)]
mod tests {
    use super::parallel_map;

    #[test]
    fn parallel_map_keeps_the_order() {
        for n in [0, 1, 5, 64, 257] {
            let items: Vec<usize> = (0..n).collect();
            assert_eq!(
                parallel_map(items.clone(), |x| x * 2),
                items.iter().map(|x| x * 2).collect::<Vec<_>>()
            );
        }
    }
}
