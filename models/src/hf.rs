//! A Hugging Face model directory: `config.json`, the weights in `model.safetensors` or shards
//! listed by `model.safetensors.index.json`, `tokenizer.json`, and the chat template from
//! `chat_template.jinja` or `tokenizer_config.json`.
//!
//! Why a directory and not only GGUF: most GPU deployments keep checkpoints in this form, in
//! full precision; converting them first would be a step between a team and decide.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::arch::HfConfig;
use crate::error::{ModelError, Result};

/// The files of one directory, checked to exist.
pub(crate) struct HfDir {
    pub dir: PathBuf,
    pub config: HfConfig,
    /// The safetensors files, shards in index order.
    pub shards: Vec<PathBuf>,
    /// `tokenizer_config.json`, when present.
    tokenizer_config: Option<Value>,
}

fn load_err(path: &Path, reason: impl Into<String>) -> ModelError {
    ModelError::Load {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

fn read_json(path: &Path) -> Result<Value> {
    let text =
        std::fs::read_to_string(path).map_err(|e| load_err(path, format!("cannot read: {e}")))?;
    serde_json::from_str(&text).map_err(|e| load_err(path, format!("not valid JSON: {e}")))
}

impl HfDir {
    /// Reads `config.json` and `tokenizer_config.json` and finds the weight files.
    pub fn open(dir: &Path) -> Result<Self> {
        let config_path = dir.join("config.json");
        if !config_path.is_file() {
            return Err(load_err(
                dir,
                "a model directory needs config.json (a Hugging Face checkpoint); a GGUF model is one .gguf file",
            ));
        }
        let config = HfConfig {
            json: read_json(&config_path)?,
            path: config_path,
        };
        let single = dir.join("model.safetensors");
        let index = dir.join("model.safetensors.index.json");
        let shards = if single.is_file() {
            vec![single]
        } else if index.is_file() {
            let map = read_json(&index)?;
            let files = map
                .get("weight_map")
                .and_then(Value::as_object)
                .ok_or_else(|| load_err(&index, "no `weight_map` object"))?;
            let mut names: Vec<&str> = files.values().filter_map(Value::as_str).collect();
            names.sort_unstable();
            names.dedup();
            names
                .into_iter()
                .map(|n| {
                    let p = dir.join(n);
                    if p.is_file() {
                        Ok(p)
                    } else {
                        Err(load_err(&index, format!("shard `{n}` is missing")))
                    }
                })
                .collect::<Result<Vec<_>>>()?
        } else {
            return Err(load_err(
                dir,
                "no weights: expected model.safetensors or model.safetensors.index.json with its shards \
                 (pytorch .bin checkpoints are not read)",
            ));
        };
        let tc = dir.join("tokenizer_config.json");
        let tokenizer_config = if tc.is_file() {
            Some(read_json(&tc)?)
        } else {
            None
        };
        Ok(Self {
            dir: dir.to_path_buf(),
            config,
            shards,
            tokenizer_config,
        })
    }

    /// `tokenizer.json`'s path (required: no slow-tokenizer files are read).
    pub fn tokenizer_json(&self) -> Result<PathBuf> {
        let p = self.dir.join("tokenizer.json");
        if p.is_file() {
            Ok(p)
        } else {
            Err(ModelError::Tokenizer(format!(
                "{}: no tokenizer.json (supported: a `tokenizers` tokenizer.json; \
                 tokenizer.model/vocab.json alone are not read)",
                self.dir.display()
            )))
        }
    }

    /// A special token named in `tokenizer_config.json` (`bos_token`, `eos_token`), given as
    /// a string or as `{"content": ...}`.
    pub fn special(&self, key: &str) -> Option<String> {
        let v = self.tokenizer_config.as_ref()?.get(key)?;
        v.as_str()
            .or_else(|| v.get("content").and_then(Value::as_str))
            .map(str::to_string)
    }

    /// The chat template: `chat_template.jinja`, else `tokenizer_config.json`'s
    /// `chat_template` (a string, or a list of named templates of which `default` is taken).
    pub fn chat_template(&self) -> Result<Option<String>> {
        let jinja = self.dir.join("chat_template.jinja");
        if jinja.is_file() {
            return std::fs::read_to_string(&jinja)
                .map(Some)
                .map_err(|e| load_err(&jinja, format!("cannot read: {e}")));
        }
        let Some(t) = self
            .tokenizer_config
            .as_ref()
            .and_then(|c| c.get("chat_template"))
        else {
            return Ok(None);
        };
        match t {
            Value::String(s) => Ok(Some(s.clone())),
            Value::Array(list) => Ok(list
                .iter()
                .find(|e| e.get("name").and_then(Value::as_str) == Some("default"))
                .and_then(|e| e.get("template"))
                .and_then(Value::as_str)
                .map(str::to_string)),
            Value::Null => Ok(None),
            _ => Err(ModelError::Template(
                "tokenizer_config.json: `chat_template` is neither a string nor a list".into(),
            )),
        }
    }

    /// The model's name: `_name_or_path` in config.json, else the directory name.
    pub fn name(&self) -> String {
        self.config
            .get("_name_or_path")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .unwrap_or_else(|| {
                self.dir
                    .file_name()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default()
            })
    }
}
