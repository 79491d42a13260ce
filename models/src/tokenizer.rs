//! The tokenizer, built from GGUF metadata (`tokenizer.ggml.*`); no tokenizer.json ships.
//!
//! We build the `tokenizers::Tokenizer` ourselves instead of using candle's
//! `TokenizerFromGguf`, because candle's conversion is wrong for SmolLM2: the `smollm`
//! pre-tokenizer splits every digit on its own *before* GPT-2 byte-level splitting, and candle
//! treats unknown `pre` values as plain GPT-2 with a leading-space marker. A wrong tokenizer
//! does not fail loudly, it quietly shifts every probability we read, so a `pre` value we have
//! not checked against reference ids is refused by name rather than guessed.
//!
//! Pipelines (each mirrors the model's Hugging Face `tokenizer.json`):
//! - `smollm`: Digits(individual) -> ByteLevel(GPT-2 regex, no prefix space).
//! - `qwen2`: NFC -> Split(Qwen2 regex, isolated) -> ByteLevel(no regex, no prefix space).
//! - `gpt2`: ByteLevel(GPT-2 regex, no prefix space).
//!
//! Control tokens (`token_type` 3) become special added tokens and user-defined ones (4)
//! plain added tokens, so `<|im_start|>` in rendered chat text is one token, as in llama.cpp
//! and Hugging Face.
//!
//! Control tokens may only come from the chat template's own text: [`GgufTokenizer::encode_parts`]
//! tokenizes a rendered prompt whose message contents are marked, matching control tokens in
//! the template pieces only, and encodes everything between them with a second tokenizer that
//! reads control-token strings as plain text (`set_encode_special_tokens`). So a message that
//! contains `<|im_start|>` or `<|im_end|>` cannot forge a role boundary.

use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::normalizers::unicode::NFC;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::{AddedToken, SplitDelimiterBehavior, Tokenizer};

use crate::error::{ModelError, Result};
use crate::gguf::Gguf;

/// Qwen2's pre-tokenizer regex: the one in its tokenizer.json, with the case-insensitive
/// contraction group `(?i:'s|'t|...)` spelled out per letter (same as candle's conversion).
const QWEN2_REGEX: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// llama.cpp token types (`tokenizer.ggml.token_type`).
const TOKEN_TYPE_CONTROL: i64 = 3;
const TOKEN_TYPE_USER_DEFINED: i64 = 4;

/// `tokenizer.ggml.pre` values with a pipeline here.
pub(crate) const SUPPORTED_PRE: &[&str] = &["smollm", "qwen2", "gpt2"];

/// A byte-level BPE tokenizer plus the BOS/EOS facts the chat template and prompt need.
pub(crate) struct GgufTokenizer {
    inner: Tokenizer,
    /// `inner` with control tokens not matched in text (they are read as plain text).
    plain: Tokenizer,
    /// Whether each id is a control token (`token_type` 3), i.e. a special added token.
    control: Vec<bool>,
    /// The strings of the control tokens.
    control_strs: Vec<String>,
    /// Token strings by id, as stored in the GGUF file.
    tokens: Vec<String>,
    /// Beginning-of-sequence token id, if the file names one.
    pub bos: Option<u32>,
    /// End-of-sequence token id, if the file names one.
    pub eos: Option<u32>,
    /// Whether prompts start with BOS (`tokenizer.ggml.add_bos_token`).
    pub add_bos: bool,
    /// The `tokenizer.ggml.pre` value the pipeline was built for.
    pub pre: String,
}

impl GgufTokenizer {
    /// Builds the tokenizer from `tokenizer.ggml.{model,pre,tokens,merges,token_type}`.
    pub fn from_gguf(g: &Gguf) -> Result<Self> {
        let tok_err = |m: String| ModelError::Tokenizer(format!("{}: {m}", g.path.display()));
        let model = g.str("tokenizer.ggml.model")?;
        if model != "gpt2" {
            return Err(tok_err(format!(
                "unsupported tokenizer type `tokenizer.ggml.model` = `{model}`; only byte-level \
                 BPE (`gpt2`) tokenizers are supported"
            )));
        }
        let pre = g
            .str_opt("tokenizer.ggml.pre")
            .unwrap_or("default")
            .to_string();
        let (normalizer, pre_tokenizer) = pipeline(&pre).ok_or_else(|| {
            tok_err(format!(
                "unsupported pre-tokenizer `tokenizer.ggml.pre` = `{pre}`; supported: {}",
                SUPPORTED_PRE.join(", ")
            ))
        })?;

        let tokens = g.str_array("tokenizer.ggml.tokens")?;
        let merges = g
            .str_array("tokenizer.ggml.merges")?
            .into_iter()
            .map(|m| match m.split_once(' ') {
                Some((a, b)) => Ok((a.to_string(), b.to_string())),
                None => Err(tok_err(format!("invalid merge entry {m:?}"))),
            })
            .collect::<Result<Vec<_>>>()?;
        let mut vocab = Vocab::with_capacity(tokens.len());
        for (i, t) in tokens.iter().enumerate() {
            // Duplicate strings (padding entries) keep their first id, like llama.cpp.
            vocab.entry(t.clone()).or_insert(i as u32);
        }
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .build()
            .map_err(|e| tok_err(format!("cannot build BPE model: {e}")))?;

        let mut inner = Tokenizer::new(bpe);
        if let Some(n) = normalizer {
            inner
                .with_normalizer(Some(n))
                .map_err(|e| tok_err(format!("cannot set normalizer: {e}")))?;
        }
        inner.with_pre_tokenizer(Some(pre_tokenizer));
        inner.with_decoder(Some(ByteLevelDecoder::default()));

        // Control and user-defined tokens are matched in text before BPE.
        let mut control = vec![false; tokens.len()];
        let mut control_strs = Vec::new();
        if let Some(types) = g.int_array_opt("tokenizer.ggml.token_type")? {
            let mut special = Vec::new();
            let mut user = Vec::new();
            for (id, ty) in types.iter().enumerate() {
                let Some(t) = tokens.get(id) else { break };
                match *ty {
                    TOKEN_TYPE_CONTROL => {
                        control[id] = true;
                        control_strs.push(t.clone());
                        special.push(AddedToken::from(t.clone(), true).normalized(false))
                    }
                    TOKEN_TYPE_USER_DEFINED => {
                        user.push(AddedToken::from(t.clone(), false).normalized(false))
                    }
                    _ => {}
                }
            }
            inner
                .add_special_tokens(special)
                .map_err(|e| tok_err(format!("cannot add special tokens: {e}")))?;
            inner
                .add_tokens(user)
                .map_err(|e| tok_err(format!("cannot add user-defined tokens: {e}")))?;
        }

        let mut plain = inner.clone();
        plain.set_encode_special_tokens(true);

        let id = |key: &str| {
            g.usize_opt(key)
                .map(|x| x as u32)
                .filter(|&x| (x as usize) < tokens.len())
        };
        Ok(Self {
            inner,
            plain,
            control,
            control_strs,
            bos: id("tokenizer.ggml.bos_token_id"),
            eos: id("tokenizer.ggml.eos_token_id"),
            add_bos: g.bool_opt("tokenizer.ggml.add_bos_token").unwrap_or(false),
            tokens,
            pre,
        })
    }

    /// Token ids of `text`, special tokens recognised, nothing added (no BOS).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self
            .inner
            .encode(text, false)
            .map_err(|e| ModelError::Tokenizer(format!("cannot tokenize text: {e}")))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Token ids of `text` with control-token strings read as plain text (no control token
    /// is ever matched; user-defined added tokens still are). Nothing added (no BOS).
    pub fn encode_plain(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self
            .plain
            .encode(text, false)
            .map_err(|e| ModelError::Tokenizer(format!("cannot tokenize text: {e}")))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Whether `id` is a control token (`<|im_start|>`, `<|endoftext|>`, ...).
    pub fn is_control(&self, id: u32) -> bool {
        self.control.get(id as usize).copied().unwrap_or(false)
    }

    /// Whether `text` contains the string of any control token.
    pub fn contains_control(&self, text: &str) -> bool {
        self.control_strs.iter().any(|c| text.contains(c.as_str()))
    }

    /// Token ids of the concatenation of `parts`, each `(text, is_content)`: control tokens are
    /// matched in template parts only (as [`GgufTokenizer::encode`] matches them there), and
    /// all text between two matched control tokens, content included, is encoded as one run
    /// with control-token strings read as plain text. When no content part contains a control
    /// token string, the result equals `encode` of the concatenated text: the added-token
    /// matcher splits the text at exactly the same control tokens, and the runs between them
    /// are the same strings.
    pub fn encode_parts(&self, parts: &[(&str, bool)]) -> Result<Vec<u32>> {
        let mut out = Vec::new();
        let mut run = String::new();
        for &(piece, is_content) in parts {
            if is_content {
                run.push_str(piece);
                continue;
            }
            let enc = self
                .inner
                .encode(piece, false)
                .map_err(|e| ModelError::Tokenizer(format!("cannot tokenize text: {e}")))?;
            let mut cursor = 0;
            for (&id, &(s, e)) in enc.get_ids().iter().zip(enc.get_offsets()) {
                if !self.is_control(id) {
                    continue;
                }
                if s < cursor || piece.get(s..e) != self.token_str(id) {
                    return Err(ModelError::Tokenizer(format!(
                        "control token {id} at bytes {s}..{e} of {piece:?} does not match its text"
                    )));
                }
                run.push_str(&piece[cursor..s]);
                out.extend(self.encode_plain(&run)?);
                run.clear();
                out.push(id);
                cursor = e;
            }
            run.push_str(&piece[cursor..]);
        }
        out.extend(self.encode_plain(&run)?);
        Ok(out)
    }

    /// Text of `ids`, special tokens written out (so decode(encode(x)) == x).
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        if let Some(&bad) = ids.iter().find(|&&id| id as usize >= self.tokens.len()) {
            return Err(ModelError::TokenOutOfRange {
                id: bad,
                vocab_size: self.tokens.len(),
            });
        }
        self.inner
            .decode(ids, false)
            .map_err(|e| ModelError::Tokenizer(format!("cannot decode ids: {e}")))
    }

    /// The stored string of a token (byte-level form, e.g. `Ġworld`).
    pub fn token_str(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(String::as_str)
    }

    /// The id of a stored token string, if it is in the vocabulary.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// Number of entries in `tokenizer.ggml.tokens`.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }
}

type Normalizer = tokenizers::normalizers::NormalizerWrapper;

/// The normalizer and pre-tokenizer for a `tokenizer.ggml.pre` value.
fn pipeline(pre: &str) -> Option<(Option<Normalizer>, PreTokenizerWrapper)> {
    Some(match pre {
        "smollm" => (
            None,
            Sequence::new(vec![
                Digits::new(true).into(),
                ByteLevel::new(false, true, true).into(),
            ])
            .into(),
        ),
        "qwen2" => {
            let split = Split::new(
                SplitPattern::Regex(QWEN2_REGEX.into()),
                SplitDelimiterBehavior::Isolated,
                false,
            )
            .expect("the Qwen2 regex compiles");
            (
                Some(NFC.into()),
                Sequence::new(vec![
                    split.into(),
                    ByteLevel::new(false, false, false).into(),
                ])
                .into(),
            )
        }
        "gpt2" => (None, ByteLevel::new(false, true, true).into()),
        _ => return None,
    })
}
