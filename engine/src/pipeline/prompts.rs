//! The prompts a question was read with, exactly as the model got them, for a request that
//! asks for them (`extra.return_prompt` on OpenAI's format, `return_prompt` on the Jev
//! formats).
//!
//! A caller debugging a prompt, or a benchmark replaying decide's reads on another server
//! (vLLM's `/v1/completions` with `prompt` = these token ids and `max_tokens` = 1), needs the
//! rendered text, the token ids fed to the model (special tokens and the chat template
//! included), the label token ids read at the answer position, and how much of the prompt was
//! the prefix that the question's round shares with the others. The pipeline keeps a copy of
//! each read's prompt while it prepares it, only when asked: the tokens themselves are moved to
//! the model worker, so keeping them costs a copy per read and nothing otherwise.
//!
//! Size: a question's prompts are at most `--max-prompt-tokens` tokens each (a prompt over it
//! is refused before it is read, and its refusal carries no prompt), and their text is the
//! request's own input (within `--max-input-bytes`) with the renderer's and template's text
//! around it; a request that asks for them gets them all, one copy per read, since its input
//! was already accepted under those limits.

use super::Prepared;

/// One model read of a question: the prompt as rendered and tokenized, and the labels read
/// at its answer position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadPrompt {
    /// The prompt text exactly as the chat template rendered it (with the model's answer
    /// suffix, if the self-check set one).
    pub text: String,
    /// The token ids of `text` the model read (BOS first when the model asks for it).
    pub token_ids: Vec<u32>,
    /// How many leading `token_ids` the reads of this question's round share (the longest
    /// common prefix of the prompts the round sends to the model worker together, at most all
    /// but the last token): what is prefilled once per round and offered to the prefix cache.
    /// For questions over one input it ends inside the renderer's text after the input; for
    /// a question read alone (one read in its round) it is all but the last token.
    pub prefix_tokens: usize,
    /// How many of `token_ids` the model worker did not compute for this read: found in the
    /// tenant's prefix cache (an earlier request's), or the round's shared prefix already
    /// computed for an earlier read of the round. Unlike the rest it depends on what was
    /// cached before; the question's reads add up to its answer's cached input tokens.
    pub cached_tokens: usize,
    /// The labels read, in the order the prompt lists them (option order for a `direct` read;
    /// rotated by the shift for a `permutation` read; `A` yes and `B` no for a two-stage
    /// stage-1 read; the finalists in option order for its stage-2 read).
    pub labels: Vec<String>,
    /// The token id of each label at the answer position, in the order of `labels`.
    pub label_token_ids: Vec<u32>,
}

/// Every read of one question, in the order they were read: the first round's reads in the
/// readout's order (one read; one per `permutation` shift; one per option for a two-stage
/// stage 1), then a second round's read (two-stage finalists). A content-free calibration
/// policy's neutral reads are not listed: they read other texts than the request's input.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QuestionPrompts {
    pub reads: Vec<ReadPrompt>,
}

/// Sets the round's shared prefix on every kept prompt of a round: the prompts of `groups`
/// go to the model worker as one job, which prefills their common prefix once
/// ([`crate::scheduler::shared_prefix_of`], the worker's own rule).
pub(super) fn set_round_prefix(groups: &mut [&mut [Prepared]]) {
    let prepared = || groups.iter().flat_map(|g| g.iter());
    if !prepared().any(|p| p.shown.is_some()) {
        return;
    }
    let prefix = crate::scheduler::shared_prefix_of(prepared().map(|p| p.prompt.tokens.as_slice()));
    for shown in groups
        .iter_mut()
        .flat_map(|g| g.iter_mut())
        .filter_map(|p| p.shown.as_mut())
    {
        shown.prefix_tokens = prefix;
    }
}

/// The kept prompts of one question's reads, taken from them (none when the request did not
/// ask for its prompts).
pub(super) fn take(prepared: &mut [Prepared]) -> Option<Vec<ReadPrompt>> {
    prepared.iter_mut().map(|p| p.shown.take()).collect()
}
