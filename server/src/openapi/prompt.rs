//! The prompts a request may ask back (`extra.return_prompt` on `/v1/decisions`,
//! `return_prompt` on the Jev formats): one object per question, the same on every format. The
//! frontends write it with `crate::frontends::prompts`; the contract test checks it here.

use serde::Deserialize;
use utoipa::ToSchema;

/// Every model read of one question, in the order read: one read for `direct` and
/// `wide-direct`; one per shift for `permutation` (the shifts of `audit.permutation_shifts`);
/// one yes/no read per option then the finalists' read for `two-stage`. A content-free
/// calibration policy's reads of neutral texts are not listed. Each prompt is within
/// `--max-prompt-tokens` (a longer one is refused before it is read, and its refusal has no
/// prompt), so asking for them is bounded by what the request was already allowed to read.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QuestionPrompt {
    pub reads: Vec<PromptRead>,
}

/// One read: the prompt as the model got it, and the labels read at its answer position.
/// Replaying `token_ids` on another server and reading the next-token log-probabilities of
/// `label_token_ids` reads the same thing decide read.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PromptRead {
    /// The prompt text exactly as the model's chat template rendered it: it ends where the
    /// model's next token is its answer.
    pub text: String,
    /// The token ids of `text` as decide feeds the model, special tokens included (and the
    /// BOS token first when the model asks for one): `text` decoded.
    pub token_ids: Vec<u32>,
    /// How many leading `token_ids` the prompts read together in this question's round share:
    /// the prefix decide prefills once for all of them (the input and the renderer's text
    /// around it, for questions over one input) and keeps in its prefix cache. At most all but
    /// the last token (what it is for a question read alone).
    pub prefix_tokens: u64,
    /// How many of `token_ids` were not computed for this read: found in the prefix cache
    /// (an earlier request's), or the round's shared prefix already computed for another of
    /// its reads. It depends on what was cached before; a question's reads add up to its
    /// answer's cached input tokens.
    pub cached_tokens: u64,
    /// The labels read, in the order the prompt lists them (option order, rotated by the
    /// shift for `permutation`; `A` yes and `B` no for a two-stage yes/no read).
    pub labels: Vec<String>,
    /// The token id each label is read at, in the order of `labels`.
    pub label_token_ids: Vec<u32>,
}
