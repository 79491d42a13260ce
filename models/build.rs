//! Compiles `kernels/fused.cu` to PTX with the CUDA toolkit's `nvcc` when the `cuda` feature
//! is on (see ../shared/GPU.md for the toolkit), and for Hopper (`CUDA_COMPUTE_CAP` 90)
//! `kernels/attention_sm90.cu` and `kernels/gemm_sm90.cu` too. CPU builds need no toolkit
//! and skip this.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=kernels/fused.cu");
    println!("cargo:rerun-if-changed=kernels/attention_sm90.cu");
    println!("cargo:rerun-if-changed=kernels/attention_common.cuh");
    println!("cargo:rerun-if-changed=kernels/sm90_common.cuh");
    println!("cargo:rerun-if-changed=kernels/gemm_sm90.cu");
    println!("cargo:rerun-if-env-changed=CUDA_COMPUTE_CAP");
    println!("cargo:rerun-if-env-changed=NVCC");
    if std::env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    // The kernels use bf16 tensor-core instructions (sm_80 and newer). PTX for the virtual
    // architecture is compiled by the driver for the GPU it meets.
    let cap = std::env::var("CUDA_COMPUTE_CAP").unwrap_or_else(|_| "80".to_string());
    let cap: String = cap.chars().filter(char::is_ascii_digit).collect();
    nvcc(
        "kernels/fused.cu",
        &format!("compute_{cap}"),
        &out_dir.join("fused.ptx"),
    );
    // wgmma exists on sm_90a only (not on later architectures): PTX for it is built when the
    // target is Hopper, and is empty otherwise (the launcher then never uses it).
    for name in ["attention_sm90", "gemm_sm90"] {
        let ptx = out_dir.join(format!("{name}.ptx"));
        if cap == "90" {
            nvcc(&format!("kernels/{name}.cu"), "compute_90a", &ptx);
        } else {
            std::fs::write(&ptx, "").expect("OUT_DIR is writable");
        }
    }
}

fn nvcc(source: &str, arch: &str, out: &std::path::Path) {
    let nvcc = std::env::var("NVCC").unwrap_or_else(|_| "nvcc".to_string());
    let status = Command::new(&nvcc)
        .args(["--ptx", "-O3", "-std=c++17"])
        .arg(format!("-arch={arch}"))
        .arg("-o")
        .arg(out)
        .arg(source)
        .status()
        .unwrap_or_else(|e| panic!("cannot run `{nvcc}` to build {source}: {e} (set NVCC or put the CUDA toolkit's nvcc on PATH)"));
    assert!(status.success(), "`{nvcc}` failed on {source}");
}
