//! Launchers for the Hopper projection kernels of `models/kernels/gemm_sm90.cu`: a matmul and
//! the elementwise step after it in one kernel (the SwiGLU gate after the gate/up projection,
//! bias and rotary embedding after the QKV projection). Why their own module: they share the
//! persistent TMA GEMM's launch (tensor maps, one block per multiprocessor, its shared
//! memory) and the weight layouts it reads, apart from the elementwise launchers in
//! [`super`] that they replace on long passes.

use candle_core::cuda_backend::cudarc::driver::{CudaFunction, LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::WrapErr;
use candle_core::{bail, DType, Device, Result, Tensor};
use half::bf16;

use super::tensor_maps::GemmMaps;
use super::{address, cuda_device, is_sm90, module_function, multiprocessors, tensor, Heads};

/// PTX of the Hopper projection kernels; empty unless built for sm_90 (models/build.rs).
const GEMM_SM90_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/gemm_sm90.ptx"));
const GEMM_SM90_MODULE: &str = "decide_gemm_sm90";
const GATE_UP_KERNEL: (&str, &str, &str) = ("gate_up_silu_sm90", GEMM_SM90_MODULE, GEMM_SM90_PTX);
const QKV_KERNEL: (&str, &str, &str) = ("qkv_rope_sm90", GEMM_SM90_MODULE, GEMM_SM90_PTX);

/// The interleave of the weight [`gate_up_silu`] reads: gate and up rows alternate in blocks
/// of this many (half of the kernel's 256-row weight tile).
pub const GATE_UP_BLOCK: usize = 128;

/// Weight rows per tile (`GEMM_BN`) and columns of K per pipeline slot (`GEMM_BK`).
const TILE_ROWS: usize = 256;
const SLICE: usize = 64;

/// Shared memory of one block: `GEMM_STAGES` slots of a 128 x 64 slice of `h` and a 256 x 64
/// slice of the weight, and 1 KiB to start on a 1024-byte boundary.
const SMEM: usize = 4 * (128 + TILE_ROWS) * SLICE * 2 + 1024;

/// Whether the kernels are built and `device` is a Hopper GPU.
fn on_hopper(device: &Device) -> bool {
    matches!(device, Device::Cuda(dev) if !GEMM_SM90_PTX.is_empty() && is_sm90(dev))
}

/// Loads the projection kernels where they run (see [`super::load_attention`]).
pub fn load_projections(device: &Device) -> Result<()> {
    match device {
        Device::Cuda(dev) if on_hopper(device) => {
            module_function(dev, GATE_UP_KERNEL, SMEM)?;
            module_function(dev, QKV_KERNEL, SMEM).map(drop)
        }
        _ => Ok(()),
    }
}

/// What a launch of one of the kernels over `h` `(m, k)` and the weight `w` `(n, k)` needs
/// besides its own arguments: the function, the tensor maps (its first argument), and the
/// grid: one block per multiprocessor, each looping over the 128 x 256 tiles.
fn prepare(
    kernel: (&'static str, &'static str, &'static str),
    h: &Tensor,
    w: &Tensor,
) -> Result<(CudaFunction, GemmMaps, LaunchConfig)> {
    let dev = cuda_device(h)?;
    let (m, k) = h.dims2()?;
    let (n, wk) = w.dims2()?;
    if wk != k || m == 0 || k % SLICE != 0 || n % TILE_ROWS != 0 {
        bail!(
            "{}: ({m}, {k}) times a ({n}, {wk}) weight does not run here",
            kernel.0
        );
    }
    let maps = GemmMaps::new(address(h, DType::BF16)?, m, address(w, DType::BF16)?, n, k)
        .ok_or_else(|| candle_core::Error::Msg(format!("{}: TMA refused an operand", kernel.0)))?;
    let func = module_function(&dev, kernel, SMEM)?;
    let tiles = m.div_ceil(128) * (n / TILE_ROWS);
    let cfg = LaunchConfig {
        grid_dim: (tiles.min(multiprocessors(&dev)) as u32, 1, 1),
        block_dim: (384, 1, 1),
        shared_mem_bytes: SMEM as u32,
    };
    Ok((func, maps, cfg))
}

/// Whether [`gate_up_silu`] runs on `device` for a hidden width `k` and FFN width `i`.
pub fn gate_up_silu_runs_on(device: &Device, k: usize, i: usize) -> bool {
    on_hopper(device) && k.is_multiple_of(SLICE) && k > 0 && i.is_multiple_of(GATE_UP_BLOCK)
}

/// `silu(h Wgate) * (h Wup)` `(M, I)` bf16 in one kernel, for `h` `(M, K)` bf16 and the
/// weight `w` `(2 I, K)` bf16 with gate and up rows interleaved in blocks of
/// [`GATE_UP_BLOCK`] (what `silu_mul(h @ w.t(), GATE_UP_BLOCK)` computes, but the product is
/// never written). Only where [`gate_up_silu_runs_on`].
pub fn gate_up_silu(h: &Tensor, w: &Tensor) -> Result<Tensor> {
    let dev = cuda_device(h)?;
    let m = h.dim(0)?;
    let i = w.dim(0)? / 2;
    if !gate_up_silu_runs_on(h.device(), h.dim(1)?, i) {
        bail!("gate_up_silu: does not run here");
    }
    let (func, maps, cfg) = prepare(GATE_UP_KERNEL, h, w)?;
    let out = unsafe { dev.alloc::<bf16>(m * i)? };
    let (m32, i32_, k32) = (m as i32, i as i32, h.dim(1)? as i32);
    let stream = dev.cuda_stream();
    let mut b = stream.launch_builder(&func);
    b.arg(&maps).arg(&out).arg(&m32).arg(&i32_).arg(&k32);
    unsafe { b.launch(cfg) }.w()?;
    Ok(tensor(out, &dev, (m, i)))
}

/// Whether [`qkv_rope_fused`] runs on `device` for a hidden width `k` and `heads`: heads 128
/// wide rotated in halves (qwen2's style), and both the query and the key widths whole
/// 256-row weight tiles (two heads of one kind per tile).
pub fn qkv_rope_fused_runs_on(device: &Device, k: usize, heads: Heads, interleaved: bool) -> bool {
    on_hopper(device)
        && !interleaved
        && heads.dim == 128
        && (heads.q * heads.dim).is_multiple_of(TILE_ROWS)
        && (heads.kv * heads.dim).is_multiple_of(TILE_ROWS)
        && k.is_multiple_of(SLICE)
        && k > 0
}

/// The QKV projection and [`super::qkv_rope`] in one kernel: `h` `(M, K)` bf16 times `w`
/// `((q + 2 kv) * dim, K)` = `[Wq | Wk | Wv]` transposed, then the same bias, rotation and
/// split (same results: the product is rounded to bf16 first, as the matmul wrote it). Only
/// where [`qkv_rope_fused_runs_on`].
pub fn qkv_rope_fused(
    h: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    (cos, sin): (&Tensor, &Tensor),
    positions: &Tensor,
    heads: Heads,
) -> Result<(Tensor, Tensor, Tensor)> {
    let dev = cuda_device(h)?;
    let (m, k) = h.dims2()?;
    let Heads { q: nh, kv, dim: d } = heads;
    if !qkv_rope_fused_runs_on(h.device(), k, heads, false)
        || w.dim(0)? != (nh + 2 * kv) * d
        || positions.dims1()? != m
    {
        bail!("qkv_rope_fused: does not run here for {heads:?} and {m} rows");
    }
    let (func, maps, cfg) = prepare(QKV_KERNEL, h, w)?;
    let q_out = unsafe { dev.alloc::<bf16>(m * nh * d)? };
    let k_out = unsafe { dev.alloc::<bf16>(m * kv * d)? };
    let v_out = unsafe { dev.alloc::<bf16>(m * kv * d)? };
    let ptrs = (
        bias.map(|b| address(b, DType::F32))
            .transpose()?
            .unwrap_or(0),
        address(cos, DType::F32)?,
        address(sin, DType::F32)?,
        address(positions, DType::U32)?,
    );
    let dims = (m as i32, nh as i32, kv as i32, k as i32);
    let stream = dev.cuda_stream();
    let mut b = stream.launch_builder(&func);
    b.arg(&maps);
    b.arg(&ptrs.0).arg(&ptrs.1).arg(&ptrs.2).arg(&ptrs.3);
    b.arg(&q_out).arg(&k_out).arg(&v_out);
    b.arg(&dims.0).arg(&dims.1).arg(&dims.2).arg(&dims.3);
    unsafe { b.launch(cfg) }.w()?;
    Ok((
        tensor(q_out, &dev, (m, nh, d)),
        tensor(k_out, &dev, (1, kv, m, d)),
        tensor(v_out, &dev, (1, kv, m, d)),
    ))
}
