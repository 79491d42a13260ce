//! Reading label probabilities out of a logit row.
//!
//! The log-softmax is taken over the *whole* vocabulary on the device, and only then are the
//! label entries gathered: no top-k window and no floor, so a label the model considers
//! unlikely still gets its true (small) log-probability, and `option_mass` is the true share
//! of next-token probability that falls on the option labels. Only `labels.len()` floats leave
//! the device.

use candle_core::{Tensor, D};

use crate::error::{ModelError, Result};

/// The model's next-token distribution at the answer position, restricted to the labels.
#[derive(Clone, Debug, PartialEq)]
pub struct Readout {
    /// `log p(label_i | prompt)`, exact log-softmax over the full vocabulary, in label order.
    pub logprobs: Vec<f32>,
    /// `sum_i exp(logprobs[i])`: how much of the next-token probability is on the labels
    /// (close to 1 when the prompt makes the model answer with a label).
    pub option_mass: f32,
}

/// Gathers label log-probabilities from one logit row `(vocab,)` or `(1, vocab)`.
pub(crate) fn read_labels(logits: &Tensor, label_ids: &[u32]) -> Result<Readout> {
    let logits = logits.flatten_all()?;
    let vocab = logits.dim(0)?;
    if let Some(&id) = label_ids.iter().find(|&&id| id as usize >= vocab) {
        return Err(ModelError::TokenOutOfRange {
            id,
            vocab_size: vocab,
        });
    }
    if label_ids.is_empty() {
        return Ok(Readout {
            logprobs: Vec::new(),
            option_mass: 0.0,
        });
    }
    let logprobs = gather_log_softmax(&logits.reshape((1, vocab))?, label_ids)?;
    let option_mass = logprobs.iter().map(|l| l.exp()).sum();
    Ok(Readout {
        logprobs,
        option_mass,
    })
}

/// [`read_labels`] for every row of `logits` `(rows, vocab)` at once: one log-softmax over
/// the batch and one gather, so a batch costs one device round trip instead of one per row.
pub(crate) fn read_labels_rows(logits: &Tensor, label_ids: &[&[u32]]) -> Result<Vec<Readout>> {
    let (rows, vocab) = logits.dims2()?;
    if rows != label_ids.len() {
        return Err(ModelError::Compute(format!(
            "{rows} logit rows but {} label sets",
            label_ids.len()
        )));
    }
    let mut flat = Vec::with_capacity(label_ids.iter().map(|l| l.len()).sum());
    for (row, ids) in label_ids.iter().enumerate() {
        for &id in ids.iter() {
            if id as usize >= vocab {
                return Err(ModelError::TokenOutOfRange {
                    id,
                    vocab_size: vocab,
                });
            }
            flat.push((row * vocab) as u32 + id);
        }
    }
    if flat.is_empty() {
        return Ok(label_ids
            .iter()
            .map(|_| Readout {
                logprobs: Vec::new(),
                option_mass: 0.0,
            })
            .collect());
    }
    let mut gathered = gather_log_softmax(logits, &flat)?.into_iter();
    Ok(label_ids
        .iter()
        .map(|ids| {
            let logprobs: Vec<f32> = gathered.by_ref().take(ids.len()).collect();
            let option_mass = logprobs.iter().map(|l| l.exp()).sum();
            Readout {
                logprobs,
                option_mass,
            }
        })
        .collect())
}

/// The log-softmax of `logits` `(rows, vocab)` over each row, at the flat indices `flat`
/// (`row * vocab + id`). On CUDA one fused kernel; elsewhere candle's ops.
fn gather_log_softmax(logits: &Tensor, flat: &[u32]) -> Result<Vec<f32>> {
    #[cfg(feature = "cuda")]
    if logits.device().is_cuda()
        && logits.dtype() == candle_core::DType::F32
        && logits.is_contiguous()
    {
        return Ok(crate::kernels::label_logprobs(logits, flat)?.to_vec1::<f32>()?);
    }
    let logp = candle_nn::ops::log_softmax(&logits.to_dtype(candle_core::DType::F32)?, D::Minus1)?;
    let idx = Tensor::new(flat, logits.device())?;
    Ok(logp
        .flatten_all()?
        .index_select(&idx, 0)?
        .to_vec1::<f32>()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn exact_log_softmax_at_labels() {
        let logits = Tensor::new(&[1.0f32, 2.0, 3.0, 4.0], &Device::Cpu).unwrap();
        let r = read_labels(&logits, &[3, 0]).unwrap();
        let z: f32 = [1.0f32, 2.0, 3.0, 4.0].iter().map(|x| x.exp()).sum();
        assert!((r.logprobs[0] - (4.0 - z.ln())).abs() < 1e-6);
        assert!((r.logprobs[1] - (1.0 - z.ln())).abs() < 1e-6);
        assert!((r.option_mass - (1f32.exp() + 4f32.exp()) / z).abs() < 1e-6);
        assert!(matches!(
            read_labels(&logits, &[4]),
            Err(ModelError::TokenOutOfRange { id: 4, .. })
        ));
    }
}
