//! bf16 matmuls through cuBLASLt with an algorithm chosen per shape by timing.
//!
//! Why: the fused forward's four projections per layer ran through candle's
//! `cublasGemmStridedBatchedEx`, which takes cuBLAS's default algorithm for the shape. This
//! module asks cuBLASLt's heuristic for several candidates and lets the caller time them
//! (`layer_bench` does, on the model's shapes), so a shape can run the fastest one instead of
//! the first. A [`Plan`] owns the descriptors of one shape; it is built once and reused.

use std::ffi::c_void;
use std::mem::MaybeUninit;

use candle_core::cuda_backend::cudarc::cublas::sys::cublasOperation_t;
use candle_core::cuda_backend::cudarc::cublaslt::{result as lt, sys};
use candle_core::cuda_backend::cudarc::driver::{CudaSlice, DevicePtr};
use candle_core::cuda_backend::CudaDevice;
use candle_core::{bail, DType, Result, Tensor};

use crate::kernels::{address, cuda_device, tensor};

/// Workspace cuBLASLt may use (NVIDIA's recommendation for Hopper).
const WORKSPACE_BYTES: usize = 32 << 20;

fn lt_err(what: &str, e: impl std::fmt::Debug) -> candle_core::Error {
    candle_core::Error::Msg(format!("cuBLASLt {what}: {e:?}"))
}

/// A cuBLASLt handle and its workspace, on one device's stream.
pub struct LtGemm {
    handle: sys::cublasLtHandle_t,
    workspace: CudaSlice<u8>,
    dev: CudaDevice,
}

// SAFETY: the handle is used only on the device's one stream, as cuBLAS handles are.
unsafe impl Send for LtGemm {}
unsafe impl Sync for LtGemm {}

impl LtGemm {
    pub fn new(dev: &CudaDevice) -> Result<Self> {
        let handle = lt::create_handle().map_err(|e| lt_err("create", e))?;
        // SAFETY: an allocation cuBLASLt only writes to.
        let workspace = unsafe { dev.alloc::<u8>(WORKSPACE_BYTES)? };
        Ok(Self {
            handle,
            workspace,
            dev: dev.clone(),
        })
    }

    /// `x @ w` for contiguous bf16 `x` `(m, k)` with `plan`'s algorithm `algo` (an index into
    /// [`Plan::algos`]). `w` is `(k, n)`, or `(n, k)` when the plan says `w_nk`.
    pub fn matmul(&self, plan: &Plan, algo: usize, x: &Tensor, w: &Tensor) -> Result<Tensor> {
        let (m, k) = x.dims2()?;
        let want = if plan.w_nk {
            (plan.n, plan.k)
        } else {
            (plan.k, plan.n)
        };
        if (m, k) != (plan.m, plan.k) || w.dims2()? != want {
            bail!(
                "lt_gemm: ({m}, {k}) times {:?} on a plan for m {} n {} k {}",
                w.dims2()?,
                plan.m,
                plan.n,
                plan.k
            );
        }
        let dev = cuda_device(x)?;
        let out = unsafe { dev.alloc::<half::bf16>(plan.m * plan.n)? };
        let (xp, wp) = (address(x, DType::BF16)?, address(w, DType::BF16)?);
        let stream = dev.cuda_stream();
        let (op, _g) = out.device_ptr(&stream);
        let (ws, _gw) = self.workspace.device_ptr(&stream);
        let (alpha, beta) = (1f32, 0f32);
        // SAFETY: live device buffers of the plan's sizes, on the device's stream.
        unsafe {
            lt::matmul(
                self.handle,
                plan.desc,
                (&alpha as *const f32).cast(),
                (&beta as *const f32).cast(),
                wp as *const c_void,
                plan.a,
                xp as *const c_void,
                plan.b,
                op as *const c_void,
                plan.c,
                op as *mut c_void,
                plan.c,
                &plan.algos[algo],
                ws as *mut c_void,
                WORKSPACE_BYTES,
                stream.cu_stream() as *mut _,
            )
        }
        .map_err(|e| lt_err("matmul", e))?;
        drop((_g, _gw));
        Ok(tensor(out, &self.dev, (plan.m, plan.n)))
    }
}

impl Drop for LtGemm {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once.
        let _ = unsafe { lt::destroy_handle(self.handle) };
    }
}

/// One shape's descriptors and the algorithms cuBLASLt's heuristic proposes for it, best
/// guess first. Column-major view, as cuBLAS sees row-major tensors: `out^T (n x m) =
/// w^T (n x k) * x^T (k x m)`.
pub struct Plan {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    /// `w` is stored `(n, k)` (each output's weights contiguous, as in GGUF and PyTorch)
    /// rather than `(k, n)`.
    pub w_nk: bool,
    pub algos: Vec<sys::cublasLtMatmulAlgo_t>,
    desc: sys::cublasLtMatmulDesc_t,
    a: sys::cublasLtMatrixLayout_t,
    b: sys::cublasLtMatrixLayout_t,
    c: sys::cublasLtMatrixLayout_t,
}

// SAFETY: descriptors are plain host objects, read-only after `new`.
unsafe impl Send for Plan {}
unsafe impl Sync for Plan {}

impl Plan {
    /// Descriptors for `(m, k) @ w` and up to `count` candidate algorithms.
    pub fn new(
        gemm: &LtGemm,
        shape: (usize, usize, usize),
        w_nk: bool,
        count: usize,
    ) -> Result<Self> {
        let mut plan = Self::descriptors(shape, w_nk)?;
        plan.algos = plan.heuristic(gemm, count)?;
        if plan.algos.is_empty() {
            bail!(
                "cuBLASLt has no algorithm for m {} n {} k {}",
                plan.m,
                plan.n,
                plan.k
            );
        }
        Ok(plan)
    }

    /// Descriptors for `(m, k) @ w` running `algo` alone (found for another `m`), or `None`
    /// when cuBLASLt says the algorithm does not apply to this shape or needs more workspace
    /// than [`LtGemm`] holds.
    pub fn with_algo(
        gemm: &LtGemm,
        shape: (usize, usize, usize),
        w_nk: bool,
        algo: sys::cublasLtMatmulAlgo_t,
    ) -> Result<Option<Self>> {
        let mut plan = Self::descriptors(shape, w_nk)?;
        let mut result = MaybeUninit::<sys::cublasLtMatmulHeuristicResult_t>::uninit();
        // SAFETY: descriptors created above; `result` is written on success.
        let status = unsafe {
            sys::cublasLtMatmulAlgoCheck(
                gemm.handle,
                plan.desc,
                plan.a,
                plan.b,
                plan.c,
                plan.c,
                &algo,
                result.as_mut_ptr(),
            )
        };
        if status != sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
            return Ok(None);
        }
        // SAFETY: written by the successful check.
        let result = unsafe { result.assume_init() };
        if result.state != sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS
            || result.workspaceSize > WORKSPACE_BYTES
        {
            return Ok(None);
        }
        plan.algos = vec![algo];
        Ok(Some(plan))
    }

    /// The shape's descriptors, no algorithms yet.
    fn descriptors((m, n, k): (usize, usize, usize), w_nk: bool) -> Result<Self> {
        let bf16 = sys::cudaDataType_t::CUDA_R_16BF;
        let desc = lt::create_matmul_desc(
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            sys::cudaDataType_t::CUDA_R_32F,
        )
        .map_err(|e| lt_err("desc", e))?;
        let mut plan = Self {
            m,
            n,
            k,
            w_nk,
            algos: Vec::new(),
            desc,
            a: std::ptr::null_mut(),
            b: std::ptr::null_mut(),
            c: std::ptr::null_mut(),
        };
        let layout = |rows: usize, cols: usize| {
            lt::create_matrix_layout(bf16, rows as u64, cols as u64, rows as i64)
                .map_err(|e| lt_err("layout", e))
        };
        // A = w^T (n x k): stored (k, n) row-major it is column-major n x k (op N); stored
        // (n, k) it is column-major k x n, transposed (op T).
        plan.a = if w_nk { layout(k, n)? } else { layout(n, k)? };
        plan.b = layout(k, m)?;
        plan.c = layout(n, m)?;
        let op_a = if w_nk {
            cublasOperation_t::CUBLAS_OP_T
        } else {
            cublasOperation_t::CUBLAS_OP_N
        };
        // SAFETY: the attribute's value is a cublasOperation_t, as documented.
        unsafe {
            lt::set_matmul_desc_attribute(
                plan.desc,
                sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA,
                (&op_a as *const cublasOperation_t).cast(),
                std::mem::size_of::<cublasOperation_t>(),
            )
        }
        .map_err(|e| lt_err("transa", e))?;
        Ok(plan)
    }

    fn heuristic(&self, gemm: &LtGemm, count: usize) -> Result<Vec<sys::cublasLtMatmulAlgo_t>> {
        let pref = lt::create_matmul_pref().map_err(|e| lt_err("pref", e))?;
        let bytes = WORKSPACE_BYTES as u64;
        let mut results: Vec<MaybeUninit<sys::cublasLtMatmulHeuristicResult_t>> =
            (0..count).map(|_| MaybeUninit::uninit()).collect();
        let mut found = 0i32;
        // SAFETY: descriptors created in `new`; `results` holds `count` entries.
        let status = unsafe {
            lt::set_matmul_pref_attribute(
                pref,
                sys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                (&bytes as *const u64).cast(),
                std::mem::size_of::<u64>(),
            )
            .and_then(|()| {
                sys::cublasLtMatmulAlgoGetHeuristic(
                    gemm.handle,
                    self.desc,
                    self.a,
                    self.b,
                    self.c,
                    self.c,
                    pref,
                    count as i32,
                    results.as_mut_ptr().cast(),
                    &mut found,
                )
                .result()
            })
        };
        // SAFETY: created above.
        let _ = unsafe { lt::destroy_matmul_pref(pref) };
        status.map_err(|e| lt_err("heuristic", e))?;
        Ok(results[..found.max(0) as usize]
            .iter()
            // SAFETY: the heuristic wrote the first `found` entries.
            .map(|r| unsafe { r.assume_init() })
            .filter(|r| r.state == sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS)
            .map(|r| r.algo)
            .collect())
    }
}

impl Drop for Plan {
    fn drop(&mut self) {
        // SAFETY: each created once in `new` (null ones were never created).
        unsafe {
            for l in [self.a, self.b, self.c] {
                if !l.is_null() {
                    let _ = lt::destroy_matrix_layout(l);
                }
            }
            let _ = lt::destroy_matmul_desc(self.desc);
        }
    }
}
