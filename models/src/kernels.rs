//! Launchers for the fused CUDA kernels in `models/kernels/fused.cu` (built to PTX by
//! `models/build.rs`). Each takes and returns candle tensors; inputs must be contiguous bf16
//! (or f32/u32/i32 where noted) CUDA tensors. Inputs are passed to the kernels as device
//! addresses: every launch goes on candle's one stream, and candle frees memory in stream
//! order, so an input dropped right after a launch is still valid when the kernel runs.

use candle_core::backend::BackendStorage;
use std::cell::RefCell;
use std::collections::HashMap;

use candle_core::cuda_backend::cudarc;
use candle_core::cuda_backend::cudarc::cublas::{result as cublas, sys as cublas_sys};
use candle_core::cuda_backend::cudarc::driver::sys::CUfunction_attribute;
use candle_core::cuda_backend::cudarc::driver::{
    CudaFunction, CudaSlice, DevicePtr, DeviceRepr, LaunchConfig, PushKernelArg,
};
use candle_core::cuda_backend::{CudaDevice, CudaStorage, CudaStorageSlice, DeviceId, WrapErr};
use candle_core::op::BackpropOp;
use candle_core::{bail, DType, Device, Result, Shape, Storage, Tensor};
use half::bf16;

pub use crate::attention_plan::{force_longest_first, use_legacy_plan, AttentionPlan, BlockShape};
use crate::attention_plan::{short_pass_runs_plain, MULTIPROCESSORS};
use crate::switch::{Number, Switch};

const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/fused.ptx"));
const MODULE: &str = "decide_fused";

/// Threads per block of the elementwise kernels.
const THREADS: u32 = 256;

/// The attention kernel's block shapes (`ATTENTION_KERNEL` in fused.cu, and
/// attention_sm90.cu). Why several: which is faster depends on the pass and the GPU
/// (`kernel_check` times each on every shape).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttentionBlock {
    /// 64 query rows, queries in registers, 64-key tiles; three blocks fit on a
    /// multiprocessor. A little faster than `Keys32` on long causal passes (H200: 8k rows
    /// after 8k cached 186 vs 178 TFLOP/s, 4k rows 136 vs 123; runs vary by ~10%).
    Keys64,
    /// 64 query rows, queries in shared memory, 32-key tiles; fewer registers and less
    /// shared memory, so four fit. Much faster on short segments over cached keys (H200: 64
    /// questions of 47 rows over 4.4k cached keys 0.64 vs 1.16 ms, one question of 3 rows
    /// over 28k cached keys 0.08 vs 0.12 ms).
    Keys32,
    /// Hopper only (compute capability 9.0): 128 query rows as two
    /// warpgroups, 128-key tiles, warpgroup matrix multiplies (wgmma); one block per
    /// multiprocessor. Faster than both others on every shape measured (H200: 8k rows after
    /// 8k cached 342 TFLOP/s; 64 questions of 47 rows over 4.4k cached keys 0.43 ms).
    Wgmma,
    /// Hopper only: the same 128 query rows and 128-key tiles as `Wgmma`, three warpgroups
    /// in FlashAttention-3's schedule (a producer staging tiles through mbarrier pipelines,
    /// two consumers overlapping their softmax with multiplies); attention_sm90.cu. H200,
    /// TFLOP/s vs `Wgmma` in one run: causal 8k 402 vs 355, 8k after 8k 345 vs 308, 3.7k
    /// after 24.6k 318 vs 298, 64 questions of 47 rows over 4.4k cached keys 186 vs 169;
    /// causal 4k 233 vs 259. Since its producer's one-copy-per-row path (kernel_check,
    /// bench/reports/h200-side-by-side-5): causal 8k 523, 8k after 8k 556, 8k after 16k 573,
    /// 3.7k after 24.6k 519, 64 x 47 rows over 4.4k 254. Tiles inside one source staged
    /// with TMA (tensor maps) against its own copies, same run
    /// (bench/reports/h200-side-by-side-10/probes): causal 8k 502 vs 491, 8k after 8k 560 vs
    /// 549, 8k after 16k 575 vs 564, 3.7k after 24.6k 532 vs 516.
    WgmmaSpecialized,
}

/// PTX of the Hopper kernel; empty unless built for sm_90 (models/build.rs).
const SM90_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/attention_sm90.ptx"));
const SM90_MODULE: &str = "decide_attention_sm90";

impl AttentionBlock {
    /// Every shape, for measuring them.
    pub const ALL: [AttentionBlock; 4] = [
        Self::Keys64,
        Self::Keys32,
        Self::Wgmma,
        Self::WgmmaSpecialized,
    ];

    /// Query rows per block.
    fn rows(self) -> usize {
        match self {
            Self::Keys64 | Self::Keys32 => 64,
            Self::Wgmma | Self::WgmmaSpecialized => 128,
        }
    }

    /// Threads per block.
    fn threads(self) -> u32 {
        match self {
            Self::Keys64 | Self::Keys32 => 128,
            Self::Wgmma => 256,
            Self::WgmmaSpecialized => 384,
        }
    }

    fn key_tile(self) -> usize {
        match self {
            Self::Keys64 => 64,
            Self::Keys32 => 32,
            Self::Wgmma | Self::WgmmaSpecialized => 128,
        }
    }

    /// Blocks that fit on one multiprocessor at once (`MIN_BLOCKS` in the .cu).
    fn per_multiprocessor(self) -> usize {
        match self {
            Self::Keys64 => 3,
            Self::Keys32 => 4,
            Self::Wgmma | Self::WgmmaSpecialized => 1,
        }
    }

    /// Dynamic shared memory for heads `dim` wide: two stages of a K and a V tile, and the
    /// block's queries when they are not held in registers; rows padded by 8 elements
    /// (`attention_smem_bytes` in fused.cu), or for `Wgmma` unpadded (swizzled) with 1 KiB
    /// of slack to start on a 1024-byte boundary.
    fn shared_memory(self, dim: usize) -> usize {
        let tiles = 2 * 2 * self.key_tile();
        match self {
            Self::Keys64 => tiles * (dim + 8) * 2,
            Self::Keys32 => (tiles + self.rows()) * (dim + 8) * 2,
            Self::Wgmma | Self::WgmmaSpecialized => (tiles + self.rows()) * dim * 2 + 1024,
        }
    }

    /// The kernel for heads `dim` wide, if built, and its module (name, PTX).
    fn kernel(self, dim: usize) -> Option<(&'static str, &'static str, &'static str)> {
        let name = match (dim, self) {
            (64, Self::Keys64) => "attention_bf16_d64",
            (128, Self::Keys64) => "attention_bf16_d128",
            (64, Self::Keys32) => "attention_bf16_d64_k32",
            (128, Self::Keys32) => "attention_bf16_d128_k32",
            (64 | 128, Self::Wgmma | Self::WgmmaSpecialized) if !SM90_PTX.is_empty() => {
                let name = match (dim, self) {
                    (64, Self::Wgmma) => "attention_bf16_d64_wgmma",
                    (_, Self::Wgmma) => "attention_bf16_d128_wgmma",
                    (64, _) => "attention_bf16_d64_wgmma_ws",
                    _ => "attention_bf16_d128_wgmma_ws",
                };
                return Some((name, SM90_MODULE, SM90_PTX));
            }
            _ => return None,
        };
        Some((name, MODULE, PTX))
    }

    /// What [`AttentionPlan`] needs of this shape. The nanoseconds per tile are what
    /// kernel_check's TFLOP/s on long passes on an H200 make of one tile of 128-wide heads on
    /// a resident block (`Keys64` ~230 TFLOP/s over 3 blocks a multiprocessor, `Keys32` ~225
    /// over 4, `Wgmma` ~430, `WgmmaSpecialized` ~560).
    pub fn plan_shape(self) -> BlockShape {
        let tile_ns = match self {
            Self::Keys64 => 3_600,
            Self::Keys32 => 2_500,
            Self::Wgmma => 2_600,
            Self::WgmmaSpecialized => 2_000,
        };
        BlockShape {
            rows: self.rows(),
            key_tile: self.key_tile(),
            per_multiprocessor: self.per_multiprocessor(),
            tile_ns,
        }
    }

    /// The shape the server runs for a pass of `rows` rows over `keys` key columns (cached
    /// and its own), heads `dim` wide, on `device`: the warp-specialized wgmma kernel where
    /// the GPU has it (the fastest on the shapes passes run, `kernel_check`) but the plain
    /// one for short passes over few keys ([`short_pass_runs_plain`]), else 64-key tiles for
    /// long causal passes (prefill chunks) and 32-key tiles for the rest. One place, so the
    /// model and the benches (layer_bench) choose alike.
    pub fn served(device: &Device, dim: usize, rows: usize, keys: usize) -> Self {
        if short_pass_runs_plain(rows, keys) && Self::Wgmma.runs_on(device, dim) {
            Self::Wgmma
        } else if Self::WgmmaSpecialized.runs_on(device, dim) {
            Self::WgmmaSpecialized
        } else if rows > 1024 {
            Self::Keys64
        } else {
            Self::Keys32
        }
    }

    /// Whether this shape runs for heads `dim` wide on `device`: built, and for `Wgmma` a
    /// device of compute capability 9.0 (PTX for sm_90a runs on no other).
    pub fn runs_on(self, device: &Device, dim: usize) -> bool {
        if self.kernel(dim).is_none() {
            return false;
        }
        match (self, device) {
            (Self::Wgmma | Self::WgmmaSpecialized, Device::Cuda(d)) => is_sm90(d),
            (_, Device::Cuda(_)) => true,
            _ => false,
        }
    }
}

/// Whether a device has compute capability 9.0 (asked of the driver once per device and
/// thread: passes ask on every forward).
fn is_sm90(dev: &CudaDevice) -> bool {
    thread_local! {
        static SM90: RefCell<HashMap<DeviceId, bool>> = RefCell::new(HashMap::new());
    }
    SM90.with(|m| {
        *m.borrow_mut().entry(dev.id()).or_insert_with(|| {
            dev.cuda_stream()
                .context()
                .compute_capability()
                .is_ok_and(|c| c == (9, 0))
        })
    })
}

/// The device's multiprocessors (asked of the driver once per device and thread).
fn multiprocessors(dev: &CudaDevice) -> usize {
    use cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT;
    thread_local! {
        static COUNT: RefCell<HashMap<DeviceId, usize>> = RefCell::new(HashMap::new());
    }
    COUNT.with(|m| {
        *m.borrow_mut().entry(dev.id()).or_insert_with(|| {
            let context = dev.cuda_stream().context().clone();
            context
                .attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
                .map_or(MULTIPROCESSORS, |n| n.max(1) as usize)
        })
    })
}

/// Whether an attention kernel is built for heads `dim` wide.
pub fn attention_supports(dim: usize) -> bool {
    AttentionBlock::Keys64.kernel(dim).is_some()
}

/// Loads the attention kernels that run on `device` for heads `dim` wide (the driver
/// compiles a module's PTX on its first load).
pub fn load_attention(device: &Device, dim: usize) -> Result<()> {
    let Device::Cuda(dev) = device else {
        return Ok(());
    };
    for block in AttentionBlock::ALL {
        if let Some(kernel) = block.kernel(dim).filter(|_| block.runs_on(device, dim)) {
            module_function(dev, kernel, block.shared_memory(dim))?;
        }
    }
    Ok(())
}

mod tensor_maps;
pub use tensor_maps::set_tensor_maps;
use tensor_maps::{GateUpMaps, KeyMaps};
use tensor_maps::{MappedPrefix, MAPPED_PREFIXES};

/// The CUDA device of a tensor.
pub(crate) fn cuda_device(t: &Tensor) -> Result<CudaDevice> {
    match t.device() {
        Device::Cuda(d) => Ok(d.clone()),
        other => bail!("fused kernels run on CUDA, got a tensor on {other:?}"),
    }
}

/// A kernel of the module, loaded once per device and thread: candle's
/// `get_or_load_custom_func` looks the module up and asks the driver for the function on
/// every call, ~100 times per forward pass here. `smem`: dynamic shared memory the kernel is
/// allowed (0: the default limit).
fn function(dev: &CudaDevice, name: &'static str, smem: usize) -> Result<CudaFunction> {
    module_function(dev, (name, MODULE, PTX), smem)
}

/// [`function`] from a given module: `(kernel name, module name, PTX)`.
fn module_function(
    dev: &CudaDevice,
    (name, module, ptx): (&'static str, &'static str, &'static str),
    smem: usize,
) -> Result<CudaFunction> {
    thread_local! {
        static LOADED: RefCell<HashMap<(DeviceId, &'static str), CudaFunction>> =
            RefCell::new(HashMap::new());
    }
    if let Some(f) = LOADED.with(|l| l.borrow().get(&(dev.id(), name)).cloned()) {
        return Ok(f);
    }
    let f = dev
        .get_or_load_custom_func(name, module, ptx)?
        .into_cuda_function();
    if smem > 0 {
        f.set_attribute(
            CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            smem as i32,
        )
        .w()?;
    }
    LOADED.with(|l| l.borrow_mut().insert((dev.id(), name), f.clone()));
    Ok(f)
}

/// Device address of a contiguous tensor's first element, checking its dtype.
pub(crate) fn address(t: &Tensor, dtype: DType) -> Result<u64> {
    if t.dtype() != dtype {
        bail!("fused kernel input is {:?}, expected {dtype:?}", t.dtype());
    }
    let (storage, layout) = t.storage_and_layout();
    if !layout.is_contiguous() {
        bail!("fused kernel input is not contiguous");
    }
    let Storage::Cuda(cs) = &*storage else {
        bail!("fused kernel input is not on CUDA");
    };
    let stream = cs.device().cuda_stream();
    let base = match &cs.slice {
        CudaStorageSlice::BF16(s) => s.device_ptr(&stream).0,
        CudaStorageSlice::F32(s) => s.device_ptr(&stream).0,
        CudaStorageSlice::U32(s) => s.device_ptr(&stream).0,
        _ => bail!("fused kernel input has an unsupported storage type"),
    };
    Ok(base + (layout.start_offset() * dtype.size_in_bytes()) as u64)
}

/// Where a cached prefix's keys and values lie, per layer, for the attention's key tables:
/// worked out once per piece of a cache ([`crate::KvCache`] keeps them with the piece), not
/// per pass. With a prefix cache that keeps every prompt's blocks a saturated pass reads a
/// few hundred prefixes, ~28 x 2 tensors each; asked again every pass, they kept the worker's
/// thread busy (with hashed prefix dedup this took a batch of ~180 short prompts on an H100
/// from 25.7 to 21.9 ms, bench/reports/h100-keep-rows-22).
#[derive(Debug, Clone)]
pub struct PrefixAddresses {
    /// Per layer, the device addresses of K and V.
    pub layers: Vec<(u64, u64)>,
    /// The rows from one kv head's keys to the next's ([`kv_address`]).
    pub head_rows: usize,
}

impl PrefixAddresses {
    /// The addresses of every layer's `(K, V)` `(1, kv, len, dim)` bf16 on CUDA.
    pub fn of(layers: &[(Tensor, Tensor)]) -> Result<Self> {
        let mut head_rows = None;
        let layers = layers
            .iter()
            .map(|(k, v)| {
                let (k_at, k_rows) = kv_address(k)?;
                let (v_at, v_rows) = kv_address(v)?;
                if k_rows != v_rows || head_rows.is_some_and(|rows| rows != k_rows) {
                    bail!("a cached prefix's keys and values differ in layout");
                }
                head_rows = Some(k_rows);
                Ok((k_at, v_at))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            layers,
            head_rows: head_rows.unwrap_or(0),
        })
    }
}

/// The device address of a cached prefix's keys or values `(1, kv, len, dim)` bf16, and the
/// rows from one kv head's to the next's: `len` for a tensor of its own, more for a view of
/// positions cut from a longer one ([`crate::KvCache::range`] on CUDA shares them), which
/// the attention reads in place.
fn kv_address(t: &Tensor) -> Result<(u64, usize)> {
    if t.is_contiguous() {
        return Ok((address(t, DType::BF16)?, t.dim(2)?));
    }
    let layout = t.layout();
    let (dims, strides) = (layout.dims(), layout.stride());
    let dim = dims.get(3).copied().unwrap_or(0);
    if dims.len() != 4 || strides[3] != 1 || strides[2] != dim || strides[1] % dim.max(1) != 0 {
        bail!("a cached prefix is neither contiguous nor a range of positions of one: {dims:?} strides {strides:?}");
    }
    // The view's first element and its heads' stride; `address` of the whole storage.
    let (storage, _) = t.storage_and_layout();
    let Storage::Cuda(cs) = &*storage else {
        bail!("fused kernel input is not on CUDA");
    };
    let CudaStorageSlice::BF16(slice) = &cs.slice else {
        bail!("a cached prefix is {:?}, expected BF16", t.dtype());
    };
    let stream = cs.device().cuda_stream();
    let base = slice.device_ptr(&stream).0;
    Ok((
        base + (layout.start_offset() * DType::BF16.size_in_bytes()) as u64,
        strides[1] / dim,
    ))
}

/// Wraps a freshly written device buffer as a tensor.
pub(crate) fn tensor<T>(slice: CudaSlice<T>, dev: &CudaDevice, shape: impl Into<Shape>) -> Tensor
where
    T: candle_core::cuda_backend::CudaDType + DeviceRepr,
{
    let storage = CudaStorage::wrap_cuda_slice(slice, dev.clone());
    Tensor::from_storage(Storage::Cuda(storage), shape, BackpropOp::none(), false)
}

/// A grid-stride launch over `n` elements.
fn elementwise(n: usize) -> LaunchConfig {
    let blocks = n.div_ceil(THREADS as usize).clamp(1, 65_535) as u32;
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Token rows per grid row of `qkv_rope_bf16x2` (`ROW_GROUP` in fused.cu): each thread loads
/// that many rows before computing any.
const ROW_GROUP: usize = 4;

/// `rows` grid rows (at most 65,535: the kernel steps through the rest) of 128-thread blocks
/// across `per_row` work items each.
fn per_row(per_row: usize, rows: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (
            per_row.div_ceil(128) as u32,
            rows.clamp(1, 65_535) as u32,
            1,
        ),
        block_dim: (128, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Head counts and width of an attention layer.
#[derive(Clone, Copy, Debug)]
pub struct Heads {
    pub q: usize,
    pub kv: usize,
    pub dim: usize,
}

/// Splits the fused projection `qkv` `(M, (q + 2 kv) * dim)` bf16 into queries `(M, q, dim)`,
/// keys and values `(1, kv, M, dim)`, adding `bias` (f32, `((q + 2 kv) * dim)`) and rotating
/// queries and keys by `positions` (u32, `(M)`) with the `(context, rotary / 2)` f32 tables:
/// a head's first `rotary` elements rotate (all of them but for partial rotary, Phi-4-mini),
/// the rest pass through.
pub fn qkv_rope(
    qkv: &Tensor,
    bias: Option<&Tensor>,
    (cos, sin): (&Tensor, &Tensor),
    positions: &Tensor,
    heads: Heads,
    interleaved: bool,
) -> Result<(Tensor, Tensor, Tensor)> {
    let dev = cuda_device(qkv)?;
    let (m, width) = qkv.dims2()?;
    let Heads { q: h, kv, dim: d } = heads;
    if width != (h + 2 * kv) * d || positions.dims1()? != m {
        bail!(
            "qkv_rope: {width} columns and {} positions for {m} rows",
            positions.dims1()?
        );
    }
    let rotary = 2 * cos.dim(1)?;
    if rotary == 0 || rotary > d {
        bail!("qkv_rope: tables for {rotary} rotary elements of {d}-wide heads");
    }
    let stream = dev.cuda_stream();
    let q_out = unsafe { dev.alloc::<bf16>(m * h * d)? };
    let k_out = unsafe { dev.alloc::<bf16>(m * kv * d)? };
    let v_out = unsafe { dev.alloc::<bf16>(m * kv * d)? };
    let inputs = (
        address(qkv, DType::BF16)?,
        bias.map(|b| address(b, DType::F32))
            .transpose()?
            .unwrap_or(0),
        address(cos, DType::F32)?,
        address(sin, DType::F32)?,
        address(positions, DType::U32)?,
    );
    let dims = (
        m as i32,
        h as i32,
        kv as i32,
        d as i32,
        i32::from(interleaved),
    );
    // Two rotary pairs per thread where the widths and addresses allow 4- and 8-byte
    // accesses and the whole head rotates (every model here but Phi-4-mini), else one.
    let vectored = d % 4 == 0 && inputs.0 % 8 == 0 && rotary == d;
    let (func, cfg) = if vectored {
        let cfg = per_row((h + 2 * kv) * d / 4, m.div_ceil(ROW_GROUP));
        (function(&dev, "qkv_rope_bf16x2", 0)?, cfg)
    } else {
        let cfg = elementwise(m * (h + 2 * kv) * d / 2);
        (function(&dev, "qkv_rope_bf16", 0)?, cfg)
    };
    let mut b = stream.launch_builder(&func);
    b.arg(&inputs.0)
        .arg(&inputs.1)
        .arg(&inputs.2)
        .arg(&inputs.3)
        .arg(&inputs.4);
    b.arg(&q_out).arg(&k_out).arg(&v_out);
    b.arg(&dims.0)
        .arg(&dims.1)
        .arg(&dims.2)
        .arg(&dims.3)
        .arg(&dims.4);
    let rotary = rotary as i32;
    if !vectored {
        b.arg(&rotary);
    }
    unsafe { b.launch(cfg) }.w()?;
    Ok((
        tensor(q_out, &dev, (m, h, d)),
        tensor(k_out, &dev, (1, kv, m, d)),
        tensor(v_out, &dev, (1, kv, m, d)),
    ))
}

/// Qwen3's per-head RMSNorm of the queries and keys, in place in the fused projection `qkv`
/// `(M, (q + 2 kv) * dim)` bf16 (a matmul's fresh output, which nothing else holds), before
/// [`qkv_rope`]: each query head times `q_weight`, each key head times `k_weight` (f32,
/// `(dim)`), after adding `bias`'s query and key parts (the bias comes before the norm; give
/// [`qkv_rope`] only the values' then).
pub fn qk_norm(
    qkv: &Tensor,
    bias: Option<&Tensor>,
    (q_weight, k_weight): (&Tensor, &Tensor),
    heads: Heads,
    eps: f32,
) -> Result<()> {
    let dev = cuda_device(qkv)?;
    let (m, width) = qkv.dims2()?;
    let Heads { q: h, kv, dim: d } = heads;
    if width != (h + 2 * kv) * d || d > 256 || q_weight.dims1()? != d || k_weight.dims1()? != d {
        bail!("qk_norm: {width} columns for {h} + 2 x {kv} heads {d} wide, norms of {d}");
    }
    let args = (
        address(qkv, DType::BF16)?,
        bias.map(|b| address(b, DType::F32))
            .transpose()?
            .unwrap_or(0),
        address(q_weight, DType::F32)?,
        address(k_weight, DType::F32)?,
    );
    let dims = (m as i32, h as i32, kv as i32, d as i32);
    let func = function(&dev, "qk_norm_bf16", 0)?;
    let stream = dev.cuda_stream();
    let mut b = stream.launch_builder(&func);
    b.arg(&args.0).arg(&args.1).arg(&args.2).arg(&args.3);
    b.arg(&dims.0)
        .arg(&dims.1)
        .arg(&dims.2)
        .arg(&dims.3)
        .arg(&eps);
    // One warp per normed head.
    unsafe { b.launch(elementwise(32 * m * (h + kv))) }.w()?;
    Ok(())
}

/// `x + delta` for the f32 residual stream `x` `(M, hidden)` and a block's bf16 output
/// `delta` (None: `x` itself), and with `weight` (f32, `(hidden)`) the RMS norm of that sum
/// times `weight`, as bf16: the next block's input.
pub fn add_rms_norm(
    x: &Tensor,
    delta: Option<&Tensor>,
    weight: Option<&Tensor>,
    eps: f32,
) -> Result<(Tensor, Option<Tensor>)> {
    let (sum, h) = launch_norm(x, delta, weight, true, eps)?;
    Ok((sum.expect("asked for the sum"), h))
}

/// The RMS norm of the f32 residual stream `x` `(M, hidden)` times `weight` (f32,
/// `(hidden)`), as bf16: [`add_rms_norm`] for a stream the projection's GEMM already added
/// to ([`matmul_accumulate`]), which reads the stream once and writes only the norm.
pub fn rms_norm(x: &Tensor, weight: &Tensor, eps: f32) -> Result<Tensor> {
    let (_, h) = launch_norm(x, None, Some(weight), false, eps)?;
    Ok(h.expect("a weight gives a norm"))
}

/// One launch of `add_rms_norm[_v4]`: the sum when `write_sum`, the norm when `weight`.
fn launch_norm(
    x: &Tensor,
    delta: Option<&Tensor>,
    weight: Option<&Tensor>,
    write_sum: bool,
    eps: f32,
) -> Result<(Option<Tensor>, Option<Tensor>)> {
    let dev = cuda_device(x)?;
    let (m, hidden) = x.dims2()?;
    let stream = dev.cuda_stream();
    let x_out = unsafe { dev.alloc::<f32>(if write_sum { m * hidden } else { 1 })? };
    let h_out = unsafe { dev.alloc::<bf16>(if weight.is_some() { m * hidden } else { 1 })? };
    let ptrs = (
        address(x, DType::F32)?,
        delta
            .map(|d| address(d, DType::BF16))
            .transpose()?
            .unwrap_or(0),
        weight
            .map(|w| address(w, DType::F32))
            .transpose()?
            .unwrap_or(0),
    );
    let x_ptr = if write_sum {
        x_out.device_ptr(&stream).0
    } else {
        0
    };
    let h_ptr = if weight.is_some() {
        h_out.device_ptr(&stream).0
    } else {
        0
    };
    // The row in registers with 16-byte accesses where the width and addresses allow it
    // (NORM_VECS float4 per thread in fused.cu), else the scalar kernel.
    const NORM_VECS: usize = 4;
    let threads_v4 = (hidden / 4).div_ceil(NORM_VECS).next_multiple_of(32);
    let vectored = hidden % 4 == 0
        && threads_v4 <= 1024
        && ptrs.0 % 16 == 0
        && ptrs.1 % 8 == 0
        && ptrs.2 % 16 == 0;
    let (func, threads, width) = if vectored {
        (
            function(&dev, "add_rms_norm_v4", 0)?,
            threads_v4 as u32,
            hidden / 4,
        )
    } else {
        (function(&dev, "add_rms_norm", 0)?, THREADS, hidden)
    };
    let hidden32 = width as i32;
    let mut b = stream.launch_builder(&func);
    b.arg(&ptrs.0)
        .arg(&ptrs.1)
        .arg(&ptrs.2)
        .arg(&x_ptr)
        .arg(&h_ptr)
        .arg(&hidden32)
        .arg(&eps);
    let cfg = LaunchConfig {
        grid_dim: (m as u32, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    };
    unsafe { b.launch(cfg) }.w()?;
    let sum = write_sum.then(|| tensor(x_out, &dev, (m, hidden)));
    let h = weight.is_some().then(|| tensor(h_out, &dev, (m, hidden)));
    Ok((sum, h))
}

/// `x @ w` for bf16 `x` `(R, K)` and bf16 `w` `(K, V)`, both contiguous, with f32 results
/// `(R, V)` (cuBLAS GemmEx, f32 accumulation): the output head, whose logits must not be
/// rounded to bf16, from weights held in bf16 (half the memory and reads of f32 weights).
pub fn matmul_f32_out(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    let dev = cuda_device(x)?;
    let (r, v) = (x.dim(0)?, w.dim(1)?);
    let out = tensor(unsafe { dev.alloc::<f32>(r * v)? }, &dev, (r, v));
    gemm_f32_into(x, w, &out, 0.0)?;
    Ok(out)
}

/// `acc += x @ w`, in place, for the f32 residual stream `acc` `(R, V)`, bf16 `x` `(R, K)`
/// and bf16 `w` `(K, V)`, all contiguous: an output or down projection added to the stream
/// in the GEMM's epilogue (cuBLAS's C = A B + C), unrounded, where a bf16 product and a
/// separate add would write the product and read it back. `acc` must be the caller's own
/// buffer (no other tensor may share its storage): it is written through its address.
pub fn matmul_accumulate(acc: &Tensor, x: &Tensor, w: &Tensor) -> Result<()> {
    gemm_f32_into(x, w, acc, 1.0)
}

/// `out = x @ w + beta out` (cuBLAS GemmEx, bf16 inputs, f32 `out` and accumulation).
fn gemm_f32_into(x: &Tensor, w: &Tensor, out: &Tensor, beta: f32) -> Result<()> {
    let dev = cuda_device(x)?;
    let (r, k) = x.dims2()?;
    let (k2, v) = w.dims2()?;
    if k != k2 || out.dims2()? != (r, v) {
        bail!(
            "f32 GEMM: ({r}, {k}) times ({k2}, {v}) into {:?}",
            out.dims()
        );
    }
    if r == 0 {
        return Ok(());
    }
    let (xp, wp, op) = (
        address(x, DType::BF16)?,
        address(w, DType::BF16)?,
        address(out, DType::F32)?,
    );
    let blas = dev.cublas_handle();
    let alpha = 1f32;
    // Column-major view: out^T (V x R) = w^T (V x K, w row-major with ld V) * x^T (K x R).
    // SAFETY: the pointers are live device buffers of the stated sizes, on the handle's stream.
    unsafe {
        cublas::gemm_ex(
            *blas.handle(),
            cublas_sys::cublasOperation_t::CUBLAS_OP_N,
            cublas_sys::cublasOperation_t::CUBLAS_OP_N,
            v as i32,
            r as i32,
            k as i32,
            (&alpha as *const f32).cast(),
            wp as *const std::ffi::c_void,
            cublas_sys::cudaDataType_t::CUDA_R_16BF,
            v as i32,
            xp as *const std::ffi::c_void,
            cublas_sys::cudaDataType_t::CUDA_R_16BF,
            k as i32,
            (&beta as *const f32).cast(),
            op as *mut std::ffi::c_void,
            cublas_sys::cudaDataType_t::CUDA_R_32F,
            v as i32,
            cublas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            cublas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    }
    .map_err(|e| candle_core::Error::Msg(format!("cublasGemmEx: {e:?}")))?;
    Ok(())
}

/// Rows `rows` (u32 indices, `(P)`) of `x` (contiguous bf16 or f32, rows along its first
/// dimension): `(P, ...)`, in one launch. For the last layer of a pass, inside CUDA graphs
/// too, where candle's `index_select` cannot run (it copies the indices' shape from host
/// memory on every call, and a graph's replay would read that freed memory again).
pub fn gather_rows(x: &Tensor, rows: &Tensor) -> Result<Tensor> {
    let dev = cuda_device(x)?;
    let dims = x.dims();
    let Some((_, rest)) = dims.split_first() else {
        bail!("gather_rows: a scalar has no rows");
    };
    let row_bytes = rest.iter().product::<usize>() * x.dtype().size_in_bytes();
    if !row_bytes.is_multiple_of(4) {
        bail!("gather_rows: rows of {row_bytes} bytes are not whole 4-byte words");
    }
    let p = rows.dims1()?;
    if p == 0 {
        bail!("gather_rows: no rows asked for (an empty launch is an invalid argument)");
    }
    let src = address(x, x.dtype())?;
    let idx = address(rows, DType::U32)?;
    let stream = dev.cuda_stream();
    let func = function(&dev, "gather_rows_u32", 0)?;
    let (words, p32) = ((row_bytes / 4) as i32, p as i32);
    let cfg = LaunchConfig {
        grid_dim: (p.min(65_535) as u32, 1, 1),
        block_dim: (128, 1, 1),
        shared_mem_bytes: 0,
    };
    let mut shape = dims.to_vec();
    shape[0] = p;
    macro_rules! gather {
        ($t:ty) => {{
            let out = unsafe { dev.alloc::<$t>(p * row_bytes / std::mem::size_of::<$t>())? };
            let mut b = stream.launch_builder(&func);
            b.arg(&src).arg(&idx).arg(&out).arg(&words).arg(&p32);
            unsafe { b.launch(cfg) }.w()?;
            Ok(tensor(out, &dev, shape))
        }};
    }
    match x.dtype() {
        DType::BF16 => gather!(bf16),
        DType::F32 => gather!(f32),
        other => bail!("gather_rows: {other:?} rows"),
    }
}

/// `silu(gate) * up` for `gu` `(M, 2 I)` bf16 whose columns alternate between `block` gate
/// and `block` up columns (`block` = I: all gate, then all up): `(M, I)` bf16.
pub fn silu_mul(gu: &Tensor, block: usize) -> Result<Tensor> {
    let dev = cuda_device(gu)?;
    let (m, width) = gu.dims2()?;
    let i = width / 2;
    if width % 4 != 0 || block == 0 || !block.is_multiple_of(2) || i % block != 0 {
        bail!("silu_mul: {width} columns do not alternate in blocks of {block}");
    }
    let stream = dev.cuda_stream();
    let out = unsafe { dev.alloc::<bf16>(m * i)? };
    let input = address(gu, DType::BF16)?;
    // Eight outputs per thread with 16-byte accesses where the widths and address allow it
    // (every model here), else pairs.
    let (func, cfg) = if i % 8 == 0 && block.is_multiple_of(8) && input % 16 == 0 {
        (function(&dev, "silu_mul_bf16x8", 0)?, per_row(i / 8, m))
    } else {
        (function(&dev, "silu_mul_bf16", 0)?, elementwise(m * i / 2))
    };
    let (m32, i32_, b32) = (m as i32, i as i32, block as i32);
    let mut b = stream.launch_builder(&func);
    b.arg(&input).arg(&out).arg(&m32).arg(&i32_).arg(&b32);
    unsafe { b.launch(cfg) }.w()?;
    Ok(tensor(out, &dev, (m, i)))
}

/// PTX of the Hopper gate/up kernel; empty unless built for sm_90 (models/build.rs).
const GEMM_SM90_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/gemm_sm90.ptx"));
const GEMM_SM90_MODULE: &str = "decide_gemm_sm90";
const GATE_UP_KERNEL: (&str, &str, &str) = ("gate_up_silu_sm90", GEMM_SM90_MODULE, GEMM_SM90_PTX);

/// The same kernel with each tile's epilogue run during the next tile's first multiplies
/// (`OVERLAP` in gemm_sm90.cu says why).
const GATE_UP_OVERLAP_KERNEL: (&str, &str, &str) =
    ("gate_up_silu_sm90_overlap", GEMM_SM90_MODULE, GEMM_SM90_PTX);

/// The interleave of the weight [`gate_up_silu`] reads: gate and up rows alternate in blocks
/// of this many (`GU_BN / 2` in gemm_sm90.cu).
pub const GATE_UP_BLOCK: usize = 128;

/// Shared memory of one block of the gate/up kernel: `GU_STAGES` slots of a 128 x 64 slice of
/// `h` and a 256 x 64 slice of the weight, a 128 x 128 tile of output for the TMA-store
/// epilogue, and 1 KiB to start on a 1024-byte boundary.
const GATE_UP_SMEM: usize = 4 * (128 + 256) * 64 * 2 + 128 * 128 * 2 + 1024;

/// Whether the gate/up kernel's epilogue stages each tile's output in shared memory and
/// stores it with TMA while the next tile's multiplies run (`tma_store` in gemm_sm90.cu), as
/// against each thread storing its pairs itself. The same values either way. Opt-in
/// (`DECIDE_GATE_UP_TMA_STORE=1`; [`set_gate_up_tma_store`] in-process) until a GPU run
/// measures it: written in session 30 without one.
static GATE_UP_TMA_STORE: Switch = Switch::new("DECIDE_GATE_UP_TMA_STORE", false);

/// Turns the gate/up kernel's TMA-store epilogue on or off for later launches
/// (`kernel_check` runs both ways).
pub fn set_gate_up_tma_store(on: bool) {
    GATE_UP_TMA_STORE.set(on);
}

/// Whether the gate/up kernel writes each tile's output while the next tile's multiplies run
/// (`gate_up_silu_sm90_overlap`), where the hidden width has the 8 weight slices of 64 columns
/// it spreads that over (`GU_SLICES`) and the TMA store is off. The same values bit for bit,
/// and faster at every size kernel_check timed on an H200 (session 31,
/// bench/reports/kernel-lease-3: 8,192 rows 0.663 ms against 0.735, 3,683 rows 0.280 against
/// 0.301, 1,024 rows 0.091 against 0.104), so on unless `DECIDE_GATE_UP_OVERLAP=0`
/// ([`set_gate_up_overlap`] in-process); the probes' `long-no-overlap` measures the prefill
/// without it.
static GATE_UP_OVERLAP: Switch = Switch::new("DECIDE_GATE_UP_OVERLAP", true);

/// Turns the gate/up kernel's overlapped epilogue on or off for later launches
/// (`kernel_check` runs both ways).
pub fn set_gate_up_overlap(on: bool) {
    GATE_UP_OVERLAP.set(on);
}

/// The weight slices of 64 columns the overlapped epilogue is spread over (`GU_SLICES`).
const GATE_UP_OVERLAP_SLICES: usize = 8;

/// The rows of `h` the gate/up kernel's tiles go through in bands (every weight block for one
/// band's rows, then the next band: `tile_at` in gemm_sm90.cu says why), 0 for none, from
/// `DECIDE_GATE_UP_BAND_ROWS` (4,096 unless set; 0 turns the bands off). The default since
/// session 32: the 28k prefill as served took p50 236.8 ms in bands of 4,096 against 238.2
/// without (fastest 234.0 against 236.5; 2,048: 237.2) on an H100, bench/reports/
/// h100-run-14/probes, and kernel_check on an H200 timed 8,192 rows 0.6245 ms against 0.663
/// (overlapped), equal at 7,300 (bench/reports/kernel-lease-3). Run 15, another H100: 243.2
/// against 246.4 without (bench/reports/h100-side-by-side-15/probes).
static GATE_UP_BAND_ROWS: Number = Number::new("DECIDE_GATE_UP_BAND_ROWS", 4096);

/// Sets the gate/up kernel's band of rows for later launches (0: none; `kernel_check` times
/// several).
pub fn set_gate_up_band_rows(rows: usize) {
    GATE_UP_BAND_ROWS.set(rows);
}

/// Whether [`gate_up_silu`] runs on `device` for a hidden width `k` and FFN width `i`: built
/// for and running on Hopper, `k` a multiple of the kernel's 64-column slices and `i` of its
/// [`GATE_UP_BLOCK`].
pub fn gate_up_silu_runs_on(device: &Device, k: usize, i: usize) -> bool {
    gate_up_built_for(device) && k.is_multiple_of(64) && k > 0 && i.is_multiple_of(GATE_UP_BLOCK)
}

/// Whether the gate/up kernel is built and `device` is a Hopper GPU.
fn gate_up_built_for(device: &Device) -> bool {
    matches!(device, Device::Cuda(dev) if !GEMM_SM90_PTX.is_empty() && is_sm90(dev))
}

/// Loads the gate/up kernels where they run (see [`load_attention`]).
pub fn load_gate_up(device: &Device) -> Result<()> {
    match device {
        Device::Cuda(dev) if gate_up_built_for(device) => {
            module_function(dev, GATE_UP_KERNEL, GATE_UP_SMEM)?;
            if GATE_UP_OVERLAP.on() {
                module_function(dev, GATE_UP_OVERLAP_KERNEL, GATE_UP_SMEM)?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// `silu(h Wgate) * (h Wup)` `(M, I)` bf16 in one kernel (gemm_sm90.cu), for `h` `(M, K)`
/// bf16 and the weight `w` `(2 I, K)` bf16 with gate and up rows interleaved in blocks of
/// [`GATE_UP_BLOCK`] (what `silu_mul(h @ w.t(), GATE_UP_BLOCK)` computes, but the product is
/// never written). Only where [`gate_up_silu_runs_on`].
pub fn gate_up_silu(h: &Tensor, w: &Tensor) -> Result<Tensor> {
    let dev = cuda_device(h)?;
    let (m, k) = h.dims2()?;
    let (n, wk) = w.dims2()?;
    let i = n / 2;
    if wk != k || n % 2 != 0 || !gate_up_silu_runs_on(h.device(), k, i) || m == 0 {
        bail!("gate_up_silu: ({m}, {k}) times a ({n}, {wk}) weight does not run here");
    }
    let tma_store = GATE_UP_TMA_STORE.on();
    let overlap = GATE_UP_OVERLAP.on() && !tma_store && k / 64 >= GATE_UP_OVERLAP_SLICES;
    let kernel = if overlap {
        GATE_UP_OVERLAP_KERNEL
    } else {
        GATE_UP_KERNEL
    };
    let func = module_function(&dev, kernel, GATE_UP_SMEM)?;
    let stream = dev.cuda_stream();
    let out = unsafe { dev.alloc::<bf16>(m * i)? };
    let out_addr = out.device_ptr(&stream).0;
    let maps = GateUpMaps::new(
        address(h, DType::BF16)?,
        m,
        address(w, DType::BF16)?,
        n,
        k,
        out_addr,
    )
    .ok_or_else(|| candle_core::Error::Msg("gate_up_silu: TMA refused an operand".into()))?;
    let (m32, i32_, k32) = (m as i32, i as i32, k as i32);
    let tma_store = i32::from(tma_store);
    // The band in 128-row tiles, at least one; all of them for none.
    let m_tiles = m.div_ceil(128);
    let band = match GATE_UP_BAND_ROWS.get() {
        0 => m_tiles,
        rows => rows.div_ceil(128).clamp(1, m_tiles),
    } as i32;
    let mut b = stream.launch_builder(&func);
    b.arg(&maps)
        .arg(&out)
        .arg(&m32)
        .arg(&i32_)
        .arg(&k32)
        .arg(&tma_store)
        .arg(&band);
    // Persistent: one block per multiprocessor, each looping over tiles.
    let tiles = m.div_ceil(128) * (i / GATE_UP_BLOCK);
    let cfg = LaunchConfig {
        grid_dim: (tiles.min(multiprocessors(&dev)) as u32, 1, 1),
        block_dim: (384, 1, 1),
        shared_mem_bytes: GATE_UP_SMEM as u32,
    };
    unsafe { b.launch(cfg) }.w()?;
    Ok(tensor(out, &dev, (m, i)))
}

/// The log-softmax of f32 `logits` `(rows, vocab)` over each row, read at the flat indices
/// `idx` (`row * vocab + id`): `(idx.len())` f32, in one launch (`label_logprobs`).
pub fn label_logprobs(logits: &Tensor, idx: &[u32]) -> Result<Tensor> {
    let dev = cuda_device(logits)?;
    let (rows, vocab) = logits.dims2()?;
    if idx.iter().any(|&i| i as usize >= rows * vocab) {
        bail!("label index outside the ({rows}, {vocab}) logits");
    }
    let func = function(&dev, "label_logprobs", 0)?;
    let stream = dev.cuda_stream();
    let idx_d = stream.clone_htod(idx).w()?;
    let out = unsafe { dev.alloc::<f32>(idx.len())? };
    let logits = address(logits, DType::F32)?;
    let (v, n) = (vocab as i32, idx.len() as i32);
    let mut b = stream.launch_builder(&func);
    b.arg(&logits).arg(&idx_d).arg(&out).arg(&v).arg(&n);
    let cfg = LaunchConfig {
        grid_dim: (rows as u32, 1, 1),
        block_dim: (1024, 1, 1),
        shared_mem_bytes: 0,
    };
    unsafe { b.launch(cfg) }.w()?;
    Ok(tensor(out, &dev, idx.len()))
}

/// The keys of one attention call: cached prefixes side by side, then the pass's own rows.
/// The per-layer address tables are uploaded once per pass ([`KeySources::new`]).
pub struct KeySources {
    /// Per layer, then per prefix: device address of K / V `(1, kv, len, dim)` bf16.
    k_table: CudaSlice<u64>,
    v_table: CudaSlice<u64>,
    starts: CudaSlice<i32>,
    lens: CudaSlice<i32>,
    n_prefix: usize,
    /// First key column of the pass's own rows.
    own_start: usize,
    /// With at most [`MAPPED_PREFIXES`] prefixes and `prefix_maps`: per layer, each
    /// prefix's K and V addresses, length and head stride, for the warp-specialized kernel's
    /// tensor maps ([`KeyMaps`]); empty otherwise.
    mapped_prefixes: Vec<Vec<MappedPrefix>>,
}

impl KeySources {
    /// `prefixes[p]` holds every layer's K and V addresses of prefix `p`
    /// ([`PrefixAddresses`]); `cols[p]` its first key column. Own rows start at `own_start`.
    /// `prefix_maps`: whether launches may encode
    /// tensor maps over the prefixes (when there are at most [`MAPPED_PREFIXES`]); not for
    /// a CUDA graph, whose launches keep the maps of its capture while
    /// [`KeySources::write`] moves the prefixes.
    pub fn new(
        dev: &Device,
        prefixes: &[&PrefixAddresses],
        cols: &[(usize, usize)],
        own_start: usize,
        layers: usize,
        prefix_maps: bool,
    ) -> Result<Self> {
        let Device::Cuda(dev) = dev else {
            bail!("fused kernels run on CUDA");
        };
        let (k_table, v_table, starts, lens) = Self::tables(prefixes, cols, layers)?;
        let stream = dev.cuda_stream();
        let n = prefixes.len();
        let mapped_prefixes = if prefix_maps && (1..=MAPPED_PREFIXES).contains(&n) {
            // The tables hold layer after layer, each with its prefixes in order; `lens` the
            // lengths, then the head strides.
            (0..layers)
                .map(|layer| {
                    (0..n)
                        .map(|p| MappedPrefix {
                            k: k_table[layer * n + p],
                            v: v_table[layer * n + p],
                            rows: cols[p].1,
                            head_rows: lens[n + p] as usize,
                        })
                        .collect()
                })
                .collect()
        } else {
            Vec::new()
        };
        Ok(Self {
            k_table: stream.clone_htod(&k_table).w()?,
            v_table: stream.clone_htod(&v_table).w()?,
            starts: stream.clone_htod(&starts).w()?,
            lens: stream.clone_htod(&lens).w()?,
            n_prefix: prefixes.len(),
            own_start,
            mapped_prefixes,
        })
    }

    /// Writes the tables of other prefixes of the same count and layers (so a captured
    /// graph that reads these buffers can replay over them).
    pub fn write(&mut self, prefixes: &[&PrefixAddresses], cols: &[(usize, usize)]) -> Result<()> {
        if prefixes.len() != self.n_prefix {
            bail!(
                "{} prefixes, the tables hold {}",
                prefixes.len(),
                self.n_prefix
            );
        }
        let layers = self.k_table.len() / self.n_prefix.max(1);
        let (k_table, v_table, starts, lens) = Self::tables(prefixes, cols, layers)?;
        self.mapped_prefixes.clear();
        let stream = self.k_table.stream().clone();
        stream.memcpy_htod(&k_table, &mut self.k_table).w()?;
        stream.memcpy_htod(&v_table, &mut self.v_table).w()?;
        stream.memcpy_htod(&starts, &mut self.starts).w()?;
        stream.memcpy_htod(&lens, &mut self.lens).w()?;
        Ok(())
    }

    /// Per layer then prefix, the K and V addresses; per prefix, first column and length.
    /// Never empty (a zero-length copy is an invalid argument).
    #[allow(clippy::type_complexity)]
    fn tables(
        prefixes: &[&PrefixAddresses],
        cols: &[(usize, usize)],
        layers: usize,
    ) -> Result<(Vec<u64>, Vec<u64>, Vec<i32>, Vec<i32>)> {
        let n = prefixes.len();
        let mut k_table = Vec::with_capacity(layers * n.max(1));
        let mut v_table = Vec::with_capacity(layers * n.max(1));
        for layer in 0..layers {
            for p in prefixes {
                let Some(&(k, v)) = p.layers.get(layer) else {
                    bail!(
                        "a cached prefix holds {} layers, the pass {layers}",
                        p.layers.len()
                    );
                };
                k_table.push(k);
                v_table.push(v);
            }
        }
        // Per prefix, the rows between two kv heads' keys (the same in every layer).
        let strides = prefixes.iter().map(|p| p.head_rows as i32);
        k_table.resize(k_table.len().max(1), 0);
        v_table.resize(v_table.len().max(1), 0);
        let mut starts: Vec<i32> = cols.iter().map(|&(c, _)| c as i32).collect();
        // The lengths, then the head strides (`prefix_len` in fused.cu).
        let mut lens: Vec<i32> = cols.iter().map(|&(_, l)| l as i32).collect();
        lens.extend(strides);
        starts.resize(starts.len().max(1), 0);
        lens.resize(lens.len().max(2), 0);
        Ok((k_table, v_table, starts, lens))
    }
}

/// Overwrites the elements of a contiguous u32 CUDA tensor with `values` (same count), in
/// stream order.
pub fn write_u32(t: &Tensor, values: &[u32]) -> Result<()> {
    if t.elem_count() != values.len() {
        bail!("{} values for a tensor of {}", values.len(), t.elem_count());
    }
    let dev = cuda_device(t)?;
    let dst = address(t, DType::U32)?;
    let stream = dev.cuda_stream();
    // Safety: `dst` is the start of `values.len()` u32 elements owned by `t`, alive here;
    // the copy is ordered on candle's stream like every use of `t`.
    unsafe { cudarc::driver::result::memcpy_htod_async(dst, values, stream.cu_stream()) }.w()?;
    Ok(())
}

/// Attention of queries `q` `(M, heads.q, dim)` over `sources`' prefixes at `layer` plus the
/// pass's own keys and values `(1, kv, N, dim)`, N at least M (more when only some rows'
/// queries are asked for: the last layer of a pass reads out a few rows but every row's keys
/// are seen); row r sees the key columns in `[b[4r], b[4r+1])` and `[b[4r+2], b[4r+3])` of
/// `bounds` (i32, `(M, 4)`). Returns `(M, heads.q * dim)` bf16.
///
/// `block`: the block shape ([`AttentionBlock`]); `plan`: the key split and block order
/// ([`AttentionPlan`], made for this call's rows and bounds with `block`'s shape).
#[allow(clippy::too_many_arguments)]
pub fn attention(
    q: &Tensor,
    (k, v): (&Tensor, &Tensor),
    sources: &KeySources,
    layer: usize,
    bounds: &Tensor,
    heads: Heads,
    block: AttentionBlock,
    plan: AttentionPlan,
) -> Result<Tensor> {
    let dev = cuda_device(q)?;
    let Heads { q: h, kv, dim: d } = heads;
    let m = q.dim(0)?;
    let own_rows = k.dim(2)?;
    if own_rows < m || v.dim(2)? != own_rows {
        bail!("attention: {m} query rows over {own_rows} own key rows");
    }
    let Some(kernel) = block.kernel(d) else {
        bail!("attention kernel {block:?}: head width {d} is not built");
    };
    let smem = block.shared_memory(d);
    let func = module_function(&dev, kernel, smem)?;
    let stream = dev.cuda_stream();
    let out = unsafe { dev.alloc::<bf16>(m * h * d)? };
    let n = sources.n_prefix;
    let at = layer * n;
    let k_table = sources.k_table.slice(at.min(sources.k_table.len() - 1)..);
    let v_table = sources.v_table.slice(at.min(sources.v_table.len() - 1)..);
    let ptrs = (
        address(q, DType::BF16)?,
        address(k, DType::BF16)?,
        address(v, DType::BF16)?,
        address(bounds, DType::U32)?,
    );
    let ints = (
        (h * d) as i32,
        sources.own_start as i32,
        own_rows as i32,
        m as i32,
        n as i32,
        h as i32,
        kv as i32,
    );
    let scale_log2 = (1.0 / (d as f64).sqrt() * std::f64::consts::LOG2_E) as f32;
    let rows = block.rows();
    let splits = plan.splits.max(1);
    // Workspaces for the partials of a split call (one element when unused: never a null
    // argument, never an empty allocation).
    let part_o = unsafe { dev.alloc::<f32>(if splits > 1 { splits * m * h * d } else { 1 })? };
    let part_ml = unsafe { dev.alloc::<f32>(if splits > 1 { splits * m * h * 2 } else { 1 })? };
    let splits32 = splits as i32;
    let mut b = stream.launch_builder(&func);
    b.arg(&ptrs.0)
        .arg(&ints.0)
        .arg(&ptrs.1)
        .arg(&ptrs.2)
        .arg(&ints.1)
        .arg(&ints.2)
        .arg(&ints.3);
    b.arg(&k_table)
        .arg(&v_table)
        .arg(&sources.starts)
        .arg(&sources.lens)
        .arg(&ints.4);
    b.arg(&ptrs.3)
        .arg(&out)
        .arg(&ints.5)
        .arg(&ints.6)
        .arg(&scale_log2);
    b.arg(&splits32).arg(&part_o).arg(&part_ml);
    let maps;
    if block == AttentionBlock::WgmmaSpecialized {
        let prefixes = sources
            .mapped_prefixes
            .get(layer)
            .map_or(&[][..], Vec::as_slice);
        maps = KeyMaps::new((ptrs.1, ptrs.2), own_rows, prefixes, heads);
        b.arg(&maps);
    }
    // The grid's shape tells the kernel in which order its blocks take rows and heads
    // (`block_place` in attention_common.cuh).
    let grid_dim = if plan.longest_first {
        ((m.div_ceil(rows) * h) as u32, 1, splits as u32)
    } else {
        (m.div_ceil(rows) as u32, h as u32, splits as u32)
    };
    let cfg = LaunchConfig {
        grid_dim,
        block_dim: (block.threads(), 1, 1),
        shared_mem_bytes: smem as u32,
    };
    unsafe { b.launch(cfg) }.w()?;
    if splits > 1 {
        let combine = function(&dev, "attention_combine", 0)?;
        let (m32, h32, d32) = (m as i32, h as i32, d as i32);
        let mut b = stream.launch_builder(&combine);
        b.arg(&part_o)
            .arg(&part_ml)
            .arg(&out)
            .arg(&splits32)
            .arg(&m32)
            .arg(&h32)
            .arg(&d32);
        unsafe { b.launch(elementwise(m * h * d)) }.w()?;
    }
    Ok(tensor(out, &dev, (m, h * d)))
}
