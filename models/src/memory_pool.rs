//! How much freed device memory the CUDA driver keeps for reuse.
//!
//! candle allocates every tensor with `cuMemAllocAsync` from the device's memory pool (its
//! default one) and frees it back there. That pool's release threshold is 0 by default: at
//! each synchronisation (every read-out waits for its logits) the driver unmaps all of the
//! pool's free memory, and the next pass maps its activations anew. A long prefill allocates
//! and frees gigabytes (its chunks' activations, each chunk's keys concatenated onto the
//! prefix's), and a full prefix cache frees an 800 MiB entry for each 28k-token input it
//! takes in. This module raises the threshold, so the pool keeps what it has mapped (its
//! high-water mark, as PyTorch's caching allocator does) and later passes reuse it.
//!
//! Opt-in (`DECIDE_CUDA_POOL_KEEP=1`) until an H200 run measures it: written in a session
//! without a GPU, it is built for CUDA but has not run yet (bench/h200_side_by_side.sh's
//! `probes` times the 28k prefill with and without it).

use candle_core::cuda_backend::cudarc::driver::sys;
use candle_core::cuda_backend::CudaDevice;
use candle_core::Result;

/// With `DECIDE_CUDA_POOL_KEEP=1`, keeps the memory the device's pool has mapped instead of
/// unmapping it at each synchronisation. Idempotent; a device without memory pools is left
/// as it is.
pub fn keep_freed_memory(dev: &CudaDevice) -> Result<()> {
    if !std::env::var("DECIDE_CUDA_POOL_KEEP").is_ok_and(|v| v == "1") {
        return Ok(());
    }
    let context = dev.cuda_stream().context().clone();
    if !context.has_async_alloc() {
        return Ok(());
    }
    let fail = |what: &str, e: sys::CUresult| {
        candle_core::Error::Msg(format!("CUDA memory pool: {what}: {e:?}"))
    };
    let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
    let mut keep: u64 = u64::MAX;
    // SAFETY: the context is current on this thread (candle binds it when it creates the
    // device); `pool` is written by the call, and the attribute's value is a cuuint64_t.
    unsafe {
        context
            .bind_to_thread()
            .map_err(|e| candle_core::Error::Msg(format!("CUDA context: {e:?}")))?;
        let status = sys::cuDeviceGetMemPool(&mut pool, context.cu_device());
        if status != sys::CUresult::CUDA_SUCCESS {
            return Err(fail("the device's pool", status));
        }
        let status = sys::cuMemPoolSetAttribute(
            pool,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            (&mut keep as *mut u64).cast(),
        );
        if status != sys::CUresult::CUDA_SUCCESS {
            return Err(fail("release threshold", status));
        }
    }
    Ok(())
}
