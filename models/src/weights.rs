//! Where a model's weights come from: a GGUF file or a Hugging Face directory's safetensors,
//! behind one small trait so the forward's loader ([`crate::forward::Transformer::load`])
//! asks for tensors by their canonical (GGUF) names whatever the format.
//!
//! Safetensors tensors are memory-mapped (candle's `MmapedSafetensors`, shards routed by
//! name) and each becomes a [`QTensor`] of its stored precision (f32, f16 or bf16), so the
//! loader, the embedding lookup and the [`crate::WeightFormat`] choices work on both formats
//! alike.

use std::path::{Path, PathBuf};

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::safetensors::MmapedSafetensors;
use candle_core::{DType, Device};

use crate::error::{ModelError, Result};
use crate::gguf::Gguf;

/// A model's tensors by canonical (GGUF) name.
pub(crate) trait WeightSource {
    /// Whether a tensor of this canonical name exists.
    fn has(&self, name: &str) -> bool;
    /// The tensor onto `device`, in its stored format.
    fn tensor(&mut self, name: &str, device: &Device) -> Result<QTensor>;
    /// A load error about this source.
    fn err(&self, reason: String) -> ModelError;
}

impl WeightSource for Gguf {
    fn has(&self, name: &str) -> bool {
        self.has_tensor(name)
    }

    fn tensor(&mut self, name: &str, device: &Device) -> Result<QTensor> {
        Gguf::tensor(self, name, device)
    }

    fn err(&self, reason: String) -> ModelError {
        Gguf::err(self, reason)
    }
}

/// The safetensors of a Hugging Face directory, memory-mapped, with the family's naming.
pub(crate) struct Safetensors {
    st: MmapedSafetensors,
    names: fn(&str) -> Option<String>,
    dir: PathBuf,
}

impl Safetensors {
    /// Maps `files` (one `model.safetensors` or every shard the index names); `names` maps a
    /// canonical name to the family's.
    pub fn open(dir: &Path, files: &[PathBuf], names: fn(&str) -> Option<String>) -> Result<Self> {
        // SAFETY: the files are mapped read-only; as with every memory-mapped model loader,
        // a file changed on disk while mapped is the operator's error.
        let st = unsafe { MmapedSafetensors::multi(files) }.map_err(|e| ModelError::Load {
            path: dir.to_path_buf(),
            reason: format!("cannot map the safetensors files: {e}"),
        })?;
        Ok(Self {
            st,
            names,
            dir: dir.to_path_buf(),
        })
    }

    fn hf_name(&self, name: &str) -> Option<String> {
        (self.names)(name).filter(|n| self.st.get(n).is_ok())
    }
}

impl WeightSource for Safetensors {
    fn has(&self, name: &str) -> bool {
        self.hf_name(name).is_some()
    }

    fn tensor(&mut self, name: &str, device: &Device) -> Result<QTensor> {
        let hf = self
            .hf_name(name)
            .ok_or_else(|| self.err(format!("missing tensor for `{name}`")))?;
        let t = self
            .st
            .load(&hf, &Device::Cpu)
            .map_err(|e| self.err(format!("cannot read tensor `{hf}`: {e}")))?;
        let dtype = match t.dtype() {
            DType::F32 => GgmlDType::F32,
            DType::F16 => GgmlDType::F16,
            DType::BF16 => GgmlDType::BF16,
            other => {
                return Err(self.err(format!(
                    "tensor `{hf}` is {other:?}; supported: f32, f16, bf16"
                )))
            }
        };
        QTensor::quantize_onto(&t, dtype, device)
            .map_err(|e| self.err(format!("cannot place tensor `{hf}`: {e}")))
    }

    fn err(&self, reason: String) -> ModelError {
        ModelError::Load {
            path: self.dir.clone(),
            reason,
        }
    }
}
