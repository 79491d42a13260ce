//! The text side of a model: its tokenizer and chat template, which turn chat messages into
//! the token ids of a prompt and option labels into the ids read at the answer slot.
//!
//! A [`Model`](crate::Model) holds one and delegates its text methods to it. It is a type of
//! its own because it needs only the GGUF metadata: [`Prompter::load`] builds it without
//! reading a single weight, so what only prepares prompts (tests of the template, the fuzz
//! targets that feed arbitrary text to the tokenizer) does not hold the weights in memory.

use std::path::Path;

use crate::error::{ModelError, Result};
use crate::gguf::Gguf;
use crate::template::ChatTemplate;
use crate::token_cache::{self, TokenCacheStats};
use crate::tokenizer::GgufTokenizer;
use crate::{ChatMessage, Prompt};

/// A model's tokenizer and chat template (see the module docs).
pub struct Prompter {
    /// The model's name, for error messages.
    name: String,
    tokenizer: GgufTokenizer,
    template: Option<ChatTemplate>,
    /// Template text appended after the generation prompt (see [`Prompter::set_answer_suffix`]).
    /// Behind a lock because the server's self-check tries suffixes on a model that is
    /// already shared with its worker thread (before any request is served).
    answer_suffix: std::sync::RwLock<String>,
    /// Label ids of prompt ends seen before, per salt (see [`Prompter::label_ids_cached`]).
    label_memo: token_cache::Memo<(Vec<u32>, Vec<String>), [u32]>,
}

/// A model's name: its `general.name`, else the file stem of `path`.
pub(crate) fn model_name(g: &Gguf, path: &Path) -> String {
    g.str_opt("general.name")
        .map(str::to_string)
        .unwrap_or_else(|| {
            path.file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default()
        })
}

impl Prompter {
    /// Reads the tokenizer and chat template of the GGUF file at `path` from its metadata
    /// only (no tensor data is read). The model is named by `general.name`, else the file
    /// stem.
    /// A Hugging Face model directory (see [`crate::Model::load`]) is read the same way:
    /// its `tokenizer.json` and chat template, no weights.
    pub fn load(path: &Path) -> Result<Prompter> {
        if path.is_dir() {
            let dir = crate::hf::HfDir::open(path)?;
            return Prompter::from_hf(&dir);
        }
        let g = Gguf::open(path)?;
        Prompter::from_gguf(&g, model_name(&g, path))
    }

    /// The tokenizer (`tokenizer.json`) and chat template of a Hugging Face directory.
    pub(crate) fn from_hf(dir: &crate::hf::HfDir) -> Result<Prompter> {
        let bos = dir.special("bos_token");
        let eos = dir.special("eos_token");
        let tokenizer = GgufTokenizer::from_tokenizer_json(
            &dir.tokenizer_json()?,
            bos.as_deref(),
            eos.as_deref(),
        )?;
        let template = match dir.chat_template()? {
            Some(src) => Some(ChatTemplate::new(
                &src,
                bos.unwrap_or_default(),
                eos.unwrap_or_default(),
            )?),
            None => None,
        };
        Ok(Prompter {
            name: dir.name(),
            tokenizer,
            template,
            answer_suffix: std::sync::RwLock::new(String::new()),
            label_memo: token_cache::Memo::new(),
        })
    }

    /// Builds the tokenizer and compiles the chat template (if the file has one) of an open
    /// file; `name` names the model in errors.
    pub(crate) fn from_gguf(g: &Gguf, name: String) -> Result<Prompter> {
        let tokenizer = GgufTokenizer::from_gguf(g)?;
        let tok_str = |id: Option<u32>| {
            id.and_then(|i| tokenizer.token_str(i))
                .unwrap_or_default()
                .to_string()
        };
        let template = match g.str_opt("tokenizer.chat_template") {
            Some(src) => Some(ChatTemplate::new(
                src,
                tok_str(tokenizer.bos),
                tok_str(tokenizer.eos),
            )?),
            None => None,
        };
        Ok(Prompter {
            name,
            tokenizer,
            template,
            answer_suffix: std::sync::RwLock::new(String::new()),
            label_memo: token_cache::Memo::new(),
        })
    }

    /// The tokenizer as a Hugging Face `tokenizer.json` (tokenizers' own serialization of
    /// the pipeline decide built): with the chat template, what a Hugging Face directory of
    /// the same model needs (`models/examples/hf_tokenizer.rs`).
    pub fn tokenizer_json(&self) -> Result<String> {
        self.tokenizer.to_json()
    }

    /// Number of tokens of the vocabulary (`tokenizer.ggml.tokens`).
    pub fn vocab_len(&self) -> usize {
        self.tokenizer.len()
    }

    /// The `tokenizer.ggml.pre` value the tokenizer's pipeline was built for (`smollm`,
    /// `qwen2`, `gpt2`): which text transformations tokenizing makes (`qwen2` normalizes to
    /// NFC, so decoding gives back the NFC form of a text, not the text itself).
    pub fn pre_tokenizer(&self) -> &str {
        &self.tokenizer.pre
    }

    /// The BOS token id, when the file names one.
    pub fn bos(&self) -> Option<u32> {
        self.tokenizer.bos
    }

    /// Whether prompts start with BOS (`tokenizer.ggml.add_bos_token`).
    pub fn adds_bos(&self) -> bool {
        self.tokenizer.add_bos
    }

    /// Whether `id` is a control token (`<|im_start|>`, `<|endoftext|>`, ...).
    pub fn is_control(&self, id: u32) -> bool {
        self.tokenizer.is_control(id)
    }

    /// Whether `text` contains the string of any control token.
    pub fn contains_control(&self, text: &str) -> bool {
        self.tokenizer.contains_control(text)
    }

    /// See [`Model::set_answer_suffix`](crate::Model::set_answer_suffix).
    pub fn set_answer_suffix(&self, suffix: impl Into<String>) {
        *self
            .answer_suffix
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = suffix.into();
    }

    /// The current answer suffix (empty when none is set).
    pub fn answer_suffix(&self) -> String {
        self.answer_suffix
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// See [`Model::is_added_token`](crate::Model::is_added_token).
    pub fn is_added_token(&self, text: &str) -> bool {
        match self.tokenizer.token_id(text) {
            Some(id) => self.tokenizer.encode(text).ok().as_deref() == Some(&[id][..]),
            None => false,
        }
    }

    /// See [`Model::render`](crate::Model::render).
    pub fn render(&self, messages: &[ChatMessage]) -> Result<Prompt> {
        self.render_salted(messages, None)
    }

    /// See [`Model::render_cached`](crate::Model::render_cached).
    pub fn render_cached(&self, messages: &[ChatMessage], salt: u64) -> Result<Prompt> {
        self.render_salted(messages, Some(salt))
    }

    /// Sets the token cache's memory budget in bytes, evicting down to it; 0 turns the cache
    /// off. A new prompter starts with 256 MiB.
    pub fn set_token_cache_bytes(&self, bytes: usize) {
        self.tokenizer.cache.set_budget(bytes);
    }

    /// What the token cache has done and holds.
    pub fn token_cache_stats(&self) -> TokenCacheStats {
        self.tokenizer.cache.stats()
    }

    /// [`Prompter::render`], through the token cache under `salt` when there is one.
    fn render_salted(&self, messages: &[ChatMessage], salt: Option<u64>) -> Result<Prompt> {
        let template = self.template.as_ref().ok_or_else(|| {
            ModelError::Template(format!(
                "model {} has no chat template (GGUF key `tokenizer.chat_template`); a base \
                 model cannot be prompted with chat messages",
                self.name
            ))
        })?;
        if let Some(m) = messages
            .iter()
            .find(|m| self.tokenizer.contains_control(&m.role))
        {
            return Err(ModelError::Template(format!(
                "the role {:?} contains a control token",
                m.role
            )));
        }
        let rendered = template.render_marked(messages)?;
        let mut text = rendered.text;
        // Template text after the last content span: it tokenizes as a template part.
        text.push_str(&self.answer_suffix());
        let tokens = match rendered.content {
            Some(spans) => {
                let mut parts: Vec<(&str, bool)> = Vec::with_capacity(2 * spans.len() + 1);
                let mut at = 0;
                for span in spans {
                    parts.push((&text[at..span.start], false));
                    parts.push((&text[span.clone()], true));
                    at = span.end;
                }
                parts.push((&text[at..], false));
                self.with_bos(self.tokenizer.encode_parts(&parts, salt)?)
            }
            None => {
                if messages
                    .iter()
                    .any(|m| self.tokenizer.contains_control(&m.content))
                {
                    return Err(ModelError::Template(format!(
                        "a message contains a control token string, and model {}'s chat \
                         template transforms message contents, so they cannot be told apart \
                         from the template's own control tokens",
                        self.name
                    )));
                }
                self.with_bos(self.tokenizer.encode(&text)?)
            }
        };
        Ok(Prompt { text, tokens })
    }

    /// See [`Model::label_ids`](crate::Model::label_ids).
    pub fn label_ids(&self, prompt: &Prompt, labels: &[String]) -> Result<Vec<u32>> {
        let tail_tokens = self.prompt_tail(prompt);
        let tail = self.tokenizer.decode(tail_tokens)?;
        let n = tail_tokens.len();
        let mut ids: Vec<u32> = Vec::with_capacity(labels.len());
        for (i, label) in labels.iter().enumerate() {
            let refuse = |reason: String| ModelError::Label {
                label: label.clone(),
                reason,
            };
            if label.is_empty() {
                return Err(refuse("the label is empty".into()));
            }
            let toks = self.tokenizer.encode_plain(&format!("{tail}{label}"))?;
            if toks.len() < n || toks[..n] != tail_tokens[..] {
                return Err(refuse(
                    "appended to the prompt it merges with the prompt's last token(s), so the \
                     tokens before the answer would change"
                        .into(),
                ));
            }
            let new = &toks[n..];
            if new.len() != 1 {
                let pieces: Vec<String> = new
                    .iter()
                    .map(|&t| self.tokenizer.decode(&[t]).unwrap_or_default())
                    .collect();
                return Err(refuse(format!(
                    "it is {} tokens at the answer position ({pieces:?}), not one; use a shorter label",
                    new.len()
                )));
            }
            let id = new[0];
            let back = self.tokenizer.decode(&[id])?;
            if &back != label {
                return Err(refuse(format!("its token {id} decodes to {back:?}")));
            }
            if let Some(j) = ids.iter().position(|&x| x == id) {
                return Err(refuse(format!(
                    "it is the same token as label {:?}",
                    labels[j]
                )));
            }
            debug_assert_eq!(ids.len(), i);
            ids.push(id);
        }
        Ok(ids)
    }

    /// See [`Model::label_ids_cached`](crate::Model::label_ids_cached).
    pub fn label_ids_cached(
        &self,
        prompt: &Prompt,
        labels: &[String],
        salt: u64,
    ) -> Result<Vec<u32>> {
        if !self.tokenizer.cache.enabled() {
            return self.label_ids(prompt, labels);
        }
        let key = (self.prompt_tail(prompt).to_vec(), labels.to_vec());
        let ids = self.label_memo.get(salt, &key, |_| {
            self.label_ids(prompt, labels).map(Into::into)
        })?;
        Ok(ids.to_vec())
    }

    /// The prompt's tokens after its last control token: where a label can merge with it.
    fn prompt_tail<'p>(&self, prompt: &'p Prompt) -> &'p [u32] {
        let head = prompt
            .tokens
            .iter()
            .rposition(|&t| self.tokenizer.is_control(t))
            .map_or(0, |j| j + 1);
        &prompt.tokens[head..]
    }

    /// Token ids of `text` with special tokens (`<|im_start|>` ...) recognised; no BOS added.
    pub fn tokenize(&self, text: &str) -> Result<Vec<u32>> {
        self.tokenizer.encode(text)
    }

    /// Token ids of `text` with control-token strings read as plain text, as message contents
    /// are tokenized; no BOS added.
    pub fn tokenize_plain(&self, text: &str) -> Result<Vec<u32>> {
        self.tokenizer.encode_plain(text)
    }

    /// Text of `ids`, special tokens written out.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.tokenizer.decode(ids)
    }

    /// The stored vocabulary string of a token id (byte-level form, e.g. `Ġworld`).
    pub fn token_str(&self, id: u32) -> Option<&str> {
        self.tokenizer.token_str(id)
    }

    /// The id of a stored vocabulary string.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.tokenizer.token_id(token)
    }

    /// `toks` with BOS in front when the model asks for it and it is not there yet.
    fn with_bos(&self, mut toks: Vec<u32>) -> Vec<u32> {
        if let (true, Some(bos)) = (self.tokenizer.add_bos, self.tokenizer.bos) {
            if toks.first() != Some(&bos) {
                toks.insert(0, bos);
            }
        }
        toks
    }
}

/// Writes the tokenizer and chat template of the GGUF file at `gguf` as a Hugging Face
/// directory's `tokenizer.json` and `tokenizer_config.json` in `dir` (created if missing), so
/// that a checkpoint made from or beside the same model reads text as the GGUF does, in decide
/// and in vLLM alike (`examples/hf_tokenizer.rs`, `examples/gguf_to_hf.rs`). Returns the
/// [`Prompter`] they were written from.
pub fn write_hf_tokenizer(gguf: &Path, dir: &Path) -> Result<Prompter> {
    let g = Gguf::open(gguf)?;
    let prompter = Prompter::from_gguf(&g, model_name(&g, gguf))?;
    let token = |key: &str| -> Option<String> {
        let id = u32::try_from(g.usize_opt(key)?).ok()?;
        prompter.token_str(id).map(str::to_string)
    };
    let config = serde_json::json!({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": g.str_opt("tokenizer.chat_template"),
        "bos_token": token("tokenizer.ggml.bos_token_id"),
        "eos_token": token("tokenizer.ggml.eos_token_id"),
        "add_bos_token": prompter.adds_bos(),
        "model_max_length": 131072,
    });
    let write = |name: &str, text: String| {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|e| ModelError::Load {
            path,
            reason: format!("cannot write: {e}"),
        })
    };
    std::fs::create_dir_all(dir).map_err(|e| ModelError::Load {
        path: dir.to_path_buf(),
        reason: format!("cannot create: {e}"),
    })?;
    write("tokenizer.json", prompter.tokenizer_json()?)?;
    let config = serde_json::to_string_pretty(&config).expect("a JSON value serializes");
    write("tokenizer_config.json", config)?;
    Ok(prompter)
}
