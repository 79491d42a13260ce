//! Opening a GGUF file and reading typed values out of its metadata.
//!
//! candle's `gguf_file::Value` accessors are strict about the stored integer width (a key
//! written as `u32` by one converter is `i32` or `u64` in another), so the helpers here accept
//! any integer or float width and turn a missing or mistyped key into a [`ModelError::Load`]
//! that names the key and the file.

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::{Content, Value};
use candle_core::quantized::QTensor;
use candle_core::Device;

use crate::error::{ModelError, Result};

/// Called as tensors are read: bytes of tensor data read so far, and in the whole file.
pub type LoadProgress = std::sync::Arc<dyn Fn(u64, u64) + Send + Sync>;

/// An open GGUF file: parsed header and metadata, plus the reader for tensor data.
pub(crate) struct Gguf {
    pub path: PathBuf,
    pub content: Content,
    reader: BufReader<File>,
    /// Told after each tensor read (see [`Gguf::report_to`]).
    progress: Option<LoadProgress>,
    /// Bytes of tensor data read so far, and in the file.
    bytes_read: u64,
    bytes_total: u64,
}

impl Gguf {
    /// Opens and parses the header and metadata; tensors are read later, one by one.
    pub fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).map_err(|e| ModelError::Load {
            path: path.to_path_buf(),
            reason: format!("cannot open file: {e}"),
        })?;
        let mut reader = BufReader::new(file);
        let content = Content::read(&mut reader).map_err(|e| ModelError::Load {
            path: path.to_path_buf(),
            reason: format!("not a readable GGUF file: {e}"),
        })?;
        let bytes_total = content.tensor_infos.values().map(tensor_bytes).sum();
        Ok(Self {
            path: path.to_path_buf(),
            content,
            reader,
            progress: None,
            bytes_read: 0,
            bytes_total,
        })
    }

    /// Reports tensor bytes read to `progress` from now on (once at once with none read).
    pub fn report_to(&mut self, progress: LoadProgress) {
        progress(self.bytes_read, self.bytes_total);
        self.progress = Some(progress);
    }

    /// A load error about this file.
    pub fn err(&self, reason: impl Into<String>) -> ModelError {
        ModelError::Load {
            path: self.path.clone(),
            reason: reason.into(),
        }
    }

    /// Whether the file has a tensor of this name.
    pub fn has_tensor(&self, name: &str) -> bool {
        self.content.tensor_infos.contains_key(name)
    }

    /// Reads one tensor onto `device`, in its stored (possibly quantized) format.
    pub fn tensor(&mut self, name: &str, device: &Device) -> Result<QTensor> {
        if !self.has_tensor(name) {
            return Err(self.err(format!("missing tensor `{name}`")));
        }
        let tensor = self
            .content
            .tensor(&mut self.reader, name, device)
            .map_err(|e| ModelError::Load {
                path: self.path.clone(),
                reason: format!("cannot read tensor `{name}`: {e}"),
            })?;
        if let Some(progress) = &self.progress {
            self.bytes_read += self.content.tensor_infos.get(name).map_or(0, tensor_bytes);
            progress(self.bytes_read.min(self.bytes_total), self.bytes_total);
        }
        Ok(tensor)
    }

    /// The raw metadata value, if present.
    pub fn value(&self, key: &str) -> Option<&Value> {
        self.content.metadata.get(key)
    }

    fn required(&self, key: &str) -> Result<&Value> {
        self.value(key)
            .ok_or_else(|| self.err(format!("missing metadata key `{key}`")))
    }

    /// A string value; error if missing or not a string.
    pub fn str(&self, key: &str) -> Result<&str> {
        match self.required(key)? {
            Value::String(s) => Ok(s),
            v => Err(self.err(format!(
                "metadata key `{key}` is not a string: {}",
                brief(v)
            ))),
        }
    }

    /// A string value, `None` if missing or not a string.
    pub fn str_opt(&self, key: &str) -> Option<&str> {
        match self.value(key)? {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// A non-negative integer value of any stored width.
    pub fn usize(&self, key: &str) -> Result<usize> {
        let v = self.required(key)?;
        as_u64(v).map(|x| x as usize).ok_or_else(|| {
            self.err(format!(
                "metadata key `{key}` is not an integer: {}",
                brief(v)
            ))
        })
    }

    /// An optional non-negative integer value.
    pub fn usize_opt(&self, key: &str) -> Option<usize> {
        self.value(key).and_then(as_u64).map(|x| x as usize)
    }

    /// A float value (f32, f64 or integer), `None` if missing.
    pub fn f64_opt(&self, key: &str) -> Option<f64> {
        match self.value(key)? {
            Value::F32(x) => Some(*x as f64),
            Value::F64(x) => Some(*x),
            v => as_u64(v).map(|x| x as f64),
        }
    }

    /// A required float value.
    pub fn f64(&self, key: &str) -> Result<f64> {
        self.f64_opt(key)
            .ok_or_else(|| self.err(format!("missing or non-numeric metadata key `{key}`")))
    }

    /// An optional boolean.
    pub fn bool_opt(&self, key: &str) -> Option<bool> {
        match self.value(key)? {
            Value::Bool(b) => Some(*b),
            v => as_u64(v).map(|x| x != 0),
        }
    }

    /// An array of strings (e.g. `tokenizer.ggml.tokens`).
    pub fn str_array(&self, key: &str) -> Result<Vec<String>> {
        let arr = match self.required(key)? {
            Value::Array(a) => a,
            v => {
                return Err(self.err(format!(
                    "metadata key `{key}` is not an array: {}",
                    brief(v)
                )))
            }
        };
        arr.iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) => Ok(s.clone()),
                v => Err(self.err(format!("`{key}`[{i}] is not a string: {}", brief(v)))),
            })
            .collect()
    }

    /// An array of integers (e.g. `tokenizer.ggml.token_type`), `None` if missing.
    pub fn int_array_opt(&self, key: &str) -> Result<Option<Vec<i64>>> {
        let arr = match self.value(key) {
            None => return Ok(None),
            Some(Value::Array(a)) => a,
            Some(v) => {
                return Err(self.err(format!(
                    "metadata key `{key}` is not an array: {}",
                    brief(v)
                )))
            }
        };
        arr.iter()
            .enumerate()
            .map(|(i, v)| {
                as_i64(v).ok_or_else(|| {
                    self.err(format!("`{key}`[{i}] is not an integer: {}", brief(v)))
                })
            })
            .collect::<Result<Vec<_>>>()
            .map(Some)
    }
}

fn as_u64(v: &Value) -> Option<u64> {
    as_i64(v).and_then(|x| u64::try_from(x).ok()).or(match v {
        Value::U64(x) => Some(*x),
        _ => None,
    })
}

fn as_i64(v: &Value) -> Option<i64> {
    Some(match v {
        Value::U8(x) => *x as i64,
        Value::I8(x) => *x as i64,
        Value::U16(x) => *x as i64,
        Value::I16(x) => *x as i64,
        Value::U32(x) => *x as i64,
        Value::I32(x) => *x as i64,
        Value::U64(x) => i64::try_from(*x).ok()?,
        Value::I64(x) => *x,
        _ => return None,
    })
}

/// A short description of a value for error messages (arrays can hold 150k entries).
fn brief(v: &Value) -> String {
    match v {
        Value::Array(a) => format!("array of {} values", a.len()),
        Value::String(s) if s.len() > 80 => format!("string of {} bytes", s.len()),
        v => format!("{v:?}"),
    }
}

/// Bytes of one tensor's data in the file.
fn tensor_bytes(info: &candle_core::quantized::gguf_file::TensorInfo) -> u64 {
    let blocks = info.shape.elem_count() / info.ggml_dtype.block_size().max(1);
    (blocks * info.ggml_dtype.type_size()) as u64
}
