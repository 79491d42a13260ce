//! Compiles `kernels/fused.cu` to PTX with the CUDA toolkit's `nvcc` when the `cuda` feature
//! is on (see ../shared/GPU.md for the toolkit). CPU builds need no toolkit and skip this.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=kernels/fused.cu");
    println!("cargo:rerun-if-env-changed=CUDA_COMPUTE_CAP");
    println!("cargo:rerun-if-env-changed=NVCC");
    if std::env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }
    let out =
        PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("fused.ptx");
    // The kernels use bf16 tensor-core instructions (sm_80 and newer). PTX for the virtual
    // architecture is compiled by the driver for the GPU it meets.
    let cap = std::env::var("CUDA_COMPUTE_CAP").unwrap_or_else(|_| "80".to_string());
    let cap: String = cap.chars().filter(char::is_ascii_digit).collect();
    let nvcc = std::env::var("NVCC").unwrap_or_else(|_| "nvcc".to_string());
    let status = Command::new(&nvcc)
        .args(["--ptx", "-O3", "-std=c++17"])
        .arg(format!("-arch=compute_{cap}"))
        .arg("-o")
        .arg(&out)
        .arg("kernels/fused.cu")
        .status()
        .unwrap_or_else(|e| panic!("cannot run `{nvcc}` to build kernels/fused.cu: {e} (set NVCC or put the CUDA toolkit's nvcc on PATH)"));
    assert!(status.success(), "`{nvcc}` failed on kernels/fused.cu");
}
