//! TMA tensor maps for the Hopper kernels: the warp-specialized attention kernel's (`KeyMaps`
//! in kernels/attention_sm90.cu: which launches get them, and the switch that turns them off)
//! and the gate/up kernel's (`GateUpMaps` in kernels/gemm_sm90.cu). Why its own module: the
//! maps are host-side driver state (encoded per launch with `cuTensorMapEncodeTiled`, passed
//! by value as a kernel parameter), apart from the launchers that take and return tensors.

use candle_core::cuda_backend::cudarc;
use candle_core::cuda_backend::cudarc::driver::DeviceRepr;

use super::Heads;
use crate::switch::Switch;

/// Whether the warp-specialized attention kernel stages key tiles that lie inside one source
/// with TMA (tensor maps, [`KeyMaps`]) rather than with its producer's cp.async copies:
/// `DECIDE_ATTENTION_TMA=0` turns it off, for A/B runs; [`set_tensor_maps`] in-process. On
/// an H200 it made that kernel 2-3% faster on the chunks of a 28k-token prefill and the
/// prefill 251.5 against 255.9 ms (p50 of 5; bench/reports/h200-side-by-side-10/probes).
static TENSOR_MAPS: Switch = Switch::new("DECIDE_ATTENTION_TMA", true);

/// Turns TMA staging of key tiles on or off for later attention launches (`kernel_check`
/// runs both ways).
pub fn set_tensor_maps(on: bool) {
    TENSOR_MAPS.set(on);
}

fn tensor_maps_on() -> bool {
    TENSOR_MAPS.on()
}

/// The most cached prefixes a launch of the warp-specialized kernel reads through tensor maps
/// (`ATT_MAPPED_PREFIXES` in attention_common.cuh): a cache held in pieces
/// ([`crate::forward::KvCache`]) has at most this many.
pub(super) const MAPPED_PREFIXES: usize = 4;

/// The tensor maps one launch of the warp-specialized kernel reads (`KeyMaps` in
/// attention_sm90.cu, same layout): over the pass's own keys and values, and over each of
/// its first [`MAPPED_PREFIXES`] cached prefixes'; `present` bit 0 says the own maps were
/// encoded, bit 1 + p prefix p's.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub(super) struct KeyMaps {
    k_own: [u64; 16],
    v_own: [u64; 16],
    k_prefix: [[u64; 16]; MAPPED_PREFIXES],
    v_prefix: [[u64; 16]; MAPPED_PREFIXES],
    present: i32,
}

// Safety: plain old data, passed by value as a kernel parameter.
unsafe impl DeviceRepr for KeyMaps {}

/// Key tile rows of the warp-specialized kernel (`WG_BN`): a tensor map's box height.
const TMA_BOX_ROWS: usize = 128;

/// A cached prefix's keys and values at one layer, for [`KeyMaps`]: their device addresses,
/// its positions, and the rows from one kv head's to the next's (more than `rows` for a view
/// of a longer cache).
#[derive(Clone, Copy, Debug)]
pub(crate) struct MappedPrefix {
    pub k: u64,
    pub v: u64,
    pub rows: usize,
    pub head_rows: usize,
}

/// A tensor map over K or V `(1, kv, rows, dim)` bf16 at device address `addr` (kv heads
/// `head_rows` rows apart), in boxes
/// of 64 columns x [`TMA_BOX_ROWS`] rows with the 128-byte swizzle (the kernel's tile
/// layout). `None` where TMA cannot serve it (too few rows for one box, a misaligned
/// address, a width other than 64 or 128) or the driver refuses: the kernel then copies
/// those tiles itself.
fn tensor_map(
    addr: u64,
    rows: usize,
    head_rows: usize,
    kv: usize,
    dim: usize,
) -> Option<[u64; 16]> {
    if rows < TMA_BOX_ROWS || !(dim == 64 || dim == 128) {
        return None;
    }
    encode(
        addr,
        &[dim as u64, rows as u64, kv as u64],
        &[(dim * 2) as u64, (head_rows * dim * 2) as u64],
        &[64, TMA_BOX_ROWS as u32, 1],
    )
}

/// `cuTensorMapEncodeTiled` for a bf16 array of `dims` (innermost first) with the byte
/// `strides` of every dimension but the innermost, in boxes of `boxes`, with the 128-byte
/// swizzle; out-of-bounds elements read as zero. `None` if `addr` is not 16-byte aligned or
/// the driver refuses.
fn encode(addr: u64, dims: &[u64], strides: &[u64], boxes: &[u32]) -> Option<[u64; 16]> {
    use cudarc::driver::sys;
    debug_assert!(dims.len() == boxes.len() && strides.len() + 1 == dims.len());
    if !addr.is_multiple_of(16) {
        return None;
    }
    let mut map = sys::CUtensorMap { opaque: [0; 16] };
    let steps = [1u32; 5];
    // Safety: every pointer is to a live array of the rank the call is told; the driver
    // only encodes (it reads no device memory).
    let result = unsafe {
        sys::cuTensorMapEncodeTiled(
            &mut map,
            sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
            dims.len() as u32,
            addr as *mut std::ffi::c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxes.as_ptr(),
            steps.as_ptr(),
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    };
    (result == sys::CUresult::CUDA_SUCCESS).then_some(map.opaque)
}

/// The tensor maps of one launch of the gate/up kernel (`GateUpMaps` in gemm_sm90.cu, same
/// layout): the input `h` `(m, k)` in boxes of 64 columns x 128 rows, the interleaved
/// weight `(2 i, k)` in boxes of 64 x 256, and the output `(m, i)` in boxes of 64 x 128
/// (which the kernel writes through only with its TMA-store epilogue).
#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub(super) struct GateUpMaps {
    h: [u64; 16],
    w: [u64; 16],
    out: [u64; 16],
}

// Safety: plain old data, passed by value as a kernel parameter.
unsafe impl DeviceRepr for GateUpMaps {}

impl GateUpMaps {
    /// `None` where the driver refuses either map (a misaligned address).
    pub(super) fn new(h: u64, m: usize, w: u64, n: usize, k: usize, out: u64) -> Option<Self> {
        let row = (k * 2) as u64;
        let i = n / 2;
        Some(Self {
            h: encode(h, &[k as u64, m as u64], &[row], &[64, 128])?,
            w: encode(w, &[k as u64, n as u64], &[row], &[64, 256])?,
            out: encode(out, &[i as u64, m as u64], &[(i * 2) as u64], &[64, 128])?,
        })
    }
}

impl KeyMaps {
    /// The maps for one launch: the own keys and values `(own, own_rows)` (device addresses
    /// of K and V), and each of `prefixes` at this layer (at most [`MAPPED_PREFIXES`], the
    /// sources' own choice).
    pub(super) fn new(
        own: (u64, u64),
        own_rows: usize,
        prefixes: &[MappedPrefix],
        heads: Heads,
    ) -> Self {
        let mut maps = KeyMaps {
            k_own: [0; 16],
            v_own: [0; 16],
            k_prefix: [[0; 16]; MAPPED_PREFIXES],
            v_prefix: [[0; 16]; MAPPED_PREFIXES],
            present: 0,
        };
        if !tensor_maps_on() {
            return maps;
        }
        let map = |addr, rows, head_rows| tensor_map(addr, rows, head_rows, heads.kv, heads.dim);
        let own_maps = (
            map(own.0, own_rows, own_rows),
            map(own.1, own_rows, own_rows),
        );
        if let (Some(k), Some(v)) = own_maps {
            (maps.k_own, maps.v_own) = (k, v);
            maps.present |= 1;
        }
        for (p, prefix) in prefixes.iter().take(MAPPED_PREFIXES).enumerate() {
            let MappedPrefix {
                k: kp,
                v: vp,
                rows,
                head_rows,
            } = *prefix;
            if let (Some(k), Some(v)) = (map(kp, rows, head_rows), map(vp, rows, head_rows)) {
                (maps.k_prefix[p], maps.v_prefix[p]) = (k, v);
                maps.present |= 2 << p;
            }
        }
        maps
    }
}
