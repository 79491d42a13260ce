//! CUDA graphs of short fused passes.
//!
//! Why: a short read (one question, tens of rows) is ~270 launches, and each costs the host
//! ~13 µs in candle (the op, an allocation, a free) while the GPU needs a few µs for it, so
//! the host bounds the pass (4 ms for one question on an H200, most of it waiting on
//! launches). A graph captured once replays all of a pass's launches with one call.
//!
//! A graph bakes in its kernels' arguments: the row count, the count of rows read out, how
//! many cached prefixes the pass reads, where its own keys start and the attention's block
//! shape. Those make the key ([`GraphKey`]); rows are padded up to a multiple of
//! [`ROW_STEP`] (padding rows see no keys and are never read, and a real row's result does
//! not depend on them), and rows read out to a multiple of [`PICK_STEP`] (padding picks
//! read row 0 again), so questions of similar length share a graph. Everything else (token
//! ids, positions, which keys each row sees, which rows are read out, where the cached
//! prefixes lie) is data in buffers the graph reads, rewritten before each replay. A shape is captured the second time it is seen, so one-off
//! shapes (large mixed batches) run without the capture's cost.

use std::collections::HashMap;
use std::sync::Mutex;

use candle_core::cuda_backend::cudarc::driver::sys::{
    CUgraphInstantiate_flags, CUstreamCaptureMode,
};
use candle_core::cuda_backend::cudarc::driver::CudaGraph;
use candle_core::{DType, Device, Tensor};

use super::fused::{FusedLayer, PassInputs, PassKeys};
use super::Transformer;
use crate::error::{ModelError, Result};
use crate::kernels::AttentionBlock;

/// Passes of more rows run eagerly: there the GPU's work outweighs the launches. (Their
/// attention is planned from their rows' bounds, shorter passes' from their shape alone:
/// [`crate::attention_plan`].)
pub(super) const MAX_ROWS: usize = crate::attention_plan::SHAPE_RULE_MAX_ROWS;

/// Rows are padded to a multiple of this.
const ROW_STEP: usize = 32;

/// Rows read out are padded to a multiple of this.
const PICK_STEP: usize = 8;

/// The shape a graph replays a pass of `rows` rows with `picked` read out at: both padded.
/// Also what a short pass's attention is planned from, eager or replayed, so the two split
/// their keys alike (fused.rs's `PassInputs::upload` says why).
pub(super) fn padded_shape(rows: usize, picked: usize) -> (usize, usize) {
    (
        rows.next_multiple_of(ROW_STEP),
        picked.next_multiple_of(PICK_STEP),
    )
}

/// Graphs kept; the least recently used goes first. Their activations' memory stays with
/// them between replays: 16 shapes of 32..512 rows held 42 MiB in all on q15
/// (`forward_bench`'s `graph_memory_mib`).
const MAX_GRAPHS: usize = 64;

/// What a graph bakes in.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
struct GraphKey {
    rows: usize,
    picks: usize,
    prefixes: usize,
    own_start: usize,
    block: AttentionBlock,
}

/// A captured pass: the graph, the input buffers it reads, the output it writes.
struct Graph {
    graph: CudaGraph,
    inputs: PassInputs,
    /// `(picks, hidden)` f32: the final hidden states of the rows read out.
    output: Tensor,
    last_used: u64,
}

#[derive(Default)]
struct Graphs {
    captured: HashMap<GraphKey, Graph>,
    /// Shapes seen once (captured on the second sighting).
    seen: HashMap<GraphKey, u64>,
    clock: u64,
    /// Set when a capture failed: graphs stay off (the eager path is always right).
    disabled: bool,
}

/// The graph cache of a fused transformer.
#[derive(Default)]
pub(super) struct PassGraphs(Mutex<Graphs>);

// Safety: CUDA graph objects are not internally synchronised but may be used from any
// thread; every use goes through the mutex.
unsafe impl Send for Graphs {}

impl PassGraphs {
    /// Runs a short pass through a captured graph, capturing it if its shape was seen
    /// before. `None`: not a graph pass (too long, no row read out, first sighting, or
    /// graphs are off); run it eagerly. Returns the hidden states of rows `picks`
    /// `(picks.len(), hidden)`, a view of the graph's output buffer (valid until the next
    /// replay of that graph).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn run(
        &self,
        t: &Transformer,
        layers: &[FusedLayer],
        tokens: &[u32],
        positions: &[u32],
        bounds: &[u32],
        picks: &[u32],
        keys: &PassKeys<'_>,
    ) -> Result<Option<Tensor>> {
        let m = tokens.len();
        if m == 0 || m > MAX_ROWS || picks.is_empty() {
            return Ok(None);
        }
        let (rows, picked) = padded_shape(m, picks.len());
        let key = GraphKey {
            rows,
            picks: picked,
            prefixes: keys.prefixes.len(),
            own_start: keys.own_start,
            block: keys.block,
        };
        let mut graphs = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if graphs.disabled {
            return Ok(None);
        }
        graphs.clock += 1;
        let now = graphs.clock;
        if !graphs.captured.contains_key(&key) && graphs.seen.insert(key, now).is_none() {
            if graphs.seen.len() > 4 * MAX_GRAPHS {
                remove_oldest(&mut graphs.seen, |&at| at);
            }
            return Ok(None);
        }
        // Padding rows: token 0 at position 0, seeing no keys.
        let padded = |values: &[u32], len: usize| {
            let mut v = values.to_vec();
            v.resize(len, 0);
            v
        };
        let (tokens, positions, bounds, picks_padded) = (
            padded(tokens, rows),
            padded(positions, rows),
            padded(bounds, 4 * rows),
            padded(picks, picked),
        );

        if let Some(g) = graphs.captured.get_mut(&key) {
            g.inputs
                .write(&tokens, &positions, &bounds, &picks_padded, keys)?;
            g.graph.launch().map_err(cuda_error)?;
            g.last_used = now;
            return Ok(Some(g.output.narrow(0, 0, picks.len())?));
        }
        let inputs =
            PassInputs::upload(t, &tokens, &positions, &bounds, &picks_padded, keys, true)?;
        let g = match capture(t, layers, inputs, picked) {
            Ok(g) => g,
            Err(e) => {
                tracing::warn!(error = %e, "CUDA graph capture failed; short passes run eagerly");
                graphs.disabled = true;
                return Ok(None);
            }
        };
        g.graph.launch().map_err(cuda_error)?;
        let output = g.output.narrow(0, 0, picks.len())?;
        if graphs.captured.len() >= MAX_GRAPHS {
            remove_oldest(&mut graphs.captured, |g| g.last_used);
        }
        graphs.captured.insert(
            key,
            Graph {
                last_used: now,
                ..g
            },
        );
        Ok(Some(output))
    }
}

/// Records the pass's launches over `inputs` into a graph writing the hidden states of its
/// `picks` rows read out to a buffer of its own. Nothing runs: launch the graph.
fn capture(
    t: &Transformer,
    layers: &[FusedLayer],
    inputs: PassInputs,
    picks: usize,
) -> Result<Graph> {
    let Device::Cuda(dev) = &t.device else {
        return Err(ModelError::Compute("CUDA graphs need a CUDA device".into()));
    };
    let stream = dev.cuda_stream();
    let output = Tensor::zeros((picks, t.dims.hidden), DType::F32, &t.device)?;
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
        .map_err(cuda_error)?;
    // Every buffer allocated while capturing is freed while capturing too (the hidden
    // states are copied out and dropped), so no allocation outlives a replay (CUDA keeps the
    // physical memory in the graph pool for the next one) and candle never frees graph memory.
    let recorded = t
        .fused_layers(layers, &inputs, false)
        .and_then(|(x, _)| Ok(output.slice_set(&x, 0, 0)?));
    let graph = stream.end_capture(CUgraphInstantiate_flags(0));
    recorded?;
    let graph = graph
        .map_err(cuda_error)?
        .ok_or_else(|| ModelError::Compute("the captured graph is empty".into()))?;
    Ok(Graph {
        graph,
        inputs,
        output,
        last_used: 0,
    })
}

/// Removes the entry with the smallest `age` (the least recently used).
fn remove_oldest<V>(map: &mut HashMap<GraphKey, V>, age: impl Fn(&V) -> u64) {
    if let Some(key) = map.iter().min_by_key(|(_, v)| age(v)).map(|(k, _)| *k) {
        map.remove(&key);
    }
}

fn cuda_error(e: impl std::fmt::Display) -> ModelError {
    ModelError::Compute(format!("CUDA graph: {e}"))
}
