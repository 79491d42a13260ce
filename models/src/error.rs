//! The crate's one error type.

use std::path::PathBuf;

/// Every failure of `decide-models`, as one enum so the host maps errors to HTTP status in one
/// place. Messages name the offending file, key, label or limit, because they end up in front
/// of an operator (load errors) or an API caller (label and prompt-length errors).
#[derive(thiserror::Error, Debug)]
pub enum ModelError {
    /// The GGUF file could not be opened, parsed, or lacks a tensor or metadata key we need.
    #[error("cannot load model {}: {reason}", path.display())]
    Load {
        /// The file being loaded.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// The model's architecture (GGUF `general.architecture`, Hugging Face `model_type`) has
    /// no forward pass here.
    #[error(
        "unsupported model architecture `{arch}`; supported: {}",
        crate::arch::supported()
    )]
    UnsupportedArch {
        /// The `general.architecture` value found in the file.
        arch: String,
    },
    /// The tokenizer could not be built from the GGUF metadata, or failed on some text.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// The chat template is missing, does not compile, or failed while rendering.
    #[error("chat template: {0}")]
    Template(String),
    /// An option label cannot be read as one token at the answer position.
    #[error("label {label:?} cannot be read: {reason}")]
    Label {
        /// The label as given.
        label: String,
        /// Why it is refused.
        reason: String,
    },
    /// The prompt does not fit the model's context window.
    #[error(
        "prompt has {tokens} tokens, more than the model's context length of {limit} tokens; \
         shorten the input"
    )]
    PromptTooLong {
        /// Tokens in the prompt.
        tokens: usize,
        /// The model's context length.
        limit: usize,
    },
    /// A forward pass was asked for zero tokens.
    #[error("empty prompt: a read needs at least one token")]
    EmptyPrompt,
    /// A token id (prompt or label) does not exist in the model's vocabulary.
    #[error("token id {id} is outside the model's vocabulary of {vocab_size} tokens")]
    TokenOutOfRange {
        /// The offending id.
        id: u32,
        /// Number of rows of the output head.
        vocab_size: usize,
    },
    /// A KV cache does not fit the forward pass it was given to (wrong model or position).
    #[error("KV cache mismatch: {0}")]
    Cache(String),
    /// A tensor operation failed during a forward pass (device out of memory, kernel error).
    #[error("compute: {0}")]
    Compute(String),
}

impl From<candle_core::Error> for ModelError {
    fn from(e: candle_core::Error) -> Self {
        ModelError::Compute(e.to_string())
    }
}

/// Crate-local result alias.
pub type Result<T, E = ModelError> = std::result::Result<T, E>;
