//! `decide-models`: load a GGUF language model and read its next-token log-probabilities at
//! option labels. No text is ever generated.
//!
//! # What this crate does
//!
//! The `decide` server asks a model a closed question ("answer with A, B or C") and needs the
//! model's probability of each option. That is one forward pass over the prompt and a
//! log-softmax at the last position, gathered at the label tokens:
//!
//! ```no_run
//! use decide_models::{ChatMessage, Device, Model};
//! # fn main() -> Result<(), decide_models::ModelError> {
//! let model = Model::load(std::path::Path::new(".models/smol.gguf"), &Device::Cpu)?;
//! let prompt = model.render(&[ChatMessage {
//!     role: "user".into(),
//!     content: "Is the sky green? A) yes B) no. Answer with the letter.".into(),
//! }])?;
//! let labels = vec!["A".to_string(), "B".to_string()];
//! let ids = model.label_ids(&prompt, &labels)?;
//! let readout = model.read(&prompt.tokens, &ids)?;
//! println!("{:?} (mass on labels {})", readout.logprobs, readout.option_mass);
//! # Ok(()) }
//! ```
//!
//! # Design choices
//!
//! - **Everything from the model's own files.** Weights, tokenizer (`tokenizer.ggml.*`) and
//!   chat template (`tokenizer.chat_template`) come from the one GGUF file, or from one
//!   Hugging Face directory, so a model cannot be paired with the wrong tokenizer.
//! - **Our own tokenizer construction** ([`tokenizer`] module): candle's GGUF conversion
//!   mis-tokenizes SmolLM2 (digits, leading space). Unknown pre-tokenizers are refused by name
//!   instead of approximated, because a wrong tokenizer silently skews every probability.
//!   Tests check published reference ids from llama.cpp.
//! - **The model's own chat template**, rendered like Hugging Face does, ending exactly at the
//!   assistant's first answer token (open `<think>` blocks closed, `enable_thinking=false`).
//!   Tokenizer and template together are a [`Prompter`], built from the metadata alone
//!   ([`Prompter::load`] reads no weights), which a [`Model`] holds for its text methods.
//! - **A label is read at its token in context** ([`Model::label_ids`]): appended to the
//!   prompt it must be exactly one token, must not re-split the prompt's tokens, and must
//!   decode back to itself. Otherwise the read would measure something other than "the model
//!   answers with this label", so it is refused with a reason.
//! - **Our own forward pass** ([`forward`]): immutable weights shared by all threads, an
//!   explicit [`KvCache`] value so a shared prefix can be prefilled once and many question
//!   suffixes run against it, and the output head applied only to the rows that are read.
//!   The arithmetic mirrors candle-transformers' quantized models (bit-identical logits in
//!   [`Numerics::Reference`] mode, checked by a test). The default [`Numerics::SplitInvariant`]
//!   layout pads attention keys to a multiple of [`forward::KV_PAD`] so that, on CPU, a read
//!   is bit-for-bit the same whether the prompt ran in one pass or as a cached prefix plus a
//!   suffix: the quantized matmuls round activations to 8 bits, which turns last-bit
//!   differences into logit differences of up to ~0.8, so "equal within float rounding" is not
//!   good enough for a prefix cache whose answers must not depend on cache hits.
//! - **Exact reads** ([`Readout`]): log-softmax over the whole vocabulary, no top-k, so
//!   `option_mass` is the true probability share on the labels.
//! - **Device-generic**: the same code runs on CPU and CUDA (`--features cuda`); the
//!   [`Device`] is a runtime choice passed to [`Model::load`].
//!
//! Supported architectures (one file each in [`arch`], one forward for all): `llama` (with
//! Llama 3.1 RoPE scaling, tied or untied embeddings), `qwen2`, `qwen3`, `mistral` (sliding
//! window; GGUF as `llama`), `phi3` (fused projections, partial rotary, LongRoPE) and
//! `gemma3` (its GGUF SentencePiece vocabulary built as transformers builds it). Formats: a
//! GGUF file, or a Hugging Face directory (`config.json`, safetensors in f32/f16/bf16,
//! `tokenizer.json`, the chat template). Others are refused at load with
//! [`ModelError::UnsupportedArch`], which lists what is supported.

use std::path::{Path, PathBuf};
use std::time::Instant;

pub use candle_core::Device;
pub use candle_core::Tensor;

pub mod amx;
pub mod arch;
pub mod attention_plan;
mod byte_level;
mod chunking;
mod error;
pub mod forward;
mod gguf;
mod hf;
/// The fused CUDA kernels' launchers; public only for `examples/kernel_check.rs`.
#[cfg(feature = "cuda")]
#[doc(hidden)]
pub mod kernels;
/// bf16 matmuls through cuBLASLt; public for `examples/layer_bench.rs`.
#[cfg(feature = "cuda")]
#[doc(hidden)]
pub mod lt_gemm;
#[cfg(feature = "cuda")]
pub mod memory_pool;
pub mod prompter;
mod readout;
// Mostly the CUDA launchers' (`chunking` and the tokenizer read some everywhere); `set`
// is theirs alone.
mod spm;
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
mod switch;
pub mod template;
mod token_cache;
mod tokenize_threads;
pub mod tokenizer;
mod weights;

pub use chunking::{
    chunk_lengths, last_chunk_start, prefill_aligned, prefill_remainder_first, PREFILL_ALIGN,
};
pub use error::ModelError;
pub use forward::{Kernels, KvCache, Matmuls, Numerics, Segment, Transformer, WeightFormat};
pub use gguf::LoadProgress;
pub use prompter::Prompter;
pub use readout::Readout;
pub use token_cache::TokenCacheStats;

use error::Result;
use gguf::Gguf;

/// Most attention scores (query rows x key columns x heads) one prefill chunk may hold:
/// 2^30 f32 scores are 4 GiB, comfortable on a GPU and never reached on CPU prompts.
pub const PREFILL_SCORE_BUDGET: usize = 1 << 30;

/// Most tokens in one prefill chunk, whatever the budget allows.
pub const PREFILL_MAX_CHUNK: usize = 4096;

/// [`PREFILL_MAX_CHUNK`] on decide's fused CUDA kernels: no scores are materialised and every
/// chunk costs a pass's fixed launch overhead, so a 4.4k-token input prefills in one pass.
pub const FUSED_PREFILL_MAX_CHUNK: usize = 8192;

/// One chat message, as the renderer plugins produce them (`role` is `system`, `user` or
/// `assistant`; the template decides what it accepts).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ChatMessage {
    /// Who speaks: `system`, `user`, `assistant`.
    pub role: String,
    /// What is said.
    pub content: String,
}

/// A rendered prompt: the chat-template text and its token ids. The last token is the one
/// just before the answer slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prompt {
    /// The prompt text exactly as rendered by the chat template.
    pub text: String,
    /// Token ids of `text` (BOS first when the model asks for it).
    pub tokens: Vec<u32>,
}

/// Facts about a loaded model, for logs, `/metrics` and the prompt-length checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelInfo {
    /// `general.name` from the file (a directory's `_name_or_path`), else the file stem.
    pub name: String,
    /// The family (`llama`, `qwen2`, `qwen3`, `mistral`, `gemma3`; see [`arch`]).
    pub arch: String,
    /// The GGUF file or Hugging Face directory it was loaded from.
    pub file: PathBuf,
    /// Decoder blocks.
    pub n_layers: usize,
    /// Rows of the output head: the size of the distribution a read normalises over.
    pub vocab_size: usize,
    /// Longest prompt (in tokens) a read accepts.
    pub context_length: usize,
    /// How the forward computes, e.g. `cuda bf16 fused`, `cpu f32` or `cpu amx bf16`: reads differ by
    /// rounding between these, so results fitted on scores (calibration) name it.
    pub forward: String,
}

/// Choices made when loading a model.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// How weight matrices are held: as stored (default) or dequantized to a dense dtype,
    /// trading memory for speed (see [`WeightFormat`]).
    pub weights: WeightFormat,
    /// Which implementation runs the layers: decide's fused CUDA kernels where possible
    /// (default), or candle's ops everywhere (see [`Kernels`]).
    pub kernels: Kernels,
    /// How the fused kernels' projections multiply: with cuBLAS's default algorithms
    /// (default) or tuned at load (see [`Matmuls`]).
    pub matmuls: Matmuls,
}

/// A loaded model: weights, tokenizer and chat template. Immutable after load, so one
/// `Model` (behind an `Arc`) serves concurrent requests without locks.
pub struct Model {
    info: ModelInfo,
    /// The tokenizer and chat template: every text method delegates to it.
    prompter: Prompter,
    transformer: Transformer,
}

// The server shares one Model across threads; fail the build if that ever stops holding.
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Model>();
    assert_send_sync::<KvCache>();
};

impl Model {
    /// Loads a model onto `device` from a GGUF file or a Hugging Face directory: checks the
    /// architecture first (so unsupported models fail fast with
    /// [`ModelError::UnsupportedArch`]), builds the tokenizer and compiles the chat template
    /// (GGUF metadata; `tokenizer.json` and `chat_template.jinja`/`tokenizer_config.json`),
    /// then reads the weights.
    pub fn load(path: &Path, device: &Device) -> Result<Model> {
        Self::load_with(path, device, &LoadOptions::default())
    }

    /// [`Model::load`] with options (e.g. dequantized weights for faster prefill).
    pub fn load_with(path: &Path, device: &Device, options: &LoadOptions) -> Result<Model> {
        Self::load_reporting(path, device, options, None)
    }

    /// [`Model::load_with`], telling `progress` the bytes of tensor data read so far and in
    /// the file after each tensor (loading has no other count a person could follow).
    pub fn load_reporting(
        path: &Path,
        device: &Device,
        options: &LoadOptions,
        progress: Option<LoadProgress>,
    ) -> Result<Model> {
        let t0 = Instant::now();
        // The architecture first, so an unsupported model fails before its tokenizer is
        // built or a weight is read.
        let (arch, name, prompter, mut source): (_, _, _, Box<dyn weights::WeightSource>) =
            if path.is_dir() {
                let dir = hf::HfDir::open(path)?;
                let (arch, names) = arch::from_hf(&dir.config)?;
                let prompter = Prompter::from_hf(&dir)?;
                let st = weights::Safetensors::open(path, &dir.shards, names)?;
                (arch, dir.name(), prompter, Box::new(st))
            } else {
                let mut g = Gguf::open(path)?;
                if let Some(progress) = progress {
                    g.report_to(progress);
                }
                // By name first, then the tokenizer, then the hyper-parameters: a file of an
                // unknown family or tokenizer is refused for that, not for a missing key.
                arch::check_gguf_arch(&g)?;
                let name = prompter::model_name(&g, path);
                let prompter = Prompter::from_gguf(&g, name.clone())?;
                let arch = arch::from_gguf(&mut g)?;
                (arch, name, prompter, Box::new(g))
            };
        #[cfg(feature = "cuda")]
        if let Device::Cuda(cuda) = device {
            // cudarc records and waits on CUDA events around every use of every buffer, so
            // that buffers shared between streams stay ordered: driver calls per operand of
            // every kernel, a large part of a short read's launch-bound time. Everything a
            // model does runs on its device's one stream (candle issues all work there and
            // refuses tensors of another device), which orders every use already, so the
            // tracking is turned off before the weights are created.
            // SAFETY: see above; no tensor of this device is used on another stream.
            unsafe { cuda.disable_event_tracking() };
        }
        let transformer = Transformer::load(
            source.as_mut(),
            &arch,
            device,
            options.weights,
            options.kernels,
            options.matmuls,
        )?;
        let dims = transformer.dims().clone();
        if prompter.vocab_len() > dims.vocab_size {
            return Err(source.err(format!(
                "the tokenizer has {} tokens but the output head only {} rows",
                prompter.vocab_len(),
                dims.vocab_size
            )));
        }
        // On CUDA, say when the family keeps the model off the fused kernels.
        let candle_why = match arch.fused_blocker() {
            Some(why) if device.is_cuda() && !transformer.is_fused() => {
                format!(" (candle ops: the fused kernels lack {why})")
            }
            _ => String::new(),
        };
        let info = ModelInfo {
            name,
            arch: arch.family.to_string(),
            file: path.to_path_buf(),
            n_layers: dims.n_layers,
            vocab_size: dims.vocab_size,
            context_length: dims.context_length,
            forward: format!(
                "{} {}{}{candle_why}",
                if device.is_cpu() { "cpu" } else { "cuda" },
                options.weights.label(),
                if transformer.is_fused() { " fused" } else { "" }
            )
            .to_lowercase(),
        };
        tracing::info!(
            model = %info.name, arch = %info.arch, layers = info.n_layers, vocab = info.vocab_size,
            context = info.context_length, pre = %prompter.pre_tokenizer(), device = ?device,
            weights = ?options.weights, fused = transformer.is_fused(), forward = %info.forward,
            secs = t0.elapsed().as_secs_f32(), "model loaded"
        );
        Ok(Model {
            info,
            prompter,
            transformer,
        })
    }

    /// Facts about the loaded model.
    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    /// The transformer itself, for callers that need [`Transformer::forward_with`].
    pub fn transformer(&self) -> &Transformer {
        &self.transformer
    }

    /// The device the weights live on (inputs are created there).
    pub fn device(&self) -> &Device {
        self.transformer.device()
    }

    /// The model's tokenizer and chat template, which every text method here uses.
    pub fn prompter(&self) -> &Prompter {
        &self.prompter
    }

    /// Template text written after the generation prompt of every rendered prompt, e.g. an
    /// empty reasoning block `<think>\n\n</think>\n\n` for a model that would otherwise
    /// reason before answering. It is template text: control tokens in it are recognised.
    /// The server sets it once at startup when its answer-slot self-check needs it, before the
    /// model is shared; empty (the default) adds nothing.
    pub fn set_answer_suffix(&self, suffix: impl Into<String>) {
        self.prompter.set_answer_suffix(suffix);
    }

    /// The current answer suffix (empty when none is set).
    pub fn answer_suffix(&self) -> String {
        self.prompter.answer_suffix()
    }

    /// Whether `text` is exactly one token of the vocabulary that the tokenizer matches as a
    /// whole (a control or user-defined added token such as `<think>`), so that writing it into
    /// a prompt gives that token and not pieces of it.
    pub fn is_added_token(&self, text: &str) -> bool {
        self.prompter.is_added_token(text)
    }

    /// Renders `messages` with the model's chat template (`add_generation_prompt=true`,
    /// `enable_thinking=false`, any open `<think>` block or output channel closed, then the
    /// [answer suffix](Model::set_answer_suffix)) and tokenizes the result.
    /// The prompt ends exactly where the assistant's first answer token goes. A base model
    /// without a template gets a [`ModelError::Template`].
    ///
    /// Control tokens (`<|im_start|>`, `<|im_end|>`, `<|endoftext|>` ...) come only from the
    /// template's own text: message contents are tokenized as plain text, so a content that
    /// spells `<|im_end|>` cannot end its turn or forge another role (see
    /// [`ChatTemplate::render_marked`](template::ChatTemplate) and
    /// `GgufTokenizer::encode_parts`). Prompts whose contents contain no control-token string
    /// get exactly the ids of tokenizing the whole text with control tokens recognised. A role
    /// that contains a control-token string is refused, and so is such a content when the
    /// template transforms contents so that they cannot be located in the text.
    pub fn render(&self, messages: &[ChatMessage]) -> Result<Prompt> {
        self.prompter.render(messages)
    }

    /// [`Model::render`] that looks up the ids of long runs of text (an input of kilobytes)
    /// in the model's token cache and stores them there, so a text asked about again is not
    /// tokenized again. Entries are shared only between calls with the same `salt`: a hit is
    /// faster than a miss, so callers that must not learn about each other's texts (the
    /// server's tenants) pass different salts. The tokens are the same as [`Model::render`]'s.
    pub fn render_cached(&self, messages: &[ChatMessage], salt: u64) -> Result<Prompt> {
        self.prompter.render_cached(messages, salt)
    }

    /// Sets the token cache's memory budget in bytes, evicting down to it; 0 turns the cache
    /// off. A loaded model starts with 256 MiB.
    pub fn set_token_cache_bytes(&self, bytes: usize) {
        self.prompter.set_token_cache_bytes(bytes);
    }

    /// What the token cache has done and holds.
    pub fn token_cache_stats(&self) -> TokenCacheStats {
        self.prompter.token_cache_stats()
    }

    /// Token ids of each label read at the prompt's answer slot. Each label, appended to the
    /// prompt text, must tokenize to exactly one new token, must leave the prompt's tokens
    /// unchanged, and must decode back to itself; labels must be distinct tokens. Otherwise a
    /// [`ModelError::Label`] names the label and the reason.
    ///
    /// The label is plain text (a control-token string is not a control token) and is
    /// tokenized together with the prompt's text after its last control token, which is
    /// where the prompt's tokenization can merge with it (control tokens always split).
    pub fn label_ids(&self, prompt: &Prompt, labels: &[String]) -> Result<Vec<u32>> {
        self.prompter.label_ids(prompt, labels)
    }

    /// [`Model::label_ids`], remembered under `salt`: the ids depend only on the prompt's
    /// tokens after its last control token (for chat prompts the generation prompt's role
    /// line, the same in every prompt) and the labels, so prompts that end alike are checked
    /// once. Entries are shared only between calls with the same `salt`, and none are kept
    /// while the token cache is off ([`Model::set_token_cache_bytes`] 0).
    pub fn label_ids_cached(
        &self,
        prompt: &Prompt,
        labels: &[String],
        salt: u64,
    ) -> Result<Vec<u32>> {
        self.prompter.label_ids_cached(prompt, labels, salt)
    }

    /// One forward pass over `tokens`, read at the last position: exact log-softmax over the
    /// whole vocabulary, gathered at `label_ids`. Refuses empty prompts, prompts longer than
    /// the context length ([`ModelError::PromptTooLong`]) and ids outside the vocabulary.
    pub fn read(&self, tokens: &[u32], label_ids: &[u32]) -> Result<Readout> {
        if tokens.is_empty() {
            return Err(ModelError::EmptyPrompt);
        }
        if tokens.len() > self.info.context_length {
            return Err(ModelError::PromptTooLong {
                tokens: tokens.len(),
                limit: self.info.context_length,
            });
        }
        let (hidden, _) = self
            .transformer
            .forward(tokens, 0, None, &[tokens.len() - 1])?;
        self.read_hidden(&hidden, label_ids)
    }

    /// Output norm + head over one final hidden row (from [`Model::forward`]) and the label
    /// readout: the second half of [`Model::read`], for callers that manage the KV cache.
    pub fn read_hidden(&self, hidden: &Tensor, label_ids: &[u32]) -> Result<Readout> {
        let logits = self.transformer.head(hidden)?;
        readout::read_labels(&logits, label_ids)
    }

    /// Full logits `(rows, vocab)` for hidden rows from [`Model::forward`]; for diagnostics
    /// and tests (reads should use [`Model::read_hidden`]).
    pub fn logits(&self, hidden: &Tensor) -> Result<Tensor> {
        self.transformer.head(hidden)
    }

    /// The transformer forward with an explicit KV cache; see [`Transformer::forward`].
    /// Prefill a shared prefix with `forward(prefix, 0, None, &[])`-style calls and run each
    /// suffix with `forward(suffix, prefix.len(), Some(&cache), &[suffix.len() - 1])`.
    pub fn forward(
        &self,
        tokens: &[u32],
        start_pos: usize,
        cache: Option<&KvCache>,
        rows: &[usize],
    ) -> Result<(Tensor, KvCache)> {
        self.transformer.forward(tokens, start_pos, cache, rows)
    }

    /// Runs several suffixes against one shared prefix in a single batched pass (each suffix
    /// attends to the prefix and itself; see [`Transformer::forward_suffixes`]) and reads
    /// `label_ids[i]` after suffix `i`. On CPU each readout equals [`Model::read`] of
    /// prefix + suffix up to float rounding: `models/tests` finds them bit for bit equal for
    /// the passes it builds, while through the server, with longer prompts packed beside
    /// other requests' or continuing a cached prefix, SmolLM2's f32 probabilities were seen
    /// to move by up to ~7e-6.
    pub fn read_suffixes(
        &self,
        prefix: Option<&KvCache>,
        suffixes: &[&[u32]],
        label_ids: &[&[u32]],
    ) -> Result<Vec<Readout>> {
        let segments: Vec<Segment<'_>> = suffixes
            .iter()
            .map(|&tokens| Segment { prefix, tokens })
            .collect();
        self.read_packed(&segments, label_ids)
    }

    /// Runs segments that continue different cached prefixes in one pass (see
    /// [`Transformer::forward_packed`]) and reads `label_ids[i]` after segment `i`: how
    /// questions of several requests share one forward. On CPU each readout equals
    /// [`Model::read`] of its prefix + segment up to float rounding (see
    /// [`Model::read_suffixes`]).
    pub fn read_packed(
        &self,
        segments: &[Segment<'_>],
        label_ids: &[&[u32]],
    ) -> Result<Vec<Readout>> {
        if segments.len() != label_ids.len() {
            return Err(ModelError::Compute(format!(
                "{} segments but {} label sets",
                segments.len(),
                label_ids.len()
            )));
        }
        let hidden = self.transformer.forward_packed(segments)?;
        let logits = self.transformer.head(&hidden)?;
        readout::read_labels_rows(&logits, label_ids)
    }

    /// [`Model::read_packed`], and also each segment's cache (its prefix and its own rows,
    /// [`Transformer::forward_packed_keeping`]): the reads are the same.
    pub fn read_packed_keeping(
        &self,
        segments: &[Segment<'_>],
        label_ids: &[&[u32]],
    ) -> Result<(Vec<Readout>, Vec<KvCache>)> {
        if segments.len() != label_ids.len() {
            return Err(ModelError::Compute(format!(
                "{} segments but {} label sets",
                segments.len(),
                label_ids.len()
            )));
        }
        let (hidden, caches) = self.transformer.forward_packed_keeping(segments)?;
        let logits = self.transformer.head(&hidden)?;
        Ok((readout::read_labels_rows(&logits, label_ids)?, caches))
    }

    /// Reads `tokens` after `cache` (or from position 0) like [`Model::read`], and also returns
    /// the KV of everything read, so the caller can keep the prompt's prefix for later
    /// requests. One forward pass when the prompt fits one prefill chunk; longer prompts run
    /// as chunks ([`Model::prefill`]), the read in the last one. Returns the readout, the
    /// cache, and the number of passes run.
    pub fn read_and_cache(
        &self,
        tokens: &[u32],
        cache: Option<&KvCache>,
        label_ids: &[u32],
    ) -> Result<(Readout, KvCache, usize)> {
        if tokens.is_empty() {
            return Err(ModelError::EmptyPrompt);
        }
        let held = cache.map_or(0, KvCache::len);
        let chunk = self.chunk_rows(held + tokens.len(), self.max_chunk());
        let head = last_chunk_start(held, tokens.len(), chunk);
        let (cache, mut passes) = if head > 0 {
            let filled = self.prefill(&tokens[..head], cache)?;
            (Some(filled), head.div_ceil(chunk))
        } else {
            (cache.cloned(), 0)
        };
        let last = &tokens[head..];
        let (hidden, cache) =
            self.transformer
                .forward(last, held + head, cache.as_ref(), &[last.len() - 1])?;
        passes += 1;
        Ok((self.read_hidden(&hidden, label_ids)?, cache, passes))
    }

    /// Query rows per prefill chunk when the keys reach `keys` positions: as many as keep
    /// one chunk's attention scores within [`PREFILL_SCORE_BUDGET`], at most `max_chunk`.
    /// Most rows of a prefill chunk for this model ([`FUSED_PREFILL_MAX_CHUNK`] on the fused
    /// path, else [`PREFILL_MAX_CHUNK`]).
    fn max_chunk(&self) -> usize {
        if self.transformer.is_fused() {
            FUSED_PREFILL_MAX_CHUNK
        } else {
            PREFILL_MAX_CHUNK
        }
    }

    /// Rows of one prefill chunk once the keys reach `keys` positions: how [`Model::prefill`]
    /// and [`Model::read_and_cache`] cut a long prompt. A caller that checks something between
    /// chunks (the host's scheduler: cancelled requests, other tenants' short reads) cuts its
    /// own calls to this size, so each is one pass and the reads stay what they were.
    pub fn prefill_chunk_rows(&self, keys: usize) -> usize {
        self.chunk_rows(keys, self.max_chunk())
    }

    /// On the fused path no scores are materialised: chunks are `max_chunk` rows.
    fn chunk_rows(&self, keys: usize, max_chunk: usize) -> usize {
        if self.transformer.is_fused() {
            return max_chunk.max(1);
        }
        let heads = self.transformer.dims().n_head;
        (PREFILL_SCORE_BUDGET / (heads * keys.max(1))).clamp(1, max_chunk.max(1))
    }

    /// Extends `cache` (or starts from nothing) by `tokens`, in chunks small enough that one
    /// chunk's attention scores stay within [`PREFILL_SCORE_BUDGET`]: a 32k-token state is
    /// prefilled in pieces instead of materialising a 32k x 32k score matrix per head.
    pub fn prefill(&self, tokens: &[u32], cache: Option<&KvCache>) -> Result<KvCache> {
        self.prefill_in_chunks(tokens, cache, self.max_chunk())
    }

    /// [`Model::prefill`] with chunks of at most `max_chunk` tokens (tests use small chunks
    /// to check that chunking does not change a read).
    pub fn prefill_in_chunks(
        &self,
        tokens: &[u32],
        cache: Option<&KvCache>,
        max_chunk: usize,
    ) -> Result<KvCache> {
        let mut cache = cache.cloned();
        // One size for every chunk: the keys each ends at grow, but the budget is set by
        // where the last one ends. The remainder first ([`chunk_lengths`]).
        let held = cache.as_ref().map_or(0, |c| c.len());
        let rows = self.chunk_rows(held + tokens.len(), max_chunk);
        let mut done = 0;
        for n in chunk_lengths(held, tokens.len(), rows) {
            let held = cache.as_ref().map_or(0, |c| c.len());
            let (_, next) =
                self.transformer
                    .forward(&tokens[done..done + n], held, cache.as_ref(), &[])?;
            cache = Some(next);
            done += n;
        }
        cache.ok_or(ModelError::EmptyPrompt)
    }

    /// Token ids of `text` with special tokens (`<|im_start|>` ...) recognised; no BOS added.
    pub fn tokenize(&self, text: &str) -> Result<Vec<u32>> {
        self.prompter.tokenize(text)
    }

    /// Text of `ids`, special tokens written out.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.prompter.decode(ids)
    }

    /// The stored vocabulary string of a token id (byte-level form, e.g. `Ġworld`).
    pub fn token_str(&self, id: u32) -> Option<&str> {
        self.prompter.token_str(id)
    }

    /// The id of a stored vocabulary string.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.prompter.token_id(token)
    }
}
